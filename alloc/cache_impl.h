/* cache_impl.h -- the caching allocator's internal types, shared by the
 * files that implement it: cache.c (alloc, free, segments, streams, ladder)
 * and cache_info.c (owners, stats, snapshot, policy hooks).
 *
 * Types and their invariants:
 *  - cache_segment: one provider allocation. Its blocks tile it exactly, in
 *    address order (first, then next...). Segments form a list in creation
 *    order, oldest first, which trim and watermark walk.
 *  - cache_block: a slice of a segment in one of three states. FREE blocks
 *    sit in their pool's free tree (ordered by size, then address) and never
 *    have a FREE neighbour of the same stream (they coalesce on free).
 *    ALLOCATED and PENDING blocks sit in the pointer hash. PENDING blocks
 *    (freed, but recorded on other streams whose fences have not passed)
 *    are also on the pending list.
 *  - Accounting: allocated = sum of ALLOCATED block sizes; active =
 *    allocated + sum of PENDING block sizes; reserved = sum of segment
 *    sizes; per-owner bytes sum to allocated.
 *  - Everything is guarded by `lock`. */
#ifndef FS_ALLOC_CACHE_IMPL_H
#define FS_ALLOC_CACHE_IMPL_H

#include <bsd/sys/tree.h>
#include <pthread.h>

#include "alloc/cache.h"

/* uthash: pointer keys are multiples of 512, so hash the bits above and mix
 * them (Fibonacci hashing); uthash takes the low bits of hashv. */
static inline unsigned cache_ptr_hash(const void *p)
{
    return (unsigned)((((uint64_t)(uintptr_t)p >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> 32);
}
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = cache_ptr_hash(*(void *const *)(keyptr)))
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block used on more streams than this fails record_stream (FS_ENOTSUP). */
#define CACHE_BLOCK_MAX_USES 4
#define CACHE_MAX_POLICIES 8
/* Spare block structs kept for splits; above this they go back to malloc. */
#define CACHE_SPARE_BLOCKS_MAX 1024

typedef struct cache_segment cache_segment_t;
typedef struct cache_block cache_block_t;

struct cache_block {
    RB_ENTRY(cache_block) free_node; /* in the pool's free tree while FREE */
    cache_block_t *prev, *next;      /* address neighbours in the segment */
    cache_segment_t *seg;
    char *ptr;                       /* the hash key */
    size_t size;
    size_t requested;                /* caller's bytes while ALLOCATED, else 0 */
    alloc_stream_t stream;           /* the stream it was allocated for */
    uint64_t free_seq;               /* cache->free_seq when it last became FREE */
    alloc_owner_t owner;
    uint8_t state;                   /* ALLOC_BLOCK_FREE / _ALLOCATED / _PENDING */
    uint8_t n_uses;                  /* extra streams from record_stream */
    alloc_stream_t uses[CACHE_BLOCK_MAX_USES];
    void *fences[CACHE_BLOCK_MAX_USES]; /* while PENDING: one per use */
    cache_block_t *pending_next;
    UT_hash_handle hh;               /* ptr -> block while ALLOCATED or PENDING */
};

struct cache_segment {
    cache_segment_t *older, *newer;  /* creation-order list */
    cache_block_t *first;            /* lowest-address block */
    char *base;
    size_t size;
    alloc_pool_t pool;
    uint64_t seq;                    /* creation order */
    size_t n_busy;                   /* ALLOCATED + PENDING blocks */
};

RB_HEAD(cache_free_tree, cache_block);

/* Per-stream fence state, for reuse of a stream's free blocks by another
 * stream: blocks with free_seq <= done_seq are safe for any stream. */
typedef struct cache_stream {
    alloc_stream_t id;
    uint64_t last_free_seq;          /* newest free_seq of a block freed on it */
    uint64_t done_seq;
    uint64_t fence_seq;              /* what the pending fence covers */
    void *fence;                     /* pending fence, or NULL */
    bool retired;                    /* destroyed by its owner: never fenced again */
    unsigned capturing;              /* in CUDA graph capture: not fenced until it ends */
} cache_stream_t;

typedef struct cache_owner {
    bool in_use;
    char name[ALLOC_OWNER_NAME_MAX];
    alloc_stat_t allocated, requested, blocks;
} cache_owner_t;

struct alloc_cache {
    pthread_mutex_t lock;
    alloc_provider_t *provider;      /* borrowed */
    bool has_fences;                 /* provider records real fences */
    char name[64];
    size_t limit_bytes;              /* SIZE_MAX: none */
    size_t max_split_bytes;          /* SIZE_MAX: none */

    struct cache_free_tree free_tree[ALLOC_POOL_N];
    cache_block_t *by_ptr;           /* uthash head; holds `sentinel` always */
    cache_block_t sentinel;          /* key NULL: keeps uthash's table alive */
    cache_segment_t *oldest, *newest;
    uint64_t segment_seq;
    uint64_t free_seq;
    cache_block_t *pending;          /* PENDING blocks */
    cache_block_t *spare;            /* recycled block structs (via pending_next) */
    size_t n_spare;

    cache_stream_t *streams;         /* only when has_fences */
    size_t n_streams, cap_streams;

    cache_owner_t *owners;           /* [0] is the server */
    size_t n_owners;

    alloc_policy_t *policies[CACHE_MAX_POLICIES];
    size_t n_policies;
    /* Policies replaced by alloc_cache_policies_replace while hooks may still
     * run on a copy of the old list: destroyed when no hook runs. */
    size_t hooks_running;
    alloc_policy_t **retired;
    size_t n_retired;

    alloc_cache_stats_t stats;       /* largest_free/free_cached/limit filled on read */
};

/* Stat updates: an increase moves current and total and may raise the
 * peak; a decrease only moves current. Split so the hot path never
 * branches on a sign. */
static inline void cache_stat_inc(alloc_stat_t *s, uint64_t n)
{
    s->current += (int64_t)n;
    s->total += n;
    if (s->current > s->peak)
        s->peak = s->current;
}

static inline void cache_stat_dec(alloc_stat_t *s, uint64_t n)
{
    s->current -= (int64_t)n;
}

/* cache.c: the largest FREE block of either pool; lock held. */
size_t cache_largest_free_locked(alloc_cache_t *c);

/* cache_info.c: owner table setup and teardown (lock not needed: creation
 * and destruction are single-threaded by contract). */
int cache_owners_init(alloc_cache_t *c);
void cache_owners_fini(alloc_cache_t *c);
/* Destroys every attached policy. */
void cache_policies_fini(alloc_cache_t *c);
/* Runs the OOM hook of every policy; lock not held. */
void cache_policies_oom(alloc_cache_t *c, size_t requested_bytes);

#ifdef __cplusplus
}
#endif
#endif
