/* test_workspace.c -- tests of engine/workspace.c: one pool per cache
 * shared by its models, blocks leased per run (the model's own block
 * first, a new one only when every block is in a run), everything freed
 * with the last model. The pool is device-neutral, so a host cache stands
 * in for a GPU's. */
#include <criterion/criterion.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/workspace.h"

#define WS_BYTES ((size_t)1 << 20)

typedef struct ws_fixture {
    alloc_provider_t *host;
    alloc_cache_t *cache;
} ws_fixture_t;

static void ws_open(ws_fixture_t *f)
{
    cr_assert_eq(alloc_provider_host_create(&f->host), 0);
    cr_assert_eq(alloc_cache_create(f->host, NULL, &f->cache), 0);
}

/* Checks the cache holds nothing, then frees it. */
static void ws_close(ws_fixture_t *f)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.allocated.current, 0, "%lld bytes still allocated",
                 (long long)st.allocated.current);
    cr_expect_eq(eng_device_workspace_bytes(f->cache), 0);
    alloc_cache_destroy(f->cache);
    alloc_provider_destroy(f->host);
}

Test(workspace, models_on_one_cache_share_one_block_under_a_named_owner)
{
    ws_fixture_t f;
    ws_open(&f);
    eng_workspace_t *a = NULL, *b = NULL;
    cr_assert_eq(eng_workspace_attach(f.cache, "cuda:0", WS_BYTES, &a), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_workspace_attach(f.cache, "cuda:0", WS_BYTES, &b), 0, "%s", fs_errmsg());
    cr_expect_eq(a, b, "one pool per cache");
    /* The block as the cache rounds it, all the cache holds. */
    size_t held = eng_device_workspace_bytes(f.cache);
    cr_expect_geq(held, WS_BYTES);
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq((size_t)st.allocated.current, held);
    /* The owner is named after the device. */
    bool found = false;
    for (alloc_owner_t o = 1; o < 8 && !found; o++) {
        alloc_owner_stats_t os;
        if (alloc_cache_owner_stats(f.cache, o, &os) == 0)
            found = strcmp(os.name, "cuda:0/workspace") == 0 &&
                    (size_t)os.allocated.current == held;
    }
    cr_expect(found, "an owner cuda:0/workspace holds the block");
    void *pa = NULL, *pb = NULL;
    cr_assert_eq(eng_workspace_acquire(a, "model a", &pa), 0);
    eng_workspace_release(a, pa);
    cr_assert_eq(eng_workspace_acquire(b, "model b", &pb), 0);
    eng_workspace_release(b, pb);
    cr_expect_eq(pa, pb, "runs one after another share the block");
    eng_workspace_detach(a);
    cr_expect_eq(eng_device_workspace_bytes(f.cache), held, "b still holds the pool");
    eng_workspace_detach(b);
    ws_close(&f);
}

Test(workspace, runs_in_flight_at_once_never_share_a_block)
{
    ws_fixture_t f;
    ws_open(&f);
    eng_workspace_t *w = NULL;
    cr_assert_eq(eng_workspace_attach(f.cache, "cuda:1", WS_BYTES, &w), 0);
    cr_assert_eq(eng_workspace_attach(f.cache, "cuda:1", WS_BYTES, &w), 0);
    void *pa = NULL, *pb = NULL, *again = NULL;
    const size_t held = eng_device_workspace_bytes(f.cache);
    cr_assert_eq(eng_workspace_acquire(w, "a", &pa), 0);
    cr_assert_eq(eng_workspace_acquire(w, "b", &pb), 0);
    cr_expect_neq(pa, pb);
    cr_expect_eq(eng_device_workspace_bytes(f.cache), 2 * held);
    eng_workspace_release(w, pa);
    eng_workspace_release(w, pb);
    /* Each model gets its own block back (its captured graphs recorded it). */
    cr_assert_eq(eng_workspace_acquire(w, "b", &again), 0);
    cr_expect_eq(again, pb);
    eng_workspace_release(w, again);
    cr_assert_eq(eng_workspace_acquire(w, "a", &again), 0);
    cr_expect_eq(again, pa);
    eng_workspace_release(w, again);
    cr_expect_eq(eng_device_workspace_bytes(f.cache), 2 * held, "no block more than needed");
    eng_workspace_detach(w);
    eng_workspace_detach(w);
    ws_close(&f);
}

Test(workspace, another_block_size_on_the_same_cache_is_einval)
{
    ws_fixture_t f;
    ws_open(&f);
    eng_workspace_t *w = NULL, *x = NULL;
    cr_assert_eq(eng_workspace_attach(f.cache, "cuda:0", WS_BYTES, &w), 0);
    cr_expect_eq(eng_workspace_attach(f.cache, "cuda:0", 2 * WS_BYTES, &x), FS_EINVAL);
    cr_expect_null(x);
    cr_expect(strstr(fs_errmsg(), "cuda:0"), "%s", fs_errmsg());
    eng_workspace_detach(w);
    ws_close(&f);
}

Test(workspace, a_cache_too_small_for_the_block_fails_the_attach_and_keeps_nothing)
{
    ws_fixture_t f;
    cr_assert_eq(alloc_provider_host_create(&f.host), 0);
    alloc_cache_config_t cfg = {.max_reserved_bytes = WS_BYTES / 2};
    cr_assert_eq(alloc_cache_create(f.host, &cfg, &f.cache), 0, "%s", fs_errmsg());
    eng_workspace_t *w = NULL;
    cr_expect_eq(eng_workspace_attach(f.cache, "cuda:0", WS_BYTES, &w), FS_ENOMEM);
    cr_expect_null(w);
    eng_workspace_detach(NULL);
    ws_close(&f);
}
