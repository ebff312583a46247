/* attention.c -- definitions (validation, dtype and shape inference) of the
 * transformer-block ops: Attention (opsets 23 to 25), RotaryEmbedding (23)
 * and SwiGLU (28); their geometry is attention_impl.h's. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/attention_impl.h"

/* The dtypes these ops compute (internally in double on the CPU). */
static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                       ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int64[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};

#define SHAPE_BUF 96

/* --- Attention ----------------------------------------------------------------------------- */

static int attention_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    int64_t causal = eng_attr_i(n, "is_causal", 0), mode = eng_attr_i(n, "qk_matmul_output_mode", 0);
    if (causal != 0 && causal != 1)
        return eng_op_err(&c, FS_EINVAL, "is_causal is %lld, must be 0 or 1", (long long)causal);
    if (mode < 0 || mode > 3)
        return eng_op_err(&c, FS_EINVAL, "qk_matmul_output_mode is %lld, must be 0 to 3",
                          (long long)mode);
    /* The softmax runs in double on every device: at least the precision
     * any of these asks for. */
    if (eng_node_attr(n, "softmax_precision")) {
        int64_t p = eng_attr_i(n, "softmax_precision", ENG_DT_FLOAT);
        if (p != ENG_DT_FLOAT && p != ENG_DT_DOUBLE && p != ENG_DT_FLOAT16 &&
            p != ENG_DT_BFLOAT16)
            return eng_op_err(&c, FS_EINVAL, "softmax_precision is %lld, must be a float dtype "
                              "(1, 10, 11 or 16)", (long long)p);
    }
    static const char *const heads[] = {"q_num_heads", "kv_num_heads"};
    for (int i = 0; i < 2; i++)
        if (eng_node_attr(n, heads[i]) && eng_attr_i(n, heads[i], 0) < 1)
            return eng_op_err(&c, FS_EINVAL, "%s is %lld, must be positive", heads[i],
                              (long long)eng_attr_i(n, heads[i], 0));
    static const char *const windows[] = {"left_window_size", "right_window_size"};
    for (int i = 0; i < 2 && opset >= 25; i++)
        if (eng_attr_i(n, windows[i], -1) < -1)
            return eng_op_err(&c, FS_EINVAL, "%s is %lld, must be -1 or more", windows[i],
                              (long long)eng_attr_i(n, windows[i], -1));
    return 0;
}

/* Head counts and sizes of a 3-D input [B, S, heads * size]: *size, or
 * FS_EINVAL naming the input. */
static int split_heads(const eng_op_ctx_t *c, const char *name, const eng_tensor_t *t,
                       int64_t heads, int64_t *size)
{
    char s[SHAPE_BUF];
    if (heads < 1 || t->shape.dims[2] % heads != 0)
        return eng_op_err(c, FS_EINVAL, "%s %s: its last dim is not a multiple of %lld heads",
                          name, eng_shape_format(&t->shape, s, sizeof s), (long long)heads);
    *size = t->shape.dims[2] / heads;
    return 0;
}

