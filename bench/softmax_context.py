#!/usr/bin/env python3
"""softmax_context.py MODEL -- the first Softmax of an ONNX export with its
neighbourhood (producers four deep, readers two deep) and every value's declared
shape (0: a dim the exporter left unknown): to see why engine/fuse_attention.c
left a chain alone. Needs the onnx package; reads no external data."""
import onnx, sys, collections
m = onnx.load(sys.argv[1], load_external_data=False)
g = m.graph
prod = {o: n for n in g.node for o in n.output}
readers = collections.defaultdict(list)
for n in g.node:
    for i in n.input: readers[i].append(n)
shapes = {}
for vi in list(g.value_info) + list(g.input) + list(g.output):
    d = vi.type.tensor_type.shape.dim
    shapes[vi.name] = [x.dim_param or x.dim_value for x in d] if vi.type.tensor_type.HasField("shape") else None
inits = {i.name for i in g.initializer}
sm = [n for n in g.node if n.op_type == "Softmax"]
print(f"{sys.argv[1]}: {len(sm)} Softmax, {len(g.value_info)} value_info")
def desc(v): return f"{v}{'(init)' if v in inits else ''}:{shapes.get(v)}"
for n in sm[:1]:
    def up(v, d):
        p = prod.get(v)
        if not p or d > 4: return
        print("  " * d + f"{p.op_type} {[desc(i) for i in p.input]} attrs={[(a.name, onnx.helper.get_attribute_value(a)) for a in p.attribute][:3]}")
        for i in p.input: up(i, d + 1)
    print("Softmax", [desc(i) for i in n.input], n.attribute)
    up(n.input[0], 1)
    for r in readers[n.output[0]]:
        print(" reader", r.op_type, [desc(i) for i in r.input])
        for r2 in readers[r.output[0]]:
            print("  reader2", r2.op_type, [desc(i) for i in r2.input])
