/* gemm.c -- the CPU engine's SGEMM (gemm.h states the guarantee and why
 * flatserve has its own).
 *
 * Algorithm (Goto/BLIS blocking). The m x n output is cut into tiles, the
 * tasks of one eng_parallel_for; k is never split. A task walks k in blocks
 * of KC, its rows in blocks of MC, and its columns in NR-wide panels of
 * op(B) ([kc][NR], alpha applied, zero past n); for each panel it runs the
 * micro-kernel on every MR x NR register tile of the row block, reading op(A)
 * in place (broadcasts need no layout, and a tile's rows, lda apart, are a
 * few sequential streams the prefetchers follow). A tile's accumulators
 * start from C (from +0 in the first k block unless accumulating), take one
 * FMA per p in increasing p, and are stored back to C. The B panels come
 * from
 *  - the caller's scratch, where op(B) is packed row by row across the
 *    panels (each row of B read in runs): by each task for its own NC
 *    columns, one k block at a time into a region it reuses (so the region
 *    stays in cache and B crosses DRAM once), or -- when row tiles share
 *    columns (m > MC and too few column tiles for the threads) -- by a
 *    parallel pass over every k block before the tasks run. Up to
 *    PACK_BYTES of columns (a stripe) at a time bound the scratch;
 *  - or, for at most IN_PLACE_TILES register tiles of rows, B itself when
 *    it is the panel (not transposed, alpha 1): reading B bounds such a
 *    product, and a copy would only add to it; else the panel packed on the
 *    task's stack (transposed through AVX registers when B is transposed).
 *    The stack panel also serves when the scratch is short. B is read in
 *    place by any number of tiles when its k block is small enough to stay
 *    in L1 (gemm_b_in_l1).
 * A batch of products (eng_gemm_run_batch: attention's per-head MatMuls)
 * is one eng_parallel_for over every (product, row block, column tile):
 * the tasks are gemm_task's on the product's own eng_gemm_t, B's panels in
 * place or on the task's stack (no shared scratch), so a product of a batch
 * runs the very tile code a lone product runs, and no per-product planning
 * or thread handoff is paid for products of a few microseconds.
 * Edges run the full-tile arithmetic: a tile narrower than NR runs the
 * kernel on a copy of its C in an MR x NR buffer (the zero columns of B's
 * panel compute values that are dropped), and a tile with fewer than MR rows
 * runs the kernel instance made for that row count. So every element gets
 * exactly the fmaf sequence of gemm.h whatever path, tile or thread.
 *
 * Micro-kernels: one body (GEMM_DEFINE_KERNEL) compiled for AVX-512 (zmm,
 * 12 x 32: 24 accumulators) and for AVX2+FMA (ymm, 6 x 16: 12 accumulators)
 * through target attributes, so the file builds with the project's flags
 * and the CPU picks at run time; a plain C 4 x 16 kernel with fmaf for other
 * CPUs. The compiler keeps each instance's accumulators in registers once
 * the row loop is unrolled (checked in the generated code: no spills). */
#include "engine/cpu/gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GEMM_X86 1
#else
#define GEMM_X86 0
#endif

/* k per block: a KC x NR panel of B (16 or 32 KiB) stays in L1 while the
 * tiles of a row block use it. Blocking in k changes no result (gemm.h). */
#define GEMM_KC 256
/* Rows per row block, a multiple of every MR: each B panel serves this
 * many rows from L1 (and their MC x KC of A, 96 KiB, stays in L2). */
#define GEMM_MC 96
/* B panels are read in place (no copy) by row blocks of at most this many
 * register tiles. */
#define GEMM_IN_PLACE_TILES 4
/* ... or by any number of tiles when one k block of B, read in place, is
 * at most this many bytes (it stays in L1; see gemm_b_in_l1). */
#define GEMM_IN_PLACE_BYTES (16 << 10)
/* Output columns per task: its KC x NC block of packed B (256 KiB) stays in
 * L2 while its row blocks pass over it. */
#define GEMM_NC 256
/* The packed copy of op(B) covers at most this many bytes of columns at a
 * time (but at least NC columns), which bounds the scratch. */
#define GEMM_PACK_BYTES ((size_t)8 << 20)
/* Rows of B copied across all the panels of a block before the next rows. */
#define GEMM_PACK_ROWS 16
#define GEMM_MR_MAX 12
#define GEMM_NR_MAX 32
#define GEMM_ALIGN 64

