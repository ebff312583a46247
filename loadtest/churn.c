/* churn.c -- model churn while the traffic runs: reloads (a rebuild of each
 * model of the mix, beside the serving version, with requests in flight)
 * and load/unload cycles.
 *
 * A cycle is a sequence of steps, each a set of calls in flight at once;
 * the next step starts when the last call of the step has answered:
 *
 *   TRAFFIC --K requests--> DRAIN --none in flight--> UNLOAD (every model)
 *     --> EMPTY (POST /v1/memory/empty_cache) --> MEASURE (GET /v1/memory,
 *     GET /metrics) --> LOAD (every model) --> TRAFFIC
 *
 * The first sequence runs before any traffic and takes the baseline: the
 * device bytes with the mix unloaded and the cache emptied, to which every
 * later cycle must come back. A failed call is counted and the sequence
 * goes on, so one refused unload does not leave the models unloaded. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "loadtest/run_impl.h"

/* --- reloads ------------------------------------------------------------------- */

static void on_reload(lg_run_t *run, lg_xfer_t *x)
{
    run->reloads_in_flight--;
    if (x->rc == CURLE_OK && x->status == 200) {
        run->reloads_ok++;
        return;
    }
    run->reloads_failed++;
    lg_admin_failed(run, x);
}

/* POST /v2/repository/models/M/load: a rebuild beside the serving version. */
static void reload_post(lg_run_t *run, const char *model)
{
    char path[LG_NAME_MAX + 64];
    snprintf(path, sizeof path, "/v2/repository/models/%s/load", model);
    run->reloads_sent++;
    lg_xfer_t *x = lg_xfer_new(run, "POST", path, 4096, on_reload);
    if (x && lg_xfer_start(run, x) == 0) {
        run->reloads_in_flight++;
        return;
    }
    run->reloads_failed++;
    run->admin_failed++;
    lg_run_note(run, "%s", fs_errmsg());
}

static void reload_tick(lg_run_t *run, uint64_t now)
{
    const lg_opts_t *o = run->o;
    if (run->phase != LG_PH_TRAFFIC || run->reloads_in_flight ||
        (run->cy != LG_CY_OFF && run->cy != LG_CY_TRAFFIC))
        return;
    int due = (o->reload_every && run->sent - run->reload_base_sent >= o->reload_every) ||
              (o->reload_every_ns && now - run->reload_base_ns >= o->reload_every_ns);
    if (!due)
        return;
    run->reload_base_sent = run->sent;
    run->reload_base_ns = now;
    for (uint32_t i = 0; i < run->n_models; i++)
        reload_post(run, run->models[i].name);
}

/* --- cycles --------------------------------------------------------------------- */

/* Every call of a cycle step answers here; failures mark the cycle. */
static void on_step(lg_run_t *run, lg_xfer_t *x)
{
    run->cy_pending--;
    if (x->rc != CURLE_OK || x->status != 200) {
        run->cy_cur.ok = 0;
        lg_admin_failed(run, x);
    }
}

static void on_memory(lg_run_t *run, lg_xfer_t *x)
{
    on_step(run, x);
    if (x->rc == CURLE_OK && x->status == 200 &&
        lg_memory_parse(x->resp ? x->resp : "", &run->cy_cur.mem) != 0) {
        run->cy_cur.ok = 0;
        run->admin_failed++;
        lg_run_note(run, "%s", fs_errmsg());
    }
}

static void on_metrics(lg_run_t *run, lg_xfer_t *x)
{
    lg_metrics_t m;
    on_step(run, x);
    if (x->rc != CURLE_OK || x->status != 200)
        return;
    if (lg_metrics_parse(x->resp ? x->resp : "", &m) != 0 || !m.have_rss) {
        run->cy_cur.ok = 0;
        run->admin_failed++;
        lg_run_note(run, "/metrics during a cycle: no process_resident_memory_bytes");
        return;
    }
    run->cy_cur.rss = m.rss;
}

