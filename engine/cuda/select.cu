/* select.cu -- the CUDA kernels of the ops whose output shapes depend on
 * their input values (engine/ops/select.c): Compress, NonZero, Unique;
 * engine/cpu/select_kernels.c is the CPU reference.
 *
 * Their infer has already counted what they keep, from host copies of the
 * values (engine/exec.c mirrors them for it). Compress and NonZero then
 * compute on the device: one block walks the flags (the condition, or the
 * input's non-zero elements) 256 at a time with a block-wide prefix sum
 * and a running carry, so the k-th flagged index goes to slot k in order;
 * NonZero writes its coordinates there, Compress the kept index, which a
 * second kernel gathers slices through. One block keeps it simple and
 * deterministic; it walks n / 256 steps.
 *
 * Unique sorts on the host: it needs the input's host copy, finds the
 * items as the CPU does (eng_unique_compute), uploads indices, inverse
 * indices and counts, and gathers Y on the device through the indices. Its
 * work memory is host memory of its own, so the kernel waits for its
 * uploads (one stream synchronisation) before freeing it, and refuses to
 * run while the stream is being captured into a graph (a dynamic plan,
 * which such a node always makes, is never captured). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cub/block/block_scan.cuh>

#include "engine/cuda/dtype_impl.h"
#include "engine/ops/index_impl.h"

namespace {

/* 256, not 1024: a walk that unravels a rank-8 index (NonZero) holds
 * enough registers that 1024 threads do not fit one block ("too many
 * resources requested for launch", seen on the H200); __launch_bounds__
 * makes the compiler keep to it. */
constexpr int SCAN_THREADS = 256;

/* Calls emit(k, i) for the k-th index i in [0, n) where flag(i) holds, in
 * order. One block of SCAN_THREADS threads. */
template <typename Walk> __global__ void __launch_bounds__(SCAN_THREADS) compact_kernel(Walk w, int64_t n)
{
    using scan_t = cub::BlockScan<int64_t, SCAN_THREADS>;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ int64_t carry;
    if (threadIdx.x == 0)
        carry = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += SCAN_THREADS) {
        int64_t i = base + threadIdx.x, f = i < n && w.flag(i) ? 1 : 0, pos, total;
        scan_t(tmp).ExclusiveSum(f, pos, total);
        if (f)
            w.emit(carry + pos, i);
        __syncthreads();
        if (threadIdx.x == 0)
            carry += total;
        __syncthreads();
    }
}

template <typename Walk> int compact(const eng_op_ctx_t *c, const Walk &w, int64_t n)
{
    if (n <= 0)
        return 0;
    compact_kernel<<<1, SCAN_THREADS, 0, eng_cuda_ctx(c)->stream>>>(w, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* --- Compress ------------------------------------------------------------------------------------ */

/* The k-th true index of the condition into kept[k]. */
struct compress_walk {
    const uint8_t *cond;
    int64_t *kept;
    __device__ bool flag(int64_t i) const { return cond[i] != 0; }
    __device__ void emit(int64_t k, int64_t i) const { kept[k] = i; }
};

template <typename T>
__global__ void compress_gather(T *__restrict__ y, const T *__restrict__ x,
                                const int64_t *__restrict__ kept, int64_t n_kept, int64_t dim,
                                int64_t inner, int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t col = e % inner, r = e / inner, j = r % n_kept, o = r / n_kept;
        y[e] = x[(o * dim + kept[j]) * inner + col];
    }
}

/* Room for the kept indices: at most the condition's length. */
size_t compress_scratch(const eng_op_ctx_t *c)
{
    const eng_tensor_t *cond = eng_ctx_in(c, 1);
    int64_t n = cond && cond->shape.rank == 1 ? cond->shape.dims[0] : 0;
    return (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
}

/* The condition's host copy decides the shape (eng_compress_params); the
 * device copy picks the slices. */
int compress_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_compress_t g;
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_compress_params(&v.c, &g)) != 0)
        return rc;
    int64_t n = g.outer * g.kept * g.inner;
    if (n == 0)
        return 0;
    if (c->scratch_bytes < (size_t)g.kept * sizeof(int64_t))
        return eng_op_scratch_err(c, (size_t)g.kept * sizeof(int64_t));
    int64_t *kept = (int64_t *)c->scratch;
    if ((rc = compact(c, compress_walk{(const uint8_t *)c->inputs[1]->data, kept}, g.cond_len)))
        return rc;
    switch (eng_dtype_size(c->inputs[0]->dtype)) {
#define GATHER_(N, T)                                                                          \
    case N:                                                                                    \
        return eng_cuda_launch(c, compress_gather<T>, n, (T *)c->outputs[0]->data,             \
                               (const T *)c->inputs[0]->data, (const int64_t *)kept, g.kept,   \
                               g.dim, g.inner, n);
        GATHER_(1, uint8_t)
        GATHER_(2, uint16_t)
        GATHER_(4, uint32_t)
        GATHER_(8, uint64_t)
#undef GATHER_
    }
    return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                      eng_dtype_name(c->inputs[0]->dtype));
}

/* --- NonZero ------------------------------------------------------------------------------------- */

/* Element i of T is not zero; half floats by their bits (+-0 is the rest
 * zero), other floats by value (NaN is not zero). */
template <typename T> __device__ bool is_nonzero(T v)
{
    if constexpr (std::is_same<T, f16_t>::value || std::is_same<T, bf16_t>::value)
        return (v.bits & 0x7fff) != 0;
    else if constexpr (std::is_same<T, bool_t>::value)
        return v.v != 0;
    else
        return v != (T)0;
}

