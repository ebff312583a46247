/* test_loadgen.c -- tests for loadgen's pure parts: loadtest/options.c
 * (ranges, lists, dims, scenario files, flags over them), loadtest/stats.c
 * (histogram, least squares, flatness verdict), loadtest/metrics.c
 * (Prometheus text, /v1/memory) and loadtest/request.c (metadata, dynamic
 * axes, request bodies). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "loadtest/metrics.h"
#include "loadtest/options.h"
#include "loadtest/request.h"
#include "loadtest/stats.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MIB (1024.0 * 1024.0)

/* --- ranges, lists, dims, models ------------------------------------------------ */

Test(loadgen, pick_parses_range_list_and_single)
{
    lg_pick_t p;
    cr_assert_eq(lg_pick_parse("1..64", &p), 0, "%s", fs_errmsg());
    cr_expect(p.is_range);
    cr_expect_eq(p.lo, 1u);
    cr_expect_eq(p.hi, 64u);
    cr_assert_eq(lg_pick_parse("1,8,64", &p), 0, "%s", fs_errmsg());
    cr_expect(!p.is_range);
    cr_expect_eq(p.n, 3u);
    cr_expect_eq(p.values[2], 64u);
    cr_expect_eq(lg_pick_max(&p), 64u);
    cr_assert_eq(lg_pick_parse("8", &p), 0);
    cr_expect_eq(p.n, 1u);
    cr_expect_eq(p.values[0], 8u);
    cr_assert_eq(lg_pick_parse("16..16", &p), 0);
    cr_expect_eq(lg_pick_draw(&p, 12345), 16u);
}

Test(loadgen, pick_rejects_bad_text_quoting_it)
{
    const char *bad[] = {"",    "0",      "0..3",  "5..2", "1,,2",      "a",     "1..",
                         "..4", "1,2,x",  "1.5",   "-1",   "2000000",   "1..2..3", " 1"};
    for (size_t i = 0; i < N_OF(bad); i++) {
        lg_pick_t p = {.lo = 77};
        cr_expect_eq(lg_pick_parse(bad[i], &p), FS_EINVAL, "\"%s\" parsed", bad[i]);
        cr_expect_eq(p.lo, 77u, "\"%s\": output written on error", bad[i]);
        cr_expect(strstr(fs_errmsg(), bad[i]) != NULL, "\"%s\": %s", bad[i], fs_errmsg());
    }
}

Test(loadgen, pick_draws_stay_in_range_and_cover_it)
{
    lg_pick_t p;
    lg_rng_t rng;
    int seen[65] = {0};
    cr_assert_eq(lg_pick_parse("3..9", &p), 0);
    lg_rng_seed(&rng, 42);
    for (int i = 0; i < 10000; i++) {
        uint32_t v = lg_pick_draw(&p, lg_rng_next(&rng));
        cr_assert(v >= 3 && v <= 9, "drew %u", v);
        seen[v]++;
    }
    for (int v = 3; v <= 9; v++)
        cr_expect(seen[v] > 1000, "%d drawn %d times of 10000", v, seen[v]);
    cr_assert_eq(lg_pick_parse("1,8,64", &p), 0);
    for (int i = 0; i < 100; i++) {
        uint32_t v = lg_pick_draw(&p, lg_rng_next(&rng));
        cr_assert(v == 1 || v == 8 || v == 64, "drew %u", v);
    }
}

Test(loadgen, dim_parses_input_axis_and_pick_with_colons_in_the_name)
{
    lg_dim_t d;
    cr_assert_eq(lg_dim_parse("embeddings:1:16..512", &d), 0, "%s", fs_errmsg());
    cr_expect_str_eq(d.input, "embeddings");
    cr_expect_eq(d.axis, 1u);
    cr_expect_eq(d.pick.lo, 16u);
    cr_expect_eq(d.pick.hi, 512u);
    cr_assert_eq(lg_dim_parse("x:0:2:1,2,4", &d), 0, "%s", fs_errmsg());
    cr_expect_str_eq(d.input, "x:0");
    cr_expect_eq(d.axis, 2u);
    cr_expect_eq(d.pick.n, 3u);
    const char *bad[] = {"embeddings", "embeddings:1", ":1:4", "e:x:4", "e:1:0..4", "e::4"};
    for (size_t i = 0; i < N_OF(bad); i++)
        cr_expect_eq(lg_dim_parse(bad[i], &d), FS_EINVAL, "\"%s\" parsed", bad[i]);
}

