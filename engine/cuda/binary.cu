/* binary.cu -- the CUDA kernels of the binary ops (engine/ops/binary.c defines them;
 * engine/cpu/binary_kernels.c is the CPU reference): arithmetic, comparisons,
 * logic, Pow, Mod, PRelu, Where, the variadic Max/Min/Mean/Sum, and the
 * bitwise And/Or/Xor and BitShift.
 *
 * The host lays the inputs over the output's shape as the CPU does (stride 0
 * on broadcast dims, dims of size 1 dropped, neighbours contiguous in every
 * operand merged), so same-shape operands collapse to one flat dim, a scalar
 * operand to stride 0, a bias along the last dim to [rows, cols] with strides
 * (0, 1), and only true broadcasting keeps more dims. One grid-stride kernel
 * per op and dtype then walks the output's flat index; a thread turns it into
 * each input's offset by dividing through the collapsed dims, innermost
 * first (no division at all for one dim), with multiply-shift division by
 * invariant integers when every index fits in 31 bits, else plain 64-bit
 * division.
 *
 * Vector path: each thread computes 16 bytes' worth of the widest operand
 * type (4 floats, 2 int64s, ...): inputs contiguous along the innermost dim
 * are loaded as vectors, inputs with stride 0 there (a scalar, a
 * per-channel operand) as one value. It runs when the output and the
 * contiguous inputs are aligned for their vectors, their outer strides are
 * multiples of the width, and so is the innermost dim -- or there is only
 * one dim, whose last n % width elements then go one by one. So the common
 * cases (same shape, scalar operand, bias along the last dim, per-channel
 * operand) run with 128-bit accesses on the output and the full inputs.
 *
 * A thread reads every operand of its elements before writing them and
 * writes nothing else, so an output that shares the memory of an input of
 * its own shape (in place: input 0, Where's X) is safe. The variadic ops fold their inputs pairwise into the
 * output, as the CPU does (Mean divides in the last pass: the same sum
 * rounded the same way, then the same division).
 *
 * float16 and bfloat16 run the float functors through half_bin (each
 * element loaded to float, the result rounded once with engine/half.h's
 * conversions): per element the bits of the widening fallback on this
 * device, 8 halves a thread on the vector path. Sum and Mean take them
 * only as far as one pass (eng_binary_sum_native): the CPU's rule.
 *
 * Formulas, dtypes and errors are the CPU kernels': integer arithmetic wraps,
 * integer division and modulo by 0 give 0, INT_MIN / -1 wraps, Max/Min
 * propagate NaN, Mod is Python's (fmod=0) or C's (fmod=1), Pow of float by
 * float squares for an exponent of 2 and otherwise calls powf (CUDA's, not
 * glibc's: a few ulp apart), every other Pow pairing goes through double and
 * integer results saturate. Before opset 7 input 1 is reshaped by
 * eng_binary_legacy_ctx (engine/ops/binary_impl.h), as for the CPU. */
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "engine/cuda/dtype_impl.h"
#include "engine/ops/binary_impl.h"

