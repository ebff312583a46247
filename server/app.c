/* app.c -- the composition root: from a cfg_t to a serving process.
 *
 * Order of start: the device (and, on a GPU host, the CPU's caches too, for
 * models whose config.json asks for "cpu"), the release policies on every
 * cache that holds model memory, the registry with a callback that reads
 * each model's config.json or config.pbtxt over the current defaults, the
 * startup models of the model control mode and its poller (model_control.c), the
 * policy timer, the HTTP server; then ready. Stop runs it backwards,
 * after draining the requests in flight.
 *
 * The repository is checked first: a missing or unreadable one, or a
 * start-up model that does not load, ends start-up with the error (main
 * exits 1) unless server.exit_on_error is false (readiness.c has what
 * ready means then). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/cache.h"
#include "alloc/policy.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"
#include "common/sync.h"
#include "server/app_impl.h"
#include "server/trace.h"
#include "server/shm.h"

size_t srv_app_caches(srv_app_t *app, srv_cache_ref_t out[SRV_CACHE_REFS_MAX])
{
    size_t n = 0;
    const eng_memory_t *mems[CFG_MAX_DEVICES + 1];
    const char *devs[CFG_MAX_DEVICES + 1];
    size_t n_mems = 0;
    for (size_t k = 0; k < app->n_devs; k++) {
        mems[n_mems] = &app->dev_mem[k];
        devs[n_mems++] = app->dev_names[k];
    }
    if (app->has_cpu_mem) {
        mems[n_mems] = &app->cpu_mem;
        devs[n_mems++] = "cpu";
    }
    for (size_t m = 0; m < n_mems; m++) {
        if (!mems[m])
            continue;
        if (mems[m]->cache)
            out[n++] = (srv_cache_ref_t){mems[m]->cache, devs[m], "device"};
        if (mems[m]->host_cache && !mems[m]->host_borrowed)
            out[n++] = (srv_cache_ref_t){mems[m]->host_cache, devs[m], "host"};
        if (mems[m]->staging)
            out[n++] = (srv_cache_ref_t){mems[m]->staging, devs[m], "pinned"};
    }
    return n;
}

/* The caches the release policies act on: where models keep weights and
 * activations. */
static size_t model_caches(srv_app_t *app, alloc_cache_t *out[CFG_MAX_DEVICES + 1])
{
    size_t n = 0;
    for (size_t k = 0; k < app->n_devs; k++)
        out[n++] = app->dev_mem[k].cache;
    if (app->has_cpu_mem)
        out[n++] = app->cpu_mem.cache;
    return n;
}

/* Builds cfg's policy list for one cache; 0 and n policies in out (caller
 * hands them to the cache or destroys them), or the error naming the
 * policy. */
static int policies_build(const cfg_t *cfg, alloc_policy_t *out[CFG_MAX_POLICIES])
{
    for (size_t i = 0; i < cfg->memory.n_policies; i++) {
        int rc = alloc_policy_create(cfg->memory.policies[i].kind, &cfg->memory.policies[i].params,
                                     &out[i]);
        if (rc != 0) {
            for (size_t j = 0; j < i; j++)
                alloc_policy_destroy(out[j]);
            return fs_err(rc, "memory.policies[%zu]: %s", i, fs_errmsg());
        }
    }
    return 0;
}

/* Puts cfg's policies on every model cache; on error nothing changed. */
static int policies_apply(srv_app_t *app, const cfg_t *cfg)
{
    alloc_cache_t *caches[CFG_MAX_DEVICES + 1];
    size_t nc = model_caches(app, caches);
    alloc_policy_t *built[CFG_MAX_DEVICES + 1][CFG_MAX_POLICIES];
    size_t np = cfg->memory.n_policies;
    for (size_t c = 0; c < nc; c++) {
        int rc = policies_build(cfg, built[c]);
        if (rc != 0) {
            for (size_t k = 0; k < c; k++)
                for (size_t j = 0; j < np; j++)
                    alloc_policy_destroy(built[k][j]);
            return rc;
        }
    }
    for (size_t c = 0; c < nc; c++) {
        int rc = alloc_cache_policies_replace(caches[c], built[c], np);
        if (rc != 0) {
            /* Checked by config/ already (one arena, at most 8). */
            for (size_t j = 0; j < np; j++)
                alloc_policy_destroy(built[c][j]);
            FS_LOG_E("app", "cache '%s': %s", alloc_cache_name(caches[c]), fs_errmsg());
        }
    }
    return 0;
}

