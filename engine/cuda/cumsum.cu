/* cumsum.cu -- the CUDA kernels of CumSum and CumProd (engine/ops/reduce.c
 * defines them; engine/cpu/reduce_kernels.c is the CPU reference). Both are
 * one scan, over + from 0 or over * from 1 (scan_op).
 *
 * inner > 1 walks each line in one thread exactly as the CPU does
 * (coalesced along inner); contiguous rows are scanned by one warp (short
 * rows) or one block (long rows) per row, a tile at a time with a running
 * carry, so float sums are added in a different order than on the CPU. The
 * axis input decides no shape, so it may exist only on the device: then the
 * kernel reads it and walks every line in one thread (correct, not fast),
 * and an axis out of range -- which the CPU reports as FS_EINVAL -- leaves
 * the output unwritten, since a queued kernel cannot report it. */
#include <stdint.h>

#include "engine/cuda/reduce_impl.h"

/* ---- CumSum, CumProd ----------------------------------------------------- */

/* The scan's operation in U: a sum (identity 0) or, with PROD, a product
 * (identity 1); both associative, so the tiles may combine in any grouping. */
template <typename U, bool PROD> struct scan_op {
    static __device__ __forceinline__ U id() { return PROD ? (U)1 : (U)0; }
    static __device__ __forceinline__ U op(U a, U b) { return PROD ? a * b : a + b; }
};

#define CUMSUM_WARP_MAX 4096    /* longest contiguous row one warp scans */

/* CumSum's [outer, n, inner] view, or what it takes to find it on the
 * device when the axis is only there. */
typedef struct cumsum_geom {
    int64_t outer, n, inner;
    const void *axis;               /* device axis to resolve from; NULL: set above */
    bool axis_i64;                  /* its dtype: int64, else int32 */
    int rank;
    int64_t dims[ENG_MAX_RANK];
} cumsum_geom_t;

/* Sets g's view from its device axis, if it has one. False when that axis
 * is out of range (eng_op_axis's rule), which the host cannot report. */
__device__ __forceinline__ bool cumsum_resolve(cumsum_geom_t &g)
{
    if (!g.axis)
        return true;
    int64_t a = g.axis_i64 ? *(const int64_t *)g.axis : *(const int32_t *)g.axis;
    if (a < -(int64_t)g.rank || a >= g.rank)
        return false;
    int axis = (int)(a < 0 ? a + g.rank : a);
    g.outer = g.n = g.inner = 1;
    for (int d = 0; d < g.rank; d++)
        *(d < axis ? &g.outer : d == axis ? &g.n : &g.inner) *= g.dims[d];
    return true;
}

/* Lines x[o, :, i], one thread each, exactly as the CPU walks them (the
 * first inclusive element is x itself, not 0 + x): coalesced along inner
 * when inner > 1; also every line when the axis is only on the device. */
template <typename T, typename U, bool PROD>
__global__ void cumsum_lines(const T *__restrict__ x, T *__restrict__ y, cumsum_geom_t g,
                             bool exclusive, bool reverse)
{
    using S = scan_op<U, PROD>;
    if (!cumsum_resolve(g))
        return;
    const int64_t n = g.n, inner = g.inner;
    ENG_CUDA_FOR(line, g.outer * inner)
    {
        int64_t o = line / inner, i = line - o * inner;
        const T *xs = x + o * n * inner + i;
        T *ys = y + o * n * inner + i;
        U acc = S::id();
        for (int64_t k = 0; k < n; k++) {
            int64_t at = (reverse ? n - 1 - k : k) * inner;
            U v = (U)xs[at];
            if (exclusive) {
                ys[at] = (T)acc;
                acc = S::op(acc, v);
            } else {
                acc = k == 0 ? v : S::op(acc, v);
                ys[at] = (T)acc;
            }
        }
    }
}

/* Contiguous rows, W warps per row (W == 1: eight rows per block, W == 8:
 * one), a tile of W * 32 * ITEMS elements at a time: each thread sums its
 * ITEMS consecutive elements, the thread sums are scanned across the warp
 * and the warps, and a carry runs from tile to tile. U: the type the sums
 * are computed in (unsigned for integers, so they wrap). */
template <typename T, typename U, bool PROD, int W>
__global__ void cumsum_rows(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t n,
                            bool exclusive, bool reverse)
{
    using S = scan_op<U, PROD>;
    constexpr int ITEMS = W == 1 ? 4 : 8, TILE = W * 32 * ITEMS, GROUPS = RED_WARPS / W;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gw = warp % W;
    int t = gw * 32 + lane;
    for (int64_t row = (int64_t)blockIdx.x * GROUPS + warp / W; row < rows;
         row += (int64_t)gridDim.x * GROUPS) {
        const T *xr = x + row * n;
        T *yr = y + row * n;
        U carry = S::id();
        for (int64_t base = 0; base < n; base += TILE) {
            U v[ITEMS];
            U total = S::id();
#pragma unroll
            for (int e = 0; e < ITEMS; e++) {
                int64_t p = base + (int64_t)t * ITEMS + e;
                v[e] = p < n ? (U)xr[reverse ? n - 1 - p : p] : S::id();
                total = S::op(total, v[e]);
            }
            U inc = total;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                U up = shfl_up_any(inc, d);
                if (lane >= d)
                    inc = S::op(up, inc);
            }
            U excl = shfl_up_any(inc, 1);
            if (lane == 0)
                excl = S::id();
            U before = S::id(), tile_total = shfl_idx_any(inc, 31);
            if constexpr (W > 1) {
                __shared__ U sh[W];
                if (lane == 31)
                    sh[gw] = inc;
                __syncthreads();
                tile_total = S::id();
                for (int i = 0; i < W; i++) {
                    if (i < gw)
                        before = S::op(before, sh[i]);
                    tile_total = S::op(tile_total, sh[i]);
                }
                __syncthreads();
            }
            U acc = S::op(S::op(carry, before), excl);
#pragma unroll
            for (int e = 0; e < ITEMS; e++) {
                int64_t p = base + (int64_t)t * ITEMS + e;
                if (p >= n)
                    break;
                int64_t at = reverse ? n - 1 - p : p;
                if (exclusive) {
                    yr[at] = (T)acc;
                    acc = S::op(acc, v[e]);
                } else {
                    acc = S::op(acc, v[e]);
                    yr[at] = (T)acc;
                }
            }
            carry = S::op(carry, tile_total);
        }
    }
}

