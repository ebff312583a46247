/* reduce_kernels.c -- CPU kernels of the reduce ops.
 *
 * Reduce*: the input's dims are coalesced into runs of reduced and kept
 * dims (size-1 dims dropped), the output is set to the reduction's
 * identity, and the input is streamed once in memory order: each innermost
 * run is either folded into one output element (reduced) or combined
 * element-wise into a row of outputs (kept). Mean and L2 then finish each
 * output element; LogSum takes the log of the sum. LogSumExp runs twice:
 * the max of each output's elements into the output, then the sum of
 * exp(x - max) into scratch, and each output is max + log(sum) (an
 * infinite max shifts by 0, so all -inf gives -inf and any +inf gives
 * +inf). A reduction over zero elements leaves the identity (0 for sums,
 * 1 for products, -inf/+inf or the type's min/max for max/min, NaN for a
 * float mean, -inf for the logs); an empty axes list with
 * noop_with_empty_axes reduces each element alone (so ReduceSumSquare
 * squares, ReduceL2 and ReduceL1 take the absolute value, as the ONNX
 * reference does). Integer sums and products wrap (computed unsigned), as
 * numpy's do.
 *
 * The axis ops (ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum/CumProd) view their input
 * as [outer, n, inner] and walk the axis with stride `inner`. Softmax
 * splits its outer * inner independent lines over ctx->n_threads threads;
 * each line's max and sum are taken within one chunk, so results do not
 * depend on the thread count. A float64 Softmax runs its lines on one
 * thread through eng_softmax_line_f64, all in double. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/through_float.h"
#include "engine/kernels.h"
#include "engine/ops/reduce_impl.h"

/* ---- Reduce* ------------------------------------------------------------ */

typedef struct red_layout {
    int n;                          /* runs, >= 1 */
    int64_t size[ENG_MAX_RANK];
    bool reduced[ENG_MAX_RANK];
    int64_t ostride[ENG_MAX_RANK];  /* output elements per step; 0 when reduced */
} red_layout_t;

/* The run layout of shape s reduced along `reduced`. Cannot fail. */
static void red_layout_build(const eng_shape_t *s, const bool *reduced, red_layout_t *L)
{
    L->n = 0;
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] == 1)
            continue;
        if (L->n > 0 && L->reduced[L->n - 1] == reduced[d]) {
            L->size[L->n - 1] *= s->dims[d];
        } else {
            L->size[L->n] = s->dims[d];
            L->reduced[L->n] = reduced[d];
            L->n++;
        }
    }
    if (L->n == 0) {
        L->n = 1;
        L->size[0] = 1;
        L->reduced[0] = false;
    }
    int64_t stride = 1;
    for (int g = L->n - 1; g >= 0; g--) {
        L->ostride[g] = L->reduced[g] ? 0 : stride;
        if (!L->reduced[g])
            stride *= L->size[g];
    }
}

/* Steps the odometer over L's runs before the last one (idx, one index a
 * run) to the next run, moving the output position *o with it. */
static inline void red_next_run(const red_layout_t *L, int64_t *idx, int64_t *o)
{
    for (int g = L->n - 2; g >= 0; g--) {
        *o += L->ostride[g];
        if (++idx[g] < L->size[g])
            return;
        *o -= L->ostride[g] * L->size[g];
        idx[g] = 0;
    }
}

/* Accumulation steps; U is the type the arithmetic runs in (unsigned for
 * integers, so overflow wraps instead of being undefined). */
#define RED_SUM(T, U, a, v) ((T)((U)(a) + (U)(v)))
#define RED_SUMSQ(T, U, a, v) ((T)((U)(a) + (U)(v) * (U)(v)))
#define RED_ABSSUM(T, U, a, v) ((T)((U)(a) + ((v) < 0 ? (U)0 - (U)(v) : (U)(v))))
#define RED_PROD(T, U, a, v) ((T)((U)(a) * (U)(v)))
#define RED_MAX(T, U, a, v) ((v) > (a) ? (v) : (a))
#define RED_MIN(T, U, a, v) ((v) < (a) ? (v) : (a))
/* Floats propagate NaN, as numpy's max and min do. */
#define RED_FMAX(T, U, a, v) ((v) > (a) || isnan(v) ? (v) : (a))
#define RED_FMIN(T, U, a, v) ((v) < (a) || isnan(v) ? (v) : (a))

