/* index_kernels.c -- CPU kernels of the index ops of engine/ops/index.c:
 * the scatters, OneHot, EyeLike, ReverseSequence and CenterCropPad.
 *
 * The scatters copy data to the output (nothing when the planner ran them
 * in place) and then apply the updates in order, so of duplicate indices
 * without a reduction the last update wins, as in ONNX's reference; with a
 * reduction every update is folded in (float max and min propagate NaN, as
 * numpy's maximum does; integers wrap). Every index is checked before
 * anything is written: a bad one fails the run naming it, the output
 * untouched. The other ops move elements by size, whatever their dtype. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/ops/index_impl.h"

/* Index i of idx (int32 or int64), made non-negative for a dim of size
 * dim; FS_EINVAL naming it when out of [-dim, dim). */
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

/* Output 0 = input 0, unless they are one buffer. */
static void copy_data(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    if (y->data != x->data && eng_tensor_bytes(y) > 0)
        memcpy(y->data, x->data, eng_tensor_bytes(y));
}

/* --- reductions ------------------------------------------------------------------------------ */

/* dst[i] = dst[i] (reduce) src[i] for n elements of one dtype. */
typedef void (*fold_fn)(void *dst, const void *src, int64_t n, eng_scatter_reduce_t r);

/* max and min: NaN propagates (op F, the float types); integers (op I). */
#define MAX_F_(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define MIN_F_(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
#define MAX_I_(a, b) ((a) > (b) ? (a) : (b))
#define MIN_I_(a, b) ((a) < (b) ? (a) : (b))
#define FOLD_FN_(op, DT, T, UT, S, LO, HI)                                                    \
    static void fold_##S(void *dst, const void *src, int64_t n, eng_scatter_reduce_t r)       \
    {                                                                                         \
        T *d = dst;                                                                           \
        const T *s = src;                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T a = d[i], b = s[i];                                                             \
            switch (r) {                                                                      \
            case ENG_SCATTER_ADD: d[i] = (T)((UT)a + (UT)b); break;                           \
            case ENG_SCATTER_MUL: d[i] = (T)((UT)a * (UT)b); break;                           \
            case ENG_SCATTER_MAX: d[i] = MAX_##op##_(a, b); break;                            \
            case ENG_SCATTER_MIN: d[i] = MIN_##op##_(a, b); break;                            \
            default: d[i] = b; break;                                                         \
            }                                                                                 \
        }                                                                                     \
    }
EW_FLOAT_TYPES(FOLD_FN_, F)
EW_SINT_TYPES(FOLD_FN_, I)
EW_UINT_TYPES(FOLD_FN_, I)
#undef FOLD_FN_

/* The fold for dt (a dtype the definitions admit for a reduction). */
static fold_fn fold_for(eng_dtype_t dt)
{
    switch (dt) {
#define FOLD_CASE_(op, DT, T, UT, S, LO, HI)                                                  \
    case DT: return fold_##S;
        EW_NUM_TYPES(FOLD_CASE_, _)
#undef FOLD_CASE_
    default: return NULL;
    }
}

/* n elements of es bytes at src into dst, replaced or folded. */
static void put(void *dst, const void *src, int64_t n, size_t es, fold_fn fold,
                eng_scatter_reduce_t r)
{
    if (r == ENG_SCATTER_NONE)
        memcpy(dst, src, (size_t)n * es);
    else
        fold(dst, src, n, r);
}

/* Ready for a scatter of reduction r over dtype dt: its fold, or FS_ENOTSUP. */
static int scatter_fold(const eng_op_ctx_t *c, eng_dtype_t dt, eng_scatter_reduce_t r,
                        fold_fn *fold)
{
    *fold = fold_for(dt);
    if (r != ENG_SCATTER_NONE && !*fold)
        return eng_op_err(c, FS_ENOTSUP, "reduction over dtype %s is not supported",
                          eng_dtype_name(dt));
    return 0;
}

/* --- ScatterND ------------------------------------------------------------------------------ */

/* The row update j lands on, checking its k indices. */
static int nd_target(const eng_op_ctx_t *c, const eng_scatter_nd_t *g, int64_t j, int64_t *at)
{
    const eng_tensor_t *idx = c->inputs[1];
    int64_t v;
    *at = 0;
    for (int t = 0; t < g->k; t++) {
        int rc = index_at(c, idx, j * g->k + t, g->dims[t], &v);
        if (rc)
            return rc;
        *at += v * g->strides[t];
    }
    return 0;
}

