/* model.c -- a loaded model: its graph and weights under its own owner
 * tags, constants folded once, and an LRU of plans by input signature.
 *
 * The model runs on one device, through its backend table
 * (engine/backend.h), and owns its instance state there (on a GPU: a
 * stream and a cuBLAS handle). The loader reads weights into host memory
 * and folds constants there: on a host-memory device that is the model's
 * cache, and the weights are used where they are. On any other device the
 * host memory is the host cache (or the C heap), every constant is then
 * uploaded once under the model's owner, and only the host copies that
 * shape inference may read are kept (integer tensors up to
 * MODEL_HOST_INT_MAX bytes, anything up to MODEL_HOST_ANY_MAX): a large
 * float weight lives on the device only. Runs of one instance are
 * serialised (one stream, one library handle); the server gets concurrency
 * from batching and from instances. A device without instance state (the
 * CPU) runs any number at once. The libraries' workspace is the device's,
 * shared with the other models on it: a run leases a block of it
 * (engine/workspace.h says the rule). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include <bsd/sys/queue.h>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "engine/workspace.h"

#define MODEL_DEFAULT_MAX_PLANS 16
#define MODEL_HOST_INT_MAX ((size_t)64 << 10)
#define MODEL_HOST_ANY_MAX ((size_t)1 << 10)

/* A cached plan; `users` counts runs in progress, so eviction never frees a
 * plan being executed. `replay` is the plan's replay state on this
 * instance, used under run_lock. */
typedef struct plan_entry {
    TAILQ_ENTRY(plan_entry) lru;  /* most recently used first */
    eng_plan_t *plan;
    eng_plan_replay_t replay;
    int users;
} plan_entry_t;

TAILQ_HEAD(plan_list, plan_entry);

struct eng_model {
    char name[ALLOC_OWNER_NAME_MAX];
    alloc_cache_t *cache;         /* borrowed: the device's memory */
    alloc_owner_t owner;          /* weights, folded constants, plan constants */
    alloc_owner_t act_owner;      /* activations */
    eng_graph_t *graph;
    bool *node_done;              /* folded at load */
    int n_threads;
    pthread_mutex_t lock;         /* guards the plan list and place_hint */
    struct plan_list plans;
    size_t n_plans, max_plans;
    /* The order the last plan's memory placement won with: a new shape's
     * plan tries it first (alloc/plan.h), so that a stream of varied shapes
     * skips most of the planner's search. */
    alloc_plan_hint_t place_hint;
    eng_device_t device;
    char device_name[ENG_DEVICE_NAME_MAX]; /* "cpu", "cuda:N" */
    const eng_backend_i *be;
    void *inst;                   /* the backend's instance state, or NULL */
    pthread_mutex_t run_lock;     /* with an instance: one run at a time on it */
    /* Host memory for the loader's weights, plan-time values and the host
     * copies kept (load_cache NULL: the C heap): the cache itself under the
     * model's owner on a host-memory device, else the host cache. */
    alloc_cache_t *load_cache;
    alloc_owner_t load_owner;
    /* Devices without host memory. */
    void **dev_const;             /* per value: a constant's device copy */
    alloc_cache_t *host_cache;    /* borrowed; NULL: the C heap */
    alloc_owner_t host_owner;
    alloc_cache_t *staging;       /* borrowed; may be NULL */
    alloc_owner_t staging_owner;
    /* The device libraries' workspace: the pool of the cache's device
     * (engine/workspace.h), a block leased for each run; ws_bound is the
     * block the instance holds (the one its captured graphs recorded). */
    eng_workspace_t *ws;
    void *ws_bound;
    eng_dtype_t lowp;             /* fp16/bf16 precision: the graph's dtype (engine/lowp.c) */
    bool graphs;                  /* capture and replay static plans where the device can */
    int64_t max_loop_iterations;  /* engine.h; > 0 */
};

/* The loader's weights and every host copy come from the load cache. */
static void *weight_alloc(void *user, size_t bytes)
{
    eng_model_t *m = user;
    void *p = NULL;
    if (!m->load_cache) {
        p = malloc(bytes ? bytes : 1);
        if (!p)
            fs_err(FS_ENOMEM, "out of host memory for %zu bytes", bytes);
        return p;
    }
    return alloc_cache_alloc(m->load_cache, bytes, 0, m->load_owner, &p) == 0 ? p : NULL;
}

static void weight_free(void *user, void *ptr)
{
    eng_model_t *m = user;
    if (!m->load_cache)
        free(ptr);
    else
        alloc_cache_free(m->load_cache, ptr);
}

