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
 * activation owner, and a value is freed as soon as its last reader ran.
 *
 * Every device call goes through the plan's backend (engine/backend.h).
 * On a device without host memory (a GPU) the same walk queues every
 * kernel on the instance's stream; memory is tagged with that stream.
 * Inputs are copied into their place in the block and outputs out of it
 * through one pinned staging buffer per run (pageable copies when the
 * model has no staging cache), and the run synchronises with its stream
 * once, at the end, so a kernel's asynchronous failure is reported by that
 * run. On the dynamic path an op that needs an input's value to infer
 * shapes gets a host copy of every small input (one stream
 * synchronisation), then retries, and if it still needs one, a copy of
 * every input (NonZero's, Unique's: a whole tensor decides their shapes).
 * On a host-memory device (the CPU) the copies, mirrors and syncs are
 * empty: values are used where they are. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"
#include "engine/plan_impl.h"

#define EXEC_ALIGN ((size_t)256)
/* Dynamic device path: inputs up to this many elements are copied to the
 * host when an op needs values to infer shapes (shape tensors, scalars);
 * an op that still needs values after that (NonMaxSuppression's boxes and
 * scores) gets all its inputs copied. */
#define EXEC_HOST_MIRROR_MAX 64

/* Per-run state: the data pointers of every value, and the ctx arrays. */
typedef struct run_state {
    eng_tensor_t *t;              /* n_values */
    const eng_tensor_t **ins;     /* max_io */
    eng_tensor_t **outs;          /* max_io */
    const eng_tensor_t **hins;    /* max_io: host views of ins (device runs) */
    alloc_stream_t stream;        /* device runs: the instance's stream */
} run_state_t;

static void run_state_fini(run_state_t *rs);

static int run_state_init(const eng_plan_t *p, run_state_t *rs)
{
    rs->t = calloc(p->n_values, sizeof *rs->t);
    rs->ins = calloc((size_t)p->max_io, sizeof *rs->ins);
    rs->outs = calloc((size_t)p->max_io, sizeof *rs->outs);
    rs->hins = calloc((size_t)p->max_io, sizeof *rs->hins);
    rs->stream = eng_backend_stream(p->be, p->inst);
    if (!rs->t || !rs->ins || !rs->outs || !rs->hins) {
        run_state_fini(rs);
        return fs_err(FS_ENOMEM, "out of host memory running a model");
    }
    int rc = eng_backend_bind(p->be, p->inst);
    if (rc != 0) {
        run_state_fini(rs);
        return rc;
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
    free(rs->hins);
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

static int dev_h2d(const eng_plan_t *p, void *dst, const void *src, size_t n)
{
    return eng_backend_copy_h2d(p->be, p->inst, dst, src, n);
}

static int dev_d2h(const eng_plan_t *p, void *dst, const void *src, size_t n)
{
    return eng_backend_copy_d2h(p->be, p->inst, dst, src, n);
}

static int dev_sync(const eng_plan_t *p)
{
    return eng_backend_sync(p->be, p->inst);
}

static size_t align_up(size_t n)
{
    return (n + EXEC_ALIGN - 1) & ~(EXEC_ALIGN - 1);
}

/* Value v's data in host memory when the host has it (a caller's input, a
 * constant's host copy, a plan-time value; on a host-memory device, every
 * value), else NULL. `storage` is the dynamic path's (NULL: the plan's). */
static const void *host_copy(const eng_plan_t *p, const run_state_t *rs,
                             const eng_tensor_t *inputs, const plan_storage_t *storage, int v)
{
    if (p->be->host_memory)
        return rs->t[v].data;
    const eng_graph_t *g = p->graph;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] == v)
            return inputs[i].data;
    if (storage)
        return storage[v] == PV_CONST ? g->values[v].constant.data : NULL;
    return p->values[v].host;
}

/* Copies the graph outputs into new host tensors. Outputs the host already
 * has are copied there; the rest come device-to-host through `staging`
 * (NULL: straight into the output), then one stream sync. */
