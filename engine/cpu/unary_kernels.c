/* unary_kernels.c -- CPU kernels of the unary ops: one loop per op and dtype
 * over the flat element range. Input and output have one shape and may share
 * memory (the planner runs these ops in place), so every loop reads element i
 * before it writes element i and nothing else. Large ranges are split over
 * ctx->n_threads threads at multiples of 16 elements, so every element goes
 * through the same (vector or scalar) code as in one thread. float16 and
 * bfloat16 run an op's float row through half_row (elementwise_impl.h:
 * converted a chunk at a time, rounded once). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/float8.h"
#include "engine/half.h"
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/ops/unary_impl.h"
#include "engine/strings.h"

typedef struct unary_attrs {
    float alpha, beta, gamma;
} unary_attrs_t;

/* A row over n elements of its dtype. */
typedef void (*typed_row_fn)(const void *xs, void *ys, int64_t n, const void *arg);

/* Elements per parallel unit: EW_LOOP's block, so a split never moves an
 * element from the vector loop to the scalar tail. */
#define UNARY_UNIT 16

/* One row over a flat range, run on sub-ranges. */
typedef struct unary_job {
    typed_row_fn row;
    const void *arg;
    const char *xs;
    char *ys;
    size_t x_size, y_size;  /* element sizes */
    int64_t n;              /* elements */
} unary_job_t;

static void unary_units(void *arg, int64_t begin, int64_t end)
{
    const unary_job_t *j = arg;
    int64_t lo = begin * UNARY_UNIT, hi = end * UNARY_UNIT < j->n ? end * UNARY_UNIT : j->n;
    j->row(j->xs + (size_t)lo * j->x_size, j->ys + (size_t)lo * j->y_size, hi - lo, j->arg);
}

/* Runs j's row over its n elements, split over up to n_threads threads when
 * n is large (ranges start at multiples of UNARY_UNIT). Cannot fail. */
static void unary_apply(int n_threads, const unary_job_t *j)
{
    eng_parallel_for(n_threads, (j->n + UNARY_UNIT - 1) / UNARY_UNIT,
                     eng_parallel_grain(4 * UNARY_UNIT), unary_units, (void *)j);
}

/* A row for one input dtype. via_float: dtype is float16 or bfloat16 and fn
 * the op's float row, run through half_row. */
typedef struct typed_row {
    eng_dtype_t dtype;
    typed_row_fn fn;
    bool via_float;
} typed_row_t;

#define ROW_ENTRY(op, DT, T, UT, S, LO, HI) {DT, op##_##S, false},
/* The half dtypes' entries: the float row `fn`. */
#define HALF_ENTRIES(fn) {ENG_DT_FLOAT16, fn, true}, {ENG_DT_BFLOAT16, fn, true},
#define ROWS_END {ENG_DT_UNDEFINED, NULL, false}

/* A float row on half data (elementwise_impl.h): the float op's row and
 * arg, the half dtype, and whether the output is of it (else the row's
 * own output type, bool for IsNaN and IsInf, is written as it is). */
typedef struct half_arg {
    typed_row_fn row;
    const void *arg;
    eng_dtype_t dt;
    bool out_half;
} half_arg_t;

/* Chunk by chunk: x to float, the float row in place, the result rounded
 * (or, for a bool output, written straight). Reads each chunk before
 * writing it, so it runs in place as the float rows do. */
EW_CLONES static void half_row(const void *xv, void *yv, int64_t n, const void *argv)
{
    const half_arg_t *h = argv;
    const uint16_t *xs = xv;
    float f[EW_HALF_CHUNK];
    for (int64_t off = 0; off < n; off += EW_HALF_CHUNK) {
        const int64_t m = n - off < EW_HALF_CHUNK ? n - off : EW_HALF_CHUNK;
        ew_half_to_float(h->dt, xs + off, f, m);
        if (!h->out_half) {
            h->row(f, (uint8_t *)yv + off, m, h->arg);
            continue;
        }
        h->row(f, f, m, h->arg);
        ew_float_to_half(h->dt, f, (uint16_t *)yv + off, m);
    }
}

/* Runs the row of x's dtype from `rows` into y, which must have dtype
 * out_dt (ENG_DT_UNDEFINED: x's dtype). 0, or FS_EINVAL / FS_ENOTSUP with
 * output untouched. */
