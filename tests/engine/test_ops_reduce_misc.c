/* test_ops_reduce_misc.c -- tests for the reduce and misc op families (engine/ops/{reduce,misc}.c, engine/cpu/{reduce,misc}_kernels.c): inference and CPU kernels called directly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"
#include "op_case.h"

/* 0, 1, 2, ... */
static float f_iota[64];

static void iota_init(void)
{
    for (int i = 0; i < 64; i++)
        f_iota[i] = (float)i;
}

TestSuite(engine_ops_reduce, .init = iota_init);
TestSuite(engine_ops_misc, .init = iota_init);

/* --- Reduce* ------------------------------------------------------------------------------- */

Test(engine_ops_reduce, sum_reads_axes_attribute_before_opset_13)
{
    static const int64_t axes[] = {1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    op_case_t *c = case_new("ReduceSum", 11, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 1));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 1));
    expect_f32_near(c->out[0], (const float[]){3, 12}, 2);
    case_free(c);
}

Test(engine_ops_reduce, sum_reads_axes_input_from_opset_13)
{
    static const int64_t axes[] = {0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t a = ten(ENG_DT_INT64, shp(1, 1), axes);
    op_case_t *c = case_new("ReduceSum", 13, 1);
    case_in(c, &x);
    case_in(c, &a);
    case_attr(c, a_int("keepdims", 0));
    case_run(c);
    expect_shape(c->out[0], shp(1, 3));
    expect_f32_near(c->out[0], (const float[]){3, 5, 7}, 3);
    case_free(c);
}

Test(engine_ops_reduce, mean_axes_attribute_until_opset_18)
{
    static const int64_t axes[] = {-1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    op_case_t *c = case_new("ReduceMean", 17, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 1));
    case_attr(c, a_int("keepdims", 0));
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    expect_f32_near(c->out[0], (const float[]){1, 4}, 2);
    case_free(c);
}

Test(engine_ops_reduce, axes_attribute_where_opset_wants_input_fails_check)
{
    static const int64_t axes[] = {1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    op_case_t *c = case_new("ReduceMax", 18, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 1));
    expect_err(case_infer(c), FS_EINVAL, "axes is an input from opset 18");
    case_free(c);
}

Test(engine_ops_reduce, unknown_axes_value_is_dynamic)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t a = ten(ENG_DT_INT64, shp(1, 1), NULL);
    op_case_t *c = case_new("ReduceL2", 18, 1);
    case_in(c, &x);
    case_in(c, &a);
    expect_err(case_infer(c), FS_EDYNAMIC, "axes");
    case_free(c);
}

Test(engine_ops_reduce, empty_axes_reduce_everything)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t a = ten(ENG_DT_INT64, shp(1, 0), NULL);
    op_case_t *c = case_new("ReduceSum", 13, 1);
    case_in(c, &x);
    case_in(c, &a);
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 1));
    expect_f32_near(c->out[0], (const float[]){15}, 1);
    case_free(c);
}

Test(engine_ops_reduce, noop_with_empty_axes_reduces_each_element_alone)
{
    static const float v[] = {-3, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 2), v);
    op_case_t *sum = case_new("ReduceSum", 13, 1);
    case_in(sum, &x);
    case_attr(sum, a_int("noop_with_empty_axes", 1));
    case_run(sum);
    expect_shape(sum->out[0], shp(1, 2));
    expect_f32_near(sum->out[0], v, 2);
    case_free(sum);
    op_case_t *sq = case_new("ReduceSumSquare", 18, 1);
    case_in(sq, &x);
    case_attr(sq, a_int("noop_with_empty_axes", 1));
    case_run(sq);
    expect_f32_near(sq->out[0], (const float[]){9, 4}, 2);
    case_free(sq);
    op_case_t *l2 = case_new("ReduceL2", 18, 1);
    case_in(l2, &x);
    case_attr(l2, a_int("noop_with_empty_axes", 1));
    case_run(l2);
    expect_f32_near(l2->out[0], (const float[]){3, 2}, 2);
    case_free(l2);
}

Test(engine_ops_reduce, each_reduction_over_two_of_three_axes)
{
    /* x[i][j][k] = i*4 + j*2 + k + 1; reduce axes 0 and 2 (negative form). */
    static const float v[] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const int64_t axes[] = {0, -1};
    static const struct {
        const char *op;
        float want[2];
    } cases[] = {
        {"ReduceSum", {1 + 2 + 5 + 6, 3 + 4 + 7 + 8}},
        {"ReduceSumSquare", {1 + 4 + 25 + 36, 9 + 16 + 49 + 64}},
        {"ReduceL2", {8.124038f, 11.74734f}},
        {"ReduceMean", {3.5f, 5.5f}},
        {"ReduceProd", {1 * 2 * 5 * 6, 3 * 4 * 7 * 8}},
        {"ReduceMax", {6, 8}},
        {"ReduceMin", {1, 3}},
        {"ReduceL1", {14, 22}},
        {"ReduceLogSum", {2.6390573f, 3.0910425f}},
        {"ReduceLogSumExp", {6.3314116f, 8.3314116f}},
    };
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 2, 2), v);
    for (size_t i = 0; i < N_OF(cases); i++) {
        op_case_t *c = case_new(cases[i].op, 11, 1);
        case_in(c, &x);
        case_attr(c, a_ints("axes", axes, 2));
        case_attr(c, a_int("keepdims", 0));
        case_run(c);
        expect_shape(c->out[0], shp(1, 2));
        expect_f32_near(c->out[0], cases[i].want, 2);
        case_free(c);
    }
}

