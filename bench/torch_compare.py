#!/usr/bin/env python3
"""torch_compare.py -- flatserve's CUDA engine beside PyTorch eager and
torch.compile(mode="reduce-overhead"), on ResNet-50, BERT-base, ViT-B/16 and
GPT-2, per batch (1, 8, 64) and precision (fp32, tf32, fp16, bf16): latency,
peak reserved memory, and each side's error against PyTorch's fp32 output
(issue 15's benchmark). It measures; it asserts no speed.

    python3 bench/torch_compare.py run --models M[,M...] [--work DIR] [--batches 1,8,64]
                                   [--precisions fp32,tf32,fp16,bf16] [--sides eager,compile,flatserve]
                                   [--end-by-s S] [--quick] [--redo] [--out-json FILE] ...
    python3 bench/torch_compare.py report FILE_OR_WORKDIR...
    python3 bench/torch_compare.py selfcheck

Models, seeded random weights, nothing downloaded (bench/full_exports.py
builds the three transformers ones; the same seeds give the same weights in
every process): resnet50 (torchvision, non-trivial BatchNorm statistics),
bert (BertModel, BERT-base, seq --seq), vit (ViTModel, ViT-B/16, 224x224),
gpt2 (GPT2LMHeadModel, 124M, seq --seq, no KV cache). Each is exported once
to WORK/<model>/model.onnx (torch.onnx.export(dynamo=True), opset 20, the
batch and sequence dims dynamic; --exporter torchscript for a torch without
the dynamo exporter) in a child process, with PyTorch's fp32 outputs (TF32
off) for every batch as conformance cases, WORK/<model>/cases/<model>_b<B>/.

Per (model, batch, precision), three sides, each its own measurement:
- eager: the model on the GPU in that dtype (fp16/bf16: model.to(dtype) and
  float inputs in that dtype; tf32: fp32 with TF32 on for cuBLAS and cuDNN),
  torch.inference_mode().
- compile: torch.compile(model, mode="reduce-overhead", dynamic=False) made
  afresh for the row after torch._dynamo.reset(), under torch.no_grad(),
  torch.compiler.cudagraph_mark_step_begin() before every call. The first
  call (compile_s: trace + inductor + first run) and the second (capture_s:
  the CUDA graph's recording) are timed apart; a recompile during the timed
  runs fails the row. The dynamo recompile limit is capped (RECOMPILE_LIMIT).
- flatserve: `model_bench --device cuda --precision P --json` on the fp32
  export (every batch in one process) and `conformance --device cuda
  --precision P --report` on the cases (its error against PyTorch's fp32
  output, max |a - e| over max |e| of the worst output).

Timing, both PyTorch sides: the inputs are model_bench's (float:
np.arange(N).reshape(shape) / N; integer: zeros), so all three sides run the
same data. compute_ms: the model call on device inputs between two CUDA
events. e2e_ms: pinned host inputs -> .to(cuda, non_blocking) -> model ->
copy_ into pinned host buffers allocated once per row -> synchronize, timed
with the host clock (perf_counter): the figure that compares with
model_bench's, which is the host clock around eng_model_run (inputs in,
outputs out). Warm-up, then runs until a time budget or a count (TIMING).
Memory: torch.cuda.max_memory_reserved() with only that row's model on the
GPU; the row starts from gc.collect(), freed cuBLAS workspaces,
empty_cache() and reset_peak_memory_stats(); after the warm-up (and the
compile) the cache is emptied and the peak reset again, so
max_reserved_bytes is the steady state of serving (warmup_reserved_bytes
keeps the peak of the warm-up and compile). PyTorch's error: the same model
on the cases' inputs against the fp32 reference.

A run measures at most until --end-by-s seconds after it started: a step
(one compile row, one eager row, one flatserve precision) starts only if
its estimated cost (the largest of its kind so far) fits. Every row is
saved as it completes (WORK/<model>/rows/*.json) and a later run skips the
rows saved already (--redo measures them again), so a part that stopped at
its deadline is continued by running it again. Order: eager, flatserve,
then compile rows with fp16/bf16 at batch 64 and 1 first (the issue's
compile targets).

Output: a Markdown table per model on stdout (the report), progress on
stderr, and --out-json FILE (default $OUT/torch_compare_<models>.json when
$OUT is set) with every row. `report` renders the report of such JSON files
or work directories again, merged (rows of a later file replace those of
an earlier one), without torch or a GPU. `selfcheck` checks the argument
parsing, the input rule, the error measure and the report on canned rows
(no torch needed; nothing it prints is a measurement).

Exit status: 0; 1 when some row failed (the report says which) or rows
were left for a later run (the report lists them); 2 for a bad argument,
an unwritable --out-json, no torch or numpy, or no CUDA device with
--device cuda. See bench/README.md."""

from __future__ import annotations

import argparse
import copy
import csv
import datetime
import gc
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))

import export_zoo  # noqa: E402  (the case writer, the error measure, versions)
import torch_ref  # noqa: E402  (set_tf32, torch_memory_reset, summarize, csv_arg)

MODELS = ("resnet50", "bert", "vit", "gpt2")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
SIDES = ("eager", "compile", "flatserve")
BATCHES = (1, 8, 64)  # model_bench's, for a dynamic batch dim
SEED = 0
OPSET = 20
DEFAULT_WORK = "/tmp/fscmp"
# PyTorch's timing rule per measurement (compute, e2e): warm-up runs (at
# least min, then up to max while within budget), then timed runs until the
# budget or max_runs, at least min_runs. A GPT-2 batch of 64 in fp32 takes
# about 1 s end to end, so the minimums, not the budgets, bound the slow rows.
TIMING = {False: {"warmup_min": 3, "warmup_max": 10, "warmup_budget_s": 1.0,
                  "budget_s": 1.0, "max_runs": 200, "min_runs": 5},
          True: {"warmup_min": 2, "warmup_max": 3, "warmup_budget_s": 0.2,
                 "budget_s": 0.2, "max_runs": 20, "min_runs": 3}}
RECOMPILE_LIMIT = 4
# What a step is assumed to cost before one of its kind has run (seconds).
STEP_GUESS_S = {"eager": 30.0, "compile": 120.0, "flatserve": 90.0}
SUBPROCESS_TIMEOUT_S = 540
# The targets, as flatserve / PyTorch.
TARGET_EAGER = 1.0
TARGET_COMPILE = 1.0
TARGET_MEMORY = 0.6
# Set by bench/gpu_run.sh's compare-all when the models run at once on separate GPUs: what else ran.
CONCURRENT_ENV = "TORCH_COMPARE_CONCURRENT"
COMPILE_TARGET_ROWS = {(m, p, b) for m in ("resnet50", "bert") for p in ("fp16", "bf16") for b in (1, 64)}


def log(msg: str) -> None:
    print(f"torch_compare: {msg}", file=sys.stderr, flush=True)


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def one_line(e: BaseException) -> str:
    return export_zoo.failure_line(e).replace("\n", " ")


def row_key(side: str, precision: str, batch: int) -> str:
    return f"{side}_{precision}_b{batch}"


# ---- the models (torch passed in: this file imports without it) ---------------------------------

