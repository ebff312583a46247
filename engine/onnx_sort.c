/* onnx_sort.c -- topological order of a loaded graph's nodes.
 *
 * Algorithm: Kahn's. A node's in-degree counts its inputs that other nodes
 * produce (each occurrence); nodes at zero are ready; taking a node makes
 * its outputs' consumers one step closer to ready. The ready set is a
 * binary min-heap of current positions, so the node taken is always the
 * earliest ready one: an order that is already topological is kept as it
 * is (exporters choose it, and it shapes tensor lifetimes), and any other
 * order changes as little as Kahn allows. O((nodes + edges) log nodes).
 *
 * Guarantee: on success each node comes after the producers of all its
 * inputs; a graph with a cycle is left as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/onnx_impl.h"

static void heap_push(int *h, size_t *n, int v)
{
    size_t i = (*n)++;
    for (; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = v;
}

static int heap_pop(int *h, size_t *n)
{
    int top = h[0], last = h[--*n];
    size_t i = 0;
    for (size_t c; (c = 2 * i + 1) < *n; i = c) {
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= last)
            break;
        h[i] = h[c];
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* A node on a cycle: from a node that never became ready, step to a
 * producer that did not either; after n steps the walk is inside a cycle. */
static int cycle_node(const eng_graph_t *g, const int *indeg)
{
    size_t r = 0;
    while (indeg[r] == 0)
        r++;
    for (size_t step = 0; step < g->n_nodes; step++) {
        const eng_node_t *e = &g->nodes[r];
        for (int k = 0; k < e->n_inputs; k++) {
            int v = e->inputs[k];
            if (v >= 0 && g->values[v].producer >= 0 && indeg[g->values[v].producer] > 0) {
                r = (size_t)g->values[v].producer;
                break;
            }
        }
    }
    return (int)r;
}

/* Kahn's loop over the consumer lists; fills order and returns how many
 * nodes it placed (fewer than n_nodes: a cycle, indeg says where). */
static size_t kahn(const eng_graph_t *g, int *indeg, const size_t *start, const int *cons,
                   int *heap, int *order)
{
    size_t hn = 0, done = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (indeg[i] == 0)
            heap_push(heap, &hn, (int)i);
    while (hn > 0) {
        int i = heap_pop(heap, &hn);
        order[done++] = i;
        for (int o = 0; o < g->nodes[i].n_outputs; o++) {
            int v = g->nodes[i].outputs[o];
            if (v < 0)
                continue;
            for (size_t c = v > 0 ? start[v - 1] : 0; c < start[v]; c++)
                if (--indeg[cons[c]] == 0)
                    heap_push(heap, &hn, cons[c]);
        }
    }
    return done;
}

int onnx_graph_sort(eng_graph_t *g, int *order, int *cycle)
{
    size_t n = g->n_nodes, nv = g->n_values, n_edges = 0;
    int rc = 0;
    int *indeg = calloc(n + 1, sizeof *indeg), *heap = malloc((n + 1) * sizeof *heap);
    int *cons = NULL;
    size_t *start = calloc(nv + 1, sizeof *start);
    eng_node_t *nodes = malloc((n + 1) * sizeof *nodes);
    if (!indeg || !heap || !start || !nodes)
        goto oom;
    /* Consumers of each value in one array: once filled, value v's are
     * cons[v ? start[v - 1] : 0 .. start[v]). */
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && g->values[v].producer >= 0) {
                indeg[i]++;
                start[v + 1]++;
                n_edges++;
            }
        }
    for (size_t v = 0; v < nv; v++)
        start[v + 1] += start[v];
    if (!(cons = malloc((n_edges + 1) * sizeof *cons)))
        goto oom;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && g->values[v].producer >= 0)
                cons[start[v]++] = (int)i;
        }
    if (kahn(g, indeg, start, cons, heap, order) < n) {
        *cycle = cycle_node(g, indeg);
        const eng_node_t *e = &g->nodes[*cycle];
        rc = fs_err(FS_EINVAL, "graph has a cycle through node '%.100s' (%s)", e->name,
                    e->op_type);
        goto out;
    }
    memcpy(nodes, g->nodes, n * sizeof *nodes);
    for (size_t j = 0; j < n; j++) {
        g->nodes[j] = nodes[order[j]];
        for (int o = 0; o < g->nodes[j].n_outputs; o++)
            if (g->nodes[j].outputs[o] >= 0)
                g->values[g->nodes[j].outputs[o]].producer = (int)j;
    }
    goto out;
oom:
    rc = fs_err(FS_ENOMEM, "out of memory sorting %zu nodes", n);
out:
    free(indeg);
    free(heap);
    free(cons);
    free(start);
    free(nodes);
    return rc;
}
