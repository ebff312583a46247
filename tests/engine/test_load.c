/* test_load.c -- tests for engine/onnx_load.c (with onnx_attr.c,
 * onnx_sort.c, onnx_pool.c) and engine/graph.c: ONNX models built in
 * memory, loaded into the IR; versions, values, Constant nodes, attributes,
 * topological order, the unsupported-node report. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"
#include "engine/op.h"
#include "tests/engine/onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* Skips the test unless every listed op is registered yet (the op
 * families are filled in separately from the loader). */
#define REQUIRE_OPS(...)                                                                           \
    do {                                                                                           \
        const char *ops_[] = {__VA_ARGS__};                                                        \
        for (size_t i_ = 0; i_ < sizeof ops_ / sizeof ops_[0]; i_++)                               \
            if (!eng_op_find(ops_[i_]))                                                            \
                cr_skip_test("op %s is not registered yet", ops_[i_]);                             \
    } while (0)

static const char *const batch[] = {"N", NULL};

/* A float [2,3] initializer named `name` with values 0..5 in float_data. */
static Onnx__TensorProto *weight_2x3(mb_t *b, const char *name)
{
    const float v[6] = {0, 1, 2, 3, 4, 5};
    Onnx__TensorProto *t = mb_tensor(b, name, F, 2, (int64_t[]){2, 3});
    mb_floats(b, t, v, 6);
    return t;
}

static int expect_load_fails(mb_t *b, int want, const char *const *needles, size_t n_needles)
{
    eng_graph_t *g = NULL;
    int rc = mb_load(b, NULL, NULL, &g);
    cr_expect_eq(rc, want, "rc %s, want %s: %s", fs_errname(rc), fs_errname(want), fs_errmsg());
    cr_expect_null(g);
    for (size_t i = 0; i < n_needles; i++)
        cr_expect(strstr(fs_errmsg(), needles[i]), "message lacks \"%s\": %s", needles[i],
                  fs_errmsg());
    eng_graph_destroy(g);
    return rc;
}

#define EXPECT_FAILS(b, want, ...)                                                                 \
    expect_load_fails(b, want, (const char *const[]){__VA_ARGS__},                                 \
                      sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* ---- values ------------------------------------------------------------------ */

Test(engine_load, graph_without_nodes_has_inputs_constants_and_outputs)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_initializer(&b, weight_2x3(&b, "W"));
    mb_input(&b, "X", F, 2, (int64_t[]){-1, 3}, batch);
    mb_output(&b, "W", 0, -1, NULL);
    mb_output(&b, "X", F, 2, (int64_t[]){-1, 3});
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    cr_expect_eq(g->ir_version, 8);
    cr_expect_eq(g->opset, 13);
    cr_expect_eq(g->n_values, 2);
    cr_expect_eq(g->n_nodes, 0);
    int w = graph_value(g, "W"), x = graph_value(g, "X");
    cr_assert(w >= 0 && x >= 0);
    cr_expect_eq(g->values[w].kind, ENG_VALUE_CONST);
    cr_expect_eq(g->values[w].constant.dtype, ENG_DT_FLOAT);
    cr_expect_eq(g->values[w].constant.shape.rank, 2);
    cr_expect_eq(((float *)g->values[w].constant.data)[5], 5.0f);
    cr_expect_eq(g->values[w].rank, 2, "a constant declares its own shape");
    cr_expect_eq(g->values[x].kind, ENG_VALUE_INPUT);
    cr_expect_eq(g->values[x].dtype, ENG_DT_FLOAT);
    cr_expect_eq(g->values[x].rank, 2);
    cr_expect_eq(g->values[x].dims[0].value, -1);
    cr_expect_str_eq(g->values[x].dims[0].param, "N");
    cr_expect_eq(g->values[x].dims[1].value, 3);
    cr_expect_null(g->values[x].dims[1].param);
    cr_expect_eq(g->n_inputs, 1);
    cr_expect_eq(g->inputs[0], x);
    cr_expect_eq(g->n_outputs, 2);
    cr_expect_eq(g->outputs[0], w);
    cr_expect(g->values[w].is_output && g->values[x].is_output);
    cr_expect_eq(g->weight_bytes, 24);
    eng_graph_destroy(g);
    eng_graph_destroy(NULL);
    mb_free(&b);
}

