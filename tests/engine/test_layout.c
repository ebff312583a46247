/* test_layout.c -- tests of engine/layout.c: which nodes of a graph run
 * channels-last, where the Transposes go, which ReLUs and residual Adds
 * fold into their Conv, W's re-layout (through the graph); and that the
 * model forced channels-last on the CPU computes what the plain NCHW
 * model computes (through the model). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/half.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define F16 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16

/* A weight initializer of `dims` in dtype dt (F or F16), deterministic
 * values from `seed`. */
static void add_weight(mb_t *b, const char *name, int dt, int rank, const int64_t *dims,
                       int seed)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    Onnx__TensorProto *t = mb_tensor(b, name, dt, rank, dims);
    if (dt == F) {
        float *v = mb_alloc(b, (size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)(0.4 * sin(0.37 * (double)i + seed));
        mb_floats(b, t, v, (size_t)n);
    } else {
        uint16_t *v = mb_alloc(b, (size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = eng_float_to_half_dt(ENG_DT_FLOAT16, (float)(0.4 * sin(0.37 * (double)i + seed)));
        mb_raw(b, t, v, (size_t)n * sizeof *v);
    }
    mb_initializer(b, t);
}

/* A Conv node `name` reading X `in`, writing `out`, with W [m, c/group, k,
 * k] and a bias (named name/W, name/B), pads k/2 and `stride`. */
static void add_conv(mb_t *b, int dt, const char *name, const char *in, const char *out,
                     int64_t c, int64_t m, int64_t k, int64_t stride, int64_t group, int seed)
{
    char w[64], bias[64], ins[200];
    snprintf(w, sizeof w, "%s/W", name);
    snprintf(bias, sizeof bias, "%s/B", name);
    add_weight(b, w, dt, 4, (int64_t[]){m, c / group, k, k}, seed);
    add_weight(b, bias, dt, 1, &m, seed + 100);
    snprintf(ins, sizeof ins, "%s,%s,%s", in, w, bias);
    Onnx__NodeProto *n = mb_node(b, "Conv", name, ins, out);
    int64_t p = k / 2;
    mb_attr_ints(b, n, "pads", (int64_t[]){p, p, p, p}, 4);
    mb_attr_ints(b, n, "strides", (int64_t[]){stride, stride}, 2);
    if (group != 1)
        mb_attr_i(b, n, "group", group);
}

/* The graph of b after eng_layout_channels_last, with its `done`. */
typedef struct laid {
    eng_graph_t *g;
    bool *done;
} laid_t;

static laid_t lay_out(mb_t *b)
{
    laid_t l = {0};
    cr_assert_eq(mb_load(b, NULL, NULL, &l.g), 0, "load: %s", fs_errmsg());
    l.done = calloc(l.g->n_nodes + 1, sizeof *l.done);
    cr_assert(l.done);
    cr_assert_eq(eng_layout_channels_last(l.g, NULL, &l.done), 0, "layout: %s", fs_errmsg());
    return l;
}

static void laid_free(laid_t *l)
{
    free(l->done);
    eng_graph_destroy(l->g);
}

/* Live nodes of op type `op`. */
static int count_live(const laid_t *l, const char *op)
{
    int n = 0;
    for (size_t i = 0; i < l->g->n_nodes; i++)
        n += !l->done[i] && strcmp(l->g->nodes[i].op_type, op) == 0;
    return n;
}

/* The live node named `name` (the model's node names). */
static const eng_node_t *node_named(const laid_t *l, const char *name)
{
    for (size_t i = 0; i < l->g->n_nodes; i++)
        if (!l->done[i] && strcmp(l->g->nodes[i].name, name) == 0)
            return &l->g->nodes[i];
    cr_assert_fail("no live node '%s'", name);
    return NULL;
}

/* Live nodes read only values made before them, and the consumer counts
 * are what the nodes read. */
static void check_order(const laid_t *l)
{
    const eng_graph_t *g = l->g;
    int *readers = calloc(g->n_values + 1, sizeof *readers);
    cr_assert(readers);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0)
                continue;
            readers[v]++;
            if (!l->done[i])
                cr_expect_lt(g->values[v].producer, (int)i, "node '%s' reads '%s' before it is "
                             "made", g->nodes[i].name, g->values[v].name);
        }
    for (size_t v = 0; v < g->n_values; v++)
        cr_expect_eq(g->values[v].n_consumers, readers[v], "consumers of '%s'",
                     g->values[v].name);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; !l->done[i] && k < g->nodes[i].n_outputs; k++)
            cr_expect_eq(g->values[g->nodes[i].outputs[k]].producer, (int)i);
    free(readers);
}

