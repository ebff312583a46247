/* fuzz_model.c -- the fuzz targets' and the seed generator's ONNX model
 * builder (fuzz_model.h): pieces from one list, the first failure kept. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/fuzz/fuzz_model.h"

/* Zeroed memory freed by fuzz_mb_free, or NULL (the builder has failed). */
static void *mb_alloc(fuzz_mb_t *b, size_t bytes)
{
    if (b->failed)
        return NULL;
    if (b->n_allocs == b->cap_allocs) {
        size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 64;
        void **grown = realloc(b->allocs, cap * sizeof *grown);
        if (!grown) {
            b->failed = FS_ENOMEM;
            return NULL;
        }
        b->allocs = grown;
        b->cap_allocs = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        b->failed = FS_ENOMEM;
        return NULL;
    }
    return b->allocs[b->n_allocs++] = p;
}

static char *mb_str(fuzz_mb_t *b, const char *s)
{
    char *d = mb_alloc(b, strlen(s) + 1);
    return d ? strcpy(d, s) : NULL;
}

static void *mb_dup(fuzz_mb_t *b, const void *src, size_t bytes)
{
    void *d = mb_alloc(b, bytes);
    if (d && bytes)
        memcpy(d, src, bytes);
    return d;
}

/* Whether one more item fits under `cap`; past it the builder fails. */
static int mb_room(fuzz_mb_t *b, size_t used, size_t cap)
{
    if (!b->failed && used >= cap)
        b->failed = FS_ERANGE;
    return !b->failed;
}

void fuzz_mb_init(fuzz_mb_t *b, int64_t ir, int64_t opset)
{
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->model);
    onnx__graph_proto__init(&b->graph);
    onnx__operator_set_id_proto__init(&b->opset);
    b->model.has_ir_version = 1;
    b->model.ir_version = ir;
    b->model.graph = &b->graph;
    b->opset.domain = "";
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsets[0] = &b->opset;
    b->model.opset_import = b->opsets;
    b->model.n_opset_import = 1;
    b->graph.name = "fuzz";
    b->graph.node = b->nodes;
    b->graph.initializer = b->inits;
    b->graph.input = b->inputs;
    b->graph.output = b->outputs;
}

/* Splits "a,,b" into {"a", "", "b"}; "" or NULL gives none. */
static char **mb_names(fuzz_mb_t *b, const char *list, size_t *n)
{
    *n = 0;
    if (!list || !list[0])
        return NULL;
    size_t count = 1;
    for (const char *p = list; *p; p++)
        count += *p == ',';
    char **out = mb_alloc(b, count * sizeof *out);
    const char *p = list;
    for (size_t i = 0; out && i < count; i++) {
        size_t len = strcspn(p, ",");
        if (!(out[i] = mb_alloc(b, len + 1)))
            return NULL;
        memcpy(out[i], p, len);
        p += len + (p[len] == ',');
    }
    *n = out ? count : 0;
    return out;
}

static Onnx__ValueInfoProto *mb_vi(fuzz_mb_t *b, const char *name, int dtype, int rank,
                                   const int64_t *dims, const char *const *params)
{
    Onnx__ValueInfoProto *vi = mb_alloc(b, sizeof *vi);
    Onnx__TypeProto *tp = mb_alloc(b, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = mb_alloc(b, sizeof *tt);
    Onnx__TensorShapeProto *sh = mb_alloc(b, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dv =
        mb_alloc(b, (rank > 0 ? (size_t)rank : 1) * sizeof *dv);
    if (!dv)
        return NULL;
    onnx__value_info_proto__init(vi);
    vi->name = mb_str(b, name);
    if (dtype == 0)
        return vi;
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = dtype;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    if (rank < 0)
        return vi;
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)rank;
    sh->dim = dv;
    for (int d = 0; d < rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = mb_alloc(b, sizeof *dim);
        if (!dim)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(dim);
        if (dims[d] >= 0) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = dims[d];
        } else if (params && params[d]) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = mb_str(b, params[d]);
        }
        dv[d] = dim;
    }
    tt->shape = sh;
    return vi;
}

/* The graph being filled: the innermost open subgraph, else the model's. */
static Onnx__GraphProto *mb_cur(fuzz_mb_t *b)
{
    return b->depth ? b->open[b->depth - 1] : &b->graph;
}

void fuzz_mb_input(fuzz_mb_t *b, const char *name, int dtype, int rank, const int64_t *dims,
                   const char *const *params)
{
    Onnx__GraphProto *g = mb_cur(b);
    if (!mb_room(b, g->n_input, FUZZ_MB_MAX_LIST))
        return;
    Onnx__ValueInfoProto *vi = mb_vi(b, name, dtype, rank, dims, params);
    if (vi)
        g->input[g->n_input++] = vi;
}

void fuzz_mb_output(fuzz_mb_t *b, const char *name, int dtype, int rank, const int64_t *dims,
                    const char *const *params)
{
    Onnx__GraphProto *g = mb_cur(b);
    if (!mb_room(b, g->n_output, FUZZ_MB_MAX_LIST))
        return;
    Onnx__ValueInfoProto *vi = mb_vi(b, name, dtype, rank, dims, params);
    if (vi)
        g->output[g->n_output++] = vi;
}

