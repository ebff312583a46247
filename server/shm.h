/* shm.h -- Triton's system and CUDA shared-memory extensions: the table of
 * regions clients registered (a POSIX shared-memory object, shm_open's key,
 * and a byte range of it, mapped read-write; or a CUDA IPC handle of a
 * client's device allocation, opened on its device), and the references
 * inference requests hold on them.
 *
 * The two kinds share one name space, as in Triton: a name registered as
 * one kind cannot be registered as the other, a tensor names a region of
 * either kind, and unregister and status of one kind leave the other's
 * regions alone (status of a region of the other kind is an error naming
 * its kind).
 *
 * A region is mapped (CUDA: opened) at register and unmapped (closed) when
 * it is unregistered and no request holds it any longer: a request in
 * flight that reads or writes a region keeps its mapping until the request
 * ends, whatever unregister does meanwhile. At most SRV_SHM_REGIONS_MAX
 * regions and SRV_SHM_BYTES_MAX mapped bytes (the table's max_bytes), both
 * kinds together, count at once, mappings still held after their
 * unregister included.
 *
 * Threading: internally locked (one mutex); any thread may call anything
 * but srv_shm_destroy, which needs every reference released. */
#ifndef FS_SERVER_SHM_H
#define FS_SERVER_SHM_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most regions registered at once. */
#define SRV_SHM_REGIONS_MAX 256
/* The most bytes mapped at once (the regions' byte sizes): 1 TiB, address
 * space alone, as the mappings are the client's memory. */
#define SRV_SHM_BYTES_MAX (1ULL << 40)
/* A region's name: 1..127 bytes of [A-Za-z0-9_.-]. A key: an optional "/"
 * then 1..254 bytes of [A-Za-z0-9_.-], not "." or ".." (POSIX's portable
 * form of a shm_open name; no other "/"). */
#define SRV_SHM_NAME_MAX 128
#define SRV_SHM_KEY_MAX 256

/* The bytes of a CUDA IPC handle (cudaIpcMemHandle_t). */
#define SRV_SHM_CUDA_HANDLE_BYTES 64

typedef enum srv_shm_kind {
    SRV_SHM_SYSTEM, /* a POSIX shared-memory object, mapped */
    SRV_SHM_CUDA,   /* a CUDA IPC handle, opened on its device (shm_cuda.h) */
} srv_shm_kind_t;

typedef struct srv_shm srv_shm_t;               /* the table */
typedef struct srv_shm_region srv_shm_region_t; /* one mapping, reference counted */

/* An empty table that maps at most max_bytes (0: SRV_SHM_BYTES_MAX).
 * 0 and *out (caller frees with srv_shm_destroy), or FS_ENOMEM. */
int srv_shm_create(uint64_t max_bytes, srv_shm_t **out);
/* Unmaps every region and frees the table; no reference may be held.
 * NULL is a no-op. */
void srv_shm_destroy(srv_shm_t *t);

/* Maps [offset, offset + byte_size) of the shared-memory object `key`
 * (shm_open O_RDWR) as region `name`. 0, or FS_EINVAL naming what is
 * wrong (a name or key that is not valid, a name already registered, an
 * object that cannot be opened or is smaller than the range, a zero
 * byte_size, SRV_SHM_REGIONS_MAX regions or max_bytes reached), or
 * FS_ENOMEM; nothing is registered on error. */
int srv_shm_register(srv_shm_t *t, const char *name, const char *key, uint64_t offset,
                     uint64_t byte_size);
/* Opens the CUDA IPC handle `handle` (SRV_SHM_CUDA_HANDLE_BYTES bytes,
 * borrowed) on device `device_id` as region `name`, of byte_size bytes
 * (at most the allocation's). 0, or FS_EINVAL naming what is wrong (the
 * name, a name already registered as either kind, a zero byte_size, the
 * limits as above, a device this server does not have, a handle CUDA
 * refuses, a byte_size past the allocation), FS_ENOTSUP in a build
 * without CUDA, FS_EDEVICE for another CUDA error, or FS_ENOMEM; nothing
 * is registered on error. */
int srv_shm_register_cuda(srv_shm_t *t, const char *name, const void *handle, int device_id,
                          uint64_t byte_size);
/* Unregisters region `name` of kind `kind` (NULL: every region of that
 * kind); its mapping goes when no request holds it. A name not registered
 * as that kind is no error (Triton's rule). Cannot fail. */
void srv_shm_unregister(srv_shm_t *t, srv_shm_kind_t kind, const char *name);
/* The status in Triton's shape of region `name` of kind `kind` (NULL:
 * every region of that kind, in the order registered): system regions
 * [{"name", "key", "offset", "byte_size"}], CUDA regions [{"name",
 * "device_id", "byte_size"}]. 0 and *out (caller frees with cJSON_Delete),
 * FS_EINVAL naming a region not registered or registered as the other
 * kind, or FS_ENOMEM. */
int srv_shm_status(srv_shm_t *t, srv_shm_kind_t kind, const char *name, cJSON **out);

/* A reference on region `name` (either kind) and the address of its bytes
 * [offset, offset + byte_size), which must lie in the region: a host
 * address for a system region, a device address for a CUDA region (see
 * srv_shm_region_device). 0, *region (caller releases with
 * srv_shm_release) and *addr; or FS_EINVAL naming the region not
 * registered or the range out of its bounds (`what` names the tensor in
 * the message, e.g. "input 'x'"). */
int srv_shm_acquire(srv_shm_t *t, const char *name, uint64_t offset, uint64_t byte_size,
                    const char *what, srv_shm_region_t **region, void **addr);
/* The device a held region's bytes lie on: -1 for a system region, the
 * CUDA device for a CUDA region. Cannot fail. */
int srv_shm_region_device(const srv_shm_region_t *region);
/* The name of a held region (borrowed, valid while held). Cannot fail. */
const char *srv_shm_region_name(const srv_shm_region_t *region);
/* Drops the reference; the last one of an unregistered region unmaps it.
 * NULL is a no-op. */
void srv_shm_release(srv_shm_region_t *region);

/* Regions mapped now (registered, or unregistered and still held; both
 * kinds), and their bytes. Cannot fail. */
void srv_shm_usage(srv_shm_t *t, size_t *n_mapped, uint64_t *mapped_bytes);

#ifdef __cplusplus
}
#endif
#endif