namespace {

constexpr int BC_MAX_IN = ENG_BINARY_MAX_OPERANDS - 1; /* Where */

/* --- dtypes -------------------------------------------------------------------------- */

/* The CPU's EW_FLOAT_TYPES, and EW_SINT_TYPES with EW_UINT_TYPES; the lists
 * with float16 and bfloat16 are those of the ops that take them. */
using float_types = types<float, double, f16_t, bf16_t>;
using int_types = types<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using prelu_types = types<float, double, f16_t, bf16_t, int32_t, int64_t>;
using numeric_half_types = types_cat_t<numeric_types, half_types>;
using numeric_bool_types = types_cat_t<numeric_half_types, types<bool_t>>;

/* --- broadcasting, on the host ------------------------------------------------------- */

/* The output's shape with the inputs laid over it, collapsed. */
struct bc_shape {
    int rank;                                /* >= 1 */
    int64_t dims[ENG_MAX_RANK];
    int64_t stride[BC_MAX_IN][ENG_MAX_RANK]; /* each input's, in elements; 0: broadcast */
};

/* Lays the inputs over y's shape and collapses dims (eng_binary_bcast, as
 * the CPU does), keeping the inputs' strides. 0, or FS_EINVAL when an input
 * does not broadcast to y or has an unsized dtype; *l is then undefined. */
int bc_setup(const eng_op_ctx_t *c, const eng_tensor_t *y, const eng_tensor_t *const *in,
             int n_in, bc_shape *l)
{
    eng_binary_bcast_t b;
    int rc = eng_binary_bcast(c, y, in, n_in, &b);
    if (rc)
        return rc;
    l->rank = b.rank;
    for (int d = 0; d < b.rank; d++)
        l->dims[d] = b.dims[d];
    for (int k = 0; k < n_in; k++)
        for (int d = 0; d < b.rank; d++)
            l->stride[k][d] = b.stride[k + 1][d];
    return 0;
}

/* --- broadcasting, on the device ----------------------------------------------------- */

/* Division by an invariant divisor. For 32-bit indices: multiply-shift
 * (Granlund and Montgomery, as in PyTorch's IntDivider), exact for
 * dividends and divisors up to INT32_MAX. */
template <typename Idx> struct divider;
template <> struct divider<uint32_t> {
    uint32_t d, m, s;
    void init(int64_t v)
    {
        d = (uint32_t)v;
        for (s = 0; s < 31 && (1u << s) < d; s++)
            ;
        const uint64_t one = 1;
        m = (uint32_t)(((one << 32) * ((one << s) - d)) / d + 1);
    }
    __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};
template <> struct divider<int64_t> {
    int64_t d;
    void init(int64_t v) { d = v; }
    __device__ int64_t div(int64_t n) const { return n / d; }
};

/* A bc_shape for the kernels: a kernel parameter, read with constant
 * indices only (the loops over dims and inputs are unrolled). */
template <typename Idx, int NIN> struct bc_meta {
    int rank;
    bool contig[NIN]; /* innermost stride 1: loaded as vectors on the vector path */
    divider<Idx> dims[ENG_MAX_RANK];
    Idx stride[NIN][ENG_MAX_RANK];
};

/* Elements per thread on the vector path: 16 bytes of the widest type. */
template <typename... T> __host__ __device__ constexpr int bc_width()
{
    size_t w = 1;
    ((w = sizeof(T) > w ? sizeof(T) : w), ...);
    return (int)(16 / w);
}

/* Each input's offset for output element e. */
template <typename Idx, int NIN>
__device__ void bc_offsets(const bc_meta<Idx, NIN> &m, Idx e, Idx (&off)[NIN])
{
#pragma unroll
    for (int k = 0; k < NIN; k++)
        off[k] = 0;
#pragma unroll
    for (int d = ENG_MAX_RANK - 1; d > 0; d--) {
        if (d < m.rank) {
            const Idx q = m.dims[d].div(e), r = e - q * m.dims[d].d;
#pragma unroll
            for (int k = 0; k < NIN; k++)
                off[k] += r * m.stride[k][d];
            e = q;
        }
    }
#pragma unroll
    for (int k = 0; k < NIN; k++)
        off[k] += e * m.stride[k][0];
}

/* N values of one input at off: N consecutive ones where it is contiguous
 * (aligned, on the vector path), else one repeated. */
template <int N, typename T, typename Idx>
__device__ void bc_load(const T *p, Idx off, bool contig, T (&v)[N])
{
    if constexpr (N > 1) {
        if (contig) {
            const vec_t<T, N> t = *reinterpret_cast<const vec_t<T, N> *>(p + off);
#pragma unroll
            for (int k = 0; k < N; k++)
                v[k] = t.v[k];
            return;
        }
    }
    const T s = p[off];
#pragma unroll
    for (int k = 0; k < N; k++)
        v[k] = s;
}

template <int N, typename T> __device__ void bc_store(T *p, const T (&v)[N])
{
    if constexpr (N > 1) {
        vec_t<T, N> t;
#pragma unroll
        for (int k = 0; k < N; k++)
            t.v[k] = v[k];
        *reinterpret_cast<vec_t<T, N> *>(p) = t;
    } else {
        p[0] = v[0];
    }
}

/* y = op(a, b) over n output elements, N at a time (then the tail one by one). */
template <int N, typename Op, typename Idx>
__device__ void bc2_body(typename Op::TO *y, const typename Op::TA *a, const typename Op::TB *b,
                         const bc_meta<Idx, 2> &m, Idx n, const Op &op)
{
    const Idx nv = n / N, step = (Idx)blockDim.x * gridDim.x;
    const Idx tid = (Idx)blockIdx.x * blockDim.x + threadIdx.x;
    for (Idx v = tid; v < nv; v += step) {
        const Idx e = v * N;
        Idx off[2];
        bc_offsets(m, e, off);
        typename Op::TA av[N];
        typename Op::TB bv[N];
        bc_load<N>(a, off[0], m.contig[0], av);
        bc_load<N>(b, off[1], m.contig[1], bv);
        typename Op::TO r[N];
#pragma unroll
        for (int k = 0; k < N; k++)
            r[k] = op(av[k], bv[k]);
        bc_store<N>(y + e, r);
    }
    if constexpr (N > 1) {
        const Idx e = nv * N + tid;
        if (e < n) {
            Idx off[2];
            bc_offsets(m, e, off);
            y[e] = op(a[off[0]], b[off[1]]);
        }
    }
}

/* The vector path only with 32-bit indices (beyond, every tensor takes the
 * plain one). */
template <typename Op, typename Idx>
__global__ void bc2_kernel(typename Op::TO *y, const typename Op::TA *a,
                           const typename Op::TB *b, bc_meta<Idx, 2> m, Idx n, bool vec, Op op)
{
    constexpr int N = bc_width<typename Op::TO, typename Op::TA, typename Op::TB>();
    if constexpr (N > 1 && std::is_same<Idx, uint32_t>::value) {
        if (vec) {
            bc2_body<N>(y, a, b, m, n, op);
            return;
        }
    }
    bc2_body<1>(y, a, b, m, n, op);
}

/* y = op(a, b, c): Where's three inputs. */
template <int N, typename Op, typename Idx>
__device__ void bc3_body(typename Op::TO *y, const typename Op::TA *a, const typename Op::TB *b,
                         const typename Op::TC *c, const bc_meta<Idx, 3> &m, Idx n, const Op &op)
{
    const Idx nv = n / N, step = (Idx)blockDim.x * gridDim.x;
    const Idx tid = (Idx)blockIdx.x * blockDim.x + threadIdx.x;
    for (Idx v = tid; v < nv; v += step) {
        const Idx e = v * N;
        Idx off[3];
        bc_offsets(m, e, off);
        typename Op::TA av[N];
        typename Op::TB bv[N];
        typename Op::TC cv[N];
        bc_load<N>(a, off[0], m.contig[0], av);
        bc_load<N>(b, off[1], m.contig[1], bv);
        bc_load<N>(c, off[2], m.contig[2], cv);
        typename Op::TO r[N];
#pragma unroll
        for (int k = 0; k < N; k++)
            r[k] = op(av[k], bv[k], cv[k]);
        bc_store<N>(y + e, r);
    }
    if constexpr (N > 1) {
        const Idx e = nv * N + tid;
        if (e < n) {
            Idx off[3];
            bc_offsets(m, e, off);
            y[e] = op(a[off[0]], b[off[1]], c[off[2]]);
        }
    }
}

template <typename Op, typename Idx>
__global__ void bc3_kernel(typename Op::TO *y, const typename Op::TA *a,
                           const typename Op::TB *b, const typename Op::TC *c,
                           bc_meta<Idx, 3> m, Idx n, bool vec, Op op)
{
    constexpr int N =
        bc_width<typename Op::TO, typename Op::TA, typename Op::TB, typename Op::TC>();
    if constexpr (N > 1 && std::is_same<Idx, uint32_t>::value) {
        if (vec) {
            bc3_body<N>(y, a, b, c, m, n, op);
            return;
        }
    }
    bc3_body<1>(y, a, b, c, m, n, op);
}

/* Fills *m from l; returns whether the vector path of `width` elements may
 * run: the output (element size out_es) and each input contiguous along the
 * innermost dim (element sizes es) aligned for it, their outer strides
 * multiples of it, and the innermost dim a multiple of it unless it is the
 * only one. */
template <typename Idx, int NIN>
bool bc_meta_fill(const bc_shape &l, const void *const *in, const size_t *es, const void *out,
                  size_t out_es, int width, bc_meta<Idx, NIN> *m)
{
    *m = {};
    m->rank = l.rank;
    const int last = l.rank - 1;
    bool vec = width > 1 && (l.rank == 1 || l.dims[last] % width == 0) &&
               (uintptr_t)out % (width * out_es) == 0;
    for (int d = 0; d < ENG_MAX_RANK; d++)
        m->dims[d].init(d < l.rank ? l.dims[d] : 1);
    for (int k = 0; k < NIN; k++) {
        for (int d = 0; d < l.rank; d++)
            m->stride[k][d] = (Idx)l.stride[k][d];
        m->contig[k] = l.stride[k][last] == 1;
        if (!m->contig[k])
            continue;
        vec = vec && (uintptr_t)in[k] % (width * es[k]) == 0;
        for (int d = 0; d < last; d++)
            vec = vec && l.stride[k][d] % width == 0;
    }
    return vec;
}

/* Queues y = op(a, b) with a and b broadcast to y's shape. 0, FS_EINVAL
 * (shapes; nothing queued) or FS_EDEVICE. */
template <typename Op>
int bc2_launch(const eng_op_ctx_t *c, eng_tensor_t *y, const eng_tensor_t *a,
               const eng_tensor_t *b, const Op &op)
{
    using TO = typename Op::TO;
    using TA = typename Op::TA;
    using TB = typename Op::TB;
    constexpr int N = bc_width<TO, TA, TB>();
    const eng_tensor_t *in[2] = {a, b};
    bc_shape l;
    int rc = bc_setup(c, y, in, 2, &l);
    const int64_t n = eng_shape_numel(&y->shape);
    if (rc || n == 0)
        return rc;
    const void *ptr[2] = {a->data, b->data};
    const size_t es[2] = {sizeof(TA), sizeof(TB)};
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    if (n <= INT32_MAX) {
        bc_meta<uint32_t, 2> m;
        const bool vec = bc_meta_fill(l, ptr, es, y->data, sizeof(TO), N, &m);
        bc2_kernel<Op, uint32_t><<<eng_cuda_blocks(c, vec ? (n + N - 1) / N : n),
                                   ENG_CUDA_THREADS, 0, s>>>(
            (TO *)y->data, (const TA *)a->data, (const TB *)b->data, m, (uint32_t)n, vec, op);
    } else {
        bc_meta<int64_t, 2> m;
        bc_meta_fill(l, ptr, es, y->data, sizeof(TO), 1, &m);
        bc2_kernel<Op, int64_t><<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, s>>>(
            (TO *)y->data, (const TA *)a->data, (const TB *)b->data, m, n, false, op);
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Queues y = op(a, b, cc), all three broadcast to y's shape. As bc2_launch. */
template <typename Op>
int bc3_launch(const eng_op_ctx_t *c, eng_tensor_t *y, const eng_tensor_t *a,
               const eng_tensor_t *b, const eng_tensor_t *cc, const Op &op)
{
    using TO = typename Op::TO;
    using TA = typename Op::TA;
    using TB = typename Op::TB;
    using TC = typename Op::TC;
    constexpr int N = bc_width<TO, TA, TB, TC>();
    const eng_tensor_t *in[3] = {a, b, cc};
    bc_shape l;
    int rc = bc_setup(c, y, in, 3, &l);
    const int64_t n = eng_shape_numel(&y->shape);
    if (rc || n == 0)
        return rc;
    const void *ptr[3] = {a->data, b->data, cc->data};
    const size_t es[3] = {sizeof(TA), sizeof(TB), sizeof(TC)};
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    if (n <= INT32_MAX) {
        bc_meta<uint32_t, 3> m;
        const bool vec = bc_meta_fill(l, ptr, es, y->data, sizeof(TO), N, &m);
        bc3_kernel<Op, uint32_t><<<eng_cuda_blocks(c, vec ? (n + N - 1) / N : n),
                                   ENG_CUDA_THREADS, 0, s>>>(
            (TO *)y->data, (const TA *)a->data, (const TB *)b->data, (const TC *)cc->data, m,
            (uint32_t)n, vec, op);
    } else {
        bc_meta<int64_t, 3> m;
        bc_meta_fill(l, ptr, es, y->data, sizeof(TO), 1, &m);
        bc3_kernel<Op, int64_t><<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, s>>>(
            (TO *)y->data, (const TA *)a->data, (const TB *)b->data, (const TC *)cc->data, m, n,
            false, op);
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* A float functor on half H (dtype_impl.h's half_fn), as bc2_kernel takes
 * it. */
template <typename H, typename Op> struct half_bin : half_fn<H, Op> {
    using TA = H;
    using TB = H;
    using TO = half_result_t<H, typename Op::TO>;
};

/* bc2_launch for inputs of dtype T: op itself, or a float functor on a
 * half T through half_bin. */
template <typename T, typename Op>
int bc2_launch_as(const eng_op_ctx_t *c, eng_tensor_t *y, const eng_tensor_t *a,
                  const eng_tensor_t *b, const Op &op)
{
    if constexpr (is_half_v<T> && std::is_same<typename Op::TA, float>::value)
        return bc2_launch(c, y, a, b, half_bin<T, Op>{{op}});
    else
        return bc2_launch(c, y, a, b, op);
}

/* --- ops ----------------------------------------------------------------------------- */

/* An op of two T giving TR. */
template <typename T, typename TR> struct bin_op {
    using TA = T;
    using TB = T;
    using TO = TR;
};

template <typename T> struct add_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const { return (T)((wrap_t<T>)a + (wrap_t<T>)b); }
};
template <> struct add_op<float> : bin_op<float, float> {
    __device__ float operator()(float a, float b) const { return a + b; }
};
template <> struct add_op<double> : bin_op<double, double> {
    __device__ double operator()(double a, double b) const { return a + b; }
};

template <typename T> struct sub_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return a - b;
        else
            return (T)((wrap_t<T>)a - (wrap_t<T>)b);
    }
};

template <typename T> struct mul_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return a * b;
        else
            return (T)((wrap_t<T>)a * (wrap_t<T>)b);
    }
};

/* Integer division by 0 gives 0; INT_MIN / -1 wraps. */
template <typename T> struct div_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return a / b;
        else if constexpr (is_sint_v<T>)
            return b == 0 ? (T)0 : b == -1 ? (T)(0 - (wrap_t<T>)a) : (T)(a / b);
        else
            return b == 0 ? (T)0 : (T)(a / b);
    }
};

