/* reduce.c -- definitions (validation, dtype and shape inference) of the reduce
 * ops: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum and CumProd. */
#include <string.h>

#include "common/error.h"
#include "engine/ops/reduce_impl.h"

static const eng_dtype_t numeric[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT32, ENG_DT_INT64,
                                      ENG_DT_UNDEFINED};
/* The logs (ReduceLogSum, ReduceLogSumExp) are computed in float types only. */
static const eng_dtype_t float_double[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_UNDEFINED};
static const eng_dtype_t index_types[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};
/* Reduce*, Softmax and LogSoftmax also take float16 and bfloat16 as they
 * are (a GPU reads them into float accumulators, the CPU computes through
 * float): the lists above with the two half dtypes added. ReduceMax and
 * ReduceMin take bool from opset 20 (any and all). */
static const eng_dtype_t numeric_half[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT32,
                                           ENG_DT_INT64, ENG_DT_FLOAT16, ENG_DT_BFLOAT16,
                                           ENG_DT_UNDEFINED};
static const eng_dtype_t numeric_bool_half[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_INT32,
                                                ENG_DT_INT64, ENG_DT_BOOL, ENG_DT_FLOAT16,
                                                ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};
static const eng_dtype_t float_double_half[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                                ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};

/* The opset from which a Reduce* op takes `axes` as an input, not an
 * attribute. */
static int axes_input_opset(const char *op_type)
{
    return strcmp(op_type, "ReduceSum") == 0 ? 13 : 18;
}

int eng_reduce_axes(const eng_op_ctx_t *c, eng_reduce_axes_t *out)
{
    int rank = c->inputs[0]->shape.rank;
    memset(out, 0, sizeof *out);
    out->keepdims = eng_attr_i(c->node, "keepdims", 1) != 0;
    bool from_input = c->opset >= axes_input_opset(c->node->op_type);
    const eng_tensor_t *t = NULL;
    const int64_t *attr = NULL;
    int64_t n_axes = 0;
    if (from_input) {
        t = eng_ctx_in(c, 1);
        n_axes = t ? eng_shape_numel(&t->shape) : 0;
        if (t && n_axes > 0) {
            int rc = eng_op_require_dtype(c, 1, index_types);
            if (rc)
                return rc;
            if (t->shape.rank != 1)
                return eng_op_err(c, FS_EINVAL, "the axes input must be 1-D, not rank %d",
                                  t->shape.rank);
            if (!t->data)
                return eng_op_err(c, FS_EDYNAMIC, "the axes input's value is only known at run time");
        }
    } else {
        size_t count;
        attr = eng_attr_ints(c->node, "axes", &count);
        n_axes = (int64_t)count;
    }
    if (n_axes == 0) {
        out->noop = from_input && eng_attr_i(c->node, "noop_with_empty_axes", 0) != 0;
        for (int d = 0; d < rank; d++)
            out->reduced[d] = !out->noop;
        return 0;
    }
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t a = attr ? attr[i] : eng_tensor_get_i64(t, i);
        int axis;
        int rc = eng_op_axis(c, a, rank, &axis);
        if (rc)
            return rc;
        if (out->reduced[axis])
            return eng_op_err(c, FS_EINVAL, "axis %lld is listed twice in axes", (long long)a);
        out->reduced[axis] = true;
    }
    return 0;
}

void eng_axis_extent(const eng_shape_t *s, int axis, bool flatten_tail, int64_t *outer, int64_t *n,
                     int64_t *inner)
{
    *outer = 1;
    *n = 1;
    *inner = 1;
    for (int d = 0; d < s->rank; d++) {
        if (d < axis)
            *outer *= s->dims[d];
        else if (d == axis || flatten_tail)
            *n *= s->dims[d];
        else
            *inner *= s->dims[d];
    }
}

int eng_softmax_axis(const eng_op_ctx_t *c, int *axis, bool *flatten_tail)
{
    *flatten_tail = c->opset < 13;
    return eng_op_axis(c, eng_attr_i(c->node, "axis", *flatten_tail ? 1 : -1),
                       c->inputs[0]->shape.rank, axis);
}

int eng_cumsum_axis(const eng_op_ctx_t *c, int *axis)
{
    const eng_tensor_t *t = eng_ctx_in(c, 1);
    int rc = eng_op_require_dtype(c, 1, index_types);
    if (rc)
        return rc;
    if (t->shape.rank > 1 || eng_shape_numel(&t->shape) != 1)
        return eng_op_err(c, FS_EINVAL, "the axis input must hold one value, not %lld (rank %d)",
                          (long long)eng_shape_numel(&t->shape), t->shape.rank);
    return eng_op_axis(c, eng_tensor_get_i64(t, 0), c->inputs[0]->shape.rank, axis);
}

/* Output 0 takes input 0's dtype and shape. Cannot fail. */
static void same_as_input(eng_op_ctx_t *c)
{
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &c->inputs[0]->shape);
}

