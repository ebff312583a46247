/* test_policy.c -- the release policies (alloc/policy.c) through the cache's
 * hooks: names and parameters, and what each policy releases and when, with
 * a manual clock so time-driven decisions are exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/arena.h"
#include "alloc/policy.h"
#include "common/clock.h"
#include "tests/alloc/alloc_test.h"

#define MiB ((size_t)1 << 20)
#define MS ((uint64_t)1000000)
#define SEC ((uint64_t)1000000000)

static const char *const kind_names[ALLOC_POLICY_N] = {"cache", "periodic", "arena", "idle_trim",
                                                       "watermark"};

static alloc_cache_stats_t cache_stats(alloc_fixture_t *f)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(f->cache, &st);
    return st;
}

static alloc_policy_stats_t policy_stats(alloc_policy_t *p)
{
    alloc_policy_stats_t st;
    alloc_policy_stats(p, &st);
    return st;
}

/* Creates a policy of `kind` and attaches it to the fixture's cache, which
 * owns it from then on; returns it borrowed. */
static alloc_policy_t *attach(alloc_fixture_t *f, alloc_policy_kind_t kind,
                              const alloc_policy_params_t *params)
{
    alloc_policy_t *p = NULL;
    cr_assert_eq(alloc_policy_create(kind, params, &p), 0, "create %s: %s",
                 alloc_policy_kind_name(kind), fs_errmsg());
    cr_assert_eq(alloc_cache_policy_add(f->cache, p), 0, "add %s: %s",
                 alloc_policy_kind_name(kind), fs_errmsg());
    return p;
}

static void *take(alloc_fixture_t *f, size_t bytes)
{
    void *ptr = NULL;
    cr_assert_eq(alloc_cache_alloc(f->cache, bytes, 0, ALLOC_OWNER_SERVER, &ptr), 0,
                 "alloc %zu: %s", bytes, fs_errmsg());
    return ptr;
}

static void give(alloc_fixture_t *f, void *ptr)
{
    cr_assert_eq(alloc_cache_free(f->cache, ptr), 0, "free: %s", fs_errmsg());
}

/* Leaves one free cached segment of `bytes` (>= 10 MiB: its own segment). */
static void cache_free_segment(alloc_fixture_t *f, size_t bytes)
{
    give(f, take(f, bytes));
}

static void request(alloc_fixture_t *f)
{
    alloc_cache_request_begin(f->cache);
    alloc_cache_request_end(f->cache);
}

/* How many segments of exactly `bytes` the cache holds, and how many of
 * them are fully free. */
static void segments_of_size(alloc_fixture_t *f, size_t bytes, size_t *n, size_t *n_free)
{
    alloc_snapshot_t *snap = NULL;
    cr_assert_eq(alloc_cache_snapshot(f->cache, &snap), 0, "snapshot: %s", fs_errmsg());
    *n = *n_free = 0;
    for (size_t i = 0; i < snap->n_segments; i++) {
        if (snap->segments[i].size != bytes)
            continue;
        (*n)++;
        if (snap->segments[i].allocated_bytes == 0)
            (*n_free)++;
    }
    alloc_snapshot_free(snap);
}

static void expect_reserved(alloc_fixture_t *f, size_t bytes)
{
    alloc_cache_stats_t st = cache_stats(f);
    cr_expect_eq(st.reserved.current, (int64_t)bytes, "reserved %lld MiB, expected %zu MiB",
                 (long long)(st.reserved.current / (int64_t)MiB), bytes / MiB);
}

/* ---- names and parameters --------------------------------------------------- */

Test(alloc_policy_names, parse_accepts_every_name_and_names_round_trip)
{
    for (int k = 0; k < ALLOC_POLICY_N; k++) {
        alloc_policy_kind_t kind = ALLOC_POLICY_N;
        cr_assert_eq(alloc_policy_kind_parse(kind_names[k], &kind), 0, "%s: %s", kind_names[k],
                     fs_errmsg());
        cr_expect_eq(kind, (alloc_policy_kind_t)k);
        cr_expect_str_eq(alloc_policy_kind_name(kind), kind_names[k]);
    }
}

Test(alloc_policy_names, parse_rejects_unknown_names_listing_the_valid_ones)
{
    const char *bad[] = {"", "Periodic", "idle-trim", "lru"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        alloc_policy_kind_t kind = ALLOC_POLICY_WATERMARK;
        fs_err_clear();
        cr_expect_eq(alloc_policy_kind_parse(bad[i], &kind), FS_EINVAL, "'%s' accepted", bad[i]);
        cr_expect_eq(kind, ALLOC_POLICY_WATERMARK, "'%s' wrote the kind", bad[i]);
        const char *msg = fs_errmsg();
        cr_expect(strstr(msg, bad[i]) != NULL, "message does not quote '%s': %s", bad[i], msg);
        for (int k = 0; k < ALLOC_POLICY_N; k++)
            cr_expect(strstr(msg, kind_names[k]) != NULL, "message does not list %s: %s",
                      kind_names[k], msg);
    }
    alloc_policy_kind_t kind;
    cr_expect_eq(alloc_policy_kind_parse(NULL, &kind), FS_EINVAL);
}

Test(alloc_policy_names, name_of_a_bad_kind_is_unknown)
{
    cr_expect_str_eq(alloc_policy_kind_name(ALLOC_POLICY_N), "unknown");
    cr_expect_str_eq(alloc_policy_kind_name((alloc_policy_kind_t)-1), "unknown");
}

