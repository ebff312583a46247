/* normalize_impl.h -- the geometry that the definitions of LpNormalization,
 * MeanVarianceNormalization and GroupNormalization (engine/ops/normalize.c)
 * and every device's kernels share.
 *
 * Each normalises groups of elements with statistics taken in double:
 *  - LpNormalization: the lines along `axis` ([outer, n, inner]) divided
 *    by their L1 or L2 norm (a line of norm 0 gives zeros, as in ONNX's
 *    reference);
 *  - MeanVarianceNormalization: the elements that share their index in the
 *    dims not in `axes` (default [0, 2, 3]); y = (x - mean) / (std + 1e-9),
 *    std the population standard deviation, as ONNX's reference has it;
 *  - GroupNormalization: per image, num_groups runs of C / num_groups
 *    channels; y = (x - mean) / sqrt(var + epsilon) * scale + bias, scale
 *    and bias per group before opset 21 and per channel from 21.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_NORMALIZE_IMPL_H
#define FS_ENGINE_OPS_NORMALIZE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LpNormalization's lines and p (1 or 2). 0, or FS_EINVAL (axis out of
 * range) / FS_ENOTSUP (p, or the dtype); outputs unset on error. */
int eng_lpnorm_params(const eng_op_ctx_t *c, int64_t *outer, int64_t *n, int64_t *inner, int *p);

/* MeanVarianceNormalization's groups: group k holds the elements at
 * eng_mvn_offset(g, k, r) for r in [0, n_red). Dims are coalesced as in
 * the reductions (size-1 dims dropped). */
typedef struct eng_mvn {
    int nk, nr;                        /* kept and reduced dims */
    int64_t kdims[ENG_MAX_RANK], kstrides[ENG_MAX_RANK];
    int64_t rdims[ENG_MAX_RANK], rstrides[ENG_MAX_RANK];
    int64_t n_groups, n_red;
} eng_mvn_t;

/* 0, or FS_EINVAL (an axis out of range or repeated) / FS_ENOTSUP (the
 * dtype); *g undefined on error. */
int eng_mvn_params(const eng_op_ctx_t *c, eng_mvn_t *g);

/* The offset of index i over n dims (row-major digits). Cannot fail. */
ENG_OPS_HD static inline int64_t eng_mvn_digits(int64_t i, int n, const int64_t *dims,
                                                const int64_t *strides)
{
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        int64_t q = i / dims[d];
        off += (i - q * dims[d]) * strides[d];
        i = q;
    }
    return off;
}

/* Element r of group k. Cannot fail. */
ENG_OPS_HD static inline int64_t eng_mvn_offset(const eng_mvn_t *g, int64_t k, int64_t r)
{
    return eng_mvn_digits(k, g->nk, g->kdims, g->kstrides) +
           eng_mvn_digits(r, g->nr, g->rdims, g->rstrides);
}

/* GroupNormalization: n_groups = N * num_groups contiguous runs of `run`
 * elements (C / num_groups channels of `spatial` elements each). */
typedef struct eng_groupnorm {
    int64_t num_groups, channels, spatial, n_groups, run;
    bool per_channel;                  /* scale and bias [C] (opset 21), else [G] */
    double epsilon;
} eng_groupnorm_t;

/* 0, or FS_EINVAL (shapes: the message names them) / FS_ENOTSUP (the
 * dtype); *g undefined on error. */
int eng_groupnorm_params(const eng_op_ctx_t *c, eng_groupnorm_t *g);

/* The scale/bias index of element i (of `run`) of group k. */
ENG_OPS_HD static inline int64_t eng_groupnorm_param(const eng_groupnorm_t *g, int64_t k,
                                                     int64_t i)
{
    int64_t grp = k % g->num_groups;
    return g->per_channel ? grp * (g->channels / g->num_groups) + i / g->spatial : grp;
}

#ifdef __cplusplus
}
#endif
#endif
