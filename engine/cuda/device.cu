/* device.cu -- a model instance's CUDA state: device, stream, cuBLAS and
 * cuBLASLt handles (engine/cuda/cuda.h), and the CUDA device's table (engine/backend.h) that
 * hands it to the engine. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_impl.h"

#define TRY_CUDA(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            rc = fs_err(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ||  \
                                e_ == cudaErrorInvalidDevice                             \
                            ? FS_ENODEV                                                  \
                            : FS_EDEVICE,                                                \
                        "%s failed: %s", #call, cudaGetErrorString(e_));                 \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

#define TRY_CUBLAS(call)                                                                 \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            rc = fs_err(FS_EDEVICE, "%s failed: %s", #call, cublasGetStatusString(s_));  \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

int eng_cuda_create(int device, eng_precision_t precision, eng_cuda_t **out)
{
    int rc = 0;
    *out = NULL;
    eng_cuda_t *c = (eng_cuda_t *)calloc(1, sizeof *c);
    if (!c)
        return fs_err(FS_ENOMEM, "out of host memory creating CUDA state");
    c->device = device;
    c->precision = precision;
    int n = 0;
    TRY_CUDA(cudaGetDeviceCount(&n));
    if (device < 0 || device >= n) {
        free(c);
        return fs_err(FS_ENODEV, "CUDA device %d does not exist (%d device%s)", device, n,
                      n == 1 ? "" : "s");
    }
    TRY_CUDA(cudaSetDevice(device));
    TRY_CUDA(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device));
    TRY_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    TRY_CUBLAS(cublasCreate(&c->blas));
    TRY_CUBLAS(cublasSetStream(c->blas, c->stream));
    TRY_CUBLAS(cublasLtCreate(&c->lt));
    /* fp32 means IEEE fp32: no TF32 unless asked for. fp16/bf16 products
     * (weights converted at load) run on tensor cores with fp32
     * accumulation; their float32 products stay IEEE fp32. */
    TRY_CUBLAS(cublasSetMathMode(c->blas, precision == ENG_PREC_TF32   ? CUBLAS_TF32_TENSOR_OP_MATH
                                          : precision == ENG_PREC_FP32 ? CUBLAS_PEDANTIC_MATH
                                                                       : CUBLAS_DEFAULT_MATH));
    *out = c;
    return 0;
fail:
    eng_cuda_destroy(c);
    return rc;
}

void eng_cuda_destroy(eng_cuda_t *c)
{
    if (!c)
        return;
    cudaSetDevice(c->device);
    eng_cuda_lt_plans_clear(c);
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream) {
        cudaStreamSynchronize(c->stream);
        cudaStreamDestroy(c->stream);
    }
    free(c);
}

int eng_cuda_device(const eng_cuda_t *c) { return c->device; }
eng_precision_t eng_cuda_precision(const eng_cuda_t *c) { return c->precision; }
uintptr_t eng_cuda_stream(const eng_cuda_t *c) { return (uintptr_t)c->stream; }

static int check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    return fs_err(FS_EDEVICE, "%s failed: %s", what, cudaGetErrorString(e));
}

int eng_cuda_bind(const eng_cuda_t *c)
{
    return check(cudaSetDevice(c->device), "cudaSetDevice");
}

int eng_cuda_copy_h2d(eng_cuda_t *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
                 "cudaMemcpyAsync (host to device)");
}

int eng_cuda_copy_d2h(eng_cuda_t *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                 "cudaMemcpyAsync (device to host)");
}

int eng_cuda_copy_d2d(eng_cuda_t *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                 "cudaMemcpyAsync (device to device)");
}

