/* linalg.cu -- CUDA kernels of the linalg ops (engine/ops/linalg.c defines
 * them; engine/cpu/linalg_kernels.c is the CPU reference).
 *
 * Every product goes through eng_cuda_gemm (cuBLASLt, strided-batched), or
 * for double MatMul and Einsum eng_cuda_dgemm: double runs the same paths
 * as float (split/fold, in-place operands, gathers, direct kernels) with
 * float64 elements throughout, never narrowed to float.
 *
 * Half activations (fp16/bf16 precision: engine/lowp.c retypes the model's
 * float values to float16 or bfloat16; a graph of half values the same):
 * MatMul and Gemm with A and B both in that dtype write Y in it
 * too, through eng_cuda_gemm (cuBLASLt, fp32 accumulation, Y rounded
 * once), by the float path's split and fold; the scratch only stages a
 * large product whose rows are not 16-byte aligned (below, "A product
 * whose rows ...").
 *
 * Fused epilogues (graph.h: a MatMul's bias input, either op's activation,
 * fused at load by engine/fuse_epilogue.c) go to eng_cuda_gemm with each
 * product, which applies them in cuBLASLt's epilogue. A Gemm whose C is a
 * bias row ([N] or [1, N]) with beta 1 passes C as that bias too.
 *
 * MatMul splits the broadcast batch dims into an outer part and the longest
 * inner run over which A's and B's matrix offsets are each a constant stride
 * times the flat batch index (stride 0 for a broadcast operand): one
 * strided-batched GEMM covers the inner run, and the outer part (only when
 * the broadcast mixes, e.g. [2,1,M,K] x [1,3,K,N]) loops on the host. When B
 * is one matrix for the whole run and A's matrices are contiguous, the run is
 * one [run * M, K] x [K, N] GEMM (the CPU's fold, e.g. [B,S,K] x [K,N]).
 * A B the loader left transposed (graph.h's trans_b: a tied LM head's
 * [vocab, hidden] embedding) goes to cuBLAS with its transpose flag, as
 * Gemm's transB does, on every one of these paths.
 *
 * Gemm writes beta * C broadcast into Y with a kernel and the GEMM
 * accumulates alpha * A' x B' onto it (GEMM beta 1), the CPU's order of
 * operations, so 0 * inf in C gives NaN there as on the CPU and in ONNX's
 * reference -- unless C is a bias row with beta 1, which the GEMM's bias
 * epilogue adds (the same sum, one pass fewer).
 *
 * Einsum takes the CPU's route: an equation that is a batched GEMM (two
 * operands, each label once per operand, no broadcasting, no label summed
 * inside one operand) becomes one strided-batched GEMM. Departure from the
 * CPU: an operand already laid out as [batch, M, K] or [batch, K, M] (B:
 * [batch, K, N] or [batch, N, K]) is used in place with cuBLAS's transpose
 * flag, and a Y laid out as [batch, M, N] is written directly; only the
 * others are gathered into / out of the scratch. Every other Einsum is a
 * direct kernel summing in double as the CPU does: one thread per output
 * element walking the summed labels with an odometer, or, when there are
 * few outputs and long sums, one block per output element with a block
 * reduction. */
#include <limits.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/cuda_impl.h"
#include "engine/cuda/lowp_impl.h"
#include "engine/ops/linalg_impl.h"

/* FS_ENOTSUP naming the input unless inputs [0, n) are all float64 (when
 * input 0 is), all of input 0's half dtype (when it is float16 or
 * bfloat16), or pass eng_cuda_require_float_inputs(c, n, weight). 0
 * otherwise; nothing is queued. */
static int linalg_require_inputs(const eng_op_ctx_t *c, int n, int weight)
{
    eng_dtype_t dt = c->n_inputs > 0 && c->inputs[0] ? c->inputs[0]->dtype : ENG_DT_UNDEFINED;
    if (dt != ENG_DT_DOUBLE && !eng_cuda_is_lowp(dt))
        return eng_cuda_require_float_inputs(c, n, weight);
    const eng_dtype_t same[] = {dt, ENG_DT_UNDEFINED};
    for (int i = 0; i < n && i < c->n_inputs; i++) {
        if (!c->inputs[i])
            continue;
        int rc = eng_op_require_dtype(c, i, same);
        if (rc)
            return rc;
    }
    return 0;
}

/* Y = A x B for MatMul and Einsum (alpha 1, beta 0): eng_cuda_sgemm or
 * eng_cuda_dgemm by element type, its arguments and error rules. */
static int gemm_t(const eng_op_ctx_t *c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb,
                  int64_t sb, float *y, int64_t ldy, int64_t sy, int64_t batch)
{
    return eng_cuda_sgemm(c, ta, tb, m, n, k, 1.0f, a, lda, sa, b, ldb, sb, 0.0f, y, ldy, sy,
                          batch);
}