Test(loadgen, model_ref_takes_an_optional_weight)
{
    lg_model_ref_t m;
    cr_assert_eq(lg_model_ref_parse("mlp", &m), 0);
    cr_expect_str_eq(m.name, "mlp");
    cr_expect_float_eq(m.weight, 1.0, 1e-12);
    cr_assert_eq(lg_model_ref_parse("cnn:2.5", &m), 0);
    cr_expect_str_eq(m.name, "cnn");
    cr_expect_float_eq(m.weight, 2.5, 1e-12);
    const char *bad[] = {"", ":3", "mlp:0", "mlp:-1", "mlp:x", ".hidden", "a b"};
    for (size_t i = 0; i < N_OF(bad); i++)
        cr_expect_eq(lg_model_ref_parse(bad[i], &m), FS_EINVAL, "\"%s\" parsed", bad[i]);
    cr_expect_eq(lg_model_ref_parse("a b:2", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "has a character other than"), "the server's rule: %s",
              fs_errmsg());
}

Test(loadgen, url_host_knows_loopback)
{
    char host[64];
    int lo = -1;
    cr_assert_eq(lg_url_host("http://127.0.0.1:8000", host, sizeof host, &lo), 0);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect(lo);
    cr_assert_eq(lg_url_host("http://[::1]:8000/", host, sizeof host, &lo), 0);
    cr_expect_str_eq(host, "::1");
    cr_expect(lo);
    cr_assert_eq(lg_url_host("http://localhost", host, sizeof host, &lo), 0);
    cr_expect(lo);
    cr_assert_eq(lg_url_host("http://10.0.0.2:8000", host, sizeof host, &lo), 0);
    cr_expect(!lo);
    cr_assert_eq(lg_url_host("http://127.evil.com:80", host, sizeof host, &lo), 0);
    cr_expect(!lo, "127.evil.com taken for loopback");
    cr_expect_eq(lg_url_host("https://127.0.0.1", host, sizeof host, &lo), FS_EINVAL);
}

/* --- scenario files and flags --------------------------------------------------- */

Test(loadgen, scenario_sets_keys_and_skips_comments)
{
    lg_opts_t o;
    lg_opts_defaults(&o);
    const char *text = "# a scenario\n"
                       "\n"
                       "concurrency = 16   # trailing comment\n"
                       "model = encoder\n"
                       "model = mlp:3\n"
                       "batch = 1..64\n"
                       "dim = embeddings:1:16..512\n"
                       "  duration=20s\r\n"
                       "allow-remote = true\n";
    cr_assert_eq(lg_opts_parse_scenario(&o, text, "t.conf"), 0, "%s", fs_errmsg());
    cr_expect_eq(o.concurrency, 16u);
    cr_expect_eq(o.n_models, 2u, "the file's models replace the default mlp");
    cr_expect_str_eq(o.models[0].name, "encoder");
    cr_expect_float_eq(o.models[1].weight, 3.0, 1e-12);
    cr_expect(o.batch.is_range && o.batch.hi == 64);
    cr_expect_eq(o.n_dims, 1u);
    cr_expect_eq(o.duration_ns, 20000000000ull);
    cr_expect(o.allow_remote);
}

Test(loadgen, scenario_errors_name_the_line)
{
    struct {
        const char *text, *want;
    } cases[] = {
        {"concurrency = 4\nconcurency = 8\n", "t.conf:2: unknown key \"concurency\""},
        {"concurrency = 4\n\nconcurrency = 8\n",
         "t.conf:3: \"concurrency\" given twice (first at line 1)"},
        {"batch 1..64\n", "t.conf:1: expected `key = value`"},
        {"batch = 0..4\n", "t.conf:1: \"0..4\""},
        {"scenario = other.conf\n", "t.conf:1: a scenario file cannot name another one"},
        {"duration = soon\n", "t.conf:1: expected a duration"},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        lg_opts_t o;
        lg_opts_defaults(&o);
        cr_expect_eq(lg_opts_parse_scenario(&o, cases[i].text, "t.conf"), FS_EINVAL, "case %zu", i);
        cr_expect(strstr(fs_errmsg(), cases[i].want) != NULL, "case %zu: %s", i, fs_errmsg());
    }
}

/* Writes text to a temporary file; the caller unlinks path. */
static void temp_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/loadgen-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(loadgen, flag_lists_replace_the_file_list_and_scalars_win)
{
    char path[64];
    temp_file(path, sizeof path,
              "concurrency = 16\nmodel = encoder\nmodel = other\nbatch = 1..64\n"
              "dim = embeddings:1:16..512\nduration = 120s\nseed = 9\n");
    char *argv[] = {"loadgen", "--concurrency", "2", "--scenario", path, "--model=mlp",
                    "--model", "cnn:2", "--duration", "5s", NULL};
    lg_opts_t o;
    int rc = lg_opts_parse_args(&o, N_OF(argv) - 1, argv);
    unlink(path);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(o.concurrency, 2u, "the flag before --scenario still wins");
    cr_expect_eq(o.n_models, 2u);
    cr_expect_str_eq(o.models[0].name, "mlp");
    cr_expect_str_eq(o.models[1].name, "cnn");
    cr_expect_eq(o.duration_ns, 5000000000ull);
    cr_expect_eq(o.seed, 9u, "a key no flag names keeps the file's value");
    cr_expect_eq(o.n_dims, 1u, "no --dim on the line: the file's dims stay");
}

