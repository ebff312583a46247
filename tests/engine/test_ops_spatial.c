/* test_ops_spatial.c -- the spatial and signal ops (engine/ops/spatial.c,
 * nms.c, signal.c) and LpPool / GlobalLpPool on the CPU: small cases
 * checked by hand, and bad inputs refused with a message naming them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "op_case.h"

static const float iota9[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};

Test(engine_ops_spatial, grid_sample_interpolates_and_pads)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), (const float[]){1, 2, 3, 4});
    /* Corners and the centre with align_corners; a point far outside
     * reads zeros. */
    eng_tensor_t grid = ten(ENG_DT_FLOAT, shp(4, 1, 1, 4, 2),
                            (const float[]){-1, -1, 1, 1, 0, 0, -3, -3});
    op_case_t *c = case_new("GridSample", 16, 1);
    case_in(c, &x);
    case_in(c, &grid);
    case_attr(c, a_int("align_corners", 1));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 1, 4));
    expect_f32_near(c->out[0], (const float[]){1, 4, 2.5f, 0}, 4);
    case_free(c);
    /* Border padding clamps the far point to the corner; nearest rounds
     * the centre (0.5, 0.5) half to even, to pixel 0. */
    c = case_new("GridSample", 20, 1);
    case_in(c, &x);
    case_in(c, &grid);
    case_attr(c, a_str("mode", "nearest"));
    case_attr(c, a_str("padding_mode", "border"));
    case_run(c);
    expect_f32(c->out[0], (const float[]){1, 4, 1, 1}, 4);
    case_free(c);
}

Test(engine_ops_spatial, grid_sample_refuses_bad_grids_and_modes)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), iota9);
    eng_tensor_t grid3 = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 3), iota9);
    op_case_t *c = case_new("GridSample", 16, 1);
    case_in(c, &x);
    case_in(c, &grid3);
    expect_err(case_infer(c), FS_EINVAL, "grid [1,1,2,3]");
    case_free(c);
    eng_tensor_t grid = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), iota9);
    c = case_new("GridSample", 16, 1);
    case_in(c, &x);
    case_in(c, &grid);
    case_attr(c, a_str("mode", "linear"));
    expect_err(case_infer(c), FS_ENOTSUP, "mode 'linear'");
    case_free(c);
}

Test(engine_ops_spatial, affine_grid_maps_the_base_grid)
{
    eng_tensor_t theta = ten(ENG_DT_FLOAT, shp(3, 1, 2, 3), (const float[]){1, 0, 0, 0, 1, 0});
    eng_tensor_t size = ten(ENG_DT_INT64, shp(1, 4), (const int64_t[]){1, 1, 2, 2});
    op_case_t *c = case_new("AffineGrid", 20, 1);
    case_in(c, &theta);
    case_in(c, &size);
    case_attr(c, a_int("align_corners", 1));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 2, 2, 2));
    expect_f32_near(c->out[0], (const float[]){-1, -1, 1, -1, -1, 1, 1, 1}, 8);
    case_free(c);
    /* Pixel centres without align_corners; theta of the wrong shape. */
    c = case_new("AffineGrid", 20, 1);
    case_in(c, &theta);
    case_in(c, &size);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){-0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f},
                    8);
    case_free(c);
    eng_tensor_t size3 = ten(ENG_DT_INT64, shp(1, 5), (const int64_t[]){1, 1, 2, 2, 2});
    c = case_new("AffineGrid", 20, 1);
    case_in(c, &theta);
    case_in(c, &size3);
    expect_err(case_infer(c), FS_EINVAL, "theta");
    case_free(c);
}

