/* report.c -- the end of a run: figures, the verdict against the bounds,
 * the summary on stdout and as JSON, the plots.
 *
 * The verdict is a list of checks, one per bound, each with the figures
 * that decided it, so a failure says what was measured against what:
 * lost requests (always 0 allowed), unexpected errors (--max-errors),
 * reserved ratio and RSS drift after the mark (--max-reserved-ratio,
 * --max-rss-drift), device bytes after each unload+empty_cache against the
 * baseline (--max-cycle-drift-bytes) and the RSS across cycles
 * (--max-rss-cycle-drift, when given). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"
#include "loadtest/report_impl.h"

#define MIB (1024.0 * 1024.0)

/* The RSS across cycles is judged from a mark too: the first cycles warm
 * the process's heap (plans, arenas) just as the first seconds of traffic
 * do. The device bytes are judged on every cycle: they must come back
 * exactly, warm or not. */
static void cycles_compute(const lg_run_t *run, double warmup_fraction, lg_cycles_result_t *c)
{
    memset(c, 0, sizeof *c);
    size_t first = 0;
    if (run->n_points && run->points[0].cycle == 0) {
        c->have_baseline = 1;
        c->baseline = &run->points[0];
        first = 1;
    }
    c->n = run->n_points - first;
    if (c->n == 0)
        return;
    for (size_t i = first; c->baseline && i < run->n_points; i++) {
        double da = run->points[i].mem.allocated - c->baseline->mem.allocated;
        double dr = run->points[i].mem.reserved - c->baseline->mem.reserved;
        c->max_alloc_drift = i == first || da > c->max_alloc_drift ? da : c->max_alloc_drift;
        c->max_reserved_drift =
            i == first || dr > c->max_reserved_drift ? dr : c->max_reserved_drift;
    }
    size_t mark = first + (size_t)(warmup_fraction * (double)c->n), n_fit = run->n_points - mark;
    if (mark > run->n_points - 1)
        mark = run->n_points - 1;
    c->rss_mark_cycle = run->points[mark].cycle;
    c->rss_mark = run->points[mark].rss;
    c->rss_last = run->points[run->n_points - 1].rss;
    c->rss_drift = c->rss_last - c->rss_mark;
    double *x = malloc(n_fit * sizeof *x), *y = malloc(n_fit * sizeof *y), icpt;
    if (x && y && n_fit >= 3) {
        for (size_t i = 0; i < n_fit; i++) {
            x[i] = (double)run->points[mark + i].cycle;
            y[i] = run->points[mark + i].rss;
        }
        c->rss_slope_valid = lg_fit_line(x, y, n_fit, &c->rss_slope_per_cycle, &icpt) == 0;
    }
    free(x);
    free(y);
}

static const char *size_text(double bytes, char *buf, size_t len);

/* Scenario 5's bound: after `after` with nothing in flight, idle_trim
 * gives back every fully free segment beyond `keep`, so by after + 100 ms
 * of the last answer reserved must be at most what live blocks pin (the
 * segments holding weights and workspaces, read from /v1/memory after the
 * idle time) plus keep. The sample judged is the first at or after that
 * deadline; the message says when it was taken and when reserved first
 * came down. */
