/* gemm.h -- flatserve's single-precision GEMM for the CPU kernels (MatMul,
 * Gemm, Einsum, Conv, ConvTranspose): C = alpha * op(A) x op(B), or C +=,
 * row-major, computed so that every output element's bits depend only on
 * its own row of op(A) and column of op(B).
 *
 * Why not OpenBLAS. The project prefers a well-kept library to hand-written
 * code, and the engine used OpenBLAS's cblas_sgemm until this GEMM. But
 * OpenBLAS's result for one element depends on where the element sits in its
 * register tile: measured with OpenBLAS 0.3.21 (Debian 12, Zen kernels) on an
 * AMD EPYC (Zen 3), A [1000, 512] with 1000 identical rows times a random
 * B [512, 169] gives 520 rows of C that differ from row 0 by 1 ulp (rows
 * 6-11 of every 12-row tile), with beta 0 and beta 1 alike; the transposed
 * product shows it along columns. Two consequences: ONNX's squeezenet failed
 * conformance (its 1000 output channels give logits near 1e10 that must be
 * exactly equal; softmax then gave 1/984 instead of 1/1000), and a serving
 * engine's answer for one request depended on its row in a dynamically
 * formed batch ("batch variance"). OpenBLAS has no switch for this (ONNX
 * Runtime's MLAS does not behave this way), and an element's reduction
 * order is a property of the micro-kernels, so it cannot be fixed around
 * the library: the 570 lines of gemm.c buy a stated guarantee.
 *
 * THE GUARANTEE. For every i, j, with a(p) = op(A)[i][p] and b(p) =
 * op(B)[p][j] (times alpha, rounded once, when alpha != 1):
 *
 *     c = accumulate ? C[i][j] : +0.0f;
 *     for p = 0, 1, ..., k - 1:  c = fmaf(a(p), b(p), c);   (one rounding each)
 *     C[i][j] = c;
 *
 * exactly: the same operations in the same order whatever i, j, m, n, the
 * leading dimensions, the transposes, the thread count, the register tile
 * or cache block the element lands in, and whichever of the paths below
 * computed it. The cache blocking over k stores the running c into C
 * between blocks and reloads it, which is exact, so it changes nothing.
 * Consequently identical rows of op(A) give bitwise identical rows of C, a
 * row's result does not depend on the rows batched with it, and the result
 * is the same on every CPU that rounds IEEE single precision in the default
 * mode: the AVX-512, AVX2+FMA and portable kernels all compute this one
 * sequence (fmaf is correctly rounded by definition; only speed differs).
 * It does not hold across changes of the floating-point environment (flush-
 * to-zero, rounding mode). Threads split only the m x n output, never k.
 * Accuracy: one serial chain per element, the order OpenBLAS's kernels use
 * within a k block; the usual bound |error| <= k u sum |a b| (u = 2^-24).
 *
 * Speed: Goto/BLIS-style blocking -- op(B) packed into KC x NR panels in
 * the caller's scratch (or, for small m, read in place or packed panel by
 * panel on the stack), op(A) read in place by register-tile micro-kernels
 * (AVX-512 12 x 32, AVX2+FMA 6 x 16, portable 4 x 16) picked at run time
 * from the CPU; gemm.c's header has the algorithm. bench/gemm_bench.c
 * measures it against OpenBLAS.
 *
 * Threading: eng_gemm_run and eng_gemm_run_batch may be called from any
 * thread, concurrently; they run their work through eng_parallel_for
 * (engine/cpu/parallel.h). */
#ifndef FS_ENGINE_CPU_GEMM_H
#define FS_ENGINE_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One product. Every field is read: set alpha to 1 for a plain product.
 * op(A) is [m, k]: A is stored [m, k], or [k, m] when trans_a, with row
 * stride lda (>= its column count). op(B) is [k, n]: B is [k, n], or [n, k]
 * when trans_b, row stride ldb. C is [m, n] with row stride ldc >= n and
 * must not overlap A or B. The pointers are borrowed for the call; any of
 * them may be NULL where the dims leave nothing to read or write. */