Test(engine_ops_spatial, lp_pools_take_the_p_norm_of_each_window)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 1, 3), (const float[]){3, -4, 0});
    op_case_t *c = case_new("LpPool", 18, 1);
    case_in(c, &x);
    case_attr(c, a_ints("kernel_shape", (const int64_t[]){2}, 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 1, 2));
    expect_f32_near(c->out[0], (const float[]){5, 4}, 2);
    case_free(c);
    c = case_new("GlobalLpPool", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("p", 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 1, 1));
    expect_f32_near(c->out[0], (const float[]){7}, 1);
    case_free(c);
    c = case_new("GlobalLpPool", 13, 1);
    case_in(c, &x);
    case_attr(c, a_int("p", 0));
    expect_err(case_infer(c), FS_EINVAL, "p is 0");
    case_free(c);
}

Test(engine_ops_spatial, roi_align_averages_or_takes_the_max)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), (const float[]){1, 2, 3, 4});
    eng_tensor_t rois = ten(ENG_DT_FLOAT, shp(2, 1, 4), (const float[]){0, 0, 1, 1});
    eng_tensor_t bi = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){0});
    /* Opset 10 (no half-pixel offset): one sample at (0.5, 0.5). */
    op_case_t *c = case_new("RoiAlign", 10, 1);
    case_in(c, &x);
    case_in(c, &rois);
    case_in(c, &bi);
    case_attr(c, a_int("sampling_ratio", 1));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 1, 1));
    expect_f32_near(c->out[0], (const float[]){2.5f}, 1);
    case_free(c);
    /* max: the largest weighted corner, 0.25 * 4. */
    c = case_new("RoiAlign", 16, 1);
    case_in(c, &x);
    case_in(c, &rois);
    case_in(c, &bi);
    case_attr(c, a_int("sampling_ratio", 1));
    case_attr(c, a_str("mode", "max"));
    case_attr(c, a_str("coordinate_transformation_mode", "output_half_pixel"));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){1}, 1);
    case_free(c);
}

Test(engine_ops_spatial, roi_ops_refuse_a_batch_index_outside_x)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 3, 3), iota9);
    eng_tensor_t rois = ten(ENG_DT_FLOAT, shp(2, 1, 4), (const float[]){0, 0, 1, 1});
    eng_tensor_t bi = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){3});
    op_case_t *c = case_new("RoiAlign", 16, 1);
    case_in(c, &x);
    case_in(c, &rois);
    case_in(c, &bi);
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[1] = {-1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "batch_indices[0] is 3");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
    eng_tensor_t rois5 = ten(ENG_DT_FLOAT, shp(2, 1, 5), (const float[]){2, 0, 0, 1, 1});
    c = case_new("MaxRoiPool", 13, 1);
    case_in(c, &x);
    case_in(c, &rois5);
    case_attr(c, a_ints("pooled_shape", (const int64_t[]){1, 1}, 2));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "batch 2");
    c->out[0]->data = NULL;
    case_free(c);
}

Test(engine_ops_spatial, max_roi_pool_takes_each_bins_max)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 3, 3), iota9);
    eng_tensor_t rois = ten(ENG_DT_FLOAT, shp(2, 1, 5), (const float[]){0, 0, 0, 2, 2});
    /* A 3x3 ROI in 2x2 bins of 1.5: rows [0, 2) and [1, 3), as columns. */
    op_case_t *c = case_new("MaxRoiPool", 13, 1);
    case_in(c, &x);
    case_in(c, &rois);
    case_attr(c, a_ints("pooled_shape", (const int64_t[]){2, 2}, 2));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 2, 2));
    expect_f32(c->out[0], (const float[]){4, 5, 7, 8}, 4);
    case_free(c);
}

Test(engine_ops_spatial, col2im_sums_overlapping_blocks)
{
    static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 4, 4), ones);
    eng_tensor_t img = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){3, 3});
    eng_tensor_t blk = ten(ENG_DT_INT64, shp(1, 2), (const int64_t[]){2, 2});
    op_case_t *c = case_new("Col2Im", 18, 1);
    case_in(c, &x);
    case_in(c, &img);
    case_in(c, &blk);
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 3, 3));
    expect_f32(c->out[0], (const float[]){1, 2, 1, 2, 4, 2, 1, 2, 1}, 9);
    case_free(c);
    /* 5 columns cannot be the 4 blocks these shapes make. */
    eng_tensor_t x5 = ten(ENG_DT_FLOAT, shp(3, 1, 4, 5), ones);
    c = case_new("Col2Im", 18, 1);
    case_in(c, &x5);
    case_in(c, &img);
    case_in(c, &blk);
    expect_err(case_infer(c), FS_EINVAL, "[N, C * 4, 4]");
    case_free(c);
}

