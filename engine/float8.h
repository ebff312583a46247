/* float8.h -- ONNX's four 8-bit float formats to and from float, for the
 * Cast and QuantizeLinear/DequantizeLinear kernels (the CPU's and, compiled
 * by nvcc, the GPU's: one definition, so both round alike). Header-only.
 *
 *   format        exp/mantissa bits  bias  largest  infinity  NaN       -0
 *   float8e4m3fn  4/3                7     448      none      S.1111.111 yes
 *   float8e4m3fnuz 4/3               8     240      none      0x80 only  no
 *   float8e5m2    5/2                15    57344    S.11111.00 S.11111.xx yes
 *                 (written as S.11111.10)
 *   float8e5m2fnuz 5/2               16    57344    none      0x80 only  no
 *
 * From float, as ONNX's Cast: round to nearest even; a NaN gives NaN; with
 * saturate (Cast's default) an infinity or a value that rounds past the
 * largest finite one gives the largest finite one of its sign, without
 * saturate it gives infinity (e5m2) or NaN (the others). -0 gives 0 in the
 * formats that have no -0. */
#ifndef FS_ENGINE_FLOAT8_H
#define FS_ENGINE_FLOAT8_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/ops/ops_hd.h"

/* The formats, numbered as ONNX's TensorProto.DataType 17..20 less 17. */
typedef enum eng_f8_kind {
    ENG_F8_E4M3FN = 0,
    ENG_F8_E4M3FNUZ = 1,
    ENG_F8_E5M2 = 2,
    ENG_F8_E5M2FNUZ = 3,
} eng_f8_kind_t;

ENG_OPS_HD static inline int eng_f8_mant_bits(eng_f8_kind_t k)
{
    return k <= ENG_F8_E4M3FNUZ ? 3 : 2;
}

ENG_OPS_HD static inline int eng_f8_bias(eng_f8_kind_t k)
{
    return k == ENG_F8_E4M3FN ? 7 : k == ENG_F8_E4M3FNUZ ? 8 : k == ENG_F8_E5M2 ? 15 : 16;
}

/* The formats without -0 ("uz") spend 0x80 on their one NaN. */
ENG_OPS_HD static inline bool eng_f8_uz(eng_f8_kind_t k)
{
    return k == ENG_F8_E4M3FNUZ || k == ENG_F8_E5M2FNUZ;
}

/* The code of the largest finite positive value. */
ENG_OPS_HD static inline uint8_t eng_f8_max_code(eng_f8_kind_t k)
{
    return k == ENG_F8_E4M3FN ? 0x7e : k == ENG_F8_E5M2 ? 0x7b : 0x7f;
}

ENG_OPS_HD static inline float eng_f8_to_float(uint8_t v, eng_f8_kind_t k)
{
    const int m = eng_f8_mant_bits(k), bias = eng_f8_bias(k);
    const int e = (v & 0x7f) >> m, mant = v & ((1 << m) - 1);
    const bool neg = (v & 0x80) != 0;
    if (eng_f8_uz(k) && v == 0x80)
        return NAN;
    if (k == ENG_F8_E4M3FN && (v & 0x7f) == 0x7f)
        return NAN;
    if (k == ENG_F8_E5M2 && e == 0x1f)
        return mant ? NAN : (neg ? -INFINITY : INFINITY);
    double mag = e == 0 ? ldexp((double)mant, 1 - bias - m)
                        : ldexp((double)((1 << m) + mant), e - bias - m);
    return (float)(neg ? -mag : mag);
}

ENG_OPS_HD static inline uint8_t eng_float_to_f8(float x, eng_f8_kind_t k, bool saturate)
{
    const int m = eng_f8_mant_bits(k), bias = eng_f8_bias(k), min_exp = 1 - bias;
    const bool uz = eng_f8_uz(k);
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    /* e5m2's quiet NaN is S.11111.10, as ml_dtypes (ONNX's reference) writes it. */
    const uint8_t nan_code = uz                 ? 0x80
                             : k == ENG_F8_E5M2 ? (uint8_t)(sign | 0x7e)
                                                : (uint8_t)(sign | 0x7f);
    const uint8_t max_code = eng_f8_max_code(k);
    /* What a value past the largest finite one becomes. */
    const uint8_t over = saturate ? (uint8_t)(sign | max_code)
                         : k == ENG_F8_E5M2 ? (uint8_t)(sign | 0x7c)
                                            : nan_code;
    if (isnan(x))
        return nan_code;
    if (isinf(x))
        return over;
    double a = fabs((double)x);
    int ex;
    (void)frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1;
    /* The spacing of the representable values around a; rint rounds to
     * nearest even (the default rounding mode). */
    int q = (e < min_exp ? min_exp : e) - m;
    double r = rint(ldexp(a, -q));
    if (a == 0.0 || r == 0.0)
        return uz ? 0 : sign;
    double v = ldexp(r, q);
    if (v > (double)eng_f8_to_float(max_code, k))
        return over;
    (void)frexp(v, &ex);
    e = ex - 1;
    if (e < min_exp)
        return (uint8_t)(sign | (int)ldexp(v, m - min_exp));
    int mant = (int)ldexp(v, m - e) - (1 << m);
    return (uint8_t)(sign | ((e + bias) << m) | mant);
}

#endif
