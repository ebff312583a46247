/* quant_kernels.c -- CPU kernels of the quantization ops (engine/ops/quant.c
 * defines them; engine/ops/quant_impl.h holds the per-element arithmetic
 * both devices share).
 *
 * QuantizeLinear, DequantizeLinear (integers and float8) and
 * DynamicQuantizeLinear map elements one by one. The integer products are exact:
 *  - MatMulInteger and QLinearMatMul copy A as int16 and B transposed as
 *    int16 into the scratch, so every output element is one contiguous dot
 *    product: with za and zb its row's and column's zero points,
 *    sum (a - za)(b - zb) = sum (a - za) b - zb * sum (a - za), which
 *    holds modulo 2^32 too, so zero points that vary per row, column or
 *    batch need no copy of B per batch.
 *  - ConvInteger and QLinearConv copy x - x_zero_point and w - w_zero_point
 *    as int16 into the scratch and sum each output's window directly; a
 *    tap in the padding reads x_zero_point, which is 0 after the shift, so
 *    it is skipped.
 * Sums wrap in uint32_t (ONNX: accumulation may overflow only in 32 bits).
 *
 * Threads (ctx->n_threads): elements, output rows or output planes are
 * split between them; each writes only its own outputs, so the results do
 * not depend on the thread count. A kernel fails only where its op's
 * parameters do (quant.c, before anything is written) or when its scratch
 * is short. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/ops/quant_impl.h"

/* Whether the node is of op type `op` (one kernel serves two ops). */
static bool is_op(const eng_op_ctx_t *c, const char *op)
{
    return strcmp(c->node->op_type, op) == 0;
}

/* --- QuantizeLinear, DequantizeLinear ---------------------------------------------------- */

typedef struct qlinear_job {
    const eng_quant_linear_t *p;
    const void *x, *scale, *zp;
    void *y;
} qlinear_job_t;

static void quantize_range(void *arg, int64_t begin, int64_t end)
{
    const qlinear_job_t *j = arg;
    const eng_quant_linear_t *p = j->p;
    int32_t lo, hi;
    eng_quant_range(p->y_dtype, &lo, &hi);
    bool per_tensor = eng_quant_map_is_tensor(&p->map);
    if (p->f8 >= 0) {
        eng_f8_kind_t k = (eng_f8_kind_t)p->f8;
        for (int64_t i = begin; i < end; i++) {
            int64_t at = per_tensor ? 0 : eng_quant_map_at(&p->map, i);
            ((uint8_t *)j->y)[i] = eng_quantize_f8_one(
                eng_quant_load_f(j->x, p->x_dtype, i),
                eng_quant_load_f(j->scale, p->scale_dtype, at), eng_quant_load_f8(j->zp, k, at),
                p->prec, k, p->saturate);
        }
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t at = per_tensor ? 0 : eng_quant_map_at(&p->map, i);
        int32_t q = eng_quantize_one(eng_quant_load_f(j->x, p->x_dtype, i),
                                     eng_quant_load_f(j->scale, p->scale_dtype, at),
                                     eng_quant_load_i(j->zp, p->y_dtype, at), p->prec, lo, hi);
        eng_quant_store_i(j->y, p->y_dtype, i, q);
    }
}

static void dequantize_range(void *arg, int64_t begin, int64_t end)
{
    const qlinear_job_t *j = arg;
    const eng_quant_linear_t *p = j->p;
    bool per_tensor = eng_quant_map_is_tensor(&p->map);
    if (p->f8 >= 0) {
        eng_f8_kind_t k = (eng_f8_kind_t)p->f8;
        for (int64_t i = begin; i < end; i++) {
            int64_t at = per_tensor ? 0 : eng_quant_map_at(&p->map, i);
            float v = eng_dequantize_f8_one(eng_quant_load_f8(j->x, k, i),
                                            eng_quant_load_f8(j->zp, k, at),
                                            eng_quant_load_f(j->scale, p->scale_dtype, at));
            eng_quant_store_f(j->y, p->y_dtype, i, v);
        }
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t at = per_tensor ? 0 : eng_quant_map_at(&p->map, i);
        float v = eng_dequantize_one(eng_quant_load_i(j->x, p->x_dtype, i),
                                     eng_quant_load_i(j->zp, p->x_dtype, at),
                                     eng_quant_load_f(j->scale, p->scale_dtype, at));
        eng_quant_store_f(j->y, p->y_dtype, i, v);
    }
}

