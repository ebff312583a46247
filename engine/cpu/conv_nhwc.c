/* conv_nhwc.c -- the CPU's channels-last Conv (graph.h: channels_last, set
 * by engine/layout.c): X [N, spatial..., C], W [M, k..., C/group], Y
 * [N, out..., M], with a fused residual and ReLU (conv_residual,
 * conv_relu).
 *
 * Algorithm: with channels innermost, every output position of the whole
 * batch is one row of a single GEMM, Y [P, M] (P = N x out positions).
 * A pointwise Conv (1x1, stride 1, no padding) multiplies X [P, C] in
 * place: Y_g = X_g W_g^T with X_g the group's C/group columns (lda C).
 * Any other Conv copies a chunk of rows' windows into a column matrix col
 * [rows, group, taps, C/group] in the scratch (im2col; each tap's channels
 * a contiguous copy, the padding zeros) and multiplies col_g W_g^T, where
 * W_g's rows [taps, C/group] match col_g's. Y starts as the bias plus the
 * residual and each GEMM accumulates onto it (engine/cpu/gemm.h: the
 * start value, then one fma per k in order), then the ReLU. Chunks of
 * rows keep the column matrix near NHWC_COL_CHUNK_BYTES.
 *
 * A depthwise Conv (one input and one output channel per group) sums
 * directly instead, position by position with the channels innermost: the
 * bias, each tap inside X in (kd, kh, kw) order (as the NCHW kernel sums
 * them), then the residual and the ReLU.
 *
 * Threads: im2col and the start/ReLU passes split over rows, the GEMMs
 * over their output; each element's arithmetic is the same whatever the
 * thread count or chunk, so the results are too. Float16/bfloat16 run
 * through this float code (engine/cpu/through_float.h), rounded once. */
#include <string.h>

#include "engine/cpu/conv_impl.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/parallel.h"
#include "engine/ops/nn_impl.h"

/* The column matrix's target size for one chunk of rows. */
#define NHWC_COL_CHUNK_BYTES ((size_t)8 << 20)

/* One chunk's operands for the row passes. */
typedef struct nhwc_job {
    const eng_nn_geom_t *g;
    const float *x, *w, *bias, *res;  /* w: a depthwise Conv's [C, taps] */
    float *y, *col;
    int64_t row0;        /* the chunk's first output row */
    bool relu;
} nhwc_job_t;

/* im2col of rows [begin, end) of the chunk (row r is output row row0 + r).
 * Cannot fail. */
static void nhwc_im2col_rows(void *arg, int64_t begin, int64_t end)
{
    const nhwc_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    int64_t cin = g->in_channels, cg = cin / g->group, taps = eng_nn_prod(g->kernel);
    int64_t out_sz = eng_nn_prod(g->out), in_sz = eng_nn_prod(g->in), kdim = taps * cin;
    const int64_t *k = g->kernel, *s = g->stride, *d = g->dilation, *p = g->pad_begin;
    for (int64_t r = begin; r < end; r++) {
        int64_t row = j->row0 + r, n = row / out_sz, q = row % out_sz;
        int64_t o[ENG_NN_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1],
                                  q % g->out[2]};
        float *dst = j->col + r * kdim;
        const float *img = j->x + n * in_sz * cin;
        int64_t t = 0;
        for (int64_t kd = 0; kd < k[0]; kd++)
            for (int64_t kh = 0; kh < k[1]; kh++)
                for (int64_t kw = 0; kw < k[2]; kw++, t++) {
                    int64_t at[ENG_NN_DIMS] = {o[0] * s[0] - p[0] + kd * d[0],
                                               o[1] * s[1] - p[1] + kh * d[1],
                                               o[2] * s[2] - p[2] + kw * d[2]};
                    bool inside = true;
                    for (int i = 0; i < ENG_NN_DIMS; i++)
                        inside = inside && at[i] >= 0 && at[i] < g->in[i];
                    const float *src =
                        inside ? img + ((at[0] * g->in[1] + at[1]) * g->in[2] + at[2]) * cin
                               : NULL;
                    for (int64_t gi = 0; gi < g->group; gi++) {
                        float *dg = dst + gi * taps * cg + t * cg;
                        if (src)
                            memcpy(dg, src + gi * cg, (size_t)cg * sizeof *dg);
                        else
                            memset(dg, 0, (size_t)cg * sizeof *dg);
                    }
                }
    }
}

