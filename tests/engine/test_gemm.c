/* test_gemm.c -- tests for engine/cpu/gemm.c: results equal, bit for bit,
 * the fmaf sequence gemm.h promises (and a double-precision reference within
 * its error bound) on shapes at every blocking edge, with transposes, leading
 * dimensions, alpha and accumulate; the invariance that promise buys
 * (identical rows give identical rows, a row's bits do not depend on the
 * rows around it, the thread count, the scratch or the kernels); and the
 * same through the MatMul and Conv kernels, as squeezenet needs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/gemm.h"
#include "engine/op.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* gemm.c's blocking, whose edges the shapes below straddle: register tiles
 * 4/6/12 x 16/32 (portable, AVX2, AVX-512); B read in place for up to 4
 * tiles of rows (16/24/48), else packed; KC 256; row blocks of MC 96 (with
 * threads, m > 96 may share one packing pass); NC 256; packed stripes of
 * 2 Mi floats of B. */

/* Deterministic values in [lo, hi). */
static uint64_t rng_state;

static float uniform(float lo, float hi)
{
    rng_state = rng_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return lo + (hi - lo) * (float)((double)(rng_state >> 40) / (double)(UINT64_C(1) << 24));
}

static float *random_floats(size_t n, float lo, float hi)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform(lo, hi);
    return v;
}

/* A product's operands with their storage, C's initial value kept in c0. */
typedef struct operands {
    eng_gemm_t g;
    float *a, *b, *c, *c0;
} operands_t;

/* Random A, B and C for op(A) [m, k] x op(B) [k, n]; every leading
 * dimension `pad` floats wider than it must be. */
static void operands_init(operands_t *o, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                          int64_t pad)
{
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb);
    size_t nc = (size_t)(m * ldc);
    o->a = random_floats(na, -1.0f, 1.0f);
    o->b = random_floats(nb, -1.0f, 1.0f);
    o->c0 = random_floats(nc, -1.0f, 1.0f);
    o->c = malloc((nc ? nc : 1) * sizeof *o->c);
    cr_assert_not_null(o->c);
    memcpy(o->c, o->c0, nc * sizeof *o->c);
    o->g = (eng_gemm_t){.m = m, .n = n, .k = k, .a = o->a, .lda = lda, .trans_a = ta, .b = o->b,
                        .ldb = ldb, .trans_b = tb, .c = o->c, .ldc = ldc, .alpha = 1.0f};
}

static void operands_fini(operands_t *o)
{
    free(o->a);
    free(o->b);
    free(o->c);
    free(o->c0);
}

/* Runs g with n_threads threads and `quarters` quarters of the scratch it
 * asks for (0: none; less than 4 may take another path, same bits). */
static void gemm_call_scratch(const eng_gemm_t *g, int n_threads, int quarters)
{
    size_t bytes = eng_gemm_scratch_bytes(g->m, g->n, g->k) / 4 * (size_t)quarters;
    void *scratch = bytes ? malloc(bytes) : NULL;
    cr_assert(!bytes || scratch);
    eng_gemm_run(g, n_threads, scratch, bytes);
    free(scratch);
}

/* Runs g with the scratch it asks for (or none) and n_threads threads. */
static void gemm_call(const eng_gemm_t *g, int n_threads, bool with_scratch)
{
    gemm_call_scratch(g, n_threads, with_scratch ? 4 : 0);
}

static float op_a(const eng_gemm_t *g, int64_t i, int64_t p)
{
    return g->trans_a ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
}

static float op_b(const eng_gemm_t *g, int64_t p, int64_t j)
{
    return g->trans_b ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
}

/* gemm.h's promise for C[i][j], from C's initial value c0. */
static float promised(const eng_gemm_t *g, float c0, int64_t i, int64_t j)
{
    float acc = g->accumulate ? c0 : 0.0f;
    for (int64_t p = 0; p < g->k; p++) {
        float b = op_b(g, p, j);
        if (g->alpha != 1.0f)
            b = g->alpha * b;
        acc = fmaf(op_a(g, i, p), b, acc);
    }
    return acc;
}

static bool same_bits(float x, float y)
{
    return memcmp(&x, &y, sizeof x) == 0;
}

/* The index after i when sampling every step-th of [0, end) and the last. */
static int64_t next_sample(int64_t i, int64_t step, int64_t end)
{
    return i == end - 1 ? end : i + step < end ? i + step : end - 1;
}

