/* test_ops_linalg_nn.c -- tests of the linalg and nn ops (engine/ops/linalg.c,
 * engine/ops/nn.c and their CPU kernels): infer and run called directly on
 * hand-built nodes, with hand-checked cases and naive references for MatMul,
 * Conv and ConvTranspose on random inputs (fixed seeds). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "engine/ops/nn_impl.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define F(...) ((const float[]){__VA_ARGS__})
#define INTS(name, ...)                                                                  \
    attr_ints(name, (const int64_t[]){__VA_ARGS__},                                    \
              sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define OPSET 21

/* --- building and running one node ------------------------------------- */

static eng_tensor_t ft(const float *data, int rank, const int64_t *dims)
{
    return tensor(ENG_DT_FLOAT, data, rank, dims);
}

/* Builds the node at OPSET and runs check and infer. */
static int call_infer(call_t *c, const char *op, const eng_attr_t *attrs, int n_attrs,
                      const eng_tensor_t *const *in, int n_in, int n_out)
{
    return call_infer_at(c, op, OPSET, attrs, n_attrs, in, n_in, n_out);
}

/* Runs the op and checks rc 0 and output 0's shape; the caller frees. */
static void run_ok(call_t *c, const char *op, const eng_attr_t *attrs, int n_attrs,
                   const eng_tensor_t *const *in, int n_in, int n_out, int rank,
                   const int64_t *dims)
{
    int rc = call_infer(c, op, attrs, n_attrs, in, n_in, n_out);
    cr_assert_eq(rc, 0, "%s infer: %s", op, fs_errmsg());
    cr_assert_eq(c->outs[0].shape.rank, rank, "%s: rank %d, want %d", op,
                 c->outs[0].shape.rank, rank);
    for (int i = 0; i < rank; i++)
        cr_assert_eq(c->outs[0].shape.dims[i], dims[i], "%s: dim %d is %lld, want %lld", op, i,
                     (long long)c->outs[0].shape.dims[i], (long long)dims[i]);
    rc = call_run(c);
    cr_assert_eq(rc, 0, "%s run: %s", op, fs_errmsg());
}

static void expect_floats(const float *got, const float *want, size_t n, float tol,
                          const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_expect(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i])),
                  "%s[%zu]: got %.6f, want %.6f", what, i, got[i], want[i]);
}

/* Deterministic values in [-1, 1). */
static uint64_t rng_state;
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) % 2000000) / 1000000.0f - 1.0f;
}

static float *rnd_array(int64_t n)
{
    float *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i] = rnd();
    return a;
}

static int64_t numel(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* --- MatMul ------------------------------------------------------------ */

/* numpy matmul for rank >= 2 operands, batch dims broadcast. */
static void ref_matmul(const float *a, int ra, const int64_t *da, const float *b, int rb,
                       const int64_t *db, float *y)
{
    int64_t m = da[ra - 2], k = da[ra - 1], n = db[rb - 1];
    int br = (ra > rb ? ra : rb) - 2;
    int64_t batch[ENG_MAX_RANK], total = 1;
    for (int i = 0; i < br; i++) {
        int ia = i - (br - (ra - 2)), ib = i - (br - (rb - 2));
        int64_t x = ia >= 0 ? da[ia] : 1, z = ib >= 0 ? db[ib] : 1;
        batch[i] = x > z ? x : z;
        total *= batch[i];
    }
    for (int64_t t = 0; t < total; t++) {
        int64_t rem = t, ao = 0, bo = 0, as = 1, bs = 1;
        for (int i = br - 1; i >= 0; i--) {
            int64_t at = rem % batch[i];
            rem /= batch[i];
            int ia = i - (br - (ra - 2)), ib = i - (br - (rb - 2));
            if (ia >= 0) {
                ao += (da[ia] == 1 ? 0 : at) * as;
                as *= da[ia];
            }
            if (ib >= 0) {
                bo += (db[ib] == 1 ? 0 : at) * bs;
                bs *= db[ib];
            }
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++)
                    s += (double)a[ao * m * k + i * k + q] * b[bo * k * n + q * n + j];
                y[t * m * n + i * n + j] = (float)s;
            }
    }
}

Test(engine_ops_linalg, matmul_2d_by_hand)
{
    eng_tensor_t a = ft(F(1, 2, 3, 4, 5, 6), 2, DIMS(2, 3));
    eng_tensor_t b = ft(F(1, 0, 0, 1, 1, 1), 2, DIMS(3, 2));
    const eng_tensor_t *in[] = {&a, &b};
    call_t c;
    run_ok(&c, "MatMul", NULL, 0, in, 2, 1, 2, DIMS(2, 2));
    expect_floats(c.outs[0].data, F(4, 5, 10, 11), 4, 1e-6f, "Y");
    call_free(&c);
}

Test(engine_ops_linalg, matmul_1d_operands_drop_their_dim)
{
    eng_tensor_t v = ft(F(1, 2, 3), 1, DIMS(3));
    eng_tensor_t m32 = ft(F(1, 2, 3, 4, 5, 6), 2, DIMS(3, 2));
    eng_tensor_t m23 = ft(F(1, 2, 3, 4, 5, 6), 2, DIMS(2, 3));
    call_t c;
    const eng_tensor_t *dot[] = {&v, &v};
    run_ok(&c, "MatMul", NULL, 0, dot, 2, 1, 0, NULL);
    expect_floats(c.outs[0].data, F(14), 1, 1e-6f, "v.v");
    call_free(&c);
    const eng_tensor_t *vm[] = {&v, &m32};
    run_ok(&c, "MatMul", NULL, 0, vm, 2, 1, 1, DIMS(2));
    expect_floats(c.outs[0].data, F(22, 28), 2, 1e-6f, "v x M");
    call_free(&c);
    const eng_tensor_t *mv[] = {&m23, &v};
    run_ok(&c, "MatMul", NULL, 0, mv, 2, 1, 1, DIMS(2));
    expect_floats(c.outs[0].data, F(14, 32), 2, 1e-6f, "M x v");
    call_free(&c);
}

Test(engine_ops_linalg, matmul_broadcast_batches_match_reference)
{
    static const struct { int ra; int64_t da[5]; int rb; int64_t db[5]; } cases[] = {
        {4, {2, 1, 3, 4}, 3, {3, 4, 5}},   /* both broadcast */
        {3, {5, 4, 3}, 2, {3, 7}},         /* one sgemm over the folded batch */
        {2, {6, 3}, 4, {2, 2, 3, 5}},      /* A shared */
        {5, {2, 3, 1, 4, 8}, 3, {1, 8, 2}},
        {3, {4, 1, 9}, 3, {4, 9, 1}},
    };
    rng_state = 0x5eed1;
    for (size_t ci = 0; ci < N_OF(cases); ci++) {
        int ra = cases[ci].ra, rb = cases[ci].rb;
        float *a = rnd_array(numel(ra, cases[ci].da)), *b = rnd_array(numel(rb, cases[ci].db));
        eng_tensor_t at = ft(a, ra, cases[ci].da), bt = ft(b, rb, cases[ci].db);
        const eng_tensor_t *in[] = {&at, &bt};
        call_t c;
        cr_assert_eq(call_infer(&c, "MatMul", NULL, 0, in, 2, 1), 0, "%s", fs_errmsg());
        cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
        int64_t n = eng_shape_numel(&c.outs[0].shape);
        float *want = malloc((size_t)n * sizeof *want);
        ref_matmul(a, ra, cases[ci].da, b, rb, cases[ci].db, want);
        expect_floats(c.outs[0].data, want, (size_t)n, 1e-5f, "Y");
        free(want);
        free(a);
        free(b);
        call_free(&c);
    }
}

