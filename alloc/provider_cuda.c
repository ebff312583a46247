/* provider_cuda.c -- the CUDA providers ("cuda", "cuda_async", "pinned"),
 * the CUDA probe, and the choice of the default provider. The only file of
 * alloc/ that includes CUDA headers.
 *
 * Every call that needs a device makes it current and restores the caller's
 * device afterwards, so a provider never changes which device the calling
 * thread works on. A CUDA build on a machine without a driver or a GPU fails
 * the constructors with FS_ENODEV; a build without CUDA fails them with
 * FS_ENOTSUP. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc/provider.h"
#include "alloc/provider_impl.h"
#include "common/error.h"
#include "common/log.h"

#if FS_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "common/cuda_error.h"

/* The provider and its state in one allocation; base.ctx points back here. */
typedef struct cuda_provider {
    struct alloc_provider base;
    int device;                      /* -1 for pinned: the caller's current device */
    cudaMemPool_t pool;              /* cuda_async: the device's default pool */
    alloc_provider_t *host;          /* pinned: owned host provider answering mem_info */
    atomic_uint_fast64_t live_bytes; /* handed out and not yet freed, for the leak log */
    atomic_uint_fast64_t live_allocs;
} cuda_provider_t;


/* FS_ENOMEM when the device (or pinned host memory) ran out, FS_EDEVICE
 * for any other error. */
static int cuda_alloc_code(cudaError_t err)
{
    return err == cudaErrorMemoryAllocation ? FS_ENOMEM : FS_EDEVICE;
}

/* Makes `device` current on this thread and stores the previous one in
 * *prev for cuda_device_leave. device -1 changes nothing. On error the
 * current device is unchanged and cuda_device_leave must not be called. */
static cudaError_t cuda_device_enter(int device, int *prev)
{
    *prev = device;
    if (device < 0)
        return cudaSuccess;
    cudaError_t err = cudaGetDevice(prev);
    if (err != cudaSuccess || *prev == device)
        return err;
    return cudaSetDevice(device);
}

/* Restores the device saved by a successful cuda_device_enter. Cannot
 * fail: switching back to a device that was current a moment ago is only
 * logged if it does. */
static void cuda_device_leave(int device, int prev)
{
    if (prev == device)
        return;
    cudaError_t err = cudaSetDevice(prev);
    if (err != cudaSuccess)
        FS_LOG_E("alloc", "cannot restore CUDA device %d after using device %d (%s: %s)", prev,
                 device, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* Counts a successful allocation for the leak log. */
static void cuda_live_add(cuda_provider_t *c, size_t bytes)
{
    atomic_fetch_add(&c->live_bytes, bytes);
    atomic_fetch_add(&c->live_allocs, 1);
}

static void cuda_live_sub(cuda_provider_t *c, size_t bytes)
{
    atomic_fetch_sub(&c->live_bytes, bytes);
    atomic_fetch_sub(&c->live_allocs, 1);
}

/* cuda_device_enter for `p`'s device, with the message set on error. */
static int cuda_provider_enter(alloc_provider_t *p, int *prev)
{
    cuda_provider_t *c = p->ctx;
    cudaError_t err = cuda_device_enter(c->device, prev);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cannot make device %d current", p->name,
                            c->device);
    return 0;
}

/* cudaMalloc on `p`'s device or, with `from_pool` (cuda_async), stream-
 * ordered on the legacy default stream (stream 0) from the pool with its
 * release threshold at UINT64_MAX: freed memory stays in the pool for
 * reuse. Work on other blocking streams is ordered with stream 0
 * implicitly; non-blocking streams must be ordered by the caller. */
static int cuda_alloc_on(alloc_provider_t *p, size_t bytes, bool from_pool, void **out)
{
    cuda_provider_t *c = p->ctx;
    int prev;
    int rc = cuda_provider_enter(p, &prev);
    if (rc != 0)
        return rc;
    void *ptr = NULL;
    cudaError_t err = from_pool ? cudaMallocFromPoolAsync(&ptr, bytes, c->pool, (cudaStream_t)0)
                                : cudaMalloc(&ptr, bytes);
    cuda_device_leave(c->device, prev);
    if (err != cudaSuccess)
        return fs_cuda_fail(cuda_alloc_code(err), err, "%s: %s of %zu bytes failed", p->name,
                            from_pool ? "cudaMallocFromPoolAsync" : "cudaMalloc", bytes);
    cuda_live_add(c, bytes);
    *out = ptr;
    return 0;
}

/* The end of every free: on success the live count drops; on failure the
 * memory is lost to the provider, which is logged (never fatal) and the
 * sticky-free error cleared. `call` names the CUDA function. */
static void cuda_free_finish(alloc_provider_t *p, cuda_provider_t *c, cudaError_t err,
                             const char *call, void *ptr, size_t bytes)
{
    if (err != cudaSuccess) {
        FS_LOG_E("alloc", "%s: %s(%p) of %zu bytes failed (%s: %s)", p->name, call, ptr, bytes,
                 cudaGetErrorName(err), cudaGetErrorString(err));
        (void)cudaGetLastError();
        return;
    }
    cuda_live_sub(c, bytes);
}

/* cudaFree on `p`'s device or, with `to_pool`, cudaFreeAsync on stream 0. */
static void cuda_free_on(alloc_provider_t *p, void *ptr, size_t bytes, bool to_pool)
{
    cuda_provider_t *c = p->ctx;
    int prev;
    cudaError_t err = cuda_device_enter(c->device, &prev);
    if (err == cudaSuccess) {
        err = to_pool ? cudaFreeAsync(ptr, (cudaStream_t)0) : cudaFree(ptr);
        cuda_device_leave(c->device, prev);
    }
    cuda_free_finish(p, c, err, to_pool ? "cudaFreeAsync" : "cudaFree", ptr, bytes);
}

static int cuda_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    return cuda_alloc_on(p, bytes, false, out);
}

