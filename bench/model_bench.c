/* model_bench.c -- the engine benchmark: per model and batch size, the
 * latency of eng_model_run (median and p90 of many runs after a warm-up),
 * the plan's activation bytes against its lower bound, and the weights'
 * bytes; --json writes the same figures for bench/ort_compare.py, which runs
 * ONNX Runtime on the same models and inputs. It measures; it asserts no
 * speed. The one check is the cache's accounting: once every model is
 * destroyed, no byte may be left allocated (exit status 1). See
 * bench/README.md. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "bench/bench_out.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"
#include "engine/cpu/gemm.h"
#include "engine/engine.h"
#include "engine/tensor.h"

#define NS_PER_S UINT64_C(1000000000)
#define BENCH_WARMUP_RUNS 3
#define BENCH_MIN_RUNS 3
#define BENCH_MAX_BATCHES 3
#define BENCH_NAME_MAX 64
#define BENCH_MAX_DIMS 8

static const char *const demo_models[] = {"models/mlp/1/model.onnx", "models/cnn/1/model.onnx",
                                           "models/transformer/1/model.onnx",
                                           "models/encoder/1/model.onnx"};
/* Batch sizes tried when the first input's first dim is symbolic. */
static const int64_t batch_sizes[BENCH_MAX_BATCHES] = {1, 8, 64};

/* --dim NAME=N: the size given to a symbolic dim of that name. */
typedef struct bench_dim {
    char name[BENCH_NAME_MAX];
    int64_t size;
} bench_dim_t;

typedef struct bench_opts {
    int n_threads;
    bool quick;
    bool markdown;
    const char *json_path;  /* NULL: no JSON */
    const char *light_dir;  /* NULL: $FLATSERVE_ONNX_TESTS/light or ../shared/onnx-tests/light */
    char **models;          /* paths to run, in order; freed by bench_opts_fini */
    size_t n_models;
    uint64_t budget_ns;     /* timing stops after this much, past BENCH_MIN_RUNS */
    size_t max_runs;
    const char *device;     /* "cpu" (default), "cuda", "cuda:N" */
    const char *precision;  /* CUDA: fp32 (default), tf32, ... */
    eng_device_t dev;       /* the two above, parsed */
    eng_precision_t prec;
    bool no_graphs;         /* CUDA: launch by launch, no graph replay */
    eng_conv_layout_t layout; /* --layout: convolutional regions' layout */
    eng_attn_fusion_t attention; /* --attention */
    eng_conv_algo_t conv;        /* --conv: channels-last Convs' algorithm */
    bool ew_chain;          /* --elementwise chain: element-wise chains kept unfused */
    bench_dim_t dims[BENCH_MAX_DIMS]; /* symbolic dims set by name (not the batch dim) */
    size_t n_dims;
    size_t n_plans;         /* --plans N: time N plan builds for new shapes; 0: none */
} bench_opts_t;


/* One (model, batch) measurement, or a failure of its model or batch. */
typedef struct bench_row {
    char model[BENCH_NAME_MAX];
    int64_t batch;              /* -1: the model has no batch dim to vary */
    bool ok;
    double median_ms;
    double p90_ms;
    size_t n_runs;
    eng_plan_info_t plan;
    uint64_t weights_bytes;
    uint64_t peak_reserved_bytes;  /* the device cache's peak while running this batch */
    char error[FS_ERRMSG_MAX];  /* when !ok: what failed */
} bench_row_t;

typedef struct bench_rows {
    bench_row_t *items;
    size_t n, cap;
} bench_rows_t;

/* ---- small helpers --------------------------------------------------------------- */

static int bench_double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile `q` in (0, 1] of n > 0 sorted samples. */
static double bench_percentile(const double *sorted, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    return sorted[rank ? rank - 1 : 0];
}

/* Appends a zeroed row. NULL when out of memory (the caller exits). */
static bench_row_t *bench_rows_add(bench_rows_t *rows, const char *model, int64_t batch)
{
    if (rows->n == rows->cap) {
        size_t cap = rows->cap ? 2 * rows->cap : 32;
        bench_row_t *items = realloc(rows->items, cap * sizeof *items);
        if (!items)
            return NULL;
        rows->items = items;
        rows->cap = cap;
    }
    bench_row_t *r = &rows->items[rows->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", model);
    r->batch = batch;
    return r;
}

/* The name a model is reported under: the file name without ".onnx", or,
 * for a repository layout (NAME/VERSION/model.onnx) or a node-test case
 * (CASE/model.onnx), the directory that names it. */
static void bench_model_name(const char *path, char *out, size_t len)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    char *parts[3] = {NULL, NULL, NULL}; /* last, second last, third last */
    char *save = NULL;
    for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        parts[2] = parts[1];
        parts[1] = parts[0];
        parts[0] = tok;
    }
    const char *base = parts[0] ? parts[0] : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".onnx") == 0)
        n -= 5;
    if (!(n == 5 && strncmp(base, "model", 5) == 0) || !parts[1]) {
        snprintf(out, len, "%.*s", (int)n, base);
        return;
    }
    const char *dir = parts[1];
    if (strspn(dir, "0123456789") == strlen(dir) && parts[2])
        dir = parts[2];
    snprintf(out, len, "%s", dir);
}

