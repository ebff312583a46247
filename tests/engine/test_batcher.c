/* test_batcher.c -- tests of engine/batcher.c through the registry:
 * concurrent requests batched with each getting its own rows bit for bit,
 * shapes batched apart, a full queue, deadlines, requests refused at
 * submit, models that do not batch, and the stats adding up. Waits that
 * must not end by themselves run on the manual clock (common/clock.h). */
#include <criterion/criterion.h>
#include <pthread.h>
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
    int n_wrong, n_failed, n_batched;
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
        eng_served_t *s = NULL;
        int rc = eng_registry_acquire(c->f->reg, "mlp", -1, &s);
        if (rc == 0)
            rc = eng_served_submit(s, &t.req);
        if (rc == 0) {
            treq_wait(&t);
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
