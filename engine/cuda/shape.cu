/* shape.cu -- the CUDA kernels of the shape ops (engine/ops/shape.c and
 * shape_make.c define them; engine/cpu/shape_kernels.c is the CPU reference).
 *
 * These ops move bytes without looking at them, so, as on the CPU, every
 * kernel works on any fixed-size dtype by element size. Most of them are one
 * strided copy (copy_strided): the dense output, walked in row-major order,
 * reads its source through per-dim strides -- Transpose permutes them, Slice
 * scales them by the steps (negative for a reversed slice), Expand zeroes
 * them on broadcast dims, Tile views each dim as (repeat, dim) with strides
 * (0, stride), and DepthToSpace / SpaceToDepth are 6-D transposes. Before
 * launching, the copy is restated in bytes (the element becomes a last dim
 * of stride 1), dims of size 1 are dropped and dims the source walks as one
 * are merged, and the innermost contiguous run is re-cut into the widest
 * unit (16, 8, 4 or 2 bytes) that the sizes, strides and addresses allow.
 * What remains is then
 *  - one contiguous run: cudaMemcpyAsync;
 *  - a transpose (the innermost dim strided, another dim contiguous in the
 *    source): 32 x 32 tiles through shared memory, so that both the reads
 *    and the writes of a warp are coalesced;
 *  - anything else: one thread per output unit, its source offset from its
 *    index by division, in 32-bit arithmetic when every index fits.
 * Concat and Split copy each piece as a pitched 2-D copy (rows of one
 * input/output inside the rows of the whole), Gather copies rows of `inner`
 * elements widened the same way, and Pad and GatherElements work element by
 * element (Shape, Size, Constant, ConstantOfShape and Range are in
 * shape_make.cu). Every host value a kernel needs (geometry, fill values)
 * goes into its launch by value, never through an async copy from host
 * memory, so a plan captured into a CUDA graph replays correctly.
 *
 * Values that decide shapes (Slice's starts, Split's sizes, Pad's pads,
 * Range's start and delta) come from their host copies (eng_ctx_host_in);
 * Pad's constant_value input is read on the device. Data pointers are
 * assumed aligned to their element size, as every kernel assumes of its
 * typed pointers (the planner aligns buffers to 256 bytes).
 *
 * Departure from the CPU kernels: Gather, GatherElements and GatherND cannot report a
 * bad index, since the device cannot return an error without synchronising.
 * An index outside [-dim, dim) makes its output element(s) all zero bytes
 * (never a read out of bounds), where the CPU fails with FS_EINVAL. */
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/shape_impl.h"

/* Everything but the kernels has internal linkage: kernel templates named like
 * another family's (fill_kernel<float>) must not merge at link time. */
namespace {

/* A view's dims (engine/ops/shape_impl.h) plus one: the bytes of an
 * element. */
#define STRIDED_MAX_RANK (ENG_STRIDED_MAX_RANK + 1)
/* Transpose tiles: TILE x TILE elements, TILE x TILE_ROWS threads. */
#define TILE 32
#define TILE_ROWS 8
/* Index arithmetic runs in 32 bits when every index and offset stays below
 * this; the headroom keeps a grid-stride step from overflowing. */
#define NARROW_MAX ((int64_t)1 << 30)

/* --- element units and dispatch ------------------------------------------------------- */

/* The widest unit (16, 8, 4, 2, else 1 bytes) dividing every size and
 * stride OR-ed into `m` (two's complement keeps a negative stride's low
 * bits) and both addresses. */
static size_t unit_for(uint64_t m, const void *a, const void *b)
{
    m |= (uint64_t)(uintptr_t)a | (uint64_t)(uintptr_t)b;
    for (size_t w = 16; w > 1; w /= 2)
        if (m % w == 0)
            return w;
    return 1;
}

/* A grid-stride loop over [0, n) in index type I. */
#define SHAPE_FOR_(I, i, n)                                                                      \
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n);                          \
         i += (I)blockDim.x * (I)gridDim.x)

