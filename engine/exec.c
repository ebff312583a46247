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
 * That walk is a frame (engine/exec_impl.h), which runs any graph over a
 * binding of its values: the model graph over the caller's inputs, and
 * the subgraphs of If, Loop and Scan, whose nodes engine/exec_control.c
 * runs in frames nested in their node's, on the same cache and owner.
 *
 * Every device call goes through the plan's backend (engine/backend.h).
 * On a device without host memory (a GPU) the same walk queues every
 * kernel on the instance's stream; memory is tagged with that stream.
 * Inputs are copied into their place in the block through one pinned
 * staging buffer per run (pageable copies when the model has no staging
 * cache); outputs go straight into pinned host tensors the caller gets
 * (copy_outputs), and the run synchronises with its stream
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
#include "engine/exec_impl.h"

#define EXEC_ALIGN ((size_t)256)
/* Dynamic device path: inputs up to this many elements are copied to the
 * host when an op needs values to infer shapes (shape tensors, scalars);
 * an op that still needs values after that (NonMaxSuppression's boxes and
 * scores) gets all its inputs copied. */
#define EXEC_HOST_MIRROR_MAX 64

/* Room in a run state for a small plan (the demo MLP has 18 values): its
 * arrays then live in the state itself, on the running thread's stack,
 * and a run allocates none of them. */
#define RUN_LOCAL_VALUES 32
#define RUN_LOCAL_IO 16

/* A static plan's per-run state: the data pointers of every value, and the ctx
 * arrays. */
typedef struct run_state {
    eng_tensor_t *t;              /* n_values */
    const eng_tensor_t **ins;     /* max_io */
    eng_tensor_t **outs;          /* max_io */
    const eng_tensor_t **hins;    /* max_io: host views of ins (device runs) */
    alloc_stream_t stream;        /* device runs: the instance's stream */
    bool heap;                    /* the arrays were malloc'ed (a plan too big for local_*) */
    eng_tensor_t local_t[RUN_LOCAL_VALUES];
    const eng_tensor_t *local_ins[RUN_LOCAL_IO], *local_hins[RUN_LOCAL_IO];
    eng_tensor_t *local_outs[RUN_LOCAL_IO];
} run_state_t;

static void run_state_fini(run_state_t *rs);

/* Every entry of the arrays is written before it is read (run_views,
 * host_views, the values' copy below), so they start uncleared. */
static int run_state_init(const eng_plan_t *p, run_state_t *rs)
{
    rs->heap = p->n_values > RUN_LOCAL_VALUES || p->max_io > RUN_LOCAL_IO;
    if (rs->heap) {
        rs->t = malloc(p->n_values * sizeof *rs->t);
        rs->ins = malloc((size_t)p->max_io * sizeof *rs->ins);
        rs->outs = malloc((size_t)p->max_io * sizeof *rs->outs);
        rs->hins = malloc((size_t)p->max_io * sizeof *rs->hins);
    } else {
        rs->t = rs->local_t;
        rs->ins = rs->local_ins;
        rs->outs = rs->local_outs;
        rs->hins = rs->local_hins;
    }
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
    if (!rs->heap)
        return;
    free(rs->t);
    free(rs->ins);
    free(rs->outs);
    free(rs->hins);
}

/* Points the ctx arrays at step node n's values; absent ones stay NULL. */
static void run_views(const eng_plan_t *p, run_state_t *rs, const eng_node_t *n)
{
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        rs->ins[i] = v >= 0 && p->values[v].storage != PV_NONE ? &rs->t[v] : NULL;
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

/* Static plans: value v's data in host memory when the host has it (a
 * caller's input, a constant's host copy, a plan-time value; on a
 * host-memory device, every value), else NULL. */
static const void *host_copy(const eng_plan_t *p, const run_state_t *rs,
                             const eng_tensor_t *inputs, int v)
{
    if (p->be->host_memory)
        return rs->t[v].data;
    const eng_graph_t *g = p->graph;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] == v)
            return inputs[i].data;
    return p->values[v].host;
}