static int qlinear_run(eng_op_ctx_t *c, bool quantize)
{
    eng_quant_linear_t p;
    int rc = quantize ? eng_quantize_linear_params(c, &p) : eng_dequantize_linear_params(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *z = eng_ctx_in(c, 2);
    qlinear_job_t j = {&p, c->inputs[0]->data, c->inputs[1]->data, z ? z->data : NULL,
                       c->outputs[0]->data};
    eng_parallel_for(c->n_threads, p.n, eng_parallel_grain(16),
                     quantize ? quantize_range : dequantize_range, &j);
    return 0;
}

static int quantize_run(eng_op_ctx_t *c)
{
    return qlinear_run(c, true);
}

static int dequantize_run(eng_op_ctx_t *c)
{
    return qlinear_run(c, false);
}

/* --- DynamicQuantizeLinear ---------------------------------------------------------------- */

/* y = saturate(rint(x / scale) + zp) into uint8, with scale and zp from
 * x's range widened to hold 0 (a NaN element is left out of the range):
 * scale = (max - min) / 255 (1 when the range is empty: every x is 0),
 * zp = rint(clamp(-min / scale, 0, 255)). Cannot fail. */
static int dynamic_quantize_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    const float *xv = x->data;
    int64_t n = eng_shape_numel(&x->shape);
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        lo = fminf(lo, xv[i]);
        hi = fmaxf(hi, xv[i]);
    }
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zpf = 0.0f - lo / scale;
    zpf = zpf < 0.0f ? 0.0f : zpf > 255.0f ? 255.0f : zpf;
    int32_t zp = (int32_t)rintf(zpf);
    if (c->n_outputs > 1 && c->outputs[1])
        *(float *)c->outputs[1]->data = scale;
    if (c->n_outputs > 2 && c->outputs[2])
        *(uint8_t *)c->outputs[2]->data = (uint8_t)zp;
    if (!c->outputs[0])
        return 0;
    uint8_t *y = c->outputs[0]->data;
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint8_t)eng_quantize_one(xv[i], scale, zp, ENG_DT_FLOAT, 0, 255);
    return 0;
}

/* --- MatMulInteger, QLinearMatMul ---------------------------------------------------------- */

/* The scratch: A as int16, then each B matrix transposed as int16. */
static size_t qmatmul_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_qmatmul_t q;
    if (eng_qmatmul_params(c, is_op(c, "QLinearMatMul"), &q) != 0)
        return 0;
    int64_t na = eng_shape_numel(&c->inputs[q.a_in]->shape);
    int64_t nb = eng_shape_numel(&c->inputs[q.b_in]->shape);
    return (size_t)(na + nb) * sizeof(int16_t);
}

typedef struct qmatmul_job {
    const eng_qmatmul_t *q;
    const int16_t *a, *bt;  /* A as is, B's matrices transposed */
    const void *za, *zb, *sa, *sb, *sy, *zy;
    void *y;
} qmatmul_job_t;