Test(alloc_policy_params, defaults_are_documented_values)
{
    alloc_policy_params_t p;
    memset(&p, 0xff, sizeof p);
    alloc_policy_params_default(&p);
    cr_expect_eq(p.periodic.every_n_requests, 1000);
    cr_expect_eq(p.periodic.every_ns, 60 * SEC);
    cr_expect_eq(p.arena.min_block_bytes, 0);
    cr_expect_eq(p.idle_trim.after_ns, 30 * SEC);
    cr_expect_eq(p.idle_trim.keep_bytes, 0);
    cr_expect_eq(p.watermark.fraction, 0.8);
}

/* Expects creating `kind` with `params` to fail with FS_EINVAL and a message
 * containing every string of `needles` (NULL-terminated). */
static void expect_rejected(alloc_policy_kind_t kind, const alloc_policy_params_t *params,
                            const char *const *needles)
{
    static char sentinel;
    alloc_policy_t *const before = (alloc_policy_t *)&sentinel;
    alloc_policy_t *p = before; /* must stay untouched */
    fs_err_clear();
    cr_expect_eq(alloc_policy_create(kind, params, &p), FS_EINVAL, "%s accepted",
                 alloc_policy_kind_name(kind));
    cr_expect_eq(p, before, "out written on error");
    for (size_t i = 0; needles[i]; i++)
        cr_expect(strstr(fs_errmsg(), needles[i]) != NULL, "message lacks '%s': %s", needles[i],
                  fs_errmsg());
}

static void expect_accepted(alloc_policy_kind_t kind, const alloc_policy_params_t *params)
{
    alloc_policy_t *p = NULL;
    cr_expect_eq(alloc_policy_create(kind, params, &p), 0, "%s rejected: %s",
                 alloc_policy_kind_name(kind), fs_errmsg());
    alloc_policy_destroy(p);
}

Test(alloc_policy_params, periodic_needs_a_count_or_a_time)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.periodic.every_n_requests = 0;
    p.periodic.every_ns = 0;
    expect_rejected(ALLOC_POLICY_PERIODIC, &p,
                    (const char *const[]){"periodic", "every_n_requests", "every_ns", NULL});
    p.periodic.every_n_requests = 5;
    expect_accepted(ALLOC_POLICY_PERIODIC, &p);
    p.periodic.every_n_requests = 0;
    p.periodic.every_ns = 1;
    expect_accepted(ALLOC_POLICY_PERIODIC, &p);
}

Test(alloc_policy_params, idle_trim_needs_a_positive_after)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.idle_trim.after_ns = 0;
    expect_rejected(ALLOC_POLICY_IDLE_TRIM, &p, (const char *const[]){"idle_trim", "after_ns", NULL});
    p.idle_trim.after_ns = 1;
    expect_accepted(ALLOC_POLICY_IDLE_TRIM, &p);
}

Test(alloc_policy_params, watermark_fraction_must_be_in_zero_one)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.watermark.fraction = 1.5;
    expect_rejected(ALLOC_POLICY_WATERMARK, &p,
                    (const char *const[]){"policy watermark: fraction 1.5 is out of range (0, 1]",
                                          NULL});
    p.watermark.fraction = 1.0000001;
    expect_rejected(ALLOC_POLICY_WATERMARK, &p, (const char *const[]){"fraction 1.0000001 is", NULL});
    const double bad[] = {0.0, -0.25, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.watermark.fraction = bad[i];
        expect_rejected(ALLOC_POLICY_WATERMARK, &p,
                        (const char *const[]){"watermark", "fraction", NULL});
    }
    const double good[] = {1e-6, 0.5, 1.0};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        p.watermark.fraction = good[i];
        expect_accepted(ALLOC_POLICY_WATERMARK, &p);
    }
}

Test(alloc_policy_params, other_kinds_ignore_other_kinds_parameters)
{
    alloc_policy_params_t p;
    memset(&p, 0, sizeof p); /* invalid for periodic, idle_trim and watermark */
    expect_accepted(ALLOC_POLICY_CACHE, &p);
    expect_accepted(ALLOC_POLICY_ARENA, &p);
}

Test(alloc_policy_params, unknown_kind_is_rejected)
{
    expect_rejected(ALLOC_POLICY_N, NULL, (const char *const[]){"kind", NULL});
    expect_rejected((alloc_policy_kind_t)-3, NULL, (const char *const[]){"kind", NULL});
}

Test(alloc_policy_params, create_by_name_makes_every_kind_with_defaults)
{
    for (int k = 0; k < ALLOC_POLICY_N; k++) {
        alloc_policy_t *p = NULL;
        cr_assert_eq(alloc_policy_create_by_name(kind_names[k], NULL, &p), 0, "%s: %s",
                     kind_names[k], fs_errmsg());
        cr_expect_eq(alloc_policy_kind(p), (alloc_policy_kind_t)k);
        alloc_policy_stats_t st = policy_stats(p);
        cr_expect_eq(st.n_releases, 0);
        cr_expect_eq(st.released_bytes, 0);
        cr_expect_eq(st.n_batches, 0);
        alloc_policy_destroy(p);
    }
    alloc_policy_destroy(NULL);
}

Test(alloc_policy_params, create_by_name_rejects_unknown_and_bad_params)
{
    alloc_policy_t *p = NULL;
    fs_err_clear();
    cr_expect_eq(alloc_policy_create_by_name("never", NULL, &p), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "never") != NULL, "%s", fs_errmsg());
    cr_expect_null(p);
    alloc_policy_params_t params;
    alloc_policy_params_default(&params);
    params.watermark.fraction = 2.0;
    cr_expect_eq(alloc_policy_create_by_name("watermark", &params, &p), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "fraction 2 is out of range") != NULL, "%s", fs_errmsg());
    cr_expect_null(p);
}

