/* linalg_kernels.c -- CPU kernels of the linalg ops.
 *
 * MatMul and Gemm call flatserve's GEMM (engine/cpu/gemm.h: every output
 * element's bits independent of its position, so of the batch it is in),
 * with the kernel's threads and its scratch for the packed B: MatMul once
 * for the whole batch when B is one matrix shared by every batch and A's
 * matrices are contiguous (then A is one [batch * M, K] matrix), else as
 * one eng_gemm_run_batch over the broadcast batch (attention's per-head
 * products: one parallel pass over every head's tiles, no scratch; each
 * product's bits are the ones eng_gemm_run would give it). A MatMul whose
 * B the loader left transposed (graph.h's trans_b) passes it as the GEMM's
 * op(B) = B', the way Gemm's transB does. A fused epilogue (graph.h: a
 * MatMul's bias, either op's activation, set at load by
 * engine/fuse_epilogue.c) is one pass over Y after the product, in the
 * Add, Relu and Gelu kernels' float arithmetic (eng_act_f32), so a fused
 * graph gives the unfused graph's bits.
 *
 * Einsum of two operands whose labels each appear once per operand, with
 * no broadcasting and no label summed inside one operand alone, is a
 * batched GEMM: each label is a batch (in A, B and Y), M (A and Y), N (B and
 * Y) or K (A and B) label; A and B are copied into the scratch as
 * [batch, M, K] and [batch, K, N], multiplied (one eng_gemm_run_batch for
 * a batch of several), and the [batch, M, N] result
 * is copied into Y's label order. Every other Einsum is a direct loop: an
 * odometer over the output labels, then the summed labels, multiplying one
 * element of each operand (found through per-label strides, where a
 * repeated label adds its axes' strides, which walks a diagonal) and
 * summing in double.
 *
 * Double MatMul and Einsum compute in double throughout (flatserve's GEMM
 * is float-only): MatMul as a plain i-k-j loop per product over the
 * broadcast batch, accumulating in double, on the calling thread; Einsum
 * always through the direct loop (never the float GEMM path), which reads
 * and writes double elements. Neither asks for scratch.
 *
 * Half and bfloat16 MatMul and Gemm run through the float code
 * (engine/cpu/through_float.h): operands converted to float, the float
 * GEMM, Y rounded once. */
#include <string.h>

#include "common/error.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/through_float.h"
#include "engine/kernels.h"
#include "engine/ops/linalg_impl.h"

/* Y [m, n] = A [m, k] x B [k, n], row-major and packed, with up to n_threads
 * threads and `scratch` (see eng_gemm_run). Cannot fail. */
static void sgemm_nn(int n_threads, int64_t m, int64_t n, int64_t k, const float *a,
                     const float *b, float *y, void *scratch, size_t scratch_bytes)
{
    eng_gemm_t g = {.m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = y,
                    .ldc = n, .alpha = 1.0f};
    eng_gemm_run(&g, n_threads, scratch, scratch_bytes);
}

/* How MatMul runs: `batches` products of [m, k] x [k, n] (m is batch * M
 * when one GEMM covers the batch, and batches 1). */
typedef struct matmul_plan {
    eng_matmul_dims_t d;
    int64_t batches, m;
    bool one_gemm;
} matmul_plan_t;

static int matmul_plan(const eng_op_ctx_t *c, matmul_plan_t *p)
{
    int rc = eng_matmul_dims(c, &p->d);
    if (rc)
        return rc;
    const eng_matmul_dims_t *d = &p->d;
    bool b_shared = true, a_full = true;
    p->batches = 1;
    for (int i = 0; i < d->batch_rank; i++) {
        p->batches *= d->batch[i];
        b_shared = b_shared && (d->b_stride[i] == 0 || d->batch[i] == 1);
        a_full = a_full && (d->a_stride[i] != 0 || d->batch[i] == 1);
    }
    p->one_gemm = b_shared && a_full;
    p->m = p->one_gemm ? p->batches * d->m : d->m;
    return 0;
}

static size_t matmul_scratch_bytes(const eng_op_ctx_t *c)
{
    matmul_plan_t p;
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE || matmul_plan(c, &p) != 0 || !p.one_gemm)
        return 0;
    return eng_gemm_scratch_bytes(p.m, p.d.n, p.d.k);
}

_Static_assert(ENG_MAX_RANK <= ENG_GEMM_BATCH_MAX_RANK, "a MatMul batch fits eng_gemm_batch_t");

/* Y's batch = A's x B's broadcast (plan p) as eng_gemm_run_batch's batch.
 * Cannot fail. */
