/* batcher.c -- the dynamic batcher of one served version: a queue of
 * requests, `instances` worker threads per device, and the concatenation and split
 * that let one model run serve many requests.
 *
 * The algorithm. Submit checks the request against the model's inputs
 * (count, dtype, rank, fixed dims, rows) and appends it to the queue. A
 * batch is collected from the queue oldest first: requests past their
 * deadline are taken out and fail with FS_ETIMEDOUT; the oldest of the rest
 * heads the next batch, and, when the model batches, the requests after it
 * whose inputs match it in every dim but the first join it in arrival order
 * until the next one would pass max_batch_size rows (requests that do not
 * match stay queued, in order, for a later batch). If the batch is not full
 * and the head arrived less than max_queue_delay ago, it waits for more (or
 * for the next deadline). Then it is taken out of the queue and, outside
 * the lock, run: one request runs on its own inputs; several are
 * concatenated along dim 0 into host buffers, run once, and every output
 * (whose first dim must be the batch's rows) is split back. A batch of
 * several that fails runs each request alone, so a bad request fails only
 * itself.
 *
 * Who runs a batch. At most `instances` batches per device run at once on
 * a version (s->n_running counts them, under s->lock; model_running[k]
 * those on instance k, the model on device k). A batch takes its slot on
 * the instance with the fewest batches running (batch_claim_locked; ties
 * rotate), so a version on two GPUs keeps both busy under load. A worker takes a batch when
 * one of those slots is free, and otherwise sleeps until a running batch
 * ends. The submitter can take one too: eng_served_submit_run queues its
 * request and then, under the same hold of the lock, if a slot is free,
 * the version serves and the batch the oldest request heads needs no
 * waiting, collects that batch exactly as a worker would and runs it on
 * its own thread. That saves the hand-off to a worker and the wake-up back
 * (at concurrency 1 two futex wake-ups and context switches per request,
 * most of a small model's round trip), and when the caller's own request
 * was in the batch its answer is ready when the call returns. The batch
 * may hold other requests, or not the caller's at all when older ones
 * wait (oldest first stays fair); the caller runs at most one batch, and
 * whatever stays queued is a worker's: the caller wakes one when it leaves
 * requests behind with a slot free, and every batch's end wakes them while
 * requests wait, since a worker may be sleeping for want of a slot.
 *
 * Guarantees: `done` runs exactly once for every accepted request, on the
 * thread that ran its batch (a worker, or a caller of
 * eng_served_submit_run), or on the unloading thread for requests failed
 * there, always with no lock held. A request's outputs are the rows of its
 * own inputs: on the CPU they are bit-identical to running it alone (the
 * GEMM is batch-invariant, engine/cpu/gemm.h). A version is not freed
 * while a batch runs on it: served_finish (registry.c) waits for n_running
 * to reach zero as well as for the references, so a caller's batch is safe
 * even if a `done` in it drops the caller's reference. Waits are timed
 * against fs_clock_now_ns() (replaceable by tests), and each is also
 * bounded in real time by max_queue_delay after the head's submit, so a
 * frozen test clock cannot hold a batch forever. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/sync.h"
#include "engine/registry_impl.h"

const uint64_t eng_latency_bucket_bounds_us[ENG_LATENCY_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
    2500000,
};
const uint64_t eng_batch_bucket_bounds[ENG_BATCH_BUCKETS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
};

/* A worker sleeps at most this long at a time while it waits out a delay,
 * so that a test advancing a manual clock is noticed. */
#define BATCHER_WAIT_SLICE_NS 10000000ull

/* Requests taken for one run, linked through next_ in arrival order. */
typedef struct batch {
    eng_request_t *head;
    eng_request_t *first;            /* the request the batch matches (head once taken) */
    size_t n;
    uint64_t rows;
    bool full;                       /* max_rows reached, or the next match did not fit */
    size_t pref_n;                   /* requests up to the largest preferred size reached; 0: none */
    uint64_t deadline_ns;            /* earliest deadline still queued; UINT64_MAX: none */
    unsigned model;                  /* once taken: the instance it runs on (s->models[model]) */
} batch_t;

/* Where a batch's time went, added to each of its requests' stats. */
typedef struct batch_times {
    uint64_t input_ns, infer_ns, output_ns;
} batch_times_t;

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static size_t bucket_of(const uint64_t *bounds, size_t n, uint64_t v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    return i;
}

/* ---- checks ------------------------------------------------------------------ */

/* Whether every input and output leads with one symbolic dim of one name;
 * or, when the options declare the first dim the rows (max_request_rows,
 * Triton's max_batch_size > 0), with a symbolic dim of any name or none:
 * Triton's own identity models leave theirs unnamed, and exporters often
 * name an output's apart from the inputs'. An output whose first dim then
 * turns out not to be the rows fails its batch, whose requests run alone. */