Test(engine_ops_reduce, zero_size_axis_gives_the_identity)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 0, 4), f_iota);
    static const int64_t axes[] = {1};
    static const struct {
        const char *op;
        float want;
    } cases[] = {
        {"ReduceSum", 0}, {"ReduceProd", 1}, {"ReduceMax", -INFINITY}, {"ReduceMin", INFINITY},
        {"ReduceL2", 0},  {"ReduceMean", NAN},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        op_case_t *c = case_new(cases[i].op, 11, 1);
        case_in(c, &x);
        case_attr(c, a_ints("axes", axes, 1));
        case_run(c);
        expect_shape(c->out[0], shp(3, 2, 1, 4));
        float want[8];
        for (int k = 0; k < 8; k++)
            want[k] = cases[i].want;
        expect_f32_near(c->out[0], want, 8);
        case_free(c);
    }
}

Test(engine_ops_reduce, integer_and_bool_inputs)
{
    static const int64_t v64[] = {5, -2, 7, 1};
    static const int32_t v32[] = {5, -2, 7, 1};
    static const uint8_t vb[] = {0, 1, 0, 0};
    static const int64_t axes[] = {1};
    eng_tensor_t x64 = ten(ENG_DT_INT64, shp(2, 2, 2), v64);
    eng_tensor_t x32 = ten(ENG_DT_INT32, shp(2, 2, 2), v32);
    eng_tensor_t xb = ten(ENG_DT_BOOL, shp(2, 2, 2), vb);
    eng_tensor_t a = ten(ENG_DT_INT64, shp(1, 1), axes);
    op_case_t *c = case_new("ReduceSum", 13, 1);
    case_in(c, &x64);
    case_in(c, &a);
    case_run(c);
    expect_i64(c->out[0], (const int64_t[]){3, 8}, 2);
    case_free(c);
    c = case_new("ReduceMean", 18, 1);
    case_in(c, &x32);
    case_in(c, &a);
    case_run(c);
    expect_i32(c->out[0], (const int32_t[]){1, 4}, 2); /* 3/2 and 8/2, truncated */
    case_free(c);
    c = case_new("ReduceMax", 20, 1);
    case_in(c, &xb);
    case_in(c, &a);
    case_run(c);
    cr_expect_eq(c->out[0]->dtype, ENG_DT_BOOL);
    cr_expect(((uint8_t *)c->out[0]->data)[0] == 1 && ((uint8_t *)c->out[0]->data)[1] == 0);
    case_free(c);
}

