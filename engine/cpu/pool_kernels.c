/* pool_kernels.c -- CPU kernels of the pools (MaxPool, AveragePool, LpPool
 * and the global pools): plain loops over the normalised 3-D geometry of
 * engine/ops/nn_impl.h, split over independent output planes (each chunk
 * writes only its own outputs, so results do not depend on the thread
 * count). Averages are accumulated in double. MaxPool, AveragePool and the
 * global pools take float16/bfloat16 through their float code
 * (engine/cpu/through_float.h), which may then also fail for want of
 * scratch or host memory.
 *
 * Channels-last nodes (graph.h: X [N, spatial..., C]) split over output
 * positions instead, each position's channels innermost; every output
 * takes the same taps in the same order as its NCHW counterpart, so the
 * results are identical. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/through_float.h"
#include "engine/kernels.h"
#include "engine/ops/nn_impl.h"

/* A pool's operands: float or uint8 X and Y, MaxPool's optional Indices. */
typedef struct pool_job {
    const eng_nn_geom_t *g;
    const void *x;
    void *y;
    int64_t *idx;       /* MaxPool's Indices, or NULL */
    bool u8;            /* MaxPool: X and Y are uint8 */
    bool col_major;     /* MaxPool: Indices' spatial part in column-major order */
    bool include_pad;   /* AveragePool: count_include_pad */
} pool_job_t;

/* MaxPool over the (image, channel) planes [begin, end). Cannot fail. */
static void maxpool_planes(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    const bool u8 = j->u8, col_major = j->col_major;
    const float *xf = j->x;
    const uint8_t *xb = j->x;
    float *yf = j->y;
    uint8_t *yb = j->y;
    int64_t *idx = j->idx;
    int64_t in_sz = eng_nn_prod(g->in);
    const int64_t *d = g->dilation;
    int64_t o = begin * eng_nn_prod(g->out);
    for (int64_t pl = begin; pl < end; pl++)
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                    eng_nn_window_t ww = eng_nn_window_at(g, 2, ow, 0, g->in[2]);
                    float best = -INFINITY;
                    int64_t best_at = -1;
                    for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++) {
                        int64_t id = wd.start + kd * d[0];
                        for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                            int64_t ih = wh.start + kh * d[1];
                            int64_t row = (id * g->in[1] + ih) * g->in[2];
                            for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++) {
                                int64_t iw = ww.start + kw * d[2];
                                float v = u8 ? (float)xb[pl * in_sz + row + iw]
                                             : xf[pl * in_sz + row + iw];
                                /* A NaN wins and stays, as in numpy and PyTorch. */
                                if (v > best || best_at < 0 || (v != v && best == best)) {
                                    best = v;
                                    best_at = col_major ? id + ih * g->in[0] +
                                                              iw * g->in[0] * g->in[1]
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
}

/* MaxPool (float or uint8) with the optional Indices output (flat indices
 * into X, spatial part in storage_order). On error (geometry) nothing is
 * written. */
/* Kernel columns up to which MaxPool's float rows (below) keep each
 * column's output range in a table; wider kernels go output by output. */
#define MAXPOOL_KW_MAX 16

/* MaxPool of float planes without Indices, tap by tap like the depthwise
 * Conv: each output row starts at -inf and every kernel tap takes the
 * maximum with a shifted input row, the innermost loop running along the
 * output row (vectorised at strides 1 and 2). Same results as
 * maxpool_planes (a NaN wins and stays; a window with no element inside
 * the image gives -inf). The output columns each kernel column reaches
 * are worked out once per chunk: their divisions cost more than the
 * maxima of a short row. Cannot fail. */
EW_CLONES static void maxpool_rows_f32(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    int64_t in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    const int64_t *d = g->dilation;
    const int64_t s2 = g->stride[2], k2 = g->kernel[2];
    int64_t kw_off[MAXPOOL_KW_MAX], kw_lo[MAXPOOL_KW_MAX], kw_hi[MAXPOOL_KW_MAX];
    for (int64_t kw = 0; kw < k2; kw++) {
        kw_off[kw] = kw * d[2] - g->pad_begin[2];
        eng_nn_tap_range(kw_off[kw], s2, g->in[2], g->out[2], &kw_lo[kw], &kw_hi[kw]);
        if (kw_hi[kw] < kw_lo[kw])
            kw_hi[kw] = kw_lo[kw];
    }
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = (const float *)j->x + pl * in_sz;
        float *y = (float *)j->y + pl * out_sz;
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                float *yr = y + (od * g->out[1] + oh) * g->out[2];
                EW_LOOP(g->out[2], yr[i] = -INFINITY;);
                for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                    for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                        const float *xr =
                            x +
                            ((wd.start + kd * d[0]) * g->in[1] + wh.start + kh * d[1]) * g->in[2];
                        for (int64_t kw = 0; kw < k2; kw++) {
                            const int64_t lo = kw_lo[kw];
                            float *yo = yr + lo;
                            const float *xo = xr + lo * s2 + kw_off[kw];
#define MAXPOOL_TAKE(S)                                                                 \
    EW_LOOP(kw_hi[kw] - lo, {                                                           \
        float v = xo[(S) * i], cur = yo[i];                                             \
        yo[i] = (v > cur || (v != v && cur == cur)) ? v : cur;                          \
    })
                            if (s2 == 1)
                                MAXPOOL_TAKE(1);
                            else if (s2 == 2)
                                MAXPOOL_TAKE(2);
                            else
                                MAXPOOL_TAKE(s2);
#undef MAXPOOL_TAKE
                        }
                    }
            }
        }
    }
}

