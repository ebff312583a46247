/* test_batcher.c -- tests of engine/batcher.c through the registry:
 * concurrent requests batched with each getting its own rows bit for bit,
 * shapes batched apart, a full queue, deadlines, requests refused at
 * submit, models that do not batch, the stats adding up, and the
 * submitter running a batch itself (eng_served_submit_run): on its own
 * thread when a batch is ready, queued when it must wait or every instance
 * runs, never more batches than instances, and through unload and
 * rebuild. Waits that must not end by themselves run on the manual clock
 * (common/clock.h) or behind a request whose `done` blocks until the test
 * opens it. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "registry_fixture.h"

TestSuite(batcher, .timeout = 120);

/* A frozen clock far from zero, and a delay a test ends by advancing it. */
#define MANUAL_START_NS 1000000000000ull
#define LONG_DELAY_NS 10000000000ull

static eng_served_t *load_and_acquire(reg_fixture_t *f, const char *name)
{
    cr_assert_eq(eng_registry_load(f->reg, name), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f->reg, name, -1, &s), 0, "%s", fs_errmsg());
    return s;
}

/* ---- many threads ------------------------------------------------------------------- */

#define N_CLIENTS 16
#define N_PER_CLIENT 50

typedef struct client {
    reg_fixture_t *f;
    int id;
    bool run;                      /* eng_served_submit_run, else eng_served_submit */
    void (*done)(eng_request_t *); /* NULL: treq_done */
    int n_wrong, n_failed, n_batched;
    int n_here;                    /* done on this thread */
    int n_not_once;                /* done_calls other than 1 */
    uint64_t rows;
    char first_error[FS_ERRMSG_MAX];
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    for (int k = 0; k < N_PER_CLIENT; k++) {
        int64_t rows = 1 + (c->id * 7 + k) % 4;
        treq_t t;
        treq_init(&t, 1, &(eng_shape_t){2, {rows, 64}}, c->id * 1000 + k);
        if (c->done)
            t.req.done = c->done;
        eng_served_t *s = NULL;
        int rc = eng_registry_acquire(c->f->reg, "mlp", -1, &s);
        if (rc == 0)
            rc = c->run ? eng_served_submit_run(s, &t.req) : eng_served_submit(s, &t.req);
        if (rc == 0) {
            treq_wait(&t);
            c->n_here += pthread_equal(t.done_thread, pthread_self()) != 0;
            c->n_not_once += t.done_calls != 1;
            rc = t.req.status;
        }
        if (rc != 0) {
            if (c->n_failed++ == 0)
                snprintf(c->first_error, sizeof c->first_error, "%s",
                         t.req.status ? t.req.error : fs_errmsg());
        } else {
            c->rows += (uint64_t)rows;
            c->n_batched += t.req.batch_rows > rows;
            c->n_wrong += !treq_matches_direct_run(&t, eng_served_model(s));
        }
        eng_served_release(s);
        treq_fini(&t);
    }
    return NULL;
}

static uint64_t sum(const uint64_t *v, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return s;
}

Test(batcher, concurrent_requests_are_batched_and_each_gets_its_own_rows)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 2000000);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    client_t c[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        c[i] = (client_t){.f = &f, .id = i};
        cr_assert_eq(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
    }
    uint64_t rows = 0;
    int batched = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(c[i].n_failed, 0, "client %d: %d failed: %s", i, c[i].n_failed,
                     c[i].first_error);
        cr_expect_eq(c[i].n_wrong, 0, "client %d: %d outputs differ from a direct run", i,
                     c[i].n_wrong);
        rows += c[i].rows;
        batched += c[i].n_batched;
    }
    cr_expect_gt(batched, 0, "some requests shared a batch");

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0, "%s", fs_errmsg());
    uint64_t n = N_CLIENTS * N_PER_CLIENT;
    cr_log_info("%llu requests in %llu batches", (unsigned long long)n,
                (unsigned long long)st.exec_count);
    cr_expect_eq(st.request_success, n);
    cr_expect_eq(st.request_failure, 0);
    cr_expect_eq(st.inference_count, rows);
    cr_expect_eq(st.batch_rows_sum, rows);
    cr_expect_lt(st.exec_count, n, "fewer runs than requests");
    cr_expect_eq(sum(st.batch_buckets, ENG_BATCH_BUCKETS + 1), st.exec_count);
    cr_expect_gt(sum(st.batch_buckets + 3, ENG_BATCH_BUCKETS + 1 - 3), 0,
                 "a batch of more than 4 rows (more than one request)");
    cr_expect_eq(sum(st.latency_buckets, ENG_LATENCY_BUCKETS + 1), n);
    cr_expect_eq(st.pending, 0);
    cr_expect_gt(st.request_duration_us, 0);
    cr_expect_geq(st.request_duration_us, st.queue_duration_us);
    cr_expect_gt(st.compute_infer_us, 0);
    reg_fixture_close(&f);
}

/* ---- shapes, queue, deadlines (manual clock) -------------------------------------------- */

