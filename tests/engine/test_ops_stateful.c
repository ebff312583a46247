/* test_ops_stateful.c -- the stateful sequence ops on the CPU
 * (engine/ops/stateful.c, engine/cpu/stateful_kernels.c): hand-computed
 * CausalConvWithState and LinearAttention cases, including the state they
 * carry from one call to the next, and the shapes and attributes they
 * refuse with a message naming what is wrong. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "op_call.h"

#define OPSET 27

static void expect_floats(const eng_tensor_t *t, const float *want, int n, const char *what)
{
    const float *got = t->data;
    cr_assert_eq(eng_shape_numel(&t->shape), n, "%s has %lld elements, want %d", what,
                 (long long)eng_shape_numel(&t->shape), n);
    for (int i = 0; i < n; i++)
        cr_expect(fabsf(got[i] - want[i]) <= 1e-5f * fabsf(want[i]) + 1e-6f,
                  "%s[%d] = %.7g, want %.7g", what, i, (double)got[i], (double)want[i]);
}

/* input [1, 2, 3], weight [2, 1, 2] (k = 2), bias and a one-element past:
 * channel 0: seq = 5 | 1 2 3, w = (1, 10): y = 5+10, 1+20, 2+30 (+ bias 1);
 * channel 1: seq = -1 | 4 5 6, w = (2, -1): y = -2-4, 8-5, 10-6 (+ bias 0). */
Test(ops_stateful, causal_conv_carries_its_state)
{
    const float x[6] = {1, 2, 3, 4, 5, 6}, w[4] = {1, 10, 2, -1}, b[2] = {1, 0};
    const float past[2] = {5, -1};
    eng_tensor_t xt = tensor(ENG_DT_FLOAT, x, 3, (int64_t[]){1, 2, 3});
    eng_tensor_t wt = tensor(ENG_DT_FLOAT, w, 3, (int64_t[]){2, 1, 2});
    eng_tensor_t bt = tensor(ENG_DT_FLOAT, b, 1, (int64_t[]){2});
    eng_tensor_t pt = tensor(ENG_DT_FLOAT, past, 3, (int64_t[]){1, 2, 1});
    const eng_tensor_t *in[4] = {&xt, &wt, &bt, &pt};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "CausalConvWithState", OPSET, NULL, 0, in, 4, 2), 0, "%s",
                 fs_errmsg());
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    expect_floats(&c.outs[0], (const float[]){16, 22, 33, -6, 3, 4}, 6, "output");
    expect_floats(&c.outs[1], (const float[]){3, 6}, 2, "present_state");
    call_free(&c);
}

/* No past (zeros), no bias, SiLU: y = silu(w0 * prev + w1 * cur). */
Test(ops_stateful, causal_conv_without_past_and_with_silu)
{
    const float x[3] = {1, -2, 0.5f}, w[2] = {0.5f, 1};
    eng_tensor_t xt = tensor(ENG_DT_FLOAT, x, 3, (int64_t[]){1, 1, 3});
    eng_tensor_t wt = tensor(ENG_DT_FLOAT, w, 3, (int64_t[]){1, 1, 2});
    const eng_tensor_t *in[2] = {&xt, &wt};
    eng_attr_t a[1] = {attr_s("activation", "silu")};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "CausalConvWithState", OPSET, a, 1, in, 2, 2), 0, "%s",
                 fs_errmsg());
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    float pre[3] = {1, 0.5f - 2, -1 + 0.5f}, want[3];
    for (int i = 0; i < 3; i++)
        want[i] = pre[i] / (1 + expf(-pre[i]));
    expect_floats(&c.outs[0], want, 3, "output");
    expect_floats(&c.outs[1], (const float[]){0.5f}, 1, "present_state");
    call_free(&c);
}

