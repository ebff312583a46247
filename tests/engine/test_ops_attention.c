/* test_ops_attention.c -- tests of engine/ops/attention.c, RMSNormalization
 * (engine/ops/nn.c) and their CPU kernels (engine/cpu/attention_kernels.c,
 * norm_kernels.c): small cases checked by hand, and the errors a bad node
 * or bad data gives. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/op.h"
#include "op_case.h"

#define LN3 1.0986123f

/* Keys [0, ln 3] and values [4, 8] (D = Dv = 1, scale 1): a query of 1
 * weighs them 1/4 and 3/4 (y = 7), one that sees only key 0 gives 4. */
static const float k2[] = {0, LN3}, v2[] = {4, 8};

static op_case_t *attention_case(int opset, int n_out, const eng_tensor_t *q,
                                 const eng_tensor_t *k, const eng_tensor_t *v)
{
    op_case_t *c = case_new("Attention", opset, n_out);
    case_in(c, q);
    case_in(c, k);
    case_in(c, v);
    case_attr(c, a_float("scale", 1.0f));
    return c;
}

Test(engine_ops_attention, softmax_weights_values_and_causal_masks_the_future)
{
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), (const float[]){1, 1});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), k2);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), v2);
    op_case_t *c = attention_case(23, 1, &q, &k, &v);
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 2, 1));
    expect_f32_near(c->out[0], (const float[]){7, 7}, 2);
    case_free(c);
    c = attention_case(23, 1, &q, &k, &v);
    case_attr(c, a_int("is_causal", 1));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){4, 7}, 2);
    case_free(c);
}

Test(engine_ops_attention, causal_frontier_shifts_by_the_past_and_present_concatenates)
{
    /* One new query after one cached key: it sees both keys. */
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), (const float[]){1});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), &k2[1]);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), &v2[1]);
    eng_tensor_t pk = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), &k2[0]);
    eng_tensor_t pv = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), &v2[0]);
    op_case_t *c = attention_case(23, 3, &q, &k, &v);
    case_in(c, NULL);
    case_in(c, &pk);
    case_in(c, &pv);
    case_attr(c, a_int("is_causal", 1));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){7}, 1);
    expect_shape(c->out[1], shp(4, 1, 1, 2, 1));
    expect_f32(c->out[1], k2, 2);
    expect_f32(c->out[2], v2, 2);
    case_free(c);
}

Test(engine_ops_attention, nonpad_kv_seqlen_hides_padding_and_sets_the_causal_offset)
{
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), (const float[]){1});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), k2);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), v2);
    eng_tensor_t one = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){1});
    eng_tensor_t two = ten(ENG_DT_INT64, shp(1, 1), (const int64_t[]){2});
    const eng_tensor_t *lens[] = {&one, &two};
    const float want[] = {4, 7};
    for (int t = 0; t < 2; t++) {
        op_case_t *c = attention_case(24, 1, &q, &k, &v);
        for (int i = 0; i < 3; i++)
            case_in(c, NULL);
        case_in(c, lens[t]);
        case_attr(c, a_int("is_causal", 1)); /* offset = nonpad - 1: the last valid key */
        case_run(c);
        expect_f32_near(c->out[0], &want[t], 1);
        case_free(c);
    }
}

Test(engine_ops_attention, fully_masked_row_is_zero_and_modes_expose_each_stage)
{
    /* Row 0's bool mask is all false; row 1 sees both keys. */
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), (const float[]){1, 1});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), k2);
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), v2);
    eng_tensor_t m = ten(ENG_DT_BOOL, shp(2, 2, 2), (const uint8_t[]){0, 0, 1, 1});
    op_case_t *c = attention_case(23, 4, &q, &k, &v);
    case_in(c, &m);
    case_attr(c, a_int("qk_matmul_output_mode", 3));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){0, 7}, 2);
    expect_shape(c->out[3], shp(4, 1, 1, 2, 2));
    expect_f32_near(c->out[3], (const float[]){0, 0, 0.25f, 0.75f}, 4);
    case_free(c);
    /* A float mask [0, -1] and softcap 1: mode 0 the raw scores, 1 the
     * capped ones, 2 capped plus mask. */
    eng_tensor_t fm = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){0, -1});
    const float t = tanhf(LN3);
    const float want[3][4] = {{0, LN3, 0, LN3}, {0, t, 0, t}, {0, t - 1, 0, t - 1}};
    for (int mode = 0; mode < 3; mode++) {
        c = attention_case(23, 4, &q, &k, &v);
        case_in(c, &fm);
        case_attr(c, a_int("qk_matmul_output_mode", mode));
        case_attr(c, a_float("softcap", 1.0f));
        case_run(c);
        expect_f32_near(c->out[3], want[mode], 4);
        case_free(c);
    }
}