Test(engine_load, initializer_listed_as_input_stays_constant)
{
    mb_t b;
    mb_init(&b, 3, 8);
    mb_initializer(&b, weight_2x3(&b, "W"));
    mb_input(&b, "X", F, 1, (int64_t[]){3}, NULL);
    mb_input(&b, "W", F, 2, (int64_t[]){2, 3}, NULL);
    mb_output(&b, "W", 0, -1, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    cr_expect_eq(g->n_inputs, 1);
    cr_expect_eq(g->inputs[0], graph_value(g, "X"));
    cr_expect_eq(g->values[graph_value(g, "W")].kind, ENG_VALUE_CONST);
    cr_expect_eq(g->n_values, 2, "every name once");
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, unknown_and_negative_declared_dims_read_as_unknown)
{
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__ValueInfoProto *vi = mb_input(&b, "X", F, 3, (int64_t[]){-1, 4, 5}, NULL);
    vi->type->tensor_type->shape->dim[2]->dim_value = -7;
    mb_input(&b, "Y", F, -1, NULL, NULL);
    mb_input(&b, "Z", 0, -1, NULL, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    const eng_value_t *x = &g->values[graph_value(g, "X")];
    cr_expect_eq(x->rank, 3);
    cr_expect_eq(x->dims[0].value, -1);
    cr_expect_null(x->dims[0].param);
    cr_expect_eq(x->dims[1].value, 4);
    cr_expect_eq(x->dims[2].value, -1);
    cr_expect_eq(g->values[graph_value(g, "Y")].rank, -1, "no shape: rank unknown");
    cr_expect_eq(g->values[graph_value(g, "Z")].dtype, ENG_DT_UNDEFINED);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, io_of_unsupported_dtype_or_kind_is_reported)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "D", ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64, 1, (int64_t[]){2}, NULL);
    Onnx__ValueInfoProto *seq = mb_input(&b, "S", F, 1, (int64_t[]){2}, NULL);
    seq->type->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    Onnx__TypeProto__Sequence *st = mb_alloc(&b, sizeof *st);
    onnx__type_proto__sequence__init(st);
    seq->type->sequence_type = st;
    mb_input(&b, "R", F, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, NULL);
    mb_output(&b, "D", 0, -1, NULL);
    EXPECT_FAILS(&b, FS_ENOTSUP, "3 unsupported values", "graph input 'D' has dtype complex64",
                 "graph input 'S' is a sequence", "graph input 'R' has rank 9");
    mb_free(&b);
}

Test(engine_load, duplicate_names_are_rejected)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_initializer(&b, weight_2x3(&b, "W"));
    mb_initializer(&b, weight_2x3(&b, "W"));
    EXPECT_FAILS(&b, FS_EINVAL, "initializer 'W' is defined twice");
    mb_free(&b);

    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", "a", "X", "Y");
    mb_node(&b, "FooBar", "b", "X", "Y");
    EXPECT_FAILS(&b, FS_EINVAL, "node 'b' (FooBar) writes 'Y'", "node 'a'");
    mb_free(&b);

    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", NULL, "X", "X");
    EXPECT_FAILS(&b, FS_EINVAL, "node #0 (FooBar) writes 'X'", "graph input");
    mb_free(&b);
}

Test(engine_load, graph_output_must_be_defined)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_output(&b, "nowhere", F, -1, NULL);
    EXPECT_FAILS(&b, FS_EINVAL, "graph output 'nowhere'");
    mb_free(&b);
}

/* ---- versions and domains ------------------------------------------------------ */

Test(engine_load, ir_versions_3_to_14_only)
{
    const struct {
        int64_t ir;
        int want;
    } cases[] = {{2, FS_ENOTSUP}, {3, 0}, {7, 0}, {11, 0}, {13, 0}, {14, 0}, {15, FS_ENOTSUP}, {-1, FS_ENOTSUP}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mb_t b;
        mb_init(&b, cases[i].ir, 13);
        eng_graph_t *g;
        int rc = mb_load(&b, NULL, NULL, &g);
        cr_expect_eq(rc, cases[i].want, "IR %lld: %s", (long long)cases[i].ir, fs_errmsg());
        if (rc == FS_ENOTSUP)
            cr_expect(strstr(fs_errmsg(), "IR version"), "%s", fs_errmsg());
        eng_graph_destroy(g);
        mb_free(&b);
    }
    mb_t b;
    mb_init(&b, 8, 13);
    b.model.has_ir_version = 0;
    EXPECT_FAILS(&b, FS_EPARSE, "ir_version");
    mb_free(&b);
}

/* IR 14's opaque type (TypeProto field 7, which this build's onnx.proto
 * lacks) on a graph input is refused naming the input and the field. */
