/* onnx_pool.c -- the memory a loaded graph lives in, and its teardown.
 *
 * The IR (values, nodes, names, attributes) is bump-allocated from chunks
 * of 64 KiB (a bigger request gets a chunk of its own, placed behind the
 * one being bumped so its free space is not lost) and freed whole: no
 * per-object frees, no fragmentation, one pass to destroy. Constant data
 * is not in the pool: it comes from the weight allocator given at load,
 * and eng_graph_destroy hands every CONST value's data back to it, so
 * constants folded later by the engine (with the same allocator) go too.
 * Subgraphs live in their model graph's pool and go with it. */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/onnx_impl.h"

typedef struct pool_chunk {
    struct pool_chunk *next;
    size_t size, used;
    max_align_t data[];
} pool_chunk_t;

struct onnx_pool {
    pool_chunk_t *head;       /* the chunk being bumped; older ones follow */
    eng_weight_alloc_t wa;    /* the load's callbacks, copied (NULL: malloc/free) */
};

#define POOL_CHUNK_BYTES ((size_t)64 * 1024)

onnx_pool_t *onnx_pool_create(const eng_weight_alloc_t *wa)
{
    onnx_pool_t *p = calloc(1, sizeof *p);
    if (p && wa)
        p->wa = *wa;
    return p;
}

void *onnx_pool_alloc(onnx_pool_t *p, size_t bytes)
{
    const size_t align = alignof(max_align_t);
    if (bytes > SIZE_MAX - align - sizeof(pool_chunk_t))
        return NULL;
    size_t need = (bytes + align - 1) & ~(align - 1);
    pool_chunk_t *c = p->head;
    if (!c || c->size - c->used < need) {
        size_t size = need > POOL_CHUNK_BYTES ? need : POOL_CHUNK_BYTES;
        pool_chunk_t *n = malloc(sizeof *n + size);
        if (!n)
            return NULL;
        n->size = size;
        n->used = 0;
        /* A big allocation fills its own chunk; keep bumping the current one. */
        if (c && need > POOL_CHUNK_BYTES) {
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            p->head = n;
        }
        c = n;
    }
    void *r = (char *)c->data + c->used;
    c->used += need;
    return memset(r, 0, bytes);
}

char *onnx_pool_strndup(onnx_pool_t *p, const char *s, size_t n)
{
    char *d = onnx_pool_alloc(p, n + 1);
    if (d && n)
        memcpy(d, s, n);
    return d;
}

char *onnx_pool_strdup(onnx_pool_t *p, const char *s)
{
    return onnx_pool_strndup(p, s ? s : "", s ? strlen(s) : 0);
}

void onnx_pool_destroy(onnx_pool_t *p)
{
    if (!p)
        return;
    for (pool_chunk_t *c = p->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(p);
}

void *onnx_pool_weight_alloc(const onnx_pool_t *p, size_t bytes)
{
    return eng_weights_alloc(&p->wa, bytes);
}

/* Hands the constant data of g and of its subgraphs back to `wa`. A graph
 * a failed load left half built has its counts at what was filled. */
static void graph_free_constants(const eng_graph_t *g, const eng_weight_alloc_t *wa)
{
    for (size_t i = 0; g->values && i < g->n_values; i++)
        if (g->values[i].kind == ENG_VALUE_CONST && g->values[i].constant.data)
            eng_weights_free(wa, g->values[i].constant.data);
    for (size_t i = 0; g->nodes && i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == ENG_ATTR_GRAPH && g->nodes[i].attrs[a].g)
                graph_free_constants(g->nodes[i].attrs[a].g, wa);
}

void eng_graph_destroy(eng_graph_t *g)
{
    if (!g)
        return;
    onnx_pool_t *p = g->pool;
    graph_free_constants(g, &p->wa);
    onnx_pool_destroy(p); /* g and its subgraphs live in the pool */
}
