/* cache_info.c -- the caching allocator's bookkeeping faces: owners, stats,
 * the segment snapshot, and the policy hooks. The allocation algorithm is in
 * cache.c; this file only reads its structures or runs policies. */
#include <stdlib.h>
#include <string.h>

#include "alloc/arena.h"
#include "alloc/cache_impl.h"
#include "alloc/policy_impl.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

/* ---- owners ------------------------------------------------------------------ */

/* Grown by doubling; slots of destroyed owners are reused, so a server that
 * loads and unloads models for weeks keeps a table as large as its peak. */
int cache_owners_init(alloc_cache_t *c)
{
    c->owners = calloc(8, sizeof *c->owners);
    if (!c->owners)
        return FS_ENOMEM;
    c->n_owners = 1;
    c->owners[0].in_use = true;
    snprintf(c->owners[0].name, sizeof c->owners[0].name, "server");
    return 0;
}

void cache_owners_fini(alloc_cache_t *c)
{
    free(c->owners);
    c->owners = NULL;
    c->n_owners = 0;
}

/* Capacity of the owner table: the power of two at or above n (min 8). */
static size_t owners_capacity(size_t n)
{
    size_t cap = 8;
    while (cap < n)
        cap *= 2;
    return cap;
}

int alloc_cache_owner_create(alloc_cache_t *c, const char *name, alloc_owner_t *out)
{
    pthread_mutex_lock(&c->lock);
    size_t slot = 1;
    while (slot < c->n_owners && c->owners[slot].in_use)
        slot++;
    if (slot == c->n_owners) {
        if (c->n_owners == UINT32_MAX) {
            pthread_mutex_unlock(&c->lock);
            return fs_err(FS_ENOMEM, "cache '%s': too many owners", c->name);
        }
        size_t cap = owners_capacity(c->n_owners);
        if (c->n_owners + 1 > cap) {
            cache_owner_t *grown = realloc(c->owners, 2 * cap * sizeof *grown);
            if (!grown) {
                pthread_mutex_unlock(&c->lock);
                return fs_err(FS_ENOMEM, "cache '%s': out of host memory for owner '%s'",
                              c->name, name ? name : "");
            }
            c->owners = grown;
        }
        c->n_owners++;
    }
    cache_owner_t *o = &c->owners[slot];
    memset(o, 0, sizeof *o);
    o->in_use = true;
    snprintf(o->name, sizeof o->name, "%s", name ? name : "");
    *out = (alloc_owner_t)slot;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int alloc_cache_owner_destroy(alloc_cache_t *c, alloc_owner_t owner)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    if (owner == ALLOC_OWNER_SERVER || owner >= c->n_owners || !c->owners[owner].in_use) {
        rc = fs_err(FS_EINVAL, "cache '%s': owner %u is not one that can be destroyed", c->name,
                    owner);
    } else if (c->owners[owner].allocated.current != 0) {
        rc = fs_err(FS_EBUSY, "cache '%s': owner '%s' still holds %lld bytes in %lld blocks",
                    c->name, c->owners[owner].name,
                    (long long)c->owners[owner].allocated.current,
                    (long long)c->owners[owner].blocks.current);
    } else {
        c->owners[owner].in_use = false;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int alloc_cache_owner_stats(alloc_cache_t *c, alloc_owner_t owner, alloc_owner_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    if (owner >= c->n_owners || !c->owners[owner].in_use) {
        pthread_mutex_unlock(&c->lock);
        return fs_err(FS_EINVAL, "cache '%s': unknown owner %u", c->name, owner);
    }
    const cache_owner_t *o = &c->owners[owner];
    memcpy(out->name, o->name, sizeof out->name);
    out->allocated = o->allocated;
    out->requested = o->requested;
    out->blocks = o->blocks;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ---- stats ---------------------------------------------------------------------- */

void alloc_cache_stats(alloc_cache_t *c, alloc_cache_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->largest_free_bytes = cache_largest_free_locked(c);
    out->free_cached_bytes = (uint64_t)(c->stats.reserved.current - c->stats.active.current);
    out->limit_bytes = c->limit_bytes;
    pthread_mutex_unlock(&c->lock);
}

static void stat_reset_peak(alloc_stat_t *s)
{
    s->peak = s->current;
}

void alloc_cache_reset_peak(alloc_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    alloc_cache_stats_t *st = &c->stats;
    alloc_stat_t *all[] = {&st->allocated, &st->reserved, &st->active, &st->requested,
                           &st->segments,  &st->blocks};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        stat_reset_peak(all[i]);
    for (int p = 0; p < ALLOC_POOL_N; p++) {
        stat_reset_peak(&st->pool_allocated[p]);
        stat_reset_peak(&st->pool_reserved[p]);
    }
    for (size_t i = 0; i < c->n_owners; i++) {
        stat_reset_peak(&c->owners[i].allocated);
        stat_reset_peak(&c->owners[i].requested);
        stat_reset_peak(&c->owners[i].blocks);
    }
    pthread_mutex_unlock(&c->lock);
}

const char *alloc_cache_name(const alloc_cache_t *c)
{
    return c->name;
}

alloc_provider_t *alloc_cache_provider(const alloc_cache_t *c)
{
    return c->provider;
}

/* ---- snapshot ------------------------------------------------------------------- */

void alloc_snapshot_free(alloc_snapshot_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_segments; i++)
        free(s->segments[i].blocks);
    free(s->segments);
    free(s);
}

static int segment_info_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const alloc_segment_info_t *)a)->address;
    uintptr_t y = ((const alloc_segment_info_t *)b)->address;
    return x < y ? -1 : x > y;
}

