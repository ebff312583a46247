/* test_fuse.c -- tests of engine/fuse.c: Conv + BatchNormalization fusion,
 * through the graph (which pairs fuse) and through the model (the fused
 * model computes what a hand-written Conv then BN computes). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define HW 4 /* input height and width */

/* One test model: X [1, c, HW, HW] -> Conv (3x3, pads 1) -> BN -> Y. */
typedef struct fuse_case {
    int64_t c, m, group;
    bool bias;              /* the Conv has a bias */
    bool conv_out_output;   /* the Conv's output is also a graph output */
    bool extra_reader;      /* a Relu also reads the Conv's output (output R) */
    bool bn_params_inputs;  /* scale, B, mean, var are graph inputs */
    bool twin;              /* a second Conv shares W, with its own BN (output Y2) */
} fuse_case_t;

static float w_at(int64_t i)
{
    return (float)(0.5 * sin(0.37 * (double)i + 0.1));
}

/* The BN parameters of channel m (p: 0 scale, 1 B, 2 mean, 3 var) and the
 * Conv bias. */
static float bn_param(int p, int64_t m)
{
    switch (p) {
    case 0: return 0.5f + 0.1f * (float)m;
    case 1: return 0.05f * (float)m - 0.1f;
    case 2: return 0.03f * (float)m - 0.1f;
    default: return 0.2f + 0.05f * (float)m;
    }
}

static float bias_at(int64_t m)
{
    return 0.1f * (float)m - 0.2f;
}

static const float EPS = 1e-3f;
static const char *const BN_NAMES[4] = {"scale", "B", "mean", "var"};

static void add_const(mb_t *b, const char *name, int rank, const int64_t *dims, const float *v,
                      size_t n)
{
    Onnx__TensorProto *t = mb_tensor(b, name, F, rank, dims);
    mb_floats(b, t, v, n);
    mb_initializer(b, t);
}

static void build(mb_t *b, const fuse_case_t *fc)
{
    mb_init(b, 8, 13);
    int64_t cg = fc->c / fc->group, wn = fc->m * cg * 9;
    mb_input(b, "X", F, 4, (int64_t[]){1, fc->c, HW, HW}, NULL);
    float *w = mb_alloc(b, (size_t)wn * sizeof *w), *v = mb_alloc(b, (size_t)fc->m * sizeof *v);
    for (int64_t i = 0; i < wn; i++)
        w[i] = w_at(i);
    add_const(b, "W", 4, (int64_t[]){fc->m, cg, 3, 3}, w, (size_t)wn);
    if (fc->bias) {
        for (int64_t m = 0; m < fc->m; m++)
            v[m] = bias_at(m);
        add_const(b, "Bc", 1, &fc->m, v, (size_t)fc->m);
    }
    for (int p = 0; p < 4; p++) {
        if (fc->bn_params_inputs) {
            mb_input(b, BN_NAMES[p], F, 1, &fc->m, NULL);
            continue;
        }
        float *pv = mb_alloc(b, (size_t)fc->m * sizeof *pv);
        for (int64_t m = 0; m < fc->m; m++)
            pv[m] = bn_param(p, m);
        add_const(b, BN_NAMES[p], 1, &fc->m, pv, (size_t)fc->m);
    }
    for (int k = 0; k < (fc->twin ? 2 : 1); k++) {
        Onnx__NodeProto *conv = mb_node(b, "Conv", k ? "conv2" : "conv",
                                        fc->bias ? "X,W,Bc" : "X,W",
                                        k ? "C2" : "C");
        mb_attr_ints(b, conv, "pads", (int64_t[]){1, 1, 1, 1}, 4);
        mb_attr_ints(b, conv, "kernel_shape", (int64_t[]){3, 3}, 2);
        if (fc->group != 1)
            mb_attr_i(b, conv, "group", fc->group);
        Onnx__NodeProto *bn = mb_node(b, "BatchNormalization", k ? "bn2" : "bn",
                                      k ? "C2,scale,B,mean,var" : "C,scale,B,mean,var",
                                      k ? "Y2" : "Y");
        mb_attr_f(b, bn, "epsilon", EPS);
    }
    const int64_t ydims[4] = {1, fc->m, HW, HW};
    mb_output(b, "Y", F, 4, ydims);
    if (fc->twin)
        mb_output(b, "Y2", F, 4, ydims);
    if (fc->conv_out_output)
        mb_output(b, "C", F, 4, ydims);
    if (fc->extra_reader) {
        mb_node(b, "Relu", "relu", "C", "R");
        mb_output(b, "R", F, 4, ydims);
    }
}

