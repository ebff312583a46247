/* plan.h -- a model's execution plan for one input-shape signature, and the
 * executor that runs it. Engine-internal (model.c builds, caches and runs
 * plans).
 *
 * A plan holds, for every value of the graph, its concrete dtype and shape
 * and where its data lives: a constant (graph weights, or a shape value
 * computed at plan time), a caller's input, or an offset into the one
 * activation block; and for every node still to run, its kernel on the
 * plan's device (engine/backend.h) and workspace. On a device without host
 * memory the block, the constants and the plan-time values are device
 * memory; the inputs get a place in the block and are copied in, and the
 * outputs are copied out, through pinned staging memory. A plan whose
 * shapes depend on data (an op's infer said
 * FS_EDYNAMIC) is marked dynamic: it runs node by node, inferring shapes as
 * it goes and taking each tensor from the cache, freeing it after its last
 * reader.
 *
 * Threading: a built plan is immutable; any number of threads may execute
 * it at once (each run has its own activation block), each with its own
 * replay state or none (eng_plan_replay_t). */
#ifndef FS_ENGINE_PLAN_H
#define FS_ENGINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/cache.h"
#include "alloc/plan.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_plan eng_plan_t;

/* What a plan needs from its model. */
typedef struct eng_plan_env {
    const eng_graph_t *graph;
    const bool *node_done;       /* nodes folded at load: never run */
    /* Where steps run, and the model instance's state there (NULL for a
     * device without one). `cache` is that device's memory. */
    const eng_backend_i *backend;
    void *instance;
    alloc_cache_t *cache;
    alloc_owner_t const_owner;   /* plan-time constants (the model's owner) */
    alloc_owner_t act_owner;     /* activation memory */
    int n_threads;
    /* Host memory for plan-time values (computed on the host): on a
     * host-memory device the cache itself under const_owner. */
    alloc_cache_t *host_cache;
    alloc_owner_t host_owner;
    /* Devices without host memory (backend.h): the graph's constants live
     * on the host (data NULL where only the device copy was kept) and on
     * the device (dev_const, per value); inputs are copied in through
     * `staging` (pinned; NULL: pageable copies), which also lends the
     * outputs' pinned host tensors. All NULL on a host-memory device. */
    void *const *dev_const;
    alloc_cache_t *staging;
    alloc_owner_t staging_owner;
    int64_t max_loop_iterations; /* a Loop's bound (> 0; engine.h) */
    /* The placement order the last plan of this graph won with, tried
     * first and updated (alloc/plan.h); the caller serialises plan builds
     * that share it. NULL: none. */
    alloc_plan_hint_t *place_hint;
} eng_plan_env_t;

/* The replay state of one plan: the device graph captured from its steps
 * and the activation block it was captured with (a graph replays fixed
 * addresses). It is the one mutable part of running a plan, so it lives
 * outside the plan: its holder serialises the runs that use it (model.c
 * keeps one per cached plan and takes the instance's run lock around
 * eng_plan_run). Zero-initialised is empty; eng_plan_replay_clear frees it. */
typedef struct eng_plan_replay {
    bool failed;                 /* capture did not work: plain launches from now on */
    unsigned runs;               /* runs so far: capture on the second (the first warms up) */
    void *graph;                 /* the backend's graph, or NULL */
    void *block;                 /* the activation block `graph` was captured with */
} eng_plan_replay_t;

/* Frees the captured graph (the plan's backend made it) and empties `r`.
 * Cannot fail. */
void eng_plan_replay_clear(const eng_plan_t *p, eng_plan_replay_t *r);

/* Builds the plan for `inputs` (host tensors whose dtype and shape matter,
 * data ignored; in graph-input order). 0 and *out (caller frees with
 * eng_plan_destroy), or FS_EINVAL naming the input or node whose dtype or
 * shape is wrong, FS_ENOTSUP (no CPU kernel, an unsupported dtype), or
 * FS_ENOMEM. */
