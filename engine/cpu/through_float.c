/* through_float.c -- half tensors through a CPU kernel's float code, by
 * ops.c's widening (see through_float.h). */
#include "engine/cpu/through_float.h"

#include "engine/kernels.h"

eng_dtype_t eng_cpu_half_dtype(const eng_op_ctx_t *c)
{
    for (int i = 0; i < c->n_inputs; i++) {
        const eng_tensor_t *t = c->inputs[i];
        if (t && (t->dtype == ENG_DT_FLOAT16 || t->dtype == ENG_DT_BFLOAT16))
            return t->dtype;
    }
    return ENG_DT_UNDEFINED;
}

/* c as a widened node: ops.c then hands the kernel float views (whose
 * inputs are float, so the kernel takes its float path) and converts
 * around it. */
static eng_op_ctx_t widened(const eng_op_ctx_t *c)
{
    eng_op_ctx_t w = *c;
    w.widen = eng_cpu_half_dtype(c);
    return w;
}

int eng_cpu_run_through_float(eng_op_ctx_t *c)
{
    eng_op_ctx_t w = widened(c);
    return eng_op_run(eng_cpu_kernels[c->node->op->id], &w);
}

size_t eng_cpu_scratch_through_float(const eng_op_ctx_t *c)
{
    if (!eng_cpu_half_dtype(c))
        return 0;
    eng_op_ctx_t w = widened(c);
    return eng_op_scratch_bytes(eng_cpu_kernels[c->node->op->id], &w);
}
