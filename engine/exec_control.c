/* exec_control.c -- running the control-flow ops (If, Loop, Scan) on the
 * dynamic path: each run of a subgraph is a frame of its own
 * (exec_impl.h), nested in the frame of the node's graph, on the same
 * device, cache and activation owner, so a subgraph's tensors are planned,
 * accounted and freed like the main graph's.
 *
 * Binding. A subgraph's OUTER values are bound, borrowed, to the enclosing
 * frame's values (the node lists them as implicit inputs, so they live
 * until it has run). Its formal inputs are bound by the op, and its
 * outputs taken back (exec_frame_take): a tensor the subgraph computed
 * moves to its taker, one it only passed through (a constant, an outer
 * value, an input the node borrowed) stays borrowed, since it outlives the
 * node's run, and a value given twice is copied the second time. What the
 * node finally gives its own graph is moved there when the node owns it,
 * else copied: a frame owns every value its nodes produce.
 *
 * If: the condition is read on the host (on a GPU, one byte copied back),
 * the chosen branch runs, and its outputs become the node's.
 *
 * Loop: the body's inputs are the iteration number (an int64 scalar
 * written each iteration), the condition and the N carried values; its
 * outputs the condition, the N carried values and the K scan outputs.
 * Carried values move from one iteration's outputs to the next one's
 * inputs without a copy, so the body frees each as soon as it has read it:
 * memory stays bounded by one iteration's tensors plus the scan outputs
 * kept for stacking. It runs while i < M (when M is given) and the
 * condition holds (when the node has a condition input: as ONNX's table of
 * trip-count/condition combinations says, the body's condition output is
 * ignored without one; on a GPU reading it is one byte copied back per
 * iteration). A Loop that would run past the model's max_loop_iterations
 * (engine.h; 2^20 by default) fails naming the limit, whatever its M: a
 * condition that never turns false, no M and no condition, or an M of
 * 2^63 - 1 (what PyTorch exports for a while loop) must not hang a
 * server.
 * Each scan output's iterations must agree in dtype and shape (an error
 * names the output otherwise); they are stacked along a new first axis at
 * the end. With no iteration the carried outputs are the initial values
 * and a scan output is empty, of shape [0, ...] from the body output's
 * declared type (ONNX's reference uses the declared type too); a body
 * that declares no complete type there makes that run fail, saying so.
 *
 * Scan (opset 9 on): the N states are carried as in Loop; each of the M
 * scan inputs is read as T slices along its axis (every input has the
 * same T): an input scanned along another axis than 0 is transposed once
 * so that the slices are contiguous, and a slice is then a view into it,
 * taken in reverse order for a reverse direction -- no copy per
 * iteration. Each of the K scan outputs is allocated once its first
 * iteration's shape is known, each iteration copied into its slot (from
 * the end for a reverse direction), and moved to its axis by one
 * Transpose at the end.
 *
 * Copies and transposes run the device's own Identity and Transpose
 * kernels on synthetic nodes (named as the control node, so errors point
 * at it): on a GPU everything stays on the device, with one host round
 * trip per iteration at most (Loop's condition), and the iteration number's
 * upload (8 bytes, from pageable memory: the copy has taken them when it
 * returns). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/exec_impl.h"

/* A tensor a control node holds between subgraph runs: OWNED (the node
 * frees it, or hands it on), or BORROWED (it outlives the node's run:
 * a constant, an input of the node, an outer-scope value). */
typedef struct held {
    eng_tensor_t t;
    exec_hold_t hold;          /* EXEC_NONE (empty), EXEC_OWNED or EXEC_BORROWED */
    const void *host;          /* its host copy, or NULL */
} held_t;

static void held_release(const exec_frame_t *f, held_t *h)
{
    if (h->hold == EXEC_OWNED)
        exec_free(f, h->t.data);
    *h = (held_t){0};
}

static void helds_release(const exec_frame_t *f, held_t *h, int n)
{
    for (int i = 0; h && i < n; i++)
        held_release(f, &h[i]);
}

/* ---- kernels on synthetic nodes ----------------------------------------------- */

/* Runs `op`'s kernel (Identity, Transpose: one input, one output) on x
 * into y (shape and data set), as a node named as control node n carrying
 * `attrs`. 0, or the kernel's error. */