/* Output j's host tensor, for a value of `src`'s type that comes from the
 * device (from_device) or from host memory. One from the device lands in
 * pinned memory from the staging cache when it has room: the copy runs at
 * full DMA speed straight into the tensor the caller gets, and the cache
 * hands the same block to the next run, so a large output (a language
 * model's logits) costs neither page faults nor a second copy. It is the
 * server's memory, not the model's: it outlives the run, and may outlive
 * the model (a response still being written when it unloads). Without
 * room, or from the host, it is malloc'd. */
static int output_alloc(const eng_plan_t *p, const eng_tensor_t *src, bool from_device,
                        eng_tensor_t **out)
{
    return eng_tensor_alloc_from(from_device ? p->staging : NULL, ALLOC_OWNER_SERVER, src->dtype,
                                 &src->shape, out);
}

/* Copies the graph outputs (their values in t[]) into new host tensors.
 * Output j the host already has (host[j] not NULL) is copied from there;
 * the rest come device-to-host straight into their tensor (output_alloc),
 * then one stream sync. */
static int copy_outputs(const eng_plan_t *p, const eng_tensor_t *t, const void *const *host,
                        eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    int rc = 0;
    size_t j = 0;
    for (; j < g->n_outputs && rc == 0; j++) {
        const eng_tensor_t *src = &t[g->outputs[j]];
        /* A string output is packed with the bytes its records point to, so
         * that it owns them past the run, the request's inputs and the
         * model (strings are host-only: engine/tensor.h). */
        if (src->dtype == ENG_DT_STRING)
            rc = eng_tensor_pack_strings(&src->shape, host[j] ? host[j] : src->data,
                                         &outputs[j]);
        else
            rc = output_alloc(p, src, !host[j], &outputs[j]);
    }
    size_t n_alloc = rc == 0 ? j : j - 1;
    bool queued = false;
    for (j = 0; j < g->n_outputs && rc == 0; j++) {
        const eng_tensor_t *src = &t[g->outputs[j]];
        size_t bytes = eng_tensor_bytes(src);
        if (!bytes || src->dtype == ENG_DT_STRING)
            continue;
        if (host[j]) {
            memcpy(outputs[j]->data, host[j], bytes);
        } else {
            rc = dev_d2h(p, outputs[j]->data, src->data, bytes);
            queued = true;
        }
    }
    if (queued) {
        int src = dev_sync(p);
        rc = rc ? rc : src;
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
        run_views(p, rs, st->node);
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
    if (rc != 0) {
        /* The capture was invalidated (an uncapturable call), and a launch
         * after that fails too, so run_rc says nothing of the steps
         * themselves: nothing ran. Run them for real, without a graph from
         * now on; a step that really fails fails there. (The server's
         * hostile suite on an H200 saw a request fail here while bad models
         * loaded beside it.) */
        FS_LOG_W("engine", "%s graph capture failed, running launch by launch: %s", p->be->name,
                 fs_errmsg());
        r->failed = true;
        return run_steps(p, rs, block);
    }
    if (run_rc != 0) {
        eng_backend_graph_destroy(p->be, graph);
        return run_rc;
    }
    r->graph = graph;
    r->block = block;
    return eng_backend_graph_launch(p->be, p->inst, r->graph);
}

/* Whether a caller's input is a block of the staging cache itself (pinned
 * already: eng_tensor_alloc_cached), so it is copied to the device from
 * where it is. */
static bool pinned_input(const eng_plan_t *p, const void *data)
{
    return alloc_cache_holds(p->staging, data);
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
    for (size_t i = 0; i < g->n_inputs; i++)
        rs.t[g->inputs[i]].data = inputs[i].data;
    for (size_t v = 0; v < p->n_values; v++)
        if (p->values[v].storage == PV_ACT)
            rs.t[v].data = block ? (char *)block + p->values[v].offset : NULL;

    /* Inputs copied into their place in the block: the plan marks them
     * (never on a host-memory device). One already pinned goes as it is;
     * the others through the staging block, taken at the first of them.
     * Pinned staging only speeds the copies: without room for it under
     * its limit, they go from pageable memory. */
    size_t off = 0;
    bool staging_tried = false;
    for (size_t v = 0; v < p->n_values && rc == 0; v++) {
        int i = p->values[v].input;
        if (i < 0)
            continue;
        size_t bytes = eng_tensor_bytes(&inputs[i]);
        const void *src = inputs[i].data;
        bool stage = p->staging && bytes && !pinned_input(p, src);
        if (stage && !staging_tried) {
            staging_tried = true;
            if (alloc_cache_alloc(p->staging, p->staging_bytes, 0, p->staging_owner,
                                  &staging) != 0)
                staging = NULL;
        }
        if (stage && staging) {
            memcpy((char *)staging + off, src, bytes);
            src = (char *)staging + off;
        }
        rc = dev_h2d(p, rs.t[v].data, src, bytes);
        off += align_up(bytes);
    }

    if (rc == 0)
        rc = run_steps_replay(p, replay, &rs, block);
    if (rc == 0) {
        const void *local_host[RUN_LOCAL_IO] = {0};
        const void **host = g->n_outputs <= RUN_LOCAL_IO ? local_host
                                                         : malloc((g->n_outputs + 1) * sizeof *host);
        for (size_t j = 0; host && j < g->n_outputs; j++)
            host[j] = host_copy(p, &rs, inputs, g->outputs[j]);
        rc = host ? copy_outputs(p, rs.t, host, outputs)
                  : fs_err(FS_ENOMEM, "out of host memory running a model");
        if (host != local_host)
            free(host);
    }
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

/* ---- the dynamic path: frames (exec_impl.h) ----------------------------------- */

int exec_alloc(const exec_frame_t *f, eng_tensor_t *t)
{
    size_t bytes = eng_tensor_bytes(t);
    t->data = NULL;
    return alloc_cache_alloc(f->p->cache, bytes ? bytes : 1, f->stream, f->p->act_owner,
                             &t->data);
}

void exec_free(const exec_frame_t *f, void *data)
{
    alloc_cache_free(f->p->cache, data);
}

int exec_read(const exec_frame_t *f, const eng_tensor_t *t, const void *host, void *dst,
              size_t bytes)
{
    if (host || f->p->be->host_memory) {
        memcpy(dst, host ? host : t->data, bytes);
        return 0;
    }
    int rc = dev_d2h(f->p, dst, t->data, bytes), src = dev_sync(f->p);
    return rc ? rc : src;
}

int exec_write(const exec_frame_t *f, eng_tensor_t *t, const void *src, size_t bytes)
{
    return dev_h2d(f->p, t->data, src, bytes);
}

void exec_frame_fini(exec_frame_t *f)
{
    for (size_t v = 0; f->hold && v < f->g->n_values; v++)
        if (f->hold[v] == EXEC_OWNED)
            exec_free(f, f->t[v].data);
    for (size_t v = 0; f->mirror && v < f->g->n_values; v++)
        free(f->mirror[v]);
    free(f->t);
    free(f->hold);
    free(f->readers);
    free(f->hv);
    free(f->mirror);
    free(f->ins);
    free(f->outs);
    free(f->hins);
    free(f->iv);
    memset(f, 0, sizeof *f);
}

int exec_frame_init(exec_frame_t *f, const eng_plan_t *p, const eng_graph_t *g,
                    const bool *node_done, int depth)
{
    *f = (exec_frame_t){.p = p, .g = g, .node_done = node_done, .depth = depth, .max_io = 1,
                        .stream = eng_backend_stream(p->be, p->inst)};
    /* Host copies (hv, mirror, iv): only a device without host memory keeps
     * them apart from the values themselves. */
    bool apart = !p->be->host_memory;
    size_t nv = g->n_values ? g->n_values : 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_inputs > f->max_io)
            f->max_io = g->nodes[i].n_inputs;
        if (g->nodes[i].n_outputs > f->max_io)
            f->max_io = g->nodes[i].n_outputs;
    }
    f->t = calloc(nv, sizeof *f->t);
    f->hold = calloc(nv, sizeof *f->hold);
    f->readers = calloc(nv, sizeof *f->readers);
    f->ins = calloc((size_t)f->max_io, sizeof *f->ins);
    f->outs = calloc((size_t)f->max_io, sizeof *f->outs);
    f->hins = calloc((size_t)f->max_io, sizeof *f->hins);
    if (apart) {
        f->hv = calloc(nv, sizeof *f->hv);
        f->mirror = calloc(nv, sizeof *f->mirror);
        f->iv = calloc((size_t)f->max_io, sizeof *f->iv);
    }
    if (!f->t || !f->hold || !f->readers || !f->ins || !f->outs || !f->hins ||
        (apart && (!f->hv || !f->mirror || !f->iv))) {
        exec_frame_fini(f);
        return fs_err(FS_ENOMEM, "out of host memory running a model");
    }
    for (size_t v = 0; v < g->n_values; v++) {
        const eng_value_t *gv = &g->values[v];
        if (gv->kind != ENG_VALUE_CONST)
            continue;
        size_t at = g->value_base + v; /* the model's per-value tables span the tree */
        f->hold[v] = EXEC_CONST;
        f->t[v] = gv->constant;
        if (!apart)
            continue;
        f->hv[v] = gv->constant;
        f->t[v].data = p->dev_const[at];
    }
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!node_done || !node_done[i])
            for (int k = 0; k < g->nodes[i].n_inputs; k++)
                if (g->nodes[i].inputs[k] >= 0)
                    f->readers[g->nodes[i].inputs[k]]++;
    return 0;
}

