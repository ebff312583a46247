/* shm.c -- the registered shared-memory regions (shm.h): a list under one
 * mutex, each region an mmap of a page-aligned window around its range (a
 * system region) or a CUDA IPC handle opened on its device (a CUDA region,
 * shm_cuda.h), with a reference count under that mutex. A region leaves
 * the list at unregister and is unmapped (closed) by whoever drops its
 * last reference (the list's own counts as one while it is registered),
 * so a request that acquired it keeps reading valid memory. */
#include "server/shm.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "server/shm_cuda.h"

struct srv_shm_region {
    srv_shm_t *table;             /* the table whose counts include it */
    struct srv_shm_region *next;  /* in the table's list while registered */
    srv_shm_kind_t kind;
    int device;                   /* CUDA: the device its handle is open on; system: -1 */
    char name[SRV_SHM_NAME_MAX];
    char key[SRV_SHM_KEY_MAX];    /* system: the object's name; CUDA: "" */
    uint64_t offset, byte_size;   /* the range as registered (CUDA: offset 0) */
    void *map;                    /* system: the mapping, a page-aligned window;
                                   * CUDA: the allocation's device address */
    size_t map_len;               /* system only */
    size_t skip;                  /* from map to the range's first byte (CUDA: 0) */
    unsigned refs;                /* the list's (while registered) and requests' (table lock) */
};

struct srv_shm {
    pthread_mutex_t lock;
    srv_shm_region_t *head;       /* registered regions, newest first */
    size_t n_mapped;              /* regions mapped: registered, or unregistered and held */
    uint64_t mapped_bytes;        /* their byte sizes */
    uint64_t max_bytes;           /* the bound on mapped_bytes */
};

int srv_shm_create(uint64_t max_bytes, srv_shm_t **out)
{
    srv_shm_t *t = calloc(1, sizeof *t);
    if (!t)
        return fs_err(FS_ENOMEM, "cannot allocate the shared-memory table");
    pthread_mutex_init(&t->lock, NULL);
    t->max_bytes = max_bytes ? max_bytes : SRV_SHM_BYTES_MAX;
    *out = t;
    return 0;
}

static const char *kind_name(srv_shm_kind_t kind)
{
    return kind == SRV_SHM_CUDA ? "CUDA" : "system";
}

/* Unmaps (closes) and frees a region no one holds, and uncounts it; table
 * lock held. */
static void region_free_locked(srv_shm_region_t *g)
{
    srv_shm_t *t = g->table;
    assert(g->refs == 0);
    if (g->kind == SRV_SHM_CUDA)
        srv_shm_cuda_close(g->name, g->device, g->map);
    else
        munmap(g->map, g->map_len);
    t->n_mapped--;
    t->mapped_bytes -= g->byte_size;
    free(g);
}

void srv_shm_destroy(srv_shm_t *t)
{
    if (!t)
        return;
    srv_shm_unregister(t, SRV_SHM_SYSTEM, NULL);
    srv_shm_unregister(t, SRV_SHM_CUDA, NULL);
    assert(t->n_mapped == 0); /* a request still holds a region: the caller's bug */
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* Whether s (NUL-terminated) is 1..max-1 bytes of [A-Za-z0-9_.-]. */
static bool name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n > 0 && n < max && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                         "0123456789_.-") == n;
}

