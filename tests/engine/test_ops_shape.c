/* test_ops_shape.c -- tests of engine/ops/shape.c, shape_make.c and
 * engine/cpu/shape_kernels.c: each shape op's inference and CPU kernel,
 * called directly through an eng_op_ctx_t. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "op_case.h"

static float f_iota[256];

static void iota_init(void)
{
    for (int i = 0; i < 256; i++)
        f_iota[i] = (float)i;
}

TestSuite(engine_ops_shape_reshape, .init = iota_init);
TestSuite(engine_ops_shape_views, .init = iota_init);
TestSuite(engine_ops_shape_transpose, .init = iota_init);
TestSuite(engine_ops_shape_concat_split, .init = iota_init);
TestSuite(engine_ops_shape_slice, .init = iota_init);
TestSuite(engine_ops_shape_gather, .init = iota_init);
TestSuite(engine_ops_shape_expand_tile, .init = iota_init);
TestSuite(engine_ops_shape_pad, .init = iota_init);
TestSuite(engine_ops_shape_producers, .init = iota_init);
TestSuite(engine_ops_shape_space_depth, .init = iota_init);
TestSuite(engine_ops_shape_registry);

/* --- Reshape ---------------------------------------------------------------------------- */

Test(engine_ops_shape_reshape, zero_copies_dim_and_minus_one_infers)
{
    static const int64_t target[] = {0, -1, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 3, 4), f_iota);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 3), target);
    op_case_t *c = case_new("Reshape", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_run(c);
    expect_shape(c->out[0], shp(3, 2, 6, 2));
    expect_f32(c->out[0], f_iota, 24);
    case_free(c);
}

Test(engine_ops_shape_reshape, allowzero_makes_zero_a_size)
{
    static const int64_t target[] = {0, 3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 0), NULL);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), target);
    op_case_t *c = case_new("Reshape", 14, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("allowzero", 1));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    expect_shape(c->out[0], shp(2, 0, 3));
    case_free(c);
}

Test(engine_ops_shape_reshape, unknown_shape_is_dynamic)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), NULL);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), NULL);
    op_case_t *c = case_new("Reshape", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    expect_err(case_infer(c), FS_EDYNAMIC, "shape");
    case_free(c);
}

Test(engine_ops_shape_reshape, wrong_element_count_names_shapes)
{
    static const int64_t target[] = {5, -1};
    static const int64_t two_minus[] = {-1, -1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), NULL);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), target);
    op_case_t *c = case_new("Reshape", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    expect_err(case_infer(c), FS_EINVAL, "[2,3]");
    s.data = (void *)two_minus;
    expect_err(case_infer(c), FS_EINVAL, "more than one -1");
    case_free(c);
}

Test(engine_ops_shape_reshape, in_place_kernel_leaves_shared_buffer)
{
    static const int64_t target[] = {6};
    int32_t buf[6] = {1, 2, 3, 4, 5, 6};
    eng_tensor_t x = ten(ENG_DT_INT32, shp(2, 2, 3), buf);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 1), target);
    op_case_t *c = case_new("Reshape", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    cr_assert_eq(case_infer(c), 0);
    c->out[0]->data = buf;
    cr_assert_eq(c->kernel->run(&c->ctx), 0);
    cr_expect_eq(buf[5], 6);
    cr_expect_eq(c->def->inplace_input, 0);
    c->out[0]->data = NULL;
    case_free(c);
}

/* --- Flatten, Squeeze, Unsqueeze -------------------------------------------------------- */

Test(engine_ops_shape_views, flatten_axes)
{
    static const struct {
        int64_t axis;
        int64_t rows, cols;
    } cases[] = {{0, 1, 24}, {1, 2, 12}, {2, 6, 4}, {3, 24, 1}, {-1, 6, 4}, {-3, 1, 24}};
    eng_tensor_t x = ten(ENG_DT_UINT8, shp(3, 2, 3, 4), NULL);
    for (size_t k = 0; k < N_OF(cases); k++) {
        op_case_t *c = case_new("Flatten", 13, 1);
        case_in(c, &x);
        case_attr(c, a_int("axis", cases[k].axis));
        cr_assert_eq(case_infer(c), 0, "axis %lld: %s", (long long)cases[k].axis, fs_errmsg());
        expect_shape(c->out[0], shp(2, (int)cases[k].rows, (int)cases[k].cols));
        cr_expect_eq(c->out[0]->dtype, ENG_DT_UINT8);
        case_free(c);
    }
    op_case_t *c = case_new("Flatten", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("axis", 4));
    expect_err(case_infer(c), FS_EINVAL, "axis 4");
    case_free(c);
}

Test(engine_ops_shape_views, squeeze_attr_input_and_default)
{
    static const int64_t axes[] = {-1, 0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 3, 1, 1), f_iota);
    op_case_t *c = case_new("Squeeze", 11, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 2));
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 1));
    expect_f32(c->out[0], f_iota, 3);
    case_free(c);

    eng_tensor_t ax = ten(ENG_DT_INT64, shp(1, 2), axes);
    c = case_new("Squeeze", 13, 1);
    case_in(c, &x);
    case_in(c, &ax);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    expect_shape(c->out[0], shp(2, 3, 1));
    case_free(c);

    c = case_new("Squeeze", 13, 1);
    case_in(c, &x);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    expect_shape(c->out[0], shp(1, 3));
    case_free(c);
}

