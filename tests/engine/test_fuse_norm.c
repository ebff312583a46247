/* test_fuse_norm.c -- tests of engine/fuse_norm.c: which exported RMSNorm
 * chains become one RMSNormalization node (built in memory in the
 * exporters' forms, and the zoo's Llama and T5 exports), which are left
 * alone, and that the fused graph computes what the chain computes on the
 * CPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

#define NR 3 /* rows */
#define NC 8 /* the normalised axis */

typedef struct norm_case {
    bool div;          /* Div(1, S) (TorchScript) instead of Reciprocal (dynamo) */
    bool swap;         /* Mul(R, x) and Mul(N, w): the other operand orders */
    bool axes_attr;    /* opset 17, ReduceMean's axes as the attribute */
    float exponent;    /* Pow's (2 fuses) */
    int64_t axis;      /* ReduceMean's axis (-1 fuses) */
    bool extra_reader; /* the mean is a graph output too */
} norm_case_t;

static void add_scalar(mb_t *b, const char *name, float v)
{
    Onnx__TensorProto *t = mb_tensor(b, name, F, 0, NULL);
    mb_floats(b, t, &v, 1);
    mb_initializer(b, t);
}

/* x [NR, NC] -> Y [NR, NC] through the chain (and M when extra_reader). */
static void norm_build(mb_t *b, const norm_case_t *nc)
{
    mb_init(b, 8, nc->axes_attr ? 17 : 20);
    const int64_t xd[2] = {NR, NC}, wd[1] = {NC};
    mb_input(b, "x", F, 2, xd, NULL);
    add_scalar(b, "two", nc->exponent);
    add_scalar(b, "eps", 1e-6f);
    add_scalar(b, "one", 1.0f);
    float w[NC];
    for (int i = 0; i < NC; i++)
        w[i] = 0.5f + 0.125f * (float)i;
    Onnx__TensorProto *wt = mb_tensor(b, "w", F, 1, wd);
    mb_floats(b, wt, w, NC);
    mb_initializer(b, wt);
    mb_node(b, "Pow", "pow", "x,two", "P");
    if (nc->axes_attr) {
        Onnx__NodeProto *r = mb_node(b, "ReduceMean", "mean", "P", "M");
        mb_attr_ints(b, r, "axes", &nc->axis, 1);
    } else {
        Onnx__TensorProto *ax = mb_tensor(b, "axes", I64, 1, (const int64_t[]){1});
        mb_int64s(b, ax, &nc->axis, 1);
        mb_initializer(b, ax);
        mb_node(b, "ReduceMean", "mean", "P,axes", "M");
    }
    mb_node(b, "Add", "add", "M,eps", "A");
    mb_node(b, "Sqrt", "sqrt", "A", "S");
    if (nc->div)
        mb_node(b, "Div", "div", "one,S", "R");
    else
        mb_node(b, "Reciprocal", "recip", "S", "R");
    mb_node(b, "Mul", "mul", nc->swap ? "R,x" : "x,R", "N");
    mb_node(b, "Mul", "scale", nc->swap ? "N,w" : "w,N", "Y");
    mb_output(b, "Y", F, 2, xd);
    if (nc->extra_reader)
        mb_output(b, "M", F, 2, (const int64_t[]){NR, 1});
}

static eng_graph_t *norm_load(mb_t *b, bool fuse, bool **done)
{
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    *done = calloc(g->n_nodes + 1, sizeof **done);
    cr_assert(*done);
    cr_assert_eq(eng_fold_constants(g, NULL, *done), 0, "fold: %s", fs_errmsg());
    if (fuse)
        cr_assert_eq(eng_fuse_rms_norm(g, *done), 0, "fuse: %s", fs_errmsg());
    return g;
}

/* Live RMSNormalization nodes of g, and live nodes of any kind. */
static int rms_count(const eng_graph_t *g, const bool *done, int *live)
{
    int n = 0;
    *live = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        *live += !done[i];
        n += !done[i] && strcmp(g->nodes[i].op_type, "RMSNormalization") == 0;
    }
    return n;
}

