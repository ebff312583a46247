/* app_impl.h -- the running app's state and one request's, shared by
 * app.c (composition), http.c (libmicrohttpd glue and responses), routes.c
 * (the route table), infer.c (the request's wait and inference), admin.c
 * (load, unload, memory), model_info.c (metadata, config, stats) and
 * metrics.c (Prometheus text). Only server/ includes it. */
#ifndef FS_SERVER_APP_IMPL_H
#define FS_SERVER_APP_IMPL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/provider.h"
#include "common/error.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/registry.h"
#include "server/app.h"
#include "server/buf.h"
#include "server/codec.h"

/* HTTP status codes counted for flatserve_http_responses_total. */
#define SRV_N_CODES 12
extern const unsigned srv_counted_codes[SRV_N_CODES];

/* One HTTP thread's completed requests whose connections wait to be
 * resumed (http.c has the scheme). Completing threads push; the thread that
 * owns the connections takes the whole list at once. Alone on its cache
 * line: every completion for the thread writes it. */
typedef struct srv_http_thread {
    _Alignas(64) _Atomic(struct srv_req *) done; /* a stack through srv_req.done_next */
    const srv_app_t *app;         /* the app whose daemon runs the thread */
    /* Written by the owning thread alone (relaxed), read by /metrics; on a
     * line of their own, away from the pushes. */
    _Alignas(64) atomic_uint_fast64_t n_resumed; /* requests taken off the list */
    atomic_uint_fast64_t n_wakeups;              /* of them, resumed by their completer */
} srv_http_thread_t;

typedef struct srv_control srv_control_t; /* model_control.c */
typedef struct srv_config_override srv_config_override_t; /* model_config.c */

struct srv_app {
    /* The effective configuration. cfg_lock guards it against SIGHUP while
     * the registry's options callback and the handlers read it. */
    cfg_t cfg;
    pthread_mutex_t cfg_lock;
    /* Load requests' "config" parameters, a model's each (model_config.c);
     * cfg_lock guards them too. */
    srv_config_override_t *overrides;

    /* The devices it serves on: the CPU, or one or more GPUs (a model
     * without a device of its own runs an instance on each). */
    size_t n_devs;                /* at least 1 */
    eng_device_t devs[CFG_MAX_DEVICES];
    eng_device_t dev;             /* devs[0] */
    char dev_names[CFG_MAX_DEVICES][ENG_DEVICE_NAME_MAX]; /* "cpu", "cuda:N" */
    char device[CFG_MAX_DEVICES * 6 + 8]; /* all of them: "cpu", "cuda:0", "cuda:0,1" */
    int cuda_index;               /* the first GPU's index, -1 on the CPU */
    alloc_cuda_device_info_t gpu[CFG_MAX_DEVICES]; /* each GPU's, when cuda_index >= 0 */
    eng_memory_t dev_mem[CFG_MAX_DEVICES]; /* each device's caches */
    eng_memory_t cpu_mem;         /* on a GPU host, the CPU's, for models set to "cpu" */
    bool has_cpu_mem;
    eng_registry_t *registry;
    srv_control_t *control;       /* model control mode, wanted set, poller (model_control.c) */
    struct srv_trace *trace;      /* Triton's trace extension (trace.c); never NULL once started */
    struct srv_shm *shm;          /* registered system shared memory (shm.c); NULL when
                                   * server.shared_memory is off */

    struct MHD_Daemon *daemon;
    uint16_t port;
    srv_http_thread_t *http_threads; /* one per MHD polling thread (http.c), claimed in turn */
    unsigned n_http_threads;
    atomic_uint http_threads_claimed;
    atomic_bool ready;            /* started and not stopping (readiness.c adds the models) */
    atomic_bool draining;         /* SIGTERM: answer with Connection: close, and
                                   * close new connections at accept (http.c) */
    pthread_mutex_t flight_lock;
    pthread_cond_t flight_cond;
    uint64_t in_flight;           /* requests dispatched and not completed (flight_lock) */

    /* The policy timer: ticks every cache every memory.tick. */
    pthread_t ticker;
    bool ticker_started;
    bool ticker_stop;             /* tick_lock */
    pthread_mutex_t tick_lock;
    pthread_cond_t tick_cond;