/* Y's rows [begin, end) of the chunk start as bias + residual (either may
 * be absent). Cannot fail. */
static void nhwc_start_rows(void *arg, int64_t begin, int64_t end)
{
    const nhwc_job_t *j = arg;
    int64_t m = j->g->out_channels;
    for (int64_t r = begin; r < end; r++) {
        float *y = j->y + (j->row0 + r) * m;
        const float *res = j->res ? j->res + (j->row0 + r) * m : NULL;
        for (int64_t c = 0; c < m; c++)
            y[c] = (j->bias ? j->bias[c] : 0.0f) + (res ? res[c] : 0.0f);
    }
}

/* max(0, y) over the chunk's rows [begin, end) (a NaN stays NaN). Cannot
 * fail. */
static void nhwc_relu_rows(void *arg, int64_t begin, int64_t end)
{
    const nhwc_job_t *j = arg;
    int64_t m = j->g->out_channels;
    float *y = j->y + (j->row0 + begin) * m;
    for (int64_t i = 0; i < (end - begin) * m; i++)
        y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

/* Rows per chunk: all of them for a pointwise Conv (no column matrix),
 * else as many as NHWC_COL_CHUNK_BYTES holds, at least one. */
static int64_t nhwc_chunk_rows(const eng_nn_geom_t *g, int64_t rows)
{
    if (eng_nn_conv_is_pointwise(g))
        return rows;
    size_t row_bytes = (size_t)(eng_nn_prod(g->kernel) * g->in_channels) * sizeof(float);
    int64_t n = row_bytes ? (int64_t)(NHWC_COL_CHUNK_BYTES / row_bytes) : rows;
    return n < 1 ? 1 : n > rows ? rows : n;
}

/* Depthwise rows [begin, end) of the whole output (see the file header).
 * W is [C, taps]. Cannot fail. */
static void nhwc_depthwise_rows(void *arg, int64_t begin, int64_t end)
{
    const nhwc_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    const float *w = j->w;
    int64_t ch = g->in_channels, in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    int64_t taps = eng_nn_prod(g->kernel);
    const int64_t *d = g->dilation;
    for (int64_t row = begin; row < end; row++) {
        int64_t n = row / out_sz, q = row % out_sz;
        int64_t o[ENG_NN_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1],
                                  q % g->out[2]};
        eng_nn_window_t win[ENG_NN_DIMS];
        for (int i = 0; i < ENG_NN_DIMS; i++)
            win[i] = eng_nn_window_at(g, i, o[i], 0, g->in[i]);
        float *y = j->y + row * ch;
        for (int64_t c = 0; c < ch; c++)
            y[c] = j->bias ? j->bias[c] : 0.0f;
        for (int64_t kd = win[0].k_begin; kd < win[0].k_end; kd++)
            for (int64_t kh = win[1].k_begin; kh < win[1].k_end; kh++)
                for (int64_t kw = win[2].k_begin; kw < win[2].k_end; kw++) {
                    int64_t t = (kd * g->kernel[1] + kh) * g->kernel[2] + kw;
                    const float *x =
                        j->x + (n * in_sz + ((win[0].start + kd * d[0]) * g->in[1] +
                                             win[1].start + kh * d[1]) * g->in[2] +
                                win[2].start + kw * d[2]) * ch;
                    for (int64_t c = 0; c < ch; c++)
                        y[c] += w[c * taps + t] * x[c];
                }
        const float *res = j->res ? j->res + row * ch : NULL;
        for (int64_t c = 0; res && c < ch; c++)
            y[c] += res[c];
        for (int64_t c = 0; j->relu && c < ch; c++)
            y[c] = y[c] < 0.0f ? 0.0f : y[c];
    }
}

