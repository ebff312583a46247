/* plan_impl.h -- the plan's layout, shared by plan_build.c (shapes and folding),
 * plan_memory.c (lifetimes and offsets) and exec.c (running).
 *
 * Invariants: values[] parallels graph->values. storage says where a
 * value's data lives; for PV_ACT, `offset` is its place in the activation
 * block (in-place outputs share their input's offset). steps[] are the
 * nodes still to run, in order. */
#ifndef FS_ENGINE_PLAN_IMPL_H
#define FS_ENGINE_PLAN_IMPL_H

#include "engine/op.h"
#include "engine/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plan_storage {
    PV_NONE = 0,   /* not produced (absent optional, or a dynamic plan's tail) */
    PV_CONST,      /* graph constant: t.data is the weight */
    PV_INPUT,      /* a caller's input: data set per run */
    PV_FOLDED,     /* computed at plan time: t.data from the cache, plan-owned */
    PV_ACT,        /* activation: block + offset */
} plan_storage_t;

typedef struct plan_value {
    eng_tensor_t t;            /* dtype and shape (data for CONST/FOLDED) */
    plan_storage_t storage;
    size_t offset;             /* PV_ACT */
    int first_step, last_step; /* PV_ACT: written at first, last read at last */
    /* Devices without host memory: the value's host copy when known before
     * running (CONST with a host copy, FOLDED), else NULL; `t.data` is the
     * device copy. input >= 0: a graph input copied into the block (PV_ACT)
     * at run start. On a host-memory device host is NULL and input -1. */
    void *host;
    int input;
} plan_value_t;

typedef struct plan_step {
    const eng_node_t *node;
    const eng_kernel_t *kernel;
    eng_dtype_t widen;         /* infer's ctx->widen, kept for the runs */
    size_t scratch_bytes;
    size_t scratch_offset;     /* in the activation block */
} plan_step_t;

struct eng_plan {
    const eng_graph_t *graph;
    const bool *node_done;
    const eng_backend_i *be;
    void *inst;                  /* the backend's instance state, or NULL */
    alloc_cache_t *cache;
    alloc_owner_t const_owner, act_owner;
    int n_threads;
    void *const *dev_const;
    alloc_cache_t *host_cache;   /* FOLDED host copies (NULL: the heap) */
    alloc_owner_t host_owner;
    alloc_cache_t *staging;
    alloc_owner_t staging_owner;
    /* Devices without host memory: per value, data = the host copy or
     * NULL; NULL on a host-memory device. */
    eng_tensor_t *host_views;
    size_t staging_bytes;        /* inputs copied in (0: no copies) */
    size_t n_inputs;
    eng_tensor_t *inputs;      /* the signature: dtypes and shapes */
    size_t n_values;
    plan_value_t *values;
    size_t n_steps;
    plan_step_t *steps;
    size_t block_bytes;
    size_t lower_bound_bytes;
    size_t n_folded;
    int max_io;                /* most inputs or outputs of any node */
    bool dynamic;
    int64_t max_loop_iterations; /* engine/exec_control.c */
};

/* plan_memory.c */
int plan_fold_node(eng_plan_t *p, const eng_node_t *n, const eng_kernel_t *cpu_kernel,
                   eng_op_ctx_t *ctx);
int plan_add_step(eng_plan_t *p, const eng_node_t *n, const eng_kernel_t *kernel,
                  const eng_op_ctx_t *ctx);
int plan_memory(eng_plan_t *p, alloc_plan_hint_t *hint);
/* Host memory of a plan's host-side values: host_cache or the heap. */
int plan_host_alloc(const eng_plan_t *p, size_t bytes, void **out);
void plan_host_free(const eng_plan_t *p, void *ptr);
/* Devices without host memory: gives graph inputs their place in the
 * block (before plan_memory) ... */
void plan_device_inputs(eng_plan_t *p);
/* ... and, after it, copies plan-time values to the device and builds the
 * host views. */
int plan_device_place(eng_plan_t *p);

#ifdef __cplusplus
}
#endif
#endif