int alloc_cache_snapshot(alloc_cache_t *c, alloc_snapshot_t **out)
{
    alloc_snapshot_t *snap = calloc(1, sizeof *snap);
    if (!snap)
        return fs_err(FS_ENOMEM, "out of host memory for a memory snapshot");
    pthread_mutex_lock(&c->lock);
    size_t n = 0;
    for (cache_segment_t *s = c->oldest; s; s = s->newer)
        n++;
    snap->segments = n ? calloc(n, sizeof *snap->segments) : NULL;
    if (n && !snap->segments)
        goto fail;
    for (cache_segment_t *s = c->oldest; s; s = s->newer) {
        alloc_segment_info_t *si = &snap->segments[snap->n_segments++];
        si->address = (uintptr_t)s->base;
        si->size = s->size;
        si->pool = s->pool;
        si->age_seq = s->seq;
        for (cache_block_t *b = s->first; b; b = b->next)
            si->n_blocks++;
        si->blocks = calloc(si->n_blocks, sizeof *si->blocks);
        if (!si->blocks)
            goto fail;
        size_t i = 0;
        for (cache_block_t *b = s->first; b; b = b->next, i++) {
            alloc_block_info_t *bi = &si->blocks[i];
            bi->offset = (size_t)(b->ptr - s->base);
            bi->size = b->size;
            bi->requested = b->requested;
            bi->stream = b->stream;
            bi->owner = b->owner;
            bi->state = b->state;
            if (b->state == ALLOC_BLOCK_ALLOCATED)
                si->allocated_bytes += b->size;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (snap->n_segments > 1)
        qsort(snap->segments, snap->n_segments, sizeof *snap->segments, segment_info_cmp);
    *out = snap;
    return 0;
fail:
    pthread_mutex_unlock(&c->lock);
    alloc_snapshot_free(snap);
    return fs_err(FS_ENOMEM, "out of host memory for a memory snapshot");
}

/* ---- policies ------------------------------------------------------------------- */

/* Checks a policy list: at most CACHE_MAX_POLICIES, one batch-memory
 * provider. */
static int policies_check(const alloc_cache_t *c, alloc_policy_t *const *ps, size_t n)
{
    if (n > CACHE_MAX_POLICIES)
        return fs_err(FS_EINVAL, "cache '%s': at most %d policies", c->name, CACHE_MAX_POLICIES);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (alloc_policy_provides_batch_memory(ps[i]) &&
                alloc_policy_provides_batch_memory(ps[j]))
                return fs_err(FS_EINVAL, "cache '%s': policy '%s' provides batch memory, and "
                              "'%s' already does", c->name,
                              alloc_policy_kind_name(alloc_policy_kind(ps[i])),
                              alloc_policy_kind_name(alloc_policy_kind(ps[j])));
    return 0;
}

int alloc_cache_policy_add(alloc_cache_t *c, alloc_policy_t *policy)
{
    pthread_mutex_lock(&c->lock);
    alloc_policy_t *ps[CACHE_MAX_POLICIES + 1];
    memcpy(ps, c->policies, c->n_policies * sizeof *ps);
    ps[c->n_policies] = policy;
    int rc = policies_check(c, ps, c->n_policies + 1);
    if (rc == 0)
        c->policies[c->n_policies++] = policy;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

size_t alloc_cache_policy_count(alloc_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->n_policies;
    pthread_mutex_unlock(&c->lock);
    return n;
}

alloc_policy_t *alloc_cache_policy_get(alloc_cache_t *c, size_t index)
{
    pthread_mutex_lock(&c->lock);
    alloc_policy_t *p = index < c->n_policies ? c->policies[index] : NULL;
    pthread_mutex_unlock(&c->lock);
    return p;
}

int alloc_cache_policies_replace(alloc_cache_t *c, alloc_policy_t *const *policies, size_t n)
{
    int rc = policies_check(c, policies, n);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    alloc_policy_t **old = c->policies;
    size_t n_old = c->n_policies;
    if (n_old > 0 && c->hooks_running > 0) {
        alloc_policy_t **grown = realloc(c->retired, (c->n_retired + n_old) * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&c->lock);
            return fs_err(FS_ENOMEM, "cache '%s': out of host memory replacing policies", c->name);
        }
        c->retired = grown;
        memcpy(c->retired + c->n_retired, old, n_old * sizeof *old);
        c->n_retired += n_old;
        n_old = 0;
    }
    alloc_policy_t *dead[CACHE_MAX_POLICIES];
    memcpy(dead, old, n_old * sizeof *old);
    memcpy(c->policies, policies, n * sizeof *policies);
    c->n_policies = n;
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n_old; i++)
        alloc_policy_destroy(dead[i]);
    return 0;
}

void cache_policies_fini(alloc_cache_t *c)
{
    for (size_t i = 0; i < c->n_policies; i++)
        alloc_policy_destroy(c->policies[i]);
    c->n_policies = 0;
    for (size_t i = 0; i < c->n_retired; i++)
        alloc_policy_destroy(c->retired[i]);
    free(c->retired);
    c->retired = NULL;
    c->n_retired = 0;
}

/* Copies the policy list under the lock, so hooks run unlocked; the copy
 * stays valid until policies_done, since replaced policies are retired, not
 * destroyed, while any hook runs. */
static size_t policies_copy(alloc_cache_t *c, alloc_policy_t **out)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->n_policies;
    memcpy(out, c->policies, n * sizeof *out);
    c->hooks_running++;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* Ends a hook; the last one out destroys retired policies. */
static void policies_done(alloc_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    alloc_policy_t **retired = NULL;
    size_t n = 0;
    if (--c->hooks_running == 0 && c->n_retired > 0) {
        retired = c->retired;
        n = c->n_retired;
        c->retired = NULL;
        c->n_retired = 0;
    }
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++)
        alloc_policy_destroy(retired[i]);
    free(retired);
}

