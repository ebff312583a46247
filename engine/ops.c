/* ops.c -- the op registry (every op's definition and type string, by id,
 * generated from engine/ops/list.h) and the helpers op code shares. */
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/op_schema.h"

#define ENG_OP_DEF_ENTRY_(op, cpu, cuda) &eng_op_##op,
const eng_op_def_t *const eng_op_defs[ENG_OP_COUNT] = {ENG_OPS(ENG_OP_DEF_ENTRY_)};
#undef ENG_OP_DEF_ENTRY_

#define ENG_OP_TYPE_ENTRY_(op, cpu, cuda) #op,
static const char *const op_types[ENG_OP_COUNT] = {ENG_OPS(ENG_OP_TYPE_ENTRY_)};
#undef ENG_OP_TYPE_ENTRY_

const char *eng_op_type(eng_op_id_t id)
{
    return op_types[id];
}

/* The id of an op type, or ENG_OP_COUNT. Linear over about a hundred
 * names: only load and plan building look ops up; execution holds the
 * resolved pointers. */
static eng_op_id_t op_id_find(const char *op_type)
{
    int id = 0;
    while (id < ENG_OP_COUNT && strcmp(op_types[id], op_type) != 0)
        id++;
    return (eng_op_id_t)id;
}

const eng_op_def_t *eng_op_find(const char *op_type)
{
    eng_op_id_t id = op_id_find(op_type);
    return id < ENG_OP_COUNT && !eng_op_is_internal(id) ? eng_op_defs[id] : NULL;
}

