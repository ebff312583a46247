/* test_cache.c -- the caching allocator's contract (alloc/cache.h): rounding
 * and pools, split and coalesce, best fit, reuse, max_split, config, empty
 * and trim, bad frees, destroy. Streams are in test_cache_streams.c, the
 * limit and the OOM ladder in test_cache_oom.c, owners, stats and the
 * snapshot in test_cache_info.c, threads in test_cache_stress.c. Every test
 * ends with the fixture's fini, which asserts the stats are back to zero. */
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

/* ---- rounding and pools --------------------------------------------------- */

typedef struct size_case {
    size_t request;
    size_t block;   /* rounded block handed out */
    size_t segment; /* segment taken from the provider */
    alloc_pool_t pool;
} size_case_t;

Test(alloc_cache_rounding, rounds_to_512_and_picks_pool_and_segment_size)
{
    static const size_case_t cases[] = {
        {1, 512, 2 * MiB, ALLOC_POOL_SMALL},
        {511, 512, 2 * MiB, ALLOC_POOL_SMALL},
        {512, 512, 2 * MiB, ALLOC_POOL_SMALL},
        {513, 1024, 2 * MiB, ALLOC_POOL_SMALL},
        {100 * KiB + 1, 100 * KiB + 512, 2 * MiB, ALLOC_POOL_SMALL},
        {MiB - 1, MiB, 2 * MiB, ALLOC_POOL_SMALL},
        {MiB, MiB, 2 * MiB, ALLOC_POOL_SMALL},
        {MiB + 1, MiB + 512, 20 * MiB, ALLOC_POOL_LARGE},
        {5 * MiB, 5 * MiB, 20 * MiB, ALLOC_POOL_LARGE},
        {10 * MiB - 512, 10 * MiB - 512, 20 * MiB, ALLOC_POOL_LARGE},
        {10 * MiB, 10 * MiB, 10 * MiB, ALLOC_POOL_LARGE},
        /* 12 MiB segment, remainder 2 MiB - 512 > 1 MiB: split */
        {10 * MiB + 1, 10 * MiB + 512, 12 * MiB, ALLOC_POOL_LARGE},
        {12 * MiB, 12 * MiB, 12 * MiB, ALLOC_POOL_LARGE},
        /* 26 MiB segment, remainder exactly 1 MiB: not split */
        {25 * MiB, 26 * MiB, 26 * MiB, ALLOC_POOL_LARGE},
        {33 * MiB + 7, 34 * MiB, 34 * MiB, ALLOC_POOL_LARGE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const size_case_t *k = &cases[i];
        alloc_fixture_t f;
        alloc_fixture_init(&f, NULL, NULL);
        void *p = alloc_test_alloc(f.cache, k->request, STREAM_A);
        cr_expect_eq(alloc_test_block_size(f.cache, p), k->block, "request %zu: block %zu, expected %zu",
                     k->request, alloc_test_block_size(f.cache, p), k->block);
        alloc_cache_stats_t st = alloc_test_stats(f.cache);
        cr_expect_eq((size_t)st.pool_allocated[k->pool].current, k->block,
                     "request %zu: pool %d allocated %lld", k->request, (int)k->pool,
                     (long long)st.pool_allocated[k->pool].current);
        cr_expect_eq(st.pool_allocated[1 - k->pool].current, 0, "request %zu: other pool used",
                     k->request);
        cr_expect_eq((size_t)st.pool_reserved[k->pool].current, k->segment,
                     "request %zu: pool reserved %lld, expected %zu", k->request,
                     (long long)st.pool_reserved[k->pool].current, k->segment);
        cr_expect_eq((size_t)st.requested.current, k->request);
        cr_expect_eq((size_t)st.allocated.current, k->block);
        cr_expect_eq(st.n_device_allocs, 1);
        cr_expect_eq(st.n_cache_misses, 1);
        alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
        cr_assert_eq(s->n_segments, 1);
        cr_expect_eq(s->segments[0].size, k->segment, "request %zu: segment %zu, expected %zu",
                     k->request, s->segments[0].size, k->segment);
        cr_expect_eq(s->segments[0].pool, k->pool);
        cr_expect_eq(s->segments[0].address, (uintptr_t)p, "first block at the segment base");
        cr_expect_eq(s->segments[0].n_blocks, k->block == k->segment ? 1u : 2u,
                     "request %zu: %zu blocks", k->request, s->segments[0].n_blocks);
        alloc_snapshot_free(s);
        alloc_test_check_consistent(f.cache);
        alloc_test_free(f.cache, p);
        alloc_fixture_fini(&f);
    }
}

Test(alloc_cache_rounding, serves_size_zero_as_a_distinct_minimum_block)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 0, STREAM_A);
    void *q = alloc_test_alloc(f.cache, 0, STREAM_A);
    cr_expect_neq(p, q);
    cr_expect_eq(alloc_test_block_size(f.cache, p), ALLOC_MIN_BLOCK_BYTES);
    cr_expect_eq(alloc_test_block_size(f.cache, q), ALLOC_MIN_BLOCK_BYTES);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.requested.current, 0);
    cr_expect_eq((size_t)st.allocated.current, 2 * ALLOC_MIN_BLOCK_BYTES);
    cr_expect_eq(st.blocks.current, 2);
    cr_expect_eq((size_t)st.pool_reserved[ALLOC_POOL_SMALL].current, ALLOC_SMALL_SEGMENT_BYTES);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