Test(engine_ops_linalg, matmul_rejects_mismatched_shapes_naming_them)
{
    eng_tensor_t a = ft(NULL, 2, DIMS(2, 3)), b = ft(NULL, 2, DIMS(4, 2));
    const eng_tensor_t *in[] = {&a, &b};
    call_t c;
    cr_expect_eq(call_infer(&c, "MatMul", NULL, 0, in, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[2,3]") && strstr(fs_errmsg(), "[4,2]") &&
              strstr(fs_errmsg(), "n0"), "message: %s", fs_errmsg());
    eng_tensor_t a3 = ft(NULL, 3, DIMS(2, 2, 3)), b3 = ft(NULL, 3, DIMS(3, 3, 2));
    const eng_tensor_t *in3[] = {&a3, &b3};
    cr_expect_eq(call_infer(&c, "MatMul", NULL, 0, in3, 2, 1), FS_EINVAL);
    eng_tensor_t i64 = {.dtype = ENG_DT_INT64, .shape = {2, {3, 2}}};
    const eng_tensor_t *ini[] = {&a, &i64};
    cr_expect_eq(call_infer(&c, "MatMul", NULL, 0, ini, 2, 1), FS_ENOTSUP);
}

/* --- Gemm -------------------------------------------------------------- */

Test(engine_ops_linalg, gemm_applies_every_attribute)
{
    /* A' = A^T = [[1,2],[3,4],[5,6]] (3x2), B' = B^T = [[1,0],[0,1]]. */
    eng_tensor_t a = ft(F(1, 3, 5, 2, 4, 6), 2, DIMS(2, 3));
    eng_tensor_t b = ft(F(1, 0, 0, 1), 2, DIMS(2, 2));
    eng_tensor_t cv = ft(F(10, 20), 1, DIMS(2));
    eng_tensor_t ccol = ft(F(1, 2, 3), 2, DIMS(3, 1));
    eng_attr_t attrs[] = {attr_i("transA", 1), attr_i("transB", 1), attr_f("alpha", 2.0f),
                          attr_f("beta", 0.5f)};
    call_t c;
    const eng_tensor_t *in[] = {&a, &b, &cv};
    run_ok(&c, "Gemm", attrs, 4, in, 3, 1, 2, DIMS(3, 2));
    expect_floats(c.outs[0].data, F(7, 14, 11, 18, 15, 22), 6, 1e-6f, "Y row bias");
    call_free(&c);
    const eng_tensor_t *in2[] = {&a, &b, &ccol};
    run_ok(&c, "Gemm", attrs, 4, in2, 3, 1, 2, DIMS(3, 2));
    expect_floats(c.outs[0].data, F(2.5f, 4.5f, 7, 9, 11.5f, 13.5f), 6, 1e-6f, "Y column bias");
    call_free(&c);
    const eng_tensor_t *in3[] = {&a, &b};
    run_ok(&c, "Gemm", attrs, 4, in3, 2, 1, 2, DIMS(3, 2));
    expect_floats(c.outs[0].data, F(2, 4, 6, 8, 10, 12), 6, 1e-6f, "Y no C");
    call_free(&c);
}

Test(engine_ops_linalg, gemm_rejects_c_that_does_not_broadcast)
{
    eng_tensor_t a = ft(NULL, 2, DIMS(3, 4)), b = ft(NULL, 2, DIMS(4, 5));
    eng_tensor_t cbad = ft(NULL, 1, DIMS(3));
    const eng_tensor_t *in[] = {&a, &b, &cbad};
    call_t c;
    cr_expect_eq(call_infer(&c, "Gemm", NULL, 0, in, 3, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[3]") && strstr(fs_errmsg(), "[3,5]"), "message: %s",
              fs_errmsg());
}

/* --- Einsum ------------------------------------------------------------ */

static void einsum_case(const char *eq, const eng_tensor_t *const *in, int n_in, int rank,
                        const int64_t *dims, const float *want)
{
    eng_attr_t attr = attr_s("equation", eq);
    call_t c;
    run_ok(&c, "Einsum", &attr, 1, in, n_in, 1, rank, dims);
    expect_floats(c.outs[0].data, want, (size_t)numel(rank, dims), 1e-5f, eq);
    call_free(&c);
}

Test(engine_ops_linalg, einsum_by_hand)
{
    eng_tensor_t m = ft(F(1, 2, 3, 4, 5, 6), 2, DIMS(2, 3));
    eng_tensor_t sq = ft(F(1, 2, 3, 4), 2, DIMS(2, 2));
    eng_tensor_t v = ft(F(1, 2, 3), 1, DIMS(3));
    eng_tensor_t w = ft(F(1, -1), 1, DIMS(2));
    const eng_tensor_t *mm[] = {&m}, *sqs[] = {&sq}, *vv[] = {&v, &v}, *mv[] = {&m, &v};
    const eng_tensor_t *outer[] = {&w, &v};
    einsum_case("ij->ji", mm, 1, 2, DIMS(3, 2), F(1, 4, 2, 5, 3, 6));
    einsum_case("ij->i", mm, 1, 1, DIMS(2), F(6, 15));
    einsum_case("ii->", sqs, 1, 0, NULL, F(5));
    einsum_case("ii->i", sqs, 1, 1, DIMS(2), F(1, 4));
    einsum_case("i,i", vv, 2, 0, NULL, F(14));
    einsum_case("ij,j->i", mv, 2, 1, DIMS(2), F(14, 32));
    einsum_case(" ji , i ", mv, 2, 1, DIMS(2), F(14, 32));
    einsum_case("i,j->ij", outer, 2, 2, DIMS(2, 3), F(1, 2, 3, -1, -2, -3));
    einsum_case("ba", mm, 1, 2, DIMS(3, 2), F(1, 4, 2, 5, 3, 6));
}

Test(engine_ops_linalg, einsum_ellipsis_batch_matmul_matches_reference)
{
    rng_state = 0xe1;
    float *a = rnd_array(2 * 1 * 2 * 3), *b = rnd_array(4 * 3 * 5);
    eng_tensor_t at = ft(a, 4, DIMS(2, 1, 2, 3)), bt = ft(b, 3, DIMS(4, 3, 5));
    const eng_tensor_t *in[] = {&at, &bt};
    float want[2 * 4 * 2 * 5];
    ref_matmul(a, 4, DIMS(2, 1, 2, 3), b, 3, DIMS(4, 3, 5), want);
    einsum_case("...ij,...jk->...ik", in, 2, 4, DIMS(2, 4, 2, 5), want);
    einsum_case("...ij,...jk", in, 2, 4, DIMS(2, 4, 2, 5), want);
    float diag[3 * 2] = {0};
    float *x = rnd_array(3 * 2 * 2);
    eng_tensor_t xt = ft(x, 3, DIMS(3, 2, 2));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            diag[i * 2 + j] = x[i * 4 + j * 3];
    const eng_tensor_t *xin[] = {&xt};
    einsum_case("...ii->...i", xin, 1, 2, DIMS(3, 2), diag);
    free(a);
    free(b);
    free(x);
}

Test(engine_ops_linalg, einsum_contractions_as_gemm_match_reference)
{
    rng_state = 0xe2;
    float *a = rnd_array(2 * 3 * 4), *b = rnd_array(2 * 4 * 5);
    eng_tensor_t at = ft(a, 3, DIMS(2, 3, 4)), bt = ft(b, 3, DIMS(2, 4, 5));
    const eng_tensor_t *in[] = {&at, &bt};
    float want[2 * 3 * 5];
    ref_matmul(a, 3, DIMS(2, 3, 4), b, 3, DIMS(2, 4, 5), want);
    einsum_case("bij,bjk->bik", in, 2, 3, DIMS(2, 3, 5), want);
    /* Permuted labels: A[k][b][j], B[b][j][i] -> Y[b][i][k]. */
    float *p = rnd_array(5 * 2 * 4), *q = rnd_array(2 * 4 * 3), perm[2 * 3 * 5];
    for (int bb = 0; bb < 2; bb++)
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 5; k++) {
                double sum = 0;
                for (int j = 0; j < 4; j++)
                    sum += (double)p[(k * 2 + bb) * 4 + j] * q[(bb * 4 + j) * 3 + i];
                perm[(bb * 3 + i) * 5 + k] = (float)sum;
            }
    eng_tensor_t pt = ft(p, 3, DIMS(5, 2, 4)), qt = ft(q, 3, DIMS(2, 4, 3));
    const eng_tensor_t *pin[] = {&pt, &qt};
    einsum_case("kbj,bji->bik", pin, 2, 3, DIMS(2, 3, 5), perm);
    free(a);
    free(b);
    free(p);
    free(q);
}

Test(engine_ops_linalg, einsum_rejects_malformed_equations)
{
    static const char *const bad[] = {"ij,jk->ik", "ij->k", "i1->i", "ijk->ijk", "ij->ii",
                                      "ij-ji"};
    eng_tensor_t m = ft(NULL, 2, DIMS(2, 3));
    const eng_tensor_t *in[] = {&m};
    for (size_t i = 0; i < N_OF(bad); i++) {
        eng_attr_t attr = attr_s("equation", bad[i]);
        call_t c;
        cr_expect_eq(call_infer(&c, "Einsum", &attr, 1, in, 1, 1), FS_EINVAL, "'%s'", bad[i]);
        cr_expect(strstr(fs_errmsg(), bad[i]) != NULL, "'%s': %s", bad[i], fs_errmsg());
    }
    eng_tensor_t m2 = ft(NULL, 2, DIMS(3, 3));
    const eng_tensor_t *in2[] = {&m, &m2};
    eng_attr_t attr = attr_s("equation", "ij,ij->i");
    call_t c;
    cr_expect_eq(call_infer(&c, "Einsum", &attr, 1, in2, 2, 1), FS_EINVAL);
}

/* --- float64 MatMul and Einsum ----------------------------------------- */

#define D(...) ((const double[]){__VA_ARGS__})

static eng_tensor_t dt(const double *data, int rank, const int64_t *dims)
{
    return tensor(ENG_DT_DOUBLE, data, rank, dims);
}

/* Values 1 + i * 1e-9 (i small): float32 would round them all to 1, so any
 * narrowing shows in the results. */
static double *fine_array(int64_t n, int64_t seed)
{
    double *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i] = 1.0 + (double)((i * 7 + seed) % 13) * 1e-9;
    return a;
}

