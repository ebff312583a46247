/* test_ops_elementwise.c -- tests of the unary and binary ops (engine/ops/unary.c,
 * engine/ops/binary.c and their CPU kernels): infer and run called directly
 * on hand-built nodes, checked against hand-computed values and, for
 * broadcasting, a naive index-by-index reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* --- building and running one node --------------------------------------- */

static eng_tensor_t vec(eng_dtype_t dt, const void *data, int64_t n)
{
    return tensor(dt, data, 1, &n);
}

/* Infers and runs, asserting success and output 0's dtype and element count. */
static void run_ok(call_t *c, const char *op, int opset, const eng_attr_t *attrs, int n_attrs,
                   const eng_tensor_t *const *in, int n_in, int n_out, eng_dtype_t out_dt,
                   int64_t out_numel)
{
    int rc = call_infer_at(c, op, opset, attrs, n_attrs, in, n_in, n_out);
    cr_assert_eq(rc, 0, "%s infer: %s", op, fs_errmsg());
    cr_assert_eq(c->outs[0].dtype, out_dt, "%s: output dtype %s, want %s", op,
                 eng_dtype_name(c->outs[0].dtype), eng_dtype_name(out_dt));
    cr_assert_eq(eng_shape_numel(&c->outs[0].shape), out_numel, "%s: %lld elements, want %lld",
                 op, (long long)eng_shape_numel(&c->outs[0].shape), (long long)out_numel);
    rc = call_run(c);
    cr_assert_eq(rc, 0, "%s run: %s", op, fs_errmsg());
}

/* Expects infer (or check) to fail with `want` and a message naming the node. */
static void infer_fails(const char *op, int opset, const eng_attr_t *attrs, int n_attrs,
                        const eng_tensor_t *const *in, int n_in, int want, const char *needle)
{
    call_t c;
    int rc = call_infer_at(&c, op, opset, attrs, n_attrs, in, n_in, 1);
    cr_expect_eq(rc, want, "%s: rc %s, want %s (%s)", op, fs_errname(rc), fs_errname(want),
                 fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "n0") != NULL, "%s: message does not name the node: %s", op,
              fs_errmsg());
    cr_expect(strstr(fs_errmsg(), needle) != NULL, "%s: message lacks '%s': %s", op, needle,
              fs_errmsg());
}

static void expect_floats(const float *got, const float *want, size_t n, float tol,
                          const char *what)
{
    for (size_t i = 0; i < n; i++) {
        bool ok = isnan(want[i]) ? isnan(got[i])
                                 : got[i] == want[i] ||
                                       fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i]));
        cr_expect(ok, "%s[%zu]: got %.7g, want %.7g", what, i, got[i], want[i]);
    }
}

static void expect_bools(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "%s[%zu]: got %d, want %d", what, i, got[i], want[i]);
}

/* --- unary: float math ------------------------------------------------------- */

typedef struct float_case {
    const char *op;
    eng_attr_t attrs[3];
    int n_attrs;
    double (*ref)(double x, const eng_attr_t *a);
} float_case_t;

static double attr_or(const eng_attr_t *a, const char *name, double def)
{
    for (int i = 0; i < 3; i++)
        if (a[i].name && strcmp(a[i].name, name) == 0)
            return a[i].f;
    return def;
}

static double r_elu(double x, const eng_attr_t *a) { return x < 0 ? attr_or(a, "alpha", 1) * (exp(x) - 1) : x; }
static double r_hsig(double x, const eng_attr_t *a)
{
    return fmax(0, fmin(1, attr_or(a, "alpha", 0.2) * x + attr_or(a, "beta", 0.5)));
}
static double r_hswish(double x, const eng_attr_t *a) { return x * fmax(0, fmin(1, x / 6 + 0.5)); }
static double r_leaky(double x, const eng_attr_t *a) { return x < 0 ? attr_or(a, "alpha", 0.01) * x : x; }
static double r_selu(double x, const eng_attr_t *a)
{
    double al = attr_or(a, "alpha", 1.67326319217681884765625);
    double g = attr_or(a, "gamma", 1.05070102214813232421875);
    return x > 0 ? g * x : g * (al * exp(x) - al);
}
static double r_sigmoid(double x, const eng_attr_t *a) { return 1 / (1 + exp(-x)); }
static double r_softplus(double x, const eng_attr_t *a) { return log(1 + exp(x)); }
static double r_softsign(double x, const eng_attr_t *a) { return x / (1 + fabs(x)); }
static double r_thr(double x, const eng_attr_t *a) { return x > attr_or(a, "alpha", 1) ? x : 0; }
static double r_relu(double x, const eng_attr_t *a) { return x > 0 ? x : 0; }
static double r_recip(double x, const eng_attr_t *a) { return 1 / x; }
static double r_gelu(double x, const eng_attr_t *a) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double r_gelu_tanh(double x, const eng_attr_t *a)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double r_mish(double x, const eng_attr_t *a) { return x * tanh(log1p(exp(x))); }
static double r_celu(double x, const eng_attr_t *a)
{
    double al = attr_or(a, "alpha", 1);
    return fmax(0, x) + fmin(0, al * (exp(x / al) - 1));
}
static double r_swish(double x, const eng_attr_t *a)
{
    return x / (1 + exp(-attr_or(a, "alpha", 1) * x));
}
#define LIBM(f)                                                                         \
    static double r_##f(double x, const eng_attr_t *a) { return f(x); }
LIBM(exp) LIBM(log) LIBM(sqrt) LIBM(erf) LIBM(sin) LIBM(cos) LIBM(tan) LIBM(asin) LIBM(acos)
LIBM(atan) LIBM(tanh) LIBM(ceil) LIBM(floor) LIBM(fabs) LIBM(sinh) LIBM(cosh) LIBM(asinh)
LIBM(acosh) LIBM(atanh)

Test(engine_ops_unary, float_ops_match_reference_formulas)
{
    static const float_case_t cases[] = {
        {"Exp", {{0}}, 0, r_exp},         {"Erf", {{0}}, 0, r_erf},
        {"Sin", {{0}}, 0, r_sin},         {"Cos", {{0}}, 0, r_cos},
        {"Tan", {{0}}, 0, r_tan},         {"Atan", {{0}}, 0, r_atan},
        {"Tanh", {{0}}, 0, r_tanh},       {"Ceil", {{0}}, 0, r_ceil},
        {"Floor", {{0}}, 0, r_floor},     {"Abs", {{0}}, 0, r_fabs},
        {"Relu", {{0}}, 0, r_relu},       {"Sigmoid", {{0}}, 0, r_sigmoid},
        {"Softplus", {{0}}, 0, r_softplus}, {"Softsign", {{0}}, 0, r_softsign},
        {"Reciprocal", {{0}}, 0, r_recip}, {"HardSwish", {{0}}, 0, r_hswish},
        {"Elu", {{0}}, 0, r_elu},         {"Elu", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 2.0f}}, 1, r_elu},
        {"HardSigmoid", {{0}}, 0, r_hsig},
        {"HardSigmoid", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.5f},
                         {.name = "beta", .type = ENG_ATTR_FLOAT, .f = 0.6f}}, 2, r_hsig},
        {"LeakyRelu", {{0}}, 0, r_leaky},
        {"LeakyRelu", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.1f}}, 1, r_leaky},
        {"Selu", {{0}}, 0, r_selu},
        {"Selu", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 2.0f},
                  {.name = "gamma", .type = ENG_ATTR_FLOAT, .f = 3.0f}}, 2, r_selu},
        {"ThresholdedRelu", {{0}}, 0, r_thr},
        {"ThresholdedRelu", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.5f}}, 1, r_thr},
        {"Sinh", {{0}}, 0, r_sinh},       {"Cosh", {{0}}, 0, r_cosh},
        {"Asinh", {{0}}, 0, r_asinh},     {"Mish", {{0}}, 0, r_mish},
        {"Celu", {{0}}, 0, r_celu},
        {"Celu", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 2.0f}}, 1, r_celu},
        {"Swish", {{0}}, 0, r_swish},
        {"Swish", {{.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.5f}}, 1, r_swish},
        {"Gelu", {{0}}, 0, r_gelu},
        {"Gelu", {{.name = "approximate", .type = ENG_ATTR_STRING, .s = "tanh", .s_len = 4}}, 1,
         r_gelu_tanh},
    };
    static const float x[] = {-3.0f, -1.2f, -0.5f, -0.0f, 0.25f, 0.7f, 1.0f, 2.5f, 9.0f};
    float want[N_OF(x)];
    eng_tensor_t in = tensor(ENG_DT_FLOAT, x, 2, DIMS(3, 3));
    const eng_tensor_t *ins[] = {&in};
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 21, cases[k].attrs, cases[k].n_attrs, ins, 1, 1, ENG_DT_FLOAT, 9);
        cr_expect_eq(c.outs[0].shape.rank, 2);
        for (size_t i = 0; i < N_OF(x); i++)
            want[i] = (float)cases[k].ref(x[i], cases[k].attrs);
        expect_floats(c.outs[0].data, want, N_OF(x), 1e-5f, cases[k].op);
        call_free(&c);
    }
}

