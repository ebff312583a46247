/* sequence.c -- the sequence batcher of a served version (Triton's
 * sequence_batching): requests that name a sequence run in arrival order,
 * one at a time per sequence, with the control inputs and the implicit
 * state filled in here, in front of the version's dynamic batcher.
 *
 * ## The algorithm
 *
 * A sequence is a slot keyed by its id (an integer, or a string). A
 * request (the "outer" one, the caller's) becomes a job: an "inner"
 * request over the model's full inputs -- the caller's, plus each control
 * input (a [1, 1] tensor, or [1] when the model has no batch dim, holding
 * the START/END/READY flag in its false/true values, or the id) and each
 * state input (the slot's state) -- which goes to the dynamic batcher. A
 * slot has at most one job in the batcher; later jobs of the sequence wait
 * in the slot's FIFO and the completion of one submits the next. Requests
 * of different sequences are independent inner requests, so the dynamic
 * batcher batches them together where the model batches (every row
 * carries its own controls and state): Triton's "oldest" strategy.
 *
 * When a job completes, each state output (output_name) is copied into
 * the slot's state (in place when the shape is unchanged) and stays out of
 * the caller's answer (eng_served_output_state); then the caller's `done`
 * runs, then the next job is submitted. A START (re)initialises the state
 * to zeros when its job runs, so a START for a live id continues in its
 * slot as a new sequence, as Triton does (it warns that the previous
 * sequence is ended early). An END detaches the slot from its id at once
 * (a later request of the id must START again; an END refused at submit
 * ends the sequence all the same) and frees it once its jobs are done. A
 * slot with no job for idle_ns is freed by the reaper thread
 * (Triton's max_sequence_idle_microseconds).
 *
 * ## Guarantees
 *
 * - Per sequence: jobs run in arrival order, one at a time; each sees the
 *   state the previous one left.
 * - Memory: state tensors come from the host cache under the owner
 *   "<model>:<version>/sequence_state" (visible on /v1/memory); at most
 *   max_sequences slots live at once (a START past it fails with FS_EFULL);
 *   the version's unload frees every slot and checks the owner is back to
 *   zero bytes.
 * - Errors: a request without an id, a non-START request for an id with no
 *   live sequence, a batch dim other than 1 (Triton's wording for each),
 *   are FS_EINVAL at submit, before anything is queued.
 *
 * Lock order: the registry's, a served version's, then this lock; nothing
 * is submitted to the batcher, and no `done` runs, while it is held. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/sync.h"
#include "engine/registry_impl.h"

typedef struct seq_slot seq_slot_t;

/* One request of a sequence: the caller's, and the batcher's over the
 * model's full inputs. */
typedef struct seq_job {
    eng_request_t inner;
    eng_seq_t *seq;
    eng_request_t *outer;         /* the caller's; its done runs once */
    seq_slot_t *slot;
    eng_tensor_t *inputs;         /* the model's inputs: views of outer's, the controls', the state's */
    uint64_t ctl[ENG_SEQ_MAX_CONTROLS]; /* each control's one value */
    struct seq_job *next;         /* in the slot's FIFO */
} seq_job_t;

struct seq_slot {
    uint64_t id;
    char *label;                  /* a string id (owned), or NULL */
    bool attached;                /* reachable by its id (no END accepted yet) */
    bool busy;                    /* a job is in the batcher */
    bool has_state;               /* state[] allocated (at the first START run) */
    uint64_t idle_since_ns;       /* fs_clock_now_ns when its last job ended (or it was made) */
    eng_tensor_t *state[ENG_SEQ_MAX_STATES];
    seq_job_t *head, *tail;       /* jobs waiting, oldest first */
    seq_slot_t *next, *prev;      /* every slot of the version */
};

struct eng_seq {
    eng_served_t *served;         /* borrowed: owns this */
    alloc_cache_t *cache;         /* the host cache state lives in */
    alloc_owner_t owner;
    long control_input[ENG_SEQ_MAX_CONTROLS]; /* model input index of each control */
    long state_input[ENG_SEQ_MAX_STATES], state_output[ENG_SEQ_MAX_STATES];
    uint64_t idle_ns;
    uint32_t max_slots;