static bool model_has_batch_dim(const eng_served_t *s)
{
    if (s->n_inputs == 0 || s->n_outputs == 0)
        return false;
    bool declared = s->options.max_request_rows > 0;
    const char *sym = NULL;
    for (size_t k = 0; k < s->n_inputs + s->n_outputs; k++) {
        eng_io_info_t io;
        if (k < s->n_inputs)
            io = s->inputs[k];
        else if (eng_model_output(s->model, k - s->n_inputs, &io) != 0)
            return false;
        if (io.rank < 1 || io.dims[0] >= 0)
            return false;
        if (declared)
            continue;
        if (!io.dim_params[0])
            return false;
        if (!sym)
            sym = io.dim_params[0];
        else if (strcmp(sym, io.dim_params[0]) != 0)
            return false;
    }
    return true;
}

/* FS_EINVAL naming the input, the expected and the actual, or 0. */
static int request_check(const eng_served_t *s, const eng_request_t *req)
{
    char got[96];
    if (!req || !req->done)
        return fs_err(FS_EINVAL, "model '%s': a request needs a done callback", s->name);
    if (req->n_inputs != s->n_inputs)
        return fs_err(FS_EINVAL, "model '%s' takes %zu input%s, %zu given", s->name,
                      s->n_inputs, s->n_inputs == 1 ? "" : "s", req->n_inputs);
    if (req->n_inputs && !req->inputs)
        return fs_err(FS_EINVAL, "model '%s': the request has no inputs array", s->name);
    for (size_t i = 0; i < s->n_inputs; i++) {
        const eng_tensor_t *t = &req->inputs[i];
        int rc = eng_io_check(&s->inputs[i], s->name, t, NULL);
        if (rc)
            return rc;
        if (!t->data && eng_shape_numel(&t->shape) > 0)
            return fs_err(FS_EINVAL, "input '%s' of model '%s' has no data", s->inputs[i].name,
                          s->name);
    }
    if (!s->batch_dim)
        return 0;
    int64_t rows = req->inputs[0].shape.dims[0];
    for (size_t i = 1; i < s->n_inputs; i++)
        if (req->inputs[i].shape.dims[0] != rows)
            return fs_err(FS_EINVAL,
                          "input '%s' of model '%s' has %lld rows but input '%s' has %lld (every "
                          "input of a request needs the same first dim)",
                          s->inputs[i].name, s->name, (long long)req->inputs[i].shape.dims[0],
                          s->inputs[0].name, (long long)rows);
    if (rows < 1)
        return fs_err(FS_EINVAL, "input '%s' of model '%s' has no rows (shape %s)",
                      s->inputs[0].name, s->name,
                      eng_shape_format(&req->inputs[0].shape, got, sizeof got));
    return 0;
}

/* The bound on rows, which SIGHUP may change: checked under s->lock. A
 * bound of the options' own (Triton's max_batch_size) holds for every
 * input's first dim, batching or not. */
static int request_check_rows_locked(const eng_served_t *s, const eng_request_t *req)
{
    uint32_t bound = s->options.max_request_rows;
    for (size_t i = 0; bound && i < s->n_inputs; i++) {
        const eng_shape_t *sh = &req->inputs[i].shape;
        if (sh->rank >= 1 && sh->dims[0] > (int64_t)bound)
            return fs_err(FS_EINVAL,
                          "input '%s' of model '%s': %lld rows, more than its max_batch_size %u",
                          s->inputs[i].name, s->name, (long long)sh->dims[0], bound);
    }
    if (s->batches && (uint64_t)req->inputs[0].shape.dims[0] > s->max_rows)
        return fs_err(FS_EINVAL,
                      "input '%s' of model '%s': %lld rows, more than its max_batch_size %u",
                      s->inputs[0].name, s->name, (long long)req->inputs[0].shape.dims[0],
                      s->max_rows);
    return 0;
}

void served_batching_update_locked(eng_served_t *s)
{
    s->batches = s->batch_dim && s->options.max_batch_size > 1;
    s->max_rows = s->batches ? s->options.max_batch_size : 1;
}

/* The rows a request counts for: its first dim when the model has a batch
 * dim, else 1. */
static uint64_t request_rows(const eng_served_t *s, const eng_request_t *req)
{
    return s->batch_dim ? (uint64_t)req->inputs[0].shape.dims[0] : 1;
}

/* Whether b can share a run with a: every input equal but in dim 0 (the
 * dtypes and ranks were checked at submit; they are compared anyway). */