/* C [mr, NR] (row stride ldc) = (load_c ? C : 0) + A panel x B panel, one
 * fmaf per element and p: A's element (i, p) is a[i * rsa + p * csa], b is
 * [kc][NR] with row stride rsb. */
typedef void gemm_kernel_fn(int mr, int64_t kc, const float *a, int64_t rsa, int64_t csa,
                            const float *b, int64_t rsb, float *c, int64_t ldc, bool load_c);

/* dst [kc][nr] = the transpose of src's rows [0, nv) x columns [0, kc)
 * (row stride lds), zero in columns [nv, nr): a panel of op(B) = B'. */
typedef void gemm_pack_t_fn(const float *src, int64_t lds, int64_t kc, int64_t nv, int nr,
                            float *dst);

/* One kernel family. Immutable. */
typedef struct gemm_impl {
    eng_gemm_isa_t isa;
    const char *name;
    int mr, nr;               /* register tile; nr <= GEMM_NR_MAX, GEMM_MC % mr == 0 */
    gemm_kernel_fn *kernel;
    gemm_pack_t_fn *pack_t;
} gemm_impl_t;

/* The micro-kernel body for one instruction set: VEC holds W floats, the
 * tile is MR x 2W. NAME##_rows is the tile for a constant row count (the
 * loops over rows unroll and the accumulators become registers); NAME
 * dispatches a run-time row count to it. */
#define GEMM_ROWS_CASE(NAME, MR, R)                                                      \
    case R:                                                                              \
        if ((R) <= (MR))                                                                 \
            NAME##_rows((R) <= (MR) ? (R) : (MR), kc, a, rsa, csa, b, rsb, c, ldc, load_c); \
        return;
#define GEMM_DEFINE_KERNEL(NAME, TARGET, VEC, W, MR, ZERO, LOADU, STOREU, BCAST, FMA)    \
    __attribute__((target(TARGET), always_inline)) static inline void NAME##_rows(       \
        int mr, int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,    \
        int64_t rsb, float *c, int64_t ldc, bool load_c)                                 \
    {                                                                                    \
        VEC acc[MR][2];                                                                  \
        _Pragma("GCC unroll 16") for (int i = 0; i < mr; i++)                            \
        {                                                                                \
            acc[i][0] = load_c ? LOADU(c + i * ldc) : ZERO();                            \
            acc[i][1] = load_c ? LOADU(c + i * ldc + (W)) : ZERO();                      \
        }                                                                                \
        for (int64_t p = 0; p < kc; p++, a += csa, b += rsb) {                           \
            VEC b0 = LOADU(b), b1 = LOADU(b + (W));                                      \
            _Pragma("GCC unroll 16") for (int i = 0; i < mr; i++)                        \
            {                                                                            \
                VEC ai = BCAST(a + i * rsa);                                             \
                acc[i][0] = FMA(ai, b0, acc[i][0]);                                      \
                acc[i][1] = FMA(ai, b1, acc[i][1]);                                      \
            }                                                                            \
        }                                                                                \
        _Pragma("GCC unroll 16") for (int i = 0; i < mr; i++)                            \
        {                                                                                \
            STOREU(c + i * ldc, acc[i][0]);                                              \
            STOREU(c + i * ldc + (W), acc[i][1]);                                        \
        }                                                                                \
    }                                                                                    \
    __attribute__((target(TARGET))) static void NAME(                                    \
        int mr, int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,    \
        int64_t rsb, float *c, int64_t ldc, bool load_c)                                 \
    {                                                                                    \
        switch (mr) {                                                                    \
            GEMM_ROWS_CASE(NAME, MR, 1) GEMM_ROWS_CASE(NAME, MR, 2)                      \
            GEMM_ROWS_CASE(NAME, MR, 3) GEMM_ROWS_CASE(NAME, MR, 4)                      \
            GEMM_ROWS_CASE(NAME, MR, 5) GEMM_ROWS_CASE(NAME, MR, 6)                      \
            GEMM_ROWS_CASE(NAME, MR, 7) GEMM_ROWS_CASE(NAME, MR, 8)                      \
            GEMM_ROWS_CASE(NAME, MR, 9) GEMM_ROWS_CASE(NAME, MR, 10)                     \
            GEMM_ROWS_CASE(NAME, MR, 11) GEMM_ROWS_CASE(NAME, MR, 12)                    \
        }                                                                                \
    }