/* The registry's view of a model: its config.json or config.pbtxt over the
 * defaults (server/model_config.c). */
static int model_options(void *user, const char *name, const char *model_dir,
                         eng_serve_options_t *out)
{
    srv_app_t *app = user;
    cfg_model_t mc;
    int rc = srv_model_config_read(app, name, model_dir, &mc);
    pthread_mutex_lock(&app->cfg_lock);
    uint32_t http_threads = app->cfg.server.threads;
    pthread_mutex_unlock(&app->cfg_lock);
    if (rc != 0)
        return rc;
    memset(out, 0, sizeof *out);
    _Static_assert(CFG_MAX_DEVICES == ENG_DEVICES_MAX, "devices copy whole");
    out->device_set = mc.device.set;
    if (mc.device.set) {
        out->n_devices = 1 + mc.device.n_more;
        out->devices[0] = mc.device.dev;
        memcpy(out->devices + 1, mc.device.more, mc.device.n_more * sizeof *mc.device.more);
    }
    out->precision = mc.engine.precision;
    out->threads = mc.engine.threads;
    out->max_plans = mc.engine.max_plans;
    out->cuda_graphs = mc.engine.cuda_graphs;
    out->max_batch_size = mc.batching.max_batch_size;
    out->max_queue_delay_ns = mc.batching.max_queue_delay_ns;
    out->max_queue = mc.batching.max_queue;
    out->instances = mc.batching.instances;
    snprintf(out->model_file, sizeof out->model_file, "%s", mc.model_file);
    _Static_assert(CFG_MAX_VERSIONS == ENG_VERSIONS_MAX, "versions copy whole");
    out->versions_latest = mc.versions_latest;
    out->versions_all = mc.versions_all;
    out->n_versions = mc.n_versions;
    memcpy(out->versions, mc.versions, sizeof out->versions);
    out->max_request_rows = mc.max_request_rows;
    out->queue_timeout_ns = mc.queue_timeout_ns;
    _Static_assert(CFG_MAX_PREFERRED == ENG_PREFERRED_MAX, "preferred sizes copy whole");
    out->n_preferred = mc.n_preferred;
    memcpy(out->preferred, mc.preferred, sizeof out->preferred);
    out->sequence = mc.sequence;
    /* Auto: on the CPU one per HTTP thread, so that every HTTP thread can
     * run its own request's batch at once (eng_served_submit_run) instead
     * of queueing it for a worker and waiting to be resumed: one hand-off,
     * one wake-up and one MHD resume fewer a request, and as many small
     * batches in parallel as there are HTTP threads (each with
     * engine.threads kernel threads). On a GPU, 1: its batches queue on
     * one stream anyway. */
    if (out->instances == 0) {
        eng_device_t dev = out->device_set ? out->devices[0] : app->dev;
        out->instances = dev.kind != ENG_DEVICE_CPU ? 1 : http_threads < 64 ? http_threads : 64;
    }
    /* Auto: the machine's cores shared by the batches that may run at once
     * (config/README.md), so that instances x threads does not oversubscribe
     * them; at least 1. */
    if (out->threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        uint32_t per = cores > 0 ? (uint32_t)cores / (out->instances ? out->instances : 1) : 1;
        out->threads = per ? per : 1;
    }
    return 0;
}

/* ---- the policy timer ----------------------------------------------------------------- */

static void *ticker_main(void *arg)
{
    srv_app_t *app = arg;
    pthread_mutex_lock(&app->tick_lock);
    while (!app->ticker_stop) {
        pthread_mutex_lock(&app->cfg_lock);
        uint64_t period = app->cfg.memory.tick_ns;
        pthread_mutex_unlock(&app->cfg_lock);
        fs_cond_timedwait_ns(&app->tick_cond, &app->tick_lock, period);
        if (app->ticker_stop)
            break;
        pthread_mutex_unlock(&app->tick_lock);
        alloc_cache_t *caches[CFG_MAX_DEVICES + 1];
        size_t n = model_caches(app, caches);
        for (size_t i = 0; i < n; i++)
            alloc_cache_tick(caches[i]);
        pthread_mutex_lock(&app->tick_lock);
    }
    pthread_mutex_unlock(&app->tick_lock);
    return NULL;
}

