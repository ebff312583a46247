/* attention_flash.cu -- the fast CUDA kernels of Attention's common case
 * (engine/cuda/attention.cu keeps the exact double kernel for the rest):
 * no past cache, no qk_matmul_output, no softcap, head sizes (Q/K and V)
 * up to FA_DMAX, dtype float, float16 or bfloat16, 4-D or 3-D inputs, K
 * plain or read transposed (attention_impl.h's k_dstride), any mask
 * (bool or additive, broadcast strides, shorter than the keys), is_causal,
 * the windows, nonpad_kv_seqlen and grouped key/value heads.
 *
 * Algorithm (flash attention): one block per (batch, query head, tile of
 * queries); the keys go through shared memory a tile at a time with an
 * online softmax in float per query row: the tile's scores x_j (scale *
 * q.k plus attention_impl.h's bias_j), the row's running max m and sum l;
 * a new max rescales l and the output accumulator by exp(m_old - m_new)
 * before the tile's exp(x_j - m_new)-weighted values are added. The score
 * matrix never reaches global memory and Y is written once, as acc / l.
 *  - float16 / bfloat16 whose operands 16-byte loads can read (f2_ok:
 *    head sizes multiples of 8, aligned rows; K^T with keys a multiple of
 *    8), the usual case (flash_f2_kernel): FlashAttention-2's structure,
 *    mma.sync m16n8k16 with the scores, the softmax and the output
 *    accumulator in registers, each warp owning 16 query rows, Q, K and V
 *    tiles brought by cp.async (its comment says more). 64 queries a
 *    block, or 16 when 64 would leave multiprocessors idle or
 *    half-filled.
 *    K^T whose rows those loads cannot take (keys no multiple of 8:
 *    ViT-B/16's 197) is first unpacked into the node's scratch as K
 *    (kt_unpack_kernel, one coalesced pass over K), which keeps this
 *    kernel where flash_mma_kernel would take several times as long.
 *  - other float16 / bfloat16 (flash_mma_kernel): 4 warps, 64 queries and 64
 *    keys a tile; Q.K^T and P.V on tensor cores (WMMA 16x16x16, float
 *    accumulation), each warp owning 16 query rows; the head padded with
 *    zeros to a multiple of 16 in shared memory. P is rounded to the
 *    dtype for the P.V product, as every fp16 flash kernel does.
 *  - float (flash_fma_kernel): IEEE fp32 FMAs (no TF32: the fp32 GEMMs are
 *    IEEE unless TF32 precision is asked for, engine/cuda/device.cu),
 *    4 threads per query row each owning a quarter of the head in float4
 *    groups, 32 queries and 32 keys a tile.
 *
 * Values against the exact kernel: float accumulation and float exp where
 * it uses double, so results agree to float rounding (float) or to the
 * dtype's rounding of P and Y (half types). Special rows as there: a row
 * whose every bias_j is -inf (fully masked) is 0; a NaN score makes the
 * row NaN (the running max propagates NaN, as NumPy's max does).
 * Causal blocks stop at the tile past their last query when the frontier
 * is the plain one (no past, no nonpad_kv_seqlen): those keys are closed
 * for every row of the block. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/flash_impl.h"

namespace {

#define FA_DMAX 128
#define FA_THREADS 128

__device__ inline float ldf(float v) { return v; }
__device__ inline float ldf(f16_t v) { return eng_half_to_float(v.bits); }
__device__ inline float ldf(bf16_t v) { return eng_bf16_to_float(v.bits); }

template <typename T> __device__ inline T stf(float v);
template <> __device__ inline float stf<float>(float v) { return v; }
template <> __device__ inline f16_t stf<f16_t>(float v) { return f16_t{eng_float_to_half(v)}; }
template <> __device__ inline bf16_t stf<bf16_t>(float v) { return bf16_t{eng_float_to_bf16(v)}; }

/* NumPy's max: a NaN on either side wins. */
__device__ inline float nan_maxf(float a, float b)
{
    return a != a ? a : b != b ? b : b > a ? b : a;
}

template <typename T> struct fa_args {
    const T *q, *k, *v;
    const void *mask; /* bool (uint8) or T */
    const int64_t *nonpad;
    T *y;
};

/* bias_j of attention_impl.h for query i and key j < total_len, in float;
 * *open as the exact kernel's (bias above -inf). */
template <typename T>
__device__ inline float fa_bias(const eng_attention_t &a, const fa_args<T> &p, int64_t mask_at,
                                int64_t i, int64_t j, int64_t nonpad, bool *open)
{
    float term = 0;
    if (a.mask == ENG_ATTN_MASK_BOOL)
        term = j < a.mask_len && ((const uint8_t *)p.mask)[mask_at + j] != 0 ? 0.0f : -INFINITY;
    else if (a.mask == ENG_ATTN_MASK_ADD)
        term = j < a.mask_len ? ldf(((const T *)p.mask)[mask_at + j]) : -INFINITY;
    float bias = eng_attention_open(&a, i, j, nonpad) ? term : term + -INFINITY;
    *open = bias != -INFINITY;
    return bias;
}

/* The keys a block of queries [i0, i0 + rows) needs: all, or with the
 * plain causal frontier those up to its last query. */
__device__ inline int64_t fa_keys(const eng_attention_t &a, int64_t i0, int64_t rows)
{
    int64_t n = a.total_len;
    if (a.causal && !a.has_past && !a.has_nonpad) {
        int64_t last = i0 + rows; /* one past the block's last query */
        n = last < n ? last : n;
    }
    return n;
}

/* ---- float: FMA ------------------------------------------------------------------------------ */

#define FF_Q 32 /* queries a block */
#define FF_K 32 /* keys a tile */

