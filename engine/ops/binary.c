/* binary.c -- definitions (validation, dtype and shape inference) of the
 * broadcasting element-wise ops: arithmetic, comparisons, logic, PRelu, Where,
 * the variadic Max/Min/Mean/Sum, and the bitwise And/Or/Xor and BitShift. The output shape is the numpy broadcast
 * of the inputs' shapes (PRelu's slope broadcasts to X only). */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"
#include "engine/ops/binary_impl.h"

/* float16 and bfloat16 are computed through each op's float kernel on both
 * devices (rounded once per element), so they are in the lists that have
 * float -- all but Pow's exponent, which takes them only with a base of the
 * same dtype (infer_pow). */
static const eng_dtype_t dt_numeric[] = {ENG_DT_FLOAT,  ENG_DT_DOUBLE, ENG_DT_INT8,
                                         ENG_DT_INT16,  ENG_DT_INT32,  ENG_DT_INT64,
                                         ENG_DT_UINT8,  ENG_DT_UINT16, ENG_DT_UINT32,
                                         ENG_DT_UINT64, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_arith[] = {
    ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,   ENG_DT_INT16,
    ENG_DT_INT32, ENG_DT_INT64,  ENG_DT_UINT8,   ENG_DT_UINT16,   ENG_DT_UINT32, ENG_DT_UINT64,
    ENG_DT_UNDEFINED};
static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                       ENG_DT_BFLOAT16, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_bool[] = {ENG_DT_BOOL, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_pow_base[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                          ENG_DT_BFLOAT16, ENG_DT_INT32, ENG_DT_INT64,
                                          ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int[] = {ENG_DT_INT8,   ENG_DT_INT16,  ENG_DT_INT32,
                                     ENG_DT_INT64,  ENG_DT_UINT8,  ENG_DT_UINT16,
                                     ENG_DT_UINT32, ENG_DT_UINT64, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_uint[] = {ENG_DT_UINT8, ENG_DT_UINT16, ENG_DT_UINT32, ENG_DT_UINT64,
                                      ENG_DT_UNDEFINED};
static const eng_dtype_t dt_prelu[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16,
                                       ENG_DT_BFLOAT16, ENG_DT_INT32, ENG_DT_INT64,
                                       ENG_DT_UNDEFINED};

/* The broadcast of inputs [first, n_inputs), all present. 0, or FS_EINVAL
 * naming the input that is missing or does not broadcast; *out is then
 * undefined. */
static int broadcast_inputs(const eng_op_ctx_t *c, int first, eng_shape_t *out)
{
    for (int i = first; i < c->n_inputs; i++) {
        const eng_tensor_t *t = c->inputs[i];
        if (!t)
            return eng_op_err(c, FS_EINVAL, "input %d is missing", i);
        if (i == first) {
            *out = t->shape;
            continue;
        }
        eng_shape_t acc = *out;
        if (eng_shape_broadcast(&acc, &t->shape, out) != 0) {
            char a[96], b[96];
            return eng_op_err(c, FS_EINVAL, "input %d's shape %s does not broadcast with %s", i,
                              eng_shape_format(&t->shape, b, sizeof b),
                              eng_shape_format(&acc, a, sizeof a));
        }
    }
    return 0;
}

/* Inputs [first, n_inputs) must share input `first`'s dtype, one of
 * `allowed`. 0, or FS_ENOTSUP (dtype) / FS_EINVAL (mixed or missing). */
static int same_dtype(const eng_op_ctx_t *c, int first, const eng_dtype_t *allowed)
{
    int rc = eng_op_require_dtype(c, first, allowed);
    if (rc)
        return rc;
    eng_dtype_t dt = c->inputs[first]->dtype;
    for (int i = first + 1; i < c->n_inputs; i++) {
        const eng_tensor_t *t = c->inputs[i];
        if (!t)
            return eng_op_err(c, FS_EINVAL, "input %d is missing", i);
        if (t->dtype != dt)
            return eng_op_err(c, FS_EINVAL, "input %d has dtype %s, input %d has %s", i,
                              eng_dtype_name(t->dtype), first, eng_dtype_name(dt));
    }
    return 0;
}

int eng_binary_legacy_ctx(const eng_op_ctx_t *c, eng_binary_legacy_t *lg)
{
    eng_op_ctx_t *out = &lg->ctx;
    const eng_tensor_t **ins = lg->ins;
    eng_tensor_t *view = &lg->view;
    *out = *c;
    if (c->opset >= 7 || c->n_inputs != 2 || !c->inputs[0] || !c->inputs[1])
        return 0;
    const eng_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    ins[0] = a;
    ins[1] = b;
    out->inputs = ins;
    char as[96], bs[96];
    int rank_a = a->shape.rank, rank_b = b->shape.rank;
    int axis = -1; /* where B's dims start in A's; -1: as they are */
    if (strcmp(c->node->op_type, "PRelu") == 0) {
        if (rank_b == 1 && rank_a >= 2 && b->shape.dims[0] == a->shape.dims[1] &&
            b->shape.dims[0] != 1)
            axis = 1;
    } else if (eng_attr_i(c->node, "broadcast", 0) == 0) {
        if (!eng_shape_equal(&a->shape, &b->shape))
            return eng_op_err(c, FS_EINVAL, "at opset %d without broadcast=1 the inputs need "
                              "equal shapes, got %s and %s", c->opset,
                              eng_shape_format(&a->shape, as, sizeof as),
                              eng_shape_format(&b->shape, bs, sizeof bs));
    } else if (eng_node_attr(c->node, "axis")) {
        int64_t ax = eng_attr_i(c->node, "axis", 0);
        if (ax < 0)
            ax += rank_a;
        if (ax < 0 || ax + rank_b > rank_a)
            return eng_op_err(c, FS_EINVAL, "broadcast axis %lld does not fit %s into %s",
                              (long long)eng_attr_i(c->node, "axis", 0),
                              eng_shape_format(&b->shape, bs, sizeof bs),
                              eng_shape_format(&a->shape, as, sizeof as));
        axis = (int)ax;
    }
    if (axis < 0 || axis + rank_b == rank_a)
        return 0;
    *view = *b;
    view->shape.rank = rank_a - axis;
    for (int d = rank_b; d < view->shape.rank; d++)
        view->shape.dims[d] = 1;
    ins[1] = view;
    return 0;
}

int eng_binary_pair_ctx(const eng_op_ctx_t *c, eng_binary_legacy_t *lg)
{
    if (c->n_inputs != 2)
        return eng_op_err(c, FS_EINVAL, "has %d inputs, expected 2", c->n_inputs);
    return eng_binary_legacy_ctx(c, lg);
}

int eng_binary_check_io(const eng_op_ctx_t *c, int n, eng_dtype_t out_dt)
{
    if (n < 1)
        return eng_op_err(c, FS_EINVAL, "needs at least one input");
    for (int i = 0; i < n; i++) {
        const eng_tensor_t *t = eng_ctx_in(c, i);
        if (!t)
            return eng_op_err(c, FS_EINVAL, "input %d is missing", i);
        if (t->dtype != c->inputs[0]->dtype)
            return eng_op_err(c, FS_EINVAL, "input %d has dtype %s, input 0 has %s", i,
                              eng_dtype_name(t->dtype), eng_dtype_name(c->inputs[0]->dtype));
    }
    const eng_tensor_t *y = c->n_outputs > 0 ? c->outputs[0] : NULL;
    if (!y)
        return eng_op_err(c, FS_EINVAL, "output 0 is missing");
    eng_dtype_t want = out_dt == ENG_DT_UNDEFINED ? c->inputs[0]->dtype : out_dt;
    if (y->dtype != want)
        return eng_op_err(c, FS_EINVAL, "output dtype is %s, expected %s",
                          eng_dtype_name(y->dtype), eng_dtype_name(want));
    return 0;
}

int eng_binary_where_check(const eng_op_ctx_t *c)
{
    const eng_tensor_t *cond = eng_ctx_in(c, 0), *x = eng_ctx_in(c, 1), *yv = eng_ctx_in(c, 2);
    const eng_tensor_t *out = c->n_outputs > 0 ? c->outputs[0] : NULL;
    if (!cond || !x || !yv || !out)
        return eng_op_err(c, FS_EINVAL, "an input or the output is missing");
    if (cond->dtype != ENG_DT_BOOL || x->dtype != yv->dtype || out->dtype != x->dtype)
        return eng_op_err(c, FS_EINVAL, "dtypes condition %s, X %s, Y %s, output %s: expected "
                          "bool and three equal", eng_dtype_name(cond->dtype),
                          eng_dtype_name(x->dtype), eng_dtype_name(yv->dtype),
                          eng_dtype_name(out->dtype));
    return 0;
}

int eng_binary_bcast(const eng_op_ctx_t *c, const eng_tensor_t *y, const eng_tensor_t *const *in,
                     int n_in, eng_binary_bcast_t *l)
{
    const int rank = y->shape.rank;
    int64_t (*stride)[ENG_MAX_RANK] = l->stride;
    for (int k = 0; k <= n_in; k++) {
        const eng_tensor_t *t = k == 0 ? y : in[k - 1];
        const int r = t->shape.rank, off = rank - r;
        if (r > rank || eng_dtype_size(t->dtype) == 0)
            return eng_op_err(c, FS_EINVAL, "operand %d (rank %d, dtype %s) does not fit the "
                              "output of rank %d", k, r, eng_dtype_name(t->dtype), rank);
        int64_t acc = 1;
        for (int d = rank - 1; d >= 0; d--) {
            const int64_t dim = d < off ? 1 : t->shape.dims[d - off];
            if (dim != 1 && dim != y->shape.dims[d])
                return eng_op_err(c, FS_EINVAL, "input %d's dim %d is %lld, the output's %lld",
                                  k - 1, d - off, (long long)dim, (long long)y->shape.dims[d]);
            stride[k][d] = dim == 1 ? 0 : acc;
            acc *= dim;
        }
    }
    /* Collapsing in place: output dim p is written only after input dims
     * up to d >= p have been read. */
    l->rank = 0;
    for (int d = 0; d < rank; d++) {
        const int64_t dim = y->shape.dims[d];
        if (dim == 1)
            continue;
        int p = l->rank - 1;
        bool merge = p >= 0;
        for (int k = 0; merge && k <= n_in; k++)
            merge = stride[k][p] == stride[k][d] * dim;
        if (merge) {
            l->dims[p] *= dim;
            for (int k = 0; k <= n_in; k++)
                stride[k][p] = stride[k][d];
            continue;
        }
        p = l->rank++;
        l->dims[p] = dim;
        for (int k = 0; k <= n_in; k++)
            stride[k][p] = stride[k][d];
    }
    if (l->rank == 0) { /* every dim is 1: one element */
        l->rank = 1;
        l->dims[0] = 1;
        for (int k = 0; k <= n_in; k++)
            stride[k][0] = k == 0;
    }
    return 0;
}

/* Inputs of one dtype from `allowed`, broadcast; output of dtype `out_dt`
 * (ENG_DT_UNDEFINED: the inputs'). `c` is the node's context, or for a
 * two-input op the one eng_binary_pair_ctx made. */
static int infer_same_dtype(eng_op_ctx_t *c, const eng_dtype_t *allowed, eng_dtype_t out_dt)
{
    int rc = same_dtype(c, 0, allowed);
    eng_shape_t shape;
    if (rc == 0)
        rc = broadcast_inputs(c, 0, &shape);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, out_dt == ENG_DT_UNDEFINED ? c->inputs[0]->dtype : out_dt, &shape);
    return 0;
}

/* Two inputs (seen as opset 1..6 broadcasting needs), else as infer_same_dtype. */
static int infer_pair(eng_op_ctx_t *c, const eng_dtype_t *allowed, eng_dtype_t out_dt)
{
    eng_binary_legacy_t lg;
    int rc = eng_binary_pair_ctx(c, &lg);
    return rc ? rc : infer_same_dtype(&lg.ctx, allowed, out_dt);
}

/* One or more inputs (Max, Min, Mean, Sum), else as infer_same_dtype. */
static int infer_variadic(eng_op_ctx_t *c, const eng_dtype_t *allowed)
{
    if (c->n_inputs < 1)
        return eng_op_err(c, FS_EINVAL, "has no inputs, expected at least 1");
    return infer_same_dtype(c, allowed, ENG_DT_UNDEFINED);
}

static int infer_arith(eng_op_ctx_t *c)
{
    return infer_pair(c, dt_arith, ENG_DT_UNDEFINED);
}

static int infer_logic(eng_op_ctx_t *c)
{
    return infer_pair(c, dt_bool, ENG_DT_BOOL);
}

/* Strings too from opset 19 (ONNX added them then; the kernel compares
 * bytes at any opset, so an older model is taken as well). */
static int infer_equal(eng_op_ctx_t *c)
{
    static const eng_dtype_t dt_equal[] = {
        ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,
        ENG_DT_INT16, ENG_DT_INT32,  ENG_DT_INT64,   ENG_DT_UINT8,    ENG_DT_UINT16,
        ENG_DT_UINT32, ENG_DT_UINT64, ENG_DT_BOOL,   ENG_DT_STRING,   ENG_DT_UNDEFINED};
    return infer_pair(c, dt_equal, ENG_DT_BOOL);
}

static int infer_compare(eng_op_ctx_t *c)
{
    return infer_pair(c, dt_arith, ENG_DT_BOOL);
}

static int infer_minmax(eng_op_ctx_t *c)
{
    return infer_variadic(c, dt_arith);
}

/* float16 and bfloat16 only as far as eng_binary_sum_native: more inputs
 * are refused (FS_ENOTSUP) and so widened. */
static int infer_sum(eng_op_ctx_t *c)
{
    int rc = infer_variadic(c, dt_float);
    if (rc == 0 && !eng_binary_sum_native(c->inputs[0]->dtype, c->n_inputs))
        return eng_op_err(c, FS_ENOTSUP, "%d %s inputs are summed through float", c->n_inputs,
                          eng_dtype_name(c->inputs[0]->dtype));
    return rc;
}

/* Pow's base and exponent may differ in type (T1, T2 from opset 12); the
 * output has the base's. A float16 or bfloat16 base takes an exponent of
 * its own dtype only, and a half exponent only such a base: other pairings
 * are refused (FS_ENOTSUP) and so widened to float. */
static int infer_pow(eng_op_ctx_t *oc)
{
    eng_binary_legacy_t lg;
    eng_op_ctx_t *c = &lg.ctx;
    int rc = eng_binary_pair_ctx(oc, &lg);
    if (rc == 0)
        rc = eng_op_require_dtype(c, 0, dt_pow_base);
    if (rc == 0) {
        const eng_dtype_t base = c->inputs[0]->dtype;
        const eng_dtype_t same[] = {base, ENG_DT_UNDEFINED};
        rc = eng_op_require_dtype(c, 1, base == ENG_DT_FLOAT16 || base == ENG_DT_BFLOAT16
                                            ? same : dt_numeric);
    }
    eng_shape_t shape;
    if (rc == 0)
        rc = broadcast_inputs(c, 0, &shape);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &shape);
    return 0;
}

static int check_mod(const eng_node_t *n, int opset)
{
    int64_t fmod = eng_attr_i(n, "fmod", 0);
    if (fmod != 0 && fmod != 1) {
        eng_op_ctx_t c = {.node = n, .opset = opset}; /* at load there is no context yet */
        return eng_op_err(&c, FS_EINVAL, "fmod is %lld, must be 0 or 1", (long long)fmod);
    }
    return 0;
}

/* Floating-point Mod must have fmod=1 (the ONNX spec). */
static int infer_mod(eng_op_ctx_t *c)
{
    int rc = check_mod(c->node, c->opset);
    if (rc == 0)
        rc = infer_arith(c);
    if (rc)
        return rc;
    eng_dtype_t dt = c->inputs[0]->dtype;
    if ((dt == ENG_DT_FLOAT || dt == ENG_DT_DOUBLE || dt == ENG_DT_FLOAT16 ||
         dt == ENG_DT_BFLOAT16) && eng_attr_i(c->node, "fmod", 0) != 1)
        return eng_op_err(c, FS_EINVAL, "fmod must be 1 for dtype %s", eng_dtype_name(dt));
    return 0;
}

/* slope broadcasts to X (unidirectionally): the output has X's shape. */
static int infer_prelu(eng_op_ctx_t *oc)
{
    eng_binary_legacy_t lg;
    eng_op_ctx_t *c = &lg.ctx;
    eng_shape_t shape;
    int rc = eng_binary_pair_ctx(oc, &lg);
    if (rc == 0)
        rc = same_dtype(c, 0, dt_prelu);
    if (rc == 0)
        rc = broadcast_inputs(c, 0, &shape);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0], *slope = c->inputs[1];
    if (!eng_shape_equal(&shape, &x->shape)) {
        char xs[96], ss[96];
        return eng_op_err(c, FS_EINVAL, "slope %s does not broadcast to X %s",
                          eng_shape_format(&slope->shape, ss, sizeof ss),
                          eng_shape_format(&x->shape, xs, sizeof xs));
    }
    eng_ctx_out_set(c, 0, x->dtype, &shape);
    return 0;
}

static int infer_bitwise(eng_op_ctx_t *c)
{
    return infer_pair(c, dt_int, ENG_DT_UNDEFINED);
}

int eng_binary_shift_left(const eng_node_t *n, bool *left)
{
    const char *d = eng_attr_s(n, "direction", "");
    if (strcmp(d, "LEFT") != 0 && strcmp(d, "RIGHT") != 0) {
        eng_op_ctx_t c = {.node = n}; /* at load there is no context yet */
        return eng_op_err(&c, FS_EINVAL, "direction '%s' must be LEFT or RIGHT", d);
    }
    *left = d[0] == 'L';
    return 0;
}

static int check_bitshift(const eng_node_t *n, int opset)
{
    (void)opset;
    bool left;
    return eng_binary_shift_left(n, &left);
}

/* Unsigned integers only (ONNX's T for BitShift). */
static int infer_bitshift(eng_op_ctx_t *c)
{
    int rc = check_bitshift(c->node, c->opset);
    return rc ? rc : infer_pair(c, dt_uint, ENG_DT_UNDEFINED);
}

/* condition (bool), X and Y (one dtype of 1, 2, 4 or 8 bytes), all three
 * broadcast. */
static int infer_where(eng_op_ctx_t *c)
{
    if (c->n_inputs != 3)
        return eng_op_err(c, FS_EINVAL, "has %d inputs, expected 3", c->n_inputs);
    int rc = eng_op_require_dtype(c, 0, dt_bool);
    if (rc == 0 && !c->inputs[1])
        rc = eng_op_err(c, FS_EINVAL, "input 1 is missing");
    if (rc)
        return rc;
    eng_dtype_t dt = c->inputs[1]->dtype;
    size_t es = eng_dtype_size(dt);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return eng_op_err(c, FS_ENOTSUP, "dtype %s not supported", eng_dtype_name(dt));
    const eng_dtype_t allowed[] = {dt, ENG_DT_UNDEFINED};
    eng_shape_t shape;
    rc = same_dtype(c, 1, allowed);
    if (rc == 0)
        rc = broadcast_inputs(c, 0, &shape);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, dt, &shape);
    return 0;
}

