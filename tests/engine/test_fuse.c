/* test_fuse.c -- tests of engine/fuse.c: Conv + BatchNormalization fusion,
 * through the graph (which pairs fuse) and through the model (the fused
 * model computes what a hand-written Conv then BN computes); the erf GELU
 * chain into one Gelu node (which chains fuse; the fused model computes
 * what the chain computes). */
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
    model_fixture_load_bytes(&f, bytes, len);
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

/* --- GELU ------------------------------------------------------------------ */

/* One GELU test model: X [2, 3, 40] (opset 17) -> an erf GELU chain -> Y. */
typedef struct gelu_case {
    bool halve_first;       /* Mul(x, 0.5) first (BERT's order), else PyTorch's */
    bool by_rsqrt2;         /* Mul by 0.70710677 instead of Div by 1.4142135 */
    bool swap_operands;     /* constants first in Add and Mul */
    bool extra_reader;      /* a Relu also reads Erf's output (output R) */
    bool mid_output;        /* Add's output is also a graph output */
    float one;              /* the Add constant (1 to fuse) */
} gelu_case_t;

#define GELU_N 240

static void gelu_build(mb_t *b, const gelu_case_t *gc)
{
    mb_init(b, 8, 17);
    const int64_t xd[3] = {2, 3, 40}, sd[1] = {1};
    mb_input(b, "X", F, 3, xd, NULL);
    /* A rank-0 scale (PyTorch's Constant) and rank-1 [1] others (as
     * tools/make_models.c writes them; X's rank 3 is declared). */
    Onnx__TensorProto *t = mb_tensor(b, "s", F, 0, NULL);
    mb_floats(b, t, (const float[]){gc->by_rsqrt2 ? 0.70710677f : 1.4142135f}, 1);
    mb_initializer(b, t);
    add_const(b, "one", 1, sd, (const float[]){gc->one}, 1);
    add_const(b, "half", 1, sd, (const float[]){0.5f}, 1);
    const bool sw = gc->swap_operands;
    if (gc->halve_first)
        mb_node(b, "Mul", "halve", sw ? "half,X" : "X,half", "H");
    mb_node(b, gc->by_rsqrt2 ? "Mul" : "Div", "scale", "X,s", "T");
    mb_node(b, "Erf", "erf", "T", "E");
    mb_node(b, "Add", "add", sw ? "one,E" : "E,one", "A");
    if (gc->halve_first) {
        mb_node(b, "Mul", "mul", sw ? "A,H" : "H,A", "Y");
    } else {
        mb_node(b, "Mul", "mul", sw ? "A,X" : "X,A", "M");
        mb_node(b, "Mul", "out", sw ? "half,M" : "M,half", "Y");
    }
    mb_output(b, "Y", F, 3, xd);
    if (gc->extra_reader) {
        mb_node(b, "Relu", "relu", "E", "R");
        mb_output(b, "R", F, 3, xd);
    }
    if (gc->mid_output)
        mb_output(b, "A", F, 3, xd);
}

/* Loads, folds and fuses the built model; returns how many Gelu nodes run
 * (each with `approximate`, reading X and writing Y) and checks the
 * chains' other nodes, `per` a chain, are done exactly when one fuses.
 * Frees b. */
static int gelu_count_built(mb_t *b, int per, const char *approximate)
{
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert(done);
    cr_assert_eq(eng_fold_constants(g, NULL, done), 0, "fold: %s", fs_errmsg());
    cr_assert_eq(eng_fuse_gelu(g, done), 0);
    int n = 0, n_done = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *node = &g->nodes[i];
        n_done += done[i];
        if (done[i] || strcmp(node->op_type, "Gelu") != 0)
            continue;
        n++;
        cr_expect_str_eq(eng_attr_s(node, "approximate", "none"), approximate);
        cr_expect_eq(node->n_inputs, 1);
        cr_expect_eq(node->n_outputs, 1);
        cr_expect_str_eq(g->values[node->inputs[0]].name, "X");
        cr_expect_str_eq(g->values[node->outputs[0]].name, "Y");
        cr_expect_eq(g->values[node->outputs[0]].producer, (int)i);
    }
    cr_expect_eq(n_done, per * n);
    free(done);
    eng_graph_destroy(g);
    mb_free(b);
    return n;
}

/* The erf case's Gelu nodes after fusing (four other nodes a chain). */
static int gelu_fused_count(const gelu_case_t *gc)
{
    mb_t b;
    gelu_build(&b, gc);
    return gelu_count_built(&b, 4, "none");
}

