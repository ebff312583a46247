/* exec.c -- running a plan: from one activation block when the plan is
 * static, tensor by tensor from the cache when shapes depend on data.
 *
 * Static: the block comes through alloc_cache_batch_begin, so an attached
 * arena policy supplies it (and gives it back at batch end); without one it
 * is a single cache allocation. Every value's data pointer is set from the
 * plan (constant, caller's input, block + offset), the steps run in order,
 * and the graph outputs are copied out before the block goes back.
 * Dynamic: each node's op infers its output shapes with every input value
 * in hand, each output is allocated from the cache under the model's
 * activation owner, and a value is freed as soon as its last reader ran. */
#include <stdlib.h>
#include <string.h>

#include "alloc/arena.h"
#include "common/error.h"
#include "engine/plan_impl.h"

/* Per-run state: the data pointers of every value, and the ctx arrays. */
typedef struct run_state {
    eng_tensor_t *t;              /* n_values */
    const eng_tensor_t **ins;     /* max_io */
    eng_tensor_t **outs;          /* max_io */
} run_state_t;

static int run_state_init(const eng_plan_t *p, run_state_t *rs)
{
    rs->t = calloc(p->n_values, sizeof *rs->t);
    rs->ins = calloc((size_t)p->max_io, sizeof *rs->ins);
    rs->outs = calloc((size_t)p->max_io, sizeof *rs->outs);
    if (!rs->t || !rs->ins || !rs->outs) {
        free(rs->t);
        free(rs->ins);
        free(rs->outs);
        return fs_err(FS_ENOMEM, "out of host memory running a model");
    }
    for (size_t i = 0; i < p->n_values; i++)
        rs->t[i] = p->values[i].t;
    return 0;
}

static void run_state_fini(run_state_t *rs)
{
    free(rs->t);
    free(rs->ins);
    free(rs->outs);
}

/* Points the ctx arrays at node n's values; absent ones stay NULL. Where a
 * value lives comes from `storage` (the dynamic path's, which changes as it
 * runs) or, when that is NULL, from the plan itself. */
static void run_views(const eng_plan_t *p, run_state_t *rs, const eng_node_t *n,
                      const plan_storage_t *storage)
{
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        plan_storage_t where = v < 0 ? PV_NONE : storage ? storage[v] : p->values[v].storage;
        rs->ins[i] = where != PV_NONE ? &rs->t[v] : NULL;
    }
    for (int i = 0; i < n->n_outputs; i++)
        rs->outs[i] = n->outputs[i] >= 0 ? &rs->t[n->outputs[i]] : NULL;
}

/* Copies the graph outputs into new host tensors. */
static int copy_outputs(const eng_plan_t *p, const run_state_t *rs, eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    for (size_t j = 0; j < g->n_outputs; j++) {
        const eng_tensor_t *src = &rs->t[g->outputs[j]];
        int rc = eng_tensor_alloc_host(src->dtype, &src->shape, &outputs[j]);
        if (rc != 0) {
            for (size_t k = 0; k < j; k++) {
                eng_tensor_free(outputs[k]);
                outputs[k] = NULL;
            }
            return rc;
        }
        size_t bytes = eng_tensor_bytes(src);
        if (bytes)
            memcpy(outputs[j]->data, src->data, bytes);
    }
    return 0;
}

static int run_static(const eng_plan_t *p, const eng_tensor_t *inputs, eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    run_state_t rs;
    int rc = run_state_init(p, &rs);
    if (rc != 0)
        return rc;
    alloc_arena_t *arena = NULL;
    void *block = NULL;
    bool own_block = false;
    if (p->block_bytes) {
        rc = alloc_cache_batch_begin(p->cache, p->block_bytes, 0, p->act_owner, &arena);
        if (rc == 0 && arena)
            rc = alloc_arena_alloc(arena, p->block_bytes, 256, &block);
        else if (rc == 0) {
            rc = alloc_cache_alloc(p->cache, p->block_bytes, 0, p->act_owner, &block);
            own_block = rc == 0;
        }
        if (rc != 0)
            goto done;
    }
    for (size_t i = 0; i < g->n_inputs; i++)
        rs.t[g->inputs[i]].data = inputs[i].data;
    for (size_t v = 0; v < p->n_values; v++)
        if (p->values[v].storage == PV_ACT)
            rs.t[v].data = (char *)block + p->values[v].offset;

    for (size_t s = 0; s < p->n_steps && rc == 0; s++) {
        const plan_step_t *st = &p->steps[s];
        run_views(p, &rs, st->node, NULL);
        eng_op_ctx_t ctx = {.node = st->node, .opset = g->opset, .n_inputs = st->node->n_inputs,
                            .inputs = rs.ins, .n_outputs = st->node->n_outputs,
                            .outputs = rs.outs, .n_threads = p->n_threads,
                            .scratch = st->scratch_bytes ? (char *)block + st->scratch_offset : NULL,
                            .scratch_bytes = st->scratch_bytes};
        rc = st->kernel->run(&ctx);
    }
    if (rc == 0)
        rc = copy_outputs(p, &rs, outputs);
done:
    if (own_block)
        alloc_cache_free(p->cache, block);
    if (p->block_bytes)
        alloc_cache_batch_end(p->cache, arena);
    run_state_fini(&rs);
    return rc;
}

