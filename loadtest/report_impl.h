/* report_impl.h -- what report.c works out once from a finished run and
 * hands to the printer, the JSON writer and the plotter (plot.c). */
#ifndef FS_LOADTEST_REPORT_IMPL_H
#define FS_LOADTEST_REPORT_IMPL_H

#include "loadtest/run_impl.h"
#include "loadtest/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The load/unload cycles against their baseline. */
typedef struct lg_cycles_result {
    int have_baseline;
    const lg_cycle_point_t *baseline;   /* cycle 0, or NULL */
    size_t n;                           /* cycles measured after the baseline */
    double max_alloc_drift;             /* bytes above the baseline, worst cycle */
    double max_reserved_drift;
    uint32_t rss_mark_cycle;            /* the first cycle at --warmup-fraction of them */
    double rss_mark, rss_last;          /* RSS after that cycle and after the last */
    double rss_drift;                   /* last - mark */
    int rss_slope_valid;
    double rss_slope_per_cycle;         /* bytes per cycle, least squares */
} lg_cycles_result_t;

typedef struct lg_result {
    double traffic_s;                   /* from the start to the end of sending */
    double throughput;                  /* answered per second of traffic */
    double achieved_rate;               /* sent per second (open loop) */
    int rate_kept;                      /* open loop: at most 1% of the requests late */
    size_t n_traffic;                   /* samples of the traffic, for the verdict */
    lg_flatness_t flat;
    lg_cycles_result_t cyc;
    lg_verdict_t verdict;
    uint64_t errors;                    /* unexpected answers + failed admin calls */
} lg_result_t;

/* plot.c: writes PREFIX.gp and runs gnuplot on it when gnuplot is on PATH
 * (saying so on stderr when it is not, or when gnuplot fails). Returns 0,
 * or FS_EIO when the script cannot be written. */
int lg_plot_write(const lg_run_t *run, const lg_result_t *r, const char *prefix);

#ifdef __cplusplus
}
#endif
#endif