/* ---- JSON ---------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The inputs as run: name, dtype, concrete shape; the comparison script
 * rebuilds the same tensors from these. */
static void json_inputs(FILE *f, const eng_model_t *m, const eng_tensor_t *inputs, size_t n)
{
    fputs("\"inputs\": [", f);
    for (size_t i = 0; i < n; i++) {
        eng_io_info_t info;
        if (eng_model_input(m, i, &info) != 0)
            info.name = "";
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        json_string(f, info.name);
        fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", eng_dtype_name(inputs[i].dtype));
        for (int d = 0; d < inputs[i].shape.rank; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)inputs[i].shape.dims[d]);
        fputs("]}", f);
    }
    fputs("]", f);
}

/* One result object; `m` and `inputs` may be NULL when the model did not
 * load or its inputs could not be made. */
static void json_row(FILE *f, bool *first, const char *path, const bench_row_t *r,
                     const eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs)
{
    if (!f)
        return;
    fprintf(f, "%s\n    {\"model\": ", *first ? "" : ",");
    *first = false;
    json_string(f, r->model);
    fputs(", \"path\": ", f);
    json_string(f, path);
    if (r->batch >= 0)
        fprintf(f, ", \"batch\": %lld", (long long)r->batch);
    else
        fputs(", \"batch\": null", f);
    fprintf(f, ", \"ok\": %s", r->ok ? "true" : "false");
    if (m && inputs) {
        fputs(", ", f);
        json_inputs(f, m, inputs, n_inputs);
    }
    if (!r->ok) {
        fputs(", \"error\": ", f);
        json_string(f, r->error);
        fputs("}", f);
        return;
    }
    const eng_plan_info_t *p = &r->plan;
    fprintf(f,
            ", \"median_ms\": %.6f, \"p90_ms\": %.6f, \"runs\": %zu, \"activation_bytes\": %zu, "
            "\"lower_bound_bytes\": %zu, \"plan_ratio\": %.6f, \"dynamic\": %s, "
            "\"weights_bytes\": %llu, \"peak_reserved_bytes\": %llu}",
            r->median_ms, r->p90_ms, r->n_runs, p->activation_bytes, p->lower_bound_bytes,
            p->lower_bound_bytes ? (double)p->activation_bytes / (double)p->lower_bound_bytes : 0.0,
            p->dynamic ? "true" : "false", (unsigned long long)r->weights_bytes,
            (unsigned long long)r->peak_reserved_bytes);
}

/* ---- inputs ---------------------------------------------------------------------------- */

/* Fills element k of a float tensor with k / numel (np.arange(N) / N, then
 * float32); other dtypes with zeros. */
static void bench_input_fill(eng_tensor_t *t)
{
    if (t->dtype != ENG_DT_FLOAT) {
        memset(t->data, 0, eng_tensor_bytes(t));
        return;
    }
    int64_t n = eng_shape_numel(&t->shape);
    float *x = t->data;
    for (int64_t k = 0; k < n; k++)
        x[k] = (float)((double)k / (double)n);
}

/* The batch sizes to run: 1, 8, 64 when the first input's first dim is
 * symbolic, else its declared size; -1 alone for a model without inputs or
 * with a scalar first input. 0 and *n_out, or FS_EINVAL naming an input
 * whose shape is not declared. */
static int bench_batches(const eng_model_t *m, int64_t out[BENCH_MAX_BATCHES], size_t *n_out)
{
    *n_out = 1;
    out[0] = -1;
    if (eng_model_n_inputs(m) == 0)
        return 0;
    eng_io_info_t info;
    int rc = eng_model_input(m, 0, &info);
    if (rc != 0)
        return rc;
    if (info.rank < 0)
        return fs_err(FS_EINVAL, "input '%s' has no declared shape to generate data for",
                      info.name);
    if (info.rank == 0)
        return 0;
    if (info.dims[0] >= 0) {
        out[0] = info.dims[0];
        return 0;
    }
    memcpy(out, batch_sizes, sizeof batch_sizes);
    *n_out = BENCH_MAX_BATCHES;
    return 0;
}

