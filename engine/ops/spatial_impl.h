/* spatial_impl.h -- what the spatial op definitions (engine/ops/spatial.c)
 * and their kernels (engine/cpu/spatial_kernels.c, engine/cuda/spatial.cu)
 * share: each op's parameters, worked out once from the node and its input
 * shapes (the *_params functions, which infer and both kernels call), and
 * the value of one output element as an inline ENG_OPS_HD function, so the
 * CPU and the GPU evaluate the same expression element by element.
 *
 * Every op here computes in double whatever its tensors hold (value_hd.h
 * reads and writes them) and follows ONNX's reference implementation:
 *  - GridSample: each output position reads the grid's normalised
 *    coordinates (last dim in x, y, z order: x indexes X's last dim), maps
 *    them to pixels (align_corners), rounds them (nearest: half to even,
 *    as ONNX's test data does in 3-D too), moves a
 *    coordinate outside the image in (border: clamp, reflection: reflect
 *    at the borders) and interpolates over 1, 2 or 4 taps a dim (nearest,
 *    linear, cubic with A = -0.75); a tap outside the image reads zero
 *    (zeros), the edge (border) or its reflection (reflection).
 *  - AffineGrid: theta [N, 2, 3] / [N, 3, 4] times the base grid's
 *    homogeneous (x, y[, z], 1), the base grid spanning [-1, 1] at pixel
 *    corners (align_corners) or centres.
 *  - RoiAlign: per bin, the average (or ONNX's maximum of weighted corner
 *    values) of bilinear samples on a regular grid inside the bin.
 *  - MaxRoiPool: the maximum over each bin of the ROI rounded to pixels
 *    (half away from zero), an empty bin giving 0.
 *  - Col2Im: each image pixel sums the columns entries that land on it, in
 *    kernel-offset order.
 *  - MaxUnpool: scatters X to the flat positions of I in the inferred
 *    output, which sits at the origin of a larger output_shape.
 *  - DeformConv: Conv whose taps move by offsets (and scale by mask),
 *    sampled bilinearly (multi-linearly) with zero padding.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_SPATIAL_IMPL_H
#define FS_ENGINE_OPS_SPATIAL_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/nn_impl.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/value_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Spatial dims of the image ops, normalised to three as in nn_impl.h
 * (a node with fewer has leading dims of 1). */
#define ENG_SP_DIMS 3

/* floor(x) as an integer, NaN and |x| past 2^50 clamped to -2^50 / 2^50
 * (far outside any image, so such a tap reads padding). Cannot fail. */
ENG_OPS_HD static inline int64_t eng_sp_floor(double x)
{
    const double big = 1125899906842624.0; /* 2^50 */
    if (!(x > -big))
        return -(int64_t)big;
    return x >= big ? (int64_t)big : (int64_t)floor(x);
}

/* x truncated toward zero (C's and numpy's cast), clamped as eng_sp_floor. */
ENG_OPS_HD static inline int64_t eng_sp_trunc(double x)
{
    const double big = 1125899906842624.0;
    if (!(x > -big))
        return -(int64_t)big;
    return x >= big ? (int64_t)big : (int64_t)x;
}

/* ---- GridSample ---------------------------------------------------------- */

typedef enum eng_gs_mode { ENG_GS_NEAREST, ENG_GS_LINEAR, ENG_GS_CUBIC } eng_gs_mode_t;
typedef enum eng_gs_pad { ENG_GS_ZEROS, ENG_GS_BORDER, ENG_GS_REFLECTION } eng_gs_pad_t;

typedef struct eng_grid_sample {
    int mode;                   /* eng_gs_mode_t */
    int padding;                /* eng_gs_pad_t */
    bool align;                 /* align_corners */
    int n_spatial;              /* 1..3 */
    eng_dtype_t x_dt, grid_dt;
    int64_t batch, channels;
    int64_t in[ENG_SP_DIMS];    /* X's spatial dims, normalised */
    int64_t out[ENG_SP_DIMS];   /* the grid's (and Y's), normalised */
    eng_shape_t y;              /* [N, C, out...] */
} eng_grid_sample_t;