Test(engine_ops_shape_views, squeeze_errors)
{
    static const int64_t bad[] = {1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 1, 3), NULL);
    eng_tensor_t ax = ten(ENG_DT_INT64, shp(1, 1), bad);
    op_case_t *c = case_new("Squeeze", 13, 1);
    case_in(c, &x);
    case_in(c, &ax);
    expect_err(case_infer(c), FS_EINVAL, "not 1");
    ax.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "axes");
    case_free(c);
}

Test(engine_ops_shape_views, unsqueeze_attr_and_input)
{
    static const int64_t axes[] = {4, 0, 2};
    static const int64_t neg[] = {-1};
    eng_tensor_t x = ten(ENG_DT_BOOL, shp(2, 3, 4), NULL);
    op_case_t *c = case_new("Unsqueeze", 11, 1);
    case_in(c, &x);
    case_attr(c, a_ints("axes", axes, 3));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    expect_shape(c->out[0], shp(5, 1, 3, 1, 4, 1));
    case_free(c);

    eng_tensor_t ax = ten(ENG_DT_INT64, shp(1, 1), neg);
    c = case_new("Unsqueeze", 13, 1);
    case_in(c, &x);
    case_in(c, &ax);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    expect_shape(c->out[0], shp(3, 3, 4, 1));
    ax.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "axes");
    case_free(c);

    c = case_new("Unsqueeze", 11, 1);
    case_in(c, &x);
    expect_err(case_infer(c), FS_EINVAL, "axes");
    case_free(c);
}

Test(engine_ops_shape_views, unsqueeze_repeated_axis_fails)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 3), NULL);
    eng_tensor_t ax = ten(ENG_DT_INT32, shp(1, 2), (const int32_t[]){0, -3});
    op_case_t *c = case_new("Unsqueeze", 13, 1);
    case_in(c, &x);
    case_in(c, &ax);
    expect_err(case_infer(c), FS_EINVAL, "more than once");
    case_free(c);
}

/* --- Transpose ------------------------------------------------------------------------------ */

/* Transposes x (dims d) by perm with a naive index walk, for reference. */
static void transpose_ref(const float *x, const int64_t *d, int r, const int *perm, float *y)
{
    int64_t xs[ENG_MAX_RANK], n = 1, pos[ENG_MAX_RANK] = {0};
    for (int k = r - 1; k >= 0; k--) {
        xs[k] = n;
        n *= d[k];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int k = 0; k < r; k++)
            off += pos[k] * xs[perm[k]];
        y[i] = x[off];
        for (int k = r - 1; k >= 0 && ++pos[k] == d[perm[k]]; k--)
            pos[k] = 0;
    }
}

Test(engine_ops_shape_transpose, every_permutation_of_rank_4)
{
    const int64_t d[] = {2, 3, 4, 5};
    float want[120];
    int perm[4];
    for (int p = 0; p < 4 * 4 * 4 * 4; p++) {
        perm[0] = p & 3;
        perm[1] = (p >> 2) & 3;
        perm[2] = (p >> 4) & 3;
        perm[3] = (p >> 6) & 3;
        if ((1 << perm[0] | 1 << perm[1] | 1 << perm[2] | 1 << perm[3]) != 15)
            continue;
        int64_t p64[4] = {perm[0], perm[1], perm[2], perm[3]};
        eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 2, 3, 4, 5), f_iota);
        op_case_t *c = case_new("Transpose", 13, 1);
        case_in(c, &x);
        case_attr(c, a_ints("perm", p64, 4));
        case_run(c);
        transpose_ref(f_iota, d, 4, perm, want);
        expect_shape(c->out[0], shp(4, (int)d[perm[0]], (int)d[perm[1]], (int)d[perm[2]],
                                    (int)d[perm[3]]));
        expect_f32(c->out[0], want, 120);
        case_free(c);
    }
}

Test(engine_ops_shape_transpose, planes_larger_than_a_tile)
{
    static const int perms[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 2, 0}};
    const int64_t d[] = {3, 70, 45};
    const int64_t n = 3 * 70 * 45;
    float *xv = malloc(n * sizeof *xv), *want = malloc(n * sizeof *want);
    cr_assert(xv && want);
    for (int64_t i = 0; i < n; i++)
        xv[i] = (float)i;
    for (size_t k = 0; k < N_OF(perms); k++) {
        const int *perm = perms[k];
        int64_t p64[3] = {perm[0], perm[1], perm[2]};
        eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 3, 70, 45), xv);
        op_case_t *c = case_new("Transpose", 13, 1);
        case_in(c, &x);
        case_attr(c, a_ints("perm", p64, 3));
        case_run(c);
        transpose_ref(xv, d, 3, perm, want);
        expect_f32(c->out[0], want, n);
        case_free(c);
    }
    free(xv);
    free(want);
}