/* NV float4 groups per thread: the head padded to 16 * NV. */
template <typename T, int NV>
__global__ void __launch_bounds__(FA_THREADS) flash_fma_kernel(eng_attention_t a, fa_args<T> p)
{
    __shared__ float4 ks[FF_K][4 * NV], vs[FF_K][4 * NV];
    const int tid = threadIdx.x, quad = tid & 3;
    const int64_t b = blockIdx.z, h = blockIdx.y, i0 = (int64_t)blockIdx.x * FF_Q;
    const int64_t g = h / a.group, nonpad = a.has_nonpad ? p.nonpad[b] : 0;
    const int64_t i = i0 + (tid >> 2), ic = i < a.q_len ? i : a.q_len - 1;
    const int64_t mask_at = b * a.mask_stride[0] + h * a.mask_stride[1] + ic * a.mask_stride[2];
    const int dp = 16 * NV;
    float4 q[NV], acc[NV];
    const T *qr = p.q + eng_attention_row(a.q_stride, b, h, ic);
    for (int v = 0; v < NV; v++) {
        int d = 4 * (quad + 4 * v);
        float e[4];
        for (int t = 0; t < 4; t++)
            e[t] = d + t < a.head ? ldf(qr[d + t]) : 0.0f;
        q[v] = make_float4(e[0], e[1], e[2], e[3]);
        acc[v] = make_float4(0, 0, 0, 0);
    }
    float m = -INFINITY, l = 0;
    bool open = false;
    const float scale = (float)a.scale;
    const int64_t n = fa_keys(a, i0, FF_Q);
    float *kf = &ks[0][0].x, *vf = &vs[0][0].x;
    for (int64_t j0 = 0; j0 < n; j0 += FF_K) {
        __syncthreads(); /* the last tile's reads are done */
        for (int e = tid; e < FF_K * dp; e += FA_THREADS) {
            int key, d;
            if (a.k_dstride == 1)
                key = e / dp, d = e % dp;
            else
                d = e / FF_K, key = e % FF_K; /* K^T: keys contiguous */
            int64_t j = j0 + key;
            kf[key * dp + d] = j < n && d < a.head
                                   ? ldf(p.k[eng_attention_row(a.k_stride, b, g, j) +
                                             d * a.k_dstride])
                                   : 0.0f;
        }
        for (int e = tid; e < FF_K * dp; e += FA_THREADS) {
            int key = e / dp, d = e % dp;
            int64_t j = j0 + key;
            vf[key * dp + d] =
                j < n && d < a.v_head ? ldf(p.v[eng_attention_row(a.v_stride, b, g, j) + d]) : 0.0f;
        }
        __syncthreads();
        float x[FF_K], tmax = -INFINITY;
#pragma unroll
        for (int t = 0; t < FF_K; t++) {
            float s = 0;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                float4 kv = ks[t][quad + 4 * v];
                s = fmaf(q[v].x, kv.x, s);
                s = fmaf(q[v].y, kv.y, s);
                s = fmaf(q[v].z, kv.z, s);
                s = fmaf(q[v].w, kv.w, s);
            }
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            int64_t j = j0 + t;
            bool o = false;
            x[t] = j < n ? s * scale + fa_bias(a, p, mask_at, ic, j, nonpad, &o) : -INFINITY;
            open = open || o;
            tmax = nan_maxf(tmax, x[t]);
        }
        float mnew = nan_maxf(m, tmax);
        if (mnew == -INFINITY)
            continue; /* every score so far is -inf: nothing to add */
        float f = expf(m - mnew), psum = 0;
        for (int v = 0; v < NV; v++) {
            acc[v].x *= f;
            acc[v].y *= f;
            acc[v].z *= f;
            acc[v].w *= f;
        }
#pragma unroll
        for (int t = 0; t < FF_K; t++) {
            float pt = expf(x[t] - mnew);
            psum += pt;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                float4 vv = vs[t][quad + 4 * v];
                acc[v].x = fmaf(pt, vv.x, acc[v].x);
                acc[v].y = fmaf(pt, vv.y, acc[v].y);
                acc[v].z = fmaf(pt, vv.z, acc[v].z);
                acc[v].w = fmaf(pt, vv.w, acc[v].w);
            }
        }
        l = l * f + psum;
        m = mnew;
    }
    if (i >= a.q_len)
        return;
    T *yr = p.y + eng_attention_row(a.y_stride, b, h, i);
    bool zero = !open || m == -INFINITY;
    for (int v = 0; v < NV; v++) {
        int d = 4 * (quad + 4 * v);
        const float e[4] = {acc[v].x, acc[v].y, acc[v].z, acc[v].w};
        for (int t = 0; t < 4; t++)
            if (d + t < a.v_head)
                yr[d + t] = stf<T>(zero ? 0.0f : e[t] / l);
    }
}

/* ---- float16 / bfloat16: tensor cores -------------------------------------------------------- */

#define FM_Q 64 /* queries a block: 16 a warp */
#define FM_K 64 /* keys a tile */
#define FM_LDS (FM_K + 4) /* row strides (elements) of the score and P tiles */
#define FM_LDP (FM_K + 8)

template <typename T> struct wmma_type;
template <> struct wmma_type<f16_t> {
    using type = __half;
    __device__ static uint16_t bits(float v) { return eng_float_to_half(v); }
};
template <> struct wmma_type<bf16_t> {
    using type = __nv_bfloat16;
    __device__ static uint16_t bits(float v) { return eng_float_to_bf16(v); }
};

/* Shared memory of flash_mma_kernel for padded head sizes dp (Q, K) and
 * dvp (V), multiples of 16: Q, K and V tiles (16-bit), per warp a float
 * score tile, a 16-bit P tile, a float output tile and 16 rescale factors.
 * Every part starts 32-byte aligned, as WMMA loads need. */
