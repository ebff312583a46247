/* make_models.c -- writes the demo model repository: small ONNX models with
 * deterministic weights, the embedded default the server serves.
 *
 *   make_models DIR     writes DIR/{mlp,cnn,transformer,encoder}/1/model.onnx
 *
 * mlp: input "input" float [batch, 64] -> MatMul+Add 128 -> Relu -> MatMul+Add
 *      64 -> Relu -> MatMul+Add 10 -> Softmax -> "probabilities" [batch, 10].
 * cnn: input "image" float [batch, 1, 28, 28] -> Conv 8x3x3 (pad 1) -> Relu ->
 *      MaxPool 2 -> Conv 16x3x3 (pad 1) -> Relu -> MaxPool 2 ->
 *      GlobalAveragePool -> Flatten -> Gemm 10 -> Softmax -> "probabilities".
 * transformer: input "embeddings" float [batch, 64, 64] -> one pre-norm
 *      encoder block as PyTorch exports it at opset 17: LayerNormalization,
 *      Q/K/V MatMul+Add, Reshape to 4 heads, Transpose, MatMul, scale,
 *      Softmax, MatMul, Transpose, Reshape, output MatMul+Add, residual Add,
 *      LayerNormalization, MatMul+Add 256, GELU (Div, Erf, Add, Mul, Mul),
 *      MatMul+Add 64, residual Add -> "hidden" [batch, 64, 64].
 * encoder: input "embeddings" float [batch, seq, 64] -> two such blocks
 *      (names prefixed "layer0.", "layer1.") -> "hidden" [batch, seq, 64],
 *      batch and seq both symbolic: the Reshape targets are [0, 0, 4, 16]
 *      and [0, 0, 64] (0 copies the input's dim), so one file serves every
 *      sequence length, each (batch, seq) getting its own plan. The model
 *      of the memory-flatness trace (loadtest/torch_baseline.py --arch
 *      demo builds the same architecture in PyTorch).
 * mlp and cnn use opset 13, transformer and encoder 17; all IR version 8,
 * dims "batch" (and "seq") symbolic. Weights come
 * from a fixed-seed generator (uniform, scaled by 1/sqrt(fan-in)), so every
 * build writes byte-identical files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx/onnx.pb-c.h"

/* Everything a model's protobuf structs point to is allocated here and
 * freed in one sweep after packing. */
typedef struct pool {
    void **ptrs;
    size_t n, cap;
} pool_t;

static void *pool_alloc(pool_t *p, size_t bytes)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        void **grown = realloc(p->ptrs, cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "make_models: out of memory\n");
            exit(1);
        }
        p->ptrs = grown;
        p->cap = cap;
    }
    void *mem = calloc(1, bytes ? bytes : 1);
    if (!mem) {
        fprintf(stderr, "make_models: out of memory\n");
        exit(1);
    }
    return p->ptrs[p->n++] = mem;
}

static void pool_free(pool_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->ptrs[i]);
    free(p->ptrs);
}

static char *pool_str(pool_t *p, const char *s)
{
    char *copy = pool_alloc(p, strlen(s) + 1);
    memcpy(copy, s, strlen(s) + 1);
    return copy;
}

/* splitmix64: the weights' deterministic source. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A graph under construction; BUILDER_MAX nodes and initializers at most
 * (checked: exceeding it is a generator bug and stops the program). */
#define BUILDER_MAX 128
typedef struct builder {
    pool_t pool;
    Onnx__GraphProto graph;
    Onnx__NodeProto *nodes[BUILDER_MAX];
    Onnx__TensorProto *inits[BUILDER_MAX];
    uint64_t rng;
} builder_t;

static void builder_check(size_t used)
{
    if (used >= BUILDER_MAX) {
        fprintf(stderr, "make_models: a model needs more than %d nodes or initializers\n",
                BUILDER_MAX);
        exit(1);
    }
}