Test(engine_ops_attention, three_d_inputs_split_heads_and_groups_share_kv_heads)
{
    /* [B=1, S, heads * 1]: head 0's query 1 weighs keys 0, ln 3; head 1's
     * query 0 weighs its keys evenly. */
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(3, 1, 1, 2), (const float[]){1, 0});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(3, 1, 2, 2), (const float[]){0, 0, LN3, 0});
    eng_tensor_t v = ten(ENG_DT_FLOAT, shp(3, 1, 2, 2), (const float[]){4, 1, 8, 3});
    op_case_t *c = attention_case(23, 1, &q, &k, &v);
    case_attr(c, a_int("q_num_heads", 2));
    case_attr(c, a_int("kv_num_heads", 2));
    case_run(c);
    expect_shape(c->out[0], shp(3, 1, 1, 2));
    expect_f32_near(c->out[0], (const float[]){7, 2}, 2);
    case_free(c);
    /* Two query heads on one kv head: both read keys [0, ln 3]. */
    eng_tensor_t q4 = ten(ENG_DT_FLOAT, shp(4, 1, 2, 1, 1), (const float[]){1, 0});
    eng_tensor_t k4 = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), k2);
    eng_tensor_t v4 = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), v2);
    c = attention_case(23, 1, &q4, &k4, &v4);
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){7, 6}, 2);
    case_free(c);
}

Test(engine_ops_attention, refuses_shapes_that_do_not_fit)
{
    eng_tensor_t q3 = ten(ENG_DT_FLOAT, shp(3, 1, 1, 2), (const float[]){1, 0});
    op_case_t *c = attention_case(23, 1, &q3, &q3, &q3);
    expect_err(case_infer(c), FS_EINVAL, "q_num_heads");
    case_free(c);
    eng_tensor_t q = ten(ENG_DT_FLOAT, shp(4, 1, 3, 1, 1), (const float[]){1, 1, 1});
    eng_tensor_t k = ten(ENG_DT_FLOAT, shp(4, 1, 2, 2, 1), (const float[]){0, 0, 0, 0});
    c = attention_case(23, 1, &q, &k, &k);
    expect_err(case_infer(c), FS_EINVAL, "not a multiple of 2");
    case_free(c);
    eng_tensor_t q1 = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 1), (const float[]){1});
    eng_tensor_t k1 = ten(ENG_DT_FLOAT, shp(4, 1, 1, 2, 1), k2);
    eng_tensor_t long_mask = ten(ENG_DT_BOOL, shp(1, 3), (const uint8_t[]){1, 1, 1});
    c = attention_case(23, 1, &q1, &k1, &k1);
    case_in(c, &long_mask);
    expect_err(case_infer(c), FS_EINVAL, "covers 3 keys");
    case_free(c);
    c = attention_case(23, 1, &q1, &k1, &k1);
    case_attr(c, a_int("qk_matmul_output_mode", 4));
    expect_err(case_infer(c), FS_EINVAL, "qk_matmul_output_mode");
    case_free(c);
}

/* --- RotaryEmbedding ----------------------------------------------------------------------- */

/* X [1, 1, 1, 4] = 1..4 at position 0, whose angles have cos [0, 1] and
 * sin [1, 0]: the first pair turns a quarter, the second not at all. */
static const float rx[] = {1, 2, 3, 4}, rcos[] = {0, 1}, rsin[] = {1, 0};

Test(engine_ops_attention, rotary_halves_interleaved_and_partial)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 4), rx);
    eng_tensor_t cs = ten(ENG_DT_FLOAT, shp(2, 1, 2), rcos), sn = ten(ENG_DT_FLOAT, shp(2, 1, 2), rsin);
    eng_tensor_t ids = ten(ENG_DT_INT64, shp(2, 1, 1), (const int64_t[]){0});
    const float want[2][4] = {{-3, 2, 1, 4}, {-2, 1, 3, 4}};
    for (int il = 0; il < 2; il++) {
        op_case_t *c = case_new("RotaryEmbedding", 23, 1);
        case_in(c, &x);
        case_in(c, &cs);
        case_in(c, &sn);
        case_in(c, &ids);
        case_attr(c, a_int("interleaved", il));
        case_run(c);
        expect_f32_near(c->out[0], want[il], 4);
        case_free(c);
    }
    /* Rotary dim 2 without ids: a [B, S, 1] cache; the last two copied. */
    eng_tensor_t cs1 = ten(ENG_DT_FLOAT, shp(3, 1, 1, 1), rcos);
    eng_tensor_t sn1 = ten(ENG_DT_FLOAT, shp(3, 1, 1, 1), rsin);
    op_case_t *c = case_new("RotaryEmbedding", 23, 1);
    case_in(c, &x);
    case_in(c, &cs1);
    case_in(c, &sn1);
    case_attr(c, a_int("rotary_embedding_dim", 2));
    case_run(c);
    expect_f32_near(c->out[0], (const float[]){-2, 1, 3, 4}, 4);
    case_free(c);
}

