/* internal.cu -- CUDA kernels of the engine-internal ops (engine/ops/internal.c
 * defines them; engine/cpu/internal_kernels.c is the CPU reference):
 * FusedElementwise's interpreter.
 *
 * One grid-stride kernel runs every program. The program, the inputs'
 * pointers and the collapsed layout (eng_ew_layout: broadcast inputs at
 * stride 0) travel as one kernel parameter, read from the constant bank. A
 * thread takes V consecutive output elements: it splits the first one's
 * flat index into each input's offset (udiv_t's multiply-shift division
 * when every index fits in 31 bits), loads each input's V elements as
 * floats into its register row, runs the instructions (a switch per
 * instruction, the V elements inside each case; the formulas are
 * engine/ew_program.h's), and rounds the result row once into the output.
 * V is 4 when the collapsed innermost dim is a multiple of 4 and the
 * output is aligned for 4 elements: an input contiguous there is then
 * read as one vector where it is aligned for it, else element by element,
 * and an input at stride 0 there (a scalar, a per-row operand) as one
 * value; otherwise V is 1.
 *
 * A thread reads every input of its elements before it writes them and
 * writes nothing else, so the output may share input 0's memory (in
 * place). Values: the CPU's formulas, but nvcc contracts a * b + c into
 * one FMA and CUDA's expf, logf, ... are not glibc's: results agree within
 * a few ulp. */
#include <math.h>
#include <stdint.h>

#include "engine/cuda/dtype_impl.h"
#include "engine/cuda/nn_impl.h"
#include "engine/kernels.h"
#include "engine/ops/internal_impl.h"

namespace {

/* How a thread of the V-element path reads input k. */
enum ew_mode { EW_REPEAT = 0, EW_VECTOR = 1, EW_ELEMENTS = 2 };

struct ew_params {
    eng_ew_program_t prog;
    const void *in[ENG_EW_MAX_INPUTS];
    int mode[ENG_EW_MAX_INPUTS];
    int64_t stride[ENG_EW_MAX_INPUTS][ENG_MAX_RANK];
    udiv_t dims[ENG_MAX_RANK];
    int rank;
    void *out;
    int64_t n;
};

__device__ __forceinline__ float ew_load1(eng_dtype_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case ENG_DT_FLOAT:
        return ((const float *)p)[i];
    case ENG_DT_FLOAT16:
        return eng_half_to_float(((const uint16_t *)p)[i]);
    case ENG_DT_BFLOAT16:
        return eng_bf16_to_float(((const uint16_t *)p)[i]);
    default: /* bool */
        return ((const uint8_t *)p)[i] != 0 ? 1.0f : 0.0f;
    }
}

template <int V, typename T>
__device__ __forceinline__ void ew_vload(const void *p, int64_t off, T (&v)[V])
{
    const vec_t<T, V> t = *reinterpret_cast<const vec_t<T, V> *>((const T *)p + off);
#pragma unroll
    for (int j = 0; j < V; j++)
        v[j] = t.v[j];
}

/* Input k's V elements at offset off, as floats. */
template <int V>
__device__ __forceinline__ void ew_load(const ew_params &p, int k, int64_t off, float (&r)[V])
{
    const eng_dtype_t dt = p.prog.in_dtype[k];
    const int mode = V == 1 ? EW_REPEAT : p.mode[k];
    if (mode == EW_REPEAT) {
        const float v = ew_load1(dt, p.in[k], off);
#pragma unroll
        for (int j = 0; j < V; j++)
            r[j] = v;
    } else if (mode == EW_ELEMENTS) {
#pragma unroll
        for (int j = 0; j < V; j++)
            r[j] = ew_load1(dt, p.in[k], off + j);
    } else if (dt == ENG_DT_FLOAT) {
        ew_vload<V>(p.in[k], off, r);
    } else if (dt == ENG_DT_BOOL) {
        uint8_t b[V];
        ew_vload<V>(p.in[k], off, b);
#pragma unroll
        for (int j = 0; j < V; j++)
            r[j] = b[j] != 0 ? 1.0f : 0.0f;
    } else {
        uint16_t h[V];
        ew_vload<V>(p.in[k], off, h);
#pragma unroll
        for (int j = 0; j < V; j++)
            r[j] = dt == ENG_DT_FLOAT16 ? eng_half_to_float(h[j]) : eng_bf16_to_float(h[j]);
    }
}

/* The result row into the output at element e (V elements, aligned). */
template <int V>
__device__ __forceinline__ void ew_store(const ew_params &p, int64_t e, const float (&r)[V])
{
    const eng_dtype_t dt = p.prog.out_dtype;
    if (dt == ENG_DT_FLOAT) {
        vec_t<float, V> t;
#pragma unroll
        for (int j = 0; j < V; j++)
            t.v[j] = r[j];
        *reinterpret_cast<vec_t<float, V> *>((float *)p.out + e) = t;
        return;
    }
    vec_t<uint16_t, V> t;
#pragma unroll
    for (int j = 0; j < V; j++)
        t.v[j] = dt == ENG_DT_FLOAT16 ? eng_float_to_half(r[j]) : eng_float_to_bf16(r[j]);
    *reinterpret_cast<vec_t<uint16_t, V> *>((uint16_t *)p.out + e) = t;
}

