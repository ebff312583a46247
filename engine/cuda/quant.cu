/* quant.cu -- the CUDA kernels of the quantization ops (engine/ops/quant.c
 * defines them; engine/cpu/quant_kernels.c is the CPU reference).
 *
 * Every kernel takes one output element per thread (a grid-stride loop)
 * and computes it with engine/ops/quant_impl.h's per-element functions, the
 * CPU's own, so both devices give the same bits: the integer sums are
 * exact (wrapping in 32 bits), and the float steps are the same IEEE
 * operations (quant_impl.h uses the _rn intrinsics here, which nvcc never
 * fuses). MatMulInteger and QLinearMatMul sum (a - za)(b - zb) over k
 * directly; ConvInteger and QLinearConv sum each output's window, skipping
 * taps in the padding (they read the zero point, which contributes 0).
 *
 * DynamicQuantizeLinear runs three kernels: per-block maxima of x and -x
 * into the scratch, one block that combines them into the scale and zero
 * point (in the scratch, and in outputs 1 and 2 when requested), then the
 * element-wise quantization. A max is exact in any order; like the CPU's,
 * it never takes a NaN. */
#include <math.h>
#include <string.h>

#include "engine/cuda/nn_impl.h"
#include "engine/ops/quant_impl.h"

namespace {

/* --- QuantizeLinear, DequantizeLinear ---------------------------------------------------- */

__global__ void quantize_kernel(eng_quant_linear_t p, const void *x, const void *scale,
                                const void *zp, void *y)
{
    int32_t lo, hi;
    eng_quant_range(p.y_dtype, &lo, &hi);
    ENG_CUDA_FOR(i, p.n)
    {
        int64_t at = eng_quant_map_at(&p.map, i);
        if (p.f8 >= 0) {
            eng_f8_kind_t k = (eng_f8_kind_t)p.f8;
            ((uint8_t *)y)[i] = eng_quantize_f8_one(
                eng_quant_load_f(x, p.x_dtype, i), eng_quant_load_f(scale, p.scale_dtype, at),
                eng_quant_load_f8(zp, k, at), p.prec, k, p.saturate);
            continue;
        }
        int32_t q = eng_quantize_one(eng_quant_load_f(x, p.x_dtype, i),
                                     eng_quant_load_f(scale, p.scale_dtype, at),
                                     eng_quant_load_i(zp, p.y_dtype, at), p.prec, lo, hi);
        eng_quant_store_i(y, p.y_dtype, i, q);
    }
}

__global__ void dequantize_kernel(eng_quant_linear_t p, const void *x, const void *scale,
                                  const void *zp, void *y)
{
    ENG_CUDA_FOR(i, p.n)
    {
        int64_t at = eng_quant_map_at(&p.map, i);
        if (p.f8 >= 0) {
            eng_f8_kind_t k = (eng_f8_kind_t)p.f8;
            eng_quant_store_f(y, p.y_dtype, i,
                              eng_dequantize_f8_one(eng_quant_load_f8(x, k, i),
                                                    eng_quant_load_f8(zp, k, at),
                                                    eng_quant_load_f(scale, p.scale_dtype, at)));
            continue;
        }
        float v = eng_dequantize_one(eng_quant_load_i(x, p.x_dtype, i),
                                     eng_quant_load_i(zp, p.x_dtype, at),
                                     eng_quant_load_f(scale, p.scale_dtype, at));
        eng_quant_store_f(y, p.y_dtype, i, v);
    }
}

int qlinear_run(eng_op_ctx_t *c, bool quantize)
{
    eng_quant_linear_t p;
    int rc = quantize ? eng_quantize_linear_params(c, &p) : eng_dequantize_linear_params(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *z = eng_ctx_in(c, 2);
    return eng_cuda_launch(c, quantize ? quantize_kernel : dequantize_kernel, p.n, p,
                           (const void *)c->inputs[0]->data, (const void *)c->inputs[1]->data,
                           (const void *)(z ? z->data : NULL), c->outputs[0]->data);
}

int quantize_run(eng_op_ctx_t *c)
{
    return qlinear_run(c, true);
}

int dequantize_run(eng_op_ctx_t *c)
{
    return qlinear_run(c, false);
}

/* --- DynamicQuantizeLinear ---------------------------------------------------------------- */

#define DQ_THREADS 256
#define DQ_MAX_BLOCKS 1024

/* part[2b], part[2b + 1]: block b's max of 0 and every x, and of 0 and
 * every -x. */
__global__ void dq_partial(const float *__restrict__ x, int64_t n, float *part)
{
    __shared__ double smem[32];
    double hi = 0.0, nlo = 0.0;
    ENG_CUDA_FOR(i, n)
    {
        double v = x[i];
        hi = v > hi ? v : hi;
        nlo = -v > nlo ? -v : nlo;
    }
    hi = block_reduce(hi, smem, max_op());
    nlo = block_reduce(nlo, smem, max_op());
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = (float)hi;
        part[2 * blockIdx.x + 1] = (float)nlo;
    }
}

/* One block: the range from nb partials, then params[0] = scale and
 * params[1] = the zero point (as float), as the CPU computes them; also
 * into *scale_out and *zp_out when not NULL. */
__global__ void dq_finalize(const float *part, int nb, float *params, float *scale_out,
                            uint8_t *zp_out)
{
    __shared__ double smem[32];
    double hi = 0.0, nlo = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        hi = part[2 * b] > hi ? part[2 * b] : hi;
        nlo = part[2 * b + 1] > nlo ? part[2 * b + 1] : nlo;
    }
    hi = block_reduce(hi, smem, max_op());
    nlo = block_reduce(nlo, smem, max_op());
    if (threadIdx.x != 0)
        return;
    float fhi = (float)hi, flo = -(float)nlo;
    float scale = fhi == flo ? 1.0f : ENG_QF_DIV(fhi - flo, 255.0f);
    float zpf = 0.0f - ENG_QF_DIV(flo, scale);
    zpf = zpf < 0.0f ? 0.0f : zpf > 255.0f ? 255.0f : zpf;
    float zp = rintf(zpf);
    params[0] = scale;
    params[1] = zp;
    if (scale_out)
        *scale_out = scale;
    if (zp_out)
        *zp_out = (uint8_t)zp;
}