Test(ops_stateful, causal_conv_refuses_what_does_not_fit)
{
    const float x[6] = {0}, w[4] = {0};
    eng_tensor_t xt = tensor(ENG_DT_FLOAT, x, 3, (int64_t[]){1, 2, 3});
    eng_tensor_t w_bad = tensor(ENG_DT_FLOAT, w, 3, (int64_t[]){2, 2, 1});
    eng_tensor_t wt = tensor(ENG_DT_FLOAT, w, 3, (int64_t[]){2, 1, 2});
    eng_tensor_t past_bad = tensor(ENG_DT_FLOAT, x, 3, (int64_t[]){1, 2, 3});
    call_t c;
    const eng_tensor_t *in1[2] = {&xt, &w_bad};
    cr_expect_eq(call_infer_at(&c, "CausalConvWithState", OPSET, NULL, 0, in1, 2, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 1 has shape [2,2,1]; it must be [2, 1, k]"), "%s",
              fs_errmsg());
    const eng_tensor_t *in2[4] = {&xt, &wt, NULL, &past_bad};
    cr_expect_eq(call_infer_at(&c, "CausalConvWithState", OPSET, NULL, 0, in2, 4, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 3 has shape [1,2,3]; it must be [1, 2, 1]"), "%s",
              fs_errmsg());
    eng_attr_t a[1] = {attr_s("activation", "gelu")};
    const eng_tensor_t *in3[2] = {&xt, &wt};
    cr_expect_eq(call_infer_at(&c, "CausalConvWithState", OPSET, a, 1, in3, 2, 2), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "activation 'gelu' is not supported"), "%s", fs_errmsg());
}

/* One head, d_k = d_v = 1, rule linear, scale 1: S accumulates k*v and each
 * output is q * S. */
Test(ops_stateful, linear_attention_linear_rule_accumulates)
{
    const float q[3] = {1, 2, 3}, k[3] = {1, 1, 2}, v[3] = {2, 3, 1};
    eng_tensor_t qt = tensor(ENG_DT_FLOAT, q, 3, (int64_t[]){1, 3, 1});
    eng_tensor_t kt = tensor(ENG_DT_FLOAT, k, 3, (int64_t[]){1, 3, 1});
    eng_tensor_t vt = tensor(ENG_DT_FLOAT, v, 3, (int64_t[]){1, 3, 1});
    const eng_tensor_t *in[3] = {&qt, &kt, &vt};
    eng_attr_t a[4] = {attr_i("q_num_heads", 1), attr_i("kv_num_heads", 1),
                       attr_s("update_rule", "linear"), attr_f("scale", 1.0f)};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "LinearAttention", OPSET, a, 4, in, 3, 2), 0, "%s",
                 fs_errmsg());
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    /* S: 2, 5, 7; outputs 1*2, 2*5, 3*7. */
    expect_floats(&c.outs[0], (const float[]){2, 10, 21}, 3, "output");
    expect_floats(&c.outs[1], (const float[]){7}, 1, "present_state");
    call_free(&c);
}

/* gated_delta with a past state, two query heads sharing one KV head,
 * d_k = 2, d_v = 1, one step, default scale 1/sqrt(2):
 * S = exp(g) * S0 = (1, 2) * (e^0, e^ln2) = (1, 4);
 * v' = beta * (v - S . k) = 0.5 * (3 - (1*1 + 4*0.5)) = 0;
 * S = S + k v' = (1, 4); o_h = scale * q_h . S. */
Test(ops_stateful, linear_attention_gated_delta_with_groups_and_past)
{
    const float q[4] = {1, 0, 0, 1}, k[2] = {1, 0.5f}, v[1] = {3}, past[2] = {1, 2};
    const float g[2] = {0, logf(2)}, beta[1] = {0.5f};
    eng_tensor_t qt = tensor(ENG_DT_FLOAT, q, 3, (int64_t[]){1, 1, 4});
    eng_tensor_t kt = tensor(ENG_DT_FLOAT, k, 3, (int64_t[]){1, 1, 2});
    eng_tensor_t vt = tensor(ENG_DT_FLOAT, v, 3, (int64_t[]){1, 1, 1});
    eng_tensor_t pt = tensor(ENG_DT_FLOAT, past, 4, (int64_t[]){1, 1, 2, 1});
    eng_tensor_t gt = tensor(ENG_DT_FLOAT, g, 3, (int64_t[]){1, 1, 2});
    eng_tensor_t bt = tensor(ENG_DT_FLOAT, beta, 3, (int64_t[]){1, 1, 1});
    const eng_tensor_t *in[6] = {&qt, &kt, &vt, &pt, &gt, &bt};
    eng_attr_t a[2] = {attr_i("q_num_heads", 2), attr_i("kv_num_heads", 1)};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "LinearAttention", OPSET, a, 2, in, 6, 2), 0, "%s",
                 fs_errmsg());
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    float s = 1.0f / sqrtf(2.0f);
    expect_floats(&c.outs[0], (const float[]){1 * s, 4 * s}, 2, "output");
    expect_floats(&c.outs[1], (const float[]){1, 4}, 2, "present_state");
    call_free(&c);
}

Test(ops_stateful, linear_attention_refuses_inputs_its_rule_does_not_read)
{
    const float z[8] = {0};
    eng_tensor_t qt = tensor(ENG_DT_FLOAT, z, 3, (int64_t[]){1, 1, 2});
    eng_tensor_t gt = tensor(ENG_DT_FLOAT, z, 3, (int64_t[]){1, 1, 1});
    const eng_tensor_t *in[5] = {&qt, &qt, &qt, NULL, &gt};
    eng_attr_t a[3] = {attr_i("q_num_heads", 1), attr_i("kv_num_heads", 1),
                       attr_s("update_rule", "linear")};
    call_t c;
    cr_expect_eq(call_infer_at(&c, "LinearAttention", OPSET, a, 3, in, 5, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "update_rule 'linear' takes no decay"), "%s", fs_errmsg());
    eng_attr_t bad[2] = {attr_i("q_num_heads", 3), attr_i("kv_num_heads", 2)};
    cr_expect_eq(call_infer_at(&c, "LinearAttention", OPSET, bad, 2, in, 3, 2), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "q_num_heads (3) must be a positive multiple of kv_num_heads "
                                  "(2)"),
              "%s", fs_errmsg());
    eng_attr_t rule[3] = {attr_i("q_num_heads", 1), attr_i("kv_num_heads", 1),
                          attr_s("update_rule", "mamba")};
    cr_expect_eq(call_infer_at(&c, "LinearAttention", OPSET, rule, 3, in, 3, 2), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "update_rule 'mamba' is not supported"), "%s", fs_errmsg());
}
