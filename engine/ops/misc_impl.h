/* misc_impl.h -- what the misc op definitions (engine/ops/misc.c) and their
 * kernels (engine/cpu/misc_kernels.c, engine/cuda/misc.cu) share: Resize's
 * attributes, geometry and tap weights, and TopK's k, axis and float keys.
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
 * Resize's per-coordinate arithmetic (footprint, coefficients, source
 * coordinate, taps) is inline and ENG_OPS_HD, so the CPU and the GPU build
 * the same tap tables.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_MISC_IMPL_H
#define FS_ENGINE_OPS_MISC_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

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

/* TopK's order-preserving key of an IEEE float of any width from its bits
 * `b` (`sign` its sign bit, `inf` +inf's bits): keys compare as unsigned
 * integers in the order of the values, every NaN (either sign, any
 * payload) above +inf, -0 equal to +0. The key fits the float's width.
 * Both devices rank floats by it (the CPU for every width, CUDA for half
 * and bfloat16), so they order alike. Cannot fail. */
ENG_OPS_HD static inline uint64_t eng_topk_float_key(uint64_t b, uint64_t sign, uint64_t inf)
{
    uint64_t mag = b & (sign - 1);
    if (mag > inf)
        return sign | (sign - 1); /* NaN: all ones */
    if (mag == 0)
        return sign; /* +-0 */
    return (b & sign) ? ~b & (sign | (sign - 1)) : b | sign;
}

/* Bytes of the tap tables Resize needs for the shapes in `c` (every axis's
 * eng_resize_table_bytes), bounded from the shapes alone: the scale of an
 * axis resized from `in` to `out` is at least (out - 0.5) / in, and the
 * footprint only shrinks as the scale grows. 0 when the attributes are
 * wrong (the kernel's run reports the error). Cannot fail. */
size_t eng_resize_scratch_bytes(const eng_op_ctx_t *c);

/* The neighbours the mode weighs for an axis of scale s (before merging). */
ENG_OPS_HD static inline int64_t eng_resize_footprint(const eng_resize_attrs_t *a, double s)
{
    if (!a->antialias)
        return a->mode == ENG_RESIZE_CUBIC ? 4 : 2;
    double sa = s < 1.0 ? s : 1.0;
    double reach = a->mode == ENG_RESIZE_CUBIC ? 2.0 : 1.0;
    return 2 - 2 * ((int64_t)floor(-reach / sa) + 1);
}

/* Tap slots for an axis: no more neighbours than the footprint, and no more
 * distinct (clamped) input indices than the axis has. */
ENG_OPS_HD static inline int64_t eng_resize_width(const eng_resize_attrs_t *a, double s,
                                                     int64_t in)
{
    int64_t n = eng_resize_footprint(a, s);
    return n < in ? n : in;
}

/* Bytes of one axis's tap tables: count[out], offset[out][width] (int64),
 * weight[out][width] (double). Cannot fail. */
static inline size_t eng_resize_table_bytes(int64_t out, int64_t width)
{
    return (size_t)out * (sizeof(int64_t) + (size_t)width * (sizeof(int64_t) + sizeof(double)));
}

/* The weight of neighbour j of n (neighbour 0 sits at base - n/2 + 1) for an
 * input coordinate `ratio` past base, ratio in (0, 1]. The ONNX reference's
 * coefficient functions. */
ENG_OPS_HD static inline double eng_resize_coeff(const eng_resize_attrs_t *a, int64_t n,
                                                    int64_t j, double ratio, double s)
{
    double A = a->cubic_a;
    if (a->antialias) {
        double sa = s < 1.0 ? s : 1.0;
        double t = fabs(sa * ((double)(1 - n / 2 + j) - ratio));
        if (a->mode == ENG_RESIZE_LINEAR)
            return t < 1.0 ? 1.0 - t : 0.0;
        if (t <= 1.0)
            return ((A + 2) * t - (A + 3)) * t * t + 1;
        return t < 2.0 ? ((A * t - 5 * A) * t + 8 * A) * t - 4 * A : 0.0;
    }
    if (a->mode == ENG_RESIZE_LINEAR)
        return j == 0 ? 1.0 - ratio : ratio;
    if (a->mode == ENG_RESIZE_CUBIC) {
        double t = j < 2 ? ratio + (double)(1 - j) : (double)(j - 1) - ratio;
        if (t <= 1.0)
            return ((A + 2) * t - (A + 3)) * t * t + 1;
        return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
    }
    bool take_upper;
    if (ratio == 1.0) {
        take_upper = true;
    } else {
        switch (a->nearest) {
        case ENG_RESIZE_ROUND_PREFER_FLOOR: take_upper = ratio > 0.5; break;
        case ENG_RESIZE_ROUND_PREFER_CEIL: take_upper = ratio >= 0.5; break;
        case ENG_RESIZE_FLOOR: take_upper = false; break;
        default: take_upper = true; break;
        }
    }
    return (j == 1) == take_upper ? 1.0 : 0.0;
}