/* One instruction on V elements of the registers. */
template <int V>
__device__ __forceinline__ void ew_step(const eng_ew_instr_t &in, float (*r)[V], const float *imm)
{
    float xs[V], ys[V], zs[V];
    float *ops[3] = {xs, ys, zs};
#pragma unroll
    for (int s = 0; s < 3; s++) {
        const int src = in.src[s];
#pragma unroll
        for (int j = 0; j < V; j++)
            ops[s][j] = src >= ENG_EW_IMM ? imm[src - ENG_EW_IMM] : r[src][j];
    }
    const float alpha = in.alpha, beta = in.beta, gamma = in.gamma;
    float *d = r[in.dst];
#define UE float
#define UF(fn) fn##f
#define UO(fn) fn##_f32
#define CASE_(name, expr)                                                                  \
    case ENG_EW_##name:                                                                    \
        _Pragma("unroll") for (int j = 0; j < V; j++)                                      \
        {                                                                                  \
            const float x = xs[j], y = ys[j], z = zs[j];                                   \
            (void)y, (void)z;                                                              \
            d[j] = (float)(expr);                                                          \
        }                                                                                  \
        break;
#define UCASE_(op, A, B, G, expr) CASE_(op, expr)
    switch (in.op) {
        ENG_EW_BASE_OPS(CASE_)
        ENG_UNARY_FLOAT_OPS(UCASE_)
        ENG_UNARY_REAL_OPS(UCASE_)
    default:
        break;
    }
    (void)alpha, (void)beta, (void)gamma;
#undef CASE_
#undef UCASE_
#undef UE
#undef UF
#undef UO
}

template <int V, bool Small> __global__ void ew_kernel(const ew_params p)
{
    const eng_ew_program_t &g = p.prog;
    const int64_t nt = p.n / V;
    ENG_CUDA_FOR(t, nt)
    {
        const int64_t e = t * V;
        int64_t off[ENG_EW_MAX_INPUTS];
        for (int k = 0; k < g.n_inputs; k++)
            off[k] = 0;
        int64_t rest = e;
        for (int d = p.rank - 1; d > 0; d--) {
            const int64_t q = udiv_q<Small>(p.dims[d], rest), rem = rest - q * p.dims[d].d;
            for (int k = 0; k < g.n_inputs; k++)
                off[k] += rem * p.stride[k][d];
            rest = q;
        }
        float r[ENG_EW_MAX_REGS][V];
        for (int k = 0; k < g.n_inputs; k++) {
            off[k] += rest * p.stride[k][0];
            ew_load<V>(p, k, off[k], r[k]);
        }
        for (int pc = 0; pc < g.n_instrs; pc++)
            ew_step<V>(g.code[pc], r, g.imm);
        ew_store<V>(p, e, r[g.out]);
    }
}

template <int V> int ew_launch(const eng_op_ctx_t *c, const ew_params &p)
{
    const bool small = fits32(p.n);
    const unsigned blocks = eng_cuda_blocks(c, p.n / V);
    cudaStream_t s = eng_cuda_ctx(c)->stream;
    if (small)
        ew_kernel<V, true><<<blocks, ENG_CUDA_THREADS, 0, s>>>(p);
    else
        ew_kernel<V, false><<<blocks, ENG_CUDA_THREADS, 0, s>>>(p);
    ENG_CUDA_LAUNCHED(c);
    return 0;
}

int fused_run(eng_op_ctx_t *c)
{
    eng_ew_layout_t l;
    int rc = eng_ew_layout(c, &l);
    if (rc || l.n == 0)
        return rc;
    ew_params p;
    p.prog = *c->node->ew;
    p.rank = l.rank;
    p.n = l.n;
    p.out = c->outputs[0]->data;
    for (int d = 0; d < l.rank; d++)
        p.dims[d] = udiv_make(l.dims[d]);
    constexpr int V = 4;
    const size_t out_es = eng_dtype_size(p.prog.out_dtype);
    bool vec = l.dims[l.rank - 1] % V == 0 && (uintptr_t)p.out % (V * out_es) == 0;
    for (int k = 0; k < c->n_inputs; k++) {
        p.in[k] = c->inputs[k]->data;
        for (int d = 0; d < l.rank; d++)
            p.stride[k][d] = l.stride[k][d];
        const size_t es = eng_dtype_size(p.prog.in_dtype[k]);
        bool aligned = (uintptr_t)p.in[k] % (V * es) == 0;
        for (int d = 0; d + 1 < l.rank; d++)
            aligned = aligned && l.stride[k][d] % V == 0;
        p.mode[k] = l.stride[k][l.rank - 1] == 0 ? EW_REPEAT : aligned ? EW_VECTOR : EW_ELEMENTS;
    }
    return vec ? ew_launch<V>(c, p) : ew_launch<1>(c, p);
}

} /* namespace */

const eng_kernel_t eng_cuda_FusedElementwise = {.run = fused_run, .scratch_bytes = NULL};