static int run_rows(eng_op_ctx_t *c, const typed_row_t *rows, const void *arg, eng_dtype_t out_dt)
{
    eng_unary_io_t io;
    int rc = eng_unary_flat_io(c, &io);
    if (rc)
        return rc;
    for (const typed_row_t *r = rows; r->fn; r++)
        if (r->dtype == io.x->dtype) {
            if (out_dt == ENG_DT_UNDEFINED && io.y->dtype != io.x->dtype)
                return eng_op_err(c, FS_EINVAL, "output dtype %s differs from input dtype %s",
                                  eng_dtype_name(io.y->dtype), eng_dtype_name(io.x->dtype));
            if (out_dt != ENG_DT_UNDEFINED && io.y->dtype != out_dt)
                return eng_op_err(c, FS_EINVAL, "output dtype %s is not %s",
                                  eng_dtype_name(io.y->dtype), eng_dtype_name(out_dt));
            const half_arg_t h = {r->fn, arg, r->dtype, out_dt == ENG_DT_UNDEFINED};
            const unary_job_t j = {.row = r->via_float ? half_row : r->fn,
                                   .arg = r->via_float ? (const void *)&h : arg,
                                   .xs = io.x->data, .ys = io.y->data,
                                   .x_size = eng_dtype_size(io.x->dtype),
                                   .y_size = eng_dtype_size(io.y->dtype), .n = io.n};
            unary_apply(c->n_threads, &j);
            return 0;
        }
    return eng_unary_dtype_err(c, io.x->dtype);
}

/* The rows of ops whose output has the input's dtype. */
static int run_typed(eng_op_ctx_t *c, const typed_row_t *rows, const void *arg)
{
    return run_rows(c, rows, arg, ENG_DT_UNDEFINED);
}

/* A row applying EXPR (of x) to every element. */
#define TYPED_ROW(fn, T, EXPR)                                                          \
    EW_CLONES static void fn(const void *xv, void *yv, int64_t n, const void *arg)                \
    {                                                                                   \
        const T *xs = xv;                                                               \
        T *ys = yv;                                                                     \
        EW_LOOP(n, const T x = xs[i]; ys[i] = (T)(EXPR););                              \
    }

#define ABS_F(op, DT, T, UT, S, LO, HI) TYPED_ROW(abs_##S, T, fabs(x))
#define ABS_S(op, DT, T, UT, S, LO, HI) TYPED_ROW(abs_##S, T, x < 0 ? (T)(0 - (UT)x) : x)
#define ABS_U(op, DT, T, UT, S, LO, HI) TYPED_ROW(abs_##S, T, x)
#define NEG_F(op, DT, T, UT, S, LO, HI) TYPED_ROW(neg_##S, T, -x)
#define NEG_S(op, DT, T, UT, S, LO, HI) TYPED_ROW(neg_##S, T, 0 - (UT)x)
/* Sign keeps 0 (and -0) and NaN as they are. */
#define SIGN_F(op, DT, T, UT, S, LO, HI) TYPED_ROW(sign_##S, T, x > 0 ? 1 : x < 0 ? -1 : x)
#define SIGN_S(op, DT, T, UT, S, LO, HI) TYPED_ROW(sign_##S, T, (x > 0) - (x < 0))
#define SIGN_U(op, DT, T, UT, S, LO, HI) TYPED_ROW(sign_##S, T, x > 0)
/* Relu lets NaN through (x < 0 is false), as max(x, 0) does in numpy. */
#define RELU_FS(op, DT, T, UT, S, LO, HI) TYPED_ROW(relu_##S, T, x < 0 ? 0 : x)

EW_FLOAT_TYPES(ABS_F, abs)
EW_SINT_TYPES(ABS_S, abs)
EW_UINT_TYPES(ABS_U, abs)
EW_FLOAT_TYPES(NEG_F, neg)
EW_SINT_TYPES(NEG_S, neg)
EW_FLOAT_TYPES(SIGN_F, sign)
EW_SINT_TYPES(SIGN_S, sign)
EW_UINT_TYPES(SIGN_U, sign)
EW_FLOAT_TYPES(RELU_FS, relu)
EW_SINT_TYPES(RELU_FS, relu)
TYPED_ROW(not_b, uint8_t, !x)
#define BNOT(op, DT, T, UT, S, LO, HI) TYPED_ROW(bnot_##S, T, ~x)
EW_SINT_TYPES(BNOT, bnot)
EW_UINT_TYPES(BNOT, bnot)
#undef BNOT

static const typed_row_t abs_rows[] = {
    EW_FLOAT_TYPES(ROW_ENTRY, abs) EW_SINT_TYPES(ROW_ENTRY, abs) EW_UINT_TYPES(ROW_ENTRY, abs)
    HALF_ENTRIES(abs_f32) ROWS_END};
static const typed_row_t neg_rows[] = {
    EW_FLOAT_TYPES(ROW_ENTRY, neg) EW_SINT_TYPES(ROW_ENTRY, neg) HALF_ENTRIES(neg_f32) ROWS_END};
static const typed_row_t sign_rows[] = {
    EW_FLOAT_TYPES(ROW_ENTRY, sign) EW_SINT_TYPES(ROW_ENTRY, sign) EW_UINT_TYPES(ROW_ENTRY, sign)
    HALF_ENTRIES(sign_f32) ROWS_END};
