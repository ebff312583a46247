/* pool.cu -- CUDA kernels of the pools (engine/ops/nn.c defines them;
 * engine/cpu/pool_kernels.c is the CPU reference): one thread per output
 * element, summing (AveragePool, in double) or taking the maximum (MaxPool,
 * NaN wins, optional Indices in storage_order) over the taps that fall
 * inside X, in the CPU's tap order. The global pools take one block per
 * (image, channel) plane.
 *
 * MaxPool, AveragePool and the global pools take float16 / bfloat16 X and Y
 * too: each tap read as float, the same float (max) or double (sums)
 * arithmetic, each output rounded once.
 *
 * Channels-last nodes (graph.h: X [N, spatial..., C]): output element i is
 * channel i % C of position i / C, so neighbouring threads read
 * neighbouring channels; each output takes the same taps in the same order
 * as its NCHW counterpart. The global pools then take one thread per
 * (image, channel), summing down the plane in order as the CPU does. */
#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"

static const eng_dtype_t dt_float_u8[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                          ENG_DT_UINT8, ENG_DT_UNDEFINED};

/* ---- pools -------------------------------------------------------------- */

/* MaxPool, one thread per output: the largest tap inside X (a NaN wins and
 * stays; no tap: -inf for float, 0 for uint8) and, when idx, its flat
 * index into X with the spatial part in storage_order (-1: no tap). */
/* The first element of output i's plane in X and the step between spatial
 * positions: NCHW plane i / OUT, step 1; channels-last (Cl) channel i % C
 * of image (i / C) / OUT, step C. Fills o and w as out_taps does. */
template <bool Small, bool Cl, typename T>
static __device__ __forceinline__ const T *pool_plane(const T *x, const eng_nn_geom_t &g,
                                                      const out_index_t &out, const udiv_t &ch,
                                                      int64_t i, int64_t o[3],
                                                      eng_nn_window_t w[3], int64_t *pl)
{
    int64_t in_sz = eng_nn_prod(g.in);
    if (!Cl) {
        *pl = out_taps<Small>(g, out, i, o, w);
        return x + *pl * in_sz;
    }
    int64_t q = udiv_q<Small>(ch, i), c = i - q * ch.d;
    *pl = out_taps<Small>(g, out, q, o, w);
    return x + *pl * in_sz * ch.d + c;
}

template <bool Small, bool Cl, typename T>
static __global__ void maxpool_kernel(const T *x, T *y, int64_t *idx, eng_nn_geom_t g,
                                      out_index_t out, udiv_t ch, int64_t n, bool col_major)
{
    int64_t in_sz = eng_nn_prod(g.in), step = Cl ? ch.d : 1;
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3], pl;
        eng_nn_window_t win[3];
        const T *xp = pool_plane<Small, Cl>(x, g, out, ch, i, o, win, &pl);
        const eng_nn_window_t &wd = win[0], &wh = win[1], &ww = win[2];
        float best = -INFINITY;
        int64_t best_at = -1;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++) {
            int64_t id = wd.start + kd * g.dilation[0];
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                int64_t ih = wh.start + kh * g.dilation[1];
                int64_t row = (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++) {
                    int64_t iw = ww.start + kw * g.dilation[2];
                    float v = (float)xp[(row + iw) * step]; /* __half2float, ... */
                    if (v > best || best_at < 0 || (v != v && best == best)) {
                        best = v;
                        best_at = col_major ? id + ih * g.in[0] + iw * g.in[0] * g.in[1]
                                            : row + iw;
                    }
                }
            }
        }
        if constexpr (std::is_same<T, uint8_t>::value)
            y[i] = best_at < 0 ? (T)0 : (T)best;
        else
            y[i] = from_f32<T>(best);
        if (idx)
            idx[i] = best_at < 0 ? -1 : pl * in_sz + best_at;
    }
}

/* MaxPool (float, half, bfloat16 or uint8) with the optional Indices
 * output (NCHW only: infer refuses them channels-last). On error nothing
 * is written. */
