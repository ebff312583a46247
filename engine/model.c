/* model.c -- a loaded model: its graph and weights under its own owner
 * tags, constants folded once, and an LRU of plans by input signature. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "engine/plan.h"

#define MODEL_DEFAULT_MAX_PLANS 16

/* A cached plan; `users` counts runs in progress, so eviction never frees a
 * plan being executed. */
typedef struct plan_entry {
    struct plan_entry *prev, *next; /* most recently used first */
    eng_plan_t *plan;
    int users;
} plan_entry_t;

struct eng_model {
    char name[ALLOC_OWNER_NAME_MAX];
    alloc_cache_t *cache;         /* borrowed */
    alloc_owner_t owner;          /* weights, folded constants, plan constants */
    alloc_owner_t act_owner;      /* activations */
    eng_graph_t *graph;
    bool *node_done;              /* folded at load */
    int n_threads;
    pthread_mutex_t lock;         /* guards the plan list */
    plan_entry_t *plans;
    size_t n_plans, max_plans;
};

/* Weights come from the cache under the model's owner. */
static void *weight_alloc(void *user, size_t bytes)
{
    eng_model_t *m = user;
    void *p = NULL;
    return alloc_cache_alloc(m->cache, bytes, 0, m->owner, &p) == 0 ? p : NULL;
}

static void weight_free(void *user, void *ptr)
{
    eng_model_t *m = user;
    alloc_cache_free(m->cache, ptr);
}

static void plans_clear(eng_model_t *m)
{
    while (m->plans) {
        plan_entry_t *e = m->plans;
        m->plans = e->next;
        eng_plan_destroy(e->plan);
        free(e);
    }
    m->n_plans = 0;
}

