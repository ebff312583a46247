/* quant.c -- definitions (validation, dtype and shape inference) of the
 * quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
 * MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv, and the
 * parameter layouts their kernels share (quant_impl.h).
 *
 * QuantizeLinear and DequantizeLinear quantize to and from the 8- and
 * 16-bit integers and ONNX's four float8 formats (float8e4m3fn,
 * float8e4m3fnuz, float8e5m2, float8e5m2fnuz; QuantizeLinear's `saturate`
 * applies to those only, as ONNX says). The engine's dtypes stop at 8
 * bits: ONNX's 4-bit and 2-bit quantized types and float8e8m0 are refused
 * by name (FS_ENOTSUP), whether a model's value carries one (the loader
 * refuses it) or an attribute asks for one (output_dtype, precision:
 * refused here at load). */
#include <string.h>

#include "common/error.h"
#include "engine/ops/quant_impl.h"

static const eng_dtype_t dt_qlinear_x[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                           ENG_DT_INT32, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_scale[] = {ENG_DT_FLOAT, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                       ENG_DT_UNDEFINED};
static const eng_dtype_t dt_quant[] = {ENG_DT_UINT8,          ENG_DT_INT8,
                                       ENG_DT_UINT16,         ENG_DT_INT16,
                                       ENG_DT_FLOAT8E4M3FN,   ENG_DT_FLOAT8E4M3FNUZ,
                                       ENG_DT_FLOAT8E5M2,     ENG_DT_FLOAT8E5M2FNUZ,
                                       ENG_DT_UNDEFINED};
static const eng_dtype_t dt_dequant[] = {ENG_DT_UINT8,        ENG_DT_INT8,
                                         ENG_DT_UINT16,       ENG_DT_INT16,
                                         ENG_DT_INT32,        ENG_DT_FLOAT8E4M3FN,
                                         ENG_DT_FLOAT8E4M3FNUZ, ENG_DT_FLOAT8E5M2,
                                         ENG_DT_FLOAT8E5M2FNUZ, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_8bit[] = {ENG_DT_UINT8, ENG_DT_INT8, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int32[] = {ENG_DT_INT32, ENG_DT_UNDEFINED};

static bool dtype_in(int64_t dt, const eng_dtype_t *set)
{
    for (; *set != ENG_DT_UNDEFINED; set++)
        if ((int64_t)*set == dt)
            return true;
    return false;
}

/* FS_ENOTSUP unless attribute `name` of n (0: absent) is a dtype of
 * `allowed`; `what` says what the attribute sets. */
static int check_dtype_attr(const eng_node_t *n, int opset, const char *name,
                            const eng_dtype_t *allowed, const char *what)
{
    int64_t v = eng_attr_i(n, name, 0);
    if (v == 0 || dtype_in(v, allowed))
        return 0;
    eng_op_ctx_t c = {.node = n, .opset = opset};
    return eng_op_err(&c, FS_ENOTSUP, "%s=%lld (%s): %s must be %s; this engine has no "
                      "4-bit, 2-bit or float8e8m0 types", name, (long long)v,
                      eng_dtype_name((eng_dtype_t)v), what,
                      allowed == dt_quant ? "uint8, int8, uint16, int16 or one of the four "
                                            "float8 formats (float8e4m3fn, float8e4m3fnuz, "
                                            "float8e5m2, float8e5m2fnuz)"
                                          : "float, float16 or bfloat16");
}

static int check_block_size(const eng_node_t *n, int opset)
{
    int64_t b = opset >= 21 ? eng_attr_i(n, "block_size", 0) : 0;
    if (b >= 0)
        return 0;
    eng_op_ctx_t c = {.node = n, .opset = opset};
    return eng_op_err(&c, FS_EINVAL, "block_size is %lld, must be >= 0", (long long)b);
}

static int quantize_check(const eng_node_t *n, int opset)
{
    int rc = check_block_size(n, opset);
    if (rc == 0 && opset >= 21)
        rc = check_dtype_attr(n, opset, "output_dtype", dt_quant, "the output dtype");
    if (rc == 0 && opset >= 23)
        rc = check_dtype_attr(n, opset, "precision", dt_scale, "the division's precision");
    return rc;
}

static int dequantize_check(const eng_node_t *n, int opset)
{
    int rc = check_block_size(n, opset);
    if (rc == 0 && opset >= 23)
        rc = check_dtype_attr(n, opset, "output_dtype", dt_scale, "the output dtype");
    return rc;
}

/* --- QuantizeLinear, DequantizeLinear ---------------------------------------------------- */

/* The map of x's elements to the parameter `scale` (input 1): per tensor
 * (one element), per axis (1-D of x's axis dim) or blocked (block_size >
 * 0). 0 or FS_EINVAL naming the shapes. */
static int quant_map(const eng_op_ctx_t *c, const char *sname, eng_quant_map_t *m)
{
    const eng_shape_t *xs = &c->inputs[0]->shape, *ss = &c->inputs[1]->shape;
    int64_t block = c->opset >= 21 ? eng_attr_i(c->node, "block_size", 0) : 0;
    char b1[96], b2[96];
    eng_shape_format(xs, b1, sizeof b1);
    eng_shape_format(ss, b2, sizeof b2);
    *m = (eng_quant_map_t){1, 1, 1, 0, 0, 0};
    if (block == 0 && eng_shape_numel(ss) == 1)
        return 0;
    int axis, rc;
    if (block == 0 && ss->rank != 1)
        return eng_op_err(c, FS_EINVAL, "%s %s must be a scalar or 1-D (per axis) for x %s "
                          "without block_size", sname, b2, b1);
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 1), xs->rank, &axis)) != 0)
        return rc;
    int64_t inner = 1;
    for (int d = axis + 1; d < xs->rank; d++)
        inner *= xs->dims[d];
    int64_t dim = xs->dims[axis];
    m->inner = inner > 0 ? inner : 1;
    m->dim = dim > 0 ? dim : 1;
    if (block == 0) {
        if (ss->dims[0] != dim)
            return eng_op_err(c, FS_EINVAL, "%s %s (per axis) must have x %s's dim %d (%lld) "
                              "elements", sname, b2, b1, axis, (long long)dim);
        m->dim_stride = 1;
        return 0;
    }
    bool ok = ss->rank == xs->rank;
    for (int d = 0; ok && d < xs->rank; d++)
        ok = d == axis ? ss->dims[d] == (dim + block - 1) / block : ss->dims[d] == xs->dims[d];
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "%s %s does not fit x %s blocked by %lld on axis %d "
                          "(x's shape with ceil(%lld / %lld) on the axis)", sname, b2, b1,
                          (long long)block, axis, (long long)dim, (long long)block);
    m->block = block;
    m->outer_stride = ss->dims[axis] * inner;
    m->dim_stride = inner;
    m->inner_stride = 1;
    return 0;
}

