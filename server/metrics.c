/* metrics.c -- GET /metrics: the Prometheus text exposition format 0.0.4.
 *
 * Triton's names and labels where Triton has the metric, so its dashboards
 * and perf_analyzer read flatserve (nv_inference_* per model and version,
 * nv_gpu_memory_* per gpu_uuid); flatserve_* for what Triton cannot show:
 * every cache's allocated, reserved, active and requested bytes with their
 * peaks (by device, cache kind and pool), bytes released by each reason,
 * device alloc/free/OOM counts, each model's weight and activation bytes
 * and their peaks,
 * request-latency and batch-size histograms, HTTP answers by status, the
 * requests resumed after a wait and the wake-ups that resumed them; and
 * the standard process_* metrics. Every family is written with its HELP and
 * TYPE lines once, then all its samples, as the format requires. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "alloc/cache.h"
#include "common/error.h"
#include "engine/engine.h"
#include "server/app_impl.h"
#include "server/trace.h"

/* Label values are model names and device names ([A-Za-z0-9_.:-]), which
 * need no escaping; anything else is escaped as the format says. */
static void label_value(srv_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            srv_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            srv_buf_append(b, "\\n", 2);
        else
            srv_buf_append(b, v, 1);
    }
}

static void family(srv_buf_t *b, const char *name, const char *type, const char *help)
{
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- models ---------------------------------------------------------------------- */

typedef struct model_metric {
    const char *name;
    const char *type;
    const char *help;
    size_t offset;                /* into eng_model_stats_t */
} model_metric_t;

#define STAT(field) offsetof(eng_model_stats_t, field)
static const model_metric_t model_metrics[] = {
    {"nv_inference_request_success", "counter", "Successful inference requests", STAT(request_success)},
    {"nv_inference_count", "counter", "Inferences performed (a batch of n rows counts n)", STAT(inference_count)},
    {"nv_inference_exec_count", "counter", "Model executions (batches)", STAT(exec_count)},
    {"nv_inference_request_duration_us", "counter", "Cumulative request duration, submit to answer, in microseconds", STAT(request_duration_us)},
    {"nv_inference_queue_duration_us", "counter", "Cumulative time requests waited in the queue, in microseconds", STAT(queue_duration_us)},
    {"nv_inference_compute_input_duration_us", "counter", "Cumulative time concatenating batch inputs, in microseconds", STAT(compute_input_us)},
    {"nv_inference_compute_infer_duration_us", "counter", "Cumulative model execution time, in microseconds", STAT(compute_infer_us)},
    {"nv_inference_compute_output_duration_us", "counter", "Cumulative time splitting batch outputs, in microseconds", STAT(compute_output_us)},
    {"nv_inference_pending_request_count", "gauge", "Requests queued or running", STAT(pending)},
};
#undef STAT

static void model_labels(srv_buf_t *b, const eng_model_entry_t *e)
{
    srv_buf_append(b, "{model=\"", 8);
    label_value(b, e->name);
    srv_buf_printf(b, "\",version=\"%" PRId64 "\"", e->version);
}

/* A per-model histogram of eng_model_stats_t: its buckets (non-cumulative
 * there, cumulative here), their bounds, and its sum, each divided by
 * `scale` (1e6 for microseconds shown as seconds). */
typedef struct histogram {
    const char *name;
    const char *help;
    const uint64_t *bounds;
    int n_bounds;
    size_t buckets;               /* offset of the uint64_t[n_bounds + 1] */
    size_t sum;                   /* offset of the uint64_t sum */
    double scale;
} histogram_t;

static const histogram_t latency_histogram = {
    "flatserve_request_duration_seconds",
    "Latency of successful inference requests, submit to answer",
    eng_latency_bucket_bounds_us, ENG_LATENCY_BUCKETS,
    offsetof(eng_model_stats_t, latency_buckets), offsetof(eng_model_stats_t, request_duration_us),
    1e6,
};
static const histogram_t batch_histogram = {
    "flatserve_batch_size", "Rows per executed batch",
    eng_batch_bucket_bounds, ENG_BATCH_BUCKETS,
    offsetof(eng_model_stats_t, batch_buckets), offsetof(eng_model_stats_t, batch_rows_sum),
    1,
};

static void render_histogram(srv_buf_t *b, const eng_model_entry_t *es, size_t n,
                             const histogram_t *h)
{
    family(b, h->name, "histogram", h->help);
    for (size_t i = 0; i < n; i++) {
        if (es[i].version < 0)
            continue;
        const char *st = (const char *)&es[i].stats;
        const uint64_t *buckets = (const uint64_t *)(st + h->buckets);
        uint64_t sum, cum = 0;
        memcpy(&sum, st + h->sum, sizeof sum);
        for (int k = 0; k <= h->n_bounds; k++) {
            cum += buckets[k];
            srv_buf_printf(b, "%s_bucket", h->name);
            model_labels(b, &es[i]);
            if (k < h->n_bounds)
                srv_buf_printf(b, ",le=\"%g\"} %" PRIu64 "\n", (double)h->bounds[k] / h->scale, cum);
            else
                srv_buf_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", cum);
        }
        srv_buf_printf(b, "%s_sum", h->name);
        model_labels(b, &es[i]);
        if (h->scale != 1)
            srv_buf_printf(b, "} %.6f\n", (double)sum / h->scale);
        else
            srv_buf_printf(b, "} %" PRIu64 "\n", sum);
        srv_buf_printf(b, "%s_count", h->name);
        model_labels(b, &es[i]);
        srv_buf_printf(b, "} %" PRIu64 "\n", cum);
    }
}

static void render_models(srv_buf_t *b, const eng_model_entry_t *es, size_t n)
{
    for (size_t k = 0; k < sizeof model_metrics / sizeof model_metrics[0]; k++) {
        const model_metric_t *mm = &model_metrics[k];
        family(b, mm->name, mm->type, mm->help);
        for (size_t i = 0; i < n; i++) {
            if (es[i].version < 0)
                continue;
            uint64_t v;
            memcpy(&v, (const char *)&es[i].stats + mm->offset, sizeof v);
            srv_buf_append(b, mm->name, strlen(mm->name));
            model_labels(b, &es[i]);
            srv_buf_printf(b, "} %" PRIu64 "\n", v);
        }
    }

    /* Labels in Triton's order (its QA matches the line whole). */
    family(b, "nv_inference_request_failure", "counter",
           "Failed inference requests, by reason: REJECTED (refused before running: a bad "
           "request, a full queue, its deadline passed), CANCELED, BACKEND (its run failed), "
           "OTHER");
    for (size_t i = 0; i < n; i++) {
        if (es[i].version < 0)
            continue;
        for (int why = 0; why < ENG_FAILURE_N; why++) {
            srv_buf_append(b, "nv_inference_request_failure{model=\"", 36);
            label_value(b, es[i].name);
            srv_buf_printf(b, "\",reason=\"%s\",version=\"%" PRId64 "\"} %" PRIu64 "\n",
                           eng_failure_reason_name((eng_failure_reason_t)why), es[i].version,
                           es[i].stats.failure_by_reason[why]);
        }
    }

    family(b, "flatserve_model_ready", "gauge", "1 when the model serves");
    for (size_t i = 0; i < n; i++) {
        srv_buf_append(b, "flatserve_model_ready", 21);
        model_labels(b, &es[i]);
        srv_buf_printf(b, "} %d\n", es[i].state == ENG_MODEL_READY);
    }

    for (int peak = 0; peak < 2; peak++) {
        const char *name = peak ? "flatserve_model_memory_peak_bytes" : "flatserve_model_memory_bytes";
        family(b, name, "gauge",
               peak ? "Peak bytes a loaded model held in its device cache, by kind, since it "
                      "loaded or the cache's last reset_peak"
                    : "Bytes a loaded model holds in its device cache, by kind");
        for (size_t i = 0; i < n; i++) {
            if (es[i].state != ENG_MODEL_READY)
                continue;
            const char *kinds[2] = {"weights", "activations"};
            size_t bytes[2] = {peak ? es[i].weights_peak_bytes : es[i].weights_bytes,
                               peak ? es[i].activations_peak_bytes : es[i].activations_bytes};
            for (int k = 0; k < 2; k++) {
                srv_buf_append(b, name, strlen(name));
                model_labels(b, &es[i]);
                srv_buf_printf(b, ",kind=\"%s\"} %zu\n", kinds[k], bytes[k]);
            }
        }
    }

    render_histogram(b, es, n, &latency_histogram);
    render_histogram(b, es, n, &batch_histogram);
}

/* ---- memory ------------------------------------------------------------------------- */

static void cache_labels(srv_buf_t *b, const srv_cache_ref_t *ref)
{
    srv_buf_append(b, "{device=\"", 9);
    label_value(b, ref->device);
    srv_buf_printf(b, "\",cache=\"%s\"", ref->kind);
}

typedef struct cache_gauge {
    const char *name;
    const char *help;
    size_t offset;                /* of an alloc_stat_t in alloc_cache_stats_t */
    bool peak;
    size_t pool_offset;           /* of the alloc_stat_t[ALLOC_POOL_N]; 0: no pools */
} cache_gauge_t;

#define CST(field) offsetof(alloc_cache_stats_t, field)
static const cache_gauge_t cache_gauges[] = {
    {"flatserve_memory_allocated_bytes", "Bytes in blocks handed out, by pool (all = both)", CST(allocated), false, CST(pool_allocated)},
    {"flatserve_memory_reserved_bytes", "Bytes in segments taken from the device, by pool (all = both)", CST(reserved), false, CST(pool_reserved)},
    {"flatserve_memory_active_bytes", "Allocated bytes plus freed blocks waiting on a stream", CST(active), false, 0},
    {"flatserve_memory_requested_bytes", "Bytes callers asked for, before rounding", CST(requested), false, 0},
    {"flatserve_memory_peak_allocated_bytes", "Peak of allocated bytes since start or the last reset_peak", CST(allocated), true, CST(pool_allocated)},
    {"flatserve_memory_peak_reserved_bytes", "Peak of reserved bytes since start or the last reset_peak", CST(reserved), true, CST(pool_reserved)},
    {"flatserve_memory_segments", "Segments held", CST(segments), false, 0},
};

typedef struct cache_counter {
    const char *name;
    const char *help;
    size_t offset;                /* of a uint64_t */
    const char *type;
} cache_counter_t;

static const cache_counter_t cache_counters[] = {
    {"flatserve_memory_device_allocs_total", "Allocations from the device (provider)", CST(n_device_allocs), "counter"},
    {"flatserve_memory_device_frees_total", "Frees to the device (provider)", CST(n_device_frees), "counter"},
    {"flatserve_memory_cache_hits_total", "Allocations served from cached blocks", CST(n_cache_hits), "counter"},
    {"flatserve_memory_oom_total", "Allocations that failed for lack of memory", CST(n_ooms), "counter"},
    {"flatserve_memory_retries_total", "Allocations that released cache and retried", CST(n_retries), "counter"},
    {"flatserve_memory_free_cached_bytes", "Reserved bytes not in use (what empty_cache could release)", CST(free_cached_bytes), "gauge"},
    {"flatserve_memory_largest_free_block_bytes", "The largest cached free block", CST(largest_free_bytes), "gauge"},
};
#undef CST

static void render_memory(srv_buf_t *b, const srv_cache_ref_t *refs, const alloc_cache_stats_t *st,
                          size_t n)
{
    static const char *pools[ALLOC_POOL_N] = {"small", "large"};
    for (size_t k = 0; k < sizeof cache_gauges / sizeof cache_gauges[0]; k++) {
        const cache_gauge_t *g = &cache_gauges[k];
        family(b, g->name, "gauge", g->help);
        for (size_t i = 0; i < n; i++) {
            const alloc_stat_t *s = (const alloc_stat_t *)((const char *)&st[i] + g->offset);
            srv_buf_append(b, g->name, strlen(g->name));
            cache_labels(b, &refs[i]);
            srv_buf_printf(b, ",pool=\"all\"} %" PRId64 "\n", g->peak ? s->peak : s->current);
            if (!g->pool_offset)
                continue;
            const alloc_stat_t *ps = (const alloc_stat_t *)((const char *)&st[i] + g->pool_offset);
            for (int p = 0; p < ALLOC_POOL_N; p++) {
                srv_buf_append(b, g->name, strlen(g->name));
                cache_labels(b, &refs[i]);
                srv_buf_printf(b, ",pool=\"%s\"} %" PRId64 "\n", pools[p],
                               g->peak ? ps[p].peak : ps[p].current);
            }
        }
    }
    for (size_t k = 0; k < sizeof cache_counters / sizeof cache_counters[0]; k++) {
        const cache_counter_t *c = &cache_counters[k];
        family(b, c->name, c->type, c->help);
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&st[i] + c->offset, sizeof v);
            srv_buf_append(b, c->name, strlen(c->name));
            cache_labels(b, &refs[i]);
            srv_buf_printf(b, "} %" PRIu64 "\n", v);
        }
    }
    family(b, "flatserve_memory_limit_bytes", "gauge", "The cache's hard limit on reserved bytes");
    for (size_t i = 0; i < n; i++) {
        if (st[i].limit_bytes == (uint64_t)SIZE_MAX)
            continue;
        srv_buf_append(b, "flatserve_memory_limit_bytes", 28);
        cache_labels(b, &refs[i]);
        srv_buf_printf(b, "} %" PRIu64 "\n", st[i].limit_bytes);
    }
    family(b, "flatserve_memory_workspace_bytes", "gauge",
           "Bytes of the device libraries' workspace, shared by the models on the device "
           "(owner <device>/workspace)");
    for (size_t i = 0; i < n; i++) {
        srv_buf_append(b, "flatserve_memory_workspace_bytes", 32);
        cache_labels(b, &refs[i]);
        srv_buf_printf(b, "} %zu\n", eng_device_workspace_bytes(refs[i].cache));
    }
    family(b, "flatserve_memory_released_bytes_total", "counter",
           "Bytes given back to the device, by the policy or call that released them");
    for (size_t i = 0; i < n; i++) {
        for (int r = 0; r < ALLOC_RELEASE_N; r++) {
            srv_buf_append(b, "flatserve_memory_released_bytes_total", 37);
            cache_labels(b, &refs[i]);
            srv_buf_printf(b, ",policy=\"%s\"} %" PRIu64 "\n",
                           alloc_release_reason_name((alloc_release_reason_t)r),
                           st[i].released_bytes[r]);
        }
    }
}