int eng_plan_build(const eng_plan_env_t *env, const eng_tensor_t *inputs, size_t n_inputs,
                   eng_plan_t **out);
void eng_plan_destroy(eng_plan_t *p);

/* Whether `inputs` have exactly the dtypes and shapes this plan was built
 * for. */
bool eng_plan_matches(const eng_plan_t *p, const eng_tensor_t *inputs, size_t n_inputs);
void eng_plan_info(const eng_plan_t *p, eng_plan_info_t *out);

/* Runs the plan on `inputs`, returning host copies of the graph outputs in
 * outputs[] (caller frees each with eng_tensor_free). `replay` (borrowed,
 * may be NULL: never capture) is the plan's replay state, used when the
 * backend captures graphs. Errors: FS_ENOMEM (the activation block or a
 * tensor did not fit), a kernel's error naming the node. Nothing is
 * returned or left allocated on error. */
int eng_plan_run(const eng_plan_t *p, eng_plan_replay_t *replay, const eng_tensor_t *inputs,
                 size_t n_inputs, eng_tensor_t **outputs);

/* Runs every node whose inputs are all constants once, at load: its outputs
 * become constants in `wa` memory (the model's weights). `done[i]` is set
 * for each folded node; a node already done is skipped. Errors as a
 * kernel's, naming the node; on error the already folded constants stay in
 * the graph (freed with it). */
int eng_fold_constants(eng_graph_t *g, const eng_weight_alloc_t *wa, bool *done);

/* Drops each Transpose of a constant W that swaps its last two dims and
 * whose every reader takes the result as a GEMM's B (MatMul's or Gemm's
 * input 1): the readers read W itself, transposed (a MatMul's trans_b,
 * graph.h; a Gemm's transB flipped), so W is not folded into a second,
 * transposed constant (engine/fuse.c says exactly when). `done[i]` is set
 * for each Transpose dropped. Runs before eng_fold_constants, on the same
 * `done`. 0, or FS_ENOMEM; on error the rewrites made stay and the graph
 * stays consistent (freed with it). */
int eng_fuse_transpose_into_gemm(eng_graph_t *g, bool *done);

/* Makes each MatMul or Gemm whose B is a rank-2 constant that is bitwise
 * the transpose of another constant W, which other nodes read (an
 * exporter's folded tied embedding), read W transposed instead, leaving B
 * to no reader. Runs after eng_fold_constants, on the same `done`. 0, or
 * FS_ENOMEM as eng_fuse_transpose_into_gemm. */
int eng_fuse_transposed_twins(eng_graph_t *g, bool *done);

/* Folds each inference BatchNormalization into the Conv that alone feeds
 * it, when both have constant float parameters (engine/fuse.c says exactly
 * when): the Conv gets new W and bias constants in `wa` memory and writes
 * the BN's output; `done[i]` is set for each BN folded away. Runs after
 * eng_fold_constants on the same `done`. 0, or FS_ENOMEM; on error the
 * pairs already fused stay fused and the graph stays consistent (freed
 * with it). */
int eng_fuse_conv_bn(eng_graph_t *g, const eng_weight_alloc_t *wa, bool *done);

/* Rewrites each erf GELU chain (x * 0.5 * (1 + erf(x / sqrt 2)) as
 * PyTorch exports it, in its usual node orders; engine/fuse.c says exactly
 * when) into one Gelu node (approximate 'none') on its first node;
 * `done[i]` is set for the chain's other nodes. Runs after
 * eng_fold_constants on the same `done`. Cannot fail (returns 0). */
int eng_fuse_gelu(eng_graph_t *g, bool *done);
/* Rewrites each exported RMSNorm chain, Pow(x, 2) -> ReduceMean(last
 * axis) -> Add(eps) -> Sqrt -> Reciprocal or Div(1, .) -> Mul(x, .) ->
 * Mul(w, .), into one RMSNormalization node on the last Mul
 * (engine/fuse_norm.c says exactly when); `done[i]` is set for the
 * chain's other nodes. Runs after eng_fold_constants on the same `done`.
 * 0, or FS_ENOMEM; on error the chains already rewritten stay and the
 * graph stays consistent (freed with it). */
