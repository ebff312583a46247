/* cache_impl.h -- the caching allocator's internal types, shared by the
 * files that implement it, one concept each:
 *   cache.c          the algorithm: sizes, blocks, free trees, segments,
 *                    alloc and free, the OOM ladder, empty and trim
 *   cache_streams.c  streams and fences: cross-stream reuse, record_stream,
 *                    pending blocks, retire and capture
 *   cache_info.c     owners, stats and the segment snapshot
 *   cache_policies.c the policy host: the attached list, its replacement,
 *                    and the hooks (request, tick, OOM) that fan out to it
 *   cache_batch.c    batch memory: one handle per batch
 *   cache_check.c    the invariant walker
 *
 * Types and their invariants (cache_check.c checks every one):
 *  - cache_segment: one provider allocation. Its blocks tile it exactly, in
 *    address order (the `blocks` list). Segments form a list in creation
 *    order, oldest first, which trim and watermark walk.
 *  - cache_block: a slice of a segment in one of three states. FREE blocks
 *    sit in their pool's free tree (ordered by size, then address) and never
 *    have a FREE neighbour of the same stream (they coalesce on free).
 *    ALLOCATED and PENDING blocks sit in the pointer hash. PENDING blocks
 *    (freed, but recorded on other streams whose fences have not passed)
 *    are also on the pending list. A segment's n_busy counts its ALLOCATED
 *    and PENDING blocks.
 *  - Accounting: allocated = sum of ALLOCATED block sizes; active =
 *    allocated + sum of PENDING block sizes; reserved = sum of segment
 *    sizes; per-owner bytes sum to allocated.
 *  - Everything is guarded by `lock`; functions that need it held end in
 *    _locked and assert it (CACHE_ASSERT_LOCKED). */
#ifndef FS_ALLOC_CACHE_IMPL_H
#define FS_ALLOC_CACHE_IMPL_H

#include <assert.h>
#include <bsd/sys/queue.h>
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

/* The lock's holder is recorded wherever assert() is live, so every
 * _locked function can assert it; NDEBUG compiles both out. */
#ifndef NDEBUG
#define CACHE_LOCK_OWNER 1
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
    TAILQ_ENTRY(cache_block) addr;   /* address neighbours in the segment */
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
    SLIST_ENTRY(cache_block) link;   /* the pending list while PENDING, the spares while spare */
    UT_hash_handle hh;               /* ptr -> block while ALLOCATED or PENDING */
};

TAILQ_HEAD(cache_block_list, cache_block);
SLIST_HEAD(cache_block_slist, cache_block);

struct cache_segment {
    TAILQ_ENTRY(cache_segment) age;  /* creation-order list */
    struct cache_block_list blocks;  /* in address order; they tile the segment */
    char *base;
    size_t size;
    alloc_pool_t pool;
    uint64_t seq;                    /* creation order */
    size_t n_busy;                   /* ALLOCATED + PENDING blocks */
};

TAILQ_HEAD(cache_segment_list, cache_segment);
RB_HEAD(cache_free_tree, cache_block);
/* Generated in cache.c: ordered by size, then address. */
int cache_block_cmp(const cache_block_t *a, const cache_block_t *b);
RB_PROTOTYPE(cache_free_tree, cache_block, free_node, cache_block_cmp)

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
#ifdef CACHE_LOCK_OWNER
    bool locked;                     /* written by the holder only */
    pthread_t locked_by;             /* meaningful while locked */
#endif
    alloc_provider_t *provider;      /* borrowed */
    bool has_fences;                 /* provider records real fences */
    char name[64];
    size_t limit_bytes;              /* SIZE_MAX: none */
    size_t max_split_bytes;          /* SIZE_MAX: none */

    struct cache_free_tree free_tree[ALLOC_POOL_N];
    cache_block_t *by_ptr;           /* uthash head; holds `sentinel` always */
    cache_block_t sentinel;          /* key NULL: keeps uthash's table alive */
    struct cache_segment_list segments; /* oldest first */
    uint64_t segment_seq;
    uint64_t free_seq;
    struct cache_block_slist pending;   /* PENDING blocks */
    struct cache_block_slist spare;     /* recycled block structs */
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

/* ---- the lock --------------------------------------------------------------- */

static inline void cache_lock(alloc_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
#ifdef CACHE_LOCK_OWNER
    c->locked_by = pthread_self();
    c->locked = true;
#endif
}

