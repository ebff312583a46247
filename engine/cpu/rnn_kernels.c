/* rnn_kernels.c -- CPU kernels of the recurrent ops RNN, GRU and LSTM
 * (engine/ops/rnn_impl.h has the algorithm both devices run): flatserve's
 * GEMM projects X through W for every step at once, then each step runs
 * one batched GEMM over the directions for H x R^T and the cells over
 * (direction, batch entry) rows, split among the kernel's threads.
 *
 * A kernel fails only where its op's parameters do (rnn_impl.h), on a
 * scratch short of what it asked, or on a sequence_lens value outside
 * [0, seq_length], each before anything is written. */
#include <string.h>

#include "common/error.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/ops/rnn_impl.h"

/* One pass of one step over the cells. */
typedef struct cell_job {
    const eng_rnn_t *r;
    eng_rnn_step_t s;
} cell_job_t;

/* The cells of rows [begin, end) of (direction, batch entry). Cannot fail. */
static void cells_run(void *ctx, int64_t begin, int64_t end)
{
    const cell_job_t *j = ctx;
    for (int64_t row = begin; row < end; row++)
        for (int64_t k = 0; k < j->r->hidden; k++)
            eng_rnn_cell_at(j->r, &j->s, row, k);
}

/* The job's pass over every row, with up to n_threads threads. */
static void cells_pass(const eng_op_ctx_t *c, cell_job_t *j, int pass)
{
    const eng_rnn_t *r = j->r;
    j->s.pass = pass;
    eng_parallel_for(c->n_threads, r->dirs * r->batch,
                     eng_parallel_grain(r->hidden * r->gates * 24), cells_run, j);
}

/* (state) [dirs, batch, hidden] from initial (its layout), or zero. */
static void state_init(const eng_rnn_t *r, float *state, const eng_tensor_t *initial)
{
    size_t row = (size_t)r->hidden * sizeof(float);
    for (int d = 0; d < r->dirs; d++)
        for (int64_t b = 0; b < r->batch; b++) {
            float *dst = state + (d * r->batch + b) * r->hidden;
            if (initial)
                memcpy(dst, (const float *)initial->data + eng_rnn_state_row(r, d, b) * r->hidden,
                       row);
            else
                memset(dst, 0, row);
        }
}

/* out (its layout) from (state) [dirs, batch, hidden]; nothing when NULL. */
static void state_store(const eng_rnn_t *r, const float *state, eng_tensor_t *out)
{
    if (!out)
        return;
    for (int d = 0; d < r->dirs; d++)
        for (int64_t b = 0; b < r->batch; b++)
            memcpy((float *)out->data + eng_rnn_state_row(r, d, b) * r->hidden,
                   state + (d * r->batch + b) * r->hidden, (size_t)r->hidden * sizeof(float));
}

/* H x R^T (rows [col, col + n) of each direction's R) into hr's columns
 * from col, for every direction: one batched product. */
static void recurrent_gemm(const eng_op_ctx_t *c, const eng_rnn_t *r, const float *h,
                           const float *w, int64_t col, int64_t n, float *hr)
{
    const int64_t hs = r->hidden, gh = r->gates * hs;
    eng_gemm_t g = {.m = r->batch, .n = n, .k = hs, .a = h, .lda = hs, .b = w + col * hs,
                    .ldb = hs, .trans_b = true, .c = hr + col, .ldc = gh, .alpha = 1.0f};
    eng_gemm_batch_t batch = {.rank = 1, .dims = {r->dirs}, .a_stride = {r->batch * hs},
                              .b_stride = {gh * hs}, .c_stride = {r->batch * gh}};
    eng_gemm_run_batch(&g, &batch, c->n_threads);
}

static size_t rnn_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_rnn_t r;
    if (eng_rnn_params(c, &r))
        return 0;
    return eng_rnn_scratch(&r).bytes +
           eng_gemm_scratch_bytes(r.seq * r.batch, r.dirs * r.gates * r.hidden, r.input);
}

