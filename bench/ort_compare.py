#!/usr/bin/env python3
"""ort_compare.py -- flatserve's engine against ONNX Runtime (CPU) on the same models, inputs, thread count and timing rule.

Runs model_bench with --json, then ONNX Runtime (CPUExecutionProvider,
intra_op_num_threads=N, inter_op_num_threads=1, ORT_ENABLE_ALL, sequential)
on every (model, batch) model_bench ran, with the inputs model_bench reports
(float: np.arange(N).reshape(shape) / N as float32; other dtypes: zeros),
the same warm-up and the same stopping rule (read from model_bench's JSON),
and prints a Markdown table of the medians and their ratio. It measures; it
asserts no speed. See bench/README.md.

Exit status: 0; 1 when model_bench or ONNX Runtime failed on some model (the
table says which; the others are still compared); 2 when model_bench could
not be run at all or onnxruntime/numpy cannot be imported (model_bench's own
figures are printed first).
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

# eng_dtype_name() spellings, as model_bench writes them, to numpy's.
NUMPY_DTYPES = {
    "float": "float32", "double": "float64", "float16": "float16",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool",
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True, help="the model_bench binary (e.g. build/cuda/bin/model_bench)")
    p.add_argument("--threads", type=int, default=1, help="threads for both engines (default 1)")
    p.add_argument("--quick", action="store_true", help="model_bench's --quick timing rule, for both")
    p.add_argument("--light", metavar="DIR", help="passed to model_bench: also every DIR/*.onnx")
    p.add_argument("--json-out", metavar="FILE", help="also write the combined figures as JSON")
    p.add_argument("models", nargs="*", help="models (default: model_bench's default set)")
    a = p.parse_args()
    if a.threads < 1:
        p.error("--threads must be at least 1")
    return a


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_model_bench(args):
    """Runs model_bench (Markdown on stdout, passed through); returns (exit status, parsed JSON or None)."""
    fd, path = tempfile.mkstemp(prefix="model_bench_", suffix=".json")
    os.close(fd)
    cmd = [args.bench, "--markdown", "--threads", str(args.threads), "--json", path]
    if args.quick:
        cmd.append("--quick")
    if args.light:
        cmd += ["--light", args.light]
    cmd += args.models
    print(f"<!-- {' '.join(cmd)} -->", flush=True)
    try:
        rc = subprocess.call(cmd)
    except OSError as e:
        print(f"ort_compare: cannot run {args.bench}: {e}", file=sys.stderr)
        os.unlink(path)
        return 2, None
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"ort_compare: model_bench (exit {rc}) left no readable JSON: {e}", file=sys.stderr)
        data = None
    finally:
        os.unlink(path)
    return rc, data


def make_feed(np, inputs):
    """The inputs model_bench ran, rebuilt: arange(N)/N as float32 for float, zeros otherwise."""
    feed = {}
    for inp in inputs:
        shape = tuple(inp["shape"])
        dtype = NUMPY_DTYPES.get(inp["dtype"])
        if dtype is None:
            raise ValueError(f"input '{inp['name']}': dtype {inp['dtype']} has no numpy equivalent here")
        n = int(np.prod(shape, dtype=np.int64))
        if inp["dtype"] == "float":
            feed[inp["name"]] = (np.arange(n).reshape(shape) / n).astype(np.float32) if n else np.zeros(shape, np.float32)
        else:
            feed[inp["name"]] = np.zeros(shape, dtype=dtype)
    return feed


def time_session(sess, feed, rule):
    """Warm-up, then timed runs with model_bench's rule; the median in ms and the run count."""
    for _ in range(rule["warmup_runs"]):
        sess.run(None, feed)
    samples = []
    begin = time.perf_counter_ns()
    while len(samples) < rule["max_runs"]:
        if len(samples) >= rule["min_runs"] and time.perf_counter_ns() - begin > rule["budget_s"] * 1e9:
            break
        t0 = time.perf_counter_ns()
        sess.run(None, feed)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    samples.sort()
    n = len(samples)
    median = samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
    return median, n