static size_t fm_smem_bytes(int dp, int dvp)
{
    return (size_t)(FM_Q + FM_K) * (dp + 8) * 2 + (size_t)FM_K * (dvp + 8) * 2 +
           (size_t)FM_Q * FM_LDS * 4 + (size_t)FM_Q * FM_LDP * 2 + (size_t)FM_Q * (dvp + 4) * 4 +
           (size_t)FM_Q * 4;
}

/* Copies rows [r0, r0 + rows) of a 16-bit [.., size] operand into a smem
 * tile of `ld` elements a row, zero past `limit` rows or `size` columns up
 * to dpad; `row` gives a row's element offset, `dstride` the column
 * stride (K^T: then the loop runs down the keys, which are contiguous). */
template <typename RowF>
__device__ inline void fm_load(uint16_t *dst, int ld, const uint16_t *src, int64_t r0, int rows,
                               int64_t limit, int64_t size, int dpad, int64_t dstride, RowF row)
{
    const int total = rows * dpad;
    for (int e = threadIdx.x; e < total; e += FA_THREADS) {
        int r, d;
        if (dstride == 1)
            r = e / dpad, d = e % dpad;
        else
            d = e / rows, r = e % rows;
        int64_t at = r0 + r;
        dst[r * ld + d] = at < limit && d < size ? src[row(at) + d * dstride] : (uint16_t)0;
    }
}

template <typename T>
__global__ void __launch_bounds__(FA_THREADS)
    flash_mma_kernel(eng_attention_t a, fa_args<T> p, int dp, int dvp)
{
    using namespace nvcuda;
    using W = typename wmma_type<T>::type;
    extern __shared__ __align__(128) unsigned char fm_sm[];
    const int ldq = dp + 8, ldv = dvp + 8, ldo = dvp + 4;
    uint16_t *qs = (uint16_t *)fm_sm, *ks = qs + FM_Q * ldq, *vs = ks + FM_K * ldq;
    float *ss = (float *)(vs + FM_K * ldv);
    uint16_t *ps = (uint16_t *)(ss + FM_Q * FM_LDS);
    float *os = (float *)(ps + FM_Q * FM_LDP), *fs = os + FM_Q * ldo;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t b = blockIdx.z, h = blockIdx.y, i0 = (int64_t)blockIdx.x * FM_Q;
    const int64_t g = h / a.group, nonpad = a.has_nonpad ? p.nonpad[b] : 0;
    const uint16_t *q16 = (const uint16_t *)p.q, *k16 = (const uint16_t *)p.k,
                   *v16 = (const uint16_t *)p.v;
    fm_load(qs, ldq, q16, i0, FM_Q, a.q_len, a.head, dp, 1,
            [&](int64_t i) { return eng_attention_row(a.q_stride, b, h, i); });
    /* This warp's rows: the score, P and output tiles and the factors. */
    float *sw = ss + warp * 16 * FM_LDS, *ow = os + warp * 16 * ldo, *fw = fs + warp * 16;
    uint16_t *pw = ps + warp * 16 * FM_LDP;
    for (int e = lane; e < 16 * ldo; e += 32)
        ow[e] = 0;
    /* Softmax: lanes 2r and 2r + 1 own row r, the even and odd keys. */
    const int r = lane >> 1, half = lane & 1;
    const int64_t i = i0 + warp * 16 + r, ic = i < a.q_len ? i : a.q_len - 1;
    const int64_t mask_at = b * a.mask_stride[0] + h * a.mask_stride[1] + ic * a.mask_stride[2];
    const float scale = (float)a.scale;
    float m = -INFINITY, l = 0;
    bool open = false;
    const int64_t n = fa_keys(a, i0, FM_Q);
    for (int64_t j0 = 0; j0 < n; j0 += FM_K) {
        __syncthreads(); /* the last tile's K and V reads are done */
        fm_load(ks, ldq, k16, j0, FM_K, n, a.head, dp, a.k_dstride,
                [&](int64_t j) { return eng_attention_row(a.k_stride, b, g, j); });
        fm_load(vs, ldv, v16, j0, FM_K, n, a.v_head, dvp, 1,
                [&](int64_t j) { return eng_attention_row(a.v_stride, b, g, j); });
        __syncthreads();
        /* S = Q K^T for this warp's 16 rows. */
        for (int nb = 0; nb < FM_K / 16; nb++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
            wmma::fill_fragment(sacc, 0.0f);
            for (int kk = 0; kk < dp / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, (const W *)(qs + warp * 16 * ldq + kk * 16), ldq);
                wmma::load_matrix_sync(fb, (const W *)(ks + nb * 16 * ldq + kk * 16), ldq);
                wmma::mma_sync(sacc, fa, fb, sacc);
            }
            wmma::store_matrix_sync(sw + nb * 16, sacc, FM_LDS, wmma::mem_row_major);
        }
        __syncwarp();
        float x[FM_K / 2], tmax = -INFINITY;
        bool o_any = false;
#pragma unroll
        for (int t = 0; t < FM_K / 2; t++) {
            int c = half + 2 * t;
            int64_t j = j0 + c;
            bool o = false;
            x[t] = j < n ? sw[r * FM_LDS + c] * scale + fa_bias(a, p, mask_at, ic, j, nonpad, &o)
                         : -INFINITY;
            o_any = o_any || o;
            tmax = nan_maxf(tmax, x[t]);
        }
        tmax = nan_maxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        int o_other = __shfl_xor_sync(0xffffffffu, (int)o_any, 1);
        open = open || o_any || o_other;
        float mnew = nan_maxf(m, tmax), f = mnew == -INFINITY ? 1.0f : expf(m - mnew), psum = 0;
#pragma unroll
        for (int t = 0; t < FM_K / 2; t++) {
            float pt = mnew == -INFINITY ? 0.0f : expf(x[t] - mnew);
            uint16_t pb = wmma_type<T>::bits(pt);
            pw[r * FM_LDP + half + 2 * t] = pb;
            psum += pt;
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * f + psum;
        m = mnew;
        if (half == 0)
            fw[r] = f;
        __syncwarp();
        for (int e = lane; e < 16 * dvp; e += 32)
            ow[(e / dvp) * ldo + e % dvp] *= fw[e / dvp];
        __syncwarp();
        /* O += P V */
        for (int nb = 0; nb < dvp / 16; nb++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
            wmma::load_matrix_sync(oacc, ow + nb * 16, ldo, wmma::mem_row_major);
            for (int kk = 0; kk < FM_K / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, (const W *)(pw + kk * 16), FM_LDP);
                wmma::load_matrix_sync(fb, (const W *)(vs + kk * 16 * ldv + nb * 16), ldv);
                wmma::mma_sync(oacc, fa, fb, oacc);
            }
            wmma::store_matrix_sync(ow + nb * 16, oacc, ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (i >= a.q_len)
        return;
    T *yr = p.y + eng_attention_row(a.y_stride, b, h, i);
    bool zero = !open || m == -INFINITY;
    for (int d = half; d < a.v_head; d += 2)
        yr[d] = stf<T>(zero ? 0.0f : ow[r * ldo + d] / l);
}

/* ---- float16 / bfloat16, aligned operands: FA2 in registers ---------------------------------- */

#define F2_K 64 /* keys a tile */
#define F2_LDT (F2_K + 8) /* row stride (elements) of a K^T tile: [head][keys] */

/* The head sizes (padded) flash_f2_kernel is built for. */
#define F2_HEADS(X) X(32) X(64) X(96) X(128)

__device__ inline unsigned f2_smem(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes from global src to shared dst, or 16 zero bytes when !ok (src
 * is then not read, though it must still be a valid address). */
__device__ inline void f2_cp16(void *dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(f2_smem(dst)), "l"(src),
                 "r"(ok ? 16 : 0));
}
__device__ inline void f2_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void f2_cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/* Four 8x8 16-bit matrices from shared memory, each lane naming one row
 * (lanes 8m..8m+7 matrix m): plain, or transposed (.trans). */
__device__ inline void f2_ldm(unsigned r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(f2_smem(row)));
}
__device__ inline void f2_ldm_t(unsigned r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(f2_smem(row)));
}

