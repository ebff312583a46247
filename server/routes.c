/* routes.c -- the endpoints: KServe v2 (health, server and model metadata,
 * model config and stats, infer), flatserve's POST /infer, Triton's model
 * repository extension, /v1/memory and /metrics.
 *
 * Routing matches the path's segments against one table; a path that
 * matches with another method is 405 with Allow, no match is 404. Admin
 * routes (repository, memory) need "Authorization: Bearer <token>" when
 * server.admin_token is set (401 otherwise; the comparison takes the same
 * time wherever the tokens differ). Inference binds the body to the
 * model's inputs and submits it to the model's batcher with
 * eng_served_submit_run: when a batch can start at once, this HTTP thread
 * runs it (its own request, and whatever queued with it) and answers
 * without suspending the connection -- no hand-off to a worker and no
 * wake-up back, which at low concurrency is most of a request's cost; the
 * price is that this thread's other connections wait for one batch run.
 * Otherwise the connection is suspended (holding no thread) until a
 * worker's completion resumes it. A version being replaced refuses with
 * FS_ESTATE, and the request is then queued once more on the version that
 * replaced it, so a reload under load loses nothing. Loads and unloads run on the HTTP thread
 * that received them (they are admin calls, and block only that thread). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/half.h"
#include "server/app_impl.h"

typedef enum route_id {
    R_LIVE, R_READY, R_SERVER, R_MODELS_STATS, R_MODEL, R_MODEL_READY, R_MODEL_CONFIG,
    R_MODEL_STATS, R_MODEL_INFER, R_INFER, R_REPO_INDEX, R_REPO_LOAD, R_REPO_UNLOAD,
    R_MEMORY, R_MEMORY_EMPTY, R_MEMORY_RESET_PEAK, R_METRICS,
} route_id_t;

typedef struct route {
    const char *method;
    const char *pattern;          /* segments; "{m}" a model name, "{v}" a version */
    route_id_t id;
    bool admin;
} route_t;

static const route_t routes[] = {
    {"GET", "v2/health/live", R_LIVE, false},
    {"GET", "v2/health/ready", R_READY, false},
    {"GET", "v2", R_SERVER, false},
    {"GET", "v2/models/stats", R_MODELS_STATS, false},
    {"GET", "v2/models/{m}", R_MODEL, false},
    {"GET", "v2/models/{m}/versions/{v}", R_MODEL, false},
    {"GET", "v2/models/{m}/ready", R_MODEL_READY, false},
    {"GET", "v2/models/{m}/versions/{v}/ready", R_MODEL_READY, false},
    {"GET", "v2/models/{m}/config", R_MODEL_CONFIG, false},
    {"GET", "v2/models/{m}/versions/{v}/config", R_MODEL_CONFIG, false},
    {"GET", "v2/models/{m}/stats", R_MODEL_STATS, false},
    {"GET", "v2/models/{m}/versions/{v}/stats", R_MODEL_STATS, false},
    {"POST", "v2/models/{m}/infer", R_MODEL_INFER, false},
    {"POST", "v2/models/{m}/versions/{v}/infer", R_MODEL_INFER, false},
    {"POST", "infer", R_INFER, false},
    {"POST", "v2/repository/index", R_REPO_INDEX, true},
    {"POST", "v2/repository/models/{m}/load", R_REPO_LOAD, true},
    {"POST", "v2/repository/models/{m}/unload", R_REPO_UNLOAD, true},
    {"GET", "v1/memory", R_MEMORY, true},
    {"POST", "v1/memory/empty_cache", R_MEMORY_EMPTY, true},
    {"POST", "v1/memory/reset_peak", R_MEMORY_RESET_PEAK, true},
    {"GET", "metrics", R_METRICS, false},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])
#define MAX_SEGS 8

typedef struct route_args {
    char model[ENG_MODEL_NAME_MAX];
    int64_t version;              /* -1: none in the path */
    const char *bad_version;      /* a {v} that is not a number */
} route_args_t;

/* Splits a path into at most MAX_SEGS segments in `buf`; -1 if more, or an
 * empty segment ("//", a trailing "/"). */
static int split_path(const char *url, char *buf, size_t len, char *segs[MAX_SEGS])
{
    while (*url == '/')
        url++;
    size_t n_url = strlen(url);
    if (n_url >= len)
        return -1;
    memcpy(buf, url, n_url + 1);
    int n = 0;
    if (!*buf)
        return 0;
    for (char *p = buf;;) {
        if (n == MAX_SEGS)
            return -1;
        segs[n++] = p;
        char *slash = strchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
        p = slash + 1;
        if (!*p)
            return -1;
    }
    return n;
}