/* The size of a symbolic dim other than the batch: its --dim, else 1. */
static int64_t bench_dim_size(const bench_opts_t *o, const char *param)
{
    for (size_t i = 0; param && i < o->n_dims; i++)
        if (strcmp(o->dims[i].name, param) == 0)
            return o->dims[i].size;
    return 1;
}

/* Makes every input for `batch`: a symbolic first dim becomes `batch`
 * (when >= 0), any other symbolic dim its --dim size, else 1. On a device
 * with a pinned cache (`pinned`, may be NULL) the inputs are pinned, as a
 * server receiving into pinned memory would hand them over, and the run
 * copies them to the device without staging. 0 and gen[i] (caller frees
 * each with eng_tensor_free; the slots are NULL on error), or the error
 * naming the input. */
static int bench_inputs_make(const eng_model_t *m, const bench_opts_t *o, alloc_cache_t *pinned,
                             int64_t batch, eng_tensor_t **gen, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        eng_io_info_t info;
        int rc = eng_model_input(m, i, &info);
        if (rc == 0 && info.rank < 0)
            rc = fs_err(FS_EINVAL, "input '%s' has no declared shape to generate data for",
                        info.name);
        eng_shape_t shape = {.rank = info.rank};
        for (int d = 0; rc == 0 && d < info.rank; d++)
            shape.dims[d] = info.dims[d] >= 0            ? info.dims[d]
                            : d == 0 && batch >= 0 ? batch
                                                   : bench_dim_size(o, info.dim_params[d]);
        if (rc == 0 && (rc = eng_tensor_alloc_from(pinned, ALLOC_OWNER_SERVER, info.dtype, &shape,
                                                   &gen[i])) != 0)
            rc = fs_err(rc, "input '%s' (%s): %s", info.name, eng_dtype_name(info.dtype),
                        fs_errmsg());
        if (rc != 0) {
            for (size_t k = 0; k < i; k++) {
                eng_tensor_free(gen[k]);
                gen[k] = NULL;
            }
            return rc;
        }
        bench_input_fill(gen[i]);
    }
    return 0;
}

/* ---- measuring ------------------------------------------------------------------------- */

/* One eng_model_run; its outputs are freed. Returns the run's time in ns
 * through *ns (output freeing not included), or the run's error. */
static int bench_run_once(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                          eng_tensor_t **outputs, size_t n_outputs, uint64_t *ns)
{
    uint64_t t0 = fs_clock_real_ns();
    int rc = eng_model_run(m, inputs, n_inputs, outputs);
    uint64_t t1 = fs_clock_real_ns();
    if (rc == 0)
        for (size_t j = 0; j < n_outputs; j++) {
            eng_tensor_free(outputs[j]);
            outputs[j] = NULL;
        }
    *ns = t1 - t0;
    return rc;
}

/* Plan figures, warm-up, then timed runs into `r`. 0, or the error that
 * stopped it (its message set). */
static int bench_measure(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                         const bench_opts_t *o, bench_row_t *r)
{
    size_t n_outputs = eng_model_n_outputs(m);
    eng_shape_t *shapes = calloc(n_inputs + 1, sizeof *shapes);
    eng_tensor_t **outputs = calloc(n_outputs + 1, sizeof *outputs);
    double *samples = calloc(o->max_runs, sizeof *samples);
    int rc = 0;
    if (!shapes || !outputs || !samples) {
        rc = fs_err(FS_ENOMEM, "no host memory for the benchmark's buffers");
        goto done;
    }
    for (size_t i = 0; i < n_inputs; i++)
        shapes[i] = inputs[i].shape;
    rc = eng_model_plan_info(m, shapes, n_inputs, &r->plan);
    if (rc != 0) {
        rc = fs_err(rc, "plan: %s", fs_errmsg());
        goto done;
    }
    uint64_t ns = 0;
    for (int w = 0; w < BENCH_WARMUP_RUNS && rc == 0; w++)
        rc = bench_run_once(m, inputs, n_inputs, outputs, n_outputs, &ns);
    uint64_t begin_ns = fs_clock_real_ns();
    size_t n = 0;
    while (rc == 0 && n < o->max_runs) {
        if (n >= BENCH_MIN_RUNS && fs_clock_real_ns() - begin_ns > o->budget_ns)
            break;
        rc = bench_run_once(m, inputs, n_inputs, outputs, n_outputs, &ns);
        samples[n++] = (double)ns / 1e6;
    }
    if (rc != 0) {
        rc = fs_err(rc, "run: %s", fs_errmsg());
        goto done;
    }
    qsort(samples, n, sizeof *samples, bench_double_cmp);
    r->median_ms = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
    r->p90_ms = bench_percentile(samples, n, 0.90);
    r->n_runs = n;
    r->ok = true;
done:
    free(shapes);
    free(outputs);
    free(samples);
    return rc;
}

