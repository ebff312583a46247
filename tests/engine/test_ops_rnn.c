/* test_ops_rnn.c -- tests of the recurrent ops (engine/ops/rnn.c and the
 * CPU kernels in engine/cpu/rnn_kernels.c): infer and run called directly
 * on hand-built nodes. Small cases are checked by hand (their formulas
 * written out beside them); the larger ones (a bidirectional LSTM as
 * PyTorch exports it, a GRU with sequence_lens) against values computed
 * with ONNX's equations in double precision from the same deterministic
 * inputs (test_val). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/op.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define F(...) ((const float[]){__VA_ARGS__})
#define TOL 1e-5f

static eng_tensor_t ft(const float *data, int rank, const int64_t *dims)
{
    return tensor(ENG_DT_FLOAT, data, rank, dims);
}

static eng_attr_t attr_strs(const char *name, const char *const *v, size_t n)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_STRINGS, .strings = v, .n = n};
}

static eng_attr_t attr_floats(const char *name, const float *v, size_t n)
{
    return (eng_attr_t){.name = name, .type = ENG_ATTR_FLOATS, .floats = v, .n = n};
}

static float sig(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Runs op at `opset` and expects rc 0 from infer and run; the caller frees. */
static void run_ok(call_t *c, const char *op, int opset, const eng_attr_t *attrs, int n_attrs,
                   const eng_tensor_t *const *in, int n_in, int n_out)
{
    int rc = call_infer_at(c, op, opset, attrs, n_attrs, in, n_in, n_out);
    cr_assert_eq(rc, 0, "%s infer: %s", op, fs_errmsg());
    rc = call_run(c);
    cr_assert_eq(rc, 0, "%s run: %s", op, fs_errmsg());
}

/* Output i has shape `dims` (rank `rank`) and values `want` within TOL. */
static void expect_out(const call_t *c, int i, int rank, const int64_t *dims, const float *want,
                       const char *what)
{
    const eng_tensor_t *t = &c->outs[i];
    cr_assert_eq(t->shape.rank, rank, "%s: rank %d, want %d", what, t->shape.rank, rank);
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        cr_assert_eq(t->shape.dims[d], dims[d], "%s: dim %d is %lld, want %lld", what, d,
                     (long long)t->shape.dims[d], (long long)dims[d]);
        n *= dims[d];
    }
    const float *got = t->data;
    for (int64_t k = 0; k < n; k++)
        cr_expect(fabsf(got[k] - want[k]) <= TOL * (1.0f + fabsf(want[k])),
                  "%s[%lld]: got %.7f, want %.7f", what, (long long)k, got[k], want[k]);
}

/* --- RNN ---------------------------------------------------------------- */

/* X = {1, 2} (seq 2, batch 1, input 1), W = R = 0.5, Wb + Rb = 0.3. */
static const float rnn_x[] = {1, 2}, rnn_w[] = {0.5f}, rnn_r[] = {0.5f}, rnn_b[] = {0.1f, 0.2f};

static void rnn_small(call_t *c, const eng_attr_t *attrs, int n_attrs)
{
    static eng_tensor_t x, w, r, b;
    x = ft(rnn_x, 3, DIMS(2, 1, 1));
    w = ft(rnn_w, 3, DIMS(1, 1, 1));
    r = ft(rnn_r, 3, DIMS(1, 1, 1));
    b = ft(rnn_b, 2, DIMS(1, 2));
    const eng_tensor_t *in[] = {&x, &w, &r, &b};
    run_ok(c, "RNN", 22, attrs, n_attrs, in, 4, 2);
}