__global__ void dq_apply(const float *__restrict__ x, int64_t n, const float *params, uint8_t *y)
{
    float scale = params[0];
    int32_t zp = (int32_t)params[1];
    ENG_CUDA_FOR(i, n)
    y[i] = (uint8_t)eng_quantize_one(x[i], scale, zp, ENG_DT_FLOAT, 0, 255);
}

unsigned dq_blocks(const eng_op_ctx_t *c)
{
    int64_t n = eng_shape_numel(&c->inputs[0]->shape);
    int64_t b = (n + DQ_THREADS - 1) / DQ_THREADS;
    return (unsigned)(b < 1 ? 1 : b > DQ_MAX_BLOCKS ? DQ_MAX_BLOCKS : b);
}

size_t dynamic_quantize_scratch_bytes(const eng_op_ctx_t *c)
{
    return (2 * (size_t)dq_blocks(c) + 2) * sizeof(float);
}

int dynamic_quantize_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    int64_t n = eng_shape_numel(&x->shape);
    unsigned nb = dq_blocks(c);
    size_t need = (2 * (size_t)nb + 2) * sizeof(float);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    float *part = (float *)c->scratch, *params = part + 2 * nb;
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    dq_partial<<<nb, DQ_THREADS, 0, s>>>((const float *)x->data, n, part);
    ENG_CUDA_LAUNCHED(c);
    float *scale_out = c->n_outputs > 1 && c->outputs[1] ? (float *)c->outputs[1]->data : NULL;
    uint8_t *zp_out = c->n_outputs > 2 && c->outputs[2] ? (uint8_t *)c->outputs[2]->data : NULL;
    dq_finalize<<<1, DQ_THREADS, 0, s>>>(part, (int)nb, params, scale_out, zp_out);
    ENG_CUDA_LAUNCHED(c);
    if (!c->outputs[0])
        return 0;
    return eng_cuda_launch(c, dq_apply, n, (const float *)x->data, n, (const float *)params,
                           (uint8_t *)c->outputs[0]->data);
}

/* --- MatMulInteger, QLinearMatMul ---------------------------------------------------------- */

/* The operands' device data; a parameter absent (an optional zero point)
 * or unused (MatMulInteger's scales) is NULL. */