/* The input coordinate of output coordinate x on axis d of g; r0 and r1 are
 * the axis's roi (read only by tf_crop_and_resize, which sets *outside when
 * the coordinate leaves the input; every other mode clears it). */
ENG_OPS_HD static inline double eng_resize_source(const eng_resize_geom_t *g, int d, int64_t x,
                                                     double r0, double r1, bool *outside)
{
    double in = (double)g->in[d], s = g->scale[d], out_w = s * in, xd = (double)x;
    *outside = false;
    switch (g->attrs.coord) {
    case ENG_RESIZE_HALF_PIXEL:
        return (xd + 0.5) / s - 0.5;
    case ENG_RESIZE_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)g->out[d] / out_w;
        return in / 2 * (1 - adjustment) + (xd + 0.5) / s - 0.5;
    }
    case ENG_RESIZE_PYTORCH_HALF_PIXEL:
        return out_w == 1.0 ? -0.5 : (xd + 0.5) / s - 0.5;
    case ENG_RESIZE_ALIGN_CORNERS:
        return out_w == 1.0 ? 0.0 : xd * (in - 1) / (out_w - 1);
    case ENG_RESIZE_ASYMMETRIC:
        return xd / s;
    case ENG_RESIZE_TF_HALF_PIXEL_FOR_NN:
        return (xd + 0.5) / s;
    case ENG_RESIZE_TF_CROP_AND_RESIZE:
        break;
    }
    double xo = out_w == 1.0 ? (r1 - r0) * (in - 1) / 2 : xd * (r1 - r0) * (in - 1) / (out_w - 1);
    xo += r0 * (in - 1);
    *outside = xo < 0 || xo > in - 1;
    return xo;
}

/* The taps of input coordinate xo (inside the input) on an axis of `in`
 * elements, scale s, footprint n (eng_resize_footprint) and element stride
 * `stride`: off[] (input index times stride) and wt[] get the weights of
 * the distinct clamped neighbours (normalised as the attributes say, zero
 * weights dropped, repeats merged), at most eng_resize_width of them.
 * Returns how many. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_resize_taps(const eng_resize_attrs_t *a, int64_t n,
                                                   int64_t in, double s, int64_t stride,
                                                   double xo, int64_t *off, double *wt)
{
    /* The neighbours lie left of xo when it is a whole number, so the
     * ratio is in (0, 1] as the reference has it. */
    double fl = floor(xo);
    int64_t base = (int64_t)fl - (xo == fl);
    double ratio = xo == fl ? 1.0 : xo - fl;
    int64_t first = base - n / 2 + 1;
    double sum_all = 0.0, sum_in = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double w = eng_resize_coeff(a, n, j, ratio, s);
        sum_all += w;
        if (first + j >= 0 && first + j < in)
            sum_in += w;
    }
    double norm = a->exclude_outside ? sum_in : a->antialias ? sum_all : 1.0;
    int64_t used = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t idx = first + j;
        if (a->exclude_outside && (idx < 0 || idx >= in))
            continue;
        double w = eng_resize_coeff(a, n, j, ratio, s) / norm;
        if (w == 0.0)
            continue;
        idx = idx < 0 ? 0 : idx >= in ? in - 1 : idx;
        if (used > 0 && off[used - 1] == idx * stride) {
            wt[used - 1] += w;
        } else {
            off[used] = idx * stride;
            wt[used++] = w;
        }
    }
    return used;
}

#ifdef __cplusplus
}
#endif
#endif
