/* spatial.cu -- CUDA kernels of the spatial ops (engine/ops/spatial.c and
 * nms.c define them; engine/cpu/spatial_kernels.c is the CPU reference):
 * one thread per output element evaluating its op's inline value function
 * of spatial_impl.h, the CPU's own expression, in double. MaxUnpool zeroes
 * Y and scatters X; NonMaxSuppression runs its selection on the host (its
 * inputs' host copies, which the dynamic executor keeps for a node whose
 * output shape needs them) and writes the triples through kernels that
 * take them by value.
 *
 * Departures from the CPU kernels, since the device cannot fail a run
 * without synchronising: a batch index outside X (RoiAlign, MaxRoiPool)
 * gives that ROI's outputs 0, and an index of MaxUnpool's I outside the
 * unpooled output writes nothing, where the CPU fails with FS_EINVAL.
 * Duplicate indices in I race (one of the values wins; MaxPool's indices
 * repeat only for one X element, so they write the same value). */
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/spatial_impl.h"

/* Internal linkage: kernel names must not merge with another family's. */
namespace {

__global__ void grid_sample_kernel(eng_grid_sample_t g, const void *x, const void *grid, void *y,
                                   eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_grid_sample_at(&g, x, grid, i)); }
}

__global__ void affine_grid_kernel(eng_affine_grid_t g, const void *theta, void *y,
                                   eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_affine_grid_at(&g, theta, i)); }
}

__global__ void roi_align_kernel(eng_roi_align_t r, const void *x, const void *rois,
                                 const int64_t *batch, void *y, eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t roi = i / (r.channels * r.out_h * r.out_w);
        eng_hd_store(y, y_dt, i, eng_roi_align_at(&r, x, rois, batch[roi], i));
    }
}

__global__ void max_roi_pool_kernel(eng_max_roi_pool_t m, const void *x, const void *rois,
                                    void *y, eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_max_roi_pool_at(&m, x, rois, i)); }
}

__global__ void col2im_kernel(eng_col2im_t p, const void *x, void *y, eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_col2im_at(&p, x, i)); }
}

__global__ void deform_conv_kernel(eng_deform_conv_t p, const void *x, const void *w,
                                   const void *offset, const void *b, const void *mask, void *y,
                                   eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        eng_hd_store(y, y_dt, i, eng_deform_conv_at(&p, x, w, offset, b, mask, i));
    }
}

/* X element i to its place in the zeroed Y; an index outside the unpooled
 * output writes nothing. */
__global__ void max_unpool_kernel(eng_max_unpool_t p, const unsigned char *x, const int64_t *idx,
                                  unsigned char *y, int es, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t at = eng_max_unpool_target(&p, idx[i]);
        if (at >= 0)
            for (int b = 0; b < es; b++)
                y[at * es + b] = x[i * es + b];
    }
}

/* NonMaxSuppression's triples, by value in pieces of this many. */
#define NMS_PIECE 128

struct nms_piece_t {
    int64_t v[NMS_PIECE * 3];
};

__global__ void nms_write_kernel(int64_t *y, nms_piece_t piece, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        y[i] = piece.v[i];
}

} // namespace

/* Each run computes its parameters from a host view of its context (the
 * values that decide shapes are host copies there), then launches one
 * thread per output element. */
#define SP_PARAMS(c, view, fn, p)                                                        \
    do {                                                                                 \
        int rc_ = eng_cuda_host_view((c), &(view));                                      \
        if (rc_ || (rc_ = fn(&(view).c, &(p))))                                          \
            return rc_;                                                                  \
    } while (0)

static int grid_sample_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_grid_sample_t g;
    SP_PARAMS(c, v, eng_grid_sample_params, g);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, grid_sample_kernel, n, g, eng_ctx_in_data(c, 0),
                           eng_ctx_in_data(c, 1), y->data,
                           y->dtype, n);
}

static int affine_grid_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_affine_grid_t g;
    SP_PARAMS(c, v, eng_affine_grid_params, g);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, affine_grid_kernel, n, g, eng_ctx_in_data(c, 0), y->data, y->dtype,
                           n);
}

/* A batch index outside X gives its ROI's outputs 0 (see the file
 * comment). */