/* Channels-last MaxPool over the output positions [begin, end) of all
 * images (float or uint8, no Indices): maxpool_planes's rule per channel.
 * Cannot fail. */
static void maxpool_nhwc_positions(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    int64_t ch = g->in_channels, in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    const int64_t *d = g->dilation;
    for (int64_t pos = begin; pos < end; pos++) {
        int64_t n = pos / out_sz, q = pos % out_sz;
        int64_t o[ENG_NN_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1],
                                  q % g->out[2]};
        eng_nn_window_t w[ENG_NN_DIMS];
        for (int i = 0; i < ENG_NN_DIMS; i++)
            w[i] = eng_nn_window_at(g, i, o[i], 0, g->in[i]);
        bool first = true;
        for (int64_t kd = w[0].k_begin; kd < w[0].k_end; kd++)
            for (int64_t kh = w[1].k_begin; kh < w[1].k_end; kh++)
                for (int64_t kw = w[2].k_begin; kw < w[2].k_end; kw++) {
                    int64_t at = n * in_sz + ((w[0].start + kd * d[0]) * g->in[1] + w[1].start +
                                              kh * d[1]) * g->in[2] + w[2].start + kw * d[2];
                    if (j->u8) {
                        const uint8_t *x = (const uint8_t *)j->x + at * ch;
                        uint8_t *y = (uint8_t *)j->y + pos * ch;
                        for (int64_t c = 0; c < ch; c++)
                            y[c] = first || x[c] > y[c] ? x[c] : y[c];
                    } else {
                        const float *x = (const float *)j->x + at * ch;
                        float *y = (float *)j->y + pos * ch;
                        for (int64_t c = 0; c < ch; c++) {
                            float v = x[c], b = y[c];
                            /* A NaN wins and stays, as in numpy and PyTorch. */
                            y[c] = first || v > b || (v != v && b == b) ? v : b;
                        }
                    }
                    first = false;
                }
        if (first) {
            if (j->u8)
                memset((uint8_t *)j->y + pos * ch, 0, (size_t)ch);
            else
                for (int64_t c = 0; c < ch; c++)
                    ((float *)j->y)[pos * ch + c] = -INFINITY;
        }
    }
}

static int maxpool_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_POOL, &g);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    eng_tensor_t *it = c->n_outputs > 1 ? c->outputs[1] : NULL;
    pool_job_t j = {.g = &g, .x = xt->data, .y = c->outputs[0]->data,
                    .idx = it ? it->data : NULL, .u8 = xt->dtype == ENG_DT_UINT8,
                    .col_major = eng_attr_i(c->node, "storage_order", 0) == 1};
    if (c->node->channels_last) {
        /* infer refused Indices here */
        eng_parallel_for(c->n_threads, g.batch * eng_nn_prod(g.out),
                         eng_parallel_grain(g.in_channels * eng_nn_prod(g.kernel)),
                         maxpool_nhwc_positions, &j);
        return 0;
    }
    eng_parallel_for(c->n_threads, g.batch * g.in_channels,
                     eng_parallel_grain(eng_nn_prod(g.out) * eng_nn_prod(g.kernel)),
                     j.u8 || j.idx || g.kernel[2] > MAXPOOL_KW_MAX ? maxpool_planes
                                                                   : maxpool_rows_f32,
                     &j);
    return 0;
}