Test(engine_ops_unary, domain_limited_ops_match_libm)
{
    static const float x[] = {0.01f, 0.3f, 0.99f, 2.0f, 100.0f};
    static const float y[] = {-0.9f, -0.2f, 0.0f, 0.5f, 0.99f};
    static const struct {
        const char *op;
        const float *x;
        double (*ref)(double, const eng_attr_t *);
    } cases[] = {{"Log", x, r_log},     {"Sqrt", x, r_sqrt},   {"Asin", y, r_asin},
                 {"Acos", y, r_acos},   {"Acosh", x, r_acosh}, {"Atanh", y, r_atanh}};
    for (size_t k = 0; k < N_OF(cases); k++) {
        eng_tensor_t in = vec(ENG_DT_FLOAT, cases[k].x, 5);
        const eng_tensor_t *ins[] = {&in};
        float want[5];
        for (int i = 0; i < 5; i++)
            want[i] = (float)cases[k].ref(cases[k].x[i], NULL);
        call_t c;
        run_ok(&c, cases[k].op, 13, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, 5);
        expect_floats(c.outs[0].data, want, 5, 1e-6f, cases[k].op);
        call_free(&c);
    }
}

Test(engine_ops_unary, real_ops_compute_double_in_double)
{
    static const double x[] = {-3, -0.5, 0.1, 1, 20};
    eng_tensor_t in = vec(ENG_DT_DOUBLE, x, 5);
    const eng_tensor_t *ins[] = {&in};
    static const struct {
        const char *op;
        double (*ref)(double, const eng_attr_t *);
    } cases[] = {{"Exp", r_exp}, {"Sinh", r_sinh}, {"Swish", r_swish}, {"Softplus", r_softplus}};
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 22, NULL, 0, ins, 1, 1, ENG_DT_DOUBLE, 5);
        const double *y = c.outs[0].data;
        for (int i = 0; i < 5; i++) {
            double want = cases[k].ref(x[i], (const eng_attr_t[3]){{0}});
            cr_expect(fabs(y[i] - want) <= 1e-14 * (1 + fabs(want)), "%s(%g): %.17g, want %.17g",
                      cases[k].op, x[i], y[i], want);
        }
        call_free(&c);
    }
}

Test(engine_ops_unary, shrink_on_floats_and_integers)
{
    static const float xf[] = {-2, -0.5f, 0, 0.4f, 3};
    static const int32_t xi[] = {-5, -1, 0, 1, 5};
    const eng_attr_t attrs[] = {{.name = "lambd", .type = ENG_ATTR_FLOAT, .f = 1.0f},
                                {.name = "bias", .type = ENG_ATTR_FLOAT, .f = 1.5f}};
    eng_tensor_t tf = vec(ENG_DT_FLOAT, xf, 5), ti = vec(ENG_DT_INT32, xi, 5);
    const eng_tensor_t *f32[] = {&tf}, *i32[] = {&ti};
    call_t c;
    run_ok(&c, "Shrink", 9, NULL, 0, f32, 1, 1, ENG_DT_FLOAT, 5);
    expect_floats(c.outs[0].data, (const float[]){-2, 0, 0, 0, 3}, 5, 0, "Shrink");
    call_free(&c);
    run_ok(&c, "Shrink", 9, attrs, 2, i32, 1, 1, ENG_DT_INT32, 5);
    const int32_t *y = c.outs[0].data;
    /* -5 + 1.5 = -3.5 and 5 - 1.5 = 3.5 truncate towards zero. */
    cr_expect(y[0] == -3 && y[1] == 0 && y[2] == 0 && y[3] == 0 && y[4] == 3,
              "%d %d %d %d %d", y[0], y[1], y[2], y[3], y[4]);
    call_free(&c);
}

Test(engine_ops_unary, sigmoid_and_softplus_stay_finite_at_extremes)
{
    static const float x[] = {-100.0f, -89.0f, 89.0f, 100.0f};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 4);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Sigmoid", 13, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, (const float[]){0, 0, 1, 1}, 4, 1e-6f, "Sigmoid");
    call_free(&c);
    run_ok(&c, "Softplus", 13, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, (const float[]){0, 0, 89, 100}, 4, 1e-6f, "Softplus");
    call_free(&c);
}

Test(engine_ops_unary, tanh_is_accurate_over_its_whole_range)
{
    enum { N = 4001 };
    static float x[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i - N / 2) / 100.0f; /* -20 .. 20 */
        want[i] = (float)tanh(x[i]);
    }
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, N);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Tanh", 13, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, N);
    expect_floats(c.outs[0].data, want, N, 5e-7f, "Tanh");
    call_free(&c);
    static const float special[] = {INFINITY, -INFINITY, NAN, 1e-30f};
    eng_tensor_t sp = vec(ENG_DT_FLOAT, special, 4);
    const eng_tensor_t *sins[] = {&sp};
    run_ok(&c, "Tanh", 13, NULL, 0, sins, 1, 1, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, (const float[]){1, -1, NAN, 1e-30f}, 4, 1e-6f, "Tanh special");
    call_free(&c);
}

Test(engine_ops_unary, round_goes_half_to_even)
{
    static const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f, 3.5f};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 8);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Round", 11, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, 8);
    expect_floats(c.outs[0].data, (const float[]){0, 2, 2, -0.0f, -2, 2, -3, 4}, 8, 0, "Round");
    call_free(&c);
}

Test(engine_ops_unary, gelu_rejects_unknown_approximation)
{
    static const float x[] = {1};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 1);
    const eng_tensor_t *ins[] = {&in};
    const eng_attr_t a[] = {attr_s("approximate", "fast")};
    infer_fails("Gelu", 20, a, 1, ins, 1, FS_ENOTSUP, "fast");
}

/* --- unary: integer and bool ops -------------------------------------------------- */

