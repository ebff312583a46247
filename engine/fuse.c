/* fuse.c -- load-time fusions: Conv + BatchNormalization, the erf and
 * tanh GELU chains into one Gelu node, and transposed weights read in place
 * by the GEMM ops.
 *
 * CONV + BATCHNORMALIZATION.
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
 * left as it was.
 *
 * GELU. PyTorch exports nn.functional.gelu (erf form) as five nodes,
 * y = (x * (1 + erf(x / sqrt 2))) * 0.5 -- Div(x, 1.4142135), Erf, Add 1,
 * Mul x, Mul 0.5 -- and hand-written GELUs (x * 0.5 * (1 + erf(x *
 * 0.70710677)), BERT's) as Mul(x, 0.5) first and the product of the halves
 * last; torch.export (the dynamo exporter) as Mul(0.5, 1 + erf) and then
 * Mul(x, .). Each chain becomes one Gelu node (approximate 'none'), which
 * reads x once and writes y once instead of four intermediates: the chain's
 * first node is rewritten in place to Gelu on x writing y (x is ready
 * there, and y's readers come after the chain's last node), the other four
 * are marked done like folded nodes, and the intermediates are left with no
 * producer. The operands of Add and Mul may come in either order.
 * Fused only when exactly equivalent in shape and nearly in value: every
 * node of the chain in the default domain and not done; every intermediate
 * read by the next node alone (its only reader, a done node still
 * counting) and no graph output; the constants float scalars (rank 0, or
 * rank 1 of one element when x's rank is known to be at least 1, so the
 * broadcast keeps x's shape) holding exactly 1.4142135f (Div) or
 * 0.70710677f (Mul), 1 and 0.5. Values: the Gelu kernels compute
 * 0.5 * x * (1 + erf(x * 0.70710677f)), the Mul chain's arithmetic in
 * another order of exact scalings by 0.5 -- the same bits on the CPU; x /
 * 1.4142135f may differ from x * 0.70710677f by an ulp, which moves y by
 * about 1e-7 relative (more only where 1 + erf cancels, x < -3, where y is
 * below 4e-3 |x| and the chain's own rounding is as large).
 * The tanh form, GPT-2's gelu_new (gelu_pytorch_tanh), exported as eight
 * nodes, 0.5 * x * (1 + tanh(0.7978846f * (x + 0.044715f * pow(x, 3)))) --
 * Pow 3, Mul, Add x, Mul, Tanh, then the same tail as the erf form --
 * becomes one Gelu node with approximate 'tanh' under the same conditions
 * (constants exactly 3, 0.044715f, sqrt(2/pi) as float32, 1 and 0.5);
 * the kernel computes the same formula in float in one pass, so y moves
 * by a few ulps (more where 1 + tanh cancels, x < -3).
 * Opset: the op definitions and kernels are opset-agnostic (Gelu's check
 * reads only `approximate`), so the Gelu node runs in a model of any opset;
 * ONNX added Gelu at opset 20, and the model's opset is left as it was.
 *
 * TRANSPOSED GEMM OPERANDS. PyTorch exports a linear layer on a rank-3
 * activation as MatMul(h, Transpose(W)), W [out, in] a weight; with tied
 * embeddings (GPT-2, Llama's tie_word_embeddings) the LM head's W is the
 * embedding table that a Gather also reads. Folding the Transpose would
 * store W twice (1.05 GB more on a 1.24B Llama). Instead, before folding,
 * a Transpose of a constant W that swaps W's last two dims (no perm: rank
 * 2), whose output is no graph output and is read only as input 1 of live
 * default-domain MatMuls (not already transposed) and Gemms (W of rank 2),
 * in no other slot, is marked done, and each reader reads W: a MatMul with
 * the node's trans_b set (graph.h; its definition and kernels then take B
 * as [..., N, K], the GEMMs' op(B) = B'), a Gemm with its transB attribute
 * flipped -- the one mechanism both ops' kernels pass to the CPU GEMM
 * (trans_b, ldb) and to cuBLAS (CUBLAS_OP_T). The values are the same bits:
 * both GEMMs' guarantee makes an element's arithmetic independent of op(B)'s
 * layout (engine/cpu/gemm.h), and cuBLAS takes the same operands. When W
 * has no other reader the fold would not have held it twice, but the
 * transposed read is chosen there too: it skips the fold's copy (its time,
 * and W's size again at peak during load), and the CPU GEMM is as fast or
 * faster with B' (bench/gemm_bench.c's gpt2 rows: it packs B's panels
 * either way). Exporters that fold the Transpose themselves (torch.onnx's
 * do_constant_folding, the TorchScript exporter's default) write W and W'
 * as two initializers; after folding, a MatMul or Gemm whose B is a rank-2
 * constant bitwise equal to the transpose of another constant W that a
 * live node reads (or that is a graph output) reads W transposed as above,
 * and B, left with no reader, is freed by the model (model.c). At
 * fp16/bf16 precision the graph is lowered after these passes
 * (engine/lowp.c), so the one W becomes one half-size W that the Gather
 * and the head both read (the node's trans_b survives the rewrite). The
 * comparison stops at the first 32 x 32 block that differs, so weights
 * that merely share a shape cost a few reads; a true twin is read whole,
 * one side across its rows (0.24-0.34 s for GPT-2's 154 MB table on the
 * 2-vCPU dev VM, where a straight memcmp of it takes 0.05-0.07 s).
 *
 * Subgraphs. The fusions rewrite the model graph only; subgraphs are left
 * as they are. A value a subgraph reads counts as a read of its node (an
 * implicit input, graph.h), so an intermediate a subgraph reads is never
 * fused away. New constants get numbers in the tree (eng_graph_number). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
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
    int rc = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++)
        if (fuse_match(g, done, (int)i, &f))
            rc = fuse_apply(g, wa, done, &f, cap);
    /* New values take numbers the subgraphs' values had (graph.h). */
    eng_graph_number(g);
    return rc;
}

