/* select.c -- definitions of the ops whose output shapes depend on input
 * values: Compress (the condition's true count), NonZero (the input's
 * non-zero count) and Unique (the number of distinct items).
 *
 * Their infer reads those values, so it returns FS_EDYNAMIC until they are
 * known: a plan with such a node is dynamic, and the executor infers the
 * node again, node by node, with its inputs' values in host memory (on a
 * device, copied back for it; engine/exec.c). Unique finds its items here
 * too, for every device: eng_unique_compute sorts the items' indices with a
 * stable merge sort (so the first of equal items is its first occurrence)
 * and walks the runs of equal ones, O(n log n) comparisons of items. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/ops/index_impl.h"
#include "engine/ops/shape_impl.h"

#define SHAPE_BUF 200

static const eng_dtype_t dt_bool[] = {ENG_DT_BOOL, ENG_DT_UNDEFINED};
/* What NonZero and Unique compare (by value; half floats through float). */
static const eng_dtype_t dt_values[] = {
    ENG_DT_FLOAT, ENG_DT_DOUBLE, ENG_DT_FLOAT16, ENG_DT_BFLOAT16, ENG_DT_INT8,   ENG_DT_INT16,
    ENG_DT_INT32, ENG_DT_INT64,  ENG_DT_UINT8,   ENG_DT_UINT16,   ENG_DT_UINT32, ENG_DT_UINT64,
    ENG_DT_BOOL,  ENG_DT_UNDEFINED};

/* --- Compress ---------------------------------------------------------------------------------- */

int eng_compress_params(const eng_op_ctx_t *c, eng_compress_t *g)
{
    const eng_tensor_t *x, *cond;
    int rc;
    if ((rc = eng_shapeops_in_data(c, 0, "input", &x)) != 0 ||
        (rc = eng_shapeops_in_data(c, 1, "condition", &cond)) != 0 ||
        (rc = eng_op_require_dtype(c, 1, dt_bool)) != 0)
        return rc;
    char b1[SHAPE_BUF], b2[SHAPE_BUF];
    eng_shape_format(&x->shape, b1, sizeof b1);
    eng_shape_format(&cond->shape, b2, sizeof b2);
    if (cond->shape.rank != 1)
        return eng_op_err(c, FS_EINVAL, "condition %s must be 1-D", b2);
    int axis = -1;
    if (eng_node_attr(c->node, "axis") &&
        (rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &axis)) != 0)
        return rc;
    g->outer = 1;
    g->inner = 1;
    if (axis < 0) {
        g->dim = eng_shape_numel(&x->shape);
    } else {
        g->dim = x->shape.dims[axis];
        for (int d = 0; d < axis; d++)
            g->outer *= x->shape.dims[d];
        for (int d = axis + 1; d < x->shape.rank; d++)
            g->inner *= x->shape.dims[d];
    }
    g->cond_len = cond->shape.dims[0];
    if (!cond->data && g->cond_len > 0)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input 1 "
                          "(condition), which is not known before running");
    g->kept = 0;
    const uint8_t *cv = cond->data;
    for (int64_t i = 0; i < g->cond_len; i++) {
        if (!cv[i])
            continue;
        /* numpy's compress: a true past the dim indexes out of range. */
        if (i >= g->dim)
            return eng_op_err(c, FS_EINVAL, "condition %s is true at %lld, past input %s's %lld "
                              "along the axis", b2, (long long)i, b1, (long long)g->dim);
        g->kept++;
    }
    if (axis < 0) {
        g->out.rank = 1;
        g->out.dims[0] = g->kept;
    } else {
        g->out = x->shape;
        g->out.dims[axis] = g->kept;
    }
    if (g->cond_len > g->dim)
        g->cond_len = g->dim; /* the rest is false */
    return 0;
}

static int compress_infer(eng_op_ctx_t *c)
{
    eng_compress_t g;
    int rc = eng_compress_params(c, &g);
    if (rc)
        return rc;
    eng_ctx_out_set(c, 0, c->inputs[0]->dtype, &g.out);
    return 0;
}

/* --- NonZero ----------------------------------------------------------------------------------- */