/* Max and Min propagate NaN (as numpy's maximum does). */
template <typename T> struct max_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return (a > b || isnan(a)) ? a : b;
        else
            return a > b ? a : b;
    }
};

template <typename T> struct min_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return (a < b || isnan(a)) ? a : b;
        else
            return a < b ? a : b;
    }
};

/* Mean's last pass: the running sum plus the last input, over the count. */
template <typename T> struct mean_last_op : bin_op<T, T> {
    T count;
    __device__ T operator()(T a, T b) const { return (a + b) / count; }
};

/* Python's modulo (sign of the divisor); by 0 (and -1, where INT_MIN % -1
 * overflows) it gives 0. Integer types only. */
template <typename T> struct mod_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_sint_v<T>) {
            if (b == 0 || b == -1)
                return 0;
            const T r = (T)(a % b);
            return r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;
        } else {
            return b == 0 ? (T)0 : (T)(a % b);
        }
    }
};

/* C's remainder (sign of the dividend); unsigned remainders agree with mod_op. */
template <typename T> struct fmod_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return fmod(a, b);
        else if constexpr (is_sint_v<T>)
            return b == 0 || b == -1 ? (T)0 : (T)(a % b);
        else
            return b == 0 ? (T)0 : (T)(a % b);
    }
};

#define COMPARE_OP(name, EXPR)                                                           \
    template <typename T> struct name : bin_op<T, uint8_t> {                             \
        __device__ uint8_t operator()(T a, T b) const { return (EXPR); }                 \
    };