Test(engine_ops_rnn, rnn_by_hand_with_each_direction_activation_and_clip)
{
    call_t c;
    /* Tanh (the default): h1 = tanh(0.5 + 0.3), h2 = tanh(1 + 0.5 h1 + 0.3). */
    rnn_small(&c, NULL, 0);
    float h1 = tanhf(0.8f), h2 = tanhf(1.3f + 0.5f * h1);
    expect_out(&c, 0, 4, DIMS(2, 1, 1, 1), F(h1, h2), "tanh Y");
    expect_out(&c, 1, 3, DIMS(1, 1, 1), F(h2), "tanh Y_h");
    call_free(&c);
    /* Relu: h1 = 0.8, h2 = 1 + 0.4 + 0.3. */
    const char *relu[] = {"Relu"};
    eng_attr_t a_relu[] = {attr_strs("activations", relu, 1)};
    rnn_small(&c, a_relu, 1);
    expect_out(&c, 0, 4, DIMS(2, 1, 1, 1), F(0.8f, 1.7f), "relu Y");
    call_free(&c);
    /* clip 1 bounds the input of the activation: h2 = relu(min(1.7, 1)). */
    eng_attr_t a_clip[] = {attr_strs("activations", relu, 1), attr_f("clip", 1.0f)};
    rnn_small(&c, a_clip, 2);
    expect_out(&c, 0, 4, DIMS(2, 1, 1, 1), F(0.8f, 1.0f), "clipped Y");
    call_free(&c);
    /* reverse: t = 1 first, h = 1 + 0.3; then t = 0: 0.5 + 0.5 * 1.3 + 0.3. */
    eng_attr_t a_rev[] = {attr_strs("activations", relu, 1), attr_s("direction", "reverse")};
    rnn_small(&c, a_rev, 2);
    expect_out(&c, 0, 4, DIMS(2, 1, 1, 1), F(1.45f, 1.3f), "reverse Y");
    expect_out(&c, 1, 3, DIMS(1, 1, 1), F(1.45f), "reverse Y_h");
    call_free(&c);
    /* Affine 2x + 0.5: h1 = 2 * 0.8 + 0.5 = 2.1, h2 = 2 (1 + 1.05 + 0.3) + 0.5. */
    const char *affine[] = {"Affine"};
    eng_attr_t a_aff[] = {attr_strs("activations", affine, 1),
                          attr_floats("activation_alpha", F(2.0f), 1),
                          attr_floats("activation_beta", F(0.5f), 1)};
    rnn_small(&c, a_aff, 3);
    expect_out(&c, 0, 4, DIMS(2, 1, 1, 1), F(2.1f, 5.2f), "affine Y");
    call_free(&c);
}

/* alpha and beta go, in list order, to the activations that take them:
 * LeakyRelu takes alpha 0.1, HardSigmoid alpha 0.3 and beta 0.6. */
Test(engine_ops_rnn, rnn_bidirectional_activations_consume_alpha_and_beta_in_order)
{
    const char *acts[] = {"leakyrelu", "HardSigmoid"}; /* names match ignoring case */
    eng_attr_t attrs[] = {attr_strs("activations", acts, 2),
                          attr_floats("activation_alpha", F(0.1f, 0.3f), 2),
                          attr_floats("activation_beta", F(0.6f), 1),
                          attr_s("direction", "bidirectional")};
    eng_tensor_t x = ft(F(-1), 3, DIMS(1, 1, 1)), w = ft(F(1, 1), 3, DIMS(2, 1, 1)),
                 r = ft(F(0, 0), 3, DIMS(2, 1, 1));
    const eng_tensor_t *in[] = {&x, &w, &r};
    call_t c;
    run_ok(&c, "RNN", 22, attrs, 4, in, 3, 2);
    /* forward 0.1 * -1; backward max(0, min(1, 0.3 * -1 + 0.6)). */
    expect_out(&c, 0, 4, DIMS(1, 2, 1, 1), F(-0.1f, 0.3f), "Y");
    expect_out(&c, 1, 3, DIMS(2, 1, 1), F(-0.1f, 0.3f), "Y_h");
    call_free(&c);
}

/* --- GRU ---------------------------------------------------------------- */

/* X = 1, W = (z 1, r 1, h 1), R = (0, 0, 1), Rb = (0, 0, 0.5), initial_h
 * 0.5: z = r = sigmoid(1), and h~ either tanh(1 + 0.5 + (r 0.5) 1)
 * (linear_before_reset 0) or tanh(1 + r (0.5 + 0.5)); H = (1-z) h~ + z 0.5. */