struct qmm_ptrs {
    const void *a, *b, *za, *zb, *sa, *sb, *sy, *zy;
    void *y;
};

__device__ __forceinline__ int64_t qmm_at(const eng_qmatmul_t &q, const eng_qmm_param_t &p,
                                          int64_t b, int64_t m, int64_t n)
{
    return eng_qmm_batch_offset(&q.d, p.bstride, b) + m * p.row + n * p.col;
}

__global__ void qmatmul_kernel(eng_qmatmul_t q, qmm_ptrs p, int64_t total)
{
    const eng_matmul_dims_t &d = q.d;
    int32_t lo = 0, hi = 0;
    if (q.y_dtype != ENG_DT_INT32)
        eng_quant_range(q.y_dtype, &lo, &hi);
    ENG_CUDA_FOR(i, total)
    {
        int64_t r = i / d.n, n = i - r * d.n;
        int64_t b = r / d.m, m = r - b * d.m;
        int64_t a0 = eng_qmm_batch_offset(&d, d.a_stride, b) + m * d.k;
        int64_t b0 = eng_qmm_batch_offset(&d, d.b_stride, b) + n;
        int32_t za = eng_quant_load_i(p.za, q.a_dtype, qmm_at(q, q.a_zp, b, m, n));
        int32_t zb = eng_quant_load_i(p.zb, q.b_dtype, qmm_at(q, q.b_zp, b, m, n));
        uint32_t acc = 0;
        for (int64_t k = 0; k < d.k; k++)
            acc += (uint32_t)((eng_quant_load_i(p.a, q.a_dtype, a0 + k) - za) *
                              (eng_quant_load_i(p.b, q.b_dtype, b0 + k * d.n) - zb));
        if (q.y_dtype == ENG_DT_INT32) {
            ((int32_t *)p.y)[i] = (int32_t)acc;
            continue;
        }
        float mult = eng_requant_mult(
            eng_quant_load_f(p.sa, q.scale_dtype, qmm_at(q, q.a_scale, b, m, n)),
            eng_quant_load_f(p.sb, q.scale_dtype, qmm_at(q, q.b_scale, b, m, n)),
            eng_quant_load_f(p.sy, q.scale_dtype, qmm_at(q, q.y_scale, b, m, n)), q.scale_dtype);
        int32_t zy = eng_quant_load_i(p.zy, q.y_dtype, qmm_at(q, q.y_zp, b, m, n));
        eng_quant_store_i(p.y, q.y_dtype, i, eng_requantize((int32_t)acc, mult, zy, lo, hi));
    }
}

const void *data_or_null(const eng_op_ctx_t *c, int i)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    return t ? t->data : NULL;
}

int qmatmul_run(eng_op_ctx_t *c)
{
    bool qlinear = strcmp(c->node->op_type, "QLinearMatMul") == 0;
    eng_qmatmul_t q;
    int rc = eng_qmatmul_params(c, qlinear, &q);
    if (rc)
        return rc;
    qmm_ptrs p = {c->inputs[q.a_in]->data, c->inputs[q.b_in]->data,
                  data_or_null(c, qlinear ? ENG_QMM_A_ZP : 2),
                  data_or_null(c, qlinear ? ENG_QMM_B_ZP : 3), NULL, NULL, NULL, NULL,
                  c->outputs[0]->data};
    if (qlinear) {
        p.sa = c->inputs[ENG_QMM_A_SCALE]->data;
        p.sb = c->inputs[ENG_QMM_B_SCALE]->data;
        p.sy = c->inputs[ENG_QMM_Y_SCALE]->data;
        p.zy = c->inputs[ENG_QMM_Y_ZP]->data;
    }
    int64_t total = eng_shape_numel(&c->outputs[0]->shape);
    return eng_cuda_launch(c, qmatmul_kernel, total, q, p, total);
}

/* --- ConvInteger, QLinearConv -------------------------------------------------------------- */

struct qconv_ptrs {
    const void *x, *xz, *w, *wz;
    const float *xs, *ws, *ys;  /* QLinearConv, else NULL */
    const void *yz;
    const int32_t *bias;        /* NULL: none */
    void *y;
};

