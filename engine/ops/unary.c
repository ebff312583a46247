/* unary.c -- definitions (validation, dtype and shape inference) of the unary ops:
 * element-wise math and activations, IsNaN and IsInf, BitwiseNot, Cast, Clip, Identity and Dropout. Every
 * output has its input's shape; none computes data at inference (the planner
 * folds constants by running the CPU kernel). */
#include <string.h>

#include "common/error.h"
#include "engine/op.h"
#include "engine/ops/unary_impl.h"

/* float16 and bfloat16 are computed through each op's float kernel on both
 * devices (rounded once per element), so they are in every list that has
 * float. */
static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                       ENG_DT_UNDEFINED};
static const eng_dtype_t dt_float_double[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                              ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_bool[] = {ENG_DT_BOOL, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_signed[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                        ENG_DT_BFLOAT16, ENG_DT_INT8, ENG_DT_INT16,
                                        ENG_DT_INT32, ENG_DT_INT64, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_numeric[] = {ENG_DT_FLOAT,  ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                         ENG_DT_BFLOAT16, ENG_DT_INT8, ENG_DT_INT16,
                                         ENG_DT_INT32,  ENG_DT_INT64,  ENG_DT_UINT8,
                                         ENG_DT_UINT16, ENG_DT_UINT32, ENG_DT_UINT64,
                                         ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int[] = {ENG_DT_INT8,  ENG_DT_INT16,  ENG_DT_INT32,  ENG_DT_INT64,
                                     ENG_DT_UINT8, ENG_DT_UINT16, ENG_DT_UINT32, ENG_DT_UINT64,
                                     ENG_DT_UNDEFINED};
/* What Cast converts between (engine/cpu/unary_kernels.c). */
static const eng_dtype_t dt_cast[] = {
    ENG_DT_FLOAT,  ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,
    ENG_DT_INT16,  ENG_DT_INT32,  ENG_DT_INT64,   ENG_DT_UINT8,    ENG_DT_UINT16,
    ENG_DT_UINT32, ENG_DT_UINT64, ENG_DT_BOOL,    ENG_DT_FLOAT8E4M3FN, ENG_DT_FLOAT8E4M3FNUZ,
    ENG_DT_FLOAT8E5M2, ENG_DT_FLOAT8E5M2FNUZ, ENG_DT_STRING, ENG_DT_UNDEFINED};

static bool dtype_in(eng_dtype_t dt, const eng_dtype_t *set)
{
    for (; *set != ENG_DT_UNDEFINED; set++)
        if (*set == dt)
            return true;
    return false;
}

/* Output 0 takes input 0's dtype and shape, which must be in `allowed`.
 * 0, or FS_EINVAL (input missing) / FS_ENOTSUP (dtype); outputs untouched
 * on error. */
static int infer_same(eng_op_ctx_t *c, const eng_dtype_t *allowed)
{
    int rc = eng_op_require_dtype(c, 0, allowed);
    if (rc)
        return rc;
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    eng_ctx_out_set(c, 0, x->dtype, &x->shape);
    return 0;
}

static int infer_float(eng_op_ctx_t *c) { return infer_same(c, dt_float); }
static int infer_real(eng_op_ctx_t *c) { return infer_same(c, dt_float_double); }
static int infer_signed(eng_op_ctx_t *c) { return infer_same(c, dt_signed); }
static int infer_numeric(eng_op_ctx_t *c) { return infer_same(c, dt_numeric); }
static int infer_bool(eng_op_ctx_t *c) { return infer_same(c, dt_bool); }
static int infer_int(eng_op_ctx_t *c) { return infer_same(c, dt_int); }

static int infer_identity(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    if (!x)
        return eng_op_err(c, FS_EINVAL, "input 0 is missing");
    if (eng_dtype_size(x->dtype) == 0)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(x->dtype));
    eng_ctx_out_set(c, 0, x->dtype, &x->shape);
    return 0;
}

/* --- Gelu ------------------------------------------------------------------ */

static int check_gelu(const eng_node_t *n, int opset)
{
    const char *a = eng_attr_s(n, "approximate", "none");
    if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0) {
        eng_op_ctx_t c = {.node = n, .opset = opset};
        return eng_op_err(&c, FS_ENOTSUP, "approximate '%s' is not supported (none, tanh)", a);
    }
    return 0;
}

static int infer_gelu(eng_op_ctx_t *c)
{
    int rc = check_gelu(c->node, c->opset);
    return rc ? rc : infer_same(c, dt_float);
}

/* --- Cast and CastLike ------------------------------------------------------ */

/* The target dtype of Cast's `to`. 0, or FS_EINVAL (absent) / FS_ENOTSUP
 * (a dtype Cast does not convert to); *out untouched on error. */
static int cast_target(const eng_node_t *n, eng_dtype_t *out)
{
    eng_op_ctx_t c = {.node = n}; /* at load there is no context yet */
    const eng_attr_t *to = eng_node_attr(n, "to");
    if (!to || to->type != ENG_ATTR_INT)
        return eng_op_err(&c, FS_EINVAL, "attribute 'to' is missing or not an int");
    if (to->i < 0 || to->i > 64 || !dtype_in((eng_dtype_t)to->i, dt_cast))
        return eng_op_err(&c, FS_ENOTSUP, "dtype not supported: cannot cast to %s (%lld)",
                          eng_dtype_name((eng_dtype_t)to->i), (long long)to->i);
    *out = (eng_dtype_t)to->i;
    return 0;
}

static int check_cast(const eng_node_t *n, int opset)
{
    eng_dtype_t to;
    return cast_target(n, &to);
}

static int infer_cast(eng_op_ctx_t *c)
{
    eng_dtype_t to;
    int rc = cast_target(c->node, &to);
    if (rc == 0)
        rc = eng_op_require_dtype(c, 0, dt_cast);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, to, &eng_ctx_in(c, 0)->shape);
    return 0;
}

static int infer_castlike(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, dt_cast);
    if (rc == 0)
        rc = eng_op_require_dtype(c, 1, dt_cast);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, eng_ctx_in(c, 1)->dtype, &eng_ctx_in(c, 0)->shape);
    return 0;
}

