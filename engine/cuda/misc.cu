/* misc.cu -- the CUDA kernels of the misc ops (engine/ops/misc.c defines them;
 * engine/cpu/misc_kernels.c is the CPU reference): TopK, Trilu, Resize (and Upsample).
 *
 * TopK ranks each slice (the elements along the axis at one outer and inner
 * position) in the CPU's total order -- larger first with `largest` (else
 * smaller first), NaN above every number, -0 equal to +0, equal values by
 * lower index -- by encoding every element as one unsigned sort item (the
 * value's order-preserving bits, complemented for `largest`, then its index)
 * so that ranking is a plain ascending sort of distinct items and needs no
 * stability. Outputs are re-read from x at the item's index, so values come
 * back bit for bit. Three plans, by the axis length n and k:
 *  - n fits one block's shared memory (TOPK_CHUNK items): a bitonic sort per
 *    slice, in one block;
 *  - else, with 2k <= TOPK_CHUNK: rounds of that chunk sort over chunks of
 *    each slice, each chunk keeping its first k items in scratch, until a
 *    slice's candidates fit one chunk (each round at least halves them);
 *    an item's rank among its chunk's never exceeds its rank in the slice,
 *    so the top k survive every round;
 *  - else: a full bitonic sort of each slice, padded to a power of two, in
 *    scratch (shared-memory tiles for the short strides, one launch per long
 *    stride).
 * Every numeric dtype runs (int8..int64, uint8..uint64, float16, bfloat16,
 * float, double), each with its own exact keys (no conversion). Items are 8
 * bytes (keys of elements up to 4 bytes: key << 32 | index) or 16 (64-bit
 * keys of 8-byte elements), so n must stay below 2^32 - 1 (FS_ENOTSUP
 * beyond).
 *
 * Trilu is element-wise; its k (which does not decide shapes) is read on the
 * device.
 *
 * Resize follows the CPU kernel (misc_impl.h has the geometry): per axis, a
 * table of taps for every output coordinate (input offsets and weights,
 * edge-clamped neighbours merged, zero weights dropped) is built on the
 * device in scratch, one thread per output coordinate, with the CPU's
 * coefficient and coordinate functions (copied here: they are static in
 * misc_kernels.c); then one thread per output element sums the products of
 * its axes' taps. The roi of tf_crop_and_resize does not decide shapes, so
 * it is read on the device. Departure: an element's sum over its outer
 * axes' taps is accumulated in double and rounded once, where the CPU adds
 * each outer tap's float contribution to a float row. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/cuda/dtype_impl.h"
#include "engine/ops/misc_impl.h"


static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t pow2_ceil(int64_t v)
{
    int64_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* ---- TopK ------------------------------------------------------------------- */

#define TOPK_SHARED_BYTES 32768 /* a chunk's items in shared memory */

/* Order-preserving unsigned keys, 32 bits for elements of up to 4 bytes and
 * 64 for 8: floats of every width through eng_topk_float_key (the CPU's
 * keys: NaN above everything, -0 as +0), signed integers with the sign bit
 * flipped, unsigned ones as they are. */
__device__ __forceinline__ uint32_t topk_key(float v)
{
    return (uint32_t)eng_topk_float_key(__float_as_uint(v), 0x80000000u, 0x7f800000u);
}
__device__ __forceinline__ uint64_t topk_key(double v)
{
    return eng_topk_float_key((uint64_t)__double_as_longlong(v), 1ull << 63,
                              0x7ff0000000000000ull);
}
__device__ __forceinline__ uint32_t topk_key(f16_t v)
{
    return (uint32_t)eng_topk_float_key(v.bits, 0x8000u, 0x7c00u);
}
__device__ __forceinline__ uint32_t topk_key(bf16_t v)
{
    return (uint32_t)eng_topk_float_key(v.bits, 0x8000u, 0x7f80u);
}
__device__ __forceinline__ uint32_t topk_key(int8_t v)
{
    return (uint32_t)(int32_t)v ^ 0x80000000u;
}
__device__ __forceinline__ uint32_t topk_key(int16_t v)
{
    return (uint32_t)(int32_t)v ^ 0x80000000u;
}
__device__ __forceinline__ uint32_t topk_key(int32_t v) { return (uint32_t)v ^ 0x80000000u; }
__device__ __forceinline__ uint64_t topk_key(int64_t v)
{
    return (uint64_t)v ^ 0x8000000000000000ull;
}
__device__ __forceinline__ uint32_t topk_key(uint8_t v) { return v; }
__device__ __forceinline__ uint32_t topk_key(uint16_t v) { return v; }
__device__ __forceinline__ uint32_t topk_key(uint32_t v) { return v; }
__device__ __forceinline__ uint64_t topk_key(uint64_t v) { return v; }

