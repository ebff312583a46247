/* test_ops_index.c -- tests of engine/ops/index.c, select.c and
 * engine/cpu/index_kernels.c, select_kernels.c: each index op's inference
 * and CPU kernel, called directly through an eng_op_ctx_t. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "op_case.h"

static float f_iota[64];

static void iota_init(void)
{
    for (int i = 0; i < 64; i++)
        f_iota[i] = (float)i;
}

TestSuite(engine_ops_index_scatter, .init = iota_init);
TestSuite(engine_ops_index_make, .init = iota_init);
TestSuite(engine_ops_index_select, .init = iota_init);

/* --- ScatterND -------------------------------------------------------------------------------- */

Test(engine_ops_index_scatter, nd_rows_duplicates_and_negative_indices)
{
    /* data [3,2]; rows 2, -3 (= 0) and 2 again: the last update wins. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 2), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 3, 1), (const int64_t[]){2, -3, 2});
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(2, 3, 2), (const float[]){10, 11, 20, 21, 30, 31});
    op_case_t *c = case_new("ScatterND", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &upd);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 2));
    expect_f32(c->out[0], (const float[]){20, 21, 2, 3, 30, 31}, 6);
    case_free(c);
}

Test(engine_ops_index_scatter, nd_reductions_fold_every_update)
{
    static const struct {
        const char *name;
        int opset;
        float want[4];
    } cases[] = {
        {"add", 16, {0 + 5 + 7, 1, 2, 3 + 1}},
        {"mul", 16, {0, 1, 2, 3 * 1}},
        {"max", 18, {7, 1, 2, 3}},
        {"min", 18, {0, 1, 2, 1}},
    };
    /* Elements (0,0) twice and (1,1) once of a [2,2] of 0..3. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 3, 2), (const int64_t[]){0, 0, 1, 1, 0, 0});
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(1, 3), (const float[]){5, 1, 7});
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        op_case_t *c = case_new("ScatterND", cases[i].opset, 1);
        case_in(c, &x);
        case_in(c, &idx);
        case_in(c, &upd);
        case_attr(c, a_str("reduction", cases[i].name));
        case_run(c);
        expect_f32(c->out[0], cases[i].want, 4);
        case_free(c);
    }
}

Test(engine_ops_index_scatter, nd_refuses_bad_indices_and_reductions)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), f_iota);
    eng_tensor_t far = ten(ENG_DT_INT64, shp(2, 1, 2), (const int64_t[]){0, 2});
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(1, 1), (const float[]){9});
    op_case_t *c = case_new("ScatterND", 13, 1);
    case_in(c, &x);
    case_in(c, &far);
    case_in(c, &upd);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[4] = {-1, -1, -1, -1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "index 2");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
    /* max is opset 18's; updates must fit the indices. */
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 1, 2), (const int64_t[]){0, 1});
    c = case_new("ScatterND", 16, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &upd);
    case_attr(c, a_str("reduction", "max"));
    expect_err(case_infer(c), FS_EINVAL, "opset 18");
    case_free(c);
    eng_tensor_t wide = ten(ENG_DT_FLOAT, shp(2, 1, 2), (const float[]){1, 2});
    c = case_new("ScatterND", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &wide);
    expect_err(case_infer(c), FS_EINVAL, "updates [1,2]");
    case_free(c);
}

/* --- ScatterElements, Scatter ----------------------------------------------------------------- */

Test(engine_ops_index_scatter, elements_along_an_axis_with_add)
{
    /* data [2,3] int32 of zeros; along axis 1, row 0 gets +1 at 2 and +2 at
     * -1 (= 2), row 1 +3 at 0 and +4 at 1. */
    eng_tensor_t x = ten(ENG_DT_INT32, shp(2, 2, 3), (const int32_t[]){0, 0, 0, 0, 0, 0});
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 2, 2), (const int64_t[]){2, -1, 0, 1});
    eng_tensor_t upd = ten(ENG_DT_INT32, shp(2, 2, 2), (const int32_t[]){1, 2, 3, 4});
    op_case_t *c = case_new("ScatterElements", 18, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &upd);
    case_attr(c, a_int("axis", 1));
    case_attr(c, a_str("reduction", "add"));
    case_run(c);
    expect_i32(c->out[0], (const int32_t[]){0, 0, 3, 3, 4, 0}, 6);
    case_free(c);
}

