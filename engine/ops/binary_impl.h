/* binary_impl.h -- opset 1..6 broadcasting of the binary ops, mapped onto
 * numpy broadcasting; shared by the definitions (engine/ops/binary.c) and
 * every device's kernels, so inference and execution see the same shapes.
 *
 * Before opset 7, Add/Sub/Mul/Div/Pow and the logic and comparison ops
 * broadcast only with the attribute broadcast=1, aligning B's dims with A's
 * starting at `axis` (default: B is a suffix of A). That is numpy
 * broadcasting of B viewed as B's dims followed by ones up to A's rank.
 * PRelu's slope of shape [C] applied per channel (dim 1 of X). Without
 * broadcast=1 the shapes must be equal. */
#ifndef FS_ENGINE_OPS_BINARY_IMPL_H
#define FS_ENGINE_OPS_BINARY_IMPL_H

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A copy of a context whose input 1 is seen as numpy broadcasting needs
 * it under the model's opset. Self-referencing: use it where it was
 * filled, never copy it. */
typedef struct eng_binary_legacy {
    eng_op_ctx_t ctx;            /* inputs point at `ins` */
    const eng_tensor_t *ins[2];
    eng_tensor_t view;           /* input 1 reshaped, when it had to be */
} eng_binary_legacy_t;

/* Fills *out from `c`. At opset >= 7, or with fewer than two inputs,
 * out->ctx is `c` as it is. 0, or FS_EINVAL naming the shapes that do not
 * match the legacy rules. */
int eng_binary_legacy_ctx(const eng_op_ctx_t *c, eng_binary_legacy_t *out);

/* eng_binary_legacy_ctx for an op of exactly two inputs: FS_EINVAL naming
 * the count when `c` has another number of them, else as above. The
 * two-input ops' infer starts here; a kernel that starts here too sees the
 * same two operands. */
int eng_binary_pair_ctx(const eng_op_ctx_t *c, eng_binary_legacy_t *out);

/* Checks that n >= 1, that inputs [0, n) of c are present and share input
 * 0's dtype, and that output 0 is present with dtype `out_dt`
 * (ENG_DT_UNDEFINED: the inputs'). 0 or FS_EINVAL naming the input or
 * output. */
int eng_binary_check_io(const eng_op_ctx_t *c, int n, eng_dtype_t out_dt);

/* BitShift's direction attribute: *left for LEFT, false for RIGHT. 0, or
 * FS_EINVAL naming any other value (*left untouched). */
int eng_binary_shift_left(const eng_node_t *n, bool *left);

/* Where's operands: condition (bool), X, Y and the output present, X, Y and
 * the output of one dtype. 0 or FS_EINVAL naming the dtypes. */
int eng_binary_where_check(const eng_op_ctx_t *c);

/* Whether a Sum or Mean of n_inputs inputs of dtype dt runs as it is on
 * every device: float16 and bfloat16 only up to two inputs -- one pass,
 * whose float sum (over the count, for Mean) is rounded once, as the float
 * kernel's result is. More would round every partial sum, so infer leaves
 * them to the widening fallback (engine/ops.c), which sums in float. */
static inline bool eng_binary_sum_native(eng_dtype_t dt, int n_inputs)
{
    return (dt != ENG_DT_FLOAT16 && dt != ENG_DT_BFLOAT16) || n_inputs <= 2;
}

/* The output and up to three inputs (Where). */
#define ENG_BINARY_MAX_OPERANDS 4

/* The output's shape with the inputs laid over it (stride 0 on broadcast
 * dims), dims of size 1 dropped and neighbours that are contiguous in every
 * operand merged: same-shape operands collapse to one dim, a scalar operand
 * to stride 0, and only true broadcasting keeps more dims. Every device's
 * kernels walk this layout. */
typedef struct eng_binary_bcast {
    int rank;                                          /* >= 1 */
    int64_t dims[ENG_MAX_RANK];
    /* Per operand (0: the output, k: input k - 1), in elements; 0: broadcast. */
    int64_t stride[ENG_BINARY_MAX_OPERANDS][ENG_MAX_RANK];
} eng_binary_bcast_t;

/* Lays the n_in (<= ENG_BINARY_MAX_OPERANDS - 1) inputs `in` over y's shape
 * and collapses dims into *l; the output is operand 0 of the messages. 0,
 * or FS_EINVAL when an input does not broadcast to y or an operand has an
 * unsized dtype; *l is then undefined. */
int eng_binary_bcast(const eng_op_ctx_t *c, const eng_tensor_t *y, const eng_tensor_t *const *in,
                     int n_in, eng_binary_bcast_t *l);

/* How every device's two-input kernels (Add ... PRelu) start: *lg from c
 * (eng_binary_legacy_ctx), then eng_binary_check_io(&lg->ctx, 2, out_dt).
 * The kernel then runs through lg->ctx. 0, or either's error. */
static inline int eng_binary_legacy_io(const eng_op_ctx_t *c, eng_binary_legacy_t *lg,
                                       eng_dtype_t out_dt)
{
    int rc = eng_binary_legacy_ctx(c, lg);
    return rc ? rc : eng_binary_check_io(&lg->ctx, 2, out_dt);
}

#ifdef __cplusplus
}
#endif
#endif
