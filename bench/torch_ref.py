#!/usr/bin/env python3
"""torch_ref.py -- flatserve's CUDA engine against PyTorch eager: same GPU, models and inputs, one command.

Builds a ResNet-50, a BERT-base-sized encoder and an MLP with random weights
(torch.manual_seed), exports each to ONNX (opset 17, dynamic batch), checks
every op of the export against flatserve's op list and the export's output
against ONNX Runtime (CPU) at batch 1, times PyTorch eager
(torch.inference_mode, CUDA events: the model call alone, and pinned host
input to host output) with torch.cuda.max_memory_reserved, then runs
`model_bench --device cuda --precision P --json` on each exported file with
the same inputs (float: np.arange(N).reshape(shape) / N as float32). Prints
a Markdown report: one table per precision with the ratios, and which rows
meet the engine issue's targets. It measures; it asserts no speed. A failure
on either side is reported as its error text, never as a figure.
See bench/README.md.

Exit status: 0; 1 when some step failed on some model, batch or precision
(an export, an op outside flatserve's set, ONNX Runtime disagreeing with
PyTorch, PyTorch itself, or model_bench: the report says which, and the rest
still runs); 2 for a bad argument (an unwritable --out-json too), when numpy
or torch cannot be imported or no CUDA device is visible, or when
--report-only cannot read its file.
"""
import argparse
import copy
import datetime
import gc
import inspect
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet50", "bert", "mlp")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
SEED = 0
OPSET = 17
BERT = {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "seq": 128}
MLP_DIMS = (1024, 4096, 4096, 1000)
# ONNX Runtime (CPU, fp32) against PyTorch (GPU, fp32 without TF32): relative
# L2 error above this means the export is wrong, not that the math differs.
ORT_TOLERANCE = 1e-4
MODEL_BENCH_TIMEOUT_S = 300
# PyTorch's timing rule, per (model, batch, precision) and per measurement
# (compute, end to end): warm-up, then runs until the budget or max_runs,
# at least min_runs. model_bench has its own (3 warm-up runs; 2 s or 200
# runs, --quick 0.3 s or 20), reported from its JSON.
TIMING = {False: {"warmup_runs": 10, "budget_s": 1.0, "max_runs": 200, "min_runs": 10},
          True: {"warmup_runs": 3, "budget_s": 0.2, "max_runs": 20, "min_runs": 3}}
# The engine issue's targets, as flatserve / PyTorch eager.
TARGET_LATENCY = 1.0
TARGET_MEMORY = 0.6
# flatserve's op set: engine/ops/list.h, the one list every op table is
# generated from. Read at run time so that the check follows the engine as it
# grows. Its format: `#define ENG_OPS_<FAMILY>(X)` blocks of `X(OpType, CPU,
# CUDA)` entries, CPU and CUDA each Y or N (whether that device has a kernel).
OPS_LIST = os.path.join("engine", "ops", "list.h")
OPS_BLOCK_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+ENG_OPS_([A-Z0-9_]+)\(X\)(.*)$", re.M)
OPS_ENTRY_RE = re.compile(r"\bX\(\s*([A-Za-z][A-Za-z0-9_]*)\s*,\s*([YN])\s*,\s*([YN])\s*\)")
OPS_FAMILY_RE = re.compile(r"\bF\(\s*\w+\s*,\s*ENG_OPS_([A-Z0-9_]+)\s*\)")


def log(msg):
    print(f"torch_ref: {msg}", file=sys.stderr, flush=True)


