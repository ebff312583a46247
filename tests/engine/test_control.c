/* test_control.c -- tests of control flow: loading subgraphs
 * (engine/onnx_load.c: outer-scope reads, implicit inputs, nesting) and
 * running If, Loop and Scan (engine/exec_control.c, engine/ops/control.c)
 * on models built in memory. Every test that runs a model ends with the
 * cache back at zero bytes (model_fixture_close). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "alloc/cache.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define B ONNX__TENSOR_PROTO__DATA_TYPE__BOOL

/* ---- helpers ------------------------------------------------------------------ */

static int open_model_rc(model_fixture_t *f, mb_t *b)
{
    model_fixture_cache(f);
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    eng_model_config_t cfg = {.name = "t", .cache = f->cache};
    fs_err_clear();
    return eng_model_load_bytes(buf, len, NULL, &cfg, &f->model);
}

static void open_model(model_fixture_t *f, mb_t *b)
{
    cr_assert_eq(open_model_rc(f, b), 0, "%s", fs_errmsg());
}

/* A host tensor of dtype dt and shape `shape` holding `vals` (numel
 * elements of dt's size). */
static eng_tensor_t tensor_of(eng_dtype_t dt, eng_shape_t shape, const void *vals)
{
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(dt, &shape, &t), 0);
    memcpy(t->data, vals, eng_tensor_bytes(t));
    eng_tensor_t v = *t;
    free(t); /* the struct; the data goes with tensors_free */
    return v;
}

static void tensors_free(eng_tensor_t *ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ts[i].data);
}

/* Runs the model; 0 and outputs, or the error (fs_errmsg says it). */
static int run(model_fixture_t *f, const eng_tensor_t *ins, size_t n_in, eng_tensor_t **outs)
{
    fs_err_clear();
    return eng_model_run(f->model, ins, n_in, outs);
}

static void expect_shape(const eng_tensor_t *t, eng_shape_t want)
{
    char got[96], exp[96];
    cr_expect(eng_shape_equal(&t->shape, &want), "shape %s, want %s",
              eng_shape_format(&t->shape, got, sizeof got),
              eng_shape_format(&want, exp, sizeof exp));
}

static void expect_floats(const eng_tensor_t *t, eng_shape_t shape, const float *want)
{
    cr_assert_eq(t->dtype, ENG_DT_FLOAT);
    expect_shape(t, shape);
    const float *got = t->data;
    for (int64_t i = 0; i < eng_shape_numel(&shape); i++)
        cr_expect(fabsf(got[i] - want[i]) <= 1e-6f, "element %lld: %g, want %g", (long long)i,
                  got[i], want[i]);
}

/* Between runs the cache holds the model's weights only: no activation
 * of a subgraph, an iteration or a scan output stayed behind. */
static void expect_no_activations(model_fixture_t *f)
{
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f->cache, eng_model_activation_owner(f->model), &os), 0);
    cr_expect_eq(os.allocated.current, 0, "activations held between runs: %lld bytes",
                 (long long)os.allocated.current);
}

static void expect_msg(const char *needle)
{
    cr_expect(strstr(fs_errmsg(), needle), "message lacks \"%s\": %s", needle, fs_errmsg());
}

static Onnx__TensorProto *float_tensor(mb_t *b, const char *name, int rank, const int64_t *dims,
                                       const float *v, size_t n)
{
    Onnx__TensorProto *t = mb_tensor(b, name, F, rank, dims);
    mb_floats(b, t, v, n);
    return t;
}

/* A Constant node in the current graph writing a float tensor. */
static void float_constant(mb_t *b, const char *out, int rank, const int64_t *dims,
                           const float *v, size_t n)
{
    mb_attr_t(b, mb_node(b, "Constant", NULL, "", out), "value",
              float_tensor(b, NULL, rank, dims, v, n));
}

static const bool yes = true;

/* ---- If ---------------------------------------------------------------------------- */

/* y = If(c) then x + k (k a branch initializer) else x * x: both branches
 * read x from the model graph. */
