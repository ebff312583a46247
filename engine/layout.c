/* layout.c -- load-time channels-last (NHWC) layout for convolutional
 * regions of the model graph, with ReLU and residual Add fused into the
 * Conv (eng_layout_channels_last).
 *
 * Why: an NCHW Conv on a GPU is im2col of a 9x copy of its input plus a
 * GEMM per image; channels-last makes a whole batch's Conv one GEMM over
 * [N x H x W, C] rows, a 1x1 Conv a GEMM on X in place, and lets the
 * GEMM's epilogue take the bias, the residual and the ReLU.
 *
 * Regions. Walking the nodes in order, a live default-domain node joins
 * the region when it is
 *  - a Conv with a constant rank-4 W of host data, 2 or 3 inputs, one
 *    output, and not a channel multiplier (C/group == 1 with M != group >
 *    1: the GEMM per group would have one column; a depthwise Conv, M ==
 *    group, has a direct channels-last kernel);
 *  - an element-wise unary op (Relu, Clip, Sigmoid, ...) whose input 0 is
 *    a region value and whose other inputs (Clip's bounds) are not;
 *  - Add, Sub, Mul or Div of two region values (both rank 4: a broadcast
 *    between two rank-4 operands commutes with permuting both alike);
 *  - MaxPool (without Indices) or AveragePool with a 2-D kernel, or
 *    GlobalAveragePool / GlobalMaxPool, of a region value;
 *  - ReduceMean of a region value over its spatial axes (2 and 3, as an
 *    attribute or a constant input) keeping dims: a squeeze-and-excite
 *    block's pooling, rewritten to reduce axes 1 and 2;
 * where a region value is an output of a region node. So every region
 * grows forward from its Convs, and every region value has rank 4.
 *
 * Fusion, inside regions, before the rewrite: a Conv whose output is no
 * graph output and is read by one node only takes over
 *  - an Add of that output and another region value R produced before the
 *    Conv (so R is ready when it runs): the Conv reads R as input 3
 *    (conv_residual, graph.h) and writes the Add's output;
 *  - then, or instead, a Relu, or a Clip at opset >= 11 with a constant
 *    min of 0 and no max (or +inf): conv_relu, writing its output.
 * The taken-over nodes are marked done like folded ones (a done node
 * still counts as a reader); the Conv's old output is left with no
 * producer. The kernels compute relu(conv + B + R) in that order, the
 * same function up to rounding (CUDA rounds the half GEMM's result once
 * more before the epilogue).
 *
 * The rewrite. Region nodes compute on NHWC values: Conv, the pools and
 * the global pools get channels_last (graph.h); each Conv's W is laid out
 * [M, kH, kW, C/group] once, in place when region Convs are its only live
 * readers, else as a new constant beside it. A value entering the region
 * (a Conv's X that is not a region value) gets one Transpose(0, 2, 3, 1)
 * before its first region reader, shared by all of them. A region value
 * that a node outside the region reads (an implicit read of a subgraph
 * included), or that is a graph output, is produced under a new name in
 * NHWC and a Transpose(0, 3, 1, 2) right after its producer writes the
 * original value, which keeps its name, NCHW shape and outside readers.
 * The other region values have their declared dims permuted. Last, a
 * Transpose that undoes the Transpose it reads (a region's leaving
 * Transpose met by the model's own, as ConvNeXt's channels-last blocks
 * are exported) is skipped: its readers read the first one's input, and
 * both are marked done when nothing else reads them. Consumer
 * counts are counted again; the values and nodes arrays are regrown once
 * in the graph's pool and `done` replaced by one for the new node list.
 *
 * Where it runs: on devices whose backend says it pays (engine/backend.h:
 * channels_last), after eng_lower_precision, so that its Transposes move
 * half-size values and the lowering never meets a channels-last node; W's
 * re-layout moves elements of any size. Subgraphs are left as they are. */
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

/* Element-wise ops of one data input (input 0) that any layout computes
 * alike. */
static const char *const unary_ops[] = {
    "Relu",        "Clip",     "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid",
    "HardSwish",   "Elu",      "Selu",    "Softplus", "Neg",   "Abs",
};

