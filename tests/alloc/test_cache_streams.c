/* test_cache_streams.c -- the caching allocator's stream rules
 * (alloc/cache.h): a free block is reused at once by its own stream and by
 * another only after a fence on its stream passed; record_stream keeps a
 * freed block pending until the recorded streams' fences pass; free blocks
 * of different streams never coalesce. Fences are the fault provider's
 * manual ones, so every step is exact. */
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
static const alloc_stream_t STREAM_C = 3;

/* ---- streams and fences --------------------------------------------------- */

Test(alloc_cache_streams, reuses_a_block_across_streams_at_once_without_fences)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B);
    cr_expect_eq(q, p, "no fences: the block is reusable by any stream");
    cr_expect_eq(alloc_test_block_info(f.cache, q).stream, STREAM_B, "the block is now stream B's");
    cr_expect_eq(alloc_test_stats(f.cache).n_device_allocs, 1);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, same_stream_reuses_at_once_with_pending_fences)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    cr_assert(alloc_provider_has_fences(f.fault));
    void *p = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    alloc_test_free(f.cache, p);
    void *q = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_eq(q, p);
    cr_expect_eq(alloc_test_stats(f.cache).n_cross_stream_reuses, 0);
    alloc_test_free(f.cache, q);
    void *s = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, s);
    void *t = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_expect_eq(t, s);
    alloc_test_free(f.cache, t);
    cr_expect_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, other_stream_waits_for_the_fence_before_reuse)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    void *x = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A); /* a whole 12 MiB segment */
    alloc_test_free(f.cache, x);

    void *y = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B);
    cr_expect_neq(y, x, "stream B must not reuse A's block before A's fence passed");
    alloc_cache_process_fences(f.cache);
    void *z = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B);
    cr_expect_neq(z, x, "still not after polling an unpassed fence");
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_cross_stream_reuses, 0);
    cr_expect_eq(st.n_device_allocs, 3);
    cr_expect_eq((size_t)st.active.current, 24 * MiB, "a free block waiting for reuse is not active");
    cr_expect_eq(alloc_test_block_info(f.cache, x).state, ALLOC_BLOCK_FREE);

    cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    void *w = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B);
    cr_expect_eq(w, x, "after A's fence passed, B reuses the block");
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_cross_stream_reuses, 1);
    cr_expect_eq(st.n_device_allocs, 3);
    alloc_block_info_t bi = alloc_test_block_info(f.cache, w);
    cr_expect_eq(bi.stream, STREAM_B, "the reused block is tagged with stream B");
    cr_expect_eq(bi.state, ALLOC_BLOCK_ALLOCATED);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, y);
    alloc_test_free(f.cache, z);
    alloc_test_free(f.cache, w);
    cr_expect_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, does_not_coalesce_free_blocks_of_different_streams)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    /* One 20 MiB segment on A, filled: x (2 MiB) | y (18 MiB). */
    void *x = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);
    void *y = alloc_test_alloc(f.cache, 18 * MiB, STREAM_A);
    cr_assert_eq((char *)y, (char *)x + 2 * MiB);
    cr_assert_eq(alloc_test_stats(f.cache).segments.current, 1);
    alloc_test_free(f.cache, x);
    void *z = alloc_test_alloc(f.cache, 2 * MiB, STREAM_B); /* a new segment for B */
    cr_expect_neq(z, x);
    cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_cache_process_fences(f.cache); /* learn the fence passed before B's next alloc */
    void *x2 = alloc_test_alloc(f.cache, 2 * MiB, STREAM_B);
    cr_assert_eq(x2, x, "B takes x after A's fence: the best fit");
    alloc_test_free(f.cache, x2); /* free on B, next to y (allocated) */
    alloc_test_free(f.cache, y);  /* free on A, next to B's free x */
    alloc_snapshot_t *s = alloc_test_snapshot(f.cache);
    const alloc_segment_info_t *sg = alloc_test_find_segment(s, x);
    cr_assert_not_null(sg);
    cr_assert_eq(sg->n_blocks, 2, "x (stream B) and y (stream A) stay apart");
    cr_expect_eq(sg->blocks[0].size, 2 * MiB);
    cr_expect_eq(sg->blocks[0].stream, STREAM_B);
    cr_expect_eq(sg->blocks[0].state, ALLOC_BLOCK_FREE);
    cr_expect_eq(sg->blocks[1].size, 18 * MiB);
    cr_expect_eq(sg->blocks[1].stream, STREAM_A);
    cr_expect_eq(sg->blocks[1].state, ALLOC_BLOCK_FREE);
    alloc_snapshot_free(s);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, z);
    cr_expect_eq(alloc_fault_fences_pass(f.fault), 0);
    /* Fully free, though in two blocks: empty releases it. */
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, recorded_stream_keeps_a_freed_block_pending_until_its_fence)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    void *p = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_assert_eq(alloc_cache_record_stream(f.cache, p, STREAM_C), 0, "%s", fs_errmsg());
    alloc_test_free(f.cache, p);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.allocated.current, 0);
    cr_expect_eq(st.blocks.current, 0);
    cr_expect_eq((size_t)st.active.current, 12 * MiB, "a pending block is active");
    cr_expect_eq(st.free_cached_bytes, 0);
    cr_expect_eq(alloc_test_block_info(f.cache, p).state, ALLOC_BLOCK_PENDING);
    alloc_test_check_consistent(f.cache);
    cr_expect_eq(alloc_cache_free(f.cache, p), FS_EINVAL, "a pending block is already freed");
    cr_expect_eq((size_t)alloc_test_stats(f.cache).active.current, 12 * MiB);

    /* Not reusable, even by its own stream, and not released by empty. */
    alloc_cache_process_fences(f.cache);
    cr_expect_eq(alloc_test_block_info(f.cache, p).state, ALLOC_BLOCK_PENDING);
    void *q = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_neq(q, p);
    cr_expect_eq(alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY), 0);
    cr_expect_eq((size_t)alloc_test_stats(f.cache).reserved.current, 24 * MiB);

    cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_cache_process_fences(f.cache);
    cr_expect_eq(alloc_test_block_info(f.cache, p).state, ALLOC_BLOCK_FREE);
    st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.active.current, 12 * MiB, "only q is active now");
    cr_expect_eq((size_t)st.free_cached_bytes, 12 * MiB);
    void *r = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_eq(r, p, "after the fence the block is reused by its stream");
    alloc_test_free(f.cache, q);
    alloc_test_free(f.cache, r);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, next_alloc_processes_passed_fences)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    void *p = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_assert_eq(alloc_cache_record_stream(f.cache, p, STREAM_B), 0);
    cr_assert_eq(alloc_cache_record_stream(f.cache, p, STREAM_C), 0);
    alloc_test_free(f.cache, p);
    cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    void *q = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    cr_expect_eq(q, p, "the alloc polled the passed fences and reused the block");
    cr_expect_eq(alloc_test_stats(f.cache).n_device_allocs, 1);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, recorded_stream_without_fences_frees_at_once)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_assert_eq(alloc_cache_record_stream(f.cache, p, STREAM_B), 0);
    alloc_test_free(f.cache, p);
    alloc_cache_process_fences(f.cache);
    cr_expect_eq(alloc_test_stats(f.cache).active.current, 0);
    void *q = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    cr_expect_eq(q, p);
    alloc_test_free(f.cache, q);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_streams, record_stream_of_unknown_pointer_is_einval)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    int local = 0;
    cr_expect_eq(alloc_cache_record_stream(f.cache, &local, STREAM_B), FS_EINVAL);
    void *p = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, p);
    cr_expect_eq(alloc_cache_record_stream(f.cache, p, STREAM_B), FS_EINVAL,
                 "a freed block cannot be recorded");
    alloc_fixture_fini(&f);
}

