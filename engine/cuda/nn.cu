/* nn.cu -- CUDA kernels of the nn ops (engine/ops/nn.c defines them;
 * engine/cpu/nn_kernels.c is the CPU reference), on the normalised 3-D
 * geometry of engine/ops/nn_impl.h.
 *
 * Conv: a 1x1 / stride-1 / unpadded kernel is a GEMM straight on X; a
 * depthwise Conv (one input and one output channel per group) is a direct
 * kernel, one thread per output; every other Conv copies the input windows
 * of a chunk of images into a column buffer in the scratch (im2col, one
 * thread per column entry) and multiplies W_g [M/group, C/group * K] by each
 * image's and group's columns with strided-batched GEMMs (one call per
 * group over the images, or per image over the groups, whichever batches
 * more). The bias is written into Y first and the GEMMs accumulate onto it
 * (beta 1). Departure from the CPU: the CPU builds one image's and group's
 * columns at a time; here a chunk of images (as many as fit in
 * COL_CHUNK_BYTES, at least one) shares one im2col launch and one GEMM call.
 *
 * ConvTranspose: col [M/group * K, IN] = W_g^T x X_g by the same batched
 * GEMMs, then a gather col2im: each output pixel sums the column entries
 * that map onto it (in tap order, as the CPU's scatter adds them), so no
 * atomics and the result is deterministic; the bias is added at the end as
 * on the CPU.
 *
 * fp16/bf16 precision: W (input 1 of Conv and ConvTranspose) may be a
 * weight the engine stored as half or bfloat16 at load; X, B and Y stay
 * float32. Conv's GEMMs then take their columns in W's dtype: im2col
 * writes them so directly, and a pointwise Conv converts its chunk of X
 * into the scratch (the same chunking, in 2-byte elements); ConvTranspose
 * converts its chunk of X into the scratch after the float columns. Both
 * multiply through eng_cuda_gemm_lowp (tensor cores, fp32 accumulation,
 * float32 results). A depthwise Conv reads the half / bfloat16 taps as
 * float and computes as before. With a float32 W nothing changes.
 *
 * Pools: one thread per output element, summing (AveragePool, in double)
 * or taking the maximum (MaxPool, NaN wins, optional Indices in
 * storage_order) over the taps that fall inside X, in the CPU's tap order.
 * The global pools take one block per (image, channel) plane.
 *
 * Normalisations: BatchNormalization folds each channel into a multiply
 * and an add (in float, as the CPU; 2 * C floats of scratch) and applies
 * them element-wise, four floats at a time when the planes allow.
 * InstanceNormalization and LayerNormalization take one block per plane or
 * row with the CPU's two-pass moments in double (sum, then the sum of
 * squared deviations), each block reducing through warp shuffles and
 * shared memory; the block reads its whole row before writing any of it, so
 * Y may alias X. LRN is one thread per element, in double as the CPU.
 *
 * Index arithmetic: the element-wise kernels split flat indices with
 * divisions by fixed divisors; when every index fits in 31 bits they use a
 * multiply-shift division (udiv_t) instead of 64-bit division. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/nn_impl.h"

static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_float_u8[] = {ENG_DT_FLOAT, ENG_DT_UINT8, ENG_DT_UNDEFINED};
/* A Conv / ConvTranspose weight: float32, or as fp16/bf16 precision stored
 * it. */
static const eng_dtype_t dt_weight[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                        ENG_DT_UNDEFINED};

/* Most scratch a convolution's column buffer takes for a chunk of images
 * (a single image's columns may need more; they then get exactly that). */
#define COL_CHUNK_BYTES ((size_t)64 << 20)