static void cuda_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    cuda_free_on(p, ptr, bytes, false);
}

static int cuda_async_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    return cuda_alloc_on(p, bytes, true, out);
}

static void cuda_async_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    cuda_free_on(p, ptr, bytes, true);
}

static int pinned_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    cuda_provider_t *c = p->ctx;
    void *ptr = NULL;
    cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
    if (err != cudaSuccess)
        return fs_cuda_fail(cuda_alloc_code(err), err, "%s: cudaHostAlloc of %zu bytes failed",
                            p->name, bytes);
    cuda_live_add(c, bytes);
    *out = ptr;
    return 0;
}

static void pinned_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    cuda_provider_t *c = p->ctx;
    cudaError_t err = cudaFreeHost(ptr);
    cuda_free_finish(p, c, err, "cudaFreeHost", ptr, bytes);
}

/* Device-wide free and total bytes, used by cuda and cuda_async. */
static int cuda_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes)
{
    cuda_provider_t *c = p->ctx;
    int prev;
    int rc = cuda_provider_enter(p, &prev);
    if (rc != 0)
        return rc;
    cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    cuda_device_leave(c->device, prev);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cudaMemGetInfo failed", p->name);
    return 0;
}

/* Pinned memory is host memory: the host's figures. */
static int pinned_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes)
{
    cuda_provider_t *c = p->ctx;
    return alloc_provider_mem_info(c->host, free_bytes, total_bytes);
}

/* A fence is a timing-free CUDA event recorded on `stream`. For pinned the
 * event is created on the caller's current device, which must be the
 * stream's. On error no event is left behind. */
static int cuda_fence_record(alloc_provider_t *p, alloc_stream_t stream, void **fence)
{
    cuda_provider_t *c = p->ctx;
    int prev;
    int rc = cuda_provider_enter(p, &prev);
    if (rc != 0)
        return rc;
    cudaEvent_t ev = NULL;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err != cudaSuccess) {
        cuda_device_leave(c->device, prev);
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cudaEventCreateWithFlags failed", p->name);
    }
    err = cudaEventRecord(ev, (cudaStream_t)stream);
    if (err != cudaSuccess) {
        rc = fs_cuda_fail(FS_EDEVICE, err, "%s: cudaEventRecord on stream %#" PRIxPTR " failed",
                          p->name, stream);
        cudaEventDestroy(ev);
        cuda_device_leave(c->device, prev);
        return rc;
    }
    cuda_device_leave(c->device, prev);
    *fence = ev;
    return 0;
}

static int cuda_fence_query(alloc_provider_t *p, void *fence)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)fence);
    if (err == cudaSuccess)
        return 1;
    if (err == cudaErrorNotReady) {
        /* Not an error, but the runtime may still record it as the last
         * one; clear it as PyTorch's allocator does. */
        (void)cudaGetLastError();
        return 0;
    }
    return fs_cuda_fail(FS_EDEVICE, err, "%s: cudaEventQuery failed", p->name);
}

static void cuda_fence_destroy(alloc_provider_t *p, void *fence)
{
    cudaError_t err = cudaEventDestroy((cudaEvent_t)fence);
    if (err != cudaSuccess) {
        FS_LOG_E("alloc", "%s: cudaEventDestroy failed (%s: %s)", p->name, cudaGetErrorName(err),
                 cudaGetErrorString(err));
        (void)cudaGetLastError();
    }
}

