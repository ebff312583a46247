#!/usr/bin/env python3
"""export_zoo.py -- writes flatserve's model zoo: small models of the families
people export today, with random weights, through both PyTorch exporters,
each with PyTorch's reference outputs, in ONNX's node-test layout that the
conformance runner reads (tests/conformance/README.md).

    python3 tools/export_zoo.py OUTDIR [--only SUBSTR] [--opsets 17,18,20,23]
                                [--jobs N] [--timeout S]
    python3 tools/export_zoo.py --self-test [DIR]

Needs torch 2.x with onnxscript (the dynamo exporter), transformers,
torchvision, onnx and onnxruntime (CPU). Nothing is downloaded: every model
is built from a config object (transformers' XxxConfig -> XxxModel) or a
torchvision constructor with no weights, then given seeded random weights
(torch.manual_seed from the family's name, so a rerun writes the same
weights). Families are small (hidden sizes 32-64, 2 layers, vocabulary
100, sequences of 8-16, images of 32x32 or 64x64): the whole zoo stays
under about 30 MB.

Exporters, from --opsets: 17 (any opset below 18) is the TorchScript
exporter, torch.onnx.export(..., dynamo=False, opset_version=17); 18 and up
is the torch.export-based one, torch.onnx.export(..., dynamo=True,
opset_version=V). A token may also name the exporter: torchscript17,
dynamo18. Each case is OUTDIR/<family>_<exporter><opset>/:

    model.onnx                 weights inline, never external data files
    test_data_set_0/input_K.pb, output_K.pb
                               the graph's input and output names; outputs
                               are PyTorch's (eval mode, no_grad)
    reference_fp32/output_K.pb fp16 and QDQ cases: the float32 model's
                               outputs, for the error against fp32
    tolerance.txt              QDQ cases: the runner's atol_rel for them

QDQ cases are a float CNN exported by that exporter, then quantized with
onnxruntime.quantization.quantize_static (QDQ format, random calibration
data); their reference outputs are onnxruntime's with graph optimizations
off (the QDQ graph evaluated as written: DequantizeLinear, float op,
QuantizeLinear), since PyTorch has no quantized model to compare with.

Every exported model is also run by onnxruntime (CPU) and its worst error
against the reference recorded. OUTDIR/zoo.json lists every case: family,
exporter, opset, status, bytes, the op types used (nested subgraphs and
functions included), inputs and outputs with dtype and shape, onnxruntime's
max abs error and that over max|expected|, and every failure with its
traceback. A family or exporter that fails is printed, listed and skipped;
nothing else stops. With --only, only the cases whose name contains SUBSTR
are written and zoo.json keeps the other cases' entries.

Each family runs in its own Python process (a crash costs that family),
--jobs at a time (default: the CPUs, at most 16), each with its share of
the CPU threads; --timeout seconds per family (default 420).

--self-test checks what needs no torch (option parsing, the case writer,
the op listing, the inline re-save, the error measure, zoo.json) on a
model built with onnx.helper, and leaves a runnable case in DIR."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# --- what is exported ----------------------------------------------------------

DEFAULT_OPSETS = "17,18,20,23"
FIRST_DYNAMO_OPSET = 18
# The QDQ cases' atol_rel (tolerance.txt): one step of an 8-bit output is
# 1/255 of its range, about 0.8% of max|expected|; a near-tie rounded the
# other way in one intermediate QuantizeLinear moves an output by a step
# or two.
QDQ_ATOL_REL = 0.02
# What onnxruntime must meet for a case's status to be "ok" (the runner's
# defaults; tolerance.txt when the case has one).
ORT_ATOL_REL = 1e-3
ORT_ATOL_REL_HALF = 1e-2
SIZE_BUDGET_BYTES = 30 * 1024 * 1024

# Family name -> (builder function name, what it is). Builders are defined
# below and run only in the worker process, which imports torch.
FAMILIES = {
    "bert": ("build_bert", "HF BertModel: hidden 32, 2 layers, 4 heads, vocab 100, seq 16"),
    "roberta": ("build_roberta", "HF RobertaModel: hidden 32, 2 layers, 4 heads, vocab 100, seq 16"),
    "distilbert": ("build_distilbert", "HF DistilBertModel: dim 32, 2 layers, 4 heads, vocab 100, seq 16"),
    "gpt2": ("build_gpt2", "HF GPT2LMHeadModel: n_embd 32, 2 layers, 4 heads, vocab 100, seq 16, no cache"),
    "llama": ("build_llama", "HF LlamaForCausalLM: hidden 64, 2 layers, 4 heads, 2 KV heads (GQA), RoPE, "
              "RMSNorm, SiLU MLP 128, vocab 100, seq 16, no cache"),
    "t5_encoder": ("build_t5_encoder", "HF T5EncoderModel: d_model 32, d_kv 8, d_ff 64, 2 layers, 4 heads, "
                   "relative attention, vocab 100, seq 16"),
    "vit": ("build_vit", "HF ViTModel: 32x32 image, patch 8, hidden 32, 2 layers, 4 heads"),
    "whisper_encoder": ("build_whisper_encoder", "HF WhisperEncoder: 16 mel bins x 32 frames, d_model 32, "
                        "2 layers, 4 heads"),
    "wav2vec2": ("build_wav2vec2", "HF Wav2Vec2Model: 1600 samples, conv feature extractor 3x16, "
                 "hidden 32, 2 layers, 4 heads, grouped positional conv"),
    "resnet": ("build_resnet", "ResNet from torchvision's BasicBlock: widths 8-16-32-64, one block per "
               "stage, 7x7/2 stem and max pool, 64x64 image (resnet18 itself is 45 MB)"),
    "efficientnet": ("build_efficientnet", "torchvision EfficientNet (MBConv, SiLU, squeeze-excitation): "
                     "4 stages 8-32 channels, head 128, 64x64 image"),
    "mobilenet_v3": ("build_mobilenet_v3", "torchvision mobilenet_v3_small at width 0.25 (hardswish, "
                     "hardsigmoid SE), 64x64 image"),
    "convnext": ("build_convnext", "torchvision ConvNeXt: stages 16-32-64, one block each, layer scale "
                 "0.5, 32x32 image"),
    "swin": ("build_swin", "torchvision SwinTransformer (v1): patch 4, embed 16, depths 2-2, heads 2-4, "
             "window 4 (shifted), 32x32 image"),
    "regnet": ("build_regnet", "torchvision RegNet-Y (SE 0.25, group width 8): depth 4, w_0 16, stem 16, "
               "64x64 image"),
    "detection": ("build_detection", "conv backbone, per-location boxes and scores, torchvision.ops.nms "
                  "(NonMaxSuppression) and roi_align (RoiAlign, aligned) over the kept boxes, a linear "
                  "head; 64x64 image; data-dependent output count"),
    "lstm": ("build_lstm", "torch.nn.LSTM: 2 layers, bidirectional, input 16, hidden 24, batch 2 x seq 8, "
             "linear head"),
    "gru": ("build_gru", "torch.nn.GRU: 2 layers, bidirectional, input 16, hidden 24, batch 2 x seq 8, "
            "linear head"),
    "qdq_cnn": ("build_qdq_cnn", "small CNN (conv-bn-relu x3, residual add, pool, linear), 32x32 image, "
                "quantized by onnxruntime quantize_static: QDQ, uint8 activations, int8 weights"),
    "fp16_cnn": ("build_fp16_cnn", "small CNN (conv-bn-relu, depthwise, pool, linear) after "
                 "model.half(): float16 input, weights and output, 32x32 image"),
    "fp16_transformer": ("build_fp16_transformer", "2 pre-norm transformer blocks (LayerNorm, "
                         "attention by MatMul/Softmax, GELU MLP) after model.half(): float16 "
                         "input (1, 8, 32) and output"),
}


# --- options -------------------------------------------------------------------

def parse_variants(text: str) -> list[tuple[str, int]]:
    """"17,18,dynamo20,torchscript17" -> [("torchscript", 17), ("dynamo", 18), ...],
    in order, without repeats. Raises ValueError on a bad token."""
    out: list[tuple[str, int]] = []
    for tok in text.split(","):
        tok = tok.strip().lower()
        if not tok:
            continue
        exporter = None
        for name in ("torchscript", "dynamo"):
            if tok.startswith(name):
                exporter, tok = name, tok[len(name):]
        if not tok.isdigit():
            raise ValueError(f"bad opset '{tok}' (want a number, or dynamoN / torchscriptN)")
        opset = int(tok)
        if opset < 7:
            raise ValueError(f"opset {opset} is below 7")
        if exporter is None:
            exporter = "dynamo" if opset >= FIRST_DYNAMO_OPSET else "torchscript"
        if (exporter, opset) not in out:
            out.append((exporter, opset))
    if not out:
        raise ValueError("no opset given")
    return out


def case_name(family: str, exporter: str, opset: int) -> str:
    return f"{family}_{exporter}{opset}"


def plan_cases(variants, only: str | None) -> dict[str, list[tuple[str, int]]]:
    """Family -> the variants to export, keeping those whose case name
    contains `only` (all when None); families with none left out."""
    plan = {}
    for fam in FAMILIES:
        keep = [v for v in variants if only is None or only in case_name(fam, *v)]
        if keep:
            plan[fam] = keep
    return plan


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Export flatserve's model zoo (see the module docstring).")
    p.add_argument("outdir", nargs="?", help="where the cases and zoo.json go")
    p.add_argument("--only", metavar="SUBSTR", help="only cases whose name contains SUBSTR")
    p.add_argument("--opsets", default=DEFAULT_OPSETS,
                   help="17: TorchScript exporter; 18 and up: dynamo exporter; or "
                        "torchscriptN / dynamoN (default %(default)s)")
    p.add_argument("--jobs", type=int, default=0, help="families at once (default: CPUs, max 16)")
    p.add_argument("--timeout", type=int, default=420, help="seconds per family (default 420)")
    p.add_argument("--self-test", action="store_true", help="check the torch-free parts")
    p.add_argument("--worker", metavar="FAMILY", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.variants = parse_variants(args.opsets)
    except ValueError as e:
        p.error(f"--opsets: {e}")
    if not args.self_test and not args.outdir:
        p.error("OUTDIR is required")
    if args.jobs < 0 or args.timeout < 1:
        p.error("--jobs must be >= 0 and --timeout >= 1")
    return args


# --- ONNX files: torch-free helpers (onnx and numpy only) ----------------------

def failure_line(exc: BaseException) -> str:
    """One line for a failure: the exception, its first message line, and
    the innermost frame."""
    msg = str(exc).strip().splitlines()
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        f = tb[-1]
        where = f" (at {Path(f.filename).name}:{f.lineno} in {f.name})"
    first = msg[0] if msg else ""
    if len(first) > 300:
        first = first[:300] + "..."
    return f"{type(exc).__name__}: {first}{where}"


def failure_entry(case: str, stage: str, exc: BaseException) -> dict:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > 6000:
        text = text[:1500] + "\n...\n" + text[-4500:]
    return {"case": case, "stage": stage, "error": failure_line(exc), "traceback": text}


def inline_save(path: Path) -> "onnx.ModelProto":
    """Reloads the model at path with any external data pulled in, saves it
    back with every tensor inline, removes the external data files beside
    it, and returns the model."""
    import onnx
    model = onnx.load(str(path), load_external_data=True)
    onnx.save_model(model, str(path), save_as_external_data=False)
    for f in path.parent.iterdir():
        if f.is_file() and f.name != path.name:
            f.unlink()
    return model


def _graphs(graph):
    """The graph and every subgraph in its nodes' attributes, depth first."""
    import onnx
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graphs(g)