/* ---- GPU and process ---------------------------------------------------------------- */

static void render_gpu(srv_buf_t *b, srv_app_t *app)
{
    if (app->cuda_index < 0)
        return;
    size_t free_bytes[CFG_MAX_DEVICES], total[CFG_MAX_DEVICES];
    bool got[CFG_MAX_DEVICES];
    for (size_t k = 0; k < app->n_devs; k++)
        got[k] = alloc_provider_mem_info(app->dev_mem[k].providers[0], &free_bytes[k],
                                         &total[k]) == 0;
    family(b, "nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes");
    for (size_t k = 0; k < app->n_devs; k++)
        if (got[k])
            srv_buf_printf(b, "nv_gpu_memory_total_bytes{gpu_uuid=\"%s\"} %zu\n",
                           app->gpu[k].uuid, total[k]);
    family(b, "nv_gpu_memory_used_bytes", "gauge",
           "GPU used memory (every process), in bytes");
    for (size_t k = 0; k < app->n_devs; k++)
        if (got[k])
            srv_buf_printf(b, "nv_gpu_memory_used_bytes{gpu_uuid=\"%s\"} %zu\n",
                           app->gpu[k].uuid, total[k] - free_bytes[k]);
}

static void render_process(srv_buf_t *b, srv_app_t *app)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2)
            size = resident = 0;
        fclose(f);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    srv_buf_printf(b, "process_resident_memory_bytes %llu\n", resident * (unsigned long long)page);
    family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    srv_buf_printf(b, "process_virtual_memory_bytes %llu\n", size * (unsigned long long)page);
    family(b, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    srv_buf_printf(b, "process_cpu_seconds_total %.3f\n", cpu);
    family(b, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    srv_buf_printf(b, "process_start_time_seconds %" PRIu64 "\n", app->start_unix_s);

    family(b, "flatserve_http_responses_total", "counter", "HTTP answers by status code");
    for (size_t i = 0; i <= SRV_N_CODES; i++) {
        uint64_t v = atomic_load_explicit(&app->http_responses[i], memory_order_relaxed);
        if (i < SRV_N_CODES)
            srv_buf_printf(b, "flatserve_http_responses_total{code=\"%u\"} %" PRIu64 "\n",
                           srv_counted_codes[i], v);
        else
            srv_buf_printf(b, "flatserve_http_responses_total{code=\"other\"} %" PRIu64 "\n", v);
    }
    pthread_mutex_lock(&app->flight_lock);
    uint64_t in_flight = app->in_flight;
    pthread_mutex_unlock(&app->flight_lock);
    family(b, "flatserve_http_requests_in_flight", "gauge", "HTTP requests read whole and not yet answered");
    srv_buf_printf(b, "flatserve_http_requests_in_flight %" PRIu64 "\n", in_flight);
    uint64_t resumed = 0, wakeups = 0;
    for (unsigned i = 0; i < app->n_http_threads; i++) {
        resumed += atomic_load_explicit(&app->http_threads[i].n_resumed, memory_order_relaxed);
        wakeups += atomic_load_explicit(&app->http_threads[i].n_wakeups, memory_order_relaxed);
    }
    family(b, "flatserve_http_resumed_total", "counter",
           "Requests answered after their connection waited suspended for another thread's completion");
    srv_buf_printf(b, "flatserve_http_resumed_total %" PRIu64 "\n", resumed);
    family(b, "flatserve_http_resume_wakeups_total", "counter",
           "Wake-ups of an HTTP thread that resumed those requests (one serves every completion since the thread's last)");
    srv_buf_printf(b, "flatserve_http_resume_wakeups_total %" PRIu64 "\n", wakeups);
    srv_trace_stats_t ts;
    srv_trace_stats(app->trace, &ts);
    family(b, "flatserve_trace_written_total", "counter", "Traces written to their trace file");
    srv_buf_printf(b, "flatserve_trace_written_total %" PRIu64 "\n", ts.written);
    family(b, "flatserve_trace_dropped_total", "counter",
           "Traces dropped: the trace writer's queue was full");
    srv_buf_printf(b, "flatserve_trace_dropped_total %" PRIu64 "\n", ts.dropped);
    family(b, "flatserve_trace_write_errors_total", "counter",
           "Trace file opens and writes that failed (their traces lost)");
    srv_buf_printf(b, "flatserve_trace_write_errors_total %" PRIu64 "\n", ts.write_errors);
}

int srv_metrics_render(srv_app_t *app, srv_buf_t *out)
{
    eng_model_entry_t *entries = NULL;
    size_t n = 0;
    int rc = eng_registry_index(app->registry, &entries, &n);
    if (rc != 0)
        return rc;
    srv_cache_ref_t refs[SRV_CACHE_REFS_MAX];
    alloc_cache_stats_t st[SRV_CACHE_REFS_MAX];
    size_t nc = srv_app_caches(app, refs);
    for (size_t i = 0; i < nc; i++)
        alloc_cache_stats(refs[i].cache, &st[i]);
    render_models(out, entries, n);
    render_memory(out, refs, st, nc);
    render_gpu(out, app);
    render_process(out, app);
    free(entries);
    return out->failed ? fs_err(FS_ENOMEM, "out of host memory writing the metrics") : 0;
}

void srv_metrics_handle(srv_req_t *r, const srv_route_args_t *a)
{
    r->compressible = true;
    srv_buf_t b = {0};
    if (srv_metrics_render(r->app, &b) != 0) {
        srv_buf_free(&b);
        srv_respond_error(r, 507, "out of host memory writing the metrics");
        return;
    }
    srv_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, true);
}