/* Loads b's bytes on the CPU twice, NCHW and forced channels-last, runs
 * both on the same input X of `xdims`, and expects every output equal
 * within rtol (plus 1e-6). */
static void expect_same_outputs(mb_t *b, const int64_t xdims[4], size_t n_out, double rtol)
{
    size_t len;
    uint8_t *bytes = mb_pack(b, &len);
    eng_shape_t xs = {.rank = 4, .dims = {xdims[0], xdims[1], xdims[2], xdims[3]}};
    eng_tensor_t *x = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &xs, &x), 0);
    for (int64_t i = 0; i < eng_shape_numel(&xs); i++)
        ((float *)x->data)[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    eng_tensor_t *out[2][4] = {{NULL}};
    for (int side = 0; side < 2; side++) {
        model_fixture_t f;
        model_fixture_cache(&f);
        eng_model_config_t cfg = {.cache = f.cache, .n_threads = 2,
                                  .conv_layout = side ? ENG_CONV_LAYOUT_NHWC
                                                      : ENG_CONV_LAYOUT_NCHW};
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &f.model), 0, "load: %s",
                     fs_errmsg());
        cr_assert_eq(eng_model_run(f.model, x, 1, out[side]), 0, "run: %s", fs_errmsg());
        model_fixture_close(&f);
    }
    for (size_t o = 0; o < n_out; o++) {
        cr_assert(eng_shape_equal(&out[0][o]->shape, &out[1][o]->shape), "output %zu's shape",
                  o);
        const float *want = out[0][o]->data, *got = out[1][o]->data;
        for (int64_t i = 0; i < eng_shape_numel(&out[0][o]->shape); i++)
            cr_expect(fabs(got[i] - want[i]) <= rtol * fabs(want[i]) + 1e-6,
                      "output %zu [%lld]: %.9g channels-last, %.9g NCHW", o, (long long)i,
                      got[i], want[i]);
        eng_tensor_free(out[0][o]);
        eng_tensor_free(out[1][o]);
    }
    eng_tensor_free(x);

}

/* A bottleneck block at opset 13 in dtype dt (F16: behind Casts):
 * X [2, 8, 6, 6] -> conv_a 1x1 -> Relu -> MaxPool 3x3 (pads 1) = P;
 * P -> conv_b 3x3 -> Clip(0, none) -> conv_c 1x1 -> Add(., P) -> Relu ->
 * GlobalAveragePool -> Y. */
