/* dtype_impl.h -- the dtype scaffolding the CUDA kernels share: a C++ type
 * per engine dtype (dtype_of), lists of them (types<...>) and dispatch from a
 * runtime dtype to a generic lambda over that list, the unsigned type
 * integer arithmetic wraps in, 16-byte vectors for the vector paths, and the
 * fp16/bf16 conversions (engine/half.h, one definition with the CPU's).
 *
 * Only .cu files include this header; everything in it has internal
 * linkage, as in the files that include it. Threading: pure functions. */
#ifndef FS_ENGINE_CUDA_DTYPE_IMPL_H
#define FS_ENGINE_CUDA_DTYPE_IMPL_H

#include <stdint.h>

#include <type_traits>

#include "engine/cuda/cuda_impl.h"
#include "engine/float8.h"
#include "engine/half.h"

namespace {

/* Storage of the dtypes whose C type another dtype already uses. */
struct f16_t {
    uint16_t bits;
};
struct bf16_t {
    uint16_t bits;
};
struct bool_t {
    uint8_t v;
};
/* The 8-bit floats (engine/float8.h), one type per format. */
template <int K> struct f8_t {
    uint8_t bits;
    static constexpr eng_f8_kind_t kind = (eng_f8_kind_t)K;
};
using f8e4m3fn_t = f8_t<ENG_F8_E4M3FN>;
using f8e4m3fnuz_t = f8_t<ENG_F8_E4M3FNUZ>;
using f8e5m2_t = f8_t<ENG_F8_E5M2>;
using f8e5m2fnuz_t = f8_t<ENG_F8_E5M2FNUZ>;
template <typename T> struct is_f8 : std::false_type {};
template <int K> struct is_f8<f8_t<K>> : std::true_type {};

template <typename T> struct dtype_of;
#define DTYPE_OF(T, DT)                                                                  \
    template <> struct dtype_of<T> {                                                     \
        static constexpr eng_dtype_t value = DT;                                         \
    };
DTYPE_OF(float, ENG_DT_FLOAT)
DTYPE_OF(double, ENG_DT_DOUBLE)
DTYPE_OF(f16_t, ENG_DT_FLOAT16)
DTYPE_OF(bf16_t, ENG_DT_BFLOAT16)
DTYPE_OF(int8_t, ENG_DT_INT8)
DTYPE_OF(int16_t, ENG_DT_INT16)
DTYPE_OF(int32_t, ENG_DT_INT32)
DTYPE_OF(int64_t, ENG_DT_INT64)
DTYPE_OF(uint8_t, ENG_DT_UINT8)
DTYPE_OF(uint16_t, ENG_DT_UINT16)
DTYPE_OF(uint32_t, ENG_DT_UINT32)
DTYPE_OF(uint64_t, ENG_DT_UINT64)
DTYPE_OF(bool_t, ENG_DT_BOOL)
DTYPE_OF(f8e4m3fn_t, ENG_DT_FLOAT8E4M3FN)
DTYPE_OF(f8e4m3fnuz_t, ENG_DT_FLOAT8E4M3FNUZ)
DTYPE_OF(f8e5m2_t, ENG_DT_FLOAT8E5M2)
DTYPE_OF(f8e5m2fnuz_t, ENG_DT_FLOAT8E5M2FNUZ)
#undef DTYPE_OF

template <typename... Ts> struct types {};

/* The CPU's EW_FLOAT_TYPES, EW_SINT_TYPES and EW_UINT_TYPES together. */
using numeric_types = types<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                            uint32_t, uint64_t>;

/* dispatch's answer when dt is not in the list (never an FS_E* code). */
constexpr int DISPATCH_NONE = 1;

/* f(T{}) for the T of `types` whose dtype is dt, or DISPATCH_NONE. */
template <typename F> int dispatch(eng_dtype_t, types<>, F &&)
{
    return DISPATCH_NONE;
}
template <typename T, typename... Ts, typename F>
int dispatch(eng_dtype_t dt, types<T, Ts...>, F &&f)
{
    if (dt == dtype_of<T>::value)
        return f(T{});
    return dispatch(dt, types<Ts...>{}, f);
}

/* Integer arithmetic wraps in this unsigned type (the CPU's UT). */
template <typename T>
using wrap_t = typename std::conditional<sizeof(T) <= 4, uint32_t, uint64_t>::type;

template <typename T> constexpr bool is_float_v = std::is_floating_point<T>::value;
template <typename T> constexpr bool is_sint_v = std::is_signed<T>::value && !is_float_v<T>;

/* N elements loaded or stored as one aligned vector. */
template <typename T, int N> struct alignas(sizeof(T) * N) vec_t {
    T v[N];
};

} // namespace

#endif
