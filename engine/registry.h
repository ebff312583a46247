/* registry.h -- the model repository as the server serves it: models loaded,
 * rebuilt and unloaded on request, each version behind its own dynamic
 * batcher.
 *
 * Layout: REPO/<model>/config.json (optional; read through the caller's
 * `options` callback, since config/ owns the JSON) and
 * REPO/<model>/<version>/model.onnx; the highest numeric version is served,
 * unless the options pick others (Triton's version_policy: the newest N,
 * all, or a list, each behind its own batcher, all loaded, rebuilt and
 * unloaded together) or another file name (default_model_filename).
 *
 * Load builds the new version beside the running one and swaps it in
 * atomically: requests submitted after the swap go to the new version,
 * those queued or running on the old one finish there, and then the old
 * one is freed (its worker joined, its model destroyed, its owner bytes
 * checked to be zero). A failed load leaves the old version serving; the
 * error is returned and kept in the index. Unload takes the model out of
 * service at once (new requests: FS_ESTATE), fails what is still queued
 * with FS_ESTATE ("model 'm' was unloaded"), lets a running batch finish,
 * frees, and checks the owner bytes.
 *
 * The batcher of a served version: one queue, `instances` worker threads
 * per device, and at most that many batches running at once -- on the
 * workers, or on threads that submit with eng_served_submit_run and find a
 * batch ready. A version on several devices (Triton's instance_group over
 * several GPUs) holds one model per device, each in its device's memory;
 * a batch runs on the device with the fewest batches running, the first
 * such, so work spreads evenly and one device serves alone while load is
 * light.
 * A batch takes the oldest request, and when the model batches (every
 * input and output has the same symbolic first dim -- or, with
 * max_request_rows set, which declares the first dim the rows as Triton's
 * max_batch_size > 0 does, any symbolic first dim -- and max_batch_size >
 * 1) the queued requests whose inputs match it in dtype and in every dim
 * but the first, in arrival order, until max_batch_size rows or until
 * max_queue_delay after the first request arrived. With preferred batch
 * sizes (Triton's preferred_batch_size) a batch that reaches the largest
 * runs at once, and one that runs with rows past a preferred size it
 * reached, itself not a preferred size, takes only the requests up to the
 * largest preferred size it reached (the rest head the next batch), as
 * Triton's dynamic batcher does. It concatenates their
 * inputs along dim 0, runs the model once, and splits every output along
 * dim 0 back to the requests. A batch that fails with more than one
 * request runs each of them alone, so one bad request never fails another.
 * Requests past their deadline fail with FS_ETIMEDOUT instead of running.
 * Each request calls alloc_cache_request_begin/end on the model's cache
 * (the release policies' request hooks); the engine runs each batch inside
 * the cache's batch hooks.
 *
 * Threading: every function is safe from any thread. eng_request_t.done
 * runs on the thread that ran its batch -- a worker, or a thread inside
 * eng_served_submit_run -- or on the thread calling unload/destroy for
 * requests failed there, and must not call back into the registry's load,
 * unload or destroy. Load and unload wait for every reference to the
 * version they free, so a thread must not hold one of that model while it
 * calls them. */
#ifndef FS_ENGINE_REGISTRY_H
#define FS_ENGINE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_registry eng_registry_t;
typedef struct eng_served eng_served_t;   /* one loaded version of a model */

#define ENG_MODEL_NAME_MAX 128
#define ENG_MODEL_FILE_MAX 128    /* a model file's name in its version directory */
#define ENG_PREFERRED_MAX 16      /* preferred batch sizes of one model */
#define ENG_VERSIONS_MAX 16       /* versions of one model serving at once */
#define ENG_DEVICES_MAX 8         /* devices one server (and one model) spreads over */

/* How one model is served: resolved per load by the caller's callback
 * (the server reads the model's config.json over its defaults). */