/* Broadcasting binary ops: both inputs rank-4 region values. */
static const char *const binary_ops[] = {"Add", "Sub", "Mul", "Div"};

static bool op_in(const char *op, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(op, list[i]) == 0)
            return true;
    return false;
}

static bool is_op(const eng_node_t *n, const char *op)
{
    return n->domain[0] == '\0' && strcmp(n->op_type, op) == 0;
}

/* The pass's state over one graph. */
typedef struct layout {
    eng_graph_t *g;
    bool *done;
    bool *in_region;      /* per node */
    bool *region_value;   /* per value: an output of a live region node */
} layout_t;

/* Whether node i's only output is one value (written, not absent). */
static bool one_output(const eng_node_t *n)
{
    return n->n_outputs == 1 && n->outputs[0] >= 0;
}

/* Whether Conv node n may run channels-last (see the file header). */
static bool conv_joins(const layout_t *L, const eng_node_t *n)
{
    if (n->n_inputs < 2 || n->n_inputs > 3 || n->n_implicit || !one_output(n) ||
        n->inputs[0] < 0 || n->inputs[1] < 0)
        return false;
    const eng_value_t *w = &L->g->values[n->inputs[1]];
    if (w->kind != ENG_VALUE_CONST || !w->constant.data || w->constant.shape.rank != 4)
        return false;
    int64_t group = eng_attr_i(n, "group", 1);
    return !(w->constant.shape.dims[1] == 1 && group > 1 && w->constant.shape.dims[0] != group);
}

/* The axes a ReduceMean node reduces, as the model gives them: its `axes`
 * attribute (opset < 18) or its constant int64 input 1; NULL when neither
 * (or not known at load). */
static const int64_t *reduce_axes(const layout_t *L, const eng_node_t *n, size_t *count)
{
    const int64_t *a = eng_attr_ints(n, "axes", count);
    if (a || n->n_inputs < 2 || n->inputs[1] < 0)
        return a;
    const eng_value_t *v = &L->g->values[n->inputs[1]];
    if (v->kind != ENG_VALUE_CONST || !v->constant.data || v->constant.dtype != ENG_DT_INT64 ||
        v->constant.shape.rank != 1)
        return NULL;
    *count = (size_t)v->constant.shape.dims[0];
    return v->constant.data;
}

/* Whether ReduceMean node n reduces exactly the spatial axes of a rank-4
 * value and keeps its dims. */
static bool reduces_spatial(const layout_t *L, const eng_node_t *n)
{
    size_t count;
    const int64_t *a = reduce_axes(L, n, &count);
    if (!a || count != 2 || eng_attr_i(n, "keepdims", 1) == 0)
        return false;
    int64_t a0 = a[0] < 0 ? a[0] + 4 : a[0], a1 = a[1] < 0 ? a[1] + 4 : a[1];
    return (a0 == 2 && a1 == 3) || (a0 == 3 && a1 == 2);
}

/* Whether node n (not a Conv) may join: its layout-bearing inputs region
 * values, the others not. */
static bool other_joins(const layout_t *L, const eng_node_t *n)
{
    if (n->n_implicit || !one_output(n) || n->n_inputs < 1 || n->inputs[0] < 0 ||
        !L->region_value[n->inputs[0]])
        return false;
    if (op_in(n->op_type, unary_ops, sizeof unary_ops / sizeof *unary_ops)) {
        for (int k = 1; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && L->region_value[n->inputs[k]])
                return false;
        return true;
    }
    if (op_in(n->op_type, binary_ops, sizeof binary_ops / sizeof *binary_ops))
        return n->n_inputs == 2 && n->inputs[1] >= 0 && L->region_value[n->inputs[1]];
    if (is_op(n, "GlobalAveragePool") || is_op(n, "GlobalMaxPool"))
        return n->n_inputs == 1;
    if (is_op(n, "ReduceMean"))
        return n->n_inputs <= 2 && reduces_spatial(L, n);
    if (is_op(n, "MaxPool") || is_op(n, "AveragePool")) {
        size_t nk;
        return n->n_inputs == 1 && eng_attr_ints(n, "kernel_shape", &nk) && nk == 2;
    }
    return false;
}

