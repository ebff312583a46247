/* unary.cu -- the CUDA kernels of the unary ops (engine/ops/unary.c defines them;
 * engine/cpu/unary_kernels.c is the CPU reference).
 *
 * One grid-stride kernel serves every op: a functor maps an element of the
 * input type to an element of the output type. Where input and output are
 * aligned for it, each thread moves 16 bytes of the wider type at a time
 * (vector loads and stores) and the last n % width elements go one per
 * thread; otherwise every thread takes single elements. A thread reads its
 * elements before it writes them and touches nothing else, so the ops run in
 * place (output sharing the input's memory) as the planner asks.
 *
 * The formulas are the CPU kernels', expression for expression: Eigen's tanh
 * and erf approximations (Tanh, Erf, Gelu), Sigmoid and Softplus from
 * exp(-|x|), LeakyRelu as pos + alpha * neg, Round half to even (rintf),
 * Clip as min(max(x, lo), hi). Results agree within a few ulp: nvcc contracts
 * a * b + c into one FMA, the CPU build does not, and CUDA's expf/logf/...
 * are not glibc's.
 *
 * float16 and bfloat16 run the float functors through half_map (each
 * element loaded to float, the result rounded once with engine/half.h's
 * conversions): per element the bits of the widening fallback on this
 * device, and 8 halves a thread on the vector path. Clip reads its half
 * bounds itself.
 *
 * Cast follows the CPU rule exactly: floating sources widen to double,
 * signed integers and bool to int64, unsigned integers to uint64, and each
 * target converts from those (float -> integer saturates, NaN gives 0;
 * integer -> integer wraps; float16/bfloat16 go through float, rounding to
 * nearest even, with the CPU's bit-level conversions).
 *
 * Departure: Dropout refuses (FS_ENOTSUP) a training_mode input that is not
 * known on the host. The CPU kernel reads it at run time and refuses true;
 * a device kernel cannot read a device value and fail, and computing
 * inference output for a training request would be silently wrong. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <limits>
#include <type_traits>

#include "engine/cuda/dtype_impl.h"
#include "engine/ops/unary_impl.h"

namespace {

/* --- the map kernel ------------------------------------------------------------------ */

/* Elements per thread on the vector path: 16 bytes of the wider type. */
template <typename TI, typename TO> __host__ __device__ constexpr int map_width()
{
    return (int)(16 / (sizeof(TI) > sizeof(TO) ? sizeof(TI) : sizeof(TO)));
}

/* The functor a thread applies: the op itself, unless the op first reads
 * operands from device memory (Clip's bounds; see its overload). */
template <typename Op> __device__ Op map_bind(const Op &op)
{
    return op;
}

/* y[i] = op(x[i]) for i in [0, n). vec: x and y are aligned for vectors of
 * map_width elements. */
template <typename Op>
__global__ void map_kernel(const typename Op::TI *x, typename Op::TO *y, int64_t n, bool vec,
                           Op op)
{
    using TI = typename Op::TI;
    using TO = typename Op::TO;
    constexpr int N = map_width<TI, TO>();
    const auto f = map_bind(op);
    if (vec) {
        const int64_t nv = n / N;
        const vec_t<TI, N> *xv = reinterpret_cast<const vec_t<TI, N> *>(x);
        vec_t<TO, N> *yv = reinterpret_cast<vec_t<TO, N> *>(y);
        ENG_CUDA_FOR(v, nv) {
            const vec_t<TI, N> a = xv[v];
            vec_t<TO, N> b;
#pragma unroll
            for (int k = 0; k < N; k++)
                b.v[k] = f(a.v[k]);
            yv[v] = b;
        }
        /* The tail: fewer than N elements, and a grid has at least one block. */
        const int64_t e = nv * N + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (e < n)
            y[e] = f(x[e]);
        return;
    }
    ENG_CUDA_FOR(i, n) y[i] = f(x[i]);
}

/* Queues y = op(x) over n elements on ctx's stream. 0, or FS_EDEVICE when
 * the launch fails. */
