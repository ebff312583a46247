/* workspace.c -- the device libraries' workspace pools, one per device
 * memory cache (engine/workspace.h says the sharing rule).
 *
 * The pools are a list under one mutex: a model attaches once at load and
 * detaches once when destroyed, and a run takes and gives back a lease --
 * a few pointer comparisons under the lock, never a device call but when
 * every block is leased and a new one is allocated (the cache's own lock
 * nests inside this one; the cache never calls back into the engine). */
#include "engine/workspace.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/log.h"

/* One block of a pool. */
typedef struct ws_block {
    void *ptr;
    size_t held;              /* its bytes as the cache rounded them */
    bool leased;
    const void *last_user;    /* the model that leased it last */
} ws_block_t;

struct eng_workspace {
    struct eng_workspace *next;
    alloc_cache_t *cache;     /* borrowed: the device's memory */
    alloc_owner_t owner;      /* "<device>/workspace" */
    size_t bytes;             /* of each block */
    int models;               /* attached */
    ws_block_t *blocks;
    size_t n_blocks, cap;
};

static struct {
    pthread_mutex_t lock;     /* guards everything below and every pool */
    eng_workspace_t *pools;
} W = {PTHREAD_MUTEX_INITIALIZER, NULL};

static eng_workspace_t *pool_find_locked(alloc_cache_t *cache)
{
    for (eng_workspace_t *p = W.pools; p; p = p->next)
        if (p->cache == cache)
            return p;
    return NULL;
}

/* Allocates one more block; its index in *at. 0, or FS_ENOMEM (host
 * memory, or the cache's error) with the pool as it was. */
static int block_add_locked(eng_workspace_t *p, size_t *at)
{
    if (p->n_blocks == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 4;
        ws_block_t *b = realloc(p->blocks, cap * sizeof *b);
        if (!b)
            return fs_err(FS_ENOMEM, "out of host memory for a workspace block");
        p->blocks = b;
        p->cap = cap;
    }
    void *ptr = NULL;
    /* No stream: the block serves every model's stream in turn, and is
     * freed only when the last model has synchronised and gone. */
    int rc = alloc_cache_alloc_flags(p->cache, p->bytes, 0, p->owner, ALLOC_F_OWN_SEGMENT, &ptr);
    if (rc)
        return rc;
    size_t held = p->bytes;
    (void)alloc_cache_block_size(p->cache, ptr, &held); /* its own block: cannot fail */
    p->blocks[p->n_blocks] = (ws_block_t){.ptr = ptr, .held = held};
    *at = p->n_blocks++;
    return 0;
}

static void pool_free_locked(eng_workspace_t *p)
{
    for (size_t i = 0; i < p->n_blocks; i++)
        alloc_cache_free(p->cache, p->blocks[i].ptr);
    if (p->owner != ALLOC_OWNER_SERVER && alloc_cache_owner_destroy(p->cache, p->owner) != 0)
        FS_LOG_E("engine", "the workspace's owner kept bytes: %s", fs_errmsg());
    free(p->blocks);
    free(p);
}

int eng_workspace_attach(alloc_cache_t *cache, const char *device, size_t bytes,
                         eng_workspace_t **out)
{
    *out = NULL;
    pthread_mutex_lock(&W.lock);
    int rc = 0;
    eng_workspace_t *p = pool_find_locked(cache);
    if (p && p->bytes != bytes) {
        rc = fs_err(FS_EINVAL, "the workspace over %s has %zu-byte blocks, %zu asked for",
                    device, p->bytes, bytes);
    } else if (!p) {
        size_t at;
        char name[ALLOC_OWNER_NAME_MAX];
        snprintf(name, sizeof name, "%.*s/workspace", ALLOC_OWNER_NAME_MAX - 11, device);
        if (!(p = calloc(1, sizeof *p)))
            rc = fs_err(FS_ENOMEM, "out of host memory for a workspace pool");
        else
            *p = (eng_workspace_t){.cache = cache, .bytes = bytes, .owner = ALLOC_OWNER_SERVER};
        if (rc == 0)
            rc = alloc_cache_owner_create(cache, name, &p->owner);
        if (rc == 0)
            rc = block_add_locked(p, &at);
        if (rc == 0) {
            p->next = W.pools;
            W.pools = p;
        } else if (p) {
            pool_free_locked(p);
        }
    }
    if (rc == 0) {
        p->models++;
        *out = p;
    }
    pthread_mutex_unlock(&W.lock);
    return rc;
}

void eng_workspace_detach(eng_workspace_t *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&W.lock);
    if (--ws->models == 0) {
        eng_workspace_t **at = &W.pools;
        while (*at != ws)
            at = &(*at)->next;
        *at = ws->next;
        pool_free_locked(ws);
    }
    pthread_mutex_unlock(&W.lock);
}

int eng_workspace_acquire(eng_workspace_t *ws, const void *user, void **ptr)
{
    pthread_mutex_lock(&W.lock);
    size_t pick = ws->n_blocks;
    for (size_t i = 0; i < ws->n_blocks; i++) {
        if (ws->blocks[i].leased)
            continue;
        if (ws->blocks[i].last_user == user) {
            pick = i;
            break;
        }
        if (pick == ws->n_blocks)
            pick = i;
    }
    int rc = pick < ws->n_blocks ? 0 : block_add_locked(ws, &pick);
    if (rc == 0) {
        ws->blocks[pick].leased = true;
        ws->blocks[pick].last_user = user;
        *ptr = ws->blocks[pick].ptr;
    }
    pthread_mutex_unlock(&W.lock);
    return rc;
}

void eng_workspace_release(eng_workspace_t *ws, void *ptr)
{
    pthread_mutex_lock(&W.lock);
    for (size_t i = 0; i < ws->n_blocks; i++)
        if (ws->blocks[i].ptr == ptr)
            ws->blocks[i].leased = false;
    pthread_mutex_unlock(&W.lock);
}

size_t eng_workspace_bytes(alloc_cache_t *cache)
{
    pthread_mutex_lock(&W.lock);
    const eng_workspace_t *p = pool_find_locked(cache);
    size_t bytes = 0;
    for (size_t i = 0; p && i < p->n_blocks; i++)
        bytes += p->blocks[i].held;
    pthread_mutex_unlock(&W.lock);
    return bytes;
}

size_t eng_workspace_block_bytes(const eng_workspace_t *ws)
{
    return ws->bytes;
}