bool eng_index_nonzero_at(const eng_tensor_t *t, int64_t i)
{
    const void *p = t->data;
    switch (eng_dtype_size(t->dtype)) {
    case 1: return ((const uint8_t *)p)[i] != 0;
    case 2:
        /* Both half formats keep the sign in bit 15: +-0 is the rest zero. */
        if (t->dtype == ENG_DT_FLOAT16 || t->dtype == ENG_DT_BFLOAT16)
            return (((const uint16_t *)p)[i] & 0x7fff) != 0;
        return ((const uint16_t *)p)[i] != 0;
    case 4:
        if (t->dtype == ENG_DT_FLOAT)
            return ((const float *)p)[i] != 0.0f;
        return ((const uint32_t *)p)[i] != 0;
    default:
        if (t->dtype == ENG_DT_DOUBLE)
            return ((const double *)p)[i] != 0.0;
        return ((const uint64_t *)p)[i] != 0;
    }
}

int eng_nonzero_count(const eng_op_ctx_t *c, int64_t *count)
{
    int rc = eng_op_require_dtype(c, 0, dt_values);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    int64_t n = eng_shape_numel(&x->shape);
    if (!x->data && n > 0)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input 0 (X), "
                          "which is not known before running");
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += eng_index_nonzero_at(x, i);
    *count = k;
    return 0;
}

static int nonzero_infer(eng_op_ctx_t *c)
{
    int64_t k;
    int rc = eng_nonzero_count(c, &k);
    if (rc)
        return rc;
    int r = c->inputs[0]->shape.rank;
    eng_shape_t s = {2, {r > 0 ? r : 1, k}};
    eng_ctx_out_set(c, 0, ENG_DT_INT64, &s);
    return 0;
}

/* --- Unique ------------------------------------------------------------------------------------ */

int eng_unique_params(const eng_op_ctx_t *c, eng_unique_t *g)
{
    int rc = eng_op_require_dtype(c, 0, dt_values);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    g->sorted = eng_attr_i(c->node, "sorted", 1) != 0;
    g->axis = -1;
    g->outer = 1;
    g->inner = 1;
    if (!eng_node_attr(c->node, "axis")) {
        g->items = eng_shape_numel(&x->shape);
        return 0;
    }
    if ((rc = eng_op_axis(c, eng_attr_i(c->node, "axis", 0), x->shape.rank, &g->axis)) != 0)
        return rc;
    g->items = x->shape.dims[g->axis];
    for (int d = 0; d < g->axis; d++)
        g->outer *= x->shape.dims[d];
    for (int d = g->axis + 1; d < x->shape.rank; d++)
        g->inner *= x->shape.dims[d];
    return 0;
}

/* Five arrays of `items` int64s: the sort's two, inverse, and for an
 * unsorted output the map from sorted order and the reordered firsts. */
size_t eng_unique_work_bytes(const eng_unique_t *g)
{
    return (size_t)(5 * (g->items > 0 ? g->items : 1)) * sizeof(int64_t);
}

/* -1, 0 or 1 as a < b, with NaN equal to NaN and above every number. */
static int cmp_f64(double a, double b)
{
    if (a < b)
        return -1;
    if (a > b)
        return 1;
    if (a == b)
        return 0;
    return (a != a) - (b != b); /* a NaN: NaN > number */
}

static int cmp_elem(const eng_tensor_t *x, int64_t i, int64_t j)
{
    const void *p = x->data;
    switch (x->dtype) {
    case ENG_DT_FLOAT: return cmp_f64(((const float *)p)[i], ((const float *)p)[j]);
    case ENG_DT_DOUBLE: return cmp_f64(((const double *)p)[i], ((const double *)p)[j]);
    case ENG_DT_INT64: {
        int64_t a = ((const int64_t *)p)[i], b = ((const int64_t *)p)[j];
        return (a > b) - (a < b);
    }
    case ENG_DT_UINT64: {
        uint64_t a = ((const uint64_t *)p)[i], b = ((const uint64_t *)p)[j];
        return (a > b) - (a < b);
    }
    default:
        /* Every other dtype is exact in a double. */
        return cmp_f64(eng_index_get_f64(x, i), eng_index_get_f64(x, j));
    }
}

/* Item a against item b: their elements in row-major order. */
static int cmp_item(const eng_unique_t *g, const eng_tensor_t *x, int64_t a, int64_t b)
{
    for (int64_t o = 0; o < g->outer; o++) {
        int64_t base = o * g->items * g->inner;
        for (int64_t k = 0; k < g->inner; k++) {
            int r = cmp_elem(x, base + a * g->inner + k, base + b * g->inner + k);
            if (r)
                return r;
        }
    }
    return 0;
}