/* ---- cache -------------------------------------------------------------------- */

Test(alloc_policy_cache, keeps_segments_after_frees_requests_and_ticks)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    fs_clock_manual_install(0);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_CACHE, NULL);
    void *a = take(&f, 12 * MiB);
    void *b = take(&f, 2 * MiB); /* a 20 MiB segment */
    give(&f, a);
    give(&f, b);
    for (int i = 0; i < 10; i++) {
        request(&f);
        fs_clock_manual_advance(3600 * SEC);
        alloc_cache_tick(f.cache);
    }
    expect_reserved(&f, 32 * MiB);
    alloc_cache_stats_t st = cache_stats(&f);
    for (int r = 0; r < ALLOC_RELEASE_N; r++)
        cr_expect_eq(st.released_bytes[r], 0, "released under %s",
                     alloc_release_reason_name((alloc_release_reason_t)r));
    cr_expect_eq(policy_stats(p).n_releases, 0);
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

/* A batch without an arena policy: one cache block of the plan, counted to
 * its owner, back at batch end. */
static void expect_plain_batch(alloc_fixture_t *f, size_t plan_bytes, alloc_owner_t owner)
{
    alloc_batch_t *batch = NULL;
    cr_assert_eq(alloc_cache_batch_begin(f->cache, plan_bytes, 0, owner, &batch), 0, "%s",
                 fs_errmsg());
    cr_expect_null(alloc_batch_arena(batch), "no arena policy attached, yet an arena");
    void *block = alloc_batch_ptr(batch);
    cr_assert_not_null(block);
    cr_expect_eq((uintptr_t)block % ALLOC_BATCH_ALIGN, 0, "block %p misaligned", block);
    size_t size = 0;
    cr_assert_eq(alloc_cache_block_size(f->cache, block, &size), 0, "%s", fs_errmsg());
    cr_expect_geq(size, plan_bytes);
    memset(block, 0xab, plan_bytes);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f->cache, owner, &os), 0);
    cr_expect_eq(os.allocated.current, (int64_t)size, "the block is not counted to its owner");
    cr_expect_eq(alloc_cache_check(f->cache), 0, "%s", fs_errmsg());
    alloc_cache_batch_end(f->cache, batch);
    cr_expect_eq(cache_stats(f).allocated.current, 0, "the batch's block was not given back");
    cr_expect_eq(alloc_cache_check(f->cache), 0, "%s", fs_errmsg());
}

Test(alloc_policy_cache, batch_without_an_arena_policy_is_one_cache_block)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_owner_t model;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model", &model), 0, "%s", fs_errmsg());
    expect_plain_batch(&f, 30 * MiB, model);
    expect_plain_batch(&f, 0, model);

    attach(&f, ALLOC_POLICY_CACHE, NULL);
    alloc_policy_params_t params;
    alloc_policy_params_default(&params);
    attach(&f, ALLOC_POLICY_PERIODIC, &params);
    attach(&f, ALLOC_POLICY_WATERMARK, &params);
    expect_plain_batch(&f, 30 * MiB, model);
    alloc_cache_batch_end(f.cache, NULL); /* a no-op */
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, model), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

/* ---- periodic ----------------------------------------------------------------- */

static alloc_policy_params_t periodic_params(uint64_t every_n, uint64_t every_ns)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.periodic.every_n_requests = every_n;
    p.periodic.every_ns = every_ns;
    return p;
}

Test(alloc_policy_periodic, empties_at_the_nth_request_end_not_before)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_params_t params = periodic_params(3, 0);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_PERIODIC, &params);

    for (int round = 1; round <= 2; round++) {
        cache_free_segment(&f, 12 * MiB);
        void *held = take(&f, 14 * MiB);
        request(&f);
        request(&f);
        alloc_cache_request_begin(f.cache);
        alloc_cache_tick(f.cache);
        expect_reserved(&f, 26 * MiB);
        cr_expect_eq(policy_stats(p).n_releases, (uint64_t)round - 1, "released before the 3rd end");
        alloc_cache_request_end(f.cache);
        /* The held block's segment stays; the free one went. */
        expect_reserved(&f, 14 * MiB);
        give(&f, held);
        alloc_cache_stats_t st = cache_stats(&f);
        alloc_policy_stats_t ps = policy_stats(p);
        cr_expect_eq(ps.n_releases, (uint64_t)round);
        cr_expect_eq(ps.released_bytes, (uint64_t)round * 12 * MiB);
        cr_expect_eq(st.released_bytes[ALLOC_RELEASE_PERIODIC], ps.released_bytes);
        cr_expect_eq(st.released_segments[ALLOC_RELEASE_PERIODIC], (uint64_t)round);
        /* Start the next round with nothing cached. */
        alloc_cache_empty(f.cache, ALLOC_RELEASE_EMPTY);
    }
    alloc_fixture_fini(&f);
}