/* Marks the region nodes and values, in node order. */
static void layout_mark(layout_t *L)
{
    eng_graph_t *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        if (L->done[i] || n->domain[0] != '\0')
            continue;
        bool joins = strcmp(n->op_type, "Conv") == 0 ? conv_joins(L, n) : other_joins(L, n);
        if (!joins)
            continue;
        L->in_region[i] = true;
        L->region_value[n->outputs[0]] = true;
    }
}

/* The live node that alone reads v (no graph output, one reader counted,
 * done readers included), or -1. */
static int only_reader(const layout_t *L, int v)
{
    const eng_value_t *val = &L->g->values[v];
    if (val->is_output || val->n_consumers != 1)
        return -1;
    for (size_t i = 0; i < L->g->n_nodes; i++) {
        const eng_node_t *n = &L->g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v)
                return L->done[i] ? -1 : (int)i;
    }
    return -1;
}

/* Whether constant value v is a scalar equal to `want` (float or half). */
static bool const_scalar_is(const eng_graph_t *g, int v, float want)
{
    const eng_value_t *val = &g->values[v];
    const eng_tensor_t *t = &val->constant;
    if (val->kind != ENG_VALUE_CONST || !t->data || eng_shape_numel(&t->shape) != 1)
        return false;
    float x;
    if (t->dtype == ENG_DT_FLOAT)
        x = *(const float *)t->data;
    else if (t->dtype == ENG_DT_FLOAT16 || t->dtype == ENG_DT_BFLOAT16)
        x = eng_half_dt_to_float(t->dtype, *(const uint16_t *)t->data);
    else
        return false;
    return x == want;
}

/* Whether region node r is a ReLU the Conv can take: Relu, or Clip at
 * opset >= 11 with min a constant 0 and max absent or +inf. */
static bool is_relu(const layout_t *L, const eng_node_t *r)
{
    if (is_op(r, "Relu"))
        return r->n_inputs == 1;
    if (!is_op(r, "Clip") || L->g->opset < 11 || r->n_inputs < 2 || r->inputs[1] < 0)
        return false;
    return const_scalar_is(L->g, r->inputs[1], 0.0f) &&
           (r->n_inputs < 3 || r->inputs[2] < 0 || const_scalar_is(L->g, r->inputs[2], INFINITY));
}

/* Makes Conv c write node r's output (r marked done). */
static void conv_take_output(layout_t *L, int c, int r)
{
    eng_graph_t *g = L->g;
    int y = g->nodes[c].outputs[0], out = g->nodes[r].outputs[0];
    ((int *)g->nodes[c].outputs)[0] = out; /* the Conv's own array (layout_fuse made it) */
    g->values[out].producer = c;
    g->values[y].producer = -1;
    L->region_value[y] = false;
    L->done[r] = true;
    L->in_region[r] = false;
}

/* Fuses the residual Add and the ReLU after each region Conv (see the
 * file header). 0, or FS_ENOMEM (the Convs fused so far stay fused). */
static int layout_fuse(layout_t *L)
{
    eng_graph_t *g = L->g;
    for (size_t c = 0; c < g->n_nodes; c++) {
        eng_node_t *n = &g->nodes[c];
        if (!L->in_region[c] || L->done[c] || !is_op(n, "Conv"))
            continue;
        int r = only_reader(L, n->outputs[0]);
        if (r < 0 || !L->in_region[r])
            continue;
        /* The Conv's own arrays, room for input 3. */
        int *ins = onnx_pool_alloc(g->pool, 4 * sizeof *ins);
        int *outs = onnx_pool_alloc(g->pool, sizeof *outs);
        if (!ins || !outs)
            return fs_err(FS_ENOMEM, "out of memory fusing into Conv '%s'", n->name);
        const eng_node_t *rn = &g->nodes[r];
        int y = n->outputs[0];
        if (is_op(rn, "Add") && rn->n_inputs == 2 && rn->inputs[0] != rn->inputs[1]) {
            int other = rn->inputs[0] == y ? rn->inputs[1] : rn->inputs[0];
            int p = g->values[other].producer;
            if (L->region_value[other] && p >= 0 && p < (int)c) {
                for (int k = 0; k < 3; k++)
                    ins[k] = k < n->n_inputs ? n->inputs[k] : -1;
                ins[3] = other;
                outs[0] = y;
                n->inputs = ins;
                n->n_inputs = 4;
                n->outputs = outs;
                n->conv_residual = true;
                conv_take_output(L, (int)c, r);
                r = only_reader(L, n->outputs[0]);
                if (r < 0 || !L->in_region[r])
                    continue;
                rn = &g->nodes[r];
            }
        }
        if (!is_relu(L, rn))
            continue;
        if (!n->conv_residual) {
            memcpy(ins, n->inputs, (size_t)n->n_inputs * sizeof *ins);
            outs[0] = n->outputs[0];
            n->inputs = ins;
            n->outputs = outs;
        }
        n->conv_relu = true;
        conv_take_output(L, (int)c, r);
    }
    return 0;
}