Test(loadgen, dim_none_clears_the_file_dims)
{
    char path[64];
    temp_file(path, sizeof path, "model = encoder\ndim = embeddings:1:16..512\n");
    char *argv[] = {"loadgen", "--scenario", path, "--model", "mlp", "--dim", "none", NULL};
    lg_opts_t o;
    int rc = lg_opts_parse_args(&o, N_OF(argv) - 1, argv);
    unlink(path);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(o.n_dims, 0u);
    cr_expect_eq(o.n_models, 1u);
}

Test(loadgen, flag_errors_say_what_was_wrong)
{
    struct {
        const char *args[4];
        const char *want;
    } cases[] = {
        {{"--concurency", "4"}, "unknown flag '--concurency'"},
        {{"--batch"}, "--batch needs a value"},
        {{"--concurrency", "0"}, "--concurrency: expected an integer 1..4096, got \"0\""},
        {{"--url", "http://10.1.2.3:8000"}, "not a loopback host"},
        {{"--duration", "0"}, "the run needs a bound"},
        {{"--encoding", "xml"}, "expected json, binary or mixed"},
        {{"stray"}, "unexpected argument \"stray\""},
        {{"--scenario", "/nonexistent/x.conf"}, "cannot read \"/nonexistent/x.conf\""},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        char *argv[6] = {"loadgen"};
        int argc = 1;
        for (int k = 0; k < 4 && cases[i].args[k]; k++)
            argv[argc++] = (char *)cases[i].args[k];
        lg_opts_t o;
        cr_expect_neq(lg_opts_parse_args(&o, argc, argv), 0, "case %zu parsed", i);
        cr_expect(strstr(fs_errmsg(), cases[i].want) != NULL, "case %zu: %s", i, fs_errmsg());
    }
    char *remote[] = {"loadgen", "--url", "http://10.1.2.3:8000", "--allow-remote", NULL};
    lg_opts_t o;
    cr_expect_eq(lg_opts_parse_args(&o, 4, remote), 0, "%s", fs_errmsg());
    char *help[] = {"loadgen", "--concurrency", "0", "--help", NULL};
    cr_expect_eq(lg_opts_parse_args(&o, 4, help), 0, "--help wins over a bad flag");
    cr_expect(o.help);
}

/* --- histogram and least squares -------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

Test(loadgen, hist_quantiles_are_within_half_a_percent)
{
    enum { N = 20000 };
    static uint64_t v[N];
    static lg_hist_t h;
    lg_rng_t rng;
    lg_rng_seed(&rng, 7);
    lg_hist_reset(&h);
    for (int i = 0; i < N; i++) {
        /* log-uniform from 10 us to 2 s: the spread of real latencies */
        v[i] = (uint64_t)(1e4 * pow(2e5, lg_rng_uniform(&rng)));
        lg_hist_add(&h, v[i]);
    }
    qsort(v, N, sizeof v[0], cmp_u64);
    const double qs[] = {0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0};
    for (size_t i = 0; i < N_OF(qs); i++) {
        size_t rank = (size_t)ceil(qs[i] * N);
        uint64_t exact = v[rank ? rank - 1 : 0], got = lg_hist_quantile(&h, qs[i]);
        cr_expect(fabs((double)got - (double)exact) <= 0.005 * (double)exact + 1,
                  "q %.3f: got %llu, exact %llu", qs[i], (unsigned long long)got,
                  (unsigned long long)exact);
    }
    cr_expect_eq(lg_hist_quantile(&h, 1.0), v[N - 1], "the max is exact");
    cr_expect_eq(lg_hist_quantile(&h, 0.0), v[0], "the min is exact");
    cr_expect_eq(h.n, (uint64_t)N);
}

Test(loadgen, hist_empty_single_and_out_of_range)
{
    static lg_hist_t h;
    lg_hist_reset(&h);
    cr_expect_eq(lg_hist_quantile(&h, 0.5), 0u);
    cr_expect_float_eq(lg_hist_mean_ns(&h), 0.0, 1e-12);
    lg_hist_add(&h, 1234567);
    cr_expect_eq(lg_hist_quantile(&h, 0.5), 1234567u);
    cr_expect_eq(lg_hist_quantile(&h, 0.99), 1234567u);
    lg_hist_add(&h, 5);                       /* below 1 us */
    lg_hist_add(&h, 5000000000000ull);        /* 5000 s: above the last bucket */
    cr_expect_eq(lg_hist_quantile(&h, 0.0), 5u);
    cr_expect_eq(lg_hist_quantile(&h, 1.0), 5000000000000ull);
}

