/* misc_kernels.c -- CPU kernels of the misc ops: TopK, Trilu, Resize (and Upsample).
 *
 * Resize builds, per axis, a table of taps for every output coordinate
 * (input offsets and weights, neighbours that clamp to the same input index
 * merged, zero weights dropped; misc_impl.h says how the taps are chosen),
 * then computes the output a row (the last axis) at a time: for each
 * combination of the outer axes' taps, the row gains the weighted sum of
 * the last axis's taps. Axes that are not resized get one tap of weight 1,
 * so an element costs the product of the resized axes' tap counts. The tables
 * live in the kernel's scratch, bounded from the shapes alone: an axis of
 * `in` elements resized to `out` has a scale of at least (out - 0.5) / in,
 * which bounds an antialiasing filter's width.
 *
 * TopK ranks every numeric dtype (int8..int64, uint8..uint64, float16,
 * bfloat16, float, double) natively: each element of a slice becomes an
 * order-preserving unsigned 64-bit key (integers exactly, floats through
 * eng_topk_float_key: NaN above every number, -0 equal to +0), complemented
 * for `largest`, and the slice's (key, index) pairs are sorted in scratch,
 * equal keys by the lower index -- the order engine/cuda/misc.cu ranks in.
 * Values are copied from the input bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/ops/misc_impl.h"

/* ---- TopK --------------------------------------------------------------- */

/* A sort item: ascending items are the ranking (the key complemented for
 * `largest`, so equal keys still rank by the lower index). */
typedef struct topk_item {
    uint64_t key;
    int64_t idx;
} topk_item_t;

static int topk_cmp(const void *pa, const void *pb)
{
    const topk_item_t *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Fills items[0, n) with the keys of x[at0 + j * stride] xor `flip` (0 or
 * all ones) and their indices j. Cannot fail. */
typedef void (*topk_fill_fn)(const void *x, int64_t at0, int64_t stride, int64_t n,
                             uint64_t flip, topk_item_t *items);

/* Order-preserving keys: integers offset to unsigned (signed ones by
 * flipping the sign bit of their 64-bit value), floats by
 * eng_topk_float_key over their bits. */
#define TOPK_KEY_INT(T, v) ((uint64_t)(int64_t)(v) ^ (1ull << 63))
#define TOPK_KEY_UINT(T, v) ((uint64_t)(v))
#define TOPK_KEY_FLOAT(T, v) eng_topk_float_key((v), 0x80000000ull, 0x7f800000ull)
#define TOPK_KEY_DOUBLE(T, v) eng_topk_float_key((v), 1ull << 63, 0x7ff0000000000000ull)
#define TOPK_KEY_HALF(T, v) eng_topk_float_key((v), 0x8000u, 0x7c00u)
#define TOPK_KEY_BF16(T, v) eng_topk_float_key((v), 0x8000u, 0x7f80u)

/* T is the storage read (the floats' bits as unsigned integers). */
#define TOPK_FILL(NAME, T, KEY)                                                            \
    static void topk_fill_##NAME(const void *x, int64_t at0, int64_t stride, int64_t n,    \
                                 uint64_t flip, topk_item_t *items)                         \
    {                                                                                       \
        const T *p = (const T *)x + at0;                                                    \
        for (int64_t j = 0; j < n; j++) {                                                   \
            items[j].key = KEY(T, p[j * stride]) ^ flip;                                    \
            items[j].idx = j;                                                               \
        }                                                                                   \
    }
TOPK_FILL(i8, int8_t, TOPK_KEY_INT)
TOPK_FILL(i16, int16_t, TOPK_KEY_INT)
TOPK_FILL(i32, int32_t, TOPK_KEY_INT)
TOPK_FILL(i64, int64_t, TOPK_KEY_INT)
TOPK_FILL(u8, uint8_t, TOPK_KEY_UINT)
TOPK_FILL(u16, uint16_t, TOPK_KEY_UINT)
TOPK_FILL(u32, uint32_t, TOPK_KEY_UINT)
TOPK_FILL(u64, uint64_t, TOPK_KEY_UINT)
TOPK_FILL(f32, uint32_t, TOPK_KEY_FLOAT)
TOPK_FILL(f64, uint64_t, TOPK_KEY_DOUBLE)
TOPK_FILL(f16, uint16_t, TOPK_KEY_HALF)
TOPK_FILL(bf16, uint16_t, TOPK_KEY_BF16)
#undef TOPK_FILL