/* xs without the dims marked in `reduced`, or with them as 1 when
 * keepdims: the shape a reduction over those dims leaves. */
static eng_shape_t reduced_shape(const eng_shape_t *xs, const bool *reduced, bool keepdims)
{
    eng_shape_t ys = {0};
    for (int d = 0; d < xs->rank; d++) {
        if (!reduced[d])
            ys.dims[ys.rank++] = xs->dims[d];
        else if (keepdims)
            ys.dims[ys.rank++] = 1;
    }
    return ys;
}

/* Fails naming the node when an opset that takes `axes` as an input sees
 * it as an attribute (the model would mean something else). */
static int reduce_check(const eng_node_t *n, int opset)
{
    int from = axes_input_opset(n->op_type);
    if (opset >= from && eng_node_attr(n, "axes")) {
        eng_op_ctx_t c = {.node = n, .opset = opset};
        return eng_op_err(&c, FS_EINVAL, "axes is an input from opset %d, not an attribute "
                          "(model opset %d)", from, opset);
    }
    return 0;
}

/* The infer hooks below write output 0 only once every check has passed:
 * on error it is untouched and the message names the node. */
static int reduce_infer(eng_op_ctx_t *c)
{
    bool minmax = strcmp(c->node->op_type, "ReduceMax") == 0 ||
                  strcmp(c->node->op_type, "ReduceMin") == 0;
    bool logs = strncmp(c->node->op_type, "ReduceLog", 9) == 0;
    int rc = eng_op_require_dtype(c, 0, minmax ? numeric_bool_half
                                        : logs ? float_double_half
                                               : numeric_half);
    eng_reduce_axes_t ax;
    if (rc || (rc = eng_reduce_axes(c, &ax)))
        return rc;
    eng_shape_t ys = reduced_shape(&c->inputs[0]->shape, ax.reduced, ax.keepdims);
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &ys);
    return 0;
}

static int arg_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, numeric);
    if (rc)
        return rc;
    const eng_shape_t *xs = &c->inputs[0]->shape;
    int axis;
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), xs->rank, &axis)))
        return rc;
    if (xs->dims[axis] == 0)
        return eng_op_err(c, FS_EINVAL, "axis %d has size 0: there is no element to pick", axis);
    bool reduced[ENG_MAX_RANK] = {false};
    reduced[axis] = true;
    eng_shape_t ys = reduced_shape(xs, reduced, eng_attr_i(c->node, "keepdims", 1) != 0);
    eng_ctx_out_set(c, 0, ENG_DT_INT64, &ys);
    return 0;
}

/* Softmax, LogSoftmax and Hardmax: float or double (and half but for
 * Hardmax), softmax's axis rule. */
static int softmax_infer(eng_op_ctx_t *c)
{
    bool hard = strcmp(c->node->op_type, "Hardmax") == 0;
    int rc = eng_op_require_dtype(c, 0, hard ? float_double : float_double_half);
    int axis;
    bool flatten_tail;
    if (rc || (rc = eng_softmax_axis(c, &axis, &flatten_tail)))
        return rc;
    same_as_input(c);
    return 0;
}

static int cumsum_infer(eng_op_ctx_t *c)
{
    int rc = eng_op_require_dtype(c, 0, numeric);
    if (rc)
        return rc;
    const eng_tensor_t *t = eng_ctx_in(c, 1);
    if (!t)
        return eng_op_err(c, FS_EINVAL, "the axis input is missing");
    int axis;
    if (t->data) {
        if ((rc = eng_cumsum_axis(c, &axis)))
            return rc;
    } else if ((rc = eng_op_require_dtype(c, 1, index_types))) {
        return rc;
    }
    same_as_input(c);
    return 0;
}

#define REDUCE_DEF(op) ENG_OP_DEF(op, reduce_check, reduce_infer, -1)

REDUCE_DEF(ReduceL1);
REDUCE_DEF(ReduceL2);
REDUCE_DEF(ReduceLogSum);
REDUCE_DEF(ReduceLogSumExp);
REDUCE_DEF(ReduceMax);
REDUCE_DEF(ReduceMean);
REDUCE_DEF(ReduceMin);
REDUCE_DEF(ReduceProd);
REDUCE_DEF(ReduceSum);
REDUCE_DEF(ReduceSumSquare);
ENG_OP_DEF(ArgMax, NULL, arg_infer, -1);
ENG_OP_DEF(ArgMin, NULL, arg_infer, -1);
ENG_OP_DEF(Softmax, NULL, softmax_infer, -1);
ENG_OP_DEF(LogSoftmax, NULL, softmax_infer, -1);
ENG_OP_DEF(Hardmax, NULL, softmax_infer, -1);
ENG_OP_DEF(CumSum, NULL, cumsum_infer, -1);
ENG_OP_DEF(CumProd, NULL, cumsum_infer, -1);
