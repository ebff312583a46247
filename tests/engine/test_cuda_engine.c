/* test_cuda_engine.c -- how the engine behaves on a GPU, beyond matching the
 * CPU (test_cuda_consistency.c does that): a device OOM fails that run only,
 * CUDA graph replay gives the very bits of launch-by-launch runs, runs
 * without host and staging caches work, several threads may run one model,
 * and tf32 stays close to fp32. Every test loads the demo models (models/,
 * built by make) and skips without a usable GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/engine.h"

static void gpu_skip_unless_present(void)
{
    int n = 0;
    if (alloc_cuda_probe(&n) != 0 || n < 1)
        cr_skip_test("no usable GPU: %s", fs_errmsg());
}

/* cuda:0's memory; max_reserved 0 means no limit on the device cache. */
static void gpu_open(eng_memory_t *g, size_t max_reserved)
{
    gpu_skip_unless_present();
    alloc_cache_config_t cfg = {.name = "cuda:0", .max_reserved_bytes = max_reserved};
    eng_device_t dev = {ENG_DEVICE_CUDA, 0};
    cr_assert_eq(eng_memory_open(&dev, &cfg, g), 0, "%s", fs_errmsg());
}

/* Checks every cache gave every byte back, then frees them. */
static void gpu_close(eng_memory_t *g)
{
    alloc_cache_t *caches[3] = {g->cache, g->host_cache, g->staging};
    for (int i = 0; i < 3; i++) {
        alloc_cache_stats_t st;
        alloc_cache_stats(caches[i], &st);
        cr_expect_eq(st.allocated.current, 0, "cache %d: %lld bytes still allocated", i,
                     (long long)st.allocated.current);
    }
    eng_memory_close(g);
}

/* A model of the demo repository on cuda:0; without `host_caches` it loads
 * with no host or staging cache (heap weights, pageable copies). */
static eng_model_t *gpu_load(const eng_memory_t *g, const char *name, const char *precision,
                             bool graphs, bool host_caches)
{
    char path[256];
    snprintf(path, sizeof path, "models/%s/1/model.onnx", name);
    eng_precision_t prec = ENG_PREC_FP32;
    cr_assert_eq(precision ? eng_precision_parse(precision, &prec) : 0, 0, "%s", fs_errmsg());
    eng_model_config_t cfg = {.name = name, .cache = g->cache,
                              .device = {ENG_DEVICE_CUDA, 0}, .precision = prec,
                              .host_cache = host_caches ? g->host_cache : NULL,
                              .staging = host_caches ? g->staging : NULL,
                              .no_cuda_graphs = !graphs};
    eng_model_t *m = NULL;
    int rc = eng_model_load(path, &cfg, &m);
    cr_assert_eq(rc, 0, "loading %s: %s (run make to build the demo models)", path, fs_errmsg());
    return m;
}

/* Input 0 of m at `batch`, filled from a fixed-seed generator. */
static eng_tensor_t *input_make(eng_model_t *m, int64_t batch, unsigned seed)
{
    eng_io_info_t info;
    cr_assert_eq(eng_model_input(m, 0, &info), 0);
    eng_shape_t shape = {.rank = info.rank};
    for (int d = 0; d < info.rank; d++)
        shape.dims[d] = info.dims[d] < 0 ? batch : info.dims[d];
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &shape, &t), 0);
    float *x = t->data;
    unsigned s = seed;
    for (int64_t i = 0; i < eng_shape_numel(&shape); i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return t;
}

static eng_tensor_t *run1(eng_model_t *m, const eng_tensor_t *in)
{
    eng_tensor_t *out[4] = {NULL};
    int rc = eng_model_run(m, in, 1, out);
    cr_assert_eq(rc, 0, "run: %s", fs_errmsg());
    for (size_t j = 1; j < eng_model_n_outputs(m); j++)
        eng_tensor_free(out[j]);
    return out[0];
}

