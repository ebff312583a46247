/* graph.c -- attribute lookup on IR nodes: by name, with typed getters that
 * fall back to a default.
 *
 * A getter asked for another type than the attribute has returns the
 * default, as if the attribute were absent. For the ops of
 * engine/ops/list.h in the default domain the loader has already refused
 * such a node (engine/onnx_schema.c checks every attribute's type against
 * the op's ONNX schema), so there the fallback only ever stands for an
 * absent attribute; it matters only for nodes built by hand (tests). */
#include "engine/graph.h"

#include <stdlib.h>
#include <string.h>

/* Linear: nodes carry a handful of attributes, and ops read them at load and
 * plan time, not per element. */
const eng_attr_t *eng_node_attr(const eng_node_t *n, const char *name)
{
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

const char *eng_attr_type_name(eng_attr_type_t t)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT",  "INT",           "STRING",         "TENSOR",
        "GRAPH",     "FLOATS", "INTS",          "STRINGS",        "TENSORS",
        "GRAPHS",    "SPARSE_TENSOR",           "SPARSE_TENSORS", "TYPE_PROTO",
        "TYPE_PROTOS",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* The attribute when present with type `type`, else NULL. */
static const eng_attr_t *attr_typed(const eng_node_t *n, const char *name, eng_attr_type_t type)
{
    const eng_attr_t *a = eng_node_attr(n, name);
    return a && a->type == type ? a : NULL;
}

int64_t eng_attr_i(const eng_node_t *n, const char *name, int64_t def)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_INT);
    return a ? a->i : def;
}

float eng_attr_f(const eng_node_t *n, const char *name, float def)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_FLOAT);
    return a ? a->f : def;
}

const char *eng_attr_s(const eng_node_t *n, const char *name, const char *def)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_STRING);
    return a ? a->s : def;
}

/* A present but empty list returns non-NULL with *count 0 when the graph
 * came from the loader, which never leaves a list pointer NULL. */
const int64_t *eng_attr_ints(const eng_node_t *n, const char *name, size_t *count)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_INTS);
    if (count)
        *count = a ? a->n : 0;
    return a ? a->ints : NULL;
}

const float *eng_attr_floats(const eng_node_t *n, const char *name, size_t *count)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_FLOATS);
    if (count)
        *count = a ? a->n : 0;
    return a ? a->floats : NULL;
}

const eng_tensor_t *eng_attr_tensor(const eng_node_t *n, const char *name)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_TENSOR);
    return a ? &a->t : NULL;
}

const eng_graph_t *eng_attr_graph(const eng_node_t *n, const char *name)
{
    const eng_attr_t *a = attr_typed(n, name, ENG_ATTR_GRAPH);
    return a ? a->g : NULL;
}

void *eng_weights_alloc(const eng_weight_alloc_t *wa, size_t bytes)
{
    return wa && wa->alloc ? wa->alloc(wa->user, bytes) : malloc(bytes);
}

void eng_weights_free(const eng_weight_alloc_t *wa, void *ptr)
{
    if (wa && wa->free)
        wa->free(wa->user, ptr);
    else
        free(ptr);
}

int eng_graph_sole_reader(const eng_graph_t *g, int v)
{
    if (v < 0 || g->values[v].kind != ENG_VALUE_NODE || g->values[v].is_output ||
        g->values[v].n_consumers != 1)
        return -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] == v)
                return (int)i;
    return -1;
}

int eng_graph_sole_live_reader(const eng_graph_t *g, const bool *done, int v)
{
    if (v < 0 || g->values[v].kind != ENG_VALUE_NODE || g->values[v].is_output)
        return -1;
    int reader = -1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (done[i])
            continue;
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            if (g->nodes[i].inputs[k] != v)
                continue;
            if (reader >= 0)
                return -1;
            reader = (int)i;
        }
    }
    return reader;
}

bool eng_dim_same(const eng_dim_t *a, const eng_dim_t *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

bool eng_graph_live_op(const eng_graph_t *g, const bool *done, int i, const char *op)
{
    if (i < 0)
        return false;
    const eng_node_t *n = &g->nodes[i];
    return !done[i] && strcmp(n->op_type, op) == 0 && n->domain[0] == '\0' && n->n_outputs == 1;
}