/* The k-th non-zero element's coordinates into column k of [rank, count]. */
template <typename T> struct nonzero_walk {
    const T *x;
    int64_t *y;
    int rank;
    int64_t count;
    int64_t dims[ENG_MAX_RANK];
    __device__ bool flag(int64_t i) const { return is_nonzero(x[i]); }
    __device__ void emit(int64_t k, int64_t i) const
    {
        for (int d = rank - 1; d >= 0; d--) {
            int64_t q = i / dims[d];
            y[d * count + k] = i - q * dims[d];
            i = q;
        }
    }
};

using nonzero_types = types<float, double, f16_t, bf16_t, int8_t, int16_t, int32_t, int64_t,
                            uint8_t, uint16_t, uint32_t, uint64_t, bool_t>;

int nonzero_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&x->shape);
    int rc = dispatch(x->dtype, nonzero_types{}, [&](auto t) {
        using T = decltype(t);
        nonzero_walk<T> w = {(const T *)x->data, (int64_t *)y->data, x->shape.rank,
                             y->shape.dims[1], {0}};
        /* A scalar is one element at coordinate 0 of a dim of 1 (numpy). */
        if (w.rank == 0) {
            w.rank = 1;
            w.dims[0] = 1;
        }
        for (int d = 0; d < x->shape.rank; d++)
            w.dims[d] = x->shape.dims[d];
        return compact(c, w, n);
    });
    return rc == DISPATCH_NONE
               ? eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype))
               : rc;
}

/* --- Unique -------------------------------------------------------------------------------------- */

template <typename T>
__global__ void unique_gather(T *__restrict__ y, const T *__restrict__ x,
                              const int64_t *__restrict__ first, int64_t n_unique, int64_t items,
                              int64_t inner, int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t col = e % inner, r = e / inner, v = r % n_unique, o = r / n_unique;
        y[e] = x[(o * items + first[v]) * inner + col];
    }
}

/* Room on the device for the first occurrences when output 1 (indices)
 * is not asked for. */
size_t unique_scratch(const eng_op_ctx_t *c)
{
    eng_unique_t g;
    if (eng_unique_params(c, &g) != 0)
        return 0;
    return (size_t)(g.items > 0 ? g.items : 1) * sizeof(int64_t);
}

/* Queues the uploads and the gather from host work memory `work`; the
 * caller waits for them before freeing it. */
int unique_queue(eng_op_ctx_t *c, const eng_unique_t *g, const eng_tensor_t *hx, void *work)
{
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    int64_t u, *first, *count, *inverse;
    eng_unique_compute(g, hx, work, &u, &first, &count, &inverse);
    eng_tensor_t *out_idx = c->n_outputs > 1 ? c->outputs[1] : NULL;
    int64_t *dev_first = out_idx ? (int64_t *)out_idx->data : (int64_t *)c->scratch;
    if (!out_idx && c->scratch_bytes < (size_t)u * sizeof(int64_t))
        return eng_op_scratch_err(c, (size_t)u * sizeof(int64_t));
    const int64_t *src[3] = {first, inverse, count};
    int64_t len[3] = {u, g->items, u};
    for (int k = 0; k < 3; k++) {
        eng_tensor_t *o = k + 1 < c->n_outputs ? c->outputs[k + 1] : NULL;
        void *dst = k == 0 ? (void *)dev_first : o ? o->data : NULL;
        if (dst && len[k] > 0)
            ENG_CUDA_TRY(c, cudaMemcpyAsync(dst, src[k], (size_t)len[k] * sizeof(int64_t),
                                            cudaMemcpyHostToDevice, st));
    }
    eng_tensor_t *y = c->outputs[0];
    int64_t n = g->outer * u * g->inner;
    if (!y || n == 0)
        return 0;
    switch (eng_dtype_size(y->dtype)) {
#define GATHER_(N, T)                                                                          \
    case N:                                                                                    \
        return eng_cuda_launch(c, unique_gather<T>, n, (T *)y->data,                           \
                               (const T *)c->inputs[0]->data, (const int64_t *)dev_first, u,   \
                               g->items, g->inner, n);
        GATHER_(1, uint8_t)
        GATHER_(2, uint16_t)
        GATHER_(4, uint32_t)
        GATHER_(8, uint64_t)
#undef GATHER_
    }
    return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(y->dtype));
}

/* Needs X's host copy (FS_EINVAL without it). Synchronises with the
 * stream (see the file comment). */
int unique_run(eng_op_ctx_t *c)
{
    eng_unique_t g;
    int rc = eng_unique_params(c, &g);
    if (rc)
        return rc;
    const eng_tensor_t *hx = eng_ctx_host_in(c, 0);
    if (!hx)
        return eng_op_err(c, FS_EINVAL, "X has no host copy to find the unique items in");
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    cudaStreamCaptureStatus capture;
    ENG_CUDA_TRY(c, cudaStreamIsCapturing(st, &capture));
    if (capture != cudaStreamCaptureStatusNone)
        return eng_op_err(c, FS_ENOTSUP, "Unique cannot run inside a CUDA graph capture");
    void *work = malloc(eng_unique_work_bytes(&g));
    if (!work)
        return eng_op_err(c, FS_ENOMEM, "out of host memory finding the unique items");
    rc = unique_queue(c, &g, hx, work);
    cudaError_t s = cudaStreamSynchronize(st);
    free(work);
    if (rc == 0 && s != cudaSuccess)
        rc = eng_op_err(c, FS_EDEVICE, "cudaStreamSynchronize failed: %s", cudaGetErrorString(s));
    return rc;
}

} // namespace

const eng_kernel_t eng_cuda_Compress = {.run = compress_run, .scratch_bytes = compress_scratch};
const eng_kernel_t eng_cuda_NonZero = {.run = nonzero_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Unique = {.run = unique_run, .scratch_bytes = unique_scratch};
