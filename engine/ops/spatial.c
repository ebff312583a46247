/* spatial.c -- definitions (validation, dtype and shape inference) of the
 * spatial ops: GridSample, AffineGrid, RoiAlign, MaxRoiPool, Col2Im,
 * MaxUnpool and DeformConv, and their parameters (spatial_impl.h), which
 * infer and both devices' kernels share. NonMaxSuppression lives in nms.c.
 *
 * Every infer sets its outputs only after all its checks: on error no
 * output is touched and the message names the node, the input and what
 * was expected. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/shape_impl.h"
#include "engine/ops/spatial_impl.h"

static const eng_dtype_t dt_real[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                      ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int64[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};

#define SHAPE_BUF 200

/* Looks string attribute `name` (default def) up in names[0..n) and sets
 * *out to its index. 0, or FS_ENOTSUP naming the value and the supported
 * ones. */
static int pick_name(const eng_op_ctx_t *c, const char *name, const char *def,
                     const char *const *names, int n, int *out)
{
    const char *v = eng_attr_s(c->node, name, def);
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[160] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    return eng_op_err(c, FS_ENOTSUP, "%s '%s' is not supported at opset %d (supported: %s)", name,
                      v, c->opset, list);
}

/* Input i (`what`), required: FS_EINVAL when absent, FS_ENOTSUP unless its
 * dtype is in allowed, FS_EINVAL unless its rank is `rank` (-1: any). */
static int need_input(const eng_op_ctx_t *c, int i, const char *what, const eng_dtype_t *allowed,
                      int rank, const eng_tensor_t **out)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    if (!t)
        return eng_op_err(c, FS_EINVAL, "required input %d (%s) is missing", i, what);
    int rc = eng_op_require_dtype(c, i, allowed);
    if (rc)
        return rc;
    char b[SHAPE_BUF];
    if (rank >= 0 && t->shape.rank != rank)
        return eng_op_err(c, FS_EINVAL, "input %d (%s) has shape %s, expected rank %d", i, what,
                          eng_shape_format(&t->shape, b, sizeof b), rank);
    *out = t;
    return 0;
}

/* FS_EINVAL naming input i (`what`), its shape and the shape it should
 * have (`want`, rank dims). */
static int shape_err(const eng_op_ctx_t *c, int i, const char *what, const int64_t *want,
                     int rank)
{
    eng_shape_t w = {.rank = rank};
    for (int d = 0; d < rank; d++)
        w.dims[d] = want[d];
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    return eng_op_err(c, FS_EINVAL, "input %d (%s) has shape %s, expected %s", i, what,
                      eng_shape_format(&c->inputs[i]->shape, b1, sizeof b1),
                      eng_shape_format(&w, b2, sizeof b2));
}

/* Whether input i has exactly the dims want[0..rank). */
static bool shape_is(const eng_op_ctx_t *c, int i, const int64_t *want, int rank)
{
    const eng_shape_t *s = &c->inputs[i]->shape;
    if (s->rank != rank)
        return false;
    for (int d = 0; d < rank; d++)
        if (s->dims[d] != want[d])
            return false;
    return true;
}

/* Reads INTS attribute `name` of n values, each >= min, into v (left as
 * is when absent). 0 or FS_EINVAL naming it. */
static int read_ints(const eng_op_ctx_t *c, const char *name, int n, int64_t min, int64_t *v)
{
    size_t count;
    const int64_t *a = eng_attr_ints(c->node, name, &count);
    if (!a)
        return 0;
    if (count != (size_t)n)
        return eng_op_err(c, FS_EINVAL, "attribute %s has %zu values, expected %d", name, count,
                          n);
    for (int i = 0; i < n; i++) {
        if (a[i] < min || a[i] > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "attribute %s[%d] is %lld, must be %lld..%lld", name,
                              i, (long long)a[i], (long long)min, (long long)ENG_NUMEL_MAX);
        v[i] = a[i];
    }
    return 0;
}

/* ---- GridSample ---------------------------------------------------------- */