def build(torch, name: str, seq: int):
    """(module returning a tuple, example inputs at batch 2, input names, output names, dynamic dims
    per input as {axis: (dim name, max)}, description); the module in eval mode, fp32, on the CPU."""
    if name != "resnet50":
        import full_exports
        return full_exports.build(torch, name, seq)
    torch.manual_seed(SEED)
    model, what = torch_ref.build_resnet50(torch)
    model.eval()
    export_zoo._randomize_norms(torch, model)

    class Tupled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return (self.model(x),)

    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 224, 224, generator=g)
    return (Tupled().eval(), (x,), ["input"], ["logits"], [{0: ("batch", None)}],
            what + ", BatchNorm statistics randomised")


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def concrete_shape(spec_shape, batch: int, seq: int) -> list:
    """model_bench's rule: a symbolic first dim is the batch, any other symbolic dim --dim (seq)."""
    return [d if isinstance(d, int) else (batch if k == 0 else seq) for k, d in enumerate(spec_shape)]


def bench_inputs(np, specs, batch: int, seq: int) -> list:
    """model_bench's inputs (bench_inputs_make): float tensors k / N as float32, the rest zeros."""
    out = []
    for s in specs:
        shape = concrete_shape(s["shape"], batch, seq)
        if s["dtype"] == "float":
            out.append(torch_ref.make_input(np, shape))
        else:
            out.append(np.zeros(shape, dtype=np.dtype(s["dtype"])))
    return out


