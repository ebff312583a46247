/* test_server_load.c -- the server under concurrent traffic: 64 clients x
 * 200 requests all answered correctly with batches of more than one
 * observed, rebuilds under load losing nothing, unloads under load failing
 * cleanly and giving the bytes back, and SIGTERM answering every request in
 * flight before the process exits 0. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/common/child_stderr.h"
#include "tests/server/server_fixture.h"

#define N_BODIES 8

static srv_fixture_t fx;

/* Distinct MLP requests and the answer each gets alone. */
typedef struct traffic {
    unsigned port;
    char *bodies[N_BODIES];
    char *answers[N_BODIES];
    atomic_bool stop;
    atomic_int n_ok, n_unavailable, n_other;
    char other[512];              /* the first unexpected answer */
    pthread_mutex_t lock;
    int per_client;               /* requests per client; 0: until stop */
    bool exact;                   /* answers must match bit for bit (the CPU's GEMM is
                                   * batch-invariant; cuBLAS is not) */
    bool allow_unavailable;       /* 503 and 404 count as clean failures */
} traffic_t;

static char *mlp_body_rows(int rows, int seed)
{
    srv_buf_t b = {0};
    srv_buf_printf(&b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,64],\"datatype\":\"FP32\","
                       "\"data\":[", rows);
    for (int i = 0; i < rows * 64; i++)
        srv_buf_printf(&b, "%s%g", i ? "," : "", (double)((i * 5 + seed * 11) % 89) / 89.0 - 0.5);
    srv_buf_append(&b, "]}]}", 5);
    return b.data;
}

/* Whether an answer is the reference one: the same text on the CPU, the
 * same outputs within 1e-5 on a GPU (a request's rows may meet another
 * GEMM algorithm in a batch of another size). */
static bool answer_matches(const traffic_t *t, const char *got, const char *want)
{
    if (t->exact || strcmp(got, want) == 0)
        return strcmp(got, want) == 0;
    cJSON *a = cJSON_Parse(got), *b = cJSON_Parse(want);
    cJSON *da = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "outputs"), 0), "data");
    cJSON *db = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "outputs"), 0), "data");
    bool ok = cJSON_IsArray(da) && cJSON_IsArray(db) &&
              cJSON_GetArraySize(da) == cJSON_GetArraySize(db);
    for (int i = 0; ok && i < cJSON_GetArraySize(da); i++)
        ok = fabs(cJSON_GetArrayItem(da, i)->valuedouble - cJSON_GetArrayItem(db, i)->valuedouble) <= 1e-5;
    cJSON_Delete(a);
    cJSON_Delete(b);
    return ok;
}

static void traffic_init(traffic_t *t, unsigned port)
{
    memset(t, 0, sizeof *t);
    t->port = port;
    t->exact = strcmp(srv_app_device(fx.app), "cpu") == 0;
    pthread_mutex_init(&t->lock, NULL);
    for (int i = 0; i < N_BODIES; i++) {
        t->bodies[i] = mlp_body_rows(1 + i % 4, i);
        http_resp_t r = http_post(port, "/v2/models/mlp/infer", t->bodies[i]);
        cr_assert_eq(r.status, 200, "reference answer %d: %s", i, r.body);
        t->answers[i] = r.body;
    }
}

static void traffic_fini(traffic_t *t)
{
    for (int i = 0; i < N_BODIES; i++) {
        free(t->bodies[i]);
        free(t->answers[i]);
    }
    pthread_mutex_destroy(&t->lock);
}

/* One client: keeps its connection (one curl handle) like a real one. */
static void *traffic_client(void *arg)
{
    traffic_t *t = arg;
    static atomic_int next_id;
    int id = atomic_fetch_add(&next_id, 1);
    for (int k = 0; t->per_client ? k < t->per_client : !atomic_load(&t->stop); k++) {
        int which = (id + k) % N_BODIES;
        http_resp_t r = http_post(t->port, "/v2/models/mlp/infer", t->bodies[which]);
        if (r.status == 200 && answer_matches(t, r.body, t->answers[which])) {
            atomic_fetch_add(&t->n_ok, 1);
        } else if (t->allow_unavailable && (r.status == 503 || r.status == 404) &&
                   strstr(r.body, "\"error\"")) {
            atomic_fetch_add(&t->n_unavailable, 1);
        } else {
            if (atomic_fetch_add(&t->n_other, 1) == 0) {
                pthread_mutex_lock(&t->lock);
                snprintf(t->other, sizeof t->other, "status %ld (curl %d): %.400s", r.status,
                         (int)r.curl, r.body);
                pthread_mutex_unlock(&t->lock);
            }
        }
        free(r.body);
    }
    return NULL;
}

