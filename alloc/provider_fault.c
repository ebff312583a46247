/* provider_fault.c -- the "fault" provider for tests: wraps another provider
 * and adds a capacity, failure injection on a run of alloc calls, manual
 * fences, and a count of every call (SQLite's test_malloc idea, on the
 * provider table).
 *
 * Call numbering is 1-based over the provider's whole life and continues
 * across alloc_fault_configure, so "fail call N" is absolute. Capacity bytes
 * are reserved under the lock before the inner provider is called, so
 * concurrent callers can never exceed it together. Manual fences carry a
 * sequence number; alloc_fault_fences_pass makes every number handed out so
 * far pass, and nothing recorded later. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc/provider.h"
#include "alloc/provider_impl.h"
#include "common/error.h"
#include "common/log.h"

/* The provider and its state in one allocation; base.ctx points back here. */
typedef struct fault_provider {
    struct alloc_provider base;
    alloc_provider_t *inner;      /* borrowed; outlives this provider */
    pthread_mutex_t lock;         /* guards every field below */
    alloc_fault_config_t config;  /* the injection settings now in force */
    alloc_fault_counts_t counts;  /* live_* include bytes reserved by allocs in flight */
    uint64_t fence_seq;           /* last manual fence number handed out */
    uint64_t passed_seq;          /* manual fences numbered up to this have passed */
} fault_provider_t;

/* A fence handed out by this provider: a manual one (inner == NULL) or the
 * inner provider's, wrapped so that query and destroy route correctly even
 * if manual_fences changed since it was recorded. */
typedef struct fault_fence {
    uint64_t seq; /* manual fences only */
    void *inner;  /* the inner provider's fence, or NULL */
} fault_fence_t;

/* Whether alloc call number `n` is in the configured failing run. */
static bool fault_call_fails(const alloc_fault_config_t *cfg, uint64_t n)
{
    uint64_t run = cfg->fail_count ? cfg->fail_count : 1;
    /* n - from < run rather than n < from + run: no overflow for huge runs. */
    return cfg->fail_from_call != 0 && n >= cfg->fail_from_call && n - cfg->fail_from_call < run;
}

static int fault_alloc(alloc_provider_t *p, size_t bytes, void **out)
{
    fault_provider_t *f = p->ctx;
    pthread_mutex_lock(&f->lock);
    uint64_t n = ++f->counts.n_alloc_calls;
    if (fault_call_fails(&f->config, n)) {
        f->counts.n_alloc_failed++;
        pthread_mutex_unlock(&f->lock);
        return fs_err(FS_ENOMEM, "%s: injected failure at alloc call %" PRIu64 " (%zu bytes)",
                      p->name, n, bytes);
    }
    size_t cap = f->config.capacity_bytes;
    uint64_t live = f->counts.live_bytes;
    if (cap && (bytes > cap || live > cap - bytes)) {
        f->counts.n_alloc_failed++;
        pthread_mutex_unlock(&f->lock);
        return fs_err(FS_ENOMEM,
                      "%s: %zu bytes requested with %" PRIu64 " bytes of its capacity of %zu "
                      "bytes in use",
                      p->name, bytes, live, cap);
    }
    f->counts.live_bytes += bytes;
    f->counts.live_allocs++;
    pthread_mutex_unlock(&f->lock);

    int rc = alloc_provider_alloc(f->inner, bytes, out);
    if (rc < 0) {
        pthread_mutex_lock(&f->lock);
        f->counts.live_bytes -= bytes;
        f->counts.live_allocs--;
        pthread_mutex_unlock(&f->lock);
    }
    return rc;
}

static void fault_free(alloc_provider_t *p, void *ptr, size_t bytes)
{
    fault_provider_t *f = p->ctx;
    alloc_provider_free(f->inner, ptr, bytes);
    pthread_mutex_lock(&f->lock);
    f->counts.n_free_calls++;
    bool underflow = f->counts.live_allocs == 0 || f->counts.live_bytes < bytes;
    if (!underflow) {
        f->counts.live_bytes -= bytes;
        f->counts.live_allocs--;
    }
    uint64_t live = f->counts.live_bytes;
    pthread_mutex_unlock(&f->lock);
    if (underflow)
        FS_LOG_E("alloc", "%s: free of %zu bytes at %p with only %" PRIu64
                 " bytes live: a double free or a wrong size", p->name, bytes, ptr, live);
}

static int fault_mem_info(alloc_provider_t *p, size_t *free_bytes, size_t *total_bytes)
{
    fault_provider_t *f = p->ctx;
    pthread_mutex_lock(&f->lock);
    f->counts.n_mem_info_calls++;
    size_t cap = f->config.capacity_bytes;
    uint64_t live = f->counts.live_bytes;
    pthread_mutex_unlock(&f->lock);
    if (!cap)
        return alloc_provider_mem_info(f->inner, free_bytes, total_bytes);
    *total_bytes = cap;
    *free_bytes = live < cap ? cap - (size_t)live : 0;
    return 0;
}

