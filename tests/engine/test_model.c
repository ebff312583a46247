/* test_model.c -- tests of engine/model.c, plan*.c and exec.c through the
 * public API, on the demo models that tools/make_models writes (make builds
 * them into models/ before the tests run). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/policy.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model_fixture.h"

#define MLP_PATH "models/mlp/1/model.onnx"
#define CNN_PATH "models/cnn/1/model.onnx"
#define TRANSFORMER_PATH "models/transformer/1/model.onnx"

static void fixture_open(model_fixture_t *f, const char *path, size_t max_plans)
{
    model_fixture_cache(f);
    eng_model_config_t cfg = {.cache = f->cache, .max_plans = max_plans};
    int rc = eng_model_load(path, &cfg, &f->model);
    cr_assert_eq(rc, 0, "loading %s: %s", path, fs_errmsg());
}

/* A float input of `shape` filled with a deterministic pattern. */
static eng_tensor_t *input_new(const eng_shape_t *shape)
{
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, shape, &t), 0);
    float *x = t->data;
    for (int64_t i = 0; i < eng_shape_numel(shape); i++)
        x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    return t;
}

/* Runs the model on `in` and checks each row of the [b, 10] output is a
 * probability distribution. */
static void run_and_check_probabilities(eng_model_t *m, const eng_tensor_t *in, int64_t batch)
{
    eng_tensor_t *out[1] = {NULL};
    int rc = eng_model_run(m, in, 1, out);
    cr_assert_eq(rc, 0, "run: %s", fs_errmsg());
    cr_assert_eq(out[0]->shape.rank, 2);
    cr_expect_eq(out[0]->shape.dims[0], batch);
    cr_expect_eq(out[0]->shape.dims[1], 10);
    const float *p = out[0]->data;
    for (int64_t b = 0; b < batch; b++) {
        double sum = 0;
        for (int k = 0; k < 10; k++) {
            cr_expect(p[b * 10 + k] >= 0.0f && p[b * 10 + k] <= 1.0f);
            sum += p[b * 10 + k];
        }
        cr_expect(fabs(sum - 1.0) < 1e-4, "row %lld sums to %f", (long long)b, sum);
    }
    eng_tensor_free(out[0]);
}

Test(engine_model, mlp_runs_at_several_batch_sizes_and_returns_every_byte)
{
    model_fixture_t f;
    fixture_open(&f, MLP_PATH, 0);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, eng_model_owner(f.model), &os), 0);
    size_t weights = (64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10) * sizeof(float);
    cr_expect_geq(os.requested.current, (int64_t)weights, "weights counted to the model");
    for (int64_t batch = 1; batch <= 64; batch *= 8) {
        eng_tensor_t *in = input_new(&(eng_shape_t){2, {batch, 64}});
        run_and_check_probabilities(f.model, in, batch);
        eng_tensor_free(in);
    }
    model_fixture_close(&f);
}

Test(engine_model, cnn_runs_and_its_plan_is_near_the_lower_bound)
{
    model_fixture_t f;
    fixture_open(&f, CNN_PATH, 0);
    eng_shape_t shape = {4, {8, 1, 28, 28}};
    eng_plan_info_t info;
    cr_assert_eq(eng_model_plan_info(f.model, &shape, 1, &info), 0, "%s", fs_errmsg());
    cr_expect(!info.dynamic);
    cr_expect_gt(info.activation_bytes, 0);
    cr_expect_leq((double)info.activation_bytes, 1.10 * (double)info.lower_bound_bytes,
                  "plan %zu bytes vs lower bound %zu", info.activation_bytes,
                  info.lower_bound_bytes);
    eng_tensor_t *in = input_new(&shape);
    run_and_check_probabilities(f.model, in, 8);
    eng_tensor_free(in);
    model_fixture_close(&f);
}

Test(engine_model, same_input_gives_the_same_output_across_plans)
{
    model_fixture_t f;
    fixture_open(&f, MLP_PATH, 1);
    eng_tensor_t *one = input_new(&(eng_shape_t){2, {1, 64}});
    eng_tensor_t *two = input_new(&(eng_shape_t){2, {2, 64}});
    eng_tensor_t *a[1], *b[1], *c[1];
    cr_assert_eq(eng_model_run(f.model, one, 1, a), 0, "%s", fs_errmsg());
    /* A bound of one plan: the second signature evicts the first. */
    cr_assert_eq(eng_model_run(f.model, two, 1, b), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_model_run(f.model, one, 1, c), 0, "%s", fs_errmsg());
    /* The same signature, planned again after eviction: bit for bit. */
    cr_expect_eq(memcmp(a[0]->data, c[0]->data, 10 * sizeof(float)), 0);
    /* Another batch size may take another BLAS kernel (GEMV-like for one
     * row), so row 0 agrees to rounding, not to the bit. */
    const float *pa = a[0]->data, *pb = b[0]->data;
    for (int k = 0; k < 10; k++)
        cr_expect(fabsf(pa[k] - pb[k]) <= 1e-6f + 1e-5f * fabsf(pa[k]),
                  "row 0, class %d: %g at batch 1, %g at batch 2", k, pa[k], pb[k]);
    eng_tensor_free(a[0]);
    eng_tensor_free(b[0]);
    eng_tensor_free(c[0]);
    eng_tensor_free(one);
    eng_tensor_free(two);
    model_fixture_close(&f);
}