int eng_op_err(const eng_op_ctx_t *c, int code, const char *fmt, ...)
{
    char detail[FS_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    const eng_node_t *n = c->node;
    return fs_err(code, "node '%s' (%s): %s", n && n->name ? n->name : "",
                  n ? n->op_type : "?", detail);
}

/* ---- half inputs through float kernels -------------------------------------------- */

/* Every op takes float16 and bfloat16 values; an op whose kernels compute
 * float but not these runs its float kernel on float copies, and its
 * results are rounded back (each op rounds, as ONNX's reference does when
 * it computes a float16 graph). The choice is made once, by infer, and
 * kept in ctx->widen, so that every path (plan steps, folding, the dynamic
 * executor) runs the node the same way. An op given half kernels later
 * simply stops being widened. */

#define WIDEN_ALIGN ((size_t)256)

static size_t widen_align(size_t n)
{
    return (n + WIDEN_ALIGN - 1) & ~(WIDEN_ALIGN - 1);
}

static bool dtype_half(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16;
}

/* The first half dtype among c's inputs, or ENG_DT_UNDEFINED. */
static eng_dtype_t half_input(const eng_op_ctx_t *c)
{
    for (int i = 0; i < c->n_inputs; i++)
        if (c->inputs[i] && dtype_half(c->inputs[i]->dtype))
            return c->inputs[i]->dtype;
    return ENG_DT_UNDEFINED;
}

static bool widened_input(const eng_op_ctx_t *c, int i)
{
    return c->inputs[i] && dtype_half(c->inputs[i]->dtype);
}

static bool widened_output(const eng_op_ctx_t *c, int o)
{
    return c->outputs[o] && c->outputs[o]->dtype == c->widen;
}

/* Host float copy of a half tensor's data (malloc'd), or NULL. */
static float *host_widen(const eng_tensor_t *t)
{
    int64_t n = eng_shape_numel(&t->shape);
    float *f = malloc(n > 0 ? (size_t)n * sizeof *f : sizeof *f);
    const uint16_t *h = t->data;
    for (int64_t i = 0; f && i < n; i++)
        f[i] = eng_half_dt_to_float(t->dtype, h[i]);
    return f;
}

/* The float views of c's half inputs (data: `data[i]`, or NULL) in tv, and
 * the input list that shows them in ins; the other inputs as they are. */
static void widen_views(const eng_op_ctx_t *c, eng_tensor_t *tv, const eng_tensor_t **ins,
                        void *const *data)
{
    for (int i = 0; i < c->n_inputs; i++) {
        ins[i] = c->inputs[i];
        if (!widened_input(c, i))
            continue;
        tv[i] = *c->inputs[i];
        tv[i].dtype = ENG_DT_FLOAT;
        tv[i].data = data ? data[i] : NULL;
        ins[i] = &tv[i];
    }
}

/* infer once more with each half input seen as float (its known data
 * converted on the host); on success the float outputs become `half`.
 * 0, infer's error, or FS_ENOMEM. */
static int widen_infer(eng_op_ctx_t *c, eng_dtype_t half)
{
    size_t n = c->n_inputs > 0 ? (size_t)c->n_inputs : 1;
    eng_tensor_t *tv = calloc(n, sizeof *tv);
    const eng_tensor_t **ins = calloc(n, sizeof *ins);
    void **data = calloc(n, sizeof *data);
    int rc = tv && ins && data ? 0 : fs_err(FS_ENOMEM, "out of host memory inferring shapes");
    for (int i = 0; rc == 0 && i < c->n_inputs; i++)
        if (widened_input(c, i) && c->inputs[i]->data && !(data[i] = host_widen(c->inputs[i])))
            rc = fs_err(FS_ENOMEM, "out of host memory inferring shapes");
    if (rc == 0) {
        widen_views(c, tv, ins, data);
        const eng_tensor_t *const *keep = c->inputs;
        c->inputs = ins;
        rc = c->node->op->infer(c);
        c->inputs = keep;
    }
    for (int o = 0; rc == 0 && o < c->n_outputs; o++)
        if (c->outputs[o] && c->outputs[o]->dtype == ENG_DT_FLOAT)
            c->outputs[o]->dtype = half;
    for (int i = 0; data && i < c->n_inputs; i++)
        free(data[i]);
    free(data);
    free(ins);
    free(tv);
    return rc;
}

/* Whether op `id` takes and makes string tensors (engine/tensor.h): the
 * ops that move elements as bytes, whose kernels copy a string's record
 * whole; Shape and Size, which read only the shape; Cast, CastLike and
 * Equal, which know strings; and Where, which selects records whole. Every
 * other op is refused a string input or output by eng_op_infer, so no
 * numeric kernel ever meets a record. */
static bool op_takes_strings(eng_op_id_t id)
{
    switch (id) {
    case ENG_OP_Identity: case ENG_OP_Reshape: case ENG_OP_Flatten: case ENG_OP_Squeeze:
    case ENG_OP_Unsqueeze: case ENG_OP_Transpose: case ENG_OP_Concat: case ENG_OP_Split:
    case ENG_OP_Slice: case ENG_OP_Gather: case ENG_OP_GatherElements: case ENG_OP_GatherND:
    case ENG_OP_Expand: case ENG_OP_Tile: case ENG_OP_Shape: case ENG_OP_Size:
    case ENG_OP_Cast: case ENG_OP_CastLike: case ENG_OP_Equal: case ENG_OP_Where:
        return true;
    default:
        return false;
    }
}

/* FS_ENOTSUP naming the first string input or output of a node whose op
 * does not take strings (op_takes_strings); 0 otherwise. */
static int check_strings(const eng_op_ctx_t *c, bool outputs)
{
    if (op_takes_strings(c->node->op->id))
        return 0;
    int n = outputs ? c->n_outputs : c->n_inputs;
    for (int i = 0; i < n; i++) {
        const eng_tensor_t *t = outputs ? c->outputs[i] : c->inputs[i];
        if (t && t->dtype == ENG_DT_STRING)
            return eng_op_err(c, FS_ENOTSUP, "%s %d is a string tensor; %s does not take "
                              "strings in flatserve", outputs ? "output" : "input", i,
                              eng_op_type(c->node->op->id));
    }
    return 0;
}

int eng_op_infer(eng_op_ctx_t *c)
{
    assert(eng_op_ctx_complete(c)); /* the loader enforced the op's schema */
    c->widen = ENG_DT_UNDEFINED;
    int rc = check_strings(c, false);
    if (rc)
        return rc;
    rc = c->node->op->infer(c);
    if (rc == 0 && (rc = check_strings(c, true)) != 0)
        return rc;
    eng_dtype_t half = rc == FS_ENOTSUP ? half_input(c) : ENG_DT_UNDEFINED;
    if (half != ENG_DT_UNDEFINED) {
        /* The first answer stands unless float goes further: a float-only
         * op gets its float semantics, anything else its own refusal. */
        char first[FS_ERRMSG_MAX];
        snprintf(first, sizeof first, "%s", fs_errmsg());
        int w = widen_infer(c, half);
        if (w == 0)
            c->widen = half;
        rc = w == FS_ENOTSUP ? fs_err(FS_ENOTSUP, "%s", first) : w;
    }
    for (int o = 0; rc == 0 && o < c->n_outputs; o++) {
        const eng_tensor_t *t = c->outputs[o];
        if (!t || eng_shape_bounded(&t->shape))
            continue;
        char shape[96];
        eng_shape_format(&t->shape, shape, sizeof shape);
        rc = eng_op_err(c, FS_ENOMEM, "output %d would be %s %s, more than the %lld elements "
                        "a tensor may hold", o, eng_dtype_name(t->dtype), shape,
                        (long long)ENG_NUMEL_MAX);
    }
    return rc;
}

/* A widened node as its float kernel sees it: each half input and output
 * as a float view (its data placed in the scratch by widen_run), the rest
 * as they are, in fc (c with the views and widen off). Built once per
 * scratch query or run. */
typedef struct widen_node {
    eng_tensor_t *tv, *ov; /* the views */
    const eng_tensor_t **ins;
    eng_tensor_t **outs;
    eng_op_ctx_t fc;
} widen_node_t;

static void widen_node_free(widen_node_t *w)
{
    free(w->tv);
    free(w->ov);
    free(w->ins);
    free(w->outs);
}

/* 0 and *w (free with widen_node_free, also on error), or FS_ENOMEM. */
static int widen_node_make(const eng_op_ctx_t *c, widen_node_t *w)
{
    size_t n = c->n_inputs > 0 ? (size_t)c->n_inputs : 1;
    size_t m = c->n_outputs > 0 ? (size_t)c->n_outputs : 1;
    *w = (widen_node_t){.tv = calloc(n, sizeof *w->tv), .ov = calloc(m, sizeof *w->ov),
                        .ins = calloc(n, sizeof *w->ins), .outs = calloc(m, sizeof *w->outs)};
    if (!w->tv || !w->ov || !w->ins || !w->outs)
        return eng_op_err(c, FS_ENOMEM, "out of host memory running through float");
    widen_views(c, w->tv, w->ins, NULL);
    for (int o = 0; o < c->n_outputs; o++) {
        w->outs[o] = c->outputs[o];
        if (!widened_output(c, o))
            continue;
        w->ov[o] = *c->outputs[o];
        w->ov[o].dtype = ENG_DT_FLOAT;
        w->outs[o] = &w->ov[o];
    }
    w->fc = *c;
    w->fc.inputs = w->ins;
    w->fc.outputs = w->outs;
    w->fc.widen = ENG_DT_UNDEFINED;
    return 0;
}

/* The scratch of a widened node: the kernel's own workspace on the float
 * views, rounded up (*inner), then the float copies, inputs first, as
 * widen_run lays them out. */
static size_t widen_scratch_bytes(const eng_kernel_t *k, const widen_node_t *w, size_t *inner)
{
    const eng_op_ctx_t *c = &w->fc;
    *inner = k->scratch_bytes ? widen_align(k->scratch_bytes(c)) : 0;
    size_t bytes = *inner;
    for (int i = 0; i < c->n_inputs; i++)
        if (c->inputs[i] == &w->tv[i])
            bytes += widen_align((size_t)eng_shape_numel(&w->tv[i].shape) * sizeof(float));
    for (int o = 0; o < c->n_outputs; o++)
        if (c->outputs[o] == &w->ov[o])
            bytes += widen_align((size_t)eng_shape_numel(&w->ov[o].shape) * sizeof(float));
    return bytes;
}

size_t eng_op_scratch_bytes(const eng_kernel_t *k, const eng_op_ctx_t *c)
{
    if (c->widen == ENG_DT_UNDEFINED)
        return k->scratch_bytes ? k->scratch_bytes(c) : 0;
    widen_node_t w;
    size_t inner, bytes = SIZE_MAX; /* no memory to ask with: a need no cache meets */
    if (widen_node_make(c, &w) == 0)
        bytes = widen_scratch_bytes(k, &w, &inner);
    widen_node_free(&w);
    return bytes;
}

/* The Cast kernel of the device whose table holds k: the conversions run
 * where the op does (on a GPU, queued on its stream). NULL if none. */
static const eng_kernel_t *widen_cast_kernel(const eng_kernel_t *k, const eng_op_ctx_t *c)
{
    eng_op_id_t id = c->node->op->id;
    if (eng_cpu_kernels[id] == k)
        return eng_cpu_kernels[ENG_OP_Cast];
#if FS_HAVE_CUDA
    if (eng_cuda_kernels[id] == k)
        return eng_cuda_kernels[ENG_OP_Cast];
#endif
    return NULL;
}

static int widen_cast(const eng_kernel_t *cast, const eng_op_ctx_t *c, const eng_tensor_t *from,
                      eng_tensor_t *to)
{
    eng_tensor_t *outs[1] = {to};
    const eng_tensor_t *ins[1] = {from};
    eng_op_ctx_t cc = {.node = c->node, .opset = c->opset, .n_inputs = 1, .inputs = ins,
                       .n_outputs = 1, .outputs = outs, .n_threads = c->n_threads,
                       .instance = c->instance};
    return eng_shape_numel(&from->shape) > 0 ? cast->run(&cc) : 0;
}

/* eng_op_run for a widened node: half inputs to float in scratch (and
 * their host copies to float on the host), the float kernel, then its
 * float outputs rounded into the real ones. The inputs are all copied
 * before the kernel runs, so an output sharing an input's memory (in
 * place) is safe. */
static int widen_run(const eng_kernel_t *k, eng_op_ctx_t *c)
{
    const eng_kernel_t *cast = widen_cast_kernel(k, c);
    if (!cast)
        return eng_op_err(c, FS_ENOTSUP, "computes %s through float, and this device has no "
                          "kernel to convert it", eng_dtype_name(c->widen));
    widen_node_t w;
    int rc = widen_node_make(c, &w);
    size_t n = c->n_inputs > 0 ? (size_t)c->n_inputs : 1;
    eng_tensor_t *hv = calloc(n, sizeof *hv);
    const eng_tensor_t **hins = calloc(n, sizeof *hins);
    float **host = calloc(n, sizeof *host);
    if (rc == 0 && (!hv || !hins || !host))
        rc = eng_op_err(c, FS_ENOMEM, "out of host memory running through float");
    size_t inner = 0, need = rc == 0 ? widen_scratch_bytes(k, &w, &inner) : 0;
    if (rc == 0 && c->scratch_bytes < need)
        rc = eng_op_scratch_err(c, need);
    /* The float copies after the kernel's workspace, inputs first. */
    char *at = (char *)c->scratch + inner;
    for (int i = 0; rc == 0 && i < c->n_inputs; i++)
        if (w.ins[i] == &w.tv[i]) {
            w.tv[i].data = at;
            at += widen_align((size_t)eng_shape_numel(&w.tv[i].shape) * sizeof(float));
        }
    for (int o = 0; rc == 0 && o < c->n_outputs; o++)
        if (w.outs[o] == &w.ov[o]) {
            w.ov[o].data = at;
            at += widen_align((size_t)eng_shape_numel(&w.ov[o].shape) * sizeof(float));
        }
    for (int i = 0; rc == 0 && i < c->n_inputs; i++)
        if (w.ins[i] == &w.tv[i])
            rc = widen_cast(cast, c, c->inputs[i], &w.tv[i]);
    /* A device kernel reads some inputs (Resize's scales, ...) on the host. */
    for (int i = 0; rc == 0 && c->host_inputs && i < c->n_inputs; i++) {
        const eng_tensor_t *h = c->host_inputs[i];
        hins[i] = h;
        if (!h || !h->data || !dtype_half(h->dtype))
            continue;
        if (!(host[i] = host_widen(h))) {
            rc = eng_op_err(c, FS_ENOMEM, "out of host memory running through float");
            break;
        }
        hv[i] = *h;
        hv[i].dtype = ENG_DT_FLOAT;
        hv[i].data = host[i];
        hins[i] = &hv[i];
    }
    if (rc == 0) {
        w.fc.host_inputs = c->host_inputs ? hins : NULL;
        w.fc.scratch = inner ? c->scratch : NULL;
        w.fc.scratch_bytes = inner;
        rc = k->run(&w.fc);
    }
    for (int o = 0; rc == 0 && o < c->n_outputs; o++)
        if (w.outs[o] == &w.ov[o])
            rc = widen_cast(cast, c, &w.ov[o], c->outputs[o]);
    for (int i = 0; host && i < c->n_inputs; i++)
        free(host[i]);
    free(host);
    free(hins);
    free(hv);
    widen_node_free(&w);
    return rc;
}

int eng_op_run(const eng_kernel_t *k, eng_op_ctx_t *c)
{
    assert(eng_op_ctx_complete(c)); /* the loader enforced the op's schema */
    bool work = false;
    for (int o = 0; o < c->n_outputs && !work; o++)
        work = c->outputs[o] && eng_shape_numel(&c->outputs[o]->shape) > 0;
    if (!work)
        return 0;
    return c->widen == ENG_DT_UNDEFINED ? k->run(c) : widen_run(k, c);
}

int eng_op_require_dtype(const eng_op_ctx_t *c, int input, const eng_dtype_t *allowed)
{
    const eng_tensor_t *t = eng_ctx_in(c, input);
    if (!t)
        return eng_op_err(c, FS_EINVAL, "input %d is missing", input);
    for (const eng_dtype_t *a = allowed; *a != ENG_DT_UNDEFINED; a++)
        if (t->dtype == *a)
            return 0;
    char list[160] = "";
    size_t len = 0;
    for (const eng_dtype_t *a = allowed; *a != ENG_DT_UNDEFINED && len < sizeof list; a++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", a == allowed ? "" : ", ",
                                eng_dtype_name(*a));
    return eng_op_err(c, FS_ENOTSUP, "input %d has dtype %s, which this op does not support "
                      "(supported: %s)", input, eng_dtype_name(t->dtype), list);
}

int eng_op_scratch_err(const eng_op_ctx_t *c, size_t need)
{
    return eng_op_err(c, FS_EINVAL, "scratch has %zu bytes, the kernel needs %zu",
                      c->scratch_bytes, need);
}

int64_t eng_tensor_get_i64(const eng_tensor_t *t, int64_t i)
{
    if (t->dtype == ENG_DT_INT32)
        return ((const int32_t *)t->data)[i];
    return ((const int64_t *)t->data)[i];
}

int eng_op_axis(const eng_op_ctx_t *c, int64_t axis, int rank, int *out)
{
    if (axis < -(int64_t)rank || axis >= (int64_t)rank || (rank == 0 && axis != 0))
        return eng_op_err(c, FS_EINVAL, "axis %lld is out of range for rank %d", (long long)axis,
                          rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}
