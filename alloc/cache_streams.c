/* cache_streams.c -- the caching allocator's streams and fences: when a
 * block freed on one stream may serve another, and when a block used on
 * several streams (record_stream) is really free.
 *
 * The algorithm (cache.c's header says where it differs from PyTorch):
 *  - Every free stamps the block with a new free_seq, and its stream with
 *    last_free_seq. A stream's done_seq says up to which free_seq its work
 *    is known to have finished; a FREE block of stream S is safe for any
 *    stream once its free_seq <= S.done_seq.
 *  - Fences are recorded lazily: only when an allocation on one stream
 *    misses, one fence per other stream that has frees since its last
 *    fence, covering every free so far (fence_seq). A later poll that
 *    finds it passed moves done_seq to fence_seq. The common path, an
 *    allocation served by its own stream's blocks, never touches the device.
 *  - A block used on extra streams is not freed at once: one fence per
 *    extra stream is recorded at free, and the block waits PENDING (still
 *    counted active, still in the hash) until all of them passed.
 *  - A retired stream (destroyed by its owner, who synchronised it) is done
 *    up to now and never fenced again; a stream under graph capture is not
 *    fenced until its capture ends.
 * A provider without fences (host) makes all of this immediate.
 *
 * Guarantee: a block freed on one stream is handed to another only after a
 * fence recorded on its stream after the free has passed, and a PENDING
 * block only after every fence of its extra streams has. */
#include "alloc/cache_impl.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

/* The fence state of `id`, created on first use. NULL only when out of host
 * memory, in which case the block simply is not offered to other streams. */
