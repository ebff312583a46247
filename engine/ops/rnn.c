/* rnn.c -- definitions (validation, dtype and shape inference) of the
 * recurrent ops RNN, GRU and LSTM, and the geometry (engine/ops/rnn_impl.h)
 * their kernels share.
 *
 * Every version the engine meets (opset 6 on) is read: layout from 14;
 * output_sequence before 7, which only says whether Y is optional -- an
 * output the node does not ask for is not computed, one it asks for is, so
 * the attribute needs nothing more. */
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "engine/ops/rnn_impl.h"

static const eng_dtype_t dt_float[] = {ENG_DT_FLOAT, ENG_DT_UNDEFINED};
static const eng_dtype_t dt_int32[] = {ENG_DT_INT32, ENG_DT_UNDEFINED};

/* The activations ONNX lists, with the defaults for alpha and beta of the
 * ONNX ops of the same name. Affine and ScaledTanh (experimental ops, long
 * gone) declared no defaults; here Affine's are 1 and 0 (the identity) and
 * ScaledTanh's 1 and 1 (tanh). */
static const struct act_name {
    const char *name;
    eng_rnn_act_kind_t kind;
    bool has_alpha, has_beta;
    float alpha, beta;
} act_names[] = {
    {"Sigmoid", ENG_RNN_ACT_SIGMOID, false, false, 0, 0},
    {"Tanh", ENG_RNN_ACT_TANH, false, false, 0, 0},
    {"Relu", ENG_RNN_ACT_RELU, false, false, 0, 0},
    {"Affine", ENG_RNN_ACT_AFFINE, true, true, 1.0f, 0.0f},
    {"LeakyRelu", ENG_RNN_ACT_LEAKY_RELU, true, false, 0.01f, 0},
    {"ThresholdedRelu", ENG_RNN_ACT_THRESHOLDED_RELU, true, false, 1.0f, 0},
    {"ScaledTanh", ENG_RNN_ACT_SCALED_TANH, true, true, 1.0f, 1.0f},
    {"HardSigmoid", ENG_RNN_ACT_HARD_SIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", ENG_RNN_ACT_ELU, true, false, 1.0f, 0},
    {"Softsign", ENG_RNN_ACT_SOFTSIGN, false, false, 0, 0},
    {"Softplus", ENG_RNN_ACT_SOFTPLUS, false, false, 0, 0},
};

/* Reads the activations, activation_alpha and activation_beta into r->act
 * (r->kind and r->dirs set). The list holds n_acts names per direction
 * (RNN f; GRU f, g; LSTM f, g, h), or n_acts for both directions of a
 * bidirectional node; absent, ONNX's defaults. Names match ignoring case,
 * as onnxruntime's do. alpha and beta are consumed in list order by the
 * activations that take them (onnxruntime's reading of "in the order of
 * activation functions"); one whose value the list runs out of takes its
 * op's default; values left over are refused (onnxruntime ignores them;
 * a value given and never read is a mistake in the model, and flatserve
 * ignores nothing silently). 0, or FS_EINVAL / FS_ENOTSUP naming the value. */
static int read_activations(const eng_op_ctx_t *c, eng_rnn_t *r)
{
    static const char *const defaults[] = {"Sigmoid", "Tanh", "Tanh"};
    r->n_acts = r->kind == ENG_RNN_SIMPLE ? 1 : r->kind == ENG_RNN_GRU ? 2 : 3;
    const eng_attr_t *a = eng_node_attr(c->node, "activations");
    size_t n = a ? a->n : 0;
    if (a && n != (size_t)r->n_acts && n != (size_t)(r->n_acts * r->dirs))
        return eng_op_err(c, FS_EINVAL, "activations has %zu names, expected %d (%d per "
                          "direction)", n, r->n_acts * r->dirs, r->n_acts);
    size_t n_alpha, n_beta, next_alpha = 0, next_beta = 0;
    const float *alpha = eng_attr_floats(c->node, "activation_alpha", &n_alpha);
    const float *beta = eng_attr_floats(c->node, "activation_beta", &n_beta);
    for (int d = 0; d < r->dirs; d++)
        for (int k = 0; k < r->n_acts; k++) {
            size_t at = (size_t)(d * r->n_acts + k);
            if (a && at >= n) {
                r->act[d][k] = r->act[0][k]; /* one list for both directions */
                continue;
            }
            const char *name = !a ? (r->kind == ENG_RNN_SIMPLE ? "Tanh" : defaults[k])
                                  : a->strings[at];
            const struct act_name *m = NULL;
            for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++)
                if (strcasecmp(name, act_names[i].name) == 0)
                    m = &act_names[i];
            if (!m)
                return eng_op_err(c, FS_ENOTSUP, "activation '%s' is not supported (Sigmoid, "
                                  "Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                                  "HardSigmoid, Elu, Softsign, Softplus)", name);
            eng_rnn_act_t *e = &r->act[d][k];
            e->kind = m->kind;
            e->alpha = m->alpha;
            e->beta = m->beta;
            if (m->has_alpha && next_alpha < n_alpha)
                e->alpha = alpha[next_alpha++];
            if (m->has_beta && next_beta < n_beta)
                e->beta = beta[next_beta++];
        }
    /* A value no activation reads is an error, not silently dropped. */
    if (next_alpha < n_alpha || next_beta < n_beta)
        return eng_op_err(c, FS_EINVAL, "activation_alpha has %zu and activation_beta %zu "
                          "values, but the activations read %zu and %zu", n_alpha, n_beta,
                          next_alpha, next_beta);
    return 0;
}

