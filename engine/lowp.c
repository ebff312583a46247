/* lowp.c -- fp16/bf16 precision end to end: at load, the model graph's
 * float32 values become float16 (or bfloat16), so that activations move
 * and compute at half the bytes, not only the GEMM weights.
 *
 * The rewrite, once, after folding and fusing (eng_lower_precision):
 *  - every float32 graph input gets a Cast to the low dtype as the graph's
 *    first node(s), and its readers read the Cast's output;
 *  - every float32 graph output a node produces is produced in the low
 *    dtype under a new name, and a Cast back to float32 at the graph's end
 *    writes the output the caller sees: the model's inputs and outputs, and
 *    so its metadata and protocol, stay float32;
 *  - every float32 constant is stored in the low dtype, rounded to nearest
 *    even with finite values saturated to the dtype's largest (a float32
 *    "minus infinity" mask of -3.4e38 stays finite, as PyTorch's
 *    finfo(float16).min is), except one read where an op takes only
 *    float32 (Resize's roi and scales, Upsample's scales);
 *  - Cast(to=FLOAT) casts to the low dtype, and so do the ops whose float32
 *    result an attribute decides (ConstantOfShape's value, absent or
 *    float32; EyeLike's and the Random* ops' dtype); the declared dtype of
 *    every float32 value in between follows.
 * Ops with half kernels then run natively; any other op runs its float
 * kernel on widened copies (engine/ops.c), so every graph that ran in
 * float32 runs, and gets faster as ops gain half kernels. Accumulation
 * stays float32 inside the kernels (GEMM, reductions, softmax and the
 * normalisations' statistics).
 *
 * Not rewritten: subgraphs (If, Loop, Scan bodies compute in their own
 * declared dtypes and meet low values through widening), and the window
 * and Bernoulli/Multinomial ops' output dtypes. A graph value computed in float32 on purpose (rotary angles from
 * integer positions) is computed in the low dtype like every other:
 * precision loss there is the cost fp16 precision asks of the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/half.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "engine/plan.h"

/* Whether input k of node n must stay float32 (the op takes no other). */
static bool float_only_input(const eng_node_t *n, int k)
{
    if (n->domain[0])
        return false;
    if (strcmp(n->op_type, "Resize") == 0)
        return k == 1 || k == 2;
    return strcmp(n->op_type, "Upsample") == 0 && k == 1;
}

/* Marks in keep[v] every value some live node reads as float32 only;
 * keep has g->n_values entries, zeroed. */
static void mark_float_only(const eng_graph_t *g, const bool *done, bool *keep)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        for (int k = 0; !done[i] && k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && float_only_input(n, k))
                keep[n->inputs[k]] = true;
    }
}

static uint16_t to_low(float x, eng_dtype_t low)
{
    /* The largest finite float16 and bfloat16. */
    const float max = low == ENG_DT_FLOAT16 ? 65504.0f : 3.38953139e38f;
    if (isfinite(x))
        x = x > max ? max : x < -max ? -max : x;
    return eng_float_to_half_dt(low, x);
}

/* Constant v's data in the low dtype, in `wa` memory, its float32 data
 * freed. 0 or FS_ENOMEM (v as it was). */
static int lower_constant(eng_graph_t *g, const eng_weight_alloc_t *wa, int v, eng_dtype_t low)
{
    eng_value_t *val = &g->values[v];
    size_t n = (size_t)eng_shape_numel(&val->constant.shape);
    uint16_t *h = eng_weights_alloc(wa, n ? 2 * n : 1);
    if (!h)
        return fs_err(FS_ENOMEM, "out of memory storing constant '%s' in %s", val->name,
                      eng_dtype_name(low));
    const float *x = val->constant.data;
    for (size_t i = 0; i < n; i++)
        h[i] = to_low(x[i], low);
    eng_weights_free(wa, val->constant.data);
    g->weight_bytes -= 2 * n;
    val->constant.data = h;
    val->constant.dtype = low;
    val->dtype = low;
    return 0;
}