/* d += a (16x16, row) * b (16x8, col), float accumulation. */
template <typename T> __device__ inline void f2_mma(float d[4], const unsigned a[4], unsigned b0,
                                                    unsigned b1);
template <> __device__ inline void f2_mma<f16_t>(float d[4], const unsigned a[4], unsigned b0,
                                                 unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ inline void f2_mma<bf16_t>(float d[4], const unsigned a[4], unsigned b0,
                                                  unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as the dtype's pair, lo in the low half (round to nearest
 * even), and a 16-bit value's float. */
template <typename T> __device__ inline unsigned f2_pack(float lo, float hi);
template <> __device__ inline unsigned f2_pack<f16_t>(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}
template <> __device__ inline unsigned f2_pack<bf16_t>(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}
template <typename T> __device__ inline float f2_float(unsigned short bits);
template <> __device__ inline float f2_float<f16_t>(unsigned short bits)
{
    return __half2float(__ushort_as_half(bits));
}
template <> __device__ inline float f2_float<bf16_t>(unsigned short bits)
{
    return __bfloat162float(__ushort_as_bfloat16(bits));
}

/* The mask's terms for keys j and j + 1 (j even) of the row at mr: a pair
 * read at once where `pair` (the row aligned for it) and both are inside
 * mask_len; -inf past it. */
template <typename T>
__device__ inline void f2_mask_terms(const eng_attention_t &a, const void *mr, bool pair, int j,
                                     float &t0, float &t1)
{
    const int ml = (int)a.mask_len;
    if (a.mask == ENG_ATTN_MASK_BOOL) {
        const uint8_t *m = (const uint8_t *)mr;
        uint8_t b0, b1;
        if (pair && j + 1 < ml) {
            unsigned short w = __ldg((const unsigned short *)(m + j));
            b0 = (uint8_t)(w & 0xff), b1 = (uint8_t)(w >> 8);
        } else {
            b0 = j < ml ? __ldg(m + j) : 0;
            b1 = j + 1 < ml ? __ldg(m + j + 1) : 0;
        }
        t0 = b0 ? 0.0f : -INFINITY;
        t1 = b1 ? 0.0f : -INFINITY;
    } else {
        const unsigned short *m = (const unsigned short *)mr;
        if (pair && j + 1 < ml) {
            unsigned w = __ldg((const unsigned *)(m + j));
            t0 = f2_float<T>((unsigned short)(w & 0xffff));
            t1 = f2_float<T>((unsigned short)(w >> 16));
        } else {
            t0 = j < ml ? f2_float<T>(__ldg(m + j)) : -INFINITY;
            t1 = j + 1 < ml ? f2_float<T>(__ldg(m + j + 1)) : -INFINITY;
        }
    }
}

/* Shared memory of flash_f2_kernel<T, D, NW>: the Q tile, a K tile (rows
 * of keys, or K^T's rows of head elements) and a V tile, 16-bit, rows
 * padded by 8 elements so that ldmatrix's eight row reads fall in eight
 * different bank groups. */
static size_t f2_smem_bytes(int d, int nw)
{
    size_t ld = (size_t)d + 8, kt = (size_t)d * F2_LDT, kp = (size_t)F2_K * ld;
    return ((size_t)16 * nw * ld + (kt > kp ? kt : kp) + (size_t)F2_K * ld) * 2;
}

/* flash_f2_kernel: the tensor-core kernel for operands that 16-byte loads
 * can read (f2_ok), written as FlashAttention-2 is: each of the NW
 * warps owns 16 query rows; Q.K^T (m16n8k16 mma, float accumulation)
 * leaves each lane the scores of 2 rows x 16 keys of a 64-key tile in
 * registers, where the bias, the online softmax (row max and sum over the
 * lane's quad by shuffles) and the rescale of the output accumulator
 * happen; the score accumulators, rounded to the dtype, are the P operand
 * of P.V as they stand (the m16n8k16 accumulator and A layouts agree), so
 * nothing goes through shared memory but Q, K and V, which cp.async
 * brings in 16-byte pieces: V of a tile while its scores are computed, the
 * next K while P.V runs. D is the head padded (zeros) to the built size;
 * K^T tiles ([head][keys], keys contiguous) are read with transposing
 * ldmatrix, as V is.
 * closes: 0 nothing but the mask closes keys, 1 the plain causal frontier
 * only (j > i), 2 eng_attention_open in general. */
template <typename T, int D, int NW>
__global__ void __launch_bounds__(NW * 32)
    flash_f2_kernel(eng_attention_t a, fa_args<T> p, int closes)
{
    constexpr int BQ = 16 * NW, LD = D + 8, NT = F2_K / 8, DT = D / 8, THREADS = NW * 32;
    extern __shared__ __align__(128) unsigned char f2_sm[];
    unsigned short *qs = (unsigned short *)f2_sm, *ks = qs + BQ * LD;
    unsigned short *vs = ks + (D * F2_LDT > F2_K * LD ? D * F2_LDT : F2_K * LD);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * BQ;
    const int kvh = h / (int)a.group;
    const int q_len = (int)a.q_len, head = (int)a.head, v_head = (int)a.v_head;
    const unsigned short *qb = (const unsigned short *)p.q + b * a.q_stride[0] + h * a.q_stride[1];
    const unsigned short *kb = (const unsigned short *)p.k + b * a.k_stride[0] +
                               kvh * a.k_stride[1];
    const unsigned short *vb = (const unsigned short *)p.v + b * a.v_stride[0] +
                               kvh * a.v_stride[1];
    const bool kt = a.k_t;
    const int n = (int)fa_keys(a, i0, BQ), n_tiles = (n + F2_K - 1) / F2_K;

    /* Q's tile, then K's first. */
    for (int c = tid; c < BQ * DT; c += THREADS) {
        int r = c / DT, d = c % DT * 8;
        bool ok = i0 + r < q_len && d < head;
        f2_cp16(qs + r * LD + d, ok ? qb + (int64_t)(i0 + r) * a.q_stride[2] + d : qb, ok);
    }
    auto load_k = [&](int j0) {
        if (kt)
            for (int c = tid; c < D * (F2_K / 8); c += THREADS) {
                int d = c / (F2_K / 8), j = j0 + c % (F2_K / 8) * 8;
                bool ok = d < head && j < n; /* n % 8 == 0 (f2_ok, fa_keys): all 8 keys */
                f2_cp16(ks + d * F2_LDT + (j - j0), ok ? kb + (int64_t)d * a.k_dstride + j : kb,
                        ok);
            }
        else
            for (int c = tid; c < F2_K * DT; c += THREADS) {
                int r = c / DT, d = c % DT * 8;
                bool ok = j0 + r < n && d < head;
                f2_cp16(ks + r * LD + d, ok ? kb + (int64_t)(j0 + r) * a.k_stride[2] + d : kb,
                        ok);
            }
        f2_cp_commit();
    };
    auto load_v = [&](int j0) {
        for (int c = tid; c < F2_K * DT; c += THREADS) {
            int r = c / DT, d = c % DT * 8;
            bool ok = j0 + r < n && d < v_head; /* zeros past n: 0 * inf would be NaN */
            f2_cp16(vs + r * LD + d, ok ? vb + (int64_t)(j0 + r) * a.v_stride[2] + d : vb, ok);
        }
        f2_cp_commit();
    };
    load_k(0);

    /* This lane's rows (g and g + 8 of the warp's 16) and their mask rows. */
    const int row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
    const int64_t nonpad = a.has_nonpad ? p.nonpad[b] : 0;
    const void *mrow[2] = {nullptr, nullptr};
    bool mpair[2] = {false, false};
    const bool masked = a.mask != ENG_ATTN_MASK_NONE;
    const int esz = a.mask == ENG_ATTN_MASK_BOOL ? 1 : 2;
#pragma unroll
    for (int s = 0; s < 2; s++) {
        int ic = row[s] < q_len ? row[s] : q_len - 1;
        if (masked) {
            mrow[s] = (const unsigned char *)p.mask +
                      (b * a.mask_stride[0] + h * a.mask_stride[1] + ic * a.mask_stride[2]) * esz;
            mpair[s] = ((uintptr_t)mrow[s] & (uintptr_t)(2 * esz - 1)) == 0;
        }
    }
    const bool same_mrow = a.mask_stride[2] == 0; /* both rows read one mask row */
    const bool biased = masked || closes != 0;
    const float sl2 = (float)a.scale * 1.4426950408889634f; /* scores in log2 units */

    unsigned qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
        o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    bool open[2] = {!biased, !biased};

    for (int tile = 0; tile < n_tiles; tile++) {
        const int j0 = tile * F2_K;
        f2_cp_wait_all(); /* K of this tile (and Q) are in; the last V reads are done below */
        __syncthreads();
        if (tile == 0)
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                f2_ldm(qf[kk], qs + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
        load_v(j0);

        /* S = Q K^T: s[nt] holds rows g, g + 8 and keys j0 + nt*8 + 2*t4 (+1). */
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                unsigned bf[4];
                if (kt)
                    f2_ldm_t(bf, ks + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * F2_LDT +
                                     np * 16 + (lane >> 4) * 8);
                else
                    f2_ldm(bf, ks + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 +
                                   ((lane >> 3) & 1) * 8);
                f2_mma<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                f2_mma<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
            }

        /* x = (scale * s + bias) * log2(e), -inf past the block's keys. */
        const bool full = j0 + F2_K <= n;
        if (!biased) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = j0 + nt * 8 + 2 * t4 + (e & 1);
                    s[nt][e] = full || j < n ? s[nt][e] * sl2 : -INFINITY;
                }
        } else {
            /* One loop a kind of closing (cl, constant in each), so that
             * none decides per key which one runs. */
            auto bias_tile = [&](auto cl) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    int j = j0 + nt * 8 + 2 * t4;
                    float tm[2][2] = {{0, 0}, {0, 0}};
                    if (masked) {
                        f2_mask_terms<T>(a, mrow[0], mpair[0], j, tm[0][0], tm[0][1]);
                        if (same_mrow)
                            tm[1][0] = tm[0][0], tm[1][1] = tm[0][1];
                        else
                            f2_mask_terms<T>(a, mrow[1], mpair[1], j, tm[1][0], tm[1][1]);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int rs = e >> 1, jj = j + (e & 1);
                        float bias = tm[rs][e & 1];
                        bool op = true;
                        if constexpr (decltype(cl)::value == 1)
                            op = jj <= row[rs];
                        else if constexpr (decltype(cl)::value == 2)
                            op = eng_attention_open(&a, row[rs], jj, nonpad);
                        if (!op)
                            bias += -INFINITY;
                        bool in = jj < n;
                        open[rs] = open[rs] || (in && bias != -INFINITY);
                        s[nt][e] =
                            in ? fmaf(s[nt][e], sl2, bias * 1.4426950408889634f) : -INFINITY;
                    }
                }
            };
            if (closes == 0)
                bias_tile(std::integral_constant<int, 0>());
            else if (closes == 1)
                bias_tile(std::integral_constant<int, 1>());
            else
                bias_tile(std::integral_constant<int, 2>());
        }

        /* Online softmax over the tile, per row: quads share rows. */
        float f[2];