void eng_model_destroy(eng_model_t *m)
{
    if (!m)
        return;
    plans_clear(m);
    eng_graph_destroy(m->graph);
    free(m->node_done);
    alloc_owner_t owners[2] = {m->owner, m->act_owner};
    for (int i = 0; i < 2; i++) {
        if (owners[i] == ALLOC_OWNER_SERVER)
            continue;
        if (alloc_cache_owner_destroy(m->cache, owners[i]) != 0)
            FS_LOG_E("engine", "model '%s' destroyed without returning all its memory: %s",
                     m->name, fs_errmsg());
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

int eng_model_load_bytes(const void *data, size_t len, const char *dir,
                         const eng_model_config_t *cfg, eng_model_t **out)
{
    if (!cfg || !cfg->cache)
        return fs_err(FS_EINVAL, "eng_model_load: a cache is required");
    eng_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return fs_err(FS_ENOMEM, "out of host memory loading a model");
    pthread_mutex_init(&m->lock, NULL);
    snprintf(m->name, sizeof m->name, "%s", cfg->name && cfg->name[0] ? cfg->name : "model");
    m->cache = cfg->cache;
    m->max_plans = cfg->max_plans ? cfg->max_plans : MODEL_DEFAULT_MAX_PLANS;
    m->n_threads = cfg->n_threads > 0 ? cfg->n_threads : 1;
    m->owner = m->act_owner = ALLOC_OWNER_SERVER;

    char act_name[ALLOC_OWNER_NAME_MAX];
    snprintf(act_name, sizeof act_name, "%.*s/activations", ALLOC_OWNER_NAME_MAX - 13, m->name);
    int rc = alloc_cache_owner_create(m->cache, m->name, &m->owner);
    if (rc == 0)
        rc = alloc_cache_owner_create(m->cache, act_name, &m->act_owner);
    eng_weight_alloc_t wa = {.alloc = weight_alloc, .free = weight_free, .user = m};
    if (rc == 0)
        rc = eng_graph_load(data, len, dir, &wa, &m->graph);
    if (rc == 0 && !(m->node_done = calloc(m->graph->n_nodes + 1, sizeof *m->node_done)))
        rc = fs_err(FS_ENOMEM, "out of host memory loading a model");
    if (rc == 0)
        rc = eng_fold_constants(m->graph, &wa, m->node_done);
    if (rc != 0) {
        int keep = rc;
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        eng_model_destroy(m);
        return fs_err(keep, "%s", msg);
    }
    *out = m;
    return 0;
}

int eng_model_load(const char *path, const eng_model_config_t *cfg, eng_model_t **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fs_err(errno == ENOENT ? FS_ENOENT : FS_EIO, "model file '%s': %s", path,
                      strerror(errno));
    void *data = NULL;
    long size = -1;
    int rc = 0;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        rc = fs_err(FS_EIO, "model file '%s': cannot find its size", path);
    else if (!(data = malloc(size ? (size_t)size : 1)))
        rc = fs_err(FS_ENOMEM, "model file '%s': out of host memory for %ld bytes", path, size);
    else if (fread(data, 1, (size_t)size, f) != (size_t)size)
        rc = fs_err(FS_EIO, "model file '%s': read failed", path);
    fclose(f);
    if (rc == 0) {
        /* The directory holds external data; the file name is the default name. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        const char *base = slash ? slash + 1 : path;
        char name[ALLOC_OWNER_NAME_MAX];
        snprintf(name, sizeof name, "%s", base);
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        eng_model_config_t c = *cfg;
        if (!c.name)
            c.name = name;
        rc = eng_model_load_bytes(data, (size_t)size, dir, &c, out);
    }
    free(data);
    return rc;
}

/* Finds or builds the plan for `inputs`, moving it to the front and taking a
 * use. Builds under the lock: first requests of a new shape queue behind one
 * planner rather than planning the same signature twice. */
static int plan_acquire(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                        plan_entry_t **out)
{
    pthread_mutex_lock(&m->lock);
    plan_entry_t *e = m->plans;
    while (e && !eng_plan_matches(e->plan, inputs, n_inputs))
        e = e->next;
    int rc = 0;
    if (!e) {
        eng_plan_env_t env = {.graph = m->graph, .node_done = m->node_done, .cache = m->cache,
                              .const_owner = m->owner, .act_owner = m->act_owner,
                              .n_threads = m->n_threads};
        eng_plan_t *plan = NULL;
        rc = eng_plan_build(&env, inputs, n_inputs, &plan);
        if (rc == 0 && !(e = calloc(1, sizeof *e))) {
            eng_plan_destroy(plan);
            rc = fs_err(FS_ENOMEM, "out of host memory caching a plan");
        }
        if (rc == 0) {
            e->plan = plan;
            m->n_plans++;
        }
    } else {
        /* unlink to move to the front */
        if (e->prev)
            e->prev->next = e->next;
        else
            m->plans = e->next;
        if (e->next)
            e->next->prev = e->prev;
    }
    if (rc == 0) {
        e->prev = NULL;
        e->next = m->plans;
        if (m->plans)
            m->plans->prev = e;
        m->plans = e;
        e->users++;
        /* Evict least recently used idle plans over the bound; plans in use
         * stay (the bound is exceeded until they are released and a later
         * acquire comes by). */
        plan_entry_t *t = m->plans;
        while (t->next)
            t = t->next;
        while (m->n_plans > m->max_plans && t) {
            plan_entry_t *prev = t->prev;
            if (t->users == 0) {
                if (t->prev)
                    t->prev->next = t->next;
                else
                    m->plans = t->next;
                if (t->next)
                    t->next->prev = t->prev;
                eng_plan_destroy(t->plan);
                free(t);
                m->n_plans--;
            }
            t = prev;
        }
        *out = e;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static void plan_release(eng_model_t *m, plan_entry_t *e)
{
    pthread_mutex_lock(&m->lock);
    e->users--;
    pthread_mutex_unlock(&m->lock);
}

int eng_model_run(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                  eng_tensor_t **outputs)
{
    plan_entry_t *e = NULL;
    int rc = plan_acquire(m, inputs, n_inputs, &e);
    if (rc != 0)
        return rc;
    rc = eng_plan_run(e->plan, inputs, n_inputs, outputs);
    plan_release(m, e);
    return rc;
}

int eng_model_plan_info(eng_model_t *m, const eng_shape_t *input_shapes, size_t n_inputs,
                        eng_plan_info_t *out)
{
    if (n_inputs != m->graph->n_inputs)
        return fs_err(FS_EINVAL, "the model takes %zu inputs, %zu given", m->graph->n_inputs,
                      n_inputs);
    eng_tensor_t *ins = calloc(n_inputs ? n_inputs : 1, sizeof *ins);
    if (!ins)
        return fs_err(FS_ENOMEM, "out of host memory");
    for (size_t i = 0; i < n_inputs; i++) {
        ins[i].dtype = m->graph->values[m->graph->inputs[i]].dtype;
        ins[i].shape = input_shapes[i];
    }
    plan_entry_t *e = NULL;
    int rc = plan_acquire(m, ins, n_inputs, &e);
    if (rc == 0) {
        eng_plan_info(e->plan, out);
        plan_release(m, e);
    }
    free(ins);
    return rc;
}

size_t eng_model_n_inputs(const eng_model_t *m)
{
    return m->graph->n_inputs;
}

size_t eng_model_n_outputs(const eng_model_t *m)
{
    return m->graph->n_outputs;
}

static void io_info(const eng_value_t *v, eng_io_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->rank = v->rank;
    for (int d = 0; d < v->rank && d < ENG_MAX_RANK; d++) {
        out->dims[d] = v->dims[d].value;
        out->dim_params[d] = v->dims[d].param;
    }
}

int eng_model_input(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    if (i >= m->graph->n_inputs)
        return fs_err(FS_EINVAL, "model '%s' has %zu inputs, not %zu", m->name,
                      m->graph->n_inputs, i + 1);
    io_info(&m->graph->values[m->graph->inputs[i]], out);
    return 0;
}

int eng_model_output(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    if (i >= m->graph->n_outputs)
        return fs_err(FS_EINVAL, "model '%s' has %zu outputs, not %zu", m->name,
                      m->graph->n_outputs, i + 1);
    io_info(&m->graph->values[m->graph->outputs[i]], out);
    return 0;
}

alloc_owner_t eng_model_owner(const eng_model_t *m)
{
    return m->owner;
}

const char *eng_model_name(const eng_model_t *m)
{
    return m->name;
}
