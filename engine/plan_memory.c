/* plan_memory.c -- a plan's folded values, its steps, and its memory plan:
 * lifetimes, in-place reuse and offsets in one activation block (the
 * algorithm is in plan_build.c's header). */
#include <stdlib.h>
#include <string.h>

#include "alloc/plan.h"
#include "common/error.h"
#include "engine/plan_impl.h"

#define PLAN_ALIGN ((size_t)256)

int plan_host_alloc(const eng_plan_t *p, size_t bytes, void **out)
{
    if (p->host_cache)
        return alloc_cache_alloc(p->host_cache, bytes ? bytes : 1, 0, p->host_owner, out);
    if (!(*out = malloc(bytes ? bytes : 1)))
        return fs_err(FS_ENOMEM, "out of host memory for %zu bytes of plan-time values", bytes);
    return 0;
}

void plan_host_free(const eng_plan_t *p, void *ptr)
{
    if (!ptr)
        return;
    if (p->host_cache)
        alloc_cache_free(p->host_cache, ptr);
    else
        free(ptr);
}

int plan_fold_node(eng_plan_t *p, const eng_node_t *n, const eng_kernel_t *cpu_kernel,
                   eng_op_ctx_t *ctx)
{
    int rc = 0;
    void *scratch = NULL;
    for (int o = 0; o < n->n_outputs && rc == 0; o++) {
        if (n->outputs[o] < 0)
            continue;
        plan_value_t *v = &p->values[n->outputs[o]];
        /* Data is never NULL for a known value, even when it has no elements. */
        if ((rc = plan_host_alloc(p, eng_tensor_bytes(&v->t), &v->t.data)) == 0)
            v->storage = PV_FOLDED;
    }
    size_t scratch_bytes = rc == 0 ? eng_op_scratch_bytes(cpu_kernel, ctx) : 0;
    if (rc == 0 && scratch_bytes) {
        rc = plan_host_alloc(p, scratch_bytes, &scratch);
        ctx->scratch = scratch;
        ctx->scratch_bytes = scratch_bytes;
    }
    if (rc == 0) {
        ctx->n_threads = p->n_threads;
        rc = eng_op_run(cpu_kernel, ctx);
    }
    plan_host_free(p, scratch);
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    if (rc == 0)
        p->n_folded++;
    /* On error the outputs stay PV_FOLDED (or PV_ACT without data) and
     * eng_plan_destroy frees what was taken. */
    return rc;
}

int plan_add_step(eng_plan_t *p, const eng_node_t *n, const eng_kernel_t *kernel,
                  const eng_op_ctx_t *ctx)
{
    int s = (int)p->n_steps++;
    plan_step_t *st = &p->steps[s];
    st->node = n;
    st->kernel = kernel;
    st->widen = ctx->widen;
    st->scratch_bytes = 0;
    if (kernel->scratch_bytes || ctx->widen != ENG_DT_UNDEFINED)
        st->scratch_bytes = eng_op_scratch_bytes(kernel, ctx);
    for (int o = 0; o < n->n_outputs; o++) {
        if (n->outputs[o] < 0)
            continue;
        plan_value_t *v = &p->values[n->outputs[o]];
        v->first_step = v->last_step = s;
    }
    for (int i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i] < 0)
            continue;
        plan_value_t *v = &p->values[n->inputs[i]];
        if (v->storage == PV_ACT)
            v->last_step = s;
    }
    return 0;
}

/* The buffer a value's data lives in: follows in-place links to the root. */
static int buffer_root(const int *buf_of, int v)
{
    while (buf_of[v] != v)
        v = buf_of[v];
    return v;
}

/* Lets step s write output 0 over its in-place input when that input dies
 * here, is an activation of the same byte size, and is no graph output. */
