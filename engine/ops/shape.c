/* shape.c -- definitions (validation, dtype and shape inference) of the shape ops.
 *
 * Every infer here sets only its outputs' dtypes and shapes, after all its
 * checks: on error no output is touched. Where a shape needs an input's
 * value (Reshape's shape, Slice's starts, ...) and that value is unknown,
 * infer returns FS_EDYNAMIC; the planner's folding of shape subgraphs makes
 * those values known in the usual exported models. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/ops/shape_impl.h"

/* --- helpers ------------------------------------------------------------------- */

/* Room for eng_shape_format / ints_format of ENG_MAX_RANK dims. */
#define SHAPE_BUF 200

static char *ints_format(const int64_t *v, int64_t n, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int64_t i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)v[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

int eng_shapeops_in_data(const eng_op_ctx_t *c, int i, const char *what, const eng_tensor_t **out)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    if (!t)
        return eng_op_err(c, FS_EINVAL, "required input %d (%s) is missing", i, what);
    if (eng_dtype_size(t->dtype) == 0)
        return eng_op_err(c, FS_ENOTSUP, "input %d (%s) has dtype %s, which has no fixed "
                          "element size", i, what, eng_dtype_name(t->dtype));
    *out = t;
    return 0;
}

int eng_shapeops_in_ints(const eng_op_ctx_t *c, int i, const char *what, bool required,
                         const eng_tensor_t **out, int64_t *n)
{
    static const eng_dtype_t ints[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};
    const eng_tensor_t *t = eng_ctx_in(c, i);
    *out = NULL;
    *n = 0;
    if (!t) {
        if (required)
            return eng_op_err(c, FS_EINVAL, "required input %d (%s) is missing", i, what);
        return 0;
    }
    int rc = eng_op_require_dtype(c, i, ints);
    if (rc != 0)
        return rc;
    if (t->shape.rank > 1) {
        char b[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "input %d (%s) must be 1-D, not of shape %s", i, what,
                          eng_shape_format(&t->shape, b, sizeof b));
    }
    /* An empty list is known even where no buffer backs it. */
    if (!t->data && eng_shape_numel(&t->shape) > 0)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input %d (%s), "
                          "which is not known before running", i, what);
    *out = t;
    *n = eng_shape_numel(&t->shape);
    return 0;
}

/* A list of integers given by attribute `name` before opset `since` and by
 * input `input` from then on, copied into v (room for max). *n is -1 when
 * absent. FS_EDYNAMIC when the input's value is unknown. */
static int ints_arg(const eng_op_ctx_t *c, const char *name, int input, int since, int64_t *v,
                    int max, int *n)
{
    *n = -1;
    if (c->opset < since) {
        size_t count;
        const int64_t *a = eng_attr_ints(c->node, name, &count);
        if (!a && !eng_node_attr(c->node, name))
            return 0;
        if (count > (size_t)max)
            return eng_op_err(c, FS_ENOTSUP, "attribute %s has %zu values; at most %d are "
                              "supported (the engine's rank limit)", name, count, max);
        memcpy(v, a, count * sizeof *v);
        *n = (int)count;
        return 0;
    }
    const eng_tensor_t *t;
    int64_t count;
    int rc = eng_shapeops_in_ints(c, input, name, false, &t, &count);
    if (rc != 0 || !t)
        return rc;
    if (count > max)
        return eng_op_err(c, FS_ENOTSUP,
                          "input %d (%s) has %lld values; at most %d are "
                          "supported (the engine's rank limit)",
                          input, name, (long long)count, max);
    for (int64_t k = 0; k < count; k++)
        v[k] = eng_tensor_get_i64(t, k);
    *n = (int)count;
    return 0;
}

/* ints_arg for a list the op cannot do without: FS_EINVAL naming the
 * attribute or input when it is absent, so *n is never -1. */
static int ints_arg_required(const eng_op_ctx_t *c, const char *name, int input, int since,
                             int64_t *v, int max, int *n)
{
    int rc = ints_arg(c, name, input, since, v, max, n);
    if (rc != 0 || *n >= 0)
        return rc;
    if (c->opset < since)
        return eng_op_err(c, FS_EINVAL, "attribute %s is required", name);
    return eng_op_err(c, FS_EINVAL, "required input %d (%s) is missing", input, name);
}

/* Normalises each of axes[0..n) for `rank` into ax; FS_EINVAL on a value out
 * of range or repeated. */
static int axes_normalise(const eng_op_ctx_t *c, const int64_t *axes, int n, int rank, int *ax)
{
    bool seen[ENG_MAX_RANK] = {false};
    for (int k = 0; k < n; k++) {
        int rc = eng_op_axis(c, axes[k], rank, &ax[k]);
        if (rc != 0)
            return rc;
        if (seen[ax[k]]) {
            char b[SHAPE_BUF];
            return eng_op_err(c, FS_EINVAL, "axes %s name axis %d more than once",
                              ints_format(axes, n, b, sizeof b), ax[k]);
        }
        seen[ax[k]] = true;
    }
    return 0;
}

/* --- views: Reshape, Flatten, Squeeze, Unsqueeze --------------------------------- */