    atomic_uint_fast64_t http_responses[SRV_N_CODES + 1]; /* last: other codes */
    uint64_t start_unix_s;
};

/* Every cache that holds the app's memory, with the label /metrics and
 * /v1/memory give it; returns how many (at most SRV_CACHE_REFS_MAX: a
 * device, a host and a pinned cache for each device and the CPU). */
#define SRV_CACHE_REFS_MAX (3 * (CFG_MAX_DEVICES + 1))
typedef struct srv_cache_ref {
    alloc_cache_t *cache;
    const char *device;           /* "cuda:0", "cpu" */
    const char *kind;             /* "device", "host", "pinned" */
} srv_cache_ref_t;
size_t srv_app_caches(srv_app_t *app, srv_cache_ref_t out[SRV_CACHE_REFS_MAX]);

/* ---- the request ----------------------------------------------------------- */

/* Where a request stands in the wait for another thread (infer.c documents
 * the machine: who may move it, from which state to which). */
typedef enum srv_req_state {
    SRV_REQ_IDLE = 0,             /* nothing handed off: the HTTP thread answers */
    SRV_REQ_SUBMITTING,           /* being handed off; the completion may come any time */
    SRV_REQ_DONE_EARLY,           /* completed before the HTTP thread suspended */
    SRV_REQ_SUSPENDED,            /* connection suspended, waiting for the completion */
    SRV_REQ_RESUMED,              /* completed, connection resumed, answer pending */
    SRV_REQ_FINISHED,             /* answered */
    SRV_REQ_N_STATES,
} srv_req_state_t;

/* What moves the machine. */
typedef enum srv_req_event {
    SRV_EV_SUBMIT = 0,            /* HTTP thread: about to hand the request off */
    SRV_EV_REFUSE,                /* HTTP thread: the hand-off failed, no completion will come */
    SRV_EV_COMPLETE,              /* the completing thread: the result is written */
    SRV_EV_SUSPEND,               /* HTTP thread: it suspended the connection */
    SRV_EV_FINISH,                /* HTTP thread: it answers */
    SRV_EV_N,
} srv_req_event_t;

/* An inference's engine side (infer.c); every field owned by the request. */
typedef struct srv_infer_job {
    eng_served_t *served;         /* the version it runs on (a reference) */
    srv_infer_request_t *request; /* the parsed body */
    eng_tensor_t *views;          /* the inputs in the model's order (borrow the body's data) */
    eng_request_t ereq;           /* the batcher's request and result */
    /* The shared memory regions its tensors lie in (shm_http.c): inputs'
     * at [i], outputs' at [n_inputs + p]; NULL when none is in one. */
    struct srv_shm_hold *shm;
} srv_infer_job_t;

/* A load or unload (admin.c): what to do and how it went. */
typedef struct srv_admin_job {
    bool load;                    /* false: unload */
    char model[ENG_MODEL_NAME_MAX];
    char *config;                 /* a load's "config" parameter (owned until the load takes it) */
    int status;                   /* 0 or FS_E* */
    char error[FS_ERRMSG_MAX];    /* the message when status != 0 */
    uint64_t duration_ns;
} srv_admin_job_t;

/* One HTTP request from its first byte to its completion. Owned by the
 * connection's HTTP thread; while `state` is SUBMITTING or SUSPENDED the
 * completing thread writes the job's result, and only that, before it
 * moves `state`. */
typedef struct srv_req {
    srv_app_t *app;
    struct MHD_Connection *conn;
    const char *url;              /* MHD's, valid for the request */
    const char *method;
    srv_buf_t body;               /* the body from body.data + body_skip (srv_req_body) */
    size_t body_skip;             /* bytes before the body: a binary section starts 64-aligned */
    bool too_large;               /* the body is past server.max_body: dropped, 413 */
    size_t unheld_bytes;          /* the body's length when it could not be held: dropped, 507 */
    bool dispatched;
    /* Its answer may be compressed (Accept-Encoding): inference answers
     * and /metrics only, as Triton, whose clients read every other answer
     * without inflating it (tritonclient.http.aio over aiohttp, which asks
     * for gzip on every request). Set by those handlers. */
    bool compressible;
    bool in_flight;               /* counted in app->in_flight (from dispatch) */
    uint64_t start_ns;
    uint64_t submit_ns;           /* an inference's submit to the batcher (its trace) */
    atomic_int state;             /* srv_req_state_t (infer.c) */
    /* The HTTP thread serving the connection (NULL: resumed one by one),
     * and the request's place on its list of completions (http.c). */
    srv_http_thread_t *thread;
    struct srv_req *done_next;
    bool wakes_self;              /* its completer resumes it: it was pushed on an empty list */
    void (*finish)(struct srv_req *r); /* answers once complete (set at SRV_EV_SUBMIT) */
    srv_infer_job_t infer;
    /* A load's or unload's (admin.c), NULL for any other request: kept
     * apart so that the request every inference callocs stays under
     * malloc's small-chunk size (a larger one consolidates its fast bins
     * each time). Freed with the request. */
    srv_admin_job_t *admin;
} srv_req_t;