static void run_clients(traffic_t *t, int n, pthread_t *threads)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, traffic_client, t), 0);
}

static void join_clients(int n, pthread_t *threads)
{
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
}

static void start_mlp(void)
{
    fixture_init(&fx);
    fixture_add_model(&fx, "mlp", "mlp", 1);
    const char *mc = "{\"max_batch_size\": 32, \"max_queue_delay\": \"2ms\", \"max_queue\": 4096}";
    fixture_write(&fx, "mlp", "config.json", mc, strlen(mc));
    fx.cfg.server.threads = 4;
    fixture_start(&fx);
}

static void stop_mlp(void)
{
    fixture_stop(&fx);
}

TestSuite(srv_load, .init = start_mlp, .fini = stop_mlp, .timeout = 300);

Test(srv_load, sixty_four_clients_times_two_hundred_all_answered_right_and_batched)
{
    traffic_t t;
    traffic_init(&t, fx.port);
    t.per_client = 200;
    pthread_t threads[64];
    run_clients(&t, 64, threads);
    join_clients(64, threads);
    cr_expect_eq(atomic_load(&t.n_other), 0, "%d wrong answers, first: %s",
                 atomic_load(&t.n_other), t.other);
    cr_expect_eq(atomic_load(&t.n_ok), 64 * 200);

    http_resp_t r = http_get(fx.port, "/v2/models/mlp/stats");
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "model_stats"), 0);
    double execs = cJSON_GetObjectItem(st, "execution_count")->valuedouble;
    double success = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "inference_stats"),
                                                             "success"), "count")->valuedouble;
    cr_expect_eq(success, 64 * 200 + N_BODIES);
    cr_expect_lt(execs, success, "no request was batched with another: %s", r.body);
    bool big = false;
    cJSON *bs;
    cJSON_ArrayForEach(bs, cJSON_GetObjectItem(st, "batch_stats"))
    {
        cJSON *size = cJSON_GetObjectItem(bs, "batch_size");
        if (cJSON_IsNumber(size) && size->valuedouble > 4)
            big = true;
    }
    cr_expect(big, "no batch of more than 4 rows: %s", r.body);
    cJSON_Delete(doc);
    free(r.body);
    traffic_fini(&t);
}

Test(srv_load, rebuilds_under_load_lose_no_request)
{
    traffic_t t;
    traffic_init(&t, fx.port);
    pthread_t threads[8];
    run_clients(&t, 8, threads);
    for (int i = 0; i < 5; i++) {
        usleep(100000);
        http_resp_t r = http_post(fx.port, "/v2/repository/models/mlp/load", "");
        cr_expect_eq(r.status, 200, "rebuild %d: %s", i, r.body);
        free(r.body);
    }
    usleep(100000);
    atomic_store(&t.stop, true);
    join_clients(8, threads);
    cr_expect_eq(atomic_load(&t.n_other), 0, "%d requests failed during rebuilds, first: %s",
                 atomic_load(&t.n_other), t.other);
    cr_expect_gt(atomic_load(&t.n_ok), 0);
    traffic_fini(&t);
}

/* allocated bytes of the first cache in /v1/memory (the device's). */
static double device_allocated(unsigned port)
{
    http_resp_t r = http_get(port, "/v1/memory?segments=0");
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "caches"), 0);
    double v = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "allocated_bytes"), "current")->valuedouble;
    cJSON_Delete(doc);
    free(r.body);
    return v;
}

