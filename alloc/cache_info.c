/* cache_info.c -- the caching allocator's bookkeeping faces: owners, stats
 * and the segment snapshot. The allocation algorithm is in cache.c; this
 * file only reads its structures and keeps the owner table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache_impl.h"
#include "common/error.h"

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
    cache_lock(c);
    size_t slot = 1;
    while (slot < c->n_owners && c->owners[slot].in_use)
        slot++;
    if (slot == c->n_owners) {
        if (c->n_owners == UINT32_MAX) {
            cache_unlock(c);
            return fs_err(FS_ENOMEM, "cache '%s': too many owners", c->name);
        }
        size_t cap = owners_capacity(c->n_owners);
        if (c->n_owners + 1 > cap) {
            cache_owner_t *grown = realloc(c->owners, 2 * cap * sizeof *grown);
            if (!grown) {
                cache_unlock(c);
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
    cache_unlock(c);
    return 0;
}

int alloc_cache_owner_destroy(alloc_cache_t *c, alloc_owner_t owner)
{
    int rc = 0;
    cache_lock(c);
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
    cache_unlock(c);
    return rc;
}

int alloc_cache_owner_stats(alloc_cache_t *c, alloc_owner_t owner, alloc_owner_stats_t *out)
{
    cache_lock(c);
    if (owner >= c->n_owners || !c->owners[owner].in_use) {
        cache_unlock(c);
        return fs_err(FS_EINVAL, "cache '%s': unknown owner %u", c->name, owner);
    }
    const cache_owner_t *o = &c->owners[owner];
    memcpy(out->name, o->name, sizeof out->name);
    out->allocated = o->allocated;
    out->requested = o->requested;
    out->blocks = o->blocks;
    cache_unlock(c);
    return 0;
}

/* ---- stats ---------------------------------------------------------------------- */

void alloc_cache_stats(alloc_cache_t *c, alloc_cache_stats_t *out)
{
    cache_lock(c);
    *out = c->stats;
    out->largest_free_bytes = cache_largest_free_locked(c);
    out->free_cached_bytes = (uint64_t)(c->stats.reserved.current - c->stats.active.current);
    out->limit_bytes = c->limit_bytes;
    cache_unlock(c);
}

static void stat_reset_peak(alloc_stat_t *s)
{
    s->peak = s->current;
}

void alloc_cache_reset_peak(alloc_cache_t *c)
{
    cache_lock(c);
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
    cache_unlock(c);
}

const char *alloc_cache_name(const alloc_cache_t *c)
{
    return c->name;
}

size_t alloc_cache_limit(const alloc_cache_t *c)
{
    return c->limit_bytes;
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
    cache_lock(c);
    size_t n = 0;
    cache_segment_t *s;
    TAILQ_FOREACH(s, &c->segments, age)
        n++;
    snap->segments = n ? calloc(n, sizeof *snap->segments) : NULL;
    if (n && !snap->segments)
        goto fail;
    TAILQ_FOREACH(s, &c->segments, age) {
        alloc_segment_info_t *si = &snap->segments[snap->n_segments++];
        si->address = (uintptr_t)s->base;
        si->size = s->size;
        si->pool = s->pool;
        si->age_seq = s->seq;
        cache_block_t *b;
        TAILQ_FOREACH(b, &s->blocks, addr)
            si->n_blocks++;
        si->blocks = calloc(si->n_blocks, sizeof *si->blocks);
        if (!si->blocks)
            goto fail;
        size_t i = 0;
        TAILQ_FOREACH(b, &s->blocks, addr) {
            alloc_block_info_t *bi = &si->blocks[i++];
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
    cache_unlock(c);
    if (snap->n_segments > 1)
        qsort(snap->segments, snap->n_segments, sizeof *snap->segments, segment_info_cmp);
    *out = snap;
    return 0;
fail:
    cache_unlock(c);
    alloc_snapshot_free(snap);
    return fs_err(FS_ENOMEM, "out of host memory for a memory snapshot");
}