/* --- strided copies ------------------------------------------------------------------- */

/* Dense output of shape dims; element (i_0..i_{r-1}) is source unit
 * sum(i_d * strides[d]). */
struct strided_t {
    int rank;
    int64_t dims[STRIDED_MAX_RANK];
    int64_t strides[STRIDED_MAX_RANK];
};

/* The same copy as a batch of 2-D transposes: output dims k and r-1 are
 * walked in tiles, the others (batch dims, in order) per tile. */
struct tiled_t {
    int nb;
    int64_t dims[STRIDED_MAX_RANK]; /* batch dims */
    int64_t src[STRIDED_MAX_RANK];  /* their source strides */
    int64_t dst[STRIDED_MAX_RANK];  /* their (dense) output strides */
    int64_t nk, nj;                 /* sizes of dims k and r-1 */
    int64_t src_k, src_j, dst_k;    /* their strides (dst_j is 1) */
    int64_t tiles_j, tiles_k, n_tiles;
};

template <typename T, typename I>
__global__ void strided_kernel(T *__restrict__ y, const T *__restrict__ x, strided_t g, I n)
{
    using U = std::make_unsigned_t<I>;
    SHAPE_FOR_(I, i, n)
    {
        U rem = (U)i;
        I off = 0;
#pragma unroll
        for (int d = STRIDED_MAX_RANK - 1; d > 0; d--)
            if (d < g.rank) {
                U dim = (U)g.dims[d], q = rem / dim;
                off += (I)(rem - q * dim) * (I)g.strides[d];
                rem = q;
            }
        off += (I)rem * (I)g.strides[0];
        y[i] = x[off];
    }
}

template <typename T>
__global__ void tiled_kernel(T *__restrict__ y, const T *__restrict__ x, tiled_t g)
{
    __shared__ T tile[TILE][TILE + 1];
    for (int64_t b = blockIdx.x; b < g.n_tiles; b += gridDim.x) {
        int64_t t = b, j0 = (t % g.tiles_j) * TILE;
        t /= g.tiles_j;
        int64_t k0 = (t % g.tiles_k) * TILE, so = 0, yo = 0;
        t /= g.tiles_k;
#pragma unroll
        for (int d = STRIDED_MAX_RANK - 1; d >= 0; d--)
            if (d < g.nb) {
                int64_t q = t / g.dims[d], r = t - q * g.dims[d];
                so += r * g.src[d];
                yo += r * g.dst[d];
                t = q;
            }
        /* Reads: threadIdx.x walks dim k (contiguous in the source). */
        int64_t k = k0 + threadIdx.x;
        for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
            int64_t j = j0 + r;
            if (k < g.nk && j < g.nj)
                tile[r][threadIdx.x] = x[so + k * g.src_k + j * g.src_j];
        }
        __syncthreads();
        /* Writes: threadIdx.x walks dim r-1 (contiguous in the output). */
        int64_t j = j0 + threadIdx.x;
        for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
            int64_t kk = k0 + r;
            if (kk < g.nk && j < g.nj)
                y[yo + kk * g.dst_k + j] = tile[threadIdx.x][r];
        }
        __syncthreads();
    }
}

/* Output dim k < r-1 to tile with dim r-1, or -1: a transpose is worth
 * tiling when the innermost dim jumps in the source and another dim, large
 * enough to fill a tile's rows, is contiguous there. */
static int tiled_dim(const strided_t *g)
{
    int r = g->rank;
    if (r < 2 || g->strides[r - 1] == 0 || g->strides[r - 1] == 1 ||
        g->strides[r - 1] == -1 || g->dims[r - 1] < TILE / 2)
        return -1;
    for (int k = r - 2; k >= 0; k--)
        if (g->strides[k] == 1)
            return g->dims[k] >= TILE / 2 ? k : -1;
    return -1;
}