int eng_fuse_rms_norm(eng_graph_t *g, bool *done);

/* Rewrites each exported attention, MatMul(Q, K^T) -> [scale] -> [Add
 * mask] -> Softmax(last axis) -> [Where(IsNaN(P), 0, P)] -> MatMul(P, V),
 * into one Attention node (scale set; K read transposed through the
 * node's trans_b where it is not found untransposed) on the last MatMul
 * (engine/fuse_attention.c says exactly when); `done[i]` is set for the
 * chain's other nodes. Runs after eng_fold_constants on the same `done`.
 * 0, or FS_ENOMEM; on error the chains already rewritten stay and the
 * graph stays consistent (freed with it). */
int eng_fuse_attention(eng_graph_t *g, bool *done);

/* Fuses into each MatMul of a constant rank-2 W, and each Gemm, the Add of
 * a constant bias along the last axis and/or the Relu or Gelu that follow
 * it (engine/fuse_epilogue.c says exactly when): the GEMM node takes the
 * bias (a MatMul's `bias` input, graph.h; a Gemm's C) and the activation
 * (`act`) and writes the last node's output; `done[i]` is set for the
 * nodes taken in. Runs after eng_fuse_gelu and before eng_lower_precision,
 * on the same `done`. 0, or FS_ENOMEM; on error the fusions made stay and
 * the graph stays consistent (freed with it). */
int eng_fuse_gemm_epilogue(eng_graph_t *g, bool *done);

/* fp16/bf16 precision: retypes g's float32 values and constants to `low`
 * (ENG_DT_FLOAT16 or ENG_DT_BFLOAT16), with Casts at the graph's float32
 * inputs and outputs so that its interface stays float32 (engine/lowp.c
 * says exactly what changes). Runs after folding and fusing; *done (of
 * g->n_nodes + 1 entries) is replaced by one for the new node list. 0, or
 * FS_ENOMEM: the graph is then only fit to be destroyed. */
int eng_lower_precision(eng_graph_t *g, eng_dtype_t low, const eng_weight_alloc_t *wa,
                        bool **done);

/* Runs g's convolutional regions channels-last (NHWC), with a following
 * ReLU and residual Add fused into each Conv where they fit: Transposes at
 * the regions' edges, the nodes' channels_last and fusion fields set
 * (graph.h), each Conv's W laid out [M, kH, kW, C/group] in `wa` memory
 * (engine/layout.c says exactly what changes). Runs after folding, fusing
 * and lowering, on devices whose backend asks for it; *done (of
 * g->n_nodes + 1 entries) is replaced by one for the new node list. 0
 * (also when g has no region), or FS_ENOMEM: the graph is then only fit
 * to be destroyed. */
int eng_layout_channels_last(eng_graph_t *g, const eng_weight_alloc_t *wa, bool **done);

/* Sets conv_im2col (graph.h) on each of g's channels-last Convs where
 * `algo` is ENG_CONV_ALGO_IM2COL, clears it where it is not; other nodes
 * are left alone. Runs after eng_layout_channels_last. Cannot fail. */
void eng_layout_conv_algo(eng_graph_t *g, eng_conv_algo_t algo);
/* Fuses each group of two or more connected element-wise nodes (unary
 * ops, float Casts, broadcasting Add/Sub/Mul/Div/Max/Min, Pow of a
 * constant, Where, Clip of constant bounds) whose intermediate values
 * nothing else reads into one FusedElementwise node on the group's last
 * node, running the group as a program (engine/fuse_chain.c says exactly
 * when; engine/ew_program.h what the program is); `done[i]` is set for the
 * group's other nodes. Runs last among the load-time rewrites, on the same
 * `done`. 0, or FS_ENOMEM; on error the groups already fused stay and the
 * graph stays consistent (freed with it). */
int eng_fuse_elementwise_chains(eng_graph_t *g, bool *done);

#ifdef __cplusplus
}
#endif
#endif