Test(engine_load, a_type_kind_the_schema_lacks_is_refused_naming_the_value)
{
    mb_t b;
    mb_init(&b, 14, 13);
    Onnx__ValueInfoProto *in = mb_input(&b, "X", F, 1, (int64_t[]){2}, NULL);
    mb_output(&b, "X", F, 1, (int64_t[]){2});
    Onnx__TypeProto *tp = in->type;
    tp->value_case = ONNX__TYPE_PROTO__VALUE__NOT_SET;
    tp->tensor_type = NULL;
    /* protobuf-c keeps an unknown field's bytes after its tag: the length,
     * then OpaqueProto{domain: "d"}. */
    static uint8_t opaque[] = {0x03, 0x0a, 0x01, 'd'};
    ProtobufCMessageUnknownField *uf = mb_alloc(&b, sizeof *uf);
    *uf = (ProtobufCMessageUnknownField){.tag = 7, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED,
                                         .len = sizeof opaque, .data = opaque};
    tp->base.n_unknown_fields = 1;
    tp->base.unknown_fields = uf;
    EXPECT_FAILS(&b, FS_ENOTSUP, "graph input 'X'", "TypeProto field 7");
    tp->base.n_unknown_fields = 0; /* the builder frees its own allocations only */
    tp->base.unknown_fields = NULL;
    mb_free(&b);
}

Test(engine_load, default_domain_opsets_6_to_28_only)
{
    const struct {
        int64_t opset;
        int want;
    } cases[] = {{5, FS_ENOTSUP}, {6, 0}, {7, 0}, {13, 0}, {23, 0}, {28, 0}, {29, FS_ENOTSUP}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mb_t b;
        mb_init(&b, 8, cases[i].opset);
        mb_initializer(&b, weight_2x3(&b, "W"));
        /* `value`: the one form of Constant every opset defines. */
        Onnx__TensorProto *v = mb_tensor(&b, NULL, F, 0, NULL);
        mb_floats(&b, v, (float[]){1.0f}, 1);
        mb_attr_t(&b, mb_node(&b, "Constant", "c", "", "C"), "value", v);
        eng_graph_t *g;
        int rc = mb_load(&b, NULL, NULL, &g);
        cr_expect_eq(rc, cases[i].want, "opset %lld: %s", (long long)cases[i].opset, fs_errmsg());
        if (rc == 0)
            cr_expect_eq(g->opset, cases[i].opset);
        else
            cr_expect(strstr(fs_errmsg(), "opset"), "%s", fs_errmsg());
        eng_graph_destroy(g);
        mb_free(&b);
    }
}

Test(engine_load, ai_onnx_is_the_default_domain)
{
    mb_t b;
    mb_init(&b, 8, -1);
    mb_opset(&b, "ai.onnx", 17);
    mb_node(&b, "Constant", "c", "", "C");
    mb_attr_i(&b, b.nodes[0], "value_int", 7);
    Onnx__NodeProto *n = mb_node(&b, "Constant", "d", "", "D");
    n->domain = mb_str(&b, "ai.onnx");
    mb_attr_i(&b, n, "value_int", 8);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    cr_expect_eq(g->opset, 17);
    cr_expect_eq(*(int64_t *)g->values[graph_value(g, "D")].constant.data, 8);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, missing_opset_import_is_an_error)
{
    mb_t b;
    mb_init(&b, 8, -1);
    EXPECT_FAILS(&b, FS_EINVAL, "opset_import");
    mb_free(&b);

    mb_init(&b, 8, -1);
    mb_opset(&b, "ai.onnx.ml", 3);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", "n", "X", "Y");
    EXPECT_FAILS(&b, FS_EINVAL, "no default-domain opset");
    mb_free(&b);

    mb_init(&b, 8, 13);
    mb_opset(&b, "", 14);
    EXPECT_FAILS(&b, FS_EINVAL, "13", "14");
    mb_free(&b);
}

