/* admin.c -- the admin endpoints: Triton's model repository extension
 * (index, load, unload) and /v1/memory (every cache's statistics and
 * segments, empty_cache, reset_peak). routes.c has already checked the
 * admin token. A load's or unload's body may hold Triton's parameters:
 * a load's "config" (a ModelConfig in JSON) is the model's configuration
 * from then on (model_config.c's overrides); those flatserve cannot honour
 * are refused by name (admin_body_check).
 *
 * Loads and unloads wait for the versions they replace to drain, and those
 * versions' requests are answered by the HTTP threads: run on an HTTP
 * thread, a load could wait for a connection that thread itself must
 * resume. So each runs on a thread of its own, its request riding the
 * same wait as an inference's (infer.c): SUBMITTING while the thread
 * starts, then answered at once if the load was that quick, else
 * suspended until the thread completes it. The result lives in the
 * request's srv_admin_job_t, written by that thread only before it
 * completes the request. */
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
#include "server/app_impl.h"

/* ---- the model repository ---------------------------------------------------------- */

void srv_admin_index(srv_req_t *r, const srv_route_args_t *a)
{
    bool ready_only = false;
    if (srv_req_body_len(r) > 0) {
        cJSON *body = cJSON_ParseWithLength(srv_req_body(r), srv_req_body_len(r));
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
    eng_model_entry_t *entries;
    size_t n;
    if (!srv_registry_index(r, &entries, &n))
        return;
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        const eng_model_entry_t *e = &entries[i];
        if (ready_only && e->state != ENG_MODEL_READY)
            continue;
        /* Triton lists each version that serves: several under a
         * config.pbtxt's version_policy, newest first. */
        int64_t versions[ENG_VERSIONS_MAX];
        size_t n_versions = 0;
        if (e->state != ENG_MODEL_READY ||
            eng_registry_versions(r->app->registry, e->name, versions, &n_versions) != 0 ||
            n_versions == 0) {
            versions[0] = e->version;
            n_versions = 1;
        }
        for (size_t k = 0; k < n_versions; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", e->name);
            if (versions[k] >= 0)
                srv_json_add_version(o, "version", versions[k]);
            cJSON_AddStringToObject(o, "state", eng_model_state_name(e->state));
            cJSON_AddStringToObject(o, "reason", e->reason);
            cJSON_AddItemToArray(list, o);
        }
    }
    free(entries);
    srv_respond_json(r, 200, list);
}

/* API loads one at a time: a load's override (its "config", or none) is
 * the one its configuration is read from, never another load's. */
static pthread_mutex_t admin_load_lock = PTHREAD_MUTEX_INITIALIZER;

/* A load with its "config" (or without: the repository's files) as the
 * model's configuration from now on; if the load fails, the configuration
 * it had before is put back, as the versions serving keep serving. Takes
 * job->config. 0 or the load's error. */
