/* model_config.c -- a model's own configuration file, as the registry's
 * callbacks read it: REPO/<model>/config.json (flatserve's) or
 * REPO/<model>/config.pbtxt (Triton's ModelConfig, config/triton.h), over
 * the server's defaults; and, once the model has loaded, the inputs and
 * outputs a config.pbtxt declares checked against the ONNX model.
 *
 * Precedence: one file or the other. A directory with both is a load
 * error naming them, so that no setting is silently taken from one file
 * over the other. The verify callback reads config.pbtxt again rather than
 * keep what the options callback read: a file changed between the two
 * reads is checked as it is then (poll mode rebuilds the model anyway on
 * its next look).
 *
 * A load request's "config" parameter (Triton's ModelConfig in JSON) is
 * read in place of either file, as Triton reads it, by every read of the
 * model's settings from that load on, until a load without one: the app's
 * overrides, guarded by cfg_lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "config/triton.h"
#include "server/app_impl.h"

/* 0 and *out, a path under model_dir, or FS_EINVAL when too long. */
static int model_path(char *out, size_t len, const char *model_dir, const char *file)
{
    int n = snprintf(out, len, "%s/%s", model_dir, file);
    if (n < 0 || (size_t)n >= len)
        return fs_err(FS_EINVAL, "path '%s/%s' is too long", model_dir, file);
    return 0;
}

static int config_file_read(srv_app_t *app, const char *name, const char *model_dir,
                            cfg_model_t *out);

/* The origin load overrides are named by in messages. */
#define OVERRIDE_ORIGIN "load parameter \"config\""

struct srv_config_override {
    char name[ENG_MODEL_NAME_MAX];
    char *json;                   /* owned */
    struct srv_config_override *next;
};

int srv_model_override_swap(srv_app_t *app, const char *name, char *json, char **prev)
{
    *prev = NULL;
    pthread_mutex_lock(&app->cfg_lock);
    srv_config_override_t **at = &app->overrides;
    while (*at && strcmp((*at)->name, name) != 0)
        at = &(*at)->next;
    srv_config_override_t *o = *at;
    if (json && !o && !(o = calloc(1, sizeof *o))) {
        pthread_mutex_unlock(&app->cfg_lock);
        free(json);
        return fs_err(FS_ENOMEM, "out of host memory keeping the " OVERRIDE_ORIGIN " of '%s'",
                      name);
    }
    if (json && !*at) {
        snprintf(o->name, sizeof o->name, "%s", name);
        o->next = app->overrides;
        app->overrides = o;
    }
    if (o)
        *prev = o->json;
    if (json) {
        o->json = json;
    } else if (o) { /* cleared */
        *at = o->next;
        free(o);
    }
    pthread_mutex_unlock(&app->cfg_lock);
    return 0;
}

void srv_model_overrides_free(srv_app_t *app)
{
    while (app->overrides) {
        srv_config_override_t *o = app->overrides;
        app->overrides = o->next;
        free(o->json);
        free(o);
    }
}

/* The override of `name` parsed into *t: 0 and *found, or the parse's
 * error (FS_EPARSE, FS_EINVAL) naming OVERRIDE_ORIGIN, or FS_ENOMEM. */
static int override_parse(srv_app_t *app, const char *name, cfg_triton_t *t, bool *found)
{
    pthread_mutex_lock(&app->cfg_lock);
    const srv_config_override_t *o = app->overrides;
    while (o && strcmp(o->name, name) != 0)
        o = o->next;
    char *json = o ? strdup(o->json) : NULL;
    bool lost = o && !json;
    pthread_mutex_unlock(&app->cfg_lock);
    *found = o != NULL;
    if (lost)
        return fs_err(FS_ENOMEM, "out of host memory reading the " OVERRIDE_ORIGIN " of '%s'",
                      name);
    int rc = json ? cfg_triton_parse_json(json, strlen(json), OVERRIDE_ORIGIN, t) : 0;
    free(json);
    return rc;
}

int srv_model_config_read(srv_app_t *app, const char *name, const char *model_dir,
                          cfg_model_t *out)
{
    cfg_triton_t *t = calloc(1, sizeof *t);
    if (!t)
        return fs_err(FS_ENOMEM, "out of host memory reading the configuration of '%s'", name);
    bool over = false;
    int rc = override_parse(app, name, t, &over);
    if (over && rc == 0) {
        pthread_mutex_lock(&app->cfg_lock);
        cfg_model_defaults(&app->cfg, out);
        pthread_mutex_unlock(&app->cfg_lock);
        rc = cfg_triton_apply(t, OVERRIDE_ORIGIN, name, &app->dev, out);
    }
    free(t);
    return over || rc != 0 ? rc : config_file_read(app, name, model_dir, out);
}

