/* softmax.cu -- the CUDA kernels of Softmax, LogSoftmax and Hardmax (engine/ops/reduce.c
 * defines them; engine/cpu/reduce_kernels.c is the CPU reference).
 *
 * They view the input as [outer, n, inner] (eng_axis_extent,
 * with the opset < 13 flattening) and use the CPU's formula: max, then the
 * float sum of expf(x - max), then expf(x - max) * (1 / sum) or
 * (x - max) - logf(sum); float64 one thread per line through the CPU's
 * eng_softmax_line_f64, all in double. Contiguous float rows (inner == 1) of up to 1024
 * elements take one warp each with the row in registers; longer rows one
 * block each (three passes over the row); inner > 1 one thread per line
 * (coalesced along inner), in the CPU's order.
 *
 * Softmax and LogSoftmax on float16 / bfloat16 (T below) run the float
 * kernels with other loads and stores: each element read as float, max,
 * sum and outputs computed in float exactly as for float input, each
 * output rounded once. */
#include <math.h>
#include <string.h>

#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/reduce_impl.h"

/* ---- Softmax / LogSoftmax --------------------------------------------------- */

#define SOFTMAX_WARP_MAX 1024   /* longest contiguous row one warp takes */
#define SOFTMAX_THREADS 512     /* block-per-row kernel */

__device__ __forceinline__ float fmax_cmp(float a, float b) { return b > a ? b : a; }

__device__ __forceinline__ float warp_all_max(float v)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
        v = fmax_cmp(v, __shfl_xor_sync(FULL_MASK, v, d));
    return v;
}

__device__ __forceinline__ float warp_all_sum(float v)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, d);
    return v;
}

/* The block's max (MAX) or sum of v, in every thread. sh: 32 floats of
 * shared memory, free again when it returns. */
template <bool MAX> __device__ __forceinline__ float block_all(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_all_max(v) : warp_all_sum(v);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < nw; i++)
        r = MAX ? fmax_cmp(r, sh[i]) : r + sh[i];
    __syncthreads();
    return r;
}

/* Contiguous rows of n <= 32 * E elements, one warp each, the row in
 * registers. The max is a compare, as on the CPU: a NaN never becomes the
 * max but makes the sum, and so the whole row, NaN. */
template <int E, typename T>
__global__ void softmax_rows_warp(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int n,
                                  bool log_out)
{
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t n_warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = warp; row < rows; row += n_warps) {
        const T *xr = x + row * n;
        T *yr = y + row * n;
        float v[E];
        float m = -INFINITY;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int j = lane + 32 * e;
            v[e] = j < n ? to_f32(xr[j]) : -INFINITY;
            m = fmax_cmp(m, v[e]);
        }
        m = warp_all_max(m);
        float sum = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++)
            if (lane + 32 * e < n)
                sum += expf(v[e] - m);
        sum = warp_all_sum(sum);
        if (log_out) {
            float log_sum = logf(sum);
#pragma unroll
            for (int e = 0; e < E; e++)
                if (lane + 32 * e < n)
                    yr[lane + 32 * e] = from_f32<T>((v[e] - m) - log_sum);
        } else {
            float inv = 1.0f / sum;
#pragma unroll
            for (int e = 0; e < E; e++)
                if (lane + 32 * e < n)
                    yr[lane + 32 * e] = from_f32<T>(expf(v[e] - m) * inv);
        }
    }
}

/* Contiguous rows, one block each: max, sum and output passes. */
template <typename T>
__global__ void softmax_rows_block(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                                   int64_t n, bool log_out)
{
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * n;
        T *yr = y + row * n;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            m = fmax_cmp(m, to_f32(xr[j]));
        m = block_all<true>(m, sh);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            sum += expf(to_f32(xr[j]) - m);
        sum = block_all<false>(sum, sh);
        if (log_out) {
            float log_sum = logf(sum);
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = from_f32<T>((to_f32(xr[j]) - m) - log_sum);
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = from_f32<T>(expf(to_f32(xr[j]) - m) * inv);
        }
    }
}

/* Lines x[o, :, i] with inner > 1, one thread each, in the CPU's order
 * (float: the CPU's own eng_log_softmax_line; half: its arithmetic). */
template <typename T>
__global__ void softmax_lines(const T *__restrict__ x, T *__restrict__ y, int64_t outer, int64_t n,
                              int64_t inner, bool log_out)
{
    ENG_CUDA_FOR(line, outer * inner)
    {
        int64_t o = line / inner, i = line - o * inner;
        const T *xs = x + o * n * inner + i;
        T *ys = y + o * n * inner + i;
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            m = fmax_cmp(m, to_f32(xs[j * inner]));
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++)
            sum += expf(to_f32(xs[j * inner]) - m);
        if (log_out) {
            if constexpr (std::is_same<T, float>::value) {
                eng_log_softmax_line(xs, ys, n, inner, m, sum);
            } else {
                float log_sum = logf(sum);
                for (int64_t j = 0; j < n; j++)
                    ys[j * inner] = from_f32<T>((to_f32(xs[j * inner]) - m) - log_sum);
            }
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = 0; j < n; j++)
                ys[j * inner] = from_f32<T>(expf(to_f32(xs[j * inner]) - m) * inv);
        }
    }
}