/* Everything the attributes give (kind from the op). 0, or FS_EINVAL /
 * FS_ENOTSUP naming the attribute. */
static int read_attrs(const eng_op_ctx_t *c, eng_rnn_t *r)
{
    memset(r, 0, sizeof *r);
    eng_op_id_t id = c->node->op->id;
    r->kind = id == ENG_OP_RNN ? ENG_RNN_SIMPLE : id == ENG_OP_GRU ? ENG_RNN_GRU : ENG_RNN_LSTM;
    r->gates = r->kind == ENG_RNN_SIMPLE ? 1 : r->kind == ENG_RNN_GRU ? 3 : 4;
    const char *dir = eng_attr_s(c->node, "direction", "forward");
    if (strcmp(dir, "forward") == 0 || strcmp(dir, "reverse") == 0) {
        r->dirs = 1;
        r->reverse = dir[0] == 'r';
    } else if (strcmp(dir, "bidirectional") == 0) {
        r->dirs = 2;
    } else {
        return eng_op_err(c, FS_EINVAL, "direction '%s' is not forward, reverse or "
                          "bidirectional", dir);
    }
    int64_t layout = c->opset >= 14 ? eng_attr_i(c->node, "layout", 0) : 0;
    if (layout != 0 && layout != 1)
        return eng_op_err(c, FS_EINVAL, "layout is %lld, must be 0 or 1", (long long)layout);
    r->batch_major = layout == 1;
    r->linear_before_reset = r->kind == ENG_RNN_GRU &&
                             eng_attr_i(c->node, "linear_before_reset", 0) != 0;
    r->input_forget = r->kind == ENG_RNN_LSTM && eng_attr_i(c->node, "input_forget", 0) != 0;
    if (eng_node_attr(c->node, "clip")) {
        r->has_clip = true;
        r->clip = eng_attr_f(c->node, "clip", 0);
        if (!(r->clip > 0))
            return eng_op_err(c, FS_EINVAL, "clip is %g, must be positive", (double)r->clip);
    }
    return read_activations(c, r);
}

static int rnn_check(const eng_node_t *n, int opset)
{
    eng_op_ctx_t c = {.node = n, .opset = opset};
    eng_rnn_t r;
    return read_attrs(&c, &r);
}

/* FS_EINVAL naming input i (`name`) unless its shape is [d0, d1, d2]
 * (rank 2 when d2 < 0). */
static int expect_shape(const eng_op_ctx_t *c, int i, const char *name, int64_t d0, int64_t d1,
                        int64_t d2)
{
    const eng_tensor_t *t = c->inputs[i];
    eng_shape_t want = {.rank = d2 < 0 ? 2 : 3, .dims = {d0, d1, d2}};
    if (eng_shape_equal(&t->shape, &want))
        return 0;
    char ts[96], ws[96];
    return eng_op_err(c, FS_EINVAL, "input %s is %s, expected %s", name,
                      eng_shape_format(&t->shape, ts, sizeof ts),
                      eng_shape_format(&want, ws, sizeof ws));
}

