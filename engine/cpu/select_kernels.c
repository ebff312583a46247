/* select_kernels.c -- CPU kernels of the ops whose output shapes depend on
 * their input values (engine/ops/select.c): Compress, NonZero, Unique.
 *
 * Each runs after its infer has seen the same values, so the output shapes
 * already hold the counts; the kernels cannot fail past their parameters. */
#include <string.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/op.h"
#include "engine/ops/index_impl.h"

/* The kept slices of every outer row, in order. */
static int compress_run(eng_op_ctx_t *c)
{
    eng_compress_t g;
    int rc = eng_compress_params(c, &g);
    if (rc)
        return rc;
    size_t block = (size_t)g.inner * eng_dtype_size(c->inputs[0]->dtype);
    const uint8_t *cond = c->inputs[1]->data;
    const char *x = c->inputs[0]->data;
    char *y = c->outputs[0]->data;
    for (int64_t o = 0; o < g.outer && block > 0; o++)
        for (int64_t i = 0; i < g.cond_len; i++)
            if (cond[i]) {
                memcpy(y, x + (size_t)(o * g.dim + i) * block, block);
                y += block;
            }
    return 0;
}

/* Column p of the [rank, count] output: the coordinates of the p-th
 * non-zero element in row-major order. */
static int nonzero_run(eng_op_ctx_t *c)
{
    const eng_tensor_t *x = c->inputs[0];
    eng_tensor_t *y = c->outputs[0];
    int r = x->shape.rank > 0 ? x->shape.rank : 1;
    int64_t n = eng_shape_numel(&x->shape), count = y->shape.dims[1], p = 0;
    int64_t pos[ENG_MAX_RANK] = {0};
    int64_t *out = y->data;
    for (int64_t e = 0; e < n; e++) {
        if (eng_index_nonzero_at(x, e)) {
            if (p >= count) /* infer saw other values: never, unless memory changed */
                return eng_op_err(c, FS_EINVAL, "X holds more non-zero elements than inferred");
            for (int d = 0; d < r; d++)
                out[d * count + p] = x->shape.rank > 0 ? pos[d] : 0;
            p++;
        }
        for (int d = x->shape.rank - 1; d >= 0 && ++pos[d] == x->shape.dims[d]; d--)
            pos[d] = 0;
    }
    return 0;
}

static size_t unique_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_unique_t g;
    return eng_unique_params(c, &g) == 0 ? eng_unique_work_bytes(&g) : 0;
}

/* Y holds the items at their first occurrences, in output order; the
 * optional outputs are the arrays eng_unique_compute made. */
static int unique_run(eng_op_ctx_t *c)
{
    eng_unique_t g;
    int rc = eng_unique_params(c, &g);
    if (rc)
        return rc;
    if (c->scratch_bytes < eng_unique_work_bytes(&g))
        return eng_op_scratch_err(c, eng_unique_work_bytes(&g));
    const eng_tensor_t *x = c->inputs[0];
    int64_t u, *first, *count, *inverse;
    eng_unique_compute(&g, x, c->scratch, &u, &first, &count, &inverse);
    size_t block = (size_t)g.inner * eng_dtype_size(x->dtype);
    char *y = c->outputs[0]->data;
    for (int64_t o = 0; o < g.outer && block > 0; o++)
        for (int64_t v = 0; v < u; v++)
            memcpy(y + (size_t)(o * u + v) * block,
                   (const char *)x->data + (size_t)(o * g.items + first[v]) * block, block);
    const int64_t *src[3] = {first, inverse, count};
    int64_t len[3] = {u, g.items, u};
    for (int k = 0; k < 3; k++)
        if (k + 1 < c->n_outputs && c->outputs[k + 1] && len[k] > 0)
            memcpy(c->outputs[k + 1]->data, src[k], (size_t)len[k] * sizeof(int64_t));
    return 0;
}

const eng_kernel_t eng_cpu_Compress = {.run = compress_run};
const eng_kernel_t eng_cpu_NonZero = {.run = nonzero_run};
const eng_kernel_t eng_cpu_Unique = {.run = unique_run, .scratch_bytes = unique_scratch_bytes};
