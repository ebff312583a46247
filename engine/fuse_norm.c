/* fuse_norm.c -- the load-time rewrite of an exported RMSNorm chain into
 * one RMSNormalization node (ONNX opset 23 semantics, engine/ops/nn.c).
 *
 * What the exporters write for Llama's and T5's RMSNorm (and every
 * `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`):
 *     P = Pow(x, 2)
 *     M = ReduceMean(P, axes [-1], keepdims 1)
 *     A = Add(M, eps)                         eps a scalar constant
 *     S = Sqrt(A)
 *     R = Reciprocal(S)  or  Div(1, S)        dynamo / TorchScript
 *     N = Mul(x, R)                           either operand order
 *     Y = Mul(w, N)                           w a rank-1 constant, either order
 * becomes Y = RMSNormalization(x, w; axis -1, epsilon eps) on the node
 * that was the last Mul; the other nodes are marked done like folded ones
 * and their outputs left with no producer. Seven kernels and five
 * intermediate tensors (one of them x-sized three times over) become one
 * pass.
 *
 * Guarantee: rewritten only when RMSNormalization computes the same
 * function: every node live, default domain, one output; every
 * intermediate read by the next node alone and no graph output; Pow's
 * exponent, Div's numerator and eps scalar constants of x's dtype (one
 * element, rank <= 1) equal to 2, 1 and a finite eps >= 0; ReduceMean over
 * the last axis alone, keeping it (axes [-1] as the attribute before
 * opset 18 or a constant input from it, noop_with_empty_axes 0); w a
 * rank-1 constant of x's dtype, whose broadcast against x is the op's
 * scale broadcast (both right-aligned over the last axis; the op refuses,
 * at plan time, a w whose length is not x's last dim, where Mul would
 * have broadcast a last dim of 1). The op accumulates in float32
 * (stash_type 1) where the chain rounds each step in x's dtype: the same
 * to rounding for float32, closer for float16 and bfloat16.
 *
 * Chains without the weight Mul, or with a Cast between the two Muls
 * (the TorchScript export of Llama casts back to the model's dtype
 * there), are left as they are. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/graph.h"
#include "engine/half.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "engine/plan.h"

/* The nodes of one chain, in order: Pow, ReduceMean, Add, Sqrt,
 * Reciprocal or Div, Mul(x, R); the last Mul (becomes the op) apart. */
#define NORM_CHAIN 6

typedef struct norm_chain {
    int nodes[NORM_CHAIN];
    int last;    /* Mul(w, N): becomes RMSNormalization */
    int x, w;
    float eps;
} norm_chain_t;

/* Whether c is a constant of dtype dt holding one element (rank <= 1);
 * its value as float into *f. */
static bool scalar_of(const eng_graph_t *g, int c, eng_dtype_t dt, float *f)
{
    if (c < 0 || g->values[c].kind != ENG_VALUE_CONST || !g->values[c].constant.data)
        return false;
    const eng_tensor_t *t = &g->values[c].constant;
    if (t->dtype != dt || eng_shape_numel(&t->shape) != 1 || t->shape.rank > 1)
        return false;
    if (dt == ENG_DT_FLOAT)
        *f = *(const float *)t->data;
    else if (dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16)
        *f = eng_half_dt_to_float(dt, *(const uint16_t *)t->data);
    else
        return false;
    return true;
}

/* The dtype of value v as declared (a constant's as stored);
 * ENG_DT_UNDEFINED when unknown. */
static eng_dtype_t value_dtype(const eng_graph_t *g, int v)
{
    const eng_value_t *val = &g->values[v];
    return val->kind == ENG_VALUE_CONST ? val->constant.dtype : val->dtype;
}

/* The one live `op` node reading v (a chain intermediate), or -1. */
static int next_op(const eng_graph_t *g, const bool *done, int v, const char *op)
{
    int r = eng_graph_sole_reader(g, v);
    return eng_graph_live_op(g, done, r, op) ? r : -1;
}

/* Whether ReduceMean node r averages the last axis alone, keeping it. */
static bool mean_of_last_axis(const eng_graph_t *g, const eng_node_t *r)
{
    if (eng_attr_i(r, "keepdims", 1) != 1 || eng_attr_i(r, "noop_with_empty_axes", 0) != 0)
        return false;
    size_t n = 0;
    const int64_t *axes = eng_attr_ints(r, "axes", &n);
    if (r->n_inputs >= 2 && r->inputs[1] >= 0) {
        if (axes)
            return false;
        const eng_value_t *a = &g->values[r->inputs[1]];
        if (a->kind != ENG_VALUE_CONST || a->constant.dtype != ENG_DT_INT64 ||
            eng_shape_numel(&a->constant.shape) != 1 || a->constant.shape.rank > 1)
            return false;
        return *(const int64_t *)a->constant.data == -1;
    }
    return axes && n == 1 && axes[0] == -1;
}