/* --- GELU ------------------------------------------------------------------ */

/* Float constants the GELU chain must hold exactly. */
#define GELU_SQRT2 1.41421356237309505f
#define GELU_RSQRT2 0.70710678118654752f

/* Whether v's rank is known to be at least 1: declared so, a constant of
 * rank >= 1, or the output of a broadcasting Add/Sub/Mul/Div/Pow with such
 * an input (followed `depth` producers up). */
static bool rank_at_least_one(const eng_graph_t *g, int v, int depth)
{
    if (v < 0)
        return false;
    const eng_value_t *val = &g->values[v];
    if (val->rank >= 1 || (val->kind == ENG_VALUE_CONST && val->constant.shape.rank >= 1))
        return true;
    if (val->kind != ENG_VALUE_NODE || val->producer < 0 || depth <= 0)
        return false;
    const eng_node_t *n = &g->nodes[val->producer];
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Pow"};
    bool broadcasting = false;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        broadcasting = broadcasting || strcmp(n->op_type, ops[i]) == 0;
    if (!broadcasting || n->domain[0] != '\0')
        return false;
    for (int i = 0; i < n->n_inputs; i++)
        if (rank_at_least_one(g, n->inputs[i], depth - 1))
            return true;
    return false;
}

/* Whether c is a float scalar constant holding exactly `want`, that
 * broadcast against x leaves x's shape. */
static bool is_scalar_const(const eng_graph_t *g, int c, float want, int x)
{
    if (!is_float_const(g, c))
        return false;
    const eng_tensor_t *t = &g->values[c].constant;
    if (eng_shape_numel(&t->shape) != 1 || t->shape.rank > 1 ||
        (t->shape.rank == 1 && !rank_at_least_one(g, x, 8)))
        return false;
    const float v = *(const float *)t->data;
    return memcmp(&v, &want, sizeof v) == 0;
}

/* Node i's operand other than `v` when node i is a live default-domain
 * `op` with two inputs, one of them v, and one output; else -2. */
