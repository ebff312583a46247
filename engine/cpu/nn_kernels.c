/* nn_kernels.c -- CPU kernels of the nn ops.
 *
 * Conv is im2col + sgemm: for each image and group, the input windows are
 * copied into a column matrix col [C/group * K, OUT] (K kernel taps, OUT
 * output positions) in the scratch buffer, and Y_g = W_g [M/group, C/group
 * * K] x col. A 1x1 kernel with stride 1 and no padding needs no copy: X is
 * already the column matrix. ConvTranspose runs the same map backwards:
 * col [M/group * K, IN] = W_g^T x X_g, then col2im adds each column entry
 * into the output pixel it came from. A depthwise Conv (one input and one
 * output channel per group) sums directly instead: its GEMM would have one
 * row, and im2col would copy the input K times for it. Pools and
 * normalisations are plain
 * loops over the normalised 3-D geometry of nn_impl.h. Statistics are
 * accumulated in double. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/nn_impl.h"

/* Fails with FS_ENOTSUP when a GEMM dimension does not fit OpenBLAS's int. */
static int check_blas_dims(const eng_op_ctx_t *c, int64_t a, int64_t b, int64_t k)
{
    if (a > INT_MAX || b > INT_MAX || k > INT_MAX)
        return eng_op_err(c, FS_ENOTSUP, "GEMM dimensions %lld x %lld x %lld exceed the BLAS "
                          "int range", (long long)a, (long long)b, (long long)k);
    return 0;
}

/* The taps of the window at output position o along dim i that land in
 * [lo, hi) of the image (lo = 0, hi = in: the taps that read X). */
typedef struct window {
    int64_t start;     /* image position of tap 0 */
    int64_t k_begin;   /* first tap with position >= lo */
    int64_t k_end;     /* one past the last tap with position < hi */
} window_t;

static window_t window_at(const eng_nn_geom_t *g, int i, int64_t o, int64_t lo, int64_t hi)
{
    window_t w = {o * g->stride[i] - g->pad_begin[i], 0, g->kernel[i]};
    int64_t d = g->dilation[i];
    while (w.k_begin < w.k_end && w.start + w.k_begin * d < lo)
        w.k_begin++;
    while (w.k_end > w.k_begin && w.start + (w.k_end - 1) * d >= hi)
        w.k_end--;
    return w;
}

/* Copies the windows of `channels` image planes (dims img) into col [channels
 * * K, prod(grid)]: row (c, kd, kh, kw), column the grid position whose
 * window reads that tap; taps in the padding read 0. Cannot fail. */
static void im2col(const float *img, int64_t channels, const int64_t img_dims[ENG_NN_DIMS],
                   const int64_t grid[ENG_NN_DIMS], const eng_nn_geom_t *g, float *col)
{
    int64_t img_sz = eng_nn_prod(img_dims), grid_sz = eng_nn_prod(grid);
    const int64_t *k = g->kernel, *s = g->stride, *d = g->dilation, *p = g->pad_begin;
    for (int64_t ch = 0; ch < channels; ch++)
        for (int64_t kd = 0; kd < k[0]; kd++)
            for (int64_t kh = 0; kh < k[1]; kh++)
                for (int64_t kw = 0; kw < k[2]; kw++) {
                    float *dst = col;
                    col += grid_sz;
                    for (int64_t od = 0; od < grid[0]; od++) {
                        int64_t id = od * s[0] - p[0] + kd * d[0];
                        for (int64_t oh = 0; oh < grid[1]; oh++, dst += grid[2]) {
                            int64_t ih = oh * s[1] - p[1] + kh * d[1];
                            if (id < 0 || id >= img_dims[0] || ih < 0 || ih >= img_dims[1]) {
                                memset(dst, 0, (size_t)grid[2] * sizeof *dst);
                                continue;
                            }
                            const float *src = img + ch * img_sz + (id * img_dims[1] + ih) * img_dims[2];
                            for (int64_t ow = 0; ow < grid[2]; ow++) {
                                int64_t iw = ow * s[2] - p[2] + kw * d[2];
                                dst[ow] = iw >= 0 && iw < img_dims[2] ? src[iw] : 0.0f;
                            }
                        }
                    }
                }
}

