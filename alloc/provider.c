/* provider.c -- the public provider wrappers: argument checks and the
 * defaults for the optional methods of struct alloc_provider_i. */
#include "alloc/provider.h"

#include <assert.h>

#include "alloc/provider_impl.h"
#include "common/error.h"

void alloc_provider_destroy(alloc_provider_t *p)
{
    if (p)
        p->iface->destroy(p);
}

int alloc_provider_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    assert(p && out);
    if (bytes == 0)
        return fs_err(FS_EINVAL, "provider '%s': allocation of 0 bytes", p->name);
    return p->iface->alloc(p, bytes, out);
}

void alloc_provider_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    assert(p);
    /* Like free(NULL): a failed allocation's NULL may reach a cleanup path. */
    if (ptr)
        p->iface->free(p, ptr, bytes);
}

int alloc_provider_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes)
{
    assert(p);
    if (!p->iface->mem_info)
        return fs_err(FS_ENOTSUP, "provider '%s' does not report free and total memory", p->name);
    /* Either out-param may be NULL for a caller that wants only the other. */
    size_t free_unused, total_unused;
    return p->iface->mem_info(p, free_bytes ? free_bytes : &free_unused,
                              total_bytes ? total_bytes : &total_unused);
}

int alloc_provider_fence_record(alloc_provider_t *p, alloc_stream_t stream, void **fence)
{
    assert(p && fence);
    *fence = NULL;
    if (!p->iface->fence_record)
        return 0;
    return p->iface->fence_record(p, stream, fence);
}

int alloc_provider_fence_query(alloc_provider_t *p, void *fence)
{
    assert(p);
    if (!fence)
        return 1;
    /* A non-NULL fence can only come from a provider with fences. */
    assert(p->iface->fence_query);
    return p->iface->fence_query(p, fence);
}

void alloc_provider_fence_destroy(alloc_provider_t *p, void *fence)
{
    assert(p);
    if (!fence)
        return;
    assert(p->iface->fence_destroy);
    p->iface->fence_destroy(p, fence);
}

bool alloc_provider_has_fences(const alloc_provider_t *p)
{
    assert(p);
    return p->iface->fence_record != NULL;
}

const char *alloc_provider_name(const alloc_provider_t *p)
{
    assert(p);
    return p->name;
}

bool alloc_provider_is_device(const alloc_provider_t *p)
{
    assert(p);
    return p->is_device;
}
