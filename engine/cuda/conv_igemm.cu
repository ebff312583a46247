/* conv_igemm.cu -- the implicit-GEMM channels-last Conv on tensor cores:
 * 2-D, group 1, float16 or bfloat16, C and M multiples of 8
 * (eng_nn_conv_implicit_gemm_fits), with the node's bias, residual and
 * ReLU; conv_nhwc.cu picks it over im2col where it applies.
 *
 * Algorithm. The Conv is the GEMM Y [P, M] = A [P, K] x W^T, P = N*Ho*Wo
 * output positions, K = kh*kw*C in (tap row, tap column, channel) order,
 * which is W [M, kh, kw, C]'s own order: W is B^T, K-contiguous per output
 * channel. A is never stored: A[p][k] is X at p's window position for k's
 * tap, or zero in the padding. As C is a multiple of 8, every aligned run
 * of 8 k's lies in one tap, so A moves in 16-byte units, each one load
 * from X or zeros.
 *
 * A block computes a BM x BN tile of Y (BM = 128 rows, BN = 128 or 64
 * output channels) with warps of 64 x 32 each, stepping through K in tiles
 * of 32. Every thread owns fixed 16-byte units of the A and B tiles: the
 * same k-unit (threadIdx % 4) of fixed rows, so it decodes its rows' image
 * and window origin once, and its k's (channel, tap column, tap row) step
 * by 32 with no division. The tiles reach shared memory through cp.async
 * in a ring of STAGES tiles (zero-filled: a padding tap, rows past P,
 * channels past M, the K tail), STAGES - 1 of them in flight while the
 * warps multiply the oldest with WMMA (16x16x16, float accumulators).
 * Shared rows are padded to 80 bytes, so eight consecutive rows' 16-byte
 * units fall in distinct banks.
 *
 * Epilogue. Each warp stores its float accumulators into shared memory
 * (reusing the ring), and each lane then finishes 8 consecutive outputs
 * of a row: + B[m], + R (Y's shape), ReLU, all in float, rounded to the
 * dtype once, stored as one 16-byte unit where Y, R and B are 16-byte
 * aligned, else element by element. Rows past P and channels past M are
 * not written (M being a multiple of 8, a unit is all in or all out).
 *
 * Needs sm_80 or later (cp.async, bfloat16 WMMA): the build's CUDA_ARCH
 * (80 90). */
#include <limits.h>
#include <mma.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"

namespace {

constexpr int IG_BM = 128;               /* rows of Y a block */
constexpr int IG_BK = 32;                /* k's a tile */
constexpr int IG_UNITS = IG_BK / 8;      /* 16-byte units a tile row */
constexpr int IG_LDS = IG_BK + 8;        /* shared row stride in elements: 80 bytes */
constexpr int IG_WM = 64, IG_WN = 32;    /* a warp's tile */
constexpr int IG_LDC = IG_WN + 4;        /* float epilogue row stride: 144 bytes */
constexpr int IG_STAGES = 4;
/* Padding rows of X: no tap of them lands inside the image. */
constexpr int IG_OUTSIDE = -(1 << 30);

/* What the kernel reads; every index fits in 32 bits
 * (eng_nn_conv_implicit_gemm_fits). */
struct igemm_args {
    const void *x, *w, *bias, *res; /* bias, res: NULL when absent */
    void *y;
    int p, m, k, c;                  /* P, M, K = kh*kw*C, C */
    int h, w_in;                     /* X's spatial dims */
    int ow, ohw;                     /* Y's width, Y's positions per image */
    int kw;                          /* taps along a row (kh bounds K) */
    int kh;
    int sh, sw, ph, pw, dh, dw;
    int tiles_n;                     /* ceil(M / BN) */
    bool relu;
    bool vec_out;                    /* Y, R and B 16-byte aligned */
};

template <int BN> struct igemm_shape {
    static constexpr int warps_m = IG_BM / IG_WM, warps_n = BN / IG_WN;
    static constexpr int threads = warps_m * warps_n * 32;
    static constexpr int a_per = IG_BM * IG_UNITS / threads; /* A units a thread */
    static constexpr int b_per = BN * IG_UNITS / threads;    /* B units a thread */
    static constexpr int row_step = threads / IG_UNITS;      /* rows between them */
    static constexpr size_t ring_bytes = (size_t)IG_STAGES * (IG_BM + BN) * IG_LDS * 2;
    static constexpr size_t epi_bytes = (size_t)warps_m * warps_n * IG_WM * IG_LDC * 4;
    static constexpr size_t smem_bytes = ring_bytes > epi_bytes ? ring_bytes : epi_bytes;
    static_assert(IG_BM * IG_UNITS % threads == 0 && BN * IG_UNITS % threads == 0,
                  "every thread moves whole units");
};

/* 16 bytes from global src into shared dst, or 16 zero bytes when !ok
 * (src is then not read, but stays a valid address). */
__device__ __forceinline__ void ig_cp16(void *dst, const void *src, bool ok)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
}