static void cuda_destroy(alloc_provider_t *p)
{
    cuda_provider_t *c = p->ctx;
    uint64_t live = atomic_load(&c->live_allocs);
    if (live)
        FS_LOG_W("alloc", "%s provider destroyed with %" PRIu64 " allocations (%" PRIu64
                 " bytes) not freed", p->name, live, (uint64_t)atomic_load(&c->live_bytes));
    alloc_provider_destroy(c->host);
    free(c);
}

/* Gives the memory the pool caches back to the device once the frees
 * queued on stream 0 have run, so none of it outlives the provider. The
 * release threshold stays where the constructor put it: the pool is shared
 * with any other cuda_async provider of the device. */
static void cuda_async_destroy(alloc_provider_t *p)
{
    cuda_provider_t *c = p->ctx;
    int prev;
    cudaError_t err = cuda_device_enter(c->device, &prev);
    if (err == cudaSuccess) {
        err = cudaStreamSynchronize((cudaStream_t)0);
        if (err == cudaSuccess)
            err = cudaMemPoolTrimTo(c->pool, 0);
        cuda_device_leave(c->device, prev);
    }
    if (err != cudaSuccess) {
        FS_LOG_E("alloc", "%s: cannot trim the memory pool (%s: %s)", p->name,
                 cudaGetErrorName(err), cudaGetErrorString(err));
        (void)cudaGetLastError();
    }
    cuda_destroy(p);
}

/* Every CUDA table fences with CUDA events (cuda_fence_*). */
#define CUDA_EVENT_FENCES                                                                          \
    .fence_record = cuda_fence_record, .fence_query = cuda_fence_query,                            \
    .fence_destroy = cuda_fence_destroy

static const struct alloc_provider_i cuda_iface = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .destroy = cuda_destroy,
    .mem_info = cuda_mem_info,
    CUDA_EVENT_FENCES,
};

static const struct alloc_provider_i cuda_async_iface = {
    .alloc = cuda_async_alloc,
    .free = cuda_async_free,
    .destroy = cuda_async_destroy,
    .mem_info = cuda_mem_info,
    CUDA_EVENT_FENCES,
};

/* Pinned buffers are staging for async copies: a buffer must not be reused
 * before the copy that reads it has run, hence the fences. */
static const struct alloc_provider_i pinned_iface = {
    .alloc = pinned_alloc,
    .free = pinned_free,
    .destroy = cuda_destroy,
    .mem_info = pinned_mem_info,
    CUDA_EVENT_FENCES,
};

int alloc_cuda_probe(int *n_devices)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_ENODEV, err, "no usable GPU");
    if (n <= 0)
        return fs_err(FS_ENODEV, "no usable GPU (the CUDA runtime reports no device)");
    if (n_devices)
        *n_devices = n;
    return 0;
}

/* Checks that `device` exists and that its context can be made current
 * (cudaSetDevice initialises it): FS_ENODEV if not, FS_EINVAL for an index
 * out of range. `kind` names the provider in the message. Changes nothing
 * visible to the caller. */
static int cuda_device_check(int device, const char *kind)
{
    int n;
    int rc = alloc_cuda_probe(&n);
    if (rc < 0)
        return rc;
    if (device < 0 || device >= n)
        return fs_err(FS_EINVAL, "%s: device %d does not exist (%d CUDA device%s: 0..%d)", kind,
                      device, n, n == 1 ? "" : "s", n - 1);
    int prev;
    cudaError_t err = cuda_device_enter(device, &prev);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_ENODEV, err, "%s: device %d is not usable", kind, device);
    cuda_device_leave(device, prev);
    return 0;
}

/* A zeroed provider of `iface` on `device`; NULL with FS_ENOMEM set. */
static cuda_provider_t *cuda_provider_new(const struct alloc_provider_i *iface, int device,
                                          bool is_device, const char *name)
{
    cuda_provider_t *c = calloc(1, sizeof *c);
    if (!c) {
        fs_err(FS_ENOMEM, "%s provider: cannot allocate its state", name);
        return NULL;
    }
    c->base.iface = iface;
    c->base.ctx = c;
    c->base.is_device = is_device;
    snprintf(c->base.name, sizeof c->base.name, "%s", name);
    c->device = device;
    atomic_init(&c->live_bytes, 0);
    atomic_init(&c->live_allocs, 0);
    return c;
}