static int run_kernel(exec_frame_t *f, const eng_node_t *n, const eng_op_def_t *op,
                      const eng_attr_t *attrs, int n_attrs, const eng_tensor_t *x, eng_tensor_t *y)
{
    static const int io[1] = {0};
    const eng_plan_t *p = f->p;
    eng_node_t kn = {.name = n->name, .op_type = eng_op_type(op->id), .domain = "",
                     .n_inputs = 1, .inputs = io, .n_outputs = 1, .outputs = io,
                     .n_attrs = n_attrs, .attrs = attrs, .op = op};
    const eng_tensor_t *ins[1] = {x}, *hins[1] = {NULL};
    eng_tensor_t *outs[1] = {y};
    eng_op_ctx_t ctx = {.node = &kn, .opset = f->g->opset, .n_inputs = 1, .inputs = ins,
                        .n_outputs = 1, .outputs = outs, .n_threads = p->n_threads,
                        .instance = p->inst, .host_inputs = f->hv ? hins : NULL};
    const eng_kernel_t *k = eng_backend_kernel(p->be, op);
    if (!k)
        return eng_op_err(&ctx, FS_ENOTSUP, "no %s kernel for this op", p->be->name);
    size_t scratch_bytes = eng_op_scratch_bytes(k, &ctx);
    void *scratch = NULL;
    int rc = scratch_bytes ? alloc_cache_alloc(p->cache, scratch_bytes, f->stream, p->act_owner,
                                               &scratch)
                           : 0;
    if (rc == 0) {
        ctx.scratch = scratch;
        ctx.scratch_bytes = scratch_bytes;
        rc = eng_op_run(k, &ctx);
    }
    alloc_cache_free(p->cache, scratch);
    return rc;
}

/* x's data into y's (same dtype and shape). */
static int copy_to(exec_frame_t *f, const eng_node_t *n, const eng_tensor_t *x, eng_tensor_t *y)
{
    return run_kernel(f, n, &eng_op_Identity, NULL, 0, x, y);
}

/* A new tensor (OWNED by the caller) holding a copy of x. */
static int copy_new(exec_frame_t *f, const eng_node_t *n, const eng_tensor_t *x, eng_tensor_t *out)
{
    *out = (eng_tensor_t){.dtype = x->dtype, .shape = x->shape};
    int rc = exec_alloc(f, out);
    if (rc == 0 && (rc = copy_to(f, n, x, out)) != 0)
        exec_free(f, out->data);
    return rc;
}

/* A new tensor (OWNED by the caller): x with its axes permuted by perm. */
static int transpose_new(exec_frame_t *f, const eng_node_t *n, const eng_tensor_t *x,
                         const int64_t *perm, eng_tensor_t *out)
{
    int r = x->shape.rank;
    eng_attr_t attr = {.name = "perm", .type = ENG_ATTR_INTS, .n = (size_t)r, .ints = perm};
    *out = (eng_tensor_t){.dtype = x->dtype, .shape.rank = r};
    for (int d = 0; d < r; d++)
        out->shape.dims[d] = x->shape.dims[perm[d]];
    int rc = exec_alloc(f, out);
    if (rc == 0 && (rc = run_kernel(f, n, &eng_op_Transpose, &attr, 1, x, out)) != 0)
        exec_free(f, out->data);
    return rc;
}

/* ---- subgraph frames ---------------------------------------------------------- */

/* A frame for subgraph sub of node n in f, its outer values bound. */
static int subgraph_open(exec_frame_t *f, const eng_graph_t *sub, exec_frame_t *s)
{
    int rc = exec_frame_init(s, f->p, sub, NULL, f->depth + 1);
    for (size_t k = 0; rc == 0 && k < sub->n_outer; k++) {
        int pv = sub->outer_from[k];
        exec_frame_bind(s, sub->outer[k], &f->t[pv], EXEC_BORROWED, f->hv ? f->hv[pv].data : NULL);
    }
    return rc;
}

/* Binds h as input i of subgraph frame s; an OWNED h goes to s. */
static void subgraph_bind(exec_frame_t *s, int i, held_t *h)
{
    exec_frame_bind(s, s->g->inputs[i], &h->t, h->hold, h->host);
    if (h->hold == EXEC_OWNED)
        *h = (held_t){0};
}

/* Output j of subgraph frame s as a held tensor of node n: what s computed
 * moves, a constant or borrowed value stays borrowed, a value taken before
 * is copied. */
