/* stateful_kernels.c -- CPU kernels of the stateful sequence ops
 * (engine/ops/stateful.c): CausalConvWithState and LinearAttention, float,
 * one (batch, channel) row or one (batch, KV head) state at a time, in the
 * order of ONNX's reference so that results match it closely.
 *
 * Threading: pure functions of their context. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/ops/stateful_impl.h"

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

static int causal_conv_run(eng_op_ctx_t *c)
{
    eng_causal_conv_t p;
    int rc = eng_causal_conv_params(c, &p);
    if (rc)
        return rc;
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const float *bias = p.bias ? c->inputs[2]->data : NULL;
    const float *past = p.past ? c->inputs[3]->data : NULL;
    float *y = c->outputs[0] ? c->outputs[0]->data : NULL;
    float *present = c->n_outputs > 1 && c->outputs[1] ? c->outputs[1]->data : NULL;
    const int64_t L = p.length, K = p.kernel, S = K - 1;
    for (int64_t bc = 0; bc < p.batch * p.channels; bc++) {
        const int64_t ch = bc % p.channels;
        const float *xr = x + bc * L, *pr = past ? past + bc * S : NULL, *wr = w + ch * K;
        /* seq[i]: the past state, then the input. */
#define SEQ(i) ((i) < S ? (pr ? pr[(i)] : 0.0f) : xr[(i) - S])
        for (int64_t t = 0; y && t < L; t++) {
            float acc = bias ? bias[ch] : 0.0f;
            for (int64_t j = 0; j < K; j++)
                acc += wr[j] * SEQ(t + j);
            y[bc * L + t] = p.silu ? silu(acc) : acc;
        }
        for (int64_t j = 0; present && j < S; j++)
            present[bc * S + j] = SEQ(L + j);
#undef SEQ
    }
    return 0;
}

/* The state LinearAttention works in: present_state when asked for, else
 * scratch. */
static size_t linattn_scratch(const eng_op_ctx_t *c)
{
    eng_linattn_t p;
    if (c->n_outputs > 1 && c->outputs[1])
        return 0;
    if (eng_linattn_params(c, &p) != 0)
        return 0;
    return (size_t)(p.batch * p.kv_heads * p.d_k * p.d_v) * sizeof(float);
}

static int linattn_run(eng_op_ctx_t *c)
{
    eng_linattn_t p;
    int rc = eng_linattn_params(c, &p);
    if (rc)
        return rc;
    const int64_t B = p.batch, T = p.steps, Hq = p.q_heads, Hkv = p.kv_heads, dk = p.d_k,
                  dv = p.d_v, group = Hq / Hkv;
    const size_t state_n = (size_t)(B * Hkv * dk * dv);
    float *state = c->n_outputs > 1 && c->outputs[1] ? c->outputs[1]->data : c->scratch;
    if (!state || (state == c->scratch && c->scratch_bytes < state_n * sizeof(float)))
        return eng_op_scratch_err(c, state_n * sizeof(float));
    const float *q = c->inputs[0]->data, *k = c->inputs[1]->data, *v = c->inputs[2]->data;
    const float *decay = p.gated ? c->inputs[4]->data : NULL;
    const float *beta = p.delta ? c->inputs[5]->data : NULL;
    float *y = c->outputs[0] ? c->outputs[0]->data : NULL;
    if (p.past)
        memcpy(state, c->inputs[3]->data, state_n * sizeof(float));
    else
        memset(state, 0, state_n * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++) {
            float *s = state + (b * Hkv + h) * dk * dv;
            for (int64_t t = 0; t < T; t++) {
                const int64_t row = b * T + t;
                const float *kt = k + (row * Hkv + h) * dk, *vt = v + (row * Hkv + h) * dv;
                for (int64_t m = 0; m < dv; m++) {
                    if (decay)
                        for (int64_t d = 0; d < dk; d++)
                            s[d * dv + m] *=
                                expf(decay[(row * Hkv + h) * p.decay_per +
                                           (p.decay_per == 1 ? 0 : d)]);
                    float u = vt[m];
                    if (beta) {
                        float got = 0.0f;
                        for (int64_t d = 0; d < dk; d++)
                            got += s[d * dv + m] * kt[d];
                        u = beta[row * p.beta_heads + (p.beta_heads == 1 ? 0 : h)] * (u - got);
                    }
                    for (int64_t d = 0; d < dk; d++)
                        s[d * dv + m] += kt[d] * u;
                    for (int64_t g = 0; y && g < group; g++) {
                        const int64_t hq = h * group + g;
                        const float *qt = q + (row * Hq + hq) * dk;
                        float o = 0.0f;
                        for (int64_t d = 0; d < dk; d++)
                            o += qt[d] * s[d * dv + m];
                        y[(row * Hq + hq) * dv + m] = p.scale * o;
                    }
                }
            }
        }
    return 0;
}

const eng_kernel_t eng_cpu_CausalConvWithState = {.run = causal_conv_run};
const eng_kernel_t eng_cpu_LinearAttention = {.run = linattn_run, .scratch_bytes = linattn_scratch};
