/* config.c -- flatserve.json and the models' config.json: the schema as
 * tables of keys, documents and files, and flags applied through the same
 * tables.
 *
 * Each object of the schema is a table of cfg_key_t: the key's name, the
 * function that checks and stores its value (config_values.c), and where
 * the value lives (an offset from the struct being filled). One walker
 * (obj_apply) applies a JSON object through a table, so unknown keys,
 * duplicate keys and the key path in messages are handled in one place. A
 * document is applied to a copy of the caller's struct, which is copied
 * back only when every key passed: a failed parse leaves nothing behind.
 * Command-line flags go through the same tables (cfg_flag_apply), their
 * text turned into the JSON value the file would hold. */
#include "config/config.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config_impl.h"
#include "engine/registry.h"

/* Config files larger than this are refused before parsing. */
#define CFG_FILE_MAX ((size_t)16 << 20)

/* A key stored at `member` of `type`, with its range (see cfg_key_t). */
#define KEY(name, set, type, member, min, max)                                 \
    {name, set, offsetof(type, member), sizeof(((type *)0)->member), min, max, NULL, 0}
/* An object of the file, its keys stored in the same root struct. */
#define SECTION(name, keys) {name, set_object, 0, 0, 0, 0, keys, CFG_N_OF(keys)}

/* --- objects ------------------------------------------------------------------ */