static int gemm_t(const eng_op_ctx_t *c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const double *a, int64_t lda, int64_t sa, const double *b, int64_t ldb,
                  int64_t sb, double *y, int64_t ldy, int64_t sy, int64_t batch)
{
    return eng_cuda_dgemm(c, ta, tb, m, n, k, 1.0, a, lda, sa, b, ldb, sb, 0.0, y, ldy, sy,
                          batch);
}

/* ---- MatMul ------------------------------------------------------------ */

/* The inner run of batch dims [split, batch_rank) over which A's and B's
 * matrix offsets are sa and sb times the flat index within the run; `run`
 * is its length. Cannot fail. */
typedef struct matmul_run_split {
    int split;
    int64_t run, sa, sb;
} matmul_run_split_t;

static matmul_run_split_t matmul_split(const eng_matmul_dims_t *d)
{
    matmul_run_split_t r = {d->batch_rank, 1, 0, 0};
    for (int i = d->batch_rank - 1; i >= 0; i--) {
        if (d->batch[i] == 1) {
            r.split = i;
            continue;
        }
        if (r.run == 1) {
            /* The first dim of size > 1 sets both strides. */
            r.sa = d->a_stride[i];
            r.sb = d->b_stride[i];
        } else if (d->a_stride[i] != r.sa * r.run || d->b_stride[i] != r.sb * r.run) {
            break;
        }
        r.run *= d->batch[i];
        r.split = i;
    }
    return r;
}

/* Whether the inner run r is one [run * M, K] x [K, N] GEMM: one matrix,
 * or B shared by the run with A's matrices contiguous, within cuBLAS's
 * int rows. */
static bool matmul_folds(const eng_matmul_dims_t &d, const matmul_run_split_t &r)
{
    return r.run == 1 || (r.sb == 0 && r.sa == d.m * d.k && r.run * d.m <= INT_MAX);
}

/* The products of MatMul of shape d, es-byte elements, after the empty
 * cases: product(a_off, b_off, y_off, fold) runs one [run * M, K] x
 * [K, N] GEMM when fold (its rows within cuBLAS's int), else a strided
 * batch of r.run, at those element offsets of A, B and Y, with B of
 * leading dimension ldb (read transposed under d.trans_b). Errors as
 * matmul_run's. */
template <typename F>
static int matmul_each(eng_op_ctx_t *c, const eng_matmul_dims_t &d, size_t es,
                       const matmul_run_split_t &r, F &&product)
{
    int64_t batches = 1;
    for (int i = 0; i < d.batch_rank; i++)
        batches *= d.batch[i];
    if (batches == 0 || d.m == 0 || d.n == 0)
        return 0;
    /* With a fused epilogue an empty product is act(bias): the products
     * (eng_cuda_gemm) compute it. */
    if (d.k == 0 && !c->node->bias && c->node->act == ENG_ACT_NONE) {
        ENG_CUDA_TRY(c, cudaMemsetAsync(c->outputs[0]->data, 0,
                                        (size_t)(batches * d.m * d.n) * es,
                                        eng_cuda_ctx(c)->stream));
        return 0;
    }
    int64_t outer = batches / r.run;
    bool fold = matmul_folds(d, r);
    for (int64_t o = 0; o < outer; o++) {
        int64_t rem = o, a_off = 0, b_off = 0;
        for (int i = r.split - 1; i >= 0; i--) {
            int64_t at = rem % d.batch[i];
            rem /= d.batch[i];
            a_off += at * d.a_stride[i];
            b_off += at * d.b_stride[i];
        }
        int rc = product(a_off, b_off, o * r.run * d.m * d.n, fold);
        if (rc)
            return rc;
    }
    return 0;
}

/* MatMul of shape d in float64 (A and B both): cublasDgemm*. Errors as
 * matmul_run's. */
static int matmul_double(eng_op_ctx_t *c, const eng_matmul_dims_t &d)
{
    if (c->node->bias || c->node->act != ENG_ACT_NONE)
        return eng_op_err(c, FS_ENOTSUP, "a fused bias or activation in double");
    const double *a = (const double *)c->inputs[0]->data, *b = (const double *)c->inputs[1]->data;
    double *y = (double *)c->outputs[0]->data;
    matmul_run_split_t r = matmul_split(&d);
    const bool tb = d.trans_b;
    const int64_t ldb = tb ? d.k : d.n;
    return matmul_each(c, d, sizeof(double), r, [&](int64_t a_off, int64_t b_off, int64_t y_off,
                                                    bool fold) {
        double *yo = y + y_off;
        return fold ? gemm_t(c, false, tb, r.run * d.m, d.n, d.k, a + a_off, d.k, 0, b + b_off,
                             ldb, 0, yo, d.n, 0, 1)
                    : gemm_t(c, false, tb, d.m, d.n, d.k, a + a_off, d.k, r.sa, b + b_off, ldb,
                             r.sb, yo, d.n, d.m * d.n, r.run);
    });
}