/* holds answers for block starts handed out, and not for an inner
 * pointer, a foreign one or a freed block; it sets no error. */
Test(alloc_cache_rounding, holds_only_blocks_it_handed_out)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4096, STREAM_A);
    int local = 0;
    fs_err(FS_OK, "before");
    cr_expect(alloc_cache_holds(f.cache, p));
    cr_expect_not(alloc_cache_holds(f.cache, (char *)p + 512));
    cr_expect_not(alloc_cache_holds(f.cache, &local));
    cr_expect_str_eq(fs_errmsg(), "before", "holds set an error: %s", fs_errmsg());
    alloc_test_free(f.cache, p);
    cr_expect_not(alloc_cache_holds(f.cache, p));
    alloc_fixture_fini(&f);
}

/* ---- split ---------------------------------------------------------------- */

Test(alloc_cache_split, small_blocks_split_down_to_the_last_512_bytes)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *a = alloc_test_alloc(f.cache, MiB, STREAM_A);
    void *b = alloc_test_alloc(f.cache, MiB - 512, STREAM_A);
    void *c = alloc_test_alloc(f.cache, 512, STREAM_A);
    cr_expect_eq((char *)b, (char *)a + MiB);
    cr_expect_eq((char *)c, (char *)a + 2 * MiB - 512, "the 512-byte remainder was split off");
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 1);
    cr_expect_eq(st.n_cache_hits, 2);
    cr_expect_eq((size_t)st.allocated.current, 2 * MiB);
    cr_expect_eq(st.largest_free_bytes, 0);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_expect_eq(s->segments[0].n_blocks, 3);
    cr_expect_eq(s->segments[0].allocated_bytes, 2 * MiB);
    alloc_snapshot_free(s);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, a);
    alloc_test_free(f.cache, b);
    alloc_test_free(f.cache, c);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_split, large_block_keeps_a_remainder_of_at_most_1_MiB)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    /* 19 MiB takes a 20 MiB segment; the 1 MiB remainder is not split. */
    void *p = alloc_test_alloc(f.cache, 19 * MiB, STREAM_A);
    cr_expect_eq(alloc_test_block_size(f.cache, p), 20 * MiB);
    /* 18 MiB + 512 leaves 2 MiB - 512 > 1 MiB: split. */
    void *q = alloc_test_alloc(f.cache, 18 * MiB + 512, STREAM_A);
    cr_expect_eq(alloc_test_block_size(f.cache, q), 18 * MiB + 512);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_segment_info_t *sq = alloc_test_find_segment(s, q);
    cr_assert_not_null(sq);
    cr_expect_eq(sq->size, 20 * MiB);
    cr_expect_eq(sq->n_blocks, 2);
    cr_expect_eq(sq->blocks[1].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(sq->blocks[1].size, 2 * MiB - 512);
    alloc_snapshot_free(s);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, q);
    /* A 2 MiB request in a 20 MiB segment leaves 18 MiB free; 17 MiB + 512
     * then fits it with 1 MiB - 512 to spare: taken whole. */
    void *r = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);
    alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    cr_expect_eq(alloc_test_block_size(f.cache, r), 2 * MiB);
    void *t = alloc_test_alloc(f.cache, 17 * MiB + 512, STREAM_A);
    cr_expect_eq((char *)t, (char *)r + 2 * MiB, "the 18 MiB remainder is reused");
    cr_expect_eq(alloc_test_block_size(f.cache, t), 18 * MiB);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, r);
    alloc_test_free(f.cache, t);
    alloc_fixture_fini(&f);
}

/* ---- coalesce ------------------------------------------------------------- */