Test(engine_ops_shape_transpose, default_reverses_and_any_element_size)
{
    double xd[6] = {0, 1, 2, 3, 4, 5};
    uint16_t xh[6] = {0, 1, 2, 3, 4, 5};
    const double want_d[6] = {0, 3, 1, 4, 2, 5};
    eng_tensor_t x = ten(ENG_DT_DOUBLE, shp(2, 2, 3), xd);
    op_case_t *c = case_new("Transpose", 13, 1);
    case_in(c, &x);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 2));
    cr_expect_arr_eq(c->out[0]->data, want_d, sizeof want_d);
    case_free(c);

    eng_tensor_t h = ten(ENG_DT_FLOAT16, shp(2, 2, 3), xh);
    c = case_new("Transpose", 13, 1);
    case_in(c, &h);
    case_run(c);
    const uint16_t want_h[6] = {0, 3, 1, 4, 2, 5};
    cr_expect_arr_eq(c->out[0]->data, want_h, sizeof want_h);
    case_free(c);
}

Test(engine_ops_shape_transpose, bad_perm_and_string_dtype_fail)
{
    static const int64_t perm[] = {0, 0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), NULL);
    op_case_t *c = case_new("Transpose", 13, 1);
    case_in(c, &x);
    case_attr(c, a_ints("perm", perm, 2));
    expect_err(case_infer(c), FS_EINVAL, "[0,0]");
    case_free(c);

    eng_tensor_t s = ten((eng_dtype_t)21, shp(1, 2), NULL);
    c = case_new("Transpose", 13, 1);
    case_in(c, &s);
    expect_err(case_infer(c), FS_ENOTSUP, "uint4");
    case_free(c);
}

/* --- Concat, Split -------------------------------------------------------------------------- */

Test(engine_ops_shape_concat_split, concat_along_inner_and_negative_axis)
{
    static const int64_t a[] = {1, 2, 3, 4}, b[] = {5, 6};
    eng_tensor_t x0 = ten(ENG_DT_INT64, shp(2, 2, 2), a);
    eng_tensor_t x1 = ten(ENG_DT_INT64, shp(2, 2, 1), b);
    eng_tensor_t x2 = ten(ENG_DT_INT64, shp(2, 2, 0), NULL);
    op_case_t *c = case_new("Concat", 13, 1);
    case_in(c, &x0);
    case_in(c, &x2);
    case_in(c, &x1);
    case_attr(c, a_int("axis", -1));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 3));
    expect_i64(c->out[0], (const int64_t[]){1, 2, 5, 3, 4, 6}, 6);
    case_free(c);
}

Test(engine_ops_shape_concat_split, concat_mismatch_fails)
{
    eng_tensor_t x0 = ten(ENG_DT_FLOAT, shp(2, 2, 2), NULL);
    eng_tensor_t x1 = ten(ENG_DT_FLOAT, shp(2, 3, 1), NULL);
    op_case_t *c = case_new("Concat", 13, 1);
    case_in(c, &x0);
    case_in(c, &x1);
    case_attr(c, a_int("axis", 1));
    expect_err(case_infer(c), FS_EINVAL, "[2,2]");
    case_free(c);

    c = case_new("Concat", 13, 1);
    case_in(c, &x0);
    expect_err(case_infer(c), FS_EINVAL, "axis");
    case_free(c);
}

Test(engine_ops_shape_concat_split, split_attr_input_and_equal)
{
    static const int64_t sizes[] = {1, 3};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 4), f_iota);
    op_case_t *c = case_new("Split", 11, 2);
    case_in(c, &x);
    case_attr(c, a_int("axis", 1));
    case_attr(c, a_ints("split", sizes, 2));
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 4}, 2);
    expect_f32(c->out[1], (const float[]){1, 2, 3, 5, 6, 7}, 6);
    case_free(c);

    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), sizes);
    c = case_new("Split", 13, 2);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("axis", -1));
    c->out[0] = NULL;
    case_run(c);
    expect_shape(c->out[1], shp(2, 2, 3));
    expect_f32(c->out[1], (const float[]){1, 2, 3, 5, 6, 7}, 6);
    s.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "split");
    case_free(c);

    c = case_new("Split", 13, 2);
    case_in(c, &x);
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 1, 2, 3}, 4);
    expect_f32(c->out[1], (const float[]){4, 5, 6, 7}, 4);
    case_free(c);
}

Test(engine_ops_shape_concat_split, split_num_outputs_uneven_from_opset_18)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 7), f_iota);
    op_case_t *c = case_new("Split", 18, 4);
    case_in(c, &x);
    case_attr(c, a_int("num_outputs", 4));
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 1}, 2);
    expect_f32(c->out[2], (const float[]){4, 5}, 2);
    expect_f32(c->out[3], (const float[]){6}, 1);
    case_free(c);

    c = case_new("Split", 13, 4);
    case_in(c, &x);
    expect_err(case_infer(c), FS_EINVAL, "4 parts");
    case_free(c);
}

Test(engine_ops_shape_concat_split, split_sizes_must_add_up)
{
    static const int64_t sizes[] = {1, 2};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 4), NULL);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), sizes);
    op_case_t *c = case_new("Split", 13, 2);
    case_in(c, &x);
    case_in(c, &s);
    expect_err(case_infer(c), FS_EINVAL, "add up to 3");
    case_free(c);
}

