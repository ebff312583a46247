/* index_impl.h -- the index ops' parameters that their definitions
 * (engine/ops/index.c, select.c) and every device's kernels need, resolved
 * from a context in one place so that inference and execution never
 * disagree.
 *
 * Each eng_<op>_params function reads the node's attributes and the inputs'
 * shapes (and the values that decide shapes: OneHot's depth, CenterCropPad's
 * shape, Compress's condition), validates them and fills a plain struct. They
 * return 0, FS_EINVAL (message: node, what was wrong, the shapes),
 * FS_ENOTSUP (a dtype or attribute value the engine lacks), or FS_EDYNAMIC
 * when a value they need is not known (its data is NULL); on error the
 * struct is unspecified. They never read data that no output shape depends
 * on, so inference can call them before running.
 *
 * Threading: pure functions of the context. */
#ifndef FS_ENGINE_OPS_INDEX_IMPL_H
#define FS_ENGINE_OPS_INDEX_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- scatters ------------------------------------------------------------------------------ */

/* How an update meets the element it lands on (ScatterND and
 * ScatterElements' reduction attribute, from opset 16; max and min from 18). */
typedef enum eng_scatter_reduce {
    ENG_SCATTER_NONE = 0, /* replaced; of duplicate indices the last update wins */
    ENG_SCATTER_ADD,
    ENG_SCATTER_MUL,
    ENG_SCATTER_MAX,
    ENG_SCATTER_MIN,
} eng_scatter_reduce_t;

/* ScatterND: output = data, then update row j (of n_rows, each `row`
 * elements, updates in order) lands on data's row whose position in the
 * [dims[0], ..., dims[k-1]] grid is the k indices at j * k (each made
 * non-negative for its dim). */
typedef struct eng_scatter_nd {
    int k;                          /* indices per row (the indices' last dim) */
    int64_t dims[ENG_MAX_RANK];     /* data's indexed dims */
    int64_t strides[ENG_MAX_RANK];  /* in rows, of each indexed dim */
    int64_t n_rows, row;
    eng_scatter_reduce_t reduce;
} eng_scatter_nd_t;
int eng_scatter_nd_params(const eng_op_ctx_t *c, eng_scatter_nd_t *g);

/* ScatterElements (and Scatter, its opset 9-10 name): output = data, then
 * update e (of n, in the indices' row-major order over `dims`) lands on the
 * output element whose coordinates are e's own, but on `axis` the index at
 * e (made non-negative for axis_dim). */
typedef struct eng_scatter_el {
    int rank, axis;
    int64_t dims[ENG_MAX_RANK];     /* the indices' (and updates') shape */
    int64_t strides[ENG_MAX_RANK];  /* data's, in elements */
    int64_t axis_dim;               /* data's dim on axis */
    int64_t n;
    eng_scatter_reduce_t reduce;
} eng_scatter_el_t;
int eng_scatter_el_params(const eng_op_ctx_t *c, eng_scatter_el_t *g);

/* TensorScatter: output = past_cache, then the update's row (o, s) of
 * `inner` elements, o in [0, outer), s in [0, seq), lands on the cache's row
 * (o, p) with p = write_indices[o / per_batch] + s (mod max_seq when
 * circular; linear needs p < max_seq). write_indices absent: all 0. */
typedef struct eng_tensor_scatter {
    int64_t outer, per_batch, max_seq, seq, inner;
    bool circular;
} eng_tensor_scatter_t;
int eng_tensor_scatter_params(const eng_op_ctx_t *c, eng_tensor_scatter_t *g);

/* --- one-hot, identity, reversal, crop/pad --------------------------------------------------- */

/* OneHot: the output viewed as [outer, depth, inner], the indices as
 * [outer, inner]; element (o, j, i) is values[1] (on) when index (o, i),
 * truncated to an integer and made non-negative for depth, is j, else
 * values[0] (off). An index outside [-depth, depth) gives a row of off. */
