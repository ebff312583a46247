/* reduce_impl.h -- what the CUDA kernels of the reduce family (reduce.cu,
 * softmax.cu, cumsum.cu) share: warp shuffles of any value and the block
 * shape of their warp-per-row kernels.
 *
 * Only .cu files include this header. Threading: pure functions. */
#ifndef FS_ENGINE_CUDA_REDUCE_IMPL_H
#define FS_ENGINE_CUDA_REDUCE_IMPL_H

#include <stdint.h>
#include <string.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/reduce_impl.h"

#define FULL_MASK 0xffffffffu
#define RED_THREADS 256         /* block-per-output rows, finishing */
#define RED_WARPS (RED_THREADS / 32)

static inline int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* shfl(word) applied to each 32-bit word of v: a shuffle of any trivially
 * copyable value. */
template <typename V, typename Shfl> __device__ __forceinline__ V shfl_words(V v, Shfl shfl)
{
    constexpr int W = (int)((sizeof(V) + 3) / 4);
    int w[W] = {};
    memcpy(w, &v, sizeof(V));
#pragma unroll
    for (int i = 0; i < W; i++)
        w[i] = shfl(w[i]);
    V r;
    memcpy(&r, w, sizeof(V));
    return r;
}

template <typename V> __device__ __forceinline__ V shfl_down_any(V v, int d)
{
    return shfl_words(v, [d](int w) { return __shfl_down_sync(FULL_MASK, w, d); });
}

template <typename V> __device__ __forceinline__ V shfl_up_any(V v, int d)
{
    return shfl_words(v, [d](int w) { return __shfl_up_sync(FULL_MASK, w, d); });
}

template <typename V> __device__ __forceinline__ V shfl_idx_any(V v, int src)
{
    return shfl_words(v, [src](int w) { return __shfl_sync(FULL_MASK, w, src); });
}

#endif
