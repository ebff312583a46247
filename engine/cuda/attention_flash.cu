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
 *  - float16 / bfloat16 (flash_mma_kernel): 4 warps, 64 queries and 64
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

int eng_cuda_attention_fast(eng_op_ctx_t *c, const eng_attention_t *a)
{
    switch (c->inputs[ENG_ATTN_Q]->dtype) {
    case ENG_DT_FLOAT16:
        return mma_launch<f16_t>(c, a);
    case ENG_DT_BFLOAT16:
        return mma_launch<bf16_t>(c, a);
    default: {
        int64_t d = a->head > a->v_head ? a->head : a->v_head;
        return fma_launch<float>(c, a, (int)((d + 15) / 16));
    }
    }
}