Test(alloc_cache_split, coalesces_with_both_neighbours)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    /* One small segment: l | m | r | free tail. */
    void *l = alloc_test_alloc(f.cache, 8 * KiB, STREAM_A);
    void *m = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    void *r = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_assert_eq((char *)m, (char *)l + 8 * KiB);
    cr_assert_eq((char *)r, (char *)m + 16 * KiB);
    alloc_snapshot_t *s;

    alloc_test_free(f.cache, m);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_expect_eq(s->segments[0].n_blocks, 4, "l, free m, r, free tail");
    alloc_snapshot_free(s);
    alloc_test_check_consistent(f.cache);

    alloc_test_free(f.cache, l);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->segments[0].n_blocks, 3, "l merged with m");
    cr_expect_eq(s->segments[0].blocks[0].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(s->segments[0].blocks[0].size, 24 * KiB);
    alloc_snapshot_free(s);
    alloc_test_check_consistent(f.cache);

    alloc_test_free(f.cache, r);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_assert_eq(s->segments[0].n_blocks, 1, "r merged with l+m on its left and the tail on its right");
    cr_expect_eq(s->segments[0].blocks[0].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(s->segments[0].blocks[0].offset, 0);
    cr_expect_eq(s->segments[0].blocks[0].size, 2 * MiB);
    alloc_snapshot_free(s);
    cr_expect_eq(alloc_test_stats(f.cache).largest_free_bytes, 2 * MiB);
    alloc_test_check_consistent(f.cache);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_split, does_not_merge_across_an_allocated_neighbour)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *l = alloc_test_alloc(f.cache, 8 * KiB, STREAM_A);
    void *m = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    void *r = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    /* Fill the segment: two small-pool requests (each <= 1 MiB). */
    void *last = alloc_test_alloc(f.cache, MiB, STREAM_A);
    void *last2 = alloc_test_alloc(f.cache, MiB - 28 * KiB, STREAM_A);
    cr_assert_eq((char *)last, (char *)r + 4 * KiB);
    cr_assert_eq((char *)last2, (char *)last + MiB);
    alloc_test_free(f.cache, l);
    alloc_test_free(f.cache, r);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_assert_eq(s->segments[0].n_blocks, 5, "free l, m, free r, last, last2");
    cr_expect_eq(s->segments[0].blocks[0].size, 8 * KiB);
    cr_expect_eq(s->segments[0].blocks[2].size, 4 * KiB);
    alloc_snapshot_free(s);
    alloc_test_free(f.cache, m);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->segments[0].n_blocks, 3, "l, m and r merged; last and last2 in use");
    cr_expect_eq(s->segments[0].blocks[0].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(s->segments[0].blocks[0].size, 28 * KiB);
    cr_expect_eq(s->segments[0].blocks[1].state, ALLOC_BLOCK_ALLOCATED);
    alloc_snapshot_free(s);
    cr_expect_eq(alloc_test_stats(f.cache).largest_free_bytes, 28 * KiB);
    alloc_test_free(f.cache, last);
    alloc_test_free(f.cache, last2);
    alloc_test_check_consistent(f.cache);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_split, freeing_the_middle_block_last_merges_three_into_one)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *l = alloc_test_alloc(f.cache, 8 * KiB, STREAM_A);
    void *m = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    void *r = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, l);
    alloc_test_free(f.cache, r); /* merges with the free tail of the segment */
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_expect_eq(s->segments[0].n_blocks, 3);
    alloc_snapshot_free(s);
    alloc_test_free(f.cache, m);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_assert_eq(s->segments[0].n_blocks, 1, "one free block after freeing the middle");
    cr_expect_eq(s->segments[0].blocks[0].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(s->segments[0].blocks[0].size, 2 * MiB);
    cr_expect_eq(s->segments[0].allocated_bytes, 0);
    alloc_snapshot_free(s);
    cr_expect_eq(alloc_test_stats(f.cache).largest_free_bytes, 2 * MiB);
    alloc_test_check_consistent(f.cache);
    alloc_fixture_fini(&f);
}

/* ---- best fit and reuse --------------------------------------------------- */

