/* shape_kernels.c -- CPU kernels of the shape ops.
 *
 * These ops move elements without looking at them, so every kernel works on
 * any fixed-size dtype by element size. Most of them are one strided copy:
 * the output is walked densely in row-major order and each output dim d
 * advances the source by strides[d] elements (negative for a reversed slice,
 * 0 for a broadcast or a repeat). Transpose permutes strides, Slice scales
 * them by the steps, Expand zeroes them on broadcast dims, Tile views each
 * dim as (repeat, dim) with stride (0, stride), and DepthToSpace and
 * SpaceToDepth are 6-D transposes of the 4-D tensor. The innermost dim is one
 * memcpy when its stride is 1.
 *
 * A kernel fails only where its op's parameters do (shape_impl.h; before
 * anything is written) or on a bad index (Gather, GatherElements, GatherND); the
 * rest cannot fail. */
#include <string.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/ops/shape_impl.h"

/* n elements of es bytes from src, stride `stride` elements, to dense dst. */
static void copy_row(char *dst, const char *src, size_t es, int64_t n, int64_t stride)
{
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    /* Constant-size memcpy compiles to one load and store. */
#define COPY_ROW_(N)                                                                            \
    for (int64_t i = 0; i < n; i++)                                                             \
        memcpy(dst + i * (N), src + i * stride * (N), (N));                                     \
    return;
    switch (es) {
    case 1:
        COPY_ROW_(1)
    case 2:
        COPY_ROW_(2)
    case 4:
        COPY_ROW_(4)
    case 8:
        COPY_ROW_(8)
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * es, src + i * stride * (int64_t)es, es);
    }
#undef COPY_ROW_
}

/* The last two dims of a copy whose inner stride is not 1 (a transpose, in
 * effect), in TILE x TILE tiles so that a tile's reads share cache lines as
 * its writes do. dst is dense (dims[0] x dims[1]). Cannot fail. */
#define TILE 32
static void copy_tiled(char *dst, const char *src, size_t es, const int64_t *dims,
                       const int64_t *strides)
{
    for (int64_t i0 = 0; i0 < dims[0]; i0 += TILE)
        for (int64_t j0 = 0; j0 < dims[1]; j0 += TILE) {
            int64_t i1 = i0 + TILE < dims[0] ? i0 + TILE : dims[0];
            int64_t nj = j0 + TILE < dims[1] ? TILE : dims[1] - j0;
            for (int64_t i = i0; i < i1; i++)
                copy_row(dst + (size_t)(i * dims[1] + j0) * es,
                         src + (i * strides[0] + j0 * strides[1]) * (int64_t)es, es, nj,
                         strides[1]);
        }
}

/* Fills dense dst (shape dims) from src: element (i_0..i_{r-1}) comes from
 * src + sum(i_d * strides[d]) elements. dims and strides are modified.
 * Cannot fail. */