/* The Q/K/V geometry of *a (heads, lengths, head sizes, row strides). */
static int attention_qkv(const eng_op_ctx_t *c, eng_attention_t *a)
{
    const eng_tensor_t *q = c->inputs[ENG_ATTN_Q], *k = c->inputs[ENG_ATTN_K],
                       *v = c->inputs[ENG_ATTN_V];
    char qs[SHAPE_BUF], ks[SHAPE_BUF], vs[SHAPE_BUF];
    eng_shape_format(&q->shape, qs, sizeof qs);
    eng_shape_format(&k->shape, ks, sizeof ks);
    eng_shape_format(&v->shape, vs, sizeof vs);
    int r = q->shape.rank;
    if ((r != 3 && r != 4) || k->shape.rank != r || v->shape.rank != r)
        return eng_op_err(c, FS_EINVAL, "Q %s, K %s and V %s must all be 3-D or all 4-D", qs,
                          ks, vs);
    a->in3d = r == 3;
    a->k_t = c->node && c->node->trans_b;
    a->k_dstride = 1;
    if (a->k_t && a->in3d)
        return eng_op_err(c, FS_EINVAL, "K %s is stored transposed, which needs 4-D inputs", ks);
    a->batch = q->shape.dims[0];
    if (k->shape.dims[0] != a->batch || v->shape.dims[0] != a->batch)
        return eng_op_err(c, FS_EINVAL, "Q %s, K %s and V %s differ in batch size", qs, ks, vs);
    const eng_node_t *n = c->node;
    bool named = eng_node_attr(n, "q_num_heads") || eng_node_attr(n, "kv_num_heads");
    int rc;
    if (a->in3d) {
        if (!eng_node_attr(n, "q_num_heads") || !eng_node_attr(n, "kv_num_heads"))
            return eng_op_err(c, FS_EINVAL, "3-D Q %s needs the q_num_heads and kv_num_heads "
                              "attributes", qs);
        a->q_heads = eng_attr_i(n, "q_num_heads", 0);
        a->kv_heads = eng_attr_i(n, "kv_num_heads", 0);
        int64_t kh = 0;
        if ((rc = split_heads(c, "Q", q, a->q_heads, &a->head)) ||
            (rc = split_heads(c, "K", k, a->kv_heads, &kh)) ||
            (rc = split_heads(c, "V", v, a->kv_heads, &a->v_head)))
            return rc;
        if (kh != a->head)
            return eng_op_err(c, FS_EINVAL, "K %s has head size %lld, Q %s %lld", ks,
                              (long long)kh, qs, (long long)a->head);
        a->q_len = q->shape.dims[1];
        a->kv_len = k->shape.dims[1];
        if (v->shape.dims[1] != a->kv_len)
            return eng_op_err(c, FS_EINVAL, "K %s and V %s differ in sequence length", ks, vs);
        int64_t qh = a->q_heads * a->head, kvh = a->kv_heads * a->head,
                vh = a->kv_heads * a->v_head;
        int64_t yh = a->q_heads * a->v_head;
        memcpy(a->q_stride, (int64_t[3]){a->q_len * qh, a->head, qh}, sizeof a->q_stride);
        memcpy(a->k_stride, (int64_t[3]){a->kv_len * kvh, a->head, kvh}, sizeof a->k_stride);
        memcpy(a->v_stride, (int64_t[3]){a->kv_len * vh, a->v_head, vh}, sizeof a->v_stride);
        memcpy(a->y_stride, (int64_t[3]){a->q_len * yh, a->v_head, yh}, sizeof a->y_stride);
        a->y = (eng_shape_t){.rank = 3, .dims = {a->batch, a->q_len, yh}};
        return 0;
    }
    if (named && c->opset >= 25)
        return eng_op_err(c, FS_EINVAL, "q_num_heads and kv_num_heads must not be given for "
                          "4-D inputs (Q %s)", qs);
    /* K transposed (trans_b): [B, kv_heads, head, kv_len]. */
    const int k_len = a->k_t ? 3 : 2, k_size = a->k_t ? 2 : 3;
    a->q_heads = q->shape.dims[1];
    a->kv_heads = k->shape.dims[1];
    a->q_len = q->shape.dims[2];
    a->kv_len = k->shape.dims[k_len];
    a->head = q->shape.dims[3];
    a->v_head = v->shape.dims[3];
    if (eng_attr_i(n, "q_num_heads", a->q_heads) != a->q_heads ||
        eng_attr_i(n, "kv_num_heads", a->kv_heads) != a->kv_heads)
        return eng_op_err(c, FS_EINVAL, "q_num_heads %lld and kv_num_heads %lld disagree with "
                          "Q %s and K %s", (long long)eng_attr_i(n, "q_num_heads", a->q_heads),
                          (long long)eng_attr_i(n, "kv_num_heads", a->kv_heads), qs, ks);
    if (k->shape.dims[k_size] != a->head)
        return eng_op_err(c, FS_EINVAL, "Q %s and K %s%s differ in head size", qs, ks,
                          a->k_t ? " (stored transposed)" : "");
    if (v->shape.dims[1] != a->kv_heads || v->shape.dims[2] != a->kv_len)
        return eng_op_err(c, FS_EINVAL, "K %s and V %s differ in heads or sequence length", ks,
                          vs);
    /* A chain fused without a load-time proof (graph.h attn_check): its
     * MatMul broadcast one K head over Q's, never grouped them. */
    if (n && n->attn_check && a->kv_heads != a->q_heads && a->kv_heads != 1)
        return eng_op_err(c, FS_EINVAL, "the attention fused from MatMul-Softmax-MatMul has Q "
                          "%s and K %s: %lld K heads for %lld Q heads, which the MatMul would "
                          "not broadcast", qs, ks, (long long)a->kv_heads, (long long)a->q_heads);
    memcpy(a->q_stride, (int64_t[3]){a->q_heads * a->q_len * a->head, a->q_len * a->head, a->head},
           sizeof a->q_stride);
    memcpy(a->k_stride,
           (int64_t[3]){a->kv_heads * a->kv_len * a->head, a->kv_len * a->head,
                        a->k_t ? 1 : a->head},
           sizeof a->k_stride);
    if (a->k_t)
        a->k_dstride = a->kv_len;
    memcpy(a->v_stride,
           (int64_t[3]){a->kv_heads * a->kv_len * a->v_head, a->kv_len * a->v_head, a->v_head},
           sizeof a->v_stride);
    memcpy(a->y_stride,
           (int64_t[3]){a->q_heads * a->q_len * a->v_head, a->q_len * a->v_head, a->v_head},
           sizeof a->y_stride);
    a->y = (eng_shape_t){.rank = 4, .dims = {a->batch, a->q_heads, a->q_len, a->v_head}};
    return 0;
}