/* The zero point (input 2), when present, has the scale's shape. */
static int zero_point_shape(const eng_op_ctx_t *c, const char *zname, const char *sname)
{
    const eng_tensor_t *z = eng_ctx_in(c, 2), *s = c->inputs[1];
    char b1[96], b2[96];
    if (!z || eng_shape_equal(&z->shape, &s->shape) ||
        (eng_shape_numel(&z->shape) == 1 && eng_shape_numel(&s->shape) == 1))
        return 0;
    return eng_op_err(c, FS_EINVAL, "%s %s and %s %s must have the same shape", zname,
                      eng_shape_format(&z->shape, b1, sizeof b1), sname,
                      eng_shape_format(&s->shape, b2, sizeof b2));
}

int eng_quantize_linear_params(const eng_op_ctx_t *c, eng_quant_linear_t *p)
{
    int rc;
    if ((rc = eng_op_require_dtype(c, 0, dt_qlinear_x)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, dt_scale)) != 0 ||
        (eng_ctx_in(c, 2) && (rc = eng_op_require_dtype(c, 2, dt_quant)) != 0) ||
        (rc = zero_point_shape(c, "y_zero_point", "y_scale")) != 0 ||
        (rc = quant_map(c, "y_scale", &p->map)) != 0)
        return rc;
    const eng_tensor_t *z = eng_ctx_in(c, 2);
    int64_t out = c->opset >= 21 ? eng_attr_i(c->node, "output_dtype", 0) : 0;
    int64_t prec = c->opset >= 23 ? eng_attr_i(c->node, "precision", 0) : 0;
    if (z && out != 0 && out != (int64_t)z->dtype)
        return eng_op_err(c, FS_EINVAL, "output_dtype %s differs from y_zero_point's dtype %s",
                          eng_dtype_name((eng_dtype_t)out), eng_dtype_name(z->dtype));
    if ((out != 0 && !dtype_in(out, dt_quant)) || (prec != 0 && !dtype_in(prec, dt_scale)))
        return eng_op_err(c, FS_ENOTSUP, "output_dtype %s or precision %s is not supported",
                          eng_dtype_name((eng_dtype_t)out), eng_dtype_name((eng_dtype_t)prec));
    p->n = eng_shape_numel(&c->inputs[0]->shape);
    p->x_dtype = c->inputs[0]->dtype;
    p->scale_dtype = c->inputs[1]->dtype;
    p->y_dtype = z ? z->dtype : out != 0 ? (eng_dtype_t)out : ENG_DT_UINT8;
    p->prec = prec != 0 ? (eng_dtype_t)prec : p->scale_dtype;
    p->f8 = eng_dtype_is_float8(p->y_dtype) ? (int)(p->y_dtype - ENG_DT_FLOAT8E4M3FN) : -1;
    p->saturate = c->opset < 19 || eng_attr_i(c->node, "saturate", 1) != 0;
    p->has_zero_point = z != NULL;
    return 0;
}