Test(batcher, requests_of_different_shapes_batch_apart)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, LONG_DELAY_NS);
    int64_t dims[2] = {-1, -1};
    const char *params[2] = {"batch", "seq"};
    repo_add_model(&f, "seq", 1, 2, dims, params, 1);
    eng_served_t *s = load_and_acquire(&f, "seq");
    cr_assert(eng_served_batches(s));

    /* Arrival order A(seq 3), B(seq 5), C(seq 3), D(seq 5): A and C run
     * together, then B and D. */
    int64_t rows[4] = {2, 1, 1, 3}, seq[4] = {3, 5, 3, 5};
    treq_t t[4];
    for (int i = 0; i < 4; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {rows[i], seq[i]}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    usleep(30000);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(t[i].done_calls, 0, "the clock is frozen: request %d waits", i);
    fs_clock_manual_advance(LONG_DELAY_NS);
    uint32_t want_batch[4] = {3, 4, 3, 4};
    for (int i = 0; i < 4; i++) {
        treq_wait(&t[i]);
        cr_assert_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, want_batch[i], "request %d", i);
        cr_expect_eq(t[i].req.queue_ns, LONG_DELAY_NS);
        const eng_tensor_t *y = t[i].req.outputs[0];
        cr_assert(eng_shape_equal(&y->shape, &t[i].in[0].shape));
        const float *x = t[i].in[0].data, *py = y->data;
        int bad = 0;
        for (int64_t k = 0; k < rows[i] * seq[i]; k++)
            bad += py[k] != x[k] + x[k];
        cr_expect_eq(bad, 0, "request %d: %d elements are not its own", i, bad);
    }
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "seq", -1, &st), 0);
    cr_expect_eq(st.exec_count, 2);
    cr_expect_eq(st.inference_count, 7);
    cr_expect_eq(st.batch_buckets[1] + st.batch_buckets[2], 2, "batches of 3 and 4 rows");
    for (int i = 0; i < 4; i++)
        treq_fini(&t[i]);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(batcher, a_full_queue_refuses_with_efull)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, LONG_DELAY_NS);
    f.opts.max_queue = 2;
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t[3];
    for (int i = 0; i < 3; i++)
        treq_init(&t[i], 1, &(eng_shape_t){2, {1, 64}}, i);
    /* The worker waits out the delay on a frozen clock: both stay queued. */
    cr_assert_eq(eng_served_submit(s, &t[0].req), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_served_submit(s, &t[1].req), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_served_submit(s, &t[2].req), FS_EFULL);
    cr_expect(strstr(fs_errmsg(), "mlp") && strstr(fs_errmsg(), "full"), "%s", fs_errmsg());
    fs_clock_manual_advance(LONG_DELAY_NS);
    for (int i = 0; i < 2; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 2u, "one batch of both");
    }
    cr_expect_eq(t[2].done_calls, 0, "a refused request never completes");
    /* Room again. */
    cr_assert_eq(eng_served_submit(s, &t[2].req), 0, "%s", fs_errmsg());
    fs_clock_manual_advance(LONG_DELAY_NS);
    treq_wait(&t[2]);
    cr_expect_eq(t[2].req.status, 0, "%s", t[2].req.error);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_success + st.request_failure, 3, "refusals are not counted");
    for (int i = 0; i < 3; i++)
        treq_fini(&t[i]);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(batcher, requests_past_their_deadline_fail_with_etimedout)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, LONG_DELAY_NS);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t late, waits, keeps;
    /* Already past at submit: it never runs. */
    treq_init(&late, 1, &(eng_shape_t){2, {1, 64}}, 1);
    late.req.deadline_ns = MANUAL_START_NS - 1;
    cr_assert_eq(eng_served_submit(s, &late.req), 0, "%s", fs_errmsg());
    treq_wait(&late);
    cr_expect_eq(late.req.status, FS_ETIMEDOUT);
    cr_expect(strstr(late.req.error, "waited 0.0 ms in the queue of model 'mlp'"), "%s",
              late.req.error);
    cr_expect_null(late.req.outputs);
    /* Passes while it waits for a batch; the one without a deadline runs. */
    treq_init(&waits, 1, &(eng_shape_t){2, {1, 64}}, 2);
    waits.req.deadline_ns = MANUAL_START_NS + 1000000;
    treq_init(&keeps, 1, &(eng_shape_t){2, {2, 64}}, 3);
    cr_assert_eq(eng_served_submit(s, &waits.req), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_served_submit(s, &keeps.req), 0, "%s", fs_errmsg());
    usleep(20000);
    cr_expect_eq(waits.done_calls, 0);
    fs_clock_manual_advance(2500000);
    treq_wait(&waits);
    cr_expect_eq(waits.req.status, FS_ETIMEDOUT);
    cr_expect(strstr(waits.req.error, "waited 2.5 ms"), "%s", waits.req.error);
    cr_expect_eq(keeps.done_calls, 0, "still waiting out its delay");
    fs_clock_manual_advance(LONG_DELAY_NS);
    treq_wait(&keeps);
    cr_expect_eq(keeps.req.status, 0, "%s", keeps.req.error);
    cr_expect_eq(keeps.req.batch_rows, 2u);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_failure, 2);
    cr_expect_eq(st.request_success, 1);
    cr_expect_eq(st.exec_count, 1);
    treq_fini(&late);
    treq_fini(&waits);
    treq_fini(&keeps);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

Test(batcher, a_frozen_clock_delays_a_batch_only_by_the_real_delay)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, 30000000); /* 30 ms */
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    uint64_t t0 = fs_clock_real_ns();
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    uint64_t took = fs_clock_real_ns() - t0;
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect_geq(took, 29000000, "waited out the delay: %llu ns", (unsigned long long)took);
    treq_fini(&t);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* A batch that fails as a whole (here its activations pass the cache's
 * limit) runs each of its requests alone, and each succeeds. */