/* NCHW dims -> NHWC dims, in place (rank 4 only). */
static void dims_to_nhwc(eng_dim_t *d)
{
    eng_dim_t c = d[1];
    d[1] = d[2];
    d[2] = d[3];
    d[3] = c;
}

/* W [M, C/group, kH, kW] laid out [M, kH, kW, C/group] into a new buffer
 * from `wa`; NULL when out of memory. */
static void *weight_to_nhwc(const eng_tensor_t *w, const eng_weight_alloc_t *wa)
{
    const int64_t *d = w->shape.dims;
    size_t es = eng_dtype_size(w->dtype), bytes = eng_tensor_bytes(w);
    char *out = eng_weights_alloc(wa, bytes ? bytes : 1);
    if (!out)
        return NULL;
    const char *in = w->data;
    int64_t m = d[0], cg = d[1], kh = d[2], kw = d[3];
    for (int64_t o = 0; o < m; o++)
        for (int64_t c = 0; c < cg; c++)
            for (int64_t h = 0; h < kh; h++)
                for (int64_t x = 0; x < kw; x++)
                    memcpy(out + ((((o * kh + h) * kw + x) * cg) + c) * es,
                           in + ((((o * cg + c) * kh + h) * kw) + x) * es, es);
    return out;
}

/* A new value slot copying value v, named v's name + suffix (unique). -1
 * when out of memory. The caller made room. */
static int value_clone(eng_graph_t *g, int v, const char *suffix)
{
    const char *base = g->values[v].name;
    size_t len = strlen(base) + strlen(suffix) + 24;
    char *name = onnx_pool_alloc(g->pool, len);
    if (!name)
        return -1;
    snprintf(name, len, "%s%s", base, suffix);
    for (int k = 1;; k++) {
        bool taken = false;
        for (size_t u = 0; u < g->n_values && !taken; u++)
            taken = strcmp(g->values[u].name, name) == 0;
        if (!taken)
            break;
        snprintf(name, len, "%s%s#%d", base, suffix, k);
    }
    int i = (int)g->n_values++;
    g->values[i] = g->values[v];
    g->values[i].name = name;
    g->values[i].is_output = false;
    g->values[i].n_consumers = 0;
    g->values[i].producer = -1;
    return i;
}

/* Re-lays out every region Conv's W (see the file header). 0, or
 * FS_ENOMEM (the weights done so far stay done, their Convs reading
 * them). */