/* The ops whose float32 result an attribute decides, with that attribute
 * and the dtype it means when absent (ENG_DT_UNDEFINED: the op's own rule,
 * left alone). */
static const struct {
    const char *op, *attr;
    eng_dtype_t absent;
} dtype_attr_ops[] = {
    {"Cast", "to", ENG_DT_UNDEFINED},
    {"EyeLike", "dtype", ENG_DT_UNDEFINED},
    {"RandomNormal", "dtype", ENG_DT_FLOAT},
    {"RandomUniform", "dtype", ENG_DT_FLOAT},
    {"RandomNormalLike", "dtype", ENG_DT_UNDEFINED},
    {"RandomUniformLike", "dtype", ENG_DT_UNDEFINED},
};

/* Moves node n's float32 result to `low` where an attribute decides it:
 * ConstantOfShape's value (absent: a float32 zero) and the dtype
 * attributes of dtype_attr_ops (Cast's `to` among them); n's attributes
 * are then a copy in the pool. 0, or FS_ENOMEM (n as it was). */
static int float_attrs_low(eng_graph_t *g, eng_node_t *n, eng_dtype_t low)
{
    if (n->domain[0])
        return 0;
    bool cos = strcmp(n->op_type, "ConstantOfShape") == 0;
    const char *attr = NULL;
    eng_dtype_t absent = ENG_DT_UNDEFINED;
    for (size_t i = 0; i < sizeof dtype_attr_ops / sizeof dtype_attr_ops[0]; i++)
        if (strcmp(n->op_type, dtype_attr_ops[i].op) == 0) {
            attr = dtype_attr_ops[i].attr;
            absent = dtype_attr_ops[i].absent;
        }
    const eng_attr_t *have = cos ? eng_node_attr(n, "value") : attr ? eng_node_attr(n, attr) : NULL;
    bool moves = cos ? !have || have->t.dtype == ENG_DT_FLOAT
                 : attr ? (have ? have->i == ENG_DT_FLOAT : absent == ENG_DT_FLOAT)
                        : false;
    if (!moves)
        return 0;
    int n_attrs = n->n_attrs + (have ? 0 : 1);
    eng_attr_t *a = onnx_pool_alloc(g->pool, (size_t)n_attrs * sizeof *a);
    uint16_t *v = cos ? onnx_pool_alloc(g->pool, sizeof *v) : NULL;
    if (!a || (cos && !v))
        return fs_err(FS_ENOMEM, "out of memory lowering node '%s' to %s", n->name,
                      eng_dtype_name(low));
    if (n->n_attrs)
        memcpy(a, n->attrs, (size_t)n->n_attrs * sizeof *a);
    eng_attr_t *at = NULL;
    for (int i = 0; i < n->n_attrs && !at; i++)
        if (strcmp(a[i].name, cos ? "value" : attr) == 0)
            at = &a[i];
    if (!at) {
        at = &a[n_attrs - 1];
        *at = cos ? (eng_attr_t){.name = "value", .type = ENG_ATTR_TENSOR,
                                 .t = {.dtype = ENG_DT_FLOAT, .shape = {1, {1}}}}
                  : (eng_attr_t){.name = attr, .type = ENG_ATTR_INT};
    }
    if (cos) {
        *v = to_low(at->t.data ? *(const float *)at->t.data : 0.0f, low);
        at->t.dtype = low;
        at->t.data = v;
    } else {
        at->i = low;
    }
    n->attrs = a;
    n->n_attrs = n_attrs;
    return 0;
}

/* The graph's edges: float32 inputs something reads, and float32 outputs
 * a node of the graph produces (not an input or a constant passed
 * through). */
static bool edge_input(const eng_graph_t *g, int v)
{
    const eng_value_t *val = &g->values[v];
    return val->kind == ENG_VALUE_INPUT && val->dtype == ENG_DT_FLOAT && val->n_consumers > 0;
}