static void build_block(mb_t *b, int dt)
{
    mb_init(b, 8, 13);
    mb_input(b, "X", F, 4, (int64_t[]){2, 8, 6, 6}, NULL);
    const char *x = "X";
    if (dt == F16) {
        mb_attr_i(b, mb_node(b, "Cast", "in", "X", "Xh"), "to", F16);
        x = "Xh";
    }
    add_conv(b, dt, "conv_a", x, "A", 8, 8, 1, 1, 1, 1);
    mb_node(b, "Relu", "relu_a", "A", "RA");
    Onnx__NodeProto *mp = mb_node(b, "MaxPool", "pool", "RA", "P");
    mb_attr_ints(b, mp, "kernel_shape", (int64_t[]){3, 3}, 2);
    mb_attr_ints(b, mp, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    add_conv(b, dt, "conv_b", "P", "Bo", 8, 8, 3, 1, 1, 2);
    add_weight(b, "zero", dt, 0, NULL, 0);
    /* add_weight's sin(0 + 0) is 0: Clip(0, none), a ReLU */
    mb_node(b, "Clip", "clip_b", "Bo,zero", "RB");
    add_conv(b, dt, "conv_c", "RB", "Co", 8, 8, 1, 1, 1, 3);
    mb_node(b, "Add", "add", "Co,P", "S");
    mb_node(b, "Relu", "relu_c", "S", "RS");
    mb_node(b, "GlobalAveragePool", "gap", "RS", dt == F16 ? "Yh" : "Y");
    if (dt == F16)
        mb_attr_i(b, mb_node(b, "Cast", "out", "Yh", "Y"), "to", F);
    mb_output(b, "Y", F, 4, (int64_t[]){2, 8, 1, 1});
}

Test(layout, residual_block_runs_channels_last_with_relu_and_add_fused)
{
    mb_t b;
    build_block(&b, F);
    laid_t l = lay_out(&b);
    check_order(&l);
    /* X enters, Y leaves: one Transpose each; the Relus, the Clip and the
     * Add are folded into the Convs. */
    cr_expect_eq(count_live(&l, "Transpose"), 2);
    cr_expect_eq(count_live(&l, "Relu"), 0);
    cr_expect_eq(count_live(&l, "Clip"), 0);
    cr_expect_eq(count_live(&l, "Add"), 0);
    const eng_node_t *a = node_named(&l, "conv_a"), *bn = node_named(&l, "conv_b"),
                     *c = node_named(&l, "conv_c");
    cr_expect(a->channels_last && a->conv_relu && !a->conv_residual);
    cr_expect(bn->channels_last && bn->conv_relu && !bn->conv_residual);
    cr_expect(c->channels_last && c->conv_relu && c->conv_residual);
    cr_expect_eq(c->n_inputs, 4);
    cr_expect_str_eq(l.g->values[c->inputs[3]].name, "P");
    cr_expect_str_eq(l.g->values[c->outputs[0]].name, "RS");
    cr_expect(node_named(&l, "pool")->channels_last);
    cr_expect(node_named(&l, "gap")->channels_last);
    /* W [M, C, kH, kW] became [M, kH, kW, C], element (m, c, h, w) moved. */
    const eng_tensor_t *w = &l.g->values[bn->inputs[1]].constant;
    cr_expect(w->shape.rank == 4 && w->shape.dims[0] == 8 && w->shape.dims[1] == 3 &&
              w->shape.dims[2] == 3 && w->shape.dims[3] == 8);
    int64_t m = 5, ci = 6, h = 2, x = 1;
    float want = (float)(0.4 * sin(0.37 * (double)(((m * 8 + ci) * 3 + h) * 3 + x) + 2));
    cr_expect_eq(((const float *)w->data)[((m * 3 + h) * 3 + x) * 8 + ci], want);
    /* Values inside the region are declared NHWC; Y stays NCHW. */
    int p = graph_value(l.g, "P");
    cr_expect(l.g->values[p].rank < 0 || l.g->values[p].dims[3].value == -1 ||
              l.g->values[p].dims[3].value == 8);
    int y = graph_value(l.g, "Y");
    cr_expect_eq(l.g->values[y].dims[1].value, 8);
    cr_expect_eq(l.g->nodes[l.g->values[y].producer].op_type, eng_op_type(ENG_OP_Transpose));
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){2, 8, 6, 6}, 1, 1e-5);
    mb_free(&b);
}

Test(layout, float16_block_matches_nchw)
{
    mb_t b;
    build_block(&b, F16);
    laid_t l = lay_out(&b);
    check_order(&l);
    cr_expect(node_named(&l, "conv_c")->conv_residual);
    laid_free(&l);
    /* Sums in another order may round to the other float16 neighbour. */
    expect_same_outputs(&b, (int64_t[]){2, 8, 6, 6}, 1, 4e-3);
    mb_free(&b);
}

Test(layout, region_value_read_outside_leaves_through_a_transpose)
{
    /* X -> conv1 -> Relu = R; R -> conv2 -> Y; R -> Flatten -> Z (outside). */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 3, 5, 5}, NULL);
    add_conv(&b, F, "conv1", "X", "C1", 3, 4, 3, 1, 1, 1);
    mb_node(&b, "Relu", "relu", "C1", "R");
    add_conv(&b, F, "conv2", "R", "Y", 4, 6, 3, 2, 1, 2);
    mb_node(&b, "Flatten", "flat", "R", "Z");
    mb_output(&b, "Y", F, -1, NULL);
    mb_output(&b, "Z", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    /* X in; R and Y out. Flatten reads R as it was (NCHW). */
    cr_expect_eq(count_live(&l, "Transpose"), 3);
    const eng_node_t *c1 = node_named(&l, "conv1"), *c2 = node_named(&l, "conv2"),
                     *fl = node_named(&l, "flat");
    cr_expect(c1->conv_relu);
    int r = graph_value(l.g, "R");
    cr_expect_eq(fl->inputs[0], r);
    cr_expect_neq(c2->inputs[0], r, "conv2 reads R's channels-last twin");
    cr_expect_eq(c2->inputs[0], c1->outputs[0]);
    cr_expect_str_eq(l.g->nodes[l.g->values[r].producer].op_type, "Transpose");
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){1, 3, 5, 5}, 2, 1e-5);
    mb_free(&b);
}

