/* fuse.c -- Conv + BatchNormalization fusion at load.
 *
 * Algorithm: an inference BatchNormalization computes, per channel m,
 * y = (x - mean[m]) * s[m] + B[m] with s[m] = scale[m] / sqrt(var[m] + eps).
 * When x is a Conv's output that nothing else reads, the Conv can produce y
 * itself with W'[m] = W[m] * s[m] and b'[m] = (b[m] - mean[m]) * s[m] + B[m]
 * (b = 0 when the Conv has no bias). This holds for any group count: row m
 * of W is output channel m's whole filter. The factors are computed in
 * double and each result is rounded to float once.
 *
 * The rewrite: the Conv reads W' and b' and writes the BN's output value;
 * the BN node is marked done, like a folded node, so no plan runs it; the
 * Conv's old output value is left with no producer and no live reader. W'
 * and b' are new buffers from the weight allocator: they replace the data
 * of W (of b) when the Conv was its only reader, else they go on new
 * constant values, appended to the graph (the values array is regrown once,
 * in the graph's pool), and W (b) stays as it was for its other readers.
 *
 * Guarantee: a pair is fused only when the CPU kernels would compute the
 * same function: both nodes in the default domain and not done; the Conv's
 * output read only by the BN (a done node still counts as a reader) and not
 * a graph output; W, the Conv bias and the four BN parameters constants
 * with host data, float, W of rank >= 3 and the others [M]; the BN in
 * inference mode (training_mode 0, spatial 1, is_test set before opset 7:
 * op check already refuses the rest, this only stays out of their way) with
 * one output; and every var + eps > 0 and every W', b' finite (the kernel's
 * inf/NaN arithmetic would differ from the folded one's). Anything else is
 * left as it was. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"
#include "engine/plan.h"

/* One Conv + BN pair that may be fused. */
typedef struct fuse_pair {
    int conv, bn;             /* node indices */
    int x, y;                 /* the Conv's output (BN input), the BN's output */
    int w, b;                 /* Conv weight, bias (-1: none) */
    int scale, bias, mean, var; /* the BN's parameters */
    int64_t m;                /* output channels */
    int64_t k;                /* W elements per output channel */
    double eps;
} fuse_pair_t;

/* Whether value v is a float constant with host data. */
static bool is_float_const(const eng_graph_t *g, int v)
{
    return v >= 0 && g->values[v].kind == ENG_VALUE_CONST && g->values[v].constant.data &&
           g->values[v].constant.dtype == ENG_DT_FLOAT;
}

/* Whether v is a float constant of shape [m]. */
static bool is_channel_vector(const eng_graph_t *g, int v, int64_t m)
{
    return is_float_const(g, v) && g->values[v].constant.shape.rank == 1 &&
           g->values[v].constant.shape.dims[0] == m;
}

/* Whether the node is `op` of the default domain and still to run. */
static bool is_live_op(const eng_graph_t *g, const bool *done, int i, const char *op)
{
    const eng_node_t *n = &g->nodes[i];
    return !done[i] && strcmp(n->op_type, op) == 0 && n->domain[0] == '\0';
}

/* Whether node `bn_index` is a BatchNormalization that may fold into the
 * Conv producing its input; fills *f when so. Cannot fail. */