static int admin_load(srv_app_t *app, srv_admin_job_t *job)
{
    pthread_mutex_lock(&admin_load_lock);
    char *prev = NULL, *json = job->config;
    job->config = NULL;
    int rc = srv_model_override_swap(app, job->model, json, &prev);
    if (rc == 0) {
        rc = eng_registry_load(app->registry, job->model);
        if (rc != 0) {
            char msg[FS_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", fs_errmsg());
            char *failed = NULL;
            /* Putting back needs memory only where the load cleared one. */
            if (srv_model_override_swap(app, job->model, prev, &failed) != 0)
                FS_LOG_E("admin", "model '%s': %s; its configuration is now its directory's",
                         job->model, fs_errmsg());
            prev = failed;
            fs_err(rc, "%s", msg);
        }
        free(prev);
    }
    pthread_mutex_unlock(&admin_load_lock);
    return rc;
}

/* The load's or unload's own thread: runs it, writes the result, and
 * completes the request (which may free it). A model loaded becomes one
 * that should be loaded, one unloaded stops being one (model_control.c's
 * wanted set, which readiness.c checks). */
static void *admin_main(void *arg)
{
    srv_req_t *r = arg;
    srv_admin_job_t *job = r->admin;
    srv_app_t *app = r->app;
    uint64_t t0 = fs_clock_now_ns();
    /* Forgotten before the unload starts, so readiness does not drop
     * while the model drains. */
    if (!job->load)
        srv_control_want(app, job->model, false);
    int rc = job->load ? admin_load(app, job) : eng_registry_unload(app->registry, job->model);
    job->status = rc;
    /* Triton's words ("failed to load 'm'"), which its clients look for,
     * before the registry's message less the model it names again. */
    if (rc != 0) {
        char named[ENG_MODEL_NAME_MAX + 16];
        snprintf(named, sizeof named, "model '%s': ", job->model);
        const char *why = fs_errmsg();
        if (strncmp(why, named, strlen(named)) == 0)
            why += strlen(named);
        snprintf(job->error, sizeof job->error, "failed to %s '%s': %s",
                 job->load ? "load" : "unload", job->model, why);
    }
    /* A model loaded on request is wanted from now on (model_control.c);
     * an unload left the set before it started. */
    if (job->load && rc == 0)
        srv_control_want(app, job->model, true);
    job->duration_ns = fs_clock_now_ns() - t0;
    srv_req_complete(r); /* r may be gone after this */
    return NULL;
}

static void admin_finish(srv_req_t *r)
{
    const srv_admin_job_t *job = r->admin;
    if (job->status != 0) {
        /* Bytes that did not come back after an unload are the server's
         * fault, not the caller's. */
        srv_respond_error(r, job->status == FS_EBUSY ? 500 : srv_status_of(job->status), "%s",
                          job->error);
        return;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "name", job->model);
    cJSON_AddStringToObject(doc, "state", job->load ? "READY" : "UNAVAILABLE");
    cJSON_AddNumberToObject(doc, "duration_ms", (double)job->duration_ns / 1e6);
    srv_respond_json(r, 200, doc);
}

/* The body of a load or unload: none, or {"parameters": {...}}. Triton's
 * load takes "config" (a string: a ModelConfig in JSON), kept in *config
 * (caller frees) for the load to read; and "file:<path>" (model files sent
 * with the request), refused by name rather than accepted and ignored:
 * flatserve serves what the repository holds. Unload takes
 * "unload_dependents" (a boolean: flatserve has no ensembles, so a model
 * has no dependents and either value is honoured). 0, or -1 having
 * answered 400 (or 507). */
static int admin_body_check(srv_req_t *r, bool load, char **config)
{
    if (srv_req_body_len(r) == 0)
        return 0;
    const char *what = load ? "load" : "unload";
    cJSON *body = cJSON_ParseWithLength(srv_req_body(r), srv_req_body_len(r));
    const cJSON *params = cJSON_IsObject(body) ? body->child : NULL;
    int rc = 0;
    if (!cJSON_IsObject(body)) {
        srv_respond_error(r, 400, "the %s request body must be a JSON object such as "
                          "{\"parameters\": {}}", what);
        rc = -1;
    } else if (params && (strcmp(params->string, "parameters") != 0 || params->next)) {
        const cJSON *bad = strcmp(params->string, "parameters") != 0 ? params : params->next;
        srv_respond_error(r, 400, "the %s request has an unknown key \"%.64s\" (only "
                          "\"parameters\" is known)", what, bad->string);
        rc = -1;
    } else if (params && !cJSON_IsObject(params)) {
        srv_respond_error(r, 400, "\"parameters\" of the %s request must be an object", what);
        rc = -1;
    }
    for (const cJSON *p = rc == 0 && params ? params->child : NULL; p && rc == 0; p = p->next) {
        rc = -1;
        if (load && strcmp(p->string, "config") == 0 && !cJSON_IsString(p))
            srv_respond_error(r, 400, "load parameter \"config\" must be a string holding a "
                              "ModelConfig in JSON, such as \"{\\\"max_batch_size\\\": 8}\"");
        else if (load && strcmp(p->string, "config") == 0 && *config)
            srv_respond_error(r, 400, "load parameter \"config\" is given twice");
        else if (load && strcmp(p->string, "config") == 0 && !(*config = strdup(p->valuestring)))
            srv_respond_error(r, 507, "out of host memory keeping load parameter \"config\"");
        else if (load && strcmp(p->string, "config") == 0)
            rc = 0;
        else if (load && strncmp(p->string, "file:", 5) == 0)
            srv_respond_error(r, 400, "load parameter \"%.64s\" (model files sent with the "
                              "request) is not supported: flatserve loads the files in the "
                              "repository", p->string);
        else if (!load && strcmp(p->string, "unload_dependents") == 0 && !cJSON_IsBool(p))
            srv_respond_error(r, 400, "unload parameter \"unload_dependents\" must be true or "
                              "false");
        else if (!load && strcmp(p->string, "unload_dependents") == 0)
            rc = 0;
        else
            srv_respond_error(r, 400, "unknown %s parameter \"%.64s\" (known: %s)", what,
                              p->string, load ? "\"config\"; \"file:\" is refused"
                                              : "\"unload_dependents\"");
    }
    cJSON_Delete(body);
    if (rc != 0) {
        free(*config);
        *config = NULL;
    }
    return rc;
}

static void admin_start(srv_req_t *r, const srv_route_args_t *a, bool load)
{
    const char *refusal = srv_control_api_refusal(r->app);
    if (refusal) {
        srv_respond_error(r, 400, "cannot %s model '%s': %s", load ? "load" : "unload", a->model,
                          refusal);
        return;
    }
    char *config = NULL;
    if (admin_body_check(r, load, &config) != 0)
        return;
    srv_admin_job_t *job = r->admin = calloc(1, sizeof *r->admin);
    if (!job) {
        free(config);
        srv_respond_error(r, 507, "out of host memory starting the %s", load ? "load" : "unload");
        return;
    }
    job->load = load;
    job->config = config;
    snprintf(job->model, sizeof job->model, "%s", a->model);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    srv_req_submitting(r, admin_finish);
    pthread_t t;
    int err = pthread_create(&t, &attr, admin_main, r);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        free(job->config);
        job->config = NULL;
        srv_req_refused(r);
        srv_respond_error(r, 507, "cannot start a thread for the %s", load ? "load" : "unload");
        return;
    }
    srv_req_park(r);
}