/* ---- A product whose rows are not 16-byte aligned ---------------------
 * cuBLASLt picks its kernels by the alignment of every row of D: an N of
 * 50257 (GPT-2's vocabulary) in half leaves odd rows 2-byte aligned, and
 * the only kernels left are align1 ones, ten times slower (8.1 ms for
 * GPT-2's LM head at batch 64 x 128 on an H200, against 0.8 ms aligned).
 * Such a product, when large, goes through the scratch instead: chunks of
 * rows land there with N padded to 16 bytes, and one 2-D copy moves each
 * into Y -- one extra pass over Y, against a GEMM ten times as long. */

/* The most scratch the staged rows take (at least one row). */
#define MATMUL_STAGE_BYTES ((size_t)64 << 20)
/* Products under this many elements of Y are left as they are. */
#define MATMUL_STAGE_MIN_ELEMS ((int64_t)1 << 20)

/* The padded N of MatMul c's product when it is staged (folded into one
 * GEMM, float or half, N * es not a multiple of 16, Y large, no residual),
 * else 0; *rows the rows a chunk holds. */
static int64_t matmul_stage_n(const eng_op_ctx_t *c, const eng_matmul_dims_t &d, int64_t *rows)
{
    const eng_dtype_t dt = c->inputs[0]->dtype;
    if (dt == ENG_DT_DOUBLE || c->node->residual)
        return 0;
    const int64_t es = (int64_t)eng_dtype_size(dt), unit = 16 / es;
    if (d.n % unit == 0 || d.k == 0)
        return 0;
    matmul_run_split_t r = matmul_split(&d);
    int64_t batches = 1;
    for (int i = 0; i < d.batch_rank; i++)
        batches *= d.batch[i];
    if (!matmul_folds(d, r) || batches * d.m * d.n < MATMUL_STAGE_MIN_ELEMS)
        return 0;
    const int64_t np = (d.n + unit - 1) / unit * unit, all = r.run * d.m;
    const int64_t fit = (int64_t)(MATMUL_STAGE_BYTES / (size_t)(np * es));
    *rows = fit < 1 ? 1 : fit > all ? all : fit;
    return np;
}

static size_t matmul_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_matmul_dims_t d;
    int64_t rows = 0;
    if (eng_matmul_dims(c, &d))
        return 0;
    const int64_t np = matmul_stage_n(c, d, &rows);
    return np ? (size_t)(rows * np) * eng_dtype_size(c->inputs[0]->dtype) : 0;
}

/* Product g (one folded GEMM) through the scratch, chunk rows at a time
 * with ldc np, each chunk copied into g's C. cuBLASLt keeps to align1
 * kernels while N itself is no multiple of 16 bytes, ldc padded or not, so
 * each chunk is two products: the columns up to the last multiple (the
 * bulk, aligned) and the few left (their own small GEMM). Errors as
 * eng_cuda_gemm's, or a scratch or copy error. */
static int matmul_staged(eng_op_ctx_t *c, const eng_cuda_gemm_t &g, int64_t np, int64_t chunk)
{
    const size_t es = eng_dtype_size(g.dtype);
    const int64_t unit = 16 / (int64_t)es, n_main = g.n / unit * unit;
    if (c->scratch_bytes < (size_t)(chunk * np) * es)
        return eng_op_scratch_err(c, (size_t)(chunk * np) * es);
    for (int64_t r0 = 0; r0 < g.m; r0 += chunk) {
        eng_cuda_gemm_t s = g;
        s.m = g.m - r0 < chunk ? g.m - r0 : chunk;
        s.a = (const char *)g.a + (size_t)(r0 * g.lda) * es;
        s.c = c->scratch, s.ldc = np;
        eng_cuda_gemm_t t = s;
        s.n = n_main;
        t.n = g.n - n_main;
        t.b = (const char *)g.b + (size_t)(g.trans_b ? n_main * g.ldb : n_main) * es;
        t.c = (char *)c->scratch + (size_t)n_main * es;
        t.bias = g.bias ? (const char *)g.bias + (size_t)n_main * es : NULL;
        int rc = n_main ? eng_cuda_gemm(c, &s) : 0;
        if (rc == 0)
            rc = eng_cuda_gemm(c, &t);
        if (rc)
            return rc;
        ENG_CUDA_TRY(c, cudaMemcpy2DAsync((char *)g.c + (size_t)(r0 * g.ldc) * es,
                                          (size_t)g.ldc * es, c->scratch, (size_t)np * es,
                                          (size_t)g.n * es, (size_t)s.m,
                                          cudaMemcpyDeviceToDevice, eng_cuda_ctx(c)->stream));
    }
    return 0;
}

/* MatMul of shape d with A, B and Y all float32, or all half or bfloat16,
 * through eng_cuda_gemm with the node's fused epilogue (graph.h: the bias
 * of input 2, the residual of input 3 as C with beta 1, the activation),
 * which cuBLASLt applies to each product.
 * Errors as matmul_run's. */