/* Stable bottom-up merge sort of idx[0, n) by item order; tmp holds n. */
static void sort_items(const eng_unique_t *g, const eng_tensor_t *x, int64_t *idx, int64_t *tmp,
                       int64_t n)
{
    int64_t *src = idx, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = cmp_item(g, x, src[j], src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx)
        memcpy(idx, src, (size_t)n * sizeof *idx);
}

void eng_unique_compute(const eng_unique_t *g, const eng_tensor_t *x, void *work,
                        int64_t *n_unique, int64_t **first, int64_t **count, int64_t **inverse)
{
    int64_t n = g->items;
    int64_t *perm = work, *tmp = perm + n, *inv = tmp + n, *map = inv + n, *firsts = map + n;
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    sort_items(g, x, perm, tmp, n);
    /* Runs of equal items in sorted order; run u starts at its first
     * occurrence (the sort is stable). tmp becomes the firsts. */
    int64_t u = 0;
    for (int64_t s = 0; s < n; s++) {
        if (s == 0 || cmp_item(g, x, perm[s - 1], perm[s]) != 0)
            tmp[u++] = perm[s];
        inv[perm[s]] = u - 1;
    }
    /* perm is done with: it becomes the counts. */
    int64_t *fst = tmp, *cnt = perm;
    for (int64_t v = 0; v < u; v++)
        cnt[v] = 0;
    for (int64_t i = 0; i < n; i++)
        cnt[inv[i]]++;
    if (!g->sorted) {
        /* Output order by first occurrence: items in index order meet
         * their runs' firsts in that order. map[v]: sorted run v's place. */
        int64_t next = 0;
        for (int64_t i = 0; i < n; i++)
            if (fst[inv[i]] == i) {
                map[inv[i]] = next;
                firsts[next++] = i;
            }
        /* The firsts in tmp are no longer read: `firsts` has them in
         * output order, and tmp takes the counts in that order. */
        for (int64_t v = 0; v < u; v++)
            tmp[map[v]] = cnt[v];
        for (int64_t i = 0; i < n; i++)
            inv[i] = map[inv[i]];
        fst = firsts;
        cnt = tmp;
    }
    *n_unique = u;
    *first = fst;
    *count = cnt;
    *inverse = inv;
}

void eng_unique_set_outputs(eng_op_ctx_t *c, const eng_unique_t *g, int64_t n_unique)
{
    const eng_tensor_t *x = c->inputs[0];
    eng_shape_t y = x->shape, v = {1, {n_unique}}, all = {1, {g->items}};
    if (g->axis < 0)
        y = v;
    else
        y.dims[g->axis] = n_unique;
    eng_ctx_out_set(c, 0, x->dtype, &y);
    eng_ctx_out_set(c, 1, ENG_DT_INT64, &v);
    eng_ctx_out_set(c, 2, ENG_DT_INT64, &all);
    eng_ctx_out_set(c, 3, ENG_DT_INT64, &v);
}

/* The item count needs every item: the sort runs here as in the kernel,
 * on host memory of its own (freed before returning). */
static int unique_infer(eng_op_ctx_t *c)
{
    eng_unique_t g;
    int rc = eng_unique_params(c, &g);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    if (!x->data && eng_shape_numel(&x->shape) > 0)
        return eng_op_err(c, FS_EDYNAMIC, "the output shape needs the value of input 0 (X), "
                          "which is not known before running");
    int64_t u = 0;
    if (eng_shape_numel(&x->shape) > 0) {
        void *work = malloc(eng_unique_work_bytes(&g));
        if (!work)
            return eng_op_err(c, FS_ENOMEM, "out of host memory finding the unique items");
        int64_t *first, *count, *inverse;
        eng_unique_compute(&g, x, work, &u, &first, &count, &inverse);
        free(work);
    }
    eng_unique_set_outputs(c, &g, u);
    return 0;
}

ENG_OP_DEF(Compress, NULL, compress_infer, -1);
ENG_OP_DEF(NonZero, NULL, nonzero_infer, -1);
ENG_OP_DEF(Unique, NULL, unique_infer, -1);