static int copy_outputs(const eng_plan_t *p, const run_state_t *rs, const eng_tensor_t *inputs,
                        const plan_storage_t *storage, void *staging, size_t staging_off,
                        eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    int rc = 0;
    size_t j = 0;
    for (; j < g->n_outputs && rc == 0; j++)
        rc = eng_tensor_alloc_host(rs->t[g->outputs[j]].dtype, &rs->t[g->outputs[j]].shape,
                                   &outputs[j]);
    size_t n_alloc = rc == 0 ? j : j - 1;
    size_t off = staging_off;
    bool queued = false;
    for (j = 0; j < g->n_outputs && rc == 0; j++) {
        int v = g->outputs[j];
        const eng_tensor_t *src = &rs->t[v];
        size_t bytes = eng_tensor_bytes(src);
        const void *host = host_copy(p, rs, inputs, storage, v);
        if (!bytes)
            continue;
        if (host) {
            memcpy(outputs[j]->data, host, bytes);
        } else {
            void *dst = staging ? (char *)staging + off : outputs[j]->data;
            rc = dev_d2h(p, dst, src->data, bytes);
            queued = true;
        }
        off += align_up(bytes);
    }
    if (queued) {
        int src = dev_sync(p);
        rc = rc ? rc : src;
    }
    off = staging_off;
    for (j = 0; j < g->n_outputs && rc == 0 && staging; j++) {
        int v = g->outputs[j];
        size_t bytes = eng_tensor_bytes(&rs->t[v]);
        if (bytes && !host_copy(p, rs, inputs, storage, v))
            memcpy(outputs[j]->data, (char *)staging + off, bytes);
        off += align_up(bytes);
    }
    if (rc != 0)
        for (size_t k = 0; k < n_alloc; k++) {
            eng_tensor_free(outputs[k]);
            outputs[k] = NULL;
        }
    return rc;
}

/* The host views of node n's inputs from `views` (per value, data = the
 * host copy or NULL), for a kernel that reads a value on the host; NULL
 * when there are none (a host-memory device: every input is host). */
static const eng_tensor_t *const *host_views(run_state_t *rs, const eng_node_t *n,
                                             const eng_tensor_t *views)
{
    if (!views)
        return NULL;
    for (int i = 0; i < n->n_inputs; i++)
        rs->hins[i] = n->inputs[i] >= 0 && rs->ins[i] && views[n->inputs[i]].data
                          ? &views[n->inputs[i]]
                          : NULL;
    return rs->hins;
}

/* Runs (or, on a device with a stream, queues) every step of a static plan. */
static int run_steps(const eng_plan_t *p, run_state_t *rs, void *block)
{
    const eng_graph_t *g = p->graph;
    int rc = 0;
    for (size_t s = 0; s < p->n_steps && rc == 0; s++) {
        const plan_step_t *st = &p->steps[s];
        run_views(p, rs, st->node, NULL);
        eng_op_ctx_t ctx = {.node = st->node, .opset = g->opset, .n_inputs = st->node->n_inputs,
                            .inputs = rs->ins, .n_outputs = st->node->n_outputs,
                            .outputs = rs->outs, .n_threads = p->n_threads,
                            .widen = st->widen,
                            .scratch = st->scratch_bytes ? (char *)block + st->scratch_offset : NULL,
                            .scratch_bytes = st->scratch_bytes, .instance = p->inst,
                            .host_inputs = host_views(rs, st->node, p->host_views)};
        rc = eng_op_run(st->kernel, &ctx);
    }
    return rc;
}

static void capture_fences_resume(const eng_plan_t *p, alloc_stream_t stream)
{
    alloc_cache_stream_capture(p->cache, stream, false);
    if (p->staging)
        alloc_cache_stream_capture(p->staging, stream, false);
}

/* A static plan's steps: replayed from the graph in `r` when it was
 * captured with this activation block, else captured now (from the second
 * run on: the first warms up the libraries' choices) and replayed, else
 * launched one by one. Without replay state, or on a device that does not
 * capture, always one by one. A plan whose capture fails stays on plain
 * launches. */