__device__ __forceinline__ void ig_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's cp.async groups are pending. */
template <int N> __device__ __forceinline__ void ig_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Eight elements moved as one 16-byte unit. */
template <typename T> struct alignas(16) ig_vec8 {
    T e[8];
};

/* Finishes 8 outputs of row `row` from channel `col`: v + B + R, ReLU,
 * rounded once, stored. */
template <typename T>
__device__ __forceinline__ void ig_finish(const igemm_args &a, int row, int col, float v[8])
{
    const T *bias = (const T *)a.bias, *res = (const T *)a.res;
    T *y = (T *)a.y;
    int64_t at = (int64_t)row * a.m + col;
    if (a.vec_out) {
        if (bias) {
            ig_vec8<T> b = *reinterpret_cast<const ig_vec8<T> *>(bias + col);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] += to_f32(b.e[e]);
        }
        if (res) {
            ig_vec8<T> r = *reinterpret_cast<const ig_vec8<T> *>(res + at);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] += to_f32(r.e[e]);
        }
        ig_vec8<T> o;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float f = a.relu && v[e] < 0.0f ? 0.0f : v[e]; /* a NaN stays NaN */
            o.e[e] = from_f32<T>(f);
        }
        *reinterpret_cast<ig_vec8<T> *>(y + at) = o;
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float f = v[e];
        if (bias)
            f += to_f32(bias[col + e]);
        if (res)
            f += to_f32(res[at + e]);
        if (a.relu && f < 0.0f)
            f = 0.0f;
        y[at + e] = from_f32<T>(f);
    }
}

