/* infer.c -- inference (POST .../infer, POST /infer), and the one state
 * machine by which a request waits for another thread without holding an
 * HTTP thread: submit -> suspend -> resume -> finish.
 *
 * ## The wait
 *
 * A request handed to another thread -- an inference to its model's
 * batcher, a load or unload to its own thread (admin.c) -- has one atomic
 * state, r->state, and these transitions (srv_req_state_next is the
 * table; any other is a broken invariant and asserts):
 *
 *   IDLE --SUBMIT--> SUBMITTING               HTTP thread, before the hand-off
 *   SUBMITTING --REFUSE--> IDLE               HTTP thread: the hand-off failed,
 *                                             no completion will come; it answers
 *   SUBMITTING --COMPLETE--> DONE_EARLY       completing thread: the HTTP thread
 *                                             has not suspended; it will answer
 *   SUBMITTING --SUSPEND--> SUSPENDED         HTTP thread, after it suspended
 *   SUSPENDED --COMPLETE--> RESUMED           completing thread, which then
 *                                             resumes the connection
 *   DONE_EARLY --SUSPEND--> RESUMED           HTTP thread: it suspended just as
 *                                             the completion came; it resumes
 *   DONE_EARLY --FINISH--> FINISHED           HTTP thread, answering without
 *                                             ever suspending
 *   RESUMED --FINISH--> FINISHED              HTTP thread, called again by MHD
 *                                             after the resume; it answers
 *
 * Every move is a compare-and-swap (acq_rel): the completing thread writes
 * the result before its move and the HTTP thread reads it after its own,
 * so the move publishes the result. Exactly one thread resumes, and only a
 * connection that is suspended: the HTTP thread suspends *before* it
 * publishes SUSPENDED, and whoever sees the other's move first (COMPLETE
 * finding SUSPENDED, or SUSPEND finding DONE_EARLY) resumes. COMPLETE
 * finding SUSPENDED hands r to srv_http_resume (http.c), which resumes
 * the thread's completions in batches, one wake-up for many. After
 * COMPLETE finding SUBMITTING the completing thread must not touch r (the
 * HTTP thread may answer and free it).
 *
 * When a batch can start at once, eng_served_submit_run runs it on this
 * HTTP thread (its own request, and whatever queued with it): COMPLETE
 * comes inside the submit, on this thread, and the request is answered
 * with no suspend, no hand-off to a worker and no wake-up back -- at low
 * concurrency most of a request's cost; the price is that this thread's
 * other connections wait for one batch run.
 *
 * A client that goes away while its request waits costs nothing else: MHD
 * does not look at a suspended connection, so the request stays until its
 * completion resumes it, and on_completed then frees it (http.c). A
 * request's deadline (server.request_timeout) is the batcher's: one past
 * it fails with FS_ETIMEDOUT instead of running. Graceful stop waits for
 * every request in flight, waiting ones included, before it stops MHD.
 *
 * ## Inference
 *
 * The body is parsed (or, for Triton's raw binary request, taken whole as
 * the model's one input: codec_raw.c), bound to the model's inputs in the
 * model's order and submitted; tensors in Triton's system shared memory
 * are resolved first (their regions held until the request is freed) and
 * outputs written to their regions once it completes (shm_http.c). A
 * version being replaced refuses with FS_ESTATE, and the request is then
 * submitted once more on the version that replaced it, so a reload under
 * load loses nothing. A request to a model with sequence batching carries
 * its sequence_id / _start / _end to the engine's sequence batcher
 * (engine/sequence.c), which fills the control and state inputs; the state
 * outputs are not answered. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "server/app_impl.h"
#include "server/trace.h"
#include "server/codec_bytes.h"

/* ---- the wait -------------------------------------------------------------------- */

