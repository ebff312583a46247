/* rnn.cu -- CUDA kernels of the recurrent ops RNN, GRU and LSTM
 * (engine/ops/rnn.c defines them; engine/ops/rnn_impl.h has the algorithm,
 * engine/cpu/rnn_kernels.c is the CPU reference).
 *
 * cuBLAS projects X through every direction's W for all steps in one GEMM;
 * each step then queues one strided-batched GEMM over the directions for
 * H x R^T (GRU without linear_before_reset: two, around its r gate) and one
 * launch of the cells, a thread per (direction, batch entry, hidden unit)
 * running rnn_impl.h's eng_rnn_cell_at -- the CPU's very expression. The
 * state lives in the scratch; Y is written step by step, Y_h and Y_c at the
 * end.
 *
 * Departure from the CPU kernel: a sequence_lens value outside [0,
 * seq_length] cannot fail the run, since the device cannot return an error
 * without synchronising. A negative length runs as 0 (Y zero, the final
 * state initial_h), one past seq_length as seq_length, where the CPU fails
 * with FS_EINVAL. */
#include "engine/cuda/cuda_impl.h"
#include "engine/ops/rnn_impl.h"

/* state [dirs, batch, hidden] from initial (its layout; NULL: zero). */
static __global__ void state_init_kernel(eng_rnn_t r, float *state, const float *initial)
{
    const int64_t hs = r.hidden;
    ENG_CUDA_FOR(i, r.dirs * r.batch * hs)
    {
        int64_t row = i / hs, k = i - row * hs;
        int d = (int)(row / r.batch);
        int64_t b = row - d * r.batch;
        state[i] = initial ? initial[eng_rnn_state_row(&r, d, b) * hs + k] : 0.0f;
    }
}

/* out (its layout) from state [dirs, batch, hidden]. */
static __global__ void state_store_kernel(eng_rnn_t r, const float *state, float *out)
{
    const int64_t hs = r.hidden;
    ENG_CUDA_FOR(i, r.dirs * r.batch * hs)
    {
        int64_t row = i / hs, k = i - row * hs;
        int d = (int)(row / r.batch);
        int64_t b = row - d * r.batch;
        out[eng_rnn_state_row(&r, d, b) * hs + k] = state[i];
    }
}

/* One pass of one step: every (direction, entry, unit) runs its cell. */
static __global__ void cells_kernel(eng_rnn_t r, eng_rnn_step_t s)
{
    const int64_t hs = r.hidden;
    ENG_CUDA_FOR(i, r.dirs * r.batch * hs)
    {
        int64_t row = i / hs;
        eng_rnn_cell_at(&r, &s, row, i - row * hs);
    }
}

/* H x R^T (rows [col, col + n) of each direction's R) into hr's columns
 * from col: one strided-batched product over the directions. */
static int recurrent_gemm(const eng_op_ctx_t *c, const eng_rnn_t *r, const float *h,
                          const float *w, int64_t col, int64_t n, float *hr)
{
    const int64_t hs = r->hidden, gh = r->gates * hs;
    return eng_cuda_sgemm(c, false, true, r->batch, n, hs, 1.0f, h, hs, r->batch * hs,
                          w + col * hs, hs, gh * hs, 0.0f, hr + col, gh, r->batch * gh, r->dirs);
}

/* The state of output i (Y_h or Y_c) from `state`, when the node asks. */
static int state_store(const eng_op_ctx_t *c, const eng_rnn_t *r, const float *state, int i)
{
    if (i >= c->n_outputs || !c->outputs[i])
        return 0;
    return eng_cuda_launch(c, state_store_kernel, r->dirs * r->batch * r->hidden, *r, state,
                           (float *)c->outputs[i]->data);
}

static size_t rnn_scratch_bytes(const eng_op_ctx_t *c)
{
    eng_rnn_t r;
    if (eng_rnn_params(c, &r))
        return 0;
    return eng_rnn_scratch(&r).bytes;
}

/* RNN, GRU and LSTM. On error (parameters, scratch, cuBLAS range, launch)
 * the outputs may be partly written. */
