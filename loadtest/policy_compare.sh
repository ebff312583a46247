#!/usr/bin/env bash
# policy_compare.sh -- scenario 6: one mixed-shape trace under each release
# policy, and one table of what each did with memory.
#
#   loadtest/policy_compare.sh [--device D] [--model M] [--requests N]
#                              [--batch PICK] [--seq PICK] [--dim SPEC|none]
#                              [--policies "P ..."]
#                              [--watermark-limit SIZE] [--idle DURATION]
#                              [--report]
#
# For each policy (default: cache periodic arena idle_trim watermark
# arena,idle_trim) it starts a fresh flatserve with only model M (default:
# the demo `encoder`) and a config file holding that policy with parameters
# that act within a short run:
#   periodic   every_n_requests 10: the PyTorch recipe's empty_cache every 10
#   idle_trim  after 1s, keep 0
#   watermark  fraction 0.8 of a hard limit of --watermark-limit (default
#              64MiB, for the demo encoder on the CPU); the other runs have
#              no limit
#   cache, arena: no parameters
# --dim replaces the varying dim (default embeddings:1:SEQ, the encoders'
# sequence axis) with loadgen's --dim SPEC, or with none for a model whose
# only varying dim is the batch (the demo mlp and cnn).
# It replays the same shapes with `loadgen --trace-seed 1` (batch then seq
# from splitmix64: the PyTorch baseline's trace) at concurrency 1, then
# samples --idle (default 3s) with no requests, and reads loadgen's CSV. A
# closed loop at concurrency 1 is never idle, so idle_trim acts only in the
# idle time: the last column. The table gives peak allocated and peak
# reserved (the caches' own peaks, which see between samples), reserved at
# the end of the trace and after the idle time, peak reserved over peak
# allocated, device alloc/free calls during the trace, and p50/p99 latency.
#
# It also writes OUT/policies.gp, reserved bytes against requests answered
# for every policy, and draws OUT/policies.png with gnuplot when gnuplot is
# on PATH. --report skips the runs and only prints the table and draws the
# plot from the results already in OUT (the same flags as the run).
#
# Environment: BIN (default build/cpu/bin, or build/cuda/bin for a cuda
# device), REPO (default models), OUT (default build/loadtest/policies).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

device=cpu model=encoder requests=80 batch=1..16 seq=16..256
policies="cache periodic arena idle_trim watermark arena,idle_trim"
wm_limit=64MiB idle=3s report=0 dim=
while [ $# -gt 0 ]; do
    case "$1" in
    --device) device=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --watermark-limit) wm_limit=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    --report) report=1; shift ;;
    *) echo "policy_compare: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
case "$device" in cuda*) def_bin=build/cuda/bin ;; *) def_bin=build/cpu/bin ;; esac
BIN=${BIN:-$def_bin} REPO=${REPO:-models} OUT=${OUT:-build/loadtest/policies}
for b in flatserve loadgen; do
    [ "$report" -eq 1 ] || [ -x "$BIN/$b" ] ||
        { echo "policy_compare: $BIN/$b is not built (make)" >&2; exit 2; }
done
mkdir -p "$OUT"
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null' EXIT

# One policy name -> its config item.
policy_json() {
    case "$1" in
    periodic) printf '{"kind": "periodic", "every_n_requests": 10, "every": "0s"}' ;;
    idle_trim) printf '{"kind": "idle_trim", "after": "1s", "keep": "0"}' ;;
    watermark) printf '{"kind": "watermark", "fraction": 0.8}' ;;
    *) printf '"%s"' "$1" ;;
    esac
}

for p in $policies; do
    [ "$report" -eq 1 ] && break
    d="$OUT/${p//,/+}"
    mkdir -p "$d"
    items="" limit=""
    for k in ${p//,/ }; do
        items="$items${items:+, }$(policy_json "$k")"
        [ "$k" = watermark ] && limit=", \"limit_bytes\": \"$wm_limit\""
    done
    # Bodies of a BERT-sized model at batch 64 x seq 512 are 100 MB.
    printf '{"server": {"max_body": "1GiB"}, "memory": {"policies": [%s]%s}}\n' \
        "$items" "$limit" > "$d/server.json"
    "$BIN/flatserve" --config "$d/server.json" --host 127.0.0.1 --port 0 --device "$device" \
        --repository "$REPO" --model "$model" --log-level info > "$d/server.log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 1 300); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$d/server.log" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "policy_compare: flatserve ($p) did not start:" >&2; tail -5 "$d/server.log" >&2; exit 2; }
    dims=(--dim "${dim:-embeddings:1:$seq}")
    [ "$dim" = none ] && dims=()
    "$BIN/loadgen" --url "http://127.0.0.1:$port" --model "$model" --batch "$batch" \
        "${dims[@]}" --trace-seed 1 --requests "$requests" --duration 3600s \
        --concurrency 1 --encoding binary --sample-interval 0.1s --idle "$idle" --csv "$d/samples.csv" \
        --summary "$d/summary.json" --max-reserved-ratio 100 --max-rss-drift 100 \
        > "$d/loadgen.txt" 2>&1 || echo "policy_compare: loadgen ($p) exit $?" >&2
    kill -TERM "$pid"
    rc=0; wait "$pid" || rc=$?
    pid=""
    [ "$rc" -eq 0 ] || echo "policy_compare: flatserve ($p) exited $rc on SIGTERM" >&2
