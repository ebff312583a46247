/* index.cu -- the CUDA kernels of the index ops of engine/ops/index.c (the
 * scatters, OneHot, EyeLike, ReverseSequence, CenterCropPad);
 * engine/cpu/index_kernels.c is the CPU reference.
 *
 * The scatters copy data to the output (nothing when the planner ran them
 * in place), then one thread per updated element stores or folds it. With a
 * reduction the fold is atomic: float and double add through atomicAdd,
 * every other fold (mul, max, min, integer add) through a compare-and-swap
 * loop on the element's word -- the aligned 32-bit word holding it for 1-
 * and 2-byte types, whose neighbours the loop writes back unchanged. Folds
 * of duplicate indices thus all land, in some order: integer results equal
 * the CPU's, float add and mul may round differently (they are not
 * associative), max and min agree (NaN propagates as on the CPU). Without
 * a reduction duplicate indices race and one update wins (ONNX leaves it
 * undefined; the CPU takes the last).
 *
 * Departure from the CPU kernels: a bad index cannot fail the run, since
 * the device cannot return an error without synchronising. An index outside
 * [-dim, dim) (a TensorScatter write index past the cache in linear mode, a
 * ReverseSequence length outside [0, time]) leaves its update out (that
 * batch unreversed), where the CPU fails with FS_EINVAL. OneHot's out of
 * range indices give rows of off on both. */
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/dtype_impl.h"
#include "engine/ops/index_impl.h"

namespace {

/* --- element units ----------------------------------------------------------------------- */

template <typename T> struct tag {
    using type = T;
};

/* f(tag<U>{}) with U an unsigned type of `bytes` bytes; FS_ENOTSUP else. */
template <typename F> int with_size(const eng_op_ctx_t *c, size_t bytes, F &&f)
{
    switch (bytes) {
    case 1: return f(tag<uint8_t>{});
    case 2: return f(tag<uint16_t>{});
    case 4: return f(tag<uint32_t>{});
    case 8: return f(tag<uint64_t>{});
    }
    return eng_op_err(c, FS_ENOTSUP, "elements of %zu bytes are not supported", bytes);
}

/* --- folds --------------------------------------------------------------------------------- */

/* a (reduce) b, as the CPU's fold rows compute it. */
template <typename T> __device__ T fold(T a, T b, eng_scatter_reduce_t r)
{
    switch (r) {
    case ENG_SCATTER_ADD:
        if constexpr (is_float_v<T>)
            return a + b;
        else
            return (T)((wrap_t<T>)a + (wrap_t<T>)b);
    case ENG_SCATTER_MUL:
        if constexpr (is_float_v<T>)
            return a * b;
        else
            return (T)((wrap_t<T>)a * (wrap_t<T>)b);
    case ENG_SCATTER_MAX:
        if constexpr (is_float_v<T>)
            return a != a ? a : b != b ? b : a > b ? a : b;
        else
            return a > b ? a : b;
    case ENG_SCATTER_MIN:
        if constexpr (is_float_v<T>)
            return a != a ? a : b != b ? b : a < b ? a : b;
        else
            return a < b ? a : b;
    default:
        return b;
    }
}

template <typename W, typename T> __device__ W bits_of(T v)
{
    W w = 0;
    memcpy(&w, &v, sizeof v);
    return w;
}

template <typename T, typename W> __device__ T from_bits(W w)
{
    T v;
    memcpy(&v, &w, sizeof v);
    return v;
}

/* *p = fold(*p, v) atomically, by compare-and-swap on p's word. */
template <typename T> __device__ void atomic_fold(T *p, T v, eng_scatter_reduce_t r)
{
    if constexpr (sizeof(T) == 8) {
        auto *a = reinterpret_cast<unsigned long long *>(p);
        unsigned long long old = *a, seen;
        do {
            seen = old;
            T next = fold(from_bits<T>(seen), v, r);
            old = atomicCAS(a, seen, bits_of<unsigned long long>(next));
        } while (old != seen);
    } else if constexpr (sizeof(T) == 4) {
        auto *a = reinterpret_cast<unsigned int *>(p);
        unsigned int old = *a, seen;
        do {
            seen = old;
            T next = fold(from_bits<T>(seen), v, r);
            old = atomicCAS(a, seen, bits_of<unsigned int>(next));
        } while (old != seen);
    } else {
        /* The aligned word holding *p; its other bytes go back as they were. */
        uintptr_t at = reinterpret_cast<uintptr_t>(p);
        auto *a = reinterpret_cast<unsigned int *>(at & ~(uintptr_t)3);
        unsigned int shift = (unsigned int)(at & 3) * 8u;
        unsigned int mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
        unsigned int old = *a, seen;
        do {
            seen = old;
            using U = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
            T cur = from_bits<T>((U)((seen & mask) >> shift));
            unsigned int next = (unsigned int)bits_of<U>(fold(cur, v, r)) << shift;
            old = atomicCAS(a, seen, (seen & ~mask) | next);
        } while (old != seen);
    }
}

/* Stores v at p, or folds it in atomically. */
template <typename T> __device__ void put(T *p, T v, eng_scatter_reduce_t r)
{
    if (r == ENG_SCATTER_NONE) {
        *p = v;
        return;
    }
    if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) {
        if (r == ENG_SCATTER_ADD) {
            atomicAdd(p, v);
            return;
        }
    }
    atomic_fold(p, v, r);
}

