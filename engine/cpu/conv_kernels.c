/* conv_kernels.c -- CPU kernels of Conv and ConvTranspose.
 *
 * Conv is im2col + GEMM (flatserve's, engine/cpu/gemm.h: each output
 * element's bits independent of its position, so identical channels give
 * identical outputs): for each image and group, the input windows are
 * copied into a column matrix col [C/group * K, OUT] (K kernel taps, OUT
 * output positions) in the scratch buffer, and Y_g = W_g [M/group, C/group
 * * K] x col. A 1x1 kernel with stride 1 and no padding needs no copy: X is
 * already the column matrix. ConvTranspose runs the same map backwards:
 * col [M/group * K, IN] = W_g^T x X_g, then col2im adds each column entry
 * into the output pixel it came from. A depthwise Conv (one input and one
 * output channel per group) sums directly instead: its GEMM would have one
 * row, and im2col would copy the input K times for it.
 *
 * Threads (ctx->n_threads, through eng_parallel_for): im2col splits over
 * the rows of the column matrix, depthwise Conv over independent output
 * planes; each chunk writes only its own outputs, so results do not depend
 * on the thread count. The GEMMs split their output over the same threads
 * (never the sum over k), with their packed B after the column matrix in
 * the scratch. A Conv whose per-image products are too small for that to
 * pay goes parallel over (image, group) pairs instead, each task
 * single-threaded with its own slice of the scratch (one per thread, sized
 * at plan time from ctx->n_threads); each product is the same GEMM call
 * either way, so the bits are the same too. Float16/bfloat16 Conv and
 * ConvTranspose run through this float code (engine/cpu/through_float.h).
 * A channels-last Conv (graph.h) is engine/cpu/conv_nhwc.c's. */
#include <string.h>

#include "common/error.h"
#include "engine/cpu/conv_impl.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/through_float.h"
#include "engine/kernels.h"
#include "engine/ops/nn_impl.h"

/* One im2col: the image planes, the geometry, the column matrix. */
typedef struct im2col_job {
    const float *img;
    const int64_t *img_dims, *grid;
    const eng_nn_geom_t *g;
    float *col;
} im2col_job_t;

/* Rows [begin, end) of im2col_job's column matrix; row (c, kd, kh, kw) is
 * c * K + (kd * k1 + kh) * k2 + kw. Cannot fail. */
static void im2col_rows(void *arg, int64_t begin, int64_t end)
{
    const im2col_job_t *j = arg;
    const int64_t *img_dims = j->img_dims, *grid = j->grid;
    int64_t img_sz = eng_nn_prod(img_dims), grid_sz = eng_nn_prod(grid);
    const int64_t *k = j->g->kernel, *s = j->g->stride, *d = j->g->dilation, *p = j->g->pad_begin;
    int64_t taps = eng_nn_prod(k);
    for (int64_t r = begin; r < end; r++) {
        int64_t ch = r / taps, t = r % taps;
        int64_t kd = t / (k[1] * k[2]), kh = t / k[2] % k[1], kw = t % k[2];
        float *dst = j->col + r * grid_sz;
        /* Columns [lo, hi) of every output row read the image, the rest
         * the padding: the same for all rows of this tap, so worked out
         * once (the divisions cost more than copying a short row). */
        int64_t off = kw * d[2] - p[2], lo, hi;
        eng_nn_tap_range(off, s[2], img_dims[2], grid[2], &lo, &hi);
        if (hi < lo)
            hi = lo;
        if (lo > grid[2])
            lo = hi = grid[2];
        for (int64_t od = 0; od < grid[0]; od++) {
            int64_t id = od * s[0] - p[0] + kd * d[0];
            for (int64_t oh = 0; oh < grid[1]; oh++, dst += grid[2]) {
                int64_t ih = oh * s[1] - p[1] + kh * d[1];
                if (id < 0 || id >= img_dims[0] || ih < 0 || ih >= img_dims[1]) {
                    memset(dst, 0, (size_t)grid[2] * sizeof *dst);
                    continue;
                }
                const float *src = j->img + ch * img_sz + (id * img_dims[1] + ih) * img_dims[2];
                for (int64_t ow = 0; ow < lo; ow++)
                    dst[ow] = 0.0f;
                if (s[2] == 1)
                    memcpy(dst + lo, src + lo + off, (size_t)(hi - lo) * sizeof *dst);
                else
                    for (int64_t ow = lo; ow < hi; ow++)
                        dst[ow] = src[ow * s[2] + off];
                for (int64_t ow = hi; ow < grid[2]; ow++)
                    dst[ow] = 0.0f;
            }
        }
    }
}

