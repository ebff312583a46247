/* dtype_impl.h -- the dtype scaffolding the CUDA kernels share: a C++ type
 * per engine dtype (dtype_of), lists of them (types<...>) and dispatch from a
 * runtime dtype to a generic lambda over that list, the unsigned type
 * integer arithmetic wraps in, 16-byte vectors for the vector paths, and the
 * fp16/bf16 conversions (engine/half.h, one definition with the CPU's) with
 * the wrapper that runs a float functor on half elements (half_fn).
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

/* --- float16 and bfloat16: stored as such, computed in float ---------------------------- */

using half_types = types<f16_t, bf16_t>;

template <typename T>
constexpr bool is_half_v = std::is_same<T, f16_t>::value || std::is_same<T, bf16_t>::value;

/* The type an element of T computes in: float for the half types, else T. */
template <typename T> using compute_t = typename std::conditional<is_half_v<T>, float, T>::type;

/* A half element as a float, exactly, and a float rounded to nearest even:
 * engine/half.h's conversions, so the bits are the CPU's (and the widening
 * fallback's, whose Cast kernels use them too). */
__device__ inline float half_load(f16_t h)
{
    return eng_half_to_float(h.bits);
}
__device__ inline float half_load(bf16_t h)
{
    return eng_bf16_to_float(h.bits);
}
template <typename H> __device__ inline H half_store(float f)
{
    if constexpr (std::is_same<H, f16_t>::value)
        return {eng_float_to_half(f)};
    else
        return {eng_float_to_bf16(f)};
}

/* An element as the type it computes in (compute_t). */
template <typename T> __device__ inline compute_t<T> compute_load(T x)
{
    if constexpr (is_half_v<T>)
        return half_load(x);
    else
        return x;
}

/* The list of A's types followed by B's. */
template <typename A, typename B> struct types_cat;
template <typename... A, typename... B> struct types_cat<types<A...>, types<B...>> {
    using type = types<A..., B...>;
};
template <typename A, typename B> using types_cat_t = typename types_cat<A, B>::type;

/* What a float functor's result R becomes on half H: H for a float result,
 * anything else (a comparison's bool byte) as it is. */
template <typename H, typename R>
using half_result_t = typename std::conditional<std::is_same<R, float>::value, H, R>::type;

/* A float functor run on half elements: every argument loaded to float, a
 * float result rounded to H once -- per element exactly what converting
 * the tensors to float, running the float kernel and rounding its output
 * gives (engine/ops.c's widening), without the float tensors. The kernel
 * files give it their functors' type names (TI, TA, ...). */
template <typename H, typename Op> struct half_fn {
    Op op;
    template <typename... A> __device__ auto operator()(A... a) const
    {
        auto r = op(half_load(a)...);
        if constexpr (std::is_same<decltype(r), float>::value)
            return half_store<H>(r);
        else
            return r;
    }
};

} // namespace

#endif
