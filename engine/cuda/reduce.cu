/* reduce.cu -- the CUDA kernels of Reduce* and ArgMax/ArgMin (engine/ops/reduce.c
 * defines them; engine/cpu/reduce_kernels.c is the CPU reference).
 *
 * Reduce* and ArgMax/ArgMin share one reduction. The input's dims are
 * coalesced into runs of kept and reduced dims as the CPU kernel does (size-1
 * dims dropped, neighbours of one kind merged; at most four runs of each
 * kind), so output element o reads x[koff(o) + roff(r)] for r in [0, R), with
 * koff and roff the offsets of o's and r's digits in those runs; for
 * ArgMax/ArgMin the only reduced run is the axis and r is the index along
 * it. Three launch shapes:
 *  - the last run reduced (rows contiguous in memory): one warp per output
 *    when R < RED_BLOCK_MIN, else one block per output;
 *  - the last run kept: a 32 x RED_COL_Y block takes 32 consecutive outputs
 *    (coalesced loads along the kept inner run), its rows of threads split R;
 *  - either of the last two with too few outputs to fill the device: R is
 *    cut into `split` segments over gridDim.y, each block writes a partial
 *    accumulator to scratch, and a second kernel joins them per output in
 *    segment order. The split depends on the shapes only (not on the GPU),
 *    so scratch_bytes and run agree.
 * The arithmetic is the CPU's: the accumulator has the element type (float
 * sums in float; integer sums and products wrap, computed unsigned), max
 * and min propagate NaN, the identity of an empty reduction is the CPU's,
 * and Mean/L2/LogSum finish the same way (LogSumExp: see lse_op). The order of float additions differs (a
 * tree instead of a left-to-right walk), which is at least as accurate.
 * ArgMax/ArgMin reproduce the CPU's left-to-right walk exactly: ties go to
 * the first (or, with select_last_index, the last) index, a NaN is never
 * picked unless it sits at index 0, in which case the walk never leaves it.
 * Reduce* on float16 / bfloat16 runs the float operation with each element
 * read as float (a float accumulator, float partials) and the result
 * rounded once (half_in_op). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/lowp_impl.h"
#include "engine/cuda/reduce_impl.h"

/* ---- Reduce* and ArgMax/ArgMin: the operations ------------------------------ */

/* Per element type: the unsigned type integer arithmetic wraps in, and the
 * identities of max and min (bool: max is any, min is all). */
template <typename T> struct red_traits;
template <> struct red_traits<float> {
    using U = float;
    static __device__ float lowest() { return -INFINITY; }
    static __device__ float highest() { return INFINITY; }
};
template <> struct red_traits<double> {
    using U = double;
    static __device__ double lowest() { return -INFINITY; }
    static __device__ double highest() { return INFINITY; }
};
template <> struct red_traits<int32_t> {
    using U = uint32_t;
    static __device__ int32_t lowest() { return INT32_MIN; }
    static __device__ int32_t highest() { return INT32_MAX; }
};
template <> struct red_traits<int64_t> {
    using U = uint64_t;
    static __device__ int64_t lowest() { return INT64_MIN; }
    static __device__ int64_t highest() { return INT64_MAX; }
};
template <> struct red_traits<uint8_t> {
    using U = unsigned;
    static __device__ uint8_t lowest() { return 0; }
    static __device__ uint8_t highest() { return 1; }
};

template <typename T> __device__ __forceinline__ bool is_nan(T v)
{
    if constexpr (std::is_floating_point<T>::value)
        return isnan(v);
    else
        return false;
}

enum red_kind { RED_K_SUM, RED_K_SUMSQ, RED_K_ABSSUM, RED_K_PROD, RED_K_MAX, RED_K_MIN };
enum red_finish { RED_F_NONE, RED_F_MEAN, RED_F_SQRT, RED_F_LOG };

/* An operation for the reduction kernels: init (the identity), step (fold
 * element r of the reduced range into an accumulator), join (combine two
 * accumulators; associative and commutative) and finish (the output from the
 * accumulator and R). */