static void build_if(mb_t *b)
{
    mb_init(b, 8, 13);
    mb_input(b, "c", B, 0, NULL, NULL);
    mb_input(b, "x", F, 1, (int64_t[]){3}, NULL);
    Onnx__NodeProto *n = mb_node(b, "If", "if", "c", "y");
    mb_begin_g(b, n, "then_branch");
    mb_initializer(b, float_tensor(b, "k", 0, NULL, (float[]){10}, 1));
    mb_node(b, "Add", "add", "x,k", "t");
    mb_output(b, "t", F, 1, (int64_t[]){3});
    mb_end_g(b);
    mb_begin_g(b, n, "else_branch");
    mb_node(b, "Mul", "mul", "x,x", "e");
    mb_output(b, "e", F, 1, (int64_t[]){3});
    mb_end_g(b);
    mb_output(b, "y", F, 1, (int64_t[]){3});
}

Test(engine_control, if_loads_its_branches_with_outer_reads_as_implicit_inputs)
{
    mb_t b;
    build_if(&b);
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    const eng_node_t *n = &g->nodes[0];
    cr_expect_str_eq(n->op_type, "If");
    cr_expect_eq(n->n_implicit, 1, "both branches read x: one implicit input");
    cr_expect_eq(n->inputs[n->n_inputs - 1], graph_value(g, "x"));
    const eng_graph_t *then = eng_attr_graph(n, "then_branch");
    cr_assert(then);
    cr_expect_eq(then->n_outer, 1);
    cr_expect_eq(then->values[then->outer[0]].kind, ENG_VALUE_OUTER);
    cr_expect_eq(then->values[graph_value(then, "k")].kind, ENG_VALUE_CONST);
    cr_expect_gt(g->n_tree_values, g->n_values, "the tree numbers the branches' values too");
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_control, if_runs_the_branch_its_condition_picks)
{
    mb_t b;
    build_if(&b);
    model_fixture_t f;
    open_model(&f, &b);
    const float x[3] = {1, -2, 3};
    eng_tensor_t ins[2] = {tensor_of(ENG_DT_BOOL, (eng_shape_t){0}, &yes),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {3}}, x)};
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(run(&f, ins, 2, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){1, {3}}, (float[]){11, 8, 13});
    eng_tensor_free(out[0]);
    *(bool *)ins[0].data = false;
    cr_assert_eq(run(&f, ins, 2, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){1, {3}}, (float[]){1, 4, 9});
    eng_tensor_free(out[0]);
    eng_plan_info_t info;
    cr_assert_eq(eng_model_plan_info(f.model, (eng_shape_t[]){{0}, {1, {3}}}, 2, &info), 0);
    cr_expect(info.dynamic, "control flow runs on the dynamic path");
    expect_no_activations(&f);
    tensors_free(ins, 2);
    model_fixture_close(&f);
    mb_free(&b);
}

/* If(c1) then If(c2) then x + k else -x, else x: the inner branches read
 * x two levels up and k one level up; the outer else branch gives x
 * itself (an outer value: the node copies it). */
