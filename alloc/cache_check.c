/* cache_check.c -- the caching allocator's invariant walker: recomputes
 * every count the cache keeps from its structures and compares.
 *
 * The invariants are those listed at the top of cache_impl.h. One walk
 * visits every segment and block once (O(blocks), plus a tree and a hash
 * lookup per block), so tests call it after each step, and check builds
 * (ALLOC_CHECK_INVARIANTS) at every unlock, where a violation is a broken
 * invariant and aborts with the message. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc/cache_impl.h"
#include "common/error.h"
#include "common/log.h"

/* What the walk adds up, to compare with what the cache keeps. */
typedef struct check_sums {
    uint64_t reserved, pool_reserved[ALLOC_POOL_N];
    uint64_t allocated, pool_allocated[ALLOC_POOL_N];
    uint64_t requested, pending, n_segments, n_allocated, n_pending;
    uint64_t n_free[ALLOC_POOL_N];
} check_sums_t;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return fs_err(FS_ESTATE, __VA_ARGS__);                                                 \
    } while (0)

/* One block of segment `s` at the walk's `offset`. */
static int check_block_locked(alloc_cache_t *c, const cache_segment_t *s, cache_block_t *b,
                              size_t offset, check_sums_t *sum)
{
    CHECK(b->seg == s, "cache '%s': block %p of segment %p names segment %p", c->name,
          (void *)b->ptr, (void *)s->base, (void *)b->seg->base);
    CHECK(b->ptr == s->base + offset, "cache '%s': segment %p is not tiled: a block at offset %zu "
          "where the previous one ends at %zu (a gap or an overlap)", c->name, (void *)s->base,
          (size_t)(b->ptr - s->base), offset);
    CHECK(b->size > 0 && b->size % ALLOC_MIN_BLOCK_BYTES == 0 && b->size <= s->size - offset,
          "cache '%s': block %p has size %zu: not a positive multiple of %zu within its segment",
          c->name, (void *)b->ptr, b->size, ALLOC_MIN_BLOCK_BYTES);
    cache_block_t *found = NULL;
    if (b->state == ALLOC_BLOCK_FREE) {
        CHECK(RB_FIND(cache_free_tree, &c->free_tree[s->pool], b) == b,
              "cache '%s': FREE block %p (%zu bytes) is not in its pool's free tree", c->name,
              (void *)b->ptr, b->size);
        HASH_FIND(hh, c->by_ptr, &b->ptr, sizeof(void *), found);
        CHECK(found != b, "cache '%s': FREE block %p is still in the pointer hash", c->name,
              (void *)b->ptr);
        cache_block_t *next = TAILQ_NEXT(b, addr);
        CHECK(!next || next->state != ALLOC_BLOCK_FREE || next->stream != b->stream,
              "cache '%s': FREE blocks %p and %p of one stream are neighbours, not merged",
              c->name, (void *)b->ptr, (void *)next->ptr);
        sum->n_free[s->pool]++;
        return 0;
    }
    CHECK(b->state == ALLOC_BLOCK_ALLOCATED || b->state == ALLOC_BLOCK_PENDING,
          "cache '%s': block %p has state %u", c->name, (void *)b->ptr, (unsigned)b->state);
    HASH_FIND(hh, c->by_ptr, &b->ptr, sizeof(void *), found);
    CHECK(found == b, "cache '%s': %s block %p is not in the pointer hash", c->name,
          b->state == ALLOC_BLOCK_PENDING ? "PENDING" : "ALLOCATED", (void *)b->ptr);
    if (b->state == ALLOC_BLOCK_PENDING) {
        sum->pending += b->size;
        sum->n_pending++;
        return 0;
    }
    CHECK(b->owner < c->n_owners && c->owners[b->owner].in_use,
          "cache '%s': block %p belongs to owner %u, which does not exist", c->name,
          (void *)b->ptr, b->owner);
    sum->allocated += b->size;
    sum->pool_allocated[s->pool] += b->size;
    sum->requested += b->requested;
    sum->n_allocated++;
    return 0;
}

/* One segment: its blocks tile it and n_busy counts the busy ones. */
static int check_segment_locked(alloc_cache_t *c, const cache_segment_t *s, check_sums_t *sum)
{
    size_t offset = 0, n_busy = 0;
    cache_block_t *b;
    TAILQ_FOREACH(b, &s->blocks, addr) {
        int rc = check_block_locked(c, s, b, offset, sum);
        if (rc != 0)
            return rc;
        offset += b->size;
        n_busy += b->state != ALLOC_BLOCK_FREE;
    }
    CHECK(offset == s->size, "cache '%s': the blocks of segment %p sum to %zu bytes, the "
          "segment has %zu", c->name, (void *)s->base, offset, s->size);
    CHECK(n_busy == s->n_busy, "cache '%s': segment %p counts %zu busy blocks and holds %zu",
          c->name, (void *)s->base, s->n_busy, n_busy);
    sum->reserved += s->size;
    sum->pool_reserved[s->pool] += s->size;
    sum->n_segments++;
    return 0;
}

/* A kept stat against the walk's sum. */
static int check_stat(const alloc_cache_t *c, const char *what, int64_t kept, uint64_t walked)
{
    CHECK(kept >= 0 && (uint64_t)kept == walked, "cache '%s': %s is %lld, its blocks say %llu",
          c->name, what, (long long)kept, (unsigned long long)walked);
    return 0;
}