Test(batcher, a_failed_batch_runs_each_request_alone)
{
    reg_fixture_t f;
    /* The weights' 2 MiB small segment and 1 MiB more: one row's
     * activations (160 KiB) fit beside the weights, eight rows' (1.1 MiB,
     * from the large pool) do not. */
    alloc_cache_config_t cache_cfg = {.name = "cpu", .max_reserved_bytes = (size_t)3 << 20};
    reg_fixture_open_with(&f, &cache_cfg);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, LONG_DELAY_NS);
    repo_copy(&f, "transformer", "transformer", 1);
    eng_served_t *s = load_and_acquire(&f, "transformer");
    treq_t t[8];
    for (int i = 0; i < 8; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){3, {1, 64, 64}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    fs_clock_manual_advance(LONG_DELAY_NS);
    for (int i = 0; i < 8; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 1u, "ran alone");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        treq_fini(&t[i]);
    }
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "transformer", -1, &st), 0);
    cr_expect_eq(st.request_success, 8);
    cr_expect_eq(st.exec_count, 8, "the failed batch is not counted as a run");
    cr_expect_eq(st.batch_buckets[0], 8);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* ---- refused at submit ------------------------------------------------------------------ */

Test(batcher, bad_requests_are_refused_at_submit_naming_the_input)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    int64_t dims[2] = {-1, 4};
    const char *params[2] = {"batch", NULL};
    repo_add_model(&f, "pair", 1, 2, dims, params, 2);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t;

    treq_init(&t, 1, &(eng_shape_t){2, {2, 64}}, 1);
    t.in[0].dtype = ENG_DT_INT32;
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'input'") && strstr(fs_errmsg(), "float") &&
                  strstr(fs_errmsg(), "int32"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 1, &(eng_shape_t){3, {2, 64, 1}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'input'") && strstr(fs_errmsg(), "[batch,64]") &&
                  strstr(fs_errmsg(), "[2,64,1]"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 1, &(eng_shape_t){2, {2, 63}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'input'") && strstr(fs_errmsg(), "[2,63]") &&
                  strstr(fs_errmsg(), "dim 1 must be 64"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 1, &(eng_shape_t){2, {65, 64}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'input'") && strstr(fs_errmsg(), "65 rows") &&
                  strstr(fs_errmsg(), "64"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 1, &(eng_shape_t){2, {0, 64}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "no rows"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 2, &(eng_shape_t){2, {1, 64}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "takes 1 input, 2 given"), "%s", fs_errmsg());
    treq_fini(&t);

    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    free(t.in[0].data);
    t.in[0].data = NULL;
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "no data"), "%s", fs_errmsg());
    t.req.done = NULL;
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    treq_fini(&t);
    eng_served_release(s);

    /* Two inputs with different rows. */
    cr_assert_eq(eng_registry_load(f.reg, "pair"), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_registry_acquire(f.reg, "pair", -1, &s), 0);
    cr_expect(eng_served_batches(s));
    treq_init(&t, 2, &(eng_shape_t){2, {3, 4}}, 1);
    t.in[1].shape.dims[0] = 2;
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'x1'") && strstr(fs_errmsg(), "2 rows") &&
                  strstr(fs_errmsg(), "'x0' has 3"), "%s", fs_errmsg());
    t.in[1].shape.dims[0] = 3;
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect(treq_matches_direct_run(&t, eng_served_model(s)));
    treq_fini(&t);
    eng_served_release(s);

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_success + st.request_failure + st.pending, 0,
                 "refused requests are not counted");
    reg_fixture_close(&f);
}

/* ---- models that do not batch ------------------------------------------------------------ */

Test(batcher, a_fixed_batch_dim_runs_each_request_alone)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 1000000000);
    f.opts.instances = 2;
    int64_t dims[2] = {4, 8};
    repo_add_model(&f, "fixed", 1, 2, dims, NULL, 1);
    eng_served_t *s = load_and_acquire(&f, "fixed");
    cr_expect(!eng_served_batches(s), "dim 0 is not symbolic");
    treq_t bad;
    treq_init(&bad, 1, &(eng_shape_t){2, {2, 8}}, 1);
    cr_expect_eq(eng_served_submit(s, &bad.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'x0'") && strstr(fs_errmsg(), "dim 0 must be 4"), "%s",
              fs_errmsg());
    treq_fini(&bad);
    treq_t t[6];
    uint64_t t0 = fs_clock_real_ns();
    for (int i = 0; i < 6; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {4, 8}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    for (int i = 0; i < 6; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 1u, "a request is one row");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        treq_fini(&t[i]);
    }
    cr_expect_lt(fs_clock_real_ns() - t0, 500000000ull, "no wait for the 1 s delay");
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "fixed", -1, &st), 0);
    cr_expect_eq(st.exec_count, 6);
    cr_expect_eq(st.inference_count, 6);
    eng_served_release(s);
    reg_fixture_close(&f);
}

Test(batcher, max_batch_size_one_runs_requests_one_by_one)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(1, 20000000);
    f.opts.instances = 3;
    repo_copy(&f, "transformer", "transformer", 1);
    eng_served_t *s = load_and_acquire(&f, "transformer");
    cr_expect(!eng_served_batches(s));
    treq_t t[5];
    for (int i = 0; i < 5; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){3, {1 + i % 2, 64, 64}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    uint64_t rows = 0;
    for (int i = 0; i < 5; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, (uint32_t)(1 + i % 2), "its own rows");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        rows += 1 + i % 2;
        treq_fini(&t[i]);
    }
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "transformer", -1, &st), 0);
    cr_expect_eq(st.exec_count, 5);
    cr_expect_eq(st.inference_count, rows);
    eng_served_release(s);
    reg_fixture_close(&f);
}

