/* stateful_impl.h -- what the stateful sequence ops' definitions
 * (engine/ops/stateful.c) and kernels (engine/cpu/stateful_kernels.c,
 * engine/cuda/stateful.cu) share: each op's geometry, read once from the
 * shapes and attributes by infer and by every device's kernel.
 *
 * CausalConvWithState (opset 27): a causal depthwise 1-D convolution that
 * carries its last k - 1 inputs between calls. Per (batch b, channel c) let
 * seq = past_state[b, c, :] (zeros when absent) followed by input[b, c, :];
 * then output[b, c, t] = act(bias[c] + sum_j weight[c, 0, j] * seq[t + j])
 * and present_state[b, c, :] = the last k - 1 elements of seq. act is none,
 * or SiLU (x * sigmoid(x), also named swish).
 *
 * LinearAttention (opset 27): recurrent linear attention over packed
 * [B, T, H * D] inputs. Each KV head keeps a state S [d_k, d_v] (past_state
 * [B, H_kv, d_k, d_v], zeros when absent); per step t:
 *   gated rules:  S = exp(g_t) * S           (g_t per head, or per key dim)
 *   delta rules:  v_t = beta_t * (v_t - S^T k_t)
 *   always:       S = S + k_t v_t^T
 *   query head h (reading KV head h / (H_q / H_kv)): o_t = scale * q_t^T S
 * The state's columns (one per value dim m) never mix, so a kernel may
 * give each (b, KV head, m) its own worker for the whole sequence.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_STATEFUL_IMPL_H
#define FS_ENGINE_OPS_STATEFUL_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_causal_conv {
    int64_t batch, channels, length, kernel; /* input [B, C, L], weight [C, 1, K] */
    bool bias, past;                         /* the optional inputs are present */
    bool silu;                               /* activation silu / swish */
} eng_causal_conv_t;

/* Reads the geometry from c's input shapes and the activation attribute.
 * 0, or FS_EINVAL naming the input whose shape does not fit, or FS_ENOTSUP
 * naming an activation other than none, silu or swish. */
int eng_causal_conv_params(const eng_op_ctx_t *c, eng_causal_conv_t *p);

/* Element i of the sequence of row bc (batch * channels + channel): the
 * past state (zeros when absent), then the input. */
ENG_OPS_HD static inline float eng_causal_conv_seq(const eng_causal_conv_t *p, const float *x,
                                                   const float *past, int64_t bc, int64_t i)
{
    const int64_t s = p->kernel - 1;
    return i < s ? (past ? past[bc * s + i] : 0.0f) : x[bc * p->length + i - s];
}

/* output[bc, t]: the kernel over the sequence from t, plus the bias, then
 * the activation. Both devices call this one definition. */
ENG_OPS_HD static inline float eng_causal_conv_at(const eng_causal_conv_t *p, const float *x,
                                                  const float *w, const float *bias,
                                                  const float *past, int64_t bc, int64_t t)
{
    const int64_t ch = bc % p->channels;
    float acc = bias ? bias[ch] : 0.0f;
    for (int64_t j = 0; j < p->kernel; j++)
        acc += w[ch * p->kernel + j] * eng_causal_conv_seq(p, x, past, bc, t + j);
    return p->silu ? acc / (1.0f + expf(-acc)) : acc;
}

typedef enum eng_linattn_rule {
    ENG_LINATTN_LINEAR,
    ENG_LINATTN_GATED,
    ENG_LINATTN_DELTA,
    ENG_LINATTN_GATED_DELTA,
} eng_linattn_rule_t;

typedef struct eng_linattn {
    int64_t batch, steps;          /* B, T */
    int64_t q_heads, kv_heads;     /* H_q (a multiple of H_kv), H_kv */
    int64_t d_k, d_v;
    eng_linattn_rule_t rule;
    bool gated, delta, past;       /* decay and beta are read; past_state is given */
    int64_t decay_per;             /* decay values per KV head and step: 1 or d_k */
    int64_t beta_heads;            /* beta values per step: H_kv or 1 */
    float scale;
} eng_linattn_t;

/* Reads the geometry from c's input shapes and attributes. 0, or FS_EINVAL
 * naming the input or attribute that does not fit (a decay or beta the rule
 * does not read is an error, as in ONNX's reference), or FS_ENOTSUP naming
 * an unknown update_rule. */
int eng_linattn_params(const eng_op_ctx_t *c, eng_linattn_t *p);

/* The inputs and outputs of one LinearAttention run (NULL: absent). */
typedef struct eng_linattn_io {
    const float *q, *k, *v, *past, *decay, *beta;
    float *y;      /* output, or NULL when not asked for */
    float *state;  /* [B, H_kv, d_k, d_v]: present_state, or scratch */
} eng_linattn_io_t;

/* Column m of KV head h of batch b, over the whole sequence: starts from
 * the past state (or zeros), applies each step's update to it, and writes
 * the outputs of the query heads that read it. Columns are independent, so
 * any two may run at once. Both devices call this one definition. */
ENG_OPS_HD static inline void eng_linattn_column(const eng_linattn_t *p,
                                                 const eng_linattn_io_t *io, int64_t b,
                                                 int64_t h, int64_t m)
{
    const int64_t Hq = p->q_heads, Hkv = p->kv_heads, dk = p->d_k, dv = p->d_v;
    const int64_t group = Hq / Hkv, bh = b * Hkv + h;
    float *s = io->state + bh * dk * dv;
    for (int64_t d = 0; d < dk; d++)
        s[d * dv + m] = io->past ? io->past[bh * dk * dv + d * dv + m] : 0.0f;
    for (int64_t t = 0; t < p->steps; t++) {
        const int64_t row = b * p->steps + t;
        const float *kt = io->k + (row * Hkv + h) * dk;
        if (io->decay)
            for (int64_t d = 0; d < dk; d++)
                s[d * dv + m] *= expf(io->decay[(row * Hkv + h) * p->decay_per +
                                                (p->decay_per == 1 ? 0 : d)]);
        float u = io->v[(row * Hkv + h) * dv + m];
        if (io->beta) {
            float got = 0.0f;
            for (int64_t d = 0; d < dk; d++)
                got += s[d * dv + m] * kt[d];
            u = io->beta[row * p->beta_heads + (p->beta_heads == 1 ? 0 : h)] * (u - got);
        }
        for (int64_t d = 0; d < dk; d++)
            s[d * dv + m] += kt[d] * u;
        for (int64_t g = 0; io->y && g < group; g++) {
            const int64_t hq = h * group + g;
            const float *qt = io->q + (row * Hq + hq) * dk;
            float o = 0.0f;
            for (int64_t d = 0; d < dk; d++)
                o += qt[d] * s[d * dv + m];
            io->y[(row * Hq + hq) * dv + m] = p->scale * o;
        }
    }
}

#ifdef __cplusplus
}
#endif
#endif
