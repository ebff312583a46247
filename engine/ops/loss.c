/* loss.c -- definitions (validation, dtype and shape inference) of the loss
 * ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, over the one
 * geometry of engine/ops/loss_impl.h that both devices' kernels read. */
#include <string.h>

#include "common/error.h"
#include "engine/ops/loss_impl.h"

static const eng_dtype_t dt_float_double[] = {ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_index[] = {ENG_DT_INT64, ENG_DT_INT32, ENG_DT_UNDEFINED};

/* The reduction attribute (default 'mean'). 0, or FS_ENOTSUP naming it. */
static int loss_reduction(const eng_node_t *n, int opset, eng_loss_reduction_t *r)
{
    const char *s = eng_attr_s(n, "reduction", "mean");
    if (strcmp(s, "none") == 0)
        *r = ENG_LOSS_NONE;
    else if (strcmp(s, "sum") == 0)
        *r = ENG_LOSS_SUM;
    else if (strcmp(s, "mean") == 0)
        *r = ENG_LOSS_MEAN;
    else {
        eng_op_ctx_t c = {.node = n, .opset = opset};
        return eng_op_err(&c, FS_ENOTSUP, "reduction '%s' is not supported (none, sum, mean)", s);
    }
    return 0;
}

static int loss_check(const eng_node_t *n, int opset)
{
    eng_loss_reduction_t r;
    return loss_reduction(n, opset, &r);
}

int eng_loss_params(const eng_op_ctx_t *c, eng_loss_t *g)
{
    const eng_tensor_t *x = eng_ctx_in(c, 0), *t = eng_ctx_in(c, 1), *w = eng_ctx_in(c, 2);
    if (!x || !t)
        return eng_op_err(c, FS_EINVAL, "input 0 (scores) and input 1 (target) are required");
    int rc = loss_reduction(c->node, c->opset, &g->reduction);
    if (rc || (rc = eng_op_require_dtype(c, 0, dt_float_double)) ||
        (rc = eng_op_require_dtype(c, 1, dt_index)))
        return rc;
    char bx[96], bt[96], bw[96];
    eng_shape_format(&x->shape, bx, sizeof bx);
    eng_shape_format(&t->shape, bt, sizeof bt);
    int r = x->shape.rank;
    bool fits = r >= 2 && t->shape.rank == r - 1 && t->shape.dims[0] == x->shape.dims[0];
    for (int k = 2; fits && k < r; k++)
        fits = t->shape.dims[k - 1] == x->shape.dims[k];
    if (!fits)
        return eng_op_err(c, FS_EINVAL, "input %s and target %s do not fit: the input must be "
                          "[N, C, d1..dk] and the target [N, d1..dk]", bx, bt);
    g->n = x->shape.dims[0];
    g->c = x->shape.dims[1];
    g->d = 1;
    for (int k = 2; k < r; k++)
        g->d *= x->shape.dims[k];
    g->weighted = w != NULL;
    if (w) {
        eng_shape_format(&w->shape, bw, sizeof bw);
        if (w->dtype != x->dtype || w->shape.rank != 1 || w->shape.dims[0] != g->c)
            return eng_op_err(c, FS_EINVAL, "weight %s %s must be [C] = [%lld] of the input's "
                              "dtype %s", eng_dtype_name(w->dtype), bw, (long long)g->c,
                              eng_dtype_name(x->dtype));
    }
    const eng_attr_t *ii = eng_node_attr(c->node, "ignore_index");
    g->has_ignore = ii != NULL;
    g->ignore_index = ii ? ii->i : 0;
    g->sce = strcmp(c->node->op_type, "SoftmaxCrossEntropyLoss") == 0;
    g->log_prob = g->sce && c->n_outputs > 1 && c->outputs[1] != NULL;
    g->loss_shape = g->reduction == ENG_LOSS_NONE ? t->shape : (eng_shape_t){.rank = 0};
    return 0;
}

/* Output 0: the losses (input 0's dtype); SCE's output 1: the log-softmax,
 * input 0's shape. Outputs untouched on error. */
static int loss_infer(eng_op_ctx_t *c)
{
    eng_loss_t g;
    int rc = eng_loss_params(c, &g);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    eng_ctx_out_set(c, 0, x->dtype, &g.loss_shape);
    if (g.sce)
        eng_ctx_out_set(c, 1, x->dtype, &x->shape);
    return 0;
}

ENG_OP_DEF(NegativeLogLikelihoodLoss, loss_check, loss_infer, -1);
ENG_OP_DEF(SoftmaxCrossEntropyLoss, loss_check, loss_infer, -1);