template <int E, typename T>
static void softmax_warp_launch(eng_op_ctx_t *c, const T *x, T *y, int64_t rows, int n,
                                bool log_out)
{
    softmax_rows_warp<E, T><<<eng_cuda_grid_cap(c, ceil_div(rows, RED_WARPS)), RED_THREADS, 0,
                              eng_cuda_ctx(c)->stream>>>(x, y, rows, n, log_out);
}

/* Softmax / LogSoftmax of [outer, n, inner] in T (float, __half,
 * __nv_bfloat16). 0, or FS_EDEVICE for a launch error. */
template <typename T>
static int softmax_typed(eng_op_ctx_t *c, const T *x, T *y, int64_t outer, int64_t n,
                         int64_t inner, bool log_out)
{
    if (inner > 1) {
        softmax_lines<T><<<eng_cuda_blocks(c, outer * inner), ENG_CUDA_THREADS, 0,
                           eng_cuda_ctx(c)->stream>>>(x, y, outer, n, inner, log_out);
    } else if (n <= SOFTMAX_WARP_MAX) {
        int ni = (int)n;
        if (ni <= 32)
            softmax_warp_launch<1>(c, x, y, outer, ni, log_out);
        else if (ni <= 64)
            softmax_warp_launch<2>(c, x, y, outer, ni, log_out);
        else if (ni <= 128)
            softmax_warp_launch<4>(c, x, y, outer, ni, log_out);
        else if (ni <= 256)
            softmax_warp_launch<8>(c, x, y, outer, ni, log_out);
        else if (ni <= 512)
            softmax_warp_launch<16>(c, x, y, outer, ni, log_out);
        else
            softmax_warp_launch<32>(c, x, y, outer, ni, log_out);
    } else {
        softmax_rows_block<T><<<eng_cuda_grid_cap(c, outer), SOFTMAX_THREADS, 0,
                                eng_cuda_ctx(c)->stream>>>(x, y, outer, n, log_out);
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* float64: one thread per [outer, n, inner] line, through the CPU's
 * eng_softmax_line_f64. */
static __global__ void softmax_lines_f64(const double *x, double *y, int64_t outer, int64_t n,
                                         int64_t inner, bool log_out)
{
    ENG_CUDA_FOR(line, outer * inner)
    {
        int64_t o = line / inner, at = o * n * inner + (line - o * inner);
        eng_softmax_line_f64(x + at, y + at, n, inner, log_out);
    }
}

static int softmax_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *xt = c->inputs[0];
    if (xt->dtype != ENG_DT_FLOAT && xt->dtype != ENG_DT_DOUBLE &&
        !eng_cuda_is_lowp(xt->dtype))
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(xt->dtype));
    int64_t outer, n, inner;
    int rc = eng_softmax_extent(c, &outer, &n, &inner);
    if (rc)
        return rc;
    if (outer * n * inner == 0)
        return 0;
    if (xt->dtype == ENG_DT_DOUBLE)
        return eng_cuda_launch(c, softmax_lines_f64, outer * inner, (const double *)xt->data,
                               (double *)c->outputs[0]->data, outer, n, inner,
                               strcmp(c->node->op_type, "LogSoftmax") == 0);
    bool log_out = strcmp(c->node->op_type, "LogSoftmax") == 0;
    return lowp_dispatch(c, xt->dtype, [&](auto t) {
        using T = decltype(t);
        return softmax_typed<T>(c, (const T *)xt->data, (T *)c->outputs[0]->data, outer, n, inner,
                                log_out);
    });
}

/* ---- Hardmax ---------------------------------------------------------------- */

/* One thread per [outer, n, inner] line, through the CPU's eng_hardmax_line. */
template <typename T>
__global__ void hardmax_lines(const T *x, T *y, int64_t outer, int64_t n, int64_t inner)
{
    ENG_CUDA_FOR(line, outer * inner)
    {
        int64_t o = line / inner, at = o * n * inner + (line - o * inner);
        if constexpr (sizeof(T) == sizeof(double))
            eng_hardmax_line_f64(x + at, y + at, n, inner);
        else
            eng_hardmax_line_f32(x + at, y + at, n, inner);
    }
}

static int hardmax_run(eng_op_ctx_t *c)
{
    int64_t outer, n, inner;
    int rc = eng_softmax_extent(c, &outer, &n, &inner);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    if (xt->dtype != ENG_DT_FLOAT && xt->dtype != ENG_DT_DOUBLE)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(xt->dtype));
    if (n == 0)
        return 0;
    if (xt->dtype == ENG_DT_DOUBLE)
        return eng_cuda_launch(c, hardmax_lines<double>, outer * inner,
                               (const double *)xt->data, (double *)c->outputs[0]->data, outer, n,
                               inner);
    return eng_cuda_launch(c, hardmax_lines<float>, outer * inner, (const float *)xt->data,
                           (float *)c->outputs[0]->data, outer, n, inner);
}

const eng_kernel_t eng_cuda_Softmax = {.run = softmax_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Hardmax = {.run = hardmax_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LogSoftmax = {.run = softmax_run, .scratch_bytes = NULL};
