/* binary_kernels.c -- CPU kernels of the broadcasting element-wise ops.
 *
 * One strided loop serves every op: the operands (output first) are laid
 * over the output's shape with stride 0 on broadcast dims; dims of size 1 are
 * dropped and neighbours that are contiguous in every operand are merged.
 * Same-shape operands thus collapse to a single row, a scalar operand to a
 * row with stride 0, and only true broadcasting leaves outer dims. The row
 * functions specialise on the inner strides (each 0 or 1) so that the common
 * cases are plain vectorisable loops. Rows read element i of every operand
 * before writing element i of the output, so an output may share memory with
 * an input of its own shape (in place). A large output is split over
 * ctx->n_threads threads by flat output index (each chunk walks its own
 * part of the rows); every element is computed alone, so the split does not
 * change any result. float16 and bfloat16 run the float rows through
 * half_row (elementwise_impl.h: converted a chunk at a time, rounded once). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/ops/binary_impl.h"
#include "engine/ops/value_hd.h"

#define BC_MAX_OPERANDS ENG_BINARY_MAX_OPERANDS

typedef struct bc_loop {
    int n_operands;
    int rank;                                     /* >= 1 after collapsing */
    int64_t dims[ENG_MAX_RANK];
    int64_t step[BC_MAX_OPERANDS][ENG_MAX_RANK];  /* bytes per index of each dim */
    int64_t inner[BC_MAX_OPERANDS];               /* element stride of the last dim: 0 or 1 */
} bc_loop_t;

/* p: each operand's first element of the row; s: their inner strides. */
typedef void (*bc_row_fn)(char *const *p, const int64_t *s, int64_t n, const void *arg);

/* Lays the inputs over y's shape and collapses dims (eng_binary_bcast),
 * then turns the strides into byte steps. 0, or FS_EINVAL when an input
 * does not broadcast to y or has an unsized dtype; *l is then undefined. */
static int bc_setup(const eng_op_ctx_t *c, const eng_tensor_t *y, const eng_tensor_t *const *in,
                    int n_in, bc_loop_t *l)
{
    eng_binary_bcast_t b;
    int rc = eng_binary_bcast(c, y, in, n_in, &b);
    if (rc)
        return rc;
    l->n_operands = n_in + 1;
    l->rank = b.rank;
    for (int d = 0; d < b.rank; d++)
        l->dims[d] = b.dims[d];
    for (int k = 0; k <= n_in; k++) {
        const int64_t es = (int64_t)eng_dtype_size(k == 0 ? y->dtype : in[k - 1]->dtype);
        l->inner[k] = b.stride[k][b.rank - 1];
        for (int d = 0; d < b.rank; d++)
            l->step[k][d] = b.stride[k][d] * es;
    }
    return 0;
}

/* Elements per parallel unit: chunks start at multiples of 16 output
 * elements (whole cache lines for 4-byte types). */
#define BC_UNIT 16

/* One broadcast loop over the output's flat index range. */
typedef struct bc_job {
    const bc_loop_t *l;
    char *const *base;      /* each operand's first element */
    bc_row_fn row;
    const void *arg;
    int64_t n;              /* output elements */
} bc_job_t;

/* Calls `row` on the pieces of the innermost rows of the collapsed shape
 * that hold the output's flat elements [begin, end): a partial first and
 * last row, whole rows between. Cannot fail. */
static void bc_run_range(const bc_loop_t *l, char *const *base, bc_row_fn row, const void *arg,
                         int64_t begin, int64_t end)
{
    char *p[BC_MAX_OPERANDS];
    int64_t idx[ENG_MAX_RANK] = {0};
    const int nk = l->n_operands, last = l->rank - 1;
    const int64_t len = l->dims[last];
    int64_t col = begin % len, rest = begin / len;
    for (int k = 0; k < nk; k++)
        p[k] = base[k] + col * l->step[k][last];
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = rest % l->dims[d];
        rest /= l->dims[d];
        for (int k = 0; k < nk; k++)
            p[k] += idx[d] * l->step[k][d];
    }
    for (int64_t at = begin; at < end;) {
        const int64_t n = len - col < end - at ? len - col : end - at;
        row(p, l->inner, n, arg);
        at += n;
        for (int k = 0; k < nk; k++)
            p[k] -= col * l->step[k][last];
        col = 0;
        for (int d = last - 1; d >= 0; d--) {
            for (int k = 0; k < nk; k++)
                p[k] += l->step[k][d];
            if (++idx[d] < l->dims[d])
                break;
            idx[d] = 0;
            for (int k = 0; k < nk; k++)
                p[k] -= l->step[k][d] * l->dims[d];
        }
    }
}