def error_inputs(torch, name: str, example, batch: int, seq: int):
    """The cases' inputs at `batch`: images drawn from a seeded normal, token ids from a seeded
    uniform in [3, vocab), the attention mask ones except the last row's last quarter (padding)."""
    g = torch.Generator().manual_seed(1000 + batch)
    if name in ("resnet50", "vit"):
        return (torch.randn(batch, *example[0].shape[1:], generator=g),)
    vocab = {"bert": 30522, "gpt2": 50257}[name]
    ids = torch.randint(3, vocab, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - seq // 4:] = 0
    return ids, mask


def worst_error(torch, outs, refs, names) -> dict:
    """export_zoo.error_measure's measure, computed with torch on the CPU (GPT-2's logits at batch 64
    are 400M elements): per output max |a - e| over max |e|, the worst output."""
    worst = None
    for name, a, e in zip(names, outs, refs):
        a = torch.as_tensor(a).float()
        e = torch.as_tensor(e).float()
        if tuple(a.shape) != tuple(e.shape):
            return {"error": f"output '{name}': shape {list(a.shape)}, expected {list(e.shape)}"}
        diff = (a - e).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        if math.isnan(max_abs) or not bool(torch.isfinite(a).all()):
            max_abs = float("inf")
        scale = float(e.abs().max()) if e.numel() else 0.0
        rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        if worst is None or rel > worst["relative_error"]:
            worst = {"output": name, "max_abs_error": max_abs, "max_abs_expected": scale,
                     "relative_error": rel}
    return worst or {"error": "no outputs"}


# ---- prepare: export and reference outputs (a child process) -----------------------------------------

def export_torchscript(torch, wrapped, inputs, in_names, out_names, dyn, opset, path: Path) -> dict:
    axes = {n: {ax: d for ax, (d, _) in spec.items()} for n, spec in zip(in_names, dyn)}
    for n in out_names:
        axes[n] = {0: "batch"}
    t0 = time.time()
    kwargs = {"opset_version": min(opset, 17), "input_names": in_names, "output_names": out_names,
              "dynamic_axes": axes, "do_constant_folding": True}
    import inspect
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with torch.no_grad():
        torch.onnx.export(wrapped, tuple(inputs), str(path), **kwargs)
    return {"opset": kwargs["opset_version"], "dynamic": True, "export_s": round(time.time() - t0, 1),
            "parameters": sum(p.numel() for p in wrapped.parameters())}


def prepare(args) -> int:
    """The child's work for one model: build, export, and for every batch the cases' inputs and
    PyTorch's fp32 outputs (TF32 off) as a conformance case and as .npy; prepared.json last."""
    import numpy as np
    import onnx
    import torch
    name = args.models[0]
    d = Path(args.work) / name
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    wrapped, example, in_names, out_names, dyn, what = build(torch, name, args.seq)
    log(f"{name}: built in {time.time() - t0:.0f} s; exporting ({args.exporter})")
    onnx_path = d / "model.onnx"
    if args.exporter == "dynamo":
        import full_exports
        info = full_exports.export_one(torch, name, wrapped, example, in_names, out_names, dyn,
                                       args.opset, onnx_path)
        info["exporter"] = f"torch.onnx.export(dynamo=True, opset_version={args.opset})"
    else:
        info = export_torchscript(torch, wrapped, example, in_names, out_names, dyn, args.opset, onnx_path)
        info["exporter"] = f"torch.onnx.export(dynamo=False, opset_version={info['opset']}) (TorchScript)"
    model = onnx.load(str(onnx_path), load_external_data=False)
    ins, outs = export_zoo.io_desc(model)
    info.update(model=name, description=what, ops=export_zoo.ops_used(model), inputs=ins, outputs=outs,
                torch_input_names=in_names, torch_output_names=out_names, seq=args.seq,
                bytes=sum(f.stat().st_size for f in d.glob("model.onnx*")))
    del model
    dev = args.device
    if dev == "cuda":
        torch_ref.set_tf32(torch, False)
    wrapped.to(dev)
    graph_names = [i["name"] for i in ins]
    order = export_zoo.map_inputs(graph_names, in_names)
    cases = d / "cases"
    for b in args.batches:
        xs = error_inputs(torch, name, example, b, args.seq)
        with torch.no_grad():
            ref = [o.float().cpu().numpy() for o in as_tuple(wrapped(*(x.to(dev) for x in xs)))]
        case = cases / f"{name}_b{b}"
        case.mkdir(parents=True, exist_ok=True)
        link = case / "model.onnx"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(onnx_path.resolve())
        export_zoo.write_pbs(case / "test_data_set_0", "input", graph_names, [xs[k].numpy() for k in order])
        export_zoo.write_pbs(case / "test_data_set_0", "output", [o["name"] for o in outs], ref)
        for k, x in enumerate(xs):
            np.save(d / f"err_in_b{b}_{k}.npy", x.numpy())
        for k, r in enumerate(ref):
            np.save(d / f"ref_b{b}_{k}.npy", r)
        del ref
        log(f"{name}: fp32 reference at batch {b} written")
    info["reference"] = (f"PyTorch eager fp32 on {dev} (TF32 off), inputs: " +
                         ("images from a seeded normal" if name in ("resnet50", "vit") else
                          "token ids from a seeded uniform in [3, vocab), mask ones but the last row's "
                          "last quarter"))
    info["batches"] = list(args.batches)
    info["exporter_choice"] = args.exporter
    info["versions"] = export_zoo.versions()
    info["device"] = torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu"
    info["prepare_s"] = round(time.time() - t0, 1)
    (d / "prepared.json").write_text(json.dumps(export_zoo.json_safe(info), indent=1))
    log(f"{name}: prepared in {info['prepare_s']} s")
    return 0


def ensure_prepared(args, name: str) -> tuple[dict | None, str | None]:
    """prepared.json of the model, running the child that writes it when it is missing or lacks a
    batch asked for (the seeds make the same weights, so saved rows stay valid: the new cases cover
    the old batches and the new); (info, None) or (None, error text)."""
    pj = Path(args.work) / name / "prepared.json"
    batches = set(args.batches)
    if pj.exists():
        info = json.loads(pj.read_text())
        if info.get("seq") == args.seq and info.get("exporter_choice") == args.exporter:
            if batches <= set(info.get("batches", [])):
                return info, None
            batches |= set(info.get("batches", []))
        else:  # another sequence or exporter: the saved rows measured something else
            log(f"{name}: prepared with seq {info.get('seq')} and the {info.get('exporter_choice')} exporter: "
                f"preparing again, the saved rows dropped")
            for f in (Path(args.work) / name / "rows").glob("*.json"):
                f.unlink()
        pj.unlink()
    cmd = [sys.executable, __file__, "prepare", "--models", name, "--work", args.work, "--seq", str(args.seq),
           "--batches", ",".join(map(str, sorted(batches))), "--exporter", args.exporter, "--opset",
           str(args.opset), "--device", args.device]
    log(" ".join(shlex.quote(c) for c in cmd))
    try:
        p = subprocess.run(cmd, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"prepare did not finish in {SUBPROCESS_TIMEOUT_S} s"
    err = Path(args.work) / name / "prepare_error.txt"
    if p.returncode != 0 or not pj.exists():
        why = err.read_text().strip().splitlines()[-1] if err.exists() else f"exit {p.returncode}"
        return None, f"prepare failed: {why}"
    if err.exists():
        err.unlink()
    return json.loads(pj.read_text()), None


# ---- PyTorch: eager and compiled rows ---------------------------------------------------------------

class TorchSide:
    """The PyTorch state of one run: torch, numpy, the device, the model's CPU master copy, and the
    GPU copy of the precision being measured (one at a time)."""

    def __init__(self, torch, np, args, name, info):
        self.torch, self.np, self.args, self.name, self.info = torch, np, args, name, info
        self.cuda = args.device == "cuda"
        self.dev = args.device
        self.rule = TIMING[args.quick]
        self.cpu_model = build(torch, name, args.seq)[0]
        graph = {i["name"]: i for i in info["inputs"]}
        names = info["torch_input_names"]
        # The graph's input specs in the module's argument order (by name; by position as
        # export_zoo.map_inputs falls back to).
        self.specs = [graph[n] for n in names] if all(n in graph for n in names) else list(info["inputs"])
        self.out_names = [o["name"] for o in info["outputs"]]
        self.gpu_model = None
        self.gpu_precision = None

    def memory_reset(self, full=True):
        """torch_ref.torch_memory_reset (full: cuBLAS workspaces freed too, only between rows: a
        captured CUDA graph keeps pointing at its workspace) or gc + empty_cache + fresh peaks."""
        if not self.cuda:
            gc.collect()
            return None
        if full:
            return torch_ref.torch_memory_reset(self.torch)
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats()
        return self.torch.cuda.memory_reserved()

    def model_for(self, precision):
        """The model on the device in `precision` (TF32 set for it); the previous copy is dropped."""
        torch = self.torch
        if self.cuda:
            torch_ref.set_tf32(torch, precision == "tf32")
        if self.gpu_precision != precision:
            self.gpu_model = None
            self.memory_reset()
            self.gpu_model = copy.deepcopy(self.cpu_model).to(device=self.dev,
                                                              dtype=torch_ref.torch_dtype(torch, precision)).eval()
            self.gpu_precision = precision
        return self.gpu_model

    def drop_model(self):
        self.gpu_model = None
        self.gpu_precision = None
        self.memory_reset()

    def inputs(self, arrays, precision, pin):
        """Torch tensors of numpy arrays on the host, float ones in the precision's dtype, pinned."""
        torch = self.torch
        dt = torch_ref.torch_dtype(torch, precision)
        out = []
        for a in arrays:
            t = torch.from_numpy(a)
            if t.is_floating_point():
                t = t.to(dt)
            out.append(t.pin_memory() if pin and self.cuda else t)
        return out

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_fn(self, fn):
        """Warm-up, then timed runs of fn (CUDA events and the host clock, synchronised after each);
        ({median, p90, runs} of the events or None on the CPU, {median, p90, runs} of the host clock)."""
        torch, rule = self.torch, self.rule
        begin = time.perf_counter()
        n = 0
        while n < rule["warmup_min"] or (n < rule["warmup_max"] and
                                         time.perf_counter() - begin < rule["warmup_budget_s"]):
            fn()
            self.sync()
            n += 1
        ev, wall = [], []
        begin = time.perf_counter()
        while len(wall) < rule["max_runs"]:
            if len(wall) >= rule["min_runs"] and time.perf_counter() - begin > rule["budget_s"]:
                break
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter_ns()
            if self.cuda:
                start.record()
                fn()
                end.record()
                end.synchronize()
                ev.append(start.elapsed_time(end))
            else:
                fn()
            wall.append((time.perf_counter_ns() - t0) / 1e6)

        def stats(s):
            med, p90, k = torch_ref.summarize(s)
            return {"median_ms": med, "p90_ms": p90, "runs": k}
        return (stats(ev) if ev else None), stats(wall)

    def error_of(self, call, precision, batch):
        """The model's error at this batch on the cases' inputs against the fp32 reference."""
        np, torch = self.np, self.torch
        d = Path(self.args.work) / self.name
        xs = [np.load(d / f"err_in_b{batch}_{k}.npy") for k in range(len(self.specs))]
        dev_in = [t.to(self.dev) for t in self.inputs(xs, precision, pin=False)]
        outs = [o.float().cpu() for o in as_tuple(call(dev_in))]
        del dev_in
        refs = [torch.from_numpy(np.load(d / f"ref_b{batch}_{k}.npy", mmap_mode="r").copy())
                for k in range(len(outs))]
        return worst_error(torch, outs, refs, self.out_names)

    def measure(self, call, precision, batch, row):
        """Timing (compute and e2e) and memory of one row into `row`; `call(device inputs)` runs the
        model once. Pinned host buffers for the outputs are made from a first call's outputs."""
        torch, np = self.torch, self.np
        arrays = bench_inputs(np, self.specs, batch, self.args.seq)
        row["inputs"] = [{"name": s["name"], "dtype": s["dtype"], "shape": list(a.shape)}
                         for s, a in zip(self.specs, arrays)]
        host = self.inputs(arrays, precision, pin=True)
        dev_in = [h.to(self.dev) for h in host]
        outs = as_tuple(call(dev_in))
        host_out = [torch.empty(o.shape, dtype=o.dtype, pin_memory=self.cuda) for o in outs]
        del outs

        def e2e():
            xs = [h.to(self.dev, non_blocking=True) for h in host]
            for buf, o in zip(host_out, as_tuple(call(xs))):
                buf.copy_(o, non_blocking=True)

        # Warm-up of both, then the steady state's memory: the compile's and warm-up's garbage handed
        # back, the peak restarted.
        for _ in range(self.rule["warmup_min"]):
            call(dev_in)
            e2e()
        self.sync()
        if self.cuda:
            row["warmup_reserved_bytes"] = torch.cuda.max_memory_reserved()
            self.memory_reset(full=False)
        compute_ev, compute_wall = self.time_fn(lambda: call(dev_in))
        e2e_ev, e2e_wall = self.time_fn(e2e)
        c = compute_ev or compute_wall
        row.update(compute_ms=c["median_ms"], compute_p90_ms=c["p90_ms"], compute_runs=c["runs"],
                   compute_clock="cuda events" if compute_ev else "host clock",
                   compute_wall_ms=compute_wall["median_ms"],
                   e2e_ms=e2e_wall["median_ms"], e2e_p90_ms=e2e_wall["p90_ms"], e2e_runs=e2e_wall["runs"],
                   e2e_event_ms=e2e_ev["median_ms"] if e2e_ev else None,
                   output_bytes=sum(b.numel() * b.element_size() for b in host_out),
                   input_bytes=sum(h.numel() * h.element_size() for h in host))
        if self.cuda:
            row["max_reserved_bytes"] = torch.cuda.max_memory_reserved()
            row["max_allocated_bytes"] = torch.cuda.max_memory_allocated()

    def eager_row(self, precision, batch) -> dict:
        torch = self.torch
        row = {"side": "eager", "model": self.name, "precision": precision, "batch": batch}
        model = self.model_for(precision)
        with torch.inference_mode():
            row["error_vs_fp32"] = self.error_of(lambda xs: model(*xs), precision, batch)
            row["reserved_at_start_bytes"] = self.memory_reset()
            self.measure(lambda xs: model(*xs), precision, batch, row)
        return row

    def compile_row(self, precision, batch) -> dict:
        torch = self.torch
        row = {"side": "compile", "model": self.name, "precision": precision, "batch": batch}
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
        from torch._dynamo.utils import counters
        compile_reset(torch)
        model = self.model_for(precision)
        row["reserved_at_start_bytes"] = self.memory_reset()
        cmodel = torch.compile(model, mode="reduce-overhead", dynamic=False, fullgraph=False)
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

        def call(xs):
            if mark is not None:
                mark()
            return cmodel(*xs)

        np = self.np
        arrays = bench_inputs(np, self.specs, batch, self.args.seq)
        dev_in = [h.to(self.dev) for h in self.inputs(arrays, precision, pin=False)]
        counters.clear()
        with torch.no_grad():
            t0 = time.perf_counter()
            call(dev_in)
            self.sync()
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            call(dev_in)
            self.sync()
            row["capture_s"] = round(time.perf_counter() - t0, 2)
            graphs = counters["stats"].get("unique_graphs", 0)
            row["graphs"] = graphs
            row["graph_breaks"] = sum(counters["graph_break"].values())
            row["cudagraph_skips"] = sum(counters["inductor"].get(k, 0) for k in counters["inductor"]
                                         if "cudagraph_skip" in k)
            del dev_in
            self.measure(call, precision, batch, row)
            more = counters["stats"].get("unique_graphs", 0) - graphs
            if more:
                raise RuntimeError(f"torch.compile compiled {more} more graph(s) during the timed runs: "
                                   f"the figures would include compiling")
            row["error_vs_fp32"] = self.error_of(call, precision, batch)
            if counters["stats"].get("unique_graphs", 0) - graphs:
                row["error_note"] = "the cases' inputs made torch.compile compile again"
        row["counters"] = {k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "inductor")}
        return row


def compile_setup(torch) -> dict:
    """Dynamo's limits for the run: few recompiles, and a hit of the limit an error instead of a
    silent fall back to eager; what was set."""
    import torch._dynamo
    cfg = torch._dynamo.config
    done = {}
    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, key):
            setattr(cfg, key, RECOMPILE_LIMIT)
            done[key] = RECOMPILE_LIMIT
            break
    for key, val in (("fail_on_recompile_limit_hit", True), ("automatic_dynamic_shapes", False)):
        if hasattr(cfg, key):
            setattr(cfg, key, val)
            done[key] = val
    return done


