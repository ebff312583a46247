/* nn_impl.h -- the sliding-window geometry that the nn op definitions
 * (engine/ops/nn.c) and every device's kernels share.
 *
 * Conv, ConvTranspose and the pools all slide a kernel over 1 to 3 spatial
 * dims. The geometry is normalised to 3 spatial dims: a node with fewer has
 * leading dims of size 1 (kernel 1, stride 1, dilation 1, no padding), so
 * every kernel loops over exactly three dims. An output element at spatial
 * position o reads, for kernel offset k, the image position
 * o * stride - pad_begin + k * dilation (for ConvTranspose, "image" is the
 * output and "grid" the input: the same map run backwards).
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_NN_IMPL_H
#define FS_ENGINE_OPS_NN_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ENG_NN_DIMS 3

typedef enum eng_nn_kind {
    ENG_NN_CONV,           /* X, W [M, C/group, k...] */
    ENG_NN_CONV_TRANSPOSE, /* X, W [C, M/group, k...] */
    ENG_NN_POOL,           /* X, kernel_shape attribute, ceil_mode */
} eng_nn_kind_t;

typedef struct eng_nn_geom {
    int n_spatial;                   /* the node's spatial rank, 1..3 */
    int64_t batch;                   /* X dim 0 */
    int64_t in_channels;             /* X dim 1 */
    int64_t out_channels;            /* Y dim 1 */
    int64_t group;                   /* 1 for pools */
    /* Normalised to ENG_NN_DIMS (leading unused dims as described above). */
    int64_t in[ENG_NN_DIMS];         /* X's spatial dims */
    int64_t out[ENG_NN_DIMS];        /* Y's spatial dims */
    int64_t kernel[ENG_NN_DIMS];
    int64_t stride[ENG_NN_DIMS];
    int64_t dilation[ENG_NN_DIMS];
    int64_t pad_begin[ENG_NN_DIMS];  /* negative only for ConvTranspose */
    int64_t pad_end[ENG_NN_DIMS];
} eng_nn_geom_t;

/* Computes the geometry of the node in `c` from its input shapes and
 * attributes (kernel_shape, strides, dilations, pads, auto_pad, group,
 * ceil_mode, output_padding, output_shape, as `kind` reads them). 0, or
 * FS_EINVAL (a shape or attribute that does not fit, message names both) or
 * FS_ENOTSUP (more than 3 spatial dims, an unknown auto_pad); *g is
 * undefined on error. */
int eng_nn_geom(const eng_op_ctx_t *c, eng_nn_kind_t kind, eng_nn_geom_t *g);

/* The product of the three normalised dims. Cannot fail. */
static inline int64_t eng_nn_prod(const int64_t d[ENG_NN_DIMS])
{
    return d[0] * d[1] * d[2];
}

/* Whether a Conv of geometry g is a 1x1 kernel at stride 1 with no padding:
 * a plain GEMM over the image. Cannot fail. */
bool eng_nn_conv_is_pointwise(const eng_nn_geom_t *g);

/* Whether a Conv of geometry g is depthwise: one group per input and per
 * output channel. Cannot fail. */
bool eng_nn_conv_is_depthwise(const eng_nn_geom_t *g);

#ifdef __cplusplus
}
#endif
#endif