template <typename T>
static int tiled_launch(const eng_op_ctx_t *c, void *y, const void *x, const strided_t *g, int k)
{
    int r = g->rank;
    int64_t dense[STRIDED_MAX_RANK];
    dense[r - 1] = 1;
    for (int d = r - 2; d >= 0; d--)
        dense[d] = dense[d + 1] * g->dims[d + 1];
    tiled_t t;
    t.nb = 0;
    for (int d = 0; d < r - 1; d++)
        if (d != k) {
            t.dims[t.nb] = g->dims[d];
            t.src[t.nb] = g->strides[d];
            t.dst[t.nb] = dense[d];
            t.nb++;
        }
    t.nk = g->dims[k];
    t.nj = g->dims[r - 1];
    t.src_k = g->strides[k];
    t.src_j = g->strides[r - 1];
    t.dst_k = dense[k];
    t.tiles_k = (t.nk + TILE - 1) / TILE;
    t.tiles_j = (t.nj + TILE - 1) / TILE;
    t.n_tiles = t.tiles_k * t.tiles_j;
    for (int d = 0; d < t.nb; d++)
        t.n_tiles *= t.dims[d];
    /* One block per tile, up to eng_cuda_blocks' cap; blocks loop over the rest. */
    unsigned blocks = eng_cuda_blocks(c, t.n_tiles * ENG_CUDA_THREADS);
    tiled_kernel<T>
        <<<blocks, dim3(TILE, TILE_ROWS), 0, eng_cuda_ctx(c)->stream>>>((T *)y, (const T *)x, t);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

template <typename T>
static int strided_launch(const eng_op_ctx_t *c, void *y, const void *x, const strided_t *g)
{
    int k = tiled_dim(g);
    if (k >= 0)
        return tiled_launch<T>(c, y, x, g, k);
    int64_t n = 1, extent = 0;
    for (int d = 0; d < g->rank; d++) {
        n *= g->dims[d];
        extent += (g->dims[d] - 1) * (g->strides[d] < 0 ? -g->strides[d] : g->strides[d]);
    }
    unsigned blocks = eng_cuda_blocks(c, n);
    if (n <= NARROW_MAX && extent <= NARROW_MAX)
        strided_kernel<T, int32_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, *g, (int32_t)n);
    else
        strided_kernel<T, int64_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, *g, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Fills dense dst (shape dims) from src: element (i_0..i_{r-1}) comes from
 * src + sum(i_d * strides[d]) elements of es bytes. FS_EDEVICE when a CUDA
 * call fails. */
static int copy_strided(const eng_op_ctx_t *c, void *dst, const void *src, size_t es, int rank,
                        const int64_t *dims, const int64_t *strides)
{
    strided_t g;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 0)
            return 0;
        g.dims[d] = dims[d];
        g.strides[d] = strides[d] * (int64_t)es;
    }
    g.dims[rank] = (int64_t)es;
    g.strides[rank] = 1;
    g.rank = eng_strided_coalesce(rank + 1, g.dims, g.strides);
    int r = g.rank;
    size_t w = 1;
    if (r > 0 && g.strides[r - 1] == 1) {
        uint64_t m = (uint64_t)g.dims[r - 1];
        for (int d = 0; d < r - 1; d++)
            m |= (uint64_t)g.strides[d];
        w = unit_for(m, dst, src);
        g.dims[r - 1] /= (int64_t)w;
        for (int d = 0; d < r - 1; d++)
            g.strides[d] /= (int64_t)w;
        g.rank = eng_strided_coalesce(r, g.dims, g.strides);
    }
    /* Rank 0: one unit (a single element of one byte, or one widened unit). */
    if (g.rank == 0)
        return eng_cuda_copy_d2d(c, dst, src, w);
    if (g.rank == 1 && g.strides[0] == 1)
        return eng_cuda_copy_d2d(c, dst, src, (size_t)g.dims[0] * w);
    return with_unit(c, w, [&](auto t) {
        return strided_launch<typename decltype(t)::type>(c, dst, src, &g);
    });
}

/* --- views -------------------------------------------------------------------------------- */

