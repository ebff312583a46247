/* conv_nhwc.cu -- the CUDA channels-last Conv (graph.h: channels_last, set
 * by engine/layout.c; engine/cpu/conv_nhwc.c is the CPU reference): X
 * [N, spatial..., C], W [M, k..., C/group], Y [N, out..., M], with the
 * node's fused residual and ReLU.
 *
 * Every output position of the batch is a row of Y [P, M]. A pointwise
 * Conv (1x1, stride 1, no padding) is one GEMM per group straight on X
 * [P, C]: Y_g = X_g W_g^T. A 2-D float16/bfloat16 Conv of group 1 with C
 * and M multiples of 8 is conv_igemm.cu's implicit GEMM, which gathers
 * the windows as it multiplies (no scratch), unless the model asked for
 * im2col (eng_model_config_t.conv, graph.h conv_im2col) or, which no plan
 * does (the activation block and the weights are cudaMalloc-aligned), X
 * or W is not 16-byte aligned. Any other copies a chunk of rows' windows
 * into a column matrix col [rows, group, taps, C/group] in the scratch
 * (im2col: each tap's channels are contiguous in X and in col, so the copy
 * moves 16-byte units where the channel count allows; the padding is zero
 * bits) and multiplies col_g W_g^T. The groups of one chunk are one
 * strided-batched GEMM (their Y columns interleave, never overlap).
 *
 * conv_gemm_epilogue is the one place the products and the epilogue
 * (bias, residual, ReLU) meet: one eng_cuda_gemm (cuBLASLt,
 * engine/cuda/gemm.cu; the groups a strided batch, each with its slice of
 * the bias) with the bias, the residual (its C, beta 1) and the ReLU in
 * the GEMM's epilogue, in fp32, Y rounded once; an empty product (no
 * input channels) is one element-wise pass y = relu?(B[m] + R).
 * Chunks keep the column matrix within NHWC_COL_CHUNK_BYTES (at least one
 * row). A depthwise Conv (one input and one output channel per group) is a
 * direct kernel instead, one thread per output with the channels
 * innermost (neighbouring threads read neighbouring channels): the bias,
 * the taps inside X in (kd, kh, kw) order, the residual, the ReLU, in
 * float, rounded once. X, W, B, R and Y share one dtype: float, float16 or bfloat16. */
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"

/* Most scratch one chunk's column matrix takes (a single row may need more;
 * it then gets exactly that). */
#define NHWC_COL_CHUNK_BYTES ((size_t)64 << 20)

/* One im2col launch: col unit i of a chunk (rows from row0) is unit
 * (gi, tap, cu) of row r -- units of U, cg_u of them per group and tap --
 * read from X's channel unit gi * cg_u + cu at the tap's position. */
typedef struct nhwc_im2col {
    const void *x;
    void *col;
    int64_t n;               /* units in the chunk */
    int64_t row0;
    udiv_t row_units;        /* units per col row: group * taps * cg_u */
    udiv_t grp_units;        /* taps * cg_u */
    udiv_t cg_u;             /* units per group and tap */
    udiv_t kh, kw;           /* kernel[1], kernel[2] */
    out_index_t out;         /* output positions per image, with h and w */
    int64_t cin_u;           /* units per X position (C) */
} nhwc_im2col_t;

template <bool Small, typename U>
static __global__ void nhwc_im2col_kernel(nhwc_im2col_t a, eng_nn_geom_t g)
{
    const U *x = (const U *)a.x;
    U *col = (U *)a.col;
    int64_t in_sz = eng_nn_prod(g.in);
    ENG_CUDA_FOR(i, a.n)
    {
        int64_t r = udiv_q<Small>(a.row_units, i), rem = i - r * a.row_units.d;
        int64_t gi = udiv_q<Small>(a.grp_units, rem), t_c = rem - gi * a.grp_units.d;
        int64_t t = udiv_q<Small>(a.cg_u, t_c), cu = t_c - t * a.cg_u.d;
        int64_t u = udiv_q<Small>(a.kw, t), k[3], o[3];
        k[2] = t - u * a.kw.d;
        k[0] = udiv_q<Small>(a.kh, u);
        k[1] = u - k[0] * a.kh.d;
        int64_t n = out_pos<Small>(a.out, a.row0 + r, o);
        int64_t at[3];
        bool inside = true;
#pragma unroll
        for (int d = 0; d < ENG_NN_DIMS; d++) {
            at[d] = o[d] * g.stride[d] - g.pad_begin[d] + k[d] * g.dilation[d];
            inside = inside && (uint64_t)at[d] < (uint64_t)g.in[d];
        }
        U v;
        if (inside)
            v = x[(n * in_sz + (at[0] * g.in[1] + at[1]) * g.in[2] + at[2]) * a.cin_u +
                  gi * a.cg_u.d + cu];
        else
            memset(&v, 0, sizeof v);
        col[i] = v;
    }
}