Test(engine_control, nested_if_reads_values_of_every_enclosing_graph)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "c1", B, 0, NULL, NULL);
    mb_input(&b, "c2", B, 0, NULL, NULL);
    mb_input(&b, "x", F, 1, (int64_t[]){2}, NULL);
    Onnx__NodeProto *outer = mb_node(&b, "If", "outer", "c1", "y");
    mb_begin_g(&b, outer, "then_branch");
    float_constant(&b, "k", 1, (int64_t[]){2}, (float[]){100, 200}, 2);
    Onnx__NodeProto *inner = mb_node(&b, "If", "inner", "c2", "z");
    mb_begin_g(&b, inner, "then_branch");
    mb_node(&b, "Add", "add", "x,k", "a");
    mb_output(&b, "a", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_begin_g(&b, inner, "else_branch");
    mb_node(&b, "Neg", "neg", "x", "n");
    mb_output(&b, "n", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_output(&b, "z", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_begin_g(&b, outer, "else_branch");
    mb_output(&b, "x", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_output(&b, "y", F, 1, (int64_t[]){2});

    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    const eng_graph_t *then = eng_attr_graph(&g->nodes[0], "then_branch");
    int x_in_then = graph_value(then, "x");
    cr_assert_geq(x_in_then, 0, "x passes through the then branch as an OUTER value");
    cr_expect_eq(then->values[x_in_then].kind, ENG_VALUE_OUTER);
    eng_graph_destroy(g);

    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[3] = {tensor_of(ENG_DT_BOOL, (eng_shape_t){0}, &yes),
                           tensor_of(ENG_DT_BOOL, (eng_shape_t){0}, &yes),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){1, 2})};
    const struct {
        bool c1, c2;
        float want[2];
    } cases[] = {{true, true, {101, 202}}, {true, false, {-1, -2}}, {false, true, {1, 2}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        *(bool *)ins[0].data = cases[i].c1;
        *(bool *)ins[1].data = cases[i].c2;
        eng_tensor_t *out[1] = {NULL};
        cr_assert_eq(run(&f, ins, 3, out), 0, "%s", fs_errmsg());
        expect_floats(out[0], (eng_shape_t){1, {2}}, cases[i].want);
        eng_tensor_free(out[0]);
    }
    expect_no_activations(&f);
    tensors_free(ins, 3);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(engine_control, if_branches_must_give_one_output_per_node_output)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "c", B, 0, NULL, NULL);
    mb_input(&b, "x", F, 1, (int64_t[]){2}, NULL);
    Onnx__NodeProto *n = mb_node(&b, "If", "if", "c", "y");
    mb_begin_g(&b, n, "then_branch");
    mb_output(&b, "x", F, 1, (int64_t[]){2});
    mb_output(&b, "x", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_begin_g(&b, n, "else_branch");
    mb_output(&b, "x", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_output(&b, "y", F, 1, (int64_t[]){2});
    eng_graph_t *g = NULL;
    cr_expect_eq(mb_load(&b, NULL, NULL, &g), FS_ENOTSUP);
    expect_msg("node 'if' (If, opset 13): then_branch has 0 inputs and 2 outputs; a branch "
               "takes no input and gives one output per output of the node (1)");
    cr_expect_null(g);
    mb_free(&b);
}

Test(engine_control, a_condition_that_is_not_one_bool_fails_the_run)
{
    mb_t b;
    build_if(&b);
    b.inputs[0] = mb_vi(&b, "c", B, 1, (int64_t[]){2}, NULL);
    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[2] = {tensor_of(ENG_DT_BOOL, (eng_shape_t){1, {2}}, (bool[]){true, true}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {3}}, (float[]){1, 2, 3})};
    eng_tensor_t *out[1] = {NULL};
    cr_expect_eq(run(&f, ins, 2, out), FS_EINVAL);
    expect_msg("node 'if' (If): the condition (input 0) must be one bool value, not bool [2]");
    expect_no_activations(&f);
    tensors_free(ins, 2);
    model_fixture_close(&f);
    mb_free(&b);
}

/* ---- subgraph loading --------------------------------------------------------------- */

Test(engine_control, a_subgraph_reading_an_undefined_name_is_rejected_naming_the_path)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "c", B, 0, NULL, NULL);
    Onnx__NodeProto *n = mb_node(&b, "If", "if", "c", "y");
    mb_begin_g(&b, n, "then_branch");
    mb_node(&b, "Relu", "r", "nowhere", "t");
    mb_output(&b, "t", F, -1, NULL);
    mb_end_g(&b);
    mb_begin_g(&b, n, "else_branch");
    mb_node(&b, "Relu", "r2", "c", "e");
    mb_output(&b, "e", F, -1, NULL);
    mb_end_g(&b);
    mb_output(&b, "y", F, -1, NULL);
    eng_graph_t *g = NULL;
    cr_expect_eq(mb_load(&b, NULL, NULL, &g), FS_EINVAL);
    expect_msg("node 'if' (If) attribute 'then_branch': node 'r' (Relu) reads 'nowhere', which "
               "no node, graph input or initializer defines");
    cr_expect_null(g);
    mb_free(&b);
}

