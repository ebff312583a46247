/* test_registry.c -- tests of engine/registry.c: names, load, acquire,
 * rebuild (under traffic, failed, to a new version), unload under load, the
 * index, on a temporary repository of the demo models (make writes them to
 * models/ before the tests run). The batcher's own suite is test_batcher.c. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "registry_fixture.h"

TestSuite(registry, .timeout = 120);

Test(registry, check_name_accepts_and_refuses)
{
    cr_expect_eq(eng_registry_check_name("mlp"), 0);
    cr_expect_eq(eng_registry_check_name("My_model-2.v1"), 0);
    cr_expect_eq(eng_registry_check_name("a.."), 0, "dots inside stay in the directory");
    char longest[ENG_MODEL_NAME_MAX];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    cr_expect_eq(eng_registry_check_name(longest), 0, "127 bytes");

    const char *bad[] = {"", "..", ".", ".hidden", "a/b", "../etc", "a b", "m\xc3\xa9", "x\\y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(eng_registry_check_name(bad[i]), FS_EINVAL, "'%s' accepted", bad[i]);
        cr_expect(strstr(fs_errmsg(), "model name"), "%s", fs_errmsg());
    }
    cr_expect_eq(eng_registry_check_name(NULL), FS_EINVAL);
    char too_long[ENG_MODEL_NAME_MAX + 1];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    cr_expect_eq(eng_registry_check_name(too_long), FS_EINVAL, "128 bytes");
    cr_expect(strstr(fs_errmsg(), "128 bytes"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_check_name("a/b"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "'/'"), "the message shows the character: %s", fs_errmsg());
}

/* The rule the config and the load generator apply too: why, and where. */
Test(registry, name_problem_says_why_and_at_which_byte)
{
    size_t at = 99;
    cr_expect_null(eng_registry_name_problem("mlp", &at));
    cr_expect_eq(at, 0);
    cr_expect_str_eq(eng_registry_name_problem("", &at), "is empty");
    cr_expect_str_eq(eng_registry_name_problem(NULL, &at), "is empty");
    cr_expect_str_eq(eng_registry_name_problem("..", &at), "starts with '.'");
    const char *why = eng_registry_name_problem("ab/c", &at);
    cr_expect(why && strstr(why, "a character other than"), "%s", why ? why : "(none)");
    cr_expect_eq(at, 2);
    char too_long[ENG_MODEL_NAME_MAX + 1];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    cr_expect_str_eq(eng_registry_name_problem(too_long, &at), "is longer than 127 bytes");
}

Test(registry, load_acquire_submit_gives_the_outputs_of_a_direct_run)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    repo_copy(&f, "cnn", "cnn", 3);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_registry_load(f.reg, "cnn"), 0, "%s", fs_errmsg());

    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());
    cr_expect_str_eq(eng_served_name(s), "mlp");
    cr_expect_eq(eng_served_version(s), 1);
    cr_expect(eng_served_batches(s));
    eng_serve_options_t o;
    eng_served_options(s, &o);
    cr_expect_eq(o.max_batch_size, 64);
    cr_expect_str_eq(eng_model_name(eng_served_model(s)), "mlp:1", "owner tag name:version");
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {3, 64}}, 7);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    cr_assert_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect_eq(t.done_calls, 1);
    cr_expect_eq(t.req.n_outputs, 1);
    cr_expect_eq(t.req.outputs[0]->shape.dims[0], 3);
    cr_expect_eq(t.req.outputs[0]->shape.dims[1], 10);
    cr_expect_eq(t.req.batch_rows, 3);
    cr_expect_gt(t.req.compute_ns, 0);
    cr_expect(treq_matches_direct_run(&t, eng_served_model(s)));
    treq_fini(&t);
    eng_served_release(s);

    cr_assert_eq(eng_registry_acquire(f.reg, "cnn", 3, &s), 0, "%s", fs_errmsg());
    treq_init(&t, 1, &(eng_shape_t){4, {2, 1, 28, 28}}, 3);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    cr_assert_eq(t.req.status, 0, "%s", t.req.error);
    cr_expect(treq_matches_direct_run(&t, eng_served_model(s)));
    treq_fini(&t);
    eng_served_release(s);

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0, "%s", fs_errmsg());
    cr_expect_eq(st.request_success, 1);
    cr_expect_eq(st.inference_count, 3);
    cr_expect_eq(st.exec_count, 1);
    cr_expect_eq(st.pending, 0);
    cr_expect_eq(st.batch_buckets[2], 1, "3 rows: the (2, 4] bucket");
    cr_expect_gt(st.last_inference_ms, 0);
    reg_fixture_close(&f);
}