static void matmul_batch(const matmul_plan_t *p, eng_gemm_batch_t *bt)
{
    const eng_matmul_dims_t *d = &p->d;
    int64_t c_stride = d->m * d->n;
    bt->rank = d->batch_rank;
    for (int i = d->batch_rank - 1; i >= 0; i--) {
        bt->dims[i] = d->batch[i];
        bt->a_stride[i] = d->a_stride[i];
        bt->b_stride[i] = d->b_stride[i];
        bt->c_stride[i] = c_stride;
        c_stride *= d->batch[i];
    }
}

/* Double MatMul (dims d): for each batch element, Y = A x B with i-k-j
 * loops accumulating in double (B's element (q, j) at j * k + q when d
 * has it transposed). Cannot fail. */
static void matmul_double(const eng_matmul_dims_t *d, const double *a, const double *b, double *y)
{
    int64_t batches = 1, cnt[ENG_MAX_RANK] = {0}, ao = 0, bo = 0;
    for (int i = 0; i < d->batch_rank; i++)
        batches *= d->batch[i];
    for (int64_t t = 0; t < batches; t++) {
        double *yt = y + t * d->m * d->n;
        for (int64_t i = 0; i < d->m; i++) {
            double *yr = yt + i * d->n;
            for (int64_t j = 0; j < d->n; j++)
                yr[j] = 0;
            for (int64_t q = 0; q < d->k; q++) {
                double av = a[ao + i * d->k + q];
                const double *br = b + bo + (d->trans_b ? q : q * d->n);
                int64_t step = d->trans_b ? d->k : 1;
                for (int64_t j = 0; j < d->n; j++)
                    yr[j] += av * br[j * step];
            }
        }
        for (int i = d->batch_rank - 1; i >= 0; i--) {
            if (++cnt[i] < d->batch[i]) {
                ao += d->a_stride[i];
                bo += d->b_stride[i];
                break;
            }
            cnt[i] = 0;
            ao -= d->a_stride[i] * (d->batch[i] - 1);
            bo -= d->b_stride[i] * (d->batch[i] - 1);
        }
    }
}

/* A fused epilogue (graph.h) over rows of Y [rows, n]. */
typedef struct epilogue_job {
    float *y;
    const float *bias;        /* [n] or NULL */
    const float *res;         /* Y's shape, or NULL: added after the bias */
    int64_t n;
    eng_act_t act;
} epilogue_job_t;

/* Y = act(Y + bias) on rows [begin, end): the loop specialised per
 * activation so that each vectorises. */
static void epilogue_rows(void *arg, int64_t begin, int64_t end)
{
    const epilogue_job_t *j = arg;
    const int64_t n = j->n;
    for (int64_t r = begin; r < end; r++) {
        float *y = j->y + r * n;
        if (j->bias)
            for (int64_t i = 0; i < n; i++)
                y[i] += j->bias[i];
        if (j->res)
            for (int64_t i = 0; i < n; i++)
                y[i] += j->res[r * n + i];
        switch (j->act) {
        case ENG_ACT_RELU:
            for (int64_t i = 0; i < n; i++)
                y[i] = eng_act_f32(ENG_ACT_RELU, y[i]);
            break;
        case ENG_ACT_GELU:
            for (int64_t i = 0; i < n; i++)
                y[i] = eng_act_f32(ENG_ACT_GELU, y[i]);
            break;
        case ENG_ACT_GELU_TANH:
            for (int64_t i = 0; i < n; i++)
                y[i] = eng_act_f32(ENG_ACT_GELU_TANH, y[i]);
            break;
        case ENG_ACT_NONE:
            break;
        }
    }
}

/* The node's fused epilogue on Y [rows, n] (nothing when it has none): the
 * bias (MatMul's input 2) added, then the residual (MatMul's input 3), and
 * the activation applied in float, as the Add, Relu and Gelu kernels it
 * replaced compute them, over up to n_threads threads. Cannot fail. */
static void gemm_epilogue(const eng_op_ctx_t *c, float *y, int64_t rows, int64_t n)
{
    const eng_tensor_t *bt = c->node->bias ? eng_ctx_in(c, 2) : NULL;
    const eng_tensor_t *rt = c->node->bias && c->node->residual ? eng_ctx_in(c, 3) : NULL;
    if (!bt && c->node->act == ENG_ACT_NONE)
        return;
    epilogue_job_t j = {.y = y, .bias = bt ? bt->data : NULL, .res = rt ? rt->data : NULL,
                        .n = n, .act = c->node->act};
    eng_parallel_for(c->n_threads, rows, eng_parallel_grain(n > 0 ? 4 * n : 1), epilogue_rows,
                     &j);
}