Test(engine_control, sequence_values_in_a_body_are_refused_naming_the_subgraph)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "M", I64, 0, NULL, NULL);
    mb_input(&b, "x", F, 1, (int64_t[]){2}, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Loop", "loop", "M,,x", "y");
    mb_begin_g(&b, n, "body");
    mb_input(&b, "i", I64, 0, NULL, NULL);
    mb_input(&b, "cond", B, 0, NULL, NULL);
    Onnx__ValueInfoProto *seq = mb_input(&b, "s", F, 1, (int64_t[]){2}, NULL);
    seq->type->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    Onnx__TypeProto__Sequence *st = mb_alloc(&b, sizeof *st);
    onnx__type_proto__sequence__init(st);
    seq->type->sequence_type = st;
    mb_output(&b, "cond", B, 0, NULL);
    mb_output(&b, "s", F, -1, NULL);
    mb_end_g(&b);
    mb_output(&b, "y", F, -1, NULL);
    eng_graph_t *g = NULL;
    cr_expect_eq(mb_load(&b, NULL, NULL, &g), FS_ENOTSUP);
    expect_msg("in node 'loop' (Loop) attribute 'body': graph input 's' is a sequence (only "
               "tensors are supported)");
    mb_free(&b);
}

/* ---- Loop ---------------------------------------------------------------------------- */

/* Loop(M, "", s0) with body s_out = s_in + x (x read from the model
 * graph), giving s_out both as the carried value and as the scan output
 * (one value taken twice: the second is a copy); or, without
 * `declare_scan`, a copy of it of undeclared length as the scan output. */
static void build_loop_m(mb_t *b, bool declare_scan)
{
    mb_init(b, 8, 13);
    mb_input(b, "M", I64, 0, NULL, NULL);
    mb_input(b, "s0", F, 1, (int64_t[]){2}, NULL);
    mb_input(b, "x", F, 1, (int64_t[]){2}, NULL);
    Onnx__NodeProto *n = mb_node(b, "Loop", "loop", "M,,s0", "s_final,scan");
    mb_begin_g(b, n, "body");
    mb_input(b, "i", I64, 0, NULL, NULL);
    mb_input(b, "cond_in", B, 0, NULL, NULL);
    mb_input(b, "s_in", F, 1, (int64_t[]){2}, NULL);
    mb_node(b, "Identity", "keep", "cond_in", "cond_out");
    mb_node(b, "Add", "add", "s_in,x", "s_out");
    mb_output(b, "cond_out", B, 0, NULL);
    mb_output(b, "s_out", F, 1, (int64_t[]){2});
    if (declare_scan) {
        mb_output(b, "s_out", F, 1, (int64_t[]){2});
    } else {
        mb_node(b, "Identity", "copy", "s_out", "scan_out");
        mb_output(b, "scan_out", F, 1, (int64_t[]){-1});
    }
    mb_end_g(b);
    mb_output(b, "s_final", F, 1, (int64_t[]){2});
    mb_output(b, "scan", F, 2, (int64_t[]){-1, 2});
}

Test(engine_control, loop_with_a_trip_count_carries_values_and_stacks_scan_outputs)
{
    mb_t b;
    build_loop_m(&b, true);
    model_fixture_t f;
    open_model(&f, &b);
    int64_t m = 3;
    eng_tensor_t ins[3] = {tensor_of(ENG_DT_INT64, (eng_shape_t){0}, &m),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){0, 0}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){1, 2})};
    eng_tensor_t *out[2] = {NULL};
    cr_assert_eq(run(&f, ins, 3, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){1, {2}}, (float[]){3, 6});
    expect_floats(out[1], (eng_shape_t){2, {3, 2}}, (float[]){1, 2, 2, 4, 3, 6});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    expect_no_activations(&f);
    tensors_free(ins, 3);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(engine_control, loop_of_zero_iterations_gives_the_initial_values_and_empty_scans)
{
    mb_t b;
    build_loop_m(&b, true);
    model_fixture_t f;
    open_model(&f, &b);
    int64_t m = 0;
    eng_tensor_t ins[3] = {tensor_of(ENG_DT_INT64, (eng_shape_t){0}, &m),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){5, 7}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){1, 2})};
    eng_tensor_t *out[2] = {NULL};
    cr_assert_eq(run(&f, ins, 3, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){1, {2}}, (float[]){5, 7});
    cr_expect_eq(out[1]->dtype, ENG_DT_FLOAT);
    expect_shape(out[1], (eng_shape_t){2, {0, 2}});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    /* A negative trip count runs no iteration either. */
    *(int64_t *)ins[0].data = -5;
    cr_assert_eq(run(&f, ins, 3, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){1, {2}}, (float[]){5, 7});
    expect_shape(out[1], (eng_shape_t){2, {0, 2}});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    expect_no_activations(&f);
    tensors_free(ins, 3);
    model_fixture_close(&f);
    mb_free(&b);

    /* Without a declared type for the scan output there is no shape to
     * give it: the run says so. */
    build_loop_m(&b, false);
    open_model(&f, &b);
    ins[0] = tensor_of(ENG_DT_INT64, (eng_shape_t){0}, &m);
    ins[1] = tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){5, 7});
    ins[2] = tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){1, 2});
    cr_expect_eq(run(&f, ins, 3, out), FS_ENOTSUP);
    expect_msg("node 'loop' (Loop) ran no iteration, and its body declares no complete type "
               "(dtype and every dim) for output 'scan_out'");
    expect_no_activations(&f);
    tensors_free(ins, 3);
    model_fixture_close(&f);
    mb_free(&b);
}

