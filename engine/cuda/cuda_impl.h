/* cuda_impl.h -- what the CUDA kernels (engine/cuda/<family>.cu) share:
 * the instance state behind ctx->instance (eng_cuda_ctx), checked calls, and
 * launch sizing.
 *
 * Kernel contract (see engine/op.h): a run function reads shapes from
 * ctx->inputs/outputs, device data from their `data`, any value that decides
 * shapes from eng_ctx_host_in (host copy), and queues its kernels on
 * eng_cuda_ctx(ctx)->stream only. It never synchronises, never allocates (a
 * workspace comes from scratch_bytes, as ctx->scratch in device memory), and
 * checks every launch with ENG_CUDA_LAUNCHED and every CUDA/cuBLAS call with
 * ENG_CUDA_TRY / ENG_CUBLAS_TRY, so a failure becomes that node's error.
 *
 * Only .cu files include this header (it pulls in the CUDA headers). */
#ifndef FS_ENGINE_CUDA_CUDA_IMPL_H
#define FS_ENGINE_CUDA_CUDA_IMPL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/error.h"
#include "engine/cuda/cuda.h"
#include "engine/kernels.h"
#include "engine/op.h"

struct lt_plan;

struct eng_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;       /* cuBLASLt, for every float/half GEMM (gemm.cu) */
    eng_precision_t precision;
    int sm_count;              /* multiprocessors, for grid sizing */
    /* The libraries' workspace the run holds (eng_cuda_set_workspace): set
     * on the cuBLAS handle and passed to each cuBLASLt call. */
    void *workspace;
    size_t workspace_bytes;
    /* cuBLASLt's descriptors and chosen algorithm per GEMM shape (gemm.cu:
     * a uthash table, at most LT_PLANS_MAX, oldest evicted first), used
     * only by the thread running the instance, like the handles. */
    struct lt_plan *lt_plans;
    unsigned n_lt_plans;
};

/* Frees the instance's cuBLASLt plans (gemm.cu). Cannot fail. */
void eng_cuda_lt_plans_clear(eng_cuda_t *c);

/* The model instance's CUDA state a device run's context carries. Cannot
 * fail; NULL only for a CPU context, which no CUDA kernel sees. */
static inline eng_cuda_t *eng_cuda_ctx(const eng_op_ctx_t *ctx)
{
    return (eng_cuda_t *)ctx->instance;
}

/* Returns FS_EDEVICE from the enclosing kernel run, naming the node and the
 * call, when a CUDA runtime (ENG_CUDA_TRY) or cuBLAS (ENG_CUBLAS_TRY) call
 * fails. ENG_TRY_STATUS_ is their one body: text is the call as written,
 * describe turns its status into words. */
#define ENG_TRY_STATUS_(ctx, call, text, status_t, ok, describe)                         \
    do {                                                                                 \
        status_t s_ = (call);                                                            \
        if (s_ != (ok))                                                                  \
            return eng_op_err((ctx), FS_EDEVICE, "%s failed: %s", text, describe(s_));   \
    } while (0)
#define ENG_CUDA_TRY(ctx, call)                                                          \
    ENG_TRY_STATUS_(ctx, call, #call, cudaError_t, cudaSuccess, cudaGetErrorString)
#define ENG_CUBLAS_TRY(ctx, call)                                                        \
    ENG_TRY_STATUS_(ctx, call, #call, cublasStatus_t, CUBLAS_STATUS_SUCCESS,             \
                    cublasGetStatusString)

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
    int64_t cap =
        (int64_t)(eng_cuda_ctx(ctx)->sm_count > 0 ? eng_cuda_ctx(ctx)->sm_count : 80) * 32;
    return (unsigned)(need < cap ? need : cap);
}

/* Blocks for a grid-stride loop over `need` work items of one block each:
 * at most 32 per multiprocessor. */
static inline unsigned eng_cuda_grid_cap(const eng_op_ctx_t *ctx, int64_t need)
{
    int64_t cap =
        (int64_t)(eng_cuda_ctx(ctx)->sm_count > 0 ? eng_cuda_ctx(ctx)->sm_count : 80) * 32;
    return (unsigned)(need < cap ? need : cap);
}

/* FS_ENOTSUP naming the input unless every present input in [0, n) is
 * float32, input `weight` (-1: none) also half or bfloat16 (a weight that
 * fp16/bf16 precision stored so). 0 otherwise; nothing is queued. */