/* --plans N: the time eng_model_plan_info takes to build the plan of each of
 * N input signatures the model has not seen, and how close each plan's
 * activation block comes to its lower bound: shape k has batch 1 + k % 64
 * (a symbolic first dim) and every other symbolic dim at its --dim size
 * plus k / 64 (k alone when the first dim is fixed), as a stream of
 * requests of varied shapes would. Prints the median, p90 and largest
 * build, and the first (cold) one apart. 0, or 1 (reported) when a build
 * failed or the model has no symbolic dim to vary. */
static int bench_plans(eng_model_t *m, const char *name, const bench_opts_t *o)
{
    size_t n_in = eng_model_n_inputs(m);
    eng_shape_t *shapes = calloc(n_in + 1, sizeof *shapes);
    double *ms = calloc(o->n_plans, sizeof *ms);
    int rc = shapes && ms ? 0 : fs_err(FS_ENOMEM, "no host memory for the plan timings");
    bool varies = false, batch_dim = false;
    double ratio_sum = 0, ratio_max = 0;
    for (size_t k = 0; rc == 0 && k < o->n_plans; k++) {
        for (size_t i = 0; rc == 0 && i < n_in; i++) {
            eng_io_info_t info;
            if ((rc = eng_model_input(m, i, &info)) != 0)
                break;
            if (info.rank < 0) {
                rc = fs_err(FS_EINVAL, "input '%s' has no declared shape", info.name);
                break;
            }
            batch_dim = batch_dim || (i == 0 && info.rank > 0 && info.dims[0] < 0);
            shapes[i].rank = info.rank;
            for (int d = 0; d < info.rank; d++) {
                int64_t step = batch_dim ? (int64_t)k / 64 : (int64_t)k;
                if (info.dims[d] >= 0)
                    shapes[i].dims[d] = info.dims[d];
                else if (d == 0 && i == 0)
                    shapes[i].dims[d] = 1 + (int64_t)k % 64;
                else
                    shapes[i].dims[d] = bench_dim_size(o, info.dim_params[d]) + step;
                varies = varies || info.dims[d] < 0;
            }
        }
        if (rc == 0 && !varies)
            rc = fs_err(FS_EINVAL, "no symbolic dim to vary: every input shape is fixed");
        eng_plan_info_t info;
        uint64_t t0 = fs_clock_real_ns();
        if (rc == 0 && (rc = eng_model_plan_info(m, shapes, n_in, &info)) != 0)
            rc = fs_err(rc, "plan %zu: %s", k, fs_errmsg());
        ms[k] = (double)(fs_clock_real_ns() - t0) / 1e6;
        double ratio = rc == 0 && info.lower_bound_bytes
                           ? (double)info.activation_bytes / (double)info.lower_bound_bytes
                           : 1.0;
        ratio_sum += ratio;
        ratio_max = ratio > ratio_max ? ratio : ratio_max;
    }
    if (rc == 0) {
        double first = ms[0];
        qsort(ms, o->n_plans, sizeof *ms, bench_double_cmp);
        size_t n = o->n_plans, p90 = (n * 9 + 9) / 10 - 1;
        double sum = 0;
        for (size_t k = 0; k < n; k++)
            sum += ms[k];
        printf("%s: plan build for %zu new shapes: median %.3f ms, p90 %.3f ms, max %.3f ms, "
               "total %.1f ms (the first %.3f ms); activation block / lower bound: mean %.4f, "
               "max %.4f\n",
               name, n, n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2, ms[p90], ms[n - 1],
               sum, first, ratio_sum / (double)n, ratio_max);
    } else {
        fprintf(stderr, "model_bench: %s: --plans: %s\n", name, fs_errmsg());
    }
    free(shapes);
    free(ms);
    return rc == 0 ? 0 : 1;
}

/* Loads one model and measures it at each of its batch sizes, adding a row
 * for each (or one failed row when it does not load). Returns 0, or 1 when
 * any of its measurements failed (reported on stderr). Exits on host OOM. */