/* Output rows [begin, end) of batch * M. Cannot fail. */
static void qmatmul_rows(void *arg, int64_t begin, int64_t end)
{
    const qmatmul_job_t *j = arg;
    const eng_qmatmul_t *q = j->q;
    const eng_matmul_dims_t *d = &q->d;
    int64_t n_ = d->n, k_ = d->k;
    int32_t lo = 0, hi = 0;
    if (q->y_dtype != ENG_DT_INT32)
        eng_quant_range(q->y_dtype, &lo, &hi);
    for (int64_t r = begin; r < end; r++) {
        int64_t b = r / d->m, m_ = r - b * d->m;
        const int16_t *a = j->a + eng_qmm_batch_offset(d, d->a_stride, b) + m_ * k_;
        const int16_t *bt = j->bt + eng_qmm_batch_offset(d, d->b_stride, b);
        int32_t za = eng_quant_load_i(j->za, q->a_dtype,
                                      eng_qmm_batch_offset(d, q->a_zp.bstride, b) +
                                          m_ * q->a_zp.row);
        /* s2 = sum over k of (a - za), the same for every column. */
        uint32_t s2 = 0;
        for (int64_t k = 0; k < k_; k++)
            s2 += (uint32_t)(a[k] - za);
        int64_t zb0 = eng_qmm_batch_offset(d, q->b_zp.bstride, b);
        int64_t y0 = (b * d->m + m_) * n_;
        for (int64_t n = 0; n < n_; n++) {
            const int16_t *col = bt + n * k_;
            uint32_t s1 = 0;
            for (int64_t k = 0; k < k_; k++)
                s1 += (uint32_t)((int32_t)(a[k] - za) * col[k]);
            int32_t zb = eng_quant_load_i(j->zb, q->b_dtype, zb0 + n * q->b_zp.col);
            int32_t acc = (int32_t)(s1 - (uint32_t)zb * s2);
            if (q->y_dtype == ENG_DT_INT32) {
                ((int32_t *)j->y)[y0 + n] = acc;
                continue;
            }
#define QMM_AT(p) (eng_qmm_batch_offset(d, q->p.bstride, b) + m_ * q->p.row + n * q->p.col)
            float mult = eng_requant_mult(eng_quant_load_f(j->sa, q->scale_dtype, QMM_AT(a_scale)),
                                          eng_quant_load_f(j->sb, q->scale_dtype, QMM_AT(b_scale)),
                                          eng_quant_load_f(j->sy, q->scale_dtype, QMM_AT(y_scale)),
                                          q->scale_dtype);
            int32_t zy = eng_quant_load_i(j->zy, q->y_dtype, QMM_AT(y_zp));
#undef QMM_AT
            eng_quant_store_i(j->y, q->y_dtype, y0 + n, eng_requantize(acc, mult, zy, lo, hi));
        }
    }
}

/* dst[i] = src[i] (int8 or uint8) for i < n. Cannot fail. */
static void widen_8bit(int16_t *dst, const void *src, eng_dtype_t dt, int64_t n)
{
    if (dt == ENG_DT_INT8)
        for (int64_t i = 0; i < n; i++)
            dst[i] = ((const int8_t *)src)[i];
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = ((const uint8_t *)src)[i];
}

static int qmatmul_run(eng_op_ctx_t *c)
{
    bool qlinear = is_op(c, "QLinearMatMul");
    eng_qmatmul_t q;
    int rc = eng_qmatmul_params(c, qlinear, &q);
    if (rc)
        return rc;
    const eng_tensor_t *ta = c->inputs[q.a_in], *tb = c->inputs[q.b_in];
    int64_t na = eng_shape_numel(&ta->shape), nb = eng_shape_numel(&tb->shape);
    size_t need = (size_t)(na + nb) * sizeof(int16_t);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    int16_t *a = c->scratch, *bt = need ? a + na : NULL;
    widen_8bit(a, ta->data, q.a_dtype, na);
    /* Each [K, N] matrix of B becomes [N, K]. */
    int64_t kn = q.d.k * q.d.n;
    for (int64_t base = 0; kn > 0 && base < nb; base += kn)
        for (int64_t k = 0; k < q.d.k; k++)
            for (int64_t n = 0; n < q.d.n; n++) {
                int64_t i = base + k * q.d.n + n;
                bt[base + n * q.d.k + k] = q.b_dtype == ENG_DT_INT8
                                               ? ((const int8_t *)tb->data)[i]
                                               : ((const uint8_t *)tb->data)[i];
            }
    const eng_tensor_t *za = eng_ctx_in(c, qlinear ? ENG_QMM_A_ZP : 2);
    const eng_tensor_t *zb = eng_ctx_in(c, qlinear ? ENG_QMM_B_ZP : 3);
    qmatmul_job_t j = {&q, a, bt, za ? za->data : NULL, zb ? zb->data : NULL, NULL, NULL, NULL,
                       NULL, c->outputs[0]->data};
    if (qlinear) {
        j.sa = c->inputs[ENG_QMM_A_SCALE]->data;
        j.sb = c->inputs[ENG_QMM_B_SCALE]->data;
        j.sy = c->inputs[ENG_QMM_Y_SCALE]->data;
        j.zy = c->inputs[ENG_QMM_Y_ZP]->data;
    }
    int64_t batch = 1;
    for (int i = 0; i < q.d.batch_rank; i++)
        batch *= q.d.batch[i];
    eng_parallel_for(c->n_threads, batch * q.d.m, eng_parallel_grain(2 * q.d.n * q.d.k + 1),
                     qmatmul_rows, &j);
    return 0;
}