/* On a bad index, FS_EINVAL and the output is left unwritten. */
static int scatter_nd_run(eng_op_ctx_t *c)
{
    eng_scatter_nd_t g;
    fold_fn fold;
    int64_t at;
    int rc = eng_scatter_nd_params(c, &g);
    if (rc || (rc = scatter_fold(c, c->inputs[0]->dtype, g.reduce, &fold)) != 0)
        return rc;
    for (int64_t j = 0; j < g.n_rows; j++)
        if ((rc = nd_target(c, &g, j, &at)) != 0)
            return rc;
    copy_data(c);
    size_t es = eng_dtype_size(c->inputs[0]->dtype), block = (size_t)g.row * es;
    char *y = c->outputs[0]->data;
    const char *u = c->inputs[2]->data;
    for (int64_t j = 0; j < g.n_rows && block > 0; j++) {
        nd_target(c, &g, j, &at);
        put(y + (size_t)at * block, u + (size_t)j * block, g.row, es, fold, g.reduce);
    }
    return 0;
}

/* --- ScatterElements, Scatter -------------------------------------------------------------- */

/* On a bad index, FS_EINVAL and the output is left unwritten. */
static int scatter_el_run(eng_op_ctx_t *c)
{
    eng_scatter_el_t g;
    fold_fn fold;
    int64_t v;
    int rc = eng_scatter_el_params(c, &g);
    if (rc || (rc = scatter_fold(c, c->inputs[0]->dtype, g.reduce, &fold)) != 0)
        return rc;
    const eng_tensor_t *idx = c->inputs[1];
    for (int64_t e = 0; e < g.n; e++)
        if ((rc = index_at(c, idx, e, g.axis_dim, &v)) != 0)
            return rc;
    copy_data(c);
    size_t es = eng_dtype_size(c->inputs[0]->dtype);
    char *y = c->outputs[0]->data;
    const char *u = c->inputs[2]->data;
    int64_t pos[ENG_MAX_RANK] = {0};
    for (int64_t e = 0; e < g.n; e++) {
        index_at(c, idx, e, g.axis_dim, &v);
        int64_t off = 0;
        for (int d = 0; d < g.rank; d++)
            off += (d == g.axis ? v : pos[d]) * g.strides[d];
        put(y + (size_t)off * es, u + (size_t)e * es, 1, es, fold, g.reduce);
        for (int d = g.rank - 1; d >= 0 && ++pos[d] == g.dims[d]; d--)
            pos[d] = 0;
    }
    return 0;
}

/* --- TensorScatter -------------------------------------------------------------------------- */

/* Batch b's first cache position; FS_EINVAL when linear mode would write
 * past the cache (or before it). */
static int write_start(const eng_op_ctx_t *c, const eng_tensor_scatter_t *g, int64_t b,
                       int64_t *w)
{
    const eng_tensor_t *wi = eng_ctx_in(c, 2);
    *w = wi ? ((const int64_t *)wi->data)[b] : 0;
    if (!g->circular && (*w < 0 || *w > g->max_seq - g->seq))
        return eng_op_err(c, FS_EINVAL, "write_indices[%lld] is %lld: %lld updates from there "
                          "pass the cache's %lld positions (mode linear)", (long long)b,
                          (long long)*w, (long long)g->seq, (long long)g->max_seq);
    return 0;
}

/* On a bad write index, FS_EINVAL and the output is left unwritten. */
static int tensor_scatter_run(eng_op_ctx_t *c)
{
    eng_tensor_scatter_t g;
    int64_t w;
    int rc = eng_tensor_scatter_params(c, &g);
    if (rc)
        return rc;
    int64_t batch = g.per_batch ? g.outer / g.per_batch : 0;
    for (int64_t b = 0; b < batch; b++)
        if ((rc = write_start(c, &g, b, &w)) != 0)
            return rc;
    copy_data(c);
    size_t block = (size_t)g.inner * eng_dtype_size(c->inputs[0]->dtype);
    char *y = c->outputs[0]->data;
    const char *u = c->inputs[1]->data;
    for (int64_t o = 0; o < g.outer && block > 0; o++) {
        write_start(c, &g, o / g.per_batch, &w);
        for (int64_t s = 0; s < g.seq; s++) {
            int64_t p = w + s;
            if (g.circular)
                p = ((p % g.max_seq) + g.max_seq) % g.max_seq;
            memcpy(y + (size_t)(o * g.max_seq + p) * block, u + (size_t)(o * g.seq + s) * block,
                   block);
        }
    }
    return 0;
}

/* --- OneHot --------------------------------------------------------------------------------- */

/* Cannot fail past its parameters: an index out of range gives off. */
static int one_hot_run(eng_op_ctx_t *c)
{
    eng_one_hot_t g;
    int rc = eng_one_hot_params(c, &g);
    if (rc)
        return rc;
    const eng_tensor_t *idx = c->inputs[0], *values = c->inputs[2];
    size_t es = eng_dtype_size(values->dtype);
    const char *off = values->data, *on = off + es;
    char *y = c->outputs[0]->data;
    int64_t n = g.outer * g.depth * g.inner;
    for (int64_t e = 0; e < n; e++)
        memcpy(y + (size_t)e * es, off, es);
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t i = 0; i < g.inner; i++) {
            double v = trunc(eng_index_get_f64(idx, o * g.inner + i));
            if (v < 0)
                v += (double)g.depth;
            if (v >= 0 && v < (double)g.depth)
                memcpy(y + (size_t)((o * g.depth + (int64_t)v) * g.inner + i) * es, on, es);
        }
    return 0;
}

