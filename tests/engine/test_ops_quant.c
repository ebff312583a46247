/* test_ops_quant.c -- tests of the quantization ops (engine/ops/quant.c and
 * engine/cpu/quant_kernels.c): hand-checked cases of every quantization
 * granularity, the rounding (half to even) and the saturation, the integer
 * products with their zero points, float8 quantization (saturate on and
 * off, per axis, a zero point), the refusals (4-bit types, shapes that do
 * not fit), and a QDQ model (QuantizeLinear ->
 * DequantizeLinear -> Conv, with a DequantizeLinear'd int8 weight) run
 * end to end through the engine. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/half.h"
#include "model_fixture.h"
#include "onnx_build.h"
#include "op_case.h"

#define F32(...) ((const float[]){__VA_ARGS__})
#define U8(...) ((const uint8_t[]){__VA_ARGS__})
#define I8(...) ((const int8_t[]){__VA_ARGS__})
#define I32(...) ((const int32_t[]){__VA_ARGS__})

static const eng_shape_t scalar = {0};

/* Integer results of any 8- or 16-bit dtype, exactly. */
static void expect_ints(const eng_tensor_t *t, eng_dtype_t dt, const int32_t *want, int64_t n)
{
    cr_assert_eq(t->dtype, dt, "dtype %s, want %s", eng_dtype_name(t->dtype), eng_dtype_name(dt));
    cr_assert_eq(eng_shape_numel(&t->shape), n);
    for (int64_t i = 0; i < n; i++) {
        int32_t got = dt == ENG_DT_UINT8    ? ((const uint8_t *)t->data)[i]
                      : dt == ENG_DT_INT8   ? ((const int8_t *)t->data)[i]
                      : dt == ENG_DT_INT16  ? ((const int16_t *)t->data)[i]
                      : dt == ENG_DT_UINT16 ? ((const uint16_t *)t->data)[i]
                                            : ((const int32_t *)t->data)[i];
        cr_expect_eq(got, want[i], "element %lld: %d, want %d", (long long)i, got, want[i]);
    }
}

/* Byte results (float8 codes), exactly. */
static void expect_codes(const eng_tensor_t *t, eng_dtype_t dt, const uint8_t *want, int64_t n)
{
    cr_assert_eq(t->dtype, dt, "dtype %s, want %s", eng_dtype_name(t->dtype), eng_dtype_name(dt));
    cr_assert_eq(eng_shape_numel(&t->shape), n);
    for (int64_t i = 0; i < n; i++)
        cr_expect_eq(((const uint8_t *)t->data)[i], want[i], "element %lld: 0x%02x, want 0x%02x",
                     (long long)i, ((const uint8_t *)t->data)[i], want[i]);
}

/* --- QuantizeLinear ------------------------------------------------------------------------ */

Test(engine_ops_quant, quantize_rounds_half_to_even_and_saturates)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 9), F32(0, 1, 3, 5, -1, -3, 1000, -1000, 2.9f));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(2));
    eng_tensor_t z = ten(ENG_DT_UINT8, scalar, U8(128));
    op_case_t *c = case_new("QuantizeLinear", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT8, I32(128, 128, 130, 130, 128, 126, 255, 0, 129), 9);
    case_free(c);
    /* int8 with a negative zero point; saturation at -128. */
    eng_tensor_t x8 = ten(ENG_DT_FLOAT, shp(1, 4), F32(-64.5f, 63, 0.25f, 0.75f));
    eng_tensor_t s8 = ten(ENG_DT_FLOAT, shp(1, 1), F32(0.5f));
    eng_tensor_t z8 = ten(ENG_DT_INT8, shp(1, 1), I8(-1));
    c = case_new("QuantizeLinear", 10, 1);
    case_in(c, &x8);
    case_in(c, &s8);
    case_in(c, &z8);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_INT8, I32(-128, 125, -1, 1), 4);
    case_free(c);
}