/* A while loop: Loop("", c0, acc0), body acc += x, cond = acc < limit,
 * scan output the iteration number. */
Test(engine_control, loop_with_only_a_condition_runs_while_the_body_says_so)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "c0", B, 0, NULL, NULL);
    mb_input(&b, "acc0", F, 0, NULL, NULL);
    mb_input(&b, "x", F, 0, NULL, NULL);
    mb_input(&b, "limit", F, 0, NULL, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Loop", "while", ",c0,acc0", "acc,iters");
    mb_begin_g(&b, n, "body");
    mb_input(&b, "i", I64, 0, NULL, NULL);
    mb_input(&b, "c_in", B, 0, NULL, NULL);
    mb_input(&b, "acc_in", F, 0, NULL, NULL);
    mb_node(&b, "Add", "add", "acc_in,x", "acc_out");
    mb_node(&b, "Less", "less", "acc_out,limit", "c_out");
    mb_node(&b, "Identity", "it", "i", "i_out");
    mb_output(&b, "c_out", B, 0, NULL);
    mb_output(&b, "acc_out", F, 0, NULL);
    mb_output(&b, "i_out", I64, 0, NULL);
    mb_end_g(&b);
    mb_output(&b, "acc", F, 0, NULL);
    mb_output(&b, "iters", I64, 1, (int64_t[]){-1});
    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[4] = {tensor_of(ENG_DT_BOOL, (eng_shape_t){0}, &yes),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){0}, (float[]){0}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){0}, (float[]){1.5f}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){0}, (float[]){5})};
    eng_tensor_t *out[2] = {NULL};
    cr_assert_eq(run(&f, ins, 4, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){0}, (float[]){6});
    cr_assert_eq(out[1]->dtype, ENG_DT_INT64);
    expect_shape(out[1], (eng_shape_t){1, {4}});
    const int64_t want[4] = {0, 1, 2, 3};
    cr_expect_eq(memcmp(out[1]->data, want, sizeof want), 0);
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    /* A false initial condition: no iteration. */
    *(bool *)ins[0].data = false;
    cr_assert_eq(run(&f, ins, 4, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){0}, (float[]){0});
    expect_shape(out[1], (eng_shape_t){1, {0}});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    expect_no_activations(&f);
    tensors_free(ins, 4);
    model_fixture_close(&f);
    mb_free(&b);
}

/* A scan output whose shape follows the iteration number: [i]. */
Test(engine_control, loop_scan_outputs_whose_shape_changes_fail_naming_the_output)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "M", I64, 0, NULL, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Loop", "loop", "M,", "zs");
    mb_begin_g(&b, n, "body");
    mb_input(&b, "i", I64, 0, NULL, NULL);
    mb_input(&b, "c", B, 0, NULL, NULL);
    Onnx__TensorProto *axes = mb_tensor(&b, "axes", I64, 1, (int64_t[]){1});
    mb_int64s(&b, axes, (int64_t[]){0}, 1);
    mb_initializer(&b, axes);
    mb_node(&b, "Unsqueeze", "u", "i,axes", "shape");
    mb_node(&b, "ConstantOfShape", "z", "shape", "zeros");
    mb_output(&b, "c", B, 0, NULL);
    mb_output(&b, "zeros", F, 1, (int64_t[]){-1});
    mb_end_g(&b);
    mb_output(&b, "zs", F, 2, (int64_t[]){-1, -1});
    model_fixture_t f;
    open_model(&f, &b);
    int64_t m = 3;
    eng_tensor_t ins[1] = {tensor_of(ENG_DT_INT64, (eng_shape_t){0}, &m)};
    eng_tensor_t *out[1] = {NULL};
    cr_expect_eq(run(&f, ins, 1, out), FS_EINVAL);
    expect_msg("node 'loop' (Loop): scan output 0 (body output 'zeros') is float [1] at iteration "
               "1 but float [0] at iteration 0");
    /* One iteration is fine. */
    *(int64_t *)ins[0].data = 1;
    cr_assert_eq(run(&f, ins, 1, out), 0, "%s", fs_errmsg());
    expect_shape(out[0], (eng_shape_t){2, {1, 0}});
    eng_tensor_free(out[0]);
    expect_no_activations(&f);
    tensors_free(ins, 1);
    model_fixture_close(&f);
    mb_free(&b);
}