Test(engine_ops_reduce, bad_axes_are_rejected)
{
    static const int64_t twice[] = {1, -1};
    static const int64_t far[] = {2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    op_case_t *c = case_new("ReduceMin", 11, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", twice, 2));
    expect_err(case_infer(c), FS_EINVAL, "twice");
    case_free(c);
    c = case_new("ReduceMin", 11, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", far, 1));
    expect_err(case_infer(c), FS_EINVAL, "out of range");
    case_free(c);
    eng_tensor_t h = ten(ENG_DT_INT8, shp(2, 2, 3), f_iota);
    c = case_new("ReduceSum", 11, 1);
    case_in(c, &h);
    expect_err(case_infer(c), FS_ENOTSUP, "int8");
    case_free(c);
}

/* --- ArgMax / ArgMin ------------------------------------------------------------------------ */

Test(engine_ops_reduce, argmax_keepdims_and_select_last_index)
{
    static const float v[] = {2, 2, 1, 3, 3, 0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 2), v);
    op_case_t *c = case_new("ArgMax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 2));
    expect_i64(c->out[0], (const int64_t[]){2, 1}, 2);
    case_free(c);
    c = case_new("ArgMax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 1));
    case_attr(c, a_int("keepdims", 0));
    case_attr(c, a_int("select_last_index", 1));
    case_run(c);
    expect_shape(c->out[0], shp(1, 3));
    expect_i64(c->out[0], (const int64_t[]){1, 1, 0}, 3);
    case_free(c);
}

Test(engine_ops_reduce, argmin_negative_axis_ties_take_first)
{
    static const int64_t v[] = {4, 1, 1, 7, 0, 0};
    eng_tensor_t x = ten(ENG_DT_INT64, shp(2, 2, 3), v);
    op_case_t *c = case_new("ArgMin", 11, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", -1));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 1));
    expect_i64(c->out[0], (const int64_t[]){1, 1}, 2);
    case_free(c);
}

Test(engine_ops_reduce, argmax_over_empty_axis_fails)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 0), f_iota);
    op_case_t *c = case_new("ArgMax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 1));
    expect_err(case_infer(c), FS_EINVAL, "size 0");
    case_free(c);
}

/* --- Softmax / LogSoftmax ------------------------------------------------------------------- */

Test(engine_ops_reduce, softmax_axis_flattens_tail_before_13_only)
{
    static const float v[] = {0, 1, 2, 3, 0, 0, 0, 0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 2, 2), v);
    float e[4], s = 0;
    for (int i = 0; i < 4; i++)
        s += e[i] = expf((float)i);
    float old_want[8] = {e[0] / s, e[1] / s, e[2] / s, e[3] / s, .25f, .25f, .25f, .25f};
    float new_want[8] = {e[0] / (e[0] + e[2]), e[1] / (e[1] + e[3]), e[2] / (e[0] + e[2]),
                         e[3] / (e[1] + e[3]), .5f, .5f, .5f, .5f};
    op_case_t *c = case_new("Softmax", 11, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 2, 2, 2));
    expect_f32_near(c->out[0], old_want, 8);
    case_free(c);
    c = case_new("Softmax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 1));
    case_run(c);
    expect_f32_near(c->out[0], new_want, 8);
    case_free(c);
}

Test(engine_ops_reduce, softmax_default_axis_is_1_before_13_and_last_after)
{
    static const float v[] = {0, 1, 2, 3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 2, 2), v);
    op_case_t *old = case_new("Softmax", 12, 1), *cur = case_new("Softmax", 13, 1);
    case_in(old, &x);
    case_in(cur, &x);
    case_run(old);
    case_run(cur);
    float s4 = 1 + expf(1) + expf(2) + expf(3), s2 = 1 + expf(1);
    expect_f32_near(old->out[0], (const float[]){1 / s4, expf(1) / s4, expf(2) / s4, expf(3) / s4}, 4);
    expect_f32_near(cur->out[0], (const float[]){1 / s2, expf(1) / s2, 1 / s2, expf(1) / s2}, 4);
    case_free(old);
    case_free(cur);
}

Test(engine_ops_reduce, log_softmax_of_large_numbers_stays_finite)
{
    static const float v[] = {10000, 10001, 10002};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 1, 3), v);
    op_case_t *c = case_new("LogSoftmax", 13, 1);
    case_in(c, &x);
    case_run(c);
    float lse = logf(expf(-2) + expf(-1) + 1);
    expect_f32_near(c->out[0], (const float[]){-2 - lse, -1 - lse, -lse}, 3);
    case_free(c);
    c = case_new("Softmax", 13, 1);
    case_in(c, &x);
    case_run(c);
    float s = expf(-2) + expf(-1) + 1;
    expect_f32_near(c->out[0], (const float[]){expf(-2) / s, expf(-1) / s, 1 / s}, 3);
    case_free(c);
}

Test(engine_ops_reduce, softmax_of_doubles_is_computed_in_double)
{
    /* Values 1e-9 apart, which float cannot tell apart: a softmax through
     * float would give exactly 1/3 each. Along axis 0 of [3, 2] (strided
     * lines), then LogSoftmax. */
    static const double v[] = {0, 5, 1e-9, 5, 2e-9, 5};
    eng_tensor_t x = ten(ENG_DT_DOUBLE, shp(2, 3, 2), v);
    double s = 1 + exp(1e-9) + exp(2e-9);
    op_case_t *c = case_new("Softmax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    cr_assert_eq(c->out[0]->dtype, ENG_DT_DOUBLE);
    const double *y = c->out[0]->data;
    cr_expect(fabs(y[0] - 1 / s) < 1e-15 && fabs(y[4] - exp(2e-9) / s) < 1e-15, "%.17g %.17g",
              y[0], y[4]);
    cr_expect(y[0] != y[4] && fabs(y[1] - 1.0 / 3) < 1e-15);
    case_free(c);
    c = case_new("LogSoftmax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    y = c->out[0]->data;
    cr_expect(fabs(y[2] - (1e-9 - log(s))) < 1e-15, "%.17g", y[2]);
    case_free(c);
}

Test(engine_ops_reduce, softmax_rejects_int_and_bad_axis)
{
    static const int64_t v[] = {1, 2};
    eng_tensor_t xi = ten(ENG_DT_INT64, shp(1, 2), v);
    op_case_t *c = case_new("Softmax", 13, 1);
    case_in(c, &xi);
    expect_err(case_infer(c), FS_ENOTSUP, "int64");
    case_free(c);
    eng_tensor_t xf = ten(ENG_DT_FLOAT, shp(2, 1, 2), f_iota);
    c = case_new("LogSoftmax", 13, 1);
    case_in(c, &xf);
    case_attr(c, a_int("axis", 2));
    expect_err(case_infer(c), FS_EINVAL, "axis 2");
    case_free(c);
}

Test(engine_ops_reduce, log_sum_exp_is_shifted_and_takes_doubles)
{
    /* 1000 and 999 overflow an unshifted exp; a line of -inf gives -inf;
     * ReduceL1 takes |x|. */
    static const double v[] = {1000, 999, -INFINITY, -INFINITY, -3, 4};
    static const int64_t axes[] = {1};
    eng_tensor_t x = ten(ENG_DT_DOUBLE, shp(2, 3, 2), v);
    eng_tensor_t ax = ten(ENG_DT_INT64, shp(1, 1), axes);
    op_case_t *c = case_new("ReduceLogSumExp", 18, 1);
    case_in(c, &x);
    case_in(c, &ax);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 1));
    const double *y = c->out[0]->data;
    cr_expect(fabs(y[0] - 1000.3132616875182) < 1e-9, "%.17g", y[0]);
    cr_expect(isinf(y[1]) && y[1] < 0, "%g", y[1]);
    cr_expect(fabs(y[2] - (4 + log(1 + exp(-7.0)))) < 1e-12, "%.17g", y[2]);
    case_free(c);
    c = case_new("ReduceL1", 18, 1);
    case_in(c, &x);
    case_in(c, &ax);
    case_attr(c, a_int("keepdims", 0));
    case_run(c);
    expect_shape(c->out[0], shp(1, 3));
    cr_expect(((const double *)c->out[0]->data)[2] == 7);
    case_free(c);
    /* The logs refuse integers, naming the dtype. */
    eng_tensor_t xi = ten(ENG_DT_INT32, shp(1, 2), (const int32_t[]){1, 2});
    c = case_new("ReduceLogSum", 13, 1);
    case_in(c, &xi);
    expect_err(case_infer(c), FS_ENOTSUP, "int32");
    case_free(c);
}