/* Runs f(tag<T>{}) with T data's dtype when folding, else the unsigned type
 * of its size (a store only moves bits). */
template <typename F> int with_scatter_type(const eng_op_ctx_t *c, eng_scatter_reduce_t r, F &&f)
{
    eng_dtype_t dt = c->inputs[0]->dtype;
    if (r == ENG_SCATTER_NONE)
        return with_size(c, eng_dtype_size(dt), f);
    int rc = dispatch(dt, numeric_types{}, [&](auto t) { return f(tag<decltype(t)>{}); });
    return rc == DISPATCH_NONE ? eng_op_err(c, FS_ENOTSUP, "reduction over dtype %s is not "
                                            "supported", eng_dtype_name(dt))
                               : rc;
}

/* --- ScatterND ------------------------------------------------------------------------------ */

struct scatter_nd_t {
    int k;
    int64_t dims[ENG_MAX_RANK], strides[ENG_MAX_RANK];
    int64_t row;
    eng_scatter_reduce_t reduce;
};

template <typename T>
__global__ void scatter_nd_kernel(T *__restrict__ y, const T *__restrict__ u,
                                  const int64_t *__restrict__ idx, scatter_nd_t g, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t j = i / g.row, col = i - j * g.row, at = 0;
        bool ok = true;
        for (int t = 0; t < g.k; t++) {
            int64_t v = idx[j * g.k + t];
            v += v < 0 ? g.dims[t] : 0;
            ok = ok && v >= 0 && v < g.dims[t];
            at += v * g.strides[t];
        }
        if (ok)
            put(y + at * g.row + col, u[i], g.reduce);
    }
}

/* A bad index cannot fail the run here (see the file comment): its row is
 * left out. */
int scatter_nd_run(eng_op_ctx_t *c)
{
    eng_scatter_nd_t p;
    int rc = eng_scatter_nd_params(c, &p);
    if (rc || (rc = eng_cuda_copy_d2d(c, c->outputs[0]->data, c->inputs[0]->data,
                                      eng_tensor_bytes(c->outputs[0]))) != 0)
        return rc;
    scatter_nd_t g = {p.k, {0}, {0}, p.row, p.reduce};
    for (int t = 0; t < p.k; t++) {
        g.dims[t] = p.dims[t];
        g.strides[t] = p.strides[t];
    }
    int64_t n = p.n_rows * p.row;
    return with_scatter_type(c, p.reduce, [&](auto t) {
        using T = typename decltype(t)::type;
        return eng_cuda_launch(c, scatter_nd_kernel<T>, n, (T *)c->outputs[0]->data,
                               (const T *)c->inputs[2]->data, (const int64_t *)c->inputs[1]->data,
                               g, n);
    });
}

/* --- ScatterElements, Scatter ----------------------------------------------------------------- */

struct scatter_el_t {
    int rank, axis;
    int64_t dims[ENG_MAX_RANK], strides[ENG_MAX_RANK];
    int64_t axis_dim;
    eng_scatter_reduce_t reduce;
};

template <typename T, typename I>
__global__ void scatter_el_kernel(T *__restrict__ y, const T *__restrict__ u,
                                  const I *__restrict__ idx, scatter_el_t g, int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t v = idx[e];
        v += v < 0 ? g.axis_dim : 0;
        if (v < 0 || v >= g.axis_dim)
            continue;
        int64_t rem = e, off = 0;
        for (int d = g.rank - 1; d >= 0; d--) {
            int64_t q = rem / g.dims[d], at = rem - q * g.dims[d];
            off += (d == g.axis ? v : at) * g.strides[d];
            rem = q;
        }
        put(y + off, u[e], g.reduce);
    }
}

