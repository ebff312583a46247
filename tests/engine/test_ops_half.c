/* test_ops_half.c -- float16 and bfloat16 through the element-wise ops'
 * own kernels (engine/cpu/unary_kernels.c, binary_kernels.c: the float row
 * a chunk at a time, rounded once): every op's infer takes the half dtype
 * (so nothing is widened), and every result is the float kernel's result on
 * the same values rounded to the half dtype, bit for bit -- what the
 * widening fallback gave -- over zeros of both signs, infinities, NaN,
 * subnormals, the largest finite half, more than one chunk, broadcasting
 * and in place. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/ops/unary_impl.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_IN 3

/* Element i of input k: the special values first, then a spread over
 * [-6, 6) in steps the half types hold, shifted per input so that pairs
 * differ, tie and cross. */
static float value_at(int k, int64_t i)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -2.5f, 3.0f, 65504.0f,
                                    -65504.0f, INFINITY, -INFINITY, NAN, 0x1p-24f, -0x1p-20f,
                                    1e-3f, 100.0f, -7.25f};
    const int64_t n_special = (int64_t)N_OF(special);
    const int64_t j = (i + 5 * k) % (n_special + 97);
    if (j < n_special)
        return special[j];
    return (float)((j * 37 + k * 11) % 97) / 8.0f - 6.0f;
}

/* One input: its shape and, if not NULL, its values (else value_at). */
typedef struct half_in {
    eng_shape_t shape;
    const float *given;
} half_in_t;

/* Runs op (opset, attrs) on the inputs in float and in dt with the same
 * values (each rounded to dt first), and expects the dt run's output 0 to
 * be the float run's rounded to dt (or, for a bool output, equal), bit for
 * bit. in_place: the dt run writes over input 0. */
static void expect_rounded_float(eng_dtype_t dt, const char *op, int opset,
                                 const eng_attr_t *attrs, int n_attrs, const half_in_t *in,
                                 int n_in, bool in_place)
{
    float *fdata[MAX_IN];
    uint16_t *hdata[MAX_IN];
    eng_tensor_t ft[MAX_IN], ht[MAX_IN];
    const eng_tensor_t *fins[MAX_IN], *hins[MAX_IN];
    for (int k = 0; k < n_in; k++) {
        const int64_t n = eng_shape_numel(&in[k].shape);
        fdata[k] = malloc((size_t)(n ? n : 1) * sizeof(float));
        hdata[k] = malloc((size_t)(n ? n : 1) * sizeof(uint16_t));
        for (int64_t i = 0; i < n; i++) {
            hdata[k][i] = eng_float_to_half_dt(dt, in[k].given ? in[k].given[i] : value_at(k, i));
            fdata[k][i] = eng_half_dt_to_float(dt, hdata[k][i]);
        }
        ft[k] = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = in[k].shape, .data = fdata[k]};
        ht[k] = (eng_tensor_t){.dtype = dt, .shape = in[k].shape, .data = hdata[k]};
        fins[k] = &ft[k];
        hins[k] = &ht[k];
    }
    call_t cf, ch;
    cr_assert_eq(call_infer_at(&cf, op, opset, attrs, n_attrs, fins, n_in, 1), 0,
                 "%s float infer: %s", op, fs_errmsg());
    cr_assert_eq(call_run(&cf), 0, "%s float run: %s", op, fs_errmsg());
    cr_assert_eq(call_infer_at(&ch, op, opset, attrs, n_attrs, hins, n_in, 1), 0,
                 "%s %s infer: %s", op, eng_dtype_name(dt), fs_errmsg());
    const bool to_bool = cf.outs[0].dtype == ENG_DT_BOOL;
    cr_assert_eq(ch.outs[0].dtype, to_bool ? ENG_DT_BOOL : dt, "%s: output dtype %s", op,
                 eng_dtype_name(ch.outs[0].dtype));
    if (in_place)
        ch.outs[0].data = hdata[0];
    cr_assert_eq(call_run(&ch), 0, "%s %s run: %s", op, eng_dtype_name(dt), fs_errmsg());
    const int64_t n = eng_shape_numel(&cf.outs[0].shape);
    cr_assert_eq(eng_shape_numel(&ch.outs[0].shape), n);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        if (to_bool) {
            const uint8_t got = ((const uint8_t *)ch.outs[0].data)[i];
            const uint8_t want = ((const uint8_t *)cf.outs[0].data)[i];
            bad += got != want;
            cr_expect_eq(got, want, "%s %s [%lld]: %d, float gives %d", op, eng_dtype_name(dt),
                         (long long)i, got, want);
            continue;
        }
        const float yf = ((const float *)cf.outs[0].data)[i];
        const uint16_t got = ((const uint16_t *)ch.outs[0].data)[i];
        const uint16_t want = eng_float_to_half_dt(dt, yf);
        bad += got != want;
        cr_expect_eq(got, want, "%s %s [%lld]: %#06x (%g), float %g rounds to %#06x", op,
                     eng_dtype_name(dt), (long long)i, got, (double)eng_half_dt_to_float(dt, got),
                     (double)yf, want);
    }
    call_free(&cf);
    call_free(&ch);
    for (int k = 0; k < n_in; k++) {
        free(fdata[k]);
        free(hdata[k]);
    }
}

