/* onnx_build.h -- builds small ONNX models in memory for the loader suites:
 * protobuf-c structs filled field by field, packed to bytes, everything
 * freed by mb_free. Header-only: each suite includes it. */
#ifndef FS_TESTS_ENGINE_ONNX_BUILD_H
#define FS_TESTS_ENGINE_ONNX_BUILD_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "onnx/onnx.pb-c.h"

#define MB_MAX_NODES 4096
#define MB_MAX_LIST 64
#define MB_MAX_ATTRS 16
#define MB_MAX_DEPTH 8

/* A model under construction. The graph's arrays point into the fixed
 * arrays here; every other piece comes from mb_alloc. Between mb_begin_g
 * and mb_end_g the node, input, output and initializer calls fill that
 * subgraph instead (its arrays hold MB_MAX_LIST entries each). */
typedef struct mb {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto *opsets[8];
    Onnx__NodeProto *nodes[MB_MAX_NODES];
    Onnx__TensorProto *inits[MB_MAX_LIST];
    Onnx__ValueInfoProto *inputs[MB_MAX_LIST], *outputs[MB_MAX_LIST], *infos[MB_MAX_LIST];
    Onnx__GraphProto *open[MB_MAX_DEPTH]; /* the subgraphs being filled, innermost last */
    int depth;
    void **allocs;             /* everything mb_alloc handed out */
    size_t n_allocs, cap_allocs;
} mb_t;

/* Zeroed memory that mb_free releases; aborts the test when out of memory. */
static inline void *mb_alloc(mb_t *b, size_t bytes)
{
    if (b->n_allocs == b->cap_allocs) {
        b->cap_allocs = b->cap_allocs ? 2 * b->cap_allocs : 64;
        b->allocs = realloc(b->allocs, b->cap_allocs * sizeof *b->allocs);
        cr_assert(b->allocs, "out of memory building a model");
    }
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p, "out of memory building a model");
    return b->allocs[b->n_allocs++] = p;
}

static inline char *mb_str(mb_t *b, const char *s)
{
    char *d = mb_alloc(b, strlen(s) + 1);
    return strcpy(d, s);
}

static inline void *mb_dup(mb_t *b, const void *src, size_t bytes)
{
    void *d = mb_alloc(b, bytes);
    if (bytes)
        memcpy(d, src, bytes);
    return d;
}

static inline void mb_opset(mb_t *b, const char *domain, int64_t version)
{
    Onnx__OperatorSetIdProto *o = mb_alloc(b, sizeof *o);
    onnx__operator_set_id_proto__init(o);
    o->domain = mb_str(b, domain);
    o->has_version = 1;
    o->version = version;
    b->opsets[b->model.n_opset_import++] = o;
}

/* A model of IR version `ir` importing the default domain at `opset`
 * (opset < 0: no import at all). */
static inline void mb_init(mb_t *b, int64_t ir, int64_t opset)
{
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->model);
    onnx__graph_proto__init(&b->graph);
    b->model.has_ir_version = 1;
    b->model.ir_version = ir;
    b->model.graph = &b->graph;
    b->model.opset_import = b->opsets;
    b->graph.name = mb_str(b, "test");
    b->graph.node = b->nodes;
    b->graph.initializer = b->inits;
    b->graph.input = b->inputs;
    b->graph.output = b->outputs;
    b->graph.value_info = b->infos;
    if (opset >= 0)
        mb_opset(b, "", opset);
}

/* The graph being filled: the innermost open subgraph, else the model's. */
static inline Onnx__GraphProto *mb_cur(mb_t *b)
{
    return b->depth ? b->open[b->depth - 1] : &b->graph;
}

/* Splits "a,,b" into {"a", "", "b"} ("" gives no names). */
static inline char **mb_names(mb_t *b, const char *list, size_t *n)
{
    *n = 0;
    if (!list || !list[0])
        return NULL;
    size_t count = 1;
    for (const char *p = list; *p; p++)
        count += *p == ',';
    char **out = mb_alloc(b, count * sizeof *out);
    const char *p = list;
    for (size_t i = 0; i < count; i++) {
        size_t len = strcspn(p, ",");
        out[i] = mb_alloc(b, len + 1);
        memcpy(out[i], p, len);
        p += len + (p[len] == ',');
    }
    *n = count;
    return out;
}