static void copy_strided(void *dst, const void *src, size_t es, int rank, int64_t *dims,
                         int64_t *strides)
{
    for (int d = 0; d < rank; d++)
        if (dims[d] == 0)
            return;
    rank = eng_strided_coalesce(rank, dims, strides);
    if (rank == 0) {
        memcpy(dst, src, es);
        return;
    }
    /* Each step below copies one block: a row, or a tiled 2-D plane. */
    int block_rank = rank >= 2 && strides[rank - 1] != 1 ? 2 : 1, outer = rank - block_rank;
    char *out = dst;
    const char *in = src;
    int64_t idx[ENG_STRIDED_MAX_RANK] = {0}, off = 0, block = dims[rank - 1];
    if (block_rank == 2)
        block *= dims[rank - 2];
    for (;;) {
        if (block_rank == 2)
            copy_tiled(out, in + off * (int64_t)es, es, dims + outer, strides + outer);
        else
            copy_row(out, in + off * (int64_t)es, es, block, strides[rank - 1]);
        out += (size_t)block * es;
        int d = outer - 1;
        for (; d >= 0; d--) {
            off += strides[d];
            if (++idx[d] < dims[d])
                break;
            off -= strides[d] * dims[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* --- views -------------------------------------------------------------------------------- */

/* Reshape, Flatten, Squeeze, Unsqueeze: the output is the input's bytes;
 * nothing to do when the planner made it share the input's buffer. */
static int view_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    if (y->data != x->data && eng_tensor_bytes(y) > 0)
        memcpy(y->data, x->data, eng_tensor_bytes(y));
    return 0;
}

/* --- strided copies ------------------------------------------------------------------------ */

/* Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth: one strided
 * copy of the view `view` gives (engine/ops/shape_view.c). */
static int strided_run(eng_op_ctx_t *c, int (*view)(const eng_op_ctx_t *, eng_strided_t *))
{
    eng_strided_t v;
    int rc = view(c, &v);
    if (rc != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    if (eng_shape_numel(&y->shape) == 0)
        return 0;
    size_t es = eng_dtype_size(x->dtype);
    copy_strided(y->data, (const char *)x->data + v.offset * (int64_t)es, es, v.rank, v.dims,
                 v.strides);
    return 0;
}

#define STRIDED_RUN_(fn, view)                                                                  \
    static int fn(eng_op_ctx_t *c) { return strided_run(c, view); }
ENG_STRIDED_RUNS(STRIDED_RUN_)
#undef STRIDED_RUN_

/* --- Concat, Split --------------------------------------------------------------------------- */

static int concat_run(eng_op_ctx_t *c)
{
    eng_tensor_t *y = c->outputs[0];
    int axis;
    size_t es;
    int64_t outer, inner;
    int rc = eng_concat_layout(c, &axis, &es, &outer, &inner);
    if (rc != 0)
        return rc;
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < c->n_inputs; i++) {
            const eng_tensor_t *x = c->inputs[i];
            size_t block = (size_t)(x->shape.dims[axis] * inner) * es;
            if (block > 0)
                memcpy(dst, (const char *)x->data + (size_t)o * block, block);
            dst += block;
        }
    return 0;
}

static int split_run(eng_op_ctx_t *c)
{
    eng_split_params_t p;
    int rc = eng_split_params(c, &p);
    if (rc != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    size_t es = eng_dtype_size(x->dtype);
    int64_t outer, inner;
    eng_outer_inner(&x->shape, p.axis, &outer, &inner);
    size_t in_block = (size_t)(p.dim * inner) * es, at = 0;
    for (int k = 0; k < p.n; k++) {
        size_t block = (size_t)(eng_split_size(&p, k) * inner) * es;
        eng_tensor_t *y = c->outputs[k];
        for (int64_t o = 0; y && block > 0 && o < outer; o++)
            memcpy((char *)y->data + (size_t)o * block,
                   (const char *)x->data + (size_t)o * in_block + at, block);
        at += block;
    }
    return 0;
}

/* --- Gather, GatherElements ---------------------------------------------------------------- */

/* Index i of idx, made non-negative for a dim of size dim; FS_EINVAL when
 * out of [-dim, dim). */
static int index_at(const eng_op_ctx_t *c, const eng_tensor_t *idx, int64_t i, int64_t dim,
                    int64_t *out)
{
    int64_t v = eng_tensor_get_i64(idx, i);
    if (v < -dim || v >= dim)
        return eng_op_err(c, FS_EINVAL, "index %lld (element %lld of indices) is out of range "
                          "[%lld, %lld)", (long long)v, (long long)i, (long long)-dim,
                          (long long)dim);
    *out = v < 0 ? v + dim : v;
    return 0;
}

/* On a bad index, FS_EINVAL and the output is left unwritten. */
static int gather_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    int axis;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &axis);
    if (rc != 0)
        return rc;
    size_t es = eng_dtype_size(x->dtype);
    int64_t outer, inner, dim = x->shape.dims[axis], n = eng_shape_numel(&idx->shape), v;
    eng_outer_inner(&x->shape, axis, &outer, &inner);
    for (int64_t j = 0; j < n; j++)
        if ((rc = index_at(c, idx, j, dim, &v)) != 0)
            return rc;
    size_t block = (size_t)inner * es;
    if (eng_tensor_bytes(c->outputs[0]) == 0)
        return 0;
    char *dst = c->outputs[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++, dst += block) {
            index_at(c, idx, j, dim, &v);
            memcpy(dst, (const char *)x->data + (size_t)(o * dim + v) * block, block);
        }
    return 0;
}

/* On a bad index, FS_EINVAL and the output is partly written. */
static int gather_elements_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    int axis, r = x->shape.rank;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), r, &axis);
    if (rc != 0)
        return rc;
    size_t es = eng_dtype_size(x->dtype);
    int64_t xs[ENG_MAX_RANK], pos[ENG_MAX_RANK] = {0}, n = eng_shape_numel(&idx->shape);
    int64_t dim = x->shape.dims[axis], v;
    eng_shape_strides(&x->shape, xs);
    char *dst = c->outputs[0]->data;
    for (int64_t i = 0; i < n; i++, dst += es) {
        if ((rc = index_at(c, idx, i, dim, &v)) != 0)
            return rc;
        int64_t off = 0;
        for (int d = 0; d < r; d++)
            off += (d == axis ? v : pos[d]) * xs[d];
        memcpy(dst, (const char *)x->data + off * (int64_t)es, es);
        for (int d = r - 1; d >= 0 && ++pos[d] == idx->shape.dims[d]; d--)
            pos[d] = 0;
    }
    return 0;
}