static int reshape_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int64_t v[ENG_MAX_RANK];
    int n, rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", &x)) != 0 ||
        (rc = ints_arg_required(c, "shape", 1, 0, v, ENG_MAX_RANK, &n)) != 0)
        return rc;
    bool allowzero = c->opset >= 14 && eng_attr_i(c->node, "allowzero", 0) != 0;
    eng_shape_t out = {.rank = n};
    int infer_at = -1;
    int64_t known = 1;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    for (int d = 0; d < n; d++) {
        int64_t dim = v[d];
        if (dim == 0 && !allowzero) {
            if (d >= x->shape.rank)
                return eng_op_err(c, FS_EINVAL, "shape %s copies dim %d (a 0) but the input "
                                  "%s has rank %d", ints_format(v, n, b1, sizeof b1), d,
                                  eng_shape_format(&x->shape, b2, sizeof b2), x->shape.rank);
            dim = x->shape.dims[d];
        } else if (dim == -1) {
            if (infer_at >= 0)
                return eng_op_err(c, FS_EINVAL, "shape %s has more than one -1",
                                  ints_format(v, n, b1, sizeof b1));
            infer_at = d;
            continue;
        } else if (dim < 0) {
            return eng_op_err(c, FS_EINVAL, "shape %s has dim %lld; dims must be >= -1",
                              ints_format(v, n, b1, sizeof b1), (long long)dim);
        }
        out.dims[d] = dim;
        known = eng_shape_numel(&(eng_shape_t){.rank = 2, .dims = {known, dim}});
    }
    int64_t numel = eng_shape_numel(&x->shape);
    if (infer_at >= 0) {
        if (known == 0 || numel % known != 0)
            return eng_op_err(c, FS_EINVAL, "cannot reshape %s (%lld elements) to %s: the -1 "
                              "has no whole size", eng_shape_format(&x->shape, b1, sizeof b1),
                              (long long)numel, ints_format(v, n, b2, sizeof b2));
        out.dims[infer_at] = numel / known;
    } else if (known != numel) {
        return eng_op_err(c, FS_EINVAL, "cannot reshape %s (%lld elements) to %s (%lld elements)",
                          eng_shape_format(&x->shape, b1, sizeof b1), (long long)numel,
                          ints_format(v, n, b2, sizeof b2), (long long)known);
    }
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int flatten_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "input", &x);
    if (rc != 0)
        return rc;
    int r = x->shape.rank;
    int64_t axis = eng_attr_i(c->node, "axis", 1);
    if (axis < -(int64_t)r || axis > r)
        return eng_op_err(c, FS_EINVAL, "axis %lld is out of range [%d, %d] for rank %d",
                          (long long)axis, -r, r, r);
    if (axis < 0)
        axis += r;
    eng_shape_t outer = {.rank = (int)axis}, inner = {.rank = r - (int)axis};
    memcpy(outer.dims, x->shape.dims, (size_t)axis * sizeof(int64_t));
    memcpy(inner.dims, x->shape.dims + axis, (size_t)(r - axis) * sizeof(int64_t));
    eng_shape_t out = {.rank = 2, .dims = {eng_shape_numel(&outer), eng_shape_numel(&inner)}};
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int squeeze_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int64_t axes[ENG_MAX_RANK];
    int n, rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", &x)) != 0 ||
        (rc = ints_arg(c, "axes", 1, 13, axes, ENG_MAX_RANK, &n)) != 0)
        return rc;
    int r = x->shape.rank, ax[ENG_MAX_RANK];
    bool drop[ENG_MAX_RANK] = {false};
    if (n < 0) {
        for (int d = 0; d < r; d++)
            drop[d] = x->shape.dims[d] == 1;
    } else {
        if ((rc = axes_normalise(c, axes, n, r, ax)) != 0)
            return rc;
        for (int k = 0; k < n; k++) {
            if (x->shape.dims[ax[k]] != 1) {
                char b[SHAPE_BUF];
                return eng_op_err(c, FS_EINVAL, "cannot squeeze axis %d of %s: its size is "
                                  "%lld, not 1", ax[k], eng_shape_format(&x->shape, b, sizeof b),
                                  (long long)x->shape.dims[ax[k]]);
            }
            drop[ax[k]] = true;
        }
    }
    eng_shape_t out = {.rank = 0};
    for (int d = 0; d < r; d++)
        if (!drop[d])
            out.dims[out.rank++] = x->shape.dims[d];
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int unsqueeze_check(const eng_node_t *n, int opset)
{
    if (opset < 13 && !eng_node_attr(n, "axes"))
        return ENG_NODE_ERR(n, FS_EINVAL, "attribute axes is required before opset 13");
    return 0;
}

static int unsqueeze_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int64_t axes[ENG_MAX_RANK];
    int n, rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", &x)) != 0 ||
        (rc = ints_arg_required(c, "axes", 1, 13, axes, ENG_MAX_RANK, &n)) != 0)
        return rc;
    int r = x->shape.rank, ax[ENG_MAX_RANK];
    if (r + n > ENG_MAX_RANK)
        return eng_op_err(c, FS_ENOTSUP, "the output would have rank %d; at most %d is "
                          "supported", r + n, ENG_MAX_RANK);
    if ((rc = axes_normalise(c, axes, n, r + n, ax)) != 0)
        return rc;
    bool add[ENG_MAX_RANK] = {false};
    for (int k = 0; k < n; k++)
        add[ax[k]] = true;
    eng_shape_t out = {.rank = r + n};
    for (int d = 0, from = 0; d < r + n; d++)
        out.dims[d] = add[d] ? 1 : x->shape.dims[from++];
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