Test(engine_ops_rnn, gru_by_hand_with_and_without_linear_before_reset)
{
    eng_tensor_t x = ft(F(1), 3, DIMS(1, 1, 1)), w = ft(F(1, 1, 1), 3, DIMS(1, 3, 1)),
                 r = ft(F(0, 0, 1), 3, DIMS(1, 3, 1)),
                 b = ft(F(0, 0, 0, 0, 0, 0.5f), 2, DIMS(1, 6)),
                 h0 = ft(F(0.5f), 3, DIMS(1, 1, 1));
    const eng_tensor_t *in[] = {&x, &w, &r, &b, NULL, &h0};
    float z = sig(1.0f), rg = z;
    for (int lbr = 0; lbr <= 1; lbr++) {
        eng_attr_t attrs[] = {attr_i("linear_before_reset", lbr)};
        call_t c;
        run_ok(&c, "GRU", 22, attrs, 1, in, 6, 2);
        float ht = lbr ? tanhf(1.0f + rg * 1.0f) : tanhf(1.5f + rg * 0.5f);
        float h = (1 - z) * ht + z * 0.5f;
        expect_out(&c, 0, 4, DIMS(1, 1, 1, 1), F(h), lbr ? "Y (lbr 1)" : "Y (lbr 0)");
        expect_out(&c, 1, 3, DIMS(1, 1, 1), F(h), "Y_h");
        call_free(&c);
    }
}

/* The deterministic inputs of the reference cases: element i of input s. */
static float test_val(int64_t i, int s)
{
    return (float)((i * 7 + s * 13) % 19 - 9) / 10.0f;
}

static float *vals(int64_t n, int s)
{
    float *a = malloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i] = test_val(i, s);
    return a;
}

/* Bidirectional GRU, seq 3, batch 2, input 2, hidden 2, B and initial_h,
 * sequence_lens {3, 1}: entry 1 runs time 0 only in both directions, its Y
 * zero after, its Y_h the state at time 0 (the backward direction too
 * starts at its last time, from initial_h). */
static const float gru_lens_y0[24] = {
    -0.2870709f, 0.3861744f, -0.5462993f, 0.4580512f, 0.6992070f, -0.9237967f,
    0.1982688f, -0.8745562f, -0.2847011f, 0.6737990f, 0.0f, 0.0f,
    0.3077848f, -0.8583488f, 0.0f, 0.0f, -0.3949820f, 0.3907875f,
    0.0f, 0.0f, 0.8716930f, -0.7718767f, 0.0f, 0.0f};
static const float gru_lens_yh0[8] = {-0.3949820f, 0.3907875f, -0.5462993f, 0.4580512f,
                                      0.6992070f, -0.9237967f, 0.1982688f, -0.8745562f};
static const float gru_lens_y1[24] = {
    -0.2912174f, 0.0998413f, -0.5410934f, 0.3039035f, 0.5995968f, -0.9031062f,
    -0.0270655f, -0.8471963f, -0.2791424f, 0.5145799f, 0.0f, 0.0f,
    0.1710973f, -0.8431197f, 0.0f, 0.0f, -0.3928265f, 0.1526976f,
    0.0f, 0.0f, 0.8394806f, -0.7635547f, 0.0f, 0.0f};
static const float gru_lens_yh1[8] = {-0.3928265f, 0.1526976f, -0.5410934f, 0.3039035f,
                                      0.5995968f, -0.9031062f, -0.0270655f, -0.8471963f};

Test(engine_ops_rnn, gru_sequence_lens_zero_y_past_each_length_and_keep_its_state)
{
    float *xv = vals(12, 1), *wv = vals(24, 2), *rv = vals(24, 3), *bv = vals(24, 4),
          *hv = vals(8, 5);
    eng_tensor_t x = ft(xv, 3, DIMS(3, 2, 2)), w = ft(wv, 3, DIMS(2, 6, 2)),
                 r = ft(rv, 3, DIMS(2, 6, 2)), b = ft(bv, 2, DIMS(2, 12)),
                 h0 = ft(hv, 3, DIMS(2, 2, 2));
    eng_tensor_t lens = tensor(ENG_DT_INT32, (const int32_t[]){3, 1}, 1, DIMS(2));
    const eng_tensor_t *in[] = {&x, &w, &r, &b, &lens, &h0};
    for (int lbr = 0; lbr <= 1; lbr++) {
        eng_attr_t attrs[] = {attr_s("direction", "bidirectional"),
                              attr_i("linear_before_reset", lbr), attr_i("hidden_size", 2)};
        call_t c;
        run_ok(&c, "GRU", 14, attrs, 3, in, 6, 2);
        expect_out(&c, 0, 4, DIMS(3, 2, 2, 2), lbr ? gru_lens_y1 : gru_lens_y0, "Y");
        expect_out(&c, 1, 3, DIMS(2, 2, 2), lbr ? gru_lens_yh1 : gru_lens_yh0, "Y_h");
        call_free(&c);
    }
    free(xv), free(wv), free(rv), free(bv), free(hv);
}