typedef struct eng_serve_options {
    /* Where the model serves: one instance of it on each device listed
     * (the CPU, or some of the registry's devices); device_set false: on
     * every device of the registry. */
    bool device_set;
    uint32_t n_devices;           /* with device_set: 1..ENG_DEVICES_MAX */
    eng_device_t devices[ENG_DEVICES_MAX];
    eng_precision_t precision;    /* zeroed: fp32 */
    uint32_t threads;             /* CPU kernel threads per run; 0: 1 */
    uint32_t max_plans;           /* 0: the engine's default */
    bool cuda_graphs;
    uint32_t max_batch_size;      /* 0 or 1: no batching */
    uint64_t max_queue_delay_ns;
    uint32_t max_queue;           /* 0: unbounded */
    uint32_t instances;           /* batches at once per device (worker threads: this times the
                                   * devices); 0 means 1 (the server resolves its "auto" 0 before) */
    /* Triton's model configuration (config.pbtxt) adds these; zeroed, they
     * change nothing. */
    char model_file[ENG_MODEL_FILE_MAX]; /* the file in a version directory; "": model.onnx */
    /* Which versions serve at once (Triton's version_policy): the
     * n_versions listed when n_versions > 0, else every one with
     * versions_all, else the newest versions_latest (0: 1). */
    uint32_t versions_latest;
    bool versions_all;
    uint32_t n_versions;
    int64_t versions[ENG_VERSIONS_MAX];
    uint32_t max_request_rows;    /* a request whose inputs have more rows (first dim) is refused
                                   * with FS_EINVAL; 0: only max_batch_size's bound when batching.
                                   * Set, it declares every first dim the rows (the batch dim) */
    uint64_t queue_timeout_ns;    /* a request not started this long after its submit fails with
                                   * FS_ETIMEDOUT (Triton's default_timeout_microseconds); 0: none */
    /* Triton's preferred_batch_size, ascending, each 1..max_batch_size: see
     * the header comment. n_preferred 0: none. */
    uint32_t n_preferred;
    uint32_t preferred[ENG_PREFERRED_MAX];
    /* Triton's sequence_batching (engine/sequence.c): with sequence.enabled
     * every request names a sequence (eng_request_t.seq_*), the controls
     * and states are checked against the model at load, and the batching
     * options above batch requests of different sequences together. */
    eng_seq_options_t sequence;
} eng_serve_options_t;

/* Fills *out for model `name` whose directory is `model_dir`. 0, or an
 * error with fs_err's message (a bad config.json): the load then fails with
 * that message. */
typedef int (*eng_serve_options_fn)(void *user, const char *name, const char *model_dir,
                                    eng_serve_options_t *out);

/* Checks a freshly loaded model of `name` against what its configuration
 * declares (the server: config.pbtxt's inputs and outputs), before it
 * serves. `inputs` (n_inputs, in the model's order, strings borrowed from
 * the model) are what requests are checked against (eng_io_check): the
 * callback may narrow them, a fixed dim for a symbolic one. 0, or an error
 * with fs_err's message: the load then fails with it, and the model is
 * freed. */
typedef int (*eng_serve_verify_fn)(void *user, const char *name, const char *model_dir,
                                   const eng_model_t *model, const eng_serve_options_t *opts,
                                   eng_io_info_t *inputs, size_t n_inputs);

typedef struct eng_registry_config {
    const char *repository;       /* copied */
    /* The server's devices (n_devices 0 means one: devices[0], zeroed the
     * CPU) and, borrowed and outliving the registry, each one's memory,
     * and the CPU's (the same pointer when the device is the CPU). A model
     * whose options name "cpu" runs in cpu_memory; any other device than
     * these fails to load with FS_ENOTSUP naming it. */
    size_t n_devices;
    eng_device_t devices[ENG_DEVICES_MAX];
    eng_memory_t *device_memory[ENG_DEVICES_MAX];
    eng_memory_t *cpu_memory;
    eng_serve_options_fn options; /* NULL: defaults (no batching, fp32) */
    eng_serve_verify_fn verify;   /* NULL: no check */
    void *options_user;           /* passed to both */
} eng_registry_config_t;

/* "cuda:0", or "cuda:0,1" for several devices of one kind ("cpu" for the
 * CPU), into buf; ending ",..." when they do not fit. Cannot fail. */
void eng_devices_text(const eng_device_t *devs, size_t n, char *buf, size_t len);

/* 0 and *out (caller frees with eng_registry_destroy), or FS_EINVAL /
 * FS_ENOMEM. Loads nothing. */
int eng_registry_create(const eng_registry_config_t *cfg, eng_registry_t **out);

/* Unloads every model (as eng_registry_unload) and frees the registry.
 * NULL is a no-op. */
void eng_registry_destroy(eng_registry_t *r);

/* The one rule for a model name, which the registry, the config and the
 * server's routes all apply: 1..127 bytes of [A-Za-z0-9_.-], not starting
 * with '.', so the name is one directory of the repository and never "."
 * or "..". NULL when `name` follows it; else why not, as a phrase
 * completing "the name ..." ("starts with '.'"), with *at the offending
 * byte (0 when no one byte is). Cannot fail. */
const char *eng_registry_name_problem(const char *name, size_t *at);
/* The same as an error: 0, or FS_EINVAL naming the name and saying why. */
int eng_registry_check_name(const char *name);