/* --- Transpose, DepthToSpace, SpaceToDepth ---------------------------------------- */

int eng_transpose_params(const eng_op_ctx_t *c, int perm[ENG_MAX_RANK])
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "data", &x);
    if (rc != 0)
        return rc;
    int r = x->shape.rank;
    size_t n;
    const int64_t *p = eng_attr_ints(c->node, "perm", &n);
    if (!p) {
        for (int d = 0; d < r; d++)
            perm[d] = r - 1 - d;
        return 0;
    }
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    bool seen[ENG_MAX_RANK] = {false};
    bool ok = n == (size_t)r;
    for (size_t d = 0; ok && d < n; d++) {
        ok = p[d] >= 0 && p[d] < r && !seen[p[d]];
        if (ok) {
            seen[p[d]] = true;
            perm[d] = (int)p[d];
        }
    }
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "perm %s is not a permutation of the %d dims of %s",
                          ints_format(p, (int64_t)n, b1, sizeof b1), r,
                          eng_shape_format(&x->shape, b2, sizeof b2));
    return 0;
}

static int transpose_infer(eng_op_ctx_t *c)
{
    int perm[ENG_MAX_RANK];
    int rc = eng_transpose_params(c, perm);
    if (rc != 0)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    eng_shape_t out = {.rank = x->shape.rank};
    for (int d = 0; d < out.rank; d++)
        out.dims[d] = x->shape.dims[perm[d]];
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int space_depth_check(const eng_node_t *n, int opset)
{
    if (eng_attr_i(n, "blocksize", 0) <= 0)
        return ENG_NODE_ERR(n, FS_EINVAL,
                            "attribute blocksize must be given and positive, not %lld",
                            (long long)eng_attr_i(n, "blocksize", 0));
    const char *mode = eng_attr_s(n, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return ENG_NODE_ERR(n, FS_ENOTSUP, "mode '%s' is not supported (DCR or CRD)", mode);
    return 0;
}

int eng_space_depth_params(const eng_op_ctx_t *c, int64_t *blocksize, bool *crd)
{
    int rc = space_depth_check(c->node, c->opset);
    if (rc != 0)
        return rc;
    const eng_tensor_t *x;
    if ((rc = eng_shapeops_in_data(c, 0, "input", &x)) != 0)
        return rc;
    if (x->shape.rank != 4) {
        char b[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "input must be 4-D (N, C, H, W), not %s",
                          eng_shape_format(&x->shape, b, sizeof b));
    }
    *blocksize = eng_attr_i(c->node, "blocksize", 0);
    *crd = strcmp(eng_attr_s(c->node, "mode", "DCR"), "CRD") == 0;
    /* blocksize^2 divides or multiplies the channels: past the bound it
     * would overflow the shape arithmetic (and fit no tensor). */
    if (eng_dim_mul(*blocksize, *blocksize) > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_EINVAL, "blocksize %lld is too large (its square passes %lld)",
                          (long long)*blocksize, (long long)ENG_NUMEL_MAX);
    return 0;
}

static int depth_to_space_infer(eng_op_ctx_t *c)
{
    int64_t b;
    bool crd;
    int rc = eng_space_depth_params(c, &b, &crd);
    if (rc != 0)
        return rc;
    const eng_shape_t *s = &c->inputs[0]->shape;
    if (s->dims[1] % (b * b) != 0) {
        char buf[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "channels of %s are not a multiple of blocksize^2 = %lld",
                          eng_shape_format(s, buf, sizeof buf), (long long)(b * b));
    }
    eng_shape_t out = {.rank = 4, .dims = {s->dims[0], s->dims[1] / (b * b),
                                           eng_dim_mul(s->dims[2], b), eng_dim_mul(s->dims[3], b)}};
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &out);
    return 0;
}

static int space_to_depth_infer(eng_op_ctx_t *c)
{
    int64_t b;
    bool crd;
    int rc = eng_space_depth_params(c, &b, &crd);
    if (rc != 0)
        return rc;
    const eng_shape_t *s = &c->inputs[0]->shape;
    if (s->dims[2] % b != 0 || s->dims[3] % b != 0) {
        char buf[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "height and width of %s are not multiples of blocksize "
                          "%lld", eng_shape_format(s, buf, sizeof buf), (long long)b);
    }
    eng_shape_t out = {.rank = 4, .dims = {s->dims[0], eng_dim_mul(s->dims[1], b * b),
                                           s->dims[2] / b, s->dims[3] / b}};
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &out);
    return 0;
}

/* --- Concat, Split ------------------------------------------------------------------ */

static int concat_check(const eng_node_t *n, int opset)
{
    if (!eng_node_attr(n, "axis"))
        return ENG_NODE_ERR(n, FS_EINVAL, "attribute axis is required");
    return 0;
}