#if GEMM_X86
#define AVX2_BCAST(p) _mm256_broadcast_ss(p)
GEMM_DEFINE_KERNEL(gemm_avx2, "avx2,fma", __m256, 8, 6, _mm256_setzero_ps, _mm256_loadu_ps,
                   _mm256_storeu_ps, AVX2_BCAST, _mm256_fmadd_ps)
#define AVX512_BCAST(p) _mm512_set1_ps(*(p))
GEMM_DEFINE_KERNEL(gemm_avx512, "avx512f", __m512, 16, 12, _mm512_setzero_ps, _mm512_loadu_ps,
                   _mm512_storeu_ps, AVX512_BCAST, _mm512_fmadd_ps)
#endif

/* Columns [0, width) of dst [kc][ldd]: the transpose of src's rows [0, nv)
 * x columns [0, kc), then zeros. */
static void gemm_pack_t_cols(const float *src, int64_t lds, int64_t kc, int64_t nv,
                             int64_t width, float *restrict dst, int64_t ldd)
{
    for (int64_t j = 0; j < nv; j++)
        for (int64_t p = 0; p < kc; p++)
            dst[p * ldd + j] = src[j * lds + p];
    for (int64_t p = 0; nv < width && p < kc; p++)
        memset(dst + p * ldd + nv, 0, (size_t)(width - nv) * sizeof *dst);
}

/* The transposing copy, element by element. */
static void gemm_pack_t(const float *src, int64_t lds, int64_t kc, int64_t nv, int nr,
                        float *dst)
{
    gemm_pack_t_cols(src, lds, kc, nv, nr, dst, nr);
}

#if GEMM_X86
/* The transposing copy in 8 x 8 blocks through AVX registers (a tenth of
 * the instructions of the element-wise copy), the rest element-wise. Only
 * moves data, so it changes no result. */