static int subgraph_take(exec_frame_t *f, const eng_node_t *n, exec_frame_t *s, size_t j,
                         held_t *out)
{
    int v = s->g->outputs[j];
    eng_tensor_t t;
    exec_hold_t h = exec_frame_take(s, v, &t);
    /* A host copy the frame made itself (a mirror) goes with the frame. */
    const void *host = s->hv && !s->mirror[v] ? s->hv[v].data : NULL;
    switch (h) {
    case EXEC_OWNED:
        *out = (held_t){.t = t, .hold = EXEC_OWNED};
        return 0;
    case EXEC_CONST:
    case EXEC_BORROWED:
        *out = (held_t){.t = t, .hold = EXEC_BORROWED, .host = host};
        return 0;
    case EXEC_MOVED:
        *out = (held_t){.hold = EXEC_OWNED};
        return copy_new(f, n, &t, &out->t);
    default:
        return fs_err(FS_EINVAL, "node '%s' (%s): subgraph output '%s' was never computed",
                      n->name, n->op_type, s->g->values[v].name);
    }
}

/* Makes h node n's output value v in f: moved when the node owns it, else
 * copied (a frame owns its nodes' outputs); v < 0 (not wanted) drops it.
 * h is consumed either way. */
static int output_set(exec_frame_t *f, const eng_node_t *n, int v, held_t *h)
{
    int rc = 0;
    if (v >= 0 && h->hold == EXEC_BORROWED) {
        eng_tensor_t c;
        if ((rc = copy_new(f, n, &h->t, &c)) == 0)
            *h = (held_t){.t = c, .hold = EXEC_OWNED};
    }
    if (rc == 0 && v >= 0) {
        exec_frame_bind(f, v, &h->t, EXEC_OWNED, NULL);
        *h = (held_t){0};
    }
    held_release(f, h);
    return rc;
}

/* Prefixes the failure of a subgraph run with the node and `what`
 * ("then_branch", "body, iteration 3"). */
static int subgraph_err(const eng_node_t *n, const char *what, int rc)
{
    return fs_err(rc, "node '%s' (%s) %s: %s", n->name, n->op_type, what, fs_errmsg());
}

/* The host value of a one-element tensor of dtype dt (`what` names it). */
static int read_scalar(const exec_frame_t *f, const eng_node_t *n, const eng_tensor_t *t,
                       const void *host, eng_dtype_t dt, const char *what, void *out)
{
    if (t->dtype != dt || eng_shape_numel(&t->shape) != 1) {
        char shape[96];
        eng_shape_format(&t->shape, shape, sizeof shape);
        return fs_err(FS_EINVAL, "node '%s' (%s): %s must be one %s value, not %s %s", n->name,
                      n->op_type, what, eng_dtype_name(dt), eng_dtype_name(t->dtype), shape);
    }
    return exec_read(f, t, host, out, eng_dtype_size(dt));
}

/* Input i of node n held borrowed (with its host copy); an absent input
 * (an empty name) is held as nothing, with an undefined tensor. */
static held_t input_held(const exec_frame_t *f, const eng_node_t *n, int i)
{
    int v = n->inputs[i];
    if (v < 0)
        return (held_t){.hold = EXEC_NONE};
    return (held_t){.t = f->t[v], .hold = EXEC_BORROWED, .host = f->hv ? f->hv[v].data : NULL};
}

/* Input i of node n, which the op needs (a loop-carried or scan value:
 * ONNX's schema lets a crafted model leave it empty). 0 and *out, or
 * FS_EINVAL naming it. */
static int input_needed(const exec_frame_t *f, const eng_node_t *n, int i, const char *what,
                        held_t *out)
{
    if (n->inputs[i] < 0)
        return fs_err(FS_EINVAL, "node '%s' (%s): input %d (%s) is empty; it needs a value",
                      n->name, n->op_type, i, what);
    *out = input_held(f, n, i);
    return 0;
}

/* ---- If -------------------------------------------------------------------------- */