static int concat_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x0;
    int rc = eng_shapeops_in_data(c, 0, "inputs[0]", &x0);
    if (rc != 0)
        return rc;
    int axis;
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x0->shape.rank, &axis)) != 0)
        return rc;
    if (x0->shape.rank == 0)
        return eng_op_err(c, FS_EINVAL, "cannot concatenate scalars");
    eng_shape_t out = x0->shape;
    out.dims[axis] = 0;
    for (int i = 0; i < c->n_inputs; i++) {
        const eng_tensor_t *x;
        if ((rc = eng_shapeops_in_data(c, i, "inputs", &x)) != 0)
            return rc;
        bool ok = x->dtype == x0->dtype && x->shape.rank == out.rank;
        for (int d = 0; ok && d < out.rank; d++)
            ok = d == axis || x->shape.dims[d] == out.dims[d];
        if (!ok) {
            char b1[SHAPE_BUF], b2[SHAPE_BUF];
            return eng_op_err(c, FS_EINVAL, "input %d (%s %s) does not match input 0 (%s %s) "
                              "outside axis %d", i, eng_dtype_name(x->dtype),
                              eng_shape_format(&x->shape, b1, sizeof b1),
                              eng_dtype_name(x0->dtype),
                              eng_shape_format(&x0->shape, b2, sizeof b2), axis);
        }
        out.dims[axis] = eng_dim_add(out.dims[axis], x->shape.dims[axis]);
    }
    eng_ctx_out_set(c, 0, x0->dtype, &out);
    return 0;
}

int eng_split_params(const eng_op_ctx_t *c, eng_split_params_t *p)
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "input", &x);
    if (rc != 0 ||
        (rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &p->axis)) != 0)
        return rc;
    if (x->shape.rank == 0)
        return eng_op_err(c, FS_EINVAL, "cannot split a scalar");
    *p = (eng_split_params_t){.axis = p->axis, .n = c->n_outputs,
                              .dim = x->shape.dims[p->axis]};
    if (p->n < 1)
        return eng_op_err(c, FS_EINVAL, "the node has no outputs");
    int64_t count = -1;
    if (c->opset < 13) {
        size_t na;
        if ((p->split_attr = eng_attr_ints(c->node, "split", &na)) != NULL)
            count = (int64_t)na;
    } else if ((rc = eng_shapeops_in_ints(c, 1, "split", false, &p->split_in, &count)) != 0) {
        return rc;
    }
    char b[SHAPE_BUF];
    if (p->split_in || p->split_attr) {
        if (count != p->n)
            return eng_op_err(c, FS_EINVAL, "split lists %lld sizes for %d outputs",
                              (long long)count, p->n);
        int64_t sum = 0;
        for (int k = 0; k < p->n; k++) {
            int64_t s = eng_split_size(p, k);
            if (s < 0)
                return eng_op_err(c, FS_EINVAL, "split size %d is %lld", k, (long long)s);
            sum = eng_dim_add(sum, s);
        }
        if (sum != p->dim)
            return eng_op_err(c, FS_EINVAL, "split sizes add up to %lld, but axis %d of %s has "
                              "%lld", (long long)sum, p->axis,
                              eng_shape_format(&x->shape, b, sizeof b), (long long)p->dim);
        return 0;
    }
    /* From opset 18 (num_outputs) a split need not be even: every chunk is
     * ceil(dim / n) and the last takes the rest. */
    int64_t num = eng_attr_i(c->node, "num_outputs", -1);
    if (c->opset >= 18 && num >= 0 && num != p->n)
        return eng_op_err(c, FS_EINVAL, "num_outputs is %lld but the node has %d outputs",
                          (long long)num, p->n);
    bool uneven = c->opset >= 18 && num >= 0;
    p->chunk = uneven ? (p->dim + p->n - 1) / p->n : p->dim / p->n;
    if ((!uneven && p->dim % p->n != 0) || p->dim - p->chunk * (p->n - 1) < 0)
        return eng_op_err(c, FS_EINVAL, "axis %d of %s (size %lld) does not split into %d parts",
                          p->axis, eng_shape_format(&x->shape, b, sizeof b), (long long)p->dim,
                          p->n);
    return 0;
}

static int split_infer(eng_op_ctx_t *c)
{
    eng_split_params_t p;
    int rc = eng_split_params(c, &p);
    for (int k = 0; rc == 0 && k < p.n; k++) {
        eng_shape_t out = c->inputs[0]->shape;
        out.dims[p.axis] = eng_split_size(&p, k);
        eng_ctx_out_set(c, k, c->inputs[0]->dtype, &out);
    }
    return rc;
}

/* --- Slice -------------------------------------------------------------------------- */

static int slice_check(const eng_node_t *n, int opset)
{
    if (opset < 10 && (!eng_node_attr(n, "starts") || !eng_node_attr(n, "ends")))
        return ENG_NODE_ERR(n, FS_EINVAL,
                            "attributes starts and ends are required before opset 10");
    return 0;
}

/* Clamps start and end into dim as the Slice spec says, bounds the step's
 * magnitude by the dim (which takes the same elements and keeps kernels'
 * stride arithmetic in range), and returns the number of elements taken. */
