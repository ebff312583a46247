/* test_http.c -- completions resumed in batches per HTTP thread (http.c):
 * the list's push and take under many pushing threads, then a server whose
 * model runs one batch at a time (instances 1, so nearly every request
 * waits suspended and is resumed): many concurrent requests all answered
 * right with fewer wake-ups than resumes, clients leaving mid-flight
 * dropped while their batch-mates are answered, and a stop with requests
 * in flight answering every one; then the drain's accept policy. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "server/app_impl.h"
#include "tests/server/server_fixture.h"

/* ---- the list alone ------------------------------------------------------------------ */

#define PUSHERS 6
#define PUSHES 20000

typedef struct list_run {
    srv_http_thread_t t;
    srv_req_t *reqs;              /* PUSHERS * PUSHES */
    atomic_int *taken;            /* per request: how many times taken */
    atomic_int pushers_left;
    atomic_long wakes_self;       /* pushes that found the list empty */
} list_run_t;

typedef struct pusher {
    list_run_t *run;
    int index;
} pusher_t;

static void *push_main(void *arg)
{
    pusher_t *p = arg;
    long own = 0;
    for (int i = 0; i < PUSHES; i++)
        own += srv_http_thread_push(&p->run->t, &p->run->reqs[p->index * PUSHES + i]);
    atomic_fetch_add(&p->run->wakes_self, own);
    atomic_fetch_sub(&p->run->pushers_left, 1);
    return NULL;
}

Test(srv_http_list, every_push_is_taken_once_and_each_list_is_woken_by_its_first_push)
{
    static list_run_t run;
    memset(&run, 0, sizeof run);
    atomic_init(&run.t.done, NULL);
    run.reqs = calloc(PUSHERS * PUSHES, sizeof *run.reqs);
    run.taken = calloc(PUSHERS * PUSHES, sizeof *run.taken);
    cr_assert(run.reqs && run.taken);
    atomic_init(&run.pushers_left, PUSHERS);
    pthread_t threads[PUSHERS];
    pusher_t args[PUSHERS];
    for (int i = 0; i < PUSHERS; i++) {
        args[i] = (pusher_t){&run, i};
        cr_assert_eq(pthread_create(&threads[i], NULL, push_main, &args[i]), 0);
    }
    long n_taken = 0, n_lists = 0, bad_lists = 0;
    for (;;) {
        bool last = atomic_load(&run.pushers_left) == 0; /* read before the take */
        srv_req_t *r = srv_http_thread_take(&run.t);
        if (r)
            n_lists++;
        /* Newest first: only the oldest, the one pushed on the empty list,
         * wakes itself. */
        for (; r; r = r->done_next) {
            atomic_fetch_add(&run.taken[r - run.reqs], 1);
            n_taken++;
            if (r->wakes_self != (r->done_next == NULL))
                bad_lists++;
        }
        if (last)
            break;
    }
    for (int i = 0; i < PUSHERS; i++)
        pthread_join(threads[i], NULL);
    cr_expect_null(srv_http_thread_take(&run.t), "the list is empty once taken");
    cr_expect_eq(n_taken, (long)PUSHERS * PUSHES);
    int twice = 0, never = 0;
    for (long i = 0; i < (long)PUSHERS * PUSHES; i++) {
        int k = atomic_load(&run.taken[i]);
        twice += k > 1;
        never += k == 0;
    }
    cr_expect_eq(twice, 0, "%d requests taken more than once", twice);
    cr_expect_eq(never, 0, "%d requests never taken", never);
    cr_expect_eq(bad_lists, 0, "%ld lists not headed by exactly one wakes_self request", bad_lists);
    cr_expect_eq(atomic_load(&run.wakes_self), n_lists,
                 "one push found each list empty: %ld such pushes for %ld lists",
                 atomic_load(&run.wakes_self), n_lists);
    free(run.reqs);
    free(run.taken);
}

/* ---- a server that runs one batch at a time ---------------------------------------- */

#define N_BODIES 8

/* The MLP's request of one row from `seed`. */
static char *one_row_body(int seed)
{
    srv_buf_t b = {0};
    srv_buf_puts(&b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                     "\"data\":[");
    for (int i = 0; i < 64; i++)
        srv_buf_printf(&b, "%s%g", i ? "," : "", (double)((i * 7 + seed * 13) % 97) / 97.0 - 0.5);
    srv_buf_append(&b, "]}]}", 5);
    return b.data;
}

/* A server on the MLP with `batching` as its model config.json; each of
 * `bodies` with its answer alone in `answers` (either may be NULL). */