/* FS_ENOTSUP unless inputs [0, n) that are present are float. */
static int require_float_inputs(const eng_op_ctx_t *c, int n)
{
    for (int i = 0; i < n && i < c->n_inputs; i++) {
        if (!c->inputs[i])
            continue;
        int rc = eng_op_require_dtype(c, i, dt_float);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- index arithmetic --------------------------------------------------- */

/* Division of non-negative indices by a fixed divisor d >= 1: with Small
 * (dividend and divisor below 2^31) as n * m >> 32 plus a shift
 * (Granlund-Montgomery, the form PyTorch's IntDivider uses), else plain
 * 64-bit division. */
typedef struct udiv {
    int64_t d;
    uint32_t m, s;
} udiv_t;

static udiv_t udiv_make(int64_t d)
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
static bool fits32(int64_t max_index)
{
    return max_index <= INT32_MAX;
}

/* Launches kernel k over n items (grid-stride, ENG_CUDA_THREADS per
 * block) on ctx's stream; n == 0 launches nothing. */
template <typename... P, typename... A>
static int launch(const eng_op_ctx_t *c, void (*k)(P...), int64_t n, A... args)
{
    if (n <= 0)
        return 0;
    k<<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(args...);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Flat output index -> (plane, d, h, w) for an output of `plane` positions
 * per (image, channel) plane and spatial dims [.., h, w]. */
typedef struct out_index {
    udiv_t plane, h, w;
} out_index_t;

static out_index_t out_index_make(const int64_t out[ENG_NN_DIMS])
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

/* eng_nn_prod for device code. */
static __device__ __forceinline__ int64_t prod3(const int64_t d[ENG_NN_DIMS])
{
    return d[0] * d[1] * d[2];
}

/* The taps of the window at output position o along dim i that land in
 * [lo, hi) of the image (as the CPU's window_at). */
typedef struct window {
    int64_t start, k_begin, k_end;
} window_t;

static __device__ __forceinline__ window_t window_at(const eng_nn_geom_t &g, int i, int64_t o,
                                                     int64_t lo, int64_t hi)
{
    window_t w = {o * g.stride[i] - g.pad_begin[i], 0, g.kernel[i]};
    int64_t d = g.dilation[i];
    while (w.k_begin < w.k_end && w.start + w.k_begin * d < lo)
        w.k_begin++;
    while (w.k_end > w.k_begin && w.start + (w.k_end - 1) * d >= hi)
        w.k_end--;
    return w;
}

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
static unsigned row_threads(int64_t n)
{
    unsigned t = 32;
    while (t < 512 && (int64_t)t * 4 < n)
        t *= 2;
    return t;
}

/* Blocks for a loop of one block per row. */
static unsigned row_blocks(int64_t rows)
{
    return (unsigned)(rows < INT32_MAX ? rows : INT32_MAX);
}

/* Two-pass moments of a row of n floats in double, as the CPU's moments:
 * the mean, then 1 / sqrt(mean squared deviation + eps). */
static __device__ void row_moments(const float *x, int64_t n, double eps, double *smem,
                                   double *mean, double *inv_std)
{
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += x[i];
    s = block_reduce(s, smem, sum_op());
    double m = n ? s / (double)n : 0;
    double q = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        q += (x[i] - m) * (x[i] - m);
    q = block_reduce(q, smem, sum_op());
    *mean = m;
    *inv_std = 1.0 / sqrt((n ? q / (double)n : 0) + eps);
}

/* ---- Conv --------------------------------------------------------------- */

/* FS_ENOTSUP unless X and B (when present) are float and W is float, half
 * or bfloat16. */
static int require_conv_inputs(const eng_op_ctx_t *c)
{
    for (int i = 0; i < 3 && i < c->n_inputs; i++) {
        if (!c->inputs[i])
            continue;
        int rc = eng_op_require_dtype(c, i, i == 1 ? dt_weight : dt_float);
        if (rc)
            return rc;
    }
    return 0;
}

/* Whether W (input 1) is half or bfloat16. */
static bool weight_is_lowp(const eng_op_ctx_t *c)
{
    return c->n_inputs > 1 && c->inputs[1] && eng_cuda_is_lowp(c->inputs[1]->dtype);
}

/* A weight element as float. */
static __device__ __forceinline__ float weight_float(float v)
{
    return v;
}
static __device__ __forceinline__ float weight_float(__half v)
{
    return __half2float(v);
}
static __device__ __forceinline__ float weight_float(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

/* A column element from float: itself, or rounded to nearest even (as
 * eng_cuda_to_lowp rounds). */
template <typename T> static __device__ __forceinline__ T col_elem(float v);
template <> __device__ __forceinline__ float col_elem<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __half col_elem<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 col_elem<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* y[i] = bias[channel of i] over [N, M, plane]. */
template <bool Small>
static __global__ void conv_fill_bias(float *y, const float *bias, udiv_t plane,
                                      udiv_t channels, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t p = udiv_q<Small>(plane, i);
        y[i] = bias[p - udiv_q<Small>(channels, p) * channels.d];
    }
}

/* im2col of `n` column entries for a chunk of images: entry i is column
 * (output position) i % OUT of row i / OUT = (image * C + c) * K + tap,
 * written as T (float, or W's half / bfloat16). */
typedef struct im2col_args {
    const float *x;
    void *col;
    int64_t n, in_sz;
    out_index_t out;
    udiv_t taps, kh, kw;
} im2col_args_t;

template <bool Small, typename T>
static __global__ void conv_im2col(im2col_args_t a, eng_nn_geom_t g)
{
    T *col = (T *)a.col;
    ENG_CUDA_FOR(i, a.n)
    {
        int64_t o[3], k[3];
        int64_t r = out_pos<Small>(a.out, i, o);
        int64_t ch = udiv_q<Small>(a.taps, r), t = r - ch * a.taps.d;
        int64_t u = udiv_q<Small>(a.kw, t);
        k[2] = t - u * a.kw.d;
        k[0] = udiv_q<Small>(a.kh, u);
        k[1] = u - k[0] * a.kh.d;
        int64_t at[3];
        bool inside = true;
        for (int d = 0; d < ENG_NN_DIMS; d++) {
            at[d] = o[d] * g.stride[d] - g.pad_begin[d] + k[d] * g.dilation[d];
            inside = inside && (uint64_t)at[d] < (uint64_t)g.in[d];
        }
        col[i] = col_elem<T>(
            inside ? a.x[ch * a.in_sz + (at[0] * g.in[1] + at[1]) * g.in[2] + at[2]] : 0.0f);
    }
}

/* Launches im2col writing columns of dtype dt (float, half, bfloat16). */
static int conv_im2col_run(const eng_op_ctx_t *c, eng_dtype_t dt, bool small,
                           const im2col_args_t &a, const eng_nn_geom_t &g)
{
    if (dt == ENG_DT_FLOAT16)
        return launch(c, small ? conv_im2col<true, __half> : conv_im2col<false, __half>, a.n, a, g);
    if (dt == ENG_DT_BFLOAT16)
        return launch(c,
                      small ? conv_im2col<true, __nv_bfloat16> : conv_im2col<false, __nv_bfloat16>,
                      a.n, a, g);
    return launch(c, small ? conv_im2col<true, float> : conv_im2col<false, float>, a.n, a, g);
}

/* Depthwise Conv, one thread per output: the bias, then weight x input
 * for each tap inside X in (kd, kh, kw) order, as the CPU sums them (W of
 * type Wt: float, or half / bfloat16 read as float). */
template <bool Small, typename Wt>
static __global__ void conv_depthwise(const float *x, const Wt *w, const float *bias,
                                      float *y, eng_nn_geom_t g, out_index_t out, udiv_t channels,
                                      int64_t n)
{
    int64_t in_sz = prod3(g.in), taps = prod3(g.kernel);
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3];
        int64_t pl = out_pos<Small>(out, i, o);
        int64_t ch = pl - udiv_q<Small>(channels, pl) * channels.d;
        window_t wd = window_at(g, 0, o[0], 0, g.in[0]), wh = window_at(g, 1, o[1], 0, g.in[1]);
        window_t ww = window_at(g, 2, o[2], 0, g.in[2]);
        const float *xp = x + pl * in_sz;
        const Wt *wk = w + ch * taps;
        float acc = bias ? bias[ch] : 0.0f;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                /* Row start at tap kw = 0 (outside X when ww.k_begin > 0). */
                int64_t row = ((wd.start + kd * g.dilation[0]) * g.in[1] + wh.start +
                               kh * g.dilation[1]) * g.in[2] + ww.start;
                const Wt *wr = wk + (kd * g.kernel[1] + kh) * g.kernel[2];
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                    acc += weight_float(wr[kw]) * xp[row + kw * g.dilation[2]];
            }
        y[i] = acc;
    }
}