/* Checks every `step`-th row and column (and the last ones) of o's C: the
 * promised bits, within the error bound of a double reference, and the
 * padding past n untouched. */
static void expect_promise(const operands_t *o, int64_t step, const char *what)
{
    const eng_gemm_t *g = &o->g;
    int bad = 0;
    for (int64_t i = 0; i < g->m; i = next_sample(i, step, g->m))
        for (int64_t j = 0; j < g->ldc; j = next_sample(j, step, g->ldc)) {
            float got = g->c[i * g->ldc + j], c0 = o->c0[i * g->ldc + j];
            if (j >= g->n) {
                if (!same_bits(got, c0) && bad++ < 3)
                    cr_expect(false, "%s: padding C[%lld][%lld] written", what, (long long)i,
                              (long long)j);
                continue;
            }
            float want = promised(g, c0, i, j);
            double ref = g->accumulate ? c0 : 0.0, mag = fabs(ref);
            for (int64_t p = 0; p < g->k; p++) {
                double t = (double)g->alpha * op_a(g, i, p) * op_b(g, p, j);
                ref += t;
                mag += fabs(t);
            }
            double bound = 2.0 * (double)(g->k + 2) * ldexp(mag, -24) + 1e-30;
            bool ok = same_bits(got, want) && fabs(got - ref) <= bound;
            if (!ok && bad++ < 3)
                cr_expect(ok, "%s: C[%lld][%lld] = %.9g (bits %s the promise %.9g), double "
                              "reference %.9g, bound %.3g",
                          what, (long long)i, (long long)j, got,
                          same_bits(got, want) ? "equal" : "differ from", want, ref, bound);
        }
    cr_expect_eq(bad, 0, "%s: %d elements wrong", what, bad);
}

TestSuite(engine_gemm);

/* Every shape at the blocking edges, with and without transposes, alpha and
 * accumulate, leading dimensions, scratch and threads, with the kernels in
 * use. */
static void expect_promise_at_every_blocking_edge(void)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {1, 17, 3},      {3, 1, 40},      {5, 15, 7},     {6, 16, 256},
        {7, 17, 257},  {11, 31, 255},   {12, 32, 1},     {13, 33, 513},  {4, 64, 300},
        {47, 1, 64},   {48, 48, 48},    {49, 100, 30},   {95, 257, 33},  {96, 40, 20},
        {97, 257, 33}, {130, 255, 257}, {100, 513, 9},   {200, 20, 70},  {2, 600, 40},
        {60, 33, 1000},
    };
    rng_state = 1;
    for (size_t s = 0; s < N_OF(shapes); s++)
        for (int variant = 0; variant < 8; variant++) {
            bool ta = variant & 1, tb = variant & 2, acc = variant & 4;
            operands_t o;
            operands_init(&o, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, variant % 3);
            o.g.accumulate = acc;
            o.g.alpha = variant == 5 ? -0.75f : 1.0f;
            gemm_call(&o.g, 1 + (int)(s % 3), s % 2 == 0);
            char what[128];
            snprintf(what, sizeof what, "%s: %lld x %lld x %lld%s%s%s alpha %g",
                     eng_gemm_isa_name(), (long long)shapes[s][0], (long long)shapes[s][1],
                     (long long)shapes[s][2], ta ? " A'" : "", tb ? " B'" : "",
                     acc ? " +=" : "", o.g.alpha);
            expect_promise(&o, 1, what);
            operands_fini(&o);
        }
}

Test(engine_gemm, keeps_its_promise_at_every_blocking_edge)
{
    expect_promise_at_every_blocking_edge();
}

Test(engine_gemm, portable_kernels_keep_it_too)
{
    cr_assert_eq(eng_gemm_isa_set(ENG_GEMM_ISA_PORTABLE), 0);
    expect_promise_at_every_blocking_edge();
    cr_assert_eq(eng_gemm_isa_set(ENG_GEMM_ISA_AUTO), 0);
}

Test(engine_gemm, keeps_its_promise_across_packed_stripes)
{
    /* k 4096: a packed stripe holds 512 columns, so n 1100 takes three. */
    rng_state = 2;
    for (int tb = 0; tb < 2; tb++) {
        operands_t o;
        operands_init(&o, 101, 1100, 4096, false, tb, 1);
        gemm_call(&o.g, 2, true);
        expect_promise(&o, 13, tb ? "101 x 1100 x 4096 B'" : "101 x 1100 x 4096");
        operands_fini(&o);
    }
}