/* past_key [B, kv_heads, P, head] and past_value [B, kv_heads, P, v_head],
 * both or neither; sets has_past, past_len and total_len. */
static int attention_past(const eng_op_ctx_t *c, eng_attention_t *a)
{
    const eng_tensor_t *pk = eng_ctx_in(c, ENG_ATTN_PAST_KEY),
                       *pv = eng_ctx_in(c, ENG_ATTN_PAST_VALUE);
    a->has_past = pk != NULL;
    a->past_len = 0;
    if (pk && a->k_t)
        return eng_op_err(c, FS_EINVAL, "K is stored transposed, which takes no past_key");
    if (pk && pv) {
        char ks[SHAPE_BUF], vs[SHAPE_BUF];
        eng_shape_format(&pk->shape, ks, sizeof ks);
        eng_shape_format(&pv->shape, vs, sizeof vs);
        a->past_len = pk->shape.rank == 4 ? pk->shape.dims[2] : -1;
        const int64_t want_k[4] = {a->batch, a->kv_heads, a->past_len, a->head};
        const int64_t want_v[4] = {a->batch, a->kv_heads, a->past_len, a->v_head};
        bool ok = pk->shape.rank == 4 && pv->shape.rank == 4;
        for (int d = 0; ok && d < 4; d++)
            ok = pk->shape.dims[d] == want_k[d] && pv->shape.dims[d] == want_v[d];
        if (!ok)
            return eng_op_err(c, FS_EINVAL, "past_key %s and past_value %s must be [%lld, %lld, "
                              "P, %lld] and [%lld, %lld, P, %lld] (batch, kv heads, past "
                              "length, head size)", ks, vs, (long long)a->batch,
                              (long long)a->kv_heads, (long long)a->head, (long long)a->batch,
                              (long long)a->kv_heads, (long long)a->v_head);
    } else if (pk || pv) {
        return eng_op_err(c, FS_EINVAL, "past_key and past_value must be given together");
    }
    a->total_len = a->past_len + a->kv_len;
    return 0;
}

/* attn_mask: bool or Q's dtype, its dims broadcasting right-aligned to
 * [B, q_heads, q_len, L] with L (its last dim, never broadcast: keys past
 * it are masked) at most total_len. */