int eng_rnn_params(const eng_op_ctx_t *c, eng_rnn_t *r)
{
    static const char *const names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h",
                                        "initial_c", "P"};
    int rc = read_attrs(c, r);
    if (rc)
        return rc;
    for (int i = 0; i < c->n_inputs && i <= ENG_RNN_IN_P; i++) {
        if (!c->inputs[i]) {
            if (i <= ENG_RNN_IN_R)
                return eng_op_err(c, FS_EINVAL, "input %s is missing", names[i]);
            continue;
        }
        if ((rc = eng_op_require_dtype(c, i, i == ENG_RNN_IN_LENS ? dt_int32 : dt_float)))
            return rc;
    }
    if (c->n_inputs <= ENG_RNN_IN_R)
        return eng_op_err(c, FS_EINVAL, "%d inputs, at least X, W and R expected", c->n_inputs);
    const eng_shape_t *xs = &c->inputs[ENG_RNN_IN_X]->shape, *rs = &c->inputs[ENG_RNN_IN_R]->shape;
    char b1[96], b2[96];
    if (xs->rank != 3)
        return eng_op_err(c, FS_EINVAL, "input X is %s, expected rank 3",
                          eng_shape_format(xs, b1, sizeof b1));
    if (rs->rank != 3)
        return eng_op_err(c, FS_EINVAL, "input R is %s, expected [%d, %d * hidden_size, "
                          "hidden_size]", eng_shape_format(rs, b1, sizeof b1), r->dirs, r->gates);
    r->seq = xs->dims[r->batch_major ? 1 : 0];
    r->batch = xs->dims[r->batch_major ? 0 : 1];
    r->input = xs->dims[2];
    r->hidden = rs->dims[2];
    int64_t gh = r->gates * r->hidden;
    int64_t hs = eng_attr_i(c->node, "hidden_size", r->hidden);
    if (hs != r->hidden)
        return eng_op_err(c, FS_EINVAL, "hidden_size is %lld, but R %s gives %lld",
                          (long long)hs, eng_shape_format(rs, b1, sizeof b1),
                          (long long)r->hidden);
    if ((rc = expect_shape(c, ENG_RNN_IN_R, "R", r->dirs, gh, r->hidden)) ||
        (rc = expect_shape(c, ENG_RNN_IN_W, "W", r->dirs, gh, r->input)))
        return rc;
    int64_t s0 = r->batch_major ? r->batch : r->dirs, s1 = r->batch_major ? r->dirs : r->batch;
    if ((eng_ctx_in(c, ENG_RNN_IN_B) &&
         (rc = expect_shape(c, ENG_RNN_IN_B, "B", r->dirs, 2 * gh, -1))) ||
        (eng_ctx_in(c, ENG_RNN_IN_H0) &&
         (rc = expect_shape(c, ENG_RNN_IN_H0, "initial_h", s0, s1, r->hidden))) ||
        (eng_ctx_in(c, ENG_RNN_IN_C0) &&
         (rc = expect_shape(c, ENG_RNN_IN_C0, "initial_c", s0, s1, r->hidden))) ||
        (eng_ctx_in(c, ENG_RNN_IN_P) &&
         (rc = expect_shape(c, ENG_RNN_IN_P, "P", r->dirs, 3 * r->hidden, -1))))
        return rc;
    const eng_tensor_t *lens = eng_ctx_in(c, ENG_RNN_IN_LENS);
    if (lens && (lens->shape.rank != 1 || lens->shape.dims[0] != r->batch))
        return eng_op_err(c, FS_EINVAL, "input sequence_lens is %s, expected [%lld] (X %s)",
                          eng_shape_format(&lens->shape, b1, sizeof b1), (long long)r->batch,
                          eng_shape_format(xs, b2, sizeof b2));
    /* The kernels' projection of every step through every direction. */
    int64_t xw = eng_dim_mul(eng_dim_mul(r->seq, r->batch), eng_dim_mul(r->dirs, gh));
    if (xw > ENG_NUMEL_MAX)
        return eng_op_err(c, FS_ENOTSUP, "X %s through %d directions of %lld gates is too "
                          "large to project", eng_shape_format(xs, b1, sizeof b1), r->dirs,
                          (long long)gh);
    return 0;
}

static int rnn_infer(eng_op_ctx_t *c)
{
    eng_rnn_t r;
    int rc = eng_rnn_params(c, &r);
    if (rc)
        return rc;
    eng_shape_t y = {.rank = 4}, state = {.rank = 3};
    if (r.batch_major) {
        y.dims[0] = r.batch, y.dims[1] = r.seq;
        state.dims[0] = r.batch, state.dims[1] = r.dirs;
    } else {
        y.dims[0] = r.seq, y.dims[1] = r.dirs;
        state.dims[0] = r.dirs, state.dims[1] = r.batch;
    }
    y.dims[2] = r.batch_major ? r.dirs : r.batch;
    y.dims[3] = r.hidden;
    state.dims[2] = r.hidden;
    eng_ctx_out_set(c, ENG_RNN_OUT_Y, ENG_DT_FLOAT, &y);
    eng_ctx_out_set(c, ENG_RNN_OUT_H, ENG_DT_FLOAT, &state);
    if (r.kind == ENG_RNN_LSTM)
        eng_ctx_out_set(c, ENG_RNN_OUT_C, ENG_DT_FLOAT, &state);
    return 0;
}

ENG_OP_DEF(RNN, rnn_check, rnn_infer, -1);
ENG_OP_DEF(GRU, rnn_check, rnn_infer, -1);
ENG_OP_DEF(LSTM, rnn_check, rnn_infer, -1);
