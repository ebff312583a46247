/* gemm.cu -- the one GEMM entry every CUDA kernel uses (MatMul, Gemm,
 * Einsum, Conv's im2col products): row-major problems mapped onto cuBLAS's
 * column-major API, C^T = op(B)^T x op(A)^T, so no operand is ever copied
 * or transposed. */
#include <limits.h>

#include "engine/cuda/cuda_impl.h"

int eng_cuda_sgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                   const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                   int64_t ldc, int64_t stride_c, int64_t batch)
{
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX || batch > INT_MAX)
        return eng_op_err(ctx, FS_ENOTSUP,
                          "GEMM %lld x %lld x %lld (batch %lld) exceeds cuBLAS's int range",
                          (long long)m, (long long)n, (long long)k, (long long)batch);
    /* cuBLAS requires ld >= 1 even for k == 0. */
    int ia = (int)(lda > 0 ? lda : 1), ib = (int)(ldb > 0 ? ldb : 1), ic = (int)ldc;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasHandle_t h = ctx->cuda->blas;
    if (batch == 1)
        ENG_CUBLAS_TRY(ctx, cublasSgemm(h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, ib, a,
                                        ia, &beta, c, ic));
    else
        ENG_CUBLAS_TRY(ctx, cublasSgemmStridedBatched(h, op_b, op_a, (int)n, (int)m, (int)k,
                                                      &alpha, b, ib, stride_b, a, ia, stride_a,
                                                      &beta, c, ic, stride_c, (int)batch));
    return 0;
}