Test(engine_model, runs_from_the_arena_policy_block)
{
    model_fixture_t f;
    fixture_open(&f, MLP_PATH, 0);
    alloc_policy_t *arena = NULL;
    cr_assert_eq(alloc_policy_create(ALLOC_POLICY_ARENA, NULL, &arena), 0);
    cr_assert_eq(alloc_cache_policy_add(f.cache, arena), 0);
    eng_tensor_t *in = input_new(&(eng_shape_t){2, {16, 64}});
    run_and_check_probabilities(f.model, in, 16);
    alloc_policy_stats_t ps;
    alloc_policy_stats(arena, &ps);
    cr_expect_eq(ps.n_batches, 1, "the run took its activations from one arena");
    eng_tensor_free(in);
    model_fixture_close(&f);
}

Test(engine_model, rejects_wrong_inputs_with_a_message_naming_them)
{
    model_fixture_t f;
    fixture_open(&f, MLP_PATH, 0);
    eng_tensor_t *out[1] = {NULL};
    eng_tensor_t *bad = input_new(&(eng_shape_t){2, {2, 63}});
    cr_expect_eq(eng_model_run(f.model, bad, 1, out), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input") && strstr(fs_errmsg(), "[2,63]"), "%s", fs_errmsg());
    eng_tensor_free(bad);
    eng_tensor_t *ints = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_INT64, &(eng_shape_t){2, {2, 64}}, &ints), 0);
    cr_expect_eq(eng_model_run(f.model, ints, 1, out), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "int64"), "%s", fs_errmsg());
    eng_tensor_free(ints);
    cr_expect_null(out[0]);
    model_fixture_close(&f);
}

Test(engine_model, missing_and_corrupt_files_fail_cleanly)
{
    alloc_provider_t *host = NULL;
    alloc_cache_t *cache = NULL;
    cr_assert_eq(alloc_provider_host_create(&host), 0);
    cr_assert_eq(alloc_cache_create(host, NULL, &cache), 0);
    eng_model_config_t cfg = {.cache = cache};
    eng_model_t *m = NULL;
    cr_expect_eq(eng_model_load("models/no-such-model.onnx", &cfg, &m), FS_ENOENT);
    const char junk[] = "this is not a protobuf at all \xff\xff\xff\xff";
    int rc = eng_model_load_bytes(junk, sizeof junk, NULL, &cfg, &m);
    cr_expect_eq(rc, FS_EPARSE, "rc %d: %s", rc, fs_errmsg());
    cr_expect_null(m);
    alloc_cache_stats_t st;
    alloc_cache_stats(cache, &st);
    cr_expect_eq(st.allocated.current, 0);
    alloc_cache_destroy(cache);
    alloc_provider_destroy(host);
}

/* Four threads run one model at once, each on its own batch size (so plans
 * are built, shared and evicted concurrently); every output matches the
 * single-threaded one. */
typedef struct run_job {
    eng_model_t *model;
    int64_t batch;
    const float *want; /* [batch, 10] */
    int failures;
} run_job_t;

static void *run_many(void *arg)
{
    run_job_t *job = arg;
    eng_tensor_t *in = NULL;
    eng_shape_t shape = {2, {job->batch, 64}};
    if (eng_tensor_alloc_host(ENG_DT_FLOAT, &shape, &in) != 0) {
        job->failures++;
        return NULL;
    }
    for (int64_t i = 0; i < job->batch * 64; i++)
        ((float *)in->data)[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int r = 0; r < 200; r++) {
        eng_tensor_t *out[1] = {NULL};
        if (eng_model_run(job->model, in, 1, out) != 0 ||
            memcmp(out[0]->data, job->want, (size_t)job->batch * 10 * sizeof(float)) != 0)
            job->failures++;
        eng_tensor_free(out[0]);
    }
    eng_tensor_free(in);
    return NULL;
}