static void idle_trim_judge(const lg_run_t *run, lg_verdict_t *v)
{
    const lg_opts_t *o = run->o;
    char a[32], b[32], k[32], f[32];
    if (!run->have_idle_mem) {
        lg_verdict_add(v, "idle-trim", INFINITY, 0,
                       "no /v1/memory segment list after the idle time to judge against");
        return;
    }
    double bound = run->idle_mem.pinned + (double)o->idle_trim_keep;
    double idle0 = lg_since_s(run, run->last_answer_ns);
    double deadline = idle0 + (double)o->idle_trim_after_ns / 1e9 + 0.1;
    const lg_sample_t *judged = NULL, *fell = NULL;
    for (size_t i = run->traffic_end_sample + 1; i < run->n_samples; i++) {
        const lg_sample_t *s = &run->samples[i];
        if (!fell && s->m.reserved <= bound)
            fell = s;
        if (!judged && s->t_s >= deadline)
            judged = s;
    }
    if (!judged) {
        lg_verdict_add(v, "idle-trim", INFINITY, 0,
                       "no sample at or after the deadline %.2f s (a longer --idle)", deadline);
        return;
    }
    lg_verdict_add(v, "idle-trim", judged->m.reserved, bound,
                   "reserved %s at %.2f s idle (deadline: after %.2f s + 100 ms), against %s "
                   "pinned by live blocks + keep %s; first at or under it at %s",
                   size_text(judged->m.reserved, a, sizeof a), judged->t_s - idle0,
                   (double)o->idle_trim_after_ns / 1e9,
                   size_text(run->idle_mem.pinned, b, sizeof b),
                   size_text((double)o->idle_trim_keep, k, sizeof k),
                   fell ? (snprintf(f, sizeof f, "%.2f s idle", fell->t_s - idle0), f) : "no sample");
}

static void result_compute(const lg_run_t *run, lg_result_t *r)
{
    const lg_opts_t *o = run->o;
    memset(r, 0, sizeof *r);
    r->traffic_s = (double)(run->traffic_end_ns - run->t0_ns) / 1e9;
    if (r->traffic_s > 0) {
        r->throughput = (double)run->answered / r->traffic_s;
        r->achieved_rate = (double)run->sent / r->traffic_s;
    }
    r->rate_kept = run->late * 100 <= run->sent;
    r->errors = run->unexpected + run->admin_failed;

    /* The verdict is over the traffic; idle samples show idle_trim, which
     * is meant to change the figures. */
    r->n_traffic = run->n_samples ? run->traffic_end_sample + 1 : 0;
    double *t = malloc((r->n_traffic + 1) * sizeof *t);
    double *res = malloc((r->n_traffic + 1) * sizeof *res);
    double *rss = malloc((r->n_traffic + 1) * sizeof *rss);
    if (t && res && rss) {
        for (size_t i = 0; i < r->n_traffic; i++) {
            t[i] = run->samples[i].t_s;
            res[i] = run->samples[i].m.reserved;
            rss[i] = run->samples[i].m.rss;
        }
        lg_flatness_measure(t, res, rss, r->n_traffic, o->warmup_fraction, &r->flat);
    }
    free(t);
    free(res);
    free(rss);

    lg_verdict_t *v = &r->verdict;
    lg_verdict_add(v, "lost-requests", (double)run->lost, 0,
                   "%llu of %llu requests sent were never answered",
                   (unsigned long long)run->lost, (unsigned long long)run->sent);
    lg_verdict_add(v, "max-errors", (double)r->errors, (double)o->max_errors,
                   "%llu unexpected answers, %llu failed admin or metrics calls",
                   (unsigned long long)run->unexpected, (unsigned long long)run->admin_failed);
    lg_flatness_judge(&r->flat, o->max_reserved_ratio, o->max_rss_drift, v);

    cycles_compute(run, o->warmup_fraction, &r->cyc);
    if (o->cycles) {
        const lg_cycles_result_t *c = &r->cyc;
        double worst = c->max_alloc_drift > c->max_reserved_drift ? c->max_alloc_drift
                                                                  : c->max_reserved_drift;
        if (!c->have_baseline || c->n == 0)
            lg_verdict_add(v, "max-cycle-drift-bytes", INFINITY, (double)o->max_cycle_drift_bytes,
                           "no cycle was measured against a baseline");
        else
            lg_verdict_add(v, "max-cycle-drift-bytes", worst, (double)o->max_cycle_drift_bytes,
                           "after unload+empty_cache, worst of %zu cycles: allocated %+.0f B, "
                           "reserved %+.0f B against the baseline",
                           c->n, c->max_alloc_drift, c->max_reserved_drift);
        if (o->rss_cycle_bound_set && c->n)
            lg_verdict_add(v, "max-rss-cycle-drift", c->rss_drift, (double)o->max_rss_cycle_drift,
                           "RSS %.2f MiB after cycle %u (the mark) -> %.2f MiB after cycle "
                           "%zu: %+.0f B",
                           c->rss_mark / MIB, c->rss_mark_cycle, c->rss_last / MIB, c->n,
                           c->rss_drift);
    }
    if (o->idle_trim_after_ns)
        idle_trim_judge(run, v);
}