/* Loop("", "", v) never ends by itself: it stops at the iteration limit. */
Test(engine_control, a_loop_without_trip_count_or_condition_stops_at_the_limit, .timeout = 120)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "v", F, 0, NULL, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Loop", "forever", ",,v", "w");
    mb_begin_g(&b, n, "body");
    mb_input(&b, "i", I64, 0, NULL, NULL);
    mb_input(&b, "c", B, 0, NULL, NULL);
    mb_input(&b, "v_in", F, 0, NULL, NULL);
    mb_output(&b, "c", B, 0, NULL);
    mb_output(&b, "v_in", F, 0, NULL);
    mb_end_g(&b);
    mb_output(&b, "w", F, 0, NULL);
    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[1] = {tensor_of(ENG_DT_FLOAT, (eng_shape_t){0}, (float[]){1})};
    eng_tensor_t *out[1] = {NULL};
    cr_expect_eq(run(&f, ins, 1, out), FS_ERANGE);
    expect_msg("node 'forever' (Loop) is still running after 1048576 iterations, the most a "
               "Loop may run (the model's max_loop_iterations): its trip count is absent and "
               "its condition is absent");
    expect_no_activations(&f);
    model_fixture_close(&f);

    /* A model's own bound, below a trip count that asks for more. */
    b.inputs[b.graph.n_input++] = mb_vi(&b, "M", I64, 0, NULL, NULL);
    b.nodes[0]->input[0] = mb_str(&b, "M");
    model_fixture_cache(&f);
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    eng_model_config_t cfg = {.name = "t", .cache = f.cache, .max_loop_iterations = 10};
    cr_assert_eq(eng_model_load_bytes(buf, len, NULL, &cfg, &f.model), 0, "%s", fs_errmsg());
    int64_t m = 11;
    eng_tensor_t ins2[2] = {ins[0], tensor_of(ENG_DT_INT64, (eng_shape_t){0}, &m)};
    cr_expect_eq(run(&f, ins2, 2, out), FS_ERANGE);
    expect_msg("is still running after 10 iterations");
    *(int64_t *)ins2[1].data = 10;
    cr_assert_eq(run(&f, ins2, 2, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){0}, (float[]){1});
    eng_tensor_free(out[0]);
    expect_no_activations(&f);
    tensors_free(ins2, 2);
    model_fixture_close(&f);
    mb_free(&b);
}

/* ---- Scan ----------------------------------------------------------------------------- */

/* Scan over x [2,3] along axis 1 in reverse, two states (a running sum
 * and a running product), two scan outputs: the sum so far, stacked
 * along axis 1, and 2 * slice, stacked in reverse along axis 0. */