template <typename T, int K, int F> struct red_op {
    using In = T;
    using Acc = T;
    using Out = T;
    using U = typename red_traits<T>::U;
    static __device__ __forceinline__ Acc init()
    {
        return K == RED_K_PROD  ? (T)1
               : K == RED_K_MAX ? red_traits<T>::lowest()
               : K == RED_K_MIN ? red_traits<T>::highest()
                                : (T)0;
    }
    static __device__ __forceinline__ Acc join(Acc a, Acc b)
    {
        if constexpr (K == RED_K_SUM || K == RED_K_SUMSQ || K == RED_K_ABSSUM)
            return (T)((U)a + (U)b);
        else if constexpr (K == RED_K_PROD)
            return (T)((U)a * (U)b);
        else if constexpr (K == RED_K_MAX)
            return b > a || is_nan(b) ? b : a;
        else
            return b < a || is_nan(b) ? b : a;
    }
    static __device__ __forceinline__ Acc step(Acc a, T v, int64_t)
    {
        if constexpr (K == RED_K_SUMSQ)
            return (T)((U)a + (U)v * (U)v);
        else if constexpr (K == RED_K_ABSSUM && std::is_unsigned<T>::value)
            return (T)((U)a + (U)v);
        else if constexpr (K == RED_K_ABSSUM)
            return (T)((U)a + (v < 0 ? (U)0 - (U)v : (U)v));
        else
            return join(a, v);
    }
    static __device__ __forceinline__ Out finish(Acc a, int64_t count)
    {
        if constexpr (F == RED_F_MEAN) {
            if constexpr (std::is_floating_point<T>::value)
                return a / (T)count;
            else
                return count ? (T)(a / count) : (T)0;
        } else if constexpr (F == RED_F_SQRT) {
            if constexpr (std::is_floating_point<T>::value)
                return sqrt(a);
            else /* the wrapped sum read as U, as the CPU kernel does */
                return (T)sqrt((double)(U)a);
        } else if constexpr (F == RED_F_LOG) {
            return log(a); /* float types only (reduce.c refuses the rest) */
        } else {
            return a;
        }
    }
};

/* ArgMax/ArgMin's accumulator: the best element so far and its index along
 * the axis (-1: none yet). The same size for every T (scratch_bytes relies
 * on it). */
template <typename T> struct arg_acc {
    T v;
    int64_t i;
};
#define ARG_ACC_BYTES sizeof(arg_acc<int64_t>)

template <typename T, bool MAX, bool LAST> struct arg_op {
    using In = T;
    using Acc = arg_acc<T>;
    using Out = int64_t;
    /* Whether b ranks before a: the CPU's walk keeps index 0 when it holds
     * NaN and otherwise never picks a NaN, so a NaN candidate (only ever
     * index 0) beats everything; among numbers the larger (smaller) value,
     * then the lower (with LAST, the higher) index. */
    static __device__ __forceinline__ bool beats(const Acc &b, const Acc &a)
    {
        if (b.i < 0)
            return false;
        if (a.i < 0)
            return true;
        if (is_nan(a.v))
            return false;
        if (is_nan(b.v))
            return true;
        if (b.v != a.v)
            return MAX ? b.v > a.v : b.v < a.v;
        return LAST ? b.i > a.i : b.i < a.i;
    }
    static __device__ __forceinline__ Acc init() { return Acc{T(), -1}; }
    static __device__ __forceinline__ Acc join(Acc a, Acc b) { return beats(b, a) ? b : a; }
    static __device__ __forceinline__ Acc step(Acc a, T v, int64_t r)
    {
        if (is_nan(v) && r != 0)
            return a;
        return join(a, Acc{v, r});
    }
    static __device__ __forceinline__ Out finish(Acc a, int64_t) { return a.i < 0 ? 0 : a.i; }
};