static bool edge_output(const eng_graph_t *g, int v)
{
    const eng_value_t *val = &g->values[v];
    return val->kind == ENG_VALUE_NODE && val->dtype == ENG_DT_FLOAT && val->producer >= 0;
}

/* A Cast node of `from` into `to`, named after `to`. */
static int cast_node(eng_graph_t *g, const eng_op_def_t *cast, int from, int to, eng_dtype_t dt,
                     eng_node_t *out)
{
    int *io = onnx_pool_alloc(g->pool, 2 * sizeof *io);
    eng_attr_t *a = onnx_pool_alloc(g->pool, sizeof *a);
    if (!io || !a)
        return fs_err(FS_ENOMEM, "out of memory adding a Cast to %s", eng_dtype_name(dt));
    io[0] = from;
    io[1] = to;
    *a = (eng_attr_t){.name = "to", .type = ENG_ATTR_INT, .i = dt};
    *out = (eng_node_t){.name = g->values[to].name, .op_type = eng_op_type(cast->id),
                        .domain = "", .n_inputs = 1, .inputs = io, .n_outputs = 1,
                        .outputs = io + 1, .n_attrs = 1, .attrs = a, .op = cast};
    return 0;
}

/* A new NODE value named `name` + suffix, of dtype dt, shaped like v. */
static int edge_value(eng_graph_t *g, int v, const char *suffix, eng_dtype_t dt)
{
    const char *base = g->values[v].name;
    size_t len = strlen(base) + strlen(suffix) + 1;
    char *name = onnx_pool_alloc(g->pool, len);
    if (!name)
        return -1;
    snprintf(name, len, "%s%s", base, suffix);
    int i = (int)g->n_values++;
    g->values[i] = g->values[v];
    g->values[i].name = name;
    g->values[i].kind = ENG_VALUE_NODE;
    g->values[i].dtype = dt;
    g->values[i].is_output = false;
    g->values[i].n_consumers = 0;
    g->values[i].producer = -1;
    return i;
}

/* Points every node input that reads `from` at `to`. With `implicit`,
 * also a subgraph's read (its node's implicit input and the subgraph's
 * outer binding); without, those keep reading `from`. */
static void readers_move(eng_graph_t *g, int from, int to, bool implicit)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        int explicit_end = n->n_inputs - n->n_implicit;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == from && (implicit || k < explicit_end)) {
                ((int *)n->inputs)[k] = to; /* the pool's, writable */
                g->values[from].n_consumers--;
                g->values[to].n_consumers++;
            }
        for (int a = 0; implicit && a < n->n_attrs; a++) {
            const eng_graph_t *sub = n->attrs[a].type == ENG_ATTR_GRAPH ? n->attrs[a].g : NULL;
            for (size_t k = 0; sub && k < sub->n_outer; k++)
                if (sub->outer_from[k] == from)
                    ((int *)sub->outer_from)[k] = to;
        }
    }
}

