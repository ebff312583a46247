/* half.h -- IEEE half and bfloat16 to and from float: the Cast kernels'
 * conversions, the element-wise kernels' on half data (the CPU's and,
 * compiled by nvcc, the GPU's: one definition, so both round alike) and the
 * loader's, for fp16/bf16 weights. Round to nearest even; NaN stays a quiet
 * NaN. Each is written without branches (every case computed, the answer
 * picked by masks) so that GCC vectorises a loop over them at -O2 and a GPU
 * warp never diverges; they give the bits of the branching forms after
 * F. Giesen (checked for all 2^16 halves and all 2^32 floats). Header-only. */
#ifndef FS_ENGINE_HALF_H
#define FS_ENGINE_HALF_H

#include <stdint.h>
#include <string.h>

#include "engine/ops/ops_hd.h"
#include "engine/tensor.h"

/* A float's bits and back. Cannot fail. */
ENG_OPS_HD static inline uint32_t eng_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

ENG_OPS_HD static inline float eng_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* All ones where c holds, else zero. */
ENG_OPS_HD static inline uint32_t eng_half_mask(int c)
{
    return 0u - (uint32_t)(c != 0);
}

/* Exact. Exponent and mantissa move up 13 bits and the exponent is
 * rebiased (by 112, or to 255 for inf and NaN); a zero or subnormal half
 * is 2^-14 * (1 + m / 1024) - 2^-14, computed exactly in float. */
ENG_OPS_HD static inline float eng_half_to_float(uint16_t h)
{
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13, e = em & 0x0f800000u;
    const uint32_t norm = em + (e == 0x0f800000u ? 0x70000000u : 0x38000000u);
    const uint32_t sub = eng_f32_bits(eng_f32_from_bits(em + 0x38800000u) - 0x1p-14f);
    const uint32_t z = eng_half_mask(e == 0);
    return eng_f32_from_bits((sub & z) | (norm & ~z) | (uint32_t)(h & 0x8000u) << 16);
}

/* Round to nearest even (F. Giesen's float_to_half_fast3_rtne): 65520 or
 * more becomes inf, NaN the quiet NaN 0x7e00 (sign kept); below 2^-14 the
 * FPU rounds the subnormal (by adding 0.5); otherwise the exponent is
 * rebiased and the 13 dropped bits rounded to even. */
ENG_OPS_HD static inline uint16_t eng_float_to_half(float f)
{
    const uint32_t x = eng_f32_bits(f), u = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u;
    const uint32_t big = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    const uint32_t small = eng_f32_bits(eng_f32_from_bits(u) + 0.5f) - 0x3f000000u;
    const uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13; /* -112 << 23 wraps */
    const uint32_t mb = eng_half_mask(u >= 0x47800000u), ms = eng_half_mask(u < 0x38800000u);
    return (uint16_t)(sign | (big & mb) | (small & ms & ~mb) | (norm & ~ms & ~mb));
}

ENG_OPS_HD static inline float eng_bf16_to_float(uint16_t h)
{
    return eng_f32_from_bits((uint32_t)h << 16);
}

ENG_OPS_HD static inline uint16_t eng_float_to_bf16(float f)
{
    const uint32_t u = eng_f32_bits(f), r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* NaN stays a quiet NaN */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

/* The same by dtype: ENG_DT_FLOAT16, else bfloat16 (callers have checked
 * dt is one of the two). */
ENG_OPS_HD static inline uint16_t eng_float_to_half_dt(eng_dtype_t dt, float f)
{
    return dt == ENG_DT_FLOAT16 ? eng_float_to_half(f) : eng_float_to_bf16(f);
}

ENG_OPS_HD static inline float eng_half_dt_to_float(eng_dtype_t dt, uint16_t h)
{
    return dt == ENG_DT_FLOAT16 ? eng_half_to_float(h) : eng_bf16_to_float(h);
}

#endif