__global__ void qconv_kernel(eng_qconv_t q, qconv_ptrs p, int64_t total)
{
    const eng_nn_geom_t &g = q.g;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    int64_t in_sz = eng_nn_prod(g.in), out_sz = eng_nn_prod(g.out), taps = eng_nn_prod(g.kernel);
    int32_t xz = eng_quant_load_i(p.xz, q.x_dtype, 0);
    int32_t lo = 0, hi = 0;
    if (q.y_dtype != ENG_DT_INT32)
        eng_quant_range(q.y_dtype, &lo, &hi);
    ENG_CUDA_FOR(i, total)
    {
        int64_t pl = i / out_sz, o = i - pl * out_sz;
        int64_t img = pl / g.out_channels, m = pl - img * g.out_channels;
        int64_t ow = o % g.out[2], oh = o / g.out[2] % g.out[1], od = o / (g.out[2] * g.out[1]);
        eng_nn_window_t wd = eng_nn_window_at(&g, 0, od, 0, g.in[0]);
        eng_nn_window_t wh = eng_nn_window_at(&g, 1, oh, 0, g.in[1]);
        eng_nn_window_t ww = eng_nn_window_at(&g, 2, ow, 0, g.in[2]);
        int64_t x0 = (img * g.in_channels + m / mg * cg) * in_sz, w0 = m * cg * taps;
        int32_t wz = eng_quant_load_i(p.wz, q.w_dtype, m * q.w_zp_stride);
        uint32_t acc = p.bias ? (uint32_t)p.bias[m] : 0u;
        for (int64_t ch = 0; ch < cg; ch++)
            for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                    int64_t row = x0 + ((ch * g.in[0] + wd.start + kd * g.dilation[0]) * g.in[1] +
                                        wh.start + kh * g.dilation[1]) * g.in[2] + ww.start;
                    int64_t wr = w0 + ((ch * g.kernel[0] + kd) * g.kernel[1] + kh) * g.kernel[2];
                    for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                        acc += (uint32_t)((eng_quant_load_i(p.x, q.x_dtype,
                                                            row + kw * g.dilation[2]) - xz) *
                                          (eng_quant_load_i(p.w, q.w_dtype, wr + kw) - wz));
                }
        if (q.y_dtype == ENG_DT_INT32) {
            ((int32_t *)p.y)[i] = (int32_t)acc;
            continue;
        }
        float mult = eng_requant_mult(p.xs[0], p.ws[m * q.w_scale_stride], p.ys[0], ENG_DT_FLOAT);
        int32_t yz = eng_quant_load_i(p.yz, q.y_dtype, 0);
        eng_quant_store_i(p.y, q.y_dtype, i, eng_requantize((int32_t)acc, mult, yz, lo, hi));
    }
}

int qconv_run(eng_op_ctx_t *c)
{
    bool qlinear = strcmp(c->node->op_type, "QLinearConv") == 0;
    eng_qconv_t q;
    int rc = eng_qconv_params(c, qlinear, &q);
    if (rc)
        return rc;
    qconv_ptrs p = {c->inputs[q.x_in]->data, data_or_null(c, q.x_zp_in), c->inputs[q.w_in]->data,
                    data_or_null(c, q.w_zp_in), NULL, NULL, NULL, NULL, NULL,
                    c->outputs[0]->data};
    if (qlinear) {
        p.xs = (const float *)c->inputs[ENG_QCONV_X_SCALE]->data;
        p.ws = (const float *)c->inputs[ENG_QCONV_W_SCALE]->data;
        p.ys = (const float *)c->inputs[ENG_QCONV_Y_SCALE]->data;
        p.yz = c->inputs[ENG_QCONV_Y_ZP]->data;
        p.bias = (const int32_t *)data_or_null(c, ENG_QCONV_B);
    }
    int64_t total = eng_shape_numel(&c->outputs[0]->shape);
    return eng_cuda_launch(c, qconv_kernel, total, q, p, total);
}

} // namespace

const eng_kernel_t eng_cuda_QuantizeLinear = {.run = quantize_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_DequantizeLinear = {.run = dequantize_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_DynamicQuantizeLinear = {
    .run = dynamic_quantize_run, .scratch_bytes = dynamic_quantize_scratch_bytes};
const eng_kernel_t eng_cuda_MatMulInteger = {.run = qmatmul_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_QLinearMatMul = {.run = qmatmul_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_ConvInteger = {.run = qconv_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_QLinearConv = {.run = qconv_run, .scratch_bytes = NULL};
