/* test_widen.c -- tests of float16/bfloat16 values through ops that compute
 * float only (engine/ops.c, "half inputs through float kernels"): each such
 * op runs its float kernel on float copies and rounds its results back, on
 * the static plan, with a half constant, and on the dynamic path; an op
 * that computes neither keeps its own refusal; every byte comes back. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/half.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F16 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
#define BF16 ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define BOOL ONNX__TENSOR_PROTO__DATA_TYPE__BOOL

static uint16_t to_half(eng_dtype_t dt, double v)
{
    return eng_float_to_half_dt(dt, (float)v);
}

static double from_half(eng_dtype_t dt, uint16_t h)
{
    return eng_half_dt_to_float(dt, h);
}

/* Rounds v to the half dtype, as each widened op rounds its results. */
static double round_half(eng_dtype_t dt, double v)
{
    return from_half(dt, to_half(dt, v));
}

static int onnx_dt(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT16 ? F16 : BF16;
}

/* A half tensor of `shape` holding x_at(i) (rounded). */
static eng_tensor_t *half_input(eng_dtype_t dt, const eng_shape_t *shape)
{
    eng_tensor_t *t;
    cr_assert_eq(eng_tensor_alloc_host(dt, shape, &t), 0);
    uint16_t *h = t->data;
    for (int64_t i = 0; i < eng_shape_numel(shape); i++)
        h[i] = to_half(dt, 0.25 * (double)((i * 7) % 11) - 1.0);
    return t;
}

/* Loads the built model over a fresh cache (f->model). */
static void load(model_fixture_t *f, mb_t *b)
{
    size_t len;
    uint8_t *bytes = mb_pack(b, &len);
    model_fixture_load_bytes(f, bytes, len);
}

/* |got - want| within one unit in the last place of the half dtype (the
 * float kernel and the double reference may round to either side). */
static void expect_close(eng_dtype_t dt, double got, double want, int64_t i)
{
    double ulp = dt == ENG_DT_FLOAT16 ? 0x1p-10 : 0x1p-7;
    cr_expect(fabs(got - want) <= ulp * fabs(want) + 1e-6, "%s element %lld: %.8g, want %.8g",
              eng_dtype_name(dt), (long long)i, got, want);
}

/* X [2, 5] -> Exp -> LpNormalization (p 2, axis 1) -> Y, in dt: Exp
 * computes the half dtype itself (test_ops_half.c), LpNormalization
 * through float; each rounds. */
static void exp_softmax(eng_dtype_t dt)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", onnx_dt(dt), 2, (int64_t[]){2, 5}, NULL);
    mb_node(&b, "Exp", "e", "X", "E");
    Onnx__NodeProto *ln = mb_node(&b, "LpNormalization", "l", "E", "Y");
    mb_attr_i(&b, ln, "axis", 1);
    mb_output(&b, "Y", onnx_dt(dt), 2, (int64_t[]){2, 5});
    model_fixture_t f;
    load(&f, &b);

    eng_shape_t xs = {.rank = 2, .dims = {2, 5}};
    eng_tensor_t *x = half_input(dt, &xs), *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, x, 1, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(out[0]->dtype, dt, "Y is %s", eng_dtype_name(out[0]->dtype));
    const uint16_t *xh = x->data, *yh = out[0]->data;
    for (int r = 0; r < 2; r++) {
        double s[5], sq = 0;
        for (int c = 0; c < 5; c++) {
            s[c] = round_half(dt, exp(from_half(dt, xh[r * 5 + c])));
            sq += s[c] * s[c];
        }
        for (int c = 0; c < 5; c++)
            expect_close(dt, from_half(dt, yh[r * 5 + c]), round_half(dt, s[c] / sqrt(sq)),
                         r * 5 + c);
    }
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(engine_widen, float16_rounds_each_result_native_or_widened)
{
    exp_softmax(ENG_DT_FLOAT16);
}

Test(engine_widen, bfloat16_rounds_each_result_native_or_widened)
{
    exp_softmax(ENG_DT_BFLOAT16);
}

/* X [2, 3] fp16 Einsum ('ij,jk->ik', float-only) W [3, 4] fp16 (a
 * constant) + B [4] fp16 -> Y. */