/* --- Clip ------------------------------------------------------------------- */

/* Before opset 11 min and max are float attributes; from 11 they are
 * optional scalar inputs of the input's type. */
static int infer_clip(eng_op_ctx_t *c)
{
    if (c->opset < 11)
        return infer_same(c, dt_float);
    int rc = infer_same(c, dt_numeric);
    if (rc)
        return rc;
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    for (int i = 1; i <= 2; i++) {
        const eng_tensor_t *b = eng_ctx_in(c, i);
        if (!b)
            continue;
        if (b->dtype != x->dtype)
            return eng_op_err(c, FS_EINVAL, "%s has dtype %s, the input has %s",
                              i == 1 ? "min" : "max", eng_dtype_name(b->dtype),
                              eng_dtype_name(x->dtype));
        if (eng_shape_numel(&b->shape) != 1) {
            char s[96];
            return eng_op_err(c, FS_EINVAL, "%s must be a scalar, has shape %s",
                              i == 1 ? "min" : "max", eng_shape_format(&b->shape, s, sizeof s));
        }
    }
    return 0;
}

/* --- IsNaN, IsInf ----------------------------------------------------------------- */

/* A bool of x's shape per element of a float x. (From opset 20 the float8
 * types are in ONNX's list too; this refuses them naming the dtype.) */
static int infer_isclass(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, dt_float_double);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, ENG_DT_BOOL, &eng_ctx_in(c, 0)->shape);
    return 0;
}

/* --- Dropout ------------------------------------------------------------------ */

/* Inference only: output = input, mask all true (of the input's type before
 * opset 10, when the mask was T). From opset 12 ratio and training_mode are
 * inputs; a training_mode known to be true is refused here, one known only
 * at run time by the kernel. */
static int infer_dropout(eng_op_ctx_t *c)
{
    int rc = infer_same(c, dt_float_double);
    if (rc)
        return rc;
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    if (c->opset >= 12) {
        const eng_tensor_t *ratio = eng_ctx_in(c, 1), *train = eng_ctx_in(c, 2);
        if (ratio && (!dtype_in(ratio->dtype, dt_float_double) ||
                      eng_shape_numel(&ratio->shape) != 1))
            return eng_op_err(c, FS_EINVAL, "ratio must be a float scalar");
        if (train && (train->dtype != ENG_DT_BOOL || eng_shape_numel(&train->shape) != 1))
            return eng_op_err(c, FS_EINVAL, "training_mode must be a bool scalar");
        if (train && train->data && *(const unsigned char *)train->data)
            return eng_op_err(c, FS_ENOTSUP, "training_mode true is not supported (inference "
                              "only)");
    }
    eng_ctx_out_set(c, 1, c->opset < 10 ? x->dtype : ENG_DT_BOOL, &x->shape);
    return 0;
}