static const typed_row_t relu_rows[] = {
    EW_FLOAT_TYPES(ROW_ENTRY, relu) EW_SINT_TYPES(ROW_ENTRY, relu) HALF_ENTRIES(relu_f32)
    ROWS_END};
static const typed_row_t not_rows[] = {{ENG_DT_BOOL, not_b, false}, ROWS_END};
static const typed_row_t bnot_rows[] = {
    EW_SINT_TYPES(ROW_ENTRY, bnot) EW_UINT_TYPES(ROW_ENTRY, bnot) ROWS_END};

/* One typed op: its run function (run_typed over its rows) and its kernel,
 * as BINARY_KERNEL does for the binary ops. */
#define TYPED_KERNEL(op, rows) ENG_CPU_KERNEL_CALLING(op, run_typed, rows, NULL)

TYPED_KERNEL(Abs, abs_rows)
TYPED_KERNEL(Neg, neg_rows)
TYPED_KERNEL(Sign, sign_rows)
TYPED_KERNEL(Relu, relu_rows)
TYPED_KERNEL(Not, not_rows)
TYPED_KERNEL(BitwiseNot, bnot_rows)
#undef TYPED_KERNEL

/* --- float and double ops --------------------------------------------------------- */

/* One row per element type (S, T) of a float op: EXPR of x and the
 * attributes, with UF/UO naming that type's functions (the float-and-double
 * ops). */
#define REAL_ROW(op, S, T, ALPHA, BETA, GAMMA, EXPR)                                    \
    EW_CLONES static void op##_##S(const void *xv, void *yv, int64_t n, const void *arg) \
    {                                                                                   \
        const unary_attrs_t *a = arg;                                                   \
        const T alpha = a->alpha, beta = a->beta, gamma = a->gamma;                     \
        (void)alpha, (void)beta, (void)gamma;                                           \
        const T *xs = xv;                                                               \
        T *ys = yv;                                                                     \
        EW_LOOP(n, const T x = xs[i]; ys[i] = (T)(EXPR););                              \
    }
#define REAL_ROW_F32(op, ALPHA, BETA, GAMMA, EXPR) REAL_ROW(op, f32, float, ALPHA, BETA, GAMMA, EXPR)
#define REAL_ROW_F64(op, ALPHA, BETA, GAMMA, EXPR) REAL_ROW(op, f64, double, ALPHA, BETA, GAMMA, EXPR)
#define UE float
#define UF(fn) fn##f
#define UO(fn) fn##_f32
ENG_UNARY_REAL_OPS(REAL_ROW_F32)
#undef UE
#undef UF
#undef UO
#define UE double
#define UF(fn) fn
#define UO(fn) fn##_f64
ENG_UNARY_REAL_OPS(REAL_ROW_F64)
#undef UE
#undef UF
#undef UO

/* The float32-only ops' rows (no double: see unary_impl.h). */
ENG_UNARY_FLOAT_OPS(REAL_ROW_F32)

/* An op's run function, reading the attributes with their ONNX defaults,
 * over its rows (float16 and bfloat16 through its float row), and its
 * kernel. */
