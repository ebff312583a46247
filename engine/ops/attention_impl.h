/* attention_impl.h -- the geometry that the transformer-block op definitions
 * (engine/ops/attention.c: Attention, RotaryEmbedding, SwiGLU) and every
 * device's kernels share, so that inference and each kernel read one
 * description of a node.
 *
 * Attention, as ONNX's reference defines it (opsets 23 to 25): per batch b,
 * query head h and query i, over the keys j of the present cache (past_key's
 * rows, then K's),
 *     s_j = scale * q . k_j               (qk_matmul_output mode 0)
 *     c_j = softcap * tanh(s_j / softcap) (softcap != 0; mode 1)
 *     x_j = c_j + bias_j                  (mode 2)
 *     p_j = softmax_j(x)                  (mode 3)
 *     y   = sum_j p_j v_j
 * where query head h reads key/value head h / (q_heads / kv_heads), and
 * bias_j adds the mask's term (a bool mask: 0 where true, -inf where false;
 * a float mask: its value; -inf past the mask's last dim, which may be
 * shorter than the cache) and -inf where the causal frontier, the sliding
 * window or nonpad_kv_seqlen closes key j (eng_attention_open). A row whose
 * every bias_j is -inf (fully masked) gives p = 0 and y = 0, never NaN.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_ATTENTION_IMPL_H
#define FS_ENGINE_OPS_ATTENTION_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attention's inputs and outputs by position. */
enum {
    ENG_ATTN_Q,
    ENG_ATTN_K,
    ENG_ATTN_V,
    ENG_ATTN_MASK,
    ENG_ATTN_PAST_KEY,
    ENG_ATTN_PAST_VALUE,
    ENG_ATTN_NONPAD, /* opset 24 on */
};
enum { ENG_ATTN_Y, ENG_ATTN_PRESENT_KEY, ENG_ATTN_PRESENT_VALUE, ENG_ATTN_QK };

typedef enum eng_attn_mask_kind {
    ENG_ATTN_MASK_NONE,
    ENG_ATTN_MASK_BOOL, /* true: attend */
    ENG_ATTN_MASK_ADD,  /* Q's dtype, added to the scores */
} eng_attn_mask_kind_t;

typedef struct eng_attention {
    int64_t batch, q_heads, kv_heads, group; /* group = q_heads / kv_heads */
    int64_t q_len, kv_len, past_len, total_len; /* total_len = past_len + kv_len */
    int64_t head, v_head;                       /* Q/K's and V's head sizes */
    /* Element strides of a (batch, head, position) row of Q, K, V and Y:
     * 4-D [B, H, S, D] or 3-D [B, S, H * D] (in3d). past_key/past_value,
     * present_key/present_value and qk_matmul_output are always 4-D. */
    bool in3d;
    int64_t q_stride[3], k_stride[3], v_stride[3], y_stride[3];
    /* Element stride between consecutive head elements of a K row: 1, or
     * kv_len when the node reads K transposed (k_t: graph.h's trans_b, K
     * [B, kv_heads, head, kv_len], 4-D and no past only). Q, V, Y and the
     * caches are contiguous along the head. */
    bool k_t;
    int64_t k_dstride;
    double scale;   /* the scale attribute, else 1 / sqrt(head) */
    double softcap; /* 0: none */
    bool causal;
    int64_t left_window, right_window; /* opset 25; -1: unbounded */
    int mode;                          /* qk_matmul_output_mode, 0 to 3 */
    bool has_past, has_nonpad;
    eng_attn_mask_kind_t mask;
    int64_t mask_len;       /* the mask's last dim, 1 to total_len */
    int64_t mask_stride[3]; /* over (batch, q head, query); 0 where broadcast */
    eng_shape_t y, present_key, present_value, qk; /* the outputs' shapes */
} eng_attention_t;

/* Validates the node in c against its inputs' dtypes and shapes and fills
 * *a. 0, or FS_EINVAL (shapes or attributes that do not fit, naming them)
 * or FS_ENOTSUP (a dtype not computed); *a is undefined on error. */
int eng_attention_params(const eng_op_ctx_t *c, eng_attention_t *a);

/* Element offset of row (b, h, pos) for strides s. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_attention_row(const int64_t s[3], int64_t b, int64_t h,
                                                   int64_t pos)
{
    return b * s[0] + h * s[1] + pos * s[2];
}

/* The position of query 0 among the keys: past_len with a past; with
 * nonpad_kv_seqlen (the batch's count, `nonpad`) and no past, nonpad -
 * q_len (negative: the leading queries see no key); else 0. */
ENG_OPS_HD static inline int64_t eng_attention_offset(const eng_attention_t *a, int64_t nonpad)
{
    return a->has_past ? a->past_len : a->has_nonpad ? nonpad - a->q_len : 0;
}

/* Whether the causal frontier, the window and the padding (not the mask)
 * let query i attend key j; `nonpad` is the batch's nonpad_kv_seqlen when
 * a->has_nonpad. */
ENG_OPS_HD static inline bool eng_attention_open(const eng_attention_t *a, int64_t i, int64_t j,
                                                 int64_t nonpad)
{
    int64_t p = eng_attention_offset(a, nonpad) + i;
    if (a->causal && j > p)
        return false;
    if (a->left_window >= 0 && p - j > a->left_window)
        return false;
    if (a->right_window >= 0 && j - p > a->right_window)
        return false;
    return !a->has_nonpad || j < nonpad;
}

/* bias_j of the file comment: `term` is the mask's term for key j (0
 * without a mask; see eng_attention_mask_term). */
ENG_OPS_HD static inline double eng_attention_bias(const eng_attention_t *a, double term,
                                                   int64_t i, int64_t j, int64_t nonpad)
{
    return eng_attention_open(a, i, j, nonpad) ? term : term + (double)-INFINITY;
}

/* The mask's term for key j from its element `v` there (read only when j <
 * mask_len; a bool as 0 or 1). */
ENG_OPS_HD static inline double eng_attention_mask_term(const eng_attention_t *a, int64_t j,
                                                        double v)
{
    if (a->mask == ENG_ATTN_MASK_NONE)
        return 0;
    if (j >= a->mask_len)
        return (double)-INFINITY;
    if (a->mask == ENG_ATTN_MASK_BOOL)
        return v != 0 ? 0.0 : (double)-INFINITY;
    return v;
}

/* c_j from s_j. */
ENG_OPS_HD static inline double eng_attention_softcap(const eng_attention_t *a, double s)
{
    return a->softcap != 0 ? a->softcap * tanh(s / a->softcap) : s;
}

/* RotaryEmbedding: each (batch, head, position) row of X has `head`
 * elements, whose first `rot` are rotated in rot / 2 pairs -- (d, d + rot/2)
 * or, interleaved, (2d, 2d + 1) -- by the angle whose cos and sin are the
 * cache's row: row position_ids[b, pos] of a [max_pos, rot / 2] cache, or
 * without ids row (b, pos) of a [B, S, rot / 2] cache; the rest is copied. */
typedef struct eng_rotary {
    int64_t batch, heads, seq, head, rot;
    bool interleaved, has_ids;
    int64_t max_pos;      /* the cache's rows, with ids */
    int64_t x_stride[3];  /* of X's and Y's (batch, head, position) rows */
} eng_rotary_t;

/* As eng_attention_params, for RotaryEmbedding. */
int eng_rotary_params(const eng_op_ctx_t *c, eng_rotary_t *r);

#ifdef __cplusplus
}
#endif
#endif