static int binary_other(const eng_graph_t *g, const bool *done, int i, const char *op, int v)
{
    if (i < 0 || !is_live_op(g, done, i, op))
        return -2;
    const eng_node_t *n = &g->nodes[i];
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return -2;
    return n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : -2;
}


/* One GELU chain: its nodes (any order), its input x and output y, and
 * whether it is the tanh form. */
#define GELU_CHAIN_MAX 8
typedef struct gelu_chain {
    int nodes[GELU_CHAIN_MAX];
    int n_nodes;
    int x, y;
    bool tanh;
} gelu_chain_t;

/* The tail both forms share, from the node `t` whose output is erf(..) or
 * tanh(..): 1 + t, then x * (1 + t) * 0.5, (x * 0.5) * (1 + t) or
 * ((1 + t) * 0.5) * x. Appends
 * its nodes to c and sets c->y. */
static bool gelu_tail(const eng_graph_t *g, const bool *done, int t, int x, gelu_chain_t *c)
{
    const int add = eng_graph_sole_reader(g, g->nodes[t].outputs[0]);
    const int one = binary_other(g, done, add, "Add", g->nodes[t].outputs[0]);
    if (one < 0 || !is_scalar_const(g, one, 1.0f, x))
        return false;
    const int av = g->nodes[add].outputs[0];
    const int mul = eng_graph_sole_reader(g, av);
    const int other = binary_other(g, done, mul, "Mul", av);
    if (other < 0)
        return false;
    const int mv = g->nodes[mul].outputs[0];
    c->nodes[c->n_nodes++] = add;
    c->nodes[c->n_nodes++] = mul;
    if (other != x && is_scalar_const(g, other, 0.5f, x)) {
        /* ((1 + t) * 0.5) * x: torch.export's (dynamo's) order */
        const int last = eng_graph_sole_reader(g, mv);
        if (binary_other(g, done, last, "Mul", mv) != x)
            return false;
        c->nodes[c->n_nodes++] = last;
        c->y = g->nodes[last].outputs[0];
        return true;
    }
    if (other == x) {
        /* (x * (1 + t)) * 0.5: PyTorch's order */
        const int last = eng_graph_sole_reader(g, mv);
        const int half = binary_other(g, done, last, "Mul", mv);
        if (half < 0 || !is_scalar_const(g, half, 0.5f, x))
            return false;
        c->nodes[c->n_nodes++] = last;
        c->y = g->nodes[last].outputs[0];
        return true;
    }
    /* (x * 0.5) * (1 + t) */
    const int halving = g->values[other].producer;
    if (eng_graph_sole_reader(g, other) != mul || halving < 0)
        return false;
    const int half = binary_other(g, done, halving, "Mul", x);
    if (half < 0 || !is_scalar_const(g, half, 0.5f, x))
        return false;
    c->nodes[c->n_nodes++] = halving;
    c->y = mv;
    return true;
}

/* The node that alone reads `v` and multiplies it by the scalar `want`
 * (either operand order), with the other operand; -1 when not so. */
static int scaled_by(const eng_graph_t *g, const bool *done, int node, float want, int *v)
{
    if (node < 0 || !is_live_op(g, done, node, "Mul"))
        return -1;
    const eng_node_t *n = &g->nodes[node];
    if (n->n_inputs != 2 || n->n_outputs != 1)
        return -1;
    for (int k = 0; k < 2; k++)
        if (n->inputs[k] >= 0 && is_scalar_const(g, n->inputs[1 - k], want, n->inputs[k])) {
            *v = n->inputs[k];
            return node;
        }
    return -1;
}

/* Float constants of the tanh form: sqrt(2 / pi) and 0.044715 as float32. */
#define GELU_SQRT_2_PI 0.79788456080286536f
#define GELU_CUBIC 0.044715f

/* Whether the chain through Tanh node `th` is the tanh GELU PyTorch
 * exports for GPT-2's gelu_new (gelu_pytorch_tanh):
 *   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))),
 * in the tail orders gelu_tail takes; fills *c when so. */