static int grid_sample_modes(const eng_op_ctx_t *c, eng_grid_sample_t *g)
{
    static const char *const modes16[] = {"nearest", "bilinear", "bicubic"};
    static const char *const modes20[] = {"nearest", "linear", "cubic"};
    static const char *const pads[] = {"zeros", "border", "reflection"};
    bool v20 = c->opset >= 20;
    int rc = pick_name(c, "mode", v20 ? "linear" : "bilinear", v20 ? modes20 : modes16, 3,
                       &g->mode);
    if (rc || (rc = pick_name(c, "padding_mode", "zeros", pads, 3, &g->padding)))
        return rc;
    g->align = eng_attr_i(c->node, "align_corners", 0) != 0;
    return 0;
}

int eng_grid_sample_params(const eng_op_ctx_t *c, eng_grid_sample_t *g)
{
    const eng_tensor_t *x = NULL, *grid = NULL;
    int rc;
    if ((rc = need_input(c, 0, "X", dt_real, -1, &x)) ||
        (rc = need_input(c, 1, "grid", dt_real, -1, &grid)) || (rc = grid_sample_modes(c, g)))
        return rc;
    int rank = x->shape.rank, ns = rank - 2;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&grid->shape, b2, sizeof b2);
    if (c->opset < 20 && rank != 4)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank 4 ([N, C, H, W]) before opset 20",
                          b1);
    if (rank < 3)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank >= 3 ([N, C, spatial...])", b1);
    if (ns > ENG_SP_DIMS)
        return eng_op_err(c, FS_ENOTSUP, "X %s has %d spatial dims; at most %d are supported",
                          b1, ns, ENG_SP_DIMS);
    if (grid->shape.rank != rank || grid->shape.dims[0] != x->shape.dims[0] ||
        grid->shape.dims[rank - 1] != ns)
        return eng_op_err(c, FS_EINVAL, "grid %s does not fit X %s: expected [%lld, out..., %d]",
                          b2, b1, (long long)x->shape.dims[0], ns);
    g->n_spatial = ns;
    g->x_dt = x->dtype;
    g->grid_dt = grid->dtype;
    g->batch = x->shape.dims[0];
    g->channels = x->shape.dims[1];
    g->y.rank = rank;
    g->y.dims[0] = g->batch;
    g->y.dims[1] = g->channels;
    for (int d = 0; d < ENG_SP_DIMS; d++) {
        int s = d - (ENG_SP_DIMS - ns);
        g->in[d] = s < 0 ? 1 : x->shape.dims[2 + s];
        g->out[d] = s < 0 ? 1 : grid->shape.dims[1 + s];
        if (s >= 0)
            g->y.dims[2 + s] = g->out[d];
    }
    return 0;
}

static int grid_sample_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    eng_grid_sample_t g;
    return grid_sample_modes(&c, &g);
}

static int grid_sample_infer(eng_op_ctx_t *c)
{
    eng_grid_sample_t g;
    int rc = eng_grid_sample_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, g.x_dt, &g.y);
    return 0;
}

/* ---- AffineGrid ---------------------------------------------------------- */

int eng_affine_grid_params(const eng_op_ctx_t *c, eng_affine_grid_t *g)
{
    const eng_tensor_t *theta = NULL, *size = NULL;
    int64_t n;
    int rc;
    if ((rc = need_input(c, 0, "theta", dt_real, 3, &theta)) ||
        (rc = eng_shapeops_in_ints(c, 1, "size", true, &size, &n)))
        return rc;
    if (n != 4 && n != 5)
        return eng_op_err(c, FS_EINVAL, "size has %lld values, expected 4 ([N, C, H, W]) or 5 "
                          "([N, C, D, H, W])", (long long)n);
    int nd = (int)n - 2;
    int64_t v[5];
    for (int i = 0; i < n; i++) {
        v[i] = eng_tensor_get_i64(size, i);
        if (v[i] < 0 || v[i] > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "size[%d] is %lld, must be 0..%lld", i,
                              (long long)v[i], (long long)ENG_NUMEL_MAX);
    }
    int64_t want[3] = {v[0], nd, nd + 1};
    if (!shape_is(c, 0, want, 3))
        return shape_err(c, 0, "theta", want, 3);
    g->nd = nd;
    g->align = eng_attr_i(c->node, "align_corners", 0) != 0;
    g->dt = theta->dtype;
    g->sp[0] = nd == 3 ? v[2] : 1;
    g->sp[1] = v[n - 2];
    g->sp[2] = v[n - 1];
    g->y.rank = nd + 2;
    g->y.dims[0] = v[0];
    for (int d = 0; d < nd; d++)
        g->y.dims[1 + d] = v[2 + d];
    g->y.dims[nd + 1] = nd;
    return 0;
}

