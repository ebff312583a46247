/* test_ops_loss.c -- tests of the loss ops (engine/ops/loss.c and their CPU
 * kernels): NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on
 * hand-checked cases, and the errors for shapes and classes that do not
 * fit. */
#include <criterion/criterion.h>
#include <math.h>

#include "op_case.h"

static const float nll_x[] = {-1, -2, -3, -4, -5, -6};
static const int64_t nll_t[] = {2, 0};
static const float nll_w[] = {1, 2, 3};

Test(engine_ops_loss, nll_reductions_weights_and_ignore_index)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), nll_x);
    eng_tensor_t t = ten(ENG_DT_INT64, shp(1, 2), nll_t);
    eng_tensor_t w = ten(ENG_DT_FLOAT, shp(1, 3), nll_w);
    /* none: -x[i, t_i] * w[t_i] = {3 * 3, 4 * 1}. */
    op_case_t *c = case_new("NegativeLogLikelihoodLoss", 13, 1);
    case_in(c, &x);
    case_in(c, &t);
    case_in(c, &w);
    case_attr(c, a_str("reduction", "none"));
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    expect_f32_near(c->out[0], (const float[]){9, 4}, 2);
    case_free(c);
    /* mean (the default) divides by the weights taken: 13 / 4. */
    c = case_new("NegativeLogLikelihoodLoss", 13, 1);
    case_in(c, &x);
    case_in(c, &t);
    case_in(c, &w);
    case_run(c);
    expect_shape(c->out[0], shp(0));
    expect_f32_near(c->out[0], (const float[]){3.25f}, 1);
    case_free(c);
    /* sum, no weight, class 2 ignored: only position 1's 4 counts. */
    c = case_new("NegativeLogLikelihoodLoss", 13, 1);
    case_in(c, &x);
    case_in(c, &t);
    case_attr(c, a_str("reduction", "sum"));
    case_attr(c, a_int("ignore_index", 2));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){4}, 1);
    case_free(c);
}

Test(engine_ops_loss, sce_gives_the_loss_and_the_log_probabilities)
{
    /* Two equal scores: log-probabilities -ln 2 each; the rows are [N, C, d]. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 2, 2), (const float[]){0, 5, 0, 5});
    eng_tensor_t t = ten(ENG_DT_INT32, shp(2, 1, 2), (const int32_t[]){1, 0});
    op_case_t *c = case_new("SoftmaxCrossEntropyLoss", 13, 2);
    case_in(c, &x);
    case_in(c, &t);
    case_attr(c, a_str("reduction", "none"));
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 2));
    const float l2 = 0.69314718f;
    expect_f32_near(c->out[0], (const float[]){l2, l2}, 2);
    expect_shape(c->out[1], shp(3, 1, 2, 2));
    expect_f32_near(c->out[1], (const float[]){-l2, -l2, -l2, -l2}, 4);
    case_free(c);
}

Test(engine_ops_loss, refuses_shapes_and_classes_that_do_not_fit)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 3, 4), NULL);
    eng_tensor_t t = ten(ENG_DT_INT64, shp(2, 2, 5), NULL);
    op_case_t *c = case_new("NegativeLogLikelihoodLoss", 13, 1);
    case_in(c, &x);
    case_in(c, &t);
    expect_err(case_infer(c), FS_EINVAL, "do not fit");
    case_free(c);
    c = case_new("SoftmaxCrossEntropyLoss", 13, 1);
    case_attr(c, a_str("reduction", "max"));
    expect_err(case_infer(c), FS_ENOTSUP, "reduction 'max'");
    case_free(c);
    /* Class 3 of 3 (not ignored) fails the run, output unwritten. */
    eng_tensor_t x2 = ten(ENG_DT_FLOAT, shp(2, 2, 3), nll_x);
    eng_tensor_t bad = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){0, 3});
    c = case_new("NegativeLogLikelihoodLoss", 13, 1);
    case_in(c, &x2);
    case_in(c, &bad);
    case_attr(c, a_str("reduction", "none"));
    cr_assert_eq(case_infer(c), 0);
    float out[2] = {-7, -7};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "class 3");
    cr_expect(out[0] == -7 && out[1] == -7, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}