Test(registry, acquire_says_unknown_not_loaded_or_wrong_version)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    repo_copy(&f, "cnn", "cnn", 1);
    eng_served_t *s = (eng_served_t *)&f; /* must be cleared on error */
    cr_expect_eq(eng_registry_acquire(f.reg, "nope", -1, &s), FS_ENOENT);
    cr_expect_null(s);
    cr_expect(strstr(fs_errmsg(), "nope"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_acquire(f.reg, "cnn", -1, &s), FS_ESTATE, "in the repository");
    cr_expect(strstr(fs_errmsg(), "not loaded"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_acquire(f.reg, "../mlp", -1, &s), FS_EINVAL);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_registry_acquire(f.reg, "mlp", 2, &s), FS_ENOENT);
    cr_expect(strstr(fs_errmsg(), "version 2"), "%s", fs_errmsg());
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", 1, &s), 0, "%s", fs_errmsg());
    eng_served_release(s);
    eng_served_release(NULL);
    cr_assert_eq(eng_registry_unload(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), FS_ESTATE);
    cr_expect(strstr(fs_errmsg(), "unloaded"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_unload(f.reg, "mlp"), FS_ENOENT, "unloaded twice");
    cr_expect_eq(eng_registry_unload(f.reg, "cnn"), FS_ENOENT, "never loaded");
    reg_fixture_close(&f);
}

Test(registry, load_of_a_missing_or_bad_model_fails_cleanly)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    cr_expect_eq(eng_registry_load(f.reg, "missing"), FS_ENOENT);
    cr_expect(strstr(fs_errmsg(), "missing"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_load(f.reg, "a/b"), FS_EINVAL);
    repo_write(&f, "empty", -1, NULL, 0);
    cr_expect_eq(eng_registry_load(f.reg, "empty"), FS_ENOENT, "no version directory");
    cr_expect(strstr(fs_errmsg(), "no version"), "%s", fs_errmsg());
    repo_write(&f, "broken", 1, "not a protobuf \xff\xff\xff", 18);
    cr_expect_eq(eng_registry_load(f.reg, "broken"), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "broken") && strstr(fs_errmsg(), "model.onnx"), "%s",
              fs_errmsg());
    eng_served_t *s = NULL;
    cr_expect_eq(eng_registry_acquire(f.reg, "broken", -1, &s), FS_ESTATE);
    cr_expect(strstr(fs_errmsg(), "not a valid ONNX"), "the last load's error: %s", fs_errmsg());

    /* The options callback's error, and a device the registry does not have. */
    repo_copy(&f, "mlp", "mlp", 1);
    f.opts_error = FS_EPARSE;
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "config.json"), "%s", fs_errmsg());
    f.opts_error = 0;
    f.opts.device_set = true;
    f.opts.n_devices = 1;
    f.opts.devices[0] = (eng_device_t){ENG_DEVICE_CUDA, 3};
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "cuda:3"), "%s", fs_errmsg());
    /* Several devices: each must be the registry's, and each only once. */
    f.opts.n_devices = 2;
    f.opts.devices[0] = (eng_device_t){ENG_DEVICE_CPU, 0};
    f.opts.devices[1] = (eng_device_t){ENG_DEVICE_CUDA, 1};
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "cuda:1 is not available") ||
                  strstr(fs_errmsg(), "device 'cuda:1' is not available"), "%s", fs_errmsg());
    f.opts.devices[1] = (eng_device_t){ENG_DEVICE_CPU, 0};
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "listed twice"), "%s", fs_errmsg());
    f.opts.n_devices = 0;
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_EINVAL);
    f.opts.n_devices = 1;
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    reg_fixture_close(&f);
}

/* ---- rebuild under traffic ------------------------------------------------------- */

typedef struct traffic {
    reg_fixture_t *f;
    const char *name;
    int id;
    atomic_bool *stop;
    const float *want;          /* expected output of this thread's input ([2, 10]) */
    atomic_int n_ok;            /* read by the test thread while this one runs */
    int n_retried, n_failed, n_refused;
    char first_error[FS_ERRMSG_MAX + 32];
    bool unloading;             /* refusals (FS_ESTATE) end the loop instead of failing */
} traffic_t;

