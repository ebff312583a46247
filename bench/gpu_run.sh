#!/bin/sh
# gpu_run.sh -- the GPU machine's whole job in one call: build the CUDA
# variant from the bundled Debian packages, then run the selected parts and
# leave the logs in $OUT. Usage (from the repository root, with .deps and
# .gpu carried; .gpu/onnx-tests.tar.xz is ../shared/onnx-tests packed with
# `tar -C ../shared -cJf .gpu/onnx-tests.tar.xz onnx-tests`, since ../shared
# does not travel):
#   sh bench/gpu_run.sh PART...   (default: all)
# Parts:
#   tests   every Criterion suite on the GPU (the CUDA ones must not skip)
#   conf    the conformance runner with --device cuda, against the CPU's list
#   zoo     the same over the model zoo (tests/zoo), against its CPU list,
#           then again at --precision fp16 and bf16 (reports of the error
#           against the fp32 references)
#   fullexport  bench/full_exports.py export: BERT-base, GPT-2, ViT-B/16 and a
#           1B-class Llama at full size (FULL_MODELS: a comma list of them),
#           through PyTorch's dynamo exporter, with PyTorch eager's latency and
#           peak memory, into /tmp/fsfull (not .gpu, which each call's carry
#           replaces); a model exported already is kept, so this spans calls
#   fullretime  PyTorch's figures again on those exports (export --retime)
#   full    bench/full_exports.py measure on those: conformance --device cuda
#           (loads, matches PyTorch) and model_bench, the report in full.md
#   alloc   the allocator benchmark on the device and on the host
#   cuda    model_bench on the GPU (demo + light models), graphs on and off
#   bigcompare  the same on the large exports: torch_ref.py (--quick) exports
#           BERT-base and ResNet-50 into .gpu/onnx, then both trees' model_bench
#           run them at fp32 and fp16 (--quick), alternating
#   torch   bench/torch_ref.py: the CUDA engine against PyTorch eager
#           (TORCH_ARGS: more flags, e.g. --quick)
#   compare-resnet, compare-bert, compare-vit, compare-gpt2  (named only, not
#           part of `all`) bench/torch_compare.py run on that model: flatserve
#           beside PyTorch eager and torch.compile(mode="reduce-overhead") at
#           batch 1, 8, 64 x fp32, tf32, fp16, bf16, with peak memory and the
#           error against PyTorch's fp32 output. The export, the cases and every
#           measured row stay in /tmp/fscmp (not .gpu, not $OUT), and the script
#           starts no step that would end past this call's budget (CALL_BUDGET_S,
#           default 560 s from this script's start, the build included), so the
#           same part run again on the warm machine goes on where it stopped;
#           COMPARE_ARGS: more flags (e.g. --precisions fp16,bf16 --retry-failed)
#   compare-all  (named only) the four at once, each on its own GPU and its own
#           share of the CPUs (taskset), when nvidia-smi lists at least four
#           GPUs; one after another otherwise. The report says when rows were
#           measured beside other models
#   compare-report  (no build) the report of every row in /tmp/fscmp, merged
#   ort     model_bench on the CPU against ONNX Runtime at 1 and 8 threads
#   server  the server suites on the GPU (device auto: cuda:0), then the
#           server itself on cuda:0 answering curl
#   http    bench/http_bench.sh on cuda:0 and on the CPU (wrk from .deps)
#   gpus    (named only) issue 16: the BERT-base encoder served on cuda:0,
#           then on cuda:0,1 (a BERT-large-sized encoder), throughput under the same closed loop and each
#           device's bytes from /metrics (needs two GPUs)
#   bert    issue 6's comparison: a BERT-base-sized encoder exported by
#           loadtest/torch_baseline.py, served by flatserve on cuda:0 under
#           the mixed trace (batch 1..64, seq 16..512, --trace-seed 1), then
#           PyTorch eager on the same trace, plain and with empty_cache
#   policies  scenario 6 on the same BERT-base encoder: loadtest/
#           policy_compare.sh on cuda:0, BERT_REQUESTS (default 300) of the
#           trace under each release policy, watermark's limit 3GiB
#   idle    scenario 5 (idle trim) on cuda:0
#   soak    scenarios 3 and 4 on cuda:0, started in the background in their
#           own process session (setsid) so that they run on through the
#           next calls while the machine stays warm: the rebuild storm
#           (binary bodies, up to 1M requests or STORM_SECONDS, default
#           1080) and the load/unload cycles (1000, or CYCLES_SECONDS,
#           default 1080). Their results go to /tmp/fsgpu (not $OUT, which
#           each call empties).
#   cycles  scenario 4 alone in the background, twice side by side: as
#           the server runs by default (CUDA's lazy module loading) and with
#           CUDA_MODULE_LOADING=EAGER, to tell RSS the driver takes for
#           kernels first used late from RSS the server keeps
#   wait    (no build) waits up to WAIT_SECONDS (default 560) for the
#           background soaks, printing their progress
#   collect (no build) packs /tmp/fsgpu into $OUT/soak.tar.gz
#   compare the same model_bench runs (COMPARE_ARGS: more flags, e.g.
#           --quick) on an earlier tree and on this one,
#           alternating (after, before, after, before), on cuda and on the
#           CPU: .gpu/before.tar.gz is that tree, packed with
#           `git archive REV | gzip > .gpu/before.tar.gz`; built once per
#           machine into .gpu/before
set -eu
call_start=$(date +%s)
parts=${*:-all}
: "${OUT:=/tmp/flatserve-gpu-out}"
mkdir -p "$OUT"
has() { case " $parts " in *" $1 "* | *" all "*) return 0 ;; esac; return 1; }
# The parts that `all` leaves out: only when named.
named() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
eval "$(sh .deps/unpack-debs.sh .deps)"
# The bundle's libcurl is older than this machine's curl program: run that
# with the machine's own libraries.
mkdir -p .gpu/bin
printf '#!/bin/sh\nexec env -u LD_LIBRARY_PATH /usr/bin/curl "$@"\n' > .gpu/bin/curl
chmod +x .gpu/bin/curl
PATH=$PWD/.gpu/bin:$PATH
{
    date -u '+%Y-%m-%d %H:%M UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    grep -m1 'model name' /proc/cpuinfo
    nproc
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
if [ -f .gpu/onnx-tests.tar.xz ] && [ ! -d .gpu/onnx-tests ]; then
    tar -C .gpu -xJf .gpu/onnx-tests.tar.xz
fi
tests=.gpu/onnx-tests
light=$tests/light
FLATSERVE_ONNX_TESTS=$PWD/$tests
export FLATSERVE_ONNX_TESTS

# The earlier tree of `compare` builds beside this one's.
before_build() {
    [ -x .gpu/before/build/cuda/bin/model_bench ] && return 0
    rm -rf .gpu/before && mkdir -p .gpu/before && tar -C .gpu/before -xzf .gpu/before.tar.gz &&
        (cd .gpu/before && make CUDA=1 WERROR=1 -j"$(nproc)" build/cuda/bin/model_bench \
            models/mlp/1/model.onnx > "$OUT/build_before.txt" 2>&1)
}
if has compare || has bigcompare; then
    before_build &
    before_pid=$!
fi
# Runs `model_bench FLAG V ARGS` in this tree and the earlier one, alternating
# (after, before, after, before), for each V of the list VALUES, into
# DIR/{after,before}_V_ROUND.{json,md}: alternate DIR FLAG VALUES ARGS...
alternate() {
    out=$1 flag=$2 values=$3
    shift 3
    mkdir -p "$out"
    for round in 1 2; do
        for side in after before; do
            tree=.; [ "$side" = before ] && tree=.gpu/before
            for v in $values; do
                (cd "$tree" && build/cuda/bin/model_bench "$flag" "$v" "$@" \
                    --json "$out/${side}_${v}_$round.json") > "$out/${side}_${v}_$round.md" 2>&1 ||
                    echo "model_bench $side $flag $v: exit $?"
            done
        done
    done
}

# Waits for the earlier tree's build (once; later calls find it done).
wait_before() {
    wait "$before_pid" 2>/dev/null || true
    [ -x .gpu/before/build/cuda/bin/model_bench ] || { tail -20 "$OUT/build_before.txt"; exit 1; }
}

needs_build=false
for p in $parts; do
    case $p in wait | collect | compare-report) ;; *) needs_build=true ;; esac
