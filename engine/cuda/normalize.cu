/* normalize.cu -- CUDA kernels of LpNormalization, MeanVarianceNormalization
 * and GroupNormalization (engine/ops/normalize.c defines them;
 * engine/cpu/normalize_kernels.c is the CPU reference).
 *
 * One block per group (a line, an MVN group, an image's channel group):
 * the CPU's statistics in double (the norm; or the mean, then the mean
 * squared deviation from it), reduced through warp shuffles and shared
 * memory, then every element from them. The block reads its whole group
 * before writing any of it. Sums are added in a different order than on
 * the CPU (per thread, then a tree), in double. */
#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/nn_impl.h"
#include "engine/ops/normalize_impl.h"

namespace {

#define NORM_THREADS 256

template <typename T>
__global__ void lpnorm_kernel(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, int p)
{
    __shared__ double smem[32];
    for (int64_t line = blockIdx.x; line < outer * inner; line += gridDim.x) {
        const int64_t o = line / inner, at = o * n * inner + (line - o * inner);
        double acc = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const double v = (double)x[at + j * inner];
            acc += p == 1 ? fabs(v) : v * v;
        }
        acc = block_reduce(acc, smem, sum_op());
        const double norm = p == 1 ? acc : sqrt(acc);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            y[at + j * inner] = norm == 0 ? (T)0 : (T)((double)x[at + j * inner] / norm);
    }
}

template <typename T> __global__ void mvn_kernel(const T *x, T *y, eng_mvn_t g)
{
    __shared__ double smem[32];
    for (int64_t k = blockIdx.x; k < g.n_groups; k += gridDim.x) {
        double s = 0, q = 0;
        for (int64_t r = threadIdx.x; r < g.n_red; r += blockDim.x)
            s += (double)x[eng_mvn_offset(&g, k, r)];
        const double mean = block_reduce(s, smem, sum_op()) / (double)g.n_red;
        for (int64_t r = threadIdx.x; r < g.n_red; r += blockDim.x) {
            const double d = (double)x[eng_mvn_offset(&g, k, r)] - mean;
            q += d * d;
        }
        const double div = sqrt(block_reduce(q, smem, sum_op()) / (double)g.n_red) + 1e-9;
        for (int64_t r = threadIdx.x; r < g.n_red; r += blockDim.x) {
            const int64_t at = eng_mvn_offset(&g, k, r);
            y[at] = (T)(((double)x[at] - mean) / div);
        }
    }
}

template <typename T>
__global__ void groupnorm_kernel(const T *x, T *y, const T *scale, const T *bias,
                                 eng_groupnorm_t g)
{
    __shared__ double smem[32];
    for (int64_t k = blockIdx.x; k < g.n_groups; k += gridDim.x) {
        const T *xs = x + k * g.run;
        T *ys = y + k * g.run;
        double s = 0, q = 0;
        for (int64_t i = threadIdx.x; i < g.run; i += blockDim.x)
            s += (double)xs[i];
        s = block_reduce(s, smem, sum_op());
        const double mean = g.run ? s / (double)g.run : 0;
        for (int64_t i = threadIdx.x; i < g.run; i += blockDim.x)
            q += ((double)xs[i] - mean) * ((double)xs[i] - mean);
        q = block_reduce(q, smem, sum_op());
        const double inv = 1.0 / sqrt((g.run ? q / (double)g.run : 0) + g.epsilon);
        for (int64_t i = threadIdx.x; i < g.run; i += blockDim.x) {
            const int64_t pi = eng_groupnorm_param(&g, k, i);
            ys[i] = (T)(((double)xs[i] - mean) * inv * (double)scale[pi] + (double)bias[pi]);
        }
    }
}

/* Blocks for one block per group, capped as every block-per-row kernel is. */
unsigned group_blocks(const eng_op_ctx_t *c, int64_t groups)
{
    return eng_cuda_grid_cap(c, groups);
}

/* launch(T{}) for input 0's dtype T, float or double (the ops' infer
 * admits no other); 0, or FS_ENOTSUP naming another, with nothing queued. */
template <typename F> int real_dispatch(const eng_op_ctx_t *c, F &&launch)
{
    eng_dtype_t dt = c->inputs[0]->dtype;
    int rc = dispatch(dt, types<float, double>{}, [&](auto t) {
        launch(t);
        return 0;
    });
    return rc == DISPATCH_NONE
               ? eng_op_err(c, FS_ENOTSUP, "dtype %s is not supported", eng_dtype_name(dt))
               : 0;
}

/* Each checks before it queues: on error nothing is queued. */
int lpnorm_run(eng_op_ctx_t *c)
{
    int64_t outer, n, inner;
    int p, rc = eng_lpnorm_params(c, &outer, &n, &inner, &p);
    if (rc)
        return rc;
    if (outer * inner == 0 || n == 0)
        return 0;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    const unsigned blocks = group_blocks(c, outer * inner);
    rc = real_dispatch(c, [&](auto t) {
        using T = decltype(t);
        lpnorm_kernel<T><<<blocks, NORM_THREADS, 0, st>>>(
            (const T *)c->inputs[0]->data, (T *)c->outputs[0]->data, outer, n, inner, p);
    });
    if (rc)
        return rc;
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

int mvn_run(eng_op_ctx_t *c)
{
    eng_mvn_t g;
    int rc = eng_mvn_params(c, &g);
    if (rc)
        return rc;
    if (g.n_groups == 0)
        return 0;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    const unsigned blocks = group_blocks(c, g.n_groups);
    rc = real_dispatch(c, [&](auto t) {
        using T = decltype(t);
        mvn_kernel<T><<<blocks, NORM_THREADS, 0, st>>>((const T *)c->inputs[0]->data,
                                                        (T *)c->outputs[0]->data, g);
    });
    if (rc)
        return rc;
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

int groupnorm_run(eng_op_ctx_t *c)
{
    eng_groupnorm_t g;
    int rc = eng_groupnorm_params(c, &g);
    if (rc)
        return rc;
    if (g.n_groups == 0)
        return 0;
    cudaStream_t st = eng_cuda_ctx(c)->stream;
    const unsigned blocks = group_blocks(c, g.n_groups);
    rc = real_dispatch(c, [&](auto t) {
        using T = decltype(t);
        groupnorm_kernel<T><<<blocks, NORM_THREADS, 0, st>>>(
            (const T *)c->inputs[0]->data, (T *)c->outputs[0]->data,
            (const T *)c->inputs[1]->data, (const T *)c->inputs[2]->data, g);
    });
    if (rc)
        return rc;
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

} // namespace

const eng_kernel_t eng_cuda_LpNormalization = {.run = lpnorm_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_MeanVarianceNormalization = {.run = mvn_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_GroupNormalization = {.run = groupnorm_run, .scratch_bytes = NULL};