Test(engine_load, unused_import_of_another_domain_is_fine)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_opset(&b, "ai.onnx.ml", 3);
    mb_opset(&b, "com.microsoft", 1);
    mb_initializer(&b, weight_2x3(&b, "W"));
    eng_graph_t *g;
    cr_expect_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, node_of_another_domain_is_reported_with_its_domain)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_opset(&b, "ai.onnx.ml", 3);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "LinearClassifier", "lc", "X", "Y")->domain = mb_str(&b, "ai.onnx.ml");
    mb_node(&b, "FusedGemm", "fg", "X", "Z")->domain = mb_str(&b, "com.microsoft");
    EXPECT_FAILS(&b, FS_ENOTSUP, "2 unsupported nodes",
                 "node 'lc' (LinearClassifier, domain 'ai.onnx.ml' opset 3)",
                 "domain 'ai.onnx.ml' is not supported", "node 'fg' (FusedGemm, domain "
                 "'com.microsoft'): domain 'com.microsoft' is not supported");
    mb_free(&b);

    /* Only other domains, and no default import: still the domain error. */
    mb_init(&b, 8, -1);
    mb_opset(&b, "ai.onnx.ml", 3);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "LinearClassifier", "lc", "X", "Y")->domain = mb_str(&b, "ai.onnx.ml");
    EXPECT_FAILS(&b, FS_ENOTSUP, "domain 'ai.onnx.ml'");
    mb_free(&b);
}

/* ---- Constant nodes and attributes ------------------------------------------------ */

Test(engine_load, constant_nodes_become_constants_in_every_form)
{
    mb_t b;
    mb_init(&b, 8, 13);
    const int64_t raw[3] = {-1, 0, 1LL << 40};
    Onnx__TensorProto *t = mb_tensor(&b, "ignored", I64, 1, (int64_t[]){3});
    mb_raw(&b, t, raw, sizeof raw);
    mb_attr_t(&b, mb_node(&b, "Constant", "c0", "", "T"), "value", t);
    mb_attr_f(&b, mb_node(&b, "Constant", "c1", "", "F"), "value_float", 2.5f);
    mb_attr_floats(&b, mb_node(&b, "Constant", "c2", "", "FS"), "value_floats",
                   (float[]){1.5f, -2.0f}, 2);
    mb_attr_i(&b, mb_node(&b, "Constant", "c3", "", "I"), "value_int", -42);
    mb_attr_ints(&b, mb_node(&b, "Constant", "c4", "", "IS"), "value_ints",
                 (int64_t[]){4, 5, 6}, 3);
    mb_attr_ints(&b, mb_node(&b, "Constant", "c5", "", "E"), "value_ints", NULL, 0);
    const char *outs[] = {"T", "F", "FS", "I", "IS", "E"};
    for (int i = 0; i < 6; i++)
        mb_output(&b, outs[i], 0, -1, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    cr_expect_eq(g->n_nodes, 0, "Constant nodes leave the node list");
    cr_expect_eq(g->n_values, 6);
    const eng_tensor_t *c[6];
    for (int i = 0; i < 6; i++) {
        const eng_value_t *v = &g->values[graph_value(g, outs[i])];
        cr_expect_eq(v->kind, ENG_VALUE_CONST, "%s", outs[i]);
        cr_expect_eq(v->producer, -1);
        c[i] = &v->constant;
    }
    cr_expect_eq(c[0]->dtype, ENG_DT_INT64);
    cr_expect_eq(((int64_t *)c[0]->data)[2], 1LL << 40);
    cr_expect_eq(c[1]->dtype, ENG_DT_FLOAT);
    cr_expect_eq(c[1]->shape.rank, 0);
    cr_expect_eq(*(float *)c[1]->data, 2.5f);
    cr_expect_eq(c[2]->shape.rank, 1);
    cr_expect_eq(c[2]->shape.dims[0], 2);
    cr_expect_eq(((float *)c[2]->data)[1], -2.0f);
    cr_expect_eq(c[3]->dtype, ENG_DT_INT64);
    cr_expect_eq(c[3]->shape.rank, 0);
    cr_expect_eq(*(int64_t *)c[3]->data, -42);
    cr_expect_eq(((int64_t *)c[4]->data)[2], 6);
    cr_expect_eq(c[5]->shape.dims[0], 0);
    cr_expect(c[5]->data != NULL, "an empty constant still has data");
    cr_expect_eq(g->weight_bytes, 24 + 4 + 8 + 8 + 24 + 0);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, string_and_sparse_constants_are_reported)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_attr_s(&b, mb_node(&b, "Constant", "cs", "", "S"), "value_string", "hello");
    Onnx__NodeProto *n = mb_node(&b, "Constant", "sp", "", "P");
    mb_attr(&b, n, "sparse_value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR);
    Onnx__TensorProto *st = mb_tensor(&b, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 1,
                                      (int64_t[]){1});
    mb_attr_t(&b, mb_node(&b, "Constant", "ct", "", "T"), "value", st);
    EXPECT_FAILS(&b, FS_ENOTSUP, "3 unsupported nodes", "node 'cs' (Constant, opset 13)",
                 "'value_string'", "node 'sp' (Constant, opset 13)", "'sparse_value'",
                 "node 'ct' (Constant, opset 13): attribute 'value' is a string tensor");
    mb_free(&b);
}

Test(engine_load, constant_needs_exactly_one_value)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_node(&b, "Constant", "none", "", "C");
    EXPECT_FAILS(&b, FS_EINVAL, "node 'none' (Constant) needs exactly one");
    mb_free(&b);
    mb_init(&b, 8, 13);
    Onnx__NodeProto *n = mb_node(&b, "Constant", "two", "", "C");
    mb_attr_f(&b, n, "value_float", 1);
    mb_attr_i(&b, n, "value_int", 1);
    EXPECT_FAILS(&b, FS_EINVAL, "node 'two' (Constant)", "has 2");
    mb_free(&b);
    mb_init(&b, 8, 13);
    mb_attr_i(&b, mb_node(&b, "Constant", "nout", "", ""), "value_int", 1);
    EXPECT_FAILS(&b, FS_EINVAL, "node 'nout' (Constant): has 0 outputs, but Constant-13 takes "
                 "exactly 1");
    mb_free(&b);
}