static int roi_align_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_roi_align_t r;
    SP_PARAMS(c, v, eng_roi_align_params, r);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, roi_align_kernel, n, r, eng_ctx_in_data(c, 0), eng_ctx_in_data(c, 1),
                           (const int64_t *)eng_ctx_in_data(c, 2), y->data, y->dtype, n);
}

/* A batch index outside X gives its ROI's outputs 0. */
static int max_roi_pool_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_max_roi_pool_t m;
    SP_PARAMS(c, v, eng_max_roi_pool_params, m);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, max_roi_pool_kernel, n, m, eng_ctx_in_data(c, 0),
                           eng_ctx_in_data(c, 1), y->data,
                           y->dtype, n);
}

static int col2im_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_col2im_t p;
    SP_PARAMS(c, v, eng_col2im_params, p);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, col2im_kernel, n, p, eng_ctx_in_data(c, 0), y->data, y->dtype, n);
}

static int deform_conv_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_deform_conv_t p;
    SP_PARAMS(c, v, eng_deform_conv_params, p);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, deform_conv_kernel, n, p, eng_ctx_in_data(c, 0),
                           eng_ctx_in_data(c, 1),
                           eng_ctx_in_data(c, 2), eng_ctx_in_data(c, 3), eng_ctx_in_data(c, 4),
                           y->data, y->dtype, n);
}

/* Zeroes Y, then scatters X (bad indices write nothing). */
static int max_unpool_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_max_unpool_t p;
    SP_PARAMS(c, v, eng_max_unpool_params, p);
    eng_tensor_t *y = c->outputs[0];
    ENG_CUDA_TRY(c, cudaMemsetAsync(y->data, 0, eng_tensor_bytes(y), eng_cuda_ctx(c)->stream));
    int64_t n = eng_shape_numel(&c->inputs[0]->shape);
    return eng_cuda_launch(c, max_unpool_kernel, n, p, (const unsigned char *)eng_ctx_in_data(c, 0),
                           (const int64_t *)eng_ctx_in_data(c, 1), (unsigned char *)y->data,
                           (int)eng_dtype_size(y->dtype), n);
}

/* The selection on the host copies of boxes and scores; FS_EDYNAMIC when
 * the host has none (the node was not run through the dynamic path), or
 * FS_ENOMEM (host memory), with nothing queued. */
static int nms_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_nms_t p;
    SP_PARAMS(c, v, eng_nms_params, p);
    int64_t n = c->outputs[0]->shape.dims[0];
    if (n == 0)
        return 0;
    const eng_tensor_t *boxes = eng_ctx_host_in(c, 0), *scores = eng_ctx_host_in(c, 1);
    if (!boxes || !scores)
        return eng_op_err(c, FS_EDYNAMIC, "boxes and scores are not known on the host");
    int64_t *out = (int64_t *)malloc((size_t)n * 3 * sizeof *out);
    if (!out)
        return eng_op_err(c, FS_ENOMEM, "out of host memory for %lld selected boxes",
                          (long long)n);
    int64_t got = n;
    int rc = eng_nms_select(&p, (const float *)boxes->data, (const float *)scores->data, out, &got);
    int64_t *y = (int64_t *)c->outputs[0]->data;
    for (int64_t at = 0; rc == 0 && at < got * 3; at += NMS_PIECE * 3) {
        nms_piece_t piece;
        int k = (int)(got * 3 - at < NMS_PIECE * 3 ? got * 3 - at : NMS_PIECE * 3);
        memcpy(piece.v, out + at, (size_t)k * sizeof out[0]);
        nms_write_kernel<<<1, 128, 0, eng_cuda_ctx(c)->stream>>>(y + at, piece, k);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            rc = eng_op_err(c, FS_EDEVICE, "nms_write_kernel failed: %s", cudaGetErrorString(e));
    }
    free(out);
    return rc;
}

const eng_kernel_t eng_cuda_GridSample = {.run = grid_sample_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_AffineGrid = {.run = affine_grid_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_RoiAlign = {.run = roi_align_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MaxRoiPool = {.run = max_roi_pool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Col2Im = {.run = col2im_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MaxUnpool = {.run = max_unpool_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_DeformConv = {.run = deform_conv_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_NonMaxSuppression = {.run = nms_run, .scratch_bytes = NULL};
