/* fuzz_onnx.c -- fuzz target "onnx": engine/onnx_load.c's eng_graph_load on
 * the bytes as a serialized ModelProto, with no directory for external
 * data (a model that names an external file is refused) and the weights
 * allocated from a CPU cache limited to 64 MiB.
 *
 * Checks: a refusal is one of the loader's documented codes (FS_EPARSE,
 * FS_ENOTSUP, FS_EINVAL, FS_EIO, FS_ENOMEM) with a message; a loaded graph
 * holds graph.h's invariants (indices in range, one value per name, nodes
 * in topological order, producers and consumer counts consistent, every
 * constant with data of its shape's bytes, read whole so that a short
 * buffer shows under ASan, every node with a resolved op), and so does
 * each subgraph, bound to its parent (every OUTER value bound once to a
 * parent value the node reads as an implicit input); destroying it
 * returns every weight byte to the cache. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "tests/fuzz/fuzz.h"

#define ONNX_CACHE_LIMIT_BYTES ((size_t)64 << 20)

typedef struct onnx_weights {
    alloc_cache_t *cache;
    alloc_owner_t owner;
} onnx_weights_t;

static void *weights_alloc(void *user, size_t bytes)
{
    onnx_weights_t *w = user;
    void *p = NULL;
    return alloc_cache_alloc(w->cache, bytes, 0, w->owner, &p) == 0 ? p : NULL;
}

static void weights_free(void *user, void *ptr)
{
    onnx_weights_t *w = user;
    alloc_cache_free(w->cache, ptr);
}

static int value_check(const eng_graph_t *g, size_t v)
{
    const eng_value_t *val = &g->values[v];
    if (!val->name)
        return fs_err(FS_ESTATE, "value %zu has no name", v);
    if (val->rank > ENG_MAX_RANK)
        return fs_err(FS_ESTATE, "value '%s' has rank %d", val->name, val->rank);
    if (val->kind == ENG_VALUE_CONST) {
        const eng_tensor_t *t = &val->constant;
        if (t->shape.rank < 0 || t->shape.rank > ENG_MAX_RANK)
            return fs_err(FS_ESTATE, "constant '%s' has rank %d", val->name, t->shape.rank);
        size_t bytes = eng_tensor_bytes(t);
        if (!t->data)
            return fs_err(FS_ESTATE, "constant '%s' has no data", val->name);
        unsigned sum = 0;
        for (size_t k = 0; k < bytes; k++)
            sum += ((const uint8_t *)t->data)[k];
        volatile unsigned sink = sum;
        (void)sink;
        if (val->producer != -1)
            return fs_err(FS_ESTATE, "constant '%s' has producer %d", val->name, val->producer);
    } else if (val->kind == ENG_VALUE_NODE) {
        if (val->producer < 0 || (size_t)val->producer >= g->n_nodes)
            return fs_err(FS_ESTATE, "node output '%s' has producer %d", val->name,
                          val->producer);
    } else if (val->producer != -1) {
        return fs_err(FS_ESTATE, "graph input '%s' has producer %d", val->name, val->producer);
    }
    return 0;
}

/* graph.h's invariants; `consumers` has n_values zeroed slots. */
static int graph_check(const eng_graph_t *g, int *consumers)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        if (!n->name || !n->op_type || !n->domain || !n->op)
            return fs_err(FS_ESTATE, "node %zu lacks a name, op type, domain or op", i);
        if (n->n_attrs > 0 && !n->attrs)
            return fs_err(FS_ESTATE, "node '%s' has %d attributes and no array", n->name,
                          n->n_attrs);
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0)
                continue;
            if ((size_t)v >= g->n_values)
                return fs_err(FS_ESTATE, "node '%s' input %d is value %d of %zu", n->name, k, v,
                              g->n_values);
            consumers[v]++;
            if (g->values[v].producer >= (int)i)
                return fs_err(FS_ESTATE, "node %zu ('%s') reads '%s' before it is made", i,
                              n->name, g->values[v].name);
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && ((size_t)v >= g->n_values || g->values[v].producer != (int)i))
                return fs_err(FS_ESTATE, "node '%s' output %d (value %d) is not its own",
                              n->name, k, v);
        }
    }
    for (size_t v = 0; v < g->n_values; v++) {
        int rc = value_check(g, v);
        if (rc != 0)
            return rc;
        if (g->values[v].n_consumers != consumers[v])
            return fs_err(FS_ESTATE, "value '%s' counts %d consumers, %d read it",
                          g->values[v].name, g->values[v].n_consumers, consumers[v]);
    }
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] < 0 || (size_t)g->inputs[i] >= g->n_values ||
            g->values[g->inputs[i]].kind != ENG_VALUE_INPUT)
            return fs_err(FS_ESTATE, "graph input %zu is not an input value", i);
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] < 0 || (size_t)g->outputs[i] >= g->n_values ||
            !g->values[g->outputs[i]].is_output)
            return fs_err(FS_ESTATE, "graph output %zu is not an output value", i);
    return 0;
}

