/* quant_impl.h -- what the quantization op definitions (engine/ops/quant.c)
 * and every device's kernels share: where each element finds its scale and
 * zero point, and the per-element arithmetic, written once so that the CPU
 * and the GPU compute the same bits.
 *
 * The arithmetic follows ONNX (and its reference implementation):
 *  - QuantizeLinear: y = saturate(rint(x / scale) + zero_point), the
 *    division in the precision of `precision` (opset 23), else of the
 *    scale's dtype (float, float16 or bfloat16; float16 and bfloat16 divide
 *    in float and round the quotient to their precision: float's 24 bits
 *    are more than twice theirs plus two, so that equals dividing in the
 *    narrow type itself); rint rounds half to even; saturation clamps to
 *    the output dtype's range. A NaN quotient counts as 0 (the zero point).
 *  - QuantizeLinear to a float8 format: y = float8(x / scale + zero_point),
 *    the quotient as above, no rint: the conversion (engine/float8.h, as
 *    Cast's) rounds to nearest even, and `saturate` (opset 19, default 1)
 *    decides what a value past the format's range becomes (its largest
 *    finite value, else infinity or NaN). The zero point is added in float
 *    only where it is not 0: ONNX's reference does not add it at all (so
 *    -0 stays -0 where the format has -0), its formula does.
 *  - DequantizeLinear: y = (x - zero_point) * scale, the difference exact
 *    (int64), the product in float, rounded once to the output dtype. From
 *    float8: x and the zero point as float, the difference (where the zero
 *    point is not 0) and the product in float, rounded once.
 *  - The integer products (MatMulInteger, ConvInteger, QLinear*): every
 *    term (a - a_zero_point) * (b - b_zero_point) is exact and the sum
 *    wraps in 32 bits ("accumulation may overflow if and only if in 32
 *    bits"), done in uint32_t so the wrap is defined.
 *  - Requantization (QLinearMatMul, QLinearConv): the multiplier
 *    a_scale * b_scale / y_scale in the scales' precision (float, or
 *    float16 / bfloat16 rounding after each step), then
 *    saturate(rint(acc * multiplier + y_zero_point)) with the product and
 *    the sum in double, as numpy computes an int32 array times a float32.
 * nvcc would contract a * b + c into one fused operation; the device
 * versions use the _rn intrinsics, which it never contracts.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_QUANT_IMPL_H
#define FS_ENGINE_OPS_QUANT_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/float8.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/ops/linalg_impl.h"
#include "engine/ops/nn_impl.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDA_ARCH__
#define ENG_QF_DIV(a, b) __fdiv_rn((a), (b))
#define ENG_QF_MUL(a, b) __fmul_rn((a), (b))
#define ENG_QF_ADD(a, b) __fadd_rn((a), (b))
#define ENG_QD_MUL(a, b) __dmul_rn((a), (b))
#define ENG_QD_ADD(a, b) __dadd_rn((a), (b))
#else
#define ENG_QF_DIV(a, b) ((a) / (b))
#define ENG_QF_MUL(a, b) ((a) * (b))
#define ENG_QF_ADD(a, b) ((a) + (b))
#define ENG_QD_MUL(a, b) ((a) * (b))
#define ENG_QD_ADD(a, b) ((a) + (b))
#endif

/* --- element access ------------------------------------------------------------------------ */

/* Element i of a float, float16 or bfloat16 array, as float. */
ENG_OPS_HD static inline float eng_quant_load_f(const void *p, eng_dtype_t dt, int64_t i)
{
    if (dt == ENG_DT_FLOAT16)
        return eng_half_to_float(((const uint16_t *)p)[i]);
    if (dt == ENG_DT_BFLOAT16)
        return eng_bf16_to_float(((const uint16_t *)p)[i]);
    if (dt == ENG_DT_INT32)
        return (float)((const int32_t *)p)[i];
    return ((const float *)p)[i];
}

/* Element i of an int8, uint8, int16, uint16 or int32 array; 0 for a NULL
 * array (an absent zero point). */
