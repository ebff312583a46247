#!/usr/bin/env python3
"""compare_runs.py -- model_bench on two trees, side by side: after / before.

Reads DIR/{after,before}_{DEVICE}_{ROUND}.json (model_bench --json, as
bench/gpu_run.sh's `compare` part writes them: the two trees alternate, so
drift on the machine hits both) and prints, per device, one Markdown table
row per (model, batch): each side's best median over its rounds, the ratio
after / before, and each side's spread between rounds (how much of the
ratio is noise). Then, per device, the geometric mean of the ratios.

Usage: compare_runs.py DIR
Exit status: 0; 2 when DIR holds no pair of runs to compare.
"""
import glob
import json
import math
import os
import re
import sys


def load(directory):
    """{(device, side): {(model, batch): [median_ms, ...]}} from every JSON in directory."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        m = re.match(r"(after|before)_([a-z0-9:]+)_(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        side, device = m.group(1), m.group(2)
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"compare_runs: {path}: {e}", file=sys.stderr)
            continue
        rows = runs.setdefault((device, side), {})
        for r in doc.get("results", []):
            if r.get("ok"):
                rows.setdefault((r["model"], r["batch"]), []).append(r["median_ms"])
    return runs


def spread(values):
    """Largest over smallest of a side's rounds, minus one, as a percentage."""
    return (max(values) / min(values) - 1) * 100 if len(values) > 1 and min(values) > 0 else 0.0


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    runs = load(argv[1])
    devices = sorted({d for d, _ in runs})
    compared = 0
    for device in devices:
        after, before = runs.get((device, "after"), {}), runs.get((device, "before"), {})
        keys = sorted(set(after) & set(before))
        if not keys:
            continue
        print(f"\n### {device}: median ms, best of {max(len(v) for v in after.values())} rounds\n")
        print("| model | batch | before | after | after / before | spread before | spread after |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        logs = []
        for model, batch in keys:
            b, a = min(before[(model, batch)]), min(after[(model, batch)])
            ratio = a / b if b > 0 else float("nan")
            if b > 0 and a > 0:
                logs.append(math.log(ratio))
            print(f"| {model} | {batch} | {b:.4f} | {a:.4f} | {ratio:.3f} | "
                  f"{spread(before[(model, batch)]):.1f}% | {spread(after[(model, batch)]):.1f}% |")
        if logs:
            print(f"\n{device}: geometric mean of after / before over {len(logs)} rows: "
                  f"{math.exp(sum(logs) / len(logs)):.3f}")
        only = sorted(set(after) ^ set(before))
        if only:
            print(f"{device}: rows on one side only (failed on the other): "
                  + ", ".join(f"{m} b{b}" for m, b in only))
        compared += len(keys)
    if not compared:
        print(f"compare_runs: no (model, batch) measured on both sides in {argv[1]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
