/* model_control.c -- model control like Triton's --model-control-mode: which
 * models load at start, whether the repository API may load and unload,
 * the poll mode's watcher, and the set of models that should be loaded
 * (what strict readiness waits for).
 *
 * - explicit (default): `models` at start ("*": every model directory);
 *   the API loads and unloads.
 * - none: every model directory at start; the API refuses.
 * - poll: as none, then every repository_poll_secs the repository is
 *   looked at again: a model whose files changed (or a new one) is loaded
 *   through eng_registry_load, which rebuilds and hot-swaps it (the old
 *   version drains, its bytes are checked), and a model whose directory is
 *   gone is unloaded.
 *
 * The wanted set: the models that should be loaded. At start, the startup
 * set (a name whose load fails is still wanted: it is why the server is
 * not ready). explicit: a successful API load adds its model, an unload
 * removes it. poll: each look replaces it with the directories seen.
 *
 * A look's change detection: per model, a hash of the (name, inode, size,
 * mtime) of config.json, config.pbtxt and each file of each version
 * directory, combined by addition so that the order readdir gives does not
 * matter. A file still being copied when it is looked at changes again
 * before the next look, which loads it again. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/log.h"
#include "common/sync.h"
#include "server/app_impl.h"

#define CONTROL_PATH_MAX 4096

typedef struct control_seen {
    char name[ENG_MODEL_NAME_MAX];
    uint64_t print;                  /* the files' hash at the last look */
} control_seen_t;

struct srv_control {
    srv_app_t *app;                  /* borrowed */
    cfg_control_t mode;
    uint64_t period_ns;
    char repository[CFG_PATH_MAX];   /* a copy: app->cfg may be rewritten by SIGHUP */
    pthread_mutex_t lock;            /* guards everything below */
    /* The wanted set, sorted by name. */
    char (*wanted)[ENG_MODEL_NAME_MAX];
    size_t n_wanted, cap_wanted;
    /* poll: what the last look saw (the poller thread alone writes it). */
    control_seen_t *seen;
    size_t n_seen;
    pthread_cond_t wake;             /* stop */
    bool stop;
    bool started;
    pthread_t poller;
};

/* ---- the wanted set --------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Adds or removes `name` (c->lock held). 0, or FS_ENOMEM with nothing changed. */
static int wanted_set_locked(srv_control_t *c, const char *name, bool want)
{
    for (size_t i = 0; i < c->n_wanted; i++) {
        if (strcmp(c->wanted[i], name) != 0)
            continue;
        if (!want) {
            memmove(c->wanted[i], c->wanted[i + 1], (c->n_wanted - i - 1) * sizeof c->wanted[0]);
            c->n_wanted--;
        }
        return 0;
    }
    if (!want)
        return 0;
    if (c->n_wanted == c->cap_wanted) {
        size_t cap = c->cap_wanted ? 2 * c->cap_wanted : 16;
        void *p = realloc(c->wanted, cap * sizeof c->wanted[0]);
        if (!p)
            return fs_err(FS_ENOMEM, "out of host memory for the wanted models");
        c->wanted = p;
        c->cap_wanted = cap;
    }
    snprintf(c->wanted[c->n_wanted++], sizeof c->wanted[0], "%s", name);
    qsort(c->wanted, c->n_wanted, sizeof c->wanted[0], name_cmp);
    return 0;
}

void srv_control_want(srv_app_t *app, const char *name, bool want)
{
    srv_control_t *c = app->control;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    if (wanted_set_locked(c, name, want) != 0)
        FS_LOG_E("control", "model '%s': %s", name, fs_errmsg());
    pthread_mutex_unlock(&c->lock);
}

