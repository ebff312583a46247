/* shape_make.cu -- the CUDA kernels of the ops that make a tensor rather
 * than move one (engine/ops/shape_make.c defines them;
 * engine/cpu/shape_kernels.c is the CPU reference): Shape, Size, Constant,
 * ConstantOfShape and Range. They write host-known values through kernels
 * that take them by value, never through an async copy from host memory,
 * so a plan captured into a CUDA graph replays correctly. */
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/shape_impl.h"

/* Internal linkage, as in shape.cu: kernel templates named like another
 * family's (fill_kernel<float>) must not merge at link time. */
namespace {

/* Shape, Size, Constant: host bytes passed by value to one block (a
 * Constant in pieces of this size). */
#define SMALL_BYTES 256

/* --- producers: Shape, Size, ConstantOfShape, Range, Constant ------------------------------ */

struct small_bytes_t {
    unsigned char b[SMALL_BYTES];
};

__global__ void small_bytes_kernel(unsigned char *__restrict__ y, small_bytes_t v, int n)
{
    if ((int)threadIdx.x < n)
        y[threadIdx.x] = v.b[threadIdx.x];
}

/* Writes n <= SMALL_BYTES host bytes to device dst, passed by value to the
 * kernel (so src may be gone before it runs). */
static int write_small(const eng_op_ctx_t *c, void *dst, const void *src, size_t n)
{
    if (n == 0)
        return 0;
    small_bytes_t v = {};
    memcpy(v.b, src, n);
    small_bytes_kernel<<<1, SMALL_BYTES, 0, eng_cuda_ctx(c)->stream>>>((unsigned char *)dst, v,
                                                                       (int)n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Shape and Size read only their input's shape, never its data. */
static int shape_run(eng_op_ctx_t *c)
{
    int64_t dims[ENG_MAX_RANK];
    int n;
    int rc = eng_shapeof_dims(c, dims, &n);
    return rc != 0 ? rc : write_small(c, c->outputs[0]->data, dims, (size_t)n * sizeof dims[0]);
}

static int size_run(eng_op_ctx_t *c)
{
    int64_t n = eng_shape_numel(&c->inputs[0]->shape);
    return write_small(c, c->outputs[0]->data, &n, sizeof n);
}

template <typename T> __global__ void fill_kernel(T *__restrict__ y, T v, int64_t n)
{
    ENG_CUDA_FOR(i, n) {
        y[i] = v;
    }
}

template <typename T>
static int fill_launch(const eng_op_ctx_t *c, void *y, const unsigned char *value, int64_t n)
{
    T v;
    memcpy(&v, value, sizeof v);
    fill_kernel<T>
        <<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>((T *)y, v, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static int constant_of_shape_run(eng_op_ctx_t *c)
{
    const void *value;
    size_t es;
    int64_t n;
    int rc = eng_constant_of_shape_fill(c, &value, &es, &n);
    if (rc != 0)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    unsigned char v[16] = {0};
    if (es > sizeof v)
        return eng_op_err(c, FS_ENOTSUP, "elements of %zu bytes are not supported", es);
    if (n == 0)
        return 0;
    memcpy(v, value, es);
    /* A value of one repeated byte (zero, above all) is a memset. */
    bool one_byte = true;
    for (size_t k = 1; k < es; k++)
        one_byte = one_byte && v[k] == v[0];
    if (one_byte) {
        ENG_CUDA_TRY(c, cudaMemsetAsync(y->data, v[0], (size_t)n * es, eng_cuda_ctx(c)->stream));
        return 0;
    }
    return with_unit(c, es, [&](auto t) {
        return fill_launch<typename decltype(t)::type>(c, y->data, v, n);
    });
}

/* y[i] = start + i * delta in T, rounded as the CPU's C expression is:
 * float and double products and sums round separately (no FMA). */
template <typename T> __device__ __forceinline__ T range_at(T s, T d, int64_t i)
{
    return (T)(s + (T)i * d);
}
template <> __device__ __forceinline__ float range_at<float>(float s, float d, int64_t i)
{
    return __fadd_rn(s, __fmul_rn((float)i, d));
}
template <> __device__ __forceinline__ double range_at<double>(double s, double d, int64_t i)
{
    return __dadd_rn(s, __dmul_rn((double)i, d));
}

template <typename T> __global__ void range_kernel(T *__restrict__ y, T s, T d, int64_t n)
{
    ENG_CUDA_FOR(i, n) {
        y[i] = range_at<T>(s, d, i);
    }
}

/* start and delta from their host copies (they decide the output's length,
 * so the engine keeps them on the host). */
template <typename T> static int range_launch(eng_op_ctx_t *c)
{
    const eng_tensor_t *start = eng_ctx_host_in(c, 0), *delta = eng_ctx_host_in(c, 2);
    if (!start || !delta)
        return eng_op_err(c, FS_EDYNAMIC, "start and delta are not known on the host");
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    if (n == 0)
        return 0;
    T s, d;
    memcpy(&s, start->data, sizeof s);
    memcpy(&d, delta->data, sizeof d);
    range_kernel<T><<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
        (T *)y->data, s, d, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static int range_run(eng_op_ctx_t *c)
{
    eng_dtype_t dt = c->outputs[0]->dtype;
    switch (dt) {
    case ENG_DT_FLOAT:
        return range_launch<float>(c);
    case ENG_DT_DOUBLE:
        return range_launch<double>(c);
    case ENG_DT_INT16:
        return range_launch<int16_t>(c);
    case ENG_DT_INT32:
        return range_launch<int32_t>(c);
    case ENG_DT_INT64:
        return range_launch<int64_t>(c);
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(dt));
    }
}

/* Load-time folding makes every Constant a weight, so this runs only for a
 * graph that was not folded. The value goes by value in SMALL_BYTES pieces,
 * like Shape's: an async copy from pageable host memory could not be
 * captured into the plan's CUDA graph. */
static int constant_run(eng_op_ctx_t *c)
{
    eng_tensor_t v;
    int rc = eng_constant_params(c, &v);
    if (rc != 0)
        return rc;
    size_t bytes = eng_tensor_bytes(&v);
    char *y = (char *)c->outputs[0]->data;
    for (size_t at = 0; at < bytes && rc == 0; at += SMALL_BYTES)
        rc = write_small(c, y + at, (const char *)v.data + at,
                         bytes - at < SMALL_BYTES ? bytes - at : SMALL_BYTES);
    return rc;
}

} // namespace

/* --- the kernels ------------------------------------------------------------------------- */

const eng_kernel_t eng_cuda_Shape = {.run = shape_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Size = {.run = size_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_ConstantOfShape = {.run = constant_of_shape_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Range = {.run = range_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Constant = {.run = constant_run, .scratch_bytes = NULL};
