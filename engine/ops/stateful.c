/* stateful.c -- definitions (validation, dtype and shape inference) of the
 * stateful sequence ops that recent decoders (Mamba, Gated DeltaNet) export:
 * CausalConvWithState and LinearAttention. Their geometry is in
 * stateful_impl.h, shared with the kernels. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/ops/stateful_impl.h"

static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};

/* FS_EINVAL unless input i (when present) has rank `rank` and, where
 * want[d] >= 0, dim d equal to want[d]. `what` describes the shape wanted. */
static int shape_is(const eng_op_ctx_t *c, int i, int rank, const int64_t *want, const char *what)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    if (!t)
        return 0;
    bool ok = t->shape.rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = want[d] < 0 || t->shape.dims[d] == want[d];
    if (ok)
        return 0;
    char got[96];
    eng_shape_format(&t->shape, got, sizeof got);
    return eng_op_err(c, FS_EINVAL, "input %d has shape %s; it must be %s", i, got, what);
}

/* Every present input is float (float16/bfloat16 run through float). */
static int require_float(const eng_op_ctx_t *c)
{
    int rc = 0;
    for (int i = 0; rc == 0 && i < c->n_inputs; i++)
        if (c->inputs[i])
            rc = eng_op_require_dtype(c, i, dt_float);
    return rc;
}

/* ---- CausalConvWithState ------------------------------------------------------------- */

static int activation_silu(const eng_node_t *n, bool *silu)
{
    const char *a = eng_attr_s(n, "activation", "none");
    *silu = strcmp(a, "silu") == 0 || strcmp(a, "swish") == 0;
    if (*silu || strcmp(a, "none") == 0)
        return 0;
    return fs_err(FS_ENOTSUP, "node '%s' (%s): activation '%.64s' is not supported (none, silu "
                  "or swish)", n->name, n->op_type, a);
}

static int causal_conv_check(const eng_node_t *n, int opset)
{
    bool silu;
    return activation_silu(n, &silu);
}

int eng_causal_conv_params(const eng_op_ctx_t *c, eng_causal_conv_t *p)
{
    const eng_tensor_t *x = c->inputs[0], *w = c->inputs[1];
    memset(p, 0, sizeof *p);
    int rc = activation_silu(c->node, &p->silu);
    if (rc)
        return rc;
    if (x->shape.rank != 3)
        return shape_is(c, 0, 3, (int64_t[]){-1, -1, -1}, "[batch, channels, length]");
    p->batch = x->shape.dims[0];
    p->channels = x->shape.dims[1];
    p->length = x->shape.dims[2];
    char want[96];
    snprintf(want, sizeof want, "[%lld, 1, k] (k >= 1)", (long long)p->channels);
    if ((rc = shape_is(c, 1, 3, (int64_t[]){p->channels, 1, -1}, want)))
        return rc;
    p->kernel = w->shape.dims[2];
    if (p->kernel < 1)
        return shape_is(c, 1, 3, (int64_t[]){p->channels, 1, 1}, want);
    snprintf(want, sizeof want, "[%lld]", (long long)p->channels);
    if ((rc = shape_is(c, 2, 1, (int64_t[]){p->channels}, want)))
        return rc;
    snprintf(want, sizeof want, "[%lld, %lld, %lld]", (long long)p->batch,
             (long long)p->channels, (long long)(p->kernel - 1));
    if ((rc = shape_is(c, 3, 3, (int64_t[]){p->batch, p->channels, p->kernel - 1}, want)))
        return rc;
    p->bias = eng_ctx_in(c, 2) != NULL;
    p->past = eng_ctx_in(c, 3) != NULL;
    return 0;
}

static int causal_conv_infer(eng_op_ctx_t *c)
{
    eng_causal_conv_t p;
    int rc = require_float(c);
    if (rc || (rc = eng_causal_conv_params(c, &p)))
        return rc;
    eng_ctx_out_set(c, 0, ENG_DT_FLOAT, &c->inputs[0]->shape);
    eng_shape_t st = {.rank = 3, .dims = {p.batch, p.channels, p.kernel - 1}};
    eng_ctx_out_set(c, 1, ENG_DT_FLOAT, &st);
    return 0;
}

/* ---- LinearAttention ------------------------------------------------------------------ */

static int linattn_rule(const eng_node_t *n, eng_linattn_rule_t *rule)
{
    static const struct {
        const char *name;
        eng_linattn_rule_t rule;
    } rules[] = {{"linear", ENG_LINATTN_LINEAR},
                 {"gated", ENG_LINATTN_GATED},
                 {"delta", ENG_LINATTN_DELTA},
                 {"gated_delta", ENG_LINATTN_GATED_DELTA}};
    const char *r = eng_attr_s(n, "update_rule", "gated_delta");
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(r, rules[i].name) == 0) {
            *rule = rules[i].rule;
            return 0;
        }
    return fs_err(FS_ENOTSUP, "node '%s' (%s): update_rule '%.64s' is not supported (linear, "
                  "gated, delta or gated_delta)", n->name, n->op_type, r);
}