Test(engine_ops_quant, quantize_per_axis_and_blocked)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), F32(1, 2, 4, -1, -3, 9));
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 3), F32(1, 2, 4));
    eng_tensor_t z = ten(ENG_DT_INT8, shp(1, 3), I8(0, 1, -1));
    op_case_t *c = case_new("QuantizeLinear", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_INT8, I32(1, 2, 0, -1, -1, 1), 6);
    case_free(c);
    /* Blocks of 2 along axis 1; no zero point: uint8. */
    eng_tensor_t xb = ten(ENG_DT_FLOAT, shp(2, 2, 4), F32(1, 1, 4, 5, 4, 8, 8, 8));
    eng_tensor_t sb = ten(ENG_DT_FLOAT, shp(2, 2, 2), F32(1, 2, 4, 8));
    c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &xb);
    case_in(c, &sb);
    case_attr(c, a_int("block_size", 2));
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT8, I32(1, 1, 2, 2, 1, 2, 1, 1), 8);
    case_free(c);
    /* A last block shorter than block_size: 5 elements, 3 scales. */
    eng_tensor_t xr = ten(ENG_DT_FLOAT, shp(2, 1, 5), F32(2, 2, 2, 2, 2));
    eng_tensor_t sr = ten(ENG_DT_FLOAT, shp(2, 1, 3), F32(1, 2, 4));
    c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &xr);
    case_in(c, &sr);
    case_attr(c, a_int("block_size", 2));
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT8, I32(2, 2, 1, 1, 0), 5);
    case_free(c);
}

Test(engine_ops_quant, quantize_output_dtype_and_half_inputs)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 3), F32(40000, -40000, 3));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(1));
    op_case_t *c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("output_dtype", ENG_DT_INT16));
    case_run(c);
    expect_ints(c->out[0], ENG_DT_INT16, I32(32767, -32768, 3), 3);
    case_free(c);
    /* float16 x and scale: 5 / 2 = 2.5 rounds to 2, 7 / 2 to 4. */
    uint16_t xh[2] = {eng_float_to_half(5), eng_float_to_half(7)};
    uint16_t sh[1] = {eng_float_to_half(2)};
    eng_tensor_t tx = ten(ENG_DT_FLOAT16, shp(1, 2), xh), ts = ten(ENG_DT_FLOAT16, scalar, sh);
    eng_tensor_t z = ten(ENG_DT_UINT16, scalar, (const uint16_t[]){1000});
    c = case_new("QuantizeLinear", 19, 1);
    case_in(c, &tx);
    case_in(c, &ts);
    case_in(c, &z);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT16, I32(1002, 1004), 2);
    case_free(c);
}

/* float8e4m3fn: x / 2 = {0, 1.5, -500, 500, 450, -0}. 450 rounds to the
 * largest finite 448 (0x7e) either way; +-500 rounds past it: 448 of its
 * sign with saturate, NaN (S.1111.111) without. No rint: 1.5 stays 1.5
 * (0x3c); a zero point of 0 is not added, so -0 stays -0 (0x80). */
Test(engine_ops_quant, quantize_to_float8_saturates_or_overflows)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 6), F32(0, 3, -1000, 1000, 900, -0.0f));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(2));
    eng_tensor_t z = ten(ENG_DT_FLOAT8E4M3FN, shp(1, 1), U8(0));
    for (int sat = 0; sat <= 1; sat++) {
        op_case_t *c = case_new("QuantizeLinear", 19, 1);
        case_in(c, &x);
        case_in(c, &s);
        case_in(c, &z);
        case_attr(c, a_int("saturate", sat));
        case_run(c);
        expect_codes(c->out[0], ENG_DT_FLOAT8E4M3FN,
                     sat ? U8(0x00, 0x3c, 0xfe, 0x7e, 0x7e, 0x80)
                         : U8(0x00, 0x3c, 0xff, 0x7f, 0x7e, 0x80), 6);
        case_free(c);
    }
    /* float8e5m2 from output_dtype (no zero point), saturate by default:
     * +-1e6 give +-57344 (S.11110.11); without saturate +-infinity
     * (S.11111.00). */
    eng_tensor_t x5 = ten(ENG_DT_FLOAT, shp(1, 3), F32(1e6f, -1e6f, 0.75f));
    eng_tensor_t s1 = ten(ENG_DT_FLOAT, scalar, F32(1));
    for (int sat = -1; sat <= 0; sat++) {
        op_case_t *c = case_new("QuantizeLinear", 21, 1);
        case_in(c, &x5);
        case_in(c, &s1);
        case_attr(c, a_int("output_dtype", ENG_DT_FLOAT8E5M2));
        if (sat == 0)
            case_attr(c, a_int("saturate", 0));
        case_run(c);
        expect_codes(c->out[0], ENG_DT_FLOAT8E5M2,
                     sat ? U8(0x7b, 0xfb, 0x3a) : U8(0x7c, 0xfc, 0x3a), 3);
        case_free(c);
    }
}