/* Whether a route's pattern matches the segments; fills `args`. */
static bool route_match(const route_t *rt, char *const *segs, int n, route_args_t *args)
{
    route_args_t a = {.version = -1};
    const char *p = rt->pattern; /* walked in place, segment by segment */
    for (int i = 0; i < n; i++) {
        if (!*p)
            return false;
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 3 && memcmp(p, "{m}", 3) == 0) {
            if (strlen(segs[i]) >= sizeof a.model)
                return false;
            strcpy(a.model, segs[i]);
        } else if (len == 3 && memcmp(p, "{v}", 3) == 0) {
            char *end = NULL;
            long long v = strtoll(segs[i], &end, 10);
            if (end == segs[i] || *end || v < 0)
                a.bad_version = segs[i];
            a.version = v;
        } else if (strlen(segs[i]) != len || memcmp(p, segs[i], len) != 0) {
            return false;
        }
        p += len + (slash != NULL);
    }
    if (*p)
        return false;
    /* "stats" is a model name only where no fixed route takes it. */
    *args = a;
    return true;
}

/* Constant-time over the token's length. */
static bool token_ok(const srv_app_t *app, const char *auth)
{
    const char *want = app->cfg.server.admin_token;
    if (!want[0])
        return true;
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return false;
    const char *got = auth + 7;
    size_t wl = strlen(want), gl = strlen(got);
    unsigned diff = (unsigned)(wl ^ gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

/* ---- JSON helpers ------------------------------------------------------------------ */

static void respond_json(srv_req_t *r, unsigned status, cJSON *doc)
{
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        srv_respond_error(r, 507, "out of host memory writing the response");
        return;
    }
    srv_respond(r, status, "application/json", text, strlen(text), true);
}

static void version_string(int64_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRId64, v);
}

/* The dims of a model input or output as the protocol shows them (-1 for
 * symbolic ones). */
static cJSON *dims_json(const eng_io_info_t *io, int from)
{
    cJSON *a = cJSON_CreateArray();
    for (int d = from; a && d < io->rank; d++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)io->dims[d]));
    return a;
}

/* A model's inputs or outputs: as model metadata shows them ({name,
 * datatype, shape}), or as Triton's model config does ({name, data_type
 * "TYPE_FP32", dims}, without the batch dim when the model batches). */
static cJSON *io_list_json(const eng_model_t *m, bool outputs, bool config, bool batched)
{
    cJSON *list = cJSON_CreateArray();
    size_t n = outputs ? eng_model_n_outputs(m) : eng_model_n_inputs(m);
    for (size_t i = 0; list && i < n; i++) {
        eng_io_info_t io;
        if ((outputs ? eng_model_output(m, i, &io) : eng_model_input(m, i, &io)) != 0)
            continue;
        cJSON *o = cJSON_CreateObject();
        const char *dt = srv_datatype_name(io.dtype);
        cJSON_AddStringToObject(o, "name", io.name);
        if (config) {
            char type[32];
            snprintf(type, sizeof type, "TYPE_%s", dt ? dt : "INVALID");
            cJSON_AddStringToObject(o, "data_type", type);
            cJSON_AddItemToObject(o, "dims", dims_json(&io, batched ? 1 : 0));
        } else {
            cJSON_AddStringToObject(o, "datatype", dt ? dt : eng_dtype_name(io.dtype));
            cJSON_AddItemToObject(o, "shape", dims_json(&io, 0));
        }
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

/* Acquires the model of the route, answering the error itself. */
static eng_served_t *acquire_or_respond(srv_req_t *r, const route_args_t *a)
{
    eng_served_t *s = NULL;
    int rc = eng_registry_acquire(r->app->registry, a->model, a->version, &s);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return NULL;
    }
    return s;
}

/* ---- health, server and model metadata -------------------------------------------- */

static void handle_server(srv_req_t *r)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", "flatserve");
    cJSON_AddStringToObject(doc, "version", CFG_VERSION);
    cJSON *ext = cJSON_AddArrayToObject(doc, "extensions");
    const char *names[] = {"binary_tensor_data", "model_repository", "statistics", "memory"};
    for (size_t i = 0; ext && i < sizeof names / sizeof names[0]; i++)
        cJSON_AddItemToArray(ext, cJSON_CreateString(names[i]));
    cJSON_AddStringToObject(doc, "device", r->app->device);
    respond_json(r, 200, doc);
}

