/* stats.h -- the arithmetic of a load test: a latency histogram, a
 * least-squares line, and the flatness verdict over sampled memory.
 *
 * Threading: plain data, pure functions; one thread per object. */
#ifndef FS_LOADTEST_STATS_H
#define FS_LOADTEST_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Log-spaced buckets, each 1% wider than the last, from 1 us to 1000 s:
 * any quantile is within 0.5% of a value that was recorded (values below
 * 1 us share the first bucket, above 1000 s the last). */
#define LG_HIST_BUCKETS 2086

typedef struct lg_hist {
    uint64_t counts[LG_HIST_BUCKETS];
    uint64_t n;
    uint64_t min_ns, max_ns;
    double sum_ns;
} lg_hist_t;

/* Empties h. Cannot fail. */
void lg_hist_reset(lg_hist_t *h);

/* Records one latency. Cannot fail. */
void lg_hist_add(lg_hist_t *h, uint64_t ns);

/* The q-quantile (0 <= q <= 1) in ns: the value of rank ceil(q*n) in sorted
 * order, to within 0.5% (the first and the last rank exactly), and never
 * outside [min, max]. 0 when h is empty. */
uint64_t lg_hist_quantile(const lg_hist_t *h, double q);

/* Mean in ns; 0 when empty. */
double lg_hist_mean_ns(const lg_hist_t *h);

/* Least squares y = slope * x + intercept over n points. Returns 0, or
 * FS_EINVAL when n < 2 or every x is the same (no line); outputs untouched
 * on error. */
int lg_fit_line(const double *x, const double *y, size_t n, double *slope, double *intercept);

/* One series (reserved bytes, RSS) between the mark and the end. */
typedef struct lg_flat_series {
    double mark, end;           /* values at the mark sample and the last sample */
    double ratio;               /* end / mark; 1 when both are 0, +inf when only mark is 0 */
    double drift;               /* ratio - 1 */
    double mean;                /* over the samples from the mark to the end */
    int slope_valid;            /* at least 3 samples from the mark on */
    double slope_per_s;         /* bytes per second, least squares */
    double slope_pct_per_hour;  /* slope as % of the mean per hour */
    /* The floor: the smallest value in the first and in the last quarter of
     * the samples from the mark on (at least one sample each), what the
     * process holds with the fewest requests in flight. */
    double floor_mark, floor_end;
    double floor_drift;         /* floor_end / floor_mark - 1 (+inf when only floor_mark is 0) */
    double floor_mark_end_t_s, floor_end_start_t_s; /* where the two quarters end and start */
} lg_flat_series_t;

typedef struct lg_flatness {
    int valid;                  /* 0: fewer than 2 samples, or the mark is the end */
    size_t mark_index, end_index;
    double mark_t_s, end_t_s;
    lg_flat_series_t reserved, rss;
} lg_flatness_t;

/* Measures n samples (times in s, ascending): the mark is the first sample
 * at or after warmup_fraction of the way from the first to the last. Cannot
 * fail: too few samples give valid = 0. */
void lg_flatness_measure(const double *t_s, const double *reserved, const double *rss, size_t n,
                         double warmup_fraction, lg_flatness_t *out);

/* A bound and how the run fared against it. */
#define LG_CHECKS_MAX 12
typedef struct lg_check {
    char name[48];              /* the flag that sets it, "max-reserved-ratio" */
    double value, limit;
    int ok;
    char detail[224];           /* the figures, in words */
} lg_check_t;

typedef struct lg_verdict {
    lg_check_t checks[LG_CHECKS_MAX];
    int n;
    int failed;                 /* how many checks failed */
} lg_verdict_t;

/* Adds a check that passes when value <= limit; `fmt` describes the
 * figures. Checks past LG_CHECKS_MAX are dropped (the table is sized for
 * every bound loadgen has). */
void lg_verdict_add(lg_verdict_t *v, const char *name, double value, double limit,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Adds the flatness checks (reserved ratio, RSS drift) for f. An invalid f
 * adds nothing: the caller reports that it could not be judged. */
void lg_flatness_judge(const lg_flatness_t *f, double max_reserved_ratio, double max_rss_drift,
                       lg_verdict_t *v);

#ifdef __cplusplus
}
#endif
#endif