/* Triton's preferred_batch_size: the largest preferred size runs at once;
 * a batch that runs past a preferred size it reached, at a size that is not
 * preferred, takes only the requests up to it. */
Test(batcher, preferred_batch_sizes_cut_and_start_batches)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(8, LONG_DELAY_NS);
    f.opts.n_preferred = 2;
    f.opts.preferred[0] = 2;
    f.opts.preferred[1] = 4;
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t[4];
    for (int i = 0; i < 3; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {1, 64}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    usleep(20000);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(t[i].done_calls, 0, "3 rows, below the largest preferred 4: waits");
    treq_init(&t[3], 1, &(eng_shape_t){2, {1, 64}}, 3);
    cr_assert_eq(eng_served_submit(s, &t[3].req), 0, "%s", fs_errmsg());
    for (int i = 0; i < 4; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 4u, "the largest preferred size runs at once");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        treq_fini(&t[i]);
    }

    for (int i = 0; i < 3; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {1, 64}}, 10 + i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    usleep(20000);
    cr_expect_eq(t[0].done_calls, 0, "the clock is frozen");
    fs_clock_manual_advance(LONG_DELAY_NS);
    uint32_t want[3] = {2, 2, 1};
    for (int i = 0; i < 3; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, want[i], "request %d: 3 rows cut to the preferred 2", i);
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        treq_fini(&t[i]);
    }
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* Triton's default_timeout_microseconds and max_batch_size of a model
 * that does not batch (options the server sets from a config.pbtxt). */
Test(batcher, queue_timeout_and_request_rows_bound_from_the_options)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(8, LONG_DELAY_NS);
    f.opts.queue_timeout_ns = 1000000;
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    fs_clock_manual_advance(2000000);
    treq_wait(&t);
    cr_expect_eq(t.req.status, FS_ETIMEDOUT, "not started within its queue timeout: %s",
                 t.req.error);
    treq_fini(&t);
    eng_served_release(s);
    fs_clock_set_source(NULL, NULL);

    f.opts = reg_batching(0, 0);
    f.opts.max_request_rows = 2;
    s = load_and_acquire(&f, "mlp");
    cr_expect(!eng_served_batches(s));
    treq_init(&t, 1, &(eng_shape_t){2, {3, 64}}, 2);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "3 rows, more than its max_batch_size 2"), "%s", fs_errmsg());
    treq_fini(&t);
    treq_init(&t, 1, &(eng_shape_t){2, {2, 64}}, 3);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    treq_fini(&t);
    eng_served_release(s);
    reg_fixture_close(&f);
}

/* ---- the submitter runs the batch (eng_served_submit_run) -------------------------------- */

Test(batcher, submit_run_runs_a_ready_batch_on_the_calling_thread)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {3, 64}}, 1);
    cr_assert_eq(eng_served_submit_run(s, &t.req), 0, "%s", fs_errmsg());
    cr_expect_eq(t.done_calls, 1, "done before the return");
    cr_expect(pthread_equal(t.done_thread, pthread_self()), "done on the calling thread");
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect_eq(t.req.batch_rows, 3u);
    cr_expect(treq_matches_direct_run(&t, eng_served_model(s)));
    treq_fini(&t);

    /* The refusals are eng_served_submit's, before anything runs. */
    treq_init(&t, 1, &(eng_shape_t){2, {65, 64}}, 2);
    cr_expect_eq(eng_served_submit_run(s, &t.req), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "65 rows"), "%s", fs_errmsg());
    cr_expect_eq(t.done_calls, 0);
    treq_fini(&t);

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_success, 1);
    cr_expect_eq(st.exec_count, 1);
    cr_expect_eq(st.pending, 0);
    eng_served_release(s);
    reg_fixture_close(&f);
}

Test(batcher, submit_run_queues_a_batch_that_must_wait_for_a_worker)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(64, LONG_DELAY_NS);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    cr_assert_eq(eng_served_submit_run(s, &t.req), 0, "%s", fs_errmsg());
    cr_expect_eq(t.done_calls, 0, "not full and its delay not passed: queued");
    usleep(20000);
    cr_expect_eq(t.done_calls, 0, "the clock is frozen");
    fs_clock_manual_advance(LONG_DELAY_NS);
    treq_wait(&t);
    cr_expect(!pthread_equal(t.done_thread, pthread_self()), "a worker ran it");
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect(treq_matches_direct_run(&t, eng_served_model(s)));
    treq_fini(&t);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* Two requests wait out their delay; the third fills the batch, so its
 * submitter runs all three at once. */
Test(batcher, submit_run_runs_the_batch_its_request_fills_with_the_older_ones)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(3, LONG_DELAY_NS);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t t[3];
    for (int i = 0; i < 3; i++)
        treq_init(&t[i], 1, &(eng_shape_t){2, {1, 64}}, i);
    cr_assert_eq(eng_served_submit(s, &t[0].req), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_served_submit(s, &t[1].req), 0, "%s", fs_errmsg());
    usleep(20000);
    cr_expect_eq(t[0].done_calls + t[1].done_calls, 0, "waiting out the delay");
    cr_assert_eq(eng_served_submit_run(s, &t[2].req), 0, "%s", fs_errmsg());
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(t[i].done_calls, 1, "request %d done before the return", i);
        cr_expect(pthread_equal(t[i].done_thread, pthread_self()), "request %d here", i);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 3u, "one batch of the three");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)), "request %d", i);
        treq_fini(&t[i]);
    }
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.exec_count, 1);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* The older request waits for company; the new one does not fit beside it,
 * which makes the older one's batch full: the submitter runs that batch,
 * without its own request, which a worker then runs (oldest first). */