Test(engine_control, scan_carries_two_states_over_reverse_slices_along_axis_1)
{
    mb_t b;
    mb_init(&b, 8, 16);
    mb_input(&b, "sum0", F, 1, (int64_t[]){2}, NULL);
    mb_input(&b, "prod0", F, 1, (int64_t[]){2}, NULL);
    mb_input(&b, "x", F, 2, (int64_t[]){2, 3}, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Scan", "scan", "sum0,prod0,x", "sum,prod,sums,twice");
    mb_attr_i(&b, n, "num_scan_inputs", 1);
    mb_attr_ints(&b, n, "scan_input_axes", (int64_t[]){1}, 1);
    mb_attr_ints(&b, n, "scan_input_directions", (int64_t[]){1}, 1);
    mb_attr_ints(&b, n, "scan_output_axes", (int64_t[]){1, 0}, 2);
    mb_attr_ints(&b, n, "scan_output_directions", (int64_t[]){0, 1}, 2);
    mb_begin_g(&b, n, "body");
    mb_input(&b, "s_in", F, 1, (int64_t[]){2}, NULL);
    mb_input(&b, "p_in", F, 1, (int64_t[]){2}, NULL);
    mb_input(&b, "xt", F, 1, (int64_t[]){2}, NULL);
    mb_node(&b, "Add", "add", "s_in,xt", "s_out");
    mb_node(&b, "Mul", "mul", "p_in,xt", "p_out");
    mb_node(&b, "Add", "dbl", "xt,xt", "y");
    mb_output(&b, "s_out", F, 1, (int64_t[]){2});
    mb_output(&b, "p_out", F, 1, (int64_t[]){2});
    mb_output(&b, "s_out", F, 1, (int64_t[]){2});
    mb_output(&b, "y", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_output(&b, "sum", F, 1, (int64_t[]){2});
    mb_output(&b, "prod", F, 1, (int64_t[]){2});
    mb_output(&b, "sums", F, 2, (int64_t[]){2, 3});
    mb_output(&b, "twice", F, 2, (int64_t[]){3, 2});
    model_fixture_t f;
    open_model(&f, &b);
    const float x[6] = {1, 2, 3, 4, 5, 6}; /* rows {1,2,3} and {4,5,6} */
    eng_tensor_t ins[3] = {tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){0, 0}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {2}}, (float[]){1, 1}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){2, {2, 3}}, x)};
    eng_tensor_t *out[4] = {NULL};
    cr_assert_eq(run(&f, ins, 3, out), 0, "%s", fs_errmsg());
    /* Slices in reverse: t=0 reads column 2 {3,6}, t=1 {2,5}, t=2 {1,4}. */
    expect_floats(out[0], (eng_shape_t){1, {2}}, (float[]){6, 15});
    expect_floats(out[1], (eng_shape_t){1, {2}}, (float[]){6, 120});
    /* Sums after each iteration {3,6}, {5,11}, {6,15}, stacked along axis 1. */
    expect_floats(out[2], (eng_shape_t){2, {2, 3}}, (float[]){3, 5, 6, 6, 11, 15});
    /* 2 * slice, iteration t at row 2 - t: row 0 is t=2's {2,8}. */
    expect_floats(out[3], (eng_shape_t){2, {3, 2}}, (float[]){2, 8, 4, 10, 6, 12});
    for (int i = 0; i < 4; i++)
        eng_tensor_free(out[i]);
    expect_no_activations(&f);
    tensors_free(ins, 3);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(engine_control, scan_inputs_of_different_lengths_fail_the_run)
{
    mb_t b;
    mb_init(&b, 8, 11);
    mb_input(&b, "a", F, 1, (int64_t[]){3}, NULL);
    mb_input(&b, "c", F, 1, (int64_t[]){4}, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Scan", "scan", "a,c", "ys");
    mb_attr_i(&b, n, "num_scan_inputs", 2);
    mb_begin_g(&b, n, "body");
    mb_input(&b, "at", F, 0, NULL, NULL);
    mb_input(&b, "ct", F, 0, NULL, NULL);
    mb_node(&b, "Add", "add", "at,ct", "y");
    mb_output(&b, "y", F, 0, NULL);
    mb_end_g(&b);
    mb_output(&b, "ys", F, 1, (int64_t[]){-1});
    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[2] = {tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {3}}, (float[]){1, 2, 3}),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){1, {4}}, (float[]){1, 2, 3, 4})};
    eng_tensor_t *out[1] = {NULL};
    cr_expect_eq(run(&f, ins, 2, out), FS_EINVAL);
    expect_msg("node 'scan' (Scan): scan input 1 is 4 long along its axis, scan input 0 is 3");
    expect_no_activations(&f);
    tensors_free(ins, 2);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(engine_control, scan_8_is_refused_clearly)
{
    mb_t b;
    mb_init(&b, 8, 8);
    mb_input(&b, "s", F, 2, (int64_t[]){1, 2}, NULL);
    mb_input(&b, "x", F, 3, (int64_t[]){1, 3, 2}, NULL);
    Onnx__NodeProto *n = mb_node(&b, "Scan", "scan", ",s,x", "y,z");
    mb_attr_i(&b, n, "num_scan_inputs", 1);
    mb_begin_g(&b, n, "body");
    mb_input(&b, "si", F, 1, (int64_t[]){2}, NULL);
    mb_input(&b, "xi", F, 1, (int64_t[]){2}, NULL);
    mb_node(&b, "Add", "add", "si,xi", "so");
    mb_output(&b, "so", F, 1, (int64_t[]){2});
    mb_output(&b, "so", F, 1, (int64_t[]){2});
    mb_end_g(&b);
    mb_output(&b, "y", F, -1, NULL);
    mb_output(&b, "z", F, -1, NULL);
    eng_graph_t *g = NULL;
    cr_expect_eq(mb_load(&b, NULL, NULL, &g), FS_ENOTSUP);
    expect_msg("Scan-8 (a batch axis and sequence_lens) is not supported");
    mb_free(&b);
}

