/* gemm_bench.c -- flatserve's SGEMM (engine/cpu/gemm.h) against OpenBLAS's
 * cblas_sgemm on shapes from real models, at 1 thread and at N threads:
 * the median time of repeated runs as GFLOP/s, the ratio, and the largest
 * difference between the two results relative to the largest |element| of
 * the product (a sanity check, not a test). It measures; it asserts no
 * speed. See bench/README.md. */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_out.h"
#include "common/clock.h"
#include "common/error.h"
#include "bench/blas.h"
#include "engine/cpu/gemm.h"

#define NS_PER_S UINT64_C(1000000000)
#define BENCH_WARMUP_RUNS 2
#define BENCH_MIN_RUNS 3

/* One product: op(A) [m, k] x op(B) [k, n]. */
typedef struct gemm_shape {
    const char *what;   /* where the shape comes from */
    int64_t m, n, k;
    bool trans_a, trans_b;
} gemm_shape_t;

static const gemm_shape_t shapes[] = {
    {"resnet50 conv 3x3, 56x56", 64, 3136, 576, false, false},
    {"squeezenet conv10", 1000, 169, 512, false, false},
    {"bert qkv, 128 tokens", 128, 768, 768, false, false},
    {"bert ffn, 8 tokens", 8, 768, 3072, false, false},
    {"vgg/alexnet fc, batch 1", 1, 1000, 4096, false, true},
    {"square", 512, 512, 512, false, false},
    {"square, A^T B^T", 512, 512, 512, true, true},
    {"square", 2048, 2048, 2048, false, false},
    {"convtranspose (A^T)", 576, 1024, 64, true, false},
    {"small", 64, 64, 64, false, false},
    {"small", 16, 16, 16, false, false},
    {"tiny", 4, 8, 8, false, false},
    /* A tied LM head reads the embedding [vocab, hidden] as B' (engine/fuse.c);
     * the B rows are the folded transpose it replaces. */
    {"gpt2 lm head, 1 token", 1, 50257, 768, false, false},
    {"gpt2 lm head, 1 token", 1, 50257, 768, false, true},
    {"gpt2 lm head, 8 tokens", 8, 50257, 768, false, false},
    {"gpt2 lm head, 8 tokens", 8, 50257, 768, false, true},
    {"gpt2 lm head, 128 tokens", 128, 50257, 768, false, false},
    {"gpt2 lm head, 128 tokens", 128, 50257, 768, false, true},
    {"gpt2 mlp fc, 8 tokens", 8, 3072, 768, false, false},
    {"gpt2 mlp fc, 8 tokens", 8, 3072, 768, false, true},
    {"gpt2 mlp fc, 128 tokens", 128, 3072, 768, false, false},
    {"gpt2 mlp fc, 128 tokens", 128, 3072, 768, false, true},
};

typedef struct bench_opts {
    int n_threads;          /* the "all threads" count */
    bool quick;
    bool markdown;
    eng_gemm_isa_t isa;
    uint64_t budget_ns;     /* per measurement, after BENCH_MIN_RUNS */
    int max_runs;
    const char *only;       /* run only the shapes whose `from` contains this; NULL: all */
} bench_opts_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: gemm_bench [--threads N] [--quick] [--markdown] [--isa avx512|avx2|portable]\n"
               "                  [--only TEXT]\n"
               "  --threads N  the multi-threaded column's threads (default: online CPUs)\n"
               "  --quick      0.2 s or 10 runs of each a shape instead of 1 s or 50\n"
               "  --markdown   tables as Markdown, for bench/RESULTS.md\n"
               "  --isa NAME   flatserve's kernels (default: the best this CPU has)\n"
               "  --only TEXT  only the shapes whose description contains TEXT\n");
}

static void bench_opts_parse(int argc, char **argv, bench_opts_t *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts_t){.n_threads = cpus > 0 ? (int)cpus : 1};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            o->n_threads = atoi(argv[++i]);
            if (o->n_threads < 1) {
                fprintf(stderr, "gemm_bench: --threads %s: want a count >= 1\n", argv[i]);
                exit(2);
            }
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            o->only = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            o->quick = true;
        } else if (strcmp(argv[i], "--markdown") == 0) {
            o->markdown = true;
        } else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
            const char *n = argv[++i];
            o->isa = strcmp(n, "avx512") == 0   ? ENG_GEMM_ISA_AVX512
                     : strcmp(n, "avx2") == 0   ? ENG_GEMM_ISA_AVX2
                     : strcmp(n, "portable") == 0 ? ENG_GEMM_ISA_PORTABLE
                                                  : ENG_GEMM_ISA_AUTO;
            if (o->isa == ENG_GEMM_ISA_AUTO) {
                fprintf(stderr, "gemm_bench: --isa %s: want avx512, avx2 or portable\n", n);
                exit(2);
            }
        } else {
            usage(strcmp(argv[i], "--help") == 0 ? stdout : stderr);
            exit(strcmp(argv[i], "--help") == 0 ? 0 : 2);
        }
    }
    o->budget_ns = o->quick ? NS_PER_S / 5 : NS_PER_S;
    o->max_runs = o->quick ? 10 : 50;
}