static bool gelu_tanh_match(const eng_graph_t *g, const bool *done, int th, gelu_chain_t *c)
{
    if (!is_live_op(g, done, th, "Tanh"))
        return false;
    const eng_node_t *t = &g->nodes[th];
    if (t->n_inputs != 1 || t->n_outputs != 1 || t->inputs[0] < 0 ||
        eng_graph_sole_reader(g, t->inputs[0]) != th)
        return false;
    int inner = -1, cube_scaled = -1, cube = -1, x = -1;
    const int scale = scaled_by(g, done, g->values[t->inputs[0]].producer, GELU_SQRT_2_PI, &inner);
    if (scale < 0 || eng_graph_sole_reader(g, inner) != scale || g->values[inner].producer < 0)
        return false;
    /* x + 0.044715 * x^3, either order */
    const int add = g->values[inner].producer;
    if (!is_live_op(g, done, add, "Add") || g->nodes[add].n_inputs != 2)
        return false;
    int cm = -1;
    for (int k = 0; k < 2 && cm < 0; k++) {
        int a = g->nodes[add].inputs[k], b = g->nodes[add].inputs[1 - k];
        if (a < 0 || b < 0 || eng_graph_sole_reader(g, b) != add || g->values[b].producer < 0)
            continue;
        int m = scaled_by(g, done, g->values[b].producer, GELU_CUBIC, &cube_scaled);
        if (m >= 0 && eng_graph_sole_reader(g, cube_scaled) == m && g->values[cube_scaled].producer >= 0) {
            cm = m;
            x = a;
        }
    }
    if (cm < 0)
        return false;
    cube = g->values[cube_scaled].producer;
    const eng_node_t *pw = &g->nodes[cube];
    if (!is_live_op(g, done, cube, "Pow") || pw->n_inputs != 2 || pw->inputs[0] != x ||
        !is_scalar_const(g, pw->inputs[1], 3.0f, x))
        return false;
    *c = (gelu_chain_t){.nodes = {cube, cm, add, scale, th}, .n_nodes = 5, .x = x, .tanh = true};
    return gelu_tail(g, done, th, x, c);
}

/* Whether the chain through Erf node `erf` is a GELU (see the file
 * header); fills *c when so. Cannot fail. */
static bool gelu_match(const eng_graph_t *g, const bool *done, int erf, gelu_chain_t *c)
{
    if (!is_live_op(g, done, erf, "Erf"))
        return false;
    const eng_node_t *e = &g->nodes[erf];
    if (e->n_inputs != 1 || e->n_outputs != 1 || e->inputs[0] < 0)
        return false;
    /* x / sqrt 2, or x * (1 / sqrt 2) */
    const int t = e->inputs[0];
    if (eng_graph_sole_reader(g, t) != erf || g->values[t].producer < 0)
        return false;
    const int scale = g->values[t].producer;
    const eng_node_t *sn = &g->nodes[scale];
    int x = -1;
    if (is_live_op(g, done, scale, "Div") && sn->n_inputs == 2 && sn->n_outputs == 1 &&
        is_scalar_const(g, sn->inputs[1], GELU_SQRT2, sn->inputs[0]))
        x = sn->inputs[0];
    for (int k = 0; k < 2 && x < 0 && is_live_op(g, done, scale, "Mul"); k++)
        if (sn->n_inputs == 2 && sn->n_outputs == 1 && sn->inputs[k] >= 0 &&
            is_scalar_const(g, sn->inputs[1 - k], GELU_RSQRT2, sn->inputs[k]))
            x = sn->inputs[k];
    if (x < 0)
        return false;
    *c = (gelu_chain_t){.nodes = {scale, erf}, .n_nodes = 2, .x = x};
    return gelu_tail(g, done, erf, x, c);
}