/* On a bad index, FS_EINVAL and the output is left unwritten. */
static int gather_nd_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    eng_gather_nd_t g;
    int rc = eng_gather_nd_params(c, &g);
    if (rc != 0)
        return rc;
    int64_t v;
    for (int64_t i = 0; i < g.n_rows * g.k; i++)
        if ((rc = index_at(c, idx, i, g.dims[i % g.k], &v)) != 0)
            return rc;
    size_t block = (size_t)g.row * eng_dtype_size(x->dtype);
    if (block == 0)
        return 0;
    char *dst = c->outputs[0]->data;
    for (int64_t j = 0; j < g.n_rows; j++, dst += block) {
        int64_t at = j / g.per_batch * g.batch_rows;
        for (int t = 0; t < g.k; t++) {
            index_at(c, idx, j * g.k + t, g.dims[t], &v);
            at += v * g.strides[t];
        }
        memcpy(dst, (const char *)x->data + (size_t)at * block, block);
    }
    return 0;
}

/* --- Pad ----------------------------------------------------------------------------------- */

/* The input index that output index o of dim d reads, or -1 for the
 * constant. Negative pads crop first; the modes then see the kept range. */
static int64_t pad_source(const eng_pad_params_t *p, const eng_shape_t *in, int d, int64_t o)
{
    int64_t lo = p->begin[d] < 0 ? -p->begin[d] : 0;
    int64_t kept = in->dims[d] - lo - (p->end[d] < 0 ? -p->end[d] : 0);
    int64_t k = o - (p->begin[d] > 0 ? p->begin[d] : 0);
    if (k >= 0 && k < kept)
        return lo + k;
    switch (p->mode) {
    case ENG_PAD_CONSTANT:
        return -1;
    case ENG_PAD_EDGE:
        return lo + (k < 0 ? 0 : kept - 1);
    case ENG_PAD_WRAP:
        return lo + ((k % kept) + kept) % kept;
    case ENG_PAD_REFLECT:
        break;
    }
    if (kept == 1)
        return lo;
    int64_t period = 2 * (kept - 1), m = ((k % period) + period) % period;
    return lo + (m < kept ? m : period - m);
}