Test(layout, graph_output_inside_the_region_keeps_its_value_and_stops_a_fusion)
{
    /* X -> conv -> C (a graph output) -> Relu -> Y: the Relu stays. */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){2, 4, 4, 4}, NULL);
    add_conv(&b, F, "conv", "X", "C", 4, 4, 3, 1, 1, 1);
    mb_node(&b, "Relu", "relu", "C", "Y");
    mb_output(&b, "C", F, 4, (int64_t[]){2, 4, 4, 4});
    mb_output(&b, "Y", F, 4, (int64_t[]){2, 4, 4, 4});
    laid_t l = lay_out(&b);
    check_order(&l);
    cr_expect_eq(count_live(&l, "Relu"), 1);
    cr_expect(!node_named(&l, "conv")->conv_relu);
    cr_expect_eq(count_live(&l, "Transpose"), 3);
    int c = graph_value(l.g, "C");
    cr_expect_str_eq(l.g->nodes[l.g->values[c].producer].op_type, "Transpose");
    cr_expect_eq(l.g->values[c].dims[1].value, 4);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){2, 4, 4, 4}, 2, 1e-5);
    mb_free(&b);
}

Test(layout, grouped_and_depthwise_convs_join_and_a_channel_multiplier_stays_nchw)
{
    /* X [1, 4, 5, 5] -> grouped (2) 3x3 -> depthwise 3x3 stride 2 -> Relu
     * -> channel multiplier (6 groups, 2 outputs each) 3x3 -> Y. */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 4, 5, 5}, NULL);
    add_conv(&b, F, "grouped", "X", "G", 4, 6, 3, 1, 2, 1);
    add_conv(&b, F, "depthwise", "G", "D", 6, 6, 3, 2, 6, 2);
    mb_node(&b, "Relu", "relu", "D", "R");
    add_conv(&b, F, "multiplier", "R", "Y", 6, 12, 3, 1, 6, 3);
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    cr_expect(node_named(&l, "grouped")->channels_last);
    const eng_node_t *dw = node_named(&l, "depthwise");
    cr_expect(dw->channels_last && dw->conv_relu);
    cr_expect(!node_named(&l, "multiplier")->channels_last);
    cr_expect_eq(count_live(&l, "Transpose"), 2);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){1, 4, 5, 5}, 1, 1e-5);
    mb_free(&b);
}

Test(layout, conv_algo_marks_the_channels_last_convs_only)
{
    /* The graph above: two channels-last Convs and a channel multiplier
     * that stays NCHW. */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 4, 5, 5}, NULL);
    add_conv(&b, F, "grouped", "X", "G", 4, 6, 3, 1, 2, 1);
    add_conv(&b, F, "depthwise", "G", "D", 6, 6, 3, 2, 6, 2);
    mb_node(&b, "Relu", "relu", "D", "R");
    add_conv(&b, F, "multiplier", "R", "Y", 6, 12, 3, 1, 6, 3);
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    const eng_node_t *gr = node_named(&l, "grouped"), *dw = node_named(&l, "depthwise"),
                     *mu = node_named(&l, "multiplier");
    cr_expect(!gr->conv_im2col && !dw->conv_im2col && !mu->conv_im2col, "unmarked at first");
    eng_layout_conv_algo(l.g, ENG_CONV_ALGO_IM2COL);
    cr_expect(gr->conv_im2col && dw->conv_im2col);
    cr_expect(!mu->conv_im2col, "an NCHW Conv is left alone");
    for (size_t i = 0; i < l.g->n_nodes; i++)
        if (strcmp(l.g->nodes[i].op_type, "Conv") != 0)
            cr_expect(!l.g->nodes[i].conv_im2col, "'%s' is no Conv", l.g->nodes[i].name);
    eng_layout_conv_algo(l.g, ENG_CONV_ALGO_IMPLICIT);
    cr_expect(!gr->conv_im2col && !dw->conv_im2col && !mu->conv_im2col);
    cr_expect(gr->conv_implicit && dw->conv_implicit && !mu->conv_implicit);
    eng_layout_conv_algo(l.g, ENG_CONV_ALGO_IM2COL);
    eng_layout_conv_algo(l.g, ENG_CONV_ALGO_AUTO);
    cr_expect(!gr->conv_im2col && !dw->conv_im2col, "auto clears it too");
    cr_expect(!gr->conv_implicit && !dw->conv_implicit, "and leaves the choice to the device");
    laid_free(&l);
    mb_free(&b);
}

/* The CPU has one channels-last algorithm: every choice computes the same
 * bits. */