static int run_if(exec_frame_t *f, const eng_node_t *n)
{
    held_t c = input_held(f, n, 0);
    unsigned char cond = 0;
    int rc = read_scalar(f, n, &c.t, c.host, ENG_DT_BOOL, "the condition (input 0)", &cond);
    if (rc != 0)
        return rc;
    const char *name = cond ? "then_branch" : "else_branch";
    const eng_graph_t *br = eng_attr_graph(n, name);
    held_t *outs = calloc((size_t)n->n_outputs + 1, sizeof *outs);
    if (!outs)
        return fs_err(FS_ENOMEM, "out of host memory running node '%s' (If)", n->name);
    exec_frame_t s;
    if ((rc = subgraph_open(f, br, &s)) != 0) {
        free(outs);
        return rc;
    }
    if ((rc = exec_frame_run(&s)) != 0)
        rc = subgraph_err(n, name, rc);
    /* Every output taken before any is handed on: handing one on may free
     * it, and a later output may be a copy of it. */
    for (int j = 0; j < n->n_outputs && rc == 0; j++)
        rc = subgraph_take(f, n, &s, (size_t)j, &outs[j]);
    exec_frame_fini(&s);
    for (int j = 0; j < n->n_outputs && rc == 0; j++)
        rc = output_set(f, n, n->outputs[j], &outs[j]);
    helds_release(f, outs, n->n_outputs);
    free(outs);
    return rc;
}

/* ---- stacked scan outputs ---------------------------------------------------- */

/* A new tensor (OWNED by the caller) of dtype dt and shape [count, *each];
 * FS_ENOTSUP when that rank passes ENG_MAX_RANK. */
static int stacked_new(exec_frame_t *f, const eng_node_t *n, const char *what, eng_dtype_t dt,
                       const eng_shape_t *each, int64_t count, eng_tensor_t *out)
{
    if (each->rank + 1 > ENG_MAX_RANK)
        return fs_err(FS_ENOTSUP, "node '%s' (%s): %s would have rank %d; at most %d is "
                      "supported", n->name, n->op_type, what, each->rank + 1, ENG_MAX_RANK);
    *out = (eng_tensor_t){.dtype = dt, .shape.rank = each->rank + 1};
    out->shape.dims[0] = count;
    memcpy(out->shape.dims + 1, each->dims, (size_t)each->rank * sizeof *each->dims);
    if (!eng_shape_bounded(&out->shape))
        return fs_err(FS_ENOMEM, "node '%s' (%s): %s would have more than %lld elements",
                      n->name, n->op_type, what, (long long)ENG_NUMEL_MAX);
    return exec_alloc(f, out);
}

/* Copies `item` into slot i of stacked tensor st. */
static int stacked_put(exec_frame_t *f, const eng_node_t *n, eng_tensor_t *st, int64_t i,
                       const eng_tensor_t *item)
{
    eng_tensor_t slot = *item;
    slot.data = (char *)st->data + (size_t)i * eng_tensor_bytes(item);
    return copy_to(f, n, item, &slot);
}

/* FS_EINVAL unless `item`, iteration `it` of scan output k (body output
 * `name`), has the dtype and shape of `first` (iteration 0's). */
static int scan_item_check(const eng_node_t *n, int k, const char *name, int64_t it,
                           const eng_tensor_t *first, const eng_tensor_t *item)
{
    if (item->dtype == first->dtype && eng_shape_equal(&item->shape, &first->shape))
        return 0;
    char a[96], b[96];
    eng_shape_format(&item->shape, a, sizeof a);
    eng_shape_format(&first->shape, b, sizeof b);
    return fs_err(FS_EINVAL, "node '%s' (%s): scan output %d (body output '%s') is %s %s at "
                  "iteration %lld but %s %s at iteration 0; every iteration must give the same "
                  "dtype and shape", n->name, n->op_type, k, name, eng_dtype_name(item->dtype), a,
                  (long long)it, eng_dtype_name(first->dtype), b);
}

/* The empty scan output of a run with no iteration: [0, ...] from body
 * output j's declared dtype and dims (FS_ENOTSUP naming it when they are
 * not all declared). */
static int scan_empty(exec_frame_t *f, const eng_node_t *n, const eng_graph_t *body, size_t j,
                      eng_tensor_t *out)
{
    const eng_value_t *v = &body->values[body->outputs[j]];
    bool known = v->dtype != ENG_DT_UNDEFINED && v->rank >= 0;
    for (int d = 0; known && d < v->rank; d++)
        known = v->dims[d].value >= 0;
    if (!known)
        return fs_err(FS_ENOTSUP, "node '%s' (%s) ran no iteration, and its body declares no "
                      "complete type (dtype and every dim) for output '%s', from which the empty "
                      "scan output takes its shape", n->name, n->op_type, v->name);
    eng_shape_t each = {.rank = v->rank};
    for (int d = 0; d < v->rank; d++)
        each.dims[d] = v->dims[d].value;
    return stacked_new(f, n, "the empty scan output", v->dtype, &each, 0, out);
}