    pthread_mutex_t lock;         /* guards everything below */
    pthread_cond_t reap;          /* the reaper: a slot went idle, or stop */
    bool stop;
    pthread_t reaper;
    bool reaper_started;
    seq_slot_t *slots;            /* every live slot, attached or draining */
    uint32_t n_slots;
};

const char *eng_seq_control_kind_name(eng_seq_control_kind_t k)
{
    static const char *const names[] = {"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY",
                                        "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_CORRID"};
    return (unsigned)k < 4 ? names[k] : "?";
}

/* ---- ids --------------------------------------------------------------------- */

/* "1000" or the string id, for messages. */
static const char *id_text(const eng_request_t *r, char *buf, size_t len)
{
    if (r->seq_label)
        snprintf(buf, len, "%.100s", r->seq_label);
    else
        snprintf(buf, len, "%" PRIu64, r->seq_id);
    return buf;
}

static bool slot_matches(const seq_slot_t *sl, const eng_request_t *r)
{
    if (!sl->attached)
        return false;
    if (r->seq_label)
        return sl->label && strcmp(sl->label, r->seq_label) == 0;
    return !sl->label && sl->id == r->seq_id;
}

/* ---- slots ------------------------------------------------------------------- */

static void slot_state_free(seq_slot_t *sl)
{
    for (size_t k = 0; k < ENG_SEQ_MAX_STATES; k++) {
        eng_tensor_free(sl->state[k]);
        sl->state[k] = NULL;
    }
    sl->has_state = false;
}

static void slot_unlink_locked(eng_seq_t *q, seq_slot_t *sl)
{
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        q->slots = sl->next;
    if (sl->next)
        sl->next->prev = sl->prev;
    q->n_slots--;
}

static void slot_free_locked(eng_seq_t *q, seq_slot_t *sl)
{
    slot_unlink_locked(q, sl);
    slot_state_free(sl);
    free(sl->label);
    free(sl);
}

/* The shape of state k of one sequence: [1, dims...] with a batch dim. */
static eng_shape_t state_shape(const eng_seq_t *q, size_t k)
{
    const eng_seq_state_t *st = &q->served->options.sequence.states[k];
    eng_shape_t sh = {0};
    size_t lead = q->served->batch_dim ? 1 : 0;
    if (lead)
        sh.dims[0] = 1;
    for (uint32_t d = 0; d < st->rank; d++)
        sh.dims[lead + d] = st->dims[d];
    sh.rank = (int)(lead + st->rank);
    return sh;
}

/* Zeroes the slot's state, allocating it on first use. 0, or FS_ENOMEM
 * (the host cache is at its limit) with the slot's state freed. */
static int slot_state_reset(eng_seq_t *q, seq_slot_t *sl)
{
    const eng_seq_options_t *o = &q->served->options.sequence;
    for (uint32_t k = 0; k < o->n_states; k++) {
        eng_shape_t sh = state_shape(q, k);
        eng_tensor_t *t = sl->state[k];
        if (t && !eng_shape_equal(&t->shape, &sh)) {
            eng_tensor_free(t);
            t = sl->state[k] = NULL;
        }
        if (!t) {
            int rc = eng_tensor_alloc_cached(q->cache, q->owner, o->states[k].dtype, &sh, &t);
            if (rc != 0) {
                slot_state_free(sl);
                return fs_err(rc, "model '%s': no memory for the state '%s' of a new sequence: "
                              "%s", q->served->name, o->states[k].input, fs_errmsg());
            }
            sl->state[k] = t;
        }
        memset(t->data, 0, eng_tensor_bytes(t));
    }
    sl->has_state = true;
    return 0;
}

/* Output j of a finished job into state k: in place when the shape is the
 * same, else into a new tensor. 0, or FS_ENOMEM / FS_EINVAL (a dtype that
 * is not the state's) with the old state kept. */
