/* linalg_impl.h -- the shape analysis that the linalg op definitions
 * (engine/ops/linalg.c) and every device's kernels share: MatMul's batch
 * broadcasting, Einsum's parsed equation and its reading as a batched GEMM.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_LINALG_IMPL_H
#define FS_ENGINE_OPS_LINALG_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/unary_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MatMul of A [..., M, K] and B [..., K, N] with numpy's rules: a 1-D A is
 * [1, K] and a 1-D B is [K, 1] (the added dim is dropped from the output),
 * and the batch dims broadcast. A node with trans_b set (graph.h: a MatMul
 * the loader rewrote) holds B as [..., N, K], each matrix's transpose; B
 * then has rank >= 2. */
typedef struct eng_matmul_dims {
    int64_t m, k, n;
    bool trans_b;                     /* B's matrices stored [N, K] (row stride K) */
    int batch_rank;                   /* rank of the broadcast batch dims */
    int64_t batch[ENG_MAX_RANK];      /* the broadcast batch dims */
    int64_t a_stride[ENG_MAX_RANK];   /* A's matrix stride per batch dim, 0 where broadcast */
    int64_t b_stride[ENG_MAX_RANK];
    eng_shape_t out;                  /* Y's shape */
} eng_matmul_dims_t;

/* Fills *d from the shapes of A and B (inputs 0 and 1 of c) and c's
 * node's trans_b. 0, or FS_EINVAL naming both shapes (a scalar operand, a
 * transposed B of rank 1, K differs, batch dims do not broadcast); *d is
 * undefined on error. */
int eng_matmul_dims(const eng_op_ctx_t *c, eng_matmul_dims_t *d);

/* A MatMul with a fused bias (graph.h's `bias`): FS_EINVAL naming the
 * shape unless input 2 is present, of input 0's dtype, and N elements
 * along Y's last axis ([N] or [1, ..., 1, N], no more dims than Y). 0
 * too for any other node. */
int eng_matmul_bias_check(const eng_op_ctx_t *c, const eng_matmul_dims_t *d);

/* act(x) in float for a GEMM's fused activation (graph.h's eng_act_t):
 * the very expressions of the Relu and Gelu kernels (engine/cpu/
 * unary_kernels.c, engine/cuda/unary.cu), so a fused node computes what
 * the nodes it replaced computed. Cannot fail. */
ENG_OPS_HD static inline float eng_act_f32(int act, float x)
{
    switch (act) {
    case ENG_ACT_RELU:
        return x < 0 ? 0 : x;
    case ENG_ACT_GELU:
        return 0.5f * x * (1.0f + eng_erf_f32(x * 0.70710678118654752f));
    case ENG_ACT_GELU_TANH:
        return 0.5f * x *
               (1.0f + eng_tanh_f32(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    default:
        return x;
    }
}

#define ENG_EINSUM_MAX_OPERANDS 8
/* 'A'..'Z', 'a'..'z', then one label per broadcast ellipsis dim. */
#define ENG_EINSUM_MAX_LABELS (52 + ENG_MAX_RANK)

/* An Einsum equation bound to its operands' shapes. Every axis of every
 * operand carries a label; an operand's dim may be 1 where the label is
 * larger only for ellipsis labels (broadcasting). */
typedef struct eng_einsum {
    int n_operands;
    int rank[ENG_EINSUM_MAX_OPERANDS];
    int label[ENG_EINSUM_MAX_OPERANDS][ENG_MAX_RANK]; /* label of each axis */
    int64_t size[ENG_EINSUM_MAX_LABELS];              /* -1: label unused */
    int n_out;
    int out[ENG_MAX_RANK];                            /* labels of Y's axes */
} eng_einsum_t;

/* Parses the node's equation against its inputs' shapes: explicit ("ij,jk->ik")
 * or implicit output (the ellipsis dims, then the labels used once, in
 * ASCII order), repeated labels (diagonals), "..." broadcasting. Ellipsis
 * dims left out of an explicit output are summed. 0, or FS_EINVAL (a
 * malformed equation or sizes that disagree: the message quotes the
 * equation) or FS_ENOTSUP (more than ENG_EINSUM_MAX_OPERANDS operands). */
int eng_einsum_parse(const eng_op_ctx_t *c, eng_einsum_t *e);

/* Per-label element strides of each of e's operands (the inputs of c): 0
 * for a broadcast dim; a repeated label sums its axes' strides. Cannot
 * fail. */
void eng_einsum_strides(const eng_op_ctx_t *c, const eng_einsum_t *e,
                        int64_t stride[ENG_EINSUM_MAX_OPERANDS][ENG_EINSUM_MAX_LABELS]);

/* The roles of an Einsum's labels when it is a batched GEMM. */
enum { ENG_EINSUM_BATCH, ENG_EINSUM_M, ENG_EINSUM_N, ENG_EINSUM_K };

/* An Einsum recast as a batched GEMM: the labels of each role, in order. */
typedef struct eng_einsum_gemm {
    int n[4];                         /* labels per role: batch, M, N, K */
    int lab[4][ENG_EINSUM_MAX_LABELS];
    int64_t len[4];                   /* product of each role's sizes */
} eng_einsum_gemm_t;

/* Whether e is a batched GEMM Y[batch, M, N] = sum over K of A[batch, M, K]
 * B[batch, K, N] -- two operands, no repeated label and no broadcast dim in
 * either, every label in at least two of A, B and Y -- filling *p if so (*p
 * is unspecified otherwise). Batch, M and N labels come in Y's order, which
 * keeps the final copy cheap; K labels in label order. Cannot fail. */
bool eng_einsum_as_gemm(const eng_op_ctx_t *c, const eng_einsum_t *e, eng_einsum_gemm_t *p);

/* Det: input [..., n, n] -> output [...]. The batch is the product of the
 * leading dims (1 for rank 2). */
typedef struct eng_det {
    int64_t batch, n;
} eng_det_t;

/* Reads Det's geometry from input 0's shape. 0, or FS_EINVAL naming the
 * shape when it is not [..., n, n] of rank >= 2. */
int eng_det_params(const eng_op_ctx_t *c, eng_det_t *p);

/* The determinant of the n x n row-major matrix a, by LU decomposition with
 * partial pivoting (the largest magnitude in each column), in place: a is
 * overwritten. A column with no non-zero pivot gives 0. Both devices call
 * this one definition. Cannot fail. */
ENG_OPS_HD static inline double eng_det_lu(double *a, int64_t n)
{
    double det = 1.0;
    for (int64_t k = 0; k < n; k++) {
        int64_t piv = k;
        for (int64_t i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > fabs(a[piv * n + k]))
                piv = i;
        if (a[piv * n + k] == 0.0)
            return 0.0;
        if (piv != k) {
            for (int64_t j = 0; j < n; j++) {
                double t = a[k * n + j];
                a[k * n + j] = a[piv * n + j];
                a[piv * n + j] = t;
            }
            det = -det;
        }
        double d = a[k * n + k];
        det *= d;
        for (int64_t i = k + 1; i < n; i++) {
            double f = a[i * n + k] / d;
            for (int64_t j = k + 1; j < n; j++)
                a[i * n + j] -= f * a[k * n + j];
        }
    }
    return det;
}

#ifdef __cplusplus
}
#endif
#endif