static int affine_grid_infer(eng_op_ctx_t *c)
{
    eng_affine_grid_t g;
    int rc = eng_affine_grid_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, g.dt, &g.y);
    return 0;
}

/* ---- RoiAlign ------------------------------------------------------------ */

static int roi_align_modes(const eng_op_ctx_t *c, eng_roi_align_t *r)
{
    static const char *const modes[] = {"avg", "max"};
    static const char *const coords[] = {"half_pixel", "output_half_pixel"};
    int mode, coord = 1;
    int rc = pick_name(c, "mode", "avg", modes, 2, &mode);
    /* Opset 10 has no coordinate_transformation_mode: it maps as
     * output_half_pixel does. */
    if (rc == 0 && c->opset >= 16)
        rc = pick_name(c, "coordinate_transformation_mode", "half_pixel", coords, 2, &coord);
    if (rc)
        return rc;
    r->max = mode == 1;
    r->half_pixel = coord == 0;
    r->out_h = eng_attr_i(c->node, "output_height", 1);
    r->out_w = eng_attr_i(c->node, "output_width", 1);
    r->sampling = eng_attr_i(c->node, "sampling_ratio", 0);
    r->scale = eng_attr_f(c->node, "spatial_scale", 1.0f);
    if (r->out_h < 1 || r->out_w < 1 || r->out_h > ENG_NUMEL_MAX || r->out_w > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "output_height %lld and output_width %lld must be "
                          "1..%lld", (long long)r->out_h, (long long)r->out_w,
                          (long long)ENG_NUMEL_MAX);
    if (r->sampling < 0 || r->sampling > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "sampling_ratio %lld must be 0..%lld",
                          (long long)r->sampling, (long long)ENG_NUMEL_MAX);
    return 0;
}

int eng_roi_align_params(const eng_op_ctx_t *c, eng_roi_align_t *r)
{
    const eng_tensor_t *x = NULL, *rois = NULL, *bi = NULL;
    int rc;
    if ((rc = roi_align_modes(c, r)) || (rc = need_input(c, 0, "X", dt_real, 4, &x)) ||
        (rc = need_input(c, 1, "rois", dt_real, 2, &rois)) ||
        (rc = need_input(c, 2, "batch_indices", dt_int64, 1, &bi)))
        return rc;
    int64_t n_rois = rois->shape.dims[0], want_rois[2] = {n_rois, 4}, want_bi[1] = {n_rois};
    if (!shape_is(c, 1, want_rois, 2))
        return shape_err(c, 1, "rois", want_rois, 2);
    if (!shape_is(c, 2, want_bi, 1))
        return shape_err(c, 2, "batch_indices", want_bi, 1);
    r->x_dt = x->dtype;
    r->roi_dt = rois->dtype;
    r->batch = x->shape.dims[0];
    r->channels = x->shape.dims[1];
    r->h = x->shape.dims[2];
    r->w = x->shape.dims[3];
    r->n_rois = n_rois;
    r->y = (eng_shape_t){.rank = 4, .dims = {n_rois, r->channels, r->out_h, r->out_w}};
    return 0;
}

static int roi_align_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    eng_roi_align_t r;
    return roi_align_modes(&c, &r);
}

static int roi_align_infer(eng_op_ctx_t *c)
{
    eng_roi_align_t r;
    int rc = eng_roi_align_params(c, &r);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, r.x_dt, &r.y);
    return 0;
}

/* ---- MaxRoiPool ---------------------------------------------------------- */

