/* graph.h -- the engine's IR: values, nodes and attributes of a loaded ONNX
 * graph, nodes in topological order. Engine-internal: the server sees only
 * engine.h.
 *
 * Types and invariants:
 *  - eng_value: every tensor name in the graph, once. Graph inputs (kind
 *    INPUT), constants (CONST: initializers and Constant nodes' outputs,
 *    with host data), and node outputs (NODE). `dtype`/`rank`/`dims` are
 *    what the model declares (dims may be symbolic: value -1 with `param`
 *    set, or unknown: -1 and NULL); concrete shapes come from the plan.
 *  - eng_node: inputs and outputs index `values`; an absent optional input
 *    or output is -1. Nodes are in topological order: a node's inputs are
 *    produced by earlier nodes, constants or graph inputs.
 *  - Subgraphs (control flow: If's branches, Loop's and Scan's body) are
 *    graphs of their own, held by their node's GRAPH attribute, loaded by
 *    the same loader. A name a subgraph reads but does not define is a
 *    value of an enclosing graph (at any depth): the subgraph holds it as
 *    an OUTER value bound to its parent graph's value (outer/outer_from),
 *    and the node holding the subgraph lists those parent values as its
 *    last n_implicit inputs, so the parent's order, consumer counts and
 *    lifetimes see every read its subgraphs make. A subgraph's constants
 *    are model weights like the main graph's.
 *  - Values of the whole tree are numbered for per-model tables: value v
 *    of graph g is number g->value_base + v, below the model graph's
 *    n_tree_values.
 *  - All strings and arrays belong to the graph and live as long as it.
 *
 * Threading: immutable after load; shared by every plan and batch. */
#ifndef FS_ENGINE_GRAPH_H
#define FS_ENGINE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ONNX AttributeProto.AttributeType values. The IR holds FLOAT to STRINGS;
 * the rest name what a schema declares or a model gives (messages). */
typedef enum eng_attr_type {
    ENG_ATTR_UNDEFINED = 0,
    ENG_ATTR_FLOAT = 1,
    ENG_ATTR_INT = 2,
    ENG_ATTR_STRING = 3,
    ENG_ATTR_TENSOR = 4,
    ENG_ATTR_GRAPH = 5,
    ENG_ATTR_FLOATS = 6,
    ENG_ATTR_INTS = 7,
    ENG_ATTR_STRINGS = 8,
    ENG_ATTR_TENSORS = 9,
    ENG_ATTR_GRAPHS = 10,
    ENG_ATTR_SPARSE_TENSOR = 11,
    ENG_ATTR_SPARSE_TENSORS = 12,
    ENG_ATTR_TYPE_PROTO = 13,
    ENG_ATTR_TYPE_PROTOS = 14,
} eng_attr_type_t;

/* ONNX's name of an attribute type ("INT", "FLOATS"); "UNDEFINED" for 0,
 * "unknown" past TYPE_PROTOS. Never NULL; cannot fail. */
const char *eng_attr_type_name(eng_attr_type_t t);

typedef struct eng_attr {
    const char *name;
    eng_attr_type_t type;
    float f;                  /* FLOAT */
    int64_t i;                /* INT */
    const char *s;            /* STRING (NUL-terminated; s_len bytes) */
    size_t s_len;
    size_t n;                 /* FLOATS / INTS / STRINGS: element count */
    const float *floats;
    const int64_t *ints;
    const char *const *strings;
    eng_tensor_t t;           /* TENSOR: host data owned by the graph */
    const struct eng_graph *g; /* GRAPH: the subgraph (its node's op runs it) */
} eng_attr_t;

typedef struct eng_dim {
    int64_t value;            /* >= 0 known; -1 symbolic or unknown */
    const char *param;        /* the symbol ("batch") or NULL */
} eng_dim_t;

typedef enum eng_value_kind {
    ENG_VALUE_INPUT = 0,
    ENG_VALUE_CONST = 1,
    ENG_VALUE_NODE = 2,
    ENG_VALUE_OUTER = 3,      /* a subgraph's read of an enclosing graph's value */
} eng_value_kind_t;

typedef struct eng_value {
    const char *name;
    eng_value_kind_t kind;
    eng_dtype_t dtype;        /* ENG_DT_UNDEFINED when not declared */
    int rank;                 /* -1 when not declared */
    eng_dim_t dims[ENG_MAX_RANK];
    eng_tensor_t constant;    /* CONST: dtype, shape and host data */
    int producer;             /* node index, or -1 */
    int n_consumers;          /* node inputs that read it */
    bool is_output;           /* a graph output */
} eng_value_t;

struct eng_io_info;

/* The declaration of `v` as engine.h shows it (strings borrowed from the
 * graph); engine/io.c. Cannot fail. */
void eng_value_io_info(const eng_value_t *v, struct eng_io_info *out);

struct eng_op_def;

/* The activation a GEMM node applies last when the loader fused one into it
 * (engine/fuse_epilogue.c); each is the formula of the op it replaced. */