static int pad_run(eng_op_ctx_t *c)
{
    eng_pad_params_t p;
    unsigned char value[16];
    int rc;
    if ((rc = eng_pad_params(c, &p)) != 0 || (rc = eng_pad_value(c, value)) != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    const eng_shape_t *out = &p.out;
    size_t es = eng_dtype_size(x->dtype);
    int r = out->rank;
    if (eng_shape_numel(out) == 0)
        return 0;
    if (r == 0) {
        memcpy(c->outputs[0]->data, x->data, es);
        return 0;
    }
    int64_t xs[ENG_MAX_RANK], pos[ENG_MAX_RANK] = {0}, inner = out->dims[r - 1];
    eng_shape_strides(&x->shape, xs);
    char *dst = c->outputs[0]->data;
    const char *src = x->data;
    for (;;) {
        /* One output row: its source row, unless an outer index is padding. */
        int64_t base = 0;
        bool constant = false;
        for (int d = 0; d < r - 1 && !constant; d++) {
            int64_t s = pad_source(&p, &x->shape, d, pos[d]);
            constant = s < 0;
            base += s * xs[d];
        }
        for (int64_t j = 0; j < inner; j++, dst += es) {
            int64_t s = constant ? -1 : pad_source(&p, &x->shape, r - 1, j);
            memcpy(dst, s < 0 ? (const char *)value : src + (base + s) * (int64_t)es, es);
        }
        int d = r - 2;
        for (; d >= 0 && ++pos[d] == out->dims[d]; d--)
            pos[d] = 0;
        if (d < 0)
            return 0;
    }
}

/* --- producers: Shape, Size, ConstantOfShape, Range, Constant ------------------------------ */

/* Shape and Size read only their input's shape, never its data, so they
 * can run before the input exists. */
static int shape_run(eng_op_ctx_t *c)
{
    int n;
    return eng_shapeof_dims(c, c->outputs[0]->data, &n);
}

static int size_run(eng_op_ctx_t *c)
{
    *(int64_t *)c->outputs[0]->data = eng_shape_numel(&c->inputs[0]->shape);
    return 0;
}

static int constant_of_shape_run(eng_op_ctx_t *c)
{
    const void *value;
    size_t es;
    int64_t n;
    int rc = eng_constant_of_shape_fill(c, &value, &es, &n);
    if (rc != 0)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)y->data + (size_t)i * es, value, es);
    return 0;
}

static int range_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *start = c->inputs[0], *delta = c->inputs[2];
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    switch (y->dtype) {
#define RANGE_CASE_(DT, T)                                                                      \
    case DT: {                                                                                  \
        T s = *(const T *)start->data, d = *(const T *)delta->data;                             \
        for (int64_t i = 0; i < n; i++)                                                         \
            ((T *)y->data)[i] = (T)(s + (T)i * d);                                              \
        return 0;                                                                               \
    }
        RANGE_CASE_(ENG_DT_FLOAT, float)
        RANGE_CASE_(ENG_DT_DOUBLE, double)
        RANGE_CASE_(ENG_DT_INT16, int16_t)
        RANGE_CASE_(ENG_DT_INT32, int32_t)
        RANGE_CASE_(ENG_DT_INT64, int64_t)
#undef RANGE_CASE_
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                          eng_dtype_name(y->dtype));
    }
}

static int constant_run(eng_op_ctx_t *c)
{
    eng_tensor_t v;
    int rc = eng_constant_params(c, &v);
    if (rc == 0 && eng_tensor_bytes(&v) > 0)
        memcpy(c->outputs[0]->data, v.data, eng_tensor_bytes(&v));
    return rc;
}

/* --- the kernels ------------------------------------------------------------------------- */

#define SHAPE_KERNEL_(op, fn) const eng_kernel_t eng_cpu_##op = {.run = fn};
ENG_SHAPE_KERNEL_RUNS(SHAPE_KERNEL_)
SHAPE_KERNEL_(Shape, shape_run)
SHAPE_KERNEL_(Size, size_run)
SHAPE_KERNEL_(ConstantOfShape, constant_of_shape_run)
SHAPE_KERNEL_(Range, range_run)
SHAPE_KERNEL_(DepthToSpace, depth_to_space_run)
SHAPE_KERNEL_(SpaceToDepth, space_to_depth_run)
SHAPE_KERNEL_(Constant, constant_run)
#undef SHAPE_KERNEL_
