/* shape_view.c -- the strided views of the shape ops that are one strided
 * copy (Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth): the
 * host-side index arithmetic the CPU and CUDA kernels share, so that both
 * walk the same view (engine/ops/shape_impl.h says what a view is). */
#include "engine/ops/shape_impl.h"

/* Starts *v as an empty view of `rank` dims; returns input 0's shape, its
 * strides in st. Cannot fail. */
static const eng_shape_t *view_start(const eng_op_ctx_t *c, eng_strided_t *v, int rank,
                                     int64_t st[ENG_MAX_RANK])
{
    const eng_shape_t *xs = &c->inputs[0]->shape;
    eng_shape_strides(xs, st);
    *v = (eng_strided_t){.rank = rank};
    return xs;
}

int eng_strided_transpose(const eng_op_ctx_t *c, eng_strided_t *v)
{
    int perm[ENG_MAX_RANK];
    int rc = eng_transpose_params(c, perm);
    if (rc != 0)
        return rc;
    int64_t st[ENG_MAX_RANK];
    const eng_shape_t *xs = view_start(c, v, c->inputs[0]->shape.rank, st);
    for (int d = 0; d < xs->rank; d++) {
        v->dims[d] = xs->dims[perm[d]];
        v->strides[d] = st[perm[d]];
    }
    return 0;
}

int eng_strided_slice(const eng_op_ctx_t *c, eng_strided_t *v)
{
    eng_slice_params_t p;
    int rc = eng_slice_params(c, &p);
    if (rc != 0)
        return rc;
    int64_t st[ENG_MAX_RANK];
    const eng_shape_t *xs = view_start(c, v, c->inputs[0]->shape.rank, st);
    for (int d = 0; d < xs->rank; d++) {
        v->dims[d] = p.out.dims[d];
        v->strides[d] = st[d] * p.steps[d];
        v->offset += p.starts[d] * st[d];
    }
    return 0;
}

int eng_strided_expand(const eng_op_ctx_t *c, eng_strided_t *v)
{
    const eng_shape_t *ys = &c->outputs[0]->shape;
    int64_t st[ENG_MAX_RANK];
    const eng_shape_t *xs = view_start(c, v, ys->rank, st);
    int lead = ys->rank - xs->rank;
    for (int d = 0; d < ys->rank; d++) {
        v->dims[d] = ys->dims[d];
        v->strides[d] = d < lead || xs->dims[d - lead] == 1 ? 0 : st[d - lead];
    }
    return 0;
}

int eng_strided_tile(const eng_op_ctx_t *c, eng_strided_t *v)
{
    const eng_shape_t *ys = &c->outputs[0]->shape;
    int64_t st[ENG_MAX_RANK];
    const eng_shape_t *xs = view_start(c, v, 2 * c->inputs[0]->shape.rank, st);
    for (int d = 0; d < xs->rank; d++) {
        v->dims[2 * d] = xs->dims[d] ? ys->dims[d] / xs->dims[d] : 0;
        v->dims[2 * d + 1] = xs->dims[d];
        v->strides[2 * d + 1] = st[d];
    }
    return 0;
}

void eng_outer_inner(const eng_shape_t *s, int axis, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++)
        *outer *= s->dims[d];
    for (int d = axis + 1; d < s->rank; d++)
        *inner *= s->dims[d];
}

/* DepthToSpace's and SpaceToDepth's parameters, and input 0's dims. */
typedef struct space_depth {
    int64_t b;              /* blocksize */
    bool crd;               /* mode CRD (else DCR) */
    int64_t n, ch, h, w;    /* input 0 (N, C, H, W) */
} space_depth_t;

/* Fills *s; 0, or eng_space_depth_params's error. */
static int space_depth_dims(const eng_op_ctx_t *c, space_depth_t *s)
{
    int rc = eng_space_depth_params(c, &s->b, &s->crd);
    if (rc == 0) {
        const int64_t *x = c->inputs[0]->shape.dims;
        s->n = x[0], s->ch = x[1], s->h = x[2], s->w = x[3];
    }
    return rc;
}

int eng_strided_depth_to_space(const eng_op_ctx_t *c, eng_strided_t *v)
{
    space_depth_t s;
    int rc = space_depth_dims(c, &s);
    if (rc != 0)
        return rc;
    const int64_t b = s.b, h = s.h, w = s.w, oc = s.ch / (b * b);
    /* Output (n, oc, h, b1, w, b2) reads input channel (b1, b2, oc) in DCR
     * order and (oc, b1, b2) in CRD order. */
    *v = (eng_strided_t){.rank = 6,
                         .dims = {s.n, oc, h, b, w, b},
                         .strides = {s.ch * h * w, (s.crd ? b * b : 1) * h * w, w,
                                     (s.crd ? b : b * oc) * h * w, 1, (s.crd ? 1 : oc) * h * w}};
    return 0;
}

int eng_strided_space_to_depth(const eng_op_ctx_t *c, eng_strided_t *v)
{
    space_depth_t s;
    int rc = space_depth_dims(c, &s);
    if (rc != 0)
        return rc;
    const int64_t b = s.b, h = s.h, w = s.w;
    /* Output channel (b1, b2, c) at (oh, ow) reads input (c, oh*b+b1, ow*b+b2). */
    *v = (eng_strided_t){.rank = 6,
                         .dims = {s.n, b, b, s.ch, h / b, w / b},
                         .strides = {s.ch * h * w, w, 1, h * w, b * w, b}};
    return 0;
}