int eng_max_roi_pool_params(const eng_op_ctx_t *c, eng_max_roi_pool_t *m)
{
    const eng_tensor_t *x = NULL, *rois = NULL;
    int rc;
    if ((rc = need_input(c, 0, "X", dt_real, 4, &x)) ||
        (rc = need_input(c, 1, "rois", dt_real, 2, &rois)))
        return rc;
    if (!eng_node_attr(c->node, "pooled_shape"))
        return eng_op_err(c, FS_EINVAL, "attribute pooled_shape is missing");
    int64_t ps[2];
    if ((rc = read_ints(c, "pooled_shape", 2, 1, ps)))
        return rc;
    int64_t n_rois = rois->shape.dims[0], want[2] = {n_rois, 5};
    if (!shape_is(c, 1, want, 2))
        return shape_err(c, 1, "rois", want, 2);
    m->out_h = ps[0];
    m->out_w = ps[1];
    m->scale = eng_attr_f(c->node, "spatial_scale", 1.0f);
    m->f64 = x->dtype == ENG_DT_DOUBLE;
    m->x_dt = x->dtype;
    m->roi_dt = rois->dtype;
    m->batch = x->shape.dims[0];
    m->channels = x->shape.dims[1];
    m->h = x->shape.dims[2];
    m->w = x->shape.dims[3];
    m->n_rois = n_rois;
    m->y = (eng_shape_t){.rank = 4, .dims = {n_rois, m->channels, m->out_h, m->out_w}};
    return 0;
}

static int max_roi_pool_infer(eng_op_ctx_t *c)
{
    eng_max_roi_pool_t m;
    int rc = eng_max_roi_pool_params(c, &m);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, m.x_dt, &m.y);
    return 0;
}

/* ---- Col2Im -------------------------------------------------------------- */

int eng_col2im_params(const eng_op_ctx_t *c, eng_col2im_t *p)
{
    const eng_tensor_t *x = NULL, *img = NULL, *blk = NULL;
    int64_t n_img, n_blk;
    int rc;
    if ((rc = need_input(c, 0, "input", dt_real, 3, &x)) ||
        (rc = eng_shapeops_in_ints(c, 1, "image_shape", true, &img, &n_img)) ||
        (rc = eng_shapeops_in_ints(c, 2, "block_shape", true, &blk, &n_blk)))
        return rc;
    if (n_img != n_blk || n_img < 1)
        return eng_op_err(c, FS_EINVAL, "image_shape (%lld values) and block_shape (%lld "
                          "values) must have the same length, at least 1", (long long)n_img,
                          (long long)n_blk);
    if (n_img > ENG_COL2IM_DIMS)
        return eng_op_err(c, FS_ENOTSUP, "%lld spatial dims; at most %d are supported",
                          (long long)n_img, ENG_COL2IM_DIMS);
    int ns = (int)n_img;
    int64_t pads[2 * ENG_COL2IM_DIMS] = {0};
    p->ns = ns;
    for (int d = 0; d < ns; d++)
        p->stride[d] = p->dil[d] = 1;
    if ((rc = read_ints(c, "strides", ns, 1, p->stride)) ||
        (rc = read_ints(c, "dilations", ns, 1, p->dil)) ||
        (rc = read_ints(c, "pads", 2 * ns, 0, pads)))
        return rc;
    p->k = 1;
    p->img_size = 1;
    int64_t cols = 1;
    for (int d = 0; d < ns; d++) {
        p->img[d] = eng_tensor_get_i64(img, d);
        p->blk[d] = eng_tensor_get_i64(blk, d);
        p->pad[d] = pads[d];
        if (p->img[d] < 1 || p->img[d] > ENG_NUMEL_MAX || p->blk[d] < 1 ||
            p->blk[d] > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "image_shape[%d] %lld and block_shape[%d] %lld must "
                              "be 1..%lld", d, (long long)p->img[d], d, (long long)p->blk[d],
                              (long long)ENG_NUMEL_MAX);
        int64_t span = eng_dim_add(eng_dim_mul(p->dil[d], p->blk[d] - 1), 1);
        int64_t room = p->img[d] + pads[d] + pads[ns + d] - span;
        if (room < 0)
            return eng_op_err(c, FS_EINVAL, "spatial dim %d: the block (%lld with dilation) is "
                              "larger than the padded image (%lld)", d, (long long)span,
                              (long long)(p->img[d] + pads[d] + pads[ns + d]));
        p->n_blk[d] = room / p->stride[d] + 1;
        p->k = eng_dim_mul(p->k, p->blk[d]);
        p->img_size = eng_dim_mul(p->img_size, p->img[d]);
        cols = eng_dim_mul(cols, p->n_blk[d]);
    }
    const int64_t *xd = x->shape.dims;
    if (xd[1] % p->k != 0 || xd[2] != cols) {
        char b[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "input %s must be [N, C * %lld, %lld] for these "
                          "image_shape, block_shape and attributes",
                          eng_shape_format(&x->shape, b, sizeof b), (long long)p->k,
                          (long long)cols);
    }
    p->dt = x->dtype;
    p->channels = xd[1] / p->k;
    p->l = cols;
    p->y.rank = 2 + ns;
    p->y.dims[0] = xd[0];
    p->y.dims[1] = p->channels;
    for (int d = 0; d < ns; d++)
        p->y.dims[2 + d] = p->img[d];
    return 0;
}