static int matmul_gemm(eng_op_ctx_t *c, const eng_matmul_dims_t &d)
{
    const eng_dtype_t dt = c->inputs[0]->dtype;
    const int64_t es = (int64_t)eng_dtype_size(dt);
    const char *a = (const char *)c->inputs[0]->data, *b = (const char *)c->inputs[1]->data;
    char *y = (char *)c->outputs[0]->data;
    const eng_tensor_t *bias = c->node->bias ? eng_ctx_in(c, 2) : NULL;
    const eng_tensor_t *res = bias && c->node->residual ? eng_ctx_in(c, 3) : NULL;
    matmul_run_split_t r = matmul_split(&d);
    int64_t chunk = 0;
    const int64_t np = matmul_stage_n(c, d, &chunk);
    return matmul_each(c, d, (size_t)es, r, [&](int64_t a_off, int64_t b_off, int64_t y_off,
                                                bool fold) {
        eng_cuda_gemm_t g = {};
        g.dtype = g.c_dtype = dt;
        g.trans_b = d.trans_b;
        g.n = d.n, g.k = d.k, g.alpha = 1.0f, g.beta = 0.0f;
        g.a = a + a_off * es, g.lda = d.k;
        g.b = b + b_off * es, g.ldb = d.trans_b ? d.k : d.n;
        g.c = y + y_off * es, g.ldc = d.n;
        g.bias = bias ? bias->data : NULL;
        g.act = c->node->act;
        /* The residual as cuBLASLt's C: laid out as Y, beta 1. */
        if (res) {
            g.r = (const char *)res->data + y_off * es;
            g.beta = 1.0f;
        }
        if (fold) {
            g.m = r.run * d.m, g.batch = 1;
        } else {
            g.m = d.m, g.batch = r.run;
            g.stride_a = r.sa, g.stride_b = r.sb, g.stride_c = d.m * d.n;
        }
        return np && fold ? matmul_staged(c, g, np, chunk) : eng_cuda_gemm(c, &g);
    });
}

/* MatMul (float, double, or half / bfloat16 throughout), with the node's
 * fused epilogue. On an error (cuBLAS range, launch) some of Y may be
 * written. */
static int matmul_run(eng_op_ctx_t *c)
{
    eng_matmul_dims_t d;
    int rc = linalg_require_inputs(c, !c->node->bias ? 2 : c->node->residual ? 4 : 3, -1);
    if (rc || (rc = eng_matmul_dims(c, &d)) || (rc = eng_matmul_bias_check(c, &d)))
        return rc;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        return matmul_double(c, d);
    return matmul_gemm(c, d);
}

/* ---- Gemm -------------------------------------------------------------- */

/* y [m, n] = scale * C broadcast from [rows, cols] (rows 1 or m, cols 1 or
 * n), in float, rounded to T (float, __half, __nv_bfloat16). */
template <typename T>
static __global__ void gemm_fill_c(T *y, const T *cv, int64_t m, int64_t n, int64_t rows,
                                   int64_t cols, float scale)
{
    ENG_CUDA_FOR(i, m * n)
    {
        int64_t r = i / n, col = i - r * n;
        y[i] = from_f32<T>(scale * to_f32(cv[(rows == 1 ? 0 : r) * cols + (cols == 1 ? 0 : col)]));
    }
}

/* Whether Gemm's C is a bias: beta 1 and C one row of N ([N] or [1, N]),
 * which cuBLASLt's bias epilogue adds instead of a fill pass. */
static bool gemm_c_is_bias(const eng_tensor_t *ct, float beta, int64_t n)
{
    const eng_shape_t *cs = &ct->shape;
    return beta == 1.0f && ((cs->rank == 1 && cs->dims[0] == n) ||
                            (cs->rank == 2 && cs->dims[0] == 1 && cs->dims[1] == n));
}

/* Gemm: Y = act(alpha * A' x B' + beta * C), act the node's fused
 * activation (graph.h). On an error Y may be partly written. */