Test(alloc_policy_periodic, empties_once_every_ns_has_passed_not_before)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    fs_clock_manual_install(5 * SEC);
    alloc_policy_params_t params = periodic_params(0, 1 * SEC);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_PERIODIC, &params);

    /* By tick: the timer started at creation. */
    cache_free_segment(&f, 12 * MiB);
    fs_clock_manual_advance(999 * MS);
    alloc_cache_tick(f.cache);
    request(&f);
    expect_reserved(&f, 12 * MiB);
    fs_clock_manual_advance(1 * MS);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 0);
    cr_expect_eq(policy_stats(p).n_releases, 1);

    /* By request end: the timer restarted at the release. */
    cache_free_segment(&f, 16 * MiB);
    fs_clock_manual_advance(999 * MS);
    alloc_cache_tick(f.cache);
    request(&f);
    expect_reserved(&f, 16 * MiB);
    fs_clock_manual_advance(1 * MS);
    alloc_cache_request_begin(f.cache);
    expect_reserved(&f, 16 * MiB); /* a begin never releases */
    alloc_cache_request_end(f.cache);
    expect_reserved(&f, 0);

    alloc_policy_stats_t ps = policy_stats(p);
    cr_expect_eq(ps.n_releases, 2);
    cr_expect_eq(ps.released_bytes, 28 * MiB);
    cr_expect_eq(cache_stats(&f).released_bytes[ALLOC_RELEASE_PERIODIC], 28 * MiB);
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(alloc_policy_periodic, an_empty_by_count_restarts_the_timer)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    fs_clock_manual_install(0);
    alloc_policy_params_t params = periodic_params(2, 1 * SEC);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_PERIODIC, &params);

    cache_free_segment(&f, 12 * MiB);
    fs_clock_manual_advance(600 * MS);
    request(&f);
    request(&f); /* 2nd end at 600 ms: by count */
    expect_reserved(&f, 0);
    cache_free_segment(&f, 12 * MiB);
    fs_clock_manual_advance(600 * MS); /* 1.2 s from creation, 0.6 s from the empty */
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 12 * MiB);
    fs_clock_manual_advance(400 * MS);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 0);
    cr_expect_eq(policy_stats(p).n_releases, 2);
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(alloc_policy_periodic, an_empty_with_nothing_free_counts_no_release)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_params_t params = periodic_params(1, 0);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_PERIODIC, &params);
    void *held = take(&f, 12 * MiB);
    request(&f);
    expect_reserved(&f, 12 * MiB);
    cr_expect_eq(policy_stats(p).n_releases, 0);
    give(&f, held);
    request(&f);
    expect_reserved(&f, 0);
    cr_expect_eq(policy_stats(p).n_releases, 1);
    alloc_fixture_fini(&f);
}

/* ---- idle_trim ---------------------------------------------------------------- */

static alloc_policy_params_t idle_trim_params(uint64_t after_ns, size_t keep_bytes)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.idle_trim.after_ns = after_ns;
    p.idle_trim.keep_bytes = keep_bytes;
    return p;
}

Test(alloc_policy_idle_trim, waits_for_no_request_in_flight_and_after_ns)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    fs_clock_manual_install(0);
    alloc_policy_params_t params = idle_trim_params(5 * SEC, 0);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_IDLE_TRIM, &params);
    cache_free_segment(&f, 12 * MiB);

    alloc_cache_request_begin(f.cache);
    alloc_cache_request_begin(f.cache);
    fs_clock_manual_advance(60 * SEC);
    alloc_cache_tick(f.cache);
    alloc_cache_request_end(f.cache);
    fs_clock_manual_advance(60 * SEC);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 12 * MiB); /* one request still in flight */

    alloc_cache_request_end(f.cache);
    fs_clock_manual_advance(5 * SEC - 1);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 12 * MiB);
    fs_clock_manual_advance(1);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 0);
    alloc_policy_stats_t ps = policy_stats(p);
    cr_expect_eq(ps.n_releases, 1);
    cr_expect_eq(ps.released_bytes, 12 * MiB);
    cr_expect_eq(cache_stats(&f).released_bytes[ALLOC_RELEASE_IDLE_TRIM], 12 * MiB);
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(alloc_policy_idle_trim, trims_oldest_to_keep_once_per_idle_period)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    fs_clock_manual_install(0);
    alloc_policy_params_t params = idle_trim_params(1 * SEC, 16 * MiB);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_IDLE_TRIM, &params);

    void *held = take(&f, 18 * MiB);
    void *a = take(&f, 12 * MiB);
    void *b = take(&f, 14 * MiB);
    void *c = take(&f, 16 * MiB);
    give(&f, a);
    give(&f, b);
    give(&f, c);
    request(&f);
    fs_clock_manual_advance(1 * SEC);
    alloc_cache_tick(f.cache);
    /* 42 MiB free, keep 16: the two oldest free segments go. */
    expect_reserved(&f, 34 * MiB);
    size_t n, n_free;
    segments_of_size(&f, 16 * MiB, &n, &n_free);
    cr_expect_eq(n_free, 1, "the newest free segment went before older ones");

    /* Refill the cache without requests: no second trim in this period.
     * C is reused whole, so D and E get segments of their own, E newest. */
    c = take(&f, 16 * MiB);
    void *d = take(&f, 20 * MiB);
    void *e = take(&f, 14 * MiB);
    give(&f, c);
    give(&f, d);
    give(&f, e);
    fs_clock_manual_advance(100 * SEC);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 68 * MiB);
    cr_expect_eq(policy_stats(p).n_releases, 1);

    /* New activity, then idle again: C and D go, E (14 <= keep) stays. */
    request(&f);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 68 * MiB);
    fs_clock_manual_advance(1 * SEC);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 32 * MiB);
    segments_of_size(&f, 14 * MiB, &n, &n_free);
    cr_expect_eq(n_free, 1, "the newest free segment went before older ones");
    alloc_policy_stats_t ps = policy_stats(p);
    cr_expect_eq(ps.n_releases, 2);
    cr_expect_eq(ps.released_bytes, (12 + 14 + 16 + 20) * MiB);
    cr_expect_eq(cache_stats(&f).released_bytes[ALLOC_RELEASE_IDLE_TRIM], ps.released_bytes);
    give(&f, held);
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