static int col2im_infer(eng_op_ctx_t *c)
{
    eng_col2im_t p;
    int rc = eng_col2im_params(c, &p);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, p.dt, &p.y);
    return 0;
}

/* ---- MaxUnpool ----------------------------------------------------------- */

int eng_max_unpool_params(const eng_op_ctx_t *c, eng_max_unpool_t *p)
{
    const eng_tensor_t *x = NULL, *idx = NULL, *os = NULL;
    int64_t n_os;
    int rc;
    if ((rc = need_input(c, 0, "X", dt_real, -1, &x)) ||
        (rc = need_input(c, 1, "I", dt_int64, -1, &idx)) ||
        (rc = eng_shapeops_in_ints(c, 2, "output_shape", false, &os, &n_os)))
        return rc;
    int rank = x->shape.rank, ns = rank - 2;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    if (rank < 3)
        return eng_op_err(c, FS_EINVAL, "X %s must have rank >= 3 ([N, C, spatial...])",
                          eng_shape_format(&x->shape, b1, sizeof b1));
    if (!shape_is(c, 1, x->shape.dims, rank))
        return shape_err(c, 1, "I", x->shape.dims, rank);
    if (!eng_node_attr(c->node, "kernel_shape"))
        return eng_op_err(c, FS_EINVAL, "attribute kernel_shape is missing");
    int64_t k[ENG_MAX_RANK], s[ENG_MAX_RANK], pads[2 * ENG_MAX_RANK] = {0};
    for (int d = 0; d < ns; d++)
        s[d] = 1;
    if ((rc = read_ints(c, "kernel_shape", ns, 1, k)) || (rc = read_ints(c, "strides", ns, 1, s)) ||
        (rc = read_ints(c, "pads", 2 * ns, 0, pads)))
        return rc;
    p->rank = rank;
    p->inferred[0] = x->shape.dims[0];
    p->inferred[1] = x->shape.dims[1];
    for (int d = 0; d < ns; d++) {
        int64_t in = x->shape.dims[2 + d];
        int64_t v = eng_dim_add(eng_dim_mul(in > 0 ? in - 1 : 0, s[d]), k[d]) - pads[d] -
                    pads[ns + d];
        if (in < 1 || v < 1 || v > ENG_NUMEL_MAX)
            return eng_op_err(c, FS_EINVAL, "spatial dim %d: the unpooled size (%lld - 1) * %lld "
                              "+ %lld - pads would be %lld", d, (long long)in, (long long)s[d],
                              (long long)k[d], (long long)v);
        p->inferred[2 + d] = v;
    }
    p->y.rank = rank;
    p->numel_inferred = 1;
    for (int d = 0; d < rank; d++) {
        p->numel_inferred = eng_dim_mul(p->numel_inferred, p->inferred[d]);
        p->y.dims[d] = p->inferred[d];
    }
    if (!os)
        return 0;
    eng_shape_t inf = p->y;
    if (n_os != rank)
        return eng_op_err(c, FS_EINVAL, "output_shape has %lld values, expected %d",
                          (long long)n_os, rank);
    for (int d = 0; d < rank; d++)
        p->y.dims[d] = eng_tensor_get_i64(os, d);
    for (int d = 0; d < rank; d++)
        if (p->y.dims[d] < inf.dims[d] || p->y.dims[d] > ENG_NUMEL_MAX || (d < 2 && p->y.dims[d] != inf.dims[d]))
            return eng_op_err(c, FS_EINVAL, "output_shape %s must keep N and C and hold the "
                              "unpooled shape %s", eng_shape_format(&p->y, b1, sizeof b1),
                              eng_shape_format(&inf, b2, sizeof b2));
    return 0;
}

