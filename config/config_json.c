/* config_json.c -- the effective configuration written back as a
 * flatserve.json document (--check-config), and what differs between two
 * configurations (SIGHUP).
 *
 * The document uses the file's own keys and value forms, sizes and
 * durations as exact unit strings (cfg_size_text), so cfg_parse reads it
 * back to the same cfg_t; the one exception is server.admin_token, which is
 * written as "***" when set so the effective config can be shown or logged
 * without the secret. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/config_impl.h"

/* Builds one object; any failed addition sets `oom` (cJSON's additions
 * return NULL and add nothing when out of memory), checked once at the end. */
typedef struct json_out {
    bool oom;
} json_out_t;

static void out_check(json_out_t *o, const void *added)
{
    if (!added)
        o->oom = true;
}

static cJSON *out_object(json_out_t *o, cJSON *parent, const char *name)
{
    cJSON *obj = cJSON_AddObjectToObject(parent, name);
    out_check(o, obj);
    return obj;
}

static void out_str(json_out_t *o, cJSON *obj, const char *name, const char *value)
{
    out_check(o, cJSON_AddStringToObject(obj, name, value));
}

/* Numbers are written as raw text: cJSON prints doubles with 15 digits and
 * accepts a near miss, which would not read back exactly. */
static void out_uint(json_out_t *o, cJSON *obj, const char *name, uint64_t value)
{
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long)value);
    out_check(o, cJSON_AddRawToObject(obj, name, text));
}

static void out_double(json_out_t *o, cJSON *obj, const char *name, double value)
{
    char text[32];
    out_check(o, cJSON_AddRawToObject(obj, name, cfg_double_text(value, text, sizeof text)));
}

static void out_bool(json_out_t *o, cJSON *obj, const char *name, bool value)
{
    out_check(o, cJSON_AddBoolToObject(obj, name, value));
}

static void out_size(json_out_t *o, cJSON *obj, const char *name, uint64_t bytes)
{
    char text[32];
    out_str(o, obj, name, cfg_size_text(bytes, text, sizeof text));
}

static void out_duration(json_out_t *o, cJSON *obj, const char *name, uint64_t ns)
{
    char text[32];
    out_str(o, obj, name, cfg_duration_text(ns, text, sizeof text));
}

/* A policy as its kind name when it has no parameters, else an object with
 * every parameter of its kind. */
static void out_policy(json_out_t *o, cJSON *array, const cfg_policy_t *p)
{
    const alloc_policy_params_t *pp = &p->params;
    const char *kind = alloc_policy_kind_name(p->kind);
    if (p->kind == ALLOC_POLICY_CACHE) {
        cJSON *s = cJSON_CreateString(kind);
        out_check(o, s);
        if (s && !cJSON_AddItemToArray(array, s)) {
            cJSON_Delete(s);
            o->oom = true;
        }
        return;
    }
    cJSON *obj = cJSON_CreateObject();
    if (!obj || !cJSON_AddItemToArray(array, obj)) {
        cJSON_Delete(obj);
        o->oom = true;
        return;
    }
    out_str(o, obj, "kind", kind);
    switch (p->kind) {
    case ALLOC_POLICY_PERIODIC:
        out_uint(o, obj, "every_n_requests", pp->periodic.every_n_requests);
        out_duration(o, obj, "every", pp->periodic.every_ns);
        break;
    case ALLOC_POLICY_ARENA:
        out_size(o, obj, "min_block", pp->arena.min_block_bytes);
        break;
    case ALLOC_POLICY_IDLE_TRIM:
        out_duration(o, obj, "after", pp->idle_trim.after_ns);
        out_size(o, obj, "keep", pp->idle_trim.keep_bytes);
        break;
    case ALLOC_POLICY_WATERMARK:
        out_double(o, obj, "fraction", pp->watermark.fraction);
        break;
    case ALLOC_POLICY_CACHE:
    case ALLOC_POLICY_N:
        break;
    }
}

static void out_batching(json_out_t *o, cJSON *obj, const cfg_batching_t *b)
{
    out_uint(o, obj, "max_batch_size", b->max_batch_size);
    out_duration(o, obj, "max_queue_delay", b->max_queue_delay_ns);
    out_uint(o, obj, "max_queue", b->max_queue);
    out_uint(o, obj, "instances", b->instances);
}

