/* fuse_attention.c -- the load-time rewrite of exported attention into one
 * Attention node (ONNX opset 23 semantics, engine/ops/attention.c).
 *
 * What the exporters write. torch.onnx (dynamo and TorchScript) exports
 * scaled_dot_product_attention's math form, per layer,
 *     S  = MatMul(Mul(Q, c), Mul(Kt, c))     c = 1/sqrt(sqrt(D)), scalar
 *     X  = Add(S, mask)                      additive mask, often Where(...)
 *     P  = Softmax(X, axis -1)
 *     P2 = Where(IsNaN(P), 0, P)             fully masked rows -> 0
 *     Y  = MatMul(P2, V)
 * with Q, V [B, H, Sq, D], [B, H, Skv, Dv] and Kt = K^T [B, H, D, Skv]:
 * TorchScript writes Kt as Transpose(perm 0,2,3,1) of the head split, the
 * dynamo exporter as Reshape(Transpose(Reshape(K, [B*H, Skv, D]),
 * (0,2,1)), [B, H, D, Skv]) of K [B, H, Skv, D]. Hand-written models scale
 * S itself (Mul or Div by a scalar) or leave the mask or the IsNaN guard
 * out. Each of those forms becomes
 *     Y = Attention(Q, K, V, mask; scale = the product of the factors)
 * on the node that was MatMul(P2, V) (all its inputs are ready there, and
 * Y's readers come after it); the other nodes are marked done like folded
 * ones and their outputs left with no producer. K is the head split's
 * [B, H, Skv, D] where the Kt chain is a Transpose swapping the last two
 * dims of a rank-4 value, or the dynamo Reshape-Transpose-Reshape chain
 * whose declared shapes prove it a transpose (the chain then dies too);
 * otherwise the node reads Kt itself with its trans_b set (graph.h: the
 * Attention definition and kernels then take K as [B, kv_heads, D, Skv]).
 *
 * Guarantee: rewritten only when the Attention op computes the same
 * function: every node live, default domain, one output; every
 * intermediate read by the next node alone (a done node still counting)
 * and no graph output; the scale factors scalar constants (float32,
 * float16 or bfloat16; one element, rank <= 4), finite with a finite
 * nonzero product as float; Softmax on
 * the last axis (axis -1 or 3 of the rank-4 scores; before opset 13 the
 * 2-D coercion at axis 3 is the same function); IsNaN's and Where's
 * operands exactly (P), (IsNaN(P), 0 scalar, P). Shapes are proven from
 * the declared (value_info) shapes, which the exporters compute by shape
 * inference: Q, Kt and V rank 4 with one batch dim B; K's and V's head
 * dim Q's or both 1 (MatMul's broadcast of one head is Attention's
 * grouped heads with one group); the mask of rank 1 to 4, its last dim
 * Skv (Attention masks keys past a shorter mask where Add would
 * broadcast) and every other dim 1 or the scores' dim there, so that Add
 * broadcasts the mask exactly as Attention does. Two dims are equal when
 * both are known and equal or both name the same symbol. Where a needed
 * equality is left open by a dim declared unknown (the dynamo exporter
 * declares K^T and the scores of full-size BERT, ViT and GPT-2 with
 * unknown dims; bench/softmax_context.py shows them) and nothing declared
 * contradicts it, the chain is still rewritten, with the node's
 * attn_check set (graph.h): the op checks at plan time, on the real
 * shapes, the two equalities its own checks do not imply (the mask's
 * last dim is the keys' count, K's heads are Q's or 1) and refuses shapes
 * where the chain would have broadcast otherwise. So the rewrite never
 * computes another function; on such shapes (a mask of one key against
 * several, K broadcast over the batch) it fails the request where the
 * chain ran. A model without declared intermediate ranks (the TorchScript
 * exporter writes none) is left as it is.
 *
 * Values: the Attention kernels compute q.k * (c * c) where the chain
 * computed (q * c).(k * c) in the model's dtype, and the softmax in one
 * pass: the same to rounding. Where the chain and the op differ beyond
 * rounding: a row whose every mask term is -inf is 0 in the op (with or
 * without the IsNaN guard; the unguarded chain gives NaN there); a NaN or
 * +-inf score makes the op's row NaN where the guarded chain zeroes the
 * NaN probabilities. Masks of -3.4e38 (finfo.min) stay finite through
 * fp16/bf16 lowering (engine/lowp.c saturates them to the dtype's
 * largest), so their fully masked rows are a softmax of the scores in the
 * op and of the rounded sums in the chain: no NaN on either side.
 *
 * Subgraphs are left as they are; a value a subgraph reads counts as a
 * read of its node, so it is never absorbed. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/graph.h"
#include "engine/half.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "engine/plan.h"

/* The nodes one match marks done: the score chain (at most 9 with both
 * scalings and the K chain), Softmax and the IsNaN guard. */
