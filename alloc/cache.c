/* cache.c -- the caching allocator: best-fit over cached segments, split and
 * coalesce, the limit and the OOM ladder. Streams and fences are in
 * cache_streams.c, owners and stats in cache_info.c, the policy host in
 * cache_policies.c.
 *
 * The algorithm is PyTorch's CUDA caching allocator (c10/cuda/
 * CUDACachingAllocator.cpp), restated:
 *  1. A request is rounded up to a multiple of 512 B. Rounded sizes up to
 *     1 MiB go to the small pool, larger ones to the large pool; the pools
 *     never share a segment, so small short-lived blocks cannot pin large
 *     segments.
 *  2. The request takes the best-fitting free block of its pool: the
 *     smallest that fits, the lowest address among equals. With max_split
 *     set, a request below it never takes a block at or above it, and a
 *     request at or above it takes a block only if less than 20 MiB would be
 *     wasted (such blocks are never split).
 *  3. A block that is larger than needed is split when the remainder is at
 *     least 512 B (small pool) or more than 1 MiB (large pool); the remainder
 *     stays free.
 *  4. With no fitting block the cache takes a segment from the provider:
 *     2 MiB for small requests, 20 MiB for requests under 10 MiB, else the
 *     size rounded up to 2 MiB. Segments are only ever returned whole.
 *  5. A freed block merges with free neighbours on both sides in its
 *     segment (of its stream, or already safe for it), so a segment whose
 *     blocks are all free is usually one free block again; a segment with
 *     no allocated or pending block is released whole either way.
 *  6. The OOM ladder: when the limit or the provider refuses a segment, the
 *     cache releases every fully free segment and retries once; if the
 *     segment was larger than the request needs (a 20 MiB segment for a
 *     3 MiB block), it tries a segment of just the rounded size. Then it fails
 *     with FS_ENOMEM and a message giving requested, allocated, reserved,
 *     limit and the provider's free memory. It never aborts.
 *
 * Streams, and where this differs from PyTorch: PyTorch keeps a block on the
 * stream it was allocated for forever. Here a free block is reused at once
 * by its own stream (stream order makes that safe), and by another stream
 * once a fence recorded on its stream after it was freed has passed. Fences
 * are recorded lazily, only when an allocation on another stream misses,
 * one per stream rather than one per free, so the common path never touches
 * the device. record_stream (a block used on several streams) defers the
 * free itself until every recorded stream's fence passes, as PyTorch does.
 * A provider without fences (host) makes all of this immediate. The details
 * are in cache_streams.c.
 *
 * Guarantee: a block is never handed out while it is allocated, or while
 * work queued before its free on another stream may still be running; the
 * stats are exact at every unlock; every failure leaves the cache as it was,
 * less what the ladder released. */
#include "alloc/cache_impl.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/policy_impl.h"
#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"

/* Not static: RB_PROTOTYPE in cache_impl.h declares it for the tree's
 * functions, which cache_check.c walks with too. */