static void traffic_fail(traffic_t *tr, const char *what, const char *msg)
{
    if (tr->n_failed++ == 0)
        snprintf(tr->first_error, sizeof tr->first_error, "%s: %s", what, msg);
}

/* What the server does: acquire, submit, and on FS_ESTATE (the version is
 * being replaced) re-acquire and retry once. */
static void *traffic_main(void *arg)
{
    traffic_t *tr = arg;
    while (!atomic_load(tr->stop)) {
        treq_t t;
        treq_init(&t, 1, &(eng_shape_t){2, {2, 64}}, tr->id);
        eng_served_t *s = NULL;
        int rc = eng_registry_acquire(tr->f->reg, tr->name, -1, &s);
        if (rc == 0 && (rc = eng_served_submit(s, &t.req)) == FS_ESTATE && !tr->unloading) {
            eng_served_release(s);
            s = NULL;
            tr->n_retried++;
            if ((rc = eng_registry_acquire(tr->f->reg, tr->name, -1, &s)) == 0)
                rc = eng_served_submit(s, &t.req);
        }
        if (rc == 0) {
            treq_wait(&t);
            if (t.req.status == 0 &&
                memcmp(t.req.outputs[0]->data, tr->want, 20 * sizeof(float)) == 0)
                atomic_fetch_add(&tr->n_ok, 1);
            else if (t.req.status == FS_ESTATE && tr->unloading)
                tr->n_refused++;
            else
                traffic_fail(tr, "done", t.req.status ? t.req.error : "wrong outputs");
            cr_expect_eq(t.done_calls, 1);
        } else if (rc == FS_ESTATE && tr->unloading) {
            tr->n_refused++;
            eng_served_release(s);
            treq_fini(&t);
            break;
        } else {
            traffic_fail(tr, "submit", fs_errmsg());
        }
        eng_served_release(s);
        treq_fini(&t);
    }
    return NULL;
}

/* The reference output of thread id's input, from the served model. */
static void traffic_reference(reg_fixture_t *f, const char *name, int id, float *want)
{
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f->reg, name, -1, &s), 0, "%s", fs_errmsg());
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {2, 64}}, id);
    eng_tensor_t *out[1];
    cr_assert_eq(eng_model_run(eng_served_model(s), t.in, 1, out), 0, "%s", fs_errmsg());
    memcpy(want, out[0]->data, 20 * sizeof(float));
    eng_tensor_free(out[0]);
    treq_fini(&t);
    eng_served_release(s);
}

static int traffic_total_ok(traffic_t *tr, int n)
{
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += atomic_load(&tr[i].n_ok);
    return ok;
}

static void traffic_wait_ok(traffic_t *tr, int n, int at_least)
{
    for (int spins = 0; traffic_total_ok(tr, n) < at_least && spins < 20000; spins++)
        usleep(500);
}

#define N_TRAFFIC 8

Test(registry, rebuild_under_traffic_fails_no_request)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(16, 500000);
    f.opts.instances = 2;
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    float want[N_TRAFFIC][20];
    traffic_t tr[N_TRAFFIC];
    atomic_bool stop = false;
    pthread_t th[N_TRAFFIC];
    for (int i = 0; i < N_TRAFFIC; i++) {
        traffic_reference(&f, "mlp", i, want[i]);
        tr[i] = (traffic_t){.f = &f, .name = "mlp", .id = i, .stop = &stop, .want = want[i]};
        cr_assert_eq(pthread_create(&th[i], NULL, traffic_main, &tr[i]), 0);
    }
    /* Twice as asked, then a few more times for more swaps under load. */
    int after = 0;
    for (int load = 0; load < 6; load++) {
        traffic_wait_ok(tr, N_TRAFFIC, after + 50);
        cr_expect_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
        after = traffic_total_ok(tr, N_TRAFFIC);
    }
    traffic_wait_ok(tr, N_TRAFFIC, after + 50);
    atomic_store(&stop, true);
    int retried = 0;
    for (int i = 0; i < N_TRAFFIC; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(tr[i].n_failed, 0, "thread %d: %d failed, first: %s", i, tr[i].n_failed,
                     tr[i].first_error);
        retried += tr[i].n_retried;
    }
    cr_expect_gt(traffic_total_ok(tr, N_TRAFFIC), after, "traffic went on after the swaps");
    cr_log_info("rebuild under traffic: %d requests, %d retried once",
                traffic_total_ok(tr, N_TRAFFIC), retried);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_failure, 0);
    cr_expect_eq(st.request_success, (uint64_t)traffic_total_ok(tr, N_TRAFFIC),
                 "one record for version 1 across its rebuilds");
    cr_expect_eq(st.pending, 0);
    reg_fixture_close(&f);
}

