/* app.h -- a running flatserve: the device and its caches with the
 * configured release policies, the model registry, the HTTP server and the
 * policy timer, built from one cfg_t. main() wraps it with flags and
 * signals; the integration tests start it in-process on an ephemeral port.
 *
 * Threading: srv_app_start, srv_app_reload and srv_app_stop are called from
 * one thread (main's); everything else runs on the app's own threads. */
#ifndef FS_SERVER_APP_H
#define FS_SERVER_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "engine/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct srv_app srv_app_t;

/* Brings everything up: opens the device ("auto": cuda:0 when a GPU
 * answers, else the CPU, logging why), attaches the policies, checks the
 * repository and loads the start-up models, listens, and turns ready.
 * 0 and *out (caller frees with srv_app_stop), or the error (the device
 * cannot be opened, the port cannot be bound, a policy is invalid; with
 * cfg's server.exit_on_error also the repository missing or unreadable,
 * or a start-up model that did not load: each failure is logged, the
 * message counts them and names the first) with its message and nothing
 * left running. Without exit_on_error those are logged, the failed
 * models stay UNAVAILABLE with their errors, and the server starts. */
int srv_app_start(const cfg_t *cfg, srv_app_t **out);

/* The models that should be loaded now (strict readiness waits for each
 * to be READY), by model_control_mode: explicit, the startup list ("*":
 * every model directory at start) plus the models the repository API
 * loaded since, less those it unloaded; none, every model directory at
 * start; poll, every model directory at the last look. A startup model
 * that failed to load stays in the set. 0 and *out (sorted by name; caller
 * frees with free(); NULL when n is 0), or FS_ENOMEM. */
int srv_app_models_wanted(srv_app_t *app, char (**out)[ENG_MODEL_NAME_MAX], size_t *n);
/* Whether every wanted model is READY; when not, `why` (len bytes, always
 * terminated) names the first that is not and its state and reason.
 * false with the error in `why` when the index cannot be read. */
bool srv_app_models_ready(srv_app_t *app, char *why, size_t len);

/* The bound port (the ephemeral one when cfg's port was 0). */
uint16_t srv_app_port(const srv_app_t *app);
/* The device the app serves on: "cpu" or "cuda:N". */
const char *srv_app_device(const srv_app_t *app);

/* Applies a re-read configuration (SIGHUP): memory policies and the timer
 * period, batching of every loaded model, and logging apply now; the keys
 * that need a restart are logged at WARN. 0, or FS_EINVAL (a policy that
 * cannot be built: nothing changed). */
int srv_app_reload(srv_app_t *app, const cfg_t *cfg);

/* Graceful stop: not ready, stop accepting connections, answer every
 * request in flight (waiting at most cfg's server.shutdown_timeout), then
 * unload every model and free everything. Returns 0; FS_EBUSY when a cache
 * still held allocated bytes once every model was gone (everything is
 * freed anyway); or FS_ETIMEDOUT when requests were still in flight at the
 * deadline (the process should then exit without freeing: the app is left
 * running). NULL is a no-op. */
int srv_app_stop(srv_app_t *app);

#ifdef __cplusplus
}
#endif
#endif