/* For each image i < n_img and group gi < group: Y(i, gi) = op(A(gi)) x
 * B(i, gi) + beta * Y(i, gi), each operand at its base plus i * its image
 * stride plus gi * its group stride (A is shared by the images). A and B
 * are both of dtype dt: float, or both half / bfloat16 (strides in
 * elements either way); Y is float. */
typedef struct grouped_gemm {
    eng_dtype_t dt;
    bool trans_a;
    int64_t m, n, k;
    const void *a;
    int64_t lda, a_grp;
    const void *b;
    int64_t ldb, b_img, b_grp;
    float *y;
    int64_t ldc, y_img, y_grp;
    float beta;
    int64_t n_img, group;
} grouped_gemm_t;

/* One strided-batched GEMM of p's shape: A, B and Y at element offsets
 * a_off, b_off, y_off, each with its stride between the `batch` problems. */
static int grouped_gemm_call(const eng_op_ctx_t *c, const grouped_gemm_t *p, int64_t a_off,
                             int64_t stride_a, int64_t b_off, int64_t stride_b, int64_t y_off,
                             int64_t stride_y, int64_t batch)
{
    if (p->dt == ENG_DT_FLOAT)
        return eng_cuda_sgemm(c, p->trans_a, false, p->m, p->n, p->k, 1.0f,
                              (const float *)p->a + a_off, p->lda, stride_a,
                              (const float *)p->b + b_off, p->ldb, stride_b, p->beta,
                              p->y + y_off, p->ldc, stride_y, batch);
    return eng_cuda_gemm_lowp(c, p->dt, p->trans_a, false, p->m, p->n, p->k, 1.0f,
                              (const char *)p->a + a_off * ENG_CUDA_LOWP_BYTES, p->lda, stride_a,
                              (const char *)p->b + b_off * ENG_CUDA_LOWP_BYTES, p->ldb, stride_b,
                              p->beta, p->y + y_off, p->ldc, stride_y, batch);
}

/* One strided-batched GEMM per group over the images, or per image over
 * the groups, whichever batches more. 0 or eng_cuda_sgemm's (or
 * eng_cuda_gemm_lowp's) error. */
static int grouped_gemm_run(const eng_op_ctx_t *c, const grouped_gemm_t *p)
{
    int rc = 0;
    if (p->n_img >= p->group) {
        for (int64_t gi = 0; gi < p->group && !rc; gi++)
            rc = grouped_gemm_call(c, p, gi * p->a_grp, 0, gi * p->b_grp, p->b_img,
                                   gi * p->y_grp, p->y_img, p->n_img);
    } else {
        for (int64_t i = 0; i < p->n_img && !rc; i++)
            rc = grouped_gemm_call(c, p, 0, p->a_grp, i * p->b_img, p->b_grp, i * p->y_img,
                                   p->y_grp, p->group);
    }
    return rc;
}

/* Images per column-buffer chunk for `per_image_bytes` of scratch each:
 * as many as COL_CHUNK_BYTES holds, at least one, at most batch. */
static int64_t col_chunk_images(int64_t batch, size_t per_image_bytes)
{
    if (per_image_bytes == 0 || batch <= 0)
        return 0;
    int64_t nb = (int64_t)(COL_CHUNK_BYTES / per_image_bytes);
    return nb < 1 ? 1 : nb > batch ? batch : nb;
}

/* Images per chunk that the given scratch holds; FS_EINVAL when not even
 * one. */
static int col_chunk_from_scratch(const eng_op_ctx_t *c, int64_t batch, int64_t per_image,
                                  int64_t *nb)
{
    size_t per_bytes = (size_t)per_image * sizeof(float);
    *nb = per_bytes ? (int64_t)(c->scratch_bytes / per_bytes) : batch;
    if (*nb > batch)
        *nb = batch;
    if (*nb < 1 && batch > 0)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, per_bytes);
    return 0;
}

/* A Conv's scratch: the columns of a chunk of images, float or (with a
 * half / bfloat16 W) in W's dtype. A pointwise Conv's columns are X's
 * image itself (the same count: one tap, OUT == IN): none with a float W,
 * converted with a half / bfloat16 one. A depthwise Conv needs none. */
static size_t conv_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV, &g) != 0 || eng_nn_conv_is_depthwise(&g))
        return 0;
    bool lowp = weight_is_lowp(c);
    if (!lowp && eng_nn_conv_is_pointwise(&g))
        return 0;
    size_t elem = lowp ? ENG_CUDA_LOWP_BYTES : sizeof(float);
    int64_t per = g.in_channels * eng_nn_prod(g.kernel) * eng_nn_prod(g.out);
    return (size_t)(col_chunk_images(g.batch, (size_t)per * elem) * per) * elem;
}

/* Depthwise Conv launch, W of dtype wdt. */
static int conv_depthwise_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, const float *x,
                              const void *w, eng_dtype_t wdt, const float *bias, float *y)
{
    int64_t n = g->batch * g->out_channels * eng_nn_prod(g->out);
    int64_t in_n = g->batch * g->in_channels * eng_nn_prod(g->in);
    bool small = fits32(n > in_n ? n : in_n);
    out_index_t out = out_index_make(g->out);
    udiv_t ch = udiv_make(g->out_channels);
    if (wdt == ENG_DT_FLOAT16)
        return launch(c, small ? conv_depthwise<true, __half> : conv_depthwise<false, __half>, n, x,
                      (const __half *)w, bias, y, *g, out, ch, n);
    if (wdt == ENG_DT_BFLOAT16)
        return launch(c,
                      small ? conv_depthwise<true, __nv_bfloat16>
                            : conv_depthwise<false, __nv_bfloat16>,
                      n, x, (const __nv_bfloat16 *)w, bias, y, *g, out, ch, n);
    return launch(c, small ? conv_depthwise<true, float> : conv_depthwise<false, float>, n, x,
                  (const float *)w, bias, y, *g, out, ch, n);
}