/* The element types TopK ranks (misc.c's topk_types). */
using topk_types = types<float, double, f16_t, bf16_t, int8_t, int16_t, int32_t, int64_t, uint8_t,
                         uint16_t, uint32_t, uint64_t>;

/* A sort item: ascending items are the ranking. The sentinel pads a sort to
 * a power of two and ranks after every real item (indices stay below
 * 2^32 - 1). */
template <typename K> struct topk_item;
template <> struct topk_item<uint32_t> {
    unsigned long long v;
    static __device__ __forceinline__ topk_item make(uint32_t key, uint32_t idx)
    {
        return topk_item{((unsigned long long)key << 32) | idx};
    }
    static __device__ __forceinline__ topk_item sentinel() { return topk_item{~0ull}; }
    __device__ __forceinline__ uint32_t index() const { return (uint32_t)v; }
    __device__ __forceinline__ bool before(const topk_item &o) const { return v < o.v; }
};
template <> struct topk_item<uint64_t> {
    unsigned long long k;
    unsigned idx;
    static __device__ __forceinline__ topk_item make(uint64_t key, uint32_t i)
    {
        return topk_item{key, i};
    }
    static __device__ __forceinline__ topk_item sentinel() { return topk_item{~0ull, ~0u}; }
    __device__ __forceinline__ uint32_t index() const { return idx; }
    __device__ __forceinline__ bool before(const topk_item &o) const
    {
        return k < o.k || (k == o.k && idx < o.idx);
    }
};

/* The item type of an element type: its key's width. */
template <typename T> struct topk_item_of {
    using type = topk_item<wrap_t<T>>;
};
static_assert(sizeof(topk_item<uint32_t>) == 8, "item size");
static_assert(sizeof(topk_item<uint64_t>) == 16, "item size");

template <typename Item> __host__ __device__ constexpr int topk_chunk()
{
    return (int)(TOPK_SHARED_BYTES / sizeof(Item));
}

typedef struct topk_geom {
    int64_t n, k, inner, slices; /* slices = outer * inner */
    bool desc;
} topk_geom_t;

/* Element j of slice s, as its sort item. */
template <typename T, typename Item>
__device__ __forceinline__ Item topk_make(const T *x, const topk_geom_t &g, int64_t s, int64_t j)
{
    int64_t o = s / g.inner, i = s - o * g.inner;
    auto key = topk_key(x[(o * g.n + j) * g.inner + i]);
    return Item::make(g.desc ? ~key : key, (uint32_t)j);
}

/* Writes rank j of slice s, the item `it`, to the outputs (either may be
 * NULL), the value re-read from x. */
template <typename T, typename Item>
__device__ __forceinline__ void topk_emit_one(const T *x, T *vals, int64_t *idxs,
                                              const topk_geom_t &g, int64_t s, int64_t j,
                                              const Item &it)
{
    int64_t o = s / g.inner, i = s - o * g.inner, idx = it.index();
    int64_t at = (o * g.k + j) * g.inner + i;
    if (idxs)
        idxs[at] = idx;
    if (vals)
        vals[at] = x[(o * g.n + idx) * g.inner + i];
}

/* Compare-exchange of a[i] and a[i + stride] towards ascending order when
 * `asc`, else descending. */
