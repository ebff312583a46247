/* traffic.c -- the run's one libcurl multi loop: inference requests sent
 * closed loop (a fixed number in flight) or open loop (at a rate, whatever
 * the answers do), alongside the sampler's and the churn's calls, each
 * answer accounted as it comes.
 *
 * Open loop keeps its schedule: a request that could not go out on time
 * (the in-flight cap was reached, or the loop itself fell behind) goes out
 * late, counts as late, and its latency is measured from when it was due,
 * as wrk2 does, so a server that falls behind shows it in the latency
 * instead of slowing the generator down to its pace. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"
#include "loadtest/run_impl.h"

#define NS_PER_MS 1000000ull
#define LATE_NS (10 * NS_PER_MS) /* an open-loop request this late counts as late */
/* Requests lost in a row after which the server is taken for gone: a
 * closed loop would otherwise spin on refused connections until the end. */
#define GIVE_UP_STREAK 200

uint64_t lg_now_ns(void)
{
    return fs_clock_now_ns();
}

double lg_since_s(const lg_run_t *run, uint64_t ns)
{
    return ns > run->t0_ns ? (double)(ns - run->t0_ns) / 1e9 : 0.0;
}

void lg_run_note(lg_run_t *run, const char *fmt, ...)
{
    char msg[sizeof run->notes[0]];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (int i = 0; i < run->n_notes; i++)
        if (!strcmp(run->notes[i], msg))
            return;
    if (run->n_notes < LG_NOTES_MAX)
        memcpy(run->notes[run->n_notes++], msg, sizeof msg);
}

void lg_admin_failed(lg_run_t *run, const lg_xfer_t *x)
{
    run->admin_failed++;
    if (x->rc != CURLE_OK)
        lg_run_note(run, "%s: no answer: %s", x->what, curl_easy_strerror(x->rc));
    else
        lg_run_note(run, "%s answered %ld: %.160s", x->what, x->status, x->resp ? x->resp : "");
}

/* --- transfers ---------------------------------------------------------------- */

static size_t xfer_on_body(char *data, size_t size, size_t n, void *user)
{
    lg_xfer_t *x = user;
    size_t bytes = size * n, room = x->resp_keep > x->resp_len ? x->resp_keep - x->resp_len : 0;
    size_t take = bytes < room ? bytes : room;
    if (take == 0)
        return bytes;
    if (x->resp_len + take + 1 > x->resp_cap) {
        size_t cap = x->resp_cap ? x->resp_cap : 1024;
        while (cap < x->resp_len + take + 1)
            cap *= 2;
        char *grown = realloc(x->resp, cap);
        if (!grown)
            return bytes; /* the answer still counts; only its text is cut */
        x->resp = grown;
        x->resp_cap = cap;
    }
    memcpy(x->resp + x->resp_len, data, take);
    x->resp_len += take;
    x->resp[x->resp_len] = '\0';
    return bytes;
}

static void xfer_free(lg_xfer_t *x)
{
    if (!x)
        return;
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    lg_body_free(&x->body);
    free(x->resp);
    free(x);
}

static int headers_add(lg_xfer_t *x, const char *header)
{
    struct curl_slist *l = curl_slist_append(x->headers, header);
    if (!l)
        return fs_err(FS_ENOMEM, "%s: out of memory for the headers", x->what);
    x->headers = l;
    return 0;
}

lg_xfer_t *lg_xfer_new(lg_run_t *run, const char *method, const char *path, size_t keep,
                       lg_xfer_done_fn done)
{
    char url[sizeof run->base + 512];
    lg_xfer_t *x = calloc(1, sizeof *x);
    if (!x || !(x->easy = curl_easy_init())) {
        free(x);
        fs_err(FS_ENOMEM, "out of memory for a transfer");
        return NULL;
    }
    snprintf(url, sizeof url, "%s%s", run->base, path);
    snprintf(x->what, sizeof x->what, "%s %s", method, path);
    x->resp_keep = keep;
    x->done = done;
    /* No "Expect: 100-continue" round trip before a large body. */
    if (headers_add(x, "Expect:") != 0 || (run->auth[0] && headers_add(x, run->auth) != 0)) {
        xfer_free(x);
        return NULL;
    }
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(run->o->timeout_ns / NS_PER_MS));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, xfer_on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    return x;
}