/* Copies the windows of `channels` image planes (dims img) into col [channels
 * * K, prod(grid)]: row (c, kd, kh, kw), column the grid position whose
 * window reads that tap; taps in the padding read 0. Rows go to up to
 * n_threads threads. Cannot fail. */
static void im2col(int n_threads, const float *img, int64_t channels,
                   const int64_t img_dims[ENG_NN_DIMS], const int64_t grid[ENG_NN_DIMS],
                   const eng_nn_geom_t *g, float *col)
{
    im2col_job_t j = {img, img_dims, grid, g, col};
    eng_parallel_for(n_threads, channels * eng_nn_prod(g->kernel),
                     eng_parallel_grain(eng_nn_prod(grid)), im2col_rows, &j);
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

/* Planes of `plane` floats and one bias value for each. */
typedef struct bias_job {
    float *y;
    const float *bias;
    int64_t plane;
} bias_job_t;

static void add_bias_planes(void *arg, int64_t begin, int64_t end)
{
    const bias_job_t *j = arg;
    for (int64_t m = begin; m < end; m++) {
        float *y = j->y + m * j->plane;
        for (int64_t i = 0; i < j->plane; i++)
            y[i] += j->bias[m];
    }
}

/* Adds bias[m] to each of the `planes` planes of `plane` floats, planes
 * split over up to n_threads threads. Cannot fail. */
static void add_bias(int n_threads, float *y, const float *bias, int64_t planes, int64_t plane)
{
    bias_job_t j = {y, bias, plane};
    eng_parallel_for(n_threads, planes, eng_parallel_grain(plane), add_bias_planes, &j);
}

/* The scratch a Conv or ConvTranspose GEMM step wants: the column matrix
 * (`col_floats`), then the GEMM's own for an m x n x k product. */
static size_t gemm_step_scratch_bytes(int64_t col_floats, int64_t m, int64_t n, int64_t k)
{
    return (size_t)col_floats * sizeof(float) + eng_gemm_scratch_bytes(m, n, k);
}

/* Y [m, n] = op(A) x B (+ Y when accumulate) with A [m, k] (or [k, m] when
 * trans_a) and B [k, n], row-major, packed, with up to n_threads threads and
 * the scratch from `scratch_at` bytes on (see eng_gemm_run). Cannot fail. */
static void gemm(const eng_op_ctx_t *c, size_t scratch_at, bool trans_a, int64_t m, int64_t n,
                 int64_t k, const float *a, const float *b, float *y, bool accumulate)
{
    eng_gemm_t g = {.m = m, .n = n, .k = k, .a = a, .lda = trans_a ? m : k, .trans_a = trans_a,
                    .b = b, .ldb = n, .c = y, .ldc = n, .alpha = 1.0f,
                    .accumulate = accumulate};
    size_t have = c->scratch_bytes > scratch_at ? c->scratch_bytes - scratch_at : 0;
    eng_gemm_run(&g, c->n_threads, have ? (char *)c->scratch + scratch_at : NULL, have);
}

EW_CLONES static void fill_bias_planes(void *arg, int64_t begin, int64_t end)
{
    const bias_job_t *j = arg;
    for (int64_t m = begin; m < end; m++) {
        float *y = j->y + m * j->plane;
        const float v = j->bias[m];
        EW_LOOP(j->plane, y[i] = v;);
    }
}

/* Sets each of the `planes` planes of `plane` floats to bias[m], so a GEMM
 * can accumulate onto it: one write pass instead of the GEMM zeroing Y and a
 * second pass adding the bias. Cannot fail. */
static void fill_bias(int n_threads, float *y, const float *bias, int64_t planes, int64_t plane)
{
    bias_job_t j = {y, bias, plane};
    eng_parallel_for(n_threads, planes, eng_parallel_grain(plane), fill_bias_planes, &j);
}

/* Y of a Conv or ConvTranspose whose X is empty (a zero dim; its data may
 * be NULL) while Y is not: every window reads only padding, so each output
 * plane is its bias, or 0. Cannot fail. */
static void empty_input_output(int n_threads, const eng_nn_geom_t *g, const eng_tensor_t *b,
                               float *y)
{
    int64_t out_sz = eng_nn_prod(g->out);
    if (!b) {
        memset(y, 0, (size_t)(g->batch * g->out_channels * out_sz) * sizeof *y);
        return;
    }
    for (int64_t n = 0; n < g->batch; n++)
        fill_bias(n_threads, y + n * g->out_channels * out_sz, b->data, g->out_channels, out_sz);
}

/* A depthwise Conv's operands. */
typedef struct depthwise_job {
    const eng_nn_geom_t *g;
    const float *x, *w, *bias;
    float *y;
} depthwise_job_t;

/* Depthwise Conv for the (image, channel) planes [begin, end), tap by tap:
 * each output row starts at the bias, and every kernel tap adds its weight
 * times a shifted input row, so the innermost loop runs along the output
 * row (contiguous at stride 1, and vectorised). Each output still sums its
 * taps in (kd, kh, kw) order, so the results equal a per-pixel loop's and
 * do not depend on the thread count. Cannot fail. */
EW_CLONES static void conv_depthwise_planes(void *arg, int64_t begin, int64_t end)
{
    const depthwise_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    const float *w = j->w, *bias = j->bias;
    int64_t in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out), taps = eng_nn_prod(g->kernel);
    const int64_t *k = g->kernel, *d = g->dilation;
    int64_t s2 = g->stride[2];
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = j->x + pl * in_sz;
        float *y = j->y + pl * out_sz;
        int64_t ch = pl % g->in_channels;
        const float *wk = w + ch * taps;
        const float b0 = bias ? bias[ch] : 0.0f;
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                float *yr = y + (od * g->out[1] + oh) * g->out[2];
                EW_LOOP(g->out[2], yr[i] = b0;);
                for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                    for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                        const float *xr =
                            x +
                            ((wd.start + kd * d[0]) * g->in[1] + wh.start + kh * d[1]) * g->in[2];
                        const float *wr = wk + (kd * k[1] + kh) * k[2];
                        for (int64_t kw = 0; kw < k[2]; kw++) {
                            int64_t off = kw * d[2] - g->pad_begin[2], lo, hi;
                            eng_nn_tap_range(off, s2, g->in[2], g->out[2], &lo, &hi);
                            const float wv = wr[kw];
                            if (s2 == 1) {
                                float *yo = yr + lo;
                                const float *xo = xr + lo + off;
                                EW_LOOP(hi - lo, yo[i] += wv * xo[i];);
                            } else {
                                for (int64_t ow = lo; ow < hi; ow++)
                                    yr[ow] += wv * xr[ow * s2 + off];
                            }
                        }
                    }
            }
        }
    }
}

