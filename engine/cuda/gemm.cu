/* gemm.cu -- the GEMM entries every CUDA kernel uses (MatMul, Gemm,
 * Einsum, Conv's im2col products): cuBLASLt with fused bias/activation
 * epilogues, cuBLAS where cuBLASLt has no algorithm and for float64.
 *
 * Row-major problems are mapped onto the column-major libraries as
 * C^T = op(B)^T x op(A)^T, so no operand is ever copied or transposed:
 * cuBLASLt's A is our B, its B our A, and its column-major D [N, M] is our
 * row-major C [M, N]. cuBLASLt's bias, one value per row of its D, is then
 * one per column of C: a linear layer's bias as it is.
 *
 * eng_cuda_gemm (cuda_impl.h) is the one entry: C = act(alpha * op(A)
 * op(B) + beta * R + bias). float32 operands compute at the instance's
 * precision (IEEE fp32, or TF32 at tf32 precision), half and bfloat16
 * operands on tensor cores with fp32 accumulation, C in the operands'
 * dtype or float32. eng_cuda_sgemm, eng_cuda_gemm_lowp and
 * eng_cuda_gemm_half are that entry without an epilogue; eng_cuda_dgemm
 * stays on cublasDgemm*. A convolution lowered to a GEMM (NHWC: rows are
 * output pixels, columns output channels) with its bias, a residual and a
 * Relu fused is one call: C = act(A x op(W) + bias + R) is eng_cuda_gemm
 * with alpha 1, beta 1, r the residual (laid out as C), bias the [N]
 * channel bias and act ENG_ACT_RELU -- cuBLASLt's RELU_BIAS epilogue with
 * C = R, D = the output; a grouped one is the strided batch of its groups
 * with bias_stride the group's channel count.
 *
 * PLANS. A cuBLASLt call needs a matmul descriptor, matrix layouts and an
 * algorithm; building them and asking the heuristic costs more than a
 * small GEMM. They are built once per key -- sizes, leading dims, batch
 * and strides, dtypes, transposes, tf32, epilogue, and each pointer's
 * alignment class (the largest power of two up to 16 dividing it and its
 * batch stride in bytes; the heuristic is told these minimum alignments,
 * so the algorithm holds for every pointer of the class) -- and kept in a
 * uthash table on the instance, used by the one thread running it, like
 * the handles. At most LT_PLANS_MAX plans are kept; past that the oldest
 * goes first. A key cuBLASLt has no algorithm for is kept too, meaning
 * "cuBLAS": the product then goes through cublasSgemm* / cublasGemm*Ex and
 * one kernel applies beta * R, the bias and the activation. The bias
 * pointer is set on the cached descriptor at each call (host memory only).
 *
 * EPILOGUES. Relu and the tanh GELU are cuBLASLt's own (RELU_BIAS,
 * GELU_BIAS, or RELU / GELU without a bias); cuBLASLt has no erf GELU, so
 * that one takes the BIAS epilogue and then one in-place pass of the
 * exact GELU (eng_act_f32, the Gelu kernel's formula).
 *
 * WORKSPACE. Both libraries use the instance's workspace
 * (eng_cuda_set_workspace): the model hands the instance one for each run
 * (engine/workspace.c), so that nothing allocates behind the cache's back
 * and a captured CUDA graph replays with the addresses it recorded. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
/* uthash's default (Jenkins) hash is a switch whose case fall-throughs are
 * marked by comments, which nvcc's preprocessing strips, so a newer host
 * compiler warns; FNV-1a has no switch. Only this file hashes the table. */
#define HASH_FUNCTION HASH_FNV
#include <uthash.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/nn_impl.h"
#include "engine/ops/linalg_impl.h"

/* Plans kept per instance. A model's GEMMs have a few dozen shapes per
 * input shape; this keeps several input shapes' worth. */
#define LT_PLANS_MAX 512

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

/* The body of the float and double cuBLAS products. T float: A, B and C
 * float32 (cublasSgemm*, at the handle's math mode). T double: all
 * float64 (cublasDgemm*). */
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