Test(alloc_cache_best_fit, picks_the_smallest_free_block_that_fits)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    /* Free holes of 64K, 16K, 32K, 16K separated by live 512-byte guards. */
    void *a = alloc_test_alloc(f.cache, 64 * KiB, STREAM_A);
    void *g1 = alloc_test_alloc(f.cache, 512, STREAM_A);
    void *b = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    void *g2 = alloc_test_alloc(f.cache, 512, STREAM_A);
    void *c = alloc_test_alloc(f.cache, 32 * KiB, STREAM_A);
    void *g3 = alloc_test_alloc(f.cache, 512, STREAM_A);
    void *d = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    void *g4 = alloc_test_alloc(f.cache, 512, STREAM_A);
    cr_assert_eq(alloc_test_stats(f.cache).n_device_allocs, 1);
    alloc_test_free(f.cache, d);
    alloc_test_free(f.cache, c);
    alloc_test_free(f.cache, b);
    alloc_test_free(f.cache, a);

    void *x = alloc_test_alloc(f.cache, 20 * KiB, STREAM_A);
    cr_expect_eq(x, c, "20K goes to the 32K hole");
    void *y = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    cr_expect_eq(y, b, "16K: of two equal holes, the lower address");
    void *z = alloc_test_alloc(f.cache, 16 * KiB, STREAM_A);
    cr_expect_eq(z, d, "16K: the other 16K hole");
    void *w = alloc_test_alloc(f.cache, 40 * KiB, STREAM_A);
    cr_expect_eq(w, a, "40K goes to the 64K hole");
    /* Holes now: 24K after w, 12K after x, and the segment's tail. */
    void *v = alloc_test_alloc(f.cache, 8 * KiB, STREAM_A);
    cr_expect_eq((char *)v, (char *)c + 20 * KiB, "8K goes to the 12K rest of the 32K hole");
    void *u = alloc_test_alloc(f.cache, 24 * KiB, STREAM_A);
    cr_expect_eq((char *)u, (char *)a + 40 * KiB, "24K fills the rest of the 64K hole exactly");
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 1);
    cr_expect_eq(st.n_cache_misses, 1);
    alloc_test_check_consistent(f.cache);
    void *all[] = {g1, g2, g3, g4, x, y, z, w, v, u};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        alloc_test_free(f.cache, all[i]);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_best_fit, picks_the_smallest_free_segment_in_the_large_pool)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *s16 = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A);
    void *s12 = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    void *s14 = alloc_test_alloc(f.cache, 14 * MiB, STREAM_A);
    alloc_test_free(f.cache, s16);
    alloc_test_free(f.cache, s12);
    alloc_test_free(f.cache, s14);
    void *p = alloc_test_alloc(f.cache, 13 * MiB, STREAM_A);
    cr_expect_eq(p, s14, "13 MiB takes the 14 MiB block");
    cr_expect_eq(alloc_test_block_size(f.cache, p), 14 * MiB, "a 1 MiB remainder is not split");
    void *q = alloc_test_alloc(f.cache, 11 * MiB, STREAM_A);
    cr_expect_eq(q, s12, "11 MiB takes the 12 MiB block");
    void *r = alloc_test_alloc(f.cache, 11 * MiB, STREAM_A);
    cr_expect_eq(r, s16, "the next 11 MiB takes the 16 MiB block");
    cr_expect_eq(alloc_test_block_size(f.cache, r), 11 * MiB, "a 5 MiB remainder is split");
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 3);
    cr_expect_eq(st.n_cache_hits, 3);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, q);
    alloc_test_free(f.cache, r);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_reuse, returns_the_freed_block_for_the_same_size)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 3000, STREAM_A);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_cache_misses, 1);
    cr_expect_eq(st.n_cache_hits, 0);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 3000, STREAM_A);
    cr_expect_eq(q, p);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_cache_hits, 1);
    cr_expect_eq(st.n_cache_misses, 1);
    cr_expect_eq(st.n_device_allocs, 1);
    cr_expect_eq(st.n_device_frees, 0);
    cr_expect_eq(st.allocated.total, 2 * 3072);
    cr_expect_eq(st.requested.total, 2 * 3000);
    alloc_test_free(f.cache, q);

    void *big = alloc_test_alloc(f.cache, 30 * MiB, STREAM_A);
    alloc_test_free(f.cache, big);
    void *big2 = alloc_test_alloc(f.cache, 30 * MiB, STREAM_A);
    cr_expect_eq(big2, big);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 2);
    cr_expect_eq(st.n_cache_hits, 2);
    alloc_test_free(f.cache, big2);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_reuse, small_and_large_pools_never_share_blocks)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    /* A free 20 MiB large segment does not serve a small request. */
    void *big = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);
    alloc_test_free(f.cache, big);
    void *small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_segment_info_t *sg = alloc_test_find_segment(s, small);
    cr_assert_not_null(sg);
    cr_expect_eq(sg->pool, ALLOC_POOL_SMALL);
    cr_expect_eq(s->n_segments, 2);
    alloc_snapshot_free(s);
    /* A free small segment does not serve a large request. */
    alloc_test_free(f.cache, small);
    alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, small);
    void *large = alloc_test_alloc(f.cache, MiB + 512, STREAM_A);
    s = alloc_test_snapshot(f.cache);
    sg = alloc_test_find_segment(s, large);
    cr_assert_not_null(sg);
    cr_expect_eq(sg->pool, ALLOC_POOL_LARGE);
    cr_expect_eq(sg->size, 20 * MiB);
    alloc_snapshot_free(s);
    alloc_test_free(f.cache, large);
    alloc_fixture_fini(&f);
}

