/* cuda.h -- the CUDA device state of one model instance, as the rest of the
 * engine (C, no CUDA headers) sees it.
 *
 * An eng_cuda_t owns, for one model instance on one device: a non-blocking
 * stream every kernel of the instance queues on, a cuBLAS handle bound to
 * that stream, and the precision the instance computes at. The engine
 * copies inputs in and outputs out on the same stream and synchronises only
 * with that stream, once per run (never the whole device).
 *
 * Only a CUDA build (FS_HAVE_CUDA) has these functions.
 *
 * Errors: every CUDA and cuBLAS call is checked; a failure returns
 * FS_EDEVICE (FS_ENODEV when no usable device) with a message naming the
 * call and the CUDA error, and never aborts. */
#ifndef FS_ENGINE_CUDA_CUDA_H
#define FS_ENGINE_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h" /* eng_precision_t */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_cuda eng_cuda_t;

/* Creates the state on CUDA device `device` (its own stream and cuBLAS
 * handle). FS_ENODEV when the device does not exist or no driver is
 * usable, FS_EDEVICE for another CUDA/cuBLAS failure. */
int eng_cuda_create(int device, eng_precision_t precision, eng_cuda_t **out);
void eng_cuda_destroy(eng_cuda_t *c);

int eng_cuda_device(const eng_cuda_t *c);
eng_precision_t eng_cuda_precision(const eng_cuda_t *c);
/* The stream, as the allocator's opaque stream handle (alloc_stream_t). */
uintptr_t eng_cuda_stream(const eng_cuda_t *c);

/* Makes the state's device current on the calling thread. */
int eng_cuda_bind(const eng_cuda_t *c);
/* Copies queued on the stream (async; host memory should be pinned for
 * overlap, pageable works). */
int eng_cuda_copy_h2d(eng_cuda_t *c, void *dst, const void *src, size_t bytes);
int eng_cuda_copy_d2h(eng_cuda_t *c, void *dst, const void *src, size_t bytes);
int eng_cuda_copy_d2d(eng_cuda_t *c, void *dst, const void *src, size_t bytes);
/* Waits for everything queued on the stream; reports an error a kernel hit
 * while running (FS_EDEVICE). */
int eng_cuda_sync(eng_cuda_t *c);

/* The workspace of cuBLAS and cuBLASLt, from memory the caller accounts for
 * (the device's workspace pool, engine/workspace.h, leased for each run):
 * without one cuBLAS would cudaMalloc its own, outside the allocator, and
 * could not be captured into a graph safely. The instance keeps using it
 * until the next call; a new size drops the cached cuBLASLt algorithms.
 * ENG_CUDA_WORKSPACE_BYTES is the size the engine gives it. */
#define ENG_CUDA_WORKSPACE_BYTES ((size_t)8 << 20)
int eng_cuda_set_workspace(eng_cuda_t *c, void *ptr, size_t bytes);

/* CUDA graphs: work queued on the stream between capture_begin and
 * capture_end is recorded, not run, and becomes an executable graph that
 * graph_launch replays on the stream with the same addresses and launch
 * parameters. capture_end fails with FS_ENOTSUP (and leaves the stream
 * usable) when something in the capture was not capturable. */
typedef struct eng_cuda_graph eng_cuda_graph_t;
int eng_cuda_capture_begin(eng_cuda_t *c);
int eng_cuda_capture_end(eng_cuda_t *c, eng_cuda_graph_t **out);
int eng_cuda_graph_launch(eng_cuda_t *c, eng_cuda_graph_t *g);
void eng_cuda_graph_destroy(eng_cuda_graph_t *g);

#ifdef __cplusplus
}
#endif
#endif