/* Per axis (axis 1, scales 1, 2, 4) to float8e4m3fnuz (bias 8), with a
 * zero point of 1 in the middle column, added in float before the
 * rounding: 2 / 2 + 1 = 2 and 32 / 2 + 1 = 17, which rounds to even 16. */
Test(engine_ops_quant, quantize_to_float8_per_axis_with_a_zero_point)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), F32(1, 2, 4, 8, 32, -32));
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 3), F32(1, 2, 4));
    eng_tensor_t z = ten(ENG_DT_FLOAT8E4M3FNUZ, shp(1, 3), U8(0x00, 0x40, 0x00));
    op_case_t *c = case_new("QuantizeLinear", 19, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_run(c);
    /* fnuz codes: 1 = 0x40, 2 = 0x48, 8 = 0x58, 16 = 0x60, -8 = 0xd8. */
    expect_codes(c->out[0], ENG_DT_FLOAT8E4M3FNUZ, U8(0x40, 0x48, 0x40, 0x58, 0x60, 0xd8), 6);
    case_free(c);
}

Test(engine_ops_quant, quantize_refuses_4bit_and_shapes_that_do_not_fit)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(2, 2, 3), F32(1, 2, 3, 4, 5, 6));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(1));
    op_case_t *c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("output_dtype", 22));
    expect_err(case_infer(c), FS_ENOTSUP, "int4");
    case_free(c);
    c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("output_dtype", 24));
    expect_err(case_infer(c), FS_ENOTSUP, "float8e8m0");
    case_free(c);
    eng_tensor_t z = ten(ENG_DT_UINT8, scalar, U8(0));
    c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_attr(c, a_int("output_dtype", ENG_DT_INT8));
    expect_err(case_infer(c), FS_EINVAL, "output_dtype");
    case_free(c);
    eng_tensor_t s2 = ten(ENG_DT_FLOAT, shp(1, 2), F32(1, 2));
    c = case_new("QuantizeLinear", 13, 1);
    case_in(c, &x);
    case_in(c, &s2);
    expect_err(case_infer(c), FS_EINVAL, "per axis");
    case_free(c);
    eng_tensor_t sb = ten(ENG_DT_FLOAT, shp(2, 2, 1), F32(1, 2));
    c = case_new("QuantizeLinear", 21, 1);
    case_in(c, &x);
    case_in(c, &sb);
    case_attr(c, a_int("block_size", 2));
    expect_err(case_infer(c), FS_EINVAL, "blocked by 2");
    case_free(c);
    c = case_new("QuantizeLinear", 23, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("precision", ENG_DT_INT32));
    expect_err(case_infer(c), FS_ENOTSUP, "precision");
    case_free(c);
}

/* --- DequantizeLinear ---------------------------------------------------------------------- */