Test(loadgen, fit_line_recovers_slope_and_refuses_no_line)
{
    double x[50], y[50], slope = 0, icpt = 0;
    for (int i = 0; i < 50; i++) {
        x[i] = 1000.0 + i;               /* far from 0: the centred sums matter */
        y[i] = 8e9 + 3.5 * x[i];         /* 8 GB plus 3.5 B/s */
    }
    cr_assert_eq(lg_fit_line(x, y, 50, &slope, &icpt), 0);
    cr_expect_float_eq(slope, 3.5, 1e-6);
    cr_expect_float_eq(icpt, 8e9, 1e-2);
    double same[3] = {2, 2, 2};
    slope = 77;
    cr_expect_eq(lg_fit_line(same, y, 3, &slope, &icpt), FS_EINVAL);
    cr_expect_eq(lg_fit_line(x, y, 1, &slope, &icpt), FS_EINVAL);
    cr_expect_float_eq(slope, 77.0, 1e-12, "output written on error");
}

/* --- flatness ------------------------------------------------------------------- */

enum { FLAT_N = 61 };

typedef struct series {
    double t[FLAT_N], reserved[FLAT_N], rss[FLAT_N];
} series_t;

/* 60 s sampled every second: reserved and RSS as fn(t, i) gives them. */
static void series_fill(series_t *s, double (*res)(double, int), double (*rss)(double, int))
{
    for (int i = 0; i < FLAT_N; i++) {
        s->t[i] = i;
        s->reserved[i] = res(i, i);
        s->rss[i] = rss(i, i);
    }
}

static double flat_reserved(double t, int i) { return 512 * MIB; }
static double flat_rss(double t, int i) { return 900 * MIB; }
/* Reserved grows while the first shapes are seen (before the 10% mark). */
static double warm_reserved(double t, int i)
{
    return t < 5 ? 256 * MIB + t * 50 * MIB : 512 * MIB;
}
static double growing_reserved(double t, int i) { return 512 * MIB + t * MIB; }
static double growing_rss(double t, int i) { return 900 * MIB * (1 + 0.002 * t); }
/* +-0.4% noise that does not trend: a fixed pseudo-random sequence. */
static double noise(int i) { return ((i * 7919) % 101 - 50) / 50.0 * 0.004; }
static double noisy_reserved(double t, int i) { return 512 * MIB * (1 + noise(i)); }
static double noisy_rss(double t, int i) { return 900 * MIB * (1 + noise(i + 13)); }

static lg_verdict_t judge(const series_t *s, size_t n, lg_flatness_t *f)
{
    lg_verdict_t v;
    memset(&v, 0, sizeof v);
    lg_flatness_measure(s->t, s->reserved, s->rss, n, 0.1, f);
    lg_flatness_judge(f, 1.02, 0.01, &v);
    return v;
}

Test(loadgen, flatness_of_a_flat_run_passes_with_zero_slope)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, flat_reserved, flat_rss);
    lg_verdict_t v = judge(&s, FLAT_N, &f);
    cr_assert(f.valid);
    cr_expect_eq(f.mark_index, 6u, "10%% of 60 s is 6 s");
    cr_expect_float_eq(f.reserved.ratio, 1.0, 1e-12);
    cr_expect(f.reserved.slope_valid);
    cr_expect_float_eq(f.reserved.slope_per_s, 0.0, 1e-6);
    cr_expect_eq(v.n, 2);
    cr_expect_eq(v.failed, 0);
}

Test(loadgen, flatness_ignores_growth_before_the_mark)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, warm_reserved, flat_rss);
    lg_verdict_t v = judge(&s, FLAT_N, &f);
    cr_expect_float_eq(f.reserved.ratio, 1.0, 1e-12);
    cr_expect_eq(v.failed, 0);
    lg_verdict_t v0;
    memset(&v0, 0, sizeof v0);
    lg_flatness_measure(s.t, s.reserved, s.rss, FLAT_N, 0.0, &f);
    lg_flatness_judge(&f, 1.02, 0.01, &v0);
    cr_expect_eq(v0.failed, 1, "with no warm-up the growth counts");
}

Test(loadgen, flatness_of_a_growing_run_fails_both_bounds)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, growing_reserved, growing_rss);
    lg_verdict_t v = judge(&s, FLAT_N, &f);
    cr_expect(f.reserved.ratio > 1.02, "ratio %g", f.reserved.ratio);
    cr_expect_float_eq(f.reserved.slope_per_s, MIB, 1.0);
    cr_expect(f.rss.slope_pct_per_hour > 100, "%g %%/h", f.rss.slope_pct_per_hour);
    cr_expect_eq(v.failed, 2);
    cr_expect_str_eq(v.checks[0].name, "max-reserved-ratio");
    cr_expect(!v.checks[0].ok);
    cr_expect(strstr(v.checks[0].detail, "518.00 MiB at the mark (6.0 s) -> 572.00 MiB") != NULL,
              "%s", v.checks[0].detail);
    cr_expect(!v.checks[1].ok);
}

