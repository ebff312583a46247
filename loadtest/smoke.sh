#!/usr/bin/env bash
# smoke.sh -- the load generator's CI smoke (make loadtest-smoke): 20 s of the rebuild-storm scenario on the CPU with the flatness bounds on; exit 0 when every bound held.
#
# What it checks, on a 2-core machine shared with other work:
#   - no request lost, no unexpected answer (the 2% deliberately bad
#     requests must get 4xx), every reload answered 200;
#   - reserved bytes at the end within 1.02x of the mark;
#   - RSS at the end within 10% of the mark;
#   - flatserve exits 0 on SIGTERM (it checks every cache is back to zero).
#
# Closed loop at concurrency 1 (a rebuild every 2 s, so the run rebuilds
# ten times with a request in flight): the server keeps one connection, so
# its per-connection memory is fixed; an open loop's bursts open new
# connections as they reach new peaks, and the RSS that follows would be
# the generator's doing. One connection, not two: with `instances` auto on
# the CPU (one per HTTP thread) two connections run two batches at once,
# and the largest pair of the mixed trace's shapes may first meet after the
# mark -- a new peak of concurrent activations, not a leak, that failed the
# reserved bound in one CI run of two (1.71 -> 2.23 GiB). One connection's
# peak is the largest single shape, met well before the mark.
#
# The mark is at 50% of the run (10 s), not the default 10%, and the RSS
# bound is 10%, not 1%: the CPU server's RSS is only ~8 MiB, and it keeps
# growing in steps of 100-200 KiB for about a minute before it plateaus (a
# 150 s run: +0.22% over its second half). The steps are glibc's per-thread
# malloc arenas: every rebuild runs on a new admin thread and starts the new
# version's batcher workers on new threads, and new threads get new arenas
# until there are 8 per core. With MALLOC_ARENA_MAX=2 in the server's
# environment the same run settles in 10 s and drifts +0.0% to +0.2% after
# the mark. As the server runs today, seventeen trials drifted +0.3% to
# +4.5% after the 50% mark; 10% is twice the worst, and still fails a leak of
# about 70 bytes per request (0.8 MiB over the ~12000 requests after the
# mark).
#
# Environment: BIN (default build/cpu/bin), OUT (default build/loadtest/smoke).
set -euo pipefail

cd "$(dirname "$0")/.."
started=$SECONDS
status=0
OUT=${OUT:-build/loadtest/smoke} DEVICE=cpu loadtest/run_scenario.sh rebuild-storm \
    --duration 20s --concurrency 1 --reload-every-s 2s \
    --warmup-fraction 0.5 --max-reserved-ratio 1.02 --max-rss-drift 0.10 \
    --max-errors 0 "$@" || status=$?
echo "loadtest smoke: $([ "$status" -eq 0 ] && echo PASS || echo "FAIL (status $status)") in $((SECONDS - started)) s"
exit "$status"
