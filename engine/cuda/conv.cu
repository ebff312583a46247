/* conv.cu -- CUDA kernels of Conv and ConvTranspose (engine/ops/nn.c
 * defines them; engine/cpu/conv_kernels.c is the CPU reference), on the
 * normalised 3-D geometry of engine/ops/nn_impl.h.
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
 * A channels-last Conv (graph.h) is engine/cuda/conv_nhwc.cu's.
 *
 * Dtypes: X, W, B and Y all float32, all float16 or all bfloat16 (the op's
 * infer requires W and B in X's dtype). Half activations: Conv's
 * columns are X's dtype (im2col copies elements, a pointwise Conv reads X
 * in place), Y starts as the bias and the GEMMs (eng_cuda_gemm_half: fp32
 * accumulation) add the product onto it, rounding once; a depthwise Conv
 * reads the taps as float and rounds its float sum once. ConvTranspose
 * multiplies X and W as they are into float columns (eng_cuda_gemm_lowp),
 * and col2im rounds each output's float sum (plus the bias) once. */
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"

/* Most scratch a convolution's column buffer takes for a chunk of images
 * (a single image's columns may need more; they then get exactly that). */
#define COL_CHUNK_BYTES ((size_t)64 << 20)

/* ---- Conv --------------------------------------------------------------- */

/* FS_ENOTSUP naming the input unless X, W and B share one dtype (infer
 * made sure of it; a context built elsewhere gets the error, not a
 * misread). 0 otherwise. */
static int conv_require_inputs(const eng_op_ctx_t *c)
{
    const eng_dtype_t same[] = {c->inputs[0]->dtype, ENG_DT_UNDEFINED};
    int rc = 0;
    for (int i = 1; rc == 0 && i < 3 && i < c->n_inputs; i++)
        if (c->inputs[i])
            rc = eng_op_require_dtype(c, i, same);
    return rc;
}

/* y[i] = bias[channel of i] over [N, M, plane], in T (Y's and B's type). */
template <bool Small, typename T>
static __global__ void conv_fill_bias(T *y, const T *bias, udiv_t plane, udiv_t channels,
                                      int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t p = udiv_q<Small>(plane, i);
        y[i] = bias[p - udiv_q<Small>(channels, p) * channels.d];
    }
}

/* im2col of `n` column entries for a chunk of images: entry i is column
 * (output position) i % OUT of row i / OUT = (image * C + c) * K + tap,
 * copied from X (T: float, half or bfloat16). */
typedef struct im2col_args {
    const void *x;
    void *col;
    int64_t n, in_sz;
    out_index_t out;
    udiv_t taps, kh, kw;
} im2col_args_t;

template <bool Small, typename T>
static __global__ void conv_im2col(im2col_args_t a, eng_nn_geom_t g)
{
    const T *x = (const T *)a.x;
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
        col[i] = inside ? x[ch * a.in_sz + (at[0] * g.in[1] + at[1]) * g.in[2] + at[2]]
                        : from_f32<T>(0.0f);
    }
}

/* Launches im2col of columns of dtype dt (X's: float, half, bfloat16). */
static int conv_im2col_run(const eng_op_ctx_t *c, eng_dtype_t dt, bool small,
                           const im2col_args_t &a, const eng_nn_geom_t &g)
{
    return lowp_dispatch(c, dt, [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, small ? conv_im2col<true, T> : conv_im2col<false, T>, a.n, a,
                               g);
    });
}

/* Depthwise Conv, one thread per output: the bias, then weight x input
 * for each tap inside X in (kd, kh, kw) order, as the CPU sums them, in
 * float (X, W, B and Y of type T: float, or half / bfloat16 read as
 * float); the sum rounded to T once. */
template <bool Small, typename T>
static __global__ void conv_depthwise(const T *x, const T *w, const T *bias, T *y,
                                      eng_nn_geom_t g, out_index_t out, udiv_t channels,
                                      int64_t n)
{
    int64_t in_sz = eng_nn_prod(g.in), taps = eng_nn_prod(g.kernel);
    ENG_CUDA_FOR(i, n)
    {
        int64_t o[3];
        eng_nn_window_t win[3];
        int64_t pl = out_taps<Small>(g, out, i, o, win);
        int64_t ch = pl - udiv_q<Small>(channels, pl) * channels.d;
        const eng_nn_window_t &wd = win[0], &wh = win[1], &ww = win[2];
        const T *xp = x + pl * in_sz;
        const T *wk = w + ch * taps;
        float acc = bias ? to_f32(bias[ch]) : 0.0f;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                /* Row start at tap kw = 0 (outside X when ww.k_begin > 0). */
                int64_t row = ((wd.start + kd * g.dilation[0]) * g.in[1] + wh.start +
                               kh * g.dilation[1]) * g.in[2] + ww.start;
                const T *wr = wk + (kd * g.kernel[1] + kh) * g.kernel[2];
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                    acc += to_f32(wr[kw]) * to_f32(xp[row + kw * g.dilation[2]]);
            }
        y[i] = from_f32<T>(acc);
    }
}