Test(loadgen, flatness_of_a_noisy_flat_run_passes_with_a_small_slope)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, noisy_reserved, noisy_rss);
    lg_verdict_t v = judge(&s, FLAT_N, &f);
    cr_expect_eq(v.failed, 0, "ratio %g, drift %g", f.reserved.ratio, f.rss.drift);
    cr_expect(fabs(f.reserved.slope_per_s) < 0.0005 * 512 * MIB,
              "slope %g B/s on a flat line", f.reserved.slope_per_s);
}

/* A 200 MiB request in flight at every fifth sample, the last included. */
static double spiky_rss(double t, int i)
{
    return 900 * MIB + ((FLAT_N - 1 - i) % 5 == 0 ? 200 * MIB : 0);
}
/* The same with what is held between requests stepping up 10 MiB at 40 s. */
static double stepped_spiky_rss(double t, int i)
{
    return spiky_rss(t, i) + (t >= 40 ? 10 * MIB : 0);
}

Test(loadgen, the_rss_is_judged_by_its_floor_not_by_requests_in_flight)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, flat_reserved, spiky_rss);
    lg_verdict_t v = judge(&s, FLAT_N, &f);
    cr_expect_float_eq(f.rss.drift, 200.0 / 900.0, 1e-9, "the end sample lands on a request");
    cr_expect_float_eq(f.rss.floor_mark, 900 * MIB, 1.0);
    cr_expect_float_eq(f.rss.floor_end, 900 * MIB, 1.0);
    cr_expect_eq(v.failed, 0, "%s", v.checks[1].detail);
    cr_expect(strstr(v.checks[1].detail, "RSS floor 900.00 MiB") != NULL, "%s", v.checks[1].detail);

    series_fill(&s, flat_reserved, stepped_spiky_rss);
    v = judge(&s, FLAT_N, &f);
    cr_expect_eq(v.failed, 1, "a floor 10 MiB higher at the end passed: %s", v.checks[1].detail);
    cr_expect_str_eq(v.checks[1].name, "max-rss-drift");
    cr_expect_float_eq(f.rss.floor_drift, 10.0 / 900.0, 1e-9);
}

Test(loadgen, flatness_needs_a_sample_after_the_mark)
{
    series_t s;
    lg_flatness_t f;
    series_fill(&s, flat_reserved, flat_rss);
    lg_verdict_t v = judge(&s, 1, &f);
    cr_expect(!f.valid);
    cr_expect_eq(v.n, 0, "an unjudged run adds no check");
    judge(&s, 2, &f);
    cr_expect(!f.valid, "two samples: the 10%% mark falls on the last one");
    judge(&s, 3, &f);
    cr_expect(f.valid);
    cr_expect_eq(f.mark_index, 1u);
    cr_expect(!f.reserved.slope_valid, "two samples from the mark give no slope");
    judge(&s, 4, &f);
    cr_expect(f.reserved.slope_valid);
    s.reserved[0] = 0;
    s.reserved[1] = 1;
    lg_flatness_measure(s.t, s.reserved, s.rss, 2, 0.0, &f);
    cr_expect(isinf(f.reserved.ratio), "growth from zero is infinite");
}

/* --- Prometheus text and /v1/memory ------------------------------------------------- */

Test(loadgen, prom_line_splits_name_labels_and_value)
{
    const char *line =
        "flatserve_model_memory_bytes{model=\"a\\\"b,}\",version=\"1\",kind=\"weights\"} 69632 1712";
    char name[64], v[32];
    const char *labels;
    size_t ll;
    double value;
    cr_assert_eq(lg_prom_line(line, strlen(line), name, sizeof name, &labels, &ll, &value), 0,
                 "%s", fs_errmsg());
    cr_expect_str_eq(name, "flatserve_model_memory_bytes");
    cr_expect_float_eq(value, 69632.0, 1e-9);
    cr_assert_eq(lg_prom_label(labels, ll, "model", v, sizeof v), 0);
    cr_expect_str_eq(v, "a\"b,}");
    cr_assert_eq(lg_prom_label(labels, ll, "kind", v, sizeof v), 0);
    cr_expect_str_eq(v, "weights");
    cr_expect_eq(lg_prom_label(labels, ll, "device", v, sizeof v), FS_ENOENT);
    const char *bare = "process_resident_memory_bytes 6033408";
    cr_assert_eq(lg_prom_line(bare, strlen(bare), name, sizeof name, &labels, &ll, &value), 0);
    cr_expect_eq(ll, 0u);
    cr_expect_float_eq(value, 6033408.0, 1e-9);
    const char *bad[] = {"no_value", "x{a=\"1\" 3", "x{a=\"1\"} abc", "{a=\"1\"} 3", "x 1 2 3 4"};
    for (size_t i = 0; i < N_OF(bad) - 1; i++)
        cr_expect_eq(lg_prom_line(bad[i], strlen(bad[i]), name, sizeof name, &labels, &ll, &value),
                     FS_EPARSE, "\"%s\" parsed", bad[i]);
}