/* --- LSTM --------------------------------------------------------------- */

/* X = 1, W = (i 1, o 0, f 2, c 1), R = 0, initial_c 0.5, P = (i 1, o 2,
 * f 0.5): i = sigmoid(1 + 0.5), f = sigmoid(2 + 0.25) (input_forget:
 * 1 - i), C = f 0.5 + i tanh(1), o = sigmoid(2 C), H = o tanh(C). */
Test(engine_ops_rnn, lstm_by_hand_with_peepholes_and_input_forget)
{
    eng_tensor_t x = ft(F(1), 3, DIMS(1, 1, 1)), w = ft(F(1, 0, 2, 1), 3, DIMS(1, 4, 1)),
                 r = ft(F(0, 0, 0, 0), 3, DIMS(1, 4, 1)), c0 = ft(F(0.5f), 3, DIMS(1, 1, 1)),
                 p = ft(F(1, 2, 0.5f), 2, DIMS(1, 3));
    const eng_tensor_t *in[] = {&x, &w, &r, NULL, NULL, NULL, &c0, &p};
    for (int coupled = 0; coupled <= 1; coupled++) {
        eng_attr_t attrs[] = {attr_i("input_forget", coupled)};
        call_t c;
        run_ok(&c, "LSTM", 22, attrs, 1, in, 8, 3);
        float i = sig(1.5f), f = coupled ? 1 - i : sig(2.25f);
        float cn = f * 0.5f + i * tanhf(1.0f), h = sig(2 * cn) * tanhf(cn);
        expect_out(&c, 0, 4, DIMS(1, 1, 1, 1), F(h), coupled ? "Y (coupled)" : "Y");
        expect_out(&c, 1, 3, DIMS(1, 1, 1), F(h), "Y_h");
        expect_out(&c, 2, 3, DIMS(1, 1, 1), F(cn), "Y_c");
        call_free(&c);
    }
}

/* What torch.onnx.export makes of nn.LSTM(2, 3, bidirectional=True) called
 * with (h0, c0): a bidirectional LSTM with B, initial_h and initial_c, seq
 * 3, batch 2, all three outputs. */
static const float lstm_bi_y[36] = {
    -0.3816399f, 0.0884981f, -0.1868303f, -0.4403742f, 0.0311181f, 0.2705826f,
    0.1349653f, -0.0798745f, -0.5739617f, 0.1593128f, 0.1684214f, -0.2429393f,
    -0.2479631f, 0.1330867f, -0.0189241f, -0.3440297f, 0.1069353f, 0.0685228f,
    0.1245812f, 0.0153371f, -0.3225165f, 0.0687659f, 0.0353085f, -0.4865820f,
    -0.2137431f, 0.1367109f, -0.0993828f, -0.3983686f, 0.1914543f, 0.1749835f,
    -0.0451654f, -0.1845833f, -0.6616107f, -0.0950480f, 0.1122217f, -0.3885473f};
static const float lstm_bi_yh[12] = {-0.2137431f, 0.1367109f, -0.0993828f, -0.3983686f,
                                     0.1914543f, 0.1749835f, 0.1349653f, -0.0798745f,
                                     -0.5739617f, 0.1593128f, 0.1684214f, -0.2429393f};
static const float lstm_bi_yc[12] = {-0.5604031f, 0.3919556f, -0.3259938f, -0.6627615f,
                                     0.3821654f, 0.5340722f, 0.4423242f, -0.3231774f,
                                     -0.9451481f, 0.3046820f, 0.5461994f, -0.4712884f};