static int64_t slice_dim(int64_t dim, int64_t *start, int64_t end, int64_t *step)
{
    /* An empty dim gives nothing: a negative step's clamp range [0, dim - 1]
     * is empty, which the clamps below would turn into element 0. */
    if (dim == 0) {
        *start = 0;
        return 0;
    }
    int64_t s = *start < 0 ? *start + dim : *start;
    int64_t e = end < 0 ? end + dim : end;
    int64_t bound = dim > 1 ? dim : 1;
    if (*step > 0) {
        *step = *step > bound ? bound : *step;
        s = s < 0 ? 0 : s > dim ? dim : s;
        e = e < 0 ? 0 : e > dim ? dim : e;
        *start = s;
        return e > s ? (e - s - 1) / *step + 1 : 0;
    }
    *step = *step < -bound ? -bound : *step;
    s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
    *start = s < 0 ? 0 : s;
    return s > e ? (s - e - 1) / -*step + 1 : 0;
}

int eng_slice_params(const eng_op_ctx_t *c, eng_slice_params_t *p)
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "data", &x);
    if (rc != 0)
        return rc;
    int r = x->shape.rank;
    int64_t starts[ENG_MAX_RANK], ends[ENG_MAX_RANK], axes[ENG_MAX_RANK], steps[ENG_MAX_RANK];
    int ns, ne, na, nst;
    if ((rc = ints_arg_required(c, "starts", 1, 10, starts, ENG_MAX_RANK, &ns)) != 0 ||
        (rc = ints_arg_required(c, "ends", 2, 10, ends, ENG_MAX_RANK, &ne)) != 0 ||
        (rc = ints_arg(c, "axes", 3, 10, axes, ENG_MAX_RANK, &na)) != 0)
        return rc;
    nst = -1;
    if (c->opset >= 10 && (rc = ints_arg(c, "steps", 4, 10, steps, ENG_MAX_RANK, &nst)) != 0)
        return rc;
    char b[SHAPE_BUF];
    if (ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns) || ns > r)
        return eng_op_err(c, FS_EINVAL, "starts, ends, axes and steps have %d, %d, %d and %d "
                          "values for input %s; they must match and be at most its rank", ns, ne,
                          na, nst, eng_shape_format(&x->shape, b, sizeof b));
    if (na < 0)
        for (int k = 0; k < ns; k++)
            axes[k] = k;
    int ax[ENG_MAX_RANK];
    if ((rc = axes_normalise(c, axes, ns, r, ax)) != 0)
        return rc;
    p->out = x->shape;
    for (int d = 0; d < r; d++) {
        p->starts[d] = 0;
        p->steps[d] = 1;
    }
    for (int k = 0; k < ns; k++) {
        int64_t step = nst >= 0 ? steps[k] : 1;
        if (step == 0)
            return eng_op_err(c, FS_EINVAL, "step %d is 0", k);
        p->starts[ax[k]] = starts[k];
        p->steps[ax[k]] = step;
        p->out.dims[ax[k]] = slice_dim(x->shape.dims[ax[k]], &p->starts[ax[k]], ends[k],
                                       &p->steps[ax[k]]);
    }
    return 0;
}

static int slice_infer(eng_op_ctx_t *c)
{
    eng_slice_params_t p;
    int rc = eng_slice_params(c, &p);
    if (rc == 0)
        eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &p.out);
    return rc;
}

/* --- Gather, GatherElements ------------------------------------------------------------ */

static const eng_dtype_t index_dtypes[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};

/* Gather's and GatherElements' operands: data (input 0, not a scalar),
 * indices (input 1, int32 or int64) and attribute axis normalised for data.
 * 0, or FS_EINVAL / FS_ENOTSUP naming the operand. */
static int gather_inputs(const eng_op_ctx_t *c, const eng_tensor_t **x, const eng_tensor_t **idx,
                         int *axis)
{
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "indices", idx)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, index_dtypes)) != 0)
        return rc;
    if ((*x)->shape.rank == 0)
        return eng_op_err(c, FS_EINVAL, "cannot gather from a scalar");
    return eng_op_axis(c, eng_attr_i(c->node, "axis", 0), (*x)->shape.rank, axis);
}

static int gather_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x, *idx;
    int axis, rc = gather_inputs(c, &x, &idx, &axis);
    if (rc != 0)
        return rc;
    int r = x->shape.rank - 1 + idx->shape.rank;
    if (r > ENG_MAX_RANK)
        return eng_op_err(c, FS_ENOTSUP, "the output would have rank %d; at most %d is "
                          "supported", r, ENG_MAX_RANK);
    eng_shape_t out = {.rank = 0};
    for (int d = 0; d < axis; d++)
        out.dims[out.rank++] = x->shape.dims[d];
    for (int d = 0; d < idx->shape.rank; d++)
        out.dims[out.rank++] = idx->shape.dims[d];
    for (int d = axis + 1; d < x->shape.rank; d++)
        out.dims[out.rank++] = x->shape.dims[d];
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int gather_elements_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x, *idx;
    int axis, rc = gather_inputs(c, &x, &idx, &axis);
    if (rc != 0)
        return rc;
    bool ok = x->shape.rank == idx->shape.rank;
    for (int d = 0; ok && d < x->shape.rank; d++)
        ok = d == axis || idx->shape.dims[d] <= x->shape.dims[d];
    if (!ok) {
        char b1[SHAPE_BUF], b2[SHAPE_BUF];
        return eng_op_err(c, FS_EINVAL, "indices %s do not fit data %s: same rank, and no larger "
                          "outside axis %d", eng_shape_format(&idx->shape, b1, sizeof b1),
                          eng_shape_format(&x->shape, b2, sizeof b2), axis);
    }
    eng_ctx_out_set(c, 0, x->dtype, &idx->shape);
    return 0;
}