Test(registry, failed_rebuild_keeps_the_old_version_serving)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    repo_write(&f, "mlp", 2, "corrupt \xff\xff\xff\xff", 12);
    cr_expect_eq(eng_registry_load(f.reg, "mlp"), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "version 2"), "%s", fs_errmsg());

    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_served_version(s), 1);
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    treq_fini(&t);
    eng_served_release(s);

    eng_model_entry_t *idx = NULL;
    size_t n = 0;
    cr_assert_eq(eng_registry_index(f.reg, &idx, &n), 0, "%s", fs_errmsg());
    cr_assert_eq(n, 1);
    cr_expect_str_eq(idx[0].name, "mlp");
    cr_expect_eq(idx[0].state, ENG_MODEL_READY);
    cr_expect_eq(idx[0].version, 1);
    cr_expect(strstr(idx[0].reason, "version 2") && strstr(idx[0].reason, "not a valid ONNX"),
              "the failed load is kept as the reason: '%s'", idx[0].reason);
    cr_expect_eq(idx[0].stats.request_success, 1);
    free(idx);

    /* Fixed on disk: the next load serves version 2 and clears the reason. */
    repo_copy(&f, "mlp", "mlp", 2);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_registry_index(f.reg, &idx, &n), 0, "%s", fs_errmsg());
    cr_expect_eq(idx[0].version, 2);
    cr_expect_str_eq(idx[0].reason, "");
    free(idx);
    reg_fixture_close(&f);
}

Test(registry, rebuild_picks_up_a_new_version_directory)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0);
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 1);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    treq_wait(&t);
    treq_fini(&t);
    eng_served_release(s);

    repo_copy(&f, "mlp", "mlp", 10); /* numerically newest, not by name */
    repo_copy(&f, "mlp", "mlp", 9);
    repo_write(&f, "mlp", 11, NULL, 0); /* a version without model.onnx is not one */
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0);
    cr_expect_eq(eng_served_version(s), 10);
    cr_expect_str_eq(eng_model_name(eng_served_model(s)), "mlp:10");
    eng_served_release(s);
    cr_expect_eq(eng_registry_acquire(f.reg, "mlp", 1, &s), FS_ENOENT, "version 1 is gone");

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0, "version 1's stats stay");
    cr_expect_eq(st.request_success, 1);
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0);
    cr_expect_eq(st.request_success, 0, "the served version's own record");
    cr_expect_eq(eng_registry_stats(f.reg, "mlp", 5, &st), FS_ENOENT);
    cr_expect_eq(eng_registry_stats(f.reg, "other", -1, &st), FS_ENOENT);
    reg_fixture_close(&f);
}

/* ---- unload ----------------------------------------------------------------------- */