/* --- EyeLike -------------------------------------------------------------------------------- */

static int eye_like_run(eng_op_ctx_t *c)
{
    eng_dtype_t dt;
    int64_t k;
    unsigned char one[16];
    int rc = eng_eye_like_params(c, &dt, one, &k);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    size_t es = eng_dtype_size(dt);
    int64_t rows = y->shape.dims[0], cols = y->shape.dims[1];
    memset(y->data, 0, eng_tensor_bytes(y));
    for (int64_t i = 0; i < rows; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < cols)
            memcpy((char *)y->data + (size_t)(i * cols + j) * es, one, es);
    }
    return 0;
}

/* --- ReverseSequence ------------------------------------------------------------------------ */

/* A length outside [0, time] fails the run naming it, the output untouched. */
static int reverse_seq_run(eng_op_ctx_t *c)
{
    eng_reverse_seq_t g;
    int rc = eng_reverse_seq_params(c, &g);
    if (rc)
        return rc;
    const int64_t *lens = c->inputs[1]->data;
    int64_t batch = g.batch_first ? g.d0 : g.d1, time = g.batch_first ? g.d1 : g.d0;
    for (int64_t b = 0; b < batch; b++)
        if (lens[b] < 0 || lens[b] > time)
            return eng_op_err(c, FS_EINVAL, "sequence_lens[%lld] is %lld, outside [0, %lld]",
                              (long long)b, (long long)lens[b], (long long)time);
    size_t block = (size_t)g.inner * eng_dtype_size(c->inputs[0]->dtype);
    const char *x = c->inputs[0]->data;
    char *y = c->outputs[0]->data;
    for (int64_t a0 = 0; a0 < g.d0; a0++)
        for (int64_t a1 = 0; a1 < g.d1; a1++) {
            int64_t b = g.batch_first ? a0 : a1, t = g.batch_first ? a1 : a0;
            int64_t src = t < lens[b] ? lens[b] - 1 - t : t;
            int64_t s0 = g.batch_first ? a0 : src, s1 = g.batch_first ? src : a1;
            memcpy(y + (size_t)(a0 * g.d1 + a1) * block, x + (size_t)(s0 * g.d1 + s1) * block,
                   block);
        }
    return 0;
}

/* --- CenterCropPad -------------------------------------------------------------------------- */

/* Row by row of the output's last dim: the source row, if every outer
 * coordinate lands in the input, gives the part of the row that does. */
static int crop_pad_run(eng_op_ctx_t *c)
{
    eng_crop_pad_t g;
    int rc = eng_crop_pad_params(c, &g);
    if (rc)
        return rc;
    size_t es = eng_dtype_size(c->inputs[0]->dtype);
    const char *x = c->inputs[0]->data;
    char *y = c->outputs[0]->data;
    memset(y, 0, eng_tensor_bytes(c->outputs[0]));
    if (g.rank == 0) {
        memcpy(y, x, es);
        return 0;
    }
    int last = g.rank - 1;
    int64_t len = g.out.dims[last], rows = eng_shape_numel(&g.out) / (len ? len : 1);
    int64_t lo = -g.shift[last] > 0 ? -g.shift[last] : 0;   /* first output index read */
    int64_t hi = g.in[last] - g.shift[last] < len ? g.in[last] - g.shift[last] : len;
    int64_t pos[ENG_MAX_RANK] = {0};
    for (int64_t r = 0; r < rows && len > 0; r++) {
        int64_t src = 0;
        bool inside = true;
        for (int d = 0; d < last; d++) {
            int64_t s = pos[d] + g.shift[d];
            inside = inside && s >= 0 && s < g.in[d];
            src = src * g.in[d] + s;
        }
        if (inside && hi > lo)
            memcpy(y + (size_t)(r * len + lo) * es,
                   x + (size_t)(src * g.in[last] + lo + g.shift[last]) * es,
                   (size_t)(hi - lo) * es);
        for (int d = last - 1; d >= 0 && ++pos[d] == g.out.dims[d]; d--)
            pos[d] = 0;
    }
    return 0;
}

/* --- the kernels ---------------------------------------------------------------------------- */

const eng_kernel_t eng_cpu_ScatterND = {.run = scatter_nd_run};
const eng_kernel_t eng_cpu_ScatterElements = {.run = scatter_el_run};
const eng_kernel_t eng_cpu_Scatter = {.run = scatter_el_run};
const eng_kernel_t eng_cpu_TensorScatter = {.run = tensor_scatter_run};
const eng_kernel_t eng_cpu_OneHot = {.run = one_hot_run};
const eng_kernel_t eng_cpu_EyeLike = {.run = eye_like_run};
const eng_kernel_t eng_cpu_ReverseSequence = {.run = reverse_seq_run};
const eng_kernel_t eng_cpu_CenterCropPad = {.run = crop_pad_run};