/* The request's body as the client sent it (after body_skip). */
static inline const char *srv_req_body(const srv_req_t *r)
{
    return r->body.data ? r->body.data + r->body_skip : "";
}
static inline size_t srv_req_body_len(const srv_req_t *r)
{
    return r->body.len - r->body_skip;
}

/* The path's arguments for a route's handler. */
typedef struct srv_route_args {
    char model[ENG_MODEL_NAME_MAX]; /* "" when the route has no {m} */
    int64_t version;              /* -1: none in the path */
    const char *bad_version;      /* a {v} that is not a number (dispatch refuses it) */
    const char *bad_model;        /* a {m} too long for `model` (dispatch refuses it) */
    const char *region;           /* a {r}: a shared memory region's name, unchecked (the
                                   * handler checks it); NULL when the route has none */
} srv_route_args_t;

/* A route's handler: answers, or hands the request off (infer.c's machine). */
typedef void srv_handler_fn(srv_req_t *r, const srv_route_args_t *a);

/* ---- http.c ---------------------------------------------------------------- */

/* Starts libmicrohttpd on cfg's host and port. 0, or FS_EIO naming the
 * address when it cannot listen. */
int srv_http_start(srv_app_t *app);
/* Waits until no request is in flight or the deadline (fs_clock ns):
 * 0 or FS_ETIMEDOUT. */
int srv_http_wait_idle(srv_app_t *app, uint64_t deadline_ns);
/* Stops the daemon; only when no request is suspended. */
void srv_http_stop(srv_app_t *app);
/* The completing thread, for a request whose connection is suspended and
 * whose state has just become RESUMED: has the connection resumed, in a
 * batch with the HTTP thread's other completions (one wake-up of that
 * thread for all). r may be gone after. Cannot fail. */
void srv_http_resume(srv_req_t *r);
/* The list's two moves, apart from MHD so that tests can drive them.
 * Push: r (borrowed; its state RESUMED, its connection suspended) goes on
 * t's list; returns true when the list was empty (r->wakes_self: the
 * caller resumes r itself). Take: the whole list, newest first through
 * done_next, leaving it empty (NULL: it was). Any thread may push while
 * another takes. Neither can fail. */
bool srv_http_thread_push(srv_http_thread_t *t, srv_req_t *r);
srv_req_t *srv_http_thread_take(srv_http_thread_t *t);

/* Responses, from the request's HTTP thread. Each queues the response on
 * the request's connection and counts its status; the body is copied or,
 * with `take`, taken (freed also when the response cannot be made). */
void srv_respond(srv_req_t *r, unsigned status, const char *content_type, char *body,
                 size_t len, bool take);
/* The same with one more header (`header` NULL: none). */
void srv_respond_header(srv_req_t *r, unsigned status, const char *content_type, char *body,
                        size_t len, bool take, const char *header, const char *value);
/* A 200 whose body is the n buffers of iov in order, sent from where they
 * lie (no copy); release(cls) runs once the response is done with them
 * (sent, the client gone, or the response not made). One header more as
 * srv_respond_header. */
void srv_respond_parts(srv_req_t *r, const char *content_type, const struct MHD_IoVec *iov,
                       unsigned n, void (*release)(void *cls), void *cls, const char *header,
                       const char *value);
