/* norm.cu -- CUDA kernels of the normalisations and LRN (engine/ops/nn.c
 * defines them; engine/cpu/norm_kernels.c is the CPU reference).
 *
 * BatchNormalization folds each channel into a multiply and an add (in
 * float, as the CPU; 2 * C floats of scratch) and applies them element-wise,
 * four floats at a time when the planes allow. InstanceNormalization and
 * LayerNormalization take one block per plane or row with the CPU's
 * two-pass moments in double (sum, then the sum of squared deviations), each
 * block reducing through warp shuffles and shared memory; the block reads
 * its whole row before writing any of it, so Y may alias X. LayerNorm rows
 * of up to 8192 elements (every transformer's hidden size) take one warp
 * each instead, 16-byte accesses where aligned, shuffles only: a block a
 * row spent most of its time in barriers (52 us for BERT-base's [8192,
 * 768] fp16 at batch 64 on an H200, where the bytes take 5 us).
 * RMSNormalization does the same with one pass (the sum of squares). LRN is one
 * thread per element, in double as the CPU.
 *
 * Half activations: the four normalisations take X, its parameters and Y
 * all float16 or all bfloat16 as well as float (T below), reading each
 * element as float and rounding each output once; the statistics and the
 * arithmetic are the float kernels' (double moments, BatchNormalization's
 * float multiply-add). LayerNormalization's Mean and InvStdDev stay float
 * (ONNX's stash_type 1). LRN is float only (engine/ops.c widens it). */
#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"

/* FS_ENOTSUP naming the input unless inputs [0, n) that are present all
 * have input 0's dtype, float, float16 or bfloat16. 0 otherwise. */
static int norm_require_inputs(const eng_op_ctx_t *c, int n)
{
    static const eng_dtype_t dt_x[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                       ENG_DT_UNDEFINED};
    int rc = eng_op_require_dtype(c, 0, dt_x);
    const eng_dtype_t same[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    for (int i = 1; rc == 0 && i < n && i < c->n_inputs; i++)
        if (c->inputs[i])
            rc = eng_op_require_dtype(c, i, same);
    return rc;
}

/* Two-pass moments of a row of n elements in double, as the CPU's moments:
 * the mean, then 1 / sqrt(mean squared deviation + eps). */
template <typename T>
static __device__ void row_moments(const T *x, int64_t n, double eps, double *smem,
                                   double *mean, double *inv_std)
{
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += to_f32(x[i]);
    s = block_reduce(s, smem, sum_op());
    double m = n ? s / (double)n : 0;
    double q = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double d = to_f32(x[i]) - m;
        q += d * d;
    }
    q = block_reduce(q, smem, sum_op());
    *mean = m;
    *inv_std = 1.0 / sqrt((n ? q / (double)n : 0) + eps);
}

/* ---- normalisations ----------------------------------------------------- */

/* BatchNormalization's per-channel multiply and add, in float as the CPU:
 * mul = scale / sqrtf(var + eps), add = bias - mean * mul. */
template <typename T>
static __global__ void batchnorm_fold(const T *scale, const T *bias, const T *mean, const T *var,
                                      float eps, float *mul, float *add, int64_t n)
{
    ENG_CUDA_FOR(k, n)
    {
        float m = to_f32(scale[k]) / sqrtf(to_f32(var[k]) + eps);
        mul[k] = m;
        add[k] = to_f32(bias[k]) - to_f32(mean[k]) * m;
    }
}

/* y = x * mul[c] + add[c], Vec elements of T at a time (a vector never
 * straddles two planes: plane % Vec == 0; Vec 4 only for float). Y may
 * alias X. */
template <bool Small, int Vec, typename T>
static __global__ void batchnorm_apply(const T *x, T *y, const float *mul, const float *add,
                                       udiv_t plane_vecs, udiv_t channels, int64_t n_vecs)
{
    static_assert(Vec == 1 || std::is_same<T, float>::value, "float4 vectors of float");
    typedef typename std::conditional<Vec == 4, float4, T>::type vec_t;
    ENG_CUDA_FOR(v, n_vecs)
    {
        int64_t p = udiv_q<Small>(plane_vecs, v);
        int64_t k = p - udiv_q<Small>(channels, p) * channels.d;
        float mk = mul[k], ak = add[k];
        vec_t xv = ((const vec_t *)x)[v];
        if constexpr (Vec == 4) {
            xv.x = xv.x * mk + ak;
            xv.y = xv.y * mk + ak;
            xv.z = xv.z * mk + ak;
            xv.w = xv.w * mk + ak;
        } else {
            xv = from_f32<T>(to_f32(xv) * mk + ak);
        }
        ((vec_t *)y)[v] = xv;
    }
}