Test(engine_ops_reduce, hardmax_marks_the_first_largest_per_axis_or_flattened)
{
    static const float v[] = {1, 3, 3, 0, 5, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), v);
    /* From 13, per last axis; ties go to the first. */
    op_case_t *c = case_new("Hardmax", 13, 1);
    case_in(c, &x);
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 1, 0, 0, 1, 0}, 6);
    case_free(c);
    /* Before 13, axis 0 flattens everything into one line. */
    c = case_new("Hardmax", 11, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 0, 0, 0, 1, 0}, 6);
    case_free(c);
    /* Along axis 0 from 13. */
    c = case_new("Hardmax", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_f32(c->out[0], (const float[]){1, 0, 1, 0, 1, 0}, 6);
    case_free(c);
}

/* --- CumSum ------------------------------------------------------------------------------- */

Test(engine_ops_reduce, cumprod_exclusive_reverse_and_double)
{
    static const double v[] = {1, 2, 3, 4};
    eng_tensor_t x = ten(ENG_DT_DOUBLE, shp(1, 4), v);
    eng_tensor_t axis = ten(ENG_DT_INT64, shp(0), (const int64_t[]){0});
    op_case_t *c = case_new("CumProd", 26, 1);
    case_in(c, &x);
    case_in(c, &axis);
    case_attr(c, a_int("exclusive", 1));
    case_attr(c, a_int("reverse", 1));
    case_run(c);
    const double *y = c->out[0]->data;
    cr_expect(y[0] == 24 && y[1] == 12 && y[2] == 4 && y[3] == 1, "%g %g %g %g", y[0], y[1],
              y[2], y[3]);
    case_free(c);
    c = case_new("CumProd", 26, 1);
    case_in(c, &x);
    case_in(c, &axis);
    case_run(c);
    y = c->out[0]->data;
    cr_expect(y[0] == 1 && y[1] == 2 && y[2] == 6 && y[3] == 24);
    case_free(c);
}

Test(engine_ops_reduce, cumsum_exclusive_and_reverse)
{
    static const float v[] = {1, 2, 3, 4};
    static const int32_t ax0[] = {0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 4), v);
    eng_tensor_t axis = ten(ENG_DT_INT32, shp(0), ax0);
    static const struct {
        int exclusive, reverse;
        float want[4];
    } cases[] = {
        {0, 0, {1, 3, 6, 10}},
        {1, 0, {0, 1, 3, 6}},
        {0, 1, {10, 9, 7, 4}},
        {1, 1, {9, 7, 4, 0}},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        op_case_t *c = case_new("CumSum", 14, 1);
        case_in(c, &x);
        case_in(c, &axis);
        case_attr(c, a_int("exclusive", cases[i].exclusive));
        case_attr(c, a_int("reverse", cases[i].reverse));
        case_run(c);
        expect_f32_near(c->out[0], cases[i].want, 4);
        case_free(c);
    }
}

Test(engine_ops_reduce, cumsum_2d_along_each_axis_with_int32)
{
    static const int32_t v[] = {1, 2, 3, 4, 5, 6};
    static const int64_t ax0[] = {0}, axm1[] = {-1};
    eng_tensor_t x = ten(ENG_DT_INT32, shp(2, 2, 3), v);
    eng_tensor_t a0 = ten(ENG_DT_INT64, shp(1, 1), ax0);
    eng_tensor_t a1 = ten(ENG_DT_INT64, shp(0), axm1);
    op_case_t *c = case_new("CumSum", 11, 1);
    case_in(c, &x);
    case_in(c, &a0);
    case_run(c);
    expect_i32(c->out[0], (const int32_t[]){1, 2, 3, 5, 7, 9}, 6);
    case_free(c);
    c = case_new("CumSum", 11, 1);
    case_in(c, &x);
    case_in(c, &a1);
    case_run(c);
    expect_i32(c->out[0], (const int32_t[]){1, 3, 6, 4, 9, 15}, 6);
    case_free(c);
}