static void handle_model(srv_req_t *r, const route_args_t *a)
{
    eng_served_t *s = acquire_or_respond(r, a);
    if (!s)
        return;
    const eng_model_t *m = eng_served_model(s);
    char v[32];
    version_string(eng_served_version(s), v, sizeof v);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", eng_served_name(s));
    cJSON *versions = cJSON_AddArrayToObject(doc, "versions");
    cJSON_AddItemToArray(versions, cJSON_CreateString(v));
    cJSON_AddStringToObject(doc, "platform", "onnx");
    cJSON_AddStringToObject(doc, "device", eng_model_device(m));
    cJSON_AddItemToObject(doc, "inputs", io_list_json(m, false, false, false));
    cJSON_AddItemToObject(doc, "outputs", io_list_json(m, true, false, false));
    eng_served_release(s);
    respond_json(r, 200, doc);
}

static void handle_model_ready(srv_req_t *r, const route_args_t *a)
{
    eng_served_t *s = acquire_or_respond(r, a);
    if (!s)
        return;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", eng_served_name(s));
    cJSON_AddBoolToObject(doc, "ready", true);
    eng_served_release(s);
    respond_json(r, 200, doc);
}

static void handle_model_config(srv_req_t *r, const route_args_t *a)
{
    eng_served_t *s = acquire_or_respond(r, a);
    if (!s)
        return;
    const eng_model_t *m = eng_served_model(s);
    eng_serve_options_t opts;
    eng_served_options(s, &opts);
    const eng_serve_options_t *o = &opts;
    bool batched = eng_served_batches(s);
    bool gpu = strncmp(eng_model_device(m), "cuda", 4) == 0;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", eng_served_name(s));
    cJSON_AddStringToObject(doc, "platform", "onnx");
    cJSON_AddStringToObject(doc, "backend", "flatserve");
    cJSON_AddNumberToObject(doc, "max_batch_size", batched ? o->max_batch_size : 0);
    cJSON_AddItemToObject(doc, "input", io_list_json(m, false, true, batched));
    cJSON_AddItemToObject(doc, "output", io_list_json(m, true, true, batched));
    if (batched) {
        cJSON *db = cJSON_AddObjectToObject(doc, "dynamic_batching");
        cJSON_AddNumberToObject(db, "max_queue_delay_microseconds",
                                (double)(o->max_queue_delay_ns / 1000));
        cJSON_AddNumberToObject(db, "max_queue_size", o->max_queue);
    }
    cJSON *groups = cJSON_AddArrayToObject(doc, "instance_group");
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "count", o->instances ? o->instances : 1);
    cJSON_AddStringToObject(g, "kind", gpu ? "KIND_GPU" : "KIND_CPU");
    cJSON_AddItemToArray(groups, g);
    cJSON *params = cJSON_AddObjectToObject(doc, "parameters");
    cJSON_AddStringToObject(params, "device", eng_model_device(m));
    cJSON_AddStringToObject(params, "precision", o->precision[0] ? o->precision : "fp32");
    cJSON_AddBoolToObject(params, "cuda_graphs", o->cuda_graphs);
    cJSON_AddNumberToObject(params, "threads", o->threads);
    eng_served_release(s);
    respond_json(r, 200, doc);
}

static cJSON *duration_json(uint64_t count, uint64_t us)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)count);
    cJSON_AddNumberToObject(o, "ns", (double)us * 1000.0);
    return o;
}

/* Triton's statistics extension. */
static cJSON *stats_json(const char *name, int64_t version, const eng_model_stats_t *st)
{
    char v[32];
    version_string(version, v, sizeof v);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "version", v);
    cJSON_AddNumberToObject(o, "last_inference", (double)st->last_inference_ms);
    cJSON_AddNumberToObject(o, "inference_count", (double)st->inference_count);
    cJSON_AddNumberToObject(o, "execution_count", (double)st->exec_count);
    cJSON *is = cJSON_AddObjectToObject(o, "inference_stats");
    cJSON_AddItemToObject(is, "success", duration_json(st->request_success, st->request_duration_us));
    cJSON_AddItemToObject(is, "fail", duration_json(st->request_failure, 0));
    cJSON_AddItemToObject(is, "queue", duration_json(st->request_success, st->queue_duration_us));
    cJSON_AddItemToObject(is, "compute_input", duration_json(st->exec_count, st->compute_input_us));
    cJSON_AddItemToObject(is, "compute_infer", duration_json(st->exec_count, st->compute_infer_us));
    cJSON_AddItemToObject(is, "compute_output", duration_json(st->exec_count, st->compute_output_us));
    cJSON *bs = cJSON_AddArrayToObject(o, "batch_stats");
    for (int b = 0; b <= ENG_BATCH_BUCKETS; b++) {
        if (!st->batch_buckets[b])
            continue;
        cJSON *e = cJSON_CreateObject();
        if (b < ENG_BATCH_BUCKETS)
            cJSON_AddNumberToObject(e, "batch_size_le", (double)eng_batch_bucket_bounds[b]);
        else
            cJSON_AddStringToObject(e, "batch_size_le", "+Inf");
        cJSON_AddNumberToObject(e, "count", (double)st->batch_buckets[b]);
        cJSON_AddItemToArray(bs, e);
    }
    cJSON_AddNumberToObject(o, "pending_request_count", (double)st->pending);
    return o;
}