Test(layout, conv_algo_choices_compute_alike_on_the_cpu)
{
    mb_t b;
    build_block(&b, F);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    eng_shape_t xs = {.rank = 4, .dims = {2, 8, 6, 6}};
    eng_tensor_t *x = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &xs, &x), 0);
    for (int64_t i = 0; i < eng_shape_numel(&xs); i++)
        ((float *)x->data)[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const eng_conv_algo_t algos[] = {ENG_CONV_ALGO_AUTO, ENG_CONV_ALGO_IM2COL,
                                     ENG_CONV_ALGO_IMPLICIT};
    eng_tensor_t *out[3] = {NULL};
    for (int i = 0; i < 3; i++) {
        model_fixture_t f;
        model_fixture_cache(&f);
        eng_model_config_t cfg = {.cache = f.cache, .n_threads = 2,
                                  .conv_layout = ENG_CONV_LAYOUT_NHWC, .conv = algos[i]};
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &f.model), 0, "load: %s",
                     fs_errmsg());
        cr_assert_eq(eng_model_run(f.model, x, 1, &out[i]), 0, "run: %s", fs_errmsg());
        model_fixture_close(&f);
    }
    for (int i = 1; i < 3; i++) {
        cr_assert(eng_shape_equal(&out[0]->shape, &out[i]->shape));
        cr_expect_arr_eq(out[0]->data, out[i]->data,
                         (size_t)eng_shape_numel(&out[0]->shape) * sizeof(float),
                         "algorithm %d", (int)algos[i]);
    }
    for (int i = 0; i < 3; i++)
        eng_tensor_free(out[i]);
    eng_tensor_free(x);
    mb_free(&b);
}

Test(layout, residual_made_after_the_conv_fuses_into_the_later_conv)
{
    /* A projection block: main = conv_m(X), shortcut = conv_s(X) listed
     * after it; Add(main, shortcut) -> Relu. The Add goes into conv_s,
     * which reads main as its residual. */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){2, 4, 6, 6}, NULL);
    add_conv(&b, F, "conv_m", "X", "M", 4, 8, 3, 2, 1, 1);
    add_conv(&b, F, "conv_s", "X", "S", 4, 8, 1, 2, 1, 2);
    mb_node(&b, "Add", "add", "M,S", "A");
    mb_node(&b, "Relu", "relu", "A", "Y");
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    const eng_node_t *m = node_named(&l, "conv_m"), *s = node_named(&l, "conv_s");
    cr_expect(!m->conv_residual && !m->conv_relu);
    cr_expect(s->conv_residual && s->conv_relu);
    cr_expect_eq(s->inputs[3], m->outputs[0]);
    /* X enters once, for both Convs. */
    cr_expect_eq(count_live(&l, "Transpose"), 2);
    cr_expect_eq(m->inputs[0], s->inputs[0]);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){2, 4, 6, 6}, 1, 1e-5);
    mb_free(&b);
}

Test(layout, graph_without_a_conv_is_left_alone)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 2, 3, 3}, NULL);
    mb_node(&b, "Relu", "relu", "X", "R");
    Onnx__NodeProto *mp = mb_node(&b, "MaxPool", "pool", "R", "Y");
    mb_attr_ints(&b, mp, "kernel_shape", (int64_t[]){2, 2}, 2);
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    cr_expect_eq(l.g->n_nodes, 2);
    cr_expect(!node_named(&l, "pool")->channels_last);
    laid_free(&l);
    mb_free(&b);
}

Test(layout, squeeze_excite_reduce_mean_joins_with_its_axes_rewritten)
{
    /* X -> conv -> Relu = R; ReduceMean(R, axes [2, 3]) -> 1x1 conv ->
     * Sigmoid = S; Mul(R, S) -> Y. Opset 18: axes is an input. */
    mb_t b;
    mb_init(&b, 8, 18);
    mb_input(&b, "X", F, 4, (int64_t[]){2, 4, 5, 5}, NULL);
    add_conv(&b, F, "conv", "X", "C", 4, 8, 3, 1, 1, 1);
    mb_node(&b, "Relu", "relu", "C", "R");
    Onnx__TensorProto *ax = mb_tensor(&b, "axes", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                                      (int64_t[]){2});
    mb_int64s(&b, ax, (int64_t[]){2, 3}, 2);
    mb_initializer(&b, ax);
    mb_node(&b, "ReduceMean", "mean", "R,axes", "M");
    add_conv(&b, F, "squeeze", "M", "Q", 8, 8, 1, 1, 1, 2);
    mb_node(&b, "Sigmoid", "sig", "Q", "S");
    mb_node(&b, "Mul", "mul", "R,S", "Y");
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    cr_expect_eq(count_live(&l, "Transpose"), 2);
    const eng_node_t *m = node_named(&l, "mean");
    const eng_tensor_t *axes = &l.g->values[m->inputs[1]].constant;
    cr_expect(axes->shape.dims[0] == 2 && ((const int64_t *)axes->data)[0] == 1 &&
              ((const int64_t *)axes->data)[1] == 2);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){2, 4, 5, 5}, 1, 1e-5);
    mb_free(&b);
}

