#!/usr/bin/env python3
"""gen_op_schema.py -- writes engine/ops/schema.inc, the ONNX schema of every
op flatserve runs, from ONNX's own definitions (the `onnx` Python package).

    python3 tools/gen_op_schema.py [--out engine/ops/schema.inc] [--from DUMP]
    python3 tools/gen_op_schema.py --dump DUMP

Run from the repository root with a Python that imports `onnx` (Debian:
`apt-get install python3-onnx`; any onnx release works, the newer the
better: the table holds what that release defines and the file's header
names it), or with --from DUMP without one: DUMP is what --dump wrote
with some onnx, every default-domain schema of that release as JSON
(tools/onnx_schemas.json holds one from onnx 1.23.1, so that adding an op
needs no machine with a new onnx). The op list comes from engine/ops/list.h (every X(OpType, ...)
entry, default domain, but the engine-internal ops of ENG_OPS_INTERNAL, which
have no schema), the opset range from OPSET_MIN/OPSET_MAX in
engine/onnx_load.c: for each op, every schema version in force at some
opset of that range (the one in force at OPSET_MIN, and each later one up
to OPSET_MAX).

Per version it emits since_version; the inputs and outputs (each formal
parameter's name, Single/Optional/Variadic and, for a variadic one, its
least count) with the min/max counts ONNX states; the attributes (name,
ONNX AttributeType, required). Strings are one `static const char[]` each,
shared by every schema that names them; parameter and attribute lists are
shared wherever one version's list is a run already emitted.

Fails (exit 1, nothing written) when an op of list.h has no default-domain
schema, or a schema of the range is deprecated (unless DEPRECATED_RUN
lists it): the table has no way to say either, so a person must look."""

import argparse
import json
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LIST_H = "engine/ops/list.h"
LOADER_C = "engine/onnx_load.c"
OUT = "engine/ops/schema.inc"


def fail(msg):
    sys.stderr.write("gen_op_schema: %s\n" % msg)
    sys.exit(1)


def read_ops():
    """The op types of list.h's X(OpType, CPU, CUDA) entries, in file order, without the
    ENG_OPS_INTERNAL block's (engine-internal ops: no ONNX schema, schema_index leaves them empty)."""
    text = open(os.path.join(ROOT, LIST_H)).read()
    text = re.sub(r"^#define ENG_OPS_INTERNAL\(X\)(?:.*\\\n)*.*\n", "", text, flags=re.M)
    ops = re.findall(r"^\s*X\((\w+),\s*[YN],\s*[YN]\)", text, re.M)
    if not ops:
        fail("no X(OpType, CPU, CUDA) entries in %s" % LIST_H)
    if len(set(ops)) != len(ops):
        fail("an op is listed twice in %s" % LIST_H)
    return ops


def read_opset_range():
    text = open(os.path.join(ROOT, LOADER_C)).read()
    found = {}
    for name in ("OPSET_MIN", "OPSET_MAX"):
        m = re.search(r"^#define %s (\d+)" % name, text, re.M)
        if not m:
            fail("no '#define %s N' in %s" % (name, LOADER_C))
        found[name] = int(m.group(1))
    return found["OPSET_MIN"], found["OPSET_MAX"]


def enum_name(v):
    """A pybind11 enum member's name ("Single", "INT"), on every onnx release."""
    return getattr(v, "name", str(v).split(".")[-1])


def enum_value(v):
    return int(getattr(v, "value", v))


def param_tuple(schema, params, min_count):
    """(name, option, min_arity) per formal parameter. Releases before 1.14
    have no FormalParameter.min_arity: ONNX's Finalize sets min_count to the
    parameters before the variadic one plus its least count, so that is
    recovered from min_count."""
    out = []
    for k, p in enumerate(params):
        opt = enum_name(p.option)
        if opt not in ("Single", "Optional", "Variadic"):
            fail("%s-%d: parameter %s has option %s" % (schema.name, schema.since_version, p.name, opt))
        arity = 0
        if opt == "Variadic":
            if k != len(params) - 1:
                fail("%s-%d: variadic parameter %s is not the last" %
                     (schema.name, schema.since_version, p.name))
            arity = getattr(p, "min_arity", None)
            if arity is None:
                arity = max(0, min_count - k)
        out.append((p.name, opt, int(arity)))
    return tuple(out)


def attr_tuple(schema):
    out = []
    for name in sorted(schema.attributes):
        a = schema.attributes[name]
        out.append((name, enum_name(a.type), bool(a.required)))
    return tuple(out)