static void start_one_instance(srv_fixture_t *f, const char *batching, char **bodies,
                               char **answers)
{
    fixture_init(f);
    fixture_add_model(f, "mlp", "mlp", 1);
    fixture_write(f, "mlp", "config.json", batching, strlen(batching));
    f->cfg.server.threads = 4;
    /* The CPU: answers are compared bit for bit with each body's answer
     * alone, and on a GPU a batch of another size may take another GEMM
     * algorithm (other rounding). What is tested is the resume. */
    f->cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    fixture_start(f);
    for (int i = 0; bodies && i < N_BODIES; i++) {
        bodies[i] = one_row_body(i);
        if (!answers)
            continue;
        http_resp_t r = http_post(f->port, "/v2/models/mlp/infer", bodies[i]);
        cr_assert_eq(r.status, 200, "reference answer %d: %s", i, r.body);
        answers[i] = r.body;
    }
}

/* The value of the sample `name` (a whole line's name) in /metrics; -1 if absent. */
static double metric(unsigned port, const char *name)
{
    http_resp_t r = http_get(port, "/metrics");
    char key[160];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = r.body ? strstr(r.body, key) : NULL;
    double v = at ? strtod(at + strlen(key), NULL) : -1;
    free(r.body);
    return v;
}

typedef struct client {
    unsigned port;
    char **bodies, **answers;
    int index, n;
    int ok;
    char first_bad[256];
} client_t;

/* n requests, each on a connection of its own, each answer checked. */
static void *client_main(void *arg)
{
    client_t *c = arg;
    for (int k = 0; k < c->n; k++) {
        int which = (c->index + k) % N_BODIES;
        http_resp_t r = http_post(c->port, "/v2/models/mlp/infer", c->bodies[which]);
        if (r.status == 200 && (!c->answers || strcmp(r.body, c->answers[which]) == 0))
            c->ok++;
        else if (!c->first_bad[0])
            snprintf(c->first_bad, sizeof c->first_bad, "status %ld (curl %d): %.200s",
                     r.status, (int)r.curl, r.body ? r.body : "");
        free(r.body);
    }
    return NULL;
}

static void free_bodies(char **bodies, char **answers)
{
    for (int i = 0; i < N_BODIES; i++) {
        free(bodies[i]);
        if (answers)
            free(answers[i]);
    }
}

Test(srv_http_resume, many_concurrent_requests_are_all_answered_with_fewer_wakeups_than_resumes,
     .timeout = 300)
{
    srv_fixture_t f;
    char *bodies[N_BODIES], *answers[N_BODIES];
    /* One batch at a time, and a little wait so batches fill: nearly every
     * request is suspended and resumed by the thread running the batch. */
    start_one_instance(&f, "{\"instances\": 1, \"max_batch_size\": 64, \"max_queue_delay\": \"1ms\"}",
                       bodies, answers);
    enum { CLIENTS = 64, EACH = 40 };
    static client_t c[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (client_t){.port = f.port, .bodies = bodies, .answers = answers, .index = i,
                          .n = EACH};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        ok += c[i].ok;
        cr_expect_eq(c[i].ok, EACH, "client %d: %s", i, c[i].first_bad);
    }
    cr_expect_eq(ok, CLIENTS * EACH);
    double resumed = metric(f.port, "flatserve_http_resumed_total");
    double wakeups = metric(f.port, "flatserve_http_resume_wakeups_total");
    cr_expect_gt(resumed, CLIENTS * EACH / 4, "most requests waited for another's batch: %g",
                 resumed);
    cr_expect_lt(wakeups, resumed, "a wake-up served several completions: %g for %g", wakeups,
                 resumed);
    cr_expect_eq(metric(f.port, "flatserve_http_requests_in_flight"), 1, "only the scrape");
    free_bodies(bodies, answers);
    fixture_stop(&f); /* the caches back to zero, or it fails */
}

/* Sends a whole request on a fresh connection and closes it at once. */
static void send_and_leave(unsigned port, const char *body)
{
    char head[256];
    snprintf(head, sizeof head, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
                                "Content-Length: %zu\r\n\r\n", strlen(body));
    int fd = http_raw_open(port);
    cr_assert_geq(fd, 0);
    cr_assert(http_raw_send(fd, head, strlen(head)) && http_raw_send(fd, body, strlen(body)));
    close(fd);
}