static void plan_inplace(eng_plan_t *p, int s, int *buf_of, int *buf_last)
{
    const eng_node_t *n = p->steps[s].node;
    int k = n->op->inplace_input;
    if (k < 0 || k >= n->n_inputs || n->n_outputs < 1 || n->inputs[k] < 0 || n->outputs[0] < 0)
        return;
    int in = n->inputs[k], out = n->outputs[0];
    const plan_value_t *vi = &p->values[in], *vo = &p->values[out];
    if (vi->storage != PV_ACT || vo->storage != PV_ACT || p->graph->values[in].is_output)
        return;
    if (eng_tensor_bytes(&vi->t) != eng_tensor_bytes(&vo->t) ||
        eng_dtype_size(vi->t.dtype) != eng_dtype_size(vo->t.dtype))
        return;
    /* The same value read twice by this node (x + x) also dies here. */
    for (int i = 0; i < n->n_inputs; i++)
        if (i != k && n->inputs[i] >= 0 && buffer_root(buf_of, n->inputs[i]) == buffer_root(buf_of, in))
            return;
    int root = buffer_root(buf_of, in);
    if (buf_last[root] != s)
        return;
    buf_of[out] = root;
    buf_last[root] = vo->last_step;
}

/* FS_ENOMEM for a plan whose block cannot be sized (alloc_plan_build's
 * FS_ERANGE: a tensor or the block past SIZE_MAX, which shapes from a
 * model's own constants can ask for), naming its largest activation. */
static int plan_oversize(const eng_plan_t *p)
{
    size_t big = SIZE_MAX, big_bytes = 0;
    for (size_t v = 0; v < p->n_values; v++) {
        size_t bytes = eng_tensor_bytes(&p->values[v].t);
        if (p->values[v].storage == PV_ACT && (big == SIZE_MAX || bytes > big_bytes)) {
            big = v;
            big_bytes = bytes;
        }
    }
    if (big == SIZE_MAX)
        return fs_err(FS_ENOMEM, "the plan's workspaces need more bytes than memory can hold");
    char shape[160];
    eng_shape_format(&p->values[big].t.shape, shape, sizeof shape);
    return fs_err(FS_ENOMEM, "the activations need more bytes than memory can hold: the largest, "
                  "'%s', is %s %s (%s%zu bytes)", p->graph->values[big].name,
                  eng_dtype_name(p->values[big].t.dtype), shape,
                  big_bytes == SIZE_MAX ? "at least " : "", big_bytes);
}

int plan_memory(eng_plan_t *p, alloc_plan_hint_t *hint)
{
    const eng_graph_t *g = p->graph;
    int n_values = (int)p->n_values;
    int *buf_of = malloc((size_t)n_values * sizeof *buf_of);
    int *buf_last = malloc((size_t)n_values * sizeof *buf_last);
    int *slot_of = malloc((size_t)n_values * sizeof *slot_of);
    alloc_plan_tensor_t *ts = calloc((size_t)n_values + p->n_steps + 1, sizeof *ts);
    int rc = 0;
    if (!buf_of || !buf_last || !slot_of || !ts) {
        rc = fs_err(FS_ENOMEM, "out of host memory planning");
        goto done;
    }
    for (size_t j = 0; j < g->n_outputs; j++) {
        plan_value_t *v = &p->values[g->outputs[j]];
        if (v->storage == PV_ACT)
            v->last_step = (int)p->n_steps;
    }
    for (int v = 0; v < n_values; v++) {
        buf_of[v] = v;
        buf_last[v] = p->values[v].last_step;
        slot_of[v] = -1;
    }
    for (size_t s = 0; s < p->n_steps; s++)
        plan_inplace(p, (int)s, buf_of, buf_last);

    /* One planner tensor per buffer root, then one per workspace. */
    size_t n = 0;
    for (int v = 0; v < n_values; v++) {
        const plan_value_t *pv = &p->values[v];
        if (pv->storage != PV_ACT || buf_of[v] != v)
            continue;
        slot_of[v] = (int)n;
        ts[n].size_bytes = eng_tensor_bytes(&pv->t);
        ts[n].first_step = (uint32_t)pv->first_step;
        ts[n].last_step = (uint32_t)buf_last[v];
        n++;
    }
    size_t first_scratch = n;
    for (size_t s = 0; s < p->n_steps; s++) {
        if (!p->steps[s].scratch_bytes)
            continue;
        ts[n].size_bytes = p->steps[s].scratch_bytes;
        ts[n].first_step = ts[n].last_step = (uint32_t)s;
        n++;
    }
    size_t total = 0, bound = 0;
    if ((rc = alloc_plan_build_hinted(ts, n, PLAN_ALIGN, hint, &total, &bound)) != 0) {
        if (rc == FS_ERANGE)
            rc = plan_oversize(p);
        goto done;
    }
    p->block_bytes = total;
    p->lower_bound_bytes = bound;
    for (int v = 0; v < n_values; v++)
        if (p->values[v].storage == PV_ACT)
            p->values[v].offset = ts[slot_of[buffer_root(buf_of, v)]].offset;
    size_t k = first_scratch;
    for (size_t s = 0; s < p->n_steps; s++)
        if (p->steps[s].scratch_bytes)
            p->steps[s].scratch_offset = ts[k++].offset;
done:
    free(buf_of);
    free(buf_last);
    free(slot_of);
    free(ts);
    return rc;
}

