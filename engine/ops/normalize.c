/* normalize.c -- definitions (validation, dtype and shape inference) of
 * LpNormalization, MeanVarianceNormalization and GroupNormalization, over
 * the geometry of engine/ops/normalize_impl.h that both devices' kernels
 * read. Each output has input 0's dtype and shape. */
#include <string.h>

#include "common/error.h"
#include "engine/ops/normalize_impl.h"

static const eng_dtype_t dt_float_double[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_UNDEFINED};

int eng_lpnorm_params(const eng_op_ctx_t *c, int64_t *outer, int64_t *n, int64_t *inner, int *p)
{
    int rc = eng_op_require_dtype(c, 0, dt_float_double);
    if (rc)
        return rc;
    const eng_shape_t *s = &c->inputs[0]->shape;
    int64_t pv = eng_attr_i(c->node, "p", 2);
    if (pv != 1 && pv != 2)
        return eng_op_err(c, FS_ENOTSUP, "p %lld is not supported (1, 2)", (long long)pv);
    int axis;
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", -1), s->rank, &axis)))
        return rc;
    *outer = *n = *inner = 1;
    for (int d = 0; d < s->rank; d++)
        *(d < axis ? outer : d == axis ? n : inner) *= s->dims[d];
    *p = (int)pv;
    return 0;
}

int eng_mvn_params(const eng_op_ctx_t *c, eng_mvn_t *g)
{
    int rc = eng_op_require_dtype(c, 0, dt_float_double);
    if (rc)
        return rc;
    const eng_shape_t *s = &c->inputs[0]->shape;
    bool reduced[ENG_MAX_RANK] = {false};
    size_t n_axes;
    const int64_t *axes = eng_attr_ints(c->node, "axes", &n_axes);
    static const int64_t def_axes[] = {0, 2, 3};
    if (!axes) {
        axes = def_axes;
        n_axes = 3;
    }
    for (size_t i = 0; i < n_axes; i++) {
        int a;
        if ((rc = eng_op_axis(c, axes[i], s->rank, &a)))
            return rc;
        if (reduced[a])
            return eng_op_err(c, FS_EINVAL, "axis %lld is listed twice in axes",
                              (long long)axes[i]);
        reduced[a] = true;
    }
    memset(g, 0, sizeof *g);
    g->n_groups = g->n_red = 1;
    int64_t stride = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        int64_t dim = s->dims[d];
        if (dim != 1 && reduced[d]) {
            g->rdims[g->nr] = dim;
            g->rstrides[g->nr++] = stride;
            g->n_red *= dim;
        } else if (dim != 1) {
            g->kdims[g->nk] = dim;
            g->kstrides[g->nk++] = stride;
            g->n_groups *= dim;
        }
        stride *= dim;
    }
    /* Collected innermost first: reverse into row-major order. */
    for (int i = 0; i < g->nk / 2; i++) {
        int64_t t = g->kdims[i], u = g->kstrides[i];
        g->kdims[i] = g->kdims[g->nk - 1 - i], g->kstrides[i] = g->kstrides[g->nk - 1 - i];
        g->kdims[g->nk - 1 - i] = t, g->kstrides[g->nk - 1 - i] = u;
    }
    for (int i = 0; i < g->nr / 2; i++) {
        int64_t t = g->rdims[i], u = g->rstrides[i];
        g->rdims[i] = g->rdims[g->nr - 1 - i], g->rstrides[i] = g->rstrides[g->nr - 1 - i];
        g->rdims[g->nr - 1 - i] = t, g->rstrides[g->nr - 1 - i] = u;
    }
    if (eng_shape_numel(s) == 0)
        g->n_groups = g->n_red = 0;
    return 0;
}

int eng_groupnorm_params(const eng_op_ctx_t *c, eng_groupnorm_t *g)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0), *sc = eng_ctx_in(c, 1), *b = eng_ctx_in(c, 2);
    if (!x || !sc || !b)
        return eng_op_err(c, FS_EINVAL, "inputs X, scale and bias are required");
    int rc = eng_op_require_dtype(c, 0, dt_float_double);
    if (rc)
        return rc;
    char bx[96];
    eng_shape_format(&x->shape, bx, sizeof bx);
    int64_t groups = eng_attr_i(c->node, "num_groups", 0);
    if (x->shape.rank < 2)
        return eng_op_err(c, FS_EINVAL, "X %s must be [N, C, ...]", bx);
    int64_t ch = x->shape.dims[1];
    if (groups < 1 || ch % groups != 0)
        return eng_op_err(c, FS_EINVAL, "num_groups %lld must be >= 1 and divide X %s's %lld "
                          "channels", (long long)groups, bx, (long long)ch);
    g->num_groups = groups;
    g->channels = ch;
    g->per_channel = c->opset >= 21;
    int64_t want = g->per_channel ? ch : groups;
    for (int i = 1; i <= 2; i++) {
        const eng_tensor_t *t = i == 1 ? sc : b;
        if (t->dtype != x->dtype || t->shape.rank != 1 || t->shape.dims[0] != want) {
            char bt[96];
            return eng_op_err(c, FS_EINVAL, "%s %s %s must be [%lld] of X's dtype %s at opset %d",
                              i == 1 ? "scale" : "bias", eng_dtype_name(t->dtype),
                              eng_shape_format(&t->shape, bt, sizeof bt), (long long)want,
                              eng_dtype_name(x->dtype), c->opset);
        }
    }
    g->spatial = 1;
    for (int d = 2; d < x->shape.rank; d++)
        g->spatial *= x->shape.dims[d];
    g->n_groups = x->shape.dims[0] * groups;
    g->run = ch / groups * g->spatial;
    g->epsilon = eng_attr_f(c->node, "epsilon", 1e-5f);
    return 0;
}

static void same_as_input(eng_op_ctx_t *c)
{
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &c->inputs[0]->shape);
}

/* The infer hooks set output 0 only once every check has passed. */
static int lpnorm_infer(eng_op_ctx_t *c)
{
    int64_t outer, n, inner;
    int p, rc = eng_lpnorm_params(c, &outer, &n, &inner, &p);
    if (rc == 0)
        same_as_input(c);
    return rc;
}

static int mvn_infer(eng_op_ctx_t *c)
{
    eng_mvn_t g;
    int rc = eng_mvn_params(c, &g);
    if (rc == 0)
        same_as_input(c);
    return rc;
}

static int groupnorm_infer(eng_op_ctx_t *c)
{
    eng_groupnorm_t g;
    int rc = eng_groupnorm_params(c, &g);
    if (rc == 0)
        same_as_input(c);
    return rc;
}

/* stash_type (opset 21) names the type the statistics are computed in:
 * they always are in double here, at least as precise as any it names. */
ENG_OP_DEF(LpNormalization, NULL, lpnorm_infer, -1);
ENG_OP_DEF(MeanVarianceNormalization, NULL, mvn_infer, -1);
ENG_OP_DEF(GroupNormalization, NULL, groupnorm_infer, -1);