int eng_lower_precision(eng_graph_t *g, eng_dtype_t low, const eng_weight_alloc_t *wa,
                        bool **done)
{
    const eng_op_def_t *cast = eng_op_find("Cast");
    if (!cast)
        return fs_err(FS_ENOTSUP, "precision %s needs the Cast op", eng_dtype_name(low));
    const char *suffix = low == ENG_DT_FLOAT16 ? "/fp16" : "/bf16";
    size_t n_in = 0, n_out = 0;
    for (size_t i = 0; i < g->n_inputs; i++)
        n_in += edge_input(g, g->inputs[i]);
    for (size_t j = 0; j < g->n_outputs; j++)
        n_out += edge_output(g, g->outputs[j]);

    /* Constants first: each converts on its own, and a failure leaves the
     * graph consistent. */
    bool *keep = calloc(g->n_values + 1, sizeof *keep);
    if (!keep)
        return fs_err(FS_ENOMEM, "out of memory lowering the graph to %s", eng_dtype_name(low));
    mark_float_only(g, *done, keep);
    int rc = 0;
    for (size_t v = 0; v < g->n_values && rc == 0; v++) {
        eng_value_t *val = &g->values[v];
        if (val->kind == ENG_VALUE_CONST && val->constant.dtype == ENG_DT_FLOAT &&
            val->constant.data && !val->is_output && !keep[v])
            rc = lower_constant(g, wa, (int)v, low);
    }
    free(keep);
    if (rc != 0)
        return rc;

    /* Room for the edge values and nodes, made once; the old arrays stay in
     * the pool until the graph goes. */
    size_t n_edges = n_in + n_out;
    eng_value_t *values = onnx_pool_alloc(g->pool, (g->n_values + n_edges) * sizeof *values);
    eng_node_t *nodes = onnx_pool_alloc(g->pool, (g->n_nodes + n_edges) * sizeof *nodes);
    bool *d = calloc(g->n_nodes + n_edges + 1, sizeof *d);
    if (!values || !nodes || !d) {
        free(d);
        return fs_err(FS_ENOMEM, "out of memory lowering the graph to %s", eng_dtype_name(low));
    }
    memcpy(values, g->values, g->n_values * sizeof *values);
    g->values = values;

    /* The body: every node's declared float32 results and float32 results
     * by attribute move to the low dtype; its producers shift past the
     * input Casts. */
    memset(nodes, 0, n_in * sizeof *nodes); /* filled below; read as empty until then */
    memcpy(nodes + n_in, g->nodes, g->n_nodes * sizeof *nodes);
    memcpy(d + n_in, *done, g->n_nodes * sizeof *d);
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++)
        rc = float_attrs_low(g, &nodes[n_in + i], low);
    for (size_t v = 0; v < g->n_values; v++) {
        eng_value_t *val = &g->values[v];
        if (val->producer >= 0)
            val->producer += (int)n_in;
        if (val->kind == ENG_VALUE_NODE && val->dtype == ENG_DT_FLOAT && !val->is_output)
            val->dtype = low;
    }
    size_t old_nodes = g->n_nodes;
    g->nodes = nodes;
    g->n_nodes = old_nodes + n_in;

    /* Inputs: a Cast at the front, read in place of the input. */
    size_t at = 0;
    for (size_t i = 0; i < g->n_inputs && rc == 0; i++) {
        int x = g->inputs[i];
        if (!edge_input(g, x))
            continue;
        int y = edge_value(g, x, suffix, low);
        if (y < 0) {
            rc = fs_err(FS_ENOMEM, "out of memory lowering the graph to %s", eng_dtype_name(low));
            break;
        }
        readers_move(g, x, y, false);
        rc = cast_node(g, cast, x, y, low, &nodes[at]);
        g->values[y].producer = (int)at;
        g->values[x].n_consumers++;
        at++;
    }
    /* Outputs: produced low under a new name, then a Cast at the end. */
    for (size_t j = 0; j < g->n_outputs && rc == 0; j++) {
        int y = g->outputs[j];
        /* An output listed twice has its Cast already. */
        if (!edge_output(g, y) || g->values[y].producer >= (int)(old_nodes + n_in))
            continue;
        int lo = edge_value(g, y, suffix, low);
        if (lo < 0) {
            rc = fs_err(FS_ENOMEM, "out of memory lowering the graph to %s", eng_dtype_name(low));
            break;
        }
        eng_node_t *p = &nodes[g->values[y].producer];
        for (int o = 0; o < p->n_outputs; o++)
            if (p->outputs[o] == y)
                ((int *)p->outputs)[o] = lo; /* the pool's, writable */
        g->values[lo].producer = g->values[y].producer;
        readers_move(g, y, lo, true);
        rc = cast_node(g, cast, lo, y, ENG_DT_FLOAT, &nodes[g->n_nodes]);
        g->values[y].producer = (int)g->n_nodes++;
        g->values[lo].n_consumers++;
    }
    free(*done);
    *done = d;
    /* New values take numbers the subgraphs' values had (graph.h). */
    eng_graph_number(g);
    return rc;
}
