/* test_cache_stress.c -- the caching allocator under several threads.
 *
 * Each thread runs random alloc/free operations on its own stream with
 * random sizes (512 B .. 24 MiB, skewed small) and random owners, writes a
 * stamp into every block it holds (host memory) and checks the stamp before
 * freeing: two blocks handed out over each other show up as a broken stamp.
 * Now and then a thread empties or trims the cache, polls fences, or takes
 * a snapshot and checks that its blocks tile every segment. At the end the
 * main thread checks the stats against the snapshot and the owners, frees
 * everything, and the fixture's fini asserts that nothing is left.
 *
 * Behaviour only: the op counts keep the runtime to a few seconds under
 * ASan; no timing is asserted. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "tests/alloc/alloc_test.h"

#define KiB ALLOC_TEST_KiB
#define MiB ALLOC_TEST_MiB

#define STRESS_SLOTS 64
#define STRESS_MAX_THREADS 4
#define STRESS_OWNERS 4
#define STRESS_STAMP_STRIDE 512

typedef struct stress_slot {
    void *ptr;
    size_t bytes;
    uint64_t stamp;
} stress_slot_t;

typedef struct stress_shared {
    alloc_cache_t *cache;
    alloc_provider_t *fault;
    alloc_owner_t owners[STRESS_OWNERS];
    bool manual_fences;
    int n_threads;
    int n_ops;
} stress_shared_t;

typedef struct stress_thread {
    pthread_t tid;
    stress_shared_t *sh;
    int id;
    alloc_stream_t stream;
    uint64_t rng;
    stress_slot_t slots[STRESS_SLOTS];
    uint64_t n_allocs, n_frees, n_records;
    char error[256]; /* the first problem seen; empty when none */
} stress_thread_t;

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static size_t rng_range(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* 512 B .. 24 MiB, most of it small. */
static size_t stress_size(uint64_t *s)
{
    unsigned r = (unsigned)(rng_next(s) % 100);
    if (r < 50)
        return rng_range(s, 512, 16 * KiB);
    if (r < 80)
        return rng_range(s, 16 * KiB, 256 * KiB);
    if (r < 92)
        return rng_range(s, 256 * KiB, MiB);
    if (r < 98)
        return rng_range(s, MiB + 1, 10 * MiB);
    return rng_range(s, 10 * MiB, 24 * MiB);
}

/* Stamps every STRESS_STAMP_STRIDE bytes and the last 8 bytes. */
static void stamp_write(const stress_slot_t *sl)
{
    char *p = sl->ptr;
    for (size_t off = 0; off + 8 <= sl->bytes; off += STRESS_STAMP_STRIDE) {
        uint64_t v = sl->stamp ^ off;
        memcpy(p + off, &v, 8);
    }
    uint64_t v = ~sl->stamp;
    memcpy(p + sl->bytes - 8, &v, 8);
}

/* 0, or -1 with the first broken offset in *bad_off. */
static int stamp_check(const stress_slot_t *sl, size_t *bad_off)
{
    const char *p = sl->ptr;
    uint64_t v;
    memcpy(&v, p + sl->bytes - 8, 8);
    if (v != ~sl->stamp) {
        *bad_off = sl->bytes - 8;
        return -1;
    }
    for (size_t off = 0; off + 8 <= sl->bytes; off += STRESS_STAMP_STRIDE) {
        memcpy(&v, p + off, 8);
        /* the last-8-bytes stamp may overwrite the final stride's word */
        if (v != (sl->stamp ^ off) && off + 16 <= sl->bytes) {
            *bad_off = off;
            return -1;
        }
    }
    return 0;
}

static void *stress_run(void *arg)
{
    stress_thread_t *t = arg;
    stress_shared_t *sh = t->sh;
    char why[200];
    for (int op = 0; op < sh->n_ops && !t->error[0]; op++) {
        unsigned r = (unsigned)(rng_next(&t->rng) % 2000);
        if (r == 0) {
            alloc_cache_empty(sh->cache, ALLOC_RELEASE_EMPTY);
            continue;
        }
        if (r == 1) {
            alloc_cache_trim(sh->cache, rng_range(&t->rng, 0, 64 * MiB), ALLOC_RELEASE_TRIM);
            continue;
        }
        if (r == 2) {
            alloc_snapshot_t *s = NULL;
            if (alloc_cache_snapshot(sh->cache, &s) != 0) {
                snprintf(t->error, sizeof(t->error), "snapshot: %s", fs_errmsg());
                break;
            }
            if (alloc_test_snapshot_problem(s, why, sizeof(why)) != 0)
                snprintf(t->error, sizeof(t->error), "op %d: %s", op, why);
            alloc_snapshot_free(s);
            continue;
        }
        if (r < 8 && sh->manual_fences) {
            alloc_fault_fences_pass(sh->fault);
            continue;
        }
        if (r < 12) {
            alloc_cache_process_fences(sh->cache);
            alloc_cache_stats_t st;
            alloc_cache_stats(sh->cache, &st);
            continue;
        }

        stress_slot_t *sl = &t->slots[rng_next(&t->rng) % STRESS_SLOTS];
        if (sl->ptr) {
            size_t bad = 0;
            if (stamp_check(sl, &bad) != 0) {
                snprintf(t->error, sizeof(t->error),
                         "op %d: block %p (%zu bytes) overwritten at offset %zu", op, sl->ptr,
                         sl->bytes, bad);
                break;
            }
            if (alloc_cache_free(sh->cache, sl->ptr) != 0) {
                snprintf(t->error, sizeof(t->error), "op %d: free %p: %s", op, sl->ptr,
                         fs_errmsg());
                break;
            }
            sl->ptr = NULL;
            t->n_frees++;
            continue;
        }
        size_t bytes = stress_size(&t->rng);
        alloc_owner_t owner = sh->owners[rng_next(&t->rng) % STRESS_OWNERS];
        void *p = NULL;
        int rc = alloc_cache_alloc(sh->cache, bytes, t->stream, owner, &p);
        if (rc != 0) {
            snprintf(t->error, sizeof(t->error), "op %d: alloc %zu: %s", op, bytes, fs_errmsg());
            break;
        }
        size_t bs = 0;
        if (alloc_cache_block_size(sh->cache, p, &bs) != 0 || bs < bytes ||
            bs % ALLOC_MIN_BLOCK_BYTES != 0 || (uintptr_t)p % ALLOC_MIN_BLOCK_BYTES != 0) {
            snprintf(t->error, sizeof(t->error), "op %d: block %p of %zu bytes for %zu", op, p,
                     bs, bytes);
            break;
        }
        sl->ptr = p;
        sl->bytes = bytes;
        sl->stamp = ((uint64_t)t->id << 56) ^ (rng_next(&t->rng) >> 8);
        stamp_write(sl);
        t->n_allocs++;
        if (sh->manual_fences && rng_next(&t->rng) % 16 == 0) {
            alloc_stream_t other = 1 + (alloc_stream_t)(rng_next(&t->rng) % (uint64_t)sh->n_threads);
            if (alloc_cache_record_stream(sh->cache, p, other) != 0) {
                snprintf(t->error, sizeof(t->error), "op %d: record_stream: %s", op, fs_errmsg());
                break;
            }
            t->n_records++;
        }
    }
    return NULL;
}

/* Per-owner sums equal the cache's totals (no other thread running). */
static void check_owner_sums(const stress_shared_t *sh)
{
    alloc_cache_stats_t st = alloc_test_stats(sh->cache);
    int64_t allocated = 0, requested = 0, blocks = 0;
    for (int i = 0; i < STRESS_OWNERS; i++) {
        alloc_owner_stats_t os;
        cr_assert_eq(alloc_cache_owner_stats(sh->cache, sh->owners[i], &os), 0);
        allocated += os.allocated.current;
        requested += os.requested.current;
        blocks += os.blocks.current;
    }
    cr_expect_eq(allocated, st.allocated.current, "owners hold %lld, cache allocated %lld",
                 (long long)allocated, (long long)st.allocated.current);
    cr_expect_eq(requested, st.requested.current, "owners requested %lld, cache %lld",
                 (long long)requested, (long long)st.requested.current);
    cr_expect_eq(blocks, st.blocks.current, "owners' blocks %lld, cache %lld", (long long)blocks,
                 (long long)st.blocks.current);
}

static void run_stress(int n_threads, int n_ops, bool manual_fences, uint64_t seed)
{
    cr_assert_leq(n_threads, STRESS_MAX_THREADS);
    alloc_fault_config_t fc = {.manual_fences = manual_fences};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    stress_shared_t sh = {.cache = f.cache, .fault = f.fault, .manual_fences = manual_fences,
                          .n_threads = n_threads, .n_ops = n_ops};
    sh.owners[0] = ALLOC_OWNER_SERVER;
    for (int i = 1; i < STRESS_OWNERS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "model-%d", i);
        cr_assert_eq(alloc_cache_owner_create(f.cache, name, &sh.owners[i]), 0);
    }
    static stress_thread_t threads[STRESS_MAX_THREADS];
    memset(threads, 0, sizeof(threads));
    for (int i = 0; i < n_threads; i++) {
        threads[i].sh = &sh;
        threads[i].id = i;
        threads[i].stream = (alloc_stream_t)(i + 1);
        threads[i].rng = seed * 1000 + (uint64_t)i;
        cr_assert_eq(pthread_create(&threads[i].tid, NULL, stress_run, &threads[i]), 0);
    }
    for (int i = 0; i < n_threads; i++)
        pthread_join(threads[i].tid, NULL);
    for (int i = 0; i < n_threads; i++)
        cr_expect_eq(threads[i].error[0], '\0', "thread %d (seed %llu): %s", i,
                     (unsigned long long)seed, threads[i].error);

    /* Quiescent: the stats, the snapshot and the owners agree. */
    alloc_test_check_consistent(f.cache);
    check_owner_sums(&sh);
    size_t live = 0;
    uint64_t n_allocs = 0;
    for (int i = 0; i < n_threads; i++) {
        n_allocs += threads[i].n_allocs;
        for (int j = 0; j < STRESS_SLOTS; j++) {
            stress_slot_t *sl = &threads[i].slots[j];
            if (sl->ptr) {
                size_t bs = 0;
                cr_assert_eq(alloc_cache_block_size(f.cache, sl->ptr, &bs), 0);
                live += bs;
            }
        }
    }
    cr_expect_gt(n_allocs, (uint64_t)n_threads * (uint64_t)n_ops / 4, "%llu allocs",
                 (unsigned long long)n_allocs);
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.allocated.current, live, "allocated %lld, live blocks %zu",
                 (long long)st.allocated.current, live);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, (uint64_t)st.reserved.current);

    /* Free what is left (checking stamps), let every fence pass. */
    for (int i = 0; i < n_threads; i++) {
        for (int j = 0; j < STRESS_SLOTS; j++) {
            stress_slot_t *sl = &threads[i].slots[j];
            if (!sl->ptr)
                continue;
            size_t bad = 0;
            cr_expect_eq(stamp_check(sl, &bad), 0, "block %p (%zu bytes) overwritten at %zu",
                         sl->ptr, sl->bytes, bad);
            alloc_test_free(f.cache, sl->ptr);
            sl->ptr = NULL;
        }
    }
    if (manual_fences)
        cr_assert_eq(alloc_fault_fences_pass(f.fault), 0);
    alloc_cache_process_fences(f.cache);
    alloc_test_check_consistent(f.cache);
    check_owner_sums(&sh);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.active.current, 0);
    for (int i = 1; i < STRESS_OWNERS; i++)
        cr_expect_eq(alloc_cache_owner_destroy(f.cache, sh.owners[i]), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_cache_stress, threads_on_own_streams_never_share_a_block, .timeout = 120)
{
    run_stress(3, 20000, false, 1);
}

Test(alloc_cache_stress, four_threads_with_manual_fences_and_record_stream, .timeout = 120)
{
    run_stress(4, 12000, true, 2);
}
