/* internal.c -- definitions of the engine-internal ops (engine/ops/list.h's
 * ENG_OPS_INTERNAL), which only load-time rewrites write into a graph:
 * FusedElementwise, a chain of element-wise ops run as one program
 * (engine/fuse_chain.c builds it, engine/ew_program.h says what it means). */
#include <stdio.h>

#include "common/error.h"
#include "engine/ops/internal_impl.h"

const char *eng_ew_op_name(int op)
{
#define NAME_(name, expr) #name,
#define UNAME_(op, A, B, G, expr) #op,
    static const char *const names[] = {ENG_EW_BASE_OPS(NAME_) ENG_UNARY_FLOAT_OPS(UNAME_)
                                            ENG_UNARY_REAL_OPS(UNAME_)};
#undef NAME_
#undef UNAME_
    return op >= 0 && op < ENG_EW_OP_COUNT ? names[op] : "?";
}

/* The program, or FS_EINVAL: a node without one was not made by the
 * loader's rewrite (nothing else can name the op). */
static int program_of(const eng_op_ctx_t *c, const eng_ew_program_t **p)
{
    *p = c->node->ew;
    if (!*p)
        return eng_op_err(c, FS_EINVAL, "has no program (the op is made by the loader only)");
    if (c->n_inputs != (*p)->n_inputs)
        return eng_op_err(c, FS_EINVAL, "has %d inputs, its program reads %d", c->n_inputs,
                          (*p)->n_inputs);
    for (int k = 0; k < c->n_inputs; k++) {
        const eng_tensor_t *t = c->inputs[k];
        if (!t)
            return eng_op_err(c, FS_EINVAL, "input %d is missing", k);
        if (t->dtype != (*p)->in_dtype[k])
            return eng_op_err(c, FS_EINVAL, "input %d is %s, its program reads %s", k,
                              eng_dtype_name(t->dtype), eng_dtype_name((*p)->in_dtype[k]));
    }
    return 0;
}

/* The broadcast of the inputs' shapes, at least out_rank_min dims. */
static int broadcast_shape(const eng_op_ctx_t *c, const eng_ew_program_t *p, eng_shape_t *s)
{
    int rank = p->out_rank_min;
    for (int k = 0; k < c->n_inputs; k++)
        if (c->inputs[k]->shape.rank > rank)
            rank = c->inputs[k]->shape.rank;
    s->rank = rank;
    for (int d = 0; d < rank; d++)
        s->dims[d] = 1;
    for (int k = 0; k < c->n_inputs; k++) {
        const eng_shape_t *in = &c->inputs[k]->shape;
        for (int j = 0; j < in->rank; j++) {
            int64_t *o = &s->dims[rank - in->rank + j];
            const int64_t v = in->dims[j];
            if (v == *o || v == 1)
                continue;
            if (*o != 1)
                return eng_op_err(c, FS_EINVAL, "input %d's dim %d is %lld, which does not "
                                  "broadcast with %lld", k, j, (long long)v, (long long)*o);
            *o = v;
        }
    }
    return 0;
}

static int fused_infer(eng_op_ctx_t *c)
{
    const eng_ew_program_t *p;
    eng_shape_t s;
    int rc = program_of(c, &p);
    if (rc == 0)
        rc = broadcast_shape(c, p, &s);
    if (rc == 0)
        eng_ctx_out_set(c, 0, p->out_dtype, &s);
    return rc;
}

int eng_ew_layout(const eng_op_ctx_t *c, eng_ew_layout_t *l)
{
    const eng_ew_program_t *p;
    int rc = program_of(c, &p);
    eng_tensor_t *y = c->n_outputs > 0 ? c->outputs[0] : NULL;
    if (rc)
        return rc;
    if (!y || y->dtype != p->out_dtype)
        return eng_op_err(c, FS_EINVAL, "output 0 is %s, its program writes %s",
                          y ? eng_dtype_name(y->dtype) : "missing", eng_dtype_name(p->out_dtype));
    const int rank = y->shape.rank, n_in = c->n_inputs;
    int64_t stride[ENG_EW_MAX_INPUTS][ENG_MAX_RANK];
    for (int k = 0; k < n_in; k++) {
        const eng_shape_t *s = &c->inputs[k]->shape;
        const int off = rank - s->rank;
        if (off < 0)
            return eng_op_err(c, FS_EINVAL, "input %d has rank %d, the output %d", k, s->rank,
                              rank);
        int64_t acc = 1;
        for (int d = rank - 1; d >= 0; d--) {
            const int64_t dim = d < off ? 1 : s->dims[d - off];
            if (dim != 1 && dim != y->shape.dims[d])
                return eng_op_err(c, FS_EINVAL, "input %d's dim %d is %lld, the output's %lld", k,
                                  d - off, (long long)dim, (long long)y->shape.dims[d]);
            stride[k][d] = dim == 1 ? 0 : acc;
            acc *= dim;
        }
    }
    /* Collapse: dims of 1 dropped, a dim merged into the one before when
     * every input (and the output, contiguous) steps through both as one. */
    l->rank = 0;
    l->n = 1;
    int64_t out_stride = 1, out_st[ENG_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        out_st[d] = out_stride;
        out_stride *= y->shape.dims[d];
    }
    int64_t prev_out = 0;
    for (int d = 0; d < rank; d++) {
        const int64_t dim = y->shape.dims[d];
        l->n *= dim;
        if (dim == 1)
            continue;
        int q = l->rank - 1;
        bool merge = q >= 0 && prev_out == out_st[d] * dim;
        for (int k = 0; merge && k < n_in; k++)
            merge = l->stride[k][q] == stride[k][d] * dim;
        if (!merge)
            q = l->rank++;
        l->dims[q] = merge ? l->dims[q] * dim : dim;
        for (int k = 0; k < n_in; k++)
            l->stride[k][q] = stride[k][d];
        prev_out = out_st[d];
    }
    if (l->rank == 0) { /* one element (or none with a 0 dim: n says so) */
        l->rank = 1;
        l->dims[0] = 1;
        for (int k = 0; k < n_in; k++)
            l->stride[k][0] = 0;
    }
    return 0;
}

ENG_OP_DEF(FusedElementwise, NULL, fused_infer, 0);