Test(engine_ops_reduce, cumsum_axis_out_of_range_fails)
{
    static const int64_t ax[] = {2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t a = ten(ENG_DT_INT64, shp(0), ax);
    op_case_t *c = case_new("CumSum", 14, 1);
    case_in(c, &x);
    case_in(c, &a);
    expect_err(case_infer(c), FS_EINVAL, "out of range");
    case_free(c);
}

/* --- TopK ----------------------------------------------------------------------------------- */

Test(engine_ops_misc, topk_largest_ties_take_lower_index)
{
    static const float v[] = {3, 1, 3, 2, 0, 5, 5, 5};
    static const int64_t k[] = {3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 4), v);
    eng_tensor_t kt = ten(ENG_DT_INT64, shp(1, 1), k);
    op_case_t *c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &kt);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 3));
    expect_shape(c->out[1], shp(2, 2, 3));
    expect_f32_near(c->out[0], (const float[]){3, 3, 2, 5, 5, 5}, 6);
    expect_i64(c->out[1], (const int64_t[]){0, 2, 3, 1, 2, 3}, 6);
    case_free(c);
}

Test(engine_ops_misc, topk_smallest_along_axis_0)
{
    static const int64_t v[] = {4, 1, 2, 8, 0, 9};
    static const int64_t k[] = {2};
    eng_tensor_t x = ten(ENG_DT_INT64, shp(2, 3, 2), v);
    eng_tensor_t kt = ten(ENG_DT_INT64, shp(1, 1), k);
    op_case_t *c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &kt);
    case_attr(c, a_int("axis", 0));
    case_attr(c, a_int("largest", 0));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_i64(c->out[0], (const int64_t[]){0, 1, 2, 8}, 4);
    expect_i64(c->out[1], (const int64_t[]){2, 0, 1, 1}, 4);
    case_free(c);
}

Test(engine_ops_misc, topk_k_attribute_before_opset_10)
{
    static const float v[] = {1, 4, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 3), v);
    op_case_t *c = case_new("TopK", 9, 2);
    case_in(c, &x);
    case_attr(c, a_int("k", 1));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){4}, 1);
    expect_i64(c->out[1], (const int64_t[]){1}, 1);
    case_free(c);
}

Test(engine_ops_misc, topk_unknown_or_bad_k)
{
    static const int64_t big[] = {4};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t unknown = ten(ENG_DT_INT64, shp(1, 1), NULL);
    eng_tensor_t too_big = ten(ENG_DT_INT64, shp(1, 1), big);
    op_case_t *c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &unknown);
    expect_err(case_infer(c), FS_EDYNAMIC, "K");
    case_free(c);
    c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &too_big);
    expect_err(case_infer(c), FS_EINVAL, "k = 4");
    case_free(c);
}

/* TopK of the n elements v (dtype dt, a [n] vector) with k = n and
 * `largest`: its values must equal `want_vals` bit for bit (es bytes an
 * element) and its indices `want_idx`. */
static void topk_expect(eng_dtype_t dt, const void *v, int64_t n, bool largest,
                        const void *want_vals, const int64_t *want_idx)
{
    const int64_t k[] = {n};
    eng_tensor_t x = ten(dt, shp(1, n), v);
    eng_tensor_t kt = ten(ENG_DT_INT64, shp(1, 1), k);
    op_case_t *c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &kt);
    case_attr(c, a_int("largest", largest));
    case_run(c);
    cr_assert_eq(c->out[0]->dtype, dt);
    size_t es = eng_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        cr_expect(memcmp((const char *)c->out[0]->data + i * es, (const char *)want_vals + i * es,
                         es) == 0,
                  "%s value %lld differs (largest=%d)", eng_dtype_name(dt), (long long)i,
                  largest);
    expect_i64(c->out[1], want_idx, n);
    case_free(c);
}

Test(engine_ops_misc, topk_uint64_and_int64_order_exactly_beyond_2_pow_53)
{
    const uint64_t b = 1ull << 53;
    static uint64_t u[6];
    u[0] = b + 1, u[1] = b, u[2] = UINT64_MAX, u[3] = UINT64_MAX - 1, u[4] = 0, u[5] = 1ull << 63;
    topk_expect(ENG_DT_UINT64, u, 6, true,
                (const uint64_t[]){UINT64_MAX, UINT64_MAX - 1, 1ull << 63, b + 1, b, 0},
                (const int64_t[]){2, 3, 5, 0, 1, 4});
    topk_expect(ENG_DT_UINT64, u, 6, false,
                (const uint64_t[]){0, b, b + 1, 1ull << 63, UINT64_MAX - 1, UINT64_MAX},
                (const int64_t[]){4, 1, 0, 5, 3, 2});
    const int64_t s[] = {(int64_t)b + 1, (int64_t)b, -(int64_t)b - 1, -(int64_t)b, INT64_MIN,
                         INT64_MAX};
    topk_expect(ENG_DT_INT64, s, 6, true,
                (const int64_t[]){INT64_MAX, (int64_t)b + 1, (int64_t)b, -(int64_t)b,
                                  -(int64_t)b - 1, INT64_MIN},
                (const int64_t[]){5, 0, 1, 3, 2, 4});
}