/* ---- Loop -------------------------------------------------------------------------- */

/* A Loop's state between iterations. */
typedef struct loop_state {
    const eng_graph_t *body;
    int n_carried, n_scan;     /* N, K */
    held_t *carry;             /* N + 1: the condition, then the carried values */
    held_t **scans;            /* K lists of one tensor per iteration */
    int64_t cap;               /* entries each list has room for */
    int64_t it;                /* iterations run */
    int64_t trip;              /* M (a negative one runs no iteration) */
    bool has_trip;             /* the node has a trip count input */
    bool has_cond;             /* the node has a condition input */
    unsigned char cond;        /* its current value */
} loop_state_t;

/* Room in every scan list for one more iteration. */
static int loop_scans_grow(const eng_node_t *n, loop_state_t *L)
{
    if (L->it < L->cap || L->n_scan == 0)
        return 0;
    int64_t cap = L->cap ? 2 * L->cap : 16;
    for (int k = 0; k < L->n_scan; k++) {
        held_t *grown = realloc(L->scans[k], (size_t)cap * sizeof *grown);
        if (!grown)
            return fs_err(FS_ENOMEM, "out of host memory running node '%s' (Loop)", n->name);
        L->scans[k] = grown;
    }
    L->cap = cap;
    return 0;
}

/* Iteration L->it: binds the iteration number, the condition and the
 * carried values, runs the body, takes its outputs back. */
static int loop_iteration(exec_frame_t *f, const eng_node_t *n, loop_state_t *L)
{
    const eng_graph_t *body = L->body;
    int rc = loop_scans_grow(n, L);
    exec_frame_t s;
    if (rc != 0 || (rc = subgraph_open(f, body, &s)) != 0)
        return rc;
    held_t iter = {.t = {.dtype = ENG_DT_INT64}, .hold = EXEC_OWNED, .host = &L->it};
    if ((rc = exec_alloc(f, &iter.t)) == 0) {
        rc = exec_write(f, &iter.t, &L->it, sizeof L->it);
        subgraph_bind(&s, 0, &iter);
    }
    for (int i = 0; i <= L->n_carried && rc == 0; i++)
        subgraph_bind(&s, 1 + i, &L->carry[i]);
    if (rc == 0 && (rc = exec_frame_run(&s)) != 0) {
        char what[64];
        snprintf(what, sizeof what, "body, iteration %lld", (long long)L->it);
        rc = subgraph_err(n, what, rc);
    }
    for (int i = 0; i <= L->n_carried && rc == 0; i++)
        rc = subgraph_take(f, n, &s, (size_t)i, &L->carry[i]);
    int taken = 0;
    for (int k = 0; k < L->n_scan && rc == 0; k++) {
        held_t *item = &L->scans[k][L->it];
        size_t j = (size_t)(1 + L->n_carried + k);
        if ((rc = subgraph_take(f, n, &s, j, item)) != 0)
            break;
        taken++;
        if (L->it > 0)
            rc = scan_item_check(n, k, body->values[body->outputs[j]].name, L->it,
                                 &L->scans[k][0].t, &item->t);
    }
    exec_frame_fini(&s);
    if (rc == 0 && L->has_cond)
        rc = read_scalar(f, n, &L->carry[0].t, L->carry[0].host, ENG_DT_BOOL,
                         "body output 0 (the condition)", &L->cond);
    /* A failed iteration (its condition unreadable included) keeps nothing
     * of its scan outputs: L->it does not count it, so nothing else would
     * free them. */
    for (int k = 0; rc != 0 && k < taken; k++)
        held_release(f, &L->scans[k][L->it]);
    if (rc == 0)
        L->it++;
    return rc;
}