typedef struct eng_gemm {
    int64_t m, n, k;
    const float *a;
    int64_t lda;
    bool trans_a;
    const float *b;
    int64_t ldb;
    bool trans_b;
    float *c;
    int64_t ldc;
    float alpha;        /* multiplies op(B)'s elements (see THE GUARANTEE) */
    bool accumulate;    /* C += alpha op(A) op(B); else C = (C is not read) */
} eng_gemm_t;

/* The workspace eng_gemm_run wants for an m x n x k product: room for the
 * packed op(B) (at most about 8 MiB, more only when k exceeds 8192), or 0
 * when m is small enough to read B in place. Depends only on the dims and
 * the kernels in use. Cannot fail. */
size_t eng_gemm_scratch_bytes(int64_t m, int64_t n, int64_t k);

/* Computes g (see THE GUARANTEE) with up to n_threads threads. `scratch`
 * (borrowed, any alignment) should hold eng_gemm_scratch_bytes(g->m, g->n,
 * g->k) bytes; with less (or NULL) it packs op(B) panel by panel on the
 * stack instead: the same bits, slower for large m. m or n of 0 writes
 * nothing; k of 0 zeroes C unless accumulating. Uses about 40 KiB of the
 * stack of each thread it runs on. Cannot fail. */
void eng_gemm_run(const eng_gemm_t *g, int n_threads, void *scratch, size_t scratch_bytes);

/* A batch of products of one shape (eng_gemm_run_batch): product t, for t
 * in [0, dims[0] x ... x dims[rank - 1]) in row-major order over the dims,
 * is the template's with A, B and C moved by sum_d index_d(t) x
 * a_stride[d] (b_stride, c_stride) elements. A stride of 0 broadcasts an
 * operand; the products' C must not overlap each other, A or B. */
#define ENG_GEMM_BATCH_MAX_RANK 8
typedef struct eng_gemm_batch {
    int rank;                                  /* 0..ENG_GEMM_BATCH_MAX_RANK; 0: one product */
    int64_t dims[ENG_GEMM_BATCH_MAX_RANK];
    int64_t a_stride[ENG_GEMM_BATCH_MAX_RANK];
    int64_t b_stride[ENG_GEMM_BATCH_MAX_RANK];
    int64_t c_stride[ENG_GEMM_BATCH_MAX_RANK];
} eng_gemm_batch_t;

/* Computes every product of the batch (each exactly as gemm.h's guarantee
 * says: the same bits eng_gemm_run gives it alone) in one parallel pass
 * over all of their tiles, with up to n_threads threads and no scratch: for
 * many small products (attention's per-head MatMuls), where one
 * eng_gemm_run per product pays its planning and thread handoff each time.
 * `g` and `batch` are borrowed for the call. Uses about 40 KiB of the stack
 * of each thread it runs on. Cannot fail. */
void eng_gemm_run_batch(const eng_gemm_t *g, const eng_gemm_batch_t *batch, int n_threads);

/* The kernel families. AUTO is the best the CPU has: AVX512 (AVX-512F),
 * else AVX2 (AVX2 and FMA), else PORTABLE (plain C with fmaf). */
typedef enum eng_gemm_isa {
    ENG_GEMM_ISA_AUTO = 0,
    ENG_GEMM_ISA_PORTABLE,
    ENG_GEMM_ISA_AVX2,
    ENG_GEMM_ISA_AVX512,
} eng_gemm_isa_t;

/* Makes later eng_gemm_run and eng_gemm_scratch_bytes calls, on every
 * thread, use `isa` -- for tests and benchmarks comparing the kernels; the
 * engine never calls it. A call already running keeps its kernels. 0, or
 * FS_ENOTSUP (this CPU or build lacks it; nothing changes). */
int eng_gemm_isa_set(eng_gemm_isa_t isa);

/* The kernels in use: "avx512", "avx2" or "portable". Never NULL. */
const char *eng_gemm_isa_name(void);

#ifdef __cplusplus
}
#endif
#endif