/* --- Slice ---------------------------------------------------------------------------------- */

/* Runs Slice on a 3x4 float iota at opset 13 with inputs of n values. */
static op_case_t *slice_case(const int64_t *starts, const int64_t *ends, const int64_t *axes,
                             const int64_t *steps, int n, eng_tensor_t t[5])
{
    t[0] = ten(ENG_DT_FLOAT, shp(2, 3, 4), f_iota);
    t[1] = ten(ENG_DT_INT64, shp(1, n), starts);
    t[2] = ten(ENG_DT_INT64, shp(1, n), ends);
    t[3] = ten(ENG_DT_INT64, shp(1, n), axes);
    t[4] = ten(ENG_DT_INT64, shp(1, n), steps);
    op_case_t *c = case_new("Slice", 13, 1);
    for (int i = 0; i < 5; i++)
        case_in(c, i == 3 && !axes ? NULL : i == 4 && !steps ? NULL : &t[i]);
    return c;
}

Test(engine_ops_shape_slice, steps_negative_steps_and_clamping)
{
    eng_tensor_t t[5];
    op_case_t *c = slice_case((const int64_t[]){0, 1}, (const int64_t[]){INT64_MAX, 1000},
                              (const int64_t[]){0, 1}, (const int64_t[]){2, 2}, 2, t);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_f32(c->out[0], (const float[]){1, 3, 9, 11}, 4);
    case_free(c);

    c = slice_case((const int64_t[]){-1, 20}, (const int64_t[]){INT64_MIN, -1000},
                   (const int64_t[]){-2, -1}, (const int64_t[]){-2, -3}, 2, t);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_f32(c->out[0], (const float[]){11, 8, 3, 0}, 4);
    case_free(c);

    c = slice_case((const int64_t[]){1}, (const int64_t[]){-1}, NULL, NULL, 1, t);
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 4));
    expect_f32(c->out[0], (const float[]){4, 5, 6, 7}, 4);
    case_free(c);

    c = slice_case((const int64_t[]){10}, (const int64_t[]){20}, (const int64_t[]){1}, NULL, 1,
                   t);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 0));
    case_free(c);
}

Test(engine_ops_shape_slice, attributes_before_opset_10)
{
    static const int64_t starts[] = {1, 0}, ends[] = {2, 3}, axes[] = {1, 0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 4), f_iota);
    op_case_t *c = case_new("Slice", 9, 1);
    case_in(c, &x);
    case_attr(c, a_ints("starts", starts, 2));
    case_attr(c, a_ints("ends", ends, 2));
    case_attr(c, a_ints("axes", axes, 2));
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 1));
    expect_f32(c->out[0], (const float[]){1, 5, 9}, 3);
    case_free(c);
}

Test(engine_ops_shape_slice, unknown_values_and_bad_steps)
{
    eng_tensor_t t[5];
    op_case_t *c = slice_case((const int64_t[]){0}, (const int64_t[]){1}, NULL,
                              (const int64_t[]){0}, 1, t);
    expect_err(case_infer(c), FS_EINVAL, "step 0");
    t[2].data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "ends");
    case_free(c);

    c = slice_case((const int64_t[]){0}, (const int64_t[]){1}, (const int64_t[]){2}, NULL, 1, t);
    expect_err(case_infer(c), FS_EINVAL, "axis 2");
    case_free(c);
}

/* --- Gather, GatherElements ----------------------------------------------------------------- */

Test(engine_ops_shape_gather, axis_and_negative_indices)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 4), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT32, shp(2, 1, 2), (const int32_t[]){-1, 0});
    op_case_t *c = case_new("Gather", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_attr(c, a_int("axis", 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 3, 1, 2));
    expect_f32(c->out[0], (const float[]){3, 0, 7, 4, 11, 8}, 6);
    case_free(c);
}

Test(engine_ops_shape_gather, scalar_index_drops_the_axis)
{
    static const int64_t dims[] = {7, 8, 9};
    static const int64_t one = 1;
    eng_tensor_t x = ten(ENG_DT_INT64, shp(1, 3), dims);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(0), &one);
    op_case_t *c = case_new("Gather", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_run(c);
    expect_shape(c->out[0], shp(0));
    expect_i64(c->out[0], (const int64_t[]){8}, 1);
    case_free(c);
}

