/* stateful.cu -- CUDA kernels of the stateful sequence ops
 * (engine/ops/stateful.c; engine/cpu/stateful_kernels.c is the reference):
 * CausalConvWithState, one thread per output or state element, and
 * LinearAttention, one thread per (batch, KV head, value dim): a column of
 * the state never mixes with another, so each thread walks the whole
 * sequence over its own column, held in present_state (or scratch).
 *
 * Threading: as every CUDA kernel (engine/cuda/cuda_impl.h). */
#include <math.h>
#include <stdint.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/stateful_impl.h"

namespace {

/* ---- CausalConvWithState ------------------------------------------------------------- */

__global__ void causal_conv_kernel(const float *__restrict__ x, const float *__restrict__ w,
                                   const float *__restrict__ bias, const float *__restrict__ past,
                                   float *__restrict__ y, float *__restrict__ present,
                                   eng_causal_conv_t p)
{
    const int64_t L = p.length, K = p.kernel, S = K - 1;
    /* Items: B*C*L outputs, then B*C*S state elements. */
    const int64_t rows = p.batch * p.channels, n_out = y ? rows * L : 0;
    const int64_t total = n_out + (present ? rows * S : 0);
    ENG_CUDA_FOR(e, total)
    {
        const bool out = e < n_out;
        const int64_t i = out ? e : e - n_out;
        const int64_t bc = out ? i / L : i / S, pos = out ? i % L : L + i % S;
        const float *xr = x + bc * L, *pr = past ? past + bc * S : nullptr;
        if (!out) {
            present[i] = pos < S ? (pr ? pr[pos] : 0.0f) : xr[pos - S];
            continue;
        }
        const int64_t ch = bc % p.channels;
        float acc = bias ? bias[ch] : 0.0f;
        for (int64_t j = 0; j < K; j++) {
            int64_t s = pos + j;
            acc += w[ch * K + j] * (s < S ? (pr ? pr[s] : 0.0f) : xr[s - S]);
        }
        y[i] = p.silu ? acc / (1.0f + expf(-acc)) : acc;
    }
}

int causal_conv_run(eng_op_ctx_t *c)
{
    eng_causal_conv_t p;
    int rc = eng_causal_conv_params(c, &p);
    if (rc)
        return rc;
    float *y = c->outputs[0] ? (float *)c->outputs[0]->data : nullptr;
    float *present = c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data : nullptr;
    const int64_t rows = p.batch * p.channels;
    const int64_t total = (y ? rows * p.length : 0) + (present ? rows * (p.kernel - 1) : 0);
    return eng_cuda_launch(c, causal_conv_kernel, total, (const float *)c->inputs[0]->data,
                           (const float *)c->inputs[1]->data,
                           p.bias ? (const float *)c->inputs[2]->data : (const float *)nullptr,
                           p.past ? (const float *)c->inputs[3]->data : (const float *)nullptr, y,
                           present, p);
}

/* ---- LinearAttention ------------------------------------------------------------------ */

__global__ void linattn_kernel(const float *__restrict__ q, const float *__restrict__ k,
                               const float *__restrict__ v, const float *__restrict__ past,
                               const float *__restrict__ decay, const float *__restrict__ beta,
                               float *__restrict__ y, float *__restrict__ state, eng_linattn_t p)
{
    const int64_t Hq = p.q_heads, Hkv = p.kv_heads, dk = p.d_k, dv = p.d_v, group = Hq / Hkv;
    ENG_CUDA_FOR(e, p.batch * Hkv * dv)
    {
        const int64_t m = e % dv, bh = e / dv, h = bh % Hkv, b = bh / Hkv;
        float *s = state + bh * dk * dv;
        for (int64_t d = 0; d < dk; d++)
            s[d * dv + m] = past ? past[bh * dk * dv + d * dv + m] : 0.0f;
        for (int64_t t = 0; t < p.steps; t++) {
            const int64_t row = b * p.steps + t;
            const float *kt = k + (row * Hkv + h) * dk;
            if (decay)
                for (int64_t d = 0; d < dk; d++)
                    s[d * dv + m] *= expf(decay[(row * Hkv + h) * p.decay_per +
                                                (p.decay_per == 1 ? 0 : d)]);
            float u = v[(row * Hkv + h) * dv + m];
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

size_t linattn_scratch(const eng_op_ctx_t *c)
{
    eng_linattn_t p;
    if ((c->n_outputs > 1 && c->outputs[1]) || eng_linattn_params(c, &p) != 0)
        return 0;
    return (size_t)(p.batch * p.kv_heads * p.d_k * p.d_v) * sizeof(float);
}

int linattn_run(eng_op_ctx_t *c)
{
    eng_linattn_t p;
    int rc = eng_linattn_params(c, &p);
    if (rc)
        return rc;
    size_t state_bytes = (size_t)(p.batch * p.kv_heads * p.d_k * p.d_v) * sizeof(float);
    float *state = c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data
                                                     : (float *)c->scratch;
    if (!state || (state == c->scratch && c->scratch_bytes < state_bytes))
        return eng_op_scratch_err(c, state_bytes);
    return eng_cuda_launch(c, linattn_kernel, p.batch * p.kv_heads * p.d_v,
                           (const float *)c->inputs[0]->data, (const float *)c->inputs[1]->data,
                           (const float *)c->inputs[2]->data,
                           p.past ? (const float *)c->inputs[3]->data : (const float *)nullptr,
                           p.gated ? (const float *)c->inputs[4]->data : (const float *)nullptr,
                           p.delta ? (const float *)c->inputs[5]->data : (const float *)nullptr,
                           c->outputs[0] ? (float *)c->outputs[0]->data : (float *)nullptr, state,
                           p);
}

} /* namespace */

const eng_kernel_t eng_cuda_CausalConvWithState = {.run = causal_conv_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LinearAttention = {.run = linattn_run,
                                               .scratch_bytes = linattn_scratch};