int eng_dequantize_linear_params(const eng_op_ctx_t *c, eng_quant_linear_t *p)
{
    int rc;
    if ((rc = eng_op_require_dtype(c, 0, dt_dequant)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, dt_scale)) != 0 ||
        (rc = zero_point_shape(c, "x_zero_point", "x_scale")) != 0 ||
        (rc = quant_map(c, "x_scale", &p->map)) != 0)
        return rc;
    const eng_tensor_t *z = eng_ctx_in(c, 2);
    if (z && z->dtype != c->inputs[0]->dtype)
        return eng_op_err(c, FS_EINVAL, "x_zero_point has dtype %s, x has %s: they must match",
                          eng_dtype_name(z->dtype), eng_dtype_name(c->inputs[0]->dtype));
    int64_t out = c->opset >= 23 ? eng_attr_i(c->node, "output_dtype", 0) : 0;
    if (out != 0 && !dtype_in(out, dt_scale))
        return eng_op_err(c, FS_ENOTSUP, "output_dtype %s is not supported",
                          eng_dtype_name((eng_dtype_t)out));
    p->n = eng_shape_numel(&c->inputs[0]->shape);
    p->x_dtype = c->inputs[0]->dtype;
    p->scale_dtype = c->inputs[1]->dtype;
    p->y_dtype = out != 0 ? (eng_dtype_t)out : p->scale_dtype;
    p->prec = p->y_dtype;
    p->f8 = eng_dtype_is_float8(p->x_dtype) ? (int)(p->x_dtype - ENG_DT_FLOAT8E4M3FN) : -1;
    p->saturate = true;
    p->has_zero_point = z != NULL;
    return 0;
}

static int quantize_infer(eng_op_ctx_t *c)
{
    eng_quant_linear_t p;
    int rc = eng_quantize_linear_params(c, &p);
    if (rc == 0)
        eng_ctx_out_set(c, 0, p.y_dtype, &c->inputs[0]->shape);
    return rc;
}

static int dequantize_infer(eng_op_ctx_t *c)
{
    eng_quant_linear_t p;
    int rc = eng_dequantize_linear_params(c, &p);
    if (rc == 0)
        eng_ctx_out_set(c, 0, p.y_dtype, &c->inputs[0]->shape);
    return rc;
}

/* --- DynamicQuantizeLinear ---------------------------------------------------------------- */

static int dynamic_quantize_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, dt_float);
    if (rc)
        return rc;
    eng_shape_t scalar = {0};
    eng_ctx_out_set(c, 0, ENG_DT_UINT8, &c->inputs[0]->shape);
    eng_ctx_out_set(c, 1, ENG_DT_FLOAT, &scalar);
    eng_ctx_out_set(c, 2, ENG_DT_UINT8, &scalar);
    return 0;
}

/* --- MatMulInteger, QLinearMatMul ---------------------------------------------------------- */

typedef enum qmm_role { ROLE_A, ROLE_B, ROLE_Y } qmm_role_t;

/* The layout of parameter `in` (absent: all strides 0) for its role: A's
 * vary at most per batch and row, B's per batch and column, Y's per output
 * element. A 1-D parameter is A's rows [M] or B's (and Y's) columns [N].
 * 0 or FS_EINVAL naming the parameter and the shapes. */