static int layout_weights(layout_t *L, const eng_weight_alloc_t *wa)
{
    eng_graph_t *g = L->g;
    for (size_t c = 0; c < g->n_nodes; c++) {
        if (!L->in_region[c] || L->done[c] || !is_op(&g->nodes[c], "Conv"))
            continue;
        int w = g->nodes[c].inputs[1];
        if (g->values[w].constant.shape.rank != 4 || g->nodes[c].channels_last)
            continue; /* done with an earlier Conv sharing it */
        /* In place when region Convs are its only live readers. */
        bool shared = g->values[w].is_output;
        for (size_t i = 0; i < g->n_nodes && !shared; i++) {
            const eng_node_t *n = &g->nodes[i];
            for (int k = 0; k < n->n_inputs && !shared; k++)
                shared = n->inputs[k] == w && !L->done[i] &&
                         !(L->in_region[i] && is_op(n, "Conv") && k == 1);
        }
        eng_tensor_t *wt = &g->values[w].constant;
        void *data = weight_to_nhwc(wt, wa);
        int to = shared ? value_clone(g, w, "/nhwc") : w;
        if (!data || to < 0) {
            if (data)
                eng_weights_free(wa, data);
            return fs_err(FS_ENOMEM, "out of memory laying out W of Conv '%s'",
                          g->nodes[c].name);
        }
        if (shared)
            g->weight_bytes += eng_tensor_bytes(wt);
        else
            eng_weights_free(wa, wt->data);
        eng_tensor_t *nt = &g->values[to].constant;
        if (shared)
            *nt = *wt;
        nt->data = data;
        const int64_t *d = wt->shape.dims;
        nt->shape = (eng_shape_t){.rank = 4, .dims = {d[0], d[2], d[3], d[1]}};
        eng_value_t *nv = &g->values[to];
        nv->rank = 4;
        for (int k = 0; k < 4; k++)
            nv->dims[k] = (eng_dim_t){.value = nt->shape.dims[k]};
        /* Every region Conv reading W reads the new layout. */
        for (size_t i = c; i < g->n_nodes; i++) {
            eng_node_t *n = &g->nodes[i];
            if (L->in_region[i] && !L->done[i] && is_op(n, "Conv") && n->inputs[1] == w) {
                ((int *)n->inputs)[1] = to; /* the pool's, writable */
                n->channels_last = true;
            }
        }
    }
    return 0;
}

/* What the rewrite adds for one value: the NHWC value a Transpose
 * produces (entering) or the NHWC value the region produces for a
 * Transpose to read (leaving). */
typedef struct layout_edge {
    int value;       /* the NCHW value */
    int nhwc;        /* its NHWC twin */
    int at;          /* old node index: entering, before it; leaving, after it */
    bool leaving;
} layout_edge_t;

/* Whether input k of region node n carries the layout (reads NHWC). */
static bool layout_input(const eng_node_t *n, int k)
{
    if (is_op(n, "Conv"))
        return k == 0 || k == 3;
    if (op_in(n->op_type, binary_ops, sizeof binary_ops / sizeof *binary_ops))
        return k < 2;
    return k == 0;
}

/* Whether value v (a region value) is read outside the region, by a live
 * node, or is a graph output. */
static bool leaves_region(const layout_t *L, int v)
{
    eng_graph_t *g = L->g;
    if (g->values[v].is_output)
        return true;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v && !L->done[i] && (!L->in_region[i] || !layout_input(n, k)))
                return true;
    }
    return false;
}

/* A Transpose node of `from` into `to` with `perm`, named after `to`. */
static int transpose_node(eng_graph_t *g, const eng_op_def_t *tr, int from, int to,
                          const int64_t perm[4], eng_node_t *out)
{
    int *io = onnx_pool_alloc(g->pool, 2 * sizeof *io);
    eng_attr_t *a = onnx_pool_alloc(g->pool, sizeof *a);
    int64_t *p = onnx_pool_alloc(g->pool, 4 * sizeof *p);
    if (!io || !a || !p)
        return fs_err(FS_ENOMEM, "out of memory adding a Transpose for '%s'",
                      g->values[from].name);
    io[0] = from;
    io[1] = to;
    memcpy(p, perm, 4 * sizeof *p);
    *a = (eng_attr_t){.name = "perm", .type = ENG_ATTR_INTS, .n = 4, .ints = p};
    *out = (eng_node_t){.name = g->values[to].name, .op_type = eng_op_type(tr->id), .domain = "",
                        .n_inputs = 1, .inputs = io, .n_outputs = 1, .outputs = io + 1,
                        .n_attrs = 1, .attrs = a, .op = tr};
    return 0;
}

/* Counts every value's readers again (graph.h: n_consumers). */
static void count_consumers(eng_graph_t *g)
{
    for (size_t v = 0; v < g->n_values; v++)
        g->values[v].n_consumers = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0)
                g->values[g->nodes[i].inputs[k]].n_consumers++;
}