/* Scan output k of a finished Loop into node output value v. */
static int loop_scan_output(exec_frame_t *f, const eng_node_t *n, loop_state_t *L, int k, int v)
{
    held_t st = {.hold = EXEC_OWNED};
    int rc;
    if (L->it == 0)
        rc = scan_empty(f, n, L->body, (size_t)(1 + L->n_carried + k), &st.t);
    else
        rc = stacked_new(f, n, "a scan output", L->scans[k][0].t.dtype, &L->scans[k][0].t.shape,
                         L->it, &st.t);
    for (int64_t i = 0; i < L->it && rc == 0; i++)
        rc = stacked_put(f, n, &st.t, i, &L->scans[k][i].t);
    if (rc != 0) {
        if (st.t.data)
            exec_free(f, st.t.data);
        return rc;
    }
    return output_set(f, n, v, &st);
}

static int loop_start(exec_frame_t *f, const eng_node_t *n, loop_state_t *L)
{
    int rc = 0;
    if (L->has_trip) {
        held_t m = input_held(f, n, 0);
        rc = read_scalar(f, n, &m.t, m.host, ENG_DT_INT64, "the trip count M (input 0)", &L->trip);
    }
    if (rc == 0 && L->has_cond) {
        L->carry[0] = input_held(f, n, 1);
        rc = read_scalar(f, n, &L->carry[0].t, L->carry[0].host, ENG_DT_BOOL,
                         "the condition (input 1)", &L->cond);
    } else if (rc == 0) {
        /* No condition: the body still takes one; it starts true. */
        static const unsigned char one = 1;
        L->carry[0] = (held_t){.t = {.dtype = ENG_DT_BOOL}, .hold = EXEC_OWNED, .host = &one};
        if ((rc = exec_alloc(f, &L->carry[0].t)) == 0)
            rc = exec_write(f, &L->carry[0].t, &one, 1);
        else
            L->carry[0].hold = EXEC_NONE;
    }
    for (int i = 0; i < L->n_carried && rc == 0; i++)
        rc = input_needed(f, n, 2 + i, "a loop-carried value", &L->carry[1 + i]);
    return rc;
}

static int run_loop(exec_frame_t *f, const eng_node_t *n)
{
    loop_state_t L = {.body = eng_attr_graph(n, "body"), .cond = 1,
                      .n_carried = n->n_inputs - n->n_implicit - 2,
                      .has_trip = n->inputs[0] >= 0, .has_cond = n->inputs[1] >= 0};
    L.n_scan = n->n_outputs - L.n_carried;
    L.carry = calloc((size_t)L.n_carried + 1, sizeof *L.carry);
    L.scans = calloc((size_t)L.n_scan + 1, sizeof *L.scans);
    int rc = L.carry && L.scans ? loop_start(f, n, &L)
                                : fs_err(FS_ENOMEM, "out of host memory running node '%s' (Loop)",
                                         n->name);
    while (rc == 0 && (!L.has_trip || L.it < L.trip) && L.cond) {
        if (L.it >= f->p->max_loop_iterations) {
            rc = fs_err(FS_ERANGE, "node '%s' (Loop) is still running after %lld iterations, the "
                        "most a Loop may run (the model's max_loop_iterations): its trip count %s "
                        "and its condition %s", n->name, (long long)f->p->max_loop_iterations,
                        L.has_trip ? "is larger" : "is absent",
                        L.has_cond ? "is still true" : "is absent");
            break;
        }
        rc = loop_iteration(f, n, &L);
    }
    for (int i = 0; i < L.n_carried && rc == 0; i++)
        rc = output_set(f, n, n->outputs[i], &L.carry[1 + i]);
    for (int k = 0; k < L.n_scan && rc == 0; k++)
        rc = loop_scan_output(f, n, &L, k, n->outputs[L.n_carried + k]);
    helds_release(f, L.carry, L.carry ? L.n_carried + 1 : 0);
    for (int k = 0; L.scans && k < L.n_scan; k++) {
        helds_release(f, L.scans[k], L.scans[k] ? (int)L.it : 0);
        free(L.scans[k]);
    }
    free(L.carry);
    free(L.scans);
    return rc;
}

/* ---- Scan -------------------------------------------------------------------------- */

/* A Scan's state. */
typedef struct scan_state {
    const eng_graph_t *body;
    int n_state, n_in, n_out;  /* N, M, K */
    held_t *carry;             /* N states */
    held_t *xs;                /* M scan inputs, each [T, ...] (transposed when its axis is not 0) */
    eng_tensor_t *ys;          /* K stacked outputs [T, ...], OWNED once allocated */
    const int64_t *in_dirs, *out_dirs, *out_axes;
    int64_t T;
} scan_state_t;