static void expect_doubles(const eng_tensor_t *y, const double *want, size_t n, const char *what)
{
    cr_assert_eq(y->dtype, ENG_DT_DOUBLE, "%s: dtype %s, want double", what,
                 eng_dtype_name(y->dtype));
    const double *got = y->data;
    for (size_t i = 0; i < n; i++)
        cr_expect(fabs(got[i] - want[i]) <= 1e-13 * (1.0 + fabs(want[i])),
                  "%s[%zu]: got %.17g, want %.17g", what, i, got[i], want[i]);
}

Test(engine_ops_linalg, matmul_double_broadcast_batches_in_double)
{
    /* A [2,1,3,4] x B [3,4,5] -> [2,3,3,5]: both operands broadcast. */
    int64_t da[] = {2, 1, 3, 4}, db[] = {3, 4, 5};
    double *a = fine_array(2 * 3 * 4, 1), *b = fine_array(3 * 4 * 5, 5);
    double want[2 * 3 * 3 * 5];
    for (int x = 0; x < 2; x++)
        for (int z = 0; z < 3; z++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 5; j++) {
                    double s = 0;
                    for (int q = 0; q < 4; q++)
                        s += a[(x * 3 + i) * 4 + q] * b[(z * 4 + q) * 5 + j];
                    want[((x * 3 + z) * 3 + i) * 5 + j] = s;
                }
    eng_tensor_t at = dt(a, 4, da), bt = dt(b, 3, db);
    const eng_tensor_t *in[] = {&at, &bt};
    call_t c;
    run_ok(&c, "MatMul", NULL, 0, in, 2, 1, 4, DIMS(2, 3, 3, 5));
    expect_doubles(&c.outs[0], want, N_OF(want), "Y");
    call_free(&c);
    /* A shared by a batch of B, and a vector operand. */
    eng_tensor_t m = dt(D(1, 2, 3, 4, 5, 6), 2, DIMS(2, 3));
    eng_tensor_t bb = dt(D(1, 0, 0, 1, 1, 1, 2, 0, 0, 2, 1e-12, 0), 3, DIMS(2, 3, 2));
    const eng_tensor_t *in2[] = {&m, &bb};
    run_ok(&c, "MatMul", NULL, 0, in2, 2, 1, 3, DIMS(2, 2, 2));
    expect_doubles(&c.outs[0], D(4, 5, 10, 11, 2 + 3e-12, 4, 8 + 6e-12, 10), 8, "A shared");
    call_free(&c);
    eng_tensor_t v = dt(D(1, 2, 3), 1, DIMS(3));
    const eng_tensor_t *in3[] = {&m, &v};
    run_ok(&c, "MatMul", NULL, 0, in3, 2, 1, 1, DIMS(2));
    expect_doubles(&c.outs[0], D(14, 32), 2, "M x v");
    call_free(&c);
    free(a);
    free(b);
}

Test(engine_ops_linalg, einsum_double_gemm_and_direct_in_double)
{
    /* bij,bjk->bik: the shape the float path runs as a GEMM. */
    double *a = fine_array(2 * 3 * 4, 2), *b = fine_array(2 * 4 * 5, 9);
    double want[2 * 3 * 5];
    for (int x = 0; x < 2; x++)
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 5; k++) {
                double s = 0;
                for (int j = 0; j < 4; j++)
                    s += a[(x * 3 + i) * 4 + j] * b[(x * 4 + j) * 5 + k];
                want[(x * 3 + i) * 5 + k] = s;
            }
    eng_tensor_t at = dt(a, 3, DIMS(2, 3, 4)), bt = dt(b, 3, DIMS(2, 4, 5));
    const eng_tensor_t *in[] = {&at, &bt};
    eng_attr_t attr = attr_s("equation", "bij,bjk->bik");
    call_t c;
    run_ok(&c, "Einsum", &attr, 1, in, 2, 1, 3, DIMS(2, 3, 5));
    expect_doubles(&c.outs[0], want, N_OF(want), "bij,bjk->bik");
    call_free(&c);
    /* A diagonal and a full sum. */
    eng_tensor_t sq = dt(D(1 + 1e-12, 2, 3, 4 + 1e-12), 2, DIMS(2, 2));
    const eng_tensor_t *sqs[] = {&sq};
    attr = attr_s("equation", "ii->i");
    run_ok(&c, "Einsum", &attr, 1, sqs, 1, 1, 1, DIMS(2));
    expect_doubles(&c.outs[0], D(1 + 1e-12, 4 + 1e-12), 2, "ii->i");
    call_free(&c);
    attr = attr_s("equation", "ij->");
    run_ok(&c, "Einsum", &attr, 1, sqs, 1, 1, 0, NULL);
    expect_doubles(&c.outs[0], D(10 + 2e-12), 1, "ij->");
    call_free(&c);
    free(a);
    free(b);
}