static void out_engine(json_out_t *o, cJSON *obj, const cfg_engine_t *e)
{
    out_str(o, obj, "precision", e->precision);
    out_uint(o, obj, "threads", e->threads);
    out_uint(o, obj, "max_plans", e->max_plans);
    out_bool(o, obj, "cuda_graphs", e->cuda_graphs);
}

char *cfg_to_json(const cfg_t *cfg)
{
    json_out_t o = {false};
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;

    cJSON *server = out_object(&o, doc, "server");
    out_str(&o, server, "host", cfg->server.host);
    out_uint(&o, server, "port", cfg->server.port);
    out_uint(&o, server, "threads", cfg->server.threads);
    out_size(&o, server, "max_body", cfg->server.max_body_bytes);
    out_str(&o, server, "admin_token", cfg->server.admin_token[0] ? "***" : "");
    out_duration(&o, server, "connection_timeout", cfg->server.connection_timeout_ns);
    out_duration(&o, server, "request_timeout", cfg->server.request_timeout_ns);
    out_duration(&o, server, "shutdown_timeout", cfg->server.shutdown_timeout_ns);

    out_str(&o, doc, "device", cfg->device);
    out_str(&o, doc, "repository", cfg->repository);
    if (cfg->models_all) {
        out_str(&o, doc, "models", "*");
    } else {
        const char *names[CFG_MAX_MODELS];
        for (size_t i = 0; i < cfg->n_models; i++)
            names[i] = cfg->models[i];
        cJSON *models = cJSON_CreateStringArray(names, (int)cfg->n_models);
        out_check(&o, models);
        if (models && !cJSON_AddItemToObject(doc, "models", models)) {
            cJSON_Delete(models);
            o.oom = true;
        }
    }

    out_batching(&o, out_object(&o, doc, "batching"), &cfg->batching);
    out_engine(&o, out_object(&o, doc, "engine"), &cfg->engine);

    cJSON *memory = out_object(&o, doc, "memory");
    cJSON *policies = cJSON_AddArrayToObject(memory, "policies");
    out_check(&o, policies);
    for (size_t i = 0; policies && i < cfg->memory.n_policies; i++)
        out_policy(&o, policies, &cfg->memory.policies[i]);
    out_double(&o, memory, "limit_fraction", cfg->memory.limit_fraction);
    out_size(&o, memory, "limit_bytes", cfg->memory.limit_bytes);
    out_size(&o, memory, "max_split", cfg->memory.max_split_bytes);
    out_size(&o, memory, "pinned_limit", cfg->memory.pinned_limit_bytes);
    out_duration(&o, memory, "tick", cfg->memory.tick_ns);

    cJSON *log = out_object(&o, doc, "log");
    out_str(&o, log, "level", fs_log_level_name(cfg->log.level));
    out_str(&o, log, "format", cfg->log.format == FS_LOG_JSON ? "json" : "text");

    char *text = o.oom ? NULL : cJSON_Print(doc);
    cJSON_Delete(doc);
    return text;
}

/* --- differences ------------------------------------------------------------------- */

/* Whether two policies differ in their kind or in a parameter their kind
 * reads (the other kinds' parameters are not used). */
static bool policy_differs(const cfg_policy_t *a, const cfg_policy_t *b)
{
    const alloc_policy_params_t *x = &a->params, *y = &b->params;
    if (a->kind != b->kind)
        return true;
    switch (a->kind) {
    case ALLOC_POLICY_PERIODIC:
        return x->periodic.every_n_requests != y->periodic.every_n_requests ||
               x->periodic.every_ns != y->periodic.every_ns;
    case ALLOC_POLICY_ARENA:
        return x->arena.min_block_bytes != y->arena.min_block_bytes;
    case ALLOC_POLICY_IDLE_TRIM:
        return x->idle_trim.after_ns != y->idle_trim.after_ns ||
               x->idle_trim.keep_bytes != y->idle_trim.keep_bytes;
    case ALLOC_POLICY_WATERMARK:
        return x->watermark.fraction != y->watermark.fraction;
    case ALLOC_POLICY_CACHE:
    case ALLOC_POLICY_N:
        break;
    }
    return false;
}