#define ATTN_CHAIN_MAX 16

typedef struct attn_chain {
    int nodes[ATTN_CHAIN_MAX]; /* marked done */
    int n_nodes;
    int pv;                    /* MatMul(P, V): becomes the Attention node */
    int q, k, v, mask;         /* the Attention's inputs; mask -1: none */
    int kt;                    /* the value MatMul(Q, Kt) read, before scaling */
    int kt_reader;             /* the node reading kt: that MatMul or K's scaling */
    bool k_t;                  /* the node reads kt ([B, H, D, Skv]) as K */
    bool check_at_plan;        /* unknown declared dims: the node's attn_check */
    double scale;
} attn_chain_t;

static int producer(const eng_graph_t *g, int v)
{
    return v >= 0 && g->values[v].kind == ENG_VALUE_NODE ? g->values[v].producer : -1;
}

/* v's shape as declared (a constant's as stored): its rank, -1 when not
 * declared; dims into d. */
static int value_dims(const eng_graph_t *g, int v, eng_dim_t d[ENG_MAX_RANK])
{
    const eng_value_t *val = &g->values[v];
    if (val->kind == ENG_VALUE_CONST) {
        for (int i = 0; i < val->constant.shape.rank; i++)
            d[i] = (eng_dim_t){.value = val->constant.shape.dims[i]};
        return val->constant.shape.rank;
    }
    if (val->rank > 0)
        memcpy(d, val->dims, (size_t)val->rank * sizeof *d);
    return val->rank;
}

static bool dim_one(const eng_dim_t *a)
{
    return a->value == 1;
}

/* Whether c is a float32, float16 or bfloat16 constant (a model exported
 * in half has half scales) of one element and rank <= 4 (so that it
 * broadcasts against a rank-4 value without changing its shape) with a
 * finite value; the value into *f. */
static bool scalar_const(const eng_graph_t *g, int c, double *f)
{
    if (c < 0 || g->values[c].kind != ENG_VALUE_CONST || !g->values[c].constant.data)
        return false;
    const eng_tensor_t *t = &g->values[c].constant;
    if (eng_shape_numel(&t->shape) != 1 || t->shape.rank > 4)
        return false;
    if (t->dtype == ENG_DT_FLOAT)
        *f = *(const float *)t->data;
    else if (t->dtype == ENG_DT_FLOAT16 || t->dtype == ENG_DT_BFLOAT16)
        *f = eng_half_dt_to_float(t->dtype, *(const uint16_t *)t->data);
    else
        return false;
    return isfinite(*f);
}

/* When v is produced by a live Mul (either operand order) or Div (divisor
 * last) by a scalar constant and read by `reader` alone: appends that node
 * to c, multiplies c->scale by the factor and returns the other operand;
 * else returns v. */
static int unscale(const eng_graph_t *g, const bool *done, int v, int reader, attn_chain_t *c)
{
    int p = producer(g, v);
    if (eng_graph_sole_reader(g, v) != reader || c->n_nodes >= ATTN_CHAIN_MAX)
        return v;
    const eng_node_t *n = p >= 0 ? &g->nodes[p] : NULL;
    double f;
    if (eng_graph_live_op(g, done, p, "Div") && n->n_inputs == 2 && n->inputs[0] >= 0 &&
        scalar_const(g, n->inputs[1], &f) && f != 0) {
        c->nodes[c->n_nodes++] = p;
        c->scale /= f;
        return n->inputs[0];
    }
    for (int k = 0; k < 2 && eng_graph_live_op(g, done, p, "Mul") && n->n_inputs == 2; k++)
        if (n->inputs[k] >= 0 && scalar_const(g, n->inputs[1 - k], &f)) {
            c->nodes[c->n_nodes++] = p;
            c->scale *= f;
            return n->inputs[k];
        }
    return v;
}

/* Whether Transpose node t's perm is exactly `want` (n entries). */
static bool perm_is(const eng_node_t *t, const int64_t *want, size_t n)
{
    size_t n_perm;
    const int64_t *perm = eng_attr_ints(t, "perm", &n_perm);
    return perm && n_perm == n && memcmp(perm, want, n * sizeof *perm) == 0;
}

