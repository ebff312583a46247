/* engine.h -- loading an ONNX model and running it: the engine as the server
 * sees it.
 *
 * A model is loaded from an .onnx file (external data beside it, confined to
 * its directory). Its weights are allocated once from the given cache under
 * an owner tag of the model's own; destroying the model frees them and
 * checks that owner is back to zero bytes. Running takes host input tensors
 * in the model's input order, builds (or reuses, from an LRU of
 * `max_plans`) the plan for their shape signature, executes it from one
 * activation block (taken through the cache's batch hooks, so the arena
 * policy applies), and returns host output tensors.
 *
 * Devices and precisions are typed values (eng_device_t, eng_precision_t):
 * the caller parses them once, where they enter (config/ for the server),
 * and every layer below takes them as they are. What runs on a device is
 * that device's table (engine/backend.h); nothing above it asks which.
 *
 * Threading: a model is immutable after load apart from its plan cache,
 * which is locked; eng_model_run may be called from several threads. */
#ifndef FS_ENGINE_ENGINE_H
#define FS_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_model eng_model_t;

/* Where a model's kernels run. */
typedef enum eng_device_kind {
    ENG_DEVICE_CPU = 0,
    ENG_DEVICE_CUDA = 1,
} eng_device_kind_t;

/* How float32 matrix products are computed (engine/backend.h: a device
 * says which it supports; the CPU computes in fp32 only). */
typedef enum eng_precision {
    ENG_PREC_FP32 = 0, /* IEEE fp32, TF32 off (PyTorch's matmul default) */
    ENG_PREC_TF32,     /* fp32 storage, TF32 tensor-core products */
    ENG_PREC_FP16,     /* the graph in fp16 end to end (engine/lowp.c), fp32 accumulation */
    ENG_PREC_BF16,     /* the same in bf16 */
} eng_precision_t;

/* "fp32", "tf32", "fp16", "bf16" ("unknown" for another value). */
const char *eng_precision_name(eng_precision_t p);
/* 0 and *out for one of those names, else FS_EINVAL naming the value. */
int eng_precision_parse(const char *s, eng_precision_t *out);

/* The layout convolutional regions compute in (engine/layout.c). */
typedef enum eng_conv_layout {
    ENG_CONV_LAYOUT_AUTO = 0, /* the device's choice: channels-last on CUDA, NCHW on the CPU */
    ENG_CONV_LAYOUT_NCHW,     /* as the model has it */
    ENG_CONV_LAYOUT_NHWC,     /* channels-last on any device (tests, benchmarks) */
} eng_conv_layout_t;

/* Whether MatMul-Softmax-MatMul chains become one Attention node at load
 * (engine/fuse_attention.c). */
typedef enum eng_attn_fusion {
    ENG_ATTN_FUSION_AUTO = 0, /* the device's choice (engine/backend.h fused_attention) */
    ENG_ATTN_FUSION_CHAIN,    /* keep the chains as the model has them */
    ENG_ATTN_FUSION_FUSED,    /* fuse on a device with a fused Attention kernel (CUDA) */
} eng_attn_fusion_t;

/* How a channels-last Conv (engine/layout.c) computes on a device that has
 * more than one way (CUDA: engine/cuda/conv_nhwc.cu). The CPU has only
 * im2col, and computes every choice so. */
typedef enum eng_conv_algo {
    ENG_CONV_ALGO_AUTO = 0, /* the device's choice: on CUDA the implicit GEMM where it applies
                             * and the output has at least 32768 positions */
    ENG_CONV_ALGO_IM2COL,   /* a column matrix in the scratch, then one GEMM */
    ENG_CONV_ALGO_IMPLICIT, /* the implicit GEMM where it applies, im2col elsewhere */
} eng_conv_algo_t;

/* A device: its kind and, for a GPU, its index (0 on the CPU). */
typedef struct eng_device {
    eng_device_kind_t kind;
    int index;
} eng_device_t;

/* A device string: "cpu" (also NULL), "cuda" (device 0) or "cuda:N" (N <
 * 1024). 0 and *out, or FS_EINVAL naming the string (*out untouched). The
 * one parser of device names: config/ calls it, and hands the typed value
 * down. */
int eng_device_parse(const char *s, eng_device_t *out);
/* "cpu" or "cuda:N" into buf (always terminated); returns buf. Cannot fail. */
#define ENG_DEVICE_NAME_MAX 16
const char *eng_device_name(const eng_device_t *d, char *buf, size_t len);
/* Whether two devices are the same one. */
bool eng_device_equal(const eng_device_t *a, const eng_device_t *b);