Test(batcher, submit_run_runs_the_oldest_batch_even_without_its_own_request)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(MANUAL_START_NS);
    f.opts = reg_batching(2, LONG_DELAY_NS);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    treq_t old, mine;
    treq_init(&old, 1, &(eng_shape_t){2, {1, 64}}, 1);
    treq_init(&mine, 1, &(eng_shape_t){2, {2, 64}}, 2);
    cr_assert_eq(eng_served_submit(s, &old.req), 0, "%s", fs_errmsg());
    usleep(20000);
    cr_expect_eq(old.done_calls, 0, "waiting out the delay");
    cr_assert_eq(eng_served_submit_run(s, &mine.req), 0, "%s", fs_errmsg());
    cr_expect_eq(old.done_calls, 1, "the oldest batch ran before the return");
    cr_expect(pthread_equal(old.done_thread, pthread_self()));
    cr_expect_eq(old.req.status, 0, "%s", old.req.error);
    cr_expect_eq(old.req.batch_rows, 1u, "alone: the new one did not fit");
    treq_wait(&mine);
    cr_expect_eq(mine.done_calls, 1);
    cr_expect(!pthread_equal(mine.done_thread, pthread_self()), "a worker ran it");
    cr_expect_eq(mine.req.status, 0, "%s", mine.req.error);
    cr_expect_eq(mine.req.batch_rows, 2u);
    cr_expect(treq_matches_direct_run(&old, eng_served_model(s)));
    cr_expect(treq_matches_direct_run(&mine, eng_served_model(s)));
    treq_fini(&old);
    treq_fini(&mine);
    eng_served_release(s);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* ---- a batch held running ------------------------------------------------------------------ */

/* A request whose `done` (on the thread that ran its batch) says it has
 * started and blocks until the test opens the gate, so its batch holds
 * one of the version's slots until then. */
typedef struct gated {
    treq_t t;                      /* first: t.req.user points here */
    pthread_mutex_t m;
    pthread_cond_t c;
    bool entered, open;
    eng_served_t *release;         /* released by done before it blocks; NULL: none */
} gated_t;

static void gated_done(eng_request_t *r)
{
    gated_t *g = r->user;
    pthread_mutex_lock(&g->m);
    g->entered = true;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
    if (g->release)
        eng_served_release(g->release);
    pthread_mutex_lock(&g->m);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    treq_done(r);
}

static void gated_init(gated_t *g, const eng_shape_t *shape, int seed)
{
    memset(g, 0, sizeof *g);
    treq_init(&g->t, 1, shape, seed);
    g->t.req.done = gated_done;
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
}

static void gated_wait_entered(gated_t *g)
{
    pthread_mutex_lock(&g->m);
    while (!g->entered)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

static void gated_open(gated_t *g)
{
    pthread_mutex_lock(&g->m);
    g->open = true;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

static void gated_fini(gated_t *g)
{
    treq_fini(&g->t);
    pthread_cond_destroy(&g->c);
    pthread_mutex_destroy(&g->m);
}

/* eng_served_submit_run on its own thread; releases `s` after, unless the
 * request's done does. */
typedef struct runner {
    eng_served_t *s;
    gated_t *g;
    int rc;
} runner_t;

static void *runner_main(void *arg)
{
    runner_t *r = arg;
    bool release = !r->g->release;
    r->rc = eng_served_submit_run(r->s, &r->g->t.req);
    if (release)
        eng_served_release(r->s);
    return NULL;
}

/* Starts a runner whose batch is held running by its gated request. */
static void runner_start_held(reg_fixture_t *f, runner_t *r, gated_t *g, bool release_in_done,
                              pthread_t *th)
{
    *r = (runner_t){.g = g, .rc = 1};
    cr_assert_eq(eng_registry_acquire(f->reg, "mlp", -1, &r->s), 0, "%s", fs_errmsg());
    if (release_in_done)
        g->release = r->s;
    cr_assert_eq(pthread_create(th, NULL, runner_main, r), 0);
    gated_wait_entered(g);
}

/* A load (rebuild) or unload of "mlp" on its own thread; rc stays 1 until
 * it returns. */
typedef struct reg_job {
    reg_fixture_t *f;
    bool load;
    atomic_int rc;
} reg_job_t;

static void *reg_job_main(void *arg)
{
    reg_job_t *j = arg;
    int rc = j->load ? eng_registry_load(j->f->reg, "mlp") : eng_registry_unload(j->f->reg, "mlp");
    if (rc != 0)
        cr_log_error("%s: %s", j->load ? "load" : "unload", fs_errmsg());
    atomic_store(&j->rc, rc);
    return NULL;
}

static void reg_job_start(reg_fixture_t *f, bool load, reg_job_t *j, pthread_t *th)
{
    j->f = f;
    j->load = load;
    atomic_init(&j->rc, 1);
    cr_assert_eq(pthread_create(th, NULL, reg_job_main, j), 0);
}

/* With the one instance running a caller's batch, submits queue (the
 * worker waits for the slot, too) and that batch's end wakes the worker. */
Test(batcher, submit_run_queues_while_every_instance_runs_and_the_batch_end_wakes_a_worker)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    gated_t held;
    gated_init(&held, &(eng_shape_t){2, {1, 64}}, 1);
    runner_t runner;
    pthread_t th;
    runner_start_held(&f, &runner, &held, false, &th);

    treq_t t[2];
    treq_init(&t[0], 1, &(eng_shape_t){2, {2, 64}}, 2);
    treq_init(&t[1], 1, &(eng_shape_t){2, {1, 64}}, 3);
    cr_assert_eq(eng_served_submit_run(s, &t[0].req), 0, "%s", fs_errmsg());
    cr_expect_eq(t[0].done_calls, 0, "no slot free: queued");
    cr_assert_eq(eng_served_submit(s, &t[1].req), 0, "%s", fs_errmsg());
    usleep(30000);
    cr_expect_eq(t[0].done_calls + t[1].done_calls, 0,
                 "the worker does not run a second batch beside the caller's");
    gated_open(&held);
    pthread_join(th, NULL);
    cr_expect_eq(runner.rc, 0, "%s", fs_errmsg());
    cr_expect(pthread_equal(held.t.done_thread, th), "the caller's own thread ran it");
    cr_expect_eq(held.t.req.status, 0, "%s", held.t.req.error);
    cr_expect(treq_matches_direct_run(&held.t, eng_served_model(s)));
    for (int i = 0; i < 2; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].done_calls, 1);
        cr_expect(!pthread_equal(t[i].done_thread, pthread_self()) &&
                      !pthread_equal(t[i].done_thread, th), "request %d: a worker ran it", i);
        cr_expect_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 3u, "the two queued ones together");
        cr_expect(treq_matches_direct_run(&t[i], eng_served_model(s)));
        treq_fini(&t[i]);
    }
    gated_fini(&held);
    eng_served_release(s);
    reg_fixture_close(&f);
}

