/* rnn_impl.h -- what the recurrent ops' definitions (engine/ops/rnn.c) and
 * both devices' kernels (engine/cpu/rnn_kernels.c, engine/cuda/rnn.cu)
 * share: the geometry a node's inputs and attributes give, the index maps
 * of its layouts, and the per-element cell arithmetic of RNN, GRU and LSTM.
 *
 * THE ALGORITHM (both devices). Gates per direction: RNN 1, GRU 3 (z, r, h),
 * LSTM 4 (i, o, f, c), each `hidden` wide, in W's and R's row order.
 *  1. One GEMM projects every time step of X through every direction's W:
 *     XW [seq * batch rows, dirs * gates * hidden] = X x W^T (X's rows in
 *     their own layout's order; eng_rnn_x_row finds one).
 *  2. The state H (and C) per direction starts from initial_h (initial_c)
 *     or zero. Step s = 0 .. seq-1 runs every direction at once: direction d
 *     reads time eng_rnn_time(r, d, s) (the backward direction from the last
 *     time down). HR [dirs, batch, gates * hidden] = H x R^T (per direction,
 *     one batched GEMM); then each element (d, b, j) runs its cell: the
 *     gates' pre-activations XW + HR + biases (+ peepholes), clipped when
 *     `clip` is set, through the activations, into the new H (and C) in
 *     place, and into Y. GRU without linear_before_reset needs r before its
 *     h gate's product, so it runs the cell in two halves around a second
 *     GEMM: (r . H) x Rh^T.
 *  3. Y_h (Y_c) are the final states.
 * sequence_lens: a batch entry b runs only the times t < len[b]; at the
 * others its state stays as it was and its Y is zero. So the forward
 * direction's final state is the one at time len[b] - 1, and the backward
 * direction starts there from initial_h, as ONNX's reference computes.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_RNN_IMPL_H
#define FS_ENGINE_OPS_RNN_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/ops/ops_hd.h"
#include "engine/ops/unary_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inputs and outputs by position (RNN and GRU stop at INITIAL_H). */
enum {
    ENG_RNN_IN_X, ENG_RNN_IN_W, ENG_RNN_IN_R, ENG_RNN_IN_B, ENG_RNN_IN_LENS,
    ENG_RNN_IN_H0, ENG_RNN_IN_C0, ENG_RNN_IN_P,
};
enum { ENG_RNN_OUT_Y, ENG_RNN_OUT_H, ENG_RNN_OUT_C };

typedef enum eng_rnn_kind { ENG_RNN_SIMPLE, ENG_RNN_GRU, ENG_RNN_LSTM } eng_rnn_kind_t;

/* The activation functions ONNX lists for the recurrent ops. */
typedef enum eng_rnn_act_kind {
    ENG_RNN_ACT_SIGMOID,
    ENG_RNN_ACT_TANH,
    ENG_RNN_ACT_RELU,
    ENG_RNN_ACT_AFFINE,           /* alpha x + beta */
    ENG_RNN_ACT_LEAKY_RELU,       /* x < 0 ? alpha x : x */
    ENG_RNN_ACT_THRESHOLDED_RELU, /* x > alpha ? x : 0 */
    ENG_RNN_ACT_SCALED_TANH,      /* alpha tanh(beta x) */
    ENG_RNN_ACT_HARD_SIGMOID,     /* max(0, min(1, alpha x + beta)) */
    ENG_RNN_ACT_ELU,              /* x < 0 ? alpha (e^x - 1) : x */
    ENG_RNN_ACT_SOFTSIGN,         /* x / (1 + |x|) */
    ENG_RNN_ACT_SOFTPLUS,         /* log(1 + e^x) */
} eng_rnn_act_kind_t;

typedef struct eng_rnn_act {
    int kind;                     /* eng_rnn_act_kind_t */
    float alpha, beta;            /* for the kinds that read them */
} eng_rnn_act_t;

/* Activations per direction: RNN f; GRU f (z, r), g (h); LSTM f (i, o, f),
 * g (c), h (of C). */
#define ENG_RNN_MAX_ACTS 3