/* ---- max_split ------------------------------------------------------------ */

/* 24 MiB: above the 20 MiB segments of mid-size requests, so only the
 * blocks these tests make on purpose are at or above it. */
static const alloc_cache_config_t max_split_24m = {.max_split_bytes = 24 * MiB};

Test(alloc_cache_max_split, default_splits_a_large_cached_block_for_a_smaller_request)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 40 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 30 * MiB, STREAM_A);
    cr_expect_eq(q, p);
    cr_expect_eq(alloc_test_block_size(f.cache, q), 30 * MiB);
    void *r = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_neq(r, p);
    void *t = alloc_test_alloc(f.cache, 9 * MiB, STREAM_A);
    cr_expect_eq((char *)t, (char *)p + 30 * MiB, "the 10 MiB remainder is reused");
    cr_expect_eq(alloc_test_stats(f.cache).n_device_allocs, 2);
    alloc_test_free(f.cache, q);
    alloc_test_free(f.cache, r);
    alloc_test_free(f.cache, t);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_max_split, never_splits_a_block_of_at_least_max_split)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &max_split_24m);
    void *p = alloc_test_alloc(f.cache, 40 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 30 * MiB, STREAM_A); /* >= max_split, 40 < 30 + 20 */
    cr_expect_eq(q, p, "reuses the 40 MiB block");
    cr_expect_eq(alloc_test_block_size(f.cache, q), 40 * MiB, "whole: a block >= max_split is not split");
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 1);
    cr_expect_eq(s->segments[0].n_blocks, 1);
    alloc_snapshot_free(s);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.allocated.current, 40 * MiB);
    cr_expect_eq((size_t)st.requested.current, 30 * MiB);
    cr_expect_eq(st.n_cache_hits, 1);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_max_split, request_below_max_split_never_takes_an_oversize_block)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &max_split_24m);
    void *p = alloc_test_alloc(f.cache, 40 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_neq(q, p, "a 12 MiB request does not take the 40 MiB block");
    cr_expect_eq(alloc_test_block_size(f.cache, q), 12 * MiB);
    void *r = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);
    cr_expect_neq(r, p, "nor does a 2 MiB one");
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_segment_info_t *sg = alloc_test_find_segment(s, r);
    cr_assert_not_null(sg);
    cr_expect_eq(sg->size, 20 * MiB, "a new 20 MiB segment");
    alloc_snapshot_free(s);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 3);
    cr_expect_eq(st.n_cache_misses, 3);
    /* Blocks below max_split still split as usual. */
    void *t = alloc_test_alloc(f.cache, 3 * MiB, STREAM_A);
    cr_expect_eq((char *)t, (char *)r + 2 * MiB);
    cr_expect_eq(alloc_test_block_size(f.cache, t), 3 * MiB);
    alloc_test_free(f.cache, q);
    alloc_test_free(f.cache, r);
    alloc_test_free(f.cache, t);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_max_split, large_request_reuses_only_blocks_wasting_under_20_MiB)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &max_split_24m);
    void *p = alloc_test_alloc(f.cache, 60 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 30 * MiB, STREAM_A); /* 60 >= 30 + 20 */
    cr_expect_neq(q, p, "60 MiB would waste 30 MiB");
    cr_expect_eq(alloc_test_block_size(f.cache, q), 30 * MiB);
    void *r = alloc_test_alloc(f.cache, 42 * MiB, STREAM_A); /* 60 < 42 + 20 */
    cr_expect_eq(r, p, "60 MiB wastes 18 MiB: reused");
    cr_expect_eq(alloc_test_block_size(f.cache, r), 60 * MiB);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_device_allocs, 2);
    cr_expect_eq((size_t)st.allocated.current, 90 * MiB);
    cr_expect_eq((size_t)st.requested.current, 72 * MiB);
    alloc_test_free(f.cache, q);
    alloc_test_free(f.cache, r);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_config, rejects_bad_max_split_and_fraction)
{
    alloc_provider_t *host = NULL;
    alloc_cache_t *c = NULL;
    cr_assert_eq(alloc_provider_host_create(&host), 0);
    alloc_cache_config_t bad_split = {.max_split_bytes = MiB};
    cr_expect_eq(alloc_cache_create(host, &bad_split, &c), FS_EINVAL);
    cr_expect_not_null(strstr(fs_errmsg(), "max_split"), "message: %s", fs_errmsg());
    alloc_cache_config_t bad_fraction = {.fraction = 1.5};
    cr_expect_eq(alloc_cache_create(host, &bad_fraction, &c), FS_EINVAL);
    cr_expect_not_null(strstr(fs_errmsg(), "fraction"), "message: %s", fs_errmsg());
    alloc_cache_config_t neg_fraction = {.fraction = -0.25};
    cr_expect_eq(alloc_cache_create(host, &neg_fraction, &c), FS_EINVAL);
    cr_expect_null(c);
    alloc_provider_destroy(host);
}

