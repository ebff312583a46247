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

#ifdef __cplusplus
}
#endif
#endif