template <typename T, int BN>
__global__ void __launch_bounds__(igemm_shape<BN>::threads)
    igemm_kernel(igemm_args a)
{
    using namespace nvcuda;
    using S = igemm_shape<BN>;
    constexpr int FM = IG_WM / 16, FN = IG_WN / 16;
    extern __shared__ __align__(128) unsigned char ig_smem[];
    T *ring_a = reinterpret_cast<T *>(ig_smem);           /* [STAGES][BM][LDS] */
    T *ring_b = ring_a + IG_STAGES * IG_BM * IG_LDS;      /* [STAGES][BN][LDS] */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int tile_p = (int)(blockIdx.x / (unsigned)a.tiles_n);
    const int tile_n = (int)(blockIdx.x - (unsigned)tile_p * (unsigned)a.tiles_n);
    const int p0 = tile_p * IG_BM, n0 = tile_n * BN;
    const int unit = tid % IG_UNITS, row_in = tid / IG_UNITS;
    const T *x = (const T *)a.x, *w = (const T *)a.w;

    /* This thread's A rows: the image's first element and the window's
     * origin, or an origin no tap reaches for rows past P. */
    const T *a_img[S::a_per];
    int a_h0[S::a_per], a_w0[S::a_per];
#pragma unroll
    for (int i = 0; i < S::a_per; i++) {
        int r = p0 + row_in + i * S::row_step;
        a_img[i] = x;
        a_h0[i] = a_w0[i] = IG_OUTSIDE;
        if (r < a.p) {
            int n = r / a.ohw, q = r - n * a.ohw, oh = q / a.ow, ow = q - oh * a.ow;
            a_img[i] = x + (int64_t)n * a.h * a.w_in * a.c;
            a_h0[i] = oh * a.sh - a.ph;
            a_w0[i] = ow * a.sw - a.pw;
        }
    }
    /* This thread's B rows (output channels), W's start for those past M. */
    const T *b_row[S::b_per];
    bool b_in[S::b_per];
#pragma unroll
    for (int j = 0; j < S::b_per; j++) {
        int m = n0 + row_in + j * S::row_step;
        b_in[j] = m < a.m;
        b_row[j] = w + (b_in[j] ? (int64_t)m * a.k : 0);
    }
    /* The k of this thread's unit in the next tile to load, as an offset
     * into W's row (kb) and as (tap row kr, tap column ks, channel kc). */
    int kb = unit * 8, kc = unit * 8, ks = 0, kr = 0;
    while (kc >= a.c) {
        kc -= a.c;
        if (++ks == a.kw)
            ks = 0, kr++;
    }

    /* Loads the next K tile into ring slot `slot`, then steps k. */
    auto load_tile = [&](int slot) {
        T *sa = ring_a + slot * IG_BM * IG_LDS + row_in * IG_LDS + unit * 8;
        T *sb = ring_b + slot * BN * IG_LDS + row_in * IG_LDS + unit * 8;
        bool k_in = kr < a.kh;
        int dy = kr * a.dh, dx = ks * a.dw;
#pragma unroll
        for (int i = 0; i < S::a_per; i++) {
            int ih = a_h0[i] + dy, iw = a_w0[i] + dx;
            bool ok = k_in && (unsigned)ih < (unsigned)a.h && (unsigned)iw < (unsigned)a.w_in;
            const T *src = ok ? a_img[i] + (ih * a.w_in + iw) * a.c + kc : x;
            ig_cp16(sa + i * S::row_step * IG_LDS, src, ok);
        }
        bool kb_in = kb < a.k;
#pragma unroll
        for (int j = 0; j < S::b_per; j++) {
            bool ok = kb_in && b_in[j];
            ig_cp16(sb + j * S::row_step * IG_LDS, ok ? b_row[j] + kb : w, ok);
        }
        kb += IG_BK;
        kc += IG_BK;
        while (kc >= a.c) {
            kc -= a.c;
            if (++ks == a.kw)
                ks = 0, kr++;
        }
    };

    const int k_tiles = (a.k + IG_BK - 1) / IG_BK;
#pragma unroll
    for (int s = 0; s < IG_STAGES - 1; s++) {
        if (s < k_tiles)
            load_tile(s);
        ig_commit(); /* empty groups too: the wait below counts groups */
    }

    const int wm = warp / S::warps_n, wn = warp % S::warps_n;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);

    for (int kt = 0; kt < k_tiles; kt++) {
        /* Tile kt has landed (for every thread, after the barrier), and
         * every warp is done with the slot the next load overwrites: it
         * held tile kt - 1. */
        ig_wait<IG_STAGES - 2>();
        __syncthreads();
        if (kt + IG_STAGES - 1 < k_tiles)
            load_tile((kt + IG_STAGES - 1) % IG_STAGES);
        ig_commit();
        const int slot = kt % IG_STAGES;
        const T *ta = ring_a + slot * IG_BM * IG_LDS + wm * IG_WM * IG_LDS;
        const T *tb = ring_b + slot * BN * IG_LDS + wn * IG_WN * IG_LDS;
#pragma unroll
        for (int kk = 0; kk < IG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[FN];
#pragma unroll
            for (int i = 0; i < FM; i++)
                wmma::load_matrix_sync(fa[i], ta + i * 16 * IG_LDS + kk, IG_LDS);
#pragma unroll
            for (int j = 0; j < FN; j++)
                wmma::load_matrix_sync(fb[j], tb + j * 16 * IG_LDS + kk, IG_LDS);
#pragma unroll
            for (int i = 0; i < FM; i++)
#pragma unroll
                for (int j = 0; j < FN; j++)
                    wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    /* The ring becomes the float staging: nothing may still land in it,
     * and every warp must be done reading it. */
    ig_wait<0>();
    __syncthreads();

    float *cw = reinterpret_cast<float *>(ig_smem) + warp * IG_WM * IG_LDC;
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++)
            wmma::store_matrix_sync(cw + i * 16 * IG_LDC + j * 16, acc[i][j], IG_LDC,
                                    wmma::mem_row_major);
    __syncwarp();
    constexpr int UN = IG_WN / 8; /* 8-output units a warp row */
#pragma unroll 2
    for (int e = lane; e < IG_WM * UN; e += 32) {
        int r = e / UN, u = e % UN;
        int row = p0 + wm * IG_WM + r, col = n0 + wn * IG_WN + u * 8;
        if (row >= a.p || col >= a.m)
            continue;
        const float4 *src = reinterpret_cast<const float4 *>(cw + r * IG_LDC + u * 8);
        float4 lo = src[0], hi = src[1];
        float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        ig_finish<T>(a, row, col, v);
    }
}

