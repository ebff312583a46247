/* normalize_kernels.c -- CPU kernels of LpNormalization,
 * MeanVarianceNormalization and GroupNormalization (engine/ops/normalize.c
 * defines them; the geometry is engine/ops/normalize_impl.h's).
 *
 * Each takes one group at a time: its statistics in double (the norm; or
 * the mean, then the mean squared deviation from it), then every element
 * of the group from them. A group is read whole before any of it is
 * written. They fail only where the geometry does, before writing. */
#include <math.h>
#include <stdint.h>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/ops/normalize_impl.h"

#define NORM_TYPED(S, T)                                                                   \
    static void lpnorm_##S(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, int p) \
    {                                                                                      \
        for (int64_t line = 0; line < outer * inner; line++) {                             \
            const int64_t at = line / inner * n * inner + line % inner;                    \
            double acc = 0;                                                                \
            for (int64_t j = 0; j < n; j++) {                                              \
                const double v = (double)x[at + j * inner];                                \
                acc += p == 1 ? fabs(v) : v * v;                                           \
            }                                                                              \
            const double norm = p == 1 ? acc : sqrt(acc);                                  \
            for (int64_t j = 0; j < n; j++)                                                \
                y[at + j * inner] = norm == 0 ? (T)0 : (T)((double)x[at + j * inner] / norm); \
        }                                                                                  \
    }                                                                                      \
    static void mvn_##S(const T *x, T *y, const eng_mvn_t *g)                              \
    {                                                                                      \
        for (int64_t k = 0; k < g->n_groups; k++) {                                        \
            double s = 0, q = 0;                                                           \
            for (int64_t r = 0; r < g->n_red; r++)                                         \
                s += (double)x[eng_mvn_offset(g, k, r)];                                   \
            const double mean = s / (double)g->n_red;                                      \
            for (int64_t r = 0; r < g->n_red; r++) {                                       \
                const double d = (double)x[eng_mvn_offset(g, k, r)] - mean;                \
                q += d * d;                                                                \
            }                                                                              \
            const double div = sqrt(q / (double)g->n_red) + 1e-9;                          \
            for (int64_t r = 0; r < g->n_red; r++) {                                       \
                const int64_t at = eng_mvn_offset(g, k, r);                                \
                y[at] = (T)(((double)x[at] - mean) / div);                                 \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    static void groupnorm_##S(const T *x, T *y, const T *scale, const T *bias,             \
                              const eng_groupnorm_t *g)                                    \
    {                                                                                      \
        for (int64_t k = 0; k < g->n_groups; k++) {                                        \
            const T *xs = x + k * g->run;                                                  \
            T *ys = y + k * g->run;                                                        \
            double s = 0, q = 0;                                                           \
            for (int64_t i = 0; i < g->run; i++)                                           \
                s += (double)xs[i];                                                        \
            const double mean = g->run ? s / (double)g->run : 0;                           \
            for (int64_t i = 0; i < g->run; i++)                                           \
                q += ((double)xs[i] - mean) * ((double)xs[i] - mean);                      \
            const double inv = 1.0 / sqrt((g->run ? q / (double)g->run : 0) + g->epsilon); \
            for (int64_t i = 0; i < g->run; i++) {                                         \
                const int64_t pi = eng_groupnorm_param(g, k, i);                           \
                ys[i] = (T)(((double)xs[i] - mean) * inv * (double)scale[pi] +             \
                            (double)bias[pi]);                                             \
            }                                                                              \
        }                                                                                  \
    }
NORM_TYPED(f32, float)
NORM_TYPED(f64, double)

static int lpnorm_run(eng_op_ctx_t *c)
{
    int64_t outer, n, inner;
    int p, rc = eng_lpnorm_params(c, &outer, &n, &inner, &p);
    if (rc)
        return rc;
    const void *x = c->inputs[0]->data;
    void *y = c->outputs[0]->data;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        lpnorm_f64(x, y, outer, n, inner, p);
    else
        lpnorm_f32(x, y, outer, n, inner, p);
    return 0;
}

static int mvn_run(eng_op_ctx_t *c)
{
    eng_mvn_t g;
    int rc = eng_mvn_params(c, &g);
    if (rc)
        return rc;
    const void *x = c->inputs[0]->data;
    void *y = c->outputs[0]->data;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        mvn_f64(x, y, &g);
    else
        mvn_f32(x, y, &g);
    return 0;
}

static int groupnorm_run(eng_op_ctx_t *c)
{
    eng_groupnorm_t g;
    int rc = eng_groupnorm_params(c, &g);
    if (rc)
        return rc;
    const void *x = c->inputs[0]->data, *sc = c->inputs[1]->data, *b = c->inputs[2]->data;
    void *y = c->outputs[0]->data;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        groupnorm_f64(x, y, sc, b, &g);
    else
        groupnorm_f32(x, y, sc, b, &g);
    return 0;
}

const eng_kernel_t eng_cpu_LpNormalization = {.run = lpnorm_run};
const eng_kernel_t eng_cpu_MeanVarianceNormalization = {.run = mvn_run};
const eng_kernel_t eng_cpu_GroupNormalization = {.run = groupnorm_run};