/* Reshape, Flatten, Squeeze, Unsqueeze: the output is the input's bytes;
 * nothing to do when the planner made it share the input's buffer. */
static int view_run(eng_op_ctx_t *c)
{
    return eng_cuda_copy_d2d(c, c->outputs[0]->data, c->inputs[0]->data,
                      eng_tensor_bytes(c->outputs[0]));
}

/* --- strided ops ------------------------------------------------------------------------- */

/* Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth: one strided
 * copy of the view `view` gives (engine/ops/shape_view.c), from the
 * inputs' host copies. */
static int strided_run(eng_op_ctx_t *c, int (*view)(const eng_op_ctx_t *, eng_strided_t *))
{
    eng_cuda_host_view_t hv;
    int rc = eng_cuda_host_view(c, &hv);
    if (rc != 0)
        return rc;
    eng_strided_t v;
    if ((rc = view(&hv.c, &v)) != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    if (eng_shape_numel(&y->shape) == 0)
        return 0;
    size_t es = eng_dtype_size(x->dtype);
    return copy_strided(c, y->data, (const char *)x->data + v.offset * (int64_t)es, es, v.rank,
                        v.dims, v.strides);
}

#define STRIDED_RUN_(fn, view)                                                                  \
    static int fn(eng_op_ctx_t *c) { return strided_run(c, view); }
ENG_STRIDED_RUNS(STRIDED_RUN_)
#undef STRIDED_RUN_

/* --- Concat, Split --------------------------------------------------------------------------- */

/* Row r of y (pitch y_pitch units) gets row r of x (pitch x_pitch), width
 * units each; n = rows * width. */
template <typename T, typename I>
__global__ void rows_kernel(T *__restrict__ y, I y_pitch, const T *__restrict__ x, I x_pitch,
                            I width, I n)
{
    using U = std::make_unsigned_t<I>;
    SHAPE_FOR_(I, i, n)
    {
        I r = (I)((U)i / (U)width), col = i - r * width;
        y[r * y_pitch + col] = x[r * x_pitch + col];
    }
}

template <typename T>
static int rows_launch(const eng_op_ctx_t *c, void *y, int64_t y_pitch, const void *x,
                       int64_t x_pitch, int64_t width, int64_t rows)
{
    int64_t n = rows * width, pitch = y_pitch > x_pitch ? y_pitch : x_pitch;
    unsigned blocks = eng_cuda_blocks(c, n);
    if ((rows - 1) * pitch + width <= NARROW_MAX)
        rows_kernel<T, int32_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (int32_t)y_pitch, (const T *)x, (int32_t)x_pitch, (int32_t)width,
            (int32_t)n);
    else
        rows_kernel<T, int64_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, y_pitch, (const T *)x, x_pitch, width, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* A 2-D copy in bytes: `rows` rows of `width` bytes, from src (a row every
 * src_pitch bytes) to dst (every dst_pitch). FS_EDEVICE when a CUDA call
 * fails. */
static int copy_rows(const eng_op_ctx_t *c, void *dst, size_t dst_pitch, const void *src,
                     size_t src_pitch, size_t width, int64_t rows)
{
    if (rows == 0 || width == 0)
        return 0;
    if (rows == 1 || (dst_pitch == width && src_pitch == width))
        return eng_cuda_copy_d2d(c, dst, src, (size_t)rows * width);
    size_t w = unit_for(width | dst_pitch | src_pitch, dst, src);
    return with_unit(c, w, [&](auto t) {
        return rows_launch<typename decltype(t)::type>(c, dst, (int64_t)(dst_pitch / w), src,
                                                       (int64_t)(src_pitch / w),
                                                       (int64_t)(width / w), rows);
    });
}

static int concat_run(eng_op_ctx_t *c)
{
    eng_tensor_t *y = c->outputs[0];
    int axis;
    size_t es;
    int64_t outer, inner;
    int rc = eng_concat_layout(c, &axis, &es, &outer, &inner);
    if (rc != 0)
        return rc;
    size_t out_row = (size_t)(y->shape.dims[axis] * inner) * es, at = 0;
    for (int i = 0; i < c->n_inputs; i++) {
        const eng_tensor_t *x = c->inputs[i];
        size_t row = (size_t)(x->shape.dims[axis] * inner) * es;
        if ((rc = copy_rows(c, (char *)y->data + at, out_row, x->data, row, row, outer)) != 0)
            return rc;
        at += row;
    }
    return 0;
}

static int split_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_split_params_t p;
    int rc = eng_cuda_host_view(c, &v);
    if (rc != 0 || (rc = eng_split_params(&v.c, &p)) != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    size_t es = eng_dtype_size(x->dtype);
    int64_t outer, inner;
    eng_outer_inner(&x->shape, p.axis, &outer, &inner);
    size_t in_row = (size_t)(p.dim * inner) * es, at = 0;
    for (int k = 0; k < p.n; k++) {
        size_t row = (size_t)(eng_split_size(&p, k) * inner) * es;
        eng_tensor_t *y = c->outputs[k];
        if (y && (rc = copy_rows(c, y->data, row, (const char *)x->data + at, in_row, row,
                                 outer)) != 0)
            return rc;
        at += row;
    }
    return 0;
}

/* --- Gather, GatherElements ---------------------------------------------------------------- */

static const eng_dtype_t index_dtypes[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};

/* y (outer, n_idx, row) from x (outer, dim, row); an index outside
 * [-dim, dim) gives a row of zero units. */
template <typename T, typename I, typename IDX>
__global__ void gather_kernel(T *__restrict__ y, const T *__restrict__ x,
                              const IDX *__restrict__ idx, I row, I n_idx, I dim, I n)
{
    using U = std::make_unsigned_t<I>;
    SHAPE_FOR_(I, i, n)
    {
        U r = (U)i / (U)row, o = r / (U)n_idx;
        I col = i - (I)r * row, j = (I)r - (I)o * n_idx;
        int64_t v = (int64_t)idx[j];
        v += v < 0 ? (int64_t)dim : 0;
        y[i] = v >= 0 && v < (int64_t)dim ? x[((I)o * dim + (I)v) * row + col] : T{};
    }
}

template <typename T, typename IDX>
static int gather_launch(const eng_op_ctx_t *c, void *y, const void *x, const void *idx,
                         int64_t row, int64_t n_idx, int64_t dim, int64_t n, int64_t x_units)
{
    unsigned blocks = eng_cuda_blocks(c, n);
    if (n <= NARROW_MAX && x_units <= NARROW_MAX)
        gather_kernel<T, int32_t, IDX><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, (const IDX *)idx, (int32_t)row, (int32_t)n_idx, (int32_t)dim,
            (int32_t)n);
    else
        gather_kernel<T, int64_t, IDX><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, (const IDX *)idx, row, n_idx, dim, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* A bad index cannot fail the run here (see the file comment): its output
 * rows are zero. */
static int gather_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    eng_tensor_t *y = c->outputs[0];
    int axis;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &axis);
    if (rc != 0 || (rc = eng_op_require_dtype(c, 1, index_dtypes)) != 0)
        return rc;
    size_t es = eng_dtype_size(x->dtype);
    int64_t outer, inner, dim = x->shape.dims[axis], n_idx = eng_shape_numel(&idx->shape);
    eng_outer_inner(&x->shape, axis, &outer, &inner);
    if (eng_tensor_bytes(y) == 0)
        return 0;
    /* Rows move in the widest unit their bytes and both buffers allow. */
    size_t w = unit_for((uint64_t)inner * es, x->data, y->data);
    int64_t row = (int64_t)((size_t)inner * es / w), n = outer * n_idx * row;
    int64_t x_units = outer * dim * row;
    bool i32 = idx->dtype == ENG_DT_INT32;
    return with_unit(c, w, [&](auto t) {
        using T = typename decltype(t)::type;
        return i32 ? gather_launch<T, int32_t>(c, y->data, x->data, idx->data, row, n_idx, dim,
                                               n, x_units)
                   : gather_launch<T, int64_t>(c, y->data, x->data, idx->data, row, n_idx, dim,
                                               n, x_units);
    });
}

