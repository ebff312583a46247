/* attention.cu -- CUDA kernels of the transformer-block ops
 * (engine/ops/attention.c; engine/cpu/attention_kernels.c is the CPU
 * reference): Attention, RotaryEmbedding, SwiGLU.
 *
 * As on the CPU, every value is computed in double whatever the float
 * dtype (float, double, float16, bfloat16), so the softmax runs at least at
 * any softmax_precision's precision.
 *
 * Attention's common case (no past, no qk_matmul_output, no softcap, head
 * sizes up to 128, float/float16/bfloat16) runs the flash kernels of
 * engine/cuda/attention_flash.cu, in float and on tensor cores; the rest
 * runs the exact kernel here.
 *
 * The exact kernel takes one block per query row (batch, q head, query) and walks
 * the keys of the present cache in tiles of ATTN_TILE with an online
 * softmax: each warp scores keys of the tile (its lanes share the dot
 * product), the block takes the tile's max, rescales its running sum and
 * output row (in shared memory) to the new max and adds the tile's
 * exp-weighted values. The result equals the CPU's two-pass softmax up to
 * rounding; a NaN score makes the row NaN and a fully masked row gives
 * zeros, as there. qk_matmul_output modes 0 to 2 are written while
 * scoring; mode 3 (the probabilities) by a second pass that scores each key
 * again with the same code, so it sees the same bits. present_key and
 * present_value are one copy kernel each.
 *
 * RotaryEmbedding is one thread per rotated pair (reading both elements
 * before writing either, so Y may alias X) or per copied element; SwiGLU
 * one thread per element.
 *
 * Departure from the CPU kernels: RotaryEmbedding cannot report a bad
 * position id, since the device cannot return an error without
 * synchronising. A position id outside [0, max_pos) makes its row's rotated
 * elements zero (never a read out of bounds), where the CPU fails with
 * FS_EINVAL. */
#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/flash_impl.h"
#include "engine/cuda/nn_impl.h"
#include "engine/ops/attention_impl.h"