Test(engine_gemm, empty_dims_write_nothing_or_zeros)
{
    float c[6] = {1, 2, 3, 4, 5, 6};
    const float a[6] = {1, 1, 1, 1, 1, 1};
    eng_gemm_t g = {.m = 0, .n = 3, .k = 2, .a = NULL, .lda = 2, .b = a, .ldb = 3, .c = c,
                    .ldc = 3, .alpha = 1.0f};
    eng_gemm_run(&g, 2, NULL, 0);
    g = (eng_gemm_t){.m = 2, .n = 0, .k = 2, .a = a, .lda = 2, .b = NULL, .ldb = 1, .c = c,
                     .ldc = 3, .alpha = 1.0f};
    eng_gemm_run(&g, 2, NULL, 0);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(c[i], (float)(i + 1), "m or n of 0 wrote C[%d]", i);
    /* k 0 with accumulate leaves C; without, zeroes [m, n] and not the padding. */
    g = (eng_gemm_t){.m = 2, .n = 2, .k = 0, .a = NULL, .lda = 1, .b = NULL, .ldb = 2, .c = c,
                     .ldc = 3, .alpha = 1.0f, .accumulate = true};
    eng_gemm_run(&g, 1, NULL, 0);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(c[i], (float)(i + 1), "k 0 accumulating changed C[%d]", i);
    g.accumulate = false;
    eng_gemm_run(&g, 1, NULL, 0);
    const float want[6] = {0, 0, 3, 0, 0, 6};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(c[i], want[i], "k 0: C[%d] = %g, want %g", i, c[i], want[i]);
    cr_expect_eq(eng_gemm_scratch_bytes(0, 10, 10), 0);
    cr_expect_eq(eng_gemm_scratch_bytes(1000, 10, 0), 0);
}

Test(engine_gemm, propagates_infinities_and_nans_per_element)
{
    rng_state = 3;
    operands_t o;
    operands_init(&o, 20, 40, 30, false, false, 0);
    o.a[2 * o.g.lda + 5] = INFINITY;
    o.a[7 * o.g.lda + 0] = NAN;
    o.b[3 * o.g.ldb + 17] = -INFINITY;
    gemm_call(&o.g, 2, false);
    for (int64_t i = 0; i < o.g.m; i++)
        for (int64_t j = 0; j < o.g.n; j++) {
            float got = o.g.c[i * o.g.ldc + j], want = promised(&o.g, 0, i, j);
            cr_expect(same_bits(got, want) || (isnan(got) && isnan(want)),
                      "C[%lld][%lld] = %g, want %g", (long long)i, (long long)j, got, want);
        }
    cr_expect(isnan(o.g.c[7 * o.g.ldc + 3]), "a NaN in row 7 of A gives NaN in row 7");
    cr_expect(isinf(o.g.c[0 * o.g.ldc + 17]) || isnan(o.g.c[0 * o.g.ldc + 17]));
    operands_fini(&o);
}

/* A [m, k] whose rows all equal `row`, times B: C's rows must be bitwise
 * equal. Values like squeezenet's last Conv: logits near 1e10. */
static void expect_identical_rows(int64_t m, int64_t n, int64_t k, const float *row,
                                  const float *b, bool trans, int n_threads)
{
    float *a = malloc((size_t)(m * k) * sizeof *a), *c = malloc((size_t)(m * n) * sizeof *c);
    cr_assert(a && c);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) /* A' stored [k, m] when trans */
            a[trans ? p * m + i : i * k + p] = row[p];
    eng_gemm_t g = {.m = m, .n = n, .k = k, .a = a, .lda = trans ? m : k, .trans_a = trans,
                    .b = b, .ldb = n, .c = c, .ldc = n, .alpha = 1.0f};
    gemm_call(&g, n_threads, true);
    int64_t differ = 0;
    for (int64_t i = 1; i < m; i++)
        differ += memcmp(c + i * n, c, (size_t)n * sizeof *c) != 0;
    cr_expect_eq(differ, 0, "m %lld%s, %d threads: %lld rows differ from row 0", (long long)m,
                 trans ? " (A')" : "", n_threads, (long long)differ);
    free(a);
    free(c);
}

