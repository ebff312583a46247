/* alloc_bench.c -- the allocator benchmark: alloc+free pair latency of the
 * cache against its raw provider (and cudaMallocAsync on a GPU), and a
 * synthetic serving trace replayed under each release policy, reporting what
 * each one reserves. It measures; it asserts no speed. The one check is the
 * allocator's own accounting: after every replay its counters must be back
 * to zero, or the run ends with exit status 1. See bench/README.md. */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/arena.h"
#include "alloc/cache.h"
#include "alloc/plan.h"
#include "alloc/policy.h"
#include "alloc/provider.h"
#include "bench/bench_out.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define NS_PER_S UINT64_C(1000000000)
#define NS_PER_MS UINT64_C(1000000)

typedef struct bench_opts {
    const char *provider; /* "host", "cuda", or NULL: cuda when usable, else host */
    bool quick;
    bool markdown;
    uint64_t n_requests;  /* trace length */
    uint64_t seed;        /* trace generator seed */
} bench_opts_t;

/* ---- pair latency (sections a, b, c) --------------------------------------- */

static const size_t pair_sizes[] = {512, 4 * KIB, 64 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB};
#define N_PAIR_SIZES (sizeof pair_sizes / sizeof pair_sizes[0])
#define PAIRS_MIN_SAMPLES 10

/* How one measurement is run: `batch` pairs timed together make one sample
 * (ns per pair); sampling stops at max_samples or, past PAIRS_MIN_SAMPLES,
 * when budget_ns of timing is spent. */
typedef struct bench_pairs_params {
    size_t batch;
    size_t warmup_batches;
    size_t max_samples;
    uint64_t budget_ns;
} bench_pairs_params_t;

/* One thread's measurement. */
typedef struct bench_pairs {
    alloc_cache_t *cache;        /* pairs through this cache, or NULL: */
    alloc_provider_t *provider;  /* pairs straight on this provider */
    size_t bytes;
    alloc_stream_t stream;
    const bench_pairs_params_t *params;
    pthread_barrier_t *ready;    /* all threads warm before timing starts; NULL: one thread */
    atomic_bool *stop;           /* the first thread done stops the others */
    double *samples;             /* params->max_samples entries */
    size_t n_samples;
    int rc;                      /* first error, with its message in err */
    char err[FS_ERRMSG_MAX];
} bench_pairs_t;

typedef struct bench_latency {
    double median_ns;
    double p99_ns;
    size_t n_samples;
} bench_latency_t;

/* One batch of pairs. On error records it in the job (the memory of a pair
 * whose free was not reached stays with the cache or provider). */
static int bench_pairs_batch(bench_pairs_t *job)
{
    for (size_t i = 0; i < job->params->batch; i++) {
        void *p = NULL;
        int rc;
        if (job->cache) {
            rc = alloc_cache_alloc(job->cache, job->bytes, job->stream, ALLOC_OWNER_SERVER, &p);
            if (rc == 0)
                rc = alloc_cache_free(job->cache, p);
        } else {
            rc = alloc_provider_alloc(job->provider, job->bytes, &p);
            if (rc == 0)
                alloc_provider_free(job->provider, p, job->bytes);
        }
        if (rc != 0) {
            job->rc = rc;
            snprintf(job->err, sizeof job->err, "%s", fs_errmsg());
            return rc;
        }
    }
    return 0;
}

static void *bench_pairs_thread(void *arg)
{
    bench_pairs_t *job = arg;
    const bench_pairs_params_t *pp = job->params;
    for (size_t w = 0; w < pp->warmup_batches && job->rc == 0; w++)
        bench_pairs_batch(job);
    if (job->ready)
        pthread_barrier_wait(job->ready);
    uint64_t begin_ns = fs_clock_real_ns();
    while (job->rc == 0 && job->n_samples < pp->max_samples && !atomic_load(job->stop)) {
        if (job->n_samples >= PAIRS_MIN_SAMPLES && fs_clock_real_ns() - begin_ns > pp->budget_ns)
            break;
        uint64_t t0 = fs_clock_real_ns();
        if (bench_pairs_batch(job) != 0)
            break;
        job->samples[job->n_samples++] = (double)(fs_clock_real_ns() - t0) / (double)pp->batch;
    }
    atomic_store(job->stop, true);
    return NULL;
}

static int bench_double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and nearest-rank p99 of `n` > 0 samples (sorted in place). */
static void bench_latency_summarise(double *s, size_t n, bench_latency_t *out)
{
    qsort(s, n, sizeof *s, bench_double_cmp);
    out->median_ns = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    size_t rank = (size_t)ceil(0.99 * (double)n);
    out->p99_ns = s[rank ? rank - 1 : 0];
    out->n_samples = n;
}