typedef struct eng_rnn {
    eng_rnn_kind_t kind;
    int gates;                    /* 1, 3 or 4 */
    int dirs;                     /* 1, or 2 when bidirectional */
    bool reverse;                 /* direction "reverse" (dirs 1) */
    bool batch_major;             /* layout 1: X [batch, seq, input], ... */
    bool linear_before_reset;     /* GRU */
    bool input_forget;            /* LSTM: f = 1 - i */
    bool has_clip;
    float clip;                   /* > 0 when has_clip */
    int64_t seq, batch, input, hidden;
    int n_acts;                   /* per direction: 1, 2 or 3 */
    eng_rnn_act_t act[2][ENG_RNN_MAX_ACTS];
} eng_rnn_t;

/* The geometry of the node in c from its input shapes and attributes. 0, or
 * FS_EINVAL (a shape that does not fit, a bad attribute; the message names
 * it) or FS_ENOTSUP (a dtype other than float32, an unknown activation);
 * *r is undefined on error. */
int eng_rnn_params(const eng_op_ctx_t *c, eng_rnn_t *r);

/* The float buffers both devices' kernels keep in their scratch, as byte
 * offsets from its start, each ENG_RNN_SCRATCH_ALIGN-aligned: xw [seq *
 * batch, dirs * gates * hidden] (step 1's projection); hr [dirs, batch,
 * gates * hidden] (a step's H x R^T; GRU without linear_before_reset keeps
 * its z and r gates there for the step's second half); h [dirs, batch,
 * hidden] (the state); c (LSTM's cell state) and rh (GRU without
 * linear_before_reset: r . H) as h, 0 bytes for the other ops. `bytes` is
 * the end of the last. Cannot fail (eng_rnn_params bounds the sizes). */
#define ENG_RNN_SCRATCH_ALIGN 256
typedef struct eng_rnn_scratch {
    size_t xw, hr, h, c, rh, bytes;
} eng_rnn_scratch_t;

static inline eng_rnn_scratch_t eng_rnn_scratch(const eng_rnn_t *r)
{
    const size_t a = ENG_RNN_SCRATCH_ALIGN, f = sizeof(float);
    size_t state = (size_t)(r->dirs * r->batch * r->hidden) * f;
    size_t gh = (size_t)(r->gates * r->hidden);
    bool gru2 = r->kind == ENG_RNN_GRU && !r->linear_before_reset;
    eng_rnn_scratch_t s;
    s.xw = 0;
    s.hr = (s.xw + (size_t)(r->seq * r->batch * r->dirs) * gh * f + a - 1) / a * a;
    s.h = (s.hr + (size_t)(r->dirs * r->batch) * gh * f + a - 1) / a * a;
    s.c = (s.h + state + a - 1) / a * a;
    s.rh = (s.c + (r->kind == ENG_RNN_LSTM ? state : 0) + a - 1) / a * a;
    s.bytes = s.rh + (gru2 ? state : 0);
    return s;
}

/* The time direction d reads at step s. */
ENG_OPS_HD static inline int64_t eng_rnn_time(const eng_rnn_t *r, int d, int64_t s)
{
    return d == 1 || r->reverse ? r->seq - 1 - s : s;
}

/* X's row (input wide) of time t, batch entry b; also XW's row. */
ENG_OPS_HD static inline int64_t eng_rnn_x_row(const eng_rnn_t *r, int64_t t, int64_t b)
{
    return r->batch_major ? b * r->seq + t : t * r->batch + b;
}

/* Y's row (hidden wide) of time t, direction d, batch entry b. */
ENG_OPS_HD static inline int64_t eng_rnn_y_row(const eng_rnn_t *r, int64_t t, int d, int64_t b)
{
    return r->batch_major ? (b * r->seq + t) * r->dirs + d : (t * r->dirs + d) * r->batch + b;
}

/* The row of initial_h, initial_c, Y_h and Y_c of direction d, entry b. */
ENG_OPS_HD static inline int64_t eng_rnn_state_row(const eng_rnn_t *r, int d, int64_t b)
{
    return r->batch_major ? b * r->dirs + d : d * r->batch + b;
}

