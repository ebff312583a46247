/* test_ops_normalize.c -- tests of LpNormalization, MeanVarianceNormalization
 * and GroupNormalization (engine/ops/normalize.c and their CPU kernels) on
 * hand-checked cases, and the errors for attributes and shapes that do not
 * fit. */
#include <criterion/criterion.h>
#include <math.h>

#include "op_case.h"

Test(engine_ops_normalize, lp_norms_lines_and_zeroes_a_zero_line)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), (const float[]){3, 4, 0, 0});
    op_case_t *c = case_new("LpNormalization", 22, 1);
    case_in(c, &x);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0.6f, 0.8f, 0, 0}, 4);
    case_free(c);
    c = case_new("LpNormalization", 22, 1);
    case_in(c, &x);
    case_attr(c, a_int("p", 1));
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){1, 1, 0, 0}, 4);
    case_free(c);
    c = case_new("LpNormalization", 22, 1);
    case_in(c, &x);
    case_attr(c, a_int("p", 3));
    expect_err(case_infer(c), FS_ENOTSUP, "p 3");
    case_free(c);
}

Test(engine_ops_normalize, mvn_over_the_given_axes)
{
    static const int64_t axes[] = {1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), (const float[]){1, 3, 2, 2});
    op_case_t *c = case_new("MeanVarianceNormalization", 13, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 1));
    case_run(c);
    /* Row 0: mean 2, std 1; row 1: std 0 gives 0 / 1e-9. */
    expect_f32_near(c->out[0], (const float[]){-1, 1, 0, 0}, 4);
    case_free(c);
    static const int64_t twice[] = {1, -1};
    c = case_new("MeanVarianceNormalization", 13, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", twice, 2));
    expect_err(case_infer(c), FS_EINVAL, "twice");
    case_free(c);
}

Test(engine_ops_normalize, group_norm_scale_per_group_before_21_per_channel_from_21)
{
    /* Groups {1, 3} and {2, 6}: both normalise to {-1, 1}; the second group
     * is then scaled by 2 and shifted by 1. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 4, 1), (const float[]){1, 3, 2, 6});
    eng_tensor_t sc21 = ten(ENG_DT_FLOAT, shp(1, 4), (const float[]){1, 1, 2, 2});
    eng_tensor_t b21 = ten(ENG_DT_FLOAT, shp(1, 4), (const float[]){0, 0, 1, 1});
    eng_tensor_t sc18 = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){1, 2});
    eng_tensor_t b18 = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){0, 1});
    for (int v = 0; v < 2; v++) {
        op_case_t *c = case_new("GroupNormalization", v ? 21 : 18, 1);
        case_in(c, &x);
        case_in(c, v ? &sc21 : &sc18);
        case_in(c, v ? &b21 : &b18);
        case_attr(c, a_int("num_groups", 2));
        case_attr(c, a_float("epsilon", 0));
        case_run(c);
        expect_f32_near(c->out[0], (const float[]){-1, 1, -1, 3}, 4);
        case_free(c);
    }
    op_case_t *c = case_new("GroupNormalization", 21, 1);
    case_in(c, &x);
    case_in(c, &sc18);
    case_in(c, &b18);
    case_attr(c, a_int("num_groups", 2));
    expect_err(case_infer(c), FS_EINVAL, "scale");
    case_free(c);
    c = case_new("GroupNormalization", 21, 1);
    case_in(c, &x);
    case_in(c, &sc21);
    case_in(c, &b21);
    case_attr(c, a_int("num_groups", 3));
    expect_err(case_infer(c), FS_EINVAL, "num_groups 3");
    case_free(c);
}