template <typename Item>
__device__ __forceinline__ void topk_cas(Item *a, int64_t i, int64_t stride, bool asc)
{
    Item p = a[i], q = a[i + stride];
    if (q.before(p) == asc) {
        a[i] = q;
        a[i + stride] = p;
    }
}

/* Sorts a[0, P) ascending in shared memory (P a power of two); the block's
 * threads take the pairs. */
template <typename Item> __device__ void topk_block_sort(Item *a, int P)
{
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < P / 2; t += blockDim.x) {
                int i = 2 * t - (t & (stride - 1));
                topk_cas(a, i, stride, (i & size) == 0);
            }
            __syncthreads();
        }
    }
}

/* One chunk sort per block over the chunks of every slice: m items per
 * slice, read from x (src NULL: m == n) or from src ([slices][m]). With dst,
 * chunk c of slice s writes its first `keep` items (sentinels past its end)
 * to dst[s][c * keep ...]; without, the chunk is the whole slice and its
 * first k items are the outputs. */
template <typename T, typename Item>
__global__ void topk_chunks(const T *__restrict__ x, const Item *src, Item *dst, T *vals,
                            int64_t *idxs, topk_geom_t g, int64_t m, int64_t chunks, int64_t keep)
{
    extern __shared__ unsigned long long topk_smem[];
    Item *a = (Item *)topk_smem;
    constexpr int CH = topk_chunk<Item>();
    for (int64_t b = blockIdx.x; b < g.slices * chunks; b += gridDim.x) {
        int64_t s = b / chunks, c = b - s * chunks, first = c * CH;
        int count = (int)(m - first < CH ? m - first : CH);
        int P = 1;
        while (P < count)
            P <<= 1;
        for (int j = threadIdx.x; j < P; j += blockDim.x) {
            Item it = Item::sentinel();
            if (j < count)
                it = src ? src[s * m + first + j] : topk_make<T, Item>(x, g, s, first + j);
            a[j] = it;
        }
        __syncthreads();
        topk_block_sort(a, P);
        if (dst) {
            for (int64_t j = threadIdx.x; j < keep; j += blockDim.x)
                dst[s * chunks * keep + c * keep + j] = j < count ? a[j] : Item::sentinel();
        } else {
            for (int64_t j = threadIdx.x; j < keep; j += blockDim.x)
                topk_emit_one(x, vals, idxs, g, s, j, a[j]);
        }
        __syncthreads();
    }
}

/* Full sort: every slice's items padded to P (a power of two) in items. */
template <typename T, typename Item>
__global__ void topk_fill(const T *__restrict__ x, Item *items, topk_geom_t g, int64_t P)
{
    ENG_CUDA_FOR(e, g.slices * P)
    {
        int64_t s = e / P, j = e - s * P;
        items[e] = j < g.n ? topk_make<T, Item>(x, g, s, j) : Item::sentinel();
    }
}

/* Full sort, strides below a tile: each block loads a tile of CH items (CH
 * divides P) and runs the bitonic stages of sizes size_lo..size_hi with
 * their strides below CH; a pair's direction comes from its position in the
 * slice. */
template <typename Item>
__global__ void topk_tiles(Item *items, int64_t total, int64_t P, int64_t size_lo, int64_t size_hi)
{
    __shared__ Item a[topk_chunk<Item>()];
    constexpr int CH = topk_chunk<Item>();
    for (int64_t base = (int64_t)blockIdx.x * CH; base < total; base += (int64_t)gridDim.x * CH) {
        for (int j = threadIdx.x; j < CH; j += blockDim.x)
            a[j] = items[base + j];
        __syncthreads();
        for (int64_t size = size_lo; size <= size_hi; size <<= 1) {
            for (int stride = (int)(size / 2 < CH / 2 ? size / 2 : CH / 2); stride > 0;
                 stride >>= 1) {
                for (int t = threadIdx.x; t < CH / 2; t += blockDim.x) {
                    int i = 2 * t - (t & (stride - 1));
                    topk_cas(a, i, stride, (((base + i) & (P - 1)) & size) == 0);
                }
                __syncthreads();
            }
        }
        for (int j = threadIdx.x; j < CH; j += blockDim.x)
            items[base + j] = a[j];
        __syncthreads();
    }
}