Test(engine_ops_shape_gather, out_of_range_index_fails_at_run)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 3), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){0, 3});
    op_case_t *c = case_new("Gather", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    cr_assert_eq(case_infer(c), 0);
    float out[2] = {-1, -1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "index 3");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

Test(engine_ops_shape_gather, nd_rows_elements_and_batch_dims)
{
    /* data [2,3,4] of 0..23; rows at (1, -1) and (0, 0): [2,4]. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 2, 3, 4), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 2, 2), (const int64_t[]){1, -1, 0, 0});
    op_case_t *c = case_new("GatherND", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 4));
    expect_f32(c->out[0], (const float[]){20, 21, 22, 23, 0, 1, 2, 3}, 8);
    case_free(c);
    /* batch_dims 1: batch b picks element idx[b] of its own [3,4] grid. */
    eng_tensor_t idx_b = ten(ENG_DT_INT64, shp(2, 2, 2), (const int64_t[]){2, 3, 0, 1});
    c = case_new("GatherND", 13, 1);
    case_in(c, &x);
    case_in(c, &idx_b);
    case_attr(c, a_int("batch_dims", 1));
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    expect_f32(c->out[0], (const float[]){11, 13}, 2);
    case_free(c);
}

Test(engine_ops_shape_gather, nd_refuses_bad_indices)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 4), f_iota);
    eng_tensor_t deep = ten(ENG_DT_INT64, shp(2, 1, 3), (const int64_t[]){0, 0, 0});
    op_case_t *c = case_new("GatherND", 13, 1);
    case_in(c, &x);
    case_in(c, &deep);
    expect_err(case_infer(c), FS_EINVAL, "index 3 dims each");
    case_free(c);
    eng_tensor_t far = ten(ENG_DT_INT64, shp(2, 1, 2), (const int64_t[]){0, 4});
    c = case_new("GatherND", 13, 1);
    case_in(c, &x);
    case_in(c, &far);
    cr_assert_eq(case_infer(c), 0);
    float out[1] = {-1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "index 4");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

Test(engine_ops_shape_gather, elements_along_each_axis)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 3), f_iota);
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(2, 2, 2), (const int64_t[]){-1, 0, 2, 1});
    op_case_t *c = case_new("GatherElements", 13, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_attr(c, a_int("axis", 1));
    case_run(c);
    expect_f32(c->out[0], (const float[]){2, 0, 5, 4}, 4);
    case_free(c);

    eng_tensor_t i0 = ten(ENG_DT_INT32, shp(2, 1, 3), (const int32_t[]){2, 0, 1});
    c = case_new("GatherElements", 13, 1);
    case_in(c, &x);
    case_in(c, &i0);
    case_run(c);
    expect_f32(c->out[0], (const float[]){6, 1, 5}, 3);
    case_free(c);

    eng_tensor_t big = ten(ENG_DT_INT64, shp(2, 4, 1), NULL);
    c = case_new("GatherElements", 13, 1);
    case_in(c, &x);
    case_in(c, &big);
    case_attr(c, a_int("axis", 1));
    expect_err(case_infer(c), FS_EINVAL, "[4,1]");
    case_free(c);
}

/* --- Expand, Tile --------------------------------------------------------------------------- */

Test(engine_ops_shape_expand_tile, expand_broadcasts_both_ways)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 3, 1), f_iota);
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 3), (const int64_t[]){2, 1, 2});
    op_case_t *c = case_new("Expand", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_run(c);
    expect_shape(c->out[0], shp(3, 2, 3, 2));
    expect_f32(c->out[0], (const float[]){0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}, 12);
    s.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "shape");
    s.data = (void *)(const int64_t[]){4, 1};
    s.shape = shp(1, 2);
    expect_err(case_infer(c), FS_EINVAL, "[3,1]");
    case_free(c);
}

Test(engine_ops_shape_expand_tile, tile_repeats)
{
    eng_tensor_t x = ten(ENG_DT_INT8, shp(2, 2, 2), (const int8_t[]){1, 2, 3, 4});
    eng_tensor_t r = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){2, 3});
    op_case_t *c = case_new("Tile", 13, 1);
    case_in(c, &x);
    case_in(c, &r);
    case_run(c);
    expect_shape(c->out[0], shp(2, 4, 6));
    static const int8_t want[] = {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                  1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4};
    cr_expect_arr_eq(c->out[0]->data, want, sizeof want);
    r.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "repeats");
    r.data = (void *)(const int64_t[]){1, -1};
    expect_err(case_infer(c), FS_EINVAL, "[1,-1]");
    case_free(c);
}

Test(engine_ops_shape_expand_tile, tile_and_pad_past_the_shape_bound_are_refused_without_overflow)
{
    /* 2^40 * 2^33 overflows int64: infer saturates, eng_op_infer refuses. */
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 1), NULL);
    x.shape.dims[1] = (int64_t)1 << 40; /* shp takes ints */
    eng_tensor_t r = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){1, (int64_t)1 << 33});
    op_case_t *c = case_new("Tile", 13, 1);
    case_in(c, &x);
    case_in(c, &r);
    fs_err_clear();
    expect_err(eng_op_infer(&c->ctx), FS_ENOMEM, "output 0 would be float [2,9223372036854775807]");
    case_free(c);

    eng_tensor_t p = ten(ENG_DT_INT64, shp(1, 4), (const int64_t[]){0, INT64_MAX - 1, 0, 5});
    eng_tensor_t y = ten(ENG_DT_FLOAT, shp(2, 2, 3), NULL);
    c = case_new("Pad", 13, 1);
    case_in(c, &y);
    case_in(c, &p);
    fs_err_clear();
    expect_err(eng_op_infer(&c->ctx), FS_ENOMEM, "more than the 281474976710656 elements");
    case_free(c);
}

/* --- Pad ------------------------------------------------------------------------------------ */