static int bench_model(const char *path, const eng_memory_t *mem, const bench_opts_t *o,
                       bench_rows_t *rows, FILE *json, bool *json_first)
{
    char name[BENCH_NAME_MAX];
    bench_model_name(path, name, sizeof name);
    alloc_cache_t *cache = mem->cache;
    eng_model_config_t cfg = {.name = name, .cache = cache, .n_threads = o->n_threads,
                              .device = o->dev, .precision = o->prec,
                              .host_cache = mem->host_cache, .staging = mem->staging,
                              .no_cuda_graphs = o->no_graphs, .conv_layout = o->layout,
                              .attention = o->attention, .conv = o->conv,
                              .no_elementwise_fusion = o->ew_chain};
    eng_model_t *m = NULL;
    int64_t batches[BENCH_MAX_BATCHES];
    size_t n_batches = 0;
    int rc = eng_model_load(path, &cfg, &m);
    if (rc == 0)
        rc = bench_batches(m, batches, &n_batches);
    if (rc != 0) {
        bench_row_t *r = bench_rows_add(rows, name, -1);
        if (!r) {
            fprintf(stderr, "model_bench: out of host memory\n");
            exit(1);
        }
        snprintf(r->error, sizeof r->error, "%s: %s", m ? "inputs" : "load", fs_errmsg());
        fprintf(stderr, "model_bench: %s (%s): %s\n", name, path, r->error);
        json_row(json, json_first, path, r, NULL, NULL, 0);
        eng_model_destroy(m);
        return 1;
    }
    int failed = o->n_plans ? bench_plans(m, name, o) : 0;
    alloc_owner_stats_t owner;
    uint64_t weights = alloc_cache_owner_stats(cache, eng_model_owner(m), &owner) == 0
                           ? (uint64_t)owner.allocated.current : 0;
    size_t n_inputs = eng_model_n_inputs(m);
    eng_tensor_t **gen = calloc(n_inputs + 1, sizeof *gen);
    eng_tensor_t *inputs = calloc(n_inputs + 1, sizeof *inputs);
    for (size_t b = 0; b < n_batches; b++) {
        bench_row_t *r = bench_rows_add(rows, name, batches[b]);
        if (!r || !gen || !inputs) {
            fprintf(stderr, "model_bench: out of host memory\n");
            exit(1);
        }
        r->weights_bytes = weights;
        rc = bench_inputs_make(m, o, mem->staging, batches[b], gen, n_inputs);
        if (rc == 0) {
            for (size_t i = 0; i < n_inputs; i++)
                inputs[i] = *gen[i];
            alloc_cache_reset_peak(cache);
            rc = bench_measure(m, inputs, n_inputs, o, r);
            alloc_cache_stats_t st;
            alloc_cache_stats(cache, &st);
            r->peak_reserved_bytes = (uint64_t)st.reserved.peak;
        }
        if (rc != 0) {
            snprintf(r->error, sizeof r->error, "%s", fs_errmsg());
            fprintf(stderr, "model_bench: %s batch %lld: %s\n", name, (long long)batches[b],
                    r->error);
            failed = 1;
        }
        json_row(json, json_first, path, r, m, gen[0] || n_inputs == 0 ? inputs : NULL, n_inputs);
        for (size_t i = 0; i < n_inputs; i++) {
            eng_tensor_free(gen[i]);
            gen[i] = NULL;
        }
        if (!o->markdown && r->ok)
            fprintf(stderr, "model_bench: %s batch %lld: median %.3f ms over %zu runs\n", name,
                    (long long)r->batch, r->median_ms, r->n_runs);
    }
    free(gen);
    free(inputs);
    eng_model_destroy(m);
    return failed;
}

/* ---- output ------------------------------------------------------------------------------ */