namespace {

/* ---- loads and stores in double ------------------------------------------------------------ */

__device__ inline double ld(float v) { return v; }
__device__ inline double ld(double v) { return v; }
__device__ inline double ld(f16_t v) { return eng_half_to_float(v.bits); }
__device__ inline double ld(bf16_t v) { return eng_bf16_to_float(v.bits); }

template <typename T> struct st_;
template <> struct st_<float> {
    __device__ static float to(double v) { return (float)v; }
};
template <> struct st_<double> {
    __device__ static double to(double v) { return v; }
};
template <> struct st_<f16_t> {
    __device__ static f16_t to(double v) { return f16_t{eng_float_to_half((float)v)}; }
};
template <> struct st_<bf16_t> {
    __device__ static bf16_t to(double v) { return bf16_t{eng_float_to_bf16((float)v)}; }
};
template <typename T> __device__ inline T st(double v)
{
    return st_<T>::to(v);
}

using attn_types = types<float, double, f16_t, bf16_t>;

/* NumPy's max: a NaN on either side wins. */
__device__ inline double nan_max(double a, double b)
{
    return a != a ? a : b != b ? b : b > a ? b : a;
}
struct nan_max_op {
    __device__ double operator()(double a, double b) const { return nan_max(a, b); }
    __device__ static double identity() { return -INFINITY; }
};

/* ---- Attention ------------------------------------------------------------------------------- */

#define ATTN_THREADS 128
#define ATTN_TILE 64
/* Dynamic shared memory a block may use without opting in. */
#define ATTN_SMEM_MAX (48 * 1024)

template <typename T> struct attn_data {
    const T *q, *k, *v, *past_k, *past_v;
    const void *mask; /* bool (uint8) or T */
    const int64_t *nonpad;
    T *y, *qk;        /* qk: NULL when not requested */
};

/* Key (value) `key` of kv head g in batch b (as the CPU's kv_row). */
template <typename T>
__device__ inline const T *kv_row(const eng_attention_t &a, const attn_data<T> &p, bool value,
                                  int64_t b, int64_t g, int64_t key)
{
    int64_t size = value ? a.v_head : a.head;
    if (key < a.past_len)
        return (value ? p.past_v : p.past_k) + ((b * a.kv_heads + g) * a.past_len + key) * size;
    return (value ? p.v : p.k) +
           eng_attention_row(value ? a.v_stride : a.k_stride, b, g, key - a.past_len);
}

/* One key's score by a whole warp: every lane gets s_j, c_j, x_j and
 * whether its bias is above -inf. q is the row in shared memory. */
struct attn_score_t {
    double s, cap, x;
    bool open;
};

template <typename T>
__device__ attn_score_t attn_score(const eng_attention_t &a, const attn_data<T> &p,
                                   const double *q, int64_t b, int64_t h, int64_t i, int64_t g,
                                   int64_t key, int64_t nonpad, int64_t mask_at)
{
    const T *k = kv_row(a, p, false, b, g, key);
    double s = 0;
    for (int64_t d = threadIdx.x & 31; d < a.head; d += 32)
        s += q[d] * ld(k[d * a.k_dstride]);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    attn_score_t r;
    r.s = a.head > 0 ? s * a.scale : 0;
    r.cap = eng_attention_softcap(&a, r.s);
    double mv = 0;
    if (a.mask == ENG_ATTN_MASK_BOOL && key < a.mask_len)
        mv = ((const uint8_t *)p.mask)[mask_at + key] != 0;
    else if (a.mask == ENG_ATTN_MASK_ADD && key < a.mask_len)
        mv = ld(((const T *)p.mask)[mask_at + key]);
    double bias = eng_attention_bias(&a, eng_attention_mask_term(&a, key, mv), i, key, nonpad);
    r.x = r.cap + bias;
    r.open = bias != -INFINITY;
    return r;
}

template <typename T> __global__ void attention_kernel(eng_attention_t a, attn_data<T> p)
{
    extern __shared__ double sm[];
    __shared__ double red[32];
    __shared__ int open_any;
    double *q = sm, *acc = q + a.head, *xs = acc + a.v_head;
    const int64_t n = a.total_len, rows = a.batch * a.q_heads * a.q_len;
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t i = r % a.q_len, bh = r / a.q_len, h = bh % a.q_heads, b = bh / a.q_heads;
        int64_t g = h / a.group, nonpad = a.has_nonpad ? p.nonpad[b] : 0;
        int64_t mask_at = b * a.mask_stride[0] + h * a.mask_stride[1] + i * a.mask_stride[2];
        const T *qr = p.q + eng_attention_row(a.q_stride, b, h, i);
        for (int64_t d = threadIdx.x; d < a.head; d += blockDim.x)
            q[d] = ld(qr[d]);
        for (int64_t d = threadIdx.x; d < a.v_head; d += blockDim.x)
            acc[d] = 0;
        if (threadIdx.x == 0)
            open_any = 0;
        __syncthreads();
        double m = -INFINITY, l = 0;
        for (int64_t j0 = 0; j0 < n; j0 += ATTN_TILE) {
            int cnt = n - j0 < ATTN_TILE ? (int)(n - j0) : ATTN_TILE;
            for (int t = warp; t < cnt; t += warps) {
                attn_score_t sc = attn_score(a, p, q, b, h, i, g, j0 + t, nonpad, mask_at);
                if (lane == 0) {
                    xs[t] = sc.x;
                    if (sc.open)
                        open_any = 1;
                    if (p.qk && a.mode < 3)
                        p.qk[r * n + j0 + t] =
                            st<T>(a.mode == 0 ? sc.s : a.mode == 1 ? sc.cap : sc.x);
                }
            }
            __syncthreads();
            double tmax = -INFINITY;
            for (int t = threadIdx.x; t < cnt; t += blockDim.x)
                tmax = nan_max(tmax, xs[t]);
            double mnew = nan_max(m, block_reduce(tmax, red, nan_max_op()));
            if (mnew == -INFINITY)
                continue; /* every score so far is -inf: nothing to add */
            double f = exp(m - mnew), psum = 0;
            for (int t = threadIdx.x; t < cnt; t += blockDim.x) {
                xs[t] = exp(xs[t] - mnew);
                psum += xs[t];
            }
            l = l * f + block_reduce(psum, red, sum_op());
            for (int64_t d = threadIdx.x; d < a.v_head; d += blockDim.x) {
                double s = acc[d] * f;
                for (int t = 0; t < cnt; t++)
                    s += xs[t] * ld(kv_row(a, p, true, b, g, j0 + t)[d]);
                acc[d] = s;
            }
            m = mnew;
            __syncthreads(); /* xs is read above before the next tile writes it */
        }
        bool open = open_any != 0;
        T *yr = p.y + eng_attention_row(a.y_stride, b, h, i);
        for (int64_t d = threadIdx.x; d < a.v_head; d += blockDim.x)
            yr[d] = st<T>(!open || m == -INFINITY ? 0.0 : acc[d] / l);
        if (p.qk && a.mode == 3)
            for (int64_t key = warp; key < n; key += warps) {
                attn_score_t sc = attn_score(a, p, q, b, h, i, g, key, nonpad, mask_at);
                if (lane == 0)
                    p.qk[r * n + key] =
                        st<T>(!open || m == -INFINITY ? 0.0 : exp(sc.x - m) / l);
            }
        __syncthreads(); /* q, acc and open_any are rewritten for the next row */
    }
}