/* Streams `total` input elements into `out` (already holding the identity)
 * along layout L. Cannot fail. */
#define RED_STREAM(fn, T, U, OP)                                                                   \
    static void fn(const red_layout_t *L, int64_t total, const T *restrict in, T *restrict out)    \
    {                                                                                              \
        int last = L->n - 1;                                                                       \
        int64_t inner = L->size[last];                                                            \
        int64_t idx[ENG_MAX_RANK] = {0};                                                           \
        int64_t o = 0;                                                                             \
        for (int64_t b = 0; b < total; b += inner) {                                               \
            const T *src = in + b;                                                                 \
            if (L->reduced[last]) {                                                                \
                T acc = out[o];                                                                    \
                for (int64_t j = 0; j < inner; j++)                                                \
                    acc = OP(T, U, acc, src[j]);                                                   \
                out[o] = acc;                                                                      \
            } else {                                                                               \
                T *dst = out + o;                                                                  \
                for (int64_t j = 0; j < inner; j++)                                                \
                    dst[j] = OP(T, U, dst[j], src[j]);                                             \
            }                                                                                      \
            red_next_run(L, idx, &o);                                                              \
        }                                                                                          \
    }

/* One typed driver per dtype: identity, stream, finish. Cannot fail. */
typedef enum red_kind {
    RED_K_SUM, RED_K_SUMSQ, RED_K_ABSSUM, RED_K_PROD, RED_K_MAX, RED_K_MIN
} red_kind_t;
typedef enum red_finish { RED_F_NONE, RED_F_MEAN, RED_F_SQRT, RED_F_LOG } red_finish_t;