Test(engine_ops_index_scatter, scatter_is_elements_without_reduction)
{
    /* Opset 9's Scatter, axis 0, int32 indices: (1,0) and (0,1). */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT32, shp(2, 1, 2), (const int32_t[]){1, 0});
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(2, 1, 2), (const float[]){8, 9});
    op_case_t *c = case_new("Scatter", 9, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &upd);
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 9, 8, 3}, 4);
    case_free(c);
}

Test(engine_ops_index_scatter, elements_refuse_a_bad_index)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 3), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){0, -4});
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){8, 9});
    op_case_t *c = case_new("ScatterElements", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &upd);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[3] = {-1, -1, -1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "index -4");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

/* --- TensorScatter --------------------------------------------------------------------------- */

Test(engine_ops_index_scatter, tensor_scatter_linear_and_circular)
{
    /* cache [2,4,1] of 0..7, updates of 2 steps per batch at 1 and 3. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 4, 1), f_iota);
    eng_tensor_t upd = ten(ENG_DT_FLOAT, shp(3, 2, 2, 1), (const float[]){10, 11, 20, 21});
    eng_tensor_t w = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){1, 3});
    op_case_t *c = case_new("TensorScatter", 24, 1);
    case_in(c, &x);
    case_in(c, &upd);
    case_in(c, &w);
    case_attr(c, a_str("mode", "circular"));
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 10, 11, 3, 21, 5, 6, 20}, 8);
    case_free(c);
    /* Linear: batch 1 would write positions 3 and 4 of 4. */
    c = case_new("TensorScatter", 24, 1);
    case_in(c, &x);
    case_in(c, &upd);
    case_in(c, &w);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[8] = {-1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "write_indices[1] is 3");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

/* --- OneHot, EyeLike, ReverseSequence, CenterCropPad ------------------------------------------- */

Test(engine_ops_index_make, one_hot_axis_negative_and_out_of_range)
{
    /* indices [3] = {1, -1, 5} (5 is out of range), depth 3, axis 0:
     * output [3,3], column per index. */
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(1, 3), (const int64_t[]){1, -1, 5});
    eng_tensor_t depth = ten(ENG_DT_FLOAT, shp(0), (const float[]){3});
    eng_tensor_t values = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){-1, 7});
    op_case_t *c = case_new("OneHot", 11, 1);
    case_in(c, &idx);
    case_in(c, &depth);
    case_in(c, &values);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 3));
    expect_f32(c->out[0], (const float[]){-1, -1, -1, 7, -1, -1, -1, 7, -1}, 9);
    case_free(c);
    /* An unknown depth makes the shape dynamic. */
    eng_tensor_t unknown = ten(ENG_DT_INT64, shp(1, 1), NULL);
    c = case_new("OneHot", 11, 1);
    case_in(c, &idx);
    case_in(c, &unknown);
    case_in(c, &values);
    expect_err(case_infer(c), FS_EDYNAMIC, "depth");
    case_free(c);
}

Test(engine_ops_index_make, eye_like_k_and_dtype)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    op_case_t *c = case_new("EyeLike", 9, 1);
    case_in(c, &x);
    case_attr(c, a_int("k", 1));
    case_attr(c, a_int("dtype", ENG_DT_INT32));
    case_run(c);
    expect_i32(c->out[0], (const int32_t[]){0, 1, 0, 0, 0, 1}, 6);
    case_free(c);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(1, 3), f_iota);
    c = case_new("EyeLike", 9, 1);
    case_in(c, &v);
    expect_err(case_infer(c), FS_EINVAL, "2-D");
    case_free(c);
}

Test(engine_ops_index_make, reverse_sequence_batch_first)
{
    /* [2 batches, 3 steps], lengths 2 and 3. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    eng_tensor_t lens = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){2, 3});
    op_case_t *c = case_new("ReverseSequence", 10, 1);
    case_in(c, &x);
    case_in(c, &lens);
    case_attr(c, a_int("batch_axis", 0));
    case_attr(c, a_int("time_axis", 1));
    case_run(c);
    expect_f32(c->out[0], (const float[]){1, 0, 2, 5, 4, 3}, 6);
    case_free(c);
    eng_tensor_t bad = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){4, 1});
    c = case_new("ReverseSequence", 10, 1);
    case_in(c, &x);
    case_in(c, &bad);
    case_attr(c, a_int("batch_axis", 0));
    case_attr(c, a_int("time_axis", 1));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[6] = {-1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "sequence_lens[0] is 4");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

Test(engine_ops_index_make, center_crop_pad_crops_and_pads)
{
    /* [3,4] of 0..11 to [1,6]: row 1, columns padded by 1 on each side. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 4), f_iota);
    eng_tensor_t sh = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){1, 6});
    op_case_t *c = case_new("CenterCropPad", 18, 1);
    case_in(c, &x);
    case_in(c, &sh);
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 6));
    expect_f32(c->out[0], (const float[]){0, 4, 5, 6, 7, 0}, 6);
    case_free(c);
    /* Only axis -1, cropped to 1 element from floor((4 - 1) / 2) = 1. */
    eng_tensor_t one = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){1});
    c = case_new("CenterCropPad", 18, 1);
    case_in(c, &x);
    case_in(c, &one);
    case_attr(c, a_ints("axes", (const int64_t[]){-1}, 1));
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 1));
    expect_f32(c->out[0], (const float[]){1, 5, 9}, 3);
    case_free(c);
}

