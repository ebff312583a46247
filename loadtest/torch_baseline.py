#!/usr/bin/env python3
"""torch_baseline.py -- the PyTorch eager baseline of flatserve's memory-flatness proof (issue 6).

Runs a mixed-shape trace of transformer-encoder requests through PyTorch
eager under torch.inference_mode(), twice -- `plain`, and `empty_cache`
(torch.cuda.empty_cache() after every 10th request) -- sampling
torch.cuda.memory_reserved() and memory_allocated() after every request,
and plots PyTorch's reserved curves next to flatserve's under the same
trace. It measures; it asserts nothing (exit 0 whatever the figures).

USAGE (on the GPU machine; --print-trace and --plot-only need no torch)

  # 1. the model, exported for flatserve (same architecture, same weights):
  python3 loadtest/torch_baseline.py --arch bert-base --export REPO/encoder_bert/1/model.onnx
  # 2. flatserve serves REPO under the same trace; its load generator writes
  #    flatserve.csv (columns elapsed_s, requests, reserved_bytes,
  #    allocated_bytes)
  # 3. PyTorch under the same trace, and the plot:
  python3 loadtest/torch_baseline.py --arch bert-base --requests 300 --seed 1 \\
      --out-dir results/ --flatserve-csv flatserve.csv --plot results/memory.png
  # re-plot later (other flatserve CSV, no GPU needed):
  python3 loadtest/torch_baseline.py --arch bert-base --out-dir results/ --plot-only \\
      --flatserve-csv flatserve.csv --plot results/memory.png
  # the trace itself, to check a reimplementation against it:
  python3 loadtest/torch_baseline.py --print-trace --requests 10 --seed 1

Options: --arch demo|bert-base|bert-large, --layer hand|torch, --requests N (300),
--seed S (1), --batch LO..HI (1..64), --seq LO..HI (16..512), --device
cuda|cuda:N|cpu, --dtype float32|float16|bfloat16, --weights-seed S (0),
--empty-cache-every K (10), --out-dir DIR (.), --flatserve-csv FILE,
--plot PNG, --plot-only, --export PATH, --print-trace. --help says more.

THE MODELS. A pre-norm transformer encoder on hidden states (no
embeddings, no mask, no dropout), input "embeddings" [batch, seq, hidden],
output "hidden" [batch, seq, hidden]:
  --arch demo       2 layers, hidden 64, 4 heads, FFN 256, LayerNorm eps 1e-5:
                    the architecture of flatserve's demo model `encoder`
                    (tools/make_models.c; its weights differ)
  --arch bert-base  12 layers, hidden 768, 12 heads, FFN 3072, eps 1e-12
  --arch bert-large 24 layers, hidden 1024, 16 heads, FFN 4096, eps 1e-12
Each layer: x += O(attention(LN1(x))); x += FF2(gelu(FF1(LN2(x)))), with
attention = softmax(Q K^T / sqrt(head_dim)) V over separate Q/K/V Linears
and GELU by erf. `--layer hand` (default) writes it with nn.Linear,
nn.LayerNorm, matmul, softmax and gelu: the eager loop runs exactly the
graph that --export writes (LayerNormalization, MatMul, Add, Mul, Softmax,
Transpose, Div/Erf/Mul for GELU, and Shape/Gather/Unsqueeze/Concat/Reshape
for the head split, so no seq is baked in). `--layer torch` runs
nn.TransformerEncoder(nn.TransformerEncoderLayer(norm_first=True,
batch_first=True, activation="gelu", dropout=0)) instead: PyTorch's own
layer, which under inference_mode takes its fused fast path (bert-base on
an H200: peak allocated 1.21 GB against the hand-written layer's 2.59 GB,
reserved 3.14 GB against 9.89 GB). It cannot be
exported for flatserve: with torch 2.11's TorchScript exporter (fast path
off), MultiheadAttention's export bakes the example's seq into its Reshape
targets, so the file runs at that seq alone (ONNX Runtime and flatserve
both refuse another); --export refuses --layer torch. Weights:
torch.manual_seed(--weights-seed) before building, PyTorch's default
init, eval mode.

EXPORT (--export PATH): on the CPU in float32, torch.onnx.export with the
TorchScript exporter where the installed torch still has it
(dynamo=False), else the dynamo exporter; opset 17, input "embeddings",
output "hidden", dynamic axes {0: "batch", 1: "seq"} on both. Parent
directories are created (give REPO/NAME/1/model.onnx for a flatserve
repository). The op types of the export are printed when `onnx` imports,
and when onnxruntime and numpy import the export is run at (1, 16) and
(3, 37) and compared with PyTorch (relative L2 error must be <= 1e-4, else
exit 1). --export does only that and exits.

THE TRACE. Request i (0-based) has batch b_i and seq s_i drawn from ONE
splitmix64 stream whose 64-bit state starts at --seed, b_i first, then s_i:
    next():  state = (state + 0x9E3779B97F4A7C15) mod 2^64
             z = state
             z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2^64
             z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2^64
             return z ^ (z >> 31)
    uniform(lo, hi) = lo + next() mod (hi - lo + 1)      (bounds inclusive)
    b_i = uniform(batch_lo, batch_hi); s_i = uniform(seq_lo, seq_hi)
(the modulo's bias is below 2^-54 for these ranges). With --seed 1,
--batch 1..64, --seq 16..512 the first five requests are (batch, seq) =
(2, 450), (31, 366), (58, 354), (38, 187), (41, 426); in C:
    uint64_t st = seed;  b = 1 + next(&st) % 64;  s = 16 + next(&st) % 497;
The inputs' values are torch.randn from a generator seeded with --seed
(they do not affect memory); each request copies its [b, s, hidden] slice
of a pinned host buffer to the device, runs the model and copies the
output back, as a server would.

THE RUNS. Before each run: one warm-up request at (batch_lo, seq_lo),
then torch.cuda.empty_cache() and reset_peak_memory_stats(). `plain` runs
the trace; `empty_cache` runs it again calling torch.cuda.empty_cache()
after every --empty-cache-every requests (its time is in the CSV's
empty_cache_ms, not in latency_ms). Both runs are in one process, one
after the other, on the same weights. With --device cpu (for a smoke test
without a GPU) the same loop runs on the CPU; PyTorch's CPU allocator has
no reserved/allocated counters, so reserved_bytes is the process's RSS
(/proc/self/statm) and allocated_bytes is left empty.

OUTPUT (in --out-dir; ARCH is demo or bert-base):
  torch_ARCH_plain.csv, torch_ARCH_empty_cache.csv -- one row a request:
      requests (1-based count), batch, seq, tokens, elapsed_s (since the
      run's first request began), latency_ms (copy in, forward, copy out),
      empty_cache_ms, allocated_bytes, reserved_bytes,
      max_allocated_bytes (running peak), max_reserved_bytes
  torch_ARCH_summary.json -- the trace and environment, and per run:
      peak_allocated_bytes, peak_reserved_bytes, end_reserved_bytes,
      reserved_at_10pct_bytes (after request ceil(N/10)),
      peak_reserved_over_peak_allocated, end_reserved_over_peak_allocated,
      latency p50/p99/mean ms (nearest rank), baseline bytes after the
      warm-up; with --flatserve-csv also flatserve's peak reserved and
      allocated and the issue's two targets: flatserve peak reserved <=
      1.05x its peak allocated, and <= 0.35x PyTorch plain's end reserved.
--flatserve-csv reads a CSV with a header row; it uses `requests` (else
the row number) as x, `reserved_bytes` (needed to plot) and
`allocated_bytes` (optional: its maximum is flatserve's peak allocated).
--plot PNG draws reserved GB against requests for PyTorch plain, PyTorch
empty_cache and flatserve, with each one's peak allocated as a dashed
line: with matplotlib when it imports, else a gnuplot script (PNG.gp
beside the PNG, data in PNG.*.dat) run by gnuplot when it is on PATH,
else it says it skipped the plot.

Exit status: 0; 1 when the export check failed or a run failed (the
message says where); 2 for bad arguments, or when torch (or CUDA, for
--device cuda) is missing.
"""
import argparse
import csv
import datetime
import inspect
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