/* Launches im2col of `rows` rows from row0 into the scratch, moving 16-byte
 * units when every group's channels fill whole units and X and the scratch
 * are 16-byte aligned, else single elements. */
static int nhwc_im2col_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, const void *x,
                           int64_t row0, int64_t rows)
{
    size_t es = eng_dtype_size(c->inputs[0]->dtype);
    int64_t cg = g->in_channels / g->group, taps = eng_nn_prod(g->kernel);
    bool wide = (size_t)cg * es % 16 == 0 && (uintptr_t)x % 16 == 0 &&
                (uintptr_t)c->scratch % 16 == 0;
    size_t unit = wide ? 16 : es;
    int64_t cg_u = (int64_t)((size_t)cg * es / unit);
    nhwc_im2col_t a;
    a.x = x;
    a.col = c->scratch;
    a.row0 = row0;
    a.row_units = udiv_make(g->group * taps * cg_u);
    a.grp_units = udiv_make(taps * cg_u);
    a.cg_u = udiv_make(cg_u);
    a.kh = udiv_make(g->kernel[1]);
    a.kw = udiv_make(g->kernel[2]);
    a.out = out_index_make(g->out);
    a.cin_u = (int64_t)((size_t)g->in_channels * es / unit);
    a.n = rows * a.row_units.d;
    int64_t in_units = g->batch * eng_nn_prod(g->in) * a.cin_u;
    int64_t most = a.n > in_units ? a.n : in_units;
    most = most > (row0 + rows) ? most : row0 + rows;
    bool small = fits32(most);
    if (wide)
        return eng_cuda_launch(c, small ? nhwc_im2col_kernel<true, uint4>
                                        : nhwc_im2col_kernel<false, uint4>,
                               a.n, a, *g);
    if (es == 2)
        return eng_cuda_launch(c, small ? nhwc_im2col_kernel<true, uint16_t>
                                        : nhwc_im2col_kernel<false, uint16_t>,
                               a.n, a, *g);
    return eng_cuda_launch(c, small ? nhwc_im2col_kernel<true, uint32_t>
                                    : nhwc_im2col_kernel<false, uint32_t>,
                           a.n, a, *g);
}

/* y[i] = relu?(y[i] + bias[i % m] + res[i]) over n elements, in float,
 * rounded to T once (bias and res may be NULL), V elements a thread: with
 * V > 1 (16 bytes) m is a multiple of V and the pointers 16-byte aligned,
 * so each thread's elements share one row and move as one load each. */
template <bool Small, typename T, int V>
static __global__ void nhwc_epilogue_kernel(T *y, const T *bias, const T *res, udiv_t m,
                                            int64_t n_vec, bool relu)
{
    struct alignas(sizeof(T) * V) vec {
        T e[V];
    };
    ENG_CUDA_FOR(u, n_vec)
    {
        int64_t i = u * V;
        vec yv = reinterpret_cast<vec *>(y)[u], rv, bv;
        if (res)
            rv = reinterpret_cast<const vec *>(res)[u];
        if (bias)
            bv = reinterpret_cast<const vec *>(bias)[(i - udiv_q<Small>(m, i) * m.d) / V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = to_f32(yv.e[k]);
            if (bias)
                v += to_f32(bv.e[k]);
            if (res)
                v += to_f32(rv.e[k]);
            if (relu)
                v = v < 0.0f ? 0.0f : v; /* a NaN stays NaN */
            yv.e[k] = from_f32<T>(v);
        }
        reinterpret_cast<vec *>(y)[u] = yv;
    }
}

/* One chunk's products and epilogue: for each group gi,
 *   Y[rows, gi*mg .. +mg] = A_g [rows, kdim] x W_g^T,  A_g at a + gi * a_grp
 * (row stride lda), W_g = rows gi*mg .. of W [M, kdim]; then y = relu?(y +
 * B + R) over Y's rows. A null `a` (an empty X or kdim 0) makes the
 * product zero. */
typedef struct conv_gemm {
    eng_dtype_t dt;
    int64_t rows, m, group, kdim;
    const void *a;
    int64_t lda, a_grp;
    const void *w;
    void *y;                 /* [rows, M], row stride M */
    const void *bias;        /* [M] or NULL */
    const void *res;         /* [rows, M] or NULL */
    bool relu;
} conv_gemm_t;

/* The GEMM with its epilogue (eng_cuda_gemm's, or for an empty product
 * one element-wise pass). On error (cuBLAS's range or status, a launch) Y
 * may be partly written. */
