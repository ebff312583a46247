/* run.h -- one load test against one server: set up from the settings and
 * the models' metadata, driven to its end, and reported.
 *
 * Threading: an lg_run_t belongs to one thread (everything, traffic,
 * sampling and model churn, runs in one libcurl multi loop on it). */
#ifndef FS_LOADTEST_RUN_H
#define FS_LOADTEST_RUN_H

#include <stdio.h>

#include "loadtest/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lg_run lg_run_t;

/* Fetches every model's metadata from the server and binds its dynamic
 * axes to o. `o` is borrowed and must outlive the run. Returns 0 and *out
 * (caller frees with lg_run_destroy), or a negative FS_E* code with the
 * message: FS_EIO when the server cannot be reached, FS_ENOENT when a model
 * is not served, FS_EINVAL for a dynamic axis left uncovered. Needs
 * curl_global_init done. */
int lg_run_create(const lg_opts_t *o, lg_run_t **out);

/* Sends the traffic, runs the reloads and cycles, samples, drains every
 * request, then idles if asked. Returns 0 when the run went to its end
 * (whatever the server answered), or a negative code when the run itself
 * could not go on (the CSV cannot be written, a request cannot be built). */
int lg_run_execute(lg_run_t *run);

/* Prints the summary and the verdict to `out`, writes the --summary JSON
 * and the --plot files. Returns the exit status: 0 every bound held, 1 a
 * bound failed or a request was lost. A file that cannot be written is
 * reported on stderr and makes the status 1. */
int lg_run_report(lg_run_t *run, FILE *out);

/* Frees everything; NULL is a no-op. */
void lg_run_destroy(lg_run_t *run);

#ifdef __cplusplus
}
#endif
#endif