COMPARE_OP(eq_op, a == b)
COMPARE_OP(gt_op, a > b)
COMPARE_OP(ge_op, a >= b)
COMPARE_OP(lt_op, a < b)
COMPARE_OP(le_op, a <= b)
#undef COMPARE_OP

#define BOOL_OP(name, EXPR)                                                              \
    struct name : bin_op<uint8_t, uint8_t> {                                             \
        __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return (EXPR); }     \
    };
BOOL_OP(and_op, (a != 0) & (b != 0))
BOOL_OP(or_op, (a != 0) | (b != 0))
BOOL_OP(xor_op, (a != 0) ^ (b != 0))
BOOL_OP(eq_bool_op, (a != 0) == (b != 0))
#undef BOOL_OP

/* Bitwise ops on the integer types; shifts (unsigned types) by the width or
 * more give 0, as on the CPU. */
#define BITS_OP(name, EXPR)                                                              \
    template <typename T> struct name : bin_op<T, T> {                                   \
        __device__ T operator()(T a, T b) const { return (T)(EXPR); }                   \
    };
BITS_OP(band_op, a & b)
BITS_OP(bor_op, a | b)
BITS_OP(bxor_op, a ^ b)
BITS_OP(shl_op, b >= 8 * sizeof(T) ? (wrap_t<T>)0 : (wrap_t<T>)a << b)
BITS_OP(shr_op, b >= 8 * sizeof(T) ? (T)0 : (T)(a >> b))
#undef BITS_OP

