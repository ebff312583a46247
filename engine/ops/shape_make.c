/* shape_make.c -- definitions of the shape ops that make tensors rather than
 * move them: Shape, Size, ConstantOfShape, Constant and Range. As in shape.c,
 * infer touches no output on error. */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"
#include "engine/ops/shape_impl.h"

/* --- Shape, Size -------------------------------------------------------------------------- */

int eng_shapeof_params(const eng_op_ctx_t *c, int *start, int *n)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0);
    if (!x)
        return eng_op_err(c, FS_EINVAL, "required input 0 (data) is missing");
    int64_t r = x->shape.rank, s = 0, e = r;
    if (c->opset >= 15) {
        s = eng_attr_i(c->node, "start", 0);
        e = eng_attr_i(c->node, "end", r);
    }
    s = s < 0 ? s + r : s;
    e = e < 0 ? e + r : e;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    *start = (int)s;
    *n = e > s ? (int)(e - s) : 0;
    return 0;
}

int eng_shapeof_dims(const eng_op_ctx_t *c, int64_t *dims, int *n)
{
    int start;
    int rc = eng_shapeof_params(c, &start, n);
    for (int k = 0; rc == 0 && k < *n; k++)
        dims[k] = c->inputs[0]->shape.dims[start + k];
    return rc;
}

static int shape_infer(eng_op_ctx_t *c)
{
    int start, n;
    int rc = eng_shapeof_params(c, &start, &n);
    if (rc == 0)
        eng_ctx_out_set(c, 0, ENG_DT_INT64, &(eng_shape_t){.rank = 1, .dims = {n}});
    return rc;
}

static int size_infer(eng_op_ctx_t *c)
{
    if (!eng_ctx_in(c, 0))
        return eng_op_err(c, FS_EINVAL, "required input 0 (data) is missing");
    eng_ctx_out_set(c, 0, ENG_DT_INT64, &(eng_shape_t){.rank = 0});
    return 0;
}

/* --- ConstantOfShape, Constant, Range ------------------------------------------------------ */

static int constant_of_shape_check(const eng_node_t *n, int opset)
{
    const eng_attr_t *a = eng_node_attr(n, "value");
    if (!a)
        return 0;
    if (a->type != ENG_ATTR_TENSOR || eng_shape_numel(&a->t.shape) != 1)
        return ENG_NODE_ERR(n, FS_EINVAL, "attribute value must be a tensor of one element");
    if (eng_dtype_size(a->t.dtype) == 0)
        return ENG_NODE_ERR(n, FS_ENOTSUP,
                            "attribute value has dtype %s, which has no fixed "
                            "element size",
                            eng_dtype_name(a->t.dtype));
    return 0;
}

int eng_constant_of_shape_value(const eng_op_ctx_t *c, eng_dtype_t *dtype, const void **value)
{
    static const float zero = 0.0f;
    int rc = constant_of_shape_check(c->node, c->opset);
    if (rc != 0)
        return rc;
    const eng_attr_t *a = eng_node_attr(c->node, "value");
    *dtype = a ? a->t.dtype : ENG_DT_FLOAT;
    *value = a ? a->t.data : &zero;
    return 0;
}

static int constant_of_shape_infer(eng_op_ctx_t *c)
{
    eng_dtype_t dt;
    const void *value;
    const eng_tensor_t *s;
    int64_t n;
    int rc;
    if ((rc = eng_constant_of_shape_value(c, &dt, &value)) != 0 ||
        (rc = eng_shapeops_in_ints(c, 0, "input", true, &s, &n)) != 0)
        return rc;
    if (n > ENG_MAX_RANK)
        return eng_op_err(c, FS_ENOTSUP, "the output would have rank %lld; at most %d is "
                          "supported", (long long)n, ENG_MAX_RANK);
    eng_shape_t out = {.rank = (int)n};
    for (int d = 0; d < out.rank; d++) {
        out.dims[d] = eng_tensor_get_i64(s, d);
        if (out.dims[d] < 0)
            return eng_op_err(c, FS_EINVAL, "output dim %d is %lld", d, (long long)out.dims[d]);
    }
    eng_ctx_out_set(c, 0, dt, &out);
    return 0;
}

/* The attributes a Constant may carry, in the order they are looked for. */
static const char *const constant_attrs[] = {"value", "value_float", "value_floats", "value_int",
                                             "value_ints"};

static int constant_check(const eng_node_t *n, int opset)
{
    static const char *const unsupported[] = {"value_string", "value_strings", "sparse_value"};
    for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++)
        if (eng_node_attr(n, unsupported[k]))
            return ENG_NODE_ERR(n, FS_ENOTSUP, "attribute %s is not supported", unsupported[k]);
    int found = 0;
    for (size_t k = 0; k < sizeof constant_attrs / sizeof constant_attrs[0]; k++)
        found += eng_node_attr(n, constant_attrs[k]) != NULL;
    if (found != 1)
        return ENG_NODE_ERR(n, FS_EINVAL, "exactly one value attribute is required, not %d", found);
    const eng_tensor_t *t = eng_attr_tensor(n, "value");
    if (t && eng_dtype_size(t->dtype) == 0)
        return ENG_NODE_ERR(n, FS_ENOTSUP, "value has dtype %s, which has no fixed element size",
                            eng_dtype_name(t->dtype));
    return 0;
}

