/* test_cache_check.c -- alloc/cache_check.c: the invariant walker passes on
 * every state the public API reaches, and names the invariant when one is
 * broken. The broken states are made by hand through cache_impl.h (there
 * is no public way to reach one) and undone before any other call, so a
 * check build, which walks at every unlock, never sees them. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>

#include "alloc/cache_impl.h"
#include "alloc/policy_impl.h"
#include "tests/alloc/alloc_test.h"

#define KiB ALLOC_TEST_KiB
#define MiB ALLOC_TEST_MiB

static void expect_ok(alloc_cache_t *c, const char *when)
{
    cr_expect_eq(alloc_cache_check(c), 0, "%s: %s", when, fs_errmsg());
}

/* Asserts the walk fails with FS_ESTATE and a message containing `what`. */
static void expect_broken(alloc_cache_t *c, const char *what)
{
    cr_expect_eq(alloc_cache_check(c), FS_ESTATE, "a broken %s passed", what);
    cr_expect_not_null(strstr(fs_errmsg(), what), "message '%s' does not name %s", fs_errmsg(),
                       what);
}

/* The block struct at `ptr` (ALLOCATED or PENDING), found as the cache does. */
static cache_block_t *block_at(alloc_cache_t *c, void *ptr)
{
    cache_block_t *b = NULL;
    HASH_FIND(hh, c->by_ptr, &ptr, sizeof(void *), b);
    cr_assert_not_null(b, "no block at %p", ptr);
    return b;
}

Test(alloc_cache_check, passes_on_every_state_the_api_reaches)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    expect_ok(f.cache, "empty");
    alloc_owner_t model;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model", &model), 0, "%s", fs_errmsg());
    void *p[6] = {0};
    size_t sizes[6] = {512, 4 * KiB, 700 * KiB, 3 * MiB, 12 * MiB, 1};
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(alloc_cache_alloc(f.cache, sizes[i], 0, i % 2 ? model : ALLOC_OWNER_SERVER,
                                       &p[i]), 0, "%s", fs_errmsg());
        expect_ok(f.cache, "after an alloc");
    }
    for (int i = 0; i < 6; i += 2) {
        alloc_test_free(f.cache, p[i]);
        expect_ok(f.cache, "after a free");
    }
    alloc_cache_trim(f.cache, 0, ALLOC_RELEASE_TRIM);
    expect_ok(f.cache, "after a trim");
    for (int i = 1; i < 6; i += 2)
        alloc_test_free(f.cache, p[i]);
    expect_ok(f.cache, "all freed");
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, model), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_cache_check, names_a_wrong_allocated_count)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, 0);
    f.cache->stats.allocated.current += 512;
    expect_broken(f.cache, "allocated is");
    f.cache->stats.allocated.current -= 512;
    f.cache->stats.active.current += 512;
    expect_broken(f.cache, "active (allocated + pending)");
    f.cache->stats.active.current -= 512;
    expect_ok(f.cache, "restored");
    alloc_test_free(f.cache, p);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_check, names_a_segment_its_blocks_do_not_tile)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, 0);
    void *q = alloc_test_alloc(f.cache, 4 * KiB, 0);
    cache_block_t *b = block_at(f.cache, q);
    b->ptr += 512; /* a gap before it, an overlap after */
    expect_broken(f.cache, "is not tiled");
    b->ptr -= 512;
    cache_segment_t *s = b->seg;
    s->size += 512;
    f.cache->stats.reserved.current += 512;
    f.cache->stats.pool_reserved[s->pool].current += 512;
    expect_broken(f.cache, "sum to");
    s->size -= 512;
    f.cache->stats.reserved.current -= 512;
    f.cache->stats.pool_reserved[s->pool].current -= 512;
    expect_ok(f.cache, "restored");
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_check, names_owners_that_do_not_sum_to_allocated)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t model;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model", &model), 0, "%s", fs_errmsg());
    void *p = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 8 * KiB, 0, model, &p), 0, "%s", fs_errmsg());
    f.cache->owners[model].allocated.current -= 512;
    f.cache->owners[ALLOC_OWNER_SERVER].allocated.current += 1024;
    expect_broken(f.cache, "owners' allocated bytes");
    f.cache->owners[model].allocated.current += 512;
    f.cache->owners[ALLOC_OWNER_SERVER].allocated.current -= 1024;
    expect_ok(f.cache, "restored");
    alloc_test_free(f.cache, p);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, model), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_cache_check, names_a_block_missing_from_its_tree_or_the_hash)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, 0);
    cache_block_t *b = block_at(f.cache, p);
    cache_block_t *rest = TAILQ_NEXT(b, addr);
    cr_assert_not_null(rest, "the 2 MiB segment was not split");
    cr_assert_eq(rest->state, ALLOC_BLOCK_FREE);
    RB_REMOVE(cache_free_tree, &f.cache->free_tree[ALLOC_POOL_SMALL], rest);
    expect_broken(f.cache, "not in its pool's free tree");
    RB_INSERT(cache_free_tree, &f.cache->free_tree[ALLOC_POOL_SMALL], rest);
    HASH_DEL(f.cache->by_ptr, b);
    expect_broken(f.cache, "not in the pointer hash");
    HASH_ADD(hh, f.cache->by_ptr, ptr, sizeof(void *), b);
    expect_ok(f.cache, "restored");
    alloc_test_free(f.cache, p);
    alloc_fixture_fini(&f);
}

#ifndef NDEBUG
/* The lock assertions are live wherever assert() is. */
Test(alloc_cache_lock, a_locked_function_called_without_the_lock_aborts, .signal = SIGABRT)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_cache_assert_locked(f.cache);
}
#endif

#ifdef ALLOC_CHECK_INVARIANTS
/* A check build walks at every unlock: a public call on a broken cache
 * aborts instead of returning. */
Test(alloc_cache_check, a_check_build_aborts_at_the_next_unlock, .signal = SIGABRT)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    f.cache->stats.allocated.current += 512;
    alloc_test_stats(f.cache);
}
#endif