ARCHS = {
    "demo": {"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "eps": 1e-5},
    "bert-base": {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "eps": 1e-12},
    "bert-large": {"layers": 24, "hidden": 1024, "heads": 16, "ffn": 4096, "eps": 1e-12},
}
OPSET = 17
RUNS = ("plain", "empty_cache")
EXPORT_CHECK_SHAPES = ((1, 16), (3, 37))
EXPORT_TOLERANCE = 1e-4
# The targets.
TARGET_FLAT = 1.05          # flatserve peak reserved / its peak allocated
TARGET_VS_TORCH = 0.35      # flatserve peak reserved / PyTorch plain end reserved
MASK64 = (1 << 64) - 1
GB = 1e9


def log(msg):
    print(f"torch_baseline: {msg}", file=sys.stderr, flush=True)


# ---- the trace (no torch needed) ----------------------------------------------------------

class SplitMix64:
    """splitmix64 (Steele, Lea, Flood 2014), as in tools/make_models.c; the docstring has it."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self, lo, hi):
        return lo + self.next() % (hi - lo + 1)


def make_trace(n, seed, batch, seq):
    """[(batch, seq)] * n: batch then seq from one splitmix64 stream seeded with `seed`."""
    rng = SplitMix64(seed)
    trace = []
    for _ in range(n):
        b = rng.uniform(*batch)
        s = rng.uniform(*seq)
        trace.append((b, s))
    return trace


def range_arg(s):
    """argparse type for LO..HI (inclusive, 1 <= LO <= HI); also a single N."""
    parts = s.split("..")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': want LO..HI, e.g. 1..64")
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"'{s}': want 1 <= LO <= HI")
    return lo, hi


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="The docstring at the top of this file gives the trace's generator, "
                                       "the CSV columns and the summary's figures.")
    p.add_argument("--arch", choices=sorted(ARCHS), default="demo",
                   help="demo: flatserve's demo encoder (2x64, 4 heads, FFN 256); "
                        "bert-base: 12x768, 12 heads, FFN 3072; bert-large: 24x1024, 16 heads, "
                        "FFN 4096 (default demo)")
    p.add_argument("--layer", choices=("hand", "torch"), default="hand",
                   help="hand: the layer from plain ops, the graph --export writes (default); "
                        "torch: nn.TransformerEncoderLayer (fused fast path in the eager loop)")
    p.add_argument("--requests", type=int, default=300, help="requests in the trace (default 300)")
    p.add_argument("--seed", type=int, default=1, help="the trace's splitmix64 seed (default 1)")
    p.add_argument("--batch", type=range_arg, default=(1, 64), help="batch range LO..HI (default 1..64)")
    p.add_argument("--seq", type=range_arg, default=(16, 512), help="seq range LO..HI (default 16..512)")
    p.add_argument("--weights-seed", type=int, default=0, help="torch.manual_seed for the weights (default 0)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke test; RSS only)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                   help="the eager loop's dtype (default float32, as flatserve's fp32; TF32 stays off)")
    p.add_argument("--empty-cache-every", type=int, default=10, metavar="K",
                   help="the empty_cache run calls torch.cuda.empty_cache() after every K requests (default 10)")
    p.add_argument("--out-dir", default=".", help="where the CSVs and the summary go (default .)")
    p.add_argument("--flatserve-csv", metavar="FILE",
                   help="flatserve's load-generator CSV (requests, reserved_bytes, allocated_bytes) to plot")
    p.add_argument("--plot", metavar="PNG", help="plot reserved memory against requests into PNG")
    p.add_argument("--plot-only", action="store_true",
                   help="run nothing: plot (and summarise against --flatserve-csv) the CSVs already in --out-dir")
    p.add_argument("--export", metavar="PATH",
                   help="export the model to ONNX at PATH (opset 17, dynamic batch and seq), check it, exit")
    p.add_argument("--print-trace", action="store_true",
                   help="print the trace as CSV (request,batch,seq) and exit; needs no torch")
    a = p.parse_args(argv)
    if a.requests < 1:
        p.error("--requests must be at least 1")
    if a.empty_cache_every < 1:
        p.error("--empty-cache-every must be at least 1")
    if a.plot_only and not a.plot:
        p.error("--plot-only needs --plot PNG")
    return a


# ---- statistics and files (no torch needed) ----------------------------------------------

def percentile(samples, q):
    """Nearest-rank percentile q in (0, 1] of a non-empty list."""
    s = sorted(samples)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def csv_path(out_dir, arch, run):
    return os.path.join(out_dir, f"torch_{arch}_{run}.csv")


def summary_path(out_dir, arch):
    return os.path.join(out_dir, f"torch_{arch}_summary.json")


CSV_COLUMNS = ("requests", "batch", "seq", "tokens", "elapsed_s", "latency_ms", "empty_cache_ms",
               "allocated_bytes", "reserved_bytes", "max_allocated_bytes", "max_reserved_bytes")


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in CSV_COLUMNS})


def number(text):
    """A CSV cell as int or float; None when empty or not a number."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            v = float(text)
        except ValueError:
            return None
        return v if math.isfinite(v) else None


def read_series(path):
    """(x, reserved, allocated) lists from a CSV with a header: x is `requests` or else the row
    number (1-based); reserved/allocated are `reserved_bytes`/`allocated_bytes` (None where absent).
    Rows without a reserved figure are skipped. OSError / ValueError when unreadable."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or ())
        if "reserved_bytes" not in cols:
            raise ValueError(f"{path}: no reserved_bytes column (columns: {', '.join(sorted(cols)) or 'none'})")
        xs, res, alloc = [], [], []
        for i, row in enumerate(reader, 1):
            r = number(row.get("reserved_bytes"))
            if r is None:
                continue
            x = number(row.get("requests")) if "requests" in cols else None
            xs.append(i if x is None else x)
            res.append(r)
            alloc.append(number(row.get("allocated_bytes")) if "allocated_bytes" in cols else None)
    if not xs:
        raise ValueError(f"{path}: no row with a reserved_bytes figure")
    return xs, res, alloc


def flatserve_figures(path):
    """flatserve's peaks from its CSV, or {'error': text} when it cannot be read."""
    try:
        xs, res, alloc = read_series(path)
    except (OSError, ValueError) as e:
        return {"csv": path, "error": str(e)}
    allocs = [a for a in alloc if a is not None]
    out = {"csv": path, "samples": len(xs), "requests": max(xs),
           "peak_reserved_bytes": max(res), "end_reserved_bytes": res[-1],
           "peak_allocated_bytes": max(allocs) if allocs else None}
    # loadgen's CSV also carries the cache's own peaks (which see between
    # samples): prefer them.
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for col in ("peak_allocated_bytes", "peak_reserved_bytes"):
        vals = [float(r[col]) for r in rows if r.get(col) not in (None, "", "NaN")]
        if vals:
            out[col] = max(vals)
    return out


def targets(fs, plain):
    """The issue's two targets as {name: {value, limit, met}}; a target lacking a figure is left out."""
    out = {}
    if fs.get("peak_allocated_bytes"):
        v = fs["peak_reserved_bytes"] / fs["peak_allocated_bytes"]
        out["flatserve_peak_reserved_over_its_peak_allocated"] = {
            "value": v, "limit": TARGET_FLAT, "met": v <= TARGET_FLAT}
    if plain and plain.get("end_reserved_bytes"):
        v = fs["peak_reserved_bytes"] / plain["end_reserved_bytes"]
        out["flatserve_peak_reserved_over_torch_plain_end_reserved"] = {
            "value": v, "limit": TARGET_VS_TORCH, "met": v <= TARGET_VS_TORCH}
    return out


# ---- plotting (no torch needed) -------------------------------------------------------------

def plot(png, title, series):
    """series: [(label, xs, reserved bytes, peak allocated bytes or None)]. True when a PNG was made."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_gnuplot(png, title, series)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for i, (label, xs, res, peak) in enumerate(series):
        color = f"C{i}"
        ax.plot(xs, [r / GB for r in res], color=color, label=f"{label}: reserved")
        if peak:
            ax.axhline(peak / GB, color=color, linestyle="--", linewidth=1,
                       label=f"{label}: peak allocated {peak / GB:.2f} GB")
    ax.set_xlabel("requests")
    ax.set_ylabel("GB (1e9 bytes)")
    ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    log(f"wrote {png} (matplotlib)")
    return True


def plot_gnuplot(png, title, series):
    """The same plot as a gnuplot script beside the PNG, run when gnuplot is on PATH."""
    script = png + ".gp"
    lines = ["set terminal pngcairo size 1200,660 noenhanced" if gnuplot_has_cairo() else
             "set terminal png size 1200,660 noenhanced",
             f"set output {json.dumps(png)}",
             f"set title {json.dumps(title)}",
             "set xlabel 'requests'", "set ylabel 'GB (1e9 bytes)'", "set yrange [0:*]",
             "set grid", "set key left top"]
    plots = []
    for i, (label, xs, res, peak) in enumerate(series):
        dat = f"{png}.{i}.dat"
        with open(dat, "w") as f:
            for x, r in zip(xs, res):
                f.write(f"{x} {r / GB:.6f}\n")
        plots.append(f"{json.dumps(dat)} using 1:2 with lines lc {i + 1} title {json.dumps(label + ': reserved')}")
        if peak:
            plots.append(f"{peak / GB:.6f} with lines dt 2 lc {i + 1} "
                         f"title {json.dumps(f'{label}: peak allocated {peak / GB:.2f} GB')}")
    lines.append("plot " + ", \\\n     ".join(plots))
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    gp = shutil.which("gnuplot")
    if not gp:
        log(f"matplotlib does not import and gnuplot is not on PATH: no plot; the gnuplot script is {script}")
        return False
    r = subprocess.run([gp, script], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"gnuplot {script} failed: {r.stderr.strip()}")
        return False
    log(f"wrote {png} (gnuplot, script {script})")
    return True


def gnuplot_has_cairo():
    gp = shutil.which("gnuplot")
    if not gp:
        return False
    r = subprocess.run([gp, "-e", "set terminal"], capture_output=True, text=True)
    return "pngcairo" in (r.stdout + r.stderr)


def plot_runs(args, summary, fs):
    """Plots the torch CSVs in --out-dir and flatserve's; True when a PNG was written."""
    series = []
    for run in RUNS:
        path = csv_path(args.out_dir, args.arch, run)
        try:
            xs, res, alloc = read_series(path)
        except (OSError, ValueError) as e:
            log(f"not plotted: PyTorch {run}: {e}")
            continue
        peak = (summary or {}).get("runs", {}).get(run, {}).get("peak_allocated_bytes")
        if peak is None:
            allocs = [a for a in alloc if a is not None]
            peak = max(allocs) if allocs else None
        label = f"PyTorch {run}" if run == "plain" else f"PyTorch empty_cache every {args.empty_cache_every}"
        series.append((label, xs, res, peak))
    if args.flatserve_csv:
        try:
            xs, res, _ = read_series(args.flatserve_csv)
            series.append(("flatserve", xs, res, fs.get("peak_allocated_bytes") if fs else None))
        except (OSError, ValueError) as e:
            log(f"not plotted: flatserve: {e}")
    if not series:
        log("nothing to plot")
        return False
    trace = (summary or {}).get("trace")
    cfg = ARCHS[args.arch]
    title = (f"Reserved memory under the mixed trace: {args.arch} encoder ({cfg['layers']}x{cfg['hidden']}, "
             f"{cfg['heads']} heads, FFN {cfg['ffn']})")
    if trace:
        title += (f"\n{trace['requests']} requests, batch {trace['batch'][0]}..{trace['batch'][1]}, "
                  f"seq {trace['seq'][0]}..{trace['seq'][1]}, seed {trace['seed']}")
    if (summary or {}).get("device_name"):
        title += f"; {summary['device_name']}, {summary.get('dtype', '')}"
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    return plot(args.plot, title, series)


# ---- the model (torch is passed in: this file imports without it) --------------------------

def build_model(torch, arch, layer):
    """The encoder in eval mode, fp32, on the CPU, weights from the current torch seed."""
    nn = torch.nn
    F = torch.nn.functional
    cfg = ARCHS[arch]
    hidden, heads, ffn, eps = cfg["hidden"], cfg["heads"], cfg["ffn"], cfg["eps"]
    head_dim = hidden // heads

    if layer == "torch":
        block = nn.TransformerEncoderLayer(hidden, heads, dim_feedforward=ffn, dropout=0.0, activation="gelu",
                                           layer_norm_eps=eps, batch_first=True, norm_first=True)
        return nn.TransformerEncoder(block, cfg["layers"], enable_nested_tensor=False).eval()

    class Block(nn.Module):
        """Pre-norm: x + O(attn(LN1 x)), then + FF2(gelu(FF1(LN2 x))). The head split takes batch and
        seq from the input's shape, so the export computes them (Shape, Gather) instead of baking them in."""

        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden, eps=eps)
            self.q = nn.Linear(hidden, hidden)
            self.k = nn.Linear(hidden, hidden)
            self.v = nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=eps)
            self.ff1 = nn.Linear(hidden, ffn)
            self.ff2 = nn.Linear(ffn, hidden)
            self.scale = 1.0 / math.sqrt(head_dim)

        def forward(self, x):
            b, s = x.shape[0], x.shape[1]
            y = self.ln1(x)
            q = self.q(y).view(b, s, heads, head_dim).transpose(1, 2)      # [b, h, s, d]
            k = self.k(y).view(b, s, heads, head_dim).permute(0, 2, 3, 1)  # [b, h, d, s]
            v = self.v(y).view(b, s, heads, head_dim).transpose(1, 2)      # [b, h, s, d]
            attn = torch.softmax(torch.matmul(q, k) * self.scale, dim=-1)
            ctx = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, hidden)
            x = x + self.o(ctx)
            return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block() for _ in range(cfg["layers"])])

        def forward(self, x):
            for layer_ in self.layers:
                x = layer_(x)
            return x

    return Encoder().eval()