Test(engine_ops_linalg, matmul_and_einsum_reject_mixed_float_and_double_naming_them)
{
    eng_tensor_t f = ft(NULL, 2, DIMS(2, 2)), d = dt(NULL, 2, DIMS(2, 2));
    const eng_tensor_t *in[] = {&f, &d};
    call_t c;
    cr_expect_eq(call_infer(&c, "MatMul", NULL, 0, in, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "float") && strstr(fs_errmsg(), "double"), "message: %s",
              fs_errmsg());
    eng_attr_t attr = attr_s("equation", "ij,jk->ik");
    cr_expect_eq(call_infer(&c, "Einsum", &attr, 1, in, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 0 has dtype float") &&
              strstr(fs_errmsg(), "input 1 dtype double"), "message: %s", fs_errmsg());
}

/* --- Conv and ConvTranspose -------------------------------------------- */

typedef struct conv_case {
    int ns;                     /* spatial dims */
    int64_t n, c, m, group;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], opad[3];
    bool bias;
} conv_case_t;

/* Normalised 3-D copies of a case's spatial parameters. */
typedef struct dims3 {
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], opad[3], out[3];
} dims3_t;

static dims3_t norm3(const conv_case_t *cc, bool transpose)
{
    dims3_t g;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - cc->ns);
        bool real = j >= 0;
        g.in[i] = real ? cc->in[j] : 1;
        g.k[i] = real ? cc->k[j] : 1;
        g.s[i] = real ? cc->s[j] : 1;
        g.d[i] = real ? cc->d[j] : 1;
        g.pb[i] = real ? cc->pb[j] : 0;
        g.pe[i] = real ? cc->pe[j] : 0;
        g.opad[i] = real ? cc->opad[j] : 0;
        int64_t ek = (g.k[i] - 1) * g.d[i] + 1;
        g.out[i] = transpose ? g.s[i] * (g.in[i] - 1) + g.opad[i] + ek - g.pb[i] - g.pe[i]
                             : (g.in[i] + g.pb[i] + g.pe[i] - ek) / g.s[i] + 1;
    }
    return g;
}

/* Direct convolution (or its transpose) by definition. */
static void ref_conv(const conv_case_t *cc, bool transpose, const float *x, const float *w,
                     const float *b, float *y)
{
    dims3_t g = norm3(cc, transpose);
    int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
    int64_t isz = g.in[0] * g.in[1] * g.in[2], osz = g.out[0] * g.out[1] * g.out[2];
    int64_t ksz = g.k[0] * g.k[1] * g.k[2];
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t m = 0; m < cc->m; m++)
            for (int64_t o = 0; o < osz; o++)
                y[(n * cc->m + m) * osz + o] = b ? b[m] : 0.0f;
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t gi = 0; gi < cc->group; gi++)
            for (int64_t m = 0; m < mg; m++)
                for (int64_t ch = 0; ch < cg; ch++)
                    for (int64_t kk = 0; kk < ksz; kk++) {
                        int64_t kd = kk / (g.k[1] * g.k[2]), kh = kk / g.k[2] % g.k[1],
                                kw = kk % g.k[2];
                        float wv = transpose ? w[((gi * cg + ch) * mg + m) * ksz + kk]
                                             : w[((gi * mg + m) * cg + ch) * ksz + kk];
                        const int64_t *grid = transpose ? g.in : g.out;
                        const int64_t *img = transpose ? g.out : g.in;
                        for (int64_t p0 = 0; p0 < grid[0]; p0++)
                            for (int64_t p1 = 0; p1 < grid[1]; p1++)
                                for (int64_t p2 = 0; p2 < grid[2]; p2++) {
                                    int64_t i0 = p0 * g.s[0] - g.pb[0] + kd * g.d[0];
                                    int64_t i1 = p1 * g.s[1] - g.pb[1] + kh * g.d[1];
                                    int64_t i2 = p2 * g.s[2] - g.pb[2] + kw * g.d[2];
                                    if (i0 < 0 || i0 >= img[0] || i1 < 0 || i1 >= img[1] ||
                                        i2 < 0 || i2 >= img[2])
                                        continue;
                                    int64_t gp = (p0 * grid[1] + p1) * grid[2] + p2;
                                    int64_t ip = (i0 * img[1] + i1) * img[2] + i2;
                                    if (transpose)
                                        y[(n * cc->m + gi * mg + m) * osz + ip] +=
                                            x[(n * cc->c + gi * cg + ch) * isz + gp] * wv;
                                    else
                                        y[(n * cc->m + gi * mg + m) * osz + gp] +=
                                            x[(n * cc->c + gi * cg + ch) * isz + ip] * wv;
                                }
                    }
}

static void conv_case_run(const conv_case_t *cc, bool transpose)
{
    int ns = cc->ns, rank = ns + 2;
    dims3_t g = norm3(cc, transpose);
    int64_t xd[5] = {cc->n, cc->c}, wd[5], yd[5] = {cc->n, cc->m};
    wd[0] = transpose ? cc->c : cc->m;
    wd[1] = transpose ? cc->m / cc->group : cc->c / cc->group;
    for (int i = 0; i < ns; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        yd[2 + i] = g.out[3 - ns + i];
    }
    float *x = rnd_array(numel(rank, xd)), *w = rnd_array(numel(rank, wd));
    float *b = cc->bias ? rnd_array(cc->m) : NULL;
    eng_tensor_t xt = ft(x, rank, xd), wt = ft(w, rank, wd), bt = ft(b, 1, &cc->m);
    const eng_tensor_t *in[] = {&xt, &wt, b ? &bt : NULL};
    int64_t pads[6];
    for (int i = 0; i < ns; i++) {
        pads[i] = cc->pb[i];
        pads[ns + i] = cc->pe[i];
    }
    eng_attr_t attrs[] = {attr_ints("strides", cc->s, (size_t)ns),
                          attr_ints("dilations", cc->d, (size_t)ns),
                          attr_ints("pads", pads, (size_t)(2 * ns)), attr_i("group", cc->group),
                          attr_ints("output_padding", cc->opad, (size_t)ns)};
    call_t c;
    const char *op = transpose ? "ConvTranspose" : "Conv";
    run_ok(&c, op, attrs, transpose ? 5 : 4, in, b ? 3 : 2, 1, rank, yd);
    int64_t ny = numel(rank, yd);
    float *want = malloc((size_t)ny * sizeof *want);
    ref_conv(cc, transpose, x, w, b, want);
    expect_floats(c.outs[0].data, want, (size_t)ny, 1e-4f, op);
    free(want);
    free(x);
    free(w);
    free(b);
    call_free(&c);
}

static const conv_case_t conv_cases[] = {
    /* ns n c m group in k s d pb pe opad bias */
    {2, 1, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0}, true},
    {2, 2, 4, 6, 2, {9, 8}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {2, 1}, {0}, true},
    {2, 1, 6, 6, 6, {5, 5}, {3, 3}, {1, 2}, {1, 1}, {0, 1}, {0, 1}, {0}, false},
    {2, 2, 8, 5, 1, {4, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0}, true},
    {1, 3, 2, 3, 1, {11}, {4}, {3}, {2}, {2}, {1}, {0}, true},
    {3, 1, 2, 4, 2, {5, 4, 6}, {2, 3, 2}, {1, 2, 2}, {2, 1, 1}, {1, 0, 1}, {0, 1, 1}, {0},
     true},
    {2, 1, 3, 6, 3, {6, 5}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}, {0}, true}, /* x2 channels */
    {1, 2, 4, 4, 4, {10}, {3}, {2}, {3}, {2}, {0}, {0}, true},                /* depthwise */
    /* Padding wider than the row (dilation 39 on a row of 4): the first and
     * last kernel columns read nothing, depthwise and through im2col. */
    {2, 1, 4, 4, 4, {4, 4}, {3, 3}, {1, 1}, {2, 39}, {2, 39}, {2, 39}, {0}, true},
    {2, 1, 2, 3, 1, {4, 4}, {3, 3}, {1, 1}, {2, 39}, {2, 39}, {2, 39}, {0}, false},
    /* An empty image with padding: the output is the bias alone. */
    {2, 1, 2, 3, 1, {0, 3}, {3, 3}, {1, 1}, {1, 1}, {2, 1}, {2, 1}, {0}, true},
};