/* Gelu's attribute for the tanh form. */
static const eng_attr_t gelu_tanh_attr[] = {
    {.name = "approximate", .type = ENG_ATTR_STRING, .s = "tanh", .s_len = 4}};

/* Rewrites chain c into one Gelu node. Cannot fail: the Gelu node reuses
 * the chain's own input and output arrays (the graph's pool). */
static void gelu_apply(eng_graph_t *g, bool *done, const gelu_chain_t *c, const eng_op_def_t *gelu)
{
    /* The earliest node becomes the Gelu; its dropped operand loses a reader. */
    int first = c->nodes[0];
    for (int i = 1; i < c->n_nodes; i++)
        if (c->nodes[i] < first)
            first = c->nodes[i];
    eng_node_t *n = &g->nodes[first];
    const int x_at = n->inputs[0] == c->x ? 0 : 1;
    g->values[n->inputs[1 - x_at]].n_consumers--;
    const int *y_slot = NULL;
    for (int i = 0; i < c->n_nodes; i++) {
        const eng_node_t *m = &g->nodes[c->nodes[i]];
        if (m->outputs[0] == c->y)
            y_slot = m->outputs;
        g->values[m->outputs[0]].producer = -1;
        if (c->nodes[i] == first)
            continue;
        done[c->nodes[i]] = true;
        /* Only the Gelu reads x now: the chain's other reads of it go, so
         * that x's producer may take the Gelu in as its epilogue
         * (engine/fuse_epilogue.c asks for a sole reader). */
        for (int k = 0; k < m->n_inputs; k++)
            if (m->inputs[k] == c->x)
                g->values[c->x].n_consumers--;
    }
    n->op_type = eng_op_type(gelu->id);
    n->op = gelu;
    n->n_attrs = c->tanh ? 1 : 0;
    n->attrs = c->tanh ? gelu_tanh_attr : NULL;
    n->inputs += x_at;
    n->n_inputs = 1;
    n->outputs = y_slot;
    n->n_outputs = 1;
    g->values[c->y].producer = first;
}

int eng_fuse_gelu(eng_graph_t *g, bool *done)
{
    const eng_op_def_t *gelu = eng_op_find("Gelu");
    if (!gelu)
        return 0;
    gelu_chain_t c;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (gelu_match(g, done, (int)i, &c) || gelu_tanh_match(g, done, (int)i, &c))
            gelu_apply(g, done, &c, gelu);
    return 0;
}

/* --- TRANSPOSED GEMM OPERANDS ---------------------------------------------- */

/* Whether node n reads value v only as its B operand (input 1) and may read
 * it transposed instead: a live default-domain MatMul not already doing so,
 * or a Gemm; v in no other input slot (an implicit one included). */
static bool reads_as_b(const eng_graph_t *g, const bool *done, int n, int v)
{
    const eng_node_t *node = &g->nodes[n];
    bool mm = is_live_op(g, done, n, "MatMul") && !node->trans_b;
    if ((!mm && !is_live_op(g, done, n, "Gemm")) || node->n_inputs < 2 || node->inputs[1] != v)
        return false;
    for (int k = 0; k < node->n_inputs; k++)
        if (k != 1 && node->inputs[k] == v)
            return false;
    return true;
}

/* Whether Transpose node t's perm swaps exactly the last two of `rank`
 * dims (no perm: reverses them all, the same for rank 2). */