def ort_session(ort, path, threads):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def run_ort(np, ort, data, threads):
    """ORT's median per result row (keyed by index): (ms, runs) or an error string."""
    out = {}
    sessions = {}  # path -> session or the load error
    for i, row in enumerate(data["results"]):
        if "inputs" not in row:
            continue  # flatserve did not load it: no inputs to give ORT, the row says "not run"
        path = row["path"]
        if path not in sessions:
            try:
                sessions[path] = ort_session(ort, path, threads)
            except Exception as e:  # ORT raises its own exception types per failure
                sessions[path] = f"load: {type(e).__name__}: {e}".replace("\n", " ")
                print(f"ort_compare: ONNX Runtime: {row['model']}: {sessions[path]}", file=sys.stderr)
        sess = sessions[path]
        if isinstance(sess, str):
            out[i] = sess
            continue
        try:
            out[i] = time_session(sess, make_feed(np, row["inputs"]), data)
        except Exception as e:
            out[i] = f"run: {type(e).__name__}: {e}".replace("\n", " ")
            print(f"ort_compare: ONNX Runtime: {row['model']} batch {row['batch']}: {out[i]}", file=sys.stderr)
    return out


def cell(s, width=60):
    s = str(s).replace("|", "\\|")
    return s if len(s) <= width else s[: width - 3] + "..."


def size(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def print_table(data, ort_res):
    print("| model | batch | flatserve median ms | ORT median ms | flatserve/ORT | plan bytes | plan/bound |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    combined = []
    for i, row in enumerate(data["results"]):
        batch = "-" if row["batch"] is None else row["batch"]
        o = ort_res.get(i)
        fs_ms = row["median_ms"] if row["ok"] else None
        ort_ms = o[0] if isinstance(o, tuple) else None
        ratio = f"{fs_ms / ort_ms:.2f}x" if fs_ms is not None and ort_ms else "-"
        if row["ok"] and not row["dynamic"]:
            plan, pb = size(row["activation_bytes"]), f"{row['plan_ratio']:.3f}"
        else:
            plan, pb = ("dynamic" if row["ok"] else "-"), "-"
        print(f"| {row['model']} | {batch} | "
              f"{f'{fs_ms:.4f}' if fs_ms is not None else 'failed'} | "
              f"{f'{ort_ms:.4f}' if ort_ms is not None else 'failed' if o else 'not run'} | "
              f"{ratio} | {plan} | {pb} |")
        combined.append({"model": row["model"], "path": row["path"], "batch": row["batch"],
                         "flatserve_median_ms": fs_ms, "ort_median_ms": ort_ms,
                         "ort_runs": o[1] if isinstance(o, tuple) else None,
                         "ratio": fs_ms / ort_ms if fs_ms is not None and ort_ms else None,
                         "flatserve_error": None if row["ok"] else row.get("error"),
                         "ort_error": o if isinstance(o, str) else None,
                         "activation_bytes": row.get("activation_bytes"),
                         "plan_ratio": row.get("plan_ratio")})
    print()
    failures = [c for c in combined if c["flatserve_error"] or c["ort_error"]]
    for c in failures:
        b = "" if c["batch"] is None else f" batch {c['batch']}"
        if c["flatserve_error"]:
            print(f"- flatserve failed on {c['model']}{b}: {cell(c['flatserve_error'], 300)}")
        if c["ort_error"]:
            print(f"- ONNX Runtime failed on {c['model']}{b}: {cell(c['ort_error'], 300)}")
    if failures:
        print()
    return combined


def main():
    args = parse_args()
    rc, data = run_model_bench(args)
    if data is None:
        return 2
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"ort_compare: cannot compare: {e} (ONNX Runtime and numpy are installed on the GPU machine)",
              file=sys.stderr)
        return 2
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n### model_bench against ONNX Runtime {ort.__version__} (CPU), {args.threads} "
          f"thread{'s' if args.threads != 1 else ''}, on {platform.node()}, {date}\n")
    print(f"- Command: `python3 {' '.join(sys.argv)}`")
    print(f"- CPU: {cpu_model()} ({os.cpu_count()} CPUs)")
    print(f"- ONNX Runtime: CPUExecutionProvider, intra_op_num_threads={args.threads}, "
          f"inter_op_num_threads=1, ORT_ENABLE_ALL, sequential; numpy {np.__version__}")
    print(f"- Timing, both: {data['warmup_runs']} warm-up runs, then runs until {data['budget_s']:g} s "
          f"or {data['max_runs']} runs (at least {data['min_runs']}); the median of one run of the whole batch.\n")
    ort_res = run_ort(np, ort, data, args.threads)
    combined = print_table(data, ort_res)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"threads": args.threads, "ort_version": ort.__version__, "results": combined}, f, indent=1)
    ort_failed = any(isinstance(v, str) for v in ort_res.values())
    return 1 if rc != 0 or ort_failed else 0


if __name__ == "__main__":
    sys.exit(main())
