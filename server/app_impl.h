/* app_impl.h -- the running app's state, shared by app.c (composition),
 * http.c (libmicrohttpd glue), routes.c (the endpoints) and metrics.c
 * (Prometheus text). Only server/ includes it. */
#ifndef FS_SERVER_APP_IMPL_H
#define FS_SERVER_APP_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/provider.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/registry.h"
#include "server/app.h"
#include "server/codec.h"

/* HTTP status codes counted for flatserve_http_responses_total. */
#define SRV_N_CODES 12
extern const unsigned srv_counted_codes[SRV_N_CODES];

struct srv_app {
    /* The effective configuration. cfg_lock guards it against SIGHUP while
     * the registry's options callback and the handlers read it. */
    cfg_t cfg;
    pthread_mutex_t cfg_lock;

    char device[32];              /* "cpu" or "cuda:N" */
    int cuda_index;               /* -1 on the CPU */
    alloc_cuda_device_info_t gpu; /* when cuda_index >= 0 */
    eng_memory_t dev_mem;         /* the device's caches */
    eng_memory_t cpu_mem;         /* on a GPU host, the CPU's, for models set to "cpu" */
    bool has_cpu_mem;
    eng_registry_t *registry;

    struct MHD_Daemon *daemon;
    uint16_t port;
    atomic_bool ready;            /* /v2/health/ready */
    atomic_bool draining;         /* SIGTERM: answer with Connection: close */
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
 * /v1/memory give it; returns how many (at most 6). */
typedef struct srv_cache_ref {
    alloc_cache_t *cache;
    const char *device;           /* "cuda:0", "cpu" */
    const char *kind;             /* "device", "host", "pinned" */
} srv_cache_ref_t;
size_t srv_app_caches(srv_app_t *app, srv_cache_ref_t out[6]);

/* ---- http.c ---------------------------------------------------------------- */

typedef enum srv_admin {
    SRV_ADMIN_NONE = 0,
    SRV_ADMIN_LOAD,
    SRV_ADMIN_UNLOAD,
} srv_admin_t;

/* Who resumes an inference's connection (routes.c, on_infer_done). */
enum {
    SRV_PHASE_SUBMITTING = 0,     /* the handler is queuing it */
    SRV_PHASE_SUSPENDED,          /* the handler suspended the connection */
    SRV_PHASE_DONE_EARLY,         /* done before the handler suspended */
};

/* One HTTP request from its first byte to its completion. */
typedef struct srv_req {
    srv_app_t *app;
    struct MHD_Connection *conn;
    const char *url;              /* MHD's, valid for the request */
    const char *method;
    srv_buf_t body;
    bool too_large;
    bool dispatched;
    bool in_flight;               /* counted in app->in_flight (from dispatch) */
    bool waiting;                 /* suspended on the batcher */
    uint64_t start_ns;
    /* An inference in flight (routes.c). */
    eng_served_t *served;
    srv_infer_request_t *infer;
    eng_tensor_t *views;
    eng_request_t ereq;           /* also the result of a load or unload */
    atomic_bool done;
    atomic_int phase;             /* SRV_PHASE_* */
    /* A load or unload running on its own thread (routes.c). */
    srv_admin_t admin;
    char admin_model[ENG_MODEL_NAME_MAX];
} srv_req_t;

/* Starts libmicrohttpd on cfg's host and port. 0, or FS_EIO naming the
 * address when it cannot listen. */
int srv_http_start(srv_app_t *app);
/* Stops accepting new connections (the listening socket closes). */
void srv_http_quiesce(srv_app_t *app);
/* Waits until no request is in flight or the deadline (fs_clock ns):
 * 0 or FS_ETIMEDOUT. */
int srv_http_wait_idle(srv_app_t *app, uint64_t deadline_ns);
/* Stops the daemon; only when no request is suspended. */
void srv_http_stop(srv_app_t *app);

/* Responses. Each queues the response on the request's connection and
 * counts its status; the body is copied or taken as documented. */
void srv_respond(srv_req_t *r, unsigned status, const char *content_type, char *body,
                 size_t len, bool take);
/* The same with one more header (`header` NULL: none). */
void srv_respond_header(srv_req_t *r, unsigned status, const char *content_type, char *body,
                        size_t len, bool take, const char *header, const char *value);
/* {"error": "..."} with the status. Adds Retry-After: 1 to 503. */
void srv_respond_error(srv_req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The error of an FS_E* code with this thread's fs_errmsg(). */
void srv_respond_fs_error(srv_req_t *r, int code);
/* An FS_E* code's HTTP status: 400, 404, 503, 507 or 500. */
unsigned srv_status_of(int code);

/* ---- routes.c -------------------------------------------------------------- */

/* Dispatches a complete request (body read); either responds or suspends
 * the connection on an inference (r->waiting). */
void srv_route(srv_req_t *r);
/* Finishes a resumed inference: encodes its outputs or its error. */
void srv_route_finish(srv_req_t *r);
/* Frees what an inference holds (safe when none). */
void srv_route_release(srv_req_t *r);

/* ---- metrics.c ------------------------------------------------------------- */

/* Appends the Prometheus text exposition (format 0.0.4) of everything. 0
 * or FS_ENOMEM. */
int srv_metrics_render(srv_app_t *app, srv_buf_t *out);

#endif
