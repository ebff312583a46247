/* ops.c -- the op registry (every op's definition and type string, by id,
 * generated from engine/ops/list.h) and the helpers op code shares. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
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
    return id < ENG_OP_COUNT ? eng_op_defs[id] : NULL;
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

int eng_op_infer(eng_op_ctx_t *c)
{
    assert(eng_op_ctx_complete(c)); /* the loader enforced the op's schema */
    int rc = c->node->op->infer(c);
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

int eng_op_run(const eng_kernel_t *k, eng_op_ctx_t *c)
{
    assert(eng_op_ctx_complete(c)); /* the loader enforced the op's schema */
    bool work = false;
    for (int o = 0; o < c->n_outputs && !work; o++)
        work = c->outputs[o] && eng_shape_numel(&c->outputs[o]->shape) > 0;
    return work ? k->run(c) : 0;
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