Test(engine_ops_unary, abs_neg_sign_relu_on_integers)
{
    static const int32_t x[] = {-7, 0, 5, INT32_MIN, INT32_MAX};
    eng_tensor_t in = vec(ENG_DT_INT32, x, 5);
    const eng_tensor_t *ins[] = {&in};
    static const struct {
        const char *op;
        int32_t want[5];
    } cases[] = {
        {"Abs", {7, 0, 5, INT32_MIN, INT32_MAX}}, /* |INT_MIN| wraps, as in two's complement */
        {"Neg", {7, 0, -5, INT32_MIN, -INT32_MAX}},
        {"Sign", {-1, 0, 1, -1, 1}},
        {"Relu", {0, 0, 5, 0, INT32_MAX}},
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 14, NULL, 0, ins, 1, 1, ENG_DT_INT32, 5);
        const int32_t *y = c.outs[0].data;
        for (int i = 0; i < 5; i++)
            cr_expect_eq(y[i], cases[k].want[i], "%s[%d]: %d, want %d", cases[k].op, i, y[i],
                         cases[k].want[i]);
        call_free(&c);
    }
    static const int64_t x64[] = {-3, 4};
    eng_tensor_t in64 = vec(ENG_DT_INT64, x64, 2);
    const eng_tensor_t *ins64[] = {&in64};
    call_t c;
    run_ok(&c, "Neg", 13, NULL, 0, ins64, 1, 1, ENG_DT_INT64, 2);
    cr_expect(((int64_t *)c.outs[0].data)[0] == 3 && ((int64_t *)c.outs[0].data)[1] == -4);
    call_free(&c);
}

Test(engine_ops_unary, abs_and_sign_on_unsigned_and_int8)
{
    static const uint8_t u[] = {0, 3, 255};
    eng_tensor_t in = vec(ENG_DT_UINT8, u, 3);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Sign", 13, NULL, 0, ins, 1, 1, ENG_DT_UINT8, 3);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 1, 1}, 3, "Sign u8");
    call_free(&c);
    static const int8_t s[] = {-128, -3, 3};
    eng_tensor_t in8 = vec(ENG_DT_INT8, s, 3);
    const eng_tensor_t *ins8[] = {&in8};
    run_ok(&c, "Abs", 13, NULL, 0, ins8, 1, 1, ENG_DT_INT8, 3);
    const int8_t *y = c.outs[0].data;
    cr_expect(y[0] == -128 && y[1] == 3 && y[2] == 3, "Abs i8: %d %d %d", y[0], y[1], y[2]);
    call_free(&c);
}

Test(engine_ops_unary, not_flips_bools)
{
    static const uint8_t x[] = {1, 0, 0, 1};
    eng_tensor_t in = tensor(ENG_DT_BOOL, x, 2, DIMS(2, 2));
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Not", 13, NULL, 0, ins, 1, 1, ENG_DT_BOOL, 4);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 1, 1, 0}, 4, "Not");
    call_free(&c);
}

Test(engine_ops_unary, isnan_and_isinf_classify_each_float)
{
    static const float x[] = {0.0f, -0.0f, 1.0f, -INFINITY, INFINITY, NAN, -1.0f, 3e38f};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 8);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "IsNaN", 13, NULL, 0, ins, 1, 1, ENG_DT_BOOL, 8);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 0, 0, 0, 0, 1, 0, 0}, 8, "IsNaN");
    call_free(&c);
    run_ok(&c, "IsInf", 10, NULL, 0, ins, 1, 1, ENG_DT_BOOL, 8);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 0, 0, 1, 1, 0, 0, 0}, 8, "IsInf");
    call_free(&c);
    const eng_attr_t neg_only[] = {{.name = "detect_positive", .type = ENG_ATTR_INT, .i = 0}};
    const eng_attr_t pos_only[] = {{.name = "detect_negative", .type = ENG_ATTR_INT, .i = 0}};
    run_ok(&c, "IsInf", 10, neg_only, 1, ins, 1, 1, ENG_DT_BOOL, 8);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 0, 0, 1, 0, 0, 0, 0}, 8, "IsInf -inf");
    call_free(&c);
    run_ok(&c, "IsInf", 10, pos_only, 1, ins, 1, 1, ENG_DT_BOOL, 8);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 0, 0, 0, 1, 0, 0, 0}, 8, "IsInf +inf");
    call_free(&c);
    static const int32_t xi[] = {1};
    eng_tensor_t ti = vec(ENG_DT_INT32, xi, 1);
    const eng_tensor_t *i32[] = {&ti};
    infer_fails("IsNaN", 13, NULL, 0, i32, 1, FS_ENOTSUP, "int32");
}

Test(engine_ops_unary, unsupported_dtypes_are_refused)
{
    static const int32_t xi[] = {1};
    static const float xf[] = {1};
    static const uint8_t xu[] = {1};
    eng_tensor_t ti = vec(ENG_DT_INT32, xi, 1), tf = vec(ENG_DT_FLOAT, xf, 1),
                 tu = vec(ENG_DT_UINT8, xu, 1), ts = vec(ENG_DT_STRING, xi, 1);
    const eng_tensor_t *i32[] = {&ti}, *f32[] = {&tf}, *u8[] = {&tu}, *str[] = {&ts};
    infer_fails("Exp", 13, NULL, 0, i32, 1, FS_ENOTSUP, "int32");
    infer_fails("Not", 13, NULL, 0, f32, 1, FS_ENOTSUP, "float");
    infer_fails("Neg", 13, NULL, 0, u8, 1, FS_ENOTSUP, "uint8");
    infer_fails("Abs", 13, NULL, 0, str, 1, FS_ENOTSUP, "string");
    /* The kernel refuses too, when called on a context infer never saw. */
    call_t c;
    memset(&c, 0, sizeof c);
    eng_tensor_t out = vec(ENG_DT_INT32, (int32_t[1]){0}, 1);
    eng_tensor_t *outs[] = {&out};
    eng_node_t node = {.name = "n0", .op_type = "Exp"};
    eng_op_ctx_t ctx = {.node = &node, .opset = 13, .n_inputs = 1, .inputs = i32,
                        .n_outputs = 1, .outputs = outs, .n_threads = 1};
    cr_expect_eq(eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), "Exp")->run(&ctx), FS_ENOTSUP);
}

Test(engine_ops_unary, runs_in_place)
{
    float x[] = {-1.0f, 2.0f, -3.0f, 4.0f};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 4);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "Relu", 14, NULL, 0, ins, 1, 1), 0);
    cr_expect_eq(eng_op_find("Relu")->inplace_input, 0);
    c.outs[0].data = x;
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    expect_floats(x, (const float[]){0, 2, 0, 4}, 4, 0, "Relu in place");
    call_free(&c);
}

/* --- Cast -------------------------------------------------------------------------------- */

/* Runs Cast(to) on `in`; the caller frees. */
static void cast_ok(call_t *c, const eng_tensor_t *in, eng_dtype_t to)
{
    const eng_attr_t a[] = {attr_i("to", to)};
    const eng_tensor_t *ins[] = {in};
    run_ok(c, "Cast", 19, a, 1, ins, 1, 1, to, eng_shape_numel(&in->shape));
}

Test(engine_ops_unary, cast_float_to_integers_truncates_and_saturates)
{
    static const float x[] = {1.9f, -1.9f, 3e9f, -3e9f, NAN, 0.0f};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 6);
    call_t c;
    cast_ok(&c, &in, ENG_DT_INT32);
    const int32_t *y = c.outs[0].data;
    const int32_t want[] = {1, -1, INT32_MAX, INT32_MIN, 0, 0};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(y[i], want[i], "int32[%d]: %d, want %d", i, y[i], want[i]);
    call_free(&c);
    cast_ok(&c, &in, ENG_DT_UINT8);
    expect_bools(c.outs[0].data, (const uint8_t[]){1, 0, 255, 0, 0, 0}, 6, "uint8");
    call_free(&c);
    cast_ok(&c, &in, ENG_DT_BOOL);
    expect_bools(c.outs[0].data, (const uint8_t[]){1, 1, 1, 1, 1, 0}, 6, "bool");
    call_free(&c);
}

