/* onnx_impl.h -- what the ONNX loader's files share: the graph's pool
 * (engine/onnx_load.c), TensorProto decoding (engine/onnx_tensor.c), node
 * attributes (engine/onnx_attr.c), the schema check (engine/onnx_schema.c)
 * and the topological sort (engine/onnx_sort.c). Engine-internal; includes the header protoc-c
 * generates from onnx.proto.
 *
 * Threading: one load runs on one thread; protos are only read. */
#ifndef FS_ENGINE_ONNX_IMPL_H
#define FS_ENGINE_ONNX_IMPL_H

#include <stddef.h>

#include "engine/graph.h"
#include "engine/ops/list.h" /* eng_op_id_t */
#include "engine/tensor.h"
#include "onnx/onnx.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest reason the loader gives for one unsupported node or value. */
#define ONNX_REASON_MAX 200

/* The memory a graph's IR lives in (eng_graph_t.pool; engine/onnx_pool.c):
 * bump allocation, freed whole by eng_graph_destroy, which also frees the
 * constants' data through the pool's weight allocator. */
typedef struct onnx_pool onnx_pool_t;

/* A pool whose weight allocator is a copy of *wa (NULL, or NULL callbacks:
 * malloc/free); NULL when out of memory. Freed with onnx_pool_destroy, or
 * with eng_graph_destroy once a graph lives in it. */
onnx_pool_t *onnx_pool_create(const eng_weight_alloc_t *wa);
/* Frees every chunk and the pool, not constant data. NULL: no-op. */
void onnx_pool_destroy(onnx_pool_t *p);
/* Memory for constant data from the pool's weight allocator, or NULL. */
void *onnx_pool_weight_alloc(const onnx_pool_t *p, size_t bytes);

/* Zeroed, max_align_t-aligned bytes (0 bytes: a valid pointer), or NULL
 * when out of memory. */
void *onnx_pool_alloc(onnx_pool_t *p, size_t bytes);
/* A NUL-terminated copy of n bytes of s, or NULL when out of memory. */
char *onnx_pool_strndup(onnx_pool_t *p, const char *s, size_t n);
/* A copy of s ("" for NULL), or NULL when out of memory. */
char *onnx_pool_strdup(onnx_pool_t *p, const char *s);

/* What a TensorProto holds, checked against its own dims. */
typedef struct onnx_tensor_info {
    eng_dtype_t dtype;
    eng_shape_t shape;
    size_t bytes;          /* numel * element size: what onnx_tensor_read writes */
} onnx_tensor_info_t;

/* Checks tp without reading any file: dtype, dims, and that its data (raw,
 * typed fields, or an external reference's keys and path) agrees with
 * them. `label` names the tensor in messages ("initializer 'w'"). 0 and
 * *out, or FS_ENOTSUP (string or unknown dtype, rank above ENG_MAX_RANK,
 * segmented data), FS_EPARSE (no dtype, a negative dim, data whose size does
 * not match the dims, bad external_data keys), FS_EINVAL (an external
 * location that is absolute or contains ".."). *out is untouched on error. */
int onnx_tensor_info(const Onnx__TensorProto *tp, const char *label, onnx_tensor_info_t *out);

/* Writes tp's data, checked by onnx_tensor_info into `info`, to dst
 * (info->bytes), in the engine's layout (little-endian, one element per
 * dtype size). External data is read from the file at dir/location; `dir`
 * may be NULL only for tensors without external data. 0, or FS_EINVAL (no
 * dir, or the location resolves outside realpath(dir)), FS_EIO (the file
 * cannot be read, or offset and length run past its end). On error dst
 * holds partial data. */
int onnx_tensor_read(const Onnx__TensorProto *tp, const onnx_tensor_info_t *info,
                     const char *label, const char *dir, void *dst);

/* A node's attributes as the IR holds them. */
typedef struct onnx_attrs {
    eng_attr_t *attrs;        /* in the pool */
    int n_attrs;
    const char *subgraph;     /* the first GRAPH(S) attribute's name, or NULL */
    const char *problem;      /* the first other attribute the engine cannot
                                 hold, as a reason for the report, or NULL */
} onnx_attrs_t;

/* Copies np's attributes into the pool, tensors with their data (external
 * files from `dir`); what the engine cannot hold is left out and noted in
 * out->subgraph / out->problem. With `graphs` (np's op runs subgraphs) a
 * GRAPH attribute gets its slot, g NULL, for the loader to fill; without,
 * it is noted in out->subgraph like GRAPHS always is. `nl` names the node
 * in messages ("node 'x'"). 0 and *out, or FS_EINVAL (an attribute without
 * a name), FS_EPARSE (a corrupt tensor), FS_EIO / FS_EINVAL (its external
 * data), FS_ENOMEM; the pool keeps what was copied until the graph goes. */
int onnx_attrs_load(onnx_pool_t *p, const Onnx__NodeProto *np, const char *nl, const char *dir,
                    bool graphs, onnx_attrs_t *out);

/* An attribute's type: its `type` field, or, before IR 2 (no type), the
 * type of the first value field that is set; ENG_ATTR_UNDEFINED when
 * neither. Cannot fail. */
eng_attr_type_t onnx_attr_type(const Onnx__AttributeProto *ap);

/* Checks default-domain node np, whose op is list.h's `op`, against the
 * op's ONNX schema in force at `opset` (engine/op_schema.h): the op exists
 * at that opset; input and output counts within the schema's bounds; no
 * required input or output named ""; every attribute named once, known to
 * the schema and of its type; every required attribute present. `nl` names
 * the node ("node 'x'"). 0, or FS_EINVAL with a message naming the node,
 * the op and what is wrong (the first problem found); FS_ENOTSUP when the
 * schema table has no entry for the op (built without regenerating it). */
int onnx_schema_check(const Onnx__NodeProto *np, eng_op_id_t op, int opset, const char *nl);

/* Orders g's nodes topologically (engine/onnx_sort.c says how), renumbers
 * producers, and writes order[j] = the old index of the node now at j
 * (n_nodes entries). 0, FS_EINVAL (a cycle: g is unchanged, *cycle is the
 * old index of a node on it, and the message names that node), or
 * FS_ENOMEM. */
int onnx_graph_sort(eng_graph_t *g, int *order, int *cycle);

#ifdef __cplusplus
}
#endif
#endif
