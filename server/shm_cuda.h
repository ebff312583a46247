/* shm_cuda.h -- the CUDA calls of Triton's CUDA shared memory extension
 * (shm.c, shm_http.c): open and close a client's IPC handle, copy between
 * an opened region and host memory. The only server file that includes
 * CUDA headers is shm_cuda.c; in a build without CUDA each call fails with
 * FS_ENOTSUP saying the server has no GPU support (srv_shm_cuda_devices
 * answers 0).
 *
 * Every call makes the region's device current and restores the caller's
 * device afterwards. Threading: any thread; a handle is closed only once
 * no other call uses it (shm.c's reference counts see to that). */
#ifndef FS_SERVER_SHM_CUDA_H
#define FS_SERVER_SHM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA devices this process sees (0 without CUDA, a driver or a GPU).
 * Cannot fail. */
int srv_shm_cuda_devices(void);

/* Opens the IPC handle `handle` (SRV_SHM_CUDA_HANDLE_BYTES bytes, borrowed)
 * on `device` for region `name`, and checks that the allocation holds
 * byte_size bytes. 0 and *dptr (the allocation's base, a device address;
 * caller closes with srv_shm_cuda_close), or FS_EINVAL naming the device
 * this server does not have, the handle CUDA refuses or the byte_size past
 * the allocation; FS_EDEVICE for another CUDA error; FS_ENOTSUP without
 * CUDA. Nothing stays open on error. */
int srv_shm_cuda_open(const char *name, const void *handle, int device, uint64_t byte_size,
                      void **dptr);
/* Closes what srv_shm_cuda_open opened. Cannot fail: a CUDA error is
 * logged, naming the region. */
void srv_shm_cuda_close(const char *name, int device, void *dptr);

/* Copies `bytes` bytes between host memory and region `name`'s device
 * memory on `device`: to_device, from host `src` to device `dst`; else from
 * device `src` to host `dst`; complete on return. 0, or FS_EDEVICE naming
 * `what` (e.g. "input 'x'"), the region and the CUDA error; FS_ENOTSUP
 * without CUDA. */
int srv_shm_cuda_copy(const char *what, const char *name, int device, void *dst, const void *src,
                      size_t bytes, bool to_device);

#ifdef __cplusplus
}
#endif
#endif