static int fault_fence_record(alloc_provider_t *p, alloc_stream_t stream, void **fence)
{
    fault_provider_t *f = p->ctx;
    pthread_mutex_lock(&f->lock);
    f->counts.n_fence_records++;
    bool manual = f->config.manual_fences;
    uint64_t seq = manual ? ++f->fence_seq : 0;
    pthread_mutex_unlock(&f->lock);

    void *inner_fence = NULL;
    if (!manual) {
        int rc = alloc_provider_fence_record(f->inner, stream, &inner_fence);
        if (rc < 0)
            return rc;
        if (!inner_fence) { /* the inner provider has no fences: passed */
            *fence = NULL;
            return 0;
        }
    }
    fault_fence_t *ff = malloc(sizeof *ff);
    if (!ff) {
        alloc_provider_fence_destroy(f->inner, inner_fence);
        return fs_err(FS_ENOMEM, "%s: cannot allocate a fence", p->name);
    }
    ff->seq = seq;
    ff->inner = inner_fence;
    *fence = ff;
    return 0;
}

static int fault_fence_query(alloc_provider_t *p, void *fence)
{
    fault_provider_t *f = p->ctx;
    fault_fence_t *ff = fence;
    pthread_mutex_lock(&f->lock);
    f->counts.n_fence_queries++;
    int passed = ff->seq <= f->passed_seq;
    pthread_mutex_unlock(&f->lock);
    return ff->inner ? alloc_provider_fence_query(f->inner, ff->inner) : passed;
}

static void fault_fence_destroy(alloc_provider_t *p, void *fence)
{
    fault_provider_t *f = p->ctx;
    fault_fence_t *ff = fence;
    alloc_provider_fence_destroy(f->inner, ff->inner);
    free(ff);
}

static void fault_destroy(alloc_provider_t *p)
{
    fault_provider_t *f = p->ctx;
    if (f->counts.live_allocs)
        FS_LOG_W("alloc", "%s destroyed with %" PRIu64 " allocations (%" PRIu64 " bytes) not freed",
                 p->name, f->counts.live_allocs, f->counts.live_bytes);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* Fences are always present: manual_fences may be switched on after
 * creation, and without it a host inner provider's NULL fences pass. */
static const struct alloc_provider_i fault_iface = {
    .alloc = fault_alloc,
    .free = fault_free,
    .destroy = fault_destroy,
    .mem_info = fault_mem_info,
    .fence_record = fault_fence_record,
    .fence_query = fault_fence_query,
    .fence_destroy = fault_fence_destroy,
};

/* The fault state of `p`, or NULL with FS_EINVAL set when `p` is not a
 * fault provider; `what` names the calling function for the message. */
static fault_provider_t *fault_from(alloc_provider_t *p, const char *what)
{
    if (p && p->iface == &fault_iface)
        return p->ctx;
    fs_err(FS_EINVAL, "%s: provider '%s' is not a fault provider", what,
           p ? alloc_provider_name(p) : "(null)");
    return NULL;
}

int alloc_provider_fault_create(alloc_provider_t *inner, const alloc_fault_config_t *config,
                                alloc_provider_t **out)
{
    if (!inner)
        return fs_err(FS_EINVAL, "fault provider: no inner provider to wrap");
    fault_provider_t *f = calloc(1, sizeof *f);
    if (!f)
        return fs_err(FS_ENOMEM, "fault provider: cannot allocate its state");
    if (pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f);
        return fs_err(FS_ENOMEM, "fault provider: cannot initialise its mutex");
    }
    f->base.iface = &fault_iface;
    f->base.ctx = f;
    f->base.is_device = alloc_provider_is_device(inner);
    snprintf(f->base.name, sizeof f->base.name, "fault(%s)", alloc_provider_name(inner));
    f->inner = inner;
    if (config) /* NULL: no capacity, no injection, fences of the inner provider */
        f->config = *config;
    *out = &f->base;
    return 0;
}

int alloc_fault_configure(alloc_provider_t *p, const alloc_fault_config_t *config)
{
    fault_provider_t *f = fault_from(p, "alloc_fault_configure");
    if (!f)
        return FS_EINVAL;
    if (!config)
        return fs_err(FS_EINVAL, "alloc_fault_configure: no config for '%s'", p->name);
    pthread_mutex_lock(&f->lock);
    f->config = *config;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

int alloc_fault_counts(alloc_provider_t *p, alloc_fault_counts_t *out)
{
    fault_provider_t *f = fault_from(p, "alloc_fault_counts");
    if (!f)
        return FS_EINVAL;
    pthread_mutex_lock(&f->lock);
    *out = f->counts;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

int alloc_fault_fences_pass(alloc_provider_t *p)
{
    fault_provider_t *f = fault_from(p, "alloc_fault_fences_pass");
    if (!f)
        return FS_EINVAL;
    pthread_mutex_lock(&f->lock);
    f->passed_seq = f->fence_seq;
    pthread_mutex_unlock(&f->lock);
    return 0;
}