static int ticker_start(srv_app_t *app)
{
    if (pthread_create(&app->ticker, NULL, ticker_main, app) != 0)
        return fs_err(FS_ENOMEM, "cannot start the policy timer thread");
    app->ticker_started = true;
    return 0;
}

static void ticker_stop(srv_app_t *app)
{
    if (!app->ticker_started)
        return;
    pthread_mutex_lock(&app->tick_lock);
    app->ticker_stop = true;
    pthread_cond_signal(&app->tick_cond);
    pthread_mutex_unlock(&app->tick_lock);
    pthread_join(app->ticker, NULL);
    app->ticker_started = false;
}

/* ---- start and stop ------------------------------------------------------------------------ */

/* The devices to serve on into app->devs: as listed; "auto" -> cuda:0
 * when a GPU answers, else cpu (saying why); "cuda:all" -> every GPU that
 * answers (the first CFG_MAX_DEVICES). 0, or FS_ENOTSUP for "cuda:all"
 * without a GPU. */
static int resolve_devices(srv_app_t *app, const cfg_device_t *want)
{
    app->n_devs = 1;
    app->devs[0] = (eng_device_t){ENG_DEVICE_CPU, 0};
    int n = 0;
    if (want->all_gpus) {
        if (alloc_cuda_probe(&n) != 0 || n < 1)
            return fs_err(FS_ENOTSUP, "device cuda:all: no GPU answers (%s)",
                          n < 1 && fs_errmsg()[0] ? fs_errmsg() : "none found");
        if (n > CFG_MAX_DEVICES)
            FS_LOG_W("app", "device cuda:all: %d GPUs; serving on the first %d", n,
                     CFG_MAX_DEVICES);
        app->n_devs = n < CFG_MAX_DEVICES ? (size_t)n : CFG_MAX_DEVICES;
        for (size_t k = 0; k < app->n_devs; k++)
            app->devs[k] = (eng_device_t){ENG_DEVICE_CUDA, (int)k};
    } else if (!want->is_auto) {
        app->devs[0] = want->dev;
        for (uint32_t k = 0; k < want->n_more; k++)
            app->devs[app->n_devs++] = want->more[k];
    } else if (alloc_cuda_probe(&n) == 0 && n > 0) {
        app->devs[0] = (eng_device_t){ENG_DEVICE_CUDA, 0};
    } else {
        /* A CPU-only build on the CPU is a choice; a CUDA build without a
         * GPU is news. */
        FS_LOG(FS_HAVE_CUDA ? FS_LOG_WARN : FS_LOG_INFO, "app",
               "device auto: %s; serving on the CPU", n > 0 ? "no GPU" : fs_errmsg());
    }
    app->dev = app->devs[0];
    for (size_t k = 0; k < app->n_devs; k++)
        eng_device_name(&app->devs[k], app->dev_names[k], sizeof app->dev_names[k]);
    eng_devices_text(app->devs, app->n_devs, app->device, sizeof app->device);
    return 0;
}

/* The device's cache is limited by memory.limit_bytes / limit_fraction, or
 * by default to ENG_MEMORY_HOST_FRACTION of what the process may use on the
 * CPU and the device's total on a GPU. On a GPU the host cache its models
 * load through is the one the CPU's models run in, so all host bytes count
 * against one limit. */