Test(alloc_cache_config, copies_the_name_and_keeps_the_provider)
{
    alloc_provider_t *host = NULL;
    alloc_cache_t *c = NULL;
    cr_assert_eq(alloc_provider_host_create(&host), 0);
    char name[16] = "cuda:0";
    alloc_cache_config_t cfg = {.name = name};
    cr_assert_eq(alloc_cache_create(host, &cfg, &c), 0, "%s", fs_errmsg());
    name[0] = 'X';
    cr_expect_str_eq(alloc_cache_name(c), "cuda:0");
    cr_expect_eq(alloc_cache_provider(c), host);
    alloc_cache_destroy(c);
    alloc_cache_destroy(NULL);
    alloc_provider_destroy(host);
}

Test(alloc_cache_config, names_every_release_reason)
{
    cr_expect_str_eq(alloc_release_reason_name(ALLOC_RELEASE_EMPTY), "empty");
    cr_expect_str_eq(alloc_release_reason_name(ALLOC_RELEASE_OOM), "oom");
    cr_expect_str_eq(alloc_release_reason_name(ALLOC_RELEASE_PERIODIC), "periodic");
    for (int i = 0; i < ALLOC_RELEASE_N; i++) {
        const char *a = alloc_release_reason_name((alloc_release_reason_t)i);
        cr_assert_not_null(a);
        for (int j = 0; j < i; j++)
            cr_expect_str_neq(a, alloc_release_reason_name((alloc_release_reason_t)j));
    }
    cr_expect_not_null(alloc_release_reason_name(ALLOC_RELEASE_N));
}

/* ---- empty and trim -------------------------------------------------------- */

