/* main.c -- the flatserve executable: flags and config file, then the app,
 * then signals.
 *
 * Signals are blocked in every thread (the mask is set before any thread
 * starts) and taken by main alone with sigwait, so handlers never run on a
 * serving thread. SIGTERM and SIGINT stop gracefully: not ready, stop
 * accepting, answer what is in flight (bounded by
 * server.shutdown_timeout), free, exit 0; past the bound, exit 1 without
 * freeing. SIGHUP re-reads the --config file and applies what can change
 * live. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crash.h"
#include "common/error.h"
#include "common/log.h"
#include "config/config.h"
#include "server/app.h"

/* SIGHUP: the same flags over a fresh read of the file. */
static void reload(srv_app_t *app, int argc, char **argv)
{
    cfg_t cfg;
    cfg_action_t action;
    const char *path = NULL;
    if (cfg_from_args(argc, argv, &cfg, &action, &path) != 0) {
        FS_LOG_E("main", "SIGHUP: the configuration is not valid, nothing changed: %s",
                 fs_errmsg());
        return;
    }
    if (!path)
        FS_LOG_W("main", "SIGHUP: no --config file to re-read; flags only");
    if (srv_app_reload(app, &cfg) != 0)
        FS_LOG_E("main", "SIGHUP: nothing changed: %s", fs_errmsg());
}

int main(int argc, char **argv)
{
    cfg_t cfg;
    cfg_action_t action;
    const char *path = NULL;
    if (cfg_from_args(argc, argv, &cfg, &action, &path) != 0) {
        fprintf(stderr, "flatserve: %s\n", fs_errmsg());
        return 2;
    }
    switch (action) {
    case CFG_ACTION_HELP:
        cfg_usage(stdout);
        return 0;
    case CFG_ACTION_VERSION:
        printf("flatserve %s\n", CFG_VERSION);
        return 0;
    case CFG_ACTION_CHECK: {
        char *text = cfg_to_json(&cfg);
        if (!text) {
            fprintf(stderr, "flatserve: out of memory\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
        return 0;
    }
    case CFG_ACTION_SERVE:
        break;
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* A client gone mid-answer must not kill the process. */
    signal(SIGPIPE, SIG_IGN);
    /* A crash writes its stack to stderr (the log) before the process dies. */
    fs_crash_handlers_install("flatserve");

    srv_app_t *app = NULL;
    if (srv_app_start(&cfg, &app) != 0) {
        FS_LOG_E("main", "cannot start: %s", fs_errmsg());
        return 1;
    }
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            FS_LOG_I("main", "SIGHUP: re-reading the configuration");
            reload(app, argc, argv);
            continue;
        }
        FS_LOG_I("main", "%s: stopping gracefully", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
    }
    if (srv_app_stop(app) != 0)
        return 1;
    FS_LOG_I("main", "stopped");
    return 0;
}