done

python3 - "$OUT" "$policies" "$device" "$model" "$requests" "$batch" "$seq" "$idle" "$wm_limit" <<'PY'
import csv, json, os, sys
out, policies, device, model, n, batch, seq, idle, wm_limit = sys.argv[1:]
mib = lambda b: b / 2**20
print(f"policy comparison: {model} on {device}, {n} requests of the --trace-seed 1 trace "
      f"(batch {batch}, seq {seq}), concurrency 1, then {idle} idle; watermark's limit {wm_limit}\n")
print(f"| policy | peak allocated | peak reserved | end reserved | after {idle} idle "
      "| peak reserved / peak allocated | device allocs | device frees | p50 ms | p99 ms "
      f"| peak RSS | end RSS | RSS after {idle} idle |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in policies.split():
    d = os.path.join(out, p.replace(",", "+"))
    try:
        rows = list(csv.DictReader(open(os.path.join(d, "samples.csv"))))
        summ = json.load(open(os.path.join(d, "summary.json")))
    except (OSError, ValueError) as e:
        print(f"| {p} | (no result: {e}) |||||||||||")
        continue
    f = lambda r, k: float(r[k])
    traffic = [r for r in rows if r.get("phase", "traffic") == "traffic"] or rows
    pa = max(f(r, "peak_allocated_bytes") for r in traffic)
    pr = max(f(r, "peak_reserved_bytes") for r in traffic)
    end = f(traffic[-1], "reserved_bytes")
    after = f(rows[-1], "reserved_bytes")
    allocs = f(traffic[-1], "device_allocs") - f(traffic[0], "device_allocs")
    frees = f(traffic[-1], "device_frees") - f(traffic[0], "device_frees")
    lat = summ.get("latency_ms", {})
    print(f"| {p} | {mib(pa):.1f} MiB | {mib(pr):.1f} MiB | {mib(end):.1f} MiB | {mib(after):.1f} MiB "
          f"| {pr / pa:.3f} "
          f"| {allocs:.0f} | {frees:.0f} | {lat.get('p50', float('nan')):.1f} "
          f"| {lat.get('p99', float('nan')):.1f} "
          f"| {mib(max(f(r, 'rss_bytes') for r in traffic)):.1f} MiB "
          f"| {mib(f(traffic[-1], 'rss_bytes')):.1f} MiB | {mib(f(rows[-1], 'rss_bytes')):.1f} MiB |")
PY

# The plot: reserved against requests answered, one line per policy.
gp="$OUT/policies.gp"
{
    echo "# policy_compare.sh's plot: re-run with \`gnuplot $gp\`."
    echo "set datafile separator ','"
    echo "set terminal pngcairo size 1200,600 noenhanced"
    echo "set output '$OUT/policies.png'"
    echo "set title 'reserved device memory under each release policy: $model on $device, --trace-seed 1'"
    echo "set xlabel 'requests answered'"
    echo "set ylabel 'MiB'"
    echo "set yrange [0:*]"
    echo "set grid"
    echo "set key outside right top vertical"
    sep="plot"
    for p in $policies; do
        csv="$OUT/${p//,/+}/samples.csv"
        [ -f "$csv" ] || continue
        printf "%s '%s' every ::1 using 2:(\$5/1048576) with lines lw 2 title '%s'" "$sep" "$csv" "$p"
        sep=", \\
    "
    done
    first="$OUT/${policies%% *}"
    first="${first//,/+}/samples.csv"
    [ -f "$first" ] &&
        printf "%s '%s' every ::1 using 2:(\$6/1048576) with lines dt 2 lc rgb 'black' title 'peak allocated'" "$sep" "$first"
    echo
} > "$gp"
if command -v gnuplot > /dev/null; then
    gnuplot "$gp" && echo "policy_compare: wrote $OUT/policies.png" >&2
else
    echo "policy_compare: gnuplot is not on PATH: wrote $gp; no PNG" >&2
fi