int eng_cuda_sync(eng_cuda_t *c)
{
    return check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

int eng_cuda_set_workspace(eng_cuda_t *c, void *ptr, size_t bytes)
{
    if (ptr == c->workspace && bytes == c->workspace_bytes)
        return 0;
    cublasStatus_t s = cublasSetWorkspace(c->blas, ptr, bytes);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fs_err(FS_EDEVICE, "cublasSetWorkspace failed: %s", cublasGetStatusString(s));
    /* The cached cuBLASLt algorithms were chosen for the old size. */
    if (bytes != c->workspace_bytes)
        eng_cuda_lt_plans_clear(c);
    c->workspace = ptr;
    c->workspace_bytes = bytes;
    return 0;
}

struct eng_cuda_graph {
    cudaGraphExec_t exec;
};

int eng_cuda_capture_begin(eng_cuda_t *c)
{
    return check(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
                 "cudaStreamBeginCapture");
}

int eng_cuda_capture_end(eng_cuda_t *c, eng_cuda_graph_t **out)
{
    *out = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (e != cudaSuccess) {
        /* An uncapturable call invalidated the capture: clear the sticky
         * launch error it left, and say why. */
        (void)cudaGetLastError();
        if (graph)
            cudaGraphDestroy(graph);
        return fs_err(FS_ENOTSUP, "CUDA graph capture failed: %s", cudaGetErrorString(e));
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return fs_err(FS_ENOTSUP, "CUDA graph instantiation failed: %s", cudaGetErrorString(e));
    }
    eng_cuda_graph_t *g = (eng_cuda_graph_t *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        return fs_err(FS_ENOMEM, "out of host memory for a CUDA graph");
    }
    g->exec = exec;
    *out = g;
    return 0;
}

int eng_cuda_graph_launch(eng_cuda_t *c, eng_cuda_graph_t *g)
{
    return check(cudaGraphLaunch(g->exec, c->stream), "cudaGraphLaunch");
}

void eng_cuda_graph_destroy(eng_cuda_graph_t *g)
{
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* --- the device's table (engine/backend.h) --------------------------------- */

static int be_instance_create(int index, eng_precision_t precision, void **out)
{
    eng_cuda_t *c = NULL;
    int rc = eng_cuda_create(index, precision, &c);
    *out = c;
    return rc;
}

static void be_instance_destroy(void *inst) { eng_cuda_destroy((eng_cuda_t *)inst); }
static alloc_stream_t be_stream(void *inst) { return eng_cuda_stream((eng_cuda_t *)inst); }
static int be_bind(void *inst) { return eng_cuda_bind((eng_cuda_t *)inst); }
static int be_sync(void *inst) { return eng_cuda_sync((eng_cuda_t *)inst); }

static int be_copy_h2d(void *inst, void *dst, const void *src, size_t bytes)
{
    return eng_cuda_copy_h2d((eng_cuda_t *)inst, dst, src, bytes);
}

static int be_copy_d2h(void *inst, void *dst, const void *src, size_t bytes)
{
    return eng_cuda_copy_d2h((eng_cuda_t *)inst, dst, src, bytes);
}

static int be_set_workspace(void *inst, void *ptr, size_t bytes)
{
    return eng_cuda_set_workspace((eng_cuda_t *)inst, ptr, bytes);
}

static int be_capture_begin(void *inst) { return eng_cuda_capture_begin((eng_cuda_t *)inst); }

static int be_capture_end(void *inst, void **graph)
{
    eng_cuda_graph_t *g = NULL;
    int rc = eng_cuda_capture_end((eng_cuda_t *)inst, &g);
    *graph = g;
    return rc;
}

static int be_graph_launch(void *inst, void *graph)
{
    return eng_cuda_graph_launch((eng_cuda_t *)inst, (eng_cuda_graph_t *)graph);
}

static void be_graph_destroy(void *graph) { eng_cuda_graph_destroy((eng_cuda_graph_t *)graph); }

extern "C" const eng_backend_i eng_backend_cuda = {
    .name = "cuda",
    .kernels = eng_cuda_kernels,
    .host_memory = false,
    .precisions = (1u << ENG_PREC_FP32) | (1u << ENG_PREC_TF32) | (1u << ENG_PREC_FP16) |
                  (1u << ENG_PREC_BF16),
    .channels_last = true,
    .fused_attention = true, /* flash_f2_kernel: 0.88x the chain at BERT fp16 batch 64 (bench/RESULTS.md, 2026-11-27 night) */
    .instance_create = be_instance_create,
    .instance_destroy = be_instance_destroy,
    .stream = be_stream,
    .bind = be_bind,
    .copy_h2d = be_copy_h2d,
    .copy_d2h = be_copy_d2h,
    .sync = be_sync,
    .workspace_bytes = ENG_CUDA_WORKSPACE_BYTES,
    .set_workspace = be_set_workspace,
    .capture_begin = be_capture_begin,
    .capture_end = be_capture_end,
    .graph_launch = be_graph_launch,
    .graph_destroy = be_graph_destroy,
};