/* --- text ----------------------------------------------------------------------- */

static const char *size_text(double bytes, char *buf, size_t len)
{
    if (bytes < 0) {
        char tmp[32];
        snprintf(buf, len, "-%s", fs_format_size((uint64_t)-bytes, tmp, sizeof tmp));
        return buf;
    }
    return fs_format_size((uint64_t)bytes, buf, len);
}

static void pick_text(const lg_pick_t *p, char *buf, size_t len)
{
    size_t n = 0;
    if (p->is_range) {
        snprintf(buf, len, "%u..%u", p->lo, p->hi);
        return;
    }
    buf[0] = '\0';
    for (uint32_t i = 0; i < p->n && n + 12 < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%u", i ? "," : "", p->values[i]);
}

static void print_mix(const lg_run_t *run, FILE *out)
{
    const lg_opts_t *o = run->o;
    static const char *enc[] = {"json", "binary", "mixed"};
    char pick[256];
    fputs("mix:", out);
    for (uint32_t i = 0; i < run->n_models; i++)
        fprintf(out, "%s %s (weight %g)", i ? "," : "", run->models[i].name,
                run->models[i].weight);
    pick_text(&o->batch, pick, sizeof pick);
    fprintf(out, "; batch %s", pick);
    for (uint32_t i = 0; i < o->n_dims; i++) {
        pick_text(&o->dims[i].pick, pick, sizeof pick);
        fprintf(out, "; %s axis %u: %s", o->dims[i].input, o->dims[i].axis, pick);
    }
    fprintf(out, "; %s; %.1f%% bad\n", enc[o->encoding], o->bad_fraction * 100);
}

static void print_requests(const lg_run_t *run, const lg_result_t *r, FILE *out)
{
    const lg_opts_t *o = run->o;
    fprintf(out, "requests: %llu sent (%llu deliberately bad), %llu answered, %llu lost\n",
            (unsigned long long)run->sent, (unsigned long long)run->sent_bad,
            (unsigned long long)run->answered, (unsigned long long)run->lost);
    fprintf(out, "  ok %llu, bad rejected with 4xx %llu, unexpected %llu\n",
            (unsigned long long)run->ok, (unsigned long long)run->bad_rejected,
            (unsigned long long)run->unexpected);
    fputs("  answers by status:", out);
    for (int s = 0; s < LG_STATUS_MAX; s++)
        if (run->status_all[s])
            fprintf(out, " %d: %llu", s, (unsigned long long)run->status_all[s]);
    fputs(run->answered ? "\n" : " none\n", out);
    for (int s = 0; s < LG_STATUS_MAX; s++)
        if (run->status_unexpected[s])
            fprintf(out, "  unexpected %d: %llu\n", s,
                    (unsigned long long)run->status_unexpected[s]);
    for (int c = 0; c < CURL_LAST; c++)
        if (run->transport[c])
            fprintf(out, "  transport error \"%s\": %llu\n", curl_easy_strerror((CURLcode)c),
                    (unsigned long long)run->transport[c]);
    fprintf(out, "throughput: %.1f answers/s over %.1f s of traffic\n", r->throughput,
            r->traffic_s);
    if (o->rate > 0)
        fprintf(out, "open loop: target %.1f req/s, achieved %.1f; %llu sent late (>10 ms), "
                     "max lag %.1f ms%s\n",
                o->rate, r->achieved_rate, (unsigned long long)run->late,
                (double)run->max_lag_ns / 1e6,
                r->rate_kept ? "" : "  -- TARGET RATE NOT KEPT (over 1% late)");
    const lg_hist_t *h = &run->hist;
    fprintf(out, "latency (answered 200): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms, "
                 "mean %.3f ms\n",
            (double)lg_hist_quantile(h, 0.5) / 1e6, (double)lg_hist_quantile(h, 0.9) / 1e6,
            (double)lg_hist_quantile(h, 0.99) / 1e6, (double)h->max_ns / 1e6,
            lg_hist_mean_ns(h) / 1e6);
    if (o->reload_every || o->reload_every_ns)
        fprintf(out, "reloads: %llu sent, %llu ok, %llu failed\n",
                (unsigned long long)run->reloads_sent, (unsigned long long)run->reloads_ok,
                (unsigned long long)run->reloads_failed);
}

static void print_cycles(const lg_run_t *run, const lg_result_t *r, FILE *out)
{
    const lg_cycles_result_t *c = &r->cyc;
    char a[32], b[32], d[32];
    fprintf(out, "cycles: %u of %u done\n", run->cycles_done, run->o->cycles);
    if (c->baseline)
        fprintf(out, "  baseline (unloaded, emptied): allocated %s, reserved %s, RSS %s\n",
                size_text(c->baseline->mem.allocated, a, sizeof a),
                size_text(c->baseline->mem.reserved, b, sizeof b),
                size_text(c->baseline->rss, d, sizeof d));
    for (size_t i = c->baseline ? 1 : 0; i < run->n_points; i++) {
        size_t k = i - (c->baseline ? 1 : 0);
        if (c->n > 10 && k >= 5 && k + 5 < c->n) {
            if (k == 5)
                fprintf(out, "  ...\n");
            continue;
        }
        const lg_cycle_point_t *p = &run->points[i];
        fprintf(out, "  cycle %u at %.1f s: allocated %s, reserved %s, RSS %s%s\n", p->cycle,
                p->t_s, size_text(p->mem.allocated, a, sizeof a),
                size_text(p->mem.reserved, b, sizeof b), size_text(p->rss, d, sizeof d),
                p->ok ? "" : "  (a call failed)");
    }
    if (c->n && c->baseline)
        fprintf(out, "  device drift against the baseline, worst cycle: allocated %+.0f B, "
                     "reserved %+.0f B\n",
                c->max_alloc_drift, c->max_reserved_drift);
    if (c->n)
        fprintf(out, "  RSS: %s after cycle %u (the mark), %s after the last (%+.0f B)%s",
                size_text(c->rss_mark, a, sizeof a), c->rss_mark_cycle,
                size_text(c->rss_last, b, sizeof b), c->rss_drift,
                c->rss_slope_valid ? "" : "\n");
    if (c->rss_slope_valid)
        fprintf(out, "; fit %+.0f B per cycle\n", c->rss_slope_per_cycle);
}

static void print_memory(const lg_run_t *run, const lg_result_t *r, FILE *out)
{
    char a[32], b[32], d[32], e[32], g[32];
    if (!run->n_samples) {
        fputs("memory: no sample of /metrics was taken\n", out);
        return;
    }
    const lg_sample_t *first = &run->samples[0], *end = &run->samples[r->n_traffic - 1];
    fprintf(out, "memory (device caches): reserved %s -> %s (peak %s), allocated %s -> %s\n",
            size_text(first->m.reserved, a, sizeof a), size_text(end->m.reserved, b, sizeof b),
            size_text(end->m.peak_reserved, d, sizeof d),
            size_text(first->m.allocated, e, sizeof e), size_text(end->m.allocated, g, sizeof g));
    fprintf(out, "  RSS %s -> %s; device allocs %.0f, frees %.0f; %zu samples (%llu skipped "
                 "or failed)\n",
            size_text(first->m.rss, a, sizeof a), size_text(end->m.rss, b, sizeof b),
            end->m.device_allocs - first->m.device_allocs,
            end->m.device_frees - first->m.device_frees, run->n_samples,
            (unsigned long long)run->samples_failed);
    if (run->n_samples > r->n_traffic) {
        const lg_sample_t *last = &run->samples[run->n_samples - 1];
        fprintf(out, "idle %.1f s: reserved %s -> %s, RSS %s -> %s, released by idle_trim %s\n",
                last->t_s - end->t_s, size_text(end->m.reserved, a, sizeof a),
                size_text(last->m.reserved, b, sizeof b), size_text(end->m.rss, d, sizeof d),
                size_text(last->m.rss, e, sizeof e),
                size_text(last->m.released_idle_trim - end->m.released_idle_trim, g, sizeof g));
    }
    const lg_flatness_t *f = &r->flat;
    if (!f->valid) {
        fprintf(out, "flatness: not judged: %zu samples of the traffic, the mark needs at least "
                     "one after it (a longer run, or a shorter --sample-interval)\n",
                r->n_traffic);
        return;
    }
    fprintf(out, "flatness: mark at %.1f s (%.0f%% of the traffic), end at %.1f s, %zu samples "
                 "from the mark on\n",
            f->mark_t_s, run->o->warmup_fraction * 100, f->end_t_s,
            f->end_index - f->mark_index + 1);
    const lg_flat_series_t *s[2] = {&f->reserved, &f->rss};
    const char *names[2] = {"reserved", "RSS"};
    for (int i = 0; i < 2; i++) {
        fprintf(out, "  %-8s %s -> %s: ratio %.4f", names[i], size_text(s[i]->mark, a, sizeof a),
                size_text(s[i]->end, b, sizeof b), s[i]->ratio);
        if (s[i]->slope_valid)
            fprintf(out, "; slope %+.1f B/s (%+.3f%%/hour of the mean %s)", s[i]->slope_per_s,
                    s[i]->slope_pct_per_hour, size_text(s[i]->mean, d, sizeof d));
        fputc('\n', out);
    }
    fprintf(out, "  RSS floor (least of the first and the last quarter after the mark) %s -> %s\n",
            size_text(f->rss.floor_mark, a, sizeof a), size_text(f->rss.floor_end, b, sizeof b));
}

/* Byte counts whole, ratios and fractions to 4 significant digits. */
static const char *num_text(double v, char *buf, size_t len)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%.4g", v);
    return buf;
}

