/* test_ops_half_nn.c -- tests of the nn ops that take float16/bfloat16 as
 * they are (MatMul, Gemm, the normalisations, Softmax/LogSoftmax, Conv,
 * ConvTranspose, the pools, Reduce*; engine/ops/linalg.c, nn.c, reduce.c)
 * and of their CPU kernels' path through float (engine/cpu/through_float.c):
 * infer keeps the half dtype (the op is not widened), and each half output
 * is exactly the float kernel's output on the same (rounded) inputs,
 * rounded once; float outputs (LayerNormalization's statistics, MaxPool's
 * indices) are the float kernel's exactly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"
#include "engine/op.h"
#include "op_call.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_IN 5

/* One case: an op over inputs of the given shapes (rank 0 with dims[0]
 * == -1: absent), the ones flagged `pos` positive (variances). */
typedef struct half_case {
    const char *op;
    int opset;
    const eng_attr_t *attrs;
    int n_attrs;
    int n_in;
    eng_shape_t shapes[MAX_IN];
    bool pos[MAX_IN];
    int n_out;
} half_case_t;

/* Runs hc in dt and in float on the same values (each generated, rounded
 * to dt, and read back as float), and compares every output. */
static void check_case(const half_case_t *hc, eng_dtype_t dt)
{
    float *fv[MAX_IN] = {NULL};
    uint16_t *hv[MAX_IN] = {NULL};
    eng_tensor_t ft[MAX_IN], ht[MAX_IN];
    const eng_tensor_t *fin[MAX_IN] = {NULL}, *hin[MAX_IN] = {NULL};
    unsigned seed = 12345;
    for (int i = 0; i < hc->n_in; i++) {
        const eng_shape_t *s = &hc->shapes[i];
        if (s->rank == 0 && s->dims[0] == -1)
            continue;
        int64_t n = eng_shape_numel(s);
        fv[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        hv[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
        for (int64_t k = 0; k < n; k++) {
            seed = seed * 1103515245u + 12345u;
            float u = (float)((seed >> 8) & 0xffff) / 65536.0f; /* [0, 1) */
            float v = hc->pos[i] ? 0.1f + 3.0f * u : 4.0f * u - 2.0f;
            hv[i][k] = eng_float_to_half_dt(dt, v);
            fv[i][k] = eng_half_dt_to_float(dt, hv[i][k]);
        }
        ft[i] = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = *s, .data = fv[i]};
        ht[i] = (eng_tensor_t){.dtype = dt, .shape = *s, .data = hv[i]};
        fin[i] = &ft[i];
        hin[i] = &ht[i];
    }
    call_t fc, hcall;
    int rc = call_infer_at(&fc, hc->op, hc->opset, hc->attrs, hc->n_attrs, fin, hc->n_in,
                           hc->n_out);
    cr_assert_eq(rc, 0, "%s float infer: %s", hc->op, fs_errmsg());
    rc = call_infer_at(&hcall, hc->op, hc->opset, hc->attrs, hc->n_attrs, hin, hc->n_in,
                       hc->n_out);
    cr_assert_eq(rc, 0, "%s %s infer: %s", hc->op, eng_dtype_name(dt), fs_errmsg());
    cr_assert_eq(call_run(&fc), 0, "%s float run: %s", hc->op, fs_errmsg());
    cr_assert_eq(call_run(&hcall), 0, "%s %s run: %s", hc->op, eng_dtype_name(dt), fs_errmsg());
    for (int o = 0; o < hc->n_out; o++) {
        const eng_tensor_t *f = &fc.outs[o], *h = &hcall.outs[o];
        cr_assert(eng_shape_equal(&f->shape, &h->shape), "%s output %d: shapes differ", hc->op, o);
        int64_t n = eng_shape_numel(&f->shape);
        if (f->dtype != ENG_DT_FLOAT) {
            cr_assert_eq(h->dtype, f->dtype, "%s output %d", hc->op, o);
            cr_expect_eq(memcmp(h->data, f->data, eng_tensor_bytes(f)), 0, "%s output %d",
                         hc->op, o);
            continue;
        }
        bool half_out = h->dtype == dt;
        cr_assert(half_out || h->dtype == ENG_DT_FLOAT, "%s output %d is %s", hc->op, o,
                  eng_dtype_name(h->dtype));
        cr_expect(half_out || o > 0, "%s: Y is %s, want %s (not widened)", hc->op,
                  eng_dtype_name(h->dtype), eng_dtype_name(dt));
        const float *fy = f->data;
        for (int64_t k = 0; k < n; k++) {
            uint32_t want, got;
            if (half_out) {
                want = eng_float_to_half_dt(dt, fy[k]);
                got = ((const uint16_t *)h->data)[k];
            } else {
                memcpy(&want, &fy[k], sizeof want);
                memcpy(&got, &((const float *)h->data)[k], sizeof got);
            }
            cr_expect_eq(got, want, "%s %s output %d element %lld: 0x%x, want 0x%x (%g)",
                         hc->op, eng_dtype_name(dt), o, (long long)k, got, want, fy[k]);
        }
    }
    call_free(&fc);
    call_free(&hcall);
    for (int i = 0; i < hc->n_in; i++) {
        free(fv[i]);
        free(hv[i]);
    }
}

static void check_both(const half_case_t *hc)
{
    check_case(hc, ENG_DT_FLOAT16);
    check_case(hc, ENG_DT_BFLOAT16);
}

#define SHAPE(...)                                                                       \
    {.rank = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .dims = {__VA_ARGS__}}
#define ABSENT {.rank = 0, .dims = {-1}}

Test(engine_ops_half_nn, matmul_and_gemm_round_the_float_product_once)
{
    static const eng_attr_t gemm_attrs[] = {
        {.name = "transB", .type = ENG_ATTR_INT, .i = 1},
        {.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.5f},
        {.name = "beta", .type = ENG_ATTR_FLOAT, .f = 2.0f},
    };
    const half_case_t cases[] = {
        {.op = "MatMul", .opset = 13, .n_in = 2, .shapes = {SHAPE(3, 17), SHAPE(17, 5)},
         .n_out = 1},
        {.op = "MatMul", .opset = 13, .n_in = 2, .shapes = {SHAPE(2, 3, 4, 8), SHAPE(2, 3, 8, 4)},
         .n_out = 1},
        {.op = "MatMul", .opset = 13, .n_in = 2, .shapes = {SHAPE(2, 5, 16), SHAPE(16, 7)},
         .n_out = 1},
        {.op = "Gemm", .opset = 13, .attrs = gemm_attrs, .n_attrs = 3, .n_in = 3,
         .shapes = {SHAPE(4, 9), SHAPE(6, 9), SHAPE(6)}, .n_out = 1},
        {.op = "Gemm", .opset = 13, .n_in = 2, .shapes = {SHAPE(4, 9), SHAPE(9, 6)}, .n_out = 1},
    };
    for (size_t i = 0; i < N_OF(cases); i++)
        check_both(&cases[i]);
}

Test(engine_ops_half_nn, normalisations_round_the_float_result_once)
{
    static const eng_attr_t eps[] = {{.name = "epsilon", .type = ENG_ATTR_FLOAT, .f = 0.01f}};
    const half_case_t cases[] = {
        {.op = "LayerNormalization", .opset = 17, .n_in = 3,
         .shapes = {SHAPE(2, 3, 16), SHAPE(16), SHAPE(16)}, .n_out = 3},
        {.op = "LayerNormalization", .opset = 17, .attrs = eps, .n_attrs = 1, .n_in = 3,
         .shapes = {SHAPE(4, 10), SHAPE(10), ABSENT}, .n_out = 1},
        {.op = "RMSNormalization", .opset = 23, .n_in = 2, .shapes = {SHAPE(3, 12), SHAPE(12)},
         .n_out = 1},
        {.op = "BatchNormalization", .opset = 15, .n_in = 5,
         .shapes = {SHAPE(2, 3, 4, 5), SHAPE(3), SHAPE(3), SHAPE(3), SHAPE(3)},
         .pos = {false, false, false, false, true}, .n_out = 1},
        {.op = "InstanceNormalization", .opset = 13, .n_in = 3,
         .shapes = {SHAPE(2, 3, 4, 5), SHAPE(3), SHAPE(3)}, .n_out = 1},
    };
    for (size_t i = 0; i < N_OF(cases); i++)
        check_both(&cases[i]);
}

Test(engine_ops_half_nn, softmax_and_reductions_round_the_float_result_once)
{
    static const eng_attr_t axis1[] = {{.name = "axis", .type = ENG_ATTR_INT, .i = 1}};
    static const int64_t last[] = {-1};
    static const eng_attr_t axes_last[] = {
        {.name = "axes", .type = ENG_ATTR_INTS, .ints = last, .n = 1}};
    const half_case_t cases[] = {
        {.op = "Softmax", .opset = 13, .n_in = 1, .shapes = {SHAPE(3, 40)}, .n_out = 1},
        {.op = "Softmax", .opset = 13, .attrs = axis1, .n_attrs = 1, .n_in = 1,
         .shapes = {SHAPE(2, 5, 3)}, .n_out = 1},
        {.op = "LogSoftmax", .opset = 13, .n_in = 1, .shapes = {SHAPE(3, 40)}, .n_out = 1},
        {.op = "ReduceMean", .opset = 11, .attrs = axes_last, .n_attrs = 1, .n_in = 1,
         .shapes = {SHAPE(3, 4, 30)}, .n_out = 1},
        {.op = "ReduceSum", .opset = 11, .n_in = 1, .shapes = {SHAPE(3, 4, 30)}, .n_out = 1},
        {.op = "ReduceMax", .opset = 11, .attrs = axes_last, .n_attrs = 1, .n_in = 1,
         .shapes = {SHAPE(3, 4, 30)}, .n_out = 1},
        {.op = "ReduceLogSumExp", .opset = 11, .attrs = axes_last, .n_attrs = 1, .n_in = 1,
         .shapes = {SHAPE(3, 30)}, .n_out = 1},
    };
    for (size_t i = 0; i < N_OF(cases); i++)
        check_both(&cases[i]);
}

Test(engine_ops_half_nn, conv_and_pools_round_the_float_result_once)
{
    static const int64_t k3[] = {3, 3}, pads1[] = {1, 1, 1, 1}, s2[] = {2, 2};
    static const eng_attr_t pool_attrs[] = {
        {.name = "kernel_shape", .type = ENG_ATTR_INTS, .ints = k3, .n = 2},
        {.name = "pads", .type = ENG_ATTR_INTS, .ints = pads1, .n = 4},
        {.name = "strides", .type = ENG_ATTR_INTS, .ints = s2, .n = 2},
    };
    static const eng_attr_t conv_attrs[] = {
        {.name = "pads", .type = ENG_ATTR_INTS, .ints = pads1, .n = 4},
        {.name = "strides", .type = ENG_ATTR_INTS, .ints = s2, .n = 2},
    };
    const half_case_t cases[] = {
        {.op = "Conv", .opset = 11, .attrs = conv_attrs, .n_attrs = 2, .n_in = 3,
         .shapes = {SHAPE(2, 3, 7, 7), SHAPE(4, 3, 3, 3), SHAPE(4)}, .n_out = 1},
        {.op = "Conv", .opset = 11, .n_in = 2, .shapes = {SHAPE(1, 8, 5, 5), SHAPE(6, 8, 1, 1)},
         .n_out = 1},
        {.op = "ConvTranspose", .opset = 11, .attrs = conv_attrs, .n_attrs = 2, .n_in = 3,
         .shapes = {SHAPE(1, 2, 3, 3), SHAPE(2, 3, 3, 3), SHAPE(3)}, .n_out = 1},
        {.op = "MaxPool", .opset = 12, .attrs = pool_attrs, .n_attrs = 3, .n_in = 1,
         .shapes = {SHAPE(1, 3, 7, 7)}, .n_out = 2},
        {.op = "AveragePool", .opset = 11, .attrs = pool_attrs, .n_attrs = 3, .n_in = 1,
         .shapes = {SHAPE(1, 3, 7, 7)}, .n_out = 1},
        {.op = "GlobalAveragePool", .opset = 13, .n_in = 1, .shapes = {SHAPE(2, 3, 5, 5)},
         .n_out = 1},
        {.op = "GlobalMaxPool", .opset = 13, .n_in = 1, .shapes = {SHAPE(2, 3, 5, 5)},
         .n_out = 1},
    };
    for (size_t i = 0; i < N_OF(cases); i++)
        check_both(&cases[i]);
}

/* The operands of one op share a half dtype: float16 with bfloat16 or with
 * float is refused, naming the input. */
Test(engine_ops_half_nn, mixed_dtypes_are_refused)
{
    uint16_t a[6] = {0}, b[6] = {0};
    float f[6] = {0};
    eng_tensor_t ta = tensor(ENG_DT_FLOAT16, a, 2, (const int64_t[]){2, 3});
    eng_tensor_t tb = tensor(ENG_DT_BFLOAT16, b, 2, (const int64_t[]){3, 2});
    eng_tensor_t tf = tensor(ENG_DT_FLOAT, f, 1, (const int64_t[]){3});
    call_t c;
    const eng_tensor_t *mm[] = {&ta, &tb};
    cr_expect_eq(call_infer_at(&c, "MatMul", 13, NULL, 0, mm, 2, 1), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "bfloat16") != NULL, "%s", fs_errmsg());
    call_free(&c);
    const eng_tensor_t *ln[] = {&ta, &tf};
    cr_expect_eq(call_infer_at(&c, "LayerNormalization", 17, NULL, 0, ln, 2, 1), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "input 1 has dtype float") != NULL, "%s", fs_errmsg());
    call_free(&c);
}