Test(engine_gemm, identical_rows_of_a_give_identical_rows_of_c_for_every_m)
{
    const int64_t n = 169, k = 512;
    rng_state = 4;
    float *row = random_floats((size_t)k, -50.0f, 50.0f);
    float *b = random_floats((size_t)(k * n), 0.0f, 1e6f);
    for (int64_t m = 1; m <= 110; m++)
        expect_identical_rows(m, n, k, row, b, m % 2 == 0, 1 + (int)(m % 4));
    expect_identical_rows(1000, n, k, row, b, false, 2);
    free(row);
    free(b);
}

Test(engine_gemm, identical_columns_of_b_give_identical_columns_of_c)
{
    const int64_t m = 40, n = 300, k = 257;
    rng_state = 5;
    float *col = random_floats((size_t)k, -1.0f, 1.0f);
    for (int tb = 0; tb < 2; tb++) {
        operands_t o;
        operands_init(&o, m, n, k, false, tb, 0);
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++)
                o.b[tb ? j * o.g.ldb + p : p * o.g.ldb + j] = col[p];
        gemm_call(&o.g, 3, true);
        int64_t differ = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 1; j < n; j++)
                differ += !same_bits(o.c[i * o.g.ldc + j], o.c[i * o.g.ldc]);
        cr_expect_eq(differ, 0, "%s: %lld elements differ from column 0", tb ? "B'" : "B",
                     (long long)differ);
        operands_fini(&o);
    }
    free(col);
}

Test(engine_gemm, a_rows_bits_do_not_depend_on_the_rows_around_it)
{
    const int64_t m = 150, n = 70, k = 300;
    static const int64_t blocks[][2] = {{0, 1}, {5, 1}, {149, 1}, {7, 13}, {40, 60}, {1, 149},
                                        {90, 55}, {0, 49}, {11, 100}};
    rng_state = 6;
    for (int ta = 0; ta < 2; ta++) {
        operands_t o;
        operands_init(&o, m, n, k, ta, false, 0);
        gemm_call(&o.g, 1, true);
        float *sub = malloc((size_t)(m * n) * sizeof *sub);
        cr_assert_not_null(sub);
        for (size_t s = 0; s < N_OF(blocks); s++) {
            int64_t r0 = blocks[s][0], rows = blocks[s][1];
            eng_gemm_t g = o.g;
            g.m = rows;
            g.a = ta ? o.a + r0 : o.a + r0 * o.g.lda;
            g.c = sub;
            gemm_call(&g, 1 + (int)(s % 4), s % 2 == 1);
            cr_expect(memcmp(sub, o.c + r0 * n, (size_t)(rows * n) * sizeof *sub) == 0,
                      "rows [%lld, %lld)%s computed alone differ from the same rows of m %lld",
                      (long long)r0, (long long)(r0 + rows), ta ? " of A'" : "", (long long)m);
        }
        free(sub);
        operands_fini(&o);
    }
}

Test(engine_gemm, thread_counts_and_scratch_give_identical_bits)
{
    static const int64_t shapes[][3] = {{1000, 169, 512}, {64, 3136, 64}, {7, 1000, 300},
                                        {300, 40, 700}};
    rng_state = 7;
    for (size_t s = 0; s < N_OF(shapes); s++) {
        operands_t o;
        operands_init(&o, shapes[s][0], shapes[s][1], shapes[s][2], s == 2, s == 3, 0);
        o.g.accumulate = s == 1;
        gemm_call(&o.g, 1, true);
        size_t bytes = (size_t)(o.g.m * o.g.ldc) * sizeof(float);
        float *first = malloc(bytes);
        cr_assert_not_null(first);
        memcpy(first, o.c, bytes);
        for (int t = 1; t <= 4; t++)
            for (int quarters = 0; quarters <= 4; quarters += quarters ? 1 : 3) {
                memcpy(o.c, o.c0, bytes);
                gemm_call_scratch(&o.g, t, quarters);
                cr_expect(memcmp(o.c, first, bytes) == 0,
                          "%lld x %lld x %lld: %d threads, %d/4 of the scratch differ from 1 "
                          "thread",
                          (long long)o.g.m, (long long)o.g.n, (long long)o.g.k, t, quarters);
            }
        free(first);
        operands_fini(&o);
    }
}