/* Loads REPO/name's newest version (or the options' versions), or rebuilds
 * the served model from its files (a new version directory is picked up).
 * Every version the options pick is built anew and they are swapped in
 * together: all or none. Blocks until the new versions serve and the old
 * ones are freed. 0, or: FS_EINVAL (bad name), FS_ENOENT (no such model
 * directory, no version in it, or a version asked for missing), the
 * engine's load error (the message names the file and what was wrong),
 * the options callback's error. The old versions, if any, keep serving on
 * error. */
int eng_registry_load(eng_registry_t *r, const char *name);

/* Takes the model out of service and frees it (see the header comment).
 * 0, or FS_ENOENT when it is not loaded, FS_EBUSY naming the owner when
 * its bytes did not return to zero (logged; the model is gone anyway). */
int eng_registry_unload(eng_registry_t *r, const char *name);

/* A reference to the served version of `name`: `version` < 0 for the
 * newest one served, else that version (one of those served). 0 and
 * *out (release with eng_served_release), or FS_EINVAL (bad name),
 * FS_ENOENT (unknown model or version), FS_ESTATE (known but not loaded:
 * the message says why, e.g. the last load's error). */
int eng_registry_acquire(eng_registry_t *r, const char *name, int64_t version,
                         eng_served_t **out);
void eng_served_release(eng_served_t *s);

/* The versions of `name` serving now, newest first: 0 and out[0..*n)
 * (at most ENG_VERSIONS_MAX), or acquire's errors. */
int eng_registry_versions(eng_registry_t *r, const char *name, int64_t out[ENG_VERSIONS_MAX],
                          size_t *n);

/* Borrowed while the reference is held: the instance on the first device
 * (every instance has the same inputs and outputs). */
eng_model_t *eng_served_model(const eng_served_t *s);
const char *eng_served_name(const eng_served_t *s);
int64_t eng_served_version(const eng_served_t *s);
/* A copy of the options (batching may change live). */
void eng_served_options(eng_served_t *s, eng_serve_options_t *out);
/* Input i as requests are checked against it: the model's, narrowed by
 * the verify callback. 0 and *out (strings borrowed from the model), or
 * FS_EINVAL for a bad index. */
int eng_served_input(const eng_served_t *s, size_t i, eng_io_info_t *out);
/* Whether requests are concatenated (see the header comment). */
bool eng_served_batches(eng_served_t *s);

/* Re-reads the options of the model serving as `name` (its config.json
 * over the server's defaults, through the options callback) and applies
 * the batching ones live: max_batch_size, max_queue_delay, max_queue (the
 * other options apply at the next load). 0, or acquire's errors, or the
 * callback's. */
int eng_registry_refresh_batching(eng_registry_t *r, const char *name);

/* For a graceful stop, when no new request comes: from now on every
 * version runs what is queued at once instead of waiting out
 * max_queue_delay for company, so the drain takes as long as the work, not
 * the delay. Not undone. Cannot fail. */
void eng_registry_flush(eng_registry_t *r);

/* One inference request. The caller fills the first group, submits, and
 * after `done` reads the second group and frees the outputs. */
typedef struct eng_request eng_request_t;
struct eng_request {
    /* In: borrowed until done runs. Inputs in the model's input order. */
    const eng_tensor_t *inputs;
    size_t n_inputs;
    uint64_t deadline_ns;         /* fs_clock_now_ns() bound for starting; 0: none */
    void (*done)(eng_request_t *req);
    void *user;
    /* Its sequence, for a version with sequence batching (others refuse a
     * request that names one): the id is seq_label when not NULL (a string,
     * borrowed until done runs), else seq_id; 0 and NULL name none. */
    uint64_t seq_id;
    const char *seq_label;
    bool seq_start, seq_end;
    /* Out: set before done runs. */
    int status;                   /* 0 or FS_E* */
    char error[FS_ERRMSG_MAX];    /* the message when status != 0 */
    eng_tensor_t **outputs;       /* n_outputs tensors; caller frees with eng_request_free_outputs */
    size_t n_outputs;
    uint64_t queue_ns;            /* submit to the start of its batch */
    uint64_t compute_ns;          /* its batch's run (concatenate, run, split) */
    uint64_t input_ns, output_ns; /* of compute_ns, the concatenate and the split (0 run alone) */
    uint32_t batch_rows;          /* rows of the batch it ran in */
    /* Private to the batcher. */
    uint64_t submit_ns_;
    uint64_t submit_real_ns_;     /* fs_clock_real_ns() at submit: bounds its wait in real time */
    uint64_t done_us_;            /* submit to done, as the stats counted it */
    eng_request_t *next_;
};