__attribute__((target("avx"))) static void gemm_pack_t_avx(const float *src, int64_t lds,
                                                            int64_t kc, int64_t nv, int nr,
                                                            float *restrict dst)
{
    int64_t j = 0;
    for (; j + 8 <= nv; j += 8) {
        const float *s = src + j * lds;
        int64_t p = 0;
        for (; p + 8 <= kc; p += 8) {
            __m256 r0 = _mm256_loadu_ps(s + 0 * lds + p), r1 = _mm256_loadu_ps(s + 1 * lds + p);
            __m256 r2 = _mm256_loadu_ps(s + 2 * lds + p), r3 = _mm256_loadu_ps(s + 3 * lds + p);
            __m256 r4 = _mm256_loadu_ps(s + 4 * lds + p), r5 = _mm256_loadu_ps(s + 5 * lds + p);
            __m256 r6 = _mm256_loadu_ps(s + 6 * lds + p), r7 = _mm256_loadu_ps(s + 7 * lds + p);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
            float *d = dst + p * nr + j;
            _mm256_storeu_ps(d + 0 * nr, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + 1 * nr, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * nr, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * nr, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * nr, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * nr, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * nr, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * nr, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; p < kc; p++)
            for (int64_t jj = 0; jj < 8; jj++)
                dst[p * nr + j + jj] = s[jj * lds + p];
    }
    gemm_pack_t_cols(src + j * lds, lds, kc, nv - j, nr - j, dst + j, nr);
}
#endif

#define PORTABLE_MR 4
#define PORTABLE_NR 16

/* The kernel for CPUs without the above, in plain C. */
static void gemm_portable(int mr, int64_t kc, const float *a, int64_t rsa, int64_t csa,
                          const float *b, int64_t rsb, float *c, int64_t ldc, bool load_c)
{
    float acc[PORTABLE_MR][PORTABLE_NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            acc[i][j] = load_c ? c[i * ldc + j] : 0.0f;
    for (int64_t p = 0; p < kc; p++, a += csa, b += rsb)
        for (int i = 0; i < mr; i++) {
            const float ai = a[i * rsa];
            for (int j = 0; j < PORTABLE_NR; j++)
                acc[i][j] = fmaf(ai, b[j], acc[i][j]);
        }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < PORTABLE_NR; j++)
            c[i * ldc + j] = acc[i][j];
}

static const gemm_impl_t gemm_impls[] = {
    {.isa = ENG_GEMM_ISA_PORTABLE, .name = "portable", .mr = PORTABLE_MR, .nr = PORTABLE_NR,
     .kernel = gemm_portable, .pack_t = gemm_pack_t},
#if GEMM_X86
    {.isa = ENG_GEMM_ISA_AVX2, .name = "avx2", .mr = 6, .nr = 16, .kernel = gemm_avx2,
     .pack_t = gemm_pack_t_avx},
    {.isa = ENG_GEMM_ISA_AVX512, .name = "avx512", .mr = 12, .nr = 32, .kernel = gemm_avx512,
     .pack_t = gemm_pack_t_avx},
#endif
};

/* The family for `isa` (AUTO: the best), or NULL when this CPU lacks it. */
static const gemm_impl_t *gemm_impl_find(eng_gemm_isa_t isa)
{
#if GEMM_X86
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = __builtin_cpu_supports("avx512f");
    if (isa == ENG_GEMM_ISA_AUTO)
        isa = avx512 ? ENG_GEMM_ISA_AVX512 : avx2 ? ENG_GEMM_ISA_AVX2 : ENG_GEMM_ISA_PORTABLE;
    if ((isa == ENG_GEMM_ISA_AVX2 && !avx2) || (isa == ENG_GEMM_ISA_AVX512 && !avx512))
        return NULL;
#else
    if (isa == ENG_GEMM_ISA_AUTO)
        isa = ENG_GEMM_ISA_PORTABLE;
#endif
    for (size_t i = 0; i < sizeof gemm_impls / sizeof gemm_impls[0]; i++)
        if (gemm_impls[i].isa == isa)
            return &gemm_impls[i];
    return NULL;
}

/* The family in use; NULL until the first call picks AUTO's. */
static _Atomic(const gemm_impl_t *) gemm_impl_now;

static const gemm_impl_t *gemm_impl(void)
{
    const gemm_impl_t *im = atomic_load_explicit(&gemm_impl_now, memory_order_acquire);
    if (!im) {
        /* Racing first calls pick the same family: no harm in both storing. */
        im = gemm_impl_find(ENG_GEMM_ISA_AUTO);
        atomic_store_explicit(&gemm_impl_now, im, memory_order_release);
    }
    return im;
}

int eng_gemm_isa_set(eng_gemm_isa_t isa)
{
    const gemm_impl_t *im = gemm_impl_find(isa);
    if (!im)
        return fs_err(FS_ENOTSUP, "GEMM kernels %s: this CPU or build lacks them",
                      isa == ENG_GEMM_ISA_AVX512 ? "avx512" : isa == ENG_GEMM_ISA_AVX2 ? "avx2"
                                                                                       : "?");
    atomic_store_explicit(&gemm_impl_now, im, memory_order_release);
    return 0;
}

const char *eng_gemm_isa_name(void)
{
    return gemm_impl()->name;
}

static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Columns of op(B) one packed stripe holds: a multiple of NC, at least NC. */
static int64_t gemm_stripe_cols(int64_t n, int64_t k, int nr)
{
    int64_t cols = (int64_t)(GEMM_PACK_BYTES / sizeof(float)) / k / GEMM_NC * GEMM_NC;
    if (cols < GEMM_NC)
        cols = GEMM_NC;
    return min64(cols, ceil_div(n, nr) * nr);
}

/* Whether an m x n x k product packs op(B) into the scratch: unless few
 * enough rows read B in place (see gemm_b_panel). */
static bool gemm_wants_pack(const gemm_impl_t *im, int64_t m, int64_t n, int64_t k)
{
    return m > GEMM_IN_PLACE_TILES * im->mr && n > 0 && k > 0;
}

/* The scratch for packing a stripe of `stripe` columns: every k block when
 * row tiles may share it (m > MC), else one k block that each task reuses
 * for its own columns (see gemm_task). */
static size_t gemm_pack_bytes(int64_t m, int64_t k, int64_t stripe, bool all_k)
{
    int64_t rows = all_k && m > GEMM_MC ? k : min64(GEMM_KC, k);
    return (size_t)(rows * stripe) * sizeof(float) + GEMM_ALIGN;
}

size_t eng_gemm_scratch_bytes(int64_t m, int64_t n, int64_t k)
{
    const gemm_impl_t *im = gemm_impl();
    if (!gemm_wants_pack(im, m, n, k))
        return 0;
    return gemm_pack_bytes(m, k, gemm_stripe_cols(n, k, im->nr), true);
}

/* dst[0, nv) = src[0, nv), dst[nv, nr) = 0: one row of a B panel. The
 * common whole rows copy a constant size, which the compiler inlines. */
static inline void gemm_pack_b_row(float *restrict dst, const float *restrict src, int64_t nv,
                                   int nr)
{
    if (nv == 16 && nr == 16) {
        memcpy(dst, src, 16 * sizeof *dst);
    } else if (nv == 32 && nr == 32) {
        memcpy(dst, src, 32 * sizeof *dst);
    } else {
        memcpy(dst, src, (size_t)nv * sizeof *dst);
        memset(dst + nv, 0, (size_t)(nr - nv) * sizeof *dst);
    }
}

/* Packs alpha op(B) at rows [p0, p0 + kc) and columns [j0, j1) into
 * consecutive [kc][nr] panels at dst, zero past j1. B not transposed goes
 * GEMM_PACK_ROWS rows at a time across all the panels: long runs of each
 * row are read while the writes stay within a few lines per panel (twice
 * the speed of panel by panel, measured). Cannot fail. */
static void gemm_pack_b(const gemm_impl_t *im, const eng_gemm_t *g, int64_t p0, int64_t kc,
                        int64_t j0, int64_t j1, float *restrict dst)
{
    const int nr = im->nr;
    if (g->trans_b) {
        for (int64_t jc = j0; jc < j1; jc += nr)
            im->pack_t(g->b + jc * g->ldb + p0, g->ldb, kc, min64(nr, j1 - jc), nr,
                       dst + (jc - j0) * kc);
    } else {
        for (int64_t q = 0; q < kc; q += GEMM_PACK_ROWS)
            for (int64_t jc = j0; jc < j1; jc += nr)
                for (int64_t p = q; p < min64(q + GEMM_PACK_ROWS, kc); p++)
                    gemm_pack_b_row(dst + (jc - j0) * kc + p * nr,
                                    g->b + (p0 + p) * g->ldb + jc, min64(nr, j1 - jc), nr);
    }
    const float alpha = g->alpha;
    const int64_t len = ceil_div(j1 - j0, nr) * nr * kc;
    if (alpha != 1.0f)
        for (int64_t i = 0; i < len; i++)
            dst[i] = alpha * dst[i];
}

/* One register tile: C [mr, nv] at c, nv <= NR valid columns. Cannot fail. */
static void gemm_tile(const gemm_impl_t *im, int mr, int64_t nv, int64_t kc, const float *a,
                      int64_t rsa, int64_t csa, const float *b, int64_t rsb, float *c,
                      int64_t ldc, bool load_c)
{
    if (nv == im->nr) {
        im->kernel(mr, kc, a, rsa, csa, b, rsb, c, ldc, load_c);
        return;
    }
    _Alignas(GEMM_ALIGN) float t[GEMM_MR_MAX * GEMM_NR_MAX];
    const int nr = im->nr;
    for (int i = 0; load_c && i < mr; i++) {
        memcpy(t + i * nr, c + i * ldc, (size_t)nv * sizeof *t);
        memset(t + i * nr + nv, 0, (size_t)(nr - nv) * sizeof *t);
    }
    im->kernel(mr, kc, a, rsa, csa, b, rsb, t, nr, load_c);
    for (int i = 0; i < mr; i++)
        memcpy(c + i * ldc, t + i * nr, (size_t)nv * sizeof *t);
}

/* One eng_gemm_run: the product, the kernels, the stripe of columns [s0,
 * s1) being computed and its packed copy of alpha op(B) (bpack, n_pad
 * floats per row of a k block; NULL when B is not packed into the scratch),
 * and the task tiles over rows [0, m) x the stripe. */
typedef struct gemm_job {
    const eng_gemm_t *g;
    const gemm_impl_t *im;
    float *bpack;
    bool can_share;           /* bpack holds every k block: row tiles may share it */
    bool pack_in_task;        /* each task packs its own columns (one row tile) */
    int64_t s0, s1, n_pad;
    int64_t tile_m, tile_n, n_tile_cols;
    int64_t n_groups;         /* NC-column groups in the stripe (packing pass) */
} gemm_job_t;

/* The packing pass, when row tiles share columns: items are (k block, NC
 * columns) pairs of the stripe. */
static void gemm_pack_items(void *arg, int64_t begin, int64_t end)
{
    const gemm_job_t *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t p0 = t / j->n_groups * GEMM_KC, j0 = j->s0 + t % j->n_groups * GEMM_NC;
        int64_t kc = min64(GEMM_KC, j->g->k - p0);
        gemm_pack_b(j->im, j->g, p0, kc, j0, min64(j0 + GEMM_NC, j->s1),
                    j->bpack + p0 * j->n_pad + (j0 - j->s0) * kc);
    }
}