static void bc_units(void *arg, int64_t begin, int64_t end)
{
    const bc_job_t *j = arg;
    bc_run_range(j->l, j->base, j->row, j->arg, begin * BC_UNIT,
                 end * BC_UNIT < j->n ? end * BC_UNIT : j->n);
}

/* y = row(in...) over y's shape, split over up to c->n_threads threads
 * when y is large. 0 or FS_EINVAL (shapes); y untouched on error. */
static int bc_apply(const eng_op_ctx_t *c, eng_tensor_t *y, const eng_tensor_t *const *in,
                    int n_in, bc_row_fn row, const void *arg)
{
    bc_loop_t l;
    int rc = bc_setup(c, y, in, n_in, &l);
    const int64_t n = eng_shape_numel(&y->shape);
    if (rc || n == 0)
        return rc;
    char *base[BC_MAX_OPERANDS] = {y->data};
    for (int k = 0; k < n_in; k++)
        base[k + 1] = in[k]->data;
    bc_job_t j = {&l, base, row, arg, n};
    eng_parallel_for(c->n_threads, (n + BC_UNIT - 1) / BC_UNIT, eng_parallel_grain(BC_UNIT),
                     bc_units, &j);
    return 0;
}

/* --- rows ------------------------------------------------------------------------- */

/* A two-input row computing EXPR of a and b into type TO. */
#define BIN_ROW(fn, T, TO, EXPR)                                                        \
    EW_CLONES static void fn(char *const *p, const int64_t *s, int64_t n, const void *arg)        \
    {                                                                                   \
        TO *o = (TO *)p[0];                                                             \
        const T *pa = (const T *)p[1], *pb = (const T *)p[2];                           \
        if (s[1] && s[2]) {                                                             \
            EW_LOOP(n, const T a = pa[i]; const T b = pb[i]; o[i] = (TO)(EXPR););       \
        } else if (s[2]) {                                                              \
            const T a = pa[0];                                                          \
            EW_LOOP(n, const T b = pb[i]; o[i] = (TO)(EXPR););                          \
        } else if (s[1]) {                                                              \
            const T b = pb[0];                                                          \
            EW_LOOP(n, const T a = pa[i]; o[i] = (TO)(EXPR););                          \
        } else {                                                                        \
            const T a = pa[0], b = pb[0];                                               \
            const TO v = (TO)(EXPR);                                                    \
            EW_LOOP(n, o[i] = v;);                                                      \
        }                                                                               \
    }

/* Rows every numeric type has. Max and Min propagate NaN (as numpy's
 * maximum does). Integer division and modulo by 0 give 0 (ONNX leaves it
 * undefined; this never traps). */