Test(srv_load, unload_under_load_fails_cleanly_and_gives_the_bytes_back)
{
    traffic_t t;
    traffic_init(&t, fx.port);
    t.allow_unavailable = true;
    pthread_t threads[8];
    run_clients(&t, 8, threads);
    usleep(200000);
    http_resp_t r = http_post(fx.port, "/v2/repository/models/mlp/unload", "");
    cr_expect_eq(r.status, 200, "unload: %s", r.body);
    free(r.body);
    usleep(100000);
    atomic_store(&t.stop, true);
    join_clients(8, threads);
    cr_expect_eq(atomic_load(&t.n_other), 0, "unclean failures, first: %s", t.other);
    cr_expect_gt(atomic_load(&t.n_unavailable), 0, "no request saw the unload");
    cr_expect_eq(device_allocated(fx.port), 0, "bytes still allocated with no model loaded");
    /* Loads again, and serves. */
    r = http_post(fx.port, "/v2/repository/models/mlp/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v2/models/mlp/infer", t.bodies[0]);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    traffic_fini(&t);
}

/* ---- the executable and its signals ------------------------------------------------ */

/* The flatserve binary beside this test binary. */
static void server_path(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(out, len, "%s/flatserve", self);
    if (access(out, X_OK) != 0)
        cr_skip_test("%s is not built", out);
}

/* Starts the server with `args`, reads its log until it says where it
 * listens; returns its pid and port, and the read end of its log. */
static pid_t spawn_server(char *const *args, unsigned *port, int *log_fd)
{
    int rfd;
    pid_t pid = fork_with_stderr_pipe(&rfd);
    if (pid == 0) {
        execv(args[0], args);
        _exit(127);
    }
    char log[16384];
    size_t len = 0;
    *port = 0;
    while (len < sizeof log - 1) {
        ssize_t n = read(rfd, log + len, sizeof log - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        log[len] = '\0';
        char *at = strstr(log, "listening on http://127.0.0.1:");
        if (at) {
            *port = (unsigned)strtoul(at + strlen("listening on http://127.0.0.1:"), NULL, 10);
            break;
        }
    }
    cr_assert_gt(*port, 0, "the server did not say where it listens: %s", log);
    *log_fd = rfd;
    return pid;
}

/* nv_inference_pending_request_count of `model` (queued or running). */
static double pending_requests(unsigned port, const char *model)
{
    http_resp_t r = http_get(port, "/metrics");
    char key[128];
    snprintf(key, sizeof key, "nv_inference_pending_request_count{model=\"%s\"", model);
    const char *line = r.body ? strstr(r.body, key) : NULL;
    const char *v = line ? strchr(line, '}') : NULL;
    double n = v ? strtod(v + 1, NULL) : -1;
    free(r.body);
    return n;
}

typedef struct slow_req {
    unsigned port;
    char *body;
    long status;
} slow_req_t;

static void *slow_post(void *arg)
{
    slow_req_t *q = arg;
    http_resp_t r = http_post(q->port, "/v2/models/mlp/infer", q->body);
    q->status = r.status;
    free(r.body);
    return NULL;
}

Test(srv_signals, sigterm_answers_every_request_in_flight_then_exits_zero, .timeout = 120)
{
    char bin[PATH_MAX + 16];
    server_path(bin, sizeof bin);
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    /* Requests wait up to 10 s for company, so SIGTERM finds them queued
     * however slowly the clients connect (a sanitizer build on a busy
     * machine); the drain runs them at once. */
    const char *mc = "{\"max_batch_size\": 64, \"max_queue_delay\": \"10s\"}";
    fixture_write(&f, "mlp", "config.json", mc, strlen(mc));
    char *args[] = {bin, "--host", "127.0.0.1", "--port", "0", "--repository", f.repo,
                    "--log-level", "info", NULL};
    unsigned port;
    int log_fd;
    pid_t pid = spawn_server(args, &port, &log_fd);
    slow_req_t q[16];
    pthread_t t[16];
    for (int i = 0; i < 16; i++) {
        q[i] = (slow_req_t){.port = port, .body = mlp_body_rows(1, i)};
        pthread_create(&t[i], NULL, slow_post, &q[i]);
    }
    double pending = 0;
    for (int i = 0; i < 800 && pending < 16; i++) {
        usleep(10000);
        pending = pending_requests(port, "mlp");
    }
    cr_assert_eq(pending, 16.0, "the 16 requests never were all queued");
    uint64_t t0 = fs_clock_now_ns();
    cr_assert_eq(kill(pid, SIGTERM), 0);
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(q[i].status, 200, "request %d in flight at SIGTERM: %ld", i, q[i].status);
        free(q[i].body);
    }
    cr_expect_lt(fs_clock_now_ns() - t0, 5000000000ull,
                 "the drain ran the queued batch at once, not after its delay");
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    close(log_fd);
    /* Nobody listens any more. */
    http_resp_t r = http_get(port, "/v2/health/live");
    cr_expect_neq(r.curl, CURLE_OK, "still answering after exit");
    free(r.body);
    rm_tree(f.repo);
}