/* Depthwise Conv, planes split over up to n_threads threads. Cannot fail. */
static void conv_depthwise(int n_threads, const eng_nn_geom_t *g, const float *x, const float *w,
                           const float *bias, float *y)
{
    depthwise_job_t j = {g, x, w, bias, y};
    eng_parallel_for(n_threads, g->batch * g->in_channels,
                     eng_parallel_grain(eng_nn_prod(g->out) * eng_nn_prod(g->kernel)),
                     conv_depthwise_planes, &j);
}

/* The floats of Conv's column matrix (0 when it needs none). */
static int64_t conv_col_floats(const eng_nn_geom_t *g)
{
    if (eng_nn_conv_is_pointwise(g))
        return 0;
    return g->in_channels / g->group * eng_nn_prod(g->kernel) * eng_nn_prod(g->out);
}

/* An image-parallel Conv (see conv_plan): each task takes whole (image,
 * group) pairs with its own slice of the scratch, slices `slice_bytes`
 * apart, each the column matrix then the GEMM's own. */
typedef struct conv_job {
    const eng_nn_geom_t *g;
    const float *x, *w, *bias;
    float *y;
    char *scratch;
    size_t slice_bytes;
    int64_t n_slices;    /* concurrent tasks: slice s runs pairs [s P / S, (s + 1) P / S) */
} conv_job_t;