/* Unload while a caller's batch runs: the queued request fails at once,
 * the running batch finishes, and the version is freed only after it --
 * even though its done released the caller's reference (ASan sees a use
 * after free otherwise). */
Test(batcher, unload_fails_the_queue_and_waits_for_a_caller_run_batch)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    gated_t held;
    gated_init(&held, &(eng_shape_t){2, {2, 64}}, 1);
    eng_tensor_t *want[1];
    cr_assert_eq(eng_model_run(eng_served_model(s), held.t.in, 1, want), 0, "%s", fs_errmsg());
    runner_t runner;
    pthread_t th;
    runner_start_held(&f, &runner, &held, true, &th);

    treq_t queued;
    treq_init(&queued, 1, &(eng_shape_t){2, {1, 64}}, 2);
    cr_assert_eq(eng_served_submit_run(s, &queued.req), 0, "%s", fs_errmsg());
    cr_expect_eq(queued.done_calls, 0, "no slot free: queued");
    eng_served_release(s);

    reg_job_t job;
    pthread_t unloader;
    reg_job_start(&f, false, &job, &unloader);
    treq_wait(&queued);
    cr_expect_eq(queued.req.status, FS_ESTATE);
    cr_expect(strstr(queued.req.error, "model 'mlp' was unloaded"), "%s", queued.req.error);
    usleep(30000);
    cr_expect_eq(atomic_load(&job.rc), 1, "the unload waits for the running batch");
    gated_open(&held);
    pthread_join(th, NULL);
    pthread_join(unloader, NULL);
    cr_expect_eq(runner.rc, 0);
    cr_expect_eq(atomic_load(&job.rc), 0);
    cr_expect_eq(held.t.req.status, 0, "the running batch finished: %s", held.t.req.error);
    cr_expect(held.t.req.status == 0 &&
              memcmp(held.t.req.outputs[0]->data, want[0]->data, eng_tensor_bytes(want[0])) == 0,
              "the outputs of a direct run");
    eng_tensor_free(want[0]);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_success, 1);
    cr_expect_eq(st.request_failure, 1);
    cr_expect_eq(st.pending, 0);
    treq_fini(&queued);
    gated_fini(&held);
    reg_fixture_close(&f);
}

/* A rebuild while a caller's batch runs: what queued behind it runs on the
 * old version once the batch ends, and the swap completes after both. */
Test(batcher, rebuild_drains_requests_queued_behind_a_caller_run_batch)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    eng_served_t *s = load_and_acquire(&f, "mlp");
    gated_t held;
    gated_init(&held, &(eng_shape_t){2, {1, 64}}, 1);
    runner_t runner;
    pthread_t th;
    runner_start_held(&f, &runner, &held, false, &th);
    treq_t queued;
    treq_init(&queued, 1, &(eng_shape_t){2, {2, 64}}, 2);
    cr_assert_eq(eng_served_submit(s, &queued.req), 0, "%s", fs_errmsg());

    reg_job_t job;
    pthread_t loader;
    reg_job_start(&f, true, &job, &loader);
    usleep(30000);
    cr_expect_eq(queued.done_calls, 0, "still behind the caller's batch");
    cr_expect_eq(atomic_load(&job.rc), 1, "the old version still drains");
    gated_open(&held);
    treq_wait(&queued);
    cr_expect_eq(queued.req.status, 0, "run on the old version: %s", queued.req.error);
    cr_expect(!pthread_equal(queued.done_thread, th), "by a worker");
    cr_expect(treq_matches_direct_run(&queued, eng_served_model(s)));
    pthread_join(th, NULL);
    cr_expect_eq(runner.rc, 0);
    cr_expect_eq(held.t.req.status, 0, "%s", held.t.req.error);
    eng_served_release(s);
    pthread_join(loader, NULL);
    cr_expect_eq(atomic_load(&job.rc), 0);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_success, 2);
    cr_expect_eq(st.pending, 0);
    treq_fini(&queued);
    gated_fini(&held);
    reg_fixture_close(&f);
}

