/* conv_impl.h -- the CPU's channels-last Conv (engine/cpu/conv_nhwc.c),
 * which the Conv kernel (engine/cpu/conv_kernels.c) calls for a node with
 * channels_last set (graph.h).
 *
 * Threading: as the kernels (no state). */
#ifndef FS_ENGINE_CPU_CONV_IMPL_H
#define FS_ENGINE_CPU_CONV_IMPL_H

#include <stddef.h>

#include "engine/op.h"
#include "engine/ops/nn_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The scratch eng_cpu_conv_nhwc_run needs for geometry g (float): a chunk
 * of rows' column matrix (none for a pointwise Conv), then the GEMM's
 * packing. Cannot fail. */
size_t eng_cpu_conv_nhwc_scratch_bytes(const eng_nn_geom_t *g);

/* The float channels-last Conv of c (geometry g, from eng_nn_geom), with
 * the node's fused residual and ReLU. 0, or FS_EINVAL when the scratch is
 * short of what eng_cpu_conv_nhwc_scratch_bytes asked (Y untouched then). */
int eng_cpu_conv_nhwc_run(eng_op_ctx_t *c, const eng_nn_geom_t *g);

#ifdef __cplusplus
}
#endif
#endif
