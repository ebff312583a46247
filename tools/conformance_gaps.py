#!/usr/bin/env python3
"""conformance_gaps.py -- writes the section of tests/conformance/README.md
that names every ONNX node test flatserve does not pass, grouped by why,
from the conformance runner's --report CSV.

    build/cpu/bin/conformance -j2 --report /tmp/report.csv ../shared/onnx-tests
    python3 tools/conformance_gaps.py /tmp/report.csv tests/conformance/README.md

The section lies between the markers <!-- gaps: begin --> and
<!-- gaps: end --> and is replaced whole; the rest of the file is kept. A
case whose reason fits no group below is listed under "Other" with the
runner's own message, so a new kind of gap shows up rather than hiding."""

import csv
import re
import sys

BEGIN = "<!-- gaps: begin -->"
END = "<!-- gaps: end -->"

# (group title, why, regular expression on the runner's detail). First match wins.
GROUPS = [
    ("Strings", "out of scope (issue 14): string tensors and the string ops",
     r"dtype string|StringNormalizer|StringSplit|StringConcat|RegexFullMatch|TfIdfVectorizer"),
    ("Sequences and optionals", "out of scope (issue 14): sequence and optional types",
     r"is a sequence|is a optional|Sequence\w*|Optional\w*|ConcatFromSequence|SplitToSequence"),
    ("Randomness", "out of scope (issue 14): the random generators",
     r"Random\w+|Bernoulli|Multinomial"),
    ("ImageDecoder", "out of scope (issue 14)", r"ImageDecoder"),
    ("Training", "out of scope (issue 14): training-only ops and modes",
     r"ai\.onnx\.preview\.training|training_mode"),
    ("Other domains", "only the default ONNX domain is served (ai.onnx.ml, preview domains)",
     r"domain '[^']+' is not supported"),
    ("4-bit, 2-bit and float8e8m0", "a stretch of issue 14, refused clearly: "
     "the packed sub-byte types and the exponent-only float8",
     r"int4|uint4|float4e2m1|int2|uint2|float8e8m0|unknown \(2[456]\)"),
    ("Scan-8", "Scan's opset-8 form (batch axis, sequence_lens) is refused; "
     "Scan 9 and later runs", r"Scan, opset 8|Scan-8"),
    ("Numerics", "the expected value is float32 rounding noise where the exact "
     "result is 0, below the 1e-7 absolute tolerance (flatserve computes the "
     "exact 0 to within 1e-14)", r"test_dft_inverse"),
]


def group_of(case, detail):
    for title, _, rx in GROUPS:
        if re.search(rx, detail) or re.search(rx, case):
            return title
    return "Other"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: conformance_gaps.py REPORT.csv README.md")
    report, readme = sys.argv[1], sys.argv[2]
    gaps, n_node, n_pass = {}, 0, 0
    with open(report, newline="") as f:
        for row in csv.DictReader(f):
            if not row["case"].startswith("node/"):
                continue
            n_node += 1
            if row["status"] == "PASS":
                n_pass += 1
                continue
            name = row["case"][len("node/"):]
            g = group_of(name, row["detail"])
            gaps.setdefault(g, []).append((name, row["status"], row["detail"]))
    why = {t: w for t, w, _ in GROUPS}
    why["Other"] = "each with the runner's message"
    out = [BEGIN, "",
           "Written by `tools/conformance_gaps.py` from the runner's report: "
           "%d of %d node tests pass on the CPU; the %d others are below, "
           "each named, by reason." % (n_pass, n_node, n_node - n_pass), ""]
    order = [t for t, _, _ in GROUPS] + ["Other"]
    for title in order:
        cases = sorted(gaps.get(title, []))
        if not cases:
            continue
        out.append("- **%s** (%d): %s." % (title, len(cases), why[title]))
        if title == "Other":
            for name, status, detail in cases:
                out.append("  - `%s` (%s): %s" % (name, status, detail[:300]))
        else:
            out.append("  " + ", ".join("`%s`" % c[0] for c in cases))
    out += ["", END]
    text = open(readme).read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + "\n".join(out) + tail
    else:
        text = text.rstrip("\n") + "\n\n## Node tests that do not pass\n\n" + "\n".join(out) + "\n"
    open(readme, "w").write(text)
    print("conformance_gaps: %d of %d pass; %d listed" % (n_pass, n_node, n_node - n_pass))


if __name__ == "__main__":
    main()