/* K [B, H, Skv, D] when kt (read by `reader` alone) is provably its
 * transpose (see the file comment), appending the chain's nodes to c;
 * else -1. */
static int untranspose(const eng_graph_t *g, const bool *done, int kt, int reader,
                       attn_chain_t *c)
{
    int t = producer(g, kt);
    if (eng_graph_sole_reader(g, kt) != reader || c->n_nodes + 3 > ATTN_CHAIN_MAX)
        return -1;
    const eng_node_t *tn = t >= 0 ? &g->nodes[t] : NULL;
    if (eng_graph_live_op(g, done, t, "Transpose") && tn->n_inputs == 1 && tn->inputs[0] >= 0 &&
        perm_is(tn, (const int64_t[]){0, 1, 3, 2}, 4)) {
        c->nodes[c->n_nodes++] = t;
        return tn->inputs[0];
    }
    /* Reshape(Transpose(Reshape(K, [B*H, S, D]), (0, 2, 1)), [B, H, D, S]) */
    const int r2 = t;
    if (!eng_graph_live_op(g, done, r2, "Reshape") || g->nodes[r2].n_inputs < 1)
        return -1;
    const int tv = g->nodes[r2].inputs[0], tr = producer(g, tv);
    if (eng_graph_sole_reader(g, tv) != r2 || !eng_graph_live_op(g, done, tr, "Transpose") ||
        g->nodes[tr].n_inputs != 1 || !perm_is(&g->nodes[tr], (const int64_t[]){0, 2, 1}, 3))
        return -1;
    const int r1v = g->nodes[tr].inputs[0], r1 = producer(g, r1v);
    if (eng_graph_sole_reader(g, r1v) != tr || !eng_graph_live_op(g, done, r1, "Reshape") ||
        g->nodes[r1].n_inputs < 1 || g->nodes[r1].inputs[0] < 0)
        return -1;
    const int k = g->nodes[r1].inputs[0];
    eng_dim_t kd[ENG_MAX_RANK], fd[ENG_MAX_RANK], ktd[ENG_MAX_RANK];
    if (value_dims(g, k, kd) != 4 || value_dims(g, r1v, fd) != 3 || value_dims(g, kt, ktd) != 4)
        return -1;
    if (!eng_dim_same(&fd[1], &kd[2]) || !eng_dim_same(&fd[2], &kd[3]) || !eng_dim_same(&ktd[0], &kd[0]) ||
        !eng_dim_same(&ktd[1], &kd[1]) || !eng_dim_same(&ktd[2], &kd[3]) || !eng_dim_same(&ktd[3], &kd[2]))
        return -1;
    c->nodes[c->n_nodes++] = r2;
    c->nodes[c->n_nodes++] = tr;
    c->nodes[c->n_nodes++] = r1;
    return k;
}

/* Whether v (read by `reader` alone) is [scale] MatMul([scale] Q, [scale]
 * Kt); fills c's q, kt and scale and appends the nodes. */
static bool scores_match(const eng_graph_t *g, const bool *done, int v, int reader,
                         attn_chain_t *c)
{
    int s = unscale(g, done, v, reader, c);
    int mm = producer(g, s);
    if (!eng_graph_live_op(g, done, mm, "MatMul") || g->nodes[mm].trans_b ||
        g->nodes[mm].n_inputs != 2 || eng_graph_sole_reader(g, s) != (s == v ? reader : c->nodes[c->n_nodes - 1]))
        return false;
    const int *in = g->nodes[mm].inputs;
    if (in[0] < 0 || in[1] < 0 || in[0] == in[1])
        return false;
    c->nodes[c->n_nodes++] = mm;
    c->q = unscale(g, done, in[0], mm, c);
    int n_before = c->n_nodes;
    c->kt = unscale(g, done, in[1], mm, c);
    c->kt_reader = c->n_nodes > n_before ? c->nodes[c->n_nodes - 1] : mm;
    return c->n_nodes <= ATTN_CHAIN_MAX;
}

/* The readers of P: MatMul(P, V) alone, or IsNaN(P) and Where(IsNaN(P),
 * 0, P) whose output MatMul(., V) reads alone. Sets c->pv and c->v and
 * appends the guard's nodes. */