void plan_device_inputs(eng_plan_t *p)
{
    const eng_graph_t *g = p->graph;
    for (size_t i = 0; i < g->n_inputs; i++) {
        plan_value_t *v = &p->values[g->inputs[i]];
        v->input = (int)i;
        v->first_step = 0;
        v->last_step = -1;
    }
    for (size_t s = 0; s < p->n_steps; s++) {
        const eng_node_t *n = p->steps[s].node;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && p->values[n->inputs[k]].input >= 0)
                p->values[n->inputs[k]].last_step = (int)s;
    }
    /* Only inputs a step reads need a device copy; the rest (read by
     * plan-time nodes for their shape, or unused) stay host-only. */
    for (size_t i = 0; i < g->n_inputs; i++) {
        plan_value_t *v = &p->values[g->inputs[i]];
        if (v->last_step >= 0)
            v->storage = PV_ACT;
        else
            v->input = -1;
    }
}

int plan_device_place(eng_plan_t *p)
{
    if (!(p->host_views = calloc(p->n_values ? p->n_values : 1, sizeof *p->host_views)))
        return fs_err(FS_ENOMEM, "out of host memory planning");
    int rc = 0;
    for (size_t i = 0; i < p->n_values && rc == 0; i++) {
        plan_value_t *v = &p->values[i];
        p->host_views[i] = v->t;
        if (v->storage == PV_CONST) {
            v->host = v->t.data;
            v->t.data = p->dev_const[i];
        } else if (v->storage == PV_FOLDED) {
            v->host = v->t.data;
            v->t.data = NULL;
            size_t bytes = eng_tensor_bytes(&v->t);
            rc = eng_backend_upload(p->be, p->inst, p->cache, p->const_owner, v->host, bytes,
                                    &v->t.data);
        }
        p->host_views[i].data = v->host;
    }
    /* Staging: every copied-in input, each aligned (outputs land in pinned
     * tensors of their own: exec.c, copy_outputs). */
    size_t staging = 0;
    for (size_t i = 0; i < p->n_values; i++)
        if (p->values[i].input >= 0)
            staging += (eng_tensor_bytes(&p->values[i].t) + PLAN_ALIGN - 1) & ~(PLAN_ALIGN - 1);
    p->staging_bytes = staging;
    /* Plan-time values came from host memory that stays with the plan, but
     * a pageable copy may still be in flight: settle them once here. */
    if (rc == 0)
        rc = eng_backend_sync(p->be, p->inst);
    return rc;
}