/* The reverse of im2col: adds every col entry into the image pixel its
 * (row, column) maps to; entries that map into the padding are dropped.
 * Cannot fail. */
static void col2im(const float *col, int64_t channels, const int64_t img_dims[ENG_NN_DIMS],
                   const int64_t grid[ENG_NN_DIMS], const eng_nn_geom_t *g, float *img)
{
    int64_t img_sz = eng_nn_prod(img_dims), grid_sz = eng_nn_prod(grid);
    const int64_t *k = g->kernel, *s = g->stride, *d = g->dilation, *p = g->pad_begin;
    for (int64_t ch = 0; ch < channels; ch++)
        for (int64_t kd = 0; kd < k[0]; kd++)
            for (int64_t kh = 0; kh < k[1]; kh++)
                for (int64_t kw = 0; kw < k[2]; kw++) {
                    const float *src = col;
                    col += grid_sz;
                    for (int64_t od = 0; od < grid[0]; od++) {
                        int64_t id = od * s[0] - p[0] + kd * d[0];
                        for (int64_t oh = 0; oh < grid[1]; oh++, src += grid[2]) {
                            int64_t ih = oh * s[1] - p[1] + kh * d[1];
                            if (id < 0 || id >= img_dims[0] || ih < 0 || ih >= img_dims[1])
                                continue;
                            float *dst = img + ch * img_sz + (id * img_dims[1] + ih) * img_dims[2];
                            for (int64_t ow = 0; ow < grid[2]; ow++) {
                                int64_t iw = ow * s[2] - p[2] + kw * d[2];
                                if (iw >= 0 && iw < img_dims[2])
                                    dst[iw] += src[ow];
                            }
                        }
                    }
                }
}

/* The product of s's dims from `from` on. Cannot fail. */
static int64_t dims_from(const eng_shape_t *s, int from)
{
    int64_t n = 1;
    for (int i = from; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* Adds bias[m] to each of the `planes` planes of `plane` floats. */
static void add_bias(float *y, const float *bias, int64_t planes, int64_t plane)
{
    for (int64_t m = 0; m < planes; m++, y += plane)
        for (int64_t i = 0; i < plane; i++)
            y[i] += bias[m];
}

/* Y [m, n] = op(A) x B with A [m, k] (or [k, m] when trans_a) and B [k, n],
 * row-major, packed; safe for empty dims (BLAS rejects a leading dimension
 * of 0). Cannot fail. */
static void gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                 float *y)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        memset(y, 0, (size_t)(m * n) * sizeof *y);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)m, (int)n,
                (int)k, 1.0f, a, (int)(trans_a ? m : k), b, (int)n, 0.0f, y, (int)n);
}

static bool conv_is_pointwise(const eng_nn_geom_t *g)
{
    for (int i = 0; i < ENG_NN_DIMS; i++)
        if (g->kernel[i] != 1 || g->stride[i] != 1 || g->pad_begin[i] != 0 ||
            g->out[i] != g->in[i])
            return false;
    return true;
}

static bool conv_is_depthwise(const eng_nn_geom_t *g)
{
    return g->group > 1 && g->group == g->in_channels && g->group == g->out_channels;
}

/* Depthwise Conv by direct summation over each output pixel's window.
 * Cannot fail. */
static void conv_depthwise(const eng_nn_geom_t *g, const float *x, const float *w,
                           const float *bias, float *y)
{
    int64_t in_sz = eng_nn_prod(g->in), taps = eng_nn_prod(g->kernel);
    const int64_t *k = g->kernel, *d = g->dilation;
    for (int64_t pl = 0; pl < g->batch * g->in_channels; pl++, x += in_sz) {
        int64_t ch = pl % g->in_channels;
        const float *wk = w + ch * taps;
        for (int64_t od = 0; od < g->out[0]; od++) {
            window_t wd = window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                window_t wh = window_at(g, 1, oh, 0, g->in[1]);
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    window_t ww = window_at(g, 2, ow, 0, g->in[2]);
                    float acc = bias ? bias[ch] : 0.0f;
                    for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                        for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                            const float *row = x + ((wd.start + kd * d[0]) * g->in[1] +
                                                    wh.start + kh * d[1]) * g->in[2] + ww.start;
                            const float *wr = wk + (kd * k[1] + kh) * k[2];
                            for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                                acc += wr[kw] * row[kw * d[2]];
                        }
                    *y++ = acc;
                }
            }
        }
    }
}