/* GatherElements: output position p (of the indices' shape) reads x at p
 * with p[axis] replaced by the index there. */
struct gather_elements_t {
    int rank, axis;
    int64_t idims[ENG_MAX_RANK]; /* the indices' (and output's) dims */
    int64_t xs[ENG_MAX_RANK];    /* x's strides */
    int64_t dim;                 /* x's size along axis */
};

template <typename T, typename I, typename IDX>
__global__ void gather_elements_kernel(T *__restrict__ y, const T *__restrict__ x,
                                       const IDX *__restrict__ idx, gather_elements_t g, I n)
{
    using U = std::make_unsigned_t<I>;
    SHAPE_FOR_(I, i, n)
    {
        int64_t v = (int64_t)idx[i];
        v += v < 0 ? g.dim : 0;
        bool ok = v >= 0 && v < g.dim;
        U rem = (U)i;
        I off = 0;
#pragma unroll
        for (int d = ENG_MAX_RANK - 1; d >= 0; d--)
            if (d < g.rank) {
                U dim = (U)g.idims[d], q = rem / dim;
                I p = d != g.axis ? (I)(rem - q * dim) : ok ? (I)v : 0;
                off += p * (I)g.xs[d];
                rem = q;
            }
        y[i] = ok ? x[off] : T{};
    }
}