/* Full sort, one stride of at least a tile, over all slices. */
template <typename Item>
__global__ void topk_step(Item *items, int64_t total, int64_t P, int64_t size, int64_t stride)
{
    ENG_CUDA_FOR(t, total / 2)
    {
        int64_t i = 2 * t - (t & (stride - 1));
        topk_cas(items, i, stride, ((i & (P - 1)) & size) == 0);
    }
}

/* Full sort: the first k items of every slice to the outputs. */
template <typename T, typename Item>
__global__ void topk_emit(const Item *__restrict__ items, const T *__restrict__ x, T *vals,
                          int64_t *idxs, topk_geom_t g, int64_t P)
{
    ENG_CUDA_FOR(e, g.slices * g.k)
    {
        int64_t s = e / g.k, j = e - s * g.k;
        topk_emit_one(x, vals, idxs, g, s, j, items[s * P + j]);
    }
}

typedef enum topk_mode { TOPK_ONE_CHUNK, TOPK_ROUNDS, TOPK_FULL_SORT } topk_mode_t;

typedef struct topk_plan {
    topk_geom_t g;
    topk_mode_t mode;
    int64_t chunk;       /* items per chunk */
    int64_t m1, m2;      /* rounds: items per slice after rounds 1 and 2 */
    int64_t pad;         /* full sort: P */
    size_t item_bytes, bytes;
} topk_plan_t;

/* TopK's plan for the node in c. 0, or eng_topk_params's errors, FS_ENOTSUP
 * (dtype, an axis of 2^32 - 1 elements or more). */
static int topk_plan(const eng_op_ctx_t *c, topk_plan_t *p)
{
    eng_cuda_host_view_t v;
    int axis;
    int64_t k;
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_topk_params(&v.c, &axis, &k)))
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    if (dispatch(x->dtype, topk_types{}, [](auto) { return 0; }) == DISPATCH_NONE)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
    memset(p, 0, sizeof *p);
    int64_t n = x->shape.dims[axis], outer = 1, inner = 1;
    for (int d = 0; d < x->shape.rank; d++)
        if (d != axis)
            *(d < axis ? &outer : &inner) *= x->shape.dims[d];
    if (n >= (int64_t)UINT32_MAX)
        return eng_op_err(c, FS_ENOTSUP, "an axis of %lld elements is more than the CUDA TopK "
                          "sorts", (long long)n);
    p->g = topk_geom_t{n, k, inner, outer * inner, eng_attr_i(c->node, "largest", 1) != 0};
    p->item_bytes = eng_dtype_size(x->dtype) == 8 ? sizeof(topk_item<uint64_t>)
                                                  : sizeof(topk_item<uint32_t>);
    p->chunk = (int64_t)(TOPK_SHARED_BYTES / p->item_bytes);
    size_t slices = (size_t)p->g.slices;
    if (n <= p->chunk) {
        p->mode = TOPK_ONE_CHUNK;
    } else if (2 * k <= p->chunk) {
        p->mode = TOPK_ROUNDS;
        p->m1 = ceil_div(n, p->chunk) * k;
        p->m2 = p->m1 > p->chunk ? ceil_div(p->m1, p->chunk) * k : 0;
        p->bytes = slices * (size_t)(p->m1 + p->m2) * p->item_bytes;
    } else {
        p->mode = TOPK_FULL_SORT;
        p->pad = pow2_ceil(n);
        p->bytes = slices * (size_t)p->pad * p->item_bytes;
    }
    return 0;
}

static size_t topk_scratch(const eng_op_ctx_t *c)
{
    topk_plan_t p;
    if (topk_plan(c, &p))
        return 0; /* run reports the same error */
    return p.bytes;
}