/* ReduceLogSumExp in one pass: the accumulator is a running max m and the
 * sum s of exp(x - m), rescaled when m grows (the CPU takes the max first,
 * then the sum; the two agree to rounding). An infinite m shifts by 0, as
 * on the CPU: all -inf gives -inf, any +inf gives +inf, NaN propagates. */
template <typename T> struct lse_acc {
    T m, s;
};

template <typename T> struct lse_op {
    using In = T;
    using Acc = lse_acc<T>;
    using Out = T;
    static __device__ __forceinline__ T shift(T m) { return isinf(m) ? (T)0 : m; }
    static __device__ __forceinline__ Acc init() { return Acc{-(T)INFINITY, (T)0}; }
    static __device__ __forceinline__ Acc join(Acc a, Acc b)
    {
        if (isnan(a.m) || isnan(b.m))
            return Acc{a.m + b.m, (T)0};
        if (b.m > a.m) {
            Acc t = a;
            a = b;
            b = t;
        }
        /* a.m >= b.m: b's sum moves onto a's shift */
        if (b.s == (T)0)
            return a;
        return Acc{a.m, a.s + b.s * exp(shift(b.m) - shift(a.m))};
    }
    static __device__ __forceinline__ Acc step(Acc a, T v, int64_t)
    {
        return join(a, Acc{v, exp(v - shift(v))}); /* 1, or 0 for -inf, inf for +inf */
    }
    static __device__ __forceinline__ Out finish(Acc a, int64_t)
    {
        return isnan(a.m) ? a.m : shift(a.m) + log(a.s);
    }
};

/* Op (a float operation) on elements of the half type H: each read as
 * float, the accumulator and partials Op's, the result rounded to H. */
template <class Op, typename H> struct half_in_op {
    using In = H;
    using Acc = typename Op::Acc;
    using Out = H;
    static __device__ __forceinline__ Acc init() { return Op::init(); }
    static __device__ __forceinline__ Acc join(Acc a, Acc b) { return Op::join(a, b); }
    static __device__ __forceinline__ Acc step(Acc a, H v, int64_t r)
    {
        return Op::step(a, to_f32(v), r);
    }
    static __device__ __forceinline__ Out finish(Acc a, int64_t n)
    {
        return from_f32<H>(Op::finish(a, n));
    }
};

/* Op itself when its elements are E, else Op read from E (half). */
template <class Op, typename E>
using read_as = typename std::conditional<std::is_same<E, typename Op::In>::value, Op,
                                          half_in_op<Op, E>>::type;

/* ---- Reduce* and ArgMax/ArgMin: geometry and plan --------------------------- */

#define RED_MAX_RUNS 4          /* runs of one kind: they alternate, rank <= 8 */
#define RED_COL_Y 8             /* rows of threads in a column block (x 32) */
#define RED_BLOCK_MIN 2048      /* R from which a row takes a block, not a warp */
#define RED_TARGET_BLOCKS 1024  /* fewer blocks than this: split R */
#define RED_MAX_SPLIT 1024
#define RED_ROW_SEG_MIN 4096    /* elements of a row segment, at least */
#define RED_COL_SEG_MIN 256     /* rows of a column segment, at least */

enum red_mode { RED_ROW_WARP, RED_ROW_BLOCK, RED_COLS };

typedef struct red_geom {
    int nk, nr;                     /* kept and reduced runs, outermost first */
    int64_t ksize[RED_MAX_RUNS], kstride[RED_MAX_RUNS];
    int64_t rsize[RED_MAX_RUNS], rstride[RED_MAX_RUNS];
    int64_t n_out, n_red;           /* O outputs, R elements each */
    int64_t seg;                    /* reduced elements per segment */
    int split;                      /* segments (gridDim.y); 1: no partials */
    int mode;                       /* red_mode */
} red_geom_t;

/* Segments for `blocks` blocks of work over R elements, each segment at
 * least `seg_min` long. */