#define X (-1)
static const signed char next_state[SRV_REQ_N_STATES][SRV_EV_N] = {
    /*                   SUBMIT            REFUSE         COMPLETE            SUSPEND            FINISH */
    [SRV_REQ_IDLE]       = {SRV_REQ_SUBMITTING, X,            X,                  X,                 X},
    [SRV_REQ_SUBMITTING] = {X,                 SRV_REQ_IDLE, SRV_REQ_DONE_EARLY, SRV_REQ_SUSPENDED, X},
    [SRV_REQ_DONE_EARLY] = {X,                 X,            X,                  SRV_REQ_RESUMED,   SRV_REQ_FINISHED},
    [SRV_REQ_SUSPENDED]  = {X,                 X,            SRV_REQ_RESUMED,    X,                 X},
    [SRV_REQ_RESUMED]    = {X,                 X,            X,                  X,                 SRV_REQ_FINISHED},
    [SRV_REQ_FINISHED]   = {X,                 X,            X,                  X,                 X},
};
#undef X

int srv_req_state_next(srv_req_state_t from, srv_req_event_t ev)
{
    if ((unsigned)from >= SRV_REQ_N_STATES || (unsigned)ev >= SRV_EV_N)
        return -1;
    return next_state[from][ev];
}

/* Moves r->state by `ev`; returns the state it moved from. */
static srv_req_state_t req_move(srv_req_t *r, srv_req_event_t ev)
{
    int from = atomic_load_explicit(&r->state, memory_order_acquire);
    for (;;) {
        int to = srv_req_state_next((srv_req_state_t)from, ev);
        assert(to >= 0 && "an event the request's state does not allow");
        if (to < 0)
            return (srv_req_state_t)from; /* NDEBUG: leave the state as it is */
        if (atomic_compare_exchange_weak_explicit(&r->state, &from, to, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (srv_req_state_t)from;
    }
}

void srv_req_submitting(srv_req_t *r, void (*finish)(srv_req_t *r))
{
    r->finish = finish;
    req_move(r, SRV_EV_SUBMIT);
}

void srv_req_refused(srv_req_t *r)
{
    req_move(r, SRV_EV_REFUSE);
}

void srv_req_complete(srv_req_t *r)
{
    /* From SUSPENDED, r lives on until its connection is resumed, which
     * srv_http_resume arranges (batched with the HTTP thread's other
     * completions); from SUBMITTING the HTTP thread may answer and free r
     * at once, so it is not touched again. */
    if (req_move(r, SRV_EV_COMPLETE) == SRV_REQ_SUSPENDED)
        srv_http_resume(r);
}

static void req_finish(srv_req_t *r)
{
    req_move(r, SRV_EV_FINISH);
    r->finish(r);
}

void srv_req_park(srv_req_t *r)
{
    if (atomic_load_explicit(&r->state, memory_order_acquire) == SRV_REQ_DONE_EARLY) {
        req_finish(r); /* done already: no suspend, no resume */
        return;
    }
    MHD_suspend_connection(r->conn);
    if (req_move(r, SRV_EV_SUSPEND) == SRV_REQ_DONE_EARLY)
        MHD_resume_connection(r->conn); /* the completion came after the check above */
}

bool srv_req_wake(srv_req_t *r)
{
    if (atomic_load_explicit(&r->state, memory_order_acquire) != SRV_REQ_RESUMED)
        return false;
    req_finish(r);
    return true;
}

/* ---- inference ------------------------------------------------------------------- */

static void on_infer_done(eng_request_t *ereq)
{
    srv_req_complete(ereq->user); /* may free the request */
}

void srv_infer_release(srv_req_t *r)
{
    srv_infer_job_t *job = &r->infer;
    int state = atomic_load_explicit(&r->state, memory_order_acquire);
    assert(state != SRV_REQ_SUBMITTING && state != SRV_REQ_SUSPENDED);
    (void)state;
    eng_request_free_outputs(&job->ereq);
    srv_shm_infer_release(r); /* before the request: it counts the holds */
    srv_infer_request_free(job->request);
    job->request = NULL;
    free(job->views);
    job->views = NULL;
    if (job->served)
        eng_served_release(job->served);
    job->served = NULL;
}

/* A sequence model's state outputs stay with the server (Triton answers
 * only the config's outputs): asked for by name they are refused, and a
 * request that names no output gets the others, listed for it. 0, or
 * FS_EINVAL naming the output, or FS_ENOMEM. */
static int sequence_outputs(srv_infer_job_t *job)
{
    const eng_model_t *m = eng_served_model(job->served);
    srv_infer_request_t *r = job->request;
    size_t n = eng_model_n_outputs(m), n_state = 0;
    for (size_t j = 0; j < n; j++)
        n_state += eng_served_output_state(job->served, j);
    if (n_state == 0)
        return 0;
    for (size_t p = 0; p < r->n_outputs; p++) {
        long j = eng_io_output_find(m, r->outputs[p].name);
        if (j >= 0 && eng_served_output_state(job->served, (size_t)j))
            return fs_err(FS_EINVAL, "output '%s' is a sequence state (sequence_batching.state "
                          "output_name): the server keeps it for the next request and does not "
                          "answer it", r->outputs[p].name);
    }
    if (r->n_outputs > 0)
        return 0;
    if (!(r->outputs = calloc(n - n_state ? n - n_state : 1, sizeof *r->outputs)))
        return fs_err(FS_ENOMEM, "out of host memory");
    for (size_t j = 0; j < n; j++) {
        eng_io_info_t info;
        if (eng_served_output_state(job->served, j) || eng_model_output(m, j, &info) != 0)
            continue;
        srv_infer_output_t *o = &r->outputs[r->n_outputs];
        if (!(o->name = strdup(info.name)))
            return fs_err(FS_ENOMEM, "out of host memory");
        o->binary = r->binary_output;
        r->n_outputs++;
    }
    return 0;
}

/* Views of the request's inputs in the order of job->served's model, as
 * job->ereq's inputs (a sequence model's controls and state left for its
 * sequence batcher). 0, or FS_ENOMEM / srv_infer_bind's FS_EINVAL. */
static int bind_inputs(srv_infer_job_t *job)
{
    const eng_model_t *m = eng_served_model(job->served);
    size_t n_in = eng_model_n_inputs(m);
    free(job->views);
    job->views = calloc(n_in ? n_in : 1, sizeof *job->views);
    if (!job->views)
        return fs_err(FS_ENOMEM, "out of host memory");
    job->ereq.inputs = job->views;
    job->ereq.n_inputs = n_in;
    if (!eng_served_sequences(job->served))
        return srv_infer_bind(job->request, m, job->views);
    bool *filled = calloc(n_in ? n_in : 1, sizeof *filled);
    if (!filled)
        return fs_err(FS_ENOMEM, "out of host memory");
    for (size_t i = 0; i < n_in; i++)
        filled[i] = eng_served_input_filled(job->served, i);
    int rc = srv_infer_bind_filled(job->request, m, filled, job->views);
    free(filled);
    return rc == 0 ? sequence_outputs(job) : rc;
}

/* Submits the bound request; on FS_ESTATE (its version is being replaced
 * or unloaded), once more on the version serving now. 0: the completion
 * will come; else the error, and none will. */
static int submit(srv_req_t *r, const srv_route_args_t *a)
{
    srv_infer_job_t *job = &r->infer;
    const eng_model_t *m = eng_served_model(job->served);
    int rc = eng_served_submit_run(job->served, &job->ereq);
    if (rc != FS_ESTATE)
        return rc;
    eng_served_release(job->served);
    job->served = NULL;
    eng_served_t *next = NULL;
    rc = eng_registry_acquire(r->app->registry, a->model, a->version, &next);
    if (rc != 0)
        return rc;
    if (eng_served_model(next) == m) {
        eng_served_release(next);
        return fs_err(FS_ESTATE, "model '%s' is being unloaded", a->model);
    }
    job->served = next;
    /* The new version may differ: bind again. */
    if ((rc = bind_inputs(job)) != 0)
        return rc;
    return eng_served_submit_run(job->served, &job->ereq);
}

#define HEADER_LENGTH_NAME "Inference-Header-Content-Length"

/* The Inference-Header-Content-Length header (Triton's binary extension):
 * 0 and *out (0 when absent; *raw when it is 0: the whole body is one
 * input's bytes), or -1 having answered 400 (not digits alone, past the
 * body's length, or given twice with two values). */
static int header_length(srv_req_t *r, size_t *out, bool *raw)
{
    *out = 0;
    *raw = false;
    const char *hl, *other;
    srv_header_values(r->conn, HEADER_LENGTH_NAME, &hl, &other);
    if (!hl)
        return 0;
    if (other) {
        srv_respond_error(r, 400, HEADER_LENGTH_NAME " is given twice, as '%s' and '%s'", hl,
                          other);
        return -1;
    }
    char *end = NULL;
    unsigned long long v = hl[0] >= '0' && hl[0] <= '9' ? strtoull(hl, &end, 10) : 0;
    if (!end || *end || v > srv_req_body_len(r)) {
        srv_respond_error(r, 400, HEADER_LENGTH_NAME " '%s' must be a number "
                          "from 0 (a raw binary request) to the body's %zu bytes", hl,
                          srv_req_body_len(r));
        return -1;
    }
    *out = (size_t)v;
    *raw = v == 0;
    return 0;
}

/* The request of a raw binary body, for the model in the path: 0, or -1
 * having answered the error. */
static int raw_request(srv_req_t *r, const srv_route_args_t *a)
{
    srv_infer_job_t *job = &r->infer;
    if (!a->model[0]) {
        srv_respond_error(r, 400, "POST /infer names its model in a JSON body, so it takes no raw "
                          "binary request (" HEADER_LENGTH_NAME ": 0); use "
                          "POST /v2/models/<model>/infer");
        return -1;
    }
    /* The first dim is a batch dim (of one) when requests are batched, or
     * when a config.pbtxt's max_batch_size bounds it, batching or not: as
     * Triton, for which max_batch_size > 0 alone makes it one. */
    eng_serve_options_t o;
    eng_served_options(job->served, &o);
    bool batched = eng_served_batches(job->served) || o.max_request_rows > 0;
    int rc = srv_infer_request_raw(eng_served_model(job->served), a->model, batched,
                                   srv_req_body(r), srv_req_body_len(r), &job->request);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return -1;
    }
    return 0;
}

/* POST /infer names its model and version in the body: into `args`, and
 * acquired. 0, or -1 having answered the error. */
static int body_model(srv_req_t *r, srv_route_args_t *args)
{
    const srv_infer_request_t *in = r->infer.request;
    if (!in->model) {
        srv_respond_error(r, 400, "the body of POST /infer needs \"model\" (a model name)");
        return -1;
    }
    if (strlen(in->model) >= sizeof args->model) {
        srv_respond_error(r, 400, "\"model\" is longer than %zu bytes", sizeof args->model - 1);
        return -1;
    }
    strcpy(args->model, in->model);
    args->version = in->version;
    if (eng_registry_check_name(args->model) != 0) {
        srv_respond_fs_error(r, FS_EINVAL);
        return -1;
    }
    return (r->infer.served = srv_info_acquire(r, args)) ? 0 : -1;
}

/* A binary response's bytes: its JSON and the outputs whose bytes go out
 * as they lie, freed when libmicrohttpd is done with them. The outputs
 * are the server's memory (pinned ones return to the staging cache), so
 * they may outlive the model. */
typedef struct response_parts {
    srv_buf_t json;
    eng_tensor_t **outputs;
    size_t n_outputs;
    uint8_t **bytes;   /* per binary part: a BYTES output serialized, else NULL */
    size_t n_bytes;
} response_parts_t;

static void response_parts_free(void *cls)
{
    response_parts_t *p = cls;
    for (size_t j = 0; j < p->n_outputs; j++)
        eng_tensor_free(p->outputs[j]);
    for (size_t j = 0; j < p->n_bytes; j++)
        free(p->bytes[j]);
    free(p->bytes);
    free(p->outputs);
    srv_buf_free(&p->json);
    free(p);
}

/* Answers with the JSON in `json` (taken) followed by the bytes of the nb
 * binary outputs r asked for (srv_infer_response_binary), which the
 * response takes from e. */
static void respond_binary(srv_req_t *r, eng_request_t *e, const eng_model_t *m,
                           srv_buf_t *json, size_t nb)
{
    struct MHD_IoVec *iov = malloc((nb + 1) * sizeof *iov);
    size_t *idx = malloc(nb * sizeof *idx);
    response_parts_t *p = calloc(1, sizeof *p);
    uint8_t **bytes = calloc(nb, sizeof *bytes);
    if (!iov || !idx || !p || !bytes) {
        free(iov);
        free(idx);
        free(p);
        free(bytes);
        srv_buf_free(json);
        eng_request_free_outputs(e);
        srv_respond_error(r, 507, "out of host memory answering");
        return;
    }
    srv_infer_response_binary(m, r->infer.request, e->n_outputs, idx);
    p->json = *json;
    p->outputs = e->outputs;
    p->n_outputs = e->n_outputs;
    p->bytes = bytes;
    p->n_bytes = nb;
    e->outputs = NULL;
    e->n_outputs = 0;
    iov[0] = (struct MHD_IoVec){p->json.data, p->json.len};
    for (size_t i = 0; i < nb; i++) {
        const eng_tensor_t *t = p->outputs[idx[i]];
        size_t len = eng_tensor_bytes(t);
        /* A BYTES output goes serialized (codec_bytes.h), the rest as
         * their tensors' bytes. */
        eng_io_info_t info = {.name = ""};
        int rc = t->dtype == ENG_DT_STRING ? eng_model_output(m, idx[i], &info) : 0;
        if (rc == 0 && t->dtype == ENG_DT_STRING)
            rc = srv_bytes_serialize(info.name, t, &bytes[i], &len);
        if (rc != 0) {
            response_parts_free(p);
            free(idx);
            free(iov);
            srv_respond_fs_error(r, rc);
            return;
        }
        iov[i + 1] = (struct MHD_IoVec){bytes[i] ? (const void *)bytes[i] : t->data, len};
    }
    char hdr[32];
    snprintf(hdr, sizeof hdr, "%zu", p->json.len);
    srv_respond_parts(r, "application/octet-stream", iov, (unsigned)(nb + 1), response_parts_free,
                      p, "Inference-Header-Content-Length", hdr);
    free(idx);
    free(iov);
}

/* Answers a completed inference: its outputs encoded, or its error. The
 * bytes of binary outputs are sent from the output tensors (no copy into
 * the response). */
static void infer_answer(srv_req_t *r);

/* Answers, then hands the request's timestamps to tracing: its arrival,
 * submit, its batch's start and end (submit + queue_ns, + compute_ns; a
 * request that never reached a batch has neither), the end of its batch's
 * input concatenation and the start of its output split inside those (as
 * the statistics' compute_input and compute_output count them; a request
 * run alone has neither step, so they equal the start and the end), and
 * its answer queued. */
static void infer_finish(srv_req_t *r)
{
    srv_infer_job_t *job = &r->infer;
    const eng_request_t *e = &job->ereq;
    uint64_t queue_ns = e->queue_ns, compute_ns = e->compute_ns;
    bool ran = compute_ns > 0;
    uint64_t start = r->submit_ns + queue_ns, end = start + compute_ns;
    eng_served_t *served = job->served; /* held until the request is freed */
    infer_answer(r);
    srv_trace_times_t tm = {.request_start_ns = r->start_ns, .queue_start_ns = r->submit_ns,
                            .compute_start_ns = ran ? start : 0,
                            .compute_input_end_ns = ran ? start + e->input_ns : 0,
                            .compute_output_start_ns = ran ? end - e->output_ns : 0,
                            .compute_end_ns = ran ? end : 0,
                            .request_end_ns = fs_clock_now_ns()};
    srv_trace_request(r->app->trace, eng_served_name(served), eng_served_version(served), &tm);
}

static void infer_answer(srv_req_t *r)
{
    srv_infer_job_t *job = &r->infer;
    eng_request_t *e = &job->ereq;
    if (e->status != 0) {
        srv_respond_error(r, srv_status_of(e->status), "%s", e->error);
        return;
    }
    const eng_model_t *m = eng_served_model(job->served);
    int rc = srv_shm_infer_outputs(r);
    if (rc != 0) {
        eng_served_count_answer_failed(job->served, e, rc);
        eng_request_free_outputs(e);
        srv_respond_fs_error(r, rc);
        return;
    }
    srv_buf_t out = {0};
    rc = srv_infer_response_encode_json(m, eng_served_name(job->served),
                                        eng_served_version(job->served), job->request,
                                        e->outputs, e->n_outputs, &out);
    size_t nb = rc == 0 ? srv_infer_response_binary(m, job->request, e->n_outputs, NULL) : 0;
    if (nb > 0) {
        respond_binary(r, e, m, &out, nb);
        return;
    }
    eng_request_free_outputs(e);
    if (rc != 0) {
        eng_served_count_answer_failed(job->served, e, rc);
        srv_buf_free(&out);
        srv_respond_fs_error(r, rc);
        return;
    }
    srv_respond(r, 200, "application/json", out.data, out.len, true);
}

/* Counts a request refused with `code` before it was submitted as a
 * failure of its model (nv_inference_request_failure, the statistics'
 * fail), when its model is known; one refused before that (an unknown
 * model, a body naming none) belongs to no model and is not counted. */
static void count_refused(srv_req_t *r, int code)
{
    if (r->infer.served)
        eng_served_count_refused(r->infer.served, code,
                                 fs_clock_now_ns() - r->start_ns);
}

/* Answers the error of a request refused before it was submitted, counted
 * for its model. */
static void refuse(srv_req_t *r, int code)
{
    count_refused(r, code);
    srv_respond_fs_error(r, code);
}

void srv_infer_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_infer_job_t *job = &r->infer;
    r->compressible = true;
    /* A model in the path is looked up first: an unknown one is 404
     * whatever the headers and the body hold. */
    if (a->model[0] && !(job->served = srv_info_acquire(r, a)))
        return;
    size_t header_len = 0;
    bool raw = false;
    if (header_length(r, &header_len, &raw) != 0) {
        count_refused(r, FS_EINVAL);
        return;
    }
    int rc = 0;
    if (raw && raw_request(r, a) != 0) {
        count_refused(r, FS_EINVAL);
        return;
    }
    if (!raw && (rc = srv_infer_request_parse(srv_req_body(r), srv_req_body_len(r), header_len,
                                              &job->request)) != 0) {
        refuse(r, rc);
        return;
    }
    srv_route_args_t args = *a;
    if (!args.model[0] && body_model(r, &args) != 0)
        return;
    /* The sooner of the server's request_timeout and the request's own. */
    uint64_t timeout = r->app->cfg.server.request_timeout_ns;
    uint64_t own = job->request->timeout_us > UINT64_MAX / 1000 ? UINT64_MAX
                                                               : job->request->timeout_us * 1000;
    if (own && (!timeout || own < timeout))
        timeout = own;
    job->ereq = (eng_request_t){.deadline_ns = timeout ? fs_clock_now_ns() + timeout : 0,
                                .done = on_infer_done, .user = r,
                                .seq_id = job->request->seq_id,
                                .seq_label = job->request->seq_label,
                                .seq_start = job->request->seq_start,
                                .seq_end = job->request->seq_end};
    if ((rc = srv_shm_infer_inputs(r)) != 0 || (rc = bind_inputs(job)) != 0) {
        refuse(r, rc);
        return;
    }
    srv_req_submitting(r, infer_finish);
    r->submit_ns = fs_clock_now_ns();
    if ((rc = submit(r, &args)) != 0) {
        srv_req_refused(r);
        refuse(r, rc);
        return;
    }
    srv_req_park(r);
}