Test(cuda_engine, a_device_oom_fails_that_run_only)
{
    eng_memory_t g;
    /* The mlp's weights and cuBLAS's workspace fit; a 200000-row batch's
     * activations (about 150 MiB) do not. */
    gpu_open(&g, (size_t)64 << 20);
    eng_model_t *m = gpu_load(&g, "mlp", NULL, true, true);
    eng_tensor_t *big = input_make(m, 200000, 1), *small = input_make(m, 8, 2);
    eng_tensor_t *out[1] = {NULL};
    int rc = eng_model_run(m, big, 1, out);
    cr_expect_eq(rc, FS_ENOMEM, "the oversized batch: %s (%s)", fs_errname(rc), fs_errmsg());
    cr_expect_null(out[0]);
    cr_expect(strstr(fs_errmsg(), "limit") || strstr(fs_errmsg(), "memory"),
              "the message says why: %s", fs_errmsg());
    eng_tensor_t *y = run1(m, small);
    cr_expect_eq(y->shape.dims[0], 8);
    eng_tensor_free(y);
    eng_tensor_free(big);
    eng_tensor_free(small);
    eng_model_destroy(m);
    gpu_close(&g);
}

Test(cuda_engine, graph_replay_gives_the_bits_of_plain_launches)
{
    static const char *const names[] = {"mlp", "cnn", "transformer"};
    eng_memory_t g;
    gpu_open(&g, 0);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        eng_model_t *with = gpu_load(&g, names[k], NULL, true, true);
        eng_model_t *without = gpu_load(&g, names[k], NULL, false, true);
        eng_tensor_t *in = input_make(with, 8, 3 + (unsigned)k);
        eng_tensor_t *ref = run1(without, in);
        /* Run 1 launches, run 2 captures, runs 3 and 4 replay. */
        for (int r = 0; r < 4; r++) {
            eng_tensor_t *y = run1(with, in);
            cr_expect(eng_shape_equal(&y->shape, &ref->shape));
            cr_expect(memcmp(y->data, ref->data, eng_tensor_bytes(ref)) == 0,
                      "%s run %d differs from launch-by-launch", names[k], r + 1);
            eng_tensor_free(y);
        }
        eng_tensor_free(ref);
        eng_tensor_free(in);
        eng_model_destroy(with);
        eng_model_destroy(without);
    }
    gpu_close(&g);
}

Test(cuda_engine, runs_without_host_or_staging_caches)
{
    eng_memory_t g;
    gpu_open(&g, 0);
    eng_model_t *bare = gpu_load(&g, "cnn", NULL, true, false);
    eng_model_t *staged = gpu_load(&g, "cnn", NULL, true, true);
    eng_tensor_t *in = input_make(bare, 5, 7);
    eng_tensor_t *a = run1(bare, in), *b = run1(staged, in);
    cr_expect(memcmp(a->data, b->data, eng_tensor_bytes(a)) == 0,
              "pageable and pinned copies give different results");
    eng_tensor_free(a);
    eng_tensor_free(b);
    eng_tensor_free(in);
    eng_model_destroy(bare);
    eng_model_destroy(staged);
    gpu_close(&g);
}

static int64_t staging_allocated(const eng_memory_t *g)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(g->staging, &st);
    return st.allocated.current;
}

/* An output comes back in pinned memory from the staging cache, held
 * while the caller holds the tensor and given back by eng_tensor_free
 * (even after its model is gone); with the staging cache too small for
 * it, it is malloc'd and holds the same values. */
Test(cuda_engine, outputs_land_in_pinned_memory_until_freed)
{
    eng_memory_t g, tight;
    gpu_open(&g, 0);
    alloc_cache_config_t dev = {.name = "cuda:0"}, pinned = {.name = "pinned",
                                                            .max_reserved_bytes = 1};
    eng_device_t cuda0 = {ENG_DEVICE_CUDA, 0};
    cr_assert_eq(eng_memory_open_with(&cuda0, &dev, &pinned, NULL, &tight), 0, "%s",
                 fs_errmsg());
    eng_model_t *m = gpu_load(&g, "cnn", NULL, true, true);
    eng_model_t *t = gpu_load(&tight, "cnn", NULL, true, true);
    eng_tensor_t *in = input_make(m, 6, 5);
    eng_tensor_t *a = run1(m, in);
    cr_expect_geq(staging_allocated(&g), (int64_t)eng_tensor_bytes(a),
                  "the output is not in the staging cache");
    eng_tensor_t *b = run1(t, in);
    cr_expect_eq(staging_allocated(&tight), 0, "a full staging cache still lent the output");
    cr_expect(memcmp(a->data, b->data, eng_tensor_bytes(a)) == 0,
              "pinned and malloc'd outputs differ");
    /* An input that is a pinned block itself goes to the device from
     * where it is, with the same result. */
    eng_tensor_t *pin = NULL;
    cr_assert_eq(eng_tensor_alloc_cached(g.staging, ALLOC_OWNER_SERVER, in->dtype, &in->shape,
                                         &pin), 0, "%s", fs_errmsg());
    memcpy(pin->data, in->data, eng_tensor_bytes(in));
    eng_tensor_t *c = run1(m, pin);
    cr_expect(memcmp(a->data, c->data, eng_tensor_bytes(a)) == 0,
              "a pinned input gives another result");
    eng_tensor_free(c);
    eng_tensor_free(pin);
    eng_model_destroy(m);
    eng_model_destroy(t);
    eng_tensor_free(a);
    eng_tensor_free(b);
    cr_expect_eq(staging_allocated(&g), 0, "freeing the output gave nothing back");
    eng_tensor_free(in);
    gpu_close(&tight);
    gpu_close(&g);
}