/* The results, BENCH_TABLE_ROWS_MAX rows a table. */
static void bench_rows_print(const bench_rows_t *rows, const bench_opts_t *o)
{
    static const char *const heads[] = {"model", "batch", "median ms", "p90 ms", "runs",
                                        "items/s", "activations", "lower bound", "plan/bound",
                                        "weights", "peak reserved"};
    char a[32], lb[32], w[32], pr[32];
    bench_section("Latency per batch, plan and weights");
    char where[96];
    if (o->device && strcmp(o->device, "cpu") != 0)
        snprintf(where, sizeof where, "on %s at %s (inputs copied in and outputs out in each "
                 "run)", o->device, o->precision ? o->precision : "fp32");
    else
        snprintf(where, sizeof where, "on the CPU, %d thread%s",
                 o->n_threads, o->n_threads == 1 ? "" : "s");
    bench_note("Engine %s. Inputs: arange(N)/N as float32. %d warm-up runs, then timed runs "
               "until %.1f s or %zu runs (at least %d). Latency is one eng_model_run of the "
               "whole batch.",
               where, BENCH_WARMUP_RUNS, (double)o->budget_ns / 1e9, o->max_runs, BENCH_MIN_RUNS);
    bench_table_t t;
    size_t shown = 0;
    for (size_t i = 0; i < rows->n; i++) {
        const bench_row_t *r = &rows->items[i];
        if (!r->ok)
            continue;
        if (shown % BENCH_TABLE_ROWS_MAX == 0) {
            if (shown)
                bench_table_print(&t);
            bench_table_init(&t, sizeof heads / sizeof heads[0], heads);
        }
        shown++;
        bench_table_add(&t, "%s", r->model);
        if (r->batch >= 0)
            bench_table_add(&t, "%lld", (long long)r->batch);
        else
            bench_table_add(&t, "-");
        bench_table_add(&t, "%.4f", r->median_ms);
        bench_table_add(&t, "%.4f", r->p90_ms);
        bench_table_add(&t, "%zu", r->n_runs);
        bench_table_add(&t, "%.1f", (double)(r->batch > 0 ? r->batch : 1) * 1e3 / r->median_ms);
        if (r->plan.dynamic) {
            bench_table_add(&t, "dynamic");
            bench_table_add(&t, "-");
            bench_table_add(&t, "-");
        } else {
            bench_table_add(&t, "%s", fs_format_size(r->plan.activation_bytes, a, sizeof a));
            bench_table_add(&t, "%s", fs_format_size(r->plan.lower_bound_bytes, lb, sizeof lb));
            if (r->plan.lower_bound_bytes)
                bench_table_add(&t, "%.3f", (double)r->plan.activation_bytes /
                                                (double)r->plan.lower_bound_bytes);
            else
                bench_table_add(&t, "-");
        }
        bench_table_add(&t, "%s", fs_format_size(r->weights_bytes, w, sizeof w));
        bench_table_add(&t, "%s", fs_format_size(r->peak_reserved_bytes, pr, sizeof pr));
    }
    if (shown)
        bench_table_print(&t);
    else
        bench_note("No model was measured.");
    for (size_t i = 0; i < rows->n; i++) {
        const bench_row_t *r = &rows->items[i];
        if (r->ok)
            continue;
        if (r->batch >= 0)
            bench_note("FAILED: %s batch %lld: %s", r->model, (long long)r->batch, r->error);
        else
            bench_note("FAILED: %s: %s", r->model, r->error);
    }
    bench_note("weights: the model owner's bytes after load (initializers and load-time folded "
               "constants, rounded to the cache's blocks). activations: the plan's one block; "
               "lower bound: the most bytes live at once. peak reserved: the "
               "model cache's peak reserved bytes while the batch ran (weights, activations, "
               "and what the cache kept).");
}

/* ---- options ------------------------------------------------------------------------------ */

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: model_bench [--threads N] [--device D] [--precision P] [--quick] "
               "[--markdown] [--json FILE] [--light DIR] [--dim NAME=N ...] [--plans N] [MODEL.onnx ...]\n"
               "  --threads N  engine threads on the CPU (default 1)\n"
               "  --device D   cpu (default), cuda or cuda:N\n"
               "  --precision P  on CUDA: fp32 (default), tf32, fp16, bf16\n"
               "  --no-graphs  on CUDA: launch every kernel, never replay a CUDA graph\n"
               "  --attention A  MatMul-Softmax-MatMul chains: auto (default: the device's\n"
               "               choice), chain (kept) or fused (one Attention node, CUDA)\n"
               "  --elementwise E  chains of element-wise ops: fused (default: one\n"
               "               FusedElementwise node each) or chain (one node per op)\n"
               "  --layout L   convolutions: auto (default: the device's choice), nchw or\n"
               "               nhwc (channels-last regions, engine/layout.c)\n"
               "  --conv C     channels-last Convs on CUDA: auto (default: the device's\n"
               "               choice), im2col (column matrix + GEMM) or implicit (the\n"
               "               implicit GEMM where it applies, engine/cuda/conv_igemm.cu)\n"
               "  --quick      0.3 s or 20 runs a measurement instead of 2 s or 200\n"
               "  --markdown   tables as Markdown, for bench/RESULTS.md\n"
               "  --json FILE  one object per (model, batch), for bench/ort_compare.py\n"
               "  --dim NAME=N a symbolic dim named NAME, other than an input's first, is N\n"
               "               (default 1; repeatable: --dim seq=128)\n"
               "  --plans N    first time N plan builds, one per new input shape (batch\n"
               "               1 + k %% 64, the other symbolic dims their --dim + k / 64)\n"
               "  --light DIR  also every DIR/*.onnx (default without MODEL arguments:\n"
               "               $FLATSERVE_ONNX_TESTS/light or ../shared/onnx-tests/light)\n"
               "  MODEL.onnx   models to run (default: the demo models and the light models)\n");
}

static int bench_str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a copy of `path` to the model list; exits on host OOM. */
static void bench_opts_add_model(bench_opts_t *o, const char *path)
{
    char **models = realloc(o->models, (o->n_models + 1) * sizeof *models);
    char *copy = strdup(path);
    if (!models || !copy) {
        fprintf(stderr, "model_bench: out of host memory\n");
        exit(1);
    }
    o->models = models;
    o->models[o->n_models++] = copy;
}

/* Adds every .onnx file in `dir`, sorted. Returns how many, or -1 when the directory
 * cannot be read (the caller decides whether that is an error). */