/* Whether B's rows of one k block, read in place, lie in few enough cache
 * lines to stay in L1 however many tiles read them: B exactly one panel
 * wide (its rows are then the packed layout), or a k block of at most
 * GEMM_IN_PLACE_BYTES (a small matrix: the attention products' K' and V).
 * A copy would then only add to the product. */
static bool gemm_b_in_l1(const gemm_impl_t *im, const eng_gemm_t *g, int64_t kc)
{
    return g->ldb == im->nr || kc * g->ldb * (int64_t)sizeof(float) <= GEMM_IN_PLACE_BYTES;
}

/* The panel of alpha op(B) at rows [p0, p0 + kc), columns [jc, jc + nv),
 * with its row stride in *rsb: in `block`, the packed panels from column c0
 * on, when B is packed; in B itself when that is the panel (B not
 * transposed, alpha 1, nv whole) and at most IN_PLACE_TILES tiles read it
 * (small m: reading B bounds the product, and a copy would only add to it);
 * else packed into buf. */
static const float *gemm_b_panel(const gemm_job_t *j, const float *block, int64_t c0, int64_t p0,
                                 int64_t kc, int64_t jc, int64_t nv, int64_t tiles, float *buf,
                                 int64_t *rsb)
{
    const eng_gemm_t *g = j->g;
    *rsb = j->im->nr;
    if (block)
        return block + (jc - c0) * kc;
    if (!g->trans_b && g->alpha == 1.0f && nv == j->im->nr &&
        (tiles <= GEMM_IN_PLACE_TILES || gemm_b_in_l1(j->im, g, kc))) {
        *rsb = g->ldb;
        return g->b + p0 * g->ldb + jc;
    }
    gemm_pack_b(j->im, g, p0, kc, jc, jc + nv, buf);
    return buf;
}