static void print_verdict(const lg_run_t *run, const lg_result_t *r, FILE *out)
{
    char a[32], b[32];
    const lg_verdict_t *v = &r->verdict;
    for (int i = 0; i < run->n_notes; i++)
        fprintf(out, "note: %s\n", run->notes[i]);
    fprintf(out, "verdict: %s (%d checks, %d failed)\n", v->failed ? "FAIL" : "PASS", v->n,
            v->failed);
    for (int i = 0; i < v->n; i++) {
        const lg_check_t *c = &v->checks[i];
        fprintf(out, "  %s %-22s %s (%s %s %s)\n", c->ok ? "ok  " : "FAIL", c->name, c->detail,
                num_text(c->value, a, sizeof a), c->ok ? "<=" : ">",
                num_text(c->limit, b, sizeof b));
    }
}

/* --- JSON ------------------------------------------------------------------------ */

static cJSON *json_series(const lg_flat_series_t *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "mark", s->mark);
    cJSON_AddNumberToObject(o, "end", s->end);
    cJSON_AddNumberToObject(o, "ratio", isfinite(s->ratio) ? s->ratio : 1e300);
    cJSON_AddNumberToObject(o, "mean", s->mean);
    cJSON_AddNumberToObject(o, "floor_mark", s->floor_mark);
    cJSON_AddNumberToObject(o, "floor_end", s->floor_end);
    cJSON_AddNumberToObject(o, "floor_drift", isfinite(s->floor_drift) ? s->floor_drift : 1e300);
    if (s->slope_valid) {
        cJSON_AddNumberToObject(o, "slope_bytes_per_s", s->slope_per_s);
        cJSON_AddNumberToObject(o, "slope_pct_per_hour", s->slope_pct_per_hour);
    }
    return o;
}

