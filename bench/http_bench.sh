#!/bin/sh
# http_bench.sh -- flatserve's HTTP throughput and latency against a bare
# libmicrohttpd server (bench/http_hello.c, same daemon setup), with wrk.
#
#   sh bench/http_bench.sh [--device cpu|cuda:N] [--duration 10s] [--threads N]
#                          [--warmup 2s] [--concurrency "1 16 64"] [-- FLATSERVE_FLAG...]
#
# Starts flatserve on 127.0.0.1 (ephemeral port) with the demo repository and
# only the mlp model, and http_hello with the same --threads; then for each
# connection count C runs bench/infer.lua (one MLP batch-1 inference a
# request) against each server, flatserve first, after a warm-up of the same
# shape: wrk -t min(C, nproc) -c C -d DURATION --latency. Flags after -- go
# to flatserve as they are (--max-queue-delay 0s, --policy arena, ...);
# otherwise it runs with its defaults. Prints a Markdown table for
# bench/RESULTS.md on stdout, progress on stderr.
#
# The ratio flatserve/hello is the share of MHD's own ceiling that flatserve
# keeps once routing, the codec, batching and the model run. On a small
# machine wrk shares the cores with the server: compare ratios, not
# absolute figures, across machines. The "CPU us/req" columns are each
# server's user + system CPU time over the measured run (/proc/PID/stat)
# divided by the requests wrk counted: the cost a request, whatever the
# cores. Below the table, flatserve's requests resumed after a wait for
# another thread's batch, and the wake-ups of HTTP threads that resumed
# them (one serves every completion since the thread's last).
#
# Binaries: build/<variant>/bin, the variant matching --device first (cuda
# for cuda:N; cpu, then cuda, for cpu); FLATSERVE_BIN and HELLO_BIN override.
# FLATSERVE_REPOSITORY overrides the repository (default: models, from
# `make`). With FLATSERVE_BIN pointing at an http_hello, that is started as
# http_hello (--port/--threads only): a check of this script with no server
# built; the header says so.
#
# Exit status: 0; 1 when a server does not start, wrk is missing, or
# flatserve answered anything but 2xx (or not at all) in a measured run;
# 2 for a bad argument.
set -eu

die() {
    echo "http_bench: $*" >&2
    exit 1
}

usage() { # STATUS: the usage lines of the header, on stderr unless STATUS is 0
    if [ "$1" -eq 0 ]; then
        sed -n '5,6p' "$0" | sed 's/^#   //'
    else
        sed -n '5,6p' "$0" | sed 's/^#   //' >&2
    fi
    exit "$1"
}

# wrk's and awk's numbers with a decimal point, whatever the caller's locale.
LC_ALL=C
export LC_ALL

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

command_line="sh bench/http_bench.sh${*:+ $*}"
for v in FLATSERVE_BIN HELLO_BIN FLATSERVE_REPOSITORY; do
    eval "val=\${$v:-}"
    [ -n "$val" ] && command_line="$v=$val $command_line"
done

device=""
duration=10s
warmup=2s
threads=4
concurrency="1 16 64"
while [ $# -gt 0 ]; do
    case $1 in
    --help | -h) usage 0 ;;
    --) shift; break ;;
    esac
    [ $# -ge 2 ] || { echo "http_bench: $1 needs a value" >&2; usage 2; }
    case $1 in
    --device) device=$2 ;;
    --duration) duration=$2 ;;
    --warmup) warmup=$2 ;;
    --threads) threads=$2 ;;
    --concurrency) concurrency=$2 ;;
    *) echo "http_bench: unknown argument $1" >&2; usage 2 ;;
    esac
    shift 2
done
case $threads in '' | *[!0-9]* | 0) echo "http_bench: --threads expects a positive integer" >&2; exit 2 ;; esac
for c in $concurrency; do
    case $c in '' | *[!0-9]* | 0) echo "http_bench: --concurrency expects positive integers (connection counts)" >&2; exit 2 ;; esac