static size_t conv_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV, &g) != 0 || conv_is_pointwise(&g) || conv_is_depthwise(&g))
        return 0;
    return (size_t)(g.in_channels / g.group * eng_nn_prod(g.kernel) * eng_nn_prod(g.out)) *
           sizeof(float);
}

/* Conv. On error (geometry, BLAS range, scratch too small) Y is untouched. */
static int conv_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_CONV, &g);
    if (rc)
        return rc;
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const eng_tensor_t *b = eng_ctx_in(c, 2);
    float *y = c->outputs[0]->data, *col = c->scratch;
    if (conv_is_depthwise(&g)) {
        conv_depthwise(&g, x, w, b ? b->data : NULL, y);
        return 0;
    }
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    bool pointwise = conv_is_pointwise(&g);
    size_t need = pointwise ? 0 : (size_t)(cg * taps * out_sz) * sizeof(float);
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    if ((rc = check_blas_dims(c, mg, out_sz, cg * taps)))
        return rc;
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t gi = 0; gi < g.group; gi++) {
            const float *xg = x + (n * g.in_channels + gi * cg) * in_sz;
            float *yg = y + (n * g.out_channels + gi * mg) * out_sz;
            if (!pointwise)
                im2col(xg, cg, g.in, g.out, &g, col);
            gemm(false, mg, out_sz, cg * taps, w + gi * mg * cg * taps, pointwise ? xg : col, yg);
            if (b)
                add_bias(yg, (const float *)b->data + gi * mg, mg, out_sz);
        }
    return 0;
}

static size_t conv_transpose_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g) != 0)
        return 0;
    return (size_t)(g.out_channels / g.group * eng_nn_prod(g.kernel) * eng_nn_prod(g.in)) *
           sizeof(float);
}

/* ConvTranspose. On error Y is untouched. */
static int conv_transpose_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g);
    if (rc)
        return rc;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    size_t need = (size_t)(mg * taps * in_sz) * sizeof(float);
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    if ((rc = check_blas_dims(c, mg * taps, in_sz, cg)))
        return rc;
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const eng_tensor_t *b = eng_ctx_in(c, 2);
    float *y = c->outputs[0]->data, *col = c->scratch;
    memset(y, 0, (size_t)(g.batch * g.out_channels * out_sz) * sizeof *y);
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t gi = 0; gi < g.group; gi++) {
            const float *xg = x + (n * g.in_channels + gi * cg) * in_sz;
            float *yg = y + (n * g.out_channels + gi * mg) * out_sz;
            gemm(true, mg * taps, in_sz, cg, w + gi * cg * mg * taps, xg, col);
            col2im(col, mg, g.out, g.in, &g, yg);
            if (b)
                add_bias(yg, (const float *)b->data + gi * mg, mg, out_sz);
        }
    return 0;
}

/* MaxPool (float or uint8) with the optional Indices output (flat indices
 * into X, spatial part in storage_order). On error (geometry) nothing is
 * written. */