Test(engine_model, runs_from_several_threads_at_once)
{
    model_fixture_t f;
    fixture_open(&f, MLP_PATH, 2); /* a bound below the four signatures */
    run_job_t jobs[4];
    eng_tensor_t *refs[4];
    for (int j = 0; j < 4; j++) {
        int64_t batch = 1 + 3 * j;
        eng_tensor_t *in = input_new(&(eng_shape_t){2, {batch, 64}});
        eng_tensor_t *out[1];
        cr_assert_eq(eng_model_run(f.model, in, 1, out), 0, "%s", fs_errmsg());
        refs[j] = out[0];
        eng_tensor_free(in);
        jobs[j] = (run_job_t){.model = f.model, .batch = batch, .want = refs[j]->data};
    }
    pthread_t th[4];
    for (int j = 0; j < 4; j++)
        cr_assert_eq(pthread_create(&th[j], NULL, run_many, &jobs[j]), 0);
    for (int j = 0; j < 4; j++) {
        pthread_join(th[j], NULL);
        cr_expect_eq(jobs[j].failures, 0, "thread %d (batch %lld): %d bad runs", j,
                     (long long)jobs[j].batch, jobs[j].failures);
        eng_tensor_free(refs[j]);
    }
    model_fixture_close(&f);
}

/* The encoder block: samples of a batch do not mix (sample 0 of a batch of
 * three equals the batch-of-one output to rounding), outputs are finite,
 * and the plan sits at its lower bound's 1.10. */
Test(engine_model, transformer_block_keeps_samples_apart)
{
    model_fixture_t f;
    fixture_open(&f, TRANSFORMER_PATH, 0);
    eng_tensor_t *one = input_new(&(eng_shape_t){3, {1, 64, 64}});
    eng_tensor_t *three = input_new(&(eng_shape_t){3, {3, 64, 64}});
    /* Samples 1 and 2 differ from sample 0. */
    for (int64_t i = 64 * 64; i < 3 * 64 * 64; i++)
        ((float *)three->data)[i] = (float)((i * 13) % 97) / 97.0f - 0.3f;
    eng_tensor_t *a[1], *b[1];
    cr_assert_eq(eng_model_run(f.model, one, 1, a), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_model_run(f.model, three, 1, b), 0, "%s", fs_errmsg());
    cr_expect_eq(b[0]->shape.rank, 3);
    cr_expect_eq(b[0]->shape.dims[0], 3);
    const float *pa = a[0]->data, *pb = b[0]->data;
    int bad = 0;
    for (int64_t i = 0; i < 64 * 64; i++)
        bad += !(fabsf(pa[i] - pb[i]) <= 1e-4f + 1e-4f * fabsf(pa[i]));
    cr_expect_eq(bad, 0, "%d elements of sample 0 depend on the other samples", bad);
    for (int64_t i = 0; i < 3 * 64 * 64; i++)
        if (!isfinite(pb[i])) {
            cr_expect(false, "hidden[%lld] is %g", (long long)i, pb[i]);
            break;
        }
    eng_plan_info_t info;
    eng_shape_t shape = {3, {3, 64, 64}};
    cr_assert_eq(eng_model_plan_info(f.model, &shape, 1, &info), 0);
    cr_expect_leq((double)info.activation_bytes, 1.10 * (double)info.lower_bound_bytes);
    eng_tensor_free(a[0]);
    eng_tensor_free(b[0]);
    eng_tensor_free(one);
    eng_tensor_free(three);
    model_fixture_close(&f);
}

/* ---- the encoder: batch and seq both symbolic --------------------------------------- */

#define ENCODER_PATH "models/encoder/1/model.onnx"
#define ENCODER_D 64

/* Runs the encoder on [batch, seq, 64] input `in`; returns the output
 * after checking it has the input's shape and only finite values. */
static eng_tensor_t *encoder_run(eng_model_t *m, const eng_tensor_t *in)
{
    eng_tensor_t *out[1] = {NULL};
    int rc = eng_model_run(m, in, 1, out);
    cr_assert_eq(rc, 0, "encoder at [%lld,%lld,64]: %s", (long long)in->shape.dims[0],
                 (long long)in->shape.dims[1], fs_errmsg());
    cr_assert(eng_shape_equal(&out[0]->shape, &in->shape), "hidden is [%lld,%lld,%lld]",
              (long long)out[0]->shape.dims[0], (long long)out[0]->shape.dims[1],
              (long long)out[0]->shape.dims[2]);
    const float *y = out[0]->data;
    for (int64_t i = 0; i < eng_shape_numel(&out[0]->shape); i++)
        if (!isfinite(y[i]))
            cr_assert(false, "hidden[%lld] is %g", (long long)i, y[i]);
    return out[0];
}