def compile_reset(torch) -> None:
    """Forgets every compiled graph and CUDA graph tree, so that a row starts clean."""
    import torch._dynamo
    torch._dynamo.reset()
    try:
        from torch._inductor import cudagraph_trees
    except ImportError:  # a torch without inductor has no trees to free
        cudagraph_trees = None
    if cudagraph_trees is not None and hasattr(cudagraph_trees, "reset_cudagraph_trees"):
        cudagraph_trees.reset_cudagraph_trees()
    gc.collect()


# ---- flatserve -----------------------------------------------------------------------------------------

def flatserve_rows(args, name: str, info: dict, precision: str) -> list[dict]:
    """model_bench and the conformance runner at one precision: a row per batch asked for."""
    d = Path(args.work) / name
    onnx_path = d / "model.onnx"
    dims = sorted({dim for i in info["inputs"] for k, dim in enumerate(i["shape"] or [])
                   if k > 0 and isinstance(dim, str)})
    jpath = d / f"model_bench_{precision}.json"
    if jpath.exists():
        jpath.unlink()
    cmd = [args.bench, "--device", args.device, "--json", str(jpath)]
    if args.device == "cuda":
        cmd += ["--precision", precision]
    if args.quick:
        cmd.append("--quick")
    for p in dims:
        cmd += ["--dim", f"{p}={args.seq}"]
    cmd.append(str(onnx_path))
    bench_cmd = " ".join(shlex.quote(c) for c in cmd)
    log(bench_cmd)
    results, bench_err, bench_note = [], None, None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=SUBPROCESS_TIMEOUT_S)
        (d / f"model_bench_{precision}.txt").write_text(p.stdout + p.stderr)
        if jpath.exists():
            results = json.loads(jpath.read_text()).get("results", [])
            if p.returncode != 0 and all(r.get("ok") for r in results):
                # Every batch measured, then a failure: the cache's accounting check at the end.
                bench_note = (f"model_bench exited {p.returncode} after measuring: "
                              f"{torch_ref.last_line(p.stderr or p.stdout)}")
        else:
            bench_err = f"model_bench exited {p.returncode} without JSON: {torch_ref.last_line(p.stderr or p.stdout)}"
    except subprocess.TimeoutExpired:
        bench_err = f"model_bench did not finish in {SUBPROCESS_TIMEOUT_S} s"
    except (OSError, ValueError) as e:
        bench_err = f"model_bench: {e}"
    conf = conformance_errors(args, name, precision)
    rows = []
    for b in args.batches:
        row = {"side": "flatserve", "model": name, "precision": precision, "batch": b, "command": bench_cmd}
        r = next((r for r in results if r.get("batch") == b), None)
        if r is None:
            r = next((r for r in results if r.get("batch") is None and not r.get("ok")), None)
        if bench_err:
            row["error"] = bench_err
        elif r is None:
            row["error"] = (f"model_bench reported no row for batch {b} (it ran "
                            f"{', '.join(str(x.get('batch')) for x in results) or 'none'})")
        elif not r.get("ok"):
            row["error"] = r.get("error") or "failed without a message"
        else:
            for k in ("median_ms", "p90_ms", "runs", "peak_reserved_bytes", "weights_bytes",
                      "activation_bytes", "inputs"):
                row[k] = r.get(k)
            want = [(s["name"], s["dtype"], concrete_shape(s["shape"], b, args.seq)) for s in info["inputs"]]
            ran = [(i.get("name"), i.get("dtype"), i.get("shape")) for i in r.get("inputs") or []]
            if ran != want:
                row["input_mismatch"] = f"model_bench ran {ran}, PyTorch {want}"
            if bench_note:
                row["note"] = bench_note
        row["error_vs_fp32"] = conf.get(f"{name}_b{b}", {"error": conf.get("_error", "no conformance result")})
        rows.append(row)
    return rows


