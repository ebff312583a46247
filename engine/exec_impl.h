/* exec_impl.h -- the dynamic executor's frame: one graph (the model's or a
 * subgraph) run node by node over a binding of its values. exec.c runs
 * frames; exec_control.c runs If, Loop and Scan by running their subgraphs
 * in frames of their own, nested in the frame of the node's graph.
 *
 * Every tensor of a frame is held in one of these ways (exec_hold_t):
 *  - CONST: a graph constant (its host data, or its device copy);
 *  - BORROWED: memory that outlives the frame and that someone else frees:
 *    a caller's input, an enclosing frame's value (an outer-scope read, a
 *    node's input, a slice of one);
 *  - OWNED: a block of the plan's cache under the model's activation owner,
 *    freed after its last reader unless it is a graph output, and at the
 *    latest when the frame ends;
 *  - MOVED: was OWNED until exec_frame_take handed it over; the data
 *    pointer stays only so that a second take of the value is told apart.
 * So a subgraph's memory is the model's activation memory, accounted and
 * freed like the main graph's, and a frame ends holding nothing.
 *
 * Threading: a frame belongs to one run on one thread. */
#ifndef FS_ENGINE_EXEC_IMPL_H
#define FS_ENGINE_EXEC_IMPL_H

#include "engine/plan_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum exec_hold {
    EXEC_NONE = 0,             /* not computed (yet) */
    EXEC_CONST,
    EXEC_BORROWED,
    EXEC_OWNED,
    EXEC_MOVED,
} exec_hold_t;

typedef struct exec_frame {
    const eng_plan_t *p;       /* device, cache, owners, threads, device constants */
    const eng_graph_t *g;
    const bool *node_done;     /* the model graph's nodes folded at load; NULL in a subgraph */
    int depth;                 /* subgraph nesting: 0 for the model graph */
    alloc_stream_t stream;
    eng_tensor_t *t;           /* per value: dtype, shape, data where the device computes */
    exec_hold_t *hold;         /* per value */
    int *readers;              /* per value: node inputs still to read it */
    /* Devices without host memory (NULL on the CPU): per value its host
     * copy (data NULL when the host has none), and the copies this frame
     * made for shape inference (malloc). */
    eng_tensor_t *hv;
    void **mirror;
    int max_io;                /* most inputs or outputs of a node of g */
    const eng_tensor_t **ins;  /* max_io entries each: one node's views */
    eng_tensor_t **outs;
    const eng_tensor_t **hins;
    eng_tensor_t *iv;
} exec_frame_t;

/* ---- exec.c ---- */

/* A frame for graph g of plan p with its constants bound and nothing else.
 * 0, or FS_ENOMEM with nothing allocated. */
int exec_frame_init(exec_frame_t *f, const eng_plan_t *p, const eng_graph_t *g,
                    const bool *node_done, int depth);
/* Frees every OWNED tensor and the frame's arrays. Cannot fail. */
void exec_frame_fini(exec_frame_t *f);
/* Binds value v (an input or OUTER value of g) to t, held as `hold`
 * (BORROWED or OWNED: the frame takes it over); `host` (borrowed, may be
 * NULL) is its host copy. An OWNED tensor nothing reads goes at once. */
void exec_frame_bind(exec_frame_t *f, int v, const eng_tensor_t *t, exec_hold_t hold,
                     const void *host);
/* Runs every node of the graph (but the folded ones) in order, freeing each
 * OWNED value after its last reader. 0, or the first node's error. */
int exec_frame_run(exec_frame_t *f);
/* Value v as *out, and how it was held: an OWNED one becomes the caller's
 * (the frame keeps it as MOVED); CONST and BORROWED ones stay valid while
 * the frame's bindings do; MOVED means a copy of a tensor a take already
 * handed over; NONE, never computed. Cannot fail. */
exec_hold_t exec_frame_take(exec_frame_t *f, int v, eng_tensor_t *out);

/* Data for t (dtype and shape set) from the plan's cache under the
 * activation owner; 0, or FS_ENOMEM. exec_free: NULL is a no-op. */
int exec_alloc(const exec_frame_t *f, eng_tensor_t *t);
void exec_free(const exec_frame_t *f, void *data);
/* `bytes` of t's data into host memory at dst: from `host` (its host copy)
 * when not NULL, else from t itself (a device-to-host copy and a stream
 * synchronisation on a device without host memory). 0 or the device's
 * error. */
int exec_read(const exec_frame_t *f, const eng_tensor_t *t, const void *host, void *dst,
              size_t bytes);
/* `bytes` from host memory src into t's data (queued on a device). */
int exec_write(const exec_frame_t *f, eng_tensor_t *t, const void *src, size_t bytes);

/* ---- exec_control.c ---- */

/* Runs control-flow node n (eng_op_is_control) of f's graph: its outputs
 * become OWNED values of f. 0, or an error naming the node (and, for one
 * inside a subgraph, the node that failed there). */
int exec_control_run(exec_frame_t *f, const eng_node_t *n);

#ifdef __cplusplus
}
#endif
#endif
