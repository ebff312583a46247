/* loadgen_main.c -- main() of loadgen, flatserve's load generator: settings,
 * the run, the report, the exit status (0 pass, 1 a bound failed or a
 * request was lost, 2 bad usage or a run that could not start). */
#include <curl/curl.h>
#include <stdio.h>

#include "common/error.h"
#include "loadtest/options.h"
#include "loadtest/run.h"

int main(int argc, char **argv)
{
    lg_opts_t o;
    if (lg_opts_parse_args(&o, argc, argv) != 0) {
        fprintf(stderr, "loadgen: %s\n", fs_errmsg());
        return 2;
    }
    if (o.help) {
        lg_opts_print_help(stdout);
        return 0;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "loadgen: curl_global_init failed\n");
        return 2;
    }
    lg_run_t *run = NULL;
    int status = 2;
    if (lg_run_create(&o, &run) != 0) {
        fprintf(stderr, "loadgen: %s\n", fs_errmsg());
        goto done;
    }
    int rc = lg_run_execute(run);
    if (rc != 0)
        fprintf(stderr, "loadgen: the run stopped early: %s\n", fs_errmsg());
    status = lg_run_report(run, stdout);
    if (rc != 0)
        status = 2;
done:
    lg_run_destroy(run);
    curl_global_cleanup();
    return status;
}