Test(engine_load, corrupt_attribute_tensor_fails_naming_node_and_attribute)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    Onnx__TensorProto *t = mb_tensor(&b, NULL, F, 1, (int64_t[]){4});
    mb_raw(&b, t, "abc", 3);
    mb_attr_t(&b, mb_node(&b, "FooBar", "n", "X", "Y"), "value", t);
    EXPECT_FAILS(&b, FS_EPARSE, "node 'n' (FooBar)", "attribute 'value'", "3 bytes");
    mb_free(&b);
}

Test(engine_load, constant_of_shape_value_tensor_is_parsed)
{
    REQUIRE_OPS("ConstantOfShape");
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__TensorProto *shape = mb_tensor(&b, "shape", I64, 1, (int64_t[]){2});
    mb_int64s(&b, shape, (int64_t[]){2, 3}, 2);
    mb_initializer(&b, shape);
    Onnx__TensorProto *v = mb_tensor(&b, NULL, F, 1, (int64_t[]){1});
    mb_floats(&b, v, (float[]){2.5f}, 1);
    mb_attr_t(&b, mb_node(&b, "ConstantOfShape", "cos", "shape", "Y"), "value", v);
    mb_output(&b, "Y", F, 2, (int64_t[]){2, 3});
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    cr_assert_eq(g->n_nodes, 1);
    const eng_node_t *n = &g->nodes[0];
    cr_expect_str_eq(n->op_type, "ConstantOfShape");
    cr_expect_eq(n->op, eng_op_find("ConstantOfShape"));
    const eng_tensor_t *t = eng_attr_tensor(n, "value");
    cr_assert(t);
    cr_expect_eq(t->dtype, ENG_DT_FLOAT);
    cr_expect_eq(t->shape.rank, 1);
    cr_expect_eq(t->shape.dims[0], 1);
    cr_expect_eq(*(const float *)t->data, 2.5f);
    cr_expect_eq(g->weight_bytes, 16, "attribute tensors are not weights");
    eng_graph_destroy(g);
    mb_free(&b);
}

/* onnx_attrs_load itself: every type the IR holds. Through the loader a
 * node of a list.h op carries only its schema's attributes (FLOATS and
 * STRINGS belong to Constant alone, which leaves the graph), so the copy
 * is tested on a node of no op. */
