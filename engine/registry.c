/* registry.c -- the model repository as the server serves it: entries by
 * name, load (and rebuild) with an atomic swap, unload, the index and the
 * per-version stats. The batcher of each version is batcher.c.
 *
 * Load of one name at a time (the entry's `busy` flag), loads of different
 * names concurrently: the registry lock is held only to read or change
 * entries, never while a model loads or a version drains.
 *
 * A swap: the new versions (one, or the several a version policy picks)
 * are built completely (models loaded, workers started) beside the old
 * ones; under the registry lock they become the entry's serving versions,
 * so every acquire from then on gets one of them. Each old one then
 * refuses submits with FS_ESTATE ("... is being replaced; retry") -- the
 * server re-acquires and retries once, which reaches the new version --
 * runs what it had queued, joins its workers, waits for its last
 * reference, and is destroyed, its owners checked to be back to zero. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"
#include "engine/registry_impl.h"

#define REG_PATH_MAX 4096

const char *eng_model_state_name(eng_model_state_t s)
{
    switch (s) {
    case ENG_MODEL_UNAVAILABLE: return "UNAVAILABLE";
    case ENG_MODEL_LOADING: return "LOADING";
    case ENG_MODEL_READY: return "READY";
    case ENG_MODEL_UNLOADING: return "UNLOADING";
    }
    return "UNKNOWN";
}

/* ---- names and paths -------------------------------------------------------- */

const char *eng_registry_name_problem(const char *name, size_t *at)
{
    *at = 0;
    if (!name || !name[0])
        return "is empty";
    if (name[0] == '.')
        return "starts with '.'";
    size_t n = 0;
    for (; name[n]; n++) {
        char c = name[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok) {
            *at = n;
            return "has a character other than letters, digits, '_', '.' and '-'";
        }
    }
    if (n >= ENG_MODEL_NAME_MAX)
        return "is longer than 127 bytes";
    return NULL;
}

int eng_registry_check_name(const char *name)
{
    size_t at;
    const char *why = eng_registry_name_problem(name, &at);
    if (!why)
        return 0;
    if (!name || !name[0])
        return fs_err(FS_EINVAL, "a model name is required (it is empty)");
    if (strlen(name) >= ENG_MODEL_NAME_MAX)
        return fs_err(FS_EINVAL, "model name '%.40s...' is %zu bytes; at most %d", name,
                      strlen(name), ENG_MODEL_NAME_MAX - 1);
    if (name[0] == '.')
        return fs_err(FS_EINVAL, "model name '%s' starts with '.'", name);
    return fs_err(FS_EINVAL, "model name '%s' %s (byte %zu is '%c')", name, why, at,
                  (name[at] >= 0x20 && name[at] < 0x7f) ? name[at] : '?');
}

static int path_join(char *buf, const char *a, const char *b, const char *c)
{
    int n = snprintf(buf, REG_PATH_MAX, "%s/%s%s%s", a, b, c ? "/" : "", c ? c : "");
    if (n < 0 || n >= REG_PATH_MAX)
        return fs_err(FS_EINVAL, "path '%s/%s' is too long", a, b);
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether directory `path` resolves inside the repository: a model or
 * version directory that is a link out of it is refused, so that naming a
 * model cannot make the server read a directory from elsewhere (what it
 * reads there -- config.json, external data -- is confined to it). The
 * model file itself may be a link, as a file cache's blobs are. 0, or
 * FS_EINVAL naming both places, or FS_EIO when a path cannot be resolved. */
static int path_confined(const eng_registry_t *r, const char *name, const char *path)
{
    char repo[PATH_MAX], real[PATH_MAX];
    if (!realpath(r->repository, repo) || !realpath(path, real))
        return fs_err(FS_EIO, "model '%s': cannot resolve '%s': %s", name, path, strerror(errno));
    size_t n = strlen(repo);
    if (strncmp(real, repo, n) != 0 || (real[n] != '/' && strcmp(repo, "/") != 0))
        return fs_err(FS_EINVAL, "model '%s': '%s' resolves to '%s', outside the repository "
                      "'%s' (links out of it are not followed)", name, path, real, repo);
    return 0;
}

/* Whether `file` is a model file name: one plain name in its version
 * directory, never a path. */
static bool file_name_ok(const char *file)
{
    return file[0] && strcmp(file, ".") != 0 && strcmp(file, "..") != 0 && !strchr(file, '/');
}

/* The highest version directory of `model_dir` (all digits), or -1: what
 * the index shows for a model not loaded. */
static int64_t version_newest(const char *model_dir)
{
    DIR *d = opendir(model_dir);
    if (!d)
        return -1;
    int64_t best = -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *p = de->d_name;
        int64_t v = 0;
        size_t n = 0;
        for (; p[n] >= '0' && p[n] <= '9' && v <= (INT64_MAX - 9) / 10; n++)
            v = v * 10 + (p[n] - '0');
        char path[REG_PATH_MAX];
        if (n == 0 || p[n] != '\0' || v <= best)
            continue;
        if (path_join(path, model_dir, p, NULL) == 0 && is_dir(path))
            best = v;
    }
    closedir(d);
    return best;
}

/* ---- entries and stats records ---------------------------------------------- */

