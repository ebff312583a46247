/* norm_kernels.c -- CPU kernels of the normalisations (BatchNormalization,
 * InstanceNormalization, LayerNormalization, RMSNormalization) and LRN:
 * plain loops split over independent planes (Layer- and RMSNormalization:
 * rows); every statistic is
 * taken within one chunk, in double, so results do not depend on the thread
 * count. The four normalisations take float16/bfloat16 through this float
 * code (engine/cpu/through_float.h), which may then also fail for want of
 * scratch or host memory; "cannot fail" below is the float code's. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/through_float.h"
#include "engine/kernels.h"
#include "engine/ops/nn_impl.h"

/* A per-plane op over X [N, C, plane...]: the parameters each of them reads. */
typedef struct plane_job {
    const float *x;
    float *y;
    int64_t channels, plane;
    const float *scale, *bias, *mean, *var; /* BatchNormalization (scale, bias: also
                                             * InstanceNormalization) */
    double eps;
    int64_t size;                       /* LRN */
    double alpha, beta, lrn_bias;       /* LRN */
} plane_job_t;

static void batchnorm_planes(void *arg, int64_t begin, int64_t end)
{
    const plane_job_t *j = arg;
    const float eps = (float)j->eps;
    for (int64_t p = begin; p < end; p++) {
        int64_t k = p % j->channels;
        const float *x = j->x + p * j->plane;
        float *y = j->y + p * j->plane;
        float mul = j->scale[k] / sqrtf(j->var[k] + eps), add = j->bias[k] - j->mean[k] * mul;
        for (int64_t i = 0; i < j->plane; i++)
            y[i] = x[i] * mul + add;
    }
}

/* BatchNormalization in inference mode. Y may alias X (inplace_input 0):
 * each element is read before it is written. Cannot fail. */
static int batchnorm_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *xt = c->inputs[0];
    plane_job_t j = {.x = xt->data, .y = c->outputs[0]->data, .channels = xt->shape.dims[1],
                     .plane = eng_nn_dims_from(&xt->shape, 2), .scale = c->inputs[1]->data,
                     .bias = c->inputs[2]->data, .mean = c->inputs[3]->data,
                     .var = c->inputs[4]->data, .eps = eng_attr_f(c->node, "epsilon", 1e-5f)};
    eng_parallel_for(c->n_threads, xt->shape.dims[0] * j.channels, eng_parallel_grain(j.plane),
                     batchnorm_planes, &j);
    return 0;
}

/* Partial sums per row in moments(): the loops over them vectorise, and
 * they combine in one fixed order. */
#define MOMENTS_LANES 8

/* Mean and 1/sqrt(variance + eps) of n floats, in double, each sum kept
 * in MOMENTS_LANES lanes (element i in lane i % MOMENTS_LANES) added
 * pairwise at the end: the same bits wherever the row sits. Inlined into
 * its callers, so it is compiled for their vector width. Cannot fail. */