Test(engine_ops_unary, cast_between_integers_is_exact_and_wraps)
{
    static const int64_t x[] = {(int64_t)1 << 60, -1, 300, 9007199254740993};
    eng_tensor_t in = vec(ENG_DT_INT64, x, 4);
    call_t c;
    cast_ok(&c, &in, ENG_DT_UINT64);
    const uint64_t *u = c.outs[0].data;
    cr_expect(u[0] == (uint64_t)1 << 60 && u[1] == UINT64_MAX && u[3] == 9007199254740993u);
    call_free(&c);
    cast_ok(&c, &in, ENG_DT_INT8);
    const int8_t *s = c.outs[0].data;
    cr_expect(s[0] == 0 && s[1] == -1 && s[2] == 44, "int8: %d %d %d", s[0], s[1], s[2]);
    call_free(&c);
    cast_ok(&c, &in, ENG_DT_DOUBLE);
    cr_expect_eq(((double *)c.outs[0].data)[2], 300.0);
    call_free(&c);
    static const uint8_t b[] = {1, 0};
    eng_tensor_t inb = vec(ENG_DT_BOOL, b, 2);
    cast_ok(&c, &inb, ENG_DT_FLOAT);
    expect_floats(c.outs[0].data, (const float[]){1, 0}, 2, 0, "bool->float");
    call_free(&c);
}

Test(engine_ops_unary, cast_to_half_precision_rounds_to_nearest_even)
{
    static const float x[] = {1.0f, -2.0f, 65504.0f, 70000.0f, 5.96e-8f, 1.0009766f, 0.1f, NAN};
    static const uint16_t want_f16[] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0x0001, 0x3c01, 0x2e66};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 8);
    call_t c;
    cast_ok(&c, &in, ENG_DT_FLOAT16);
    const uint16_t *h = c.outs[0].data;
    for (size_t i = 0; i < N_OF(want_f16); i++)
        cr_expect_eq(h[i], want_f16[i], "f16[%zu]: 0x%04x, want 0x%04x", i, h[i], want_f16[i]);
    cr_expect((h[7] & 0x7c00) == 0x7c00 && (h[7] & 0x3ff) != 0, "NaN stays NaN: 0x%04x", h[7]);
    eng_tensor_t back = c.outs[0];
    call_t c2;
    cast_ok(&c2, &back, ENG_DT_FLOAT);
    expect_floats(c2.outs[0].data, (const float[]){1, -2, 65504, INFINITY, 5.9604645e-8f,
                                                   1.0009766f, 0.099975586f, NAN},
                  8, 0, "f16->float");
    call_free(&c2);
    call_free(&c);
    cast_ok(&c, &in, ENG_DT_BFLOAT16);
    h = c.outs[0].data;
    cr_expect(h[0] == 0x3f80 && h[1] == 0xc000 && h[6] == 0x3dcd, "bf16: %04x %04x %04x", h[0],
              h[1], h[6]);
    call_free(&c);
}

Test(engine_ops_unary, castlike_takes_the_second_inputs_dtype)
{
    static const float x[] = {2.5f, -1.0f};
    static const int64_t like[] = {0};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 2), lk = vec(ENG_DT_INT64, like, 1);
    const eng_tensor_t *ins[] = {&in, &lk};
    call_t c;
    run_ok(&c, "CastLike", 19, NULL, 0, ins, 2, 1, ENG_DT_INT64, 2);
    cr_expect(((int64_t *)c.outs[0].data)[0] == 2 && ((int64_t *)c.outs[0].data)[1] == -1);
    call_free(&c);
}

Test(engine_ops_unary, cast_refuses_unsupported_targets_at_load)
{
    static const float x[] = {1};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 1);
    const eng_tensor_t *ins[] = {&in};
    const eng_attr_t to_complex[] = {attr_i("to", ENG_DT_COMPLEX64)};
    infer_fails("Cast", 13, to_complex, 1, ins, 1, FS_ENOTSUP, "complex64");
    const eng_attr_t to_fp8[] = {attr_i("to", 23)}; /* float4e2m1 */
    infer_fails("Cast", 19, to_fp8, 1, ins, 1, FS_ENOTSUP, "not supported");
    infer_fails("Cast", 13, NULL, 0, ins, 1, FS_EINVAL, "'to'");
}

/* --- Clip, Identity, Dropout -------------------------------------------------------------- */

Test(engine_ops_unary, clip_reads_attributes_before_opset_11)
{
    static const float x[] = {-5, -1, 0, 1, 5};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 5);
    const eng_tensor_t *ins[] = {&in};
    const eng_attr_t a[] = {attr_f("min", -2), attr_f("max", 2)};
    call_t c;
    run_ok(&c, "Clip", 10, a, 2, ins, 1, 1, ENG_DT_FLOAT, 5);
    expect_floats(c.outs[0].data, (const float[]){-2, -1, 0, 1, 2}, 5, 0, "Clip-6");
    call_free(&c);
    run_ok(&c, "Clip", 10, a + 1, 1, ins, 1, 1, ENG_DT_FLOAT, 5);
    expect_floats(c.outs[0].data, (const float[]){-5, -1, 0, 1, 2}, 5, 0, "Clip-6 max only");
    call_free(&c);
    /* From opset 11 the attributes mean nothing: no bounds. */
    run_ok(&c, "Clip", 11, a, 2, ins, 1, 1, ENG_DT_FLOAT, 5);
    expect_floats(c.outs[0].data, x, 5, 0, "Clip-11 without inputs");
    call_free(&c);
}

Test(engine_ops_unary, clip_reads_optional_inputs_from_opset_11)
{
    static const float x[] = {-5, -1, 0, 1, 5, NAN};
    static const float lo[] = {-2}, hi[] = {3}, big[] = {10};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 6), tlo = tensor(ENG_DT_FLOAT, lo, 0, NULL),
                 thi = tensor(ENG_DT_FLOAT, hi, 0, NULL), tbig = tensor(ENG_DT_FLOAT, big, 0, NULL);
    call_t c;
    const eng_tensor_t *both[] = {&in, &tlo, &thi};
    run_ok(&c, "Clip", 13, NULL, 0, both, 3, 1, ENG_DT_FLOAT, 6);
    expect_floats(c.outs[0].data, (const float[]){-2, -1, 0, 1, 3, NAN}, 6, 0, "Clip");
    call_free(&c);
    const eng_tensor_t *max_only[] = {&in, NULL, &thi};
    run_ok(&c, "Clip", 13, NULL, 0, max_only, 3, 1, ENG_DT_FLOAT, 6);
    expect_floats(c.outs[0].data, (const float[]){-5, -1, 0, 1, 3, NAN}, 6, 0, "Clip max");
    call_free(&c);
    const eng_tensor_t *min_gt_max[] = {&in, &tbig, &thi};
    run_ok(&c, "Clip", 13, NULL, 0, min_gt_max, 3, 1, ENG_DT_FLOAT, 6);
    expect_floats(c.outs[0].data, (const float[]){3, 3, 3, 3, 3, NAN}, 6, 0, "Clip min>max");
    call_free(&c);
}