int lg_xfer_start(lg_run_t *run, lg_xfer_t *x)
{
    if (!x->start_ns)
        x->start_ns = lg_now_ns();
    CURLMcode mc = curl_multi_add_handle(run->multi, x->easy);
    if (mc != CURLM_OK) {
        int rc = fs_err(FS_EIO, "%s: cannot start: %s", x->what, curl_multi_strerror(mc));
        xfer_free(x);
        return rc;
    }
    x->next = run->xfers;
    if (run->xfers)
        run->xfers->prev = x;
    run->xfers = x;
    return 0;
}

static void xfer_unlink(lg_run_t *run, lg_xfer_t *x)
{
    curl_multi_remove_handle(run->multi, x->easy);
    if (x->prev)
        x->prev->next = x->next;
    else
        run->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
}

/* --- inference requests ------------------------------------------------------- */

static void on_infer(lg_run_t *run, lg_xfer_t *x)
{
    run->in_flight--;
    run->last_answer_ns = lg_now_ns();
    if (x->rc != CURLE_OK) {
        run->lost++;
        run->transport[x->rc]++;
        lg_run_note(run, "%s: no answer: %s", x->what, curl_easy_strerror(x->rc));
        if (++run->lost_streak == GIVE_UP_STREAK && !run->gave_up) {
            run->gave_up = 1;
            lg_run_note(run, "%d requests in a row got no answer: the server is gone; traffic "
                             "stopped at %.1f s",
                        GIVE_UP_STREAK, lg_since_s(run, lg_now_ns()));
        }
        return;
    }
    run->lost_streak = 0;
    long st = x->status > 0 && x->status < LG_STATUS_MAX ? x->status : 0;
    run->answered++;
    run->status_all[st]++;
    if (x->bad) {
        if (st >= 400 && st < 500) {
            run->bad_rejected++;
            return;
        }
        run->unexpected++;
        run->status_unexpected[st]++;
        lg_run_note(run, "%s: a deliberately bad request answered %ld: %.160s", x->what,
                    x->status, x->resp ? x->resp : "");
        return;
    }
    if (st != 200) {
        run->unexpected++;
        run->status_unexpected[st]++;
        lg_run_note(run, "%s answered %ld: %.200s", x->what, x->status, x->resp ? x->resp : "");
        return;
    }
    run->ok++;
    uint64_t now = lg_now_ns(), ns = now > x->start_ns ? now - x->start_ns : 0;
    lg_hist_add(&run->hist, ns);
    lg_hist_add(&run->hist_interval, ns);
}

static uint32_t model_draw(lg_run_t *run)
{
    double u = lg_rng_uniform(&run->rng) * run->weight_sum;
    for (uint32_t i = 0; i + 1 < run->n_models; i++) {
        if (u < run->models[i].weight)
            return i;
        u -= run->models[i].weight;
    }
    return run->n_models - 1;
}

/* The body and headers of one inference into x. 0, or the code of what
 * could not be built (x is then the caller's to free). */
static int infer_prepare(lg_run_t *run, lg_xfer_t *x, uint32_t mi, int binary, lg_bad_t bad)
{
    char hdr[80];
    int rc = lg_body_build(run->pool, &run->models[mi], run->o, &run->rng,
                           run->o->has_trace_seed ? &run->trace : NULL, binary, bad, &x->body);
    if (rc != 0)
        return rc;
    if (x->body.header_len) {
        snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", x->body.header_len);
        if ((rc = headers_add(x, "Content-Type: application/octet-stream")) != 0 ||
            (rc = headers_add(x, hdr)) != 0)
            return rc;
    } else if ((rc = headers_add(x, "Content-Type: application/json")) != 0) {
        return rc;
    }
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body.data);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body.len);
    return 0;
}