/* Frees OWNED value v when nothing will read it any more. */
static void frame_drop_if_dead(exec_frame_t *f, int v)
{
    if (f->hold[v] != EXEC_OWNED || f->readers[v] > 0 || f->g->values[v].is_output)
        return;
    exec_free(f, f->t[v].data);
    f->t[v].data = NULL;
    f->hold[v] = EXEC_NONE;
}

void exec_frame_bind(exec_frame_t *f, int v, const eng_tensor_t *t, exec_hold_t hold,
                     const void *host)
{
    f->t[v] = *t;
    f->hold[v] = hold;
    if (f->hv)
        f->hv[v] = (eng_tensor_t){.dtype = t->dtype, .shape = t->shape, .data = (void *)host};
    frame_drop_if_dead(f, v);
}

exec_hold_t exec_frame_take(exec_frame_t *f, int v, eng_tensor_t *out)
{
    *out = f->t[v];
    exec_hold_t h = f->hold[v];
    if (h == EXEC_OWNED)
        f->hold[v] = EXEC_MOVED;
    return h;
}

/* Points the ctx arrays at node n's values; absent ones stay NULL. */
static void frame_views(exec_frame_t *f, const eng_node_t *n)
{
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        f->ins[i] = v >= 0 && f->hold[v] != EXEC_NONE ? &f->t[v] : NULL;
    }
    for (int i = 0; i < n->n_outputs; i++)
        f->outs[i] = n->outputs[i] >= 0 ? &f->t[n->outputs[i]] : NULL;
}