static int qmm_param(const eng_op_ctx_t *c, int in, const char *name, qmm_role_t role,
                     const eng_matmul_dims_t *d, eng_qmm_param_t *p)
{
    const eng_tensor_t *t = eng_ctx_in(c, in);
    memset(p, 0, sizeof *p);
    if (!t || eng_shape_numel(&t->shape) == 1)
        return 0;
    const eng_shape_t *s = &t->shape;
    char b1[96], b2[96];
    eng_shape_format(s, b1, sizeof b1);
    eng_shape_format(&d->out, b2, sizeof b2);
    static const char *const roles[] = {"per row of A", "per column of B",
                                        "broadcast to the output"};
    /* As [batch..., rows, cols]: a 1-D parameter is one of the two. */
    int64_t rows, cols;
    int lead = s->rank - 2;
    if (s->rank == 1) {
        rows = role == ROLE_A ? s->dims[0] : 1;
        cols = role == ROLE_A ? 1 : s->dims[0];
    } else if (s->rank >= 2) {
        rows = s->dims[s->rank - 2];
        cols = s->dims[s->rank - 1];
    } else {
        return 0;
    }
    bool ok = lead <= d->batch_rank && (rows == d->m || rows == 1) &&
              (cols == d->n || cols == 1) && !(role == ROLE_A && cols != 1) &&
              !(role == ROLE_B && rows != 1);
    int64_t acc = rows * cols;
    p->col = cols == 1 ? 0 : 1;
    p->row = rows == 1 ? 0 : cols;
    for (int i = d->batch_rank - 1; ok && i >= 0; i--) {
        int si = i - (d->batch_rank - lead);
        int64_t dim = si >= 0 ? s->dims[si] : 1;
        ok = dim == 1 || dim == d->batch[i];
        p->bstride[i] = dim == 1 ? 0 : acc;
        acc *= dim;
    }
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "%s %s must be a scalar or %s (output %s)", name, b1,
                          roles[role], b2);
    return 0;
}

/* A context whose inputs 0 and 1 are c's inputs a and b (for the MatMul
 * and Conv geometry, which read those two). */
typedef struct pair_ctx {
    eng_op_ctx_t c;
    const eng_tensor_t *in[2];
} pair_ctx_t;

static void pair_ctx(const eng_op_ctx_t *c, int a, int b, pair_ctx_t *p)
{
    p->c = *c;
    p->in[0] = eng_ctx_in(c, a);
    p->in[1] = eng_ctx_in(c, b);
    p->c.inputs = p->in;
    p->c.n_inputs = 2;
    p->c.host_inputs = NULL;
}

/* Zero point `zi` (when present) has operand `oi`'s dtype. */
static int same_dtype(const eng_op_ctx_t *c, int zi, const char *zname, int oi, const char *oname)
{
    const eng_tensor_t *z = eng_ctx_in(c, zi), *o = c->inputs[oi];
    if (!z || z->dtype == o->dtype)
        return 0;
    return eng_op_err(c, FS_EINVAL, "%s has dtype %s, %s has %s: they must match", zname,
                      eng_dtype_name(z->dtype), oname, eng_dtype_name(o->dtype));
}