static int red_split(int64_t blocks, int64_t n_red, int64_t seg_min)
{
    if (blocks <= 0 || blocks >= RED_TARGET_BLOCKS)
        return 1; /* no output (an empty tensor), or enough blocks already */
    int64_t s = ceil_div(RED_TARGET_BLOCKS, blocks), by_len = n_red / seg_min;
    s = s < by_len ? s : by_len;
    s = s < RED_MAX_SPLIT ? s : RED_MAX_SPLIT;
    return s > 1 ? (int)s : 1;
}

/* The runs of shape s reduced along `reduced`, and the launch plan.
 * Cannot fail. */
static void red_geom_build(const eng_shape_t *s, const bool *reduced, red_geom_t *g)
{
    int64_t size[ENG_MAX_RANK];
    bool red[ENG_MAX_RANK];
    int n = 0;
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] == 1)
            continue;
        if (n > 0 && red[n - 1] == reduced[d]) {
            size[n - 1] *= s->dims[d];
        } else {
            size[n] = s->dims[d];
            red[n++] = reduced[d];
        }
    }
    memset(g, 0, sizeof *g);
    int64_t stride[ENG_MAX_RANK], st = 1;
    for (int i = n - 1; i >= 0; i--) {
        stride[i] = st;
        st *= size[i];
    }
    g->n_out = g->n_red = 1;
    for (int i = 0; i < n; i++) {
        if (red[i]) {
            g->rsize[g->nr] = size[i];
            g->rstride[g->nr++] = stride[i];
            g->n_red *= size[i];
        } else {
            g->ksize[g->nk] = size[i];
            g->kstride[g->nk++] = stride[i];
            g->n_out *= size[i];
        }
    }
    bool rows = n > 0 && red[n - 1];
    if (rows && g->n_red < RED_BLOCK_MIN) {
        g->mode = RED_ROW_WARP;
        g->split = 1;
    } else if (rows) {
        g->mode = RED_ROW_BLOCK;
        g->split = red_split(g->n_out, g->n_red, RED_ROW_SEG_MIN);
    } else {
        g->mode = RED_COLS;
        g->split = red_split(ceil_div(g->n_out, 32), g->n_red, RED_COL_SEG_MIN);
    }
    g->seg = g->split > 1 ? ceil_div(g->n_red, g->split) : g->n_red;
}

/* The offset of index i's digits over n runs (row-major). The outermost
 * digit needs no remainder; 32-bit division where it fits. */
__device__ __forceinline__ int64_t red_offset(int64_t i, int n, const int64_t *size,
                                              const int64_t *stride)
{
    int64_t off = 0;
#pragma unroll
    for (int d = RED_MAX_RUNS - 1; d >= 1; d--) {
        if (d < n) {
            int64_t q;
            if ((uint64_t)i <= UINT32_MAX && (uint64_t)size[d] <= UINT32_MAX)
                q = (int64_t)((uint32_t)i / (uint32_t)size[d]);
            else
                q = i / size[d];
            off += (i - q * size[d]) * stride[d];
            i = q;
        }
    }
    return n > 0 ? off + i * stride[0] : 0;
}

__device__ __forceinline__ int64_t red_koff(const red_geom_t &g, int64_t o)
{
    return red_offset(o, g.nk, g.ksize, g.kstride);
}

__device__ __forceinline__ int64_t red_roff(const red_geom_t &g, int64_t r)
{
    return red_offset(r, g.nr, g.rsize, g.rstride);
}

/* Folds x[base + roff(r)] for r = r0, r0 + step, ... < r1 into a, four loads
 * in flight at a time. */
