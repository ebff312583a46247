/* test_cache_oom.c -- the caching allocator's hard limit and OOM ladder
 * (alloc/cache.h): max_reserved_bytes and fraction of the provider's
 * capacity; releasing cached segments and retrying; the FS_ENOMEM message;
 * and a fixed scenario rerun with the provider failing at every call index,
 * after which nothing may leak. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "common/parse.h"
#include "tests/alloc/alloc_test.h"

#define KiB ALLOC_TEST_KiB
#define MiB ALLOC_TEST_MiB

static const alloc_stream_t STREAM_A = 1;

/* Whether `msg` names `bytes`, as a decimal count or as fs_format_size
 * writes it. */
static bool alloc_test_names_bytes(const char *msg, uint64_t bytes)
{
    char dec[32], human[32];
    snprintf(dec, sizeof(dec), "%llu", (unsigned long long)bytes);
    fs_format_size(bytes, human, sizeof(human));
    return strstr(msg, dec) != NULL || strstr(msg, human) != NULL;
}

/* ---- the hard limit and the OOM ladder ------------------------------------- */

Test(alloc_cache_limit, max_reserved_bytes_caps_reserved)
{
    alloc_cache_config_t cfg = {.max_reserved_bytes = 24 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &cfg);
    cr_expect_eq(alloc_test_stats(f.cache).limit_bytes, 24 * MiB);
    void *a = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    void *b = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A); /* exactly at the limit: fine */
    void *c = NULL;
    cr_expect_eq(alloc_cache_alloc(f.cache, 512, STREAM_A, ALLOC_OWNER_SERVER, &c), FS_ENOMEM,
                 "a new 2 MiB segment would exceed the limit");
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq((size_t)st.reserved.current, 24 * MiB);
    cr_expect_eq((size_t)st.reserved.peak, 24 * MiB);
    cr_expect_eq(st.n_ooms, 1);
    cr_expect_eq((size_t)st.allocated.current, 24 * MiB);
    cr_expect_eq(st.blocks.current, 2);
    cr_expect_eq(alloc_test_fault_counts(f.fault).n_alloc_calls, 2,
                 "the limit is checked before the provider is asked");
    alloc_test_free(f.cache, a);
    alloc_test_free(f.cache, b);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_limit, fraction_of_provider_capacity_caps_reserved)
{
    alloc_fault_config_t fc = {.capacity_bytes = 64 * MiB};
    alloc_cache_config_t cfg = {.fraction = 0.5};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, &cfg);
    cr_expect_eq(alloc_test_stats(f.cache).limit_bytes, 32 * MiB);
    void *a = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A);
    void *b = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A);
    void *c = NULL;
    cr_expect_eq(alloc_cache_alloc(f.cache, 12 * MiB, STREAM_A, ALLOC_OWNER_SERVER, &c),
                 FS_ENOMEM);
    cr_expect_eq(alloc_test_stats(f.cache).n_ooms, 1);
    cr_expect_eq((size_t)alloc_test_stats(f.cache).reserved.current, 32 * MiB);
    alloc_test_free(f.cache, a);
    alloc_test_free(f.cache, b);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_limit, the_smaller_of_fraction_and_max_reserved_wins)
{
    alloc_fault_config_t fc = {.capacity_bytes = 64 * MiB};
    alloc_cache_config_t cfg1 = {.fraction = 0.5, .max_reserved_bytes = 20 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, &cfg1);
    cr_expect_eq(alloc_test_stats(f.cache).limit_bytes, 20 * MiB);
    alloc_fixture_fini(&f);
    alloc_cache_config_t cfg2 = {.fraction = 0.25, .max_reserved_bytes = 40 * MiB};
    alloc_fixture_init(&f, &fc, &cfg2);
    cr_expect_eq(alloc_test_stats(f.cache).limit_bytes, 16 * MiB);
    alloc_fixture_fini(&f);
    alloc_fixture_init(&f, NULL, NULL);
    cr_expect_eq(alloc_test_stats(f.cache).limit_bytes, (uint64_t)SIZE_MAX, "no limit set");
    alloc_fixture_fini(&f);
}