static int linattn_check(const eng_node_t *n, int opset)
{
    eng_linattn_rule_t rule;
    int rc = linattn_rule(n, &rule);
    if (rc)
        return rc;
    int64_t hq = eng_attr_i(n, "q_num_heads", 0), hkv = eng_attr_i(n, "kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
        return fs_err(FS_EINVAL, "node '%s' (%s): q_num_heads (%lld) must be a positive multiple "
                      "of kv_num_heads (%lld)", n->name, n->op_type, (long long)hq,
                      (long long)hkv);
    return 0;
}

int eng_linattn_params(const eng_op_ctx_t *c, eng_linattn_t *p)
{
    memset(p, 0, sizeof *p);
    int rc = linattn_check(c->node, c->opset);
    if (rc || (rc = linattn_rule(c->node, &p->rule)))
        return rc;
    p->q_heads = eng_attr_i(c->node, "q_num_heads", 0);
    p->kv_heads = eng_attr_i(c->node, "kv_num_heads", 0);
    p->gated = p->rule == ENG_LINATTN_GATED || p->rule == ENG_LINATTN_GATED_DELTA;
    p->delta = p->rule == ENG_LINATTN_DELTA || p->rule == ENG_LINATTN_GATED_DELTA;
    const eng_tensor_t *q = c->inputs[0], *v = c->inputs[2];
    if (q->shape.rank != 3)
        return shape_is(c, 0, 3, (int64_t[]){-1, -1, -1}, "[batch, steps, q_num_heads * d_k]");
    p->batch = q->shape.dims[0];
    p->steps = q->shape.dims[1];
    if (q->shape.dims[2] % p->q_heads != 0)
        return eng_op_err(c, FS_EINVAL, "query's last dim %lld is not a multiple of q_num_heads "
                          "%lld", (long long)q->shape.dims[2], (long long)p->q_heads);
    p->d_k = q->shape.dims[2] / p->q_heads;
    char want[128];
    snprintf(want, sizeof want, "[%lld, %lld, %lld] (kv_num_heads * d_k)", (long long)p->batch,
             (long long)p->steps, (long long)(p->kv_heads * p->d_k));
    if ((rc = shape_is(c, 1, 3, (int64_t[]){p->batch, p->steps, p->kv_heads * p->d_k}, want)))
        return rc;
    snprintf(want, sizeof want, "[%lld, %lld, kv_num_heads * d_v]", (long long)p->batch,
             (long long)p->steps);
    if ((rc = shape_is(c, 2, 3, (int64_t[]){p->batch, p->steps, -1}, want)))
        return rc;
    if (v->shape.dims[2] % p->kv_heads != 0)
        return eng_op_err(c, FS_EINVAL, "value's last dim %lld is not a multiple of "
                          "kv_num_heads %lld", (long long)v->shape.dims[2],
                          (long long)p->kv_heads);
    p->d_v = v->shape.dims[2] / p->kv_heads;
    snprintf(want, sizeof want, "[%lld, %lld, %lld, %lld]", (long long)p->batch,
             (long long)p->kv_heads, (long long)p->d_k, (long long)p->d_v);
    if ((rc = shape_is(c, 3, 4, (int64_t[]){p->batch, p->kv_heads, p->d_k, p->d_v}, want)))
        return rc;
    p->past = eng_ctx_in(c, 3) != NULL;
    const eng_tensor_t *decay = eng_ctx_in(c, 4), *beta = eng_ctx_in(c, 5);
    if (p->gated != (decay != NULL) || p->delta != (beta != NULL))
        return eng_op_err(c, FS_EINVAL, "update_rule '%s' %s decay and %s beta",
                          eng_attr_s(c->node, "update_rule", "gated_delta"),
                          p->gated ? "needs" : "takes no", p->delta ? "needs" : "takes no");
    if (decay) {
        p->decay_per = decay->shape.rank == 3 && decay->shape.dims[2] == p->kv_heads
                           ? 1
                           : p->d_k;
        snprintf(want, sizeof want, "[%lld, %lld, %lld or %lld] (per head or per key dim)",
                 (long long)p->batch, (long long)p->steps, (long long)p->kv_heads,
                 (long long)(p->kv_heads * p->d_k));
        if ((rc = shape_is(c, 4, 3, (int64_t[]){p->batch, p->steps, p->kv_heads * p->decay_per},
                           want)))
            return rc;
    }
    if (beta) {
        p->beta_heads = beta->shape.rank == 3 && beta->shape.dims[2] == 1 ? 1 : p->kv_heads;
        snprintf(want, sizeof want, "[%lld, %lld, %lld or 1]", (long long)p->batch,
                 (long long)p->steps, (long long)p->kv_heads);
        if ((rc = shape_is(c, 5, 3, (int64_t[]){p->batch, p->steps, p->beta_heads}, want)))
            return rc;
    }
    float scale = eng_attr_f(c->node, "scale", 0.0f);
    p->scale = scale != 0.0f ? scale : (float)(1.0 / sqrt((double)p->d_k));
    return 0;
}

static int linattn_infer(eng_op_ctx_t *c)
{
    eng_linattn_t p;
    int rc = require_float(c);
    if (rc || (rc = eng_linattn_params(c, &p)))
        return rc;
    eng_shape_t ys = {.rank = 3, .dims = {p.batch, p.steps, p.q_heads * p.d_v}};
    eng_shape_t ss = {.rank = 4, .dims = {p.batch, p.kv_heads, p.d_k, p.d_v}};
    eng_ctx_out_set(c, 0, ENG_DT_FLOAT, &ys);
    eng_ctx_out_set(c, 1, ENG_DT_FLOAT, &ss);
    return 0;
}

ENG_OP_DEF(CausalConvWithState, causal_conv_check, causal_conv_infer, -1);
ENG_OP_DEF(LinearAttention, linattn_check, linattn_infer, -1);
