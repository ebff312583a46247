/* arena.h -- bump allocation over blocks taken from a cache.
 *
 * An arena takes one block from its cache when created and further blocks
 * when an allocation does not fit; it hands out aligned slices by bumping an
 * offset. Reset rewinds to the first block in O(1), keeping every block for
 * the next round; release gives every block back to the cache. Individual
 * slices are never freed. The arena policy gives each batch one arena so
 * request memory never interleaves with long-lived blocks.
 *
 * Threading: one thread at a time (a batch belongs to one worker). The
 * cache it draws from is internally locked. */
#ifndef FS_ALLOC_ARENA_H
#define FS_ALLOC_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "alloc/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct alloc_arena_stats {
    size_t capacity_bytes; /* sum of the blocks held */
    size_t used_bytes;     /* bumped since the last reset, alignment padding included */
    size_t peak_used_bytes;
    size_t n_blocks;
    uint64_t n_resets;
} alloc_arena_stats_t;

/* Creates an arena drawing from `cache` (borrowed; must outlive the arena)
 * for `stream` and `owner`, with a first block of `first_block_bytes` (>0).
 * `flags` are passed to alloc_cache_alloc_flags for every block. 0 and *out
 * (caller frees with alloc_arena_destroy), or the cache's error. */
int alloc_arena_create(alloc_cache_t *cache, size_t first_block_bytes, alloc_stream_t stream,
                       alloc_owner_t owner, unsigned flags, alloc_arena_t **out);

/* Returns a slice of `bytes` aligned to `align` (a power of two, <= 4096;
 * 0 means 256). Takes a new block of max(first block size, bytes + align)
 * when the current one is full. 0 and *out, or FS_EINVAL for a bad
 * alignment, or the cache's error (the arena is unchanged then). */
int alloc_arena_alloc(alloc_arena_t *a, size_t bytes, size_t align, void **out);

/* Rewinds to the start of the first block; blocks are kept. O(1). */
void alloc_arena_reset(alloc_arena_t *a);

/* Gives every block back to the cache; the arena is empty and may be used
 * again (it then takes a new first block). */
void alloc_arena_release(alloc_arena_t *a);

/* Releases and frees the arena. NULL is a no-op. */
void alloc_arena_destroy(alloc_arena_t *a);

void alloc_arena_stats(const alloc_arena_t *a, alloc_arena_stats_t *out);
alloc_cache_t *alloc_arena_cache(const alloc_arena_t *a);

#ifdef __cplusplus
}
#endif
#endif
