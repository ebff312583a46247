/* registry_fixture.h -- a registry over a temporary model repository on the
 * CPU for the registry and batcher suites: the repository (demo models
 * copied in, small models built in memory), requests that a test can wait
 * for, and the end-of-test check that every byte came back. Header-only. */
#ifndef FS_TESTS_ENGINE_REGISTRY_FIXTURE_H
#define FS_TESTS_ENGINE_REGISTRY_FIXTURE_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/cache.h"
#include "common/clock.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/registry.h"
#include "onnx_build.h"

typedef struct reg_fixture {
    char repo[64];
    eng_memory_t mem;
    eng_registry_t *reg;
    eng_serve_options_t opts;   /* what the options callback returns for every model */
    int opts_error;             /* nonzero: the callback fails with it */
} reg_fixture_t;

static int reg_fixture_options(void *user, const char *name, const char *model_dir,
                               eng_serve_options_t *out)
{
    reg_fixture_t *f = user;
    (void)model_dir;
    if (f->opts_error)
        return fs_err(f->opts_error, "%s/config.json: \"max_batch_size\" must be a number", name);
    *out = f->opts;
    return 0;
}

/* Batching options most tests use: up to 64 rows, 2 ms delay. */
static inline eng_serve_options_t reg_batching(uint32_t max_batch, uint64_t delay_ns)
{
    eng_serve_options_t o;
    memset(&o, 0, sizeof o);
    o.max_batch_size = max_batch;
    o.max_queue_delay_ns = delay_ns;
    o.instances = 1;
    return o;
}

static inline void reg_mkdir(const char *path)
{
    cr_assert(mkdir(path, 0755) == 0 || (errno == EEXIST), "mkdir %s", path);
}

/* Writes REPO/name/version/model.onnx from bytes (version < 0: only the
 * model directory; data NULL: only the version directory). */
static inline void repo_write(reg_fixture_t *f, const char *name, int version, const void *data,
                              size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", f->repo, name);
    reg_mkdir(path);
    if (version < 0)
        return;
    snprintf(path, sizeof path, "%s/%s/%d", f->repo, name, version);
    reg_mkdir(path);
    if (!data)
        return;
    snprintf(path, sizeof path, "%s/%s/%d/model.onnx", f->repo, name, version);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp, "open %s", path);
    cr_assert_eq(fwrite(data, 1, len, fp), len);
    cr_assert_eq(fclose(fp), 0);
}

/* Copies a demo model (models/<src>/1/model.onnx) to REPO/name/version. */
static inline void repo_copy(reg_fixture_t *f, const char *src, const char *name, int version)
{
    char path[256];
    snprintf(path, sizeof path, "models/%s/1/model.onnx", src);
    FILE *fp = fopen(path, "rb");
    cr_assert(fp, "%s is missing: run make first", path);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *buf = malloc((size_t)size);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    repo_write(f, name, version, buf, (size_t)size);
    free(buf);
}

/* y = x + x for `n_inputs` float inputs x0, x1, ... of one shape (dims < 0
 * take the symbols in params) summed into "y" of the same shape. */
static inline void repo_add_model(reg_fixture_t *f, const char *name, int version, int rank,
                                  const int64_t *dims, const char *const *params, int n_inputs)
{
    mb_t b;
    mb_init(&b, 8, 17);
    char names[64] = "";
    for (int i = 0; i < n_inputs; i++) {
        char in[16];
        snprintf(in, sizeof in, "x%d", i);
        mb_input(&b, in, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims, params);
        strcat(names, i ? "," : "");
        strcat(names, in);
    }
    if (n_inputs == 1)
        mb_node(&b, "Add", "add", "x0,x0", "y");
    else
        mb_node(&b, "Add", "add", names, "y");
    b.outputs[b.graph.n_output++] =
        mb_vi(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims, params);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    repo_write(f, name, version, bytes, len);
    mb_free(&b);
}

/* The repository, the CPU memory (its cache configured by `cache_cfg`, may
 * be NULL) and the registry. */
