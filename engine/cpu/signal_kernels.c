/* signal_kernels.c -- CPU kernels of the signal ops (engine/ops/signal.c
 * defines them): each output element is its op's inline value function of
 * signal_impl.h, which the CUDA kernels evaluate too, over output ranges
 * split across threads (each chunk writes only its own elements).
 *
 * A kernel fails only where its op's parameters do, before anything is
 * written. */
#include "engine/cpu/parallel.h"
#include "engine/kernels.h"
#include "engine/ops/signal_impl.h"

typedef enum sig_op { SIG_DFT, SIG_STFT, SIG_WINDOW, SIG_MEL } sig_op_t;

/* One op's operands for sig_range. */
typedef struct sig_job {
    sig_op_t op;
    const void *p;              /* the op's parameters (signal_impl.h) */
    const void *x, *window;     /* DFT's / STFT's input, STFT's window */
    double lower, upper;        /* MelWeightMatrix's edges */
    void *y;
    eng_dtype_t y_dt;
} sig_job_t;

/* Output elements [begin, end) of the job's op. Cannot fail. */
static void sig_range(void *arg, int64_t begin, int64_t end)
{
    const sig_job_t *j = arg;
    for (int64_t i = begin; i < end; i++) {
        double v = 0;
        switch (j->op) {
        case SIG_DFT: v = eng_dft_at(j->p, j->x, i); break;
        case SIG_STFT: v = eng_stft_at(j->p, j->x, j->window, i); break;
        case SIG_WINDOW: v = eng_window_at(j->p, i); break;
        case SIG_MEL: v = eng_mel_at(j->p, j->lower, j->upper, i); break;
        }
        eng_hd_store(j->y, j->y_dt, i, v);
    }
}

/* Runs the job over output 0, `work` operations an element. Cannot fail. */
static int sig_run(eng_op_ctx_t *c, sig_job_t *j, int64_t work)
{
    j->y = c->outputs[0]->data;
    j->y_dt = c->outputs[0]->dtype;
    eng_parallel_for(c->n_threads, eng_shape_numel(&c->outputs[0]->shape),
                     eng_parallel_grain(work), sig_range, j);
    return 0;
}

static int dft_run(eng_op_ctx_t *c)
{
    eng_dft_t p;
    int rc = eng_dft_params(c, &p);
    if (rc)
        return rc;
    sig_job_t j = {.op = SIG_DFT, .p = &p, .x = c->inputs[0]->data};
    return sig_run(c, &j, 16 * p.n);
}

static int stft_run(eng_op_ctx_t *c)
{
    eng_stft_t p;
    int rc = eng_stft_params(c, &p);
    if (rc)
        return rc;
    const eng_tensor_t *w = eng_ctx_in(c, 2);
    sig_job_t j = {.op = SIG_STFT, .p = &p, .x = c->inputs[0]->data, .window = w ? w->data : NULL};
    return sig_run(c, &j, 16 * p.n);
}

static int window_run(eng_op_ctx_t *c)
{
    eng_window_t p;
    int rc = eng_window_params(c, &p);
    if (rc)
        return rc;
    sig_job_t j = {.op = SIG_WINDOW, .p = &p};
    return sig_run(c, &j, 32);
}

static int mel_run(eng_op_ctx_t *c)
{
    eng_mel_t p;
    int rc = eng_mel_params(c, &p);
    if (rc)
        return rc;
    sig_job_t j = {.op = SIG_MEL, .p = &p,
                   .lower = eng_hd_load(c->inputs[3]->data, p.edge_dt, 0),
                   .upper = eng_hd_load(c->inputs[4]->data, p.edge_dt, 0)};
    return sig_run(c, &j, 64);
}

const eng_kernel_t eng_cpu_DFT = {.run = dft_run};
const eng_kernel_t eng_cpu_STFT = {.run = stft_run};
const eng_kernel_t eng_cpu_HannWindow = {.run = window_run};
const eng_kernel_t eng_cpu_HammingWindow = {.run = window_run};
const eng_kernel_t eng_cpu_BlackmanWindow = {.run = window_run};
const eng_kernel_t eng_cpu_MelWeightMatrix = {.run = mel_run};