static int gemm_run(eng_op_ctx_t *c)
{
    int rc = linalg_require_inputs(c, 3, -1);
    if (rc)
        return rc;
    const eng_tensor_t *at = c->inputs[0], *bt = c->inputs[1], *ct = eng_ctx_in(c, 2);
    if (at->dtype == ENG_DT_DOUBLE)
        return eng_op_err(c, FS_ENOTSUP, "dtype double is not supported");
    bool ta = eng_attr_i(c->node, "transA", 0) != 0, tb = eng_attr_i(c->node, "transB", 0) != 0;
    float alpha = eng_attr_f(c->node, "alpha", 1.0f), beta = eng_attr_f(c->node, "beta", 1.0f);
    int64_t m = at->shape.dims[ta ? 1 : 0], k = at->shape.dims[ta ? 0 : 1];
    int64_t n = bt->shape.dims[tb ? 0 : 1];
    void *y = c->outputs[0]->data;
    eng_dtype_t ydt = c->outputs[0]->dtype;
    if (m == 0 || n == 0)
        return 0;
    eng_cuda_gemm_t g = {};
    g.dtype = g.c_dtype = at->dtype;
    g.trans_a = ta, g.trans_b = tb;
    g.m = m, g.n = n, g.k = k, g.batch = 1, g.alpha = alpha;
    g.a = at->data, g.lda = ta ? m : k;
    g.b = bt->data, g.ldb = tb ? k : n;
    g.c = y, g.ldc = n;
    g.act = c->node->act;
    if (ct && gemm_c_is_bias(ct, beta, n)) {
        g.bias = ct->data;
    } else if (ct) {
        const eng_shape_t *cs = &ct->shape;
        int64_t rows = cs->rank == 2 ? cs->dims[0] : 1;
        int64_t cols = cs->rank >= 1 ? cs->dims[cs->rank - 1] : 1;
        rc = lowp_dispatch(c, ydt, [&](auto t) {
            using T = decltype(t);
            return eng_cuda_launch(c, gemm_fill_c<T>, m * n, (T *)y, (const T *)ct->data, m, n,
                                   rows, cols, beta);
        });
        if (rc)
            return rc;
        g.beta = 1.0f;
    }
    return eng_cuda_gemm(c, &g);
}

/* ---- Einsum ------------------------------------------------------------ */

/* How the GEMM reaches its operands: in place (with a transpose flag) or
 * through a packed copy in the scratch. */
typedef struct einsum_plan {
    eng_einsum_gemm_t p;
    bool pack_a, pack_b, pack_y;
    bool trans_a, trans_b;            /* for operands used in place */
    int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS];
    int64_t ystride[ENG_EINSUM_MAX_LABELS];
} einsum_plan_t;

/* Whether the labels of roles r0, r1, r2 have, in that order, the
 * row-major packed strides in `stride` (labels of size 1 aside): then the
 * tensor is already that packed matrix stack. */
static bool einsum_is_packed(const eng_einsum_t *e, const eng_einsum_gemm_t *p, int r0, int r1,
                             int r2, const int64_t *stride)
{
    const int roles[3] = {r0, r1, r2};
    int64_t st = 1;
    for (int r = 2; r >= 0; r--)
        for (int j = p->n[roles[r]] - 1; j >= 0; j--) {
            int l = p->lab[roles[r]][j];
            if (e->size[l] != 1 && stride[l] != st)
                return false;
            st *= e->size[l];
        }
    return true;
}

/* Fills *pl for a GEMM-shaped Einsum: which operands are used in place. */
static void einsum_plan(const eng_op_ctx_t *c, const eng_einsum_t *e, einsum_plan_t *pl)
{
    eng_einsum_strides(c, e, pl->stride);
    memset(pl->ystride, 0, sizeof pl->ystride);
    int64_t st = 1;
    for (int i = e->n_out - 1; i >= 0; i--) {
        pl->ystride[e->out[i]] = st;
        st *= e->size[e->out[i]];
    }
    const eng_einsum_gemm_t *p = &pl->p;
    pl->trans_a = pl->trans_b = false;
    pl->pack_a =
        !einsum_is_packed(e, p, ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_K, pl->stride[0]);
    if (pl->pack_a &&
        einsum_is_packed(e, p, ENG_EINSUM_BATCH, ENG_EINSUM_K, ENG_EINSUM_M, pl->stride[0]))
        pl->pack_a = false, pl->trans_a = true;
    pl->pack_b =
        !einsum_is_packed(e, p, ENG_EINSUM_BATCH, ENG_EINSUM_K, ENG_EINSUM_N, pl->stride[1]);
    if (pl->pack_b &&
        einsum_is_packed(e, p, ENG_EINSUM_BATCH, ENG_EINSUM_N, ENG_EINSUM_K, pl->stride[1]))
        pl->pack_b = false, pl->trans_b = true;
    pl->pack_y = !einsum_is_packed(e, p, ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_N, pl->ystride);
}

/* Scratch elements of a plan: the packed copies it makes. */
static int64_t einsum_plan_elems(const einsum_plan_t *pl)
{
    const int64_t *len = pl->p.len;
    int64_t b = len[ENG_EINSUM_BATCH], m = len[ENG_EINSUM_M], n = len[ENG_EINSUM_N];
    int64_t k = len[ENG_EINSUM_K];
    return (pl->pack_a ? b * m * k : 0) + (pl->pack_b ? b * k * n : 0) +
           (pl->pack_y ? b * m * n : 0);
}

/* out[i] = in[offset of i], i walking `dims` row-major and each dim adding
 * in_stride per step: a strided gather, used for packing in both
 * directions (the writes are coalesced either way). */
typedef struct gather_map {
    int rank;
    int64_t dims[ENG_MAX_RANK];
    int64_t in_stride[ENG_MAX_RANK];
} gather_map_t;