/* Weight memory that counts what is out, so a test can see it all back. */
static void *count_alloc(void *user, size_t bytes)
{
    size_t *out = user, *p = malloc(sizeof(size_t) + bytes);
    if (!p)
        return NULL;
    *p = bytes;
    *out += bytes;
    return p + 1;
}

static void count_free(void *user, void *ptr)
{
    size_t *out = user, *p = (size_t *)ptr - 1;
    *out -= *p;
    free(p);
}

/* Loads the case's graph, folds and fuses it, and returns how many BN
 * nodes were fused away; checks the weight memory all comes back. */
static int fused_count(const fuse_case_t *fc)
{
    mb_t b;
    build(&b, fc);
    size_t out_bytes = 0;
    eng_weight_alloc_t wa = {.alloc = count_alloc, .free = count_free, .user = &out_bytes};
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, &wa, &g), 0, "load: %s", fs_errmsg());
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert(done);
    cr_assert_eq(eng_fold_constants(g, &wa, done), 0, "fold: %s", fs_errmsg());
    cr_assert_eq(eng_fuse_conv_bn(g, &wa, done), 0, "fuse: %s", fs_errmsg());
    int n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *node = &g->nodes[i];
        if (strcmp(node->op_type, "BatchNormalization") == 0)
            n += done[i];
        if (strcmp(node->op_type, "Conv") != 0 || g->values[node->outputs[0]].name[0] != 'Y')
            continue;
        /* A fused Conv reads W', b' (constants, names unique) and writes Y. */
        cr_expect_eq(node->n_inputs, 3);
        for (int k = 1; k < 3; k++) {
            const eng_value_t *v = &g->values[node->inputs[k]];
            cr_expect_eq(v->kind, ENG_VALUE_CONST);
            cr_expect_eq(graph_value(g, v->name), node->inputs[k], "'%s' not unique", v->name);
        }
        cr_expect_eq(g->values[node->outputs[0]].producer, (int)i);
    }
    free(done);
    eng_graph_destroy(g);
    cr_expect_eq(out_bytes, 0, "%zu weight bytes left after destroy", out_bytes);
    mb_free(&b);
    return n;
}

/* Conv then BN by hand, in double: output channel m at (h, w). */
static double reference(const fuse_case_t *fc, const float *x, int64_t m, int64_t h, int64_t w)
{
    int64_t cg = fc->c / fc->group, mg = fc->m / fc->group, grp = m / mg;
    double acc = fc->bias ? bias_at(m) : 0.0;
    for (int64_t ci = 0; ci < cg; ci++)
        for (int64_t kh = 0; kh < 3; kh++)
            for (int64_t kw = 0; kw < 3; kw++) {
                int64_t ih = h + kh - 1, iw = w + kw - 1;
                if (ih < 0 || ih >= HW || iw < 0 || iw >= HW)
                    continue;
                int64_t c = grp * cg + ci;
                acc += (double)x[(c * HW + ih) * HW + iw] * w_at(((m * cg + ci) * 3 + kh) * 3 + kw);
            }
    double s = bn_param(0, m) / sqrt((double)bn_param(3, m) + EPS);
    return (acc - bn_param(2, m)) * s + bn_param(1, m);
}

/* Runs the case as a model and checks Y (and Y2, and C when it is an
 * output) against the hand-computed values, within 1e-5 relative. */