/* ---- watermark ---------------------------------------------------------------- */

static alloc_policy_params_t watermark_params(double fraction)
{
    alloc_policy_params_t p;
    alloc_policy_params_default(&p);
    p.watermark.fraction = fraction;
    return p;
}

static const alloc_cache_config_t limit_100mib = {.max_reserved_bytes = 100 * MiB};

Test(alloc_policy_watermark, growing_past_the_mark_releases_oldest_free_segments_first)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &limit_100mib);
    alloc_policy_params_t params = watermark_params(0.5); /* mark 50 MiB */
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_WATERMARK, &params);

    void *a = take(&f, 12 * MiB);
    void *b = take(&f, 14 * MiB);
    void *c = take(&f, 16 * MiB);
    give(&f, a);
    give(&f, c);
    expect_reserved(&f, 42 * MiB); /* under the mark: nothing released */
    cr_expect_eq(cache_stats(&f).released_bytes[ALLOC_RELEASE_WATERMARK], 0);

    /* 42 + 20 > 50: release oldest free until reserved <= 30, i.e. only A. */
    void *d = take(&f, 20 * MiB);
    expect_reserved(&f, 50 * MiB);
    size_t n, n_free;
    segments_of_size(&f, 12 * MiB, &n, &n_free);
    cr_expect_eq(n, 0, "the oldest free segment (12 MiB) is still there");
    segments_of_size(&f, 16 * MiB, &n, &n_free);
    cr_expect_eq(n_free, 1, "the newer free segment (16 MiB) went too");
    segments_of_size(&f, 14 * MiB, &n, &n_free);
    cr_expect_eq(n - n_free, 1, "the allocated segment went");

    alloc_cache_stats_t st = cache_stats(&f);
    alloc_policy_stats_t ps = policy_stats(p);
    cr_expect_eq(st.released_bytes[ALLOC_RELEASE_WATERMARK], 12 * MiB);
    cr_expect_eq(st.released_segments[ALLOC_RELEASE_WATERMARK], 1);
    cr_expect_eq(ps.n_releases, 1);
    cr_expect_eq(ps.released_bytes, 12 * MiB);
    cr_expect_eq(st.n_ooms, 0);
    give(&f, b);
    give(&f, d);
    alloc_fixture_fini(&f);
}

Test(alloc_policy_watermark, is_a_soft_bound_that_never_fails_a_grow)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &limit_100mib);
    alloc_policy_params_t params = watermark_params(0.5);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_WATERMARK, &params);
    void *a = take(&f, 20 * MiB);
    void *b = take(&f, 22 * MiB);
    void *c = take(&f, 24 * MiB); /* over the mark with nothing free */
    expect_reserved(&f, 66 * MiB);
    cr_expect_eq(policy_stats(p).n_releases, 0);
    give(&f, a);
    give(&f, b);
    give(&f, c);
    alloc_fixture_fini(&f);
}

Test(alloc_policy_watermark, tick_releases_oldest_down_to_the_mark)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &limit_100mib);
    alloc_policy_params_t params = watermark_params(0.5);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_WATERMARK, &params);
    void *a = take(&f, 20 * MiB);
    void *b = take(&f, 22 * MiB);
    void *c = take(&f, 24 * MiB);
    void *d = take(&f, 2 * MiB); /* keeps a 20 MiB segment in use */
    give(&f, a);
    give(&f, b);
    give(&f, c);
    expect_reserved(&f, 86 * MiB);

    /* 86 > 50: A and B go (oldest first), 44 <= 50 stops before C. */
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 44 * MiB);
    size_t n, n_free;
    segments_of_size(&f, 24 * MiB, &n, &n_free);
    cr_expect_eq(n_free, 1, "the newest free segment went before older ones");
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 44 * MiB);

    alloc_policy_stats_t ps = policy_stats(p);
    cr_expect_eq(ps.n_releases, 1);
    cr_expect_eq(ps.released_bytes, 42 * MiB);
    cr_expect_eq(cache_stats(&f).released_bytes[ALLOC_RELEASE_WATERMARK], 42 * MiB);
    give(&f, d);
    alloc_fixture_fini(&f);
}

Test(alloc_policy_watermark, without_a_limit_does_nothing)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_params_t params = watermark_params(1e-6);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_WATERMARK, &params);
    cache_free_segment(&f, 12 * MiB);
    cache_free_segment(&f, 14 * MiB);
    void *a = take(&f, 16 * MiB);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 42 * MiB);
    cr_expect_eq(policy_stats(p).n_releases, 0);
    give(&f, a);
    alloc_fixture_fini(&f);
}

/* ---- arena -------------------------------------------------------------------- */