static reg_entry_t *entry_find_locked(eng_registry_t *r, const char *name)
{
    for (reg_entry_t *e = r->entries; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

static int entry_get_locked(eng_registry_t *r, const char *name, reg_entry_t **out)
{
    reg_entry_t *e = entry_find_locked(r, name);
    if (!e) {
        if (!(e = calloc(1, sizeof *e)))
            return fs_err(FS_ENOMEM, "out of host memory for model '%s'", name);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->state = ENG_MODEL_UNAVAILABLE;
        e->last_version = -1;
        e->next = r->entries;
        r->entries = e;
    }
    *out = e;
    return 0;
}

static reg_stats_t *stats_find_locked(const reg_entry_t *e, int64_t version)
{
    for (reg_stats_t *st = e->stats; st; st = st->next)
        if (st->version == version)
            return st;
    return NULL;
}

/* ---- one served version ----------------------------------------------------- */

/* The memory a model on `device` runs in: one of the server's devices',
 * or the CPU's. */
static int memory_for(eng_registry_t *r, const char *name, const eng_device_t *device,
                      eng_memory_t **out)
{
    eng_device_t cpu = {ENG_DEVICE_CPU, 0};
    if (eng_device_equal(device, &cpu)) {
        *out = r->cpu_memory;
        return 0;
    }
    for (size_t k = 0; k < r->n_devices; k++)
        if (eng_device_equal(device, &r->devices[k])) {
            *out = r->device_memory[k];
            return 0;
        }
    char want[ENG_DEVICE_NAME_MAX];
    return fs_err(FS_ENOTSUP, "model '%s': device '%s' is not available (the server runs on %s%s)",
                  name, eng_device_name(device, want, sizeof want), r->devices_name,
                  eng_device_equal(&r->devices[0], &cpu) ? "" : " and cpu");
}

void eng_devices_text(const eng_device_t *devs, size_t n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        char one[ENG_DEVICE_NAME_MAX];
        eng_device_name(&devs[k], one, sizeof one);
        const char *colon = strchr(one, ':');
        const bool short_form = k > 0 && colon && devs[k].kind == devs[0].kind;
        int w = snprintf(buf + at, len - at, "%s%s", k > 0 ? "," : "",
                         short_form ? colon + 1 : one);
        if (w < 0 || (size_t)w >= len - at) {
            if (len >= 5)
                snprintf(buf + (at < len - 5 ? at : len - 5), 5, ",...");
            return;
        }
        at += (size_t)w;
    }
}

static void served_free(eng_served_t *s)
{
    if (!s)
        return;
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s->inputs);
    free(s);
}

/* A version with its lock and conds ready, holding the registry's one
 * reference; the caller fills the rest. NULL when out of memory. */
static eng_served_t *served_new(eng_registry_t *r)
{
    eng_served_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->registry = r;
    s->refs = 1;
    return s;
}

/* The options of `name` from the caller's callback (defaults without
 * one: every device of the registry), and the memory each of its devices
 * runs in (mem[k] for opts->devices[k]). */
static int served_options(eng_registry_t *r, const char *name, const char *dir,
                          eng_serve_options_t *opts, eng_memory_t *mem[ENG_DEVICES_MAX])
{
    memset(opts, 0, sizeof *opts);
    int rc = r->options ? r->options(r->options_user, name, dir, opts) : 0;
    if (rc != 0)
        return fs_err(rc, "model '%s': %s", name, fs_errmsg());
    if (!opts->device_set) {
        opts->n_devices = (uint32_t)r->n_devices;
        memcpy(opts->devices, r->devices, r->n_devices * sizeof *r->devices);
    }
    if (opts->n_devices < 1 || opts->n_devices > ENG_DEVICES_MAX)
        return fs_err(FS_EINVAL, "model '%s': %u devices (1 to %d)", name, opts->n_devices,
                      ENG_DEVICES_MAX);
    for (uint32_t k = 0; k < opts->n_devices; k++) {
        for (uint32_t j = 0; j < k; j++)
            if (eng_device_equal(&opts->devices[j], &opts->devices[k])) {
                char d[ENG_DEVICE_NAME_MAX];
                return fs_err(FS_EINVAL, "model '%s': device %s is listed twice", name,
                              eng_device_name(&opts->devices[k], d, sizeof d));
            }
        if ((rc = memory_for(r, name, &opts->devices[k], &mem[k])) != 0)
            return rc;
    }
    return 0;
}

/* The stats record of (e, version), made on first use. NULL when out of
 * memory. */