static int conv_gemm_epilogue(const eng_op_ctx_t *c, const conv_gemm_t *p)
{
    int64_t mg = p->m / p->group, n = p->rows * p->m;
    size_t es = eng_dtype_size(p->dt);
    if (n == 0)
        return 0;
    if (p->a && p->kdim > 0) {
        /* One cuBLASLt call, the epilogue its own (engine/cuda/gemm.cu):
         * Y_g = relu?(X_g W_g^T + B_g + R_g) for each group g (a strided
         * batch), R read as cuBLASLt's C with beta 1. */
        eng_cuda_gemm_t g = {};
        g.dtype = g.c_dtype = p->dt;
        g.trans_b = true;
        g.m = p->rows, g.n = mg, g.k = p->kdim, g.batch = p->group;
        g.alpha = 1.0f, g.beta = p->res ? 1.0f : 0.0f;
        g.a = p->a, g.lda = p->lda, g.stride_a = p->a_grp;
        g.b = p->w, g.ldb = p->kdim, g.stride_b = mg * p->kdim;
        g.c = p->y, g.ldc = p->m, g.stride_c = mg;
        g.r = p->res, g.bias = p->bias, g.bias_stride = mg;
        g.act = p->relu ? ENG_ACT_RELU : ENG_ACT_NONE;
        return eng_cuda_gemm(c, &g);
    }
    /* An empty product: Y = relu?(0 + B + R), one element-wise pass. */
    ENG_CUDA_TRY(c, cudaMemsetAsync(p->y, 0, (size_t)n * es, eng_cuda_ctx(c)->stream));
    if (!p->bias && !p->res && !p->relu)
        return 0;
    udiv_t um = udiv_make(p->m);
    bool small = fits32(n);
    bool aligned = (uintptr_t)p->y % 16 == 0 && (uintptr_t)p->bias % 16 == 0 &&
                   (uintptr_t)p->res % 16 == 0;
    return lowp_dispatch(c, p->dt, [&](auto t) {
        using T = decltype(t);
        constexpr int V = 16 / sizeof(T);
        if (aligned && p->m % V == 0)
            return eng_cuda_launch(c, small ? nhwc_epilogue_kernel<true, T, V>
                                            : nhwc_epilogue_kernel<false, T, V>,
                                   n / V, (T *)p->y, (const T *)p->bias, (const T *)p->res, um,
                                   n / V, p->relu);
        return eng_cuda_launch(c, small ? nhwc_epilogue_kernel<true, T, 1>
                                        : nhwc_epilogue_kernel<false, T, 1>,
                               n, (T *)p->y, (const T *)p->bias, (const T *)p->res, um, n,
                               p->relu);
    });
}

/* Depthwise, one thread per output i of Y [rows, C]: channel i % C of
 * output position i / C (W [C, taps]). */
template <bool Small, typename T>
static __global__ void nhwc_depthwise_kernel(const T *x, const T *w, const T *bias, const T *res,
                                             T *y, eng_nn_geom_t g, out_index_t out, udiv_t ch,
                                             int64_t n, bool relu)
{
    int64_t in_sz = eng_nn_prod(g.in), taps = eng_nn_prod(g.kernel);
    ENG_CUDA_FOR(i, n)
    {
        int64_t q = udiv_q<Small>(ch, i), c = i - q * ch.d, o[3];
        eng_nn_window_t win[3];
        int64_t img = out_taps<Small>(g, out, q, o, win);
        const eng_nn_window_t &wd = win[0], &wh = win[1], &ww = win[2];
        const T *xp = x + img * in_sz * ch.d + c;
        const T *wk = w + c * taps;
        float acc = bias ? to_f32(bias[c]) : 0.0f;
        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                int64_t row = ((wd.start + kd * g.dilation[0]) * g.in[1] + wh.start +
                               kh * g.dilation[1]) * g.in[2] + ww.start;
                const T *wr = wk + (kd * g.kernel[1] + kh) * g.kernel[2];
                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                    acc += to_f32(wr[kw]) * to_f32(xp[(row + kw * g.dilation[2]) * ch.d]);
            }
        if (res)
            acc += to_f32(res[i]);
        if (relu)
            acc = acc < 0.0f ? 0.0f : acc;
        y[i] = from_f32<T>(acc);
    }
}