static int bench_opts_add_dir(bench_opts_t *o, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    size_t first = o->n_models;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".onnx") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bench_opts_add_model(o, path);
    }
    closedir(d);
    qsort(o->models + first, o->n_models - first, sizeof *o->models, bench_str_cmp);
    return (int)(o->n_models - first);
}

/* Adds a --dim NAME=N (N in 1..1e6); exits with status 2 on a malformed one. */
static void bench_opts_add_dim(bench_opts_t *o, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char *end = NULL;
    long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
    if (!eq || eq == arg || eq - arg >= BENCH_NAME_MAX || !end || end == eq + 1 || *end ||
        v < 1 || v > 1000000 || o->n_dims == BENCH_MAX_DIMS) {
        fprintf(stderr, "model_bench: --dim '%s': want NAME=N with N in 1..1000000, at most %d "
                        "of them\n", arg, BENCH_MAX_DIMS);
        exit(2);
    }
    bench_dim_t *d = &o->dims[o->n_dims++];
    snprintf(d->name, sizeof d->name, "%.*s", (int)(eq - arg), arg);
    d->size = v;
}

static void bench_opts_parse(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){.n_threads = 1};
    bool explicit_models = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--quick") == 0) {
            o->quick = true;
        } else if (strcmp(a, "--markdown") == 0) {
            o->markdown = true;
        } else if (strcmp(a, "--threads") == 0) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[++i], &end, 10) : 0;
            if (!end || *end || v < 1 || v > 1024) {
                fprintf(stderr, "model_bench: --threads needs an integer in 1..1024\n");
                exit(2);
            }
            o->n_threads = (int)v;
        } else if (strcmp(a, "--attention") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "auto") && strcmp(l, "chain") && strcmp(l, "fused")) {
                fprintf(stderr, "model_bench: --attention needs auto, chain or fused\n");
                exit(2);
            }
            o->attention = strcmp(l, "chain") == 0   ? ENG_ATTN_FUSION_CHAIN
                           : strcmp(l, "fused") == 0 ? ENG_ATTN_FUSION_FUSED
                                                     : ENG_ATTN_FUSION_AUTO;
        } else if (strcmp(a, "--elementwise") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "chain") && strcmp(l, "fused")) {
                fprintf(stderr, "model_bench: --elementwise needs chain or fused\n");
                exit(2);
            }
            o->ew_chain = strcmp(l, "chain") == 0;
        } else if (strcmp(a, "--no-graphs") == 0) {
            o->no_graphs = true;
        } else if (strcmp(a, "--layout") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "auto") && strcmp(l, "nchw") && strcmp(l, "nhwc")) {
                fprintf(stderr, "model_bench: --layout needs auto, nchw or nhwc\n");
                exit(2);
            }
            o->layout = strcmp(l, "nchw") == 0   ? ENG_CONV_LAYOUT_NCHW
                        : strcmp(l, "nhwc") == 0 ? ENG_CONV_LAYOUT_NHWC
                                                 : ENG_CONV_LAYOUT_AUTO;
        } else if (strcmp(a, "--conv") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "auto") && strcmp(l, "im2col") && strcmp(l, "implicit")) {
                fprintf(stderr, "model_bench: --conv needs auto, im2col or implicit\n");
                exit(2);
            }
            o->conv = strcmp(l, "im2col") == 0     ? ENG_CONV_ALGO_IM2COL
                      : strcmp(l, "implicit") == 0 ? ENG_CONV_ALGO_IMPLICIT
                                                   : ENG_CONV_ALGO_AUTO;
        } else if (strcmp(a, "--device") == 0 && i + 1 < argc) {
            o->device = argv[++i];
            if (eng_device_parse(o->device, &o->dev) != 0) {
                fprintf(stderr, "model_bench: --device: %s\n", fs_errmsg());
                exit(2);
            }
        } else if (strcmp(a, "--precision") == 0 && i + 1 < argc) {
            o->precision = argv[++i];
            if (eng_precision_parse(o->precision, &o->prec) != 0) {
                fprintf(stderr, "model_bench: --precision: %s\n", fs_errmsg());
                exit(2);
            }
        } else if (strcmp(a, "--json") == 0 && i + 1 < argc) {
            o->json_path = argv[++i];
        } else if (strcmp(a, "--dim") == 0 && i + 1 < argc) {
            bench_opts_add_dim(o, argv[++i]);
        } else if (strcmp(a, "--plans") == 0) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[++i], &end, 10) : 0;
            if (!end || *end || v < 1 || v > 100000) {
                fprintf(stderr, "model_bench: --plans needs an integer in 1..100000\n");
                exit(2);
            }
            o->n_plans = (size_t)v;
        } else if (strcmp(a, "--light") == 0 && i + 1 < argc) {
            o->light_dir = argv[++i];
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage(stdout);
            exit(0);
        } else if (a[0] == '-') {
            fprintf(stderr, "model_bench: unknown or incomplete argument '%s'\n", a);
            bench_usage(stderr);
            exit(2);
        } else {
            bench_opts_add_model(o, a);
            explicit_models = true;
        }
    }
    o->budget_ns = o->quick ? 3 * NS_PER_S / 10 : 2 * NS_PER_S;
    o->max_runs = o->quick ? 20 : 200;
    if (!explicit_models)
        for (size_t i = 0; i < sizeof demo_models / sizeof demo_models[0]; i++)
            bench_opts_add_model(o, demo_models[i]);
    if (o->light_dir) {
        if (bench_opts_add_dir(o, o->light_dir) < 0) {
            fprintf(stderr, "model_bench: --light %s: %s\n", o->light_dir, strerror(errno));
            exit(2);
        }
    } else if (!explicit_models) {
        const char *env = getenv("FLATSERVE_ONNX_TESTS");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/light", env && *env ? env : "../shared/onnx-tests");
        if (bench_opts_add_dir(o, dir) <= 0)
            fprintf(stderr, "model_bench: no light models in %s: running the demo models only\n",
                    dir);
    }
}