/* Conv's GEMMs with a half / bfloat16 W (p filled but for B and Y): a
 * chunk of images at a time, their columns written in W's dtype into the
 * scratch -- X's images converted for a pointwise Conv, else im2col -- then
 * multiplied. On error (scratch) nothing more is written. */
static int conv_lowp_gemms(const eng_op_ctx_t *c, const eng_nn_geom_t *g, grouped_gemm_t *p,
                           const float *x, float *y)
{
    int64_t taps = eng_nn_prod(g->kernel), in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out);
    int64_t per = g->in_channels * taps * out_sz;
    int64_t nb = col_chunk_images(g->batch, (size_t)per * ENG_CUDA_LOWP_BYTES);
    size_t need = (size_t)(nb * per) * ENG_CUDA_LOWP_BYTES;
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    bool pointwise = eng_nn_conv_is_pointwise(g);
    im2col_args_t a;
    a.col = c->scratch;
    a.in_sz = in_sz;
    a.out = out_index_make(g->out);
    a.taps = udiv_make(taps);
    a.kh = udiv_make(g->kernel[1]);
    a.kw = udiv_make(g->kernel[2]);
    p->b = c->scratch;
    p->b_img = per;
    p->b_grp = g->in_channels / g->group * taps * out_sz;
    for (int64_t n0 = 0; n0 < g->batch; n0 += nb) {
        int64_t cnt = g->batch - n0 < nb ? g->batch - n0 : nb;
        const float *xc = x + n0 * g->in_channels * in_sz;
        int rc;
        if (pointwise) {
            rc = eng_cuda_to_lowp(c, p->dt, c->scratch, xc, cnt * per);
        } else {
            a.x = xc;
            a.n = cnt * per;
            int64_t in_n = cnt * g->in_channels * in_sz;
            rc = conv_im2col_run(c, p->dt, fits32(a.n > in_n ? a.n : in_n), a, *g);
        }
        if (rc)
            return rc;
        p->y = y + n0 * g->out_channels * out_sz;
        p->n_img = cnt;
        if ((rc = grouped_gemm_run(c, p)))
            return rc;
    }
    return 0;
}

/* Conv. On error (geometry, scratch, cuBLAS range, launch) Y may be partly
 * written. */
static int conv_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = require_conv_inputs(c);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_CONV, &g)))
        return rc;
    const float *x = (const float *)c->inputs[0]->data;
    const void *w = c->inputs[1]->data;
    eng_dtype_t wdt = c->inputs[1]->dtype;
    const eng_tensor_t *bt = eng_ctx_in(c, 2);
    const float *bias = bt ? (const float *)bt->data : NULL;
    float *y = (float *)c->outputs[0]->data;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    int64_t y_n = g.batch * g.out_channels * out_sz;
    if (y_n == 0)
        return 0;
    if (eng_nn_conv_is_depthwise(&g))
        return conv_depthwise_run(c, &g, x, w, wdt, bias, y);
    /* Y starts as the bias and the GEMMs accumulate onto it. */
    if (bias && (rc = launch(c, fits32(y_n) ? conv_fill_bias<true> : conv_fill_bias<false>, y_n, y,
                             bias, udiv_make(out_sz), udiv_make(g.out_channels), y_n)))
        return rc;
    if (cg * taps == 0) {
        if (!bias)
            ENG_CUDA_TRY(c,
                         cudaMemsetAsync(y, 0, (size_t)y_n * sizeof *y, eng_cuda_ctx(c)->stream));
        return 0;
    }
    /* Y_g [M/group, OUT] = W_g [M/group, C/group * K] x columns [C/group * K, OUT]. */
    grouped_gemm_t p;
    memset(&p, 0, sizeof p);
    p.dt = wdt;
    p.m = mg;
    p.n = out_sz;
    p.k = cg * taps;
    p.a = w;
    p.lda = cg * taps;
    p.a_grp = mg * cg * taps;
    p.ldb = out_sz;
    p.ldc = out_sz;
    p.y_img = g.out_channels * out_sz;
    p.y_grp = mg * out_sz;
    p.beta = bias ? 1.0f : 0.0f;
    p.n_img = g.batch;
    p.group = g.group;
    if (eng_cuda_is_lowp(wdt))
        return conv_lowp_gemms(c, &g, &p, x, y);
    if (eng_nn_conv_is_pointwise(&g)) {
        p.b = x;
        p.b_img = g.in_channels * in_sz;
        p.b_grp = cg * in_sz;
        p.y = y;
        return grouped_gemm_run(c, &p);
    }
    int64_t per = g.in_channels * taps * out_sz, nb;
    if ((rc = col_chunk_from_scratch(c, g.batch, per, &nb)))
        return rc;
    float *col = (float *)c->scratch;
    im2col_args_t a;
    a.col = col;
    a.in_sz = in_sz;
    a.out = out_index_make(g.out);
    a.taps = udiv_make(taps);
    a.kh = udiv_make(g.kernel[1]);
    a.kw = udiv_make(g.kernel[2]);
    p.b = col;
    p.b_img = per;
    p.b_grp = cg * taps * out_sz;
    for (int64_t n0 = 0; n0 < g.batch; n0 += nb) {
        int64_t cnt = g.batch - n0 < nb ? g.batch - n0 : nb;
        a.x = x + n0 * g.in_channels * in_sz;
        a.n = cnt * per;
        bool small = fits32(a.n > cnt * g.in_channels * in_sz ? a.n : cnt * g.in_channels * in_sz);
        if ((rc = conv_im2col_run(c, ENG_DT_FLOAT, small, a, g)))
            return rc;
        p.y = y + n0 * g.out_channels * out_sz;
        p.n_img = cnt;
        if ((rc = grouped_gemm_run(c, &p)))
            return rc;
    }
    return 0;
}

/* ---- ConvTranspose ------------------------------------------------------ */

/* Gather col2im for a chunk of images: output pixel i of plane
 * (image * M + m) sums, over the taps in (kd, kh, kw) order, the column
 * entry of the input position whose window puts that tap on it; then the
 * bias. */