/* present_key (value): element (b, g, key, d) of the 4-D cache from the
 * past or from K (V); U is an unsigned type of the element's size. */
template <typename U>
__global__ void present_kernel(eng_attention_t a, bool value, const U *cur, const U *past,
                               U *dst, int64_t n)
{
    int64_t size = value ? a.v_head : a.head, stride = value ? 1 : a.k_dstride;
    ENG_CUDA_FOR(e, n)
    {
        int64_t d = e % size, row = e / size, key = row % a.total_len, bg = row / a.total_len;
        int64_t g = bg % a.kv_heads, b = bg / a.kv_heads;
        dst[e] = key < a.past_len
                     ? past[(bg * a.past_len + key) * size + d]
                     : cur[eng_attention_row(value ? a.v_stride : a.k_stride, b, g,
                                             key - a.past_len) + d * stride];
    }
}

/* Queues present_key or present_value (output `out`) when requested. */
static int present_run(eng_op_ctx_t *c, const eng_attention_t *a, bool value)
{
    int out = value ? ENG_ATTN_PRESENT_VALUE : ENG_ATTN_PRESENT_KEY;
    if (c->n_outputs <= out || !c->outputs[out])
        return 0;
    const void *cur = c->inputs[value ? ENG_ATTN_V : ENG_ATTN_K]->data;
    const void *past =
        a->has_past ? c->inputs[value ? ENG_ATTN_PAST_VALUE : ENG_ATTN_PAST_KEY]->data : NULL;
    void *dst = c->outputs[out]->data;
    int64_t n = eng_shape_numel(value ? &a->present_value : &a->present_key);
    switch (eng_dtype_size(c->inputs[ENG_ATTN_Q]->dtype)) {
    case 2:
        return eng_cuda_launch(c, present_kernel<uint16_t>, n, *a, value, (const uint16_t *)cur,
                               (const uint16_t *)past, (uint16_t *)dst, n);
    case 4:
        return eng_cuda_launch(c, present_kernel<uint32_t>, n, *a, value, (const uint32_t *)cur,
                               (const uint32_t *)past, (uint32_t *)dst, n);
    default:
        return eng_cuda_launch(c, present_kernel<uint64_t>, n, *a, value, (const uint64_t *)cur,
                               (const uint64_t *)past, (uint64_t *)dst, n);
    }
}

/* Attention with its optional outputs. Errors (parameters, head sizes
 * past the shared memory a block has) come before anything is queued. */