Test(engine_ops_spatial, max_unpool_scatters_and_refuses_bad_indices)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 2), (const float[]){5, 6});
    eng_tensor_t idx = ten(ENG_DT_INT64, shp(4, 1, 1, 1, 2), (const int64_t[]){1, 3});
    op_case_t *c = case_new("MaxUnpool", 11, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_attr(c, a_ints("kernel_shape", (const int64_t[]){1, 2}, 2));
    case_attr(c, a_ints("strides", (const int64_t[]){1, 2}, 2));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 1, 4));
    expect_f32(c->out[0], (const float[]){0, 5, 0, 6}, 4);
    case_free(c);
    /* output_shape [1, 1, 2, 5]: the unpooled row sits at the origin. */
    eng_tensor_t os = ten(ENG_DT_INT64, shp(1, 4), (const int64_t[]){1, 1, 2, 5});
    c = case_new("MaxUnpool", 11, 1);
    case_in(c, &x);
    case_in(c, &idx);
    case_in(c, &os);
    case_attr(c, a_ints("kernel_shape", (const int64_t[]){1, 2}, 2));
    case_attr(c, a_ints("strides", (const int64_t[]){1, 2}, 2));
    case_run(c);
    expect_f32(c->out[0], (const float[]){0, 5, 0, 6, 0, 0, 0, 0, 0, 0}, 10);
    case_free(c);
    eng_tensor_t bad = ten(ENG_DT_INT64, shp(4, 1, 1, 1, 2), (const int64_t[]){1, 4});
    c = case_new("MaxUnpool", 11, 1);
    case_in(c, &x);
    case_in(c, &bad);
    case_attr(c, a_ints("kernel_shape", (const int64_t[]){1, 2}, 2));
    case_attr(c, a_ints("strides", (const int64_t[]){1, 2}, 2));
    cr_assert_eq(case_infer(c), 0, "%s", fs_errmsg());
    float out[4] = {-1, -1, -1, -1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "I[1] is 4");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

Test(engine_ops_spatial, deform_conv_moves_and_scales_taps)
{
    static const float zeros[8] = {0};
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 3, 3), iota9);
    eng_tensor_t w = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 2), (const float[]){1, 1, 1, 1});
    eng_tensor_t off = ten(ENG_DT_FLOAT, shp(4, 1, 8, 1, 1), zeros);
    /* Output (0, 0) only (strides 2): taps at (0,0), (0,1), (1,0), (1,1). */
    op_case_t *c = case_new("DeformConv", 19, 1);
    case_in(c, &x);
    case_in(c, &w);
    case_in(c, &off);
    case_attr(c, a_ints("strides", (const int64_t[]){2, 2}, 2));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 1, 1));
    expect_f32_near(c->out[0], (const float[]){8}, 1);
    case_free(c);
    /* Every tap moved half a pixel right, scaled by 0.5, plus B. */
    eng_tensor_t half = ten(ENG_DT_FLOAT, shp(4, 1, 8, 1, 1),
                            (const float[]){0, 0.5f, 0, 0.5f, 0, 0.5f, 0, 0.5f});
    eng_tensor_t b = ten(ENG_DT_FLOAT, shp(1, 1), (const float[]){10});
    eng_tensor_t mask = ten(ENG_DT_FLOAT, shp(4, 1, 4, 1, 1), (const float[]){0.5f, 0.5f, 0.5f, 0.5f});
    c = case_new("DeformConv", 19, 1);
    case_in(c, &x);
    case_in(c, &w);
    case_in(c, &half);
    case_in(c, &b);
    case_in(c, &mask);
    case_attr(c, a_ints("strides", (const int64_t[]){2, 2}, 2));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){10 + 0.5f * 10}, 1);
    case_free(c);
    eng_tensor_t off_bad = ten(ENG_DT_FLOAT, shp(4, 1, 4, 1, 1), zeros);
    c = case_new("DeformConv", 19, 1);
    case_in(c, &x);
    case_in(c, &w);
    case_in(c, &off_bad);
    case_attr(c, a_ints("strides", (const int64_t[]){2, 2}, 2));
    expect_err(case_infer(c), FS_EINVAL, "offset");
    case_free(c);
}

