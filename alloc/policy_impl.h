/* policy_impl.h -- the policy function table, and the few cache internals
 * policies reach into. For alloc/policy.c and the cache's files only. */
#ifndef FS_ALLOC_POLICY_IMPL_H
#define FS_ALLOC_POLICY_IMPL_H

#include "alloc/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every hook is optional (NULL: nothing to do). Hooks other than
 * before_grow_locked run without the cache lock and may call any cache
 * function. */
struct alloc_policy_i {
    alloc_policy_kind_t kind;
    void (*request_begin)(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns);
    void (*request_end)(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns);
    /* Only a policy that provides batch memory (arena) has batch_begin; it
     * sets *arena to an arena of at least plan_bytes or fails with the
     * cache's error. cache_batch.c cuts the batch's block from it. */
    int (*batch_begin)(alloc_policy_t *p, alloc_cache_t *c, size_t plan_bytes,
                       alloc_stream_t stream, alloc_owner_t owner, alloc_arena_t **arena);
    void (*batch_end)(alloc_policy_t *p, alloc_cache_t *c, alloc_arena_t *arena);
    void (*tick)(alloc_policy_t *p, alloc_cache_t *c, uint64_t now_ns);
    /* After an allocation failed with FS_ENOMEM. */
    void (*oom)(alloc_policy_t *p, alloc_cache_t *c, size_t requested_bytes);
    /* With the cache lock held, before the cache takes a new segment of
     * `grow_bytes` from its provider. May only call the *_locked functions
     * below. */
    void (*before_grow_locked)(alloc_policy_t *p, alloc_cache_t *c, size_t grow_bytes);
    void (*destroy)(alloc_policy_t *p);
};

/* --- wrappers the cache calls (policy.c); NULL hooks do nothing --- */

/* The hooks that take the time: one wrapper serves them all. */
typedef enum alloc_policy_timed {
    ALLOC_POLICY_ON_REQUEST_BEGIN,
    ALLOC_POLICY_ON_REQUEST_END,
    ALLOC_POLICY_ON_TICK,
} alloc_policy_timed_t;
void alloc_policy_on_timed(alloc_policy_t *p, alloc_policy_timed_t hook, alloc_cache_t *c,
                           uint64_t now_ns);
/* Whether this policy supplies batch memory (has batch_begin). */
bool alloc_policy_provides_batch_memory(const alloc_policy_t *p);
int alloc_policy_on_batch_begin(alloc_policy_t *p, alloc_cache_t *c, size_t plan_bytes,
                                alloc_stream_t stream, alloc_owner_t owner,
                                alloc_arena_t **arena);
void alloc_policy_on_batch_end(alloc_policy_t *p, alloc_cache_t *c, alloc_arena_t *arena);
void alloc_policy_on_oom(alloc_policy_t *p, alloc_cache_t *c, size_t requested_bytes);
void alloc_policy_on_before_grow_locked(alloc_policy_t *p, alloc_cache_t *c, size_t grow_bytes);

/* --- cache internals for policies (cache lock held) --- */

/* Asserts the calling thread holds c's lock (a no-op under NDEBUG). */
void alloc_cache_assert_locked(const alloc_cache_t *c);

/* Releases fully free segments, oldest first, until reserved <= target or
 * none is left; counts them under `reason`. Returns the bytes released. */
size_t alloc_cache_release_until_locked(alloc_cache_t *c, size_t target_reserved_bytes,
                                        alloc_release_reason_t reason);
size_t alloc_cache_reserved_locked(const alloc_cache_t *c);
size_t alloc_cache_limit_locked(const alloc_cache_t *c);

#ifdef __cplusplus
}
#endif
#endif
