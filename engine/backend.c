/* backend.c -- the devices this build has, and the wrappers through which
 * the engine calls a device's table (engine/backend.h), with the optional
 * methods defaulted. */
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"

extern const eng_backend_i eng_backend_cpu;
#if FS_HAVE_CUDA
extern const eng_backend_i eng_backend_cuda;
#endif

const eng_backend_i *eng_backend_get(eng_device_kind_t kind)
{
    switch (kind) {
    case ENG_DEVICE_CPU:
        return &eng_backend_cpu;
    case ENG_DEVICE_CUDA:
#if FS_HAVE_CUDA
        return &eng_backend_cuda;
#else
        return NULL;
#endif
    }
    return NULL;
}

const eng_backend_i *eng_backend_host(void)
{
    return &eng_backend_cpu;
}

bool eng_backend_supports(const eng_backend_i *be, eng_precision_t p)
{
    return (unsigned)p < 32 && (be->precisions & (1u << p));
}

const eng_kernel_t *eng_backend_kernel(const eng_backend_i *be, const eng_op_def_t *op)
{
    return (unsigned)op->id < ENG_OP_COUNT ? be->kernels[op->id] : NULL;
}

const eng_kernel_t *eng_backend_kernel_find(const eng_backend_i *be, const char *op_type)
{
    const eng_op_def_t *op = eng_op_find(op_type);
    return op ? eng_backend_kernel(be, op) : NULL;
}

int eng_backend_instance_create(const eng_backend_i *be, const eng_device_t *dev,
                                eng_precision_t precision, void **out)
{
    *out = NULL;
    return be->instance_create ? be->instance_create(dev->index, precision, out) : 0;
}

void eng_backend_instance_destroy(const eng_backend_i *be, void *inst)
{
    if (inst && be->instance_destroy)
        be->instance_destroy(inst);
}

alloc_stream_t eng_backend_stream(const eng_backend_i *be, void *inst)
{
    return be->stream ? be->stream(inst) : 0;
}

int eng_backend_bind(const eng_backend_i *be, void *inst)
{
    return be->bind ? be->bind(inst) : 0;
}

/* A copy through `fn`, or a memcpy on a host-memory device. */
static int copy(const eng_backend_i *be, int (*fn)(void *, void *, const void *, size_t),
                void *inst, void *dst, const void *src, size_t bytes)
{
    if (!be->host_memory)
        return fn(inst, dst, src, bytes);
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
    return 0;
}

int eng_backend_copy_h2d(const eng_backend_i *be, void *inst, void *dst, const void *src,
                         size_t bytes)
{
    return copy(be, be->copy_h2d, inst, dst, src, bytes);
}

int eng_backend_copy_d2h(const eng_backend_i *be, void *inst, void *dst, const void *src,
                         size_t bytes)
{
    return copy(be, be->copy_d2h, inst, dst, src, bytes);
}

int eng_backend_sync(const eng_backend_i *be, void *inst)
{
    return be->sync ? be->sync(inst) : 0;
}

size_t eng_backend_workspace_bytes(const eng_backend_i *be)
{
    return be->set_workspace ? be->workspace_bytes : 0;
}

int eng_backend_set_workspace(const eng_backend_i *be, void *inst, void *ptr, size_t bytes)
{
    return be->set_workspace ? be->set_workspace(inst, ptr, bytes) : 0;
}

int eng_backend_upload(const eng_backend_i *be, void *inst, alloc_cache_t *cache,
                       alloc_owner_t owner, const void *host, size_t bytes, void **out)
{
    *out = NULL;
    void *p = NULL;
    int rc = alloc_cache_alloc(cache, bytes ? bytes : 1, eng_backend_stream(be, inst), owner, &p);
    if (rc == 0 && (rc = eng_backend_copy_h2d(be, inst, p, host, bytes)) != 0) {
        alloc_cache_free(cache, p);
        return rc;
    }
    *out = p;
    return rc;
}

bool eng_backend_can_capture(const eng_backend_i *be)
{
    return be->capture_begin && be->capture_end && be->graph_launch && be->graph_destroy;
}

int eng_backend_capture_begin(const eng_backend_i *be, void *inst)
{
    if (!eng_backend_can_capture(be))
        return fs_err(FS_ENOTSUP, "the %s device does not capture graphs", be->name);
    return be->capture_begin(inst);
}

int eng_backend_capture_end(const eng_backend_i *be, void *inst, void **graph)
{
    *graph = NULL;
    if (!eng_backend_can_capture(be))
        return fs_err(FS_ENOTSUP, "the %s device does not capture graphs", be->name);
    return be->capture_end(inst, graph);
}

int eng_backend_graph_launch(const eng_backend_i *be, void *inst, void *graph)
{
    if (!eng_backend_can_capture(be))
        return fs_err(FS_ENOTSUP, "the %s device does not capture graphs", be->name);
    return be->graph_launch(inst, graph);
}

void eng_backend_graph_destroy(const eng_backend_i *be, void *graph)
{
    if (graph && be->graph_destroy)
        be->graph_destroy(graph);
}
