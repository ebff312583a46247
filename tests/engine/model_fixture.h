/* model_fixture.h -- a model over a fresh host cache for the engine's model
 * suites, and the end-of-test check that destroying it returned every byte.
 * Header-only. */
#ifndef FS_TESTS_ENGINE_MODEL_FIXTURE_H
#define FS_TESTS_ENGINE_MODEL_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "engine/plan.h"

typedef struct model_fixture {
    alloc_provider_t *host;
    alloc_cache_t *cache;
    eng_model_t *model;
} model_fixture_t;

/* The provider and the cache; the caller loads f->model from them. */
static inline void model_fixture_cache(model_fixture_t *f)
{
    cr_assert_eq(alloc_provider_host_create(&f->host), 0);
    cr_assert_eq(alloc_cache_create(f->host, NULL, &f->cache), 0);
    f->model = NULL;
}

/* The graph of the zoo's export `name` (tests/zoo/<name>/model.onnx; run
 * from the repository root), loaded and its constants folded, with its
 * done flags in *done, for tests of a load-time rewrite on real exports.
 * The caller frees *done and destroys the graph. */
static inline eng_graph_t *model_fixture_zoo_graph(const char *name, bool **done)
{
    char path[256];
    snprintf(path, sizeof path, "tests/zoo/%s/model.onnx", name);
    FILE *fp = fopen(path, "rb");
    cr_assert(fp, "%s: not found (run from the repository root)", path);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *data = malloc((size_t)size);
    cr_assert(data);
    cr_assert_eq(fread(data, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    eng_graph_t *g = NULL;
    cr_assert_eq(eng_graph_load(data, (size_t)size, NULL, NULL, &g), 0, "%s: %s", name,
                 fs_errmsg());
    free(data);
    *done = calloc(g->n_nodes + 1, sizeof **done);
    cr_assert(*done);
    cr_assert_eq(eng_fold_constants(g, NULL, *done), 0, "fold: %s", fs_errmsg());
    return g;
}

/* The cache, and f->model loaded from the ONNX bytes over it (the test
 * fails when it does not load). */
static inline void model_fixture_load_bytes(model_fixture_t *f, const void *bytes, size_t len)
{
    model_fixture_cache(f);
    eng_model_config_t cfg = {.cache = f->cache};
    cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &f->model), 0, "load: %s",
                 fs_errmsg());
}

/* Destroys the model and checks every byte came back: nothing allocated,
 * nothing reserved once the cache is emptied. */
static inline void model_fixture_close(model_fixture_t *f)
{
    eng_model_destroy(f->model);
    alloc_cache_stats_t st;
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.allocated.current, 0, "allocated after destroy: %lld",
                 (long long)st.allocated.current);
    alloc_cache_empty(f->cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats(f->cache, &st);
    cr_expect_eq(st.reserved.current, 0, "reserved after empty: %lld",
                 (long long)st.reserved.current);
    alloc_cache_destroy(f->cache);
    alloc_provider_destroy(f->host);
}

/* Plans graph g (its load-time passes run, `done` their result) for
 * `ins` on the CPU over a fresh cache in f: eng_plan_build's result, the
 * plan in *p (destroy it, then close f with model_fixture_close). */
static inline int model_fixture_plan(model_fixture_t *f, const eng_graph_t *g, const bool *done,
                                     const eng_tensor_t *ins, size_t n_in, eng_plan_t **p)
{
    model_fixture_cache(f);
    eng_plan_env_t env = {.graph = g, .node_done = done,
                          .backend = eng_backend_get(ENG_DEVICE_CPU), .cache = f->cache,
                          .n_threads = 1, .host_cache = f->cache,
                          .max_loop_iterations = ENG_LOOP_ITERATIONS_DEFAULT};
    *p = NULL;
    return eng_plan_build(&env, ins, n_in, p);
}

/* model_fixture_plan, asserted, and the plan run: the outputs in out[]
 * (caller frees each, then closes f with model_fixture_close). For tests
 * of a pass that rewrites a graph outside eng_model_load. */
static inline void model_fixture_plan_run(model_fixture_t *f, const eng_graph_t *g,
                                          const bool *done, const eng_tensor_t *ins, size_t n_in,
                                          eng_tensor_t **out)
{
    eng_plan_t *p = NULL;
    cr_assert_eq(model_fixture_plan(f, g, done, ins, n_in, &p), 0, "plan: %s", fs_errmsg());
    cr_assert_eq(eng_plan_run(p, NULL, ins, n_in, out), 0, "run: %s", fs_errmsg());
    eng_plan_destroy(p);
}

#endif