/* --- Compress, NonZero, Unique --------------------------------------------------------------- */

Test(engine_ops_index_select, compress_with_and_without_axis)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), f_iota);
    static const uint8_t cond[] = {0, 1, 1};
    eng_tensor_t cv = ten(ENG_DT_BOOL, shp(1, 3), cond);
    op_case_t *c = case_new("Compress", 11, 1);
    case_in(c, &x);
    case_in(c, &cv);
    case_attr(c, a_int("axis", -1));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_f32(c->out[0], (const float[]){1, 2, 4, 5}, 4);
    case_free(c);
    /* No axis: the flattened input; the condition may be shorter. */
    c = case_new("Compress", 11, 1);
    case_in(c, &x);
    case_in(c, &cv);
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    expect_f32(c->out[0], (const float[]){1, 2}, 2);
    case_free(c);
    eng_tensor_t unknown = ten(ENG_DT_BOOL, shp(1, 3), NULL);
    c = case_new("Compress", 11, 1);
    case_in(c, &x);
    case_in(c, &unknown);
    expect_err(case_infer(c), FS_EDYNAMIC, "condition");
    case_free(c);
}

Test(engine_ops_index_select, nonzero_lists_coordinates)
{
    /* NaN and -0: NaN counts, -0 does not. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), (const float[]){0, 2, -0.0f, NAN, 0, 5});
    op_case_t *c = case_new("NonZero", 13, 1);
    case_in(c, &x);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 3));
    expect_i64(c->out[0], (const int64_t[]){0, 1, 1, 1, 0, 2}, 6);
    case_free(c);
}

Test(engine_ops_index_select, unique_sorted_and_by_first_occurrence)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 6), (const float[]){2, 1, 1, 3, 4, 3});
    for (int sorted = 0; sorted <= 1; sorted++) {
        op_case_t *c = case_new("Unique", 11, 4);
        case_in(c, &x);
        case_attr(c, a_int("sorted", sorted));
        case_run(c);
        expect_shape(c->out[0], shp(1, 4));
        if (sorted) {
            expect_f32(c->out[0], (const float[]){1, 2, 3, 4}, 4);
            expect_i64(c->out[1], (const int64_t[]){1, 0, 3, 4}, 4);
            expect_i64(c->out[2], (const int64_t[]){1, 0, 0, 2, 3, 2}, 6);
            expect_i64(c->out[3], (const int64_t[]){2, 1, 2, 1}, 4);
        } else {
            expect_f32(c->out[0], (const float[]){2, 1, 3, 4}, 4);
            expect_i64(c->out[1], (const int64_t[]){0, 1, 3, 4}, 4);
            expect_i64(c->out[2], (const int64_t[]){0, 1, 1, 2, 3, 2}, 6);
            expect_i64(c->out[3], (const int64_t[]){1, 2, 2, 1}, 4);
        }
        case_free(c);
    }
}

Test(engine_ops_index_select, unique_rows_along_an_axis)
{
    /* Rows of [3,2]: (1,0), (0,1), (1,0). */
    eng_tensor_t x = ten(ENG_DT_INT64, shp(2, 3, 2), (const int64_t[]){1, 0, 0, 1, 1, 0});
    op_case_t *c = case_new("Unique", 11, 4);
    case_in(c, &x);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_i64(c->out[0], (const int64_t[]){0, 1, 1, 0}, 4);
    expect_i64(c->out[1], (const int64_t[]){1, 0}, 2);
    expect_i64(c->out[2], (const int64_t[]){1, 0, 1}, 3);
    expect_i64(c->out[3], (const int64_t[]){1, 2}, 2);
    case_free(c);
}
