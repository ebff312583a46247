/* misc_impl.h -- what the misc op definitions (engine/ops/misc.c) and their
 * kernels (engine/cpu/misc_kernels.c) share: Resize's attributes and
 * geometry, and TopK's k and axis.
 *
 * Resize follows the ONNX reference implementation: every axis maps output
 * coordinate x to an input coordinate x_ori (coordinate_transformation_mode,
 * with the axis's scale as a real number, so `scales` of 0.6 on 4 pixels
 * maps with 2.4, not with the 2 output pixels), then takes n neighbours of
 * x_ori (edge-clamped) weighted by the mode's coefficients. An axis whose
 * x_ori falls outside the input under tf_crop_and_resize gives
 * extrapolation_value for the whole output element. Opset 10 (scales only,
 * no coordinate attributes) maps as PyTorch's exporter meant it:
 * asymmetric coordinates, nearest rounds down.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_MISC_IMPL_H
#define FS_ENGINE_OPS_MISC_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eng_resize_mode {
    ENG_RESIZE_NEAREST,
    ENG_RESIZE_LINEAR,
    ENG_RESIZE_CUBIC,
} eng_resize_mode_t;

typedef enum eng_resize_coord {
    ENG_RESIZE_HALF_PIXEL,
    ENG_RESIZE_HALF_PIXEL_SYMMETRIC,
    ENG_RESIZE_PYTORCH_HALF_PIXEL,
    ENG_RESIZE_ALIGN_CORNERS,
    ENG_RESIZE_ASYMMETRIC,
    ENG_RESIZE_TF_HALF_PIXEL_FOR_NN,
    ENG_RESIZE_TF_CROP_AND_RESIZE,
} eng_resize_coord_t;

typedef enum eng_resize_nearest {
    ENG_RESIZE_ROUND_PREFER_FLOOR,
    ENG_RESIZE_ROUND_PREFER_CEIL,
    ENG_RESIZE_FLOOR,
    ENG_RESIZE_CEIL,
} eng_resize_nearest_t;

typedef enum eng_resize_aspect {
    ENG_RESIZE_STRETCH,
    ENG_RESIZE_NOT_LARGER,
    ENG_RESIZE_NOT_SMALLER,
} eng_resize_aspect_t;

typedef struct eng_resize_attrs {
    eng_resize_mode_t mode;
    eng_resize_coord_t coord;
    eng_resize_nearest_t nearest;
    eng_resize_aspect_t aspect;
    float cubic_a;
    float extrapolation;
    bool exclude_outside;
    bool antialias;          /* linear and cubic only; ignored for nearest */
} eng_resize_attrs_t;

typedef struct eng_resize_geom {
    eng_resize_attrs_t attrs;
    int rank;
    int64_t in[ENG_MAX_RANK];
    int64_t out[ENG_MAX_RANK];
    double scale[ENG_MAX_RANK];     /* 1 on axes that are not resized */
    double roi_start[ENG_MAX_RANK]; /* tf_crop_and_resize: 0 and 1 unless roi says */
    double roi_end[ENG_MAX_RANK];
} eng_resize_geom_t;

/* Resize's attributes for the node in `c` (opset read from c). 0, or
 * FS_ENOTSUP naming an unknown mode / coordinate_transformation_mode /
 * nearest_mode / keep_aspect_ratio_policy, FS_EINVAL for one the opset does
 * not have (cubic at opset 10). */
int eng_resize_attrs(const eng_op_ctx_t *c, eng_resize_attrs_t *a);

/* Resize's full geometry for the node in `c`: output dims from `sizes` or
 * `scales` (and axes, keep_aspect_ratio_policy), per-axis scales, and the
 * roi where its value is known. 0, or FS_EDYNAMIC (scales or sizes value not
 * known yet), FS_EINVAL (lengths that do not match the rank or axes, a
 * scale <= 0, neither or both of scales and sizes), FS_ENOTSUP (dtype);
 * *g is undefined on error. */
int eng_resize_geom(const eng_op_ctx_t *c, eng_resize_geom_t *g);

/* TopK's normalised axis and k for the node in `c` (k from the attribute
 * before opset 10, else the K input). 0, or FS_EDYNAMIC (K not known yet),
 * FS_EINVAL (k < 0 or larger than the axis, K not a one-element int64). */
int eng_topk_params(const eng_op_ctx_t *c, int *axis, int64_t *k);

#ifdef __cplusplus
}
#endif
#endif