static int slot_state_take(eng_seq_t *q, seq_slot_t *sl, size_t k, const eng_tensor_t *out)
{
    const eng_seq_state_t *st = &q->served->options.sequence.states[k];
    if (out->dtype != st->dtype)
        return fs_err(FS_EINVAL, "model '%s': state output '%s' is %s, not the state's %s",
                      q->served->name, st->output, eng_dtype_name(out->dtype),
                      eng_dtype_name(st->dtype));
    eng_tensor_t *t = sl->state[k];
    if (!t || !eng_shape_equal(&t->shape, &out->shape)) {
        eng_tensor_t *n = NULL;
        int rc = eng_tensor_alloc_cached(q->cache, q->owner, out->dtype, &out->shape, &n);
        if (rc != 0)
            return fs_err(rc, "model '%s': no memory for the state '%s': %s", q->served->name,
                          st->output, fs_errmsg());
        eng_tensor_free(t);
        t = sl->state[k] = n;
    }
    size_t bytes = eng_tensor_bytes(out);
    if (bytes)
        memcpy(t->data, out->data, bytes);
    return 0;
}

/* ---- jobs -------------------------------------------------------------------- */

static void control_value(const eng_seq_control_t *c, bool on, uint64_t id, void *dst)
{
    double v = c->false_true[on ? 1 : 0];
    switch (c->dtype) {
    case ENG_DT_INT32:
        *(int32_t *)dst = c->kind == ENG_SEQ_CORRID ? (int32_t)(uint32_t)id : (int32_t)v;
        break;
    case ENG_DT_UINT32:
        *(uint32_t *)dst = (uint32_t)id;
        break;
    case ENG_DT_INT64:
        *(int64_t *)dst = (int64_t)id;
        break;
    case ENG_DT_UINT64:
        *(uint64_t *)dst = id;
        break;
    case ENG_DT_FLOAT:
        *(float *)dst = (float)v;
        break;
    case ENG_DT_BOOL:
        *(uint8_t *)dst = v != 0;
        break;
    default:
        break; /* refused at create */
    }
}

static void job_free(seq_job_t *j)
{
    if (!j)
        return;
    free(j->inputs);
    free(j);
}

/* The job's inputs: the caller's, with the controls and the slot's state
 * in their places. The state is read only while the job runs, and only
 * its own completion writes it. */
static void job_bind(eng_seq_t *q, seq_job_t *j)
{
    const eng_served_t *s = q->served;
    const eng_seq_options_t *o = &s->options.sequence;
    const eng_request_t *r = j->outer;
    memcpy(j->inputs, r->inputs, s->n_inputs * sizeof *j->inputs);
    eng_shape_t one = {.rank = s->batch_dim ? 2 : 1, .dims = {1, 1}};
    for (uint32_t c = 0; c < o->n_controls; c++) {
        const eng_seq_control_t *ct = &o->controls[c];
        bool on = ct->kind == ENG_SEQ_START ? r->seq_start
                  : ct->kind == ENG_SEQ_END ? r->seq_end
                                            : true;
        control_value(ct, on, r->seq_id, &j->ctl[c]);
        j->inputs[q->control_input[c]] =
            (eng_tensor_t){.dtype = ct->dtype, .shape = one, .data = &j->ctl[c]};
    }
    for (uint32_t k = 0; k < o->n_states; k++)
        j->inputs[q->state_input[k]] = *j->slot->state[k];
    j->inner.inputs = j->inputs;
    j->inner.n_inputs = s->n_inputs;
    j->inner.deadline_ns = r->deadline_ns;
}

static void job_done(eng_request_t *inner);

/* Hands j to the batcher (`run`: eng_served_submit_run's way). The slot is
 * busy with j. 0, or the batcher's refusal, j's done not run. */
static int job_submit(eng_seq_t *q, seq_job_t *j, bool run)
{
    pthread_mutex_lock(&q->lock);
    int rc = 0;
    if (j->outer->seq_start || !j->slot->has_state)
        rc = slot_state_reset(q, j->slot);
    pthread_mutex_unlock(&q->lock);
    if (rc != 0)
        return rc;
    job_bind(q, j);
    j->inner.done = job_done;
    j->inner.user = j;
    return served_submit(q->served, &j->inner, run);
}

/* Finishes the caller's request of a job that never reached the batcher. */
static void job_fail(eng_seq_t *q, seq_job_t *j, int code, const char *msg)
{
    eng_request_t *r = j->outer;
    r->status = code;
    snprintf(r->error, sizeof r->error, "%s", msg);
    r->outputs = NULL;
    r->n_outputs = 0;
    eng_served_count_refused(q->served, code, 0);
    job_free(j);
    r->done(r);
}