/* --- GatherND --------------------------------------------------------------------------- */

static const eng_dtype_t int64_only[] = {ENG_DT_INT64, ENG_DT_UNDEFINED};

int eng_gather_nd_params(const eng_op_ctx_t *c, eng_gather_nd_t *g)
{
    const eng_tensor_t *x, *idx;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "data", &x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "indices", &idx)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, int64_only)) != 0)
        return rc;
    int r = x->shape.rank, q = idx->shape.rank;
    int64_t b = c->opset >= 12 ? eng_attr_i(c->node, "batch_dims", 0) : 0;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&idx->shape, b2, sizeof b2);
    if (r < 1 || q < 1)
        return eng_op_err(c, FS_EINVAL, "data %s and indices %s must each have rank 1 or more",
                          b1, b2);
    if (b < 0 || b >= (q < r ? q : r))
        return eng_op_err(c, FS_EINVAL, "batch_dims %lld must be in [0, %d) for data %s and "
                          "indices %s", (long long)b, q < r ? q : r, b1, b2);
    int64_t k = idx->shape.dims[q - 1];
    if (k < 1 || k > r - b)
        return eng_op_err(c, FS_EINVAL, "indices %s index %lld dims each, where data %s with "
                          "batch_dims %lld allows 1 to %lld", b2, (long long)k, b1, (long long)b,
                          (long long)(r - b));
    for (int d = 0; d < b; d++)
        if (x->shape.dims[d] != idx->shape.dims[d])
            return eng_op_err(c, FS_EINVAL, "data %s and indices %s differ in batch dim %d", b1,
                              b2, d);
    int rank = q - 1 + r - (int)b - (int)k;
    if (rank > ENG_MAX_RANK)
        return eng_op_err(c, FS_ENOTSUP, "the output would have rank %d; at most %d is "
                          "supported", rank, ENG_MAX_RANK);
    g->k = (int)k;
    g->out.rank = 0;
    for (int d = 0; d < q - 1; d++)
        g->out.dims[g->out.rank++] = idx->shape.dims[d];
    g->row = 1;
    for (int d = (int)(b + k); d < r; d++) {
        g->out.dims[g->out.rank++] = x->shape.dims[d];
        g->row *= x->shape.dims[d];
    }
    g->batch_rows = 1;
    for (int t = g->k - 1; t >= 0; t--) {
        g->dims[t] = x->shape.dims[b + t];
        g->strides[t] = g->batch_rows;
        g->batch_rows *= g->dims[t];
    }
    g->n_rows = 1;
    g->per_batch = 1;
    for (int d = 0; d < q - 1; d++) {
        g->n_rows *= idx->shape.dims[d];
        if (d >= b)
            g->per_batch *= idx->shape.dims[d];
    }
    return 0;
}

static int gather_nd_infer(eng_op_ctx_t *c)
{
    eng_gather_nd_t g;
    int rc = eng_gather_nd_params(c, &g);
    if (rc != 0)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &g.out);
    return 0;
}

/* --- BitCast ------------------------------------------------------------------------------ */

/* The dtype of attribute `to`: one of the engine's, of a fixed size. 0, or
 * FS_EINVAL (absent) / FS_ENOTSUP naming it. */
static int bitcast_target(const eng_node_t *n, eng_dtype_t *to)
{
    const eng_attr_t *a = eng_node_attr(n, "to");
    if (!a || a->type != ENG_ATTR_INT)
        return ENG_NODE_ERR(n, FS_EINVAL, "attribute 'to' is missing or not an int");
    if (a->i <= 0 || a->i > ENG_DT_BFLOAT16 || a->i == ENG_DT_STRING ||
        a->i == ENG_DT_COMPLEX64 || a->i == ENG_DT_COMPLEX128)
        return ENG_NODE_ERR(n, FS_ENOTSUP, "dtype %s (%lld) is not supported",
                            eng_dtype_name((eng_dtype_t)a->i), (long long)a->i);
    *to = (eng_dtype_t)a->i;
    return 0;
}

static int bitcast_check(const eng_node_t *n, int opset)
{
    (void)opset;
    eng_dtype_t to;
    return bitcast_target(n, &to);
}

/* The bits stay; only the dtype changes, between dtypes of one size. */
static int bitcast_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    eng_dtype_t to;
    int rc = eng_shapeops_in_data(c, 0, "input", &x);
    if (rc || (rc = bitcast_target(c->node, &to)) != 0)
        return rc;
    if (eng_dtype_size(to) != eng_dtype_size(x->dtype))
        return eng_op_err(c, FS_EINVAL, "cannot reinterpret %s (%zu bytes) as %s (%zu bytes)",
                          eng_dtype_name(x->dtype), eng_dtype_size(x->dtype),
                          eng_dtype_name(to), eng_dtype_size(to));
    eng_ctx_out_set(c, 0, to, &x->shape);
    return 0;
}

