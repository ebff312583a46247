/* loss_impl.h -- the geometry that the loss op definitions (engine/ops/loss.c)
 * and every device's kernels share: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss.
 *
 * Both view input 0 ([N, C, d1, ..., dk], k >= 0) as [n, c, d] with d the
 * product of the trailing dims, and the target ([N, d1, ..., dk]) as [n, d].
 * Position (i, j) has class t = target[i, j]; it is ignored (loss 0, weight
 * 0) when the node has ignore_index and t equals it, and otherwise weighs
 * w = weight[t] (1 without a weight input) and loses
 *   -w * p[i, t, j],
 * p being input 0 (NLL) or its log-softmax along dim 1 (SCE, also output 1
 * when requested). reduction 'none' keeps the [N, d1..dk] losses, 'sum'
 * adds them, 'mean' divides that sum by the sum of the weights (with no
 * weight input and no ignore_index: by n * d), so a mean over nothing but
 * ignored positions is 0 / 0 = NaN, as in ONNX's reference.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_LOSS_IMPL_H
#define FS_ENGINE_OPS_LOSS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eng_loss_reduction {
    ENG_LOSS_NONE,
    ENG_LOSS_SUM,
    ENG_LOSS_MEAN,
} eng_loss_reduction_t;

typedef struct eng_loss {
    int64_t n, c, d;                /* input 0 as [n, c, d] */
    eng_loss_reduction_t reduction;
    bool has_ignore;                /* the node has ignore_index */
    int64_t ignore_index;
    bool weighted;                  /* input 2 (weight) is present */
    bool sce;                       /* SoftmaxCrossEntropyLoss (else NLL) */
    bool log_prob;                  /* SCE's output 1 is requested */
    eng_shape_t loss_shape;         /* output 0: [N, d1..dk] or a scalar */
} eng_loss_t;

/* The geometry of the loss node in c (op NegativeLogLikelihoodLoss or
 * SoftmaxCrossEntropyLoss; shapes and dtypes of its inputs set). 0, or
 * FS_EINVAL (a missing input, shapes that do not fit: the message names
 * both) / FS_ENOTSUP (a reduction other than none, sum, mean; an input
 * dtype it does not compute); *g is undefined on error. */
int eng_loss_params(const eng_op_ctx_t *c, eng_loss_t *g);

/* Whether a position of class t is ignored (loss and weight 0). Ignored
 * positions are not range-checked: ignore_index may be any value. */
ENG_OPS_HD static inline bool eng_loss_ignored(const eng_loss_t *g, int64_t t)
{
    return g->has_ignore && t == g->ignore_index;
}

#ifdef __cplusplus
}
#endif

/* After the C block: <math.h> must not be read with C linkage in C++. */
#include <math.h>

/* Element k of a target of int64 (t64) or int32. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_loss_target(const void *t, bool t64, int64_t k)
{
    return t64 ? ((const int64_t *)t)[k] : (int64_t)((const int32_t *)t)[k];
}

/* The reduced loss from the sum of the losses and of the weights. */
ENG_OPS_HD static inline double eng_loss_finish(const eng_loss_t *g, double sum, double wsum)
{
    return g->reduction == ENG_LOSS_MEAN ? sum / wsum : sum;
}

/* Per element type S/T, the two steps both devices take at a position:
 *  - eng_loss_logp_S: the log-softmax of the c scores xr[0], xr[stride],
 *    ... (max shifted, in double), written to lpr alike when lpr is not
 *    NULL; returns the log-probability of class t, or 0 when t is -1;
 *  - eng_loss_at_S: position k (of n * d) of class t: *loss and *weight
 *    (both 0 when ignored or out of range), writing SCE's log-prob column
 *    into lp when not NULL. false when t is out of [0, c) and not ignored.
 * Cannot fail otherwise. */
#define ENG_LOSS_TYPED_(S, T)                                                                \
    ENG_OPS_HD static inline double eng_loss_logp_##S(const T *xr, T *lpr, int64_t c,          \
                                                       int64_t stride, int64_t t)             \
    {                                                                                       \
        double max = -INFINITY, sum = 0;                                                    \
        for (int64_t k = 0; k < c; k++)                                                     \
            max = (double)xr[k * stride] > max ? (double)xr[k * stride] : max;              \
        for (int64_t k = 0; k < c; k++)                                                     \
            sum += exp((double)xr[k * stride] - max);                                       \
        const double lse = log(sum);                                                        \
        if (lpr)                                                                            \
            for (int64_t k = 0; k < c; k++)                                                 \
                lpr[k * stride] = (T)(((double)xr[k * stride] - max) - lse);                \
        return t >= 0 ? ((double)xr[t * stride] - max) - lse : 0;                          \
    }                                                                                       \
    ENG_OPS_HD static inline bool eng_loss_at_##S(const eng_loss_t *g, const T *x, const T *w, \
                                                  T *lp, int64_t k, int64_t t, double *loss,  \
                                                  double *weight)                             \
    {                                                                                       \
        const int64_t i = k / g->d, j = k - i * g->d, at = i * g->c * g->d + j;             \
        const bool ign = eng_loss_ignored(g, t), ok = ign || (t >= 0 && t < g->c);          \
        const int64_t tc = ok && !ign ? t : -1;                                             \
        double p = 0;                                                                       \
        if (g->sce)                                                                         \
            p = eng_loss_logp_##S(x + at, lp ? lp + at : (T *)0, g->c, g->d, tc);           \
        else if (tc >= 0)                                                                   \
            p = (double)x[at + tc * g->d];                                                  \
        *weight = tc < 0 ? 0.0 : w ? (double)w[tc] : 1.0;                                   \
        *loss = tc < 0 ? 0.0 : -*weight * p;                                                \
        return ok;                                                                          \
    }
ENG_LOSS_TYPED_(f32, float)
ENG_LOSS_TYPED_(f64, double)
#undef ENG_LOSS_TYPED_

#endif
