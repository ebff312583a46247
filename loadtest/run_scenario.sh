#!/usr/bin/env bash
# run_scenario.sh -- runs one loadtest scenario against a fresh flatserve: starts the server on an ephemeral loopback port, runs loadgen with the scenario, stops the server, returns loadgen's status.
#
#   loadtest/run_scenario.sh NAME [loadgen flags...]
#
# NAME is a file loadtest/scenarios/NAME.conf. Its comment lines say what
# the server needs:
#   # server: FLAGS      flatserve flags for this scenario (--policy cache)
#   # config: JSON       a flatserve config file for this scenario, on one
#                        line (policies with their parameters); written to
#                        OUT/server.json and passed with --config
#   # fallback: FLAGS    loadgen flags used instead when a model the scenario
#                        names is not in the repository (the encoder model
#                        may not exist yet: the fallback runs mlp)
# Flags after NAME go to loadgen and win over the scenario's values.
#
# Environment: BIN (default build/cpu/bin), DEVICE (server --device, default
# cpu), REPO (default models), OUT (default build/loadtest/NAME),
# FLATSERVE_FLAGS (more server flags).
#
# Results in OUT: samples.csv, summary.json, NAME.gp, NAME-memory.png,
# NAME-latency.png, loadgen.txt (the summary), server.log.
#
# Exit status: loadgen's (0 pass, 1 a bound failed, 2 bad usage or no run);
# 1 also when the server does not exit 0 on SIGTERM (it checks on the way
# out that every cache is back to zero bytes); 2 when it does not start.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    echo "usage: loadtest/run_scenario.sh NAME [loadgen flags...]"
    echo "scenarios: $(ls loadtest/scenarios/ | sed -n 's/\.conf$//p' | tr '\n' ' ')"
    exit 2
fi
name=$1
shift
conf=loadtest/scenarios/$name.conf
if [ ! -f "$conf" ]; then
    echo "run_scenario: no scenario '$name' ($conf); there are: $(ls loadtest/scenarios/ | sed -n 's/\.conf$//p' | tr '\n' ' ')" >&2
    exit 2
fi

BIN=${BIN:-build/cpu/bin}
DEVICE=${DEVICE:-cpu}
REPO=${REPO:-models}
OUT=${OUT:-build/loadtest/$name}
for b in flatserve loadgen; do
    if [ ! -x "$BIN/$b" ]; then
        echo "run_scenario: $BIN/$b is missing: run make first" >&2
        exit 2
    fi
done

# shellcheck disable=SC2207 # the flags are words, as in the file
server_flags=($(sed -n 's/^# server:[[:space:]]*//p' "$conf"))
fallback=$(sed -n 's/^# fallback:[[:space:]]*//p' "$conf")
missing=""
for m in $(sed -n 's/^[[:space:]]*model[[:space:]]*=[[:space:]]*\([^:#[:space:]]*\).*/\1/p' "$conf"); do
    [ -d "$REPO/$m" ] || missing="$missing $m"
done
extra=()
if [ -n "$missing" ]; then
    if [ -z "$fallback" ]; then
        echo "run_scenario: $name: model(s)$missing not in $REPO, and the scenario has no fallback" >&2
        exit 2
    fi
    echo "run_scenario: $name: model(s)$missing not in $REPO: running the scenario's fallback: $fallback"
    # shellcheck disable=SC2206
    extra=($fallback)
fi

mkdir -p "$OUT"
config=$(sed -n 's/^# config:[[:space:]]*//p' "$conf")
if [ -n "$config" ]; then
    printf '%s\n' "$config" > "$OUT/server.json"
    server_flags=(--config "$OUT/server.json" "${server_flags[@]}")
fi
token="loadtest-$$-$RANDOM"
log="$OUT/server.log"
# shellcheck disable=SC2086 # FLATSERVE_FLAGS is a list of words
"$BIN/flatserve" --host 127.0.0.1 --port 0 --repository "$REPO" --device "$DEVICE" \
    --admin-token "$token" "${server_flags[@]}" ${FLATSERVE_FLAGS:-} >"$log" 2>&1 &
pid=$!
# Whatever happens below, the server does not outlive the script.
trap 'kill -TERM "$pid" 2>/dev/null' EXIT

url=""
for _ in $(seq 1 600); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n 1 | sed 's/^listening on //')
    [ -n "$url" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
        break
    fi
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "run_scenario: flatserve did not start; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 2
fi
echo "run_scenario: $name: flatserve ${server_flags[*]} at $url (pid $pid), results in $OUT/"

"$BIN/loadgen" --scenario "$conf" --url "$url" --admin-token "$token" \
    --csv "$OUT/samples.csv" --summary "$OUT/summary.json" --plot "$OUT/$name" \
    "${extra[@]}" "$@" | tee "$OUT/loadgen.txt"
status=${PIPESTATUS[0]}

kill -TERM "$pid"
wait "$pid"
srv=$?
trap - EXIT
if [ "$srv" -ne 0 ]; then
    echo "run_scenario: flatserve exited $srv on SIGTERM, expected 0; the end of $log:" >&2
    tail -n 20 "$log" >&2
    [ "$status" -eq 0 ] && status=1
else
    echo "run_scenario: flatserve stopped cleanly (exit 0)"
fi
exit "$status"