int alloc_provider_cuda_create(int device, alloc_provider_t **out)
{
    char name[sizeof ((alloc_provider_t *)0)->name];
    snprintf(name, sizeof name, "cuda:%d", device);
    int rc = cuda_device_check(device, name);
    if (rc < 0)
        return rc;
    cuda_provider_t *c = cuda_provider_new(&cuda_iface, device, true, name);
    if (!c)
        return FS_ENOMEM;
    *out = &c->base;
    return 0;
}

/* Sets the release threshold on the device's default pool, which is shared
 * by every cudaMallocAsync user of the process on that device. */
int alloc_provider_cuda_async_create(int device, alloc_provider_t **out)
{
    char name[sizeof ((alloc_provider_t *)0)->name];
    snprintf(name, sizeof name, "cuda_async:%d", device);
    int rc = cuda_device_check(device, name);
    if (rc < 0)
        return rc;
    int pools = 0;
    cudaError_t err = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cannot read cudaDevAttrMemoryPoolsSupported",
                            name);
    if (!pools)
        return fs_err(FS_ENOTSUP, "%s: the device does not support cudaMallocAsync memory pools",
                      name);
    cudaMemPool_t pool;
    err = cudaDeviceGetDefaultMemPool(&pool, device);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cudaDeviceGetDefaultMemPool failed", name);
    uint64_t threshold = UINT64_MAX;
    err = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "%s: cannot set the pool's release threshold", name);
    cuda_provider_t *c = cuda_provider_new(&cuda_async_iface, device, true, name);
    if (!c)
        return FS_ENOMEM;
    c->pool = pool;
    *out = &c->base;
    return 0;
}

int alloc_provider_pinned_create(alloc_provider_t **out)
{
    int rc = alloc_cuda_probe(NULL);
    if (rc < 0)
        return rc;
    alloc_provider_t *host;
    rc = alloc_provider_host_create(&host);
    if (rc < 0)
        return rc;
    cuda_provider_t *c = cuda_provider_new(&pinned_iface, -1, false, "pinned");
    if (!c) {
        alloc_provider_destroy(host);
        return FS_ENOMEM;
    }
    c->host = host;
    *out = &c->base;
    return 0;
}

int alloc_cuda_device_info(int device, alloc_cuda_device_info_t *out)
{
    int n;
    int rc = alloc_cuda_probe(&n);
    if (rc < 0)
        return rc;
    if (device < 0 || device >= n)
        return fs_err(FS_EINVAL, "CUDA device %d does not exist (%d device%s)", device, n,
                      n == 1 ? "" : "s");
    struct cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "cannot read the properties of CUDA device %d",
                            device);
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    /* nvidia-smi's form, which Triton's gpu_uuid label carries. */
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(out->uuid, sizeof out->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    out->total_bytes = prop.totalGlobalMem;
    return 0;
}

#else /* !FS_HAVE_CUDA */

#define CUDA_MISSING "flatserve was built without CUDA (rebuild with make CUDA=1)"

int alloc_cuda_probe(int *n_devices)
{
    return fs_err(FS_ENOTSUP, CUDA_MISSING);
}

int alloc_provider_cuda_create(int device, alloc_provider_t **out)
{
    return fs_err(FS_ENOTSUP, CUDA_MISSING);
}

int alloc_provider_cuda_async_create(int device, alloc_provider_t **out)
{
    return fs_err(FS_ENOTSUP, CUDA_MISSING);
}

int alloc_provider_pinned_create(alloc_provider_t **out)
{
    return fs_err(FS_ENOTSUP, CUDA_MISSING);
}

int alloc_cuda_device_info(int device, alloc_cuda_device_info_t *out)
{
    return fs_err(FS_ENOTSUP, CUDA_MISSING);
}

#endif /* FS_HAVE_CUDA */

/* Set by the first fallback to host, so the reason is logged once per
 * process however many providers are created. */
static atomic_flag default_fallback_logged = ATOMIC_FLAG_INIT;

int alloc_provider_default_create(alloc_provider_t **out)
{
    if (alloc_provider_cuda_create(0, out) == 0)
        return 0;
    char why[FS_ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", fs_errmsg());
    int rc = alloc_provider_host_create(out);
    if (rc < 0)
        return rc;
    if (!atomic_flag_test_and_set(&default_fallback_logged)) {
        /* A CPU build may be a choice; a CUDA build without a GPU is news. */
        if (FS_HAVE_CUDA)
            FS_LOG_W("alloc", "CUDA build, but %s: using the CPU", why);
        else
            FS_LOG_I("alloc", "%s: using the CPU", why);
    }
    return 0;
}