Test(engine_load, attributes_of_every_held_type_are_copied)
{
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__NodeProto *n = mb_node(&b, "FooBar", "fb", "X", "Y");
    mb_attr_i(&b, n, "i", -3);
    mb_attr_f(&b, n, "f", 0.25f);
    mb_attr_s(&b, n, "s", "same_upper");
    mb_attr_ints(&b, n, "ints", (int64_t[]){1, -2}, 2);
    mb_attr_floats(&b, n, "floats", (float[]){0.5f}, 1);
    mb_attr_ints(&b, n, "empty", NULL, 0);
    Onnx__AttributeProto *ss =
        mb_attr(&b, n, "strings", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    ss->n_strings = 2;
    ss->strings = mb_alloc(&b, 2 * sizeof *ss->strings);
    ss->strings[0] = (ProtobufCBinaryData){2, (uint8_t *)mb_str(&b, "ab")};
    ss->strings[1] = (ProtobufCBinaryData){0, (uint8_t *)mb_str(&b, "")};
    Onnx__AttributeProto *untyped = mb_attr(&b, n, "untyped", 0);
    untyped->has_type = 0;
    untyped->has_i = 1;
    untyped->i = 9;
    Onnx__TensorProto *t = mb_tensor(&b, NULL, F, 1, (int64_t[]){2});
    mb_floats(&b, t, (float[]){1.5f, 2.5f}, 2);
    mb_attr_t(&b, n, "t", t);
    onnx_pool_t *pool = onnx_pool_create(NULL);
    cr_assert(pool);
    onnx_attrs_t at;
    cr_assert_eq(onnx_attrs_load(pool, n, "node 'fb'", NULL, false, &at), 0, "%s", fs_errmsg());
    cr_expect_null(at.subgraph);
    cr_expect_null(at.problem);
    const eng_node_t e = {.name = "fb", .op_type = "FooBar", .domain = "",
                          .n_attrs = at.n_attrs, .attrs = at.attrs};
    cr_expect_eq(e.n_attrs, 9);
    cr_expect_eq(eng_attr_i(&e, "i", 0), -3);
    cr_expect_eq(eng_attr_i(&e, "untyped", 0), 9, "type inferred from the field in use");
    cr_expect_eq(eng_attr_f(&e, "f", 0), 0.25f);
    cr_expect_str_eq(eng_attr_s(&e, "s", ""), "same_upper");
    cr_expect_eq(eng_node_attr(&e, "s")->s_len, 10);
    size_t cnt = 99;
    const int64_t *ints = eng_attr_ints(&e, "ints", &cnt);
    cr_assert(ints);
    cr_expect_eq(cnt, 2);
    cr_expect_eq(ints[1], -2);
    cr_expect(eng_attr_ints(&e, "empty", &cnt) != NULL, "present but empty is not absent");
    cr_expect_eq(cnt, 0);
    cr_expect_eq(eng_attr_floats(&e, "floats", &cnt)[0], 0.5f);
    const eng_attr_t *sa = eng_node_attr(&e, "strings");
    cr_assert(sa && sa->type == ENG_ATTR_STRINGS && sa->n == 2);
    cr_expect_str_eq(sa->strings[0], "ab");
    cr_expect_str_eq(sa->strings[1], "");
    const eng_tensor_t *et = eng_attr_tensor(&e, "t");
    cr_assert(et);
    cr_expect_eq(et->shape.dims[0], 2);
    cr_expect_eq(((const float *)et->data)[1], 2.5f);
    onnx_pool_destroy(pool);
    mb_free(&b);
}

Test(engine_load, attribute_getters_fall_back_to_defaults)
{
    const int64_t ints[] = {3, 4};
    const float floats[] = {1.5f};
    const eng_attr_t attrs[] = {
        {.name = "axis", .type = ENG_ATTR_INT, .i = -1},
        {.name = "alpha", .type = ENG_ATTR_FLOAT, .f = 0.2f},
        {.name = "mode", .type = ENG_ATTR_STRING, .s = "constant", .s_len = 8},
        {.name = "perm", .type = ENG_ATTR_INTS, .n = 2, .ints = ints},
        {.name = "scales", .type = ENG_ATTR_FLOATS, .n = 1, .floats = floats},
        {.name = "value", .type = ENG_ATTR_TENSOR, .t = {.dtype = ENG_DT_FLOAT}},
    };
    const eng_node_t n = {.name = "n", .op_type = "X", .domain = "", .n_attrs = 6, .attrs = attrs};
    cr_expect_eq(eng_node_attr(&n, "perm"), &attrs[3]);
    cr_expect_null(eng_node_attr(&n, "nope"));
    cr_expect_eq(eng_attr_i(&n, "axis", 1), -1);
    cr_expect_eq(eng_attr_i(&n, "alpha", 7), 7, "another type gives the default");
    cr_expect_eq(eng_attr_i(&n, "nope", 5), 5);
    cr_expect_eq(eng_attr_f(&n, "alpha", 0), 0.2f);
    cr_expect_eq(eng_attr_f(&n, "axis", 9.0f), 9.0f);
    cr_expect_str_eq(eng_attr_s(&n, "mode", "reflect"), "constant");
    cr_expect_str_eq(eng_attr_s(&n, "nope", "reflect"), "reflect");
    cr_expect_null(eng_attr_s(&n, "axis", NULL));
    size_t cnt = 42;
    cr_expect_eq(eng_attr_ints(&n, "perm", &cnt), ints);
    cr_expect_eq(cnt, 2);
    cr_expect_null(eng_attr_ints(&n, "scales", &cnt));
    cr_expect_eq(cnt, 0);
    cr_expect_eq(eng_attr_floats(&n, "scales", NULL), floats);
    cr_expect_null(eng_attr_floats(&n, "nope", &cnt));
    cr_expect_eq(eng_attr_tensor(&n, "value"), &attrs[5].t);
    cr_expect_null(eng_attr_tensor(&n, "perm"));
}

/* ---- topological order ------------------------------------------------------------ */

Test(engine_load, shuffled_nodes_are_sorted_topologically)
{
    REQUIRE_OPS("Relu", "Add");
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){-1, 4}, batch);
    mb_node(&b, "Add", "d", "B,C", "Y");
    mb_node(&b, "Relu", "c", "A", "C");
    mb_node(&b, "Relu", "a", "X", "A");
    mb_node(&b, "Relu", "b", "A", "B");
    mb_output(&b, "Y", F, 2, (int64_t[]){-1, 4});
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    cr_assert_eq(g->n_nodes, 4);
    const char *want[] = {"a", "c", "b", "d"};
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(g->nodes[i].name, want[i], "position %d", i);
    int a = graph_value(g, "A"), y = graph_value(g, "Y");
    cr_expect_eq(g->values[a].producer, 0);
    cr_expect_eq(g->values[a].n_consumers, 2);
    cr_expect_eq(g->values[graph_value(g, "X")].n_consumers, 1);
    cr_expect_eq(g->values[y].producer, 3);
    cr_expect(g->values[y].is_output);
    cr_expect(!g->values[a].is_output);
    cr_expect_eq(g->values[y].dims[1].value, 4, "declared by the graph output");
    cr_expect_eq(g->nodes[3].op, eng_op_find("Add"));
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, an_order_that_is_already_topological_is_kept)
{
    REQUIRE_OPS("Relu", "Add");
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    /* Two independent branches, interleaved as the exporter wrote them. */
    mb_node(&b, "Relu", "p1", "X", "P1");
    mb_node(&b, "Relu", "q1", "X", "Q1");
    mb_node(&b, "Relu", "p2", "P1", "P2");
    mb_node(&b, "Relu", "q2", "Q1", "Q2");
    mb_node(&b, "Add", "j", "P2,Q2", "Y");
    mb_output(&b, "Y", 0, -1, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    const char *want[] = {"p1", "q1", "p2", "q2", "j"};
    for (int i = 0; i < 5; i++)
        cr_expect_str_eq(g->nodes[i].name, want[i]);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, long_reversed_chain_sorts)
{
    REQUIRE_OPS("Relu");
    enum { N = 3000 };
    mb_t *b = malloc(sizeof *b);
    cr_assert(b);
    mb_init(b, 8, 13);
    mb_input(b, "v0", F, -1, NULL, NULL);
    char in[32], out[32], name[32];
    for (int i = N; i >= 1; i--) {
        snprintf(in, sizeof in, "v%d", i - 1);
        snprintf(out, sizeof out, "v%d", i);
        snprintf(name, sizeof name, "n%d", i);
        mb_node(b, "Relu", name, in, out);
    }
    snprintf(out, sizeof out, "v%d", N);
    mb_output(b, out, 0, -1, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    graph_check_invariants(g);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "n%d", i + 1);
        cr_assert_str_eq(g->nodes[i].name, name);
    }
    eng_graph_destroy(g);
    mb_free(b);
    free(b);
}