static int maxpool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_POOL, &g);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    bool u8 = xt->dtype == ENG_DT_UINT8;
    bool col_major = eng_attr_i(c->node, "storage_order", 0) == 1;
    eng_tensor_t *it = c->n_outputs > 1 ? c->outputs[1] : NULL;
    int64_t *idx = it ? it->data : NULL;
    const float *xf = xt->data;
    const uint8_t *xb = xt->data;
    float *yf = c->outputs[0]->data;
    uint8_t *yb = c->outputs[0]->data;
    int64_t in_sz = eng_nn_prod(g.in), planes = g.batch * g.in_channels;
    const int64_t *d = g.dilation;
    int64_t o = 0;
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t od = 0; od < g.out[0]; od++) {
            window_t wd = window_at(&g, 0, od, 0, g.in[0]);
            for (int64_t oh = 0; oh < g.out[1]; oh++) {
                window_t wh = window_at(&g, 1, oh, 0, g.in[1]);
                for (int64_t ow = 0; ow < g.out[2]; ow++, o++) {
                    window_t ww = window_at(&g, 2, ow, 0, g.in[2]);
                    float best = -INFINITY;
                    int64_t best_at = -1;
                    for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++) {
                        int64_t id = wd.start + kd * d[0];
                        for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                            int64_t ih = wh.start + kh * d[1];
                            int64_t row = (id * g.in[1] + ih) * g.in[2];
                            for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++) {
                                int64_t iw = ww.start + kw * d[2];
                                float v = u8 ? (float)xb[pl * in_sz + row + iw]
                                             : xf[pl * in_sz + row + iw];
                                if (v > best || best_at < 0) {
                                    best = v;
                                    best_at = col_major ? id + ih * g.in[0] + iw * g.in[0] * g.in[1]
                                                        : row + iw;
                                }
                            }
                        }
                    }
                    if (u8)
                        yb[o] = best_at < 0 ? 0 : (uint8_t)best;
                    else
                        yf[o] = best;
                    if (idx)
                        idx[o] = best_at < 0 ? -1 : pl * in_sz + best_at;
                }
            }
        }
    return 0;
}

static int64_t taps_between(const eng_nn_geom_t *g, int i, int64_t o, int64_t lo, int64_t hi)
{
    window_t w = window_at(g, i, o, lo, hi);
    return w.k_end - w.k_begin;
}

/* AveragePool. On error (geometry) Y is untouched. */
static int avgpool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_POOL, &g);
    if (rc)
        return rc;
    bool include_pad = eng_attr_i(c->node, "count_include_pad", 0) != 0;
    const float *x = c->inputs[0]->data;
    float *y = c->outputs[0]->data;
    int64_t in_sz = eng_nn_prod(g.in), planes = g.batch * g.in_channels;
    const int64_t *d = g.dilation;
    for (int64_t pl = 0; pl < planes; pl++, x += in_sz)
        for (int64_t od = 0; od < g.out[0]; od++) {
            window_t wd = window_at(&g, 0, od, 0, g.in[0]);
            for (int64_t oh = 0; oh < g.out[1]; oh++) {
                window_t wh = window_at(&g, 1, oh, 0, g.in[1]);
                for (int64_t ow = 0; ow < g.out[2]; ow++) {
                    window_t ww = window_at(&g, 2, ow, 0, g.in[2]);
                    double sum = 0;
                    for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                        for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                            const float *row = x + ((wd.start + kd * d[0]) * g.in[1] +
                                                    wh.start + kh * d[1]) * g.in[2];
                            for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                                sum += row[ww.start + kw * d[2]];
                        }
                    /* With count_include_pad, taps in the padding count but
                     * taps beyond it (ceil_mode's overhang) do not. */
                    int64_t count = (wd.k_end - wd.k_begin) * (wh.k_end - wh.k_begin) *
                                    (ww.k_end - ww.k_begin);
                    if (include_pad) {
                        count = 1;
                        for (int i = 0; i < ENG_NN_DIMS; i++)
                            count *= taps_between(&g, i, i == 0 ? od : i == 1 ? oh : ow,
                                                  -g.pad_begin[i], g.in[i] + g.pad_end[i]);
                    }
                    *y++ = count > 0 ? (float)(sum / (double)count) : 0.0f;
                }
            }
        }
    return 0;
}

/* GlobalAveragePool / GlobalMaxPool, accumulating in double. Cannot fail. */
static int global_pool_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    bool max = strcmp(c->node->op_type, "GlobalMaxPool") == 0;
    int64_t planes = xt->shape.dims[0] * xt->shape.dims[1], plane = dims_from(&xt->shape, 2);
    const float *x = xt->data;
    float *y = c->outputs[0]->data;
    for (int64_t p = 0; p < planes; p++, x += plane) {
        double acc = max ? -INFINITY : 0.0;
        for (int64_t i = 0; i < plane; i++)
            acc = max ? (x[i] > acc ? x[i] : acc) : acc + x[i];
        y[p] = (float)(max ? acc : acc / (double)plane);
    }
    return 0;
}