/* Frees an activation of the dynamic path once nothing will read it. */
static void dyn_release(const eng_plan_t *p, run_state_t *rs, plan_storage_t *storage,
                        int *readers, int v)
{
    if (v < 0 || storage[v] != PV_ACT || --readers[v] > 0 || p->graph->values[v].is_output)
        return;
    alloc_cache_free(p->cache, rs->t[v].data);
    rs->t[v].data = NULL;
    storage[v] = PV_NONE;
}

/* The dynamic path: infer, allocate, run, free, node by node. */
static int run_dynamic(const eng_plan_t *p, const eng_tensor_t *inputs, eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    run_state_t rs;
    int rc = run_state_init(p, &rs);
    if (rc != 0)
        return rc;
    plan_storage_t *storage = malloc(p->n_values * sizeof *storage);
    int *readers = calloc(p->n_values, sizeof *readers);
    if (!storage || !readers) {
        rc = fs_err(FS_ENOMEM, "out of host memory running a model");
        goto done;
    }
    for (size_t v = 0; v < p->n_values; v++) {
        const eng_value_t *gv = &g->values[v];
        storage[v] = gv->kind == ENG_VALUE_CONST ? PV_CONST : PV_NONE;
        rs.t[v] = gv->kind == ENG_VALUE_CONST ? gv->constant : (eng_tensor_t){0};
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        storage[g->inputs[i]] = PV_INPUT;
        rs.t[g->inputs[i]] = inputs[i];
    }
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!p->node_done[i])
            for (int k = 0; k < g->nodes[i].n_inputs; k++)
                if (g->nodes[i].inputs[k] >= 0)
                    readers[g->nodes[i].inputs[k]]++;

    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        if (p->node_done[i])
            continue;
        const eng_node_t *n = &g->nodes[i];
        const eng_cpu_kernel_t *kernel = eng_cpu_kernel_find(n->op_type);
        run_views(p, &rs, n, storage);
        eng_op_ctx_t ctx = {.node = n, .opset = g->opset, .n_inputs = n->n_inputs,
                            .inputs = rs.ins, .n_outputs = n->n_outputs, .outputs = rs.outs,
                            .n_threads = p->n_threads};
        if (!kernel) {
            rc = eng_op_err(&ctx, FS_ENOTSUP, "no CPU kernel for this op");
            break;
        }
        if ((rc = n->op->infer(&ctx)) != 0)
            break;
        for (int o = 0; o < n->n_outputs && rc == 0; o++) {
            int v = n->outputs[o];
            if (v < 0)
                continue;
            size_t bytes = eng_tensor_bytes(&rs.t[v]);
            rc = alloc_cache_alloc(p->cache, bytes ? bytes : 1, 0, p->act_owner, &rs.t[v].data);
            if (rc == 0)
                storage[v] = PV_ACT;
        }
        void *scratch = NULL;
        size_t scratch_bytes = rc == 0 && kernel->scratch_bytes ? kernel->scratch_bytes(&ctx) : 0;
        if (scratch_bytes)
            rc = alloc_cache_alloc(p->cache, scratch_bytes, 0, p->act_owner, &scratch);
        if (rc == 0) {
            ctx.scratch = scratch;
            ctx.scratch_bytes = scratch_bytes;
            rc = kernel->run(&ctx);
        }
        alloc_cache_free(p->cache, scratch);
        for (int k = 0; k < n->n_inputs; k++)
            dyn_release(p, &rs, storage, readers, n->inputs[k]);
        /* Outputs nobody reads (an unused optional output) go at once. */
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v >= 0 && readers[v] == 0 && storage[v] == PV_ACT && !g->values[v].is_output) {
                alloc_cache_free(p->cache, rs.t[v].data);
                rs.t[v].data = NULL;
                storage[v] = PV_NONE;
            }
        }
    }
    if (rc == 0)
        rc = copy_outputs(p, &rs, outputs);
done:
    if (storage)
        for (size_t v = 0; v < p->n_values; v++)
            if (storage[v] == PV_ACT)
                alloc_cache_free(p->cache, rs.t[v].data);
    free(storage);
    free(readers);
    run_state_fini(&rs);
    return rc;
}

int eng_plan_run(const eng_plan_t *p, const eng_tensor_t *inputs, size_t n_inputs,
                 eng_tensor_t **outputs)
{
    if (!eng_plan_matches(p, inputs, n_inputs))
        return fs_err(FS_EINVAL, "inputs do not match the plan's signature");
    return p->dynamic ? run_dynamic(p, inputs, outputs) : run_static(p, inputs, outputs);
}