Test(engine_ops_misc, topk_small_integers_with_negatives_and_ties)
{
    const int8_t v[] = {-128, 127, -1, 0, -1};
    topk_expect(ENG_DT_INT8, v, 5, false, (const int8_t[]){-128, -1, -1, 0, 127},
                (const int64_t[]){0, 2, 4, 3, 1});
    topk_expect(ENG_DT_INT8, v, 5, true, (const int8_t[]){127, 0, -1, -1, -128},
                (const int64_t[]){1, 3, 2, 4, 0});
    const int16_t h[] = {-300, 300, -32768};
    topk_expect(ENG_DT_INT16, h, 3, true, (const int16_t[]){300, -300, -32768},
                (const int64_t[]){1, 0, 2});
    const uint8_t u8[] = {200, 7, 255, 7};
    topk_expect(ENG_DT_UINT8, u8, 4, true, (const uint8_t[]){255, 200, 7, 7},
                (const int64_t[]){2, 0, 1, 3});
    const uint32_t u32[] = {0x80000000u, 1, 0xffffffffu};
    topk_expect(ENG_DT_UINT32, u32, 3, false, (const uint32_t[]){1, 0x80000000u, 0xffffffffu},
                (const int64_t[]){1, 0, 2});
}

/* NaN ranks above every number (of either sign), -0 ties with +0 (by index),
 * values come back bit for bit. */
Test(engine_ops_misc, topk_double_nan_ranks_largest_and_zeros_tie)
{
    const double v[] = {1.0, NAN, -INFINITY, -0.0, 0.0, -NAN};
    double want[6] = {v[1], v[5], 1.0, -0.0, 0.0, -INFINITY};
    topk_expect(ENG_DT_DOUBLE, v, 6, true, want, (const int64_t[]){1, 5, 0, 3, 4, 2});
    double want_lo[6] = {-INFINITY, -0.0, 0.0, 1.0, v[1], v[5]};
    topk_expect(ENG_DT_DOUBLE, v, 6, false, want_lo, (const int64_t[]){2, 3, 4, 0, 1, 5});
}

Test(engine_ops_misc, topk_float16_and_bfloat16_by_their_bits)
{
    /* 1, -2, NaN, 65504, inf, -0 */
    const uint16_t h[] = {0x3c00, 0xc000, 0x7e00, 0x7bff, 0x7c00, 0x8000};
    topk_expect(ENG_DT_FLOAT16, h, 6, true,
                (const uint16_t[]){0x7e00, 0x7c00, 0x7bff, 0x3c00, 0x8000, 0xc000},
                (const int64_t[]){2, 4, 3, 0, 5, 1});
    topk_expect(ENG_DT_FLOAT16, h, 6, false,
                (const uint16_t[]){0xc000, 0x8000, 0x3c00, 0x7bff, 0x7c00, 0x7e00},
                (const int64_t[]){1, 5, 0, 3, 4, 2});
    /* 1, -1, NaN (negative), 2, 0 */
    const uint16_t bf[] = {0x3f80, 0xbf80, 0xffc0, 0x4000, 0x0000};
    topk_expect(ENG_DT_BFLOAT16, bf, 5, true,
                (const uint16_t[]){0xffc0, 0x4000, 0x3f80, 0x0000, 0xbf80},
                (const int64_t[]){2, 3, 0, 4, 1});
}

Test(engine_ops_misc, topk_rejects_bool)
{
    const uint8_t v[] = {1, 0};
    const int64_t k[] = {1};
    eng_tensor_t x = ten(ENG_DT_BOOL, shp(1, 2), v);
    eng_tensor_t kt = ten(ENG_DT_INT64, shp(1, 1), k);
    op_case_t *c = case_new("TopK", 11, 2);
    case_in(c, &x);
    case_in(c, &kt);
    expect_err(case_infer(c), FS_ENOTSUP, "bool");
    case_free(c);
}

/* --- Trilu ---------------------------------------------------------------------------------- */

Test(engine_ops_misc, trilu_upper_and_lower_with_k)
{
    /* Two 3x3 matrices 1..9 and 10..18. */
    float v[18];
    for (int i = 0; i < 18; i++)
        v[i] = (float)(i + 1);
    static const int64_t k1[] = {1}, km1[] = {-1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 3, 3), v);
    eng_tensor_t kp = ten(ENG_DT_INT64, shp(0), k1);
    eng_tensor_t kn = ten(ENG_DT_INT64, shp(0), km1);
    op_case_t *c = case_new("Trilu", 14, 1);
    case_in(c, &x);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){1, 2, 3, 0, 5, 6, 0, 0, 9, 10, 11, 12, 0, 14, 15, 0, 0,
                                          18},
               18);
    case_free(c);
    c = case_new("Trilu", 14, 1);
    case_in(c, &x);
    case_in(c, &kp);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0, 2, 3, 0, 0, 6, 0, 0, 0, 0, 11, 12, 0, 0, 15, 0, 0, 0},
               18);
    case_free(c);
    c = case_new("Trilu", 14, 1);
    case_in(c, &x);
    case_in(c, &kn);
    case_attr(c, a_int("upper", 0));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0, 0, 0, 4, 0, 0, 7, 8, 0, 0, 0, 0, 13, 0, 0, 16, 17, 0},
               18);
    case_free(c);
}

