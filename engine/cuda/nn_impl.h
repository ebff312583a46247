/* nn_impl.h -- what the CUDA kernels of the nn ops (conv.cu, pool.cu,
 * norm.cu) share: index arithmetic over the normalised 3-D geometry of
 * engine/ops/nn_impl.h, and block reductions.
 *
 * Index arithmetic: the element-wise kernels split flat indices with
 * divisions by fixed divisors; when every index fits in 31 bits they use a
 * multiply-shift division (udiv_t) instead of 64-bit division.
 *
 * Only .cu files include this header. Threading: pure functions. */
#ifndef FS_ENGINE_CUDA_NN_IMPL_H
#define FS_ENGINE_CUDA_NN_IMPL_H

#include <limits.h>
#include <math.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/nn_impl.h"

/* ---- index arithmetic --------------------------------------------------- */

/* Division of non-negative indices by a fixed divisor d >= 1: with Small
 * (dividend and divisor below 2^31) as n * m >> 32 plus a shift
 * (Granlund-Montgomery, the form PyTorch's IntDivider uses), else plain
 * 64-bit division. */
typedef struct udiv {
    int64_t d;
    uint32_t m, s;
} udiv_t;

static inline udiv_t udiv_make(int64_t d)
{
    udiv_t u = {d, 0, 0};
    if (d < 1 || d > INT32_MAX)
        return u; /* only the 64-bit path divides by it (see fits32) */
    while (u.s < 32 && ((uint64_t)1 << u.s) < (uint64_t)d)
        u.s++;
    uint64_t one = 1;
    u.m = (uint32_t)(((one << 32) * ((one << u.s) - (uint64_t)d)) / (uint64_t)d + 1);
    return u;
}

template <bool Small> static __device__ __forceinline__ int64_t udiv_q(const udiv_t &u, int64_t n)
{
    if (Small) {
        uint32_t t = __umulhi((uint32_t)n, u.m);
        return (int64_t)((t + (uint32_t)n) >> u.s);
    }
    return n / u.d;
}

/* Whether a launch whose largest index (dividend and divisor alike) is
 * `max_index` can use the 31-bit division. */
static inline bool fits32(int64_t max_index)
{
    return max_index <= INT32_MAX;
}

/* Flat output index -> (plane, d, h, w) for an output of `plane` positions
 * per (image, channel) plane and spatial dims [.., h, w]. */
typedef struct out_index {
    udiv_t plane, h, w;
} out_index_t;

static inline out_index_t out_index_make(const int64_t out[ENG_NN_DIMS])
{
    out_index_t o = {udiv_make(eng_nn_prod(out)), udiv_make(out[1]), udiv_make(out[2])};
    return o;
}

template <bool Small>
static __device__ __forceinline__ int64_t out_pos(const out_index_t &o, int64_t i, int64_t pos[3])
{
    int64_t pl = udiv_q<Small>(o.plane, i), p = i - pl * o.plane.d;
    int64_t q = udiv_q<Small>(o.w, p);
    pos[2] = p - q * o.w.d;
    pos[0] = udiv_q<Small>(o.h, q);
    pos[1] = q - pos[0] * o.h.d;
    return pl;
}

/* out_pos, plus the windows of output element i's taps that read X along
 * each dim (w[0] depth, w[1] height, w[2] width). */
template <bool Small>
static __device__ __forceinline__ int64_t out_taps(const eng_nn_geom_t &g, const out_index_t &o,
                                                   int64_t i, int64_t pos[3], eng_nn_window_t w[3])
{
    int64_t pl = out_pos<Small>(o, i, pos);
#pragma unroll
    for (int d = 0; d < ENG_NN_DIMS; d++)
        w[d] = eng_nn_window_at(&g, d, pos[d], 0, g.in[d]);
    return pl;
}

/* ---- the channels-last Conv (conv_nhwc.cu) ------------------------------ */

/* Scratch of the channels-last Conv of c with geometry g: a chunk of rows'
 * column matrix in X's dtype (none for a pointwise Conv). Cannot fail. */
size_t eng_cuda_conv_nhwc_scratch_bytes(const eng_op_ctx_t *c, const eng_nn_geom_t *g);

/* The channels-last Conv of c (graph.h; geometry g from eng_nn_geom), with
 * the node's fused residual and ReLU. On error (scratch short, cuBLAS's
 * range or status, a launch) Y may be partly written. */
int eng_cuda_conv_nhwc_run(eng_op_ctx_t *c, const eng_nn_geom_t *g);

/* Whether c's channels-last Conv of geometry g runs as conv_igemm.cu's
 * implicit GEMM: it fits (eng_nn_conv_implicit_gemm_fits) and the node is
 * not marked conv_im2col. Cannot fail. */
bool eng_cuda_conv_igemm_applies(const eng_op_ctx_t *c, const eng_nn_geom_t *g);

/* The implicit GEMM of c's Conv, where eng_cuda_conv_igemm_applies: Y =
 * relu?(conv(X, W) + B + R), R (Y's shape, borrowed) or NULL. X and W must
 * be 16-byte aligned (the caller checks). No scratch. On error (FS_EDEVICE
 * from a launch) Y may be partly written. */
int eng_cuda_conv_igemm_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, const void *res);

/* ---- block reductions --------------------------------------------------- */

struct sum_op {
    __device__ double operator()(double a, double b) const { return a + b; }
    __device__ static double identity() { return 0.0; }
};
/* The CPU's max: a NaN never replaces the running value. */
struct max_op {
    __device__ double operator()(double a, double b) const { return b > a ? b : a; }
    __device__ static double identity() { return -INFINITY; }
};

/* Reduces v over the block (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the result. smem holds 32 doubles; the call is safe to
 * repeat with the same smem. */
template <typename Op> static __device__ double block_reduce(double v, double *smem, Op op)
{
    for (int s = 16; s > 0; s >>= 1)
        v = op(v, __shfl_down_sync(0xffffffffu, v, s));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads(); /* the previous call's readers are done with smem */
    if (lane == 0)
        smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? smem[lane] : Op::identity();
        for (int s = 16; s > 0; s >>= 1)
            v = op(v, __shfl_down_sync(0xffffffffu, v, s));
        if (lane == 0)
            smem[0] = v;
    }
    __syncthreads();
    return smem[0];
}

/* Threads per block for a block that reduces a row of n elements. */
static inline unsigned row_threads(int64_t n)
{
    unsigned t = 32;
    while (t < 512 && (int64_t)t * 4 < n)
        t *= 2;
    return t;
}

/* Blocks for a loop of one block per row. */
static inline unsigned row_blocks(int64_t rows)
{
    return (unsigned)(rows < INT32_MAX ? rows : INT32_MAX);
}

#endif