/* A stream under CUDA graph capture gets no fence from another thread (it
 * would join the capture); its freed blocks wait until the capture ends. */
Test(alloc_cache_streams, a_capturing_stream_is_not_fenced_until_its_capture_ends)
{
    alloc_fault_config_t fc = {.manual_fences = true};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    void *x = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    alloc_test_free(f.cache, x);
    cr_assert_eq(alloc_cache_stream_capture(f.cache, STREAM_A, true), 0);
    alloc_fault_counts_t before, after;
    cr_assert_eq(alloc_fault_counts(f.fault, &before), 0);
    alloc_cache_process_fences(f.cache);
    void *y = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B); /* a miss polls every stream */
    cr_assert_eq(alloc_fault_counts(f.fault, &after), 0);
    cr_expect_eq(after.n_fence_records, before.n_fence_records,
                 "a fence was recorded on a stream under capture");
    cr_expect_neq(y, x, "B reused A's block with no fence on A");

    cr_assert_eq(alloc_cache_stream_capture(f.cache, STREAM_A, false), 0);
    alloc_cache_process_fences(f.cache);
    cr_assert_eq(alloc_fault_counts(f.fault, &after), 0);
    cr_expect_gt(after.n_fence_records, before.n_fence_records, "no fence after the capture ended");
    cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    void *z = alloc_test_alloc(f.cache, 12 * MiB, STREAM_B);
    cr_expect_eq(z, x, "after the capture and the fence, B reuses A's block");
    alloc_test_free(f.cache, y);
    alloc_test_free(f.cache, z);
    cr_expect_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_fixture_fini(&f);
}