/* Points region node i's layout-bearing reads of `from` at `to` (and, for
 * a leaving value, its producer's write). */
static void edge_rewire(layout_t *L, const layout_edge_t *e)
{
    eng_graph_t *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        if (!L->in_region[i] || L->done[i])
            continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == e->value && layout_input(n, k))
                ((int *)n->inputs)[k] = e->nhwc;
        if (e->leaving && n->outputs[0] == e->value)
            ((int *)n->outputs)[0] = e->nhwc;
    }
}

/* Gives every live region node its own input and output arrays, so that
 * rewiring them never touches another node's (fusions share arrays). 0
 * or FS_ENOMEM. */
static int own_arrays(layout_t *L)
{
    eng_graph_t *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        if (!L->in_region[i] || L->done[i])
            continue;
        int *ins = onnx_pool_alloc(g->pool, (size_t)n->n_inputs * sizeof *ins);
        int *outs = onnx_pool_alloc(g->pool, (size_t)n->n_outputs * sizeof *outs);
        if (!ins || !outs)
            return fs_err(FS_ENOMEM, "out of memory laying out node '%s'", n->name);
        memcpy(ins, n->inputs, (size_t)n->n_inputs * sizeof *ins);
        memcpy(outs, n->outputs, (size_t)n->n_outputs * sizeof *outs);
        n->inputs = ins;
        n->outputs = outs;
        if (!is_op(n, "Conv") && (strncmp(n->op_type, "Global", 6) == 0 ||
                                  strstr(n->op_type, "Pool")))
            n->channels_last = true;
    }
    return 0;
}

/* The NHWC spatial axes a region ReduceMean reduces. */
static const int64_t nhwc_spatial_axes[2] = {1, 2};

/* Makes each region ReduceMean reduce axes 1 and 2: a copy of its
 * attributes with `axes` replaced, or a new int64 constant [1, 2] from
 * `wa` as its input 1 (the values array has room). 0 or FS_ENOMEM. */
static int layout_reduce_axes(layout_t *L, const eng_weight_alloc_t *wa)
{
    eng_graph_t *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        if (!L->in_region[i] || L->done[i] || !is_op(n, "ReduceMean"))
            continue;
        if (eng_node_attr(n, "axes")) {
            eng_attr_t *a = onnx_pool_alloc(g->pool, (size_t)n->n_attrs * sizeof *a);
            if (!a)
                return fs_err(FS_ENOMEM, "out of memory laying out node '%s'", n->name);
            memcpy(a, n->attrs, (size_t)n->n_attrs * sizeof *a);
            for (int k = 0; k < n->n_attrs; k++)
                if (strcmp(a[k].name, "axes") == 0)
                    a[k].ints = nhwc_spatial_axes;
            n->attrs = a;
            continue;
        }
        int64_t *data = eng_weights_alloc(wa, sizeof nhwc_spatial_axes);
        int v = data ? value_clone(g, n->inputs[1], "/nhwc") : -1;
        if (v < 0) {
            if (data)
                eng_weights_free(wa, data);
            return fs_err(FS_ENOMEM, "out of memory laying out node '%s'", n->name);
        }
        memcpy(data, nhwc_spatial_axes, sizeof nhwc_spatial_axes);
        g->values[v].constant.data = data;
        g->weight_bytes += sizeof nhwc_spatial_axes;
        ((int *)n->inputs)[1] = v; /* its own array (own_arrays) */
    }
    return 0;
}

/* Whether perm b applied after perm a (rank 4) gives the identity. */
static bool perms_cancel(const int64_t *a, const int64_t *b)
{
    for (int j = 0; j < 4; j++)
        if (a[b[j]] != j)
            return false;
    return true;
}

/* A live Transpose node's rank-4 perm, or NULL. */
static const int64_t *perm4(const eng_node_t *n)
{
    size_t np;
    const int64_t *p = is_op(n, "Transpose") && n->n_inputs == 1 && one_output(n)
                           ? eng_attr_ints(n, "perm", &np)
                           : NULL;
    return p && np == 4 ? p : NULL;
}