/* Scan input j: its axis normalised, its length T (equal for all), and
 * its slices made contiguous: transposed to axis 0 when scanned along
 * another. */
static int scan_input(exec_frame_t *f, const eng_node_t *n, scan_state_t *S, int j)
{
    size_t n_axes;
    const int64_t *axes = eng_attr_ints(n, "scan_input_axes", &n_axes);
    held_t x;
    int rc = input_needed(f, n, S->n_state + j, "a scan input", &x);
    if (rc != 0)
        return rc;
    int r = x.t.shape.rank;
    int64_t a = axes ? axes[j] : 0;
    if (r == 0 || a < -r || a >= r)
        return fs_err(FS_EINVAL, "node '%s' (Scan): scan input %d has rank %d; its axis %lld "
                      "must be in [%d, %d]", n->name, j, r, (long long)a, -r, r - 1);
    a = a < 0 ? a + r : a;
    int64_t len = x.t.shape.dims[a];
    if (j > 0 && len != S->T)
        return fs_err(FS_EINVAL, "node '%s' (Scan): scan input %d is %lld long along its axis, "
                      "scan input 0 is %lld; all must be as long", n->name, j, (long long)len,
                      (long long)S->T);
    S->T = len;
    if (a == 0) {
        S->xs[j] = x;
        return 0;
    }
    int64_t perm[ENG_MAX_RANK];
    perm[0] = a;
    for (int d = 0, k = 1; d < r; d++)
        if (d != a)
            perm[k++] = d;
    S->xs[j] = (held_t){.hold = EXEC_OWNED};
    rc = transpose_new(f, n, &x.t, perm, &S->xs[j].t);
    if (rc != 0)
        S->xs[j].hold = EXEC_NONE;
    return rc;
}

/* Slice i of scan input x ([T, ...]) as a borrowed view. */
static held_t scan_slice(const held_t *x, int64_t i)
{
    held_t v = {.t = {.dtype = x->t.dtype, .shape.rank = x->t.shape.rank - 1},
                .hold = EXEC_BORROWED};
    memcpy(v.t.shape.dims, x->t.shape.dims + 1, (size_t)v.t.shape.rank * sizeof(int64_t));
    size_t bytes = eng_tensor_bytes(&v.t);
    v.t.data = (char *)x->t.data + (size_t)i * bytes;
    v.host = x->host ? (const char *)x->host + (size_t)i * bytes : NULL;
    return v;
}

/* Iteration t: binds the states and slice t of each scan input, runs the
 * body, takes the states back and copies the scan outputs into place. */
static int scan_iteration(exec_frame_t *f, const eng_node_t *n, scan_state_t *S, int64_t t)
{
    const eng_graph_t *body = S->body;
    exec_frame_t s;
    int rc = subgraph_open(f, body, &s);
    if (rc != 0)
        return rc;
    for (int i = 0; i < S->n_state; i++)
        subgraph_bind(&s, i, &S->carry[i]);
    for (int j = 0; j < S->n_in; j++) {
        held_t v = scan_slice(&S->xs[j], S->in_dirs && S->in_dirs[j] ? S->T - 1 - t : t);
        subgraph_bind(&s, S->n_state + j, &v);
    }
    if ((rc = exec_frame_run(&s)) != 0) {
        char what[64];
        snprintf(what, sizeof what, "body, iteration %lld", (long long)t);
        rc = subgraph_err(n, what, rc);
    }
    for (int i = 0; i < S->n_state && rc == 0; i++)
        rc = subgraph_take(f, n, &s, (size_t)i, &S->carry[i]);
    for (int k = 0; k < S->n_out && rc == 0; k++) {
        size_t j = (size_t)(S->n_state + k);
        held_t y;
        if ((rc = subgraph_take(f, n, &s, j, &y)) != 0)
            break;
        if (t == 0) {
            rc = stacked_new(f, n, "a scan output", y.t.dtype, &y.t.shape, S->T, &S->ys[k]);
        } else {
            eng_tensor_t first = {.dtype = S->ys[k].dtype, .shape.rank = S->ys[k].shape.rank - 1};
            memcpy(first.shape.dims, S->ys[k].shape.dims + 1,
                   (size_t)first.shape.rank * sizeof(int64_t));
            rc = scan_item_check(n, k, body->values[body->outputs[j]].name, t, &first, &y.t);
        }
        if (rc == 0)
            rc = stacked_put(f, n, &S->ys[k], S->out_dirs && S->out_dirs[k] ? S->T - 1 - t : t,
                             &y.t);
        held_release(f, &y);
    }
    exec_frame_fini(&s);
    return rc;
}