/* Below this many multiply-adds per (image, group) product, Conv runs
 * whole images per thread instead of threads inside each product: the GEMM
 * would not split such a product anyway (its chunks hold at least 64 x
 * ENG_PARALLEL_MIN_WORK multiply-adds, and a range of fewer than two chunks
 * runs inline), so the threads sat idle while the images went one by one
 * (measured: the demo CNN at batch 64 took as long at 8 threads as at 1). */
#define CONV_IMAGE_PARALLEL_MAX_WORK (2 * 64 * (int64_t)ENG_PARALLEL_MIN_WORK)

/* Nor when a slice would exceed this, so the scratch stays bounded at
 * n_threads slices (4 MiB is more than a small product's column matrix
 * needs unless its GEMM has very few rows). */
#define CONV_IMAGE_PARALLEL_MAX_SLICE_BYTES ((size_t)4 << 20)

/* The scratch slices' alignment, so slices never share a cache line. */
#define CONV_SLICE_ALIGN 64

/* How conv_run computes a (non-depthwise) Conv: the bytes one (image,
 * group) product needs (column matrix, then GEMM scratch), and whether to
 * run the products image-parallel (`slices` > 0: that many concurrent
 * tasks, each with its own slice of `slice_bytes`) or one after another
 * with every thread inside each (`slices` == 0). Depends only on the
 * geometry and n_threads, so the scratch asked at plan time fits the run.
 * Either way each product is the same eng_gemm_run call (same m, n, k,
 * operands), so the bits do not depend on the path or the thread count. */
typedef struct conv_plan {
    size_t col_bytes, slice_bytes;
    int64_t slices;
} conv_plan_t;

static conv_plan_t conv_plan(const eng_nn_geom_t *g, int n_threads)
{
    int64_t mg = g->out_channels / g->group,
            kdim = g->in_channels / g->group * eng_nn_prod(g->kernel);
    int64_t out_sz = eng_nn_prod(g->out), pairs = g->batch * g->group;
    conv_plan_t cp = {.col_bytes = (size_t)conv_col_floats(g) * sizeof(float)};
    size_t one = gemm_step_scratch_bytes(conv_col_floats(g), mg, out_sz, kdim);
    cp.slice_bytes = (one + CONV_SLICE_ALIGN - 1) / CONV_SLICE_ALIGN * CONV_SLICE_ALIGN;
    bool small = mg * out_sz * kdim < CONV_IMAGE_PARALLEL_MAX_WORK &&
                 cp.slice_bytes <= CONV_IMAGE_PARALLEL_MAX_SLICE_BYTES;
    if (n_threads > 1 && pairs > 1 && small)
        cp.slices = pairs < n_threads ? pairs : n_threads;
    else
        cp.slice_bytes = one;
    return cp;
}

