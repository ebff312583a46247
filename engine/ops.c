/* ops.c -- the op registry (every family's definitions and CPU kernels) and
 * the helpers op code shares. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"

#define ENG_OP_FAMILY_DEFS_(f) eng_ops_##f,
static const eng_op_def_t *const *const op_families[] = {ENG_OP_FAMILIES(ENG_OP_FAMILY_DEFS_)};
#undef ENG_OP_FAMILY_DEFS_
#define ENG_OP_FAMILY_CPU_(f) eng_cpu_##f,
static const eng_cpu_kernel_t *const *const cpu_families[] = {ENG_OP_FAMILIES(ENG_OP_FAMILY_CPU_)};
#undef ENG_OP_FAMILY_CPU_

/* Linear over about a hundred names: only load and plan building look ops
 * up; execution holds the resolved pointers. */
const eng_op_def_t *eng_op_find(const char *op_type)
{
    for (size_t f = 0; f < sizeof op_families / sizeof op_families[0]; f++)
        for (const eng_op_def_t *const *d = op_families[f]; *d; d++)
            if (strcmp((*d)->op_type, op_type) == 0)
                return *d;
    return NULL;
}

#if FS_HAVE_CUDA
#define ENG_OP_FAMILY_CUDA_(f) eng_cuda_##f,
static const eng_kernel_t *const *const cuda_families[] = {ENG_OP_FAMILIES(ENG_OP_FAMILY_CUDA_)};
#undef ENG_OP_FAMILY_CUDA_
#endif

static const eng_kernel_t *kernel_search(const eng_kernel_t *const *const *families, size_t n,
                                         const char *op_type)
{
    for (size_t f = 0; f < n; f++)
        for (const eng_kernel_t *const *k = families[f]; *k; k++)
            if (strcmp((*k)->op_type, op_type) == 0)
                return *k;
    return NULL;
}

const eng_kernel_t *eng_kernel_find(eng_device_kind_t dev, const char *op_type)
{
    switch (dev) {
    case ENG_DEVICE_CPU:
        return kernel_search(cpu_families, sizeof cpu_families / sizeof cpu_families[0], op_type);
    case ENG_DEVICE_CUDA:
#if FS_HAVE_CUDA
        return kernel_search(cuda_families, sizeof cuda_families / sizeof cuda_families[0],
                             op_type);
#else
        return NULL;
#endif
    }
    return NULL;
}

const eng_cpu_kernel_t *eng_cpu_kernel_find(const char *op_type)
{
    return eng_kernel_find(ENG_DEVICE_CPU, op_type);
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