static int attention_mask(const eng_op_ctx_t *c, eng_attention_t *a)
{
    const eng_tensor_t *m = eng_ctx_in(c, ENG_ATTN_MASK);
    a->mask = ENG_ATTN_MASK_NONE;
    a->mask_len = 0;
    memset(a->mask_stride, 0, sizeof a->mask_stride);
    if (!m)
        return 0;
    char ms[SHAPE_BUF];
    eng_shape_format(&m->shape, ms, sizeof ms);
    if (m->dtype == ENG_DT_BOOL)
        a->mask = ENG_ATTN_MASK_BOOL;
    else if (m->dtype == c->inputs[ENG_ATTN_Q]->dtype)
        a->mask = ENG_ATTN_MASK_ADD;
    else
        return eng_op_err(c, FS_ENOTSUP, "attn_mask %s is %s: a mask must be bool or Q's dtype "
                          "(%s)", ms, eng_dtype_name(m->dtype),
                          eng_dtype_name(c->inputs[ENG_ATTN_Q]->dtype));
    int r = m->shape.rank;
    if (r < 1 || r > 4)
        return eng_op_err(c, FS_EINVAL, "attn_mask %s must have rank 1 to 4", ms);
    a->mask_len = m->shape.dims[r - 1];
    if (c->node && c->node->attn_check && a->mask_len != a->total_len)
        return eng_op_err(c, FS_EINVAL, "the attention fused from MatMul-Softmax-MatMul has "
                          "mask %s for %lld keys: the Add it replaced broadcast a mask whose "
                          "last dim is not the keys' count differently", ms,
                          (long long)a->total_len);
    if (a->mask_len > a->total_len)
        return eng_op_err(c, FS_EINVAL, "attn_mask %s covers %lld keys, more than the %lld of "
                          "past and present", ms, (long long)a->mask_len,
                          (long long)a->total_len);
    const int64_t target[3] = {a->batch, a->q_heads, a->q_len};
    int64_t stride = a->mask_len;
    for (int t = 2; t >= 0; t--) {
        int d = r - 4 + t; /* the mask dim aligned with target t */
        int64_t dim = d >= 0 ? m->shape.dims[d] : 1;
        if (dim != 1 && dim != target[t])
            return eng_op_err(c, FS_EINVAL, "attn_mask %s does not broadcast to [%lld, %lld, "
                              "%lld, %lld] (batch, q heads, q length, keys)", ms,
                              (long long)a->batch, (long long)a->q_heads, (long long)a->q_len,
                              (long long)a->total_len);
        a->mask_stride[t] = dim == 1 ? 0 : stride;
        stride *= dim;
    }
    return 0;
}

int eng_attention_params(const eng_op_ctx_t *c, eng_attention_t *a)
{
    memset(a, 0, sizeof *a);
    int rc;
    for (int i = ENG_ATTN_Q; i <= ENG_ATTN_PAST_VALUE; i++) {
        const eng_tensor_t *t = eng_ctx_in(c, i);
        if (i == ENG_ATTN_MASK || !t)
            continue;
        if ((rc = eng_op_require_dtype(c, i, dt_float)))
            return rc;
        if (t->dtype != c->inputs[ENG_ATTN_Q]->dtype)
            return eng_op_err(c, FS_ENOTSUP, "input %d is %s, Q %s: Q, K, V and the past must "
                              "share one dtype", i, eng_dtype_name(t->dtype),
                              eng_dtype_name(c->inputs[ENG_ATTN_Q]->dtype));
    }
    if ((rc = attention_qkv(c, a)) || (rc = attention_past(c, a)) ||
        (rc = attention_mask(c, a)))
        return rc;
    if (a->q_heads % a->kv_heads != 0)
        return eng_op_err(c, FS_EINVAL, "%lld query heads are not a multiple of %lld key/value "
                          "heads", (long long)a->q_heads, (long long)a->kv_heads);
    a->group = a->q_heads / a->kv_heads;
    const eng_tensor_t *np = eng_ctx_in(c, ENG_ATTN_NONPAD);
    a->has_nonpad = np != NULL;
    if (np) {
        char ns[SHAPE_BUF];
        eng_shape_format(&np->shape, ns, sizeof ns);
        if ((rc = eng_op_require_dtype(c, ENG_ATTN_NONPAD, dt_int64)))
            return rc;
        if (np->shape.rank != 1 || np->shape.dims[0] != a->batch)
            return eng_op_err(c, FS_EINVAL, "nonpad_kv_seqlen %s must be [%lld] (one length per "
                              "batch)", ns, (long long)a->batch);
        if (a->has_past)
            return eng_op_err(c, FS_EINVAL, "nonpad_kv_seqlen cannot be combined with "
                              "past_key/past_value");
    }
    const eng_node_t *n = c->node;
    a->scale = eng_node_attr(n, "scale") ? (double)eng_attr_f(n, "scale", 1.0f)
               : a->head > 0           ? 1.0 / sqrt((double)a->head)
                                       : 1.0;
    a->softcap = eng_attr_f(n, "softcap", 0.0f);
    a->causal = eng_attr_i(n, "is_causal", 0) != 0;
    a->mode = (int)eng_attr_i(n, "qk_matmul_output_mode", 0);
    a->left_window = c->opset >= 25 ? eng_attr_i(n, "left_window_size", -1) : -1;
    a->right_window = c->opset >= 25 ? eng_attr_i(n, "right_window_size", -1) : -1;
    a->present_key =
        (eng_shape_t){.rank = 4, .dims = {a->batch, a->kv_heads, a->total_len, a->head}};
    a->present_value =
        (eng_shape_t){.rank = 4, .dims = {a->batch, a->kv_heads, a->total_len, a->v_head}};
    a->qk = (eng_shape_t){.rank = 4, .dims = {a->batch, a->q_heads, a->q_len, a->total_len}};
    return 0;
}