/* MatMul, with the node's fused epilogue. On error (shapes) Y is
 * untouched. */
static int matmul_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    matmul_plan_t p;
    int rc = matmul_plan(c, &p);
    if (rc)
        return rc;
    const eng_matmul_dims_t *d = &p.d;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE) {
        if (c->node->bias || c->node->act != ENG_ACT_NONE)
            return eng_op_err(c, FS_ENOTSUP, "a fused bias or activation in double");
        matmul_double(d, c->inputs[0]->data, c->inputs[1]->data, c->outputs[0]->data);
        return 0;
    }
    /* B [k, n], or [n, k] read transposed: Gemm's transB, one mechanism. */
    eng_gemm_t g = {.m = p.m, .n = d->n, .k = d->k, .a = c->inputs[0]->data, .lda = d->k,
                    .b = c->inputs[1]->data, .ldb = d->trans_b ? d->k : d->n,
                    .trans_b = d->trans_b, .c = c->outputs[0]->data, .ldc = d->n,
                    .alpha = 1.0f};
    if (p.one_gemm) {
        eng_gemm_run(&g, c->n_threads, c->scratch, c->scratch_bytes);
    } else {
        eng_gemm_batch_t bt;
        matmul_batch(&p, &bt);
        eng_gemm_run_batch(&g, &bt, c->n_threads);
    }
    gemm_epilogue(c, c->outputs[0]->data, eng_shape_numel(&c->outputs[0]->shape) / (d->n ? d->n : 1),
                  d->n);
    return 0;
}

/* Gemm's product dims, from A, B and the trans attributes. */
static void gemm_dims(const eng_op_ctx_t *c, int64_t *m, int64_t *n, int64_t *k)
{
    const eng_shape_t *as = &c->inputs[0]->shape, *bs = &c->inputs[1]->shape;
    bool ta = eng_attr_i(c->node, "transA", 0) != 0, tb = eng_attr_i(c->node, "transB", 0) != 0;
    *m = as->dims[ta ? 1 : 0];
    *k = as->dims[ta ? 0 : 1];
    *n = bs->dims[tb ? 0 : 1];
}

static size_t gemm_scratch_bytes(const eng_op_ctx_t *c)
{
    int64_t m, n, k;
    if (eng_cpu_half_dtype(c))
        return eng_cpu_scratch_through_float(c);
    gemm_dims(c, &m, &n, &k);
    return eng_gemm_scratch_bytes(m, n, k);
}

/* Gemm: Y = act(alpha * A' x B' + beta * C), C broadcast to [M, N], act
 * the node's fused activation (graph.h; none from a model file): with C, Y
 * is set to beta * C and the product (alpha folded into B's elements, see
 * gemm.h) accumulates onto it -- but a fused bias C (graph.h's `bias`) is
 * added to the finished product, as the Add it replaced did. Cannot fail but in half, through float
 * (engine/cpu/through_float.h: scratch, host memory). */
static int gemm_run(eng_op_ctx_t *c)
{
    if (eng_cpu_half_dtype(c))
        return eng_cpu_run_through_float(c);
    const eng_tensor_t *at = c->inputs[0], *bt = c->inputs[1], *ct = eng_ctx_in(c, 2);
    bool ta = eng_attr_i(c->node, "transA", 0) != 0, tb = eng_attr_i(c->node, "transB", 0) != 0;
    float alpha = eng_attr_f(c->node, "alpha", 1.0f), beta = eng_attr_f(c->node, "beta", 1.0f);
    int64_t m, n, k;
    gemm_dims(c, &m, &n, &k);
    float *y = c->outputs[0]->data;
    /* A fused bias (graph.h) is added after the product, by the epilogue. */
    if (c->node->bias)
        ct = NULL;
    if (ct) {
        const float *cv = ct->data;
        const eng_shape_t *cs = &ct->shape;
        int64_t rows = cs->rank == 2 ? cs->dims[0] : 1, cols = cs->rank >= 1 ? cs->dims[cs->rank - 1] : 1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                y[i * n + j] = beta * cv[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
    }
    eng_gemm_t g = {.m = m, .n = n, .k = k, .a = at->data, .lda = ta ? m : k, .trans_a = ta,
                    .b = bt->data, .ldb = tb ? k : n, .trans_b = tb, .c = y, .ldc = n,
                    .alpha = alpha, .accumulate = ct != NULL};
    eng_gemm_run(&g, c->n_threads, c->scratch, c->scratch_bytes);
    gemm_epilogue(c, y, m, n);
    return 0;
}

/* Copies between a strided tensor and a packed buffer laid out in the
 * row-major order of the labels of roles r0, r1, r2 (-1: none): to the
 * buffer when `gather`, else from it. Cannot fail. */
static void einsum_copy(const eng_einsum_t *e, const eng_einsum_gemm_t *p, const int roles[3],
                        const int64_t *stride, float *strided, float *packed, bool gather)
{
    int lab[ENG_EINSUM_MAX_LABELS], nl = 0;
    int64_t total = 1, cnt[ENG_EINSUM_MAX_LABELS] = {0}, off = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; roles[i] >= 0 && j < p->n[roles[i]]; j++) {
            lab[nl++] = p->lab[roles[i]][j];
            total *= e->size[lab[nl - 1]];
        }
    for (int64_t it = 0; it < total; it++) {
        if (gather)
            packed[it] = strided[off];
        else
            strided[off] = packed[it];
        for (int j = nl - 1; j >= 0; j--) {
            if (++cnt[j] < e->size[lab[j]]) {
                off += stride[lab[j]];
                break;
            }
            cnt[j] = 0;
            off -= stride[lab[j]] * (e->size[lab[j]] - 1);
        }
    }
}