template <class Op>
__device__ __forceinline__ typename Op::Acc red_fold(typename Op::Acc a,
                                                     const typename Op::In *__restrict__ xo,
                                                     const red_geom_t &g, int64_t r0, int64_t r1,
                                                     int64_t step)
{
    using In = typename Op::In;
    int64_t r = r0;
    for (; r + 3 * step < r1; r += 4 * step) {
        In v0 = xo[red_roff(g, r)], v1 = xo[red_roff(g, r + step)];
        In v2 = xo[red_roff(g, r + 2 * step)], v3 = xo[red_roff(g, r + 3 * step)];
        a = Op::step(a, v0, r);
        a = Op::step(a, v1, r + step);
        a = Op::step(a, v2, r + 2 * step);
        a = Op::step(a, v3, r + 3 * step);
    }
    for (; r < r1; r += step)
        a = Op::step(a, xo[red_roff(g, r)], r);
    return a;
}

template <class Op> __device__ __forceinline__ typename Op::Acc warp_join(typename Op::Acc a)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
        a = Op::join(a, shfl_down_any(a, d));
    return a;
}

/* The block's accumulators joined, in thread 0. sh: 32 slots of shared
 * memory, free again when it returns. */
template <class Op>
__device__ __forceinline__ typename Op::Acc block_join(typename Op::Acc a, typename Op::Acc *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    a = warp_join<Op>(a);
    if (lane == 0)
        sh[w] = a;
    __syncthreads();
    if (w == 0) {
        a = lane < nw ? sh[lane] : Op::init();
        a = warp_join<Op>(a);
    }
    __syncthreads();
    return a;
}

/* Stores output o's result, or segment s's partial when R is split. */
template <class Op>
__device__ __forceinline__ void red_store(const red_geom_t &g, typename Op::Out *y,
                                          typename Op::Acc *part, int64_t o, int s,
                                          typename Op::Acc a)
{
    if (g.split == 1)
        y[o] = Op::finish(a, g.n_red);
    else
        part[(int64_t)s * g.n_out + o] = a;
}

/* One warp per output; the reduced runs end with a contiguous one. */
template <class Op>
__global__ void red_rows_warp(const typename Op::In *__restrict__ x, typename Op::Out *__restrict__ y,
                              red_geom_t g)
{
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t n_warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t o = warp; o < g.n_out; o += n_warps) {
        typename Op::Acc a = red_fold<Op>(Op::init(), x + red_koff(g, o), g, lane, g.n_red, 32);
        a = warp_join<Op>(a);
        if (lane == 0)
            y[o] = Op::finish(a, g.n_red);
    }
}

/* One block per output and segment (blockIdx.y). */
template <class Op>
__global__ void red_rows_block(const typename Op::In *__restrict__ x,
                               typename Op::Out *__restrict__ y, typename Op::Acc *part,
                               red_geom_t g)
{
    __shared__ typename Op::Acc sh[32];
    int s = blockIdx.y;
    int64_t r0 = (int64_t)s * g.seg, r1 = r0 + g.seg < g.n_red ? r0 + g.seg : g.n_red;
    for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
        typename Op::Acc a =
            red_fold<Op>(Op::init(), x + red_koff(g, o), g, r0 + threadIdx.x, r1, blockDim.x);
        a = block_join<Op>(a, sh);
        if (threadIdx.x == 0)
            red_store<Op>(g, y, part, o, s, a);
    }
}

/* 32 consecutive outputs per block (threadIdx.x), R split over threadIdx.y
 * and segments (blockIdx.y). */
template <class Op>
__global__ void red_cols(const typename Op::In *__restrict__ x, typename Op::Out *__restrict__ y,
                         typename Op::Acc *part, red_geom_t g)
{
    __shared__ typename Op::Acc sh[RED_COL_Y][32];
    int s = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int64_t r0 = (int64_t)s * g.seg, r1 = r0 + g.seg < g.n_red ? r0 + g.seg : g.n_red;
    int64_t tiles = (g.n_out + 31) / 32;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        int64_t o = t * 32 + tx;
        typename Op::Acc a = Op::init();
        if (o < g.n_out)
            a = red_fold<Op>(a, x + red_koff(g, o), g, r0 + ty, r1, RED_COL_Y);
        sh[ty][tx] = a;
        __syncthreads();
        if (ty == 0 && o < g.n_out) {
            for (int j = 1; j < RED_COL_Y; j++)
                a = Op::join(a, sh[j][tx]);
            red_store<Op>(g, y, part, o, s, a);
        }
        __syncthreads();
    }
}