/* ---- many threads submitting with eng_served_submit_run ----------------------------------- */

/* Threads inside a `done` now, and the most seen at once. A batch calls
 * its requests' dones one after another on one thread, so more threads in
 * a done at once than batches may run would show more batches running;
 * each done lingers so that overlaps are likely to be seen. */
static atomic_int in_done, max_in_done;

static void counting_done(eng_request_t *r)
{
    int now = atomic_fetch_add(&in_done, 1) + 1;
    int seen = atomic_load(&max_in_done);
    while (now > seen && !atomic_compare_exchange_weak(&max_in_done, &seen, now))
        ;
    usleep(50);
    atomic_fetch_sub(&in_done, 1);
    treq_done(r);
}

static void many_threads_submit_run(uint32_t instances, uint64_t delay_ns)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, delay_ns);
    f.opts.instances = instances;
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    atomic_store(&in_done, 0);
    atomic_store(&max_in_done, 0);
    client_t c[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        c[i] = (client_t){.f = &f, .id = i, .run = true, .done = counting_done};
        cr_assert_eq(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
    }
    uint64_t rows = 0;
    int here = 0, batched = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(c[i].n_failed, 0, "client %d: %d failed: %s", i, c[i].n_failed,
                     c[i].first_error);
        cr_expect_eq(c[i].n_wrong, 0, "client %d: %d outputs differ from a direct run", i,
                     c[i].n_wrong);
        cr_expect_eq(c[i].n_not_once, 0, "client %d: done not called exactly once", i);
        rows += c[i].rows;
        here += c[i].n_here;
        batched += c[i].n_batched;
    }
    int most = atomic_load(&max_in_done);
    cr_expect_leq(most, (int)instances, "%d batches ran at once, instances %u", most, instances);
    cr_expect_gt(here, 0, "the first submit finds a slot free and the batch ready");
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    uint64_t n = N_CLIENTS * N_PER_CLIENT;
    cr_log_info("submit_run, instances %u, delay %llu us: %llu requests in %llu batches, %d done "
                "on the submitting thread, %d shared a batch, at most %d batches at once",
                instances, (unsigned long long)(delay_ns / 1000), (unsigned long long)n,
                (unsigned long long)st.exec_count, here, batched, most);
    cr_expect_eq(st.request_success, n);
    cr_expect_eq(st.request_failure, 0);
    cr_expect_eq(st.inference_count, rows);
    cr_expect_eq(st.batch_rows_sum, rows);
    cr_expect_eq(st.pending, 0);
    reg_fixture_close(&f);
}

Test(batcher, submit_run_from_many_threads_runs_at_most_instances_batches)
{
    many_threads_submit_run(2, 0);
}

Test(batcher, submit_run_from_many_threads_with_a_delay_shares_batches_with_workers)
{
    many_threads_submit_run(3, 200000);
}

/* ---- unload and rebuild under eng_served_submit_run traffic -------------------------------- */

typedef struct run_traffic {
    reg_fixture_t *f;
    int id;
    atomic_bool *stop;
    bool unloading;                /* FS_ESTATE ends the loop (acquire, submit) or is counted (done) */
    void (*done)(eng_request_t *); /* NULL: treq_done */
    atomic_int n_ok;               /* read by the test thread while this one runs */
    int n_refused, n_failed_queued, n_retried, n_bad;
    char first_error[FS_ERRMSG_MAX + 32];
} run_traffic_t;

static void run_traffic_bad(run_traffic_t *tr, const char *what, const char *msg)
{
    if (tr->n_bad++ == 0)
        snprintf(tr->first_error, sizeof tr->first_error, "%s: %s", what, msg);
}

/* Acquire and eng_served_submit_run until stopped; on FS_ESTATE from a
 * rebuild, re-acquire and retry once (what the server does). Each answer
 * is checked against a direct run while the reference is held. */
static void *run_traffic_main(void *arg)
{
    run_traffic_t *tr = arg;
    for (int k = 0; !atomic_load(tr->stop); k++) {
        treq_t t;
        treq_init(&t, 1, &(eng_shape_t){2, {1 + k % 3, 64}}, tr->id * 1000 + k % 7);
        if (tr->done)
            t.req.done = tr->done;
        eng_served_t *s = NULL;
        int rc = eng_registry_acquire(tr->f->reg, "mlp", -1, &s);
        if (rc == 0 && (rc = eng_served_submit_run(s, &t.req)) == FS_ESTATE && !tr->unloading) {
            eng_served_release(s);
            s = NULL;
            tr->n_retried++;
            if ((rc = eng_registry_acquire(tr->f->reg, "mlp", -1, &s)) == 0)
                rc = eng_served_submit_run(s, &t.req);
        }
        bool last = false;
        if (rc == 0) {
            treq_wait(&t);
            if (t.done_calls != 1)
                run_traffic_bad(tr, "done", "not called exactly once");
            else if (t.req.status == 0 && treq_matches_direct_run(&t, eng_served_model(s)))
                atomic_fetch_add(&tr->n_ok, 1);
            else if (t.req.status == FS_ESTATE && tr->unloading)
                tr->n_failed_queued++;
            else
                run_traffic_bad(tr, "done", t.req.status ? t.req.error : "wrong outputs");
        } else if (rc == FS_ESTATE && tr->unloading) {
            tr->n_refused++;
            last = true;
        } else {
            run_traffic_bad(tr, "submit", fs_errmsg());
        }
        eng_served_release(s);
        treq_fini(&t);
        if (last)
            break;
    }
    return NULL;
}