template <typename T>
static __global__ void einsum_gather(const T *in, T *out, gather_map_t g, int64_t n)
{
    ENG_CUDA_FOR(i, n)
    {
        int64_t rem = i, off = 0;
        for (int d = g.rank - 1; d >= 0; d--) {
            int64_t q = rem / g.dims[d];
            off += (rem - q * g.dims[d]) * g.in_stride[d];
            rem = q;
        }
        out[i] = in[off];
    }
}

/* Adds `label` to a gather map (size-1 labels move nothing and are left
 * out). */
static void gather_map_push(gather_map_t *g, const eng_einsum_t *e, int label, int64_t in_stride)
{
    if (e->size[label] == 1)
        return;
    g->dims[g->rank] = e->size[label];
    g->in_stride[g->rank++] = in_stride;
}

/* Launches one gather of n elements. */
template <typename T>
static int einsum_launch_gather(const eng_op_ctx_t *c, const T *in, T *out, const gather_map_t *g,
                                int64_t n)
{
    if (n == 0)
        return 0;
    einsum_gather<T><<<eng_cuda_blocks(c, n), ENG_CUDA_THREADS, 0, eng_cuda_ctx(c)->stream>>>(in, out,
                                                                                           *g, n);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

/* Packs operand `op` into [roles r0, r1, r2] order at dst. */
template <typename T>
static int einsum_pack(const eng_op_ctx_t *c, const eng_einsum_t *e, const einsum_plan_t *pl,
                       int op, int r0, int r1, int r2, T *dst)
{
    const eng_einsum_gemm_t *p = &pl->p;
    const int roles[3] = {r0, r1, r2};
    gather_map_t g;
    memset(&g, 0, sizeof g);
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < p->n[roles[r]]; j++) {
            int l = p->lab[roles[r]][j];
            gather_map_push(&g, e, l, pl->stride[op][l]);
        }
    return einsum_launch_gather(c, (const T *)c->inputs[op]->data, dst, &g,
                                p->len[r0] * p->len[r1] * p->len[r2]);
}

/* Einsum as a batched GEMM in element type T. On error Y may be partly
 * written. */
template <typename T>
static int einsum_gemm_run(eng_op_ctx_t *c, const eng_einsum_t *e, const einsum_plan_t *pl)
{
    const eng_einsum_gemm_t *p = &pl->p;
    int64_t b = p->len[ENG_EINSUM_BATCH], m = p->len[ENG_EINSUM_M];
    int64_t n = p->len[ENG_EINSUM_N], k = p->len[ENG_EINSUM_K];
    size_t need = (size_t)einsum_plan_elems(pl) * sizeof(T);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    T *y = (T *)c->outputs[0]->data;
    if (b == 0 || m == 0 || n == 0)
        return 0;
    if (k == 0) {
        ENG_CUDA_TRY(
            c, cudaMemsetAsync(y, 0, (size_t)(b * m * n) * sizeof *y, eng_cuda_ctx(c)->stream));
        return 0;
    }
    T *next = (T *)c->scratch;
    const T *a = (const T *)c->inputs[0]->data, *bm = (const T *)c->inputs[1]->data;
    T *yp = y;
    int rc;
    if (pl->pack_a) {
        if ((rc = einsum_pack(c, e, pl, 0, ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_K, next)))
            return rc;
        a = next;
        next += b * m * k;
    }
    if (pl->pack_b) {
        if ((rc = einsum_pack(c, e, pl, 1, ENG_EINSUM_BATCH, ENG_EINSUM_K, ENG_EINSUM_N, next)))
            return rc;
        bm = next;
        next += b * k * n;
    }
    if (pl->pack_y)
        yp = next;
    if ((rc = gemm_t(c, pl->trans_a, pl->trans_b, m, n, k, a, pl->trans_a ? m : k, m * k, bm,
                     pl->trans_b ? k : n, k * n, yp, n, m * n, b)))
        return rc;
    if (!pl->pack_y)
        return 0;
    /* Y in its own axis order, reading the packed [batch, M, N] result. */
    int64_t pstride[ENG_EINSUM_MAX_LABELS] = {0}, st = 1;
    const int y_roles[3] = {ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_N};
    for (int r = 2; r >= 0; r--)
        for (int j = p->n[y_roles[r]] - 1; j >= 0; j--) {
            int l = p->lab[y_roles[r]][j];
            pstride[l] = st;
            st *= e->size[l];
        }
    gather_map_t g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < e->n_out; i++)
        gather_map_push(&g, e, e->out[i], pstride[e->out[i]]);
    return einsum_launch_gather(c, yp, y, &g, b * m * n);
}

/* A direct Einsum: the labels of size > 1 in loop order (Y's, then the
 * summed ones) with each operand's stride per label. Passed by value: about
 * 4.4 KB of kernel parameters, which CUDA 12.1+ allows on sm_70 and later
 * (the build targets sm_80 and sm_90 with CUDA 13). */