static void run_and_compare(const fuse_case_t *fc)
{
    mb_t b;
    build(&b, fc);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    model_fixture_t f;
    model_fixture_cache(&f);
    eng_model_config_t cfg = {.cache = f.cache};
    cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &f.model), 0, "load: %s",
                 fs_errmsg());
    size_t n_in = fc->bn_params_inputs ? 5 : 1;
    eng_tensor_t *in[5] = {NULL};
    eng_shape_t xs = {.rank = 4, .dims = {1, fc->c, HW, HW}}, ps = {.rank = 1, .dims = {fc->m}};
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &xs, &in[0]), 0);
    float *x = in[0]->data;
    for (int64_t i = 0; i < eng_shape_numel(&xs); i++)
        x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (size_t p = 1; p < n_in; p++) {
        cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &ps, &in[p]), 0);
        for (int64_t m = 0; m < fc->m; m++)
            ((float *)in[p]->data)[m] = bn_param((int)p - 1, m);
    }
    eng_tensor_t ins[5];
    for (size_t p = 0; p < n_in; p++)
        ins[p] = *in[p];
    eng_tensor_t *out[4] = {NULL};
    cr_assert_eq(eng_model_run(f.model, ins, n_in, out), 0, "run: %s", fs_errmsg());
    size_t n_out = 1 + fc->twin + fc->conv_out_output + fc->extra_reader;
    for (size_t o = 0; o < n_out; o++) {
        bool is_y = o == 0 || (fc->twin && o == 1);
        const float *y = out[o]->data;
        for (int64_t m = 0; m < fc->m && is_y; m++)
            for (int64_t h = 0; h < HW; h++)
                for (int64_t w = 0; w < HW; w++) {
                    double want = reference(fc, x, m, h, w), got = y[(m * HW + h) * HW + w];
                    cr_expect(fabs(got - want) <= 1e-5 * fabs(want) + 1e-6,
                              "output %zu [%lld, %lld, %lld]: %.9g, want %.9g", o, (long long)m,
                              (long long)h, (long long)w, got, want);
                }
        eng_tensor_free(out[o]);
    }
    for (size_t p = 0; p < n_in; p++)
        eng_tensor_free(in[p]);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(fuse, conv_with_bias_folds_into_the_conv_and_matches_the_reference)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1, .bias = true};
    cr_expect_eq(fused_count(&fc), 1);
    run_and_compare(&fc);
}

Test(fuse, conv_without_bias_gets_one_and_matches_the_reference)
{
    fuse_case_t fc = {.c = 3, .m = 5, .group = 1};
    cr_expect_eq(fused_count(&fc), 1);
    run_and_compare(&fc);
}

Test(fuse, group_conv_folds_per_output_channel)
{
    fuse_case_t fc = {.c = 4, .m = 6, .group = 2, .bias = true};
    cr_expect_eq(fused_count(&fc), 1);
    run_and_compare(&fc);
}

Test(fuse, depthwise_conv_folds_per_output_channel)
{
    fuse_case_t fc = {.c = 4, .m = 4, .group = 4};
    cr_expect_eq(fused_count(&fc), 1);
    run_and_compare(&fc);
}

Test(fuse, shared_weight_is_left_intact_for_its_other_reader)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1, .bias = true, .twin = true};
    cr_expect_eq(fused_count(&fc), 2);
    run_and_compare(&fc);
    fc.bias = false;
    cr_expect_eq(fused_count(&fc), 2);
    run_and_compare(&fc);
}

Test(fuse, skipped_when_the_conv_output_is_a_graph_output)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1, .bias = true, .conv_out_output = true};
    cr_expect_eq(fused_count(&fc), 0);
    run_and_compare(&fc);
}

Test(fuse, skipped_when_the_conv_output_has_another_reader)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1, .extra_reader = true};
    cr_expect_eq(fused_count(&fc), 0);
    run_and_compare(&fc);
}

Test(fuse, skipped_when_bn_parameters_are_runtime_inputs)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1, .bias = true, .bn_params_inputs = true};
    cr_expect_eq(fused_count(&fc), 0);
    run_and_compare(&fc);
}

Test(fuse, skipped_when_var_plus_eps_is_not_positive)
{
    fuse_case_t fc = {.c = 3, .m = 4, .group = 1};
    mb_t b;
    build(&b, &fc);
    /* var[0] = -eps: the kernel divides by zero; folding would differ. */
    Onnx__TensorProto *var = b.inits[4];
    cr_assert_str_eq(var->name, "var");
    var->float_data[0] = -EPS;
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool done[4] = {false};
    cr_assert_eq(eng_fuse_conv_bn(g, NULL, done), 0);
    cr_expect(!done[0] && !done[1]);
    eng_graph_destroy(g);
    mb_free(&b);
}