int eng_constant_params(const eng_op_ctx_t *c, eng_tensor_t *value)
{
    int rc = constant_check(c->node, c->opset);
    if (rc != 0)
        return rc;
    const eng_attr_t *a;
    *value = (eng_tensor_t){0};
    /* The views point into the graph's attributes, which outlive every
     * context; kernels only read through them. */
    if ((a = eng_node_attr(c->node, "value")) != NULL && a->type == ENG_ATTR_TENSOR) {
        *value = a->t;
    } else if ((a = eng_node_attr(c->node, "value_float")) != NULL && a->type == ENG_ATTR_FLOAT) {
        *value = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .data = (void *)&a->f};
    } else if ((a = eng_node_attr(c->node, "value_floats")) != NULL &&
               a->type == ENG_ATTR_FLOATS) {
        *value = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {.rank = 1,
                                .dims = {(int64_t)a->n}}, .data = (void *)a->floats};
    } else if ((a = eng_node_attr(c->node, "value_int")) != NULL && a->type == ENG_ATTR_INT) {
        *value = (eng_tensor_t){.dtype = ENG_DT_INT64, .data = (void *)&a->i};
    } else if ((a = eng_node_attr(c->node, "value_ints")) != NULL && a->type == ENG_ATTR_INTS) {
        *value = (eng_tensor_t){.dtype = ENG_DT_INT64, .shape = {.rank = 1,
                                .dims = {(int64_t)a->n}}, .data = (void *)a->ints};
    } else {
        return eng_op_err(c, FS_EINVAL, "the value attribute has the wrong type");
    }
    return 0;
}

static int constant_infer(eng_op_ctx_t *c)
{
    eng_tensor_t v;
    int rc = eng_constant_params(c, &v);
    if (rc == 0)
        eng_ctx_out_set(c, 0, v.dtype, &v.shape);
    return rc;
}

/* A Range input's one element, as a double or an int64. */
static double range_f(const eng_tensor_t *t)
{
    return t->dtype == ENG_DT_FLOAT ? *(const float *)t->data : *(const double *)t->data;
}

static int64_t range_i(const eng_tensor_t *t)
{
    if (t->dtype == ENG_DT_INT16)
        return *(const int16_t *)t->data;
    return eng_tensor_get_i64(t, 0);
}

static int range_infer(eng_op_ctx_t *c)
{
    static const eng_dtype_t types[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT16, ENG_DT_INT32,
                                        ENG_DT_INT64, ENG_DT_UNDEFINED};
    static const char *const names[] = {"start", "limit", "delta"};
    const eng_tensor_t *t[3];
    for (int i = 0; i < 3; i++) {
        int rc;
        if ((rc = eng_shapeops_in_data(c, i, names[i], &t[i])) != 0 ||
            (rc = eng_op_require_dtype(c, i, types)) != 0)
            return rc;
        if (t[i]->dtype != t[0]->dtype || eng_shape_numel(&t[i]->shape) != 1 ||
            t[i]->shape.rank > 1)
            return eng_op_err(c, FS_EINVAL, "%s must be a scalar of %s like start", names[i],
                              eng_dtype_name(t[0]->dtype));
    }
    for (int i = 0; i < 3; i++)
        if (!t[i]->data)
            return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input %d "
                              "(%s), which is not known before running", i, names[i]);
    int64_t n;
    if (t[0]->dtype == ENG_DT_FLOAT || t[0]->dtype == ENG_DT_DOUBLE) {
        double start = range_f(t[0]), limit = range_f(t[1]), delta = range_f(t[2]);
        double count = delta != 0 ? ceil((limit - start) / delta) : 0;
        if (delta == 0 || !(count < 9.2e18))
            return eng_op_err(c, FS_EINVAL, "delta %g from %g to %g gives no finite range",
                              delta, start, limit);
        n = count > 0 ? (int64_t)count : 0;
    } else {
        int64_t start = range_i(t[0]), limit = range_i(t[1]), delta = range_i(t[2]), diff;
        if (delta == 0 || __builtin_sub_overflow(limit, start, &diff))
            return eng_op_err(c, FS_EINVAL, "delta %lld from %lld to %lld gives no range",
                              (long long)delta, (long long)start, (long long)limit);
        n = 0;
        if ((diff > 0 && delta > 0) || (diff < 0 && delta < 0))
            n = diff / delta + (diff % delta != 0);
    }
    eng_ctx_out_set(c, 0, t[0]->dtype, &(eng_shape_t){.rank = 1, .dims = {n}});
    return 0;
}

ENG_OP_DEF(Shape, NULL, shape_infer, -1);
ENG_OP_DEF(Size, NULL, size_infer, -1);
ENG_OP_DEF(ConstantOfShape, constant_of_shape_check, constant_of_shape_infer, -1);
ENG_OP_DEF(Constant, constant_check, constant_infer, -1);
ENG_OP_DEF(Range, NULL, range_infer, -1);