def ops_used(model) -> list[str]:
    """Sorted unique op types of the model: main graph, subgraphs and local
    functions; an op outside the default domain as 'domain::Op'."""
    ops = set()

    def add(nodes):
        for n in nodes:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")

    for g in _graphs(model.graph):
        add(g.node)
    for fn in model.functions:
        add(fn.node)
    return sorted(ops)


def _value_desc(vi) -> dict:
    import onnx
    tt = vi.type.tensor_type
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else None
    return {"name": vi.name, "dtype": dtype, "shape": dims if tt.HasField("shape") else None}


def graph_inputs(model) -> list:
    """The graph inputs that are not initializers (old IRs list weights as
    inputs too)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def io_desc(model) -> tuple[list, list]:
    return ([_value_desc(v) for v in graph_inputs(model)],
            [_value_desc(v) for v in model.graph.output])


def map_inputs(graph_names: list[str], given_names: list[str]) -> list[int]:
    """For each graph input, the index of the given tensor it takes: by name
    when every graph input is among the given names, else by position when
    the counts agree. Raises ValueError otherwise."""
    if all(n in given_names for n in graph_names):
        return [given_names.index(n) for n in graph_names]
    if len(graph_names) == len(given_names):
        return list(range(len(graph_names)))
    raise ValueError(f"the model's inputs {graph_names} do not match the given {given_names}")


def write_pbs(directory: Path, prefix: str, names: list[str], arrays: list) -> None:
    """Writes PREFIX_K.pb, one TensorProto per array named names[K]."""
    import numpy as np
    from onnx import numpy_helper
    directory.mkdir(parents=True, exist_ok=True)
    for k, (name, arr) in enumerate(zip(names, arrays)):
        t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        (directory / f"{prefix}_{k}.pb").write_bytes(t.SerializeToString())


def error_measure(expected: list, actual: list, names: list[str]) -> dict:
    """The worst error of actual against expected over the outputs, as the
    runner measures it: for each float output max |a - e| (NaN equal to NaN,
    an infinity only itself) over max |e| of its finite elements; the output
    with the largest ratio. Integer and bool outputs must be equal (a
    difference is an infinite error). A count or shape mismatch is an
    'error' entry."""
    import numpy as np
    if len(expected) != len(actual):
        return {"error": f"{len(actual)} outputs, expected {len(expected)}"}
    worst = None
    for name, e, a in zip(names, expected, actual):
        e = np.asarray(e)
        a = np.asarray(a)
        if e.shape != a.shape:
            return {"error": f"output '{name}': shape {list(a.shape)}, expected {list(e.shape)}"}
        if e.dtype.kind == "f":
            e64, a64 = e.astype(np.float64), a.astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(a64 - e64)
            same = (np.isnan(e64) & np.isnan(a64)) | (np.isinf(e64) & (a64 == e64))
            diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))
            finite = np.abs(e64[np.isfinite(e64)])
            scale = float(finite.max()) if finite.size else 0.0
        else:
            diff = np.where(a == e, 0.0, np.inf)
            finite = np.abs(e.astype(np.float64))
            scale = float(finite.max()) if finite.size else 0.0
        max_abs = float(diff.max()) if diff.size else 0.0
        rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        if worst is None or rel > worst["relative_error"]:
            worst = {"output": name, "max_abs_error": max_abs, "max_abs_expected": scale,
                     "relative_error": rel}
    return worst or {"output": None, "max_abs_error": 0.0, "max_abs_expected": 0.0,
                     "relative_error": 0.0}


def json_safe(obj):
    """Infinities and NaNs as strings, so zoo.json stays strict JSON."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_summary(outdir: Path, results: list[dict], failures: list[dict], meta: dict,
                  replace_only: set[str] | None) -> dict:
    """Writes OUTDIR/zoo.json. With replace_only (the cases this run
    attempted, under --only), entries of other cases already in zoo.json are
    kept. Returns what was written."""
    path = outdir / "zoo.json"
    cases = {r["name"]: r for r in results}
    fails = list(failures)
    if replace_only is not None and path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        for c in old.get("cases", []):
            if c.get("name") not in replace_only and c.get("name") not in cases:
                cases[c["name"]] = c
        fails += [f for f in old.get("failures", []) if f.get("case") not in replace_only]
    ordered = [cases[k] for k in sorted(cases)]
    counts: dict[str, int] = {}
    for c in ordered:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    summary = {
        "cases": len(ordered),
        "by_status": dict(sorted(counts.items())),
        "failures": len(fails),
        "bytes": sum(c.get("bytes", 0) for c in ordered),
    }
    doc = {"meta": meta, "summary": summary, "cases": ordered,
           "failures": sorted(fails, key=lambda f: (f.get("case", ""), f.get("stage", "")))}
    path.write_text(json.dumps(json_safe(doc), indent=1, sort_keys=False) + "\n")
    return doc


