/* plan_build.c -- building a plan for one input-shape signature, and folding
 * constants at load.
 *
 * The planner walks the nodes in topological order once:
 *  1. Shapes. Each node's op infers its outputs' dtypes and shapes from the
 *     concrete input shapes. A node whose inputs are all known (constants,
 *     or values computed earlier at plan time) runs right away on the host
 *     and its outputs become plan-time constants: shape subgraphs (Shape,
 *     Gather, Concat, Unsqueeze ... feeding Reshape) fold this way, since
 *     Shape and Size read only their input's shape. An op that answers
 *     FS_EDYNAMIC (its output shape needs a value only known when running)
 *     makes the whole plan dynamic.
 *  2. Lifetimes. Every remaining output is a buffer live from the step that
 *     writes it to the last step that reads it (graph outputs: to the end).
 *     An element-wise op whose designated input dies at this step, is an
 *     activation of the same byte size, and is not a graph output, writes in
 *     place: its output takes over the input's buffer. A kernel workspace is
 *     a buffer live for its step only.
 *  3. Offsets. alloc_plan_build_hinted places the buffers greedily (best
 *     fit among buffers whose lifetimes overlap) in one block, trying first
 *     the order the model's previous plan won with (env->place_hint).
 * Guarantee: no two buffers live at the same step overlap; the block's size
 * is reported with the lower bound (the most bytes live at one step). */
#include "engine/plan_impl.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/plan.h"
#include "common/error.h"
#include "common/log.h"

/* Ops that read only their input's shape, never its data. */
static bool op_reads_shape_only(const char *op_type)
{
    return strcmp(op_type, "Shape") == 0 || strcmp(op_type, "Size") == 0;
}

void eng_plan_destroy(eng_plan_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_values; i++) {
        plan_value_t *v = &p->values[i];
        if (v->storage != PV_FOLDED)
            continue;
        /* Computed on the host; placed on a device, t.data is its copy there. */
        plan_host_free(p, v->host ? v->host : v->t.data);
        if (v->host && v->t.data)
            alloc_cache_free(p->cache, v->t.data);
    }
    free(p->host_views);
    free(p->values);
    free(p->steps);
    free(p->inputs);
    free(p);
}

void eng_plan_replay_clear(const eng_plan_t *p, eng_plan_replay_t *r)
{
    eng_backend_graph_destroy(p->be, r->graph);
    memset(r, 0, sizeof *r);
}

/* Prepares ctx views for `node` over plan values (data as in `values`). */
static void node_views(const eng_node_t *n, plan_value_t *values, const eng_tensor_t **ins,
                       eng_tensor_t **outs)
{
    for (int i = 0; i < n->n_inputs; i++)
        ins[i] = n->inputs[i] >= 0 && values[n->inputs[i]].storage != PV_NONE
                     ? &values[n->inputs[i]].t
                     : NULL;
    for (int i = 0; i < n->n_outputs; i++)
        outs[i] = n->outputs[i] >= 0 ? &values[n->outputs[i]].t : NULL;
}

/* Checks an input tensor against the graph input's declared dtype/dims. */
static int check_input(const eng_value_t *v, const eng_tensor_t *t)
{
    eng_io_info_t io;
    eng_value_io_info(v, &io);
    return eng_io_check(&io, NULL, t, NULL);
}

/* Step 1: shapes, folding, steps. Sets p->dynamic instead of failing when an
 * op needs run-time values. */
static int plan_infer(eng_plan_t *p, const eng_plan_env_t *env)
{
    const eng_graph_t *g = env->graph;
    const eng_tensor_t **ins = NULL;
    eng_tensor_t **outs = NULL;
    int max_io = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_inputs > max_io)
            max_io = g->nodes[i].n_inputs;
        if (g->nodes[i].n_outputs > max_io)
            max_io = g->nodes[i].n_outputs;
    }
    p->max_io = max_io;
    ins = calloc((size_t)max_io, sizeof *ins);
    outs = calloc((size_t)max_io, sizeof *outs);
    if (!ins || !outs) {
        free(ins);
        free(outs);
        return fs_err(FS_ENOMEM, "out of host memory planning");
    }
    int rc = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        if (env->node_done[i])
            continue;
        const eng_node_t *n = &g->nodes[i];
        node_views(n, p->values, ins, outs);
        eng_op_ctx_t ctx = {.node = n, .opset = g->opset, .n_inputs = n->n_inputs,
                            .inputs = ins, .n_outputs = n->n_outputs, .outputs = outs,
                            .n_threads = p->n_threads, .instance = p->inst};
        rc = eng_op_infer(&ctx);
        if (rc == FS_EDYNAMIC) {
            FS_LOG_D("engine", "plan is dynamic: %s", fs_errmsg());
            p->dynamic = true;
            rc = 0;
            break;
        }
        if (rc != 0)
            break;
        for (int o = 0; o < n->n_outputs; o++)
            if (n->outputs[o] >= 0)
                p->values[n->outputs[o]].storage = PV_ACT;

        bool known = true;
        for (int k = 0; k < n->n_inputs && known; k++) {
            const plan_value_t *in = n->inputs[k] >= 0 ? &p->values[n->inputs[k]] : NULL;
            known = !in || in->storage == PV_NONE || in->t.data ||
                    (op_reads_shape_only(n->op_type) && k == 0);
        }
        /* Plan-time nodes run on the host; steps on the plan's device. */
        const eng_backend_i *be = known ? eng_backend_host() : p->be;
        const eng_kernel_t *kernel = eng_backend_kernel(be, n->op);
        if (!kernel) {
            rc = eng_op_err(&ctx, FS_ENOTSUP, "no %s kernel for this op", be->name);
            break;
        }
        if (known)
            rc = plan_fold_node(p, n, kernel, &ctx);
        else
            rc = plan_add_step(p, n, kernel, &ctx);
    }
    free(ins);
    free(outs);
    return rc;
}