Test(engine_ops_quant, dequantize_per_axis_int32_and_half_output)
{
    eng_tensor_t x = ten(ENG_DT_INT8, shp(2, 2, 2), I8(-128, 127, 0, 5));
    eng_tensor_t s = ten(ENG_DT_FLOAT, shp(1, 2), F32(0.5f, 2));
    eng_tensor_t z = ten(ENG_DT_INT8, shp(1, 2), I8(-128, 5));
    op_case_t *c = case_new("DequantizeLinear", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    expect_f32(c->out[0], F32(0, 127.5f, -10, 0), 4);
    case_free(c);
    eng_tensor_t xi = ten(ENG_DT_INT32, shp(1, 2), I32(INT32_MAX, -5));
    eng_tensor_t s1 = ten(ENG_DT_FLOAT, scalar, F32(1));
    c = case_new("DequantizeLinear", 10, 1);
    case_in(c, &xi);
    case_in(c, &s1);
    case_run(c);
    expect_f32(c->out[0], F32(2147483648.0f, -5), 2);
    case_free(c);
    /* output_dtype float16: the float product rounded once. */
    eng_tensor_t xu = ten(ENG_DT_UINT8, shp(1, 2), U8(1, 3));
    eng_tensor_t sf = ten(ENG_DT_FLOAT, scalar, F32(0.1f));
    c = case_new("DequantizeLinear", 23, 1);
    case_in(c, &xu);
    case_in(c, &sf);
    case_attr(c, a_int("output_dtype", ENG_DT_FLOAT16));
    case_run(c);
    cr_assert_eq(c->out[0]->dtype, ENG_DT_FLOAT16);
    const uint16_t *h = c->out[0]->data;
    cr_expect(h[0] == 0x2e66 && h[1] == 0x34cd, "float16 %04x %04x", h[0], h[1]);
    case_free(c);
}

Test(engine_ops_quant, dequantize_refuses_mismatched_zero_points_and_integer_outputs)
{
    eng_tensor_t x = ten(ENG_DT_INT8, shp(1, 2), I8(1, 2));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(1));
    eng_tensor_t z = ten(ENG_DT_UINT8, scalar, U8(0));
    op_case_t *c = case_new("DequantizeLinear", 13, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    expect_err(case_infer(c), FS_EINVAL, "x_zero_point");
    case_free(c);
    c = case_new("DequantizeLinear", 23, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_attr(c, a_int("output_dtype", ENG_DT_INT8));
    expect_err(case_infer(c), FS_ENOTSUP, "output_dtype");
    case_free(c);
}

/* float8e4m3fn with a zero point of 1 (0x38) and scale 2: codes 1, 1.5,
 * 448, -448 and NaN give (x - 1) * 2; a float16 scale gives float16. */
Test(engine_ops_quant, dequantize_float8_with_a_zero_point)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT8E4M3FN, shp(1, 5), U8(0x38, 0x3c, 0x7e, 0xfe, 0x7f));
    eng_tensor_t s = ten(ENG_DT_FLOAT, scalar, F32(2));
    eng_tensor_t z = ten(ENG_DT_FLOAT8E4M3FN, scalar, U8(0x38));
    op_case_t *c = case_new("DequantizeLinear", 19, 1);
    case_in(c, &x);
    case_in(c, &s);
    case_in(c, &z);
    case_run(c);
    expect_f32_near(c->out[0], F32(0, 1, 894, -898, NAN), 5);
    case_free(c);
    /* float8e5m2 per axis (axis 0) with float16 scales 0.5 and 4, no zero
     * point: -0 stays -0 (0x8000 in float16). */
    eng_tensor_t x5 = ten(ENG_DT_FLOAT8E5M2, shp(2, 2, 2), U8(0x3c, 0x80, 0x40, 0x7c));
    uint16_t sh[2] = {eng_float_to_half(0.5f), eng_float_to_half(4)};
    eng_tensor_t s5 = ten(ENG_DT_FLOAT16, shp(1, 2), sh);
    c = case_new("DequantizeLinear", 21, 1);
    case_in(c, &x5);
    case_in(c, &s5);
    case_attr(c, a_int("axis", 0));
    case_run(c);
    cr_assert_eq(c->out[0]->dtype, ENG_DT_FLOAT16);
    const uint16_t *h = c->out[0]->data;
    /* 1 * 0.5, -0 * 0.5, 2 * 4, inf * 4. */
    cr_expect(h[0] == 0x3800 && h[1] == 0x8000 && h[2] == 0x4800 && h[3] == 0x7c00,
              "float16 %04x %04x %04x %04x", h[0], h[1], h[2], h[3]);
    case_free(c);
}

/* --- DynamicQuantizeLinear ---------------------------------------------------------------- */