static size_t batchnorm_scratch_bytes(const eng_op_ctx_t *c)
{
    return 2 * (size_t)c->inputs[0]->shape.dims[1] * sizeof(float);
}

/* BatchNormalization in inference mode. Y may alias X. On error (scratch)
 * nothing is written. */
static int batchnorm_run(eng_op_ctx_t *c)
{
    int rc = norm_require_inputs(c, 5);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t channels = xt->shape.dims[1], plane = eng_nn_dims_from(&xt->shape, 2);
    int64_t n = eng_shape_numel(&xt->shape);
    size_t need = batchnorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    if (n == 0)
        return 0;
    float *mul = (float *)c->scratch, *add = mul + channels;
    float eps = eng_attr_f(c->node, "epsilon", 1e-5f);
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        int rc = eng_cuda_launch(c, batchnorm_fold<T>, channels, (const T *)c->inputs[1]->data,
                                 (const T *)c->inputs[2]->data, (const T *)c->inputs[3]->data,
                                 (const T *)c->inputs[4]->data, eps, mul, add, channels);
        if (rc)
            return rc;
        const T *x = (const T *)xt->data;
        T *y = (T *)c->outputs[0]->data;
        bool vec = std::is_same<T, float>::value && plane % 4 == 0 && (uintptr_t)x % 16 == 0 &&
                   (uintptr_t)y % 16 == 0;
        int64_t width = vec ? 4 : 1, n_vecs = n / width;
        udiv_t pv = udiv_make(plane / width), ch = udiv_make(channels);
        if constexpr (std::is_same<T, float>::value)
            if (vec)
                return eng_cuda_launch(c, fits32(n_vecs) ? batchnorm_apply<true, 4, T>
                                                         : batchnorm_apply<false, 4, T>,
                                       n_vecs, x, y, (const float *)mul, (const float *)add, pv,
                                       ch, n_vecs);
        return eng_cuda_launch(c, fits32(n_vecs) ? batchnorm_apply<true, 1, T>
                                                 : batchnorm_apply<false, 1, T>,
                               n_vecs, x, y, (const float *)mul, (const float *)add, pv, ch,
                               n_vecs);
    });
}

/* InstanceNormalization, one block per (image, channel) plane:
 * y = (x - mean) * (scale * inv_std) + bias, in double as the CPU. */
template <typename T>
static __global__ void instancenorm_kernel(const T *x, T *y, const T *scale, const T *bias,
                                           int64_t planes, int64_t channels, int64_t plane,
                                           double eps)
{
    __shared__ double smem[32];
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const T *xp = x + pl * plane;
        T *yp = y + pl * plane;
        int64_t k = pl % channels;
        double mean, inv_std;
        row_moments(xp, plane, eps, smem, &mean, &inv_std);
        double mul = to_f32(scale[k]) * inv_std, b = to_f32(bias[k]);
        for (int64_t i = threadIdx.x; i < plane; i += blockDim.x)
            yp[i] = from_f32<T>((float)((to_f32(xp[i]) - mean) * mul + b));
    }
}