/* Skips every Transpose that undoes the Transpose it reads (see the file
 * header); `done` is the new node list's. Cannot fail. */
static void cancel_transposes(eng_graph_t *g, bool *done)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *t2 = &g->nodes[i];
        const int64_t *p2 = done[i] ? NULL : perm4(t2);
        int v = p2 ? t2->inputs[0] : -1, y = p2 ? t2->outputs[0] : -1;
        int j = v >= 0 ? g->values[v].producer : -1;
        const int64_t *p1 = j >= 0 && !done[j] ? perm4(&g->nodes[j]) : NULL;
        if (!p1 || !perms_cancel(p1, p2) || g->values[y].is_output)
            continue;
        int x = g->nodes[j].inputs[0];
        for (size_t r = i + 1; r < g->n_nodes; r++) {
            eng_node_t *n = &g->nodes[r];
            for (int k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] == y)
                    ((int *)n->inputs)[k] = x; /* the pool's, writable */
            for (int a = 0; a < n->n_attrs; a++) {
                const eng_graph_t *sub = n->attrs[a].type == ENG_ATTR_GRAPH ? n->attrs[a].g : NULL;
                for (size_t k = 0; sub && k < sub->n_outer; k++)
                    if (sub->outer_from[k] == y)
                        ((int *)sub->outer_from)[k] = x;
            }
        }
        done[i] = true;
        g->values[y].producer = -1;
        bool read = g->values[v].is_output;
        for (size_t r = 0; r < g->n_nodes && !read; r++)
            for (int k = 0; k < g->nodes[r].n_inputs && !done[r]; k++)
                read = read || g->nodes[r].inputs[k] == v;
        if (!read) {
            done[j] = true;
            g->values[v].producer = -1;
        }
    }
}

/* Finds the edges (see layout_edge_t) into e (room for n_values), `seen`
 * (n_values, zeroed) marking the entering values; their count. */
static size_t layout_edges(layout_t *L, layout_edge_t *e, bool *seen)
{
    eng_graph_t *g = L->g;
    size_t n_e = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        if (!L->in_region[i] || L->done[i])
            continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || !layout_input(n, k) || L->region_value[v] || seen[v])
                continue;
            seen[v] = true;
            e[n_e++] = (layout_edge_t){.value = v, .nhwc = -1, .at = (int)i, .leaving = false};
        }
        int y = n->outputs[0];
        if (leaves_region(L, y))
            e[n_e++] = (layout_edge_t){.value = y, .nhwc = -1, .at = (int)i, .leaving = true};
    }
    return n_e;
}