template <typename T, typename IDX>
static int gather_elements_launch(const eng_op_ctx_t *c, void *y, const void *x, const void *idx,
                                  const gather_elements_t *g, int64_t n, bool narrow)
{
    unsigned blocks = eng_cuda_blocks(c, n);
    if (narrow)
        gather_elements_kernel<T, int32_t, IDX><<<blocks, ENG_CUDA_THREADS, 0,
                                                  eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, (const IDX *)idx, *g, (int32_t)n);
    else
        gather_elements_kernel<T, int64_t, IDX><<<blocks, ENG_CUDA_THREADS, 0,
                                                  eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, (const IDX *)idx, *g, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* A bad index cannot fail the run here (see the file comment): its output
 * element is zero. */
static int gather_elements_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    int axis, r = x->shape.rank;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), r, &axis);
    if (rc != 0 || (rc = eng_op_require_dtype(c, 1, index_dtypes)) != 0)
        return rc;
    int64_t n = eng_shape_numel(&idx->shape);
    if (n == 0)
        return 0;
    gather_elements_t g;
    g.rank = r;
    g.axis = axis;
    g.dim = x->shape.dims[axis];
    eng_shape_strides(&x->shape, g.xs);
    for (int d = 0; d < r; d++)
        g.idims[d] = idx->shape.dims[d];
    bool narrow = n <= NARROW_MAX && eng_shape_numel(&x->shape) <= NARROW_MAX;
    bool i32 = idx->dtype == ENG_DT_INT32;
    void *y = c->outputs[0]->data;
    return with_unit(c, eng_dtype_size(x->dtype), [&](auto t) {
        using T = typename decltype(t)::type;
        return i32 ? gather_elements_launch<T, int32_t>(c, y, x->data, idx->data, &g, n, narrow)
                   : gather_elements_launch<T, int64_t>(c, y, x->data, idx->data, &g, n, narrow);
    });
}

/* GatherND (engine/ops/shape_impl.h's eng_gather_nd_t, rows in units): an
 * index outside [-dim, dim) makes its output row zero units. */
struct gather_nd_t {
    int k;
    int64_t dims[ENG_MAX_RANK], strides[ENG_MAX_RANK];
    int64_t per_batch, batch_rows;
};