static bool fuse_match(const eng_graph_t *g, const bool *done, int bn_index, fuse_pair_t *f)
{
    if (!is_live_op(g, done, bn_index, "BatchNormalization"))
        return false;
    const eng_node_t *bn = &g->nodes[bn_index];
    if (bn->n_inputs != 5 || bn->n_outputs < 1 || bn->outputs[0] < 0)
        return false;
    for (int o = 1; o < bn->n_outputs; o++)
        if (bn->outputs[o] >= 0)
            return false;
    if (eng_attr_i(bn, "training_mode", 0) != 0 || eng_attr_i(bn, "spatial", 1) != 1 ||
        (g->opset < 7 && eng_attr_i(bn, "is_test", 0) == 0))
        return false;
    int x = bn->inputs[0];
    if (x < 0 || g->values[x].kind != ENG_VALUE_NODE || g->values[x].is_output ||
        g->values[x].n_consumers != 1 || g->values[x].producer < 0)
        return false;
    int ci = g->values[x].producer;
    if (!is_live_op(g, done, ci, "Conv"))
        return false;
    const eng_node_t *conv = &g->nodes[ci];
    if (conv->n_outputs != 1 || conv->outputs[0] != x || conv->n_inputs < 2 ||
        conv->n_inputs > 3)
        return false;
    int w = conv->inputs[1], b = conv->n_inputs == 3 ? conv->inputs[2] : -1;
    if (!is_float_const(g, w) || g->values[w].constant.shape.rank < 3)
        return false;
    const eng_tensor_t *wt = &g->values[w].constant;
    int64_t m = wt->shape.dims[0];
    if (m <= 0)
        return false;
    if (b >= 0 && !is_channel_vector(g, b, m))
        return false;
    for (int i = 1; i <= 4; i++)
        if (!is_channel_vector(g, bn->inputs[i], m))
            return false;
    *f = (fuse_pair_t){.conv = ci, .bn = bn_index, .x = x, .y = bn->outputs[0], .w = w, .b = b,
                       .scale = bn->inputs[1], .bias = bn->inputs[2], .mean = bn->inputs[3],
                       .var = bn->inputs[4], .m = m, .k = eng_shape_numel(&wt->shape) / m,
                       /* The kernel's eps is this float; var + eps is then
                        * formed in double here, in float there. */
                       .eps = (double)eng_attr_f(bn, "epsilon", 1e-5f)};
    return true;
}

/* W' and b' of pair f into w_out and b_out. false when a result is not
 * finite or a var + eps is not positive (the pair is then left alone).
 * Cannot fail otherwise. */
static bool fuse_compute(const eng_graph_t *g, const fuse_pair_t *f, float *w_out, float *b_out)
{
    const float *w = g->values[f->w].constant.data;
    const float *b = f->b >= 0 ? g->values[f->b].constant.data : NULL;
    const float *scale = g->values[f->scale].constant.data;
    const float *bias = g->values[f->bias].constant.data;
    const float *mean = g->values[f->mean].constant.data;
    const float *var = g->values[f->var].constant.data;
    bool finite = true;
    for (int64_t m = 0; m < f->m && finite; m++) {
        double den = (double)var[m] + f->eps;
        if (!(den > 0))
            return false;
        double s = (double)scale[m] / sqrt(den);
        for (int64_t i = 0; i < f->k; i++) {
            float v = (float)((double)w[m * f->k + i] * s);
            finite = finite && isfinite(v);
            w_out[m * f->k + i] = v;
        }
        b_out[m] = (float)(((b ? (double)b[m] : 0.0) - (double)mean[m]) * s + (double)bias[m]);
        finite = finite && isfinite(b_out[m]);
    }
    return finite;
}

/* Whether the Conv may take over v's storage: it is its only reader. */
static bool is_exclusive(const eng_graph_t *g, int v)
{
    return v >= 0 && g->values[v].n_consumers == 1 && !g->values[v].is_output;
}

/* A name for a new value, "<base><suffix>" made unique with "#N", in the
 * pool; NULL when out of memory. */
static const char *fuse_name(eng_graph_t *g, const char *base, const char *suffix)
{
    size_t len = strlen(base) + strlen(suffix) + 24;
    char *name = onnx_pool_alloc(g->pool, len);
    if (!name)
        return NULL;
    snprintf(name, len, "%s%s", base, suffix);
    for (int n = 1;; n++) {
        bool taken = false;
        for (size_t v = 0; v < g->n_values && !taken; v++)
            taken = strcmp(g->values[v].name, name) == 0;
        if (!taken)
            return name;
        snprintf(name, len, "%s%s#%d", base, suffix, n);
    }
}

/* Puts `data` (of `shape`) on value `reuse`, freeing its old data, or, when
 * reuse < 0, on a new value slot named `name` (the caller made room).
 * Returns the value's index. Cannot fail. */
static int fuse_install(eng_graph_t *g, const eng_weight_alloc_t *wa, int reuse,
                        const char *name, float *data, const eng_shape_t *shape)
{
    eng_tensor_t t = {.dtype = ENG_DT_FLOAT, .shape = *shape, .data = data};
    if (reuse >= 0) {
        eng_value_t *v = &g->values[reuse];
        eng_weights_free(wa, v->constant.data);
        v->constant = t;
        return reuse;
    }
    int i = (int)g->n_values++;
    eng_value_t *v = &g->values[i];
    *v = (eng_value_t){.name = name, .kind = ENG_VALUE_CONST, .dtype = ENG_DT_FLOAT,
                       .rank = shape->rank, .constant = t, .producer = -1, .n_consumers = 1};
    for (int d = 0; d < shape->rank; d++)
        v->dims[d].value = shape->dims[d];
    g->weight_bytes += eng_tensor_bytes(&t);
    return i;
}

