/* test_fuse_chain.c -- tests of engine/fuse_chain.c and the FusedElementwise
 * op: which element-wise groups fuse and which are left alone, and that on
 * the CPU the fused graph's outputs are the unfused graph's bits (float32;
 * float16 within its rounding), through the pass alone and through
 * eng_model_load. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/ew_program.h"
#include "engine/half.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define H ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
#define BOOL ONNX__TENSOR_PROTO__DATA_TYPE__BOOL
#define FC_MAX_IN 10

typedef struct fc_in {
    const char *name;
    int dtype;
    int rank;
    int64_t dims[4];
} fc_in_t;

/* One test graph: its inputs, its nodes (the build function adds them and
 * their constants), output Y of dtype out_dtype and, when set, a second
 * output. */
typedef struct fc_case {
    const char *desc;
    fc_in_t in[FC_MAX_IN];
    void (*nodes)(mb_t *b);
    int out_dtype;
    const char *extra_out;
} fc_case_t;

static int fc_n_in(const fc_case_t *c)
{
    int n = 0;
    while (n < FC_MAX_IN && c->in[n].name)
        n++;
    return n;
}

/* A constant of `rank` dims of 1 (0: a scalar) holding v, as float or float16. */
static void fc_const(mb_t *b, const char *name, float v, int rank, int dtype)
{
    const int64_t ones[4] = {1, 1, 1, 1};
    Onnx__TensorProto *t = mb_tensor(b, name, dtype, rank, ones);
    if (dtype == F) {
        mb_floats(b, t, &v, 1);
    } else {
        uint16_t h = eng_float_to_half(v);
        t->has_raw_data = 1;
        t->raw_data.len = 2;
        t->raw_data.data = mb_dup(b, &h, 2);
    }
    mb_initializer(b, t);
}

static uint8_t *fc_build(mb_t *b, const fc_case_t *c, size_t *len)
{
    mb_init(b, 8, 17);
    for (int k = 0; k < fc_n_in(c); k++)
        mb_input(b, c->in[k].name, c->in[k].dtype, c->in[k].rank, c->in[k].dims, NULL);
    c->nodes(b);
    mb_output(b, "Y", c->out_dtype, -1, NULL);
    if (c->extra_out)
        mb_output(b, c->extra_out, F, -1, NULL);
    return mb_pack(b, len);
}

/* What the pass made of a case's graph. */
typedef struct fc_result {
    int groups;               /* FusedElementwise nodes */
    int ops;                  /* the nodes they replaced */
    int max_inputs;
    bool live[64];            /* per node: not done */
    char types[64][24];       /* per node: op type after the pass */
    int n_nodes;
} fc_result_t;

/* The case's graph loaded, folded and, with `fuse`, through the chain pass. */
static eng_graph_t *fc_graph(const fc_case_t *c, bool fuse, mb_t *b, bool **done)
{
    size_t len;
    uint8_t *bytes = fc_build(b, c, &len);
    eng_graph_t *g = NULL;
    cr_assert_eq(eng_graph_load(bytes, len, NULL, NULL, &g), 0, "%s: load: %s", c->desc,
                 fs_errmsg());
    *done = calloc(g->n_nodes + 1, sizeof **done);
    cr_assert(*done);
    cr_assert_eq(eng_fold_constants(g, NULL, *done), 0, "%s: fold: %s", c->desc, fs_errmsg());
    if (fuse)
        cr_assert_eq(eng_fuse_elementwise_chains(g, *done), 0, "%s: %s", c->desc, fs_errmsg());
    return g;
}

static fc_result_t fc_fuse(const fc_case_t *c)
{
    mb_t b;
    bool *done;
    eng_graph_t *g = fc_graph(c, true, &b, &done);
    fc_result_t r = {0};
    cr_assert_leq(g->n_nodes, 64);
    r.n_nodes = (int)g->n_nodes;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        r.live[i] = !done[i];
        snprintf(r.types[i], sizeof r.types[i], "%s", n->op_type);
        if (done[i] || strcmp(n->op_type, "FusedElementwise") != 0)
            continue;
        cr_assert(n->ew, "%s: a FusedElementwise node without its program", c->desc);
        r.groups++;
        r.ops += n->ew->n_fused;
        if (n->n_inputs > r.max_inputs)
            r.max_inputs = n->n_inputs;
        cr_expect_eq(n->n_inputs, n->ew->n_inputs);
        cr_expect_leq(n->n_inputs, ENG_EW_MAX_INPUTS);
        cr_expect_eq(g->values[n->outputs[0]].producer, (int)i, "%s: the fused node writes its "
                     "output", c->desc);
    }
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    return r;
}

