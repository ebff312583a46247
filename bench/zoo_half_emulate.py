#!/usr/bin/env python3
"""zoo_half_emulate.py -- what a zoo family's outputs do in PyTorch itself
when its convolutions and linear layers see fp16 or bf16 operands, as
flatserve's `precision: fp16|bf16` GEMMs do (weights and the activation
operand rounded to half, products accumulated in float32). Tells a model
whose float32 outputs are inherently unstable under half operands (a
data-dependent selection such as NMS over near-tied scores) from an error
of flatserve's half path.

    python3 bench/zoo_half_emulate.py [--family detection] [--case DIR]

Builds the family exactly as tools/export_zoo.py does (same seeded random
weights), runs the case's committed input (default
tests/zoo/<family>_dynamo18/test_data_set_0/input_0.pb), checks the float32
run against the committed reference, then per half dtype prints each
output's worst error over max|expected| (the conformance runner's measure)
and, for a row-shaped output such as detection's boxes, how many rows moved
by more than 1% of max|expected|. Needs torch (1.13 or later), torchvision,
onnx and numpy; no GPU. Exit status 0, 1 when the float32 run does not
reproduce the committed reference (then the weights differ and nothing
else printed means anything)."""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import export_zoo  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="detection", choices=sorted(export_zoo.FAMILIES))
    p.add_argument("--case", type=Path, help="the case directory (default: the dynamo18 case)")
    args = p.parse_args(argv)
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    case = args.case or REPO / "tests" / "zoo" / f"{args.family}_dynamo18"
    data = case / "test_data_set_0"
    torch.manual_seed(export_zoo.seed_for(args.family))
    built = getattr(export_zoo, export_zoo.FAMILIES[args.family][0])(torch)
    export_zoo._randomize_norms(torch, built.model)
    model = built.model.eval()
    inputs = [torch.from_numpy(numpy_helper.to_array(onnx.load_tensor(str(f))).copy())
              for f in sorted(data.glob("input_*.pb"))]
    expected = [numpy_helper.to_array(onnx.load_tensor(str(f)))
                for f in sorted(data.glob("output_*.pb"))]

    def run():
        with torch.no_grad():
            out = model(*inputs)
        return [o.float().numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]

    names = [f"output {k}" for k in range(len(expected))]
    ref = export_zoo.error_measure(expected, run(), names)
    print(f"{args.family}: float32 against the committed reference: "
          f"{ref.get('relative_error', ref)}")
    if "error" in ref or ref["relative_error"] > 1e-5:
        return 1
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    for dtype in (torch.float16, torch.bfloat16):
        saved = [m.weight.data for m in layers]
        hooks = [m.register_forward_pre_hook(
            lambda _m, xs, dt=dtype: tuple(x.to(dt).float() for x in xs)) for m in layers]
        for m in layers:
            m.weight.data = m.weight.data.to(dtype).float()
        try:
            got = run()
        finally:
            for h in hooks:
                h.remove()
            for m, w in zip(layers, saved):
                m.weight.data = w
        print(f"  {str(dtype).split('.')[1]} operands:")
        for k, (e, g) in enumerate(zip(expected, got)):
            err = export_zoo.error_measure([e], [g], [names[k]])
            line = f"    {names[k]} {list(g.shape)}: "
            if "error" in err:
                print(line + err["error"])
                continue
            line += f"worst |error| {err['max_abs_error']:.4g} = {err['relative_error']:.3g} " \
                    f"of max|expected| {err['max_abs_expected']:.4g}"
            if e.ndim == 2 and e.shape == g.shape:
                moved = int((np.abs(g - e).max(1) > 0.01 * err["max_abs_expected"]).sum())
                line += f"; {moved} of {e.shape[0]} rows moved by more than 1% of it"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