/* Queues one round of chunk sorts (see topk_chunks). */
template <typename T, typename Item>
static int topk_round(eng_op_ctx_t *c, const topk_plan_t *p, const T *x, const Item *src,
                      Item *dst, T *vals, int64_t *idxs, int64_t m, int64_t keep)
{
    int64_t chunks = ceil_div(m, p->chunk);
    int64_t P = pow2_ceil(m < p->chunk ? m : p->chunk);
    int threads = (int)(P / 2 < 32 ? 32 : P / 2 > 1024 ? 1024 : P / 2);
    topk_chunks<T, Item>
        <<<eng_cuda_grid_cap(c, p->g.slices * chunks), threads, (size_t)P * sizeof(Item),
           eng_cuda_ctx(c)->stream>>>(x, src, dst, vals, idxs, p->g, m, chunks, keep);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

template <typename T>
static int topk_typed(eng_op_ctx_t *c, const topk_plan_t *p, T *vals, int64_t *idxs)
{
    using Item = typename topk_item_of<T>::type;
    const T *x = (const T *)c->inputs[0]->data;
    const topk_geom_t &g = p->g;
    if (p->mode == TOPK_ONE_CHUNK)
        return topk_round<T, Item>(c, p, x, NULL, NULL, vals, idxs, g.n, g.k);
    Item *buf = (Item *)c->scratch;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    int rc;
    if (p->mode == TOPK_ROUNDS) {
        Item *bufs[2] = {buf, buf + g.slices * p->m1};
        const Item *src = NULL;
        int64_t m = g.n;
        for (int r = 0; m > p->chunk; r++) {
            if ((rc = topk_round<T, Item>(c, p, x, src, bufs[r & 1], NULL, NULL, m, g.k)))
                return rc;
            src = bufs[r & 1];
            m = ceil_div(m, p->chunk) * g.k;
        }
        return topk_round<T, Item>(c, p, x, src, NULL, vals, idxs, m, g.k);
    }
    constexpr int CH = topk_chunk<Item>();
    int64_t P = p->pad, total = g.slices * P;
    topk_fill<T, Item><<<eng_cuda_blocks(c, total), ENG_CUDA_THREADS, 0, st>>>(x, buf, g, P);
    ENG_CUDA_LAUNCHED(c);
    unsigned tiles = eng_cuda_grid_cap(c, total / CH);
    topk_tiles<Item><<<tiles, 1024, 0, st>>>(buf, total, P, 2, CH);
    ENG_CUDA_LAUNCHED(c);
    for (int64_t size = 2 * (int64_t)CH; size <= P; size <<= 1) {
        for (int64_t stride = size / 2; stride >= CH; stride >>= 1) {
            topk_step<Item><<<eng_cuda_blocks(c, total / 2), ENG_CUDA_THREADS, 0, st>>>(
                buf, total, P, size, stride);
            ENG_CUDA_LAUNCHED(c);
        }
        topk_tiles<Item><<<tiles, 1024, 0, st>>>(buf, total, P, size, size);
        ENG_CUDA_LAUNCHED(c);
    }
    topk_emit<T, Item><<<eng_cuda_blocks(c, g.slices * g.k), ENG_CUDA_THREADS, 0, st>>>(
        buf, x, vals, idxs, g, P);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Like every kernel here, it checks before it queues: on error nothing is
 * queued and the message names the node. */
static int topk_run(eng_op_ctx_t *c)
{
    topk_plan_t p;
    int rc = topk_plan(c, &p);
    if (rc)
        return rc;
    if (p.g.k == 0 || p.g.slices == 0)
        return 0;
    if (c->scratch_bytes < p.bytes)
        return eng_op_scratch_err(c, p.bytes);
    eng_tensor_t *vt = c->n_outputs > 0 ? c->outputs[0] : NULL;
    eng_tensor_t *it = c->n_outputs > 1 ? c->outputs[1] : NULL;
    void *vals = vt ? vt->data : NULL;
    int64_t *idxs = it ? (int64_t *)it->data : NULL;
    if (!vals && !idxs)
        return 0;
    /* topk_plan has checked the dtype. */
    return dispatch(c->inputs[0]->dtype, topk_types{}, [&](auto t) {
        using T = decltype(t);
        return topk_typed<T>(c, &p, (T *)vals, idxs);
    });
}

/* ---- Trilu ------------------------------------------------------------------ */

/* Keeps the elements on the chosen side of diagonal k (a device scalar, 0
 * when absent), clamped as on the CPU so i + k cannot overflow; zeroes the
 * rest. E: an unsigned type of the element's size (a bitwise copy). */
template <typename E>
__global__ void trilu_kernel(const E *__restrict__ x, E *__restrict__ y, int64_t total,
                             int64_t rows, int64_t cols, const int64_t *kp, bool upper)
{
    int64_t k = kp ? *kp : 0, lim = rows + cols + 1;
    k = k < -lim ? -lim : k > lim ? lim : k;
    ENG_CUDA_FOR(e, total)
    {
        int64_t rc = e / cols, j = e - rc * cols, i = rc % rows;
        bool keep = upper ? j >= i + k : j <= i + k;
        y[e] = keep ? x[e] : (E)0;
    }
}

template <typename E> static int trilu_typed(eng_op_ctx_t *c, int64_t total, int64_t rows, int64_t cols,
                                             const int64_t *kp, bool upper)
{
    trilu_kernel<E><<<eng_cuda_blocks(c, total), ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
        (const E *)c->inputs[0]->data, (E *)c->outputs[0]->data, total, rows, cols, kp, upper);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static int trilu_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    const eng_tensor_t *kt = eng_ctx_in(c, 1);
    int r = x->shape.rank;
    if (r < 2)
        return eng_op_err(c, FS_EINVAL, "input 0 must have rank >= 2, not %d", r);
    int64_t rows = x->shape.dims[r - 2], cols = x->shape.dims[r - 1];
    int64_t total = eng_shape_numel(&x->shape);
    const int64_t *kp = kt ? (const int64_t *)kt->data : NULL;
    bool upper = eng_attr_i(c->node, "upper", 1) != 0;
    size_t es = eng_dtype_size(x->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(x->dtype));
    if (total == 0)
        return 0;
    switch (es) {
    case 1: return trilu_typed<uint8_t>(c, total, rows, cols, kp, upper);
    case 2: return trilu_typed<uint16_t>(c, total, rows, cols, kp, upper);
    case 4: return trilu_typed<uint32_t>(c, total, rows, cols, kp, upper);
    default: return trilu_typed<uint64_t>(c, total, rows, cols, kp, upper);
    }
}

/* ---- Resize ----------------------------------------------------------------- */

/* Resize's launch description: the geometry, and where each axis's tables
 * sit in scratch. */
typedef struct resize_plan {
    eng_resize_geom_t g;
    int64_t width[ENG_MAX_RANK];
    int64_t stride[ENG_MAX_RANK];   /* input elements per step along axis d */
    int64_t table[ENG_MAX_RANK];    /* byte offset of axis d's tables in scratch */
    int roi_at[ENG_MAX_RANK];       /* axis d's place in roi; -1: not listed (0 to 1) */
    int n_roi_axes;                 /* roi values per side */
    size_t bytes;
} resize_plan_t;

__device__ __forceinline__ int64_t *resize_count(char *scratch, const resize_plan_t &p, int d)
{
    return (int64_t *)(scratch + p.table[d]);
}
__device__ __forceinline__ int64_t *resize_offset(char *scratch, const resize_plan_t &p, int d)
{
    return resize_count(scratch, p, d) + p.g.out[d];
}
__device__ __forceinline__ double *resize_weight(char *scratch, const resize_plan_t &p, int d)
{
    return (double *)(resize_offset(scratch, p, d) + p.g.out[d] * p.width[d]);
}

/* The input coordinate of output coordinate x on axis d (eng_resize_source),
 * with the roi (device, may be NULL) as the plan maps it. */
__device__ static double resize_source(const resize_plan_t &p, const float *roi, int d, int64_t x,
                                       bool *outside)
{
    double r0 = p.g.roi_start[d], r1 = p.g.roi_end[d];
    if (p.g.attrs.coord == ENG_RESIZE_TF_CROP_AND_RESIZE && roi && p.roi_at[d] >= 0) {
        r0 = roi[p.roi_at[d]];
        r1 = roi[p.n_roi_axes + p.roi_at[d]];
    }
    return eng_resize_source(&p.g, d, x, r0, r1, outside);
}

/* One thread per output coordinate of every axis: fills the tap tables
 * (count -1: the coordinate leaves the input), as resize_axis_build in
 * misc_kernels.c. */
__global__ void resize_tables(resize_plan_t p, const float *roi, char *scratch, int64_t n_coords)
{
    const eng_resize_attrs_t *a = &p.g.attrs;
    ENG_CUDA_FOR(e, n_coords)
    {
        int d = 0;
        int64_t x = e;
        while (x >= p.g.out[d]) {
            x -= p.g.out[d];
            d++;
        }
        double s = p.g.scale[d];
        int64_t width = p.width[d];
        int64_t *count = resize_count(scratch, p, d);
        bool outside;
        double xo = resize_source(p, roi, d, x, &outside);
        count[x] = outside ? -1
                           : eng_resize_taps(a, eng_resize_footprint(a, s), p.g.in[d], s,
                                             p.stride[d], xo,
                                             resize_offset(scratch, p, d) + x * width,
                                             resize_weight(scratch, p, d) + x * width);
    }
}

/* One thread per output element: the sum, over every combination of the
 * outer axes' taps, of their weights' product times the last axis's
 * weighted taps. An element an axis sends outside the input is
 * extrapolation_value, one whose outer axis has no tap 0, as on the CPU. */
__global__ void resize_apply(resize_plan_t p, char *scratch, const float *__restrict__ x,
                             float *__restrict__ y, int64_t total)
{
    const int last = p.g.rank - 1;
    const int64_t *lcount = resize_count(scratch, p, last);
    const int64_t *loff = resize_offset(scratch, p, last);
    const double *lwt = resize_weight(scratch, p, last);
    const int64_t lwidth = p.width[last], n_last = p.g.out[last];
    ENG_CUDA_FOR(e, total)
    {
        int64_t xl = e % n_last, rest = e / n_last;
        int64_t cnt[ENG_MAX_RANK], t[ENG_MAX_RANK];
        const int64_t *off[ENG_MAX_RANK];
        const double *wt[ENG_MAX_RANK];
        int64_t at[ENG_MAX_RANK];
#pragma unroll
        for (int d = ENG_MAX_RANK - 1; d >= 0; d--) {
            if (d < last) {
                int64_t q = rest / p.g.out[d];
                at[d] = rest - q * p.g.out[d];
                rest = q;
            }
        }
        float fill = 0.0f;
        bool filled = false;
#pragma unroll
        for (int d = 0; d < ENG_MAX_RANK; d++) {
            if (d < last && !filled) {
                cnt[d] = resize_count(scratch, p, d)[at[d]];
                off[d] = resize_offset(scratch, p, d) + at[d] * p.width[d];
                wt[d] = resize_weight(scratch, p, d) + at[d] * p.width[d];
                t[d] = 0;
                if (cnt[d] <= 0) {
                    fill = cnt[d] < 0 ? p.g.attrs.extrapolation : 0.0f;
                    filled = true;
                }
            }
        }
        int64_t lc = lcount[xl];
        if (filled || lc < 0) {
            y[e] = filled ? fill : p.g.attrs.extrapolation;
            continue;
        }
        const int64_t *lo = loff + xl * lwidth;
        const double *lw = lwt + xl * lwidth;
        double sum = 0.0;
        for (;;) {
            double w = 1.0;
            int64_t o = 0;
#pragma unroll
            for (int d = 0; d < ENG_MAX_RANK; d++) {
                if (d < last) {
                    w *= wt[d][t[d]];
                    o += off[d][t[d]];
                }
            }
            const float *src = x + o;
            double acc = 0.0;
            for (int64_t j = 0; j < lc; j++)
                acc += lw[j] * src[lo[j]];
            sum += w * acc;
            bool done = true;
#pragma unroll
            for (int d = ENG_MAX_RANK - 1; d >= 0; d--) {
                if (d < last && done) {
                    if (++t[d] < cnt[d])
                        done = false;
                    else
                        t[d] = 0;
                }
            }
            if (done)
                break;
        }
        y[e] = (float)sum;
    }
}

/* The plan for the Resize node in c: geometry (scales or sizes from the
 * host), tables laid out, roi mapping. 0, or eng_resize_geom's errors. */
static int resize_plan_make(const eng_op_ctx_t *c, resize_plan_t *p)
{
    eng_cuda_host_view_t v;
    memset(p, 0, sizeof *p);
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_resize_geom(&v.c, &p->g)))
        return rc;
    const eng_resize_geom_t *g = &p->g;
    int64_t stride = 1;
    for (int d = g->rank - 1; d >= 0; d--) {
        p->stride[d] = stride;
        stride *= g->in[d];
    }
    for (int d = 0; d < g->rank; d++) {
        p->width[d] = eng_resize_width(&g->attrs, g->scale[d], g->in[d]);
        p->table[d] = (int64_t)p->bytes;
        p->bytes += eng_resize_table_bytes(g->out[d], p->width[d]);
    }
    /* roi lists the resized axes (opset 18's axes attribute, validated by
     * eng_resize_geom), all of them without it. */
    size_t count = 0;
    const int64_t *axes = c->opset >= 18 ? eng_attr_ints(c->node, "axes", &count) : NULL;
    for (int d = 0; d < g->rank; d++)
        p->roi_at[d] = axes ? -1 : d;
    p->n_roi_axes = axes ? (int)count : g->rank;
    for (size_t i = 0; axes && i < count; i++)
        p->roi_at[axes[i] < 0 ? axes[i] + g->rank : axes[i]] = (int)i;
    return 0;
}