Test(loadgen, metrics_sums_the_device_caches_only)
{
    const char *text =
        "# HELP flatserve_memory_reserved_bytes Reserved.\n"
        "# TYPE flatserve_memory_reserved_bytes gauge\n"
        "flatserve_memory_reserved_bytes{device=\"cuda:0\",cache=\"device\",pool=\"all\"} 1000\n"
        "flatserve_memory_reserved_bytes{device=\"cuda:0\",cache=\"device\",pool=\"small\"} 400\n"
        "flatserve_memory_reserved_bytes{device=\"cuda:1\",cache=\"device\",pool=\"all\"} 24\n"
        "flatserve_memory_reserved_bytes{device=\"cuda:0\",cache=\"pinned\",pool=\"all\"} 99999\n"
        "flatserve_memory_allocated_bytes{device=\"cuda:0\",cache=\"device\",pool=\"all\"} 600\n"
        "flatserve_memory_peak_allocated_bytes{device=\"cuda:0\",cache=\"device\",pool=\"all\"} 700\n"
        "flatserve_memory_peak_reserved_bytes{device=\"cuda:0\",cache=\"device\",pool=\"all\"} 2e3\n"
        "flatserve_model_memory_bytes{model=\"mlp\",version=\"1\",kind=\"weights\"} 10\n"
        "flatserve_model_memory_bytes{model=\"cnn\",version=\"1\",kind=\"weights\"} 5\n"
        "flatserve_model_memory_bytes{model=\"cnn\",version=\"1\",kind=\"activations\"} 3\n"
        "flatserve_memory_device_allocs_total{device=\"cuda:0\",cache=\"device\"} 7\n"
        "flatserve_memory_device_frees_total{device=\"cuda:0\",cache=\"device\"} 4\n"
        "flatserve_memory_device_allocs_total{device=\"cuda:0\",cache=\"pinned\"} 100\n"
        "flatserve_memory_released_bytes_total{device=\"cuda:0\",cache=\"device\",policy=\"idle_trim\"} 4096\n"
        "nv_inference_request_success{model=\"mlp\",version=\"1\"} 12\n"
        "nv_inference_request_success{model=\"cnn\",version=\"1\"} 30\n"
        "process_resident_memory_bytes 6033408\n";
    lg_metrics_t m;
    cr_assert_eq(lg_metrics_parse(text, &m), 0, "%s", fs_errmsg());
    cr_expect(m.have_memory && m.have_rss);
    cr_expect_float_eq(m.reserved, 1024.0, 1e-9);
    cr_expect_float_eq(m.allocated, 600.0, 1e-9);
    cr_expect_float_eq(m.peak_allocated, 700.0, 1e-9);
    cr_expect_float_eq(m.peak_reserved, 2000.0, 1e-9);
    cr_expect_float_eq(m.weights, 15.0, 1e-9);
    cr_expect_float_eq(m.activations, 3.0, 1e-9);
    cr_expect_float_eq(m.device_allocs, 7.0, 1e-9);
    cr_expect_float_eq(m.device_frees, 4.0, 1e-9);
    cr_expect_float_eq(m.released_idle_trim, 4096.0, 1e-9);
    cr_expect_float_eq(m.inferences, 42.0, 1e-9);
    cr_expect_float_eq(m.rss, 6033408.0, 1e-9);
    cr_expect_eq(lg_metrics_parse("ok 1\nnot a sample line\n", &m), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "not a sample line") != NULL, "%s", fs_errmsg());
    cr_assert_eq(lg_metrics_parse("process_resident_memory_bytes 5\n", &m), 0);
    cr_expect(!m.have_memory, "no device cache: have_memory says so");
}

Test(loadgen, memory_json_sums_the_device_caches)
{
    const char *json =
        "{\"caches\":[{\"device\":\"cuda:0\",\"kind\":\"device\",\"allocated_bytes\":{\"current\":10,"
        "\"peak\":20,\"total\":30},\"reserved_bytes\":{\"current\":2097152}},"
        "{\"device\":\"cuda:0\",\"kind\":\"pinned\",\"allocated_bytes\":{\"current\":99},"
        "\"reserved_bytes\":{\"current\":99}}],\"models\":[{\"name\":\"mlp\"}]}";
    lg_memory_t m;
    cr_assert_eq(lg_memory_parse(json, &m), 0, "%s", fs_errmsg());
    cr_expect_float_eq(m.allocated, 10.0, 1e-9);
    cr_expect_float_eq(m.reserved, 2097152.0, 1e-9);
    cr_expect_eq(m.n_caches, 1);
    cr_expect_eq(m.n_models, 1);
    cr_expect_eq(lg_memory_parse("{\"error\":\"unauthorized\"}", &m), FS_EPARSE);
}