def describe(arch, layer):
    c = ARCHS[arch]
    kind = "hand-written from nn.Linear/LayerNorm/matmul/softmax/gelu" if layer == "hand" else \
        "nn.TransformerEncoder(TransformerEncoderLayer(norm_first, batch_first, gelu))"
    return (f"pre-norm encoder, {c['layers']} layers, hidden {c['hidden']}, {c['heads']} heads, FFN {c['ffn']}, "
            f"LayerNorm eps {c['eps']:g}; {kind}")


# ---- export ------------------------------------------------------------------------------------

def export(torch, args):
    """--export: writes the ONNX file and checks it; the exit status."""
    if args.layer != "hand":
        log("--export needs --layer hand: the export of nn.TransformerEncoderLayer bakes the example's seq "
            "into its Reshape targets (see the docstring)")
        return 2
    torch.manual_seed(args.weights_seed)
    model = build_model(torch, args.arch, args.layer)
    hidden = ARCHS[args.arch]["hidden"]
    path = args.export
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    kwargs = {"opset_version": OPSET, "input_names": ["embeddings"], "output_names": ["hidden"],
              "dynamic_axes": {"embeddings": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}},
              "do_constant_folding": True}
    exporter = "torch.onnx.export"
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
        exporter = "torch.onnx.export(dynamo=False) (TorchScript)"
    example = torch.randn(2, 37, hidden, generator=torch.Generator().manual_seed(args.seed))
    with torch.no_grad():
        try:
            torch.onnx.export(model, (example,), path, **kwargs)
        except Exception as e:  # noqa: BLE001 -- a torch whose TorchScript exporter is gone
            if kwargs.get("dynamo") is not False:
                raise
            log(f"the TorchScript exporter failed ({type(e).__name__}: {e}); trying dynamo=True")
            kwargs["dynamo"] = True
            exporter = "torch.onnx.export(dynamo=True)"
            torch.onnx.export(model, (example,), path, **kwargs)
    log(f"exported {args.arch} ({describe(args.arch, args.layer)}) with {exporter}, opset {OPSET}, "
        f"to {path} ({os.path.getsize(path)} bytes)")
    try:
        import onnx
        graph = onnx.load(path, load_external_data=False).graph
        ops = {}
        for n in graph.node:
            key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
            ops[key] = ops.get(key, 0) + 1
        dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.input]
        log(f"ops: {', '.join(f'{k} {v}' for k, v in sorted(ops.items()))}; input dims {dims}")
    except ImportError:
        log("onnx does not import: op types not listed")
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        log(f"export not checked against ONNX Runtime ({e})")
        return 0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(args.seed)
    worst = 0.0
    for b, s in EXPORT_CHECK_SHAPES:
        x = torch.randn(b, s, hidden, generator=gen)
        with torch.inference_mode():
            ref = model(x).double().numpy()
        try:
            got = sess.run(None, {"embeddings": x.numpy()})[0].astype(np.float64)
        except Exception as e:  # noqa: BLE001 -- onnxruntime's own error types
            log(f"ONNX Runtime cannot run the export at (batch, seq) = ({b}, {s}): {e}")
            return 1
        if got.shape != ref.shape or not np.all(np.isfinite(got)):
            log(f"ONNX Runtime at ({b}, {s}): shape {list(got.shape)} (PyTorch {list(ref.shape)}), "
                f"finite {bool(np.all(np.isfinite(got)))}")
            return 1
        err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
        worst = max(worst, err)
        log(f"ONNX Runtime {ort.__version__} at (batch, seq) = ({b}, {s}): relative L2 error {err:.2e} "
            f"against PyTorch")
    if worst > EXPORT_TOLERANCE:
        log(f"the export disagrees with PyTorch: {worst:.2e} > {EXPORT_TOLERANCE:g}")
        return 1
    return 0