size_t eng_cpu_conv_nhwc_scratch_bytes(const eng_nn_geom_t *g)
{
    if (eng_nn_conv_is_depthwise(g))
        return 0;
    int64_t rows = g->batch * eng_nn_prod(g->out), chunk = nhwc_chunk_rows(g, rows);
    int64_t taps = eng_nn_prod(g->kernel), cg = g->in_channels / g->group;
    size_t col = eng_nn_conv_is_pointwise(g)
                     ? 0
                     : (size_t)(chunk * taps * g->in_channels) * sizeof(float);
    return col + eng_gemm_scratch_bytes(chunk, g->out_channels / g->group, taps * cg);
}

int eng_cpu_conv_nhwc_run(eng_op_ctx_t *c, const eng_nn_geom_t *g)
{
    const eng_node_t *node = c->node;
    const float *x = c->inputs[0]->data, *w = c->inputs[1]->data;
    const float *bias = eng_ctx_in_data(c, 2);
    const float *res = node->conv_residual ? eng_ctx_in_data(c, 3) : NULL;
    float *y = c->outputs[0]->data;
    int64_t rows = g->batch * eng_nn_prod(g->out), m = g->out_channels;
    int64_t cg = g->in_channels / g->group, mg = m / g->group, taps = eng_nn_prod(g->kernel);
    int64_t kdim = taps * cg, chunk = nhwc_chunk_rows(g, rows);
    bool pointwise = eng_nn_conv_is_pointwise(g);
    size_t col_bytes = pointwise ? 0 : (size_t)(chunk * taps * g->in_channels) * sizeof(float);
    if (rows == 0 || m == 0)
        return 0;
    if (eng_nn_conv_is_depthwise(g)) {
        nhwc_job_t dj = {.g = g, .x = x, .w = w, .bias = bias, .res = res, .y = y,
                         .relu = node->conv_relu};
        eng_parallel_for(c->n_threads, rows, eng_parallel_grain(m * taps), nhwc_depthwise_rows,
                         &dj);
        return 0;
    }
    if (c->scratch_bytes < col_bytes)
        return eng_op_scratch_err(c, col_bytes);
    bool empty_x = eng_shape_numel(&c->inputs[0]->shape) == 0;
    nhwc_job_t j = {.g = g, .x = x, .bias = bias, .res = res, .y = y, .col = c->scratch,
                    .relu = node->conv_relu};
    size_t gemm_have = c->scratch_bytes - col_bytes;
    void *gemm_scratch = gemm_have ? (char *)c->scratch + col_bytes : NULL;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t cnt = rows - r0 < chunk ? rows - r0 : chunk;
        j.row0 = r0;
        bool start = bias || res;
        if (start)
            eng_parallel_for(c->n_threads, cnt, eng_parallel_grain(m), nhwc_start_rows, &j);
        else if (empty_x || kdim == 0)
            memset(y + r0 * m, 0, (size_t)(cnt * m) * sizeof *y);
        /* An empty X (C == 0 or a zero spatial dim) leaves the start. */
        if (!empty_x && kdim > 0) {
            if (!pointwise)
                eng_parallel_for(c->n_threads, cnt, eng_parallel_grain(taps * g->in_channels),
                                 nhwc_im2col_rows, &j);
            const float *a = pointwise ? x + r0 * g->in_channels : j.col;
            int64_t lda = pointwise ? g->in_channels : taps * g->in_channels;
            for (int64_t gi = 0; gi < g->group; gi++) {
                eng_gemm_t gm = {.m = cnt, .n = mg, .k = kdim,
                                 .a = a + gi * (pointwise ? cg : kdim), .lda = lda,
                                 .b = w + gi * mg * kdim, .ldb = kdim, .trans_b = true,
                                 .c = y + r0 * m + gi * mg, .ldc = m, .alpha = 1.0f,
                                 .accumulate = start};
                eng_gemm_run(&gm, c->n_threads, gemm_scratch, gemm_have);
            }
        }
        if (j.relu)
            eng_parallel_for(c->n_threads, cnt, eng_parallel_grain(m), nhwc_relu_rows, &j);
    }
    return 0;
}