/* One task: output rows [r0, r1) x columns [c0, c1) (c0 - s0 a multiple of
 * NR), every k block. When it packs its own columns it reuses one k block's
 * region of the scratch (KC x its columns), which stays in cache: packing
 * into fresh memory for every k block would send the whole of B through
 * DRAM twice more. A is read in place. Cannot fail. */
static void gemm_task(const gemm_job_t *j, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    _Alignas(GEMM_ALIGN) float bpanel[GEMM_KC * GEMM_NR_MAX];
    const eng_gemm_t *g = j->g;
    const gemm_impl_t *im = j->im;
    const int mr = im->mr, nr = im->nr;
    const int64_t rsa = g->trans_a ? 1 : g->lda, csa = g->trans_a ? g->lda : 1;
    for (int64_t p0 = 0; p0 < g->k; p0 += GEMM_KC) {
        const int64_t kc = min64(GEMM_KC, g->k - p0);
        const bool load_c = g->accumulate || p0 > 0;
        float *block = NULL;
        if (j->pack_in_task) {
            block = j->bpack + (c0 - j->s0) * min64(GEMM_KC, g->k);
            gemm_pack_b(im, g, p0, kc, c0, c1, block);
        } else if (j->bpack) {
            block = j->bpack + p0 * j->n_pad + (c0 - j->s0) * kc;
        }
        for (int64_t i0 = r0; i0 < r1; i0 += GEMM_MC) {
            const int64_t i1 = min64(i0 + GEMM_MC, r1);
            for (int64_t jc = c0; jc < c1; jc += nr) {
                const int64_t nv = min64(nr, c1 - jc);
                int64_t rsb;
                const float *bp = gemm_b_panel(j, block, c0, p0, kc, jc, nv,
                                               ceil_div(i1 - i0, mr), bpanel, &rsb);
                for (int64_t i = i0; i < i1; i += mr)
                    gemm_tile(im, (int)min64(mr, i1 - i), nv, kc, g->a + i * rsa + p0 * csa,
                              rsa, csa, bp, rsb, g->c + i * g->ldc + jc, g->ldc, load_c);
            }
        }
    }
}