/* The scratch of a batched-GEMM Einsum: the copies of A, B and Y, then the
 * GEMM's own (`copies` bytes in, `gemm` bytes long). */
static void einsum_scratch_split(const eng_einsum_gemm_t *p, size_t *copies, size_t *gemm)
{
    int64_t b = p->len[ENG_EINSUM_BATCH], m = p->len[ENG_EINSUM_M];
    int64_t n = p->len[ENG_EINSUM_N], k = p->len[ENG_EINSUM_K];
    *copies = (size_t)(b * (m * k + k * n + m * n)) * sizeof(float);
    *gemm = b == 1 ? eng_gemm_scratch_bytes(m, n, k) : 0;
}

static size_t einsum_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_einsum_t e;
    eng_einsum_gemm_t p;
    if (c->inputs[0]->dtype == ENG_DT_DOUBLE || eng_einsum_parse(c, &e) != 0 ||
        !eng_einsum_as_gemm(c, &e, &p))
        return 0;
    size_t copies, gemm;
    einsum_scratch_split(&p, &copies, &gemm);
    return copies + gemm;
}

/* Einsum as a batched GEMM. 0, or FS_EINVAL (scratch too small) with Y
 * untouched. */
static int einsum_gemm_run(eng_op_ctx_t *c, const eng_einsum_t *e, const eng_einsum_gemm_t *p,
                           int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS])
{
    int64_t b = p->len[ENG_EINSUM_BATCH], m = p->len[ENG_EINSUM_M];
    int64_t n = p->len[ENG_EINSUM_N], k = p->len[ENG_EINSUM_K];
    size_t copies, gemm;
    einsum_scratch_split(p, &copies, &gemm);
    if (c->scratch_bytes < copies)
        return eng_op_scratch_err(c, copies + gemm);
    float *a = c->scratch, *bm = a + b * m * k, *y = bm + b * k * n;
    int64_t ystride[ENG_EINSUM_MAX_LABELS] = {0}, st = 1;
    for (int i = e->n_out - 1; i >= 0; i--) {
        ystride[e->out[i]] = st;
        st *= e->size[e->out[i]];
    }
    static const int a_roles[3] = {ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_K};
    static const int b_roles[3] = {ENG_EINSUM_BATCH, ENG_EINSUM_K, ENG_EINSUM_N};
    static const int y_roles[3] = {ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_N};
    einsum_copy(e, p, a_roles, stride[0], c->inputs[0]->data, a, true);
    einsum_copy(e, p, b_roles, stride[1], c->inputs[1]->data, bm, true);
    if (b == 1) {
        sgemm_nn(c->n_threads, m, n, k, a, bm, y, (char *)c->scratch + copies,
                 c->scratch_bytes - copies);
    } else {
        eng_gemm_t g = {.m = m, .n = n, .k = k, .a = a, .lda = k, .b = bm, .ldb = n, .c = y,
                        .ldc = n, .alpha = 1.0f};
        eng_gemm_batch_t bt = {.rank = 1, .dims = {b}, .a_stride = {m * k},
                               .b_stride = {k * n}, .c_stride = {m * n}};
        eng_gemm_run_batch(&g, &bt, c->n_threads);
    }
    einsum_copy(e, p, y_roles, ystride, c->outputs[0]->data, y, false);
    return 0;
}