#define UNARY_OP_RUN(op, ALPHA, BETA, GAMMA)                                            \
    static int op##_run(eng_op_ctx_t *c)                                                \
    {                                                                                   \
        const unary_attrs_t a = {eng_attr_f(c->node, "alpha", ALPHA),                   \
                                 eng_attr_f(c->node, "beta", BETA),                     \
                                 eng_attr_f(c->node, "gamma", GAMMA)};                  \
        return run_typed(c, op##_rows, &a);                                             \
    }                                                                                   \
    const eng_kernel_t eng_cpu_##op = {.run = op##_run};
#define FLOAT_OP(op, ALPHA, BETA, GAMMA, EXPR)                                          \
    static const typed_row_t op##_rows[] = {{ENG_DT_FLOAT, op##_f32, false},            \
                                            HALF_ENTRIES(op##_f32) ROWS_END};           \
    UNARY_OP_RUN(op, ALPHA, BETA, GAMMA)
#define REAL_OP(op, ALPHA, BETA, GAMMA, EXPR)                                           \
    static const typed_row_t op##_rows[] = {{ENG_DT_FLOAT, op##_f32, false},            \
                                            {ENG_DT_DOUBLE, op##_f64, false},           \
                                            HALF_ENTRIES(op##_f32) ROWS_END};           \
    UNARY_OP_RUN(op, ALPHA, BETA, GAMMA)
ENG_UNARY_FLOAT_OPS(FLOAT_OP)
ENG_UNARY_REAL_OPS(REAL_OP)
#undef FLOAT_OP
#undef REAL_OP
#undef UNARY_OP_RUN

EW_CLONES static void gelu_erf_f32(const void *xv, void *yv, int64_t n, const void *arg)
{
    const float *xs = xv;
    float *ys = yv;
    EW_LOOP(n, ys[i] = 0.5f * xs[i] * (1.0f + eng_erf_f32(xs[i] * 0.70710678118654752f)););
}

EW_CLONES static void gelu_tanh_f32(const void *xv, void *yv, int64_t n, const void *arg)
{
    const float *xs = xv;
    float *ys = yv;
    EW_LOOP(n, const float x = xs[i];
            ys[i] = 0.5f * x *
                    (1.0f + eng_tanh_f32(0.79788456080286536f * (x + 0.044715f * x * x * x))););
}

static const typed_row_t gelu_erf_rows[] = {{ENG_DT_FLOAT, gelu_erf_f32, false},
                                            HALF_ENTRIES(gelu_erf_f32) ROWS_END};
static const typed_row_t gelu_tanh_rows[] = {{ENG_DT_FLOAT, gelu_tanh_f32, false},
                                             HALF_ENTRIES(gelu_tanh_f32) ROWS_END};

static int gelu_run(eng_op_ctx_t *c)
{
    const char *approx = eng_attr_s(c->node, "approximate", "none");
    if (strcmp(approx, "tanh") == 0)
        return run_typed(c, gelu_tanh_rows, NULL);
    if (strcmp(approx, "none") == 0)
        return run_typed(c, gelu_erf_rows, NULL);
    return eng_op_err(c, FS_ENOTSUP, "approximate '%s' is not supported (none, tanh)", approx);
}
const eng_kernel_t eng_cpu_Gelu = {.run = gelu_run};

/* --- Shrink ------------------------------------------------------------------------ */

typedef struct shrink_arg {
    float lambd, bias;
} shrink_arg_t;

/* x < -lambd: x + bias; x > lambd: x - bias; else 0, compared and
 * computed in double, then converted to the element type as ONNX's
 * reference casts its float64 result back: integers through int64
 * (clamped to its range, so the conversion is always defined) and wrapped
 * into the type. */
static inline int64_t shrink_to_i64(double v)
{
    return v != v ? 0 : v <= -9.2233720368547758e18 ? INT64_MIN
                      : v >= 9.2233720368547758e18 ? INT64_MAX : (int64_t)v;
}
#define SHRINK_ROW_(S, T, CONV)                                                         \
    static void shrink_##S(const void *xv, void *yv, int64_t n, const void *argv)       \
    {                                                                                   \
        const shrink_arg_t *a = argv;                                                   \
        const double l = a->lambd, b = a->bias;                                         \
        const T *xs = xv;                                                               \
        T *ys = yv;                                                                     \
        EW_LOOP(n, const double x = (double)xs[i];                                      \
                ys[i] = CONV(T, x < -l ? x + b : x > l ? x - b : 0.0););                \
    }
#define SHRINK_F(op, DT, T, UT, S, LO, HI) SHRINK_ROW_(S, T, SHRINK_FLOAT_)
#define SHRINK_I(op, DT, T, UT, S, LO, HI) SHRINK_ROW_(S, T, SHRINK_INT_)
#define SHRINK_FLOAT_(T, v) ((T)(v))
#define SHRINK_INT_(T, v) ((T)(uint64_t)shrink_to_i64(v))
EW_FLOAT_TYPES(SHRINK_F, shrink)
EW_SINT_TYPES(SHRINK_I, shrink)
EW_UINT_TYPES(SHRINK_I, shrink)
static const typed_row_t shrink_rows[] = {EW_NUM_TYPES(ROW_ENTRY, shrink)
                                              HALF_ENTRIES(shrink_f32) ROWS_END};

static int shrink_run(eng_op_ctx_t *c)
{
    const shrink_arg_t a = {eng_attr_f(c->node, "lambd", 0.5f), eng_attr_f(c->node, "bias", 0.0f)};
    return run_typed(c, shrink_rows, &a);
}
const eng_kernel_t eng_cpu_Shrink = {.run = shrink_run};

/* --- IsNaN, IsInf ----------------------------------------------------------------- */

/* A float row to a bool row: the element's class. */
typedef struct isinf_arg {
    bool negative, positive;      /* detect_negative, detect_positive */
} isinf_arg_t;

#define CLASS_ROWS(op, DT, T, UT, S, LO, HI)                                              \
    EW_CLONES static void isnan_##S(const void *xv, void *yv, int64_t n, const void *arg)   \
    {                                                                                     \
        const T *xs = xv;                                                                 \
        uint8_t *ys = yv;                                                                 \
        EW_LOOP(n, const T x = xs[i]; ys[i] = x != x;);                                   \
    }                                                                                     \
    EW_CLONES static void isinf_##S(const void *xv, void *yv, int64_t n, const void *argv)  \
    {                                                                                     \
        const T *xs = xv;                                                                 \
        uint8_t *ys = yv;                                                                 \
        const isinf_arg_t *a = argv;                                                      \
        const bool neg = a->negative, pos = a->positive;                                  \
        EW_LOOP(n, const T x = xs[i];                                                     \
                ys[i] = (pos && x == (T)INFINITY) || (neg && x == -(T)INFINITY););        \
    }
EW_FLOAT_TYPES(CLASS_ROWS, unused)
#undef CLASS_ROWS

static const typed_row_t isnan_rows[] = {EW_FLOAT_TYPES(ROW_ENTRY, isnan)
                                             HALF_ENTRIES(isnan_f32) ROWS_END};
static const typed_row_t isinf_rows[] = {EW_FLOAT_TYPES(ROW_ENTRY, isinf)
                                             HALF_ENTRIES(isinf_f32) ROWS_END};

static int isnan_run(eng_op_ctx_t *c)
{
    return run_rows(c, isnan_rows, NULL, ENG_DT_BOOL);
}

static int isinf_run(eng_op_ctx_t *c)
{
    const isinf_arg_t a = {eng_attr_i(c->node, "detect_negative", 1) != 0,
                           eng_attr_i(c->node, "detect_positive", 1) != 0};
    return run_rows(c, isinf_rows, &a, ENG_DT_BOOL);
}

const eng_kernel_t eng_cpu_IsNaN = {.run = isnan_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cpu_IsInf = {.run = isinf_run, .scratch_bytes = NULL};

/* --- Clip ------------------------------------------------------------------------- */

/* Bounds of the input's type; NULL: unbounded on that side. */
typedef struct clip_bounds {
    const void *lo, *hi;
} clip_bounds_t;

/* min(max(x, lo), hi): with lo > hi every element becomes hi (as ONNX says);
 * NaN stays NaN. */
#define CLIP_ROW(op, DT, T, UT, S, LO, HI)                                              \
    static void clip_##S(const void *xv, void *yv, int64_t n, const void *arg)          \
    {                                                                                   \
        const clip_bounds_t *b = arg;                                                   \
        const T lo = b->lo ? *(const T *)b->lo : (T)LO;                                 \
        const T hi = b->hi ? *(const T *)b->hi : (T)HI;                                 \
        const T *xs = xv;                                                               \
        T *ys = yv;                                                                     \
        EW_LOOP(n, const T v = xs[i] < lo ? lo : xs[i]; ys[i] = v > hi ? hi : v;);       \
    }
EW_FLOAT_TYPES(CLIP_ROW, clip)
EW_SINT_TYPES(CLIP_ROW, clip)
EW_UINT_TYPES(CLIP_ROW, clip)
static const typed_row_t clip_rows[] = {
    EW_FLOAT_TYPES(ROW_ENTRY, clip) EW_SINT_TYPES(ROW_ENTRY, clip) EW_UINT_TYPES(ROW_ENTRY, clip)
    HALF_ENTRIES(clip_f32) ROWS_END};

/* A bound for the float row: a half input's value as a float in *f. */
static const void *clip_bound(const eng_tensor_t *x, const eng_tensor_t *b, float *f)
{
    if (!b || (x->dtype != ENG_DT_FLOAT16 && x->dtype != ENG_DT_BFLOAT16))
        return b ? b->data : NULL;
    ew_half_to_float(x->dtype, b->data, f, 1);
    return f;
}

/* Before opset 11 the bounds are float attributes; from 11, optional scalar
 * inputs of the input's type. */
static int clip_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *lo, *hi;
    float attr[2];
    int rc = eng_unary_clip_bounds(c, &lo, &hi, attr);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    float lo_f, hi_f;
    const clip_bounds_t b = c->opset < 11 ? (clip_bounds_t){&attr[0], &attr[1]}
                                          : (clip_bounds_t){clip_bound(x, lo, &lo_f),
                                                            clip_bound(x, hi, &hi_f)};
    return run_typed(c, clip_rows, &b);
}
const eng_kernel_t eng_cpu_Clip = {.run = clip_run};

/* --- Identity and Dropout ------------------------------------------------------------ */

/* Copies input 0 to output 0 unless they share memory. 0 or FS_EINVAL. */
static int copy_run(eng_op_ctx_t *c)
{
    eng_unary_io_t io;
    int rc = eng_unary_copy_io(c, &io);
    if (rc)
        return rc;
    if (io.y->data != io.x->data && io.bytes > 0)
        memcpy(io.y->data, io.x->data, io.bytes);
    return 0;
}
const eng_kernel_t eng_cpu_Identity = {.run = copy_run};

/* Inference: output = input, and the optional mask all ones (bool, or the
 * input's type before opset 10). A training_mode input that is true at run
 * time is refused with FS_ENOTSUP and nothing written. */
static int dropout_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *train = c->opset >= 12 ? eng_ctx_in(c, 2) : NULL;
    if (train && train->data && *(const unsigned char *)train->data)
        return eng_op_err(c, FS_ENOTSUP, "training_mode true is not supported (inference only)");
    int rc = copy_run(c);
    eng_tensor_t *mask = c->n_outputs > 1 ? c->outputs[1] : NULL;
    if (rc || !mask)
        return rc;
    int64_t n = eng_shape_numel(&mask->shape);
    switch (mask->dtype) {
    case ENG_DT_BOOL:
        memset(mask->data, 1, (size_t)n);
        return 0;
    case ENG_DT_FLOAT:
        for (int64_t i = 0; i < n; i++)
            ((float *)mask->data)[i] = 1.0f;
        return 0;
    case ENG_DT_DOUBLE:
        for (int64_t i = 0; i < n; i++)
            ((double *)mask->data)[i] = 1.0;
        return 0;
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16: {
        const uint16_t one = eng_float_to_half_dt(mask->dtype, 1.0f);
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)mask->data)[i] = one;
        return 0;
    }
    default:
        return eng_op_err(c, FS_ENOTSUP, "mask dtype %s not supported",
                          eng_dtype_name(mask->dtype));
    }
}
const eng_kernel_t eng_cpu_Dropout = {.run = dropout_run};

/* --- Cast -------------------------------------------------------------------------------
 * Every conversion goes through one of three wide types, a chunk at a time:
 * floating sources widen to double, signed integers and bool to int64,
 * unsigned integers to uint64; each target converts from all three. So an
 * integer never passes through double (int64 stays exact), and float to
 * integer saturates (NaN gives 0) instead of being undefined. float16 and
 * bfloat16 convert through float with round-to-nearest-even. */

#define CAST_CHUNK 256

typedef enum wide_kind { WIDE_F64, WIDE_I64, WIDE_U64 } wide_kind_t;

typedef union wide_buf {
    double f[CAST_CHUNK];
    int64_t i[CAST_CHUNK];
    uint64_t u[CAST_CHUNK];
} wide_buf_t;

typedef struct cast_type {
    eng_dtype_t dtype;
    size_t size;
    wide_kind_t kind;
    void (*widen)(const void *src, wide_buf_t *w, int64_t n);
    void (*from_f64)(const double *w, void *dst, int64_t n);
    void (*from_i64)(const int64_t *w, void *dst, int64_t n);
    void (*from_u64)(const uint64_t *w, void *dst, int64_t n);
} cast_type_t;

#define CV_SAME(v) (v)
#define CV_BOOL(v) ((v) != 0)
#define CV_F16_IN(v) eng_half_to_float(v)
#define CV_F16_OUT(v) eng_float_to_half((float)(v))
#define CV_BF16_IN(v) eng_bf16_to_float(v)
#define CV_BF16_OUT(v) eng_float_to_bf16((float)(v))

/* The four converters of one type. W: the union member its source widens
 * to; WIDEN, FROM_F, FROM_I, FROM_U: per-element conversions. */
#define CAST_FNS(S, T, W, WIDEN, FROM_F, FROM_I, FROM_U)                                \
    static void widen_##S(const void *src, wide_buf_t *w, int64_t n)                    \
    {                                                                                   \
        const T *s = src;                                                               \
        EW_LOOP(n, w->W[i] = WIDEN(s[i]););                                             \
    }                                                                                   \
    static void from_f64_##S(const double *w, void *dst, int64_t n)                     \
    {                                                                                   \
        T *d = dst;                                                                     \
        EW_LOOP(n, d[i] = (T)FROM_F(w[i]););                                            \
    }                                                                                   \
    static void from_i64_##S(const int64_t *w, void *dst, int64_t n)                    \
    {                                                                                   \
        T *d = dst;                                                                     \
        EW_LOOP(n, d[i] = (T)FROM_I(w[i]););                                            \
    }                                                                                   \
    static void from_u64_##S(const uint64_t *w, void *dst, int64_t n)                   \
    {                                                                                   \
        T *d = dst;                                                                     \
        EW_LOOP(n, d[i] = (T)FROM_U(w[i]););                                            \
    }

/* Saturating double -> integer for each integer type. */
#define CAST_INT_FNS(op, DT, T, UT, S, LO, HI)                                          \
    static T sat_##S(double d)                                                          \
    {                                                                                   \
        if (isnan(d))                                                                   \
            return 0;                                                                   \
        if (d <= (double)(LO))                                                          \
            return (T)(LO);                                                             \
        return d >= (double)(HI) ? (T)(HI) : (T)d;                                      \
    }                                                                                   \
    CAST_FNS(S, T, op, CV_SAME, sat_##S, CV_SAME, CV_SAME)
#define CAST_FLOAT_FNS(op, DT, T, UT, S, LO, HI) CAST_FNS(S, T, f, CV_SAME, CV_SAME, CV_SAME, CV_SAME)

EW_FLOAT_TYPES(CAST_FLOAT_FNS, f)
EW_SINT_TYPES(CAST_INT_FNS, i)
EW_UINT_TYPES(CAST_INT_FNS, u)
CAST_FNS(f16, uint16_t, f, CV_F16_IN, CV_F16_OUT, CV_F16_OUT, CV_F16_OUT)
CAST_FNS(bf16, uint16_t, f, CV_BF16_IN, CV_BF16_OUT, CV_BF16_OUT, CV_BF16_OUT)
CAST_FNS(b, uint8_t, i, CV_BOOL, CV_BOOL, CV_BOOL, CV_BOOL)

/* The 8-bit floats widen through float; a target float8 converts in
 * cast_to_f8, which reads the node's saturate (the table's from_* never
 * see one). */
#define CAST_F8_WIDEN(S, KIND)                                                          \
    static void widen_##S(const void *src, wide_buf_t *w, int64_t n)                    \
    {                                                                                   \
        const uint8_t *s = src;                                                         \
        for (int64_t i = 0; i < n; i++)                                                 \
            w->f[i] = eng_f8_to_float(s[i], KIND);                                      \
    }
CAST_F8_WIDEN(f8e4m3fn, ENG_F8_E4M3FN)
CAST_F8_WIDEN(f8e4m3fnuz, ENG_F8_E4M3FNUZ)
CAST_F8_WIDEN(f8e5m2, ENG_F8_E5M2)
CAST_F8_WIDEN(f8e5m2fnuz, ENG_F8_E5M2FNUZ)

#define CAST_ENTRY_(DT, T, K, S)                                                        \
    {DT, sizeof(T), K, widen_##S, from_f64_##S, from_i64_##S, from_u64_##S},
#define CAST_ENTRY(K, DT, T, UT, S, LO, HI) CAST_ENTRY_(DT, T, K, S)

static const cast_type_t cast_types[] = {
    EW_FLOAT_TYPES(CAST_ENTRY, WIDE_F64) EW_SINT_TYPES(CAST_ENTRY, WIDE_I64)
    EW_UINT_TYPES(CAST_ENTRY, WIDE_U64)
    CAST_ENTRY_(ENG_DT_FLOAT16, uint16_t, WIDE_F64, f16)
    CAST_ENTRY_(ENG_DT_BFLOAT16, uint16_t, WIDE_F64, bf16)
    CAST_ENTRY_(ENG_DT_BOOL, uint8_t, WIDE_I64, b)
    {ENG_DT_FLOAT8E4M3FN, 1, WIDE_F64, widen_f8e4m3fn, NULL, NULL, NULL},
    {ENG_DT_FLOAT8E4M3FNUZ, 1, WIDE_F64, widen_f8e4m3fnuz, NULL, NULL, NULL},
    {ENG_DT_FLOAT8E5M2, 1, WIDE_F64, widen_f8e5m2, NULL, NULL, NULL},
    {ENG_DT_FLOAT8E5M2FNUZ, 1, WIDE_F64, widen_f8e5m2fnuz, NULL, NULL, NULL},
};

static const cast_type_t *cast_type_find(eng_dtype_t dt)
{
    for (size_t i = 0; i < sizeof cast_types / sizeof cast_types[0]; i++)
        if (cast_types[i].dtype == dt)
            return &cast_types[i];
    return NULL;
}

/* One element v of wide kind `kind` into dst[0] of type `to` (float8
 * through cast's saturate rule). Cannot fail. */
static void cast_one(const cast_type_t *to, eng_dtype_t to_dt, bool sat, const eng_string_num_t *v,
                     void *dst)
{
    if (eng_dtype_is_float8(to_dt)) {
        double f = v->kind == ENG_NUM_F64 ? v->f : v->kind == ENG_NUM_I64 ? (double)v->i
                                                                          : (double)v->u;
        *(uint8_t *)dst = eng_float_to_f8((float)f, (eng_f8_kind_t)(to_dt - ENG_DT_FLOAT8E4M3FN),
                                          sat);
    } else if (v->kind == ENG_NUM_F64) {
        to->from_f64(&v->f, dst, 1);
    } else if (v->kind == ENG_NUM_I64) {
        to->from_i64(&v->i, dst, 1);
    } else {
        to->from_u64(&v->u, dst, 1);
    }
}

/* Cast from or to strings (engine/strings.h has the text rules): string to
 * string copies the records; a number's text always fits its record
 * inline. 0, or FS_EINVAL naming the element that is not a number (the
 * output is then partly written, as any failed kernel's may be). */
static int cast_strings(eng_op_ctx_t *c, const eng_unary_io_t *io, const cast_type_t *from,
                        const cast_type_t *to)
{
    const eng_dtype_t from_dt = io->x->dtype, to_dt = io->y->dtype;
    if (from_dt == ENG_DT_STRING && to_dt == ENG_DT_STRING) {
        if (io->y->data != io->x->data && io->n > 0)
            memcpy(io->y->data, io->x->data, (size_t)io->n * sizeof(eng_string_t));
        return 0;
    }
    if (from_dt == ENG_DT_STRING) {
        const eng_string_t *x = io->x->data;
        char *dst = io->y->data;
        bool sat = eng_attr_i(c->node, "saturate", 1) != 0;
        for (int64_t i = 0; i < io->n; i++) {
            eng_string_num_t v;
            if (eng_string_parse(&x[i], to_dt, &v) != 0)
                return eng_op_err(c, FS_EINVAL, "element %lld: %s", (long long)i, fs_errmsg());
            cast_one(to, to_dt, sat, &v, dst + i * (int64_t)to->size);
        }
        return 0;
    }
    wide_buf_t w;
    const char *src = io->x->data;
    eng_string_t *y = io->y->data;
    bool as_float = from_dt != ENG_DT_DOUBLE;
    for (int64_t off = 0; off < io->n; off += CAST_CHUNK) {
        int64_t m = io->n - off < CAST_CHUNK ? io->n - off : CAST_CHUNK;
        from->widen(src + off * (int64_t)from->size, &w, m);
        for (int64_t i = 0; i < m; i++) {
            if (from->kind == WIDE_F64)
                eng_string_from_f64(w.f[i], as_float, &y[off + i]);
            else if (from->kind == WIDE_I64)
                eng_string_from_i64(w.i[i], &y[off + i]);
            else
                eng_string_from_u64(w.u[i], &y[off + i]);
        }
    }
    return 0;
}

/* Cast and CastLike: the target is output 0's dtype. 0, or FS_EINVAL /
 * FS_ENOTSUP with output untouched. */
static int cast_run(eng_op_ctx_t *c)
{
    eng_unary_io_t io;
    int rc = eng_unary_flat_io(c, &io);
    if (rc)
        return rc;
    if (io.x->dtype == ENG_DT_STRING || io.y->dtype == ENG_DT_STRING) {
        const cast_type_t *other = cast_type_find(io.x->dtype == ENG_DT_STRING ? io.y->dtype
                                                                                : io.x->dtype);
        if (!other && !(io.x->dtype == ENG_DT_STRING && io.y->dtype == ENG_DT_STRING))
            return eng_op_err(c, FS_ENOTSUP, "dtype not supported: cast from %s to %s",
                              eng_dtype_name(io.x->dtype), eng_dtype_name(io.y->dtype));
        return cast_strings(c, &io, other, other);
    }
    const cast_type_t *from = cast_type_find(io.x->dtype), *to = cast_type_find(io.y->dtype);
    if (!from || !to)
        return eng_op_err(c, FS_ENOTSUP, "dtype not supported: cast from %s to %s",
                          eng_dtype_name(io.x->dtype), eng_dtype_name(io.y->dtype));
    if (from == to) {
        if (io.y->data != io.x->data && io.n > 0)
            memcpy(io.y->data, io.x->data, (size_t)io.n * from->size);
        return 0;
    }
    wide_buf_t w;
    const char *src = io.x->data;
    char *dst = io.y->data;
    /* Cast's saturate (opset 19; 1 by default) decides a float8 target's
     * overflow; CastLike has it too. */
    bool f8 = eng_dtype_is_float8(io.y->dtype), sat = eng_attr_i(c->node, "saturate", 1) != 0;
    eng_f8_kind_t kind = f8 ? (eng_f8_kind_t)(io.y->dtype - ENG_DT_FLOAT8E4M3FN) : ENG_F8_E4M3FN;
    for (int64_t off = 0; off < io.n; off += CAST_CHUNK) {
        int64_t m = io.n - off < CAST_CHUNK ? io.n - off : CAST_CHUNK;
        from->widen(src + off * (int64_t)from->size, &w, m);
        void *d = dst + off * (int64_t)to->size;
        if (f8) {
            uint8_t *d8 = d;
            for (int64_t i = 0; i < m; i++) {
                double v = from->kind == WIDE_F64   ? w.f[i]
                           : from->kind == WIDE_I64 ? (double)w.i[i]
                                                    : (double)w.u[i];
                d8[i] = eng_float_to_f8((float)v, kind, sat);
            }
        } else if (from->kind == WIDE_F64)
            to->from_f64(w.f, d, m);
        else if (from->kind == WIDE_I64)
            to->from_i64(w.i, d, m);
        else
            to->from_u64(w.u, d, m);
    }
    return 0;
}
const eng_kernel_t eng_cpu_Cast = {.run = cast_run};
const eng_kernel_t eng_cpu_CastLike = {.run = cast_run};