/* AveragePool over the (image, channel) planes [begin, end). Cannot fail. */
static void avgpool_planes(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    int64_t in_sz = eng_nn_prod(g->in);
    const int64_t *d = g->dilation;
    float *y = (float *)j->y + begin * eng_nn_prod(g->out);
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = (const float *)j->x + pl * in_sz;
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    eng_nn_window_t ww = eng_nn_window_at(g, 2, ow, 0, g->in[2]);
                    double sum = 0;
                    for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                        for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                            const float *row = x + ((wd.start + kd * d[0]) * g->in[1] +
                                                    wh.start + kh * d[1]) * g->in[2];
                            for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                                sum += row[ww.start + kw * d[2]];
                        }
                    /* With count_include_pad, taps in the padding count but
                     * taps beyond it (ceil_mode's overhang) do not. */
                    int64_t count = (wd.k_end - wd.k_begin) * (wh.k_end - wh.k_begin) *
                                    (ww.k_end - ww.k_begin);
                    if (j->include_pad) {
                        count = 1;
                        for (int i = 0; i < ENG_NN_DIMS; i++)
                            count *= eng_nn_taps_between(g, i, i == 0 ? od : i == 1 ? oh : ow,
                                                  -g->pad_begin[i], g->in[i] + g->pad_end[i]);
                    }
                    *y++ = count > 0 ? (float)(sum / (double)count) : 0.0f;
                }
            }
        }
    }
}

/* AveragePool tap by tap along output rows, summing in a double row in the
 * same (kd, kh, kw) order per output as avgpool_planes, with the same
 * divisor: identical results, with a vectorisable inner loop. Falls back to
 * avgpool_planes when the row buffer cannot be had. Cannot fail. */
static void avgpool_rows(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    const eng_nn_geom_t *g = j->g;
    double *acc = malloc((size_t)g->out[2] * sizeof *acc);
    if (!acc) {
        avgpool_planes(arg, begin, end);
        return;
    }
    int64_t in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    const int64_t *d = g->dilation;
    int64_t s2 = g->stride[2];
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = (const float *)j->x + pl * in_sz;
        float *y = (float *)j->y + pl * out_sz;
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                EW_LOOP(g->out[2], acc[i] = 0.0;);
                for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                    for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                        const float *xr =
                            x +
                            ((wd.start + kd * d[0]) * g->in[1] + wh.start + kh * d[1]) * g->in[2];
                        for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                            int64_t off = kw * d[2] - g->pad_begin[2], lo, hi;
                            eng_nn_tap_range(off, s2, g->in[2], g->out[2], &lo, &hi);
                            if (s2 == 1) {
                                double *ao = acc + lo;
                                const float *xo = xr + lo + off;
                                EW_LOOP(hi - lo, ao[i] += (double)xo[i];);
                            } else {
                                for (int64_t ow = lo; ow < hi; ow++)
                                    acc[ow] += (double)xr[ow * s2 + off];
                            }
                        }
                    }
                float *yr = y + (od * g->out[1] + oh) * g->out[2];
                int64_t base = (wd.k_end - wd.k_begin) * (wh.k_end - wh.k_begin);
                int64_t pad_base = j->include_pad
                                       ? eng_nn_taps_between(g, 0, od, -g->pad_begin[0],
                                                      g->in[0] + g->pad_end[0]) *
                                             eng_nn_taps_between(g, 1, oh, -g->pad_begin[1],
                                                          g->in[1] + g->pad_end[1])
                                       : 0;
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    int64_t count = j->include_pad
                                        ? pad_base * eng_nn_taps_between(g, 2, ow, -g->pad_begin[2],
                                                                  g->in[2] + g->pad_end[2])
                                        : base * eng_nn_taps_between(g, 2, ow, 0, g->in[2]);
                    yr[ow] = count > 0 ? (float)(acc[ow] / (double)count) : 0.0f;
                }
            }
        }
    }
    free(acc);
}