static size_t conv_scratch_bytes(const eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV, &g) != 0)
        return 0;
    if (c->node->channels_last)
        return eng_cpu_conv_nhwc_scratch_bytes(&g);
    if (eng_nn_conv_is_depthwise(&g))
        return 0;
    conv_plan_t cp = conv_plan(&g, c->n_threads);
    /* The slices start at the first aligned byte of the scratch. */
    if (cp.slices && cp.slice_bytes)
        return (size_t)cp.slices * cp.slice_bytes + CONV_SLICE_ALIGN - 1;
    return cp.slices ? 0 : cp.slice_bytes;
}

/* The first CONV_SLICE_ALIGN-aligned byte of `scratch` (borrowed; NULL
 * when there is none or no slice needs any). Cannot fail. */
static char *conv_slices_at(void *scratch, size_t slice_bytes)
{
    if (!scratch || !slice_bytes)
        return NULL;
    uintptr_t at = ((uintptr_t)scratch + CONV_SLICE_ALIGN - 1) & ~(uintptr_t)(CONV_SLICE_ALIGN - 1);
    return (char *)scratch + (at - (uintptr_t)scratch);
}

/* Conv's product for (image, group) pair `pr` (n * group + gi) on one
 * thread, with `slice` (slice_bytes) for its column matrix and GEMM
 * scratch: im2col, the bias, then Y_g (+)= W_g x col. Cannot fail. */
static void conv_pair(const conv_job_t *j, int64_t pr, char *slice)
{
    const eng_nn_geom_t *g = j->g;
    int64_t n = pr / g->group, gi = pr % g->group;
    int64_t cg = g->in_channels / g->group, mg = g->out_channels / g->group;
    int64_t taps = eng_nn_prod(g->kernel), in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    const float *xg = j->x + (n * g->in_channels + gi * cg) * in_sz;
    float *yg = j->y + (n * g->out_channels + gi * mg) * out_sz;
    bool pointwise = eng_nn_conv_is_pointwise(g);
    size_t col_bytes = (size_t)conv_col_floats(g) * sizeof(float);
    float *col = (float *)slice;
    if (!pointwise) {
        im2col_job_t ij = {xg, g->in, g->out, g, col};
        im2col_rows(&ij, 0, cg * taps);
    }
    if (j->bias) {
        bias_job_t bj = {yg, j->bias + gi * mg, out_sz};
        fill_bias_planes(&bj, 0, mg);
    }
    eng_gemm_t gm = {.m = mg, .n = out_sz, .k = cg * taps, .a = j->w + gi * mg * cg * taps,
                     .lda = cg * taps, .b = pointwise ? xg : col, .ldb = out_sz, .c = yg,
                     .ldc = out_sz, .alpha = 1.0f, .accumulate = j->bias != NULL};
    size_t have = j->slice_bytes - col_bytes;
    eng_gemm_run(&gm, 1, have ? slice + col_bytes : NULL, have);
}

/* Slices [begin, end) of an image-parallel Conv: each runs its share of
 * the (image, group) pairs in order. Cannot fail. */
static void conv_slices(void *arg, int64_t begin, int64_t end)
{
    const conv_job_t *j = arg;
    int64_t pairs = j->g->batch * j->g->group;
    for (int64_t s = begin; s < end; s++) {
        char *slice = j->scratch ? j->scratch + (size_t)s * j->slice_bytes : NULL;
        for (int64_t pr = s * pairs / j->n_slices; pr < (s + 1) * pairs / j->n_slices; pr++)
            conv_pair(j, pr, slice);
    }
}