/* Pads a 3x3 float iota at opset 19 in `mode` with pads (4 values). */
static op_case_t *pad_case(const char *mode, const int64_t *pads, eng_tensor_t t[2])
{
    t[0] = ten(ENG_DT_FLOAT, shp(2, 3, 3), f_iota);
    t[1] = ten(ENG_DT_INT64, shp(1, 4), pads);
    op_case_t *c = case_new("Pad", 19, 1);
    case_in(c, &t[0]);
    case_in(c, &t[1]);
    case_attr(c, a_str("mode", mode));
    return c;
}

Test(engine_ops_shape_pad, modes)
{
    static const int64_t pads[] = {0, 2, 0, 1};
    static const struct {
        const char *mode;
        float row0[6];
    } cases[] = {
        {"constant", {0, 0, 0, 1, 2, 0}},
        {"edge", {0, 0, 0, 1, 2, 2}},
        {"reflect", {2, 1, 0, 1, 2, 1}},
        {"wrap", {1, 2, 0, 1, 2, 0}},
    };
    for (size_t k = 0; k < N_OF(cases); k++) {
        eng_tensor_t t[2];
        op_case_t *c = pad_case(cases[k].mode, pads, t);
        case_run(c);
        expect_shape(c->out[0], shp(2, 3, 6));
        for (int j = 0; j < 6; j++)
            cr_expect_eq(((float *)c->out[0]->data)[j], cases[k].row0[j], "%s: [0][%d] = %g",
                         cases[k].mode, j, ((float *)c->out[0]->data)[j]);
        case_free(c);
    }
}

Test(engine_ops_shape_pad, reflect_wider_than_input_repeats)
{
    static const int64_t pads[] = {0, 5, 0, 0};
    eng_tensor_t t[2];
    op_case_t *c = pad_case("reflect", pads, t);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 8));
    static const float row0[] = {1, 0, 1, 2, 1, 0, 1, 2};
    cr_expect_arr_eq(c->out[0]->data, row0, sizeof row0);
    case_free(c);
}

Test(engine_ops_shape_pad, negative_pads_crop_and_constant_value_input)
{
    static const int64_t pads[] = {-1, 1, 0, -2};
    float value = 9;
    eng_tensor_t t[2];
    op_case_t *c = pad_case("constant", pads, t);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(0), &value);
    case_in(c, &v);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_f32(c->out[0], (const float[]){9, 3, 9, 6}, 4);
    case_free(c);
}

Test(engine_ops_shape_pad, attributes_before_opset_11_and_axes_from_18)
{
    static const int64_t pads[] = {1, 0, 0, 0};
    eng_tensor_t x = ten(ENG_DT_INT32, shp(2, 1, 2), (const int32_t[]){5, 6});
    op_case_t *c = case_new("Pad", 10, 1);
    case_in(c, &x);
    case_attr(c, a_ints("pads", pads, 4));
    case_attr(c, a_float("value", 7.0f));
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    cr_expect_arr_eq(c->out[0]->data, ((const int32_t[]){7, 7, 5, 6}), 4 * sizeof(int32_t));
    case_free(c);

    eng_tensor_t p = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){1, 2});
    eng_tensor_t ax = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){-1});
    c = case_new("Pad", 18, 1);
    case_in(c, &x);
    case_in(c, &p);
    case_in(c, NULL);
    case_in(c, &ax);
    case_attr(c, a_str("mode", "edge"));
    case_run(c);
    expect_shape(c->out[0], shp(2, 1, 5));
    cr_expect_arr_eq(c->out[0]->data, ((const int32_t[]){5, 5, 6, 6, 6}), 5 * sizeof(int32_t));
    case_free(c);
}

Test(engine_ops_shape_pad, errors)
{
    static const int64_t pads[] = {0, 1, 0, 1};
    eng_tensor_t t[2];
    op_case_t *c = pad_case("wrap", pads, t);
    c->ctx.opset = 18;
    expect_err(case_infer(c), FS_ENOTSUP, "wrap");
    c->ctx.opset = 19;
    t[1].data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "pads");
    t[1].data = (void *)(const int64_t[]){0, 1};
    t[1].shape = shp(1, 2);
    expect_err(case_infer(c), FS_EINVAL, "2 values per padded axis");
    t[1].data = (void *)(const int64_t[]){-4, 0, 0, 0};
    t[1].shape = shp(1, 4);
    expect_err(case_infer(c), FS_EINVAL, "axis 0");
    case_free(c);
}

/* --- Shape, Size, ConstantOfShape, Range, Constant ------------------------------------------ */

Test(engine_ops_shape_producers, shape_start_end_and_clipping)
{
    static const struct {
        int opset;
        int64_t start, end;
        int n;
        int64_t want[4];
    } cases[] = {
        {13, 1, 2, 4, {2, 3, 4, 5}}, {15, 1, 3, 2, {3, 4}}, {15, -1, 4, 1, {5}},
        {15, -10, 10, 4, {2, 3, 4, 5}}, {15, 3, 1, 0, {0}},
    };
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 2, 3, 4, 5), NULL);
    for (size_t k = 0; k < N_OF(cases); k++) {
        op_case_t *c = case_new("Shape", cases[k].opset, 1);
        case_in(c, &x);
        case_attr(c, a_int("start", cases[k].start));
        case_attr(c, a_int("end", cases[k].end));
        case_run(c);
        expect_shape(c->out[0], shp(1, cases[k].n));
        expect_i64(c->out[0], cases[k].want, cases[k].n);
        case_free(c);
    }
}

