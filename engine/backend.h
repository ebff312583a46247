/* backend.h -- a device as the engine sees it: one table of functions per
 * kind of device (ggml's backends).
 *
 * The planner, the executor and the model hold a `const eng_backend_i *`
 * and call the wrappers below; none of them asks which device it runs on
 * or is compiled differently for one. A device is one table: its kernels
 * (indexed by op id, generated from engine/ops/list.h), the state of one
 * model instance (a CUDA stream and cuBLAS handle, say), copies between
 * host and device memory, synchronisation, and optionally graph capture
 * and replay. A third device is one new folder and one table, added to
 * eng_backend_get.
 *
 * Memory. `host_memory` says whether the device computes on host memory.
 * When it does (the CPU), a model's weights and a plan's values are used
 * where they are: nothing is uploaded, copied in or out, or mirrored for
 * shape inference, and host copies and device copies are the same
 * pointers. When it does not, weights are uploaded once at load
 * (eng_backend_upload), inputs are copied into the activation block and
 * outputs out of it, and the values shape inference must read are kept on
 * the host as well. This is the one property of a device the executor
 * reads; it is data, not a branch on the kind of device.
 *
 * Errors: every wrapper returns 0 or a negative FS_E* code with the
 * message set (FS_EDEVICE naming the failed device call, FS_ENODEV when the
 * device does not exist); none aborts.
 *
 * Threading: the tables are static const. An instance is used by one thread
 * at a time (a model serialises the runs of one instance). */
#ifndef FS_ENGINE_BACKEND_H
#define FS_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/cache.h"
#include "engine/engine.h"
#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_backend_i {
    const char *name;                     /* "cpu", "cuda": in messages */
    /* ENG_OP_COUNT entries by op id; NULL where the device lacks a kernel
     * (engine/ops/list.h marks it). */
    const eng_kernel_t *const *kernels;
    bool host_memory;                     /* see the header */
    /* The precisions it computes at: bit (1u << p) for each eng_precision_t p. */
    unsigned precisions;
    /* Whether convolutional regions run channels-last here
     * (engine/layout.c): where its Conv kernels are faster on NHWC. */
    bool channels_last;
    /* Whether the exporters' MatMul-Softmax-MatMul attention chains become
     * one Attention node here (engine/fuse_attention.c): where its
     * Attention kernel beats the chain. The CPU's is the exact double
     * reference, slower than its GEMMs at batch, so the CPU keeps chains;
     * CUDA's flash kernel measured slower than cuBLAS plus Softmax on the
     * full-size exports (bench/RESULTS.md), so CUDA keeps them too until
     * it is faster: eng_model_config_t.attention asks for the fusion. */
    bool fused_attention;
    /* The state of one model instance on device `index`, computing at
     * `precision`. Optional: a device without one (the CPU) leaves these
     * NULL and its instance is NULL. */
    int (*instance_create)(int index, eng_precision_t precision, void **out);
    void (*instance_destroy)(void *inst);
    /* The instance's stream as the allocator's stream handle; 0 when the
     * device has none. Optional. */
    alloc_stream_t (*stream)(void *inst);
    /* Makes the instance's device current on the calling thread. Optional. */
    int (*bind)(void *inst);
    /* Copies queued on the instance's stream. Required unless host_memory. */
    int (*copy_h2d)(void *inst, void *dst, const void *src, size_t bytes);
    int (*copy_d2h)(void *inst, void *dst, const void *src, size_t bytes);
    /* Waits for everything queued on the instance; reports an error a
     * kernel hit while running. Optional (nothing is ever queued). */
    int (*sync)(void *inst);
    /* Working memory the device's libraries need while an instance runs
     * (cuBLAS's and cuBLASLt's), taken from the device's workspace pool
     * (engine/workspace.h) so that it is accounted: its size, and the call
     * that hands a block to the instance for its next runs. Optional (0 /
     * NULL: none). */
    size_t workspace_bytes;
    int (*set_workspace)(void *inst, void *ptr, size_t bytes);
    /* Graph capture and replay. Optional (all NULL: every run launches its
     * steps one by one). Work queued between capture_begin and capture_end
     * is recorded, not run; capture_end fails with FS_ENOTSUP when
     * something in it could not be captured, leaving the instance usable;
     * graph_launch replays it with the same addresses. */
    int (*capture_begin)(void *inst);
    int (*capture_end)(void *inst, void **graph);
    int (*graph_launch)(void *inst, void *graph);
    void (*graph_destroy)(void *graph);
} eng_backend_i;

/* The table of a kind of device, or NULL when this build has none (CUDA in
 * a build without CUDA support). */
const eng_backend_i *eng_backend_get(eng_device_kind_t kind);

/* The host's table: where load-time folding and plan-time values are
 * computed, whatever device a model runs on. Cannot fail. */
const eng_backend_i *eng_backend_host(void);

/* Whether the device computes at `p`. */
bool eng_backend_supports(const eng_backend_i *be, eng_precision_t p);

/* The kernel of `op` on the device, or NULL when the device lacks one. */
const eng_kernel_t *eng_backend_kernel(const eng_backend_i *be, const eng_op_def_t *op);
/* The same by op type; NULL also for a type that is no op. */
const eng_kernel_t *eng_backend_kernel_find(const eng_backend_i *be, const char *op_type);

/* An instance (*out stays NULL for a device without state). 0, or the
 * device's error. */
int eng_backend_instance_create(const eng_backend_i *be, const eng_device_t *dev,
                                eng_precision_t precision, void **out);
/* NULL is a no-op. */
void eng_backend_instance_destroy(const eng_backend_i *be, void *inst);
alloc_stream_t eng_backend_stream(const eng_backend_i *be, void *inst);
int eng_backend_bind(const eng_backend_i *be, void *inst);
/* Host -> device and device -> host copies. On a host-memory device they
 * are memcpy and cannot fail. */
int eng_backend_copy_h2d(const eng_backend_i *be, void *inst, void *dst, const void *src,
                         size_t bytes);
int eng_backend_copy_d2h(const eng_backend_i *be, void *inst, void *dst, const void *src,
                         size_t bytes);
int eng_backend_sync(const eng_backend_i *be, void *inst);
size_t eng_backend_workspace_bytes(const eng_backend_i *be);
int eng_backend_set_workspace(const eng_backend_i *be, void *inst, void *ptr, size_t bytes);

/* Uploads `bytes` of host data into a new block of `cache` (device memory)
 * under `owner`, queued on the instance's stream: the host data must stay
 * until the next eng_backend_sync. 0 and *out (the caller frees it with
 * alloc_cache_free), or FS_ENOMEM / the copy's error with nothing left
 * allocated. Not for host-memory devices (their data is used in place). */
int eng_backend_upload(const eng_backend_i *be, void *inst, alloc_cache_t *cache,
                       alloc_owner_t owner, const void *host, size_t bytes, void **out);

/* Whether the device captures graphs. */
bool eng_backend_can_capture(const eng_backend_i *be);
int eng_backend_capture_begin(const eng_backend_i *be, void *inst);
int eng_backend_capture_end(const eng_backend_i *be, void *inst, void **graph);
int eng_backend_graph_launch(const eng_backend_i *be, void *inst, void *graph);
/* NULL is a no-op. */
void eng_backend_graph_destroy(const eng_backend_i *be, void *graph);

#ifdef __cplusplus
}
#endif
#endif