#define RED_TYPED(sfx, T, U, MAXOP, MINOP, LOWEST, HIGHEST, MEAN, SQRT, LOG)                       \
    RED_STREAM(sum_##sfx, T, U, RED_SUM)                                                           \
    RED_STREAM(sumsq_##sfx, T, U, RED_SUMSQ)                                                       \
    RED_STREAM(abssum_##sfx, T, U, RED_ABSSUM)                                                     \
    RED_STREAM(prod_##sfx, T, U, RED_PROD)                                                         \
    RED_STREAM(max_##sfx, T, U, MAXOP)                                                             \
    RED_STREAM(min_##sfx, T, U, MINOP)                                                             \
    static void reduce_##sfx(red_kind_t k, red_finish_t f, const red_layout_t *L, int64_t total,   \
                             int64_t n_out, const T *in, T *out)                                   \
    {                                                                                              \
        T init = k == RED_K_PROD ? (T)1 : k == RED_K_MAX ? (LOWEST) : k == RED_K_MIN ? (HIGHEST)   \
                                                                                      : (T)0;      \
        for (int64_t i = 0; i < n_out; i++)                                                        \
            out[i] = init;                                                                         \
        switch (k) {                                                                               \
        case RED_K_SUM: sum_##sfx(L, total, in, out); break;                                       \
        case RED_K_SUMSQ: sumsq_##sfx(L, total, in, out); break;                                   \
        case RED_K_ABSSUM: abssum_##sfx(L, total, in, out); break;                                 \
        case RED_K_PROD: prod_##sfx(L, total, in, out); break;                                     \
        case RED_K_MAX: max_##sfx(L, total, in, out); break;                                       \
        case RED_K_MIN: min_##sfx(L, total, in, out); break;                                       \
        }                                                                                          \
        int64_t count = n_out ? total / n_out : 0;                                                 \
        for (int64_t i = 0; f != RED_F_NONE && i < n_out; i++)                                     \
            out[i] = f == RED_F_MEAN ? MEAN(T, out[i], count)                                      \
                     : f == RED_F_SQRT ? SQRT(T, U, out[i])                                        \
                                       : LOG(T, out[i]);                                           \
    }

#define RED_FMEAN(T, v, n) ((v) / (T)(n))
#define RED_FSQRT(T, U, v) sqrtf(v)
#define RED_DSQRT(T, U, v) sqrt(v)
#define RED_FLOG(T, v) logf(v)
#define RED_DLOG(T, v) log(v)
/* Integers have no LogSum (reduce.c refuses them): never reached. */
#define RED_ILOG(T, v) (v)
/* Integer mean truncates towards zero (numpy's mean, then the cast). */
#define RED_IMEAN(T, v, n) ((n) ? (T)((v) / (n)) : (T)0)
/* An integer sum of squares wraps (it accumulates in U): read as U it is
 * never negative, so its root is a number, and at most 2^(bits/2) fits T.
 * (Read as T, a wrapped sum was negative, and the cast of sqrt's NaN to an
 * integer undefined.) */
#define RED_ISQRT(T, U, v) ((T)sqrt((double)(U)(v)))

RED_TYPED(f32, float, float, RED_FMAX, RED_FMIN, -INFINITY, INFINITY, RED_FMEAN, RED_FSQRT,
          RED_FLOG)
RED_TYPED(f64, double, double, RED_FMAX, RED_FMIN, -INFINITY, INFINITY, RED_FMEAN, RED_DSQRT,
          RED_DLOG)
RED_TYPED(i32, int32_t, uint32_t, RED_MAX, RED_MIN, INT32_MIN, INT32_MAX, RED_IMEAN, RED_ISQRT,
          RED_ILOG)
RED_TYPED(i64, int64_t, uint64_t, RED_MAX, RED_MIN, INT64_MIN, INT64_MAX, RED_IMEAN, RED_ISQRT,
          RED_ILOG)
/* bool: max is any, min is all. */
RED_TYPED(u8, uint8_t, unsigned, RED_MAX, RED_MIN, 0, 1, RED_IMEAN, RED_ISQRT, RED_ILOG)

/* LogSumExp's second pass: adds exp(x - shift) into sums (zeroed), shift
 * being each output's max (0 where infinite), streamed along L as
 * RED_STREAM does. Cannot fail. */
#define LSE_TYPED(sfx, T, EXP, LOG)                                                                     \
    static void lse_stream_##sfx(const red_layout_t *L, int64_t total, const T *restrict in,      \
                                 const T *restrict max, T *restrict sums)                          \
    {                                                                                              \
        int last = L->n - 1;                                                                       \
        int64_t inner = L->size[last];                                                            \
        int64_t idx[ENG_MAX_RANK] = {0};                                                           \
        int64_t o = 0;                                                                             \
        for (int64_t b = 0; b < total; b += inner) {                                               \
            const T *src = in + b;                                                                 \
            if (L->reduced[last]) {                                                                \
                T acc = sums[o], m = isinf(max[o]) ? 0 : max[o];                                   \
                for (int64_t j = 0; j < inner; j++)                                                \
                    acc += EXP(src[j] - m);                                                        \
                sums[o] = acc;                                                                     \
            } else {                                                                               \
                for (int64_t j = 0; j < inner; j++)                                                \
                    sums[o + j] += EXP(src[j] - (isinf(max[o + j]) ? 0 : max[o + j]));            \
            }                                                                                      \
            red_next_run(L, idx, &o);                                                              \
        }                                                                                          \
    }                                                                                              \
    static void lse_##sfx(const red_layout_t *L, int64_t total, int64_t n_out, const T *in,        \
                          T *out, T *sums)                                                         \
    {                                                                                              \
        reduce_##sfx(RED_K_MAX, RED_F_NONE, L, total, n_out, in, out);                             \
        for (int64_t i = 0; i < n_out; i++)                                                        \
            sums[i] = 0;                                                                           \
        lse_stream_##sfx(L, total, in, out, sums);                                                 \
        for (int64_t i = 0; i < n_out; i++)                                                        \
            out[i] = (isinf(out[i]) ? 0 : out[i]) + LOG(sums[i]);                                  \
    }
LSE_TYPED(f32, float, expf, logf)
LSE_TYPED(f64, double, exp, log)

/* LogSumExp's scratch: one sum per output element. */
static size_t reduce_scratch(const eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    if (strcmp(c->node->op_type, "ReduceLogSumExp") != 0 || !c->outputs[0])
        return 0;
    return (size_t)eng_shape_numel(&c->outputs[0]->shape) * eng_dtype_size(c->outputs[0]->dtype);
}

/* Like every kernel here, it checks before it writes: on error the output
 * is untouched and the message names the node. */
static int reduce_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const char *op = c->node->op_type;
    red_kind_t k = RED_K_SUM;
    red_finish_t f = RED_F_NONE;
    if (strcmp(op, "ReduceL2") == 0)
        k = RED_K_SUMSQ, f = RED_F_SQRT;
    else if (strcmp(op, "ReduceMax") == 0)
        k = RED_K_MAX;
    else if (strcmp(op, "ReduceMean") == 0)
        f = RED_F_MEAN;
    else if (strcmp(op, "ReduceMin") == 0)
        k = RED_K_MIN;
    else if (strcmp(op, "ReduceProd") == 0)
        k = RED_K_PROD;
    else if (strcmp(op, "ReduceSumSquare") == 0)
        k = RED_K_SUMSQ;
    else if (strcmp(op, "ReduceL1") == 0)
        k = RED_K_ABSSUM;
    else if (strcmp(op, "ReduceLogSum") == 0)
        f = RED_F_LOG;
    bool lse = strcmp(op, "ReduceLogSumExp") == 0;
    eng_reduce_axes_t ax;
    int rc = eng_reduce_axes(c, &ax);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    red_layout_t L;
    red_layout_build(&x->shape, ax.reduced, &L);
    int64_t total = eng_shape_numel(&x->shape), n_out = eng_shape_numel(&y->shape);
    if (lse) {
        size_t need = reduce_scratch(c);
        if (c->scratch_bytes < need)
            return eng_op_scratch_err(c, need);
        if (x->dtype == ENG_DT_FLOAT)
            lse_f32(&L, total, n_out, x->data, y->data, c->scratch);
        else if (x->dtype == ENG_DT_DOUBLE)
            lse_f64(&L, total, n_out, x->data, y->data, c->scratch);
        else
            return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                              eng_dtype_name(x->dtype));
        return 0;
    }
    switch (x->dtype) {
    case ENG_DT_FLOAT: reduce_f32(k, f, &L, total, n_out, x->data, y->data); return 0;
    case ENG_DT_DOUBLE: reduce_f64(k, f, &L, total, n_out, x->data, y->data); return 0;
    case ENG_DT_INT32: reduce_i32(k, f, &L, total, n_out, x->data, y->data); return 0;
    case ENG_DT_INT64: reduce_i64(k, f, &L, total, n_out, x->data, y->data); return 0;
    case ENG_DT_BOOL: reduce_u8(k, f, &L, total, n_out, x->data, y->data); return 0;
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
    }
}

/* ---- ArgMax / ArgMin ---------------------------------------------------- */

/* y[o, i] = the index along n of the max (or min) of x[o, :, i]; ties go to
 * the first index, or the last with select_last_index. The running best is
 * re-read through y so the walk over x stays in memory order. */
#define ARG_TYPED(fn, T)                                                                           \
    static void fn(const T *restrict x, int64_t *restrict y, int64_t outer, int64_t n,             \
                   int64_t inner, bool is_max, bool last)                                          \
    {                                                                                              \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            const T *xo = x + o * n * inner;                                                       \
            int64_t *yo = y + o * inner;                                                           \
            memset(yo, 0, (size_t)inner * sizeof *yo);                                             \
            for (int64_t j = 1; j < n; j++) {                                                      \
                const T *row = xo + j * inner;                                                     \
                for (int64_t i = 0; i < inner; i++) {                                              \
                    T v = row[i], b = xo[yo[i] * inner + i];                                       \
                    bool better = is_max ? (last ? v >= b : v > b) : (last ? v <= b : v < b);      \
                    if (better)                                                                    \
                        yo[i] = j;                                                                 \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

ARG_TYPED(arg_f32, float)
ARG_TYPED(arg_f64, double)
ARG_TYPED(arg_i32, int32_t)
ARG_TYPED(arg_i64, int64_t)

static int arg_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    int axis;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &axis);
    if (rc)
        return rc;
    int64_t outer, n, inner;
    eng_axis_extent(&x->shape, axis, false, &outer, &n, &inner);
    bool is_max = strcmp(c->node->op_type, "ArgMax") == 0;
    bool last = eng_attr_i(c->node, "select_last_index", 0) != 0;
    int64_t *y = c->outputs[0]->data;
    switch (x->dtype) {
    case ENG_DT_FLOAT: arg_f32(x->data, y, outer, n, inner, is_max, last); return 0;
    case ENG_DT_DOUBLE: arg_f64(x->data, y, outer, n, inner, is_max, last); return 0;
    case ENG_DT_INT32: arg_i32(x->data, y, outer, n, inner, is_max, last); return 0;
    case ENG_DT_INT64: arg_i64(x->data, y, outer, n, inner, is_max, last); return 0;
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
    }
}

/* ---- Softmax / LogSoftmax ----------------------------------------------- */

/* A Softmax's operands and its [outer, n, inner] view. */
typedef struct softmax_job {
    const float *x;
    float *y;
    int64_t n, inner;
    bool log_out;
} softmax_job_t;

/* exp(x) for x <= 88 (Softmax passes x - max <= 0), branch-free so the
 * loops that call it vectorise (glibc's expf is a call per element: with
 * it, Softmax was a third of the transformer demo's time). Cephes' expf:
 * n = round(x log2 e) by the 1.5 * 2^23 trick, r = x - n ln 2 in two
 * parts (Cody-Waite), a degree-6 polynomial for e^r on [-ln2/2, ln2/2],
 * times 2^n built in the exponent bits. Within 1 ulp of the exact value
 * (measured against double exp on a 1e-4 grid over [-87.3, 88]). Below
 * -87.33 (where
 * 2^n would leave the normal range) it gives +0 instead of a denormal
 * under 1.2e-38; NaN stays NaN. */
static inline float softmax_exp(float x)
{
    const float lo = -87.33654f, hi = 88.0f;
    /* NaN clamps to lo too, so that n stays finite: converting NaN to an
     * integer is undefined. The result is x itself then (below). */
    const float xl = x >= lo ? x : lo, xc = xl > hi ? hi : xl;
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float y = p * scale;
    return x != x ? x : x < lo ? 0.0f : y;
}

/* Lanes of Softmax's partial maxima and sums along a contiguous line: the
 * loops over them vectorise, and the lanes combine in one fixed order, so
 * a line's result does not depend on where it sits or on the threads. */
#define SOFTMAX_LANES 16

/* One contiguous line (inner == 1) of n floats: y = softmax(x) or
 * log_softmax(x). Inlined into softmax_lines, so it is compiled for each
 * of that function's vector widths (EW_CLONES). Cannot fail. */
static inline __attribute__((always_inline)) void softmax_line_contig(const float *restrict xs, float *restrict ys, int64_t n,
                                bool log_out)
{
    /* A compare, not fmaxf (a libm call): they differ only on NaN, and a
     * NaN in the line makes every output of the line NaN through exp and
     * the sum either way. */
    float lane[SOFTMAX_LANES];
    for (int l = 0; l < SOFTMAX_LANES; l++)
        lane[l] = -INFINITY;
    const int64_t n_blk = n & ~(int64_t)(SOFTMAX_LANES - 1);
    for (int64_t b = 0; b < n_blk; b += SOFTMAX_LANES)
        for (int l = 0; l < SOFTMAX_LANES; l++)
            lane[l] = xs[b + l] > lane[l] ? xs[b + l] : lane[l];
    float max = -INFINITY;
    for (int l = 0; l < SOFTMAX_LANES; l++)
        max = lane[l] > max ? lane[l] : max;
    for (int64_t j = n_blk; j < n; j++)
        max = xs[j] > max ? xs[j] : max;
    for (int l = 0; l < SOFTMAX_LANES; l++)
        lane[l] = 0.0f;
    for (int64_t b = 0; b < n_blk; b += SOFTMAX_LANES)
        for (int l = 0; l < SOFTMAX_LANES; l++) {
            const float e = softmax_exp(xs[b + l] - max);
            ys[b + l] = e;
            lane[l] += e;
        }
    for (int64_t j = n_blk; j < n; j++) {
        ys[j] = softmax_exp(xs[j] - max);
        lane[j - n_blk] += ys[j];
    }
    for (int w = SOFTMAX_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    const float sum = lane[0];
    if (log_out) {
        /* (x - max) first: max + log(sum) would round away the small part
         * when the inputs are large. */
        const float log_sum = logf(sum);
        EW_LOOP(n, ys[i] = (xs[i] - max) - log_sum;);
    } else {
        const float inv = 1.0f / sum;
        EW_LOOP(n, ys[i] *= inv;);
    }
}

/* Normalises the lines x[o, :, i] with o * inner + i in [begin, end),
 * shifting by the max first so large inputs do not overflow the exp.
 * Cannot fail. */
EW_CLONES static void softmax_lines(void *arg, int64_t begin, int64_t end)
{
    const softmax_job_t *jb = arg;
    const float *restrict x = jb->x;
    float *restrict y = jb->y;
    const int64_t n = jb->n, inner = jb->inner;
    const bool log_out = jb->log_out;
    for (int64_t line = begin; line < end; line++) {
        const int64_t o = line / inner, i = line % inner;
        const float *xs = x + o * n * inner + i;
        float *ys = y + o * n * inner + i;
        if (inner == 1) {
            softmax_line_contig(xs, ys, n, log_out);
            continue;
        }
        float max = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            float v = xs[j * inner];
            max = v > max ? v : max;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float e = softmax_exp(xs[j * inner] - max);
            ys[j * inner] = e;
            sum += e;
        }
        if (log_out) {
            eng_log_softmax_line(xs, ys, n, inner, max, sum);
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = 0; j < n; j++)
                ys[j * inner] *= inv;
        }
    }
}

static int softmax_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    int64_t outer, n, inner;
    int rc = eng_softmax_extent(c, &outer, &n, &inner);
    if (rc)
        return rc;
    bool log_out = strcmp(c->node->op_type, "LogSoftmax") == 0;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE) {
        for (int64_t line = 0; line < outer * inner; line++) {
            int64_t at = line / inner * n * inner + line % inner;
            eng_softmax_line_f64((const double *)c->inputs[0]->data + at,
                                 (double *)c->outputs[0]->data + at, n, inner, log_out);
        }
        return 0;
    }
    softmax_job_t j = {c->inputs[0]->data, c->outputs[0]->data, n, inner, log_out};
    /* The exp dominates: a dozen operations per element. */
    eng_parallel_for(c->n_threads, outer * inner, eng_parallel_grain(n * 12), softmax_lines, &j);
    return 0;
}