/* Channels-last AveragePool over the output positions [begin, end): each
 * channel's taps summed in double in avgpool_planes's order, with its
 * divisor. `acc` holds a position's C channel sums; without it (the
 * chunk's buffer could not be had) each channel is summed on its own, in
 * the same order: the same results. Cannot fail. */
static void avgpool_nhwc_range(const pool_job_t *j, int64_t begin, int64_t end, double *acc)
{
    const eng_nn_geom_t *g = j->g;
    int64_t ch = g->in_channels, in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    const int64_t *d = g->dilation;
    const float *x = j->x;
    for (int64_t pos = begin; pos < end; pos++) {
        int64_t n = pos / out_sz, q = pos % out_sz;
        int64_t o[ENG_NN_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1],
                                  q % g->out[2]};
        eng_nn_window_t w[ENG_NN_DIMS];
        int64_t count = 1;
        for (int i = 0; i < ENG_NN_DIMS; i++) {
            w[i] = eng_nn_window_at(g, i, o[i], 0, g->in[i]);
            /* With count_include_pad, taps in the padding count but taps
             * beyond it (ceil_mode's overhang) do not. */
            count *= j->include_pad ? eng_nn_taps_between(g, i, o[i], -g->pad_begin[i],
                                                          g->in[i] + g->pad_end[i])
                                    : w[i].k_end - w[i].k_begin;
        }
        float *y = (float *)j->y + pos * ch;
        /* With acc: every channel at once; without: one channel a pass. */
        for (int64_t c0 = 0; c0 < ch; c0 += acc ? ch : 1) {
            int64_t c1 = acc ? ch : c0 + 1;
            double one = 0.0, *sum = acc ? acc : &one; /* sum[c - c0] */
            for (int64_t c = c0; c < c1; c++)
                sum[c - c0] = 0.0;
            for (int64_t kd = w[0].k_begin; kd < w[0].k_end; kd++)
                for (int64_t kh = w[1].k_begin; kh < w[1].k_end; kh++)
                    for (int64_t kw = w[2].k_begin; kw < w[2].k_end; kw++) {
                        const float *xr =
                            x + (n * in_sz + ((w[0].start + kd * d[0]) * g->in[1] + w[1].start +
                                              kh * d[1]) * g->in[2] + w[2].start + kw * d[2]) *
                                    ch;
                        for (int64_t c = c0; c < c1; c++)
                            sum[c - c0] += (double)xr[c];
                    }
            for (int64_t c = c0; c < c1; c++)
                y[c] = count > 0 ? (float)(sum[c - c0] / (double)count) : 0.0f;
        }
    }
}

static void avgpool_nhwc_positions(void *arg, int64_t begin, int64_t end)
{
    const pool_job_t *j = arg;
    double *acc = malloc((size_t)j->g->in_channels * sizeof *acc + 1);
    avgpool_nhwc_range(j, begin, end, acc);
    free(acc);
}

/* AveragePool. On error (geometry) Y is untouched. */
static int avgpool_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_POOL, &g);
    if (rc)
        return rc;
    pool_job_t j = {.g = &g, .x = c->inputs[0]->data, .y = c->outputs[0]->data,
                    .include_pad = eng_attr_i(c->node, "count_include_pad", 0) != 0};
    if (c->node->channels_last) {
        eng_parallel_for(c->n_threads, g.batch * eng_nn_prod(g.out),
                         eng_parallel_grain(g.in_channels * eng_nn_prod(g.kernel)),
                         avgpool_nhwc_positions, &j);
        return 0;
    }
    eng_parallel_for(c->n_threads, g.batch * g.in_channels,
                     eng_parallel_grain(eng_nn_prod(g.out) * eng_nn_prod(g.kernel)),
                     avgpool_rows, &j);
    return 0;
}

/* GlobalAveragePool's / GlobalMaxPool's planes of X [N, C, plane...]. */
typedef struct global_pool_job {
    const float *x;
    float *y;
    int64_t plane;
    int64_t channels;   /* channels-last X [N, plane..., C]: C; else 1 */
    bool max;           /* GlobalMaxPool (else GlobalAveragePool) */
} global_pool_job_t;

/* Planes p in [begin, end) (image p / C, channel p % C when channels-last),
 * each summed in order along the plane. */