static bool swaps_last_two(const eng_node_t *t, int rank)
{
    size_t n_perm;
    const int64_t *perm = eng_attr_ints(t, "perm", &n_perm);
    if (!perm)
        return rank == 2;
    if (rank < 2 || n_perm != (size_t)rank)
        return false;
    for (int d = 0; d < rank - 2; d++)
        if (perm[d] != d)
            return false;
    return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

/* Makes node n (reads_as_b of some value) read constant w, the transpose of
 * what it read, as its B: a MatMul sets trans_b, a Gemm flips its transB
 * attribute. The node gets new input (and attribute) arrays from the
 * graph's pool. 0, or FS_ENOMEM with the node as it was. */
static int read_transposed(eng_graph_t *g, int n, int w)
{
    eng_node_t *node = &g->nodes[n];
    bool mm = strcmp(node->op_type, "MatMul") == 0;
    int *ins = onnx_pool_alloc(g->pool, (size_t)node->n_inputs * sizeof *ins);
    eng_attr_t *attrs = NULL;
    int n_attrs = node->n_attrs;
    if (!mm) {
        bool has = eng_node_attr(node, "transB") != NULL;
        n_attrs += !has;
        attrs = onnx_pool_alloc(g->pool, (size_t)n_attrs * sizeof *attrs);
        if (attrs) {
            if (node->n_attrs)
                memcpy(attrs, node->attrs, (size_t)node->n_attrs * sizeof *attrs);
            eng_attr_t *tb = &attrs[n_attrs - 1];
            for (int a = 0; a < node->n_attrs && has; a++)
                if (strcmp(attrs[a].name, "transB") == 0)
                    tb = &attrs[a];
            *tb = (eng_attr_t){.name = "transB", .type = ENG_ATTR_INT,
                               .i = eng_attr_i(node, "transB", 0) == 0};
        }
    }
    if (!ins || (!mm && !attrs))
        return fs_err(FS_ENOMEM, "out of memory reading a transposed weight in %s '%s'",
                      node->op_type, node->name);
    memcpy(ins, node->inputs, (size_t)node->n_inputs * sizeof *ins);
    g->values[ins[1]].n_consumers--;
    ins[1] = w;
    g->values[w].n_consumers++;
    node->inputs = ins;
    if (mm) {
        node->trans_b = true;
    } else {
        node->attrs = attrs;
        node->n_attrs = n_attrs;
    }
    return 0;
}

int eng_fuse_transpose_into_gemm(eng_graph_t *g, bool *done)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (!is_live_op(g, done, (int)i, "Transpose"))
            continue;
        const eng_node_t *t = &g->nodes[i];
        if (t->n_inputs != 1 || t->n_outputs != 1 || t->inputs[0] < 0 || t->outputs[0] < 0)
            continue;
        int w = t->inputs[0], tv = t->outputs[0];
        const eng_value_t *wv = &g->values[w];
        if (wv->kind != ENG_VALUE_CONST || !wv->constant.data ||
            !swaps_last_two(t, wv->constant.shape.rank) || g->values[tv].is_output ||
            g->values[tv].kind != ENG_VALUE_NODE)
            continue;
        /* Every reader of the transpose must take it as B: else the fold
         * would hold it anyway. A Gemm's B has rank 2. */
        int readers = 0;
        bool ok = true;
        for (size_t n = 0; n < g->n_nodes && ok; n++) {
            bool reads = false;
            for (int k = 0; k < g->nodes[n].n_inputs; k++)
                reads = reads || g->nodes[n].inputs[k] == tv;
            if (!reads)
                continue;
            ok = reads_as_b(g, done, (int)n, tv) &&
                 (strcmp(g->nodes[n].op_type, "MatMul") == 0 || wv->constant.shape.rank == 2);
            readers++;
        }
        if (!ok || readers == 0 || readers != g->values[tv].n_consumers)
            continue;
        for (size_t n = 0; n < g->n_nodes; n++) {
            if (g->nodes[n].n_inputs < 2 || g->nodes[n].inputs[1] != tv)
                continue;
            int rc = read_transposed(g, (int)n, w);
            if (rc)
                return rc; /* the readers not yet rewritten still read the Transpose */
        }
        /* W keeps the done Transpose's read in its count (a done node
         * still counts as a reader); tv is left with no producer. */
        g->values[tv].producer = -1;
        done[i] = true;
    }
    return 0;
}

/* Whether a (rows x cols, row-major) is bitwise the transpose of b (cols x
 * rows), T an unsigned type of the elements' size, compared in 32 x 32
 * blocks so that both stay in cache. Cannot fail. */