Test(alloc_cache_release, empty_releases_only_fully_free_segments)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *live = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A); /* small segment 1, stays */
    void *s2[2];
    for (int i = 0; i < 2; i++) /* the second spills into small segment 2 */
        s2[i] = alloc_test_alloc(f.cache, MiB, STREAM_A);
    void *l1 = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);   /* large 20 MiB */
    void *l2 = alloc_test_alloc(f.cache, 3 * MiB, STREAM_A);   /* same segment, stays */
    void *l3 = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A);  /* > the 15 MiB left: 16 MiB */
    cr_assert_eq(alloc_test_stats(f.cache).segments.current, 4);
    alloc_test_free(f.cache, s2[0]);
    alloc_test_free(f.cache, s2[1]);
    alloc_test_free(f.cache, l1);
    alloc_test_free(f.cache, l3);
    alloc_cache_stats_t before = alloc_test_stats(f.cache);
    size_t released = alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(released, 18 * MiB, "released %zu", released);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_EMPTY], 18 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_EMPTY], 2);
    cr_expect_eq(st.segments.current, 2);
    cr_expect_eq((size_t)st.reserved.current, 22 * MiB);
    cr_expect_eq(st.n_device_frees, before.n_device_frees + 2);
    cr_expect_eq(st.allocated.current, before.allocated.current);
    cr_expect_eq(alloc_test_block_size(f.cache, live), 4 * KiB);
    cr_expect_eq(alloc_test_block_size(f.cache, l2), 3 * MiB);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, 22 * MiB);
    cr_expect_eq(alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY), 0, "nothing more to release");
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, live);
    alloc_test_free(f.cache, l2);
    cr_expect_eq(alloc_cache_empty(f.cache, ALLOC_RELEASE_PERIODIC), 22 * MiB);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_PERIODIC], 22 * MiB);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_EMPTY], 18 * MiB);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_release, trim_releases_free_segments_oldest_first_down_to_keep)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *live = alloc_test_alloc(f.cache, 512, STREAM_A);    /* oldest segment, in use */
    void *a = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A);  /* then 16, 12, 14 MiB */
    void *b = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    void *c = alloc_test_alloc(f.cache, 14 * MiB, STREAM_A);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_segment_info_t *sl = alloc_test_find_segment(s, live);
    const alloc_segment_info_t *sa = alloc_test_find_segment(s, a);
    const alloc_segment_info_t *sb = alloc_test_find_segment(s, b);
    const alloc_segment_info_t *sc = alloc_test_find_segment(s, c);
    cr_assert(sl && sa && sb && sc);
    cr_expect_lt(sl->age_seq, sa->age_seq);
    cr_expect_lt(sa->age_seq, sb->age_seq);
    cr_expect_lt(sb->age_seq, sc->age_seq);
    uint64_t age_c = sc->age_seq;
    alloc_snapshot_free(s);
    alloc_test_free(f.cache, c);
    alloc_test_free(f.cache, b);
    alloc_test_free(f.cache, a);
    /* reserved - allocated = 44 MiB - 512. Dropping 16 leaves 28 MiB - 512,
     * then 12 leaves 16 MiB - 512 <= 17 MiB: the 14 MiB segment stays. */
    size_t released = alloc_cache_trim(f.cache, 17 * MiB, ALLOC_RELEASE_TRIM);
    cr_expect_eq(released, 28 * MiB, "released %zu", released);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_TRIM], 28 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_TRIM], 2);
    cr_expect_eq((size_t)st.reserved.current, 16 * MiB);
    s = alloc_test_snapshot(f.cache);
    cr_assert_eq(s->n_segments, 2);
    const alloc_segment_info_t *kept = alloc_test_find_segment(s, c);
    cr_assert_not_null(kept, "the newest free segment (14 MiB) is kept");
    cr_expect_eq(kept->size, 14 * MiB);
    cr_expect_eq(kept->age_seq, age_c);
    cr_expect_not_null(alloc_test_find_segment(s, live));
    alloc_snapshot_free(s);

    /* Already within keep: nothing goes. */
    cr_expect_eq(alloc_cache_trim(f.cache, 16 * MiB, ALLOC_RELEASE_TRIM), 0);
    /* keep 0: every free segment goes, the one in use stays. */
    cr_expect_eq(alloc_cache_trim(f.cache, 0, ALLOC_RELEASE_IDLE_TRIM), 14 * MiB);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_IDLE_TRIM], 14 * MiB);
    cr_expect_eq((size_t)st.reserved.current, 2 * MiB);
    alloc_test_free(f.cache, live);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_release, release_before_grow_drops_the_pools_free_segments)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    void *big = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    alloc_test_free(f.cache, small);
    alloc_test_free(f.cache, big);
    void *p = NULL;
    /* Served from the cache: nothing is released. */
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 12 * MiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_RELEASE_BEFORE_GROW, &p), 0);
    cr_expect_eq(p, big);
    cr_expect_eq(alloc_test_stats(f.cache).released_bytes[ALLOC_RELEASE_ARENA], 0);
    alloc_test_free(f.cache, p);
    /* Needs a new segment: the large pool's free segment goes first. */
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 14 * MiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_RELEASE_BEFORE_GROW, &p), 0);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_ARENA], 12 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_ARENA], 1);
    cr_expect_eq((size_t)st.pool_reserved[ALLOC_POOL_SMALL].current, 2 * MiB,
                 "the small pool is another pool: kept");
    cr_expect_eq((size_t)st.reserved.current, 16 * MiB);
    alloc_test_free(f.cache, p);
    alloc_fixture_fini(&f);
}

/* ---- bad frees ------------------------------------------------------------ */

Test(alloc_cache_free, rejects_unknown_and_double_frees_without_change)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    void *q = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, p);
    alloc_cache_stats_t before = alloc_test_stats(f.cache);
    alloc_snapshot_t *s0 = alloc_test_snapshot(f.cache);

    int local = 0;
    fs_err_clear();
    cr_expect_eq(alloc_cache_free(f.cache, p), FS_EINVAL, "double free");
    cr_expect_neq(fs_errmsg()[0], '\0');
    cr_expect_eq(alloc_cache_free(f.cache, &local), FS_EINVAL, "a pointer never handed out");
    cr_expect_eq(alloc_cache_free(f.cache, (char *)q + 512), FS_EINVAL, "inside a block");
    cr_expect_eq(alloc_cache_free(f.cache, (char *)q + 4 * KiB), FS_EINVAL,
                 "the free tail's start");
    size_t n = 0;
    cr_expect_eq(alloc_cache_block_size(f.cache, p, &n), FS_EINVAL);
    cr_expect_eq(alloc_cache_block_size(f.cache, &local, &n), FS_EINVAL);
    cr_expect_eq(alloc_cache_free(f.cache, NULL), 0, "NULL is a no-op");

    alloc_cache_stats_t after = alloc_test_stats(f.cache);
    cr_expect_eq(memcmp(&before, &after, sizeof(before)), 0, "stats changed");
    alloc_snapshot_t *s1 = alloc_test_snapshot(f.cache);
    cr_assert_eq(s0->n_segments, s1->n_segments);
    for (size_t i = 0; i < s0->n_segments; i++) {
        cr_assert_eq(s0->segments[i].n_blocks, s1->segments[i].n_blocks);
        cr_expect_eq(memcmp(s0->segments[i].blocks, s1->segments[i].blocks,
                            s0->segments[i].n_blocks * sizeof(alloc_block_info_t)),
                     0, "blocks changed");
    }
    alloc_snapshot_free(s0);
    alloc_snapshot_free(s1);
    /* The cache still works. */
    void *r = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_expect_eq(r, p);
    alloc_test_free(f.cache, r);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