/* Sets the kernel's shared memory above the 48 KiB default (idempotent,
 * so each run may ask) and launches it over every tile. */
template <typename T, int BN> int igemm_launch(const eng_op_ctx_t *c, igemm_args a)
{
    using S = igemm_shape<BN>;
    a.tiles_n = (a.m + BN - 1) / BN;
    int64_t blocks = (int64_t)((a.p + IG_BM - 1) / IG_BM) * a.tiles_n;
    if (blocks > INT32_MAX)
        return eng_op_err(c, FS_EINVAL, "implicit-GEMM Conv: %lld tiles exceed a grid",
                          (long long)blocks);
    ENG_CUDA_TRY(c, cudaFuncSetAttribute(igemm_kernel<T, BN>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)S::smem_bytes));
    igemm_kernel<T, BN><<<(unsigned)blocks, S::threads, S::smem_bytes,
                          eng_cuda_ctx(c)->stream>>>(a);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

} // namespace

/* The device's choice (neither conv_im2col nor conv_implicit): the implicit
 * GEMM only for an output of at least this many positions (batch x Ho x
 * Wo). On an H200, ResNet-50 fp16 whole (2026-11-27, bench/RESULTS.md):
 * implicit everywhere took 0.75 / 1.16 / 5.36 ms at batch 1 / 8 / 64
 * against im2col's 0.39 / 0.89 / 5.48 -- its 128-row tiles leave the GPU
 * idle on small outputs, where im2col's column matrix is small anyway. */
#define IG_AUTO_MIN_POSITIONS 32768

bool eng_cuda_conv_igemm_applies(const eng_op_ctx_t *c, const eng_nn_geom_t *g)
{
    const eng_node_t *n = c->node;
    if (n->conv_im2col || !eng_nn_conv_implicit_gemm_fits(g, c->inputs[0]->dtype))
        return false;
    return n->conv_implicit || g->batch * eng_nn_prod(g->out) >= IG_AUTO_MIN_POSITIONS;
}

/* Output channels a block covers: 64 where M is that small, or where
 * 128-wide tiles would leave multiprocessors idle; else 128. */
static int igemm_tile_n(const eng_op_ctx_t *c, const eng_nn_geom_t *g)
{
    int64_t p = g->batch * eng_nn_prod(g->out), m = g->out_channels;
    int64_t wide_tiles = (p + IG_BM - 1) / IG_BM * ((m + 127) / 128);
    int sms = eng_cuda_ctx(c)->sm_count > 0 ? eng_cuda_ctx(c)->sm_count : 80;
    return m <= 64 || wide_tiles < sms ? 64 : 128;
}

int eng_cuda_conv_igemm_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, const void *res)
{
    igemm_args a = {};
    a.x = c->inputs[0]->data;
    a.w = c->inputs[1]->data;
    a.bias = eng_ctx_in_data(c, 2);
    a.res = res;
    a.y = c->outputs[0]->data;
    a.p = (int)(g->batch * eng_nn_prod(g->out));
    a.m = (int)g->out_channels;
    a.c = (int)g->in_channels;
    a.k = (int)(g->kernel[1] * g->kernel[2] * g->in_channels);
    a.h = (int)g->in[1];
    a.w_in = (int)g->in[2];
    a.ow = (int)g->out[2];
    a.ohw = (int)(g->out[1] * g->out[2]);
    a.kh = (int)g->kernel[1];
    a.kw = (int)g->kernel[2];
    a.sh = (int)g->stride[1];
    a.sw = (int)g->stride[2];
    a.ph = (int)g->pad_begin[1];
    a.pw = (int)g->pad_begin[2];
    a.dh = (int)g->dilation[1];
    a.dw = (int)g->dilation[2];
    a.relu = c->node->conv_relu;
    a.vec_out = (uintptr_t)a.y % 16 == 0 && (uintptr_t)a.res % 16 == 0 &&
                (uintptr_t)a.bias % 16 == 0;
    bool wide = igemm_tile_n(c, g) == 128;
    return lowp_dispatch(c, c->inputs[0]->dtype, [&](auto t) {
        using T = decltype(t);
        if constexpr (sizeof(T) != 2)
            return eng_op_err(c, FS_ENOTSUP, "implicit-GEMM Conv: dtype %s (float16 or "
                              "bfloat16)", eng_dtype_name(c->inputs[0]->dtype));
        else
            return wide ? igemm_launch<T, 128>(c, a) : igemm_launch<T, 64>(c, a);
    });
}