static inline __attribute__((always_inline)) void moments(const float *x, int64_t n, double eps,
                                                          double *mean, double *inv_std)
{
    double lane[MOMENTS_LANES] = {0};
    const int64_t n_blk = n & ~(int64_t)(MOMENTS_LANES - 1);
    for (int64_t b = 0; b < n_blk; b += MOMENTS_LANES)
        for (int l = 0; l < MOMENTS_LANES; l++)
            lane[l] += x[b + l];
    for (int64_t i = n_blk; i < n; i++)
        lane[i - n_blk] += x[i];
    for (int w = MOMENTS_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    const double m = n ? lane[0] / (double)n : 0;
    for (int l = 0; l < MOMENTS_LANES; l++)
        lane[l] = 0;
    for (int64_t b = 0; b < n_blk; b += MOMENTS_LANES)
        for (int l = 0; l < MOMENTS_LANES; l++)
            lane[l] += (x[b + l] - m) * (x[b + l] - m);
    for (int64_t i = n_blk; i < n; i++)
        lane[i - n_blk] += (x[i] - m) * (x[i] - m);
    for (int w = MOMENTS_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    *mean = m;
    *inv_std = 1.0 / sqrt((n ? lane[0] / (double)n : 0) + eps);
}

EW_CLONES static void instancenorm_planes(void *arg, int64_t begin, int64_t end)
{
    const plane_job_t *j = arg;
    for (int64_t p = begin; p < end; p++) {
        int64_t k = p % j->channels;
        const float *x = j->x + p * j->plane;
        float *y = j->y + p * j->plane;
        double mean, inv_std;
        moments(x, j->plane, j->eps, &mean, &inv_std);
        double mul = j->scale[k] * inv_std;
        for (int64_t i = 0; i < j->plane; i++)
            y[i] = (float)((x[i] - mean) * mul + j->bias[k]);
    }
}

/* InstanceNormalization; Y may alias X (each plane's moments are taken
 * before it is written, within one chunk). Cannot fail. */
static int instancenorm_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *xt = c->inputs[0];
    plane_job_t j = {.x = xt->data, .y = c->outputs[0]->data, .channels = xt->shape.dims[1],
                     .plane = eng_nn_dims_from(&xt->shape, 2), .scale = c->inputs[1]->data,
                     .bias = c->inputs[2]->data, .eps = eng_attr_f(c->node, "epsilon", 1e-5f)};
    eng_parallel_for(c->n_threads, xt->shape.dims[0] * j.channels,
                     eng_parallel_grain(3 * j.plane), instancenorm_planes, &j);
    return 0;
}

/* Writes parameter p broadcast to X's dims from `axis` on: dst[j] for each
 * of the prod(dims[axis:]) positions j. Cannot fail (infer checked the
 * shapes). */
static void expand_tail(const eng_tensor_t *p, const eng_shape_t *x, int axis, float *dst)
{
    const eng_nn_tail_map_t m = eng_nn_tail_map(p, x, axis);
    const int64_t n = eng_nn_dims_from(x, axis);
    const float *src = p->data;
    for (int64_t j = 0; j < n; j++)
        dst[j] = src[eng_nn_tail_at(&m, j)];
}

static size_t layernorm_scratch_bytes(const eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    return 2 * (size_t)eng_nn_dims_from(&c->inputs[0]->shape, eng_nn_layernorm_axis(c)) *
           sizeof(float);
}

/* LayerNormalization's rows: X, Y, the expanded scale and bias, the
 * optional statistics outputs. */
typedef struct layernorm_job {
    const float *x, *scale, *bias;
    float *y, *mean_out, *inv_out;
    int64_t cols;
    double eps;
} layernorm_job_t;

EW_CLONES static void layernorm_rows(void *arg, int64_t begin, int64_t end)
{
    const layernorm_job_t *j = arg;
    const int64_t cols = j->cols;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * cols;
        float *y = j->y + r * cols;
        double mean, inv_std;
        moments(x, cols, j->eps, &mean, &inv_std);
        for (int64_t k = 0; k < cols; k++)
            y[k] = (float)((x[k] - mean) * inv_std * j->scale[k] + j->bias[k]);
        if (j->mean_out)
            j->mean_out[r] = (float)mean;
        if (j->inv_out)
            j->inv_out[r] = (float)inv_std;
    }
}

/* LayerNormalization with the optional Mean and InvStdDev outputs. Y may
 * alias X: each row's statistics are taken before the row is written, within
 * one chunk. On error (scratch too small) no output is written. */
static int layernorm_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *xt = c->inputs[0];
    int axis = eng_nn_layernorm_axis(c);
    size_t need = layernorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    int64_t cols = (int64_t)(need / 2 / sizeof(float));
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    float *scale = c->scratch, *bias = scale + cols;
    expand_tail(c->inputs[1], &xt->shape, axis, scale);
    if (eng_ctx_in(c, 2))
        expand_tail(c->inputs[2], &xt->shape, axis, bias);
    else
        memset(bias, 0, (size_t)cols * sizeof *bias);
    layernorm_job_t j = {
        .x = xt->data, .scale = scale, .bias = bias, .y = c->outputs[0]->data,
        .mean_out = c->n_outputs > 1 && c->outputs[1] ? c->outputs[1]->data : NULL,
        .inv_out = c->n_outputs > 2 && c->outputs[2] ? c->outputs[2]->data : NULL,
        .cols = cols, .eps = eng_attr_f(c->node, "epsilon", 1e-5f)};
    eng_parallel_for(c->n_threads, rows, eng_parallel_grain(4 * cols), layernorm_rows, &j);
    return 0;
}

/* 1 / sqrt(mean of the squares + eps) of n floats, in double, in
 * MOMENTS_LANES lanes added pairwise at the end (as moments()). Cannot
 * fail. */