/* --- the definitions ----------------------------------------------------------- */

/* The float32-only ops, from their formula list (engine/ops/unary_impl.h). */
#define FLOAT_DEF_(op, ALPHA, BETA, GAMMA, EXPR) ENG_OP_DEF(op, NULL, infer_float, 0);
ENG_UNARY_FLOAT_OPS(FLOAT_DEF_)
#undef FLOAT_DEF_
/* The float and double ops, likewise. */
#define REAL_DEF_(op, ALPHA, BETA, GAMMA, EXPR) ENG_OP_DEF(op, NULL, infer_real, 0);
ENG_UNARY_REAL_OPS(REAL_DEF_)
#undef REAL_DEF_
/* Shrink: every numeric type (lambd and bias are floats). */
ENG_OP_DEF(Shrink, NULL, infer_numeric, 0);

ENG_OP_DEF(Abs, NULL, infer_numeric, 0);
ENG_OP_DEF(Gelu, check_gelu, infer_gelu, 0);
ENG_OP_DEF(Neg, NULL, infer_signed, 0);
ENG_OP_DEF(Not, NULL, infer_bool, 0);
ENG_OP_DEF(BitwiseNot, NULL, infer_int, 0);
ENG_OP_DEF(IsInf, NULL, infer_isclass, -1);
ENG_OP_DEF(IsNaN, NULL, infer_isclass, -1);
ENG_OP_DEF(Relu, NULL, infer_signed, 0);
ENG_OP_DEF(Sign, NULL, infer_numeric, 0);
ENG_OP_DEF(Cast, check_cast, infer_cast, -1);
ENG_OP_DEF(CastLike, NULL, infer_castlike, -1);
ENG_OP_DEF(Clip, NULL, infer_clip, 0);
ENG_OP_DEF(Identity, NULL, infer_identity, 0);
/* Before opset 7, is_test=0 (the default) meant training: random drops. */
static int check_dropout(const eng_node_t *n, int opset)
{
    if (opset < 7 && eng_attr_i(n, "is_test", 0) == 0) {
        eng_op_ctx_t c = {.node = n, .opset = opset};
        return eng_op_err(&c, FS_ENOTSUP, "is_test=0 at opset %d means training, which is not "
                          "supported (inference only)", opset);
    }
    return 0;
}

ENG_OP_DEF(Dropout, check_dropout, infer_dropout, 0);

int eng_unary_flat_io(const eng_op_ctx_t *c, eng_unary_io_t *io)
{
    *io = (eng_unary_io_t){.x = eng_ctx_in(c, 0), .y = c->n_outputs > 0 ? c->outputs[0] : NULL};
    if (!io->x || !io->y)
        return eng_op_err(c, FS_EINVAL, "input 0 or output 0 is missing");
    io->n = eng_shape_numel(&io->x->shape);
    if (eng_shape_numel(&io->y->shape) != io->n)
        return eng_op_err(c, FS_EINVAL, "output has %lld elements, the input %lld",
                          (long long)eng_shape_numel(&io->y->shape), (long long)io->n);
    return 0;
}

int eng_unary_dtype_err(const eng_op_ctx_t *c, eng_dtype_t dt)
{
    return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(dt));
}

int eng_unary_clip_bounds(const eng_op_ctx_t *c, const eng_tensor_t **lo, const eng_tensor_t **hi,
                          float attr[2])
{
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    *lo = *hi = NULL;
    if (!x)
        return eng_op_err(c, FS_EINVAL, "input 0 is missing");
    if (c->opset < 11) {
        if (x->dtype != ENG_DT_FLOAT && x->dtype != ENG_DT_FLOAT16 &&
            x->dtype != ENG_DT_BFLOAT16)
            return eng_unary_dtype_err(c, x->dtype);
        attr[0] = eng_attr_f(c->node, "min", -INFINITY);
        attr[1] = eng_attr_f(c->node, "max", INFINITY);
        return 0;
    }
    *lo = eng_ctx_in(c, 1);
    *hi = eng_ctx_in(c, 2);
    for (int i = 1; i <= 2; i++) {
        const eng_tensor_t *t = i == 1 ? *lo : *hi;
        if (t && (t->dtype != x->dtype || eng_shape_numel(&t->shape) != 1))
            return eng_op_err(c, FS_EINVAL, "%s must be a scalar of dtype %s",
                              i == 1 ? "min" : "max", eng_dtype_name(x->dtype));
    }
    return 0;
}
