/* test_onnx_schema.c -- tests for engine/onnx_schema.c through the loader:
 * a node of a list.h op that breaks its op's ONNX schema (input and output
 * counts, required values named "", unknown, mistyped, repeated or missing
 * attributes) fails the load with FS_EINVAL
 * naming the node, the op and the problem; what ONNX allows loads. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "tests/engine/onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define AT(x) ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__##x

/* Loads b, expecting FS_EINVAL with `want` in the message. */
static void expect_invalid(mb_t *b, const char *want)
{
    eng_graph_t *g = NULL;
    int rc = mb_load(b, NULL, NULL, &g);
    cr_expect_eq(rc, FS_EINVAL, "rc %s, want FS_EINVAL: %s", fs_errname(rc), fs_errmsg());
    cr_expect_null(g);
    cr_expect(strstr(fs_errmsg(), want), "message lacks \"%s\": %s", want, fs_errmsg());
    eng_graph_destroy(g);
}

/* Loads b, expecting success. */
static void expect_loads(mb_t *b)
{
    eng_graph_t *g = NULL;
    cr_expect_eq(mb_load(b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    eng_graph_destroy(g);
}

/* A model at `opset` with float inputs X and Y, and an int64 input S. */
static void model(mb_t *b, int64_t opset)
{
    mb_init(b, 8, opset);
    mb_input(b, "X", F, -1, NULL, NULL);
    mb_input(b, "Y", F, -1, NULL, NULL);
    mb_input(b, "S", I64, 1, (int64_t[]){1}, NULL);
}

/* ---- inputs ---------------------------------------------------------------------- */

Test(engine_onnx_schema, required_input_named_empty_is_rejected)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "Gemm", "g", "X,,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'g' (Gemm): input 1 (B) is required but has an empty name");
    mb_free(&b);

    /* A variadic input's least count is required too. */
    model(&b, 13);
    Onnx__NodeProto *n = mb_node(&b, "Concat", NULL, "blank", "Z");
    n->input[0][0] = '\0'; /* one input, named "" */
    mb_attr_i(&b, n, "axis", 0);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node #0 (Concat): input 0 (inputs) is required but has an empty name");
    mb_free(&b);

    /* An optional one may be left out (Clip's min). */
    model(&b, 13);
    mb_node(&b, "Clip", "c", "X,,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

Test(engine_onnx_schema, too_many_inputs_are_rejected)
{
    mb_t b;
    model(&b, 14);
    mb_node(&b, "Relu", "r", "X,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'r' (Relu): has 2 inputs, but Relu-14 takes exactly 1");
    mb_free(&b);

    model(&b, 13);
    mb_node(&b, "Gemm", "g", "X,Y,X,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'g' (Gemm): has 4 inputs, but Gemm-13 takes 2 to 3");
    mb_free(&b);
}

Test(engine_onnx_schema, too_few_inputs_are_rejected)
{
    mb_t b;
    model(&b, 14);
    mb_node(&b, "Add", "a", "X", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'a' (Add): has 1 input, but Add-14 takes exactly 2");
    mb_free(&b);

    model(&b, 13);
    mb_node(&b, "Sum", "s", "", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 's' (Sum): has 0 inputs, but Sum-13 takes at least 1");
    mb_free(&b);
}

/* Counts that changed between opsets follow the model's opset. */
Test(engine_onnx_schema, input_count_follows_the_models_opset)
{
    mb_t b;
    /* Clip: min and max were attributes until 11, inputs from 11. */
    model(&b, 10);
    mb_node(&b, "Clip", "c", "X,Y,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'c' (Clip): has 3 inputs, but Clip-6 takes exactly 1");
    mb_free(&b);
    model(&b, 11);
    mb_node(&b, "Clip", "c", "X,Y,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);

    /* Split: `split` an input from 13. */
    model(&b, 11);
    mb_node(&b, "Split", "sp", "X,S", "A,B");
    mb_output(&b, "A", 0, -1, NULL);
    expect_invalid(&b, "node 'sp' (Split): has 2 inputs, but Split-11 takes exactly 1");
    mb_free(&b);
    model(&b, 13);
    mb_node(&b, "Split", "sp", "X,S", "A,B");
    mb_output(&b, "A", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

/* As ONNX Runtime does (its optimizer writes LayerNormalization into opset
 * 11..16 models): read as the op's first version, whose schema then holds. */
Test(engine_onnx_schema, op_used_before_its_opset_is_read_as_its_first_version)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "Gelu", "ge", "X", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
    model(&b, 13);
    mb_attr_i(&b, mb_node(&b, "Gelu", "ge", "X", "Z"), "axis", 1);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'ge' (Gelu): attribute 'axis' is not defined by Gelu-20");
    mb_free(&b);
    model(&b, 20);
    mb_node(&b, "Gelu", "ge", "X", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

/* ---- outputs --------------------------------------------------------------------- */

Test(engine_onnx_schema, node_without_output_is_rejected)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "ReduceMax", "r", "X", "");
    mb_output(&b, "X", 0, -1, NULL);
    expect_invalid(&b, "node 'r' (ReduceMax): has 0 outputs, but ReduceMax-13 takes exactly 1");
    mb_free(&b);
}

Test(engine_onnx_schema, required_output_named_empty_is_rejected)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "ReduceMax", "n3", "X", "blank")->output[0][0] = '\0'; /* one output, "" */
    mb_output(&b, "X", 0, -1, NULL);
    expect_invalid(&b, "node 'n3' (ReduceMax): output 0 (reduced) is required but has an empty "
                       "name");
    mb_free(&b);

    /* TopK's indices are not optional. */
    model(&b, 11);
    mb_node(&b, "TopK", "t", "X,S", "V,");
    mb_output(&b, "V", 0, -1, NULL);
    expect_invalid(&b, "node 't' (TopK): output 1 (Indices) is required but has an empty name");
    mb_free(&b);

    /* Optional outputs, and a variadic's slots past its least count, may be
     * left out. */
    model(&b, 13);
    mb_node(&b, "Dropout", "d", "X", "A,");
    mb_node(&b, "MaxPool", "p", "X", "B,");
    mb_attr_ints(&b, b.nodes[1], "kernel_shape", (int64_t[]){2}, 1);
    mb_node(&b, "Split", "s", "Y", "C,,E");
    mb_output(&b, "A", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

Test(engine_onnx_schema, too_many_outputs_are_rejected)
{
    mb_t b;
    model(&b, 14);
    mb_node(&b, "Relu", "r", "X", "Z,W");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'r' (Relu): has 2 outputs, but Relu-14 takes exactly 1");
    mb_free(&b);

    model(&b, 13);
    mb_node(&b, "Dropout", "d", "X", "Z,M,W");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'd' (Dropout): has 3 outputs, but Dropout-13 takes 1 to 2");
    mb_free(&b);
}

/* ---- attributes ------------------------------------------------------------------ */

Test(engine_onnx_schema, unknown_attribute_is_rejected)
{
    mb_t b;
    model(&b, 14);
    mb_attr_f(&b, mb_node(&b, "Relu", "r", "X", "Z"), "alpha", 0.1f);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'r' (Relu): attribute 'alpha' is not defined by Relu-14 (it "
                       "defines: none)");
    mb_free(&b);

    /* A misspelling: the message lists what the op defines. */
    model(&b, 13);
    mb_attr_i(&b, mb_node(&b, "Concat", "c", "X,Y", "Z"), "axes", 0);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'c' (Concat): attribute 'axes' is not defined by Concat-13 (it "
                       "defines: axis)");
    mb_free(&b);

    /* An attribute that became an input. */
    model(&b, 13);
    mb_attr_ints(&b, mb_node(&b, "ReduceSum", "rs", "X", "Z"), "axes", (int64_t[]){0}, 1);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'rs' (ReduceSum): attribute 'axes' is not defined by ReduceSum-13, "
                       "which takes axes as input 1");
    mb_free(&b);

    /* A subgraph on an op without one. */
    model(&b, 14);
    mb_attr_g(&b, mb_node(&b, "Relu", "r", "X", "Z"), "body");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'r' (Relu): attribute 'body' is not defined by Relu-14");
    mb_free(&b);

    /* A producer's internal attribute ("__" prefix) is not checked, as in
     * ONNX's checker. */
    model(&b, 14);
    mb_attr_i(&b, mb_node(&b, "Relu", "r", "X", "Z"), "__exporter_hint", 1);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

Test(engine_onnx_schema, attribute_of_wrong_type_is_rejected)
{
    mb_t b;
    model(&b, 13);
    mb_attr_f(&b, mb_node(&b, "Concat", "c", "X,Y", "Z"), "axis", 1.0f);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'c' (Concat): attribute 'axis' has type FLOAT, but Concat-13 "
                       "defines it as INT");
    mb_free(&b);

    model(&b, 13);
    mb_attr_i(&b, mb_node(&b, "Transpose", "t", "X", "Z"), "perm", 1);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 't' (Transpose): attribute 'perm' has type INT, but Transpose-13 "
                       "defines it as INTS");
    mb_free(&b);

    /* No type and no value. */
    model(&b, 16);
    Onnx__AttributeProto *a = mb_attr(&b, mb_node(&b, "LeakyRelu", "l", "X", "Z"), "alpha", 0);
    a->has_type = 0;
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'l' (LeakyRelu): attribute 'alpha' has type UNDEFINED, but "
                       "LeakyRelu-16 defines it as FLOAT");
    mb_free(&b);

    /* Before IR 2 the type came from the field in use: that still passes. */
    model(&b, 16);
    a = mb_attr(&b, mb_node(&b, "LeakyRelu", "l", "X", "Z"), "alpha", 0);
    a->has_type = 0;
    a->has_f = 1;
    a->f = 0.2f;
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

Test(engine_onnx_schema, missing_required_attribute_is_rejected)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "Cast", "k", "X", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'k' (Cast): attribute 'to' is required by Cast-13 but missing");
    mb_free(&b);

    model(&b, 13);
    mb_node(&b, "Concat", "c", "X,Y", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'c' (Concat): attribute 'axis' is required by Concat-13 but missing");
    mb_free(&b);

    /* Required at one opset, an input at the next (Unsqueeze's axes). */
    model(&b, 11);
    mb_node(&b, "Unsqueeze", "u", "X", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'u' (Unsqueeze): attribute 'axes' is required by Unsqueeze-11 but "
                       "missing");
    mb_free(&b);
    model(&b, 13);
    mb_node(&b, "Unsqueeze", "u", "X,S", "Z");
    mb_output(&b, "Z", 0, -1, NULL);
    expect_loads(&b);
    mb_free(&b);
}

Test(engine_onnx_schema, attribute_given_twice_is_rejected)
{
    mb_t b;
    model(&b, 13);
    Onnx__NodeProto *n = mb_node(&b, "Concat", "c", "X,Y", "Z");
    mb_attr_i(&b, n, "axis", 0);
    mb_attr_i(&b, n, "axis", 1);
    mb_output(&b, "Z", 0, -1, NULL);
    expect_invalid(&b, "node 'c' (Concat): attribute 'axis' is given twice");
    mb_free(&b);
}

/* The checks hold for the Constant nodes the loader turns into constants. */
Test(engine_onnx_schema, constant_nodes_meet_their_schema)
{
    mb_t b;
    /* value_float is Constant-12's. */
    model(&b, 11);
    mb_attr_f(&b, mb_node(&b, "Constant", "k", "", "C"), "value_float", 1.0f);
    mb_output(&b, "C", 0, -1, NULL);
    expect_invalid(&b, "node 'k' (Constant): attribute 'value_float' is not defined by "
                       "Constant-11");
    mb_free(&b);

    model(&b, 13);
    mb_attr_f(&b, mb_node(&b, "Constant", "k", "X", "C"), "value_float", 1.0f);
    mb_output(&b, "C", 0, -1, NULL);
    expect_invalid(&b, "node 'k' (Constant): has 1 input, but Constant-13 takes exactly 0");
    mb_free(&b);

    model(&b, 13);
    Onnx__NodeProto *n = mb_node(&b, "Constant", "k", "", "blank");
    n->output[0][0] = '\0'; /* one output, named "" */
    mb_attr_f(&b, n, "value_float", 1.0f);
    mb_output(&b, "X", 0, -1, NULL);
    expect_invalid(&b, "node 'k' (Constant): output 0 (output) is required but has an empty "
                       "name");
    mb_free(&b);
}

/* Other domains, and ops the engine does not run, are not checked here:
 * resolve_ops reports them as unsupported (FS_ENOTSUP). */
Test(engine_onnx_schema, nodes_of_other_ops_are_left_to_the_report)
{
    mb_t b;
    model(&b, 13);
    mb_node(&b, "Relu", "r", "X,Y,X", "Z")->domain = mb_str(&b, "com.example");
    mb_opset(&b, "com.example", 1);
    mb_node(&b, "NoSuchOp", "n", "", "");
    mb_output(&b, "X", 0, -1, NULL);
    eng_graph_t *g = NULL;
    int rc = mb_load(&b, NULL, NULL, &g);
    cr_expect_eq(rc, FS_ENOTSUP, "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "2 unsupported nodes"), "%s", fs_errmsg());
    eng_graph_destroy(g);
    mb_free(&b);
}
