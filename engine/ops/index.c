/* index.c -- definitions (validation, dtype and shape inference) of the
 * index ops: ScatterND, ScatterElements and Scatter, TensorScatter, OneHot,
 * EyeLike, ReverseSequence and CenterCropPad (Compress, NonZero and Unique,
 * whose shapes depend on values, are in select.c).
 *
 * Every infer sets only its outputs' dtypes and shapes, after all its
 * checks: on error no output is touched. The scatters' output is their data
 * input updated, so it may take over that input's buffer (in place). */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/ops/index_impl.h"
#include "engine/ops/shape_impl.h"
#include "engine/ops/value_hd.h"

/* Room for eng_shape_format of ENG_MAX_RANK dims. */
#define SHAPE_BUF 200

static const eng_dtype_t int64_only[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};
static const eng_dtype_t int32_int64[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};
/* The dtypes a scatter reduction computes in (every device has them). */
static const eng_dtype_t dt_reduce[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT8,   ENG_DT_INT16,
                                        ENG_DT_INT32, ENG_DT_INT64,  ENG_DT_UINT8,  ENG_DT_UINT16,
                                        ENG_DT_UINT32, ENG_DT_UINT64, ENG_DT_UNDEFINED};
/* Numbers OneHot reads its indices and depth from. */
static const eng_dtype_t dt_number[] = {
    ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,   ENG_DT_INT16,
    ENG_DT_INT32, ENG_DT_INT64,  ENG_DT_UINT8,   ENG_DT_UINT16,   ENG_DT_UINT32, ENG_DT_UINT64,
    ENG_DT_UNDEFINED};

double eng_index_get_f64(const eng_tensor_t *t, int64_t i)
{
    /* A bool byte reads as itself, not as 0 or 1 (eng_hd_load's rule). */
    if (t->dtype == ENG_DT_BOOL)
        return ((const uint8_t *)t->data)[i];
    return eng_hd_load(t->data, t->dtype, i);
}

/* --- scatters ------------------------------------------------------------------------------- */

/* The reduction attribute (opset 16 on; "none" before). 0, or FS_ENOTSUP
 * naming an unknown value, FS_EINVAL for one the opset lacks. */
static int scatter_reduction(const eng_node_t *n, int opset, eng_scatter_reduce_t *r)
{
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    *r = ENG_SCATTER_NONE;
    if (opset < 16)
        return 0;
    const char *v = eng_attr_s(n, "reduction", "none");
    for (int i = 0; i < 5; i++) {
        if (strcmp(v, names[i]) != 0)
            continue;
        if (i >= ENG_SCATTER_MAX && opset < 18)
            return ENG_NODE_ERR(n, FS_EINVAL, "reduction '%s' needs opset 18 (model opset %d)", v,
                                opset);
        *r = (eng_scatter_reduce_t)i;
        return 0;
    }
    return ENG_NODE_ERR(n, FS_ENOTSUP, "reduction '%s' is not supported (supported: none, add, "
                        "mul, max, min)", v);
}

static int scatter_check(const eng_node_t *n, int opset)
{
    eng_scatter_reduce_t r;
    return scatter_reduction(n, opset, &r);
}

/* data, indices (of `idx_dtypes`) and updates present, updates of data's
 * dtype; a reduction other than none needs a dtype it computes in. */
static int scatter_inputs(const eng_op_ctx_t *c, const eng_dtype_t *idx_dtypes,
                          eng_scatter_reduce_t *reduce)
{
    const eng_tensor_t *x, *idx, *upd;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", &x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "indices", &idx)) != 0 ||
        (rc = eng_shapeops_in_data(c, 2, "updates", &upd)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, idx_dtypes)) != 0 ||
        (rc = scatter_reduction(c->node, c->opset, reduce)) != 0)
        return rc;
    if (upd->dtype != x->dtype)
        return eng_op_err(c, FS_EINVAL, "updates have dtype %s, data %s",
                          eng_dtype_name(upd->dtype), eng_dtype_name(x->dtype));
    if (*reduce != ENG_SCATTER_NONE && (rc = eng_op_require_dtype(c, 0, dt_reduce)) != 0)
        return rc;
    return 0;
}