Test(loadgen, memory_segments_give_the_bytes_live_blocks_pin)
{
    /* Two device caches: segments with a live block count whole, free ones
     * not at all; the pinned cache is not a device cache. */
    const char *json =
        "{\"caches\":[{\"kind\":\"device\",\"allocated_bytes\":{\"current\":8389120},"
        "\"reserved_bytes\":{\"current\":31457280},\"segment_list\":["
        "{\"size\":2097152,\"allocated\":512},{\"size\":20971520,\"allocated\":0},"
        "{\"size\":8388608,\"allocated\":8388608}]},"
        "{\"kind\":\"device\",\"allocated_bytes\":{\"current\":0},"
        "\"reserved_bytes\":{\"current\":2097152},\"segment_list\":["
        "{\"size\":2097152,\"allocated\":0}]},"
        "{\"kind\":\"pinned\",\"allocated_bytes\":{\"current\":1},"
        "\"reserved_bytes\":{\"current\":2097152},\"segment_list\":["
        "{\"size\":2097152,\"allocated\":1}]}],\"models\":[]}";
    lg_memory_t m;
    cr_assert_eq(lg_memory_parse(json, &m), 0, "%s", fs_errmsg());
    cr_expect_eq(m.have_segments, 1);
    cr_expect_float_eq(m.pinned, 10485760.0, 1e-9);
    cr_expect_float_eq(m.reserved, 33554432.0, 1e-9);
    cr_expect_eq(m.n_caches, 2);
    cr_expect_eq(lg_memory_parse("{\"caches\":[{\"kind\":\"device\",\"allocated_bytes\":"
                                 "{\"current\":0},\"reserved_bytes\":{\"current\":0},"
                                 "\"segment_list\":[{\"size\":1}]}]}", &m),
                 FS_EPARSE, "a segment without its allocated bytes");
}

Test(loadgen, idle_trim_bound_needs_an_idle_time_past_its_deadline)
{
    lg_opts_t o;
    lg_opts_defaults(&o);
    cr_assert_eq(lg_opts_set(&o, "idle-trim-after", "5s", "--idle-trim-after", LG_SRC_CLI), 0);
    cr_assert_eq(lg_opts_set(&o, "idle-trim-keep", "1MiB", "--idle-trim-keep", LG_SRC_CLI), 0);
    cr_expect_eq(o.idle_trim_keep, 1048576u);
    cr_assert_eq(lg_opts_set(&o, "idle", "5s", "--idle", LG_SRC_CLI), 0);
    cr_expect_eq(lg_opts_validate(&o), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--idle-trim-after") != NULL, "%s", fs_errmsg());
    cr_assert_eq(lg_opts_set(&o, "idle", "6s", "--idle", LG_SRC_CLI), 0);
    cr_expect_eq(lg_opts_validate(&o), 0, "%s", fs_errmsg());
}

/* --- metadata, dynamic axes, bodies --------------------------------------------------- */

static const char encoder_meta[] =
    "{\"name\":\"encoder\",\"versions\":[\"1\"],\"inputs\":[{\"name\":\"embeddings\","
    "\"datatype\":\"FP32\",\"shape\":[-1,-1,64]}],\"outputs\":[{\"name\":\"hidden\","
    "\"datatype\":\"FP32\",\"shape\":[-1,-1,64]}]}";

static int bind_with(const char *meta, const char *dim, lg_model_t *m)
{
    lg_opts_t o;
    lg_opts_defaults(&o);
    if (dim)
        cr_assert_eq(lg_opts_set(&o, "dim", dim, "--dim", LG_SRC_CLI), 0, "%s", fs_errmsg());
    cr_assert_eq(lg_model_parse(meta, "encoder", m), 0, "%s", fs_errmsg());
    return lg_model_bind(m, 1, &o);
}

Test(loadgen, bind_names_the_uncovered_axis_and_the_bad_dim)
{
    lg_model_t m;
    cr_expect_eq(bind_with(encoder_meta, NULL, &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "model 'encoder' input 'embeddings': axis 1 is dynamic") != NULL,
              "%s", fs_errmsg());
    cr_expect_eq(bind_with(encoder_meta, "embeddings:1:16..512", &m), 0, "%s", fs_errmsg());
    cr_expect_eq(m.inputs[0].axis_src[0], LG_AXIS_BATCH);
    cr_expect_eq(m.inputs[0].axis_src[1], 0);
    cr_expect_eq(m.inputs[0].axis_src[2], LG_AXIS_FIXED);
    cr_expect_eq(bind_with(encoder_meta, "embeddings:2:16..512", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "is fixed at 64") != NULL, "%s", fs_errmsg());
    cr_expect_eq(bind_with(encoder_meta, "embeddings:0:1..4", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "batch axis") != NULL, "%s", fs_errmsg());
    cr_expect_eq(bind_with(encoder_meta, "tokens:1:1..4", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "no model of the mix has an input 'tokens'") != NULL, "%s",
              fs_errmsg());
    cr_expect_eq(lg_model_parse("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"STRING\","
                                "\"shape\":[1]}]}", "m", &m), FS_ENOTSUP);
}

static const char mlp_meta[] =
    "{\"name\":\"mlp\",\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[-1,64]}],"
    "\"outputs\":[{\"name\":\"probabilities\",\"datatype\":\"FP32\",\"shape\":[-1,10]}]}";

/* A body for mlp at batch 3, parsed back: its JSON (the header of a binary
 * body) and the input's shape, datatype and element count. */
static cJSON *body_for(lg_bad_t bad, int binary, lg_body_t *b)
{
    lg_opts_t o;
    lg_model_t m;
    lg_datapool_t *pool;
    lg_rng_t rng;
    lg_opts_defaults(&o);
    cr_assert_eq(lg_opts_set(&o, "batch", "3", "--batch", LG_SRC_CLI), 0);
    cr_assert_eq(lg_model_parse(mlp_meta, "mlp", &m), 0);
    cr_assert_eq(lg_model_bind(&m, 1, &o), 0, "%s", fs_errmsg());
    cr_assert_eq(lg_datapool_create(1, &pool), 0);
    lg_rng_seed(&rng, 1);
    cr_assert_eq(lg_body_build(pool, &m, &o, &rng, NULL, binary, bad, b), 0, "%s", fs_errmsg());
    lg_datapool_destroy(pool);
    size_t n = b->header_len ? b->header_len : b->len;
    return cJSON_ParseWithLength(b->data, n);
}

static const cJSON *input0(const cJSON *root)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(root, "inputs"), 0);
}