Test(engine_ops_nn, conv_matches_reference)
{
    rng_state = 0xc0417;
    for (size_t i = 0; i < N_OF(conv_cases); i++)
        conv_case_run(&conv_cases[i], false);
}

/* Runs case cc's Conv (random x, w, b from `seed`) with n_threads threads
 * and scratch sized for `scratch_threads`; returns Y (caller frees). */
static float *conv_run_threads(const conv_case_t *cc, uint64_t seed, int n_threads,
                               int scratch_threads, size_t *n_out)
{
    int ns = cc->ns, rank = ns + 2;
    dims3_t g = norm3(cc, false);
    int64_t xd[5] = {cc->n, cc->c}, wd[5] = {cc->m, cc->c / cc->group}, yd[5] = {cc->n, cc->m};
    for (int i = 0; i < ns; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        yd[2 + i] = g.out[3 - ns + i];
    }
    rng_state = seed;
    float *x = rnd_array(numel(rank, xd)), *w = rnd_array(numel(rank, wd));
    float *b = cc->bias ? rnd_array(cc->m) : NULL;
    eng_tensor_t xt = ft(x, rank, xd), wt = ft(w, rank, wd), bt = ft(b, 1, &cc->m);
    const eng_tensor_t *in[] = {&xt, &wt, b ? &bt : NULL};
    int64_t pads[6];
    for (int i = 0; i < ns; i++) {
        pads[i] = cc->pb[i];
        pads[ns + i] = cc->pe[i];
    }
    eng_attr_t attrs[] = {attr_ints("strides", cc->s, (size_t)ns),
                          attr_ints("dilations", cc->d, (size_t)ns),
                          attr_ints("pads", pads, (size_t)(2 * ns)), attr_i("group", cc->group)};
    call_t c;
    cr_assert_eq(call_infer(&c, "Conv", attrs, 4, in, b ? 3 : 2, 1), 0, "infer: %s", fs_errmsg());
    const eng_kernel_t *k = eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), "Conv");
    *n_out = (size_t)numel(rank, yd);
    float *y = calloc(*n_out, sizeof *y);
    c.outs[0].data = y;
    c.ctx.n_threads = scratch_threads;
    c.ctx.scratch_bytes = k->scratch_bytes(&c.ctx);
    c.ctx.scratch = c.ctx.scratch_bytes ? malloc(c.ctx.scratch_bytes) : NULL;
    c.ctx.n_threads = n_threads;
    cr_assert_eq(k->run(&c.ctx), 0, "run at %d threads: %s", n_threads, fs_errmsg());
    free(c.ctx.scratch);
    free(x);
    free(w);
    free(b);
    call_free(&c);
    return y;
}

Test(engine_ops_nn, conv_of_a_batch_gives_the_same_bits_at_any_thread_count)
{
    static const conv_case_t cases[] = {
        /* ns n c m group in k s d pb pe opad bias */
        {2, 5, 2, 6, 1, {12, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0}, true},
        {2, 5, 4, 6, 2, {9, 8}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {2, 1}, {0}, true},
        {2, 5, 8, 5, 1, {4, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0}, false},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        size_t n1, n3, nf;
        float *y1 = conv_run_threads(&cases[i], 0x5eed + i, 1, 1, &n1);
        float *y3 = conv_run_threads(&cases[i], 0x5eed + i, 3, 3, &n3);
        /* Scratch asked for one thread, run with three: fewer tasks. */
        float *yf = conv_run_threads(&cases[i], 0x5eed + i, 3, 1, &nf);
        cr_assert_eq(n1, n3);
        cr_expect(memcmp(y1, y3, n1 * sizeof *y1) == 0, "case %zu: 1 vs 3 threads", i);
        cr_expect(memcmp(y1, yf, n1 * sizeof *y1) == 0, "case %zu: small scratch", i);
        free(y1);
        free(y3);
        free(yf);
    }
}

Test(engine_ops_nn, conv_transpose_matches_reference)
{
    static const conv_case_t cases[] = {
        {2, 1, 3, 4, 1, {4, 3}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, true},
        {2, 2, 4, 6, 2, {3, 4}, {3, 2}, {2, 3}, {1, 2}, {1, 0}, {0, 1}, {1, 2}, true},
        {1, 1, 2, 3, 1, {5}, {3}, {2}, {2}, {0}, {0}, {1}, false},
        /* An empty image whose transpose is not empty: the bias alone. */
        {2, 1, 2, 3, 1, {0, 2}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, true},
        {3, 1, 2, 2, 2, {2, 3, 2}, {2, 2, 3}, {2, 1, 2}, {1, 2, 1}, {0, 1, 1}, {1, 0, 0},
         {1, 0, 1}, true},
    };
    rng_state = 0x7a2;
    for (size_t i = 0; i < N_OF(cases); i++)
        conv_case_run(&cases[i], true);
}

Test(engine_ops_nn, conv_by_hand_with_padding_and_auto_pad)
{
    float x[25], w[9];
    for (int i = 0; i < 25; i++)
        x[i] = (float)i;
    for (int i = 0; i < 9; i++)
        w[i] = 1.0f;
    eng_tensor_t xt = ft(x, 4, DIMS(1, 1, 5, 5)), wt = ft(w, 4, DIMS(1, 1, 3, 3));
    const eng_tensor_t *in[] = {&xt, &wt};
    call_t c;
    eng_attr_t pad1[] = {INTS("pads", 1, 1, 1, 1), INTS("kernel_shape", 3, 3)};
    run_ok(&c, "Conv", pad1, 2, in, 2, 1, 4, DIMS(1, 1, 5, 5));
    expect_floats(c.outs[0].data,
                  F(12, 21, 27, 33, 24, 33, 54, 63, 72, 51, 63, 99, 108, 117, 81, 93, 144, 153,
                    162, 111, 72, 111, 117, 123, 84),
                  25, 1e-6f, "pads 1");
    call_free(&c);
    eng_attr_t same[] = {attr_s("auto_pad", "SAME_LOWER"), INTS("strides", 2, 2)};
    run_ok(&c, "Conv", same, 2, in, 2, 1, 4, DIMS(1, 1, 3, 3));
    expect_floats(c.outs[0].data, F(12, 27, 24, 63, 108, 81, 72, 117, 84), 9, 1e-6f,
                  "SAME_LOWER");
    call_free(&c);
    eng_attr_t valid[] = {attr_s("auto_pad", "VALID"), INTS("strides", 2, 2)};
    run_ok(&c, "Conv", valid, 2, in, 2, 1, 4, DIMS(1, 1, 2, 2));
    expect_floats(c.outs[0].data, F(54, 72, 144, 162), 4, 1e-6f, "VALID");
    call_free(&c);
}