Test(engine_ops_attention, rotary_refuses_a_bad_cache_and_a_bad_position)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(4, 1, 1, 1, 4), rx);
    eng_tensor_t cs = ten(ENG_DT_FLOAT, shp(2, 1, 1), rcos), sn = ten(ENG_DT_FLOAT, shp(2, 1, 1), rsin);
    eng_tensor_t ids = ten(ENG_DT_INT64, shp(2, 1, 1), (const int64_t[]){0});
    op_case_t *c = case_new("RotaryEmbedding", 23, 1);
    case_in(c, &x);
    case_in(c, &cs);
    case_in(c, &sn);
    case_in(c, &ids);
    expect_err(case_infer(c), FS_EINVAL, "cos_cache [1,1]");
    case_free(c);
    eng_tensor_t cs2 = ten(ENG_DT_FLOAT, shp(2, 1, 2), rcos), sn2 = ten(ENG_DT_FLOAT, shp(2, 1, 2), rsin);
    eng_tensor_t far = ten(ENG_DT_INT64, shp(2, 1, 1), (const int64_t[]){1});
    c = case_new("RotaryEmbedding", 23, 1);
    case_in(c, &x);
    case_in(c, &cs2);
    case_in(c, &sn2);
    case_in(c, &far);
    cr_assert_eq(case_infer(c), 0);
    float out[4] = {-1, -1, -1, -1};
    c->out[0]->data = out;
    expect_err(c->kernel->run(&c->ctx), FS_EINVAL, "position_ids[0] is 1");
    cr_expect_eq(out[0], -1, "output written on error");
    c->out[0]->data = NULL;
    case_free(c);
}

/* --- SwiGLU, RMSNormalization -------------------------------------------------------------- */

Test(engine_ops_attention, swiglu_gates_b_by_swish_of_a)
{
    eng_tensor_t a = ten(ENG_DT_FLOAT, shp(1, 3), (const float[]){0, 1, -2});
    eng_tensor_t b = ten(ENG_DT_FLOAT, shp(1, 3), (const float[]){2, 3, 1});
    op_case_t *c = case_new("SwiGLU", 28, 1);
    case_in(c, &a);
    case_in(c, &b);
    case_attr(c, a_float("alpha", 0.5f));
    case_run(c);
    expect_f32_near(c->out[0],
                    (const float[]){0, 3 / (1 + expf(-0.5f)), -2 / (1 + expf(1.0f))}, 3);
    case_free(c);
    eng_tensor_t b2 = ten(ENG_DT_FLOAT, shp(2, 1, 3), (const float[]){2, 3, 1});
    c = case_new("SwiGLU", 28, 1);
    case_in(c, &a);
    case_in(c, &b2);
    expect_err(case_infer(c), FS_EINVAL, "no broadcasting");
    case_free(c);
}

Test(engine_ops_attention, rmsnorm_divides_by_root_mean_square)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 2), (const float[]){3, 4, 0, 2});
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 2), (const float[]){1, 2});
    op_case_t *c = case_new("RMSNormalization", 23, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_float("epsilon", 0.0f));
    case_run(c);
    const float r = sqrtf(12.5f), r2 = sqrtf(2.0f);
    expect_f32_near(c->out[0], (const float[]){3 / r, 8 / r, 0, 4 / r2}, 4);
    case_free(c);
    eng_tensor_t s3 = ten(ENG_DT_FLOAT, shp(1, 3), (const float[]){1, 2, 3});
    c = case_new("RMSNormalization", 23, 1);
    case_in(c, &x);
    case_in(c, &s3);
    expect_err(case_infer(c), FS_EINVAL, "does not broadcast");
    case_free(c);
    c = case_new("RMSNormalization", 23, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("stash_type", 7));
    expect_err(case_infer(c), FS_EINVAL, "stash_type");
    case_free(c);
}