/* A device without host memory: what infer sees of node n's inputs (the
 * host copy where there is one, else shape only). */
static void infer_views(exec_frame_t *f, const eng_node_t *n)
{
    for (int i = 0; i < n->n_inputs; i++) {
        if (!f->ins[i])
            continue;
        f->iv[i] = *f->ins[i];
        f->iv[i].dtype = f->hv[n->inputs[i]].dtype; /* the graph's, not a weight's device dtype */
        f->iv[i].data = f->hv[n->inputs[i]].data;
        f->ins[i] = &f->iv[i];
    }
}

/* The host views of node n's inputs, for a kernel that reads a value on
 * the host; NULL on a host-memory device (every input is host). */
static const eng_tensor_t *const *frame_host_views(exec_frame_t *f, const eng_node_t *n)
{
    if (!f->hv)
        return NULL;
    for (int i = 0; i < n->n_inputs; i++)
        f->hins[i] = n->inputs[i] >= 0 && f->ins[i] && f->hv[n->inputs[i]].data
                         ? &f->hv[n->inputs[i]]
                         : NULL;
    return f->hins;
}

/* The same device: host copies of node n's inputs the host lacks (those of
 * at most max_numel elements), so an op can read the values that decide its
 * shapes. */
static int mirror_inputs(exec_frame_t *f, const eng_node_t *n, int64_t max_numel)
{
    int rc = 0;
    bool queued = false;
    for (int i = 0; i < n->n_inputs && rc == 0; i++) {
        int v = n->inputs[i];
        if (v < 0 || f->hv[v].data || !f->t[v].data ||
            eng_shape_numel(&f->t[v].shape) > max_numel)
            continue;
        size_t bytes = eng_tensor_bytes(&f->t[v]);
        free(f->mirror[v]);
        if (!(f->mirror[v] = malloc(bytes ? bytes : 1)))
            return fs_err(FS_ENOMEM, "out of host memory running a model");
        rc = dev_d2h(f->p, f->mirror[v], f->t[v].data, bytes);
        f->hv[v] = f->t[v];
        f->hv[v].data = f->mirror[v];
        queued = true;
    }
    if (queued) {
        int src = dev_sync(f->p);
        rc = rc ? rc : src;
    }
    return rc;
}