/* Joins each output's segment partials in segment order and finishes. */
template <class Op>
__global__ void red_join_parts(const typename Op::Acc *__restrict__ part,
                               typename Op::Out *__restrict__ y, red_geom_t g)
{
    ENG_CUDA_FOR(o, g.n_out)
    {
        typename Op::Acc a = part[o];
        for (int s = 1; s < g.split; s++)
            a = Op::join(a, part[(int64_t)s * g.n_out + o]);
        y[o] = Op::finish(a, g.n_red);
    }
}

/* Scratch for g's partials. */
static size_t red_part_bytes(const red_geom_t *g, size_t acc_bytes)
{
    return g->split > 1 ? (size_t)g->split * (size_t)g->n_out * acc_bytes : 0;
}

/* Queues the reduction of x into y along g. 0, or FS_EINVAL (scratch too
 * small), FS_EDEVICE (launch). */
template <class Op>
static int red_launch(eng_op_ctx_t *c, const red_geom_t &g, const void *xv, void *yv)
{
    using Acc = typename Op::Acc;
    const typename Op::In *x = (const typename Op::In *)xv;
    typename Op::Out *y = (typename Op::Out *)yv;
    if (g.n_out == 0)
        return 0;
    size_t need = red_part_bytes(&g, sizeof(Acc));
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    Acc *part = (Acc *)c->scratch;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    switch (g.mode) {
    case RED_ROW_WARP:
        red_rows_warp<Op><<<eng_cuda_grid_cap(c, ceil_div(g.n_out, RED_WARPS)), RED_THREADS, 0, st>>>(x, y, g);
        break;
    case RED_ROW_BLOCK:
        red_rows_block<Op><<<dim3(eng_cuda_grid_cap(c, g.n_out), g.split), RED_THREADS, 0, st>>>(x, y, part, g);
        break;
    default:
        red_cols<Op><<<dim3(eng_cuda_grid_cap(c, ceil_div(g.n_out, 32)), g.split), dim3(32, RED_COL_Y), 0,
                       st>>>(x, y, part, g);
        break;
    }
    ENG_CUDA_LAUNCHED(c);
    if (g.split > 1) {
        red_join_parts<Op><<<eng_cuda_blocks(c, g.n_out), ENG_CUDA_THREADS, 0, st>>>(part, y, g);
        ENG_CUDA_LAUNCHED(c);
    }
    return 0;
}

/* ---- Reduce* ---------------------------------------------------------------- */

typedef enum reduce_which {
    REDUCE_L1, REDUCE_L2, REDUCE_LOGSUM, REDUCE_LOGSUMEXP, REDUCE_MAX, REDUCE_MEAN, REDUCE_MIN,
    REDUCE_PROD, REDUCE_SUM, REDUCE_SUMSQ,
} reduce_which_t;

static reduce_which_t reduce_which(const char *op)
{
    return strcmp(op, "ReduceL1") == 0       ? REDUCE_L1
           : strcmp(op, "ReduceLogSum") == 0 ? REDUCE_LOGSUM
           : strcmp(op, "ReduceLogSumExp") == 0 ? REDUCE_LOGSUMEXP
           : strcmp(op, "ReduceL2") == 0     ? REDUCE_L2
           : strcmp(op, "ReduceMax") == 0  ? REDUCE_MAX
           : strcmp(op, "ReduceMean") == 0 ? REDUCE_MEAN
           : strcmp(op, "ReduceMin") == 0  ? REDUCE_MIN
           : strcmp(op, "ReduceProd") == 0 ? REDUCE_PROD
           : strcmp(op, "ReduceSumSquare") == 0 ? REDUCE_SUMSQ
                                                 : REDUCE_SUM;
}

