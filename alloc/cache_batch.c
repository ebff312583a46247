/* cache_batch.c -- batch memory: the batch hooks, which ask the attached
 * policy that provides batch memory (arena) for an arena for the batch and
 * give it back at batch end, even when that policy was replaced since. */
#include "alloc/arena.h"
#include "alloc/cache_impl.h"
#include "alloc/policy_impl.h"

/* The batch-memory policy of a held list, or NULL. */
static alloc_policy_t *batch_policy(alloc_policy_t *const *ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (alloc_policy_provides_batch_memory(ps[i]))
            return ps[i];
    return NULL;
}

int alloc_cache_batch_begin(alloc_cache_t *c, size_t plan_bytes, alloc_stream_t stream,
                            alloc_owner_t owner, alloc_arena_t **arena)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    alloc_policy_t *policy = batch_policy(ps, cache_policies_hold(c, ps));
    *arena = NULL;
    int rc = policy ? alloc_policy_on_batch_begin(policy, c, plan_bytes, stream, owner, arena) : 0;
    cache_policies_unhold(c);
    return rc;
}

void alloc_cache_batch_end(alloc_cache_t *c, alloc_arena_t *arena)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    alloc_policy_t *policy = batch_policy(ps, cache_policies_hold(c, ps));
    /* No arena policy now (it was replaced): the arena still goes back. */
    if (policy)
        alloc_policy_on_batch_end(policy, c, arena);
    else
        alloc_arena_destroy(arena);
    cache_policies_unhold(c);
}
