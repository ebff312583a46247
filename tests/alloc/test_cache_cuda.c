/* test_cache_cuda.c -- the caching allocator over the real cuda provider:
 * device segments, the limit from a fraction of device memory, the OOM
 * ladder against cudaMalloc, and stream fences as CUDA events. Every test
 * skips with the probe's reason where no GPU is usable. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/clock.h"
#include "common/error.h"

#define MIB ((size_t)1 << 20)
/* CUDA's reserved handles: 1 is cudaStreamLegacy, 2 cudaStreamPerThread.
 * Both are valid streams to record events on without creating any. */
#define STREAM_DEFAULT ((alloc_stream_t)0)
#define STREAM_PER_THREAD ((alloc_stream_t)2)

typedef struct cuda_fixture {
    alloc_provider_t *cuda;
    alloc_cache_t *cache;
} cuda_fixture_t;

static void cuda_fixture_init(cuda_fixture_t *f, const alloc_cache_config_t *cfg)
{
    int n = 0;
    if (alloc_cuda_probe(&n) != 0)
        cr_skip("no usable GPU: %s", fs_errmsg());
    cr_assert_eq(alloc_provider_cuda_create(0, &f->cuda), 0, "%s", fs_errmsg());
    cr_assert_eq(alloc_cache_create(f->cuda, cfg, &f->cache), 0, "%s", fs_errmsg());
}

/* Invariants hold, stats back to zero, then nothing reserved after empty. */
static void cuda_fixture_fini(cuda_fixture_t *f)
{
    cr_expect_eq(alloc_cache_check(f->cache), 0, "invariants at end: %s", fs_errmsg());
    alloc_cache_stats_t st;
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.allocated.current, 0);
    cr_expect_eq(st.active.current, 0);
    alloc_cache_empty(f->cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.reserved.current, 0, "reserved after empty: %lld",
                 (long long)st.reserved.current);
    cr_expect_eq(st.n_device_allocs, st.n_device_frees);
    alloc_cache_destroy(f->cache);
    alloc_provider_destroy(f->cuda);
}

/* Runs alloc_cache_process_fences until `pred` holds, for at most 10 s. */
static bool wait_until(alloc_cache_t *c, bool (*pred)(alloc_cache_t *))
{
    uint64_t deadline = fs_clock_real_ns() + 10ull * 1000000000ull;
    while (!pred(c)) {
        if (fs_clock_real_ns() > deadline)
            return false;
        alloc_cache_process_fences(c);
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    return true;
}

static bool nothing_pending(alloc_cache_t *c)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(c, &st);
    return st.active.current == st.allocated.current;
}

Test(alloc_cache_cuda, serves_device_segments_and_reuses_them)
{
    cuda_fixture_t f;
    cuda_fixture_init(&f, NULL);
    void *small = NULL, *mid = NULL, *big = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 1000, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &small), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 3 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &mid), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 64 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &big), 0);
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq(st.reserved.current, (int64_t)(2 * MIB + 20 * MIB + 64 * MIB));
    cr_expect_eq(st.n_device_allocs, 3);
    cr_assert_eq(alloc_cache_free(f.cache, big), 0);
    void *again = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 64 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &again), 0);
    cr_expect_eq(again, big, "a freed device block is reused on its own stream at once");
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq(st.n_device_allocs, 3);
    cr_assert_eq(alloc_cache_free(f.cache, again), 0);
    cr_assert_eq(alloc_cache_free(f.cache, mid), 0);
    cr_assert_eq(alloc_cache_free(f.cache, small), 0);
    cuda_fixture_fini(&f);
}

Test(alloc_cache_cuda, fails_an_impossible_request_and_keeps_working)
{
    cuda_fixture_t f;
    cuda_fixture_init(&f, NULL);
    void *keep = NULL, *huge = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 4 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &keep), 0);
    int rc = alloc_cache_alloc(f.cache, (size_t)1 << 50, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &huge);
    cr_expect_eq(rc, FS_ENOMEM, "rc %d: %s", rc, fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "requested") && strstr(fs_errmsg(), "reserved"), "%s",
              fs_errmsg());
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq(st.n_ooms, 1);
    cr_expect_eq(st.allocated.current, (int64_t)(4 * MIB));
    cr_assert_eq(alloc_cache_free(f.cache, keep), 0);
    cr_assert_eq(alloc_cache_alloc(f.cache, 4 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &keep), 0);
    cr_assert_eq(alloc_cache_free(f.cache, keep), 0);
    cuda_fixture_fini(&f);
}

Test(alloc_cache_cuda, limits_reserved_to_a_fraction_of_device_memory)
{
    cuda_fixture_t f;
    cuda_fixture_init(&f, &(alloc_cache_config_t){.fraction = 0.001});
    size_t free_b = 0, total = 0;
    cr_assert_eq(alloc_provider_mem_info(f.cuda, &free_b, &total), 0);
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq(st.limit_bytes, (uint64_t)((double)total * 0.001));
    void *p = NULL;
    cr_expect_eq(alloc_cache_alloc(f.cache, st.limit_bytes + MIB, STREAM_DEFAULT,
                                   ALLOC_OWNER_SERVER, &p),
                 FS_ENOMEM);
    cr_assert_eq(alloc_cache_alloc(f.cache, MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &p), 0);
    cr_assert_eq(alloc_cache_free(f.cache, p), 0);
    cuda_fixture_fini(&f);
}

Test(alloc_cache_cuda, reuses_across_streams_after_a_cuda_event)
{
    cuda_fixture_t f;
    cuda_fixture_init(&f, NULL);
    void *a = NULL, *b = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 64 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &a), 0);
    cr_assert_eq(alloc_cache_free(f.cache, a), 0);
    /* The first miss on the other stream records an event on stream 0, and
     * takes a new segment; once the event has passed, the next request on
     * that stream reuses the block. Misses stay allocated, so the only free
     * 64 MiB block is `a`. */
    void *misses[64];
    size_t n_misses = 0;
    for (;;) {
        cr_assert_eq(alloc_cache_alloc(f.cache, 64 * MIB, STREAM_PER_THREAD, ALLOC_OWNER_SERVER,
                                       &b), 0);
        if (b == a)
            break;
        cr_assert(n_misses < 64, "block never reused across streams");
        misses[n_misses++] = b;
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    cr_expect_geq(n_misses, 1, "reuse must wait for an event recorded after the miss");
    for (size_t i = 0; i < n_misses; i++)
        cr_assert_eq(alloc_cache_free(f.cache, misses[i]), 0);
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_geq(st.n_cross_stream_reuses, 1);
    cr_assert_eq(alloc_cache_free(f.cache, b), 0);
    cuda_fixture_fini(&f);
}

Test(alloc_cache_cuda, record_stream_defers_the_free_until_the_event_passes)
{
    cuda_fixture_t f;
    cuda_fixture_init(&f, NULL);
    void *p = NULL;
    cr_assert_eq(alloc_cache_alloc(f.cache, 8 * MIB, STREAM_DEFAULT, ALLOC_OWNER_SERVER, &p), 0);
    cr_assert_eq(alloc_cache_record_stream(f.cache, p, STREAM_PER_THREAD), 0);
    cr_assert_eq(alloc_cache_free(f.cache, p), 0);
    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    cr_expect_eq(st.allocated.current, 0);
    cr_expect(wait_until(f.cache, nothing_pending), "the event on the recorded stream never passed");
    cuda_fixture_fini(&f);
}
