/* cache.h -- the caching allocator: flatserve's one way to get device (or
 * host) memory, with exact accounting and pluggable release policies.
 *
 * The algorithm is PyTorch's CUDA caching allocator, restated in cache.c's
 * header, with four additions: owner tags with exact per-owner bytes,
 * cross-stream reuse through lazily recorded fences (cache_streams.c),
 * release policies that run inside the allocator (watermark) or on hooks
 * the server calls (request begin/end, a timer tick; cache_policies.c), and
 * batch memory as one handle per batch (an arena, or one block when no
 * arena policy is attached; cache_batch.c). alloc_cache_check walks every
 * invariant (cache_check.c); check builds (ALLOC_CHECK_INVARIANTS, on under
 * SANITIZE=1) run it at every unlock.
 *
 * Units: every size is in bytes; stats count rounded block sizes except
 * `requested`, which counts what callers asked for.
 *
 * Threading: an alloc_cache_t is internally locked; every function may be
 * called from any thread. Hooks run policies outside the lock except the
 * watermark check, which runs inside alloc before the cache grows. An
 * alloc_batch_t belongs to the thread that runs its batch. */
#ifndef FS_ALLOC_CACHE_H
#define FS_ALLOC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/provider.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct alloc_cache alloc_cache_t;
typedef struct alloc_policy alloc_policy_t;
typedef struct alloc_arena alloc_arena_t;

/* An owner tag: 0 is the server itself and always exists; others come from
 * alloc_cache_owner_create. */
typedef uint32_t alloc_owner_t;
#define ALLOC_OWNER_SERVER 0u
#define ALLOC_OWNER_NAME_MAX 64

/* Size constants of the algorithm (PyTorch's values). */
#define ALLOC_MIN_BLOCK_BYTES ((size_t)512)               /* rounding unit */
#define ALLOC_SMALL_BYTES ((size_t)1 << 20)               /* small pool: <= 1 MiB */
#define ALLOC_SMALL_SEGMENT_BYTES ((size_t)2 << 20)       /* small pool segment */
#define ALLOC_MIN_LARGE_ALLOC_BYTES ((size_t)10 << 20)    /* below: 20 MiB segments */
#define ALLOC_LARGE_SEGMENT_BYTES ((size_t)20 << 20)      /* 1..10 MiB requests */
#define ALLOC_ROUND_LARGE_BYTES ((size_t)2 << 20)         /* >= 10 MiB: round to 2 MiB */

typedef enum alloc_pool {
    ALLOC_POOL_SMALL = 0,
    ALLOC_POOL_LARGE = 1,
    ALLOC_POOL_N
} alloc_pool_t;

/* Why bytes went back to the provider; one counter each in the stats. */
typedef enum alloc_release_reason {
    ALLOC_RELEASE_EMPTY = 0,  /* alloc_cache_empty called directly (API) */
    ALLOC_RELEASE_OOM,        /* the OOM ladder */
    ALLOC_RELEASE_PERIODIC,   /* policy "periodic" */
    ALLOC_RELEASE_ARENA,      /* policy "arena": free segments dropped before growing */
    ALLOC_RELEASE_IDLE_TRIM,  /* policy "idle_trim" */
    ALLOC_RELEASE_WATERMARK,  /* policy "watermark" */
    ALLOC_RELEASE_TRIM,       /* alloc_cache_trim called directly (API) */
    ALLOC_RELEASE_DESTROY,    /* alloc_cache_destroy */
    ALLOC_RELEASE_N
} alloc_release_reason_t;

/* "empty", "oom", "periodic", ... Never NULL. */
const char *alloc_release_reason_name(alloc_release_reason_t reason);

typedef struct alloc_cache_config {
    const char *name;         /* for logs and metrics, e.g. "cuda:0"; copied */
    /* The hard limit on reserved bytes is the smaller of these that are set;
     * neither set means the provider's own capacity is the only limit. */
    size_t max_reserved_bytes; /* 0: unset */
    double fraction;           /* of the provider's total memory, (0, 1]; 0: unset */
    /* Blocks of at least this size are never split, and a request of at
     * least this size reuses a cached block only if it wastes less than
     * ALLOC_LARGE_SEGMENT_BYTES. 0 means unlimited (SIZE_MAX). Must be more
     * than ALLOC_SMALL_BYTES when set. */
    size_t max_split_bytes;
} alloc_cache_config_t;