static int run_traffic_ok(run_traffic_t *tr, int n)
{
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += atomic_load(&tr[i].n_ok);
    return ok;
}

static void run_traffic_wait_ok(run_traffic_t *tr, int n, int at_least)
{
    for (int spins = 0; run_traffic_ok(tr, n) < at_least && spins < 20000; spins++)
        usleep(500);
}

#define N_RUN_TRAFFIC 8

/* A done that takes a while, so that batches are slow and requests queue
 * behind them. */
static void lingering_done(eng_request_t *r)
{
    usleep(200);
    treq_done(r);
}

/* One instance for eight submitters whose dones linger: requests queue
 * while a caller's batch runs, so the unload finds some queued and fails
 * them (how many is up to the scheduler: the counts must add up). */
Test(batcher, unload_under_submit_run_traffic_completes_every_request_once)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(8, 0);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    run_traffic_t tr[N_RUN_TRAFFIC];
    atomic_bool stop = false;
    pthread_t th[N_RUN_TRAFFIC];
    for (int i = 0; i < N_RUN_TRAFFIC; i++) {
        tr[i] = (run_traffic_t){.f = &f, .id = i, .stop = &stop, .unloading = true,
                                .done = lingering_done};
        cr_assert_eq(pthread_create(&th[i], NULL, run_traffic_main, &tr[i]), 0);
    }
    run_traffic_wait_ok(tr, N_RUN_TRAFFIC, 100);
    cr_expect_eq(eng_registry_unload(f.reg, "mlp"), 0, "%s", fs_errmsg());
    int refused = 0, failed = 0;
    for (int i = 0; i < N_RUN_TRAFFIC; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(tr[i].n_bad, 0, "thread %d: %d bad, first: %s", i, tr[i].n_bad,
                     tr[i].first_error);
        cr_expect_eq(tr[i].n_refused, 1, "thread %d ends on a refusal", i);
        refused += tr[i].n_refused;
        failed += tr[i].n_failed_queued;
    }
    int ok = run_traffic_ok(tr, N_RUN_TRAFFIC);
    cr_log_info("unload under submit_run: %d served, %d failed in the queue, %d refused", ok,
                failed, refused);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_success, (uint64_t)ok);
    cr_expect_eq(st.request_failure, (uint64_t)failed);
    cr_expect_eq(st.pending, 0);
    reg_fixture_close(&f);
}

Test(batcher, rebuild_under_submit_run_traffic_loses_nothing)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(8, 0);
    f.opts.instances = 2;
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    run_traffic_t tr[N_RUN_TRAFFIC];
    atomic_bool stop = false;
    pthread_t th[N_RUN_TRAFFIC];
    for (int i = 0; i < N_RUN_TRAFFIC; i++) {
        tr[i] = (run_traffic_t){.f = &f, .id = i, .stop = &stop};
        cr_assert_eq(pthread_create(&th[i], NULL, run_traffic_main, &tr[i]), 0);
    }
    int after = 0;
    for (int load = 0; load < 4; load++) {
        run_traffic_wait_ok(tr, N_RUN_TRAFFIC, after + 50);
        cr_expect_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
        after = run_traffic_ok(tr, N_RUN_TRAFFIC);
    }
    run_traffic_wait_ok(tr, N_RUN_TRAFFIC, after + 50);
    atomic_store(&stop, true);
    int retried = 0;
    for (int i = 0; i < N_RUN_TRAFFIC; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(tr[i].n_bad, 0, "thread %d: %d bad, first: %s", i, tr[i].n_bad,
                     tr[i].first_error);
        retried += tr[i].n_retried;
    }
    int ok = run_traffic_ok(tr, N_RUN_TRAFFIC);
    cr_expect_gt(ok, after, "traffic went on after the swaps");
    cr_log_info("rebuild under submit_run: %d requests, %d retried once", ok, retried);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_failure, 0);
    cr_expect_eq(st.request_success, (uint64_t)ok);
    cr_expect_eq(st.pending, 0);
    reg_fixture_close(&f);
}

/* A batch of several requests splits its compute time into the inputs'
 * concatenation, the run and the outputs' split; each request carries the
 * first and the last (tracing's COMPUTE_INPUT_END and
 * COMPUTE_OUTPUT_START), inside its compute time. Real clock. */
Test(batcher, a_batch_of_several_gives_each_request_its_input_and_output_time)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 200000000ull); /* 200 ms: the four arrive well within it */
    int64_t dims[2] = {-1, -1};
    const char *params[2] = {"batch", "seq"};
    repo_add_model(&f, "seq", 1, 2, dims, params, 1);
    eng_served_t *s = load_and_acquire(&f, "seq");
    treq_t t[4];
    for (int i = 0; i < 4; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {2, 64}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    for (int i = 0; i < 4; i++) {
        treq_wait(&t[i]);
        cr_assert_eq(t[i].req.status, 0, "%s", t[i].req.error);
        cr_expect_eq(t[i].req.batch_rows, 8, "request %d ran in one batch of the four", i);
        cr_expect_gt(t[i].req.input_ns, 0, "request %d: no concatenation time", i);
        cr_expect_gt(t[i].req.output_ns, 0, "request %d: no split time", i);
        cr_expect_leq(t[i].req.input_ns + t[i].req.output_ns, t[i].req.compute_ns);
        cr_expect_eq(t[i].req.input_ns, t[0].req.input_ns, "one batch, one time");
    }
    for (int i = 0; i < 4; i++)
        treq_fini(&t[i]);
    eng_served_release(s);
    reg_fixture_close(&f);
}