/* The operand of binary node i other than v, or -1 when v is not one of
 * its two inputs. */
static int other_operand(const eng_graph_t *g, int i, int v)
{
    const eng_node_t *n = &g->nodes[i];
    if (n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[0] == n->inputs[1])
        return -1;
    return n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : -1;
}

/* Whether the chain starting at Pow node `pw` may be rewritten; fills *c. */
static bool norm_match(const eng_graph_t *g, const bool *done, int pw, norm_chain_t *c)
{
    if (!eng_graph_live_op(g, done, pw, "Pow") || g->nodes[pw].n_inputs != 2)
        return false;
    const int x = g->nodes[pw].inputs[0];
    const eng_dtype_t dt = x >= 0 ? value_dtype(g, x) : ENG_DT_UNDEFINED;
    float f;
    if (x < 0 || !scalar_of(g, g->nodes[pw].inputs[1], dt, &f) || f != 2.0f)
        return false;
    const int mean = next_op(g, done, g->nodes[pw].outputs[0], "ReduceMean");
    if (mean < 0 || g->nodes[mean].inputs[0] != g->nodes[pw].outputs[0] ||
        !mean_of_last_axis(g, &g->nodes[mean]))
        return false;
    const int mv = g->nodes[mean].outputs[0], add = next_op(g, done, mv, "Add");
    if (add < 0 || !scalar_of(g, other_operand(g, add, mv), dt, &c->eps) || !isfinite(c->eps) ||
        c->eps < 0)
        return false;
    const int sq = next_op(g, done, g->nodes[add].outputs[0], "Sqrt");
    if (sq < 0)
        return false;
    const int sv = g->nodes[sq].outputs[0];
    int inv = next_op(g, done, sv, "Reciprocal");
    if (inv < 0) {
        inv = next_op(g, done, sv, "Div");
        if (inv < 0 || g->nodes[inv].n_inputs != 2 || g->nodes[inv].inputs[1] != sv ||
            !scalar_of(g, g->nodes[inv].inputs[0], dt, &f) || f != 1.0f)
            return false;
    }
    const int rv = g->nodes[inv].outputs[0], mul = next_op(g, done, rv, "Mul");
    if (mul < 0 || other_operand(g, mul, rv) != x)
        return false;
    const int nv = g->nodes[mul].outputs[0], last = next_op(g, done, nv, "Mul");
    const int w = last >= 0 ? other_operand(g, last, nv) : -1;
    if (w < 0 || g->values[w].kind != ENG_VALUE_CONST || g->values[w].constant.dtype != dt ||
        g->values[w].constant.shape.rank != 1)
        return false;
    *c = (norm_chain_t){.nodes = {pw, mean, add, sq, inv, mul}, .last = last, .x = x, .w = w,
                        .eps = c->eps};
    return true;
}

/* Rewrites c's last Mul into the RMSNormalization node and marks the rest
 * done. 0, or FS_ENOMEM with the graph as it was. */
static int norm_apply(eng_graph_t *g, bool *done, const norm_chain_t *c, const eng_op_def_t *rms)
{
    eng_node_t *n = &g->nodes[c->last];
    int *ins = onnx_pool_alloc(g->pool, 2 * sizeof *ins);
    eng_attr_t *attrs = onnx_pool_alloc(g->pool, 2 * sizeof *attrs);
    if (!ins || !attrs)
        return fs_err(FS_ENOMEM, "out of memory fusing the RMSNorm of Mul '%s'", n->name);
    ins[0] = c->x;
    ins[1] = c->w;
    attrs[0] = (eng_attr_t){.name = "axis", .type = ENG_ATTR_INT, .i = -1};
    attrs[1] = (eng_attr_t){.name = "epsilon", .type = ENG_ATTR_FLOAT, .f = c->eps};
    for (int k = 0; k < n->n_inputs; k++)
        g->values[n->inputs[k]].n_consumers--;
    for (int k = 0; k < 2; k++)
        g->values[ins[k]].n_consumers++;
    for (int i = 0; i < NORM_CHAIN; i++) {
        done[c->nodes[i]] = true;
        g->values[g->nodes[c->nodes[i]].outputs[0]].producer = -1;
    }
    n->op_type = eng_op_type(rms->id);
    n->op = rms;
    n->inputs = ins;
    n->n_inputs = 2;
    n->attrs = attrs;
    n->n_attrs = 2;
    return 0;
}

int eng_fuse_rms_norm(eng_graph_t *g, bool *done)
{
    const eng_op_def_t *rms = eng_op_find("RMSNormalization");
    if (!rms)
        return 0;
    norm_chain_t c;
    int rc = 0, fused = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++)
        if (norm_match(g, done, (int)i, &c)) {
            rc = norm_apply(g, done, &c, rms);
            fused += rc == 0;
        }
    if (fused)
        FS_LOG_I("engine", "rms norm: %d chains fused into RMSNormalization nodes", fused);
    return rc;
}