def conformance_errors(args, name: str, precision: str) -> dict:
    """{case: error record} from one conformance run over the model's cases at `precision`."""
    d = Path(args.work) / name
    report = d / f"conformance_{precision}.csv"
    if report.exists():
        report.unlink()
    cmd = [args.conformance, "--device", args.device, "-j1", "--timeout", "300", "--report", str(report)]
    if args.device == "cuda":
        cmd += ["--precision", precision]
    cmd.append(str(d / "cases"))
    log(" ".join(shlex.quote(c) for c in cmd))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=SUBPROCESS_TIMEOUT_S)
        (d / f"conformance_{precision}.txt").write_text(p.stdout + p.stderr)
    except (subprocess.TimeoutExpired, OSError) as e:
        return {"_error": f"conformance: {e}"}
    if not report.exists():
        return {"_error": f"conformance exited {p.returncode} without a report: "
                          f"{torch_ref.last_line(p.stderr or p.stdout)}"}
    out = {}
    with open(report, newline="") as f:
        for r in csv.DictReader(f):
            rec = {"status": r["status"], "output": r["output"], "tolerance": r["tolerance"]}
            for k in ("max_abs_error", "max_abs_expected", "relative_error"):
                rec[k] = float(r[k]) if r[k] else None
            if r["status"] != "PASS":
                rec["detail"] = r["detail"]
            if rec["relative_error"] is None:
                rec["error"] = f"{r['status']}: {r['detail']}"
            out[r["case"]] = rec
    return out


# ---- the run ---------------------------------------------------------------------------------------

class Budget:
    """--end-by-s: a step starts only if its estimated cost fits before the end."""

    def __init__(self, end_by_s):
        self.start = time.perf_counter()
        self.end_by_s = end_by_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def fits(self, estimate_s: float) -> bool:
        return self.end_by_s is None or self.elapsed() + estimate_s <= self.end_by_s


class RowStore:
    """WORK/<model>/rows/<side>_<precision>_b<batch>.json: one file a row, written as it completes."""

    def __init__(self, work, name):
        self.dir = Path(work) / name / "rows"
        self.dir.mkdir(parents=True, exist_ok=True)

    def get(self, side, precision, batch):
        p = self.dir / f"{row_key(side, precision, batch)}.json"
        return json.loads(p.read_text()) if p.exists() else None

    def put(self, row):
        """Saves the row, dated now (it has just been measured)."""
        row["date"] = now_utc()
        p = self.dir / f"{row_key(row['side'], row['precision'], row['batch'])}.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(export_zoo.json_safe(row), indent=1))
        tmp.replace(p)

    def all(self):
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.json"))]

    def step_s(self, side):
        """The most a step of this side took (a compile row, an eager row, a flatserve precision), over
        the rows that did not fail (a failure can come early); the first guess without one."""
        vals = [r.get("step_s", 0) for r in self.all() if r.get("side") == side and not r.get("error")]
        return max(vals) if vals else STEP_GUESS_S[side]


def compile_order(precisions, batches):
    """Compile rows, the issue's compile targets first: fp16/bf16 at batch 64 and 1, then the rest."""
    first = [(p, b) for p in ("fp16", "bf16") for b in (64, 1) if p in precisions and b in batches]
    return first + [(p, b) for p in precisions for b in batches if (p, b) not in first]


def run_model(args, name, torch, np, device_name, budget, pending) -> None:
    info, err = ensure_prepared(args, name)
    if err:
        log(f"{name}: {err}")
        pending.append(f"{name}: not measured: {err}")
        return
    store = RowStore(args.work, name)
    stamp = {"device": device_name, "host": platform.node()}
    if os.environ.get(CONCURRENT_ENV):
        stamp["concurrent"] = os.environ[CONCURRENT_ENV]

    def todo(side, p, b):
        """Whether to measure the row: not saved yet, or --redo, or --retry-failed and it failed (a saved
        row is replaced only when the new one is written)."""
        r = store.get(side, p, b)
        return r is None or args.redo or bool(args.retry_failed and r.get("error"))

    ts = None
    torch_sides = [s for s in ("eager", "compile") if s in args.sides]
    if torch_sides and any(todo(s, p, b) for s in torch_sides for p in args.precisions for b in args.batches):
        ts = TorchSide(torch, np, args, name, info)
    try:
        if "eager" in args.sides:
            for p in args.precisions:
                for b in args.batches:
                    if todo("eager", p, b):
                        torch_step(ts, store, "eager", p, b, budget, pending, stamp)
            if ts:
                ts.drop_model()
        if "flatserve" in args.sides:
            for p in args.precisions:
                if not any(todo("flatserve", p, b) for b in args.batches):
                    continue
                if not budget.fits(store.step_s("flatserve")):
                    pending += [f"{name} flatserve {p} batch {b}" for b in args.batches]
                    continue
                t0 = time.perf_counter()
                rows = flatserve_rows(args, name, info, p)
                for r in rows:
                    r.update(stamp, step_s=round(time.perf_counter() - t0, 1))
                    store.put(r)
        if "compile" in args.sides:
            for p, b in compile_order(args.precisions, args.batches):
                if todo("compile", p, b):
                    torch_step(ts, store, "compile", p, b, budget, pending, stamp)
    finally:
        if ts:
            ts.drop_model()


def torch_step(ts, store, side, p, b, budget, pending, stamp) -> None:
    est = store.step_s(side) * (1.2 if side == "compile" else 1.0)
    if not budget.fits(est):
        pending.append(f"{ts.name} {side} {p} batch {b}")
        return
    log(f"{ts.name}: {side} {p} batch {b} (at {budget.elapsed():.0f} s)")
    t0 = time.perf_counter()
    try:
        row = (ts.eager_row if side == "eager" else ts.compile_row)(p, b)
    except Exception as e:  # CUDA OOM, an op without a kernel for this dtype, a compile failure
        row = {"side": side, "model": ts.name, "precision": p, "batch": b, "error": one_line(e)}
        log(f"{ts.name}: {side} {p} batch {b}: {row['error']}")
        try:
            ts.drop_model()
        except Exception as e2:  # a CUDA error that stuck: the next row reports it
            log(f"after the failure: {one_line(e2)}")
    if side == "compile":
        # The row's compiled module is gone with its frame: free its graphs and CUDA graph pools.
        compile_reset(ts.torch)
    row.update(stamp, step_s=round(time.perf_counter() - t0, 1))
    store.put(row)


def collect(work, names) -> dict:
    """The models' prepared info and saved rows from the work directory."""
    models = {}
    for name in names:
        d = Path(work) / name
        pj = d / "prepared.json"
        models[name] = {"prepared": json.loads(pj.read_text()) if pj.exists() else None,
                        "rows": RowStore(work, name).all() if (d / "rows").exists() else []}
    return models