/* Frees req->outputs and the tensors in it; NULL-safe and idempotent. */
void eng_request_free_outputs(eng_request_t *req);

/* Queues a request on this version. 0: `done` will run exactly once. Or,
 * with `done` never called and the message set: FS_EINVAL (wrong number
 * of inputs, or an input whose dtype, rank or fixed dims do not match the
 * model, or more rows than max_batch_size: the message names the input,
 * the expected and the actual), FS_EFULL (max_queue requests waiting),
 * FS_ESTATE (this version is being replaced or unloaded). */
int eng_served_submit(eng_served_t *s, eng_request_t *req);

/* eng_served_submit, and then the submitting thread runs a batch itself
 * when one can start at once: fewer than `instances` batches run on this
 * version (the workers' and other callers' together), it serves, and the
 * batch the oldest queued request heads needs no waiting (max_queue_delay
 * is 0, or the batch is full, or its head's delay has passed). That batch
 * is formed as a worker would form it and run here: `done` of each of its
 * requests runs on this thread before the call returns 0. It may hold
 * `req` and others, or, when older requests wait, not `req` at all: `req`
 * then stays queued and a worker runs it. At most one batch runs per call;
 * when none can start, the request just stays queued for a worker, as with
 * eng_served_submit. Whether `req` ran here: its `done` has run by the
 * return. Requests found past their deadline may fail here too.
 *
 * Why: eng_served_submit hands every request to a worker (a wake-up) and
 * the worker hands the answer back (another), most of a small model's
 * round trip; here neither happens when the batch is ready, and an HTTP
 * thread whose request ran can answer without suspending its connection.
 * The cost: the calling thread is blocked for one batch's run, perhaps of
 * other requests -- the caller chooses per call.
 *
 * The same errors as eng_served_submit, returned before anything runs
 * (`done` not called). `s` stays valid for the call even if a `done` run
 * here releases the caller's reference: a version is not freed while a
 * batch runs on it. */
int eng_served_submit_run(eng_served_t *s, eng_request_t *req);

/* Sequence batching (engine/sequence.c). On a version with it, the two
 * submits above take a request of a sequence: it runs after the earlier
 * requests of its sequence (it may wait in the sequence, and then `done`
 * runs later, on the thread that finished the request before it), with
 * the control and state inputs filled in -- the caller leaves them as
 * they are in req->inputs, which still has one entry per model input --
 * and its outputs hold every model output, the state outputs too (the
 * state is a copy). More errors: FS_EINVAL (no id, an id that no live
 * sequence has without seq_start, a batch dim other than 1, in Triton's
 * words), FS_EFULL (as many sequences live as the version keeps),
 * FS_ENOMEM. Whether the version takes sequences; whether model input i
 * is filled by the sequence batcher (a control or a state input); whether
 * model output j is a state output; how many sequences are live. Cannot
 * fail. */
bool eng_served_sequences(const eng_served_t *s);
bool eng_served_input_filled(const eng_served_t *s, size_t i);
bool eng_served_output_state(const eng_served_t *s, size_t j);
size_t eng_served_sequences_live(eng_served_t *s);

/* Per (model, version) serving statistics, Triton's set. Counters only
 * grow; they survive rebuilds of the same version and unloads (they live
 * as long as the registry). Durations in microseconds, summed. */
#define ENG_LATENCY_BUCKETS 14        /* bounds: eng_latency_bucket_bounds_us */
#define ENG_BATCH_BUCKETS 10          /* bounds: eng_batch_bucket_bounds */
extern const uint64_t eng_latency_bucket_bounds_us[ENG_LATENCY_BUCKETS];
extern const uint64_t eng_batch_bucket_bounds[ENG_BATCH_BUCKETS];
/* Why a request failed, Triton's `reason` label of
 * nv_inference_request_failure. */
typedef enum eng_failure_reason {
    ENG_FAILURE_REJECTED = 0,     /* refused before running: a bad request, a full queue, its
                                   * deadline passed in the queue */
    ENG_FAILURE_CANCELED,         /* cancelled; flatserve cancels nothing (HTTP has no cancel, a
                                   * client gone away still has its request run), so 0 */
    ENG_FAILURE_BACKEND,          /* its run failed */
    ENG_FAILURE_OTHER,            /* anything else: its model unloaded under it, host memory */
    ENG_FAILURE_N,
} eng_failure_reason_t;
const char *eng_failure_reason_name(eng_failure_reason_t r); /* "REJECTED", ... */