def case_status(err: dict, tol: float) -> str:
    if "error" in err:
        return "ort_error"
    rel = err["relative_error"]
    return "ok" if rel <= tol else "ort_mismatch"


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for mod in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript",
                "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # a missing package is worth recording, not fatal
            out[mod] = f"unavailable ({type(e).__name__})"
    return out


# --- the worker: everything below imports torch --------------------------------

def seed_for(family: str) -> int:
    return zlib.crc32(family.encode()) & 0x7FFFFFFF


class Built:
    """A family's model ready to export: the module (eval mode), example
    inputs, their names and the output names; for fp16 families the float32
    model and inputs too; kind 'float', 'fp16' or 'qdq'."""

    def __init__(self, model, inputs, input_names, output_names, kind="float",
                 model_fp32=None, inputs_fp32=None):
        self.model = model
        self.inputs = tuple(inputs)
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.kind = kind
        self.model_fp32 = model_fp32
        self.inputs_fp32 = inputs_fp32
        self.ref_fp32 = None    # fp16: the float32 model's outputs (numpy)
        self.ref_device = None  # fp16: where the references were computed


def _randomize_norms(torch, model):
    """Non-trivial normalization parameters: BatchNorm running statistics and
    every norm layer's scale and shift, so folding them is really tested
    (fresh models have mean 0, var 1, scale 1, shift 0)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            if "Norm" not in type(m).__name__:
                continue
            w = getattr(m, "weight", None)
            b = getattr(m, "bias", None)
            if isinstance(w, torch.nn.Parameter) and w.dim() == 1:
                w.copy_(torch.rand(w.shape, generator=g) + 0.5)
            if isinstance(b, torch.nn.Parameter) and b.dim() == 1:
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            rm = getattr(m, "running_mean", None)
            rv = getattr(m, "running_var", None)
            if isinstance(rm, torch.Tensor) and isinstance(rv, torch.Tensor):
                rm.copy_(torch.randn(rm.shape, generator=g) * 0.1)
                rv.copy_(torch.rand(rv.shape, generator=g) + 0.5)


def _hf_wrapped(torch, model, arg_names, out_names):
    """The HF model as a module with positional tensor inputs (named
    arg_names when passed on) returning a tuple of the named outputs."""
    nn = torch.nn

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def call(self, *xs):
            out = self.model(**dict(zip(arg_names, xs)))
            if isinstance(out, (tuple, list)):
                return tuple(out[: len(out_names)])
            return tuple(out[k] for k in out_names)

    class Flat1(Flat):
        def forward(self, x0):
            return self.call(x0)

    class Flat2(Flat):
        def forward(self, x0, x1):
            return self.call(x0, x1)

    return (Flat1 if len(arg_names) == 1 else Flat2)()


def _text_inputs(torch, vocab=100, seq=16, pad=3):
    """input_ids in [3, vocab) and an attention mask whose last `pad`
    positions are padding, so the mask path is exported and exercised."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, vocab, (1, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, seq - pad:] = 0
    return ids, mask


