/* lowp_impl.h -- float32, IEEE half and bfloat16 elements for the CUDA
 * kernels that take half activations as they are (GEMMs, normalisations,
 * softmax, pools, reductions): each element read as float (to_f32), each
 * result rounded once from float to nearest even (from_f32<T>: the rounding
 * of __float2half_rn / __float2bfloat16_rn, engine/half.h's), and the
 * dispatch from a runtime dtype to one of the three C++ types. The
 * arithmetic between stays float (or double where the float kernel uses
 * double), so a half kernel is its float kernel with other loads and
 * stores.
 *
 * Only .cu files include this header; everything in it has internal
 * linkage. Threading: pure functions. */
#ifndef FS_ENGINE_CUDA_LOWP_IMPL_H
#define FS_ENGINE_CUDA_LOWP_IMPL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_impl.h"

namespace {

__device__ __forceinline__ float to_f32(float v)
{
    return v;
}
__device__ __forceinline__ float to_f32(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __half from_f32<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* f(T{}) for T float, __half or __nv_bfloat16 as dt is ENG_DT_FLOAT,
 * ENG_DT_FLOAT16 or ENG_DT_BFLOAT16 (f's answer: 0 or an FS_E* code);
 * FS_ENOTSUP naming the dtype and c's node for any other dtype. */
template <typename F> int lowp_dispatch(const eng_op_ctx_t *c, eng_dtype_t dt, F &&f)
{
    switch (dt) {
    case ENG_DT_FLOAT: return f(float{});
    case ENG_DT_FLOAT16: return f(__half{});
    case ENG_DT_BFLOAT16: return f(__nv_bfloat16{});
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported (float, float16 or "
                          "bfloat16)", eng_dtype_name(dt));
    }
}

} // namespace

#endif
