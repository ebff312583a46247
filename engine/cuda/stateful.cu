/* stateful.cu -- CUDA kernels of the stateful sequence ops
 * (engine/ops/stateful.c; engine/cpu/stateful_kernels.c is the reference),
 * through the steps of stateful_impl.h both devices call:
 * CausalConvWithState, one thread per output or state element, and
 * LinearAttention, one thread per (batch, KV head, value dim): a column of
 * the state never mixes with another, so each thread walks the whole
 * sequence over its own column, held in present_state (or scratch).
 *
 * Threading: as every CUDA kernel (engine/cuda/cuda_impl.h). */
#include <stdint.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/stateful_impl.h"

namespace {

/* Items: B*C*L outputs (when asked for), then B*C*(k-1) state elements. */
__global__ void causal_conv_kernel(const float *__restrict__ x, const float *__restrict__ w,
                                   const float *__restrict__ bias, const float *__restrict__ past,
                                   float *__restrict__ y, float *__restrict__ present,
                                   eng_causal_conv_t p)
{
    const int64_t L = p.length, S = p.kernel - 1, rows = p.batch * p.channels;
    const int64_t n_out = y ? rows * L : 0, total = n_out + (present ? rows * S : 0);
    ENG_CUDA_FOR(e, total)
    {
        if (e < n_out)
            y[e] = eng_causal_conv_at(&p, x, w, bias, past, e / L, e % L);
        else
            present[e - n_out] =
                eng_causal_conv_seq(&p, x, past, (e - n_out) / S, L + (e - n_out) % S);
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

__global__ void linattn_kernel(eng_linattn_t p, eng_linattn_io_t io)
{
    ENG_CUDA_FOR(e, p.batch * p.kv_heads * p.d_v)
    {
        const int64_t m = e % p.d_v, bh = e / p.d_v;
        eng_linattn_column(&p, &io, bh / p.kv_heads, bh % p.kv_heads, m);
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
    eng_linattn_io_t io = {
        (const float *)c->inputs[0]->data, (const float *)c->inputs[1]->data,
        (const float *)c->inputs[2]->data,
        p.past ? (const float *)c->inputs[3]->data : nullptr,
        p.gated ? (const float *)c->inputs[4]->data : nullptr,
        p.delta ? (const float *)c->inputs[5]->data : nullptr,
        c->outputs[0] ? (float *)c->outputs[0]->data : nullptr,
        c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data : (float *)c->scratch};
    if (!io.state || (io.state == c->scratch && c->scratch_bytes < state_bytes))
        return eng_op_scratch_err(c, state_bytes);
    return eng_cuda_launch(c, linattn_kernel, p.batch * p.kv_heads * p.d_v, p, io);
}

} /* namespace */

const eng_kernel_t eng_cuda_CausalConvWithState = {.run = causal_conv_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LinearAttention = {.run = linattn_run,
                                               .scratch_bytes = linattn_scratch};