int eng_scatter_nd_params(const eng_op_ctx_t *c, eng_scatter_nd_t *g)
{
    int rc = scatter_inputs(c, int64_only, &g->reduce);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1], *upd = c->inputs[2];
    int r = x->shape.rank, q = idx->shape.rank;
    char b1[SHAPE_BUF], b2[SHAPE_BUF], b3[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&idx->shape, b2, sizeof b2);
    eng_shape_format(&upd->shape, b3, sizeof b3);
    if (r < 1 || q < 1)
        return eng_op_err(c, FS_EINVAL, "data %s and indices %s must each have rank 1 or more",
                          b1, b2);
    int64_t k = idx->shape.dims[q - 1];
    if (k > r)
        return eng_op_err(c, FS_EINVAL, "indices %s index %lld dims each, data %s has %d", b2,
                          (long long)k, b1, r);
    /* updates: the indices' shape without its last dim, then data's dims
     * after the indexed ones. */
    bool ok = upd->shape.rank == q - 1 + r - (int)k;
    for (int d = 0; ok && d < q - 1; d++)
        ok = upd->shape.dims[d] == idx->shape.dims[d];
    for (int d = (int)k; ok && d < r; d++)
        ok = upd->shape.dims[q - 1 + d - k] == x->shape.dims[d];
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "updates %s do not match indices %s and data %s (expected "
                          "the indices' dims but the last, then data's after the first %lld)",
                          b3, b2, b1, (long long)k);
    g->k = (int)k;
    g->row = 1;
    for (int d = (int)k; d < r; d++)
        g->row *= x->shape.dims[d];
    int64_t rows = 1;
    for (int t = g->k - 1; t >= 0; t--) {
        g->dims[t] = x->shape.dims[t];
        g->strides[t] = rows;
        rows *= g->dims[t];
    }
    g->n_rows = 1;
    for (int d = 0; d < q - 1; d++)
        g->n_rows *= idx->shape.dims[d];
    return 0;
}

int eng_scatter_el_params(const eng_op_ctx_t *c, eng_scatter_el_t *g)
{
    int rc = scatter_inputs(c, int32_int64, &g->reduce);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1], *upd = c->inputs[2];
    int r = x->shape.rank;
    char b1[SHAPE_BUF], b2[SHAPE_BUF], b3[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&idx->shape, b2, sizeof b2);
    eng_shape_format(&upd->shape, b3, sizeof b3);
    if (r < 1 || idx->shape.rank != r)
        return eng_op_err(c, FS_EINVAL, "indices %s must have data %s's rank (1 or more)", b2, b1);
    if (!eng_shape_equal(&idx->shape, &upd->shape))
        return eng_op_err(c, FS_EINVAL, "updates %s must have the indices' shape %s", b3, b2);
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), r, &g->axis)) != 0)
        return rc;
    for (int d = 0; d < r; d++)
        if (d != g->axis && idx->shape.dims[d] > x->shape.dims[d])
            return eng_op_err(c, FS_EINVAL, "indices %s pass data %s on dim %d (not the axis)", b2,
                              b1, d);
    g->rank = r;
    g->axis_dim = x->shape.dims[g->axis];
    g->n = 1;
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
        g->dims[d] = idx->shape.dims[d];
        g->strides[d] = s;
        s *= x->shape.dims[d];
        g->n *= g->dims[d];
    }
    return 0;
}