static int maxpool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_op_require_dtype(c, 0, dt_float_u8);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    eng_tensor_t *it = c->n_outputs > 1 ? c->outputs[1] : NULL;
    int64_t *idx = it ? (int64_t *)it->data : NULL;
    bool col_major = eng_attr_i(c->node, "storage_order", 0) == 1;
    int64_t n = g.batch * g.in_channels * eng_nn_prod(g.out);
    int64_t in_n = g.batch * g.in_channels * eng_nn_prod(g.in);
    bool small = fits32(n > in_n ? n : in_n), cl = c->node->channels_last;
    out_index_t out = out_index_make(g.out);
    udiv_t ch = udiv_make(g.in_channels);
    auto run = [&](auto t) {
        using T = decltype(t);
        auto k = cl ? (small ? maxpool_kernel<true, true, T> : maxpool_kernel<false, true, T>)
                    : (small ? maxpool_kernel<true, false, T> : maxpool_kernel<false, false, T>);
        return eng_cuda_launch(c, k, n, (const T *)xt->data, (T *)c->outputs[0]->data, idx, g,
                               out, ch, n, col_major);
    };
    if (xt->dtype == ENG_DT_UINT8)
        return run(uint8_t{});
    return lowp_dispatch(c, xt->dtype, run);
}

/* AveragePool, one thread per output: the taps inside X summed in double
 * in (kd, kh, kw) order, divided by their count or, with
 * count_include_pad, by the taps inside the padded input. */
template <bool Small, bool Cl, typename T>
static __global__ void avgpool_kernel(const T *x, T *y, eng_nn_geom_t g, out_index_t out,
                                      udiv_t ch, int64_t n, bool include_pad)
{
    int64_t step = Cl ? ch.d : 1;
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3], pl;
        eng_nn_window_t win[3];
        const T *xp = pool_plane<Small, Cl>(x, g, out, ch, i, o, win, &pl);
        const eng_nn_window_t &wd = win[0], &wh = win[1], &ww = win[2];
        double sum = 0;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                int64_t row = ((wd.start + kd * g.dilation[0]) * g.in[1] + wh.start +
                               kh * g.dilation[1]) * g.in[2] + ww.start;
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                    sum += to_f32(xp[(row + kw * g.dilation[2]) * step]);
            }
        int64_t count = (wd.k_end - wd.k_begin) * (wh.k_end - wh.k_begin) * (ww.k_end - ww.k_begin);
        if (include_pad) {
            count = 1;
            for (int d = 0; d < ENG_NN_DIMS; d++)
                count *= eng_nn_taps_between(&g, d, o[d], -g.pad_begin[d],
                                             g.in[d] + g.pad_end[d]);
        }
        y[i] = from_f32<T>(count > 0 ? (float)(sum / (double)count) : 0.0f);
    }
}

/* AveragePool. On error (geometry) nothing is written. */
static int avgpool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = eng_nn_geom(c, ENG_NN_POOL, &g);
    if (rc)
        return rc;
    int64_t n = g.batch * g.in_channels * eng_nn_prod(g.out);
    int64_t in_n = g.batch * g.in_channels * eng_nn_prod(g.in);
    bool small = fits32(n > in_n ? n : in_n);
    bool include_pad = eng_attr_i(c->node, "count_include_pad", 0) != 0;
    bool cl = c->node->channels_last;
    udiv_t ch = udiv_make(g.in_channels);
    return lowp_dispatch(c, c->inputs[0]->dtype, [&](auto t) {
        using T = decltype(t);
        auto k = cl ? (small ? avgpool_kernel<true, true, T> : avgpool_kernel<false, true, T>)
                    : (small ? avgpool_kernel<true, false, T> : avgpool_kernel<false, false, T>);
        return eng_cuda_launch(c, k, n, (const T *)c->inputs[0]->data, (T *)c->outputs[0]->data,
                               g, out_index_make(g.out), ch, n, include_pad);
    });
}

/* GlobalAveragePool / GlobalMaxPool, one block per plane, in double as the
 * CPU (the maximum skips NaNs as the CPU's comparison does). */