template <typename T> struct einsum_direct {
    int n_ops, n_out, n_red;
    int64_t red_total;
    int64_t size[ENG_EINSUM_MAX_LABELS];
    int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS];
    const T *x[ENG_EINSUM_MAX_OPERANDS];
};

/* Each operand's offset for output element o. */
template <typename T>
static __device__ __forceinline__ void einsum_out_offsets(const einsum_direct<T> &d, int64_t o,
                                                          int64_t off[ENG_EINSUM_MAX_OPERANDS])
{
    for (int op = 0; op < d.n_ops; op++)
        off[op] = 0;
    for (int j = d.n_out - 1; j >= 0; j--) {
        int64_t q = o / d.size[j], at = o - q * d.size[j];
        o = q;
        for (int op = 0; op < d.n_ops; op++)
            off[op] += at * d.stride[op][j];
    }
}

/* One thread per output element: an odometer over the summed labels, the
 * product and the sum in double as on the CPU. */
template <typename T>
static __global__ void einsum_direct_thread(einsum_direct<T> d, T *y, int64_t out_total)
{
    ENG_CUDA_FOR(o, out_total)
    {
        int64_t off[ENG_EINSUM_MAX_OPERANDS], cnt[ENG_EINSUM_MAX_LABELS];
        einsum_out_offsets(d, o, off);
        for (int j = 0; j < d.n_red; j++)
            cnt[j] = 0;
        double acc = 0;
        for (int64_t it = 0; it < d.red_total; it++) {
            double prod = 1;
            for (int op = 0; op < d.n_ops; op++)
                prod *= d.x[op][off[op]];
            acc += prod;
            for (int j = d.n_out + d.n_red - 1; j >= d.n_out; j--) {
                int64_t *cj = &cnt[j - d.n_out];
                if (++*cj < d.size[j]) {
                    for (int op = 0; op < d.n_ops; op++)
                        off[op] += d.stride[op][j];
                    break;
                }
                *cj = 0;
                for (int op = 0; op < d.n_ops; op++)
                    off[op] -= d.stride[op][j] * (d.size[j] - 1);
            }
        }
        y[o] = (T)acc;
    }
}

#define EINSUM_BLOCK 128

/* One block per output element: the threads split the sum, then a block
 * reduction in double. */
template <typename T>
static __global__ void einsum_direct_block(einsum_direct<T> d, T *y, int64_t out_total)
{
    __shared__ double part[EINSUM_BLOCK / 32];
    for (int64_t o = blockIdx.x; o < out_total; o += gridDim.x) {
        int64_t base[ENG_EINSUM_MAX_OPERANDS];
        einsum_out_offsets(d, o, base);
        double acc = 0;
        for (int64_t it = threadIdx.x; it < d.red_total; it += blockDim.x) {
            int64_t rem = it;
            double prod = 1;
            int64_t off[ENG_EINSUM_MAX_OPERANDS];
            for (int op = 0; op < d.n_ops; op++)
                off[op] = base[op];
            for (int j = d.n_out + d.n_red - 1; j >= d.n_out; j--) {
                int64_t q = rem / d.size[j], at = rem - q * d.size[j];
                rem = q;
                for (int op = 0; op < d.n_ops; op++)
                    off[op] += at * d.stride[op][j];
            }
            for (int op = 0; op < d.n_ops; op++)
                prod *= d.x[op][off[op]];
            acc += prod;
        }
        for (int s = 16; s > 0; s >>= 1)
            acc += __shfl_down_sync(0xffffffffu, acc, s);
        __syncthreads(); /* part[] may still be read for the previous o */
        if ((threadIdx.x & 31) == 0)
            part[threadIdx.x >> 5] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            double sum = 0;
            for (int w = 0; w < EINSUM_BLOCK / 32; w++)
                sum += part[w];
            y[o] = (T)sum;
        }
    }
}

/* Label l as d's loop nl, with each operand's stride for it; returns the
 * next loop's index. A label of size 1 adds no loop (every index is 0). */
template <typename T>
static int einsum_direct_loop(einsum_direct<T> *d, const eng_einsum_t *e,
                              const int64_t (*stride)[ENG_EINSUM_MAX_LABELS], int l, int nl)
{
    if (e->size[l] == 1)
        return nl;
    d->size[nl] = e->size[l];
    for (int op = 0; op < d->n_ops; op++)
        d->stride[op][nl] = stride[op][l];
    return nl + 1;
}

/* A direct Einsum (not a GEMM) in element type T. On error Y is
 * untouched. */