/* The case's inputs: fixed values of both signs (bool: a pattern). */
static void fc_inputs(const fc_case_t *c, eng_tensor_t *ins)
{
    for (int k = 0; k < fc_n_in(c); k++) {
        const fc_in_t *s = &c->in[k];
        eng_tensor_t *t = &ins[k];
        t->dtype = s->dtype == F ? ENG_DT_FLOAT : s->dtype == H ? ENG_DT_FLOAT16 : ENG_DT_BOOL;
        t->shape.rank = s->rank;
        for (int d = 0; d < s->rank; d++)
            t->shape.dims[d] = s->dims[d];
        int64_t n = eng_shape_numel(&t->shape);
        t->data = malloc((size_t)(n ? n : 1) * eng_dtype_size(t->dtype));
        cr_assert(t->data);
        for (int64_t i = 0; i < n; i++) {
            float v = (float)(2.5 * sin(0.37 * (double)i + 1.3 * k) + 0.01 * (double)k);
            if (t->dtype == ENG_DT_FLOAT)
                ((float *)t->data)[i] = v;
            else if (t->dtype == ENG_DT_FLOAT16)
                ((uint16_t *)t->data)[i] = eng_float_to_half(v);
            else
                ((uint8_t *)t->data)[i] = (uint8_t)((i * 7 + k) % 3 == 0);
        }
    }
}

/* Runs the case's graph (fused or not) on the CPU; Y into *y. */
static void fc_run(const fc_case_t *c, bool fuse, eng_tensor_t **y)
{
    mb_t b;
    bool *done;
    eng_graph_t *g = fc_graph(c, fuse, &b, &done);
    eng_tensor_t ins[FC_MAX_IN];
    fc_inputs(c, ins);
    eng_tensor_t *out[2] = {NULL, NULL};
    model_fixture_t f;
    model_fixture_plan_run(&f, g, done, ins, (size_t)fc_n_in(c), out);
    *y = out[0];
    eng_tensor_free(out[1]);
    for (int k = 0; k < fc_n_in(c); k++)
        free(ins[k].data);
    model_fixture_close(&f);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
}

/* The fused graph's Y is the unfused graph's: same dtype and shape, the
 * same bits for float32, within half a float16 ulp of rounding for
 * float16 (the fused chain rounds once). */
static void fc_expect_same(const fc_case_t *c)
{
    eng_tensor_t *got, *want;
    fc_run(c, true, &got);
    fc_run(c, false, &want);
    cr_assert_eq(got->dtype, want->dtype, "%s", c->desc);
    cr_assert(eng_shape_equal(&got->shape, &want->shape), "%s: shapes differ", c->desc);
    int64_t n = eng_shape_numel(&got->shape);
    for (int64_t i = 0; i < n; i++) {
        if (got->dtype == ENG_DT_FLOAT) {
            float a = ((float *)got->data)[i], w = ((float *)want->data)[i];
            cr_expect(memcmp(&a, &w, sizeof a) == 0, "%s: Y[%lld] %.9g, unfused %.9g", c->desc,
                      (long long)i, (double)a, (double)w);
        } else {
            float a = eng_half_to_float(((uint16_t *)got->data)[i]);
            float w = eng_half_to_float(((uint16_t *)want->data)[i]);
            cr_expect(fabsf(a - w) <= 2e-3f * fabsf(w) + 1e-4f, "%s: Y[%lld] %.6g, unfused %.6g",
                      c->desc, (long long)i, (double)a, (double)w);
        }
    }
    eng_tensor_free(got);
    eng_tensor_free(want);
}

/* ---- the graphs ----------------------------------------------------------------------- */

static void gelu_erf_nodes(mb_t *b)
{
    fc_const(b, "s2", 1.4142135f, 0, F);
    fc_const(b, "one", 1.0f, 0, F);
    fc_const(b, "half", 0.5f, 0, F);
    mb_node(b, "Div", "div", "X,s2", "a");
    mb_node(b, "Erf", "erf", "a", "e");
    mb_node(b, "Add", "add", "e,one", "p");
    mb_node(b, "Mul", "mx", "X,p", "q");
    mb_node(b, "Mul", "mh", "q,half", "Y");
}