int cache_block_cmp(const cache_block_t *a, const cache_block_t *b)
{
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    if (a->ptr != b->ptr)
        return (uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : 1;
    return 0;
}

RB_GENERATE(cache_free_tree, cache_block, free_node, cache_block_cmp)

size_t cache_largest_free_locked(alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
    size_t largest = 0;
    for (int p = 0; p < ALLOC_POOL_N; p++) {
        cache_block_t *b = RB_MAX(cache_free_tree, &c->free_tree[p]);
        if (b && b->size > largest)
            largest = b->size;
    }
    return largest;
}

static const char *const release_reason_names[ALLOC_RELEASE_N] = {
    [ALLOC_RELEASE_EMPTY] = "empty",         [ALLOC_RELEASE_OOM] = "oom",
    [ALLOC_RELEASE_PERIODIC] = "periodic",   [ALLOC_RELEASE_ARENA] = "arena",
    [ALLOC_RELEASE_IDLE_TRIM] = "idle_trim", [ALLOC_RELEASE_WATERMARK] = "watermark",
    [ALLOC_RELEASE_TRIM] = "trim",           [ALLOC_RELEASE_DESTROY] = "destroy",
};

const char *alloc_release_reason_name(alloc_release_reason_t reason)
{
    if ((unsigned)reason < ALLOC_RELEASE_N)
        return release_reason_names[reason];
    return "unknown";
}

/* ---- sizes ------------------------------------------------------------- */

static size_t round_size(size_t bytes)
{
    if (bytes < ALLOC_MIN_BLOCK_BYTES)
        return ALLOC_MIN_BLOCK_BYTES;
    return ALLOC_MIN_BLOCK_BYTES * ((bytes + ALLOC_MIN_BLOCK_BYTES - 1) / ALLOC_MIN_BLOCK_BYTES);
}

static size_t round_up(size_t n, size_t unit)
{
    return unit * ((n + unit - 1) / unit);
}

static alloc_pool_t pool_of(size_t rounded)
{
    return rounded <= ALLOC_SMALL_BYTES ? ALLOC_POOL_SMALL : ALLOC_POOL_LARGE;
}

static size_t segment_size_for(size_t rounded)
{
    if (rounded <= ALLOC_SMALL_BYTES)
        return ALLOC_SMALL_SEGMENT_BYTES;
    if (rounded < ALLOC_MIN_LARGE_ALLOC_BYTES)
        return ALLOC_LARGE_SEGMENT_BYTES;
    return round_up(rounded, ALLOC_ROUND_LARGE_BYTES);
}

/* The smallest segment that can hold `rounded`: the ladder's last try. */
static size_t segment_size_tight(size_t rounded)
{
    if (rounded <= ALLOC_SMALL_BYTES)
        return ALLOC_SMALL_SEGMENT_BYTES;
    return round_up(rounded, ALLOC_ROUND_LARGE_BYTES);
}

static bool should_split(const alloc_cache_t *c, const cache_block_t *b, size_t rounded)
{
    size_t remaining = b->size - rounded;
    if (b->seg->pool == ALLOC_POOL_SMALL)
        return remaining >= ALLOC_MIN_BLOCK_BYTES;
    return b->size < c->max_split_bytes && remaining > ALLOC_SMALL_BYTES;
}

/* ---- block structs --------------------------------------------------------- */

/* A FREE block struct for [ptr, ptr + size) of `seg`, not yet linked, or
 * NULL when out of host memory. Only the fields a FREE block reads are set
 * (the struct is large and this is the split path): the tree node, the
 * list links and the hash handle are written when it enters each. */
static cache_block_t *block_new(alloc_cache_t *c, cache_segment_t *seg, char *ptr, size_t size,
                                alloc_stream_t stream, uint64_t free_seq)
{
    cache_block_t *b = SLIST_FIRST(&c->spare);
    if (b) {
        SLIST_REMOVE_HEAD(&c->spare, link);
        c->n_spare--;
    } else if (!(b = malloc(sizeof *b))) {
        return NULL;
    }
    b->seg = seg;
    b->ptr = ptr;
    b->size = size;
    b->requested = 0;
    b->stream = stream;
    b->free_seq = free_seq;
    b->owner = ALLOC_OWNER_SERVER;
    b->state = ALLOC_BLOCK_FREE;
    b->n_uses = 0;
    return b;
}

static void block_recycle(alloc_cache_t *c, cache_block_t *b)
{
    if (c->n_spare >= CACHE_SPARE_BLOCKS_MAX) {
        free(b);
        return;
    }
    SLIST_INSERT_HEAD(&c->spare, b, link);
    c->n_spare++;
}

/* ---- the free trees ----------------------------------------------------------- */

/* The best-fitting usable free block of `pool`, or NULL (see rule 2). */
static cache_block_t *find_free_locked(alloc_cache_t *c, alloc_pool_t pool, size_t rounded,
                                       alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    cache_block_t key = {.size = rounded, .ptr = NULL};
    cache_block_t *b = RB_NFIND(cache_free_tree, &c->free_tree[pool], &key);
    for (; b; b = RB_NEXT(cache_free_tree, &c->free_tree[pool], b)) {
        if (rounded < c->max_split_bytes && b->size >= c->max_split_bytes)
            return NULL;
        if (rounded >= c->max_split_bytes && b->size >= rounded + ALLOC_LARGE_SEGMENT_BYTES)
            return NULL;
        if (cache_block_usable_by_locked(c, b, stream))
            return b;
    }
    return NULL;
}

/* A whole free segment of exactly `seg_size` usable by `stream`, or NULL:
 * the only cached block an ALLOC_F_OWN_SEGMENT request takes. */
static cache_block_t *find_own_segment_locked(alloc_cache_t *c, alloc_pool_t pool,
                                              size_t seg_size, alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    cache_block_t key = {.size = seg_size, .ptr = NULL};
    cache_block_t *b = RB_NFIND(cache_free_tree, &c->free_tree[pool], &key);
    for (; b && b->size == seg_size; b = RB_NEXT(cache_free_tree, &c->free_tree[pool], b))
        if (b->size == b->seg->size && cache_block_usable_by_locked(c, b, stream))
            return b;
    return NULL;
}

/* The cached block a request takes: a whole segment of seg_size for an
 * ALLOC_F_OWN_SEGMENT one, else the best fit. NULL when there is none. */
static cache_block_t *find_for_locked(alloc_cache_t *c, alloc_pool_t pool, size_t rounded,
                                      size_t seg_size, bool own, alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    return own ? find_own_segment_locked(c, pool, seg_size, stream)
               : find_free_locked(c, pool, rounded, stream);
}

/* `b` swallows its address successor, which leaves the segment. */
static void block_absorb_next(alloc_cache_t *c, cache_block_t *b)
{
    cache_block_t *next = TAILQ_NEXT(b, addr);
    b->size += next->size;
    TAILQ_REMOVE(&b->seg->blocks, next, addr);
    block_recycle(c, next);
}

/* Whether `n`, an address neighbour of a block of `stream` becoming FREE,
 * merges with it: it is FREE and safe for that stream. */
static bool block_merges_locked(alloc_cache_t *c, const cache_block_t *n, alloc_stream_t stream)
{
    return n && n->state == ALLOC_BLOCK_FREE && cache_block_usable_by_locked(c, n, stream);
}

/* Makes `b` FREE: merges it with free neighbours of its stream and files it
 * in its pool's tree. `b` is not in the tree or the hash. */
static void block_make_free_locked(alloc_cache_t *c, cache_block_t *b)
{
    CACHE_ASSERT_LOCKED(c);
    struct cache_free_tree *tree = &c->free_tree[b->seg->pool];
    b->state = ALLOC_BLOCK_FREE;
    b->requested = 0;
    b->n_uses = 0;
    b->free_seq = ++c->free_seq;
    cache_stream_note_free_locked(c, b);
    /* A neighbour merges when it is FREE and safe for b's stream (its own,
     * or its fence passed): the merged block is b's, with b's newer
     * free_seq, so other streams wait for b's stream and thereby for both.
     * A merged neighbour may have kept apart from the one beyond it only
     * because their streams differed, hence the loops. */
    cache_block_t *n;
    while (block_merges_locked(c, n = TAILQ_PREV(b, cache_block_list, addr), b->stream)) {
        RB_REMOVE(cache_free_tree, tree, n);
        n->stream = b->stream;
        n->free_seq = b->free_seq;
        block_absorb_next(c, n);
        b = n;
    }
    while (block_merges_locked(c, n = TAILQ_NEXT(b, addr), b->stream)) {
        RB_REMOVE(cache_free_tree, tree, n);
        block_absorb_next(c, b);
    }
    RB_INSERT(cache_free_tree, tree, b);
}

void cache_block_release_locked(alloc_cache_t *c, cache_block_t *b)
{
    CACHE_ASSERT_LOCKED(c);
    HASH_DEL(c->by_ptr, b);
    b->seg->n_busy--;
    cache_stat_dec(&c->stats.active, b->size);
    block_make_free_locked(c, b);
}

/* ---- segments ----------------------------------------------------------------- */

/* All blocks FREE. Usually that is one block, but free neighbours of
 * different streams do not merge, so it may be several. */
static bool segment_fully_free(const cache_segment_t *s)
{
    return s->n_busy == 0;
}

/* Returns a fully free segment to the provider. */
static void segment_release_locked(alloc_cache_t *c, cache_segment_t *s,
                                   alloc_release_reason_t reason)
{
    CACHE_ASSERT_LOCKED(c);
    cache_block_t *b, *tmp;
    TAILQ_FOREACH_SAFE(b, &s->blocks, addr, tmp) {
        RB_REMOVE(cache_free_tree, &c->free_tree[s->pool], b);
        block_recycle(c, b);
    }
    TAILQ_REMOVE(&c->segments, s, age);
    alloc_provider_free(c->provider, s->base, s->size);
    alloc_cache_stats_t *st = &c->stats;
    cache_stat_dec(&st->reserved, s->size);
    cache_stat_dec(&st->pool_reserved[s->pool], s->size);
    cache_stat_dec(&st->segments, 1);
    st->n_device_frees++;
    st->released_bytes[reason] += s->size;
    st->released_segments[reason]++;
    free(s);
}

/* Releases fully free segments of `pool` (ALLOC_POOL_N: both), oldest
 * first, while reserved > target. Returns the bytes released. */
static size_t release_free_locked(alloc_cache_t *c, alloc_pool_t pool, size_t target,
                                  alloc_release_reason_t reason)
{
    CACHE_ASSERT_LOCKED(c);
    size_t released = 0;
    cache_segment_t *s, *newer;
    TAILQ_FOREACH_SAFE(s, &c->segments, age, newer) {
        if ((size_t)c->stats.reserved.current <= target)
            break;
        if ((pool == ALLOC_POOL_N || s->pool == pool) && segment_fully_free(s)) {
            released += s->size;
            segment_release_locked(c, s, reason);
        }
    }
    return released;
}

size_t alloc_cache_release_until_locked(alloc_cache_t *c, size_t target_reserved_bytes,
                                        alloc_release_reason_t reason)
{
    return release_free_locked(c, ALLOC_POOL_N, target_reserved_bytes, reason);
}

void alloc_cache_assert_locked(const alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
}

size_t alloc_cache_reserved_locked(const alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
    return (size_t)c->stats.reserved.current;
}

size_t alloc_cache_limit_locked(const alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
    return c->limit_bytes;
}

/* Takes a segment of `size` from the provider, within the limit, as one free
 * block for `stream` (not yet in the tree). 0 and *out, FS_ENOMEM (limit or
 * provider), or another provider error; nothing changes on error. */
static int segment_grow_locked(alloc_cache_t *c, alloc_pool_t pool, size_t size,
                               alloc_stream_t stream, cache_block_t **out)
{
    CACHE_ASSERT_LOCKED(c);
    if (size > c->limit_bytes || (size_t)c->stats.reserved.current > c->limit_bytes - size)
        return FS_ENOMEM;
    cache_segment_t *s = calloc(1, sizeof *s);
    cache_block_t *b = s ? block_new(c, s, NULL, size, stream, 0) : NULL;
    if (!s || !b) {
        free(s);
        if (b)
            block_recycle(c, b);
        return fs_err(FS_ENOMEM, "cache '%s': out of host memory for segment bookkeeping", c->name);
    }
    void *base = NULL;
    int rc = alloc_provider_alloc(c->provider, size, &base);
    if (rc != 0) {
        free(s);
        block_recycle(c, b);
        return rc;
    }
    s->base = base;
    s->size = size;
    s->pool = pool;
    s->seq = ++c->segment_seq;
    TAILQ_INIT(&s->blocks);
    TAILQ_INSERT_HEAD(&s->blocks, b, addr);
    b->ptr = base;
    TAILQ_INSERT_TAIL(&c->segments, s, age);
    alloc_cache_stats_t *st = &c->stats;
    cache_stat_inc(&st->reserved, size);
    cache_stat_inc(&st->pool_reserved[pool], size);
    cache_stat_inc(&st->segments, 1);
    st->n_device_allocs++;
    *out = b;
    return 0;
}

/* ---- create / destroy ------------------------------------------------------- */

int alloc_cache_create(alloc_provider_t *provider, const alloc_cache_config_t *config,
                       alloc_cache_t **out)
{
    alloc_cache_config_t defaults = {0};
    const alloc_cache_config_t *cfg = config ? config : &defaults;
    if (!provider || !out)
        return fs_err(FS_EINVAL, "alloc_cache_create: provider and out are required");
    if (cfg->fraction < 0.0 || cfg->fraction > 1.0)
        return fs_err(FS_EINVAL, "cache fraction %g is out of range (0, 1]", cfg->fraction);
    if (cfg->max_split_bytes && cfg->max_split_bytes <= ALLOC_SMALL_BYTES)
        return fs_err(FS_EINVAL, "cache max_split_bytes %zu must be more than %zu (1 MiB)",
                      cfg->max_split_bytes, ALLOC_SMALL_BYTES);

    size_t limit = cfg->max_reserved_bytes ? cfg->max_reserved_bytes : SIZE_MAX;
    if (cfg->fraction > 0.0) {
        size_t free_bytes = 0, total = 0;
        if (alloc_provider_mem_info(provider, &free_bytes, &total) != 0)
            return fs_err(FS_EINVAL, "cache fraction needs the total memory of '%s': %s",
                          alloc_provider_name(provider), fs_errmsg());
        size_t by_fraction = (size_t)((double)total * cfg->fraction);
        if (by_fraction < limit)
            limit = by_fraction;
    }

    alloc_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return fs_err(FS_ENOMEM, "out of host memory creating a cache");
    pthread_mutex_init(&c->lock, NULL);
    c->provider = provider;
    c->has_fences = alloc_provider_has_fences(provider);
    snprintf(c->name, sizeof c->name, "%s",
             cfg->name && cfg->name[0] ? cfg->name : alloc_provider_name(provider));
    c->limit_bytes = limit;
    c->max_split_bytes = cfg->max_split_bytes ? cfg->max_split_bytes : SIZE_MAX;
    for (int p = 0; p < ALLOC_POOL_N; p++)
        RB_INIT(&c->free_tree[p]);
    TAILQ_INIT(&c->segments);
    SLIST_INIT(&c->pending);
    SLIST_INIT(&c->spare);

    /* uthash frees its table when the last item leaves and mallocs it again
     * on the next add; a permanent NULL-keyed sentinel keeps the table, so
     * an alloc/free cycle never calls malloc. */
    int hash_oom = 0;
#undef uthash_nonfatal_oom
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
    HASH_ADD(hh, c->by_ptr, ptr, sizeof(void *), &c->sentinel);
    if (hash_oom || cache_owners_init(c) != 0) {
        alloc_cache_destroy(c);
        return fs_err(FS_ENOMEM, "out of host memory creating a cache");
    }
    *out = c;
    return 0;
}

void alloc_cache_destroy(alloc_cache_t *c)
{
    if (!c)
        return;
    cache_policies_fini(c);
    cache_lock(c);
    /* Leaked blocks: say whose, then release regardless. */
    cache_block_t *b, *tmp;
    HASH_ITER(hh, c->by_ptr, b, tmp)
    {
        if (b == &c->sentinel)
            continue;
        const char *owner = b->owner < c->n_owners ? c->owners[b->owner].name : "?";
        FS_LOG_E("alloc", "cache '%s' destroyed with a block still %s: %zu bytes of owner '%s'",
                 c->name, b->state == ALLOC_BLOCK_PENDING ? "pending" : "allocated", b->size,
                 owner);
        for (uint8_t i = 0; i < b->n_uses; i++)
            alloc_provider_fence_destroy(c->provider, b->fences[i]);
    }
    HASH_CLEAR(hh, c->by_ptr);
    cache_segment_t *s, *stmp;
    TAILQ_FOREACH_SAFE(s, &c->segments, age, stmp) {
        TAILQ_FOREACH_SAFE(b, &s->blocks, addr, tmp)
            free(b);
        alloc_provider_free(c->provider, s->base, s->size);
        free(s);
    }
    SLIST_FOREACH_SAFE(b, &c->spare, link, tmp)
        free(b);
    cache_streams_fini(c);
    cache_owners_fini(c);
    /* Not cache_unlock: nothing is left for a check to walk. */
#ifdef CACHE_LOCK_OWNER
    c->locked = false;
#endif
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- alloc / free --------------------------------------------------------------- */

/* Writes the OOM message; lock held. */
static int oom_error_locked(alloc_cache_t *c, size_t bytes, size_t rounded, size_t seg_size)
{
    CACHE_ASSERT_LOCKED(c);
    char req[32], rnd[32], seg[32], alloc[32], res[32], lim[32], dev[48];
    size_t free_bytes = 0, total = 0;
    if (alloc_provider_mem_info(c->provider, &free_bytes, &total) == 0)
        fs_format_size(free_bytes, dev, sizeof dev);
    else
        snprintf(dev, sizeof dev, "unknown");
    if (c->limit_bytes == SIZE_MAX)
        snprintf(lim, sizeof lim, "none");
    else
        fs_format_size(c->limit_bytes, lim, sizeof lim);
    fs_format_size(bytes, req, sizeof req);
    fs_format_size(rounded, rnd, sizeof rnd);
    fs_format_size(seg_size, seg, sizeof seg);
    fs_format_size((uint64_t)c->stats.allocated.current, alloc, sizeof alloc);
    fs_format_size((uint64_t)c->stats.reserved.current, res, sizeof res);
    return fs_err(FS_ENOMEM,
                  "out of memory on '%s': requested %s (%zu bytes, block %s, segment %s); "
                  "allocated %s, reserved %s, limit %s, provider free %s",
                  c->name, req, bytes, rnd, seg, alloc, res, lim, dev);
}

/* Finds or makes a free block for the request; the ladder lives here. */
static int block_obtain_locked(alloc_cache_t *c, size_t bytes, size_t rounded,
                               alloc_stream_t stream, unsigned flags, cache_block_t **out)
{
    CACHE_ASSERT_LOCKED(c);
    alloc_pool_t pool = pool_of(rounded);
    bool own = flags & ALLOC_F_OWN_SEGMENT;
    size_t seg_size = own ? segment_size_tight(rounded) : segment_size_for(rounded);
    cache_block_t *b = find_for_locked(c, pool, rounded, seg_size, own, stream);
    if (!b && c->has_fences && c->n_streams > 0 && cache_streams_poll_locked(c, stream))
        b = find_for_locked(c, pool, rounded, seg_size, own, stream);
    if (b) {
        RB_REMOVE(cache_free_tree, &c->free_tree[pool], b);
        if (b->stream != stream)
            c->stats.n_cross_stream_reuses++;
        c->stats.n_cache_hits++;
        *out = b;
        return 0;
    }

    if (flags & ALLOC_F_RELEASE_BEFORE_GROW)
        release_free_locked(c, pool, 0, ALLOC_RELEASE_ARENA);
    for (size_t i = 0; i < c->n_policies; i++)
        alloc_policy_on_before_grow_locked(c->policies[i], c, seg_size);

    int rc = segment_grow_locked(c, pool, seg_size, stream, &b);
    if (rc == FS_ENOMEM) {
        c->stats.n_retries++;
        release_free_locked(c, ALLOC_POOL_N, 0, ALLOC_RELEASE_OOM);
        rc = segment_grow_locked(c, pool, seg_size, stream, &b);
        size_t tight = segment_size_tight(rounded);
        if (rc == FS_ENOMEM && tight < seg_size) {
            seg_size = tight;
            rc = segment_grow_locked(c, pool, seg_size, stream, &b);
        }
    }
    if (rc == FS_ENOMEM) {
        c->stats.n_ooms++;
        return oom_error_locked(c, bytes, rounded, seg_size);
    }
    if (rc != 0)
        return rc;
    c->stats.n_cache_misses++;
    *out = b;
    return 0;
}

int alloc_cache_alloc_flags(alloc_cache_t *c, size_t bytes, alloc_stream_t stream,
                            alloc_owner_t owner, unsigned flags, void **out)
{
    if (bytes > SIZE_MAX / 2)
        return fs_err(FS_ENOMEM, "cache '%s': request of %zu bytes is too large", c->name, bytes);
    size_t rounded = round_size(bytes);

    cache_lock(c);
    if (owner >= c->n_owners || !c->owners[owner].in_use) {
        cache_unlock(c);
        return fs_err(FS_EINVAL, "cache '%s': unknown owner %u", c->name, owner);
    }
    if (!SLIST_EMPTY(&c->pending))
        cache_pending_process_locked(c);

    cache_block_t *b = NULL;
    int rc = block_obtain_locked(c, bytes, rounded, stream, flags, &b);
    if (rc != 0) {
        cache_unlock(c);
        if (rc == FS_ENOMEM)
            cache_policies_oom(c, bytes);
        return rc;
    }

    if (!(flags & ALLOC_F_OWN_SEGMENT) && should_split(c, b, rounded)) {
        cache_block_t *rest = block_new(c, b->seg, b->ptr + rounded, b->size - rounded,
                                        b->stream, b->free_seq);
        if (rest) {
            TAILQ_INSERT_AFTER(&b->seg->blocks, b, rest, addr);
            b->size = rounded;
            RB_INSERT(cache_free_tree, &c->free_tree[b->seg->pool], rest);
        }
        /* Without a struct for the remainder the whole block is handed out:
         * wasteful but correct, and the stats count its true size. */
    }
    /* Retagged only now: a remainder split off a block reused from another
     * stream keeps that stream, so it still merges with its neighbours. */
    b->stream = stream;

    int hash_oom = 0;
    HASH_ADD(hh, c->by_ptr, ptr, sizeof(void *), b);
    if (hash_oom) {
        block_make_free_locked(c, b);
        cache_unlock(c);
        return fs_err(FS_ENOMEM, "cache '%s': out of host memory for the block table", c->name);
    }
    b->state = ALLOC_BLOCK_ALLOCATED;
    b->requested = bytes;
    b->owner = owner;
    b->seg->n_busy++;

    alloc_cache_stats_t *st = &c->stats;
    alloc_pool_t pool = b->seg->pool;
    cache_stat_inc(&st->allocated, b->size);
    cache_stat_inc(&st->pool_allocated[pool], b->size);
    cache_stat_inc(&st->active, b->size);
    cache_stat_inc(&st->requested, bytes);
    cache_stat_inc(&st->blocks, 1);
    cache_owner_t *o = &c->owners[owner];
    cache_stat_inc(&o->allocated, b->size);
    cache_stat_inc(&o->requested, bytes);
    cache_stat_inc(&o->blocks, 1);
    *out = b->ptr;
    cache_unlock(c);
    return 0;
}

int alloc_cache_alloc(alloc_cache_t *c, size_t bytes, alloc_stream_t stream, alloc_owner_t owner,
                      void **out)
{
    return alloc_cache_alloc_flags(c, bytes, stream, owner, ALLOC_F_NONE, out);
}

cache_block_t *cache_block_lookup_locked(alloc_cache_t *c, const void *ptr)
{
    CACHE_ASSERT_LOCKED(c);
    cache_block_t *b = NULL;
    HASH_FIND(hh, c->by_ptr, &ptr, sizeof(void *), b);
    return b && b->state == ALLOC_BLOCK_ALLOCATED ? b : NULL;
}

int alloc_cache_free(alloc_cache_t *c, void *ptr)
{
    if (!ptr)
        return 0;
    cache_lock(c);
    cache_block_t *b = cache_block_lookup_locked(c, ptr);
    if (!b) {
        cache_unlock(c);
        return fs_err(FS_EINVAL, "cache '%s': free of %p, which it did not hand out or which "
                      "was already freed", c->name, ptr);
    }
    alloc_cache_stats_t *st = &c->stats;
    alloc_pool_t pool = b->seg->pool;
    cache_stat_dec(&st->allocated, b->size);
    cache_stat_dec(&st->pool_allocated[pool], b->size);
    cache_stat_dec(&st->requested, b->requested);
    cache_stat_dec(&st->blocks, 1);
    cache_owner_t *o = &c->owners[b->owner];
    cache_stat_dec(&o->allocated, b->size);
    cache_stat_dec(&o->requested, b->requested);
    cache_stat_dec(&o->blocks, 1);

    if (!cache_block_defer_locked(c, b))
        cache_block_release_locked(c, b);
    cache_unlock(c);
    return 0;
}

int alloc_cache_block_size(alloc_cache_t *c, const void *ptr, size_t *out)
{
    cache_lock(c);
    cache_block_t *b = cache_block_lookup_locked(c, ptr);
    if (b)
        *out = b->size;
    cache_unlock(c);
    if (!b)
        return fs_err(FS_EINVAL, "cache '%s': %p is not an allocated block", c->name, ptr);
    return 0;
}

bool alloc_cache_holds(alloc_cache_t *c, const void *ptr)
{
    cache_lock(c);
    bool held = cache_block_lookup_locked(c, ptr) != NULL;
    cache_unlock(c);
    return held;
}

/* ---- releasing ----------------------------------------------------------------- */

size_t alloc_cache_empty(alloc_cache_t *c, alloc_release_reason_t reason)
{
    cache_lock(c);
    if (!SLIST_EMPTY(&c->pending))
        cache_pending_process_locked(c);
    size_t released = release_free_locked(c, ALLOC_POOL_N, 0, reason);
    cache_unlock(c);
    return released;
}

size_t alloc_cache_trim(alloc_cache_t *c, size_t keep_bytes, alloc_release_reason_t reason)
{
    cache_lock(c);
    if (!SLIST_EMPTY(&c->pending))
        cache_pending_process_locked(c);
    size_t allocated = (size_t)c->stats.allocated.current;
    size_t target = keep_bytes > SIZE_MAX - allocated ? SIZE_MAX : allocated + keep_bytes;
    size_t released = release_free_locked(c, ALLOC_POOL_N, target, reason);
    cache_unlock(c);
    return released;
}