/* pos + slope * neg, as the CPU writes it (NaN and -0 come out as it does). */
template <typename T> struct prelu_op : bin_op<T, T> {
    __device__ T operator()(T a, T b) const
    {
        if constexpr (is_float_v<T>)
            return (a < 0 ? (T)0 : a) + b * (a < 0 ? a : (T)-0.0);
        else
            return a < 0 ? (T)((wrap_t<T>)a * (wrap_t<T>)b) : a;
    }
};

/* float ^ float: x^2 as x * x (the CPU does so for a broadcast exponent of 2). */
struct pow_f32_op : bin_op<float, float> {
    __device__ float operator()(float a, float b) const { return b == 2.0f ? a * a : powf(a, b); }
};

struct pow_f64_op : bin_op<double, double> {
    __device__ double operator()(double a, double b) const { return pow(a, b); }
};

/* x^n for a whole n in [0, 64] by squaring: exact while the result is an
 * integer below 2^53, which is where the CPU's correctly rounded glibc pow
 * is exact too (CUDA's pow may be 1-2 ulp off, and 2.9999999999999996
 * truncates to 2 where the CPU gives 3). */
__device__ inline double pow_whole(double x, double y)
{
    if (!(y >= 0.0 && y <= 64.0 && y == floor(y) && x == floor(x)))
        return pow(x, y);
    double r = 1.0, p = x;
    for (unsigned n = (unsigned)y; n; n >>= 1, p *= p)
        if (n & 1u)
            r *= p;
    return fabs(r) < 9007199254740992.0 ? r : pow(x, y);
}

