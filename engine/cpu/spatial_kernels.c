/* spatial_kernels.c -- CPU kernels of the spatial ops (engine/ops/spatial.c
 * and nms.c define them): each output element is its op's inline value
 * function of spatial_impl.h, which the CUDA kernels evaluate too, over
 * output ranges split across threads (each chunk writes only its own
 * elements, so results do not depend on the thread count). MaxUnpool
 * scatters, in X's order; NonMaxSuppression runs its host selection.
 *
 * A kernel fails only where its op's parameters do (before anything is
 * written) or on bad data, which it checks first: a batch index outside X
 * (RoiAlign, MaxRoiPool) or an index outside the unpooled output
 * (MaxUnpool) fails the run naming it. */
#include <string.h>

#include "common/error.h"
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/ops/spatial_impl.h"

typedef enum sp_op {
    SP_GRID_SAMPLE,
    SP_AFFINE_GRID,
    SP_ROI_ALIGN,
    SP_MAX_ROI_POOL,
    SP_COL2IM,
    SP_DEFORM_CONV,
} sp_op_t;

/* One op's operands for sp_range. */
typedef struct sp_job {
    sp_op_t op;
    const void *p;              /* the op's parameters (spatial_impl.h) */
    const void *in[5];          /* its inputs' data (NULL: absent) */
    void *y;
    eng_dtype_t y_dt;
} sp_job_t;

/* Output elements [begin, end) of the job's op. Cannot fail. */
static void sp_range(void *arg, int64_t begin, int64_t end)
{
    const sp_job_t *j = arg;
    const void *const *in = j->in;
    for (int64_t i = begin; i < end; i++) {
        double v = 0;
        switch (j->op) {
        case SP_GRID_SAMPLE: v = eng_grid_sample_at(j->p, in[0], in[1], i); break;
        case SP_AFFINE_GRID: v = eng_affine_grid_at(j->p, in[0], i); break;
        case SP_ROI_ALIGN: {
            const eng_roi_align_t *r = j->p;
            int64_t roi = i / (r->channels * r->out_h * r->out_w);
            v = eng_roi_align_at(r, in[0], in[1], ((const int64_t *)in[2])[roi], i);
            break;
        }
        case SP_MAX_ROI_POOL: v = eng_max_roi_pool_at(j->p, in[0], in[1], i); break;
        case SP_COL2IM: v = eng_col2im_at(j->p, in[0], i); break;
        case SP_DEFORM_CONV:
            v = eng_deform_conv_at(j->p, in[0], in[1], in[2], in[3], in[4], i);
            break;
        }
        eng_hd_store(j->y, j->y_dt, i, v);
    }
}

/* Runs the job over output 0 with `work` operations an element. Cannot
 * fail. */
static int sp_run(eng_op_ctx_t *c, sp_job_t *j, int64_t work)
{
    for (int i = 0; i < 5; i++)
        j->in[i] = eng_ctx_in_data(c, i);
    j->y = c->outputs[0]->data;
    j->y_dt = c->outputs[0]->dtype;
    eng_parallel_for(c->n_threads, eng_shape_numel(&c->outputs[0]->shape),
                     eng_parallel_grain(work), sp_range, j);
    return 0;
}

static int grid_sample_run(eng_op_ctx_t *c)
{
    eng_grid_sample_t g;
    int rc = eng_grid_sample_params(c, &g);
    if (rc)
        return rc;
    sp_job_t j = {.op = SP_GRID_SAMPLE, .p = &g};
    return sp_run(c, &j, 64);
}

static int affine_grid_run(eng_op_ctx_t *c)
{
    eng_affine_grid_t g;
    int rc = eng_affine_grid_params(c, &g);
    if (rc)
        return rc;
    sp_job_t j = {.op = SP_AFFINE_GRID, .p = &g};
    return sp_run(c, &j, 8);
}

/* On a batch index outside X, FS_EINVAL and Y is unwritten. */
static int roi_align_run(eng_op_ctx_t *c)
{
    eng_roi_align_t r;
    int rc = eng_roi_align_params(c, &r);
    if (rc)
        return rc;
    const int64_t *bi = c->inputs[2]->data;
    for (int64_t n = 0; n < r.n_rois; n++)
        if (bi[n] < 0 || bi[n] >= r.batch)
            return eng_op_err(c, FS_EINVAL, "batch_indices[%lld] is %lld, outside X's %lld "
                              "images", (long long)n, (long long)bi[n], (long long)r.batch);
    sp_job_t j = {.op = SP_ROI_ALIGN, .p = &r};
    return sp_run(c, &j, 64);
}

