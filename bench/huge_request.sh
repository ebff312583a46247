#!/usr/bin/env bash
# huge_request.sh -- what one huge request does to a server with default
# settings (issue 13): flatserve on the CPU with no config file serves the
# demo `encoder`; one request of [1, SEQ, 64] (default 16384: attention
# scores of 4 x SEQ x SEQ floats, gigabytes of activations) runs, and the
# server's RSS is read before it, right after its answer and every 5 s of
# idle time after that, until idle_trim's `after` (30 s by default) has
# passed; then a request of [1, 2*SEQ, 64], which needs more than the
# default limit on a machine of less than ~40 GiB, and RSS once more.
#
#   bench/huge_request.sh [SEQ] [IDLE_SECONDS]
#
# Environment: BIN (default build/cpu/bin), REPO (default models).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
seq=${1:-16384} idle=${2:-40}
BIN=${BIN:-build/cpu/bin} REPO=${REPO:-models}
dir=$(mktemp -d)
trap 'kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
"$BIN/flatserve" --host 127.0.0.1 --port 0 --device cpu --repository "$REPO" --model encoder \
    > "$dir/server.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 300); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$dir/server.log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "huge_request: flatserve did not start" >&2; cat "$dir/server.log" >&2; exit 2; }
grep -E 'cache|limit|polic' "$dir/server.log" | head -3
rss() {
    curl -s "http://127.0.0.1:$port/metrics" |
        awk '/^process_resident_memory_bytes/ {printf "%.1f MiB", $2 / 1048576}'
}
# request SEQ: posts one [1, SEQ, 64] request of 0.5s; prints status, time, error.
request() {
    python3 -c "import sys; n = int(sys.argv[1]) * 64
sys.stdout.write('{\"inputs\":[{\"name\":\"embeddings\",\"shape\":[1,%s,64],\"datatype\":\"FP32\",\"data\":[' % sys.argv[1])
sys.stdout.write(','.join(['0.5'] * n)); sys.stdout.write(']}]}')" "$1" > "$dir/body.json"
    curl -s -o "$dir/answer.json" -w '%{http_code} in %{time_total} s' \
        -H 'Content-Type: application/json' --data-binary @"$dir/body.json" \
        "http://127.0.0.1:$port/v2/models/encoder/infer"
    echo "; body $(stat -c %s "$dir/body.json") B; $(head -c 300 "$dir/answer.json" | grep -o '"error":.*' || echo answered)"
}
echo "RSS before: $(rss)"
echo "[1,$seq,64]: $(request "$seq")"
echo "RSS right after: $(rss)"
for t in $(seq 5 5 "$idle"); do
    sleep 5
    echo "RSS after ${t} s idle: $(rss)"
done
echo "[1,$((2 * seq)),64]: $(request $((2 * seq)))"
echo "RSS after it: $(rss)"
