/* through_float.h -- CPU kernels of ops that take float16/bfloat16 natively
 * (their infer accepts half, so ops.c no longer widens them, and a GPU
 * computes on half directly) running their half tensors through their float
 * code: each half input converted to a float copy in the scratch, the float
 * kernel, each half output rounded from its float result once -- ops.c's
 * widening (eng_op_run with ctx->widen set), entered from inside the
 * kernel. The CPU computes these ops in float anyway; this keeps its
 * answers what they were while the op was widened.
 *
 * Use: a kernel's run starts with
 *     if (eng_cpu_half_dtype(c)) return eng_cpu_run_through_float(c);
 * and its scratch_bytes with the same test and eng_cpu_scratch_through_float
 * (or is eng_cpu_scratch_through_float itself when the float code needs no
 * scratch). The kernel must be the CPU table's entry for c's op.
 *
 * Threading: as the kernels (no state). */
#ifndef FS_ENGINE_CPU_THROUGH_FLOAT_H
#define FS_ENGINE_CPU_THROUGH_FLOAT_H

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The first float16 or bfloat16 dtype among c's inputs, or
 * ENG_DT_UNDEFINED (0: false) when there is none. Cannot fail. */
eng_dtype_t eng_cpu_half_dtype(const eng_op_ctx_t *c);

/* Runs c's op's CPU kernel on float copies of c's half inputs, rounding
 * its float outputs of the half dtype into c's outputs (outputs of another
 * dtype are written directly). 0, or the float kernel's error, FS_EINVAL
 * (scratch short of eng_cpu_scratch_through_float) or FS_ENOMEM. */
int eng_cpu_run_through_float(eng_op_ctx_t *c);

/* The scratch eng_cpu_run_through_float needs: the float kernel's own on
 * the float views, plus the float copies. With no half input, 0. Cannot
 * fail (SIZE_MAX when host memory ran out measuring it). */
size_t eng_cpu_scratch_through_float(const eng_op_ctx_t *c);

#ifdef __cplusplus
}
#endif
#endif
