/* reduce_impl.h -- what the reduce op definitions (engine/ops/reduce.c) and
 * their kernels (engine/cpu/reduce_kernels.c) share: which axes a Reduce*
 * node reduces, and how an axis op (Softmax, ArgMax, CumSum, ...) splits its
 * input into [outer, axis, inner].
 *
 * Both are read from the node's attributes and, for Reduce* from opset 13
 * (ReduceSum) or 18 (the others), from the `axes` input, so infer and run
 * see the same answer.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_REDUCE_IMPL_H
#define FS_ENGINE_OPS_REDUCE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eng_reduce_axes {
    bool reduced[ENG_MAX_RANK]; /* per dim of input 0 */
    bool noop;                  /* empty axes with noop_with_empty_axes: Y = X */
    bool keepdims;
} eng_reduce_axes_t;

/* The axes the Reduce* node in `c` reduces over input 0 (rank and shape
 * set): the `axes` attribute or input as the opset says, all axes when
 * empty. 0, or FS_EDYNAMIC (the axes input's value is not known yet),
 * FS_EINVAL (an axis out of range or repeated, an axes input that is not
 * 1-D int64/int32); *out is undefined on error. */
int eng_reduce_axes(const eng_op_ctx_t *c, eng_reduce_axes_t *out);

/* An axis op's view of input 0 as [outer, axis, inner] (row-major): Softmax
 * and LogSoftmax (before opset 13: the dims from `axis` on, flattened),
 * ArgMax, ArgMin, and any op whose normalised axis is `axis`. Cannot fail. */
void eng_axis_extent(const eng_shape_t *s, int axis, bool flatten_tail, int64_t *outer,
                     int64_t *n, int64_t *inner);

/* The normalised softmax axis of the node in `c` and whether the dims from
 * it on are flattened into one (opset < 13). 0, or FS_EINVAL (axis out of
 * range for input 0). */
int eng_softmax_axis(const eng_op_ctx_t *c, int *axis, bool *flatten_tail);

/* The normalised axis of a CumSum node whose axis input has data. 0, or
 * FS_EINVAL (not a one-element int32/int64 tensor, or out of range). */
int eng_cumsum_axis(const eng_op_ctx_t *c, int *axis);

/* Softmax's and LogSoftmax's [outer, n, inner] view of input 0, as both
 * devices' kernels walk it: eng_softmax_axis, then eng_axis_extent. 0, or
 * eng_softmax_axis's error (the extents unset). */
static inline int eng_softmax_extent(const eng_op_ctx_t *c, int64_t *outer, int64_t *n,
                                     int64_t *inner)
{
    int axis;
    bool flatten_tail;
    int rc = eng_softmax_axis(c, &axis, &flatten_tail);
    if (rc)
        return rc;
    eng_axis_extent(&c->inputs[0]->shape, axis, flatten_tail, outer, n, inner);
    return 0;
}

#ifdef __cplusplus
}
#endif

/* After the C block: <math.h> must not be read with C linkage in C++. */
#include <math.h>

#include "engine/ops/ops_hd.h"

/* LogSoftmax's output for one line of n elements, inner apart, once its max
 * and the sum of exp(x - max) are known: (x - max) - log(sum). The CPU and
 * CUDA strided-line kernels both end with it, so both evaluate the same
 * expression. Cannot fail. */
ENG_OPS_HD static inline void eng_log_softmax_line(const float *xs, float *ys, int64_t n,
                                                   int64_t inner, float max, float sum)
{
    float log_sum = logf(sum);
    for (int64_t j = 0; j < n; j++)
        ys[j * inner] = (xs[j * inner] - max) - log_sum;
}

/* Softmax's (or, with log_out, LogSoftmax's) output for one line of n
 * float64 elements, inner apart, all in double: max, the sum of
 * exp(x - max), then exp(x - max) / sum or (x - max) - log(sum). Both
 * devices run float64 through it, one line per call (float has its own
 * vectorised lines). Cannot fail. */
ENG_OPS_HD static inline void eng_softmax_line_f64(const double *xs, double *ys, int64_t n,
                                                   int64_t inner, bool log_out)
{
    double max = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        max = xs[j * inner] > max ? xs[j * inner] : max;
    for (int64_t j = 0; j < n; j++) {
        double e = exp(xs[j * inner] - max);
        ys[j * inner] = e;
        sum += e;
    }
    double log_sum = log(sum);
    for (int64_t j = 0; j < n; j++)
        ys[j * inner] = log_out ? (xs[j * inner] - max) - log_sum : ys[j * inner] / sum;
}

/* Hardmax's output for one line of n >= 1 elements, inner apart: 1 at the
 * first largest element (a NaN counts as largest, as numpy's argmax has
 * it), 0 elsewhere. Both devices' kernels call it per line. Cannot fail. */
#define ENG_HARDMAX_LINE_(S, T)                                                              \
    ENG_OPS_HD static inline void eng_hardmax_line_##S(const T *xs, T *ys, int64_t n,          \
                                                       int64_t inner)                        \
    {                                                                                       \
        int64_t best = 0;                                                                   \
        for (int64_t j = 1; j < n && xs[best * inner] == xs[best * inner]; j++)             \
            if (xs[j * inner] > xs[best * inner] || xs[j * inner] != xs[j * inner])         \
                best = j;                                                                   \
        for (int64_t j = 0; j < n; j++)                                                     \
            ys[j * inner] = j == best ? (T)1 : (T)0;                                        \
    }
ENG_HARDMAX_LINE_(f32, float)
ENG_HARDMAX_LINE_(f64, double)
#undef ENG_HARDMAX_LINE_
#endif