def csv_arg(allowed=None, conv=str):
    """An argparse type: a comma-separated list, each item converted and, with `allowed`, checked."""
    def parse(s):
        items = []
        for raw in s.split(","):
            raw = raw.strip()
            if not raw:
                continue
            try:
                v = conv(raw)
            except ValueError:
                raise argparse.ArgumentTypeError(f"'{raw}' is not an integer")
            if allowed is not None and v not in allowed:
                raise argparse.ArgumentTypeError(f"'{raw}' is not one of {', '.join(allowed)}")
            if conv is int and v < 1:
                raise argparse.ArgumentTypeError(f"'{raw}': a batch must be at least 1")
            if v not in items:
                items.append(v)
        if not items:
            raise argparse.ArgumentTypeError("the list is empty")
        return sorted(items) if conv is int else items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", default="build/cuda/bin/model_bench",
                   help="the model_bench binary of a CUDA build (default build/cuda/bin/model_bench)")
    p.add_argument("--models", type=csv_arg(MODELS), default=list(MODELS),
                   help="comma-separated subset of resnet50,bert,mlp (default all)")
    p.add_argument("--batches", type=csv_arg(conv=int), default=[1, 8, 64],
                   help="comma-separated batch sizes (default 1,8,64). model_bench itself always runs "
                        "1, 8 and 64 on a model with a dynamic batch: other sizes get PyTorch figures only")
    p.add_argument("--precisions", type=csv_arg(PRECISIONS), default=["fp32", "fp16"],
                   help="comma-separated subset of fp32,tf32,fp16,bf16 (default fp32,fp16)")
    p.add_argument("--quick", action="store_true",
                   help="fewer runs on both sides (PyTorch 0.2 s or 20 runs, model_bench --quick)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="torch.backends.cudnn.benchmark = True (default: PyTorch's default, False)")
    p.add_argument("--onnx-dir", metavar="DIR",
                   help="keep the exported models in DIR (default: a temporary directory, removed at the end)")
    p.add_argument("--out-json", metavar="FILE",
                   default=os.path.join(os.environ["OUT"], "torch_ref.json") if os.environ.get("OUT") else None,
                   help="write the raw results as JSON (default $OUT/torch_ref.json when $OUT is set)")
    p.add_argument("--report-only", metavar="FILE",
                   help="measure nothing: print the report of a results JSON that an earlier run wrote "
                        "(needs neither torch nor a GPU; the other options are ignored)")
    p.add_argument("--list-ops", action="store_true",
                   help=f"measure nothing: print flatserve's op set as read from {OPS_LIST} (op, family, "
                        "whether the CPU and CUDA have a kernel) and exit; 2 when the file does not parse "
                        "(needs neither torch nor a GPU)")
    return p.parse_args(argv)


# ---- inputs, statistics, targets (no torch needed) ----------------------------------------

def input_shape(model, batch):
    return {"resnet50": [batch, 3, 224, 224], "bert": [batch, BERT["seq"], BERT["hidden"]],
            "mlp": [batch, MLP_DIMS[0]]}[model]


def make_input(np, shape):
    """model_bench's input (bench_inputs_make): element k of N is (float)((double)k / N)."""
    n = 1
    for d in shape:
        n *= d
    return (np.arange(n, dtype=np.float64) / n).astype(np.float32).reshape(shape)


def summarize(samples):
    """Median (the mean of the middle two for an even count, as model_bench) and nearest-rank p90, in ms."""
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return median, s[max(0, math.ceil(0.9 * n) - 1)], n


def latency_target(model, batch, precision):
    """The tightest latency target (flatserve / PyTorch eager) that the issue sets for this row."""
    t = TARGET_LATENCY
    if model == "bert" and batch == 1:
        t = min(t, 0.4)
    if model == "bert" and batch == 8:
        t = min(t, 0.8)
    if precision == "fp16" and batch == 64:
        t = min(t, 0.8)
    return t


def engine_op_list(text, where=OPS_LIST):
    """flatserve's ops from the text of engine/ops/list.h: {op type: {"family", "cpu", "cuda"}}, the
    last two True where that device has a kernel. Strict, so that a change of the file's format fails
    loudly instead of dropping ops: ValueError, naming `where`, when a family block holds anything but
    X(OpType, Y|N, Y|N) entries, when an op is listed twice, when ENG_OP_FAMILIES names a block that is
    not there or misses one that is, or when no op is found."""
    # One logical line per #define: join the backslash continuations, drop the comments.
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\[ \t]*\n", " ", text)
    ops = {}
    blocks = []
    for m in OPS_BLOCK_RE.finditer(text):
        family, body = m.group(1), m.group(2)
        blocks.append(family)
        left = OPS_ENTRY_RE.sub(" ", body).strip()
        if left:
            raise ValueError(f"{where}: ENG_OPS_{family}(X) holds something other than X(OpType, Y|N, Y|N) "
                             f"entries: {left[:80]!r}")
        for op, cpu, cuda in OPS_ENTRY_RE.findall(body):
            if op in ops:
                raise ValueError(f"{where}: {op} is listed twice (ENG_OPS_{ops[op]['family'].upper()} and "
                                 f"ENG_OPS_{family})")
            ops[op] = {"family": family.lower(), "cpu": cpu == "Y", "cuda": cuda == "Y"}
    listed = OPS_FAMILY_RE.findall(text)
    if listed and sorted(listed) != sorted(blocks):
        raise ValueError(f"{where}: ENG_OP_FAMILIES names {', '.join(sorted(listed))}, the file defines "
                         f"ENG_OPS_ blocks {', '.join(sorted(blocks)) or 'none'}")
    if not ops:
        raise ValueError(f"{where}: no X(OpType, CPU, CUDA) entry in any #define ENG_OPS_<FAMILY>(X) block")
    return ops


def read_engine_ops():
    """engine_op_list of the repository's engine/ops/list.h; (ops, None) or ({}, error text)."""
    path = os.path.join(REPO, OPS_LIST)
    try:
        with open(path) as f:
            return engine_op_list(f.read(), OPS_LIST), None
    except (OSError, ValueError) as e:
        return {}, str(e)


def list_ops():
    """--list-ops: prints flatserve's op set as this script reads it (no torch needed); the exit status."""
    ops, err = read_engine_ops()
    if err:
        print(f"torch_ref: cannot read flatserve's op set: {err}", file=sys.stderr)
        return 2
    for op in sorted(ops):
        o = ops[op]
        print(f"{op}\t{o['family']}\tcpu={'Y' if o['cpu'] else 'N'}\tcuda={'Y' if o['cuda'] else 'N'}")
    n_cuda = sum(o["cuda"] for o in ops.values())
    print(f"torch_ref: {len(ops)} ops in {OPS_LIST}, {n_cuda} with a CUDA kernel", file=sys.stderr)
    return 0


# ---- models (torch is passed in: this file must import without it) ------------------------

def resnet50_by_hand(torch):
    """torchvision's ResNet-50 (v1.5: stride on the 3x3 conv) written out, same layers, shapes and init."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            stages, inplanes = [], 64
            for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                # The first block of every stage changes the width, so it always has a projection.
                down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                     nn.BatchNorm2d(planes * 4))
                layer = [Bottleneck(inplanes, planes, stride, down)]
                inplanes = planes * 4
                layer += [Bottleneck(inplanes, planes, 1, None) for _ in range(blocks - 1)]
                stages.append(nn.Sequential(*layer))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, 1000)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50()


def build_resnet50(torch):
    """torchvision's resnet50 when torchvision imports, else resnet50_by_hand; (module, what it is)."""
    try:
        import torchvision
    except Exception as e:  # ImportError, or a torchvision built against another torch
        why = f"{type(e).__name__}: {e}".replace("\n", " ")
        return resnet50_by_hand(torch), f"hand-written ResNet-50 (torchvision not importable: {why})"
    try:
        return torchvision.models.resnet50(weights=None), \
            f"torchvision {torchvision.__version__} resnet50(weights=None)"
    except TypeError:  # torchvision before 0.13 has no weights= argument
        return torchvision.models.resnet50(pretrained=False), \
            f"torchvision {torchvision.__version__} resnet50(pretrained=False)"


def build_encoder(torch):
    """A BERT-base-sized post-LN encoder from plain ops, input = hidden states [batch, seq, hidden].

    Separate query/key/value Linears as in BERT; attention as matmul, divide,
    softmax, matmul (not scaled_dot_product_attention, whose export flatserve
    need not know); GELU with erf; no mask, no embeddings, no dropout.
    Reshapes use -1 for the batch and constants for the rest, so the export
    carries no Shape arithmetic."""
    nn = torch.nn
    hidden, heads, ffn, seq = BERT["hidden"], BERT["heads"], BERT["ffn"], BERT["seq"]
    head_dim = hidden // heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.attn_out = nn.Linear(hidden, hidden)
            self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.ffn_in = nn.Linear(hidden, ffn)
            self.ffn_out = nn.Linear(ffn, hidden)
            self.ffn_norm = nn.LayerNorm(hidden, eps=1e-12)

        def split_heads(self, t):
            return t.reshape(-1, seq, heads, head_dim).transpose(1, 2)

        def forward(self, x):
            q = self.split_heads(self.query(x))
            k = self.split_heads(self.key(x))
            v = self.split_heads(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(-1, seq, hidden)
            x = self.attn_norm(x + self.attn_out(ctx))
            return self.ffn_norm(x + self.ffn_out(nn.functional.gelu(self.ffn_in(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(BERT["layers"])])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return Encoder(), (f"hand-written post-LN encoder: {BERT['layers']} layers, hidden {hidden}, "
                       f"{heads} heads, FFN {ffn} (GELU, erf), seq {seq}; input hidden states")


def build_mlp(torch):
    nn = torch.nn
    layers = []
    for i, (a, b) in enumerate(zip(MLP_DIMS, MLP_DIMS[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(MLP_DIMS) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), "MLP " + " -> ".join(str(d) for d in MLP_DIMS) + ", ReLU between"


def build_model(torch, name):
    """The model in eval mode on the CPU in fp32, weights set by torch.manual_seed(SEED); (module, what it is)."""
    torch.manual_seed(SEED)
    model, what = {"resnet50": build_resnet50, "bert": build_encoder, "mlp": build_mlp}[name](torch)
    return model.eval(), what


# ---- export and checks ---------------------------------------------------------------------

def export_onnx(torch, model, example, path):
    """torch.onnx.export, with the TorchScript exporter where the installed torch has a choice; which one ran."""
    kwargs = {"opset_version": OPSET, "input_names": ["input"], "output_names": ["output"],
              "dynamic_axes": {"input": {0: "batch"}, "output": {0: "batch"}}, "do_constant_folding": True}
    exporter = "torch.onnx.export (TorchScript)"
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
        exporter = "torch.onnx.export(dynamo=False) (TorchScript)"
    with torch.no_grad():
        torch.onnx.export(model, (example,), path, **kwargs)
    return exporter


def onnx_op_counts(onnx, path):
    """{op type: nodes} over the graph and its subgraphs; ops outside the default domain as 'domain:Op'."""
    counts = {}

    def walk(graph):
        for n in graph.node:
            key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
            counts[key] = counts.get(key, 0) + 1
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(onnx.load(path, load_external_data=False).graph)
    return counts


def rel_l2(np, got, ref):
    """||got - ref|| / ||ref|| in float64; ValueError on a shape mismatch or a non-finite output."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"output shape {list(got.shape)}, PyTorch's {list(ref.shape)}")
    if not np.all(np.isfinite(got)):
        raise ValueError("output has NaN or infinite values")
    norm = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(got - ref))
    return diff / norm if norm else diff


def ort_output(ort, path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only
    sess = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


# ---- PyTorch -----------------------------------------------------------------------------------

def set_tf32(torch, on):
    """TF32 on or off for cuBLAS matmuls and cuDNN convolutions; which API did it.

    PyTorch 2.9 added per-backend fp32_precision settings and deprecated
    allow_tf32; once anything in the process has used the new settings,
    touching the old ones raises ("a mix of the legacy and new APIs"). So the
    new API alone where it exists -- every backend that has one, so that cuDNN's
    conv and rnn never disagree -- and allow_tf32 only on an older torch."""
    prec = "tf32" if on else "ieee"
    cudnn = torch.backends.cudnn
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        for obj in (cudnn, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None), torch.backends.cuda.matmul):
            if obj is not None and hasattr(obj, "fp32_precision"):
                obj.fp32_precision = prec
        return "fp32_precision"
    torch.backends.cuda.matmul.allow_tf32 = on
    cudnn.allow_tf32 = on
    return "allow_tf32"


def torch_memory_reset(torch):
    """Hands everything PyTorch's caching allocator holds and no tensor uses back to the driver and
    restarts its peak counters, so that the next max_memory_reserved is the next measurement's own;
    returns the bytes still reserved (live tensors: the weights of the model on the GPU, if any).

    gc.collect() first: a tensor held only by a reference cycle (an exception's traceback, a closure)
    is otherwise still allocated, and so is the cached segment it sits in. cuBLAS's workspaces, which
    PyTorch allocates through the same caching allocator and keeps per handle and stream for the
    process's life, are freed too: the first one is carved out of whatever cached segment is free at
    the first matmul (the ceilings' 1 GiB copy buffers, or an earlier model's weights), and would pin
    that whole segment, and every row's peak with it. The next matmul allocates a new one."""
    gc.collect()
    torch.cuda.synchronize()
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_reserved()


def torch_dtype(torch, precision):
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[precision]


def time_cuda(torch, fn, rule):
    """Warm-up, then fn() between two CUDA events, synchronised after each run, until the rule stops it;
    (median, p90, runs) of the event times and the median wall-clock time, in ms."""
    for _ in range(rule["warmup_runs"]):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples, walls = [], []
    begin = time.perf_counter()
    while len(samples) < rule["max_runs"]:
        if len(samples) >= rule["min_runs"] and time.perf_counter() - begin > rule["budget_s"]:
            break
        t0 = time.perf_counter_ns()
        start.record()
        fn()
        end.record()
        end.synchronize()
        walls.append((time.perf_counter_ns() - t0) / 1e6)
        samples.append(start.elapsed_time(end))
    return summarize(samples), summarize(walls)[0]


def torch_run(torch, np, cpu_model, name, precision, batches, rule):
    """A copy of the model on the GPU in `precision`: its batch-1 output (float32 numpy, for the checks),
    then per batch the compute and end-to-end timings and max_memory_reserved. Returns
    (output or error text, {batch: figures or {"error": text}}); the copy is freed before returning."""
    set_tf32(torch, precision == "tf32")
    dtype = torch_dtype(torch, precision)
    model = None
    figures = {}
    try:
        model = copy.deepcopy(cpu_model).to(device="cuda", dtype=dtype).eval()
        with torch.inference_mode():
            x1 = torch.from_numpy(make_input(np, input_shape(name, 1))).to(device="cuda", dtype=dtype)
            out1 = model(x1).float().cpu().numpy()
        del x1
    except Exception as e:  # CUDA OOM, an op without a kernel for this dtype, ...
        out1 = f"{type(e).__name__}: {e}".replace("\n", " ")
    for batch in batches:
        if model is None:
            figures[batch] = {"error": f"the model did not run: {out1}"}
            continue
        host = dev = None
        try:
            at_start = torch_memory_reset(torch)
            host = torch.from_numpy(make_input(np, input_shape(name, batch))).to(dtype).pin_memory()
            dev = host.cuda()
            with torch.inference_mode():
                (c_med, c_p90, c_n), _ = time_cuda(torch, lambda: model(dev), rule)
                (e_med, e_p90, e_n), e_wall = time_cuda(
                    torch, lambda: model(host.cuda(non_blocking=True)).cpu(), rule)
            figures[batch] = {"compute_ms": c_med, "compute_p90_ms": c_p90, "compute_runs": c_n,
                              "e2e_ms": e_med, "e2e_p90_ms": e_p90, "e2e_runs": e_n, "e2e_wall_ms": e_wall,
                              "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                              "max_allocated_bytes": torch.cuda.max_memory_allocated(),
                              "reserved_at_start_bytes": at_start}
        except Exception as e:
            figures[batch] = {"error": f"{type(e).__name__}: {e}".replace("\n", " ")}
            log(f"PyTorch {name} batch {batch} {precision}: {figures[batch]['error']}")
        del host, dev
    del model
    torch_memory_reset(torch)
    return out1, figures


# ---- flatserve -----------------------------------------------------------------------------------

def last_line(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def run_model_bench(bench, path, precision, quick, workdir):
    """One `model_bench --device cuda` run on one model; its output goes to stderr.
    Returns a record: command, rc, its JSON (or None), an error when it left none, and a note when it
    failed after measuring every batch."""
    name = os.path.splitext(os.path.basename(path))[0]
    json_path = os.path.join(workdir, f"model_bench_{name}_{precision}.json")
    cmd = [bench, "--device", "cuda", "--precision", precision, "--json", json_path]
    if quick:
        cmd.append("--quick")
    cmd.append(path)
    rec = {"model": name, "precision": precision, "command": " ".join(shlex.quote(c) for c in cmd),
           "rc": None, "json": None, "error": None, "note": None}
    log(f"running {rec['command']}")
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=MODEL_BENCH_TIMEOUT_S)
        sys.stderr.write(p.stdout + p.stderr)
        rec["rc"] = p.returncode
        how = f"was killed by signal {-p.returncode}" if p.returncode < 0 else f"exited {p.returncode}"
        # Its errors go to stderr; its tables, printed last, to stdout.
        said = last_line(p.stderr if p.stderr.strip() else p.stdout)
        with open(json_path) as f:
            rec["json"] = json.load(f)
    except subprocess.TimeoutExpired:
        rec["error"] = f"model_bench did not finish in {MODEL_BENCH_TIMEOUT_S} s (killed)"
    except OSError as e:
        if rec["rc"] is None:
            rec["error"] = f"cannot run {bench}: {e} (build it with make CUDA=1)"
        else:
            rec["error"] = f"model_bench {how} and left no JSON ({e}); its last words: {said}"
    except ValueError as e:
        rec["error"] = f"model_bench {how} and left no readable JSON ({e}); its last words: {said}"
    finally:
        if os.path.exists(json_path):
            os.unlink(json_path)
    if rec["json"] is not None and rec["rc"] != 0 and all(r.get("ok") for r in rec["json"].get("results", [])):
        # Every row measured, yet a failure: the cache's accounting check after the run.
        rec["note"] = f"model_bench {how} after measuring every batch: {said}"
    return rec


def flatserve_row(rec, batch, expected_shape):
    """model_bench's figures for one batch from its record, or {"error": text}."""
    if rec is None:
        return {"error": "not run"}
    if rec["error"]:
        return {"error": rec["error"]}
    rows = rec["json"].get("results", [])
    row = next((r for r in rows if r.get("batch") == batch), None)
    if row is None:
        # A model that did not load has one row, batch null, for all its batches.
        row = next((r for r in rows if r.get("batch") is None and not r.get("ok")), None)
    if row is None:
        return {"error": f"model_bench reported no row for batch {batch} (it ran batches "
                         f"{', '.join(str(r.get('batch')) for r in rows) or 'none'})"}
    if not row.get("ok"):
        return {"error": row.get("error") or "failed without a message"}
    out = {k: row.get(k) for k in ("median_ms", "p90_ms", "runs", "peak_reserved_bytes", "activation_bytes",
                                   "weights_bytes", "inputs")}
    ran = [(i.get("name"), i.get("dtype"), i.get("shape")) for i in row.get("inputs") or []]
    if ran != [("input", "float", expected_shape)]:
        out["input_mismatch"] = f"model_bench ran inputs {ran}, PyTorch ('input', float, {expected_shape})"
    return out


# ---- the report (from the results JSON alone: --report-only renders it without torch) ---------------

def cell(s, width=60):
    s = str(s).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[: width - 3] + "..."


def size(b):
    if b is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def ms(v):
    return "-" if v is None else f"{v:.3f}"


def ratio(a, b):
    """a / b, or None without both (a zero figure is a missing one: no run takes 0 ms or 0 bytes)."""
    return a / b if a and b else None


def xfmt(r):
    return "-" if r is None else f"{r:.2f}x"


def row_targets(r):
    """(latency target, latency ratio, memory ratio) of one result row; the ratios are None without both
    figures, or when model_bench ran other inputs than PyTorch (its figure is then no comparison)."""
    t, f = r.get("torch", {}), r.get("flatserve", {})
    lat_t = latency_target(r["model"], r["batch"], r["precision"])
    if f.get("input_mismatch"):
        return lat_t, None, None
    return (lat_t, ratio(f.get("median_ms"), t.get("e2e_ms")),
            ratio(f.get("peak_reserved_bytes"), t.get("max_reserved_bytes")))


def verdict(value, limit):
    return "-" if value is None else f"<={limit:.1f}x {'met' if value <= limit else 'missed'}"


def print_header(data):
    d, s = data.get("device", {}), data.get("settings", {})
    rule = s.get("torch_timing", {})
    print("## flatserve's CUDA engine against PyTorch eager\n")
    took = f"; the run took {data['wall_s']:g} s" if data.get("wall_s") is not None else ""
    print(f"- Date: {data.get('date', '?')}, host {data.get('host', '?')}{took}")
    print(f"- Command: `{data.get('command', '?')}`")
    print(f"- GPU: {d.get('name', '?')}, driver {d.get('driver', '?')}; PyTorch {d.get('torch', '?')} "
          f"(CUDA {d.get('cuda', '?')}, cuDNN {d.get('cudnn', '?')}); onnx {d.get('onnx', '?')}, "
          f"onnxruntime {d.get('onnxruntime', '?')}, numpy {d.get('numpy', '?')}")
    print(f"- Models: random weights, torch.manual_seed({s.get('seed', SEED)}) before each is built; exported "
          f"with {s.get('exporter', 'torch.onnx.export')}, opset {s.get('opset', OPSET)}, batch axis 'batch', "
          f"constant folding.")
    for name, m in data.get("models", {}).items():
        params = f", {m['params']:,} parameters" if m.get("params") else ""
        print(f"  - {name}: {m.get('description', '?')}{params}; input {m.get('input', '?')}")
    print("- Inputs, both sides: model_bench's rule, element k of N = k / N as float32 "
          "(np.arange(N).reshape(shape) / N); half/bfloat16 for PyTorch at those precisions.")
    if s.get("tf32_api") == "fp32_precision":
        tf32_how = ("fp32_precision = 'ieee' on torch.backends.cuda.matmul and torch.backends.cudnn "
                    "(and its conv and rnn), tf32 with 'tf32' there")
    else:
        tf32_how = ("torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False, tf32 "
                    "with both on")
    print(f"- PyTorch eager: eval(), torch.inference_mode(); fp32 with TF32 off ({tf32_how}), fp16/bf16 = the model and its input converted (model.half()), so that its end-to-end copies "
          f"move half the bytes of flatserve's float32 inputs and outputs; cudnn.benchmark "
          f"{s.get('cudnn_benchmark', False)}. **compute**: input already on the GPU, the model call alone; "
          f"**end to end**: pinned host input -> .cuda(non_blocking=True) -> model -> .cpu(). Each run between "
          f"two CUDA events and synchronised; {rule.get('warmup_runs', '?')} warm-up runs, then runs until "
          f"{rule.get('budget_s', '?')} s or {rule.get('max_runs', '?')} runs (at least "
          f"{rule.get('min_runs', '?')}); the median. **max reserved**: torch.cuda.max_memory_reserved() after "
          f"gc.collect(), freeing cuBLAS's workspaces, empty_cache() and reset_peak_memory_stats() before "
          f"each (model, batch, precision), so each row is its own peak: weights, activations and what the "
          f"caching allocator kept; the GPU's ceilings are measured after every model.")
    mb = next((r["json"] for r in data.get("model_bench", []) if r.get("json")), None)
    rule_mb = (f"{mb.get('warmup_runs')} warm-up runs, then runs until {mb.get('budget_s'):g} s or "
               f"{mb.get('max_runs')} runs (at least {mb.get('min_runs')})") if mb else "its own rule"
    print(f"- flatserve: `{s.get('bench', 'model_bench')} --device cuda --precision P --json` once per model "
          f"and precision; one eng_model_run (inputs copied in, outputs copied out: end to end) timed with the "
          f"host clock; {rule_mb}; the median. **peak reserved**: its device cache's peak while the batch ran "
          f"(weights, the plan's activation block, what the cache kept). model_bench runs batches 1, 8, 64 in "
          f"that order in one process without emptying its cache between them, so a batch's peak can include "
          f"blocks kept from the smaller batches before it; PyTorch's cache is emptied before each batch. "
          f"Neither side counts the CUDA context or memory that cuBLAS/cuDNN allocate outside the allocator.")
    print()


def print_checks(data):
    print("### Export and correctness\n")
    precs = [p for p in data.get("settings", {}).get("precisions", []) if p != "fp32"]
    head = ["model", "ONNX nodes", "op types", "outside flatserve's set", "no CUDA kernel yet",
            f"ONNX Runtime (CPU) vs PyTorch fp32, batch 1 (rel. L2, fail > {ORT_TOLERANCE:g})"]
    head += [f"PyTorch {p} vs fp32, batch 1 (rel. L2)" for p in precs]
    print("| " + " | ".join(head) + " |")
    print("|---|---:|---|---|---|---:|" + "---:|" * len(precs))
    for name, m in data.get("models", {}).items():
        ops = m.get("ops") or {}
        if m.get("build_error") or m.get("export_error"):
            nodes = types = outside = nocuda = "not exported"
        elif m.get("op_check_skipped"):
            nodes = types = outside = nocuda = cell(m["op_check_skipped"], 40)
        elif m.get("op_check_error"):
            nodes = types = outside = nocuda = "not checked"
        else:
            nodes, types = str(sum(ops.values())), " ".join(sorted(ops))
            outside = " ".join(m.get("outside_set") or []) or "none"
            nocuda = " ".join(m.get("no_cuda_kernel") or []) or "none"
        if m.get("ort_error"):
            ort_cell = "failed"
        elif m.get("ort_rel_l2") is None:
            ort_cell = "-"
        else:
            ort_cell = f"{m['ort_rel_l2']:.2e}" + ("" if m["ort_rel_l2"] <= ORT_TOLERANCE else " MISMATCH")
        cells = [name, nodes, types, outside, nocuda, ort_cell]
        for p in precs:
            v, err = (m.get("low_precision_rel_l2") or {}).get(p), (m.get("low_precision_error") or {}).get(p)
            cells.append("failed" if err else "-" if v is None else f"{v:.2e}")
        print("| " + " | ".join(cells) + " |")
    print()
    for name, m in data.get("models", {}).items():
        for key, what in (("build_error", "building or measuring"), ("export_error", "export"),
                          ("ort_error", "ONNX Runtime check"), ("op_check_error", "op check")):
            if m.get(key):
                print(f"- {name}: {what} failed: {cell(m[key], 400)}")
        for p, err in (m.get("low_precision_error") or {}).items():
            print(f"- {name}: PyTorch {p} output: {cell(err, 400)}")
    ol = data.get("settings", {}).get("op_list") or {}
    print(f"- Ops are checked against {ol.get('file', OPS_LIST)} (flatserve's op set, "
          f"{ol.get('ops', '?')} ops, {ol.get('with_cuda_kernel', '?')} with a CUDA kernel); \"no CUDA kernel "
          f"yet\" lists the export's ops marked N for CUDA there (model_bench says whether that stops the "
          f"model). Exports with ops outside the set are not given to model_bench.")
    print(f"- flatserve's outputs are not compared with PyTorch's: "
          f"{data.get('flatserve_outputs', 'model_bench does not expose its outputs')}.\n")


def print_precision(data, prec):
    rows = [r for r in data.get("results", []) if r.get("precision") == prec]
    print(f"### {prec}\n")
    print("| model | batch | PyTorch compute ms | PyTorch end-to-end ms | flatserve ms (end to end) | "
          "flatserve / PyTorch e2e | flatserve / PyTorch compute | PyTorch max reserved | "
          "flatserve peak reserved | memory flatserve / PyTorch | targets (latency vs e2e; memory) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        t, f = r.get("torch", {}), r.get("flatserve", {})
        lat_t, lat_r, mem_r = row_targets(r)
        fs_cell = ms(f.get("median_ms")) if not f.get("error") else cell(f["error"], 60)
        t_c = ms(t.get("compute_ms")) if not t.get("error") else "failed"
        t_e = ms(t.get("e2e_ms")) if not t.get("error") else "failed"
        if f.get("input_mismatch"):
            targets = "not judged: other inputs"
        elif lat_r is None and mem_r is None:
            targets = "-"
        else:
            targets = f"{verdict(lat_r, lat_t)}; {verdict(mem_r, TARGET_MEMORY)}"
        c_r = None if f.get("input_mismatch") else ratio(f.get("median_ms"), t.get("compute_ms"))
        print(f"| {r['model']} | {r['batch']} | {t_c} | {t_e} | {fs_cell} | {xfmt(lat_r)} | {xfmt(c_r)} | "
              f"{size(t.get('max_reserved_bytes'))} | "
              f"{size(f.get('peak_reserved_bytes'))} | {xfmt(mem_r)} | {targets} |")
    print()
    # Failures in full, one line per model and error (a model that did not load fails every batch alike).
    groups = {}
    for r in rows:
        for side, fig in (("flatserve", r.get("flatserve", {})), ("PyTorch", r.get("torch", {}))):
            for key in ("error", "input_mismatch"):
                if fig.get(key):
                    groups.setdefault((side, r["model"], fig[key]), []).append(str(r["batch"]))
    for (side, model, err), batches in groups.items():
        print(f"- {side} on {model} batch {', '.join(batches)} ({prec}): {cell(err, 400)}")
    for rec in data.get("model_bench", []):
        if rec.get("precision") == prec and rec.get("note"):
            print(f"- {rec['model']} ({prec}): {cell(rec['note'], 400)}")
    if groups:
        print()


def print_targets(data):
    print("### Targets (engine issue)\n")
    print(f"- Latency <= {TARGET_LATENCY:.1f}x PyTorch eager everywhere; BERT batch 1 <= 0.4x, batch 8 <= 0.8x; "
          f"fp16 batch 64 <= 0.8x; peak memory <= {TARGET_MEMORY:.1f}x. A row is held to the tightest that "
          f"applies.")
    print("- Judged against PyTorch **end to end**, since flatserve's figure includes copying the inputs in "
          "and the outputs out; flatserve / PyTorch compute is shown for reference. Memory: flatserve's peak "
          "reserved against PyTorch's max reserved.")
    judged = [r for r in data.get("results", []) if row_targets(r)[1] is not None]
    unjudged = [r for r in data.get("results", []) if row_targets(r)[1] is None]
    if not judged:
        print("- No row has both figures: no target can be judged.\n")
        return
    met = []
    missed = []
    for r in judged:
        lat_t, lat_r, mem_r = row_targets(r)
        name = f"{r['model']} batch {r['batch']} {r['precision']}"
        why = []
        if lat_r > lat_t:
            why.append(f"latency {lat_r:.2f}x > {lat_t:.1f}x")
        if mem_r is None:
            why.append("memory not measured")
        elif mem_r > TARGET_MEMORY:
            why.append(f"memory {mem_r:.2f}x > {TARGET_MEMORY:.1f}x")
        (missed if why else met).append(name if not why else f"{name} ({', '.join(why)})")
    print(f"- Rows meeting every target: {len(met)} of {len(judged)} with both figures"
          + (f": {', '.join(met)}" if met else "") + ".")
    if missed:
        print(f"- Missed: {'; '.join(missed)}.")
    if unjudged:
        print(f"- Not judged (a side has no figure, or model_bench ran other inputs): {len(unjudged)} rows: "
              + ", ".join(f"{r['model']} batch {r['batch']} {r['precision']}" for r in unjudged) + ".")
    print()


def measure_ceilings(torch):
    """The GPU's two ceilings, measured once (device/METHOD.md): a large
    device-to-device copy (bytes read + written per second) and large square
    matrix products in fp32 (TF32 off), tf32 and fp16 (FLOP/s), each the
    median of 20 runs between CUDA events after warm-up."""
    def med(fn, reps=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        times.sort()
        return times[len(times) // 2]
    out = {}
    n = 1 << 28  # 1 GiB of float32
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    out["copy_bytes_per_s"] = 2 * 4 * n / med(lambda: dst.copy_(src))
    del src, dst
    k = 8192
    for name, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                           ("fp16", torch.float16, False)):
        set_tf32(torch, tf32)
        a = torch.rand(k, k, device="cuda", dtype=dt)
        b = torch.rand(k, k, device="cuda", dtype=dt)
        out[f"matmul_{name}_flop_per_s"] = 2 * k ** 3 / med(lambda: a @ b, reps=10)
        del a, b
    set_tf32(torch, False)
    torch_memory_reset(torch)
    return out


def print_ceilings(data):
    c = data.get("ceilings")
    if not c:
        return
    print("### The GPU's measured ceilings\n")
    print(f"- device-to-device copy: {c['copy_bytes_per_s'] / 1e12:.2f} TB/s (bytes read + written)")
    for name in ("fp32", "tf32", "fp16"):
        v = c.get(f"matmul_{name}_flop_per_s")
        if v:
            print(f"- {name} matrix product 8192^3: {v / 1e12:.1f} TFLOP/s")
    print()


def render(data):
    print_header(data)
    print_ceilings(data)
    print_checks(data)
    for prec in data.get("settings", {}).get("precisions", []):
        print_precision(data, prec)
    print_targets(data)
    sys.stdout.flush()


def failed(data):
    """Whether any step failed: the exit status 1 rule."""
    for m in data.get("models", {}).values():
        if any(m.get(k) for k in ("build_error", "export_error", "outside_set", "ort_error", "op_check_error",
                                  "low_precision_error")) or (m.get("ort_rel_l2") or 0) > ORT_TOLERANCE:
            return True
    return any(r.get("torch", {}).get("error") or r.get("flatserve", {}).get("error")
               or r.get("flatserve", {}).get("input_mismatch") for r in data.get("results", [])) \
        or any(rec.get("note") for rec in data.get("model_bench", []))


# ---- the run ----------------------------------------------------------------------------------------

def driver_version():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(\S+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    return "unknown"


def check_model(np, onnx, ort, m, path, engine_ops, ops_error, ref):
    """The op check (against `engine_ops`, from read_engine_ops) and the ONNX Runtime check of one
    export, into its record `m`. An unreadable op list is an op_check_error: the model still goes to
    model_bench, which names any op it lacks itself."""
    if onnx is None:
        m["op_check_skipped"] = "onnx not importable: ops not checked"
    elif ops_error:
        m["op_check_error"] = f"cannot read flatserve's op set: {ops_error}"
    else:
        try:
            m["ops"] = onnx_op_counts(onnx, path)
            m["outside_set"] = sorted(op for op in m["ops"] if op not in engine_ops)
            m["no_cuda_kernel"] = sorted(op for op in m["ops"] if op in engine_ops and not engine_ops[op]["cuda"])
            if m["outside_set"]:
                log(f"{m['name']}: ops outside flatserve's set: {' '.join(m['outside_set'])}")
        except Exception as e:
            m["op_check_error"] = f"{type(e).__name__}: {e}"
    if ort is None:
        m["ort_error"] = "onnxruntime not importable"
    elif isinstance(ref, str):
        m["ort_error"] = f"no PyTorch fp32 output to compare with: {ref}"
    else:
        try:
            m["ort_rel_l2"] = rel_l2(np, ort_output(ort, path, make_input(np, input_shape(m["name"], 1))), ref)
        except Exception as e:  # ORT raises its own exception types per failure
            m["ort_error"] = f"{type(e).__name__}: {e}".replace("\n", " ")


def run_one_model(torch, np, onnx, ort, args, name, workdir, engine_ops, ops_error, data):
    """Everything for one model: build, export, checks, PyTorch, model_bench; into `data`."""
    rule = TIMING[args.quick]
    cpu_model, what = build_model(torch, name)
    shape = input_shape(name, "batch")
    m = {"name": name, "description": what, "params": sum(p.numel() for p in cpu_model.parameters()),
         "input": f"[{', '.join(str(d) for d in shape)}]", "onnx_path": None}
    data["models"][name] = m
    path = os.path.join(workdir, f"{name}.onnx")
    log(f"{name}: {what}; exporting to {path}")
    try:
        data["settings"]["exporter"] = export_onnx(
            torch, cpu_model, torch.from_numpy(make_input(np, input_shape(name, 1))), path)
        m["onnx_path"] = path
    except Exception as e:
        m["export_error"] = f"{type(e).__name__}: {e}".replace("\n", " ")
        log(f"{name}: export failed: {m['export_error']}")

    # PyTorch: fp32 first (the reference output), each precision's copy freed before the next.
    precs = args.precisions
    outputs, timings = {}, {}
    for prec in ["fp32"] + [p for p in precs if p != "fp32"]:
        log(f"{name}: PyTorch {prec}")
        outputs[prec], timings[prec] = torch_run(torch, np, cpu_model, name, prec,
                                                 args.batches if prec in precs else [], rule)
    ref = outputs["fp32"]
    for prec in precs:
        if prec == "fp32":
            continue
        if isinstance(outputs[prec], str) or isinstance(ref, str):
            m.setdefault("low_precision_error", {})[prec] = \
                outputs[prec] if isinstance(outputs[prec], str) else f"no fp32 output to compare with: {ref}"
            continue
        try:
            m.setdefault("low_precision_rel_l2", {})[prec] = rel_l2(np, outputs[prec], ref)
        except ValueError as e:
            m.setdefault("low_precision_error", {})[prec] = str(e)
    if m["onnx_path"]:
        log(f"{name}: op check and ONNX Runtime (CPU) at batch 1")
        check_model(np, onnx, ort, m, path, engine_ops, ops_error, ref)

    # flatserve, with PyTorch's cache handed back to the driver.
    del cpu_model
    torch_memory_reset(torch)
    for prec in precs:
        if m.get("export_error"):
            rec = {"model": name, "precision": prec, "error": "not run: the export failed", "note": None}
        elif m.get("outside_set"):
            rec = {"model": name, "precision": prec, "note": None,
                   "error": f"not run: ops outside flatserve's set: {' '.join(m['outside_set'])}"}
        else:
            rec = run_model_bench(args.bench, path, prec, args.quick, workdir)
        data["model_bench"].append(rec)
        for batch in args.batches:
            data["results"].append({"model": name, "batch": batch, "precision": prec,
                                    "input_shape": input_shape(name, batch), "torch": timings[prec][batch],
                                    "flatserve": flatserve_row(rec, batch, input_shape(name, batch))})
    if not args.onnx_dir and m["onnx_path"]:
        os.unlink(path)
        m["onnx_path"] += " (temporary, removed)"


def report_only(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"torch_ref: --report-only {path}: {e}", file=sys.stderr)
        return 2
    print(f"<!-- rendered by torch_ref.py --report-only from {path} -->\n")
    render(data)
    return 1 if failed(data) else 0


def main():
    args = parse_args()
    if args.list_ops:
        return list_ops()
    if args.report_only:
        return report_only(args.report_only)
    if args.out_json:
        try:  # find out now, not after minutes of measuring
            open(args.out_json, "w").close()
        except OSError as e:
            print(f"torch_ref: --out-json {args.out_json}: {e}", file=sys.stderr)
            return 2
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"torch_ref: cannot measure: {e} (PyTorch and numpy are installed on the GPU machine)",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"torch_ref: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    try:
        import onnx
    except ImportError:
        onnx = None
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if not os.access(args.bench, os.X_OK):
        log(f"{args.bench} is not an executable: every flatserve figure will say so (build with make CUDA=1)")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    tv = None
    try:
        import torchvision
        tv = torchvision.__version__
    except Exception:
        pass
    data = {
        "tool": "torch_ref",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "quick": args.quick,
        "device": {"name": torch.cuda.get_device_name(0), "driver": driver_version(),
                   "memory_bytes": torch.cuda.get_device_properties(0).total_memory,
                   "torch": torch.__version__, "cuda": torch.version.cuda,
                   "cudnn": torch.backends.cudnn.version(), "numpy": np.__version__, "torchvision": tv,
                   "onnx": onnx.__version__ if onnx else "not importable",
                   "onnxruntime": ort.__version__ if ort else "not importable"},
        "settings": {"models": args.models, "batches": args.batches, "precisions": args.precisions,
                     "torch_timing": TIMING[args.quick], "cudnn_benchmark": args.cudnn_benchmark,
                     "seed": SEED, "opset": OPSET, "bench": args.bench},
        "flatserve_outputs": "model_bench does not expose its outputs (its --json has timings and bytes only)",
        "models": {}, "model_bench": [], "results": [],
    }
    engine_ops, ops_error = read_engine_ops()
    if ops_error:
        log(f"ops not checked: {ops_error}")
    data["settings"]["op_list"] = {"file": OPS_LIST, "ops": len(engine_ops),
                                   "with_cuda_kernel": sum(o["cuda"] for o in engine_ops.values())}
    workdir = args.onnx_dir or tempfile.mkdtemp(prefix="torch_ref_")
    os.makedirs(workdir, exist_ok=True)
    begin = time.perf_counter()
    data["settings"]["tf32_api"] = set_tf32(torch, False)
    torch_memory_reset(torch)
    try:
        for name in args.models:
            try:
                run_one_model(torch, np, onnx, ort, args, name, workdir, engine_ops, ops_error, data)
            except Exception as e:  # a bug or a broken install: report it, go on with the next model
                err = f"{type(e).__name__}: {e}".replace("\n", " ")
                log(f"{name}: {err}")
                data["models"].setdefault(name, {"name": name})["build_error"] = err
            try:  # the next model starts from an empty cache and fresh peaks, after a failure too
                torch_memory_reset(torch)
            except Exception as e:  # a CUDA error that stuck: the next model reports it
                log(f"after {name}: resetting PyTorch's memory: {type(e).__name__}: {e}")
    finally:
        if not args.onnx_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    # The ceilings last: their 1 GiB buffers must not sit in the cache while a model is measured.
    try:
        data["ceilings"] = measure_ceilings(torch)
    except Exception as e:  # a measurement, not a reason to stop
        log(f"ceilings: {type(e).__name__}: {e}")
    data["wall_s"] = round(time.perf_counter() - begin, 1)
    log(f"done in {data['wall_s']} s")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(data, f, indent=1)
    render(data)
    if args.out_json:
        print(f"Raw results: {args.out_json}")
    return 1 if failed(data) else 0


if __name__ == "__main__":
    sys.exit(main())