int eng_layout_channels_last(eng_graph_t *g, const eng_weight_alloc_t *wa, bool **done)
{
    const eng_op_def_t *tr = eng_op_find("Transpose");
    if (!tr)
        return fs_err(FS_ENOTSUP, "the channels-last layout needs the Transpose op");
    layout_t L = {.g = g, .done = *done, .in_region = calloc(g->n_nodes + 1, sizeof(bool)),
                  .region_value = calloc(g->n_values + 1, sizeof(bool))};
    layout_edge_t *edges = NULL;
    eng_node_t *nodes = NULL;
    bool *d = NULL;
    int *new_at = NULL;
    bool *seen = NULL;
    int rc = 0;
    if (!L.in_region || !L.region_value) {
        rc = fs_err(FS_ENOMEM, "out of memory laying out the graph channels-last");
        goto out;
    }
    layout_mark(&L);
    bool any = false;
    for (size_t i = 0; i < g->n_nodes; i++)
        any = any || L.in_region[i];
    if (!any)
        goto out;
    if ((rc = layout_fuse(&L)) || (rc = own_arrays(&L)))
        goto out;
    edges = calloc(g->n_values + 1, sizeof *edges);
    seen = calloc(g->n_values + 1, sizeof *seen);
    if (!edges || !seen) {
        rc = fs_err(FS_ENOMEM, "out of memory laying out the graph channels-last");
        goto out;
    }
    size_t n_e = layout_edges(&L, edges, seen);

    /* Room for the edge values, the weights' copies (at most one per region
     * Conv) and the ReduceMeans' axes, and the Transposes; the old arrays
     * stay in the pool. */
    size_t n_conv = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n_conv += L.in_region[i] && !L.done[i] &&
                  (is_op(&g->nodes[i], "Conv") || is_op(&g->nodes[i], "ReduceMean"));
    eng_value_t *values = onnx_pool_alloc(g->pool, (g->n_values + n_e + n_conv) * sizeof *values);
    nodes = onnx_pool_alloc(g->pool, (g->n_nodes + n_e) * sizeof *nodes);
    d = calloc(g->n_nodes + n_e + 1, sizeof *d);
    new_at = calloc(g->n_nodes + 1, sizeof *new_at);
    if (!values || !nodes || !d || !new_at) {
        rc = fs_err(FS_ENOMEM, "out of memory laying out the graph channels-last");
        goto out;
    }
    memcpy(values, g->values, g->n_values * sizeof *values);
    g->values = values;
    if ((rc = layout_weights(&L, wa)) || (rc = layout_reduce_axes(&L, wa)))
        goto out;

    /* Region values that stay inside take NHWC dims; each edge gets its
     * NHWC twin. */
    size_t n_old_values = g->n_values;
    for (size_t v = 0; v < n_old_values; v++)
        if (L.region_value[v] && g->values[v].rank == 4 && !leaves_region(&L, (int)v))
            dims_to_nhwc(g->values[v].dims);
    for (size_t j = 0; j < n_e; j++) {
        int t = value_clone(g, edges[j].value, "/nhwc");
        if (t < 0) {
            rc = fs_err(FS_ENOMEM, "out of memory laying out the graph channels-last");
            goto out;
        }
        g->values[t].kind = ENG_VALUE_NODE;
        g->values[t].constant = (eng_tensor_t){0}; /* an entering constant's data stays its */
        if (g->values[t].rank == 4)
            dims_to_nhwc(g->values[t].dims);
        edges[j].nhwc = t;
        edge_rewire(&L, &edges[j]);
    }

    /* The new node list: each entering Transpose before its first region
     * reader, each leaving one after its producer. */
    static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    size_t at = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        for (size_t j = 0; j < n_e && rc == 0; j++)
            if (!edges[j].leaving && edges[j].at == (int)i) {
                rc = transpose_node(g, tr, edges[j].value, edges[j].nhwc, to_nhwc, &nodes[at]);
                g->values[edges[j].nhwc].producer = (int)at++;
            }
        new_at[i] = (int)at;
        nodes[at] = g->nodes[i];
        d[at++] = L.done[i];
        for (size_t j = 0; j < n_e && rc == 0; j++)
            if (edges[j].leaving && edges[j].at == (int)i) {
                rc = transpose_node(g, tr, edges[j].nhwc, edges[j].value, to_nchw, &nodes[at]);
                g->values[edges[j].nhwc].producer = new_at[i];
                g->values[edges[j].value].producer = (int)at++;
            }
    }
    if (rc)
        goto out;
    /* Producers of the values the edges did not touch move with their
     * nodes. */
    for (size_t v = 0; v < n_old_values; v++) {
        bool edge = false;
        for (size_t j = 0; j < n_e && !edge; j++)
            edge = edges[j].value == (int)v && edges[j].leaving;
        if (!edge && g->values[v].producer >= 0)
            g->values[v].producer = new_at[g->values[v].producer];
    }
    g->nodes = nodes;
    g->n_nodes = at;
    cancel_transposes(g, d);
    count_consumers(g);
    free(*done);
    *done = d;
    d = NULL;
    /* New values take numbers the subgraphs' values had (graph.h). */
    eng_graph_number(g);
out:
    free(seen);
    free(new_at);
    free(d);
    free(edges);
    free(L.in_region);
    free(L.region_value);
    return rc;
}

void eng_layout_conv_algo(eng_graph_t *g, eng_conv_algo_t algo)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        if (n->channels_last && is_op(n, "Conv")) {
            n->conv_im2col = algo == ENG_CONV_ALGO_IM2COL;
            n->conv_implicit = algo == ENG_CONV_ALGO_IMPLICIT;
        }
    }
}
