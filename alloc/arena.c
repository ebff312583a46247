/* arena.c -- bump allocation over blocks from a cache.
 *
 * Blocks are kept in a singly linked list in the order they were taken; `cur`
 * is the block being bumped and `off` the offset in it. An allocation that
 * does not fit moves to the next kept block that can hold it, skipping
 * smaller ones, or takes a new block of max(first block size, bytes + align)
 * at the end of the list. Reset points back at the first block with offset
 * zero: O(1), and the blocks stay for the next round. Guarantee: slices are
 * aligned, never overlap until a reset, and every block goes back to the
 * cache on release. The list node is host memory, apart from the block. */
#include "alloc/arena.h"

#include <stdlib.h>

#include "common/error.h"

typedef struct arena_block {
    struct arena_block *next;
    char *base;
    size_t size;
} arena_block_t;

struct alloc_arena {
    alloc_cache_t *cache;      /* borrowed */
    alloc_stream_t stream;
    alloc_owner_t owner;
    unsigned flags;            /* for alloc_cache_alloc_flags */
    size_t first_block_bytes;
    arena_block_t *head, *tail;
    arena_block_t *cur;        /* NULL only when there are no blocks */
    size_t off;                /* bump offset in cur */
    size_t used_before_cur;    /* bytes used in blocks before cur since reset */
    alloc_arena_stats_t stats; /* used_bytes derived on read */
};

#define ARENA_DEFAULT_ALIGN 256
#define ARENA_MAX_ALIGN 4096

/* Takes a block of `size` from the cache onto the list's end. */
static int arena_block_take(alloc_arena_t *a, size_t size, arena_block_t **out)
{
    arena_block_t *blk = calloc(1, sizeof *blk);
    if (!blk)
        return fs_err(FS_ENOMEM, "out of host memory for an arena block");
    void *p = NULL;
    int rc = alloc_cache_alloc_flags(a->cache, size, a->stream, a->owner, a->flags, &p);
    if (rc != 0) {
        free(blk);
        return rc;
    }
    blk->base = p;
    blk->size = size;
    if (a->tail)
        a->tail->next = blk;
    else
        a->head = blk;
    a->tail = blk;
    a->stats.capacity_bytes += size;
    a->stats.n_blocks++;
    *out = blk;
    return 0;
}

int alloc_arena_create(alloc_cache_t *cache, size_t first_block_bytes, alloc_stream_t stream,
                       alloc_owner_t owner, unsigned flags, alloc_arena_t **out)
{
    if (!cache || first_block_bytes == 0)
        return fs_err(FS_EINVAL, "alloc_arena_create: a cache and a first block size > 0 are "
                      "required");
    alloc_arena_t *a = calloc(1, sizeof *a);
    if (!a)
        return fs_err(FS_ENOMEM, "out of host memory for an arena");
    a->cache = cache;
    a->stream = stream;
    a->owner = owner;
    a->flags = flags;
    a->first_block_bytes = first_block_bytes;
    int rc = arena_block_take(a, first_block_bytes, &a->cur);
    if (rc != 0) {
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

/* Offset of the first `align`-aligned address at or after base + off. */
static size_t align_offset(const char *base, size_t off, size_t align)
{
    uintptr_t addr = (uintptr_t)base + off;
    uintptr_t aligned = (addr + align - 1) & ~(uintptr_t)(align - 1);
    return off + (size_t)(aligned - addr);
}

int alloc_arena_alloc(alloc_arena_t *a, size_t bytes, size_t align, void **out)
{
    if (align == 0)
        align = ARENA_DEFAULT_ALIGN;
    if ((align & (align - 1)) != 0 || align > ARENA_MAX_ALIGN)
        return fs_err(FS_EINVAL, "arena alignment %zu is not a power of two up to %d", align,
                      ARENA_MAX_ALIGN);
    if (bytes > SIZE_MAX / 2)
        return fs_err(FS_ENOMEM, "arena request of %zu bytes is too large", bytes);

    /* The current block from the bump offset, then each later kept block
     * from its start; a block passed over counts as used in full, since bump
     * allocation never goes back. Failing those, a new block at the end. */
    size_t used = a->used_before_cur;
    for (arena_block_t *blk = a->cur; blk; blk = blk->next) {
        size_t start = align_offset(blk->base, blk == a->cur ? a->off : 0, align);
        if (start <= blk->size && bytes <= blk->size - start) {
            a->cur = blk;
            a->used_before_cur = used;
            a->off = start + bytes;
            goto done;
        }
        used += blk->size;
    }
    size_t want = bytes + align > a->first_block_bytes ? bytes + align : a->first_block_bytes;
    arena_block_t *fresh = NULL;
    int rc = arena_block_take(a, want, &fresh);
    if (rc != 0)
        return rc;
    a->cur = fresh;
    a->used_before_cur = used;
    a->off = align_offset(fresh->base, 0, align) + bytes;
done:
    *out = a->cur->base + (a->off - bytes);
    if (a->used_before_cur + a->off > a->stats.peak_used_bytes)
        a->stats.peak_used_bytes = a->used_before_cur + a->off;
    return 0;
}

void alloc_arena_reset(alloc_arena_t *a)
{
    a->cur = a->head;
    a->off = 0;
    a->used_before_cur = 0;
    a->stats.n_resets++;
}

void alloc_arena_release(alloc_arena_t *a)
{
    arena_block_t *blk = a->head;
    while (blk) {
        arena_block_t *next = blk->next;
        /* Cannot fail: the block came from this cache and is still allocated. */
        alloc_cache_free(a->cache, blk->base);
        free(blk);
        blk = next;
    }
    a->head = a->tail = a->cur = NULL;
    a->off = 0;
    a->used_before_cur = 0;
    a->stats.capacity_bytes = 0;
    a->stats.n_blocks = 0;
}

void alloc_arena_destroy(alloc_arena_t *a)
{
    if (!a)
        return;
    alloc_arena_release(a);
    free(a);
}

void alloc_arena_stats(const alloc_arena_t *a, alloc_arena_stats_t *out)
{
    *out = a->stats;
    out->used_bytes = a->cur ? a->used_before_cur + a->off : 0;
}

alloc_cache_t *alloc_arena_cache(const alloc_arena_t *a)
{
    return a->cache;
}