static int run_steps_replay(const eng_plan_t *p, eng_plan_replay_t *r, run_state_t *rs,
                            void *block)
{
    if (!r || !eng_backend_can_capture(p->be))
        return run_steps(p, rs, block);
    if (r->graph && r->block == block)
        return eng_backend_graph_launch(p->be, p->inst, r->graph);
    bool capture = !r->failed && r->runs++ >= 1 && p->n_steps;
    if (!capture)
        return run_steps(p, rs, block);
    eng_backend_graph_destroy(p->be, r->graph);
    r->graph = NULL;
    /* No fence from another thread may land in the capture. */
    alloc_stream_t stream = rs->stream;
    int rc = alloc_cache_stream_capture(p->cache, stream, true);
    if (rc == 0 && p->staging && (rc = alloc_cache_stream_capture(p->staging, stream, true)) != 0)
        alloc_cache_stream_capture(p->cache, stream, false);
    if (rc != 0)
        return run_steps(p, rs, block);
    rc = eng_backend_capture_begin(p->be, p->inst);
    if (rc != 0) {
        capture_fences_resume(p, stream);
        return rc;
    }
    int run_rc = run_steps(p, rs, block);
    void *graph = NULL;
    rc = eng_backend_capture_end(p->be, p->inst, &graph);
    capture_fences_resume(p, stream);
    if (run_rc != 0) {
        eng_backend_graph_destroy(p->be, graph);
        return run_rc;
    }
    if (rc != 0) {
        /* Nothing ran: run the steps for real, without a graph from now on. */
        FS_LOG_W("engine", "%s graph capture failed, running launch by launch: %s", p->be->name,
                 fs_errmsg());
        r->failed = true;
        return run_steps(p, rs, block);
    }
    r->graph = graph;
    r->block = block;
    return eng_backend_graph_launch(p->be, p->inst, r->graph);
}