static const eng_dtype_t halves[] = {ENG_DT_FLOAT16, ENG_DT_BFLOAT16};

/* 300 elements: one full chunk of 256 and a part, not a multiple of 16. */
static half_in_t flat(int64_t n)
{
    return (half_in_t){.shape = {.rank = 1, .dims = {n}}};
}

/* --- unary ------------------------------------------------------------------------- */

/* Every op of unary_impl.h's formula lists, with its default attributes. */
#define NAME_(op, ALPHA, BETA, GAMMA, EXPR) #op,
static const char *const formula_ops[] = {ENG_UNARY_FLOAT_OPS(NAME_) ENG_UNARY_REAL_OPS(NAME_)};
#undef NAME_

Test(engine_ops_half, every_formula_op_rounds_the_float_result_once)
{
    const half_in_t x = flat(300);
    for (size_t d = 0; d < N_OF(halves); d++)
        for (size_t i = 0; i < N_OF(formula_ops); i++)
            expect_rounded_float(halves[d], formula_ops[i], 22, NULL, 0, &x, 1, false);
}

Test(engine_ops_half, typed_unary_ops_and_attributes)
{
    const half_in_t x = flat(300);
    const eng_attr_t alpha[] = {attr_f("alpha", 0.3f)};
    const eng_attr_t selu[] = {attr_f("alpha", 2.0f), attr_f("gamma", 3.0f)};
    const eng_attr_t shrink[] = {attr_f("lambd", 1.0f), attr_f("bias", 0.25f)};
    const eng_attr_t tanh_gelu[] = {attr_s("approximate", "tanh")};
    const eng_attr_t neg_only[] = {attr_i("detect_positive", 0)};
    const eng_attr_t clip6[] = {attr_f("min", -0.75f), attr_f("max", 2.5f)};
    const struct {
        const char *op;
        int opset, n_attrs;
        const eng_attr_t *attrs;
    } cases[] = {
        {"Abs", 13, 0, NULL},       {"Neg", 13, 0, NULL},         {"Sign", 13, 0, NULL},
        {"Relu", 14, 0, NULL},      {"Gelu", 20, 0, NULL},        {"Gelu", 20, 1, tanh_gelu},
        {"LeakyRelu", 16, 1, alpha}, {"Elu", 13, 1, alpha},       {"Selu", 13, 2, selu},
        {"HardSigmoid", 13, 1, alpha}, {"Shrink", 9, 2, shrink},  {"IsNaN", 13, 0, NULL},
        {"IsInf", 10, 0, NULL},     {"IsInf", 10, 1, neg_only},   {"Clip", 6, 2, clip6},
        {"Clip", 13, 0, NULL},
    };
    for (size_t d = 0; d < N_OF(halves); d++)
        for (size_t i = 0; i < N_OF(cases); i++)
            expect_rounded_float(halves[d], cases[i].op, cases[i].opset, cases[i].attrs,
                                 cases[i].n_attrs, &x, 1, false);
}