int srv_app_models_wanted(srv_app_t *app, char (**out)[ENG_MODEL_NAME_MAX], size_t *n)
{
    *out = NULL;
    *n = 0;
    srv_control_t *c = app->control;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (c->n_wanted) {
        *out = malloc(c->n_wanted * sizeof **out);
        if (*out) {
            memcpy(*out, c->wanted, c->n_wanted * sizeof **out);
            *n = c->n_wanted;
        } else {
            rc = fs_err(FS_ENOMEM, "out of host memory for the wanted models");
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

bool srv_app_models_ready(srv_app_t *app, char *why, size_t len)
{
    char(*wanted)[ENG_MODEL_NAME_MAX] = NULL;
    size_t n_wanted = 0, n_index = 0;
    eng_model_entry_t *index = NULL;
    if (srv_app_models_wanted(app, &wanted, &n_wanted) != 0 ||
        (n_wanted && eng_registry_index(app->registry, &index, &n_index) != 0)) {
        snprintf(why, len, "%s", fs_errmsg());
        free(wanted);
        return false;
    }
    size_t n_bad = 0;
    char first[FS_ERRMSG_MAX] = "";
    for (size_t i = 0; i < n_wanted; i++) {
        const eng_model_entry_t *e = NULL;
        for (size_t j = 0; !e && j < n_index; j++)
            if (strcmp(index[j].name, wanted[i]) == 0)
                e = &index[j];
        if ((e && e->state == ENG_MODEL_READY) || n_bad++ > 0)
            continue;
        if (!e)
            snprintf(first, sizeof first, "model '%s' is not in the repository", wanted[i]);
        else
            snprintf(first, sizeof first, "model '%s' is %s%s%.400s", wanted[i],
                     eng_model_state_name(e->state), e->reason[0] ? ": " : "", e->reason);
    }
    if (len)
        why[0] = '\0';
    if (n_bad > 0)
        snprintf(why, len, "%zu of the %zu models that should be loaded %s not ready; %.400s", n_bad,
                 n_wanted, n_bad == 1 ? "is" : "are", first);
    free(index);
    free(wanted);
    return n_bad == 0;
}

const char *srv_control_api_refusal(const srv_app_t *app)
{
    const srv_control_t *c = app->control;
    if (!c || c->mode == CFG_CONTROL_EXPLICIT)
        return NULL;
    return c->mode == CFG_CONTROL_POLL
               ? "the model control mode is poll: models load and unload as the repository "
                 "changes, not on request (start with --model-control-mode explicit)"
               : "the model control mode is none: every model loads at start, none on request "
                 "(start with --model-control-mode explicit)";
}

/* ---- looking at the repository --------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* "a/b" into buf; false when it does not fit (such a path is skipped: the
 * registry refuses it too). */
static bool path_join2(char *buf, size_t len, const char *a, const char *b)
{
    int n = snprintf(buf, len, "%s/%s", a, b);
    return n >= 0 && (size_t)n < len;
}

/* One file's or directory's contribution: a hash of its path below the
 * model directory and its stat, or 0 when it does not exist. */
static uint64_t entry_print(const char *path, const char *rel)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    uint64_t h = fnv1a(14695981039346656037ull, rel, strlen(rel));
    uint64_t v[4] = {(uint64_t)st.st_ino, (uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec,
                     (uint64_t)st.st_mtim.tv_nsec};
    return fnv1a(h, v, sizeof v);
}

/* The model directory's hash (see the file comment). */
static uint64_t model_print(const char *dir)
{
    char path[CONTROL_PATH_MAX], rel[CONTROL_PATH_MAX];
    uint64_t sum = 0;
    const char *configs[] = {"config.json", "config.pbtxt"};
    for (int i = 0; i < 2; i++)
        if (path_join2(path, sizeof path, dir, configs[i]))
            sum += entry_print(path, configs[i]);
    DIR *d = opendir(dir);
    if (!d)
        return sum;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9' ||
            !path_join2(path, sizeof path, dir, de->d_name))
            continue;
        sum += entry_print(path, de->d_name);
        DIR *vd = opendir(path);
        if (!vd)
            continue;
        struct dirent *fe;
        while ((fe = readdir(vd)) != NULL) {
            if (strcmp(fe->d_name, ".") == 0 || strcmp(fe->d_name, "..") == 0)
                continue;
            char file[CONTROL_PATH_MAX];
            if (path_join2(file, sizeof file, path, fe->d_name) &&
                path_join2(rel, sizeof rel, de->d_name, fe->d_name))
                sum += entry_print(file, rel);
        }
        closedir(vd);
    }
    closedir(d);
    return sum;
}

/* Every model directory of the repository with its hash: 0 and *out
 * (caller frees with free()), or FS_EIO / FS_ENOMEM. */
static int repository_look(const char *repo, control_seen_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(repo);
    if (!d)
        return fs_err(FS_EIO, "repository '%s': %s", repo, strerror(errno));
    control_seen_t *list = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t at;
        char dir[CONTROL_PATH_MAX];
        struct stat st;
        if (eng_registry_name_problem(de->d_name, &at) ||
            !path_join2(dir, sizeof dir, repo, de->d_name) ||
            stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == cap) {
            size_t grown = cap ? 2 * cap : 16;
            control_seen_t *p = realloc(list, grown * sizeof *p);
            if (!p) {
                rc = fs_err(FS_ENOMEM, "out of host memory looking at the repository");
                break;
            }
            list = p;
            cap = grown;
        }
        /* A valid name is shorter than ENG_MODEL_NAME_MAX. */
        memcpy(list[n].name, de->d_name, strlen(de->d_name) + 1);
        list[n].print = model_print(dir);
        n++;
    }
    closedir(d);
    if (rc != 0) {
        free(list);
        return rc;
    }
    if (n)
        qsort(list, n, sizeof *list, name_cmp);
    *out = list;
    *n_out = n;
    return 0;
}

