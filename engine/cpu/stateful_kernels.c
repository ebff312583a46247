/* stateful_kernels.c -- CPU kernels of the stateful sequence ops
 * (engine/ops/stateful.c): CausalConvWithState and LinearAttention, float,
 * through the per-element and per-column steps of stateful_impl.h that the
 * CUDA kernels call too.
 *
 * Threading: pure functions of their context. */
#include <string.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/ops/stateful_impl.h"

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
    const int64_t S = p.kernel - 1;
    for (int64_t bc = 0; bc < p.batch * p.channels; bc++) {
        for (int64_t t = 0; y && t < p.length; t++)
            y[bc * p.length + t] = eng_causal_conv_at(&p, x, w, bias, past, bc, t);
        for (int64_t j = 0; present && j < S; j++)
            present[bc * S + j] = eng_causal_conv_seq(&p, x, past, bc, p.length + j);
    }
    return 0;
}

/* The state LinearAttention works in: present_state when asked for, else
 * scratch. */
static size_t linattn_scratch(const eng_op_ctx_t *c)
{
    eng_linattn_t p;
    if ((c->n_outputs > 1 && c->outputs[1]) || eng_linattn_params(c, &p) != 0)
        return 0;
    return (size_t)(p.batch * p.kv_heads * p.d_k * p.d_v) * sizeof(float);
}

static int linattn_run(eng_op_ctx_t *c)
{
    eng_linattn_t p;
    int rc = eng_linattn_params(c, &p);
    if (rc)
        return rc;
    size_t state_bytes = (size_t)(p.batch * p.kv_heads * p.d_k * p.d_v) * sizeof(float);
    eng_linattn_io_t io = {
        .q = c->inputs[0]->data, .k = c->inputs[1]->data, .v = c->inputs[2]->data,
        .past = p.past ? c->inputs[3]->data : NULL,
        .decay = p.gated ? c->inputs[4]->data : NULL,
        .beta = p.delta ? c->inputs[5]->data : NULL,
        .y = c->outputs[0] ? c->outputs[0]->data : NULL,
        .state = c->n_outputs > 1 && c->outputs[1] ? c->outputs[1]->data : c->scratch};
    if (!io.state || (io.state == c->scratch && c->scratch_bytes < state_bytes))
        return eng_op_scratch_err(c, state_bytes);
    for (int64_t b = 0; b < p.batch; b++)
        for (int64_t h = 0; h < p.kv_heads; h++)
            for (int64_t m = 0; m < p.d_v; m++)
                eng_linattn_column(&p, &io, b, h, m);
    return 0;
}

const eng_kernel_t eng_cpu_CausalConvWithState = {.run = causal_conv_run};
const eng_kernel_t eng_cpu_LinearAttention = {.run = linattn_run, .scratch_bytes = linattn_scratch};