Test(engine_load, optional_inputs_and_outputs_left_empty_are_minus_one)
{
    REQUIRE_OPS("Clip", "Dropout");
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    Onnx__TensorProto *hi = mb_tensor(&b, "hi", F, 0, NULL);
    mb_floats(&b, hi, (float[]){6.0f}, 1);
    mb_initializer(&b, hi);
    mb_node(&b, "Clip", "clip", "X,,hi", "C");
    mb_node(&b, "Dropout", "drop", "C", "Y,");
    mb_output(&b, "Y", 0, -1, NULL);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    const eng_node_t *clip = &g->nodes[0], *drop = &g->nodes[1];
    cr_assert_eq(clip->n_inputs, 3);
    cr_expect_eq(clip->inputs[1], -1);
    cr_expect_eq(clip->inputs[2], graph_value(g, "hi"));
    cr_assert_eq(drop->n_outputs, 2);
    cr_expect_eq(drop->outputs[1], -1);
    cr_expect_eq(g->n_values, 4, "no value for an empty name");
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load, a_cycle_is_rejected_naming_a_node_on_it)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", "entry", "X", "E");
    mb_node(&b, "FooBar", "loop_a", "E,B", "A");
    mb_node(&b, "FooBar", "loop_b", "A", "B");
    mb_output(&b, "B", 0, -1, NULL);
    EXPECT_FAILS(&b, FS_EINVAL, "cycle", "loop_");
    mb_free(&b);

    mb_init(&b, 8, 13);
    mb_node(&b, "FooBar", NULL, "S", "S");
    EXPECT_FAILS(&b, FS_EINVAL, "cycle through node #0 (FooBar)");
    mb_free(&b);
}

