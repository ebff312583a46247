/* model.c -- a loaded model: its graph and weights under its own owner
 * tags, constants folded once, and an LRU of plans by input signature.
 *
 * On a GPU ("cuda:N") the model also owns its instance state (stream,
 * cuBLAS handle; engine/cuda/cuda.h). The loader reads weights into host
 * memory (the host cache, or the C heap) and folds constants there; then
 * every constant is copied once to the device under the model's owner, and
 * only the host copies that shape inference may read are kept (integer
 * tensors up to MODEL_HOST_INT_MAX bytes, anything up to
 * MODEL_HOST_ANY_MAX): a large float weight lives on the device only. Runs
 * of one instance are serialised (one stream, one cuBLAS handle); the
 * server gets concurrency from batching and from instances. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/cuda/cuda.h"
#include "engine/engine.h"
#include "engine/half.h"
#include "engine/plan.h"

#define MODEL_DEFAULT_MAX_PLANS 16
#define MODEL_HOST_INT_MAX ((size_t)64 << 10)
#define MODEL_HOST_ANY_MAX ((size_t)1 << 10)

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
    /* Device models. */
    eng_device_kind_t device;
    int device_index;
    char device_name[16];         /* "cpu", "cuda:N" */
    eng_cuda_t *cuda;
    void **dev_const;             /* per value: a constant's device copy */
    alloc_cache_t *host_cache;    /* borrowed; NULL: the C heap */
    alloc_owner_t host_owner;
    alloc_cache_t *staging;       /* borrowed; may be NULL */
    alloc_owner_t staging_owner;
    pthread_mutex_t run_lock;     /* one run at a time on the stream */
    void *workspace;              /* cuBLAS's, from the cache: working memory, counted
                                   * to the activations owner */
    eng_dtype_t lowp;             /* fp16/bf16 precision: the weights' dtype */
    eng_dtype_t *dev_dtype;       /* per value: a constant's device dtype, if not its own */
    bool cuda_graphs;
};

/* Weights come from the cache under the model's owner (on the CPU), or
 * from host memory to be copied to the device (host cache or heap). */
static void *weight_alloc(void *user, size_t bytes)
{
    eng_model_t *m = user;
    void *p = NULL;
    if (m->device != ENG_DEVICE_CPU && !m->host_cache)
        return malloc(bytes ? bytes : 1);
    alloc_cache_t *c = m->device != ENG_DEVICE_CPU ? m->host_cache : m->cache;
    alloc_owner_t o = m->device != ENG_DEVICE_CPU ? m->host_owner : m->owner;
    return alloc_cache_alloc(c, bytes, 0, o, &p) == 0 ? p : NULL;
}

static void weight_free(void *user, void *ptr)
{
    eng_model_t *m = user;
    if (m->device != ENG_DEVICE_CPU && !m->host_cache)
        free(ptr);
    else
        alloc_cache_free(m->device != ENG_DEVICE_CPU ? m->host_cache : m->cache, ptr);
}

