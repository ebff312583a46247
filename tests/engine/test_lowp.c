/* test_lowp.c -- tests of the fp16/bf16 rewrite (engine/lowp.c): a float32
 * graph comes out with Casts at its float32 edges, its float32 constants in
 * the low dtype (saturated, float-only reads kept), Cast(to=FLOAT) moved to
 * the low dtype, and, planned and run on the CPU, the values a half graph
 * computes, with the float32 interface and every byte back. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/half.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

static const float W[12] = {0.5f, -1.25f, 2.0f, 0.1f, 3.0f,   0.75f,
                            -0.3f, 1.0f, 0.2f, -2.5f, 0.125f, 1.5f};
/* One element past float16's range: a "minus infinity" mask value. */
static const float B[4] = {0.25f, -3.4e38f, 1.0f, -0.5f};

/* X [2,3] float, I [2,4] int64 ->
 *   Y = MatMul(X, W) + B            (output, float)
 *   Z = Y * Cast(I, to=FLOAT)       (output, float)
 *   U = Upsample(X, scales)         (output, float; scales float-only) */
static uint8_t *graph_bytes(size_t *len)
{
    mb_t b;
    mb_init(&b, 8, 9);
    mb_input(&b, "X", F32, 2, (int64_t[]){2, 3}, NULL);
    mb_input(&b, "I", I64, 2, (int64_t[]){2, 4}, NULL);
    Onnx__TensorProto *w = mb_tensor(&b, "W", F32, 2, (int64_t[]){3, 4});
    mb_floats(&b, w, W, 12);
    mb_initializer(&b, w);
    Onnx__TensorProto *bias = mb_tensor(&b, "B", F32, 1, (int64_t[]){4});
    mb_floats(&b, bias, B, 4);
    mb_initializer(&b, bias);
    Onnx__TensorProto *sc = mb_tensor(&b, "S", F32, 1, (int64_t[]){2});
    mb_floats(&b, sc, (float[]){1.0f, 2.0f}, 2);
    mb_initializer(&b, sc);
    mb_node(&b, "MatMul", "mm", "X,W", "H");
    mb_node(&b, "Add", "add", "H,B", "Y");
    Onnx__NodeProto *c = mb_node(&b, "Cast", "cast", "I", "F");
    mb_attr_i(&b, c, "to", F32);
    mb_node(&b, "Mul", "mul", "Y,F", "Z");
    Onnx__NodeProto *up = mb_node(&b, "Upsample", "up", "X,S", "U");
    mb_attr_s(&b, up, "mode", "nearest");
    mb_output(&b, "Y", F32, 2, (int64_t[]){2, 4});
    mb_output(&b, "Z", F32, 2, (int64_t[]){2, 4});
    mb_output(&b, "U", F32, 2, (int64_t[]){2, 6});
    return mb_pack(&b, len);
}

static int value_named(const eng_graph_t *g, const char *name)
{
    for (size_t v = 0; v < g->n_values; v++)
        if (strcmp(g->values[v].name, name) == 0)
            return (int)v;
    cr_assert_fail("no value '%s'", name);
    return -1;
}

static const eng_node_t *producer(const eng_graph_t *g, const char *name)
{
    int p = g->values[value_named(g, name)].producer;
    cr_assert_geq(p, 0, "'%s' has no producer", name);
    return &g->nodes[p];
}