done
if [ -z "$device" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        device=cuda:0
    else
        device=cpu
    fi
fi
case $device in
cpu) variants="cpu cuda" ;;
cuda*) variants="cuda" ;;
*) echo "http_bench: --device expects cpu or cuda:N, got $device" >&2; exit 2 ;;
esac

command -v wrk >/dev/null 2>&1 || die "wrk not found. Install the Debian/Ubuntu package: apt-get install wrk
  (no network? ../shared/tools/bundle-debs.sh bundles it with the other .debs)"
command -v curl >/dev/null 2>&1 || die "curl not found (the readiness check uses it): apt-get install curl"

find_bin() { # NAME: the first build/<variant>/bin/NAME of $variants
    for v in $variants; do
        if [ -x "build/$v/bin/$1" ]; then
            echo "build/$v/bin/$1"
            return 0
        fi
    done
    return 1
}
flatserve_bin=${FLATSERVE_BIN:-$(find_bin flatserve)} ||
    die "no flatserve in build/{$(echo "$variants" | tr ' ' ,)}/bin: run make (CUDA=1 for --device cuda), or set FLATSERVE_BIN"
hello_bin=${HELLO_BIN:-$(find_bin http_hello)} ||
    die "no http_hello in build/{$(echo "$variants" | tr ' ' ,)}/bin: run make, or set HELLO_BIN"
repository=${FLATSERVE_REPOSITORY:-models}
stand_in=""
[ "$(basename "$flatserve_bin")" = http_hello ] && stand_in=" (stand-in: http_hello on both sides)"
if [ -z "$stand_in" ] && [ ! -f "$repository/mlp/1/model.onnx" ]; then
    die "$repository/mlp/1/model.onnx not found: run make (it writes the demo models)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/http_bench.XXXXXX")
flatserve_pid=""
hello_pid=""
wrk_pid=""
cleanup() {
    for p in $wrk_pid $flatserve_pid $hello_pid; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $wrk_pid $flatserve_pid $hello_pid; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME LOG CMD...: starts CMD with stderr to LOG, waits for its
# "listening on http://127.0.0.1:PORT" line and for /v2/health/ready to
# answer 200, sets $started_pid and $started_port. Dies with the log's tail
# if the server exits or is not ready within 120 s (loading a model on a GPU
# includes CUDA's start-up).
start_server() {
    name=$1 log=$2
    shift 2
    : >"$log"
    "$@" >"$log" 2>&1 &
    started_pid=$!
    started_port=""
    tries=0
    while :; do
        if ! kill -0 "$started_pid" 2>/dev/null; then
            tail -n 20 "$log" >&2
            die "$name exited during start-up (log above; command: $*)"
        fi
        if [ -z "$started_port" ]; then
            started_port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)
        fi
        if [ -n "$started_port" ] &&
            [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$started_port/v2/health/ready")" = 200 ]; then
            return 0
        fi
        tries=$((tries + 1))
        if [ $tries -ge 1200 ]; then
            tail -n 20 "$log" >&2
            die "$name not ready after 120 s (log above)"
        fi
        sleep 0.1
    done
}

if [ -n "$stand_in" ]; then
    start_server flatserve "$tmp/flatserve.log" "$flatserve_bin" --port 0 --threads "$threads"
else
    start_server flatserve "$tmp/flatserve.log" "$flatserve_bin" --host 127.0.0.1 --port 0 \
        --threads "$threads" --device "$device" --repository "$repository" --model mlp "$@"
fi
flatserve_pid=$started_pid flatserve_port=$started_port
start_server http_hello "$tmp/hello.log" "$hello_bin" --port 0 --threads "$threads"
hello_pid=$started_pid hello_port=$started_port
echo "http_bench: flatserve ($flatserve_bin) on port $flatserve_port, http_hello ($hello_bin) on port $hello_port" >&2