/* Every other pairing through double; integer results saturate (NaN: 0). */
template <typename A, typename B> struct pow_mixed_op {
    using TA = A;
    using TB = B;
    using TO = A;
    __device__ A operator()(A a, B b) const
    {
        const double v = pow_whole((double)a, (double)b);
        if constexpr (is_float_v<A>) {
            return (A)v;
        } else if constexpr (sizeof(A) == 4) {
            return isnan(v) ? 0 : v <= INT32_MIN ? INT32_MIN : v >= INT32_MAX ? INT32_MAX
                                                                                : (int32_t)v;
        } else {
            return isnan(v) ? 0 : v <= (double)INT64_MIN ? INT64_MIN
                                : v >= (double)INT64_MAX ? INT64_MAX : (int64_t)v;
        }
    }
};

/* Selection by element size only: it moves bytes. */
template <typename U> struct where_op {
    using TA = uint8_t;
    using TB = U;
    using TC = U;
    using TO = U;
    __device__ U operator()(uint8_t cond, U x, U y) const { return cond ? x : y; }
};

/* --- run functions ------------------------------------------------------------------- */

int dtype_err(const eng_op_ctx_t *c, eng_dtype_t dt)
{
    return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(dt));
}

/* Two inputs of one dtype from `list` through make(T{})'s functor (for a
 * half T, make(T{}) may give a float functor: bc2_launch_as). 0,
 * FS_EINVAL, FS_ENOTSUP or FS_EDEVICE; nothing is queued on error. */
template <typename List, typename Make>
int binary_run(eng_op_ctx_t *oc, List list, Make make, eng_dtype_t out_dt)
{
    eng_binary_legacy_t lg;
    int rc = eng_binary_legacy_io(oc, &lg, out_dt);
    if (rc)
        return rc;
    const eng_op_ctx_t *c = &lg.ctx;
    rc = dispatch(c->inputs[0]->dtype, list, [&](auto t) {
        return bc2_launch_as<decltype(t)>(c, c->outputs[0], c->inputs[0], c->inputs[1], make(t));
    });
    return rc == DISPATCH_NONE ? dtype_err(c, c->inputs[0]->dtype) : rc;
}

#define BINARY_KERNEL(op, list, OP, out_dt)                                               \
    int op##_run(eng_op_ctx_t *c)                                                        \
    {                                                                                    \
        return binary_run(                                                               \
            c, list{}, [](auto t) { return OP<compute_t<decltype(t)>>{}; }, out_dt);        \
    }

