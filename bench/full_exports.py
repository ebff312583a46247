#!/usr/bin/env python3
"""full_exports.py -- full-size transformer exports on a GPU machine: does
flatserve load what PyTorch's current exporter writes for real model sizes,
match PyTorch, and at what latency and peak memory (issue 14's last target).

    python3 bench/full_exports.py export  --out DIR [--models M,...] [--opset 20] [--seq 128]
    python3 bench/full_exports.py measure --out DIR [--models M,...] [--seq 128]
                                          [--bench PATH] [--conformance PATH] [--json FILE]
                                          [--device cuda|cpu]

Models (Hugging Face transformers, built from a config object with seeded
random weights, nothing downloaded):
    bert    BertModel, BERT-base (12 layers, hidden 768, 12 heads), seq --seq
    gpt2    GPT2LMHeadModel, GPT-2 small (124M), seq --seq, no KV cache
    vit     ViTModel, ViT-B/16 at 224x224
    llama   LlamaForCausalLM at a Llama-3.2-1B-class config (16 layers, hidden
            2048, 32 heads, 8 KV heads, MLP 8192, vocab 128256, tied
            embeddings: 1.24B parameters, 4.9 GB of float32 weights in an
            external data file), seq --seq, no KV cache

`export` writes each as DIR/<model>/ in the conformance runner's layout:
model.onnx (and model.onnx.data when the weights pass protobuf's 2 GB),
test_data_set_0/input_K.pb and output_K.pb (PyTorch's float32 outputs on the
GPU, TF32 off, for batch 2 with padding in the second row's mask), and
torch.json: the export (opset, seconds, bytes, ops, which dims stayed
dynamic) and PyTorch eager on the same GPU per batch (1, 8, 64): median and
p90 (CUDA events, torch_ref.py's timing rule) of the model call on device
tensors and of pinned host inputs to host outputs, and
torch.cuda.max_memory_reserved / max_memory_allocated, weights included. The
exporter is torch.onnx.export(dynamo=True) at --opset with the batch and
sequence dims dynamic (torch.export.Dim), as a user serving variable shapes
would export; when torch.export refuses the dynamic dims the export is
retried with them static and torch.json says so. A model whose torch.json
exists is not exported again, so an export can span calls; `export
--retime` times PyTorch again on those (the same seeded weights).

`measure` runs `conformance --device cuda --report` over DIR (does it load,
does it match PyTorch: the runner's model rule, atol_rel 1e-3 of
max|expected|) and `model_bench --device cuda --json` on each model.onnx
(every symbolic dim but the batch set to --seq), and prints a Markdown
report: per model and batch, flatserve's and PyTorch's median latency and
peak reserved memory, and their ratios. It measures; it asserts nothing
about speed. Exit status: 0; 1 when some export, load, match or run failed
(the report names it); 2 for a bad argument."""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))

import export_zoo  # noqa: E402  (the zoo's case writer, error measure and HF wrapper)
import torch_ref  # noqa: E402  (PyTorch timing and memory rules)

MODELS = ("bert", "gpt2", "vit", "llama")
BATCHES = (1, 8, 64)  # model_bench's, for a dynamic batch dim
SEED = 0
# protobuf's limit on one message: bigger models keep their weights outside.
PROTOBUF_LIMIT = 2 * 1024**3 - 1
RUN_TIMEOUT_S = 580


def log(msg: str) -> None:
    print(f"full_exports: {msg}", file=sys.stderr, flush=True)


# --- the models ----------------------------------------------------------------