/* The operands of one shape, filled with values in [-1, 1). */
typedef struct operands {
    eng_gemm_t g;
    float *a, *b, *c_fs, *c_blas;
    void *scratch;
    size_t scratch_bytes;
} operands_t;

static float uniform(uint64_t *state)
{
    *state = *state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (float)((double)(*state >> 40) / (double)(UINT64_C(1) << 24) * 2.0 - 1.0);
}

/* 0, or -1 when memory ran out (reported; nothing left allocated). */
static int operands_init(operands_t *o, const gemm_shape_t *s)
{
    size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
    *o = (operands_t){
        .g = {.m = s->m, .n = s->n, .k = s->k, .lda = s->trans_a ? s->m : s->k,
              .trans_a = s->trans_a, .ldb = s->trans_b ? s->k : s->n, .trans_b = s->trans_b,
              .ldc = s->n, .alpha = 1.0f},
        .scratch_bytes = eng_gemm_scratch_bytes(s->m, s->n, s->k)};
    o->a = malloc(na * sizeof(float));
    o->b = malloc(nb * sizeof(float));
    o->c_fs = malloc(nc * sizeof(float));
    o->c_blas = malloc(nc * sizeof(float));
    o->scratch = o->scratch_bytes ? malloc(o->scratch_bytes) : NULL;
    if (!o->a || !o->b || !o->c_fs || !o->c_blas || (o->scratch_bytes && !o->scratch)) {
        fprintf(stderr, "gemm_bench: out of memory for %lld x %lld x %lld\n", (long long)s->m,
                (long long)s->n, (long long)s->k);
        return -1;
    }
    uint64_t state = 42;
    for (size_t i = 0; i < na; i++)
        o->a[i] = uniform(&state);
    for (size_t i = 0; i < nb; i++)
        o->b[i] = uniform(&state);
    o->g.a = o->a;
    o->g.b = o->b;
    o->g.c = o->c_fs;
    return 0;
}

static void operands_fini(operands_t *o)
{
    free(o->a);
    free(o->b);
    free(o->c_fs);
    free(o->c_blas);
    free(o->scratch);
}

static void run_flatserve(const operands_t *o, int n_threads)
{
    eng_gemm_run(&o->g, n_threads, o->scratch, o->scratch_bytes);
}

static void run_openblas(const operands_t *o, int n_threads)
{
    (void)n_threads; /* set once per table with openblas_set_num_threads */
    const eng_gemm_t *g = &o->g;
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (int)g->m, (int)g->n, (int)g->k, 1.0f,
                g->a, (int)g->lda, g->b, (int)g->ldb, 0.0f, o->c_blas, (int)g->n);
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Times up to 64 runs of fn after warm-up runs (runs stop at the budget,
 * after BENCH_MIN_RUNS) into t; returns how many. */
static int time_runs(const bench_opts_t *opts, void (*fn)(const operands_t *, int),
                     const operands_t *o, int n_threads, uint64_t t[64])
{
    for (int i = 0; i < BENCH_WARMUP_RUNS; i++)
        fn(o, n_threads);
    int n = 0;
    uint64_t start = fs_clock_now_ns();
    while (n < 64 && n < opts->max_runs &&
           (n < BENCH_MIN_RUNS || fs_clock_now_ns() - start < opts->budget_ns / 2)) {
        uint64_t t0 = fs_clock_now_ns();
        fn(o, n_threads);
        t[n++] = fs_clock_now_ns() - t0;
    }
    return n;
}

static double median_s(uint64_t *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_u64);
    return (double)t[n / 2] / 1e9;
}

/* The median seconds of a flatserve and of an OpenBLAS run. At 1 thread
 * the runs alternate, so a noisy machine slows both alike. With threads
 * they go in two blocks, flatserve's first after a pause: OpenBLAS's idle
 * threads spin for a while after each call (2^28 cycles by default) and
 * would take the CPUs from flatserve's pool. */