/* Whether provider name `pv` names device `dev` ("cuda:1" in "cuda:1",
 * "cuda_async:1" does not: the index must follow the device's own name). */
static bool provider_on_device(const char *pv, const char *dev)
{
    size_t n = strlen(dev);
    for (const char *at = strstr(pv, dev); at; at = strstr(at + 1, dev))
        if ((at == pv || at[-1] < 'a' || at[-1] > 'z') && (at[n] < '0' || at[n] > '9'))
            return true;
    return false;
}

/* Strings are host-only (engine/tensor.h): on a device that computes in
 * its own memory, FS_ENOTSUP naming the first string value, or the first
 * node that makes one (a Cast to string). A string value comes only from
 * a declared input or value, a constant (the loader refuses string
 * constants) or a Cast, so these two checks see every one. 0 on a host
 * device. */
static int check_no_strings(const eng_model_t *m)
{
    if (m->be->host_memory)
        return 0;
    const eng_graph_t *g = m->graph;
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].dtype == ENG_DT_STRING)
            return fs_err(FS_ENOTSUP, "tensor '%s' is a string (BYTES) tensor: strings run on "
                          "the CPU only; load this model with device cpu", g->values[v].name);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        const eng_attr_t *to = eng_node_attr(n, "to");
        if (n->domain[0] == '\0' && strcmp(n->op_type, "Cast") == 0 && to &&
            to->type == ENG_ATTR_INT && to->i == ENG_DT_STRING)
            return fs_err(FS_ENOTSUP, "node '%s' (Cast) makes string (BYTES) tensor '%s': "
                          "strings run on the CPU only; load this model with device cpu",
                          n->name, n->n_outputs > 0 && n->outputs[0] >= 0
                                       ? g->values[n->outputs[0]].name : "");
    }
    return 0;
}

/* The cache must hold the memory the device computes on. */
static int check_cache_device(const eng_model_t *m)
{
    const alloc_provider_t *pv = alloc_cache_provider(m->cache);
    bool is_dev = alloc_provider_is_device(pv);
    if (is_dev == m->be->host_memory ||
        (is_dev && !provider_on_device(alloc_provider_name(pv), m->device_name)))
        return fs_err(FS_EINVAL, "model '%s' runs on %s but its cache holds %s memory", m->name,
                      m->device_name, alloc_provider_name(pv));
    return 0;
}

static void plans_clear(eng_model_t *m)
{
    plan_entry_t *e;
    while ((e = TAILQ_FIRST(&m->plans))) {
        TAILQ_REMOVE(&m->plans, e, lru);
        eng_plan_replay_clear(e->plan, &e->replay);
        eng_plan_destroy(e->plan);
        free(e);
    }
    m->n_plans = 0;
}

/* Gives a sub-owner of the model's back, logging when bytes were left. */
static void owner_close(eng_model_t *m, alloc_cache_t *cache, alloc_owner_t owner,
                        const char *what)
{
    if (!cache || owner == ALLOC_OWNER_SERVER)
        return;
    if (alloc_cache_owner_destroy(cache, owner) != 0)
        FS_LOG_E("engine", "model '%s' destroyed without returning all its %s: %s", m->name,
                 what, fs_errmsg());
}