static void gemm_tasks(void *arg, int64_t begin, int64_t end)
{
    const gemm_job_t *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t r0 = t / j->n_tile_cols * j->tile_m, c0 = j->s0 + t % j->n_tile_cols * j->tile_n;
        gemm_task(j, r0, min64(r0 + j->tile_m, j->g->m), c0, min64(c0 + j->tile_n, j->s1));
    }
}

/* Cuts rows [0, m) x the stripe's columns into tiles: about four per
 * thread (one with one thread), NC columns wide so the block of B a task
 * works on stays in L2, narrower or split by rows only when that leaves too
 * few. Without the scratch, rows go in MC blocks (each packs its own
 * panels). Only speed depends on this. */
static void gemm_plan_tiles(gemm_job_t *j, int n_threads)
{
    const int64_t mr = j->im->mr, nr = j->im->nr, m = j->g->m;
    const int64_t want = n_threads > 1 ? 4 * (int64_t)n_threads : 1;
    const int64_t col_panels = ceil_div(j->s1 - j->s0, nr), row_panels = ceil_div(m, mr);
    int64_t row_tiles = j->bpack ? 1 : ceil_div(m, GEMM_MC);
    int64_t col_tiles = ceil_div(col_panels, GEMM_NC / nr);
    if (row_tiles * col_tiles < want && j->can_share)
        row_tiles = min64(row_panels, ceil_div(want, col_tiles));
    if (row_tiles * col_tiles < want)
        col_tiles = min64(col_panels, ceil_div(want, row_tiles));
    j->tile_m = ceil_div(row_panels, row_tiles) * mr;
    j->tile_n = ceil_div(col_panels, col_tiles) * nr;
    j->n_tile_cols = ceil_div(j->s1 - j->s0, j->tile_n);
    j->pack_in_task = j->bpack && j->tile_m >= m;
}

/* Runs the tiles of the job's stripe, after the packing pass when row
 * tiles share the packed columns. */
static void gemm_run_stripe(gemm_job_t *j, int n_threads)
{
    const eng_gemm_t *g = j->g;
    gemm_plan_tiles(j, n_threads);
    if (j->bpack && !j->pack_in_task) {
        j->n_groups = ceil_div(j->s1 - j->s0, GEMM_NC);
        eng_parallel_for(n_threads, ceil_div(g->k, GEMM_KC) * j->n_groups,
                         eng_parallel_grain(GEMM_KC * GEMM_NC), gemm_pack_items, j);
    }
    /* A tile counts m n k / 64 of the pool's work units: the kernels do 16
     * multiply-adds a cycle, and a thread handoff costs tens of microseconds
     * on a busy or virtual machine (measured: splitting products of ~30 us
     * made a 2-thread MLP slower), so a chunk is then at least 2 M
     * multiply-adds, some 50 us. */
    int64_t n_tiles = ceil_div(g->m, j->tile_m) * j->n_tile_cols;
    int64_t tile_work = j->tile_m * j->tile_n * g->k / 64;
    eng_parallel_for(n_threads, n_tiles, eng_parallel_grain(tile_work), gemm_tasks, j);
}

void eng_gemm_run(const eng_gemm_t *g, int n_threads, void *scratch, size_t scratch_bytes)
{
    if (g->m <= 0 || g->n <= 0)
        return;
    if (g->k <= 0) {
        for (int64_t i = 0; i < g->m && !g->accumulate; i++)
            memset(g->c + i * g->ldc, 0, (size_t)g->n * sizeof *g->c);
        return;
    }
    gemm_job_t j = {.g = g, .im = gemm_impl()};
    int64_t stripe = gemm_stripe_cols(g->n, g->k, j.im->nr);
    if (gemm_wants_pack(j.im, g->m, g->n, g->k) && scratch &&
        scratch_bytes >= gemm_pack_bytes(g->m, g->k, stripe, false)) {
        uintptr_t at = ((uintptr_t)scratch + GEMM_ALIGN - 1) & ~(uintptr_t)(GEMM_ALIGN - 1);
        j.bpack = (float *)at;
        j.can_share = g->m > GEMM_MC && scratch_bytes >= gemm_pack_bytes(g->m, g->k, stripe, true);
    } else {
        stripe = g->n;
    }
    for (j.s0 = 0; j.s0 < g->n; j.s0 += stripe) {
        j.s1 = min64(j.s0 + stripe, g->n);
        j.n_pad = ceil_div(j.s1 - j.s0, j.im->nr) * j.im->nr;
        gemm_run_stripe(&j, n_threads);
    }
}