/* Sends one request due at due_ns. A request that cannot be built or
 * started stops the run (fatal): the traffic would no longer be what was
 * asked for. */
static void infer_send(lg_run_t *run, uint64_t due_ns)
{
    const lg_opts_t *o = run->o;
    char path[LG_NAME_MAX + 32];
    uint32_t mi = model_draw(run);
    lg_bad_t bad = LG_BAD_NONE;
    if (o->bad_fraction > 0 && lg_rng_uniform(&run->rng) < o->bad_fraction)
        bad = (lg_bad_t)(1 + run->bad_turn++ % 3);
    int binary = o->encoding == LG_ENC_BINARY ||
                 (o->encoding == LG_ENC_MIXED && (lg_rng_next(&run->rng) & 1));
    snprintf(path, sizeof path, "/v2/models/%s/infer", run->models[mi].name);
    lg_xfer_t *x = lg_xfer_new(run, "POST", path, 512, on_infer);
    int rc = x ? infer_prepare(run, x, mi, binary, bad) : FS_ENOMEM;
    if (rc != 0) {
        xfer_free(x);
        goto fail;
    }
    x->infer = 1;
    x->bad = bad != LG_BAD_NONE;
    x->model = mi;
    x->start_ns = due_ns;
    if ((rc = lg_xfer_start(run, x)) != 0) /* frees x */
        goto fail;
    run->sent++;
    run->sent_bad += bad != LG_BAD_NONE;
    run->in_flight++;
    return;
fail:
    fprintf(stderr, "loadgen: stopping: %s\n", fs_errmsg());
    run->fatal = rc;
}

static uint64_t open_gap_ns(lg_run_t *run)
{
    double mean = 1e9 / run->o->rate;
    if (run->o->arrival == LG_ARRIVAL_FIXED)
        return (uint64_t)mean;
    return (uint64_t)(-log(1.0 - lg_rng_uniform(&run->rng)) * mean);
}

static int count_reached(const lg_run_t *run)
{
    return run->o->requests && run->sent >= run->o->requests;
}

static void traffic_send(lg_run_t *run, uint64_t now)
{
    const lg_opts_t *o = run->o;
    if (o->rate <= 0) {
        while (run->in_flight < o->concurrency && lg_churn_may_send(run) && !count_reached(run) &&
               !run->fatal)
            infer_send(run, now);
        return;
    }
    /* A pause (a load/unload cycle) is not lateness: the schedule restarts. */
    if (!lg_churn_may_send(run)) {
        run->next_due_ns = now;
        return;
    }
    uint32_t cap = o->concurrency_set ? o->concurrency : 64;
    while (run->next_due_ns <= now && run->in_flight < cap && lg_churn_may_send(run) &&
           !count_reached(run) && !run->fatal) {
        uint64_t lag = now - run->next_due_ns;
        run->late += lag > LATE_NS;
        run->max_lag_ns = lag > run->max_lag_ns ? lag : run->max_lag_ns;
        infer_send(run, run->next_due_ns);
        run->next_due_ns += open_gap_ns(run);
    }
}

/* --- the loop ------------------------------------------------------------------ */

static void messages_drain(lg_run_t *run)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(run->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        lg_xfer_t *x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        x->rc = msg->data.result;
        if (x->rc == CURLE_OK)
            curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
        xfer_unlink(run, x);
        x->done(run, x);
        xfer_free(x);
    }
}

/* Past the drain deadline: whatever is still in flight is given up. The
 * per-request timeout should have ended it already, so this is a guard. */
static void abandon_all(lg_run_t *run)
{
    while (run->xfers) {
        lg_xfer_t *x = run->xfers;
        xfer_unlink(run, x);
        x->rc = CURLE_OPERATION_TIMEDOUT;
        x->done(run, x);
        xfer_free(x);
    }
    run->sample_in_flight = 0;
}

static int traffic_over(const lg_run_t *run, uint64_t now)
{
    const lg_opts_t *o = run->o;
    return run->fatal || run->gave_up || (o->duration_ns && now - run->t0_ns >= o->duration_ns) ||
           count_reached(run) ||
           (o->cycles && run->cycles_done >= o->cycles && run->cy == LG_CY_TRAFFIC);
}