static void global_pool_planes(void *arg, int64_t begin, int64_t end)
{
    const global_pool_job_t *j = arg;
    const bool max = j->max;
    const int64_t ch = j->channels;
    for (int64_t p = begin; p < end; p++) {
        const float *x = j->x + (p / ch * j->plane) * ch + p % ch;
        double acc = max ? -INFINITY : 0.0;
        for (int64_t i = 0; i < j->plane; i++)
            acc = max ? (x[i * ch] > acc ? x[i * ch] : acc) : acc + x[i * ch];
        j->y[p] = (float)(max ? acc : acc / (double)j->plane);
    }
}

/* GlobalAveragePool / GlobalMaxPool, accumulating in double (each plane
 * within one chunk). Cannot fail. */
static int global_pool_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *xt = c->inputs[0];
    const eng_shape_t *xs = &xt->shape;
    bool cl = c->node->channels_last;
    int64_t ch = cl ? xs->dims[xs->rank - 1] : 1;
    if (ch == 0)
        return 0; /* an empty X and Y */
    global_pool_job_t j = {.x = xt->data,
                           .y = c->outputs[0]->data,
                           .plane = cl ? eng_nn_dims_from(xs, 1) / ch : eng_nn_dims_from(xs, 2),
                           .channels = ch,
                           .max = strcmp(c->node->op_type, "GlobalMaxPool") == 0};
    eng_parallel_for(c->n_threads, xs->dims[0] * xs->dims[cl ? xs->rank - 1 : 1],
                     eng_parallel_grain(j.plane), global_pool_planes, &j);
    return 0;
}

/* LpPool and GlobalLpPool: their per-element values (nn_impl.h), over
 * output ranges. */
typedef struct lp_job {
    const eng_nn_geom_t *g;     /* LpPool; NULL for GlobalLpPool */
    const void *x;
    void *y;
    eng_dtype_t dt;
    double p;
    int64_t plane;              /* GlobalLpPool: X's elements per plane */
} lp_job_t;

static void lp_range(void *arg, int64_t begin, int64_t end)
{
    const lp_job_t *j = arg;
    for (int64_t i = begin; i < end; i++)
        eng_hd_store(j->y, j->dt, i,
                     j->g ? eng_nn_lp_at(j->g, j->x, j->dt, j->p, i)
                          : eng_nn_global_lp_at(j->x, j->dt, j->plane, j->p, i));
}

/* LpPool. On error (geometry, p) Y is untouched. */
static int lp_pool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    lp_job_t j = {.g = &g, .x = c->inputs[0]->data, .y = c->outputs[0]->data,
                  .dt = c->inputs[0]->dtype};
    int rc = eng_nn_lp_p(c, &j.p);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    eng_parallel_for(c->n_threads, g.batch * g.in_channels * eng_nn_prod(g.out),
                     eng_parallel_grain(4 * eng_nn_prod(g.kernel)), lp_range, &j);
    return 0;
}

/* GlobalLpPool. On error (p) Y is untouched. */
static int global_lp_pool_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    lp_job_t j = {.x = xt->data, .y = c->outputs[0]->data, .dt = xt->dtype,
                  .plane = eng_nn_dims_from(&xt->shape, 2)};
    int rc = eng_nn_lp_p(c, &j.p);
    if (rc)
        return rc;
    eng_parallel_for(c->n_threads, xt->shape.dims[0] * xt->shape.dims[1],
                     eng_parallel_grain(4 * j.plane), lp_range, &j);
    return 0;
}

const eng_kernel_t eng_cpu_LpPool = {.run = lp_pool_run};
const eng_kernel_t eng_cpu_GlobalLpPool = {.run = global_lp_pool_run};
const eng_kernel_t eng_cpu_AveragePool = {.run = avgpool_run,
                                          .scratch_bytes = eng_cpu_scratch_through_float};
const eng_kernel_t eng_cpu_MaxPool = {.run = maxpool_run,
                                      .scratch_bytes = eng_cpu_scratch_through_float};
const eng_kernel_t eng_cpu_GlobalAveragePool = {.run = global_pool_run,
                                                .scratch_bytes = eng_cpu_scratch_through_float};
const eng_kernel_t eng_cpu_GlobalMaxPool = {.run = global_pool_run,
                                            .scratch_bytes = eng_cpu_scratch_through_float};