typedef struct eng_model_config {
    const char *name;       /* owner tag name and log name; NULL: the file name */
    /* Borrowed. Where weights and activations live: host memory for the CPU
     * engine, a cache over the `cuda` provider of the same device for CUDA. */
    alloc_cache_t *cache;
    size_t max_plans;       /* plan LRU bound; 0 means 16 */
    int n_threads;          /* CPU kernel threads; 0 means 1 */
    /* Where it runs (zeroed: the CPU), and at what precision (zeroed: fp32;
     * another needs a device that computes at it, engine/backend.h). */
    eng_device_t device;
    eng_precision_t precision;
    /* CUDA only, borrowed, optional: host memory for the loader's weights
     * and the host copies of small constants (NULL: the C heap), and a
     * cache over the `pinned` provider for input/output staging (NULL:
     * copies from pageable memory). */
    alloc_cache_t *host_cache;
    alloc_cache_t *staging;
    /* CUDA only: run every node one launch at a time instead of replaying a
     * CUDA graph captured per plan (graphs are on by default). */
    bool no_cuda_graphs;
    /* The most iterations one Loop node may run; one more fails the run
     * with FS_ERANGE (a model's loop that never ends must not hang a
     * server). 0 means ENG_LOOP_ITERATIONS_DEFAULT. */
    int64_t max_loop_iterations;
    /* Zeroed: the device's choice. */
    eng_conv_layout_t conv_layout;
    /* Zeroed: the device's choice. FUSED on the CPU keeps the chains (its
     * Attention kernel is the exact double reference). */
    eng_attn_fusion_t attention;
    /* Zeroed: the device's choice (benchmarks compare the two). */
    eng_conv_algo_t conv;
    /* Keep chains of element-wise ops as the model has them, one node each,
     * instead of fusing each into one FusedElementwise node
     * (engine/fuse_chain.c; fused by default, on every device). */
    bool no_elementwise_fusion;
} eng_model_config_t;

/* eng_model_config_t.max_loop_iterations when it is 0. */
#define ENG_LOOP_ITERATIONS_DEFAULT ((int64_t)1 << 20)

/* The memory a model on one device runs in (engine/memory.c): the device's
 * cache (over the host provider for "cpu", the cuda provider for a GPU)
 * and, for a GPU, a host cache (weights while loading, small host copies)
 * and a pinned staging cache; NULL on the CPU. A GPU's host cache may be
 * borrowed (host_borrowed): the server gives its GPU memory the cache its
 * CPU models use, so that every host byte counts against one host limit. */
typedef struct eng_memory {
    alloc_provider_t *providers[3];
    alloc_cache_t *cache, *host_cache, *staging;
    bool host_borrowed;
} eng_memory_t;

/* The default hard limits on reserved bytes, as fractions of the memory a
 * cache's provider reports: on the host, of what the process may use (its
 * cgroup's memory limit, else physical memory), leaving room for what lives
 * outside the caches (request and response bodies, the C heap, the page
 * cache of model files); on a GPU, the device's total, which its driver
 * enforces anyway. The server applies them where the configuration sets no
 * limit (config/README.md, memory.limit_fraction). */
#define ENG_MEMORY_HOST_FRACTION 0.8
#define ENG_MEMORY_GPU_FRACTION 1.0

/* Opens it for `device` (NULL: the CPU); `cfg` (may be NULL) configures the
 * device cache. 0, or the error (FS_ENODEV / FS_ENOTSUP when there is no
 * usable GPU) with nothing left open. */
int eng_memory_open(const eng_device_t *device, const alloc_cache_config_t *cfg,
                    eng_memory_t *out);
/* The same with a configuration for the pinned staging cache too (its
 * limit); `staging_cfg` may be NULL. For a GPU, `host_cache` (borrowed; may
 * be NULL) is the host cache to use instead of one of its own, which would
 * be limited to ENG_MEMORY_HOST_FRACTION of host memory; it must outlive
 * `out`. */
int eng_memory_open_with(const eng_device_t *device, const alloc_cache_config_t *cfg,
                         const alloc_cache_config_t *staging_cfg, alloc_cache_t *host_cache,
                         eng_memory_t *out);
/* Destroys the caches and providers; safe on a zeroed or closed one. */
void eng_memory_close(eng_memory_t *m);

/* Loads a model. 0 and *out (caller frees with eng_model_destroy), or:
 * FS_ENOENT / FS_EIO (file), FS_EPARSE (corrupt or truncated: the message
 * says what could not be read), FS_ENOTSUP (unsupported IR version, opset,
 * op, attribute or dtype: the message lists every offending node, with its
 * name, op type, opset and what is missing), FS_ENOMEM (weights did not fit
 * the cache). Nothing stays allocated on error. */
int eng_model_load(const char *path, const eng_model_config_t *cfg, eng_model_t **out);
/* The same from bytes in memory; `dir` (may be NULL) is where external data
 * files are looked up. */