static reg_stats_t *stats_get(eng_registry_t *r, reg_entry_t *e, int64_t version)
{
    pthread_mutex_lock(&r->lock);
    reg_stats_t *st = stats_find_locked(e, version);
    if (!st && (st = calloc(1, sizeof *st)) != NULL) {
        st->version = version;
        st->next = e->stats;
        e->stats = st;
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

static void served_log_loaded(const eng_served_t *s, uint64_t took_ns)
{
    alloc_owner_stats_t os;
    char weights[32] = "?", took[32], where[64];
    if (alloc_cache_owner_stats(s->cache, eng_model_owner(s->model), &os) == 0)
        fs_format_size((uint64_t)os.allocated.current, weights, sizeof weights);
    fs_format_duration(took_ns, took, sizeof took);
    eng_devices_text(s->options.devices, s->n_models, where, sizeof where);
    const char *each = s->n_models > 1 ? " each" : "";
    if (s->batches)
        FS_LOG_I("registry", "model '%s' version %lld loaded on %s in %s: weights %s%s, batching "
                 "up to %u", s->name, (long long)s->version, where, took, weights, each,
                 s->max_rows);
    else
        FS_LOG_I("registry", "model '%s' version %lld loaded on %s in %s: weights %s%s, no "
                 "batching", s->name, (long long)s->version, where, took, weights, each);
    if (!s->batch_dim && s->options.max_batch_size > 1)
        FS_LOG_W("registry", "model '%s' version %lld: max_batch_size %u is not used: its inputs "
                 "and outputs do not all lead with one symbolic dim of one name (or, with a "
                 "config.pbtxt's max_batch_size, with a symbolic dim)", s->name,
                 (long long)s->version, s->options.max_batch_size);
}

/* Every version directory of `dir` holding the regular file `file`,
 * newest first: 0 and *out (caller frees with free()) and *n, or
 * FS_ENOMEM. An unreadable directory has none. */
static int versions_list(const char *dir, const char *file, int64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int64_t *list = NULL;
    size_t cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *p = de->d_name;
        int64_t v = 0;
        size_t k = 0;
        for (; p[k] >= '0' && p[k] <= '9' && v <= (INT64_MAX - 9) / 10; k++)
            v = v * 10 + (p[k] - '0');
        char path[REG_PATH_MAX];
        struct stat st;
        if (k == 0 || p[k] != '\0' || path_join(path, dir, p, file) != 0 || stat(path, &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            int64_t *grown = realloc(list, cap * sizeof *grown);
            if (!grown) {
                rc = fs_err(FS_ENOMEM, "out of host memory listing '%s'", dir);
                break;
            }
            list = grown;
        }
        /* Insertion keeps it newest first; "01" and "1" are one version. */
        size_t j = *n;
        while (j > 0 && list[j - 1] < v)
            j--;
        if (j > 0 && list[j - 1] == v)
            continue;
        memmove(&list[j + 1], &list[j], (*n - j) * sizeof *list);
        list[j] = v;
        (*n)++;
    }
    closedir(d);
    if (rc != 0) {
        free(list);
        *n = 0;
        return rc;
    }
    *out = list;
    return 0;
}

/* The versions of `name` to serve by the options' policy, newest first:
 * 0 and out[0..*n) (1..ENG_VERSIONS_MAX), or FS_ENOENT naming what is
 * missing, FS_EINVAL (more than ENG_VERSIONS_MAX), FS_ENOMEM. */
static int versions_pick(const char *name, const char *dir, const char *file,
                         const eng_serve_options_t *o, int64_t out[ENG_VERSIONS_MAX], size_t *n)
{
    *n = 0;
    int64_t *have = NULL;
    size_t n_have = 0;
    int rc = versions_list(dir, file, &have, &n_have);
    if (rc != 0)
        return rc;
    if (n_have == 0)
        rc = fs_err(FS_ENOENT, "model '%s': no version directory with a %s in '%s'", name, file,
                    dir);
    for (uint32_t i = 0; rc == 0 && i < o->n_versions; i++) {
        int64_t v = o->versions[i];
        size_t j = 0;
        while (j < n_have && have[j] != v)
            j++;
        if (j == n_have)
            rc = fs_err(FS_ENOENT, "model '%s': version %lld is asked for, but '%s/%lld' holds "
                        "no %s", name, (long long)v, dir, (long long)v, file);
        else if (o->n_versions > ENG_VERSIONS_MAX)
            rc = fs_err(FS_EINVAL, "model '%s': %u versions asked for; at most %d serve at once",
                        name, o->n_versions, ENG_VERSIONS_MAX);
    }
    if (rc == 0 && o->n_versions) {
        /* Newest first, as the directory's. */
        for (size_t j = 0; j < n_have; j++)
            for (uint32_t i = 0; i < o->n_versions; i++)
                if (have[j] == o->versions[i] && *n < ENG_VERSIONS_MAX)
                    out[(*n)++] = have[j];
    } else if (rc == 0) {
        size_t want = o->versions_all ? n_have : o->versions_latest ? o->versions_latest : 1;
        if (want > n_have)
            want = n_have;
        if (want > ENG_VERSIONS_MAX)
            rc = fs_err(FS_EINVAL, "model '%s': %zu versions would serve; at most %d serve at once",
                        name, want, ENG_VERSIONS_MAX);
        for (size_t j = 0; rc == 0 && j < want; j++)
            out[(*n)++] = have[j];
    }
    free(have);
    return rc;
}

/* Loads `version` of `name` from `dir` with `opts` and starts its
 * batcher. Takes no lock but the registry's, briefly, for the stats
 * record. */
static int served_build(eng_registry_t *r, reg_entry_t *e, const char *name, const char *dir,
                        const eng_serve_options_t *opts, eng_memory_t *const *mem,
                        int64_t version, eng_served_t **out)
{
    char vdir[32], path[REG_PATH_MAX], owner[ALLOC_OWNER_NAME_MAX];
    const char *file = opts->model_file[0] ? opts->model_file : "model.onnx";
    snprintf(vdir, sizeof vdir, "%lld", (long long)version);
    int rc = path_join(path, dir, vdir, NULL);
    if (rc == 0)
        rc = path_confined(r, name, path);
    if (rc == 0)
        rc = path_join(path, dir, vdir, file);
    if (rc != 0)
        return rc;
    snprintf(owner, sizeof owner, "%s:%lld", name, (long long)version);
    uint64_t t0 = fs_clock_real_ns();
    eng_served_t *s = served_new(r);
    if (!s)
        return fs_err(FS_ENOMEM, "model '%s': out of host memory", name);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->version = version;
    s->options = *opts;
    /* One instance per device, each in its device's cache under the same
     * owner name (the caches are apart). */
    for (uint32_t k = 0; k < opts->n_devices; k++) {
        eng_model_config_t cfg = {
            .name = owner,
            .cache = mem[k]->cache,
            .max_plans = opts->max_plans,
            .n_threads = (int)(opts->threads ? opts->threads : 1),
            .device = opts->devices[k],
            .precision = opts->precision,
            .host_cache = mem[k]->host_cache,
            .staging = mem[k]->staging,
            .no_cuda_graphs = !opts->cuda_graphs,
        };
        if ((rc = eng_model_load(path, &cfg, &s->models[k])) != 0) {
            char d[ENG_DEVICE_NAME_MAX];
            rc = fs_err(rc, "loading model '%s' version %lld from %s on %s: %s", name,
                        (long long)version, path,
                        eng_device_name(&opts->devices[k], d, sizeof d), fs_errmsg());
            goto fail;
        }
        s->model_caches[k] = mem[k]->cache;
        s->n_models = k + 1;
    }
    s->model = s->models[0];
    s->cache = s->model_caches[0];
    if ((rc = served_inputs_init(s)) != 0)
        goto fail;
    if (r->verify &&
        (rc = r->verify(r->options_user, name, dir, s->model, opts, s->inputs, s->n_inputs)) != 0) {
        rc = fs_err(rc, "model '%s' version %lld: %s", name, (long long)version, fs_errmsg());
        goto fail;
    }
    if (!(s->stats = stats_get(r, e, version))) {
        rc = fs_err(FS_ENOMEM, "model '%s': out of host memory", name);
        goto fail;
    }
    if (opts->sequence.enabled && (rc = served_seq_create(s, r->cpu_memory->cache)) != 0)
        goto fail;
    if ((rc = served_batcher_start(s)) != 0)
        goto fail;
    served_log_loaded(s, fs_clock_real_ns() - t0);
    *out = s;
    return 0;
fail:
    served_seq_destroy(s);
    for (size_t k = 0; k < s->n_models; k++)
        eng_model_destroy(s->models[k]);
    served_free(s);
    return rc;
}

static int served_finish(eng_served_t *s, bool fail_queued);

/* Reads the options of `name`, picks its versions and builds each: 0 and
 * out[0..*n) newest first, or the first error with nothing left built
 * (versions built before it are finished). */
static int served_load(eng_registry_t *r, reg_entry_t *e, const char *name, const char *dir,
                       eng_served_t *out[ENG_VERSIONS_MAX], size_t *n)
{
    *n = 0;
    /* Before anything is read from it (config.json or config.pbtxt). */
    int rc = path_confined(r, name, dir);
    if (rc != 0)
        return rc;
    eng_serve_options_t opts;
    eng_memory_t *mem[ENG_DEVICES_MAX] = {NULL};
    if ((rc = served_options(r, name, dir, &opts, mem)) != 0)
        return rc;
    const char *file = opts.model_file[0] ? opts.model_file : "model.onnx";
    if (!file_name_ok(file))
        return fs_err(FS_EINVAL, "model '%s': model file name '%s' is not one file name of the "
                      "version directory", name, file);
    int64_t versions[ENG_VERSIONS_MAX];
    size_t n_versions = 0;
    if ((rc = versions_pick(name, dir, file, &opts, versions, &n_versions)) != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n_versions; i++)
        if ((rc = served_build(r, e, name, dir, &opts, mem, versions[i], &out[i])) == 0)
            (*n)++;
    if (rc == 0)
        return 0;
    char msg[FS_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", fs_errmsg());
    for (size_t i = 0; i < *n; i++)
        served_finish(out[i], true);
    *n = 0;
    return fs_err(rc, "%s", msg);
}

/* Takes s out of service for good (see served_batcher_stop), drops the
 * registry's reference, waits for the others and for the batches callers
 * of eng_served_submit_run still run, destroys the model and checks its
 * owners came back to zero bytes: 0, or FS_EBUSY naming the owner. */
static int served_finish(eng_served_t *s, bool fail_queued)
{
    served_batcher_stop(s, fail_queued);
    pthread_mutex_lock(&s->lock);
    s->refs--;
    /* A caller running a batch holds a reference for its call, so the
     * references alone would do -- unless a `done` in its batch released
     * that reference, which is allowed: the running count keeps s alive
     * until the batch has ended (batch_end_locked). */
    while (s->refs > 0 || s->n_running > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    /* The sequences' state, now that no batch can complete a job. */
    int rc = served_seq_destroy(s);

    /* Owner slots are reused, so the check after destroy matches the name
     * too: a load of this name, the only one that could reuse it, waits
     * for us (entry busy), and other names differ. Each instance in its
     * own device's cache. */
    for (size_t k = 0; k < s->n_models; k++) {
        alloc_cache_t *cache = s->model_caches[k];
        alloc_owner_t owners[2] = {eng_model_owner(s->models[k]),
                                   eng_model_activation_owner(s->models[k])};
        alloc_owner_stats_t before[2];
        for (int i = 0; i < 2; i++)
            if (alloc_cache_owner_stats(cache, owners[i], &before[i]) != 0)
                before[i].name[0] = '\0';
        const char *dev = eng_model_device(s->models[k]);
        char where[ENG_DEVICE_NAME_MAX];
        snprintf(where, sizeof where, "%s", dev ? dev : "?");
        eng_model_destroy(s->models[k]);
        for (int i = 0; i < 2; i++) {
            alloc_owner_stats_t after;
            if (!before[i].name[0] || alloc_cache_owner_stats(cache, owners[i], &after) != 0 ||
                strcmp(after.name, before[i].name) != 0 || after.allocated.current == 0)
                continue;
            rc = fs_err(FS_EBUSY, "model '%s' version %lld: owner '%s' on %s still holds %lld "
                        "bytes after the model was freed", s->name, (long long)s->version,
                        after.name, where, (long long)after.allocated.current);
            FS_LOG_E("registry", "%s", fs_errmsg());
        }
    }
    served_free(s);
    /* A version's host memory (its graph, plans, parsed protobuf, the
     * driver's handles) was malloc'd on the thread that loaded it, and
     * glibc keeps freed pages of every arena mapped until asked: without
     * this, RSS after many unloads and rebuilds steps up a few MiB as
     * loads land on new arenas, though every byte was freed. */
    malloc_trim(0);
    return rc;
}

/* ---- the registry ----------------------------------------------------------- */

int eng_registry_create(const eng_registry_config_t *cfg, eng_registry_t **out)
{
    *out = NULL;
    if (!cfg || !cfg->repository || !cfg->repository[0])
        return fs_err(FS_EINVAL, "eng_registry_create: a repository directory is required");
    size_t n_dev = cfg->n_devices ? cfg->n_devices : 1;
    if (n_dev > ENG_DEVICES_MAX)
        return fs_err(FS_EINVAL, "eng_registry_create: %zu devices (at most %d)", n_dev,
                      ENG_DEVICES_MAX);
    for (size_t k = 0; k < n_dev; k++)
        if (!cfg->device_memory[k])
            return fs_err(FS_EINVAL, "eng_registry_create: device_memory[%zu] is required", k);
    if (!cfg->cpu_memory)
        return fs_err(FS_EINVAL, "eng_registry_create: cpu_memory is required");
    eng_registry_t *r = calloc(1, sizeof *r);
    if (!r || !(r->repository = strdup(cfg->repository))) {
        if (r)
            free(r->repository);
        free(r);
        return fs_err(FS_ENOMEM, "out of host memory for the registry");
    }
    atomic_init(&r->flushing, false);
    r->n_devices = n_dev;
    for (size_t k = 0; k < n_dev; k++) {
        r->devices[k] = cfg->devices[k];
        r->device_memory[k] = cfg->device_memory[k];
        char one[ENG_DEVICE_NAME_MAX];
        size_t at = strlen(r->devices_name);
        snprintf(r->devices_name + at, sizeof r->devices_name - at, "%s%s",
                 k == 0 ? "" : k + 1 == n_dev ? " and " : ", ",
                 eng_device_name(&r->devices[k], one, sizeof one));
    }
    r->cpu_memory = cfg->cpu_memory;
    r->options = cfg->options;
    r->verify = cfg->verify;
    r->options_user = cfg->options_user;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    pthread_mutex_init(&r->stats_lock, NULL);
    *out = r;
    return 0;
}

void eng_registry_destroy(eng_registry_t *r)
{
    if (!r)
        return;
    for (reg_entry_t *e = r->entries; e; e = e->next) {
        pthread_mutex_lock(&r->lock);
        bool loaded = e->current != NULL;
        pthread_mutex_unlock(&r->lock);
        if (loaded)
            eng_registry_unload(r, e->name);
    }
    while (r->entries) {
        reg_entry_t *e = r->entries;
        r->entries = e->next;
        while (e->stats) {
            reg_stats_t *st = e->stats;
            e->stats = st->next;
            free(st->batch);
            free(st);
        }
        free(e);
    }
    pthread_mutex_destroy(&r->stats_lock);
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->lock);
    free(r->repository);
    free(r);
}

/* Waits until no load or unload of e runs, and claims it. */
static void entry_claim_locked(eng_registry_t *r, reg_entry_t *e)
{
    while (e->busy)
        pthread_cond_wait(&r->changed, &r->lock);
    e->busy = true;
}

static void entry_unclaim(eng_registry_t *r, reg_entry_t *e)
{
    pthread_mutex_lock(&r->lock);
    e->busy = false;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
}

/* Takes every serving version out of e into out (newest first) and
 * returns how many; e serves nothing after. */
static size_t entry_take_locked(reg_entry_t *e, eng_served_t *out[ENG_VERSIONS_MAX])
{
    if (!e->current)
        return 0;
    size_t n = 0;
    out[n++] = e->current;
    for (size_t i = 0; i < e->n_older; i++)
        out[n++] = e->older[i];
    e->current = NULL;
    e->n_older = 0;
    return n;
}

int eng_registry_load(eng_registry_t *r, const char *name)
{
    int rc = eng_registry_check_name(name);
    char dir[REG_PATH_MAX];
    if (rc != 0 || (rc = path_join(dir, r->repository, name, NULL)) != 0)
        return rc;
    if (!is_dir(dir))
        return fs_err(FS_ENOENT, "model '%s': no directory '%s' in the repository", name, dir);
    reg_entry_t *e = NULL;
    pthread_mutex_lock(&r->lock);
    rc = entry_get_locked(r, name, &e);
    if (rc == 0) {
        entry_claim_locked(r, e);
        if (!e->current)
            e->state = ENG_MODEL_LOADING;
    }
    pthread_mutex_unlock(&r->lock);
    if (rc != 0)
        return rc;

    eng_served_t *built[ENG_VERSIONS_MAX], *old[ENG_VERSIONS_MAX];
    size_t n_built = 0, n_old = 0;
    rc = served_load(r, e, name, dir, built, &n_built);
    char msg[FS_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", rc ? fs_errmsg() : "");
    bool serving = false;
    pthread_mutex_lock(&r->lock);
    if (rc != 0) {
        /* Kept as the reason even while older versions serve (READY). */
        snprintf(e->reason, sizeof e->reason, "%s", msg);
        serving = e->current != NULL;
        if (!serving)
            e->state = ENG_MODEL_UNAVAILABLE;
    } else {
        n_old = entry_take_locked(e, old);
        e->current = built[0];
        for (size_t i = 1; i < n_built; i++)
            e->older[i - 1] = built[i];
        e->n_older = n_built - 1;
        e->last_version = built[0]->version;
        e->state = ENG_MODEL_READY;
        e->reason[0] = '\0';
    }
    pthread_mutex_unlock(&r->lock);

    if (rc != 0) {
        if (serving)
            FS_LOG_W("registry", "%s (the loaded version keeps serving)", msg);
        else
            FS_LOG_W("registry", "%s", msg);
    }
    for (size_t i = 0; i < n_old; i++) {
        uint64_t t0 = fs_clock_real_ns();
        int64_t old_version = old[i]->version;
        bool rebuilt = false;
        for (size_t j = 0; j < n_built; j++)
            rebuilt = rebuilt || built[j]->version == old_version;
        if (rebuilt)
            FS_LOG_I("registry", "model '%s' version %lld rebuilt; the previous instance drains",
                     name, (long long)old_version);
        else
            FS_LOG_I("registry", "model '%s' version %lld replaced by version %lld", name,
                     (long long)old_version, (long long)built[0]->version);
        /* An owner left holding bytes is logged there; the new versions
         * serve either way, so the load itself succeeded. */
        served_finish(old[i], false);
        char took[32];
        FS_LOG_I("registry", "model '%s' version %lld retired: drained and freed in %s", name,
                 (long long)old_version,
                 fs_format_duration(fs_clock_real_ns() - t0, took, sizeof took));
    }
    entry_unclaim(r, e);
    return rc ? fs_err(rc, "%s", msg) : 0;
}

int eng_registry_unload(eng_registry_t *r, const char *name)
{
    int rc = eng_registry_check_name(name);
    if (rc != 0)
        return rc;
    eng_served_t *old[ENG_VERSIONS_MAX];
    size_t n_old = 0;
    pthread_mutex_lock(&r->lock);
    reg_entry_t *e = entry_find_locked(r, name);
    if (e) {
        entry_claim_locked(r, e);
        if ((n_old = entry_take_locked(e, old)) > 0) {
            e->state = ENG_MODEL_UNLOADING;
            e->reason[0] = '\0';
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (n_old == 0) {
        if (e)
            entry_unclaim(r, e);
        return fs_err(FS_ENOENT, "model '%s' is not loaded", name);
    }
    char msg[FS_ERRMSG_MAX] = "";
    for (size_t i = 0; i < n_old; i++) {
        int64_t version = old[i]->version;
        int frc = served_finish(old[i], true);
        if (frc != 0 && rc == 0) {
            rc = frc;
            snprintf(msg, sizeof msg, "%s", fs_errmsg());
        }
        FS_LOG_I("registry", "model '%s' version %lld unloaded", name, (long long)version);
    }
    pthread_mutex_lock(&r->lock);
    e->state = ENG_MODEL_UNAVAILABLE;
    snprintf(e->reason, sizeof e->reason, "unloaded");
    pthread_mutex_unlock(&r->lock);
    entry_unclaim(r, e);
    return rc ? fs_err(rc, "%s", msg) : 0;
}

/* The serving version of e that `version` names (< 0: the newest), or
 * NULL. */
static eng_served_t *entry_version_locked(const reg_entry_t *e, int64_t version)
{
    if (!e->current || version < 0)
        return e->current;
    if (e->current->version == version)
        return e->current;
    for (size_t i = 0; i < e->n_older; i++)
        if (e->older[i]->version == version)
            return e->older[i];
    return NULL;
}

/* "3, 2" (the serving versions) into buf. */
static void entry_versions_text_locked(const reg_entry_t *e, char *buf, size_t len)
{
    snprintf(buf, len, "%lld", (long long)e->current->version);
    for (size_t i = 0; i < e->n_older; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, ", %lld", (long long)e->older[i]->version);
    }
}

int eng_registry_acquire(eng_registry_t *r, const char *name, int64_t version,
                         eng_served_t **out)
{
    *out = NULL;
    int rc = eng_registry_check_name(name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->lock);
    reg_entry_t *e = entry_find_locked(r, name);
    eng_served_t *s = e ? entry_version_locked(e, version) : NULL;
    if (s) {
        pthread_mutex_lock(&s->lock);
        s->refs++;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&r->lock);
        *out = s;
        return 0;
    }
    if (e && e->current) {
        char serving[256];
        entry_versions_text_locked(e, serving, sizeof serving);
        bool several = e->n_older > 0;
        pthread_mutex_unlock(&r->lock);
        return fs_err(FS_ENOENT, "model '%s' has no version %lld serving (version%s %s %s)", name,
                      (long long)version, several ? "s" : "", serving, several ? "are" : "is");
    }
    if (e) {
        eng_model_state_t state = e->state;
        char reason[FS_ERRMSG_MAX];
        snprintf(reason, sizeof reason, "%s", e->reason);
        pthread_mutex_unlock(&r->lock);
        if (state == ENG_MODEL_LOADING)
            return fs_err(FS_ESTATE, "model '%s' is loading", name);
        if (state == ENG_MODEL_UNLOADING)
            return fs_err(FS_ESTATE, "model '%s' is being unloaded", name);
        if (reason[0])
            return fs_err(FS_ESTATE, "model '%s' is not loaded: %s", name, reason);
        return fs_err(FS_ESTATE, "model '%s' is not loaded", name);
    }
    pthread_mutex_unlock(&r->lock);
    char dir[REG_PATH_MAX];
    if (path_join(dir, r->repository, name, NULL) == 0 && is_dir(dir))
        return fs_err(FS_ESTATE, "model '%s' is not loaded", name);
    /* Triton's words, which its clients look for. */
    return fs_err(FS_ENOENT, "Request for unknown model: '%s' is not found", name);
}

int eng_registry_versions(eng_registry_t *r, const char *name, int64_t out[ENG_VERSIONS_MAX],
                          size_t *n)
{
    *n = 0;
    eng_served_t *s = NULL;
    int rc = eng_registry_acquire(r, name, -1, &s);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->lock);
    const reg_entry_t *e = entry_find_locked(r, name);
    if (e && e->current) {
        out[(*n)++] = e->current->version;
        for (size_t i = 0; i < e->n_older; i++)
            out[(*n)++] = e->older[i]->version;
    }
    pthread_mutex_unlock(&r->lock);
    eng_served_release(s);
    return 0;
}

void eng_served_release(eng_served_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    if (--s->refs == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

eng_model_t *eng_served_model(const eng_served_t *s)
{
    return s->model;
}

const char *eng_served_name(const eng_served_t *s)
{
    return s->name;
}

int64_t eng_served_version(const eng_served_t *s)
{
    return s->version;
}

void eng_served_options(eng_served_t *s, eng_serve_options_t *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->options;
    pthread_mutex_unlock(&s->lock);
}

int eng_served_input(const eng_served_t *s, size_t i, eng_io_info_t *out)
{
    if (i >= s->n_inputs)
        return fs_err(FS_EINVAL, "model '%s' has no input %zu", s->name, i);
    *out = s->inputs[i];
    return 0;
}

bool eng_served_batches(eng_served_t *s)
{
    pthread_mutex_lock(&s->lock);
    bool b = s->batches;
    pthread_mutex_unlock(&s->lock);
    return b;
}

/* Applies next's batching options to s live. Cannot fail. */
static void served_batching_apply(eng_served_t *s, const eng_serve_options_t *next)
{
    pthread_mutex_lock(&s->lock);
    eng_serve_options_t was = s->options;
    s->options.max_batch_size = next->max_batch_size;
    s->options.max_queue_delay_ns = next->max_queue_delay_ns;
    s->options.max_queue = next->max_queue;
    s->options.n_preferred = next->n_preferred;
    memcpy(s->options.preferred, next->preferred, sizeof s->options.preferred);
    served_batching_update_locked(s);
    pthread_cond_broadcast(&s->work);
    unsigned workers = s->n_workers;
    pthread_mutex_unlock(&s->lock);
    if (was.max_batch_size != next->max_batch_size ||
        was.max_queue_delay_ns != next->max_queue_delay_ns || was.max_queue != next->max_queue)
        FS_LOG_I("registry", "model '%s' version %lld: batching now up to %u rows, %llu us "
                 "delay, queue %u", s->name, (long long)s->version, next->max_batch_size,
                 (unsigned long long)(next->max_queue_delay_ns / 1000), next->max_queue);
    if ((next->instances ? next->instances : 1) != workers)
        FS_LOG_W("registry", "model '%s': instances %u applies at its next load (now %u)",
                 s->name, next->instances ? next->instances : 1, workers);
}

int eng_registry_refresh_batching(eng_registry_t *r, const char *name)
{
    int64_t versions[ENG_VERSIONS_MAX];
    size_t n = 0;
    int rc = eng_registry_versions(r, name, versions, &n);
    char dir[REG_PATH_MAX];
    eng_serve_options_t next;
    eng_memory_t *mem[ENG_DEVICES_MAX] = {NULL};
    if (rc == 0)
        rc = path_join(dir, r->repository, name, NULL);
    if (rc == 0)
        rc = served_options(r, name, dir, &next, mem);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        eng_served_t *s = NULL;
        /* A version gone meanwhile (a reload) has its new options already. */
        if (eng_registry_acquire(r, name, versions[i], &s) != 0)
            continue;
        served_batching_apply(s, &next);
        eng_served_release(s);
    }
    return rc;
}

void eng_registry_flush(eng_registry_t *r)
{
    atomic_store(&r->flushing, true);
    /* Wake the workers sleeping out a delay: they look again. */
    pthread_mutex_lock(&r->lock);
    for (reg_entry_t *e = r->entries; e; e = e->next) {
        for (size_t i = 0; e->current && i <= e->n_older; i++) {
            eng_served_t *s = i ? e->older[i - 1] : e->current;
            pthread_mutex_lock(&s->lock);
            pthread_cond_broadcast(&s->work);
            pthread_mutex_unlock(&s->lock);
        }
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- index and stats -------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const eng_model_entry_t *)a)->name, ((const eng_model_entry_t *)b)->name);
}

/* Appends a zeroed entry named `name` to *list. */
static int index_push(eng_model_entry_t **list, size_t *n, size_t *cap, const char *name)
{
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 16;
        eng_model_entry_t *p = realloc(*list, grown * sizeof *p);
        if (!p)
            return fs_err(FS_ENOMEM, "out of host memory for the repository index");
        *list = p;
        *cap = grown;
    }
    eng_model_entry_t *me = &(*list)[(*n)++];
    memset(me, 0, sizeof *me);
    snprintf(me->name, sizeof me->name, "%s", name);
    me->version = -1;
    me->state = ENG_MODEL_UNAVAILABLE;
    return 0;
}

/* Every model directory of the repository, with its newest version. */
static int index_scan(eng_registry_t *r, eng_model_entry_t **list, size_t *n, size_t *cap)
{
    DIR *d = opendir(r->repository);
    if (!d)
        return fs_err(errno == ENOMEM ? FS_ENOMEM : FS_EIO, "repository '%s': %s",
                      r->repository, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        size_t at;
        char dir[REG_PATH_MAX];
        if (eng_registry_name_problem(de->d_name, &at) || path_join(dir, r->repository, de->d_name, NULL) ||
            !is_dir(dir))
            continue;
        if ((rc = index_push(list, n, cap, de->d_name)) == 0)
            (*list)[*n - 1].version = version_newest(dir);
    }
    closedir(d);
    return rc;
}

/* Fills me from e (registry lock held). */
static void index_fill_locked(eng_registry_t *r, const reg_entry_t *e, eng_model_entry_t *me)
{
    me->state = e->state;
    snprintf(me->reason, sizeof me->reason, "%s", e->reason);
    if (e->current) {
        me->version = e->current->version;
        eng_devices_text(e->current->options.devices, e->current->n_models, me->device,
                     sizeof me->device);
    }
    /* Every serving version's bytes on every device: they are all the
     * model's. */
    for (size_t i = 0; e->current && i <= e->n_older; i++) {
        const eng_served_t *s = i ? e->older[i - 1] : e->current;
        for (size_t k = 0; k < s->n_models; k++) {
            alloc_owner_stats_t os;
            const eng_model_t *m = s->models[k];
            if (alloc_cache_owner_stats(s->model_caches[k], eng_model_owner(m), &os) == 0) {
                me->weights_bytes += (size_t)os.allocated.current;
                me->weights_peak_bytes += (size_t)os.allocated.peak;
            }
            if (alloc_cache_owner_stats(s->model_caches[k], eng_model_activation_owner(m),
                                        &os) == 0) {
                me->activations_bytes += (size_t)os.allocated.current;
                me->activations_peak_bytes += (size_t)os.allocated.peak;
            }
        }
    }
    const reg_stats_t *st = stats_find_locked(e, me->version);
    if (st) {
        pthread_mutex_lock(&r->stats_lock);
        me->stats = st->s;
        pthread_mutex_unlock(&r->stats_lock);
    }
}

int eng_registry_index(eng_registry_t *r, eng_model_entry_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    eng_model_entry_t *list = NULL;
    size_t n = 0, cap = 0;
    int rc = index_scan(r, &list, &n, &cap);
    pthread_mutex_lock(&r->lock);
    for (const reg_entry_t *e = r->entries; rc == 0 && e; e = e->next) {
        size_t i = 0;
        while (i < n && strcmp(list[i].name, e->name) != 0)
            i++;
        if (i == n && (rc = index_push(&list, &n, &cap, e->name)) != 0)
            break;
        index_fill_locked(r, e, &list[i]);
    }
    pthread_mutex_unlock(&r->lock);
    if (rc != 0) {
        free(list);
        return rc;
    }
    if (n)
        qsort(list, n, sizeof *list, entry_cmp);
    *out = list;
    *n_out = n;
    return 0;
}

/* The stats record of `name`'s `version` (< 0: the current version, else
 * the last one loaded), or NULL; *resolved (may be NULL) gets the version
 * looked for. r->lock held. */
static const reg_stats_t *stats_lookup_locked(eng_registry_t *r, const char *name,
                                              int64_t version, int64_t *resolved)
{
    const reg_entry_t *e = entry_find_locked(r, name);
    int64_t v = version;
    if (e && v < 0)
        v = e->current ? e->current->version : e->last_version;
    if (resolved)
        *resolved = v;
    return e ? stats_find_locked(e, v) : NULL;
}

int eng_registry_stats(eng_registry_t *r, const char *name, int64_t version,
                       eng_model_stats_t *out)
{
    int rc = eng_registry_check_name(name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->lock);
    const reg_stats_t *st = stats_lookup_locked(r, name, version, NULL);
    if (st) {
        pthread_mutex_lock(&r->stats_lock);
        *out = st->s;
        pthread_mutex_unlock(&r->stats_lock);
    }
    pthread_mutex_unlock(&r->lock);
    if (!st) {
        if (version < 0)
            return fs_err(FS_ENOENT, "no stats recorded for model '%s'", name);
        return fs_err(FS_ENOENT, "no stats recorded for model '%s' version %lld", name,
                      (long long)version);
    }
    return 0;
}

int eng_registry_batch_stats(eng_registry_t *r, const char *name, int64_t version,
                             eng_batch_stat_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int rc = eng_registry_check_name(name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->lock);
    int64_t v = version;
    const reg_stats_t *st = stats_lookup_locked(r, name, version, &v);
    if (st) {
        pthread_mutex_lock(&r->stats_lock);
        if (st->n_batch && (*out = malloc(st->n_batch * sizeof **out)) != NULL) {
            memcpy(*out, st->batch, st->n_batch * sizeof **out);
            *n = st->n_batch;
        } else if (st->n_batch) {
            rc = fs_err(FS_ENOMEM, "out of host memory for the batch stats of model '%s'", name);
        }
        pthread_mutex_unlock(&r->stats_lock);
    }
    pthread_mutex_unlock(&r->lock);
    if (!st)
        return fs_err(FS_ENOENT, "no stats recorded for model '%s' version %lld", name,
                      (long long)v);
    return rc;
}
