/* sampler.c -- GET /metrics every --sample-interval, each answer one sample
 * (and one CSV row, flushed, so a soak killed half way still leaves its
 * data), with the latency quantiles of the interval since the last one.
 *
 * One sample at a time: when the server is slow to answer /metrics, the
 * next is skipped rather than queued, so samples never pile up on a server
 * that is already behind. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"
#include "loadtest/run_impl.h"

#define NS_PER_S 1000000000ull

/* Columns of the CSV; report.c's gnuplot script reads them by number. */
static const char csv_header[] =
    "time_s,requests,errors,allocated_bytes,reserved_bytes,peak_allocated_bytes,"
    "peak_reserved_bytes,weights_bytes,activations_bytes,rss_bytes,device_allocs,"
    "device_frees,p50_ms,p99_ms,phase\n";

int lg_sampler_open(lg_run_t *run)
{
    const lg_opts_t *o = run->o;
    if (o->csv[0])
        snprintf(run->csv_path, sizeof run->csv_path, "%s", o->csv);
    else if (o->plot[0])
        snprintf(run->csv_path, sizeof run->csv_path, "%s.csv", o->plot);
    if (!run->csv_path[0])
        return 0;
    run->csv = fopen(run->csv_path, "w");
    if (!run->csv)
        return fs_err(FS_EIO, "--csv: cannot write \"%s\": %s", run->csv_path, strerror(errno));
    fputs(csv_header, run->csv);
    fflush(run->csv);
    return 0;
}

void lg_sampler_close(lg_run_t *run)
{
    if (run->csv)
        fclose(run->csv);
    run->csv = NULL;
}

static void csv_row(lg_run_t *run, const lg_sample_t *s)
{
    if (!run->csv)
        return;
    const lg_metrics_t *m = &s->m;
    char p50[32] = "NaN", p99[32] = "NaN";
    if (!isnan(s->p50_ms)) {
        snprintf(p50, sizeof p50, "%.3f", s->p50_ms);
        snprintf(p99, sizeof p99, "%.3f", s->p99_ms);
    }
    fprintf(run->csv, "%.3f,%llu,%llu,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%s,%s,%s\n",
            s->t_s, (unsigned long long)s->answered, (unsigned long long)s->errors, m->allocated,
            m->reserved, m->peak_allocated, m->peak_reserved, m->weights, m->activations, m->rss,
            m->device_allocs, m->device_frees, p50, p99, s->idle ? "idle" : "traffic");
    fflush(run->csv);
}

static void on_sample(lg_run_t *run, lg_xfer_t *x)
{
    run->sample_in_flight = 0;
    lg_sample_t s;
    memset(&s, 0, sizeof s);
    if (x->rc != CURLE_OK || x->status != 200) {
        run->samples_failed++;
        lg_admin_failed(run, x);
        return;
    }
    if (lg_metrics_parse(x->resp ? x->resp : "", &s.m) != 0 || !s.m.have_memory) {
        run->samples_failed++;
        lg_run_note(run, "GET /metrics: %s", s.m.have_memory ? fs_errmsg()
                                                 : "no flatserve_memory_reserved_bytes of a "
                                                   "device cache: is this a flatserve server?");
        return;
    }
    if (run->n_samples == run->cap_samples) {
        size_t cap = run->cap_samples ? 2 * run->cap_samples : 256;
        lg_sample_t *grown = realloc(run->samples, cap * sizeof *grown);
        if (!grown) {
            run->samples_failed++;
            lg_run_note(run, "out of memory keeping samples");
            return;
        }
        run->samples = grown;
        run->cap_samples = cap;
    }
    s.t_s = lg_since_s(run, lg_now_ns());
    s.idle = run->phase == LG_PH_IDLE || run->phase == LG_PH_IDLE_FINAL;
    s.answered = run->answered;
    s.errors = run->unexpected + run->lost + run->admin_failed;
    s.interval_n = run->hist_interval.n;
    s.p50_ms = s.p99_ms = NAN;
    if (s.interval_n) {
        s.p50_ms = (double)lg_hist_quantile(&run->hist_interval, 0.50) / 1e6;
        s.p99_ms = (double)lg_hist_quantile(&run->hist_interval, 0.99) / 1e6;
    }
    lg_hist_reset(&run->hist_interval);
    run->samples[run->n_samples++] = s;
    csv_row(run, &s);
}

void lg_sampler_take(lg_run_t *run)
{
    lg_xfer_t *x = lg_xfer_new(run, "GET", "/metrics", 1 << 22, on_sample);
    if (!x || lg_xfer_start(run, x) != 0) {
        run->samples_failed++;
        lg_run_note(run, "GET /metrics: %s", fs_errmsg());
        return;
    }
    run->sample_in_flight = 1;
}

void lg_sampler_tick(lg_run_t *run, uint64_t now)
{
    if (now < run->next_sample_ns)
        return;
    run->next_sample_ns += run->o->sample_interval_ns;
    if (run->next_sample_ns <= now)
        run->next_sample_ns = now + run->o->sample_interval_ns;
    if (run->sample_in_flight) {
        run->samples_failed++;
        lg_run_note(run, "GET /metrics took longer than --sample-interval: samples skipped");
        return;
    }
    lg_sampler_take(run);
}

/* A line on stderr every 5 s, so a long soak shows it is alive. */
void lg_progress(lg_run_t *run, uint64_t now)
{
    if (now < run->next_progress_ns || run->phase == LG_PH_DONE)
        return;
    run->next_progress_ns = now + 5 * NS_PER_S;
    char res[32] = "?", rss[32] = "?";
    if (run->n_samples) {
        const lg_sample_t *s = &run->samples[run->n_samples - 1];
        fs_format_size((uint64_t)s->m.reserved, res, sizeof res);
        fs_format_size((uint64_t)s->m.rss, rss, sizeof rss);
    }
    double t = lg_since_s(run, now);
    double busy = run->phase == LG_PH_TRAFFIC ? t : lg_since_s(run, run->traffic_end_ns);
    fprintf(stderr,
            "loadgen: %6.1f s  %s  %llu answered (%.0f/s)  %llu unexpected  %llu lost  "
            "reserved %s  RSS %s  p99 %.2f ms\n",
            t,
            run->phase == LG_PH_TRAFFIC ? "traffic"
            : run->phase == LG_PH_IDLE  ? "idle   "
                                        : "drain  ",
            (unsigned long long)run->answered, busy > 0 ? (double)run->answered / busy : 0,
            (unsigned long long)run->unexpected, (unsigned long long)run->lost, res, rss,
            (double)lg_hist_quantile(&run->hist, 0.99) / 1e6);
}