/* Clip's bounds as half scalars, one or both, and lo > hi (all hi). */
Test(engine_ops_half, clip_reads_half_bounds)
{
    static const float lo[] = {-0.5f}, hi[] = {1.25f}, lower[] = {-3.0f};
    const half_in_t x = flat(300);
    const half_in_t both[] = {x, {.shape = {.rank = 0}, .given = lo},
                              {.shape = {.rank = 0}, .given = hi}};
    const half_in_t crossed[] = {x, {.shape = {.rank = 0}, .given = hi},
                                 {.shape = {.rank = 0}, .given = lower}};
    for (size_t d = 0; d < N_OF(halves); d++) {
        expect_rounded_float(halves[d], "Clip", 13, NULL, 0, both, 3, false);
        expect_rounded_float(halves[d], "Clip", 13, NULL, 0, both, 2, false);
        expect_rounded_float(halves[d], "Clip", 13, NULL, 0, crossed, 3, false);
    }
}

Test(engine_ops_half, unary_runs_in_place)
{
    const half_in_t x = flat(300);
    for (size_t d = 0; d < N_OF(halves); d++) {
        expect_rounded_float(halves[d], "Sigmoid", 13, NULL, 0, &x, 1, true);
        expect_rounded_float(halves[d], "Relu", 14, NULL, 0, &x, 1, true);
    }
}

/* Dropout passes a half input through; before opset 10 its mask is of the
 * input's dtype, all ones. */
Test(engine_ops_half, dropout_passes_half_through_with_a_mask_of_ones)
{
    static const float v[] = {1.5f, -2.0f, NAN};
    for (size_t d = 0; d < N_OF(halves); d++) {
        const eng_dtype_t dt = halves[d];
        const uint16_t x[] = {eng_float_to_half_dt(dt, v[0]), eng_float_to_half_dt(dt, v[1]),
                              eng_float_to_half_dt(dt, v[2])};
        eng_tensor_t t = tensor(dt, x, 1, (int64_t[]){3});
        const eng_tensor_t *ins[] = {&t};
        call_t c;
        cr_assert_eq(call_infer_at(&c, "Dropout", 7, NULL, 0, ins, 1, 2), 0, "%s", fs_errmsg());
        cr_assert_eq(c.outs[1].dtype, dt);
        cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
        cr_expect_eq(memcmp(c.outs[0].data, x, sizeof x), 0);
        for (int i = 0; i < 3; i++)
            cr_expect_eq(((const uint16_t *)c.outs[1].data)[i], eng_float_to_half_dt(dt, 1.0f));
        call_free(&c);
    }
}

/* --- binary ------------------------------------------------------------------------- */

static const char *const arith_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "PRelu",
                                        "Equal", "Greater", "GreaterOrEqual", "Less",
                                        "LessOrEqual", "Max", "Min", "Sum", "Mean"};

/* Same shapes (one flat row), a scalar on either side, a row broadcast
 * down columns and a column across rows (a per-channel operand). */
Test(engine_ops_half, binary_ops_round_the_float_result_once_under_broadcasting)
{
    const half_in_t same[] = {flat(300), flat(300)};
    const half_in_t scalar_b[] = {flat(300), {.shape = {.rank = 0}}};
    const half_in_t row_b[] = {{.shape = {.rank = 2, .dims = {3, 100}}}, flat(100)};
    const half_in_t col_b[] = {{.shape = {.rank = 3, .dims = {2, 3, 50}}},
                               {.shape = {.rank = 2, .dims = {3, 1}}}};
    const half_in_t scalar_a[] = {{.shape = {.rank = 0}}, flat(300)};
    const half_in_t *layouts[] = {same, scalar_b, row_b, col_b, scalar_a};
    for (size_t d = 0; d < N_OF(halves); d++)
        for (size_t i = 0; i < N_OF(arith_ops); i++)
            for (size_t l = 0; l < N_OF(layouts); l++) {
                /* PRelu's slope broadcasts to X only. */
                if (strcmp(arith_ops[i], "PRelu") == 0 && l == N_OF(layouts) - 1)
                    continue;
                expect_rounded_float(halves[d], arith_ops[i], 14, NULL, 0, layouts[l], 2,
                                     false);
            }
}

