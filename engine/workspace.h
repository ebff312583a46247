/* workspace.h -- the device libraries' workspace (cuBLAS's and cuBLASLt's
 * working memory), one per device memory cache and shared by every model
 * loaded over that cache, instead of one per model.
 *
 * A pool per cache holds workspace blocks of one size, allocated from the
 * cache under one named owner, "<device>/workspace" (cuda:0/workspace), so
 * they are accounted like every other byte and show in /v1/memory's
 * owners and /metrics's flatserve_workspace_bytes. The first model to
 * attach creates the pool and its first block; the last to detach frees
 * every block and the owner.
 *
 * The sharing rule. Every model has its own instance (one stream, one
 * library handle) and runs one batch at a time on it (engine/model.c's
 * run_lock); different models run at the same time on different streams.
 * A block is therefore leased for a whole run (a run ends synchronised
 * with its stream, so nothing of it is still queued when it is given
 * back): two runs in flight never hold one block, and two streams never
 * use one block at the same time; runs of one model reuse one block. A
 * lease prefers the block this model held last (a CUDA graph the model
 * captured recorded its address), then any free block, and only when every
 * block is leased to a run in flight allocates another: the pool holds as
 * many blocks as models ever ran at once on the device, one for the
 * common case of one busy model per GPU, where each model used to hold
 * its own.
 *
 * Threading: internally locked (one mutex for every pool); any thread may
 * call any function. */
#ifndef FS_ENGINE_WORKSPACE_H
#define FS_ENGINE_WORKSPACE_H

#include <stddef.h>

#include "alloc/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_workspace eng_workspace_t;

/* Joins the pool of `cache` (creating it, its owner "<device>/workspace"
 * and its first block of `bytes` when this is the first model), counting
 * one more model. 0 and *out (give it back with eng_workspace_detach), or
 * FS_EINVAL (the pool's blocks have another size), FS_ENOMEM (host memory,
 * or the cache: its OOM error), with nothing changed. */
int eng_workspace_attach(alloc_cache_t *cache, const char *device, size_t bytes,
                         eng_workspace_t **out);

/* One model fewer; the last frees every block and the owner. No block may
 * be leased. NULL is a no-op. */
void eng_workspace_detach(eng_workspace_t *ws);

/* Leases a block for one run of `user` (any pointer naming the model):
 * the block `user` held last when free, else any free block, else a new
 * one. 0 and *ptr, or the cache's FS_ENOMEM (nothing leased). */
int eng_workspace_acquire(eng_workspace_t *ws, const void *user, void **ptr);

/* Gives back a block from eng_workspace_acquire once the run's work on it
 * is done. Cannot fail. */
void eng_workspace_release(eng_workspace_t *ws, void *ptr);

/* The bytes the workspace blocks over `cache` hold (as the cache rounded
 * them: what their owner is counted); 0 without a pool. Cannot fail. */
size_t eng_workspace_bytes(alloc_cache_t *cache);

/* The size of the pool's blocks. Cannot fail. */
size_t eng_workspace_block_bytes(const eng_workspace_t *ws);

#ifdef __cplusplus
}
#endif
#endif