typedef enum eng_act {
    ENG_ACT_NONE = 0,
    ENG_ACT_RELU = 1,         /* Relu: x < 0 ? 0 : x (NaN passes) */
    ENG_ACT_GELU = 2,         /* Gelu, approximate 'none' (erf) */
    ENG_ACT_GELU_TANH = 3,    /* Gelu, approximate 'tanh' */
} eng_act_t;

typedef struct eng_node {
    const char *name;         /* "" when the model gave none */
    const char *op_type;
    const char *domain;       /* "" for the default domain */
    int n_inputs;
    const int *inputs;        /* value indices; -1 absent */
    /* The last n_implicit of inputs: values of this graph the node's
     * subgraphs read (each once); 0 for every node without a subgraph.
     * Outside the op's schema: an op sees n_inputs - n_implicit inputs. */
    int n_implicit;
    int n_outputs;
    const int *outputs;
    int n_attrs;
    const eng_attr_t *attrs;
    const struct eng_op_def *op; /* resolved at load */
    /* MatMul and Attention only, and never from a model file: input 1
     * holds B (Attention: K) with its last two dims swapped ([..., N, K];
     * Attention: [B, kv_heads, head, kv_len], 4-D only), and the kernels
     * read it transposed. Set at load by engine/fuse.c when it drops a
     * Transpose of a constant, so that the constant is stored once (a tied
     * embedding: a Gather and the LM head read one table), and by
     * engine/fuse_attention.c on an Attention node that reads an
     * exporter's K^T. */
    bool trans_b;
    /* Attention only, and never from a model file: set by
     * engine/fuse_attention.c on a node fused from an exported chain whose
     * declared shapes left dims unknown, so that the load could not prove
     * the chain's broadcasting equal to the op's. The op then checks at
     * plan time what the proof would have: the mask's last dim is the
     * keys' count and K's heads are Q's or 1; shapes where the two differ
     * are refused (FS_EINVAL, naming them), never computed otherwise. */
    bool attn_check;
    /* MatMul and Gemm only, and never from a model file: an epilogue the
     * loader fused into the node (engine/fuse_epilogue.c). With `bias`
     * set, input 2 is a vector of N elements (shape [N] or [1, ..., 1, N])
     * in Y's dtype, added to every row of the finished product, as the Add
     * it replaced added it: for a MatMul a third input, outside MatMul's
     * ONNX schema the way implicit inputs are outside theirs; for a Gemm
     * its C, with beta 1. `act` is applied to the result last. */
    bool bias;
    eng_act_t act;
    /* MatMul with `bias` only, never from a model file: input 3 is R, of
     * Y's dtype and shape (engine/fuse_epilogue.c proves the shape at
     * load, the op checks it when it plans), added to the biased product
     * as the residual Add it replaced added it: Y = (A x B + bias) + R.
     * `act` is then none. */
    bool residual;
    /* Set at load by engine/layout.c, never from a model file. Conv, the
     * pools (MaxPool, AveragePool) and GlobalAveragePool / GlobalMaxPool
     * of rank 4: X and Y are NHWC ([N, H, W, C]) rather than NCHW, and a
     * Conv's W is [M, kH, kW, C/group]. */
    bool channels_last;
    /* Conv with channels_last only, set with it: Y = relu?(conv(X, W) + B
     * + R?) -- conv_residual: input 3 is R, of Y's dtype and shape, added
     * before the ReLU; conv_relu: max(0, .) last. */
    bool conv_residual;
    bool conv_relu;
    /* Conv with channels_last only, set at load from
     * eng_model_config_t.conv (eng_layout_conv_algo): conv_im2col, compute
     * it as im2col and a GEMM even where the device has an implicit GEMM
     * for it; conv_implicit, the implicit GEMM wherever it applies. Neither:
     * the device's choice per run (engine/cuda/conv_igemm.cu). */
    bool conv_im2col, conv_implicit;
    /* FusedElementwise (an engine-internal op) only, set by
     * engine/fuse_chain.c: the program the node runs (engine/ew_program.h),
     * in the graph's pool. */
    const struct eng_ew_program *ew;
} eng_node_t;

typedef struct eng_graph {
    int64_t ir_version;
    int opset;                /* default-domain opset */
    size_t n_values;
    eng_value_t *values;
    size_t n_nodes;
    eng_node_t *nodes;        /* topological order */
    size_t n_inputs;
    const int *inputs;        /* graph inputs that are not constants */
    size_t n_outputs;
    const int *outputs;
    size_t weight_bytes;      /* bytes of constant data */
    void *pool;               /* the memory everything above lives in (shared
                                 by the model graph and all its subgraphs) */
    /* Subgraphs: the graph holding the node that holds this one (NULL for
     * the model's graph), and the OUTER values: outer[k] is bound, when
     * the subgraph runs, to the parent graph's value outer_from[k]. */
    const struct eng_graph *parent;
    size_t n_outer;
    const int *outer;
    const int *outer_from;
    size_t value_base;        /* this graph's values' first number in the tree */
    size_t n_tree_values;     /* the model graph: values of it and every subgraph */
} eng_graph_t;