static bool requests_compatible(const eng_served_t *s, const eng_request_t *a,
                                const eng_request_t *b)
{
    for (size_t i = 0; i < s->n_inputs; i++) {
        const eng_tensor_t *x = &a->inputs[i], *y = &b->inputs[i];
        if (x->dtype != y->dtype || x->shape.rank != y->shape.rank)
            return false;
        for (int d = 1; d < x->shape.rank; d++)
            if (x->shape.dims[d] != y->shape.dims[d])
                return false;
    }
    return true;
}

/* ---- completion ------------------------------------------------------------- */

/* The record of batch size `rows` in st, inserted in order when new; NULL
 * when it cannot be grown (stats_lock held). */
static eng_batch_stat_t *batch_stat_get_locked(reg_stats_t *st, uint64_t rows)
{
    size_t lo = 0, hi = st->n_batch;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->batch[mid].batch_size < rows)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < st->n_batch && st->batch[lo].batch_size == rows)
        return &st->batch[lo];
    if (st->n_batch == st->cap_batch) {
        size_t cap = st->cap_batch ? 2 * st->cap_batch : 8;
        eng_batch_stat_t *p = realloc(st->batch, cap * sizeof *p);
        if (!p)
            return NULL;
        st->batch = p;
        st->cap_batch = cap;
    }
    memmove(&st->batch[lo + 1], &st->batch[lo], (st->n_batch - lo) * sizeof *st->batch);
    st->n_batch++;
    st->batch[lo] = (eng_batch_stat_t){.batch_size = rows};
    return &st->batch[lo];
}

/* Counts one execution of `rows` rows that took t. */
static void stats_exec(eng_served_t *s, uint64_t rows, const batch_times_t *t)
{
    pthread_mutex_lock(&s->registry->stats_lock);
    eng_model_stats_t *st = &s->stats->s;
    st->exec_count++;
    st->batch_rows_sum += rows;
    st->batch_buckets[bucket_of(eng_batch_bucket_bounds, ENG_BATCH_BUCKETS, rows)]++;
    eng_batch_stat_t *bs = batch_stat_get_locked(s->stats, rows);
    if (bs) {
        bs->count++;
        bs->compute_input_ns += t->input_ns;
        bs->compute_infer_ns += t->infer_ns;
        bs->compute_output_ns += t->output_ns;
    }
    pthread_mutex_unlock(&s->registry->stats_lock);
    if (!bs)
        FS_LOG_W("registry", "model '%s' version %lld: out of host memory recording an "
                 "execution of batch size %llu; its batch_stats leave it out", s->name,
                 (long long)s->version, (unsigned long long)rows);
}

static const char *const failure_names[ENG_FAILURE_N] = {
    [ENG_FAILURE_REJECTED] = "REJECTED",
    [ENG_FAILURE_CANCELED] = "CANCELED",
    [ENG_FAILURE_BACKEND] = "BACKEND",
    [ENG_FAILURE_OTHER] = "OTHER",
};

const char *eng_failure_reason_name(eng_failure_reason_t r)
{
    return (unsigned)r < ENG_FAILURE_N ? failure_names[r] : "OTHER";
}

/* Counts one failed request (stats_lock held). */
static void stats_failure_locked(eng_model_stats_t *st, eng_failure_reason_t why, uint64_t us)
{
    st->request_failure++;
    st->failure_by_reason[why]++;
    st->failure_duration_us += us;
}

/* Why a request the caller refused or failed with `code` failed. */
static eng_failure_reason_t failure_reason_of(int code)
{
    eng_failure_reason_t why = ENG_FAILURE_OTHER;
    switch (code) {
    case FS_EINVAL:
    case FS_EPARSE:
    case FS_ERANGE:
    case FS_ENOTSUP:
    case FS_EFULL:
    case FS_ETIMEDOUT:
        why = ENG_FAILURE_REJECTED;
        break;
    default:
        break;
    }
    return why;
}

void eng_served_count_refused(eng_served_t *s, int code, uint64_t duration_ns)
{
    pthread_mutex_lock(&s->registry->stats_lock);
    stats_failure_locked(&s->stats->s, failure_reason_of(code), duration_ns / 1000u);
    pthread_mutex_unlock(&s->registry->stats_lock);
}

void eng_served_count_answer_failed(eng_served_t *s, const eng_request_t *req, int code)
{
    uint64_t us = req->done_us_;
    pthread_mutex_lock(&s->registry->stats_lock);
    eng_model_stats_t *st = &s->stats->s;
    st->request_success--;
    st->request_duration_us -= us;
    st->latency_buckets[bucket_of(eng_latency_bucket_bounds_us, ENG_LATENCY_BUCKETS, us)]--;
    stats_failure_locked(st, failure_reason_of(code), us);
    pthread_mutex_unlock(&s->registry->stats_lock);
}

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Records the request in the stats (a failure as `why`), ends it on the
 * cache and calls done; `req` may be gone afterwards. req->status and
 * req->error are set. */