/* eng_gemm_run_batch over a [2, 3] batch whose B broadcasts along the first
 * dim: every product's C has the promised bits (so those eng_gemm_run gives
 * it alone), whatever the thread count, for the attention shapes (B one
 * panel wide, B small enough to read in place) and for edges, transposes,
 * alpha and accumulation. */
Test(engine_gemm, batched_products_keep_the_promise_of_each_product)
{
    static const int64_t shapes[][3] = {{64, 64, 16}, {64, 16, 64}, {7, 33, 300},
                                        {130, 70, 20}, {200, 300, 40}};
    rng_state = 11;
    for (size_t s = 0; s < N_OF(shapes); s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        const bool ta = s == 2, tb = s == 3;
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        const int64_t a_len = m * k, b_len = k * n, c_len = m * n;
        float *a = random_floats((size_t)(6 * a_len), -1.0f, 1.0f);
        float *b = random_floats((size_t)(3 * b_len), -1.0f, 1.0f);
        float *c0 = random_floats((size_t)(6 * c_len), -1.0f, 1.0f);
        float *c = malloc((size_t)(6 * c_len) * sizeof *c);
        cr_assert_not_null(c);
        eng_gemm_t g = {.m = m, .n = n, .k = k, .a = a, .lda = lda, .trans_a = ta, .b = b,
                        .ldb = ldb, .trans_b = tb, .c = c, .ldc = n,
                        .alpha = s == 4 ? 0.375f : 1.0f, .accumulate = s == 1};
        const eng_gemm_batch_t bt = {.rank = 2, .dims = {2, 3}, .a_stride = {3 * a_len, a_len},
                                     .b_stride = {0, b_len}, .c_stride = {3 * c_len, c_len}};
        for (int t = 1; t <= 3; t++) {
            memcpy(c, c0, (size_t)(6 * c_len) * sizeof *c);
            eng_gemm_run_batch(&g, &bt, t);
            int64_t bad = 0;
            for (int64_t q = 0; q < 6; q++) {
                eng_gemm_t one = g;
                one.a = a + q * a_len;
                one.b = b + q % 3 * b_len;
                one.c = c + q * c_len;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++)
                        bad += !same_bits(one.c[i * n + j],
                                          promised(&one, c0[q * c_len + i * n + j], i, j));
            }
            cr_expect_eq(bad, 0, "%lld x %lld x %lld, %d threads: %lld elements differ from "
                         "the promise", (long long)m, (long long)n, (long long)k, t,
                         (long long)bad);
        }
        free(a);
        free(b);
        free(c0);
        free(c);
    }
}

Test(engine_gemm, every_kernel_family_gives_the_same_bits)
{
    static const eng_gemm_isa_t isas[] = {ENG_GEMM_ISA_PORTABLE, ENG_GEMM_ISA_AVX2,
                                          ENG_GEMM_ISA_AVX512};
    rng_state = 8;
    operands_t o;
    operands_init(&o, 61, 45, 270, false, true, 2);
    o.g.accumulate = true;
    gemm_call(&o.g, 2, true);
    size_t bytes = (size_t)(o.g.m * o.g.ldc) * sizeof(float);
    float *first = malloc(bytes);
    cr_assert_not_null(first);
    memcpy(first, o.c, bytes);
    const char *auto_name = eng_gemm_isa_name();
    int ran = 0;
    for (size_t i = 0; i < N_OF(isas); i++) {
        if (eng_gemm_isa_set(isas[i]) != 0) {
            cr_log_info("GEMM kernels %zu not on this CPU (%s): not compared", i, fs_errmsg());
            continue;
        }
        ran++;
        memcpy(o.c, o.c0, bytes);
        gemm_call(&o.g, 2, true);
        cr_expect(memcmp(o.c, first, bytes) == 0, "%s kernels differ from %s",
                  eng_gemm_isa_name(), auto_name);
    }
    cr_expect_geq(ran, 1, "the portable kernels always run");
    cr_expect_eq(eng_gemm_isa_set(ENG_GEMM_ISA_AUTO), 0);
    cr_expect_str_eq(eng_gemm_isa_name(), auto_name);
    free(first);
    operands_fini(&o);
}

/* --- through the kernels: what squeezenet and batching need ---------------- */

/* Runs op on `in` (n_threads threads) and returns output 0's data, which
 * the caller frees with call_free(c). */