Test(engine_ops_quant, dynamic_quantize_takes_its_range_from_the_data)
{
    eng_tensor_t x = ten(ENG_DT_FLOAT, shp(1, 6), F32(0, 2, -3, -2.5f, 1.34f, 0.5f));
    op_case_t *c = case_new("DynamicQuantizeLinear", 11, 3);
    case_in(c, &x);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT8, I32(153, 255, 0, 26, 221, 179), 6);
    expect_f32(c->out[1], F32(5.0f / 255.0f), 1);
    expect_ints(c->out[2], ENG_DT_UINT8, I32(153), 1);
    expect_shape(c->out[1], scalar);
    case_free(c);
    /* All zeros: the range is empty, the scale 1 and the zero point 0. */
    eng_tensor_t zeros = ten(ENG_DT_FLOAT, shp(1, 3), F32(0, 0, 0));
    c = case_new("DynamicQuantizeLinear", 11, 3);
    case_in(c, &zeros);
    case_run(c);
    expect_ints(c->out[0], ENG_DT_UINT8, I32(0, 0, 0), 3);
    expect_f32(c->out[1], F32(1), 1);
    expect_ints(c->out[2], ENG_DT_UINT8, I32(0), 1);
    case_free(c);
}

/* --- MatMulInteger, QLinearMatMul ---------------------------------------------------------- */

Test(engine_ops_quant, matmul_integer_with_per_row_and_per_column_zero_points)
{
    eng_tensor_t a = ten(ENG_DT_UINT8, shp(2, 2, 3), U8(1, 2, 3, 4, 5, 6));
    eng_tensor_t b = ten(ENG_DT_UINT8, shp(2, 3, 2), U8(1, 2, 3, 4, 5, 6));
    eng_tensor_t za = ten(ENG_DT_UINT8, shp(1, 2), U8(0, 4));
    eng_tensor_t zb = ten(ENG_DT_UINT8, shp(1, 2), U8(0, 2));
    op_case_t *c = case_new("MatMulInteger", 10, 1);
    case_in(c, &a);
    case_in(c, &b);
    case_in(c, &za);
    case_in(c, &zb);
    case_run(c);
    expect_shape(c->out[0], shp(2, 2, 2));
    expect_i32(c->out[0], I32(22, 16, 13, 10), 4);
    case_free(c);
    /* int8 extremes, no zero points. */
    eng_tensor_t a8 = ten(ENG_DT_INT8, shp(2, 1, 2), I8(-128, 127));
    eng_tensor_t b8 = ten(ENG_DT_INT8, shp(2, 2, 1), I8(-128, -128));
    c = case_new("MatMulInteger", 10, 1);
    case_in(c, &a8);
    case_in(c, &b8);
    case_run(c);
    expect_i32(c->out[0], I32(128), 1);
    case_free(c);
}

Test(engine_ops_quant, matmul_integer_refuses_shapes_that_do_not_fit)
{
    eng_tensor_t a = ten(ENG_DT_UINT8, shp(2, 2, 3), U8(1, 2, 3, 4, 5, 6));
    eng_tensor_t b = ten(ENG_DT_UINT8, shp(2, 4, 2), U8(0));
    op_case_t *c = case_new("MatMulInteger", 10, 1);
    case_in(c, &a);
    case_in(c, &b);
    expect_err(case_infer(c), FS_EINVAL, "inner dims");
    case_free(c);
    eng_tensor_t b2 = ten(ENG_DT_UINT8, shp(2, 3, 2), U8(0));
    eng_tensor_t za = ten(ENG_DT_UINT8, shp(1, 3), U8(0, 0, 0));
    c = case_new("MatMulInteger", 10, 1);
    case_in(c, &a);
    case_in(c, &b2);
    case_in(c, &za);
    expect_err(case_infer(c), FS_EINVAL, "a_zero_point [3]");
    case_free(c);
    eng_tensor_t zb = ten(ENG_DT_INT8, scalar, I8(0));
    c = case_new("MatMulInteger", 10, 1);
    case_in(c, &a);
    case_in(c, &b2);
    case_in(c, NULL);
    case_in(c, &zb);
    expect_err(case_infer(c), FS_EINVAL, "b_zero_point has dtype int8");
    case_free(c);
}

