/* readiness.c -- strict readiness: /v2/health/ready is 200 only when every
 * model that should be loaded is READY (Triton's rule), so a Kubernetes
 * readiness probe never sends traffic to a pod that cannot serve.
 *
 * "The models that should be loaded" is a set kept in the app: the
 * start-up models (app.c's startup_models), plus each model loaded since
 * through the repository API, less each model unloaded through it (an
 * operator's unload says the model is no longer wanted; a load that
 * failed adds nothing, so a mistyped name does not take the pod out of
 * service). A reload that fails while an older version keeps serving
 * leaves the model READY (the registry keeps the old one), so readiness
 * holds; a model of the set that is not READY -- its load failed with no
 * version to keep, it is loading or unloading, or its directory is gone
 * -- makes readiness 503 naming it.
 *
 * With server.exit_on_error false the models are not checked: the server
 * is ready once start-up is done, whatever loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/app_impl.h"

/* The index of `name` in the sorted set, or where it would go (*found
 * false). expect_lock held. */
static size_t expect_find_locked(const srv_app_t *app, const char *name, bool *found)
{
    size_t lo = 0, hi = app->n_expect;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(app->expect[mid], name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

int srv_ready_expect(srv_app_t *app, const char *name)
{
    if (strlen(name) >= ENG_MODEL_NAME_MAX)
        return fs_err(FS_EINVAL, "model name '%.40s...' is too long", name);
    int rc = 0;
    pthread_mutex_lock(&app->expect_lock);
    bool found;
    size_t at = expect_find_locked(app, name, &found);
    if (!found && app->n_expect == app->cap_expect) {
        size_t cap = app->cap_expect ? app->cap_expect * 2 : 16;
        void *grown = realloc(app->expect, cap * sizeof *app->expect);
        if (grown) {
            app->expect = grown;
            app->cap_expect = cap;
        } else {
            rc = fs_err(FS_ENOMEM, "out of host memory noting model '%s' as expected", name);
        }
    }
    if (!found && rc == 0) {
        memmove(&app->expect[at + 1], &app->expect[at], (app->n_expect - at) * sizeof *app->expect);
        snprintf(app->expect[at], sizeof app->expect[at], "%s", name);
        app->n_expect++;
    }
    pthread_mutex_unlock(&app->expect_lock);
    return rc;
}

void srv_ready_forget(srv_app_t *app, const char *name)
{
    pthread_mutex_lock(&app->expect_lock);
    bool found;
    size_t at = expect_find_locked(app, name, &found);
    if (found) {
        memmove(&app->expect[at], &app->expect[at + 1],
                (app->n_expect - at - 1) * sizeof *app->expect);
        app->n_expect--;
    }
    pthread_mutex_unlock(&app->expect_lock);
}

void srv_ready_free(srv_app_t *app)
{
    free(app->expect);
    app->expect = NULL;
    app->n_expect = app->cap_expect = 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const eng_model_entry_t *)a)->name, ((const eng_model_entry_t *)b)->name);
}

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
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    if (eng_registry_index(app->registry, &entries, &n) != 0) {
        snprintf(why, len, "the model repository cannot be read: %s", fs_errmsg());
        return false;
    }
    /* Sorted here with the set's own order, whatever the index's is. */
    qsort(entries, n, sizeof *entries, entry_cmp);
    size_t n_bad = 0, n_expect;
    pthread_mutex_lock(&app->expect_lock);
    n_expect = app->n_expect;
    for (size_t i = 0; i < app->n_expect; i++) {
        eng_model_entry_t key;
        snprintf(key.name, sizeof key.name, "%s", app->expect[i]);
        const eng_model_entry_t *e = bsearch(&key, entries, n, sizeof *entries, entry_cmp);
        if (e && e->state == ENG_MODEL_READY)
            continue;
        if (n_bad++ > 0)
            continue;
        if (!e)
            snprintf(why, len, "model '%s' is not in the repository", app->expect[i]);
        else
            snprintf(why, len, "model '%s' is %s%s%s", e->name, eng_model_state_name(e->state),
                     e->reason[0] ? ": " : "", e->reason);
    }
    pthread_mutex_unlock(&app->expect_lock);
    free(entries);
    if (n_bad == 0)
        return true;
    char first[FS_ERRMSG_MAX];
    snprintf(first, sizeof first, "%s", why);
    snprintf(why, len, "%zu of the %zu models that should be loaded %s not ready; %s", n_bad,
             n_expect, n_bad == 1 ? "is" : "are", first);
    return false;
}
