/* provider_impl.h -- the provider function table, for the files that
 * implement providers. Callers use the wrappers in provider.h. */
#ifndef FS_ALLOC_PROVIDER_IMPL_H
#define FS_ALLOC_PROVIDER_IMPL_H

#include "alloc/provider.h"

#ifdef __cplusplus
extern "C" {
#endif

struct alloc_provider_i {
    /* required */
    int (*alloc)(alloc_provider_t *p, size_t bytes, void **out);
    void (*free)(alloc_provider_t *p, void *ptr, size_t bytes);
    void (*destroy)(alloc_provider_t *p);
    /* optional: NULL means FS_ENOTSUP */
    int (*mem_info)(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes);
    /* optional, all three or none: NULL means no fences (always passed) */
    int (*fence_record)(alloc_provider_t *p, alloc_stream_t stream, void **fence);
    int (*fence_query)(alloc_provider_t *p, void *fence);
    void (*fence_destroy)(alloc_provider_t *p, void *fence);
};

struct alloc_provider {
    const struct alloc_provider_i *iface; /* static const table */
    void *ctx;                            /* the kind's own state */
    bool is_device;
    char name[32];
};

#ifdef __cplusplus
}
#endif
#endif