static int resize_run(eng_op_ctx_t *c)
{
    resize_plan_t p;
    int rc = resize_plan_make(c, &p);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    int64_t total = eng_shape_numel(&y->shape);
    if (total == 0)
        return 0;
    if (c->scratch_bytes < p.bytes)
        return eng_op_scratch_err(c, p.bytes);
    const eng_tensor_t *roi_t = c->opset >= 11 ? eng_ctx_in(c, 1) : NULL;
    const float *roi = NULL;
    if (p.g.attrs.coord == ENG_RESIZE_TF_CROP_AND_RESIZE && roi_t && eng_shape_numel(&roi_t->shape))
        roi = (const float *)roi_t->data;
    int64_t n_coords = 0;
    for (int d = 0; d < p.g.rank; d++)
        n_coords += p.g.out[d];
    char *scratch = (char *)c->scratch;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    resize_tables<<<eng_cuda_blocks(c, n_coords), ENG_CUDA_THREADS, 0, st>>>(p, roi, scratch,
                                                                          n_coords);
    ENG_CUDA_LAUNCHED(c);
    resize_apply<<<eng_cuda_blocks(c, total), ENG_CUDA_THREADS, 0, st>>>(
        p, scratch, (const float *)c->inputs[0]->data, (float *)y->data, total);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

const eng_kernel_t eng_cuda_TopK = {.run = topk_run, .scratch_bytes = topk_scratch};
const eng_kernel_t eng_cuda_Trilu = {.run = trilu_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Resize = {.run = resize_run, .scratch_bytes = eng_resize_scratch_bytes};
const eng_kernel_t eng_cuda_Upsample = {.run = resize_run,
                                        .scratch_bytes = eng_resize_scratch_bytes};
