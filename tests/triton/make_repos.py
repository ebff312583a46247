#!/usr/bin/python3
"""make_repos.py -- writes the two Triton-style model repositories that
Triton's HTTP examples and L0_http tests name, with our own ONNX models.

Usage: /usr/bin/python3 tests/triton/make_repos.py OUT_DIR
(needs the onnx package; /usr/bin/python3 has onnx 1.12.)

OUT_DIR/examples: the models of Triton's docs/examples/model_repository that
the simple_http_* clients and python_http_aio_test.py name, and the
simple_string_dyna_sequence that L0_http/test.sh adds (seven in all; the two
image models, which need a download, are left out):
  simple, simple_int8      INPUT0, INPUT1 [-1,16] (max_batch_size 8);
                           OUTPUT0 = sum, OUTPUT1 = difference
  simple_string            the same over TYPE_STRING (strings of integers)
  simple_identity          TYPE_STRING identity (Triton's is a python model)
  simple_sequence, simple_dyna_sequence, simple_string_dyna_sequence
                           sequence_batching models: their configs as
                           Triton's; the ONNX models take the control
                           tensors the sequence batcher fills and answer
                           what simple_http_sequence_sync_infer_client.py
                           checks: (INPUT + START) * READY, and for the
                           dyna model + END * CORRID (the id added on the
                           last request). simple_string_dyna_sequence is a
                           custom backend's config alone (it does not load)
OUT_DIR/http_test: the identity models that L0_http/test.sh copies for
http_test.py (qa_identity_model_repository's onnx_zero_* and the
simple_identity pair), each an ONNX Identity per input.

Every model is described here from what the tests send and expect; no file
is taken from Triton's repositories. On error an exception is raised and
OUT_DIR may be half written.
"""
import os
import sys

import onnx
from onnx import TensorProto, helper

OPSET = 13
ONNX_TYPE = {
    "TYPE_INT8": TensorProto.INT8,
    "TYPE_INT32": TensorProto.INT32,
    "TYPE_INT64": TensorProto.INT64,
    "TYPE_UINT64": TensorProto.UINT64,
    "TYPE_FP16": TensorProto.FLOAT16,
    "TYPE_FP32": TensorProto.FLOAT,
    "TYPE_STRING": TensorProto.STRING,
}


def save_model(repo, name, nodes, inputs, outputs):
    """inputs/outputs: (name, TYPE_*, full ONNX shape with None for symbolic)."""
    def info(t):
        return helper.make_tensor_value_info(t[0], ONNX_TYPE[t[1]], t[2])

    graph = helper.make_graph(nodes, name, [info(t) for t in inputs], [info(t) for t in outputs])
    model = helper.make_model(graph, producer_name="flatserve-tests",
                              opset_imports=[helper.make_operatorsetid("", OPSET)])
    onnx.checker.check_model(model)
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))


def tensor_block(kind, tensors):
    rows = []
    for name, dtype, dims in tensors:
        rows.append('  {\n    name: "%s"\n    data_type: %s\n    dims: [ %s ]\n  }'
                    % (name, dtype, ", ".join(str(d) for d in dims)))
    return "%s [\n%s\n]\n" % (kind, ",\n".join(rows))


