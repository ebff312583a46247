/* trace_http.c -- Triton's trace extension over HTTP: GET and POST
 * v2[/models/{m}[/versions/{v}]]/trace/setting (trace.c keeps the
 * settings). A model's path needs the model known to the repository; a
 * version in the path names the model's settings (Triton's are per
 * model, not per version). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/app_impl.h"
#include "server/trace.h"

/* Whether the route's model (if any) is in the repository; answers 404
 * when it is not. */
static bool model_known(srv_req_t *r, const srv_route_args_t *a)
{
    if (!a->model[0])
        return true;
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    if (!srv_registry_index(r, &entries, &n))
        return false;
    bool found = false;
    for (size_t i = 0; i < n && !found; i++)
        found = strcmp(entries[i].name, a->model) == 0;
    free(entries);
    if (!found)
        srv_respond_error(r, 404, "unknown model '%s'", a->model);
    return found;
}

static void respond_settings(srv_req_t *r, const srv_route_args_t *a)
{
    cJSON *doc = srv_trace_settings_json(r->app->trace, a->model);
    srv_respond_json(r, 200, doc); /* NULL: 507 */
}

void srv_trace_get_handle(srv_req_t *r, const srv_route_args_t *a)
{
    if (model_known(r, a))
        respond_settings(r, a);
}

void srv_trace_post_handle(srv_req_t *r, const srv_route_args_t *a)
{
    if (!model_known(r, a))
        return;
    size_t len = srv_req_body_len(r);
    cJSON *body = len ? cJSON_ParseWithLength(srv_req_body(r), len) : cJSON_CreateObject();
    if (!body) {
        srv_respond_error(r, 400, "trace settings: the body is not JSON");
        return;
    }
    int rc = srv_trace_settings_update(r->app->trace, a->model, body);
    cJSON_Delete(body);
    if (rc != 0)
        srv_respond_fs_error(r, rc);
    else
        respond_settings(r, a);
}