/* The counts and memberships the walk cannot see block by block. */
static int check_totals_locked(alloc_cache_t *c, const check_sums_t *sum)
{
    const alloc_cache_stats_t *st = &c->stats;
    int rc = 0;
    char what[48];
    for (int p = 0; p < ALLOC_POOL_N && rc == 0; p++) {
        snprintf(what, sizeof what, "reserved of pool %d", p);
        rc = check_stat(c, what, st->pool_reserved[p].current, sum->pool_reserved[p]);
        snprintf(what, sizeof what, "allocated of pool %d", p);
        if (rc == 0)
            rc = check_stat(c, what, st->pool_allocated[p].current, sum->pool_allocated[p]);
        size_t n_tree = 0;
        cache_block_t *b;
        RB_FOREACH(b, cache_free_tree, &c->free_tree[p])
            n_tree++;
        if (rc == 0 && n_tree != sum->n_free[p])
            rc = fs_err(FS_ESTATE, "cache '%s': the free tree of pool %d holds %zu blocks, its "
                        "segments %llu FREE ones", c->name, p, n_tree,
                        (unsigned long long)sum->n_free[p]);
    }
    if (rc == 0)
        rc = check_stat(c, "reserved", st->reserved.current, sum->reserved);
    if (rc == 0)
        rc = check_stat(c, "segments", st->segments.current, sum->n_segments);
    if (rc == 0)
        rc = check_stat(c, "allocated", st->allocated.current, sum->allocated);
    if (rc == 0)
        rc = check_stat(c, "requested", st->requested.current, sum->requested);
    if (rc == 0)
        rc = check_stat(c, "blocks", st->blocks.current, sum->n_allocated);
    if (rc == 0)
        rc = check_stat(c, "active (allocated + pending)", st->active.current,
                        sum->allocated + sum->pending);
    return rc;
}

/* The owners' sums against the cache's, and the pending list against the
 * PENDING blocks. */
static int check_owners_pending_locked(alloc_cache_t *c, const check_sums_t *sum)
{
    int64_t bytes = 0, requested = 0, blocks = 0;
    for (size_t i = 0; i < c->n_owners; i++) {
        const cache_owner_t *o = &c->owners[i];
        CHECK(o->in_use || o->allocated.current == 0, "cache '%s': destroyed owner %zu still "
              "holds %lld bytes", c->name, i, (long long)o->allocated.current);
        bytes += o->allocated.current;
        requested += o->requested.current;
        blocks += o->blocks.current;
    }
    int rc = check_stat(c, "the owners' allocated bytes summed", bytes, sum->allocated);
    if (rc == 0)
        rc = check_stat(c, "the owners' requested bytes summed", requested, sum->requested);
    if (rc == 0)
        rc = check_stat(c, "the owners' blocks summed", blocks, sum->n_allocated);
    if (rc != 0)
        return rc;
    uint64_t n_listed = 0;
    cache_block_t *b;
    SLIST_FOREACH(b, &c->pending, link) {
        CHECK(b->state == ALLOC_BLOCK_PENDING, "cache '%s': block %p is on the pending list "
              "with state %u", c->name, (void *)b->ptr, (unsigned)b->state);
        n_listed++;
    }
    CHECK(n_listed == sum->n_pending, "cache '%s': the pending list holds %llu blocks, the "
          "segments %llu PENDING ones", c->name, (unsigned long long)n_listed,
          (unsigned long long)sum->n_pending);
    size_t n_spare = 0;
    SLIST_FOREACH(b, &c->spare, link)
        n_spare++;
    CHECK(n_spare == c->n_spare && n_spare <= CACHE_SPARE_BLOCKS_MAX, "cache '%s': the spare "
          "list holds %zu block structs and counts %zu", c->name, n_spare, c->n_spare);
    /* The sentinel plus every ALLOCATED and PENDING block: with each of
     * those found in the hash above, nothing else is in it. */
    unsigned n_hashed = HASH_COUNT(c->by_ptr);
    CHECK(n_hashed == 1 + sum->n_allocated + sum->n_pending, "cache '%s': the pointer hash "
          "holds %u entries, expected 1 + %llu allocated + %llu pending", c->name, n_hashed,
          (unsigned long long)sum->n_allocated, (unsigned long long)sum->n_pending);
    return 0;
}

static int cache_check_locked(alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
    check_sums_t sum = {0};
    uint64_t seq = 0;
    const cache_segment_t *s;
    TAILQ_FOREACH(s, &c->segments, age) {
        CHECK(s->seq > seq, "cache '%s': segment %p (age %llu) is not in creation order",
              c->name, (void *)s->base, (unsigned long long)s->seq);
        seq = s->seq;
        int rc = check_segment_locked(c, s, &sum);
        if (rc != 0)
            return rc;
    }
    int rc = check_totals_locked(c, &sum);
    if (rc == 0)
        rc = check_owners_pending_locked(c, &sum);
    return rc;
}

int alloc_cache_check(alloc_cache_t *c)
{
    cache_lock(c);
    int rc = cache_check_locked(c);
#ifdef CACHE_LOCK_OWNER
    c->locked = false;
#endif
    /* Not cache_unlock: in a check build that would walk again and abort
     * where this function is to report. */
    pthread_mutex_unlock(&c->lock);
    return rc;
}

#ifdef ALLOC_CHECK_INVARIANTS
void cache_check_or_abort_locked(alloc_cache_t *c)
{
    if (cache_check_locked(c) == 0)
        return;
    FS_LOG_E("alloc", "broken invariant: %s", fs_errmsg());
    fprintf(stderr, "alloc: broken invariant: %s\n", fs_errmsg());
    abort();
}
#endif