/* The slot's job ended (ran, or failed before running): the next one
 * takes the slot, or the slot goes idle (freed when detached). Returns the
 * next job to submit, or NULL. */
static seq_job_t *slot_next_locked(eng_seq_t *q, seq_slot_t *sl)
{
    seq_job_t *n = sl->head;
    if (n) {
        sl->head = n->next;
        if (!sl->head)
            sl->tail = NULL;
        n->next = NULL;
        return n; /* still busy */
    }
    sl->busy = false;
    sl->idle_since_ns = fs_clock_now_ns();
    if (!sl->attached)
        slot_free_locked(q, sl);
    else
        pthread_cond_broadcast(&q->reap);
    return NULL;
}

/* Submits the slot's jobs from `j` on, each after the last: a refused one
 * fails at once and the next is tried. */
static void slot_pump(eng_seq_t *q, seq_job_t *j)
{
    while (j) {
        int rc = job_submit(q, j, false);
        if (rc == 0)
            return;
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        seq_slot_t *sl = j->slot;
        pthread_mutex_lock(&q->lock);
        seq_job_t *n = slot_next_locked(q, sl);
        pthread_mutex_unlock(&q->lock);
        job_fail(q, j, rc, msg);
        j = n;
    }
}

/* The batcher finished a job: the state taken from its outputs, the
 * caller answered, the sequence's next job submitted. */
static void job_done(eng_request_t *inner)
{
    seq_job_t *j = inner->user;
    eng_seq_t *q = j->seq;
    const eng_seq_options_t *o = &q->served->options.sequence;
    eng_request_t *r = j->outer;
    seq_slot_t *sl = j->slot;
    for (uint32_t k = 0; inner->status == 0 && k < o->n_states; k++) {
        int rc = slot_state_take(q, sl, k, inner->outputs[q->state_output[k]]);
        if (rc != 0) {
            /* The state is the previous request's: the sequence cannot go on. */
            eng_request_free_outputs(inner);
            inner->status = rc;
            snprintf(inner->error, sizeof inner->error, "%s; sequence ended", fs_errmsg());
            pthread_mutex_lock(&q->lock);
            sl->attached = false;
            pthread_mutex_unlock(&q->lock);
        }
    }
    r->status = inner->status;
    memcpy(r->error, inner->error, sizeof r->error);
    r->outputs = inner->outputs;
    r->n_outputs = inner->n_outputs;
    inner->outputs = NULL;
    inner->n_outputs = 0;
    r->queue_ns = inner->queue_ns;
    r->compute_ns = inner->compute_ns;
    r->batch_rows = inner->batch_rows;
    r->done_us_ = inner->done_us_; /* the stats counted the inner request */
    pthread_mutex_lock(&q->lock);
    seq_job_t *n = slot_next_locked(q, sl);
    pthread_mutex_unlock(&q->lock);
    job_free(j);
    r->done(r);
    slot_pump(q, n);
}

/* ---- submit ------------------------------------------------------------------ */

/* The checks Triton makes before a request joins a sequence. */
static int request_seq_check(const eng_seq_t *q, const eng_request_t *r)
{
    const eng_served_t *s = q->served;
    if (!r->seq_label && r->seq_id == 0)
        return fs_err(FS_EINVAL, "inference request to model '%s' must specify a non-zero or "
                      "non-empty correlation ID", s->name);
    if (r->seq_label && !r->seq_label[0])
        return fs_err(FS_EINVAL, "inference request to model '%s' must specify a non-zero or "
                      "non-empty correlation ID", s->name);
    if (r->n_inputs != s->n_inputs)
        return fs_err(FS_EINVAL, "model '%s' takes %zu inputs (the sequence's controls and state "
                      "among them), the request has %zu", s->name, s->n_inputs, r->n_inputs);
    for (uint32_t c = 0; c < s->options.sequence.n_controls; c++)
        if (r->seq_label && s->options.sequence.controls[c].kind == ENG_SEQ_CORRID)
            return fs_err(FS_EINVAL, "inference request to model '%s': sequence batching "
                          "control '%s' data-type is '%s' but the request's sequence_id is a "
                          "string", s->name, s->options.sequence.controls[c].input,
                          eng_dtype_name(s->options.sequence.controls[c].dtype));
    if (!s->batch_dim)
        return 0;
    /* Triton's sequence batcher takes one row a request. */
    for (size_t i = 0; i < s->n_inputs; i++) {
        if (eng_served_input_filled(s, i))
            continue;
        const eng_tensor_t *t = &r->inputs[i];
        if (t->shape.rank >= 1 && t->shape.dims[0] != 1)
            return fs_err(FS_EINVAL, "inference request to model '%s' must specify batch-size 1 "
                          "due to requirements of sequence batcher (input '%s' has %lld rows)",
                          s->name, s->inputs[i].name, (long long)t->shape.dims[0]);
    }
    return 0;
}