static void request_finish(eng_served_t *s, eng_request_t *req, const batch_times_t *t,
                           eng_failure_reason_t why)
{
    if (req->status != 0)
        eng_request_free_outputs(req);
    uint64_t now = fs_clock_now_ns();
    uint64_t rows = request_rows(s, req);
    uint64_t us = sat_sub(now, req->submit_ns_) / 1000u;
    req->done_us_ = us;
    pthread_mutex_lock(&s->registry->stats_lock);
    eng_model_stats_t *st = &s->stats->s;
    st->pending--;
    if (req->status == 0) {
        st->request_success++;
        st->inference_count += rows;
        st->request_duration_us += us;
        st->queue_duration_us += req->queue_ns / 1000u;
        st->compute_input_us += t->input_ns / 1000u;
        st->compute_infer_us += t->infer_ns / 1000u;
        st->compute_output_us += t->output_ns / 1000u;
        st->latency_buckets[bucket_of(eng_latency_bucket_bounds_us, ENG_LATENCY_BUCKETS, us)]++;
        st->last_inference_ms = unix_ms();
    } else {
        stats_failure_locked(st, why, us);
    }
    pthread_mutex_unlock(&s->registry->stats_lock);
    for (size_t k = 0; k < s->n_models; k++)
        alloc_cache_request_end(s->model_caches[k]);
    req->done(req);
}

__attribute__((format(printf, 4, 5))) static void request_fail(eng_served_t *s,
                                                                eng_request_t *req, int code,
                                                                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(req->error, sizeof req->error, fmt, ap);
    va_end(ap);
    req->status = code;
    batch_times_t none = {0, 0, 0};
    request_finish(s, req, &none,
                   code == FS_ETIMEDOUT ? ENG_FAILURE_REJECTED : ENG_FAILURE_OTHER);
}

/* Fails a list linked through next_ (a queue taken out, or expired ones). */
static void requests_fail_timed_out(eng_served_t *s, eng_request_t *list, uint64_t now)
{
    while (list) {
        eng_request_t *req = list;
        list = req->next_;
        req->next_ = NULL;
        req->queue_ns = sat_sub(now, req->submit_ns_);
        request_fail(s, req, FS_ETIMEDOUT, "waited %.1f ms in the queue of model '%s'",
                     (double)req->queue_ns / 1e6, s->name);
    }
}

/* ---- running ---------------------------------------------------------------- */

/* Runs one request on its own inputs on instance `model` and finishes it. */
static void request_run_alone(eng_served_t *s, eng_request_t *req, unsigned model)
{
    uint64_t rows = request_rows(s, req);
    uint64_t t0 = fs_clock_now_ns();
    eng_tensor_t **outs = calloc(s->n_outputs ? s->n_outputs : 1, sizeof *outs);
    int rc = outs ? eng_model_run(s->models[model], req->inputs, req->n_inputs, outs)
                  : fs_err(FS_ENOMEM, "out of host memory for the outputs");
    uint64_t t1 = fs_clock_now_ns();
    req->compute_ns = sat_sub(t1, t0);
    req->input_ns = req->output_ns = 0;
    req->batch_rows = rows > UINT32_MAX ? UINT32_MAX : (uint32_t)rows;
    req->status = rc;
    batch_times_t t = {0, req->compute_ns, 0};
    if (rc == 0) {
        req->outputs = outs;
        req->n_outputs = s->n_outputs;
        stats_exec(s, rows, &t);
    } else {
        snprintf(req->error, sizeof req->error, "model '%s': %s", s->name, fs_errmsg());
        free(outs);
    }
    request_finish(s, req, &t, ENG_FAILURE_BACKEND);
}

/* The batch's inputs concatenated along dim 0 into malloc'ed buffers
 * (ins[i].data; the caller frees them). 0 or FS_ENOMEM. */
static int batch_concat(const eng_served_t *s, const batch_t *b, eng_tensor_t *ins)
{
    for (size_t i = 0; i < s->n_inputs; i++) {
        ins[i] = b->head->inputs[i];
        ins[i].shape.dims[0] = (int64_t)b->rows;
        size_t bytes = eng_tensor_bytes(&ins[i]);
        if (!(ins[i].data = malloc(bytes ? bytes : 1)))
            return fs_err(FS_ENOMEM, "out of host memory for a batch of %zu bytes", bytes);
        char *at = ins[i].data;
        for (const eng_request_t *q = b->head; q; q = q->next_) {
            size_t n = eng_tensor_bytes(&q->inputs[i]);
            if (n)
                memcpy(at, q->inputs[i].data, n);
            at += n;
        }
    }
    return 0;
}

/* The rows of every output that belong to `req` (starting at row `at`) into
 * its own tensors. 0 or FS_ENOMEM (nothing kept). */