/* The cache must hold the memory the device computes on. */
static int check_cache_device(const eng_model_t *m)
{
    const alloc_provider_t *pv = alloc_cache_provider(m->cache);
    bool is_dev = alloc_provider_is_device(pv);
    if (m->device == ENG_DEVICE_CPU && is_dev)
        return fs_err(FS_EINVAL, "model '%s' runs on the CPU but its cache holds %s memory",
                      m->name, alloc_provider_name(pv));
    if (m->device == ENG_DEVICE_CPU)
        return 0;
    const char *at = is_dev ? strstr(alloc_provider_name(pv), "cuda:") : NULL;
    char *end = NULL;
    long idx = at ? strtol(at + 5, &end, 10) : -1;
    if (!is_dev || idx != m->device_index)
        return fs_err(FS_EINVAL, "model '%s' runs on %s but its cache holds %s memory", m->name,
                      m->device_name, alloc_provider_name(pv));
    return 0;
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
    if (m->dev_const) {
        for (size_t i = 0; i < m->graph->n_values; i++)
            alloc_cache_free(m->cache, m->dev_const[i]);
        free(m->dev_const);
    }
    free(m->dev_dtype);
    alloc_cache_free(m->cache, m->workspace);
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
    if (m->staging && m->staging_owner != ALLOC_OWNER_SERVER &&
        alloc_cache_owner_destroy(m->staging, m->staging_owner) != 0)
        FS_LOG_E("engine", "model '%s' destroyed without returning its staging memory: %s",
                 m->name, fs_errmsg());
    if (m->host_cache && m->host_owner != ALLOC_OWNER_SERVER &&
        alloc_cache_owner_destroy(m->host_cache, m->host_owner) != 0)
        FS_LOG_E("engine", "model '%s' destroyed without returning all its host memory: %s",
                 m->name, fs_errmsg());
#if FS_HAVE_CUDA
    if (m->cuda) {
        /* The cache must never fence a destroyed stream. */
        alloc_stream_t stream = (alloc_stream_t)eng_cuda_stream(m->cuda);
        if (eng_cuda_sync(m->cuda) != 0)
            FS_LOG_E("engine", "model '%s': %s", m->name, fs_errmsg());
        alloc_cache_stream_retire(m->cache, stream);
        if (m->staging)
            alloc_cache_stream_retire(m->staging, stream);
    }
    eng_cuda_destroy(m->cuda);
#endif
    pthread_mutex_destroy(&m->run_lock);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Frees the data of every constant no node left to run reads and no graph
 * output is: the inputs of nodes folded at load (a BatchNormalization's
 * parameters once it is folded into its Conv, a weight transposed at load).
 * The value stays a constant without data, which nothing reads. */
static void release_dead_constants(eng_model_t *m, const eng_weight_alloc_t *wa)
{
    eng_graph_t *g = m->graph;
    bool *live = calloc(g->n_values ? g->n_values : 1, sizeof *live);
    if (!live)
        return; /* keeping them is correct, only larger */
    for (size_t n = 0; n < g->n_nodes; n++)
        for (int k = 0; !m->node_done[n] && k < g->nodes[n].n_inputs; k++)
            if (g->nodes[n].inputs[k] >= 0)
                live[g->nodes[n].inputs[k]] = true;
    for (size_t v = 0; v < g->n_values; v++) {
        eng_value_t *val = &g->values[v];
        if (val->kind != ENG_VALUE_CONST || live[v] || val->is_output || !val->constant.data)
            continue;
        eng_weights_free(wa, val->constant.data);
        val->constant.data = NULL;
    }
    free(live);
}

#if FS_HAVE_CUDA
/* Whether constant v is read only as a GEMM weight (MatMul's, Gemm's,
 * Conv's or ConvTranspose's input 1) by nodes that run, and is float32 and
 * no graph output: the values fp16/bf16 precision stores in that dtype. */
static bool gemm_weight_only(const eng_model_t *m, int v)
{
    static const char *const gemm_ops[] = {"MatMul", "Gemm", "Conv", "ConvTranspose"};
    const eng_graph_t *g = m->graph;
    if (g->values[v].constant.dtype != ENG_DT_FLOAT || g->values[v].is_output)
        return false;
    int readers = 0;
    for (size_t n = 0; n < g->n_nodes; n++) {
        if (m->node_done[n])
            continue;
        const eng_node_t *node = &g->nodes[n];
        for (int k = 0; k < node->n_inputs; k++) {
            if (node->inputs[k] != v)
                continue;
            bool ok = false;
            for (size_t o = 0; o < sizeof gemm_ops / sizeof gemm_ops[0] && !ok; o++)
                ok = k == 1 && strcmp(node->op_type, gemm_ops[o]) == 0;
            if (!ok)
                return false;
            readers++;
        }
    }
    return readers > 0;
}

/* Copies constant v to the device in the model's low precision, converted
 * on the host (round to nearest even, as the Cast kernel does), so the
 * device never holds its float32 copy. */
static int upload_lowp(eng_model_t *m, int v, alloc_stream_t stream)
{
    const eng_tensor_t *t = &m->graph->values[v].constant;
    size_t n = (size_t)eng_shape_numel(&t->shape);
    uint16_t *h = weight_alloc(m, n ? 2 * n : 1);
    if (!h)
        return fs_err(FS_ENOMEM, "model '%s': out of host memory converting a weight to %s",
                      m->name, eng_dtype_name(m->lowp));
    const float *x = t->data;
    for (size_t i = 0; i < n; i++)
        h[i] = m->lowp == ENG_DT_FLOAT16 ? eng_float_to_half(x[i]) : eng_float_to_bf16(x[i]);
    int rc = alloc_cache_alloc(m->cache, n ? 2 * n : 1, stream, m->owner, &m->dev_const[v]);
    /* A copy from pageable memory has read it by the time it returns. */
    if (rc == 0)
        rc = eng_cuda_copy_h2d(m->cuda, m->dev_const[v], h, 2 * n);
    if (rc == 0)
        m->dev_dtype[v] = m->lowp;
    weight_free(m, h);
    return rc;
}
#endif

/* Device models: every constant to the device once, under the model's
 * owner; host copies kept only where shape inference may read them. With
 * fp16/bf16 precision a GEMM weight is stored only in that dtype. */
static int upload_constants(eng_model_t *m)
{
#if FS_HAVE_CUDA
    eng_graph_t *g = m->graph;
    if (!(m->dev_const = calloc(g->n_values ? g->n_values : 1, sizeof *m->dev_const)))
        return fs_err(FS_ENOMEM, "out of host memory loading a model");
    alloc_stream_t stream = (alloc_stream_t)eng_cuda_stream(m->cuda);
    int rc = eng_cuda_bind(m->cuda);
    if (rc == 0)
        rc = alloc_cache_alloc_flags(m->cache, ENG_CUDA_WORKSPACE_BYTES, stream, m->act_owner,
                                     ALLOC_F_OWN_SEGMENT, &m->workspace);
    if (rc == 0)
        rc = eng_cuda_set_workspace(m->cuda, m->workspace, ENG_CUDA_WORKSPACE_BYTES);
    if (rc == 0 && m->lowp != ENG_DT_UNDEFINED &&
        !(m->dev_dtype = calloc(g->n_values ? g->n_values : 1, sizeof *m->dev_dtype)))
        rc = fs_err(FS_ENOMEM, "out of host memory loading a model");
    for (size_t i = 0; i < g->n_values && rc == 0; i++) {
        eng_value_t *v = &g->values[i];
        if (v->kind != ENG_VALUE_CONST || !v->constant.data)
            continue; /* released: nothing reads it */
        size_t bytes = eng_tensor_bytes(&v->constant);
        if (m->dev_dtype && gemm_weight_only(m, (int)i)) {
            rc = upload_lowp(m, (int)i, stream);
            continue;
        }
        rc = alloc_cache_alloc(m->cache, bytes ? bytes : 1, stream, m->owner, &m->dev_const[i]);
        if (rc == 0)
            rc = eng_cuda_copy_h2d(m->cuda, m->dev_const[i], v->constant.data, bytes);
    }
    /* The copies read host memory that is about to be freed. */
    if (rc == 0)
        rc = eng_cuda_sync(m->cuda);
    for (size_t i = 0; i < g->n_values && rc == 0; i++) {
        eng_value_t *v = &g->values[i];
        if (v->kind != ENG_VALUE_CONST || !v->constant.data)
            continue;
        size_t bytes = eng_tensor_bytes(&v->constant);
        bool is_int = v->constant.dtype == ENG_DT_INT64 || v->constant.dtype == ENG_DT_INT32;
        if (bytes <= MODEL_HOST_ANY_MAX || (is_int && bytes <= MODEL_HOST_INT_MAX))
            continue;
        weight_free(m, v->constant.data);
        v->constant.data = NULL;
    }
    return rc;
#else
    return fs_err(FS_ENOTSUP, "model '%s': this build of flatserve has no CUDA support", m->name);
#endif
}

/* Device models: the instance state, and the host owner. */
static int device_setup(eng_model_t *m, const eng_model_config_t *cfg)
{
    if (m->device == ENG_DEVICE_CPU) {
        if (cfg->precision && strcmp(cfg->precision, "fp32") != 0)
            return fs_err(FS_ENOTSUP, "model '%s': precision '%s' needs a CUDA device (the "
                          "CPU computes in fp32)", m->name, cfg->precision);
        return 0;
    }
#if FS_HAVE_CUDA
    eng_precision_t prec = ENG_PREC_FP32;
    int rc = cfg->precision ? eng_precision_parse(cfg->precision, &prec) : 0;
    if (rc != 0)
        return rc;
    m->lowp = prec == ENG_PREC_FP16 ? ENG_DT_FLOAT16
              : prec == ENG_PREC_BF16 ? ENG_DT_BFLOAT16
                                      : ENG_DT_UNDEFINED;
    if ((rc = eng_cuda_create(m->device_index, prec, &m->cuda)) != 0)
        return rc;
    char sub[ALLOC_OWNER_NAME_MAX];
    if (m->host_cache) {
        snprintf(sub, sizeof sub, "%.*s/host", ALLOC_OWNER_NAME_MAX - 6, m->name);
        rc = alloc_cache_owner_create(m->host_cache, sub, &m->host_owner);
    }
    if (rc == 0 && m->staging) {
        snprintf(sub, sizeof sub, "%.*s/staging", ALLOC_OWNER_NAME_MAX - 9, m->name);
        rc = alloc_cache_owner_create(m->staging, sub, &m->staging_owner);
    }
    return rc;
#else
    return fs_err(FS_ENOTSUP, "model '%s' asks for device %s: this build of flatserve has no "
                  "CUDA support (build with CUDA=1)", m->name, m->device_name);
#endif
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
    pthread_mutex_init(&m->run_lock, NULL);
    snprintf(m->name, sizeof m->name, "%s", cfg->name && cfg->name[0] ? cfg->name : "model");
    m->cache = cfg->cache;
    m->max_plans = cfg->max_plans ? cfg->max_plans : MODEL_DEFAULT_MAX_PLANS;
    m->n_threads = cfg->n_threads > 0 ? cfg->n_threads : 1;
    m->owner = m->act_owner = m->host_owner = m->staging_owner = ALLOC_OWNER_SERVER;

    int rc = eng_device_parse(cfg->device, &m->device, &m->device_index);
    if (m->device == ENG_DEVICE_CPU)
        snprintf(m->device_name, sizeof m->device_name, "cpu");
    else
        snprintf(m->device_name, sizeof m->device_name, "cuda:%d", m->device_index);
    if (m->device != ENG_DEVICE_CPU) {
        m->host_cache = cfg->host_cache;
        m->staging = cfg->staging;
        m->cuda_graphs = !cfg->no_cuda_graphs;
    }
    /* The device first: a missing one is FS_ENODEV, not a cache mismatch. */
    if (rc == 0)
        rc = device_setup(m, cfg);
    if (rc == 0)
        rc = check_cache_device(m);

    char act_name[ALLOC_OWNER_NAME_MAX];
    snprintf(act_name, sizeof act_name, "%.*s/activations", ALLOC_OWNER_NAME_MAX - 13, m->name);
    if (rc == 0)
        rc = alloc_cache_owner_create(m->cache, m->name, &m->owner);
    if (rc == 0)
        rc = alloc_cache_owner_create(m->cache, act_name, &m->act_owner);
    eng_weight_alloc_t wa = {.alloc = weight_alloc, .free = weight_free, .user = m};
    if (rc == 0)
        rc = eng_graph_load(data, len, dir, &wa, &m->graph);
    if (rc == 0 && !(m->node_done = calloc(m->graph->n_nodes + 1, sizeof *m->node_done)))
        rc = fs_err(FS_ENOMEM, "out of host memory loading a model");
    if (rc == 0)
        rc = eng_fold_constants(m->graph, &wa, m->node_done);
    if (rc == 0)
        rc = eng_fuse_conv_bn(m->graph, &wa, m->node_done);
    if (rc == 0)
        rc = eng_fuse_gelu(m->graph, m->node_done);
    if (rc == 0)
        release_dead_constants(m, &wa);
    if (rc == 0 && m->device != ENG_DEVICE_CPU)
        rc = upload_constants(m);
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
                              .n_threads = m->n_threads, .device = m->device,
                              .cuda = m->cuda, .dev_const = m->dev_const,
                              .host_cache = m->host_cache, .host_owner = m->host_owner,
                              .staging = m->staging, .staging_owner = m->staging_owner,
                              .dev_dtype = m->dev_dtype,
                              .cuda_graphs = m->cuda_graphs};
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
    if (m->device != ENG_DEVICE_CPU)
        pthread_mutex_lock(&m->run_lock);
    rc = eng_plan_run(e->plan, inputs, n_inputs, outputs);
    if (m->device != ENG_DEVICE_CPU)
        pthread_mutex_unlock(&m->run_lock);
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

int eng_model_input(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    if (i >= m->graph->n_inputs)
        return fs_err(FS_EINVAL, "model '%s' has %zu inputs, not %zu", m->name,
                      m->graph->n_inputs, i + 1);
    eng_value_io_info(&m->graph->values[m->graph->inputs[i]], out);
    return 0;
}

int eng_model_output(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    if (i >= m->graph->n_outputs)
        return fs_err(FS_EINVAL, "model '%s' has %zu outputs, not %zu", m->name,
                      m->graph->n_outputs, i + 1);
    eng_value_io_info(&m->graph->values[m->graph->outputs[i]], out);
    return 0;
}

char *eng_io_info_format(const eng_io_info_t *io, char *buf, size_t len)
{
    if (io->rank < 0) {
        snprintf(buf, len, "(any shape)");
        return buf;
    }
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < io->rank && at < len; d++) {
        const char *sep = d ? "," : "";
        if (io->dims[d] >= 0)
            at += (size_t)snprintf(buf + at, len - at, "%s%lld", sep, (long long)io->dims[d]);
        else
            at += (size_t)snprintf(buf + at, len - at, "%s%s", sep,
                                   io->dim_params[d] ? io->dim_params[d] : "?");
    }
    if (at < len)
        snprintf(buf + at, len - at, "]");
    return buf;
}

alloc_owner_t eng_model_owner(const eng_model_t *m)
{
    return m->owner;
}

alloc_owner_t eng_model_activation_owner(const eng_model_t *m)
{
    return m->act_owner;
}

alloc_cache_t *eng_model_cache(const eng_model_t *m)
{
    return m->cache;
}

const char *eng_model_name(const eng_model_t *m)
{
    return m->name;
}

const char *eng_model_device(const eng_model_t *m)
{
    return m->device_name;
}