static inline int eng_cuda_require_float_inputs(const eng_op_ctx_t *ctx, int n, int weight)
{
    static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
    static const eng_dtype_t dt_weight[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                            ENG_DT_UNDEFINED};
    for (int i = 0; i < n && i < ctx->n_inputs; i++) {
        if (!ctx->inputs[i])
            continue;
        int rc = eng_op_require_dtype(ctx, i, i == weight ? dt_weight : dt_float);
        if (rc)
            return rc;
    }
    return 0;
}

/* Queues n bytes from src to dst, both device memory, on ctx's stream;
 * nothing when n is 0 or they are one buffer. 0, or FS_EDEVICE naming the
 * node (nothing queued). */
static inline int eng_cuda_copy_d2d(const eng_op_ctx_t *ctx, void *dst, const void *src, size_t n)
{
    if (n > 0 && dst != src)
        ENG_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
                                          eng_cuda_ctx(ctx)->stream));
    return 0;
}

#ifdef __cplusplus
/* Launches kernel k over n items (grid-stride, ENG_CUDA_THREADS per block)
 * on ctx's stream; n <= 0 launches nothing. 0, or FS_EDEVICE when the
 * launch fails. */
template <typename... P, typename... A>
static inline int eng_cuda_launch(const eng_op_ctx_t *ctx, void (*k)(P...), int64_t n, A... args)
{
    if (n <= 0)
        return 0;
    k<<<eng_cuda_blocks(ctx, n), ENG_CUDA_THREADS, 0, eng_cuda_ctx(ctx)->stream>>>(args...);
    ENG_CUDA_LAUNCHED(ctx);
    return 0;
}
#endif

/* A grid-stride loop over [0, n) with a 64-bit index. */
#define ENG_CUDA_FOR(i, n)                                                               \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (int64_t)blockDim.x * gridDim.x)

/* A node's context as the device-neutral helpers in engine/ops/ expect it
 * (they read values from inputs[i]->data): each input whose value is known
 * before running is its host copy, every other input keeps its dtype and
 * shape with no data, so a helper that needs a value either finds it on
 * the host or answers that it is not known -- never a host read of device
 * memory. Not copyable (it points into itself). */
#define ENG_CUDA_HOST_VIEW_MAX 8
typedef struct eng_cuda_host_view {
    eng_op_ctx_t c;
    eng_tensor_t meta[ENG_CUDA_HOST_VIEW_MAX];
    const eng_tensor_t *in[ENG_CUDA_HOST_VIEW_MAX];
} eng_cuda_host_view_t;

/* Fills *v from c (v must outlive its use of v->c). 0, or FS_EINVAL for a
 * node with more inputs than ENG_CUDA_HOST_VIEW_MAX. */
static inline int eng_cuda_host_view(const eng_op_ctx_t *c, eng_cuda_host_view_t *v)
{
    if (c->n_inputs > ENG_CUDA_HOST_VIEW_MAX)
        return eng_op_err(c, FS_EINVAL, "%d inputs, at most %d expected", c->n_inputs,
                          ENG_CUDA_HOST_VIEW_MAX);
    v->c = *c;
    for (int i = 0; i < c->n_inputs; i++) {
        const eng_tensor_t *h = eng_ctx_host_in(c, i);
        v->in[i] = h;
        if (!h && c->inputs[i]) {
            v->meta[i] = *c->inputs[i];
            v->meta[i].data = NULL;
            v->in[i] = &v->meta[i];
        }
    }
    v->c.inputs = v->in;
    v->c.host_inputs = NULL;
    return 0;
}