done
if $needs_build; then
    echo "=== build (CUDA=1)"
    start=$(date +%s)
    make CUDA=1 WERROR=1 -j"$(nproc)" all > "$OUT/build.txt" 2>&1 || { grep -E 'error|Error' "$OUT/build.txt" | head -40; exit 1; }
    echo "built in $(( $(date +%s) - start )) s"
fi

# The port a flatserve started with --port 0 logs to LOG once it listens
# (empty after 30 s): port=$(server_port LOG).
server_port() {
    for _ in $(seq 1 300); do
        p=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1
    done
}

# The BERT-base-sized encoder of issue 6, exported once per machine.
bert_export() {
    mkdir -p .gpu/bert-repo/encoder_bert/1
    [ -f .gpu/bert-repo/encoder_bert/1/model.onnx ] ||
        python3 loadtest/torch_baseline.py --arch bert-base \
            --export .gpu/bert-repo/encoder_bert/1/model.onnx > "$OUT/bert_export.txt" 2>&1 ||
        { tail -5 "$OUT/bert_export.txt"; exit 1; }
}

if has tests; then
    echo "=== tests on the GPU"
    build/cuda/bin/flatserve-tests -j8 > "$OUT/tests.txt" 2>&1 || true
    grep -E '^\[FAIL|Synthesis' "$OUT/tests.txt" | head -60
    echo "=== the CUDA suites, one line a test (none may skip here)"
    build/cuda/bin/flatserve-tests --filter '*cuda*/*' --verbose 2>&1 |
        grep -E '^\[(PASS|FAIL|SKIP)|Synthesis' | grep -v 'Test is disabled' > "$OUT/cuda_tests.txt"
    grep -E '^\[(FAIL|SKIP)|Synthesis' "$OUT/cuda_tests.txt" | head -60
    grep -E 'precision:|tf32 vs fp32' "$OUT/tests.txt" | head -20
    echo "=== failed assertions"
    grep -E '^\[----\] [a-z/_]+\.c:[0-9]+: ' "$OUT/tests.txt" | cut -c1-400 | head -60