# ---- the runs ------------------------------------------------------------------------------------

def rss_bytes():
    """Resident set size of this process, from /proc/self/statm (pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Memory:
    """Reads the counters of one device: the CUDA caching allocator's, or RSS on the CPU."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def empty_cache(self):
        if self.cuda:
            self.torch.cuda.empty_cache()

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def sample(self):
        c = self.torch.cuda
        if not self.cuda:
            rss = rss_bytes()
            return {"allocated_bytes": None, "reserved_bytes": rss, "max_allocated_bytes": None,
                    "max_reserved_bytes": None}
        return {"allocated_bytes": c.memory_allocated(self.device), "reserved_bytes": c.memory_reserved(self.device),
                "max_allocated_bytes": c.max_memory_allocated(self.device),
                "max_reserved_bytes": c.max_memory_reserved(self.device)}


def run_trace(torch, model, mem, host, trace, hidden, dtype, empty_every):
    """One pass over the trace; the CSV rows. Each request: its slice of the pinned host buffer to the
    device, the model, the output back to the host (which synchronises)."""
    rows = []
    begin = time.perf_counter()
    with torch.inference_mode():
        for i, (b, s) in enumerate(trace):
            n = b * s * hidden
            t0 = time.perf_counter_ns()
            x = host[:n].view(b, s, hidden).to(mem.device, dtype=dtype, non_blocking=True)
            y = model(x).to("cpu")
            t1 = time.perf_counter_ns()
            del x, y
            ec_ms = None
            if empty_every and (i + 1) % empty_every == 0:
                e0 = time.perf_counter_ns()
                mem.empty_cache()
                ec_ms = (time.perf_counter_ns() - e0) / 1e6
            row = {"requests": i + 1, "batch": b, "seq": s, "tokens": b * s,
                   "elapsed_s": round(time.perf_counter() - begin, 6),
                   "latency_ms": round((t1 - t0) / 1e6, 4),
                   "empty_cache_ms": None if ec_ms is None else round(ec_ms, 4)}
            row.update(mem.sample())
            rows.append(row)
    return rows