/* ---- Hardmax --------------------------------------------------------------- */

/* Each [outer, n, inner] line through eng_hardmax_line (softmax's axis
 * rule: before opset 13 the dims from axis on are one line). */
static int hardmax_run(eng_op_ctx_t *c)
{
    int64_t outer, n, inner;
    int rc = eng_softmax_extent(c, &outer, &n, &inner);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    void *y = c->outputs[0]->data;
    if (n == 0)
        return 0;
    for (int64_t line = 0; line < outer * inner; line++) {
        int64_t at = line / inner * n * inner + line % inner;
        if (x->dtype == ENG_DT_DOUBLE)
            eng_hardmax_line_f64((const double *)x->data + at, (double *)y + at, n, inner);
        else
            eng_hardmax_line_f32((const float *)x->data + at, (float *)y + at, n, inner);
    }
    return 0;
}

/* ---- CumSum, CumProd ------------------------------------------------------ */

/* Row by row along the axis (rows of `inner` elements), from the far end
 * when reversed; an exclusive scan combines the previous row's input instead
 * of this one's, and starts from the identity (0 for sums, 1 for products).
 * Integers wrap (computed unsigned). */
#define CUMSCAN_TYPED(fn, T, U, OP, ID)                                                            \
    static void fn(const T *restrict x, T *restrict y, int64_t outer, int64_t n, int64_t inner,    \
                   bool exclusive, bool reverse)                                                   \
    {                                                                                              \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            for (int64_t k = 0; k < n; k++) {                                                      \
                int64_t at = reverse ? n - 1 - k : k, prev = reverse ? at + 1 : at - 1;            \
                T *dst = y + (o * n + at) * inner;                                                 \
                if (k == 0) {                                                                      \
                    for (int64_t i = 0; i < inner; i++)                                            \
                        dst[i] = exclusive ? (T)(ID) : x[(o * n + at) * inner + i];                \
                    continue;                                                                      \
                }                                                                                  \
                const T *src = x + (o * n + (exclusive ? prev : at)) * inner;                      \
                const T *acc = y + (o * n + prev) * inner;                                         \
                for (int64_t i = 0; i < inner; i++)                                                \
                    dst[i] = (T)((U)acc[i] OP (U)src[i]);                                          \
            }                                                                                      \
        }                                                                                          \
    }