static const float *op_run(call_t *c, const char *op, const eng_attr_t *attrs, int n_attrs,
                           const eng_tensor_t *const *in, int n_in, int n_threads)
{
    int rc = call_infer_at(c, op, 21, attrs, n_attrs, in, n_in, 1);
    cr_assert_eq(rc, 0, "%s infer: %s", op, fs_errmsg());
    c->ctx.n_threads = n_threads;
    cr_assert_eq(call_run(c), 0, "%s run: %s", op, fs_errmsg());
    return c->outs[0].data;
}

Test(engine_gemm, conv_with_identical_filters_gives_identical_channels)
{
    /* squeezenet's conv10: many output channels with the same filter. */
    const int64_t cin = 32, cout = 100, hw = 13;
    rng_state = 9;
    float *x = random_floats((size_t)(cin * hw * hw), 0.0f, 30.0f);
    float *filt = random_floats((size_t)(cin * 9), -1.0f, 1.0f);
    float *w = malloc((size_t)(cout * cin * 9) * sizeof *w), *bias = malloc(cout * sizeof *bias);
    cr_assert(w && bias);
    for (int64_t o = 0; o < cout; o++)
        bias[o] = 0.25f;
    eng_tensor_t xt = tensor(ENG_DT_FLOAT, x, 4, DIMS(1, cin, hw, hw));
    eng_tensor_t bt = tensor(ENG_DT_FLOAT, bias, 1, DIMS(cout));
    for (int64_t kernel = 1; kernel <= 3; kernel += 2) {
        int64_t taps = cin * kernel * kernel;
        for (int64_t o = 0; o < cout; o++)
            memcpy(w + o * taps, filt, (size_t)taps * sizeof *w);
        eng_tensor_t wt = tensor(ENG_DT_FLOAT, w, 4, DIMS(cout, cin, kernel, kernel));
        const eng_tensor_t *in[] = {&xt, &wt, &bt};
        eng_attr_t pads = attr_ints("pads", DIMS(1, 1, 1, 1), 4);
        call_t c;
        const float *y = op_run(&c, "Conv", &pads, kernel == 3, in, 3, 2);
        int64_t plane = hw * hw, differ = 0;
        for (int64_t o = 1; o < cout; o++)
            differ += memcmp(y + o * plane, y, (size_t)plane * sizeof *y) != 0;
        cr_expect_eq(differ, 0, "%lldx%lld Conv: %lld of %lld channels differ from channel 0",
                     (long long)kernel, (long long)kernel, (long long)differ, (long long)cout);
        call_free(&c);
    }
    free(x);
    free(filt);
    free(w);
    free(bias);
}

Test(engine_gemm, matmul_rows_do_not_depend_on_the_batch_they_are_in)
{
    const int64_t k = 300, n = 70;
    rng_state = 10;
    float *b = random_floats((size_t)(k * n), -1.0f, 1.0f);
    float *a = random_floats((size_t)(40 * k), -1.0f, 1.0f);
    eng_tensor_t bt = tensor(ENG_DT_FLOAT, b, 2, DIMS(k, n));
    float alone[40][70];
    for (int64_t r = 0; r < 40; r++) {
        eng_tensor_t at = tensor(ENG_DT_FLOAT, a + r * k, 2, DIMS(1, k));
        const eng_tensor_t *in[] = {&at, &bt};
        call_t c;
        memcpy(alone[r], op_run(&c, "MatMul", NULL, 0, in, 2, 1), sizeof alone[r]);
        call_free(&c);
    }
    static const int64_t batches[][2] = {{0, 40}, {3, 8}, {17, 23}, {39, 1}};
    for (size_t s = 0; s < N_OF(batches); s++) {
        int64_t r0 = batches[s][0], rows = batches[s][1];
        eng_tensor_t at = tensor(ENG_DT_FLOAT, a + r0 * k, 3, DIMS(rows, 1, k));
        const eng_tensor_t *in[] = {&at, &bt};
        call_t c;
        const float *y = op_run(&c, "MatMul", NULL, 0, in, 2, 1 + (int)s);
        for (int64_t r = 0; r < rows; r++)
            cr_expect(memcmp(y + r * n, alone[r0 + r], sizeof alone[0]) == 0,
                      "row %lld in a batch of %lld differs from the same request alone",
                      (long long)(r0 + r), (long long)rows);
        call_free(&c);
    }
    free(a);
    free(b);
}