Test(engine_ops_misc, trilu_non_square_and_far_k)
{
    static const int64_t v[] = {1, 2, 3, 4, 5, 6};
    static const int64_t kfar[] = {INT64_MAX};
    eng_tensor_t x = ten(ENG_DT_INT64, shp(2, 2, 3), v);
    eng_tensor_t k = ten(ENG_DT_INT64, shp(0), kfar);
    op_case_t *c = case_new("Trilu", 14, 1);
    case_in(c, &x);
    case_attr(c, a_int("upper", 0));
    case_run(c);
    expect_i64(c->out[0], (const int64_t[]){1, 0, 0, 4, 5, 0}, 6);
    case_free(c);
    c = case_new("Trilu", 14, 1);
    case_in(c, &x);
    case_in(c, &k);
    case_attr(c, a_int("upper", 0));
    case_run(c);
    expect_i64(c->out[0], v, 6);
    case_free(c);
    eng_tensor_t x1 = ten(ENG_DT_INT64, shp(1, 6), v);
    c = case_new("Trilu", 14, 1);
    case_in(c, &x1);
    expect_err(case_infer(c), FS_EINVAL, "rank");
    case_free(c);
}

/* --- Resize --------------------------------------------------------------------------------- */

/* A Resize case at opset 13+: X, roi (absent), scales or sizes. */
static op_case_t *resize_new(int opset, const eng_tensor_t *x, const eng_tensor_t *scales,
                             const eng_tensor_t *sizes)
{
    op_case_t *c = case_new("Resize", opset, 1);
    case_in(c, x);
    case_in(c, NULL);
    case_in(c, scales);
    if (sizes)
        case_in(c, sizes);
    return c;
}

Test(engine_ops_misc, resize_nearest_upsample_by_scales)
{
    static const float v[] = {1, 2, 3, 4};
    static const float sc[] = {1, 1, 2, 3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 4), sc);
    op_case_t *c = resize_new(19, &x, &s, NULL);
    case_attr(c, a_str("mode", "nearest"));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 4, 6));
    expect_f32_near(c->out[0], (const float[]){1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                          3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
               24);
    case_free(c);
}

Test(engine_ops_misc, resize_linear_half_pixel_and_align_corners)
{
    static const float v[] = {1, 2, 3, 4};
    static const float sc[] = {1, 1, 2, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 4), sc);
    op_case_t *c = resize_new(13, &x, &s, NULL);
    case_attr(c, a_str("mode", "linear"));
    case_run(c);
    /* half_pixel: source coords -0.25, 0.25, 0.75, 1.25 (clamped at the edges). */
    expect_f32_near(c->out[0], (const float[]){1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f,
                                          2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4},
               16);
    case_free(c);
    static const int64_t sz[] = {1, 1, 3, 3};
    eng_tensor_t sizes = ten(ENG_DT_INT64, shp(1, 4), sz);
    c = resize_new(13, &x, NULL, &sizes);
    case_attr(c, a_str("mode", "linear"));
    case_attr(c, a_str("coordinate_transformation_mode", "align_corners"));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 3, 3));
    expect_f32_near(c->out[0], (const float[]){1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4}, 9);
    case_free(c);
}

Test(engine_ops_misc, resize_cubic_keeps_a_linear_ramp)
{
    /* Cubic convolution reproduces a linear function away from the edges. */
    float v[8];
    for (int i = 0; i < 8; i++)
        v[i] = (float)(2 * i);
    static const float sc[] = {2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 8), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 1), sc);
    op_case_t *c = resize_new(13, &x, &s, NULL);
    case_attr(c, a_str("mode", "cubic"));
    case_attr(c, a_str("coordinate_transformation_mode", "asymmetric"));
    case_run(c);
    expect_shape(c->out[0], shp(1, 16));
    const float *y = c->out[0]->data;
    for (int i = 2; i < 12; i++)
        cr_expect(fabsf(y[i] - (float)i) < 1e-5f, "y[%d] = %g, want %d", i, y[i], i);
    case_free(c);
}

Test(engine_ops_misc, resize_linear_antialias_widens_the_filter)
{
    static const float v[] = {1, 2, 3, 4};
    static const float sc[] = {0.5f};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 4), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 1), sc);
    op_case_t *c = resize_new(18, &x, &s, NULL);
    case_attr(c, a_str("mode", "linear"));
    case_attr(c, a_int("antialias", 1));
    case_run(c);
    /* Weights 1/8, 3/8, 3/8, 1/8 around source coords 0.5 and 2.5. */
    expect_f32_near(c->out[0], (const float[]){1.625f, 3.375f}, 2);
    case_free(c);
}