Test(engine_ops_half, fmod_and_squaring_pow)
{
    static const float two[] = {2.0f};
    const half_in_t same[] = {flat(300), flat(300)};
    const half_in_t squared[] = {flat(300), {.shape = {.rank = 0}, .given = two}};
    const eng_attr_t fmod[] = {attr_i("fmod", 1)};
    for (size_t d = 0; d < N_OF(halves); d++) {
        expect_rounded_float(halves[d], "Mod", 13, fmod, 1, same, 2, false);
        expect_rounded_float(halves[d], "Pow", 15, NULL, 0, squared, 2, false);
    }
}

/* Max and Min fold any number of half inputs (each pass picks a value, so
 * its rounding is exact). */
Test(engine_ops_half, max_and_min_of_three_inputs)
{
    const half_in_t three[] = {{.shape = {.rank = 2, .dims = {3, 100}}}, flat(100),
                               {.shape = {.rank = 0}}};
    for (size_t d = 0; d < N_OF(halves); d++) {
        expect_rounded_float(halves[d], "Max", 13, NULL, 0, three, 3, false);
        expect_rounded_float(halves[d], "Min", 13, NULL, 0, three, 3, false);
    }
}

Test(engine_ops_half, binary_runs_in_place_on_input_0)
{
    const half_in_t same[] = {flat(300), flat(300)};
    for (size_t d = 0; d < N_OF(halves); d++) {
        expect_rounded_float(halves[d], "Add", 14, NULL, 0, same, 2, true);
        expect_rounded_float(halves[d], "Mean", 13, NULL, 0, same, 2, true);
    }
}

/* What stays with the widening fallback is refused with FS_ENOTSUP: a half
 * Pow exponent under another base, a half base under another exponent, a
 * Sum of three half inputs (its partial sums would round); and the kernels
 * refuse such a Sum too, should a context reach them. */
Test(engine_ops_half, pairings_left_to_widening_are_refused)
{
    static const uint16_t h[1] = {0x3c00};
    static const float f[1] = {1.0f};
    eng_tensor_t th = tensor(ENG_DT_FLOAT16, h, 0, NULL), tb = tensor(ENG_DT_BFLOAT16, h, 0, NULL),
                 tf = tensor(ENG_DT_FLOAT, f, 0, NULL);
    const eng_tensor_t *f_h[] = {&tf, &th}, *h_f[] = {&th, &tf}, *h_b[] = {&th, &tb},
                       *hhh[] = {&th, &th, &th};
    call_t c;
    cr_expect_eq(call_infer_at(&c, "Pow", 15, NULL, 0, f_h, 2, 1), FS_ENOTSUP);
    cr_expect_eq(call_infer_at(&c, "Pow", 15, NULL, 0, h_f, 2, 1), FS_ENOTSUP);
    cr_expect_eq(call_infer_at(&c, "Pow", 15, NULL, 0, h_b, 2, 1), FS_ENOTSUP);
    cr_expect_eq(call_infer_at(&c, "Mean", 13, NULL, 0, hhh, 3, 1), FS_ENOTSUP);
    /* Max's context (the same operands) run by Sum's kernel. */
    cr_assert_eq(call_infer_at(&c, "Max", 13, NULL, 0, hhh, 3, 1), 0, "%s", fs_errmsg());
    c.node.op_type = "Sum";
    cr_expect_eq(call_run(&c), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "summed through float") != NULL, "%s", fs_errmsg());
    call_free(&c);
}
