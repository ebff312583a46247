/* half.h -- IEEE half and bfloat16 to and from float: the Cast kernels'
 * conversions (the CPU's and, compiled by nvcc, the GPU's: one definition,
 * so both round alike) and the loader's, for fp16/bf16 weights. Round to
 * nearest even; NaN stays a quiet NaN. Header-only. */
#ifndef FS_ENGINE_HALF_H
#define FS_ENGINE_HALF_H

#include <stdint.h>
#include <string.h>

#include "engine/ops/ops_hd.h"

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

ENG_OPS_HD static inline float eng_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* zero or subnormal */
        return sign ? -f : f;
    }
    return eng_f32_from_bits(sign | (e == 0x1f ? 0x7f800000u | (m << 13)
                                                : ((e + 112) << 23) | (m << 13)));
}

/* Round to nearest even (after F. Giesen's float_to_half_fast3_rtne). */
ENG_OPS_HD static inline uint16_t eng_float_to_half(float f)
{
    uint32_t u = eng_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u >= 0x47800000u) /* 65536 or more, inf, NaN */
        return sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (u < 0x38800000u) /* a subnormal half: let the FPU round */
        return sign | (uint16_t)(eng_f32_bits(eng_f32_from_bits(u) + 0.5f) - 0x3f000000u);
    uint32_t odd = (u >> 13) & 1u;
    u += (uint32_t)(15 - 127) * (1u << 23) + 0xfffu + odd;
    return sign | (uint16_t)(u >> 13);
}

ENG_OPS_HD static inline float eng_bf16_to_float(uint16_t h)
{
    return eng_f32_from_bits((uint32_t)h << 16);
}

ENG_OPS_HD static inline uint16_t eng_float_to_bf16(float f)
{
    uint32_t u = eng_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* keep NaN a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
