/* cuda_impl.h -- what the CUDA kernels (engine/cuda/<family>.cu) share:
 * the instance state behind ctx->cuda, checked calls, and launch sizing.
 *
 * Kernel contract (see engine/op.h): a run function reads shapes from
 * ctx->inputs/outputs, device data from their `data`, any value that decides
 * shapes from eng_ctx_host_in (host copy), and queues its kernels on
 * ctx->cuda->stream only. It never synchronises, never allocates (a
 * workspace comes from scratch_bytes, as ctx->scratch in device memory), and
 * checks every launch with ENG_CUDA_LAUNCHED and every CUDA/cuBLAS call with
 * ENG_CUDA_TRY / ENG_CUBLAS_TRY, so a failure becomes that node's error.
 *
 * Only .cu files include this header (it pulls in the CUDA headers). */
#ifndef FS_ENGINE_CUDA_CUDA_IMPL_H
#define FS_ENGINE_CUDA_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/error.h"
#include "engine/cuda/cuda.h"
#include "engine/op.h"

struct eng_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    eng_precision_t precision;
    int sm_count;              /* multiprocessors, for grid sizing */
};

/* Returns FS_EDEVICE from the enclosing kernel run, naming the node and the
 * call, when a CUDA runtime call fails. */
#define ENG_CUDA_TRY(ctx, call)                                                          \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            return eng_op_err((ctx), FS_EDEVICE, "%s failed: %s", #call,                 \
                              cudaGetErrorString(e_));                                   \
    } while (0)

#define ENG_CUBLAS_TRY(ctx, call)                                                        \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return eng_op_err((ctx), FS_EDEVICE, "%s failed: %s", #call,                 \
                              cublasGetStatusString(s_));                                \
    } while (0)

/* After a <<<...>>> launch: the launch error, if any, as the node's error. */
#define ENG_CUDA_LAUNCHED(ctx) ENG_CUDA_TRY((ctx), cudaGetLastError())

/* Threads per block for element-wise kernels. */
#define ENG_CUDA_THREADS 256

/* Blocks for a grid-stride loop over n items: enough to fill the device a
 * few times over, never more than the items need. n == 0 gives 0 (the
 * caller skips the launch). */
static inline unsigned eng_cuda_blocks(const eng_op_ctx_t *ctx, int64_t n)
{
    if (n <= 0)
        return 0;
    int64_t need = (n + ENG_CUDA_THREADS - 1) / ENG_CUDA_THREADS;
    int64_t cap = (int64_t)(ctx->cuda->sm_count > 0 ? ctx->cuda->sm_count : 80) * 32;
    return (unsigned)(need < cap ? need : cap);
}

/* A grid-stride loop over [0, n) with a 64-bit index. */
#define ENG_CUDA_FOR(i, n)                                                               \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (int64_t)blockDim.x * gridDim.x)

/* Row-major, strided-batched single-precision GEMM on ctx's stream at the
 * instance's precision: for each of `batch` problems,
 *   C[m, n] = alpha * op(A)[m, k] x op(B)[k, n] + beta * C
 * where op(A) is A [m, k] (lda >= k) or, with trans_a, A^T of A [k, m]
 * (lda >= m); likewise B. stride_* are elements between problems (ignored
 * when batch == 1). m, n or batch == 0 is a no-op; k == 0 scales C by beta.
 * FS_ENOTSUP when a size exceeds cuBLAS's int range; FS_EDEVICE naming the
 * cuBLAS status otherwise. (engine/cuda/gemm.cu) */
int eng_cuda_sgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                   const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                   int64_t ldc, int64_t stride_c, int64_t batch);

#endif