/* The depthwise launch: X, W, B, R and Y of c's dtype. */
static int nhwc_depthwise_run(const eng_op_ctx_t *c, const eng_nn_geom_t *g, const void *res)
{
    int64_t n = g->batch * eng_nn_prod(g->out) * g->out_channels;
    int64_t in_n = g->batch * eng_nn_prod(g->in) * g->in_channels;
    bool small = fits32(n > in_n ? n : in_n);
    out_index_t out = out_index_make(g->out);
    udiv_t ch = udiv_make(g->out_channels);
    return lowp_dispatch(c, c->inputs[0]->dtype, [&](auto t) {
        using T = decltype(t);
        return eng_cuda_launch(c, small ? nhwc_depthwise_kernel<true, T>
                                        : nhwc_depthwise_kernel<false, T>,
                               n, (const T *)c->inputs[0]->data, (const T *)c->inputs[1]->data,
                               (const T *)eng_ctx_in_data(c, 2), (const T *)res,
                               (T *)c->outputs[0]->data, *g, out, ch, n, c->node->conv_relu);
    });
}

/* Rows per chunk: all for a pointwise Conv, else as many as
 * NHWC_COL_CHUNK_BYTES holds, at least one. */
static int64_t nhwc_chunk_rows(const eng_nn_geom_t *g, int64_t rows, size_t es)
{
    if (eng_nn_conv_is_pointwise(g))
        return rows;
    size_t row_bytes = (size_t)(eng_nn_prod(g->kernel) * g->in_channels) * es;
    int64_t n = row_bytes ? (int64_t)(NHWC_COL_CHUNK_BYTES / row_bytes) : rows;
    return n < 1 ? 1 : n > rows ? rows : n;
}

size_t eng_cuda_conv_nhwc_scratch_bytes(const eng_op_ctx_t *c, const eng_nn_geom_t *g)
{
    if (eng_nn_conv_is_pointwise(g) || eng_nn_conv_is_depthwise(g) ||
        eng_cuda_conv_igemm_applies(c, g))
        return 0;
    size_t es = eng_dtype_size(c->inputs[0]->dtype);
    int64_t rows = g->batch * eng_nn_prod(g->out);
    return (size_t)(nhwc_chunk_rows(g, rows, es) * eng_nn_prod(g->kernel) * g->in_channels) * es;
}

int eng_cuda_conv_nhwc_run(eng_op_ctx_t *c, const eng_nn_geom_t *g)
{
    const eng_node_t *node = c->node;
    eng_dtype_t dt = c->inputs[0]->dtype;
    size_t es = eng_dtype_size(dt);
    const char *x = (const char *)c->inputs[0]->data;
    char *y = (char *)c->outputs[0]->data;
    const char *res = node->conv_residual ? (const char *)eng_ctx_in_data(c, 3) : NULL;
    int64_t rows = g->batch * eng_nn_prod(g->out), m = g->out_channels;
    int64_t cg = g->in_channels / g->group, taps = eng_nn_prod(g->kernel);
    bool pointwise = eng_nn_conv_is_pointwise(g);
    bool empty_x = eng_shape_numel(&c->inputs[0]->shape) == 0;
    int64_t chunk = nhwc_chunk_rows(g, rows, es);
    size_t need = pointwise || empty_x ? 0 : (size_t)(chunk * taps * g->in_channels) * es;
    if (rows == 0 || m == 0)
        return 0;
    if (eng_nn_conv_is_depthwise(g))
        return nhwc_depthwise_run(c, g, res);
    /* Misaligned (never in a plan), im2col below needs the scratch that
     * eng_cuda_conv_nhwc_scratch_bytes did not ask for, and says so. */
    if (eng_cuda_conv_igemm_applies(c, g) && (uintptr_t)x % 16 == 0 &&
        (uintptr_t)c->inputs[1]->data % 16 == 0)
        return eng_cuda_conv_igemm_run(c, g, res);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    conv_gemm_t p;
    memset(&p, 0, sizeof p);
    p.dt = dt;
    p.m = m;
    p.group = g->group;
    p.kdim = taps * cg;
    p.w = c->inputs[1]->data;
    p.bias = eng_ctx_in_data(c, 2);
    p.relu = node->conv_relu;
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && rc == 0; r0 += chunk) {
        int64_t cnt = rows - r0 < chunk ? rows - r0 : chunk;
        p.rows = cnt;
        p.y = y + (size_t)(r0 * m) * es;
        p.res = res ? res + (size_t)(r0 * m) * es : NULL;
        if (empty_x || p.kdim == 0) {
            p.a = NULL;
        } else if (pointwise) {
            p.a = x + (size_t)(r0 * g->in_channels) * es;
            p.lda = g->in_channels;
            p.a_grp = cg;
        } else {
            if ((rc = nhwc_im2col_run(c, g, x, r0, cnt)))
                break;
            p.a = c->scratch;
            p.lda = taps * g->in_channels;
            p.a_grp = p.kdim;
        }
        rc = conv_gemm_epilogue(c, &p);
    }
    return rc;
}
