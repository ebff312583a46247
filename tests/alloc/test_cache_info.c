/* test_cache_info.c -- the caching allocator's accounting (alloc/cache.h,
 * implemented in alloc/cache_info.c): exact per-owner bytes, owner
 * lifetime, stats and peak reset, and the segment snapshot. Every test ends
 * with the fixture's fini, which asserts the stats are back to zero. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "tests/alloc/alloc_test.h"

#define KiB ALLOC_TEST_KiB
#define MiB ALLOC_TEST_MiB

static const alloc_stream_t STREAM_A = 1;
static const alloc_stream_t STREAM_B = 2;

/* ---- owners -------------------------------------------------------------- */

static alloc_owner_stats_t owner_stats(alloc_cache_t *c, alloc_owner_t o)
{
    alloc_owner_stats_t os;
    memset(&os, 0, sizeof(os));
    cr_assert_eq(alloc_cache_owner_stats(c, o, &os), 0, "owner %u: %s", o, fs_errmsg());
    return os;
}

Test(alloc_cache_owners, counts_exact_bytes_per_owner)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t ma = 0, mb = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model-a", &ma), 0);
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model-b", &mb), 0);
    cr_assert_neq(ma, mb);
    cr_assert_neq(ma, ALLOC_OWNER_SERVER);
    cr_assert_neq(mb, ALLOC_OWNER_SERVER);
    void *a1, *a2, *b1, *s1;
    cr_assert_eq(alloc_cache_alloc(f.cache, 1000, STREAM_A, ma, &a1), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 3 * MiB + 1, STREAM_A, ma, &a2), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 0, STREAM_B, mb, &b1), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 5000, STREAM_B, ALLOC_OWNER_SERVER, &s1), 0);

    alloc_owner_stats_t oa = owner_stats(f.cache, ma);
    cr_expect_str_eq(oa.name, "model-a");
    cr_expect_eq(oa.allocated.current, 1024 + 3 * MiB + 512);
    cr_expect_eq(oa.requested.current, 1000 + 3 * MiB + 1);
    cr_expect_eq(oa.blocks.current, 2);
    alloc_owner_stats_t ob = owner_stats(f.cache, mb);
    cr_expect_str_eq(ob.name, "model-b");
    cr_expect_eq(ob.allocated.current, 512);
    cr_expect_eq(ob.requested.current, 0);
    cr_expect_eq(ob.blocks.current, 1);
    alloc_owner_stats_t os = owner_stats(f.cache, ALLOC_OWNER_SERVER);
    cr_expect_eq(os.allocated.current, 5120);
    cr_expect_eq(os.requested.current, 5000);
    cr_expect_eq(os.blocks.current, 1);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.allocated.current,
                 oa.allocated.current + ob.allocated.current + os.allocated.current);
    cr_expect_eq(st.requested.current,
                 oa.requested.current + ob.requested.current + os.requested.current);

    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_block_info_t *bi = NULL;
    cr_assert(alloc_test_find_block(s, a2, NULL, &bi));
    cr_expect_eq(bi->owner, ma);
    cr_assert(alloc_test_find_block(s, b1, NULL, &bi));
    cr_expect_eq(bi->owner, mb);
    alloc_snapshot_free(s);

    /* A busy owner cannot go; the message names it. */
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, ma), FS_EBUSY);
    cr_expect_not_null(strstr(fs_errmsg(), "model-a"), "message: %s", fs_errmsg());
    alloc_test_free(f.cache, a1);
    oa = owner_stats(f.cache, ma);
    cr_expect_eq(oa.allocated.current, 3 * MiB + 512);
    cr_expect_eq(oa.allocated.peak, 1024 + 3 * MiB + 512);
    cr_expect_eq(oa.allocated.total, 1024 + 3 * MiB + 512);
    cr_expect_eq(oa.blocks.current, 1);
    alloc_test_free(f.cache, a2);
    oa = owner_stats(f.cache, ma);
    cr_expect_eq(oa.allocated.current, 0);
    cr_expect_eq(oa.requested.current, 0);
    cr_expect_eq(oa.blocks.current, 0);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, ma), 0, "%s", fs_errmsg());

    /* Gone: alloc, stats and destroy refuse it. */
    void *p = NULL;
    cr_expect_eq(alloc_cache_alloc(f.cache, 512, STREAM_A, ma, &p), FS_EINVAL);
    cr_expect_eq(alloc_cache_owner_stats(f.cache, ma, &oa), FS_EINVAL);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, ma), FS_EINVAL);
    /* A new owner, whatever id it gets, starts from zero. */
    alloc_owner_t mc = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model-c", &mc), 0);
    alloc_owner_stats_t oc = owner_stats(f.cache, mc);
    cr_expect_str_eq(oc.name, "model-c");
    cr_expect_eq(oc.allocated.current, 0);
    cr_expect_eq(oc.allocated.peak, 0);
    cr_expect_eq(oc.allocated.total, 0);
    cr_expect_eq(oc.blocks.total, 0);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, mc), 0);
    alloc_test_free(f.cache, b1);
    alloc_test_free(f.cache, s1);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, mb), 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_owners, refuses_unknown_owner_and_the_server_owner)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = NULL;
    alloc_cache_stats_t before = alloc_test_stats(f.cache);
    cr_expect_eq(alloc_cache_alloc(f.cache, 512, STREAM_A, 4242, &p), FS_EINVAL);
    alloc_cache_stats_t after = alloc_test_stats(f.cache);
    cr_expect_eq(after.reserved.current, before.reserved.current, "no segment for a bad owner");
    cr_expect_eq(after.n_ooms, 0);
    alloc_owner_stats_t os;
    cr_expect_eq(alloc_cache_owner_stats(f.cache, 4242, &os), FS_EINVAL);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, 4242), FS_EINVAL);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, ALLOC_OWNER_SERVER), FS_EINVAL);
    cr_expect_eq(alloc_cache_owner_stats(f.cache, ALLOC_OWNER_SERVER, &os), 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_owners, truncates_long_names)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    char name[200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    alloc_owner_t o = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, name, &o), 0);
    alloc_owner_stats_t os = owner_stats(f.cache, o);
    cr_expect_eq(strlen(os.name), ALLOC_OWNER_NAME_MAX - 1);
    cr_expect_eq(strncmp(os.name, name, ALLOC_OWNER_NAME_MAX - 1), 0);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, o), 0);
    alloc_fixture_fini(&f);
}