typedef struct eng_one_hot {
    int64_t outer, depth, inner;
    eng_shape_t out;
} eng_one_hot_t;
int eng_one_hot_params(const eng_op_ctx_t *c, eng_one_hot_t *g);

/* EyeLike: the output dtype (attribute dtype, else the input's) and its
 * 1 as one element of that dtype into one[] (at least 16 bytes). */
int eng_eye_like_params(const eng_op_ctx_t *c, eng_dtype_t *dtype, void *one, int64_t *k);

/* ReverseSequence: the input viewed as [d0, d1, inner]; batch is dim 0 or 1
 * (batch_first), time the other. Element (b, t) of a batch whose length is
 * L = sequence_lens[b] reads (b, L - 1 - t) for t < L, else (b, t). */
typedef struct eng_reverse_seq {
    int64_t d0, d1, inner;
    bool batch_first;
} eng_reverse_seq_t;
int eng_reverse_seq_params(const eng_op_ctx_t *c, eng_reverse_seq_t *g);

/* CenterCropPad: output element o (coordinates o_d) reads input element
 * o_d + shift[d] on every dim when each is in [0, in[d]), else is zero. */
typedef struct eng_crop_pad {
    int rank;
    int64_t in[ENG_MAX_RANK], shift[ENG_MAX_RANK];
    eng_shape_t out;
} eng_crop_pad_t;
int eng_crop_pad_params(const eng_op_ctx_t *c, eng_crop_pad_t *g);

/* --- data-dependent shapes (engine/ops/select.c) ------------------------------------------- */

/* Compress: the input viewed as [outer, dim, inner] (no axis: [1, numel,
 * 1]); the output keeps, in order, the `kept` indices i < cond_len along
 * dim whose condition is true. The count needs the condition's value. */
typedef struct eng_compress {
    int64_t outer, dim, inner, cond_len, kept;
    eng_shape_t out;
} eng_compress_t;
int eng_compress_params(const eng_op_ctx_t *c, eng_compress_t *g);

/* NonZero: the count of input elements that are not zero (NaN is not
 * zero, -0.0 is); FS_EDYNAMIC while the input's value is unknown. The
 * output is [rank, count] int64 (a scalar input counts as rank 1, as numpy
 * does). */
int eng_nonzero_count(const eng_op_ctx_t *c, int64_t *count);
/* Whether element i of t (a dtype NonZero takes, host data) is not zero.
 * Cannot fail. */
bool eng_index_nonzero_at(const eng_tensor_t *t, int64_t i);

/* Unique: the input viewed as [outer, items, inner], the items (elements
 * when there is no axis, else slices along it) compared element by
 * element in row-major order; NaNs equal each other and sort last, -0.0
 * equals 0.0. */
typedef struct eng_unique {
    int64_t outer, items, inner;
    int axis;                       /* -1: none (flattened) */
    bool sorted;
} eng_unique_t;
int eng_unique_params(const eng_op_ctx_t *c, eng_unique_t *g);
/* Bytes of host work memory eng_unique_compute needs for g. */
size_t eng_unique_work_bytes(const eng_unique_t *g);
/* The unique items of x (host data, the dtype eng_unique_params admitted),
 * into work (eng_unique_work_bytes, host memory): *n_unique, and laid out
 * in work, first[u] (the first occurrence of output item u), count[u] and
 * inverse[i] (the output item of input item i), each n_unique or items
 * int64s; the pointers come back through first/count/inverse. Cannot fail. */
void eng_unique_compute(const eng_unique_t *g, const eng_tensor_t *x, void *work,
                        int64_t *n_unique, int64_t **first, int64_t **count, int64_t **inverse);
/* Unique's output shapes for n_unique items, set on c's outputs. */
void eng_unique_set_outputs(eng_op_ctx_t *c, const eng_unique_t *g, int64_t n_unique);

/* --- shared ---------------------------------------------------------------------------------- */

/* Element i of a numeric or bool tensor (host data) as a double. Cannot
 * fail: a dtype without a numeric value reads as 0. */
double eng_index_get_f64(const eng_tensor_t *t, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
