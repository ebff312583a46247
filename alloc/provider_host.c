/* provider_host.c -- the "host" provider: page-aligned anonymous mmap, and
 * the machine's available and total memory, lowered to the cgroup memory
 * limit (v2 or v1) when the process runs in a container that has one. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/provider.h"
#include "alloc/provider_impl.h"
#include "common/error.h"
#include "common/log.h"

/* The provider and its state in one allocation; base.ctx points back here. */
typedef struct host_provider {
    struct alloc_provider base;
    atomic_uint_fast64_t live_bytes;  /* handed out and not yet freed, for the leak log */
    atomic_uint_fast64_t live_allocs;
} host_provider_t;

static int host_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    host_provider_t *h = p->ctx;
    /* Reserved honestly (no MAP_NORESERVE): the kernel's overcommit
     * accounting sees every segment, so a mapping it cannot back fails here
     * rather than at first touch, where the OOM killer would end the
     * process. The cache's limit keeps the total under what the process may
     * use. */
    void *ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED)
        return fs_err(FS_ENOMEM, "host: mmap of %zu bytes failed: %s", bytes, strerror(errno));
    atomic_fetch_add(&h->live_bytes, bytes);
    atomic_fetch_add(&h->live_allocs, 1);
    *out = ptr;
    return 0;
}

static void host_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    host_provider_t *h = p->ctx;
    if (munmap(ptr, bytes) != 0) {
        FS_LOG_E("alloc", "host: munmap(%p, %zu) failed: %s", ptr, bytes, strerror(errno));
        return;
    }
    atomic_fetch_sub(&h->live_bytes, bytes);
    atomic_fetch_sub(&h->live_allocs, 1);
}

static void host_destroy(alloc_provider_t *p)
{
    host_provider_t *h = p->ctx;
    uint64_t live = atomic_load(&h->live_allocs);
    if (live)
        FS_LOG_W("alloc", "host provider destroyed with %" PRIu64 " allocations (%" PRIu64
                 " bytes) not freed", live, (uint64_t)atomic_load(&h->live_bytes));
    free(h);
}

/* MemAvailable from /proc/meminfo, in bytes: the kernel's estimate of what
 * can be allocated without swapping, page cache included. Returns 0, or -1
 * when the file or the line is missing (kernels before 3.14). */
static int host_meminfo_available(uint64_t *bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *bytes = (uint64_t)kib * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* The one number in the file at `path`; "max" reads as UINT64_MAX. Returns
 * 0, or -1 when the file is missing or holds neither. */
static int host_read_number(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char text[64] = {0};
    int rc = -1;
    if (fgets(text, sizeof text, f)) {
        unsigned long long v;
        if (strncmp(text, "max", 3) == 0) {
            *out = UINT64_MAX;
            rc = 0;
        } else if (sscanf(text, "%llu", &v) == 1) {
            *out = v;
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* A cgroup memory hierarchy: where it is mounted, and its limit and usage
 * files. v1 writes "no limit" as a huge number, which clamps nothing. */
typedef struct host_cgroup_kind {
    const char *mount;
    const char *limit_file;
    const char *usage_file;
} host_cgroup_kind_t;

static const host_cgroup_kind_t host_cgroup_v2 = {
    .mount = "/sys/fs/cgroup",
    .limit_file = "memory.max",
    .usage_file = "memory.current",
};

static const host_cgroup_kind_t host_cgroup_v1 = {
    .mount = "/sys/fs/cgroup/memory",
    .limit_file = "memory.limit_in_bytes",
    .usage_file = "memory.usage_in_bytes",
};

/* Lowers *total and *avail to the limit of `cgroup` (a path in `kind`'s
 * hierarchy; overwritten) and of each ancestor: a container's limit is
 * often set on a parent, and without a cgroup namespace the container sees
 * its own cgroup at the mount's root, so the levels not visible here are
 * missing files and skipped. */
static void host_cgroup_walk(const host_cgroup_kind_t *kind, char *cgroup, uint64_t *total,
                             uint64_t *avail)
{
    for (;;) {
        char path[2 * PATH_MAX];
        uint64_t limit, usage;
        const char *dir = strcmp(cgroup, "/") == 0 ? "" : cgroup;
        snprintf(path, sizeof path, "%s%s/%s", kind->mount, dir, kind->limit_file);
        if (host_read_number(path, &limit) == 0 && limit != UINT64_MAX) {
            if (limit < *total)
                *total = limit;
            snprintf(path, sizeof path, "%s%s/%s", kind->mount, dir, kind->usage_file);
            if (host_read_number(path, &usage) == 0) {
                uint64_t room = usage < limit ? limit - usage : 0;
                if (room < *avail)
                    *avail = room;
            }
        }
        if (strcmp(cgroup, "/") == 0)
            break;
        char *slash = strrchr(cgroup, '/');
        slash[slash == cgroup ? 1 : 0] = '\0'; /* "/a" -> "/", "/a/b" -> "/a" */
    }
}

/* Whether the comma-separated controller list `list` (not terminated; `len`
 * bytes) names the v1 memory controller. */
static bool host_cgroup_has_memory(const char *list, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t n = strcspn(list + i, ",:");
        if (n == 6 && strncmp(list + i, "memory", 6) == 0)
            return true;
        i += n + 1;
    }
    return false;
}

/* Lowers *total and *avail to the memory limits of this process's cgroups,
 * v2 ("0::/path") and v1 ("N:memory:/path") alike. Leaves them as they are
 * when /proc/self/cgroup cannot be read or no level has a limit. */
static void host_cgroup_clamp(uint64_t *total, uint64_t *avail)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return;
    char line[PATH_MAX + 64];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':');
        char *cgroup = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!cgroup || cgroup[1] != '/')
            continue;
        controllers++;
        cgroup++;
        if (strncmp(line, "0::", 3) == 0)
            host_cgroup_walk(&host_cgroup_v2, cgroup, total, avail);
        else if (host_cgroup_has_memory(controllers, (size_t)(cgroup - 1 - controllers)))
            host_cgroup_walk(&host_cgroup_v1, cgroup, total, avail);
    }
    fclose(f);
}

static int host_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    long phys = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || phys <= 0)
        return fs_err(FS_EIO, "host: sysconf cannot tell the physical memory size");
    uint64_t total = (uint64_t)phys * (uint64_t)page;
    uint64_t avail;
    if (host_meminfo_available(&avail) != 0) {
        /* Free pages only, page cache not counted: an underestimate. */
        long av = sysconf(_SC_AVPHYS_PAGES);
        avail = av > 0 ? (uint64_t)av * (uint64_t)page : 0;
    }
    host_cgroup_clamp(&total, &avail);
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(avail < total ? avail : total);
    return 0;
}

static const struct alloc_provider_i host_iface = {
    .alloc = host_alloc,
    .free = host_free,
    .destroy = host_destroy,
    .mem_info = host_mem_info,
};

int alloc_provider_host_create(alloc_provider_t **out)
{
    host_provider_t *h = calloc(1, sizeof *h);
    if (!h)
        return fs_err(FS_ENOMEM, "host provider: cannot allocate its state");
    h->base.iface = &host_iface;
    h->base.ctx = h;
    h->base.is_device = false;
    snprintf(h->base.name, sizeof h->base.name, "host");
    atomic_init(&h->live_bytes, 0);
    atomic_init(&h->live_allocs, 0);
    *out = &h->base;
    return 0;
}