/* Node n's output shapes. On a device without host memory infer sees the
 * host copies, and an op that needs a value the host lacks gets its small
 * inputs mirrored, then retries (and if it still lacks one -- its shapes
 * depend on a whole tensor: NonZero, Unique, Compress's condition,
 * NonMaxSuppression's boxes -- gets all its inputs mirrored and retries);
 * on return the views are the device ones and ctx->host_inputs is set. */
static int frame_infer(exec_frame_t *f, eng_op_ctx_t *ctx)
{
    const eng_node_t *n = ctx->node;
    if (!f->hv)
        return eng_op_infer(ctx);
    infer_views(f, n);
    int rc = eng_op_infer(ctx);
    /* First the small inputs; then, if the op still lacks a value, all. */
    for (int pass = 0; pass < 2 && rc == FS_EDYNAMIC; pass++) {
        frame_views(f, n);
        if ((rc = mirror_inputs(f, n, pass == 0 ? EXEC_HOST_MIRROR_MAX : ENG_NUMEL_MAX)) != 0)
            return rc;
        infer_views(f, n);
        rc = eng_op_infer(ctx);
    }
    frame_views(f, n);
    ctx->host_inputs = frame_host_views(f, n);
    return rc;
}

/* Node n (not control flow): infer, allocate its outputs, run. */
static int frame_node(exec_frame_t *f, const eng_node_t *n)
{
    const eng_plan_t *p = f->p;
    const eng_kernel_t *kernel = eng_backend_kernel(p->be, n->op);
    frame_views(f, n);
    eng_op_ctx_t ctx = {.node = n, .opset = f->g->opset, .n_inputs = n->n_inputs,
                        .inputs = f->ins, .n_outputs = n->n_outputs, .outputs = f->outs,
                        .n_threads = p->n_threads, .instance = p->inst};
    if (!kernel)
        return eng_op_err(&ctx, FS_ENOTSUP, "no %s kernel for this op", p->be->name);
    int rc = frame_infer(f, &ctx);
    for (int o = 0; o < n->n_outputs && rc == 0; o++) {
        int v = n->outputs[o];
        if (v < 0)
            continue;
        if ((rc = exec_alloc(f, &f->t[v])) == 0)
            f->hold[v] = EXEC_OWNED;
        if (f->hv)
            f->hv[v] = (eng_tensor_t){.dtype = f->t[v].dtype, .shape = f->t[v].shape};
    }
    void *scratch = NULL;
    size_t scratch_bytes = rc == 0 ? eng_op_scratch_bytes(kernel, &ctx) : 0;
    if (scratch_bytes)
        rc = alloc_cache_alloc(p->cache, scratch_bytes, f->stream, p->act_owner, &scratch);
    if (rc == 0) {
        ctx.scratch = scratch;
        ctx.scratch_bytes = scratch_bytes;
        rc = eng_op_run(kernel, &ctx);
    }
    alloc_cache_free(p->cache, scratch);
    return rc;
}