Test(srv_http_resume, clients_that_leave_mid_flight_are_dropped_and_their_batch_mates_answered,
     .timeout = 120)
{
    srv_fixture_t f;
    char *bodies[N_BODIES], *answers[N_BODIES];
    /* Requests wait 300 ms for company: the leavers are gone by the time
     * their batch runs, and share it and the wake-ups with the stayers. */
    start_one_instance(&f, "{\"instances\": 1, \"max_batch_size\": 64, \"max_queue_delay\": \"300ms\"}",
                       bodies, answers);
    enum { STAYERS = 16, LEAVERS = 24 };
    static client_t c[STAYERS];
    pthread_t t[STAYERS];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < STAYERS; i++) {
            c[i] = (client_t){.port = f.port, .bodies = bodies, .answers = answers, .index = i,
                              .n = 1};
            cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
        }
        for (int i = 0; i < LEAVERS; i++)
            send_and_leave(f.port, bodies[i % N_BODIES]);
        for (int i = 0; i < STAYERS; i++) {
            pthread_join(t[i], NULL);
            cr_expect_eq(c[i].ok, 1, "round %d, client %d: %s", round, i, c[i].first_bad);
        }
    }
    /* The leavers' requests ran (or are running) and were freed once resumed. */
    double in_flight = -1;
    for (int i = 0; i < 200 && in_flight != 1; i++) {
        usleep(10000);
        in_flight = metric(f.port, "flatserve_http_requests_in_flight");
    }
    cr_expect_eq(in_flight, 1, "only the scrape is in flight once every batch ran");
    free_bodies(bodies, answers);
    fixture_stop(&f); /* none stuck, every byte back */
}

/* nv_inference_pending_request_count of the MLP (queued or running). */
static double mlp_pending(unsigned port)
{
    http_resp_t r = http_get(port, "/metrics");
    const char *line = r.body ? strstr(r.body, "nv_inference_pending_request_count{model=\"mlp\"")
                              : NULL;
    const char *v = line ? strchr(line, '}') : NULL;
    double n = v ? strtod(v + 1, NULL) : -1;
    free(r.body);
    return n;
}

Test(srv_http_resume, a_stop_with_requests_in_flight_answers_every_one, .timeout = 120)
{
    srv_fixture_t f;
    char *bodies[N_BODIES];
    /* Requests would wait 10 s for company; the stop's flush runs them at
     * once, they complete on the batch's thread and are resumed through
     * the HTTP threads' lists before MHD stops. */
    start_one_instance(&f, "{\"instances\": 1, \"max_batch_size\": 64, \"max_queue_delay\": \"10s\"}",
                       bodies, NULL);
    enum { CLIENTS = 32 };
    static client_t c[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (client_t){.port = f.port, .bodies = bodies, .index = i, .n = 1};
        cr_assert_eq(pthread_create(&t[i], NULL, client_main, &c[i]), 0);
    }
    double pending = 0;
    for (int i = 0; i < 800 && pending < CLIENTS; i++) {
        usleep(10000);
        pending = mlp_pending(f.port);
    }
    cr_assert_eq(pending, (double)CLIENTS, "the requests never were all queued");
    cr_expect_eq(srv_app_stop(f.app), 0, "srv_app_stop: %s", fs_errmsg());
    f.app = NULL;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(c[i].ok, 1, "client %d in flight at the stop: %s", i, c[i].first_bad);
    }
    free_bodies(bodies, NULL);
    fixture_stop(&f);
}

/* ---- the drain's accept policy ------------------------------------------------------- */

/* A TCP connection to the server on localhost, reads bounded at 10 s. */
static int connect_local(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Sends a GET of /v2/health/live and reads the answer's head (or what came
 * before the peer closed) into buf: the bytes read, 0 on a close, -1 on an
 * error (a reset). */
static ssize_t get_live(int fd, char *buf, size_t cap)
{
    static const char req[] = "GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
        return -1;
    size_t len = 0;
    while (len + 1 < cap && !memmem(buf, len, "\r\n\r\n", 4)) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            return len ? (ssize_t)len : n;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return (ssize_t)len;
}

/* Once the stop drains, a connection accepted after is closed without an
 * answer (the listening socket stays open until MHD stops), while one that
 * was open already is still answered, with Connection: close. */
Test(srv_http_drain, new_connections_are_closed_at_accept_and_open_ones_answered, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    char buf[4096];
    int open_fd = connect_local(f.port);
    ssize_t n = get_live(open_fd, buf, sizeof buf);
    cr_assert_gt(n, 0);
    cr_expect(strncmp(buf, "HTTP/1.1 200", 12) == 0, "before the drain: %s", buf);

    atomic_store(&f.app->draining, true);
    int late_fd = connect_local(f.port);
    n = get_live(late_fd, buf, sizeof buf);
    cr_expect_leq(n, 0, "a connection made during the drain was answered: %.200s",
                  n > 0 ? buf : "");
    close(late_fd);

    n = get_live(open_fd, buf, sizeof buf);
    cr_assert_gt(n, 0, "the connection open before the drain got no answer");
    cr_expect(strncmp(buf, "HTTP/1.1 200", 12) == 0, "during the drain: %s", buf);
    cr_expect(strcasestr(buf, "\r\nConnection: close\r\n") != NULL,
              "no Connection: close during the drain: %s", buf);
    close(open_fd);
    fixture_stop(&f);
}
