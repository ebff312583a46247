/* plan.h -- the activation memory planner: offsets for tensors with known
 * lifetimes inside one block, so a batch needs one allocation.
 *
 * The caller describes each tensor by its size and the inclusive range of
 * steps (positions in the topological order) during which it must stay
 * intact; alloc_plan_build assigns every tensor an offset such that two
 * tensors whose step ranges intersect never share a byte, and reports the
 * block size the offsets need. The algorithm and its guarantee are stated
 * in plan.c's header.
 *
 * Sizes are rounded up to the alignment before planning, so every offset is
 * a multiple of it and the block may be carved from any allocation aligned
 * at least as much. A tensor of 0 bytes occupies nothing: it gets offset 0
 * and may alias any other tensor.
 *
 * Threading: pure functions over caller-owned arrays; safe from any thread
 * as long as no two calls share an array being written. */
#ifndef FS_ALLOC_PLAN_H
#define FS_ALLOC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The alignment used when the caller passes 0: cudaMalloc's own alignment,
 * enough for any vectorised kernel on either device. */
#define ALLOC_PLAN_DEFAULT_ALIGN ((size_t)256)

typedef struct alloc_plan_tensor {
    size_t size_bytes;   /* in: bytes the tensor needs (before alignment) */
    uint32_t first_step; /* in: step that produces it */
    uint32_t last_step;  /* in: last step that reads it; >= first_step */
    size_t offset;       /* out: byte offset in the block, a multiple of the alignment */
} alloc_plan_tensor_t;

/* Plans `n` tensors (borrowed; only their `offset` fields are written) with
 * offsets aligned to `align` (a power of two; 0 means
 * ALLOC_PLAN_DEFAULT_ALIGN). Returns 0 with every offset set and
 * *total_bytes the size of the block they need (0 when n is 0 or every
 * tensor is empty), or:
 *   FS_EINVAL  a bad alignment, a tensor with first_step > last_step, or a
 *              NULL array with n > 0 (the message names the tensor index);
 *   FS_ERANGE  a size or the block size does not fit in size_t;
 *   FS_ENOMEM  the planner's scratch memory could not be had.
 * On error neither the offsets nor *total_bytes are written. Deterministic:
 * the same input always gives the same offsets. */
int alloc_plan_build(alloc_plan_tensor_t *tensors, size_t n, size_t align, size_t *total_bytes);

/* The lower bound of any valid plan: the largest sum, over steps, of the
 * aligned sizes of the tensors live at that step (`align` as above; a bad
 * alignment reads as the default). Tensors with first_step > last_step are
 * never live. Saturates at SIZE_MAX. O(n^2) time, no allocation; cannot
 * fail. */
size_t alloc_plan_peak_live_bytes(const alloc_plan_tensor_t *tensors, size_t n, size_t align);

#ifdef __cplusplus
}
#endif
#endif