def _hf_text(torch, model, outputs):
    model.eval()
    ids, mask = _text_inputs(torch)
    wrapped = _hf_wrapped(torch, model, ["input_ids", "attention_mask"], outputs)
    return Built(wrapped, (ids, mask), ["input_ids", "attention_mask"], outputs)


def build_bert(torch):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    return _hf_text(torch, BertModel(cfg), ["last_hidden_state", "pooler_output"])


def build_roberta(torch):
    from transformers import RobertaConfig, RobertaModel
    cfg = RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=1,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return _hf_text(torch, RobertaModel(cfg), ["last_hidden_state", "pooler_output"])


def build_distilbert(torch):
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                           max_position_embeddings=64)
    return _hf_text(torch, DistilBertModel(cfg), ["last_hidden_state"])


def build_gpt2(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=64,
                     bos_token_id=0, eos_token_id=0, use_cache=False)
    return _hf_text(torch, GPT2LMHeadModel(cfg), ["logits"])


def build_llama(torch):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False, use_cache=False)
    return _hf_text(torch, LlamaForCausalLM(cfg), ["logits"])


def build_t5_encoder(torch):
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, use_cache=False)
    return _hf_text(torch, T5EncoderModel(cfg), ["last_hidden_state"])


def build_vit(torch):
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    model = ViTModel(cfg, add_pooling_layer=False).eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    return Built(_hf_wrapped(torch, model, ["pixel_values"], ["last_hidden_state"]), (x,),
                 ["pixel_values"], ["last_hidden_state"])


def build_whisper_encoder(torch):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    # The encoder insists on 2 * max_source_positions frames.
    cfg = WhisperConfig(vocab_size=100, num_mel_bins=16, d_model=32, encoder_layers=2,
                        encoder_attention_heads=4, encoder_ffn_dim=64, decoder_layers=2,
                        decoder_attention_heads=4, decoder_ffn_dim=64, max_source_positions=16,
                        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1)
    model = WhisperEncoder(cfg).eval()
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(7))
    return Built(_hf_wrapped(torch, model, ["input_features"], ["last_hidden_state"]), (x,),
                 ["input_features"], ["last_hidden_state"])


def build_wav2vec2(torch):
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2),
                         conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                         do_stable_layer_norm=False, apply_spec_augment=False, mask_time_prob=0.0)
    model = Wav2Vec2Model(cfg).eval()
    x = torch.randn(1, 1600, generator=torch.Generator().manual_seed(7))
    return Built(_hf_wrapped(torch, model, ["input_values"], ["last_hidden_state"]), (x,),
                 ["input_values"], ["last_hidden_state"])


def _image(torch, size, dtype=None):
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(7))
    return x if dtype is None else x.to(dtype)


def _vision(torch, model, size):
    return Built(model.eval(), (_image(torch, size),), ["image"], ["logits"])