/* Scan output k, stacked along axis 0, into node output value v, its axis
 * moved where scan_output_axes says. */
static int scan_output(exec_frame_t *f, const eng_node_t *n, scan_state_t *S, int k, int v)
{
    held_t y = {.t = S->ys[k], .hold = EXEC_OWNED};
    S->ys[k] = (eng_tensor_t){0};
    int rc = 0;
    if (S->T == 0)
        rc = scan_empty(f, n, S->body, (size_t)(S->n_state + k), &y.t);
    int r = y.t.shape.rank;
    int64_t a = S->out_axes ? S->out_axes[k] : 0;
    if (rc == 0 && (a < -r || a >= r))
        rc = fs_err(FS_EINVAL, "node '%s' (Scan): scan_output_axes[%d] is %lld; scan output %d "
                    "has rank %d, so it must be in [%d, %d]", n->name, k, (long long)a, k, r, -r,
                    r - 1);
    a = a < 0 ? a + r : a;
    if (rc == 0 && a != 0) {
        int64_t perm[ENG_MAX_RANK];
        for (int d = 0; d < r; d++)
            perm[d] = d < a ? d + 1 : d == a ? 0 : d;
        eng_tensor_t moved;
        if ((rc = transpose_new(f, n, &y.t, perm, &moved)) == 0) {
            exec_free(f, y.t.data);
            y.t = moved;
        }
    }
    if (rc != 0) {
        held_release(f, &y);
        return rc;
    }
    return output_set(f, n, v, &y);
}

static int run_scan(exec_frame_t *f, const eng_node_t *n)
{
    scan_state_t S = {.body = eng_attr_graph(n, "body"),
                      .n_in = (int)eng_attr_i(n, "num_scan_inputs", 0),
                      .in_dirs = eng_attr_ints(n, "scan_input_directions", NULL),
                      .out_dirs = eng_attr_ints(n, "scan_output_directions", NULL),
                      .out_axes = eng_attr_ints(n, "scan_output_axes", NULL)};
    S.n_state = n->n_inputs - n->n_implicit - S.n_in;
    S.n_out = n->n_outputs - S.n_state;
    S.carry = calloc((size_t)S.n_state + 1, sizeof *S.carry);
    S.xs = calloc((size_t)S.n_in + 1, sizeof *S.xs);
    S.ys = calloc((size_t)S.n_out + 1, sizeof *S.ys);
    int rc = S.carry && S.xs && S.ys
                 ? 0
                 : fs_err(FS_ENOMEM, "out of host memory running node '%s' (Scan)", n->name);
    for (int j = 0; j < S.n_in && rc == 0; j++)
        rc = scan_input(f, n, &S, j);
    for (int i = 0; i < S.n_state && rc == 0; i++)
        rc = input_needed(f, n, i, "a state value", &S.carry[i]);
    for (int64_t t = 0; t < S.T && rc == 0; t++)
        rc = scan_iteration(f, n, &S, t);
    for (int i = 0; i < S.n_state && rc == 0; i++)
        rc = output_set(f, n, n->outputs[i], &S.carry[i]);
    for (int k = 0; k < S.n_out && rc == 0; k++)
        rc = scan_output(f, n, &S, k, n->outputs[S.n_state + k]);
    /* Only now: a state may be a slice of a transposed scan input. */
    helds_release(f, S.carry, S.carry ? S.n_state : 0);
    helds_release(f, S.xs, S.xs ? S.n_in : 0);
    for (int k = 0; S.ys && k < S.n_out; k++)
        exec_free(f, S.ys[k].data);
    free(S.carry);
    free(S.xs);
    free(S.ys);
    return rc;
}

int exec_control_run(exec_frame_t *f, const eng_node_t *n)
{
    switch (n->op->id) {
    case ENG_OP_If:
        return run_if(f, n);
    case ENG_OP_Loop:
        return run_loop(f, n);
    default:
        return run_scan(f, n);
    }
}