static void handle_stats(srv_req_t *r, const route_args_t *a)
{
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    int rc = eng_registry_index(r->app->registry, &entries, &n);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(doc, "model_stats");
    bool found = !a;
    for (size_t i = 0; i < n; i++) {
        const eng_model_entry_t *e = &entries[i];
        if (a && strcmp(e->name, a->model) != 0)
            continue;
        found = true;
        eng_model_stats_t st = e->stats;
        int64_t version = e->version;
        if (a && a->version >= 0) {
            version = a->version;
            if (eng_registry_stats(r->app->registry, e->name, a->version, &st) != 0) {
                cJSON_Delete(doc);
                free(entries);
                srv_respond_error(r, 404, "model '%s' has no statistics for version %" PRId64,
                                  a->model, a->version);
                return;
            }
        }
        if (version >= 0)
            cJSON_AddItemToArray(list, stats_json(e->name, version, &st));
    }
    free(entries);
    if (!found) {
        cJSON_Delete(doc);
        srv_respond_error(r, 404, "model '%s' is not in the repository", a->model);
        return;
    }
    respond_json(r, 200, doc);
}

/* ---- inference ------------------------------------------------------------------------ */

static void finish_admin(srv_req_t *r);

/* The completion and the handler agree through r->phase who resumes the
 * connection: a completion that comes while the handler is still
 * submitting (on the handler's own thread when it ran the batch itself, or
 * on a worker) only marks the request done, and the handler answers without
 * suspending; one that comes after the handler suspended resumes it. The
 * handler suspends before it publishes SUSPENDED, so a resume always finds
 * the connection suspended. */
static void on_infer_done(eng_request_t *ereq)
{
    srv_req_t *r = ereq->user;
    atomic_store_explicit(&r->done, true, memory_order_release);
    int expect = SRV_PHASE_SUBMITTING;
    if (atomic_compare_exchange_strong(&r->phase, &expect, SRV_PHASE_DONE_EARLY))
        return;
    MHD_resume_connection(r->conn); /* r may be gone after this */
}

void srv_route_release(srv_req_t *r)
{
    eng_request_free_outputs(&r->ereq);
    srv_infer_request_free(r->infer);
    r->infer = NULL;
    free(r->views);
    r->views = NULL;
    if (r->served)
        eng_served_release(r->served);
    r->served = NULL;
}

/* Views of the request's inputs in the order of r->served's model, as
 * r->ereq's inputs. 0, or FS_ENOMEM / srv_infer_bind's FS_EINVAL. */
static int bind_inputs(srv_req_t *r)
{
    const eng_model_t *m = eng_served_model(r->served);
    size_t n_in = eng_model_n_inputs(m);
    free(r->views);
    r->views = calloc(n_in ? n_in : 1, sizeof *r->views);
    if (!r->views)
        return fs_err(FS_ENOMEM, "out of host memory");
    r->ereq.inputs = r->views;
    r->ereq.n_inputs = n_in;
    return srv_infer_bind(r->infer, m, r->views);
}