template <bool Max, typename T>
static __global__ void global_pool_kernel(const T *x, T *y, int64_t planes, int64_t plane)
{
    __shared__ double smem[32];
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const T *xp = x + pl * plane;
        double acc = Max ? -INFINITY : 0.0;
        for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) {
            double v = to_f32(xp[i]);
            acc = Max ? (v > acc ? v : acc) : acc + v;
        }
        acc = Max ? block_reduce(acc, smem, max_op()) : block_reduce(acc, smem, sum_op());
        if (threadIdx.x == 0)
            y[pl] = from_f32<T>((float)(Max ? acc : acc / (double)plane));
    }
}

/* Channels-last GlobalAveragePool / GlobalMaxPool, one thread per (image,
 * channel) output i: the plane's elements (C apart) in order, in double. */
template <bool Max, typename T>
static __global__ void global_pool_nhwc_kernel(const T *x, T *y, int64_t ch, int64_t plane,
                                               int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        const T *xp = x + (i / ch) * plane * ch + i % ch;
        double acc = Max ? -INFINITY : 0.0;
        for (int64_t k = 0; k < plane; k++) {
            double v = to_f32(xp[k * ch]);
            acc = Max ? (v > acc ? v : acc) : acc + v;
        }
        y[i] = from_f32<T>((float)(Max ? acc : acc / (double)plane));
    }
}

/* GlobalAveragePool / GlobalMaxPool. Cannot fail but for the launch. */
static int global_pool_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    if (c->node->channels_last) {
        const eng_shape_t *xs = &xt->shape;
        int64_t ch = xs->dims[xs->rank - 1], n = xs->dims[0] * ch;
        int64_t plane = ch ? eng_nn_dims_from(xs, 1) / ch : 0;
        bool max = strcmp(c->node->op_type, "GlobalMaxPool") == 0;
        return lowp_dispatch(c, xt->dtype, [&](auto t) {
            using T = decltype(t);
            return eng_cuda_launch(c, max ? global_pool_nhwc_kernel<true, T>
                                          : global_pool_nhwc_kernel<false, T>,
                                   n, (const T *)xt->data, (T *)c->outputs[0]->data, ch, plane,
                                   n);
        });
    }
    int64_t planes = xt->shape.dims[0] * xt->shape.dims[1], plane = eng_nn_dims_from(&xt->shape, 2);
    if (planes == 0)
        return 0;
    bool max = strcmp(c->node->op_type, "GlobalMaxPool") == 0;
    unsigned threads = row_threads(plane), blocks = row_blocks(planes);
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        const T *x = (const T *)xt->data;
        T *y = (T *)c->outputs[0]->data;
        if (max)
            global_pool_kernel<true, T>
                <<<blocks, threads, 0, eng_cuda_ctx(c)->stream>>>(x, y, planes, plane);
        else
            global_pool_kernel<false, T>
                <<<blocks, threads, 0, eng_cuda_ctx(c)->stream>>>(x, y, planes, plane);
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* LpPool (g set) or GlobalLpPool (plane elements a plane), one thread per
 * output. */
static __global__ void lp_pool_kernel(eng_nn_geom_t g, bool global, const void *x, void *y,
                                      eng_dtype_t dt, double p, int64_t plane, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        eng_hd_store(y, dt, i, global ? eng_nn_global_lp_at(x, dt, plane, p, i)
                                      : eng_nn_lp_at(&g, x, dt, p, i));
    }
}

/* LpPool. On error (geometry, p) nothing is written. */
static int lp_pool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    double p;
    int rc = eng_nn_lp_p(c, &p);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, lp_pool_kernel, n, g, false, (const void *)c->inputs[0]->data,
                           y->data, y->dtype, p, (int64_t)0, n);
}

/* GlobalLpPool. On error (p) nothing is written. */
static int global_lp_pool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g = {};
    double p;
    int rc = eng_nn_lp_p(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    int64_t n = xt->shape.dims[0] * xt->shape.dims[1];
    return eng_cuda_launch(c, lp_pool_kernel, n, g, true, (const void *)xt->data, y->data,
                           y->dtype, p, eng_nn_dims_from(&xt->shape, 2), n);
}

const eng_kernel_t eng_cuda_LpPool = {.run = lp_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GlobalLpPool = {.run = global_lp_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_AveragePool = {.run = avgpool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MaxPool = {.run = maxpool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GlobalAveragePool = {.run = global_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GlobalMaxPool = {.run = global_pool_run, .scratch_bytes = NULL};