#define COMMON_ROWS(op, DT, T, UT, S, LO, HI)                                                   \
    BIN_ROW(add_##S, T, T, (UT)a + (UT)b)                                               \
    BIN_ROW(sub_##S, T, T, (UT)a - (UT)b)                                               \
    BIN_ROW(mul_##S, T, T, (UT)a * (UT)b)                                               \
    BIN_ROW(eq_##S, T, uint8_t, a == b)                                                 \
    BIN_ROW(gt_##S, T, uint8_t, a > b)                                                  \
    BIN_ROW(ge_##S, T, uint8_t, a >= b)                                                 \
    BIN_ROW(lt_##S, T, uint8_t, a < b)                                                  \
    BIN_ROW(le_##S, T, uint8_t, a <= b)
#define FLOAT_ROWS(op, DT, T, UT, S, LO, HI)                                                    \
    BIN_ROW(div_##S, T, T, a / b)                                                       \
    BIN_ROW(fmod_##S, T, T, fmod(a, b))                                                 \
    BIN_ROW(max_##S, T, T, (a > b || isnan(a)) ? a : b)                                 \
    BIN_ROW(min_##S, T, T, (a < b || isnan(a)) ? a : b)
/* Python's modulo (sign of the divisor) for fmod=0, C's (sign of the
 * dividend) for fmod=1. b == -1 is special-cased: INT_MIN / -1 overflows. */
#define SINT_ROWS(op, DT, T, UT, S, LO, HI)                                                     \
    static T pymod_##S(T a, T b)                                                        \
    {                                                                                   \
        if (b == 0 || b == -1)                                                          \
            return 0;                                                                   \
        const T r = (T)(a % b);                                                         \
        return r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;                           \
    }                                                                                   \
    BIN_ROW(div_##S, T, T, b == 0 ? 0 : b == -1 ? (T)(0 - (UT)a) : a / b)               \
    BIN_ROW(mod_##S, T, T, pymod_##S(a, b))                                             \
    BIN_ROW(fmod_##S, T, T, b == 0 || b == -1 ? 0 : a % b)                              \
    BIN_ROW(max_##S, T, T, a > b ? a : b)                                               \
    BIN_ROW(min_##S, T, T, a < b ? a : b)
#define UINT_ROWS(op, DT, T, UT, S, LO, HI)                                                     \
    BIN_ROW(div_##S, T, T, b == 0 ? 0 : a / b)                                          \
    BIN_ROW(mod_##S, T, T, b == 0 ? 0 : a % b)                                          \
    BIN_ROW(max_##S, T, T, a > b ? a : b)                                               \
    BIN_ROW(min_##S, T, T, a < b ? a : b)

/* Bitwise ops on every integer type; shifts (unsigned types) by the type's
 * width or more give 0, as numpy's do. */
#define BITS_ROWS(op, DT, T, UT, S, LO, HI)                                                     \
    BIN_ROW(band_##S, T, T, a & b)                                                      \
    BIN_ROW(bor_##S, T, T, a | b)                                                       \
    BIN_ROW(bxor_##S, T, T, a ^ b)
#define SHIFT_ROWS(op, DT, T, UT, S, LO, HI)                                                    \
    BIN_ROW(shl_##S, T, T, b >= 8 * sizeof(T) ? 0 : (UT)a << b)                        \
    BIN_ROW(shr_##S, T, T, b >= 8 * sizeof(T) ? 0 : a >> b)

EW_NUM_TYPES(COMMON_ROWS, _)
EW_SINT_TYPES(BITS_ROWS, _)
EW_UINT_TYPES(BITS_ROWS, _)
EW_UINT_TYPES(SHIFT_ROWS, _)
EW_FLOAT_TYPES(FLOAT_ROWS, _)
EW_SINT_TYPES(SINT_ROWS, _)
EW_UINT_TYPES(UINT_ROWS, _)
/* pos + slope * neg: see LeakyRelu in unary_kernels.c (vectorises). */
BIN_ROW(prelu_f32, float, float, (a < 0 ? 0.0f : a) + b * (a < 0 ? a : -0.0f))
BIN_ROW(prelu_f64, double, double, (a < 0 ? 0.0 : a) + b * (a < 0 ? a : -0.0))
BIN_ROW(prelu_i32, int32_t, int32_t, a < 0 ? (uint32_t)a * (uint32_t)b : (uint32_t)a)
BIN_ROW(prelu_i64, int64_t, int64_t, a < 0 ? (uint64_t)a * (uint64_t)b : (uint64_t)a)
BIN_ROW(and_b, uint8_t, uint8_t, (a != 0) & (b != 0))
BIN_ROW(or_b, uint8_t, uint8_t, (a != 0) | (b != 0))
BIN_ROW(xor_b, uint8_t, uint8_t, (a != 0) ^ (b != 0))
BIN_ROW(eq_b, uint8_t, uint8_t, (a != 0) == (b != 0))

/* Equal on strings (engine/tensor.h's records): byte-wise equality. The
 * strides are in elements, as BIN_ROW's are; no vector clones to gain. */
static void eq_str(char *const *p, const int64_t *s, int64_t n, const void *arg)
{
    uint8_t *o = (uint8_t *)p[0];
    const eng_string_t *pa = (const eng_string_t *)p[1], *pb = (const eng_string_t *)p[2];
    for (int64_t i = 0; i < n; i++)
        o[i] = eng_string_equal(&pa[s[1] ? i : 0], &pb[s[2] ? i : 0]);
}

/* A row for one input dtype. via_float: dtype is float16 or bfloat16 and fn
 * the op's float row, run through half_row. */
typedef struct bin_row {
    eng_dtype_t dtype;
    bc_row_fn fn;
    bool via_float;
} bin_row_t;

#define ROW_ENTRY(op, DT, T, UT, S, LO, HI) {DT, op##_##S, false},
/* The half dtypes' entries: the float row of op. */
#define HALF_ENTRIES(op) {ENG_DT_FLOAT16, op##_f32, true}, {ENG_DT_BFLOAT16, op##_f32, true},
#define ROWS_END {ENG_DT_UNDEFINED, NULL, false}

/* A float row on two half inputs: the row, the half dtype, whether the
 * output is of it (else bool, written straight), and the count Mean
 * divides the sum by (0: none). */
typedef struct half_arg {
    bc_row_fn row;
    eng_dtype_t dt;
    bool out_half;
    float mean_count;
} half_arg_t;

/* Chunk by chunk: each input's part (one value where its stride is 0) to
 * float, the float row, then for Mean the division, and the result rounded
 * once -- what the float kernel and the widening fallback's rounding give.
 * Every input chunk is read before the output chunk is written, so it runs
 * in place as the rows do. */
EW_CLONES static void half_row(char *const *p, const int64_t *s, int64_t n, const void *argv)
{
    const half_arg_t *h = argv;
    float f[3][EW_HALF_CHUNK]; /* output, a, b */
    for (int64_t off = 0; off < n; off += EW_HALF_CHUNK) {
        const int64_t m = n - off < EW_HALF_CHUNK ? n - off : EW_HALF_CHUNK;
        char *fp[3] = {h->out_half ? (char *)f[0] : p[0] + off};
        for (int k = 1; k <= 2; k++) {
            ew_half_to_float(h->dt, (const uint16_t *)p[k] + off * s[k], f[k], s[k] ? m : 1);
            fp[k] = (char *)f[k];
        }
        h->row(fp, s, m, NULL);
        if (!h->out_half)
            continue;
        if (h->mean_count != 0) {
            const float count = h->mean_count;
            EW_LOOP(m, f[0][i] /= count;);
        }
        ew_float_to_half(h->dt, f[0], (uint16_t *)p[0] + off, m);
    }
}

static const bin_row_t add_rows[] = {EW_NUM_TYPES(ROW_ENTRY, add) HALF_ENTRIES(add) ROWS_END};
static const bin_row_t sub_rows[] = {EW_NUM_TYPES(ROW_ENTRY, sub) HALF_ENTRIES(sub) ROWS_END};
static const bin_row_t mul_rows[] = {EW_NUM_TYPES(ROW_ENTRY, mul) HALF_ENTRIES(mul) ROWS_END};
static const bin_row_t div_rows[] = {EW_NUM_TYPES(ROW_ENTRY, div) HALF_ENTRIES(div) ROWS_END};
static const bin_row_t max_rows[] = {EW_NUM_TYPES(ROW_ENTRY, max) HALF_ENTRIES(max) ROWS_END};
static const bin_row_t min_rows[] = {EW_NUM_TYPES(ROW_ENTRY, min) HALF_ENTRIES(min) ROWS_END};
static const bin_row_t sum_rows[] = {EW_FLOAT_TYPES(ROW_ENTRY, add) HALF_ENTRIES(add) ROWS_END};
static const bin_row_t mod_rows[] = {EW_SINT_TYPES(ROW_ENTRY, mod) EW_UINT_TYPES(ROW_ENTRY, mod)
                                         ROWS_END};
/* Unsigned remainders agree in both modes. */
static const bin_row_t fmod_rows[] = {EW_FLOAT_TYPES(ROW_ENTRY, fmod) EW_SINT_TYPES(ROW_ENTRY, fmod)
                                          EW_UINT_TYPES(ROW_ENTRY, mod) HALF_ENTRIES(fmod)
                                              ROWS_END};
static const bin_row_t eq_rows[] = {EW_NUM_TYPES(ROW_ENTRY, eq) HALF_ENTRIES(eq)
                                        {ENG_DT_BOOL, eq_b, false},
                                        {ENG_DT_STRING, eq_str, false}, ROWS_END};
static const bin_row_t gt_rows[] = {EW_NUM_TYPES(ROW_ENTRY, gt) HALF_ENTRIES(gt) ROWS_END};
static const bin_row_t ge_rows[] = {EW_NUM_TYPES(ROW_ENTRY, ge) HALF_ENTRIES(ge) ROWS_END};
static const bin_row_t lt_rows[] = {EW_NUM_TYPES(ROW_ENTRY, lt) HALF_ENTRIES(lt) ROWS_END};
static const bin_row_t le_rows[] = {EW_NUM_TYPES(ROW_ENTRY, le) HALF_ENTRIES(le) ROWS_END};
static const bin_row_t prelu_rows[] = {{ENG_DT_FLOAT, prelu_f32, false},
                                       {ENG_DT_DOUBLE, prelu_f64, false},
                                       {ENG_DT_INT32, prelu_i32, false},
                                       {ENG_DT_INT64, prelu_i64, false}, HALF_ENTRIES(prelu)
                                       ROWS_END};
static const bin_row_t band_rows[] = {EW_SINT_TYPES(ROW_ENTRY, band)
                                          EW_UINT_TYPES(ROW_ENTRY, band) ROWS_END};
static const bin_row_t bor_rows[] = {EW_SINT_TYPES(ROW_ENTRY, bor) EW_UINT_TYPES(ROW_ENTRY, bor)
                                         ROWS_END};
static const bin_row_t bxor_rows[] = {EW_SINT_TYPES(ROW_ENTRY, bxor)
                                          EW_UINT_TYPES(ROW_ENTRY, bxor) ROWS_END};
static const bin_row_t shl_rows[] = {EW_UINT_TYPES(ROW_ENTRY, shl) ROWS_END};
static const bin_row_t shr_rows[] = {EW_UINT_TYPES(ROW_ENTRY, shr) ROWS_END};
static const bin_row_t and_rows[] = {{ENG_DT_BOOL, and_b, false}, ROWS_END};
static const bin_row_t or_rows[] = {{ENG_DT_BOOL, or_b, false}, ROWS_END};
static const bin_row_t xor_rows[] = {{ENG_DT_BOOL, xor_b, false}, ROWS_END};

/* The row of `dt`, or NULL after setting FS_ENOTSUP. */
static const bin_row_t *row_find(const eng_op_ctx_t *c, const bin_row_t *rows, eng_dtype_t dt)
{
    for (const bin_row_t *r = rows; r->fn; r++)
        if (r->dtype == dt)
            return r;
    eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(dt));
    return NULL;
}

/* y = r(a, b) over y's shape: r's row itself, or for a half dtype its float
 * row through half_row (the output of the half dtype unless out_dt is
 * bool; Mean's sum divided by mean_count, 0: not Mean). As bc_apply. */
static int row_apply(const eng_op_ctx_t *c, const bin_row_t *r, eng_tensor_t *y,
                     const eng_tensor_t *const *in, eng_dtype_t out_dt, float mean_count)
{
    if (!r->via_float)
        return bc_apply(c, y, in, 2, r->fn, NULL);
    const half_arg_t h = {r->fn, r->dtype, out_dt != ENG_DT_BOOL, mean_count};
    return bc_apply(c, y, in, 2, half_row, &h);
}

/* Two inputs of one dtype through its row. 0, FS_EINVAL or FS_ENOTSUP;
 * the output is untouched on error. */
static int binary_run(eng_op_ctx_t *oc, const bin_row_t *rows, eng_dtype_t out_dt)
{
    eng_binary_legacy_t lg;
    int rc = eng_binary_legacy_io(oc, &lg, out_dt);
    if (rc)
        return rc;
    eng_op_ctx_t *c = &lg.ctx;
    const bin_row_t *r = row_find(c, rows, c->inputs[0]->dtype);
    if (!r)
        return FS_ENOTSUP;
    return row_apply(c, r, c->outputs[0], c->inputs, out_dt, 0);
}

#define BINARY_KERNEL(op, rows, out_dt) ENG_CPU_KERNEL_CALLING(op, binary_run, rows, out_dt)

BINARY_KERNEL(Add, add_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(Sub, sub_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(Mul, mul_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(Div, div_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(And, and_rows, ENG_DT_BOOL)
BINARY_KERNEL(Or, or_rows, ENG_DT_BOOL)
BINARY_KERNEL(Xor, xor_rows, ENG_DT_BOOL)
BINARY_KERNEL(Equal, eq_rows, ENG_DT_BOOL)
BINARY_KERNEL(Greater, gt_rows, ENG_DT_BOOL)
BINARY_KERNEL(GreaterOrEqual, ge_rows, ENG_DT_BOOL)
BINARY_KERNEL(Less, lt_rows, ENG_DT_BOOL)
BINARY_KERNEL(LessOrEqual, le_rows, ENG_DT_BOOL)
BINARY_KERNEL(PRelu, prelu_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseAnd, band_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseOr, bor_rows, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseXor, bxor_rows, ENG_DT_UNDEFINED)

static int bitshift_run(eng_op_ctx_t *c)
{
    bool left;
    int rc = eng_binary_shift_left(c->node, &left);
    return rc ? rc : binary_run(c, left ? shl_rows : shr_rows, ENG_DT_UNDEFINED);
}
const eng_kernel_t eng_cpu_BitShift = {.run = bitshift_run};

static int mod_run(eng_op_ctx_t *c)
{
    const int64_t fm = eng_attr_i(c->node, "fmod", 0);
    const eng_tensor_t *a = eng_ctx_in(c, 0);
    if (fm == 0 && a && (a->dtype == ENG_DT_FLOAT || a->dtype == ENG_DT_DOUBLE ||
                         a->dtype == ENG_DT_FLOAT16 || a->dtype == ENG_DT_BFLOAT16))
        return eng_op_err(c, FS_EINVAL, "fmod must be 1 for dtype %s", eng_dtype_name(a->dtype));
    return binary_run(c, fm ? fmod_rows : mod_rows, ENG_DT_UNDEFINED);
}
const eng_kernel_t eng_cpu_Mod = {.run = mod_run};

/* --- Pow -----------------------------------------------------------------------------
 * float^float and double^double have their own rows (x^2 as x*x), and a
 * float16 or bfloat16 base with an exponent of its dtype runs float's
 * through half_row; every other pairing reads both sides as double, and
 * integer results saturate. */

static void pow_f32(char *const *p, const int64_t *s, int64_t n, const void *arg)
{
    float *o = (float *)p[0];
    const float *pa = (const float *)p[1], *pb = (const float *)p[2];
    if (s[2] == 0 && pb[0] == 2.0f) {
        for (int64_t i = 0; i < n; i++)
            o[i] = pa[i * s[1]] * pa[i * s[1]];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        o[i] = powf(pa[i * s[1]], pb[i * s[2]]);
}

static void pow_f64(char *const *p, const int64_t *s, int64_t n, const void *arg)
{
    double *o = (double *)p[0];
    const double *pa = (const double *)p[1], *pb = (const double *)p[2];
    for (int64_t i = 0; i < n; i++)
        o[i] = pow(pa[i * s[1]], pb[i * s[2]]);
}

static bool pow_dtypes_ok(eng_dtype_t base, eng_dtype_t exp)
{
    static const eng_dtype_t numeric[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT8,
                                          ENG_DT_INT16, ENG_DT_INT32,  ENG_DT_INT64,
                                          ENG_DT_UINT8, ENG_DT_UINT16, ENG_DT_UINT32,
                                          ENG_DT_UINT64};
    if (base != ENG_DT_FLOAT && base != ENG_DT_DOUBLE && base != ENG_DT_INT32 &&
        base != ENG_DT_INT64)
        return false;
    for (size_t i = 0; i < sizeof numeric / sizeof numeric[0]; i++)
        if (exp == numeric[i])
            return true;
    return false;
}

/* arg: the two input dtypes; the output has the base's. */
static void pow_mixed(char *const *p, const int64_t *s, int64_t n, const void *arg)
{
    const eng_dtype_t *dt = arg;
    for (int64_t i = 0; i < n; i++) {
        double v = pow(eng_hd_load(p[1], dt[0], i * s[1]), eng_hd_load(p[2], dt[1], i * s[2]));
        switch (dt[0]) {
        case ENG_DT_FLOAT: ((float *)p[0])[i] = (float)v; break;
        case ENG_DT_DOUBLE: ((double *)p[0])[i] = v; break;
        case ENG_DT_INT32:
            ((int32_t *)p[0])[i] = isnan(v) ? 0 : v <= INT32_MIN ? INT32_MIN
                                 : v >= INT32_MAX ? INT32_MAX : (int32_t)v;
            break;
        default:
            ((int64_t *)p[0])[i] = isnan(v) ? 0 : v <= (double)INT64_MIN ? INT64_MIN
                                 : v >= (double)INT64_MAX ? INT64_MAX : (int64_t)v;
            break;
        }
    }
}

static int pow_run(eng_op_ctx_t *oc)
{
    eng_binary_legacy_t lg;
    int rc = eng_binary_legacy_ctx(oc, &lg);
    if (rc)
        return rc;
    eng_op_ctx_t *c = &lg.ctx;
    const eng_tensor_t *a = eng_ctx_in(c, 0), *b = eng_ctx_in(c, 1);
    eng_tensor_t *y = c->n_outputs > 0 ? c->outputs[0] : NULL;
    if (!a || !b || !y)
        return eng_op_err(c, FS_EINVAL, "an input or the output is missing");
    const bool half_pair = a->dtype == b->dtype &&
                           (a->dtype == ENG_DT_FLOAT16 || a->dtype == ENG_DT_BFLOAT16);
    if ((!half_pair && !pow_dtypes_ok(a->dtype, b->dtype)) || y->dtype != a->dtype)
        return eng_op_err(c, FS_ENOTSUP, "dtype not supported: %s ^ %s -> %s",
                          eng_dtype_name(a->dtype), eng_dtype_name(b->dtype),
                          eng_dtype_name(y->dtype));
    if (half_pair) {
        const bin_row_t half = {a->dtype, pow_f32, true};
        return row_apply(c, &half, y, c->inputs, ENG_DT_UNDEFINED, 0);
    }
    const eng_dtype_t dt[2] = {a->dtype, b->dtype};
    bc_row_fn row = pow_mixed;
    if (a->dtype == b->dtype && a->dtype == ENG_DT_FLOAT)
        row = pow_f32;
    else if (a->dtype == b->dtype && a->dtype == ENG_DT_DOUBLE)
        row = pow_f64;
    return bc_apply(c, y, c->inputs, 2, row, dt);
}
const eng_kernel_t eng_cpu_Pow = {.run = pow_run};

/* --- Where ---------------------------------------------------------------------------
 * Selection only moves bytes, so one row per element size serves every
 * dtype. */

#define WHERE_ROW(fn, T)                                                                \
    static void fn(char *const *p, const int64_t *s, int64_t n, const void *arg)        \
    {                                                                                   \
        T *o = (T *)p[0];                                                               \
        const uint8_t *cond = (const uint8_t *)p[1];                                    \
        const T *x = (const T *)p[2], *y = (const T *)p[3];                             \
        if (s[1] && s[2] && s[3]) {                                                     \
            EW_LOOP(n, const T xv = x[i]; const T yv = y[i]; o[i] = cond[i] ? xv : yv;);  \
            return;                                                                     \
        }                                                                               \
        for (int64_t i = 0; i < n; i++)                                                 \
            o[i] = cond[i * s[1]] ? x[i * s[2]] : y[i * s[3]];                          \
    }
WHERE_ROW(where_1, uint8_t)
WHERE_ROW(where_2, uint16_t)
WHERE_ROW(where_4, uint32_t)
WHERE_ROW(where_8, uint64_t)
/* A string's record, moved whole (engine/tensor.h). */
typedef struct where_rec { char b[sizeof(eng_string_t)]; } where_rec_t;
WHERE_ROW(where_32, where_rec_t)

static int where_run(eng_op_ctx_t *c)
{
    int rc = eng_binary_where_check(c);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[1];
    eng_tensor_t *out = c->outputs[0];
    bc_row_fn row;
    switch (eng_dtype_size(x->dtype)) {
    case 1: row = where_1; break;
    case 2: row = where_2; break;
    case 4: row = where_4; break;
    case 8: row = where_8; break;
    case sizeof(eng_string_t): row = where_32; break;
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(x->dtype));
    }
    return bc_apply(c, out, c->inputs, 3, row, NULL);
}
const eng_kernel_t eng_cpu_Where = {.run = where_run};

/* --- variadic ---------------------------------------------------------------------------- */

/* y = in0 op in1, then y = y op in_k for the rest; Mean (mean) divides the
 * sum by the count. float16 and bfloat16 go through half_row, which rounds
 * each pass: exact for Max and Min (a pass picks one of its values), and
 * Sum and Mean (sums) take them only as far as one pass
 * (eng_binary_sum_native). 0, FS_EINVAL or FS_ENOTSUP; every shape is
 * checked before the output is written, so it is untouched on error. */
static int variadic_run(eng_op_ctx_t *c, const bin_row_t *rows, bool sums, bool mean)
{
    int rc = eng_binary_check_io(c, c->n_inputs, ENG_DT_UNDEFINED);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    const bin_row_t *r = row_find(c, rows, y->dtype);
    if (!r)
        return FS_ENOTSUP;
    if (sums && !eng_binary_sum_native(y->dtype, c->n_inputs))
        return eng_op_err(c, FS_ENOTSUP, "%d %s inputs are summed through float (widened)",
                          c->n_inputs, eng_dtype_name(y->dtype));
    if (c->n_inputs == 1) {
        const eng_tensor_t *x = c->inputs[0];
        if (!eng_shape_equal(&x->shape, &y->shape))
            return eng_op_err(c, FS_EINVAL, "the output's shape differs from the input's");
        if (x->data != y->data)
            memcpy(y->data, x->data, eng_tensor_bytes(x));
        return 0;
    }
    bc_loop_t l;
    for (int k = 0; k < c->n_inputs; k++)
        if ((rc = bc_setup(c, y, &c->inputs[k], 1, &l)) != 0)
            return rc;
    const float half_count = mean && r->via_float ? (float)c->n_inputs : 0;
    rc = row_apply(c, r, y, c->inputs, ENG_DT_UNDEFINED, half_count);
    for (int k = 2; rc == 0 && k < c->n_inputs; k++) {
        const eng_tensor_t *pair[2] = {y, c->inputs[k]};
        rc = row_apply(c, r, y, pair, ENG_DT_UNDEFINED, 0);
    }
    if (rc || !mean || r->via_float)
        return rc;
    const int64_t n = eng_shape_numel(&y->shape);
    if (y->dtype == ENG_DT_FLOAT) {
        float *yf = y->data;
        const float count = (float)c->n_inputs;
        EW_LOOP(n, yf[i] /= count;);
    } else {
        double *yd = y->data;
        const double count = (double)c->n_inputs;
        EW_LOOP(n, yd[i] /= count;);
    }
    return 0;
}

#define VARIADIC_KERNEL(op, rows, sums, mean)                                               \
    ENG_CPU_KERNEL_CALLING(op, variadic_run, rows, sums, mean)

VARIADIC_KERNEL(Max, max_rows, false, false)
VARIADIC_KERNEL(Min, min_rows, false, false)
VARIADIC_KERNEL(Sum, sum_rows, true, false)
VARIADIC_KERNEL(Mean, sum_rows, true, true)
#undef VARIADIC_KERNEL