int exec_frame_run(exec_frame_t *f)
{
    const eng_graph_t *g = f->g;
    int rc = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        if (f->node_done && f->node_done[i])
            continue;
        const eng_node_t *n = &g->nodes[i];
        rc = eng_op_is_control(n->op) ? exec_control_run(f, n) : frame_node(f, n);
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v >= 0 && f->hold[v] == EXEC_OWNED && --f->readers[v] == 0)
                frame_drop_if_dead(f, v);
        }
        /* Outputs nobody reads (an unused optional output) go at once. */
        for (int o = 0; o < n->n_outputs; o++)
            if (n->outputs[o] >= 0)
                frame_drop_if_dead(f, n->outputs[o]);
    }
    return rc;
}

/* The dynamic path: the model graph's frame over the caller's inputs (on a
 * device without host memory, device copies of them, owned like any
 * activation), then the outputs copied out. */
static int run_dynamic(const eng_plan_t *p, const eng_tensor_t *inputs, eng_tensor_t **outputs)
{
    const eng_graph_t *g = p->graph;
    int rc = eng_backend_bind(p->be, p->inst);
    exec_frame_t f;
    if (rc != 0 || (rc = exec_frame_init(&f, p, g, p->node_done, 0)) != 0)
        return rc;
    for (size_t i = 0; i < g->n_inputs && rc == 0; i++) {
        eng_tensor_t t = inputs[i];
        if (p->be->host_memory) {
            exec_frame_bind(&f, g->inputs[i], &t, EXEC_BORROWED, NULL);
            continue;
        }
        if ((rc = exec_alloc(&f, &t)) != 0)
            break;
        exec_frame_bind(&f, g->inputs[i], &t, EXEC_OWNED, inputs[i].data);
        if (f.hold[g->inputs[i]] == EXEC_OWNED)
            rc = exec_write(&f, &t, inputs[i].data, eng_tensor_bytes(&t));
    }
    if (rc == 0)
        rc = exec_frame_run(&f);
    if (rc == 0) {
        const void **host = calloc(g->n_outputs + 1, sizeof *host);
        for (size_t j = 0; host && j < g->n_outputs; j++) {
            int v = g->outputs[j];
            host[j] = f.hv ? f.hv[v].data : f.t[v].data;
        }
        rc = host ? copy_outputs(p, f.t, host, outputs)
                  : fs_err(FS_ENOMEM, "out of host memory running a model");
        free(host);
    }
    /* Queued work must finish before its memory goes back. */
    int src = dev_sync(p);
    exec_frame_fini(&f);
    return rc ? rc : src;
}

int eng_plan_run(const eng_plan_t *p, eng_plan_replay_t *replay, const eng_tensor_t *inputs,
                 size_t n_inputs, eng_tensor_t **outputs)
{
    if (!eng_plan_matches(p, inputs, n_inputs))
        return fs_err(FS_EINVAL, "inputs do not match the plan's signature");
    return p->dynamic ? run_dynamic(p, inputs, outputs) : run_static(p, replay, inputs, outputs);
}