Test(engine_ops_quant, qlinear_matmul_requantizes_half_to_even)
{
    eng_tensor_t a = ten(ENG_DT_UINT8, shp(2, 1, 2), U8(10, 20));
    eng_tensor_t as = ten(ENG_DT_FLOAT, scalar, F32(0.5f));
    eng_tensor_t az = ten(ENG_DT_UINT8, scalar, U8(10));
    eng_tensor_t b = ten(ENG_DT_UINT8, shp(2, 2, 2), U8(1, 2, 3, 4));
    eng_tensor_t bs = ten(ENG_DT_FLOAT, scalar, F32(0.25f));
    eng_tensor_t bz = ten(ENG_DT_UINT8, scalar, U8(0));
    eng_tensor_t ys = ten(ENG_DT_FLOAT, scalar, F32(0.5f));
    eng_tensor_t yz = ten(ENG_DT_UINT8, scalar, U8(101));
    op_case_t *c = case_new("QLinearMatMul", 10, 1);
    const eng_tensor_t *in[] = {&a, &as, &az, &b, &bs, &bz, &ys, &yz};
    for (size_t i = 0; i < N_OF(in); i++)
        case_in(c, in[i]);
    case_run(c);
    /* (a - 10) = [0, 10]; sums [30, 40]; * 0.5 * 0.25 / 0.5 = [7.5, 10];
     * + 101 = [108.5, 111]: the tie goes to the even 108. */
    expect_ints(c->out[0], ENG_DT_UINT8, I32(108, 111), 2);
    case_free(c);
}

/* --- ConvInteger, QLinearConv -------------------------------------------------------------- */

Test(engine_ops_quant, conv_integer_pads_with_the_zero_point)
{
    eng_tensor_t x = ten(ENG_DT_UINT8, shp(4, 1, 1, 3, 3), U8(2, 3, 4, 5, 6, 7, 8, 9, 10));
    eng_tensor_t w = ten(ENG_DT_UINT8, shp(4, 1, 1, 2, 2), U8(1, 1, 1, 1));
    eng_tensor_t xz = ten(ENG_DT_UINT8, scalar, U8(2));
    op_case_t *c = case_new("ConvInteger", 10, 1);
    case_in(c, &x);
    case_in(c, &w);
    case_in(c, &xz);
    case_attr(c, a_ints("pads", (const int64_t[]){1, 1, 1, 1}, 4));
    case_run(c);
    expect_shape(c->out[0], shp(4, 1, 1, 4, 4));
    expect_i32(c->out[0], I32(0, 1, 3, 2, 3, 8, 12, 7, 9, 20, 24, 13, 6, 13, 15, 8), 16);
    case_free(c);
    /* int8 with a per-output-channel weight zero point. */
    eng_tensor_t x8 = ten(ENG_DT_INT8, shp(4, 1, 1, 1, 2), I8(5, -5));
    eng_tensor_t w8 = ten(ENG_DT_INT8, shp(4, 2, 1, 1, 1), I8(3, -3));
    eng_tensor_t wz = ten(ENG_DT_INT8, shp(1, 2), I8(1, -1));
    c = case_new("ConvInteger", 10, 1);
    case_in(c, &x8);
    case_in(c, &w8);
    case_in(c, NULL);
    case_in(c, &wz);
    case_run(c);
    expect_i32(c->out[0], I32(10, -10, -10, 10), 4);
    case_free(c);
}