/* dst [b, a, n] from src [a, b, n]. */
static void swap01(float *dst, const float *src, int64_t a, int64_t b, int64_t n)
{
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            memcpy(dst + (j * a + i) * n, src + (i * b + j) * n, (size_t)n * sizeof(float));
}

Test(engine_ops_rnn, lstm_bidirectional_batch2_seq3_with_initial_states_as_pytorch_exports)
{
    float *xv = vals(12, 1), *wv = vals(48, 2), *rv = vals(72, 3), *bv = vals(48, 4),
          *hv = vals(12, 5), *cv = vals(12, 6);
    eng_tensor_t x = ft(xv, 3, DIMS(3, 2, 2)), w = ft(wv, 3, DIMS(2, 12, 2)),
                 r = ft(rv, 3, DIMS(2, 12, 3)), b = ft(bv, 2, DIMS(2, 24)),
                 h0 = ft(hv, 3, DIMS(2, 2, 3)), c0 = ft(cv, 3, DIMS(2, 2, 3));
    const eng_tensor_t *in[] = {&x, &w, &r, &b, NULL, &h0, &c0};
    eng_attr_t attrs[] = {attr_s("direction", "bidirectional"), attr_i("hidden_size", 3)};
    call_t c;
    run_ok(&c, "LSTM", 7, attrs, 2, in, 7, 3);
    expect_out(&c, 0, 4, DIMS(3, 2, 2, 3), lstm_bi_y, "Y");
    expect_out(&c, 1, 3, DIMS(2, 2, 3), lstm_bi_yh, "Y_h");
    expect_out(&c, 2, 3, DIMS(2, 2, 3), lstm_bi_yc, "Y_c");
    call_free(&c);

    /* layout 1 (batch first, as batch_first=True exports): the same values
     * with batch moved to the front of X, the states and every output. */
    float xb[12], hb[12], cb[12], yb[36], yhb[12], ycb[12];
    swap01(xb, xv, 3, 2, 2);
    swap01(hb, hv, 2, 2, 3);
    swap01(cb, cv, 2, 2, 3);
    for (int t = 0; t < 3; t++) /* Y [seq, dirs, batch, H] -> [batch, seq, dirs, H] */
        for (int d = 0; d < 2; d++)
            for (int bi = 0; bi < 2; bi++)
                memcpy(yb + ((bi * 3 + t) * 2 + d) * 3, lstm_bi_y + ((t * 2 + d) * 2 + bi) * 3,
                       3 * sizeof(float));
    swap01(yhb, lstm_bi_yh, 2, 2, 3);
    swap01(ycb, lstm_bi_yc, 2, 2, 3);
    eng_tensor_t x1 = ft(xb, 3, DIMS(2, 3, 2)), h1 = ft(hb, 3, DIMS(2, 2, 3)),
                 c1 = ft(cb, 3, DIMS(2, 2, 3));
    const eng_tensor_t *in1[] = {&x1, &w, &r, &b, NULL, &h1, &c1};
    eng_attr_t attrs1[] = {attr_s("direction", "bidirectional"), attr_i("layout", 1)};
    run_ok(&c, "LSTM", 14, attrs1, 2, in1, 7, 3);
    expect_out(&c, 0, 4, DIMS(2, 3, 2, 3), yb, "layout 1 Y");
    expect_out(&c, 1, 3, DIMS(2, 2, 3), yhb, "layout 1 Y_h");
    expect_out(&c, 2, 3, DIMS(2, 2, 3), ycb, "layout 1 Y_c");
    call_free(&c);

    /* Each output is optional: Y_c alone is the same. */
    cr_assert_eq(call_infer_at(&c, "LSTM", 22, attrs, 2, in, 7, 3), 0, "%s", fs_errmsg());
    c.outputs[0] = c.outputs[1] = NULL;
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    expect_out(&c, 2, 3, DIMS(2, 2, 3), lstm_bi_yc, "Y_c alone");
    call_free(&c);
    free(xv), free(wv), free(rv), free(bv), free(hv), free(cv);
}