static bool tail_match(const eng_graph_t *g, const bool *done, int p, attn_chain_t *c)
{
    const eng_value_t *pv = &g->values[p];
    int isnan_n = -1, where_n = -1, mm = -1, pin = p;
    if (pv->is_output || pv->kind != ENG_VALUE_NODE)
        return false;
    if (pv->n_consumers == 1) {
        mm = eng_graph_sole_reader(g, p);
    } else if (pv->n_consumers == 2) {
        for (size_t i = 0; i < g->n_nodes; i++)
            for (int k = 0; k < g->nodes[i].n_inputs; k++)
                if (g->nodes[i].inputs[k] == p) {
                    if (eng_graph_live_op(g, done, (int)i, "IsNaN") && isnan_n < 0)
                        isnan_n = (int)i;
                    else if (eng_graph_live_op(g, done, (int)i, "Where") && where_n < 0)
                        where_n = (int)i;
                    else
                        return false;
                }
        if (isnan_n < 0 || where_n < 0 || g->nodes[isnan_n].n_inputs != 1)
            return false;
        const eng_node_t *w = &g->nodes[where_n];
        double zero;
        int nan_v = g->nodes[isnan_n].outputs[0];
        if (w->n_inputs != 3 || w->inputs[0] != nan_v || w->inputs[2] != p ||
            eng_graph_sole_reader(g, nan_v) != where_n || !scalar_const(g, w->inputs[1], &zero) || zero != 0)
            return false;
        pin = w->outputs[0];
        mm = eng_graph_sole_reader(g, pin);
        c->nodes[c->n_nodes++] = isnan_n;
        c->nodes[c->n_nodes++] = where_n;
    }
    if (!eng_graph_live_op(g, done, mm, "MatMul") || g->nodes[mm].trans_b || g->nodes[mm].n_inputs != 2 ||
        g->nodes[mm].inputs[0] != pin || g->nodes[mm].inputs[1] < 0 ||
        g->nodes[mm].inputs[1] == pin)
        return false;
    c->pv = mm;
    c->v = g->nodes[mm].inputs[1];
    return true;
}

/* Whether two declared dims are provably different: both known and
 * unequal (a symbol may take any value). */
static bool dim_ne(const eng_dim_t *a, const eng_dim_t *b)
{
    return a->value >= 0 && b->value >= 0 && a->value != b->value;
}

/* The shape proof of the file comment: PROOF_YES when the declared shapes
 * prove it, PROOF_AT_PLAN when they are of the right ranks and contradict
 * nothing but leave a needed equality unknown (the node's attn_check then
 * has the op check it), PROOF_NO otherwise. */
typedef enum { PROOF_NO, PROOF_YES, PROOF_AT_PLAN } proof_t;

/* Needs a == b: *ok cleared when they provably differ, *proven when their
 * equality is left to the plan. */
static void need_eq(const eng_dim_t *a, const eng_dim_t *b, bool *ok, bool *proven)
{
    if (eng_dim_same(a, b))
        return;
    if (dim_ne(a, b))
        *ok = false;
    else
        *proven = false;
}

static proof_t shapes_proven(const eng_graph_t *g, const attn_chain_t *c)
{
    eng_dim_t qd[ENG_MAX_RANK], kd[ENG_MAX_RANK], vd[ENG_MAX_RANK], md[ENG_MAX_RANK];
    if (value_dims(g, c->q, qd) != 4 || value_dims(g, c->kt, kd) != 4 ||
        value_dims(g, c->v, vd) != 4)
        return PROOF_NO;
    bool proven = true, ok = true;
    need_eq(&kd[0], &qd[0], &ok, &proven);
    need_eq(&vd[0], &qd[0], &ok, &proven);
    if (!(eng_dim_same(&kd[1], &qd[1]) && eng_dim_same(&vd[1], &qd[1])) &&
        !(dim_one(&kd[1]) && dim_one(&vd[1]))) {
        /* Heads: Q's, or one for K and V alike (the plan checks K's). */
        if ((dim_ne(&kd[1], &qd[1]) && !dim_one(&kd[1])) ||
            (dim_ne(&vd[1], &qd[1]) && !dim_one(&vd[1])))
            return PROOF_NO;
        proven = false;
    }
    if (ok && c->mask >= 0) {
        int mr = value_dims(g, c->mask, md);
        /* The scores' dims: B, H, Sq, Skv (Kt's last). */
        const eng_dim_t *target[4] = {&qd[0], &qd[1], &qd[2], &kd[3]};
        if (mr < 1 || mr > 4)
            return PROOF_NO;
        need_eq(&md[mr - 1], target[3], &ok, &proven);
        for (int d = 0; d < mr - 1; d++)
            if (!dim_one(&md[d]))
                need_eq(&md[d], target[4 - mr + d], &ok, &proven);
    }
    if (!ok)
        return PROOF_NO;
    return proven ? PROOF_YES : PROOF_AT_PLAN;
}