template <typename T, typename I>
__global__ void gather_nd_kernel(T *__restrict__ y, const T *__restrict__ x,
                                 const int64_t *__restrict__ idx, gather_nd_t g, I row, I n)
{
    using U = std::make_unsigned_t<I>;
    SHAPE_FOR_(I, i, n)
    {
        U j = (U)i / (U)row;
        I col = i - (I)j * row;
        int64_t at = (int64_t)(j / (U)g.per_batch) * g.batch_rows;
        bool ok = true;
        for (int t = 0; t < g.k; t++) {
            int64_t v = idx[(int64_t)j * g.k + t];
            v += v < 0 ? g.dims[t] : 0;
            ok = ok && v >= 0 && v < g.dims[t];
            at += v * g.strides[t];
        }
        y[i] = ok ? x[(I)at * row + col] : T{};
    }
}

/* A bad index cannot fail the run here (see the file comment): its output
 * row is zero. */
static int gather_nd_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0], *idx = c->inputs[1];
    eng_gather_nd_t p;
    int rc = eng_gather_nd_params(c, &p);
    if (rc != 0)
        return rc;
    size_t es = eng_dtype_size(x->dtype);
    if (eng_tensor_bytes(c->outputs[0]) == 0)
        return 0;
    gather_nd_t g = {p.k, {0}, {0}, p.per_batch, p.batch_rows};
    for (int t = 0; t < p.k; t++) {
        g.dims[t] = p.dims[t];
        g.strides[t] = p.strides[t];
    }
    void *y = c->outputs[0]->data;
    size_t w = unit_for((uint64_t)p.row * es, x->data, y);
    int64_t row = (int64_t)((size_t)p.row * es / w), n = p.n_rows * row;
    bool narrow = n <= NARROW_MAX && (int64_t)(eng_tensor_bytes(x) / w) <= NARROW_MAX;
    unsigned blocks = eng_cuda_blocks(c, n);
    return with_unit(c, w, [&](auto t) {
        using T = typename decltype(t)::type;
        if (narrow)
            gather_nd_kernel<T, int32_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
                (T *)y, (const T *)x->data, (const int64_t *)idx->data, g, (int32_t)row,
                (int32_t)n);
        else
            gather_nd_kernel<T, int64_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
                (T *)y, (const T *)x->data, (const int64_t *)idx->data, g, row, n);
        ENG_CUDA_LAUNCHED(c);
        return 0;
    });
}

/* --- Pad ----------------------------------------------------------------------------------- */

/* Per dim: output o reads kept input lo + (o - shift) when that is in
 * [0, kept); the mode decides outside. Negative pads crop first (lo and
 * kept), as on the CPU. */
struct pad_geom_t {
    int rank;
    int mode; /* eng_pad_mode_t */
    int64_t out[ENG_MAX_RANK];
    int64_t shift[ENG_MAX_RANK];
    int64_t lo[ENG_MAX_RANK];
    int64_t kept[ENG_MAX_RANK];
    int64_t xs[ENG_MAX_RANK];
};

/* The kept-input index that output index o of dim d reads, or -1 for the
 * constant (the CPU's pad_source). */
template <typename I> __device__ __forceinline__ I pad_source(const pad_geom_t &g, int d, I o)
{
    I k = o - (I)g.shift[d], kept = (I)g.kept[d], lo = (I)g.lo[d];
    if (k >= 0 && k < kept)
        return lo + k;
    switch (g.mode) {
    case ENG_PAD_CONSTANT:
        return -1;
    case ENG_PAD_EDGE:
        return lo + (k < 0 ? 0 : kept - 1);
    case ENG_PAD_WRAP:
        k %= kept;
        return lo + (k < 0 ? k + kept : k);
    default:
        break;
    }
    if (kept == 1)
        return lo;
    /* A non-negative remainder without forming k % period + period, which
     * could overflow 32 bits. */
    I period = 2 * (kept - 1), m = k % period;
    m += m < 0 ? period : 0;
    return lo + (m < kept ? m : period - m);
}

/* The constant is *valp when given (Pad's constant_value input, on the
 * device), else `value`. */