#ifdef ALLOC_CHECK_INVARIANTS
void cache_check_or_abort_locked(alloc_cache_t *c);
#endif

/* Every unlock is a point where the stats are exact (cache.c's guarantee),
 * so check builds walk the invariants there. */
static inline void cache_unlock(alloc_cache_t *c)
{
#ifdef ALLOC_CHECK_INVARIANTS
    cache_check_or_abort_locked(c);
#endif
#ifdef CACHE_LOCK_OWNER
    c->locked = false;
#endif
    pthread_mutex_unlock(&c->lock);
}

/* Asserts the calling thread holds c's lock. A thread that does not hold it
 * reads `locked` racily, which can only make the assertion fail, never
 * pass wrongly: only the holder writes true with its own id. */
#ifdef CACHE_LOCK_OWNER
#define CACHE_ASSERT_LOCKED(c)                                                                     \
    assert((c)->locked && pthread_equal((c)->locked_by, pthread_self()) && "cache lock held")
#else
#define CACHE_ASSERT_LOCKED(c) ((void)(c))
#endif

/* ---- cache.c ------------------------------------------------------------------ */

/* The largest FREE block of either pool. */
size_t cache_largest_free_locked(alloc_cache_t *c);
/* The ALLOCATED block at `ptr`, or NULL. */
cache_block_t *cache_block_lookup_locked(alloc_cache_t *c, const void *ptr);
/* An ALLOCATED or PENDING block's bytes are done: it leaves the hash and
 * the active count and becomes FREE, merged with its free neighbours. */
void cache_block_release_locked(alloc_cache_t *c, cache_block_t *b);

/* ---- cache_streams.c ------------------------------------------------------ */

/* Whether FREE block `b` is safe for `stream` through its stream's fence. */
bool cache_stream_block_ready_locked(alloc_cache_t *c, const cache_block_t *b);

/* Whether a FREE block may serve an allocation on `stream`: its own stream
 * (stream order makes that safe), any stream without fences, or another
 * stream once the block's stream fence passed. Inline: the best-fit scan
 * calls it for every candidate. */
static inline bool cache_block_usable_by_locked(alloc_cache_t *c, const cache_block_t *b,
                                                alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    return b->stream == stream || !c->has_fences || cache_stream_block_ready_locked(c, b);
}

/* `b` just became FREE with a new free_seq: its stream has bytes a fence
 * must cover before other streams may take them. */
void cache_stream_note_free_locked(alloc_cache_t *c, const cache_block_t *b);
/* After a miss on `stream`: learns which fences passed and records one on
 * every other stream with frees since its last. Returns whether any
 * stream's done_seq moved (a retry may now find a block). */
bool cache_streams_poll_locked(alloc_cache_t *c, alloc_stream_t stream);
/* At free: records a fence on every extra stream of `b` (record_stream).
 * Returns true when `b` is now PENDING on the pending list, false when no
 * fence is outstanding and the caller releases it now. */
bool cache_block_defer_locked(alloc_cache_t *c, cache_block_t *b);
/* Moves PENDING blocks whose fences all passed back to the free pools. */
void cache_pending_process_locked(alloc_cache_t *c);
/* Destroys every stream's pending fence and the stream table (destroy). */
void cache_streams_fini(alloc_cache_t *c);

/* ---- cache_info.c ------------------------------------------------------------ */

/* Owner table setup and teardown (lock not needed: creation and
 * destruction are single-threaded by contract). */
int cache_owners_init(alloc_cache_t *c);
void cache_owners_fini(alloc_cache_t *c);

/* ---- cache_policies.c ----------------------------------------------------- */

/* Destroys every attached and retired policy (destroy). */
void cache_policies_fini(alloc_cache_t *c);
/* Runs the OOM hook of every policy; lock not held. */
void cache_policies_oom(alloc_cache_t *c, size_t requested_bytes);
/* Copies the attached list into `out` (CACHE_MAX_POLICIES entries) for a
 * hook to run on unlocked, and returns its length; the copy stays valid
 * until cache_policies_unhold. */
size_t cache_policies_hold(alloc_cache_t *c, alloc_policy_t **out);
void cache_policies_unhold(alloc_cache_t *c);

#ifdef __cplusplus
}
#endif
#endif