Test(layout, model_transpose_that_undoes_the_leaving_one_is_skipped)
{
    /* ConvNeXt's export: conv -> Transpose(0, 2, 3, 1) -> LayerNorm ->
     * Transpose(0, 3, 1, 2) -> conv2 -> Y. The region's leaving Transpose
     * and the model's first cancel, and so do the model's second and
     * conv2's entering one. */
    mb_t b;
    mb_init(&b, 8, 17);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 3, 6, 6}, NULL);
    add_conv(&b, F, "conv", "X", "C", 3, 8, 3, 2, 1, 1);
    mb_attr_ints(&b, mb_node(&b, "Transpose", "to_nhwc", "C", "T"), "perm",
                 (int64_t[]){0, 2, 3, 1}, 4);
    add_weight(&b, "ln/s", F, 1, (int64_t[]){8}, 3);
    mb_node(&b, "LayerNormalization", "ln", "T,ln/s", "L");
    mb_attr_ints(&b, mb_node(&b, "Transpose", "to_nchw", "L", "U"), "perm",
                 (int64_t[]){0, 3, 1, 2}, 4);
    add_conv(&b, F, "conv2", "U", "Y", 8, 4, 1, 1, 1, 2);
    mb_output(&b, "Y", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    /* Left: X's entering Transpose and Y's leaving one. */
    cr_expect_eq(count_live(&l, "Transpose"), 2);
    const eng_node_t *ln = node_named(&l, "ln"), *c = node_named(&l, "conv"),
                     *c2 = node_named(&l, "conv2");
    cr_expect_eq(ln->inputs[0], c->outputs[0]);
    cr_expect_eq(c2->inputs[0], ln->outputs[0]);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){1, 3, 6, 6}, 1, 1e-5);
    mb_free(&b);
}

Test(layout, pools_after_a_conv_run_channels_last_and_match_nchw)
{
    /* conv -> MaxPool (ceil_mode, dilations) and conv -> AveragePool
     * (ceil_mode, count_include_pad, strides) -> GlobalMaxPool. */
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){2, 3, 9, 9}, NULL);
    add_conv(&b, F, "conv", "X", "C", 3, 5, 3, 1, 1, 1);
    Onnx__NodeProto *mp = mb_node(&b, "MaxPool", "max", "C", "Y1");
    mb_attr_ints(&b, mp, "kernel_shape", (int64_t[]){2, 3}, 2);
    mb_attr_ints(&b, mp, "dilations", (int64_t[]){2, 1}, 2);
    mb_attr_ints(&b, mp, "strides", (int64_t[]){2, 2}, 2);
    mb_attr_i(&b, mp, "ceil_mode", 1);
    Onnx__NodeProto *ap = mb_node(&b, "AveragePool", "avg", "C", "A");
    mb_attr_ints(&b, ap, "kernel_shape", (int64_t[]){3, 3}, 2);
    mb_attr_ints(&b, ap, "strides", (int64_t[]){2, 2}, 2);
    mb_attr_ints(&b, ap, "pads", (int64_t[]){1, 0, 1, 1}, 4);
    mb_attr_i(&b, ap, "ceil_mode", 1);
    mb_attr_i(&b, ap, "count_include_pad", 1);
    mb_node(&b, "GlobalMaxPool", "gmax", "A", "Y2");
    mb_output(&b, "Y1", F, -1, NULL);
    mb_output(&b, "Y2", F, -1, NULL);
    laid_t l = lay_out(&b);
    check_order(&l);
    cr_expect(node_named(&l, "max")->channels_last && node_named(&l, "avg")->channels_last &&
              node_named(&l, "gmax")->channels_last);
    cr_expect_eq(count_live(&l, "Transpose"), 3);
    laid_free(&l);
    expect_same_outputs(&b, (int64_t[]){2, 3, 9, 9}, 2, 1e-6);
    mb_free(&b);
}