static void handle_infer(srv_req_t *r, const route_args_t *a)
{
    const char *hl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 "Inference-Header-Content-Length");
    size_t header_len = 0;
    if (hl) {
        char *end = NULL;
        unsigned long long v = strtoull(hl, &end, 10);
        if (end == hl || *end || v == 0 || v > r->body.len) {
            srv_respond_error(r, 400, "Inference-Header-Content-Length '%s' must be a number "
                              "from 1 to the body's %zu bytes", hl, r->body.len);
            return;
        }
        header_len = (size_t)v;
    }
    /* A model in the path is looked up first: an unknown one is 404
     * whatever the body holds. */
    if (a->model[0] && !(r->served = acquire_or_respond(r, a)))
        return;
    int rc = srv_infer_request_parse(r->body.data ? r->body.data : "", r->body.len, header_len,
                                     &r->infer);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return;
    }
    route_args_t args = *a;
    if (args.model[0] == '\0') {
        /* POST /infer: the model and version are in the body. */
        if (!r->infer->model) {
            srv_respond_error(r, 400, "the body of POST /infer needs \"model\" (a model name)");
            return;
        }
        if (strlen(r->infer->model) >= sizeof args.model) {
            srv_respond_error(r, 400, "\"model\" is longer than %zu bytes", sizeof args.model - 1);
            return;
        }
        strcpy(args.model, r->infer->model);
        args.version = r->infer->version;
        if (eng_registry_check_name(args.model) != 0) {
            srv_respond_fs_error(r, FS_EINVAL);
            return;
        }
        if (!(r->served = acquire_or_respond(r, &args)))
            return;
    }
    const eng_model_t *m = eng_served_model(r->served);
    uint64_t timeout = r->app->cfg.server.request_timeout_ns;
    r->ereq = (eng_request_t){.deadline_ns = timeout ? fs_clock_now_ns() + timeout : 0,
                              .done = on_infer_done, .user = r};
    if ((rc = bind_inputs(r)) != 0) {
        srv_respond_fs_error(r, rc);
        return;
    }
    atomic_store(&r->phase, SRV_PHASE_SUBMITTING);
    rc = eng_served_submit_run(r->served, &r->ereq);
    if (rc == FS_ESTATE) {
        /* This version is being replaced (or unloaded): once more on the
         * version serving now. */
        eng_served_release(r->served);
        r->served = NULL;
        eng_served_t *next = NULL;
        rc = eng_registry_acquire(r->app->registry, args.model, args.version, &next);
        if (rc == 0 && eng_served_model(next) != m) {
            r->served = next;
            /* The new version may differ: bind again. */
            if ((rc = bind_inputs(r)) == 0)
                rc = eng_served_submit_run(r->served, &r->ereq);
        } else if (rc == 0) {
            eng_served_release(next);
            rc = fs_err(FS_ESTATE, "model '%s' is being unloaded", args.model);
        }
    }
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return;
    }
    if (atomic_load_explicit(&r->done, memory_order_acquire)) {
        srv_route_finish(r); /* done already: no suspend, no resume */
        return;
    }
    r->waiting = true;
    MHD_suspend_connection(r->conn);
    int expect = SRV_PHASE_SUBMITTING;
    if (!atomic_compare_exchange_strong(&r->phase, &expect, SRV_PHASE_SUSPENDED))
        MHD_resume_connection(r->conn); /* done came after the check above */
}

void srv_route_finish(srv_req_t *r)
{
    if (r->admin != SRV_ADMIN_NONE) {
        finish_admin(r);
        return;
    }
    eng_request_t *e = &r->ereq;
    if (e->status != 0) {
        srv_respond_error(r, srv_status_of(e->status), "%s", e->error);
        return;
    }
    srv_buf_t out = {0};
    size_t json_len = 0;
    int rc = srv_infer_response_encode(eng_served_model(r->served), eng_served_name(r->served),
                                       eng_served_version(r->served), r->infer, e->outputs,
                                       e->n_outputs, &out, &json_len);
    eng_request_free_outputs(e);
    if (rc != 0) {
        srv_buf_free(&out);
        srv_respond_fs_error(r, rc);
        return;
    }
    if (json_len == out.len) {
        srv_respond(r, 200, "application/json", out.data, out.len, true);
        return;
    }
    char hdr[32];
    snprintf(hdr, sizeof hdr, "%zu", json_len);
    srv_respond_header(r, 200, "application/octet-stream", out.data, out.len, true,
                       "Inference-Header-Content-Length", hdr);
}

/* ---- the model repository -------------------------------------------------------------- */