def run(args) -> int:
    if args.out_json:
        try:  # find out now, not after minutes of measuring
            Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
            open(args.out_json, "a").close()
        except OSError as e:
            print(f"torch_compare: --out-json {args.out_json}: {e}", file=sys.stderr)
            return 2
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"torch_compare: cannot measure: {e}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"torch_compare: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    budget = Budget(args.end_by_s)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    dynamo_cfg = compile_setup(torch) if hasattr(torch, "compile") and "compile" in args.sides else {}
    if args.device == "cuda":
        device_name = torch.cuda.get_device_name(0)
        tf32_api = torch_ref.set_tf32(torch, False)
    else:
        device_name, tf32_api = f"cpu ({platform.machine()})", None
    pending = []
    for name in args.models:
        try:
            run_model(args, name, torch, np, device_name, budget, pending)
        except Exception as e:  # a bug or a broken install: report it, go on with the next model
            log(f"{name}: {one_line(e)}")
            pending.append(f"{name}: stopped by {one_line(e)}")
    data = {
        "tool": "torch_compare", "date": now_utc(), "host": platform.node(),
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "device": {"name": device_name, "driver": torch_ref.driver_version() if args.device == "cuda" else None,
                   "torch": torch.__version__, "cuda": torch.version.cuda,
                   "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
                   "versions": export_zoo.versions()},
        "settings": {"models": args.models, "batches": args.batches, "precisions": args.precisions,
                     "sides": args.sides, "seq": args.seq, "quick": args.quick, "timing": TIMING[args.quick],
                     "cudnn_benchmark": args.cudnn_benchmark, "tf32_api": tf32_api, "dynamo_config": dynamo_cfg,
                     "bench": args.bench, "conformance": args.conformance, "work": args.work,
                     "end_by_s": args.end_by_s, "exporter": args.exporter},
        "models": collect(args.work, args.models),
        "pending": pending, "wall_s": round(budget.elapsed(), 1),
    }
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(export_zoo.json_safe(data), indent=1))
    code = render(data)
    if args.out_json:
        print(f"\nRaw results: {args.out_json}")
    return code


# ---- the report (from the JSON alone) ---------------------------------------------------------------

