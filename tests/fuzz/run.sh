#!/usr/bin/env bash
# run.sh -- runs libFuzzer targets for $FUZZ_TIME seconds each (make fuzz-run):
#
#   FUZZ_TIME=60 tests/fuzz/run.sh codec onnx run config model_config pbtxt
#
# Each target starts from its committed seeds and regressions
# (tests/fuzz/corpus/<t>, tests/fuzz/regressions/<t>; libFuzzer runs them
# all first) and writes what it discovers to build/fuzz/corpus/<t>, never
# into the committed folders. A crash, a leak, a timeout or a broken
# contract stops that target with its input saved under
# build/fuzz/artifacts/<t>/; the script goes on with the others and exits
# 1 if any failed. One job per target; the options per target are below.
set -uo pipefail

cd "$(dirname "$0")/../.."
FUZZ_TIME=${FUZZ_TIME:-60}
BIN=${FUZZ_BIN:-build/fuzz/bin}
[ $# -gt 0 ] || set -- codec onnx run config model_config pbtxt

failed=()
for t in "$@"; do
    exe=$BIN/fuzz-$t
    if [ ! -x "$exe" ]; then
        echo "fuzz-run: $exe is missing (make fuzz builds it)"
        exit 1
    fi
    # Largest input tried: a request or config of a few KiB, models up to
    # the run target's own bound (fuzz_run.c skips larger ones anyway).
    case $t in
        onnx | run) max_len=16384 ;;
        codec) max_len=8192 ;;
        *) max_len=4096 ;;
    esac
    # Per input: 10 s is far past what any target needs (fuzz_run.c bounds
    # its models); more is a hang to report.
    opts=(-max_total_time="$FUZZ_TIME" -timeout=10 -rss_limit_mb=2048 -max_len=$max_len
          -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$t/")
    dict=tests/fuzz/dict/${t/run/onnx}.dict
    [ -f "$dict" ] && opts+=(-dict="$dict")
    mkdir -p "build/fuzz/corpus/$t" "build/fuzz/artifacts/$t"
    dirs=("build/fuzz/corpus/$t" "tests/fuzz/corpus/$t")
    [ -d "tests/fuzz/regressions/$t" ] && dirs+=("tests/fuzz/regressions/$t")
    echo "=== fuzz $t: ${FUZZ_TIME}s"
    log=build/fuzz/$t.log
    "$exe" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1
    rc=$?
    # libFuzzer's summary: executions, their rate, the coverage reached.
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" "$log"
    grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)" "$log" | tail -n 2
    if [ $rc -ne 0 ]; then
        echo "FAIL: fuzz $t exited $rc; its log is $log, the input under build/fuzz/artifacts/$t/:"
        grep -E "ERROR|SUMMARY|fuzz_[a-z_]+_one:|Test unit written" "$log" | head -n 20
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz-run: failed: ${failed[*]}"
    exit 1
fi
echo "fuzz-run: every target ran ${FUZZ_TIME}s without a crash"
