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
 * its next look). */
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

int srv_model_config_read(srv_app_t *app, const char *name, const char *model_dir,
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