/* Appends a node; inputs and outputs are comma-separated names. */
static inline Onnx__NodeProto *mb_node(mb_t *b, const char *op, const char *name,
                                       const char *inputs, const char *outputs)
{
    Onnx__GraphProto *g = mb_cur(b);
    cr_assert_lt(g->n_node, b->depth ? MB_MAX_LIST : MB_MAX_NODES);
    Onnx__NodeProto *n = mb_alloc(b, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = mb_str(b, op);
    if (name)
        n->name = mb_str(b, name);
    n->input = mb_names(b, inputs, &n->n_input);
    n->output = mb_names(b, outputs, &n->n_output);
    n->attribute = mb_alloc(b, MB_MAX_ATTRS * sizeof *n->attribute);
    g->node[g->n_node++] = n;
    return n;
}

/* Appends an attribute of `type` to n; the caller fills its value. */
static inline Onnx__AttributeProto *mb_attr(mb_t *b, Onnx__NodeProto *n, const char *name,
                                            Onnx__AttributeProto__AttributeType type)
{
    cr_assert_lt(n->n_attribute, MB_MAX_ATTRS);
    Onnx__AttributeProto *a = mb_alloc(b, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = mb_str(b, name);
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static inline void mb_attr_i(mb_t *b, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static inline void mb_attr_f(mb_t *b, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static inline void mb_attr_ints(mb_t *b, Onnx__NodeProto *n, const char *name,
                                const int64_t *v, size_t count)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = count;
    a->ints = mb_dup(b, v, count * sizeof *v);
}

static inline void mb_attr_floats(mb_t *b, Onnx__NodeProto *n, const char *name,
                                  const float *v, size_t count)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = count;
    a->floats = mb_dup(b, v, count * sizeof *v);
}

static inline void mb_attr_s(mb_t *b, Onnx__NodeProto *n, const char *name, const char *s)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(s);
    a->s.data = (uint8_t *)mb_str(b, s);
}

static inline void mb_attr_strs(mb_t *b, Onnx__NodeProto *n, const char *name,
                                const char *const *v, size_t count)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    a->n_strings = count;
    a->strings = mb_alloc(b, count * sizeof *a->strings);
    for (size_t i = 0; i < count; i++) {
        a->strings[i].len = strlen(v[i]);
        a->strings[i].data = (uint8_t *)mb_str(b, v[i]);
    }
}

static inline void mb_attr_t(mb_t *b, Onnx__NodeProto *n, const char *name, Onnx__TensorProto *t)
{
    mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}

/* Starts subgraph attribute `name` of node n (what If, Loop and Scan
 * carry): until mb_end_g, mb_node, mb_input, mb_output and mb_initializer
 * fill it. Subgraphs nest. */
static inline Onnx__GraphProto *mb_begin_g(mb_t *b, Onnx__NodeProto *n, const char *name)
{
    cr_assert_lt(b->depth, MB_MAX_DEPTH);
    Onnx__GraphProto *g = mb_alloc(b, sizeof *g);
    onnx__graph_proto__init(g);
    g->name = mb_str(b, name);
    g->node = mb_alloc(b, MB_MAX_LIST * sizeof *g->node);
    g->initializer = mb_alloc(b, MB_MAX_LIST * sizeof *g->initializer);
    g->input = mb_alloc(b, MB_MAX_LIST * sizeof *g->input);
    g->output = mb_alloc(b, MB_MAX_LIST * sizeof *g->output);
    mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = g;
    b->open[b->depth++] = g;
    return g;
}

/* Ends the innermost subgraph mb_begin_g started. */
static inline void mb_end_g(mb_t *b)
{
    cr_assert_gt(b->depth, 0);
    b->depth--;
}

/* A subgraph attribute with nothing in it. */
static inline void mb_attr_g(mb_t *b, Onnx__NodeProto *n, const char *name)
{
    mb_begin_g(b, n, name);
    mb_end_g(b);
}

/* A tensor with name, dtype and dims and no data yet. */
static inline Onnx__TensorProto *mb_tensor(mb_t *b, const char *name, int dtype, int rank,
                                           const int64_t *dims)
{
    Onnx__TensorProto *t = mb_alloc(b, sizeof *t);
    onnx__tensor_proto__init(t);
    if (name)
        t->name = mb_str(b, name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = mb_dup(b, dims, (size_t)rank * sizeof *dims);
    return t;
}

static inline void mb_raw(mb_t *b, Onnx__TensorProto *t, const void *data, size_t bytes)
{
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = mb_dup(b, data, bytes);
}

static inline void mb_floats(mb_t *b, Onnx__TensorProto *t, const float *v, size_t n)
{
    t->n_float_data = n;
    t->float_data = mb_dup(b, v, n * sizeof *v);
}

static inline void mb_int32s(mb_t *b, Onnx__TensorProto *t, const int32_t *v, size_t n)
{
    t->n_int32_data = n;
    t->int32_data = mb_dup(b, v, n * sizeof *v);
}

static inline void mb_int64s(mb_t *b, Onnx__TensorProto *t, const int64_t *v, size_t n)
{
    t->n_int64_data = n;
    t->int64_data = mb_dup(b, v, n * sizeof *v);
}

/* Marks t as stored in an external file: location plus optional offset
 * and length (NULL: key left out). */
static inline void mb_external(mb_t *b, Onnx__TensorProto *t, const char *location,
                               const char *offset, const char *length)
{
    const char *keys[3] = {"location", "offset", "length"};
    const char *vals[3] = {location, offset, length};
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->external_data = mb_alloc(b, 3 * sizeof *t->external_data);
    for (int i = 0; i < 3; i++) {
        if (!vals[i])
            continue;
        Onnx__StringStringEntryProto *kv = mb_alloc(b, sizeof *kv);
        onnx__string_string_entry_proto__init(kv);
        kv->key = mb_str(b, keys[i]);
        kv->value = mb_str(b, vals[i]);
        t->external_data[t->n_external_data++] = kv;
    }
}

static inline void mb_initializer(mb_t *b, Onnx__TensorProto *t)
{
    Onnx__GraphProto *g = mb_cur(b);
    cr_assert_lt(g->n_initializer, MB_MAX_LIST);
    g->initializer[g->n_initializer++] = t;
}

/* A value info; dtype 0 declares no type, rank < 0 no shape. A dim of -1
 * takes its symbol from params[d] (NULL: an unknown dim). */
static inline Onnx__ValueInfoProto *mb_vi(mb_t *b, const char *name, int dtype, int rank,
                                          const int64_t *dims, const char *const *params)
{
    Onnx__ValueInfoProto *vi = mb_alloc(b, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = mb_str(b, name);
    if (dtype == 0)
        return vi;
    Onnx__TypeProto *tp = mb_alloc(b, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = mb_alloc(b, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = dtype;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    if (rank < 0)
        return vi;
    Onnx__TensorShapeProto *sh = mb_alloc(b, sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)rank;
    sh->dim = mb_alloc(b, (size_t)rank * sizeof *sh->dim);
    for (int d = 0; d < rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = mb_alloc(b, sizeof *dim);
        onnx__tensor_shape_proto__dimension__init(dim);
        if (dims[d] >= 0) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = dims[d];
        } else if (params && params[d]) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = mb_str(b, params[d]);
        }
        sh->dim[d] = dim;
    }
    tt->shape = sh;
    return vi;
}

static inline Onnx__ValueInfoProto *mb_input(mb_t *b, const char *name, int dtype, int rank,
                                             const int64_t *dims, const char *const *params)
{
    Onnx__GraphProto *g = mb_cur(b);
    cr_assert_lt(g->n_input, MB_MAX_LIST);
    return g->input[g->n_input++] = mb_vi(b, name, dtype, rank, dims, params);
}

static inline Onnx__ValueInfoProto *mb_output(mb_t *b, const char *name, int dtype, int rank,
                                              const int64_t *dims)
{
    Onnx__GraphProto *g = mb_cur(b);
    cr_assert_lt(g->n_output, MB_MAX_LIST);
    return g->output[g->n_output++] = mb_vi(b, name, dtype, rank, dims, NULL);
}

/* The model packed to bytes (freed by mb_free). */
static inline uint8_t *mb_pack(mb_t *b, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = mb_alloc(b, *len);
    cr_assert_eq(onnx__model_proto__pack(&b->model, buf), *len);
    return buf;
}

/* Packs and loads; returns eng_graph_load's result. */
static inline int mb_load(mb_t *b, const char *dir, const eng_weight_alloc_t *wa,
                          eng_graph_t **g)
{
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    *g = NULL;
    fs_err_clear();
    return eng_graph_load(buf, len, dir, wa, g);
}

static inline void mb_free(mb_t *b)
{
    for (size_t i = 0; i < b->n_allocs; i++)
        free(b->allocs[i]);
    free(b->allocs);
    b->allocs = NULL;
    b->n_allocs = b->cap_allocs = 0;
}

/* The index of the value called `name`, or -1. */
static inline int graph_value(const eng_graph_t *g, const char *name)
{
    for (size_t i = 0; i < g->n_values; i++)
        if (strcmp(g->values[i].name, name) == 0)
            return (int)i;
    return -1;
}

static inline void graph_check_invariants(const eng_graph_t *g);

/* A subgraph's own invariants, and its binding to parent graph g through
 * node n: every OUTER value is bound once to a value of g of its name that
 * n reads as an implicit input. */
static inline void subgraph_check_invariants(const eng_graph_t *g, const eng_node_t *n,
                                             const eng_graph_t *sub)
{
    graph_check_invariants(sub);
    cr_expect_eq(sub->parent, g, "subgraph of node '%s' has another parent", n->name);
    cr_expect_eq(sub->opset, g->opset);
    size_t n_outer_values = 0;
    for (size_t v = 0; v < sub->n_values; v++)
        n_outer_values += sub->values[v].kind == ENG_VALUE_OUTER;
    cr_expect_eq(sub->n_outer, n_outer_values, "every OUTER value is bound once");
    for (size_t k = 0; k < sub->n_outer; k++) {
        int v = sub->outer[k], pv = sub->outer_from[k];
        cr_assert(v >= 0 && (size_t)v < sub->n_values && pv >= 0 && (size_t)pv < g->n_values);
        cr_expect_eq(sub->values[v].kind, ENG_VALUE_OUTER);
        cr_expect_str_eq(sub->values[v].name, g->values[pv].name);
        bool implicit = false;
        for (int i = n->n_inputs - n->n_implicit; i < n->n_inputs; i++)
            implicit = implicit || n->inputs[i] == pv;
        cr_expect(implicit, "node '%s' does not read '%s' for its subgraph", n->name,
                  g->values[pv].name);
    }
}

/* The IR's invariants (graph.h): unique names, indices in range, nodes in
 * topological order, producers and consumer counts consistent, constants
 * with data; and each subgraph's, recursively. */
static inline void graph_check_invariants(const eng_graph_t *g)
{
    int *consumers = calloc(g->n_values + 1, sizeof *consumers);
    cr_assert(consumers);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        cr_assert(n->name && n->op_type && n->domain);
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0)
                continue;
            cr_assert_lt((size_t)v, g->n_values);
            consumers[v]++;
            cr_expect_lt(g->values[v].producer, (int)i, "node %zu reads '%s' before it is made",
                         i, g->values[v].name);
        }
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0)
                cr_expect_eq(g->values[n->outputs[k]].producer, (int)i);
        cr_expect(n->n_implicit >= 0 && n->n_implicit <= n->n_inputs);
        size_t n_sub_outer = 0;
        for (int a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].type == ENG_ATTR_GRAPH) {
                cr_assert(n->attrs[a].g, "node '%s': GRAPH attribute without a graph", n->name);
                subgraph_check_invariants(g, n, n->attrs[a].g);
                n_sub_outer += n->attrs[a].g->n_outer;
            }
        cr_expect_leq((size_t)n->n_implicit, n_sub_outer, "node '%s' reads more than its "
                      "subgraphs need", n->name);
    }
    for (size_t v = 0; v < g->n_values; v++) {
        const eng_value_t *val = &g->values[v];
        cr_expect_eq(val->n_consumers, consumers[v], "consumers of '%s'", val->name);
        cr_expect_eq(graph_value(g, val->name), (int)v, "'%s' is not unique", val->name);
        if (val->kind == ENG_VALUE_CONST)
            cr_expect(val->constant.data, "constant '%s' has no data", val->name);
        else if (val->kind == ENG_VALUE_NODE)
            cr_expect_geq(val->producer, 0);
        else
            cr_expect_eq(val->producer, -1);
    }
    free(consumers);
}

#endif