static void handle_index(srv_req_t *r)
{
    bool ready_only = false;
    if (r->body.len > 0) {
        cJSON *body = cJSON_ParseWithLength(r->body.data, r->body.len);
        if (!body || !cJSON_IsObject(body)) {
            cJSON_Delete(body);
            srv_respond_error(r, 400, "the index request body must be a JSON object such as "
                              "{\"ready\": true}");
            return;
        }
        cJSON *ready = cJSON_GetObjectItemCaseSensitive(body, "ready");
        if (ready && !cJSON_IsBool(ready)) {
            cJSON_Delete(body);
            srv_respond_error(r, 400, "\"ready\" must be true or false");
            return;
        }
        ready_only = ready && cJSON_IsTrue(ready);
        cJSON_Delete(body);
    }
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    int rc = eng_registry_index(r->app->registry, &entries, &n);
    if (rc != 0) {
        srv_respond_fs_error(r, rc);
        return;
    }
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        const eng_model_entry_t *e = &entries[i];
        if (ready_only && e->state != ENG_MODEL_READY)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", e->name);
        if (e->version >= 0) {
            char v[32];
            version_string(e->version, v, sizeof v);
            cJSON_AddStringToObject(o, "version", v);
        }
        cJSON_AddStringToObject(o, "state", eng_model_state_name(e->state));
        cJSON_AddStringToObject(o, "reason", e->reason);
        cJSON_AddItemToArray(list, o);
    }
    free(entries);
    respond_json(r, 200, list);
}

/* Loads and unloads wait for the versions they replace to drain, and those
 * versions' requests are answered by the HTTP threads: run on an HTTP
 * thread, a load could wait for a connection that thread itself must
 * resume. So each runs on a thread of its own, with its connection
 * suspended like an inference's. */
static void *admin_main(void *arg)
{
    srv_req_t *r = arg;
    uint64_t t0 = fs_clock_now_ns();
    int rc = r->admin == SRV_ADMIN_LOAD ? eng_registry_load(r->app->registry, r->admin_model)
                                        : eng_registry_unload(r->app->registry, r->admin_model);
    r->ereq.status = rc;
    if (rc != 0)
        snprintf(r->ereq.error, sizeof r->ereq.error, "%s", fs_errmsg());
    r->ereq.compute_ns = fs_clock_now_ns() - t0;
    atomic_store_explicit(&r->done, true, memory_order_release);
    MHD_resume_connection(r->conn); /* r may be gone after this */
    return NULL;
}

static void handle_load(srv_req_t *r, const route_args_t *a, bool load)
{
    r->admin = load ? SRV_ADMIN_LOAD : SRV_ADMIN_UNLOAD;
    snprintf(r->admin_model, sizeof r->admin_model, "%s", a->model);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r->waiting = true;
    MHD_suspend_connection(r->conn);
    pthread_t t;
    if (pthread_create(&t, &attr, admin_main, r) != 0) {
        r->ereq.status = FS_ENOMEM;
        snprintf(r->ereq.error, sizeof r->ereq.error, "cannot start a thread for the %s",
                 load ? "load" : "unload");
        atomic_store_explicit(&r->done, true, memory_order_release);
        MHD_resume_connection(r->conn);
    }
    pthread_attr_destroy(&attr);
}