Test(engine_ops_unary, clip_on_integers_and_mismatched_bounds)
{
    static const int8_t x[] = {-128, -5, 0, 7, 127};
    static const int8_t hi[] = {5};
    static const float fhi[] = {5};
    eng_tensor_t in = vec(ENG_DT_INT8, x, 5), thi = tensor(ENG_DT_INT8, hi, 0, NULL),
                 tf = tensor(ENG_DT_FLOAT, fhi, 0, NULL);
    const eng_tensor_t *ins[] = {&in, NULL, &thi};
    call_t c;
    run_ok(&c, "Clip", 13, NULL, 0, ins, 3, 1, ENG_DT_INT8, 5);
    const int8_t *y = c.outs[0].data;
    const int8_t want[] = {-128, -5, 0, 5, 5};
    for (int i = 0; i < 5; i++)
        cr_expect_eq(y[i], want[i], "int8[%d]: %d, want %d", i, y[i], want[i]);
    call_free(&c);
    const eng_tensor_t *bad[] = {&in, NULL, &tf};
    infer_fails("Clip", 13, NULL, 0, bad, 3, FS_EINVAL, "max");
    const eng_tensor_t *old[] = {&in};
    infer_fails("Clip", 10, NULL, 0, old, 1, FS_ENOTSUP, "int8");
}

Test(engine_ops_unary, identity_copies_any_dtype)
{
    static const int64_t x[] = {1, -2, 3};
    eng_tensor_t in = vec(ENG_DT_INT64, x, 3);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Identity", 16, NULL, 0, ins, 1, 1, ENG_DT_INT64, 3);
    cr_expect_eq(memcmp(c.outs[0].data, x, sizeof x), 0);
    call_free(&c);
}

Test(engine_ops_unary, dropout_passes_input_through_with_a_true_mask)
{
    static const float x[] = {1, -2, 3, 4};
    static const float ratio[] = {0.5f};
    eng_tensor_t in = tensor(ENG_DT_FLOAT, x, 2, DIMS(2, 2)), tr = tensor(ENG_DT_FLOAT, ratio, 0, NULL);
    const eng_tensor_t *ins[] = {&in, &tr};
    call_t c;
    run_ok(&c, "Dropout", 13, NULL, 0, ins, 2, 2, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, x, 4, 0, "Dropout output");
    cr_expect_eq(c.outs[1].dtype, ENG_DT_BOOL);
    expect_bools(c.outs[1].data, (const uint8_t[]){1, 1, 1, 1}, 4, "Dropout mask");
    call_free(&c);
    /* Before opset 10 the mask has the input's type; ratio is an attribute. */
    const eng_attr_t a[] = {attr_f("ratio", 0.3f)};
    run_ok(&c, "Dropout", 7, a, 1, ins, 1, 2, ENG_DT_FLOAT, 4);
    cr_expect_eq(c.outs[1].dtype, ENG_DT_FLOAT);
    expect_floats(c.outs[1].data, (const float[]){1, 1, 1, 1}, 4, 0, "Dropout-7 mask");
    call_free(&c);
}

Test(engine_ops_unary, dropout_refuses_training_mode)
{
    static const float x[] = {1};
    static const uint8_t on[] = {1};
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, 1), train = tensor(ENG_DT_BOOL, on, 0, NULL);
    const eng_tensor_t *ins[] = {&in, NULL, &train};
    infer_fails("Dropout", 13, NULL, 0, ins, 3, FS_ENOTSUP, "training_mode");
    /* Known only at run time: the kernel refuses. */
    eng_tensor_t unknown = tensor(ENG_DT_BOOL, NULL, 0, NULL);
    const eng_tensor_t *ins2[] = {&in, NULL, &unknown};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "Dropout", 13, NULL, 0, ins2, 3, 1), 0, "%s", fs_errmsg());
    unknown.data = (void *)on;
    cr_expect_eq(call_run(&c), FS_ENOTSUP);
    call_free(&c);
}

/* --- binary: broadcasting ------------------------------------------------------------ */

/* Deterministic values in [-4, 4) with two decimals. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((int64_t)((rng_state >> 11) % 800) - 400) / 100.0f;
}

/* The flat index in `t` of output element `i` under numpy broadcasting. */
static int64_t bcast_index(const eng_shape_t *t, const eng_shape_t *out, int64_t i)
{
    int64_t idx = 0, stride = 1;
    for (int d = out->rank - 1; d >= 0; d--) {
        int64_t at = i % out->dims[d];
        i /= out->dims[d];
        int td = d - (out->rank - t->rank);
        if (td < 0)
            continue;
        if (t->dims[td] != 1)
            idx += at * stride;
        stride *= t->dims[td];
    }
    return idx;
}

static eng_shape_t shape_of(int rank, const int64_t *dims)
{
    eng_shape_t s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.dims[i] = dims[i];
    return s;
}