static srv_shm_region_t *find_locked(srv_shm_t *t, const char *name)
{
    for (srv_shm_region_t *g = t->head; g; g = g->next)
        if (strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

/* Maps the range of `key` into g (map, map_len, skip). 0 or FS_EINVAL
 * naming why not; nothing stays open or mapped on error. */
static int region_map(srv_shm_region_t *g)
{
    int fd = shm_open(g->key, O_RDWR, 0);
    if (fd < 0)
        return fs_err(FS_EINVAL, "system shared memory region '%s': cannot open key '%s': %s",
                      g->name, g->key, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = fs_err(FS_EINVAL, "system shared memory region '%s': cannot stat key '%s': %s",
                    g->name, g->key, strerror(errno));
        goto done;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (g->offset > size || g->byte_size > size - g->offset) {
        rc = fs_err(FS_EINVAL, "system shared memory region '%s': offset %llu + byte_size %llu "
                    "is past the end of key '%s', which has %llu bytes", g->name,
                    (unsigned long long)g->offset, (unsigned long long)g->byte_size, g->key,
                    (unsigned long long)size);
        goto done;
    }
    /* mmap's offset must be a multiple of the page size: map from the page
     * the range starts in. */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = g->offset / page * page;
    g->skip = (size_t)(g->offset - start);
    g->map_len = (size_t)(g->byte_size + g->skip);
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        rc = fs_err(FS_EINVAL, "system shared memory region '%s': cannot map %llu bytes of key "
                    "'%s': %s", g->name, (unsigned long long)g->byte_size, g->key,
                    strerror(errno));
    }
done:
    close(fd);
    return rc;
}

/* The checks every register makes of its name and byte_size. 0 or
 * FS_EINVAL naming what is wrong. */
static int register_args_check(srv_shm_kind_t kind, const char *name, uint64_t byte_size)
{
    if (!name_ok(name, SRV_SHM_NAME_MAX))
        return fs_err(FS_EINVAL, "%s shared memory region name '%.64s%s' must be 1 to %d "
                      "bytes of letters, digits, '_', '.' and '-'", kind_name(kind), name,
                      strlen(name) > 64 ? "..." : "", SRV_SHM_NAME_MAX - 1);
    if (byte_size == 0)
        return fs_err(FS_EINVAL, "%s shared memory region '%s': byte_size must be at least 1",
                      kind_name(kind), name);
    return 0;
}

/* The table's checks before g joins it: its name free in both kinds, the
 * limits. 0 or FS_EINVAL naming what is wrong; table lock held. */
static int register_room_locked(srv_shm_t *t, const srv_shm_region_t *g)
{
    const srv_shm_region_t *old = find_locked(t, g->name);
    if (old && old->kind == g->kind)
        return fs_err(FS_EINVAL, "%s shared memory region '%s' is already registered; "
                      "unregister it first", kind_name(g->kind), g->name);
    if (old)
        return fs_err(FS_EINVAL, "cannot register %s shared memory region '%s': the name is "
                      "registered as %s shared memory (one name space holds both kinds); "
                      "unregister it first", kind_name(g->kind), g->name, kind_name(old->kind));
    if (t->n_mapped >= SRV_SHM_REGIONS_MAX)
        return fs_err(FS_EINVAL, "%s shared memory region '%s': %d regions are mapped, the "
                      "most flatserve keeps; unregister one first", kind_name(g->kind), g->name,
                      SRV_SHM_REGIONS_MAX);
    if (g->byte_size > t->max_bytes - t->mapped_bytes)
        return fs_err(FS_EINVAL, "%s shared memory region '%s': %llu bytes more would pass the "
                      "%llu bytes flatserve maps at once (%llu mapped now)", kind_name(g->kind),
                      g->name, (unsigned long long)g->byte_size,
                      (unsigned long long)t->max_bytes, (unsigned long long)t->mapped_bytes);
    return 0;
}

/* Adds g, mapped (opened), to the table; table lock held. */
static void register_add_locked(srv_shm_t *t, srv_shm_region_t *g)
{
    g->next = t->head;
    t->head = g;
    t->n_mapped++;
    t->mapped_bytes += g->byte_size;
}

/* A new region record of `kind` named `name` (checked), one reference
 * (the list's): the record, or NULL having set FS_ENOMEM's message. */
static srv_shm_region_t *region_new(srv_shm_t *t, srv_shm_kind_t kind, const char *name,
                                    uint64_t byte_size)
{
    srv_shm_region_t *g = calloc(1, sizeof *g);
    if (!g) {
        fs_err(FS_ENOMEM, "cannot allocate %s shared memory region '%s'", kind_name(kind), name);
        return NULL;
    }
    g->table = t;
    g->kind = kind;
    g->device = -1;
    strcpy(g->name, name);
    g->byte_size = byte_size;
    g->refs = 1;
    return g;
}

int srv_shm_register(srv_shm_t *t, const char *name, const char *key, uint64_t offset,
                     uint64_t byte_size)
{
    int rc = register_args_check(SRV_SHM_SYSTEM, name, byte_size);
    if (rc)
        return rc;
    const char *k = key[0] == '/' ? key + 1 : key;
    if (!name_ok(k, SRV_SHM_KEY_MAX - 1) || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
        return fs_err(FS_EINVAL, "system shared memory region '%s': key '%.64s%s' must be an "
                      "optional '/' then 1 to %d bytes of letters, digits, '_', '.' and '-' "
                      "(not '.' or '..')", name, key, strlen(key) > 64 ? "..." : "",
                      SRV_SHM_KEY_MAX - 2);
    srv_shm_region_t *g = region_new(t, SRV_SHM_SYSTEM, name, byte_size);
    if (!g)
        return FS_ENOMEM;
    strcpy(g->key, key);
    g->offset = offset;
    pthread_mutex_lock(&t->lock);
    /* Mapped under the lock, so that two registers of one name cannot both
     * pass the check: a register is rare and an mmap short. */
    if ((rc = register_room_locked(t, g)) == 0 && (rc = region_map(g)) == 0)
        register_add_locked(t, g);
    pthread_mutex_unlock(&t->lock);
    if (rc)
        free(g);
    return rc;
}

int srv_shm_register_cuda(srv_shm_t *t, const char *name, const void *handle, int device_id,
                          uint64_t byte_size)
{
    int rc = register_args_check(SRV_SHM_CUDA, name, byte_size);
    if (rc)
        return rc;
    srv_shm_region_t *g = region_new(t, SRV_SHM_CUDA, name, byte_size);
    if (!g)
        return FS_ENOMEM;
    g->device = device_id;
    pthread_mutex_lock(&t->lock);
    /* Opened under the lock as a system region is mapped under it: the
     * open of an IPC handle takes a moment, and a register is rare. */
    if ((rc = register_room_locked(t, g)) == 0 &&
        (rc = srv_shm_cuda_open(name, handle, device_id, byte_size, &g->map)) == 0)
        register_add_locked(t, g);
    pthread_mutex_unlock(&t->lock);
    if (rc)
        free(g);
    return rc;
}

void srv_shm_unregister(srv_shm_t *t, srv_shm_kind_t kind, const char *name)
{
    pthread_mutex_lock(&t->lock);
    for (srv_shm_region_t **p = &t->head; *p;) {
        srv_shm_region_t *g = *p;
        if (g->kind != kind || (name && strcmp(g->name, name) != 0)) {
            p = &g->next;
            continue;
        }
        *p = g->next;
        g->next = NULL;
        if (--g->refs == 0)
            region_free_locked(g);
        if (name)
            break; /* names are unique across kinds */
    }
    pthread_mutex_unlock(&t->lock);
}

static int status_add(cJSON *arr, const srv_shm_region_t *g)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        return FS_ENOMEM;
    }
    if (!cJSON_AddStringToObject(o, "name", g->name))
        return FS_ENOMEM;
    if (g->kind == SRV_SHM_CUDA ? !cJSON_AddNumberToObject(o, "device_id", g->device)
                                : !cJSON_AddStringToObject(o, "key", g->key) ||
                                      !cJSON_AddNumberToObject(o, "offset", (double)g->offset))
        return FS_ENOMEM;
    if (!cJSON_AddNumberToObject(o, "byte_size", (double)g->byte_size))
        return FS_ENOMEM;
    return 0;
}

int srv_shm_status(srv_shm_t *t, srv_shm_kind_t kind, const char *name, cJSON **out)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return fs_err(FS_ENOMEM, "cannot allocate the shared memory status");
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    if (name) {
        const srv_shm_region_t *g = find_locked(t, name);
        if (!g)
            rc = fs_err(FS_EINVAL, "%s shared memory region '%.127s' is not registered",
                        kind_name(kind), name);
        else if (g->kind != kind)
            rc = fs_err(FS_EINVAL, "the region named '%s' is registered as %s shared memory, "
                        "not %s shared memory", name, kind_name(g->kind), kind_name(kind));
        else
            rc = status_add(arr, g);
    } else {
        /* The list is newest first: collect, then add oldest first. */
        size_t n = 0;
        for (const srv_shm_region_t *g = t->head; g; g = g->next)
            n++;
        for (size_t i = n; i-- > 0 && rc == 0;) {
            const srv_shm_region_t *g = t->head;
            for (size_t j = 0; j < i; j++)
                g = g->next;
            if (g->kind == kind)
                rc = status_add(arr, g);
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (rc == FS_ENOMEM)
        rc = fs_err(FS_ENOMEM, "out of host memory writing the shared memory status");
    if (rc) {
        cJSON_Delete(arr);
        return rc;
    }
    *out = arr;
    return 0;
}

int srv_shm_acquire(srv_shm_t *t, const char *name, uint64_t offset, uint64_t byte_size,
                    const char *what, srv_shm_region_t **region, void **addr)
{
    pthread_mutex_lock(&t->lock);
    srv_shm_region_t *g = find_locked(t, name);
    int rc = 0;
    if (!g)
        rc = fs_err(FS_EINVAL, "%s: shared memory region '%.127s' is not registered (as system "
                    "or CUDA shared memory)", what, name);
    else if (offset > g->byte_size || byte_size > g->byte_size - offset)
        rc = fs_err(FS_EINVAL, "%s: shared_memory_offset %llu + shared_memory_byte_size %llu "
                    "is past the end of %s shared memory region '%s' (%llu bytes)", what,
                    (unsigned long long)offset, (unsigned long long)byte_size,
                    kind_name(g->kind), name, (unsigned long long)g->byte_size);
    else {
        g->refs++;
        *region = g;
        *addr = (char *)g->map + g->skip + offset;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int srv_shm_region_device(const srv_shm_region_t *g)
{
    return g->device; /* set at register, never changed */
}

const char *srv_shm_region_name(const srv_shm_region_t *g)
{
    return g->name;
}

void srv_shm_release(srv_shm_region_t *g)
{
    if (!g)
        return;
    srv_shm_t *t = g->table;
    pthread_mutex_lock(&t->lock);
    if (--g->refs == 0)
        region_free_locked(g);
    pthread_mutex_unlock(&t->lock);
}

void srv_shm_usage(srv_shm_t *t, size_t *n_mapped, uint64_t *mapped_bytes)
{
    pthread_mutex_lock(&t->lock);
    *n_mapped = t->n_mapped;
    *mapped_bytes = t->mapped_bytes;
    pthread_mutex_unlock(&t->lock);
}