typedef struct col2im_args {
    const float *col, *bias;
    float *y;
    int64_t n;
    out_index_t out;
    udiv_t channels, stride[ENG_NN_DIMS];
} col2im_args_t;

template <bool Small>
static __global__ void conv_col2im(col2im_args_t a, eng_nn_geom_t g)
{
    int64_t in_sz = prod3(g.in), taps = prod3(g.kernel);
    ENG_CUDA_FOR(i, a.n)
    {
        int64_t o[3];
        int64_t pl = out_pos<Small>(a.out, i, o);
        int64_t m = pl - udiv_q<Small>(a.channels, pl) * a.channels.d;
        const float *cp = a.col + pl * taps * in_sz;
        float acc = 0.0f;
        for (int64_t kd = 0; kd < g.kernel[0]; kd++) {
            int64_t pd = o[0] + g.pad_begin[0] - kd * g.dilation[0];
            if (pd < 0)
                break;
            int64_t id = udiv_q<Small>(a.stride[0], pd);
            if (id * g.stride[0] != pd || id >= g.in[0])
                continue;
            for (int64_t kh = 0; kh < g.kernel[1]; kh++) {
                int64_t ph = o[1] + g.pad_begin[1] - kh * g.dilation[1];
                if (ph < 0)
                    break;
                int64_t ih = udiv_q<Small>(a.stride[1], ph);
                if (ih * g.stride[1] != ph || ih >= g.in[1])
                    continue;
                for (int64_t kw = 0; kw < g.kernel[2]; kw++) {
                    int64_t pw = o[2] + g.pad_begin[2] - kw * g.dilation[2];
                    if (pw < 0)
                        break;
                    int64_t iw = udiv_q<Small>(a.stride[2], pw);
                    if (iw * g.stride[2] != pw || iw >= g.in[2])
                        continue;
                    int64_t t = (kd * g.kernel[1] + kh) * g.kernel[2] + kw;
                    acc += cp[t * in_sz + (id * g.in[1] + ih) * g.in[2] + iw];
                }
            }
        }
        a.y[i] = a.bias ? acc + a.bias[m] : acc;
    }
}

/* ConvTranspose's scratch with a half / bfloat16 W: for a chunk of nb
 * images, the float columns (per image: M * K * IN), then at the next
 * 256-byte boundary, x_off, those images of X in W's dtype. */
typedef struct convt_lowp_layout {
    int64_t nb;
    size_t x_off, bytes;
} convt_lowp_layout_t;

static convt_lowp_layout_t convt_lowp_layout(const eng_nn_geom_t *g)
{
    int64_t per = g->out_channels * eng_nn_prod(g->kernel) * eng_nn_prod(g->in);
    int64_t x_per = g->in_channels * eng_nn_prod(g->in);
    convt_lowp_layout_t l;
    l.nb = col_chunk_images(g->batch, (size_t)per * sizeof(float) +
                                          (size_t)x_per * ENG_CUDA_LOWP_BYTES);
    if (l.nb < 1)
        l.nb = g->batch > 0 ? g->batch : 0; /* nothing per image: one chunk */
    l.x_off = ((size_t)(l.nb * per) * sizeof(float) + 255) / 256 * 256;
    l.bytes = l.x_off + (size_t)(l.nb * x_per) * ENG_CUDA_LOWP_BYTES;
    return l;
}

static size_t conv_transpose_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g) != 0)
        return 0;
    if (weight_is_lowp(c))
        return convt_lowp_layout(&g).bytes;
    int64_t per = g.out_channels * eng_nn_prod(g.kernel) * eng_nn_prod(g.in);
    return (size_t)(col_chunk_images(g.batch, (size_t)per * sizeof(float)) * per) * sizeof(float);
}

/* ConvTranspose. On error (geometry, scratch, cuBLAS range, launch) Y may
 * be partly written. */
static int conv_transpose_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = require_conv_inputs(c);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g)))
        return rc;
    const float *x = (const float *)c->inputs[0]->data;
    const void *w = c->inputs[1]->data;
    eng_dtype_t wdt = c->inputs[1]->dtype;
    bool lowp = eng_cuda_is_lowp(wdt);
    const eng_tensor_t *bt = eng_ctx_in(c, 2);
    float *y = (float *)c->outputs[0]->data, *col = (float *)c->scratch;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    if (g.batch * g.out_channels * out_sz == 0)
        return 0;
    int64_t per = g.out_channels * taps * in_sz, nb;
    /* With a half / bfloat16 W: X's chunk in W's dtype, after the columns. */
    void *x_lowp = NULL;
    if (lowp) {
        convt_lowp_layout_t l = convt_lowp_layout(&g);
        if (c->scratch_bytes < l.bytes)
            return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                              c->scratch_bytes, l.bytes);
        nb = l.nb;
        x_lowp = (char *)c->scratch + l.x_off;
    } else if ((rc = col_chunk_from_scratch(c, g.batch, per, &nb))) {
        return rc;
    }
    /* col_g [M/group * K, IN] = W_g^T (W_g: [C/group, M/group * K]) x X_g [C/group, IN]. */
    grouped_gemm_t p;
    memset(&p, 0, sizeof p);
    p.dt = wdt;
    p.trans_a = true;
    p.m = mg * taps;
    p.n = in_sz;
    p.k = cg;
    p.a = w;
    p.lda = mg * taps;
    p.a_grp = cg * mg * taps;
    p.ldb = in_sz;
    p.b_img = g.in_channels * in_sz;
    p.b_grp = cg * in_sz;
    p.y = col;
    p.ldc = in_sz;
    p.y_img = per;
    p.y_grp = mg * taps * in_sz;
    p.group = g.group;
    col2im_args_t a;
    a.col = col;
    a.bias = bt ? (const float *)bt->data : NULL;
    a.out = out_index_make(g.out);
    a.channels = udiv_make(g.out_channels);
    for (int i = 0; i < ENG_NN_DIMS; i++)
        a.stride[i] = udiv_make(g.stride[i]);
    /* The largest dividend: an index, or an output position plus padding. */
    int64_t reach = 0;
    for (int i = 0; i < ENG_NN_DIMS; i++) {
        int64_t r = g.out[i] + (g.pad_begin[i] > 0 ? g.pad_begin[i] : 0);
        reach = reach > r ? reach : r;
        reach = reach > g.stride[i] ? reach : g.stride[i];
    }
    for (int64_t n0 = 0; n0 < g.batch; n0 += nb) {
        int64_t cnt = g.batch - n0 < nb ? g.batch - n0 : nb;
        if (cg == 0 || in_sz == 0) {
            if (cnt * per > 0)
                ENG_CUDA_TRY(c, cudaMemsetAsync(col, 0, (size_t)(cnt * per) * sizeof *col,
                                                eng_cuda_ctx(c)->stream));
        } else {
            const float *xc = x + n0 * g.in_channels * in_sz;
            p.b = xc;
            if (lowp) {
                if ((rc = eng_cuda_to_lowp(c, wdt, x_lowp, xc, cnt * g.in_channels * in_sz)))
                    return rc;
                p.b = x_lowp;
            }
            p.n_img = cnt;
            if ((rc = grouped_gemm_run(c, &p)))
                return rc;
        }
        a.y = y + n0 * g.out_channels * out_sz;
        a.n = cnt * g.out_channels * out_sz;
        int64_t most = a.n > cnt * per ? a.n : cnt * per;
        bool small = fits32(most > reach ? most : reach);
        if ((rc = launch(c, small ? conv_col2im<true> : conv_col2im<false>, a.n, a, g)))
            return rc;
    }
    return 0;
}