static void gelu_new_nodes(mb_t *b)
{
    fc_const(b, "three", 3.0f, 0, F);
    fc_const(b, "k", 0.044715f, 0, F);
    fc_const(b, "s", 0.7978846f, 0, F);
    fc_const(b, "one", 1.0f, 0, F);
    fc_const(b, "half", 0.5f, 0, F);
    mb_node(b, "Pow", "pow", "X,three", "p");
    mb_node(b, "Mul", "m1", "p,k", "q");
    mb_node(b, "Add", "a1", "X,q", "r");
    mb_node(b, "Mul", "m2", "r,s", "t");
    mb_node(b, "Tanh", "tanh", "t", "u");
    mb_node(b, "Add", "a2", "u,one", "v");
    mb_node(b, "Mul", "m3", "X,half", "w");
    mb_node(b, "Mul", "m4", "w,v", "Y");
}

static void broadcast_nodes(mb_t *b)
{
    mb_node(b, "Add", "bias", "X,B", "a");
    mb_node(b, "Mul", "scale", "a,S", "s");
    mb_node(b, "Sigmoid", "sig", "s", "c");
    mb_node(b, "Add", "mask", "c,M", "Y");
}

static void attention_nodes(mb_t *b)
{
    fc_const(b, "d", 8.0f, 0, F);
    mb_node(b, "Div", "scale", "S,d", "a");
    mb_node(b, "Add", "mask", "a,M", "m");
    mb_node(b, "Softmax", "sm", "m", "Y");
}

static void outside_reader_nodes(mb_t *b)
{
    fc_const(b, "two", 2.0f, 0, F);
    mb_node(b, "Exp", "exp", "X", "A");
    mb_node(b, "Sigmoid", "sig", "A", "B");
    mb_node(b, "Mul", "mul", "B,two", "Y");
    mb_node(b, "Relu", "relu", "A", "R");
}

static void mid_output_nodes(mb_t *b)
{
    mb_node(b, "Exp", "exp", "X", "A");
    mb_node(b, "Neg", "neg", "A", "B");
    mb_node(b, "Abs", "abs", "B", "Y");
}

static void double_nodes(mb_t *b)
{
    Onnx__NodeProto *n = mb_node(b, "Cast", "to64", "X", "a");
    mb_attr_i(b, n, "to", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE);
    mb_node(b, "Exp", "exp", "a", "e");
    n = mb_node(b, "Cast", "to32", "e", "c");
    mb_attr_i(b, n, "to", F);
    mb_node(b, "Relu", "relu", "c", "Y");
}

static void float_cast_nodes(mb_t *b)
{
    Onnx__NodeProto *n = mb_node(b, "Cast", "to16", "X", "a");
    mb_attr_i(b, n, "to", H);
    mb_node(b, "Relu", "relu", "a", "r");
    fc_const(b, "h", 1.5f, 0, H);
    mb_node(b, "Mul", "mul", "r,h", "m");
    n = mb_node(b, "Cast", "to32", "m", "Y");
    mb_attr_i(b, n, "to", F);
}

static void split_by_softmax_nodes(mb_t *b)
{
    mb_node(b, "Exp", "exp", "X", "a");
    mb_node(b, "Softmax", "sm", "a", "s");
    mb_node(b, "Log", "log", "s", "l");
    mb_node(b, "Neg", "neg", "l", "Y");
}

static void fan_out_nodes(mb_t *b)
{
    mb_node(b, "Exp", "exp", "X", "A");
    mb_node(b, "Sigmoid", "sig", "A", "B");
    mb_node(b, "Mul", "mul", "B,A", "Y");
}

static void select_nodes(mb_t *b)
{
    fc_const(b, "two", 2.0f, 0, F);
    fc_const(b, "big", -1e9f, 0, F);
    fc_const(b, "lo", -1.5f, 0, F);
    fc_const(b, "hi", 4.0f, 1, F);
    fc_const(b, "three", 3.0f, 0, F);
    mb_node(b, "Mul", "mul", "X,two", "a");
    mb_node(b, "Where", "where", "C,a,big", "w");
    mb_node(b, "Clip", "clip", "w,lo,hi", "c");
    mb_node(b, "Max", "max", "c,X", "d");
    mb_node(b, "Min", "min", "d,three", "Y");
}

static void many_inputs_nodes(mb_t *b)
{
    char ins[48], out[16], prev[16] = "X0";
    for (unsigned k = 1; k < 10; k++) {
        snprintf(ins, sizeof ins, "%s,X%u", prev, k % 10);
        snprintf(out, sizeof out, k == 9 ? "Y" : "a%u", k % 10);
        mb_node(b, "Add", NULL, ins, out);
        snprintf(prev, sizeof prev, "%s", out);
    }
}

static void rank_pad_nodes(mb_t *b)
{
    fc_const(b, "c", 0.25f, 2, F);
    mb_node(b, "Add", "add", "X,c", "a");
    mb_node(b, "Relu", "relu", "a", "Y");
}

