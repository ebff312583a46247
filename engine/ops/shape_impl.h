/* shape_impl.h -- the shape ops' parameters that both their definitions
 * (engine/ops/shape.c) and every device's kernels need, resolved from a
 * context in one place so that inference and execution never disagree.
 *
 * Each eng_<op>_params function reads the node's attributes (or, by opset,
 * the inputs that replaced them) and the inputs' shapes, validates them, and
 * fills a plain struct. They return 0, FS_EINVAL (message: node, what was
 * wrong, the shapes), FS_ENOTSUP, or FS_EDYNAMIC when an input value they
 * need is not known (its data is NULL); on error the struct is unspecified.
 * They never read data that the op's output shape does not depend on, so
 * inference can call them before running.
 *
 * Threading: pure functions of the context. */
#ifndef FS_ENGINE_OPS_SHAPE_IMPL_H
#define FS_ENGINE_OPS_SHAPE_IMPL_H

#include <stdint.h>

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Helpers of the definitions (shape.c, shape_make.c). */
/* Input i, which the op requires, with a fixed-size element type (these
 * ops move elements by size, so any such dtype works). 0 and *out, or
 * FS_EINVAL (missing) / FS_ENOTSUP (dtype). */
int eng_shapeops_in_data(const eng_op_ctx_t *c, int i, const char *what, const eng_tensor_t **out);
/* Input i as an int32/int64 list whose values the output shape needs:
 * scalar or 1-D, data known (else FS_EDYNAMIC). *n is its length; NULL
 * *out (and 0) when absent and not required. */
int eng_shapeops_in_ints(const eng_op_ctx_t *c, int i, const char *what, bool required,
                         const eng_tensor_t **out, int64_t *n);
/* Errors of check() functions, which have a node but no context. */
#define ENG_NODE_ERR(n, code, ...) eng_op_err(&(eng_op_ctx_t){.node = (n)}, (code), __VA_ARGS__)

/* Transpose: output dim d is input dim perm[d]. */
int eng_transpose_params(const eng_op_ctx_t *c, int perm[ENG_MAX_RANK]);

/* Slice: per input dim, the first element taken and the step (1 and 0 on
 * dims the node does not slice); `out` is the output shape. */
typedef struct eng_slice_params {
    int64_t starts[ENG_MAX_RANK];
    int64_t steps[ENG_MAX_RANK];
    eng_shape_t out;
} eng_slice_params_t;
int eng_slice_params(const eng_op_ctx_t *c, eng_slice_params_t *p);

/* Split: output k takes eng_split_size(p, k) elements of `axis`, in order.
 * Sizes come from the `split` list (split_in or split_attr) or are `chunk`
 * each, the last output taking what remains. */
typedef struct eng_split_params {
    int axis;
    int n;                          /* outputs */
    int64_t dim;                    /* the input's size along axis */
    int64_t chunk;
    const eng_tensor_t *split_in;   /* borrowed from the context */
    const int64_t *split_attr;      /* borrowed from the node */
} eng_split_params_t;
int eng_split_params(const eng_op_ctx_t *c, eng_split_params_t *p);
static inline int64_t eng_split_size(const eng_split_params_t *p, int k)
{
    if (p->split_in)
        return eng_tensor_get_i64(p->split_in, k);
    if (p->split_attr)
        return p->split_attr[k];
    return k < p->n - 1 ? p->chunk : p->dim - p->chunk * (p->n - 1);
}

/* Pad: per input dim, elements added before and after (negative: cropped). */
typedef enum eng_pad_mode {
    ENG_PAD_CONSTANT,
    ENG_PAD_REFLECT,
    ENG_PAD_EDGE,
    ENG_PAD_WRAP,
} eng_pad_mode_t;
typedef struct eng_pad_params {
    eng_pad_mode_t mode;
    int64_t begin[ENG_MAX_RANK];
    int64_t end[ENG_MAX_RANK];
    eng_shape_t out;
} eng_pad_params_t;
int eng_pad_params(const eng_op_ctx_t *c, eng_pad_params_t *p);
/* Pad's constant, as one element of the input's dtype, into value (at
 * least 16 bytes). Reads the constant_value input's data (opset >= 11),
 * so call it at run; FS_EDYNAMIC while that data is unknown. */
int eng_pad_value(const eng_op_ctx_t *c, void *value);

/* Shape (the op): the output lists input dims [start, start + n). */
int eng_shapeof_params(const eng_op_ctx_t *c, int *start, int *n);
/* Shape's output values: the n dims eng_shapeof_params selects, into
 * dims[0, n). 0, or its error (dims untouched). */
int eng_shapeof_dims(const eng_op_ctx_t *c, int64_t *dims, int *n);

/* ConstantOfShape: the fill value, one element of its dtype. *value
 * points into the node's attribute (or a static float zero). */
int eng_constant_of_shape_value(const eng_op_ctx_t *c, eng_dtype_t *dtype, const void **value);

/* Constant: the node's value attribute as a tensor view into the node's
 * attributes (never written through). */
int eng_constant_params(const eng_op_ctx_t *c, eng_tensor_t *value);

/* DepthToSpace / SpaceToDepth: blocksize, and for DepthToSpace whether the
 * mode is CRD (else DCR). */
int eng_space_depth_params(const eng_op_ctx_t *c, int64_t *blocksize, bool *crd);

/* GatherND: output row j (of n_rows, each `row` elements of data's dtype)
 * copies data's row at batch j / per_batch, whose position in that batch's
 * [dims[0], ..., dims[k-1]] grid is the k indices at j * k (each made
 * non-negative for its dim); a batch holds batch_rows rows. The output's
 * shape is the indices' shape without its last dim, then data's dims after
 * the batch and indexed ones. */
