/* internal_kernels.c -- CPU kernels of the engine-internal ops
 * (engine/ops/internal.c): FusedElementwise's interpreter.
 *
 * The output is computed in blocks of EWK_BLOCK consecutive elements: each
 * input's elements for the block are read into its register row as floats
 * (through the collapsed layout, eng_ew_layout: a run along the innermost
 * dim is a contiguous conversion or, at stride 0, one value repeated),
 * each instruction is one loop over the block (EW_LOOP, vectorised, with
 * the formula of engine/ew_program.h, an immediate read as a row holding
 * it), and the result row is rounded once into the output. So the
 * instruction decode costs once per block, and every element goes through
 * the float expressions of the CPU kernels the chain replaced, in their
 * order: a float32 chain gives the unfused chain's bits. Blocks are split
 * over ctx->n_threads threads.
 *
 * A block reads all its inputs before it writes its output, and writes
 * only its own elements, so the output may share input 0's memory (in
 * place, same shape) as the planner allows. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "engine/cpu/elementwise_impl.h"
#include "engine/cpu/parallel.h"
#include "engine/half.h"
#include "engine/kernels.h"
#include "engine/ops/internal_impl.h"

#define EWK_BLOCK 128

typedef struct ewk_job {
    const eng_ew_program_t *p;
    const eng_ew_layout_t *l;
    const void *in[ENG_EW_MAX_INPUTS];
    void *out;
} ewk_job_t;

/* n elements of dtype dt at src (element stride 1, or 0: one value) as
 * floats into dst. */
EW_INLINE void ewk_load(eng_dtype_t dt, const void *src, int64_t stride, float *dst, int64_t n)
{
    if (stride == 0) {
        float v = dt == ENG_DT_FLOAT      ? *(const float *)src
                  : dt == ENG_DT_BOOL     ? (float)(*(const uint8_t *)src != 0)
                                          : eng_half_dt_to_float(dt, *(const uint16_t *)src);
        EW_LOOP(n, dst[i] = v;);
        return;
    }
    switch (dt) {
    case ENG_DT_FLOAT:
        memcpy(dst, src, (size_t)n * sizeof *dst);
        break;
    case ENG_DT_BOOL: {
        const uint8_t *b = src;
        EW_LOOP(n, dst[i] = (float)(b[i] != 0););
        break;
    }
    default:
        ew_half_to_float(dt, src, dst, n);
        break;
    }
}

/* Input k's elements [e0, e0 + n) of the output into row. */
EW_INLINE void ewk_gather(const ewk_job_t *j, int k, int64_t e0, int64_t n, float *row)
{
    const eng_ew_layout_t *l = j->l;
    const eng_dtype_t dt = j->p->in_dtype[k];
    const size_t es = eng_dtype_size(dt);
    const int r = l->rank;
    int64_t idx[ENG_MAX_RANK], rest = e0;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rest % l->dims[d];
        rest /= l->dims[d];
    }
    const int64_t inner = l->stride[k][r - 1];
    for (int64_t done = 0; done < n;) {
        int64_t off = 0;
        for (int d = 0; d < r; d++)
            off += idx[d] * l->stride[k][d];
        int64_t run = l->dims[r - 1] - idx[r - 1];
        if (run > n - done)
            run = n - done;
        ewk_load(dt, (const char *)j->in[k] + (size_t)off * es, inner, row + done, run);
        done += run;
        idx[r - 1] += run;
        for (int d = r - 1; d > 0 && idx[d] == l->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* One instruction over n elements: d = op(x, y, z). The rows may be the
 * same row (an element is read before it is written). */
EW_CLONES static void ewk_step(const eng_ew_instr_t *in, float *d, const float *xs,
                               const float *ys, const float *zs, int64_t n)
{
    const float alpha = in->alpha, beta = in->beta, gamma = in->gamma;
    (void)alpha, (void)beta, (void)gamma;
#define UE float
#define UF(fn) fn##f
#define UO(fn) fn##_f32
#define CASE_(name, expr)                                                                  \
    case ENG_EW_##name:                                                                    \
        EW_LOOP(n, const float x = xs[i]; const float y = ys[i]; const float z = zs[i];    \
                (void)y, (void)z; d[i] = (float)(expr););                                  \
        break;
#define UCASE_(op, A, B, G, expr) CASE_(op, expr)
    switch (in->op) {
        ENG_EW_BASE_OPS(CASE_)
        ENG_UNARY_FLOAT_OPS(UCASE_)
        ENG_UNARY_REAL_OPS(UCASE_)
    default:
        break;
    }
#undef CASE_
#undef UCASE_
#undef UE
#undef UF
#undef UO
}

/* Blocks [begin, end) of job j. */
static void ewk_blocks(void *arg, int64_t begin, int64_t end)
{
    const ewk_job_t *j = arg;
    const eng_ew_program_t *p = j->p;
    float regs[ENG_EW_MAX_REGS][EWK_BLOCK];
    float imms[ENG_EW_MAX_IMMS][EWK_BLOCK];
    for (int k = 0; k < p->n_imms; k++)
        for (int i = 0; i < EWK_BLOCK; i++)
            imms[k][i] = p->imm[k];
    for (int64_t b = begin; b < end; b++) {
        const int64_t e0 = b * EWK_BLOCK;
        const int64_t n = j->l->n - e0 < EWK_BLOCK ? j->l->n - e0 : EWK_BLOCK;
        for (int k = 0; k < p->n_inputs; k++)
            ewk_gather(j, k, e0, n, regs[k]);
        for (int pc = 0; pc < p->n_instrs; pc++) {
            const eng_ew_instr_t *in = &p->code[pc];
            const float *ops[3];
            for (int s = 0; s < 3; s++)
                ops[s] = in->src[s] >= ENG_EW_IMM ? imms[in->src[s] - ENG_EW_IMM]
                                                  : regs[in->src[s]];
            ewk_step(in, regs[in->dst], ops[0], ops[1], ops[2], n);
        }
        const float *res = regs[p->out];
        if (p->out_dtype == ENG_DT_FLOAT)
            memcpy((float *)j->out + e0, res, (size_t)n * sizeof *res);
        else
            ew_float_to_half(p->out_dtype, res, (uint16_t *)j->out + e0, n);
    }
}

static int fused_run(eng_op_ctx_t *c)
{
    eng_ew_layout_t l;
    int rc = eng_ew_layout(c, &l);
    if (rc || l.n == 0)
        return rc;
    ewk_job_t j = {.p = c->node->ew, .l = &l, .out = c->outputs[0]->data};
    for (int k = 0; k < c->n_inputs; k++)
        j.in[k] = c->inputs[k]->data;
    const int64_t blocks = (l.n + EWK_BLOCK - 1) / EWK_BLOCK;
    eng_parallel_for(c->n_threads, blocks,
                     eng_parallel_grain((int64_t)EWK_BLOCK * (j.p->n_instrs + j.p->n_inputs)),
                     ewk_blocks, &j);
    return 0;
}

const eng_kernel_t eng_cpu_FusedElementwise = {.run = fused_run};