Test(srv_signals, check_config_prints_the_effective_config_and_bad_flags_fail, .timeout = 60)
{
    char bin[PATH_MAX + 16];
    server_path(bin, sizeof bin);
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "%s --check-config --port 8123 | grep -q '8123'", bin);
    cr_expect_eq(system(cmd), 0, "--check-config did not print the port");
    snprintf(cmd, sizeof cmd, "%s --no-such-flag 2>/dev/null", bin);
    int rc = system(cmd);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "an unknown flag exits %d", rc);
    snprintf(cmd, sizeof cmd, "%s --version | grep -q flatserve", bin);
    cr_expect_eq(system(cmd), 0);
}

Test(srv_signals, sighup_applies_policies_and_batching_live, .timeout = 60)
{
    char bin[PATH_MAX + 16];
    server_path(bin, sizeof bin);
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    char conf[PATH_MAX];
    snprintf(conf, sizeof conf, "%s/flatserve.json", f.repo);
    FILE *fp = fopen(conf, "w");
    fprintf(fp, "{\"batching\": {\"max_batch_size\": 8}, \"memory\": {\"policies\": [\"cache\"]}}");
    fclose(fp);
    char *args[] = {bin, "--config", conf, "--host", "127.0.0.1", "--port", "0", "--repository",
                    f.repo, NULL};
    unsigned port;
    int log_fd;
    pid_t pid = spawn_server(args, &port, &log_fd);
    http_resp_t r = http_get(port, "/v2/models/mlp/config");
    cr_expect(strstr(r.body, "\"max_batch_size\":8") != NULL, "%s", r.body);
    free(r.body);
    fp = fopen(conf, "w");
    fprintf(fp, "{\"batching\": {\"max_batch_size\": 16}, \"memory\": {\"policies\": [\"cache\", "
                "{\"kind\": \"idle_trim\", \"after\": \"1s\"}]}, \"server\": {\"threads\": 2}}");
    fclose(fp);
    cr_assert_eq(kill(pid, SIGHUP), 0);
    bool applied = false;
    for (int i = 0; i < 50 && !applied; i++) {
        usleep(50000);
        r = http_get(port, "/v2/models/mlp/config");
        applied = strstr(r.body, "\"max_batch_size\":16") != NULL;
        free(r.body);
    }
    cr_expect(applied, "batching did not change after SIGHUP");
    r = http_get(port, "/v1/memory?segments=0");
    cr_expect(strstr(r.body, "\"idle_trim\"") != NULL, "policies: %s", r.body);
    free(r.body);
    /* A broken file changes nothing and the server keeps serving. */
    fp = fopen(conf, "w");
    fprintf(fp, "{\"batching\": {\"max_batch_size\": \"many\"}}");
    fclose(fp);
    cr_assert_eq(kill(pid, SIGHUP), 0);
    usleep(200000);
    r = http_get(port, "/v2/models/mlp/config");
    cr_expect(strstr(r.body, "\"max_batch_size\":16") != NULL, "%s", r.body);
    free(r.body);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    /* The log says which change waits for a restart. */
    char log[8192];
    ssize_t n = read(log_fd, log, sizeof log - 1);
    log[n > 0 ? n : 0] = '\0';
    cr_expect(strstr(log, "server.threads") != NULL, "restart keys not named: %s", log);
    close(log_fd);
    rm_tree(f.repo);
}
