/* readiness.c -- strict readiness: /v2/health/ready is 200 only when every
 * model that should be loaded is READY (Triton's rule), so a Kubernetes
 * readiness probe never sends traffic to a pod that cannot serve.
 *
 * "The models that should be loaded" is model_control.c's wanted set: the
 * start-up models of the model control mode, plus each model loaded since
 * through the repository API, less each model unloaded through it (an
 * operator's unload says the model is no longer wanted; a load that
 * failed adds nothing, so a mistyped name does not take the pod out of
 * service); in poll mode, the model directories of the last look. A reload that fails while an older version keeps serving
 * leaves the model READY (the registry keeps the old one), so readiness
 * holds; a model of the set that is not READY -- its load failed with no
 * version to keep, it is loading or unloading, or its directory is gone
 * -- makes readiness 503 naming it.
 *
 * With server.exit_on_error false the models are not checked: the server
 * is ready once start-up is done, whatever loaded. */
#include <stdio.h>

#include "common/error.h"
#include "server/app_impl.h"

bool srv_ready_check(srv_app_t *app, char *why, size_t len)
{
    why[0] = '\0';
    if (!atomic_load(&app->ready)) {
        snprintf(why, len, "%s", atomic_load(&app->draining) ? "the server is shutting down"
                                                             : "the server is starting");
        return false;
    }
    if (!app->cfg.server.exit_on_error)
        return true;
    return srv_app_models_ready(app, why, len);
}