/* A {current, peak, total} triple: `total` adds every increase. */
typedef struct alloc_stat {
    int64_t current;
    int64_t peak;
    uint64_t total;
} alloc_stat_t;

typedef struct alloc_cache_stats {
    alloc_stat_t allocated;   /* bytes in blocks handed out (rounded) */
    alloc_stat_t reserved;    /* bytes in segments taken from the provider */
    alloc_stat_t active;      /* allocated + freed blocks still waiting on a stream fence */
    alloc_stat_t requested;   /* bytes callers asked for, before rounding */
    alloc_stat_t segments;    /* number of segments */
    alloc_stat_t blocks;      /* number of blocks handed out */
    alloc_stat_t pool_allocated[ALLOC_POOL_N];
    alloc_stat_t pool_reserved[ALLOC_POOL_N];
    uint64_t n_device_allocs;  /* successful provider allocs */
    uint64_t n_device_frees;   /* provider frees */
    uint64_t n_cache_hits;     /* allocs served from cached blocks */
    uint64_t n_cache_misses;   /* allocs that needed a new segment */
    uint64_t n_retries;        /* allocs that released cache and retried */
    uint64_t n_ooms;           /* allocs that failed with FS_ENOMEM */
    uint64_t n_cross_stream_reuses; /* blocks reused by another stream after its fence */
    uint64_t released_bytes[ALLOC_RELEASE_N];
    uint64_t released_segments[ALLOC_RELEASE_N];
    uint64_t largest_free_bytes; /* largest cached free block now */
    uint64_t free_cached_bytes;  /* reserved - active: what empty could release at most */
    uint64_t limit_bytes;        /* the hard limit (SIZE_MAX when none) */
} alloc_cache_stats_t;

typedef struct alloc_owner_stats {
    char name[ALLOC_OWNER_NAME_MAX];
    alloc_stat_t allocated;   /* rounded bytes */
    alloc_stat_t requested;
    alloc_stat_t blocks;
} alloc_owner_stats_t;

/* Creates a cache over `provider` (borrowed: it must outlive the cache).
 * `config` may be NULL for defaults. 0 and *out, or FS_EINVAL naming the bad
 * field, or FS_ENOMEM. Caller frees with alloc_cache_destroy. */
int alloc_cache_create(alloc_provider_t *provider, const alloc_cache_config_t *config,
                       alloc_cache_t **out);

/* Releases every segment and destroys attached policies. Blocks still
 * allocated are logged as leaks (owner, size) and their segments released
 * regardless. NULL is a no-op. */
void alloc_cache_destroy(alloc_cache_t *c);

/* Allocation flags. */
#define ALLOC_F_NONE 0u
/* Before taking a new segment, release the fully free segments of the pool
 * this request goes to (reason ARENA): for callers whose allocations are
 * one big block per batch, where cached smaller segments are only waste. */
#define ALLOC_F_RELEASE_BEFORE_GROW 1u
/* A long-lived block (a library workspace held for a model's life): it
 * gets a segment of its own, the tightest that holds it (a whole 2 MiB
 * segment in the small pool, its size rounded to 2 MiB in the large), and
 * is never split off a segment other blocks share. A 1..10 MiB request
 * otherwise takes a 20 MiB segment whose rest serves short-lived blocks;
 * the long-lived one then pins that segment, and no trim or empty can give
 * it back while the model lives. A free segment of exactly that size is
 * reused; any other is not. */
#define ALLOC_F_OWN_SEGMENT 2u

/* Allocates `bytes` for work on `stream`, counted to `owner`. Returns 0 and
 * *out, or: FS_ENOMEM after the OOM ladder (message: requested, allocated,
 * reserved, limit, device free), FS_EINVAL for an unknown owner, FS_EDEVICE
 * for a provider error. Nothing changes on error but the OOM counters and
 * what the ladder released. `bytes` 0 is served as the minimum block. */
int alloc_cache_alloc(alloc_cache_t *c, size_t bytes, alloc_stream_t stream, alloc_owner_t owner,
                      void **out);
int alloc_cache_alloc_flags(alloc_cache_t *c, size_t bytes, alloc_stream_t stream,
                            alloc_owner_t owner, unsigned flags, void **out);