static int open_memory(srv_app_t *app)
{
    const cfg_t *cfg = &app->cfg;
    bool gpu = app->dev.kind == ENG_DEVICE_CUDA;
    bool unset = cfg->memory.limit_bytes == 0 && cfg->memory.limit_fraction == 0.0;
    alloc_cache_config_t dev = {
        .name = app->dev_names[0],
        .max_reserved_bytes = cfg->memory.limit_bytes,
        .fraction = unset ? (gpu ? ENG_MEMORY_GPU_FRACTION : ENG_MEMORY_HOST_FRACTION)
                          : cfg->memory.limit_fraction,
        .max_split_bytes = cfg->memory.max_split_bytes};
    alloc_cache_config_t pinned = {.name = "pinned",
                                   .max_reserved_bytes = cfg->memory.pinned_limit_bytes};
    app->cuda_index = -1;
    if (!gpu)
        return eng_memory_open_with(&app->dev, &dev, NULL, NULL, &app->dev_mem[0]);
    alloc_cache_config_t cpu = {.name = "cpu", .fraction = ENG_MEMORY_HOST_FRACTION};
    int rc = eng_memory_open(NULL, &cpu, &app->cpu_mem);
    if (rc != 0)
        return rc;
    app->has_cpu_mem = true;
    /* One device cache per GPU, each under the same limit (memory.limit_*
     * is per device), all loading through the CPU's host cache; the pinned
     * staging cache is each device's own. */
    for (size_t k = 0; k < app->n_devs; k++) {
        dev.name = app->dev_names[k];
        rc = eng_memory_open_with(&app->devs[k], &dev, &pinned, app->cpu_mem.cache,
                                  &app->dev_mem[k]);
        if (rc != 0)
            return rc;
        if (alloc_cuda_device_info(app->devs[k].index, &app->gpu[k]) != 0)
            snprintf(app->gpu[k].uuid, sizeof app->gpu[k].uuid, "%s", app->dev_names[k]);
    }
    app->cuda_index = app->dev.index;
    return 0;
}

/* Frees everything; returns FS_EBUSY (logged) if a cache still had bytes
 * allocated once every model was gone. */
static int app_free(srv_app_t *app)
{
    srv_control_destroy(app);
    ticker_stop(app);
    srv_http_stop(app);
    srv_trace_destroy(app->trace); /* after HTTP: no request traces any more */
    srv_shm_destroy(app->shm); /* no request holds a region once HTTP is stopped */
    eng_registry_destroy(app->registry);
    int rc = 0;
    srv_cache_ref_t refs[SRV_CACHE_REFS_MAX];
    size_t n = srv_app_caches(app, refs);
    for (size_t i = 0; i < n; i++) {
        alloc_cache_stats_t st;
        alloc_cache_stats(refs[i].cache, &st);
        if (st.allocated.current != 0) {
            rc = fs_err(FS_EBUSY, "cache '%s' (%s) still has %lld bytes allocated after every "
                        "model was unloaded", alloc_cache_name(refs[i].cache), refs[i].kind,
                        (long long)st.allocated.current);
            FS_LOG_E("app", "%s", fs_errmsg());
        }
    }
    for (size_t k = 0; k < app->n_devs; k++)
        eng_memory_close(&app->dev_mem[k]); /* before the CPU's: they borrow its host cache */
    if (app->has_cpu_mem)
        eng_memory_close(&app->cpu_mem);
    srv_model_overrides_free(app);
    pthread_mutex_destroy(&app->cfg_lock);
    pthread_mutex_destroy(&app->flight_lock);
    pthread_cond_destroy(&app->flight_cond);
    pthread_mutex_destroy(&app->tick_lock);
    pthread_cond_destroy(&app->tick_cond);
    free(app);
    return rc;
}