/* ---- stats ---------------------------------------------------------------- */

Test(alloc_cache_stats, reset_peak_sets_every_peak_to_current)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t o = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "m", &o), 0);
    void *p[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(alloc_cache_alloc(f.cache, 12 * MiB, STREAM_A, o, &p[i]), 0);
    void *s = alloc_test_alloc(f.cache, 1000, STREAM_A);
    alloc_test_free(f.cache, p[0]);
    alloc_test_free(f.cache, p[1]);
    alloc_test_free(f.cache, s);
    alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.allocated.peak, 36 * MiB + 1024);
    cr_expect_eq((size_t)st.allocated.current, 12 * MiB);
    cr_expect_eq((size_t)st.reserved.peak, 38 * MiB);
    cr_expect_eq((size_t)st.reserved.current, 12 * MiB);
    cr_expect_eq(st.segments.peak, 4);
    cr_expect_eq(st.blocks.peak, 4);
    cr_expect_eq((size_t)st.requested.peak, 36 * MiB + 1000);
    cr_expect_eq((size_t)st.pool_allocated[ALLOC_POOL_LARGE].peak, 36 * MiB);
    cr_expect_eq(owner_stats(f.cache, o).allocated.peak, 36 * MiB);
    alloc_cache_reset_peak(f.cache);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.allocated.peak, st.allocated.current);
    cr_expect_eq(st.reserved.peak, st.reserved.current);
    cr_expect_eq(st.active.peak, st.active.current);
    cr_expect_eq(st.requested.peak, st.requested.current);
    cr_expect_eq(st.segments.peak, st.segments.current);
    cr_expect_eq(st.blocks.peak, st.blocks.current);
    for (int i = 0; i < ALLOC_POOL_N; i++) {
        cr_expect_eq(st.pool_allocated[i].peak, st.pool_allocated[i].current);
        cr_expect_eq(st.pool_reserved[i].peak, st.pool_reserved[i].current);
    }
    alloc_owner_stats_t os = owner_stats(f.cache, o);
    cr_expect_eq(os.allocated.peak, os.allocated.current);
    cr_expect_eq((size_t)st.allocated.total, 36 * MiB + 1024, "totals survive the reset");
    cr_expect_eq((size_t)st.reserved.total, 38 * MiB);
    cr_expect_eq(st.segments.total, 4);
    alloc_test_free(f.cache, p[2]);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, o), 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_stats, counts_device_calls_hits_and_misses)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *a = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);  /* miss */
    void *b = alloc_test_alloc(f.cache, 8 * KiB, STREAM_A);  /* hit: the segment's tail */
    void *c = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A); /* miss */
    alloc_test_free(f.cache, c);
    void *d = alloc_test_alloc(f.cache, 11 * MiB, STREAM_A); /* hit */
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_cache_misses, 2);
    cr_expect_eq(st.n_cache_hits, 2);
    cr_expect_eq(st.n_device_allocs, 2);
    cr_expect_eq(st.n_device_frees, 0);
    cr_expect_eq(st.n_retries, 0);
    cr_expect_eq(st.n_ooms, 0);
    cr_expect_eq(st.blocks.total, 4);
    alloc_test_free(f.cache, a);
    alloc_test_free(f.cache, b);
    alloc_test_free(f.cache, d);
    alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_frees, 2);
    cr_expect_eq(alloc_test_fault_counts(f.fault).n_free_calls, 2);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_EMPTY], 14 * MiB);
    alloc_fixture_fini(&f);
}