def fnum(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def gib(b) -> str:
    return "-" if not b else f"{b / 1024**3:.2f}"


def ratio(a, b):
    return a / b if a and b else None


def xfmt(r) -> str:
    return "-" if r is None else f"{r:.2f}x"


def errfmt(e) -> str:
    if not e:
        return "-"
    if e.get("error"):
        return "n/a"
    v = e.get("relative_error")
    if v is None or isinstance(v, str):
        return str(v)
    return f"{v:.1e}" + ("" if e.get("status") in (None, "PASS") else f" ({e['status']})")


def index_rows(rows) -> dict:
    return {(r["side"], r["precision"], r["batch"]): r for r in rows}


def row_verdicts(model, p, b, fs, eager, comp) -> tuple[dict, list]:
    """The ratios of one (model, precision, batch) and the targets it misses; a ratio is None when
    a side has no figure, or model_bench ran other inputs, or the sides ran on different GPUs."""
    ok = lambda r: r and not r.get("error")  # noqa: E731
    same = lambda a, c: a.get("device") == c.get("device")  # noqa: E731
    usable = ok(fs) and not fs.get("input_mismatch")
    rat = {"eager": None, "compile": None, "mem_eager": None, "mem_compile": None}
    if usable and ok(eager) and same(fs, eager):
        rat["eager"] = ratio(fs.get("median_ms"), eager.get("e2e_ms"))
        rat["mem_eager"] = ratio(fs.get("peak_reserved_bytes"), eager.get("max_reserved_bytes"))
    if usable and ok(comp) and same(fs, comp):
        rat["compile"] = ratio(fs.get("median_ms"), comp.get("e2e_ms"))
        rat["mem_compile"] = ratio(fs.get("peak_reserved_bytes"), comp.get("max_reserved_bytes"))
    missed = []
    if rat["eager"] is not None and rat["eager"] > TARGET_EAGER:
        missed.append(f"latency {rat['eager']:.2f}x eager")
    if (model, p, b) in COMPILE_TARGET_ROWS and rat["compile"] is not None and rat["compile"] > TARGET_COMPILE:
        missed.append(f"latency {rat['compile']:.2f}x compile")
    if rat["mem_eager"] is not None and rat["mem_eager"] > TARGET_MEMORY:
        missed.append(f"memory {rat['mem_eager']:.2f}x eager")
    return rat, missed


def print_header(data) -> None:
    d, s = data.get("device", {}), data.get("settings", {})
    v = d.get("versions", {})
    t = s.get("timing", {})
    print("## flatserve against PyTorch eager and torch.compile(mode=\"reduce-overhead\")\n")
    print(f"- Date: {data.get('date', '?')}, host {data.get('host', '?')}; this call took "
          f"{data.get('wall_s', '?')} s (rows saved by earlier calls keep their own date, in the JSON)")
    print(f"- Command: `{data.get('command', '?')}`")
    print(f"- GPU: {d.get('name', '?')}, driver {d.get('driver', '?')}; torch {d.get('torch', '?')} "
          f"(CUDA {d.get('cuda', '?')}, cuDNN {d.get('cudnn', '?')}), transformers {v.get('transformers', '?')}, "
          f"torchvision {v.get('torchvision', '?')}, onnx {v.get('onnx', '?')}")
    print(f"- Inputs, all three sides: model_bench's (float k/N, integer zeros; seq {s.get('seq', '?')}). "
          "PyTorch fp16/bf16: model.to(dtype) and float inputs in that dtype, so its copies move half "
          "the bytes of flatserve's float32 inputs and outputs; tf32: TF32 on for cuBLAS and cuDNN "
          f"({s.get('tf32_api', '?')}); fp32: off. cudnn.benchmark {s.get('cudnn_benchmark', False)}.")
    print(f"- PyTorch timing: {t.get('warmup_min', '?')}-{t.get('warmup_max', '?')} warm-up runs, then runs "
          f"until {t.get('budget_s', '?')} s or {t.get('max_runs', '?')} (at least {t.get('min_runs', '?')}); "
          "medians. **e2e**: pinned host inputs -> GPU -> model -> pinned host outputs, host clock: "
          "compares with flatserve's model_bench figure (host clock around eng_model_run, host inputs "
          "to host outputs). **compute**: the model call alone, CUDA events.")
    print("- eager: torch.inference_mode(). compile: torch.compile(mode=\"reduce-overhead\", dynamic=False) "
          "per row after torch._dynamo.reset(), torch.no_grad(), cudagraph_mark_step_begin() before each "
          f"call; dynamo: {s.get('dynamo_config', {})}.")
    print("- Memory: PyTorch's torch.cuda.max_memory_reserved() in the steady state (after the warm-up "
          "and the compile, the cache emptied and the peak reset), only that row's model on the GPU; "
          "flatserve's device cache peak reserved while the batch ran (model_bench runs batches 1, 8, 64 "
          "in one process without emptying its cache). Weights included on both sides.")
    print("- Error: max |out - ref| / max |ref| of the worst output against PyTorch eager fp32 (TF32 "
          "off) on the same GPU, on the cases' inputs (seeded images or token ids with a padded row); "
          "flatserve's from the conformance runner (its status when not PASS).")
    print()


def print_model(name, m) -> tuple[list, list]:
    """The model's table; (rows meeting every target, rows missing some with why)."""
    info = m.get("prepared") or {}
    rows = index_rows(m.get("rows", []))
    print(f"### {name}: {info.get('description', '(not prepared)')}\n")
    if info:
        print(f"Export: {info.get('exporter', '?')}, {info.get('bytes', 0) / 1e6:.0f} MB, "
              f"{len(info.get('ops', []))} op types, dims {'dynamic' if info.get('dynamic') else 'static'}; "
              f"inputs {', '.join(i['name'] + str(i['shape']) for i in info.get('inputs', []))}.\n")
    print("| batch | prec | flatserve ms | eager e2e ms | compile e2e ms | fs/eager | fs/compile | "
          "eager compute ms | compile compute ms | compile s | fs peak GiB | eager peak GiB | "
          "compile peak GiB | fs/eager mem | fs/compile mem | fs err | eager err | compile err |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    met, missed, failures = [], [], []
    keys = sorted({(p, b) for (_, p, b) in rows}, key=lambda k: (PRECISIONS.index(k[0]), k[1]))
    for p, b in keys:
        fs, eager, comp = rows.get(("flatserve", p, b)) or {}, rows.get(("eager", p, b)) or {}, \
            rows.get(("compile", p, b)) or {}
        for side, r in (("flatserve", fs), ("eager", eager), ("compile", comp)):
            if r.get("error"):
                failures.append(f"{name} {side} {p} batch {b}: {r['error']}")
            elif r.get("input_mismatch"):
                failures.append(f"{name} {side} {p} batch {b}: {r['input_mismatch']}")
            elif r.get("note"):
                failures.append(f"{name} {side} {p} batch {b}: {r['note']}")
        rat, miss = row_verdicts(name, p, b, fs, eager, comp)
        tag = f"{name} {p} batch {b}"
        if rat["eager"] is not None or rat["compile"] is not None:
            (missed.append(f"{tag} ({', '.join(miss)})") if miss else met.append(tag))
        cell = lambda r, k: "err" if r.get("error") else fnum(r.get(k))  # noqa: E731
        print(f"| {b} | {p} | {cell(fs, 'median_ms')} | {cell(eager, 'e2e_ms')} | {cell(comp, 'e2e_ms')} | "
              f"{xfmt(rat['eager'])} | {xfmt(rat['compile'])} | {fnum(eager.get('compute_ms'))} | "
              f"{fnum(comp.get('compute_ms'))} | {fnum(comp.get('compile_s'), '{:.0f}')} | "
              f"{gib(fs.get('peak_reserved_bytes'))} | {gib(eager.get('max_reserved_bytes'))} | "
              f"{gib(comp.get('max_reserved_bytes'))} | {xfmt(rat['mem_eager'])} | {xfmt(rat['mem_compile'])} | "
              f"{errfmt(fs.get('error_vs_fp32'))} | {errfmt(eager.get('error_vs_fp32'))} | "
              f"{errfmt(comp.get('error_vs_fp32'))} |")
    notes = []
    breaks = [f"{p} b{b}: {r['graph_breaks']}" for (s, p, b), r in rows.items()
              if s == "compile" and r.get("graph_breaks")]
    if breaks:
        notes.append("torch.compile graph breaks: " + ", ".join(breaks))
    skips = [f"{p} b{b}" for (s, p, b), r in rows.items() if s == "compile" and r.get("cudagraph_skips")]
    if skips:
        notes.append("CUDA graphs skipped by inductor (reduce-overhead ran without them): " + ", ".join(skips))
    devices = sorted({r.get("device") for r in rows.values() if r.get("device")})
    conc = sorted({r["concurrent"] for r in rows.values() if r.get("concurrent")})
    if conc:
        notes.append("measured while other models ran on the host's other GPUs (gpu_run.sh compare-all): "
                     + "; ".join(conc))
    if len(devices) > 1:
        notes.append(f"rows come from different GPUs ({', '.join(devices)}): only same-GPU pairs are compared")
    dates = sorted(r.get("date") for r in rows.values() if r.get("date"))
    if dates:
        notes.append(f"measured {dates[0]} to {dates[-1]} on {', '.join(devices)}")
    print()
    for n in notes:
        print(f"- {n}")
    for f in failures:
        print(f"- FAILED: {f}")
    print()
    return met, missed


def render(data) -> int:
    """Prints the report; the exit status (1 when a row failed or rows are pending)."""
    print_header(data)
    met, missed = [], []
    failed = False
    for name, m in data.get("models", {}).items():
        a, b = print_model(name, m)
        met += a
        missed += b
        failed |= any(r.get("error") or r.get("input_mismatch") or r.get("note") for r in m.get("rows", []))
    print("### Targets (issue 15)\n")
    print(f"- flatserve e2e <= {TARGET_EAGER:.1f}x PyTorch eager e2e on every row; <= {TARGET_COMPILE:.1f}x "
          "torch.compile e2e for ResNet-50 and BERT-base at fp16 and bf16, batch 1 and 64; peak reserved "
          f"<= {TARGET_MEMORY:.1f}x eager's max_memory_reserved on every row.")
    print(f"- Rows meeting every target they have figures for: {len(met)}"
          + (f": {', '.join(met)}" if met else "") + ".")
    if missed:
        print(f"- Missed: {'; '.join(missed)}.")
    pending = data.get("pending") or []
    if pending:
        print(f"- Left for a later run (deadline or a stop): {'; '.join(pending)}.")
    print()
    sys.stdout.flush()
    return 1 if failed or pending else 0


def load_reports(paths) -> dict:
    """Merges result JSONs and work directories: the first file's header, every model's rows, a row
    of a later source replacing the same row of an earlier one."""
    data = {"models": {}, "pending": []}
    for path in paths:
        p = Path(path)
        if p.is_dir():
            names = [c.name for c in sorted(p.iterdir()) if (c / "rows").is_dir() or (c / "prepared.json").exists()]
            src = {"models": collect(p, names), "pending": []}
        else:
            src = json.loads(p.read_text())
        for k in ("tool", "date", "host", "command", "device", "settings", "wall_s"):
            if k in src and k not in data:
                data[k] = src[k]
        data["pending"] = src.get("pending", [])  # the latest source says what is still left
        for name, m in src.get("models", {}).items():
            dst = data["models"].setdefault(name, {"prepared": None, "rows": []})
            dst["prepared"] = m.get("prepared") or dst["prepared"]
            rows = index_rows(dst["rows"])
            rows.update(index_rows(m.get("rows", [])))
            dst["rows"] = list(rows.values())
    return data


def report(args) -> int:
    try:
        data = load_reports(args.files)
    except (OSError, ValueError) as e:
        print(f"torch_compare: report: {e}", file=sys.stderr)
        return 2
    print(f"<!-- rendered by torch_compare.py report from {' '.join(args.files)} -->\n")
    return render(data)


# ---- self-check (no torch, no GPU) -------------------------------------------------------------------

def selfcheck(_args) -> int:
    """Checks what needs no GPU: parsing, the input rule, the error measure, the verdicts and the report
    on canned rows (printed under a banner saying so). Exit 0, or 1 naming the first failed check."""
    import contextlib
    import io
    checks, skipped = [], []

    def check(what, cond):
        checks.append(what)
        if not cond:
            raise AssertionError(what)

    try:
        a = parse_args(["run", "--models", "bert,resnet50", "--precisions", "fp16,fp32", "--batches", "64,1"])
        check("run parses", a.models == ["bert", "resnet50"] and a.batches == [1, 64] and a.precisions == ["fp16", "fp32"])
        check("sides default", a.sides == list(SIDES))
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                parse_args(["run", "--models", "llama"])
                check("unknown model refused", False)
            except SystemExit as e:
                check("unknown model refused", e.code == 2)
        check("compile order", compile_order(["fp32", "fp16", "bf16"], [1, 8, 64])[:4] ==
              [("fp16", 64), ("fp16", 1), ("bf16", 64), ("bf16", 1)])
        check("shape rule", concrete_shape(["batch", "seq"], 8, 128) == [8, 128] and
              concrete_shape(["b", 3, 224, 224], 1, 128) == [1, 3, 224, 224])
        try:
            import numpy as np
        except ImportError:
            np = None
            skipped.append("the input rule and the error measure (numpy not importable)")
        if np is not None:
            xs = bench_inputs(np, [{"name": "x", "dtype": "float", "shape": ["b", 2]},
                                   {"name": "m", "dtype": "int64", "shape": ["b", "s"]}], 2, 3)
            check("float inputs k/N", np.array_equal(xs[0], (np.arange(4) / 4).astype(np.float32).reshape(2, 2)))
            check("int inputs zero", xs[1].dtype == np.int64 and xs[1].shape == (2, 3) and not xs[1].any())
        rat, miss = row_verdicts("resnet50", "fp16", 64,
                                 {"median_ms": 3.0, "peak_reserved_bytes": 70, "device": "G"},
                                 {"e2e_ms": 4.0, "max_reserved_bytes": 100, "device": "G"},
                                 {"e2e_ms": 2.0, "max_reserved_bytes": 100, "device": "G"})
        check("ratios", rat["eager"] == 0.75 and rat["compile"] == 1.5 and rat["mem_eager"] == 0.7)
        check("misses", miss == ["latency 1.50x compile", "memory 0.70x eager"])
        rat, miss = row_verdicts("gpt2", "fp16", 64, {"median_ms": 3.0, "peak_reserved_bytes": 50, "device": "G"},
                                 {"e2e_ms": 4.0, "max_reserved_bytes": 100, "device": "G"},
                                 {"e2e_ms": 2.0, "max_reserved_bytes": 100, "device": "G"})
        check("compile target only where the issue sets it", miss == [])
        rat, _ = row_verdicts("bert", "fp16", 1, {"median_ms": 3.0, "device": "A"}, {"e2e_ms": 4.0, "device": "B"}, {})
        check("different GPUs not compared", rat["eager"] is None)
        try:
            import torch
        except ImportError:
            torch = None
            if np is not None:
                skipped.append("the error measure (torch not importable)")
        if torch is not None and np is not None:
            e = worst_error(torch, [np.array([1.0, 2.5])], [np.array([1.0, 2.0])], ["y"])
            check("error measure", e["relative_error"] == 0.25 and e["output"] == "y")
            e = worst_error(torch, [np.array([np.nan])], [np.array([1.0])], ["y"])
            check("NaN is an infinite error", e["relative_error"] == float("inf"))
        canned = {"date": "canned", "device": {"name": "canned"}, "settings": {}, "models": {"resnet50": {
            "prepared": {"description": "canned rows, not a measurement"},
            "rows": [{"side": "flatserve", "precision": "fp16", "batch": 64, "median_ms": 3.0,
                      "peak_reserved_bytes": 1 << 30, "device": "G", "error_vs_fp32": {"relative_error": 1e-3,
                                                                                      "status": "PASS"}},
                     {"side": "eager", "precision": "fp16", "batch": 64, "e2e_ms": 4.0, "compute_ms": 3.5,
                      "max_reserved_bytes": 2 << 30, "device": "G"},
                     {"side": "compile", "precision": "fp16", "batch": 64, "error": "RuntimeError: canned",
                      "device": "G"}]}}, "pending": ["resnet50 compile fp16 batch 1"]}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = render(canned)
        text = out.getvalue()
        check("report exit status", code == 1)
        check("report table row", "| 64 | fp16 | 3.00 | 4.00 | err | 0.75x | - |" in text)
        check("report failure line", "FAILED: resnet50 compile fp16 batch 64: RuntimeError: canned" in text)
        check("report pending line", "Left for a later run" in text)
    except AssertionError as e:
        print(f"torch_compare: selfcheck FAILED: {e} (after {len(checks) - 1} passed)", file=sys.stderr)
        return 1
    print("=== canned rows, not a measurement: the report as it renders ===")
    print(text)
    for what in skipped:
        print(f"torch_compare: selfcheck: not checked here: {what}")
    print(f"torch_compare: selfcheck: {len(checks)} checks passed")
    return 0


# ---- arguments -----------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure (the GPU machine)")
    pr = sub.add_parser("prepare", help=argparse.SUPPRESS)
    for q in (r, pr):
        q.add_argument("--models", type=torch_ref.csv_arg(MODELS), required=True,
                       help="comma-separated subset of " + ",".join(MODELS))
        q.add_argument("--work", default=DEFAULT_WORK,
                       help=f"exports, cases and saved rows (default {DEFAULT_WORK}; kept between calls)")
        q.add_argument("--batches", type=torch_ref.csv_arg(conv=int), default=list(BATCHES))
        q.add_argument("--seq", type=int, default=128, help="the text models' sequence length (default 128)")
        q.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo")
        q.add_argument("--opset", type=int, default=OPSET)
        q.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                       help="cpu: a check of the plumbing on a machine without a GPU (no compile, no memory)")
    r.add_argument("--precisions", type=torch_ref.csv_arg(PRECISIONS), default=None,
                   help="comma-separated subset of fp32,tf32,fp16,bf16 (default all; fp32 with --device cpu)")
    r.add_argument("--sides", type=torch_ref.csv_arg(SIDES), default=None,
                   help="comma-separated subset of eager,compile,flatserve (default all; eager,flatserve "
                        "with --device cpu)")
    r.add_argument("--end-by-s", type=float, default=None,
                   help="start no step whose estimated cost would end it later than this many seconds "
                        "after the start (the rest is left for a later run)")
    r.add_argument("--quick", action="store_true", help="shorter timing on every side (model_bench --quick)")
    r.add_argument("--redo", action="store_true", help="measure the rows asked for again, even if saved")
    r.add_argument("--retry-failed", action="store_true", help="measure again the saved rows that failed")
    r.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    r.add_argument("--bench", default="build/cuda/bin/model_bench")
    r.add_argument("--conformance", default="build/cuda/bin/conformance")
    r.add_argument("--out-json", default=None, help="every row as JSON (default $OUT/torch_compare_<models>.json)")
    rep = sub.add_parser("report", help="render the report of result JSONs or work directories")
    rep.add_argument("files", nargs="+")
    sub.add_parser("selfcheck", help="check the parts that need no GPU")
    args = p.parse_args(argv)
    if args.cmd in ("run", "prepare") and args.seq < 2:
        p.error("--seq must be at least 2")
    if args.cmd == "run":
        cpu = args.device == "cpu"
        if args.sides is None:
            args.sides = ["eager", "flatserve"] if cpu else list(SIDES)
        if args.precisions is None:
            args.precisions = ["fp32"] if cpu else list(PRECISIONS)
        if cpu and "compile" in args.sides:
            p.error("--device cpu: the compile side is measured on the GPU only (--sides eager,flatserve)")
        if cpu and args.precisions != ["fp32"]:
            p.error("--device cpu runs fp32 only (--precisions fp32)")
        if args.out_json is None and os.environ.get("OUT"):
            args.out_json = os.path.join(os.environ["OUT"], f"torch_compare_{'_'.join(args.models)}.json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.cmd == "selfcheck":
        return selfcheck(args)
    if args.cmd == "report":
        return report(args)
    if args.cmd == "prepare":
        try:
            return prepare(args)
        except Exception:
            import traceback
            text = traceback.format_exc()
            d = Path(args.work) / args.models[0]
            d.mkdir(parents=True, exist_ok=True)
            (d / "prepare_error.txt").write_text(text)
            log(f"{args.models[0]}: prepare failed: " + " | ".join(text.strip().splitlines()[-3:]))
            return 1
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