typedef struct worker {
    eng_model_t *m;
    const eng_tensor_t *in;
    const eng_tensor_t *ref;
    int mismatches, errors;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    for (int i = 0; i < 20; i++) {
        eng_tensor_t *out[1] = {NULL};
        if (eng_model_run(w->m, w->in, 1, out) != 0) {
            w->errors++;
            continue;
        }
        if (memcmp(out[0]->data, w->ref->data, eng_tensor_bytes(w->ref)) != 0)
            w->mismatches++;
        eng_tensor_free(out[0]);
    }
    return NULL;
}

Test(cuda_engine, several_threads_may_run_one_model)
{
    eng_memory_t g;
    gpu_open(&g, 0);
    eng_model_t *m = gpu_load(&g, "transformer", NULL, true, true);
    enum { N = 4 };
    eng_tensor_t *in[N], *ref[N];
    worker_t w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        /* Different batch sizes: different plans, run concurrently. */
        in[i] = input_make(m, 1 + 3 * i, 11 + (unsigned)i);
        ref[i] = run1(m, in[i]);
        w[i] = (worker_t){.m = m, .in = in[i], .ref = ref[i]};
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(w[i].errors, 0, "thread %d: %d runs failed", i, w[i].errors);
        cr_expect_eq(w[i].mismatches, 0, "thread %d: %d results differ", i, w[i].mismatches);
        eng_tensor_free(in[i]);
        eng_tensor_free(ref[i]);
    }
    eng_model_destroy(m);
    gpu_close(&g);
}

Test(cuda_engine, tf32_stays_close_to_fp32)
{
    eng_memory_t g;
    gpu_open(&g, 0);
    eng_model_t *fp32 = gpu_load(&g, "transformer", "fp32", true, true);
    eng_model_t *tf32 = gpu_load(&g, "transformer", "tf32", true, true);
    eng_tensor_t *in = input_make(fp32, 8, 21);
    eng_tensor_t *a = run1(fp32, in), *b = run1(tf32, in);
    double num = 0, den = 0;
    const float *x = a->data, *y = b->data;
    for (int64_t i = 0; i < eng_shape_numel(&a->shape); i++) {
        num += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    cr_log_info("transformer batch 8: tf32 vs fp32 relative L2 error %.3g", rel);
    cr_expect(rel < 1e-2 && rel == rel, "tf32 vs fp32 relative L2 error %g", rel);
    eng_tensor_free(a);
    eng_tensor_free(b);
    eng_tensor_free(in);
    eng_model_destroy(fp32);
    eng_model_destroy(tf32);
    gpu_close(&g);
}

Test(cuda_engine, a_missing_gpu_or_cpu_build_is_a_clear_error)
{
    /* Runs everywhere: with no GPU (or no CUDA in the build) the load fails
     * with a message, never a crash; with one, cuda:1023 does not exist. */
    alloc_provider_t *host = NULL;
    alloc_cache_t *cache = NULL;
    cr_assert_eq(alloc_provider_host_create(&host), 0);
    cr_assert_eq(alloc_cache_create(host, NULL, &cache), 0);
    eng_model_config_t cfg = {.name = "mlp", .cache = cache, .device = {ENG_DEVICE_CUDA, 1023}};
    eng_model_t *m = NULL;
    int rc = eng_model_load("models/mlp/1/model.onnx", &cfg, &m);
    cr_expect(rc == FS_ENODEV || rc == FS_ENOTSUP, "got %s: %s", fs_errname(rc), fs_errmsg());
    cr_expect_null(m);
    cr_expect(strlen(fs_errmsg()) > 10, "a message: %s", fs_errmsg());
    alloc_cache_destroy(cache);
    alloc_provider_destroy(host);
}