/* The geometry of the Reduce* node in c. 0, or eng_reduce_axes's errors. */
static int reduce_geom(const eng_op_ctx_t *c, red_geom_t *g)
{
    eng_cuda_host_view_t v;
    eng_reduce_axes_t ax;
    int rc = eng_cuda_host_view(c, &v);
    if (rc || (rc = eng_reduce_axes(&v.c, &ax)))
        return rc;
    red_geom_build(&c->inputs[0]->shape, ax.reduced, g);
    return 0;
}

static size_t reduce_scratch(const eng_op_ctx_t *c)
{
    red_geom_t g;
    if (reduce_geom(c, &g))
        return 0; /* run reports the same error */
    /* A half input accumulates in float. */
    size_t es = eng_cuda_is_lowp(c->inputs[0]->dtype) ? sizeof(float)
                                                      : eng_dtype_size(c->inputs[0]->dtype);
    bool lse = reduce_which(c->node->op_type) == REDUCE_LOGSUMEXP;
    return red_part_bytes(&g, lse ? 2 * es : es); /* lse_acc: two elements */
}

/* The reduction w of elements of type E (default T) computed on T: E is T,
 * or a half type read as float T. */
template <typename T, typename E = T>
static int reduce_typed(eng_op_ctx_t *c, reduce_which_t w, const red_geom_t &g)
{
    const void *x = c->inputs[0]->data;
    void *y = c->outputs[0]->data;
    if constexpr (std::is_floating_point<T>::value) {
        static_assert(sizeof(lse_acc<T>) == 2 * sizeof(T), "reduce_scratch's lse_acc size");
        if (w == REDUCE_LOGSUM)
            return red_launch<read_as<red_op<T, RED_K_SUM, RED_F_LOG>, E>>(c, g, x, y);
        if (w == REDUCE_LOGSUMEXP)
            return red_launch<read_as<lse_op<T>, E>>(c, g, x, y);
    } else if (w == REDUCE_LOGSUM || w == REDUCE_LOGSUMEXP) {
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                          eng_dtype_name(c->inputs[0]->dtype));
    }
    switch (w) {
    case REDUCE_L1: return red_launch<read_as<red_op<T, RED_K_ABSSUM, RED_F_NONE>, E>>(c, g, x, y);
    case REDUCE_L2: return red_launch<read_as<red_op<T, RED_K_SUMSQ, RED_F_SQRT>, E>>(c, g, x, y);
    case REDUCE_MAX: return red_launch<read_as<red_op<T, RED_K_MAX, RED_F_NONE>, E>>(c, g, x, y);
    case REDUCE_MEAN: return red_launch<read_as<red_op<T, RED_K_SUM, RED_F_MEAN>, E>>(c, g, x, y);
    case REDUCE_MIN: return red_launch<read_as<red_op<T, RED_K_MIN, RED_F_NONE>, E>>(c, g, x, y);
    case REDUCE_PROD: return red_launch<read_as<red_op<T, RED_K_PROD, RED_F_NONE>, E>>(c, g, x, y);
    case REDUCE_SUMSQ: return red_launch<read_as<red_op<T, RED_K_SUMSQ, RED_F_NONE>, E>>(c, g, x, y);
    default: return red_launch<read_as<red_op<T, RED_K_SUM, RED_F_NONE>, E>>(c, g, x, y);
    }
}

/* Like every kernel here, it checks before it queues: on error nothing is
 * queued and the message names the node. */
