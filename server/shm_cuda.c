/* shm_cuda.c -- the CUDA calls of CUDA shared memory (shm_cuda.h): a
 * client's IPC handle opened with cudaIpcOpenMemHandle (peer access
 * enabled lazily, so a handle of another device than the one a model runs
 * on still opens), its allocation's size read through the driver's
 * cuMemGetAddressRange (reached through the runtime's entry point, so
 * libcuda is not linked and a build runs where no driver is), and copies
 * on this thread's per-thread stream, synchronized before returning: the
 * client reads an output as soon as the answer arrives, and the per-thread
 * stream waits for no model's work on the device. */
#include "server/shm_cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "server/shm.h"

#if FS_HAVE_CUDA

#include <cuda.h> /* CUresult and CUdeviceptr only: the driver is reached through the runtime */
#include <cuda_runtime_api.h>

#include "common/cuda_error.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == SRV_SHM_CUDA_HANDLE_BYTES,
               "SRV_SHM_CUDA_HANDLE_BYTES is not the size of cudaIpcMemHandle_t");

int srv_shm_cuda_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Makes `device` current, the previous one in *prev. 0 or FS_EDEVICE
 * naming the region; on error nothing changed. */
static int device_enter(const char *name, int device, int *prev)
{
    cudaError_t err = cudaGetDevice(prev);
    if (err == cudaSuccess && *prev != device)
        err = cudaSetDevice(device);
    if (err != cudaSuccess)
        return fs_cuda_fail(FS_EDEVICE, err, "CUDA shared memory region '%s': cannot make "
                            "device %d current", name, device);
    return 0;
}

static void device_leave(int device, int prev)
{
    if (prev == device)
        return;
    cudaError_t err = cudaSetDevice(prev);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        FS_LOG_E("shm", "cannot restore CUDA device %d after using device %d (%s: %s)", prev,
                 device, cudaGetErrorName(err), cudaGetErrorString(err));
    }
}

/* The bytes of the allocation that holds device address p: 0 and *size,
 * or FS_EDEVICE naming the region. */
static int allocation_size(const char *name, void *p, size_t *size)
{
    typedef CUresult (*range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050 /* ByVersion came in 12.5; 13.0 deprecates the other */
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                       cudaEnableDefault, &found);
#else
    cudaError_t err = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault,
                                              &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn)
        return fs_cuda_fail(FS_EDEVICE, err != cudaSuccess ? err : cudaErrorSymbolNotFound,
                            "CUDA shared memory region '%s': the driver's cuMemGetAddressRange, "
                            "which checks the region's byte_size, cannot be found", name);
    CUdeviceptr base = 0;
    CUresult r = ((range_fn)fn)(&base, size, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS)
        return fs_err(FS_EDEVICE, "CUDA shared memory region '%s': cannot read the size of the "
                      "allocation its handle opens (CUresult %d)", name, (int)r);
    return 0;
}

int srv_shm_cuda_open(const char *name, const void *handle, int device, uint64_t byte_size,
                      void **dptr)
{
    int n = srv_shm_cuda_devices();
    if (device < 0 || device >= n)
        return fs_err(FS_EINVAL, "cannot register CUDA shared memory region '%s': device_id %d "
                      "is not a CUDA device of this server (%d device%s%s)", name, device, n,
                      n == 1 ? "" : "s", n ? ", counted from 0" : "");
    int prev, rc;
    if ((rc = device_enter(name, device, &prev)))
        return rc;
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    void *p = NULL;
    cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        /* A handle from this very process, of another machine, or of an
         * allocation freed since: the client's handle is wrong. */
        rc = fs_cuda_fail(err == cudaErrorMemoryAllocation ? FS_ENOMEM : FS_EINVAL, err,
                          "cannot register CUDA shared memory region '%s': CUDA cannot open its "
                          "raw_handle on device %d", name, device);
        goto done;
    }
    size_t size = 0;
    if ((rc = allocation_size(name, p, &size)) == 0 && byte_size > size)
        rc = fs_err(FS_EINVAL, "cannot register CUDA shared memory region '%s': byte_size %llu is "
                    "past the end of the allocation its raw_handle opens (%zu bytes)", name,
                    (unsigned long long)byte_size, size);
    if (rc) {
        (void)cudaIpcCloseMemHandle(p);
        (void)cudaGetLastError();
        goto done;
    }
    *dptr = p;
done:
    device_leave(device, prev);
    return rc;
}

void srv_shm_cuda_close(const char *name, int device, void *dptr)
{
    int prev;
    if (device_enter(name, device, &prev)) {
        FS_LOG_E("shm", "%s; its IPC handle stays open", fs_errmsg());
        return;
    }
    cudaError_t err = cudaIpcCloseMemHandle(dptr);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        FS_LOG_E("shm", "CUDA shared memory region '%s': cannot close its IPC handle on device %d "
                 "(%s: %s)", name, device, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    device_leave(device, prev);
}

int srv_shm_cuda_copy(const char *what, const char *name, int device, void *dst, const void *src,
                      size_t bytes, bool to_device)
{
    int prev, rc;
    if ((rc = device_enter(name, device, &prev)))
        return rc;
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice
                                                                 : cudaMemcpyDeviceToHost,
                                      cudaStreamPerThread);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(cudaStreamPerThread);
    if (err != cudaSuccess)
        rc = fs_cuda_fail(FS_EDEVICE, err, "%s: cannot copy %zu bytes %s CUDA shared memory region "
                          "'%s' on device %d", what, bytes, to_device ? "into" : "out of", name,
                          device);
    device_leave(device, prev);
    return rc;
}

#else /* !FS_HAVE_CUDA */

#define NO_GPU "this server was built without GPU support (no CUDA); register system shared " \
               "memory (/v2/systemsharedmemory) or send the tensors in the request body"

int srv_shm_cuda_devices(void)
{
    return 0;
}

int srv_shm_cuda_open(const char *name, const void *handle, int device, uint64_t byte_size,
                      void **dptr)
{
    (void)handle, (void)device, (void)byte_size, (void)dptr;
    return fs_err(FS_ENOTSUP, "cannot register CUDA shared memory region '%s': " NO_GPU, name);
}

void srv_shm_cuda_close(const char *name, int device, void *dptr)
{
    /* Nothing can have been opened. */
    (void)name, (void)device, (void)dptr;
}

int srv_shm_cuda_copy(const char *what, const char *name, int device, void *dst, const void *src,
                      size_t bytes, bool to_device)
{
    (void)device, (void)dst, (void)src, (void)bytes, (void)to_device;
    return fs_err(FS_ENOTSUP, "%s: CUDA shared memory region '%s': " NO_GPU, what, name);
}

#endif