typedef struct eng_model_stats {
    uint64_t request_success, request_failure;
    uint64_t failure_by_reason[ENG_FAILURE_N]; /* request_failure split by why */
    uint64_t failure_duration_us; /* submit (or, refused, arrival) to failure, failed requests */
    uint64_t inference_count;     /* rows inferred (successful requests' batch dims) */
    uint64_t exec_count;          /* model runs (batches) */
    uint64_t request_duration_us; /* submit to done, successful requests */
    uint64_t queue_duration_us;
    uint64_t compute_input_us, compute_infer_us, compute_output_us;
    uint64_t pending;             /* gauge: submitted, not yet done */
    uint64_t last_inference_ms;   /* Unix time of the last success, 0: none */
    /* Histograms (non-cumulative buckets; the last counts the rest): request
     * latency of successful requests, and rows per executed batch. */
    uint64_t latency_buckets[ENG_LATENCY_BUCKETS + 1];
    uint64_t batch_buckets[ENG_BATCH_BUCKETS + 1];
    uint64_t batch_rows_sum;
} eng_model_stats_t;

/* Counts a request for s that failed before it was submitted (a body that
 * does not parse or bind, a refused submit): `code` is its FS_E* error,
 * `duration_ns` from its arrival to the refusal. The batcher counts every
 * request it accepted itself; this is for the caller's refusals, which it
 * never saw. The request errors (FS_EINVAL, FS_EPARSE, FS_ERANGE,
 * FS_ENOTSUP), a full queue (FS_EFULL) and a passed deadline
 * (FS_ETIMEDOUT) count as REJECTED, anything else (FS_ESTATE: unloaded
 * meanwhile; FS_ENOMEM) as OTHER. Cannot fail. */
void eng_served_count_refused(eng_served_t *s, int code, uint64_t duration_ns);

/* Recounts req, which completed with status 0 (counted a success), as a
 * failure for `code` (reasons as eng_served_count_refused's): its answer
 * could not be given (its outputs did not fit their shared memory
 * regions, or did not encode). Its success, duration and latency bucket
 * come off; its rows and compute times stay (the model did run them).
 * Call it from done or after, at most once per request. Cannot fail. */
void eng_served_count_answer_failed(eng_served_t *s, const eng_request_t *req, int code);

/* Executions of one batch size (rows), Triton's batch_stats: how many, and
 * their summed concatenate, run and split times. */
typedef struct eng_batch_stat {
    uint64_t batch_size;
    uint64_t count;
    uint64_t compute_input_ns, compute_infer_ns, compute_output_ns;
} eng_batch_stat_t;

/* The batch-size stats of (name, version) (version < 0: the served one),
 * sorted by batch size. 0 and *out (n of them; caller frees with free;
 * NULL when n is 0), or FS_ENOENT when no stats were recorded, FS_ENOMEM. */
int eng_registry_batch_stats(eng_registry_t *r, const char *name, int64_t version,
                             eng_batch_stat_t **out, size_t *n);

/* What the repository holds and what serves, for the index and metrics. */
typedef enum eng_model_state {
    ENG_MODEL_UNAVAILABLE = 0,    /* in the repository, not loaded (or failed) */
    ENG_MODEL_LOADING,
    ENG_MODEL_READY,
    ENG_MODEL_UNLOADING,
} eng_model_state_t;
const char *eng_model_state_name(eng_model_state_t s); /* "UNAVAILABLE", "READY", ... */

typedef struct eng_model_entry {
    char name[ENG_MODEL_NAME_MAX];
    int64_t version;              /* served version, or the newest on disk, or -1 */
    eng_model_state_t state;
    char reason[FS_ERRMSG_MAX];   /* why it is not READY, or why the last load failed while an
                                   * older version stays READY; "" otherwise */
    char device[32];              /* where it serves: "cuda:0", "cuda:0,1", ... ("" when not
                                   * loaded; "cuda:0,1,..." past what fits) */
    size_t weights_bytes;         /* the model owners' allocated bytes (every serving version's);
                                   * 0 when not loaded */
    size_t activations_bytes;     /* the activation owners' allocated bytes now */
    size_t weights_peak_bytes;    /* the peaks of the two, since the version loaded or the */
    size_t activations_peak_bytes; /* cache's last reset_peak */
    eng_model_stats_t stats;      /* of `version` */
} eng_model_entry_t;

/* Every model directory of the repository and every model known to the
 * registry, sorted by name. 0 and *out (n entries; caller frees with
 * free()), or FS_ENOMEM / FS_EIO (repository unreadable). */
int eng_registry_index(eng_registry_t *r, eng_model_entry_t **out, size_t *n);

/* The stats of (name, version) (version < 0: the served one); 0, or
 * FS_ENOENT when none were ever recorded. */
int eng_registry_stats(eng_registry_t *r, const char *name, int64_t version,
                       eng_model_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