static int request_split(const eng_served_t *s, eng_request_t *req, eng_tensor_t **outs,
                         uint64_t total, uint64_t at)
{
    uint64_t rows = request_rows(s, req);
    eng_tensor_t **mine = calloc(s->n_outputs ? s->n_outputs : 1, sizeof *mine);
    if (!mine)
        return fs_err(FS_ENOMEM, "out of host memory for the outputs");
    req->outputs = mine;
    req->n_outputs = s->n_outputs;
    for (size_t j = 0; j < s->n_outputs; j++) {
        eng_shape_t shape = outs[j]->shape;
        shape.dims[0] = (int64_t)rows;
        size_t row_bytes = eng_tensor_bytes(outs[j]) / total;
        const char *from = (const char *)outs[j]->data + at * row_bytes;
        /* Strings are packed with their bytes: the batch's tensor, which
         * holds the long ones, is freed once every request has its rows. */
        int rc = outs[j]->dtype == ENG_DT_STRING
                     ? eng_tensor_pack_strings(&shape, (const eng_string_t *)from, &mine[j])
                     : eng_tensor_alloc_host(outs[j]->dtype, &shape, &mine[j]);
        if (rc != 0) {
            eng_request_free_outputs(req);
            return rc;
        }
        if (rows && outs[j]->dtype != ENG_DT_STRING)
            memcpy(mine[j]->data, from, rows * row_bytes);
    }
    return 0;
}

/* Runs a batch of several requests and finishes each; on any failure of
 * the batch as a whole, runs each alone. */
static void batch_run_many(eng_served_t *s, batch_t *b, uint64_t t0)
{
    eng_tensor_t *ins = calloc(s->n_inputs, sizeof *ins);
    eng_tensor_t **outs = calloc(s->n_outputs, sizeof *outs);
    int rc = ins && outs ? batch_concat(s, b, ins)
                         : fs_err(FS_ENOMEM, "out of host memory for a batch");
    uint64_t t1 = fs_clock_now_ns();
    if (rc == 0)
        rc = eng_model_run(s->models[b->model], ins, s->n_inputs, outs);
    uint64_t t2 = fs_clock_now_ns();
    for (size_t j = 0; rc == 0 && j < s->n_outputs; j++)
        if (outs[j]->shape.rank < 1 || outs[j]->shape.dims[0] != (int64_t)b->rows) {
            char got[96];
            rc = fs_err(FS_EINVAL, "output %zu has shape %s, not %llu rows", j,
                        eng_shape_format(&outs[j]->shape, got, sizeof got),
                        (unsigned long long)b->rows);
        }
    for (size_t i = 0; ins && i < s->n_inputs; i++)
        free(ins[i].data);
    free(ins);
    if (rc != 0) {
        FS_LOG_W("registry", "model '%s' version %lld: a batch of %zu requests (%llu rows) "
                 "failed, running each alone: %s", s->name, (long long)s->version, b->n,
                 (unsigned long long)b->rows, fs_errmsg());
        for (size_t j = 0; outs && j < s->n_outputs; j++)
            eng_tensor_free(outs[j]);
        free(outs);
        for (eng_request_t *req = b->head, *next; req; req = next) {
            next = req->next_;
            req->next_ = NULL;
            request_run_alone(s, req, b->model);
        }
        return;
    }
    uint64_t at = 0;
    for (eng_request_t *req = b->head; req; req = req->next_) {
        req->status = request_split(s, req, outs, b->rows, at);
        if (req->status != 0)
            snprintf(req->error, sizeof req->error, "model '%s': %s", s->name, fs_errmsg());
        at += request_rows(s, req);
    }
    for (size_t j = 0; j < s->n_outputs; j++)
        eng_tensor_free(outs[j]);
    free(outs);
    uint64_t t3 = fs_clock_now_ns();
    batch_times_t t = {sat_sub(t1, t0), sat_sub(t2, t1), sat_sub(t3, t2)};
    stats_exec(s, b->rows, &t);
    for (eng_request_t *req = b->head, *next; req; req = next) {
        next = req->next_;
        req->next_ = NULL;
        req->compute_ns = sat_sub(t3, t0);
        req->input_ns = t.input_ns;
        req->output_ns = t.output_ns;
        request_finish(s, req, &t, ENG_FAILURE_BACKEND);
    }
}

static void batch_run(eng_served_t *s, batch_t *b)
{
    uint64_t t0 = fs_clock_now_ns();
    uint32_t rows = b->rows > UINT32_MAX ? UINT32_MAX : (uint32_t)b->rows;
    for (eng_request_t *req = b->head; req; req = req->next_) {
        req->queue_ns = sat_sub(t0, req->submit_ns_);
        req->batch_rows = rows;
    }
    if (b->n == 1) {
        b->head->next_ = NULL;
        request_run_alone(s, b->head, b->model);
    } else {
        batch_run_many(s, b, t0);
    }
}