Test(loadgen, body_json_carries_the_drawn_shape_and_data)
{
    lg_body_t b;
    cJSON *root = body_for(LG_BAD_NONE, 0, &b);
    cr_assert_not_null(root, "not JSON: %.200s", b.data);
    const cJSON *in = input0(root);
    cr_expect_str_eq(cJSON_GetObjectItem(in, "name")->valuestring, "input");
    cr_expect_str_eq(cJSON_GetObjectItem(in, "datatype")->valuestring, "FP32");
    const cJSON *shape = cJSON_GetObjectItem(in, "shape");
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, 3);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 64);
    const cJSON *data = cJSON_GetObjectItem(in, "data");
    cr_expect_eq(cJSON_GetArraySize(data), 192);
    double v = cJSON_GetArrayItem(data, 5)->valuedouble;
    cr_expect(v >= -1 && v < 1, "value %g outside [-1, 1)", v);
    cr_expect_eq(b.header_len, 0u);
    cJSON_Delete(root);
    lg_body_free(&b);
}

Test(loadgen, body_binary_has_a_header_and_the_raw_tensor)
{
    lg_body_t b;
    cJSON *root = body_for(LG_BAD_NONE, 1, &b);
    cr_assert_not_null(root, "header not JSON");
    const cJSON *in = input0(root);
    const cJSON *params = cJSON_GetObjectItem(in, "parameters");
    const cJSON *size = cJSON_GetObjectItem(params, "binary_data_size");
    cr_expect_eq(size->valueint, 192 * 4);
    cr_expect_eq(b.len, b.header_len + 192 * 4);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "parameters"),
                                               "binary_data_output")));
    cr_expect_null(cJSON_GetObjectItem(in, "data"));
    cJSON_Delete(root);
    lg_body_free(&b);
}

Test(loadgen, bad_bodies_are_bad_in_the_way_they_say)
{
    lg_body_t b;
    cJSON *root = body_for(LG_BAD_SHAPE, 1, &b);
    const cJSON *in = input0(root);
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(in, "shape"), 1)->valueint, 65,
                 "the fixed axis off by one");
    cr_expect_eq(b.len, b.header_len + 3 * 65 * 4, "data matches the shape sent");
    cJSON_Delete(root);
    lg_body_free(&b);
    root = body_for(LG_BAD_DTYPE, 0, &b);
    in = input0(root);
    cr_expect_str_eq(cJSON_GetObjectItem(in, "datatype")->valuestring, "INT64");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(in, "data")), 192);
    cJSON_Delete(root);
    lg_body_free(&b);
    root = body_for(LG_BAD_JSON, 1, &b);
    cr_expect_null(root, "a cut body parsed");
    cr_expect_eq(b.header_len, 0u, "malformed JSON goes as JSON");
    cJSON_Delete(root);
    lg_body_free(&b);
}

/* --trace-seed replays torch_baseline.py's trace: splitmix64 from the seed,
 * batch then seq; its docstring gives the first requests for seed 1. */
Test(loadgen, trace_seed_replays_the_torch_baseline_trace)
{
    uint64_t st = 1;
    const uint32_t want[5][2] = {{2, 450}, {31, 366}, {58, 354}, {38, 187}, {41, 426}};
    for (int i = 0; i < 5; i++) {
        uint32_t b = 1 + (uint32_t)(lg_splitmix64(&st) % 64);
        uint32_t s = 16 + (uint32_t)(lg_splitmix64(&st) % 497);
        cr_expect_eq(b, want[i][0], "request %d: batch %u", i, b);
        cr_expect_eq(s, want[i][1], "request %d: seq %u", i, s);
    }
}
