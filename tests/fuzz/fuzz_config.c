/* fuzz_config.c -- fuzz target "config": config/'s cfg_parse on the bytes
 * as a flatserve.json document, applied over the defaults.
 *
 * Checks, on a refusal: FS_EPARSE / FS_EINVAL (FS_ENOMEM) with a message
 * that names the file, and the configuration left exactly as it was. On
 * success:
 *  - every value is within what config/README.md documents for its key
 *    (the validation let nothing else through);
 *  - what the rest of the server builds from it is accepted there: each
 *    memory policy by alloc_policy_create, the limits by
 *    alloc_cache_create (config/ hands down validated values, which no
 *    layer below may refuse);
 *  - the effective config round-trips: cfg_to_json parses back, writes the
 *    same text again, and cfg_diff sees no difference but the masked admin
 *    token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/policy.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

#define CONFIG_ORIGIN "flatserve.json"

/* Whether s is 1..max bytes of visible ASCII (no space). */
static bool visible_ascii(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= 0x20 || s[i] >= 0x7f)
            return false;
    return true;
}

static bool model_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 127 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
            return false;
    return true;
}

int fuzz_config_batching_check(const cfg_batching_t *b, const char *where)
{
    if (b->max_batch_size > 65536 || b->max_queue < 1 || b->max_queue > 1048576 ||
        b->instances > 64)
        return fs_err(FS_ESTATE,
                      "%s: batching out of its documented range: max_batch_size %u, "
                      "max_queue %u, instances %u",
                      where, b->max_batch_size, b->max_queue, b->instances);
    return 0;
}

int fuzz_config_engine_check(const cfg_engine_t *e, const char *where)
{
    if ((unsigned)e->precision > ENG_PREC_BF16 || e->threads > 1024 || e->max_plans < 1 ||
        e->max_plans > 65536)
        return fs_err(FS_ESTATE,
                      "%s: engine out of its documented range: precision %d, threads %u, "
                      "max_plans %u",
                      where, (int)e->precision, e->threads, e->max_plans);
    return 0;
}

int fuzz_config_device_check(const cfg_device_t *d, bool auto_ok, const char *where)
{
    if (d->is_auto ? !auto_ok || !d->set : d->set && d->dev.kind != ENG_DEVICE_CPU &&
                                               (d->dev.kind != ENG_DEVICE_CUDA ||
                                                d->dev.index < 0 || d->dev.index >= 1024))
        return fs_err(FS_ESTATE, "%s: device out of range: set %d, auto %d, kind %d, index %d",
                      where, d->set, d->is_auto, (int)d->dev.kind, d->dev.index);
    return 0;
}

static int server_check(const cfg_t *c)
{
    const char *w = CONFIG_ORIGIN " accepted";
    if (!visible_ascii(c->server.host, CFG_NAME_MAX - 1))
        return fs_err(FS_ESTATE, "%s: server.host \"%s\"", w, c->server.host);
    if (c->server.threads < 1 || c->server.threads > 1024 || c->server.max_body_bytes < 1 ||
        c->server.connection_timeout_ns == 0 || c->server.request_timeout_ns == 0 ||
        c->server.shutdown_timeout_ns == 0)
        return fs_err(FS_ESTATE, "%s: a server value out of its range", w);
    if (c->server.admin_token[0] && !visible_ascii(c->server.admin_token, CFG_TOKEN_MAX - 1))
        return fs_err(FS_ESTATE, "%s: server.admin_token is not visible ASCII", w);
    size_t rn = strlen(c->repository);
    for (size_t i = 0; i < rn; i++)
        if ((unsigned char)c->repository[i] < 0x20 || c->repository[i] == 0x7f)
            return fs_err(FS_ESTATE, "%s: repository has a control character", w);
    if (rn == 0 || rn > CFG_PATH_MAX - 1)
        return fs_err(FS_ESTATE, "%s: repository of %zu bytes", w, rn);
    if (c->n_models > CFG_MAX_MODELS || (c->models_all && c->n_models != 0))
        return fs_err(FS_ESTATE, "%s: %zu models (all: %d)", w, c->n_models, c->models_all);
    for (size_t i = 0; i < c->n_models; i++) {
        if (!model_name_ok(c->models[i]))
            return fs_err(FS_ESTATE, "%s: model name \"%s\"", w, c->models[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->models[i], c->models[j]) == 0)
                return fs_err(FS_ESTATE, "%s: model \"%s\" twice", w, c->models[i]);
    }
    if ((unsigned)c->log.level > FS_LOG_TRACE || (unsigned)c->log.format > FS_LOG_JSON)
        return fs_err(FS_ESTATE, "%s: log level %d, format %d", w, (int)c->log.level,
                      (int)c->log.format);
    int rc = fuzz_config_device_check(&c->device, true, w);
    if (rc == 0)
        rc = fuzz_config_batching_check(&c->batching, w);
    if (rc == 0)
        rc = fuzz_config_engine_check(&c->engine, w);
    return rc;
}

/* The memory section, as the server builds from it (server/app.c):
 * policies created, the device cache created with its limits. */
