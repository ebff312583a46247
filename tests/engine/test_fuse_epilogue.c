/* test_fuse_epilogue.c -- tests of engine/fuse_epilogue.c: which GEMM +
 * bias Add + Relu/Gelu chains fuse into one node (through the graph, after
 * the load-time passes model.c runs before it), that the fused model's
 * outputs are the unfused model's bits on the CPU, and that fp16 lowering
 * retypes the fused bias. */
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
/* X [EB, ES, EK] x W [EK, EN]: odd sizes, as the CUDA rows use. */
#define EB 2
#define ES 5
#define EK 77
#define EN 19

/* One test model: X -> MatMul (or Gemm on X [EB * ES, EK]) with W -> Add
 * of a bias -> an activation -> Y. */
typedef struct ep_case {
    const char *act;          /* NULL, "Relu", "Gelu", "GeluTanh" */
    bool no_bias;             /* no Add */
    bool bias_first;          /* Add(b, P) instead of Add(P, b) */
    bool bias_input;          /* the bias is a graph input: nothing to fuse (the reference) */
    int bias_rank;            /* 1: [EN] (0 means 1), 2: [1, EN], 4: [1, 1, 1, EN] */
    bool bias_rows;           /* the bias is [ES, EN]: not one row */
    bool extra_reader;        /* a Relu also reads the product (output R) */
    bool mid_output;          /* the product is also a graph output */
    bool w_input;             /* W is a graph input */
    bool gemm;                /* Gemm instead of MatMul */
    bool gemm_c;              /* the Gemm has its own C [EN] */
    bool trans_w;             /* W stored [EN, EK]: MatMul(X, Transpose(W)), Gemm transB=1 */
    /* A residual Add after the bias (and the activation, if any): Add(Q,
     * R) of a graph input R declared [EB, ES, EN] (residual 1), [1, ES,
     * EN] (2: broadcast, nothing to take) or with no shape (3). */
    int residual;
    bool residual_first;      /* Add(R, Q) */
    /* A Reshape of the (biased) product before the activation, to Y's
     * other rank ([EB * ES, EN] after a MatMul, [EB, ES, EN] after a
     * Gemm); with reshape_reader the reshaped value has a second reader
     * (output R2), which keeps the activation out. */
    bool reshape, reshape_reader;
} ep_case_t;

static float w_at(int64_t i)
{
    return (float)(0.2 * sin(0.37 * (double)i + 0.1));
}

static float bias_at(int64_t i)
{
    return 0.05f * (float)(i % 11) - 0.3f;
}

static void add_const(mb_t *b, const char *name, int rank, const int64_t *dims, const float *v,
                      size_t n)
{
    Onnx__TensorProto *t = mb_tensor(b, name, F, rank, dims);
    mb_floats(b, t, v, n);
    mb_initializer(b, t);
}

/* The bias's shape for case c (rank into *rank). */
static void bias_shape(const ep_case_t *c, int *rank, int64_t dims[4])
{
    if (c->bias_rows) {
        *rank = 2;
        dims[0] = ES, dims[1] = EN;
        return;
    }
    *rank = c->bias_rank ? c->bias_rank : 1;
    for (int d = 0; d < *rank; d++)
        dims[d] = d == *rank - 1 ? EN : 1;
}

static void ep_build(mb_t *b, const ep_case_t *c)
{
    mb_init(b, 10, 20);
    const int64_t xd[3] = {EB, ES, EK}, yd[3] = {EB, ES, EN};
    const int64_t xg[2] = {EB * ES, EK}, yg[2] = {EB * ES, EN};
    int rank = c->gemm ? 2 : 3;
    mb_input(b, "X", F, rank, c->gemm ? xg : xd, NULL);
    const int64_t wd[2] = {c->trans_w ? EN : EK, c->trans_w ? EK : EN};
    static float w[EK * EN];
    for (int64_t i = 0; i < EK * EN; i++)
        w[i] = w_at(i);
    if (c->w_input)
        mb_input(b, "W", F, 2, wd, NULL);
    else
        add_const(b, "W", 2, wd, w, EK * EN);
    int br;
    int64_t bd[4];
    bias_shape(c, &br, bd);
    if (!c->no_bias) {
        if (c->bias_input) {
            mb_input(b, "bias", F, br, bd, NULL);
        } else {
            float v[ES * EN];
            for (int64_t i = 0; i < ES * EN; i++)
                v[i] = bias_at(i);
            add_const(b, "bias", br, bd, v, c->bias_rows ? ES * EN : EN);
        }
    }
    if (c->gemm) {
        if (c->gemm_c) {
            float v[EN];
            for (int i = 0; i < EN; i++)
                v[i] = 0.5f - 0.01f * (float)i;
            add_const(b, "C", 1, (const int64_t[]){EN}, v, EN);
        }
        Onnx__NodeProto *g = mb_node(b, "Gemm", "gemm", c->gemm_c ? "X,W,C" : "X,W", "P");
        mb_attr_f(b, g, "alpha", 0.75f);
        if (c->trans_w)
            mb_attr_i(b, g, "transB", 1);
    } else if (c->trans_w) {
        mb_node(b, "Transpose", "t", "W", "WT");
        mb_node(b, "MatMul", "mm", "X,WT", "P");
    } else {
        mb_node(b, "MatMul", "mm", "X,W", "P");
    }
    const char *last = "P";
    if (!c->no_bias) {
        mb_node(b, "Add", "add", c->bias_first ? "bias,P" : "P,bias", "Q");
        last = "Q";
    }
    if (c->reshape) {
        const int64_t sd[1] = {c->gemm ? 3 : 2};
        const int64_t to[3] = {c->gemm ? EB : EB * ES, c->gemm ? ES : EN, EN};
        Onnx__TensorProto *t = mb_tensor(b, "shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, sd);
        mb_int64s(b, t, to, (size_t)sd[0]);
        mb_initializer(b, t);
        char ins[16];
        snprintf(ins, sizeof ins, "%s,shape", last);
        mb_node(b, "Reshape", "reshape", ins, "S");
        rank = c->gemm ? 3 : 2;
        last = "S";
        if (c->reshape_reader) {
            mb_node(b, "Neg", "neg", "S", "R2");
            mb_output(b, "R2", F, rank, c->gemm ? yd : yg);
        }
    }
    if (c->act) {
        bool gelu = strncmp(c->act, "Gelu", 4) == 0;
        Onnx__NodeProto *a = mb_node(b, gelu ? "Gelu" : c->act, "act", last, c->residual ? "A" : "Y");
        if (strcmp(c->act, "GeluTanh") == 0)
            mb_attr_s(b, a, "approximate", "tanh");
        last = "A";
    } else if (!c->residual) {
        mb_node(b, "Identity", "out", last, "Y");
    }
    if (c->residual) {
        const int64_t rb[3] = {1, ES, EN};
        mb_input(b, "R", F, c->residual == 3 ? -1 : 3, c->residual == 2 ? rb : yd, NULL);
        char ins[8];
        snprintf(ins, sizeof ins, c->residual_first ? "R,%s" : "%s,R", last);
        mb_node(b, "Add", "res", ins, "Y");
    }
    mb_output(b, "Y", F, rank, (rank == 2) ? yg : yd);
    if (c->extra_reader) {
        mb_node(b, "Relu", "relu", "P", "R");
        mb_output(b, "R", F, rank, c->gemm ? yg : yd);
    }
    if (c->mid_output)
        mb_output(b, "P", F, rank, c->gemm ? yg : yd);
}

/* What the fusion did to a case's graph. */
typedef struct ep_result {
    int fused;                /* GEMM nodes left with a bias or an activation */
    bool bias;                /* the GEMM took the bias (MatMul's flag, Gemm's C) */
    bool residual;            /* the MatMul took the residual as input 3 */
    int act;
    int n_done;               /* nodes done after the passes */
} ep_result_t;

/* Loads the case's graph and runs model.c's load-time passes up to and
 * including the epilogue fusion (lowered to `low` after, unless
 * ENG_DT_UNDEFINED); checks what it did. */
static ep_result_t ep_fuse(const ep_case_t *c, eng_dtype_t low)
{
    mb_t b;
    ep_build(&b, c);
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert(done);
    cr_assert_eq(eng_fuse_transpose_into_gemm(g, done), 0);
    cr_assert_eq(eng_fold_constants(g, NULL, done), 0, "fold: %s", fs_errmsg());
    cr_assert_eq(eng_fuse_gelu(g, done), 0);
    cr_assert_eq(eng_fuse_gemm_epilogue(g, done), 0, "%s", fs_errmsg());
    if (low != ENG_DT_UNDEFINED)
        cr_assert_eq(eng_lower_precision(g, low, NULL, &done), 0, "%s", fs_errmsg());
    ep_result_t r = {0};
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *n = &g->nodes[i];
        r.n_done += done[i];
        bool mm = strcmp(n->op_type, "MatMul") == 0, gm = strcmp(n->op_type, "Gemm") == 0;
        if (done[i] || (!mm && !gm))
            continue;
        bool took = mm ? n->bias : n->n_inputs > 2 && n->inputs[2] == graph_value(g, "bias");
        if (!took && n->act == ENG_ACT_NONE)
            continue;
        r.fused++;
        r.bias = took;
        r.act = n->act;
        r.residual = mm && n->residual;
        if (r.residual)
            cr_expect(n->n_inputs == 4 && n->inputs[3] == graph_value(g, "R"),
                      "the residual is input 3");
        /* The fused node writes the chain's last value. */
        int out = n->outputs[0];
        cr_expect_eq(g->values[out].producer, (int)i);
        cr_expect(strcmp(g->values[out].name, "Y") == 0 || strcmp(g->values[out].name, "Q") == 0 ||
                      strcmp(g->values[out].name, "A") == 0 ||
                      (c->reshape && strcmp(g->values[out].name, "P") == 0) ||
                      (low != ENG_DT_UNDEFINED && strncmp(g->values[out].name, "Y", 1) == 0),
                  "the fused node writes '%s'", g->values[out].name);
        if (took) {
            const eng_value_t *bv = &g->values[n->inputs[2]];
            cr_expect_eq(bv->constant.dtype, low != ENG_DT_UNDEFINED ? low : ENG_DT_FLOAT,
                         "the bias is %s", eng_dtype_name(bv->constant.dtype));
            if (gm)
                cr_expect_eq(eng_attr_f(n, "beta", 0.0f), 1.0f, "the Gemm adds its bias with beta 1");
        }
    }
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    return r;
}

/* Runs the case's model on a fixed X (and the bias / W inputs it takes);
 * Y into y (EB * ES * EN floats). */
static void ep_run(const ep_case_t *c, float *y)
{
    mb_t b;
    ep_build(&b, c);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    static float x[EB * ES * EK], w[EK * EN], bias[ES * EN], res[EB * ES * EN];
    for (int64_t i = 0; i < EB * ES * EK; i++)
        x[i] = (float)(2.5 * cos(0.11 * (double)i)); /* Relu and GELU see both signs */
    for (int64_t i = 0; i < EK * EN; i++)
        w[i] = w_at(i);
    for (int64_t i = 0; i < ES * EN; i++)
        bias[i] = bias_at(i);
    for (int64_t i = 0; i < EB * ES * EN; i++)
        res[i] = (float)(0.7 * sin(0.05 * (double)i) + 1e-3 * (double)i);
    eng_tensor_t in[4];
    size_t n_in = 0;
    in[n_in++] = c->gemm ? (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {2, {EB * ES, EK}}, .data = x}
                         : (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {3, {EB, ES, EK}}, .data = x};
    if (c->w_input)
        in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_FLOAT,
                                    .shape = {2, {c->trans_w ? EN : EK, c->trans_w ? EK : EN}},
                                    .data = w};
    if (c->bias_input && !c->no_bias) {
        int br;
        eng_tensor_t t = {.dtype = ENG_DT_FLOAT, .data = bias};
        bias_shape(c, &br, t.shape.dims);
        t.shape.rank = br;
        in[n_in++] = t;
    }
    if (c->residual)
        in[n_in++] = c->residual == 2
                         ? (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {3, {1, ES, EN}}, .data = res}
                         : (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {3, {EB, ES, EN}}, .data = res};
    eng_tensor_t *out[3] = {NULL};
    cr_assert_eq(eng_model_run(f.model, in, n_in, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(eng_shape_numel(&out[0]->shape), EB * ES * EN);
    memcpy(y, out[0]->data, EB * ES * EN * sizeof *y);
    for (int o = 0; o < 3; o++)
        eng_tensor_free(out[o]);
    model_fixture_close(&f);
    mb_free(&b);
}

/* The case fuses as `want` says, and its model's Y is bitwise the Y of
 * the same model with the bias (or, without one, W) fed as a graph
 * input, which nothing fuses. */
static void ep_expect(const ep_case_t *c, int fused, bool bias, int act)
{
    ep_result_t r = ep_fuse(c, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, fused, "fused GEMMs %d, want %d", r.fused, fused);
    cr_expect_eq(r.bias, bias);
    cr_expect_eq(r.act, act, "activation %d, want %d", r.act, act);
    ep_case_t ref = *c;
    if (c->no_bias)
        ref.w_input = true;
    else
        ref.bias_input = true;
    cr_assert_eq(ep_fuse(&ref, ENG_DT_UNDEFINED).fused, 0, "the reference fuses nothing");
    static float got[EB * ES * EN], want[EB * ES * EN];
    ep_run(c, got);
    ep_run(&ref, want);
    for (int i = 0; i < EB * ES * EN; i++)
        cr_expect(memcmp(&got[i], &want[i], sizeof got[i]) == 0, "Y[%d]: %.9g, unfused %.9g", i,
                  (double)got[i], (double)want[i]);
}

Test(fuse_epilogue, matmul_bias_relu_becomes_one_node_with_the_same_bits)
{
    ep_expect(&(ep_case_t){.act = "Relu"}, 1, true, ENG_ACT_RELU);
}

Test(fuse_epilogue, matmul_bias_first_in_the_add_fuses)
{
    ep_expect(&(ep_case_t){.bias_first = true}, 1, true, ENG_ACT_NONE);
}

Test(fuse_epilogue, matmul_bias_gelu_of_either_form_fuses)
{
    ep_expect(&(ep_case_t){.act = "Gelu"}, 1, true, ENG_ACT_GELU);
    ep_expect(&(ep_case_t){.act = "GeluTanh"}, 1, true, ENG_ACT_GELU_TANH);
}

Test(fuse_epilogue, matmul_then_relu_without_a_bias_takes_the_activation)
{
    ep_expect(&(ep_case_t){.act = "Relu", .no_bias = true}, 1, false, ENG_ACT_RELU);
}

Test(fuse_epilogue, a_bias_of_shape_1_n_fuses_and_one_that_would_add_a_dim_does_not)
{
    ep_expect(&(ep_case_t){.act = "Relu", .bias_rank = 2}, 1, true, ENG_ACT_RELU);
    /* [1, 1, 1, N] on a rank-3 product broadcasts Y to rank 4. */
    ep_result_t r = ep_fuse(&(ep_case_t){.act = "Relu", .bias_rank = 4}, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 0);
}

Test(fuse_epilogue, a_transposed_weight_keeps_trans_b_and_fuses)
{
    ep_expect(&(ep_case_t){.act = "Gelu", .trans_w = true}, 1, true, ENG_ACT_GELU);
}

Test(fuse_epilogue, gemm_takes_the_bias_as_c_with_beta_one)
{
    ep_expect(&(ep_case_t){.act = "Relu", .gemm = true}, 1, true, ENG_ACT_RELU);
    ep_expect(&(ep_case_t){.gemm = true, .trans_w = true}, 1, true, ENG_ACT_NONE);
}

Test(fuse_epilogue, gemm_with_its_own_c_takes_only_the_activation)
{
    ep_result_t r = ep_fuse(&(ep_case_t){.act = "Relu", .gemm = true, .gemm_c = true,
                                         .no_bias = true},
                            ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 1);
    cr_expect_eq(r.act, ENG_ACT_RELU);
    /* A second Add after a Gemm with C: neither the Add nor what follows. */
    r = ep_fuse(&(ep_case_t){.act = "Relu", .gemm = true, .gemm_c = true}, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 0);
}

/* GPT-2's dynamo export: Gemm (its bias as C), a Reshape to [B, S, 3072],
 * the tanh GELU. The activation moves into the GEMM and the Reshape writes
 * Y; the same with a MatMul's bias Add before the Reshape. */
Test(fuse_epilogue, an_activation_after_a_reshape_of_the_product_fuses)
{
    ep_result_t r = ep_fuse(&(ep_case_t){.act = "GeluTanh", .gemm = true, .gemm_c = true,
                                         .no_bias = true, .reshape = true},
                            ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 1);
    cr_expect_eq(r.act, ENG_ACT_GELU_TANH);
    ep_expect(&(ep_case_t){.act = "Relu", .reshape = true}, 1, true, ENG_ACT_RELU);
    ep_expect(&(ep_case_t){.act = "Gelu", .no_bias = true, .reshape = true}, 1, false,
              ENG_ACT_GELU);
    /* A reshaped value with another reader keeps its activation apart. */
    r = ep_fuse(&(ep_case_t){.act = "Relu", .reshape = true, .reshape_reader = true},
                            ENG_DT_UNDEFINED);
    cr_expect_eq(r.act, ENG_ACT_NONE);
}

Test(fuse_epilogue, a_bias_that_is_not_one_row_is_left_alone)
{
    ep_result_t r = ep_fuse(&(ep_case_t){.act = "Relu", .bias_rows = true}, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 0);
    r = ep_fuse(&(ep_case_t){.act = "Relu", .bias_input = true}, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 0);
}

Test(fuse_epilogue, a_product_with_another_reader_or_a_graph_output_is_left_alone)
{
    cr_expect_eq(ep_fuse(&(ep_case_t){.act = "Relu", .extra_reader = true}, ENG_DT_UNDEFINED).fused,
                 0);
    cr_expect_eq(ep_fuse(&(ep_case_t){.act = "Relu", .mid_output = true}, ENG_DT_UNDEFINED).fused,
                 0);
}

Test(fuse_epilogue, a_matmul_of_a_weight_that_is_an_input_is_left_alone)
{
    cr_expect_eq(ep_fuse(&(ep_case_t){.act = "Relu", .w_input = true}, ENG_DT_UNDEFINED).fused, 0);
}

/* The residual Add after the bias: taken as input 3 when R is declared with
 * the product's shape, with the unfused bits on the CPU. */
Test(fuse_epilogue, a_residual_add_after_the_bias_becomes_input_3_with_the_same_bits)
{
    ep_expect(&(ep_case_t){.residual = 1}, 1, true, ENG_ACT_NONE);
    ep_result_t r = ep_fuse(&(ep_case_t){.residual = 1}, ENG_DT_UNDEFINED);
    cr_expect(r.residual);
    r = ep_fuse(&(ep_case_t){.residual = 1, .residual_first = true}, ENG_DT_UNDEFINED);
    cr_expect(r.residual, "Add(R, Q) is the same residual");
    ep_expect(&(ep_case_t){.residual = 1, .residual_first = true}, 1, true, ENG_ACT_NONE);
}

Test(fuse_epilogue, a_residual_it_cannot_prove_or_after_an_activation_is_left_an_add)
{
    /* R [1, ES, EN] broadcast over the batch: the Add's Y is not the product's shape. */
    ep_result_t r = ep_fuse(&(ep_case_t){.residual = 2}, ENG_DT_UNDEFINED);
    cr_expect_eq(r.fused, 1);
    cr_expect(r.bias && !r.residual);
    ep_expect(&(ep_case_t){.residual = 2}, 1, true, ENG_ACT_NONE);
    /* No declared shape: nothing proves it. */
    r = ep_fuse(&(ep_case_t){.residual = 3}, ENG_DT_UNDEFINED);
    cr_expect(r.bias && !r.residual);
    /* cuBLASLt applies the activation after C: an Add after a Relu stays. */
    r = ep_fuse(&(ep_case_t){.residual = 1, .act = "Relu"}, ENG_DT_UNDEFINED);
    cr_expect(r.bias && !r.residual && r.act == ENG_ACT_RELU);
    ep_expect(&(ep_case_t){.residual = 1, .act = "Relu"}, 1, true, ENG_ACT_RELU);
    /* A Gemm keeps its C: no residual. */
    r = ep_fuse(&(ep_case_t){.residual = 1, .gemm = true}, ENG_DT_UNDEFINED);
    cr_expect(!r.residual);
}

Test(fuse_epilogue, fp16_lowering_retypes_the_fused_bias)
{
    ep_result_t r = ep_fuse(&(ep_case_t){.act = "Gelu"}, ENG_DT_FLOAT16);
    cr_expect_eq(r.fused, 1);
    cr_expect(r.bias);
    r = ep_fuse(&(ep_case_t){.act = "Relu", .gemm = true}, ENG_DT_BFLOAT16);
    cr_expect_eq(r.fused, 1);
    cr_expect(r.bias);
}