Test(registry, unload_under_load_serves_or_refuses_every_request_and_returns_every_byte)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    f.opts = reg_batching(64, 5000000); /* requests wait in the queue */
    repo_copy(&f, "mlp", "mlp", 1);
    alloc_cache_stats_t before, after;
    alloc_cache_stats(f.mem.cache, &before);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0);
    alloc_owner_t owners[2] = {eng_model_owner(eng_served_model(s)),
                               eng_model_activation_owner(eng_served_model(s))};
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.mem.cache, owners[0], &os), 0);
    cr_expect_gt(os.allocated.current, 0, "weights");
    eng_served_release(s);

    float want[N_TRAFFIC][20];
    traffic_t tr[N_TRAFFIC];
    atomic_bool stop = false;
    pthread_t th[N_TRAFFIC];
    for (int i = 0; i < N_TRAFFIC; i++) {
        traffic_reference(&f, "mlp", i, want[i]);
        tr[i] = (traffic_t){.f = &f, .name = "mlp", .id = i, .stop = &stop, .want = want[i],
                            .unloading = true};
        cr_assert_eq(pthread_create(&th[i], NULL, traffic_main, &tr[i]), 0);
    }
    traffic_wait_ok(tr, N_TRAFFIC, 40);
    cr_expect_eq(eng_registry_unload(f.reg, "mlp"), 0, "%s", fs_errmsg());
    /* The threads stop on their own: acquire and submit now refuse. */
    int refused = 0, ok = 0;
    for (int i = 0; i < N_TRAFFIC; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(tr[i].n_failed, 0, "thread %d: %s", i, tr[i].first_error);
        refused += tr[i].n_refused;
        ok += atomic_load(&tr[i].n_ok);
    }
    cr_expect_gt(ok, 0);
    cr_log_info("unload under load: %d served, %d refused", ok, refused);

    for (int i = 0; i < 2; i++)
        cr_expect_eq(alloc_cache_owner_stats(f.mem.cache, owners[i], &os), FS_EINVAL,
                     "owner %d is gone with its bytes", i);
    alloc_cache_empty(f.mem.cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats(f.mem.cache, &after);
    cr_expect_eq(after.allocated.current, before.allocated.current);
    cr_expect_eq(after.reserved.current, before.reserved.current);

    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", -1, &st), 0, "stats outlive the unload");
    cr_expect_eq(st.request_success, (uint64_t)ok);
    cr_expect_eq(st.pending, 0);
    reg_fixture_close(&f);
}

/* Requests waiting in the queue when the model is unloaded fail with
 * FS_ESTATE, on the unloading thread; a later submit on a held reference
 * is refused, and the unload waits for that reference. */
/* A load or unload of "mlp" on another thread. */
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

Test(registry, unload_fails_queued_requests_and_waits_for_references)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(1000000000000ull);
    f.opts = reg_batching(64, 10000000000ull); /* a frozen clock: nothing runs */
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0);
    treq_t t[3];
    for (int i = 0; i < 3; i++) {
        treq_init(&t[i], 1, &(eng_shape_t){2, {1, 64}}, i);
        cr_assert_eq(eng_served_submit(s, &t[i].req), 0, "%s", fs_errmsg());
    }
    /* Unload from another thread: it fails the queue, then waits for our
     * reference. */
    reg_job_t job = {.f = &f, .load = false};
    atomic_init(&job.rc, 1);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, reg_job_main, &job), 0);
    for (int i = 0; i < 3; i++) {
        treq_wait(&t[i]);
        cr_expect_eq(t[i].req.status, FS_ESTATE);
        cr_expect(strstr(t[i].req.error, "model 'mlp' was unloaded"), "%s", t[i].req.error);
        cr_expect_null(t[i].req.outputs);
    }
    treq_t late;
    treq_init(&late, 1, &(eng_shape_t){2, {1, 64}}, 9);
    cr_expect_eq(eng_served_submit(s, &late.req), FS_ESTATE);
    cr_expect(strstr(fs_errmsg(), "unloaded"), "%s", fs_errmsg());
    usleep(20000);
    cr_expect_eq(atomic_load(&job.rc), 1, "unload waits for the reference");
    eng_served_release(s);
    pthread_join(th, NULL);
    cr_expect_eq(atomic_load(&job.rc), 0);
    eng_model_stats_t st;
    cr_assert_eq(eng_registry_stats(f.reg, "mlp", 1, &st), 0);
    cr_expect_eq(st.request_failure, 3);
    cr_expect_eq(st.pending, 0);
    for (int i = 0; i < 3; i++)
        treq_fini(&t[i]);
    treq_fini(&late);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* A rebuild runs what the old version had queued, refuses new submits on
 * it with FS_ESTATE saying to retry (a re-acquire then reaches the new
 * version), and waits for the last reference to the old one. */