static int reduce_run(eng_op_ctx_t *c)
{
    red_geom_t g;
    int rc = reduce_geom(c, &g);
    if (rc)
        return rc;
    reduce_which_t w = reduce_which(c->node->op_type);
    switch (c->inputs[0]->dtype) {
    case ENG_DT_FLOAT: return reduce_typed<float>(c, w, g);
    case ENG_DT_DOUBLE: return reduce_typed<double>(c, w, g);
    case ENG_DT_INT32: return reduce_typed<int32_t>(c, w, g);
    case ENG_DT_INT64: return reduce_typed<int64_t>(c, w, g);
    case ENG_DT_BOOL: return reduce_typed<uint8_t>(c, w, g);
    case ENG_DT_FLOAT16: return reduce_typed<float, __half>(c, w, g);
    case ENG_DT_BFLOAT16: return reduce_typed<float, __nv_bfloat16>(c, w, g);
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                          eng_dtype_name(c->inputs[0]->dtype));
    }
}

/* ---- ArgMax / ArgMin -------------------------------------------------------- */

/* The geometry of the ArgMax/ArgMin node in c: a reduction along its axis
 * alone. 0, or FS_EINVAL (axis out of range). */
static int arg_geom(const eng_op_ctx_t *c, red_geom_t *g)
{
    const eng_shape_t *xs = &c->inputs[0]->shape;
    int axis;
    int rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), xs->rank, &axis);
    if (rc)
        return rc;
    bool reduced[ENG_MAX_RANK] = {false};
    reduced[axis] = true;
    red_geom_build(xs, reduced, g);
    return 0;
}

static size_t arg_scratch(const eng_op_ctx_t *c)
{
    red_geom_t g;
    if (arg_geom(c, &g))
        return 0; /* run reports the same error */
    return red_part_bytes(&g, ARG_ACC_BYTES);
}

template <typename T> static int arg_typed(eng_op_ctx_t *c, bool is_max, bool last, const red_geom_t &g)
{
    static_assert(sizeof(arg_acc<T>) == ARG_ACC_BYTES, "arg_acc sizes differ");
    const void *x = c->inputs[0]->data;
    void *y = c->outputs[0]->data;
    if (is_max)
        return last ? red_launch<arg_op<T, true, true>>(c, g, x, y)
                    : red_launch<arg_op<T, true, false>>(c, g, x, y);
    return last ? red_launch<arg_op<T, false, true>>(c, g, x, y)
                : red_launch<arg_op<T, false, false>>(c, g, x, y);
}

static int arg_run(eng_op_ctx_t *c)
{
    red_geom_t g;
    int rc = arg_geom(c, &g);
    if (rc)
        return rc;
    bool is_max = strcmp(c->node->op_type, "ArgMax") == 0;
    bool last = eng_attr_i(c->node, "select_last_index", 0) != 0;
    switch (c->inputs[0]->dtype) {
    case ENG_DT_FLOAT: return arg_typed<float>(c, is_max, last, g);
    case ENG_DT_DOUBLE: return arg_typed<double>(c, is_max, last, g);
    case ENG_DT_INT32: return arg_typed<int32_t>(c, is_max, last, g);
    case ENG_DT_INT64: return arg_typed<int64_t>(c, is_max, last, g);
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported",
                          eng_dtype_name(c->inputs[0]->dtype));
    }
}

#define KERNEL(op, fn, scratch)                                                           \
    const eng_kernel_t eng_cuda_##op = {.run = fn, .scratch_bytes = scratch}
KERNEL(ReduceL1, reduce_run, reduce_scratch);
KERNEL(ReduceL2, reduce_run, reduce_scratch);
KERNEL(ReduceLogSum, reduce_run, reduce_scratch);
KERNEL(ReduceLogSumExp, reduce_run, reduce_scratch);
KERNEL(ReduceMax, reduce_run, reduce_scratch);
KERNEL(ReduceMean, reduce_run, reduce_scratch);
KERNEL(ReduceMin, reduce_run, reduce_scratch);
KERNEL(ReduceProd, reduce_run, reduce_scratch);
KERNEL(ReduceSum, reduce_run, reduce_scratch);
KERNEL(ReduceSumSquare, reduce_run, reduce_scratch);
KERNEL(ArgMax, arg_run, arg_scratch);
KERNEL(ArgMin, arg_run, arg_scratch);
#undef KERNEL