/* Starts a step's call; one that cannot start counts as answered, failed. */
static void step_call(lg_run_t *run, const char *method, const char *path, size_t keep,
                      lg_xfer_done_fn done)
{
    lg_xfer_t *x = lg_xfer_new(run, method, path, keep, done);
    if (x && lg_xfer_start(run, x) == 0) {
        run->cy_pending++;
        return;
    }
    run->cy_cur.ok = 0;
    run->admin_failed++;
    lg_run_note(run, "%s", fs_errmsg());
}

/* POST /v2/repository/models/M/{load,unload} for every model of the mix. */
static void step_models(lg_run_t *run, const char *verb)
{
    char path[LG_NAME_MAX + 64];
    for (uint32_t i = 0; i < run->n_models; i++) {
        snprintf(path, sizeof path, "/v2/repository/models/%s/%s", run->models[i].name, verb);
        step_call(run, "POST", path, 4096, on_step);
    }
}

static void points_add(lg_run_t *run, const lg_cycle_point_t *p)
{
    if (run->n_points == run->cap_points) {
        size_t cap = run->cap_points ? 2 * run->cap_points : 64;
        lg_cycle_point_t *grown = realloc(run->points, cap * sizeof *grown);
        if (!grown) {
            lg_run_note(run, "out of memory recording cycle %u", p->cycle);
            return;
        }
        run->points = grown;
        run->cap_points = cap;
    }
    run->points[run->n_points++] = *p;
}

void lg_churn_start(lg_run_t *run)
{
    if (!run->o->cycles) {
        run->cy = LG_CY_OFF;
        return;
    }
    run->cy = LG_CY_DRAIN;
    run->cy_baseline = 1;
    memset(&run->cy_cur, 0, sizeof run->cy_cur);
    run->cy_cur.ok = 1;
}

int lg_churn_may_send(const lg_run_t *run)
{
    if (run->cy == LG_CY_OFF)
        return 1;
    /* After the last cycle the run is over: no traffic past it. */
    return run->cy == LG_CY_TRAFFIC && run->cycles_done < run->o->cycles &&
           run->sent - run->cy_base_sent < run->o->cycle_requests;
}

int lg_churn_idle(const lg_run_t *run)
{
    return run->reloads_in_flight == 0 && (run->cy == LG_CY_OFF || run->cy == LG_CY_TRAFFIC);
}

static void cycle_tick(lg_run_t *run, uint64_t now)
{
    const lg_opts_t *o = run->o;
    if (run->cy_pending)
        return;
    switch (run->cy) {
    case LG_CY_OFF:
        return;
    case LG_CY_TRAFFIC:
        if (run->phase == LG_PH_TRAFFIC && run->cycles_done < o->cycles &&
            run->sent - run->cy_base_sent >= o->cycle_requests) {
            run->cy = LG_CY_DRAIN;
            memset(&run->cy_cur, 0, sizeof run->cy_cur);
            run->cy_cur.ok = 1;
        }
        return;
    case LG_CY_DRAIN:
        if (run->in_flight || run->reloads_in_flight)
            return;
        step_models(run, "unload");
        run->cy = LG_CY_UNLOAD;
        return;
    case LG_CY_UNLOAD:
        step_call(run, "POST", "/v1/memory/empty_cache", 4096, on_step);
        run->cy = LG_CY_EMPTY;
        return;
    case LG_CY_EMPTY:
        step_call(run, "GET", "/v1/memory?segments=0", 1 << 20, on_memory);
        step_call(run, "GET", "/metrics", 1 << 22, on_metrics);
        run->cy = LG_CY_MEASURE;
        return;
    case LG_CY_MEASURE:
        run->cy_cur.cycle = run->cy_baseline ? 0 : run->cycles_done + 1;
        run->cy_cur.t_s = lg_since_s(run, now);
        points_add(run, &run->cy_cur);
        if (!run->cy_baseline)
            run->cycles_done++;
        step_models(run, "load");
        run->cy = LG_CY_LOAD;
        return;
    case LG_CY_LOAD:
        run->cy_baseline = 0;
        run->cy_base_sent = run->sent;
        run->cy = LG_CY_TRAFFIC;
        return;
    }
}

void lg_churn_tick(lg_run_t *run, uint64_t now)
{
    reload_tick(run, now);
    cycle_tick(run, now);
}