/* In place on input 0 (input 1 for Where's X) is safe: each output element
 * reads the same index of that input, when the planner gives it the same
 * shape, before writing it. The variadic ops fold input 0 into the output
 * first. */
ENG_OP_DEF(Add, NULL, infer_arith, 0);
ENG_OP_DEF(Sub, NULL, infer_arith, 0);
ENG_OP_DEF(Mul, NULL, infer_arith, 0);
ENG_OP_DEF(Div, NULL, infer_arith, 0);
ENG_OP_DEF(Pow, NULL, infer_pow, 0);
ENG_OP_DEF(Mod, check_mod, infer_mod, 0);
ENG_OP_DEF(And, NULL, infer_logic, 0);
ENG_OP_DEF(Or, NULL, infer_logic, 0);
ENG_OP_DEF(Xor, NULL, infer_logic, 0);
ENG_OP_DEF(Equal, NULL, infer_equal, 0);
ENG_OP_DEF(Greater, NULL, infer_compare, 0);
ENG_OP_DEF(GreaterOrEqual, NULL, infer_compare, 0);
ENG_OP_DEF(Less, NULL, infer_compare, 0);
ENG_OP_DEF(LessOrEqual, NULL, infer_compare, 0);
ENG_OP_DEF(PRelu, NULL, infer_prelu, 0);
ENG_OP_DEF(Where, NULL, infer_where, 1);
ENG_OP_DEF(Max, NULL, infer_minmax, 0);
ENG_OP_DEF(Min, NULL, infer_minmax, 0);
ENG_OP_DEF(Mean, NULL, infer_sum, 0);
ENG_OP_DEF(Sum, NULL, infer_sum, 0);
ENG_OP_DEF(BitwiseAnd, NULL, infer_bitwise, 0);
ENG_OP_DEF(BitwiseOr, NULL, infer_bitwise, 0);
ENG_OP_DEF(BitwiseXor, NULL, infer_bitwise, 0);
ENG_OP_DEF(BitShift, check_bitshift, infer_bitshift, 0);