Test(engine_ops_spatial, nms_keeps_the_best_boxes_per_class)
{
    /* ONNX's suppress_by_IOU example. */
    eng_tensor_t boxes = ten(ENG_DT_FLOAT, shp(3, 1, 6, 4),
                             (const float[]){0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f,
                                             0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101});
    eng_tensor_t scores = ten(ENG_DT_FLOAT, shp(3, 1, 1, 6),
                              (const float[]){0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
    eng_tensor_t max = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){3});
    eng_tensor_t iou = ten(ENG_DT_FLOAT, shp(1, 1), (const float[]){0.5f});
    eng_tensor_t score = ten(ENG_DT_FLOAT, shp(1, 1), (const float[]){0});
    op_case_t *c = case_new("NonMaxSuppression", 11, 1);
    case_in(c, &boxes);
    case_in(c, &scores);
    case_in(c, &max);
    case_in(c, &iou);
    case_in(c, &score);
    case_run(c);
    expect_shape(c->out[0], shp(2, 3, 3));
    expect_i64(c->out[0], (const int64_t[]){0, 0, 3, 0, 0, 0, 0, 0, 5}, 9);
    case_free(c);
    /* Unknown boxes: the output length is only known at run time. */
    eng_tensor_t unknown = ten(ENG_DT_FLOAT, shp(3, 1, 6, 4), NULL);
    c = case_new("NonMaxSuppression", 11, 1);
    case_in(c, &unknown);
    case_in(c, &scores);
    case_in(c, &max);
    expect_err(case_infer(c), FS_EDYNAMIC, "boxes");
    case_free(c);
}

Test(engine_ops_signal, dft_forward_onesided_and_irfft)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 4, 1), (const float[]){1, 2, 3, 4});
    op_case_t *c = case_new("DFT", 20, 1);
    case_in(c, &x);
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 4, 2));
    expect_f32_near(c->out[0], (const float[]){10, 0, -2, 2, -2, 0, -2, -2}, 8);
    case_free(c);
    c = case_new("DFT", 17, 1);
    case_in(c, &x);
    case_attr(c, a_int("onesided", 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 3, 2));
    expect_f32_near(c->out[0], (const float[]){10, 0, -2, 2, -2, 0}, 6);
    case_free(c);
    /* The one-sided spectrum back to the real signal (n = 2 * (3 - 1)). */
    eng_tensor_t spec = ten(ENG_DT_FLOAT, shp(3, 1, 3, 2), (const float[]){10, 0, -2, 2, -2, 0});
    c = case_new("DFT", 20, 1);
    case_in(c, &spec);
    case_attr(c, a_int("inverse", 1));
    case_attr(c, a_int("onesided", 1));
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 4, 1));
    expect_f32_near(c->out[0], (const float[]){1, 2, 3, 4}, 4);
    case_free(c);
    /* The last dim holds the complex parts: not an axis. */
    eng_tensor_t axis = ten(ENG_DT_INT64, shp(0), (const int64_t[]){-1});
    c = case_new("DFT", 20, 1);
    case_in(c, &x);
    case_in(c, NULL);
    case_in(c, &axis);
    expect_err(case_infer(c), FS_EINVAL, "axis -1");
    case_free(c);
}