/* FS_EINVAL: `origin: unknown key "path" (known keys of "parent"<label>: a, b)`. */
static int unknown_key(const cfg_src_t *obj, const char *path, const cfg_key_t *keys, size_t n,
                       const char *label)
{
    char list[256] = "";
    for (size_t i = 0, o = 0; i < n && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", keys[i].name);
    const char *of = obj->path[0] ? " of \"" : "";
    const char *of_end = obj->path[0] ? "\"" : "";
    return fs_err(FS_EINVAL, "%s: unknown key \"%s\" (known keys%s%s%s%s: %s)",
                  obj->origin ? obj->origin : "", path, of, obj->path, of_end, label ? label : "",
                  list);
}

/* Applies every member of the object at src through `keys`, in document
 * order; `label` (may be NULL) follows the object's path in the
 * unknown-key message. Stops at the first error (FS_EINVAL). */
static int obj_apply(const cfg_src_t *src, const cfg_key_t *keys, size_t n_keys, void *root,
                     const char *label)
{
    char got[96];
    if (!cJSON_IsObject(src->json))
        return cfg_src_fail(src, "expected an object, got %s", CFG_GOT(src));
    for (const cJSON *c = src->json->child; c; c = c->next) {
        char path[CFG_KEYPATH_MAX];
        cfg_path_join(path, sizeof path, src->path, c->string);
        for (const cJSON *p = src->json->child; p != c; p = p->next)
            if (strcmp(p->string, c->string) == 0)
                return fs_err(FS_EINVAL, "%s: duplicate key \"%s\"", src->origin, path);
        const cfg_key_t *key = NULL;
        for (size_t i = 0; i < n_keys && !key; i++)
            if (strcmp(keys[i].name, c->string) == 0)
                key = &keys[i];
        if (!key)
            return unknown_key(src, path, keys, n_keys, label);
        if (!key->set)
            continue;
        cfg_src_t child = {.json = c, .origin = src->origin, .path = path};
        int rc = key->set(key, &child, root);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int set_object(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    return obj_apply(src, key->sub, key->n_sub, root, NULL);
}

/* --- lists ------------------------------------------------------------------------ */

/* Applies each item of the array at src through item(), which gets the item
 * with its path ("models[2]") and its index; *n gets the count. FS_EINVAL
 * ("expected <expected>, got ...") when src is not an array, and when it
 * has more than `max` items ("at most <max> <noun>"). */
static int array_apply(const cfg_src_t *src, size_t max, const char *noun, const char *expected,
                       int (*item)(const cfg_src_t *es, size_t i, void *root), void *root,
                       size_t *n)
{
    char got[96];
    if (!cJSON_IsArray(src->json))
        return cfg_src_fail(src, "expected %s, got %s", expected, CFG_GOT(src));
    int count = cJSON_GetArraySize(src->json);
    if ((size_t)count > max)
        return cfg_src_fail(src, "at most %zu %s, got %d", max, noun, count);
    size_t i = 0;
    for (const cJSON *e = src->json->child; e; e = e->next, i++) {
        char path[CFG_KEYPATH_MAX];
        cfg_path_index(path, sizeof path, src, i);
        cfg_src_t es = {.json = e, .origin = src->origin, .path = path};
        int rc = item(&es, i, root);
        if (rc != 0)
            return rc;
    }
    *n = i;
    return 0;
}

/* --- models --------------------------------------------------------------------- */

/* Model names follow the registry's rule; a valid one fits cfg->models[i]. */
_Static_assert(ENG_MODEL_NAME_MAX <= CFG_NAME_MAX, "a model name fits cfg_t.models");

static int model_item(const cfg_src_t *es, size_t i, void *root)
{
    cfg_t *cfg = root;
    char got[96];
    size_t at;
    const char *why = cJSON_IsString(es->json)
                          ? eng_registry_name_problem(es->json->valuestring, &at)
                          : "is not a string";
    if (why)
        return cfg_src_fail(es, "expected a model name, got %s, which %s", CFG_GOT(es), why);
    for (size_t j = 0; j < i; j++)
        if (strcmp(cfg->models[j], es->json->valuestring) == 0)
            return cfg_src_fail(es, "model %s is listed twice", CFG_GOT(es));
    cfg_string_store(cfg->models[i], sizeof cfg->models[i], es->json->valuestring);
    return 0;
}

int cfg_set_models(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    cfg_t *cfg = root;
    memset(cfg->models, 0, sizeof cfg->models);
    /* "*", or ["*"] as --load-model '*' gives it. */
    const cJSON *only = cJSON_IsArray(src->json) && cJSON_GetArraySize(src->json) == 1
                            ? cJSON_GetArrayItem(src->json, 0)
                            : src->json;
    if (cJSON_IsString(only) && strcmp(only->valuestring, "*") == 0) {
        cfg->models_all = true;
        cfg->n_models = 0;
        return 0;
    }
    int rc = array_apply(src, CFG_MAX_MODELS, "models",
                         "\"*\" (every model of the repository) or an array of model names",
                         model_item, cfg, &cfg->n_models);
    if (rc == 0)
        cfg->models_all = false;
    return rc;
}

/* --- memory policies ------------------------------------------------------------ */

#define POLICY_KINDS "\"cache\", \"periodic\", \"arena\", \"idle_trim\", \"watermark\""

/* The keys of each kind's object form, offsets from a cfg_policy_t. */
static const cfg_key_t policy_cache_keys[] = {{"kind", NULL, 0, 0, 0, 0, NULL, 0}};
static const cfg_key_t policy_periodic_keys[] = {
    {"kind", NULL, 0, 0, 0, 0, NULL, 0},
    KEY("every_n_requests", cfg_set_uint, cfg_policy_t, params.periodic.every_n_requests, 0,
        CFG_JSON_INT_MAX),
    KEY("every", cfg_set_duration, cfg_policy_t, params.periodic.every_ns, 0, 0),
};
static const cfg_key_t policy_arena_keys[] = {
    {"kind", NULL, 0, 0, 0, 0, NULL, 0},
    KEY("min_block", cfg_set_size, cfg_policy_t, params.arena.min_block_bytes, 0, SIZE_MAX),
};
static const cfg_key_t policy_idle_trim_keys[] = {
    {"kind", NULL, 0, 0, 0, 0, NULL, 0},
    KEY("after", cfg_set_duration, cfg_policy_t, params.idle_trim.after_ns, 1, 0),
    KEY("keep", cfg_set_size, cfg_policy_t, params.idle_trim.keep_bytes, 0, SIZE_MAX),
};
static const cfg_key_t policy_watermark_keys[] = {
    {"kind", NULL, 0, 0, 0, 0, NULL, 0},
    KEY("fraction", cfg_set_fraction, cfg_policy_t, params.watermark.fraction, 1, 0),
};

static const struct {
    const cfg_key_t *keys;
    size_t n;
} policy_tables[ALLOC_POLICY_N] = {
    [ALLOC_POLICY_CACHE] = {policy_cache_keys, CFG_N_OF(policy_cache_keys)},
    [ALLOC_POLICY_PERIODIC] = {policy_periodic_keys, CFG_N_OF(policy_periodic_keys)},
    [ALLOC_POLICY_ARENA] = {policy_arena_keys, CFG_N_OF(policy_arena_keys)},
    [ALLOC_POLICY_IDLE_TRIM] = {policy_idle_trim_keys, CFG_N_OF(policy_idle_trim_keys)},
    [ALLOC_POLICY_WATERMARK] = {policy_watermark_keys, CFG_N_OF(policy_watermark_keys)},
};

/* One item of memory.policies: a kind name, or an object with "kind" and
 * that kind's keys. *p starts with every default parameter. */
static int policy_apply(const cfg_src_t *src, cfg_policy_t *p)
{
    char got[96];
    alloc_policy_params_default(&p->params);
    if (cJSON_IsString(src->json)) {
        if (alloc_policy_kind_parse(src->json->valuestring, &p->kind) != 0)
            return cfg_src_fail(src, "expected a policy kind (one of " POLICY_KINDS "), got %s",
                                CFG_GOT(src));
        return 0;
    }
    if (!cJSON_IsObject(src->json))
        return cfg_src_fail(src,
                            "expected a policy kind (one of " POLICY_KINDS ") or an object "
                            "with \"kind\", got %s",
                            CFG_GOT(src));
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(src->json, "kind");
    if (!kind)
        return cfg_src_fail(src, "missing \"kind\" (one of " POLICY_KINDS ")");
    char path[CFG_KEYPATH_MAX];
    cfg_path_join(path, sizeof path, src->path, "kind");
    cfg_src_t ks = {.json = kind, .origin = src->origin, .path = path};
    if (!cJSON_IsString(kind) || alloc_policy_kind_parse(kind->valuestring, &p->kind) != 0)
        return cfg_src_fail(&ks, "expected one of " POLICY_KINDS ", got %s",
                            cfg_json_describe(kind, got, sizeof got));
    char label[48];
    snprintf(label, sizeof label, " (kind \"%s\")", alloc_policy_kind_name(p->kind));
    int rc = obj_apply(src, policy_tables[p->kind].keys, policy_tables[p->kind].n, p, label);
    if (rc != 0)
        return rc;
    if (p->kind == ALLOC_POLICY_PERIODIC && p->params.periodic.every_n_requests == 0 &&
        p->params.periodic.every_ns == 0)
        return cfg_src_fail(src, "a periodic policy needs every_n_requests or every above 0 "
                                 "(both are 0)");
    return 0;
}

static int policy_item(const cfg_src_t *es, size_t i, void *root)
{
    cfg_t *cfg = root;
    cfg_policy_t *p = &cfg->memory.policies[i];
    int rc = policy_apply(es, p);
    for (size_t j = 0; rc == 0 && p->kind == ALLOC_POLICY_ARENA && j < i; j++)
        if (cfg->memory.policies[j].kind == ALLOC_POLICY_ARENA)
            rc = cfg_src_fail(es,
                              "a second \"arena\" policy (the first is item %zu): arena may "
                              "be listed once",
                              j);
    return rc;
}

int cfg_set_policies(const cfg_key_t *key, const cfg_src_t *src, void *root)
{
    cfg_t *cfg = root;
    memset(cfg->memory.policies, 0, sizeof cfg->memory.policies);
    return array_apply(src, CFG_MAX_POLICIES, "policies",
                       "an array of policies (kind names such as \"cache\", or objects such as "
                       "{\"kind\": \"idle_trim\", \"after\": \"30s\"})",
                       policy_item, cfg, &cfg->memory.n_policies);
}

const cfg_key_t *cfg_policy_keys(alloc_policy_kind_t kind, size_t *n)
{
    *n = policy_tables[kind].n;
    return policy_tables[kind].keys;
}

/* --- the schema ------------------------------------------------------------------ */

#define BATCHING_KEYS(T, m)                                                    \
    KEY("max_batch_size", cfg_set_uint, T, m.max_batch_size, 0, 65536),        \
    KEY("max_queue_delay", cfg_set_duration, T, m.max_queue_delay_ns, 0, 0),   \
    KEY("max_queue", cfg_set_uint, T, m.max_queue, 1, 1048576),                \
    KEY("instances", cfg_set_uint, T, m.instances, 0, 64)

#define ENGINE_KEYS(T, m)                                                      \
    KEY("precision", cfg_set_precision, T, m.precision, 0, 0),                 \
    KEY("threads", cfg_set_uint, T, m.threads, 0, 1024),                       \
    KEY("max_plans", cfg_set_uint, T, m.max_plans, 1, 65536),                  \
    KEY("cuda_graphs", cfg_set_bool, T, m.cuda_graphs, 0, 0)

static const cfg_key_t server_keys[] = {
    KEY("host", cfg_set_host, cfg_t, server.host, 0, 0),
    KEY("port", cfg_set_uint, cfg_t, server.port, 0, 65535),
    KEY("threads", cfg_set_uint, cfg_t, server.threads, 1, 1024),
    KEY("max_body", cfg_set_size, cfg_t, server.max_body_bytes, 1, UINT64_MAX),
    KEY("admin_token", cfg_set_token, cfg_t, server.admin_token, 0, 0),
    KEY("connection_timeout", cfg_set_duration, cfg_t, server.connection_timeout_ns, 1, 0),
    KEY("request_timeout", cfg_set_duration, cfg_t, server.request_timeout_ns, 1, 0),
    KEY("shutdown_timeout", cfg_set_duration, cfg_t, server.shutdown_timeout_ns, 1, 0),
    KEY("exit_on_error", cfg_set_bool, cfg_t, server.exit_on_error, 0, 0),
    KEY("shared_memory", cfg_set_bool, cfg_t, server.shared_memory, 0, 0),
};
static const cfg_key_t batching_keys[] = {BATCHING_KEYS(cfg_t, batching)};
static const cfg_key_t engine_keys[] = {ENGINE_KEYS(cfg_t, engine)};
static const cfg_key_t memory_keys[] = {
    {"policies", cfg_set_policies, 0, 0, 0, 0, NULL, 0},
    KEY("limit_fraction", cfg_set_fraction, cfg_t, memory.limit_fraction, 0, 0),
    KEY("limit_bytes", cfg_set_size, cfg_t, memory.limit_bytes, 0, UINT64_MAX),
    KEY("max_split", cfg_set_split, cfg_t, memory.max_split_bytes, 0, 0),
    KEY("pinned_limit", cfg_set_size, cfg_t, memory.pinned_limit_bytes, 0, UINT64_MAX),
    KEY("tick", cfg_set_duration, cfg_t, memory.tick_ns, 1, 0),
};
static const cfg_key_t log_keys[] = {
    KEY("level", cfg_set_log_level, cfg_t, log.level, 0, 0),
    KEY("format", cfg_set_log_format, cfg_t, log.format, 0, 0),
};
static const cfg_key_t trace_keys[] = {
    KEY("level", cfg_set_trace_level, cfg_t, trace.timestamps, 0, 0),
    KEY("rate", cfg_set_uint, cfg_t, trace.rate, 1, UINT32_MAX),
    KEY("count", cfg_set_trace_count, cfg_t, trace.count, 0, 0),
    KEY("log_frequency", cfg_set_uint, cfg_t, trace.log_frequency, 0, UINT32_MAX),
    KEY("file", cfg_set_trace_file, cfg_t, trace.file, 0, 0),
};
static const cfg_key_t top_keys[] = {
    SECTION("server", server_keys),
    KEY("device", cfg_set_device, cfg_t, device, 1, 0),
    KEY("repository", cfg_set_path, cfg_t, repository, 0, 0),
    {"models", cfg_set_models, 0, 0, 0, 0, NULL, 0},
    KEY("model_control_mode", cfg_set_control, cfg_t, model_control_mode, 0, 0),
    KEY("repository_poll_secs", cfg_set_uint, cfg_t, repository_poll_secs, 1, 86400),
    SECTION("batching", batching_keys),
    SECTION("engine", engine_keys),
    SECTION("memory", memory_keys),
    SECTION("log", log_keys),
    SECTION("trace", trace_keys),
};

/* A model's config.json: flat, offsets from a cfg_model_t. */
static const cfg_key_t model_keys[] = {
    KEY("device", cfg_set_device, cfg_model_t, device, 0, 0),
    BATCHING_KEYS(cfg_model_t, batching),
    ENGINE_KEYS(cfg_model_t, engine),
};

const cfg_key_t *cfg_schema(size_t *n)
{
    *n = CFG_N_OF(top_keys);
    return top_keys;
}

/* --- defaults ---------------------------------------------------------------------- */

void cfg_defaults(cfg_t *out)
{
    memset(out, 0, sizeof *out);
    cfg_string_store(out->server.host, sizeof out->server.host, "0.0.0.0");
    out->server.port = 8000;
    out->server.threads = 4;
    out->server.max_body_bytes = 64ull << 20;
    out->server.connection_timeout_ns = 30ull * 1000000000;
    out->server.request_timeout_ns = 30ull * 1000000000;
    out->server.shutdown_timeout_ns = 30ull * 1000000000;
    out->server.exit_on_error = true;
    out->server.shared_memory = true;
    out->device.set = out->device.is_auto = true;
    cfg_string_store(out->repository, sizeof out->repository, "models");
    out->models_all = true;
    out->model_control_mode = CFG_CONTROL_EXPLICIT;
    out->repository_poll_secs = 15;
    out->batching.max_batch_size = 64;
    out->batching.max_queue_delay_ns = 0;
    out->batching.max_queue = 1024;
    out->batching.instances = 0;
    out->engine.precision = ENG_PREC_FP32;
    out->engine.threads = 0;
    out->engine.max_plans = 16;
    out->engine.cuda_graphs = true;
    /* Each batch's activations in an arena handed back at batch end, and the
     * free cache trimmed after 30 s without a request: what flatserve holds
     * between bursts is its weights, not its largest request's working set.
     * "cache" (PyTorch's behaviour) stays a choice. */
    out->memory.n_policies = 2;
    out->memory.policies[0].kind = ALLOC_POLICY_ARENA;
    out->memory.policies[1].kind = ALLOC_POLICY_IDLE_TRIM;
    alloc_policy_params_default(&out->memory.policies[0].params);
    alloc_policy_params_default(&out->memory.policies[1].params);
    out->memory.pinned_limit_bytes = 256ull << 20;
    out->memory.tick_ns = 50ull * 1000000;
    out->log.level = FS_LOG_INFO;
    out->log.format = FS_LOG_TEXT;
    out->trace.rate = 1000;
    out->trace.count = -1;
}

void cfg_model_defaults(const cfg_t *defaults, cfg_model_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(&out->batching, &defaults->batching, sizeof out->batching);
    memcpy(&out->engine, &defaults->engine, sizeof out->engine);
}

/* --- documents ---------------------------------------------------------------------- */

/* `, near 'text'`: the text of the line around byte `off` (up to 16 bytes
 * before it, 8 from it; leading blanks skipped), or "" when there is none. */
static void json_near(const char *buf, size_t len, size_t line_start, size_t off, char *out,
                      size_t out_len)
{
    size_t from = off > line_start + 16 ? off - 16 : line_start, to = off;
    while (to < len && to < off + 8 && buf[to] != '\n' && buf[to] != '\r')
        to++;
    while (from < to && (buf[from] == ' ' || buf[from] == '\t'))
        from++;
    if (from == to)
        return;
    char part[32], quoted[64];
    snprintf(part, sizeof part, "%.*s", (int)(to - from), buf + from);
    cfg_quote_text(part, quoted, sizeof quoted);
    /* Single quotes around it: the JSON text has double quotes of its own. */
    quoted[0] = quoted[strlen(quoted) - 1] = '\'';
    snprintf(out, out_len, ", near %s", quoted);
}

/* Parses text[0..len) as JSON into *out (caller frees with cJSON_Delete).
 * FS_EPARSE naming origin, the line, column and byte where parsing stopped
 * and the text there; FS_ENOMEM. Nothing is allocated on error. */
static int json_parse(const char *text, size_t len, const char *origin, cJSON **out)
{
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul)
        return fs_err(FS_EPARSE, "%s: not valid JSON: a NUL byte at byte %zu", origin,
                      (size_t)(nul - text));
    /* cJSON wants the terminating NUL inside the length it is given to
     * reject trailing text after the document. */
    char *buf = malloc(len + 1);
    if (!buf)
        return fs_err(FS_ENOMEM, "%s: out of memory for a copy of %zu bytes", origin, len);
    if (len)
        memcpy(buf, text, len);
    buf[len] = '\0';
    /* The place of an error comes back through `end` rather than
     * cJSON_GetErrorPtr(), which is one global shared by every thread. cJSON
     * reports running out of memory as a syntax error too. */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
    if (!root) {
        size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : len;
        size_t line = 1, line_start = 0;
        for (size_t i = 0; i < off; i++) {
            if (buf[i] == '\n') {
                line++;
                line_start = i + 1;
            }
        }
        char near[96] = "";
        json_near(buf, len, line_start, off, near, sizeof near);
        free(buf);
        if (len == 0)
            return fs_err(FS_EPARSE, "%s: not valid JSON: the document is empty", origin);
        return fs_err(FS_EPARSE,
                      "%s: not valid JSON: parsing stopped at line %zu, column %zu "
                      "(byte %zu)%s%s",
                      origin, line, off - line_start + 1, off,
                      off < len ? "" : ", at the end of the text", near);
    }
    free(buf);
    *out = root;
    return 0;
}

/* Applies the document `text` through the top-level table `keys` onto a
 * copy of the `size` bytes at root; copies back only on success. */
static int doc_apply(const char *text, size_t len, const char *origin, const cfg_key_t *keys,
                     size_t n_keys, void *root, size_t size)
{
    cJSON *doc = NULL;
    int rc = json_parse(text ? text : "", text ? len : 0, origin, &doc);
    if (rc != 0)
        return rc;
    void *work = malloc(size);
    if (!work) {
        cJSON_Delete(doc);
        return fs_err(FS_ENOMEM, "%s: out of memory", origin);
    }
    memcpy(work, root, size);
    if (!cJSON_IsObject(doc)) {
        char got[96];
        rc = fs_err(FS_EINVAL, "%s: expected a JSON object at the top level, got %s", origin,
                    cfg_json_describe(doc, got, sizeof got));
    } else {
        cfg_src_t src = {.json = doc, .origin = origin, .path = ""};
        rc = obj_apply(&src, keys, n_keys, work, NULL);
    }
    if (rc == 0)
        memcpy(root, work, size);
    free(work);
    cJSON_Delete(doc);
    return rc;
}

int cfg_parse(const char *text, size_t len, const char *origin, cfg_t *cfg)
{
    return doc_apply(text, len, origin ? origin : "flatserve.json", top_keys, CFG_N_OF(top_keys),
                     cfg, sizeof *cfg);
}

int cfg_model_parse(const char *text, size_t len, const char *origin, cfg_model_t *out)
{
    return doc_apply(text, len, origin ? origin : "config.json", model_keys, CFG_N_OF(model_keys),
                     out, sizeof *out);
}

/* Reads the whole file into *out (caller frees with free()) and *len.
 * FS_ENOENT when it does not exist (with missing non-NULL: 0, *missing
 * set and no message instead), FS_EIO, FS_EINVAL when larger than
 * CFG_FILE_MAX, FS_ENOMEM; nothing is allocated on error. */
int cfg_file_read(const char *path, char **out, size_t *len, bool *missing)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        if (e == ENOENT && missing) {
            *missing = true;
            return 0;
        }
        if (e == ENOENT)
            return fs_err(FS_ENOENT, "config file \"%s\" not found", path);
        return fs_err(FS_EIO, "config file \"%s\": cannot open: %s", path, strerror(e));
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : fs_err(FS_ENOMEM, "config file \"%s\": out of memory", path);
    while (rc == 0) {
        if (n == cap) {
            char *bigger = cap < CFG_FILE_MAX ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                rc = cap < CFG_FILE_MAX
                         ? fs_err(FS_ENOMEM, "config file \"%s\": out of memory", path)
                         : fs_err(FS_EINVAL, "config file \"%s\": larger than %zu MiB", path,
                                  CFG_FILE_MAX >> 20);
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (ferror(f))
            rc = fs_err(FS_EIO, "config file \"%s\": cannot read: %s", path, strerror(errno));
        else if (feof(f))
            break;
    }
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    if (missing)
        *missing = false;
    *out = buf;
    *len = n;
    return 0;
}

int cfg_load_file(const char *path, cfg_t *cfg)
{
    char *text;
    size_t len;
    int rc = cfg_file_read(path, &text, &len, NULL);
    if (rc != 0)
        return rc;
    rc = cfg_parse(text, len, path, cfg);
    free(text);
    return rc;
}

int cfg_model_load_file(const char *path, const cfg_t *defaults, cfg_model_t *out)
{
    cfg_model_defaults(defaults, out);
    char *text;
    size_t len;
    bool missing;
    int rc = cfg_file_read(path, &text, &len, &missing);
    if (rc != 0 || missing)
        return rc;
    rc = cfg_model_parse(text, len, path, out);
    free(text);
    return rc;
}

/* The engine keys a config.pbtxt's parameters may set: the rest of a
 * config.json's keys have Triton fields of their own. */
static const cfg_key_t param_keys[] = {ENGINE_KEYS(cfg_model_t, engine)};

int cfg_model_param_set(cfg_model_t *m, const char *key, const char *text, const char *origin,
                        const char *path)
{
    const cfg_key_t *k = NULL;
    char known[128] = "";
    for (size_t i = 0; i < CFG_N_OF(param_keys); i++) {
        if (strcmp(param_keys[i].name, key) == 0)
            k = &param_keys[i];
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 param_keys[i].name);
    }
    char quoted[80];
    if (!k)
        return fs_err(FS_EINVAL, "%s: %s: unknown parameter %s (flatserve's are: %s)", origin,
                      path, cfg_quote_text(key, quoted, sizeof quoted), known);
    size_t n = strspn(text, "0123456789");
    cJSON *v = k->set == cfg_set_uint && n > 0 && n <= 15 && text[n] == '\0'
                   ? cJSON_CreateNumber(strtod(text, NULL))
               : k->set == cfg_set_bool && strcmp(text, "true") == 0  ? cJSON_CreateTrue()
               : k->set == cfg_set_bool && strcmp(text, "false") == 0 ? cJSON_CreateFalse()
                                                                      : cJSON_CreateString(text);
    if (!v)
        return fs_err(FS_ENOMEM, "%s: out of memory", origin);
    cfg_model_t next = *m;
    cfg_src_t src = {.json = v, .origin = origin, .path = path};
    int rc = k->set(k, &src, &next);
    cJSON_Delete(v);
    if (rc == 0)
        *m = next;
    return rc;
}

/* --- flags ---------------------------------------------------------------------------- */

/* The key at a path of the file ("server.port", "device"); NULL if none. */
static const cfg_key_t *key_find(const char *path)
{
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    for (size_t i = 0; i < CFG_N_OF(top_keys); i++) {
        const cfg_key_t *k = &top_keys[i];
        if (strlen(k->name) != n || strncmp(k->name, path, n) != 0)
            continue;
        if (!dot)
            return k;
        for (size_t j = 0; j < k->n_sub; j++)
            if (strcmp(k->sub[j].name, dot + 1) == 0)
                return &k->sub[j];
        return NULL;
    }
    return NULL;
}

/* Applies `value` (taken; deleted here) to the key at path. */
static int flag_apply_json(cfg_t *cfg, const char *path, const char *flag, cJSON *value)
{
    const cfg_key_t *key = key_find(path);
    assert(key && key->set);
    if (!value)
        return fs_err(FS_ENOMEM, "%s: out of memory", flag);
    cfg_src_t src = {.json = value, .origin = NULL, .path = flag};
    int rc = key->set(key, &src, cfg);
    cJSON_Delete(value);
    return rc;
}

int cfg_flag_apply(cfg_t *cfg, const char *path, const char *flag, const char *text)
{
    const cfg_key_t *key = key_find(path);
    assert(key);
    /* Up to 15 digits is exact as a double; anything else stays a string
     * and fails the integer check, quoted as the user wrote it. A boolean
     * key takes "true" and "false" as the JSON literals. */
    size_t n = strspn(text, "0123456789");
    bool number = key->set == cfg_set_uint && n > 0 && n <= 15 && text[n] == '\0';
    bool boolean = key->set == cfg_set_bool &&
                   (strcmp(text, "true") == 0 || strcmp(text, "false") == 0);
    return flag_apply_json(cfg, path, flag,
                           number    ? cJSON_CreateNumber(strtod(text, NULL))
                           : boolean ? cJSON_CreateBool(text[0] == 't')
                                     : cJSON_CreateString(text));
}

int cfg_flag_apply_list(cfg_t *cfg, const char *path, const char *flag, const char *const *texts,
                        size_t n)
{
    cJSON *array = cJSON_CreateArray();
    for (size_t i = 0; array && i < n; i++) {
        for (const char *s = texts[i];; s++) {
            size_t len = strcspn(s, ",");
            char *item = strndup(s, len);
            cJSON *v = item ? cJSON_CreateString(item) : NULL;
            free(item);
            if (!v || !cJSON_AddItemToArray(array, v)) {
                cJSON_Delete(v);
                cJSON_Delete(array);
                array = NULL;
                break;
            }
            s += len;
            if (*s == '\0')
                break;
        }
    }
    return flag_apply_json(cfg, path, flag, array);
}
