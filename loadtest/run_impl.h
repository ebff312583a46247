/* run_impl.h -- the run's state, shared by the files that drive it:
 * traffic.c (transfers, the multi loop, request scheduling), churn.c
 * (reloads, load/unload cycles), sampler.c (/metrics samples, CSV) and
 * report.c (summary, verdict, plots).
 *
 * Invariants: every transfer in flight is on run->xfers and in run->multi;
 * run->in_flight counts the inference transfers among them; sent ==
 * answered + lost + in_flight. */
#ifndef FS_LOADTEST_RUN_IMPL_H
#define FS_LOADTEST_RUN_IMPL_H

#include <curl/curl.h>
#include <stdint.h>

#include "loadtest/metrics.h"
#include "loadtest/options.h"
#include "loadtest/request.h"
#include "loadtest/run.h"
#include "loadtest/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LG_NOTES_MAX 8
#define LG_STATUS_MAX 600

/* One GET /metrics. */
typedef struct lg_sample {
    double t_s;                /* since the start, when the answer came */
    int idle;                  /* taken after the traffic */
    uint64_t answered, errors; /* so far */
    lg_metrics_t m;
    double p50_ms, p99_ms;     /* of the inferences answered in the interval; NAN if none */
    uint64_t interval_n;
} lg_sample_t;

/* The server after unload + empty_cache: cycle 0 is the baseline. */
typedef struct lg_cycle_point {
    uint32_t cycle;
    double t_s;
    lg_memory_t mem;
    double rss;
    int ok;                    /* every call of the cycle succeeded */
} lg_cycle_point_t;

typedef enum lg_phase {
    LG_PH_TRAFFIC,             /* sending */
    LG_PH_DRAIN,               /* waiting for the answers and the churn */
    LG_PH_FINAL,               /* the last traffic sample is in flight */
    LG_PH_IDLE,                /* sampling, no requests */
    LG_PH_IDLE_FINAL,          /* the last idle sample is in flight */
    LG_PH_DONE,
} lg_phase_t;

typedef enum lg_cycle_state {
    LG_CY_OFF,                 /* no --cycles */
    LG_CY_TRAFFIC,             /* the models are loaded; traffic flows */
    LG_CY_DRAIN,               /* no new requests; waiting for those in flight */
    LG_CY_UNLOAD,
    LG_CY_EMPTY,
    LG_CY_MEASURE,             /* GET /v1/memory and /metrics */
    LG_CY_LOAD,
} lg_cycle_state_t;

typedef struct lg_xfer lg_xfer_t;
typedef void (*lg_xfer_done_fn)(lg_run_t *run, lg_xfer_t *x);

/* One HTTP request in flight. */
struct lg_xfer {
    CURL *easy;
    struct curl_slist *headers;
    lg_body_t body;            /* owned: POSTFIELDS point into it */
    char *resp;                /* the answer's first resp_keep bytes, NUL-terminated */
    size_t resp_len, resp_cap, resp_keep;
    long status;               /* 0 when no answer came */
    CURLcode rc;
    uint64_t start_ns;         /* when sent, or (open loop) when it was due */
    int infer, bad;
    uint32_t model;            /* index into run->models */
    char what[192];            /* "POST /v2/repository/models/mlp/load", for messages */
    lg_xfer_done_fn done;
    lg_xfer_t *prev, *next;    /* run->xfers */
};

struct lg_run {
    const lg_opts_t *o;        /* borrowed */
    lg_model_t models[LG_MODELS_MAX];
    uint32_t n_models;
    double weight_sum;
    lg_datapool_t *pool;
    lg_rng_t rng;
    uint64_t trace;                 /* the --trace-seed splitmix64 state */
    CURLM *multi;
    char base[256];            /* the URL without a trailing '/' */
    char auth[300];            /* "Authorization: Bearer ..." or "" */
    lg_xfer_t *xfers;
    int fatal;                 /* a code that stops the run early, 0 if none */
    int gave_up;               /* the server stopped answering: traffic stopped */
    lg_phase_t phase;
    uint64_t t0_ns, traffic_end_ns, drain_deadline_ns, idle_end_ns;
    uint64_t last_answer_ns;   /* the last inference's completion: the server idles from here */
    lg_memory_t idle_mem;      /* /v1/memory with segments after the idle time */
    int have_idle_mem;

    /* Inference traffic. */
    uint64_t sent, sent_bad, answered, ok, bad_rejected, unexpected, lost, in_flight;
    uint64_t lost_streak;                   /* lost in a row, since the last answer */
    uint64_t transport[CURL_LAST];          /* lost requests by libcurl's reason */
    uint64_t status_all[LG_STATUS_MAX];     /* answers by status */
    uint64_t status_unexpected[LG_STATUS_MAX];
    uint64_t bad_turn;                      /* which kind of bad request is next */
    lg_hist_t hist, hist_interval;          /* latency of the answered good requests */
    uint64_t next_due_ns, late, max_lag_ns; /* open loop */

    /* Reloads. */
    uint64_t reload_base_sent, reload_base_ns;
    uint32_t reloads_in_flight;
    uint64_t reloads_sent, reloads_ok, reloads_failed;

    /* Load/unload cycles. */
    lg_cycle_state_t cy;
    int cy_baseline;           /* the sequence in progress takes the baseline */
    uint32_t cy_pending;       /* calls of the current step still in flight */
    uint64_t cy_base_sent;     /* run->sent when the traffic resumed */
    uint32_t cycles_done;
    lg_cycle_point_t cy_cur;
    lg_cycle_point_t *points;
    size_t n_points, cap_points;
    uint64_t admin_failed;     /* failed reload, unload, load, empty_cache, reads */

    /* Samples. */
    lg_sample_t *samples;
    size_t n_samples, cap_samples;
    size_t traffic_end_sample; /* samples[0..this] are the traffic's */
    uint64_t next_sample_ns, next_progress_ns;
    int sample_in_flight;
    uint64_t samples_failed;
    FILE *csv;
    char csv_path[LG_PATH_MAX + 8];

    /* The first distinct failure messages, for the summary. */
    char notes[LG_NOTES_MAX][288];
    int n_notes;
};

/* traffic.c */
uint64_t lg_now_ns(void);
double lg_since_s(const lg_run_t *run, uint64_t ns);
/* A transfer of `method` `path` (under run->base) answered into x->resp up
 * to `keep` bytes, then `done`. Returns NULL with fs_err set on failure. */
lg_xfer_t *lg_xfer_new(lg_run_t *run, const char *method, const char *path, size_t keep,
                       lg_xfer_done_fn done);
/* Hands x to the multi loop; on failure x is freed and the code returned. */
int lg_xfer_start(lg_run_t *run, lg_xfer_t *x);
/* Remembers a failure message (the first LG_NOTES_MAX distinct ones). */
void lg_run_note(lg_run_t *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Admin errors: answers other than 200 (with the first bytes of the body). */
void lg_admin_failed(lg_run_t *run, const lg_xfer_t *x);

/* churn.c */
void lg_churn_start(lg_run_t *run);
int lg_churn_may_send(const lg_run_t *run);
int lg_churn_idle(const lg_run_t *run);
void lg_churn_tick(lg_run_t *run, uint64_t now);

/* sampler.c */
int lg_sampler_open(lg_run_t *run);
void lg_sampler_close(lg_run_t *run);
void lg_sampler_tick(lg_run_t *run, uint64_t now);
void lg_sampler_take(lg_run_t *run);
void lg_progress(lg_run_t *run, uint64_t now);

#ifdef __cplusplus
}
#endif
#endif