static int attention_run(eng_op_ctx_t *c)
{
    eng_attention_t a;
    int rc = eng_attention_params(c, &a);
    if (rc)
        return rc;
    size_t smem = (size_t)(a.head + a.v_head + ATTN_TILE) * sizeof(double);
    if (smem > ATTN_SMEM_MAX)
        return eng_op_err(c, FS_ENOTSUP, "head sizes %lld (Q, K) and %lld (V) need %zu bytes of "
                          "shared memory per block, more than the %d this kernel uses",
                          (long long)a.head, (long long)a.v_head, smem, ATTN_SMEM_MAX);
    if ((rc = present_run(c, &a, false)) || (rc = present_run(c, &a, true)))
        return rc;
    int64_t rows = a.batch * a.q_heads * a.q_len;
    if (rows == 0)
        return 0;
    if (eng_cuda_attention_fast_ok(c, &a))
        return eng_cuda_attention_fast(c, &a);
    unsigned blocks = eng_cuda_grid_cap(c, rows);
    return dispatch(c->inputs[ENG_ATTN_Q]->dtype, attn_types{}, [&](auto t) {
        using T = decltype(t);
        attn_data<T> p = {};
        p.q = (const T *)c->inputs[ENG_ATTN_Q]->data;
        p.k = (const T *)c->inputs[ENG_ATTN_K]->data;
        p.v = (const T *)c->inputs[ENG_ATTN_V]->data;
        if (a.has_past) {
            p.past_k = (const T *)c->inputs[ENG_ATTN_PAST_KEY]->data;
            p.past_v = (const T *)c->inputs[ENG_ATTN_PAST_VALUE]->data;
        }
        if (a.mask != ENG_ATTN_MASK_NONE)
            p.mask = c->inputs[ENG_ATTN_MASK]->data;
        if (a.has_nonpad)
            p.nonpad = (const int64_t *)c->inputs[ENG_ATTN_NONPAD]->data;
        p.y = (T *)c->outputs[ENG_ATTN_Y]->data;
        if (c->n_outputs > ENG_ATTN_QK && c->outputs[ENG_ATTN_QK])
            p.qk = (T *)c->outputs[ENG_ATTN_QK]->data;
        attention_kernel<T><<<blocks, ATTN_THREADS, smem, eng_cuda_ctx(c)->stream>>>(a, p);
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* ---- RotaryEmbedding ------------------------------------------------------------------------- */

/* Work item e of rows x (rot / 2 + head - rot): a pair to rotate, or an
 * element past rot to copy. */
template <typename T>
__global__ void rotary_kernel(eng_rotary_t r, const T *x, const T *cs, const T *sn,
                              const int64_t *ids, T *y, int64_t n)
{
    const int64_t half = r.rot / 2, per_row = half + r.head - r.rot;
    ENG_CUDA_FOR(e, n)
    {
        int64_t k = e % per_row, row = e / per_row;
        int64_t s = row % r.seq, bh = row / r.seq, h = bh % r.heads, bt = bh / r.heads;
        int64_t at = eng_attention_row(r.x_stride, bt, h, s);
        if (k >= half) {
            int64_t d = r.rot + k - half;
            y[at + d] = x[at + d];
            continue;
        }
        int64_t cache_row = r.has_ids ? ids[bt * r.seq + s] : bt * r.seq + s;
        bool ok = !r.has_ids || (cache_row >= 0 && cache_row < r.max_pos);
        int64_t p1 = r.interleaved ? 2 * k : k, p2 = r.interleaved ? p1 + 1 : p1 + half;
        double a = ld(x[at + p1]), b = ld(x[at + p2]);
        double c = ok ? ld(cs[cache_row * half + k]) : 0, sv = ok ? ld(sn[cache_row * half + k]) : 0;
        y[at + p1] = st<T>(ok ? c * a - sv * b : 0.0);
        y[at + p2] = st<T>(ok ? sv * a + c * b : 0.0);
    }
}

/* RotaryEmbedding. Y may alias X. A bad position id cannot fail the run
 * (see the file comment). */
static int rotary_run(eng_op_ctx_t *c)
{
    eng_rotary_t r;
    int rc = eng_rotary_params(c, &r);
    if (rc)
        return rc;
    int64_t n = r.batch * r.heads * r.seq * (r.rot / 2 + r.head - r.rot);
    const int64_t *ids = r.has_ids ? (const int64_t *)c->inputs[3]->data : NULL;
    return dispatch(c->inputs[0]->dtype, attn_types{}, [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, rotary_kernel<T>, n, r, (const T *)c->inputs[0]->data,
                               (const T *)c->inputs[1]->data, (const T *)c->inputs[2]->data, ids,
                               (T *)c->outputs[0]->data, n);
    });
}

/* ---- SwiGLU ---------------------------------------------------------------------------------- */

template <typename T>
__global__ void swiglu_kernel(const T *a, const T *b, T *y, double alpha, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        double x = ld(a[i]);
        y[i] = st<T>(x / (1.0 + exp(-alpha * x)) * ld(b[i]));
    }
}

/* SwiGLU: y = a * sigmoid(alpha * a) * b. Y may alias A. */
static int swiglu_run(eng_op_ctx_t *c)
{
    int64_t n = eng_shape_numel(&c->inputs[0]->shape);
    double alpha = eng_attr_f(c->node, "alpha", 1.0f);
    return dispatch(c->inputs[0]->dtype, attn_types{}, [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, swiglu_kernel<T>, n, (const T *)c->inputs[0]->data,
                               (const T *)c->inputs[1]->data, (T *)c->outputs[0]->data, alpha, n);
    });
}

/* The fast kernels' scratch (eng_cuda_attention_fast_scratch); 0 for a
 * node they do not take or whose shapes do not fit (the run says why). */
static size_t attention_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_attention_t a;
    if (eng_attention_params(c, &a))
        return 0;
    return eng_cuda_attention_fast_scratch(c, &a);
}

} // namespace

const eng_kernel_t eng_cuda_Attention = {.run = attention_run,
                                         .scratch_bytes = attention_scratch_bytes};
const eng_kernel_t eng_cuda_RotaryEmbedding = {.run = rotary_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_SwiGLU = {.run = swiglu_run, .scratch_bytes = NULL};