Test(engine_ops_shape_producers, size_reads_only_the_shape)
{
    eng_tensor_t x = ten(ENG_DT_BOOL, shp(3, 2, 3, 4), NULL);
    op_case_t *c = case_new("Size", 13, 1);
    case_in(c, &x);
    case_run(c);
    expect_shape(c->out[0], shp(0));
    expect_i64(c->out[0], (const int64_t[]){24}, 1);
    case_free(c);
}

Test(engine_ops_shape_producers, constant_of_shape_value_and_default)
{
    eng_tensor_t s = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){2, 3});
    op_case_t *c = case_new("ConstantOfShape", 13, 1);
    case_in(c, &s);
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 0, 0, 0, 0, 0}, 6);
    case_free(c);

    static const int32_t one = 1;
    c = case_new("ConstantOfShape", 13, 1);
    case_in(c, &s);
    case_attr(c, a_tensor("value", ten(ENG_DT_INT32, shp(1, 1), &one)));
    case_run(c);
    cr_expect_eq(c->out[0]->dtype, ENG_DT_INT32);
    cr_expect_arr_eq(c->out[0]->data, ((const int32_t[]){1, 1, 1, 1, 1, 1}), 6 * sizeof one);
    s.data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "input");
    s.data = (void *)(const int64_t[]){2, -1};
    expect_err(case_infer(c), FS_EINVAL, "-1");
    case_free(c);

    /* An empty shape list is known even without a buffer. */
    eng_tensor_t empty = ten(ENG_DT_INT64, shp(1, 0), NULL);
    c = case_new("ConstantOfShape", 13, 1);
    case_in(c, &empty);
    case_run(c);
    expect_shape(c->out[0], shp(0));
    case_free(c);
}

Test(engine_ops_shape_producers, range_float_and_int)
{
    float f[3] = {1, 2.5f, 0.5f};
    eng_tensor_t fs[3];
    op_case_t *c = case_new("Range", 13, 1);
    for (int i = 0; i < 3; i++) {
        fs[i] = ten(ENG_DT_FLOAT, shp(0), &f[i]);
        case_in(c, &fs[i]);
    }
    case_run(c);
    expect_f32(c->out[0], (const float[]){1, 1.5f, 2}, 3);
    case_free(c);

    int32_t v[3] = {10, 4, -3};
    eng_tensor_t is[3];
    c = case_new("Range", 13, 1);
    for (int i = 0; i < 3; i++) {
        is[i] = ten(ENG_DT_INT32, shp(0), &v[i]);
        case_in(c, &is[i]);
    }
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    cr_expect_arr_eq(c->out[0]->data, ((const int32_t[]){10, 7}), 2 * sizeof(int32_t));
    is[1].data = NULL;
    expect_err(case_infer(c), FS_EDYNAMIC, "limit");
    is[1].data = &v[1];
    v[2] = 0;
    expect_err(case_infer(c), FS_EINVAL, "delta 0");
    case_free(c);
}

Test(engine_ops_shape_producers, constant_attribute_forms)
{
    static const float fl[] = {1.5f, 2.5f};
    static const int64_t in[] = {4, 5, 6};
    static const uint8_t bytes[] = {1, 2, 3, 4};
    eng_attr_t forms[] = {a_tensor("value", ten(ENG_DT_UINT8, shp(2, 2, 2), bytes)),
                          a_float("value_float", 3.5f), a_floats("value_floats", fl, 2),
                          a_int("value_int", 7), a_ints("value_ints", in, 3)};
    eng_dtype_t want_dt[] = {ENG_DT_UINT8, ENG_DT_FLOAT, ENG_DT_FLOAT, ENG_DT_INT64, ENG_DT_INT64};
    eng_shape_t want_shape[] = {shp(2, 2, 2), shp(0), shp(1, 2), shp(0), shp(1, 3)};
    for (size_t k = 0; k < N_OF(forms); k++) {
        op_case_t *c = case_new("Constant", 13, 1);
        case_attr(c, forms[k]);
        case_run(c);
        cr_expect_eq(c->out[0]->dtype, want_dt[k], "%s", forms[k].name);
        expect_shape(c->out[0], want_shape[k]);
        case_free(c);
    }
    op_case_t *c = case_new("Constant", 13, 1);
    case_attr(c, a_int("value_int", 7));
    case_run(c);
    expect_i64(c->out[0], (const int64_t[]){7}, 1);
    case_free(c);

    c = case_new("Constant", 13, 1);
    case_attr(c, a_str("value_string", "x"));
    expect_err(case_infer(c), FS_ENOTSUP, "value_string");
    case_free(c);
    c = case_new("Constant", 13, 1);
    expect_err(case_infer(c), FS_EINVAL, "value");
    case_free(c);
}

