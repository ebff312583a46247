/* provider.h -- raw memory of one kind, behind one function table.
 *
 * A provider hands out and takes back memory; it never caches (the cache in
 * cache.h does that). Kinds:
 *   host       page-aligned host memory (mmap); mem_info reads the machine.
 *   cuda       cudaMalloc / cudaFree / cudaMemGetInfo on one device; stream
 *              fences are CUDA events.
 *   cuda_async cudaMallocAsync / cudaFreeAsync on the device's default pool
 *              with its release threshold at UINT64_MAX: the baseline the
 *              benchmark compares the cache against.
 *   pinned     cudaHostAlloc page-locked host memory, for staging copies.
 *   fault      wraps another provider for tests: a capacity, failing the Nth
 *              call or a run of calls, manual fences, and a count of every
 *              call.
 * A CUDA build runs on machines with no GPU or no driver: the cuda, pinned
 * and cuda_async constructors then fail with FS_ENODEV and a message saying
 * why, and alloc_provider_default_create falls back to host, saying so once
 * in the log. A build without CUDA fails them with FS_ENOTSUP.
 *
 * Streams and fences: an alloc_stream_t is an opaque stream handle (a
 * cudaStream_t on CUDA; 0 is the default stream). A fence marks "all work
 * queued on this stream so far"; providers without fences (host) treat
 * every fence as already passed.
 *
 * Threading: every provider is safe to call from several threads at once. */
#ifndef FS_ALLOC_PROVIDER_H
#define FS_ALLOC_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct alloc_provider alloc_provider_t;
typedef uintptr_t alloc_stream_t;

/* Constructors. Each returns 0 and a provider the caller frees with
 * alloc_provider_destroy, or a negative FS_E* code with a message and no
 * provider. */
int alloc_provider_host_create(alloc_provider_t **out);
int alloc_provider_cuda_create(int device, alloc_provider_t **out);
int alloc_provider_cuda_async_create(int device, alloc_provider_t **out);
int alloc_provider_pinned_create(alloc_provider_t **out);

/* cuda on device 0 when a usable GPU is there, else host (logging once, at
 * WARN, why the GPU is not used). Fails only if host memory cannot be had. */
int alloc_provider_default_create(alloc_provider_t **out);

/* Whether this binary was built with CUDA, and, when it was, whether a
 * usable device is present: 0 with *n_devices set, or FS_ENOTSUP /
 * FS_ENODEV with a message. */
int alloc_cuda_probe(int *n_devices);

/* What /metrics labels a GPU with. */
typedef struct alloc_cuda_device_info {
    char name[256];
    char uuid[64];            /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it */
    size_t total_bytes;
} alloc_cuda_device_info_t;
/* 0 and *out, or the probe's error, FS_EINVAL (no such device),
 * FS_EDEVICE. */
int alloc_cuda_device_info(int device, alloc_cuda_device_info_t *out);

/* The fault provider. `inner` is borrowed and must outlive the wrapper;
 * `config` may be NULL (no capacity, no injection). It always reports
 * fences (alloc_provider_has_fences is true), since manual fences may be
 * switched on later; without them it passes the inner provider's fences
 * through, which for host means NULL fences that read as passed.
 * live_bytes counts allocations in flight as well as those handed out. */
typedef struct alloc_fault_config {
    size_t capacity_bytes;   /* 0: no capacity beyond the inner provider's */
    uint64_t fail_from_call; /* 1-based alloc call index to start failing; 0: never */
    uint64_t fail_count;     /* how many calls fail from there; 0 means 1 */
    bool manual_fences;      /* fences pass only at alloc_fault_fences_pass */
} alloc_fault_config_t;

typedef struct alloc_fault_counts {
    uint64_t n_alloc_calls;  /* every alloc call, failed ones included */
    uint64_t n_alloc_failed; /* injected or capacity failures */
    uint64_t n_free_calls;
    uint64_t n_mem_info_calls;
    uint64_t n_fence_records;
    uint64_t n_fence_queries;
    uint64_t live_bytes;     /* allocated and not yet freed */
    uint64_t live_allocs;
} alloc_fault_counts_t;

int alloc_provider_fault_create(alloc_provider_t *inner, const alloc_fault_config_t *config,
                                alloc_provider_t **out);
/* Replaces the injection settings; call counts continue. FS_EINVAL if `p`
 * is not a fault provider. */
int alloc_fault_configure(alloc_provider_t *p, const alloc_fault_config_t *config);
/* Copies the counters. FS_EINVAL if `p` is not a fault provider. */
int alloc_fault_counts(alloc_provider_t *p, alloc_fault_counts_t *out);
/* With manual fences: every fence recorded so far passes. */
int alloc_fault_fences_pass(alloc_provider_t *p);

/* Releases the provider's own resources. Memory still handed out is the
 * caller's bug; the provider logs it. NULL is a no-op. */
void alloc_provider_destroy(alloc_provider_t *p);

/* Allocates `bytes` (> 0). 0 and *out set, or FS_ENOMEM (the kind is out of
 * memory) / FS_EDEVICE (another device error) with a message; *out
 * untouched on error. */
int alloc_provider_alloc(alloc_provider_t *p, size_t bytes, void **out);

/* Frees memory from alloc_provider_alloc of the same provider, with the size
 * it was asked for. Cannot fail as seen by the caller; device errors are
 * logged. */
void alloc_provider_free(alloc_provider_t *p, void *ptr, size_t bytes);

/* Free and total bytes of the provider's memory. 0, or FS_ENOTSUP /
 * FS_EDEVICE with a message. */
int alloc_provider_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes);

/* Fences. A provider without fence support returns 0 from record with
 * *fence = NULL, and a NULL fence always reads as passed. query returns 1
 * (passed), 0 (pending) or a negative code. */
int alloc_provider_fence_record(alloc_provider_t *p, alloc_stream_t stream, void **fence);
int alloc_provider_fence_query(alloc_provider_t *p, void *fence);
void alloc_provider_fence_destroy(alloc_provider_t *p, void *fence);
bool alloc_provider_has_fences(const alloc_provider_t *p);

/* "host", "cuda:0", "pinned", "fault(host)", ... Never NULL. */
const char *alloc_provider_name(const alloc_provider_t *p);
/* True for memory only a device can touch (cuda, cuda_async). */
bool alloc_provider_is_device(const alloc_provider_t *p);

#ifdef __cplusplus
}
#endif
#endif