/* Frees a block from alloc_cache_alloc. FS_EINVAL with a message for a
 * pointer this cache did not hand out (or freed twice); nothing changes
 * then. NULL is a no-op returning 0. */
int alloc_cache_free(alloc_cache_t *c, void *ptr);

/* Marks the block at `ptr` as used by work on `stream` too: when freed, it
 * is reused only after that stream's work queued so far has finished.
 * FS_EINVAL for an unknown pointer. */
int alloc_cache_record_stream(alloc_cache_t *c, void *ptr, alloc_stream_t stream);
/* Forgets `stream` before its owner destroys it: the caller has
 * synchronised it, so every block freed on it is safe for any stream, no
 * fence is ever recorded on it again, and blocks still allocated on it
 * count as the default stream's. A later stream with the same handle is a
 * new stream. Cannot fail; a no-op without fences. */
int alloc_cache_stream_retire(alloc_cache_t *c, alloc_stream_t stream);
/* Marks `stream` as under CUDA graph capture (true) or not any more (false;
 * the calls nest). While it is, the cache records no fence on it: an event
 * recorded into a capturing stream from another thread joins the capture,
 * is no fence, and on the GPU has crashed cuEventRecord. Blocks freed on it
 * wait for their fence until the capture ends. 0, or FS_ENOMEM. */
int alloc_cache_stream_capture(alloc_cache_t *c, alloc_stream_t stream, bool capturing);

/* Size of the block at `ptr` (rounded) into *out. FS_EINVAL if unknown. */
int alloc_cache_block_size(alloc_cache_t *c, const void *ptr, size_t *out);
/* Whether `ptr` is the start of a block the cache has handed out and not
 * taken back (a question, not an error: nothing is logged or set). */
bool alloc_cache_holds(alloc_cache_t *c, const void *ptr);

/* Releases every fully free segment to the provider, counted under
 * `reason`. Returns the bytes released. */
size_t alloc_cache_empty(alloc_cache_t *c, alloc_release_reason_t reason);

/* Releases fully free segments, oldest first, until reserved - allocated
 * <= keep_bytes or none is left. Returns the bytes released. */
size_t alloc_cache_trim(alloc_cache_t *c, size_t keep_bytes, alloc_release_reason_t reason);

/* Polls pending fences, moving blocks whose streams finished back into the
 * pools. alloc does this on its own; policies call it on ticks. */
void alloc_cache_process_fences(alloc_cache_t *c);

/* Walks every invariant of the cache under its lock: every segment tiled
 * exactly by its blocks (no gap, no overlap, sizes summing to the segment),
 * allocated = sum of ALLOCATED blocks, active = allocated + PENDING, the
 * owners' bytes summing to allocated, the free trees holding exactly the
 * FREE blocks, the hash exactly the ALLOCATED and PENDING ones. 0, or
 * FS_ESTATE with a message naming the first broken invariant. Changes
 * nothing. */
int alloc_cache_check(alloc_cache_t *c);

/* Stats. */
void alloc_cache_stats(alloc_cache_t *c, alloc_cache_stats_t *out);
/* Sets every peak to its current value. */
void alloc_cache_reset_peak(alloc_cache_t *c);
const char *alloc_cache_name(const alloc_cache_t *c);
alloc_provider_t *alloc_cache_provider(const alloc_cache_t *c);
/* The hard limit on reserved bytes (SIZE_MAX when none); fixed at creation,
 * so it needs no lock. Cannot fail. */
size_t alloc_cache_limit(const alloc_cache_t *c);

/* Owners. create: 0 and *out, or FS_ENOMEM. The name is copied (truncated
 * to ALLOC_OWNER_NAME_MAX - 1). destroy: FS_EBUSY with a message naming the
 * owner and its live bytes if it still holds any (it then stays);
 * FS_EINVAL for an unknown owner or the server owner. */
int alloc_cache_owner_create(alloc_cache_t *c, const char *name, alloc_owner_t *out);
int alloc_cache_owner_destroy(alloc_cache_t *c, alloc_owner_t owner);
/* 0 and *out, or FS_EINVAL for an unknown owner. */
int alloc_cache_owner_stats(alloc_cache_t *c, alloc_owner_t owner, alloc_owner_stats_t *out);

/* A snapshot of every segment and its blocks in address order, for
 * /v1/memory. Offsets are from the segment base. */