Test(alloc_policy_arena, batch_gets_an_arena_of_the_plan_and_gives_it_back)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_ARENA, NULL);
    alloc_owner_t model;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model", &model), 0, "%s", fs_errmsg());

    alloc_batch_t *batch = NULL;
    cr_assert_eq(alloc_cache_batch_begin(f.cache, 30 * MiB, 0, model, &batch), 0, "%s",
                 fs_errmsg());
    alloc_arena_t *arena = alloc_batch_arena(batch);
    cr_assert_not_null(arena);
    void *block = alloc_batch_ptr(batch);
    cr_assert_not_null(block);
    cr_expect_eq((uintptr_t)block % ALLOC_BATCH_ALIGN, 0, "block %p misaligned", block);
    memset(block, 0xab, 30 * MiB);
    alloc_arena_stats_t as;
    alloc_arena_stats(arena, &as);
    cr_expect_geq(as.capacity_bytes, 30 * MiB);
    cr_expect_eq(as.n_blocks, 1, "the plan's block did not fit the first arena block");
    cr_expect_eq(as.used_bytes, 30 * MiB, "the block is not the arena's first slice");
    cr_expect_eq(alloc_cache_check(f.cache), 0, "%s", fs_errmsg());
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, model, &os), 0);
    cr_expect_eq(os.allocated.current, (int64_t)as.capacity_bytes, "arena not counted to owner");
    cr_expect_eq(policy_stats(p).n_batches, 1);

    alloc_cache_batch_end(f.cache, batch);
    alloc_cache_stats_t st = cache_stats(&f);
    cr_expect_eq(st.allocated.current, 0);
    cr_expect_eq(st.blocks.current, 0);
    cr_assert_eq(alloc_cache_owner_stats(f.cache, model, &os), 0);
    cr_expect_eq(os.allocated.current, 0);
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, model), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_policy_arena, min_block_bytes_raises_small_plans)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_params_t params;
    alloc_policy_params_default(&params);
    params.arena.min_block_bytes = 16 * MiB;
    attach(&f, ALLOC_POLICY_ARENA, &params);
    const size_t plans[] = {0, 1000, 16 * MiB};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        alloc_batch_t *batch = NULL;
        cr_assert_eq(alloc_cache_batch_begin(f.cache, plans[i], 0, ALLOC_OWNER_SERVER, &batch), 0,
                     "plan %zu: %s", plans[i], fs_errmsg());
        alloc_arena_stats_t as;
        alloc_arena_stats(alloc_batch_arena(batch), &as);
        cr_expect_geq(as.capacity_bytes, 16 * MiB, "plan %zu", plans[i]);
        alloc_cache_batch_end(f.cache, batch);
    }
    alloc_fixture_fini(&f);
}

Test(alloc_policy_arena, varying_plans_keep_reserved_bounded)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_ARENA, NULL);
    const size_t plans[] = {30 * MiB, 50 * MiB, 70 * MiB, 90 * MiB};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        alloc_batch_t *batch = NULL;
        cr_assert_eq(alloc_cache_batch_begin(f.cache, plans[i], 0, ALLOC_OWNER_SERVER, &batch), 0,
                     "plan %zu MiB: %s", plans[i] / MiB, fs_errmsg());
        alloc_arena_stats_t as;
        alloc_arena_stats(alloc_batch_arena(batch), &as);
        cr_expect_eq(as.n_blocks, 1, "plan %zu MiB spilled", plans[i] / MiB);
        alloc_cache_batch_end(f.cache, batch);
        cr_expect_eq(alloc_cache_check(f.cache), 0, "%s", fs_errmsg());
    }
    alloc_cache_stats_t st = cache_stats(&f);
    cr_expect_geq(st.reserved.current, (int64_t)(90 * MiB));
    cr_expect_leq(st.reserved.current, (int64_t)(92 * MiB), "reserved %lld MiB piled up",
                  (long long)(st.reserved.current / (int64_t)MiB));
    cr_expect_leq(st.reserved.peak, (int64_t)(92 * MiB), "peak %lld MiB",
                  (long long)(st.reserved.peak / (int64_t)MiB));
    cr_expect_geq(st.released_bytes[ALLOC_RELEASE_ARENA], 150 * MiB);
    cr_expect_eq(policy_stats(p).n_batches, 4);

    /* The same shape again is served from the cache. */
    uint64_t device_allocs = st.n_device_allocs;
    alloc_batch_t *batch = NULL;
    cr_assert_eq(alloc_cache_batch_begin(f.cache, 90 * MiB, 0, ALLOC_OWNER_SERVER, &batch), 0,
                 "%s", fs_errmsg());
    alloc_cache_batch_end(f.cache, batch);
    cr_expect_eq(cache_stats(&f).n_device_allocs, device_allocs, "a repeated plan grew the cache");
    alloc_fixture_fini(&f);
}

Test(alloc_policy_arena, a_second_arena_policy_is_rejected)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    attach(&f, ALLOC_POLICY_ARENA, NULL);
    alloc_policy_t *second = NULL;
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_ARENA, NULL, &second), 0);
    cr_expect_eq(alloc_cache_policy_add(f.cache, second), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "arena") != NULL, "%s", fs_errmsg());
    cr_expect_eq(alloc_cache_policy_count(f.cache), 1);
    alloc_policy_destroy(second); /* not taken on error */
    alloc_fixture_fini(&f);
}

Test(alloc_policy_arena, a_failed_batch_counts_nothing)
{
    alloc_fixture_t f;
    alloc_fault_config_t fault = {.capacity_bytes = 16 * MiB};
    alloc_fixture_init(&f, &fault, NULL);
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_ARENA, NULL);
    alloc_batch_t *batch = NULL;
    cr_expect_eq(alloc_cache_batch_begin(f.cache, 30 * MiB, 0, ALLOC_OWNER_SERVER, &batch),
                 FS_ENOMEM);
    cr_expect_null(batch, "a failed begin handed out a batch");
    cr_expect_eq(policy_stats(p).n_batches, 0);
    cr_expect_eq(cache_stats(&f).allocated.current, 0, "a failed begin holds memory");
    alloc_fixture_fini(&f);
}

/* ---- several at once ---------------------------------------------------------- */