int eng_plan_build(const eng_plan_env_t *env, const eng_tensor_t *inputs, size_t n_inputs,
                   eng_plan_t **out)
{
    const eng_graph_t *g = env->graph;
    if (n_inputs != g->n_inputs)
        return fs_err(FS_EINVAL, "the model takes %zu inputs, %zu given", g->n_inputs, n_inputs);
    eng_plan_t *p = calloc(1, sizeof *p);
    if (!p)
        return fs_err(FS_ENOMEM, "out of host memory planning");
    p->cache = env->cache;
    p->act_owner = env->act_owner;
    p->const_owner = env->const_owner;
    p->graph = g;
    p->node_done = env->node_done;
    p->n_threads = env->n_threads > 0 ? env->n_threads : 1;
    p->be = env->backend;
    p->inst = env->instance;
    p->dev_const = env->dev_const;
    p->host_cache = env->host_cache;
    p->host_owner = env->host_owner;
    p->staging = env->staging;
    p->staging_owner = env->staging_owner;
    p->max_loop_iterations = env->max_loop_iterations > 0 ? env->max_loop_iterations
                                                          : ENG_LOOP_ITERATIONS_DEFAULT;
    p->n_values = g->n_values;
    p->values = calloc(g->n_values, sizeof *p->values);
    p->steps = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p->steps);
    p->inputs = calloc(n_inputs ? n_inputs : 1, sizeof *p->inputs);
    int rc = 0;
    if (!p->values || !p->steps || !p->inputs) {
        rc = fs_err(FS_ENOMEM, "out of host memory planning");
        goto fail;
    }
    for (size_t i = 0; i < g->n_values; i++) {
        const eng_value_t *v = &g->values[i];
        plan_value_t *pv = &p->values[i];
        pv->first_step = pv->last_step = -1;
        pv->input = -1;
        if (v->kind == ENG_VALUE_CONST) {
            pv->storage = PV_CONST;
            pv->t = v->constant;
        }
    }
    for (size_t i = 0; i < n_inputs; i++) {
        const eng_value_t *v = &g->values[g->inputs[i]];
        if ((rc = check_input(v, &inputs[i])) != 0)
            goto fail;
        plan_value_t *pv = &p->values[g->inputs[i]];
        pv->storage = PV_INPUT;
        pv->t = inputs[i];
        pv->t.data = NULL;
        p->inputs[i] = inputs[i];
        p->inputs[i].data = NULL;
    }
    p->n_inputs = n_inputs;
    if ((rc = plan_infer(p, env)) != 0)
        goto fail;
    if (!p->dynamic && !p->be->host_memory)
        plan_device_inputs(p);
    if (!p->dynamic && (rc = plan_memory(p, env->place_hint)) != 0)
        goto fail;
    if (!p->dynamic && !p->be->host_memory && (rc = plan_device_place(p)) != 0)
        goto fail;
    *out = p;
    return 0;
fail:
    eng_plan_destroy(p);
    return rc;
}

bool eng_plan_matches(const eng_plan_t *p, const eng_tensor_t *inputs, size_t n_inputs)
{
    if (n_inputs != p->n_inputs)
        return false;
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i].dtype != p->inputs[i].dtype ||
            !eng_shape_equal(&inputs[i].shape, &p->inputs[i].shape))
            return false;
    return true;
}

void eng_plan_info(const eng_plan_t *p, eng_plan_info_t *out)
{
    out->activation_bytes = p->block_bytes;
    out->lower_bound_bytes = p->lower_bound_bytes;
    out->n_steps = p->n_steps;
    out->n_folded = p->n_folded;
    out->dynamic = p->dynamic;
}