template <typename Op>
int map_launch(const eng_op_ctx_t *c, const void *x, void *y, int64_t n, const Op &op)
{
    using TI = typename Op::TI;
    using TO = typename Op::TO;
    constexpr int N = map_width<TI, TO>();
    if (n == 0)
        return 0;
    const bool vec = (uintptr_t)x % (N * sizeof(TI)) == 0 && (uintptr_t)y % (N * sizeof(TO)) == 0;
    map_kernel<Op><<<eng_cuda_blocks(c, vec ? (n + N - 1) / N : n), ENG_CUDA_THREADS, 0,
                     eng_cuda_ctx(c)->stream>>>((const TI *)x, (TO *)y, n, vec, op);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* A float functor on half H (dtype_impl.h's half_fn), as map_kernel takes
 * it. */
template <typename H, typename Op> struct half_map : half_fn<H, Op> {
    using TI = H;
    using TO = half_result_t<H, typename Op::TO>;
};

/* --- dtypes ---------------------------------------------------------------------------- */

/* The CPU's EW_FLOAT_TYPES with EW_SINT_TYPES, and every dtype Cast takes;
 * the lists of the ops that take float16 and bfloat16 (through float). */
using float_sint_types = types<float, double, f16_t, bf16_t, int8_t, int16_t, int32_t, int64_t>;
using float_half_types = types<float, f16_t, bf16_t>;
using real_types = types<float, double, f16_t, bf16_t>;
using numeric_half_types = types_cat_t<numeric_types, half_types>;
using cast_types = types<float, double, f16_t, bf16_t, int8_t, int16_t, int32_t, int64_t,
                         uint8_t, uint16_t, uint32_t, uint64_t, bool_t, f8e4m3fn_t,
                         f8e4m3fnuz_t, f8e5m2_t, f8e5m2fnuz_t>;

/* --- checks ---------------------------------------------------------------------------- */

/* Runs the functor make(T{}) for x's dtype T from `list`; y must have
 * dtype out_dt (ENG_DT_UNDEFINED: x's dtype). For a half T, make may give
 * a functor over float (TI float), which runs through half_map. 0, or
 * FS_EINVAL / FS_ENOTSUP / FS_EDEVICE. */
template <typename List, typename Make>
int run_typed(eng_op_ctx_t *c, List list, Make make, eng_dtype_t out_dt = ENG_DT_UNDEFINED)
{
    eng_unary_io_t io;
    int rc = eng_unary_flat_io(c, &io);
    if (rc)
        return rc;
    rc = dispatch(io.x->dtype, list, [&](auto t) {
        if (out_dt == ENG_DT_UNDEFINED && io.y->dtype != io.x->dtype)
            return eng_op_err(c, FS_EINVAL, "output dtype %s differs from input dtype %s",
                              eng_dtype_name(io.y->dtype), eng_dtype_name(io.x->dtype));
        if (out_dt != ENG_DT_UNDEFINED && io.y->dtype != out_dt)
            return eng_op_err(c, FS_EINVAL, "output dtype %s is not %s",
                              eng_dtype_name(io.y->dtype), eng_dtype_name(out_dt));
        using T = decltype(t);
        const auto op = make(t);
        using Op = typename std::remove_const<decltype(op)>::type;
        if constexpr (is_half_v<T> && std::is_same<typename Op::TI, float>::value)
            return map_launch(c, io.x->data, io.y->data, io.n, half_map<T, Op>{{op}});
        else
            return map_launch(c, io.x->data, io.y->data, io.n, op);
    });
    return rc == DISPATCH_NONE ? eng_unary_dtype_err(c, io.x->dtype) : rc;
}

/* --- float ops --------------------------------------------------------------------------- */

/* One float op: its functor (EXPR of x, alpha, beta, gamma), its run function
 * reading the attributes with their ONNX defaults (float16 and bfloat16
 * through the functor); its kernel is defined with the others, after the
 * namespace. */
#define FLOAT_OP(op, ALPHA, BETA, GAMMA, EXPR)                                     \
    struct op##_op {                                                                     \
        using TI = float;                                                                \
        using TO = float;                                                                \
        float alpha, beta, gamma;                                                        \
        __device__ float operator()(float x) const { return (EXPR); }                    \
    };                                                                                   \
    int op##_run(eng_op_ctx_t *c)                                                        \
    {                                                                                    \
        const op##_op op = {eng_attr_f(c->node, "alpha", ALPHA),                         \
                            eng_attr_f(c->node, "beta", BETA),                           \
                            eng_attr_f(c->node, "gamma", GAMMA)};                        \
        return run_typed(c, float_half_types{}, [&](auto) { return op; });               \
    }