Test(alloc_policy_several, each_policy_counts_its_own_releases)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, &limit_100mib);
    fs_clock_manual_install(0);
    alloc_policy_params_t params;
    alloc_policy_params_default(&params);
    params.periodic.every_n_requests = 2;
    params.periodic.every_ns = 0;
    params.idle_trim.after_ns = 1 * SEC;
    params.idle_trim.keep_bytes = 0;
    params.watermark.fraction = 0.5;
    alloc_policy_t *periodic = attach(&f, ALLOC_POLICY_PERIODIC, &params);
    alloc_policy_t *idle = attach(&f, ALLOC_POLICY_IDLE_TRIM, &params);
    alloc_policy_t *watermark = attach(&f, ALLOC_POLICY_WATERMARK, &params);
    cr_expect_eq(alloc_cache_policy_count(f.cache), 3);
    cr_expect_eq(alloc_cache_policy_get(f.cache, 1), idle);

    /* watermark: 42 + 24 > 50 releases the free 20 MiB segment. */
    void *a = take(&f, 20 * MiB);
    void *b = take(&f, 22 * MiB);
    give(&f, a);
    void *c = take(&f, 24 * MiB);
    expect_reserved(&f, 46 * MiB);
    give(&f, b);
    give(&f, c);
    /* periodic: the 2nd request end empties. */
    request(&f);
    expect_reserved(&f, 46 * MiB);
    request(&f);
    expect_reserved(&f, 0);
    /* idle_trim: a second after the last request. */
    cache_free_segment(&f, 12 * MiB);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 12 * MiB);
    fs_clock_manual_advance(1 * SEC);
    alloc_cache_tick(f.cache);
    expect_reserved(&f, 0);

    struct {
        alloc_policy_t *p;
        alloc_release_reason_t reason;
        uint64_t bytes;
    } expect[] = {{periodic, ALLOC_RELEASE_PERIODIC, 46 * MiB},
                  {idle, ALLOC_RELEASE_IDLE_TRIM, 12 * MiB},
                  {watermark, ALLOC_RELEASE_WATERMARK, 20 * MiB}};
    alloc_cache_stats_t st = cache_stats(&f);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        alloc_policy_stats_t ps = policy_stats(expect[i].p);
        const char *name = alloc_policy_kind_name(alloc_policy_kind(expect[i].p));
        cr_expect_eq(ps.n_releases, 1, "%s released %llu times", name,
                     (unsigned long long)ps.n_releases);
        cr_expect_eq(ps.released_bytes, expect[i].bytes, "%s released %llu MiB", name,
                     (unsigned long long)(ps.released_bytes / MiB));
        cr_expect_eq(st.released_bytes[expect[i].reason], expect[i].bytes, "cache count for %s",
                     name);
    }
    alloc_fixture_fini(&f);
    fs_clock_set_source(NULL, NULL);
}

/* A worker of the threaded test: requests with a batch and a loose block
 * each, and a tick now and then. `err` says what failed, if anything. */
typedef struct policy_worker {
    alloc_cache_t *cache;
    unsigned seed;
    char err[FS_ERRMSG_MAX + 64];
} policy_worker_t;

static void *policy_worker_run(void *arg)
{
    policy_worker_t *w = arg;
    alloc_cache_t *c = w->cache;
    for (int i = 0; i < 150; i++) {
        alloc_cache_request_begin(c);
        size_t plan = (10 + 2 * (size_t)(rand_r(&w->seed) % 6)) * MiB;
        size_t bytes = (10 + 2 * (size_t)(rand_r(&w->seed) % 6)) * MiB;
        alloc_batch_t *batch = NULL;
        void *block = NULL;
        if (alloc_cache_batch_begin(c, plan, 0, ALLOC_OWNER_SERVER, &batch) != 0 ||
            alloc_cache_alloc(c, bytes, 0, ALLOC_OWNER_SERVER, &block) != 0) {
            snprintf(w->err, sizeof w->err, "iteration %d: %s", i, fs_errmsg());
            alloc_cache_batch_end(c, batch);
            alloc_cache_request_end(c);
            return NULL;
        }
        memset(alloc_batch_ptr(batch), 0x5a, plan);
        alloc_cache_free(c, block);
        alloc_cache_batch_end(c, batch);
        alloc_cache_request_end(c);
        if (i % 8 == 0)
            alloc_cache_tick(c);
    }
    return NULL;
}

Test(alloc_policy_several, hooks_from_several_threads_agree_with_the_cache, .timeout = 60)
{
    alloc_fixture_t f;
    const alloc_cache_config_t cfg = {.max_reserved_bytes = 256 * MiB};
    alloc_fixture_init(&f, NULL, &cfg);
    alloc_policy_params_t params;
    alloc_policy_params_default(&params);
    params.periodic.every_n_requests = 7;
    params.periodic.every_ns = 0;
    params.idle_trim.after_ns = 1; /* real clock: trims whenever idle at a tick */
    params.watermark.fraction = 0.25;
    alloc_policy_t *ps[] = {attach(&f, ALLOC_POLICY_PERIODIC, &params),
                            attach(&f, ALLOC_POLICY_ARENA, &params),
                            attach(&f, ALLOC_POLICY_IDLE_TRIM, &params),
                            attach(&f, ALLOC_POLICY_WATERMARK, &params)};
    const alloc_release_reason_t reasons[] = {ALLOC_RELEASE_PERIODIC, ALLOC_RELEASE_ARENA,
                                              ALLOC_RELEASE_IDLE_TRIM, ALLOC_RELEASE_WATERMARK};
    pthread_t threads[4];
    policy_worker_t workers[4];
    for (size_t i = 0; i < 4; i++) {
        workers[i] = (policy_worker_t){.cache = f.cache, .seed = (unsigned)i + 1};
        cr_assert_eq(pthread_create(&threads[i], NULL, policy_worker_run, &workers[i]), 0);
    }
    for (size_t i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        cr_expect_eq(workers[i].err[0], '\0', "worker %zu: %s", i, workers[i].err);
    }
    alloc_cache_stats_t st = cache_stats(&f);
    for (size_t i = 0; i < 4; i++) {
        alloc_policy_stats_t s = policy_stats(ps[i]);
        if (reasons[i] == ALLOC_RELEASE_ARENA) {
            cr_expect_eq(s.n_batches, 4 * 150);
            continue;
        }
        cr_expect_eq(s.released_bytes, st.released_bytes[reasons[i]], "%s",
                     alloc_policy_kind_name(alloc_policy_kind(ps[i])));
        cr_expect_leq(s.n_releases, st.released_segments[reasons[i]]);
    }
    cr_expect_gt(policy_stats(ps[0]).n_releases, 0, "periodic never released");
    alloc_fixture_fini(&f);
}