static void phase_step(lg_run_t *run, uint64_t now)
{
    switch (run->phase) {
    case LG_PH_TRAFFIC:
        if (!traffic_over(run, now))
            break;
        run->phase = LG_PH_DRAIN;
        run->traffic_end_ns = now;
        run->drain_deadline_ns = now + run->o->timeout_ns + 5000 * NS_PER_MS;
        /* fall through */
    case LG_PH_DRAIN:
        if (run->in_flight == 0 && lg_churn_idle(run) && !run->sample_in_flight) {
            lg_sampler_take(run);
            run->phase = LG_PH_FINAL;
        } else if (now > run->drain_deadline_ns) {
            lg_run_note(run, "requests still in flight %.1f s after the traffic ended: given up",
                        (double)(now - run->traffic_end_ns) / 1e9);
            abandon_all(run);
        }
        break;
    case LG_PH_FINAL:
        if (run->sample_in_flight)
            break;
        run->traffic_end_sample = run->n_samples ? run->n_samples - 1 : 0;
        run->idle_end_ns = now + run->o->idle_ns;
        run->phase = run->o->idle_ns && !run->fatal ? LG_PH_IDLE : LG_PH_DONE;
        break;
    case LG_PH_IDLE:
        if (now >= run->idle_end_ns && !run->sample_in_flight) {
            lg_sampler_take(run);
            run->phase = LG_PH_IDLE_FINAL;
        }
        break;
    case LG_PH_IDLE_FINAL:
        if (!run->sample_in_flight)
            run->phase = LG_PH_DONE;
        break;
    case LG_PH_DONE:
        break;
    }
}

/* How long curl may wait for sockets: until the next due request, sample or
 * deadline, at least 1 ms (a busy loop would take a core from the server
 * under test) and at most 100 ms. */
static int poll_ms(const lg_run_t *run, uint64_t now)
{
    uint64_t next = now + 100 * NS_PER_MS;
    if (run->phase == LG_PH_TRAFFIC && run->o->rate > 0 && run->next_due_ns < next)
        next = run->next_due_ns;
    if (run->next_sample_ns < next)
        next = run->next_sample_ns;
    if (run->phase == LG_PH_IDLE && run->idle_end_ns < next)
        next = run->idle_end_ns;
    uint64_t ms = next > now ? (next - now) / NS_PER_MS : 0;
    return ms < 1 ? 1 : (int)ms;
}

static int http_get_sync(lg_run_t *run, const char *path, long *status, char **body);

/* After the idle time: which segments live blocks pin, for the idle-trim
 * bound. A failure is an admin failure the verdict counts. */
static void idle_memory_fetch(lg_run_t *run)
{
    long status = 0;
    char *body = NULL;
    int rc = http_get_sync(run, "/v1/memory", &status, &body);
    if (rc == 0 && status == 200 && lg_memory_parse(body, &run->idle_mem) == 0 &&
        run->idle_mem.have_segments) {
        run->have_idle_mem = 1;
    } else {
        run->admin_failed++;
        lg_run_note(run, "GET /v1/memory after the idle time: %s",
                    rc ? fs_errmsg() : status != 200 ? "not 200 (is --admin-token right?)"
                                                     : "no segment list in the answer");
    }
    free(body);
}

int lg_run_execute(lg_run_t *run)
{
    uint64_t now = lg_now_ns();
    run->t0_ns = now;
    run->next_due_ns = now;
    run->next_sample_ns = now;
    run->next_progress_ns = now + 5000 * NS_PER_MS;
    run->reload_base_ns = now;
    lg_churn_start(run);
    while (run->phase != LG_PH_DONE) {
        now = lg_now_ns();
        phase_step(run, now);
        if (run->phase == LG_PH_TRAFFIC || run->phase == LG_PH_DRAIN || run->phase == LG_PH_IDLE)
            lg_sampler_tick(run, now);
        lg_churn_tick(run, now);
        if (run->phase == LG_PH_TRAFFIC)
            traffic_send(run, now);
        int running = 0;
        curl_multi_perform(run->multi, &running);
        messages_drain(run);
        lg_progress(run, now);
        if (run->phase != LG_PH_DONE)
            curl_multi_poll(run->multi, NULL, 0, poll_ms(run, now), NULL);
    }
    lg_sampler_close(run);
    if (run->o->idle_trim_after_ns && !run->fatal)
        idle_memory_fetch(run);
    return run->fatal;
}