Test(engine_ops_nn, conv_transpose_by_hand_and_output_shape)
{
    eng_tensor_t x1 = ft(F(0, 1, 2), 3, DIMS(1, 1, 3));
    eng_tensor_t w1 = ft(F(1, 1, 1, 1, 1, 1), 3, DIMS(1, 2, 3));
    const eng_tensor_t *in1[] = {&x1, &w1};
    call_t c;
    run_ok(&c, "ConvTranspose", NULL, 0, in1, 2, 1, 3, DIMS(1, 2, 5));
    expect_floats(c.outs[0].data, F(0, 1, 3, 3, 2, 0, 1, 3, 3, 2), 10, 1e-6f, "1-D");
    call_free(&c);
    /* output_shape one past the natural size: the extra row and column
     * come at the end (ONNX's floored split of the -1 padding). */
    float x[9], w[18];
    for (int i = 0; i < 9; i++)
        x[i] = (float)i;
    for (int i = 0; i < 18; i++)
        w[i] = 1.0f;
    eng_tensor_t xt = ft(x, 4, DIMS(1, 1, 3, 3)), wt = ft(w, 4, DIMS(1, 2, 3, 3));
    const eng_tensor_t *in[] = {&xt, &wt};
    eng_attr_t attrs[] = {INTS("strides", 3, 2), INTS("output_shape", 10, 8)};
    eng_attr_t padded[] = {INTS("strides", 3, 2), INTS("output_padding", 1, 1)};
    run_ok(&c, "ConvTranspose", attrs, 2, in, 2, 1, 4, DIMS(1, 2, 10, 8));
    call_t ref;
    run_ok(&ref, "ConvTranspose", padded, 2, in, 2, 1, 4, DIMS(1, 2, 10, 8));
    expect_floats(c.outs[0].data, ref.outs[0].data, 160, 1e-6f, "output_shape");
    cr_expect_eq(((float *)c.outs[0].data)[2], 1.0f, "x[0][0] + x[0][1] at (0, 2)");
    call_free(&c);
    call_free(&ref);
}

Test(engine_ops_nn, conv_rejects_bad_shapes_and_attributes)
{
    eng_tensor_t x = ft(NULL, 4, DIMS(1, 3, 5, 5)), w = ft(NULL, 4, DIMS(2, 2, 3, 3));
    const eng_tensor_t *in[] = {&x, &w};
    call_t c;
    cr_expect_eq(call_infer(&c, "Conv", NULL, 0, in, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[2,2,3,3]") && strstr(fs_errmsg(), "[1,3,5,5]"),
              "message: %s", fs_errmsg());
    eng_tensor_t w3 = ft(NULL, 4, DIMS(2, 3, 3, 3)), b = ft(NULL, 1, DIMS(3));
    const eng_tensor_t *inb[] = {&x, &w3, &b};
    cr_expect_eq(call_infer(&c, "Conv", NULL, 0, inb, 3, 1), FS_EINVAL, "bias of 3 for M=2");
    eng_attr_t strides[] = {INTS("strides", 1)};
    cr_expect_eq(call_infer(&c, "Conv", strides, 1, inb, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "strides") != NULL, "message: %s", fs_errmsg());
    eng_attr_t ap[] = {attr_s("auto_pad", "SAME")};
    cr_expect_eq(call_infer(&c, "Conv", ap, 1, inb, 2, 1), FS_ENOTSUP);
    eng_tensor_t x4 = ft(NULL, 6, DIMS(1, 1, 2, 2, 2, 2)), w4 = ft(NULL, 6, DIMS(1, 1, 1, 1, 1, 1));
    const eng_tensor_t *in4[] = {&x4, &w4};
    cr_expect_eq(call_infer(&c, "Conv", NULL, 0, in4, 2, 1), FS_ENOTSUP);
    eng_tensor_t big = ft(NULL, 4, DIMS(1, 3, 7, 7));
    const eng_tensor_t *in5[] = {&x, &big};
    cr_expect_eq(call_infer(&c, "Conv", NULL, 0, in5, 2, 1), FS_EINVAL, "kernel over input");
}

/* --- pools ------------------------------------------------------------- */

static float x25[25];

static void fill_x25(void)
{
    for (int i = 0; i < 25; i++)
        x25[i] = (float)(i + 1);
}

Test(engine_ops_nn, maxpool_by_hand_with_indices)
{
    fill_x25();
    eng_tensor_t x = ft(x25, 4, DIMS(1, 1, 5, 5));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    eng_attr_t attrs[] = {INTS("kernel_shape", 2, 2), INTS("strides", 2, 2),
                          attr_i("storage_order", 1)};
    run_ok(&c, "MaxPool", attrs, 3, in, 1, 2, 4, DIMS(1, 1, 2, 2));
    expect_floats(c.outs[0].data, F(7, 9, 17, 19), 4, 0, "Y");
    cr_expect_eq(c.outs[1].dtype, ENG_DT_INT64);
    const int64_t *idx = c.outs[1].data;
    cr_expect(idx[0] == 6 && idx[1] == 16 && idx[2] == 8 && idx[3] == 18,
              "column-major indices %lld %lld %lld %lld", (long long)idx[0], (long long)idx[1],
              (long long)idx[2], (long long)idx[3]);
    call_free(&c);
    eng_attr_t pads[] = {INTS("kernel_shape", 3, 3), INTS("pads", 1, 1, 1, 1),
                         INTS("strides", 2, 2)};
    run_ok(&c, "MaxPool", pads, 3, in, 1, 2, 4, DIMS(1, 1, 3, 3));
    expect_floats(c.outs[0].data, F(7, 9, 10, 17, 19, 20, 22, 24, 25), 9, 0, "pads");
    idx = c.outs[1].data;
    cr_expect(idx[0] == 6 && idx[8] == 24, "row-major indices %lld %lld", (long long)idx[0],
              (long long)idx[8]);
    call_free(&c);
}

Test(engine_ops_nn, maxpool_ceil_mode_dilations_and_uint8)
{
    float x16[16];
    uint8_t u16[16];
    for (int i = 0; i < 16; i++) {
        x16[i] = (float)(i + 1);
        u16[i] = (uint8_t)(i + 1);
    }
    eng_tensor_t x = ft(x16, 4, DIMS(1, 1, 4, 4));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    eng_attr_t ceil[] = {INTS("kernel_shape", 3, 3), INTS("strides", 2, 2),
                         attr_i("ceil_mode", 1)};
    run_ok(&c, "MaxPool", ceil, 3, in, 1, 1, 4, DIMS(1, 1, 2, 2));
    expect_floats(c.outs[0].data, F(11, 12, 15, 16), 4, 0, "ceil_mode");
    call_free(&c);
    eng_attr_t dil[] = {INTS("kernel_shape", 2, 2), INTS("dilations", 2, 2)};
    run_ok(&c, "MaxPool", dil, 2, in, 1, 1, 4, DIMS(1, 1, 2, 2));
    expect_floats(c.outs[0].data, F(11, 12, 15, 16), 4, 0, "dilations");
    call_free(&c);
    eng_tensor_t xu = {.dtype = ENG_DT_UINT8, .shape = {4, {1, 1, 4, 4}}, .data = u16};
    const eng_tensor_t *inu[] = {&xu};
    eng_attr_t k2[] = {INTS("kernel_shape", 2, 2), INTS("strides", 2, 2)};
    run_ok(&c, "MaxPool", k2, 2, inu, 1, 1, 4, DIMS(1, 1, 2, 2));
    cr_expect_eq(c.outs[0].dtype, ENG_DT_UINT8);
    const uint8_t *yu = c.outs[0].data;
    cr_expect(yu[0] == 6 && yu[1] == 8 && yu[2] == 14 && yu[3] == 16, "uint8 %d %d %d %d",
              yu[0], yu[1], yu[2], yu[3]);
    call_free(&c);
}

Test(engine_ops_nn, averagepool_pads_with_and_without_count_include_pad)
{
    fill_x25();
    eng_tensor_t x = ft(x25, 4, DIMS(1, 1, 5, 5));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    eng_attr_t attrs[] = {INTS("kernel_shape", 5, 5), INTS("pads", 2, 2, 2, 2),
                          attr_i("count_include_pad", 0)};
    run_ok(&c, "AveragePool", attrs, 3, in, 1, 1, 4, DIMS(1, 1, 5, 5));
    expect_floats(c.outs[0].data,
                  F(7, 7.5f, 8, 8.5f, 9, 9.5f, 10, 10.5f, 11, 11.5f, 12, 12.5f, 13, 13.5f, 14,
                    14.5f, 15, 15.5f, 16, 16.5f, 17, 17.5f, 18, 18.5f, 19),
                  25, 1e-6f, "exclude pad");
    call_free(&c);
    attrs[2] = attr_i("count_include_pad", 1);
    run_ok(&c, "AveragePool", attrs, 3, in, 1, 1, 4, DIMS(1, 1, 5, 5));
    expect_floats(c.outs[0].data,
                  F(2.52f, 3.6f, 4.8f, 4.08f, 3.24f, 4.56f, 6.4f, 8.4f, 7.04f, 5.52f, 7.2f, 10,
                    13, 10.8f, 8.4f, 6.96f, 9.6f, 12.4f, 10.24f, 7.92f, 6.12f, 8.4f, 10.8f,
                    8.88f, 6.84f),
                  25, 1e-5f, "include pad");
    call_free(&c);
    eng_attr_t same[] = {INTS("kernel_shape", 3, 3), INTS("strides", 2, 2),
                         attr_s("auto_pad", "SAME_UPPER")};
    run_ok(&c, "AveragePool", same, 3, in, 1, 1, 4, DIMS(1, 1, 3, 3));
    expect_floats(c.outs[0].data, F(4, 5.5f, 7, 11.5f, 13, 14.5f, 19, 20.5f, 22), 9, 1e-6f,
                  "SAME_UPPER");
    call_free(&c);
}

Test(engine_ops_nn, global_pools_reduce_every_spatial_dim)
{
    eng_tensor_t x = ft(F(1, 2, 3, 4, -1, -2, -3, -8), 4, DIMS(1, 2, 2, 2));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    run_ok(&c, "GlobalAveragePool", NULL, 0, in, 1, 1, 4, DIMS(1, 2, 1, 1));
    expect_floats(c.outs[0].data, F(2.5f, -3.5f), 2, 1e-6f, "average");
    call_free(&c);
    run_ok(&c, "GlobalMaxPool", NULL, 0, in, 1, 1, 4, DIMS(1, 2, 1, 1));
    expect_floats(c.outs[0].data, F(4, -1), 2, 0, "max");
    call_free(&c);
}

Test(engine_ops_nn, pools_reject_missing_kernel_shape)
{
    eng_tensor_t x = ft(NULL, 4, DIMS(1, 1, 5, 5));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    cr_expect_eq(call_infer(&c, "MaxPool", NULL, 0, in, 1, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "kernel_shape") != NULL, "message: %s", fs_errmsg());
    eng_attr_t big[] = {INTS("kernel_shape", 6, 6)};
    cr_expect_eq(call_infer(&c, "AveragePool", big, 1, in, 1, 1), FS_EINVAL);
}

/* --- normalisations ---------------------------------------------------- */

static const float nx[] = {-1, 0, 1, 2, 3, 4};

Test(engine_ops_nn, batchnorm_by_hand_and_rejects_training)
{
    eng_tensor_t x = ft(nx, 4, DIMS(1, 2, 1, 3)), s = ft(F(1, 1.5f), 1, DIMS(2));
    eng_tensor_t b = ft(F(0, 1), 1, DIMS(2)), mean = ft(F(0, 3), 1, DIMS(2));
    eng_tensor_t var = ft(F(1, 1.5f), 1, DIMS(2));
    const eng_tensor_t *in[] = {&x, &s, &b, &mean, &var};
    call_t c;
    run_ok(&c, "BatchNormalization", NULL, 0, in, 5, 1, 4, DIMS(1, 2, 1, 3));
    expect_floats(c.outs[0].data, F(-0.999995f, 0, 0.999995f, -0.224743f, 1, 2.224743f), 6,
                  1e-5f, "Y");
    call_free(&c);
    eng_attr_t train[] = {attr_i("training_mode", 1)};
    cr_expect_eq(call_infer(&c, "BatchNormalization", train, 1, in, 5, 1), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "training_mode") != NULL, "message: %s", fs_errmsg());
    cr_expect_eq(call_infer(&c, "BatchNormalization", NULL, 0, in, 5, 3), FS_ENOTSUP);
    eng_tensor_t s3 = ft(F(1, 1, 1), 1, DIMS(3));
    const eng_tensor_t *bad[] = {&x, &s3, &b, &mean, &var};
    cr_expect_eq(call_infer(&c, "BatchNormalization", NULL, 0, bad, 5, 1), FS_EINVAL);
}

