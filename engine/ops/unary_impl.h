/* unary_impl.h -- what the unary op kernels of every device share
 * (engine/cpu/unary_kernels.c, engine/cuda/unary.cu): the flat input/output
 * check, the float32 approximations, and the float ops' formulas.
 *
 * The approximations and formulas are inline and, compiled by nvcc, also
 * device functions, so each device evaluates the same expression (its own
 * libm's expf, logf, ... aside).
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_UNARY_IMPL_H
#define FS_ENGINE_OPS_UNARY_IMPL_H

#include <math.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A one-in, one-out op's operands, as every device's kernel starts from them:
 * input 0, output 0, their common element count, and (eng_unary_copy_io)
 * their bytes. */
typedef struct eng_unary_io {
    const eng_tensor_t *x;
    eng_tensor_t *y;
    int64_t n;
    size_t bytes;
} eng_unary_io_t;

/* Input 0, output 0 and their common element count into *io. 0, or
 * FS_EINVAL when one is missing or the counts differ; nothing is written or
 * queued. */
int eng_unary_flat_io(const eng_op_ctx_t *c, eng_unary_io_t *io);

/* Clip's bounds. From opset 11: the optional inputs 1 (min) and 2 (max) of
 * c in *lo and *hi, each NULL when absent. Before 11: *lo and *hi NULL, and
 * attr[0], attr[1] the float attributes min and max (default -inf, inf).
 * 0, or FS_EINVAL (input 0 missing; a present bound not a one-element
 * tensor of input 0's dtype), FS_ENOTSUP (before 11, input 0 not float,
 * float16 or bfloat16). */
int eng_unary_clip_bounds(const eng_op_ctx_t *c, const eng_tensor_t **lo, const eng_tensor_t **hi,
                          float attr[2]);

/* FS_ENOTSUP naming dtype dt as not supported by the node in c. */
int eng_unary_dtype_err(const eng_op_ctx_t *c, eng_dtype_t dt);

/* tanh as Eigen's rational approximation (x * P(x^2) / Q(x^2), inputs
 * clamped to +-7.9053, where it reaches 1 in float): about 5x faster than
 * glibc's tanhf, and within 4e-7 of the exact value everywhere, relative
 * error included (measured against double tanh on a 1e-4 grid over
 * [-20, 20]). NaN stays NaN. */
ENG_OPS_HD static inline float eng_tanh_f32(float a)
{
    const float c = 7.90531110763549805f;
    const float hi = a > c ? c : a, x = hi < -c ? -c : hi, x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return x * p / q;
}

/* erf as Eigen's rational approximation (x * P(x^2) / Q(x^2), inputs
 * clamped to +-4, where it reaches 1 in float): no branch, so the CPU's row
 * loops vectorise (glibc's erff costs about 19 ns an element, which made
 * Erf the transformer demo's whole run time), and within 4.3e-7 of the
 * exact value everywhere, relative error included (measured against
 * double erf on a 1e-5 grid over [-10, 10]). NaN stays NaN, +-inf gives
 * +-1. */
ENG_OPS_HD static inline float eng_erf_f32(float a)
{
    const float hi = a > 4.0f ? 4.0f : a, x = hi < -4.0f ? -4.0f : hi, x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return x * p / q;
}