template <typename T, typename I>
__global__ void pad_kernel(T *__restrict__ y, const T *__restrict__ x, pad_geom_t g, T value,
                           const T *__restrict__ valp, I n)
{
    using U = std::make_unsigned_t<I>;
    T fill = valp ? *valp : value;
    SHAPE_FOR_(I, i, n)
    {
        U rem = (U)i;
        I off = 0;
        bool constant = false;
#pragma unroll
        for (int d = ENG_MAX_RANK - 1; d >= 0; d--)
            if (d < g.rank && !constant) {
                U dim = (U)g.out[d], q = rem / dim;
                I s = pad_source<I>(g, d, (I)(rem - q * dim));
                constant = s < 0;
                off += s * (I)g.xs[d];
                rem = q;
            }
        y[i] = constant ? fill : x[off];
    }
}

template <typename T>
static int pad_launch(const eng_op_ctx_t *c, void *y, const void *x, const pad_geom_t *g,
                      const unsigned char *value, const void *valp, int64_t n, bool narrow)
{
    T v;
    memcpy(&v, value, sizeof v);
    unsigned blocks = eng_cuda_blocks(c, n);
    if (narrow)
        pad_kernel<T, int32_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, *g, v, (const T *)valp, (int32_t)n);
    else
        pad_kernel<T, int64_t><<<blocks, ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(
            (T *)y, (const T *)x, *g, v, (const T *)valp, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static int pad_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_pad_params_t p;
    int rc = eng_cuda_host_view(c, &v);
    if (rc != 0 || (rc = eng_pad_params(&v.c, &p)) != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    const eng_tensor_t *cv = c->opset >= 11 ? eng_ctx_in(c, 2) : NULL;
    /* The constant: the constant_value input, read on the device where it
     * may only exist; else the attribute or zero (eng_pad_value). */
    unsigned char value[16] = {0};
    if (cv) {
        if (cv->dtype != x->dtype || eng_shape_numel(&cv->shape) != 1)
            return eng_op_err(c, FS_EINVAL,
                              "constant_value must be one %s, not %s of %lld elements",
                              eng_dtype_name(x->dtype), eng_dtype_name(cv->dtype),
                              (long long)eng_shape_numel(&cv->shape));
    } else if ((rc = eng_pad_value(&v.c, value)) != 0) {
        return rc;
    }
    size_t es = eng_dtype_size(x->dtype);
    int64_t n = eng_shape_numel(&p.out);
    void *y = c->outputs[0]->data;
    if (n == 0)
        return 0;
    if (p.out.rank == 0)
        return eng_cuda_copy_d2d(c, y, x->data, es);
    pad_geom_t g;
    g.rank = p.out.rank;
    g.mode = (int)p.mode;
    eng_shape_strides(&x->shape, g.xs);
    for (int d = 0; d < g.rank; d++) {
        g.out[d] = p.out.dims[d];
        g.lo[d] = p.begin[d] < 0 ? -p.begin[d] : 0;
        g.kept[d] = x->shape.dims[d] - g.lo[d] - (p.end[d] < 0 ? -p.end[d] : 0);
        g.shift[d] = p.begin[d] > 0 ? p.begin[d] : 0;
    }
    bool narrow = n <= NARROW_MAX && eng_shape_numel(&x->shape) <= NARROW_MAX;
    const void *valp = cv ? cv->data : NULL;
    return with_unit(c, es, [&](auto t) {
        return pad_launch<typename decltype(t)::type>(c, y, x->data, &g, value, valp, n, narrow);
    });
}

} // namespace

/* --- the kernels ------------------------------------------------------------------------- */

#define SHAPE_KERNEL_(op, fn) const eng_kernel_t eng_cuda_##op = {.run = fn, .scratch_bytes = NULL};
ENG_SHAPE_KERNEL_RUNS(SHAPE_KERNEL_)
SHAPE_KERNEL_(DepthToSpace, depth_to_space_run)
SHAPE_KERNEL_(SpaceToDepth, space_to_depth_run)
#undef SHAPE_KERNEL_