Test(engine_ops_misc, resize_opset_10_is_asymmetric_and_rounds_down)
{
    static const float v[] = {1, 2, 3};
    static const float sc[] = {1, 0.7f};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 1, 3), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 2), sc);
    op_case_t *c = case_new("Resize", 10, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_run(c);
    /* 3 * 0.7 = 2.1 -> 2 outputs at source 0 and 1/0.7 = 1.43 -> 1. */
    expect_shape(c->out[0], shp(2, 1, 2));
    expect_f32_near(c->out[0], (const float[]){1, 2}, 2);
    case_free(c);
}

Test(engine_ops_misc, resize_tf_crop_and_resize_extrapolates_outside_roi)
{
    static const float v[] = {1, 2, 3, 4};
    static const float roi_v[] = {0.5f, 1.5f};
    static const int64_t sz[] = {3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 4), v);
    eng_tensor_t roi = ten(ENG_DT_FLOAT, shp(1, 2), roi_v);
    eng_tensor_t sizes = ten(ENG_DT_INT64, shp(1, 1), sz);
    op_case_t *c = case_new("Resize", 13, 1);
    case_in(c, &x);
    case_in(c, &roi);
    case_in(c, NULL);
    case_in(c, &sizes);
    case_attr(c, a_str("mode", "linear"));
    case_attr(c, a_str("coordinate_transformation_mode", "tf_crop_and_resize"));
    case_attr(c, a_float("extrapolation_value", -1));
    case_run(c);
    /* Source coords 1.5, 3.0, 4.5: the last is past the input. */
    expect_f32_near(c->out[0], (const float[]){2.5f, 4, -1}, 3);
    case_free(c);
}

Test(engine_ops_misc, resize_axes_and_keep_aspect_ratio)
{
    static const int64_t axes[] = {2, 1};
    static const int64_t sz[] = {4, 3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 2, 2), f_iota);
    eng_tensor_t sizes = ten(ENG_DT_INT64, shp(1, 2), sz);
    op_case_t *c = resize_new(18, &x, NULL, &sizes);
    case_attr(c, a_ints("axes", axes, 2));
    case_attr(c, a_str("keep_aspect_ratio_policy", "not_larger"));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    /* Scales 2 (axis 2) and 1.5 (axis 1): not_larger takes 1.5 for both. */
    expect_shape(c->out[0], shp(3, 1, 3, 3));
    case_free(c);
}

Test(engine_ops_misc, resize_errors_name_what_is_wrong)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), f_iota);
    static const float sc[] = {2, 2};
    static const int64_t sz[] = {4, 4};
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 2), sc);
    eng_tensor_t sizes = ten(ENG_DT_INT64, shp(1, 2), sz);
    eng_tensor_t unknown = ten(ENG_DT_INT64, shp(1, 2), NULL);
    eng_tensor_t short_s = ten(ENG_DT_FLOAT, shp(1, 1), sc);
    op_case_t *c = resize_new(13, &x, &s, NULL);
    case_attr(c, a_str("mode", "bicubic"));
    expect_err(case_infer(c), FS_ENOTSUP, "bicubic");
    case_free(c);
    c = resize_new(13, &x, &s, NULL);
    case_attr(c, a_str("coordinate_transformation_mode", "corners"));
    expect_err(case_infer(c), FS_ENOTSUP, "coordinate_transformation_mode 'corners'");
    case_free(c);
    c = resize_new(13, &x, &s, &sizes);
    expect_err(case_infer(c), FS_EINVAL, "both");
    case_free(c);
    c = resize_new(13, &x, NULL, &unknown);
    expect_err(case_infer(c), FS_EDYNAMIC, "sizes");
    case_free(c);
    c = resize_new(13, &x, &short_s, NULL);
    expect_err(case_infer(c), FS_EINVAL, "2 values");
    case_free(c);
    c = case_new("Resize", 10, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_str("mode", "cubic"));
    expect_err(case_infer(c), FS_EINVAL, "opset 11");
    case_free(c);
}

Test(engine_ops_misc, upsample_is_resize_10_in_every_version)
{
    /* [1,1,1,2] of {1,2}, doubled on the last two dims: nearest repeats. */
    static const float v[] = {1, 2};
    static const float sc[] = {1, 1, 2, 2};
    static const float want[] = {1, 1, 2, 2, 1, 1, 2, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 2), v);
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 4), sc);
    op_case_t *c = case_new("Upsample", 9, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 2, 4));
    expect_f32(c->out[0], want, 8);
    case_free(c);
    c = case_new("Upsample", 7, 1);
    case_in(c, &x);
    case_attr(c, a_floats("scales", sc, 4));
    case_run(c);
    expect_f32(c->out[0], want, 8);
    case_free(c);
    /* Upsample-1: height_scale and width_scale, 'bilinear' is linear
     * (asymmetric: 1 -> 1.5 -> 2 -> 2). */
    c = case_new("Upsample", 6, 1);
    case_in(c, &x);
    case_attr(c, a_float("height_scale", 1));
    case_attr(c, a_float("width_scale", 2));
    case_attr(c, a_str("mode", "bilinear"));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 1, 4));
    expect_f32_near(c->out[0], (const float[]){1, 1.5f, 2, 2}, 4);
    case_free(c);
    c = case_new("Upsample", 9, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_str("mode", "cubic"));
    expect_err(case_infer(c), FS_ENOTSUP, "cubic");
    case_free(c);
}