void eng_model_destroy(eng_model_t *m)
{
    if (!m)
        return;
    plans_clear(m);
    alloc_plan_hint_fini(&m->place_hint);
    if (m->dev_const) {
        for (size_t i = 0; i < m->graph->n_tree_values; i++)
            alloc_cache_free(m->cache, m->dev_const[i]);
        free(m->dev_const);
    }
    eng_graph_destroy(m->graph);
    free(m->node_done);
    owner_close(m, m->cache, m->owner, "memory");
    owner_close(m, m->cache, m->act_owner, "activation memory");
    owner_close(m, m->staging, m->staging_owner, "staging memory");
    owner_close(m, m->host_cache, m->host_owner, "host memory");
    if (m->inst) {
        /* The cache must never fence a destroyed stream. */
        alloc_stream_t stream = eng_backend_stream(m->be, m->inst);
        if (eng_backend_sync(m->be, m->inst) != 0)
            FS_LOG_E("engine", "model '%s': %s", m->name, fs_errmsg());
        alloc_cache_stream_retire(m->cache, stream);
        if (m->staging)
            alloc_cache_stream_retire(m->staging, stream);
    }
    eng_backend_instance_destroy(m->be, m->inst);
    /* After the sync: the last model's detach frees the blocks at once. */
    eng_workspace_detach(m->ws);
    pthread_mutex_destroy(&m->run_lock);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Frees the data of every constant no node left to run reads and no graph
 * output is: the inputs of nodes folded at load (a BatchNormalization's
 * parameters once it is folded into its Conv, a weight transposed at load),
 * an exporter's transposed copy of a weight the GEMM now reads in place.
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

/* Whether the host keeps constant v's copy beside its device copy: shape
 * inference may read it (small integer tensors, anything tiny). */
static bool host_copy_kept(const eng_value_t *v)
{
    size_t bytes = eng_tensor_bytes(&v->constant);
    bool is_int = v->constant.dtype == ENG_DT_INT64 || v->constant.dtype == ENG_DT_INT32;
    return bytes <= MODEL_HOST_ANY_MAX || (is_int && bytes <= MODEL_HOST_INT_MAX);
}

/* Uploads every constant of g and of its subgraphs (recursively) at its
 * number in the tree (graph.h: value_base). */
static int upload_graph(eng_model_t *m, const eng_graph_t *g)
{
    int rc = 0;
    for (size_t i = 0; i < g->n_values && rc == 0; i++) {
        const eng_value_t *v = &g->values[i];
        if (v->kind != ENG_VALUE_CONST || !v->constant.data)
            continue; /* released: nothing reads it */
        rc = eng_backend_upload(m->be, m->inst, m->cache, m->owner, v->constant.data,
                                eng_tensor_bytes(&v->constant), &m->dev_const[g->value_base + i]);
    }
    for (size_t n = 0; n < g->n_nodes && rc == 0; n++)
        for (int a = 0; a < g->nodes[n].n_attrs && rc == 0; a++)
            if (g->nodes[n].attrs[a].type == ENG_ATTR_GRAPH)
                rc = upload_graph(m, g->nodes[n].attrs[a].g);
    return rc;
}

/* Frees the host copies of g's constants (and its subgraphs') that shape
 * inference will not read, once they are on the device. */
static void drop_host_copies(eng_model_t *m, eng_graph_t *g)
{
    for (size_t i = 0; i < g->n_values; i++) {
        eng_value_t *v = &g->values[i];
        if (v->kind != ENG_VALUE_CONST || !v->constant.data || host_copy_kept(v))
            continue;
        weight_free(m, v->constant.data);
        v->constant.data = NULL;
    }
    for (size_t n = 0; n < g->n_nodes; n++)
        for (int a = 0; a < g->nodes[n].n_attrs; a++)
            if (g->nodes[n].attrs[a].type == ENG_ATTR_GRAPH)
                drop_host_copies(m, (eng_graph_t *)g->nodes[n].attrs[a].g);
}

/* Devices without host memory: the device's workspace pool joined, every constant
 * uploaded once under the model's owner (a subgraph's too), and host
 * copies kept only where shape inference may read them. */
static int upload_constants(eng_model_t *m)
{
    eng_graph_t *g = m->graph;
    size_t n_tree = g->n_tree_values ? g->n_tree_values : 1;
    if (!(m->dev_const = calloc(n_tree, sizeof *m->dev_const)))
        return fs_err(FS_ENOMEM, "out of host memory loading a model");
    int rc = eng_backend_bind(m->be, m->inst);
    size_t ws = eng_backend_workspace_bytes(m->be);
    if (rc == 0 && ws)
        rc = eng_workspace_attach(m->cache, m->device_name, ws, &m->ws);
    if (rc == 0)
        rc = upload_graph(m, g);
    /* The copies read host memory that is about to be freed. */
    if (rc == 0)
        rc = eng_backend_sync(m->be, m->inst);
    if (rc == 0)
        drop_host_copies(m, g);
    return rc;
}

/* The device's table, the model's instance there, and the memory the
 * loader and the copies use. */
static int device_setup(eng_model_t *m, const eng_model_config_t *cfg)
{
    if (!(m->be = eng_backend_get(m->device.kind)))
        return fs_err(FS_ENOTSUP, "model '%s' asks for device %s: this build of flatserve has no "
                      "support for it (CUDA: build with CUDA=1)", m->name, m->device_name);
    eng_precision_t prec = cfg->precision;
    int rc = 0;
    if (!eng_backend_supports(m->be, prec))
        return fs_err(FS_ENOTSUP, "model '%s': precision '%s' is not supported on %s (the CPU "
                      "computes in fp32; fp16, bf16 and tf32 need a CUDA device)", m->name,
                      eng_precision_name(prec), m->device_name);
    m->lowp = prec == ENG_PREC_FP16 ? ENG_DT_FLOAT16
              : prec == ENG_PREC_BF16 ? ENG_DT_BFLOAT16
                                      : ENG_DT_UNDEFINED;
    if ((rc = eng_backend_instance_create(m->be, &m->device, prec, &m->inst)) != 0)
        return rc;
    if (m->be->host_memory)
        return 0;
    m->host_cache = cfg->host_cache;
    m->staging = cfg->staging;
    m->graphs = !cfg->no_cuda_graphs;
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
    m->max_loop_iterations = cfg->max_loop_iterations > 0 ? cfg->max_loop_iterations
                                                          : ENG_LOOP_ITERATIONS_DEFAULT;
    m->owner = m->act_owner = m->host_owner = m->staging_owner = ALLOC_OWNER_SERVER;

    TAILQ_INIT(&m->plans);

    m->device = cfg->device;
    eng_device_name(&m->device, m->device_name, sizeof m->device_name);
    /* The device first: a missing one is FS_ENODEV, not a cache mismatch. */
    int rc = device_setup(m, cfg);
    if (rc == 0)
        rc = check_cache_device(m);

    char act_name[ALLOC_OWNER_NAME_MAX];
    snprintf(act_name, sizeof act_name, "%.*s/activations", ALLOC_OWNER_NAME_MAX - 13, m->name);
    if (rc == 0)
        rc = alloc_cache_owner_create(m->cache, m->name, &m->owner);
    if (rc == 0)
        rc = alloc_cache_owner_create(m->cache, act_name, &m->act_owner);
    if (rc == 0) {
        m->load_cache = m->be->host_memory ? m->cache : m->host_cache;
        m->load_owner = m->be->host_memory ? m->owner : m->host_owner;
    }
    eng_weight_alloc_t wa = {.alloc = weight_alloc, .free = weight_free, .user = m};
    if (rc == 0)
        rc = eng_graph_load(data, len, dir, &wa, &m->graph);
    if (rc == 0)
        rc = check_no_strings(m);
    if (rc == 0 && !(m->node_done = calloc(m->graph->n_nodes + 1, sizeof *m->node_done)))
        rc = fs_err(FS_ENOMEM, "out of host memory loading a model");
    /* Before folding: a Transpose of a weight read as a GEMM's B is read
     * in place rather than folded into a second copy. */
    if (rc == 0)
        rc = eng_fuse_transpose_into_gemm(m->graph, m->node_done);
    if (rc == 0)
        rc = eng_fold_constants(m->graph, &wa, m->node_done);
    if (rc == 0)
        rc = eng_fuse_transposed_twins(m->graph, m->node_done);
    if (rc == 0)
        rc = eng_fuse_conv_bn(m->graph, &wa, m->node_done);
    if (rc == 0)
        rc = eng_fuse_gelu(m->graph, m->node_done);
    if (rc == 0)
        rc = eng_fuse_rms_norm(m->graph, m->node_done);
    bool fuse_attn = m->be && !m->be->host_memory &&
                     (cfg->attention == ENG_ATTN_FUSION_FUSED ||
                      (cfg->attention == ENG_ATTN_FUSION_AUTO && m->be->fused_attention));
    if (rc == 0 && fuse_attn)
        rc = eng_fuse_attention(m->graph, m->node_done);
    if (rc == 0)
        rc = eng_fuse_gemm_epilogue(m->graph, m->node_done);
    if (rc == 0)
        release_dead_constants(m, &wa);
    if (rc == 0 && m->lowp != ENG_DT_UNDEFINED)
        rc = eng_lower_precision(m->graph, m->lowp, &wa, &m->node_done);
    /* After the lowering: its Transposes then move half-size values. */
    bool nhwc = cfg->conv_layout == ENG_CONV_LAYOUT_NHWC ||
                (cfg->conv_layout == ENG_CONV_LAYOUT_AUTO && m->be && m->be->channels_last);
    if (rc == 0 && nhwc)
        rc = eng_layout_channels_last(m->graph, &wa, &m->node_done);
    if (rc == 0 && nhwc)
        eng_layout_conv_algo(m->graph, cfg->conv);
    /* Last: the patterns above keep the ops they match, and the chains
     * are fused in the dtypes and layout that run. The constants folded
     * into its programs are then released. */
    if (rc == 0 && !cfg->no_elementwise_fusion)
        rc = eng_fuse_elementwise_chains(m->graph, m->node_done);
    if (rc == 0 && !cfg->no_elementwise_fusion)
        release_dead_constants(m, &wa);
    if (rc == 0 && !m->be->host_memory)
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
    plan_entry_t *e;
    TAILQ_FOREACH(e, &m->plans, lru)
        if (eng_plan_matches(e->plan, inputs, n_inputs))
            break;
    int rc = 0;
    if (e) {
        TAILQ_REMOVE(&m->plans, e, lru);
    } else {
        bool apart = !m->be->host_memory;
        eng_plan_env_t env = {.graph = m->graph, .node_done = m->node_done, .backend = m->be,
                              .instance = m->inst, .cache = m->cache, .const_owner = m->owner,
                              .act_owner = m->act_owner, .n_threads = m->n_threads,
                              .host_cache = m->load_cache, .host_owner = m->load_owner,
                              .dev_const = apart ? m->dev_const : NULL,
                              .staging = m->staging,
                              .staging_owner = m->staging_owner,
                              .max_loop_iterations = m->max_loop_iterations,
                              .place_hint = &m->place_hint};
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
    }
    if (rc == 0) {
        TAILQ_INSERT_HEAD(&m->plans, e, lru);
        e->users++;
        /* Evict least recently used idle plans over the bound; plans in use
         * stay (the bound is exceeded until they are released and a later
         * acquire comes by). */
        plan_entry_t *t, *prev;
        for (t = TAILQ_LAST(&m->plans, plan_list); t && m->n_plans > m->max_plans; t = prev) {
            prev = TAILQ_PREV(t, plan_list, lru);
            if (t->users != 0)
                continue;
            TAILQ_REMOVE(&m->plans, t, lru);
            eng_plan_replay_clear(t->plan, &t->replay);
            eng_plan_destroy(t->plan);
            free(t);
            m->n_plans--;
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

/* Leases a workspace block for one run and hands it to the instance
 * (run_lock held). Another block than the instance held means the graphs
 * captured on this instance recorded another address: they are dropped,
 * to be captured again. 0 and *out (give it back with
 * eng_workspace_release), or the lease's or the device's error with
 * nothing held. */
static int workspace_bind_locked(eng_model_t *m, void **out)
{
    void *ptr = NULL;
    int rc = eng_workspace_acquire(m->ws, m, &ptr);
    if (rc != 0 || ptr == m->ws_bound) {
        *out = ptr;
        return rc;
    }
    rc = eng_backend_set_workspace(m->be, m->inst, ptr, eng_workspace_block_bytes(m->ws));
    if (rc != 0) {
        eng_workspace_release(m->ws, ptr);
        return rc;
    }
    if (m->ws_bound) {
        pthread_mutex_lock(&m->lock);
        plan_entry_t *e;
        TAILQ_FOREACH(e, &m->plans, lru)
            eng_plan_replay_clear(e->plan, &e->replay);
        pthread_mutex_unlock(&m->lock);
    }
    m->ws_bound = ptr;
    *out = ptr;
    return 0;
}

int eng_model_run(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                  eng_tensor_t **outputs)
{
    plan_entry_t *e = NULL;
    int rc = plan_acquire(m, inputs, n_inputs, &e);
    if (rc != 0)
        return rc;
    /* An instance runs one plan at a time, and the replay state is only
     * touched under its lock. Without one (the CPU) runs go side by side.
     * The workspace block is held for the whole run, which ends
     * synchronised with the instance's stream. */
    void *ws = NULL;
    if (m->inst)
        pthread_mutex_lock(&m->run_lock);
    if (m->ws)
        rc = workspace_bind_locked(m, &ws);
    if (rc == 0)
        rc = eng_plan_run(e->plan, m->inst && m->graphs ? &e->replay : NULL, inputs, n_inputs,
                          outputs);
    if (ws)
        eng_workspace_release(m->ws, ws);
    if (m->inst)
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

/* Entry i of the graph's inputs or outputs (`ids`, n of them, `what`). */
static int io_at(const eng_model_t *m, const int *ids, size_t n, const char *what, size_t i,
                 eng_io_info_t *out)
{
    if (i >= n)
        return fs_err(FS_EINVAL, "model '%s' has %zu %s, not %zu", m->name, n, what, i + 1);
    eng_value_io_info(&m->graph->values[ids[i]], out);
    return 0;
}

int eng_model_input(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    return io_at(m, m->graph->inputs, m->graph->n_inputs, "inputs", i, out);
}

int eng_model_output(const eng_model_t *m, size_t i, eng_io_info_t *out)
{
    return io_at(m, m->graph->outputs, m->graph->n_outputs, "outputs", i, out);
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

size_t eng_device_workspace_bytes(alloc_cache_t *cache)
{
    return eng_workspace_bytes(cache);
}

const char *eng_model_name(const eng_model_t *m)
{
    return m->name;
}

const char *eng_model_device(const eng_model_t *m)
{
    return m->device_name;
}
