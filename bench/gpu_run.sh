#!/bin/sh
# gpu_run.sh -- the GPU machine's whole job in one call: build the CUDA
# variant from the bundled Debian packages, run every suite on the GPU, run
# the allocator benchmark on the device and on the host, and leave the logs
# in $OUT; then the model benchmark against ONNX Runtime (CPU) at 1 and 8
# threads. Usage (from the repository root, with .deps and .gpu carried;
# .gpu/onnx-tests/light is a copy of ../shared/onnx-tests/light, which does
# not travel):
#   sh bench/gpu_run.sh [all|tests|models]   (default all; each part builds)
set -eu
part=${1:-all}
: "${OUT:=/tmp/flatserve-gpu-out}"
mkdir -p "$OUT"
eval "$(sh .deps/unpack-debs.sh .deps)"
{
    date -u '+%Y-%m-%d %H:%M UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    grep -m1 'model name' /proc/cpuinfo
    nproc
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

echo "=== build (CUDA=1)"
make CUDA=1 WERROR=1 -j"$(nproc)" all > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }

if [ "$part" != models ]; then
echo "=== tests on the GPU"
build/cuda/bin/flatserve-tests > "$OUT/tests.txt" 2>&1 || true
grep -E '^\[FAIL|Synthesis' "$OUT/tests.txt" | head -40
echo "=== the CUDA suites, one line a test (none may skip here)"
build/cuda/bin/flatserve-tests --filter '*cuda*/*' --verbose 2>&1 |
    grep -E '^\[(PASS|FAIL|SKIP)|Synthesis' | grep -v 'Test is disabled' | tee "$OUT/cuda_tests.txt"

echo "=== alloc_bench (cuda)"
build/cuda/bin/alloc_bench --markdown > "$OUT/bench_cuda.md" 2>&1
echo "=== alloc_bench (host provider on the GPU machine's CPU)"
build/cuda/bin/alloc_bench --provider host --markdown > "$OUT/bench_host.md" 2>&1
tail -30 "$OUT/bench_cuda.md"
fi

[ "$part" = tests ] && exit 0
echo "=== model_bench vs ONNX Runtime (CPU execution provider)"
light=.gpu/onnx-tests/light
for t in 1 8; do
    python3 bench/ort_compare.py --bench build/cuda/bin/model_bench --threads "$t" \
        ${light:+--light "$light"} > "$OUT/ort_t$t.md" 2>&1 || echo "ort_compare --threads $t: exit $?"
    tail -25 "$OUT/ort_t$t.md"
done
