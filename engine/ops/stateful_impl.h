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

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"

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

#ifdef __cplusplus
}
#endif
#endif