/* {"error": "..."} with the status. Adds Retry-After: 1 to 503. */
void srv_respond_error(srv_req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with one more header (`header` NULL: none), as 405's Allow. */
void srv_respond_error_header(srv_req_t *r, unsigned status, const char *header,
                              const char *value, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Header `name` of the request: *first its first value (NULL: absent),
 * *other the first later value that differs from it (NULL: none -- given
 * once, or repeated alike). Borrowed from MHD for the request. Cannot
 * fail. */
void srv_header_values(struct MHD_Connection *conn, const char *name, const char **first,
                       const char **other);
/* The error of an FS_E* code with this thread's fs_errmsg(). */
void srv_respond_fs_error(srv_req_t *r, int code);
/* The registry's index (caller frees with free), or, when
 * it cannot be read, the error answered and false. */
bool srv_registry_index(srv_req_t *r, eng_model_entry_t **entries, size_t *n);
/* `doc` printed as application/json with the status; takes `doc` (NULL,
 * or a print that runs out of memory: 507 instead). */
void srv_respond_json(srv_req_t *r, unsigned status, cJSON *doc);
/* An FS_E* code's HTTP status: 400, 404, 503, 507 or 500. */
unsigned srv_status_of(int code);
/* Adds `key`: "<v>" (versions are strings in the protocol). */
void srv_json_add_version(cJSON *obj, const char *key, int64_t v);

/* ---- routes.c -------------------------------------------------------------- */

/* Dispatches a complete request (body read) to its route's handler, or
 * answers 404, 405 (with Allow), 401 or 400 itself. */
void srv_route(srv_req_t *r);

/* ---- infer.c: the request's wait, and inference ---------------------------- */

/* The machine's table: the state `ev` moves `from` to, or -1 when `ev`
 * may not happen in `from` (a broken invariant). Pure. */
int srv_req_state_next(srv_req_state_t from, srv_req_event_t ev);
/* HTTP thread, before handing r off: IDLE -> SUBMITTING; `finish` will
 * answer it. */
void srv_req_submitting(srv_req_t *r, void (*finish)(srv_req_t *r));
/* HTTP thread, when the hand-off failed (no completion will come):
 * SUBMITTING -> IDLE; the caller answers. */
void srv_req_refused(srv_req_t *r);
/* The completing thread, once the result is written: wakes the HTTP side
 * (resumes the connection when it was suspended). r may be gone after. */
void srv_req_complete(srv_req_t *r);
/* HTTP thread, after a hand-off that succeeded: answers now when the
 * completion came already, else suspends the connection until it does. */
void srv_req_park(srv_req_t *r);
/* HTTP thread, when MHD calls again after the body: answers a resumed
 * request; false (nothing done) in any other state. */
bool srv_req_wake(srv_req_t *r);

/* POST .../infer and POST /infer. */
srv_handler_fn srv_infer_handle;
/* Frees what an inference holds (safe when none); the request must not be
 * waiting (SUBMITTING or SUSPENDED). */
void srv_infer_release(srv_req_t *r);

/* ---- model_info.c ---------------------------------------------------------- */

srv_handler_fn srv_info_live, srv_info_ready, srv_info_server, srv_info_model,
    srv_info_model_ready, srv_info_model_config, srv_info_stats;
/* Acquires the route's model version (caller releases with
 * eng_served_release), or answers the error and returns NULL. */
eng_served_t *srv_info_acquire(srv_req_t *r, const srv_route_args_t *a);

/* ---- model_config.c: a model's config.json or config.pbtxt -------------- */

/* The model's settings over the server's defaults: its load override
 * (srv_model_override_swap), else its config.json or its config.pbtxt (not
 * both: FS_EINVAL naming them); neither: the defaults. 0, or the file's
 * or the override's error naming it and the key or field. */
int srv_model_config_read(srv_app_t *app, const char *name, const char *model_dir,
                          cfg_model_t *out);
/* The registry's verify callback (eng_serve_verify_fn, user: the app):
 * a config.pbtxt's (or the load override's) inputs and outputs against
 * the loaded model (names, data types, dims); an input's fixed dim where
 * the model's is symbolic narrows `inputs` (the requests' check). 0 when
 * the directory has no config.pbtxt and the model no override. */
/* Makes `json` (taken; NULL: none) the load override of model `name`:
 * Triton's ModelConfig in JSON, read in place of its directory's config
 * file from now on. 0, and the one it replaces in *prev (caller frees;
 * NULL: none), so that a load that fails can put it back; or FS_ENOMEM
 * with `json` freed and nothing changed. */
int srv_model_override_swap(srv_app_t *app, const char *name, char *json, char **prev);
/* Frees every override (the app's teardown). */
void srv_model_overrides_free(srv_app_t *app);
int srv_model_verify(void *user, const char *name, const char *model_dir,
                     const eng_model_t *model, const eng_serve_options_t *opts,
                     eng_io_info_t *inputs, size_t n_inputs);

/* ---- model_control.c: model control (--model-control-mode) ------------------- */

/* Loads the startup models of cfg's mode and, in poll mode, starts the
 * repository watcher. 0, or FS_EINVAL (a model list with mode none or
 * poll) / FS_ENOMEM; a model that fails to load is logged, not an error.
 * srv_control_destroy frees what was made either way. */
int srv_control_start(srv_app_t *app);
/* Stops the watcher (waits for a look in progress); idempotent. */
void srv_control_stop(srv_app_t *app);
/* srv_control_stop, then frees; NULL control is a no-op. */
void srv_control_destroy(srv_app_t *app);
/* NULL when the repository API may load and unload (explicit mode), else
 * why not, as a message for the client. Cannot fail. */
const char *srv_control_api_refusal(const srv_app_t *app);
/* Adds `name` to the wanted set or removes it (explicit mode's API). An
 * out-of-memory is logged. */
void srv_control_want(srv_app_t *app, const char *name, bool want);

/* ---- admin.c --------------------------------------------------------------- */

srv_handler_fn srv_admin_index, srv_admin_load, srv_admin_unload, srv_admin_memory,
    srv_admin_memory_empty, srv_admin_memory_reset_peak;

/* ---- shm_http.c: Triton's system shared memory extension ------------------ */

/* GET v2/systemsharedmemory[/region/{r}]/status, POST
 * v2/systemsharedmemory/region/{r}/register, POST
 * v2/systemsharedmemory[/region/{r}]/unregister. */
srv_handler_fn srv_shm_status_handle, srv_shm_register_handle, srv_shm_unregister_handle;
/* The same paths under v2/cudasharedmemory, as a Triton built without GPU
 * support answers them: no CUDA region is ever registered, so the status
 * is [] and an unregister has nothing to do (200), and a register is 400
 * naming CUDA shared memory as not supported. */
srv_handler_fn srv_shm_cuda_status_handle, srv_shm_cuda_register_handle,
    srv_shm_cuda_unregister_handle;
/* Points the parsed request's shared memory inputs at their regions and
 * checks its shared memory outputs' ranges, holding each region in
 * r->infer.shm. 0 (also when no tensor is in shared memory), or FS_EINVAL
 * naming the tensor and what is wrong (the extension off, a region not
 * registered, a range out of its bounds, a BOOL byte neither 0 nor 1) /
 * FS_ENOMEM; what was held stays in r->infer.shm for srv_shm_infer_release. */
int srv_shm_infer_inputs(srv_req_t *r);
/* Writes the completed request's shared memory outputs into their
 * regions. 0, or FS_EINVAL naming an output larger than its
 * shared_memory_byte_size (nothing written then). */
int srv_shm_infer_outputs(srv_req_t *r);
/* Drops the regions r->infer.shm holds. Cannot fail. */
void srv_shm_infer_release(srv_req_t *r);

/* ---- trace_http.c: Triton's trace extension ------------------------------- */

/* GET and POST v2[/models/{m}[/versions/{v}]]/trace/setting. */
srv_handler_fn srv_trace_get_handle, srv_trace_post_handle;

/* ---- readiness.c ----------------------------------------------------------- */

/* Whether /v2/health/ready answers 200: the app is started and not
 * stopping, and, with server.exit_on_error, every model that should be
 * loaded (model_control.c's wanted set) is READY. false with why it is not in `why` (len bytes, always
 * terminated). A registry index that cannot be read is not ready. */
bool srv_ready_check(srv_app_t *app, char *why, size_t len);

/* ---- metrics.c ------------------------------------------------------------- */

/* Appends the Prometheus text exposition (format 0.0.4) of everything. 0
 * or FS_ENOMEM. */
int srv_metrics_render(srv_app_t *app, srv_buf_t *out);
/* GET /metrics. */
srv_handler_fn srv_metrics_handle;

#endif