ncpu=$(nproc)
# run_wrk PORT C DURATION OUT: one wrk run, its whole output in OUT. Debian's
# wrk does not open a script given as a bare relative path: it gets an
# absolute one. wrk runs in the background so that a signal's trap runs at
# once (sh defers traps while a foreground command runs) and stops it too.
run_wrk() {
    t=$2
    [ "$t" -gt "$ncpu" ] && t=$ncpu
    wrk -t "$t" -c "$2" -d "$3" -s "$root/bench/infer.lua" --latency "http://127.0.0.1:$1" >"$4" 2>&1 &
    wrk_pid=$!
    wait "$wrk_pid" || { wrk_pid=""; cat "$4" >&2; die "wrk failed against port $1"; }
    wrk_pid=""
    grep -q '^wrk_result ' "$4" || { cat "$4" >&2; die "wrk printed no result line (bench/infer.lua not run?)"; }
}
# cpu_ticks PID: the process's user + system CPU time in clock ticks (the
# fields after the parenthesised command name, which may hold spaces).
cpu_ticks() {
    sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
tck=$(getconf CLK_TCK)
# metric PORT NAME: the value of a sample without labels in /metrics.
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"
}
# field FILE KEY: KEY's value on FILE's wrk_result line.
field() {
    sed -n "/^wrk_result /s/.* $2=\([^ ]*\).*/\1/p" "$1"
}

rows=""
for c in $concurrency; do
    for side in flatserve hello; do
        port=$hello_port pid=$hello_pid
        [ "$side" = flatserve ] && port=$flatserve_port pid=$flatserve_pid
        echo "http_bench: $side, $c connection(s): warm-up $warmup, then $duration" >&2
        run_wrk "$port" "$c" "$warmup" "$tmp/warmup.txt"
        t0=$(cpu_ticks "$pid")
        run_wrk "$port" "$c" "$duration" "$tmp/$side-$c.txt"
        t1=$(cpu_ticks "$pid")
        out=$tmp/$side-$c.txt
        awk -v a="$t0" -v b="$t1" -v t="$tck" -v n="$(field "$out" requests)" \
            'BEGIN { printf "%.1f", (n > 0 ? (b - a) * 1e6 / t / n : 0) }' >"$tmp/$side-$c.cpu"
        if [ "$side" = flatserve ]; then
            bad=$(($(field "$out" non2xx) + $(field "$out" socket_errors)))
            if [ "$bad" -ne 0 ]; then
                cat "$out" >&2
                tail -n 20 "$tmp/flatserve.log" >&2
                die "flatserve: $(field "$out" non2xx) non-2xx answer(s) and $(field "$out" socket_errors) socket error(s) at $c connection(s) (wrk output and server log above)"
            fi
        fi
    done
    f=$tmp/flatserve-$c.txt h=$tmp/hello-$c.txt
    ratio=$(awk -v a="$(field "$f" rps)" -v b="$(field "$h" rps)" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    rows="$rows$(printf '| %s | %.0f | %s | %s | %s | %.0f | %s | %s | %s | %s |' "$c" \
        "$(field "$f" rps)" "$(field "$f" p50_ms)" "$(field "$f" p99_ms)" "$(cat "$tmp/flatserve-$c.cpu")" \
        "$(field "$h" rps)" "$(field "$h" p50_ms)" "$(field "$h" p99_ms)" "$(cat "$tmp/hello-$c.cpu")" "$ratio")
"
done

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
[ -n "$cpu" ] || cpu=$(uname -m)
gpu=""
case $device in cuda*)
    if command -v nvidia-smi >/dev/null 2>&1; then
        gpu=", GPU $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    fi ;;
esac
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), CPU $cpu, nproc $ncpu, device $device$gpu, $threads HTTP threads, commit $commit$stand_in"
echo "\`$command_line\` (wrk $duration a row after a $warmup warm-up; flatserve answered 0 non-2xx)"
echo
echo "| concurrency | flatserve req/s | p50 ms | p99 ms | CPU us/req | hello req/s | p50 ms | p99 ms | CPU us/req | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s' "$rows"
if [ -z "$stand_in" ]; then
    echo
    echo "flatserve over the whole run: $(metric "$flatserve_port" flatserve_http_resumed_total) requests resumed after a wait, by $(metric "$flatserve_port" flatserve_http_resume_wakeups_total) wake-ups"
fi