Test(engine_ops_binary, broadcasting_matches_a_naive_reference)
{
    static const struct {
        int ra, rb, ry;
        int64_t a[5], b[5], y[5];
    } cases[] = {
        {2, 2, 2, {3, 4}, {3, 4}, {3, 4}},                /* same shape */
        {2, 0, 2, {3, 4}, {0}, {3, 4}},                   /* scalar */
        {0, 3, 3, {0}, {2, 1, 3}, {2, 1, 3}},             /* scalar first */
        {2, 1, 2, {3, 4}, {4}, {3, 4}},                   /* row */
        {2, 2, 2, {3, 4}, {3, 1}, {3, 4}},                /* column */
        {3, 2, 3, {2, 1, 3}, {4, 1}, {2, 4, 3}},          /* both ways */
        {4, 4, 4, {3, 1, 4, 1}, {1, 5, 1, 2}, {3, 5, 4, 2}},
        {5, 3, 5, {2, 3, 1, 2, 2}, {3, 2, 1}, {2, 3, 3, 2, 2}},
        {3, 3, 3, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
        {2, 1, 2, {0, 3}, {3}, {0, 3}},                   /* empty */
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        eng_shape_t sa = shape_of(cases[k].ra, cases[k].a), sb = shape_of(cases[k].rb, cases[k].b);
        eng_shape_t sy = shape_of(cases[k].ry, cases[k].y);
        int64_t na = eng_shape_numel(&sa), nb = eng_shape_numel(&sb), ny = eng_shape_numel(&sy);
        float *a = malloc((size_t)(na + 1) * sizeof *a), *b = malloc((size_t)(nb + 1) * sizeof *b);
        for (int64_t i = 0; i < na; i++)
            a[i] = rnd();
        for (int64_t i = 0; i < nb; i++)
            b[i] = rnd();
        eng_tensor_t ta = tensor(ENG_DT_FLOAT, a, sa.rank, sa.dims);
        eng_tensor_t tb = tensor(ENG_DT_FLOAT, b, sb.rank, sb.dims);
        const eng_tensor_t *ins[] = {&ta, &tb};
        call_t c;
        run_ok(&c, "Sub", 14, NULL, 0, ins, 2, 1, ENG_DT_FLOAT, ny);
        cr_expect(eng_shape_equal(&c.outs[0].shape, &sy), "case %zu: output shape", k);
        const float *y = c.outs[0].data;
        for (int64_t i = 0; i < ny; i++) {
            float want = a[bcast_index(&sa, &sy, i)] - b[bcast_index(&sb, &sy, i)];
            cr_expect_eq(y[i], want, "case %zu [%lld]: %g, want %g", k, (long long)i, y[i], want);
        }
        call_free(&c);
        free(a);
        free(b);
    }
}

Test(engine_ops_binary, shapes_that_do_not_broadcast_are_refused)
{
    static const float x[12] = {0};
    eng_tensor_t a = tensor(ENG_DT_FLOAT, x, 2, DIMS(3, 4)), b = tensor(ENG_DT_FLOAT, x, 1, DIMS(3));
    const eng_tensor_t *ins[] = {&a, &b};
    infer_fails("Add", 14, NULL, 0, ins, 2, FS_EINVAL, "[3,4]");
}

Test(engine_ops_binary, mixed_and_unsupported_dtypes_are_refused)
{
    static const float f[] = {1};
    static const int32_t i[] = {1};
    eng_tensor_t tf = vec(ENG_DT_FLOAT, f, 1), ti = vec(ENG_DT_INT32, i, 1),
                 t8 = vec(ENG_DT_FLOAT8E4M3FN, i, 1), th = vec(ENG_DT_FLOAT16, i, 1),
                 tb = vec(ENG_DT_BOOL, i, 1);
    const eng_tensor_t *mixed[] = {&tf, &ti}, *f8[] = {&t8, &t8}, *bools[] = {&tb, &tb},
                       *floats[] = {&tf, &tf}, *halves[] = {&th, &th, &th};
    infer_fails("Mul", 14, NULL, 0, mixed, 2, FS_EINVAL, "int32");
    infer_fails("Add", 14, NULL, 0, f8, 2, FS_ENOTSUP, "float8e4m3fn");
    /* Three half inputs would round each partial sum: left to widening. */
    infer_fails("Sum", 13, NULL, 0, halves, 3, FS_ENOTSUP, "summed through float");
    infer_fails("Greater", 13, NULL, 0, bools, 2, FS_ENOTSUP, "bool");
    infer_fails("And", 7, NULL, 0, floats, 2, FS_ENOTSUP, "float");
    infer_fails("Sum", 13, NULL, 0, (const eng_tensor_t *[]){&ti, &ti}, 2, FS_ENOTSUP, "int32");
}

/* --- binary: arithmetic ----------------------------------------------------------------- */

Test(engine_ops_binary, integer_arithmetic_wraps_and_never_traps)
{
    static const int32_t a[] = {7, -7, INT32_MIN, INT32_MAX, 5};
    static const int32_t b[] = {2, 2, -1, 1, 0};
    eng_tensor_t ta = vec(ENG_DT_INT32, a, 5), tb = vec(ENG_DT_INT32, b, 5);
    const eng_tensor_t *ins[] = {&ta, &tb};
    static const struct {
        const char *op;
        int32_t want[5];
    } cases[] = {
        {"Add", {9, -5, INT32_MAX, INT32_MIN, 5}},
        {"Sub", {5, -9, INT32_MIN + 1, INT32_MAX - 1, 5}},
        {"Mul", {14, -14, INT32_MIN, INT32_MAX, 0}},
        {"Div", {3, -3, INT32_MIN, INT32_MAX, 0}}, /* truncates; x/0 gives 0 */
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 14, NULL, 0, ins, 2, 1, ENG_DT_INT32, 5);
        const int32_t *y = c.outs[0].data;
        for (int i = 0; i < 5; i++)
            cr_expect_eq(y[i], cases[k].want[i], "%s[%d]: %d, want %d", cases[k].op, i, y[i],
                         cases[k].want[i]);
        call_free(&c);
    }
    static const uint8_t u[] = {200, 3}, v[] = {100, 5};
    eng_tensor_t tu = vec(ENG_DT_UINT8, u, 2), tv = vec(ENG_DT_UINT8, v, 2);
    const eng_tensor_t *uins[] = {&tu, &tv};
    call_t c;
    run_ok(&c, "Add", 14, NULL, 0, uins, 2, 1, ENG_DT_UINT8, 2);
    expect_bools(c.outs[0].data, (const uint8_t[]){44, 8}, 2, "uint8 Add");
    call_free(&c);
    run_ok(&c, "Sub", 14, NULL, 0, uins, 2, 1, ENG_DT_UINT8, 2);
    expect_bools(c.outs[0].data, (const uint8_t[]){100, 254}, 2, "uint8 Sub");
    call_free(&c);
}

Test(engine_ops_binary, float_division_by_scalar)
{
    static const float a[] = {1, 2, 3, 4, 5, 6};
    static const float b[] = {4};
    eng_tensor_t ta = tensor(ENG_DT_FLOAT, a, 2, DIMS(2, 3)), tb = tensor(ENG_DT_FLOAT, b, 0, NULL);
    const eng_tensor_t *ins[] = {&ta, &tb};
    call_t c;
    run_ok(&c, "Div", 14, NULL, 0, ins, 2, 1, ENG_DT_FLOAT, 6);
    expect_floats(c.outs[0].data, (const float[]){0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f}, 6, 0, "Div");
    call_free(&c);
}

Test(engine_ops_binary, mod_follows_divisor_sign_unless_fmod)
{
    static const int64_t a[] = {-4, 4, -4, 4, 5, 3};
    static const int64_t b[] = {3, -3, -3, 3, 0, -1};
    eng_tensor_t ta = vec(ENG_DT_INT64, a, 6), tb = vec(ENG_DT_INT64, b, 6);
    const eng_tensor_t *ins[] = {&ta, &tb};
    call_t c;
    run_ok(&c, "Mod", 13, NULL, 0, ins, 2, 1, ENG_DT_INT64, 6);
    const int64_t want[] = {2, -2, -1, 1, 0, 0};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((int64_t *)c.outs[0].data)[i], want[i], "mod[%d]", i);
    call_free(&c);
    const eng_attr_t fm[] = {attr_i("fmod", 1)};
    run_ok(&c, "Mod", 13, fm, 1, ins, 2, 1, ENG_DT_INT64, 6);
    const int64_t want_f[] = {-1, 1, -1, 1, 0, 0};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((int64_t *)c.outs[0].data)[i], want_f[i], "fmod[%d]", i);
    call_free(&c);
    static const float fa[] = {-4.5f, 4.5f}, fb[] = {2, -2};
    eng_tensor_t tfa = vec(ENG_DT_FLOAT, fa, 2), tfb = vec(ENG_DT_FLOAT, fb, 2);
    const eng_tensor_t *fins[] = {&tfa, &tfb};
    run_ok(&c, "Mod", 13, fm, 1, fins, 2, 1, ENG_DT_FLOAT, 2);
    expect_floats(c.outs[0].data, (const float[]){-0.5f, 0.5f}, 2, 0, "float fmod");
    call_free(&c);
    infer_fails("Mod", 13, NULL, 0, fins, 2, FS_EINVAL, "fmod");
    const eng_attr_t bad[] = {attr_i("fmod", 2)};
    infer_fails("Mod", 13, bad, 1, ins, 2, FS_EINVAL, "fmod");
}

Test(engine_ops_binary, pow_with_mixed_dtypes)
{
    static const float base[] = {2, 3, -2, 4};
    static const float e2[] = {2};
    static const int32_t ei[] = {3, 0, 3, -1};
    eng_tensor_t tb = vec(ENG_DT_FLOAT, base, 4), te2 = tensor(ENG_DT_FLOAT, e2, 0, NULL),
                 tei = vec(ENG_DT_INT32, ei, 4);
    call_t c;
    run_ok(&c, "Pow", 15, NULL, 0, (const eng_tensor_t *[]){&tb, &te2}, 2, 1, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, (const float[]){4, 9, 4, 16}, 4, 0, "x^2");
    call_free(&c);
    run_ok(&c, "Pow", 15, NULL, 0, (const eng_tensor_t *[]){&tb, &tei}, 2, 1, ENG_DT_FLOAT, 4);
    expect_floats(c.outs[0].data, (const float[]){8, 1, -8, 0.25f}, 4, 0, "float^int32");
    call_free(&c);
    static const int32_t ib[] = {1, 2, 3};
    static const int32_t ie[] = {4, 5, 6};
    eng_tensor_t tib = vec(ENG_DT_INT32, ib, 3), tie = vec(ENG_DT_INT32, ie, 3);
    run_ok(&c, "Pow", 15, NULL, 0, (const eng_tensor_t *[]){&tib, &tie}, 2, 1, ENG_DT_INT32, 3);
    const int32_t *y = c.outs[0].data;
    cr_expect(y[0] == 1 && y[1] == 32 && y[2] == 729, "int32^int32: %d %d %d", y[0], y[1], y[2]);
    call_free(&c);
    static const float fr[] = {0.5f, 2, 1};
    eng_tensor_t tfr = vec(ENG_DT_FLOAT, fr, 3);
    run_ok(&c, "Pow", 15, NULL, 0, (const eng_tensor_t *[]){&tib, &tfr}, 2, 1, ENG_DT_INT32, 3);
    y = c.outs[0].data;
    cr_expect(y[0] == 1 && y[1] == 4 && y[2] == 3, "int32^float: %d %d %d", y[0], y[1], y[2]);
    call_free(&c);
}