ENG_UNARY_FLOAT_OPS(FLOAT_OP)
#undef FLOAT_OP

/* The float-and-double ops: one functor per op and element type (UF/UO
 * name that type's functions, as on the CPU), the run function picking it
 * by the input's dtype (float's for float16 and bfloat16). */
#define REAL_FUNCTOR(op, S, T, EXPR)                                                     \
    struct op##_##S##_op {                                                               \
        using TI = T;                                                                    \
        using TO = T;                                                                    \
        T alpha, beta, gamma;                                                            \
        __device__ T operator()(T x) const { return (T)(EXPR); }                         \
    };
#define REAL_FUNCTOR_F32(op, ALPHA, BETA, GAMMA, EXPR) REAL_FUNCTOR(op, f32, float, EXPR)
#define REAL_FUNCTOR_F64(op, ALPHA, BETA, GAMMA, EXPR) REAL_FUNCTOR(op, f64, double, EXPR)
#define UE float
#define UF(fn) fn##f
#define UO(fn) fn##_f32
ENG_UNARY_REAL_OPS(REAL_FUNCTOR_F32)
#undef UE
#undef UF
#undef UO
#define UE double
#define UF(fn) fn
#define UO(fn) fn##_f64
ENG_UNARY_REAL_OPS(REAL_FUNCTOR_F64)
#undef UE
#undef UF
#undef UO
#undef REAL_FUNCTOR_F32
#undef REAL_FUNCTOR_F64
#undef REAL_FUNCTOR

#define REAL_OP(op, ALPHA, BETA, GAMMA, EXPR)                                            \
    int op##_run(eng_op_ctx_t *c)                                                        \
    {                                                                                    \
        const float alpha = eng_attr_f(c->node, "alpha", ALPHA);                         \
        const float beta = eng_attr_f(c->node, "beta", BETA);                            \
        const float gamma = eng_attr_f(c->node, "gamma", GAMMA);                         \
        return run_typed(c, real_types{}, [&](auto t) {                                  \
            using T = decltype(t);                                                       \
            if constexpr (std::is_same<T, double>::value)                                \
                return op##_f64_op{alpha, beta, gamma};                                  \
            else                                                                         \
                return op##_f32_op{alpha, beta, gamma};                                  \
        });                                                                              \
    }
ENG_UNARY_REAL_OPS(REAL_OP)
#undef REAL_OP

/* Shrink over every numeric type, computed in double and converted back as
 * the CPU does (integers through a clamped int64, wrapping into T). */
template <typename T> struct shrink_op {
    using TI = T;
    using TO = T;
    double lambd, bias;
    __device__ T operator()(T xt) const
    {
        const double x = (double)xt, v = x < -lambd ? x + bias : x > lambd ? x - bias : 0.0;
        if constexpr (std::is_floating_point<T>::value) {
            return (T)v;
        } else {
            const int64_t i = v != v                         ? 0
                              : v <= -9.2233720368547758e18 ? INT64_MIN
                              : v >= 9.2233720368547758e18  ? INT64_MAX
                                                            : (int64_t)v;
            return (T)(uint64_t)i;
        }
    }
};

