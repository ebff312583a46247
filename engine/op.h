/* op.h -- the op tables: what each ONNX op means (device-neutral) and how
 * each device computes it.
 *
 * An op definition (eng_op_def_t) validates a node at load and infers its
 * outputs' dtypes and shapes from its inputs'. A kernel (eng_kernel_t) computes
 * the outputs on one device: each device has its own table (engine/cpu/ for
 * the host, engine/cuda/ for NVIDIA GPUs), indexed by the op's id and
 * reached through that device's backend table (engine/backend.h). Every op
 * is listed once, in engine/ops/list.h; the ids, the definitions' and the
 * kernels' names and the tables all come from that list. All see one context
 * type, eng_op_ctx_t:
 *  - at inference, every present input has dtype and shape; its data is
 *    set when the value is known before running (a constant, or a shape
 *    computed at plan time), else NULL. infer sets each output's dtype and
 *    shape, and may compute the output data itself when all it needs is
 *    known and the output is small (shape arithmetic) -- the planner then
 *    treats the output as known (constant folding at plan time);
 *  - at run, every input and output has dtype, shape and data (outputs
 *    point into the activation block; an in-place output may share its
 *    input's memory). On a GPU the data pointers are device memory; values
 *    that were known before running (constants, plan-time results) are also
 *    in host memory through eng_ctx_host_in. Every input an op's infer read
 *    to decide output shapes (Reshape's shape, Slice's starts, TopK's k, ...)
 *    is there; a scalar operand that does not decide shapes (Clip's min, Pad's
 *    constant_value) may be known only on the device, so a device kernel
 *    reads it there.
 * Semantics follow the ONNX operator docs for opsets 6 to 28; an op reads
 * ctx->opset for version differences (Softmax's axis before 13, Split's
 * `split` input from 13, ...).
 *
 * Errors: FS_EINVAL for a node that is wrong for its inputs (message: node
 * name, op, expected vs actual), FS_ENOTSUP for an unsupported attribute
 * value or dtype (message says which), FS_EDYNAMIC from infer when an
 * output shape needs an input value that is not known before running.
 *
 * Threading: op tables are static const; kernels may be called from several
 * threads at once on different contexts. */
#ifndef FS_ENGINE_OP_H
#define FS_ENGINE_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h" /* eng_device_kind_t */
#include "engine/graph.h"
#include "engine/ops/list.h" /* eng_op_id_t, ENG_OPS */
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_op_ctx {
    const eng_node_t *node;
    int opset;                      /* the model's default-domain opset */
    int n_inputs;
    const eng_tensor_t *const *inputs; /* NULL entry: absent optional input */
    int n_outputs;
    eng_tensor_t *const *outputs;   /* NULL entry: output not requested */
    /* Set by eng_op_infer when the op does not compute float16/bfloat16
     * but does compute float: this half dtype (ENG_DT_UNDEFINED, 0, when
     * the op takes its inputs as they are). eng_op_scratch_bytes and
     * eng_op_run then run the float kernel on float copies of the half
     * inputs and round its float outputs to this dtype, as ONNX Runtime's
     * CPU provider does with the casts it inserts; a caller keeps the value
     * from infer to run (a plan step stores it). */
    eng_dtype_t widen;
    void *scratch;                  /* run: the kernel's workspace, if it asked */
    size_t scratch_bytes;
    int n_threads;                  /* run: threads the kernel may use (>= 1) */
    /* device runs: the model instance's backend state (engine/cuda: struct
     * eng_cuda, through eng_cuda_ctx()); NULL on the CPU */
    void *instance;
    /* Device runs only (NULL on the CPU): per input, the host copy of its
     * value when known before running (else a NULL entry). */
    const eng_tensor_t *const *host_inputs;
} eng_op_ctx_t;

typedef struct eng_op_def {
    eng_op_id_t id;                 /* default domain; eng_op_type() names it */
    /* Optional: load-time check of attributes against what is supported. */
    int (*check)(const eng_node_t *n, int opset);
    /* Required: outputs' dtypes and shapes (and data, when cheap and
     * known), as described above. */
    int (*infer)(eng_op_ctx_t *ctx);
    /* The input whose buffer output 0 may take over when that input dies at
     * this node (same dtype and size): element-wise ops and views. -1: none. */
    int inplace_input;
} eng_op_def_t;

typedef struct eng_kernel {
    /* Computes the outputs. A device kernel only queues work on
     * its instance's stream: it never synchronises, and returns an error only
     * for what it can tell before or at launch. */
    int (*run)(eng_op_ctx_t *ctx);
    /* Optional: workspace bytes for this context (shapes set), in the
     * device's memory. */
    size_t (*scratch_bytes)(const eng_op_ctx_t *ctx);
} eng_kernel_t;

/* Defines eng_op_<op>, the definition of list.h's op `op`. */
#define ENG_OP_DEF(op, chk, inf, inplace)                                      \
    const eng_op_def_t eng_op_##op = {                                         \
        .id = ENG_OP_##op, .check = chk, .infer = inf, .inplace_input = inplace}

/* Every op's definition, eng_op_<OpType> (in engine/ops/<family>.c). */
#define ENG_OP_DEF_DECL_(op, cpu, cuda) extern const eng_op_def_t eng_op_##op;
ENG_OPS(ENG_OP_DEF_DECL_)
#undef ENG_OP_DEF_DECL_