/* ---- the queue -------------------------------------------------------------- */

/* Whether `rows` is one of the preferred batch sizes; *largest gets
 * whether it is the largest. */
static bool rows_preferred(const eng_served_t *s, uint64_t rows, bool *largest)
{
    uint32_t n = s->options.n_preferred;
    *largest = n && rows == s->options.preferred[n - 1];
    for (uint32_t i = 0; i < n; i++)
        if (rows == s->options.preferred[i])
            return true;
    return false;
}

/* How many requests the batch a measuring walk found should take (0: as
 * many as it measured): up to the largest preferred size it reached, when
 * its rows went past it to a size that is not preferred. */
static size_t batch_cut(const eng_served_t *s, const batch_t *b)
{
    bool largest;
    if (!b->pref_n || b->pref_n == b->n || rows_preferred(s, b->rows, &largest))
        return 0;
    return b->pref_n;
}

/* Walks the queue oldest first. Requests past their deadline are unlinked
 * onto *expired. The others measure the batch the oldest of them heads
 * (see the file comment), of at most `max_n` requests (0: no bound of its
 * own); with `take`, its requests are unlinked into b->head as well. */
static void queue_walk_locked(eng_served_t *s, uint64_t now, bool take, size_t max_n,
                              eng_request_t **expired, batch_t *b)
{
    memset(b, 0, sizeof *b);
    b->deadline_ns = UINT64_MAX;
    eng_request_t **link = &s->head, *prev = NULL, **btail = &b->head;
    while (*link) {
        eng_request_t *q = *link;
        bool late = q->deadline_ns && q->deadline_ns <= now;
        bool pick = false;
        if (!late && !b->full) {
            uint64_t rows = request_rows(s, q);
            if (b->n == 0)
                pick = true;
            else if (s->batches && requests_compatible(s, b->first, q)) {
                if (b->rows + rows <= s->max_rows)
                    pick = true;
                else
                    b->full = true;
            }
            if (pick) {
                if (b->n++ == 0)
                    b->first = q;
                b->rows += rows;
                b->full = b->full || !s->batches || b->rows >= s->max_rows ||
                          (max_n && b->n >= max_n);
                bool largest;
                if (s->batches && rows_preferred(s, b->rows, &largest)) {
                    b->pref_n = b->n;
                    b->full = b->full || largest;
                }
            }
        }
        if (!late && q->deadline_ns && q->deadline_ns < b->deadline_ns)
            b->deadline_ns = q->deadline_ns;
        if (!late && !(take && pick)) {
            prev = q;
            link = &q->next_;
            continue;
        }
        *link = q->next_;
        if (s->tail == q)
            s->tail = prev;
        s->n_queued--;
        q->next_ = NULL;
        if (late) {
            q->next_ = *expired;
            *expired = q;
        } else {
            *btail = q;
            btail = &q->next_;
        }
    }
}

/* How long to wait for more requests before running batch b, in ns; 0:
 * run it now (or nothing to run). The real-time bound counts from the
 * head's real submit time, so it holds whoever looks at the batch and
 * however often. */
static uint64_t batch_wait_ns_locked(eng_served_t *s, const batch_t *b, uint64_t now)
{
    if (b->n == 0 || b->full || s->phase != SERVED_SERVING || s->stop ||
        atomic_load_explicit(&s->registry->flushing, memory_order_relaxed))
        return 0;
    uint64_t end = sat_add(b->first->submit_ns_, s->options.max_queue_delay_ns);
    if (end <= now)
        return 0;
    uint64_t real_now = fs_clock_real_ns();
    uint64_t real_end = sat_add(b->first->submit_real_ns_, s->options.max_queue_delay_ns);
    if (real_now >= real_end)
        return 0;
    uint64_t wait = end - now;
    if (b->deadline_ns != UINT64_MAX && b->deadline_ns - now < wait)
        wait = b->deadline_ns - now;
    if (real_end - real_now < wait)
        wait = real_end - real_now;
    return wait < BATCHER_WAIT_SLICE_NS ? wait : BATCHER_WAIT_SLICE_NS;
}

/* Claims a running slot for batch b on the instance with the fewest
 * batches running, searching from next_model so that ties rotate. The
 * caller has checked n_running < max_running. */
static void batch_claim_locked(eng_served_t *s, batch_t *b)
{
    unsigned best = s->next_model % (unsigned)s->n_models;
    for (unsigned i = 1; i < s->n_models; i++) {
        unsigned k = (s->next_model + i) % (unsigned)s->n_models;
        if (s->model_running[k] < s->model_running[best])
            best = k;
    }
    s->next_model = best + 1;
    s->model_running[best]++;
    s->n_running++;
    b->model = best;
}

