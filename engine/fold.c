/* fold.c -- constant folding at load: every node whose inputs are all
 * constants runs once on the host, and its outputs become constants of the
 * graph, stored like weights (in the model's cache memory, under its owner
 * tag). Runs in topological order, so whole constant subgraphs fold (the
 * light models' ConstantOfShape weights, Transpose of a weight, ...). A
 * node without a CPU kernel is left for the planner to report; so are the
 * control-flow nodes (they have none), whose subgraphs are not folded:
 * their nodes run each time the subgraph does. A value a subgraph reads
 * may be folded -- it stays a value of the model graph, now constant. */
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/parse.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/op.h"
#include "engine/plan.h"

/* FS_ENOMEM for a folded node's `what` of `bytes` that did not fit, with
 * the memory's own reason (the cache's limit and use) when it gave one. */
static int fold_oom(const eng_op_ctx_t *ctx, const eng_weight_alloc_t *wa, const char *what,
                    size_t bytes)
{
    char why[FS_ERRMSG_MAX], size[32];
    snprintf(why, sizeof why, "%s", wa && wa->alloc ? fs_errmsg() : "out of host memory");
    fs_format_size(bytes, size, sizeof size);
    return eng_op_err(ctx, FS_ENOMEM, "constant folding needs a %s %s: %s", size, what, why);
}

/* Folds node n; its outputs' data and its workspace come from `wa`. */
static int fold_node(eng_graph_t *g, const eng_weight_alloc_t *wa, eng_node_t *n,
                     const eng_kernel_t *kernel)
{
    const eng_tensor_t *ins[n->n_inputs > 0 ? n->n_inputs : 1];
    eng_tensor_t outv[n->n_outputs > 0 ? n->n_outputs : 1];
    eng_tensor_t *outs[n->n_outputs > 0 ? n->n_outputs : 1];
    for (int i = 0; i < n->n_inputs; i++)
        ins[i] = n->inputs[i] >= 0 ? &g->values[n->inputs[i]].constant : NULL;
    for (int o = 0; o < n->n_outputs; o++) {
        outv[o] = (eng_tensor_t){0};
        outs[o] = n->outputs[o] >= 0 ? &outv[o] : NULL;
    }
    eng_op_ctx_t ctx = {.node = n, .opset = g->opset, .n_inputs = n->n_inputs, .inputs = ins,
                        .n_outputs = n->n_outputs, .outputs = outs, .n_threads = 1};
    int rc = eng_op_infer(&ctx);
    int made = 0;
    for (int o = 0; o < n->n_outputs && rc == 0; o++, made++) {
        if (!outs[o])
            continue;
        size_t bytes = eng_tensor_bytes(outs[o]);
        outs[o]->data = eng_weights_alloc(wa, bytes ? bytes : 1);
        if (!outs[o]->data)
            rc = fold_oom(&ctx, wa, "constant", bytes);
    }
    /* The workspace comes from the same memory as the constants, so that a
     * model's folding stays under the cache's limit too. */
    size_t scratch_bytes = rc == 0 ? eng_op_scratch_bytes(kernel, &ctx) : 0;
    void *scratch = scratch_bytes ? eng_weights_alloc(wa, scratch_bytes) : NULL;
    if (scratch_bytes && !scratch)
        rc = fold_oom(&ctx, wa, "workspace", scratch_bytes);
    if (rc == 0) {
        ctx.scratch = scratch;
        ctx.scratch_bytes = scratch_bytes;
        rc = eng_op_run(kernel, &ctx);
    }
    if (scratch)
        eng_weights_free(wa, scratch);
    if (rc != 0) {
        for (int o = 0; o < made; o++)
            if (outs[o] && outs[o]->data)
                eng_weights_free(wa, outs[o]->data);
        return rc;
    }
    for (int o = 0; o < n->n_outputs; o++) {
        if (!outs[o])
            continue;
        eng_value_t *v = &g->values[n->outputs[o]];
        v->kind = ENG_VALUE_CONST;
        v->constant = outv[o];
        g->weight_bytes += eng_tensor_bytes(&outv[o]);
    }
    return 0;
}

int eng_fold_constants(eng_graph_t *g, const eng_weight_alloc_t *wa, bool *done)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node_t *n = &g->nodes[i];
        if (done[i])
            continue; /* a rewrite before folding dropped it (engine/fuse.c) */
        bool all_const = true;
        for (int k = 0; k < n->n_inputs && all_const; k++)
            all_const = n->inputs[k] < 0 || g->values[n->inputs[k]].kind == ENG_VALUE_CONST;
        const eng_kernel_t *kernel = eng_backend_kernel(eng_backend_host(), n->op);
        if (!all_const || !kernel)
            continue;
        int rc = fold_node(g, wa, n, kernel);
        if (rc == FS_EDYNAMIC)
            continue;
        if (rc != 0)
            return rc;
        done[i] = true;
    }
    return 0;
}