ENG_OPS_HD static inline float eng_rnn_act_apply(const eng_rnn_act_t *a, float x)
{
    switch (a->kind) {
    case ENG_RNN_ACT_SIGMOID:
        return eng_sigmoid_f32(x);
    case ENG_RNN_ACT_TANH:
        return eng_tanh_f32(x);
    case ENG_RNN_ACT_RELU:
        return x > 0 ? x : 0.0f;
    case ENG_RNN_ACT_AFFINE:
        return a->alpha * x + a->beta;
    case ENG_RNN_ACT_LEAKY_RELU:
        return x < 0 ? a->alpha * x : x;
    case ENG_RNN_ACT_THRESHOLDED_RELU:
        return x > a->alpha ? x : 0.0f;
    case ENG_RNN_ACT_SCALED_TANH:
        return a->alpha * eng_tanh_f32(a->beta * x);
    case ENG_RNN_ACT_HARD_SIGMOID:
        return fmaxf(0.0f, fminf(1.0f, a->alpha * x + a->beta));
    case ENG_RNN_ACT_ELU:
        return x < 0 ? a->alpha * expm1f(x) : x;
    case ENG_RNN_ACT_SOFTSIGN:
        return x / (1.0f + fabsf(x));
    default: /* ENG_RNN_ACT_SOFTPLUS: exp of -|x| only, never overflowing */
        return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
    }
}

/* A pre-activation clipped to [-clip, clip] when the node sets clip. */
ENG_OPS_HD static inline float eng_rnn_clip(const eng_rnn_t *r, float x)
{
    return r->has_clip ? fminf(r->clip, fmaxf(-r->clip, x)) : x;
}

/* Pointers one cell reads, all at element j of its (direction, entry):
 * xw and hr at gate 0 of its XW and HR rows (gate g at + g * hidden); wb and
 * rb at gate 0 of the direction's biases, NULL when B is absent; p at its
 * direction's peepholes (i, o, f), NULL when P is absent. */
typedef struct eng_rnn_cell_in {
    const float *xw, *hr, *wb, *rb, *p;
} eng_rnn_cell_in_t;

/* Gate g's pre-activation without its recurrent term. */
ENG_OPS_HD static inline float eng_rnn_pre(const eng_rnn_t *r, const eng_rnn_cell_in_t *in,
                                           int g)
{
    int64_t o = g * r->hidden;
    return in->xw[o] + (in->wb ? in->wb[o] + in->rb[o] : 0.0f);
}

/* RNN's new H. */
ENG_OPS_HD static inline float eng_rnn_cell_simple(const eng_rnn_t *r, int d,
                                                   const eng_rnn_cell_in_t *in)
{
    return eng_rnn_act_apply(&r->act[d][0], eng_rnn_clip(r, eng_rnn_pre(r, in, 0) + in->hr[0]));
}

/* GRU's gates z and r (*z, *rg) from H's previous value. */
ENG_OPS_HD static inline void eng_rnn_cell_gru_zr(const eng_rnn_t *r, int d,
                                                  const eng_rnn_cell_in_t *in, float *z,
                                                  float *rg)
{
    *z = eng_rnn_act_apply(&r->act[d][0], eng_rnn_clip(r, eng_rnn_pre(r, in, 0) + in->hr[0]));
    *rg = eng_rnn_act_apply(&r->act[d][0],
                            eng_rnn_clip(r, eng_rnn_pre(r, in, 1) + in->hr[r->hidden]));
}

/* GRU's new H from its gates z, rg and the previous h. in->hr's gate 2 is
 * H x Rh^T with linear_before_reset, else (rg . H) x Rh^T. */
ENG_OPS_HD static inline float eng_rnn_cell_gru_h(const eng_rnn_t *r, int d,
                                                  const eng_rnn_cell_in_t *in, float z, float rg,
                                                  float h)
{
    int64_t o = 2 * r->hidden;
    float wb = in->wb ? in->wb[o] : 0.0f, rb = in->wb ? in->rb[o] : 0.0f;
    float pre = r->linear_before_reset ? in->xw[o] + wb + rg * (in->hr[o] + rb)
                                       : in->xw[o] + wb + rb + in->hr[o];
    float ht = eng_rnn_act_apply(&r->act[d][1], eng_rnn_clip(r, pre));
    return (1.0f - z) * ht + z * h;
}