/* Runs the built model (X [2, 3, 40] in, Y first out) on x; Y into y
 * (GELU_N floats). Frees b. */
static void gelu_run_built(mb_t *b, const float *x, float *y)
{
    size_t len;
    uint8_t *bytes = mb_pack(b, &len);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    eng_tensor_t in = {.dtype = ENG_DT_FLOAT, .shape = {3, {2, 3, 40}}, .data = (void *)x};
    eng_tensor_t *out[3] = {NULL};
    cr_assert_eq(eng_model_run(f.model, &in, 1, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(eng_shape_numel(&out[0]->shape), GELU_N);
    cr_expect_eq(out[0]->shape.rank, 3);
    memcpy(y, out[0]->data, GELU_N * sizeof *y);
    for (int o = 0; o < 3; o++)
        eng_tensor_free(out[o]);
    model_fixture_close(&f);
    mb_free(b);
}

/* Runs the erf case as a model; Y into y (GELU_N floats). */
static void gelu_run(const gelu_case_t *gc, const float *x, float *y)
{
    mb_t b;
    gelu_build(&b, gc);
    gelu_run_built(&b, x, y);
}

/* The chain with its five nodes run one by one: the Relu reader keeps it
 * unfused; y from that, and from the fused case, within 1e-6 relative
 * plus 1e-6 absolute. The absolute part is for x < -2, where 1 + erf
 * cancels: a 1-ulp change of x / sqrt 2 (Div vs the kernel's multiply)
 * moves erf's float result by a few ulps of 1, up to 5e-7 in y (measured:
 * 4.7e-7 at x = -2.63, y = -0.011), as large as erf's own error there. */
static void gelu_expect_matches_chain(const gelu_case_t *gc)
{
    float x[GELU_N], fused[GELU_N], chain[GELU_N];
    for (int i = 0; i < GELU_N; i++)
        x[i] = -6.0f + 12.0f * (float)i / (GELU_N - 1) + 1e-3f * (float)(i % 7);
    gelu_case_t unfused = *gc;
    unfused.extra_reader = true;
    cr_assert_eq(gelu_fused_count(&unfused), 0);
    gelu_run(gc, x, fused);
    gelu_run(&unfused, x, chain);
    for (int i = 0; i < GELU_N; i++) {
        double want = chain[i], got = fused[i];
        cr_expect(fabs(got - want) <= 1e-6 * fabs(want) + 1e-6, "x %.9g: %.9g, chain %.9g",
                  (double)x[i], got, want);
        double exact = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
        cr_expect(fabs(got - exact) <= 1e-5 * fabs(exact) + 2e-6, "x %.9g: %.9g, exact %.9g",
                  (double)x[i], got, exact);
    }
}

Test(fuse, gelu_chain_as_pytorch_exports_it_becomes_one_gelu)
{
    gelu_case_t gc = {.one = 1.0f};
    cr_expect_eq(gelu_fused_count(&gc), 1);
    gelu_expect_matches_chain(&gc);
}

Test(fuse, gelu_chain_in_other_orders_becomes_one_gelu)
{
    for (int v = 1; v < 8; v++) {
        gelu_case_t gc = {.one = 1.0f, .halve_first = v & 1, .by_rsqrt2 = v & 2,
                          .swap_operands = v & 4};
        cr_expect_eq(gelu_fused_count(&gc), 1, "variant %d", v);
        gelu_expect_matches_chain(&gc);
    }
}

Test(fuse, gelu_chain_with_the_multiply_by_rsqrt2_gives_the_chains_bits)
{
    gelu_case_t gc = {.one = 1.0f, .by_rsqrt2 = true}, unfused = gc;
    unfused.extra_reader = true;
    float x[GELU_N], fused[GELU_N], chain[GELU_N];
    for (int i = 0; i < GELU_N; i++)
        x[i] = -6.0f + 12.0f * (float)i / (GELU_N - 1);
    gelu_run(&gc, x, fused);
    gelu_run(&unfused, x, chain);
    cr_expect(memcmp(fused, chain, sizeof fused) == 0);
}

/* The tanh GELU (GPT-2's gelu_new) as PyTorch exports it: X [2, 3, 40]
 * -> 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Y, halved
 * first (Python's 0.5 * x * ..) or last; `reader`: a Relu also reads
 * Tanh's output (output R), which keeps the chain unfused. */
static void gelu_tanh_build(mb_t *b, bool halve_first, bool swap, bool reader)
{
    mb_init(b, 8, 17);
    const int64_t xd[3] = {2, 3, 40}, sd[1] = {1};
    mb_input(b, "X", F, 3, xd, NULL);
    add_const(b, "three", 1, sd, (const float[]){3.0f}, 1);
    add_const(b, "cubic", 1, sd, (const float[]){0.044715f}, 1);
    add_const(b, "s", 1, sd, (const float[]){0.7978845608028654f}, 1);
    add_const(b, "one", 1, sd, (const float[]){1.0f}, 1);
    add_const(b, "half", 1, sd, (const float[]){0.5f}, 1);
    if (halve_first)
        mb_node(b, "Mul", "halve", swap ? "half,X" : "X,half", "H");
    mb_node(b, "Pow", "pow", "X,three", "P");
    mb_node(b, "Mul", "cube", swap ? "cubic,P" : "P,cubic", "C");
    mb_node(b, "Add", "inner", swap ? "C,X" : "X,C", "I");
    mb_node(b, "Mul", "scale", swap ? "s,I" : "I,s", "S");
    mb_node(b, "Tanh", "tanh", "S", "T");
    mb_node(b, "Add", "add", swap ? "one,T" : "T,one", "A");
    if (halve_first) {
        mb_node(b, "Mul", "mul", swap ? "A,H" : "H,A", "Y");
    } else {
        mb_node(b, "Mul", "mul", swap ? "A,X" : "X,A", "M");
        mb_node(b, "Mul", "out", swap ? "half,M" : "M,half", "Y");
    }
    mb_output(b, "Y", F, 3, xd);
    if (reader) {
        mb_node(b, "Relu", "relu", "T", "R");
        mb_output(b, "R", F, 3, xd);
    }
}

/* The tanh case's Gelu nodes after fusing (seven other nodes a chain). */
static int gelu_tanh_fused_count(bool halve_first, bool swap, bool reader)
{
    mb_t b;
    gelu_tanh_build(&b, halve_first, swap, reader);
    return gelu_count_built(&b, 7, "tanh");
}

/* Runs the tanh case as a model; Y into y (GELU_N floats). */
static void gelu_tanh_run(bool halve_first, bool swap, bool reader, const float *x, float *y)
{
    mb_t b;
    gelu_tanh_build(&b, halve_first, swap, reader);
    gelu_run_built(&b, x, y);
}

/* Each order fuses into one Gelu(approximate tanh) whose values are the
 * chain's run op by op (within 1e-6 relative plus 2e-6 absolute, where
 * 1 + tanh cancels for x < -3) and the formula's in double. */
Test(fuse, gelu_tanh_chain_as_pytorch_exports_it_becomes_one_gelu)
{
    float x[GELU_N], fused[GELU_N], chain[GELU_N];
    for (int i = 0; i < GELU_N; i++)
        x[i] = -6.0f + 12.0f * (float)i / (GELU_N - 1) + 1e-3f * (float)(i % 7);
    for (int v = 0; v < 4; v++) {
        bool halve_first = v & 1, swap = v & 2;
        cr_expect_eq(gelu_tanh_fused_count(halve_first, swap, false), 1, "variant %d", v);
        cr_expect_eq(gelu_tanh_fused_count(halve_first, swap, true), 0,
                     "variant %d fused with a second reader of tanh", v);
        gelu_tanh_run(halve_first, swap, false, x, fused);
        gelu_tanh_run(halve_first, swap, true, x, chain);
        for (int i = 0; i < GELU_N; i++) {
            double want = chain[i], got = fused[i], xi = x[i];
            cr_expect(fabs(got - want) <= 1e-6 * fabs(want) + 2e-6,
                      "variant %d x %.9g: %.9g, chain %.9g", v, xi, got, want);
            double exact =
                0.5 * xi * (1.0 + tanh(sqrt(2.0 / M_PI) * (xi + 0.044715 * xi * xi * xi)));
            cr_expect(fabs(got - exact) <= 1e-5 * fabs(exact) + 2e-6,
                      "variant %d x %.9g: %.9g, exact %.9g", v, xi, got, exact);
        }
    }
}

Test(fuse, gelu_skipped_when_an_intermediate_has_another_reader)
{
    gelu_case_t gc = {.one = 1.0f, .extra_reader = true};
    cr_expect_eq(gelu_fused_count(&gc), 0);
    gc.extra_reader = false;
    gc.mid_output = true;
    cr_expect_eq(gelu_fused_count(&gc), 0);
}

Test(fuse, gelu_skipped_when_a_constant_differs)
{
    gelu_case_t gc = {.one = 1.0000001f};
    cr_expect_eq(gelu_fused_count(&gc), 0);
    gc.one = 2.0f;
    cr_expect_eq(gelu_fused_count(&gc), 0);
}