/* Times alloc+free pairs of `bytes` on `n_threads` threads (1 or 2), each on
 * its own stream, through `cache` or, when it is NULL, on `provider`. The
 * samples of all threads are summarised together. 0, or FS_ENOMEM, or the
 * first error a thread met (its message set here). */
static int bench_pairs_measure(alloc_cache_t *cache, alloc_provider_t *provider, size_t bytes,
                               size_t n_threads, const bench_pairs_params_t *pp,
                               bench_latency_t *out)
{
    /* Stream ids 1 and 2 are cudaStreamLegacy and cudaStreamPerThread: real
     * streams on a GPU, so fences the cache records on them are valid. */
    enum { MAX_THREADS = 2 };
    assert(n_threads >= 1 && n_threads <= MAX_THREADS);
    bench_pairs_t jobs[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    pthread_barrier_t ready;
    atomic_bool stop = false;
    double *samples = calloc(n_threads * pp->max_samples, sizeof *samples);
    if (!samples)
        return fs_err(FS_ENOMEM, "bench: no memory for %zu samples", n_threads * pp->max_samples);
    if (n_threads > 1)
        pthread_barrier_init(&ready, NULL, (unsigned)n_threads);
    for (size_t i = 0; i < n_threads; i++) {
        jobs[i] = (bench_pairs_t){
            .cache = cache, .provider = provider, .bytes = bytes,
            .stream = (alloc_stream_t)(i + 1), .params = pp,
            .ready = n_threads > 1 ? &ready : NULL, .stop = &stop,
            .samples = samples + i * pp->max_samples,
        };
    }
    size_t n_started = 0;
    if (n_threads == 1) {
        bench_pairs_thread(&jobs[0]);
        n_started = 1;
    } else {
        for (; n_started < n_threads; n_started++)
            if (pthread_create(&threads[n_started], NULL, bench_pairs_thread, &jobs[n_started]))
                break;
        /* A thread that could not start would leave the barrier waiting. */
        if (n_started < n_threads) {
            fprintf(stderr, "alloc_bench: pthread_create failed\n");
            exit(1);
        }
        for (size_t i = 0; i < n_threads; i++)
            pthread_join(threads[i], NULL);
        pthread_barrier_destroy(&ready);
    }

    int rc = 0;
    size_t n = 0;
    for (size_t i = 0; i < n_started; i++) {
        if (jobs[i].rc != 0 && rc == 0)
            rc = fs_err(jobs[i].rc, "%s", jobs[i].err);
        memmove(samples + n, jobs[i].samples, jobs[i].n_samples * sizeof *samples);
        n += jobs[i].n_samples;
    }
    if (rc == 0 && n == 0)
        rc = fs_err(FS_ESTATE, "bench: no sample taken");
    if (rc == 0)
        bench_latency_summarise(samples, n, out);
    free(samples);
    return rc;
}

/* A table of `x` per size (`what`: "raw", "async") against the one-thread
 * cached medians. */
static void bench_pairs_print_against(const char *what, const bench_latency_t x[N_PAIR_SIZES],
                                      const bench_latency_t cached[N_PAIR_SIZES])
{
    char median[32], p99[32], ratio[32], sz[32];
    snprintf(median, sizeof median, "%s median", what);
    snprintf(p99, sizeof p99, "%s p99", what);
    snprintf(ratio, sizeof ratio, "%s/cached median", what);
    const char *const heads[] = {"size", median, p99, "samples", ratio};
    bench_table_t t;
    bench_table_init(&t, 5, heads);
    for (size_t i = 0; i < N_PAIR_SIZES; i++) {
        bench_table_add(&t, "%s", fs_format_size(pair_sizes[i], sz, sizeof sz));
        bench_table_add(&t, "%.1f", x[i].median_ns);
        bench_table_add(&t, "%.1f", x[i].p99_ns);
        bench_table_add(&t, "%zu", x[i].n_samples);
        bench_table_add(&t, "%.1fx", x[i].median_ns / cached[i].median_ns);
    }
    bench_table_print(&t);
}

/* Sections a, b and c. 0, or the error that stopped a measurement. */
static int bench_pairs_run(alloc_provider_t *provider, const bench_opts_t *o)
{
    const bench_pairs_params_t cached = {
        .batch = 256, .warmup_batches = 8,
        .max_samples = o->quick ? 200 : 2000,
        .budget_ns = o->quick ? NS_PER_S / 4 : 2 * NS_PER_S,
    };
    /* Raw provider calls cost up to milliseconds: smaller batches, a budget. */
    const bench_pairs_params_t raw = {
        .batch = 16, .warmup_batches = 2,
        .max_samples = o->quick ? 200 : 2000,
        .budget_ns = o->quick ? NS_PER_S / 5 : NS_PER_S,
    };
    bench_latency_t one[N_PAIR_SIZES], two[N_PAIR_SIZES], direct[N_PAIR_SIZES],
        async[N_PAIR_SIZES];
    alloc_cache_config_t cfg = {.name = "bench"};
    alloc_cache_t *cache = NULL;
    alloc_provider_t *async_p = NULL;
    char async_why[FS_ERRMSG_MAX] = "";
    char sz[32];
    int rc = alloc_cache_create(provider, &cfg, &cache);
    if (rc)
        return rc;
    if (!alloc_provider_is_device(provider))
        snprintf(async_why, sizeof async_why, "needs a GPU (provider %s)",
                 alloc_provider_name(provider));
    else if (alloc_provider_cuda_async_create(0, &async_p) != 0)
        snprintf(async_why, sizeof async_why, "cuda_async provider: %s", fs_errmsg());

    for (size_t i = 0; i < N_PAIR_SIZES && rc == 0; i++) {
        size_t b = pair_sizes[i];
        rc = bench_pairs_measure(cache, NULL, b, 1, &cached, &one[i]);
        alloc_cache_empty(cache, ALLOC_RELEASE_EMPTY);
        if (rc == 0)
            rc = bench_pairs_measure(cache, NULL, b, 2, &cached, &two[i]);
        alloc_cache_empty(cache, ALLOC_RELEASE_EMPTY);
        if (rc == 0)
            rc = bench_pairs_measure(NULL, provider, b, 1, &raw, &direct[i]);
        if (rc == 0 && async_p)
            rc = bench_pairs_measure(NULL, async_p, b, 1, &cached, &async[i]);
    }
    alloc_cache_destroy(cache);
    alloc_provider_destroy(async_p);
    if (rc)
        return rc;

    bench_table_t t;
    bench_section("a) Cached alloc+free pair latency (ns per pair)");
    bench_note("%zu pairs per sample, up to %zu samples per thread; each thread its own stream.",
               cached.batch, cached.max_samples);
    static const char *const heads_a[] = {"size", "1 thread median", "1 thread p99",
                                          "2 threads median", "2 threads p99", "samples 1/2"};
    bench_table_init(&t, 6, heads_a);
    for (size_t i = 0; i < N_PAIR_SIZES; i++) {
        bench_table_add(&t, "%s", fs_format_size(pair_sizes[i], sz, sizeof sz));
        bench_table_add(&t, "%.1f", one[i].median_ns);
        bench_table_add(&t, "%.1f", one[i].p99_ns);
        bench_table_add(&t, "%.1f", two[i].median_ns);
        bench_table_add(&t, "%.1f", two[i].p99_ns);
        bench_table_add(&t, "%zu/%zu", one[i].n_samples, two[i].n_samples);
    }
    bench_table_print(&t);

    bench_section("b) Raw provider alloc+free pair latency (ns per pair, 1 thread)");
    bench_note("%s: %zu pairs per sample, up to %zu samples or %.1f s per size.",
               alloc_provider_name(provider), raw.batch, raw.max_samples,
               (double)raw.budget_ns / 1e9);
    bench_pairs_print_against("raw", direct, one);

    bench_section("c) cudaMallocAsync pool alloc+free pair latency (ns per pair, 1 thread)");
    if (async_why[0]) {
        bench_note("Skipped: this section %s.", async_why);
        return 0;
    }
    bench_note("cuda_async: default pool, release threshold UINT64_MAX, warmed up first.");
    bench_pairs_print_against("async", async, one);
    return 0;
}

/* ---- the synthetic serving trace (section d) -------------------------------- */

/* splitmix64: small, fast, and the same sequence on every machine. */
static uint64_t trace_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double trace_rand_unit(uint64_t *state)
{
    return (double)(trace_rand(state) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi]. */
static uint64_t trace_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    return lo + trace_rand(state) % (hi - lo + 1);
}

#define TRACE_N_WEIGHTS 60
#define TRACE_N_TENSORS 12
#define TRACE_N_STEPS 13
#define TRACE_LONG_GAP_PERCENT 1
#define TRACE_MEAN_GAP_NS (2 * NS_PER_MS)

/* One transformer block's activations: the width of each tensor in quarters
 * of the hidden size (bytes = tokens * hidden * quarters, floats being four
 * bytes), and the steps it lives. Tensor i is made at its first step; most
 * die at the next, the residuals live until their add. */
static const struct {
    uint8_t quarters, first, last;
} trace_graph[TRACE_N_TENSORS] = {
    {4, 0, 5},   /* embeddings; residual, read by the add at step 5 */
    {4, 1, 2},   /* layer norm 1 */
    {12, 2, 3},  /* q, k, v */
    {4, 3, 4},   /* attention output */
    {4, 4, 5},   /* projection */
    {4, 5, 10},  /* first residual sum; read again by the add at step 10 */
    {4, 6, 7},   /* layer norm 2 */
    {16, 7, 8},  /* MLP up (4x) */
    {16, 8, 9},  /* activation (4x) */
    {4, 9, 10},  /* MLP down */
    {4, 10, 11}, /* second residual sum */
    {1, 11, 12}, /* head; read by the output copy at step 12 */
};

typedef struct trace_request {
    uint32_t batch;   /* sequences */
    uint32_t seq_len; /* tokens per sequence */
    uint64_t gap_ns;  /* time since the previous request */
} trace_request_t;

typedef struct trace {
    size_t hidden;                         /* model width in floats */
    size_t weight_bytes[TRACE_N_WEIGHTS];
    size_t weights_total;
    trace_request_t *requests;             /* caller frees with trace_fini */
    size_t n_requests;
    size_t n_long_gaps;
    uint64_t span_ns;                      /* sum of the gaps */
    size_t max_plan_bytes;                 /* the largest request's plan */
    size_t max_live_bytes;                 /* most activation bytes live at once */
} trace_t;

/* The activation tensors of `r`, with their lifetimes. */
static void trace_tensors_fill(const trace_t *tr, const trace_request_t *r,
                               alloc_plan_tensor_t t[TRACE_N_TENSORS])
{
    size_t tokens = (size_t)r->batch * r->seq_len;
    for (size_t i = 0; i < TRACE_N_TENSORS; i++) {
        t[i] = (alloc_plan_tensor_t){
            .size_bytes = tokens * tr->hidden * trace_graph[i].quarters,
            .first_step = trace_graph[i].first,
            .last_step = trace_graph[i].last,
        };
    }
}

/* Builds the trace from `seed`. 0, or FS_ENOMEM / a planner error; nothing
 * to free on error. */
static int trace_build(uint64_t seed, size_t n_requests, trace_t *tr)
{
    uint64_t rng = seed;
    memset(tr, 0, sizeof *tr);
    tr->hidden = 256 + 64 * trace_rand_range(&rng, 0, 12);
    /* Weights: log-uniform in 256 KiB..16 MiB, whole pages. */
    for (size_t i = 0; i < TRACE_N_WEIGHTS; i++) {
        double x = log(256.0 * KIB) + trace_rand_unit(&rng) * (log(16.0 * MIB) - log(256.0 * KIB));
        size_t bytes = ((size_t)exp(x) + 4 * KIB - 1) / (4 * KIB) * (4 * KIB);
        tr->weight_bytes[i] = bytes;
        tr->weights_total += bytes;
    }
    tr->requests = calloc(n_requests, sizeof *tr->requests);
    if (!tr->requests)
        return fs_err(FS_ENOMEM, "bench: no memory for a trace of %zu requests", n_requests);
    tr->n_requests = n_requests;
    for (size_t i = 0; i < n_requests; i++) {
        trace_request_t *r = &tr->requests[i];
        r->batch = (uint32_t)trace_rand_range(&rng, 1, 64);
        r->seq_len = (uint32_t)trace_rand_range(&rng, 16, 512);
        if (trace_rand_range(&rng, 1, 100) <= TRACE_LONG_GAP_PERCENT) {
            r->gap_ns = trace_rand_range(&rng, 30 * NS_PER_S, 120 * NS_PER_S);
            tr->n_long_gaps++;
        } else {
            /* Poisson arrivals: exponential gaps. */
            r->gap_ns = (uint64_t)(-log(1.0 - trace_rand_unit(&rng)) * (double)TRACE_MEAN_GAP_NS);
        }
        tr->span_ns += r->gap_ns;

        alloc_plan_tensor_t t[TRACE_N_TENSORS];
        size_t plan_bytes;
        trace_tensors_fill(tr, r, t);
        int rc = alloc_plan_build(t, TRACE_N_TENSORS, ALLOC_PLAN_DEFAULT_ALIGN, &plan_bytes);
        if (rc) {
            free(tr->requests);
            tr->requests = NULL;
            return rc;
        }
        if (plan_bytes > tr->max_plan_bytes)
            tr->max_plan_bytes = plan_bytes;
        /* Alignment 1: the bytes the workload itself asked for. */
        size_t live = alloc_plan_peak_live_bytes(t, TRACE_N_TENSORS, 1);
        if (live > tr->max_live_bytes)
            tr->max_live_bytes = live;
    }
    return 0;
}

static void trace_fini(trace_t *tr)
{
    free(tr->requests);
    tr->requests = NULL;
}

/* ---- replaying the trace under one policy ----------------------------------- */

#define REPLAY_CLOCK_START_NS (1000 * NS_PER_S)
#define REPLAY_OWNERS 2 /* weights, activations */

static const char *const replay_policies[] = {"cache", "periodic", "idle_trim", "watermark",
                                              "arena"};
#define N_REPLAY_POLICIES (sizeof replay_policies / sizeof replay_policies[0])

typedef struct replay_result {
    alloc_cache_stats_t stats;  /* at the end of the trace, weights still held */
    uint64_t wall_ns;           /* the request loop, real time */
    uint64_t n_failed;          /* requests refused with FS_ENOMEM */
    uint64_t n_arena_spills;    /* arenas that needed a second block */
} replay_result_t;

/* Allocates tensor by tensor in step order, freeing each after its last
 * step, as a framework without a memory plan does. On FS_ENOMEM frees what
 * it took and returns it; other errors are allocator bugs. */
static int replay_per_tensor(alloc_cache_t *c, alloc_owner_t owner,
                             const alloc_plan_tensor_t t[TRACE_N_TENSORS])
{
    void *ptr[TRACE_N_TENSORS] = {0};
    int rc = 0;
    for (uint32_t s = 0; s < TRACE_N_STEPS && rc == 0; s++) {
        for (size_t i = 0; i < TRACE_N_TENSORS && rc == 0; i++)
            if (t[i].first_step == s)
                rc = alloc_cache_alloc(c, t[i].size_bytes, 0, owner, &ptr[i]);
        for (size_t i = 0; i < TRACE_N_TENSORS && rc == 0; i++) {
            if (t[i].last_step == s) {
                rc = alloc_cache_free(c, ptr[i]);
                ptr[i] = NULL;
            }
        }
    }
    for (size_t i = 0; i < TRACE_N_TENSORS; i++)
        alloc_cache_free(c, ptr[i]);
    return rc;
}

/* One request. With a memory plan (the arena policy, as the engine runs a
 * static plan): plan, batch begin, the tensors at their planned offsets in
 * the batch's one block, batch end. Without (every other policy): tensor by
 * tensor, as a framework without a memory plan does. FS_ENOMEM counts as a
 * failed request; any other error is returned. */
static int replay_request(alloc_cache_t *c, alloc_owner_t owner, bool planned, const trace_t *tr,
                          const trace_request_t *r, replay_result_t *res)
{
    alloc_plan_tensor_t t[TRACE_N_TENSORS];
    size_t plan_bytes;
    trace_tensors_fill(tr, r, t);
    int rc = alloc_plan_build(t, TRACE_N_TENSORS, ALLOC_PLAN_DEFAULT_ALIGN, &plan_bytes);
    if (rc)
        return rc;
    alloc_batch_t *batch = NULL;
    if (!planned)
        rc = replay_per_tensor(c, owner, t);
    else if ((rc = alloc_cache_batch_begin(c, plan_bytes, 0, owner, &batch)) == 0) {
        /* Tensor i lives at the block + t[i].offset; nothing more is allocated. */
        alloc_arena_t *arena = alloc_batch_arena(batch);
        alloc_arena_stats_t as = {0};
        if (arena)
            alloc_arena_stats(arena, &as);
        if (as.n_blocks > 1)
            res->n_arena_spills++;
        alloc_cache_batch_end(c, batch);
    }
    if (rc == FS_ENOMEM) {
        res->n_failed++;
        return 0;
    }
    return rc;
}

/* After the weights are freed and the cache emptied: every counter must be
 * zero and the device calls balanced. 0, or FS_ESTATE naming the first
 * counter that is not. */
static int replay_check_zero(alloc_cache_t *c, const char *policy,
                             const alloc_owner_t owners[REPLAY_OWNERS])
{
    alloc_cache_stats_t st;
    alloc_cache_stats(c, &st);
    const struct {
        const char *name;
        int64_t value;
    } counters[] = {
        {"allocated", st.allocated.current}, {"requested", st.requested.current},
        {"active", st.active.current},       {"blocks", st.blocks.current},
        {"reserved", st.reserved.current},   {"segments", st.segments.current},
        {"device allocs - frees", (int64_t)(st.n_device_allocs - st.n_device_frees)},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        if (counters[i].value != 0)
            return fs_err(FS_ESTATE, "policy %s: %s is %lld after freeing everything and emptying",
                          policy, counters[i].name, (long long)counters[i].value);
    for (size_t i = 0; i < REPLAY_OWNERS; i++) {
        alloc_owner_stats_t os;
        int rc = alloc_cache_owner_stats(c, owners[i], &os);
        if (rc)
            return rc;
        if (os.allocated.current != 0 || os.blocks.current != 0)
            return fs_err(FS_ESTATE, "policy %s: owner '%s' still holds %lld bytes in %lld blocks",
                          policy, os.name, (long long)os.allocated.current,
                          (long long)os.blocks.current);
    }
    return 0;
}

/* Replays `tr` on a fresh cache over `provider` with `policy` attached and,
 * when limit_bytes > 0, that hard limit. 0 and *res; or FS_ESTATE from the
 * end-of-run check, or an allocator error. The cache is destroyed and the
 * real clock restored whatever happens. */
static int replay_run(alloc_provider_t *provider, const trace_t *tr, const char *policy,
                      size_t limit_bytes, replay_result_t *res)
{
    void *weights[TRACE_N_WEIGHTS] = {0};
    alloc_owner_t owners[REPLAY_OWNERS] = {ALLOC_OWNER_SERVER, ALLOC_OWNER_SERVER};
    alloc_cache_config_t cfg = {.name = policy, .max_reserved_bytes = limit_bytes};
    alloc_cache_t *c = NULL;
    alloc_policy_t *pol = NULL;
    alloc_policy_params_t params;
    bool planned = strcmp(policy, "arena") == 0;
    memset(res, 0, sizeof *res);
    fs_clock_manual_install(REPLAY_CLOCK_START_NS);

    alloc_policy_params_default(&params);
    params.periodic.every_n_requests = 1000;
    params.periodic.every_ns = 0;
    params.idle_trim.after_ns = 10 * NS_PER_S;
    params.idle_trim.keep_bytes = 0;
    params.watermark.fraction = 0.8;
    int rc = alloc_cache_create(provider, &cfg, &c);
    if (rc)
        goto fail;
    rc = alloc_policy_create_by_name(policy, &params, &pol);
    if (rc)
        goto fail;
    rc = alloc_cache_policy_add(c, pol);
    if (rc) {
        alloc_policy_destroy(pol);
        goto fail;
    }
    rc = alloc_cache_owner_create(c, "model", &owners[0]);
    if (rc == 0)
        rc = alloc_cache_owner_create(c, "requests", &owners[1]);
    for (size_t i = 0; i < TRACE_N_WEIGHTS && rc == 0; i++)
        rc = alloc_cache_alloc(c, tr->weight_bytes[i], 0, owners[0], &weights[i]);
    if (rc)
        goto fail;

    uint64_t t0 = fs_clock_real_ns();
    for (size_t i = 0; i < tr->n_requests && rc == 0; i++) {
        fs_clock_manual_advance(tr->requests[i].gap_ns);
        alloc_cache_tick(c);
        alloc_cache_request_begin(c);
        rc = replay_request(c, owners[1], planned, tr, &tr->requests[i], res);
        alloc_cache_request_end(c);
    }
    res->wall_ns = fs_clock_real_ns() - t0;
    if (rc)
        goto fail;
    alloc_cache_stats(c, &res->stats);

    for (size_t i = 0; i < TRACE_N_WEIGHTS; i++) {
        alloc_cache_free(c, weights[i]);
        weights[i] = NULL;
    }
    alloc_cache_empty(c, ALLOC_RELEASE_EMPTY);
    rc = replay_check_zero(c, policy, owners);
    for (size_t i = 0; i < REPLAY_OWNERS && rc == 0; i++)
        rc = alloc_cache_owner_destroy(c, owners[i]);
fail:
    for (size_t i = 0; c && i < TRACE_N_WEIGHTS; i++)
        alloc_cache_free(c, weights[i]);
    alloc_cache_destroy(c);
    fs_clock_set_source(NULL, NULL);
    return rc;
}

static void replay_print(const trace_t *tr, const replay_result_t res[N_REPLAY_POLICIES])
{
    char a[32], b[32], cc[32];
    size_t workload = tr->weights_total + tr->max_live_bytes;
    bench_table_t t;
    static const char *const heads[] = {
        "policy", "peak allocated", "peak reserved", "reserved/allocated", "reserved/workload",
        "device allocs", "device frees", "reserved at end", "failed requests", "wall ms",
        "us/request"};
    bench_table_init(&t, 11, heads);
    for (size_t p = 0; p < N_REPLAY_POLICIES; p++) {
        const alloc_cache_stats_t *st = &res[p].stats;
        bench_table_add(&t, "%s", replay_policies[p]);
        bench_table_add(&t, "%s", fs_format_size((size_t)st->allocated.peak, a, sizeof a));
        bench_table_add(&t, "%s", fs_format_size((size_t)st->reserved.peak, b, sizeof b));
        bench_table_add(&t, "%.3f", (double)st->reserved.peak / (double)st->allocated.peak);
        bench_table_add(&t, "%.3f", (double)st->reserved.peak / (double)workload);
        bench_table_add(&t, "%llu", (unsigned long long)st->n_device_allocs);
        bench_table_add(&t, "%llu", (unsigned long long)st->n_device_frees);
        bench_table_add(&t, "%s", fs_format_size((size_t)st->reserved.current, cc, sizeof cc));
        bench_table_add(&t, "%llu", (unsigned long long)res[p].n_failed);
        bench_table_add(&t, "%.1f", (double)res[p].wall_ns / 1e6);
        bench_table_add(&t, "%.2f", (double)res[p].wall_ns / 1e3 / (double)tr->n_requests);
    }
    bench_table_print(&t);

    bench_note("Bytes released during the trace by each reason (segments in parentheses):");
    static const alloc_release_reason_t reasons[] = {ALLOC_RELEASE_OOM, ALLOC_RELEASE_PERIODIC,
                                                     ALLOC_RELEASE_ARENA, ALLOC_RELEASE_IDLE_TRIM,
                                                     ALLOC_RELEASE_WATERMARK};
    const char *heads_r[1 + sizeof reasons / sizeof reasons[0]] = {"policy"};
    for (size_t r = 0; r < sizeof reasons / sizeof reasons[0]; r++)
        heads_r[r + 1] = alloc_release_reason_name(reasons[r]);
    bench_table_init(&t, 1 + sizeof reasons / sizeof reasons[0], heads_r);
    for (size_t p = 0; p < N_REPLAY_POLICIES; p++) {
        bench_table_add(&t, "%s", replay_policies[p]);
        for (size_t r = 0; r < sizeof reasons / sizeof reasons[0]; r++) {
            uint64_t bytes = res[p].stats.released_bytes[reasons[r]];
            bench_table_add(&t, "%s (%llu)", fs_format_size(bytes, a, sizeof a),
                            (unsigned long long)res[p].stats.released_segments[reasons[r]]);
        }
    }
    bench_table_print(&t);
}

/* Section d. 0, FS_ESTATE if a replay's end-of-run check failed (the others
 * still run and print), or the error that stopped it. */
static int bench_trace_run(alloc_provider_t *provider, const bench_opts_t *o)
{
    trace_t tr;
    int rc = trace_build(o->seed, (size_t)o->n_requests, &tr);
    if (rc)
        return rc;
    char w[32], plan[32], live[32], lim[32];
    size_t limit = 2 * (tr.weights_total + tr.max_plan_bytes);
    bench_section("d) Trace replay under each release policy");
    bench_note("Trace: seed %llu, %zu requests over %.1f s of simulated time (%zu idle gaps of "
               "30-120 s); weights %zu tensors, %s; hidden %zu; batch 1-64 x sequence 16-512; "
               "largest plan %s; most activation bytes live at once %s.",
               (unsigned long long)o->seed, tr.n_requests, (double)tr.span_ns / 1e9,
               tr.n_long_gaps, (size_t)TRACE_N_WEIGHTS, fs_format_size(tr.weights_total, w, sizeof w),
               tr.hidden, fs_format_size(tr.max_plan_bytes, plan, sizeof plan),
               fs_format_size(tr.max_live_bytes, live, sizeof live));
    bench_note("Policies: periodic empties every 1000 requests; idle_trim after 10 s, keep 0; "
               "watermark 0.8 of a limit of %s (2 x (weights + largest plan)), the only run with "
               "a limit. workload = weights + most activation bytes live at once = %s. Ticks "
               "follow each clock advance.",
               fs_format_size(limit, lim, sizeof lim),
               fs_format_size(tr.weights_total + tr.max_live_bytes, w, sizeof w));

    replay_result_t res[N_REPLAY_POLICIES];
    int failed = 0;
    for (size_t p = 0; p < N_REPLAY_POLICIES; p++) {
        bool watermark = strcmp(replay_policies[p], "watermark") == 0;
        rc = replay_run(provider, &tr, replay_policies[p], watermark ? limit : 0, &res[p]);
        if (rc == FS_ESTATE) {
            fprintf(stderr, "alloc_bench: ERROR: %s\n", fs_errmsg());
            failed = rc;
        } else if (rc) {
            trace_fini(&tr);
            return fs_err(rc, "policy %s: %s", replay_policies[p], fs_errmsg());
        }
    }
    replay_print(&tr, res);
    for (size_t p = 0; p < N_REPLAY_POLICIES; p++)
        if (res[p].n_arena_spills)
            bench_note("Note: policy %s: %llu arenas needed a second block for their plan.",
                       replay_policies[p], (unsigned long long)res[p].n_arena_spills);
    trace_fini(&tr);
    return failed;
}

/* ---- main --------------------------------------------------------------------- */

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: alloc_bench [--provider host|cuda] [--quick] [--requests N] [--seed S] "
               "[--markdown]\n"
               "  --provider  memory to measure (default: cuda when a GPU is usable, else host)\n"
               "  --quick     fewer samples and a 5000-request trace\n"
               "  --requests  trace length (default 100000)\n"
               "  --seed      trace seed (default 1)\n"
               "  --markdown  tables as Markdown, for bench/RESULTS.md\n");
}