/* For each image i < n_img and group gi < group: Y(i, gi) = op(A(gi)) x
 * B(i, gi) + beta * Y(i, gi), each operand at its base plus i * its image
 * stride plus gi * its group stride (A is shared by the images). A and B
 * are both of dtype dt: float, or both half / bfloat16 (strides in
 * elements either way); Y is float, or dt with y_lowp. */
typedef struct grouped_gemm {
    eng_dtype_t dt;
    bool trans_a;
    int64_t m, n, k;
    const void *a;
    int64_t lda, a_grp;
    const void *b;
    int64_t ldb, b_img, b_grp;
    void *y;
    bool y_lowp;
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
                              (float *)p->y + y_off, p->ldc, stride_y, batch);
    const char *a = (const char *)p->a + a_off * ENG_CUDA_LOWP_BYTES;
    const char *b = (const char *)p->b + b_off * ENG_CUDA_LOWP_BYTES;
    if (p->y_lowp)
        return eng_cuda_gemm_half(c, p->dt, p->trans_a, false, p->m, p->n, p->k, 1.0f, a, p->lda,
                                  stride_a, b, p->ldb, stride_b, p->beta,
                                  (char *)p->y + y_off * ENG_CUDA_LOWP_BYTES, p->ldc, stride_y,
                                  batch);
    return eng_cuda_gemm_lowp(c, p->dt, p->trans_a, false, p->m, p->n, p->k, 1.0f, a, p->lda,
                              stride_a, b, p->ldb, stride_b, p->beta, (float *)p->y + y_off,
                              p->ldc, stride_y, batch);
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

/* Images per chunk that the given scratch holds, per_image elements of es
 * bytes each; FS_EINVAL when not even one. */
static int col_chunk_from_scratch(const eng_op_ctx_t *c, int64_t batch, int64_t per_image,
                                  size_t es, int64_t *nb)
{
    size_t per_bytes = (size_t)per_image * es;
    *nb = per_bytes ? (int64_t)(c->scratch_bytes / per_bytes) : batch;
    if (*nb > batch)
        *nb = batch;
    if (*nb < 1 && batch > 0)
        return eng_op_scratch_err(c, per_bytes);
    return 0;
}

/* A Conv's scratch: the columns of a chunk of images in X's dtype (a
 * channels-last Conv: conv_nhwc.cu's). A pointwise Conv's columns are X's
 * image itself, and a depthwise Conv needs none. */
static size_t conv_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV, &g) != 0)
        return 0;
    if (c->node->channels_last)
        return eng_cuda_conv_nhwc_scratch_bytes(c, &g);
    if (eng_nn_conv_is_depthwise(&g) || eng_nn_conv_is_pointwise(&g))
        return 0;
    size_t elem = eng_dtype_size(c->inputs[0]->dtype);
    int64_t per = g.in_channels * eng_nn_prod(g.kernel) * eng_nn_prod(g.out);
    return (size_t)(col_chunk_images(g.batch, (size_t)per * elem) * per) * elem;
}

/* Depthwise Conv launch: X, W, B and Y of dtype dt. */
static int conv_depthwise_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, eng_dtype_t dt,
                              const void *x, const void *w, const void *bias, void *y)
{
    int64_t n = g->batch * g->out_channels * eng_nn_prod(g->out);
    int64_t in_n = g->batch * g->in_channels * eng_nn_prod(g->in);
    bool small = fits32(n > in_n ? n : in_n);
    out_index_t out = out_index_make(g->out);
    udiv_t ch = udiv_make(g->out_channels);
    return lowp_dispatch(c, dt, [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, small ? conv_depthwise<true, T> : conv_depthwise<false, T>, n,
                               (const T *)x, (const T *)w, (const T *)bias, (T *)y, *g, out, ch,
                               n);
    });
}

/* Conv. On error (geometry, scratch, cuBLAS range, launch) Y may be partly
 * written. */