/* --- ConvInteger, QLinearConv -------------------------------------------------------------- */

/* The scratch: (QLinearConv) the requantization multiplier of each output
 * channel, then x - x_zero_point and w - w_zero_point, both int16. */
static size_t qconv_scratch_need(const eng_op_ctx_t *c, const eng_qconv_t *q)
{
    int64_t nx = eng_shape_numel(&c->inputs[q->x_in]->shape);
    int64_t nw = eng_shape_numel(&c->inputs[q->w_in]->shape);
    size_t mult = is_op(c, "QLinearConv") ? (size_t)q->g.out_channels * sizeof(float) : 0;
    return (size_t)(nx + nw) * sizeof(int16_t) + mult;
}

static size_t qconv_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_qconv_t q;
    return eng_qconv_params(c, is_op(c, "QLinearConv"), &q) == 0 ? qconv_scratch_need(c, &q) : 0;
}

typedef struct qconv_job {
    const eng_qconv_t *q;
    const int16_t *x, *w;     /* zero points subtracted */
    const int32_t *bias;      /* NULL: none */
    const float *mult;        /* QLinearConv: per output channel, else NULL */
    int32_t y_zp;
    void *y;
} qconv_job_t;

/* Output planes [begin, end) of batch * M. Cannot fail. */
static void qconv_planes(void *arg, int64_t begin, int64_t end)
{
    const qconv_job_t *j = arg;
    const eng_qconv_t *q = j->q;
    const eng_nn_geom_t *g = &q->g;
    int64_t cg = g->in_channels / g->group, mg = g->out_channels / g->group;
    int64_t in_sz = eng_nn_prod(g->in), out_sz = eng_nn_prod(g->out), taps = eng_nn_prod(g->kernel);
    const int64_t *k = g->kernel, *dl = g->dilation;
    int32_t lo = 0, hi = 0;
    if (j->mult)
        eng_quant_range(q->y_dtype, &lo, &hi);
    for (int64_t pl = begin; pl < end; pl++) {
        int64_t img = pl / g->out_channels, m = pl - img * g->out_channels;
        const int16_t *x = j->x + (img * g->in_channels + m / mg * cg) * in_sz;
        const int16_t *w = j->w + m * cg * taps;
        int64_t o = 0;
        for (int64_t od = 0; od < g->out[0]; od++) {
            eng_nn_window_t wd = eng_nn_window_at(g, 0, od, 0, g->in[0]);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                eng_nn_window_t wh = eng_nn_window_at(g, 1, oh, 0, g->in[1]);
                for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                    eng_nn_window_t ww = eng_nn_window_at(g, 2, ow, 0, g->in[2]);
                    uint32_t acc = j->bias ? (uint32_t)j->bias[m] : 0;
                    for (int64_t ch = 0; ch < cg; ch++)
                        for (int64_t kd = wd.k_begin; kd < wd.k_end; kd++)
                            for (int64_t kh = wh.k_begin; kh < wh.k_end; kh++) {
                                int64_t row = ((ch * g->in[0] + wd.start + kd * dl[0]) * g->in[1] +
                                               wh.start + kh * dl[1]) * g->in[2] + ww.start;
                                const int16_t *wr = w + ((ch * k[0] + kd) * k[1] + kh) * k[2];
                                for (int64_t kw = ww.k_begin; kw < ww.k_end; kw++)
                                    acc += (uint32_t)((int32_t)x[row + kw * dl[2]] * wr[kw]);
                            }
                    int64_t at = pl * out_sz + o;
                    if (!j->mult)
                        ((int32_t *)j->y)[at] = (int32_t)acc;
                    else
                        eng_quant_store_i(j->y, q->y_dtype, at, eng_requantize((int32_t)acc,
                                          j->mult[m], j->y_zp, lo, hi));
                }
            }
        }
    }
}