template <typename T>
static int einsum_direct_run(eng_op_ctx_t *c, const eng_einsum_t *e)
{
    int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS];
    eng_einsum_strides(c, e, stride);
    einsum_direct<T> d;
    memset(&d, 0, sizeof d);
    d.n_ops = e->n_operands;
    for (int op = 0; op < e->n_operands; op++)
        d.x[op] = (const T *)c->inputs[op]->data;
    bool in_out[ENG_EINSUM_MAX_LABELS] = {false};
    int64_t out_total = 1;
    d.red_total = 1;
    int nl = 0;
    for (int i = 0; i < e->n_out; i++) {
        int l = e->out[i];
        in_out[l] = true;
        out_total *= e->size[l];
        nl = einsum_direct_loop(&d, e, stride, l, nl);
    }
    d.n_out = nl;
    for (int l = 0; l < ENG_EINSUM_MAX_LABELS; l++) {
        if (e->size[l] < 0 || in_out[l])
            continue;
        d.red_total *= e->size[l];
        nl = einsum_direct_loop(&d, e, stride, l, nl);
    }
    d.n_red = nl - d.n_out;
    T *y = (T *)c->outputs[0]->data;
    if (out_total == 0)
        return 0;
    if (d.red_total == 0) {
        ENG_CUDA_TRY(c,
                     cudaMemsetAsync(y, 0, (size_t)out_total * sizeof *y, eng_cuda_ctx(c)->stream));
        return 0;
    }
    /* Few outputs with long sums: a block per output keeps the GPU busy. */
    if (out_total < 65536 && d.red_total >= 64) {
        unsigned blocks = (unsigned)(out_total < 65535 ? out_total : 65535);
        einsum_direct_block<T><<<blocks, EINSUM_BLOCK, 0, eng_cuda_ctx(c)->stream>>>(d, y, out_total);
    } else {
        einsum_direct_thread<T><<<eng_cuda_blocks(c, out_total), ENG_CUDA_THREADS, 0,
                               eng_cuda_ctx(c)->stream>>>(d, y, out_total);
    }
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

static size_t einsum_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_einsum_t e;
    einsum_plan_t pl;
    if (eng_einsum_parse(c, &e) != 0 || !eng_einsum_as_gemm(c, &e, &pl.p))
        return 0;
    einsum_plan(c, &e, &pl);
    size_t elem = c->inputs[0]->dtype == ENG_DT_DOUBLE ? sizeof(double) : sizeof(float);
    return (size_t)einsum_plan_elems(&pl) * elem;
}

/* Einsum (see the file header). On error (equation, scratch) Y is
 * untouched; on a device error it may be partly written. */
static int einsum_run(eng_op_ctx_t *c)
{
    eng_einsum_t e;
    einsum_plan_t pl;
    int rc = linalg_require_inputs(c, c->n_inputs, -1);
    if (rc || (rc = eng_einsum_parse(c, &e)))
        return rc;
    bool dbl = c->inputs[0]->dtype == ENG_DT_DOUBLE;
    if (!eng_einsum_as_gemm(c, &e, &pl.p))
        return dbl ? einsum_direct_run<double>(c, &e) : einsum_direct_run<float>(c, &e);
    einsum_plan(c, &e, &pl);
    return dbl ? einsum_gemm_run<double>(c, &e, &pl) : einsum_gemm_run<float>(c, &e, &pl);
}

/* ---- Det -------------------------------------------------------------------------- */

namespace {

/* One thread per matrix: widen it into its scratch slot, then eng_det_lu. */
template <typename T>
__global__ void det_kernel(const T *__restrict__ x, T *__restrict__ y, double *scratch,
                           eng_det_t p)
{
    const int64_t nn = p.n * p.n;
    ENG_CUDA_FOR(b, p.batch)
    {
        double *a = scratch + b * nn;
        for (int64_t i = 0; i < nn; i++)
            a[i] = (double)x[b * nn + i];
        y[b] = (T)eng_det_lu(a, p.n);
    }
}

size_t det_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_det_t p;
    return eng_det_params(c, &p) == 0 ? (size_t)(p.batch * p.n * p.n) * sizeof(double) : 0;
}

int det_run(eng_op_ctx_t *c)
{
    eng_det_t p;
    int rc = eng_det_params(c, &p);
    if (rc)
        return rc;
    size_t need = det_scratch_bytes(c);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE)
        return eng_cuda_launch(c, det_kernel<double>, p.batch,
                               (const double *)c->inputs[0]->data,
                               (double *)c->outputs[0]->data, (double *)c->scratch, p);
    return eng_cuda_launch(c, det_kernel<float>, p.batch, (const float *)c->inputs[0]->data,
                           (float *)c->outputs[0]->data, (double *)c->scratch, p);
}

} /* namespace */

const eng_kernel_t eng_cuda_MatMul = {.run = matmul_run, .scratch_bytes = matmul_scratch_bytes};
const eng_kernel_t eng_cuda_Gemm = {.run = gemm_run, .scratch_bytes = NULL};
const eng_kernel_t eng_cuda_Einsum = {.run = einsum_run, .scratch_bytes = einsum_scratch_bytes};
const eng_kernel_t eng_cuda_Det = {.run = det_run, .scratch_bytes = det_scratch_bytes};