Test(alloc_cache_oom, fails_with_a_message_naming_request_allocated_reserved_and_limit)
{
    alloc_cache_config_t cfg = {.max_reserved_bytes = 24 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &cfg);
    void *s = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A); /* reserved 2 MiB */
    void *l = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A); /* reserved 14 MiB */
    alloc_cache_stats_t before = alloc_test_stats(f.cache);
    fs_err_clear();
    void *p = NULL;
    int rc = alloc_cache_alloc(f.cache, 15 * MiB, STREAM_A, ALLOC_OWNER_SERVER, &p);
    cr_assert_eq(rc, FS_ENOMEM, "rc %d", rc);
    const char *msg = fs_errmsg();
    cr_expect(alloc_test_names_bytes(msg, 15 * MiB), "message names the request: %s", msg);
    cr_expect(alloc_test_names_bytes(msg, 12 * MiB + 4 * KiB), "message names allocated: %s", msg);
    cr_expect(alloc_test_names_bytes(msg, 14 * MiB), "message names reserved: %s", msg);
    cr_expect(alloc_test_names_bytes(msg, 24 * MiB), "message names the limit: %s", msg);
    alloc_cache_stats_t after = alloc_test_stats(f.cache);
    cr_expect_eq(after.n_ooms, before.n_ooms + 1);
    cr_expect_eq(after.allocated.current, before.allocated.current);
    cr_expect_eq(after.reserved.current, before.reserved.current);
    cr_expect_eq(after.requested.current, before.requested.current);
    cr_expect_eq(after.blocks.current, before.blocks.current);
    cr_expect_eq(after.segments.current, before.segments.current);
    cr_expect_eq(after.allocated.total, before.allocated.total);
    cr_expect_eq(after.n_device_allocs, before.n_device_allocs);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, (uint64_t)after.reserved.current);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, s);
    alloc_test_free(f.cache, l);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_oom, releases_cached_segments_and_retries_at_the_limit)
{
    alloc_cache_config_t cfg = {.max_reserved_bytes = 24 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &cfg);
    void *big = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    void *small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, big); /* 12 MiB cached; reserved 14 MiB */
    void *p = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A); /* 14 + 16 > 24 */
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_retries, 1);
    cr_expect_eq(st.n_ooms, 0);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_OOM], 12 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_OOM], 1);
    cr_expect_eq((size_t)st.reserved.current, 18 * MiB, "the small segment in use stays");
    cr_expect_eq(st.segments.current, 2);
    cr_expect_eq(st.n_device_frees, 1);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, 18 * MiB);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, small);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_oom, releases_cached_segments_and_retries_when_the_provider_fails)
{
    alloc_fault_config_t fc = {.capacity_bytes = 24 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, &fc, NULL);
    void *big = alloc_test_alloc(f.cache, 12 * MiB, STREAM_A);
    void *small = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);
    alloc_test_free(f.cache, big);
    void *p = alloc_test_alloc(f.cache, 16 * MiB, STREAM_A); /* the provider refuses 14 + 16 */
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_retries, 1);
    cr_expect_eq(st.n_ooms, 0);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_OOM], 12 * MiB);
    cr_expect_eq((size_t)st.reserved.current, 18 * MiB);
    alloc_fault_counts_t cnt = alloc_test_fault_counts(f.fault);
    cr_expect_eq(cnt.n_alloc_failed, 1);
    cr_expect_eq(cnt.live_bytes, 18 * MiB);
    cr_expect_eq(st.n_device_allocs, 3, "failed provider calls are not device allocs");

    /* Nothing left to release: the next failure is an OOM. */
    void *q = NULL;
    cr_expect_eq(alloc_cache_alloc(f.cache, 8 * MiB, STREAM_A, ALLOC_OWNER_SERVER, &q), FS_ENOMEM);
    st = alloc_test_stats(f.cache);
    cr_expect_eq(st.n_ooms, 1);
    cr_expect_eq((size_t)st.reserved.current, 18 * MiB);
    cr_expect_eq(alloc_test_fault_counts(f.fault).live_bytes, 18 * MiB);
    alloc_test_check_consistent(f.cache);
    alloc_test_free(f.cache, p);
    alloc_test_free(f.cache, small);
    alloc_fixture_fini(&f);
}