static inline void reg_fixture_open_with(reg_fixture_t *f, const alloc_cache_config_t *cache_cfg)
{
    memset(f, 0, sizeof *f);
    snprintf(f->repo, sizeof f->repo, "/tmp/flatserve-registry-XXXXXX");
    cr_assert(mkdtemp(f->repo), "mkdtemp");
    cr_assert_eq(eng_memory_open(NULL, cache_cfg, &f->mem), 0, "%s", fs_errmsg());
    f->opts = reg_batching(64, 2000000);
    eng_registry_config_t cfg = {
        .repository = f->repo,
        .device_memory = {&f->mem},
        .cpu_memory = &f->mem,
        .options = reg_fixture_options,
        .options_user = f,
    };
    cr_assert_eq(eng_registry_create(&cfg, &f->reg), 0, "%s", fs_errmsg());
}

static inline void reg_fixture_open(reg_fixture_t *f)
{
    reg_fixture_open_with(f, NULL);
}

static int reg_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Destroys the registry and checks every byte came back. */
static inline void reg_fixture_close(reg_fixture_t *f)
{
    eng_registry_destroy(f->reg);
    alloc_cache_stats_t st;
    alloc_cache_stats(f->mem.cache, &st);
    cr_expect_eq(st.allocated.current, 0, "allocated after registry destroy: %lld",
                 (long long)st.allocated.current);
    alloc_cache_empty(f->mem.cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats(f->mem.cache, &st);
    cr_expect_eq(st.reserved.current, 0, "reserved after empty: %lld",
                 (long long)st.reserved.current);
    eng_memory_close(&f->mem);
    nftw(f->repo, reg_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- requests a test waits for ------------------------------------------------ */

#define TREQ_MAX_INPUTS 2

typedef struct treq {
    eng_request_t req;
    eng_tensor_t in[TREQ_MAX_INPUTS];
    pthread_mutex_t m;
    pthread_cond_t c;
    int done_calls;
    pthread_t done_thread;      /* the thread its done ran on (the last time) */
} treq_t;

static void treq_done(eng_request_t *r)
{
    treq_t *t = r->user;
    pthread_mutex_lock(&t->m);
    t->done_calls++;
    t->done_thread = pthread_self();
    pthread_cond_broadcast(&t->c);
    pthread_mutex_unlock(&t->m);
}

/* A request of n float inputs of `shape`, filled from `seed`. */
static inline void treq_init(treq_t *t, int n, const eng_shape_t *shape, int seed)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->c, NULL);
    int64_t numel = eng_shape_numel(shape);
    for (int i = 0; i < n; i++) {
        t->in[i].dtype = ENG_DT_FLOAT;
        t->in[i].shape = *shape;
        float *x = malloc((size_t)(numel ? numel : 1) * sizeof *x);
        cr_assert(x);
        for (int64_t k = 0; k < numel; k++)
            x[k] = (float)((k * 37 + seed * 11 + i * 5) % 101) / 101.0f - 0.5f;
        t->in[i].data = x;
    }
    t->req.inputs = t->in;
    t->req.n_inputs = (size_t)n;
    t->req.done = treq_done;
    t->req.user = t;
}

static inline void treq_wait(treq_t *t)
{
    pthread_mutex_lock(&t->m);
    while (t->done_calls == 0)
        pthread_cond_wait(&t->c, &t->m);
    pthread_mutex_unlock(&t->m);
}

static inline void treq_fini(treq_t *t)
{
    eng_request_free_outputs(&t->req);
    for (int i = 0; i < TREQ_MAX_INPUTS; i++)
        free(t->in[i].data);
    pthread_cond_destroy(&t->c);
    pthread_mutex_destroy(&t->m);
}

/* Whether the request's outputs equal a direct run of its inputs, bit for
 * bit. */
static inline bool treq_matches_direct_run(treq_t *t, eng_model_t *m)
{
    size_t n_out = eng_model_n_outputs(m);
    eng_tensor_t *ref[4] = {NULL};
    if (n_out > 4 || eng_model_run(m, t->req.inputs, t->req.n_inputs, ref) != 0)
        return false;
    bool same = t->req.n_outputs == n_out;
    for (size_t j = 0; j < n_out; j++) {
        same = same && t->req.outputs[j] &&
               eng_shape_equal(&ref[j]->shape, &t->req.outputs[j]->shape) &&
               memcmp(ref[j]->data, t->req.outputs[j]->data, eng_tensor_bytes(ref[j])) == 0;
        eng_tensor_free(ref[j]);
    }
    return same;
}

#endif