static bool batching_differs(const cfg_batching_t *a, const cfg_batching_t *b)
{
    return a->max_batch_size != b->max_batch_size ||
           a->max_queue_delay_ns != b->max_queue_delay_ns || a->max_queue != b->max_queue ||
           a->instances != b->instances;
}

static bool models_differ(const cfg_t *a, const cfg_t *b)
{
    if (a->models_all != b->models_all)
        return true;
    if (a->models_all)
        return false;
    if (a->n_models != b->n_models)
        return true;
    for (size_t i = 0; i < a->n_models; i++)
        if (strcmp(a->models[i], b->models[i]) != 0)
            return true;
    return false;
}

/* Appends ", name" (or "name" first) to buf when `differs`; a name that
 * does not fit whole is left out and "..." ends the list. */
static void restart_add(char *buf, size_t len, bool differs, const char *name)
{
    if (!differs || len == 0)
        return;
    size_t used = strlen(buf);
    if (used >= 3 && strcmp(buf + used - 3, "...") == 0)
        return;
    const char *sep = used ? ", " : "";
    if (used + strlen(sep) + strlen(name) < len)
        snprintf(buf + used, len - used, "%s%s", sep, name);
    else if (used + strlen(sep) + 3 < len)
        snprintf(buf + used, len - used, "%s...", sep);
}

void cfg_diff(const cfg_t *old_cfg, const cfg_t *new_cfg, bool *live, char *restart, size_t len)
{
    const cfg_t *a = old_cfg, *b = new_cfg;
    bool policies = a->memory.n_policies != b->memory.n_policies;
    for (size_t i = 0; !policies && i < a->memory.n_policies; i++)
        policies = policy_differs(&a->memory.policies[i], &b->memory.policies[i]);
    *live = policies || a->memory.tick_ns != b->memory.tick_ns ||
            batching_differs(&a->batching, &b->batching) || a->log.level != b->log.level ||
            a->log.format != b->log.format;

    if (len)
        restart[0] = '\0';
    restart_add(restart, len, strcmp(a->server.host, b->server.host) != 0, "server.host");
    restart_add(restart, len, a->server.port != b->server.port, "server.port");
    restart_add(restart, len, a->server.threads != b->server.threads, "server.threads");
    restart_add(restart, len, a->server.max_body_bytes != b->server.max_body_bytes,
                "server.max_body");
    restart_add(restart, len, strcmp(a->server.admin_token, b->server.admin_token) != 0,
                "server.admin_token");
    restart_add(restart, len, a->server.connection_timeout_ns != b->server.connection_timeout_ns,
                "server.connection_timeout");
    restart_add(restart, len, a->server.request_timeout_ns != b->server.request_timeout_ns,
                "server.request_timeout");
    restart_add(restart, len, a->server.shutdown_timeout_ns != b->server.shutdown_timeout_ns,
                "server.shutdown_timeout");
    restart_add(restart, len, strcmp(a->device, b->device) != 0, "device");
    restart_add(restart, len, strcmp(a->repository, b->repository) != 0, "repository");
    restart_add(restart, len, models_differ(a, b), "models");
    restart_add(restart, len, strcmp(a->engine.precision, b->engine.precision) != 0,
                "engine.precision");
    restart_add(restart, len, a->engine.threads != b->engine.threads, "engine.threads");
    restart_add(restart, len, a->engine.max_plans != b->engine.max_plans, "engine.max_plans");
    restart_add(restart, len, a->engine.cuda_graphs != b->engine.cuda_graphs,
                "engine.cuda_graphs");
    restart_add(restart, len, a->memory.limit_fraction != b->memory.limit_fraction,
                "memory.limit_fraction");
    restart_add(restart, len, a->memory.limit_bytes != b->memory.limit_bytes,
                "memory.limit_bytes");
    restart_add(restart, len, a->memory.max_split_bytes != b->memory.max_split_bytes,
                "memory.max_split");
    restart_add(restart, len, a->memory.pinned_limit_bytes != b->memory.pinned_limit_bytes,
                "memory.pinned_limit");
}