fi

if has conf; then
    echo "=== conformance on cuda (every case the CPU passes must pass)"
    build/cuda/bin/conformance --device cuda -j"$(nproc)" --expect tests/conformance/expected_pass.txt \
        --update-expect "$OUT/cuda_pass.txt" "$tests" > "$OUT/conf_cuda.txt" 2>&1 || true
    grep -E '^FAIL' "$OUT/conf_cuda.txt" | head -80
    tail -4 "$OUT/conf_cuda.txt"
fi

if has zoo; then
    echo "=== the model zoo on cuda (every case the CPU passes must pass)"
    build/cuda/bin/conformance --device cuda -j"$(nproc)" --expect tests/zoo/expected_pass.txt \
        --update-expect "$OUT/zoo_cuda_pass.txt" --report "$OUT/zoo_cuda.csv" tests/zoo \
        > "$OUT/zoo_cuda.txt" 2>&1 || true
    grep -E '^FAIL' "$OUT/zoo_cuda.txt" | head -40
    tail -6 "$OUT/zoo_cuda.txt"
    # fp16/bf16 GEMM weights against the fp32 references: the worst error of
    # each case goes to the report (issue 14's "error against fp32").
    for prec in fp16 bf16; do
        echo "=== the model zoo on cuda at --precision $prec"
        build/cuda/bin/conformance --device cuda --precision "$prec" -j"$(nproc)" \
            --report "$OUT/zoo_cuda_$prec.csv" tests/zoo > "$OUT/zoo_cuda_$prec.txt" 2>&1 || true
        grep -E '^FAIL' "$OUT/zoo_cuda_$prec.txt" | head -20
        tail -4 "$OUT/zoo_cuda_$prec.txt"
    done
