#!/bin/sh
# ncu_kernels.sh -- where a model's GPU time goes, kernel by kernel: makes a
# copy of MODEL with its batch dim (and a symbolic second dim) fixed to
# BATCH and SEQ, runs model_bench on it without CUDA graphs under Nsight
# Compute (one metric, gpu__time_duration.sum, for the first COUNT kernel
# launches: load-time kernels, then the warm-up runs), and prints the
# kernels by total time. Compare the sum with model_bench's latency to
# tell kernel time from host time. Run on the GPU machine from the
# repository root, after `eval "$(sh .deps/unpack-debs.sh .deps)"`:
#   sh bench/ncu_kernels.sh MODEL.onnx BATCH SEQ COUNT
# Writes static.onnx (weights stay where MODEL's are: external data is
# found beside it), ncu.csv and ncu.err into MODEL's directory.
set -u
[ $# -eq 4 ] || { echo "usage: ncu_kernels.sh MODEL.onnx BATCH SEQ COUNT" >&2; exit 2; }
m=$1 b=$2 s=$3 n=$4
d=$(dirname $m)
python3 - "$m" "$d/static.onnx" "$b" "$s" <<'PY'
import onnx, sys
m = onnx.load(sys.argv[1], load_external_data=False)
for i in m.graph.input:
    dims = i.type.tensor_type.shape.dim
    if len(dims) > 0: dims[0].dim_value = int(sys.argv[3])
    if len(dims) > 1 and dims[1].HasField("dim_param"): dims[1].dim_value = int(sys.argv[4])
onnx.save(m, sys.argv[2])
PY
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --launch-count $n --csv --print-units base \
  build/cuda/bin/model_bench --device cuda --no-graphs --quick $d/static.onnx > $d/ncu.csv 2> $d/ncu.err
python3 - $d/ncu.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); gi = h.index("Grid Size") if "Grid Size" in h else None
tot = collections.defaultdict(float); cnt = collections.Counter(); mx = {}
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    k = r[ki][:90]; tot[k] += v; cnt[k] += 1; mx[k] = max(mx.get(k, 0), v)
T = sum(tot.values())
print(f"{len(rows)-1} kernels, {T/1e6:.2f} ms total")
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:22]:
    print(f"{v/1e6:9.3f} ms {100*v/T:5.1f}% n={cnt[k]:4d} max={mx[k]/1e6:.3f} {k}")
PY