/* InstanceNormalization. Y may alias X. Cannot fail but for the launch. */
static int instancenorm_run(eng_op_ctx_t *c)
{
    int rc = norm_require_inputs(c, 3);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t channels = xt->shape.dims[1], planes = xt->shape.dims[0] * channels;
    int64_t plane = eng_nn_dims_from(&xt->shape, 2);
    if (planes == 0 || plane == 0)
        return 0;
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        instancenorm_kernel<T>
            <<<row_blocks(planes), row_threads(plane), 0, eng_cuda_ctx(c)->stream>>>(
                (const T *)xt->data, (T *)c->outputs[0]->data, (const T *)c->inputs[1]->data,
                (const T *)c->inputs[2]->data, planes, channels, plane,
                (double)eng_attr_f(c->node, "epsilon", 1e-5f));
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* Whether LayerNormalization's parameter p must be expanded to X's tail
 * dims: not when it already has their numel (then, as it broadcasts, it
 * has their layout). */
static bool layernorm_needs_expand(const eng_tensor_t *p, int64_t cols)
{
    return p && eng_shape_numel(&p->shape) != cols;
}

static size_t layernorm_scratch_bytes(const eng_op_ctx_t *c)
{
    int64_t cols = eng_nn_dims_from(&c->inputs[0]->shape, eng_nn_layernorm_axis(c));
    int n = layernorm_needs_expand(c->inputs[1], cols) +
            layernorm_needs_expand(eng_ctx_in(c, 2), cols);
    return (size_t)n * (size_t)cols * eng_dtype_size(c->inputs[0]->dtype);
}

/* Expands a parameter over X's tail dims (engine/ops/nn_impl.h's map). */
template <typename T>
static __global__ void layernorm_expand(const T *src, T *dst, eng_nn_tail_map_t m, int64_t n)
{
    ENG_CUDA_FOR(j, n)
    {
        dst[j] = src[eng_nn_tail_at(&m, j)];
    }
}

/* Expands parameter p (of X's dtype T) to X's dims from `axis` on into dst
 * (as the CPU's expand_tail). */
template <typename T>
static int layernorm_expand_run(const eng_op_ctx_t *c, const eng_tensor_t *p,
                                const eng_shape_t *x, int axis, T *dst, int64_t cols)
{
    return eng_cuda_launch(c, layernorm_expand<T>, cols, (const T *)p->data, dst,
                           eng_nn_tail_map(p, x, axis), cols);
}

/* LayerNormalization, one block per row: y = (x - mean) * inv_std *
 * scale + bias in double, and the row's statistics when asked. */
template <typename T>
static __global__ void layernorm_kernel(const T *x, T *y, const T *scale, const T *bias,
                                        float *mean_out, float *inv_out, int64_t rows,
                                        int64_t cols, double eps)
{
    __shared__ double smem[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * cols;
        T *yr = y + r * cols;
        double mean, inv_std;
        row_moments(xr, cols, eps, smem, &mean, &inv_std);
        for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
            yr[k] = from_f32<T>((float)((to_f32(xr[k]) - mean) * inv_std * to_f32(scale[k]) +
                                        (bias ? to_f32(bias[k]) : 0.0f)));
        if (threadIdx.x == 0) {
            if (mean_out)
                mean_out[r] = (float)mean;
            if (inv_out)
                inv_out[r] = (float)inv_std;
        }
    }
}

/* Sums v over the warp; every lane gets the result. */
static __device__ __forceinline__ double warp_sum(double v)
{
    for (int s = 16; s > 0; s >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
}

#define LN_WARPS 4        /* rows a block of layernorm_warp_kernel */
#define LN_WARP_COLS 8192 /* the longest row it takes; longer rows a block each */

/* layernorm_kernel's result with one warp per row, for rows of at most
 * LN_WARP_COLS: the same two-pass double moments and the same expression
 * per element, reduced by shuffles alone (no shared memory, no block
 * barrier), Vec elements an access (cols % Vec == 0 and every pointer
 * aligned for it). The warp reads its row twice before writing it, and each
 * lane writes only what it read, so Y may alias X. */
template <typename T, int Vec>
static __global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_warp_kernel(const T *x, T *y, const T *scale, const T *bias, float *mean_out,
                          float *inv_out, int64_t rows, int64_t cols, double eps)
{
    using P = vec_t<T, Vec>;
    const int lane = threadIdx.x & 31;
    const int64_t nv = cols / Vec;
    for (int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * LN_WARPS) {
        const P *xr = (const P *)(x + r * cols);
        P *yr = (P *)(y + r * cols);
        double s = 0;
        for (int64_t k = lane; k < nv; k += 32) {
            P p = xr[k];
#pragma unroll
            for (int e = 0; e < Vec; e++)
                s += to_f32(p.v[e]);
        }
        const double mean = warp_sum(s) / (double)cols;
        double q = 0;
        for (int64_t k = lane; k < nv; k += 32) {
            P p = xr[k];
#pragma unroll
            for (int e = 0; e < Vec; e++) {
                double d = to_f32(p.v[e]) - mean;
                q += d * d;
            }
        }
        const double inv_std = 1.0 / sqrt(warp_sum(q) / (double)cols + eps);
        for (int64_t k = lane; k < nv; k += 32) {
            P p = xr[k], sp = ((const P *)scale)[k], o;
#pragma unroll
            for (int e = 0; e < Vec; e++)
                o.v[e] = from_f32<T>((float)((to_f32(p.v[e]) - mean) * inv_std * to_f32(sp.v[e]) +
                                             (bias ? to_f32(bias[k * Vec + e]) : 0.0f)));
            yr[k] = o;
        }
        if (lane == 0) {
            if (mean_out)
                mean_out[r] = (float)mean;
            if (inv_out)
                inv_out[r] = (float)inv_std;
        }
    }
}

/* Queues layernorm_warp_kernel at the widest Vec the row length and the
 * pointers allow. */
template <typename T>
static void layernorm_warp_launch(cudaStream_t st, const T *x, T *y, const T *scale,
                                  const T *bias, float *mean_out, float *inv_out, int64_t rows,
                                  int64_t cols, double eps)
{
    constexpr int V = 16 / sizeof(T);
    const uintptr_t at = (uintptr_t)x | (uintptr_t)y | (uintptr_t)scale | (uintptr_t)bias;
    int64_t blocks = (rows + LN_WARPS - 1) / LN_WARPS;
    unsigned grid = (unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX);
    if (cols % V == 0 && at % 16 == 0)
        layernorm_warp_kernel<T, V><<<grid, 32 * LN_WARPS, 0, st>>>(x, y, scale, bias, mean_out,
                                                                   inv_out, rows, cols, eps);
    else
        layernorm_warp_kernel<T, 1><<<grid, 32 * LN_WARPS, 0, st>>>(x, y, scale, bias, mean_out,
                                                                   inv_out, rows, cols, eps);
}

/* LayerNormalization with the optional Mean and InvStdDev outputs. Y may
 * alias X. On error (scratch) nothing is written. */
static int layernorm_run(eng_op_ctx_t *c)
{
    int rc = norm_require_inputs(c, 3);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0], *st = c->inputs[1], *bt = eng_ctx_in(c, 2);
    int axis = eng_nn_layernorm_axis(c);
    int64_t cols = eng_nn_dims_from(&xt->shape, axis);
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    size_t need = layernorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    if (rows == 0)
        return 0;
    float *mean_out = c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data : NULL;
    float *inv_out = c->n_outputs > 2 && c->outputs[2] ? (float *)c->outputs[2]->data : NULL;
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        const T *scale = (const T *)st->data, *bias = bt ? (const T *)bt->data : NULL;
        T *next = (T *)c->scratch;
        int rc;
        if (layernorm_needs_expand(st, cols)) {
            if ((rc = layernorm_expand_run(c, st, &xt->shape, axis, next, cols)))
                return rc;
            scale = next;
            next += cols;
        }
        if (layernorm_needs_expand(bt, cols)) {
            if ((rc = layernorm_expand_run(c, bt, &xt->shape, axis, next, cols)))
                return rc;
            bias = next;
        }
        const double eps = (double)eng_attr_f(c->node, "epsilon", 1e-5f);
        if (cols <= LN_WARP_COLS)
            layernorm_warp_launch<T>(eng_cuda_ctx(c)->stream, (const T *)xt->data,
                                     (T *)c->outputs[0]->data, scale, bias, mean_out, inv_out,
                                     rows, cols, eps);
        else
            layernorm_kernel<T><<<row_blocks(rows), row_threads(cols), 0,
                                  eng_cuda_ctx(c)->stream>>>((const T *)xt->data,
                                                             (T *)c->outputs[0]->data, scale, bias,
                                                             mean_out, inv_out, rows, cols, eps);
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* RMSNormalization, one block per row: y = x / sqrt(mean(x^2) + eps) *
 * scale in double, as the CPU. */
template <typename T>
static __global__ void rmsnorm_kernel(const T *x, T *y, const T *scale, int64_t rows,
                                      int64_t cols, double eps)
{
    __shared__ double smem[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * cols;
        T *yr = y + r * cols;
        double q = 0;
        for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
            double v = to_f32(xr[i]);
            q += v * v;
        }
        q = block_reduce(q, smem, sum_op());
        double inv = 1.0 / sqrt((cols ? q / (double)cols : 0) + eps);
        for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
            yr[k] = from_f32<T>((float)(to_f32(xr[k]) * inv * to_f32(scale[k])));
    }
}

static size_t rmsnorm_scratch_bytes(const eng_op_ctx_t *c)
{
    int64_t cols = eng_nn_dims_from(&c->inputs[0]->shape, eng_nn_layernorm_axis(c));
    return layernorm_needs_expand(c->inputs[1], cols)
               ? (size_t)cols * eng_dtype_size(c->inputs[0]->dtype)
               : 0;
}

/* RMSNormalization. Y may alias X. On error (scratch) nothing is
 * written. */
static int rmsnorm_run(eng_op_ctx_t *c)
{
    int rc = norm_require_inputs(c, 2);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0], *st = c->inputs[1];
    int axis = eng_nn_layernorm_axis(c);
    int64_t cols = eng_nn_dims_from(&xt->shape, axis);
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    size_t need = rmsnorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    if (rows == 0)
        return 0;
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        const T *scale = (const T *)st->data;
        if (layernorm_needs_expand(st, cols)) {
            int rc = layernorm_expand_run(c, st, &xt->shape, axis, (T *)c->scratch, cols);
            if (rc)
                return rc;
            scale = (const T *)c->scratch;
        }
        rmsnorm_kernel<T><<<row_blocks(rows), row_threads(cols), 0, eng_cuda_ctx(c)->stream>>>(
            (const T *)xt->data, (T *)c->outputs[0]->data, scale, rows, cols,
            (double)eng_attr_f(c->node, "epsilon", 1e-5f));
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* LRN across channels, one thread per element: x / (bias + alpha / size *
 * sum of squares over the channel window)^beta, in double as the CPU. */
template <bool Small>
static __global__ void lrn_kernel(const float *x, float *y, udiv_t plane, udiv_t channels,
                                  int64_t n, int64_t size, double alpha_over_size, double beta,
                                  double bias)
{
    const int64_t before = (size - 1) / 2, after = size - 1 - before, ch = channels.d;
    ENG_CUDA_FOR(i, n)
    {
        int64_t pl = udiv_q<Small>(plane, i), pos = i - pl * plane.d;
        int64_t b = udiv_q<Small>(channels, pl), k = pl - b * ch;
        int64_t lo = k - before < 0 ? 0 : k - before;
        int64_t hi = k + after >= ch ? ch - 1 : k + after;
        const float *xb = x + b * ch * plane.d + pos;
        double sq = 0;
        for (int64_t m = lo; m <= hi; m++) {
            double v = xb[m * plane.d];
            sq += v * v;
        }
        y[i] = (float)(xb[k * plane.d] / pow(bias + alpha_over_size * sq, beta));
    }
}

/* LRN. Cannot fail but for the launch. */
static int lrn_run(eng_op_ctx_t *c)
{
    int rc = eng_cuda_require_float_inputs(c, 1, -1);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t n = eng_shape_numel(&xt->shape), size = eng_attr_i(c->node, "size", 1);
    double alpha = eng_attr_f(c->node, "alpha", 1e-4f), beta = eng_attr_f(c->node, "beta", 0.75f);
    double bias = eng_attr_f(c->node, "bias", 1.0f);
    return eng_cuda_launch(c, fits32(n) ? lrn_kernel<true> : lrn_kernel<false>, n,
                  (const float *)xt->data, (float *)c->outputs[0]->data,
                  udiv_make(eng_nn_dims_from(&xt->shape, 2)), udiv_make(xt->shape.dims[1]), n, size,
                  alpha / (double)size, beta, bias);
}

const eng_kernel_t eng_cuda_BatchNormalization = {.run = batchnorm_run,
                                                  .scratch_bytes = batchnorm_scratch_bytes};
const eng_kernel_t eng_cuda_InstanceNormalization = {.run = instancenorm_run,
                                                     .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LayerNormalization = {.run = layernorm_run,
                                                  .scratch_bytes = layernorm_scratch_bytes};
const eng_kernel_t eng_cuda_RMSNormalization = {.run = rmsnorm_run,
                                                .scratch_bytes = rmsnorm_scratch_bytes};
const eng_kernel_t eng_cuda_LRN = {.run = lrn_run, .scratch_bytes = NULL};