Test(engine_ops_signal, stft_frames_and_transforms)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(3, 1, 4, 1), (const float[]){1, 2, 3, 4});
    eng_tensor_t step = ten(ENG_DT_INT64, shp(0), (const int64_t[]){2});
    eng_tensor_t len = ten(ENG_DT_INT64, shp(0), (const int64_t[]){2});
    op_case_t *c = case_new("STFT", 17, 1);
    case_in(c, &x);
    case_in(c, &step);
    case_in(c, NULL);
    case_in(c, &len);
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 2, 2, 2));
    expect_f32_near(c->out[0], (const float[]){3, 0, -1, 0, 7, 0, -1, 0}, 8);
    case_free(c);
    eng_tensor_t long_len = ten(ENG_DT_INT64, shp(0), (const int64_t[]){5});
    c = case_new("STFT", 17, 1);
    case_in(c, &x);
    case_in(c, &step);
    case_in(c, NULL);
    case_in(c, &long_len);
    expect_err(case_infer(c), FS_EINVAL, "frame_length 5");
    case_free(c);
}

Test(engine_ops_signal, windows_by_hand)
{
    eng_tensor_t four = ten(ENG_DT_INT64, shp(0), (const int64_t[]){4});
    op_case_t *c = case_new("HannWindow", 17, 1);
    case_in(c, &four);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0, 0.5f, 1, 0.5f}, 4);
    case_free(c);
    c = case_new("BlackmanWindow", 17, 1);
    case_in(c, &four);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0, 0.34f, 1, 0.34f}, 4);
    case_free(c);
    eng_tensor_t three = ten(ENG_DT_INT64, shp(0), (const int64_t[]){3});
    c = case_new("HammingWindow", 17, 1);
    case_in(c, &three);
    case_attr(c, a_int("periodic", 0));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){4.0f / 46, 1, 4.0f / 46}, 3);
    case_free(c);
    c = case_new("HannWindow", 17, 1);
    case_in(c, &four);
    case_attr(c, a_int("output_datatype", ENG_DT_STRING));
    expect_err(case_infer(c), FS_ENOTSUP, "output_datatype 8");
    case_free(c);
}

Test(engine_ops_signal, mel_weight_matrix_shape_and_bad_sizes)
{
    eng_tensor_t bins = ten(ENG_DT_INT64, shp(0), (const int64_t[]){8});
    eng_tensor_t len = ten(ENG_DT_INT64, shp(0), (const int64_t[]){16});
    eng_tensor_t rate = ten(ENG_DT_INT64, shp(0), (const int64_t[]){8192});
    eng_tensor_t lo = ten(ENG_DT_FLOAT, shp(0), (const float[]){0});
    eng_tensor_t hi = ten(ENG_DT_FLOAT, shp(0), (const float[]){4096});
    op_case_t *c = case_new("MelWeightMatrix", 17, 1);
    case_in(c, &bins);
    case_in(c, &len);
    case_in(c, &rate);
    case_in(c, &lo);
    case_in(c, &hi);
    case_run(c);
    expect_shape(c->out[0], shp(2, 9, 8));
    /* Every triangle peaks at 1 in its centre bin. */
    const float *y = c->out[0]->data;
    for (int m = 0; m < 8; m++) {
        float peak = 0;
        for (int j = 0; j < 9; j++)
            peak = y[j * 8 + m] > peak ? y[j * 8 + m] : peak;
        cr_expect_eq(peak, 1.0f, "mel bin %d peaks at %g", m, peak);
    }
    case_free(c);
    eng_tensor_t zero = ten(ENG_DT_INT64, shp(0), (const int64_t[]){0});
    c = case_new("MelWeightMatrix", 17, 1);
    case_in(c, &zero);
    case_in(c, &len);
    case_in(c, &rate);
    case_in(c, &lo);
    case_in(c, &hi);
    expect_err(case_infer(c), FS_EINVAL, "num_mel_bins 0");
    case_free(c);
}