static cJSON *json_requests(const lg_run_t *run, const lg_result_t *r)
{
    cJSON *q = cJSON_CreateObject();
    cJSON_AddNumberToObject(q, "sent", (double)run->sent);
    cJSON_AddNumberToObject(q, "sent_bad", (double)run->sent_bad);
    cJSON_AddNumberToObject(q, "answered", (double)run->answered);
    cJSON_AddNumberToObject(q, "ok", (double)run->ok);
    cJSON_AddNumberToObject(q, "bad_rejected", (double)run->bad_rejected);
    cJSON_AddNumberToObject(q, "unexpected", (double)run->unexpected);
    cJSON_AddNumberToObject(q, "lost", (double)run->lost);
    cJSON *st = cJSON_AddObjectToObject(q, "by_status");
    cJSON *un = cJSON_AddObjectToObject(q, "unexpected_by_status");
    cJSON *tr = cJSON_AddObjectToObject(q, "transport_errors");
    char key[16];
    for (int s = 0; s < LG_STATUS_MAX; s++) {
        snprintf(key, sizeof key, "%d", s);
        if (run->status_all[s])
            cJSON_AddNumberToObject(st, key, (double)run->status_all[s]);
        if (run->status_unexpected[s])
            cJSON_AddNumberToObject(un, key, (double)run->status_unexpected[s]);
    }
    for (int c = 0; c < CURL_LAST; c++)
        if (run->transport[c])
            cJSON_AddNumberToObject(tr, curl_easy_strerror((CURLcode)c), (double)run->transport[c]);
    cJSON_AddNumberToObject(q, "throughput_per_s", r->throughput);
    return q;
}