Test(engine_ops_nn, instancenorm_by_hand)
{
    eng_tensor_t x = ft(nx, 4, DIMS(1, 2, 1, 3)), s = ft(F(1, 1.5f), 1, DIMS(2));
    eng_tensor_t b = ft(F(0, 1), 1, DIMS(2));
    const eng_tensor_t *in[] = {&x, &s, &b};
    call_t c;
    run_ok(&c, "InstanceNormalization", NULL, 0, in, 3, 1, 4, DIMS(1, 2, 1, 3));
    expect_floats(c.outs[0].data, F(-1.224736f, 0, 1.224736f, -0.837104f, 1, 2.837104f), 6,
                  1e-5f, "Y");
    call_free(&c);
}

Test(engine_ops_nn, layernorm_by_hand_with_statistics)
{
    eng_tensor_t x = ft(F(1, 2, 3, 4, 6, 8), 2, DIMS(2, 3));
    eng_tensor_t s = ft(F(1, 2, 3), 1, DIMS(3)), b = ft(F(0, 0, 1), 1, DIMS(3));
    const eng_tensor_t *in[] = {&x, &s, &b};
    call_t c;
    run_ok(&c, "LayerNormalization", NULL, 0, in, 3, 3, 2, DIMS(2, 3));
    expect_floats(c.outs[0].data, F(-1.224736f, 0, 4.674208f, -1.224736f, 0, 4.674208f), 6,
                  1e-5f, "Y");
    cr_expect_eq(c.outs[1].shape.rank, 2);
    cr_expect_eq(c.outs[1].shape.dims[1], 1);
    expect_floats(c.outs[1].data, F(2, 6), 2, 1e-6f, "Mean");
    expect_floats(c.outs[2].data, F(1.224736f, 0.612371f), 2, 1e-5f, "InvStdDev");
    call_free(&c);
    /* axis 0: one row over everything; a scale of [1] broadcasts. */
    eng_tensor_t s1 = ft(F(2), 1, DIMS(1));
    const eng_tensor_t *in0[] = {&x, &s1};
    eng_attr_t axis0[] = {attr_i("axis", 0), attr_f("epsilon", 0.0f)};
    run_ok(&c, "LayerNormalization", axis0, 2, in0, 2, 1, 2, DIMS(2, 3));
    float mean = 4, sd = sqrtf((9 + 4 + 1 + 0 + 4 + 16) / 6.0f), want[6];
    for (int i = 0; i < 6; i++)
        want[i] = 2 * (((const float *)x.data)[i] - mean) / sd;
    expect_floats(c.outs[0].data, want, 6, 1e-5f, "axis 0");
    call_free(&c);
    eng_tensor_t s2 = ft(F(1, 1), 1, DIMS(2));
    const eng_tensor_t *bad[] = {&x, &s2};
    cr_expect_eq(call_infer(&c, "LayerNormalization", NULL, 0, bad, 2, 1), FS_EINVAL);
}

