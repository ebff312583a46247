/* op_schema.h -- ONNX's schema of each op flatserve runs: per op of
 * engine/ops/list.h, every version in force at some default-domain opset
 * from 6 to 28, as ONNX's own definitions state it (the table is generated
 * by tools/gen_op_schema.py into engine/ops/schema.inc).
 *
 * A version says how many inputs and outputs a node may have, which of them
 * are required, and which attributes it may carry, of which type, and which
 * it must. The loader enforces it on every default-domain node of a list.h
 * op (engine/onnx_schema.c), so nothing downstream meets a required value
 * that is missing; the planner and the executor assert so
 * (eng_op_ctx_complete).
 *
 * Types and invariants:
 *  - eng_op_param: one formal parameter. A VARIADIC one is the last and
 *    stands for itself and every slot after it; its first min_arity slots
 *    are required. SINGLE slots are required, OPTIONAL ones may be absent
 *    (named "" in the model).
 *  - eng_op_schema: min_inputs <= max_inputs (ENG_OP_ARITY_MAX: no bound,
 *    the last input is variadic), likewise for outputs; the parameter and
 *    attribute arrays have n_* entries (NULL when 0), attributes sorted by
 *    name.
 *
 * Threading: the table is static const; every function may be called from
 * any thread. */
#ifndef FS_ENGINE_OP_SCHEMA_H
#define FS_ENGINE_OP_SCHEMA_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/graph.h"    /* eng_attr_type_t */
#include "engine/ops/list.h" /* eng_op_id_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The max_inputs/max_outputs of a schema whose last parameter is variadic
 * (ONNX's own bound, INT32_MAX). */
#define ENG_OP_ARITY_MAX 2147483647

typedef enum eng_op_param_option {
    ENG_OP_PARAM_SINGLE = 0,   /* required */
    ENG_OP_PARAM_OPTIONAL = 1, /* may be absent */
    ENG_OP_PARAM_VARIADIC = 2, /* the last: min_arity or more slots */
} eng_op_param_option_t;

typedef struct eng_op_param {
    const char *name;          /* ONNX's name ("X", "axes") */
    uint8_t option;            /* eng_op_param_option_t */
    uint8_t min_arity;         /* VARIADIC: the least number of slots; else 0 */
} eng_op_param_t;

typedef struct eng_op_attr_spec {
    const char *name;
    uint8_t type;              /* eng_attr_type_t: ONNX's AttributeType */
    bool required;
} eng_op_attr_spec_t;

typedef struct eng_op_schema {
    uint8_t since_version;     /* the opset that introduced this version */
    int min_inputs, max_inputs;
    int min_outputs, max_outputs;
    uint8_t n_in_params;
    const eng_op_param_t *in_params;
    uint8_t n_out_params;
    const eng_op_param_t *out_params;
    uint8_t n_attrs;
    const eng_op_attr_spec_t *attrs;
} eng_op_schema_t;

/* The version of op `op` in force at default-domain `opset`: the one with
 * the largest since_version <= opset (for an opset newer than the table's
 * onnx release knew, its latest). NULL when ONNX defines no version of the
 * op at that opset yet (Gelu before opset 20). Cannot fail. */
const eng_op_schema_t *eng_op_schema_find(eng_op_id_t op, int opset);

/* The op's oldest version in the table (the one in force at opset 6, or
 * the one that introduced the op). NULL only when the table is older than
 * list.h (an op added without running tools/gen_op_schema.py; the
 * engine_op_schema tests fail then): the generator fails rather than leave
 * an op of list.h without a schema. */
const eng_op_schema_t *eng_op_schema_first(eng_op_id_t op);

/* The onnx release the table was generated from ("1.23.1"), and the newest
 * opset that release knew. */
const char *eng_op_schema_onnx_version(void);
int eng_op_schema_opset_known(void);

/* The formal parameter that input (output) slot i belongs to: the i-th, or
 * the variadic last one for a slot past the list; NULL when there is none
 * (a slot past a list without a variadic end). *required says whether the
 * slot must be present. Cannot fail. */
const eng_op_param_t *eng_op_schema_input(const eng_op_schema_t *s, int i, bool *required);
const eng_op_param_t *eng_op_schema_output(const eng_op_schema_t *s, int i, bool *required);

/* The attribute spec named `name`, or NULL when the schema has none. */
const eng_op_attr_spec_t *eng_op_schema_attr(const eng_op_schema_t *s, const char *name);

struct eng_op_ctx;

/* Whether ctx's input and output counts are within its node's schema's
 * bounds and every slot the schema requires is present (non-NULL); a
 * control-flow node's implicit inputs (graph.h) are outside the schema and
 * not counted, and so is a fused MatMul's bias (graph.h; it must be
 * present). For assert() before an op's infer or kernel
 * runs: the loader refused every node where that could fail. A node the
 * engine wrote itself at an opset before its op existed (engine/fuse.c's
 * Gelu) is held to the op's oldest version. */
bool eng_op_ctx_complete(const struct eng_op_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