#pragma unroll
        for (int rs = 0; rs < 2; rs++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mx = nan_maxf(mx, nan_maxf(s[nt][2 * rs], s[nt][2 * rs + 1]));
            mx = nan_maxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = nan_maxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = nan_maxf(m[rs], mx);
            /* While every score is -inf, subtract 0 (exp2(-inf) = 0) rather
             * than -inf (NaN). */
            float mu = mnew == -INFINITY ? 0.0f : mnew, sum = 0;
            f[rs] = exp2f(m[rs] - mu);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[nt][2 * rs] = exp2f(s[nt][2 * rs] - mu);
                s[nt][2 * rs + 1] = exp2f(s[nt][2 * rs + 1] - mu);
                sum += s[nt][2 * rs] + s[nt][2 * rs + 1];
            }
            l[rs] = l[rs] * f[rs] + sum; /* this lane's part; the quad's summed at the end */
            m[rs] = mnew;
        }
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            o[nt][0] *= f[0], o[nt][1] *= f[0];
            o[nt][2] *= f[1], o[nt][3] *= f[1];
        }

        f2_cp_wait_all(); /* V of this tile is in; every warp is past its K reads */
        __syncthreads();
        if (tile + 1 < n_tiles)
            load_k(j0 + F2_K);

        /* O += P V, P the scores as A fragments (keys 16 at a time). */