/* Conv. On error (geometry, scratch too small) Y is untouched. */
static int conv_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_CONV, &g);
    if (rc)
        return rc;
    if (c->node->channels_last)
        return eng_cpu_conv_nhwc_run(c, &g);
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const eng_tensor_t *b = eng_ctx_in(c, 2);
    float *y = c->outputs[0]->data, *col = c->scratch;
    if (eng_shape_numel(&c->inputs[0]->shape) == 0) {
        empty_input_output(c->n_threads, &g, b, y);
        return 0;
    }
    if (eng_nn_conv_is_depthwise(&g)) {
        conv_depthwise(c->n_threads, &g, x, w, b ? b->data : NULL, y);
        return 0;
    }
    conv_plan_t cp = conv_plan(&g, c->n_threads);
    char *slices = conv_slices_at(c->scratch, cp.slice_bytes);
    if (cp.slices && cp.slice_bytes) {
        /* As many slices as the scratch holds (a caller that asked for
         * fewer threads gave less): fewer tasks, the same bits. */
        size_t skip = slices ? (size_t)(slices - (char *)c->scratch) : c->scratch_bytes;
        size_t have = c->scratch_bytes > skip ? c->scratch_bytes - skip : 0;
        if ((int64_t)(have / cp.slice_bytes) < cp.slices)
            cp.slices = (int64_t)(have / cp.slice_bytes);
    }
    if (cp.slices > 0) {
        conv_job_t j = {&g, x, w, b ? b->data : NULL, y, slices, cp.slice_bytes, cp.slices};
        eng_parallel_for(c->n_threads, cp.slices, 1, conv_slices, &j);
        return 0;
    }
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    bool pointwise = eng_nn_conv_is_pointwise(&g);
    if (c->scratch_bytes < cp.col_bytes)
        return eng_op_scratch_err(c, cp.col_bytes);
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t gi = 0; gi < g.group; gi++) {
            const float *xg = x + (n * g.in_channels + gi * cg) * in_sz;
            float *yg = y + (n * g.out_channels + gi * mg) * out_sz;
            if (!pointwise)
                im2col(c->n_threads, xg, cg, g.in, g.out, &g, col);
            if (b)
                fill_bias(c->n_threads, yg, (const float *)b->data + gi * mg, mg, out_sz);
            gemm(c, cp.col_bytes, false, mg, out_sz, cg * taps, w + gi * mg * cg * taps,
                 pointwise ? xg : col, yg, b != NULL);
        }
    return 0;
}

static size_t conv_transpose_scratch_bytes(const eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g) != 0)
        return 0;
    int64_t rows = g.out_channels / g.group * eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in);
    return gemm_step_scratch_bytes(rows * in_sz, rows, in_sz, g.in_channels / g.group);
}

/* ConvTranspose. On error Y is untouched. */
static int conv_transpose_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g);
    if (rc)
        return rc;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    size_t col_bytes = (size_t)(mg * taps * in_sz) * sizeof(float);
    if (c->scratch_bytes < col_bytes)
        return eng_op_scratch_err(c, col_bytes);
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const eng_tensor_t *b = eng_ctx_in(c, 2);
    float *y = c->outputs[0]->data, *col = c->scratch;
    if (eng_shape_numel(&c->inputs[0]->shape) == 0) {
        empty_input_output(c->n_threads, &g, b, y);
        return 0;
    }
    memset(y, 0, (size_t)(g.batch * g.out_channels * out_sz) * sizeof *y);
    for (int64_t n = 0; n < g.batch; n++)
        for (int64_t gi = 0; gi < g.group; gi++) {
            const float *xg = x + (n * g.in_channels + gi * cg) * in_sz;
            float *yg = y + (n * g.out_channels + gi * mg) * out_sz;
            gemm(c, col_bytes, true, mg * taps, in_sz, cg, w + gi * cg * mg * taps, xg, col,
                 false);
            col2im(col, mg, g.out, g.in, &g, yg);
            if (b)
                add_bias(c->n_threads, yg, (const float *)b->data + gi * mg, mg, out_sz);
        }
    return 0;
}

const eng_kernel_t eng_cpu_Conv = {.run = conv_run, .scratch_bytes = conv_scratch_bytes};
const eng_kernel_t eng_cpu_ConvTranspose = {.run = conv_transpose_run,
                                            .scratch_bytes = conv_transpose_scratch_bytes};