int srv_app_start(const cfg_t *cfg, srv_app_t **out)
{
    *out = NULL;
    srv_app_t *app = calloc(1, sizeof *app);
    if (!app)
        return fs_err(FS_ENOMEM, "out of host memory");
    app->cfg = *cfg;
    app->cuda_index = -1;
    app->start_unix_s = (uint64_t)time(NULL);
    pthread_mutex_init(&app->cfg_lock, NULL);
    pthread_mutex_init(&app->flight_lock, NULL);
    pthread_cond_init(&app->flight_cond, NULL);
    pthread_mutex_init(&app->tick_lock, NULL);
    pthread_cond_init(&app->tick_cond, NULL);
    fs_log_set_level(cfg->log.level);
    fs_log_set_format(cfg->log.format);
    int rc = srv_trace_create(cfg, &app->trace);
    if (rc == 0)
        rc = resolve_devices(app, &cfg->device);
    if (rc == 0 && cfg->server.shared_memory)
        rc = srv_shm_create(0, &app->shm);
    if (rc == 0)
        rc = open_memory(app);
    if (rc == 0)
        rc = policies_apply(app, cfg);
    if (rc == 0) {
        eng_registry_config_t rc_cfg = {.repository = cfg->repository, .n_devices = app->n_devs,
                                        .cpu_memory = app->has_cpu_mem ? &app->cpu_mem : &app->dev_mem[0],
                                        .options = model_options, .verify = srv_model_verify,
                                        .options_user = app};
        for (size_t k = 0; k < app->n_devs; k++) {
            rc_cfg.devices[k] = app->devs[k];
            rc_cfg.device_memory[k] = &app->dev_mem[k];
        }
        rc = eng_registry_create(&rc_cfg, &app->registry);
    }
    if (rc == 0)
        rc = srv_control_start(app);
    if (rc == 0)
        rc = ticker_start(app);
    if (rc == 0)
        rc = srv_http_start(app);
    if (rc != 0) {
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        (void)app_free(app);
        return fs_err(rc, "%s", msg);
    }
    atomic_store(&app->ready, true);
    char limit[32] = "none";
    alloc_cache_stats_t st;
    alloc_cache_stats(app->dev_mem[0].cache, &st);
    if (st.limit_bytes != (uint64_t)SIZE_MAX)
        fs_format_size(st.limit_bytes, limit, sizeof limit);
    FS_LOG_I("app", "flatserve %s listening on http://%s:%u, device %s (cache limit %s%s), "
             "repository '%s', %u HTTP threads", CFG_VERSION, cfg->server.host,
             (unsigned)app->port, app->device, limit, app->n_devs > 1 ? " each" : "",
             cfg->repository,
             (unsigned)cfg->server.threads);
    *out = app;
    return 0;
}

uint16_t srv_app_port(const srv_app_t *app)
{
    return app->port;
}

const char *srv_app_device(const srv_app_t *app)
{
    return app->device;
}

int srv_app_reload(srv_app_t *app, const cfg_t *cfg)
{
    bool live = false;
    char restart[1024];
    pthread_mutex_lock(&app->cfg_lock);
    cfg_diff(&app->cfg, cfg, &live, restart, sizeof restart);
    pthread_mutex_unlock(&app->cfg_lock);
    int rc = policies_apply(app, cfg);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&app->cfg_lock);
    /* What needs a restart keeps its running value. */
    cfg_t next = app->cfg;
    memcpy(next.memory.policies, cfg->memory.policies, sizeof next.memory.policies);
    next.memory.n_policies = cfg->memory.n_policies;
    next.memory.tick_ns = cfg->memory.tick_ns;
    next.batching = cfg->batching;
    next.log = cfg->log;
    app->cfg = next;
    pthread_mutex_unlock(&app->cfg_lock);
    fs_log_set_level(cfg->log.level);
    fs_log_set_format(cfg->log.format);
    /* Batching of the models serving now, from their config.json over the
     * new defaults. */
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    if (eng_registry_index(app->registry, &entries, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            if (entries[i].state != ENG_MODEL_READY)
                continue;
            if (eng_registry_refresh_batching(app->registry, entries[i].name) != 0)
                FS_LOG_W("app", "model '%s': batching not changed: %s", entries[i].name,
                         fs_errmsg());
        }
        free(entries);
    }
    pthread_mutex_lock(&app->tick_lock);
    pthread_cond_signal(&app->tick_cond);
    pthread_mutex_unlock(&app->tick_lock);
    FS_LOG_I("app", "configuration reloaded: memory policies, batching and logging applied");
    if (restart[0])
        FS_LOG_W("app", "changed but not applied until restart: %s", restart);
    return 0;
}

int srv_app_stop(srv_app_t *app)
{
    if (!app)
        return 0;
    atomic_store(&app->ready, false);
    atomic_store(&app->draining, true); /* from here a new connection is closed at accept */
    srv_control_stop(app);
    /* Nothing new comes: what is queued runs now, not after its delay. */
    if (app->registry)
        eng_registry_flush(app->registry);
    uint64_t deadline = fs_clock_now_ns() + app->cfg.server.shutdown_timeout_ns;
    int rc = srv_http_wait_idle(app, deadline);
    if (rc != 0) {
        FS_LOG_E("app", "shutdown: %s; exiting without waiting further", fs_errmsg());
        return rc;
    }
    FS_LOG_I("app", "shutdown: every request answered; unloading models");
    return app_free(app);
}