/* One eng_gemm_run_batch: the template product, the batch, the kernels and
 * the cut of each product into tiles (rows in tile_m, columns in tile_n). */
typedef struct gemm_batch_job {
    const eng_gemm_t *g;
    const eng_gemm_batch_t *batch;
    const gemm_impl_t *im;
    int64_t tile_m, tile_n, row_tiles, col_tiles;
} gemm_batch_job_t;

/* Tasks: (product, row tile, column tile) in row-major order. Product t's
 * operands are the template's moved by the batch strides of t's index.
 * Each runs gemm_task on that product alone (B in place or packed on the
 * stack), the code of every other path. Cannot fail. */
static void gemm_batch_tasks(void *arg, int64_t begin, int64_t end)
{
    const gemm_batch_job_t *bj = arg;
    const eng_gemm_batch_t *bt = bj->batch;
    const int64_t per = bj->row_tiles * bj->col_tiles;
    for (int64_t t = begin; t < end; t++) {
        int64_t rem = t / per, a_off = 0, b_off = 0, c_off = 0;
        for (int d = bt->rank - 1; d >= 0; d--) {
            const int64_t at = rem % bt->dims[d];
            rem /= bt->dims[d];
            a_off += at * bt->a_stride[d];
            b_off += at * bt->b_stride[d];
            c_off += at * bt->c_stride[d];
        }
        eng_gemm_t g = *bj->g;
        g.a += a_off;
        g.b += b_off;
        g.c += c_off;
        const gemm_job_t j = {.g = &g, .im = bj->im, .s0 = 0, .s1 = g.n};
        const int64_t r0 = t % per / bj->col_tiles * bj->tile_m;
        const int64_t c0 = t % bj->col_tiles * bj->tile_n;
        gemm_task(&j, r0, min64(r0 + bj->tile_m, g.m), c0, min64(c0 + bj->tile_n, g.n));
    }
}

void eng_gemm_run_batch(const eng_gemm_t *g, const eng_gemm_batch_t *batch, int n_threads)
{
    int64_t count = 1;
    for (int d = 0; d < batch->rank; d++)
        count *= batch->dims[d];
    if (count <= 0 || g->m <= 0 || g->n <= 0)
        return;
    if (g->k <= 0) {
        eng_gemm_t one = *g;
        for (int64_t t = 0; t < count && !g->accumulate; t++) {
            int64_t rem = t, c_off = 0;
            for (int d = batch->rank - 1; d >= 0; d--) {
                c_off += rem % batch->dims[d] * batch->c_stride[d];
                rem /= batch->dims[d];
            }
            one.c = g->c + c_off;
            eng_gemm_run(&one, 1, NULL, 0);
        }
        return;
    }
    /* Tiles as gemm_plan_tiles cuts them without scratch: MC rows, NC
     * columns, smaller only when the whole batch gives too few tasks. */
    gemm_batch_job_t bj = {.g = g, .batch = batch, .im = gemm_impl()};
    const int64_t mr = bj.im->mr, nr = bj.im->nr;
    const int64_t want = n_threads > 1 ? 4 * (int64_t)n_threads : 1;
    const int64_t col_panels = ceil_div(g->n, nr), row_panels = ceil_div(g->m, mr);
    int64_t row_tiles = ceil_div(g->m, GEMM_MC), col_tiles = ceil_div(col_panels, GEMM_NC / nr);
    if (count * row_tiles * col_tiles < want)
        row_tiles = min64(row_panels, ceil_div(want, count * col_tiles));
    if (count * row_tiles * col_tiles < want)
        col_tiles = min64(col_panels, ceil_div(want, count * row_tiles));
    bj.tile_m = ceil_div(row_panels, row_tiles) * mr;
    bj.tile_n = ceil_div(col_panels, col_tiles) * nr;
    bj.row_tiles = ceil_div(g->m, bj.tile_m);
    bj.col_tiles = ceil_div(g->n, bj.tile_n);
    /* Work units as gemm_run_stripe counts them. */
    const int64_t tile_work = bj.tile_m * bj.tile_n * g->k / 64;
    eng_parallel_for(n_threads, count * bj.row_tiles * bj.col_tiles,
                     eng_parallel_grain(tile_work), gemm_batch_tasks, &bj);
}