static int rnn_run(eng_op_ctx_t *c)
{
    eng_rnn_t r;
    int rc = eng_rnn_params(c, &r);
    if (rc)
        return rc;
    eng_rnn_scratch_t at = eng_rnn_scratch(&r);
    if (c->scratch_bytes < at.bytes)
        return eng_op_scratch_err(c, at.bytes);
    char *s = (char *)c->scratch;
    const int64_t gh = r.gates * r.hidden, n_cells = r.dirs * r.batch * r.hidden;
    const float *w = (const float *)c->inputs[ENG_RNN_IN_W]->data;
    const float *rw = (const float *)c->inputs[ENG_RNN_IN_R]->data;
    const eng_tensor_t *bias = eng_ctx_in(c, ENG_RNN_IN_B), *p = eng_ctx_in(c, ENG_RNN_IN_P);
    const eng_tensor_t *lens = eng_ctx_in(c, ENG_RNN_IN_LENS), *h0 = eng_ctx_in(c, ENG_RNN_IN_H0),
                       *c0 = eng_ctx_in(c, ENG_RNN_IN_C0);
    eng_rnn_step_t st = {};
    st.xw = (const float *)(s + at.xw);
    st.hr = (float *)(s + at.hr);
    st.h = (float *)(s + at.h);
    st.c = (float *)(s + at.c);
    st.rh = (float *)(s + at.rh);
    st.b = bias ? (const float *)bias->data : NULL;
    st.p = p ? (const float *)p->data : NULL;
    st.lens = lens ? (const int32_t *)lens->data : NULL;
    st.y = c->n_outputs > ENG_RNN_OUT_Y && c->outputs[ENG_RNN_OUT_Y]
               ? (float *)c->outputs[ENG_RNN_OUT_Y]->data
               : NULL;
    if ((rc = eng_cuda_sgemm(c, false, true, r.seq * r.batch, r.dirs * gh, r.input, 1.0f,
                             (const float *)c->inputs[ENG_RNN_IN_X]->data, r.input, 0, w,
                             r.input, 0, 0.0f, (float *)(s + at.xw), r.dirs * gh, 0, 1)) ||
        (rc = eng_cuda_launch(c, state_init_kernel, n_cells, r, st.h,
                              h0 ? (const float *)h0->data : (const float *)NULL)))
        return rc;
    if (r.kind == ENG_RNN_LSTM &&
        (rc = eng_cuda_launch(c, state_init_kernel, n_cells, r, st.c,
                              c0 ? (const float *)c0->data : (const float *)NULL)))
        return rc;
    bool two_halves = r.kind == ENG_RNN_GRU && !r.linear_before_reset;
    for (st.step = 0; st.step < r.seq; st.step++) {
        if (!two_halves) {
            st.pass = ENG_RNN_PASS_FULL;
            if ((rc = recurrent_gemm(c, &r, st.h, rw, 0, gh, st.hr)) ||
                (rc = eng_cuda_launch(c, cells_kernel, n_cells, r, st)))
                return rc;
            continue;
        }
        st.pass = ENG_RNN_PASS_GRU_ZR;
        if ((rc = recurrent_gemm(c, &r, st.h, rw, 0, 2 * r.hidden, st.hr)) ||
            (rc = eng_cuda_launch(c, cells_kernel, n_cells, r, st)))
            return rc;
        st.pass = ENG_RNN_PASS_GRU_H;
        if ((rc = recurrent_gemm(c, &r, st.rh, rw, 2 * r.hidden, r.hidden, st.hr)) ||
            (rc = eng_cuda_launch(c, cells_kernel, n_cells, r, st)))
            return rc;
    }
    if ((rc = state_store(c, &r, st.h, ENG_RNN_OUT_H)))
        return rc;
    return r.kind == ENG_RNN_LSTM ? state_store(c, &r, st.c, ENG_RNN_OUT_C) : 0;
}

const eng_kernel_t eng_cuda_RNN = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
const eng_kernel_t eng_cuda_GRU = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
const eng_kernel_t eng_cuda_LSTM = {.run = rnn_run, .scratch_bytes = rnn_scratch_bytes};