/* ---- snapshot ------------------------------------------------------------- */

Test(alloc_cache_snapshot, lists_segments_and_blocks_in_address_order)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t o = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "m", &o), 0);
    void *a = NULL, *b = NULL, *l = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 1000, 7, o, &a), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 3000, 7, ALLOC_OWNER_SERVER, &b), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 2 * MiB + 100, 7, o, &l), 0);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 2);
    cr_expect_lt(s->segments[0].address, s->segments[1].address);

    const alloc_segment_info_t *ss = alloc_test_find_segment(s, a);
    cr_assert_not_null(ss);
    cr_expect_eq(ss->address, (uintptr_t)a);
    cr_expect_eq(ss->size, 2 * MiB);
    cr_expect_eq(ss->pool, ALLOC_POOL_SMALL);
    cr_expect_eq(ss->allocated_bytes, 1024 + 3072);
    cr_assert_eq(ss->n_blocks, 3);
    alloc_block_info_t want[3] = {
        {.offset = 0, .size = 1024, .requested = 1000, .stream = 7, .owner = o,
         .state = ALLOC_BLOCK_ALLOCATED},
        {.offset = 1024, .size = 3072, .requested = 3000, .stream = 7,
         .owner = ALLOC_OWNER_SERVER, .state = ALLOC_BLOCK_ALLOCATED},
        {.offset = 4096, .size = 2 * MiB - 4096, .requested = 0, .stream = 7,
         .state = ALLOC_BLOCK_FREE},
    };
    for (int i = 0; i < 3; i++) {
        const alloc_block_info_t *g = &ss->blocks[i];
        cr_expect_eq(g->offset, want[i].offset, "block %d offset %zu", i, g->offset);
        cr_expect_eq(g->size, want[i].size, "block %d size %zu", i, g->size);
        cr_expect_eq(g->requested, want[i].requested, "block %d requested %zu", i, g->requested);
        cr_expect_eq(g->stream, want[i].stream, "block %d stream", i);
        cr_expect_eq(g->state, want[i].state, "block %d state %d", i, g->state);
        if (want[i].state == ALLOC_BLOCK_ALLOCATED)
            cr_expect_eq(g->owner, want[i].owner, "block %d owner %u", i, g->owner);
    }

    const alloc_segment_info_t *sl = alloc_test_find_segment(s, l);
    cr_assert_not_null(sl);
    cr_expect_eq(sl->pool, ALLOC_POOL_LARGE);
    cr_expect_eq(sl->size, 20 * MiB);
    cr_expect_eq(sl->allocated_bytes, 2 * MiB + 512);
    cr_assert_eq(sl->n_blocks, 2);
    cr_expect_eq(sl->blocks[0].requested, 2 * MiB + 100);
    cr_expect_eq(sl->blocks[0].owner, o);
    cr_expect_eq(sl->blocks[1].offset, 2 * MiB + 512);
    cr_expect_eq(sl->blocks[1].state, ALLOC_BLOCK_FREE);
    cr_expect_lt(ss->age_seq, sl->age_seq, "the small segment came first");
    alloc_snapshot_free(s);
    alloc_snapshot_free(NULL);

    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.largest_free_bytes, 20 * MiB - 2 * MiB - 512);
    cr_expect_eq(st.free_cached_bytes, 22 * MiB - (1024 + 3072 + 2 * MiB + 512));
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, a);
    alloc_test_free(f.cache, b);
    alloc_test_free(f.cache, l);
    s = alloc_test_snapshot(f.cache);
    cr_expect_eq(s->n_segments, 2, "freeing keeps segments cached");
    for (size_t i = 0; i < s->n_segments; i++) {
        cr_expect_eq(s->segments[i].n_blocks, 1);
        cr_expect_eq(s->segments[i].allocated_bytes, 0);
    }
    alloc_snapshot_free(s);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, o), 0);
    alloc_fixture_fini(&f);
    /* An empty cache: an empty snapshot. */
    alloc_fixture_init(&f, NULL, NULL);
    s = alloc_test_snapshot(f.cache);
    cr_expect_eq(s->n_segments, 0);
    alloc_snapshot_free(s);
    alloc_fixture_fini(&f);
}