void srv_admin_load(srv_req_t *r, const srv_route_args_t *a)
{
    admin_start(r, a, true);
}

void srv_admin_unload(srv_req_t *r, const srv_route_args_t *a)
{
    admin_start(r, a, false);
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

void srv_admin_memory(srv_req_t *r, const srv_route_args_t *a)
{
    const char *seg = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "segments");
    bool segments = !seg || strcmp(seg, "0") != 0;
    srv_cache_ref_t refs[SRV_CACHE_REFS_MAX];
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
            cJSON_AddStringToObject(o, "name", entries[i].name);
            srv_json_add_version(o, "version", entries[i].version);
            cJSON_AddStringToObject(o, "device", entries[i].device);
            cJSON_AddNumberToObject(o, "weights_bytes", (double)entries[i].weights_bytes);
            cJSON_AddNumberToObject(o, "activations_bytes", (double)entries[i].activations_bytes);
            cJSON_AddItemToArray(models, o);
        }
        free(entries);
    }
    srv_respond_json(r, 200, doc);
}

void srv_admin_memory_empty(srv_req_t *r, const srv_route_args_t *a)
{
    srv_cache_ref_t refs[SRV_CACHE_REFS_MAX];
    size_t n = srv_app_caches(r->app, refs);
    size_t released = 0;
    for (size_t i = 0; i < n; i++)
        released += alloc_cache_empty(refs[i].cache, ALLOC_RELEASE_EMPTY);
    FS_LOG_I("http", "empty_cache released %zu bytes", released);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "released_bytes", (double)released);
    srv_respond_json(r, 200, doc);
}

void srv_admin_memory_reset_peak(srv_req_t *r, const srv_route_args_t *a)
{
    srv_cache_ref_t refs[SRV_CACHE_REFS_MAX];
    size_t n = srv_app_caches(r->app, refs);
    for (size_t i = 0; i < n; i++)
        alloc_cache_reset_peak(refs[i].cache);
    srv_respond_json(r, 200, cJSON_CreateObject());
}