static int max_unpool_infer(eng_op_ctx_t *c)
{
    eng_max_unpool_t p;
    int rc = eng_max_unpool_params(c, &p);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &p.y);
    return 0;
}

/* ---- DeformConv ---------------------------------------------------------- */

int eng_deform_conv_params(const eng_op_ctx_t *c, eng_deform_conv_t *p)
{
    const eng_tensor_t *x = NULL, *w = NULL, *off = NULL;
    int rc;
    if ((rc = need_input(c, 0, "X", dt_real, -1, &x)) ||
        (rc = need_input(c, 1, "W", dt_real, -1, &w)) ||
        (rc = need_input(c, 2, "offset", dt_real, -1, &off)) ||
        (rc = eng_nn_geom(c, ENG_NN_CONV, &p->g)))
        return rc;
    const eng_nn_geom_t *g = &p->g;
    p->dt = x->dtype;
    for (int i = 1; i < 5; i++) {
        const eng_tensor_t *t = eng_ctx_in(c, i);
        if (t && t->dtype != p->dt)
            return eng_op_err(c, FS_EINVAL, "input %d has dtype %s, X has %s", i,
                              eng_dtype_name(t->dtype), eng_dtype_name(p->dt));
    }
    p->offset_group = eng_attr_i(c->node, "offset_group", 1);
    if (p->offset_group < 1 || g->in_channels % p->offset_group != 0)
        return eng_op_err(c, FS_EINVAL, "offset_group %lld must be >= 1 and divide the %lld "
                          "input channels", (long long)p->offset_group,
                          (long long)g->in_channels);
    int ns = g->n_spatial, base = ENG_SP_DIMS - ns;
    int64_t k_size = eng_nn_prod(g->kernel);
    int64_t want[ENG_MAX_RANK] = {g->batch, eng_dim_mul(eng_dim_mul(p->offset_group, k_size), ns)};
    for (int d = 0; d < ns; d++)
        want[2 + d] = g->out[base + d];
    if (!shape_is(c, 2, want, ns + 2))
        return shape_err(c, 2, "offset", want, ns + 2);
    p->has_b = eng_ctx_in(c, 3) != NULL;
    p->has_mask = eng_ctx_in(c, 4) != NULL;
    int64_t want_b[1] = {g->out_channels};
    if (p->has_b && !shape_is(c, 3, want_b, 1))
        return shape_err(c, 3, "B", want_b, 1);
    want[1] = eng_dim_mul(p->offset_group, k_size);
    if (p->has_mask && !shape_is(c, 4, want, ns + 2))
        return shape_err(c, 4, "mask", want, ns + 2);
    return 0;
}

static int deform_conv_infer(eng_op_ctx_t *c)
{
    eng_deform_conv_t p;
    int rc = eng_deform_conv_params(c, &p);
    if (rc)
        return rc;
    const eng_nn_geom_t *g = &p.g;
    eng_shape_t y = {.rank = g->n_spatial + 2, .dims = {g->batch, g->out_channels}};
    for (int d = 0; d < g->n_spatial; d++)
        y.dims[2 + d] = g->out[ENG_SP_DIMS - g->n_spatial + d];
    eng_ctx_out_set(c, 0, p.dt, &y);
    return 0;
}

ENG_OP_DEF(GridSample, grid_sample_check, grid_sample_infer, -1);
ENG_OP_DEF(AffineGrid, NULL, affine_grid_infer, -1);
ENG_OP_DEF(RoiAlign, roi_align_check, roi_align_infer, -1);
ENG_OP_DEF(MaxRoiPool, NULL, max_roi_pool_infer, -1);
ENG_OP_DEF(Col2Im, NULL, col2im_infer, -1);
ENG_OP_DEF(MaxUnpool, NULL, max_unpool_infer, -1);
ENG_OP_DEF(DeformConv, NULL, deform_conv_infer, -1);