/* GridSample's parameters (mode, padding_mode and align_corners as the
 * opset names them, shapes of X and grid). 0, FS_EINVAL (shapes, naming
 * both) or FS_ENOTSUP (a mode, padding mode, dtype or rank not
 * supported). */
int eng_grid_sample_params(const eng_op_ctx_t *c, eng_grid_sample_t *g);

/* x reflected at lo and hi until it lies between them. Cannot fail. */
ENG_OPS_HD static inline double eng_gs_reflect(double x, double lo, double hi)
{
    double rng = hi - lo;
    if (!(rng > 0))
        return lo;
    if (x < lo) {
        double dx = lo - x, n = floor(dx / rng), r = dx - n * rng;
        return fmod(n, 2.0) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi, n = floor(dx / rng), r = dx - n * rng;
        return fmod(n, 2.0) == 0 ? hi - r : lo + r;
    }
    return x;
}

/* The pixel tap i along a dim of len reads under g's padding, or -1 for a
 * zero. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_gs_tap(const eng_grid_sample_t *g, int64_t i, int64_t len)
{
    if (i >= 0 && i < len)
        return i;
    if (g->padding == ENG_GS_ZEROS)
        return -1;
    if (g->padding == ENG_GS_BORDER)
        return i < 0 ? 0 : len - 1;
    double lo = g->align ? 0.0 : -0.5, hi = g->align ? (double)len - 1 : (double)len - 0.5;
    int64_t r = eng_sp_trunc(eng_gs_reflect((double)i, lo, hi));
    return r < 0 ? 0 : r >= len ? len - 1 : r;
}

/* Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2
 * from floor(x), for t = x - floor(x). Cannot fail. */