def run_summary(rows, baseline):
    """The run's figures from its rows (the last row's running maxima are the run's peaks)."""
    n = len(rows)
    lat = [r["latency_ms"] for r in rows]
    res = [r["reserved_bytes"] for r in rows]
    last = rows[-1]
    peak_alloc = last["max_allocated_bytes"]
    peak_res = last["max_reserved_bytes"] if last["max_reserved_bytes"] is not None else max(res)
    ec = [r["empty_cache_ms"] for r in rows if r["empty_cache_ms"] is not None]
    out = {"requests": n, "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_res,
           "end_reserved_bytes": res[-1], "reserved_at_10pct_bytes": res[math.ceil(n / 10) - 1],
           "reserved_at_10pct_request": math.ceil(n / 10),
           "peak_reserved_over_peak_allocated": peak_res / peak_alloc if peak_alloc else None,
           "end_reserved_over_peak_allocated": res[-1] / peak_alloc if peak_alloc else None,
           "latency_p50_ms": percentile(lat, 0.50), "latency_p99_ms": percentile(lat, 0.99),
           "latency_mean_ms": sum(lat) / n, "total_s": last["elapsed_s"],
           "empty_cache_calls": len(ec), "empty_cache_total_ms": round(sum(ec), 4)}
    out.update({f"baseline_{k}": v for k, v in baseline.items() if k in ("allocated_bytes", "reserved_bytes")})
    return out