/* Whether the attention through Softmax node `sm` may be rewritten; fills
 * *c when so. Cannot fail. */
static bool attn_match(const eng_graph_t *g, const bool *done, int sm, attn_chain_t *c)
{
    if (!eng_graph_live_op(g, done, sm, "Softmax") || g->nodes[sm].n_inputs != 1)
        return false;
    int64_t axis = eng_attr_i(&g->nodes[sm], "axis", g->opset < 13 ? 1 : -1);
    if (axis != -1 && axis != 3)
        return false;
    *c = (attn_chain_t){.nodes = {sm}, .n_nodes = 1, .mask = -1, .scale = 1.0};
    const int x = g->nodes[sm].inputs[0], add = producer(g, x);
    if (x < 0 || eng_graph_sole_reader(g, x) != sm)
        return false;
    bool scores = false;
    if (eng_graph_live_op(g, done, add, "Add") && g->nodes[add].n_inputs == 2) {
        c->nodes[c->n_nodes++] = add;
        for (int k = 0; k < 2 && !scores; k++) {
            const int a = g->nodes[add].inputs[k], m = g->nodes[add].inputs[1 - k];
            attn_chain_t keep = *c;
            scores = a >= 0 && m >= 0 && a != m && scores_match(g, done, a, add, c);
            if (scores)
                c->mask = m;
            else
                *c = keep;
        }
    } else {
        scores = scores_match(g, done, x, sm, c);
    }
    if (!scores || !tail_match(g, done, g->nodes[sm].outputs[0], c))
        return false;
    proof_t proof = shapes_proven(g, c);
    if (proof == PROOF_NO)
        return false;
    c->check_at_plan = proof == PROOF_AT_PLAN;
    const float scale = (float)c->scale;
    if (!isfinite(scale) || scale == 0)
        return false;
    c->k = untranspose(g, done, c->kt, c->kt_reader, c);
    if (c->k < 0)
        c->k = c->kt;
    return true;
}

/* Rewrites c's MatMul(P, V) into the Attention node and marks the rest
 * done. 0, or FS_ENOMEM with the graph as it was. */
static int attn_apply(eng_graph_t *g, bool *done, const attn_chain_t *c,
                      const eng_op_def_t *attention)
{
    eng_node_t *n = &g->nodes[c->pv];
    const int n_in = c->mask >= 0 ? 4 : 3;
    int *ins = onnx_pool_alloc(g->pool, (size_t)n_in * sizeof *ins);
    eng_attr_t *attr = onnx_pool_alloc(g->pool, sizeof *attr);
    if (!ins || !attr)
        return fs_err(FS_ENOMEM, "out of memory fusing the attention of MatMul '%s'", n->name);
    ins[0] = c->q;
    ins[1] = c->k;
    ins[2] = c->v;
    if (c->mask >= 0)
        ins[3] = c->mask;
    *attr = (eng_attr_t){.name = "scale", .type = ENG_ATTR_FLOAT, .f = (float)c->scale};
    for (int k = 0; k < n->n_inputs; k++)
        g->values[n->inputs[k]].n_consumers--;
    for (int k = 0; k < n_in; k++)
        g->values[ins[k]].n_consumers++;
    for (int i = 0; i < c->n_nodes; i++) {
        done[c->nodes[i]] = true;
        g->values[g->nodes[c->nodes[i]].outputs[0]].producer = -1;
    }
    n->op_type = eng_op_type(attention->id);
    n->op = attention;
    n->inputs = ins;
    n->n_inputs = n_in;
    n->attrs = attr;
    n->n_attrs = 1;
    n->trans_b = c->k == c->kt;
    n->attn_check = c->check_at_plan;
    return 0;
}

int eng_fuse_attention(eng_graph_t *g, bool *done)
{
    const eng_op_def_t *attention = eng_op_find("Attention");
    if (!attention)
        return 0;
    attn_chain_t c;
    int rc = 0, fused = 0, left = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        if (attn_match(g, done, (int)i, &c)) {
            rc = attn_apply(g, done, &c, attention);
            fused += rc == 0;
        } else {
            left += eng_graph_live_op(g, done, (int)i, "Softmax");
        }
    }
    if (fused || left)
        FS_LOG_I("engine", "attention: %d chains fused into Attention nodes, %d Softmax left as "
                 "they were", fused, left);
    return rc;
}