/* RNN, GRU and LSTM. On error (parameters, scratch, a bad sequence length)
 * nothing is written. */
static int rnn_run(eng_op_ctx_t *c)
{
    eng_rnn_t r;
    int rc = eng_rnn_params(c, &r);
    if (rc)
        return rc;
    eng_rnn_scratch_t at = eng_rnn_scratch(&r);
    if (c->scratch_bytes < at.bytes)
        return eng_op_scratch_err(c, at.bytes);
    const eng_tensor_t *lens = eng_ctx_in(c, ENG_RNN_IN_LENS);
    for (int64_t b = 0; lens && b < r.batch; b++) {
        int32_t v = ((const int32_t *)lens->data)[b];
        if (v < 0 || v > r.seq)
            return eng_op_err(c, FS_EINVAL, "sequence_lens[%lld] is %d, must be in [0, %lld]",
                              (long long)b, (int)v, (long long)r.seq);
    }
    char *s = c->scratch;
    const int64_t gh = r.gates * r.hidden;
    const float *w = c->inputs[ENG_RNN_IN_W]->data, *rw = c->inputs[ENG_RNN_IN_R]->data;
    const eng_tensor_t *bias = eng_ctx_in(c, ENG_RNN_IN_B), *p = eng_ctx_in(c, ENG_RNN_IN_P);
    cell_job_t j = {
        .r = &r,
        .s = {.xw = (const float *)(s + at.xw),
              .hr = (float *)(s + at.hr),
              .h = (float *)(s + at.h),
              .c = (float *)(s + at.c),
              .rh = (float *)(s + at.rh),
              .b = bias ? bias->data : NULL,
              .p = p ? p->data : NULL,
              .lens = lens ? lens->data : NULL,
              .y = c->n_outputs > ENG_RNN_OUT_Y && c->outputs[ENG_RNN_OUT_Y]
                       ? c->outputs[ENG_RNN_OUT_Y]->data
                       : NULL},
    };
    eng_gemm_t proj = {.m = r.seq * r.batch, .n = r.dirs * gh, .k = r.input,
                       .a = c->inputs[ENG_RNN_IN_X]->data, .lda = r.input, .b = w,
                       .ldb = r.input, .trans_b = true, .c = (float *)(s + at.xw),
                       .ldc = r.dirs * gh, .alpha = 1.0f};
    eng_gemm_run(&proj, c->n_threads, s + at.bytes, c->scratch_bytes - at.bytes);
    state_init(&r, j.s.h, eng_ctx_in(c, ENG_RNN_IN_H0));
    if (r.kind == ENG_RNN_LSTM)
        state_init(&r, j.s.c, eng_ctx_in(c, ENG_RNN_IN_C0));
    bool two_halves = r.kind == ENG_RNN_GRU && !r.linear_before_reset;
    for (j.s.step = 0; j.s.step < r.seq; j.s.step++) {
        if (!two_halves) {
            recurrent_gemm(c, &r, j.s.h, rw, 0, gh, j.s.hr);
            cells_pass(c, &j, ENG_RNN_PASS_FULL);
            continue;
        }
        recurrent_gemm(c, &r, j.s.h, rw, 0, 2 * r.hidden, j.s.hr);
        cells_pass(c, &j, ENG_RNN_PASS_GRU_ZR);
        recurrent_gemm(c, &r, j.s.rh, rw, 2 * r.hidden, r.hidden, j.s.hr);
        cells_pass(c, &j, ENG_RNN_PASS_GRU_H);
    }
    state_store(&r, j.s.h, c->n_outputs > ENG_RNN_OUT_H ? c->outputs[ENG_RNN_OUT_H] : NULL);
    if (r.kind == ENG_RNN_LSTM)
        state_store(&r, j.s.c, c->n_outputs > ENG_RNN_OUT_C ? c->outputs[ENG_RNN_OUT_C] : NULL);
    return 0;
}

const eng_kernel_t eng_cpu_RNN = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
const eng_kernel_t eng_cpu_GRU = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
const eng_kernel_t eng_cpu_LSTM = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
