/* elementwise_impl.h -- what the element-wise CPU kernels (unary_kernels.c,
 * binary_kernels.c) share: the loop shape that GCC vectorises at -O2, the
 * dtype lists their per-type rows are generated from, and the chunked
 * conversions that run float rows on float16 and bfloat16 data.
 *
 * Threading: macros and pure functions. */
#ifndef FS_ENGINE_CPU_ELEMENTWISE_IMPL_H
#define FS_ENGINE_CPU_ELEMENTWISE_IMPL_H

#include <math.h>
#include <stdint.h>

#include "engine/half.h"
#include "engine/tensor.h"

#if defined(__clang__)
#define EW_IVDEP_ _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define EW_IVDEP_ _Pragma("GCC ivdep")
#else
#define EW_IVDEP_
#endif

/* Runs the statement (the variadic part, which sees `const int64_t i`) for
 * i in [0, n). GCC's -O2 cost model vectorises only loops whose trip count
 * is a known multiple of the vector length, so the range goes in blocks of
 * 16 and a scalar tail. ivdep holds for element-wise rows: an output may
 * share memory with an input only element for element (in place), which is
 * no dependence between iterations. */
#define EW_LOOP(n, ...)                                                                 \
    do {                                                                                \
        const int64_t n_ = (n);                                                         \
        for (int64_t blk_ = 0; blk_ + 16 <= n_; blk_ += 16) {                           \
            EW_IVDEP_                                                                   \
            for (int j_ = 0; j_ < 16; j_++) {                                           \
                const int64_t i = blk_ + j_;                                            \
                __VA_ARGS__                                                             \
            }                                                                           \
        }                                                                               \
        for (int64_t i = n_ & ~(int64_t)15; i < n_; i++) {                              \
            __VA_ARGS__                                                                 \
        }                                                                               \
    } while (0)

/* Marks a hot loop's function to be compiled three times -- for AVX-512,
 * AVX2 and the build's baseline (x86-64: SSE2) -- with the copy for the
 * CPU picked once at load (an ifunc): the loops then take 8 or 16 floats
 * an instruction instead of 4. Every copy computes the same bits: ISO C
 * mode compiles without FMA contraction (-ffp-contract=off), each
 * element's operations are the same IEEE operations in the same order at
 * any vector width, and reductions are written with explicit lanes that
 * combine in a fixed order (the compiler never reassociates them). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define EW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EW_CLONES
#endif

/* X(op, dtype, C type, unsigned type integer arithmetic wraps in, suffix,
 * lowest, highest). Signed arithmetic is done in the unsigned type so that
 * overflow wraps instead of being undefined (and never traps under UBSan). */
#define EW_FLOAT_TYPES(X, op)                                                           \
    X(op, ENG_DT_FLOAT, float, float, f32, -INFINITY, INFINITY)                         \
    X(op, ENG_DT_DOUBLE, double, double, f64, -INFINITY, INFINITY)
#define EW_SINT_TYPES(X, op)                                                            \
    X(op, ENG_DT_INT8, int8_t, uint32_t, i8, INT8_MIN, INT8_MAX)                        \
    X(op, ENG_DT_INT16, int16_t, uint32_t, i16, INT16_MIN, INT16_MAX)                   \
    X(op, ENG_DT_INT32, int32_t, uint32_t, i32, INT32_MIN, INT32_MAX)                   \
    X(op, ENG_DT_INT64, int64_t, uint64_t, i64, INT64_MIN, INT64_MAX)
#define EW_UINT_TYPES(X, op)                                                            \
    X(op, ENG_DT_UINT8, uint8_t, uint32_t, u8, 0, UINT8_MAX)                            \
    X(op, ENG_DT_UINT16, uint16_t, uint32_t, u16, 0, UINT16_MAX)                        \
    X(op, ENG_DT_UINT32, uint32_t, uint32_t, u32, 0, UINT32_MAX)                        \
    X(op, ENG_DT_UINT64, uint64_t, uint64_t, u64, 0, UINT64_MAX)
#define EW_NUM_TYPES(X, op) EW_FLOAT_TYPES(X, op) EW_SINT_TYPES(X, op) EW_UINT_TYPES(X, op)

/* float16 and bfloat16 have no rows of their own: an op computes them with
 * its float row, EW_HALF_CHUNK elements at a time -- the chunk converted to
 * float exactly (on the stack, where it stays in L1), the float row run on
 * it, its results rounded to nearest even once. Those are the bits the
 * widening fallback (engine/ops.c) gives -- the same float row on the same
 * float values, the same rounding -- with the half data read and written
 * once instead of copied through float tensors. */
#define EW_HALF_CHUNK 256

/* Inlined into every copy EW_CLONES makes of its caller, so that the
 * conversions vectorise for that copy's instruction set (an out-of-line
 * copy would be the baseline's: SSE2, with neither unsigned compares nor
 * 32-to-16-bit packs). */
#if defined(__GNUC__)
#define EW_INLINE static inline __attribute__((always_inline))
#else
#define EW_INLINE static inline
#endif

/* n elements of dt (float16 or bfloat16) at src as floats into dst, exactly.
 * Cannot fail. */
EW_INLINE void ew_half_to_float(eng_dtype_t dt, const uint16_t *src, float *dst, int64_t n)
{
    if (dt == ENG_DT_FLOAT16)
        EW_LOOP(n, dst[i] = eng_half_to_float(src[i]););
    else
        EW_LOOP(n, dst[i] = eng_bf16_to_float(src[i]););
}

/* n floats at src rounded to dt (float16 or bfloat16) into dst. As above. */
EW_INLINE void ew_float_to_half(eng_dtype_t dt, const float *src, uint16_t *dst, int64_t n)
{
    if (dt == ENG_DT_FLOAT16)
        EW_LOOP(n, dst[i] = eng_float_to_half(src[i]););
    else
        EW_LOOP(n, dst[i] = eng_float_to_bf16(src[i]););
}

#endif