int served_seq_submit(eng_served_t *s, eng_request_t *r, bool run)
{
    eng_seq_t *q = s->seq;
    char idt[112];
    int rc = request_seq_check(q, r);
    if (rc != 0)
        return rc;
    seq_job_t *j = calloc(1, sizeof *j);
    if (j)
        j->inputs = calloc(s->n_inputs ? s->n_inputs : 1, sizeof *j->inputs);
    if (!j || !j->inputs) {
        job_free(j);
        return fs_err(FS_ENOMEM, "model '%s': out of host memory", s->name);
    }
    j->seq = q;
    j->outer = r;
    r->status = 0;
    r->error[0] = '\0';
    r->outputs = NULL;
    r->n_outputs = 0;
    pthread_mutex_lock(&q->lock);
    bool created = false;
    seq_slot_t *sl = q->slots;
    while (sl && !slot_matches(sl, r))
        sl = sl->next;
    if (!sl && !r->seq_start) {
        pthread_mutex_unlock(&q->lock);
        job_free(j);
        return fs_err(FS_EINVAL, "inference request for sequence %s to model '%s' must specify "
                      "the START flag on the first request of the sequence",
                      id_text(r, idt, sizeof idt), s->name);
    }
    if (!sl) {
        if (q->n_slots >= q->max_slots) {
            pthread_mutex_unlock(&q->lock);
            job_free(j);
            return fs_err(FS_EFULL, "model '%s': %u sequences are live, the most it keeps "
                          "(sequence_batching.oldest.max_candidate_sequences, default %d); end "
                          "one, or wait for one to go idle", s->name, q->max_slots,
                          ENG_SEQ_DEFAULT_MAX);
        }
        sl = calloc(1, sizeof *sl);
        if (sl && r->seq_label && !(sl->label = strdup(r->seq_label))) {
            free(sl);
            sl = NULL;
        }
        if (!sl) {
            pthread_mutex_unlock(&q->lock);
            job_free(j);
            return fs_err(FS_ENOMEM, "model '%s': out of host memory", s->name);
        }
        sl->id = r->seq_label ? 0 : r->seq_id;
        sl->attached = true;
        sl->idle_since_ns = fs_clock_now_ns();
        sl->next = q->slots;
        if (q->slots)
            q->slots->prev = sl;
        q->slots = sl;
        q->n_slots++;
        created = true;
    } else if (r->seq_start) {
        FS_LOG_W("sequence", "sequence %s for model '%s' has a conflict: the previous sequence "
                 "did not end before this sequence start; it is ended early",
                 id_text(r, idt, sizeof idt), s->name);
    }
    j->slot = sl;
    if (r->seq_end)
        sl->attached = false; /* the id may START a new sequence at once */
    if (sl->busy) {
        if (sl->tail)
            sl->tail->next = j;
        else
            sl->head = j;
        sl->tail = j;
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    sl->busy = true;
    pthread_mutex_unlock(&q->lock);
    if ((rc = job_submit(q, j, run)) == 0)
        return 0;
    /* Refused: the caller answers; whatever queued behind it meanwhile
     * goes on. */
    char msg[FS_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", fs_errmsg());
    pthread_mutex_lock(&q->lock);
    if (created)
        sl->attached = false; /* the START was refused: no sequence began */
    seq_job_t *n = slot_next_locked(q, sl);
    pthread_mutex_unlock(&q->lock);
    job_free(j);
    slot_pump(q, n);
    return fs_err(rc, "%s", msg);
}

/* ---- the reaper -------------------------------------------------------------- */

static void *reaper_main(void *arg)
{
    eng_seq_t *q = arg;
    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        uint64_t now = fs_clock_now_ns(), wait = UINT64_MAX;
        for (seq_slot_t *sl = q->slots, *next; sl; sl = next) {
            next = sl->next;
            if (sl->busy || sl->head)
                continue;
            uint64_t idle = now > sl->idle_since_ns ? now - sl->idle_since_ns : 0;
            if (idle >= q->idle_ns) {
                char idt[112];
                if (sl->label)
                    snprintf(idt, sizeof idt, "%.100s", sl->label);
                else
                    snprintf(idt, sizeof idt, "%" PRIu64, sl->id);
                FS_LOG_I("sequence", "model '%s': sequence %s idle for %.1f ms: ended",
                         q->served->name, idt, (double)idle / 1e6);
                slot_free_locked(q, sl);
            } else if (q->idle_ns - idle < wait) {
                wait = q->idle_ns - idle;
            }
        }
        fs_cond_timedwait_ns(&q->reap, &q->lock, wait);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* ---- create and destroy ------------------------------------------------------ */

/* Model input `name`'s index, checked to be `dt`. */
static int io_find(const eng_served_t *s, bool output, const char *name, eng_dtype_t dt,
                   const char *what, long *out)
{
    long k = output ? eng_io_output_find(s->model, name) : eng_io_input_find(s->model, name);
    eng_io_info_t io;
    if (k < 0 || (output ? eng_model_output(s->model, (size_t)k, &io)
                         : eng_model_input(s->model, (size_t)k, &io)) != 0)
        return fs_err(FS_EINVAL, "model '%s': sequence_batching %s '%s' is not an %s of the "
                      "model", s->name, what, name, output ? "output" : "input");
    if (io.dtype != dt)
        return fs_err(FS_EINVAL, "model '%s': sequence_batching %s '%s' is %s, but the model's "
                      "is %s", s->name, what, name, eng_dtype_name(dt), eng_dtype_name(io.dtype));
    *out = k;
    return 0;
}

int served_seq_create(eng_served_t *s, alloc_cache_t *host_cache)
{
    const eng_seq_options_t *o = &s->options.sequence;
    if (o->n_controls > ENG_SEQ_MAX_CONTROLS || o->n_states > ENG_SEQ_MAX_STATES)
        return fs_err(FS_EINVAL, "model '%s': too many sequence controls or states", s->name);
    eng_seq_t *q = calloc(1, sizeof *q);
    if (!q)
        return fs_err(FS_ENOMEM, "model '%s': out of host memory", s->name);
    q->served = s;
    q->cache = host_cache;
    q->idle_ns = o->idle_ns ? o->idle_ns : ENG_SEQ_DEFAULT_IDLE_NS;
    q->max_slots = o->max_sequences ? o->max_sequences : ENG_SEQ_DEFAULT_MAX;
    int rc = 0;
    for (uint32_t c = 0; rc == 0 && c < o->n_controls; c++) {
        const eng_seq_control_t *ct = &o->controls[c];
        bool ok = ct->kind == ENG_SEQ_CORRID
                      ? (ct->dtype == ENG_DT_UINT64 || ct->dtype == ENG_DT_INT64 ||
                         ct->dtype == ENG_DT_UINT32 || ct->dtype == ENG_DT_INT32)
                      : (ct->dtype == ENG_DT_INT32 || ct->dtype == ENG_DT_FLOAT ||
                         ct->dtype == ENG_DT_BOOL);
        if (!ok)
            rc = fs_err(FS_ENOTSUP, "model '%s': sequence_batching control '%s' (%s) of dtype %s "
                        "is not supported", s->name, ct->input,
                        eng_seq_control_kind_name(ct->kind), eng_dtype_name(ct->dtype));
        else
            rc = io_find(s, false, ct->input, ct->dtype, "control_input", &q->control_input[c]);
        for (uint32_t d = 0; rc == 0 && d < c; d++)
            if (q->control_input[d] == q->control_input[c])
                rc = fs_err(FS_EINVAL, "model '%s': sequence_batching control_input '%s' is "
                            "listed twice", s->name, ct->input);
    }
    for (uint32_t k = 0; rc == 0 && k < o->n_states; k++) {
        const eng_seq_state_t *st = &o->states[k];
        rc = io_find(s, false, st->input, st->dtype, "state input_name", &q->state_input[k]);
        if (rc == 0)
            rc = io_find(s, true, st->output, st->dtype, "state output_name",
                         &q->state_output[k]);
        for (uint32_t c = 0; rc == 0 && c < o->n_controls; c++)
            if (q->control_input[c] == q->state_input[k])
                rc = fs_err(FS_EINVAL, "model '%s': input '%s' is both a control and a state",
                            s->name, st->input);
        for (uint32_t d = 0; rc == 0 && d < k; d++)
            if (q->state_input[d] == q->state_input[k] || q->state_output[d] == q->state_output[k])
                rc = fs_err(FS_EINVAL, "model '%s': sequence_batching state '%s' is listed "
                            "twice", s->name, st->input);
    }
    char name[ALLOC_OWNER_NAME_MAX];
    snprintf(name, sizeof name, "%.40s:%lld/sequence_state", s->name, (long long)s->version);
    if (rc == 0 && (rc = alloc_cache_owner_create(q->cache, name, &q->owner)) != 0)
        rc = fs_err(rc, "model '%s': %s", s->name, fs_errmsg());
    if (rc != 0) {
        free(q);
        return rc;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->reap, NULL);
    if (pthread_create(&q->reaper, NULL, reaper_main, q) != 0) {
        alloc_cache_owner_destroy(q->cache, q->owner);
        pthread_cond_destroy(&q->reap);
        pthread_mutex_destroy(&q->lock);
        free(q);
        return fs_err(FS_ENOMEM, "model '%s': cannot start the sequence reaper thread", s->name);
    }
    q->reaper_started = true;
    s->seq = q;
    return 0;
}

int served_seq_destroy(eng_served_t *s)
{
    eng_seq_t *q = s->seq;
    if (!q)
        return 0;
    s->seq = NULL;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_broadcast(&q->reap);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->reaper, NULL);
    /* The batcher has stopped and every batch has ended: no job is in it,
     * and what waits in a slot was failed by the completions. What is left
     * is state. */
    size_t live = q->n_slots;
    char msg[FS_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "model '%s' was unloaded", s->name);
    while (q->slots) {
        seq_slot_t *sl = q->slots;
        while (sl->head) {
            seq_job_t *j = sl->head;
            sl->head = j->next;
            job_fail(q, j, FS_ESTATE, msg);
        }
        slot_free_locked(q, sl);
    }
    if (live)
        FS_LOG_I("sequence", "model '%s' version %lld: %zu live sequences ended by the unload",
                 s->name, (long long)s->version, live);
    int rc = alloc_cache_owner_destroy(q->cache, q->owner);
    if (rc != 0) {
        rc = fs_err(FS_EBUSY, "model '%s' version %lld: %s", s->name, (long long)s->version,
                    fs_errmsg());
        FS_LOG_E("registry", "%s", fs_errmsg());
    }
    pthread_cond_destroy(&q->reap);
    pthread_mutex_destroy(&q->lock);
    free(q);
    return rc;
}

/* ---- the server's view ------------------------------------------------------- */

bool eng_served_sequences(const eng_served_t *s)
{
    return s->seq != NULL;
}

bool eng_served_input_filled(const eng_served_t *s, size_t i)
{
    const eng_seq_t *q = s->seq;
    if (!q)
        return false;
    for (uint32_t c = 0; c < s->options.sequence.n_controls; c++)
        if (q->control_input[c] == (long)i)
            return true;
    for (uint32_t k = 0; k < s->options.sequence.n_states; k++)
        if (q->state_input[k] == (long)i)
            return true;
    return false;
}

bool eng_served_output_state(const eng_served_t *s, size_t j)
{
    const eng_seq_t *q = s->seq;
    for (uint32_t k = 0; q && k < s->options.sequence.n_states; k++)
        if (q->state_output[k] == (long)j)
            return true;
    return false;
}

size_t eng_served_sequences_live(eng_served_t *s)
{
    eng_seq_t *q = s->seq;
    if (!q)
        return 0;
    pthread_mutex_lock(&q->lock);
    size_t n = q->n_slots;
    pthread_mutex_unlock(&q->lock);
    return n;
}