static void finish_admin(srv_req_t *r)
{
    int rc = r->ereq.status;
    bool load = r->admin == SRV_ADMIN_LOAD;
    if (rc != 0) {
        /* Bytes that did not come back after an unload are the server's
         * fault, not the caller's. */
        srv_respond_error(r, rc == FS_EBUSY ? 500 : srv_status_of(rc), "%s", r->ereq.error);
        return;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", r->admin_model);
    cJSON_AddStringToObject(doc, "state", load ? "READY" : "UNAVAILABLE");
    cJSON_AddNumberToObject(doc, "duration_ms", (double)r->ereq.compute_ns / 1e6);
    respond_json(r, 200, doc);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static cJSON *stat_json(const alloc_stat_t *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "current", (double)s->current);
    cJSON_AddNumberToObject(o, "peak", (double)s->peak);
    cJSON_AddNumberToObject(o, "total", (double)s->total);
    return o;
}

static cJSON *cache_json(const srv_cache_ref_t *ref, bool segments)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(ref->cache, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", ref->device);
    cJSON_AddStringToObject(o, "kind", ref->kind);
    cJSON_AddStringToObject(o, "name", alloc_cache_name(ref->cache));
    cJSON_AddItemToObject(o, "allocated_bytes", stat_json(&st.allocated));
    cJSON_AddItemToObject(o, "reserved_bytes", stat_json(&st.reserved));
    cJSON_AddItemToObject(o, "active_bytes", stat_json(&st.active));
    cJSON_AddItemToObject(o, "requested_bytes", stat_json(&st.requested));
    cJSON_AddItemToObject(o, "segments", stat_json(&st.segments));
    cJSON_AddItemToObject(o, "blocks", stat_json(&st.blocks));
    cJSON_AddNumberToObject(o, "device_allocs", (double)st.n_device_allocs);
    cJSON_AddNumberToObject(o, "device_frees", (double)st.n_device_frees);
    cJSON_AddNumberToObject(o, "cache_hits", (double)st.n_cache_hits);
    cJSON_AddNumberToObject(o, "cache_misses", (double)st.n_cache_misses);
    cJSON_AddNumberToObject(o, "retries", (double)st.n_retries);
    cJSON_AddNumberToObject(o, "ooms", (double)st.n_ooms);
    cJSON_AddNumberToObject(o, "largest_free_bytes", (double)st.largest_free_bytes);
    cJSON_AddNumberToObject(o, "free_cached_bytes", (double)st.free_cached_bytes);
    if (st.limit_bytes != (uint64_t)SIZE_MAX)
        cJSON_AddNumberToObject(o, "limit_bytes", (double)st.limit_bytes);
    cJSON *rel = cJSON_AddObjectToObject(o, "released_bytes");
    for (int i = 0; i < ALLOC_RELEASE_N; i++)
        cJSON_AddNumberToObject(rel, alloc_release_reason_name((alloc_release_reason_t)i),
                                (double)st.released_bytes[i]);
    cJSON *pols = cJSON_AddArrayToObject(o, "policies");
    for (size_t i = 0; i < alloc_cache_policy_count(ref->cache); i++) {
        alloc_policy_t *p = alloc_cache_policy_get(ref->cache, i);
        if (p)
            cJSON_AddItemToArray(pols, cJSON_CreateString(alloc_policy_kind_name(alloc_policy_kind(p))));
    }
    if (!segments)
        return o;
    alloc_snapshot_t *snap = NULL;
    if (alloc_cache_snapshot(ref->cache, &snap) != 0)
        return o;
    cJSON *segs = cJSON_AddArrayToObject(o, "segment_list");
    static const char *states[] = {"free", "allocated", "pending"};
    for (size_t i = 0; i < snap->n_segments; i++) {
        const alloc_segment_info_t *sg = &snap->segments[i];
        cJSON *so = cJSON_CreateObject();
        char addr[32];
        snprintf(addr, sizeof addr, "0x%" PRIxPTR, sg->address);
        cJSON_AddStringToObject(so, "address", addr);
        cJSON_AddNumberToObject(so, "size", (double)sg->size);
        cJSON_AddNumberToObject(so, "allocated", (double)sg->allocated_bytes);
        cJSON_AddStringToObject(so, "pool", sg->pool == ALLOC_POOL_SMALL ? "small" : "large");
        cJSON *blocks = cJSON_AddArrayToObject(so, "blocks");
        for (size_t b = 0; b < sg->n_blocks; b++) {
            const alloc_block_info_t *bi = &sg->blocks[b];
            cJSON *bo = cJSON_CreateObject();
            cJSON_AddNumberToObject(bo, "offset", (double)bi->offset);
            cJSON_AddNumberToObject(bo, "size", (double)bi->size);
            cJSON_AddStringToObject(bo, "state", bi->state < 3 ? states[bi->state] : "?");
            if (bi->state == ALLOC_BLOCK_ALLOCATED) {
                cJSON_AddNumberToObject(bo, "requested", (double)bi->requested);
                alloc_owner_stats_t os;
                if (alloc_cache_owner_stats(ref->cache, bi->owner, &os) == 0)
                    cJSON_AddStringToObject(bo, "owner", os.name);
            }
            cJSON_AddItemToArray(blocks, bo);
        }
        cJSON_AddItemToArray(segs, so);
    }
    alloc_snapshot_free(snap);
    return o;
}

static void handle_memory(srv_req_t *r)
{
    const char *seg = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "segments");
    bool segments = !seg || strcmp(seg, "0") != 0;
    srv_cache_ref_t refs[6];
    size_t n = srv_app_caches(r->app, refs);
    cJSON *doc = cJSON_CreateObject();
    cJSON *caches = cJSON_AddArrayToObject(doc, "caches");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(caches, cache_json(&refs[i], segments));
    eng_model_entry_t *entries = NULL;
    size_t ne = 0;
    cJSON *models = cJSON_AddArrayToObject(doc, "models");
    if (eng_registry_index(r->app->registry, &entries, &ne) == 0) {
        for (size_t i = 0; i < ne; i++) {
            if (entries[i].state != ENG_MODEL_READY)
                continue;
            cJSON *o = cJSON_CreateObject();
            char v[32];
            version_string(entries[i].version, v, sizeof v);
            cJSON_AddStringToObject(o, "name", entries[i].name);
            cJSON_AddStringToObject(o, "version", v);
            cJSON_AddStringToObject(o, "device", entries[i].device);
            cJSON_AddNumberToObject(o, "weights_bytes", (double)entries[i].weights_bytes);
            cJSON_AddNumberToObject(o, "activations_bytes", (double)entries[i].activations_bytes);
            cJSON_AddItemToArray(models, o);
        }
        free(entries);
    }
    respond_json(r, 200, doc);
}