Onnx__NodeProto *fuzz_mb_node(fuzz_mb_t *b, const char *op, const char *inputs,
                              const char *outputs)
{
    Onnx__GraphProto *g = mb_cur(b);
    if (!mb_room(b, g->n_node, b->depth ? FUZZ_MB_MAX_LIST : FUZZ_MB_MAX_NODES))
        return NULL;
    Onnx__NodeProto *n = mb_alloc(b, sizeof *n);
    Onnx__AttributeProto **attrs = mb_alloc(b, FUZZ_MB_MAX_ATTRS * sizeof *attrs);
    if (!attrs)
        return NULL;
    onnx__node_proto__init(n);
    n->op_type = mb_str(b, op);
    n->input = mb_names(b, inputs, &n->n_input);
    n->output = mb_names(b, outputs, &n->n_output);
    n->attribute = attrs;
    if (b->failed)
        return NULL;
    return g->node[g->n_node++] = n;
}

static Onnx__AttributeProto *mb_attr(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type)
{
    if (!n || !mb_room(b, n->n_attribute, FUZZ_MB_MAX_ATTRS))
        return NULL;
    Onnx__AttributeProto *a = mb_alloc(b, sizeof *a);
    char *copy = mb_str(b, name);
    if (!copy)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = copy;
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

void fuzz_mb_attr_i(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) {
        a->has_i = 1;
        a->i = v;
    }
}

void fuzz_mb_attr_f(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) {
        a->has_f = 1;
        a->f = v;
    }
}

void fuzz_mb_attr_s(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, const char *s)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    char *copy = mb_str(b, s);
    if (a && copy) {
        a->has_s = 1;
        a->s.len = strlen(s);
        a->s.data = (uint8_t *)copy;
    }
}

void fuzz_mb_attr_ints(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, const int64_t *v,
                       size_t count)
{
    Onnx__AttributeProto *a = mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *copy = mb_dup(b, v, count * sizeof *v);
    if (a && copy) {
        a->n_ints = count;
        a->ints = copy;
    }
}

static int64_t mb_numel(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* A tensor with raw data of `elem_bytes`-byte elements, or NULL. */
static Onnx__TensorProto *mb_tensor(fuzz_mb_t *b, const char *name, int dtype, int rank,
                                    const int64_t *dims, const void *v, size_t elem_bytes)
{
    Onnx__TensorProto *t = mb_alloc(b, sizeof *t);
    size_t bytes = (size_t)mb_numel(rank, dims) * elem_bytes;
    int64_t *dv = mb_dup(b, dims, (size_t)rank * sizeof *dims);
    void *data = mb_dup(b, v, bytes);
    if (!data)
        return NULL;
    onnx__tensor_proto__init(t);
    if (name)
        t->name = mb_str(b, name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = dv;
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = data;
    return t;
}

void fuzz_mb_attr_tensor_f(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, int rank,
                           const int64_t *dims, const float *v)
{
    Onnx__TensorProto *t = mb_tensor(b, NULL, FUZZ_DT_FLOAT, rank, dims, v, sizeof *v);
    Onnx__AttributeProto *a = t ? mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)
                                : NULL;
    if (a)
        a->t = t;
}

static void mb_initializer(fuzz_mb_t *b, Onnx__TensorProto *t)
{
    Onnx__GraphProto *g = mb_cur(b);
    if (t && mb_room(b, g->n_initializer, FUZZ_MB_MAX_LIST))
        g->initializer[g->n_initializer++] = t;
}

void fuzz_mb_begin_g(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name)
{
    Onnx__GraphProto *g = mb_alloc(b, sizeof *g);
    Onnx__NodeProto **nodes = mb_alloc(b, FUZZ_MB_MAX_LIST * sizeof *nodes);
    Onnx__TensorProto **inits = mb_alloc(b, FUZZ_MB_MAX_LIST * sizeof *inits);
    Onnx__ValueInfoProto **ins = mb_alloc(b, FUZZ_MB_MAX_LIST * sizeof *ins);
    Onnx__ValueInfoProto **outs = mb_alloc(b, FUZZ_MB_MAX_LIST * sizeof *outs);
    Onnx__AttributeProto *a = outs ? mb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)
                                   : NULL;
    if (!a || !mb_room(b, (size_t)b->depth, FUZZ_MB_MAX_DEPTH))
        return;
    onnx__graph_proto__init(g);
    g->name = a->name;
    g->node = nodes;
    g->initializer = inits;
    g->input = ins;
    g->output = outs;
    a->g = g;
    b->open[b->depth++] = g;
}

void fuzz_mb_end_g(fuzz_mb_t *b)
{
    if (b->depth > 0)
        b->depth--;
}

void fuzz_mb_init_f(fuzz_mb_t *b, const char *name, int rank, const int64_t *dims,
                    const float *v)
{
    mb_initializer(b, mb_tensor(b, name, FUZZ_DT_FLOAT, rank, dims, v, sizeof *v));
}

void fuzz_mb_init_i64(fuzz_mb_t *b, const char *name, int rank, const int64_t *dims,
                      const int64_t *v)
{
    mb_initializer(b, mb_tensor(b, name, FUZZ_DT_INT64, rank, dims, v, sizeof *v));
}

int fuzz_mb_pack(fuzz_mb_t *b, uint8_t **out, size_t *len)
{
    if (b->failed == FS_ENOMEM)
        return fs_err(FS_ENOMEM, "out of memory building a model");
    if (b->failed)
        return fs_err(b->failed, "building a model: past a capacity of fuzz_model.h");
    size_t n = onnx__model_proto__get_packed_size(&b->model);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return fs_err(FS_ENOMEM, "out of memory packing a %zu-byte model", n);
    onnx__model_proto__pack(&b->model, buf);
    *out = buf;
    *len = n;
    return 0;
}

void fuzz_mb_free(fuzz_mb_t *b)
{
    for (size_t i = 0; i < b->n_allocs; i++)
        free(b->allocs[i]);
    free(b->allocs);
    b->allocs = NULL;
    b->n_allocs = b->cap_allocs = 0;
}