/* Parses a positive integer option value; exits with usage on error. */
static uint64_t bench_parse_u64(const char *opt, const char *text)
{
    char *end = NULL;
    unsigned long long v = text ? strtoull(text, &end, 10) : 0;
    if (!text || !*text || *end || text[0] == '-' || v == 0) {
        fprintf(stderr, "alloc_bench: %s needs a positive integer, got '%s'\n", opt,
                text ? text : "");
        bench_usage(stderr);
        exit(2);
    }
    return v;
}

static void bench_opts_parse(int argc, char **argv, bench_opts_t *o)
{
    bool requests_set = false;
    *o = (bench_opts_t){.n_requests = 100000, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--quick") == 0) {
            o->quick = true;
        } else if (strcmp(a, "--markdown") == 0) {
            o->markdown = true;
        } else if (strcmp(a, "--provider") == 0 && i + 1 < argc) {
            o->provider = argv[++i];
            if (strcmp(o->provider, "host") != 0 && strcmp(o->provider, "cuda") != 0) {
                fprintf(stderr, "alloc_bench: --provider is host or cuda, got '%s'\n",
                        o->provider);
                exit(2);
            }
        } else if (strcmp(a, "--requests") == 0) {
            o->n_requests = bench_parse_u64(a, i + 1 < argc ? argv[++i] : NULL);
            requests_set = true;
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = bench_parse_u64(a, i + 1 < argc ? argv[++i] : NULL);
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "alloc_bench: unknown argument '%s'\n", a);
            bench_usage(stderr);
            exit(2);
        }
    }
    if (o->quick && !requests_set)
        o->n_requests = 5000;
}