Test(engine_widen, half_constant_weights_feed_a_float_gemm)
{
    const eng_dtype_t dt = ENG_DT_FLOAT16;
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F16, 2, (int64_t[]){2, 3}, NULL);
    uint16_t w[12], bias[4];
    for (int i = 0; i < 12; i++)
        w[i] = to_half(dt, 0.125 * (double)(i % 5) - 0.25);
    for (int i = 0; i < 4; i++)
        bias[i] = to_half(dt, 0.5 * (double)i);
    Onnx__TensorProto *wt = mb_tensor(&b, "W", F16, 2, (int64_t[]){3, 4});
    mb_raw(&b, wt, w, sizeof w);
    mb_initializer(&b, wt);
    Onnx__TensorProto *bt = mb_tensor(&b, "B", F16, 1, (int64_t[]){4});
    mb_raw(&b, bt, bias, sizeof bias);
    mb_initializer(&b, bt);
    Onnx__NodeProto *es = mb_node(&b, "Einsum", "es", "X,W", "P");
    mb_attr_s(&b, es, "equation", "ij,jk->ik");
    mb_node(&b, "Add", "add", "P,B", "Y");
    mb_output(&b, "Y", F16, 2, (int64_t[]){2, 4});
    model_fixture_t f;
    load(&f, &b);

    eng_shape_t xs = {.rank = 2, .dims = {2, 3}};
    eng_tensor_t *x = half_input(dt, &xs), *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, x, 1, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(out[0]->dtype, dt);
    const uint16_t *xh = x->data, *yh = out[0]->data;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) {
            double p = 0;
            for (int k = 0; k < 3; k++)
                p += from_half(dt, xh[r * 3 + k]) * from_half(dt, w[k * 4 + c]);
            double want = round_half(dt, round_half(dt, p) + from_half(dt, bias[c]));
            expect_close(dt, from_half(dt, yh[r * 4 + c]), want, r * 4 + c);
        }
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}

/* X fp16 [8] -> Reshape by S (a graph input: the plan is dynamic) to two
 * 2x2 matrices -> Det, which computes float only. */
Test(engine_widen, the_dynamic_path_widens_the_same_way)
{
    const eng_dtype_t dt = ENG_DT_FLOAT16;
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F16, 1, (int64_t[]){8}, NULL);
    mb_input(&b, "S", I64, 1, (int64_t[]){3}, NULL);
    mb_node(&b, "Reshape", "r", "X,S", "R");
    mb_node(&b, "Det", "d", "R", "Y");
    mb_output(&b, "Y", F16, 1, (int64_t[]){-1});
    model_fixture_t f;
    load(&f, &b);

    eng_shape_t xs = {.rank = 1, .dims = {8}}, ss = {.rank = 1, .dims = {3}};
    eng_tensor_t *x = half_input(dt, &xs), *s, *out[1] = {NULL};
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_INT64, &ss, &s), 0);
    ((int64_t *)s->data)[0] = 2;
    ((int64_t *)s->data)[1] = 2;
    ((int64_t *)s->data)[2] = 2;
    eng_tensor_t ins[2] = {*x, *s};
    cr_assert_eq(eng_model_run(f.model, ins, 2, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(out[0]->dtype, dt);
    cr_assert_eq(out[0]->shape.rank, 1);
    cr_expect_eq(out[0]->shape.dims[0], 2);
    const uint16_t *xh = x->data, *yh = out[0]->data;
    for (int64_t m = 0; m < 2; m++) {
        const uint16_t *a = xh + 4 * m;
        double det = from_half(dt, a[0]) * from_half(dt, a[3]) -
                     from_half(dt, a[1]) * from_half(dt, a[2]);
        expect_close(dt, from_half(dt, yh[m]), round_half(dt, det), m);
    }
    eng_tensor_free(out[0]);
    eng_tensor_free(s);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}

/* Not takes bool only: float16 is refused with the op's own message, not
 * one about float. */
Test(engine_widen, an_op_that_computes_neither_keeps_its_refusal)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F16, 1, (int64_t[]){4}, NULL);
    mb_node(&b, "Not", "n", "X", "Y");
    mb_output(&b, "Y", BOOL, 1, (int64_t[]){4});
    model_fixture_t f;
    load(&f, &b);
    eng_shape_t xs = {.rank = 1, .dims = {4}};
    eng_tensor_t *x = half_input(ENG_DT_FLOAT16, &xs), *out[1] = {NULL};
    cr_expect_eq(eng_model_run(f.model, x, 1, out), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "input 0 has dtype float16") &&
                  strstr(fs_errmsg(), "supported: bool"),
              "%s", fs_errmsg());
    cr_expect_null(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}