/* --- Expand, Tile ------------------------------------------------------------------------ */

static int expand_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int64_t v[ENG_MAX_RANK];
    int n, rc;
    if ((rc = eng_shapeops_in_data(c, 0, "input", &x)) != 0 ||
        (rc = ints_arg_required(c, "shape", 1, 0, v, ENG_MAX_RANK, &n)) != 0)
        return rc;
    int r = x->shape.rank > n ? x->shape.rank : n;
    eng_shape_t out = {.rank = r};
    for (int d = 0; d < r; d++) {
        int dx = d - (r - x->shape.rank), dv = d - (r - n);
        int64_t a = dx >= 0 ? x->shape.dims[dx] : 1, s = dv >= 0 ? v[dv] : 1;
        if (s < 0 || (a != s && a != 1 && s != 1)) {
            char b1[SHAPE_BUF], b2[SHAPE_BUF];
            return eng_op_err(c, FS_EINVAL, "cannot broadcast input %s with shape %s",
                              eng_shape_format(&x->shape, b1, sizeof b1),
                              ints_format(v, n, b2, sizeof b2));
        }
        out.dims[d] = a == 1 ? s : a;
    }
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

static int tile_infer(eng_op_ctx_t *c)
{
    const eng_tensor_t *x;
    int64_t v[ENG_MAX_RANK];
    int n, rc;
    if ((rc = eng_shapeops_in_data(c, 0, "input", &x)) != 0 ||
        (rc = ints_arg_required(c, "repeats", 1, 0, v, ENG_MAX_RANK, &n)) != 0)
        return rc;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    bool ok = n == x->shape.rank;
    for (int d = 0; ok && d < n; d++)
        ok = v[d] >= 0;
    if (!ok)
        return eng_op_err(c, FS_EINVAL, "repeats %s must be one non-negative count per dim of %s",
                          ints_format(v, n, b1, sizeof b1),
                          eng_shape_format(&x->shape, b2, sizeof b2));
    eng_shape_t out = x->shape;
    for (int d = 0; d < n; d++)
        out.dims[d] = eng_dim_mul(out.dims[d], v[d]);
    eng_ctx_out_set(c, 0, x->dtype, &out);
    return 0;
}

/* --- Pad ------------------------------------------------------------------------------ */

static int pad_mode(const eng_node_t *n, int opset, eng_pad_mode_t *mode)
{
    static const char *const names[] = {"constant", "reflect", "edge", "wrap"};
    const char *s = eng_attr_s(n, "mode", "constant");
    for (int m = 0; m < 4; m++)
        if (strcmp(s, names[m]) == 0 && (m != ENG_PAD_WRAP || opset >= 19)) {
            *mode = (eng_pad_mode_t)m;
            return 0;
        }
    return ENG_NODE_ERR(n, FS_ENOTSUP,
                        "mode '%s' is not supported at opset %d (constant, reflect, "
                        "edge; wrap from opset 19)",
                        s, opset);
}

static int pad_check(const eng_node_t *n, int opset)
{
    eng_pad_mode_t mode;
    if (opset < 11 && !eng_node_attr(n, "pads"))
        return ENG_NODE_ERR(n, FS_EINVAL, "attribute pads is required before opset 11");
    return pad_mode(n, opset, &mode);
}

int eng_pad_params(const eng_op_ctx_t *c, eng_pad_params_t *p)
{
    const eng_tensor_t *x;
    int rc = eng_shapeops_in_data(c, 0, "data", &x);
    if (rc != 0 || (rc = pad_mode(c->node, c->opset, &p->mode)) != 0)
        return rc;
    int r = x->shape.rank, np, na = -1;
    int64_t pads[2 * ENG_MAX_RANK], axes[ENG_MAX_RANK];
    if ((rc = ints_arg_required(c, "pads", 1, 11, pads, 2 * ENG_MAX_RANK, &np)) != 0)
        return rc;
    if (c->opset >= 18 && (rc = ints_arg(c, "axes", 3, 18, axes, ENG_MAX_RANK, &na)) != 0)
        return rc;
    if (na < 0) {
        na = r;
        for (int k = 0; k < r; k++)
            axes[k] = k;
    }
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    if (np != 2 * na)
        return eng_op_err(c, FS_EINVAL, "pads %s must have 2 values per padded axis (%d) of %s",
                          ints_format(pads, np, b1, sizeof b1), na,
                          eng_shape_format(&x->shape, b2, sizeof b2));
    int ax[ENG_MAX_RANK];
    if ((rc = axes_normalise(c, axes, na, r, ax)) != 0)
        return rc;
    memset(p->begin, 0, sizeof p->begin);
    memset(p->end, 0, sizeof p->end);
    for (int k = 0; k < na; k++) {
        p->begin[ax[k]] = pads[k];
        p->end[ax[k]] = pads[k + na];
    }
    p->out = x->shape;
    for (int d = 0; d < r; d++) {
        /* Saturating: pads past int64's range either leave nothing of the
         * input (kept < 0, refused here) or grow it past any bounded shape
         * (refused by eng_op_infer). */
        int64_t kept = eng_dim_add(eng_dim_add(x->shape.dims[d], p->begin[d] < 0 ? p->begin[d] : 0),
                                   p->end[d] < 0 ? p->end[d] : 0);
        p->out.dims[d] = eng_dim_add(eng_dim_add(x->shape.dims[d], p->begin[d]), p->end[d]);
        bool grows = p->begin[d] > 0 || p->end[d] > 0;
        if (kept < 0 || (kept == 0 && grows && p->mode != ENG_PAD_CONSTANT))
            return eng_op_err(c, FS_EINVAL, "pads %s do not fit input %s (axis %d)",
                              ints_format(pads, np, b1, sizeof b1),
                              eng_shape_format(&x->shape, b2, sizeof b2), d);
    }
    return 0;
}