#define TRANSPOSE_EQ_FN(NAME, T)                                                          \
    static bool NAME(const T *a, const T *b, int64_t rows, int64_t cols)                  \
    {                                                                                     \
        for (int64_t i0 = 0; i0 < rows; i0 += 32)                                         \
            for (int64_t j0 = 0; j0 < cols; j0 += 32) {                                   \
                int64_t i1 = i0 + 32 < rows ? i0 + 32 : rows;                             \
                int64_t j1 = j0 + 32 < cols ? j0 + 32 : cols;                             \
                T diff = 0;                                                               \
                for (int64_t i = i0; i < i1; i++)                                         \
                    for (int64_t j = j0; j < j1; j++)                                     \
                        diff |= a[i * cols + j] ^ b[j * rows + i];                        \
                if (diff)                                                                 \
                    return false;                                                         \
            }                                                                             \
        return true;                                                                      \
    }
TRANSPOSE_EQ_FN(is_transpose_of_16, uint16_t)
TRANSPOSE_EQ_FN(is_transpose_of_32, uint32_t)
TRANSPOSE_EQ_FN(is_transpose_of_64, uint64_t)
#undef TRANSPOSE_EQ_FN

/* is_transpose_of_* for elements of `es` bytes: 2, 4 or 8. */
static bool is_transpose_of(const void *a, const void *b, int64_t rows, int64_t cols, size_t es)
{
    return es == 2   ? is_transpose_of_16(a, b, rows, cols)
           : es == 4 ? is_transpose_of_32(a, b, rows, cols)
                     : is_transpose_of_64(a, b, rows, cols);
}

/* A constant other than b holding b's transpose (bitwise) that live nodes
 * read (live[v]: how many inputs of nodes still to run read v) or that is
 * a graph output, or -1. Cannot fail. */
static int transposed_twin(const eng_graph_t *g, const int *live, int b)
{
    const eng_tensor_t *bt = &g->values[b].constant;
    size_t es = eng_dtype_size(bt->dtype);
    if (bt->shape.rank != 2 || !bt->data || (es != 2 && es != 4 && es != 8))
        return -1;
    for (size_t v = 0; v < g->n_values; v++) {
        const eng_value_t *wv = &g->values[v];
        const eng_tensor_t *wt = &wv->constant;
        if ((int)v == b || wv->kind != ENG_VALUE_CONST || !wt->data || wt->dtype != bt->dtype ||
            wt->shape.rank != 2 || wt->shape.dims[0] != bt->shape.dims[1] ||
            wt->shape.dims[1] != bt->shape.dims[0] || (live[v] == 0 && !wv->is_output))
            continue;
        if (is_transpose_of(bt->data, wt->data, bt->shape.dims[0], bt->shape.dims[1], es))
            return (int)v;
    }
    return -1;
}

int eng_fuse_transposed_twins(eng_graph_t *g, bool *done)
{
    int *live = calloc(g->n_values ? g->n_values : 1, sizeof *live);
    if (!live)
        return fs_err(FS_ENOMEM, "out of host memory looking for transposed weights");
    for (size_t n = 0; n < g->n_nodes; n++)
        for (int k = 0; !done[n] && k < g->nodes[n].n_inputs; k++)
            if (g->nodes[n].inputs[k] >= 0)
                live[g->nodes[n].inputs[k]]++;
    int rc = 0;
    for (size_t n = 0; n < g->n_nodes && rc == 0; n++) {
        const eng_node_t *node = &g->nodes[n];
        if (node->n_inputs < 2 || node->inputs[1] < 0)
            continue;
        int b = node->inputs[1];
        if (g->values[b].kind != ENG_VALUE_CONST || !reads_as_b(g, done, (int)n, b))
            continue;
        int w = transposed_twin(g, live, b);
        if (w >= 0 && (rc = read_transposed(g, (int)n, w)) == 0) {
            /* b may now have no live reader: a later node's twin search
             * must not pick it back. */
            live[b]--;
            live[w]++;
        }
    }
    free(live);
    return rc;
}