fi

full_dir=/tmp/fsfull
if has fullexport; then
    echo "=== full-size exports into $full_dir"
    python3 bench/full_exports.py export --out "$full_dir" ${FULL_MODELS:+--models "$FULL_MODELS"} \
        > "$OUT/full_export.txt" 2>&1 || echo "full_exports.py export: exit $?"
    grep -E '^full_exports:' "$OUT/full_export.txt" | cut -c1-400
fi

if has fullretime; then
    echo "=== full-size exports: PyTorch timed again"
    python3 bench/full_exports.py export --retime --out "$full_dir" ${FULL_MODELS:+--models "$FULL_MODELS"} \
        > "$OUT/full_retime.txt" 2>&1 || echo "full_exports.py export --retime: exit $?"
    grep -E '^full_exports:' "$OUT/full_retime.txt" | cut -c1-400
fi

if has full; then
    echo "=== full-size exports: flatserve on cuda against PyTorch"
    python3 bench/full_exports.py measure --out "$full_dir" ${FULL_MODELS:+--models "$FULL_MODELS"} \
        --json "$OUT/full.json" > "$OUT/full.md" 2> "$OUT/full.err" || echo "full_exports.py measure: exit $?"
    cat "$OUT/full.md"
    tail -5 "$OUT/full.err"
    cp "$full_dir"/conformance.txt "$OUT/full_conformance.txt" 2>/dev/null || true
fi

if has alloc; then
    echo "=== alloc_bench (cuda, then the host provider on this machine's CPU)"
    build/cuda/bin/alloc_bench --markdown > "$OUT/bench_cuda.md" 2>&1
    build/cuda/bin/alloc_bench --provider host --markdown > "$OUT/bench_host.md" 2>&1
    tail -30 "$OUT/bench_cuda.md"
fi

if has cuda; then
    echo "=== model_bench on cuda (graphs on, then off)"
    build/cuda/bin/model_bench --device cuda --markdown --light "$light" > "$OUT/model_cuda.md" 2>&1 || true
    build/cuda/bin/model_bench --device cuda --no-graphs --markdown --light "$light" \
        > "$OUT/model_cuda_nographs.md" 2>&1 || true
    tail -32 "$OUT/model_cuda.md"
    grep -E '^\| *[a-z_0-9]+ *\| *1 ' "$OUT/model_cuda_nographs.md" || tail -20 "$OUT/model_cuda_nographs.md"
fi

if has torch; then
    echo "=== PyTorch eager vs the CUDA engine"
    # shellcheck disable=SC2086 # TORCH_ARGS is a list of flags
    python3 bench/torch_ref.py --bench build/cuda/bin/model_bench --out-json "$OUT/torch_ref.json" ${TORCH_ARGS:-} \
        > "$OUT/torch_ref.md" 2> "$OUT/torch_ref.err" || echo "torch_ref.py: exit $?"
    tail -60 "$OUT/torch_ref.md"
    tail -5 "$OUT/torch_ref.err"
fi

# bench/torch_compare.py on one model: compare_one MODEL [extra flags...]; its
# report in $OUT/compare_MODEL.md, its rows (all saved so far) in .json.
compare_dir=/tmp/fscmp
compare_one() {
    m=$1
    shift
    left=$(( ${CALL_BUDGET_S:-560} - ($(date +%s) - call_start) ))
    if [ "$left" -lt 90 ]; then
        echo "torch_compare $m: not started, $left s left of this call"
        return 0
    fi
    # shellcheck disable=SC2086 # launch (a taskset prefix) and COMPARE_ARGS are lists of words
    ${launch:-} python3 bench/torch_compare.py run --models "$m" --work "$compare_dir" --end-by-s "$left" \
        --bench build/cuda/bin/model_bench --conformance build/cuda/bin/conformance \
        --out-json "$OUT/compare_$m.json" "$@" ${COMPARE_ARGS:-} \
        > "$OUT/compare_$m.md" 2> "$OUT/compare_$m.err" || echo "torch_compare $m: exit $?"
}
compare_show() {
    grep -E '^\| |^- (FAILED|Missed|Left|Rows)' "$OUT/compare_$1.md" | cut -c1-400
    tail -3 "$OUT/compare_$1.err" 2> /dev/null || true
}