static void handle_memory_op(srv_req_t *r, bool empty)
{
    srv_cache_ref_t refs[6];
    size_t n = srv_app_caches(r->app, refs);
    size_t released = 0;
    for (size_t i = 0; i < n; i++) {
        if (empty)
            released += alloc_cache_empty(refs[i].cache, ALLOC_RELEASE_EMPTY);
        else
            alloc_cache_reset_peak(refs[i].cache);
    }
    cJSON *doc = cJSON_CreateObject();
    if (empty) {
        cJSON_AddNumberToObject(doc, "released_bytes", (double)released);
        FS_LOG_I("http", "empty_cache released %zu bytes", released);
    }
    respond_json(r, 200, doc);
}

static void handle_metrics(srv_req_t *r)
{
    srv_buf_t b = {0};
    if (srv_metrics_render(r->app, &b) != 0) {
        srv_buf_free(&b);
        srv_respond_error(r, 507, "out of host memory writing the metrics");
        return;
    }
    srv_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, true);
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

void srv_route(srv_req_t *r)
{
    char path[1024];
    char *segs[MAX_SEGS];
    int n = split_path(r->url, path, sizeof path, segs);
    const route_t *hit = NULL;
    route_args_t args = {.version = -1};
    char allow[64] = "";
    for (size_t i = 0; n >= 0 && i < N_ROUTES; i++) {
        route_args_t a;
        if (!route_match(&routes[i], segs, n, &a))
            continue;
        if (strcmp(routes[i].method, r->method) == 0) {
            hit = &routes[i];
            args = a;
            break;
        }
        if (!strstr(allow, routes[i].method))
            snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s",
                     allow[0] ? ", " : "", routes[i].method);
    }
    if (!hit) {
        if (allow[0]) {
            char msg[128];
            snprintf(msg, sizeof msg, "%.16s is not allowed here; use %s", r->method, allow);
            srv_buf_t b = {0};
            srv_buf_puts(&b, "{\"error\":");
            srv_buf_json_string(&b, msg);
            srv_buf_puts(&b, "}");
            srv_respond_header(r, 405, "application/json", b.data, b.len, true,
                               MHD_HTTP_HEADER_ALLOW, allow);
            return;
        }
        srv_respond_error(r, 404, "no route %s %s", r->method, r->url);
        return;
    }
    if (hit->admin &&
        !token_ok(r->app, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_AUTHORIZATION))) {
        srv_respond_error(r, 401, "%s needs \"Authorization: Bearer <server.admin_token>\"",
                          r->url);
        return;
    }
    if (args.bad_version) {
        srv_respond_error(r, 400, "version '%s' is not a non-negative number", args.bad_version);
        return;
    }
    if (args.model[0] && eng_registry_check_name(args.model) != 0) {
        srv_respond_fs_error(r, FS_EINVAL);
        return;
    }
    switch (hit->id) {
    case R_LIVE: {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "live", true);
        respond_json(r, 200, doc);
        break;
    }
    case R_READY:
        if (atomic_load(&r->app->ready)) {
            cJSON *doc = cJSON_CreateObject();
            cJSON_AddBoolToObject(doc, "ready", true);
            respond_json(r, 200, doc);
        } else {
            srv_respond_error(r, 503, atomic_load(&r->app->draining) ? "the server is shutting down"
                                                                     : "the server is starting");
        }
        break;
    case R_SERVER: handle_server(r); break;
    case R_MODELS_STATS: handle_stats(r, NULL); break;
    case R_MODEL: handle_model(r, &args); break;
    case R_MODEL_READY: handle_model_ready(r, &args); break;
    case R_MODEL_CONFIG: handle_model_config(r, &args); break;
    case R_MODEL_STATS: handle_stats(r, &args); break;
    case R_MODEL_INFER:
    case R_INFER: handle_infer(r, &args); break;
    case R_REPO_INDEX: handle_index(r); break;
    case R_REPO_LOAD: handle_load(r, &args, true); break;
    case R_REPO_UNLOAD: handle_load(r, &args, false); break;
    case R_MEMORY: handle_memory(r); break;
    case R_MEMORY_EMPTY: handle_memory_op(r, true); break;
    case R_MEMORY_RESET_PEAK: handle_memory_op(r, false); break;
    case R_METRICS: handle_metrics(r); break;
    }
}