/* Frees the buffers fuse_apply allocated (either may be NULL). */
static void fuse_free(const eng_weight_alloc_t *wa, float *w, float *b)
{
    if (w)
        eng_weights_free(wa, w);
    if (b)
        eng_weights_free(wa, b);
}

/* Fuses pair f, the values array having room for `cap` values. 0 (fused,
 * or skipped when the folded constants would not be finite or a chained
 * pair that pass one did not count finds no room), or FS_ENOMEM with the
 * graph as it was. */
static int fuse_apply(eng_graph_t *g, const eng_weight_alloc_t *wa, bool *done,
                      const fuse_pair_t *f, size_t cap)
{
    const eng_shape_t w_shape = g->values[f->w].constant.shape;
    const eng_shape_t b_shape = {.rank = 1, .dims = {f->m}};
    size_t w_bytes = (size_t)(f->m * f->k) * sizeof(float), b_bytes = (size_t)f->m * sizeof(float);
    float *w_new = eng_weights_alloc(wa, w_bytes ? w_bytes : 1);
    float *b_new = eng_weights_alloc(wa, b_bytes);
    int w_reuse = is_exclusive(g, f->w) ? f->w : -1;
    int b_reuse = is_exclusive(g, f->b) ? f->b : -1;
    const char *y_name = g->values[f->y].name;
    const char *w_name = w_reuse < 0 ? fuse_name(g, y_name, "/fused_W") : NULL;
    const char *b_name = b_reuse < 0 ? fuse_name(g, y_name, "/fused_B") : NULL;
    int *ins = onnx_pool_alloc(g->pool, 3 * sizeof *ins);
    int *outs = onnx_pool_alloc(g->pool, sizeof *outs);
    if (!w_new || !b_new || (w_reuse < 0 && !w_name) || (b_reuse < 0 && !b_name) || !ins ||
        !outs) {
        fuse_free(wa, w_new, b_new);
        return fs_err(FS_ENOMEM, "out of memory folding BatchNormalization '%s' into Conv '%s'",
                      g->nodes[f->bn].name, g->nodes[f->conv].name);
    }
    size_t need = (size_t)(w_reuse < 0) + (size_t)(b_reuse < 0);
    if (!fuse_compute(g, f, w_new, b_new) || g->n_values + need > cap) {
        fuse_free(wa, w_new, b_new);
        return 0;
    }
    eng_node_t *conv = &g->nodes[f->conv];
    if (w_reuse < 0)
        g->values[f->w].n_consumers--;
    if (f->b >= 0 && b_reuse < 0)
        g->values[f->b].n_consumers--;
    ins[0] = conv->inputs[0];
    ins[1] = fuse_install(g, wa, w_reuse, w_name, w_new, &w_shape);
    ins[2] = fuse_install(g, wa, b_reuse, b_name, b_new, &b_shape);
    outs[0] = f->y;
    conv->n_inputs = 3;
    conv->inputs = ins;
    conv->outputs = outs;
    g->values[f->y].producer = f->conv;
    g->values[f->x].producer = -1;
    done[f->bn] = true;
    return 0;
}

int eng_fuse_conv_bn(eng_graph_t *g, const eng_weight_alloc_t *wa, bool *done)
{
    fuse_pair_t f;
    size_t n_pairs = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n_pairs += fuse_match(g, done, (int)i, &f);
    if (n_pairs == 0)
        return 0;
    /* Room for a new W' and b' per pair, made once; the old array stays in
     * the pool until the graph goes. */
    size_t cap = g->n_values + 2 * n_pairs;
    eng_value_t *values = onnx_pool_alloc(g->pool, cap * sizeof *values);
    if (!values)
        return fs_err(FS_ENOMEM, "out of memory fusing %zu Conv+BatchNormalization pairs",
                      n_pairs);
    memcpy(values, g->values, g->n_values * sizeof *values);
    g->values = values;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (!fuse_match(g, done, (int)i, &f))
            continue;
        int rc = fuse_apply(g, wa, done, &f, cap);
        if (rc != 0)
            return rc;
    }
    return 0;
}