static int case_fused(const norm_case_t *nc, int *live)
{
    mb_t b;
    norm_build(&b, nc);
    bool *done;
    eng_graph_t *g = norm_load(&b, true, &done);
    int n = rms_count(g, done, live);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    return n;
}

/* Y of the case, fused or not, on the CPU. */
static void norm_run(const norm_case_t *nc, bool fuse, float *y)
{
    mb_t b;
    norm_build(&b, nc);
    bool *done;
    eng_graph_t *g = norm_load(&b, fuse, &done);
    eng_shape_t xs = {.rank = 2, .dims = {NR, NC}};
    eng_tensor_t *x = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &xs, &x), 0);
    float *d = x->data;
    for (int i = 0; i < NR * NC; i++)
        d[i] = (float)((i * 37 % 23) - 11) * 0.25f;
    d[NC] = 0; /* a row with a zero */
    eng_tensor_t *out[2] = {NULL};
    model_fixture_t f;
    model_fixture_plan_run(&f, g, done, x, 1, out);
    memcpy(y, out[0]->data, NR * NC * sizeof *y);
    for (int o = 0; o < 2; o++)
        eng_tensor_free(out[o]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(fuse_norm, the_exporters_rms_norm_becomes_one_node_with_the_chains_values)
{
    for (int form = 0; form < 8; form++) {
        norm_case_t nc = {.div = form & 1, .swap = form & 2, .axes_attr = form & 4,
                          .exponent = 2.0f, .axis = -1};
        int live = 0;
        cr_expect_eq(case_fused(&nc, &live), 1, "form %d", form);
        cr_expect_eq(live, 1, "form %d: %d live nodes", form, live);
        float fused[NR * NC], chain[NR * NC];
        norm_run(&nc, true, fused);
        norm_run(&nc, false, chain);
        for (int i = 0; i < NR * NC; i++)
            cr_expect(fabsf(fused[i] - chain[i]) <= 2e-6f * fabsf(chain[i]) + 1e-7f,
                      "form %d: Y[%d] fused %.9g, chain %.9g", form, i, (double)fused[i],
                      (double)chain[i]);
    }
}

Test(fuse_norm, other_exponents_axes_and_shared_intermediates_are_left_alone)
{
    int live = 0;
    norm_case_t cube = {.exponent = 3.0f, .axis = -1};
    cr_expect_eq(case_fused(&cube, &live), 0, "Pow(x, 3)");
    norm_case_t first_axis = {.exponent = 2.0f, .axis = 0};
    cr_expect_eq(case_fused(&first_axis, &live), 0, "mean over axis 0");
    norm_case_t shared = {.exponent = 2.0f, .axis = -1, .extra_reader = true};
    cr_expect_eq(case_fused(&shared, &live), 0, "the mean read as a graph output too");
    cr_expect_eq(live, 7);
}

/* The zoo's Llama and T5 dynamo exports (tests/zoo; run from the
 * repository root): every RMSNorm fuses, 5 in each. */
Test(fuse_norm, zoo_llama_and_t5_dynamo_exports_fuse_every_norm)
{
    static const char *const models[] = {"llama_dynamo20", "llama_dynamo18",
                                         "t5_encoder_dynamo20"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        bool *done;
        eng_graph_t *g = model_fixture_zoo_graph(models[m], &done);
        cr_assert_eq(eng_fuse_rms_norm(g, done), 0, "fuse: %s", fs_errmsg());
        int live = 0, pow_left = 0;
        cr_expect_eq(rms_count(g, done, &live), 5, "%s", models[m]);
        for (size_t i = 0; i < g->n_nodes; i++)
            pow_left += !done[i] && strcmp(g->nodes[i].op_type, "Pow") == 0;
        cr_expect_eq(pow_left, 0, "%s: %d Pow left", models[m], pow_left);
        free(done);
        eng_graph_destroy(g);
    }
}