Test(engine_encoder, declares_batch_and_seq_symbolic)
{
    model_fixture_t f;
    fixture_open(&f, ENCODER_PATH, 0);
    eng_io_info_t io[2];
    cr_assert_eq(eng_model_input(f.model, 0, &io[0]), 0);
    cr_assert_eq(eng_model_output(f.model, 0, &io[1]), 0);
    cr_expect_str_eq(io[0].name, "embeddings");
    cr_expect_str_eq(io[1].name, "hidden");
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(io[k].rank, 3);
        cr_expect_eq(io[k].dims[0], -1);
        cr_expect_eq(io[k].dims[1], -1);
        cr_expect_eq(io[k].dims[2], ENCODER_D);
        cr_expect_str_eq(io[k].dim_params[0], "batch");
        cr_expect_str_eq(io[k].dim_params[1], "seq");
    }
    model_fixture_close(&f);
}

/* The Reshape targets copy batch and seq ([0, 0, 4, 16], [0, 0, 64]), so
 * any seq runs, the short, the odd and the longest of the trace. */
Test(engine_encoder, runs_at_any_seq_and_returns_the_input_shape)
{
    model_fixture_t f;
    fixture_open(&f, ENCODER_PATH, 0);
    static const int64_t shapes[][2] = {{1, 16}, {3, 37}, {2, 512}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        eng_tensor_t *in = input_new(&(eng_shape_t){3, {shapes[k][0], shapes[k][1], ENCODER_D}});
        eng_tensor_t *out = encoder_run(f.model, in);
        eng_tensor_free(out);
        eng_tensor_free(in);
    }
    model_fixture_close(&f);
}

/* Each sample of a batch of three equals that sample run alone, bit for
 * bit: the CPU GEMM is batch-invariant (engine/cpu/gemm.h), and LayerNorm
 * and Softmax work row by row. */
Test(engine_encoder, samples_of_a_batch_equal_each_sample_run_alone)
{
    model_fixture_t f;
    fixture_open(&f, ENCODER_PATH, 0);
    enum { BATCH = 3, SEQ = 37 };
    const size_t sample = (size_t)SEQ * ENCODER_D;
    eng_tensor_t *three = input_new(&(eng_shape_t){3, {BATCH, SEQ, ENCODER_D}});
    eng_tensor_t *all = encoder_run(f.model, three);
    for (int b = 0; b < BATCH; b++) {
        eng_tensor_t *one = input_new(&(eng_shape_t){3, {1, SEQ, ENCODER_D}});
        memcpy(one->data, (const float *)three->data + b * sample, sample * sizeof(float));
        eng_tensor_t *alone = encoder_run(f.model, one);
        cr_expect_eq(memcmp(alone->data, (const float *)all->data + b * sample,
                            sample * sizeof(float)), 0,
                     "sample %d of the batch differs from the same sample run alone", b);
        if (b > 0)
            cr_expect_neq(memcmp(alone->data, all->data, sample * sizeof(float)), 0,
                          "samples 0 and %d have distinct inputs but equal outputs", b);
        eng_tensor_free(alone);
        eng_tensor_free(one);
    }
    eng_tensor_free(all);
    eng_tensor_free(three);
    model_fixture_close(&f);
}

/* Every (batch, seq) has its own static plan, sized for that seq (the
 * [batch, 4, seq, seq] scores dominate), each within 1.10 of its lower
 * bound; none falls back to per-tensor (dynamic) allocation. */
Test(engine_encoder, another_seq_gets_another_plan)
{
    model_fixture_t f;
    fixture_open(&f, ENCODER_PATH, 0);
    static const int64_t seqs[] = {16, 37, 512};
    eng_plan_info_t info[3];
    for (int k = 0; k < 3; k++) {
        eng_shape_t shape = {3, {2, seqs[k], ENCODER_D}};
        cr_assert_eq(eng_model_plan_info(f.model, &shape, 1, &info[k]), 0, "seq %lld: %s",
                     (long long)seqs[k], fs_errmsg());
        cr_expect(!info[k].dynamic, "seq %lld: dynamic plan", (long long)seqs[k]);
        cr_expect_leq((double)info[k].activation_bytes, 1.10 * (double)info[k].lower_bound_bytes,
                      "seq %lld: plan %zu bytes vs lower bound %zu", (long long)seqs[k],
                      info[k].activation_bytes, info[k].lower_bound_bytes);
        /* At least the scores of one block: [2, 4, seq, seq] floats. */
        cr_expect_geq(info[k].activation_bytes,
                      (size_t)(2 * 4 * seqs[k] * seqs[k]) * sizeof(float));
    }
    cr_expect_lt(info[0].activation_bytes, info[1].activation_bytes);
    cr_expect_lt(info[1].activation_bytes, info[2].activation_bytes);
    cr_expect_eq(info[0].n_steps, info[2].n_steps, "the same graph at every seq");
    model_fixture_close(&f);
}