/* The fill of dtype dt; NULL for a dtype TopK does not rank. */
static topk_fill_fn topk_fill_of(eng_dtype_t dt)
{
    switch (dt) {
    case ENG_DT_INT8: return topk_fill_i8;
    case ENG_DT_INT16: return topk_fill_i16;
    case ENG_DT_INT32: return topk_fill_i32;
    case ENG_DT_INT64: return topk_fill_i64;
    case ENG_DT_UINT8: return topk_fill_u8;
    case ENG_DT_UINT16: return topk_fill_u16;
    case ENG_DT_UINT32: return topk_fill_u32;
    case ENG_DT_UINT64: return topk_fill_u64;
    case ENG_DT_FLOAT: return topk_fill_f32;
    case ENG_DT_DOUBLE: return topk_fill_f64;
    case ENG_DT_FLOAT16: return topk_fill_f16;
    case ENG_DT_BFLOAT16: return topk_fill_bf16;
    default: return NULL;
    }
}

/* One (key, index) pair per element along the axis. */
static size_t topk_scratch(const eng_op_ctx_t *c)
{
    int axis;
    int64_t k;
    if (eng_topk_params(c, &axis, &k))
        return 0; /* run reports the same error */
    return (size_t)c->inputs[0]->shape.dims[axis] * sizeof(topk_item_t);
}

/* Like every kernel here, it checks before it writes: on error the outputs
 * are untouched and the message names the node. */
static int topk_run(eng_op_ctx_t *c)
{
    int axis;
    int64_t k;
    int rc = eng_topk_params(c, &axis, &k);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    topk_fill_fn fill = topk_fill_of(x->dtype);
    if (!fill)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
    int64_t n = x->shape.dims[axis], outer = 1, inner = 1;
    for (int d = 0; d < x->shape.rank; d++)
        if (d != axis)
            *(d < axis ? &outer : &inner) *= x->shape.dims[d];
    if (k == 0 || outer * inner == 0)
        return 0;
    if (c->scratch_bytes < (size_t)n * sizeof(topk_item_t))
        return eng_op_scratch_err(c, (size_t)n * sizeof(topk_item_t));
    uint64_t flip = eng_attr_i(c->node, "largest", 1) != 0 ? ~0ull : 0;
    size_t es = eng_dtype_size(x->dtype);
    topk_item_t *items = c->scratch;
    eng_tensor_t *vals = c->n_outputs > 0 ? c->outputs[0] : NULL;
    eng_tensor_t *idxs = c->n_outputs > 1 ? c->outputs[1] : NULL;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t in0 = o * n * inner + i, out0 = o * k * inner + i;
            fill(x->data, in0, inner, n, flip, items);
            qsort(items, (size_t)n, sizeof *items, topk_cmp);
            for (int64_t j = 0; j < k; j++) {
                int64_t at = out0 + j * inner;
                if (idxs)
                    ((int64_t *)idxs->data)[at] = items[j].idx;
                if (vals) /* bit for bit: NaN payloads and -0 survive */
                    memcpy((char *)vals->data + (size_t)at * es,
                           (const char *)x->data + (size_t)(in0 + items[j].idx * inner) * es, es);
            }
        }
    }
    return 0;
}

/* ---- Trilu -------------------------------------------------------------- */

static int trilu_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    const eng_tensor_t *kt = eng_ctx_in(c, 1);
    int r = x->shape.rank;
    int64_t rows = x->shape.dims[r - 2], cols = x->shape.dims[r - 1];
    int64_t k = kt ? eng_tensor_get_i64(kt, 0) : 0;
    /* Beyond +-(rows + cols) every k means the same; clamping keeps i + k
     * from overflowing. */
    int64_t lim = rows + cols + 1;
    k = k < -lim ? -lim : k > lim ? lim : k;
    bool upper = eng_attr_i(c->node, "upper", 1) != 0;
    size_t es = eng_dtype_size(x->dtype);
    int64_t mats = rows * cols > 0 ? eng_shape_numel(&x->shape) / (rows * cols) : 0;
    const char *src = x->data;
    char *dst = c->outputs[0]->data;
    for (int64_t m = 0; m < mats; m++) {
        for (int64_t i = 0; i < rows; i++) {
            /* Kept columns: [lo, hi). */
            int64_t lo = upper ? i + k : 0, hi = upper ? cols : i + k + 1;
            lo = lo < 0 ? 0 : lo > cols ? cols : lo;
            hi = hi < lo ? lo : hi > cols ? cols : hi;
            size_t row = (size_t)((m * rows + i) * cols) * es;
            memset(dst + row, 0, (size_t)lo * es);
            memcpy(dst + row + (size_t)lo * es, src + row + (size_t)lo * es, (size_t)(hi - lo) * es);
            memset(dst + row + (size_t)hi * es, 0, (size_t)(cols - hi) * es);
        }
    }
    return 0;
}

/* ---- Resize ------------------------------------------------------------- */

typedef struct resize_axis {
    int64_t width;    /* tap slots per output coordinate */
    int64_t *count;   /* [out]: taps used; -1: extrapolate the element */
    int64_t *offset;  /* [out][width]: input index times the axis's stride */
    double *weight;   /* [out][width] */
} resize_axis_t;