static const control_seen_t *seen_find(const control_seen_t *list, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0)
            return &list[i];
    return NULL;
}

/* One look of the poll mode: loads what is new or changed, unloads what
 * is gone, and makes the directories seen the wanted set. */
static void poll_once(srv_control_t *c)
{
    srv_app_t *app = c->app;
    control_seen_t *now = NULL;
    size_t n_now = 0;
    if (repository_look(c->repository, &now, &n_now) != 0) {
        /* The models loaded keep serving; the next look tries again. */
        FS_LOG_W("control", "poll: %s", fs_errmsg());
        return;
    }
    for (size_t i = 0; i < c->n_seen; i++) {
        if (seen_find(now, n_now, c->seen[i].name))
            continue;
        FS_LOG_I("control", "poll: model '%s' left the repository; unloading", c->seen[i].name);
        srv_control_want(app, c->seen[i].name, false);
        int rc = eng_registry_unload(app->registry, c->seen[i].name);
        if (rc != 0 && rc != FS_ENOENT)
            FS_LOG_W("control", "poll: %s", fs_errmsg());
    }
    for (size_t i = 0; i < n_now; i++) {
        const control_seen_t *was = seen_find(c->seen, c->n_seen, now[i].name);
        srv_control_want(app, now[i].name, true);
        if (was && was->print == now[i].print)
            continue;
        FS_LOG_I("control", "poll: model '%s' %s; loading", now[i].name,
                 was ? "changed" : "is new");
        if (eng_registry_load(app->registry, now[i].name) != 0)
            FS_LOG_E("control", "poll: model '%s' did not load: %s", now[i].name, fs_errmsg());
    }
    free(c->seen);
    c->seen = now;
    c->n_seen = n_now;
}