int eng_qmatmul_params(const eng_op_ctx_t *c, bool qlinear, eng_qmatmul_t *q)
{
    int rc;
    memset(q, 0, sizeof *q);
    q->a_in = 0;
    q->b_in = qlinear ? ENG_QMM_B : 1;
    int za = qlinear ? ENG_QMM_A_ZP : 2, zb = qlinear ? ENG_QMM_B_ZP : 3;
    for (int i = 0; i < (qlinear ? 8 : 2); i++)
        if (!eng_ctx_in(c, i))
            return eng_op_err(c, FS_EINVAL, "input %d is missing", i);
    if ((rc = eng_op_require_dtype(c, q->a_in, dt_8bit)) != 0 ||
        (rc = eng_op_require_dtype(c, q->b_in, dt_8bit)) != 0 ||
        (rc = same_dtype(c, za, "a_zero_point", q->a_in, "A")) != 0 ||
        (rc = same_dtype(c, zb, "b_zero_point", q->b_in, "B")) != 0)
        return rc;
    pair_ctx_t pc;
    pair_ctx(c, q->a_in, q->b_in, &pc);
    if ((rc = eng_matmul_dims(&pc.c, &q->d)) != 0 ||
        (rc = qmm_param(c, za, "a_zero_point", ROLE_A, &q->d, &q->a_zp)) != 0 ||
        (rc = qmm_param(c, zb, "b_zero_point", ROLE_B, &q->d, &q->b_zp)) != 0)
        return rc;
    q->a_dtype = c->inputs[q->a_in]->dtype;
    q->b_dtype = c->inputs[q->b_in]->dtype;
    q->y_dtype = ENG_DT_INT32;
    if (!qlinear)
        return 0;
    static const int scales[] = {ENG_QMM_A_SCALE, ENG_QMM_B_SCALE, ENG_QMM_Y_SCALE};
    for (int i = 0; i < 3; i++) {
        if ((rc = eng_op_require_dtype(c, scales[i], c->opset >= 21 ? dt_scale : dt_float)))
            return rc;
        if (c->inputs[scales[i]]->dtype != c->inputs[ENG_QMM_A_SCALE]->dtype)
            return eng_op_err(c, FS_EINVAL, "the scales' dtypes differ (%s, %s, %s)",
                              eng_dtype_name(c->inputs[ENG_QMM_A_SCALE]->dtype),
                              eng_dtype_name(c->inputs[ENG_QMM_B_SCALE]->dtype),
                              eng_dtype_name(c->inputs[ENG_QMM_Y_SCALE]->dtype));
    }
    if ((rc = eng_op_require_dtype(c, ENG_QMM_Y_ZP, dt_8bit)) != 0 ||
        (rc = qmm_param(c, ENG_QMM_A_SCALE, "a_scale", ROLE_A, &q->d, &q->a_scale)) != 0 ||
        (rc = qmm_param(c, ENG_QMM_B_SCALE, "b_scale", ROLE_B, &q->d, &q->b_scale)) != 0 ||
        (rc = qmm_param(c, ENG_QMM_Y_SCALE, "y_scale", ROLE_Y, &q->d, &q->y_scale)) != 0 ||
        (rc = qmm_param(c, ENG_QMM_Y_ZP, "y_zero_point", ROLE_Y, &q->d, &q->y_zp)) != 0)
        return rc;
    q->y_dtype = c->inputs[ENG_QMM_Y_ZP]->dtype;
    q->scale_dtype = c->inputs[ENG_QMM_A_SCALE]->dtype;
    return 0;
}

static int qmatmul_infer(eng_op_ctx_t *c)
{
    eng_qmatmul_t q;
    int rc = eng_qmatmul_params(c, strcmp(c->node->op_type, "QLinearMatMul") == 0, &q);
    if (rc == 0)
        eng_ctx_out_set(c, 0, q.y_dtype, &q.d.out);
    return rc;
}

/* --- ConvInteger, QLinearConv -------------------------------------------------------------- */

/* Parameter `in` (absent: fine) is per tensor, or, when per_channel, may
 * be a 1-D [m]; *stride is 1 for the latter. 0 or FS_EINVAL. */
static int conv_param(const eng_op_ctx_t *c, int in, const char *name, bool per_channel,
                      int64_t m, int64_t *stride)
{
    const eng_tensor_t *t = eng_ctx_in(c, in);
    *stride = 0;
    if (!t || eng_shape_numel(&t->shape) == 1)
        return 0;
    char b[96];
    if (per_channel && t->shape.rank == 1 && t->shape.dims[0] == m) {
        *stride = 1;
        return 0;
    }
    return eng_op_err(c, FS_EINVAL, "%s %s must be a scalar%s", name,
                      eng_shape_format(&t->shape, b, sizeof b),
                      per_channel ? " or 1-D of the output channels" : "");
}