/* The data-movement ops around the nn ops in a transformer or a CNN move
 * half elements as they are: infer keeps the dtype (none is widened). */
Test(engine_ops_half_nn, data_movement_ops_keep_half)
{
    static uint16_t x[24];
    static const int64_t perm[] = {1, 0, 2}, shape[] = {4, 6}, idx[] = {1, 0};
    static const int64_t starts[] = {1}, ends[] = {3}, pads[] = {0, 1, 0, 0, 1, 0};
    static const int64_t expand_to[] = {2, 2, 3, 4}, split[] = {1, 1};
    static const eng_attr_t perm_attr[] = {
        {.name = "perm", .type = ENG_ATTR_INTS, .ints = perm, .n = 3}};
    static const eng_attr_t axis0[] = {{.name = "axis", .type = ENG_ATTR_INT, .i = 0}};
    for (int d = 0; d < 2; d++) {
        eng_dtype_t dt = d ? ENG_DT_BFLOAT16 : ENG_DT_FLOAT16;
        eng_tensor_t h = tensor(dt, x, 3, (const int64_t[]){2, 3, 4});
        eng_tensor_t s = tensor(ENG_DT_INT64, shape, 1, (const int64_t[]){2});
        eng_tensor_t i2 = tensor(ENG_DT_INT64, idx, 1, (const int64_t[]){2});
        eng_tensor_t st = tensor(ENG_DT_INT64, starts, 1, (const int64_t[]){1});
        eng_tensor_t en = tensor(ENG_DT_INT64, ends, 1, (const int64_t[]){1});
        eng_tensor_t pd = tensor(ENG_DT_INT64, pads, 1, (const int64_t[]){6});
        eng_tensor_t ex = tensor(ENG_DT_INT64, expand_to, 1, (const int64_t[]){4});
        eng_tensor_t sp = tensor(ENG_DT_INT64, split, 1, (const int64_t[]){2});
        const struct {
            const char *op;
            const eng_attr_t *attrs;
            int n_attrs;
            const eng_tensor_t *in[3];
            int n_in, n_out;
        } ops[] = {
            {"Transpose", perm_attr, 1, {&h}, 1, 1},
            {"Concat", axis0, 1, {&h, &h}, 2, 1},
            {"Reshape", NULL, 0, {&h, &s}, 2, 1},
            {"Gather", axis0, 1, {&h, &i2}, 2, 1},
            {"Slice", NULL, 0, {&h, &st, &en}, 3, 1},
            {"Pad", NULL, 0, {&h, &pd}, 2, 1},
            {"Expand", NULL, 0, {&h, &ex}, 2, 1},
            {"Split", axis0, 1, {&h, &sp}, 2, 2},
        };
        for (size_t k = 0; k < N_OF(ops); k++) {
            call_t c;
            int rc = call_infer_at(&c, ops[k].op, 18, ops[k].attrs, ops[k].n_attrs, ops[k].in,
                                   ops[k].n_in, ops[k].n_out);
            cr_expect_eq(rc, 0, "%s on %s: %s", ops[k].op, eng_dtype_name(dt), fs_errmsg());
            cr_expect_eq(c.outs[0].dtype, dt, "%s on %s", ops[k].op, eng_dtype_name(dt));
            call_free(&c);
        }
    }
}

/* Pad before opset 11 takes its constant from a float attribute: it is
 * rounded to the half dtype. */
Test(engine_ops_half_nn, pad_attribute_value_is_rounded_to_half)
{
    static const uint16_t x[2] = {0x3c00, 0x4000}; /* 1, 2 in float16 */
    static const int64_t pads[] = {1, 1};
    const eng_attr_t attrs[] = {{.name = "pads", .type = ENG_ATTR_INTS, .ints = pads, .n = 2},
                                {.name = "value", .type = ENG_ATTR_FLOAT, .f = 1.5f}};
    eng_tensor_t h = tensor(ENG_DT_FLOAT16, x, 1, (const int64_t[]){2});
    const eng_tensor_t *in[] = {&h};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "Pad", 10, attrs, 2, in, 1, 1), 0, "%s", fs_errmsg());
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    const uint16_t *y = c.outs[0].data;
    cr_expect_eq(y[0], 0x3e00);
    cr_expect_eq(y[1], 0x3c00);
    cr_expect_eq(y[2], 0x4000);
    cr_expect_eq(y[3], 0x3e00);
    call_free(&c);
}