typedef struct alloc_block_info {
    size_t offset;
    size_t size;
    size_t requested;         /* 0 for free blocks */
    alloc_stream_t stream;
    alloc_owner_t owner;      /* meaningful when allocated */
    uint8_t state;            /* ALLOC_BLOCK_FREE / _ALLOCATED / _PENDING */
} alloc_block_info_t;
#define ALLOC_BLOCK_FREE 0
#define ALLOC_BLOCK_ALLOCATED 1
#define ALLOC_BLOCK_PENDING 2 /* freed, waiting on a stream fence */

typedef struct alloc_segment_info {
    uintptr_t address;
    size_t size;
    size_t allocated_bytes;
    alloc_pool_t pool;
    uint64_t age_seq;         /* creation order: smaller is older */
    size_t n_blocks;
    alloc_block_info_t *blocks; /* n_blocks entries */
} alloc_segment_info_t;

typedef struct alloc_snapshot {
    size_t n_segments;
    alloc_segment_info_t *segments;
} alloc_snapshot_t;

/* 0 and *out (caller frees with alloc_snapshot_free), or FS_ENOMEM. */
int alloc_cache_snapshot(alloc_cache_t *c, alloc_snapshot_t **out);
void alloc_snapshot_free(alloc_snapshot_t *s);

/* Release policies attached to this cache (see policy.h). On success the
 * cache takes `policy`: it is destroyed with the cache. FS_EINVAL if a
 * second policy of a kind that allows only one (arena) is added, or more
 * than 8; the caller then still owns `policy`. */
int alloc_cache_policy_add(alloc_cache_t *c, alloc_policy_t *policy);
/* Replaces the whole list at once (SIGHUP): on success the cache takes the
 * new policies and the old ones are destroyed as soon as no hook is running
 * on them; an arena handed out by the old arena policy still goes back at
 * its batch end. FS_EINVAL (more than 8, two arena policies) leaves the old
 * list and the caller keeps `policies`; FS_ENOMEM likewise. */
int alloc_cache_policies_replace(alloc_cache_t *c, alloc_policy_t *const *policies, size_t n);
size_t alloc_cache_policy_count(alloc_cache_t *c);
/* The attached policy at `index` (borrowed), or NULL. */
alloc_policy_t *alloc_cache_policy_get(alloc_cache_t *c, size_t index);

/* Hooks the server calls; each fans out to the attached policies in the
 * order they were added. */
void alloc_cache_request_begin(alloc_cache_t *c);
void alloc_cache_request_end(alloc_cache_t *c);
/* Batch memory: one handle per batch, whatever the policies, so the caller
 * has one path: begin, use alloc_batch_ptr's block, end. */
typedef struct alloc_batch alloc_batch_t;
/* Every batch block is aligned to this (cudaMalloc's own alignment). */
#define ALLOC_BATCH_ALIGN ((size_t)256)
/* Begins a batch needing `plan_bytes` of activations on `stream`, counted
 * to `owner`. Its block is cut from an arena of at least plan_bytes when an
 * arena policy is attached, else it is one cache block of plan_bytes; either
 * way alloc_batch_ptr(*out) has at least plan_bytes (0: a minimum block),
 * aligned to ALLOC_BATCH_ALIGN. 0 and *out (the caller ends it with
 * alloc_cache_batch_end), or the errors of alloc_cache_alloc, or FS_ENOMEM
 * for the handle; nothing is held on error. */
int alloc_cache_batch_begin(alloc_cache_t *c, size_t plan_bytes, alloc_stream_t stream,
                            alloc_owner_t owner, alloc_batch_t **out);
/* The batch's block: borrowed, valid until alloc_cache_batch_end. */
void *alloc_batch_ptr(const alloc_batch_t *b);
/* The arena the block was cut from (borrowed, as long as the block), for a
 * caller that bump-allocates past its plan or reads arena stats; NULL when
 * the batch is one plain block. */
alloc_arena_t *alloc_batch_arena(const alloc_batch_t *b);
/* Ends a batch begun on `c`: `batch` (taken) and its memory go back to the
 * cache. NULL is a no-op. */
void alloc_cache_batch_end(alloc_cache_t *c, alloc_batch_t *batch);
/* A timer tick: time-driven policies (periodic, idle_trim, watermark)
 * decide here, reading fs_clock_now_ns(). */
void alloc_cache_tick(alloc_cache_t *c);

#ifdef __cplusplus
}
#endif
#endif