/* A bad index cannot fail the run here: its update is left out. */
int scatter_el_run(eng_op_ctx_t *c)
{
    eng_scatter_el_t p;
    int rc = eng_scatter_el_params(c, &p);
    if (rc || (rc = eng_cuda_copy_d2d(c, c->outputs[0]->data, c->inputs[0]->data,
                                      eng_tensor_bytes(c->outputs[0]))) != 0)
        return rc;
    scatter_el_t g = {p.rank, p.axis, {0}, {0}, p.axis_dim, p.reduce};
    for (int d = 0; d < p.rank; d++) {
        g.dims[d] = p.dims[d];
        g.strides[d] = p.strides[d];
    }
    bool wide = c->inputs[1]->dtype == ENG_DT_INT64;
    return with_scatter_type(c, p.reduce, [&](auto t) {
        using T = typename decltype(t)::type;
        T *y = (T *)c->outputs[0]->data;
        const T *u = (const T *)c->inputs[2]->data;
        if (wide)
            return eng_cuda_launch(c, scatter_el_kernel<T, int64_t>, p.n, y, u,
                                   (const int64_t *)c->inputs[1]->data, g, p.n);
        return eng_cuda_launch(c, scatter_el_kernel<T, int32_t>, p.n, y, u,
                               (const int32_t *)c->inputs[1]->data, g, p.n);
    });
}

/* --- TensorScatter ------------------------------------------------------------------------- */

template <typename T>
__global__ void tensor_scatter_kernel(T *__restrict__ y, const T *__restrict__ u,
                                      const int64_t *__restrict__ w, eng_tensor_scatter_t g,
                                      int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t col = i % g.inner, os = i / g.inner, s = os % g.seq, o = os / g.seq;
        int64_t p = (w ? w[o / g.per_batch] : 0) + s;
        if (g.circular)
            p = ((p % g.max_seq) + g.max_seq) % g.max_seq;
        else if (p < 0 || p >= g.max_seq)
            continue;
        y[(o * g.max_seq + p) * g.inner + col] = u[i];
    }
}

/* A write index that runs past the cache (linear mode) cannot fail the run
 * here: the updates that would land outside it are left out. */
int tensor_scatter_run(eng_op_ctx_t *c)
{
    eng_tensor_scatter_t g;
    int rc = eng_tensor_scatter_params(c, &g);
    if (rc || (rc = eng_cuda_copy_d2d(c, c->outputs[0]->data, c->inputs[0]->data,
                                      eng_tensor_bytes(c->outputs[0]))) != 0)
        return rc;
    const eng_tensor_t *w = eng_ctx_in(c, 2);
    int64_t n = g.outer * g.seq * g.inner;
    return with_size(c, eng_dtype_size(c->inputs[0]->dtype), [&](auto t) {
        using T = typename decltype(t)::type;
        return eng_cuda_launch(c, tensor_scatter_kernel<T>, n, (T *)c->outputs[0]->data,
                               (const T *)c->inputs[1]->data,
                               w ? (const int64_t *)w->data : (const int64_t *)nullptr, g, n);
    });
}

/* --- OneHot ------------------------------------------------------------------------------------ */

/* Index e of OneHot's indices as the CPU reads it: truncated towards zero. */
template <typename I> __device__ double index_value(const I *idx, int64_t e)
{
    if constexpr (std::is_same<I, f16_t>::value)
        return eng_half_to_float(idx[e].bits);
    else if constexpr (std::is_same<I, bf16_t>::value)
        return eng_bf16_to_float(idx[e].bits);
    else
        return (double)idx[e];
}

template <typename T, typename I>
__global__ void one_hot_kernel(T *__restrict__ y, const I *__restrict__ idx,
                               const T *__restrict__ values, eng_one_hot_t g, int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t i = e % g.inner, oj = e / g.inner, j = oj % g.depth, o = oj / g.depth;
        double v = trunc(index_value(idx, o * g.inner + i));
        if (v < 0)
            v += (double)g.depth;
        y[e] = v == (double)j ? values[1] : values[0];
    }
}

using index_types = types<float, double, f16_t, bf16_t, int8_t, int16_t, int32_t, int64_t,
                          uint8_t, uint16_t, uint32_t, uint64_t>;

/* Cannot fail past its parameters: an index out of range gives off. The
 * off and on values are read on the device. */
int one_hot_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_one_hot_t g;
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_one_hot_params(&v.c, &g)) != 0)
        return rc;
    int64_t n = g.outer * g.depth * g.inner;
    const eng_tensor_t *idx = c->inputs[0], *values = c->inputs[2];
    return with_size(c, eng_dtype_size(values->dtype), [&](auto t) {
        using T = typename decltype(t)::type;
        int r = dispatch(idx->dtype, index_types{}, [&](auto it) {
            using I = decltype(it);
            return eng_cuda_launch(c, one_hot_kernel<T, I>, n, (T *)c->outputs[0]->data,
                                   (const I *)idx->data, (const T *)values->data, g, n);
        });
        return r == DISPATCH_NONE ? eng_op_err(c, FS_ENOTSUP, "indices of dtype %s are not "
                                                "supported", eng_dtype_name(idx->dtype))
                                  : r;
    });
}