static void swish_half_nodes(mb_t *b)
{
    mb_node(b, "Sigmoid", "sig", "X", "s");
    mb_node(b, "Mul", "mul", "s,X", "Y");
}

#define X3 {"X", F, 3, {2, 3, 8}}

static const fc_case_t gelu_erf = {"GELU erf chain", {X3}, gelu_erf_nodes, F, NULL};
static const fc_case_t gelu_new = {"gelu_new chain", {X3}, gelu_new_nodes, F, NULL};
static const fc_case_t broadcast = {
    "bias [C], scalar, [N,1,1,S] mask",
    {{"X", F, 4, {2, 3, 4, 8}}, {"B", F, 1, {8}}, {"S", F, 0, {0}}, {"M", F, 4, {2, 1, 1, 8}}},
    broadcast_nodes, F, NULL};
static const fc_case_t attention = {
    "attention scale and mask",
    {{"S", F, 4, {2, 2, 5, 5}}, {"M", F, 4, {2, 1, 1, 5}}}, attention_nodes, F, NULL};
static const fc_case_t outside_reader = {"an outside reader", {X3}, outside_reader_nodes, F,
                                         "R"};
static const fc_case_t mid_output = {"a graph output inside", {X3}, mid_output_nodes, F, "A"};
static const fc_case_t doubles = {"a double chain", {X3}, double_nodes, F, NULL};
static const fc_case_t float_casts = {"float16 casts", {X3}, float_cast_nodes, F, NULL};
static const fc_case_t split_by_softmax = {"a Softmax between", {X3}, split_by_softmax_nodes, F,
                                           NULL};
static const fc_case_t fan_out = {"a fan-out inside", {X3}, fan_out_nodes, F, NULL};
static const fc_case_t selects = {
    "Where, Clip, Max, Min",
    {X3, {"C", BOOL, 3, {2, 1, 8}}}, select_nodes, F, NULL};
static const fc_case_t many_inputs = {
    "ten inputs",
    {{"X0", F, 2, {3, 5}}, {"X1", F, 2, {3, 5}}, {"X2", F, 2, {3, 5}}, {"X3", F, 2, {3, 5}},
     {"X4", F, 2, {3, 5}}, {"X5", F, 2, {3, 5}}, {"X6", F, 2, {3, 5}}, {"X7", F, 2, {3, 5}},
     {"X8", F, 2, {3, 5}}, {"X9", F, 1, {5}}},
    many_inputs_nodes, F, NULL};
static const fc_case_t rank_pad = {"a [1, 1] constant", {{"X", F, 1, {8}}}, rank_pad_nodes, F,
                                   NULL};
static const fc_case_t swish_half = {"float16 swish", {{"X", H, 3, {2, 3, 8}}}, swish_half_nodes,
                                     H, NULL};

/* ---- which groups form ----------------------------------------------------------------- */

Test(fuse_chain, gelu_chains_become_one_node_with_the_same_bits)
{
    fc_result_t r = fc_fuse(&gelu_erf);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 5);
    cr_expect_eq(r.max_inputs, 1, "the constants are immediates");
    fc_expect_same(&gelu_erf);
    r = fc_fuse(&gelu_new);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 8);
    cr_expect_eq(r.max_inputs, 1);
    fc_expect_same(&gelu_new);
}

Test(fuse_chain, broadcasting_inputs_are_read_through_strides)
{
    fc_result_t r = fc_fuse(&broadcast);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 4);
    cr_expect_eq(r.max_inputs, 4);
    fc_expect_same(&broadcast);
    r = fc_fuse(&attention);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 2);
    fc_expect_same(&attention);
}

Test(fuse_chain, a_value_read_outside_ends_the_group)
{
    fc_result_t r = fc_fuse(&outside_reader);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 2, "Sigmoid and Mul, without the Exp the Relu reads too");
    for (int i = 0; i < r.n_nodes; i++)
        if (r.live[i] && strcmp(r.types[i], "FusedElementwise") != 0)
            cr_expect(strcmp(r.types[i], "Exp") == 0 || strcmp(r.types[i], "Relu") == 0,
                      "node %d is a live %s", i, r.types[i]);
    fc_expect_same(&outside_reader);
    r = fc_fuse(&mid_output);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 2, "Neg and Abs; Exp's output is a graph output");
    fc_expect_same(&mid_output);
}

Test(fuse_chain, a_fan_out_inside_the_group_fuses)
{
    fc_result_t r = fc_fuse(&fan_out);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 3);
    fc_expect_same(&fan_out);
}