int eng_model_load_bytes(const void *data, size_t len, const char *dir,
                         const eng_model_config_t *cfg, eng_model_t **out);

/* Frees the model; logs an error if its owner did not return to zero bytes.
 * NULL is a no-op. */
void eng_model_destroy(eng_model_t *m);

typedef struct eng_io_info {
    const char *name;
    eng_dtype_t dtype;
    int rank;                            /* -1 when the model does not say */
    int64_t dims[ENG_MAX_RANK];          /* -1 for a symbolic or unknown dim */
    const char *dim_params[ENG_MAX_RANK]; /* the symbol, or NULL */
} eng_io_info_t;

/* "[batch,64]": the declared shape with each symbolic dim by its name ("?"
 * when it has none), or "(any shape)" when the model does not say, into buf
 * (always terminated); returns buf. Cannot fail. */
char *eng_io_info_format(const eng_io_info_t *io, char *buf, size_t len);

/* How a message names a dtype: eng_dtype_name ("float"), or a protocol's
 * own names ("FP32"). Must return a string for any value. */
typedef const char *(*eng_dtype_namer_t)(eng_dtype_t dt);

/* The one check of a tensor against a declared input (engine/io.c), made
 * by the codec, the batcher and the planner alike. `t` fits `io` when its
 * dtype is io's (any supported dtype where io declares none), its rank is
 * 0..ENG_MAX_RANK with no negative dim, and, unless io->rank < 0 (any
 * shape), its rank is io's and each fixed dim of io matches (a symbolic
 * dim takes any size). t's data is not looked at. 0, or FS_EINVAL with one
 * message for every caller, e.g.
 *   input 'x' of model 'm': expected FP32 [batch,64], got FP32 [2,63] (dim 1 must be 64)
 * `model` (borrowed; NULL leaves out the " of model" part) names the model;
 * `dtype_name` (NULL: eng_dtype_name) names the dtypes. */
int eng_io_check(const eng_io_info_t *io, const char *model, const eng_tensor_t *t,
                 eng_dtype_namer_t dtype_name);

size_t eng_model_n_inputs(const eng_model_t *m);
size_t eng_model_n_outputs(const eng_model_t *m);
/* 0 and *out (strings borrowed from the model), or FS_EINVAL for a bad
 * index. */
int eng_model_input(const eng_model_t *m, size_t i, eng_io_info_t *out);
int eng_model_output(const eng_model_t *m, size_t i, eng_io_info_t *out);
/* The index of the input (output) of `m` called `name`, or -1 (engine/io.c).
 * Cannot fail. */
long eng_io_input_find(const eng_model_t *m, const char *name);
long eng_io_output_find(const eng_model_t *m, const char *name);
/* The owner of the model's weights (and folded constants), and the owner
 * of its activations (blocks of runs in flight), both in
 * eng_model_cache(m) (borrowed: the cache given at load). */
alloc_owner_t eng_model_owner(const eng_model_t *m);
alloc_owner_t eng_model_activation_owner(const eng_model_t *m);
alloc_cache_t *eng_model_cache(const eng_model_t *m);
/* The bytes of the device libraries' workspace over `cache`, which the
 * models on that device share under the owner "<device>/workspace"
 * (engine/workspace.h); 0 when no model on it has one (the CPU). Cannot
 * fail. */
size_t eng_device_workspace_bytes(alloc_cache_t *cache);
/* "cpu" or "cuda:N". */
const char *eng_model_device(const eng_model_t *m);
const char *eng_model_name(const eng_model_t *m);

/* Runs the model. `inputs[i]` (host data) goes to model input i; n_inputs
 * must equal eng_model_n_inputs. On success outputs[j] (j < n_outputs)
 * receives a host tensor the caller frees with eng_tensor_free. Errors:
 * FS_EINVAL naming the input and the expected vs actual dtype or shape,
 * FS_ENOMEM (activations did not fit; the message gives the bytes), a
 * kernel's error naming the node, FS_ERANGE (a Loop ran past the model's
 * max_loop_iterations). No output is returned on error. */
int eng_model_run(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                  eng_tensor_t **outputs);

typedef struct eng_plan_info {
    size_t activation_bytes;   /* the plan's one activation block */
    size_t lower_bound_bytes;  /* most bytes live at once (the bound) */
    size_t n_steps;            /* nodes executed */
    size_t n_folded;           /* nodes computed at plan time */
    bool dynamic;              /* shapes depend on data: per-tensor allocation */
} eng_plan_info_t;

/* Builds (or finds) the plan for these input shapes without running it. */
int eng_model_plan_info(eng_model_t *m, const eng_shape_t *input_shapes, size_t n_inputs,
                        eng_plan_info_t *out);

#ifdef __cplusplus
}
#endif
#endif