/* Adds a float initializer of `dims` with uniform weights in +-scale. */
static void add_weight(builder_t *b, const char *name, const int64_t *dims, size_t rank,
                       float scale)
{
    Onnx__TensorProto *t = pool_alloc(&b->pool, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = pool_str(&b->pool, name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = rank;
    t->dims = pool_alloc(&b->pool, rank * sizeof *t->dims);
    size_t n = 1;
    for (size_t i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        n *= (size_t)dims[i];
    }
    t->n_float_data = n;
    t->float_data = pool_alloc(&b->pool, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&b->rng) >> 11) / 9007199254740992.0; /* [0, 1) */
        t->float_data[i] = (float)((2.0 * u - 1.0) * scale);
    }
    builder_check(b->graph.n_initializer);
    b->inits[b->graph.n_initializer++] = t;
}

static Onnx__AttributeProto *attr_ints(builder_t *b, const char *name, const int64_t *v,
                                       size_t n)
{
    Onnx__AttributeProto *a = pool_alloc(&b->pool, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = pool_str(&b->pool, name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = n;
    a->ints = pool_alloc(&b->pool, n * sizeof *a->ints);
    memcpy(a->ints, v, n * sizeof *v);
    return a;
}

static Onnx__AttributeProto *attr_int(builder_t *b, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = pool_alloc(&b->pool, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = pool_str(&b->pool, name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}

/* Adds a node; `ins`/`outs` are NULL-terminated; `attrs` has n_attrs. */
static void add_node(builder_t *b, const char *op, const char *name, const char *const *ins,
                     const char *const *outs, Onnx__AttributeProto **attrs, size_t n_attrs)
{
    Onnx__NodeProto *n = pool_alloc(&b->pool, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = pool_str(&b->pool, op);
    n->name = pool_str(&b->pool, name);
    while (ins[n->n_input])
        n->n_input++;
    while (outs[n->n_output])
        n->n_output++;
    n->input = pool_alloc(&b->pool, n->n_input * sizeof *n->input);
    n->output = pool_alloc(&b->pool, n->n_output * sizeof *n->output);
    for (size_t i = 0; i < n->n_input; i++)
        n->input[i] = pool_str(&b->pool, ins[i]);
    for (size_t i = 0; i < n->n_output; i++)
        n->output[i] = pool_str(&b->pool, outs[i]);
    n->n_attribute = n_attrs;
    n->attribute = attrs;
    builder_check(b->graph.n_node);
    b->nodes[b->graph.n_node++] = n;
}

/* Symbolic dims for value_info: a dim of DIM_BATCH is the symbol "batch",
 * DIM_SEQ "seq". */
enum { DIM_BATCH = -1, DIM_SEQ = -2 };
static const char *const dim_symbols[] = {"batch", "seq"};

/* A float tensor value_info with dims (DIM_BATCH, DIM_SEQ or a size). */
static Onnx__ValueInfoProto *value_info(builder_t *b, const char *name, const int64_t *dims,
                                        size_t rank)
{
    Onnx__ValueInfoProto *vi = pool_alloc(&b->pool, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = pool_str(&b->pool, name);
    Onnx__TypeProto *tp = pool_alloc(&b->pool, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = pool_alloc(&b->pool, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    Onnx__TensorShapeProto *sh = pool_alloc(&b->pool, sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = rank;
    sh->dim = pool_alloc(&b->pool, rank * sizeof *sh->dim);
    for (size_t i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = pool_alloc(&b->pool, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = pool_str(&b->pool, dim_symbols[-dims[i] - 1]);
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        sh->dim[i] = d;
    }
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

/* Packs the graph as a model (IR 8, the given opset) into
 * DIR/name/1/model.onnx. */
static int write_model(builder_t *b, const char *dir, const char *name, int64_t opset_version,
                       Onnx__ValueInfoProto *input, Onnx__ValueInfoProto *output)
{
    b->graph.name = pool_str(&b->pool, name);
    b->graph.node = b->nodes;
    b->graph.initializer = b->inits;
    b->graph.n_input = 1;
    b->graph.input = pool_alloc(&b->pool, sizeof *b->graph.input);
    b->graph.input[0] = input;
    b->graph.n_output = 1;
    b->graph.output = pool_alloc(&b->pool, sizeof *b->graph.output);
    b->graph.output[0] = output;

    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    opset.domain = pool_str(&b->pool, "");
    opset.has_version = 1;
    opset.version = opset_version;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = 8;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = pool_str(&b->pool, "flatserve make_models");
    model.graph = &b->graph;

    size_t len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = pool_alloc(&b->pool, len);
    onnx__model_proto__pack(&model, buf);

    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(dir, 0755);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/1", dir, name);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/1/model.onnx", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "make_models: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("make_models: wrote %s (%zu bytes)\n", path, len);
    return 0;
}

static void builder_init(builder_t *b, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    onnx__graph_proto__init(&b->graph);
    b->rng = seed;
}

static int make_mlp(const char *dir)
{
    builder_t b;
    builder_init(&b, 1);
    const int64_t widths[] = {64, 128, 64, 10};
    const char *x = "input";
    char names[3][4][32];
    for (int l = 0; l < 3; l++) {
        snprintf(names[l][0], 32, "fc%d.weight", l + 1);
        snprintf(names[l][1], 32, "fc%d.bias", l + 1);
        snprintf(names[l][2], 32, "fc%d.mm", l + 1);
        snprintf(names[l][3], 32, l < 2 ? "fc%d.add" : "logits", l + 1);
        int64_t wd[2] = {widths[l], widths[l + 1]};
        float scale = 1.0f / sqrtf((float)widths[l]);
        add_weight(&b, names[l][0], wd, 2, scale);
        add_weight(&b, names[l][1], &wd[1], 1, scale);
        add_node(&b, "MatMul", names[l][2], (const char *[]){x, names[l][0], NULL},
                 (const char *[]){names[l][2], NULL}, NULL, 0);
        add_node(&b, "Add", names[l][3], (const char *[]){names[l][2], names[l][1], NULL},
                 (const char *[]){names[l][3], NULL}, NULL, 0);
        x = names[l][3];
        if (l < 2) {
            static char relu[2][32];
            snprintf(relu[l], 32, "relu%d", l + 1);
            add_node(&b, "Relu", relu[l], (const char *[]){x, NULL}, (const char *[]){relu[l], NULL},
                     NULL, 0);
            x = relu[l];
        }
    }
    Onnx__AttributeProto **axis = pool_alloc(&b.pool, sizeof *axis);
    axis[0] = attr_int(&b, "axis", -1);
    add_node(&b, "Softmax", "softmax", (const char *[]){x, NULL},
             (const char *[]){"probabilities", NULL}, axis, 1);
    int rc = write_model(&b, dir, "mlp", 13,
                         value_info(&b, "input", (int64_t[]){DIM_BATCH, 64}, 2),
                         value_info(&b, "probabilities", (int64_t[]){DIM_BATCH, 10}, 2));
    pool_free(&b.pool);
    return rc;
}

/* Conv (3x3, pad 1) + Relu + MaxPool 2, from `in` with `c_in` channels. */
static const char *conv_block(builder_t *b, int idx, const char *in, int64_t c_in, int64_t c_out)
{
    static char names[2][5][32];
    char(*n)[32] = names[idx];
    snprintf(n[0], 32, "conv%d.weight", idx + 1);
    snprintf(n[1], 32, "conv%d.bias", idx + 1);
    snprintf(n[2], 32, "conv%d", idx + 1);
    snprintf(n[3], 32, "relu%d", idx + 1);
    snprintf(n[4], 32, "pool%d", idx + 1);
    float scale = 1.0f / sqrtf((float)(c_in * 9));
    add_weight(b, n[0], (int64_t[]){c_out, c_in, 3, 3}, 4, scale);
    add_weight(b, n[1], &c_out, 1, scale);
    Onnx__AttributeProto **ca = pool_alloc(&b->pool, 2 * sizeof *ca);
    ca[0] = attr_ints(b, "kernel_shape", (int64_t[]){3, 3}, 2);
    ca[1] = attr_ints(b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    add_node(b, "Conv", n[2], (const char *[]){in, n[0], n[1], NULL}, (const char *[]){n[2], NULL},
             ca, 2);
    add_node(b, "Relu", n[3], (const char *[]){n[2], NULL}, (const char *[]){n[3], NULL}, NULL, 0);
    Onnx__AttributeProto **pa = pool_alloc(&b->pool, 2 * sizeof *pa);
    pa[0] = attr_ints(b, "kernel_shape", (int64_t[]){2, 2}, 2);
    pa[1] = attr_ints(b, "strides", (int64_t[]){2, 2}, 2);
    add_node(b, "MaxPool", n[4], (const char *[]){n[3], NULL}, (const char *[]){n[4], NULL}, pa,
             2);
    return n[4];
}

static int make_cnn(const char *dir)
{
    builder_t b;
    builder_init(&b, 2);
    const char *x = conv_block(&b, 0, "image", 1, 8);
    x = conv_block(&b, 1, x, 8, 16);
    add_node(&b, "GlobalAveragePool", "gap", (const char *[]){x, NULL},
             (const char *[]){"gap", NULL}, NULL, 0);
    add_node(&b, "Flatten", "flatten", (const char *[]){"gap", NULL},
             (const char *[]){"flat", NULL}, NULL, 0);
    float scale = 1.0f / sqrtf(16.0f);
    add_weight(&b, "fc.weight", (int64_t[]){10, 16}, 2, scale);
    add_weight(&b, "fc.bias", (int64_t[]){10}, 1, scale);
    Onnx__AttributeProto **ga = pool_alloc(&b.pool, sizeof *ga);
    ga[0] = attr_int(&b, "transB", 1);
    add_node(&b, "Gemm", "fc", (const char *[]){"flat", "fc.weight", "fc.bias", NULL},
             (const char *[]){"logits", NULL}, ga, 1);
    Onnx__AttributeProto **axis = pool_alloc(&b.pool, sizeof *axis);
    axis[0] = attr_int(&b, "axis", -1);
    add_node(&b, "Softmax", "softmax", (const char *[]){"logits", NULL},
             (const char *[]){"probabilities", NULL}, axis, 1);
    int rc = write_model(&b, dir, "cnn", 13,
                         value_info(&b, "image", (int64_t[]){DIM_BATCH, 1, 28, 28}, 4),
                         value_info(&b, "probabilities", (int64_t[]){DIM_BATCH, 10}, 2));
    pool_free(&b.pool);
    return rc;
}

/* A float initializer holding `v` (n values) with `dims`. */
static void add_const(builder_t *b, const char *name, const int64_t *dims, size_t rank,
                      const float *v, size_t n)
{
    add_weight(b, name, dims, rank, 0.0f);
    Onnx__TensorProto *t = b->inits[b->graph.n_initializer - 1];
    memcpy(t->float_data, v, n * sizeof *v);
}

/* An int64 initializer (shapes for Reshape). */
static void add_shape(builder_t *b, const char *name, const int64_t *v, size_t n)
{
    Onnx__TensorProto *t = pool_alloc(&b->pool, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = pool_str(&b->pool, name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t->n_dims = 1;
    t->dims = pool_alloc(&b->pool, sizeof *t->dims);
    t->dims[0] = (int64_t)n;
    t->n_int64_data = n;
    t->int64_data = pool_alloc(&b->pool, n * sizeof *t->int64_data);
    memcpy(t->int64_data, v, n * sizeof *v);
    builder_check(b->graph.n_initializer);
    b->inits[b->graph.n_initializer++] = t;
}

/* x -> MatMul(x, W [in, out]) + bias, named prefix.mm / prefix.out. */
static void linear(builder_t *b, const char *prefix, const char *x, int64_t in, int64_t out,
                   char names[4][32])
{
    snprintf(names[0], 32, "%s.weight", prefix);
    snprintf(names[1], 32, "%s.bias", prefix);
    snprintf(names[2], 32, "%s.mm", prefix);
    snprintf(names[3], 32, "%s.out", prefix);
    float scale = 1.0f / sqrtf((float)in);
    add_weight(b, names[0], (int64_t[]){in, out}, 2, scale);
    add_weight(b, names[1], &out, 1, scale);
    add_node(b, "MatMul", names[2], (const char *[]){x, names[0], NULL},
             (const char *[]){names[2], NULL}, NULL, 0);
    add_node(b, "Add", names[3], (const char *[]){names[2], names[1], NULL},
             (const char *[]){names[3], NULL}, NULL, 0);
}

/* LayerNormalization over the last axis with unit scale and zero bias. */
static void layer_norm(builder_t *b, const char *name, const char *x, const char *out)
{
    char scale[32], bias[32];
    snprintf(scale, sizeof scale, "%s.scale", name);
    snprintf(bias, sizeof bias, "%s.bias", name);
    float ones[64], zeros[64];
    for (int i = 0; i < 64; i++) {
        ones[i] = 1.0f;
        zeros[i] = 0.0f;
    }
    add_const(b, scale, (int64_t[]){64}, 1, ones, 64);
    add_const(b, bias, (int64_t[]){64}, 1, zeros, 64);
    Onnx__AttributeProto **a = pool_alloc(&b->pool, sizeof *a);
    a[0] = attr_int(b, "axis", -1);
    add_node(b, "LayerNormalization", name, (const char *[]){x, scale, bias, NULL},
             (const char *[]){out, NULL}, a, 1);
}

/* `prefix` + `suffix`, in the builder's pool (freed with the model). */
static const char *block_name(builder_t *b, const char *prefix, const char *suffix)
{
    char *s = pool_alloc(&b->pool, strlen(prefix) + strlen(suffix) + 1);
    strcpy(s, prefix);
    strcat(s, suffix);
    return s;
}

/* One pre-norm encoder block from `x` [batch, seq, 64] to `out` (same
 * shape); its other node and tensor names start with `p`. Every Reshape
 * target holds 0 where the dim is copied from its input -- [0, 0, 4, 16]
 * splits the heads of [batch, seq, 64], and [0, 0, 64] merges [batch, seq,
 * 4, 16] back after the transpose -- so the block runs at any batch and
 * any seq. */
static void encoder_block(builder_t *b, const char *p, const char *x, const char *out)
{
    enum { D = 64, HEADS = 4, DH = 16, FF = 256 };
#define N(s) block_name(b, p, s)
#define NODE(op, name, ins, outs) \
    add_node(b, op, name, (const char *[])ins, (const char *[])outs, NULL, 0)
#define L(...) {__VA_ARGS__, NULL}
    char q[4][32], k[4][32], v[4][32], o[4][32], f1[4][32], f2[4][32];
    layer_norm(b, N("ln1"), x, N("ln1.out"));
    linear(b, N("q"), N("ln1.out"), D, D, q);
    linear(b, N("k"), N("ln1.out"), D, D, k);
    linear(b, N("v"), N("ln1.out"), D, D, v);
    add_shape(b, N("heads_shape"), (int64_t[]){0, 0, HEADS, DH}, 4);
    add_shape(b, N("model_shape"), (int64_t[]){0, 0, D}, 3);
    Onnx__AttributeProto **perm = pool_alloc(&b->pool, 3 * sizeof *perm);
    perm[0] = attr_ints(b, "perm", (int64_t[]){0, 2, 1, 3}, 4); /* [b,s,h,dh] -> [b,h,s,dh] */
    perm[1] = attr_ints(b, "perm", (int64_t[]){0, 2, 3, 1}, 4); /* [b,s,h,dh] -> [b,h,dh,s] */
    perm[2] = attr_ints(b, "perm", (int64_t[]){0, 2, 1, 3}, 4); /* [b,h,s,dh] -> [b,s,h,dh] */
    NODE("Reshape", N("q.heads"), L(q[3], N("heads_shape")), L(N("q.heads")));
    NODE("Reshape", N("k.heads"), L(k[3], N("heads_shape")), L(N("k.heads")));
    NODE("Reshape", N("v.heads"), L(v[3], N("heads_shape")), L(N("v.heads")));
    add_node(b, "Transpose", N("q.t"), (const char *[])L(N("q.heads")),
             (const char *[])L(N("q.t")), &perm[0], 1);
    add_node(b, "Transpose", N("k.t"), (const char *[])L(N("k.heads")),
             (const char *[])L(N("k.t")), &perm[1], 1);
    add_node(b, "Transpose", N("v.t"), (const char *[])L(N("v.heads")),
             (const char *[])L(N("v.t")), &perm[0], 1);
    add_const(b, N("attn.scale"), (int64_t[]){1}, 1, (const float[]){0.25f}, 1); /* 1/sqrt(16) */
    NODE("MatMul", N("scores"), L(N("q.t"), N("k.t")), L(N("scores")));
    NODE("Mul", N("scores.scaled"), L(N("scores"), N("attn.scale")), L(N("scores.scaled")));
    Onnx__AttributeProto **axis = pool_alloc(&b->pool, sizeof *axis);
    axis[0] = attr_int(b, "axis", -1);
    add_node(b, "Softmax", N("attn"), (const char *[])L(N("scores.scaled")),
             (const char *[])L(N("attn")), axis, 1);
    NODE("MatMul", N("context"), L(N("attn"), N("v.t")), L(N("context")));
    add_node(b, "Transpose", N("context.t"), (const char *[])L(N("context")),
             (const char *[])L(N("context.t")), &perm[2], 1);
    NODE("Reshape", N("context.merged"), L(N("context.t"), N("model_shape")),
         L(N("context.merged")));
    linear(b, N("o"), N("context.merged"), D, D, o);
    NODE("Add", N("residual1"), L(x, o[3]), L(N("residual1")));
    layer_norm(b, N("ln2"), N("residual1"), N("ln2.out"));
    linear(b, N("ff1"), N("ln2.out"), D, FF, f1);
    /* GELU as x * 0.5 * (1 + erf(x / sqrt(2))), PyTorch's export at opset 17. */
    add_const(b, N("gelu.sqrt2"), (int64_t[]){1}, 1, (const float[]){1.41421356f}, 1);
    add_const(b, N("gelu.one"), (int64_t[]){1}, 1, (const float[]){1.0f}, 1);
    add_const(b, N("gelu.half"), (int64_t[]){1}, 1, (const float[]){0.5f}, 1);
    NODE("Div", N("gelu.div"), L(f1[3], N("gelu.sqrt2")), L(N("gelu.div")));
    NODE("Erf", N("gelu.erf"), L(N("gelu.div")), L(N("gelu.erf")));
    NODE("Add", N("gelu.add"), L(N("gelu.erf"), N("gelu.one")), L(N("gelu.add")));
    NODE("Mul", N("gelu.mul"), L(f1[3], N("gelu.add")), L(N("gelu.mul")));
    NODE("Mul", N("gelu.out"), L(N("gelu.mul"), N("gelu.half")), L(N("gelu.out")));
    linear(b, N("ff2"), N("gelu.out"), FF, D, f2);
    NODE("Add", N("residual2"), L(N("residual1"), f2[3]), L(out));
#undef N
#undef NODE
#undef L
}

/* One block at a fixed seq of 64. */
static int make_transformer(const char *dir)
{
    builder_t b;
    builder_init(&b, 3);
    encoder_block(&b, "", "embeddings", "hidden");
    int rc = write_model(&b, dir, "transformer", 17,
                         value_info(&b, "embeddings", (int64_t[]){DIM_BATCH, 64, 64}, 3),
                         value_info(&b, "hidden", (int64_t[]){DIM_BATCH, 64, 64}, 3));
    pool_free(&b.pool);
    return rc;
}

/* Two blocks, batch and seq both symbolic. */
static int make_encoder(const char *dir)
{
    builder_t b;
    builder_init(&b, 4);
    encoder_block(&b, "layer0.", "embeddings", "layer0.out");
    encoder_block(&b, "layer1.", "layer0.out", "hidden");
    int rc = write_model(&b, dir, "encoder", 17,
                         value_info(&b, "embeddings", (int64_t[]){DIM_BATCH, DIM_SEQ, 64}, 3),
                         value_info(&b, "hidden", (int64_t[]){DIM_BATCH, DIM_SEQ, 64}, 3));
    pool_free(&b.pool);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: make_models DIR\n");
        return 2;
    }
    return make_mlp(argv[1]) || make_cnn(argv[1]) || make_transformer(argv[1]) ||
           make_encoder(argv[1]);
}