/* --- DepthToSpace, SpaceToDepth -------------------------------------------------------------- */

/* The ONNX operator docs' example: 8 channels of 2x3 where channel k holds
 * 9k + position. */
static void d2s_input(float x[48])
{
    for (int k = 0; k < 8; k++)
        for (int p = 0; p < 6; p++)
            x[k * 6 + p] = (float)(9 * k + p / 3 * 3 + p % 3);
}

Test(engine_ops_shape_space_depth, depth_to_space_dcr_and_crd)
{
    static const float dcr[] = {0,  18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56,
                                3,  21, 4,  22, 5,  23, 39, 57, 40, 58, 41, 59,
                                9,  27, 10, 28, 11, 29, 45, 63, 46, 64, 47, 65,
                                12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68};
    static const float crd[] = {0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29,
                                3,  12, 4,  13, 5,  14, 21, 30, 22, 31, 23, 32,
                                36, 45, 37, 46, 38, 47, 54, 63, 55, 64, 56, 65,
                                39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68};
    float xv[48];
    d2s_input(xv);
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 8, 2, 3), xv);
    for (int mode = 0; mode < 2; mode++) {
        op_case_t *c = case_new("DepthToSpace", 13, 1);
        case_in(c, &x);
        case_attr(c, a_int("blocksize", 2));
        case_attr(c, a_str("mode", mode ? "CRD" : "DCR"));
        case_run(c);
        expect_shape(c->out[0], shp(4, 1, 2, 4, 6));
        expect_f32(c->out[0], mode ? crd : dcr, 48);
        case_free(c);
    }
}

Test(engine_ops_shape_space_depth, space_to_depth_inverts_dcr)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 2, 3, 4, 6), f_iota);
    op_case_t *s2d = case_new("SpaceToDepth", 13, 1);
    case_in(s2d, &x);
    case_attr(s2d, a_int("blocksize", 2));
    case_run(s2d);
    expect_shape(s2d->out[0], shp(4, 2, 12, 2, 3));
    op_case_t *d2s = case_new("DepthToSpace", 13, 1);
    case_in(d2s, s2d->out[0]);
    case_attr(d2s, a_int("blocksize", 2));
    case_run(d2s);
    expect_shape(d2s->out[0], x.shape);
    expect_f32(d2s->out[0], f_iota, 144);
    case_free(d2s);
    case_free(s2d);
}

Test(engine_ops_shape_space_depth, bad_block_and_mode_fail)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 3, 2, 2), NULL);
    op_case_t *c = case_new("DepthToSpace", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("blocksize", 2));
    expect_err(case_infer(c), FS_EINVAL, "blocksize^2");
    case_attr(c, a_str("mode", "XYZ"));
    expect_err(case_infer(c), FS_ENOTSUP, "XYZ");
    case_free(c);

    c = case_new("SpaceToDepth", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("blocksize", 0));
    expect_err(case_infer(c), FS_EINVAL, "blocksize");
    case_free(c);
}

/* --- registry -------------------------------------------------------------------------------- */

Test(engine_ops_shape_registry, every_op_has_a_definition_and_kernel)
{
    static const struct {
        const char *op;
        int inplace;
    } ops[] = {{"Reshape", 0},        {"Flatten", 0},    {"Squeeze", 0},
               {"Unsqueeze", 0},      {"Transpose", -1}, {"Concat", -1},
               {"Split", -1},         {"Slice", -1},     {"Gather", -1},
               {"GatherElements", -1}, {"Expand", -1},   {"Tile", -1},
               {"Pad", -1},           {"Shape", -1},     {"Size", -1},
               {"ConstantOfShape", -1}, {"Range", -1},   {"DepthToSpace", -1},
               {"SpaceToDepth", -1},  {"Constant", -1}};
    for (size_t k = 0; k < N_OF(ops); k++) {
        const eng_op_def_t *d = eng_op_find(ops[k].op);
        cr_assert(d, "%s has no definition", ops[k].op);
        cr_expect_eq(d->inplace_input, ops[k].inplace, "%s inplace_input", ops[k].op);
        cr_expect(eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), ops[k].op), "%s has no CPU kernel", ops[k].op);
    }
}

/* --- BitCast ------------------------------------------------------------------------------ */

Test(engine_ops_shape_views, bitcast_keeps_the_bits)
{
    static const float v[] = {1.0f, -2.0f};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 2), v);
    op_case_t *c = case_new("BitCast", 26, 1);
    case_in(c, &x);
    case_attr(c, a_int("to", ENG_DT_UINT32));
    case_run(c);
    expect_shape(c->out[0], shp(1, 2));
    cr_expect_eq(c->out[0]->dtype, ENG_DT_UINT32);
    const uint32_t *y = c->out[0]->data;
    cr_expect(y[0] == 0x3f800000u && y[1] == 0xc0000000u, "bits %08x %08x", y[0], y[1]);
    case_free(c);
    c = case_new("BitCast", 26, 1);
    case_in(c, &x);
    case_attr(c, a_int("to", ENG_DT_INT64));
    expect_err(case_infer(c), FS_EINVAL, "4 bytes");
    case_free(c);
}
