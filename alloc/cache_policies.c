/* cache_policies.c -- the policy host: the list of release policies
 * attached to a cache, its replacement while hooks may be running on the
 * old one, and the hooks (request begin and end, OOM, the timer tick) that
 * fan out to every attached policy in the order they were added.
 *
 * Hooks run without the cache lock (policies call back into the cache) on a
 * copy of the list taken under it. A replaced list is retired, not
 * destroyed, while any hook runs; the last hook out destroys it. So a
 * policy is never destroyed under a hook, and SIGHUP never waits for one.
 * Batch memory, the one hook that hands something back, is cache_batch.c;
 * the watermark's before-grow hook runs inside the allocator (cache.c). */
#include <stdlib.h>
#include <string.h>

#include "alloc/cache_impl.h"
#include "alloc/policy_impl.h"
#include "common/clock.h"
#include "common/error.h"

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
    cache_lock(c);
    alloc_policy_t *ps[CACHE_MAX_POLICIES + 1];
    memcpy(ps, c->policies, c->n_policies * sizeof *ps);
    ps[c->n_policies] = policy;
    int rc = policies_check(c, ps, c->n_policies + 1);
    if (rc == 0)
        c->policies[c->n_policies++] = policy;
    cache_unlock(c);
    return rc;
}

size_t alloc_cache_policy_count(alloc_cache_t *c)
{
    cache_lock(c);
    size_t n = c->n_policies;
    cache_unlock(c);
    return n;
}

alloc_policy_t *alloc_cache_policy_get(alloc_cache_t *c, size_t index)
{
    cache_lock(c);
    alloc_policy_t *p = index < c->n_policies ? c->policies[index] : NULL;
    cache_unlock(c);
    return p;
}

int alloc_cache_policies_replace(alloc_cache_t *c, alloc_policy_t *const *policies, size_t n)
{
    int rc = policies_check(c, policies, n);
    if (rc != 0)
        return rc;
    cache_lock(c);
    alloc_policy_t **old = c->policies;
    size_t n_old = c->n_policies;
    if (n_old > 0 && c->hooks_running > 0) {
        alloc_policy_t **grown = realloc(c->retired, (c->n_retired + n_old) * sizeof *grown);
        if (!grown) {
            cache_unlock(c);
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
    cache_unlock(c);
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

/* The copy stays valid until cache_policies_unhold, since replaced policies
 * are retired, not destroyed, while any hook runs. */
size_t cache_policies_hold(alloc_cache_t *c, alloc_policy_t **out)
{
    cache_lock(c);
    size_t n = c->n_policies;
    memcpy(out, c->policies, n * sizeof *out);
    c->hooks_running++;
    cache_unlock(c);
    return n;
}

/* Ends a hook; the last one out destroys retired policies. */
void cache_policies_unhold(alloc_cache_t *c)
{
    cache_lock(c);
    alloc_policy_t **retired = NULL;
    size_t n = 0;
    if (--c->hooks_running == 0 && c->n_retired > 0) {
        retired = c->retired;
        n = c->n_retired;
        c->retired = NULL;
        c->n_retired = 0;
    }
    cache_unlock(c);
    for (size_t i = 0; i < n; i++)
        alloc_policy_destroy(retired[i]);
    free(retired);
}

void cache_policies_oom(alloc_cache_t *c, size_t requested_bytes)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = cache_policies_hold(c, ps);
    for (size_t i = 0; i < n; i++)
        alloc_policy_on_oom(ps[i], c, requested_bytes);
    cache_policies_unhold(c);
}

/* Runs a timed hook of every policy, unlocked, with one reading of the
 * clock (none when no policy is attached). */
static void policies_run_timed(alloc_cache_t *c, alloc_policy_timed_t hook)
{
    alloc_policy_t *ps[CACHE_MAX_POLICIES];
    size_t n = cache_policies_hold(c, ps);
    uint64_t now = n ? fs_clock_now_ns() : 0;
    for (size_t i = 0; i < n; i++)
        alloc_policy_on_timed(ps[i], hook, c, now);
    cache_policies_unhold(c);
}

void alloc_cache_request_begin(alloc_cache_t *c)
{
    policies_run_timed(c, ALLOC_POLICY_ON_REQUEST_BEGIN);
}

void alloc_cache_request_end(alloc_cache_t *c)
{
    policies_run_timed(c, ALLOC_POLICY_ON_REQUEST_END);
}

void alloc_cache_tick(alloc_cache_t *c)
{
    alloc_cache_process_fences(c);
    policies_run_timed(c, ALLOC_POLICY_ON_TICK);
}