#pragma unroll
        for (int kk = 0; kk < F2_K / 16; kk++) {
            unsigned pa[4] = {f2_pack<T>(s[2 * kk][0], s[2 * kk][1]),
                              f2_pack<T>(s[2 * kk][2], s[2 * kk][3]),
                              f2_pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              f2_pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                unsigned bf[4];
                f2_ldm_t(bf, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                 (lane >> 4) * 8);
                f2_mma<T>(o[2 * dp], pa, bf[0], bf[1]);
                f2_mma<T>(o[2 * dp + 1], pa, bf[2], bf[3]);
            }
        }
    }

    /* Y = O / l, the quad's sums added; 0 for a row with no open key. */
#pragma unroll
    for (int rs = 0; rs < 2; rs++) {
        float lr = l[rs];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        int op = open[rs];
        op |= __shfl_xor_sync(0xffffffffu, op, 1);
        op |= __shfl_xor_sync(0xffffffffu, op, 2);
        if (row[rs] >= q_len)
            continue;
        const bool zero = !op || m[rs] == -INFINITY;
        unsigned *yr = (unsigned *)((unsigned short *)p.y +
                                    eng_attention_row(a.y_stride, b, h, row[rs]));
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            int d = nt * 8 + 2 * t4;
            if (d < v_head)
                yr[d / 2] = zero ? 0u : f2_pack<T>(o[nt][2 * rs] / lr, o[nt][2 * rs + 1] / lr);
        }
    }
}

template <typename T> fa_args<T> fa_args_of(const eng_op_ctx_t *c, const eng_attention_t *a)
{
    fa_args<T> p = {};
    p.q = (const T *)c->inputs[ENG_ATTN_Q]->data;
    p.k = (const T *)c->inputs[ENG_ATTN_K]->data;
    p.v = (const T *)c->inputs[ENG_ATTN_V]->data;
    if (a->mask != ENG_ATTN_MASK_NONE)
        p.mask = c->inputs[ENG_ATTN_MASK]->data;
    if (a->has_nonpad)
        p.nonpad = (const int64_t *)c->inputs[ENG_ATTN_NONPAD]->data;
    p.y = (T *)c->outputs[ENG_ATTN_Y]->data;
    return p;
}

