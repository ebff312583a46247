/* loss_kernels.c -- CPU kernels of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (engine/ops/loss.c defines them).
 *
 * Every position (i, j) of the [n, d] target goes through loss_impl.h's
 * eng_loss_at_*, which the CUDA kernels call too: SCE's log-softmax of the
 * position's C scores (max shifted, in double; written to output 1 when
 * requested), then -weight * log-probability of the target class. A
 * reduction adds the losses and the weights in double, in position order.
 * The targets are all checked first, so a class out of range fails the run
 * naming it with no output written. */
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/ops/loss_impl.h"

#define LOSS_RUN(S, T)                                                                     \
    static void loss_##S(eng_op_ctx_t *c, const eng_loss_t *g, const void *tgt, bool t64)   \
    {                                                                                      \
        const T *x = c->inputs[0]->data;                                                   \
        const T *w = g->weighted ? (const T *)c->inputs[2]->data : NULL;                   \
        T *y = c->outputs[0]->data;                                                        \
        T *lp = g->log_prob ? (T *)c->outputs[1]->data : NULL;                             \
        double sum = 0, wsum = 0;                                                          \
        for (int64_t k = 0; k < g->n * g->d; k++) {                                        \
            double l, wt;                                                                  \
            eng_loss_at_##S(g, x, w, lp, k, eng_loss_target(tgt, t64, k), &l, &wt);        \
            if (g->reduction == ENG_LOSS_NONE)                                             \
                y[k] = (T)l;                                                               \
            sum += l;                                                                      \
            wsum += wt;                                                                    \
        }                                                                                  \
        if (g->reduction != ENG_LOSS_NONE)                                                 \
            y[0] = (T)eng_loss_finish(g, sum, wsum);                                       \
    }
LOSS_RUN(f32, float)
LOSS_RUN(f64, double)

/* On a bad class, FS_EINVAL naming it and nothing written. */
static int loss_run(eng_op_ctx_t *c)
{
    eng_loss_t g;
    int rc = eng_loss_params(c, &g);
    if (rc)
        return rc;
    const void *tgt = c->inputs[1]->data;
    bool t64 = c->inputs[1]->dtype == ENG_DT_INT64;
    for (int64_t k = 0; k < g.n * g.d; k++) {
        int64_t t = eng_loss_target(tgt, t64, k);
        if (!eng_loss_ignored(&g, t) && (t < 0 || t >= g.c))
            return eng_op_err(c, FS_EINVAL, "target element %lld is class %lld, outside [0, %lld)",
                              (long long)k, (long long)t, (long long)g.c);
    }
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        loss_f64(c, &g, tgt, t64);
    else
        loss_f32(c, &g, tgt, t64);
    return 0;
}

const eng_kernel_t eng_cpu_NegativeLogLikelihoodLoss = {.run = loss_run};
const eng_kernel_t eng_cpu_SoftmaxCrossEntropyLoss = {.run = loss_run};