/* When a batch may start now -- a slot is free, the version serves, and the
 * batch the oldest request heads needs no waiting -- takes it into *b,
 * claims its slot (n_running) and returns true; the caller runs it and then
 * calls batch_end_locked. Requests past their deadline are moved onto
 * *expired whenever the queue is walked (the caller fails them). Cannot
 * fail. */
static bool batch_take_now_locked(eng_served_t *s, uint64_t now, eng_request_t **expired,
                                  batch_t *b)
{
    memset(b, 0, sizeof *b);
    if (s->n_running >= s->max_running || s->phase != SERVED_SERVING)
        return false;
    queue_walk_locked(s, now, false, 0, expired, b);
    if (b->n == 0 || batch_wait_ns_locked(s, b, now) != 0)
        return false;
    queue_walk_locked(s, now, true, batch_cut(s, b), expired, b);
    batch_claim_locked(s, b);
    return true;
}

/* Gives back the slot of batch b, which ran. A worker may sleep for want
 * of a slot while requests wait, so they are woken then; and the thread
 * freeing the version waits for the last batch (served_finish). */
static void batch_end_locked(eng_served_t *s, const batch_t *b)
{
    s->model_running[b->model]--;
    s->n_running--;
    if (s->head)
        pthread_cond_broadcast(&s->work);
    if (s->n_running == 0 && s->phase != SERVED_SERVING)
        pthread_cond_broadcast(&s->idle);
}