Test(fuse_chain, another_op_between_splits_and_doubles_are_left_alone)
{
    fc_result_t r = fc_fuse(&split_by_softmax);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 2, "Log and Neg after the Softmax; the Exp before it alone");
    fc_expect_same(&split_by_softmax);
    r = fc_fuse(&doubles);
    cr_expect_eq(r.groups, 0, "double values are no chain's");
    fc_expect_same(&doubles);
}

Test(fuse_chain, casts_between_float_dtypes_fuse_and_round_where_they_did)
{
    fc_result_t r = fc_fuse(&float_casts);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 4);
    cr_expect_eq(r.max_inputs, 1, "the float16 constant is an immediate");
    fc_expect_same(&float_casts);
}

Test(fuse_chain, where_clip_max_min_fuse)
{
    fc_result_t r = fc_fuse(&selects);
    cr_expect_eq(r.groups, 1);
    cr_expect_eq(r.ops, 5);
    cr_expect_eq(r.max_inputs, 2, "X and the condition");
    fc_expect_same(&selects);
}

Test(fuse_chain, a_chain_of_more_inputs_than_a_program_holds_splits)
{
    fc_result_t r = fc_fuse(&many_inputs);
    cr_expect_geq(r.groups, 2);
    cr_expect_leq(r.max_inputs, ENG_EW_MAX_INPUTS);
    cr_expect_geq(r.ops, 8);
    fc_expect_same(&many_inputs);
}

Test(fuse_chain, a_folded_constant_keeps_the_output_rank)
{
    fc_result_t r = fc_fuse(&rank_pad);
    cr_expect_eq(r.groups, 1);
    eng_tensor_t *y;
    fc_run(&rank_pad, true, &y);
    cr_expect_eq(y->shape.rank, 2);
    cr_expect_eq(y->shape.dims[0], 1);
    cr_expect_eq(y->shape.dims[1], 8);
    eng_tensor_free(y);
    fc_expect_same(&rank_pad);
}

Test(fuse_chain, float16_chains_round_once)
{
    fc_result_t r = fc_fuse(&swish_half);
    cr_expect_eq(r.groups, 1);
    fc_expect_same(&swish_half);
}

/* ---- through the loader ---------------------------------------------------------------- */

/* Loads the case with the engine's whole pipeline, fused or not, and runs it. */
static void fc_model_run(const fc_case_t *c, bool fuse, eng_tensor_t **y)
{
    mb_t b;
    size_t len;
    uint8_t *bytes = fc_build(&b, c, &len);
    model_fixture_t f;
    model_fixture_cache(&f);
    eng_model_config_t cfg = {.cache = f.cache, .no_elementwise_fusion = !fuse};
    cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &f.model), 0, "%s: %s", c->desc,
                 fs_errmsg());
    eng_tensor_t ins[FC_MAX_IN];
    fc_inputs(c, ins);
    eng_tensor_t *out[2] = {NULL, NULL};
    cr_assert_eq(eng_model_run(f.model, ins, (size_t)fc_n_in(c), out), 0, "%s: %s", c->desc,
                 fs_errmsg());
    *y = out[0];
    eng_tensor_free(out[1]);
    for (int k = 0; k < fc_n_in(c); k++)
        free(ins[k].data);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(fuse_chain, a_loaded_model_fuses_by_default_and_keeps_its_bits)
{
    const fc_case_t *cases[] = {&broadcast, &selects, &gelu_new, &many_inputs};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_tensor_t *got, *want;
        fc_model_run(cases[i], true, &got);
        fc_model_run(cases[i], false, &want);
        cr_assert(eng_shape_equal(&got->shape, &want->shape), "%s", cases[i]->desc);
        cr_expect(memcmp(got->data, want->data, eng_tensor_bytes(got)) == 0, "%s: bits differ",
                  cases[i]->desc);
        eng_tensor_free(got);
        eng_tensor_free(want);
    }
}

Test(fuse_chain, a_model_cannot_name_the_internal_op)
{
    mb_t b;
    mb_init(&b, 8, 17);
    const int64_t d[1] = {4};
    mb_input(&b, "X", F, 1, d, NULL);
    mb_node(&b, "FusedElementwise", "f", "X", "Y");
    mb_output(&b, "Y", F, 1, d);
    eng_graph_t *g = NULL;
    int rc = mb_load(&b, NULL, NULL, &g);
    cr_expect_eq(rc, FS_ENOTSUP, "rc %d: %s", rc, fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "FusedElementwise"), "%s", fs_errmsg());
    eng_graph_destroy(g);
    mb_free(&b);
}