Test(registry, rebuild_drains_the_old_version_and_refuses_it_with_a_retry)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    fs_clock_manual_install(1000000000000ull);
    f.opts = reg_batching(64, 10000000000ull); /* queued until the rebuild flushes them */
    repo_copy(&f, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *old = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &old), 0);
    treq_t queued[2];
    for (int i = 0; i < 2; i++) {
        treq_init(&queued[i], 1, &(eng_shape_t){2, {1 + i, 64}}, i);
        cr_assert_eq(eng_served_submit(old, &queued[i].req), 0, "%s", fs_errmsg());
    }
    repo_copy(&f, "mlp", "mlp", 2);
    reg_job_t job = {.f = &f, .load = true};
    atomic_init(&job.rc, 1);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, reg_job_main, &job), 0);
    for (int i = 0; i < 2; i++) {
        treq_wait(&queued[i]);
        cr_expect_eq(queued[i].req.status, 0, "queued on the old version, run there: %s",
                     queued[i].req.error);
        cr_expect_eq(queued[i].req.batch_rows, 3, "flushed as one batch");
        cr_expect(treq_matches_direct_run(&queued[i], eng_served_model(old)));
    }
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 64}}, 5);
    int rc = eng_served_submit(old, &t.req);
    cr_expect_eq(rc, FS_ESTATE);
    cr_expect(strstr(fs_errmsg(), "model 'mlp' version 1 is being replaced; retry"), "%s",
              fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(f.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_served_version(s), 2);
    cr_assert_eq(eng_served_submit(s, &t.req), 0, "%s", fs_errmsg());
    usleep(20000);
    cr_expect_eq(atomic_load(&job.rc), 1, "the load waits for the old reference");
    eng_served_release(old);
    pthread_join(th, NULL);
    cr_expect_eq(atomic_load(&job.rc), 0);
    fs_clock_manual_advance(10000000000ull);
    treq_wait(&t);
    cr_expect_eq(t.req.status, 0, "%s", t.req.error);
    eng_served_release(s);
    treq_fini(&t);
    for (int i = 0; i < 2; i++)
        treq_fini(&queued[i]);
    reg_fixture_close(&f);
    fs_clock_set_source(NULL, NULL);
}

/* ---- index -------------------------------------------------------------------------- */

static const eng_model_entry_t *index_find(const eng_model_entry_t *idx, size_t n,
                                           const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(idx[i].name, name) == 0)
            return &idx[i];
    return NULL;
}

Test(registry, index_lists_every_directory_with_its_state)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    repo_copy(&f, "mlp", "mlp", 1);
    repo_copy(&f, "cnn", "cnn", 2);
    repo_write(&f, "empty", -1, NULL, 0);
    repo_write(&f, "broken", 4, "junk \xff\xff\xff", 8);
    repo_write(&f, ".hidden", -1, NULL, 0);
    repo_write(&f, "bad name", -1, NULL, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/README", f.repo);
    FILE *fp = fopen(path, "w");
    cr_assert(fp);
    fclose(fp);

    cr_assert_eq(eng_registry_load(f.reg, "mlp"), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_registry_load(f.reg, "broken"), FS_EPARSE);
    eng_model_entry_t *idx = NULL;
    size_t n = 0;
    cr_assert_eq(eng_registry_index(f.reg, &idx, &n), 0, "%s", fs_errmsg());
    cr_assert_eq(n, 4, "mlp, cnn, empty, broken; not the file or the bad names");
    const char *sorted[] = {"broken", "cnn", "empty", "mlp"};
    for (size_t i = 0; i < n; i++)
        cr_expect_str_eq(idx[i].name, sorted[i]);

    const eng_model_entry_t *e = index_find(idx, n, "mlp");
    cr_expect_eq(e->state, ENG_MODEL_READY);
    cr_expect_eq(e->version, 1);
    cr_expect_str_eq(e->reason, "");
    cr_expect_str_eq(e->device, "cpu");
    cr_expect_gt(e->weights_bytes, (64 * 128 + 128 * 64 + 64 * 10) * sizeof(float));
    cr_expect_eq(e->activations_bytes, 0, "nothing runs");
    cr_expect_str_eq(eng_model_state_name(e->state), "READY");
    e = index_find(idx, n, "cnn");
    cr_expect_eq(e->state, ENG_MODEL_UNAVAILABLE);
    cr_expect_eq(e->version, 2, "the newest on disk");
    cr_expect_str_eq(e->device, "");
    cr_expect_eq(e->weights_bytes, 0);
    e = index_find(idx, n, "empty");
    cr_expect_eq(e->state, ENG_MODEL_UNAVAILABLE);
    cr_expect_eq(e->version, -1);
    e = index_find(idx, n, "broken");
    cr_expect_eq(e->state, ENG_MODEL_UNAVAILABLE);
    cr_expect_eq(e->version, 4);
    cr_expect(strstr(e->reason, "not a valid ONNX"), "%s", e->reason);
    free(idx);

    cr_assert_eq(eng_registry_unload(f.reg, "mlp"), 0);
    cr_assert_eq(eng_registry_index(f.reg, &idx, &n), 0, "%s", fs_errmsg());
    e = index_find(idx, n, "mlp");
    cr_expect_eq(e->state, ENG_MODEL_UNAVAILABLE);
    cr_expect_str_eq(e->reason, "unloaded");
    cr_expect_eq(e->weights_bytes, 0);
    cr_expect_str_eq(eng_model_state_name(ENG_MODEL_UNLOADING), "UNLOADING");
    free(idx);

    /* A loaded model whose directory went away stays listed. */
    cr_assert_eq(eng_registry_load(f.reg, "cnn"), 0, "%s", fs_errmsg());
    snprintf(path, sizeof path, "%s/cnn/2/model.onnx", f.repo);
    remove(path);
    snprintf(path, sizeof path, "%s/cnn/2", f.repo);
    remove(path);
    snprintf(path, sizeof path, "%s/cnn", f.repo);
    remove(path);
    cr_assert_eq(eng_registry_index(f.reg, &idx, &n), 0, "%s", fs_errmsg());
    e = index_find(idx, n, "cnn");
    cr_assert(e);
    cr_expect_eq(e->state, ENG_MODEL_READY);
    cr_expect_eq(e->version, 2);
    free(idx);

    /* An unreadable repository. */
    eng_registry_t *gone = NULL;
    eng_registry_config_t cfg = {.repository = "/nonexistent/flatserve-repo",
                                 .device_memory = {&f.mem}, .cpu_memory = &f.mem};
    cr_assert_eq(eng_registry_create(&cfg, &gone), 0);
    cr_expect_eq(eng_registry_index(gone, &idx, &n), FS_EIO);
    cr_expect(strstr(fs_errmsg(), "/nonexistent/flatserve-repo"), "%s", fs_errmsg());
    eng_registry_destroy(gone);
    cfg.device_memory[0] = NULL;
    cr_expect_eq(eng_registry_create(&cfg, &gone), FS_EINVAL);
    cr_expect_null(gone);
    /* Two devices need two memories. */
    cfg.device_memory[0] = &f.mem;
    cfg.n_devices = 2;
    cr_expect_eq(eng_registry_create(&cfg, &gone), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "device_memory[1]"), "%s", fs_errmsg());
    cr_expect_null(gone);
    reg_fixture_close(&f);
}