void cache_policies_oom(alloc_cache_t *c, size_t requested_bytes)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = policies_copy(c, ps);
    for (size_t i = 0; i < n; i++)
        alloc_policy_on_oom(ps[i], c, requested_bytes);
    policies_done(c);
}

/* Runs a timed hook of every policy, unlocked, with one reading of the
 * clock (none when no policy is attached). */
static void policies_run_timed(alloc_cache_t *c,
                               void (*hook)(alloc_policy_t *, alloc_cache_t *, uint64_t))
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = policies_copy(c, ps);
    uint64_t now = n ? fs_clock_now_ns() : 0;
    for (size_t i = 0; i < n; i++)
        hook(ps[i], c, now);
    policies_done(c);
}

void alloc_cache_request_begin(alloc_cache_t *c)
{
    policies_run_timed(c, alloc_policy_on_request_begin);
}

void alloc_cache_request_end(alloc_cache_t *c)
{
    policies_run_timed(c, alloc_policy_on_request_end);
}

int alloc_cache_batch_begin(alloc_cache_t *c, size_t plan_bytes, alloc_stream_t stream,
                            alloc_owner_t owner, alloc_arena_t **arena)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = policies_copy(c, ps);
    *arena = NULL;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (alloc_policy_provides_batch_memory(ps[i])) {
            rc = alloc_policy_on_batch_begin(ps[i], c, plan_bytes, stream, owner, arena);
            break;
        }
    }
    policies_done(c);
    return rc;
}

void alloc_cache_batch_end(alloc_cache_t *c, alloc_arena_t *arena)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = policies_copy(c, ps);
    bool ended = false;
    for (size_t i = 0; i < n && !ended; i++) {
        if (alloc_policy_provides_batch_memory(ps[i])) {
            alloc_policy_on_batch_end(ps[i], c, arena);
            ended = true;
        }
    }
    /* No arena policy now (it was replaced): the arena still goes back. */
    if (!ended)
        alloc_arena_destroy(arena);
    policies_done(c);
}

void alloc_cache_tick(alloc_cache_t *c)
{
    alloc_cache_process_fences(c);
    policies_run_timed(c, alloc_policy_on_tick);
}
