/* op_schema.c -- lookup in the generated table of ONNX op schemas
 * (engine/ops/schema.inc, written by tools/gen_op_schema.py). Each op has
 * a short run of versions, oldest first; a lookup walks it. */
#include "engine/op_schema.h"

#include <stddef.h>
#include <string.h>

#include "engine/op.h"

#include "engine/ops/schema.inc"

const eng_op_schema_t *eng_op_schema_find(eng_op_id_t op, int opset)
{
    const struct schema_run *r = &schema_index[op];
    const eng_op_schema_t *found = NULL;
    for (int k = 0; k < r->count && schema_versions[r->first + k].since_version <= opset; k++)
        found = &schema_versions[r->first + k];
    return found;
}

const eng_op_schema_t *eng_op_schema_first(eng_op_id_t op)
{
    const struct schema_run *r = &schema_index[op];
    return r->count ? &schema_versions[r->first] : NULL;
}

const char *eng_op_schema_onnx_version(void)
{
    return SCHEMA_ONNX_VERSION;
}

int eng_op_schema_opset_known(void)
{
    return SCHEMA_OPSET_KNOWN;
}

/* Slot i of a formal parameter list (see eng_op_schema_input). */
static const eng_op_param_t *param_at(const eng_op_param_t *params, int n, int i, bool *required)
{
    const eng_op_param_t *p = NULL;
    if (i < n)
        p = &params[i];
    else if (n > 0 && params[n - 1].option == ENG_OP_PARAM_VARIADIC)
        p = &params[n - 1];
    *required = p && (p->option == ENG_OP_PARAM_SINGLE ||
                      (p->option == ENG_OP_PARAM_VARIADIC && i - (n - 1) < p->min_arity));
    return p;
}

const eng_op_param_t *eng_op_schema_input(const eng_op_schema_t *s, int i, bool *required)
{
    return param_at(s->in_params, s->n_in_params, i, required);
}

const eng_op_param_t *eng_op_schema_output(const eng_op_schema_t *s, int i, bool *required)
{
    return param_at(s->out_params, s->n_out_params, i, required);
}

const eng_op_attr_spec_t *eng_op_schema_attr(const eng_op_schema_t *s, const char *name)
{
    for (int k = 0; k < s->n_attrs; k++)
        if (strcmp(s->attrs[k].name, name) == 0)
            return &s->attrs[k];
    return NULL;
}

bool eng_op_ctx_complete(const eng_op_ctx_t *ctx)
{
    eng_op_id_t op = ctx->node->op->id;
    /* An engine-internal op has no schema: its definition checks its
     * operands against what the rewrite that made it recorded. */
    if (eng_op_is_internal(op))
        return true;
    const eng_op_schema_t *s = eng_op_schema_find(op, ctx->opset);
    if (!s)
        s = eng_op_schema_first(op);
    if (!s)
        return false; /* a table older than list.h: nothing was checked */
    /* A control-flow node's implicit inputs (graph.h) are outside its schema. */
    int n_in = ctx->n_inputs, explicit_n = ctx->node->n_inputs - ctx->node->n_implicit;
    if (ctx->node->n_implicit > 0 && n_in > explicit_n)
        n_in = explicit_n;
    /* A fused MatMul's bias (graph.h) is outside the schema too. */
    if (ctx->node->bias && op == ENG_OP_MatMul) {
        int extra = ctx->node->residual ? 2 : 1; /* and its residual */
        if (n_in < 2 + extra || !ctx->inputs[2] || (extra == 2 && !ctx->inputs[3]))
            return false;
        n_in -= extra;
    }
    /* So is a channels-last Conv's fused residual (graph.h: input 3). */
    if (ctx->node->conv_residual && n_in > 3)
        n_in = 3;
    bool required;
    for (int i = 0; i < n_in; i++)
        if (eng_op_schema_input(s, i, &required) && required && !ctx->inputs[i])
            return false;
    for (int i = 0; i < ctx->n_outputs; i++)
        if (eng_op_schema_output(s, i, &required) && required && !ctx->outputs[i])
            return false;
    return n_in >= s->min_inputs && n_in <= s->max_inputs &&
           ctx->n_outputs >= s->min_outputs && ctx->n_outputs <= s->max_outputs;
}
