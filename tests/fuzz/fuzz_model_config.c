/* fuzz_model_config.c -- fuzz target "model_config": config/'s
 * cfg_model_parse on the bytes as a model's config.json, over the server
 * defaults (config/README.md, "A model's config.json").
 *
 * Checks, on a refusal: FS_EPARSE / FS_EINVAL (FS_ENOMEM) with a message
 * that names the file, and the model config left as it was. On success:
 * batching and engine within their documented ranges, and the device
 * unset or a concrete one ("auto" is refused in a model's file). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

#define MODEL_CONFIG_ORIGIN "models/m/config.json"

int fuzz_model_config_one(const uint8_t *data, size_t size)
{
    static const int codes[] = {FS_EPARSE, FS_EINVAL, FS_ENOMEM};
    cfg_t *defaults = malloc(sizeof *defaults);
    if (!defaults)
        return fs_err(FS_ENOMEM, "out of memory for a config");
    cfg_defaults(defaults);
    cfg_model_t mc, before;
    /* Zeroed first, so that padding compares equal below. */
    memset(&mc, 0, sizeof mc);
    cfg_model_defaults(defaults, &mc);
    free(defaults);
    memcpy(&before, &mc, sizeof mc);
    fs_err_clear();
    int rc = cfg_model_parse((const char *)data, size, MODEL_CONFIG_ORIGIN, &mc);
    if (rc != 0) {
        rc = fuzz_refusal_check("cfg_model_parse", rc, codes, 3);
        if (rc == 0 && strncmp(fs_errmsg(), MODEL_CONFIG_ORIGIN ": ",
                               strlen(MODEL_CONFIG_ORIGIN ": ")) != 0)
            rc = fs_err(FS_ESTATE, "cfg_model_parse's message does not name the file: %s",
                        fs_errmsg());
        if (rc == 0 && memcmp(&mc, &before, sizeof mc) != 0)
            rc = fs_err(FS_ESTATE, "cfg_model_parse failed and changed the model config");
        return rc;
    }
    const char *w = MODEL_CONFIG_ORIGIN " accepted";
    rc = fuzz_config_device_check(&mc.device, false, w);
    if (rc == 0)
        rc = fuzz_config_batching_check(&mc.batching, w);
    if (rc == 0)
        rc = fuzz_config_engine_check(&mc.engine, w);
    return rc;
}
