/* misc.c -- definitions (validation, dtype and shape inference) of the misc
 * ops: TopK, Trilu, Resize and Upsample (Resize-10 under its deprecated
 * name), and their geometry (misc_impl.h). */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/misc_impl.h"

/* TopK ranks every numeric dtype (TopK-11's; bfloat16 from TopK-24, taken at
 * every opset). */
static const eng_dtype_t topk_types[] = {
    ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,
    ENG_DT_INT16, ENG_DT_INT32,  ENG_DT_INT64,   ENG_DT_UINT8,    ENG_DT_UINT16,
    ENG_DT_UINT32, ENG_DT_UINT64, ENG_DT_UNDEFINED};
static const eng_dtype_t any_supported[] = {ENG_DT_FLOAT, ENG_DT_INT32, ENG_DT_INT64, ENG_DT_BOOL,
                                            ENG_DT_UINT8, ENG_DT_UNDEFINED};
static const eng_dtype_t float_only[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
static const eng_dtype_t int64_only[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};
static const eng_dtype_t index_types[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};

/* The numel of an optional input; 0 when absent. */
static int64_t input_numel(const eng_op_ctx_t *c, int i)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    return t ? eng_shape_numel(&t->shape) : 0;
}

/* Unless input i (`what`) is absent: FS_ENOTSUP unless its dtype is in
 * `allowed`, FS_EINVAL unless it holds exactly one value. */
static int one_value_input(const eng_op_ctx_t *c, int i, const char *what,
                           const eng_dtype_t *allowed)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    int rc = t ? eng_op_require_dtype(c, i, allowed) : 0;
    if (rc == 0 && t && (t->shape.rank > 1 || eng_shape_numel(&t->shape) != 1))
        return eng_op_err(c, FS_EINVAL, "%s must hold one value, not %lld (rank %d)", what,
                          (long long)eng_shape_numel(&t->shape), t->shape.rank);
    return rc;
}

/* ---- TopK --------------------------------------------------------------- */

int eng_topk_params(const eng_op_ctx_t *c, int *axis, int64_t *k)
{
    const eng_shape_t *xs = &c->inputs[0]->shape;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -1), xs->rank, axis);
    if (rc)
        return rc;
    if (c->opset < 10) {
        if (!eng_node_attr(c->node, "k"))
            return eng_op_err(c, FS_EINVAL, "the k attribute is missing");
        *k = eng_attr_i(c->node, "k", 0);
    } else {
        const eng_tensor_t *t = eng_ctx_in(c, 1);
        if (!t)
            return eng_op_err(c, FS_EINVAL, "the K input is missing");
        if ((rc = one_value_input(c, 1, "K", index_types)))
            return rc;
        if (!t->data)
            return eng_op_err(c, FS_EDYNAMIC, "K's value is only known at run time");
        *k = eng_tensor_get_i64(t, 0);
    }
    if (*k < 0 || *k > xs->dims[*axis])
        return eng_op_err(c, FS_EINVAL, "k = %lld is out of range for axis %d of size %lld",
                          (long long)*k, *axis, (long long)xs->dims[*axis]);
    return 0;
}

/* The infer hooks write their outputs only once every check has passed: on
 * error they are untouched and the message names the node. */
static int topk_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, topk_types);
    int axis;
    int64_t k;
    if (rc || (rc = eng_topk_params(c, &axis, &k)))
        return rc;
    eng_shape_t ys = c->inputs[0]->shape;
    ys.dims[axis] = k;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &ys); /* Values */
    eng_ctx_out_set(c, 1, ENG_DT_INT64, &ys);        /* Indices */
    return 0;
}

/* ---- Trilu -------------------------------------------------------------- */

static int trilu_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, any_supported);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    if (x->shape.rank < 2)
        return eng_op_err(c, FS_EINVAL, "input 0 must have rank >= 2, not %d", x->shape.rank);
    if ((rc = one_value_input(c, 1, "k", int64_only)))
        return rc;
    eng_ctx_out_set(c, 0, x->dtype, &x->shape);
    return 0;
}

/* ---- Resize ------------------------------------------------------------- */

/* Looks attribute `name` (default `def`) up in `names` and stores its index
 * in *out. 0, or FS_ENOTSUP naming the value and the supported ones. */