static void *poller_main(void *arg)
{
    srv_control_t *c = arg;
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        fs_cond_timedwait_ns(&c->wake, &c->lock, c->period_ns);
        if (c->stop)
            break;
        pthread_mutex_unlock(&c->lock);
        poll_once(c);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* ---- start and stop --------------------------------------------------------------- */

/* Loads `name` at start and makes it wanted; a failed load is logged (the
 * model stays UNAVAILABLE with its error, and wanted), counted in *failed,
 * and the first one's error kept in first (FS_ERRMSG_MAX bytes) and *first_rc. */
static void startup_load(srv_control_t *c, const char *name, size_t *failed, char *first,
                         int *first_rc)
{
    srv_control_want(c->app, name, true);
    int rc = eng_registry_load(c->app->registry, name);
    if (rc == 0)
        return;
    FS_LOG_E("app", "model '%s' did not load: %s", name, fs_errmsg());
    if ((*failed)++ == 0) {
        *first_rc = rc;
        snprintf(first, FS_ERRMSG_MAX, "model '%s': %s", name, fs_errmsg());
    }
}

/* The repository must be a directory this process can read: 0, or
 * FS_ENOENT / FS_EIO naming the path and why. */
static int repository_check(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fs_err(errno == ENOENT ? FS_ENOENT : FS_EIO, "model repository '%s': %s", path,
                      strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return fs_err(FS_EIO, "model repository '%s' is not a directory", path);
    DIR *d = opendir(path);
    if (!d)
        return fs_err(FS_EIO, "model repository '%s' cannot be read: %s", path, strerror(errno));
    closedir(d);
    return 0;
}

int srv_control_start(srv_app_t *app)
{
    const cfg_t *cfg = &app->cfg;
    if (cfg->model_control_mode != CFG_CONTROL_EXPLICIT && !cfg->models_all)
        return fs_err(FS_EINVAL, "models (--model, --load-model) lists %zu model%s, but "
                      "model_control_mode %s loads every model of the repository; the list "
                      "applies in explicit mode", cfg->n_models, cfg->n_models == 1 ? "" : "s",
                      cfg_control_name(cfg->model_control_mode));
    /* Strict start (server.exit_on_error): a missing or unreadable
     * repository, or a start-up model that does not load, ends start-up. */
    const bool strict = cfg->server.exit_on_error;
    const char *hint = "; --exit-on-error=false (server.exit_on_error) serves what loads";
    int rc = repository_check(cfg->repository);
    if (rc != 0 && strict)
        return fs_err(rc, "%s%s", fs_errmsg(), hint);
    if (rc != 0)
        FS_LOG_E("app", "%s; serving without it (server.exit_on_error is false)", fs_errmsg());
    srv_control_t *c = calloc(1, sizeof *c);
    if (!c)
        return fs_err(FS_ENOMEM, "out of host memory");
    c->app = app;
    c->mode = cfg->model_control_mode;
    c->period_ns = (uint64_t)cfg->repository_poll_secs * 1000000000ull;
    memcpy(c->repository, cfg->repository, sizeof c->repository);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    app->control = c;

    size_t failed = 0, tried = 0;
    char first[FS_ERRMSG_MAX] = "";
    int first_rc = 0;
    if (!cfg->models_all) {
        for (size_t i = 0; i < cfg->n_models; i++, tried++)
            startup_load(c, cfg->models[i], &failed, first, &first_rc);
    } else if (rc == 0) {
        control_seen_t *seen = NULL;
        size_t n = 0;
        if (repository_look(cfg->repository, &seen, &n) != 0) {
            if (strict)
                return fs_err(FS_EIO, "%s%s", fs_errmsg(), hint);
            FS_LOG_E("app", "%s", fs_errmsg());
        }
        for (size_t i = 0; i < n; i++, tried++)
            startup_load(c, seen[i].name, &failed, first, &first_rc);
        /* The hashes taken before the loads: a file changed meanwhile is
         * loaded again at the first look. */
        c->seen = seen;
        c->n_seen = n;
    }
    if (failed > 0 && strict)
        return fs_err(first_rc, "%zu of %zu start-up models did not load (the first: %s)%s",
                      failed, tried, first, hint);
    if (c->mode != CFG_CONTROL_POLL)
        return 0;
    if (pthread_create(&c->poller, NULL, poller_main, c) != 0)
        return fs_err(FS_ENOMEM, "cannot start the repository poll thread");
    c->started = true;
    FS_LOG_I("app", "model control poll: looking at '%s' every %u s", cfg->repository,
             (unsigned)cfg->repository_poll_secs);
    return 0;
}

void srv_control_stop(srv_app_t *app)
{
    srv_control_t *c = app->control;
    if (!c || !c->started)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->poller, NULL);
    c->started = false;
}

void srv_control_destroy(srv_app_t *app)
{
    srv_control_t *c = app->control;
    if (!c)
        return;
    srv_control_stop(app);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    free(c->seen);
    free(c->wanted);
    free(c);
    app->control = NULL;
}