ENG_OPS_HD static inline void eng_gs_cubic(double t, double w[4])
{
    const double a = -0.75;
    double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
    w[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
    w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    w[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
    w[3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
}

/* Output element i of GridSample (Y [N, C, out...] flat). Cannot fail. */
ENG_OPS_HD static inline double eng_grid_sample_at(const eng_grid_sample_t *g, const void *x,
                                                   const void *grid, int64_t i)
{
    int64_t plane = g->out[0] * g->out[1] * g->out[2];
    int64_t p = i % plane, nc = i / plane, n = nc / g->channels;
    int ns = g->n_spatial, base = ENG_SP_DIMS - ns;
    int64_t tap[ENG_SP_DIMS][4];
    double w[ENG_SP_DIMS][4];
    int nt[ENG_SP_DIMS];
    for (int d = 0; d < ENG_SP_DIMS; d++) {
        nt[d] = 1;
        tap[d][0] = 0;
        w[d][0] = 1.0;
        if (d < base)
            continue;
        int64_t len = g->in[d];
        double v = eng_hd_load(grid, g->grid_dt, (n * plane + p) * ns + (ns - 1 - (d - base)));
        double xc = g->align ? (v + 1) / 2.0 * (double)(len - 1) : ((v + 1) * (double)len - 1) / 2.0;
        if (g->mode == ENG_GS_NEAREST)
            xc = rint(xc);
        double lo = g->align ? 0.0 : -0.5, hi = g->align ? (double)len - 1 : (double)len - 0.5;
        if (xc < lo || xc > hi) {
            if (g->padding == ENG_GS_BORDER)
                xc = xc < 0 ? 0.0 : (double)(len - 1);
            else if (g->padding == ENG_GS_REFLECTION)
                xc = eng_gs_reflect(xc, lo, hi);
        }
        if (g->mode == ENG_GS_NEAREST) {
            tap[d][0] = eng_gs_tap(g, eng_sp_trunc(xc), len);
            continue;
        }
        int64_t x0 = eng_sp_floor(xc);
        double t = xc - (double)x0;
        if (g->mode == ENG_GS_LINEAR) {
            nt[d] = 2;
            w[d][0] = 1 - t;
            w[d][1] = t;
            tap[d][0] = eng_gs_tap(g, x0, len);
            tap[d][1] = eng_gs_tap(g, x0 + 1, len);
        } else {
            nt[d] = 4;
            eng_gs_cubic(t, w[d]);
            for (int k = 0; k < 4; k++)
                tap[d][k] = eng_gs_tap(g, x0 - 1 + k, len);
        }
    }
    int64_t at0 = nc * g->in[0] * g->in[1] * g->in[2];
    double sum = 0;
    for (int a = 0; a < nt[0]; a++) {
        if (tap[0][a] < 0)
            continue;
        for (int b = 0; b < nt[1]; b++) {
            if (tap[1][b] < 0)
                continue;
            int64_t row = at0 + (tap[0][a] * g->in[1] + tap[1][b]) * g->in[2];
            for (int k = 0; k < nt[2]; k++)
                if (tap[2][k] >= 0)
                    sum += w[0][a] * w[1][b] * w[2][k] * eng_hd_load(x, g->x_dt, row + tap[2][k]);
        }
    }
    return sum;
}

/* ---- AffineGrid ---------------------------------------------------------- */

typedef struct eng_affine_grid {
    int nd;                     /* 2 or 3 spatial dims */
    bool align;
    eng_dtype_t dt;
    int64_t sp[ENG_SP_DIMS];    /* D, H, W (D = 1 in 2-D) */
    eng_shape_t y;              /* [N, (D,) H, W, nd] */
} eng_affine_grid_t;

/* AffineGrid's parameters; size must be known. 0, FS_EINVAL (shapes or
 * size values, naming them), FS_ENOTSUP (dtype) or FS_EDYNAMIC (size not
 * known yet). */
int eng_affine_grid_params(const eng_op_ctx_t *c, eng_affine_grid_t *g);

/* Base grid coordinate of pixel i of len. Cannot fail. */
ENG_OPS_HD static inline double eng_affine_base(const eng_affine_grid_t *g, int64_t i, int64_t len)
{
    if (g->align)
        return len > 1 ? -1.0 + (double)i * (2.0 / (double)(len - 1)) : -1.0;
    double step = 2.0 / (double)len;
    return -1.0 + step / 2 + (double)i * step;
}

/* Output element i of AffineGrid. Cannot fail. */
ENG_OPS_HD static inline double eng_affine_grid_at(const eng_affine_grid_t *g, const void *theta,
                                                   int64_t i)
{
    int nd = g->nd;
    int64_t comp = i % nd, row = i / nd;
    int64_t plane = g->sp[0] * g->sp[1] * g->sp[2];
    int64_t p = row % plane, n = row / plane;
    int64_t w = p % g->sp[2], h = p / g->sp[2] % g->sp[1], dd = p / (g->sp[1] * g->sp[2]);
    double b[4] = {eng_affine_base(g, w, g->sp[2]), eng_affine_base(g, h, g->sp[1]), 1.0, 1.0};
    if (nd == 3)
        b[2] = eng_affine_base(g, dd, g->sp[0]);
    int64_t at = (n * nd + comp) * (nd + 1);
    double sum = 0;
    for (int j = 0; j <= nd; j++)
        sum += eng_hd_load(theta, g->dt, at + j) * b[j];
    return sum;
}

/* ---- RoiAlign ------------------------------------------------------------ */

typedef struct eng_roi_align {
    bool max;                   /* mode "max" (else "avg") */
    bool half_pixel;            /* coordinate_transformation_mode */
    int64_t out_h, out_w, sampling;
    double scale;               /* spatial_scale */
    eng_dtype_t x_dt, roi_dt;
    int64_t batch, channels, h, w, n_rois;
    eng_shape_t y;              /* [R, C, out_h, out_w] */
} eng_roi_align_t;

/* RoiAlign's parameters (opset 10 maps coordinates as output_half_pixel).
 * 0, FS_EINVAL (shapes, attributes) or FS_ENOTSUP (mode, dtype). */
int eng_roi_align_params(const eng_op_ctx_t *c, eng_roi_align_t *r);

/* Output element i of RoiAlign; batch is its ROI's batch index, which the
 * caller checked (an index outside X gives 0). Cannot fail. */
ENG_OPS_HD static inline double eng_roi_align_at(const eng_roi_align_t *r, const void *x,
                                                 const void *rois, int64_t batch, int64_t i)
{
    int64_t pw = i % r->out_w, ph = i / r->out_w % r->out_h;
    int64_t ch = i / (r->out_w * r->out_h) % r->channels, n = i / (r->out_w * r->out_h * r->channels);
    if (batch < 0 || batch >= r->batch)
        return 0.0;
    double off = r->half_pixel ? 0.5 : 0.0;
    double sw = eng_hd_load(rois, r->roi_dt, n * 4 + 0) * r->scale - off;
    double sh = eng_hd_load(rois, r->roi_dt, n * 4 + 1) * r->scale - off;
    double rw = eng_hd_load(rois, r->roi_dt, n * 4 + 2) * r->scale - off - sw;
    double rh = eng_hd_load(rois, r->roi_dt, n * 4 + 3) * r->scale - off - sh;
    if (!r->half_pixel) {
        rw = rw > 1.0 ? rw : 1.0;
        rh = rh > 1.0 ? rh : 1.0;
    }
    double bh = rh / (double)r->out_h, bw = rw / (double)r->out_w;
    int64_t gh = r->sampling > 0 ? r->sampling : eng_sp_floor(ceil(rh / (double)r->out_h));
    int64_t gw = r->sampling > 0 ? r->sampling : eng_sp_floor(ceil(rw / (double)r->out_w));
    double count = (double)gh * (double)gw > 1 ? (double)gh * (double)gw : 1.0;
    int64_t plane = (batch * r->channels + ch) * r->h * r->w, H = r->h, W = r->w;
    double acc = 0;
    bool first = true;
    for (int64_t iy = 0; iy < gh; iy++) {
        double y = sh + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
        for (int64_t ix = 0; ix < gw; ix++) {
            double xx = sw + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
            double v = 0, yy = y;
            if (!(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) {
                yy = yy > 0 ? yy : 0.0;
                xx = xx > 0 ? xx : 0.0;
                int64_t yl = eng_sp_trunc(yy), xl = eng_sp_trunc(xx), yh, xh;
                if (yl >= H - 1) {
                    yh = yl = H - 1;
                    yy = (double)yl;
                } else {
                    yh = yl + 1;
                }
                if (xl >= W - 1) {
                    xh = xl = W - 1;
                    xx = (double)xl;
                } else {
                    xh = xl + 1;
                }
                double ly = yy - (double)yl, lx = xx - (double)xl, hy = 1.0 - ly, hx = 1.0 - lx;
                double t1 = hy * hx * eng_hd_load(x, r->x_dt, plane + yl * W + xl);
                double t2 = hy * lx * eng_hd_load(x, r->x_dt, plane + yl * W + xh);
                double t3 = ly * hx * eng_hd_load(x, r->x_dt, plane + yh * W + xl);
                double t4 = ly * lx * eng_hd_load(x, r->x_dt, plane + yh * W + xh);
                if (r->max) {
                    double m12 = t1 > t2 ? t1 : t2, m34 = t3 > t4 ? t3 : t4;
                    v = m12 > m34 ? m12 : m34;
                } else {
                    v = t1 + t2 + t3 + t4;
                }
            }
            if (!r->max)
                acc += v;
            else if (first || v > acc)
                acc = v;
            first = false;
        }
    }
    return r->max ? acc : acc / count;
}

/* ---- MaxRoiPool ---------------------------------------------------------- */

typedef struct eng_max_roi_pool {
    int64_t out_h, out_w;       /* pooled_shape */
    double scale;               /* spatial_scale */
    bool f64;                   /* X is double: the bins are worked out in
                                 * double, else in float, as the reference */
    eng_dtype_t x_dt, roi_dt;
    int64_t batch, channels, h, w, n_rois;
    eng_shape_t y;              /* [R, C, out_h, out_w] */
} eng_max_roi_pool_t;

/* MaxRoiPool's parameters. 0, FS_EINVAL (shapes, pooled_shape) or
 * FS_ENOTSUP (dtype). */
int eng_max_roi_pool_params(const eng_op_ctx_t *c, eng_max_roi_pool_t *m);

/* v rounded to the bins' working precision. */
ENG_OPS_HD static inline double eng_mrp_round(const eng_max_roi_pool_t *m, double v)
{
    return m->f64 ? v : (double)(float)v;
}

/* A bin edge clamped to [0, hi] (a NaN edge, from a NaN ROI, to 0). */
ENG_OPS_HD static inline int64_t eng_mrp_clamp(double v, int64_t hi)
{
    return !(v > 0) ? 0 : v > (double)hi ? hi : (int64_t)v;
}

/* The batch index of ROI n (its first value, truncated). Cannot fail. */
ENG_OPS_HD static inline int64_t eng_max_roi_pool_batch(const eng_max_roi_pool_t *m,
                                                        const void *rois, int64_t n)
{
    return eng_sp_trunc(eng_mrp_round(m, eng_hd_load(rois, m->roi_dt, n * 5)));
}

/* Output element i of MaxRoiPool (0 for an empty bin, or for an ROI whose
 * batch index is outside X, which the CPU refuses first). A NaN in a bin
 * wins, as numpy's max. Cannot fail. */
ENG_OPS_HD static inline double eng_max_roi_pool_at(const eng_max_roi_pool_t *m, const void *x,
                                                    const void *rois, int64_t i)
{
    int64_t pw = i % m->out_w, ph = i / m->out_w % m->out_h;
    int64_t ch = i / (m->out_w * m->out_h) % m->channels, n = i / (m->out_w * m->out_h * m->channels);
    int64_t b = eng_max_roi_pool_batch(m, rois, n);
    if (b < 0 || b >= m->batch)
        return 0.0;
    double sc = eng_mrp_round(m, m->scale), e[4];
    for (int k = 0; k < 4; k++)
        e[k] = round(eng_mrp_round(m, eng_mrp_round(m, eng_hd_load(rois, m->roi_dt, n * 5 + 1 + k)) * sc));
    double rw = e[2] - e[0] + 1 > 1 ? e[2] - e[0] + 1 : 1.0;
    double rh = e[3] - e[1] + 1 > 1 ? e[3] - e[1] + 1 : 1.0;
    double bh = eng_mrp_round(m, eng_mrp_round(m, rh) / (double)m->out_h);
    double bw = eng_mrp_round(m, eng_mrp_round(m, rw) / (double)m->out_w);
    double lim[4] = {floor(eng_mrp_round(m, (double)ph * bh)) + e[1],
                     ceil(eng_mrp_round(m, (double)(ph + 1) * bh)) + e[1],
                     floor(eng_mrp_round(m, (double)pw * bw)) + e[0],
                     ceil(eng_mrp_round(m, (double)(pw + 1) * bw)) + e[0]};
    int64_t hs = eng_mrp_clamp(lim[0], m->h), he = eng_mrp_clamp(lim[1], m->h);
    int64_t ws = eng_mrp_clamp(lim[2], m->w), we = eng_mrp_clamp(lim[3], m->w);
    if (he <= hs || we <= ws)
        return 0.0;
    int64_t plane = (b * m->channels + ch) * m->h * m->w;
    double best = eng_hd_load(x, m->x_dt, plane + hs * m->w + ws);
    for (int64_t y = hs; y < he; y++)
        for (int64_t xx = ws; xx < we; xx++) {
            double v = eng_hd_load(x, m->x_dt, plane + y * m->w + xx);
            if (best == best && (v > best || v != v))
                best = v;
        }
    return best;
}

/* ---- Col2Im -------------------------------------------------------------- */

#define ENG_COL2IM_DIMS (ENG_MAX_RANK - 2)

typedef struct eng_col2im {
    int ns;                                 /* spatial dims */
    eng_dtype_t dt;
    int64_t channels, k, l;                 /* C, prod(block), columns */
    int64_t img[ENG_COL2IM_DIMS], blk[ENG_COL2IM_DIMS], n_blk[ENG_COL2IM_DIMS];
    int64_t stride[ENG_COL2IM_DIMS], dil[ENG_COL2IM_DIMS], pad[ENG_COL2IM_DIMS];
    int64_t img_size;                       /* prod(img) */
    eng_shape_t y;                          /* [N, C, img...] */
} eng_col2im_t;

/* Col2Im's parameters; image_shape and block_shape must be known. 0,
 * FS_EINVAL (shapes, values, attributes), FS_ENOTSUP (dtype, rank) or
 * FS_EDYNAMIC. */
int eng_col2im_params(const eng_op_ctx_t *c, eng_col2im_t *p);

/* Output element i of Col2Im. Cannot fail. */
ENG_OPS_HD static inline double eng_col2im_at(const eng_col2im_t *p, const void *x, int64_t i)
{
    int64_t pos[ENG_COL2IM_DIMS], off[ENG_COL2IM_DIMS];
    int64_t q = i % p->img_size, nc = i / p->img_size;
    for (int d = p->ns - 1; d >= 0; d--) {
        pos[d] = q % p->img[d];
        q /= p->img[d];
    }
    double sum = 0;
    for (int64_t kk = 0; kk < p->k; kk++) {
        int64_t r = kk, col = 0;
        for (int d = p->ns - 1; d >= 0; d--) {
            off[d] = r % p->blk[d];
            r /= p->blk[d];
        }
        bool ok = true;
        for (int d = 0; d < p->ns && ok; d++) {
            int64_t t = pos[d] + p->pad[d] - off[d] * p->dil[d];
            ok = t >= 0 && t % p->stride[d] == 0 && t / p->stride[d] < p->n_blk[d];
            col = col * p->n_blk[d] + (ok ? t / p->stride[d] : 0);
        }
        if (ok)
            sum += eng_hd_load(x, p->dt, (nc * p->k + kk) * p->l + col);
    }
    return sum;
}

/* ---- MaxUnpool ----------------------------------------------------------- */

typedef struct eng_max_unpool {
    int rank;
    int64_t inferred[ENG_MAX_RANK];         /* [N, C, (in - 1) * s - pads + k ...] */
    int64_t numel_inferred;
    eng_shape_t y;                          /* output_shape, or the inferred */
} eng_max_unpool_t;

/* MaxUnpool's parameters; output_shape, when given, must be known and at
 * least the inferred shape in every dim. 0, FS_EINVAL, FS_ENOTSUP (dtype,
 * rank) or FS_EDYNAMIC. */
int eng_max_unpool_params(const eng_op_ctx_t *c, eng_max_unpool_t *p);

/* The output's flat index for index v of I (a flat index into the inferred
 * shape), or -1 when v is outside it. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_max_unpool_target(const eng_max_unpool_t *p, int64_t v)
{
    if (v < 0 || v >= p->numel_inferred)
        return -1;
    int64_t at = 0, stride = 1;
    for (int d = p->rank - 1; d >= 0; d--) {
        at += v % p->inferred[d] * stride;
        v /= p->inferred[d];
        stride *= p->y.dims[d];
    }
    return at;
}

/* ---- DeformConv ---------------------------------------------------------- */

typedef struct eng_deform_conv {
    eng_nn_geom_t g;
    int64_t offset_group;
    eng_dtype_t dt;
    bool has_b, has_mask;
} eng_deform_conv_t;

/* DeformConv's parameters (the Conv geometry, offset and mask shapes). 0,
 * FS_EINVAL (shapes, attributes, naming them) or FS_ENOTSUP (dtype, more
 * than 3 spatial dims). */
int eng_deform_conv_params(const eng_op_ctx_t *c, eng_deform_conv_t *p);

/* X's channel plane `xp` (flat index of its first element) sampled at
 * (pos[0], pos[1], pos[2]) multi-linearly, taps outside reading zero. */
ENG_OPS_HD static inline double eng_deform_sample(const eng_deform_conv_t *p, const void *x,
                                                  int64_t xp, const double pos[ENG_SP_DIMS])
{
    const eng_nn_geom_t *g = &p->g;
    int64_t lo[ENG_SP_DIMS];
    double t[ENG_SP_DIMS];
    for (int d = 0; d < ENG_SP_DIMS; d++) {
        lo[d] = eng_sp_floor(pos[d]);
        t[d] = pos[d] - (double)lo[d];
    }
    double sum = 0;
    for (int a = 0; a < 2; a++) {
        int64_t i0 = lo[0] + a;
        double w0 = a ? t[0] : 1 - t[0];
        if (i0 < 0 || i0 >= g->in[0] || w0 == 0)
            continue;
        for (int b = 0; b < 2; b++) {
            int64_t i1 = lo[1] + b;
            double w1 = b ? t[1] : 1 - t[1];
            if (i1 < 0 || i1 >= g->in[1] || w1 == 0)
                continue;
            for (int k = 0; k < 2; k++) {
                int64_t i2 = lo[2] + k;
                double w2 = k ? t[2] : 1 - t[2];
                if (i2 < 0 || i2 >= g->in[2] || w2 == 0)
                    continue;
                sum += w0 * w1 * w2 *
                       eng_hd_load(x, p->dt, xp + (i0 * g->in[1] + i1) * g->in[2] + i2);
            }
        }
    }
    return sum;
}

/* Output element i of DeformConv (Y [N, M, out...]); b and mask may be
 * NULL when absent. Cannot fail. */
ENG_OPS_HD static inline double eng_deform_conv_at(const eng_deform_conv_t *p, const void *x,
                                                   const void *w, const void *offset,
                                                   const void *b, const void *mask, int64_t i)
{
    const eng_nn_geom_t *g = &p->g;
    int ns = g->n_spatial, base = ENG_SP_DIMS - ns;
    int64_t plane = g->out[0] * g->out[1] * g->out[2], in_plane = g->in[0] * g->in[1] * g->in[2];
    int64_t k_size = g->kernel[0] * g->kernel[1] * g->kernel[2];
    int64_t q = i % plane, m = i / plane % g->out_channels, n = i / (plane * g->out_channels);
    int64_t o[ENG_SP_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1], q % g->out[2]};
    int64_t cpg = g->in_channels / g->group, grp = m / (g->out_channels / g->group);
    int64_t cpog = g->in_channels / p->offset_group;
    double sum = b ? eng_hd_load(b, p->dt, m) : 0.0;
    for (int64_t ci = 0; ci < cpg; ci++) {
        int64_t cin = grp * cpg + ci, og = cin / cpog;
        int64_t xp = (n * g->in_channels + cin) * in_plane;
        for (int64_t kk = 0; kk < k_size; kk++) {
            int64_t k[ENG_SP_DIMS] = {kk / (g->kernel[1] * g->kernel[2]),
                                      kk / g->kernel[2] % g->kernel[1], kk % g->kernel[2]};
            int64_t ok = (n * p->offset_group + og) * k_size + kk;
            double pos[ENG_SP_DIMS];
            for (int d = 0; d < ENG_SP_DIMS; d++) {
                pos[d] = (double)(o[d] * g->stride[d] - g->pad_begin[d] + k[d] * g->dilation[d]);
                if (d >= base)
                    pos[d] += eng_hd_load(offset, p->dt, (ok * ns + (d - base)) * plane + q);
            }
            double v = eng_deform_sample(p, x, xp, pos);
            if (mask)
                v *= eng_hd_load(mask, p->dt, ok * plane + q);
            sum += eng_hd_load(w, p->dt, (m * cpg + ci) * k_size + kk) * v;
        }
    }
    return sum;
}

/* ---- NonMaxSuppression --------------------------------------------------- */

typedef struct eng_nms {
    bool center;                /* center_point_box */
    int64_t batches, classes, boxes;
    int64_t max_per_class;      /* max_output_boxes_per_class (0 when absent) */
    float iou;                  /* iou_threshold (0 when absent) */
    bool has_score;             /* score_threshold given */
    float score;
} eng_nms_t;

/* NonMaxSuppression's parameters; the three optional scalars must be known
 * (on the host). 0, FS_EINVAL (shapes, center_point_box), FS_ENOTSUP
 * (dtype) or FS_EDYNAMIC. */
int eng_nms_params(const eng_op_ctx_t *c, eng_nms_t *p);

/* Runs the selection on host boxes and scores (float): for each batch and
 * class, boxes by score (higher first, ties by index), each kept unless
 * its IoU with a kept one passes iou. Writes (batch, class, box) triples
 * to out when out is not NULL (room for *n_out triples at most) and sets
 * *n_out to their count. 0, or FS_ENOMEM (nothing written). */
int eng_nms_select(const eng_nms_t *p, const float *boxes, const float *scores, int64_t *out,
                   int64_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
