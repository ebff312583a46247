/* config_json.c -- the effective configuration written back as a
 * flatserve.json document (--check-config), and what differs between two
 * configurations (SIGHUP).
 *
 * The document uses the file's own keys and value forms, sizes and
 * durations as exact unit strings (cfg_size_text), so cfg_parse reads it
 * back to the same cfg_t; the one exception is server.admin_token, which is
 * written as "***" when set so the effective config can be shown or logged
 * without the secret.
 *
 * Both walk the parser's own tables (cfg_schema, cfg_policy_keys), so a
 * key added to the schema is written and compared without a line here;
 * only the two list keys (models, memory.policies) have writers of their
 * own. */
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

/* Adds `item` (taken) to obj (an object, or an array when name is NULL). */
static void out_add(json_out_t *o, cJSON *obj, const char *name, cJSON *item)
{
    bool added = item && obj &&
                 (name ? cJSON_AddItemToObject(obj, name, item) : cJSON_AddItemToArray(obj, item));
    if (!added) {
        cJSON_Delete(item);
        o->oom = true;
    }
}

static void out_keys(json_out_t *o, cJSON *obj, const cfg_key_t *keys, size_t n, const void *root);

/* A policy as its kind name when its kind has no parameters, else an
 * object with "kind" and every parameter of its kind. */
static void out_policy(json_out_t *o, cJSON *array, const cfg_policy_t *p)
{
    size_t n;
    const cfg_key_t *keys = cfg_policy_keys(p->kind, &n);
    cJSON *kind = cJSON_CreateString(alloc_policy_kind_name(p->kind));
    if (n == 1) {
        out_add(o, array, NULL, kind);
        return;
    }
    cJSON *obj = cJSON_CreateObject();
    out_add(o, obj, "kind", kind);
    out_keys(o, obj, keys, n, p);
    out_add(o, array, NULL, obj);
}

static void out_models(json_out_t *o, cJSON *obj, const cfg_t *cfg)
{
    if (cfg->models_all) {
        out_add(o, obj, "models", cJSON_CreateString("*"));
        return;
    }
    const char *names[CFG_MAX_MODELS];
    for (size_t i = 0; i < cfg->n_models; i++)
        names[i] = cfg->models[i];
    out_add(o, obj, "models", cJSON_CreateStringArray(names, (int)cfg->n_models));
}

/* Every key of `keys` (offsets from root) onto obj, in table order. */
static void out_keys(json_out_t *o, cJSON *obj, const cfg_key_t *keys, size_t n, const void *root)
{
    for (size_t i = 0; i < n; i++) {
        const cfg_key_t *key = &keys[i];
        if (key->sub) {
            cJSON *sub = cJSON_CreateObject();
            out_keys(o, sub, key->sub, key->n_sub, root);
            out_add(o, obj, key->name, sub);
        } else if (key->set == cfg_set_models) {
            out_models(o, obj, root);
        } else if (key->set == cfg_set_policies) {
            const cfg_t *cfg = root;
            cJSON *array = cJSON_CreateArray();
            for (size_t j = 0; array && j < cfg->memory.n_policies; j++)
                out_policy(o, array, &cfg->memory.policies[j]);
            out_add(o, obj, key->name, array);
        } else if (key->set) {
            out_add(o, obj, key->name, cfg_value_json(key, root));
        }
    }
}

char *cfg_to_json(const cfg_t *cfg)
{
    json_out_t o = {false};
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;
    size_t n;
    const cfg_key_t *schema = cfg_schema(&n);
    out_keys(&o, doc, schema, n, cfg);
    char *text = o.oom ? NULL : cJSON_Print(doc);
    cJSON_Delete(doc);
    return text;
}

/* --- differences ------------------------------------------------------------------- */

/* What SIGHUP applies without a restart: these keys and every key of these
 * sections. */
static const char *const live_paths[] = {"batching", "memory.policies", "memory.tick", "log"};

static bool path_is_live(const char *path)
{
    for (size_t i = 0; i < CFG_N_OF(live_paths); i++) {
        size_t n = strlen(live_paths[i]);
        if (strncmp(path, live_paths[i], n) == 0 && (path[n] == '\0' || path[n] == '.'))
            return true;
    }
    return false;
}

/* Whether any key of `keys` differs between a and b. */
static bool keys_differ(const cfg_key_t *keys, size_t n, const void *a, const void *b)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i].set && cfg_value_differs(&keys[i], a, b))
            return true;
    return false;
}

/* Whether two policy lists differ in a kind or in a parameter its kind
 * reads (the other kinds' parameters are not used). */
static bool policies_differ(const cfg_t *a, const cfg_t *b)
{
    if (a->memory.n_policies != b->memory.n_policies)
        return true;
    for (size_t i = 0; i < a->memory.n_policies; i++) {
        const cfg_policy_t *x = &a->memory.policies[i], *y = &b->memory.policies[i];
        size_t n;
        const cfg_key_t *keys = cfg_policy_keys(x->kind, &n);
        if (x->kind != y->kind || keys_differ(keys, n, x, y))
            return true;
    }
    return false;
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

/* Appends ", name" (or "name" first) to buf; a name that does not fit
 * whole is left out and "..." ends the list. */
static void restart_add(char *buf, size_t len, const char *name)
{
    if (len == 0)
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

/* Walks `keys` under `parent` ("" at the top): a key that differs sets
 * *live or joins the restart list. */
static void diff_keys(const cfg_key_t *keys, size_t n, const char *parent, const cfg_t *a,
                      const cfg_t *b, bool *live, char *restart, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        const cfg_key_t *key = &keys[i];
        char path[CFG_KEYPATH_MAX];
        cfg_path_join(path, sizeof path, parent, key->name);
        if (key->sub) {
            diff_keys(key->sub, key->n_sub, path, a, b, live, restart, len);
            continue;
        }
        bool differs = key->set == cfg_set_models     ? models_differ(a, b)
                       : key->set == cfg_set_policies ? policies_differ(a, b)
                       : key->set && cfg_value_differs(key, a, b);
        if (differs && path_is_live(path))
            *live = true;
        else if (differs)
            restart_add(restart, len, path);
    }
}

void cfg_diff(const cfg_t *old_cfg, const cfg_t *new_cfg, bool *live, char *restart, size_t len)
{
    size_t n;
    const cfg_key_t *schema = cfg_schema(&n);
    *live = false;
    if (len)
        restart[0] = '\0';
    diff_keys(schema, n, "", old_cfg, new_cfg, live, restart, len);
}