class Source:
    """The schemas and the release they come from: onnx itself, or a dump."""

    def __init__(self, version, opset_known, schemas):
        self.version, self.opset_known, self.schemas = version, opset_known, schemas

    @staticmethod
    def from_onnx():
        import onnx
        import onnx.defs
        for name in ATTR_TYPES:
            if enum_value(getattr(onnx.defs.OpSchema.AttrType, name)) != ATTR_TYPES.index(name) + 1:
                fail("onnx %s numbers AttrType.%s differently" % (onnx.__version__, name))
        return Source(onnx.__version__, onnx.defs.onnx_opset_version(),
                      [s for s in onnx.defs.get_all_schemas_with_history()
                       if s.domain in ("", "ai.onnx")])

    @staticmethod
    def from_dump(path):
        class NS:
            def __init__(self, **kw):
                self.__dict__.update(kw)
        d = json.load(open(path))
        schemas = []
        for s in d["schemas"]:
            plist = lambda ps: [NS(name=p["name"], option=p["option"], min_arity=p["min_arity"])
                                for p in ps]
            schemas.append(NS(name=s["name"], domain="", since_version=s["since_version"],
                              deprecated=s["deprecated"], inputs=plist(s["inputs"]),
                              outputs=plist(s["outputs"]), min_input=s["min_input"],
                              max_input=s["max_input"], min_output=s["min_output"],
                              max_output=s["max_output"],
                              attributes={a["name"]: NS(type=a["type"], required=a["required"])
                                          for a in s["attributes"]}))
        return Source(d["onnx_version"], d["opset_known"], schemas)

    def dump(self, path):
        """Every default-domain schema, each field generate() reads."""
        def plist(schema, ps, min_count):
            return [{"name": n, "option": o, "min_arity": a}
                    for n, o, a in param_tuple(schema, ps, min_count)]
        out = []
        for s in sorted(self.schemas, key=lambda s: (s.name, s.since_version)):
            out.append({"name": s.name, "since_version": s.since_version,
                        "deprecated": bool(s.deprecated),
                        "min_input": s.min_input, "max_input": s.max_input,
                        "min_output": s.min_output, "max_output": s.max_output,
                        "inputs": plist(s, s.inputs, s.min_input),
                        "outputs": plist(s, s.outputs, s.min_output),
                        "attributes": [{"name": n, "type": t, "required": r}
                                       for n, t, r in attr_tuple(s)]})
        with open(path + ".tmp", "w") as f:
            json.dump({"onnx_version": self.version, "opset_known": self.opset_known,
                       "schemas": out}, f, indent=0, separators=(",", ":"))
            f.write("\n")
        os.replace(path + ".tmp", path)


# Deprecated versions the engine implements anyway, each with the reason.
def versions_of(op, src, lo, hi):
    mine = sorted((s for s in src.schemas if s.name == op), key=lambda s: s.since_version)
    if not mine:
        fail("%s (in %s) has no default-domain schema in onnx %s: is the op newer than that "
             "release? Run with a newer onnx" % (op, LIST_H, src.version))
    at_lo = [s for s in mine if s.since_version <= lo]
    keep = at_lo[-1:] + [s for s in mine if lo < s.since_version <= hi]
    for s in keep:
        if s.deprecated and (op, s.since_version) not in DEPRECATED_RUN:
            fail("%s-%d is deprecated in onnx %s" % (op, s.since_version, src.version))
    return keep


# Deprecated versions a person looked at and the engine runs anyway: each
# keeps its predecessor's signature and meaning (ONNX deprecated the op in
# favour of another, Upsample for Resize and Scatter for ScatterElements,
# without changing it), and exporters of that era still wrote them.
DEPRECATED_RUN = {
    ("Upsample", 10),
    ("Scatter", 11),
    # Deprecated for taking scale and bias per group (opset 21 takes them per
    # channel); models of opsets 18 to 20 still hold it, and
    # engine/ops/normalize.c runs both forms.
    ("GroupNormalization", 18),
}


class Pool:
    """A flat list of entries where each emitted list is a contiguous run;
    a list equal to a run already there is not added again."""

    def __init__(self):
        self.items = []

    def add(self, seq):
        n = len(seq)
        if n == 0:
            return 0
        for i in range(len(self.items) - n + 1):
            if tuple(self.items[i:i + n]) == seq:
                return i
        # An existing tail may start the new run.
        for overlap in range(min(n - 1, len(self.items)), 0, -1):
            if tuple(self.items[-overlap:]) == seq[:overlap]:
                start = len(self.items) - overlap
                self.items.extend(seq[overlap:])
                return start
        start = len(self.items)
        self.items.extend(seq)
        return start


def c_ident(s):
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s):
        fail("name %r is not an identifier" % s)
    return "s_" + s


def arity(v):
    return "ENG_OP_ARITY_MAX" if v >= 2**31 - 1 else str(v)


