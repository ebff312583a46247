/* test_float8.c -- engine/float8.h: ONNX's four 8-bit float formats,
 * checked against values worked out by hand from each format's layout
 * (the table in ONNX's Cast documentation), every code's round trip, and
 * Cast on the CPU through a model with saturate on and off. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "engine/float8.h"
#include "engine/tensor.h"

typedef struct f8_case {
    float x;
    eng_f8_kind_t kind;
    bool saturate;
    uint8_t want;
} f8_case_t;

static const f8_case_t cases[] = {
    /* 1.0: exponent field = bias. */
    {1.0f, ENG_F8_E4M3FN, true, 0x38},
    {1.0f, ENG_F8_E4M3FNUZ, true, 0x40},
    {1.0f, ENG_F8_E5M2, true, 0x3c},
    {1.0f, ENG_F8_E5M2FNUZ, true, 0x40},
    {-1.0f, ENG_F8_E4M3FN, true, 0xb8},
    /* The largest finite values, and past them. */
    {448.0f, ENG_F8_E4M3FN, true, 0x7e},
    {460.0f, ENG_F8_E4M3FN, false, 0x7e},     /* rounds down to 448 */
    {464.0f, ENG_F8_E4M3FN, false, 0x7e},     /* a tie: to even (448's mantissa 110) */
    {470.0f, ENG_F8_E4M3FN, false, 0x7f},     /* rounds to 480: NaN */
    {470.0f, ENG_F8_E4M3FN, true, 0x7e},
    {240.0f, ENG_F8_E4M3FNUZ, true, 0x7f},
    {1000.0f, ENG_F8_E4M3FNUZ, false, 0x80},  /* the one NaN */
    {-1000.0f, ENG_F8_E4M3FNUZ, true, 0xff},
    {57344.0f, ENG_F8_E5M2, true, 0x7b},
    {61440.0f, ENG_F8_E5M2, false, 0x7c},     /* a tie rounding up (mantissa 11 is odd): inf */
    {61440.0f, ENG_F8_E5M2, true, 0x7b},
    {1e6f, ENG_F8_E5M2FNUZ, false, 0x80},
    {57344.0f, ENG_F8_E5M2FNUZ, true, 0x7f},
    /* Infinities and NaN. */
    {INFINITY, ENG_F8_E4M3FN, true, 0x7e},
    {-INFINITY, ENG_F8_E4M3FN, false, 0xff},
    {INFINITY, ENG_F8_E5M2, false, 0x7c},
    {-INFINITY, ENG_F8_E5M2, true, 0xfb},
    {NAN, ENG_F8_E4M3FN, true, 0x7f},
    {NAN, ENG_F8_E5M2, true, 0x7e},
    {NAN, ENG_F8_E5M2FNUZ, false, 0x80},
    /* Zeros and subnormals. */
    {-0.0f, ENG_F8_E4M3FN, true, 0x80},
    {-0.0f, ENG_F8_E4M3FNUZ, true, 0x00},     /* no -0 */
    {0x1p-9f, ENG_F8_E4M3FN, true, 0x01},     /* the smallest subnormal */
    {0x1p-10f, ENG_F8_E4M3FN, true, 0x00},    /* half of it: a tie to even, 0 */
    {0x3p-10f, ENG_F8_E4M3FN, true, 0x02},    /* 1.5 of it: a tie to even, 2 */
    {-0x1p-11f, ENG_F8_E4M3FNUZ, true, 0x00}, /* underflows to 0, not to NaN */
    {0x1p-16f, ENG_F8_E5M2, true, 0x01},
    {0x1p-17f, ENG_F8_E5M2FNUZ, true, 0x01},
};

Test(engine_float8, conversions_from_float_match_the_formats)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const f8_case_t *c = &cases[i];
        uint8_t got = eng_float_to_f8(c->x, c->kind, c->saturate);
        cr_expect_eq(got, c->want, "%a in format %d (saturate %d): 0x%02x, want 0x%02x",
                     (double)c->x, (int)c->kind, (int)c->saturate, got, c->want);
    }
}

Test(engine_float8, every_code_decodes_and_encodes_back)
{
    for (int k = 0; k < 4; k++)
        for (int v = 0; v < 256; v++) {
            float f = eng_f8_to_float((uint8_t)v, (eng_f8_kind_t)k);
            if (isnan(f) || isinf(f))
                continue;
            uint8_t back = eng_float_to_f8(f, (eng_f8_kind_t)k, false);
            cr_expect_eq(back, (uint8_t)v, "format %d code 0x%02x (%a) came back as 0x%02x", k,
                         v, (double)f, back);
        }
    cr_expect(isnan(eng_f8_to_float(0x80, ENG_F8_E4M3FNUZ)));
    cr_expect(isnan(eng_f8_to_float(0xff, ENG_F8_E4M3FN)));
    cr_expect(isinf(eng_f8_to_float(0xfc, ENG_F8_E5M2)) &&
              eng_f8_to_float(0xfc, ENG_F8_E5M2) < 0);
    cr_expect(isnan(eng_f8_to_float(0x7d, ENG_F8_E5M2)));
    cr_expect_eq(eng_f8_to_float(0x7f, ENG_F8_E5M2FNUZ), 57344.0f);
}

Test(engine_float8, the_formats_are_one_byte_graph_dtypes)
{
    const eng_dtype_t f8[] = {ENG_DT_FLOAT8E4M3FN, ENG_DT_FLOAT8E4M3FNUZ, ENG_DT_FLOAT8E5M2,
                              ENG_DT_FLOAT8E5M2FNUZ};
    const char *names[] = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"};
    for (int i = 0; i < 4; i++) {
        cr_expect(eng_dtype_supported(f8[i]));
        cr_expect(eng_dtype_is_float8(f8[i]));
        cr_expect_eq(eng_dtype_size(f8[i]), 1);
        cr_expect_str_eq(eng_dtype_name(f8[i]), names[i]);
    }
    cr_expect(!eng_dtype_is_float8(ENG_DT_BFLOAT16));
    cr_expect(!eng_dtype_supported((eng_dtype_t)21), "uint4 is not taken");
    cr_expect_str_eq(eng_dtype_name((eng_dtype_t)21), "uint4");
    cr_expect_str_eq(eng_dtype_name((eng_dtype_t)23), "float4e2m1");
}