Test(alloc_cache_oom, ladder_releases_free_segments_of_both_pools)
{
    alloc_cache_config_t cfg = {.max_reserved_bytes = 30 * MiB};
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &cfg);
    void *s = alloc_test_alloc(f.cache, 4 * KiB, STREAM_A);   /* small segment, 2 MiB */
    void *l = alloc_test_alloc(f.cache, 2 * MiB, STREAM_A);   /* large segment, 20 MiB */
    void *k = alloc_test_alloc(f.cache, 8 * MiB, STREAM_A);   /* from the same 20 MiB */
    cr_assert_eq(alloc_test_stats(f.cache).segments.current, 2);
    alloc_test_free(f.cache, s);
    alloc_test_free(f.cache, l);
    alloc_test_free(f.cache, k);
    void *p = alloc_test_alloc(f.cache, 28 * MiB, STREAM_A); /* 22 + 28 > 30; 28 alone fits */
    alloc_cache_stats_t st = alloc_test_stats(f.cache);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_OOM], 22 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_OOM], 2);
    cr_expect_eq((size_t)st.reserved.current, 28 * MiB);
    alloc_test_free(f.cache, p);
    alloc_fixture_fini(&f);
}

/* ---- the provider failing at every call of a scenario ----------------------- */

typedef enum { OP_ALLOC, OP_FREE, OP_EMPTY, OP_TRIM } scen_kind_t;

typedef struct scen_op {
    scen_kind_t kind;
    int slot;
    size_t bytes; /* alloc size, or trim's keep */
    alloc_stream_t stream;
} scen_op_t;

#define A_(slot, bytes, stream) {OP_ALLOC, slot, bytes, stream}
#define F_(slot) {OP_FREE, slot, 0, 0}

static const scen_op_t scenario[] = {
    A_(0, 4 * KiB, 1),
    A_(1, MiB, 1),
    A_(2, 3 * MiB, 1),
    A_(3, 12 * MiB, 2),
    A_(4, 100, 1),
    F_(1),
    A_(5, 700 * KiB, 2),
    A_(6, 5 * MiB, 1),
    F_(3),
    {OP_EMPTY, 0, 0, 0},
    A_(7, 14 * MiB, 1),
    A_(8, 11 * MiB, 2),
    {OP_EMPTY, 0, 0, 0},
    F_(0),
    A_(9, 2 * MiB + 1, 1),
    F_(2),
    A_(10, 30 * MiB, 2),
    F_(6),
    {OP_TRIM, 0, 4 * MiB, 0},
    A_(3, 12 * MiB, 1),
    A_(6, 200 * KiB, 2),
    A_(11, 512 * KiB, 1),
    A_(12, 9 * MiB, 2),
    F_(4),
    F_(5),
    A_(13, 0, 1),
    A_(14, 20 * MiB, 1),
    F_(7),
    {OP_EMPTY, 0, 0, 0},
    A_(15, 6 * MiB, 2),
    F_(8),
    F_(9),
    F_(3),
    {OP_TRIM, 0, 0, 0},
    A_(3, 800 * KiB, 1),
    A_(0, 3 * MiB / 2, 1),
    F_(10),
    F_(11),
    A_(1, 16 * MiB, 2),
    A_(2, 1500 * KiB, 2),
    F_(12),
    F_(13),
    F_(14),
    F_(15),
    F_(3),
    F_(6),
    F_(0),
    F_(1),
    F_(2),
    {OP_EMPTY, 0, 0, 0},
};
#define N_SLOTS 16

/* Runs the scenario on a fresh fixture with `fc`; failed allocs are skipped
 * (and their frees). Asserts after every op that the provider holds exactly
 * `reserved` and the cache counts exactly the live blocks; returns the
 * provider's alloc calls and the number of failed allocs. */