def generate(ops, lo, hi, src):
    params, attrs = Pool(), Pool()
    rows, index = [], []
    for op in ops:
        first = len(rows)
        for s in versions_of(op, src, lo, hi):
            ins = param_tuple(s, s.inputs, s.min_input)
            outs = param_tuple(s, s.outputs, s.min_output)
            at = attr_tuple(s)
            for name, typ, _ in at:
                if typ not in ATTR_TYPES:
                    fail("%s-%d: attribute %s has type %s" % (op, s.since_version, name, typ))
            rows.append((op, s.since_version, s.min_input, s.max_input, s.min_output,
                         s.max_output, len(ins), params.add(ins), len(outs), params.add(outs),
                         len(at), attrs.add(at)))
        index.append((op, first, len(rows) - first))

    names = sorted({p[0] for p in params.items} | {a[0] for a in attrs.items})
    out = []
    w = out.append
    w("/* schema.inc -- the ONNX schema of every op in engine/ops/list.h, for")
    w(" * default-domain opsets %d..%d: GENERATED, do not edit." % (lo, hi))
    w(" *")
    w(" * Source: onnx %s (opsets up to %d), through tools/gen_op_schema.py."
      % (src.version, src.opset_known))
    w(" * Regenerate, from the repository root, after adding an op to list.h or")
    w(" * to take a newer onnx's definitions (any release; the newer the better):")
    w(" *     python3 tools/gen_op_schema.py --from tools/onnx_schemas.json")
    w(" * (that release's definitions), or without --from with a Python that")
    w(" * imports onnx, whose definitions it then takes.")
    w(" *")
    w(" * Included by engine/op_schema.c alone, which defines the types. Per op,")
    w(" * schema_index gives its run of schema_versions, oldest first. */")
    w("")
    w("#define SCHEMA_ONNX_VERSION \"%s\"" % src.version)
    w("#define SCHEMA_OPSET_KNOWN %d" % src.opset_known)
    w("")
    for n in names:
        w("static const char %s[] = \"%s\";" % (c_ident(n), n))
    w("")
    w("static const eng_op_param_t schema_params[] = {")
    for i, (name, opt, ar) in enumerate(params.items):
        w("    /* %3d */ {%s, ENG_OP_PARAM_%s, %d}," % (i, c_ident(name), opt.upper(), ar))
    w("};")
    w("")
    w("static const eng_op_attr_spec_t schema_attrs[] = {")
    for i, (name, typ, req) in enumerate(attrs.items):
        w("    /* %3d */ {%s, ENG_ATTR_%s, %s}," % (i, c_ident(name), typ,
                                                      "true" if req else "false"))
    w("};")
    w("")
    w("/* {since_version, min_inputs, max_inputs, min_outputs, max_outputs,")
    w(" *  n_in_params, in_params, n_out_params, out_params, n_attrs, attrs} */")
    w("static const eng_op_schema_t schema_versions[] = {")
    for (op, since, mi, xi, mo, xo, nin, pin, nout, pout, nat, pat) in rows:
        w("    /* %s-%d */ {%d, %d, %s, %d, %s, %d, %s, %d, %s, %d, %s}," % (
            op, since, since, mi, arity(xi), mo, arity(xo),
            nin, "schema_params + %d" % pin if nin else "NULL",
            nout, "schema_params + %d" % pout if nout else "NULL",
            nat, "schema_attrs + %d" % pat if nat else "NULL"))
    w("};")
    w("")
    w("/* Per op id: {first, count} in schema_versions. */")
    w("static const struct schema_run {")
    w("    uint16_t first, count;")
    w("} schema_index[ENG_OP_COUNT] = {")
    for op, first, count in index:
        w("    [ENG_OP_%s] = {%d, %d}," % (op, first, count))
    w("};")
    return "\n".join(out) + "\n"


# ONNX AttributeProto.AttributeType names; engine/graph.h's eng_attr_type_t
# has one ENG_ATTR_<name> for each, with ONNX's value.
ATTR_TYPES = ("FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS", "STRINGS",
              "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS", "TYPE_PROTO",
              "TYPE_PROTOS")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUT, help="where to write (default %(default)s)")
    ap.add_argument("--from", dest="src", metavar="DUMP",
                    help="read the schemas from DUMP (written by --dump) instead of onnx")
    ap.add_argument("--dump", metavar="DUMP",
                    help="write every default-domain schema of the onnx imported to DUMP, "
                         "and nothing else")
    args = ap.parse_args()
    src = Source.from_dump(args.src) if args.src else Source.from_onnx()
    if args.dump:
        src.dump(args.dump)
        print("gen_op_schema: wrote %d schemas of onnx %s to %s"
              % (len(src.schemas), src.version, args.dump))
        return
    lo, hi = read_opset_range()
    text = generate(read_ops(), lo, hi, src)
    path = args.out if os.path.isabs(args.out) else os.path.join(ROOT, args.out)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print("gen_op_schema: wrote %s from onnx %s" % (args.out, src.version))


if __name__ == "__main__":
    main()
