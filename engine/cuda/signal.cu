/* signal.cu -- CUDA kernels of the signal ops (engine/ops/signal.c defines
 * them; engine/cpu/signal_kernels.c is the CPU reference): one thread per
 * output element evaluating its op's inline value function of
 * signal_impl.h, the CPU's own expression, in double. The values that
 * decide shapes (lengths, steps, sizes) come from the host view of the
 * context; MelWeightMatrix's edges, which decide none, are read on the
 * device. */
#include "engine/cuda/cuda_impl.h"
#include "engine/ops/signal_impl.h"

/* Internal linkage: kernel names must not merge with another family's. */
namespace {

__global__ void dft_kernel(eng_dft_t p, const void *x, void *y, eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_dft_at(&p, x, i)); }
}

__global__ void stft_kernel(eng_stft_t p, const void *x, const void *window, void *y,
                            eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_stft_at(&p, x, window, i)); }
}

__global__ void window_kernel(eng_window_t p, void *y, eng_dtype_t y_dt, int64_t n)
{
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_window_at(&p, i)); }
}

__global__ void mel_kernel(eng_mel_t p, const void *lower, const void *upper, void *y,
                           eng_dtype_t y_dt, int64_t n)
{
    double lo = eng_hd_load(lower, p.edge_dt, 0), hi = eng_hd_load(upper, p.edge_dt, 0);
    ENG_CUDA_FOR(i, n) { eng_hd_store(y, y_dt, i, eng_mel_at(&p, lo, hi, i)); }
}

} // namespace

/* Each run computes its parameters from a host view of its context, then
 * launches one thread per output element. */
#define SIG_PARAMS(c, view, fn, p)                                                       \
    do {                                                                                 \
        int rc_ = eng_cuda_host_view((c), &(view));                                      \
        if (rc_ || (rc_ = fn(&(view).c, &(p))))                                          \
            return rc_;                                                                  \
    } while (0)

static int dft_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_dft_t p;
    SIG_PARAMS(c, v, eng_dft_params, p);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, dft_kernel, n, p, (const void *)c->inputs[0]->data, y->data,
                           y->dtype, n);
}

static int stft_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_stft_t p;
    SIG_PARAMS(c, v, eng_stft_params, p);
    const eng_tensor_t *w = eng_ctx_in(c, 2);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, stft_kernel, n, p, (const void *)c->inputs[0]->data,
                           (const void *)(w ? w->data : NULL), y->data, y->dtype, n);
}

static int window_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_window_t p;
    SIG_PARAMS(c, v, eng_window_params, p);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, window_kernel, n, p, y->data, y->dtype, n);
}

static int mel_run(eng_op_ctx_t *c)
{
    eng_cuda_host_view_t v;
    eng_mel_t p;
    SIG_PARAMS(c, v, eng_mel_params, p);
    eng_tensor_t *y = c->outputs[0];
    int64_t n = eng_shape_numel(&y->shape);
    return eng_cuda_launch(c, mel_kernel, n, p, (const void *)c->inputs[3]->data,
                           (const void *)c->inputs[4]->data, y->data, y->dtype, n);
}

const eng_kernel_t eng_cuda_DFT = {.run = dft_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_STFT = {.run = stft_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_HannWindow = {.run = window_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_HammingWindow = {.run = window_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_BlackmanWindow = {.run = window_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MelWeightMatrix = {.run = mel_run, .scratch_bytes = NULL};