static void time_medians(const bench_opts_t *opts, const operands_t *o, int n_threads,
                         double *fs_s, double *blas_s)
{
    uint64_t t_fs[64], t_blas[64];
    if (n_threads > 1) {
        struct timespec pause = {.tv_nsec = 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
        int n = time_runs(opts, run_flatserve, o, n_threads, t_fs);
        *fs_s = median_s(t_fs, n);
        n = time_runs(opts, run_openblas, o, n_threads, t_blas);
        *blas_s = median_s(t_blas, n);
        return;
    }
    for (int i = 0; i < BENCH_WARMUP_RUNS; i++) {
        run_flatserve(o, n_threads);
        run_openblas(o, n_threads);
    }
    int n = 0;
    uint64_t start = fs_clock_now_ns();
    while (n < 64 && n < opts->max_runs &&
           (n < BENCH_MIN_RUNS || fs_clock_now_ns() - start < opts->budget_ns)) {
        uint64_t t0 = fs_clock_now_ns();
        run_flatserve(o, n_threads);
        uint64_t t1 = fs_clock_now_ns();
        run_openblas(o, n_threads);
        t_fs[n] = t1 - t0;
        t_blas[n++] = fs_clock_now_ns() - t1;
    }
    *fs_s = median_s(t_fs, n);
    *blas_s = median_s(t_blas, n);
}

/* max |C_fs - C_blas| / max |C_blas|. */
static double rel_diff(const operands_t *o)
{
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < o->g.m * o->g.n; i++) {
        diff = fmax(diff, fabs((double)o->c_fs[i] - o->c_blas[i]));
        scale = fmax(scale, fabs((double)o->c_blas[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

/* One table: every shape at n_threads. 0, or 1 when a shape's operands
 * could not be had. */
static int bench_table_threads(const bench_opts_t *opts, int n_threads)
{
    static const char *const heads[] = {"m x n x k", "op", "from", "flatserve GFLOP/s",
                                        "OpenBLAS GFLOP/s", "ratio", "max rel diff"};
    bench_table_t *t = malloc(sizeof *t);
    if (!t)
        return 1;
    bench_table_init(t, sizeof heads / sizeof heads[0], heads);
    openblas_set_num_threads(n_threads);
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const gemm_shape_t *s = &shapes[i];
        if (opts->only && !strstr(s->what, opts->only))
            continue;
        operands_t o;
        if (operands_init(&o, s) != 0) {
            operands_fini(&o);
            failed = 1;
            continue;
        }
        double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        double t_fs, t_blas;
        time_medians(opts, &o, n_threads, &t_fs, &t_blas);
        bench_table_add(t, "%lld x %lld x %lld", (long long)s->m, (long long)s->n,
                        (long long)s->k);
        bench_table_add(t, "%s", s->trans_a ? (s->trans_b ? "A'B'" : "A'B")
                                            : (s->trans_b ? "AB'" : "AB"));
        bench_table_add(t, "%s", s->what);
        bench_table_add(t, "%.1f", flop / t_fs / 1e9);
        bench_table_add(t, "%.1f", flop / t_blas / 1e9);
        bench_table_add(t, "%.2f", t_blas / t_fs);
        bench_table_add(t, "%.1e", rel_diff(&o));
        operands_fini(&o);
    }
    bench_section(n_threads == 1 ? "1 thread" : "all threads");
    bench_note("%d thread%s (flatserve's eng_parallel_for; OpenBLAS's own). Median of up to %d "
               "runs of each (%s) after %d warm-up runs; ratio = OpenBLAS time / flatserve "
               "time (> 1: flatserve faster).",
               n_threads, n_threads == 1 ? "" : "s", opts->max_runs,
               n_threads == 1 ? "alternating" : "flatserve's, then OpenBLAS's", BENCH_WARMUP_RUNS);
    bench_table_print(t);
    free(t);
    return failed;
}

int main(int argc, char **argv)
{
    bench_blas_ensure_fast_kernels(argv);
    bench_opts_t opts;
    bench_opts_parse(argc, argv, &opts);
    bench_out_markdown = opts.markdown;
    if (opts.isa != ENG_GEMM_ISA_AUTO && eng_gemm_isa_set(opts.isa) != 0) {
        fprintf(stderr, "gemm_bench: %s\n", fs_errmsg());
        return 2;
    }
    char subject[128];
    snprintf(subject, sizeof subject, "flatserve SGEMM (%s kernels) vs OpenBLAS %s",
             eng_gemm_isa_name(), bench_blas_core_name());
    bench_header_print("gemm_bench", subject, false, argc, argv);
    int failed = bench_table_threads(&opts, 1);
    if (opts.n_threads > 1)
        failed |= bench_table_threads(&opts, opts.n_threads);
    return failed;
}