/* The tables, indexed by eng_op_id_t: every op's definition; each device's
 * kernel, NULL where list.h marks the op N for that device.
 * eng_cuda_kernels exists only in a CUDA build (FS_HAVE_CUDA). */
extern const eng_op_def_t *const eng_op_defs[ENG_OP_COUNT];
extern const eng_kernel_t *const eng_cpu_kernels[ENG_OP_COUNT];
extern const eng_kernel_t *const eng_cuda_kernels[ENG_OP_COUNT];

/* The op type string of an id ("Add" for ENG_OP_Add); id must be below
 * ENG_OP_COUNT. Cannot fail. */
const char *eng_op_type(eng_op_id_t id);

/* The definition of an op type, or NULL; NULL for an engine-internal op
 * (eng_op_is_internal), which no model may name. A device's kernel for it
 * comes from that device's table (engine/backend.h: eng_backend_kernel). */
const eng_op_def_t *eng_op_find(const char *op_type);

/* Whether op `id` is engine-internal (list.h's ENG_OPS_INTERNAL: made by
 * load-time rewrites, never read from a model). Cannot fail. */
static inline bool eng_op_is_internal(eng_op_id_t id)
{
    return (int)id >= ENG_OP_INTERNAL_FIRST;
}

/* Whether `op` runs subgraphs (If, Loop, Scan: engine/ops/list.h's
 * control family): the loader loads its GRAPH attributes, and the dynamic
 * executor runs it (engine/exec_control.c); no device has a kernel for it,
 * and its infer answers FS_EDYNAMIC. Cannot fail; NULL gives false. */
static inline bool eng_op_is_control(const eng_op_def_t *op)
{
    return op && (op->id == ENG_OP_If || op->id == ENG_OP_Loop || op->id == ENG_OP_Scan);
}

/* Helpers for op code. */
/* The input at i, or NULL when absent or out of range. */
static inline const eng_tensor_t *eng_ctx_in(const eng_op_ctx_t *c, int i)
{
    return i < c->n_inputs ? c->inputs[i] : NULL;
}
/* The data of the input at i, or NULL when the input is absent. */
static inline const void *eng_ctx_in_data(const eng_op_ctx_t *c, int i)
{
    const eng_tensor_t *t = eng_ctx_in(c, i);
    return t ? t->data : NULL;
}
/* Input i's value in host memory, or NULL when absent or not known on the
 * host (a device run's activation). On the CPU every input is host. */
static inline const eng_tensor_t *eng_ctx_host_in(const eng_op_ctx_t *c, int i)
{
    if (i >= c->n_inputs || !c->inputs[i])
        return NULL;
    if (!c->host_inputs)
        return c->inputs[i];
    const eng_tensor_t *t = c->host_inputs[i];
    return t && t->data ? t : NULL;
}
/* Sets output i's dtype and shape (an infer hook's result) when the node
 * has that output and it is requested; cannot fail. */
static inline void eng_ctx_out_set(eng_op_ctx_t *c, int i, eng_dtype_t dt, const eng_shape_t *s)
{
    if (i < c->n_outputs && c->outputs[i]) {
        c->outputs[i]->dtype = dt;
        c->outputs[i]->shape = *s;
    }
}
/* Runs the node's infer (c->node->op) and checks each output shape it set
 * with eng_shape_bounded: the one entry to shape inference for the
 * planner, folding and the dynamic executor. 0, infer's error, or
 * FS_ENOMEM naming the output whose shape passes ENG_NUMEL_MAX (no
 * allocation could hold it, and arithmetic on its dims could overflow). */
int eng_op_infer(eng_op_ctx_t *c);
/* Runs kernel `k` on c, unless every output c asks for is empty: such a
 * node has nothing to compute, and its 0-byte tensors may have NULL data
 * that no kernel should have to step around. The one entry to kernels for
 * the executor, folding and plan-time evaluation. With c->widen set, the
 * half inputs are converted to float in the scratch that
 * eng_op_scratch_bytes asked for, and the float results rounded into the
 * outputs. 0, or the kernel's error. */
int eng_op_run(const eng_kernel_t *k, eng_op_ctx_t *c);
/* The workspace eng_op_run needs for k on c (shapes set): the kernel's
 * own, plus the float copies when c->widen is set. Cannot fail. */
size_t eng_op_scratch_bytes(const eng_kernel_t *k, const eng_op_ctx_t *c);
/* Sets fs_err(code, "<node name> (<op>): <message>") and returns code. */
int eng_op_err(const eng_op_ctx_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* FS_ENOTSUP naming the input and its dtype unless `dt` is in `allowed`
 * (ENG_DT_UNDEFINED-terminated). */
int eng_op_require_dtype(const eng_op_ctx_t *c, int input, const eng_dtype_t *allowed);
/* FS_EINVAL naming the scratch the kernel has and the `need` bytes it
 * needs; for a run whose ctx->scratch_bytes is short of what it asked. */
int eng_op_scratch_err(const eng_op_ctx_t *c, size_t need);
/* Reads element i of an int32/int64 tensor with known data as int64. */
int64_t eng_tensor_get_i64(const eng_tensor_t *t, int64_t i);
/* Normalises a possibly negative axis for `rank`; FS_EINVAL if out of
 * range [-rank, rank-1]. */
int eng_op_axis(const eng_op_ctx_t *c, int64_t axis, int rank, int *out);

#ifdef __cplusplus
}
#endif
#endif