static void *served_worker(void *arg)
{
    eng_served_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (!s->head) {
            if (s->stop)
                break;
            pthread_cond_wait(&s->work, &s->lock);
            continue;
        }
        /* Every slot taken (callers of eng_served_submit_run run batches
         * too): batch_end_locked wakes us. */
        if (s->n_running >= s->max_running) {
            pthread_cond_wait(&s->work, &s->lock);
            continue;
        }
        uint64_t now = fs_clock_now_ns();
        eng_request_t *expired = NULL;
        batch_t b;
        queue_walk_locked(s, now, false, 0, &expired, &b);
        uint64_t wait = batch_wait_ns_locked(s, &b, now);
        if (wait && !expired) {
            fs_cond_timedwait_ns(&s->work, &s->lock, wait);
            continue;
        }
        if (!wait)
            queue_walk_locked(s, now, true, batch_cut(s, &b), &expired, &b);
        bool run = !wait && b.head;
        if (run)
            batch_claim_locked(s, &b);
        pthread_mutex_unlock(&s->lock);
        requests_fail_timed_out(s, expired, now);
        if (run)
            batch_run(s, &b);
        pthread_mutex_lock(&s->lock);
        if (run)
            batch_end_locked(s, &b);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- the batcher's face ----------------------------------------------------- */

int served_inputs_init(eng_served_t *s)
{
    s->n_inputs = eng_model_n_inputs(s->model);
    s->n_outputs = eng_model_n_outputs(s->model);
    s->inputs = calloc(s->n_inputs ? s->n_inputs : 1, sizeof *s->inputs);
    if (!s->inputs)
        return fs_err(FS_ENOMEM, "model '%s': out of host memory", s->name);
    for (size_t i = 0; i < s->n_inputs; i++)
        eng_model_input(s->model, i, &s->inputs[i]);
    return 0;
}

int served_batcher_start(eng_served_t *s)
{
    s->batch_dim = model_has_batch_dim(s);
    served_batching_update_locked(s);

    unsigned n = (s->options.instances ? s->options.instances : 1) * (unsigned)s->n_models;
    s->max_running = n;
    s->workers = calloc(n, sizeof *s->workers);
    if (!s->workers)
        return fs_err(FS_ENOMEM, "model '%s': out of host memory", s->name);
    for (s->n_workers = 0; s->n_workers < n; s->n_workers++)
        if (pthread_create(&s->workers[s->n_workers], NULL, served_worker, s) != 0)
            break;
    if (s->n_workers == n)
        return 0;
    served_batcher_stop(s, true);
    return fs_err(FS_ENOMEM, "model '%s': cannot start worker thread %u of %u", s->name,
                  s->n_workers + 1, n);
}

void served_batcher_stop(eng_served_t *s, bool fail_queued)
{
    pthread_mutex_lock(&s->lock);
    s->phase = fail_queued ? SERVED_UNLOADING : SERVED_RETIRING;
    s->stop = true;
    eng_request_t *queued = NULL;
    if (fail_queued) {
        queued = s->head;
        s->head = s->tail = NULL;
        s->n_queued = 0;
    }
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    uint64_t now = fs_clock_now_ns();
    while (queued) {
        eng_request_t *req = queued;
        queued = req->next_;
        req->next_ = NULL;
        req->queue_ns = sat_sub(now, req->submit_ns_);
        request_fail(s, req, FS_ESTATE, "model '%s' was unloaded", s->name);
    }
    for (unsigned i = 0; i < s->n_workers; i++)
        pthread_join(s->workers[i], NULL);
    free(s->workers);
    s->workers = NULL;
    s->n_workers = 0;
}

/* Checks req against the model and clears its outputs: 0, or FS_EINVAL
 * (see request_check) with req untouched. */
static int request_prepare(const eng_served_t *s, eng_request_t *req)
{
    int rc = request_check(s, req);
    if (rc != 0)
        return rc;
    req->status = 0;
    req->error[0] = '\0';
    req->outputs = NULL;
    req->n_outputs = 0;
    req->queue_ns = req->compute_ns = req->input_ns = req->output_ns = 0;
    req->batch_rows = 0;
    req->next_ = NULL;
    return 0;
}

/* Appends a prepared request to the queue, counted as pending and begun on
 * the cache: 0, or FS_ESTATE / FS_EINVAL (rows) / FS_EFULL with nothing
 * queued or counted. Wakes no one: the caller decides who runs it. */
static int request_queue_locked(eng_served_t *s, eng_request_t *req)
{
    if (s->phase == SERVED_RETIRING)
        return fs_err(FS_ESTATE, "model '%s' version %lld is being replaced; retry", s->name,
                      (long long)s->version);
    if (s->phase != SERVED_SERVING)
        return fs_err(FS_ESTATE, "model '%s' was unloaded", s->name);
    int rc = request_check_rows_locked(s, req);
    if (rc != 0)
        return rc;
    if (s->options.max_queue && s->n_queued >= s->options.max_queue)
        return fs_err(FS_EFULL, "model '%s': the queue is full (%u requests waiting)", s->name,
                      s->options.max_queue);
    req->submit_ns_ = fs_clock_now_ns();
    req->submit_real_ns_ = fs_clock_real_ns();
    if (s->options.queue_timeout_ns) {
        uint64_t by = sat_add(req->submit_ns_, s->options.queue_timeout_ns);
        if (!req->deadline_ns || by < req->deadline_ns)
            req->deadline_ns = by;
    }
    pthread_mutex_lock(&s->registry->stats_lock);
    s->stats->s.pending++;
    pthread_mutex_unlock(&s->registry->stats_lock);
    for (size_t k = 0; k < s->n_models; k++)
        alloc_cache_request_begin(s->model_caches[k]);
    if (s->tail)
        s->tail->next_ = req;
    else
        s->head = req;
    s->tail = req;
    s->n_queued++;
    return 0;
}

static int submit_queue(eng_served_t *s, eng_request_t *req)
{
    int rc = request_prepare(s, req);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->lock);
    rc = request_queue_locked(s, req);
    if (rc == 0)
        pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int submit_run(eng_served_t *s, eng_request_t *req)
{
    int rc = request_prepare(s, req);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->lock);
    if ((rc = request_queue_locked(s, req)) != 0) {
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    uint64_t now = fs_clock_now_ns();
    eng_request_t *expired = NULL;
    batch_t b;
    bool run = batch_take_now_locked(s, now, &expired, &b);
    /* What stays queued is a worker's; with every slot taken, the end of a
     * batch wakes one instead. */
    if (s->head && s->n_running < s->max_running)
        pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    requests_fail_timed_out(s, expired, now);
    if (run) {
        batch_run(s, &b);
        pthread_mutex_lock(&s->lock);
        batch_end_locked(s, &b);
        pthread_mutex_unlock(&s->lock);
    }
    return 0;
}

int served_submit(eng_served_t *s, eng_request_t *req, bool run)
{
    return run ? submit_run(s, req) : submit_queue(s, req);
}

/* A request names a sequence exactly when its version batches sequences. */
static int submit_route(eng_served_t *s, eng_request_t *req, bool run)
{
    if (s->seq)
        return served_seq_submit(s, req, run);
    if (req->seq_id || req->seq_label || req->seq_start || req->seq_end)
        return fs_err(FS_EINVAL, "model '%s' has no sequence_batching: the request's sequence "
                      "parameters (sequence_id, sequence_start, sequence_end) are not taken",
                      s->name);
    return served_submit(s, req, run);
}

int eng_served_submit(eng_served_t *s, eng_request_t *req)
{
    return submit_route(s, req, false);
}

int eng_served_submit_run(eng_served_t *s, eng_request_t *req)
{
    return submit_route(s, req, true);
}

void eng_request_free_outputs(eng_request_t *req)
{
    if (!req || !req->outputs)
        return;
    for (size_t j = 0; j < req->n_outputs; j++)
        eng_tensor_free(req->outputs[j]);
    free(req->outputs);
    req->outputs = NULL;
    req->n_outputs = 0;
}