#define CUMSCAN_TYPES(X)                                                                           \
    X(f32, float, float)                                                                           \
    X(f64, double, double)                                                                         \
    X(i32, int32_t, uint32_t)                                                                      \
    X(i64, int64_t, uint64_t)
#define CUMSCAN_BOTH(S, T, U)                                                                      \
    CUMSCAN_TYPED(cumsum_##S, T, U, +, 0)                                                          \
    CUMSCAN_TYPED(cumprod_##S, T, U, *, 1)
CUMSCAN_TYPES(CUMSCAN_BOTH)
#undef CUMSCAN_BOTH

/* CumSum and CumProd; the axis comes from input 1 (eng_cumsum_axis). */
static int cumscan_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    int axis;
    int rc = eng_cumsum_axis(c, &axis);
    if (rc)
        return rc;
    int64_t outer, n, inner;
    eng_axis_extent(&x->shape, axis, false, &outer, &n, &inner);
    bool exclusive = eng_attr_i(c->node, "exclusive", 0) != 0;
    bool reverse = eng_attr_i(c->node, "reverse", 0) != 0;
    bool prod = strcmp(c->node->op_type, "CumProd") == 0;
    void *y = c->outputs[0]->data;
#define CUMSCAN_CASE(S, T, U)                                                                      \
    if (x->dtype == (eng_dtype_t)dtype_of_##S) {                                                   \
        (prod ? cumprod_##S : cumsum_##S)(x->data, y, outer, n, inner, exclusive, reverse);        \
        return 0;                                                                                  \
    }
    enum { dtype_of_f32 = ENG_DT_FLOAT, dtype_of_f64 = ENG_DT_DOUBLE, dtype_of_i32 = ENG_DT_INT32,
           dtype_of_i64 = ENG_DT_INT64 };
    CUMSCAN_TYPES(CUMSCAN_CASE)
#undef CUMSCAN_CASE
    return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
}

#define KERNEL(op, fn) const eng_kernel_t eng_cpu_##op = {.run = fn}
/* Reduce*, Softmax and LogSoftmax take float16/bfloat16 through their
 * float code (engine/cpu/through_float.h): they ask for its scratch. */
#define KERNEL_HALF(op, fn, scratch)                                                               \
    const eng_kernel_t eng_cpu_##op = {.run = fn, .scratch_bytes = scratch}
KERNEL_HALF(ReduceL1, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceL2, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceLogSum, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceLogSumExp, reduce_run, reduce_scratch);
KERNEL_HALF(ReduceMax, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceMean, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceMin, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceProd, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceSum, reduce_run, eng_cpu_scratch_through_float);
KERNEL_HALF(ReduceSumSquare, reduce_run, eng_cpu_scratch_through_float);
KERNEL(ArgMax, arg_run);
KERNEL(ArgMin, arg_run);
KERNEL_HALF(Softmax, softmax_run, eng_cpu_scratch_through_float);
KERNEL_HALF(LogSoftmax, softmax_run, eng_cpu_scratch_through_float);
KERNEL(Hardmax, hardmax_run);
KERNEL(CumSum, cumscan_run);
KERNEL(CumProd, cumscan_run);