template <typename T> int fma_launch(eng_op_ctx_t *c, const eng_attention_t *a, int nv)
{
    dim3 grid((unsigned)((a->q_len + FF_Q - 1) / FF_Q), (unsigned)a->q_heads, (unsigned)a->batch);
    fa_args<T> p = fa_args_of<T>(c, a);
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    switch (nv) {
#define FF_CASE(NV)                                                                     \
    case NV:                                                                            \
        flash_fma_kernel<T, NV><<<grid, FA_THREADS, 0, s>>>(*a, p);                     \
        break;
        FF_CASE(1) FF_CASE(2) FF_CASE(3) FF_CASE(4) FF_CASE(5) FF_CASE(6) FF_CASE(7) FF_CASE(8)
#undef FF_CASE
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

template <typename T> int mma_launch(eng_op_ctx_t *c, const eng_attention_t *a)
{
    int dp = (int)((a->head + 15) / 16 * 16), dvp = (int)((a->v_head + 15) / 16 * 16);
    size_t smem = fm_smem_bytes(dp, dvp);
    /* Above 48 KiB a block must opt in; idempotent, so each run may ask. */
    ENG_CUDA_TRY(c, cudaFuncSetAttribute(flash_mma_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a->q_len + FM_Q - 1) / FM_Q), (unsigned)a->q_heads, (unsigned)a->batch);
    flash_mma_kernel<T><<<grid, FA_THREADS, smem, eng_cuda_ctx(c)->stream>>>(*a, fa_args_of<T>(c, a),
                                                                            dp, dvp);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Whether flash_f2_kernel takes node a's shapes: head sizes multiples of 8
 * (the 16-byte pieces), every row stride a multiple of 8 elements, K^T's
 * keys a multiple of 8, positions that fit an int. */
static bool f2_strides_ok(const eng_attention_t *a)
{
    if (a->head % 8 || a->v_head % 8 || a->q_len > (1 << 30) || a->total_len > (1 << 30))
        return false;
    const int64_t *st[] = {a->q_stride, a->v_stride, a->y_stride};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < 3; s++)
            if (st[t][s] % 8)
                return false;
    if (a->k_stride[0] % 8 || a->k_stride[1] % 8 ||
        (a->k_t ? a->k_stride[2] != 1 || a->k_dstride % 8 : a->k_stride[2] % 8))
        return false;
    return true;
}

/* Whether flash_f2_kernel takes node a with K read from k: its shapes
 * (f2_strides_ok) and every tensor 16-byte aligned. Else flash_mma_kernel
 * runs, or K is unpacked first (kt_unpack). */
static bool f2_ok(const eng_op_ctx_t *c, const eng_attention_t *a, const void *k)
{
    if (!f2_strides_ok(a))
        return false;
    const void *ptr[] = {c->inputs[ENG_ATTN_Q]->data, k, c->inputs[ENG_ATTN_V]->data,
                         c->outputs[ENG_ATTN_Y]->data};
    for (int t = 0; t < 4; t++)
        if ((uintptr_t)ptr[t] % 16)
            return false;
    return true;
}

/* a with K read as [B, kv_heads, kv_len, head], contiguous: where
 * kt_unpack writes it. */
static eng_attention_t k_unpacked(const eng_attention_t *a)
{
    eng_attention_t u = *a;
    u.k_t = false;
    u.k_dstride = 1;
    u.k_stride[0] = a->kv_heads * a->kv_len * a->head;
    u.k_stride[1] = a->kv_len * a->head;
    u.k_stride[2] = a->head;
    return u;
}

/* K^T whose keys are no multiple of 8 (ViT's 197 patches: the dynamo
 * export reads K^T, whose rows flash_f2_kernel's 16-byte loads cannot
 * take) sends the node to flash_mma_kernel, several times slower (1.64 ms
 * against the chain's whole layer at ViT-B/16 fp16 batch 64). Unpacking K
 * into scratch first costs one pass over K (19 MB a layer there) and
 * keeps f2. The bytes that unpacking needs, else 0. */
static size_t kt_unpack_bytes(const eng_op_ctx_t *c, const eng_attention_t *a)
{
    eng_dtype_t dt = c->inputs[ENG_ATTN_Q]->dtype;
    if ((dt != ENG_DT_FLOAT16 && dt != ENG_DT_BFLOAT16) || !a->k_t || f2_strides_ok(a))
        return 0;
    eng_attention_t u = k_unpacked(a);
    if (!f2_strides_ok(&u))
        return 0;
    return (size_t)(a->batch * a->kv_heads * a->kv_len * a->head) * sizeof(uint16_t);
}

#define KU_TILE 32

/* K^T [B, kv_heads, head, kv_len] at a's strides (keys contiguous, head
 * elements k_dstride apart) into k [B, kv_heads, kv_len, head],
 * contiguous: a 32x32 tile through shared memory, so that both the reads
 * (along the keys) and the writes (along the head) are coalesced. */
template <typename T>
__global__ void kt_unpack_kernel(eng_attention_t a, const T *kt, T *k)
{
    __shared__ T tile[KU_TILE][KU_TILE + 1];
    const int64_t s0 = (int64_t)blockIdx.x * KU_TILE, d0 = (int64_t)blockIdx.y * KU_TILE;
    for (int64_t bh = blockIdx.z; bh < a.batch * a.kv_heads; bh += gridDim.z) {
        const int64_t b = bh / a.kv_heads, h = bh % a.kv_heads;
        const T *src = kt + b * a.k_stride[0] + h * a.k_stride[1];
        T *dst = k + bh * a.kv_len * a.head;
        for (int j = threadIdx.y; j < KU_TILE; j += blockDim.y) {
            int64_t d = d0 + j, s = s0 + threadIdx.x;
            if (d < a.head && s < a.kv_len)
                tile[j][threadIdx.x] = src[d * a.k_dstride + s];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < KU_TILE; j += blockDim.y) {
            int64_t s = s0 + j, d = d0 + threadIdx.x;
            if (d < a.head && s < a.kv_len)
                dst[s * a.head + d] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
}

template <typename T> int kt_unpack(eng_op_ctx_t *c, const eng_attention_t *a, void *k)
{
    int64_t bh = a->batch * a->kv_heads;
    dim3 grid((unsigned)((a->kv_len + KU_TILE - 1) / KU_TILE),
              (unsigned)((a->head + KU_TILE - 1) / KU_TILE), (unsigned)(bh < 65535 ? bh : 65535));
    kt_unpack_kernel<T><<<grid, dim3(KU_TILE, 8), 0, eng_cuda_ctx(c)->stream>>>(
        *a, (const T *)c->inputs[ENG_ATTN_K]->data, (T *)k);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

template <typename T, int D, int NW>
int f2_launch_dn(eng_op_ctx_t *c, const eng_attention_t *a, int closes, const void *k)
{
    fa_args<T> p = fa_args_of<T>(c, a);
    p.k = (const T *)k;
    size_t smem = f2_smem_bytes(D, NW);
    /* Above 48 KiB a block must opt in; idempotent, so each run may ask. */
    if (smem > 48 * 1024)
        ENG_CUDA_TRY(c, cudaFuncSetAttribute(flash_f2_kernel<T, D, NW>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem));
    dim3 grid((unsigned)((a->q_len + 16 * NW - 1) / (16 * NW)), (unsigned)a->q_heads,
              (unsigned)a->batch);
    flash_f2_kernel<T, D, NW><<<grid, NW * 32, smem, eng_cuda_ctx(c)->stream>>>(*a, p, closes);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* 64 queries a block (4 warps) when that gives at least two blocks a
 * multiprocessor, else 16 (1 warp), 4 times the blocks: at batch 1 a
 * 128-query head is 8 blocks, not 2; and 16 whenever there are at most 16
 * queries (decoding), which 64 would mostly pad. (16-query blocks each
 * read every K and V tile, 4 times the L2 traffic of 64-query ones, which
 * a full GPU pays for and a sparse one does not.) */
template <typename T> int f2_launch(eng_op_ctx_t *c, const eng_attention_t *a, const void *k)
{
    int64_t d = a->head > a->v_head ? a->head : a->v_head;
    int sm = eng_cuda_ctx(c)->sm_count > 0 ? eng_cuda_ctx(c)->sm_count : 80;
    bool wide = a->q_len > 16 && (a->q_len + 63) / 64 * a->q_heads * a->batch >= 2 * sm;
    int closes = a->has_nonpad || a->left_window >= 0 || a->right_window >= 0 ? 2
                 : a->causal                                                   ? 1
                                                                               : 0;
#define F2_CASE(DP)                                                                     \
    if (d <= DP)                                                                        \
        return wide ? f2_launch_dn<T, DP, 4>(c, a, closes, k)                          \
                    : f2_launch_dn<T, DP, 1>(c, a, closes, k);
    F2_HEADS(F2_CASE)
#undef F2_CASE
    return eng_op_err(c, FS_EINVAL, "Attention head size %lld is above the flash kernel's %d",
                      (long long)d, FA_DMAX);
}

} // namespace

bool eng_cuda_attention_fast_ok(const eng_op_ctx_t *c, const eng_attention_t *a)
{
    eng_dtype_t dt = c->inputs[ENG_ATTN_Q]->dtype;
    bool qk = c->n_outputs > ENG_ATTN_QK && c->outputs[ENG_ATTN_QK];
    return (dt == ENG_DT_FLOAT || dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16) && !qk &&
           !a->has_past && a->softcap == 0 && a->head >= 1 && a->head <= FA_DMAX &&
           a->v_head >= 1 && a->v_head <= FA_DMAX && a->q_heads <= 65535 &&
           a->batch <= 65535 && a->q_len >= 1 && a->total_len >= 1;
}

size_t eng_cuda_attention_fast_scratch(const eng_op_ctx_t *c, const eng_attention_t *a)
{
    return eng_cuda_attention_fast_ok(c, a) ? kt_unpack_bytes(c, a) : 0;
}

/* float16 / bfloat16: flash_f2_kernel on K as it is, or on K unpacked
 * into the scratch (kt_unpack_bytes), else flash_mma_kernel. */
template <typename T> static int half_launch(eng_op_ctx_t *c, const eng_attention_t *a)
{
    const void *k = c->inputs[ENG_ATTN_K]->data;
    if (f2_ok(c, a, k))
        return f2_launch<T>(c, a, k);
    size_t need = kt_unpack_bytes(c, a);
    eng_attention_t u = k_unpacked(a);
    if (need && c->scratch && c->scratch_bytes >= need && f2_ok(c, &u, c->scratch)) {
        int rc = kt_unpack<T>(c, a, c->scratch);
        return rc ? rc : f2_launch<T>(c, &u, c->scratch);
    }
    return mma_launch<T>(c, a);
}

int eng_cuda_attention_fast(eng_op_ctx_t *c, const eng_attention_t *a)
{
    switch (c->inputs[ENG_ATTN_Q]->dtype) {
    case ENG_DT_FLOAT16:
        return half_launch<f16_t>(c, a);
    case ENG_DT_BFLOAT16:
        return half_launch<bf16_t>(c, a);
    default: {
        int64_t d = a->head > a->v_head ? a->head : a->v_head;
        return fma_launch<float>(c, a, (int)((d + 15) / 16));
    }
    }
}