def write_config(repo, name, max_batch, inputs, outputs, extra="", platform="onnxruntime_onnx",
                 backend=None):
    head = 'name: "%s"\n' % name
    head += 'backend: "%s"\n' % backend if backend else 'platform: "%s"\n' % platform
    head += "max_batch_size: %d\n" % max_batch
    text = head + tensor_block("input", inputs) + tensor_block("output", outputs) + extra
    os.makedirs(os.path.join(repo, name), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(text)


def batched(dims):
    return [None] + [None if d == -1 else d for d in dims]


def add_sub_model(repo, name, dtype):
    """simple / simple_int8: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    io_in = [("INPUT0", dtype, [16]), ("INPUT1", dtype, [16])]
    io_out = [("OUTPUT0", dtype, [16]), ("OUTPUT1", dtype, [16])]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    save_model(repo, name, nodes, [(n, t, batched(d)) for n, t, d in io_in],
               [(n, t, batched(d)) for n, t, d in io_out])
    write_config(repo, name, 8, io_in, io_out)


def string_add_sub_model(repo):
    """simple_string: the strings parsed as integers, added and subtracted,
    written back as strings (ONNX Cast does both directions)."""
    io_in = [("INPUT0", "TYPE_STRING", [16]), ("INPUT1", "TYPE_STRING", [16])]
    io_out = [("OUTPUT0", "TYPE_STRING", [16]), ("OUTPUT1", "TYPE_STRING", [16])]
    nodes = [helper.make_node("Cast", ["INPUT0"], ["A"], to=TensorProto.INT32),
             helper.make_node("Cast", ["INPUT1"], ["B"], to=TensorProto.INT32),
             helper.make_node("Add", ["A", "B"], ["SUM"]),
             helper.make_node("Sub", ["A", "B"], ["DIFF"]),
             helper.make_node("Cast", ["SUM"], ["OUTPUT0"], to=TensorProto.STRING),
             helper.make_node("Cast", ["DIFF"], ["OUTPUT1"], to=TensorProto.STRING)]
    save_model(repo, "simple_string", nodes, [(n, t, batched(d)) for n, t, d in io_in],
               [(n, t, batched(d)) for n, t, d in io_out])
    write_config(repo, "simple_string", 8, io_in, io_out)


def identity_model(repo, name, dtype, dims, max_batch, n_io=1, extra=""):
    io_in = [("INPUT%d" % k, dtype, dims) for k in range(n_io)]
    io_out = [("OUTPUT%d" % k, dtype, dims) for k in range(n_io)]
    shape = batched(dims) if max_batch else [None if d == -1 else d for d in dims]
    nodes = [helper.make_node("Identity", ["INPUT%d" % k], ["OUTPUT%d" % k]) for k in range(n_io)]
    save_model(repo, name, nodes, [(n, t, shape) for n, t, _ in io_in],
               [(n, t, shape) for n, t, _ in io_out])
    write_config(repo, name, max_batch, io_in, io_out, extra)


def control(name, kind, body):
    return ('    {\n      name: "%s"\n      control [\n        {\n          kind: %s\n'
            '          %s\n        }\n      ]\n    }' % (name, kind, body))


def sequence_model(repo, name, dyna, corrid_type="TYPE_UINT64", backend=None):
    """A sequence model's config as Triton's example writes it. The ONNX
    model takes the control tensors as inputs, as the sequence batcher
    feeds them: OUTPUT = (INPUT + START [+ END * CORRID]) * READY, what the
    example client expects of Triton's models."""
    controls = [control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")]
    if dyna:
        controls.append(control("END", "CONTROL_SEQUENCE_END", "int32_false_true: [ 0, 1 ]"))
    controls.append(control("READY", "CONTROL_SEQUENCE_READY", "int32_false_true: [ 0, 1 ]"))
    if dyna:
        controls.append(control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: %s" % corrid_type))
    idle = "  max_sequence_idle_microseconds: 10000000\n" if dyna else ""
    oldest = ("  oldest {\n    max_candidate_sequences: 1024\n"
              "    max_queue_delay_microseconds: 10000\n  }\n") if dyna else ""
    extra = ("sequence_batching {\n%s%s  control_input [\n%s\n  ]\n}\n"
             % (idle, oldest, ",\n".join(controls)))
    io = [("INPUT", "TYPE_INT32", [1])]
    out = [("OUTPUT", "TYPE_INT32", [1])]
    write_config(repo, name, 8, io, out, extra, backend=backend)
    if backend:
        return  # a custom backend's model: the config alone, as test.sh leaves it
    ctl = [("START", "TYPE_INT32", [None, 1]), ("READY", "TYPE_INT32", [None, 1])]
    if dyna:
        ctl += [("END", "TYPE_INT32", [None, 1]), ("CORRID", "TYPE_UINT64", [None, 1])]
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["SUM"])]
    total = "SUM"
    if dyna:
        nodes += [helper.make_node("Cast", ["CORRID"], ["CORRID32"], to=TensorProto.INT32),
                  helper.make_node("Mul", ["END", "CORRID32"], ["LAST"]),
                  helper.make_node("Add", ["SUM", "LAST"], ["TOTAL"])]
        total = "TOTAL"
    nodes.append(helper.make_node("Mul", [total, "READY"], ["OUTPUT"]))
    save_model(repo, name, nodes, [("INPUT", "TYPE_INT32", [None, 1])] + ctl,
               [("OUTPUT", "TYPE_INT32", [None, 1])])


def make_examples(repo):
    add_sub_model(repo, "simple", "TYPE_INT32")
    add_sub_model(repo, "simple_int8", "TYPE_INT8")
    string_add_sub_model(repo)
    identity_model(repo, "simple_identity", "TYPE_STRING", [-1], 8)
    sequence_model(repo, "simple_sequence", dyna=False)
    sequence_model(repo, "simple_dyna_sequence", dyna=True)
    sequence_model(repo, "simple_string_dyna_sequence", dyna=True, corrid_type="TYPE_STRING",
                   backend="dyna_sequence")


def make_http_test(repo):
    identity_model(repo, "onnx_zero_1_float32", "TYPE_FP32", [-1], 8)
    identity_model(repo, "onnx_zero_1_float16", "TYPE_FP16", [-1, -1], 8)
    identity_model(repo, "onnx_zero_3_float32", "TYPE_FP32", [-1], 8, n_io=3)
    identity_model(repo, "onnx_zero_1_object", "TYPE_STRING", [-1], 8)
    identity_model(repo, "onnx_zero_1_object_1_element", "TYPE_STRING", [1], 8)
    identity_model(repo, "onnx_zero_1_float32_queue", "TYPE_FP32", [-1], 8,
                   extra="dynamic_batching {\n  max_queue_delay_microseconds: 1000000\n"
                         "  preferred_batch_size: [ 8 ]\n  default_queue_policy {\n"
                         "    max_queue_size: 1\n  }\n}\n")
    identity_model(repo, "simple_identity", "TYPE_STRING", [-1], 8)
    identity_model(repo, "simple_identity_int64", "TYPE_INT64", [-1], 8)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_repos.py OUT_DIR")
    make_examples(os.path.join(sys.argv[1], "examples"))
    make_http_test(os.path.join(sys.argv[1], "http_test"))