/* ---- replacing the list (SIGHUP) ---------------------------------------------- */

Test(alloc_policy_replace, swaps_the_list_and_an_old_arena_still_goes_back)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    attach(&f, ALLOC_POLICY_ARENA, NULL);
    alloc_owner_t model;
    cr_assert_eq(alloc_cache_owner_create(f.cache, "model", &model), 0, "%s", fs_errmsg());
    alloc_batch_t *batch = NULL;
    cr_assert_eq(alloc_cache_batch_begin(f.cache, 3 * MiB, 0, model, &batch), 0, "%s",
                 fs_errmsg());
    cr_assert_not_null(alloc_batch_arena(batch));

    /* The arena policy goes while its batch is in flight. */
    alloc_policy_t *next[2] = {NULL, NULL};
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_CACHE, NULL, &next[0]), 0);
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_IDLE_TRIM, NULL, &next[1]), 0);
    cr_assert_eq(alloc_cache_policies_replace(f.cache, next, 2), 0, "%s", fs_errmsg());
    cr_expect_eq(alloc_cache_policy_count(f.cache), 2);
    cr_expect_eq(alloc_policy_kind(alloc_cache_policy_get(f.cache, 1)), ALLOC_POLICY_IDLE_TRIM);

    alloc_cache_batch_end(f.cache, batch);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, model, &os), 0);
    cr_expect_eq(os.allocated.current, 0, "the old policy's arena was not given back");
    cr_expect_eq(alloc_cache_check(f.cache), 0, "%s", fs_errmsg());
    expect_plain_batch(&f, 3 * MiB, model); /* no arena policy is attached any more */
    cr_expect_eq(alloc_cache_owner_destroy(f.cache, model), 0, "%s", fs_errmsg());
    alloc_fixture_fini(&f);
}

Test(alloc_policy_replace, a_plain_batch_goes_back_as_a_block_after_an_arena_policy_came)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    alloc_batch_t *batch = NULL;
    cr_assert_eq(alloc_cache_batch_begin(f.cache, 3 * MiB, 0, ALLOC_OWNER_SERVER, &batch), 0,
                 "%s", fs_errmsg());
    cr_assert_null(alloc_batch_arena(batch));
    alloc_policy_t *p = attach(&f, ALLOC_POLICY_ARENA, NULL);
    alloc_cache_batch_end(f.cache, batch);
    cr_expect_eq(cache_stats(&f).allocated.current, 0, "the plain block was not given back");
    cr_expect_eq(policy_stats(p).n_batches, 0, "the arena policy counted a batch it did not serve");
    alloc_fixture_fini(&f);
}

Test(alloc_policy_replace, a_bad_list_leaves_the_old_one)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    attach(&f, ALLOC_POLICY_PERIODIC, NULL);
    alloc_policy_t *two[2] = {NULL, NULL};
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_ARENA, NULL, &two[0]), 0);
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_ARENA, NULL, &two[1]), 0);
    cr_expect_eq(alloc_cache_policies_replace(f.cache, two, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "batch memory") != NULL, "%s", fs_errmsg());
    cr_expect_eq(alloc_cache_policy_count(f.cache), 1);
    cr_expect_eq(alloc_policy_kind(alloc_cache_policy_get(f.cache, 0)), ALLOC_POLICY_PERIODIC);
    alloc_policy_destroy(two[0]);
    alloc_policy_destroy(two[1]);
    alloc_fixture_fini(&f);
}

/* Hooks on other threads run on a copy of the list; replacing it under them
 * must not free a policy a hook still uses (ASan checks this). */
static void *replace_hooks_thread(void *arg)
{
    alloc_cache_t *c = arg;
    for (int i = 0; i < 2000; i++) {
        alloc_cache_request_begin(c);
        alloc_cache_request_end(c);
        alloc_cache_tick(c);
    }
    return NULL;
}

Test(alloc_policy_replace, replacing_under_running_hooks_is_safe, .timeout = 60)
{
    alloc_fixture_t f;
    alloc_fixture_init(&f, NULL, NULL);
    attach(&f, ALLOC_POLICY_PERIODIC, NULL);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, replace_hooks_thread, f.cache), 0);
    for (int i = 0; i < 200; i++) {
        alloc_policy_t *p[2] = {NULL, NULL};
        cr_assert_eq(alloc_policy_create(ALLOC_POLICY_PERIODIC, NULL, &p[0]), 0);
        cr_assert_eq(alloc_policy_create(ALLOC_POLICY_IDLE_TRIM, NULL, &p[1]), 0);
        cr_assert_eq(alloc_cache_policies_replace(f.cache, p, 2), 0, "%s", fs_errmsg());
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    cr_expect_eq(alloc_cache_policy_count(f.cache), 2);
    alloc_fixture_fini(&f);
}