static int pick_name(const eng_op_ctx_t *c, const char *name, const char *def,
                     const char *const *names, int n, int *out)
{
    const char *v = eng_attr_s(c->node, name, def);
    for (int i = 0; i < n; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    return eng_op_err(c, FS_ENOTSUP, "%s '%s' is not supported (supported: %s)", name, v, list);
}

/* Upsample (every version) is Resize-10 with scales: asymmetric
 * coordinates, nearest rounding down, scales only. */
static bool is_upsample(const eng_op_ctx_t *c)
{
    return c->node->op && c->node->op->id == ENG_OP_Upsample;
}

int eng_resize_attrs(const eng_op_ctx_t *c, eng_resize_attrs_t *a)
{
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel",    "half_pixel_symmetric",
                                         "pytorch_half_pixel", "align_corners",
                                         "asymmetric",    "tf_half_pixel_for_nn",
                                         "tf_crop_and_resize"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    static const char *const aspects[] = {"stretch", "not_larger", "not_smaller"};
    int mode, coord = ENG_RESIZE_ASYMMETRIC, nearest = ENG_RESIZE_FLOOR, aspect = 0;
    bool upsample = is_upsample(c);
    int rc;
    /* Upsample-1's 'bilinear' is linear. */
    if (upsample && c->opset < 7 && strcmp(eng_attr_s(c->node, "mode", ""), "bilinear") == 0)
        mode = ENG_RESIZE_LINEAR;
    else if ((rc = pick_name(c, "mode", "nearest", modes, upsample ? 2 : 3, &mode)) != 0)
        return rc;
    if (c->opset < 11 && mode == ENG_RESIZE_CUBIC)
        return eng_op_err(c, FS_EINVAL, "mode 'cubic' needs opset 11 (model opset %d)", c->opset);
    if (c->opset >= 11 && !upsample &&
        ((rc = pick_name(c, "coordinate_transformation_mode", "half_pixel", coords, 7, &coord)) ||
         (rc = pick_name(c, "nearest_mode", "round_prefer_floor", nearests, 4, &nearest)) ||
         (rc = pick_name(c, "keep_aspect_ratio_policy", "stretch", aspects, 3, &aspect))))
        return rc;
    a->mode = (eng_resize_mode_t)mode;
    a->coord = (eng_resize_coord_t)coord;
    a->nearest = (eng_resize_nearest_t)nearest;
    a->aspect = (eng_resize_aspect_t)aspect;
    a->cubic_a = eng_attr_f(c->node, "cubic_coeff_a", -0.75f);
    a->extrapolation = eng_attr_f(c->node, "extrapolation_value", 0.0f);
    a->exclude_outside = eng_attr_i(c->node, "exclude_outside", 0) != 0;
    a->antialias = a->mode != ENG_RESIZE_NEAREST && eng_attr_i(c->node, "antialias", 0) != 0;
    return 0;
}

/* Resize's `axes` attribute (opset 18), normalised, into axes[] and *n; all
 * axes in order when absent. 0, or FS_EINVAL (out of range, repeated). */
static int resize_axes(const eng_op_ctx_t *c, int rank, int axes[ENG_MAX_RANK], int *n)
{
    size_t count = 0;
    const int64_t *attr = c->opset >= 18 ? eng_attr_ints(c->node, "axes", &count) : NULL;
    if (!attr) {
        for (int d = 0; d < rank; d++)
            axes[d] = d;
        *n = rank;
        return 0;
    }
    if (count > (size_t)rank)
        return eng_op_err(c, FS_EINVAL, "axes lists %zu axes for rank %d", count, rank);
    bool seen[ENG_MAX_RANK] = {false};
    for (size_t i = 0; i < count; i++) {
        int rc = eng_op_axis(c, attr[i], rank, &axes[i]);
        if (rc)
            return rc;
        if (seen[axes[i]])
            return eng_op_err(c, FS_EINVAL, "axis %lld is listed twice in axes", (long long)attr[i]);
        seen[axes[i]] = true;
    }
    *n = (int)count;
    return 0;
}

/* Output dims and scales from the scales input (opset 10's input 1). 0, or
 * FS_EINVAL (a scale <= 0, a dim too large); g is partly written on error. */
static int resize_from_scales(const eng_op_ctx_t *c, const eng_tensor_t *t, const int *axes,
                              int n_axes, eng_resize_geom_t *g)
{
    for (int i = 0; i < n_axes; i++) {
        double s = ((const float *)t->data)[i];
        if (!(s > 0.0))
            return eng_op_err(c, FS_EINVAL, "scales[%d] is %g: scales must be > 0", i, s);
        g->scale[axes[i]] = s;
    }
    for (int d = 0; d < g->rank; d++) {
        double out = g->scale[d] * (double)g->in[d];
        if (!(out < 1e15))
            return eng_op_err(c, FS_EINVAL, "scale %g on axis %d of size %lld gives a dim too "
                              "large", g->scale[d], d, (long long)g->in[d]);
        g->out[d] = (int64_t)out; /* the reference truncates */
    }
    return 0;
}

/* Output dims and scales from the sizes input, with keep_aspect_ratio_policy.
 * 0, or FS_EINVAL (a negative size, a dim too large); g is partly written
 * on error. */
static int resize_from_sizes(const eng_op_ctx_t *c, const eng_tensor_t *t, const int *axes,
                             int n_axes, eng_resize_geom_t *g)
{
    for (int i = 0; i < n_axes; i++) {
        int64_t v = eng_tensor_get_i64(t, i);
        if (v < 0 || v > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "sizes[%d] is %lld: sizes must be 0..%lld", i,
                              (long long)v, (long long)ENG_NUMEL_MAX);
        g->out[axes[i]] = v;
    }
    for (int d = 0; d < g->rank; d++)
        g->scale[d] = g->in[d] ? (double)g->out[d] / (double)g->in[d] : 1.0;
    if (g->attrs.aspect == ENG_RESIZE_STRETCH)
        return 0;
    double s = g->scale[axes[0]];
    for (int i = 1; i < n_axes; i++) {
        double si = g->scale[axes[i]];
        s = g->attrs.aspect == ENG_RESIZE_NOT_LARGER ? (si < s ? si : s) : (si > s ? si : s);
    }
    for (int i = 0; i < n_axes; i++) {
        /* One axis's ratio applied to another's size can pass any dim. */
        double out = s * (double)g->in[axes[i]] + 0.5;
        if (!(out < 1e15))
            return eng_op_err(c, FS_EINVAL, "keeping the aspect ratio, scale %g on axis %d of "
                              "size %lld gives a dim too large", s, axes[i],
                              (long long)g->in[axes[i]]);
        g->scale[axes[i]] = s;
        g->out[axes[i]] = (int64_t)out;
    }
    return 0;
}

/* FS_EINVAL naming an empty input axis that g resizes to a non-empty one. */
static int resize_nonempty(const eng_op_ctx_t *c, const eng_resize_geom_t *g)
{
    for (int d = 0; d < g->rank; d++)
        if (g->in[d] == 0 && g->out[d] > 0)
            return eng_op_err(c, FS_EINVAL, "axis %d is empty and cannot be resized to %lld", d,
                              (long long)g->out[d]);
    return 0;
}

/* Upsample's scales as a float tensor *t: attributes height_scale and
 * width_scale of a 4-D input before opset 7 (buf backs them), attribute
 * scales at 7 and 8 (also through buf), input 1 from 9. 0, or FS_EINVAL
 * (a missing or wrong-length list), FS_ENOTSUP (dtype), FS_EDYNAMIC (input
 * value not known yet). */
static int upsample_scales(const eng_op_ctx_t *c, int rank, float *buf, eng_tensor_t *t)
{
    *t = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {1, {rank}}, .data = buf};
    if (c->opset < 7) {
        if (rank != 4)
            return eng_op_err(c, FS_EINVAL, "Upsample-1 scales a 4-D input (NCHW), not rank %d",
                              rank);
        buf[0] = buf[1] = 1.0f;
        buf[2] = eng_attr_f(c->node, "height_scale", 0.0f);
        buf[3] = eng_attr_f(c->node, "width_scale", 0.0f);
        return 0;
    }
    if (c->opset < 9) {
        size_t n = 0;
        const float *v = eng_attr_floats(c->node, "scales", &n);
        if (!v || n != (size_t)rank)
            return eng_op_err(c, FS_EINVAL, "attribute scales must hold %d values (one per "
                              "dim), not %zu", rank, n);
        memcpy(buf, v, n * sizeof *v);
        return 0;
    }
    int rc = eng_op_require_dtype(c, 1, float_only);
    if (rc)
        return rc;
    const eng_tensor_t *in = c->inputs[1];
    if (in->shape.rank != 1 || in->shape.dims[0] != rank)
        return eng_op_err(c, FS_EINVAL, "scales must be 1-D with %d values (one per dim), not "
                          "%lld", rank, (long long)eng_shape_numel(&in->shape));
    if (!in->data)
        return eng_op_err(c, FS_EDYNAMIC, "the scales input's value is only known at run time");
    *t = *in;
    return 0;
}

