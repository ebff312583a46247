/* routes.c -- the route table and the dispatch: every endpoint is one row
 * (method, path pattern, whether it is an admin route, its handler), and a
 * request reaches its handler through that pointer and nothing else.
 *
 * The endpoints: KServe v2 health, server and model metadata, model config
 * and stats (model_info.c), infer and flatserve's POST /infer (infer.c),
 * Triton's model repository extension and /v1/memory (admin.c), /metrics
 * (metrics.c), Triton's system and CUDA shared memory extensions
 * (shm_http.c; their register and unregister are admin routes), Triton's
 * trace extension (trace_http.c; its POST an admin route).
 *
 * A path is split into segments and matched against the table in order; a
 * path that matches with another method is 405 with Allow, no match is
 * 404, but 400 naming the extension under the paths of Triton's logging
 * extension, which flatserve does not claim. HEAD is allowed wherever GET is. Admin routes need
 * "Authorization: Bearer <token>" (the scheme in any case) when
 * server.admin_token is set (401 otherwise; the comparison takes the same
 * time wherever the tokens differ). A {v} that is not a non-negative number
 * is 400, a {m} that is not a valid model name (too long included) is 400,
 * before any handler runs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "server/app_impl.h"

typedef struct route {
    const char *method;
    const char *pattern;          /* segments; "{m}" a model name, "{v}" a version */
    bool admin;
    srv_handler_fn *handle;
} route_t;

static const route_t routes[] = {
    {"GET", "v2/health/live", false, srv_info_live},
    {"GET", "v2/health/ready", false, srv_info_ready},
    {"GET", "v2", false, srv_info_server},
    {"GET", "v2/models/stats", false, srv_info_stats},
    {"GET", "v2/models/{m}", false, srv_info_model},
    {"GET", "v2/models/{m}/versions/{v}", false, srv_info_model},
    {"GET", "v2/models/{m}/ready", false, srv_info_model_ready},
    {"GET", "v2/models/{m}/versions/{v}/ready", false, srv_info_model_ready},
    {"GET", "v2/models/{m}/config", false, srv_info_model_config},
    {"GET", "v2/models/{m}/versions/{v}/config", false, srv_info_model_config},
    {"GET", "v2/models/{m}/stats", false, srv_info_stats},
    {"GET", "v2/models/{m}/versions/{v}/stats", false, srv_info_stats},
    {"POST", "v2/models/{m}/infer", false, srv_infer_handle},
    {"POST", "v2/models/{m}/versions/{v}/infer", false, srv_infer_handle},
    {"POST", "infer", false, srv_infer_handle},
    {"POST", "v2/repository/index", true, srv_admin_index},
    {"POST", "v2/repository/models/{m}/load", true, srv_admin_load},
    {"POST", "v2/repository/models/{m}/unload", true, srv_admin_unload},
    {"GET", "v1/memory", true, srv_admin_memory},
    {"POST", "v1/memory/empty_cache", true, srv_admin_memory_empty},
    {"POST", "v1/memory/reset_peak", true, srv_admin_memory_reset_peak},
    {"GET", "metrics", false, srv_metrics_handle},
    {"GET", "v2/trace/setting", false, srv_trace_get_handle},
    {"POST", "v2/trace/setting", true, srv_trace_post_handle},
    {"GET", "v2/models/{m}/trace/setting", false, srv_trace_get_handle},
    {"POST", "v2/models/{m}/trace/setting", true, srv_trace_post_handle},
    {"GET", "v2/models/{m}/versions/{v}/trace/setting", false, srv_trace_get_handle},
    {"POST", "v2/models/{m}/versions/{v}/trace/setting", true, srv_trace_post_handle},
    {"GET", "v2/systemsharedmemory/status", false, srv_shm_status_handle},
    {"GET", "v2/systemsharedmemory/region/{r}/status", false, srv_shm_status_handle},
    {"POST", "v2/systemsharedmemory/region/{r}/register", true, srv_shm_register_handle},
    {"POST", "v2/systemsharedmemory/region/{r}/unregister", true, srv_shm_unregister_handle},
    {"POST", "v2/systemsharedmemory/unregister", true, srv_shm_unregister_handle},
    {"GET", "v2/cudasharedmemory/status", false, srv_shm_cuda_status_handle},
    {"GET", "v2/cudasharedmemory/region/{r}/status", false, srv_shm_cuda_status_handle},
    {"POST", "v2/cudasharedmemory/region/{r}/register", true, srv_shm_cuda_register_handle},
    {"POST", "v2/cudasharedmemory/region/{r}/unregister", true, srv_shm_cuda_unregister_handle},
    {"POST", "v2/cudasharedmemory/unregister", true, srv_shm_cuda_unregister_handle},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])