BINARY_KERNEL(Add, numeric_half_types, add_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(Sub, numeric_half_types, sub_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(Mul, numeric_half_types, mul_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(Div, numeric_half_types, div_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(Greater, numeric_half_types, gt_op, ENG_DT_BOOL)
BINARY_KERNEL(GreaterOrEqual, numeric_half_types, ge_op, ENG_DT_BOOL)
BINARY_KERNEL(Less, numeric_half_types, lt_op, ENG_DT_BOOL)
BINARY_KERNEL(LessOrEqual, numeric_half_types, le_op, ENG_DT_BOOL)
BINARY_KERNEL(PRelu, prelu_types, prelu_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseAnd, int_types, band_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseOr, int_types, bor_op, ENG_DT_UNDEFINED)
BINARY_KERNEL(BitwiseXor, int_types, bxor_op, ENG_DT_UNDEFINED)
#undef BINARY_KERNEL

using uint_types = types<uint8_t, uint16_t, uint32_t, uint64_t>;

int bitshift_run(eng_op_ctx_t *c)
{
    bool left;
    int rc = eng_binary_shift_left(c->node, &left);
    if (rc)
        return rc;
    if (left)
        return binary_run(c, uint_types{}, [](auto t) { return shl_op<decltype(t)>{}; },
                          ENG_DT_UNDEFINED);
    return binary_run(c, uint_types{}, [](auto t) { return shr_op<decltype(t)>{}; },
                      ENG_DT_UNDEFINED);
}

#define BOOL_KERNEL(op, OP)                                                              \
    int op##_run(eng_op_ctx_t *c)                                                        \
    {                                                                                    \
        return binary_run(c, types<bool_t>{}, [](bool_t) { return OP{}; }, ENG_DT_BOOL); \
    }
BOOL_KERNEL(And, and_op)
BOOL_KERNEL(Or, or_op)
BOOL_KERNEL(Xor, xor_op)
#undef BOOL_KERNEL

int equal_run(eng_op_ctx_t *c)
{
    return binary_run(c, numeric_bool_types{}, [](auto t) {
        using T = decltype(t);
        if constexpr (std::is_same<T, bool_t>::value)
            return eq_bool_op{};
        else
            return eq_op<compute_t<T>>{};
    }, ENG_DT_BOOL);
}

int mod_run(eng_op_ctx_t *c)
{
    const int64_t fm = eng_attr_i(c->node, "fmod", 0);
    const eng_tensor_t *a = eng_ctx_in(c, 0);
    if (fm == 0 && a && (a->dtype == ENG_DT_FLOAT || a->dtype == ENG_DT_DOUBLE ||
                         a->dtype == ENG_DT_FLOAT16 || a->dtype == ENG_DT_BFLOAT16))
        return eng_op_err(c, FS_EINVAL, "fmod must be 1 for dtype %s", eng_dtype_name(a->dtype));
    if (fm)
        return binary_run(
            c, numeric_half_types{}, [](auto t) { return fmod_op<compute_t<decltype(t)>>{}; },
            ENG_DT_UNDEFINED);
    return binary_run(c, int_types{}, [](auto t) { return mod_op<decltype(t)>{}; },
                      ENG_DT_UNDEFINED);
}

/* Base float, double, int32 or int64 and exponent any numeric type, or
 * base and exponent of one half dtype (float's functor through half_bin);
 * the output has the base's. */
int pow_run(eng_op_ctx_t *oc)
{
    eng_binary_legacy_t lg;
    int rc = eng_binary_legacy_ctx(oc, &lg);
    if (rc)
        return rc;
    const eng_op_ctx_t *c = &lg.ctx;
    const eng_tensor_t *a = eng_ctx_in(c, 0), *b = eng_ctx_in(c, 1);
    eng_tensor_t *y = c->n_outputs > 0 ? c->outputs[0] : NULL;
    if (!a || !b || !y)
        return eng_op_err(c, FS_EINVAL, "an input or the output is missing");
    rc = DISPATCH_NONE;
    if (y->dtype == a->dtype && b->dtype == a->dtype)
        rc = dispatch(a->dtype, half_types{}, [&](auto h) {
            return bc2_launch_as<decltype(h)>(c, y, a, b, pow_f32_op{});
        });
    if (rc == DISPATCH_NONE && y->dtype == a->dtype)
        rc = dispatch(a->dtype, types<float, double, int32_t, int64_t>{}, [&](auto ta) {
            return dispatch(b->dtype, numeric_types{}, [&](auto tb) {
                using A = decltype(ta);
                using B = decltype(tb);
                if constexpr (std::is_same<A, float>::value && std::is_same<B, float>::value)
                    return bc2_launch(c, y, a, b, pow_f32_op{});
                else if constexpr (std::is_same<A, double>::value &&
                                   std::is_same<B, double>::value)
                    return bc2_launch(c, y, a, b, pow_f64_op{});
                else
                    return bc2_launch(c, y, a, b, pow_mixed_op<A, B>{});
            });
        });
    if (rc == DISPATCH_NONE)
        return eng_op_err(c, FS_ENOTSUP, "dtype not supported: %s ^ %s -> %s",
                          eng_dtype_name(a->dtype), eng_dtype_name(b->dtype),
                          eng_dtype_name(y->dtype));
    return rc;
}

int where_run(eng_op_ctx_t *c)
{
    int rc = eng_binary_where_check(c);
    if (rc)
        return rc;
    const eng_tensor_t *cond = c->inputs[0], *x = c->inputs[1], *yv = c->inputs[2];
    eng_tensor_t *out = c->outputs[0];
    switch (eng_dtype_size(x->dtype)) {
    case 1: return bc3_launch(c, out, cond, x, yv, where_op<uint8_t>{});
    case 2: return bc3_launch(c, out, cond, x, yv, where_op<uint16_t>{});
    case 4: return bc3_launch(c, out, cond, x, yv, where_op<uint32_t>{});
    case 8: return bc3_launch(c, out, cond, x, yv, where_op<uint64_t>{});
    default:
        return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(x->dtype));
    }
}

/* --- variadic ---------------------------------------------------------------------------- */

/* y = in0 op in1, then y = y op in_k for the rest; Mean divides the sum by
 * the count in the last pass. make(T{}) gives the op (a float functor for
 * a half T: bc2_launch_as, which rounds each pass -- exact for Max and Min,
 * and Sum and Mean (SUMS) take half only as far as one pass). 0, FS_EINVAL,
 * FS_ENOTSUP or FS_EDEVICE; every shape is checked before anything is
 * queued (a launch failure may leave the first passes queued). */
template <bool SUMS, bool MEAN, typename List, typename Make>
int variadic_run(eng_op_ctx_t *c, List list, Make make)
{
    int rc = eng_binary_check_io(c, c->n_inputs, ENG_DT_UNDEFINED);
    if (rc)
        return rc;
    eng_tensor_t *y = c->outputs[0];
    if (dispatch(y->dtype, list, [](auto) { return 0; }) == DISPATCH_NONE)
        return dtype_err(c, y->dtype);
    if (SUMS && !eng_binary_sum_native(y->dtype, c->n_inputs))
        return eng_op_err(c, FS_ENOTSUP, "%d %s inputs are summed through float (widened)",
                          c->n_inputs, eng_dtype_name(y->dtype));
    if (c->n_inputs == 1) {
        const eng_tensor_t *x = c->inputs[0];
        if (!eng_shape_equal(&x->shape, &y->shape))
            return eng_op_err(c, FS_EINVAL, "the output's shape differs from the input's");
        return eng_cuda_copy_d2d(c, y->data, x->data, eng_tensor_bytes(x));
    }
    bc_shape l;
    for (int k = 0; k < c->n_inputs; k++)
        if ((rc = bc_setup(c, y, &c->inputs[k], 1, &l)) != 0)
            return rc;
    return dispatch(y->dtype, list, [&](auto t) {
        using T = decltype(t);
        using C = compute_t<T>;
        const int last = c->n_inputs - 1;
        int r = 0;
        for (int k = 1; r == 0 && k <= last; k++) {
            const eng_tensor_t *a = k == 1 ? c->inputs[0] : y;
            if constexpr (MEAN) {
                if (k == last) {
                    r = bc2_launch_as<T>(c, y, a, c->inputs[k],
                                         mean_last_op<C>{{}, (C)c->n_inputs});
                    continue;
                }
            }
            r = bc2_launch_as<T>(c, y, a, c->inputs[k], make(t));
        }
        return r;
    });
}

int max_run(eng_op_ctx_t *c)
{
    return variadic_run<false, false>(c, numeric_half_types{},
                                      [](auto t) { return max_op<compute_t<decltype(t)>>{}; });
}
int min_run(eng_op_ctx_t *c)
{
    return variadic_run<false, false>(c, numeric_half_types{},
                                      [](auto t) { return min_op<compute_t<decltype(t)>>{}; });
}
int sum_run(eng_op_ctx_t *c)
{
    return variadic_run<true, false>(c, float_types{},
                                     [](auto t) { return add_op<compute_t<decltype(t)>>{}; });
}
int mean_run(eng_op_ctx_t *c)
{
    return variadic_run<true, true>(c, float_types{},
                                    [](auto t) { return add_op<compute_t<decltype(t)>>{}; });
}

} /* namespace */

/* --- the kernels -------------------------------------------------------------------------- */

const eng_kernel_t eng_cuda_Add = {.run = Add_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Sub = {.run = Sub_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Mul = {.run = Mul_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Div = {.run = Div_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Greater = {.run = Greater_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GreaterOrEqual = {.run = GreaterOrEqual_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Less = {.run = Less_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_LessOrEqual = {.run = LessOrEqual_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_PRelu = {.run = PRelu_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_And = {.run = And_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Or = {.run = Or_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Xor = {.run = Xor_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Equal = {.run = equal_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Mod = {.run = mod_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Pow = {.run = pow_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Where = {.run = where_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Max = {.run = max_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Min = {.run = min_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Sum = {.run = sum_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Mean = {.run = mean_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BitwiseAnd = {.run = BitwiseAnd_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BitwiseOr = {.run = BitwiseOr_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BitwiseXor = {.run = BitwiseXor_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BitShift = {.run = bitshift_run, .scratch_bytes = NULL};