def tf32_off(torch):
    """TF32 off for cuBLAS matmuls and cuDNN. PyTorch 2.9 deprecated allow_tf32 for per-backend
    fp32_precision settings and raises once a process mixes the two, so the new settings alone where
    they exist (every cuDNN backend too, so conv and rnn agree), allow_tf32 only on an older torch."""
    cudnn = torch.backends.cudnn
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        for obj in (cudnn, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None), torch.backends.cuda.matmul):
            if obj is not None and hasattr(obj, "fp32_precision"):
                obj.fp32_precision = "ieee"
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    cudnn.allow_tf32 = False


def measure(torch, args):
    """Both runs; (summary dict, exit status)."""
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        log(f"--device {args.device}: {e}")
        return None, 2
    if device.type == "cuda":
        if not torch.cuda.is_available():
            log(f"torch {torch.__version__} sees no CUDA device (use --device cpu for a smoke test)")
            return None, 2
        tf32_off(torch)
        device_name = torch.cuda.get_device_name(device)
    elif device.type == "cpu":
        device_name = f"CPU ({platform.processor() or platform.machine()}), RSS only"
    else:
        log(f"--device {args.device}: only cuda, cuda:N and cpu")
        return None, 2
    dtype = getattr(torch, args.dtype)
    cfg = ARCHS[args.arch]
    hidden = cfg["hidden"]
    trace = make_trace(args.requests, args.seed, args.batch, args.seq)
    torch.manual_seed(args.weights_seed)
    model = build_model(torch, args.arch, args.layer).to(device=device, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    max_n = args.batch[1] * args.seq[1] * hidden
    host = torch.randn(max_n, generator=torch.Generator().manual_seed(args.seed))
    if device.type == "cuda":
        host = host.pin_memory()
    mem = Memory(torch, device)
    summary = {"tool": "loadtest/torch_baseline.py",
               "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
               "device": str(device), "device_name": device_name, "dtype": args.dtype,
               "memory_source": "torch.cuda caching allocator" if mem.cuda else "process RSS (/proc/self/statm)",
               "arch": args.arch, "layer": args.layer, "model": describe(args.arch, args.layer),
               "parameters": n_params, "weights_seed": args.weights_seed,
               "trace": {"requests": args.requests, "seed": args.seed, "batch": list(args.batch),
                         "seq": list(args.seq), "generator": "splitmix64, batch then seq, lo + next() % (hi-lo+1)",
                         "first": [list(t) for t in trace[:5]],
                         "tokens_total": sum(b * s for b, s in trace)},
               "empty_cache_every": args.empty_cache_every, "runs": {}}
    log(f"{describe(args.arch, args.layer)}: {n_params / 1e6:.1f} M parameters, {args.dtype}, on {device_name}; "
        f"trace: {args.requests} requests, batch {args.batch[0]}..{args.batch[1]}, "
        f"seq {args.seq[0]}..{args.seq[1]}, seed {args.seed}")
    os.makedirs(args.out_dir, exist_ok=True)
    warm = [(args.batch[0], args.seq[0])]
    for run in RUNS:
        try:
            run_trace(torch, model, mem, host, warm, hidden, dtype, 0)
            mem.sync()
            mem.empty_cache()
            mem.reset_peak()
            baseline = mem.sample()
            rows = run_trace(torch, model, mem, host, trace, hidden, dtype,
                             args.empty_cache_every if run == "empty_cache" else 0)
        except Exception as e:  # noqa: BLE001 -- CUDA OOM and the like: report, keep what ran
            log(f"run {run} failed: {type(e).__name__}: {e}")
            summary["runs"][run] = {"error": f"{type(e).__name__}: {e}"}
            return summary, 1
        path = csv_path(args.out_dir, args.arch, run)
        write_csv(path, rows)
        s = run_summary(rows, baseline)
        summary["runs"][run] = s
        log(f"{run}: wrote {path}; " + run_line(s))
        mem.empty_cache()
    return summary, 0


def fmt_gb(v):
    return "-" if v is None else f"{v / GB:.3f} GB"


def run_line(s):
    ratio = s.get("peak_reserved_over_peak_allocated")
    return (f"peak allocated {fmt_gb(s.get('peak_allocated_bytes'))}, peak reserved "
            f"{fmt_gb(s.get('peak_reserved_bytes'))}, reserved at request {s.get('reserved_at_10pct_request')} "
            f"{fmt_gb(s.get('reserved_at_10pct_bytes'))}, end {fmt_gb(s.get('end_reserved_bytes'))}"
            + ("" if ratio is None else f", peak reserved / peak allocated {ratio:.2f}")
            + f"; latency p50 {s['latency_p50_ms']:.2f} ms, p99 {s['latency_p99_ms']:.2f} ms")


def add_flatserve(summary, args):
    """Adds flatserve's figures and the targets to the summary (when --flatserve-csv); returns them."""
    if not args.flatserve_csv:
        return None
    fs = flatserve_figures(args.flatserve_csv)
    summary["flatserve"] = fs
    if "error" in fs:
        log(f"--flatserve-csv: {fs['error']}")
        return fs
    plain = summary.get("runs", {}).get("plain")
    summary["targets"] = targets(fs, plain if plain and "error" not in plain else None)
    log(f"flatserve: peak reserved {fmt_gb(fs['peak_reserved_bytes'])}, peak allocated "
        f"{fmt_gb(fs['peak_allocated_bytes'])} over {fs['requests']} requests")
    for name, t in summary["targets"].items():
        log(f"target {name}: {t['value']:.3f} (limit {t['limit']}): {'met' if t['met'] else 'MISSED'}")
    return fs


def main(argv=None):
    args = parse_args(argv)
    if args.print_trace:
        print("request,batch,seq")
        for i, (b, s) in enumerate(make_trace(args.requests, args.seed, args.batch, args.seq)):
            print(f"{i},{b},{s}")
        return 0
    summary_file = summary_path(args.out_dir, args.arch)
    if args.plot_only:
        try:
            with open(summary_file) as f:
                summary = json.load(f)
        except (OSError, ValueError) as e:
            log(f"no summary to plot with ({e}): peaks from the CSVs")
            summary = {}
        fs = add_flatserve(summary, args)
        if summary.get("runs"):
            with open(summary_file, "w") as f:
                json.dump(summary, f, indent=2)
        plot_runs(args, summary, fs)
        return 0
    try:
        import torch
    except ImportError as e:
        log(f"cannot run: {e} (PyTorch is installed on the GPU machine)")
        return 2
    if args.export:
        return export(torch, args)
    summary, status = measure(torch, args)
    if summary is None:
        return status
    fs = add_flatserve(summary, args)
    with open(summary_file, "w") as f:
        json.dump(summary, f, indent=2)
    log(f"wrote {summary_file}")
    if args.plot:
        plot_runs(args, summary, fs)
    return status


if __name__ == "__main__":
    sys.exit(main())