int eng_tensor_scatter_params(const eng_op_ctx_t *c, eng_tensor_scatter_t *g)
{
    const eng_tensor_t *x, *upd;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "past_cache", &x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "update", &upd)) != 0)
        return rc;
    const char *mode = eng_attr_s(c->node, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return eng_op_err(c, FS_ENOTSUP, "mode '%s' is not supported (supported: linear, "
                          "circular)", mode);
    g->circular = mode[0] == 'c';
    int r = x->shape.rank, axis;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&upd->shape, b2, sizeof b2);
    if (upd->dtype != x->dtype)
        return eng_op_err(c, FS_EINVAL, "update has dtype %s, past_cache %s",
                          eng_dtype_name(upd->dtype), eng_dtype_name(x->dtype));
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -2), r, &axis)) != 0)
        return rc;
    if (axis == 0)
        return eng_op_err(c, FS_EINVAL, "axis is the batch dim 0 of past_cache %s; the sequence "
                          "axis must come after it", b1);
    bool ok = upd->shape.rank == r;
    for (int d = 0; ok && d < r; d++)
        ok = d == axis ? upd->shape.dims[d] <= x->shape.dims[d]
                       : upd->shape.dims[d] == x->shape.dims[d];
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "update %s does not fit past_cache %s (equal dims, but "
                          "at most as long on axis %d)", b2, b1, axis);
    const eng_tensor_t *w = eng_ctx_in(c, 2);
    if (w) {
        if ((rc = eng_op_require_dtype(c, 2, int64_only)) != 0)
            return rc;
        if (w->shape.rank != 1 || w->shape.dims[0] != x->shape.dims[0]) {
            char b3[SHAPE_BUF];
            return eng_op_err(c, FS_EINVAL, "write_indices %s must be [%lld], one per batch",
                              eng_shape_format(&w->shape, b3, sizeof b3),
                              (long long)x->shape.dims[0]);
        }
    }
    g->outer = 1;
    g->per_batch = 1;
    g->inner = 1;
    for (int d = 0; d < axis; d++) {
        g->outer *= x->shape.dims[d];
        if (d > 0)
            g->per_batch *= x->shape.dims[d];
    }
    for (int d = axis + 1; d < r; d++)
        g->inner *= x->shape.dims[d];
    g->max_seq = x->shape.dims[axis];
    g->seq = upd->shape.dims[axis];
    return 0;
}

/* Output 0: input 0's dtype and shape, once `params` accepts the node. */
#define SCATTER_INFER_(name, type, params)                                                 \
    static int name(eng_op_ctx_t *c)                                                       \
    {                                                                                      \
        type g;                                                                            \
        int rc = params(c, &g);                                                            \
        if (rc)                                                                            \
            return rc;                                                                     \
        eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &c->inputs[0]->shape);                  \
        return 0;                                                                          \
    }
SCATTER_INFER_(scatter_nd_infer, eng_scatter_nd_t, eng_scatter_nd_params)
SCATTER_INFER_(scatter_el_infer, eng_scatter_el_t, eng_scatter_el_params)
SCATTER_INFER_(tensor_scatter_infer, eng_tensor_scatter_t, eng_tensor_scatter_params)
#undef SCATTER_INFER_

static int tensor_scatter_check(const eng_node_t *n, int opset)
{
    (void)opset;
    const char *mode = eng_attr_s(n, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return ENG_NODE_ERR(n, FS_ENOTSUP, "mode '%s' is not supported (supported: linear, "
                            "circular)", mode);
    return 0;
}

/* --- OneHot ----------------------------------------------------------------------------------- */

int eng_one_hot_params(const eng_op_ctx_t *c, eng_one_hot_t *g)
{
    const eng_tensor_t *idx, *depth, *values;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "indices", &idx)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "depth", &depth)) != 0 ||
        (rc = eng_shapeops_in_data(c, 2, "values", &values)) != 0 ||
        (rc = eng_op_require_dtype(c, 0, dt_number)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, dt_number)) != 0)
        return rc;
    char b[SHAPE_BUF];
    if (values->shape.rank != 1 || values->shape.dims[0] != 2)
        return eng_op_err(c, FS_EINVAL, "values %s must be [2] (off, on)",
                          eng_shape_format(&values->shape, b, sizeof b));
    if (depth->shape.rank > 1 || eng_shape_numel(&depth->shape) != 1)
        return eng_op_err(c, FS_EINVAL, "depth %s must hold one value",
                          eng_shape_format(&depth->shape, b, sizeof b));
    int r = idx->shape.rank, axis;
    if (r + 1 > ENG_MAX_RANK)
        return eng_op_err(c, FS_ENOTSUP, "the output would have rank %d; at most %d is supported",
                          r + 1, ENG_MAX_RANK);
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -1), r + 1, &axis)) != 0)
        return rc;
    if (!depth->data)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input 1 (depth), "
                          "which is not known before running");
    double dv = eng_index_get_f64(depth, 0);
    if (!(dv >= 1.0 && dv <= (double)ENG_NUMEL_MAX))
        return eng_op_err(c, FS_EINVAL, "depth is %g; it must be 1 or more", dv);
    g->depth = (int64_t)dv;
    g->outer = 1;
    g->inner = 1;
    g->out.rank = r + 1;
    for (int d = 0, s = 0; d <= r; d++) {
        if (d == axis) {
            g->out.dims[d] = g->depth;
            continue;
        }
        g->out.dims[d] = idx->shape.dims[s];
        if (d < axis)
            g->outer *= idx->shape.dims[s];
        else
            g->inner *= idx->shape.dims[s];
        s++;
    }
    return 0;
}