/* ---- destroy ------------------------------------------------------------- */

Test(alloc_cache_destroy, releases_segments_with_leaked_blocks)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_cache_t *c = NULL;
    cr_assert_eq(alloc_cache_create(f.fault, NULL, &c), 0);
    void *p = NULL, *q = NULL;
    cr_assert_eq(alloc_cache_alloc(c, 4 * KiB, STREAM_A, ALLOC_OWNER_SERVER, &p), 0);
    cr_assert_eq(alloc_cache_alloc(c, 12 * MiB, STREAM_A, ALLOC_OWNER_SERVER, &q), 0);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, 14 * MiB);
    alloc_cache_destroy(c); /* logs the two leaks */
    alloc_fault_counts_t cnt = alloc_test_fault_counts(f.fault);
    cr_expect_eq(cnt.live_bytes, 0);
    cr_expect_eq(cnt.live_allocs, 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_release, own_segment_blocks_pin_no_shared_segment)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *ws = NULL, *p = NULL;
    /* An 8 MiB workspace alone: a segment of its size, not a 20 MiB one. */
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 8 * MiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_OWN_SEGMENT, &ws), 0);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.reserved.current, 8 * MiB);
    cr_expect_eq((size_t)st.allocated.current, 8 * MiB);
    /* Short-lived blocks go elsewhere, and a trim gives all of them back. */
    void *act = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);
    cr_expect_eq((size_t)alloc_test_stats(f.cache).reserved.current, 28 * MiB);
    alloc_test_free(f.cache, act);
    cr_expect_eq(alloc_cache_trim(f.cache, 0, ALLOC_RELEASE_IDLE_TRIM), 20 * MiB);
    cr_expect_eq((size_t)alloc_test_stats(f.cache).reserved.current, 8 * MiB);
    /* Freed, its whole segment is reused by the next such request. */
    alloc_test_free(f.cache, ws);
    uint64_t allocs = alloc_test_stats(f.cache).n_device_allocs;
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 8 * MiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_OWN_SEGMENT, &p), 0);
    cr_expect_eq(p, ws);
    cr_expect_eq(alloc_test_stats(f.cache).n_device_allocs, allocs);
    alloc_test_free(f.cache, p);
    /* A segment split by another block is not taken: a new one is. */
    act = alloc_test_alloc(f.cache, 3 * MiB, STREAM_A);
    cr_expect_eq(act, ws, "an ordinary request splits the free 8 MiB segment");
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 5 * MiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_OWN_SEGMENT, &p), 0);
    size_t size = 0;
    cr_assert_eq(alloc_cache_block_size(f.cache, p, &size), 0);
    cr_expect_eq(size, 6 * MiB, "5 MiB in a segment of its own, rounded to 2 MiB");
    cr_expect_eq((size_t)alloc_test_stats(f.cache).reserved.current, 14 * MiB);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, act);
    /* In the small pool the block is the whole 2 MiB segment, never split. */
    cr_assert_eq(alloc_cache_alloc_flags(f.cache, 4 * KiB, STREAM_A, ALLOC_OWNER_SERVER,
                                         ALLOC_F_OWN_SEGMENT, &p), 0);
    cr_assert_eq(alloc_cache_block_size(f.cache, p, &size), 0);
    cr_expect_eq(size, 2 * MiB);
    void *small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_expect_eq((size_t)alloc_test_stats(f.cache).pool_reserved[ALLOC_POOL_SMALL].current,
                 4 * MiB, "the other small block takes a segment of its own pool");
    alloc_test_free(f.cache, small);
    alloc_test_free(f.cache, p);
    alloc_fixture_fini(&f);
}