def build(torch, name: str, seq: int):
    """(wrapped module, example inputs at batch 2, input names, output names,
    dynamic dims per input as {axis: (dim name, max)}, description)."""
    import transformers as tf
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(7)
    if name == "vit":
        model = tf.ViTModel(tf.ViTConfig(), add_pooling_layer=False).eval()
        x = torch.randn(2, 3, 224, 224, generator=g)
        wrapped = export_zoo._hf_wrapped(torch, model, ["pixel_values"], ["last_hidden_state"]).eval()
        return (wrapped, (x,), ["pixel_values"], ["last_hidden_state"], [{0: ("batch", None)}],
                "ViTModel(ViTConfig()): ViT-B/16, 224x224")
    if name == "bert":
        model, outs = tf.BertModel(tf.BertConfig()), ["last_hidden_state", "pooler_output"]
        what = "BertModel(BertConfig()): BERT-base"
    elif name == "gpt2":
        model, outs = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False)), ["logits"]
        what = "GPT2LMHeadModel(GPT2Config()): GPT-2 small, no KV cache"
    elif name == "llama":
        cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                             num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                             max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                             tie_word_embeddings=True, use_cache=False, bos_token_id=1,
                             eos_token_id=2, pad_token_id=0)
        model, outs = tf.LlamaForCausalLM(cfg), ["logits"]
        what = ("LlamaForCausalLM, Llama-3.2-1B-class: 16 layers, hidden 2048, 32 heads, 8 KV "
                "heads, MLP 8192, vocab 128256, tied embeddings, no KV cache")
    else:
        raise ValueError(f"unknown model '{name}'")
    model.eval()
    export_zoo._randomize_norms(torch, model)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (2, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(2, seq, dtype=torch.int64)
    mask[1, seq - seq // 4:] = 0
    wrapped = export_zoo._hf_wrapped(torch, model, ["input_ids", "attention_mask"], outs).eval()
    dyn = {0: ("batch", None), 1: ("seq", model.config.max_position_embeddings)}
    return wrapped, (ids, mask), ["input_ids", "attention_mask"], outs, [dyn, dyn], what


def export_one(torch, name: str, wrapped, inputs, in_names, out_names, dyn, opset: int,
               path: Path) -> dict:
    """Exports with the dims of dyn dynamic, else (torch.export refusing
    them) static; returns what happened."""
    Dim = torch.export.Dim
    dims = {}
    shapes = tuple({ax: dims.setdefault(d, Dim(d, min=2, max=hi) if hi else Dim(d))
                    for ax, (d, hi) in spec.items()} for spec in dyn)
    n_params = sum(p.numel() for p in wrapped.parameters())
    external = n_params * 4 > PROTOBUF_LIMIT
    info = {"opset": opset, "parameters": n_params, "external_data": external}
    for dynamic in (True, False):
        t0 = time.time()
        try:
            with torch.no_grad():
                torch.onnx.export(wrapped, inputs, str(path), dynamo=True, opset_version=opset,
                                  input_names=in_names, output_names=out_names,
                                  dynamic_shapes=shapes if dynamic else None,
                                  external_data=external, optimize=True, verbose=False)
            info.update(dynamic=dynamic, export_s=round(time.time() - t0, 1))
            return info
        except Exception as e:  # torch.export's constraint violations, the exporter's errors
            msg = export_zoo.failure_line(e)
            while e.__cause__ is not None:
                e = e.__cause__
                msg += " <- " + export_zoo.failure_line(e)
            log(f"{name}: export with {'dynamic' if dynamic else 'static'} dims failed: {msg}")
            info["dynamic_error" if dynamic else "static_error"] = msg
    raise RuntimeError(f"{name}: export failed: {info.get('static_error')}")


def torch_figures(torch, wrapped, inputs, seq: int, batches) -> dict:
    """PyTorch eager on the GPU, float32 with TF32 off, per batch: the model
    call on device tensors (compute_ms) and, as the engine's run is
    measured, from pinned host inputs to host outputs (e2e_ms); median and
    p90 of each, and the peak reserved and allocated bytes."""
    torch_ref.set_tf32(torch, False)
    rule = torch_ref.TIMING[False]
    model = wrapped.cuda()
    figures = {}
    for b in batches:
        host = dev = None
        try:
            torch_ref.torch_memory_reset(torch)
            host = tuple(x[:1].expand(b, *x.shape[1:]).contiguous().pin_memory() for x in inputs)
            dev = tuple(x.cuda() for x in host)
            with torch.inference_mode():
                (med, p90, n), _ = torch_ref.time_cuda(torch, lambda: model(*dev), rule)
                (e_med, e_p90, e_n), _ = torch_ref.time_cuda(
                    torch, lambda: [o.cpu() for o in model(*(x.cuda(non_blocking=True)
                                                             for x in host))], rule)
            figures[str(b)] = {"compute_ms": med, "compute_p90_ms": p90, "compute_runs": n,
                               "e2e_ms": e_med, "e2e_p90_ms": e_p90, "e2e_runs": e_n,
                               "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                               "max_allocated_bytes": torch.cuda.max_memory_allocated()}
        except Exception as e:  # CUDA OOM
            figures[str(b)] = {"error": export_zoo.failure_line(e)}
        del host, dev
    wrapped.cpu()
    torch_ref.torch_memory_reset(torch)
    return figures


def retime_one_model(args, name: str) -> int:
    """--retime: PyTorch's figures again for an exported model (the same
    seeded weights), into its torch.json."""
    import torch
    tj = args.out / name / "torch.json"
    info = json.loads(tj.read_text())
    wrapped, inputs, *_ = build(torch, name, args.seq)
    info["torch"] = torch_figures(torch, wrapped, inputs, args.seq, BATCHES)
    tj.write_text(json.dumps(export_zoo.json_safe(info), indent=1))
    log(f"{name}: PyTorch timed again")
    return 0


def export_one_model(args, name: str) -> int:
    """The child's work for one model: build, export, reference outputs,
    PyTorch's figures, torch.json last."""
    import onnx
    import torch
    d = args.out / name
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    wrapped, inputs, in_names, out_names, dyn, what = build(torch, name, args.seq)
    log(f"{name}: built in {time.time() - t0:.0f} s; exporting")
    info = export_one(torch, name, wrapped, inputs, in_names, out_names, dyn, args.opset,
                      d / "model.onnx")
    model = onnx.load(str(d / "model.onnx"), load_external_data=False)
    ins, outs = export_zoo.io_desc(model)
    info.update(model=name, config=what, ops=export_zoo.ops_used(model), inputs=ins, outputs=outs,
                bytes=sum(f.stat().st_size for f in d.glob("model.onnx*")))
    del model
    torch_ref.set_tf32(torch, False)
    wrapped.cuda()
    with torch.no_grad():
        ref = [o.float().cpu().numpy() for o in wrapped(*(x.cuda() for x in inputs))]
    wrapped.cpu()
    names = [i["name"] for i in ins]
    order = export_zoo.map_inputs(names, in_names)
    export_zoo.write_pbs(d / "test_data_set_0", "input", names, [inputs[k].numpy() for k in order])
    export_zoo.write_pbs(d / "test_data_set_0", "output", [o["name"] for o in outs], ref)
    del ref
    info["torch"] = torch_figures(torch, wrapped, inputs, args.seq, BATCHES)
    info["versions"] = export_zoo.versions()
    info["device"] = torch.cuda.get_device_name(0)
    (d / "torch.json").write_text(json.dumps(export_zoo.json_safe(info), indent=1))
    log(f"{name}: done in {time.time() - t0:.0f} s")
    return 0


def export_all(args) -> int:
    """Each model in its own Python process, as export_zoo.py does: torch's
    global state (the TF32 settings above all, which refuse a mix of their
    legacy and new APIs) does not carry from one export into the next, and
    a crash costs one model."""
    if args.child:
        name = args.models[0]
        try:
            return (retime_one_model if args.retime else export_one_model)(args, name)
        except Exception:
            import traceback
            text = traceback.format_exc()
            (args.out / name / "export_error.txt").write_text(text)
            log(f"{name}: failed: " + " | ".join(text.strip().splitlines()[-3:]))
            return 1
    failed = 0
    for name in args.models:
        done = (args.out / name / "torch.json").exists()
        if done != args.retime:
            log(f"{name}: {'exported already' if done else 'not exported'} ({args.out / name})")
            continue
        cmd = [sys.executable, __file__, "export", "--child", "--out", str(args.out), "--models",
               name, "--opset", str(args.opset), "--seq", str(args.seq)]
        cmd += ["--retime"] if args.retime else []
        failed |= subprocess.run(cmd).returncode != 0
    return failed


# --- flatserve on the exports ---------------------------------------------------

def conformance_results(args) -> dict:
    report = args.out / "conformance.csv"
    cmd = [args.conformance, "--device", args.device, "-j1", "--report", str(report), str(args.out)]
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    (args.out / "conformance.txt").write_text(p.stdout + p.stderr)
    rows = {}
    if report.exists():
        with open(report, newline="") as f:
            for r in csv.DictReader(f):
                rows[r["case"]] = r
    return rows


def bench_rows(args, name: str) -> list[dict]:
    import onnx
    d = args.out / name
    model = onnx.load(str(d / "model.onnx"), load_external_data=False)
    dims = set()
    for vi in export_zoo.graph_inputs(model):
        for k, dim in enumerate(vi.type.tensor_type.shape.dim):
            if k > 0 and dim.HasField("dim_param"):
                dims.add(dim.dim_param)
    out = d / "model_bench.json"
    cmd = [args.bench, "--device", args.device, "--json", str(out)]
    for p in sorted(dims):
        cmd += ["--dim", f"{p}={args.seq}"]
    cmd.append(str(d / "model.onnx"))
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    (d / "model_bench.txt").write_text(p.stdout + p.stderr)
    if not out.exists():
        return [{"ok": False, "error": torch_ref.last_line(p.stdout + p.stderr)}]
    return json.loads(out.read_text())["results"]


def gib(b) -> str:
    return f"{b / 1024**3:.2f} GiB" if isinstance(b, (int, float)) else "-"


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def measure_all(args) -> int:
    if not shutil.which(args.bench) and not Path(args.bench).exists():
        log(f"no model_bench at {args.bench}")
        return 2
    conf = conformance_results(args)
    failed = 0
    results = {}
    print(f"### Full-size exports on {platform.node()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
    print("| model | parameters | ONNX (opset, dims) | loads and matches PyTorch | worst error / "
          "max abs expected |\n|---|---|---|---|---|")
    for name in args.models:
        d = args.out / name
        tj = d / "torch.json"
        if not tj.exists():
            err = (d / "export_error.txt").read_text().strip() if (d / "export_error.txt").exists() \
                else "not exported"
            print(f"| {name} | - | export failed: {err} | - | - |")
            failed = 1
            continue
        info = json.loads(tj.read_text())
        rows = [r for c, r in conf.items() if c == name or c.endswith("/" + name)]
        status = rows[0]["status"] if rows else "not run"
        worst = max((float(r["relative_error"] or 0) for r in rows), default=float("nan"))
        if status != "PASS":
            failed = 1
            status += ": " + (rows[0].get("detail", "") if rows else "")
        dims = sorted({d for i in info["inputs"] for d in (i["shape"] or []) if isinstance(d, str)})
        print(f"| {name} | {info['parameters'] / 1e6:.0f}M | {info['bytes'] / 1e6:.0f} MB, opset "
              f"{info['opset']}, dynamic dims: {', '.join(dims) or 'none'}, "
              f"{len(info['ops'])} op types | {status} | {worst:.2e} |")
        results[name] = {"export": info, "conformance": rows, "flatserve": bench_rows(args, name)}
    print(f"\nLatency (median) and peak reserved device memory (weights included), batch x seq "
          f"{args.seq}, float32 (TF32 off on both sides). flatserve: eng_model_run, host inputs "
          f"to host outputs (model_bench). PyTorch eager: the same from pinned host inputs "
          f"(e2e), and the model call alone on device tensors (compute):\n")
    print("| model | batch | flatserve ms | PyTorch e2e ms | ratio | PyTorch compute ms | "
          "flatserve peak | PyTorch peak | ratio |\n|---|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        tfig = res["export"]["torch"]
        for r in res["flatserve"]:
            b = r.get("batch")
            t = tfig.get(str(b), {}) if b is not None else {}
            if not r.get("ok"):
                failed = 1
                print(f"| {name} | {b} | error: {r.get('error')} | | | | | | |")
                continue
            te, tc, tr = t.get("e2e_ms"), t.get("compute_ms"), t.get("max_reserved_bytes")
            fm, fr = r["median_ms"], r["peak_reserved_bytes"]
            ecell = f"{te:.2f}" if te else t.get("error", "-")
            ccell = f"{tc:.2f}" if tc else "-"
            print(f"| {name} | {b} | {fm:.2f} | {ecell} | {ratio(fm, te)} | {ccell} | {gib(fr)} | "
                  f"{gib(tr)} | {ratio(fr, tr)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(export_zoo.json_safe(results), indent=1))
    return failed


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=("export", "measure"))
    p.add_argument("--out", type=Path, required=True, help="the exports' directory")
    p.add_argument("--models", type=torch_ref.csv_arg(MODELS), default=list(MODELS))
    p.add_argument("--opset", type=int, default=20)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--bench", default="build/cuda/bin/model_bench")
    p.add_argument("--conformance", default="build/cuda/bin/conformance")
    p.add_argument("--device", default="cuda", help="measure: flatserve's device (default cuda)")
    p.add_argument("--json", help="measure: every figure, as JSON")
    p.add_argument("--retime", action="store_true",
                   help="export: time PyTorch again on the models exported already")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seq < 2:
        p.error("--seq must be at least 2")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return export_all(args) if args.stage == "export" else measure_all(args)


if __name__ == "__main__":
    sys.exit(main())