/* Fills t (tables already carved) for axis d. Cannot fail. */
static void resize_axis_build(const eng_resize_geom_t *g, int d, int64_t stride, resize_axis_t *t)
{
    const eng_resize_attrs_t *a = &g->attrs;
    double s = g->scale[d];
    int64_t n = eng_resize_footprint(a, s);
    for (int64_t x = 0; x < g->out[d]; x++) {
        bool outside;
        double xo = eng_resize_source(g, d, x, g->roi_start[d], g->roi_end[d], &outside);
        t->count[x] = outside ? -1
                              : eng_resize_taps(a, n, g->in[d], s, stride, xo,
                                                t->offset + x * t->width,
                                                t->weight + x * t->width);
    }
}

/* One output row (all of the last axis) at outer output position `at`: for
 * each combination of the outer axes' taps, the row gains that weight times
 * the last axis's taps over the input row it selects. An element any axis
 * sends outside the input (tf_crop_and_resize) is extrapolation_value.
 * Cannot fail. */
static void resize_row(const eng_resize_geom_t *g, const resize_axis_t *ax, const int64_t *at,
                       const float *in, float *row)
{
    int r = g->rank, last = r - 1;
    const resize_axis_t *L = &ax[last];
    int64_t n = g->out[last];
    const int64_t *off[ENG_MAX_RANK];
    const double *wt[ENG_MAX_RANK];
    int64_t cnt[ENG_MAX_RANK], t[ENG_MAX_RANK];
    float fill = 0.0f;
    bool filled = false;
    for (int d = 0; d < last && !filled; d++) {
        cnt[d] = ax[d].count[at[d]];
        off[d] = ax[d].offset + at[d] * ax[d].width;
        wt[d] = ax[d].weight + at[d] * ax[d].width;
        t[d] = 0;
        if (cnt[d] <= 0) {
            fill = cnt[d] < 0 ? g->attrs.extrapolation : 0.0f;
            filled = true;
        }
    }
    for (int64_t x = 0; x < n; x++)
        row[x] = fill;
    if (filled)
        return;
    for (;;) {
        double w = 1.0;
        int64_t o = 0;
        for (int d = 0; d < last; d++) {
            w *= wt[d][t[d]];
            o += off[d][t[d]];
        }
        const float *src = in + o;
        for (int64_t x = 0; x < n; x++) {
            const int64_t *lo = L->offset + x * L->width;
            const double *lw = L->weight + x * L->width;
            double acc = 0.0;
            for (int64_t j = 0; j < L->count[x]; j++)
                acc += lw[j] * src[lo[j]];
            row[x] += (float)(w * acc);
        }
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++t[d] < cnt[d])
                break;
            t[d] = 0;
        }
        if (d < 0)
            break;
    }
    for (int64_t x = 0; x < n; x++)
        if (L->count[x] < 0)
            row[x] = g->attrs.extrapolation;
}

static int resize_run(eng_op_ctx_t *c)
{
    eng_resize_geom_t g;
    int rc = eng_resize_geom(c, &g);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    if (eng_shape_numel(&y->shape) == 0)
        return 0;
    resize_axis_t ax[ENG_MAX_RANK];
    size_t need = 0;
    for (int d = 0; d < g.rank; d++) {
        ax[d].width = eng_resize_width(&g.attrs, g.scale[d], g.in[d]);
        need += eng_resize_table_bytes(g.out[d], ax[d].width);
    }
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    char *p = c->scratch;
    int64_t stride = 1;
    for (int d = g.rank - 1; d >= 0; d--) {
        ax[d].count = (int64_t *)p;
        ax[d].offset = ax[d].count + g.out[d];
        ax[d].weight = (double *)(ax[d].offset + g.out[d] * ax[d].width);
        p += eng_resize_table_bytes(g.out[d], ax[d].width);
        resize_axis_build(&g, d, stride, &ax[d]);
        stride *= g.in[d];
    }
    const float *x = c->inputs[0]->data;
    float *out = y->data;
    /* rank >= 1: a scalar cannot carry scales or sizes, so geom failed. */
    int64_t at[ENG_MAX_RANK] = {0}, n_rows = eng_shape_numel(&y->shape) / g.out[g.rank - 1];
    for (int64_t e = 0; e < n_rows; e++) {
        resize_row(&g, ax, at, x, out + e * g.out[g.rank - 1]);
        for (int d = g.rank - 2; d >= 0 && ++at[d] == g.out[d]; d--)
            at[d] = 0;
    }
    return 0;
}

const eng_kernel_t eng_cpu_TopK = {.run = topk_run, .scratch_bytes = topk_scratch};
const eng_kernel_t eng_cpu_Trilu = {.run = trilu_run};
const eng_kernel_t eng_cpu_Resize = {.run = resize_run, .scratch_bytes = eng_resize_scratch_bytes};
const eng_kernel_t eng_cpu_Upsample = {.run = resize_run,
                                       .scratch_bytes = eng_resize_scratch_bytes};