int shrink_run(eng_op_ctx_t *c)
{
    const double l = eng_attr_f(c->node, "lambd", 0.5f), b = eng_attr_f(c->node, "bias", 0.0f);
    return run_typed(c, numeric_half_types{},
                     [&](auto t) { return shrink_op<compute_t<decltype(t)>>{l, b}; });
}

struct gelu_erf_op {
    using TI = float;
    using TO = float;
    __device__ float operator()(float x) const
    {
        return 0.5f * x * (1.0f + eng_erf_f32(x * 0.70710678118654752f));
    }
};

struct gelu_tanh_op {
    using TI = float;
    using TO = float;
    __device__ float operator()(float x) const
    {
        return 0.5f * x * (1.0f + eng_tanh_f32(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    }
};

int gelu_run(eng_op_ctx_t *c)
{
    const char *approx = eng_attr_s(c->node, "approximate", "none");
    if (strcmp(approx, "tanh") == 0)
        return run_typed(c, float_half_types{}, [](auto) { return gelu_tanh_op{}; });
    if (strcmp(approx, "none") == 0)
        return run_typed(c, float_half_types{}, [](auto) { return gelu_erf_op{}; });
    return eng_op_err(c, FS_ENOTSUP, "approximate '%s' is not supported (none, tanh)", approx);
}

/* --- ops over several dtypes ------------------------------------------------------------- */

template <typename T> struct abs_op {
    using TI = T;
    using TO = T;
    __device__ T operator()(T x) const
    {
        if constexpr (std::is_floating_point<T>::value)
            return fabs(x);
        else if constexpr (std::is_signed<T>::value)
            return x < 0 ? (T)(0 - (wrap_t<T>)x) : x;
        else
            return x;
    }
};

template <typename T> struct neg_op {
    using TI = T;
    using TO = T;
    __device__ T operator()(T x) const
    {
        if constexpr (std::is_floating_point<T>::value)
            return -x;
        else
            return (T)(0 - (wrap_t<T>)x);
    }
};

/* Sign keeps 0 (and -0) and NaN as they are. */
template <typename T> struct sign_op {
    using TI = T;
    using TO = T;
    __device__ T operator()(T x) const
    {
        if constexpr (std::is_floating_point<T>::value)
            return x > 0 ? (T)1 : x < 0 ? (T)-1 : x;
        else if constexpr (std::is_signed<T>::value)
            return (T)((x > 0) - (x < 0));
        else
            return (T)(x > 0);
    }
};

/* Relu lets NaN through (x < 0 is false). */
template <typename T> struct relu_op {
    using TI = T;
    using TO = T;
    __device__ T operator()(T x) const { return x < 0 ? (T)0 : x; }
};

struct not_op {
    using TI = uint8_t;
    using TO = uint8_t;
    __device__ uint8_t operator()(uint8_t x) const { return !x; }
};

template <typename T> struct bnot_op {
    using TI = T;
    using TO = T;
    __device__ T operator()(T x) const { return (T)~x; }
};

int abs_run(eng_op_ctx_t *c)
{
    return run_typed(c, numeric_half_types{},
                     [](auto t) { return abs_op<compute_t<decltype(t)>>{}; });
}
int neg_run(eng_op_ctx_t *c)
{
    return run_typed(c, float_sint_types{},
                     [](auto t) { return neg_op<compute_t<decltype(t)>>{}; });
}
int sign_run(eng_op_ctx_t *c)
{
    return run_typed(c, numeric_half_types{},
                     [](auto t) { return sign_op<compute_t<decltype(t)>>{}; });
}
int relu_run(eng_op_ctx_t *c)
{
    return run_typed(c, float_sint_types{},
                     [](auto t) { return relu_op<compute_t<decltype(t)>>{}; });
}
int not_run(eng_op_ctx_t *c)
{
    return run_typed(c, types<bool_t>{}, [](bool_t) { return not_op{}; });
}
int bitwise_not_run(eng_op_ctx_t *c)
{
    return run_typed(c, types<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                              uint64_t>{},
                     [](auto t) { return bnot_op<decltype(t)>{}; });
}

/* --- IsNaN, IsInf: a float x's class, into a bool y ----------------------------------------- */

template <typename T> struct isnan_op {
    using TI = T;
    using TO = uint8_t;
    __device__ uint8_t operator()(T x) const { return isnan(x) ? 1 : 0; }
};

template <typename T> struct isinf_op {
    using TI = T;
    using TO = uint8_t;
    bool negative, positive;
    __device__ uint8_t operator()(T x) const
    {
        return isinf(x) && (x < 0 ? negative : positive) ? 1 : 0;
    }
};

int isnan_run(eng_op_ctx_t *c)
{
    return run_typed(
        c, real_types{}, [](auto t) { return isnan_op<compute_t<decltype(t)>>{}; }, ENG_DT_BOOL);
}

int isinf_run(eng_op_ctx_t *c)
{
    const bool neg = eng_attr_i(c->node, "detect_negative", 1) != 0;
    const bool pos = eng_attr_i(c->node, "detect_positive", 1) != 0;
    return run_typed(
        c, real_types{}, [&](auto t) { return isinf_op<compute_t<decltype(t)>>{neg, pos}; },
        ENG_DT_BOOL);
}


/* --- Clip ----------------------------------------------------------------------------------- */

/* min(max(x, lo), hi) with bounds fixed for the thread: with lo > hi every
 * element becomes hi (as ONNX says); NaN stays NaN. */
template <typename T> struct clip_bound {
    T lo, hi;
    __device__ T operator()(T x) const
    {
        const T v = x < lo ? lo : x;
        return v > hi ? hi : v;
    }
};

/* Clip's launch form: a bound is read from device memory (lo_p, hi_p: a
 * min/max input of x's dtype) or, where that pointer is NULL, is the value
 * given (in the type x computes in). */
template <typename T> struct clip_op {
    using TI = T;
    using TO = T;
    const T *lo_p, *hi_p;
    compute_t<T> lo, hi;
};

/* The bounds fixed for the thread; a half x clips in float (exact: the
 * result is x or a bound, all halves). */
template <typename T> __device__ auto map_bind(const clip_op<T> &op)
{
    using C = compute_t<T>;
    const clip_bound<C> b{op.lo_p ? compute_load(*op.lo_p) : op.lo,
                          op.hi_p ? compute_load(*op.hi_p) : op.hi};
    if constexpr (is_half_v<T>)
        return half_fn<T, clip_bound<C>>{b};
    else
        return b;
}

/* The whole range of T: the bound where min or max is absent. */
template <typename T> constexpr T type_lowest()
{
    return std::is_floating_point<T>::value ? -std::numeric_limits<T>::infinity()
                                            : std::numeric_limits<T>::lowest();
}
template <typename T> constexpr T type_highest()
{
    return std::is_floating_point<T>::value ? std::numeric_limits<T>::infinity()
                                            : std::numeric_limits<T>::max();
}

/* Before opset 11 the bounds are float attributes; from 11, optional scalar
 * inputs of the input's type, read on the device. */
int clip_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *lo, *hi;
    float attr[2];
    int rc = eng_unary_clip_bounds(c, &lo, &hi, attr);
    if (rc)
        return rc;
    if (c->opset < 11)
        return run_typed(c, float_half_types{}, [&](auto t) {
            return clip_op<decltype(t)>{NULL, NULL, attr[0], attr[1]};
        });
    return run_typed(c, numeric_half_types{}, [&](auto t) {
        using T = decltype(t);
        using C = compute_t<T>;
        return clip_op<T>{lo ? (const T *)lo->data : NULL, hi ? (const T *)hi->data : NULL,
                          type_lowest<C>(), type_highest<C>()};
    });
}

/* --- Identity and Dropout ---------------------------------------------------------------- */

/* Copies input 0 to output 0 unless they share memory. 0, FS_EINVAL,
 * FS_ENOTSUP or FS_EDEVICE. */
int copy_run(eng_op_ctx_t *c)
{
    eng_unary_io_t io;
    int rc = eng_unary_copy_io(c, &io);
    if (rc)
        return rc;
    return eng_cuda_copy_d2d(c, io.y->data, io.x->data, io.bytes);
}

template <typename T> __global__ void fill_kernel(T *p, int64_t n, T v)
{
    ENG_CUDA_FOR(i, n) p[i] = v;
}

/* Inference: output = input, and the optional mask all ones (bool, or the
 * input's type before opset 10). training_mode must be known on the host and
 * false (see the file comment). */
int dropout_run(eng_op_ctx_t *c)
{
    if (c->opset >= 12 && eng_ctx_in(c, 2)) {
        const eng_tensor_t *train = eng_ctx_host_in(c, 2);
        if (!train)
            return eng_op_err(c, FS_ENOTSUP, "a training_mode known only at run time is not "
                              "supported on CUDA (inference only: make it a constant false)");
        if (*(const unsigned char *)train->data)
            return eng_op_err(c, FS_ENOTSUP, "training_mode true is not supported (inference "
                              "only)");
    }
    eng_tensor_t *mask = c->n_outputs > 1 ? c->outputs[1] : NULL;
    if (mask && mask->dtype != ENG_DT_BOOL && mask->dtype != ENG_DT_FLOAT &&
        mask->dtype != ENG_DT_DOUBLE && mask->dtype != ENG_DT_FLOAT16 &&
        mask->dtype != ENG_DT_BFLOAT16)
        return eng_op_err(c, FS_ENOTSUP, "mask dtype %s not supported",
                          eng_dtype_name(mask->dtype));
    int rc = copy_run(c);
    if (rc || !mask)
        return rc;
    const int64_t n = eng_shape_numel(&mask->shape);
    if (n == 0)
        return 0;
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    const unsigned blocks = eng_cuda_blocks(c, n);
    switch (mask->dtype) {
    case ENG_DT_BOOL:
        ENG_CUDA_TRY(c, cudaMemsetAsync(mask->data, 1, (size_t)n, s));
        return 0;
    case ENG_DT_FLOAT:
        fill_kernel<float><<<blocks, ENG_CUDA_THREADS, 0, s>>>((float *)mask->data, n, 1.0f);
        break;
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16:
        fill_kernel<uint16_t><<<blocks, ENG_CUDA_THREADS, 0, s>>>(
            (uint16_t *)mask->data, n,
            eng_float_to_half_dt(mask->dtype, 1.0f));
        break;
    default:
        fill_kernel<double><<<blocks, ENG_CUDA_THREADS, 0, s>>>((double *)mask->data, n, 1.0);
        break;
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* --- Cast ----------------------------------------------------------------------------------- */

/* Widening: to double, int64 or uint64 by the source's kind. */
__device__ double cast_widen(float x) { return x; }
__device__ double cast_widen(double x) { return x; }
__device__ double cast_widen(f16_t x) { return eng_half_to_float(x.bits); }
__device__ double cast_widen(bf16_t x) { return eng_bf16_to_float(x.bits); }
template <int K> __device__ double cast_widen(f8_t<K> x)
{
    return eng_f8_to_float(x.bits, f8_t<K>::kind);
}
__device__ int64_t cast_widen(int8_t x) { return x; }
__device__ int64_t cast_widen(int16_t x) { return x; }
__device__ int64_t cast_widen(int32_t x) { return x; }
__device__ int64_t cast_widen(int64_t x) { return x; }
__device__ int64_t cast_widen(bool_t x) { return x.v != 0; }
__device__ uint64_t cast_widen(uint8_t x) { return x; }
__device__ uint64_t cast_widen(uint16_t x) { return x; }
__device__ uint64_t cast_widen(uint32_t x) { return x; }
__device__ uint64_t cast_widen(uint64_t x) { return x; }

/* Narrowing from the three wide types. Integers: saturating from double
 * (NaN gives 0), wrapping from the integer types. */
template <typename D> struct cast_to {
    static constexpr D lo = std::numeric_limits<D>::lowest();
    static constexpr D hi = std::numeric_limits<D>::max();
    __device__ static D from(double w)
    {
        if (isnan(w))
            return 0;
        if (w <= (double)lo)
            return lo;
        return w >= (double)hi ? hi : (D)w;
    }
    __device__ static D from(int64_t w) { return (D)w; }
    __device__ static D from(uint64_t w) { return (D)w; }
};
template <> struct cast_to<float> {
    template <typename W> __device__ static float from(W w) { return (float)w; }
};
template <> struct cast_to<double> {
    template <typename W> __device__ static double from(W w) { return (double)w; }
};
template <> struct cast_to<f16_t> {
    template <typename W> __device__ static f16_t from(W w)
    {
        return {eng_float_to_half((float)w)};
    }
};
template <> struct cast_to<bf16_t> {
    template <typename W> __device__ static bf16_t from(W w)
    {
        return {eng_float_to_bf16((float)w)};
    }
};
template <> struct cast_to<bool_t> {
    template <typename W> __device__ static bool_t from(W w) { return {(uint8_t)(w != 0)}; }
};

template <typename S, typename D> struct cast_op {
    using TI = S;
    using TO = D;
    bool saturate; /* a float8 target's overflow: Cast's saturate */
    __device__ D operator()(S x) const
    {
        if constexpr (is_f8<D>::value)
            return {eng_float_to_f8((float)cast_widen(x), D::kind, saturate)};
        else
            return cast_to<D>::from(cast_widen(x));
    }
};

/* Cast and CastLike: the target is output 0's dtype. 0, or FS_EINVAL /
 * FS_ENOTSUP / FS_EDEVICE. */
int cast_run(eng_op_ctx_t *c)
{
    eng_unary_io_t io;
    int rc = eng_unary_flat_io(c, &io);
    if (rc)
        return rc;
    const auto known = [](auto) { return 0; };
    if (dispatch(io.x->dtype, cast_types{}, known) || dispatch(io.y->dtype, cast_types{}, known))
        return eng_op_err(c, FS_ENOTSUP, "dtype not supported: cast from %s to %s",
                          eng_dtype_name(io.x->dtype), eng_dtype_name(io.y->dtype));
    return dispatch(io.x->dtype, cast_types{}, [&](auto s) {
        return dispatch(io.y->dtype, cast_types{}, [&](auto d) {
            using S = decltype(s);
            using D = decltype(d);
            if constexpr (std::is_same<S, D>::value)
                return eng_cuda_copy_d2d(c, io.y->data, io.x->data, (size_t)io.n * sizeof(S));
            else
                return map_launch(c, io.x->data, io.y->data, io.n,
                                  cast_op<S, D>{eng_attr_i(c->node, "saturate", 1) != 0});
        });
    });
}

} /* namespace */

/* --- the kernels -------------------------------------------------------------------------- */

#define FLOAT_KERNEL(op, ALPHA, BETA, GAMMA, EXPR)                                       \
    const eng_kernel_t eng_cuda_##op = {.run = op##_run, .scratch_bytes = NULL};
ENG_UNARY_FLOAT_OPS(FLOAT_KERNEL)
ENG_UNARY_REAL_OPS(FLOAT_KERNEL)
#undef FLOAT_KERNEL
const eng_kernel_t eng_cuda_Shrink = {.run = shrink_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Gelu = {.run = gelu_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Abs = {.run = abs_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Neg = {.run = neg_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Sign = {.run = sign_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Relu = {.run = relu_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Not = {.run = not_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BitwiseNot = {.run = bitwise_not_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_IsNaN = {.run = isnan_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_IsInf = {.run = isinf_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Clip = {.run = clip_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Identity = {.run = copy_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Dropout = {.run = dropout_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Cast = {.run = cast_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_CastLike = {.run = cast_run, .scratch_bytes = NULL};