/* One row-major GEMM with a fused epilogue, the entry every other GEMM
 * entry below but eng_cuda_dgemm goes through (engine/cuda/gemm.cu):
 * for each of `batch` problems,
 *   C[M, N] = act(alpha * op(A)[M, K] x op(B)[K, N] + beta * R[M, N] + bias[N])
 * with op(A) = A [M, K] (lda >= K) or, with trans_a, A^T of A [K, M]
 * (lda >= M); likewise B; C [M, N] of leading dimension ldc >= N.
 *  - dtype: A's and B's, ENG_DT_FLOAT, ENG_DT_FLOAT16 or ENG_DT_BFLOAT16;
 *    c_dtype: C's, R's and the bias's, dtype itself or ENG_DT_FLOAT with
 *    half A and B. Products accumulate in fp32 (float32 A/B on TF32 tensor
 *    cores only at tf32 precision), C is rounded once.
 *  - r: the residual, laid out as C (ldc, stride_c), may be C itself; NULL
 *    reads C (with beta 0 nothing is read, C may hold garbage).
 *  - bias: N elements of c_dtype added to every row, or NULL; problem p
 *    reads the N from bias + p * bias_stride (0: one bias for all).
 *  - act: an eng_act_t (graph.h): none, Relu, erf GELU or tanh GELU, each
 *    in float before the one rounding.
 * stride_* are elements between problems (ignored when batch == 1). m, n
 * or batch 0 is a no-op; k 0 gives act(beta * R + bias).
 * How: one cuBLASLt matmul with the epilogue BIAS, RELU(_BIAS) or
 * GELU(_BIAS) (cuBLASLt's GELU is the tanh form: an erf GELU takes the
 * bias epilogue, then one in-place pass of the exact GELU), its algorithm
 * chosen by cuBLASLt's heuristic once per shape, strides, dtypes,
 * transposes, epilogue and pointer alignment and cached on the instance.
 * Where cuBLASLt offers no algorithm (or k is 0) cuBLAS computes the
 * product and one kernel applies beta * R, the bias and act.
 * Errors: FS_EINVAL for dtypes outside these; FS_ENOTSUP when a size
 * exceeds cuBLAS's int range; FS_EDEVICE naming the failed call. Nothing
 * is allocated: the workspace is the instance's (eng_cuda_set_workspace). */
typedef struct eng_cuda_gemm {
    eng_dtype_t dtype, c_dtype;
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    float alpha, beta;
    const void *a;
    int64_t lda, stride_a;
    const void *b;
    int64_t ldb, stride_b;
    void *c;
    int64_t ldc, stride_c;
    const void *r;
    const void *bias;
    int64_t bias_stride;
    int act;                  /* eng_act_t */
} eng_cuda_gemm_t;

int eng_cuda_gemm(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g);

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

/* eng_cuda_sgemm in double precision (cublasDgemm*): A, B and C float64,
 * alpha and beta double; the same shapes, strides (in elements), no-op and
 * error rules. The handle's math mode does not apply to it.
 * (engine/cuda/gemm.cu) */
int eng_cuda_dgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, double alpha, const double *a, int64_t lda, int64_t stride_a,
                   const double *b, int64_t ldb, int64_t stride_b, double beta, double *c,
                   int64_t ldc, int64_t stride_c, int64_t batch);

/* Half operands (fp16/bf16 precision retypes the whole graph at load:
 * engine/lowp.c): GEMMs whose operands and result share one half dtype go
 * through eng_cuda_gemm_half; eng_cuda_gemm_lowp keeps a float32 result
 * (ConvTranspose's float columns, rounded once in col2im). */
static inline bool eng_cuda_is_lowp(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16;
}

/* Bytes per element of a low-precision operand. */
#define ENG_CUDA_LOWP_BYTES 2

/* eng_cuda_sgemm with A and B both in `dtype` (ENG_DT_FLOAT16 or
 * ENG_DT_BFLOAT16) and C float32: cublasGemmEx / cublasGemmStridedBatchedEx
 * with CUBLAS_COMPUTE_32F (tensor-core products, fp32 accumulation; the
 * handle's math mode does not demote it). The same shapes, strides (in
 * elements), no-op and error rules as eng_cuda_sgemm; FS_EINVAL for
 * another dtype. (engine/cuda/gemm.cu) */
int eng_cuda_gemm_lowp(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       float *c, int64_t ldc, int64_t stride_c, int64_t batch);

/* eng_cuda_gemm_lowp with C in `dtype` too: half activations end to end.
 * The product accumulates in fp32 (CUBLAS_COMPUTE_32F, beta * C read from
 * C's half values) and is rounded into C once. The same shapes, strides (in
 * elements), no-op and error rules; FS_EINVAL for a dtype other than
 * ENG_DT_FLOAT16 / ENG_DT_BFLOAT16. (engine/cuda/gemm.cu) */
int eng_cuda_gemm_half(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       void *c, int64_t ldc, int64_t stride_c, int64_t batch);

#endif