for pm in resnet:resnet50 bert:bert vit:vit gpt2:gpt2; do
    named "compare-${pm%%:*}" || continue
    m=${pm#*:}
    echo "=== flatserve vs PyTorch eager and torch.compile: $m"
    compare_one "$m"
    compare_show "$m"
done

if named compare-all; then
    models="resnet50 bert vit gpt2"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [ "$ngpu" -ge 4 ]; then
        echo "=== flatserve vs PyTorch eager and torch.compile: the four models at once on GPUs 0-3"
        per=$(( $(nproc) / 4 ))
        [ "$per" -ge 1 ] || per=1
        i=0
        for m in $models; do
            others=$(echo "$models" | tr ' ' '\n' | grep -vx "$m" | tr '\n' ' ')
            (
                export CUDA_VISIBLE_DEVICES=$i TORCHINDUCTOR_COMPILE_THREADS=$per
                export TORCH_COMPARE_CONCURRENT="beside ${others% } on other GPUs of the host, $per CPUs each"
                if [ "$(nproc)" -ge 4 ] && command -v taskset > /dev/null; then
                    launch="taskset -c $((i * per))-$((i * per + per - 1))"
                fi
                compare_one "$m"
            ) &
            i=$((i + 1))
        done
        wait
    else
        echo "=== flatserve vs PyTorch eager and torch.compile: the four models one after another ($ngpu GPU)"
        for m in $models; do
            compare_one "$m"
        done
    fi
    for m in $models; do
        echo "--- $m"
        compare_show "$m"
    done
fi

if named compare-report; then
    echo "=== torch_compare.py: the report of every row in $compare_dir"
    python3 bench/torch_compare.py report "$compare_dir" > "$OUT/compare_report.md" || echo "report: exit $?"
    cat "$OUT/compare_report.md"
fi

if has ort; then
    echo "=== model_bench vs ONNX Runtime (CPU execution provider)"
    for t in 1 8; do
        python3 bench/ort_compare.py --bench build/cuda/bin/model_bench --threads "$t" \
            --light "$light" > "$OUT/ort_t$t.md" 2>&1 || echo "ort_compare --threads $t: exit $?"
        tail -25 "$OUT/ort_t$t.md"
    done
fi

if has server; then
    echo "=== the server suites on the GPU (models on cuda:0)"
    build/cuda/bin/flatserve-tests --filter 'srv_*/*' -j1 > "$OUT/server_tests.txt" 2>&1 || true
    grep -E '^\[(FAIL|----)|Synthesis' "$OUT/server_tests.txt" | cut -c1-300 | head -40
    echo "=== flatserve on cuda:0, answering curl"
    build/cuda/bin/flatserve --host 127.0.0.1 --port 8000 --repository models \
        > "$OUT/server_log.txt" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        curl -sf http://127.0.0.1:8000/v2/health/ready > /dev/null 2>&1 && break
        sleep 0.1
    done
    body=$(python3 -c 'import json; print(json.dumps({"inputs":[{"name":"input","shape":[2,64],"datatype":"FP32","data":[0.01*i for i in range(128)]}]}))')
    curl -s -X POST http://127.0.0.1:8000/v2/models/mlp/infer -d "$body" | head -c 400; echo
    curl -s http://127.0.0.1:8000/v2/models/mlp/config | head -c 400; echo
    curl -s http://127.0.0.1:8000/metrics > "$OUT/metrics.txt" || true
    grep -E '^(nv_gpu_memory|flatserve_model_memory_bytes|flatserve_memory_reserved_bytes\{device="cuda)' "$OUT/metrics.txt" | head -12
    kill -TERM "$pid"
    rc=0; wait "$pid" || rc=$?
    echo "flatserve exit: $rc"
    tail -5 "$OUT/server_log.txt"
fi

if has http; then
    echo "=== HTTP benchmark (flatserve /infer vs a bare libmicrohttpd hello server)"
    for dev in cuda:0 cpu; do
        for delay in default 0s; do
            f="$OUT/http_${dev%%:*}_$delay.md"
            if [ "$delay" = default ]; then
                sh bench/http_bench.sh --device "$dev" --duration 8s > "$f" 2>&1 || echo "http_bench $dev: exit $?"
            else
                sh bench/http_bench.sh --device "$dev" --duration 8s -- --max-queue-delay "$delay" \
                    > "$f" 2>&1 || echo "http_bench $dev delay $delay: exit $?"
            fi
            tail -7 "$f"
        done
    done
fi

if named gpus; then
    # Issue 16: one GPU-bound model on one GPU, then on two (an instance on
    # each, requests spread by the batcher): a BERT-large-sized encoder
    # (24 x 1024) at fp32, batch 8 x seq 128 per request (4 MiB in, 4 MiB
    # out, binary; BERT-base's 3 + 3 MiB for a third of the work made the
    # host's HTTP path the bound at about 270 requests/s), a closed loop of
    # GPUS_CONC (default 16) clients for GPUS_SECONDS (default 20) each,
    # then each device's bytes from /metrics.
    echo "=== issue 16: throughput on one GPU and on two"
    mkdir -p .gpu/large-repo/encoder_bert/1
    [ -f .gpu/large-repo/encoder_bert/1/model.onnx ] ||
        python3 loadtest/torch_baseline.py --arch bert-large \
            --export .gpu/large-repo/encoder_bert/1/model.onnx > "$OUT/large_export.txt" 2>&1 ||
        { tail -5 "$OUT/large_export.txt"; exit 1; }
    # GPUS_CONFIG: the server's config file (default: only a body bound).
    gcfg=${GPUS_CONFIG:-}
    [ -n "$gcfg" ] || gcfg='{"server": {"max_body": "64MiB"}}'
    printf '%s\n' "$gcfg" > .gpu/gpus.json
    cat .gpu/gpus.json
    for devs in cuda:0 cuda:0,1; do
        log="$OUT/gpus_$devs.log"
        build/cuda/bin/flatserve --config .gpu/gpus.json --host 127.0.0.1 --port 0 --device "$devs" \
            --repository .gpu/large-repo --model encoder_bert > "$log" 2>&1 &
        spid=$!
        port=$(server_port "$log")
        common="--url http://127.0.0.1:$port --model encoder_bert --batch 8 --dim embeddings:1:128 --encoding binary"
        build/cuda/bin/loadgen $common --concurrency "${GPUS_CONC:-16}" --duration 3s > /dev/null 2>&1 || true
        build/cuda/bin/loadgen $common --concurrency "${GPUS_CONC:-16}" --duration "${GPUS_SECONDS:-20}s" \
            --summary "$OUT/gpus_$devs.json" > "$OUT/gpus_$devs.txt" 2>&1 || echo "loadgen ($devs): exit $?"
        echo "--- $devs: $(grep -E '^throughput' "$OUT/gpus_$devs.txt")"
        grep -E '^(latency|requests)' "$OUT/gpus_$devs.txt"
        curl -s "http://127.0.0.1:$port/metrics" |
            grep -E '^(flatserve_memory_allocated_bytes\{.*kind="device".*pool="all"|flatserve_model_memory_bytes|nv_gpu_memory_used_bytes)' | head -12
        curl -s "http://127.0.0.1:$port/v2/models/encoder_bert/config" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("config:", d["parameters"]["device"], d["instance_group"])'
        kill -TERM "$spid"
        rc=0; wait "$spid" || rc=$?
        echo "flatserve ($devs) exit: $rc"
        grep -E "loaded on|ERROR" "$log" | head -4
    done
    python3 - "$OUT/gpus_cuda:0.json" "$OUT/gpus_cuda:0,1.json" <<'PY' || true
import json, sys
one, two = (json.load(open(f)) for f in sys.argv[1:3])
def tp(d):
    for k in ("throughput_per_s",):
        for v in d.values() if isinstance(d, dict) else []:
            if isinstance(v, dict) and k in v:
                return v[k]
    return d.get("throughput_per_s")
a, b = tp(one), tp(two)
print("scaling: %.1f -> %.1f answers/s = %.2fx" % (a, b, b / a))
PY
fi

if has bert; then
    echo "=== issue 6: flatserve vs PyTorch eager, BERT-base encoder, mixed trace"
    n=${BERT_REQUESTS:-300}
    policies=${BERT_POLICIES:-arena}
    d="$OUT/bert"
    # Batch 64 x seq 512 x 768 floats is a 100 MB body.
    printf '{"server": {"max_body": "512MiB"}}\n' > .gpu/bert.json
    mkdir -p "$d"
    bert_export
    for policy in $policies; do
        mkdir -p "$d/$policy"
        build/cuda/bin/flatserve --config .gpu/bert.json --host 127.0.0.1 --port 0 --device cuda:0 \
            --repository .gpu/bert-repo --model encoder_bert --policy "$policy" \
            --max-batch-size 64 > "$d/$policy/server.log" 2>&1 &
        spid=$!
        port=$(server_port "$d/$policy/server.log")
        build/cuda/bin/loadgen --url "http://127.0.0.1:$port" --model encoder_bert \
            --batch 1..64 --dim embeddings:1:16..512 --trace-seed 1 --requests "$n" \
            --duration 600s --concurrency 1 --encoding binary --sample-interval 0.2s \
            --csv "$d/$policy/samples.csv" --summary "$d/$policy/summary.json" \
            --plot "$d/$policy/flatserve" > "$d/$policy.txt" 2>&1 || echo "loadgen ($policy): exit $?"
        # Where a request's time went, server side: the statistics
        # extension's totals (queue, input copy, compute, output copy).
        curl -s "http://127.0.0.1:$port/v2/models/encoder_bert/stats" > "$d/$policy/stats.json" &&
            python3 -c 'import json,sys
s = json.load(open(sys.argv[1]))["model_stats"][0]["inference_stats"]
print("server-side means over %d requests:" % s["success"]["count"], ", ".join(
    "%s %.2f ms" % (k, s[k]["ns"] / max(1, s[k]["count"]) / 1e6)
    for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")))' "$d/$policy/stats.json" ||
            echo "stats: none"
        kill -TERM "$spid"
        rc=0; wait "$spid" || rc=$?
        echo "flatserve ($policy) exit: $rc"
        grep -E "^(requests|throughput|latency|memory|  RSS|verdict)" "$d/$policy.txt"
    done
    python3 loadtest/torch_baseline.py --arch bert-base --requests "$n" --seed 1 --out-dir "$d" \
        --flatserve-csv "$d/${policies%% *}/samples.csv" --plot "$d/memory.png" \
        > "$d/torch.txt" 2>&1 || echo "torch_baseline: exit $?"
    tail -25 "$d/torch.txt"
fi

if has policies; then
    echo "=== issue 6, scenario 6: release policies on the BERT-base encoder, cuda:0"
    bert_export
    OUT="$OUT/policies" REPO=.gpu/bert-repo BIN=build/cuda/bin \
        loadtest/policy_compare.sh --device cuda:0 --model encoder_bert \
        --requests "${BERT_REQUESTS:-300}" --batch 1..64 --seq 16..512 \
        --watermark-limit 3GiB --idle 3s > "$OUT/policies.md" 2> "$OUT/policies.err" ||
        echo "policy_compare: exit $?"
    cat "$OUT/policies.md"
    tail -5 "$OUT/policies.err"
fi

if has idle; then
    echo "=== issue 6, scenario 5: idle trim on cuda:0"
    OUT="$OUT/idle" BIN=build/cuda/bin DEVICE=cuda:0 \
        loadtest/run_scenario.sh idle-trim > "$OUT/idle.txt" 2>&1 || echo "idle-trim: exit $?"
    grep -E "^(requests|throughput|memory|  RSS|idle|verdict|  (ok|FAIL) )" "$OUT/idle.txt"
fi

# The background soaks: each in its own process session, so the call
# returning does not end it; results in $soak_dir, not $OUT, which each
# call empties.
soak_dir=/tmp/fsgpu
soak_reset() {
    rm -rf "$soak_dir"
    mkdir -p "$soak_dir"
}
# soak_bg NAME SCENARIO [loadgen flags...]
soak_bg() {
    name=$1 sc=$2
    shift 2
    OUT="$soak_dir/$name" BIN=build/cuda/bin DEVICE=cuda:0 setsid \
        loadtest/run_scenario.sh "$sc" --sample-interval 2s "$@" \
        > "$soak_dir/$name.txt" 2>&1 < /dev/null &
}
soak_started() {
    date -u '+started %H:%M:%S UTC' | tee "$soak_dir/started.txt"
    sleep 20
    tail -n 2 "$soak_dir"/*.txt
}
soaks_running() {
    pgrep -f 'run_scenario.sh (rebuild-storm|load-unload)' > /dev/null
}

if has soak; then
    echo "=== issue 6, scenarios 3 and 4 on cuda:0, in the background (results in $soak_dir)"
    soak_reset
    soak_bg rebuild-storm rebuild-storm --encoding binary --requests 1000000 \
        --duration "${STORM_SECONDS:-1080}s"
    soak_bg load-unload load-unload --cycles 1000 --duration "${CYCLES_SECONDS:-1080}s"
    soak_started
fi

if has cycles; then
    echo "=== issue 6, scenario 4 on cuda:0, lazy and eager module loading, in the background"
    soak_reset
    soak_bg load-unload-lazy load-unload --cycles 1000
    export CUDA_MODULE_LOADING=EAGER
    soak_bg load-unload-eager load-unload --cycles 1000
    unset CUDA_MODULE_LOADING
    soak_started
fi

if has compare; then
    echo "=== the tree before (.gpu/before.tar.gz) against this one: model_bench, alternating"
    wait_before
    d="$OUT/compare"
    # shellcheck disable=SC2086 # COMPARE_ARGS is a list of flags
    alternate "$d" --device "cuda cpu" --markdown ${COMPARE_ARGS:-} --light "$PWD/$light"
    python3 bench/compare_runs.py "$d" | tee "$OUT/compare.md"
fi

if has bigcompare; then
    echo "=== the tree before against this one on BERT-base and ResNet-50, fp32 and fp16"
    wait_before
    mkdir -p .gpu/onnx
    python3 bench/torch_ref.py --models bert,resnet50 --batches 64 --precisions fp16 --quick \
        --onnx-dir .gpu/onnx --bench build/cuda/bin/model_bench > "$OUT/torch_quick.md" \
        2> "$OUT/torch_quick.err" || echo "torch_ref.py: exit $?"
    d="$OUT/bigcompare"
    alternate "$d" --precision "fp32 fp16" --device cuda --quick "$PWD/.gpu/onnx/bert.onnx" \
        "$PWD/.gpu/onnx/resnet50.onnx"
    python3 bench/compare_runs.py "$d" | tee "$OUT/bigcompare.md"
fi

if has wait; then
    end=$(( $(date +%s) + ${WAIT_SECONDS:-560} ))
    while [ "$(date +%s)" -lt "$end" ] && soaks_running; do
        sleep 30
        date -u '+%H:%M:%S'
        for f in "$soak_dir"/*.txt; do
            [ "$f" = "$soak_dir/started.txt" ] || grep -E '^loadgen: +[0-9.]+ s' "$f" | tail -n 1
        done
    done
    soaks_running && echo "still running" || echo "both soaks have ended"
fi

if has collect; then
    for f in "$soak_dir"/*.txt; do
        [ "$f" = "$soak_dir/started.txt" ] && continue
        echo "=== $f"
        grep -E "^(requests|  ok|throughput|latency|reloads|cycles|  device drift|  RSS|memory|flatness|  reserved|verdict|  (ok|FAIL) |run_scenario)" "$f" | head -30
    done
    tar -C /tmp -czf "$OUT/soak.tar.gz" fsgpu
    ls -la "$OUT"
fi
