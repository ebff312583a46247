/* test_arena.c -- the bump arena's contract (alloc/arena.h): alignment,
 * bumping within a block, growth by max(first block, bytes + align), O(1)
 * reset that keeps blocks, release, bad alignment, and an OOM while growing
 * that leaves the arena as it was. Every test ends with the cache fixture's
 * fini, so every block the arena took must be back in the cache. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "alloc/arena.h"
#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "tests/alloc/alloc_test.h"

#define KiB ALLOC_TEST_KiB
#define MiB ALLOC_TEST_MiB

static const alloc_stream_t STREAM = 5;

static alloc_arena_t *arena_new(alloc_cache_t *c, size_t first, alloc_owner_t owner,
                                unsigned flags)
{
    alloc_arena_t *a = NULL;
    cr_assert_eq(alloc_arena_create(c, first, STREAM, owner, flags, &a), 0, "arena: %s",
                 fs_errmsg());
    cr_assert_not_null(a);
    return a;
}

static void *arena_get(alloc_arena_t *a, size_t bytes, size_t align)
{
    void *p = NULL;
    cr_assert_eq(alloc_arena_alloc(a, bytes, align, &p), 0, "arena alloc %zu/%zu: %s", bytes,
                 align, fs_errmsg());
    cr_assert_not_null(p);
    return p;
}

static alloc_arena_stats_t arena_stats(const alloc_arena_t *a)
{
    alloc_arena_stats_t st;
    memset(&st, 0, sizeof(st));
    alloc_arena_stats(a, &st);
    return st;
}

/* The start of the only allocated cache block (the arena's first block). */
static uintptr_t only_allocated_block(alloc_cache_t *c)
{
    alloc_snapshot_t *s = alloc_test_snapshot(c);
    uintptr_t addr = 0;
    int n = 0;
    for (size_t i = 0; i < s->n_segments; i++)
        for (size_t j = 0; j < s->segments[i].n_blocks; j++)
            if (s->segments[i].blocks[j].state == ALLOC_BLOCK_ALLOCATED) {
                addr = s->segments[i].address + s->segments[i].blocks[j].offset;
                n++;
            }
    alloc_snapshot_free(s);
    cr_assert_eq(n, 1, "%d allocated blocks", n);
    return addr;
}