/* ---- load-time rewrites ------------------------------------------------------------ */

/* y = BatchNormalization(Conv(x)) and z = If(c) then the Conv's output: a
 * subgraph reading the Conv's output keeps it from being fused away, and
 * a constant expression a branch reads is folded in the model graph. */
Test(engine_control, folding_and_fusion_see_what_subgraphs_read)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "c", B, 0, NULL, NULL);
    mb_input(&b, "x", F, 4, (int64_t[]){1, 1, 1, 2}, NULL);
    mb_initializer(&b, float_tensor(&b, "w", 4, (int64_t[]){1, 1, 1, 1}, (float[]){2}, 1));
    mb_initializer(&b, float_tensor(&b, "one", 1, (int64_t[]){1}, (float[]){1}, 1));
    mb_initializer(&b, float_tensor(&b, "zero", 1, (int64_t[]){1}, (float[]){0}, 1));
    mb_initializer(&b, float_tensor(&b, "three", 0, NULL, (float[]){3}, 1));
    mb_node(&b, "Conv", "conv", "x,w", "h");
    Onnx__NodeProto *bn = mb_node(&b, "BatchNormalization", "bn", "h,one,zero,zero,one", "y");
    mb_attr_f(&b, bn, "epsilon", 0.0f);
    mb_node(&b, "Mul", "folded", "three,three", "nine");
    Onnx__NodeProto *n = mb_node(&b, "If", "if", "c", "z");
    mb_begin_g(&b, n, "then_branch");
    mb_node(&b, "Add", "add", "h,nine", "t");
    mb_output(&b, "t", F, 4, (int64_t[]){1, 1, 1, 2});
    mb_end_g(&b);
    mb_begin_g(&b, n, "else_branch");
    mb_output(&b, "h", F, 4, (int64_t[]){1, 1, 1, 2});
    mb_end_g(&b);
    mb_output(&b, "y", F, 4, (int64_t[]){1, 1, 1, 2});
    mb_output(&b, "z", F, 4, (int64_t[]){1, 1, 1, 2});
    model_fixture_t f;
    open_model(&f, &b);
    eng_tensor_t ins[2] = {tensor_of(ENG_DT_BOOL, (eng_shape_t){0}, &yes),
                           tensor_of(ENG_DT_FLOAT, (eng_shape_t){4, {1, 1, 1, 2}}, (float[]){1, -3})};
    eng_tensor_t *out[2] = {NULL};
    cr_assert_eq(run(&f, ins, 2, out), 0, "%s", fs_errmsg());
    expect_floats(out[0], (eng_shape_t){4, {1, 1, 1, 2}}, (float[]){2, -6});
    expect_floats(out[1], (eng_shape_t){4, {1, 1, 1, 2}}, (float[]){11, 3});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    *(bool *)ins[0].data = false;
    cr_assert_eq(run(&f, ins, 2, out), 0, "%s", fs_errmsg());
    expect_floats(out[1], (eng_shape_t){4, {1, 1, 1, 2}}, (float[]){2, -6});
    eng_tensor_free(out[0]);
    eng_tensor_free(out[1]);
    expect_no_activations(&f);
    tensors_free(ins, 2);
    model_fixture_close(&f);
    mb_free(&b);
}