/* The model directory's config.json or config.pbtxt over the defaults. */
static int config_file_read(srv_app_t *app, const char *name, const char *model_dir,
                            cfg_model_t *out)
{
    char json[CFG_PATH_MAX + ENG_MODEL_NAME_MAX + 32], pbtxt[sizeof json];
    int rc = model_path(json, sizeof json, model_dir, "config.json");
    if (rc == 0)
        rc = model_path(pbtxt, sizeof pbtxt, model_dir, "config.pbtxt");
    if (rc != 0)
        return rc;
    bool has_pbtxt = access(pbtxt, F_OK) == 0;
    if (has_pbtxt && access(json, F_OK) == 0)
        return fs_err(FS_EINVAL, "model '%s' has both %s and %s: keep one (config/README.md, "
                      "\"A model's configuration\")", name, pbtxt, json);
    pthread_mutex_lock(&app->cfg_lock);
    if (!has_pbtxt) {
        rc = cfg_model_load_file(json, &app->cfg, out);
        pthread_mutex_unlock(&app->cfg_lock);
        return rc;
    }
    cfg_model_defaults(&app->cfg, out);
    pthread_mutex_unlock(&app->cfg_lock);
    cfg_triton_t *t = calloc(1, sizeof *t);
    if (!t)
        return fs_err(FS_ENOMEM, "out of host memory reading %s", pbtxt);
    rc = cfg_triton_load_file(pbtxt, t, NULL);
    if (rc == 0)
        rc = cfg_triton_apply(t, pbtxt, name, &app->dev, out);
    free(t);
    return rc;
}

/* One declared tensor against the model's: the dtype, and the dims --
 * without the batch dim when max_batch_size > 0, which the model must then
 * have symbolic in front. `narrow` (an input's request check; NULL for an
 * output) takes a fixed dim declared where the model's is symbolic, so
 * requests are held to it; an output's such dim is refused, since what
 * the model produces is not checked against it. */
static int io_verify(const cfg_triton_io_t *want, const eng_io_info_t *io, bool batch,
                     const char *origin, const char *what, eng_io_info_t *narrow)
{
    int dt = cfg_triton_dtype_to_eng(want->data_type);
    if (dt != (int)io->dtype)
        return fs_err(FS_EINVAL, "%s: %s '%s': data_type is %s, but the model's is %s", origin,
                      what, want->name, cfg_triton_dtype_name(want->data_type),
                      eng_dtype_name(io->dtype));
    if (io->rank < 0)
        return 0; /* the model does not say: its requests are checked as they come */
    char shape[96];
    eng_io_info_format(io, shape, sizeof shape);
    size_t lead = batch ? 1 : 0;
    if ((size_t)io->rank != want->n_dims + lead)
        return fs_err(FS_EINVAL, "%s: %s '%s': %zu dims%s, but the model's shape is %s", origin,
                      what, want->name, want->n_dims,
                      batch ? " and the batch dim (max_batch_size > 0)" : "", shape);
    if (batch && io->dims[0] >= 0)
        return fs_err(FS_EINVAL, "%s: %s '%s': max_batch_size > 0, but the model's first dim is "
                      "fixed (shape %s); set max_batch_size: 0 and list every dim", origin, what,
                      want->name, shape);
    for (size_t d = 0; d < want->n_dims; d++) {
        int64_t m = io->dims[d + lead], w = want->dims[d];
        if (w == -1 || w == m)
            continue;
        if (m < 0 && narrow) {
            narrow->dims[d + lead] = w;
            narrow->dim_params[d + lead] = NULL;
            continue;
        }
        if (m < 0)
            return fs_err(FS_ENOTSUP, "%s: %s '%s': dims[%zu] is %lld where the model's dim is "
                          "symbolic (shape %s); an output's dims cannot narrow the model's: "
                          "write -1", origin, what, want->name, d, (long long)w, shape);
        return fs_err(FS_EINVAL, "%s: %s '%s': dims[%zu] is %lld, but the model's is %lld (shape "
                      "%s)", origin, what, want->name, d, (long long)w, (long long)m, shape);
    }
    return 0;
}

int srv_model_verify(void *user, const char *name, const char *model_dir,
                     const eng_model_t *model, const eng_serve_options_t *opts,
                     eng_io_info_t *inputs, size_t n_inputs)
{
    char pbtxt[CFG_PATH_MAX + ENG_MODEL_NAME_MAX + 32];
    int rc = model_path(pbtxt, sizeof pbtxt, model_dir, "config.pbtxt");
    if (rc != 0)
        return rc;
    cfg_triton_t *t = calloc(1, sizeof *t);
    if (!t)
        return fs_err(FS_ENOMEM, "out of host memory reading %s", pbtxt);
    bool found = false;
    rc = override_parse(user, name, t, &found);
    if (rc == 0 && found)
        snprintf(pbtxt, sizeof pbtxt, "%s", OVERRIDE_ORIGIN); /* messages name it */
    else if (rc == 0)
        rc = cfg_triton_load_file(pbtxt, t, &found);
    bool batch = t->max_batch_size > 0;
    for (int out = 0; rc == 0 && found && out < 2; out++) {
        const cfg_triton_io_t *list = out ? t->outputs : t->inputs;
        size_t n = out ? t->n_outputs : t->n_inputs;
        const char *what = out ? "output" : "input";
        for (size_t i = 0; rc == 0 && i < n; i++) {
            long k = out ? eng_io_output_find(model, list[i].name)
                         : eng_io_input_find(model, list[i].name);
            eng_io_info_t io;
            if (k < 0 || (out ? eng_model_output(model, (size_t)k, &io)
                              : eng_model_input(model, (size_t)k, &io)) != 0) {
                rc = fs_err(FS_EINVAL, "%s: %s '%s' is not an %s of the model", pbtxt, what,
                            list[i].name, what);
                break;
            }
            rc = io_verify(&list[i], &io, batch, pbtxt, what,
                           !out && (size_t)k < n_inputs ? &inputs[k] : NULL);
        }
    }
    free(t);
    return rc;
}
