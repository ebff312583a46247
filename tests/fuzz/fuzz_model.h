/* fuzz_model.h -- builds small ONNX models in memory for the fuzz targets
 * and the seed generator: protobuf-c structs filled field by field, packed
 * to bytes. tests/engine/onnx_build.h does the same for the Criterion
 * suites but asserts through Criterion; this one runs inside a libFuzzer
 * process too, so it records the first failure instead and
 * fuzz_mb_pack reports it.
 *
 * Every piece comes from one list that fuzz_mb_free releases. A builder
 * that ran out of memory (or past its fixed capacities) ignores every
 * later call and packs to FS_ENOMEM / FS_ERANGE.
 *
 * Threading: a builder belongs to one thread. */
#ifndef FS_TESTS_FUZZ_FUZZ_MODEL_H
#define FS_TESTS_FUZZ_FUZZ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "onnx/onnx.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUZZ_MB_MAX_NODES 64
#define FUZZ_MB_MAX_LIST 16
#define FUZZ_MB_MAX_ATTRS 8
#define FUZZ_MB_MAX_DEPTH 4

/* ONNX TensorProto.DataType values the builders use. */
#define FUZZ_DT_FLOAT 1
#define FUZZ_DT_UINT8 2
#define FUZZ_DT_INT32 6
#define FUZZ_DT_INT64 7
#define FUZZ_DT_BOOL 9

typedef struct fuzz_mb {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    Onnx__NodeProto *nodes[FUZZ_MB_MAX_NODES];
    Onnx__TensorProto *inits[FUZZ_MB_MAX_LIST];
    Onnx__ValueInfoProto *inputs[FUZZ_MB_MAX_LIST], *outputs[FUZZ_MB_MAX_LIST];
    Onnx__GraphProto *open[FUZZ_MB_MAX_DEPTH]; /* subgraphs being filled, innermost last */
    int depth;
    void **allocs;             /* every piece handed out, freed by fuzz_mb_free */
    size_t n_allocs, cap_allocs;
    int failed;                /* 0, or the first failure (FS_ENOMEM, FS_ERANGE) */
} fuzz_mb_t;

/* A model of IR version `ir` importing the default domain at `opset`.
 * Cannot fail (a failure to allocate shows at pack). */
void fuzz_mb_init(fuzz_mb_t *b, int64_t ir, int64_t opset);

/* A graph input or output: dtype 0 declares no type, rank < 0 no shape; a
 * dim of -1 takes its symbol from params[d] (params or params[d] NULL:
 * an unknown dim). */
void fuzz_mb_input(fuzz_mb_t *b, const char *name, int dtype, int rank, const int64_t *dims,
                   const char *const *params);
void fuzz_mb_output(fuzz_mb_t *b, const char *name, int dtype, int rank, const int64_t *dims,
                    const char *const *params);

/* Appends a node; inputs and outputs are comma-separated names ("a,,b":
 * an absent optional input in the middle). Returns the node for the
 * attribute calls, or NULL once the builder has failed (the attribute
 * calls then do nothing). */
Onnx__NodeProto *fuzz_mb_node(fuzz_mb_t *b, const char *op, const char *inputs,
                              const char *outputs);
void fuzz_mb_attr_i(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, int64_t v);
void fuzz_mb_attr_f(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, float v);
void fuzz_mb_attr_s(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, const char *s);
void fuzz_mb_attr_ints(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, const int64_t *v,
                       size_t count);
/* A TENSOR attribute (Constant's "value") of float32 data. */
void fuzz_mb_attr_tensor_f(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name, int rank,
                           const int64_t *dims, const float *v);

/* An initializer of `rank` dims holding `v` (numel elements) as raw data. */
void fuzz_mb_init_f(fuzz_mb_t *b, const char *name, int rank, const int64_t *dims,
                    const float *v);
void fuzz_mb_init_i64(fuzz_mb_t *b, const char *name, int rank, const int64_t *dims,
                      const int64_t *v);

/* Starts subgraph attribute `name` of node n (If's branches, Loop's and
 * Scan's body): until fuzz_mb_end_g, the input, output, node and
 * initializer calls fill it (each list up to FUZZ_MB_MAX_LIST). Subgraphs
 * nest up to FUZZ_MB_MAX_DEPTH. */
void fuzz_mb_begin_g(fuzz_mb_t *b, Onnx__NodeProto *n, const char *name);
/* Ends the innermost subgraph fuzz_mb_begin_g started. */
void fuzz_mb_end_g(fuzz_mb_t *b);

/* 0 and the packed model in *out (caller frees with free()) and *len, or
 * the builder's failure (FS_ENOMEM, FS_ERANGE past a capacity) with a
 * message. The builder stays usable for fuzz_mb_free either way. */
int fuzz_mb_pack(fuzz_mb_t *b, uint8_t **out, size_t *len);

/* Frees everything the builder allocated (not what fuzz_mb_pack returned). */
void fuzz_mb_free(fuzz_mb_t *b);

#ifdef __cplusplus
}
#endif
#endif