def build_resnet(torch):
    from torchvision.models.resnet import BasicBlock, conv1x1
    nn = torch.nn

    class TinyResNet(nn.Module):
        """torchvision's ResNet layout (7x7/2 stem, max pool, four stages of
        BasicBlocks, global pool, fc) at widths small enough for the zoo."""

        def __init__(self, widths=(8, 16, 32, 64), num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            blocks, inp = [], widths[0]
            for i, w in enumerate(widths):
                stride = 1 if i == 0 else 2
                down = None
                if stride != 1 or inp != w:
                    down = nn.Sequential(conv1x1(inp, w, stride), nn.BatchNorm2d(w))
                blocks.append(BasicBlock(inp, w, stride, down))
                inp = w
            self.layers = nn.Sequential(*blocks)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(inp, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.avgpool(self.layers(x))
            return (self.fc(torch.flatten(x, 1)),)

    return _vision(torch, TinyResNet(), 64)


def _tuple_out(torch, model):
    """model(x) as a 1-tuple, so every family returns a tuple."""

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return (self.model(x),)

    return One()


def build_efficientnet(torch):
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig
    setting = [
        MBConvConfig(1, 3, 1, 16, 8, 1),
        MBConvConfig(6, 3, 2, 8, 16, 1),
        MBConvConfig(6, 5, 2, 16, 24, 1),
        MBConvConfig(6, 3, 2, 24, 32, 1),
    ]
    model = EfficientNet(setting, dropout=0.2, stochastic_depth_prob=0.0, num_classes=10,
                         last_channel=128)
    return _vision(torch, _tuple_out(torch, model), 64)


def build_mobilenet_v3(torch):
    from torchvision.models import mobilenetv3
    setting, last_channel = mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    model = mobilenetv3.MobileNetV3(setting, last_channel, num_classes=10)
    return _vision(torch, _tuple_out(torch, model), 64)


def build_convnext(torch):
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    setting = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    # layer_scale 0.5, not 1e-6: at 1e-6 the blocks vanish under the residual
    # and the output would test almost nothing of them.
    model = ConvNeXt(setting, stochastic_depth_prob=0.0, layer_scale=0.5, num_classes=10)
    return _vision(torch, _tuple_out(torch, model), 32)


def build_swin(torch):
    from torchvision.models.swin_transformer import SwinTransformer
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                            window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)
    return _vision(torch, _tuple_out(torch, model), 32)


def build_regnet(torch):
    from torchvision.models.regnet import BlockParams, RegNet
    params = BlockParams.from_init_params(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8,
                                          se_ratio=0.25)
    model = RegNet(params, num_classes=10, stem_width=16)
    return _vision(torch, _tuple_out(torch, model), 64)


def build_detection(torch):
    import torchvision
    nn = torch.nn

    class TinyDetector(nn.Module):
        """A detector's shape in miniature: features at stride 4, one box and
        one score per location (anchor centres plus predicted offsets and
        log sizes), NMS over them, RoIAlign of the kept boxes from the
        features, and a linear head per box."""

        def __init__(self, size=64, stride=4):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())
            self.box = nn.Conv2d(32, 4, 1)
            self.score = nn.Conv2d(32, 1, 1)
            self.head = nn.Linear(32 * 4 * 4, 6)
            n = size // stride
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            centres = torch.stack([xs, ys], -1).reshape(-1, 2).float() * stride + stride / 2
            self.register_buffer("centres", centres)
            self.stride = stride

        def forward(self, image):
            f = self.backbone(image)
            d = self.box(f).flatten(2)[0].t()                  # (H*W, 4)
            xy = self.centres + d[:, :2] * self.stride
            # Boxes about 4 strides wide: neighbours overlap by more than
            # the IoU threshold, so NMS really suppresses.
            wh = torch.exp(d[:, 2:].clamp(-2.0, 2.0)) * (4 * self.stride)
            boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
            scores = torch.sigmoid(self.score(f).flatten())
            keep = torchvision.ops.nms(boxes, scores, 0.5)
            kept, kept_scores = boxes[keep], scores[keep]
            rois = torch.cat([torch.zeros_like(kept[:, :1]), kept], 1)
            pooled = torchvision.ops.roi_align(f, rois, output_size=(4, 4),
                                               spatial_scale=1.0 / self.stride,
                                               sampling_ratio=2, aligned=True)
            return kept, kept_scores, self.head(pooled.flatten(1))

    model = TinyDetector().eval()
    return Built(model, (_image(torch, 64),), ["image"], ["boxes", "scores", "box_features"])


def _rnn(torch, cell):
    nn = torch.nn

    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = cell(input_size=16, hidden_size=24, num_layers=2, bidirectional=True,
                            batch_first=True)
            self.head = nn.Linear(48, 5)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y), y

    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(7))
    return Built(Seq().eval(), (x,), ["sequence"], ["logits", "hidden"])


def build_lstm(torch):
    return _rnn(torch, torch.nn.LSTM)


def build_gru(torch):
    return _rnn(torch, torch.nn.GRU)


def _small_cnn(torch, depthwise=False):
    nn = torch.nn

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                    nn.ReLU())
            self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.ReLU())
            groups = 32 if depthwise else 1
            self.c3 = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, groups=groups, bias=False),
                                    nn.BatchNorm2d(32), nn.ReLU())
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.c2(self.c1(x))
            x = x + self.c3(x)
            return (self.fc(torch.flatten(self.pool(x), 1)),)

    return SmallCNN()


def build_qdq_cnn(torch):
    b = _vision(torch, _small_cnn(torch), 32)
    b.kind = "qdq"
    return b


def _half(torch, model, inputs, input_names, output_names):
    import copy
    model.eval()
    fp32 = copy.deepcopy(model)
    return Built(model.half(), tuple(x.half() for x in inputs), input_names, output_names,
                 kind="fp16", model_fp32=fp32, inputs_fp32=tuple(inputs))


def build_fp16_cnn(torch):
    return _half(torch, _small_cnn(torch, depthwise=True), (_image(torch, 32),), ["image"],
                 ["logits"])


def build_fp16_transformer(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, ff)
            self.fc2 = nn.Linear(ff, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class TinyTransformer(nn.Module):
        def __init__(self, d=32, heads=4, ff=64, layers=2):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(d, heads, ff) for _ in range(layers)])
            self.norm = nn.LayerNorm(d)

        def forward(self, x):
            return (self.norm(self.blocks(x)),)

    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(7))
    return _half(torch, TinyTransformer(), (x,), ["tokens"], ["hidden"])


def _run_torch(torch, model, inputs, cuda_fallback=False):
    """The model's outputs as numpy arrays, computed on the CPU, or with
    cuda_fallback (float16 kernels the CPU may lack) on CUDA when the CPU
    refuses and there is a GPU. Returns (outputs, device)."""
    with torch.no_grad():
        try:
            outs = model(*inputs)
            device = "cpu"
        except RuntimeError:
            if not cuda_fallback or not torch.cuda.is_available():
                raise
            model.cuda()
            outs = model(*(x.cuda() for x in inputs))
            device = "cuda"
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    return [o.detach().cpu().numpy() for o in outs], device