int eng_resize_geom(const eng_op_ctx_t *c, eng_resize_geom_t *g)
{
    int rc = eng_op_require_dtype(c, 0, float_only);
    if (rc || (rc = eng_resize_attrs(c, &g->attrs)))
        return rc;
    const eng_shape_t *xs = &c->inputs[0]->shape;
    g->rank = xs->rank;
    for (int d = 0; d < xs->rank; d++) {
        g->in[d] = g->out[d] = xs->dims[d];
        g->scale[d] = 1.0;
        g->roi_start[d] = 0.0;
        g->roi_end[d] = 1.0;
    }
    int axes[ENG_MAX_RANK], n_axes = 0;
    if ((rc = resize_axes(c, xs->rank, axes, &n_axes)))
        return rc;
    if (is_upsample(c)) {
        eng_tensor_t st;
        float buf[ENG_MAX_RANK];
        if ((rc = upsample_scales(c, xs->rank, buf, &st)) ||
            (rc = resize_from_scales(c, &st, axes, n_axes, g)))
            return rc;
        return resize_nonempty(c, g);
    }
    int i_roi = c->opset >= 11 ? 1 : -1, i_scales = c->opset >= 11 ? 2 : 1;
    bool by_scales = input_numel(c, i_scales) > 0;
    bool by_sizes = c->opset >= 11 && input_numel(c, 3) > 0;
    if (by_scales == by_sizes)
        return eng_op_err(c, FS_EINVAL, "exactly one of scales and sizes must be given, not %s",
                          by_scales ? "both" : "neither");
    int i_val = by_scales ? i_scales : 3;
    const eng_tensor_t *t = c->inputs[i_val];
    if ((rc = eng_op_require_dtype(c, i_val, by_scales ? float_only : int64_only)))
        return rc;
    if (t->shape.rank != 1 || t->shape.dims[0] != n_axes)
        return eng_op_err(c, FS_EINVAL, "%s must be 1-D with %d values (one per resized axis), "
                          "not %lld", by_scales ? "scales" : "sizes", n_axes,
                          (long long)eng_shape_numel(&t->shape));
    if (!t->data)
        return eng_op_err(c, FS_EDYNAMIC, "the %s input's value is only known at run time",
                          by_scales ? "scales" : "sizes");
    rc = by_scales ? resize_from_scales(c, t, axes, n_axes, g)
                   : resize_from_sizes(c, t, axes, n_axes, g);
    if (rc || (rc = resize_nonempty(c, g)))
        return rc;
    const eng_tensor_t *roi = i_roi >= 0 ? eng_ctx_in(c, i_roi) : NULL;
    if (g->attrs.coord != ENG_RESIZE_TF_CROP_AND_RESIZE || !roi || !eng_shape_numel(&roi->shape))
        return 0;
    if ((rc = eng_op_require_dtype(c, i_roi, float_only)))
        return rc;
    if (eng_shape_numel(&roi->shape) != 2 * n_axes)
        return eng_op_err(c, FS_EINVAL, "roi must hold %d values (start and end per resized "
                          "axis), not %lld", 2 * n_axes, (long long)eng_shape_numel(&roi->shape));
    for (int i = 0; roi->data && i < n_axes; i++) {
        g->roi_start[axes[i]] = ((const float *)roi->data)[i];
        g->roi_end[axes[i]] = ((const float *)roi->data)[n_axes + i];
    }
    return 0;
}