template <typename T, typename U, bool PROD>
static int cumsum_typed(eng_op_ctx_t *c, const cumsum_geom_t &g, bool exclusive, bool reverse)
{
    const T *x = (const T *)c->inputs[0]->data;
    T *y = (T *)c->outputs[0]->data;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    int64_t total = eng_shape_numel(&c->inputs[0]->shape);
    if (g.axis || g.inner > 1)
        cumsum_lines<T, U, PROD><<<eng_cuda_blocks(c, g.axis ? total : g.outer * g.inner),
                             ENG_CUDA_THREADS, 0, st>>>(x, y, g, exclusive, reverse);
    else if (g.n <= CUMSUM_WARP_MAX)
        cumsum_rows<T, U, PROD, 1><<<eng_cuda_grid_cap(c, ceil_div(g.outer, RED_WARPS)), RED_THREADS, 0, st>>>(
            x, y, g.outer, g.n, exclusive, reverse);
    else
        cumsum_rows<T, U, PROD, RED_WARPS><<<eng_cuda_grid_cap(c, g.outer), RED_THREADS, 0, st>>>(
            x, y, g.outer, g.n, exclusive, reverse);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* The axis comes from the host copy when there is one; an axis known only on
 * the device (it decides no shape, so the plan may leave it there) is read
 * by the kernel, which then walks every line in one thread. */
static int cumsum_run(eng_op_ctx_t *c)
{
    static const eng_dtype_t index_types[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};
    const eng_tensor_t *xt = c->inputs[0];
    eng_cuda_host_view_t v;
    int rc = eng_cuda_host_view(c, &v);
    if (rc)
        return rc;
    cumsum_geom_t g;
    memset(&g, 0, sizeof g);
    const eng_tensor_t *at = eng_ctx_in(&v.c, 1);
    if (at && !at->data) {
        if ((rc = eng_op_require_dtype(c, 1, index_types)))
            return rc;
        if (at->shape.rank > 1 || eng_shape_numel(&at->shape) != 1)
            return eng_op_err(c, FS_EINVAL, "the axis input must hold one value, not %lld "
                              "(rank %d)", (long long)eng_shape_numel(&at->shape), at->shape.rank);
        g.axis = c->inputs[1]->data;
        g.axis_i64 = at->dtype == ENG_DT_INT64;
        g.rank = xt->shape.rank;
        for (int d = 0; d < g.rank; d++)
            g.dims[d] = xt->shape.dims[d];
    } else {
        int axis;
        if ((rc = eng_cumsum_axis(&v.c, &axis)))
            return rc;
        eng_axis_extent(&xt->shape, axis, false, &g.outer, &g.n, &g.inner);
    }
    bool exclusive = eng_attr_i(c->node, "exclusive", 0) != 0;
    bool reverse = eng_attr_i(c->node, "reverse", 0) != 0;
    if (xt->dtype != ENG_DT_FLOAT && xt->dtype != ENG_DT_DOUBLE && xt->dtype != ENG_DT_INT32 &&
        xt->dtype != ENG_DT_INT64)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(xt->dtype));
    if (eng_shape_numel(&xt->shape) == 0)
        return 0;
    bool prod = strcmp(c->node->op_type, "CumProd") == 0;
    switch (xt->dtype) {
    case ENG_DT_FLOAT:
        return prod ? cumsum_typed<float, float, true>(c, g, exclusive, reverse)
                    : cumsum_typed<float, float, false>(c, g, exclusive, reverse);
    case ENG_DT_DOUBLE:
        return prod ? cumsum_typed<double, double, true>(c, g, exclusive, reverse)
                    : cumsum_typed<double, double, false>(c, g, exclusive, reverse);
    case ENG_DT_INT32:
        return prod ? cumsum_typed<int32_t, uint32_t, true>(c, g, exclusive, reverse)
                    : cumsum_typed<int32_t, uint32_t, false>(c, g, exclusive, reverse);
    default:
        return prod ? cumsum_typed<int64_t, uint64_t, true>(c, g, exclusive, reverse)
                    : cumsum_typed<int64_t, uint64_t, false>(c, g, exclusive, reverse);
    }
}

const eng_kernel_t eng_cuda_CumSum = {.run = cumsum_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_CumProd = {.run = cumsum_run, .scratch_bytes = NULL};