typedef struct eng_gather_nd {
    int k;                          /* indices per row (the indices' last dim) */
    int64_t dims[ENG_MAX_RANK];     /* data's indexed dims */
    int64_t strides[ENG_MAX_RANK];  /* in rows, of each indexed dim */
    int64_t n_rows, per_batch, batch_rows, row;
    eng_shape_t out;
} eng_gather_nd_t;
int eng_gather_nd_params(const eng_op_ctx_t *c, eng_gather_nd_t *g);

/* The elements of s before and after dim `axis` (Concat, Split and Gather
 * move [outer, dim, inner] rows). Cannot fail. */
void eng_outer_inner(const eng_shape_t *s, int axis, int64_t *outer, int64_t *inner);

/* The ops that are one strided copy (engine/ops/shape_view.c): the dense
 * output, walked in row-major order over `dims`, reads input 0 at element
 * `offset` plus the sum of index * stride (in elements; negative for a
 * reversed slice, 0 on a broadcast dim). Tile views each dim as (repeat,
 * dim), so the rank may double. Every device's kernel copies through it. */
#define ENG_STRIDED_MAX_RANK (2 * ENG_MAX_RANK)
typedef struct eng_strided {
    int rank;
    int64_t offset;
    int64_t dims[ENG_STRIDED_MAX_RANK];
    int64_t strides[ENG_STRIDED_MAX_RANK];
} eng_strided_t;

/* Each op's view, from c's input shapes and host-known parameters (as its
 * infer read them). 0, or the error of the op's parameters (Transpose's
 * perm, Slice's starts/ends/axes/steps, the space/depth blocksize); *v is
 * then undefined. An empty output gives a view with a 0 dim. */
int eng_strided_transpose(const eng_op_ctx_t *c, eng_strided_t *v);
int eng_strided_slice(const eng_op_ctx_t *c, eng_strided_t *v);
int eng_strided_expand(const eng_op_ctx_t *c, eng_strided_t *v);
int eng_strided_tile(const eng_op_ctx_t *c, eng_strided_t *v);
int eng_strided_depth_to_space(const eng_op_ctx_t *c, eng_strided_t *v);
int eng_strided_space_to_depth(const eng_op_ctx_t *c, eng_strided_t *v);

/* Drops dims of size 1 from a strided walk and merges each dim into the one
 * before it when the walk crosses the pair as one (strides[d-1] ==
 * strides[d] * dims[d]), in place; returns the new rank. Fewer, longer rows
 * make a copy faster and do not change its result; every device's strided
 * copy walks the coalesced view. Cannot fail. */
static inline int eng_strided_coalesce(int rank, int64_t *dims, int64_t *strides)
{
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        if (r > 0 && strides[r - 1] == strides[d] * dims[d]) {
            dims[r - 1] *= dims[d];
            strides[r - 1] = strides[d];
            continue;
        }
        dims[r] = dims[d];
        strides[r] = strides[d];
        r++;
    }
    return r;
}

/* ConstantOfShape's fill, as every device's kernel writes it: *value (from
 * eng_constant_of_shape_value) repeated over output 0's *n elements of *es
 * bytes. 0, or that function's error (nothing else set). */
static inline int eng_constant_of_shape_fill(const eng_op_ctx_t *c, const void **value,
                                             size_t *es, int64_t *n)
{
    eng_dtype_t dt;
    int rc = eng_constant_of_shape_value(c, &dt, value);
    if (rc != 0)
        return rc;
    *es = eng_dtype_size(dt);
    *n = eng_shape_numel(&c->outputs[0]->shape);
    return 0;
}

/* The ops that are one strided copy of input 0: each device's run function
 * for it and the view (above) it copies through: X(run, view). */
#define ENG_STRIDED_RUNS(X)                                                            \
    X(transpose_run, eng_strided_transpose)                                            \
    X(slice_run, eng_strided_slice)                                                    \
    X(expand_run, eng_strided_expand)                                                  \
    X(tile_run, eng_strided_tile)                                                      \
    X(depth_to_space_run, eng_strided_depth_to_space)                                  \
    X(space_to_depth_run, eng_strided_space_to_depth)

/* Concat's layout, as every device's kernel walks it: output 0 as *outer
 * rows around *axis (attribute "axis", normalised), each row a run of the
 * inputs' slices of *inner elements of *es bytes per index along the axis.
 * 0, or the axis error naming the node. */
static inline int eng_concat_layout(const eng_op_ctx_t *c, int *axis, size_t *es,
                                    int64_t *outer, int64_t *inner)
{
    const eng_tensor_t *y = c->outputs[0];
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), y->shape.rank, axis);
    if (rc != 0)
        return rc;
    *es = eng_dtype_size(y->dtype);
    eng_outer_inner(&y->shape, *axis, outer, inner);
    return 0;
}

/* The shape ops every device splits among the same run functions, each
 * device's file defining them under these names: X(OpType, run). */
#define ENG_SHAPE_KERNEL_RUNS(X)                                                       \
    X(Reshape, view_run)                                                               \
    X(Flatten, view_run)                                                               \
    X(BitCast, view_run)                                                               \
    X(Squeeze, view_run)                                                               \
    X(Unsqueeze, view_run)                                                             \
    X(Transpose, transpose_run)                                                        \
    X(Concat, concat_run)                                                              \
    X(Split, split_run)                                                                \
    X(Slice, slice_run)                                                                \
    X(Gather, gather_run)                                                              \
    X(GatherElements, gather_elements_run)                                             \
    X(GatherND, gather_nd_run)                                                         \
    X(Expand, expand_run)                                                              \
    X(Tile, tile_run)                                                                  \
    X(Pad, pad_run)

#ifdef __cplusplus
}
#endif
#endif