/* Load-time: the string attributes name supported modes. */
static int resize_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    eng_resize_attrs_t a;
    return eng_resize_attrs(&c, &a);
}

static int resize_infer(eng_op_ctx_t *c)
{
    eng_resize_geom_t g;
    int rc = eng_resize_geom(c, &g);
    if (rc)
        return rc;
    c->outputs[0]->dtype = ENG_DT_FLOAT;
    c->outputs[0]->shape.rank = g.rank;
    for (int d = 0; d < g.rank; d++)
        c->outputs[0]->shape.dims[d] = g.out[d];
    return 0;
}

ENG_OP_DEF(TopK, NULL, topk_infer, -1);
ENG_OP_DEF(Trilu, NULL, trilu_infer, -1);
ENG_OP_DEF(Resize, resize_check, resize_infer, -1);
ENG_OP_DEF(Upsample, resize_check, resize_infer, -1);

size_t eng_resize_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_resize_attrs_t a;
    if (eng_resize_attrs(c, &a))
        return 0;
    const eng_shape_t *xs = &c->inputs[0]->shape, *ys = &c->outputs[0]->shape;
    size_t bytes = 0;
    for (int d = 0; d < xs->rank; d++) {
        int64_t in = xs->dims[d], out = ys->dims[d];
        if (out == 0 || in == 0)
            continue;
        double s_min = ((double)out - 0.5) / (double)in * (1.0 - 1e-9);
        bytes += eng_resize_table_bytes(out, eng_resize_width(&a, s_min, in));
    }
    return bytes;
}
