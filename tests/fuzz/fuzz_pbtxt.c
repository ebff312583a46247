/* fuzz_pbtxt.c -- fuzz target "pbtxt": a model's config.pbtxt through
 * cfg_triton_parse (protobuf's text-format parser behind config/pbtxt.cc),
 * and the same bytes as a load's JSON "config" through
 * cfg_triton_parse_json (protobuf's JSON parser), each then through
 * cfg_triton_apply over the server defaults, for a CPU server and a GPU
 * one (config/README.md, "A model's config.pbtxt").
 *
 * Checks, on a refusal: FS_EPARSE / FS_EINVAL (parse) or FS_EINVAL /
 * FS_ENOTSUP (apply), FS_ENOMEM, with a message that names the file. On
 * acceptance: every list within its array and every text terminated; the
 * applied settings within their documented ranges, the model file one
 * plain name, the version policy within ENG_VERSIONS_MAX. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "config/triton.h"
#include "tests/fuzz/fuzz.h"

#define PBTXT_ORIGIN "models/m/config.pbtxt"

static int named(const char *what)
{
    if (strncmp(fs_errmsg(), PBTXT_ORIGIN ": ", strlen(PBTXT_ORIGIN ": ")) != 0)
        return fs_err(FS_ESTATE, "%s's message does not name the file: %s", what, fs_errmsg());
    return 0;
}

static bool text_ok(const char *s)
{
    return memchr(s, '\0', CFG_TRITON_TEXT_MAX) != NULL;
}

/* The parsed struct's own bounds. */
static int parsed_check(const cfg_triton_t *t)
{
    bool ok = t->n_inputs <= CFG_TRITON_MAX_IO && t->n_outputs <= CFG_TRITON_MAX_IO &&
              t->n_preferred <= CFG_TRITON_MAX_LIST && t->n_gpus <= CFG_TRITON_MAX_LIST &&
              t->n_versions <= CFG_TRITON_MAX_LIST && t->n_params <= CFG_TRITON_MAX_LIST &&
              text_ok(t->name) && text_ok(t->platform) && text_ok(t->backend) &&
              text_ok(t->default_model_filename);
    for (size_t i = 0; ok && i < t->n_inputs + t->n_outputs; i++) {
        const cfg_triton_io_t *io = i < t->n_inputs ? &t->inputs[i] : &t->outputs[i - t->n_inputs];
        ok = io->n_dims <= CFG_TRITON_MAX_DIMS && text_ok(io->name);
    }
    for (size_t i = 0; ok && i < t->n_params; i++) {
        ok = text_ok(t->params[i].key) && text_ok(t->params[i].value);
        if (ok && i > 0)
            ok = strcmp(t->params[i - 1].key, t->params[i].key) < 0;
    }
    return ok ? 0 : fs_err(FS_ESTATE, "cfg_triton_parse accepted and left a list or text out of "
                           "its bounds (or the parameters unsorted)");
}

/* The applied settings' documented ranges. */
static int applied_check(const cfg_model_t *m)
{
    const char *w = PBTXT_ORIGIN " applied";
    int rc = fuzz_config_engine_check(&m->engine, w);
    if (rc == 0)
        rc = fuzz_config_device_check(&m->device, false, w);
    if (rc != 0)
        return rc;
    if (m->batching.max_batch_size > 65536 || m->batching.max_queue > 1048576 ||
        m->batching.instances > 64 || m->max_request_rows > 65536 ||
        m->versions_latest > CFG_MAX_VERSIONS || m->n_versions > CFG_MAX_VERSIONS ||
        strchr(m->model_file, '/') || strcmp(m->model_file, "..") == 0 ||
        (m->batching.max_batch_size && m->batching.max_batch_size != m->max_request_rows))
        return fs_err(FS_ESTATE, "%s: out of range: max_batch_size %u, max_queue %u, instances "
                      "%u, max_request_rows %u, versions %u/%u, model_file '%s'", w,
                      m->batching.max_batch_size, m->batching.max_queue, m->batching.instances,
                      m->max_request_rows, m->versions_latest, m->n_versions, m->model_file);
    return 0;
}

typedef int parse_fn(const char *text, size_t len, const char *origin, cfg_triton_t *out);

/* One parser's run over the bytes, then the apply for both servers. */
static int fuzz_form(parse_fn *parse, const char *what, const uint8_t *data, size_t size)
{
    static const int parse_codes[] = {FS_EPARSE, FS_EINVAL, FS_ENOMEM};
    static const int apply_codes[] = {FS_EINVAL, FS_ENOTSUP, FS_ENOMEM};
    cfg_triton_t *t = malloc(sizeof *t);
    cfg_t *defaults = malloc(sizeof *defaults);
    int rc = t && defaults ? 0 : fs_err(FS_ENOMEM, "out of memory for a config");
    if (rc == 0) {
        fs_err_clear();
        int prc = parse((const char *)data, size, PBTXT_ORIGIN, t);
        if (prc != 0) {
            rc = fuzz_refusal_check(what, prc, parse_codes, 3);
            if (rc == 0)
                rc = named(what);
        } else {
            rc = parsed_check(t);
            cfg_defaults(defaults);
            static const eng_device_t servers[2] = {{ENG_DEVICE_CPU, 0}, {ENG_DEVICE_CUDA, 0}};
            for (int i = 0; rc == 0 && i < 2; i++) {
                cfg_model_t m;
                cfg_model_defaults(defaults, &m);
                fs_err_clear();
                int arc = cfg_triton_apply(t, PBTXT_ORIGIN, "m", &servers[i], &m);
                if (arc != 0) {
                    rc = fuzz_refusal_check("cfg_triton_apply", arc, apply_codes, 3);
                    if (rc == 0)
                        rc = named("cfg_triton_apply");
                } else {
                    rc = applied_check(&m);
                }
            }
        }
    }
    free(defaults);
    free(t);
    return rc;
}

int fuzz_pbtxt_one(const uint8_t *data, size_t size)
{
    int rc = fuzz_form(cfg_triton_parse, "cfg_triton_parse", data, size);
    return rc ? rc : fuzz_form(cfg_triton_parse_json, "cfg_triton_parse_json", data, size);
}