/* One element of dtype dt with value v, into out. */
static int scalar_from_double(const eng_op_ctx_t *c, eng_dtype_t dt, double v, void *out)
{
    switch (dt) {
#define SCALAR_CASE_(DT, T)                                                                     \
    case DT: {                                                                                  \
        T t = (T)v;                                                                             \
        memcpy(out, &t, sizeof t);                                                              \
        return 0;                                                                               \
    }
        SCALAR_CASE_(ENG_DT_FLOAT, float)
        SCALAR_CASE_(ENG_DT_DOUBLE, double)
        SCALAR_CASE_(ENG_DT_INT8, int8_t)
        SCALAR_CASE_(ENG_DT_INT16, int16_t)
        SCALAR_CASE_(ENG_DT_INT32, int32_t)
        SCALAR_CASE_(ENG_DT_INT64, int64_t)
        SCALAR_CASE_(ENG_DT_UINT8, uint8_t)
        SCALAR_CASE_(ENG_DT_UINT16, uint16_t)
        SCALAR_CASE_(ENG_DT_UINT32, uint32_t)
        SCALAR_CASE_(ENG_DT_UINT64, uint64_t)
#undef SCALAR_CASE_
    case ENG_DT_BOOL: {
        uint8_t t = v != 0;
        memcpy(out, &t, 1);
        return 0;
    }
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16: {
        uint16_t t = eng_float_to_half_dt(dt, (float)v);
        memcpy(out, &t, sizeof t);
        return 0;
    }
    default:
        /* Zero is all-zero bytes in every remaining fixed-size type. */
        if (v == 0 && eng_dtype_size(dt) > 0) {
            memset(out, 0, eng_dtype_size(dt));
            return 0;
        }
        return eng_op_err(c, FS_ENOTSUP, "a constant %g of dtype %s is not supported", v,
                          eng_dtype_name(dt));
    }
}

int eng_pad_value(const eng_op_ctx_t *c, void *value)
{
    const eng_tensor_t *x = c->inputs[0];
    if (c->opset < 11)
        return scalar_from_double(c, x->dtype, eng_attr_f(c->node, "value", 0.0f), value);
    const eng_tensor_t *v = eng_ctx_in(c, 2);
    if (!v)
        return scalar_from_double(c, x->dtype, 0.0, value);
    if (v->dtype != x->dtype || eng_shape_numel(&v->shape) != 1)
        return eng_op_err(c, FS_EINVAL, "constant_value must be one %s, not %s of %lld elements",
                          eng_dtype_name(x->dtype), eng_dtype_name(v->dtype),
                          (long long)eng_shape_numel(&v->shape));
    if (!v->data)
        return eng_op_err(c, FS_EDYNAMIC, "the value of input 2 (constant_value) is not known");
    memcpy(value, v->data, eng_dtype_size(v->dtype));
    return 0;
}

static int pad_infer(eng_op_ctx_t *c)
{
    eng_pad_params_t p;
    int rc = eng_pad_params(c, &p);
    if (rc == 0)
        eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &p.out);
    return rc;
}

/* --- the definitions ----------------------------------------------------------------------- */

ENG_OP_DEF(Reshape, NULL, reshape_infer, 0);
ENG_OP_DEF(BitCast, bitcast_check, bitcast_infer, 0);
ENG_OP_DEF(Flatten, NULL, flatten_infer, 0);
ENG_OP_DEF(Squeeze, NULL, squeeze_infer, 0);
ENG_OP_DEF(Unsqueeze, unsqueeze_check, unsqueeze_infer, 0);
ENG_OP_DEF(Transpose, NULL, transpose_infer, -1);
ENG_OP_DEF(Concat, concat_check, concat_infer, -1);
ENG_OP_DEF(Split, NULL, split_infer, -1);
ENG_OP_DEF(Slice, slice_check, slice_infer, -1);
ENG_OP_DEF(Gather, NULL, gather_infer, -1);
ENG_OP_DEF(GatherElements, NULL, gather_elements_infer, -1);
ENG_OP_DEF(GatherND, NULL, gather_nd_infer, -1);
ENG_OP_DEF(Expand, NULL, expand_infer, -1);
ENG_OP_DEF(Tile, NULL, tile_infer, -1);
ENG_OP_DEF(Pad, pad_check, pad_infer, -1);
ENG_OP_DEF(DepthToSpace, space_depth_check, depth_to_space_infer, -1);
ENG_OP_DEF(SpaceToDepth, space_depth_check, space_to_depth_infer, -1);