static cudaDataType_t cuda_type(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT16 ? CUDA_R_16F : dt == ENG_DT_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The cuBLAS product of g (no epilogue): cublasSgemm* for float32
 * operands, cublasGemm*Ex with CUBLAS_COMPUTE_32F for half ones (an
 * explicit cublasComputeType_t: CUBLAS_PEDANTIC_MATH on the handle would
 * demote only a cudaDataType compute type). C read with g's beta. */
static int blas_product(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g)
{
    if (g->dtype == ENG_DT_FLOAT)
        return gemm_run<float>(ctx, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                               (const float *)g->a, g->lda, g->stride_a, (const float *)g->b,
                               g->ldb, g->stride_b, g->beta, (float *)g->c, g->ldc, g->stride_c,
                               g->batch);
    gemm_args_t ga = {};
    int rc = gemm_prepare(ctx, g->trans_a, g->trans_b, g->m, g->n, g->k, g->lda, g->ldb, g->ldc,
                          g->batch, &ga);
    if (rc)
        return rc;
    cublasHandle_t h = eng_cuda_ctx(ctx)->blas;
    cudaDataType_t t = cuda_type(g->dtype), ct = cuda_type(g->c_dtype);
    const int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    if (g->batch == 1)
        ENG_CUBLAS_TRY(ctx, cublasGemmEx(h, ga.op_b, ga.op_a, n, m, k, &g->alpha, g->b, t, ga.ib,
                                         g->a, t, ga.ia, &g->beta, g->c, ct, ga.ic,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        ENG_CUBLAS_TRY(ctx, cublasGemmStridedBatchedEx(
                                h, ga.op_b, ga.op_a, n, m, k, &g->alpha, g->b, t, ga.ib,
                                (long long)g->stride_b, g->a, t, ga.ia, (long long)g->stride_a,
                                &g->beta, g->c, ct, ga.ic, (long long)g->stride_c, (int)g->batch,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* d = act(beta * src + bias) over `batch` [m, n] matrices of leading
 * dimension ld, `stride` elements apart (src laid out as d, may be d;
 * beta 0 reads nothing; bias NULL: none, else matrix p's is bias + p *
 * bias_stride), each element in float and rounded once. */
template <typename T>
static __global__ void epilogue_kernel(T *d, const T *src, float beta, const T *bias,
                                       int64_t bias_stride, int act, int64_t m, int64_t n,
                                       int64_t ld, int64_t stride, int64_t batch)
{
    ENG_CUDA_FOR(i, batch * m * n)
    {
        int64_t rest = i / n, j = i - rest * n;
        int64_t p = rest / m, row = rest - p * m;
        int64_t off = p * stride + row * ld + j;
        float v = beta == 0.0f ? 0.0f : beta * to_f32(src[off]);
        if (bias)
            v += to_f32(bias[p * bias_stride + j]);
        d[off] = from_f32<T>(eng_act_f32(act, v));
    }
}

/* epilogue_kernel where the matrices are one contiguous block (ld == n,
 * stride == m * n): element i's offset is i itself and its bias column i
 * mod n, found with udiv_t (Small: every index below 2^31), Vec elements
 * an access. The general kernel's two 64-bit divisions per element made
 * the GELU pass after a cuBLASLt GEMM (exact erf GELU, which cuBLASLt's
 * tanh epilogue is not) 8x slower than its bytes: 176 us for BERT-base's
 * [8192, 3072] fp16 on an H200, against 21 us at 4.8 TB/s. */
template <typename T, int Vec, bool Small>
static __global__ void epilogue_flat_kernel(T *d, const T *src, float beta, const T *bias,
                                            int64_t bias_stride, udiv_t n, udiv_t mn, int act,
                                            int64_t n_vecs)
{
    using P = vec_t<T, Vec>;
    ENG_CUDA_FOR(v, n_vecs)
    {
        const int64_t i = v * Vec;
        P x, o;
        if (beta != 0.0f)
            x = ((const P *)src)[v];
        int64_t b0 = 0;
        if (bias) {
            int64_t j = i - udiv_q<Small>(n, i) * n.d;
            b0 = (bias_stride ? udiv_q<Small>(mn, i) * bias_stride : 0) + j;
        }
#pragma unroll
        for (int e = 0; e < Vec; e++) {
            float f = beta == 0.0f ? 0.0f : beta * to_f32(x.v[e]);
            if (bias)
                f += to_f32(bias[b0 + e]);
            o.v[e] = from_f32<T>(eng_act_f32(act, f));
        }
        ((P *)d)[v] = o;
    }
}

/* Queues epilogue_kernel on g's C in g's c_dtype: C = act(beta * src +
 * bias); epilogue_flat_kernel when C is one block, 16-byte accesses when
 * n and the pointers allow (a vector then never straddles two rows). */
static int epilogue_launch(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g, const void *src,
                           float beta, const void *bias, int act)
{
    return lowp_dispatch(ctx, g->c_dtype, [&](auto t) {
        using T = decltype(t);
        const int64_t total = g->batch * g->m * g->n;
        const bool flat = g->ldc == g->n && (g->batch == 1 || g->stride_c == g->m * g->n);
        if (!flat)
            return eng_cuda_launch(ctx, epilogue_kernel<T>, total, (T *)g->c, (const T *)src,
                                   beta, (const T *)bias, g->bias_stride, act, g->m, g->n,
                                   g->ldc, g->stride_c, g->batch);
        constexpr int V = 16 / sizeof(T);
        const uintptr_t at = (uintptr_t)g->c | (beta != 0.0f ? (uintptr_t)src : 0) |
                             (uintptr_t)bias;
        const bool vec = g->n % V == 0 && at % 16 == 0 && g->bias_stride % V == 0;
        const udiv_t n = udiv_make(g->n), mn = udiv_make(g->m * g->n);
        const bool small = fits32(total) && fits32(g->m * g->n);
        if (vec)
            return small ? eng_cuda_launch(ctx, epilogue_flat_kernel<T, V, true>, total / V,
                                           (T *)g->c, (const T *)src, beta, (const T *)bias,
                                           g->bias_stride, n, mn, act, total / V)
                         : eng_cuda_launch(ctx, epilogue_flat_kernel<T, V, false>, total / V,
                                           (T *)g->c, (const T *)src, beta, (const T *)bias,
                                           g->bias_stride, n, mn, act, total / V);
        return small ? eng_cuda_launch(ctx, epilogue_flat_kernel<T, 1, true>, total, (T *)g->c,
                                       (const T *)src, beta, (const T *)bias, g->bias_stride, n,
                                       mn, act, total)
                     : eng_cuda_launch(ctx, epilogue_flat_kernel<T, 1, false>, total, (T *)g->c,
                                       (const T *)src, beta, (const T *)bias, g->bias_stride, n,
                                       mn, act, total);
    });
}

/* g without cuBLASLt: R copied into C (when it is another buffer and
 * read), the cuBLAS product with beta, then one epilogue pass when g has
 * a bias or an activation; k 0 is that pass alone. */
static int gemm_fallback(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g)
{
    const void *src = g->r ? g->r : g->c;
    if (g->k == 0)
        return epilogue_launch(ctx, g, src, g->beta, g->bias, g->act);
    if (g->beta != 0.0f && src != g->c) {
        const size_t es = eng_dtype_size(g->c_dtype);
        for (int64_t p = 0; p < g->batch; p++)
            ENG_CUDA_TRY(ctx, cudaMemcpy2DAsync((char *)g->c + (size_t)(p * g->stride_c) * es,
                                                (size_t)g->ldc * es,
                                                (const char *)src + (size_t)(p * g->stride_c) * es,
                                                (size_t)g->ldc * es, (size_t)g->n * es,
                                                (size_t)g->m, cudaMemcpyDeviceToDevice,
                                                eng_cuda_ctx(ctx)->stream));
    }
    int rc = blas_product(ctx, g);
    if (rc || (!g->bias && g->act == ENG_ACT_NONE))
        return rc;
    return epilogue_launch(ctx, g, g->c, 1.0f, g->bias, g->act);
}

/* ---- cuBLASLt plans ----------------------------------------------------- */

/* What a plan depends on (see the file header); zeroed before filling, so
 * the padding hashes the same every time. */
typedef struct lt_key {
    int64_t m, n, k, batch;
    int64_t lda, ldb, ldc, stride_a, stride_b, stride_c, bias_stride;
    int32_t dtype, c_dtype, epilogue;
    uint8_t trans_a, trans_b, tf32;
    uint8_t align_a, align_b, align_c, align_d, align_bias;
} lt_key_t;

struct lt_plan {
    lt_key_t key;
    bool ok;                          /* an algorithm was found; else cuBLAS */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C and D */
    cublasLtMatmulAlgo_t algo;
    UT_hash_handle hh;
};

/* The alignment class of p with batch stride `stride_bytes`: the largest
 * power of two up to 16 dividing both. */
static uint8_t align_class(const void *p, int64_t stride_bytes)
{
    uintptr_t v = (uintptr_t)p | (uintptr_t)stride_bytes | 16u;
    return (uint8_t)(v & (~v + 1));
}

static void lt_plan_free(lt_plan *p)
{
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    free(p);
}

void eng_cuda_lt_plans_clear(eng_cuda_t *c)
{
    lt_plan *p, *tmp;
    HASH_ITER(hh, c->lt_plans, p, tmp)
    {
        HASH_DEL(c->lt_plans, p);
        lt_plan_free(p);
    }
    c->n_lt_plans = 0;
}

/* The cuBLASLt epilogue for g (an erf GELU is BIAS or none, its GELU
 * applied after). */
static cublasLtEpilogue_t lt_epilogue(const eng_cuda_gemm_t *g)
{
    const bool bias = g->bias != NULL;
    switch (g->act) {
    case ENG_ACT_RELU: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case ENG_ACT_GELU_TANH: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* The C cuBLASLt reads: the residual when one is given and read, else C. */
static const void *gemm_c_in(const eng_cuda_gemm_t *g)
{
    return g->beta != 0.0f && g->r ? g->r : g->c;
}

static void lt_key_fill(const eng_cuda_t *c, const eng_cuda_gemm_t *g, lt_key_t *key)
{
    memset(key, 0, sizeof *key);
    const bool batched = g->batch > 1;
    const int64_t es = (int64_t)eng_dtype_size(g->dtype), ces = (int64_t)eng_dtype_size(g->c_dtype);
    key->m = g->m, key->n = g->n, key->k = g->k, key->batch = g->batch;
    key->lda = g->lda, key->ldb = g->ldb, key->ldc = g->ldc;
    key->stride_a = batched ? g->stride_a : 0;
    key->stride_b = batched ? g->stride_b : 0;
    key->stride_c = batched ? g->stride_c : 0;
    key->bias_stride = batched && g->bias ? g->bias_stride : 0;
    key->dtype = g->dtype, key->c_dtype = g->c_dtype, key->epilogue = lt_epilogue(g);
    key->trans_a = g->trans_a, key->trans_b = g->trans_b;
    key->tf32 = g->dtype == ENG_DT_FLOAT && c->precision == ENG_PREC_TF32;
    key->align_a = align_class(g->a, key->stride_a * es);
    key->align_b = align_class(g->b, key->stride_b * es);
    key->align_c = align_class(gemm_c_in(g), key->stride_c * ces);
    key->align_d = align_class(g->c, key->stride_c * ces);
    key->align_bias = g->bias ? align_class(g->bias, key->bias_stride * ces) : 0;
}

/* Sets attribute `attr` of plan object `obj` to v through `set` (the
 * descriptor's, a layout's or a preference's setter). */
#define LT_SET(set, obj, attr, v)                                                        \
    do {                                                                                 \
        auto v_ = (v);                                                                   \
        st = set(obj, attr, &v_, sizeof v_);                                             \
        if (st != CUBLAS_STATUS_SUCCESS) {                                               \
            what = #attr;                                                                \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)
#define LT_CALL(call)                                                                    \
    do {                                                                                 \
        st = (call);                                                                     \
        if (st != CUBLAS_STATUS_SUCCESS) {                                               \
            what = #call;                                                                \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

/* Builds the plan of `key` on instance c: descriptors, layouts and the
 * heuristic's first algorithm (ok false when it offers none). 0 and
 * *out, or FS_ENOMEM / FS_EDEVICE naming the failed call (nothing kept). */
static int lt_plan_build(const eng_op_ctx_t *ctx, eng_cuda_t *c, const lt_key_t *key,
                         lt_plan **out)
{
    lt_plan *p = (lt_plan *)calloc(1, sizeof *p);
    if (!p)
        return eng_op_err(ctx, FS_ENOMEM, "out of host memory for a cuBLASLt plan");
    p->key = *key;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = "";
    cublasLtMatmulPreference_t pref = NULL;
    const cudaDataType_t t = cuda_type((eng_dtype_t)key->dtype);
    const cudaDataType_t ct = cuda_type((eng_dtype_t)key->c_dtype);
    const cublasLtEpilogue_t ep = (cublasLtEpilogue_t)key->epilogue;
    const bool has_bias = ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_RELU_BIAS ||
                          ep == CUBLASLT_EPILOGUE_GELU_BIAS;
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    LT_CALL(cublasLtMatmulDescCreate(
        &p->desc, key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_SET(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_TRANSA,
           (int32_t)(key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
    LT_SET(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_TRANSB,
           (int32_t)(key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
    LT_SET(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, (uint32_t)ep);
    if (has_bias)
        LT_SET(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
               (int32_t)ct);
    if (has_bias && key->bias_stride)
        LT_SET(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
               key->bias_stride);
    LT_CALL(cublasLtMatrixLayoutCreate(&p->la, t, key->trans_b ? key->k : key->n,
                                       key->trans_b ? key->n : key->k, key->ldb));
    LT_CALL(cublasLtMatrixLayoutCreate(&p->lb, t, key->trans_a ? key->m : key->k,
                                       key->trans_a ? key->k : key->m, key->lda));
    LT_CALL(cublasLtMatrixLayoutCreate(&p->lc, ct, key->n, key->m, key->ldc));
    if (key->batch > 1) {
        const cublasLtMatrixLayout_t lay[3] = {p->la, p->lb, p->lc};
        const int64_t stride[3] = {key->stride_b, key->stride_a, key->stride_c};
        for (int i = 0; i < 3; i++) {
            LT_SET(cublasLtMatrixLayoutSetAttribute, lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                   (int32_t)key->batch);
            LT_SET(cublasLtMatrixLayoutSetAttribute, lay[i],
                   CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride[i]);
        }
    }
    LT_CALL(cublasLtMatmulPreferenceCreate(&pref));
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           (uint64_t)c->workspace_bytes);
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)key->align_b);
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, (uint32_t)key->align_a);
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, (uint32_t)key->align_c);
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)key->align_d);
    /* No algorithm (or a shape cuBLASLt refuses outright) is an answer,
     * not an error: cuBLAS takes the key. */
    st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                        &n_res);
    p->ok = st == CUBLAS_STATUS_SUCCESS && n_res > 0 && res.state == CUBLAS_STATUS_SUCCESS &&
            (!has_bias || key->align_bias >= 16);
    if (p->ok)
        p->algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return 0;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    lt_plan_free(p);
    return eng_op_err(ctx, FS_EDEVICE, "cuBLASLt: %s failed: %s", what,
                      cublasGetStatusString(st));
}
#undef LT_SET
#undef LT_CALL

/* The instance's plan for g, built and cached if new. 0 and *out, or
 * lt_plan_build's error. */
static int lt_plan_get(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g, lt_plan **out)
{
    eng_cuda_t *c = eng_cuda_ctx(ctx);
    lt_key_t key;
    lt_key_fill(c, g, &key);
    lt_plan *p = NULL;
    HASH_FIND(hh, c->lt_plans, &key, sizeof key, p);
    if (!p) {
        int rc = lt_plan_build(ctx, c, &key, &p);
        if (rc)
            return rc;
        if (c->n_lt_plans >= LT_PLANS_MAX) {
            lt_plan *oldest = c->lt_plans; /* uthash keeps insertion order */
            HASH_DEL(c->lt_plans, oldest);
            lt_plan_free(oldest);
            c->n_lt_plans--;
        }
        HASH_ADD(hh, c->lt_plans, key, sizeof key, p);
        c->n_lt_plans++;
    }
    *out = p;
    return 0;
}

int eng_cuda_gemm(const eng_op_ctx_t *ctx, const eng_cuda_gemm_t *g)
{
    const bool half = eng_cuda_is_lowp(g->dtype);
    if ((g->dtype != ENG_DT_FLOAT && !half) ||
        (g->c_dtype != g->dtype && !(half && g->c_dtype == ENG_DT_FLOAT)))
        return eng_op_err(ctx, FS_EINVAL, "a GEMM of %s operands into %s (expected float32, "
                          "float16 or bfloat16 operands, the result in their dtype or float32)",
                          eng_dtype_name(g->dtype), eng_dtype_name(g->c_dtype));
    if (g->act < ENG_ACT_NONE || g->act > ENG_ACT_GELU_TANH)
        return eng_op_err(ctx, FS_EINVAL, "a GEMM with activation %d (none, relu, gelu or "
                          "gelu tanh expected)", g->act);
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return 0;
    gemm_args_t ga = {};
    int rc = gemm_prepare(ctx, g->trans_a, g->trans_b, g->m, g->n, g->k, g->lda, g->ldb, g->ldc,
                          g->batch, &ga);
    if (rc)
        return rc;
    if (g->k == 0)
        return gemm_fallback(ctx, g);
    lt_plan *p = NULL;
    if ((rc = lt_plan_get(ctx, g, &p)))
        return rc;
    if (!p->ok)
        return gemm_fallback(ctx, g);
    eng_cuda_t *c = eng_cuda_ctx(ctx);
    if (g->bias) {
        const void *bias = g->bias;
        ENG_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(
                                p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    ENG_CUBLAS_TRY(ctx, cublasLtMatmul(c->lt, p->desc, &g->alpha, g->b, p->la, g->a, p->lb,
                                       &g->beta, gemm_c_in(g), p->lc, g->c, p->lc, &p->algo, c->workspace,
                                       c->workspace_bytes, c->stream));
    if (g->act == ENG_ACT_GELU)
        return epilogue_launch(ctx, g, g->c, 1.0f, NULL, ENG_ACT_GELU);
    return 0;
}

/* One of the entries below as an eng_cuda_gemm without an epilogue. */
static eng_cuda_gemm_t gemm_plain(eng_dtype_t dtype, eng_dtype_t c_dtype, bool trans_a,
                                  bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                  const void *a, int64_t lda, int64_t stride_a, const void *b,
                                  int64_t ldb, int64_t stride_b, float beta, void *c, int64_t ldc,
                                  int64_t stride_c, int64_t batch)
{
    eng_cuda_gemm_t g = {};
    g.dtype = dtype, g.c_dtype = c_dtype, g.trans_a = trans_a, g.trans_b = trans_b;
    g.m = m, g.n = n, g.k = k, g.batch = batch, g.alpha = alpha, g.beta = beta;
    g.a = a, g.lda = lda, g.stride_a = stride_a;
    g.b = b, g.ldb = ldb, g.stride_b = stride_b;
    g.c = c, g.ldc = ldc, g.stride_c = stride_c;
    g.act = ENG_ACT_NONE;
    return g;
}

int eng_cuda_sgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                   const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                   int64_t ldc, int64_t stride_c, int64_t batch)
{
    eng_cuda_gemm_t g = gemm_plain(ENG_DT_FLOAT, ENG_DT_FLOAT, trans_a, trans_b, m, n, k, alpha,
                                   a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                                   batch);
    return eng_cuda_gemm(ctx, &g);
}

int eng_cuda_dgemm(const eng_op_ctx_t *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, double alpha, const double *a, int64_t lda, int64_t stride_a,
                   const double *b, int64_t ldb, int64_t stride_b, double beta, double *c,
                   int64_t ldc, int64_t stride_c, int64_t batch)
{
    return gemm_run(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                    beta, c, ldc, stride_c, batch);
}

/* The two half entries: FS_EINVAL naming `what` for a dtype other than
 * float16 / bfloat16, else eng_cuda_gemm. */
static int gemm_half_entry(const eng_op_ctx_t *ctx, const char *what, const eng_cuda_gemm_t *g)
{
    if (!eng_cuda_is_lowp(g->dtype))
        return eng_op_err(ctx, FS_EINVAL, "a %s GEMM of dtype %s (expected float16 or "
                          "bfloat16)", what, eng_dtype_name(g->dtype));
    return eng_cuda_gemm(ctx, g);
}

int eng_cuda_gemm_lowp(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       float *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    eng_cuda_gemm_t g = gemm_plain(dtype, ENG_DT_FLOAT, trans_a, trans_b, m, n, k, alpha, a, lda,
                                   stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    return gemm_half_entry(ctx, "low-precision", &g);
}

int eng_cuda_gemm_half(const eng_op_ctx_t *ctx, eng_dtype_t dtype, bool trans_a, bool trans_b,
                       int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                       int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, float beta,
                       void *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    eng_cuda_gemm_t g = gemm_plain(dtype, dtype, trans_a, trans_b, m, n, k, alpha, a, lda,
                                   stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    return gemm_half_entry(ctx, "half", &g);
}