static cJSON *json_cycles(const lg_run_t *run, const lg_result_t *r)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "requested", run->o->cycles);
    cJSON_AddNumberToObject(c, "done", run->cycles_done);
    cJSON_AddNumberToObject(c, "max_allocated_drift_bytes", r->cyc.max_alloc_drift);
    cJSON_AddNumberToObject(c, "max_reserved_drift_bytes", r->cyc.max_reserved_drift);
    cJSON_AddNumberToObject(c, "rss_mark_cycle", r->cyc.rss_mark_cycle);
    cJSON_AddNumberToObject(c, "rss_drift_bytes", r->cyc.rss_drift);
    if (r->cyc.rss_slope_valid)
        cJSON_AddNumberToObject(c, "rss_slope_bytes_per_cycle", r->cyc.rss_slope_per_cycle);
    cJSON *pts = cJSON_AddArrayToObject(c, "points");
    for (size_t i = 0; i < run->n_points; i++) {
        const lg_cycle_point_t *p = &run->points[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "cycle", p->cycle);
        cJSON_AddNumberToObject(o, "time_s", p->t_s);
        cJSON_AddNumberToObject(o, "allocated_bytes", p->mem.allocated);
        cJSON_AddNumberToObject(o, "reserved_bytes", p->mem.reserved);
        cJSON_AddNumberToObject(o, "rss_bytes", p->rss);
        cJSON_AddBoolToObject(o, "ok", p->ok);
        cJSON_AddItemToArray(pts, o);
    }
    return c;
}