/* ---- pools -------------------------------------------------------------- */

/* MaxPool, one thread per output: the largest tap inside X (a NaN wins and
 * stays; no tap: -inf for float, 0 for uint8) and, when idx, its flat
 * index into X with the spatial part in storage_order (-1: no tap). */
template <bool Small, typename T>
static __global__ void maxpool_kernel(const T *x, T *y, int64_t *idx, eng_nn_geom_t g,
                                      out_index_t out, int64_t n, bool col_major)
{
    int64_t in_sz = prod3(g.in);
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3];
        int64_t pl = out_pos<Small>(out, i, o);
        window_t wd = window_at(g, 0, o[0], 0, g.in[0]), wh = window_at(g, 1, o[1], 0, g.in[1]);
        window_t ww = window_at(g, 2, o[2], 0, g.in[2]);
        const T *xp = x + pl * in_sz;
        float best = -INFINITY;
        int64_t best_at = -1;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++) {
            int64_t id = wd.start + kd * g.dilation[0];
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                int64_t ih = wh.start + kh * g.dilation[1];
                int64_t row = (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++) {
                    int64_t iw = ww.start + kw * g.dilation[2];
                    float v = (float)xp[row + iw];
                    if (v > best || best_at < 0 || (v != v && best == best)) {
                        best = v;
                        best_at = col_major ? id + ih * g.in[0] + iw * g.in[0] * g.in[1]
                                            : row + iw;
                    }
                }
            }
        }
        if (std::is_same<T, uint8_t>::value)
            y[i] = best_at < 0 ? (T)0 : (T)best;
        else
            y[i] = (T)best;
        if (idx)
            idx[i] = best_at < 0 ? -1 : pl * in_sz + best_at;
    }
}

/* MaxPool (float or uint8) with the optional Indices output. On error
 * nothing is written. */
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
    bool small = fits32(n > in_n ? n : in_n);
    out_index_t out = out_index_make(g.out);
    if (xt->dtype == ENG_DT_UINT8)
        return launch(c, small ? maxpool_kernel<true, uint8_t> : maxpool_kernel<false, uint8_t>, n,
                      (const uint8_t *)xt->data, (uint8_t *)c->outputs[0]->data, idx, g, out, n,
                      col_major);
    return launch(c, small ? maxpool_kernel<true, float> : maxpool_kernel<false, float>, n,
                  (const float *)xt->data, (float *)c->outputs[0]->data, idx, g, out, n, col_major);
}

static __device__ __forceinline__ int64_t taps_between(const eng_nn_geom_t &g, int i,
                                                       int64_t o, int64_t lo, int64_t hi)
{
    window_t w = window_at(g, i, o, lo, hi);
    return w.k_end - w.k_begin;
}

/* AveragePool, one thread per output: the taps inside X summed in double
 * in (kd, kh, kw) order, divided by their count or, with
 * count_include_pad, by the taps inside the padded input. */
template <bool Small>
static __global__ void avgpool_kernel(const float *x, float *y, eng_nn_geom_t g,
                                      out_index_t out, int64_t n, bool include_pad)
{
    int64_t in_sz = prod3(g.in);
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3];
        int64_t pl = out_pos<Small>(out, i, o);
        window_t wd = window_at(g, 0, o[0], 0, g.in[0]), wh = window_at(g, 1, o[1], 0, g.in[1]);
        window_t ww = window_at(g, 2, o[2], 0, g.in[2]);
        const float *xp = x + pl * in_sz;
        double sum = 0;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                int64_t row = ((wd.start + kd * g.dilation[0]) * g.in[1] + wh.start +
                               kh * g.dilation[1]) * g.in[2] + ww.start;
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                    sum += xp[row + kw * g.dilation[2]];
            }
        int64_t count = (wd.k_end - wd.k_begin) * (wh.k_end - wh.k_begin) * (ww.k_end - ww.k_begin);
        if (include_pad) {
            count = 1;
            for (int d = 0; d < ENG_NN_DIMS; d++)
                count *= taps_between(g, d, o[d], -g.pad_begin[d], g.in[d] + g.pad_end[d]);
        }
        y[i] = count > 0 ? (float)(sum / (double)count) : 0.0f;
    }
}

/* AveragePool. On error (geometry) nothing is written. */
static int avgpool_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = require_float_inputs(c, 1);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_POOL, &g)))
        return rc;
    int64_t n = g.batch * g.in_channels * eng_nn_prod(g.out);
    int64_t in_n = g.batch * g.in_channels * eng_nn_prod(g.in);
    bool small = fits32(n > in_n ? n : in_n);
    bool include_pad = eng_attr_i(c->node, "count_include_pad", 0) != 0;
    return launch(c, small ? avgpool_kernel<true> : avgpool_kernel<false>, n,
                  (const float *)c->inputs[0]->data, (float *)c->outputs[0]->data, g,
                  out_index_make(g.out), n, include_pad);
}