static int attention_infer(eng_op_ctx_t *c)
{
    eng_attention_t a;
    int rc = eng_attention_params(c, &a);
    if (rc)
        return rc;
    eng_dtype_t dt = c->inputs[ENG_ATTN_Q]->dtype;
    eng_ctx_out_set(c, ENG_ATTN_Y, dt, &a.y);
    eng_ctx_out_set(c, ENG_ATTN_PRESENT_KEY, dt, &a.present_key);
    eng_ctx_out_set(c, ENG_ATTN_PRESENT_VALUE, dt, &a.present_value);
    eng_ctx_out_set(c, ENG_ATTN_QK, dt, &a.qk);
    return 0;
}

/* --- RotaryEmbedding ----------------------------------------------------------------------- */

static int rotary_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    int64_t il = eng_attr_i(n, "interleaved", 0), rot = eng_attr_i(n, "rotary_embedding_dim", 0);
    if (il != 0 && il != 1)
        return eng_op_err(&c, FS_EINVAL, "interleaved is %lld, must be 0 or 1", (long long)il);
    if (rot < 0 || rot % 2 != 0)
        return eng_op_err(&c, FS_EINVAL, "rotary_embedding_dim is %lld, must be even and 0 or "
                          "more", (long long)rot);
    if (eng_node_attr(n, "num_heads") && eng_attr_i(n, "num_heads", 0) < 1)
        return eng_op_err(&c, FS_EINVAL, "num_heads is %lld, must be positive",
                          (long long)eng_attr_i(n, "num_heads", 0));
    return 0;
}