static int memory_check(const cfg_t *c)
{
    /* No policy ("policies": []) behaves as "cache": keeping is the default. */
    if (c->memory.n_policies > CFG_MAX_POLICIES ||
        !(c->memory.limit_fraction >= 0 && c->memory.limit_fraction <= 1) ||
        c->memory.tick_ns == 0)
        return fs_err(FS_ESTATE, CONFIG_ORIGIN " accepted: %zu policies, limit_fraction %g, tick %llu",
                      c->memory.n_policies, c->memory.limit_fraction,
                      (unsigned long long)c->memory.tick_ns);
    char msg[FS_ERRMSG_MAX];
    size_t arenas = 0;
    for (size_t i = 0; i < c->memory.n_policies; i++) {
        alloc_policy_t *p = NULL;
        fs_err_clear();
        int rc = alloc_policy_create(c->memory.policies[i].kind, &c->memory.policies[i].params, &p);
        if (rc != 0) {
            snprintf(msg, sizeof msg, "%s", fs_errmsg());
            return fs_err(FS_ESTATE, CONFIG_ORIGIN " accepted memory.policies[%zu], which "
                          "alloc_policy_create refuses: %s", i, msg);
        }
        alloc_policy_destroy(p);
        arenas += c->memory.policies[i].kind == ALLOC_POLICY_ARENA;
    }
    if (arenas > 1)
        return fs_err(FS_ESTATE, CONFIG_ORIGIN " accepted %zu arena policies", arenas);
    alloc_provider_t *provider = NULL;
    alloc_cache_t *cache = NULL;
    alloc_cache_config_t cc = {.name = "fuzz",
                               .max_reserved_bytes = c->memory.limit_bytes,
                               .fraction = c->memory.limit_fraction,
                               .max_split_bytes = c->memory.max_split_bytes};
    int rc = alloc_provider_host_create(&provider);
    if (rc != 0)
        return rc;
    fs_err_clear();
    rc = alloc_cache_create(provider, &cc, &cache);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        rc = fs_err(FS_ESTATE, CONFIG_ORIGIN " accepted memory limits that alloc_cache_create "
                    "refuses: %s", msg);
    }
    alloc_cache_destroy(cache);
    alloc_provider_destroy(provider);
    return rc;
}

/* cfg_to_json parses back to a config that writes the same text, and
 * cfg_diff finds nothing but the masked token. */
static int roundtrip_check(const cfg_t *c)
{
    char *text = cfg_to_json(c), *again = NULL;
    if (!text)
        return fs_err(FS_ENOMEM, "cfg_to_json: out of memory");
    cfg_t back;
    cfg_defaults(&back);
    fs_err_clear();
    int rc = cfg_parse(text, strlen(text), "cfg_to_json", &back);
    if (rc != 0) {
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        rc = fs_err(FS_ESTATE, "cfg_to_json wrote a config that does not parse: %s: %.300s", msg,
                    text);
    } else if (!(again = cfg_to_json(&back))) {
        rc = fs_err(FS_ENOMEM, "cfg_to_json: out of memory");
    } else if (strcmp(text, again) != 0) {
        rc = fs_err(FS_ESTATE, "cfg_to_json does not round-trip: %.200s ... became %.200s", text,
                    again);
    } else {
        bool live = true;
        char restart[512];
        cfg_diff(c, &back, &live, restart, sizeof restart);
        bool masked = c->server.admin_token[0] && strcmp(c->server.admin_token, "***") != 0;
        if (live || strcmp(restart, masked ? "server.admin_token" : "") != 0)
            rc = fs_err(FS_ESTATE, "the round-tripped config differs: live %d, restart \"%s\"",
                        live, restart);
    }
    free(text);
    free(again);
    return rc;
}

int fuzz_config_one(const uint8_t *data, size_t size)
{
    static const int codes[] = {FS_EPARSE, FS_EINVAL, FS_ENOMEM};
    cfg_t *cfg = malloc(sizeof *cfg), *before = malloc(sizeof *cfg);
    if (!cfg || !before) {
        free(cfg);
        free(before);
        return fs_err(FS_ENOMEM, "out of memory for a config");
    }
    /* Zeroed first, so that padding compares equal below. */
    memset(cfg, 0, sizeof *cfg);
    cfg_defaults(cfg);
    memcpy(before, cfg, sizeof *cfg);
    fs_err_clear();
    int rc = cfg_parse((const char *)data, size, CONFIG_ORIGIN, cfg);
    if (rc != 0) {
        rc = fuzz_refusal_check("cfg_parse", rc, codes, 3);
        if (rc == 0 && strncmp(fs_errmsg(), CONFIG_ORIGIN ": ", strlen(CONFIG_ORIGIN ": ")) != 0)
            rc = fs_err(FS_ESTATE, "cfg_parse's message does not name the file: %s", fs_errmsg());
        if (rc == 0 && memcmp(cfg, before, sizeof *cfg) != 0)
            rc = fs_err(FS_ESTATE, "cfg_parse failed and changed the config");
    } else {
        rc = server_check(cfg);
        if (rc == 0)
            rc = memory_check(cfg);
        if (rc == 0)
            rc = roundtrip_check(cfg);
    }
    free(cfg);
    free(before);
    return rc;
}