static int one_hot_infer(eng_op_ctx_t *c)
{
    eng_one_hot_t g;
    int rc = eng_one_hot_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[2]->dtype, &g.out);
    return 0;
}

/* --- EyeLike ---------------------------------------------------------------------------------- */

int eng_eye_like_params(const eng_op_ctx_t *c, eng_dtype_t *dtype, void *one, int64_t *k)
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "input", &x);
    if (rc)
        return rc;
    if (x->shape.rank != 2) {
        char b[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "input %s must be 2-D",
                          eng_shape_format(&x->shape, b, sizeof b));
    }
    int64_t dt = eng_attr_i(c->node, "dtype", x->dtype);
    memset(one, 0, 16);
    switch (dt) {
    case ENG_DT_FLOAT: *(float *)one = 1.0f; break;
    case ENG_DT_DOUBLE: *(double *)one = 1.0; break;
    case ENG_DT_FLOAT16: *(uint16_t *)one = eng_float_to_half(1.0f); break;
    case ENG_DT_BFLOAT16: *(uint16_t *)one = eng_float_to_bf16(1.0f); break;
    case ENG_DT_INT8:
    case ENG_DT_UINT8:
    case ENG_DT_BOOL: *(uint8_t *)one = 1; break;
    case ENG_DT_INT16:
    case ENG_DT_UINT16: *(uint16_t *)one = 1; break;
    case ENG_DT_INT32:
    case ENG_DT_UINT32: *(uint32_t *)one = 1; break;
    case ENG_DT_INT64:
    case ENG_DT_UINT64: *(uint64_t *)one = 1; break;
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s (%lld) is not supported",
                          eng_dtype_name((eng_dtype_t)dt), (long long)dt);
    }
    *dtype = (eng_dtype_t)dt;
    *k = eng_attr_i(c->node, "k", 0);
    return 0;
}

static int eye_like_check(const eng_node_t *n, int opset)
{
    (void)opset;
    const eng_attr_t *a = eng_node_attr(n, "dtype");
    if (!a)
        return 0;
    int64_t dt = eng_attr_i(n, "dtype", 0);
    if (dt == ENG_DT_UNDEFINED || dt == ENG_DT_STRING || dt < 0 || dt > ENG_DT_BFLOAT16 ||
        dt == ENG_DT_COMPLEX64 || dt == ENG_DT_COMPLEX128)
        return ENG_NODE_ERR(n, FS_ENOTSUP, "dtype %s (%lld) is not supported",
                            eng_dtype_name((eng_dtype_t)dt), (long long)dt);
    return 0;
}

static int eye_like_infer(eng_op_ctx_t *c)
{
    eng_dtype_t dt;
    int64_t k;
    unsigned char one[16];
    int rc = eng_eye_like_params(c, &dt, one, &k);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, dt, &c->inputs[0]->shape);
    return 0;
}

/* --- ReverseSequence -------------------------------------------------------------------------- */