/* BatchNormalization in inference mode. Y may alias X (inplace_input 0):
 * each element is read before it is written. Cannot fail. */
static int batchnorm_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    const float *scale = c->inputs[1]->data, *bias = c->inputs[2]->data;
    const float *mean = c->inputs[3]->data, *var = c->inputs[4]->data;
    float eps = eng_attr_f(c->node, "epsilon", 1e-5f);
    int64_t n = xt->shape.dims[0], ch = xt->shape.dims[1];
    int64_t plane = dims_from(&xt->shape, 2);
    const float *x = xt->data;
    float *y = c->outputs[0]->data;
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < ch; k++) {
            float mul = scale[k] / sqrtf(var[k] + eps), add = bias[k] - mean[k] * mul;
            for (int64_t i = 0; i < plane; i++)
                y[i] = x[i] * mul + add;
            x += plane;
            y += plane;
        }
    return 0;
}

/* Mean and 1/sqrt(variance + eps) of n floats, in double. */
static void moments(const float *x, int64_t n, double eps, double *mean, double *inv_std)
{
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    double m = n ? sum / (double)n : 0;
    for (int64_t i = 0; i < n; i++)
        sq += (x[i] - m) * (x[i] - m);
    *mean = m;
    *inv_std = 1.0 / sqrt((n ? sq / (double)n : 0) + eps);
}

/* InstanceNormalization; Y may alias X (each plane's moments are taken
 * before it is written). Cannot fail. */
static int instancenorm_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    const float *scale = c->inputs[1]->data, *bias = c->inputs[2]->data;
    double eps = eng_attr_f(c->node, "epsilon", 1e-5f);
    int64_t n = xt->shape.dims[0], ch = xt->shape.dims[1];
    int64_t plane = dims_from(&xt->shape, 2);
    const float *x = xt->data;
    float *y = c->outputs[0]->data;
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < ch; k++) {
            double mean, inv_std;
            moments(x, plane, eps, &mean, &inv_std);
            double mul = scale[k] * inv_std;
            for (int64_t i = 0; i < plane; i++)
                y[i] = (float)((x[i] - mean) * mul + bias[k]);
            x += plane;
            y += plane;
        }
    return 0;
}

/* Writes parameter p broadcast to X's dims from `axis` on: dst[j] for each
 * of the prod(dims[axis:]) positions j. Cannot fail (infer checked the
 * shapes). */
static void expand_tail(const eng_tensor_t *p, const eng_shape_t *x, int axis, float *dst)
{
    int tail = x->rank - axis;
    int64_t pstride[ENG_MAX_RANK], size = 1;
    for (int i = tail - 1; i >= 0; i--) {
        int pi = p->shape.rank - tail + i;
        int64_t pd = pi >= 0 ? p->shape.dims[pi] : 1;
        pstride[i] = pd == 1 ? 0 : size;
        size *= pd;
    }
    int64_t n = dims_from(x, axis);
    const float *src = p->data;
    for (int64_t j = 0; j < n; j++) {
        int64_t rem = j, at = 0;
        for (int i = tail - 1; i >= 0; i--) {
            at += rem % x->dims[axis + i] * pstride[i];
            rem /= x->dims[axis + i];
        }
        dst[j] = src[at];
    }
}

static int layernorm_axis(const eng_op_ctx_t *c)
{
    int rank = c->inputs[0]->shape.rank;
    int64_t axis = eng_attr_i(c->node, "axis", -1);
    return (int)(axis < 0 ? axis + rank : axis);
}

static size_t layernorm_scratch_bytes(const eng_op_ctx_t *c)
{
    return 2 * (size_t)dims_from(&c->inputs[0]->shape, layernorm_axis(c)) * sizeof(float);
}

/* LayerNormalization with the optional Mean and InvStdDev outputs. Y may
 * alias X: each row's statistics are taken before the row is written. On
 * error (scratch too small) no output is written. */