/* One value per name: sorted names, no two equal. */
static int names_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int graph_names_check(const eng_graph_t *g, const char **names)
{
    for (size_t v = 0; v < g->n_values; v++)
        names[v] = g->values[v].name;
    qsort(names, g->n_values, sizeof *names, names_cmp);
    for (size_t v = 1; v < g->n_values; v++)
        if (strcmp(names[v - 1], names[v]) == 0)
            return fs_err(FS_ESTATE, "two values are called '%s'", names[v]);
    return 0;
}

static int tree_check(const eng_graph_t *g);

/* Subgraph sub of node n of g: its binding to g, then its own invariants. */
static int subgraph_check(const eng_graph_t *g, const eng_node_t *n, const eng_graph_t *sub)
{
    if (!sub || sub->parent != g)
        return fs_err(FS_ESTATE, "node '%s': a subgraph without its parent", n->name);
    if (n->n_implicit < 0 || n->n_implicit > n->n_inputs)
        return fs_err(FS_ESTATE, "node '%s' has %d implicit inputs of %d", n->name,
                      n->n_implicit, n->n_inputs);
    for (size_t k = 0; k < sub->n_outer; k++) {
        int v = sub->outer[k], pv = sub->outer_from[k];
        if (v < 0 || (size_t)v >= sub->n_values || sub->values[v].kind != ENG_VALUE_OUTER ||
            pv < 0 || (size_t)pv >= g->n_values)
            return fs_err(FS_ESTATE, "node '%s': outer binding %zu is out of range", n->name, k);
        bool read = false;
        for (int i = n->n_inputs - n->n_implicit; i < n->n_inputs && !read; i++)
            read = n->inputs[i] == pv;
        if (!read || strcmp(sub->values[v].name, g->values[pv].name) != 0)
            return fs_err(FS_ESTATE, "node '%s' does not read '%s' for its subgraph", n->name,
                          sub->values[v].name);
    }
    return tree_check(sub);
}

/* g's invariants, and every subgraph's. */
static int tree_check(const eng_graph_t *g)
{
    int *consumers = calloc(g->n_values + 1, sizeof *consumers);
    const char **names = calloc(g->n_values + 1, sizeof *names);
    int rc = consumers && names ? graph_check(g, consumers)
                                : fs_err(FS_ENOMEM, "out of memory checking a graph");
    if (rc == 0)
        rc = graph_names_check(g, names);
    free(consumers);
    free(names);
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++)
        for (int a = 0; a < g->nodes[i].n_attrs && rc == 0; a++)
            if (g->nodes[i].attrs[a].type == ENG_ATTR_GRAPH)
                rc = subgraph_check(g, &g->nodes[i], g->nodes[i].attrs[a].g);
    return rc;
}

int fuzz_onnx_one(const uint8_t *data, size_t size)
{
    static const int load_codes[] = {FS_EPARSE, FS_ENOTSUP, FS_EINVAL, FS_EIO, FS_ENOMEM};
    alloc_provider_t *provider = NULL;
    alloc_cache_t *cache = NULL;
    alloc_cache_config_t cc = {.name = "fuzz", .max_reserved_bytes = ONNX_CACHE_LIMIT_BYTES};
    int rc = alloc_provider_host_create(&provider);
    if (rc == 0)
        rc = alloc_cache_create(provider, &cc, &cache);
    onnx_weights_t w = {cache, ALLOC_OWNER_SERVER};
    if (rc == 0)
        rc = alloc_cache_owner_create(cache, "weights", &w.owner);
    if (rc != 0)
        goto done;
    eng_weight_alloc_t wa = {.alloc = weights_alloc, .free = weights_free, .user = &w};
    eng_graph_t *g = NULL;
    fs_err_clear();
    rc = eng_graph_load(data, size, NULL, &wa, &g);
    if (rc != 0) {
        rc = g ? fs_err(FS_ESTATE, "eng_graph_load failed and returned a graph")
               : fuzz_refusal_check("eng_graph_load", rc, load_codes, 5);
    } else {
        rc = tree_check(g);
        eng_graph_destroy(g);
    }
    int zero = fuzz_cache_check_zero(cache, "after eng_graph_destroy");
    rc = rc ? rc : zero;
    alloc_cache_owner_destroy(cache, w.owner);
done:
    alloc_cache_destroy(cache);
    alloc_provider_destroy(provider);
    return rc;
}