int eng_reverse_seq_params(const eng_op_ctx_t *c, eng_reverse_seq_t *g)
{
    const eng_tensor_t *x, *lens;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "input", &x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "sequence_lens", &lens)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, int64_only)) != 0)
        return rc;
    int64_t ba = eng_attr_i(c->node, "batch_axis", 1), ta = eng_attr_i(c->node, "time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return eng_op_err(c, FS_EINVAL, "batch_axis %lld and time_axis %lld must be 0 and 1, one "
                          "each", (long long)ba, (long long)ta);
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&lens->shape, b2, sizeof b2);
    if (x->shape.rank < 2)
        return eng_op_err(c, FS_EINVAL, "input %s must have rank 2 or more", b1);
    int64_t batch = x->shape.dims[ba];
    if (lens->shape.rank != 1 || lens->shape.dims[0] != batch)
        return eng_op_err(c, FS_EINVAL, "sequence_lens %s must be [%lld], one per batch of input "
                          "%s", b2, (long long)batch, b1);
    g->batch_first = ba == 0;
    g->d0 = x->shape.dims[0];
    g->d1 = x->shape.dims[1];
    g->inner = 1;
    for (int d = 2; d < x->shape.rank; d++)
        g->inner *= x->shape.dims[d];
    return 0;
}

static int reverse_seq_infer(eng_op_ctx_t *c)
{
    eng_reverse_seq_t g;
    int rc = eng_reverse_seq_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &c->inputs[0]->shape);
    return 0;
}

/* --- CenterCropPad ---------------------------------------------------------------------------- */

int eng_crop_pad_params(const eng_op_ctx_t *c, eng_crop_pad_t *g)
{
    const eng_tensor_t *x, *sh;
    int64_t n;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "input_data", &x)) != 0 ||
        (rc = eng_shapeops_in_ints(c, 1, "shape", true, &sh, &n)) != 0)
        return rc;
    int r = x->shape.rank, axes[ENG_MAX_RANK];
    size_t n_axes = (size_t)r;
    const int64_t *attr = eng_attr_ints(c->node, "axes", &n_axes);
    if (!attr)
        n_axes = (size_t)r;
    if (n_axes > (size_t)r)
        return eng_op_err(c, FS_EINVAL, "axes lists %zu axes for rank %d", n_axes, r);
    bool seen[ENG_MAX_RANK] = {false};
    for (size_t i = 0; i < n_axes; i++) {
        if (!attr) {
            axes[i] = (int)i;
            continue;
        }
        if ((rc = eng_op_axis(c, attr[i], r, &axes[i])) != 0)
            return rc;
        if (seen[axes[i]])
            return eng_op_err(c, FS_EINVAL, "axis %lld is listed twice in axes",
                              (long long)attr[i]);
        seen[axes[i]] = true;
    }
    if (n != (int64_t)n_axes)
        return eng_op_err(c, FS_EINVAL, "shape holds %lld sizes for %zu axes", (long long)n,
                          n_axes);
    g->rank = r;
    g->out = x->shape;
    for (int d = 0; d < r; d++) {
        g->in[d] = x->shape.dims[d];
        g->shift[d] = 0;
    }
    for (size_t i = 0; i < n_axes; i++) {
        int d = axes[i];
        int64_t want = eng_tensor_get_i64(sh, (int64_t)i), dim = x->shape.dims[d];
        if (want < 0 || want > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "shape[%zu] is %lld; sizes must be 0 or more", i,
                              (long long)want);
        /* Crop from floor((dim - want) / 2), pad floor((want - dim) / 2)
         * before: the reference's centring, extra element at the end. */
        g->shift[d] = want < dim ? (dim - want) / 2 : -((want - dim) / 2);
        g->out.dims[d] = want;
    }
    return 0;
}

static int crop_pad_infer(eng_op_ctx_t *c)
{
    eng_crop_pad_t g;
    int rc = eng_crop_pad_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &g.out);
    return 0;
}

/* --- the definitions -------------------------------------------------------------------------- */

ENG_OP_DEF(ScatterND, scatter_check, scatter_nd_infer, 0);
ENG_OP_DEF(ScatterElements, scatter_check, scatter_el_infer, 0);
ENG_OP_DEF(Scatter, NULL, scatter_el_infer, 0);
ENG_OP_DEF(TensorScatter, tensor_scatter_check, tensor_scatter_infer, 0);
ENG_OP_DEF(OneHot, NULL, one_hot_infer, -1);
ENG_OP_DEF(EyeLike, eye_like_check, eye_like_infer, -1);
ENG_OP_DEF(ReverseSequence, NULL, reverse_seq_infer, -1);
ENG_OP_DEF(CenterCropPad, NULL, crop_pad_infer, -1);
