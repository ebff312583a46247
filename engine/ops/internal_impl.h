/* internal_impl.h -- what the engine-internal ops' kernels of every device
 * share (engine/ops/internal.c defines the ops): a FusedElementwise node's
 * operands, checked against its program, and laid over its output.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_INTERNAL_IMPL_H
#define FS_ENGINE_OPS_INTERNAL_IMPL_H

#include "engine/ew_program.h"
#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The output's shape with the inputs laid over it: stride 0 on broadcast
 * dims, dims of size 1 dropped, neighbours contiguous in every operand
 * merged (engine/ops/binary_impl.h's eng_binary_bcast, for up to
 * ENG_EW_MAX_INPUTS inputs). Same-shape inputs collapse to one dim, a
 * bias along the last axis to [rows, cols] with strides (0, 1). */
typedef struct eng_ew_layout {
    int rank;                                      /* >= 1 */
    int64_t dims[ENG_MAX_RANK];
    int64_t stride[ENG_EW_MAX_INPUTS][ENG_MAX_RANK]; /* per input, in elements */
    int64_t n;                                     /* output elements */
} eng_ew_layout_t;

/* A FusedElementwise run's start on any device: c's program, inputs and
 * output checked against each other (count, dtypes, each input
 * broadcasting to the output), the layout in *l. 0, or FS_EINVAL naming
 * what differs; nothing is written or queued. */
int eng_ew_layout(const eng_op_ctx_t *c, eng_ew_layout_t *l);

#ifdef __cplusplus
}
#endif
#endif