Test(engine_ops_nn, lrn_by_hand)
{
    eng_tensor_t x = ft(F(1, 2, 3), 4, DIMS(1, 3, 1, 1));
    const eng_tensor_t *in[] = {&x};
    eng_attr_t attrs[] = {attr_i("size", 3), attr_f("alpha", 3.0f), attr_f("beta", 1.0f),
                          attr_f("bias", 1.0f)};
    call_t c;
    run_ok(&c, "LRN", attrs, 4, in, 1, 1, 4, DIMS(1, 3, 1, 1));
    expect_floats(c.outs[0].data, F(1.0f / 6, 2.0f / 15, 3.0f / 14), 3, 1e-6f, "Y");
    call_free(&c);
    cr_expect_eq(call_infer(&c, "LRN", NULL, 0, in, 1, 1), FS_EINVAL, "size is required");
}

/* The row-wise float path (no Indices) and the general path (with Indices)
 * agree on random data with pads, strides and dilations, and a NaN anywhere
 * in a window wins, in both. */
Test(engine_ops_nn, maxpool_fast_path_matches_the_general_one_and_propagates_nan)
{
    rng_state = 7;
    float *xs = rnd_array(2 * 3 * 9 * 11);
    xs[3 * 11 + 5] = NAN; /* plane 0, row 3, column 5: not a window's first element */
    eng_tensor_t x = ft(xs, 4, DIMS(2, 3, 9, 11));
    const eng_tensor_t *in[] = {&x};
    eng_attr_t attrs[] = {INTS("kernel_shape", 3, 3), INTS("pads", 1, 2, 1, 0),
                          INTS("strides", 2, 1), INTS("dilations", 1, 2)};
    call_t fast, general;
    run_ok(&fast, "MaxPool", attrs, 4, in, 1, 1, 4, DIMS(2, 3, 5, 9));
    run_ok(&general, "MaxPool", attrs, 4, in, 1, 2, 4, DIMS(2, 3, 5, 9));
    const float *a = fast.outs[0].data, *b = general.outs[0].data;
    int n_nan = 0;
    for (int i = 0; i < 2 * 3 * 5 * 9; i++) {
        cr_expect((a[i] != a[i] && b[i] != b[i]) || a[i] == b[i], "Y[%d]: %g vs %g", i, a[i],
                  b[i]);
        n_nan += a[i] != a[i];
    }
    cr_expect_gt(n_nan, 0, "the NaN reached the windows that hold it");
    call_free(&fast);
    call_free(&general);
    free(xs);
}

/* Det: a 2x2, a 3x3 whose first column's largest entry is not on the
 * diagonal (the row swap flips the sign), and a singular one, as a batch of
 * three; a non-square input is refused naming its shape. */
Test(engine_ops_linalg, det_of_a_batch_with_a_pivot_and_a_singular_matrix)
{
    float xs[3 * 9] = {
        3, 8, 0, 4, 6, 0, 0, 0, 1, /* [[3,8,0],[4,6,0],[0,0,1]]: 18 - 32 = -14 */
        0, 2, 1, 5, 1, 0, 1, 0, 3, /* 0*(3-0) - 2*(15-0) + 1*(0-1) = -31 */
        1, 2, 3, 2, 4, 6, 7, 8, 9, /* rows 0 and 1 are parallel: 0 */
    };
    eng_tensor_t x = ft(xs, 3, DIMS(3, 3, 3));
    const eng_tensor_t *in[] = {&x};
    call_t c;
    run_ok(&c, "Det", NULL, 0, in, 1, 1, 1, DIMS(3));
    expect_floats(c.outs[0].data, (const float[]){-14, -31, 0}, 3, 1e-5f, "det");
    call_free(&c);

    float rect[6] = {0};
    eng_tensor_t r = ft(rect, 2, DIMS(2, 3));
    const eng_tensor_t *rin[] = {&r};
    cr_expect_eq(call_infer(&c, "Det", NULL, 0, rin, 1, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 0 has shape [2,3]; it must be [..., n, n]"), "%s",
              fs_errmsg());
}

/* --- which Convs the implicit GEMM takes (engine/cuda/conv_igemm.cu) ------ */

/* A 2-D Conv's geometry as eng_nn_geom normalises it: dim 0 trivial. */
static eng_nn_geom_t geom2d(int64_t n, int64_t c, int64_t hw, int64_t m, int64_t k, int64_t s,
                            int64_t p, int64_t d)
{
    eng_nn_geom_t g = {.n_spatial = 2, .batch = n, .in_channels = c, .out_channels = m,
                       .group = 1};
    g.in[0] = g.out[0] = g.kernel[0] = g.stride[0] = g.dilation[0] = 1;
    for (int i = 1; i < ENG_NN_DIMS; i++) {
        g.in[i] = hw;
        g.kernel[i] = k;
        g.stride[i] = s;
        g.dilation[i] = d;
        g.pad_begin[i] = g.pad_end[i] = p;
        g.out[i] = (hw + 2 * p - (k - 1) * d - 1) / s + 1;
    }
    return g;
}

Test(engine_ops_nn, implicit_gemm_takes_2d_half_convs_with_channels_in_units_of_8)
{
    eng_nn_geom_t g = geom2d(64, 64, 56, 64, 3, 1, 1, 1); /* ResNet-50's 3x3 */
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_BFLOAT16));
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT), "float stays im2col");
    g = geom2d(3, 40, 7, 24, 3, 1, 1, 1); /* P and M no tile multiples */
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
    g = geom2d(2, 8, 15, 16, 7, 2, 3, 1); /* the stem with C padded to 8 */
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
    g = geom2d(2, 16, 11, 16, 3, 1, 2, 2); /* dilation 2 */
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_BFLOAT16));
    g = geom2d(2, 64, 56, 128, 1, 2, 0, 1); /* a strided 1x1 is no plain GEMM */
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
    g = geom2d(1, 16, 10, 16, 3, 1, 1, 1);
    g.in[1] = g.out[1] = 1; /* a 1-D Conv: dim 1 trivial too */
    g.kernel[1] = 1;
    g.pad_begin[1] = g.pad_end[1] = 0;
    cr_expect(eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
}

Test(engine_ops_nn, implicit_gemm_leaves_the_rest_to_im2col)
{
    eng_nn_geom_t g = geom2d(2, 3, 224, 64, 7, 2, 3, 1); /* the stem: C = 3 */
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16));
    g = geom2d(2, 12, 9, 16, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "C not a multiple of 8");
    g = geom2d(2, 16, 9, 12, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "M not a multiple of 8");
    g = geom2d(2, 16, 9, 32, 1, 1, 0, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "pointwise: one GEMM on X");
    g = geom2d(2, 16, 9, 32, 3, 1, 1, 1);
    g.group = 2;
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "grouped");
    g = geom2d(2, 16, 9, 32, 3, 1, 1, 1);
    g.in[0] = g.kernel[0] = 3;
    g.out[0] = 1;
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "3-D");
    g = geom2d(0, 16, 9, 32, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "empty batch");
    g = geom2d(2, 0, 9, 32, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "no input channels");
    g = geom2d(2, 16, 9, 32, 3, 1, 1, 1);
    g.in[2] = 0;
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "an empty image");
    /* Indices past 32 bits: P, K = kh*kw*C, an image's H*W*C, a dim. */
    g = geom2d(65536, 8, 256, 8, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "P = 2^32");
    g = geom2d(1, (int64_t)1 << 28, 3, 8, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "K = 9 * 2^28");
    g = geom2d(1, 1024, 2048, 8, 3, 1, 1, 1);
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "H*W*C = 2^32");
    g = geom2d(1, 8, 3, 8, 3, 1, 1, 1);
    g.in[2] = (int64_t)1 << 30;
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "a row of 2^30");
    g = geom2d(1, 8, 5, 8, 3, 1, 1, (int64_t)1 << 29);
    g.out[1] = g.out[2] = 1;
    g.pad_begin[1] = g.pad_begin[2] = (int64_t)1 << 29;
    cr_expect(!eng_nn_conv_implicit_gemm_fits(&g, ENG_DT_FLOAT16), "a kernel extent of 2^30");
}