static inline __attribute__((always_inline)) double inv_rms(const float *x, int64_t n, double eps)
{
    double lane[MOMENTS_LANES] = {0};
    const int64_t n_blk = n & ~(int64_t)(MOMENTS_LANES - 1);
    for (int64_t b = 0; b < n_blk; b += MOMENTS_LANES)
        for (int l = 0; l < MOMENTS_LANES; l++)
            lane[l] += (double)x[b + l] * x[b + l];
    for (int64_t i = n_blk; i < n; i++)
        lane[i - n_blk] += (double)x[i] * x[i];
    for (int w = MOMENTS_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return 1.0 / sqrt((n ? lane[0] / (double)n : 0) + eps);
}

EW_CLONES static void rmsnorm_rows(void *arg, int64_t begin, int64_t end)
{
    const layernorm_job_t *j = arg;
    const int64_t cols = j->cols;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * cols;
        float *y = j->y + r * cols;
        double inv = inv_rms(x, cols, j->eps);
        for (int64_t k = 0; k < cols; k++)
            y[k] = (float)(x[k] * inv * j->scale[k]);
    }
}

static size_t rmsnorm_scratch_bytes(const eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    return (size_t)eng_nn_dims_from(&c->inputs[0]->shape, eng_nn_layernorm_axis(c)) *
           sizeof(float);
}

/* RMSNormalization: y = x / sqrt(mean(x^2) + epsilon) * scale over the dims
 * from axis on. Y may alias X (each row's statistic is taken before the row
 * is written). On error (scratch too small) Y is not written. */
static int rmsnorm_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *xt = c->inputs[0];
    int axis = eng_nn_layernorm_axis(c);
    size_t need = rmsnorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    int64_t cols = (int64_t)(need / sizeof(float));
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    float *scale = c->scratch;
    expand_tail(c->inputs[1], &xt->shape, axis, scale);
    layernorm_job_t j = {.x = xt->data, .scale = scale, .y = c->outputs[0]->data, .cols = cols,
                         .eps = eng_attr_f(c->node, "epsilon", 1e-5f)};
    eng_parallel_for(c->n_threads, rows, eng_parallel_grain(3 * cols), rmsnorm_rows, &j);
    return 0;
}

/* LRN over the (image, channel) planes [begin, end): each reads its
 * neighbouring channels of X, writes only its own plane of Y. */
static void lrn_planes(void *arg, int64_t begin, int64_t end)
{
    const plane_job_t *j = arg;
    const int64_t ch = j->channels, plane = j->plane, size = j->size;
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    for (int64_t p = begin; p < end; p++) {
        int64_t b = p / ch, k = p % ch;
        int64_t lo = k - before < 0 ? 0 : k - before;
        int64_t hi = k + after >= ch ? ch - 1 : k + after;
        const float *xb = j->x + b * ch * plane;
        float *yk = j->y + p * plane;
        for (int64_t i = 0; i < plane; i++) {
            double sq = 0;
            for (int64_t m = lo; m <= hi; m++)
                sq += (double)xb[m * plane + i] * xb[m * plane + i];
            yk[i] = (float)(xb[k * plane + i] /
                            pow(j->lrn_bias + j->alpha / (double)size * sq, j->beta));
        }
    }
}

/* LRN across channels. Cannot fail. */
static int lrn_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    plane_job_t j = {.x = xt->data,
                     .y = c->outputs[0]->data,
                     .channels = xt->shape.dims[1],
                     .plane = eng_nn_dims_from(&xt->shape, 2),
                     .size = eng_attr_i(c->node, "size", 1),
                     .alpha = eng_attr_f(c->node, "alpha", 1e-4f),
                     .beta = eng_attr_f(c->node, "beta", 0.75f),
                     .lrn_bias = eng_attr_f(c->node, "bias", 1.0f)};
    /* pow dominates: a few tens of operations per element. */
    eng_parallel_for(c->n_threads, xt->shape.dims[0] * j.channels,
                     eng_parallel_grain(j.plane * (j.size + 40)), lrn_planes, &j);
    return 0;
}

const eng_kernel_t eng_cpu_BatchNormalization = {.run = batchnorm_run,
                                                 .scratch_bytes = eng_cpu_scratch_through_float};
const eng_kernel_t eng_cpu_InstanceNormalization = {
    .run = instancenorm_run, .scratch_bytes = eng_cpu_scratch_through_float};
const eng_kernel_t eng_cpu_LayerNormalization = {.run = layernorm_run,
                                                 .scratch_bytes = layernorm_scratch_bytes};
const eng_kernel_t eng_cpu_RMSNormalization = {.run = rmsnorm_run,
                                               .scratch_bytes = rmsnorm_scratch_bytes};
const eng_kernel_t eng_cpu_LRN = {.run = lrn_run};