/* On a batch index outside X, FS_EINVAL and Y is unwritten. */
static int max_roi_pool_run(eng_op_ctx_t *c)
{
    eng_max_roi_pool_t m;
    int rc = eng_max_roi_pool_params(c, &m);
    if (rc)
        return rc;
    for (int64_t n = 0; n < m.n_rois; n++) {
        int64_t b = eng_max_roi_pool_batch(&m, c->inputs[1]->data, n);
        if (b < 0 || b >= m.batch)
            return eng_op_err(c, FS_EINVAL, "rois[%lld] names batch %lld, outside X's %lld "
                              "images", (long long)n, (long long)b, (long long)m.batch);
    }
    sp_job_t j = {.op = SP_MAX_ROI_POOL, .p = &m};
    return sp_run(c, &j, m.h * m.w / (m.out_h * m.out_w) + 16);
}

static int col2im_run(eng_op_ctx_t *c)
{
    eng_col2im_t p;
    int rc = eng_col2im_params(c, &p);
    if (rc)
        return rc;
    sp_job_t j = {.op = SP_COL2IM, .p = &p};
    return sp_run(c, &j, 4 * p.k);
}

static int deform_conv_run(eng_op_ctx_t *c)
{
    eng_deform_conv_t p;
    int rc = eng_deform_conv_params(c, &p);
    if (rc)
        return rc;
    sp_job_t j = {.op = SP_DEFORM_CONV, .p = &p};
    return sp_run(c, &j, 16 * p.g.in_channels / p.g.group * eng_nn_prod(p.g.kernel));
}

/* Zeroes Y, then writes each X element at its index's place, in X's order
 * (a later duplicate wins). On an index outside the unpooled output,
 * FS_EINVAL and Y is unwritten. */
static int max_unpool_run(eng_op_ctx_t *c)
{
    eng_max_unpool_t p;
    int rc = eng_max_unpool_params(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *x = c->inputs[0];
    const int64_t *idx = c->inputs[1]->data;
    int64_t n = eng_shape_numel(&x->shape);
    for (int64_t i = 0; i < n; i++)
        if (eng_max_unpool_target(&p, idx[i]) < 0)
            return eng_op_err(c, FS_EINVAL, "I[%lld] is %lld, outside the %lld elements of the "
                              "unpooled output", (long long)i, (long long)idx[i],
                              (long long)p.numel_inferred);
    eng_tensor_t *y = c->outputs[0];
    size_t es = eng_dtype_size(x->dtype);
    memset(y->data, 0, eng_tensor_bytes(y));
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)y->data + (size_t)eng_max_unpool_target(&p, idx[i]) * es,
               (const char *)x->data + (size_t)i * es, es);
    return 0;
}

/* The triples of the host selection (nms.c). On error (parameters, host
 * memory) the output is unwritten. */
static int nms_run(eng_op_ctx_t *c)
{
    eng_nms_t p;
    int rc = eng_nms_params(c, &p);
    if (rc)
        return rc;
    int64_t n = c->outputs[0]->shape.dims[0];
    if (n == 0)
        return 0;
    return eng_nms_select(&p, c->inputs[0]->data, c->inputs[1]->data, c->outputs[0]->data, &n);
}

const eng_kernel_t eng_cpu_GridSample = {.run = grid_sample_run};
const eng_kernel_t eng_cpu_AffineGrid = {.run = affine_grid_run};
const eng_kernel_t eng_cpu_RoiAlign = {.run = roi_align_run};
const eng_kernel_t eng_cpu_MaxRoiPool = {.run = max_roi_pool_run};
const eng_kernel_t eng_cpu_Col2Im = {.run = col2im_run};
const eng_kernel_t eng_cpu_MaxUnpool = {.run = max_unpool_run};
const eng_kernel_t eng_cpu_DeformConv = {.run = deform_conv_run};
const eng_kernel_t eng_cpu_NonMaxSuppression = {.run = nms_run};