Test(engine_ops_binary, prelu_slope_broadcasts_to_x_only)
{
    static const float x[] = {-1, 2, -3, 4, -5, 6, -7, 8};
    static const float slope[] = {0.5f, 2};
    eng_tensor_t tx = tensor(ENG_DT_FLOAT, x, 4, DIMS(1, 2, 2, 2));
    eng_tensor_t ts = tensor(ENG_DT_FLOAT, slope, 3, DIMS(2, 1, 1));
    call_t c;
    run_ok(&c, "PRelu", 16, NULL, 0, (const eng_tensor_t *[]){&tx, &ts}, 2, 1, ENG_DT_FLOAT, 8);
    expect_floats(c.outs[0].data, (const float[]){-0.5f, 2, -1.5f, 4, -10, 6, -14, 8}, 8, 0,
                  "PRelu");
    call_free(&c);
    eng_tensor_t big = tensor(ENG_DT_FLOAT, x, 2, DIMS(2, 4)), small = vec(ENG_DT_FLOAT, x, 4);
    infer_fails("PRelu", 16, NULL, 0, (const eng_tensor_t *[]){&small, &big}, 2, FS_EINVAL,
                "slope");
}

Test(engine_ops_binary, runs_in_place_on_input_0)
{
    float a[] = {1, 2, 3, 4, 5, 6};
    static const float b[] = {10, 20, 30};
    eng_tensor_t ta = tensor(ENG_DT_FLOAT, a, 2, DIMS(2, 3)), tb = vec(ENG_DT_FLOAT, b, 3);
    call_t c;
    cr_assert_eq(call_infer_at(&c, "Add", 14, NULL, 0, (const eng_tensor_t *[]){&ta, &tb}, 2, 1), 0);
    cr_expect_eq(eng_op_find("Add")->inplace_input, 0);
    c.outs[0].data = a;
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    expect_floats(a, (const float[]){11, 22, 33, 14, 25, 36}, 6, 0, "Add in place");
}

/* --- binary: comparisons, logic, Where ----------------------------------------------------- */

Test(engine_ops_binary, comparisons_give_bools)
{
    static const float a[] = {1, 2, 3, 4, 5, 6};
    static const float b[] = {2, 5, 6};
    eng_tensor_t ta = tensor(ENG_DT_FLOAT, a, 2, DIMS(2, 3)), tb = vec(ENG_DT_FLOAT, b, 3);
    const eng_tensor_t *ins[] = {&ta, &tb};
    static const struct {
        const char *op;
        uint8_t want[6];
    } cases[] = {
        {"Equal", {0, 0, 0, 0, 1, 1}},          {"Greater", {0, 0, 0, 1, 0, 0}},
        {"GreaterOrEqual", {0, 0, 0, 1, 1, 1}}, {"Less", {1, 1, 1, 0, 0, 0}},
        {"LessOrEqual", {1, 1, 1, 0, 1, 1}},
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 16, NULL, 0, ins, 2, 1, ENG_DT_BOOL, 6);
        expect_bools(c.outs[0].data, cases[k].want, 6, cases[k].op);
        call_free(&c);
    }
    static const int64_t ia[] = {-1, 7}, ib[] = {7};
    eng_tensor_t tia = vec(ENG_DT_INT64, ia, 2), tib = tensor(ENG_DT_INT64, ib, 0, NULL);
    call_t c;
    run_ok(&c, "Equal", 13, NULL, 0, (const eng_tensor_t *[]){&tia, &tib}, 2, 1, ENG_DT_BOOL, 2);
    expect_bools(c.outs[0].data, (const uint8_t[]){0, 1}, 2, "Equal int64");
    call_free(&c);
}

Test(engine_ops_binary, logic_ops_and_bool_equality)
{
    static const uint8_t a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
    eng_tensor_t ta = vec(ENG_DT_BOOL, a, 4), tb = vec(ENG_DT_BOOL, b, 4);
    const eng_tensor_t *ins[] = {&ta, &tb};
    static const struct {
        const char *op;
        uint8_t want[4];
    } cases[] = {{"And", {0, 0, 0, 1}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 1, 0}},
                 {"Equal", {1, 0, 0, 1}}};
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 13, NULL, 0, ins, 2, 1, ENG_DT_BOOL, 4);
        expect_bools(c.outs[0].data, cases[k].want, 4, cases[k].op);
        call_free(&c);
    }
}

Test(engine_ops_binary, where_broadcasts_three_ways)
{
    static const uint8_t cond[] = {1, 0, 1};
    static const int64_t x[] = {1, 2};
    static const int64_t y[] = {-9};
    eng_tensor_t tc = tensor(ENG_DT_BOOL, cond, 2, DIMS(1, 3)), tx = tensor(ENG_DT_INT64, x, 2, DIMS(2, 1));
    eng_tensor_t ty = tensor(ENG_DT_INT64, y, 0, NULL);
    call_t c;
    run_ok(&c, "Where", 16, NULL, 0, (const eng_tensor_t *[]){&tc, &tx, &ty}, 3, 1, ENG_DT_INT64, 6);
    cr_expect(c.outs[0].shape.rank == 2 && c.outs[0].shape.dims[0] == 2 &&
              c.outs[0].shape.dims[1] == 3);
    const int64_t want[] = {1, -9, 1, 2, -9, 2};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((int64_t *)c.outs[0].data)[i], want[i], "Where[%d]", i);
    call_free(&c);
    eng_tensor_t fy = tensor(ENG_DT_FLOAT, y, 0, NULL);
    infer_fails("Where", 16, NULL, 0, (const eng_tensor_t *[]){&tc, &tx, &fy}, 3, FS_EINVAL,
                "float");
    infer_fails("Where", 16, NULL, 0, (const eng_tensor_t *[]){&tx, &tx, &tx}, 3, FS_ENOTSUP,
                "int64");
}

/* --- binary: variadic ------------------------------------------------------------------------- */

Test(engine_ops_binary, variadic_ops_broadcast_every_input)
{
    static const float a[] = {1, 5, 3, 8, 2, 0};
    static const float b[] = {4, 4, 4};
    static const float s[] = {6};
    eng_tensor_t ta = tensor(ENG_DT_FLOAT, a, 2, DIMS(2, 3)), tb = vec(ENG_DT_FLOAT, b, 3),
                 ts = tensor(ENG_DT_FLOAT, s, 0, NULL);
    const eng_tensor_t *ins[] = {&tb, &ta, &ts};
    static const struct {
        const char *op;
        float want[6];
    } cases[] = {
        {"Max", {6, 6, 6, 8, 6, 6}},
        {"Min", {1, 4, 3, 4, 2, 0}},
        {"Sum", {11, 15, 13, 18, 12, 10}},
        {"Mean", {11 / 3.0f, 5, 13 / 3.0f, 6, 4, 10 / 3.0f}},
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 13, NULL, 0, ins, 3, 1, ENG_DT_FLOAT, 6);
        expect_floats(c.outs[0].data, cases[k].want, 6, 1e-6f, cases[k].op);
        call_free(&c);
    }
}