static int json_write(const lg_run_t *run, const lg_result_t *r, const char *path)
{
    const lg_opts_t *o = run->o;
    const lg_hist_t *h = &run->hist;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "url", run->base);
    cJSON_AddStringToObject(root, "scenario", o->scenario);
    cJSON_AddStringToObject(root, "mode", o->rate > 0 ? "open" : "closed");
    cJSON_AddNumberToObject(root, "concurrency", o->concurrency);
    cJSON_AddNumberToObject(root, "traffic_s", r->traffic_s);
    cJSON_AddItemToObject(root, "requests", json_requests(run, r));
    if (o->rate > 0) {
        cJSON *rate = cJSON_AddObjectToObject(root, "rate");
        cJSON_AddNumberToObject(rate, "target_per_s", o->rate);
        cJSON_AddNumberToObject(rate, "achieved_per_s", r->achieved_rate);
        cJSON_AddNumberToObject(rate, "late", (double)run->late);
        cJSON_AddNumberToObject(rate, "max_lag_ms", (double)run->max_lag_ns / 1e6);
        cJSON_AddBoolToObject(rate, "kept", r->rate_kept);
    }
    cJSON *lat = cJSON_AddObjectToObject(root, "latency_ms");
    const double qs[] = {0.5, 0.9, 0.99};
    const char *qn[] = {"p50", "p90", "p99"};
    for (int i = 0; i < 3; i++)
        cJSON_AddNumberToObject(lat, qn[i], (double)lg_hist_quantile(h, qs[i]) / 1e6);
    cJSON_AddNumberToObject(lat, "max", (double)h->max_ns / 1e6);
    cJSON_AddNumberToObject(lat, "mean", lg_hist_mean_ns(h) / 1e6);
    cJSON *rl = cJSON_AddObjectToObject(root, "reloads");
    cJSON_AddNumberToObject(rl, "sent", (double)run->reloads_sent);
    cJSON_AddNumberToObject(rl, "ok", (double)run->reloads_ok);
    cJSON_AddNumberToObject(rl, "failed", (double)run->reloads_failed);
    if (o->cycles)
        cJSON_AddItemToObject(root, "cycles", json_cycles(run, r));
    cJSON *fl = cJSON_AddObjectToObject(root, "flatness");
    cJSON_AddBoolToObject(fl, "judged", r->flat.valid);
    cJSON_AddNumberToObject(fl, "warmup_fraction", o->warmup_fraction);
    if (r->flat.valid) {
        cJSON_AddNumberToObject(fl, "mark_s", r->flat.mark_t_s);
        cJSON_AddNumberToObject(fl, "end_s", r->flat.end_t_s);
        cJSON_AddItemToObject(fl, "reserved", json_series(&r->flat.reserved));
        cJSON_AddItemToObject(fl, "rss", json_series(&r->flat.rss));
    }
    cJSON *checks = cJSON_AddArrayToObject(root, "checks");
    for (int i = 0; i < r->verdict.n; i++) {
        const lg_check_t *c = &r->verdict.checks[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "bound", c->name);
        cJSON_AddNumberToObject(j, "value", isfinite(c->value) ? c->value : 1e300);
        cJSON_AddNumberToObject(j, "limit", c->limit);
        cJSON_AddBoolToObject(j, "ok", c->ok);
        cJSON_AddStringToObject(j, "detail", c->detail);
        cJSON_AddItemToArray(checks, j);
    }
    cJSON *notes = cJSON_AddArrayToObject(root, "notes");
    for (int i = 0; i < run->n_notes; i++)
        cJSON_AddItemToArray(notes, cJSON_CreateString(run->notes[i]));
    cJSON_AddStringToObject(root, "verdict", r->verdict.failed ? "fail" : "pass");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return fs_err(FS_ENOMEM, "--summary: out of memory");
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
        rc = fs_err(FS_EIO, "--summary: cannot write \"%s\": %s", path, strerror(errno));
    if (f && fclose(f) != 0 && rc == 0)
        rc = fs_err(FS_EIO, "--summary: cannot write \"%s\": %s", path, strerror(errno));
    free(text);
    return rc;
}

int lg_run_report(lg_run_t *run, FILE *out)
{
    const lg_opts_t *o = run->o;
    lg_result_t r;
    result_compute(run, &r);
    fprintf(out, "loadgen: %s, ", run->base);
    if (o->rate > 0)
        fprintf(out, "open loop at %.1f req/s (%s, at most %u in flight)", o->rate,
                o->arrival == LG_ARRIVAL_FIXED ? "fixed spacing" : "Poisson",
                o->concurrency_set ? o->concurrency : 64);
    else
        fprintf(out, "closed loop, concurrency %u", o->concurrency);
    if (o->scenario[0])
        fprintf(out, ", scenario %s", o->scenario);
    fprintf(out, ": %.1f s of traffic\n", r.traffic_s);
    print_mix(run, out);
    print_requests(run, &r, out);
    if (o->cycles)
        print_cycles(run, &r, out);
    print_memory(run, &r, out);
    print_verdict(run, &r, out);
    int status = r.verdict.failed ? 1 : 0;
    if (o->summary[0] && json_write(run, &r, o->summary) != 0) {
        fprintf(stderr, "loadgen: %s\n", fs_errmsg());
        status = 1;
    }
    if (o->plot[0] && lg_plot_write(run, &r, o->plot) != 0) {
        fprintf(stderr, "loadgen: %s\n", fs_errmsg());
        status = 1;
    }
    return status;
}