/* Einsum (see the file header). On error (the equation, the scratch) Y is
 * untouched. */
static int einsum_run(eng_op_ctx_t *c)
{
    eng_einsum_t e;
    eng_einsum_gemm_t p;
    int rc = eng_einsum_parse(c, &e);
    if (rc)
        return rc;
    int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS];
    eng_einsum_strides(c, &e, stride);
    bool dbl = c->inputs[0]->dtype == ENG_DT_DOUBLE;
    if (!dbl && eng_einsum_as_gemm(c, &e, &p))
        return einsum_gemm_run(c, &e, &p, stride);
    const void *x[ENG_EINSUM_MAX_OPERANDS];
    for (int op = 0; op < e.n_operands; op++)
        x[op] = c->inputs[op]->data;
    /* Loop order: the output labels, then every other label in use. */
    int lab[ENG_EINSUM_MAX_LABELS], nl = e.n_out;
    bool in_out[ENG_EINSUM_MAX_LABELS] = {false};
    int64_t out_total = 1, red_total = 1;
    for (int i = 0; i < e.n_out; i++) {
        lab[i] = e.out[i];
        in_out[e.out[i]] = true;
        out_total *= e.size[e.out[i]];
    }
    for (int l = 0; l < ENG_EINSUM_MAX_LABELS; l++)
        if (e.size[l] >= 0 && !in_out[l]) {
            lab[nl++] = l;
            red_total *= e.size[l];
        }
    void *y = c->outputs[0]->data;
    size_t esize = dbl ? sizeof(double) : sizeof(float);
    if (red_total == 0) {
        memset(y, 0, (size_t)out_total * esize);
        return 0;
    }
    int64_t cnt[ENG_EINSUM_MAX_LABELS] = {0}, off[ENG_EINSUM_MAX_OPERANDS] = {0};
    double acc = 0;
    for (int64_t it = 0, o = 0; it < out_total * red_total; it++) {
        double prod = 1;
        for (int op = 0; op < e.n_operands; op++)
            prod *= dbl ? ((const double *)x[op])[off[op]] : ((const float *)x[op])[off[op]];
        acc += prod;
        if ((it + 1) % red_total == 0) {
            if (dbl)
                ((double *)y)[o++] = acc;
            else
                ((float *)y)[o++] = (float)acc;
            acc = 0;
        }
        for (int j = nl - 1; j >= 0; j--) {
            int l = lab[j];
            if (++cnt[j] < e.size[l]) {
                for (int op = 0; op < e.n_operands; op++)
                    off[op] += stride[op][l];
                break;
            }
            cnt[j] = 0;
            for (int op = 0; op < e.n_operands; op++)
                off[op] -= stride[op][l] * (e.size[l] - 1);
        }
    }
    return 0;
}

/* Det: each matrix widened to double in scratch, then eng_det_lu. */
static size_t det_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_det_t p;
    return eng_det_params(c, &p) == 0 ? (size_t)(p.n * p.n) * sizeof(double) : 0;
}

static int det_run(eng_op_ctx_t *c)
{
    eng_det_t p;
    int rc = eng_det_params(c, &p);
    if (rc)
        return rc;
    size_t need = (size_t)(p.n * p.n) * sizeof(double);
    if (c->scratch_bytes < need)
        return eng_op_scratch_err(c, need);
    double *a = c->scratch;
    bool dbl = c->inputs[0]->dtype == ENG_DT_DOUBLE;
    const int64_t nn = p.n * p.n;
    for (int64_t b = 0; b < p.batch; b++) {
        for (int64_t i = 0; i < nn; i++)
            a[i] = dbl ? ((const double *)c->inputs[0]->data)[b * nn + i]
                       : ((const float *)c->inputs[0]->data)[b * nn + i];
        double d = eng_det_lu(a, p.n);
        if (dbl)
            ((double *)c->outputs[0]->data)[b] = d;
        else
            ((float *)c->outputs[0]->data)[b] = (float)d;
    }
    return 0;
}

const eng_kernel_t eng_cpu_MatMul = {.run = matmul_run, .scratch_bytes = matmul_scratch_bytes};
const eng_kernel_t eng_cpu_Gemm = {.run = gemm_run, .scratch_bytes = gemm_scratch_bytes};
const eng_kernel_t eng_cpu_Einsum = {.run = einsum_run, .scratch_bytes = einsum_scratch_bytes};
const eng_kernel_t eng_cpu_Det = {.run = det_run, .scratch_bytes = det_scratch_bytes};