static void run_scenario(const alloc_fault_config_t *fc, uint64_t *n_calls, uint64_t *n_failed)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, fc, NULL);
    void *ptr[N_SLOTS] = {0};
    size_t size[N_SLOTS] = {0};
    uint64_t failed = 0;
    for (size_t i = 0; i < sizeof(scenario) / sizeof(scenario[0]); i++) {
        const scen_op_t *op = &scenario[i];
        switch (op->kind) {
        case OP_ALLOC: {
            cr_assert_null(ptr[op->slot], "scenario bug at op %zu", i);
            void *p = NULL;
            int rc = alloc_cache_alloc(f.cache, op->bytes, op->stream, ALLOC_OWNER_SERVER, &p);
            if (rc == 0) {
                ptr[op->slot] = p;
                size[op->slot] = alloc_test_block_size(f.cache, p);
            } else {
                cr_assert_eq(rc, FS_ENOMEM, "op %zu (fail_from %llu x%llu): rc %d: %s", i,
                             (unsigned long long)fc->fail_from_call,
                             (unsigned long long)fc->fail_count, rc, fs_errmsg());
                cr_expect_neq(fs_errmsg()[0], '\0');
                failed++;
            }
            break;
        }
        case OP_FREE:
            if (ptr[op->slot]) {
                alloc_test_free(f.cache, ptr[op->slot]);
                ptr[op->slot] = NULL;
                size[op->slot] = 0;
            }
            break;
        case OP_EMPTY:
            alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
            break;
        case OP_TRIM:
            alloc_cache_trim(f.cache, op->bytes, ALLOC_RELEASE_TRIM);
            break;
        }
        size_t live = 0;
        for (int s = 0; s < N_SLOTS; s++)
            live += size[s];
        alloc_cache_stats_t st = alloc_test_stats(f.cache);
        alloc_fault_counts_t cnt = alloc_test_fault_counts(f.fault);
        cr_assert_eq((size_t)st.allocated.current, live,
                     "op %zu (fail_from %llu x%llu): allocated %lld, live blocks %zu", i,
                     (unsigned long long)fc->fail_from_call, (unsigned long long)fc->fail_count,
                     (long long)st.allocated.current, live);
        cr_assert_eq(cnt.live_bytes, (uint64_t)st.reserved.current,
                     "op %zu (fail_from %llu x%llu): provider holds %llu, reserved %lld", i,
                     (unsigned long long)fc->fail_from_call, (unsigned long long)fc->fail_count,
                     (unsigned long long)cnt.live_bytes, (long long)st.reserved.current);
        cr_assert_eq(st.n_ooms, failed, "op %zu: n_ooms %llu, failed %llu", i,
                     (unsigned long long)st.n_ooms, (unsigned long long)failed);
        cr_assert_eq(cnt.live_allocs, (uint64_t)st.segments.current);
    }
    alloc_test_check_consistent(f.cache);
    for (int s = 0; s < N_SLOTS; s++)
        if (ptr[s])
            alloc_test_free(f.cache, ptr[s]);
    *n_calls = alloc_test_fault_counts(f.fault).n_alloc_calls;
    *n_failed = failed;
    alloc_fixture_fini(&f);
}

Test(alloc_cache_fault, scenario_survives_a_provider_failure_at_every_call)
{
    alloc_fault_config_t none = {0};
    uint64_t k = 0, failed = 0;
    run_scenario(&none, &k, &failed);
    cr_assert_eq(failed, 0);
    cr_assert_geq(k, 8, "the scenario takes %llu segments", (unsigned long long)k);
    for (uint64_t count = 1; count <= 3; count++) {
        for (uint64_t i = 1; i <= k; i++) {
            alloc_fault_config_t fc = {.fail_from_call = i, .fail_count = count};
            uint64_t calls = 0;
            run_scenario(&fc, &calls, &failed);
            /* The ladder asks the provider at most three times per alloc
             * (first try, retry after releasing, a tight segment). */
            if (count == 3)
                cr_expect_geq(failed, 1, "a run of %llu failures from call %llu: no alloc failed",
                              (unsigned long long)count, (unsigned long long)i);
        }
    }
}