/* Where constant data (initializers, Constant outputs) is put: the model
 * allocates weights from its cache under its owner tag. NULL callbacks mean
 * malloc/free. alloc returns NULL when out of memory. */
typedef struct eng_weight_alloc {
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *ptr);
    void *user;
} eng_weight_alloc_t;

/* Memory for constant data through `wa` (NULL, or NULL callbacks:
 * malloc), or NULL when out of memory; and its release. The one place that
 * rule lives, for the loader and for folding. */
void *eng_weights_alloc(const eng_weight_alloc_t *wa, size_t bytes);
void eng_weights_free(const eng_weight_alloc_t *wa, void *ptr);

/* Parses an ONNX ModelProto into a graph (engine/onnx_load.c). `dir` (may be
 * NULL) is where external data files live; a location that leaves it is
 * rejected. `wa` may be NULL. 0 and *out (caller frees with
 * eng_graph_destroy), or FS_EPARSE (corrupt/truncated: what could not be
 * read), FS_ENOTSUP (IR version outside 3..13, default-domain opset outside
 * 6..28 (see onnx_load.c), another domain, unsupported ops/attributes/dtypes: one message
 * listing every offending node: name, op type, opset, what is missing),
 * FS_EINVAL (a malformed graph: unknown input name, a cycle; a node of an
 * op the engine runs that breaks the op's ONNX schema: the first such node,
 * naming it, its op and what is wrong), FS_EIO
 * (external data), FS_ENOMEM. Nothing stays allocated on error. */
int eng_graph_load(const void *data, size_t len, const char *dir, const eng_weight_alloc_t *wa,
                   eng_graph_t **out);
/* Numbers the values of g's tree (value_base, n_tree_values) again, after
 * a rewrite added values to one of its graphs (engine/fuse.c). The loader
 * numbers a graph it returns. Cannot fail. */
void eng_graph_number(eng_graph_t *g);
/* Frees the graph, its subgraphs and, through `wa` given at load, all
 * their constant data. Only for the model graph (a subgraph goes with it). */
void eng_graph_destroy(eng_graph_t *g);
/* The one node reading value v, when v is an intermediate a load-time
 * rewrite may absorb: a node output, no graph output, read by exactly one
 * node input; else -1. For the fusion passes (engine/fuse*.c). */
int eng_graph_sole_reader(const eng_graph_t *g, int v);
/* The same counting only nodes not done: the one live node input reading
 * v, done nodes' inputs (a fused chain's dead nodes, which keep counting in
 * n_consumers) aside; else -1. */
int eng_graph_sole_live_reader(const eng_graph_t *g, const bool *done, int v);
/* Whether node i (may be -1: false) is a live (not done) default-domain
 * `op` node with one output: the node a load-time rewrite may take into a
 * chain. */
bool eng_graph_live_op(const eng_graph_t *g, const bool *done, int i, const char *op);
/* Whether two declared dims are provably the same: one known size, or one
 * symbol (dim_param) on both. For the fusion passes' shape proofs. */
bool eng_dim_same(const eng_dim_t *a, const eng_dim_t *b);

/* Parses one serialized TensorProto (the conformance data's input_N.pb /
 * output_N.pb) into a host tensor the caller frees with eng_tensor_free;
 * *name (may be NULL) receives a malloc'd copy of its name or NULL. Errors
 * as eng_graph_load. */
int eng_tensor_load_proto(const void *data, size_t len, eng_tensor_t **out, char **name);

/* Attribute lookup. eng_node_attr: the attribute or NULL. The typed
 * getters return `def` when absent (or of another type). For an op of
 * engine/ops/list.h in the default domain "another type" cannot happen in
 * a loaded graph: the loader checks every attribute against the op's ONNX
 * schema (engine/onnx_schema.c), so a present attribute has its schema's
 * type, and a getter's default stands only for an absent one. */
const eng_attr_t *eng_node_attr(const eng_node_t *n, const char *name);
int64_t eng_attr_i(const eng_node_t *n, const char *name, int64_t def);
float eng_attr_f(const eng_node_t *n, const char *name, float def);
const char *eng_attr_s(const eng_node_t *n, const char *name, const char *def);
/* INTS / FLOATS: the array and *count, or NULL (and *count 0) when absent. */
const int64_t *eng_attr_ints(const eng_node_t *n, const char *name, size_t *count);
const float *eng_attr_floats(const eng_node_t *n, const char *name, size_t *count);
/* TENSOR: the tensor or NULL. */
const eng_tensor_t *eng_attr_tensor(const eng_node_t *n, const char *name);
/* GRAPH: the subgraph or NULL. */
const eng_graph_t *eng_attr_graph(const eng_node_t *n, const char *name);

#ifdef __cplusplus
}
#endif
#endif