int eng_qconv_params(const eng_op_ctx_t *c, bool qlinear, eng_qconv_t *q)
{
    int rc;
    memset(q, 0, sizeof *q);
    q->x_in = 0;
    q->x_zp_in = qlinear ? ENG_QCONV_X_ZP : 2;
    q->w_in = qlinear ? ENG_QCONV_W : 1;
    q->w_zp_in = qlinear ? ENG_QCONV_W_ZP : 3;
    for (int i = 0; i < (qlinear ? 8 : 2); i++)
        if (!eng_ctx_in(c, i))
            return eng_op_err(c, FS_EINVAL, "input %d is missing", i);
    if ((rc = eng_op_require_dtype(c, q->x_in, dt_8bit)) != 0 ||
        (rc = eng_op_require_dtype(c, q->w_in, dt_8bit)) != 0 ||
        (rc = same_dtype(c, q->x_zp_in, "x_zero_point", q->x_in, "x")) != 0 ||
        (rc = same_dtype(c, q->w_zp_in, "w_zero_point", q->w_in, "w")) != 0)
        return rc;
    pair_ctx_t pc;
    pair_ctx(c, q->x_in, q->w_in, &pc);
    int64_t unused;
    if ((rc = eng_nn_geom(&pc.c, ENG_NN_CONV, &q->g)) != 0 ||
        (rc = conv_param(c, q->x_zp_in, "x_zero_point", false, 0, &unused)) != 0 ||
        (rc = conv_param(c, q->w_zp_in, "w_zero_point", true, q->g.out_channels,
                         &q->w_zp_stride)) != 0)
        return rc;
    q->x_dtype = c->inputs[q->x_in]->dtype;
    q->w_dtype = c->inputs[q->w_in]->dtype;
    q->y_dtype = ENG_DT_INT32;
    if (!qlinear)
        return 0;
    if ((rc = eng_op_require_dtype(c, ENG_QCONV_X_SCALE, dt_float)) != 0 ||
        (rc = eng_op_require_dtype(c, ENG_QCONV_W_SCALE, dt_float)) != 0 ||
        (rc = eng_op_require_dtype(c, ENG_QCONV_Y_SCALE, dt_float)) != 0 ||
        (rc = eng_op_require_dtype(c, ENG_QCONV_Y_ZP, dt_8bit)) != 0 ||
        (rc = conv_param(c, ENG_QCONV_X_SCALE, "x_scale", false, 0, &unused)) != 0 ||
        (rc = conv_param(c, ENG_QCONV_W_SCALE, "w_scale", true, q->g.out_channels,
                         &q->w_scale_stride)) != 0 ||
        (rc = conv_param(c, ENG_QCONV_Y_SCALE, "y_scale", false, 0, &unused)) != 0 ||
        (rc = conv_param(c, ENG_QCONV_Y_ZP, "y_zero_point", false, 0, &unused)) != 0)
        return rc;
    const eng_tensor_t *bias = eng_ctx_in(c, ENG_QCONV_B);
    if (bias) {
        char b[96];
        if ((rc = eng_op_require_dtype(c, ENG_QCONV_B, dt_int32)) != 0)
            return rc;
        if (bias->shape.rank != 1 || bias->shape.dims[0] != q->g.out_channels)
            return eng_op_err(c, FS_EINVAL, "B %s must be [%lld] (the output channels)",
                              eng_shape_format(&bias->shape, b, sizeof b),
                              (long long)q->g.out_channels);
    }
    q->y_dtype = c->inputs[ENG_QCONV_Y_ZP]->dtype;
    q->scale_dtype = ENG_DT_FLOAT;
    return 0;
}

static int qconv_infer(eng_op_ctx_t *c)
{
    eng_qconv_t q;
    int rc = eng_qconv_params(c, strcmp(c->node->op_type, "QLinearConv") == 0, &q);
    if (rc)
        return rc;
    eng_shape_t s = {.rank = q.g.n_spatial + 2};
    s.dims[0] = q.g.batch;
    s.dims[1] = q.g.out_channels;
    for (int d = 0; d < q.g.n_spatial; d++)
        s.dims[2 + d] = q.g.out[ENG_NN_DIMS - q.g.n_spatial + d];
    eng_ctx_out_set(c, 0, q.y_dtype, &s);
    return 0;
}

/* Load-time check of the convolutions' auto_pad (the rest needs shapes). */
static int qconv_check(const eng_node_t *n, int opset)
{
    const char *ap = eng_attr_s(n, "auto_pad", "NOTSET");
    static const char *const known[] = {"NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(ap, known[i]) == 0)
            return 0;
    eng_op_ctx_t c = {.node = n, .opset = opset};
    return eng_op_err(&c, FS_ENOTSUP, "auto_pad '%s' is not supported (NOTSET, VALID, "
                      "SAME_UPPER, SAME_LOWER)", ap);
}

ENG_OP_DEF(QuantizeLinear, quantize_check, quantize_infer, -1);
ENG_OP_DEF(DequantizeLinear, dequantize_check, dequantize_infer, -1);
ENG_OP_DEF(DynamicQuantizeLinear, NULL, dynamic_quantize_infer, -1);
ENG_OP_DEF(MatMulInteger, NULL, qmatmul_infer, -1);
ENG_OP_DEF(QLinearMatMul, NULL, qmatmul_infer, -1);
ENG_OP_DEF(ConvInteger, qconv_check, qconv_infer, -1);
ENG_OP_DEF(QLinearConv, qconv_check, qconv_infer, -1);