/* --- setup ----------------------------------------------------------------------- */

/* GET path outside the loop: before the run starts, or after it ended. */
static int http_get_sync(lg_run_t *run, const char *path, long *status, char **body)
{
    lg_xfer_t *x = lg_xfer_new(run, "GET", path, 16 << 20, NULL);
    if (!x)
        return FS_ENOMEM;
    CURLcode cc = curl_easy_perform(x->easy);
    int rc = 0;
    if (cc != CURLE_OK) {
        rc = fs_err(FS_EIO, "cannot reach the server at %s: %s", run->base, curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, status);
        *body = x->resp ? x->resp : strdup("");
        x->resp = NULL;
        if (!*body)
            rc = fs_err(FS_ENOMEM, "out of memory");
    }
    xfer_free(x);
    return rc;
}

static int models_fetch(lg_run_t *run)
{
    const lg_opts_t *o = run->o;
    for (uint32_t i = 0; i < o->n_models; i++) {
        char path[LG_NAME_MAX + 16], *body = NULL;
        long status = 0;
        snprintf(path, sizeof path, "/v2/models/%s", o->models[i].name);
        int rc = http_get_sync(run, path, &status, &body);
        if (rc == 0 && status != 200)
            rc = fs_err(FS_ENOENT, "model '%s': GET %s answered %ld: %.200s (is it in the "
                                   "repository and loaded?)",
                        o->models[i].name, path, status, body);
        if (rc == 0)
            rc = lg_model_parse(body, o->models[i].name, &run->models[i]);
        free(body);
        if (rc != 0)
            return rc;
        run->models[i].weight = o->models[i].weight;
        run->weight_sum += o->models[i].weight;
        run->n_models++;
    }
    return lg_model_bind(run->models, run->n_models, o);
}

int lg_run_create(const lg_opts_t *o, lg_run_t **out)
{
    int rc;
    lg_run_t *run = calloc(1, sizeof *run);
    if (!run)
        return fs_err(FS_ENOMEM, "out of memory for the run");
    run->o = o;
    snprintf(run->base, sizeof run->base, "%s", o->url);
    size_t n = strlen(run->base);
    while (n > 0 && run->base[n - 1] == '/')
        run->base[--n] = '\0';
    if (o->admin_token[0])
        snprintf(run->auth, sizeof run->auth, "Authorization: Bearer %s", o->admin_token);
    lg_rng_seed(&run->rng, o->seed);
    run->trace = o->trace_seed;
    if (!(run->multi = curl_multi_init())) {
        rc = fs_err(FS_ENOMEM, "curl_multi_init failed");
        goto fail;
    }
    curl_multi_setopt(run->multi, CURLMOPT_MAXCONNECTS, (long)o->concurrency + 64);
    if ((rc = lg_datapool_create(o->seed, &run->pool)) != 0 || (rc = models_fetch(run)) != 0 ||
        (rc = lg_sampler_open(run)) != 0)
        goto fail;
    *out = run;
    return 0;
fail:
    lg_run_destroy(run);
    return rc;
}

void lg_run_destroy(lg_run_t *run)
{
    if (!run)
        return;
    while (run->xfers) {
        lg_xfer_t *x = run->xfers;
        xfer_unlink(run, x);
        xfer_free(x);
    }
    if (run->multi)
        curl_multi_cleanup(run->multi);
    lg_sampler_close(run);
    lg_datapool_destroy(run->pool);
    free(run->samples);
    free(run->points);
    free(run);
}
