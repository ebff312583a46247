/* gemm.cu -- the GEMM entries every CUDA kernel uses (MatMul, Gemm,
 * Einsum, Conv's im2col products): row-major problems mapped onto cuBLAS's
 * column-major API, C^T = op(B)^T x op(A)^T, so no operand is ever copied
 * or transposed.
 *
 * eng_cuda_sgemm is the float32 product (at the handle's math mode: IEEE
 * fp32, or TF32 when asked for); eng_cuda_dgemm the float64 one (double
 * MatMul and Einsum; no math mode demotes it). eng_cuda_gemm_lowp takes both
 * operands in half or bfloat16, products on tensor cores accumulated in
 * fp32 (CUBLAS_COMPUTE_32F), C in float32; eng_cuda_gemm_half the same
 * with C in the operands' dtype. */
#include <limits.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_impl.h"

/* A row-major GEMM in cuBLAS's terms: the leading dimensions as ints and
 * the operations on A and B. */
typedef struct gemm_args {
    int ia, ib, ic;
    cublasOperation_t op_a, op_b;
} gemm_args_t;

/* Fills *g for a product of these sizes. 0, or FS_ENOTSUP when a size
 * exceeds cuBLAS's int range (*g then unset). */
static int gemm_prepare(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int64_t batch,
                        gemm_args_t *g)
{
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX || batch > INT_MAX)
        return eng_op_err(ctx, FS_ENOTSUP,
                          "GEMM %lld x %lld x %lld (batch %lld) exceeds cuBLAS's int range",
                          (long long)m, (long long)n, (long long)k, (long long)batch);
    /* cuBLAS requires ld >= 1 even for k == 0. */
    *g = {(int)(lda > 0 ? lda : 1), (int)(ldb > 0 ? ldb : 1), (int)ldc,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N};
    return 0;
}

/* The body of the float and double entries. T float: A, B and C float32
 * (cublasSgemm*, at the handle's math mode). T double: all float64
 * (cublasDgemm*). */
template <typename T>
static int gemm_run(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, T alpha, const T *a, int64_t lda, int64_t stride_a, const T *b,
                    int64_t ldb, int64_t stride_b, T beta, T *c, int64_t ldc, int64_t stride_c,
                    int64_t batch)
{
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    gemm_args_t g = {};
    int rc = gemm_prepare(ctx, trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, &g);
    if (rc)
        return rc;
    const int ia = g.ia, ib = g.ib, ic = g.ic;
    const cublasOperation_t op_a = g.op_a, op_b = g.op_b;
    cublasHandle_t h = eng_cuda_ctx(ctx)->blas;
    if constexpr (std::is_same<T, float>::value) {
        if (batch == 1)
            ENG_CUBLAS_TRY(ctx, cublasSgemm(h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, ib, a,
                                            ia, &beta, c, ic));
        else
            ENG_CUBLAS_TRY(ctx, cublasSgemmStridedBatched(h, op_b, op_a, (int)n, (int)m, (int)k,
                                                          &alpha, b, ib, stride_b, a, ia, stride_a,
                                                          &beta, c, ic, stride_c, (int)batch));
    } else {
        static_assert(std::is_same<T, double>::value, "gemm_run: float or double");
        if (batch == 1)
            ENG_CUBLAS_TRY(ctx, cublasDgemm(h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, ib, a,
                                            ia, &beta, c, ic));
        else
            ENG_CUBLAS_TRY(ctx, cublasDgemmStridedBatched(h, op_b, op_a, (int)n, (int)m, (int)k,
                                                          &alpha, b, ib, stride_b, a, ia, stride_a,
                                                          &beta, c, ic, stride_c, (int)batch));
    }
    return 0;
}

/* The body of the two half entries: A and B in dtype (ENG_DT_FLOAT16 or
 * ENG_DT_BFLOAT16), C of cuBLAS type c_type (float32, or A's own), through
 * cublasGemm*Ex with CUBLAS_COMPUTE_32F; the scalars are float, that
 * compute type's scale type. `what` names the entry in the dtype error. */
static int gemm_ex(const eng_op_ctx_t *ctx, const char *what, eng_dtype_t dtype, bool c_half,
                   bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                   int64_t stride_b, float beta, void *c, int64_t ldc, int64_t stride_c,
                   int64_t batch)
{
    if (!eng_cuda_is_lowp(dtype))
        return eng_op_err(ctx, FS_EINVAL, "a %s GEMM of dtype %s (expected float16 or "
                          "bfloat16)", what, eng_dtype_name(dtype));
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    gemm_args_t g = {};
    int rc = gemm_prepare(ctx, trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, &g);
    if (rc)
        return rc;
    cublasHandle_t h = eng_cuda_ctx(ctx)->blas;
    cudaDataType_t t = dtype == ENG_DT_FLOAT16 ? CUDA_R_16F : CUDA_R_16BF;
    cudaDataType_t ct = c_half ? t : CUDA_R_32F;
    /* An explicit cublasComputeType_t: CUBLAS_PEDANTIC_MATH on the handle
     * would demote only a cudaDataType compute type. */
    if (batch == 1)
        ENG_CUBLAS_TRY(ctx, cublasGemmEx(h, g.op_b, g.op_a, (int)n, (int)m, (int)k, &alpha, b, t,
                                         g.ib, a, t, g.ia, &beta, c, ct, g.ic, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
    else
        ENG_CUBLAS_TRY(ctx, cublasGemmStridedBatchedEx(
                                h, g.op_b, g.op_a, (int)n, (int)m, (int)k, &alpha, b, t, g.ib,
                                (long long)stride_b, a, t, g.ia, (long long)stride_a, &beta, c, ct,
                                g.ic, (long long)stride_c, (int)batch, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    return 0;
}

int eng_cuda_sgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                   const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                   int64_t ldc, int64_t stride_c, int64_t batch)
{
    return gemm_run(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                    beta, c, ldc, stride_c, batch);
}

int eng_cuda_dgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, double alpha, const double *a, int64_t lda, int64_t stride_a,
                   const double *b, int64_t ldb, int64_t stride_b, double beta, double *c,
                   int64_t ldc, int64_t stride_c, int64_t batch)
{
    return gemm_run(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                    beta, c, ldc, stride_c, batch);
}

int eng_cuda_gemm_lowp(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       float *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    return gemm_ex(ctx, "low-precision", dtype, false, trans_a, trans_b, m, n, k, alpha, a, lda,
                   stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
}

int eng_cuda_gemm_half(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       void *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    return gemm_ex(ctx, "half", dtype, true, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                   b, ldb, stride_b, beta, c, ldc, stride_c, batch);
}