Test(engine_load, reading_an_undefined_name_is_rejected)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", "conv1", "X,missing_w", "Y");
    EXPECT_FAILS(&b, FS_EINVAL, "node 'conv1' (FooBar) reads 'missing_w'");
    mb_free(&b);
}

/* ---- the unsupported-node report ---------------------------------------------------- */

Test(engine_load, every_unsupported_node_is_listed_in_one_message)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_node(&b, "FooBar", "n3", "B", "C");
    mb_node(&b, "FooBar", "n1", "X", "A");
    Onnx__NodeProto *cf = mb_node(&b, "FooIf", "n5", "A", "B");
    mb_attr_g(&b, cf, "then_branch");
    mb_attr_g(&b, cf, "else_branch");
    mb_node(&b, "BarBaz", NULL, "C", "D");
    mb_output(&b, "D", 0, -1, NULL);
    EXPECT_FAILS(&b, FS_ENOTSUP,
                 "model uses 4 unsupported nodes: node 'n1' (FooBar, opset 13): op not supported; "
                 "node 'n5' (FooIf, opset 13): op not supported (control flow: attribute "
                 "'then_branch' is a subgraph); node 'n3' (FooBar, opset 13): op not supported; "
                 "node #3 (BarBaz, opset 13): op not supported");
    mb_free(&b);
}

/* Attributes the schema allows but the engine cannot take: a reference
 * to a function's attribute (valid only inside a function body) and a
 * string tensor. (A subgraph or a TENSORS attribute on a list.h op breaks
 * its schema: test_onnx_schema.c.) */
Test(engine_load, unsupported_attribute_values_are_listed)
{
    REQUIRE_OPS("LeakyRelu", "ConstantOfShape");
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    mb_input(&b, "S", I64, 1, (int64_t[]){1}, NULL);
    Onnx__AttributeProto *ref = mb_attr(&b, mb_node(&b, "LeakyRelu", "r3", "X", "C"), "alpha",
                                        ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    ref->ref_attr_name = mb_str(&b, "outer_alpha");
    Onnx__TensorProto *st = mb_tensor(&b, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 1,
                                      (int64_t[]){1});
    mb_attr_t(&b, mb_node(&b, "ConstantOfShape", "cs", "S", "D"), "value", st);
    mb_output(&b, "C", 0, -1, NULL);
    mb_output(&b, "D", 0, -1, NULL);
    EXPECT_FAILS(&b, FS_ENOTSUP, "2 unsupported nodes",
                 "node 'r3' (LeakyRelu, opset 13): attribute 'alpha' refers to function "
                 "attribute 'outer_alpha'",
                 "node 'cs' (ConstantOfShape, opset 13): attribute 'value' is a string tensor");
    mb_free(&b);
}

Test(engine_load, a_long_report_ends_with_how_many_more)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, -1, NULL, NULL);
    char name[48], out[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "node_with_a_long_name_%03d", i);
        snprintf(out, sizeof out, "y%d", i);
        mb_node(&b, "FooBar", name, "X", out);
    }
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), FS_ENOTSUP);
    const char *msg = fs_errmsg();
    cr_expect(strncmp(msg, "model uses 100 unsupported nodes: node 'node_with_a_long_name_000'",
                      66) == 0, "%s", msg);
    const char *more = strstr(msg, "; ... and ");
    cr_assert(more, "%s", msg);
    int shown = 0, hidden = 0;
    for (const char *p = msg; (p = strstr(p, "(FooBar, opset 13)")); p++)
        shown++;
    cr_expect_eq(sscanf(more, "; ... and %d more", &hidden), 1);
    cr_expect_eq(shown + hidden, 100, "%d shown + %d more", shown, hidden);
    cr_expect(strcmp(more + strlen(more) - 5, " more") == 0, "ends cleanly: %s", msg);
    cr_expect_lt(strlen(msg), FS_ERRMSG_MAX);
    mb_free(&b);
}