#define MAX_SEGS 8

/* The patterns split into segments once, so that a row whose segment
 * count differs from the path's is passed over at once, and the others
 * are compared by length first. Immutable after route_table_init. */
typedef struct route_segs {
    int n;
    const char *s[MAX_SEGS];      /* into the pattern; not NUL-terminated */
    size_t len[MAX_SEGS];
} route_segs_t;

static route_segs_t route_table[N_ROUTES];
static pthread_once_t route_table_once = PTHREAD_ONCE_INIT;

static void route_table_init(void)
{
    for (size_t i = 0; i < N_ROUTES; i++) {
        route_segs_t *rs = &route_table[i];
        for (const char *p = routes[i].pattern; *p && rs->n < MAX_SEGS;) {
            const char *slash = strchrnul(p, '/');
            rs->s[rs->n] = p;
            rs->len[rs->n++] = (size_t)(slash - p);
            p = *slash ? slash + 1 : slash;
        }
    }
}

/* A path's segments: each NUL-terminated in place, with its length. */
typedef struct path_segs {
    int n;
    char *s[MAX_SEGS];
    size_t len[MAX_SEGS];
} path_segs_t;

/* Splits a path (a copy of the URL, written in place) into at most
 * MAX_SEGS segments; n is -1 if more, or for an empty segment ("//", a
 * trailing "/"), but for "/v2/": the protocol writes the server's
 * metadata path both as "v2" and "/v2/", so that one trailing slash is
 * taken. */
static void split_path(char *buf, path_segs_t *ps)
{
    while (*buf == '/')
        buf++;
    ps->n = 0;
    if (!*buf)
        return;
    for (char *p = buf;;) {
        if (ps->n == MAX_SEGS) {
            ps->n = -1;
            return;
        }
        char *slash = strchrnul(p, '/');
        ps->s[ps->n] = p;
        ps->len[ps->n++] = (size_t)(slash - p);
        if (!*slash)
            return;
        *slash = '\0';
        p = slash + 1;
        if (!*p) {
            if (ps->n != 1 || strcmp(ps->s[0], "v2") != 0)
                ps->n = -1;
            return;
        }
    }
}

/* Whether route i's pattern matches the segments; fills `args`, also when
 * it does not match (then with nothing of use). "stats" is a model name
 * only where no earlier row takes it. */
static bool route_match(size_t i, const path_segs_t *ps, srv_route_args_t *args)
{
    const route_segs_t *rt = &route_table[i];
    /* Field by field: an initialiser would clear all of `model` for every
     * row tried, most of routing's cost. */
    srv_route_args_t *a = args;
    a->model[0] = '\0';
    a->version = -1;
    a->bad_version = a->bad_model = a->region = NULL;
    if (rt->n != ps->n)
        return false;
    for (int k = 0; k < ps->n; k++) {
        const char *p = rt->s[k], *seg = ps->s[k];
        size_t len = rt->len[k];
        if (len == 3 && memcmp(p, "{m}", 3) == 0) {
            if (ps->len[k] >= sizeof a->model)
                a->bad_model = seg; /* dispatch says why */
            else
                memcpy(a->model, seg, ps->len[k] + 1);
        } else if (len == 3 && memcmp(p, "{r}", 3) == 0) {
            a->region = seg;
        } else if (len == 3 && memcmp(p, "{v}", 3) == 0) {
            /* Digits only: strtoll alone would take "+1", " 1" and "-0". */
            char *end = NULL;
            errno = 0;
            long long v = seg[0] >= '0' && seg[0] <= '9' ? strtoll(seg, &end, 10) : -1;
            if (v < 0 || *end || errno == ERANGE)
                a->bad_version = seg;
            a->version = v;
        } else if (ps->len[k] != len || memcmp(p, seg, len) != 0) {
            return false;
        }
    }
    return true;
}