/* The product of s's dims from `from` on. */
static int64_t dims_from(const eng_shape_t *s, int from)
{
    int64_t n = 1;
    for (int i = from; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* GlobalAveragePool / GlobalMaxPool, one block per plane, in double as the
 * CPU (the maximum skips NaNs as the CPU's comparison does). */
template <bool Max>
static __global__ void global_pool_kernel(const float *x, float *y, int64_t planes,
                                          int64_t plane)
{
    __shared__ double smem[32];
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const float *xp = x + pl * plane;
        double acc = Max ? -INFINITY : 0.0;
        for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) {
            double v = xp[i];
            acc = Max ? (v > acc ? v : acc) : acc + v;
        }
        acc = Max ? block_reduce(acc, smem, max_op()) : block_reduce(acc, smem, sum_op());
        if (threadIdx.x == 0)
            y[pl] = (float)(Max ? acc : acc / (double)plane);
    }
}

/* GlobalAveragePool / GlobalMaxPool. Cannot fail but for the launch. */
static int global_pool_run(eng_op_ctx_t *c)
{
    int rc = require_float_inputs(c, 1);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t planes = xt->shape.dims[0] * xt->shape.dims[1], plane = dims_from(&xt->shape, 2);
    if (planes == 0)
        return 0;
    bool max = strcmp(c->node->op_type, "GlobalMaxPool") == 0;
    const float *x = (const float *)xt->data;
    float *y = (float *)c->outputs[0]->data;
    unsigned threads = row_threads(plane), blocks = row_blocks(planes);
    if (max)
        global_pool_kernel<true>
            <<<blocks, threads, 0, eng_cuda_ctx(c)->stream>>>(x, y, planes, plane);
    else
        global_pool_kernel<false>
            <<<blocks, threads, 0, eng_cuda_ctx(c)->stream>>>(x, y, planes, plane);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* ---- normalisations ----------------------------------------------------- */

/* BatchNormalization's per-channel multiply and add, in float as the CPU:
 * mul = scale / sqrtf(var + eps), add = bias - mean * mul. */
static __global__ void batchnorm_fold(const float *scale, const float *bias, const float *mean,
                                      const float *var, float eps, float *mul, float *add,
                                      int64_t n)
{
    ENG_CUDA_FOR(k, n)
    {
        float m = scale[k] / sqrtf(var[k] + eps);
        mul[k] = m;
        add[k] = bias[k] - mean[k] * m;
    }
}

/* y = x * mul[c] + add[c], Vec floats at a time (a vector never straddles
 * two planes: plane % Vec == 0). Y may alias X. */
template <bool Small, int Vec>
static __global__ void batchnorm_apply(const float *x, float *y, const float *mul,
                                       const float *add, udiv_t plane_vecs, udiv_t channels,
                                       int64_t n_vecs)
{
    typedef typename std::conditional<Vec == 4, float4, float>::type vec_t;
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
            xv = xv * mk + ak;
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
    int rc = require_float_inputs(c, 5);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t channels = xt->shape.dims[1], plane = dims_from(&xt->shape, 2);
    int64_t n = eng_shape_numel(&xt->shape);
    size_t need = batchnorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    if (n == 0)
        return 0;
    float *mul = (float *)c->scratch, *add = mul + channels;
    float eps = eng_attr_f(c->node, "epsilon", 1e-5f);
    if ((rc = launch(c, batchnorm_fold, channels, (const float *)c->inputs[1]->data,
                     (const float *)c->inputs[2]->data, (const float *)c->inputs[3]->data,
                     (const float *)c->inputs[4]->data, eps, mul, add, channels)))
        return rc;
    const float *x = (const float *)xt->data;
    float *y = (float *)c->outputs[0]->data;
    bool vec = plane % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
    int64_t width = vec ? 4 : 1, n_vecs = n / width;
    udiv_t pv = udiv_make(plane / width), ch = udiv_make(channels);
    if (vec)
        return launch(c, fits32(n_vecs) ? batchnorm_apply<true, 4> : batchnorm_apply<false, 4>,
                      n_vecs, x, y, (const float *)mul, (const float *)add, pv, ch, n_vecs);
    return launch(c, fits32(n_vecs) ? batchnorm_apply<true, 1> : batchnorm_apply<false, 1>, n_vecs,
                  x, y, (const float *)mul, (const float *)add, pv, ch, n_vecs);
}

/* InstanceNormalization, one block per (image, channel) plane:
 * y = (x - mean) * (scale * inv_std) + bias, in double as the CPU. */
static __global__ void instancenorm_kernel(const float *x, float *y, const float *scale,
                                           const float *bias, int64_t planes, int64_t channels,
                                           int64_t plane, double eps)
{
    __shared__ double smem[32];
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const float *xp = x + pl * plane;
        float *yp = y + pl * plane;
        int64_t k = pl % channels;
        double mean, inv_std;
        row_moments(xp, plane, eps, smem, &mean, &inv_std);
        double mul = scale[k] * inv_std;
        for (int64_t i = threadIdx.x; i < plane; i += blockDim.x)
            yp[i] = (float)((xp[i] - mean) * mul + bias[k]);
    }
}

/* InstanceNormalization. Y may alias X. Cannot fail but for the launch. */
static int instancenorm_run(eng_op_ctx_t *c)
{
    int rc = require_float_inputs(c, 3);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t channels = xt->shape.dims[1], planes = xt->shape.dims[0] * channels;
    int64_t plane = dims_from(&xt->shape, 2);
    if (planes == 0 || plane == 0)
        return 0;
    instancenorm_kernel<<<row_blocks(planes), row_threads(plane), 0, eng_cuda_ctx(c)->stream>>>(
        (const float *)xt->data, (float *)c->outputs[0]->data, (const float *)c->inputs[1]->data,
        (const float *)c->inputs[2]->data, planes, channels, plane,
        (double)eng_attr_f(c->node, "epsilon", 1e-5f));
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static int layernorm_axis(const eng_op_ctx_t *c)
{
    int rank = c->inputs[0]->shape.rank;
    int64_t axis = eng_attr_i(c->node, "axis", -1);
    return (int)(axis < 0 ? axis + rank : axis);
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
    int64_t cols = dims_from(&c->inputs[0]->shape, layernorm_axis(c));
    int n = layernorm_needs_expand(c->inputs[1], cols) +
            layernorm_needs_expand(eng_ctx_in(c, 2), cols);
    return (size_t)n * (size_t)cols * sizeof(float);
}

/* A parameter broadcast to X's tail dims: per tail dim its size and the
 * parameter's stride (0 where broadcast). */
typedef struct tail_map {
    int rank;
    int64_t dims[ENG_MAX_RANK], pstride[ENG_MAX_RANK];
} tail_map_t;

static __global__ void layernorm_expand(const float *src, float *dst, tail_map_t m, int64_t n)
{
    ENG_CUDA_FOR(j, n)
    {
        int64_t rem = j, at = 0;
        for (int i = m.rank - 1; i >= 0; i--) {
            int64_t q = rem / m.dims[i];
            at += (rem - q * m.dims[i]) * m.pstride[i];
            rem = q;
        }
        dst[j] = src[at];
    }
}

/* Expands parameter p to X's dims from `axis` on into dst (as the CPU's
 * expand_tail). */
static int layernorm_expand_run(const eng_op_ctx_t *c, const eng_tensor_t *p,
                                const eng_shape_t *x, int axis, float *dst, int64_t cols)
{
    tail_map_t m;
    memset(&m, 0, sizeof m);
    m.rank = x->rank - axis;
    int64_t size = 1;
    for (int i = m.rank - 1; i >= 0; i--) {
        int pi = p->shape.rank - m.rank + i;
        int64_t pd = pi >= 0 ? p->shape.dims[pi] : 1;
        m.dims[i] = x->dims[axis + i];
        m.pstride[i] = pd == 1 ? 0 : size;
        size *= pd;
    }
    return launch(c, layernorm_expand, cols, (const float *)p->data, dst, m, cols);
}

/* LayerNormalization, one block per row: y = (x - mean) * inv_std *
 * scale + bias in double, and the row's statistics when asked. */
static __global__ void layernorm_kernel(const float *x, float *y, const float *scale,
                                        const float *bias, float *mean_out, float *inv_out,
                                        int64_t rows, int64_t cols, double eps)
{
    __shared__ double smem[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double mean, inv_std;
        row_moments(xr, cols, eps, smem, &mean, &inv_std);
        for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
            yr[k] = (float)((xr[k] - mean) * inv_std * scale[k] + (bias ? bias[k] : 0.0f));
        if (threadIdx.x == 0) {
            if (mean_out)
                mean_out[r] = (float)mean;
            if (inv_out)
                inv_out[r] = (float)inv_std;
        }
    }
}

/* LayerNormalization with the optional Mean and InvStdDev outputs. Y may
 * alias X. On error (scratch) nothing is written. */
static int layernorm_run(eng_op_ctx_t *c)
{
    int rc = require_float_inputs(c, 3);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0], *st = c->inputs[1], *bt = eng_ctx_in(c, 2);
    int axis = layernorm_axis(c);
    int64_t cols = dims_from(&xt->shape, axis);
    int64_t rows = cols ? eng_shape_numel(&xt->shape) / cols : 0;
    size_t need = layernorm_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                          c->scratch_bytes, need);
    if (rows == 0)
        return 0;
    const float *scale = (const float *)st->data, *bias = bt ? (const float *)bt->data : NULL;
    float *next = (float *)c->scratch;
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
    float *mean_out = c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data : NULL;
    float *inv_out = c->n_outputs > 2 && c->outputs[2] ? (float *)c->outputs[2]->data : NULL;
    layernorm_kernel<<<row_blocks(rows), row_threads(cols), 0, eng_cuda_ctx(c)->stream>>>(
        (const float *)xt->data, (float *)c->outputs[0]->data, scale, bias, mean_out, inv_out,
        rows, cols, (double)eng_attr_f(c->node, "epsilon", 1e-5f));
    ENG_CUDA_LAUNCHED(c);
    return 0;
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
    int rc = require_float_inputs(c, 1);
    if (rc)
        return rc;
    const eng_tensor_t *xt = c->inputs[0];
    int64_t n = eng_shape_numel(&xt->shape), size = eng_attr_i(c->node, "size", 1);
    double alpha = eng_attr_f(c->node, "alpha", 1e-4f), beta = eng_attr_f(c->node, "beta", 0.75f);
    double bias = eng_attr_f(c->node, "bias", 1.0f);
    return launch(c, fits32(n) ? lrn_kernel<true> : lrn_kernel<false>, n,
                  (const float *)xt->data, (float *)c->outputs[0]->data,
                  udiv_make(dims_from(&xt->shape, 2)), udiv_make(xt->shape.dims[1]), n, size,
                  alpha / (double)size, beta, bias);
}

const eng_kernel_t eng_cuda_Conv = {.run = conv_run, .scratch_bytes = conv_scratch_bytes};
const eng_kernel_t eng_cuda_ConvTranspose = {.run = conv_transpose_run,
                                             .scratch_bytes = conv_transpose_scratch_bytes};
const eng_kernel_t eng_cuda_AveragePool = {.run = avgpool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MaxPool = {.run = maxpool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GlobalAveragePool = {.run = global_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GlobalMaxPool = {.run = global_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BatchNormalization = {.run = batchnorm_run,
                                                  .scratch_bytes = batchnorm_scratch_bytes};
const eng_kernel_t eng_cuda_InstanceNormalization = {.run = instancenorm_run,
                                                     .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LayerNormalization = {.run = layernorm_run,
                                                  .scratch_bytes = layernorm_scratch_bytes};
const eng_kernel_t eng_cuda_LRN = {.run = lrn_run, .scratch_bytes = NULL};