def _export(torch, built, path: Path, exporter: str, opset: int, device: str):
    import inspect
    model = built.model
    args = tuple(x.to(device) for x in built.inputs)
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(model, args, str(path), dynamo=True, opset_version=opset,
                              input_names=built.input_names, output_names=built.output_names,
                              external_data=False, optimize=True, verbose=False)
        else:
            kw = {}
            if "dynamo" in inspect.signature(torch.onnx.export).parameters:
                kw["dynamo"] = False
            torch.onnx.export(model, args, str(path), opset_version=opset,
                              input_names=built.input_names, output_names=built.output_names,
                              do_constant_folding=True, **kw)


def _ort_session(path: Path, threads: int, optimized: bool = True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, threads)
    so.inter_op_num_threads = 1
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _ort_run(sess, names, arrays):
    return sess.run(None, dict(zip(names, arrays)))


def _quantize(src: Path, dst: Path, input_name: str, shape):
    """Quantizes the float model at src into dst: QDQ, uint8 activations,
    int8 weights, calibrated on 8 random inputs of `shape`."""
    import numpy as np
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(11)
            self.batches = iter([{input_name: rng.standard_normal(shape).astype(np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=False, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)


def _variant(torch, family, built, ref, exporter, opset, outdir: Path, threads: int,
             device: str, failures: list) -> dict | None:
    """Exports one case and writes its data; returns its zoo.json entry, or
    None with the failure appended."""
    import numpy as np
    name = case_name(family, exporter, opset)
    casedir = outdir / name
    shutil.rmtree(casedir, ignore_errors=True)
    casedir.mkdir(parents=True)
    path = casedir / "model.onnx"
    t0 = time.time()
    stage = "export"
    try:
        if built.kind == "qdq":
            with tempfile.TemporaryDirectory() as tmp:
                fpath = Path(tmp) / "float.onnx"
                _export(torch, built, fpath, exporter, opset, device)
                fmodel = inline_save(fpath)
                stage = "quantize"
                _quantize(fpath, path, graph_inputs(fmodel)[0].name, tuple(built.inputs[0].shape))
        else:
            _export(torch, built, path, exporter, opset, device)
        stage = "save"
        model = inline_save(path)
        stage = "data"
        ins, outs = io_desc(model)
        in_names = [i["name"] for i in ins]
        out_names = [o["name"] for o in outs]
        order = map_inputs(in_names, built.input_names)
        arrays = [built.inputs[k].cpu().numpy() for k in order]
        entry = {"name": name, "family": family, "exporter": exporter, "opset": opset,
                 "config": FAMILIES[family][1], "seed": seed_for(family),
                 "bytes": path.stat().st_size, "ops": ops_used(model), "inputs": ins,
                 "outputs": outs, "reference": "pytorch"}
        expected = ref
        tol = ORT_ATOL_REL_HALF if built.kind == "fp16" else ORT_ATOL_REL
        if built.kind == "qdq":
            stage = "reference"
            sess = _ort_session(path, threads, optimized=False)
            expected = _ort_run(sess, in_names, arrays)
            entry["reference"] = "onnxruntime, graph optimizations off (the QDQ graph as written)"
            entry["reference_fp32"] = error_measure(ref, expected, out_names)
            write_pbs(casedir / "reference_fp32", "output", out_names, ref)
            entry["reference_fp32_dir"] = "reference_fp32"
            (casedir / "tolerance.txt").write_text(
                f"# atol_rel for this QDQ case: a step or two of 8-bit outputs\n{QDQ_ATOL_REL}\n")
            tol = QDQ_ATOL_REL
        if len(expected) != len(out_names):
            raise ValueError(f"{len(expected)} reference outputs, the model has {len(out_names)}")
        write_pbs(casedir / "test_data_set_0", "input", in_names, arrays)
        write_pbs(casedir / "test_data_set_0", "output", out_names, expected)
        if built.kind == "fp16":
            ref32 = built.ref_fp32
            write_pbs(casedir / "reference_fp32", "output", out_names, ref32)
            entry["reference_fp32_dir"] = "reference_fp32"
            entry["reference_fp32"] = error_measure(
                [r.astype(np.float32) for r in ref32], [e.astype(np.float32) for e in expected],
                out_names)
            entry["reference_device"] = built.ref_device
    except Exception as e:
        failures.append(failure_entry(name, stage, e))
        shutil.rmtree(casedir, ignore_errors=True)
        print(f"FAIL {name}: {stage}: {failure_line(e)}", flush=True)
        return None
    try:
        sess = _ort_session(path, threads)
        got = _ort_run(sess, in_names, arrays)
        err = error_measure(expected, got, out_names)
        if built.kind == "qdq":
            entry["ort_optimized"] = err
        if built.kind == "fp16" and "error" not in err:
            entry["ort_vs_fp32"] = error_measure(
                [r.astype(np.float32) for r in built.ref_fp32],
                [g.astype(np.float32) for g in got], out_names)
    except Exception as e:
        err = {"error": failure_line(e)}
    entry["ort"] = err
    entry["status"] = case_status(err, tol)
    entry["seconds"] = round(time.time() - t0, 2)
    rel = err.get("relative_error")
    detail = err.get("error") or f"ort rel error {rel:.3g}"
    print(f"{entry['status']:<13} {name} ({entry['bytes']} bytes; {detail})", flush=True)
    return entry


def worker_main(family: str, variants, outdir: Path, out_json: Path, threads: int) -> int:
    """Builds one family and exports its variants; writes {"cases": [...],
    "failures": [...]} to out_json. Returns 0 (failures are in the file)."""
    results, failures = [], []

    def dump():
        out_json.write_text(json.dumps(json_safe({"cases": results, "failures": failures})))

    try:
        import torch
        torch.set_num_threads(max(1, threads))
        torch.manual_seed(seed_for(family))
        built = globals()[FAMILIES[family][0]](torch)
        _randomize_norms(torch, built.model)
        built.model.eval()
        ref, device = _run_torch(torch, built.model, built.inputs,
                                 cuda_fallback=built.kind == "fp16")
        if built.kind == "fp16":
            # model_fp32 was copied before _randomize_norms: copy the
            # randomized state over so both models hold the same weights.
            built.model_fp32.load_state_dict({k: v.float() for k, v in
                                              built.model.state_dict().items()})
            built.ref_fp32, _ = _run_torch(torch, built.model_fp32.eval(), built.inputs_fp32)
            built.ref_device = device
    except Exception as e:
        for exporter, opset in variants:
            failures.append(failure_entry(case_name(family, exporter, opset), "build", e))
        print(f"FAIL {family}: build: {failure_line(e)}", flush=True)
        dump()
        return 0
    for exporter, opset in variants:
        entry = _variant(torch, family, built, ref, exporter, opset, outdir, threads, device,
                         failures)
        if entry:
            results.append(entry)
        dump()
    return 0


# --- the parent: no torch here -------------------------------------------------

def run_family_process(family, variants, outdir: Path, tmp: Path, threads: int,
                       timeout: int) -> tuple[list, list, str]:
    """Runs one family in a child Python; returns (cases, failures, log)."""
    out_json = tmp / f"{family}.json"
    log = tmp / f"{family}.log"
    opsets = ",".join(f"{e}{o}" for e, o in variants)
    cmd = [sys.executable, os.path.abspath(__file__), str(outdir), "--opsets", opsets,
           "--worker", family, "--worker-out", str(out_json), "--worker-threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONUNBUFFERED="1")
    with open(log, "w") as lf:
        try:
            rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env,
                                timeout=timeout).returncode
            why = None if rc == 0 else f"the worker exited with status {rc}"
        except subprocess.TimeoutExpired:
            why = f"the worker ran past {timeout} s and was killed"
    text = log.read_text(errors="replace")
    data = {"cases": [], "failures": []}
    if out_json.exists():
        try:
            data = json.loads(out_json.read_text())
        except ValueError:
            why = why or "the worker's result file is not JSON"
    if why:
        done = {c["name"] for c in data["cases"]} | {f["case"] for f in data["failures"]}
        tail = text[-3000:]
        for e, o in variants:
            name = case_name(family, e, o)
            if name not in done:
                shutil.rmtree(outdir / name, ignore_errors=True)
                data["failures"].append({"case": name, "stage": "worker", "error": why,
                                         "traceback": tail})
    return data["cases"], data["failures"], text


def parent_main(args) -> int:
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    plan = plan_cases(args.variants, args.only)
    if not plan:
        print(f"export_zoo: no case name contains '{args.only}'", file=sys.stderr)
        return 2
    cpus = os.cpu_count() or 1
    jobs = args.jobs or min(cpus, 16)
    jobs = max(1, min(jobs, len(plan)))
    threads = max(1, cpus // jobs)
    tmp = Path(tempfile.mkdtemp(prefix="export-zoo-"))
    print(f"export_zoo: {len(plan)} families, {sum(len(v) for v in plan.values())} cases, "
          f"{jobs} at once with {threads} threads each; logs in {tmp}", flush=True)
    t0 = time.time()
    results, failures = [], []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_family_process, fam, variants, outdir, tmp, threads,
                            args.timeout): fam for fam, variants in plan.items()}
        for fut in futs:
            fam = futs[fut]
            try:
                cases, fails, log = fut.result()
            except Exception as e:  # the runner itself, not the export
                cases, log = [], ""
                fails = [failure_entry(case_name(fam, ex, o), "worker", e)
                         for ex, o in plan[fam]]
            results += cases
            failures += fails
            for line in log.splitlines():
                if line.startswith(("ok ", "ort_", "FAIL ")):
                    print(f"  {line}")
            for f in fails:
                if f["stage"] == "worker":
                    print(f"  FAIL {f['case']}: {f['error']}")
    attempted = {case_name(f, e, o) for f, vs in plan.items() for e, o in vs}
    meta = {"generator": "tools/export_zoo.py", "versions": versions(),
            "opsets": [f"{e}{o}" for e, o in args.variants], "only": args.only,
            "seconds": round(time.time() - t0, 1)}
    doc = write_summary(outdir, results, failures, meta,
                        attempted if args.only is not None else None)
    s = doc["summary"]
    print(f"\nexport_zoo: {s['cases']} cases in {outdir / 'zoo.json'} "
          f"({s['bytes'] / 1e6:.1f} MB): {s['by_status']}; {s['failures']} failures "
          f"in {meta['seconds']} s")
    if s["bytes"] > SIZE_BUDGET_BYTES:
        print(f"export_zoo: warning: the zoo is {s['bytes'] / 1e6:.1f} MB, over the "
              f"{SIZE_BUDGET_BYTES / 1e6:.0f} MB budget")
    for f in doc["failures"]:
        print(f"  failed {f['case']} ({f['stage']}): {f['error']}")
    return 0


# --- self-test (no torch) ------------------------------------------------------

def self_test(directory: Path) -> int:
    """Checks the torch-free helpers: option parsing, the error measure, the
    op listing (through an If's branches), and a case written through the
    same writer the export uses (Relu(x + w) and ArgMax(x), saved with
    external data first), which the conformance runner can run."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    assert parse_variants("17,18,20,23") == [("torchscript", 17), ("dynamo", 18),
                                              ("dynamo", 20), ("dynamo", 23)]
    assert parse_variants("dynamo17, torchscript18,18,18") == [("dynamo", 17),
                                                               ("torchscript", 18),
                                                               ("dynamo", 18)]
    for bad in ("", "x", "17,abc", "5"):
        try:
            parse_variants(bad)
        except ValueError:
            continue
        raise AssertionError(f"parse_variants accepted {bad!r}")
    plan = plan_cases(parse_variants("17,18"), "bert_dyn")
    assert plan == {"bert": [("dynamo", 18)], "distilbert": [("dynamo", 18)]}, plan
    assert plan_cases(parse_variants("17,18"), "roberta_torchscript17") == {
        "roberta": [("torchscript", 17)]}
    assert "distilbert" in plan_cases(parse_variants("17"), "bert")
    assert map_inputs(["b", "a"], ["a", "b"]) == [1, 0]
    assert map_inputs(["x.1"], ["image"]) == [0]

    e = [np.array([1000.0, 0.001], np.float32), np.array([3, 4], np.int64)]
    a = [np.array([1000.5, 0.0011], np.float32), np.array([3, 4], np.int64)]
    m = error_measure(e, a, ["y", "idx"])
    assert m["output"] == "y" and abs(m["max_abs_error"] - 0.5) < 1e-6, m
    assert abs(m["relative_error"] - 0.5 / 1000.0) < 1e-6, m
    m = error_measure([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])], ["y"])
    assert m["max_abs_error"] == 0.0, m
    m = error_measure([np.array([1, 2])], [np.array([1, 3])], ["i"])
    assert m["relative_error"] == float("inf"), m
    assert "error" in error_measure([np.zeros(2)], [np.zeros(3)], ["y"])
    assert case_status({"relative_error": 1e-4}, 1e-3) == "ok"
    assert case_status({"relative_error": 1e-2}, 1e-3) == "ort_mismatch"

    name = "selftest_torchscript17"
    casedir = directory / name
    shutil.rmtree(casedir, ignore_errors=True)
    casedir.mkdir(parents=True)
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    then_g = helper.make_graph([helper.make_node("Relu", ["s"], ["o_then"])], "then", [],
                               [helper.make_tensor_value_info("o_then", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["s"], ["o_else"])], "else", [],
                               [helper.make_tensor_value_info("o_else", TensorProto.FLOAT, [2, 3])])
    nested = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"]),
         helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
        "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                   helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w")]))
    assert ops_used(nested) == ["Add", "If", "Neg", "Relu"], ops_used(nested)
    assert io_desc(nested)[0][1] == {"name": "cond", "dtype": "bool", "shape": []}

    # The case written: y = Relu(x + w), z = ArgMax(x) (an integer output).
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Relu", ["s"], ["y"]),
         helper.make_node("ArgMax", ["x"], ["z"], axis=1, keepdims=0)],
        "selftest", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [2])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = casedir / "model.onnx"
    # Saved with external data, as a careless export would: inline_save must
    # bring it back into the file.
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    assert (casedir / "model.onnx.data").exists()
    model = inline_save(path)
    assert not (casedir / "model.onnx.data").exists()
    assert all(t.data_location != TensorProto.EXTERNAL for t in model.graph.initializer)
    onnx.checker.check_model(onnx.load(str(path)))
    assert ops_used(model) == ["Add", "ArgMax", "Relu"], ops_used(model)
    ins, outs = io_desc(model)
    assert ins == [{"name": "x", "dtype": "float", "shape": [2, 3]}], ins
    assert outs == [{"name": "y", "dtype": "float", "shape": [2, 3]},
                    {"name": "z", "dtype": "int64", "shape": [2]}], outs

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    want = [np.maximum(x + w, 0), np.argmax(x, axis=1).astype(np.int64)]
    write_pbs(casedir / "test_data_set_0", "input", ["x"], [x])
    write_pbs(casedir / "test_data_set_0", "output", ["y", "z"], want)
    back = onnx.load_tensor(str(casedir / "test_data_set_0" / "output_0.pb"))
    assert back.name == "y" and np.array_equal(numpy_helper.to_array(back), want[0])
    back = onnx.load_tensor(str(casedir / "test_data_set_0" / "output_1.pb"))
    assert back.name == "z" and numpy_helper.to_array(back).dtype == np.int64

    entry = {"name": name, "family": "selftest", "exporter": "torchscript", "opset": 17,
             "bytes": path.stat().st_size, "ops": ops_used(model), "inputs": ins, "outputs": outs,
             "ort": {"error": "not run in the self-test"}, "status": "ort_error"}
    (directory / "zoo.json").unlink(missing_ok=True)
    doc = write_summary(directory, [entry], [], {"generator": "self-test"}, None)
    assert doc["summary"]["cases"] == 1
    other = dict(entry, name="other_dynamo18")
    try:
        raise RuntimeError("export blew up\nsecond line")
    except RuntimeError as exc:
        fail = failure_entry("other_dynamo20", "export", exc)
    assert fail["error"].startswith("RuntimeError: export blew up (at ")
    doc = write_summary(directory, [other], [fail], {"generator": "self-test"},
                        {"other_dynamo18", "other_dynamo20"})
    names = [c["name"] for c in doc["cases"]]
    assert names == ["other_dynamo18", name], names
    assert json.loads((directory / "zoo.json").read_text())["failures"][0]["stage"] == "export"
    doc = write_summary(directory, [entry], [], {"generator": "self-test"}, None)
    assert [c["name"] for c in doc["cases"]] == [name]
    print(f"export_zoo: self-test passed; a case is in {casedir}")
    return 0


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        directory = Path(args.outdir or tempfile.mkdtemp(prefix="export-zoo-selftest-"))
        directory.mkdir(parents=True, exist_ok=True)
        return self_test(directory)
    if args.worker:
        if args.worker not in FAMILIES or not args.worker_out:
            print(f"export_zoo: bad worker call for '{args.worker}'", file=sys.stderr)
            return 2
        return worker_main(args.worker, args.variants, Path(args.outdir), Path(args.worker_out),
                           args.worker_threads)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
