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

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/value_hd.h"

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
ENG_OPS_HD static inline int64_t eng_nn_prod(const int64_t d[ENG_NN_DIMS])
{
    return d[0] * d[1] * d[2];
}

/* The taps of a window along one dim that land in [lo, hi) of the image
 * (lo = 0, hi = in: the taps that read X). */
typedef struct eng_nn_window {
    int64_t start;     /* image position of tap 0 */
    int64_t k_begin;   /* first tap with position >= lo */
    int64_t k_end;     /* one past the last tap with position < hi */
} eng_nn_window_t;

/* The window at output position o along dim i of g. Cannot fail. */
ENG_OPS_HD static inline eng_nn_window_t eng_nn_window_at(const eng_nn_geom_t *g, int i,
                                                          int64_t o, int64_t lo, int64_t hi)
{
    eng_nn_window_t w = {o * g->stride[i] - g->pad_begin[i], 0, g->kernel[i]};
    int64_t d = g->dilation[i];
    while (w.k_begin < w.k_end && w.start + w.k_begin * d < lo)
        w.k_begin++;
    while (w.k_end > w.k_begin && w.start + (w.k_end - 1) * d >= hi)
        w.k_end--;
    return w;
}

/* How many taps of that window land in [lo, hi). Cannot fail. */
ENG_OPS_HD static inline int64_t eng_nn_taps_between(const eng_nn_geom_t *g, int i, int64_t o,
                                                     int64_t lo, int64_t hi)
{
    eng_nn_window_t w = eng_nn_window_at(g, i, o, lo, hi);
    return w.k_end - w.k_begin;
}

/* The output columns [*lo, *hi) whose input column ow * stride + off lies
 * in [0, in): where a kernel column contributes along a row. The range is
 * empty (*lo == *hi) when no column does, as when the padding before the
 * row is wider than the whole output: callers loop hi - lo times and must
 * never see a negative count. Cannot fail. */
static inline void eng_nn_tap_range(int64_t off, int64_t stride, int64_t in, int64_t out,
                                    int64_t *lo, int64_t *hi)
{
    *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
    *hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / stride + 1;
    if (*lo > out)
        *lo = out;
    if (*hi > out)
        *hi = out;
    if (*hi < *lo)
        *hi = *lo;
}

/* LpPool's and GlobalLpPool's p (default 2). 0, or FS_EINVAL unless it
 * is positive. */
int eng_nn_lp_p(const eng_op_ctx_t *c, double *p);

/* LpPool's output element i (Y [N, C, out...] flat, of geometry g): the
 * p-th root of the sum of |x|^p over the window's taps inside X (padding
 * adds nothing), summed in (kd, kh, kw) order. Cannot fail. */
ENG_OPS_HD static inline double eng_nn_lp_at(const eng_nn_geom_t *g, const void *x,
                                             eng_dtype_t dt, double p, int64_t i)
{
    int64_t plane = eng_nn_prod(g->out), q = i % plane, pl = i / plane;
    int64_t o[ENG_NN_DIMS] = {q / (g->out[1] * g->out[2]), q / g->out[2] % g->out[1],
                              q % g->out[2]};
    eng_nn_window_t w[ENG_NN_DIMS];
    for (int d = 0; d < ENG_NN_DIMS; d++)
        w[d] = eng_nn_window_at(g, d, o[d], 0, g->in[d]);
    int64_t xp = pl * eng_nn_prod(g->in);
    double sum = 0;
    for (int64_t kd = w[0].k_begin; kd < w[0].k_end; kd++)
        for (int64_t kh = w[1].k_begin; kh < w[1].k_end; kh++) {
            int64_t row = xp + ((w[0].start + kd * g->dilation[0]) * g->in[1] + w[1].start +
                                kh * g->dilation[1]) * g->in[2] + w[2].start;
            for (int64_t kw = w[2].k_begin; kw < w[2].k_end; kw++)
                sum += pow(fabs(eng_hd_load(x, dt, row + kw * g->dilation[2])), p);
        }
    return pow(sum, 1.0 / p);
}

