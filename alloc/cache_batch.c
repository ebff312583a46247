/* cache_batch.c -- batch memory: every batch gets its activations as one
 * handle, whatever the policies, so the executor has one path.
 *
 * alloc_cache_batch_begin asks the attached policy that provides batch
 * memory (arena) for an arena of at least the plan and cuts the plan's
 * block from it; with no such policy it takes one block of the plan's size
 * from the cache. alloc_cache_batch_end gives back what begin took: the
 * arena to the policy that provides batch memory now (or destroys it when
 * the list was replaced by one without), the block to the cache.
 *
 * Guarantee: a begun batch holds exactly one block of at least plan_bytes,
 * aligned to ALLOC_BATCH_ALIGN, counted to its owner, until its end; a
 * failed begin holds nothing. */
#include <stdlib.h>

#include "alloc/arena.h"
#include "alloc/cache_impl.h"
#include "alloc/policy_impl.h"
#include "common/error.h"

struct alloc_batch {
    alloc_arena_t *arena;  /* the block's arena, or NULL: `block` is a cache block */
    void *block;           /* at least plan_bytes, ALLOC_BATCH_ALIGN-aligned */
};

/* The batch-memory policy of a held list, or NULL. */
static alloc_policy_t *batch_policy(alloc_policy_t *const *ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (alloc_policy_provides_batch_memory(ps[i]))
            return ps[i];
    return NULL;
}

/* An arena from `policy` with the plan's block cut from its start. */
static int batch_from_arena(alloc_cache_t *c, alloc_policy_t *policy, size_t plan_bytes,
                            alloc_stream_t stream, alloc_owner_t owner, alloc_batch_t *b)
{
    int rc = alloc_policy_on_batch_begin(policy, c, plan_bytes, stream, owner, &b->arena);
    if (rc != 0)
        return rc;
    rc = alloc_arena_alloc(b->arena, plan_bytes, ALLOC_BATCH_ALIGN, &b->block);
    if (rc != 0) {
        alloc_policy_on_batch_end(policy, c, b->arena);
        b->arena = NULL;
    }
    return rc;
}

int alloc_cache_batch_begin(alloc_cache_t *c, size_t plan_bytes, alloc_stream_t stream,
                            alloc_owner_t owner, alloc_batch_t **out)
{
    alloc_batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return fs_err(FS_ENOMEM, "cache '%s': out of host memory for a batch", c->name);
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    alloc_policy_t *policy = batch_policy(ps, cache_policies_hold(c, ps));
    int rc = policy ? batch_from_arena(c, policy, plan_bytes, stream, owner, b)
                    : alloc_cache_alloc(c, plan_bytes, stream, owner, &b->block);
    cache_policies_unhold(c);
    if (rc != 0) {
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void *alloc_batch_ptr(const alloc_batch_t *b)
{
    return b->block;
}

alloc_arena_t *alloc_batch_arena(const alloc_batch_t *b)
{
    return b->arena;
}

void alloc_cache_batch_end(alloc_cache_t *c, alloc_batch_t *b)
{
    if (!b)
        return;
    if (!b->arena) {
        /* Cannot fail: the block came from this cache and is still allocated. */
        alloc_cache_free(c, b->block);
        free(b);
        return;
    }
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    alloc_policy_t *policy = batch_policy(ps, cache_policies_hold(c, ps));
    /* No arena policy now (it was replaced): the arena still goes back. */
    if (policy)
        alloc_policy_on_batch_end(policy, c, b->arena);
    else
        alloc_arena_destroy(b->arena);
    cache_policies_unhold(c);
    free(b);
}