static int layernorm_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    int axis = layernorm_axis(c);
    size_t need = layernorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    int64_t cols = (int64_t)(need / 2 / sizeof(float));
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    float *scale = c->scratch, *bias = scale + cols;
    expand_tail(c->inputs[1], &xt->shape, axis, scale);
    if (eng_ctx_in(c, 2))
        expand_tail(c->inputs[2], &xt->shape, axis, bias);
    else
        memset(bias, 0, (size_t)cols * sizeof *bias);
    float *mean_out = c->n_outputs > 1 && c->outputs[1] ? c->outputs[1]->data : NULL;
    float *inv_out = c->n_outputs > 2 && c->outputs[2] ? c->outputs[2]->data : NULL;
    double eps = eng_attr_f(c->node, "epsilon", 1e-5f);
    const float *x = xt->data;
    float *y = c->outputs[0]->data;
    for (int64_t r = 0; r < rows; r++, x += cols, y += cols) {
        double mean, inv_std;
        moments(x, cols, eps, &mean, &inv_std);
        for (int64_t j = 0; j < cols; j++)
            y[j] = (float)((x[j] - mean) * inv_std * scale[j] + bias[j]);
        if (mean_out)
            mean_out[r] = (float)mean;
        if (inv_out)
            inv_out[r] = (float)inv_std;
    }
    return 0;
}

/* LRN across channels. Cannot fail. */
static int lrn_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    int64_t size = eng_attr_i(c->node, "size", 1);
    double alpha = eng_attr_f(c->node, "alpha", 1e-4f), beta = eng_attr_f(c->node, "beta", 0.75f);
    double bias = eng_attr_f(c->node, "bias", 1.0f);
    int64_t n = xt->shape.dims[0], ch = xt->shape.dims[1];
    int64_t plane = dims_from(&xt->shape, 2);
    int64_t before = (size - 1) / 2, after = size - 1 - before;
    const float *x = xt->data;
    float *y = c->outputs[0]->data;
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < ch; k++) {
            int64_t lo = k - before < 0 ? 0 : k - before;
            int64_t hi = k + after >= ch ? ch - 1 : k + after;
            const float *xb = x + b * ch * plane;
            float *yk = y + (b * ch + k) * plane;
            for (int64_t i = 0; i < plane; i++) {
                double sq = 0;
                for (int64_t j = lo; j <= hi; j++)
                    sq += (double)xb[j * plane + i] * xb[j * plane + i];
                yk[i] = (float)(xb[k * plane + i] / pow(bias + alpha / (double)size * sq, beta));
            }
        }
    return 0;
}

static const eng_cpu_kernel_t k_conv = {"Conv", conv_run, conv_scratch_bytes};
static const eng_cpu_kernel_t k_conv_transpose = {"ConvTranspose", conv_transpose_run,
                                                  conv_transpose_scratch_bytes};
static const eng_cpu_kernel_t k_average_pool = {"AveragePool", avgpool_run, NULL};
static const eng_cpu_kernel_t k_max_pool = {"MaxPool", maxpool_run, NULL};
static const eng_cpu_kernel_t k_global_average_pool = {"GlobalAveragePool", global_pool_run,
                                                       NULL};
static const eng_cpu_kernel_t k_global_max_pool = {"GlobalMaxPool", global_pool_run, NULL};
static const eng_cpu_kernel_t k_batchnorm = {"BatchNormalization", batchnorm_run, NULL};
static const eng_cpu_kernel_t k_instancenorm = {"InstanceNormalization", instancenorm_run, NULL};
static const eng_cpu_kernel_t k_layernorm = {"LayerNormalization", layernorm_run,
                                             layernorm_scratch_bytes};
static const eng_cpu_kernel_t k_lrn = {"LRN", lrn_run, NULL};

const eng_cpu_kernel_t *const eng_cpu_nn[] = {
    &k_conv, &k_conv_transpose, &k_average_pool, &k_max_pool, &k_global_average_pool,
    &k_global_max_pool, &k_batchnorm, &k_instancenorm, &k_layernorm, &k_lrn, NULL,
};