/* One exp of -|x|, which never overflows. */
ENG_OPS_HD static inline float eng_sigmoid_f32(float x)
{
    const float e = expf(-fabsf(x));
    return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* The same in double. */
ENG_OPS_HD static inline double eng_sigmoid_f64(double x)
{
    const double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* The ops of ENG_OPS_UNARY (engine/ops/list.h) over float but not double,
 * with their formulas: X(OpType, ALPHA, BETA, GAMMA, EXPR), EXPR a
 * float expression of x and the attributes alpha, beta and gamma, whose
 * ONNX defaults are ALPHA, BETA and GAMMA (0: the op has no such
 * attribute). Each device expands it into its own loop or functor, and runs
 * float16 and bfloat16 through the float one (each element converted to
 * float, the result rounded once). They have no double form for the float
 * approximations they use (Erf, Tanh), the sigmoid's float form, or
 * (HardSwish) a constant that is inexact in float. */
#define ENG_UNARY_FLOAT_OPS(X)                                                            \
    X(Erf, 0, 0, 0, eng_erf_f32(x))                                                       \
    X(HardSwish, 0, 0, 0, x * fmaxf(0.0f, fminf(1.0f, x * (1.0f / 6.0f) + 0.5f)))         \
    X(Sigmoid, 0, 0, 0, eng_sigmoid_f32(x))                                               \
    X(Tanh, 0, 0, 0, eng_tanh_f32(x))

/* The ops over float and double (and, through float, float16 and
 * bfloat16), in the same form, EXPR written once for
 * both: UE is the element type, UF(fn) names libm's fn for it (fnf in
 * float, fn in double) and UO(fn) the engine's (fn_f32, fn_f64); the
 * expanding device defines the three around the expansion. Every constant in them is exact in
 * float, so the double results are double precision.
 * Sigmoid-like terms (Softplus, Mish, Swish) take exp of -|x| only, so
 * that it never overflows. LeakyRelu is written as pos + alpha * neg (NaN
 * and -0 come out as they went in) because with -ftrapping-math GCC will
 * not vectorise a multiply under a condition. Round's nearbyint rounds half
 * to even (the default mode). Celu is x for x > 0, else
 * alpha * expm1(x / alpha): ONNX's max(0, x) + min(0, alpha * (exp(x /
 * alpha) - 1)) for alpha > 0, with NaN kept. */
#define ENG_UNARY_REAL_OPS(X)                                                             \
    X(Acos, 0, 0, 0, UF(acos)(x))                                                         \
    X(Acosh, 0, 0, 0, UF(acosh)(x))                                                       \
    X(Asin, 0, 0, 0, UF(asin)(x))                                                         \
    X(Asinh, 0, 0, 0, UF(asinh)(x))                                                       \
    X(Atan, 0, 0, 0, UF(atan)(x))                                                         \
    X(Atanh, 0, 0, 0, UF(atanh)(x))                                                       \
    X(Ceil, 0, 0, 0, UF(ceil)(x))                                                         \
    X(Celu, 1.0f, 0, 0, x > 0 ? x : alpha * UF(expm1)(x / alpha))                         \
    X(Cos, 0, 0, 0, UF(cos)(x))                                                           \
    X(Cosh, 0, 0, 0, UF(cosh)(x))                                                         \
    X(Elu, 1.0f, 0, 0, x < 0 ? alpha * UF(expm1)(x) : x)                                  \
    X(Exp, 0, 0, 0, UF(exp)(x))                                                           \
    X(Floor, 0, 0, 0, UF(floor)(x))                                                       \
    X(HardSigmoid, 0.2f, 0.5f, 0, UF(fmax)((UE)0, UF(fmin)((UE)1, alpha * x + beta)))       \
    X(LeakyRelu, 0.01f, 0, 0, (x < 0 ? 0.0f : x) + alpha * (x < 0 ? x : -0.0f))           \
    X(Log, 0, 0, 0, UF(log)(x))                                                           \
    X(Mish, 0, 0, 0, x * UF(tanh)(UF(fmax)(x, (UE)0) + UF(log1p)(UF(exp)(-UF(fabs)(x)))))  \
    X(Reciprocal, 0, 0, 0, 1.0f / x)                                                      \
    X(Round, 0, 0, 0, UF(nearbyint)(x))                                                   \
    X(Selu, 1.67326319217681884765625f, 0, 1.05070102214813232421875f,                    \
      x > 0 ? gamma * x : gamma * alpha * UF(expm1)(x))                                   \
    X(Sin, 0, 0, 0, UF(sin)(x))                                                           \
    X(Sinh, 0, 0, 0, UF(sinh)(x))                                                         \
    X(Softplus, 0, 0, 0, UF(fmax)(x, (UE)0) + UF(log1p)(UF(exp)(-UF(fabs)(x))))            \
    X(Softsign, 0, 0, 0, x / (1.0f + UF(fabs)(x)))                                        \
    X(Sqrt, 0, 0, 0, UF(sqrt)(x))                                                         \
    X(Swish, 1.0f, 0, 0, x * UO(eng_sigmoid)(alpha * x))                                  \
    X(Tan, 0, 0, 0, UF(tan)(x))                                                           \
    X(ThresholdedRelu, 1.0f, 0, 0, x > alpha ? x : 0.0f)

/* Identity's copy (and Dropout's output 0): input 0, output 0 and the bytes
 * of their common elements. 0, or FS_EINVAL (one missing, the counts
 * differ) / FS_ENOTSUP (a dtype without a fixed size, or the output's dtype
 * not the input's); nothing is written or queued. */
static inline int eng_unary_copy_io(const eng_op_ctx_t *c, eng_unary_io_t *io)
{
    int rc = eng_unary_flat_io(c, io);
    if (rc)
        return rc;
    size_t es = eng_dtype_size(io->x->dtype);
    io->bytes = (size_t)io->n * es;
    if (es == 0 || io->y->dtype != io->x->dtype)
        return eng_unary_dtype_err(c, io->x->dtype);
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif
