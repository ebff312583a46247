/* test_op_schema.c -- tests for engine/op_schema.c and the generated table
 * (engine/ops/schema.inc): every op of list.h has a schema at every opset
 * 6..28 where ONNX defines it, lookups take the version in force, the
 * table is well formed, and eng_op_ctx_complete sees a missing required
 * value. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/op.h"
#include "engine/op_schema.h"

/* The ops of list.h that ONNX added after opset 6, and the opset that
 * added each (ONNX's Changelog.md); every other op of list.h is defined
 * at opset 6. Stated here by hand so that the generated table is checked
 * against something it did not come from. */
static const struct {
    const char *op;
    int since;
} introduced[] = {
    {"Acos", 7},
    {"Asin", 7},
    {"Atan", 7},
    {"Cos", 7},
    {"Sin", 7},
    {"Tan", 7},
    {"Expand", 8},
    {"Erf", 9},
    {"Sign", 9},
    {"Where", 9},
    {"ConstantOfShape", 9},
    {"ThresholdedRelu", 10},
    {"Mod", 10},
    {"Resize", 10},
    {"Round", 11},
    {"CumSum", 11},
    {"GatherElements", 11},
    {"Range", 11},
    {"GreaterOrEqual", 12},
    {"LessOrEqual", 12},
    {"Einsum", 12},
    {"HardSwish", 14},
    {"Trilu", 14},
    {"CastLike", 15},
    {"LayerNormalization", 17},
    {"Gelu", 20},
    {"IsNaN", 9},
    {"IsInf", 10},
    {"GatherND", 11},
    {"Det", 11},
    {"CausalConvWithState", 27},
    {"LinearAttention", 27},
    {"Attention", 23},
    {"RMSNormalization", 23},
    {"RotaryEmbedding", 23},
    {"SwiGLU", 28},
    {"QuantizeLinear", 10},
    {"DequantizeLinear", 10},
    {"DynamicQuantizeLinear", 11},
    {"MatMulInteger", 10},
    {"QLinearMatMul", 10},
    {"ConvInteger", 10},
    {"QLinearConv", 10},
    {"GridSample", 16},
    {"AffineGrid", 20},
    {"RoiAlign", 10},
    {"Col2Im", 18},
    {"MaxUnpool", 9},
    {"DeformConv", 19},
    {"NonMaxSuppression", 10},
    {"DFT", 17},
    {"STFT", 17},
    {"HannWindow", 17},
    {"HammingWindow", 17},
    {"BlackmanWindow", 17},
    {"MelWeightMatrix", 17},
    {"BitwiseNot", 18},
    {"BitwiseAnd", 18},
    {"BitwiseOr", 18},
    {"BitwiseXor", 18},
    {"BitShift", 11},
    {"BitCast", 26},
    {"ScatterND", 11},
    {"ScatterElements", 11},
    {"Scatter", 9},
    {"TensorScatter", 24},
    {"OneHot", 9},
    {"EyeLike", 9},
    {"ReverseSequence", 10},
    {"CenterCropPad", 18},
    {"Compress", 9},
    {"NonZero", 9},
    {"Unique", 11},
    {"NegativeLogLikelihoodLoss", 12},
    {"SoftmaxCrossEntropyLoss", 12},
    {"CumProd", 26},
    {"Sinh", 9},
    {"Cosh", 9},
    {"Asinh", 9},
    {"Acosh", 9},
    {"Atanh", 9},
    {"Shrink", 9},
    {"Celu", 12},
    {"Mish", 18},
    {"Swish", 24},
    {"MeanVarianceNormalization", 9},
    {"GroupNormalization", 18},
    {"Scan", 8},
};

static int introduced_at(const char *op)
{
    for (size_t i = 0; i < sizeof introduced / sizeof introduced[0]; i++)
        if (strcmp(introduced[i].op, op) == 0)
            return introduced[i].since;
    return 6;
}

static eng_op_id_t op_id(const char *op)
{
    const eng_op_def_t *d = eng_op_find(op);
    cr_assert(d, "op %s is not in list.h", op);
    return d->id;
}

Test(engine_op_schema, every_op_has_a_schema_at_every_opset_where_onnx_defines_it)
{
    for (int id = 0; id < ENG_OP_COUNT; id++) {
        const char *op = eng_op_type((eng_op_id_t)id);
        int since = introduced_at(op);
        if (eng_op_is_internal((eng_op_id_t)id)) {
            cr_expect_null(eng_op_schema_first((eng_op_id_t)id),
                           "%s is engine-internal, yet has an ONNX schema", op);
            continue;
        }
        for (int opset = 6; opset <= 28; opset++) {
            const eng_op_schema_t *s = eng_op_schema_find((eng_op_id_t)id, opset);
            if (opset < since) {
                cr_expect_null(s, "%s has a schema at opset %d, before ONNX added it at %d", op,
                               opset, since);
                continue;
            }
            cr_expect(s, "%s has no schema at opset %d", op, opset);
            if (s)
                cr_expect_leq(s->since_version, opset, "%s at opset %d", op, opset);
        }
        const eng_op_schema_t *first = eng_op_schema_first((eng_op_id_t)id);
        cr_expect(since == 6 ? first->since_version <= 6 : first->since_version == since,
                  "%s: oldest version %d, ONNX added it at %d", op, first->since_version, since);
    }
}

Test(engine_op_schema, lookup_takes_the_version_in_force)
{
    const struct {
        const char *op;
        int opset, since;
    } cases[] = {
        {"Split", 6, 2},      {"Split", 12, 11},      {"Split", 13, 13},  {"Split", 17, 13},
        {"Split", 18, 18},    {"Split", 28, 18},      {"ReduceSum", 12, 11}, {"ReduceSum", 13, 13},
        {"Softmax", 12, 11},  {"Softmax", 13, 13},    {"Clip", 10, 6},    {"Clip", 11, 11},
        {"Gelu", 20, 20},     {"Gelu", 28, 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const eng_op_schema_t *s = eng_op_schema_find(op_id(cases[i].op), cases[i].opset);
        cr_assert(s, "%s at opset %d", cases[i].op, cases[i].opset);
        cr_expect_eq(s->since_version, cases[i].since, "%s at opset %d: version %d, want %d",
                     cases[i].op, cases[i].opset, s->since_version, cases[i].since);
    }
    /* Past what the table's onnx knew: its newest version. */
    const eng_op_schema_t *newest = eng_op_schema_find(op_id("Split"), 28);
    cr_expect_eq(eng_op_schema_find(op_id("Split"), eng_op_schema_opset_known() + 5), newest);
    cr_expect_null(eng_op_schema_find(op_id("Gelu"), 19));
    cr_expect_geq(eng_op_schema_opset_known(), 17);
    int major, minor;
    cr_expect_eq(sscanf(eng_op_schema_onnx_version(), "%d.%d", &major, &minor), 2, "%s",
                 eng_op_schema_onnx_version());
}

/* What ONNX states for a few versions whose arity or attributes changed. */
Test(engine_op_schema, versions_carry_onnx_arity_and_attributes)
{
    const eng_op_schema_t *s = eng_op_schema_find(op_id("Split"), 11);
    cr_expect_eq(s->min_inputs, 1);
    cr_expect_eq(s->max_inputs, 1);
    cr_expect_eq(s->max_outputs, ENG_OP_ARITY_MAX);
    cr_expect_eq(eng_op_schema_attr(s, "split")->type, ENG_ATTR_INTS);
    s = eng_op_schema_find(op_id("Split"), 13);
    cr_expect_eq(s->max_inputs, 2);
    cr_expect_null(eng_op_schema_attr(s, "split"));
    cr_expect_eq(eng_op_schema_find(op_id("Split"), 18)->n_attrs, 2, "axis, num_outputs");

    s = eng_op_schema_find(op_id("Cast"), 13);
    const eng_op_attr_spec_t *to = eng_op_schema_attr(s, "to");
    cr_assert(to);
    cr_expect_eq(to->type, ENG_ATTR_INT);
    cr_expect(to->required);

    s = eng_op_schema_find(op_id("Gemm"), 9);
    cr_expect_eq(s->min_inputs, 3, "C required before Gemm-11");
    s = eng_op_schema_find(op_id("Gemm"), 11);
    cr_expect_eq(s->min_inputs, 2);
    cr_expect_eq(s->max_inputs, 3);
    cr_expect_eq(eng_op_schema_attr(s, "alpha")->type, ENG_ATTR_FLOAT);
    cr_expect(!eng_op_schema_attr(s, "alpha")->required);
    cr_expect_eq(eng_op_schema_attr(eng_op_schema_find(op_id("Pad"), 6), "mode")->type,
                 ENG_ATTR_STRING);
    cr_expect_eq(eng_op_schema_attr(eng_op_schema_find(op_id("ConstantOfShape"), 9), "value")
                     ->type, ENG_ATTR_TENSOR);
}

Test(engine_op_schema, slots_say_which_values_are_required)
{
    bool req;
    const eng_op_schema_t *gemm = eng_op_schema_find(op_id("Gemm"), 13);
    cr_expect_str_eq(eng_op_schema_input(gemm, 0, &req)->name, "A");
    cr_expect(req);
    cr_expect_str_eq(eng_op_schema_input(gemm, 1, &req)->name, "B");
    cr_expect(req);
    cr_expect_str_eq(eng_op_schema_input(gemm, 2, &req)->name, "C");
    cr_expect(!req, "C is optional");
    cr_expect_null(eng_op_schema_input(gemm, 3, &req));
    cr_expect(!req);
    cr_expect_str_eq(eng_op_schema_output(gemm, 0, &req)->name, "Y");
    cr_expect(req);

    const eng_op_schema_t *concat = eng_op_schema_find(op_id("Concat"), 13);
    const eng_op_param_t *p0 = eng_op_schema_input(concat, 0, &req);
    cr_expect(req, "a variadic's first min_arity slots are required");
    cr_expect_eq(p0->option, ENG_OP_PARAM_VARIADIC);
    cr_expect_eq(p0->min_arity, 1);
    cr_expect_eq(eng_op_schema_input(concat, 7, &req), p0, "later slots: the variadic one");
    cr_expect(!req);

    const eng_op_schema_t *drop = eng_op_schema_find(op_id("Dropout"), 13);
    cr_expect_str_eq(eng_op_schema_output(drop, 1, &req)->name, "mask");
    cr_expect(!req);
}

/* Every version: counts consistent with its parameters, a variadic only
 * last, attributes sorted and of a known type; versions oldest first. */
Test(engine_op_schema, table_is_well_formed)
{
    for (int id = 0; id < ENG_OP_COUNT; id++) {
        const char *op = eng_op_type((eng_op_id_t)id);
        int prev = 0;
        for (int opset = 1; opset <= 28; opset++) {
            const eng_op_schema_t *s = eng_op_schema_find((eng_op_id_t)id, opset);
            if (!s || s->since_version == prev)
                continue;
            cr_expect_gt(s->since_version, prev, "%s", op);
            prev = s->since_version;
            const struct {
                const eng_op_param_t *p;
                int n, lo, hi;
            } sides[] = {{s->in_params, s->n_in_params, s->min_inputs, s->max_inputs},
                         {s->out_params, s->n_out_params, s->min_outputs, s->max_outputs}};
            for (int k = 0; k < 2; k++) {
                bool variadic = sides[k].n && sides[k].p[sides[k].n - 1].option ==
                                                  ENG_OP_PARAM_VARIADIC;
                cr_expect_leq(sides[k].lo, sides[k].hi, "%s-%d", op, s->since_version);
                cr_expect_eq(sides[k].hi, variadic ? ENG_OP_ARITY_MAX : sides[k].n, "%s-%d", op,
                             s->since_version);
                for (int j = 0; j + 1 < sides[k].n; j++)
                    cr_expect_neq(sides[k].p[j].option, ENG_OP_PARAM_VARIADIC, "%s-%d", op,
                                  s->since_version);
            }
            /* The recurrent ops are the exception: ONNX makes each of their
             * outputs optional (Y, Y_h, Y_c alike). */
            bool all_optional = strcmp(op, "RNN") == 0 || strcmp(op, "GRU") == 0 ||
                                strcmp(op, "LSTM") == 0;
            cr_expect_geq(s->min_outputs, all_optional ? 0 : 1,
                          "%s-%d: every op of list.h gives an output", op, s->since_version);
            for (int a = 0; a < s->n_attrs; a++) {
                cr_expect(s->attrs[a].type >= ENG_ATTR_FLOAT &&
                              s->attrs[a].type <= ENG_ATTR_TYPE_PROTOS, "%s-%d %s", op,
                          s->since_version, s->attrs[a].name);
                if (a > 0)
                    cr_expect_lt(strcmp(s->attrs[a - 1].name, s->attrs[a].name), 0, "%s-%d", op,
                                 s->since_version);
            }
        }
    }
}

/* ---- eng_op_ctx_complete ----------------------------------------------------------- */

Test(engine_op_schema, ctx_complete_sees_a_missing_required_value)
{
    eng_tensor_t a = {0}, b = {0}, y = {0};
    const eng_node_t gemm = {.name = "g", .op_type = "Gemm", .domain = "", .op = &eng_op_Gemm};
    const eng_tensor_t *ins[3] = {&a, &b, NULL};
    eng_tensor_t *outs[1] = {&y};
    eng_op_ctx_t c = {.node = &gemm, .opset = 13, .n_inputs = 3, .inputs = ins, .n_outputs = 1,
                      .outputs = outs};
    cr_expect(eng_op_ctx_complete(&c), "C is optional");
    ins[1] = NULL;
    cr_expect(!eng_op_ctx_complete(&c), "B is required");
    ins[1] = &b;
    outs[0] = NULL;
    cr_expect(!eng_op_ctx_complete(&c), "Y is required");
    outs[0] = &y;
    c.n_inputs = 1;
    cr_expect(!eng_op_ctx_complete(&c), "too few inputs");
    const eng_tensor_t *four[4] = {&a, &b, &b, &b};
    c.inputs = four;
    c.n_inputs = 4;
    cr_expect(!eng_op_ctx_complete(&c), "too many inputs");
    c.inputs = ins;
    c.n_inputs = 3;
    c.opset = 9;
    cr_expect(!eng_op_ctx_complete(&c), "C is required before Gemm-11");

    /* fuse.c writes Gelu at any opset: held to Gelu's oldest version. */
    const eng_node_t gelu = {.name = "ge", .op_type = "Gelu", .domain = "", .op = &eng_op_Gelu};
    eng_op_ctx_t g = {.node = &gelu, .opset = 13, .n_inputs = 1, .inputs = ins, .n_outputs = 1,
                      .outputs = outs};
    cr_expect(eng_op_ctx_complete(&g));
    ins[0] = NULL;
    cr_expect(!eng_op_ctx_complete(&g));
}