/* --- errors ------------------------------------------------------------- */

/* Infer on the small RNN with `attrs` gives `want`, naming `word`. */
static void expect_rnn_err(const eng_attr_t *attrs, int n_attrs, const eng_tensor_t *w, int want,
                           const char *word)
{
    eng_tensor_t x = ft(NULL, 3, DIMS(2, 1, 1)), r = ft(NULL, 3, DIMS(1, 1, 1)),
                 w1 = ft(NULL, 3, DIMS(1, 1, 1));
    const eng_tensor_t *in[] = {&x, w ? w : &w1, &r};
    call_t c;
    cr_expect_eq(call_infer_at(&c, "RNN", 22, attrs, n_attrs, in, 3, 2), want, "%s: %s", word,
                 fs_errmsg());
    cr_expect(strstr(fs_errmsg(), word) != NULL, "message names %s: %s", word, fs_errmsg());
}

Test(engine_ops_rnn, rnn_ops_reject_bad_shapes_and_attributes_naming_them)
{
    eng_attr_t dir[] = {attr_s("direction", "sideways")};
    expect_rnn_err(dir, 1, NULL, FS_EINVAL, "sideways");
    eng_tensor_t w2 = ft(NULL, 3, DIMS(2, 1, 1));
    expect_rnn_err(NULL, 0, &w2, FS_EINVAL, "input W");
    const char *swish[] = {"Swish"}, *two[] = {"Tanh", "Tanh"};
    eng_attr_t act[] = {attr_strs("activations", swish, 1)};
    expect_rnn_err(act, 1, NULL, FS_ENOTSUP, "Swish");
    eng_attr_t acts2[] = {attr_strs("activations", two, 2)};
    expect_rnn_err(acts2, 1, NULL, FS_EINVAL, "activations");
    eng_attr_t hs[] = {attr_i("hidden_size", 5)};
    expect_rnn_err(hs, 1, NULL, FS_EINVAL, "hidden_size");
    eng_attr_t clip[] = {attr_f("clip", 0.0f)};
    expect_rnn_err(clip, 1, NULL, FS_EINVAL, "clip");
    eng_attr_t layout[] = {attr_i("layout", 2)};
    expect_rnn_err(layout, 1, NULL, FS_EINVAL, "layout");
    /* Tanh reads no alpha: a value given is refused, not dropped. */
    eng_attr_t alpha[] = {attr_floats("activation_alpha", F(0.5f), 1)};
    expect_rnn_err(alpha, 1, NULL, FS_EINVAL, "activation_alpha has 1");

    /* int32 X: only float is computed. */
    eng_tensor_t xi = tensor(ENG_DT_INT32, NULL, 3, DIMS(2, 1, 1)),
                 w = ft(NULL, 3, DIMS(1, 1, 1));
    const eng_tensor_t *in_i[] = {&xi, &w, &w};
    call_t c;
    cr_expect_eq(call_infer_at(&c, "RNN", 22, NULL, 0, in_i, 3, 2), FS_ENOTSUP);

    /* A sequence length past seq_length fails the run, naming it. */
    eng_tensor_t x = ft(rnn_x, 3, DIMS(2, 1, 1)), wr = ft(rnn_w, 3, DIMS(1, 1, 1));
    eng_tensor_t lens = tensor(ENG_DT_INT32, (const int32_t[]){3}, 1, DIMS(1));
    const eng_tensor_t *in[] = {&x, &wr, &wr, NULL, &lens};
    cr_assert_eq(call_infer_at(&c, "RNN", 22, NULL, 0, in, 5, 2), 0, "%s", fs_errmsg());
    cr_expect_eq(call_run(&c), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "sequence_lens") != NULL, "message: %s", fs_errmsg());
    call_free(&c);
    eng_tensor_t lens2 = tensor(ENG_DT_INT32, NULL, 1, DIMS(2));
    const eng_tensor_t *in2[] = {&x, &wr, &wr, NULL, &lens2};
    cr_expect_eq(call_infer_at(&c, "RNN", 22, NULL, 0, in2, 5, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "sequence_lens") != NULL, "message: %s", fs_errmsg());
}