ENG_OPS_HD static inline int32_t eng_quant_load_i(const void *p, eng_dtype_t dt, int64_t i)
{
    if (!p)
        return 0;
    switch (dt) {
    case ENG_DT_INT8: return ((const int8_t *)p)[i];
    case ENG_DT_UINT8: return ((const uint8_t *)p)[i];
    case ENG_DT_INT16: return ((const int16_t *)p)[i];
    case ENG_DT_UINT16: return ((const uint16_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* Element i of a float8 array of format k, as float; 0 for a NULL array
 * (an absent zero point). */
ENG_OPS_HD static inline float eng_quant_load_f8(const void *p, eng_f8_kind_t k, int64_t i)
{
    return p ? eng_f8_to_float(((const uint8_t *)p)[i], k) : 0.0f;
}

/* Stores v as element i of a float, float16 or bfloat16 array (rounding to
 * nearest even). */
ENG_OPS_HD static inline void eng_quant_store_f(void *p, eng_dtype_t dt, int64_t i, float v)
{
    if (dt == ENG_DT_FLOAT16)
        ((uint16_t *)p)[i] = eng_float_to_half(v);
    else if (dt == ENG_DT_BFLOAT16)
        ((uint16_t *)p)[i] = eng_float_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* Stores v (in range for dt) as element i of an int8, uint8, int16 or
 * uint16 array. */
ENG_OPS_HD static inline void eng_quant_store_i(void *p, eng_dtype_t dt, int64_t i, int32_t v)
{
    switch (dt) {
    case ENG_DT_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ENG_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ENG_DT_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    default: ((uint16_t *)p)[i] = (uint16_t)v; break;
    }
}

/* v rounded to dt's precision (float16, bfloat16; float: v itself). */
ENG_OPS_HD static inline float eng_quant_round_to(float v, eng_dtype_t dt)
{
    if (dt == ENG_DT_FLOAT16)
        return eng_half_to_float(eng_float_to_half(v));
    if (dt == ENG_DT_BFLOAT16)
        return eng_bf16_to_float(eng_float_to_bf16(v));
    return v;
}

/* The range of an int8, uint8, int16 or uint16 output. */
ENG_OPS_HD static inline void eng_quant_range(eng_dtype_t dt, int32_t *lo, int32_t *hi)
{
    switch (dt) {
    case ENG_DT_INT8: *lo = -128; *hi = 127; break;
    case ENG_DT_UINT8: *lo = 0; *hi = 255; break;
    case ENG_DT_INT16: *lo = -32768; *hi = 32767; break;
    default: *lo = 0; *hi = 65535; break;
    }
}

/* --- the arithmetic ------------------------------------------------------------------------ */

/* saturate(rint(q) + zp) into [lo, hi]; a NaN q counts as 0. (Past 2^24
 * the float sum may round, but then it is far outside any range.) */
ENG_OPS_HD static inline int32_t eng_quant_saturate(float q, int32_t zp, int32_t lo, int32_t hi)
{
    float r = (q != q ? 0.0f : rintf(q)) + (float)zp;
    if (r <= (float)lo)
        return lo;
    if (r >= (float)hi)
        return hi;
    return (int32_t)r;
}

/* QuantizeLinear of one element: x and scale as float, the division in
 * `prec` (float, float16 or bfloat16). */
ENG_OPS_HD static inline int32_t eng_quantize_one(float x, float scale, int32_t zp,
                                                  eng_dtype_t prec, int32_t lo, int32_t hi)
{
    float q = ENG_QF_DIV(eng_quant_round_to(x, prec), eng_quant_round_to(scale, prec));
    return eng_quant_saturate(eng_quant_round_to(q, prec), zp, lo, hi);
}

/* DequantizeLinear of one element, in float (the caller stores it in the
 * output dtype). */
ENG_OPS_HD static inline float eng_dequantize_one(int32_t x, int32_t zp, float scale)
{
    return ENG_QF_MUL((float)((int64_t)x - zp), scale);
}

/* QuantizeLinear of one element to float8 format k: the division as
 * eng_quantize_one's, plus zp (as float) where it is not 0, converted with
 * `saturate`. */
ENG_OPS_HD static inline uint8_t eng_quantize_f8_one(float x, float scale, float zp,
                                                     eng_dtype_t prec, eng_f8_kind_t k,
                                                     bool saturate)
{
    float q = ENG_QF_DIV(eng_quant_round_to(x, prec), eng_quant_round_to(scale, prec));
    q = eng_quant_round_to(q, prec);
    if (zp != 0.0f)
        q = ENG_QF_ADD(q, zp);
    return eng_float_to_f8(q, k, saturate);
}

/* DequantizeLinear of one float8 element (x and zp as float), in float. */
ENG_OPS_HD static inline float eng_dequantize_f8_one(float x, float zp, float scale)
{
    return ENG_QF_MUL(zp != 0.0f ? ENG_QF_ADD(x, -zp) : x, scale);
}

/* The requantization multiplier a_scale * b_scale / y_scale in `prec`. */
ENG_OPS_HD static inline float eng_requant_mult(float sa, float sb, float sy, eng_dtype_t prec)
{
    float ab = eng_quant_round_to(ENG_QF_MUL(sa, sb), prec);
    return eng_quant_round_to(ENG_QF_DIV(ab, sy), prec);
}

/* saturate(rint(acc * mult + zp)) into [lo, hi], in double; NaN gives zp
 * (clamped). */
ENG_OPS_HD static inline int32_t eng_requantize(int32_t acc, float mult, int32_t zp, int32_t lo,
                                                int32_t hi)
{
    double r = ENG_QD_ADD(ENG_QD_MUL((double)acc, (double)mult), (double)zp);
    if (r != r)
        r = (double)zp;
    r = rint(r);
    if (r <= (double)lo)
        return lo;
    if (r >= (double)hi)
        return hi;
    return (int32_t)r;
}

/* --- QuantizeLinear, DequantizeLinear ---------------------------------------------------- */

/* Where element i of x finds its scale and zero point: x read as
 * [outer, dim, inner] around the quantization axis, element (o, d, in)
 * reads the parameter at o * outer_stride + (d / block) * dim_stride +
 * in * inner_stride. Per tensor: every stride 0. Per axis: dim_stride 1,
 * block 1. Blocked: the parameter has x's shape with ceil(dim / block) on
 * the axis. */
typedef struct eng_quant_map {
    int64_t inner, dim, block;       /* each >= 1 */
    int64_t outer_stride, dim_stride, inner_stride;
} eng_quant_map_t;

ENG_OPS_HD static inline int64_t eng_quant_map_at(const eng_quant_map_t *m, int64_t i)
{
    int64_t q = i / m->inner, in = i - q * m->inner;
    int64_t o = q / m->dim, d = q - o * m->dim;
    return o * m->outer_stride + d / m->block * m->dim_stride + in * m->inner_stride;
}

/* Whether every element reads parameter 0 (per-tensor quantization). */
ENG_OPS_HD static inline bool eng_quant_map_is_tensor(const eng_quant_map_t *m)
{
    return m->outer_stride == 0 && m->dim_stride == 0 && m->inner_stride == 0;
}

/* A QuantizeLinear or DequantizeLinear node bound to its inputs. */
typedef struct eng_quant_linear {
    eng_quant_map_t map;
    int64_t n;                 /* elements of x */
    eng_dtype_t x_dtype;       /* Quantize: float, float16, bfloat16, int32; else the quantized */
    eng_dtype_t scale_dtype;   /* float, float16, bfloat16 */
    eng_dtype_t y_dtype;       /* Quantize: the quantized; Dequantize: float, float16, bfloat16 */
    eng_dtype_t prec;          /* Quantize: the division's precision */
    int f8;                    /* the quantized dtype's eng_f8_kind_t; -1: an integer */
    bool saturate;             /* Quantize to float8: saturate (opset 19, default 1) */
    bool has_zero_point;
} eng_quant_linear_t;

/* Validates the node in c against its inputs (dtypes, the scale's and zero
 * point's shapes for per-tensor, per-axis or blocked quantization,
 * output_dtype) and fills *p. 0, FS_EINVAL (a shape or attribute that does
 * not fit, named) or FS_ENOTSUP (a dtype this engine does not quantize to or
 * from, named). */
int eng_quantize_linear_params(const eng_op_ctx_t *c, eng_quant_linear_t *p);
int eng_dequantize_linear_params(const eng_op_ctx_t *c, eng_quant_linear_t *p);

/* --- MatMulInteger, QLinearMatMul ---------------------------------------------------------- */

/* A scale or zero point of a quantized MatMul, read for output element
 * (batch j, row m, column n) at base(j) + m * row + n * col, where base(j)
 * sums j's index along each broadcast batch dim (eng_matmul_dims_t's
 * batch) times bstride. An absent one has every stride 0. */
typedef struct eng_qmm_param {
    int64_t bstride[ENG_MAX_RANK];
    int64_t row, col;
} eng_qmm_param_t;

/* A MatMulInteger (qlinear false) or QLinearMatMul node bound to its
 * inputs. Parameters a_* are per tensor or per row of A (a 1-D [M], or
 * [..., M, 1] broadcasting over the batch dims), b_* per tensor or per
 * column of B ([N], or [..., 1, N]), y_* per tensor or any shape that
 * broadcasts to the output [..., M, N]. */
typedef struct eng_qmatmul {
    eng_matmul_dims_t d;
    eng_qmm_param_t a_zp, b_zp, a_scale, b_scale, y_scale, y_zp;
    eng_dtype_t a_dtype, b_dtype;  /* int8 or uint8 */
    eng_dtype_t y_dtype;           /* int32 (MatMulInteger); int8 or uint8 */
    eng_dtype_t scale_dtype;       /* float, float16 or bfloat16 (QLinearMatMul) */
    int a_in, b_in;                /* input indices of A and B */
} eng_qmatmul_t;

/* 0, FS_EINVAL (shapes, named) or FS_ENOTSUP (a dtype, named). */
int eng_qmatmul_params(const eng_op_ctx_t *c, bool qlinear, eng_qmatmul_t *q);

/* Input indices of QLinearMatMul's operands and parameters. */
enum { ENG_QMM_A = 0, ENG_QMM_A_SCALE, ENG_QMM_A_ZP, ENG_QMM_B, ENG_QMM_B_SCALE, ENG_QMM_B_ZP,
       ENG_QMM_Y_SCALE, ENG_QMM_Y_ZP };

/* The offset of batch j's first element in an operand with per-batch-dim
 * strides `stride` (eng_matmul_dims_t's a_stride / b_stride, or a
 * parameter's bstride) over the batch dims `batch`. */
ENG_OPS_HD static inline int64_t eng_qmm_batch_offset(const eng_matmul_dims_t *d,
                                                      const int64_t *stride, int64_t j)
{
    int64_t off = 0;
    for (int i = d->batch_rank - 1; i >= 0; i--) {
        int64_t q = j / d->batch[i];
        off += (j - q * d->batch[i]) * stride[i];
        j = q;
    }
    return off;
}

/* --- ConvInteger, QLinearConv -------------------------------------------------------------- */

/* A ConvInteger (qlinear false) or QLinearConv node bound to its inputs:
 * the window geometry (engine/ops/nn_impl.h) and the parameters' layout.
 * x's zero point and scale and y's are per tensor; w's per tensor or per
 * output channel ([M]); the bias B (QLinearConv) is int32 [M]. */
typedef struct eng_qconv {
    eng_nn_geom_t g;
    eng_dtype_t x_dtype, w_dtype; /* int8 or uint8 */
    eng_dtype_t y_dtype;          /* int32 (ConvInteger); int8 or uint8 */
    eng_dtype_t scale_dtype;      /* QLinearConv: float */
    int64_t w_zp_stride, w_scale_stride; /* per output channel: 1, per tensor: 0 */
    int x_in, x_zp_in, w_in, w_zp_in; /* input indices (-1: none) */
} eng_qconv_t;

/* Input indices of QLinearConv. */
enum { ENG_QCONV_X = 0, ENG_QCONV_X_SCALE, ENG_QCONV_X_ZP, ENG_QCONV_W, ENG_QCONV_W_SCALE,
       ENG_QCONV_W_ZP, ENG_QCONV_Y_SCALE, ENG_QCONV_Y_ZP, ENG_QCONV_B };

/* 0, FS_EINVAL (shapes, attributes, named) or FS_ENOTSUP (a dtype, named). */
int eng_qconv_params(const eng_op_ctx_t *c, bool qlinear, eng_qconv_t *q);

#ifdef __cplusplus
}
#endif
#endif