/* LSTM's new H (returned) and C (*c, which holds the previous C). */
ENG_OPS_HD static inline float eng_rnn_cell_lstm(const eng_rnn_t *r, int d,
                                                 const eng_rnn_cell_in_t *in, float *c)
{
    const int64_t hs = r->hidden;
    const float c0 = *c;
    const float pi = in->p ? in->p[0] : 0.0f, po = in->p ? in->p[hs] : 0.0f,
                pf = in->p ? in->p[2 * hs] : 0.0f;
    const eng_rnn_act_t *f = &r->act[d][0], *g = &r->act[d][1], *h = &r->act[d][2];
    float i = eng_rnn_act_apply(f, eng_rnn_clip(r, eng_rnn_pre(r, in, 0) + in->hr[0] + pi * c0));
    float fg = r->input_forget
                   ? 1.0f - i
                   : eng_rnn_act_apply(f, eng_rnn_clip(r, eng_rnn_pre(r, in, 2) + in->hr[2 * hs] +
                                                              pf * c0));
    float ct = eng_rnn_act_apply(g, eng_rnn_clip(r, eng_rnn_pre(r, in, 3) + in->hr[3 * hs]));
    float cn = fg * c0 + i * ct;
    float o = eng_rnn_act_apply(f, eng_rnn_clip(r, eng_rnn_pre(r, in, 1) + in->hr[hs] + po * cn));
    *c = cn;
    return o * eng_rnn_act_apply(h, cn);
}

/* The passes of a step over its cells: one (FULL) for RNN, LSTM and GRU
 * with linear_before_reset; GRU without it runs GRU_ZR (z and r into hr's
 * first two gates, r . H into rh), its second GEMM, then GRU_H. */
enum { ENG_RNN_PASS_FULL, ENG_RNN_PASS_GRU_ZR, ENG_RNN_PASS_GRU_H };

/* What one pass of one step reads and writes (device pointers on a GPU). */
typedef struct eng_rnn_step {
    int pass;
    int64_t step;
    const float *xw;              /* the scratch's buffers (eng_rnn_scratch) */
    float *hr, *h, *c, *rh;
    const float *b, *p;           /* inputs B and P; NULL when absent */
    const int32_t *lens;          /* sequence_lens; NULL when absent */
    float *y;                     /* output Y; NULL when not asked for */
} eng_rnn_step_t;

/* Element k of state row `row` (direction row / batch, entry row % batch)
 * in pass s->pass of step s->step. A time at or past the entry's length
 * leaves the state as it is and writes Y zero: a negative length reads as
 * 0, one past seq_length as seq_length. Cannot fail. */
ENG_OPS_HD static inline void eng_rnn_cell_at(const eng_rnn_t *r, const eng_rnn_step_t *s,
                                              int64_t row, int64_t k)
{
    const int64_t hs = r->hidden, gh = r->gates * hs;
    const int d = (int)(row / r->batch);
    const int64_t b = row - d * r->batch, t = eng_rnn_time(r, d, s->step);
    float *h = s->h + row * hs + k, *hr = s->hr + row * gh + k;
    float *y = s->y ? s->y + eng_rnn_y_row(r, t, d, b) * hs + k : NULL;
    if (s->lens && t >= s->lens[b]) {
        if (s->pass == ENG_RNN_PASS_GRU_ZR)
            s->rh[row * hs + k] = 0.0f;
        else if (y)
            *y = 0.0f;
        return;
    }
    const float *wb = s->b ? s->b + d * 2 * gh + k : NULL;
    eng_rnn_cell_in_t in = {.xw = s->xw + (eng_rnn_x_row(r, t, b) * r->dirs + d) * gh + k,
                            .hr = hr, .wb = wb, .rb = wb ? wb + gh : NULL,
                            .p = s->p ? s->p + d * 3 * hs + k : NULL};
    float z, rg;
    if (s->pass == ENG_RNN_PASS_GRU_ZR) {
        eng_rnn_cell_gru_zr(r, d, &in, &z, &rg);
        hr[0] = z;
        hr[hs] = rg;
        s->rh[row * hs + k] = rg * *h;
        return;
    }
    if (s->pass == ENG_RNN_PASS_GRU_H) {
        *h = eng_rnn_cell_gru_h(r, d, &in, hr[0], hr[hs], *h);
    } else if (r->kind == ENG_RNN_SIMPLE) {
        *h = eng_rnn_cell_simple(r, d, &in);
    } else if (r->kind == ENG_RNN_LSTM) {
        *h = eng_rnn_cell_lstm(r, d, &in, s->c + row * hs + k);
    } else {
        eng_rnn_cell_gru_zr(r, d, &in, &z, &rg);
        *h = eng_rnn_cell_gru_h(r, d, &in, z, rg, *h);
    }
    if (y)
        *y = *h;
}

#ifdef __cplusplus
}
#endif
#endif
