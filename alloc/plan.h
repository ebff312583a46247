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

/* How many orders a hint keeps: one per tensor count, the least recently
 * used replaced. One graph plans to a few counts as its shape changes
 * (BERT-base: 205 buffers up to batch 3, 277 above, where the CPU GEMMs
 * start taking workspaces); a hint of one order lost it at each switch. */
#define ALLOC_PLAN_HINT_SLOTS 4

/* One kept order, for problems of `n` tensors. */
typedef struct alloc_plan_hint_slot {
    size_t n;      /* tensors `order` orders; 0: empty */
    size_t *order; /* the winning placement order, as indices into the caller's array */
    double ratio;  /* block / lower bound that order reached */
    uint64_t used; /* the hint's clock when last planned with: the lowest is replaced */
} alloc_plan_hint_slot_t;

/* Placement orders kept from one plan for the next plans of the same graph
 * (new input shapes: the same tensors, other sizes), at most
 * ALLOC_PLAN_HINT_SLOTS, so its memory is bounded by that many arrays of
 * the largest tensor count. Zero-initialise it; free it with
 * alloc_plan_hint_fini. The caller serialises its use. */
typedef struct alloc_plan_hint {
    alloc_plan_hint_slot_t slot[ALLOC_PLAN_HINT_SLOTS];
    uint64_t clock; /* plans made with this hint */
} alloc_plan_hint_t;

/* alloc_plan_build, first trying the order `hint` keeps for n tensors:
 * when that placement comes as close to this problem's lower bound as the
 * order's own plan came to its (block <= ratio x bound), or within 5% of
 * the bound, it is the plan, and the fixed orders and the search are
 * skipped; else it competes with them.
 * Either way the winning order and its ratio are written back into the
 * hint's slot for n (a new slot, the least recently used one, when it has
 * none; left empty if no memory was had for it: never an error). A slot
 * whose order is not a permutation of 0..n-1, or whose ratio is below 1,
 * counts as empty. Any order gives a valid plan; the hint decides only how
 * fast and how tight. hint NULL is alloc_plan_build. When bound_bytes is
 * not NULL it receives the lower bound (alloc_plan_peak_live_bytes) on
 * success. Deterministic for a given input and hint. */
int alloc_plan_build_hinted(alloc_plan_tensor_t *tensors, size_t n, size_t align,
                            alloc_plan_hint_t *hint, size_t *total_bytes, size_t *bound_bytes);

/* Frees the hint's orders and empties it; a NULL or empty hint is fine. */
void alloc_plan_hint_fini(alloc_plan_hint_t *hint);

/* The lower bound of any valid plan: the largest sum, over steps, of the
 * aligned sizes of the tensors live at that step (`align` as above; a bad
 * alignment reads as the default). Tensors with first_step > last_step are
 * never live. Saturates at SIZE_MAX. O(n^2) time, no allocation; cannot
 * fail: a plain check of a plan, where alloc_plan_build_hinted's
 * bound_bytes comes from an O(n) sweep. */
size_t alloc_plan_peak_live_bytes(const alloc_plan_tensor_t *tensors, size_t n, size_t align);

#ifdef __cplusplus
}
#endif
#endif