/* Triton's extensions that flatserve does not claim (its server metadata
 * lists none of them): the one a path belongs to, with what to do
 * instead, or NULL. Their paths answer 400 naming it, whatever the
 * method, rather than a bare 404, so that a Triton client learns why. */
static const char *unclaimed_extension(const path_segs_t *ps, const char **instead)
{
    static const struct {
        const char *seg, *name, *instead;
    } ext[] = {
        {"logging", "logging", "set log.level in the config file or with --log-level"},
    };
    if (ps->n < 2 || strcmp(ps->s[0], "v2") != 0)
        return NULL;
    /* v2/<ext>/... */
    const char *seg = ps->s[1];
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (strcmp(seg, ext[i].seg) == 0) {
            *instead = ext[i].instead;
            return ext[i].name;
        }
    return NULL;
}

/* Constant-time over the token's length. The scheme is matched in any
 * case, as HTTP's auth schemes are (RFC 9110 11.1); the token exactly. */
static bool token_ok(const srv_app_t *app, const char *auth)
{
    const char *want = app->cfg.server.admin_token;
    if (!want[0])
        return true;
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
        return false;
    const char *got = auth + 7;
    size_t wl = strlen(want), gl = strlen(got);
    unsigned diff = (unsigned)(wl ^ gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

void srv_route(srv_req_t *r)
{
    /* A copy of any length: a long path is routed like a short one, so a
     * name too long for a model is refused as such, not as no route. */
    char *path = strdup(r->url);
    if (!path) {
        srv_respond_error(r, 507, "out of host memory routing a %zu-byte path", strlen(r->url));
        return;
    }
    path_segs_t segs;
    split_path(path, &segs);
    pthread_once(&route_table_once, route_table_init);
    const route_t *hit = NULL;
    srv_route_args_t args = {.version = -1};
    char allow[64] = "";
    for (size_t i = 0; segs.n >= 0 && i < N_ROUTES; i++) {
        if (!route_match(i, &segs, &args))
            continue;
        /* HEAD is GET without the body, which libmicrohttpd leaves out. */
        bool get = strcmp(routes[i].method, "GET") == 0;
        if (strcmp(routes[i].method, r->method) == 0 || (get && strcmp(r->method, "HEAD") == 0)) {
            hit = &routes[i];
            break;
        }
        if (!strstr(allow, routes[i].method))
            snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s%s",
                     allow[0] ? ", " : "", routes[i].method, get ? ", HEAD" : "");
    }
    const char *model = args.bad_model ? args.bad_model : args.model;
    const char *ext = NULL, *instead = NULL;
    int rc;
    if (!hit && !allow[0] && segs.n >= 0 && (ext = unclaimed_extension(&segs, &instead)))
        srv_respond_error(r, 400, "%s %s: Triton's %s extension is not supported by flatserve; "
                          "%s", r->method, r->url, ext, instead);
    else if (!hit && allow[0])
        srv_respond_error_header(r, 405, MHD_HTTP_HEADER_ALLOW, allow,
                                 "%.16s is not allowed here; use %s", r->method, allow);
    else if (!hit)
        srv_respond_error(r, 404, "no route %s %s", r->method, r->url);
    else if (hit->admin &&
             !token_ok(r->app, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_AUTHORIZATION)))
        srv_respond_error(r, 401, "%s needs \"Authorization: Bearer <server.admin_token>\"",
                          r->url);
    else if (args.bad_version)
        srv_respond_error(r, 400, "version '%.40s%s' is not a non-negative number",
                          args.bad_version, strlen(args.bad_version) > 40 ? "..." : "");
    else if (model[0] && (rc = eng_registry_check_name(model)) != 0)
        srv_respond_fs_error(r, rc);
    else
        hit->handle(r, &args);
    free(path);
}