int eng_rotary_params(const eng_op_ctx_t *c, eng_rotary_t *r)
{
    memset(r, 0, sizeof *r);
    const eng_tensor_t *x = c->inputs[0], *cs = c->inputs[1], *sn = c->inputs[2],
                       *ids = eng_ctx_in(c, 3);
    int rc;
    for (int i = 0; i < 3; i++)
        if ((rc = eng_op_require_dtype(c, i, dt_float)))
            return rc;
    if (cs->dtype != x->dtype || sn->dtype != x->dtype)
        return eng_op_err(c, FS_ENOTSUP, "cos_cache (%s) and sin_cache (%s) must have X's "
                          "dtype (%s)", eng_dtype_name(cs->dtype), eng_dtype_name(sn->dtype),
                          eng_dtype_name(x->dtype));
    char xs[SHAPE_BUF], cb[SHAPE_BUF], sb[SHAPE_BUF];
    eng_shape_format(&x->shape, xs, sizeof xs);
    eng_shape_format(&cs->shape, cb, sizeof cb);
    eng_shape_format(&sn->shape, sb, sizeof sb);
    const eng_node_t *n = c->node;
    r->batch = x->shape.dims[0];
    if (x->shape.rank == 4) {
        r->heads = x->shape.dims[1];
        r->seq = x->shape.dims[2];
        r->head = x->shape.dims[3];
        if (eng_attr_i(n, "num_heads", r->heads) != r->heads)
            return eng_op_err(c, FS_EINVAL, "num_heads %lld disagrees with X %s (batch, heads, "
                              "sequence, head size)", (long long)eng_attr_i(n, "num_heads", 0),
                              xs);
        memcpy(r->x_stride, (int64_t[3]){r->heads * r->seq * r->head, r->seq * r->head, r->head},
               sizeof r->x_stride);
    } else if (x->shape.rank == 3) {
        r->heads = eng_attr_i(n, "num_heads", 0);
        if (r->heads < 1)
            return eng_op_err(c, FS_EINVAL, "3-D X %s needs the num_heads attribute", xs);
        if (x->shape.dims[2] % r->heads != 0)
            return eng_op_err(c, FS_EINVAL, "X %s: hidden size is not a multiple of num_heads "
                              "%lld", xs, (long long)r->heads);
        r->seq = x->shape.dims[1];
        r->head = x->shape.dims[2] / r->heads;
        memcpy(r->x_stride, (int64_t[3]){r->seq * x->shape.dims[2], r->head, x->shape.dims[2]},
               sizeof r->x_stride);
    } else {
        return eng_op_err(c, FS_EINVAL, "X %s must be 3-D or 4-D", xs);
    }
    r->rot = eng_attr_i(n, "rotary_embedding_dim", 0);
    if (r->rot == 0)
        r->rot = r->head;
    if (r->rot > r->head || r->rot % 2 != 0)
        return eng_op_err(c, FS_EINVAL, "rotary_embedding_dim %lld must be even and at most the "
                          "head size %lld (X %s)", (long long)r->rot, (long long)r->head, xs);
    r->interleaved = eng_attr_i(n, "interleaved", 0) != 0;
    r->has_ids = ids != NULL;
    if (!eng_shape_equal(&cs->shape, &sn->shape))
        return eng_op_err(c, FS_EINVAL, "cos_cache %s and sin_cache %s differ", cb, sb);
    int64_t half = r->rot / 2;
    if (ids) {
        char is[SHAPE_BUF];
        eng_shape_format(&ids->shape, is, sizeof is);
        if ((rc = eng_op_require_dtype(c, 3, dt_int64)))
            return rc;
        if (ids->shape.rank != 2 || ids->shape.dims[0] != r->batch ||
            ids->shape.dims[1] != r->seq)
            return eng_op_err(c, FS_EINVAL, "position_ids %s must be [%lld, %lld] (batch, "
                              "sequence) for X %s", is, (long long)r->batch, (long long)r->seq,
                              xs);
        if (cs->shape.rank != 2 || cs->shape.dims[1] != half)
            return eng_op_err(c, FS_EINVAL, "cos_cache %s must be [max_position, %lld] with "
                              "position_ids", cb, (long long)half);
        r->max_pos = cs->shape.dims[0];
    } else if (cs->shape.rank != 3 || cs->shape.dims[0] != r->batch ||
               cs->shape.dims[1] != r->seq || cs->shape.dims[2] != half) {
        return eng_op_err(c, FS_EINVAL, "cos_cache %s must be [%lld, %lld, %lld] (batch, "
                          "sequence, rotary_embedding_dim / 2) without position_ids", cb,
                          (long long)r->batch, (long long)r->seq, (long long)half);
    }
    return 0;
}

static int rotary_infer(eng_op_ctx_t *c)
{
    eng_rotary_t r;
    int rc = eng_rotary_params(c, &r);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &c->inputs[0]->shape);
    return 0;
}

/* --- SwiGLU -------------------------------------------------------------------------------- */

static int swiglu_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    int rc;
    if ((rc = eng_op_require_dtype(c, 0, dt_float)) || (rc = eng_op_require_dtype(c, 1, dt_float)))
        return rc;
    char as[SHAPE_BUF], bs[SHAPE_BUF];
    if (a->dtype != b->dtype || !eng_shape_equal(&a->shape, &b->shape))
        return eng_op_err(c, FS_EINVAL, "A %s %s and B %s %s must have one dtype and shape (no "
                          "broadcasting)", eng_dtype_name(a->dtype),
                          eng_shape_format(&a->shape, as, sizeof as), eng_dtype_name(b->dtype),
                          eng_shape_format(&b->shape, bs, sizeof bs));
    eng_ctx_out_set(c, 0, a->dtype, &a->shape);
    return 0;
}

ENG_OP_DEF(Attention, attention_check, attention_infer, -1);
/* Each element (RotaryEmbedding: each rotated pair) is read before it is
 * written: Y may take the first input's buffer. */
ENG_OP_DEF(RotaryEmbedding, rotary_check, rotary_infer, 0);
ENG_OP_DEF(SwiGLU, NULL, swiglu_infer, 0);