Test(alloc_arena, takes_its_first_block_from_the_cache)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    cr_expect_eq(alloc_arena_cache(a), f.cache);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.capacity_bytes, 64 * KiB);
    cr_expect_eq(st.used_bytes, 0);
    cr_expect_eq(st.peak_used_bytes, 0);
    cr_expect_eq(st.n_blocks, 1);
    cr_expect_eq(st.n_resets, 0);
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)cs.allocated.current, 64 * KiB);
    cr_expect_eq(cs.blocks.current, 1);
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_block_info_t *b = NULL;
    cr_assert(alloc_test_find_block(s, (void *)only_allocated_block(f.cache), NULL, &b));
    cr_expect_eq(b->stream, STREAM, "the arena's stream goes to the cache");
    alloc_snapshot_free(s);
    alloc_arena_destroy(a);
    alloc_arena_destroy(NULL);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, aligns_every_slice)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 256 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    static const size_t aligns[] = {1, 2, 8, 64, 256, 512, 1024, 4096, 16, 4096, 1};
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
            void *p = arena_get(a, 1 + 37 * i, aligns[i]);
            cr_expect_eq((uintptr_t)p % aligns[i], 0, "align %zu: %p", aligns[i], p);
        }
        void *d = arena_get(a, 3, 0);
        cr_expect_eq((uintptr_t)d % 256, 0, "align 0 means 256: %p", d);
    }
    cr_expect_eq(arena_stats(a).n_blocks, 1);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, bumps_within_a_block)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    uintptr_t base = only_allocated_block(f.cache);
    char *p0 = arena_get(a, 100, 0);
    cr_expect_eq((uintptr_t)p0, base, "the first slice starts the block");
    cr_expect_eq(arena_stats(a).used_bytes, 100);
    char *p1 = arena_get(a, 100, 0);
    cr_expect_eq(p1, p0 + 256, "padded to 256");
    cr_expect_eq(arena_stats(a).used_bytes, 356, "padding counts as used");
    char *p2 = arena_get(a, 8, 8);
    cr_expect_eq(p2, p1 + 104);
    char *p3 = arena_get(a, 1000, 1);
    cr_expect_eq(p3, p2 + 8);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.used_bytes, 356 + 4 + 8 + 1000);
    cr_expect_eq(st.peak_used_bytes, st.used_bytes);
    cr_expect_eq(st.n_blocks, 1);
    cr_expect_eq(alloc_test_stats(f.cache).blocks.total, 1, "no cache traffic while bumping");
    memset(p0, 0xab, 100); /* host memory: the slices are usable */
    memset(p3, 0xcd, 1000);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, grows_by_max_of_first_block_and_bytes_plus_align)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    char *first = (char *)only_allocated_block(f.cache);
    char *p0 = arena_get(a, 60 * KiB, 256);
    cr_expect_eq(p0, first);
    /* 8K does not fit the 4K left: a new block of max(64K, 8K + 256). */
    char *p1 = arena_get(a, 8 * KiB, 256);
    cr_expect(p1 < first || p1 >= first + 64 * KiB, "p1 is in a new block");
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.n_blocks, 2);
    cr_expect_eq(st.capacity_bytes, 128 * KiB);
    cr_expect_eq(alloc_test_block_size(f.cache, p1), 64 * KiB);
    /* 100K - 256 does not fit the 56K left: max(64K, 100K - 256 + 256). */
    char *p2 = arena_get(a, 100 * KiB - 256, 256);
    st = arena_stats(a);
    cr_expect_eq(st.n_blocks, 3);
    cr_expect_eq(st.capacity_bytes, 228 * KiB);
    cr_expect_eq(alloc_test_block_size(f.cache, p2), 100 * KiB);
    cr_expect_geq(st.used_bytes, 168 * KiB - 256);
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)cs.allocated.current, st.capacity_bytes,
                 "the cache counts exactly the arena's blocks");
    cr_expect_eq(cs.blocks.current, 3);
    /* A slice that fits what is left of the current block bumps there. */
    char *p3 = arena_get(a, 200, 256);
    cr_expect_eq(p3, p2 + 100 * KiB - 256);
    cr_expect_eq(arena_stats(a).n_blocks, 3);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, reset_rewinds_and_keeps_every_block)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t o = 0;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "batch", &o), 0);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, o, ALLOC_F_NONE);
    static const size_t sizes[] = {60 * KiB, 8 * KiB, 100 * KiB - 256, 1000, 30 * KiB};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    void *round1[N];
    for (int i = 0; i < N; i++)
        round1[i] = arena_get(a, sizes[i], 256);
    alloc_arena_stats_t before = arena_stats(a);
    alloc_cache_stats_t cs_before = alloc_test_stats(f.cache);
    cr_expect_geq(before.n_blocks, 3);

    alloc_arena_reset(a);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.used_bytes, 0);
    cr_expect_eq(st.capacity_bytes, before.capacity_bytes);
    cr_expect_eq(st.n_blocks, before.n_blocks);
    cr_expect_eq(st.n_resets, 1);
    cr_expect_eq(st.peak_used_bytes, before.peak_used_bytes, "the peak survives a reset");
    cr_expect_geq(st.peak_used_bytes, before.used_bytes);
    cr_expect_eq(alloc_test_stats(f.cache).allocated.current, cs_before.allocated.current,
                 "blocks stay with the arena");
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, o, &os), 0);
    cr_expect_eq((size_t)os.allocated.current, st.capacity_bytes, "counted to the arena's owner");

    /* The same round again lands on the same addresses with no cache call. */
    for (int i = 0; i < N; i++) {
        void *p = arena_get(a, sizes[i], 256);
        cr_expect_eq(p, round1[i], "slice %d: %p, first round %p", i, p, round1[i]);
    }
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq(cs.blocks.total, cs_before.blocks.total, "no new cache blocks after reset");
    cr_expect_eq(cs.n_device_allocs, cs_before.n_device_allocs);
    st = arena_stats(a);
    cr_expect_eq(st.n_blocks, before.n_blocks);
    cr_expect_eq(st.used_bytes, before.used_bytes);

    alloc_arena_destroy(a);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, o), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_arena, release_gives_every_block_back_and_the_arena_is_reusable)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    arena_get(a, 60 * KiB, 0);
    arena_get(a, 200 * KiB, 0);
    arena_get(a, 3 * MiB, 0); /* a large-pool block */
    cr_expect_eq(arena_stats(a).n_blocks, 3);
    alloc_arena_release(a);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.n_blocks, 0);
    cr_expect_eq(st.capacity_bytes, 0);
    cr_expect_eq(st.used_bytes, 0);
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq(cs.allocated.current, 0);
    cr_expect_eq(cs.blocks.current, 0);
    cr_expect_eq(cs.requested.current, 0);

    /* Used again: a new first block of the first block's size. */
    void *p = arena_get(a, 10, 0);
    st = arena_stats(a);
    cr_expect_eq(st.n_blocks, 1);
    cr_expect_eq(st.capacity_bytes, 64 * KiB);
    cr_expect_eq((uintptr_t)p, only_allocated_block(f.cache));
    cr_expect_eq((size_t)alloc_test_stats(f.cache).allocated.current, 64 * KiB);
    alloc_arena_release(a);
    alloc_arena_release(a); /* twice: nothing to give back */
    cr_expect_eq(alloc_test_stats(f.cache).allocated.current, 0);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, rejects_bad_alignment_without_change)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    char *p0 = arena_get(a, 100, 64);
    alloc_arena_stats_t before = arena_stats(a);
    static const size_t bad[] = {3, 48, 100, 8192, (size_t)1 << 20, SIZE_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        void *p = NULL;
        fs_err_clear();
        cr_expect_eq(alloc_arena_alloc(a, 16, bad[i], &p), FS_EINVAL, "align %zu", bad[i]);
        cr_expect_neq(fs_errmsg()[0], '\0');
    }
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(memcmp(&st, &before, sizeof(st)), 0, "arena stats changed");
    char *p1 = arena_get(a, 16, 64);
    cr_expect_eq(p1, p0 + 128, "bumping continues where it was");
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, oom_while_growing_leaves_the_arena_unchanged)
{
    /* Room for the small segment of the first block, not for a large one. */
    alloc_fault_config_t fc = {.capacity_bytes = 3 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    char *p0 = arena_get(a, 1000, 0);
    alloc_arena_stats_t before = arena_stats(a);
    alloc_cache_stats_t cs_before = alloc_test_stats(f.cache);
    void *p = NULL;
    cr_expect_eq(alloc_arena_alloc(a, 3 * MiB, 0, &p), FS_ENOMEM);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(memcmp(&st, &before, sizeof(st)), 0, "arena stats changed");
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq(cs.allocated.current, cs_before.allocated.current);
    cr_expect_eq(cs.blocks.current, cs_before.blocks.current);
    cr_expect_eq(cs.n_ooms, cs_before.n_ooms + 1);
    char *p1 = arena_get(a, 16, 0);
    cr_expect_eq(p1, p0 + 1024, "bumping continues in the first block");
    /* Failing again at the provider level: the same. */
    alloc_fault_counts_t cnt = alloc_test_fault_counts(f.fault);
    alloc_fault_config_t fail = {.fail_from_call = cnt.n_alloc_calls + 1, .fail_count = 100};
    cr_assert_eq(alloc_fault_configure(f.fault, &fail), 0);
    before = arena_stats(a);
    cr_expect_eq(alloc_arena_alloc(a, 2 * MiB, 0, &p), FS_ENOMEM, "needs a new segment");
    st = arena_stats(a);
    cr_expect_eq(memcmp(&st, &before, sizeof(st)), 0, "arena stats changed");
    alloc_fault_config_t none = {0};
    cr_assert_eq(alloc_fault_configure(f.fault, &none), 0);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, create_fails_cleanly_when_the_cache_cannot_serve)
{
    alloc_fault_config_t fc = {.fail_from_call = 1, .fail_count = 10};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    alloc_arena_t *a = NULL;
    cr_expect_eq(alloc_arena_create(f.cache, 64 * KiB, STREAM, ALLOC_OWNER_SERVER, ALLOC_F_NONE,
                                    &a),
                 FS_ENOMEM);
    cr_expect_null(a);
    cr_expect_eq(alloc_arena_create(f.cache, 64 * KiB, STREAM, 999, ALLOC_F_NONE, &a), FS_EINVAL,
                 "unknown owner");
    cr_expect_null(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, passes_its_flags_to_the_cache)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *old = alloc_test_alloc(f.cache, 12 * MiB, STREAM);
    alloc_test_free(f.cache, old); /* a free 12 MiB segment in the large pool */
    alloc_arena_t *a = arena_new(f.cache, 14 * MiB, ALLOC_OWNER_SERVER,
                                 ALLOC_F_RELEASE_BEFORE_GROW);
    alloc_cache_stats_t cs = alloc_test_stats(f.cache);
    cr_expect_eq(cs.released_bytes[ALLOC_RELEASE_ARENA], 12 * MiB,
                 "the cache dropped its free segment before growing for the arena");
    cr_expect_eq((size_t)cs.reserved.current, 14 * MiB);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}

Test(alloc_arena, counts_used_and_peak_across_resets)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_arena_t *a = arena_new(f.cache, 64 * KiB, ALLOC_OWNER_SERVER, ALLOC_F_NONE);
    arena_get(a, 10 * KiB, 256);
    arena_get(a, 10 * KiB, 256);
    cr_expect_eq(arena_stats(a).used_bytes, 20 * KiB);
    alloc_arena_reset(a);
    arena_get(a, 5 * KiB, 256);
    alloc_arena_stats_t st = arena_stats(a);
    cr_expect_eq(st.used_bytes, 5 * KiB);
    cr_expect_eq(st.peak_used_bytes, 20 * KiB);
    alloc_arena_reset(a);
    alloc_arena_reset(a);
    st = arena_stats(a);
    cr_expect_eq(st.n_resets, 3);
    cr_expect_eq(st.used_bytes, 0);
    cr_expect_eq(st.capacity_bytes, 64 * KiB);
    alloc_arena_destroy(a);
    alloc_fixture_fini(&f);
}