/* The provider the options ask for. 0 and *out, or the constructor's error. */
static int bench_provider_create(const bench_opts_t *o, alloc_provider_t **out)
{
    if (o->provider && strcmp(o->provider, "host") == 0)
        return alloc_provider_host_create(out);
    if (o->provider)
        return alloc_provider_cuda_create(0, out);
    int n_devices = 0;
    if (alloc_cuda_probe(&n_devices) == 0 && n_devices > 0)
        return alloc_provider_cuda_create(0, out);
    return alloc_provider_host_create(out);
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_opts_parse(argc, argv, &o);
    bench_out_markdown = o.markdown;
    alloc_provider_t *provider = NULL;
    if (bench_provider_create(&o, &provider) != 0) {
        fprintf(stderr, "alloc_bench: no provider: %s\n", fs_errmsg());
        return 1;
    }
    char subject[64];
    snprintf(subject, sizeof subject, "provider %s", alloc_provider_name(provider));
    bench_header_print("alloc_bench", subject, alloc_provider_is_device(provider), argc, argv);
    int rc = bench_pairs_run(provider, &o);
    if (rc == 0)
        rc = bench_trace_run(provider, &o);
    /* FS_ESTATE was reported as each replay's check failed. */
    if (rc && rc != FS_ESTATE)
        fprintf(stderr, "alloc_bench: %s\n", fs_errmsg());
    alloc_provider_destroy(provider);
    fflush(stdout);
    return rc ? 1 : 0;
}