/* The graph, loaded and lowered to `low`, with its done array. */
static eng_graph_t *lowered(eng_dtype_t low, bool **done)
{
    size_t len;
    uint8_t *bytes = graph_bytes(&len);
    eng_graph_t *g = NULL;
    cr_assert_eq(eng_graph_load(bytes, len, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    free(bytes);
    *done = calloc(g->n_nodes + 1, sizeof **done);
    cr_assert_eq(eng_fold_constants(g, NULL, *done), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_lower_precision(g, low, NULL, done), 0, "lower: %s", fs_errmsg());
    return g;
}

static float round_low(eng_dtype_t dt, float v)
{
    return eng_half_dt_to_float(dt, eng_float_to_half_dt(dt, v));
}

static void rewrite_shape(eng_dtype_t low)
{
    bool *done;
    eng_graph_t *g = lowered(low, &done);
    /* The edges: X is cast in first; Y, Z, U are cast back last. I is not
     * float and gets no Cast. */
    const eng_node_t *first = &g->nodes[0];
    cr_expect_str_eq(first->op_type, "Cast");
    cr_expect_eq(first->inputs[0], value_named(g, "X"));
    cr_expect_eq(eng_attr_i(first, "to", 0), low);
    cr_expect_str_neq(g->nodes[1].op_type, "Cast", "a Cast for the int64 input");
    for (int j = 0; j < 3; j++) {
        const char *out = (const char *[]){"Y", "Z", "U"}[j];
        const eng_node_t *p = producer(g, out);
        cr_expect_str_eq(p->op_type, "Cast", "%s", out);
        cr_expect_eq(eng_attr_i(p, "to", 0), ENG_DT_FLOAT, "%s", out);
        cr_expect_eq(g->values[value_named(g, out)].dtype, ENG_DT_FLOAT, "%s", out);
        cr_expect_eq(g->values[p->inputs[0]].dtype, low, "%s's low value", out);
    }
    cr_expect_str_eq(producer(g, "F")->op_type, "Cast");
    cr_expect_eq(eng_attr_i(producer(g, "F"), "to", 0), low, "Cast(to=FLOAT) moves to %s",
                 eng_dtype_name(low));
    /* Y's low value is read by Mul: the graph stays in the low dtype. */
    const eng_node_t *mul = producer(g, "Z");
    mul = &g->nodes[g->values[mul->inputs[0]].producer];
    cr_expect_str_eq(mul->op_type, "Mul");
    cr_expect_neq(mul->inputs[0], value_named(g, "Y"), "Mul reads the float32 output");

    /* Constants: W and B in the low dtype, B's -3.4e38 saturated; the
     * scales stay float32. */
    const eng_tensor_t *w = &g->values[value_named(g, "W")].constant;
    const eng_tensor_t *b = &g->values[value_named(g, "B")].constant;
    const eng_tensor_t *s = &g->values[value_named(g, "S")].constant;
    cr_expect_eq(w->dtype, low);
    cr_expect_eq(b->dtype, low);
    cr_expect_eq(s->dtype, ENG_DT_FLOAT, "Upsample's scales lowered");
    for (int i = 0; i < 12; i++)
        cr_expect_eq(((const uint16_t *)w->data)[i], eng_float_to_half_dt(low, W[i]), "W[%d]", i);
    float b1 = eng_half_dt_to_float(low, ((const uint16_t *)b->data)[1]);
    cr_expect(isfinite(b1) && b1 < -6e4f, "B[1] is %g, want the dtype's lowest finite", b1);
    eng_graph_destroy(g);
    free(done);
}

Test(lowp, float16_rewrite_casts_edges_and_lowers_constants)
{
    rewrite_shape(ENG_DT_FLOAT16);
}

Test(lowp, bfloat16_rewrite_casts_edges_and_lowers_constants)
{
    rewrite_shape(ENG_DT_BFLOAT16);
}

/* Plans and runs the lowered graph on the CPU: the outputs are float32,
 * and hold what the half graph computes (each op rounding its result). */
static void lowered_run(eng_dtype_t low)
{
    bool *done;
    eng_graph_t *g = lowered(low, &done);
    float x[6] = {1.0f, -2.0f, 0.5f, 0.3333f, 4.0f, -1.5f};
    int64_t idx[8] = {1, 2, 3, 4, -1, 0, 2, 1};
    eng_tensor_t ins[2] = {{.dtype = ENG_DT_FLOAT, .shape = {2, {2, 3}}, .data = x},
                           {.dtype = ENG_DT_INT64, .shape = {2, {2, 4}}, .data = idx}};
    model_fixture_t f;
    eng_tensor_t *out[3] = {NULL};
    model_fixture_plan_run(&f, g, done, ins, 2, out);
    double ulp = low == ENG_DT_FLOAT16 ? 0x1p-10 : 0x1p-7;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) {
            float h = 0;
            for (int k = 0; k < 3; k++)
                h += round_low(low, x[r * 3 + k]) * round_low(low, W[k * 4 + c]);
            float lowest = low == ENG_DT_FLOAT16 ? -65504.0f : -3.38953139e38f;
            float bias = round_low(low, c == 1 ? lowest : B[c]);
            float y = round_low(low, round_low(low, h) + bias);
            float z = round_low(low, y * (float)idx[r * 4 + c]);
            float gy = ((const float *)out[0]->data)[r * 4 + c];
            float gz = ((const float *)out[1]->data)[r * 4 + c];
            cr_expect(fabs(gy - y) <= ulp * fabs(y), "Y[%d,%d] %g, want %g", r, c, gy, y);
            cr_expect(fabs(gz - z) <= ulp * fabs(z) || (isinf(gz) && isinf(z) && gz == z),
                      "Z[%d,%d] %g, want %g", r, c, gz, z);
        }
    cr_expect_eq(out[0]->dtype, ENG_DT_FLOAT);
    cr_expect_eq(out[2]->dtype, ENG_DT_FLOAT);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 6; c++)
            cr_expect_eq(((const float *)out[2]->data)[r * 6 + c], round_low(low, x[r * 3 + c / 2]),
                         "U[%d,%d]", r, c);
    for (int j = 0; j < 3; j++)
        eng_tensor_free(out[j]);
    eng_graph_destroy(g);
    free(done);
    model_fixture_close(&f);
}

