/* stats.c -- latency histogram, least squares, flatness verdict.
 *
 * The histogram is fixed-size and log-spaced (bucket i >= 1 holds
 * [1 us * 1.01^(i-1), 1 us * 1.01^i)), so a soak of any length costs the same
 * memory and a quantile reports the bucket's geometric middle: within
 * sqrt(1.01) - 1 < 0.5% of every value the bucket holds.
 *
 * Flatness compares the end of a run with a mark taken after warm-up
 * (reserved memory may legitimately grow while the first shapes are seen)
 * and fits a line through the samples after the mark: the ratio catches a
 * step, the slope a slow leak that a short run's ratio would hide.
 *
 * The RSS is judged by its floor, not by two single samples: a sample's RSS
 * counts the request and response buffers in flight at that instant (two
 * 100 MB bodies for a batch-64, seq-512 BERT request), so the mark or the
 * end landing on a large request would swing the ratio by hundreds of MiB
 * either way. The smallest RSS of the first and of the last quarter after
 * the mark is what the process holds between requests; a leak raises it,
 * a request in flight does not. */
#include "loadtest/stats.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

#define HIST_BASE_NS 1000.0
#define HIST_GROWTH 1.01

void lg_hist_reset(lg_hist_t *h)
{
    memset(h, 0, sizeof *h);
}

static size_t hist_bucket(uint64_t ns)
{
    if (ns < (uint64_t)HIST_BASE_NS)
        return 0;
    double i = floor(log((double)ns / HIST_BASE_NS) / log(HIST_GROWTH)) + 1;
    return i >= LG_HIST_BUCKETS - 1 ? LG_HIST_BUCKETS - 1 : (size_t)i;
}

void lg_hist_add(lg_hist_t *h, uint64_t ns)
{
    h->counts[hist_bucket(ns)]++;
    if (h->n == 0 || ns < h->min_ns)
        h->min_ns = ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
    h->n++;
    h->sum_ns += (double)ns;
}

uint64_t lg_hist_quantile(const lg_hist_t *h, double q)
{
    if (h->n == 0)
        return 0;
    q = q < 0 ? 0 : q > 1 ? 1 : q;
    uint64_t rank = (uint64_t)ceil(q * (double)h->n);
    /* The extremes are kept exactly; only the buckets between are approximate. */
    if (rank <= 1)
        return h->min_ns;
    if (rank >= h->n)
        return h->max_ns;
    uint64_t seen = 0;
    size_t i = 0;
    for (; i < LG_HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            break;
    }
    double v = i == 0 ? (double)h->min_ns : HIST_BASE_NS * pow(HIST_GROWTH, (double)i - 0.5);
    if (v < (double)h->min_ns)
        v = (double)h->min_ns;
    if (v > (double)h->max_ns)
        v = (double)h->max_ns;
    return (uint64_t)llround(v);
}

double lg_hist_mean_ns(const lg_hist_t *h)
{
    return h->n ? h->sum_ns / (double)h->n : 0;
}

/* Centred sums: x is a time in seconds since the start and y may be tens of
 * GiB, so the uncentred normal equations would lose the slope to rounding. */
int lg_fit_line(const double *x, const double *y, size_t n, double *slope, double *intercept)
{
    if (n < 2)
        return fs_err(FS_EINVAL, "a line needs at least 2 points, got %zu", n);
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= (double)n;
    my /= (double)n;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    if (sxx == 0)
        return fs_err(FS_EINVAL, "a line needs two different x values; all %zu are %g", n, mx);
    *slope = sxy / sxx;
    *intercept = my - *slope * mx;
    return 0;
}

static void flat_series(const double *t, const double *y, size_t mark, size_t end,
                        lg_flat_series_t *s)
{
    memset(s, 0, sizeof *s);
    s->mark = y[mark];
    s->end = y[end];
    if (s->mark > 0)
        s->ratio = s->end / s->mark;
    else
        s->ratio = s->end > 0 ? INFINITY : 1.0;
    s->drift = s->ratio - 1.0;
    size_t n = end - mark + 1;
    for (size_t i = mark; i <= end; i++)
        s->mean += y[i];
    s->mean /= (double)n;
    size_t quarter = n / 4 ? n / 4 : 1;
    s->floor_mark = y[mark];
    s->floor_end = y[end];
    for (size_t i = 0; i < quarter; i++) {
        if (y[mark + i] < s->floor_mark)
            s->floor_mark = y[mark + i];
        if (y[end - i] < s->floor_end)
            s->floor_end = y[end - i];
    }
    s->floor_mark_end_t_s = t[mark + quarter - 1];
    s->floor_end_start_t_s = t[end - quarter + 1];
    if (s->floor_mark > 0)
        s->floor_drift = s->floor_end / s->floor_mark - 1.0;
    else
        s->floor_drift = s->floor_end > 0 ? INFINITY : 0.0;
    double intercept;
    if (n >= 3 && lg_fit_line(t + mark, y + mark, n, &s->slope_per_s, &intercept) == 0) {
        s->slope_valid = 1;
        s->slope_pct_per_hour = s->mean > 0 ? s->slope_per_s * 3600.0 / s->mean * 100.0 : 0;
    }
}

void lg_flatness_measure(const double *t_s, const double *reserved, const double *rss, size_t n,
                         double warmup_fraction, lg_flatness_t *out)
{
    memset(out, 0, sizeof *out);
    if (n < 2)
        return;
    size_t end = n - 1, mark = 0;
    double at = t_s[0] + warmup_fraction * (t_s[end] - t_s[0]);
    while (mark < end && t_s[mark] < at)
        mark++;
    if (mark >= end)
        return;
    out->valid = 1;
    out->mark_index = mark;
    out->end_index = end;
    out->mark_t_s = t_s[mark];
    out->end_t_s = t_s[end];
    flat_series(t_s, reserved, mark, end, &out->reserved);
    flat_series(t_s, rss, mark, end, &out->rss);
}

void lg_verdict_add(lg_verdict_t *v, const char *name, double value, double limit,
                    const char *fmt, ...)
{
    if (v->n == LG_CHECKS_MAX)
        return;
    lg_check_t *c = &v->checks[v->n++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = value;
    c->limit = limit;
    c->ok = value <= limit;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    if (!c->ok)
        v->failed++;
}

void lg_flatness_judge(const lg_flatness_t *f, double max_reserved_ratio, double max_rss_drift,
                       lg_verdict_t *v)
{
    if (!f->valid)
        return;
    const double mib = 1024.0 * 1024.0;
    lg_verdict_add(v, "max-reserved-ratio", f->reserved.ratio, max_reserved_ratio,
                   "reserved %.2f MiB at the mark (%.1f s) -> %.2f MiB at the end (%.1f s): "
                   "ratio %.4f",
                   f->reserved.mark / mib, f->mark_t_s, f->reserved.end / mib, f->end_t_s,
                   f->reserved.ratio);
    lg_verdict_add(v, "max-rss-drift", f->rss.floor_drift, max_rss_drift,
                   "RSS floor %.2f MiB from the mark (%.1f-%.1f s) -> %.2f MiB at the end "
                   "(%.1f-%.1f s): drift %+.2f%%",
                   f->rss.floor_mark / mib, f->mark_t_s, f->rss.floor_mark_end_t_s,
                   f->rss.floor_end / mib, f->rss.floor_end_start_t_s, f->end_t_s,
                   f->rss.floor_drift * 100.0);
}