/* ---- the repository's bounds ------------------------------------------------------------ */

Test(registry, model_and_version_directories_that_link_out_of_the_repository_are_refused)
{
    reg_fixture_t f;
    reg_fixture_open(&f);
    /* A model written beside the repository, and links to it from inside. */
    char outside[sizeof f.repo + 16], path[4 * sizeof f.repo];
    snprintf(outside, sizeof outside, "%s-outside", f.repo);
    snprintf(path, sizeof path, "mkdir -p %s/1 && cp models/mlp/1/model.onnx %s/1/", outside,
             outside);
    cr_assert_eq(system(path), 0);
    snprintf(path, sizeof path, "%s/linked", f.repo);
    cr_assert_eq(symlink(outside, path), 0);
    repo_copy(&f, "mlp", "inner", 1);
    snprintf(path, sizeof path, "%s/inner/2", f.repo);
    char target[sizeof f.repo + 32];
    snprintf(target, sizeof target, "%s/1", outside);
    cr_assert_eq(symlink(target, path), 0, "a version directory linking out");

    cr_expect_eq(eng_registry_load(f.reg, "linked"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "outside the repository"), "%s", fs_errmsg());
    cr_expect_eq(eng_registry_load(f.reg, "inner"), FS_EINVAL, "version 2 links out");
    cr_expect(strstr(fs_errmsg(), "outside the repository"), "%s", fs_errmsg());
    /* A link that stays inside is followed. */
    snprintf(path, sizeof path, "%s/inner/2", f.repo);
    cr_assert_eq(unlink(path), 0);
    snprintf(target, sizeof target, "%s/inner/1", f.repo);
    cr_assert_eq(symlink(target, path), 0);
    cr_expect_eq(eng_registry_load(f.reg, "inner"), 0, "%s", fs_errmsg());
    reg_fixture_close(&f);
    snprintf(path, sizeof path, "rm -rf %s", outside);
    cr_expect_eq(system(path), 0);
}