static int run_static(const eng_plan_t *p, eng_plan_replay_t *replay, const eng_tensor_t *inputs,
                      eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    run_state_t rs;
    int rc = run_state_init(p, &rs);
    if (rc != 0)
        return rc;
    alloc_batch_t *batch = NULL;
    void *block = NULL, *staging = NULL;
    /* Admission: a plan that needs more than the limit could never run, so
     * it is refused before anything is allocated or queued. */
    if (p->block_bytes > alloc_cache_limit(p->cache)) {
        char need[32], lim[32];
        fs_format_size(p->block_bytes, need, sizeof need);
        fs_format_size(alloc_cache_limit(p->cache), lim, sizeof lim);
        rc = fs_err(FS_ENOMEM,
                    "out of memory: inputs of these shapes need %s of activation memory, more "
                    "than the memory limit of '%s' (%s; memory.limit_bytes, "
                    "memory.limit_fraction)",
                    need, alloc_cache_name(p->cache), lim);
        goto done;
    }
    if (p->block_bytes) {
        rc = alloc_cache_batch_begin(p->cache, p->block_bytes, rs.stream, p->act_owner, &batch);
        if (rc != 0)
            goto done;
        block = alloc_batch_ptr(batch);
    }
    /* Pinned staging only speeds the copies: without room for it under its
     * limit, they go from pageable memory. */
    if (p->staging && p->staging_bytes &&
        alloc_cache_alloc(p->staging, p->staging_bytes, 0, p->staging_owner, &staging) != 0)
        staging = NULL;
    for (size_t i = 0; i < g->n_inputs; i++)
        rs.t[g->inputs[i]].data = inputs[i].data;
    for (size_t v = 0; v < p->n_values; v++)
        if (p->values[v].storage == PV_ACT)
            rs.t[v].data = block ? (char *)block + p->values[v].offset : NULL;

    /* Inputs copied into their place in the block (through staging): the
     * plan marks them (never on a host-memory device). */
    size_t off = 0;
    for (size_t v = 0; v < p->n_values && rc == 0; v++) {
        int i = p->values[v].input;
        if (i < 0)
            continue;
        size_t bytes = eng_tensor_bytes(&inputs[i]);
        const void *src = inputs[i].data;
        if (staging && bytes) {
            memcpy((char *)staging + off, src, bytes);
            src = (char *)staging + off;
        }
        rc = dev_h2d(p, rs.t[v].data, src, bytes);
        off += align_up(bytes);
    }

    if (rc == 0)
        rc = run_steps_replay(p, replay, &rs, block);
    if (rc == 0)
        rc = copy_outputs(p, &rs, inputs, NULL, staging, off, outputs);
done:
    /* Work may still be queued (after an error, or with every output known
     * on the host): let it finish before its memory goes back, since
     * staging is host memory the next run rewrites. */
    {
        int src = dev_sync(p);
        rc = rc ? rc : src;
    }
    if (staging)
        alloc_cache_free(p->staging, staging);
    alloc_cache_batch_end(p->cache, batch);
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

/* The dynamic path on a device without host memory: what infer sees of
 * node n's inputs (the host copy where there is one, else shape only). */
static void infer_views(run_state_t *rs, const eng_node_t *n, eng_tensor_t *iv,
                        const eng_tensor_t *hv)
{
    for (int i = 0; i < n->n_inputs; i++) {
        if (!rs->ins[i])
            continue;
        iv[i] = *rs->ins[i];
        iv[i].dtype = hv[n->inputs[i]].dtype; /* the graph's, not a weight's device dtype */
        iv[i].data = hv[n->inputs[i]].data;
        rs->ins[i] = &iv[i];
    }
}

/* The same: host copies of node n's inputs the host lacks (those of at
 * most max_numel elements), so an op can read the values that decide its
 * shapes. */
static int mirror_inputs(const eng_plan_t *p, run_state_t *rs, const eng_node_t *n,
                         eng_tensor_t *hv, void **mirror, int64_t max_numel)
{
    int rc = 0;
    bool queued = false;
    for (int i = 0; i < n->n_inputs && rc == 0; i++) {
        int v = n->inputs[i];
        if (v < 0 || hv[v].data || !rs->t[v].data ||
            eng_shape_numel(&rs->t[v].shape) > max_numel)
            continue;
        size_t bytes = eng_tensor_bytes(&rs->t[v]);
        if (!(mirror[v] = malloc(bytes ? bytes : 1)))
            return fs_err(FS_ENOMEM, "out of host memory running a model");
        rc = dev_d2h(p, mirror[v], rs->t[v].data, bytes);
        hv[v] = rs->t[v];
        hv[v].data = mirror[v];
        queued = true;
    }
    if (queued) {
        int src = dev_sync(p);
        rc = rc ? rc : src;
    }
    return rc;
}

/* The dynamic path, node n: infers its output shapes. On a device without
 * host memory infer sees the host copies (hv), and an op that needs a
 * value the host lacks gets its small inputs mirrored, then retries (and
 * if it still lacks one, gets all its inputs mirrored and retries); on
 * return rs's views are the device ones and ctx->host_inputs is set. */
static int dyn_infer(const eng_plan_t *p, run_state_t *rs, eng_op_ctx_t *ctx,
                     const plan_storage_t *storage, eng_tensor_t *hv, void **mirror,
                     eng_tensor_t *iv)
{
    const eng_node_t *n = ctx->node;
    if (!hv)
        return eng_op_infer(ctx);
    infer_views(rs, n, iv, hv);
    int rc = eng_op_infer(ctx);
    /* First the small inputs; then, if the op still lacks a value, all. */
    for (int pass = 0; pass < 2 && rc == FS_EDYNAMIC; pass++) {
        run_views(p, rs, n, storage);
        if ((rc = mirror_inputs(p, rs, n, hv, mirror,
                                pass == 0 ? EXEC_HOST_MIRROR_MAX : ENG_NUMEL_MAX)) != 0)
            return rc;
        infer_views(rs, n, iv, hv);
        rc = eng_op_infer(ctx);
    }
    run_views(p, rs, n, storage);
    ctx->host_inputs = host_views(rs, n, hv);
    return rc;
}

/* The dynamic path: infer, allocate, run, free, node by node. */
static int run_dynamic(const eng_plan_t *p, const eng_tensor_t *inputs, eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    /* Host copies of values (hv, mirror, iv): only a device without host
     * memory keeps them apart from the values themselves. */
    bool apart = !p->be->host_memory;
    run_state_t rs;
    int rc = run_state_init(p, &rs);
    if (rc != 0)
        return rc;
    plan_storage_t *storage = malloc(p->n_values * sizeof *storage);
    int *readers = calloc(p->n_values, sizeof *readers);
    eng_tensor_t *hv = apart ? calloc(p->n_values, sizeof *hv) : NULL;
    void **mirror = apart ? calloc(p->n_values, sizeof *mirror) : NULL;
    eng_tensor_t *iv = apart ? calloc((size_t)p->max_io, sizeof *iv) : NULL;
    if (!storage || !readers || (apart && (!hv || !mirror || !iv))) {
        rc = fs_err(FS_ENOMEM, "out of host memory running a model");
        goto done;
    }
    for (size_t v = 0; v < p->n_values; v++) {
        const eng_value_t *gv = &g->values[v];
        storage[v] = gv->kind == ENG_VALUE_CONST ? PV_CONST : PV_NONE;
        rs.t[v] = gv->kind == ENG_VALUE_CONST ? gv->constant : (eng_tensor_t){0};
        if (!apart)
            continue;
        hv[v] = rs.t[v];
        if (gv->kind == ENG_VALUE_CONST)
            rs.t[v].data = p->dev_const[v];
        if (gv->kind == ENG_VALUE_CONST && p->dev_dtype && p->dev_dtype[v] != ENG_DT_UNDEFINED)
            rs.t[v].dtype = p->dev_dtype[v];
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        storage[v] = PV_INPUT;
        rs.t[v] = inputs[i];
        if (!apart)
            continue;
        /* The device copy is an activation like any other. */
        hv[v] = inputs[i];
        size_t bytes = eng_tensor_bytes(&inputs[i]);
        rs.t[v].data = NULL;
        if ((rc = alloc_cache_alloc(p->cache, bytes ? bytes : 1, rs.stream, p->act_owner,
                                    &rs.t[v].data)) != 0)
            goto done;
        storage[v] = PV_ACT;
        if ((rc = dev_h2d(p, rs.t[v].data, inputs[i].data, bytes)) != 0)
            goto done;
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
        const eng_kernel_t *kernel = eng_backend_kernel(p->be, n->op);
        run_views(p, &rs, n, storage);
        eng_op_ctx_t ctx = {.node = n, .opset = g->opset, .n_inputs = n->n_inputs,
                            .inputs = rs.ins, .n_outputs = n->n_outputs, .outputs = rs.outs,
                            .n_threads = p->n_threads, .instance = p->inst};
        if (!kernel) {
            rc = eng_op_err(&ctx, FS_ENOTSUP, "no %s kernel for this op", p->be->name);
            break;
        }
        if ((rc = dyn_infer(p, &rs, &ctx, storage, hv, mirror, iv)) != 0)
            break;
        for (int o = 0; o < n->n_outputs && rc == 0; o++) {
            int v = n->outputs[o];
            if (v < 0)
                continue;
            size_t bytes = eng_tensor_bytes(&rs.t[v]);
            rs.t[v].data = NULL;
            rc = alloc_cache_alloc(p->cache, bytes ? bytes : 1, rs.stream, p->act_owner,
                                   &rs.t[v].data);
            if (rc == 0)
                storage[v] = PV_ACT;
            if (hv)
                hv[v] = (eng_tensor_t){.dtype = rs.t[v].dtype, .shape = rs.t[v].shape};
        }
        void *scratch = NULL;
        size_t scratch_bytes = rc == 0 ? eng_op_scratch_bytes(kernel, &ctx) : 0;
        if (scratch_bytes)
            rc = alloc_cache_alloc(p->cache, scratch_bytes, rs.stream, p->act_owner, &scratch);
        if (rc == 0) {
            ctx.scratch = scratch;
            ctx.scratch_bytes = scratch_bytes;
            rc = eng_op_run(kernel, &ctx);
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
        rc = copy_outputs(p, &rs, inputs, storage, NULL, 0, outputs);
done:
    {
        int src = dev_sync(p);
        rc = rc ? rc : src;
    }
    if (storage)
        for (size_t v = 0; v < p->n_values; v++)
            if (storage[v] == PV_ACT)
                alloc_cache_free(p->cache, rs.t[v].data);
    if (mirror)
        for (size_t v = 0; v < p->n_values; v++)
            free(mirror[v]);
    free(mirror);
    free(hv);
    free(iv);
    free(storage);
    free(readers);
    run_state_fini(&rs);
    return rc;
}

int eng_plan_run(const eng_plan_t *p, eng_plan_replay_t *replay, const eng_tensor_t *inputs,
                 size_t n_inputs, eng_tensor_t **outputs)
{
    if (!eng_plan_matches(p, inputs, n_inputs))
        return fs_err(FS_EINVAL, "inputs do not match the plan's signature");
    return p->dynamic ? run_dynamic(p, inputs, outputs) : run_static(p, replay, inputs, outputs);
}