Test(engine_ops_binary, variadic_with_one_input_copies_it)
{
    static const int32_t a[] = {3, -1};
    eng_tensor_t ta = vec(ENG_DT_INT32, a, 2);
    call_t c;
    run_ok(&c, "Max", 13, NULL, 0, (const eng_tensor_t *[]){&ta}, 1, 1, ENG_DT_INT32, 2);
    cr_expect_eq(memcmp(c.outs[0].data, a, sizeof a), 0);
    call_free(&c);
}

Test(engine_ops_binary, max_and_min_propagate_nan_and_take_integers)
{
    static const float a[] = {NAN, 1, 2}, b[] = {0, NAN, 3};
    eng_tensor_t ta = vec(ENG_DT_FLOAT, a, 3), tb = vec(ENG_DT_FLOAT, b, 3);
    call_t c;
    run_ok(&c, "Max", 13, NULL, 0, (const eng_tensor_t *[]){&ta, &tb}, 2, 1, ENG_DT_FLOAT, 3);
    expect_floats(c.outs[0].data, (const float[]){NAN, NAN, 3}, 3, 0, "Max NaN");
    call_free(&c);
    run_ok(&c, "Min", 13, NULL, 0, (const eng_tensor_t *[]){&ta, &tb}, 2, 1, ENG_DT_FLOAT, 3);
    expect_floats(c.outs[0].data, (const float[]){NAN, NAN, 2}, 3, 0, "Min NaN");
    call_free(&c);
    static const uint16_t u[] = {1, 60000}, v[] = {2, 7};
    eng_tensor_t tu = vec(ENG_DT_UINT16, u, 2), tv = vec(ENG_DT_UINT16, v, 2);
    run_ok(&c, "Min", 13, NULL, 0, (const eng_tensor_t *[]){&tu, &tv}, 2, 1, ENG_DT_UINT16, 2);
    const uint16_t *y = c.outs[0].data;
    cr_expect(y[0] == 1 && y[1] == 7, "Min uint16: %u %u", y[0], y[1]);
    call_free(&c);
}

/* Erf's rational approximation against double erf on a fine grid over
 * [-6, 6] (it clamps at +-4, where float erf is +-1), plus NaN and +-inf. */
Test(engine_ops_unary, erf_is_within_half_a_micro_of_the_exact_value)
{
    enum { N = 120001 };
    float *x = malloc(N * sizeof *x);
    cr_assert(x);
    for (int i = 0; i < N; i++)
        x[i] = -6.0f + 12.0f * (float)i / (float)(N - 1);
    eng_tensor_t in = vec(ENG_DT_FLOAT, x, N);
    const eng_tensor_t *ins[] = {&in};
    call_t c;
    run_ok(&c, "Erf", 13, NULL, 0, ins, 1, 1, ENG_DT_FLOAT, N);
    const float *y = c.outs[0].data;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double err = fabs((double)y[i] - erf((double)x[i]));
        if (err > worst)
            worst = err;
    }
    cr_expect_leq(worst, 5e-7, "largest error %g", worst);
    call_free(&c);
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f};
    eng_tensor_t sin = vec(ENG_DT_FLOAT, special, 4);
    const eng_tensor_t *sins[] = {&sin};
    run_ok(&c, "Erf", 13, NULL, 0, sins, 1, 1, ENG_DT_FLOAT, 4);
    y = c.outs[0].data;
    cr_expect(isnan(y[0]));
    cr_expect_eq(y[1], 1.0f);
    cr_expect_eq(y[2], -1.0f);
    cr_expect_eq(y[3], 0.0f);
    call_free(&c);
    free(x);
}

/* --- bitwise ---------------------------------------------------------------------------- */

Test(engine_ops_binary, bitwise_ops_on_integers_broadcast)
{
    static const int16_t a[] = {0x0f0f, -1, 6};
    static const int16_t b[] = {0x00ff};
    eng_tensor_t ta = vec(ENG_DT_INT16, a, 3), tb = vec(ENG_DT_INT16, b, 1);
    const eng_tensor_t *ins[] = {&ta, &tb};
    static const struct {
        const char *op;
        int16_t want[3];
    } cases[] = {
        {"BitwiseAnd", {0x000f, 0x00ff, 6}},
        {"BitwiseOr", {0x0fff, -1, 0x00ff}},
        {"BitwiseXor", {0x0ff0, (int16_t)0xff00, 0x00f9}},
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        call_t c;
        run_ok(&c, cases[k].op, 18, NULL, 0, ins, 2, 1, ENG_DT_INT16, 3);
        const int16_t *y = c.outs[0].data;
        for (int i = 0; i < 3; i++)
            cr_expect_eq(y[i], cases[k].want[i], "%s[%d]: %d, want %d", cases[k].op, i, y[i],
                         cases[k].want[i]);
        call_free(&c);
    }
    call_t c;
    const eng_tensor_t *one[] = {&ta};
    run_ok(&c, "BitwiseNot", 18, NULL, 0, one, 1, 1, ENG_DT_INT16, 3);
    const int16_t *y = c.outs[0].data;
    cr_expect(y[0] == (int16_t)0xf0f0 && y[1] == 0 && y[2] == -7, "not: %d %d %d", y[0], y[1],
              y[2]);
    call_free(&c);
    static const float f[] = {1};
    eng_tensor_t tf = vec(ENG_DT_FLOAT, f, 1);
    const eng_tensor_t *fins[] = {&tf, &tf};
    infer_fails("BitwiseAnd", 18, NULL, 0, fins, 2, FS_ENOTSUP, "float");
}

Test(engine_ops_binary, bitshift_by_the_width_or_more_gives_zero)
{
    static const uint8_t x[] = {0x81, 0x81, 0x81, 0x81};
    static const uint8_t s[] = {1, 7, 8, 200};
    eng_tensor_t tx = vec(ENG_DT_UINT8, x, 4), ts = vec(ENG_DT_UINT8, s, 4);
    const eng_tensor_t *ins[] = {&tx, &ts};
    eng_attr_t left = attr_s("direction", "LEFT"), right = attr_s("direction", "RIGHT");
    call_t c;
    run_ok(&c, "BitShift", 11, &left, 1, ins, 2, 1, ENG_DT_UINT8, 4);
    expect_bools(c.outs[0].data, (const uint8_t[]){0x02, 0x80, 0, 0}, 4, "LEFT");
    call_free(&c);
    run_ok(&c, "BitShift", 11, &right, 1, ins, 2, 1, ENG_DT_UINT8, 4);
    expect_bools(c.outs[0].data, (const uint8_t[]){0x40, 0x01, 0, 0}, 4, "RIGHT");
    call_free(&c);
    eng_attr_t up = attr_s("direction", "UP");
    infer_fails("BitShift", 11, &up, 1, ins, 2, FS_EINVAL, "direction 'UP'");
    static const int32_t i[] = {1};
    eng_tensor_t ti = vec(ENG_DT_INT32, i, 1);
    const eng_tensor_t *iins[] = {&ti, &ti};
    infer_fails("BitShift", 11, &left, 1, iins, 2, FS_ENOTSUP, "int32");
}