Test(engine_ops_quant, qlinear_conv_with_bias_and_per_channel_scales)
{
    eng_tensor_t x = ten(ENG_DT_UINT8, shp(4, 1, 1, 2, 2), U8(10, 20, 30, 40));
    eng_tensor_t xs = ten(ENG_DT_FLOAT, scalar, F32(0.5f));
    eng_tensor_t xz = ten(ENG_DT_UINT8, scalar, U8(10));
    eng_tensor_t w = ten(ENG_DT_INT8, shp(4, 2, 1, 1, 1), I8(1, -2));
    eng_tensor_t ws = ten(ENG_DT_FLOAT, shp(1, 2), F32(1, 0.5f));
    eng_tensor_t wz = ten(ENG_DT_INT8, scalar, I8(0));
    eng_tensor_t ys = ten(ENG_DT_FLOAT, scalar, F32(1));
    eng_tensor_t yz = ten(ENG_DT_UINT8, scalar, U8(128));
    eng_tensor_t bias = ten(ENG_DT_INT32, shp(1, 2), I32(5, -4));
    const eng_tensor_t *in[] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz, &bias};
    op_case_t *c = case_new("QLinearConv", 10, 1);
    for (size_t i = 0; i < N_OF(in); i++)
        case_in(c, in[i]);
    case_run(c);
    /* Channel 0: ([0, 10, 20, 30] + 5) * 0.5 = 2.5, 7.5, 12.5, 17.5 -> 2, 8,
     * 12, 18 (ties to even); channel 1: ([0, -20, -40, -60] - 4) * 0.25. */
    expect_ints(c->out[0], ENG_DT_UINT8, I32(130, 136, 140, 146, 127, 122, 117, 112), 8);
    case_free(c);
    /* A weight zero point of the wrong length. */
    eng_tensor_t wz3 = ten(ENG_DT_INT8, shp(1, 3), I8(0, 0, 0));
    in[5] = &wz3;
    c = case_new("QLinearConv", 10, 1);
    for (size_t i = 0; i < N_OF(in); i++)
        case_in(c, in[i]);
    expect_err(case_infer(c), FS_EINVAL, "w_zero_point [3]");
    case_free(c);
}

/* --- a QDQ model end to end ---------------------------------------------------------------- */

static void add_init(mb_t *b, const char *name, int dtype, int rank, const int64_t *dims,
                     const void *data, size_t bytes)
{
    Onnx__TensorProto *t = mb_tensor(b, name, dtype, rank, dims);
    mb_raw(b, t, data, bytes);
    mb_initializer(b, t);
}

/* y = Conv(DequantizeLinear(QuantizeLinear(x)), DequantizeLinear(w_q)):
 * the activation quantized to uint8 and back, the weight stored as int8. */
Test(engine_ops_quant, a_qdq_conv_model_runs_end_to_end)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){1, 1, 3, 3}, NULL);
    float s = 0.5f;
    uint8_t zp = 128;
    int8_t wq[4] = {2, 2, 2, 2}, wzp = 0;
    add_init(&b, "s", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, &s, sizeof s);
    add_init(&b, "zp", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &zp, sizeof zp);
    add_init(&b, "wq", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 4, (int64_t[]){1, 1, 2, 2}, wq,
             sizeof wq);
    add_init(&b, "wzp", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 0, NULL, &wzp, sizeof wzp);
    mb_node(&b, "QuantizeLinear", "q", "x,s,zp", "xq");
    mb_node(&b, "DequantizeLinear", "dq", "xq,s,zp", "xd");
    mb_node(&b, "DequantizeLinear", "dqw", "wq,s,wzp", "w");
    mb_node(&b, "Conv", "conv", "xd,w", "y");
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, -1, NULL);
    model_fixture_t f;
    model_fixture_cache(&f);
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    eng_model_config_t cfg = {.name = "qdq", .cache = f.cache};
    cr_assert_eq(eng_model_load_bytes(buf, len, NULL, &cfg, &f.model), 0, "%s", fs_errmsg());

    /* x / 0.5 = [0.2, 0.6, -0.4, 2, 2.52, -1.48, 4, 0, 0.5] rounds to
     * [0, 1, 0, 2, 3, -1, 4, 0, 0]: x comes back as half of that, and
     * the 2x2 kernel of ones sums each window. */
    eng_shape_t xs = {4, {1, 1, 3, 3}};
    eng_tensor_t *x = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &xs, &x), 0);
    memcpy(x->data, F32(0.1f, 0.3f, -0.2f, 1.0f, 1.26f, -0.74f, 2.0f, 0.0f, 0.25f),
           9 * sizeof(float));
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, x, 1, out), 0, "%s", fs_errmsg());
    expect_shape(out[0], shp(4, 1, 1, 2, 2));
    expect_f32(out[0], F32(3, 1.5f, 4.5f, 1), 4);
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}
