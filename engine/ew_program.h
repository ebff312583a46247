/* ew_program.h -- the program of a FusedElementwise node: a chain of
 * element-wise ops that engine/fuse_chain.c fused at load, as instructions
 * over float registers, and the formula of every instruction, shared by the
 * op's definition (engine/ops/fused.c) and every device's interpreter
 * (engine/cpu/fused_kernels.c, engine/cuda/fused.cu).
 *
 * Types and invariants:
 *  - An output element is computed alone: register k (k < n_inputs) starts
 *    as input k's element at that output position (input k broadcast to the
 *    output's shape, read as float: float16 and bfloat16 exactly, bool as 0
 *    or 1), the instructions run in order, each writing register `dst` from
 *    its operands, and register `out` is rounded once to out_dtype.
 *  - An operand is a register (< ENG_EW_MAX_REGS) or ENG_EW_IMM + k, the
 *    immediate imm[k] (a one-element constant of the chain, folded). An
 *    unused operand is 0.
 *  - The output's shape is the broadcast of the inputs' shapes, with leading
 *    1s up to at least out_rank_min dims (a folded constant of shape [1, 1]
 *    still made the op's output rank 2).
 *  - in_dtype[k] is what input k must be at run time: float, float16,
 *    bfloat16, or bool (a Where's condition).
 *
 * Each formula is the expression of the CPU kernel of the op it came from
 * (engine/cpu/unary_kernels.c, binary_kernels.c; the unary ones taken from
 * engine/ops/unary_impl.h's lists), so that on the CPU a float32 chain
 * computes the unfused chain's bits; float16 and bfloat16 chains round
 * once, at the end, instead of after every op (and at each Cast to them).
 *
 * Threading: a program is immutable after load, owned by the graph. */
#ifndef FS_ENGINE_EW_PROGRAM_H
#define FS_ENGINE_EW_PROGRAM_H

#include <math.h>
#include <stdint.h>

#include "engine/half.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/unary_impl.h"
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ENG_EW_MAX_INPUTS 8
#define ENG_EW_MAX_REGS 16
#define ENG_EW_MAX_INSTRS 32
#define ENG_EW_MAX_IMMS 32
#define ENG_EW_IMM 64         /* operand ENG_EW_IMM + k: immediate k */

/* The ops an instruction is, with their formulas: X(Name, EXPR), EXPR a
 * float expression of the operands x, y, z and the instruction's alpha,
 * beta and gamma. The unary ops of unary_impl.h come after these, under
 * their ONNX names. */
#define ENG_EW_BASE_OPS(X)                                                                 \
    X(Copy, x)                                                                             \
    X(Add, x + y)                                                                          \
    X(Sub, x - y)                                                                          \
    X(Mul, x * y)                                                                          \
    X(Div, x / y)                                                                          \
    X(Max, (x > y || isnan(x)) ? x : y)                                                    \
    X(Min, (x < y || isnan(x)) ? x : y)                                                    \
    X(Pow, y == 2.0f ? x * x : powf(x, y))                                                 \
    X(Where, x != 0.0f ? y : z)                                                            \
    X(Clip, (x < y ? y : x) > z ? z : (x < y ? y : x))                                    \
    X(Relu, x < 0 ? 0.0f : x)                                                              \
    X(Neg, -x)                                                                             \
    X(Abs, fabsf(x))                                                                       \
    X(Sign, x > 0 ? 1.0f : x < 0 ? -1.0f : x)                                              \
    X(Gelu, 0.5f * x * (1.0f + eng_erf_f32(x * 0.70710678118654752f)))                    \
    X(GeluTanh, 0.5f * x * (1.0f + eng_tanh_f32(0.79788456080286536f *                     \
                                                (x + 0.044715f * x * x * x))))             \
    X(CastF16, eng_half_to_float(eng_float_to_half(x)))                                    \
    X(CastBF16, eng_bf16_to_float(eng_float_to_bf16(x)))

typedef enum eng_ew_op {
#define ENG_EW_ID_(name, expr) ENG_EW_##name,
#define ENG_EW_UID_(op, A, B, G, expr) ENG_EW_##op,
    ENG_EW_BASE_OPS(ENG_EW_ID_)
    ENG_UNARY_FLOAT_OPS(ENG_EW_UID_)
    ENG_UNARY_REAL_OPS(ENG_EW_UID_)
#undef ENG_EW_ID_
#undef ENG_EW_UID_
    ENG_EW_OP_COUNT
} eng_ew_op_t;

typedef struct eng_ew_instr {
    uint8_t op;                        /* eng_ew_op_t */
    uint8_t dst;                       /* register */
    uint8_t src[3];                    /* operands x, y, z: register or ENG_EW_IMM + k */
    float alpha, beta, gamma;          /* the unary ops' attributes */
} eng_ew_instr_t;

typedef struct eng_ew_program {
    int n_inputs;                      /* 1..ENG_EW_MAX_INPUTS */
    int n_instrs;                      /* 1..ENG_EW_MAX_INSTRS */
    int n_regs;                        /* registers used, n_inputs..ENG_EW_MAX_REGS */
    int n_imms;
    int out;                           /* the register holding the result */
    int out_rank_min;
    eng_dtype_t out_dtype;             /* float, float16 or bfloat16 */
    eng_dtype_t in_dtype[ENG_EW_MAX_INPUTS];
    float imm[ENG_EW_MAX_IMMS];
    eng_ew_instr_t code[ENG_EW_MAX_INSTRS];
    int n_fused;                       /* the nodes it replaced (for logs and tests) */
} eng_ew_program_t;

/* The name of op `op` ("Add", "Gelu", ...; "?" past the list). Cannot fail. */
const char *eng_ew_op_name(int op);

/* One instruction's formula on one element (CUDA's interpreter; the CPU's
 * runs the same expressions over blocks). */
ENG_OPS_HD static inline float eng_ew_eval(int op, float x, float y, float z, float alpha,
                                           float beta, float gamma)
{
    (void)x, (void)y, (void)z, (void)alpha, (void)beta, (void)gamma;
#define UE float
#define UF(fn) fn##f
#define UO(fn) fn##_f32
#define ENG_EW_CASE_(name, expr)                                                           \
    case ENG_EW_##name:                                                                    \
        return (float)(expr);
#define ENG_EW_UCASE_(op, A, B, G, expr) ENG_EW_CASE_(op, expr)
    switch (op) {
        ENG_EW_BASE_OPS(ENG_EW_CASE_)
        ENG_UNARY_FLOAT_OPS(ENG_EW_UCASE_)
        ENG_UNARY_REAL_OPS(ENG_EW_UCASE_)
    default:
        return x;
    }
#undef ENG_EW_CASE_
#undef ENG_EW_UCASE_
#undef UE
#undef UF
#undef UO
}

#ifdef __cplusplus
}
#endif
#endif