/* --- EyeLike ---------------------------------------------------------------------------------- */

template <typename T>
__global__ void eye_like_kernel(T *__restrict__ y, int64_t cols, int64_t k, T one, int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t i = e / cols, j = e - i * cols;
        y[e] = j - i == k ? one : T{};
    }
}

int eye_like_run(eng_op_ctx_t *c)
{
    eng_dtype_t dt;
    int64_t k;
    unsigned char one[16];
    int rc = eng_eye_like_params(c, &dt, one, &k);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    int64_t cols = y->shape.dims[1], n = eng_shape_numel(&y->shape);
    return with_size(c, eng_dtype_size(dt), [&](auto t) {
        using T = typename decltype(t)::type;
        T v;
        memcpy(&v, one, sizeof v);
        return eng_cuda_launch(c, eye_like_kernel<T>, n, (T *)y->data, cols, k, v, n);
    });
}

/* --- ReverseSequence --------------------------------------------------------------------------- */

template <typename T>
__global__ void reverse_seq_kernel(T *__restrict__ y, const T *__restrict__ x,
                                   const int64_t *__restrict__ lens, eng_reverse_seq_t g,
                                   int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t col = e % g.inner, r = e / g.inner, a1 = r % g.d1, a0 = r / g.d1;
        int64_t b = g.batch_first ? a0 : a1, t = g.batch_first ? a1 : a0;
        int64_t len = lens[b], time = g.batch_first ? g.d1 : g.d0;
        int64_t src = len >= 0 && len <= time && t < len ? len - 1 - t : t;
        int64_t s0 = g.batch_first ? a0 : src, s1 = g.batch_first ? src : a1;
        y[e] = x[(s0 * g.d1 + s1) * g.inner + col];
    }
}

/* A length outside [0, time] cannot fail the run here: its batch is copied
 * unreversed. */
int reverse_seq_run(eng_op_ctx_t *c)
{
    eng_reverse_seq_t g;
    int rc = eng_reverse_seq_params(c, &g);
    if (rc)
        return rc;
    int64_t n = g.d0 * g.d1 * g.inner;
    return with_size(c, eng_dtype_size(c->inputs[0]->dtype), [&](auto t) {
        using T = typename decltype(t)::type;
        return eng_cuda_launch(c, reverse_seq_kernel<T>, n, (T *)c->outputs[0]->data,
                               (const T *)c->inputs[0]->data, (const int64_t *)c->inputs[1]->data,
                               g, n);
    });
}

/* --- CenterCropPad ----------------------------------------------------------------------------- */

template <typename T>
__global__ void crop_pad_kernel(T *__restrict__ y, const T *__restrict__ x, eng_crop_pad_t g,
                                int64_t n)
{
    ENG_CUDA_FOR(e, n)
    {
        int64_t rem = e, src = 0, scale = 1;
        bool inside = true;
        for (int d = g.rank - 1; d >= 0; d--) {
            int64_t q = rem / g.out.dims[d], s = rem - q * g.out.dims[d] + g.shift[d];
            inside = inside && s >= 0 && s < g.in[d];
            src += s * scale;
            scale *= g.in[d];
            rem = q;
        }
        y[e] = inside ? x[src] : T{};
    }
}

/* The shape input decides the output shape: its host copy is read. */
int crop_pad_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_crop_pad_t g;
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_crop_pad_params(&v.c, &g)) != 0)
        return rc;
    int64_t n = eng_shape_numel(&g.out);
    return with_size(c, eng_dtype_size(c->inputs[0]->dtype), [&](auto t) {
        using T = typename decltype(t)::type;
        return eng_cuda_launch(c, crop_pad_kernel<T>, n, (T *)c->outputs[0]->data,
                               (const T *)c->inputs[0]->data, g, n);
    });
}

} // namespace

const eng_kernel_t eng_cuda_ScatterND = {.run = scatter_nd_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_ScatterElements = {.run = scatter_el_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Scatter = {.run = scatter_el_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_TensorScatter = {.run = tensor_scatter_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_OneHot = {.run = one_hot_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_EyeLike = {.run = eye_like_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_ReverseSequence = {.run = reverse_seq_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_CenterCropPad = {.run = crop_pad_run, .scratch_bytes = NULL};