static cache_stream_t *stream_get_locked(alloc_cache_t *c, alloc_stream_t id)
{
    CACHE_ASSERT_LOCKED(c);
    for (size_t i = 0; i < c->n_streams; i++)
        if (c->streams[i].id == id)
            return &c->streams[i];
    if (c->n_streams == c->cap_streams) {
        size_t cap = c->cap_streams ? 2 * c->cap_streams : 4;
        cache_stream_t *grown = realloc(c->streams, cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->streams = grown;
        c->cap_streams = cap;
    }
    cache_stream_t *s = &c->streams[c->n_streams++];
    memset(s, 0, sizeof *s);
    s->id = id;
    return s;
}

bool cache_stream_block_ready_locked(alloc_cache_t *c, const cache_block_t *b)
{
    CACHE_ASSERT_LOCKED(c);
    for (size_t i = 0; i < c->n_streams; i++)
        if (c->streams[i].id == b->stream)
            return b->free_seq <= c->streams[i].done_seq;
    return false;
}

void cache_stream_note_free_locked(alloc_cache_t *c, const cache_block_t *b)
{
    CACHE_ASSERT_LOCKED(c);
    if (!c->has_fences)
        return;
    cache_stream_t *s = stream_get_locked(c, b->stream);
    if (s) {
        s->last_free_seq = b->free_seq;
        s->retired = false; /* a live stream that reuses a retired handle */
    }
}

/* Queries `*fence` of `stream`: 0 while it has not passed; else destroys it,
 * sets *fence to NULL and returns 1 when it passed, -1 when the query
 * failed (logged; the caller decides what a failure proves). */
static int fence_poll_locked(alloc_cache_t *c, void **fence, alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    int q = alloc_provider_fence_query(c->provider, *fence);
    if (q == 0)
        return 0;
    if (q < 0)
        FS_LOG_W("alloc", "cache '%s': fence query on stream %#lx failed: %s", c->name,
                 (unsigned long)stream, fs_errmsg());
    alloc_provider_fence_destroy(c->provider, *fence);
    *fence = NULL;
    return q < 0 ? -1 : 1;
}

bool cache_streams_poll_locked(alloc_cache_t *c, alloc_stream_t stream)
{
    CACHE_ASSERT_LOCKED(c);
    bool moved = false;
    for (size_t i = 0; i < c->n_streams; i++) {
        cache_stream_t *s = &c->streams[i];
        if (s->fence) {
            int q = fence_poll_locked(c, &s->fence, s->id);
            if (q == 0)
                continue;
            /* A failed query is not proof the work finished: done_seq stays. */
            if (q > 0 && s->fence_seq > s->done_seq) {
                s->done_seq = s->fence_seq;
                moved = true;
            }
        }
        /* A fence recorded from here into a stream under graph capture
         * would join the capture (and be no fence); it waits for the end. */
        if (s->id != stream && !s->retired && !s->capturing && s->last_free_seq > s->done_seq) {
            void *fence = NULL;
            if (alloc_provider_fence_record(c->provider, s->id, &fence) != 0) {
                FS_LOG_W("alloc", "cache '%s': fence record on stream %#lx failed: %s", c->name,
                         (unsigned long)s->id, fs_errmsg());
                continue;
            }
            if (fence) {
                s->fence = fence;
                s->fence_seq = c->free_seq;
            } else {
                /* A NULL fence has passed already. */
                s->done_seq = c->free_seq;
                moved = true;
            }
        }
    }
    return moved;
}

bool cache_block_defer_locked(alloc_cache_t *c, cache_block_t *b)
{
    CACHE_ASSERT_LOCKED(c);
    if (b->n_uses == 0 || !c->has_fences)
        return false;
    bool deferred = false;
    for (uint8_t i = 0; i < b->n_uses; i++) {
        b->fences[i] = NULL;
        if (alloc_provider_fence_record(c->provider, b->uses[i], &b->fences[i]) != 0)
            FS_LOG_W("alloc", "cache '%s': fence record on stream %#lx failed, freeing "
                     "without waiting: %s", c->name, (unsigned long)b->uses[i], fs_errmsg());
        else if (b->fences[i])
            deferred = true;
    }
    if (!deferred)
        return false;
    b->state = ALLOC_BLOCK_PENDING;
    b->requested = 0;
    SLIST_INSERT_HEAD(&c->pending, b, link);
    return true;
}

void cache_pending_process_locked(alloc_cache_t *c)
{
    CACHE_ASSERT_LOCKED(c);
    cache_block_t *b, *tmp, *prev = NULL;
    SLIST_FOREACH_SAFE(b, &c->pending, link, tmp) {
        /* A failed query counts as passed: a block pending forever would
         * pin its segment for the cache's life. */
        bool all_passed = true;
        for (uint8_t i = 0; i < b->n_uses; i++)
            if (b->fences[i] && fence_poll_locked(c, &b->fences[i], b->uses[i]) == 0)
                all_passed = false;
        if (!all_passed) {
            prev = b;
            continue;
        }
        if (prev)
            SLIST_REMOVE_AFTER(prev, link);
        else
            SLIST_REMOVE_HEAD(&c->pending, link);
        cache_block_release_locked(c, b);
    }
}

void cache_streams_fini(alloc_cache_t *c)
{
    for (size_t i = 0; i < c->n_streams; i++)
        alloc_provider_fence_destroy(c->provider, c->streams[i].fence);
    free(c->streams);
    c->streams = NULL;
    c->n_streams = c->cap_streams = 0;
}

int alloc_cache_stream_retire(alloc_cache_t *c, alloc_stream_t stream)
{
    if (!c->has_fences || stream == 0)
        return 0;
    cache_lock(c);
    for (size_t i = 0; i < c->n_streams; i++) {
        cache_stream_t *s = &c->streams[i];
        if (s->id != stream)
            continue;
        if (s->fence) {
            alloc_provider_fence_destroy(c->provider, s->fence);
            s->fence = NULL;
        }
        /* The caller synchronised it: everything freed on it is safe. */
        s->done_seq = c->free_seq;
        s->retired = true;
    }
    /* Blocks still in use keep no reference to the stream: their frees (and
     * extra uses) count as the default stream's from now on. */
    cache_block_t *b, *tmp;
    HASH_ITER(hh, c->by_ptr, b, tmp) {
        if (b == &c->sentinel || b->state != ALLOC_BLOCK_ALLOCATED)
            continue;
        if (b->stream == stream)
            b->stream = 0;
        for (int u = 0; u < b->n_uses; u++)
            if (b->uses[u] == stream)
                b->uses[u] = 0;
    }
    cache_unlock(c);
    return 0;
}

int alloc_cache_stream_capture(alloc_cache_t *c, alloc_stream_t stream, bool capturing)
{
    if (!c->has_fences || stream == 0)
        return 0;
    cache_lock(c);
    cache_stream_t *s = stream_get_locked(c, stream);
    int rc = 0;
    if (!s)
        rc = fs_err(FS_ENOMEM, "cache '%s': out of host memory for a stream's state", c->name);
    else if (capturing)
        s->capturing++;
    else if (s->capturing > 0)
        s->capturing--;
    cache_unlock(c);
    return rc;
}

int alloc_cache_record_stream(alloc_cache_t *c, void *ptr, alloc_stream_t stream)
{
    cache_lock(c);
    cache_block_t *b = cache_block_lookup_locked(c, ptr);
    int rc = 0;
    if (!b) {
        rc = fs_err(FS_EINVAL, "cache '%s': record_stream on %p, which is not an allocated block",
                    c->name, ptr);
    } else if (stream != b->stream) {
        uint8_t i = 0;
        while (i < b->n_uses && b->uses[i] != stream)
            i++;
        if (i == b->n_uses) {
            if (b->n_uses == CACHE_BLOCK_MAX_USES)
                rc = fs_err(FS_ENOTSUP, "cache '%s': block %p is already used on %d other "
                            "streams, the most a block can be", c->name, ptr,
                            CACHE_BLOCK_MAX_USES);
            else
                b->uses[b->n_uses++] = stream;
        }
    }
    cache_unlock(c);
    return rc;
}

void alloc_cache_process_fences(alloc_cache_t *c)
{
    cache_lock(c);
    if (!SLIST_EMPTY(&c->pending))
        cache_pending_process_locked(c);
    if (c->has_fences && c->n_streams > 0)
        cache_streams_poll_locked(c, (alloc_stream_t)-1);
    cache_unlock(c);
}