static int conv_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = conv_require_inputs(c);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_CONV, &g)))
        return rc;
    if (c->node->channels_last)
        return eng_cuda_conv_nhwc_run(c, &g);
    eng_dtype_t xdt = c->inputs[0]->dtype;
    const void *x = c->inputs[0]->data;
    const void *w = c->inputs[1]->data;
    const eng_tensor_t *bt = eng_ctx_in(c, 2);
    const void *bias = bt ? bt->data : NULL;
    void *y = c->outputs[0]->data;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    int64_t y_n = g.batch * g.out_channels * out_sz;
    if (y_n == 0)
        return 0;
    if (eng_nn_conv_is_depthwise(&g))
        return conv_depthwise_run(c, &g, xdt, x, w, bias, y);
    /* Y starts as the bias and the GEMMs accumulate onto it. */
    auto fill_bias = [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, fits32(y_n) ? conv_fill_bias<true, T> : conv_fill_bias<false, T>,
                               y_n, (T *)y, (const T *)bias, udiv_make(out_sz),
                               udiv_make(g.out_channels), y_n);
    };
    if (bias && (rc = lowp_dispatch(c, xdt, fill_bias)))
        return rc;
    if (cg * taps == 0) {
        if (!bias)
            ENG_CUDA_TRY(c, cudaMemsetAsync(y, 0, (size_t)y_n * eng_dtype_size(xdt),
                                            eng_cuda_ctx(c)->stream));
        return 0;
    }
    /* Y_g [M/group, OUT] = W_g [M/group, C/group * K] x columns [C/group * K, OUT]. */
    grouped_gemm_t p;
    memset(&p, 0, sizeof p);
    p.dt = xdt;
    p.y_lowp = eng_cuda_is_lowp(xdt);
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
    /* A pointwise Conv multiplies X in place. */
    if (eng_nn_conv_is_pointwise(&g)) {
        p.b = x;
        p.b_img = g.in_channels * in_sz;
        p.b_grp = cg * in_sz;
        p.y = y;
        return grouped_gemm_run(c, &p);
    }
    size_t es = eng_dtype_size(xdt);
    int64_t per = g.in_channels * taps * out_sz, nb;
    if ((rc = col_chunk_from_scratch(c, g.batch, per, es, &nb)))
        return rc;
    void *col = c->scratch;
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
        a.x = (const char *)x + (size_t)(n0 * g.in_channels * in_sz) * es;
        a.n = cnt * per;
        bool small = fits32(a.n > cnt * g.in_channels * in_sz ? a.n : cnt * g.in_channels * in_sz);
        if ((rc = conv_im2col_run(c, xdt, small, a, g)))
            return rc;
        p.y = (char *)y + (size_t)(n0 * g.out_channels * out_sz) * es;
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
 * bias. The columns are float; Y and the bias are T (X's type), the sum
 * rounded to T once. */
typedef struct col2im_args {
    const float *col;
    const void *bias;
    void *y;
    int64_t n;
    out_index_t out;
    udiv_t channels, stride[ENG_NN_DIMS];
} col2im_args_t;

template <bool Small, typename T>
static __global__ void conv_col2im(col2im_args_t a, eng_nn_geom_t g)
{
    const T *bias = (const T *)a.bias;
    int64_t in_sz = eng_nn_prod(g.in), taps = eng_nn_prod(g.kernel);
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
        ((T *)a.y)[i] = from_f32<T>(bias ? acc + to_f32(bias[m]) : acc);
    }
}

static size_t conv_transpose_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    if (eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g) != 0)
        return 0;
    int64_t per = g.out_channels * eng_nn_prod(g.kernel) * eng_nn_prod(g.in);
    return (size_t)(col_chunk_images(g.batch, (size_t)per * sizeof(float)) * per) * sizeof(float);
}

/* ConvTranspose. On error (geometry, scratch, cuBLAS range, launch) Y may
 * be partly written. */
static int conv_transpose_run(eng_op_ctx_t *c)
{
    eng_nn_geom_t g;
    int rc = conv_require_inputs(c);
    if (rc || (rc = eng_nn_geom(c, ENG_NN_CONV_TRANSPOSE, &g)))
        return rc;
    eng_dtype_t xdt = c->inputs[0]->dtype;
    const char *x = (const char *)c->inputs[0]->data;
    const size_t es = eng_dtype_size(xdt);
    const void *w = c->inputs[1]->data;
    const eng_tensor_t *bt = eng_ctx_in(c, 2);
    char *y = (char *)c->outputs[0]->data;
    float *col = (float *)c->scratch;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t taps = eng_nn_prod(g.kernel), in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out);
    if (g.batch * g.out_channels * out_sz == 0)
        return 0;
    int64_t per = g.out_channels * taps * in_sz, nb;
    if ((rc = col_chunk_from_scratch(c, g.batch, per, sizeof(float), &nb)))
        return rc;
    /* col_g [M/group * K, IN] = W_g^T (W_g: [C/group, M/group * K]) x X_g [C/group, IN]. */
    grouped_gemm_t p;
    memset(&p, 0, sizeof p);
    p.dt = xdt;
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
    a.bias = bt ? bt->data : NULL;
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
            const char *xc = x + (size_t)(n0 * g.in_channels * in_sz) * es;
            p.b = xc;
            p.n_img = cnt;
            if ((rc = grouped_gemm_run(c, &p)))
                return rc;
        }
        a.y = y + (size_t)(n0 * g.out_channels * out_sz) * es;
        a.n = cnt * g.out_channels * out_sz;
        int64_t most = a.n > cnt * per ? a.n : cnt * per;
        bool small = fits32(most > reach ? most : reach);
        rc = lowp_dispatch(c, xdt, [&](auto t) {
            using T = decltype(t);
            return eng_cuda_launch(c, small ? conv_col2im<true, T> : conv_col2im<false, T>, a.n,
                                   a, g);
        });
        if (rc)
            return rc;
    }
    return 0;
}

const eng_kernel_t eng_cuda_Conv = {.run = conv_run, .scratch_bytes = conv_scratch_bytes};
const eng_kernel_t eng_cuda_ConvTranspose = {.run = conv_transpose_run,
                                             .scratch_bytes = conv_transpose_scratch_bytes};