/* GlobalLpPool's output for plane pl (of `plane` elements): the p-th root
 * of the plane's sum of |x|^p, in order. Cannot fail. */
ENG_OPS_HD static inline double eng_nn_global_lp_at(const void *x, eng_dtype_t dt, int64_t plane,
                                                    double p, int64_t pl)
{
    double sum = 0;
    for (int64_t i = 0; i < plane; i++)
        sum += pow(fabs(eng_hd_load(x, dt, pl * plane + i)), p);
    return pow(sum, 1.0 / p);
}

/* The product of s's dims from `from` on. Cannot fail. */
static inline int64_t eng_nn_dims_from(const eng_shape_t *s, int from)
{
    int64_t n = 1;
    for (int i = from; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* LayerNormalization's (and RMSNormalization's) axis, normalised (infer checked its range). Cannot
 * fail. */
static inline int eng_nn_layernorm_axis(const eng_op_ctx_t *c)
{
    int rank = c->inputs[0]->shape.rank;
    int64_t axis = eng_attr_i(c->node, "axis", -1);
    return (int)(axis < 0 ? axis + rank : axis);
}

/* A parameter broadcast over X's dims from an axis on (LayerNormalization's
 * scale and bias, RMSNormalization's scale): position j of those dims reads the parameter's element
 * eng_nn_tail_at(m, j). */
typedef struct eng_nn_tail_map {
    int rank;
    int64_t dims[ENG_MAX_RANK], pstride[ENG_MAX_RANK];
} eng_nn_tail_map_t;

/* The map of parameter p over x's dims from `axis` on. Cannot fail (infer
 * checked the shapes). */
static inline eng_nn_tail_map_t eng_nn_tail_map(const eng_tensor_t *p, const eng_shape_t *x,
                                                int axis)
{
    eng_nn_tail_map_t m = {x->rank - axis, {0}, {0}};
    int64_t size = 1;
    for (int i = m.rank - 1; i >= 0; i--) {
        int pi = p->shape.rank - m.rank + i;
        int64_t pd = pi >= 0 ? p->shape.dims[pi] : 1;
        m.dims[i] = x->dims[axis + i];
        m.pstride[i] = pd == 1 ? 0 : size;
        size *= pd;
    }
    return m;
}

ENG_OPS_HD static inline int64_t eng_nn_tail_at(const eng_nn_tail_map_t *m, int64_t j)
{
    int64_t at = 0;
    for (int i = m->rank - 1; i >= 0; i--) {
        int64_t q = j / m->dims[i];
        at += (j - q * m->dims[i]) * m->pstride[i];
        j = q;
    }
    return at;
}

/* Whether a Conv of geometry g is a 1x1 kernel at stride 1 with no padding:
 * a plain GEMM over the image. Cannot fail. */
bool eng_nn_conv_is_pointwise(const eng_nn_geom_t *g);

/* Whether a Conv of geometry g is depthwise: one group per input and per
 * output channel. Cannot fail. */
bool eng_nn_conv_is_depthwise(const eng_nn_geom_t *g);

/* Whether a channels-last Conv of geometry g in dtype dt fits an implicit
 * GEMM (engine/cuda/conv_igemm.cu): float16 or bfloat16, group 1, two
 * spatial dims or fewer (dim 0 trivial), C and M non-zero multiples of 8
 * (each tap's channels move as 16-byte units), not pointwise (that is one
 * GEMM on X already), a non-empty X and Y, and every index the kernel
 * forms in 32 bits: P = N*Ho*Wo, K = kh*kw*C, M and H*W*C at least 256
 * below INT32_MAX (a tile's overhang), and along each spatial dim the
 * sizes, stride, dilation, leading pad, last window start and kernel
 * extent below 2^30. Cannot fail. */
bool eng_nn_conv_implicit_gemm_fits(const eng_nn_geom_t *g, eng_dtype_t dt);

#ifdef __cplusplus
}
#endif
#endif