Test(lowp, float16_graph_runs_with_a_float32_interface)
{
    lowered_run(ENG_DT_FLOAT16);
}

Test(lowp, bfloat16_graph_runs_with_a_float32_interface)
{
    lowered_run(ENG_DT_BFLOAT16);
}

/* X [2,3] float -> C0 = ConstantOfShape(Shape(X)) (no value: a float32
 * zero), C1 = ConstantOfShape(Shape(X), value 2.5f); Y = (X + C0) * C1.
 * Lowered, both constants of shape come out in the low dtype and the graph
 * runs; unlowered, they would meet X's low value as float32. */
static void constant_of_shape(eng_dtype_t low)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F32, 2, (int64_t[]){2, 3}, NULL);
    mb_node(&b, "Shape", "shape", "X", "S");
    mb_node(&b, "ConstantOfShape", "c0", "S", "C0");
    Onnx__NodeProto *c1 = mb_node(&b, "ConstantOfShape", "c1", "S", "C1");
    Onnx__TensorProto *v = mb_tensor(&b, "v", F32, 1, (int64_t[]){1});
    mb_floats(&b, v, (float[]){2.5f}, 1);
    mb_attr_t(&b, c1, "value", v);
    mb_node(&b, "Add", "add", "X,C0", "A");
    mb_node(&b, "Mul", "mul", "A,C1", "Y");
    mb_output(&b, "Y", F32, 2, (int64_t[]){2, 3});
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    eng_graph_t *g = NULL;
    cr_assert_eq(eng_graph_load(bytes, len, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    free(bytes);
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert_eq(eng_lower_precision(g, low, NULL, &done), 0, "lower: %s", fs_errmsg());
    for (int k = 0; k < 2; k++) {
        const eng_node_t *n = producer(g, k ? "C1" : "C0");
        const eng_tensor_t *t = eng_attr_tensor(n, "value");
        cr_assert_not_null(t, "C%d has no value", k);
        cr_expect_eq(t->dtype, low, "C%d's value is %s", k, eng_dtype_name(t->dtype));
    }
    float x[6] = {1.0f, -2.0f, 0.5f, 0.3333f, 4.0f, -1.5f};
    eng_tensor_t in = {.dtype = ENG_DT_FLOAT, .shape = {2, {2, 3}}, .data = x};
    model_fixture_t f;
    eng_tensor_t *out[1] = {NULL};
    model_fixture_plan_run(&f, g, done, &in, 1, out);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((const float *)out[0]->data)[i], round_low(low, round_low(low, x[i]) * 2.5f),
                     "Y[%d]", i);
    eng_tensor_free(out[0]);
    eng_graph_destroy(g);
    free(done);
    model_fixture_close(&f);
}

Test(lowp, constant_of_shape_follows_to_float16)
{
    constant_of_shape(ENG_DT_FLOAT16);
}

Test(lowp, constant_of_shape_follows_to_bfloat16)
{
    constant_of_shape(ENG_DT_BFLOAT16);
}
