/* test_batcher_stats.c -- the statistics engine/batcher.c keeps in Triton's
 * shapes: one record per batch size executed, in order, with its count and
 * times (eng_registry_batch_stats), and failures split by Triton's reason
 * (the batcher's own, and the caller's refusals it never saw through
 * eng_served_count_refused). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "registry_fixture.h"

TestSuite(batcher_stats, .timeout = 120);

/* Runs one request of `rows` rows to its end; returns its status. */
static int run_rows(eng_served_t *s, int64_t rows)
{
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {rows, 64}}, (int)rows);
    int rc = eng_served_submit_run(s, &t.req);
    if (rc == 0) {
        treq_wait(&t);
        rc = t.req.status;
    }
    treq_fini(&t);
    return rc;
}

Test(batcher_stats, every_batch_size_run_has_one_record_in_order_with_its_times)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());
    /* 12 sizes, more than the first allocation holds, out of order, one twice:
     * each request runs alone (one at a time), so its batch is its rows. */
    const int64_t sizes[] = {12, 3, 7, 1, 9, 3, 11, 2, 5, 4, 10, 6, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        cr_assert_eq(run_rows(s, sizes[i]), 0, "%s", fs_errmsg());

    eng_batch_stat_t *bs = NULL;
    size_t n = 0;
    cr_assert_eq(eng_registry_batch_stats(f.reg, "mlp", -1, &bs, &n), 0, "%s", fs_errmsg());
    cr_assert_eq(n, 12);
    uint64_t execs = 0;
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(bs[i].batch_size, i + 1, "sorted by batch size");
        cr_expect_eq(bs[i].count, bs[i].batch_size == 3 ? 2u : 1u, "batch size %llu",
                     (unsigned long long)bs[i].batch_size);
        cr_expect_gt(bs[i].compute_infer_ns, 0);
        execs += bs[i].count;
    }
    free(bs);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(execs, st.exec_count);
    cr_expect_eq(st.request_failure, 0);

    bs = (eng_batch_stat_t *)1;
    cr_expect_eq(eng_registry_batch_stats(f.reg, "mlp", 9, &bs, &n), FS_ENOENT);
    cr_expect_null(bs);
    cr_expect_eq(n, 0);
    eng_served_release(s);
    reg_fixture_close(&f);
}

Test(batcher_stats, failures_are_split_by_reason)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(4, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());

    /* Refused at submit: the engine does not count it; its caller does. */
    cr_expect_eq(run_rows(s, 5), FS_EINVAL, "5 rows past max_batch_size 4");
    eng_served_count_refused(s, FS_EINVAL, 3000);
    eng_served_count_refused(s, FS_EFULL, 1000);
    eng_served_count_refused(s, FS_ESTATE, 2000);
    /* Past its deadline before it runs: the batcher fails it, REJECTED. */
    treq_t late;
    treq_init(&late, 1, &(eng_shape_t){2, {1, 64}}, 1);
    late.req.deadline_ns = 1;
    cr_assert_eq(eng_served_submit_run(s, &late.req), 0, "%s", fs_errmsg());
    treq_wait(&late);
    cr_expect_eq(late.req.status, FS_ETIMEDOUT, "%s", late.req.error);
    treq_fini(&late);

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_failure, 4);
    cr_expect_eq(st.failure_by_reason[ENG_FAILURE_REJECTED], 3);
    cr_expect_eq(st.failure_by_reason[ENG_FAILURE_OTHER], 1);
    cr_expect_eq(st.failure_by_reason[ENG_FAILURE_BACKEND], 0);
    cr_expect_eq(st.failure_by_reason[ENG_FAILURE_CANCELED], 0);
    cr_expect_geq(st.failure_duration_us, 6, "the refusals' 6 us, and the late one's wait");
    cr_expect_str_eq(eng_failure_reason_name(ENG_FAILURE_REJECTED), "REJECTED");
    cr_expect_str_eq(eng_failure_reason_name(ENG_FAILURE_BACKEND), "BACKEND");
    cr_expect_str_eq(eng_failure_reason_name(ENG_FAILURE_CANCELED), "CANCELED");
    cr_expect_str_eq(eng_failure_reason_name(ENG_FAILURE_OTHER), "OTHER");
    eng_served_release(s);
    reg_fixture_close(&f);
}
