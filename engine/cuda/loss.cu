/* loss.cu -- CUDA kernels of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (engine/ops/loss.c defines them;
 * engine/cpu/loss_kernels.c is the CPU reference).
 *
 * One thread per target position runs loss_impl.h's eng_loss_at_*, the
 * CPU's own per-position step (SCE's log-softmax in double, written to
 * output 1 when requested). With reduction 'none' it writes its loss;
 * otherwise it leaves loss and weight in scratch (doubles), and one block
 * adds them up in double and writes the scalar.
 *
 * Departure from the CPU kernel: a class outside [0, C) that is not
 * ignore_index cannot fail the run (the device cannot report it without
 * synchronising); such a position loses 0 and weighs 0, as Gather zeroes
 * a bad index's row. */
#include "engine/cuda/nn_impl.h"
#include "engine/ops/loss_impl.h"

namespace {

template <typename T> struct loss_step;
template <> struct loss_step<float> {
    static __device__ void at(const eng_loss_t *g, const float *x, const float *w, float *lp,
                              int64_t k, int64_t t, double *l, double *wt)
    {
        eng_loss_at_f32(g, x, w, lp, k, t, l, wt);
    }
};
template <> struct loss_step<double> {
    static __device__ void at(const eng_loss_t *g, const double *x, const double *w, double *lp,
                              int64_t k, int64_t t, double *l, double *wt)
    {
        eng_loss_at_f64(g, x, w, lp, k, t, l, wt);
    }
};

/* Per position k: y[k] (reduction none) or part[k], part[n + k] (loss and
 * weight for the reduction). */
template <typename T>
__global__ void loss_positions(eng_loss_t g, const T *x, const void *tgt, bool t64, const T *w,
                               T *lp, T *y, double *part)
{
    const int64_t n = g.n * g.d;
    ENG_CUDA_FOR(k, n)
    {
        double l, wt;
        loss_step<T>::at(&g, x, w, lp, k, eng_loss_target(tgt, t64, k), &l, &wt);
        if (g.reduction == ENG_LOSS_NONE) {
            y[k] = (T)l;
        } else {
            part[k] = l;
            part[n + k] = wt;
        }
    }
}

/* One block: y[0] from the sums of part's losses and weights. */
template <typename T> __global__ void loss_reduce(eng_loss_t g, const double *part, T *y)
{
    __shared__ double smem[32];
    const int64_t n = g.n * g.d;
    double s = 0, ws = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        s += part[k];
        ws += part[n + k];
    }
    s = block_reduce(s, smem, sum_op());
    ws = block_reduce(ws, smem, sum_op());
    if (threadIdx.x == 0)
        y[0] = (T)eng_loss_finish(&g, s, ws);
}

#define LOSS_REDUCE_THREADS 512

size_t loss_scratch(const eng_op_ctx_t *c)
{
    eng_loss_t g;
    if (eng_loss_params(c, &g) || g.reduction == ENG_LOSS_NONE)
        return 0; /* run reports the same error */
    return 2 * (size_t)(g.n * g.d) * sizeof(double);
}

template <typename T> int loss_typed(eng_op_ctx_t *c, const eng_loss_t &g)
{
    const T *w = g.weighted ? (const T *)c->inputs[2]->data : NULL;
    T *lp = g.log_prob ? (T *)c->outputs[1]->data : NULL;
    T *y = (T *)c->outputs[0]->data;
    double *part = (double *)c->scratch;
    const int64_t n = g.n * g.d;
    int rc = eng_cuda_launch(c, loss_positions<T>, n, g, (const T *)c->inputs[0]->data,
                             (const void *)c->inputs[1]->data,
                             c->inputs[1]->dtype == ENG_DT_INT64, w, lp, y, part);
    if (rc || g.reduction == ENG_LOSS_NONE)
        return rc;
    loss_reduce<T><<<1, LOSS_REDUCE_THREADS, 0, eng_cuda_ctx(c)->stream>>>(g, (const double *)part,
                                                                           y);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Checks before it queues: on error nothing is queued. */
int loss_run(eng_op_ctx_t *c)
{
    eng_loss_t g;
    int rc = eng_loss_params(c, &g);
    if (rc)
        return rc;
    size_t need = loss_scratch(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        return loss_typed<double>(c, g);
    return loss_typed<float>(c, g);
}

} // namespace

const eng_kernel_t eng_cuda_NegativeLogLikelihoodLoss = {.run = loss_run,
                                                         .scratch_bytes = loss_scratch};
const eng_kernel_t eng_cuda_SoftmaxCrossEntropyLoss = {.run = loss_run,
                                                       .scratch_bytes = loss_scratch};