static void bench_opts_fini(bench_opts_t *o)
{
    for (size_t i = 0; i < o->n_models; i++)
        free(o->models[i]);
    free(o->models);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* Checks the cache is back to zero allocated bytes; 0 or 1 (reported). */
static int bench_cache_check(alloc_cache_t *cache)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(cache, &st);
    if (st.allocated.current == 0 && st.blocks.current == 0)
        return 0;
    fprintf(stderr, "model_bench: ERROR: %lld bytes in %lld blocks still allocated after every "
                    "model was destroyed\n",
            (long long)st.allocated.current, (long long)st.blocks.current);
    return 1;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_opts_parse(argc, argv, &o);
    bench_out_markdown = o.markdown;

    FILE *json = NULL;
    if (o.json_path && !(json = fopen(o.json_path, "w"))) {
        fprintf(stderr, "model_bench: --json %s: %s\n", o.json_path, strerror(errno));
        bench_opts_fini(&o);
        return 2;
    }
    eng_memory_t mem;
    bool cuda = o.dev.kind == ENG_DEVICE_CUDA;
    alloc_cache_config_t ccfg = {.name = "model_bench"};
    if (eng_memory_open(&o.dev, &ccfg, &mem) != 0) {
        fprintf(stderr, "model_bench: %s\n", fs_errmsg());
        if (json)
            fclose(json);
        bench_opts_fini(&o);
        return 1;
    }

    char subject[128];
    if (cuda)
        snprintf(subject, sizeof subject, "CUDA engine on %s, precision %s, CUDA graphs %s",
                 alloc_provider_name(mem.providers[0]), o.precision ? o.precision : "fp32",
                 o.no_graphs ? "off" : "on");
    else
        snprintf(subject, sizeof subject, "CPU engine, %d thread%s, GEMM kernels %s",
                 o.n_threads, o.n_threads == 1 ? "" : "s", eng_gemm_isa_name());
    bench_header_print("model_bench", subject, false, argc, argv);
    if (json) {
        fprintf(json, "{\"bench\": \"model_bench\", \"device\": \"%s\", \"threads\": %d, \"quick\": %s, "
                      "\"warmup_runs\": %d, \"budget_s\": %.3f, \"max_runs\": %zu, "
                      "\"min_runs\": %d, \"results\": [",
                o.device ? o.device : "cpu", o.n_threads, o.quick ? "true" : "false", BENCH_WARMUP_RUNS,
                (double)o.budget_ns / 1e9, o.max_runs, BENCH_MIN_RUNS);
    }

    bench_rows_t rows = {0};
    bool json_first = true;
    int failed = 0;
    for (size_t i = 0; i < o.n_models; i++)
        failed |= bench_model(o.models[i], &mem, &o, &rows, json, &json_first);
    bench_rows_print(&rows, &o);
    alloc_cache_t *caches[3] = {mem.cache, mem.host_cache, mem.staging};
    for (int i = 0; i < 3; i++)
        if (caches[i])
            failed |= bench_cache_check(caches[i]);

    if (json) {
        fputs("\n]}\n", json);
        if (fclose(json) != 0) {
            fprintf(stderr, "model_bench: writing %s: %s\n", o.json_path, strerror(errno));
            failed = 1;
        }
    }
    eng_memory_close(&mem);
    free(rows.items);
    bench_opts_fini(&o);
    fflush(stdout);
    return failed ? 1 : 0;
}