static int qconv_run(eng_op_ctx_t *c)
{
    bool qlinear = is_op(c, "QLinearConv");
    eng_qconv_t q;
    int rc = eng_qconv_params(c, qlinear, &q);
    if (rc)
        return rc;
    const eng_tensor_t *tx = c->inputs[q.x_in], *tw = c->inputs[q.w_in];
    int64_t nx = eng_shape_numel(&tx->shape), nw = eng_shape_numel(&tw->shape);
    int64_t m_count = q.g.out_channels;
    size_t need = qconv_scratch_need(c, &q);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    /* Nothing to carve when every piece is empty (the scratch is NULL). */
    float *mult = c->scratch;
    int16_t *x = need ? (int16_t *)(mult + (qlinear ? m_count : 0)) : NULL;
    int16_t *w = need ? x + nx : NULL;
    const eng_tensor_t *xz = eng_ctx_in(c, q.x_zp_in), *wz = eng_ctx_in(c, q.w_zp_in);
    int32_t xzv = eng_quant_load_i(xz ? xz->data : NULL, q.x_dtype, 0);
    for (int64_t i = 0; i < nx; i++)
        x[i] = (int16_t)(eng_quant_load_i(tx->data, q.x_dtype, i) - xzv);
    int64_t per_m = m_count > 0 ? nw / m_count : 0;
    for (int64_t i = 0; i < nw; i++)
        w[i] = (int16_t)(eng_quant_load_i(tw->data, q.w_dtype, i) -
                         eng_quant_load_i(wz ? wz->data : NULL, q.w_dtype,
                                          i / per_m * q.w_zp_stride));
    qconv_job_t j = {&q, x, w, NULL, NULL, 0, c->outputs[0]->data};
    if (qlinear) {
        const float *xs = c->inputs[ENG_QCONV_X_SCALE]->data;
        const float *ws = c->inputs[ENG_QCONV_W_SCALE]->data;
        const float *ys = c->inputs[ENG_QCONV_Y_SCALE]->data;
        for (int64_t m = 0; m < m_count; m++)
            mult[m] = eng_requant_mult(xs[0], ws[m * q.w_scale_stride], ys[0], ENG_DT_FLOAT);
        const eng_tensor_t *b = eng_ctx_in(c, ENG_QCONV_B);
        j.bias = b ? b->data : NULL;
        j.mult = mult;
        j.y_zp = eng_quant_load_i(c->inputs[ENG_QCONV_Y_ZP]->data, q.y_dtype, 0);
    }
    int64_t work = eng_nn_prod(q.g.out) * (q.g.in_channels / q.g.group) * eng_nn_prod(q.g.kernel);
    eng_parallel_for(c->n_threads, q.g.batch * m_count, eng_parallel_grain(work), qconv_planes,
                     &j);
    return 0;
}

const eng_kernel_t eng_cpu_QuantizeLinear = {.run = quantize_run};
const eng_kernel_t eng_cpu_DequantizeLinear = {.run = dequantize_run};
const eng_kernel_t eng_cpu_DynamicQuantizeLinear = {.run = dynamic_quantize_run};
const eng_kernel_t eng_cpu_MatMulInteger = {.run = qmatmul_run,
                                            .scratch_bytes = qmatmul_scratch_bytes};
const eng_kernel_t eng_cpu_QLinearMatMul = {.run = qmatmul_run,
                                            .scratch_bytes = qmatmul_scratch_bytes};
const eng_kernel_t eng_cpu_ConvInteger = {.run = qconv_run, .scratch_bytes = qconv_scratch_bytes};
const eng_kernel_t eng_cpu_QLinearConv = {.run = qconv_run, .scratch_bytes = qconv_scratch_bytes};
