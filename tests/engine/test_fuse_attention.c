/* test_fuse_attention.c -- tests of engine/fuse_attention.c: which exported
 * attention chains become one Attention node (built in memory in the forms
 * the exporters write, and the zoo's real exports), which are left alone,
 * and that the fused graph computes what the chain computes on the CPU. */
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

/* The test shapes: batch (symbolic "b", run at AB), heads, sequence (odd),
 * head size. */
#define AB 2
#define AH 2
#define AS 5
#define AD 8

typedef enum k_form {
    K_TRANSPOSE, /* Transpose(K, perm 0,1,3,2): TorchScript-like, 4-D */
    K_DYNAMO,    /* Reshape(Transpose(Reshape(K, [-1, S, D]), (0,2,1)), [.., D, S]) */
    K_GIVEN,     /* Kt is a graph input [B, H, D, S]: read through trans_b */
} k_form_t;

typedef enum scale_form {
    SCALE_SQRT,  /* Mul(Q, c), Mul(Kt, c): the exporters' */
    SCALE_DIV,   /* Div(S, sqrt(D)) */
    SCALE_NONE,
} scale_form_t;

typedef struct attn_case {
    k_form_t k;
    scale_form_t scale;
    bool mask;          /* Add(S, M), M [b, 1, 1, S] a graph input */
    bool guard;         /* Where(IsNaN(P), 0, P) */
    bool scores_output; /* the scores are a graph output too */
    int64_t axis;       /* Softmax's axis */
    int64_t mask_last;  /* M's declared last dim (AS, or 1 for a mismatch) */
    int64_t mask_run;   /* M's last dim when run (0: AS) */
} attn_case_t;

static const char *const SYM_B[4] = {"b", NULL, NULL, NULL};

/* When set, intermediate values are declared rank 4 with every dim
 * unknown, and the dynamo K chain's 3-D values not at all: what the dynamo
 * exporter writes for full-size models (bench/RESULTS.md, 2026-11-27). */
static bool declare_unknown;

/* Declares value `name` as float [b, d1, d2, d3]. */
static void declare(mb_t *b, const char *name, int64_t d1, int64_t d2, int64_t d3)
{
    const int64_t dims[4] = {-1, d1, d2, d3}, unknown[4] = {-1, -1, -1, -1};
    b->infos[b->graph.n_value_info++] =
        mb_vi(b, name, F, 4, declare_unknown ? unknown : dims, declare_unknown ? NULL : SYM_B);
}

static void add_scalar(mb_t *b, const char *name, float v)
{
    Onnx__TensorProto *t = mb_tensor(b, name, F, 0, NULL);
    mb_floats(b, t, &v, 1);
    mb_initializer(b, t);
}

static void add_shape(mb_t *b, const char *name, int n, const int64_t *v)
{
    const int64_t dims[1] = {n};
    Onnx__TensorProto *t = mb_tensor(b, name, I64, 1, dims);
    mb_int64s(b, t, v, (size_t)n);
    mb_initializer(b, t);
}

/* Inputs Q, K (or Kt), V [b, AH, AS, AD], M [b, 1, 1, AS] when masked;
 * output Y [b, AH, AS, AD] (and S when scores_output). */
static void attn_build(mb_t *b, const attn_case_t *ac)
{
    mb_init(b, 8, 20);
    const int64_t qd[4] = {-1, AH, AS, AD}, ktd[4] = {-1, AH, AD, AS};
    const int64_t md[4] = {-1, 1, 1, ac->mask_last};
    mb_input(b, "Q", F, 4, qd, SYM_B);
    mb_input(b, "K", F, 4, ac->k == K_GIVEN ? ktd : qd, SYM_B);
    mb_input(b, "V", F, 4, qd, SYM_B);
    if (ac->mask)
        mb_input(b, "M", F, 4, md, SYM_B);
    const char *kt = "K";
    if (ac->k == K_TRANSPOSE) {
        Onnx__NodeProto *t = mb_node(b, "Transpose", "kt", "K", "Kt");
        mb_attr_ints(b, t, "perm", (const int64_t[]){0, 1, 3, 2}, 4);
        kt = "Kt";
        declare(b, "Kt", AH, AD, AS);
    } else if (ac->k == K_DYNAMO) {
        add_shape(b, "s1", 3, (const int64_t[]){-1, AS, AD});
        add_shape(b, "s2", 4, (const int64_t[]){AB, AH, AD, AS});
        mb_node(b, "Reshape", "r1", "K,s1", "K3");
        Onnx__NodeProto *t = mb_node(b, "Transpose", "t3", "K3", "K3t");
        mb_attr_ints(b, t, "perm", (const int64_t[]){0, 2, 1}, 3);
        mb_node(b, "Reshape", "r2", "K3t,s2", "Kt");
        const int64_t d3[3] = {AB * AH, AS, AD}, d3t[3] = {AB * AH, AD, AS};
        if (!declare_unknown) {
            b->infos[b->graph.n_value_info++] = mb_vi(b, "K3", F, 3, d3, NULL);
            b->infos[b->graph.n_value_info++] = mb_vi(b, "K3t", F, 3, d3t, NULL);
        }
        declare(b, "Kt", AH, AD, AS);
        kt = "Kt";
    }
    const char *q = "Q", *s = "S";
    if (ac->scale == SCALE_SQRT) {
        add_scalar(b, "c", 0.59460354f); /* 1 / sqrt(sqrt(AD)) */
        mb_node(b, "Mul", "qs", "Q,c", "Qs");
        mb_node(b, "Mul", "ks", ac->k == K_GIVEN ? "c,K" : "c,Kt", "Kts");
        declare(b, "Qs", AH, AS, AD);
        declare(b, "Kts", AH, AD, AS);
        q = "Qs";
        kt = "Kts";
    }
    char in[64];
    snprintf(in, sizeof in, "%s,%s", q, kt);
    mb_node(b, "MatMul", "qk", in, ac->scale == SCALE_DIV ? "S0" : "S");
    if (ac->scale == SCALE_DIV) {
        add_scalar(b, "d", 2.828427125f);
        mb_node(b, "Div", "div", "S0,d", "S");
        declare(b, "S0", AH, AS, AS);
    }
    declare(b, "S", AH, AS, AS);
    if (ac->mask) {
        mb_node(b, "Add", "add", "M,S", "X");
        declare(b, "X", AH, AS, AS);
        s = "X";
    }
    Onnx__NodeProto *sm = mb_node(b, "Softmax", "softmax", s, "P");
    mb_attr_i(b, sm, "axis", ac->axis);
    declare(b, "P", AH, AS, AS);
    const char *p = "P";
    if (ac->guard) {
        add_scalar(b, "zero", 0.0f);
        mb_node(b, "IsNaN", "isnan", "P", "N");
        mb_node(b, "Where", "where", "N,zero,P", "P2");
        declare(b, "P2", AH, AS, AS);
        p = "P2";
    }
    snprintf(in, sizeof in, "%s,V", p);
    mb_node(b, "MatMul", "pv", in, "Y");
    mb_output(b, "Y", F, 4, qd);
    if (ac->scores_output)
        mb_output(b, "S", F, 4, (const int64_t[]){AB, AH, AS, AS});
}

/* Loads the case's graph, folds it, when `fuse` fuses attention, and
 * lowers it to `low` (ENG_DT_UNDEFINED: float32 as it is); returns the
 * graph and its done flags (caller frees both). */
static eng_graph_t *attn_load_low(mb_t *b, bool fuse, eng_dtype_t low, bool **done)
{
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    *done = calloc(g->n_nodes + 1, sizeof **done);
    cr_assert(*done);
    cr_assert_eq(eng_fold_constants(g, NULL, *done), 0, "fold: %s", fs_errmsg());
    if (fuse)
        cr_assert_eq(eng_fuse_attention(g, *done), 0, "fuse: %s", fs_errmsg());
    if (low != ENG_DT_UNDEFINED)
        cr_assert_eq(eng_lower_precision(g, low, NULL, done), 0, "lower: %s", fs_errmsg());
    return g;
}

static eng_graph_t *attn_load(mb_t *b, bool fuse, bool **done)
{
    return attn_load_low(b, fuse, ENG_DT_UNDEFINED, done);
}

/* The live Attention nodes of g; checks each writes Y and that every other
 * live node is a graph-input-free leftover only when expected. */
static int attention_count(const eng_graph_t *g, const bool *done, bool *k_t)
{
    int n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *node = &g->nodes[i];
        if (done[i] || strcmp(node->op_type, "Attention") != 0)
            continue;
        n++;
        cr_expect_eq(g->values[node->outputs[0]].producer, (int)i);
        if (k_t)
            *k_t = node->trans_b;
    }
    return n;
}

static int attn_fused_count(const attn_case_t *ac, bool *k_t, int *live)
{
    mb_t b;
    attn_build(&b, ac);
    bool *done;
    eng_graph_t *g = attn_load(&b, true, &done);
    int n = attention_count(g, done, k_t);
    if (live) {
        *live = 0;
        for (size_t i = 0; i < g->n_nodes; i++)
            *live += !done[i];
    }
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    return n;
}

/* Input value i of tensor `which` (Q 0, K 1, V 2, M 3). */
static float input_at(int which, int64_t i)
{
    return (float)(((i * 37 + which * 11) % 97) / 97.0 - 0.5) * (which == 3 ? 0.0f : 2.0f);
}

/* Runs the case's graph, fused or not, on the CPU; Y into y. The mask
 * holds 0 except key AS - 1 of batch 0 (-3.4e38) and, when `masked_row`,
 * every key of batch 1 (-inf: fully masked rows). */
static void attn_run_low(const attn_case_t *ac, bool fuse, bool masked_row, eng_dtype_t low,
                         float *y)
{
    mb_t b;
    attn_build(&b, ac);
    bool *done;
    eng_graph_t *g = attn_load_low(&b, fuse, low, &done);
    eng_shape_t qs = {.rank = 4, .dims = {AB, AH, AS, AD}};
    eng_shape_t ks = ac->k == K_GIVEN ? (eng_shape_t){.rank = 4, .dims = {AB, AH, AD, AS}} : qs;
    eng_shape_t ms = {.rank = 4, .dims = {AB, 1, 1, ac->mask_run ? ac->mask_run : AS}};
    eng_tensor_t *t[4] = {NULL};
    const eng_shape_t *shapes[4] = {&qs, &ks, &qs, &ms};
    size_t n_in = ac->mask ? 4 : 3;
    eng_tensor_t ins[4];
    for (size_t k = 0; k < n_in; k++) {
        cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, shapes[k], &t[k]), 0);
        float *d = t[k]->data;
        for (int64_t i = 0; i < eng_shape_numel(shapes[k]); i++)
            d[i] = input_at((int)k, i);
        ins[k] = *t[k];
    }
    if (ac->mask && !ac->mask_run) {
        float *m = t[3]->data;
        m[AS - 1] = -3.4028235e38f;
        for (int64_t j = 0; masked_row && j < AS; j++)
            m[AS + j] = -INFINITY;
    }
    eng_tensor_t *out[2] = {NULL};
    model_fixture_t f;
    model_fixture_plan_run(&f, g, done, ins, n_in, out);
    memcpy(y, out[0]->data, AB * AH * AS * AD * sizeof *y);
    for (int o = 0; o < 2; o++)
        eng_tensor_free(out[o]);
    for (size_t k = 0; k < n_in; k++)
        eng_tensor_free(t[k]);
    model_fixture_close(&f);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
}

static void attn_run(const attn_case_t *ac, bool fuse, bool masked_row, float *y)
{
    attn_run_low(ac, fuse, masked_row, ENG_DT_UNDEFINED, y);
}

/* The case fused and unfused agree within float rounding. */
static void attn_expect_same(const attn_case_t *ac, bool masked_row)
{
    float fused[AB * AH * AS * AD], chain[AB * AH * AS * AD];
    attn_run(ac, true, masked_row, fused);
    attn_run(ac, false, masked_row, chain);
    for (int i = 0; i < AB * AH * AS * AD; i++)
        cr_expect(fabsf(fused[i] - chain[i]) <= 1e-5f * fabsf(chain[i]) + 1e-6f,
                  "Y[%d]: fused %.9g, chain %.9g", i, (double)fused[i], (double)chain[i]);
}

Test(fuse_attention, exporters_forms_become_one_attention_node_with_the_chains_values)
{
    for (int k = K_TRANSPOSE; k <= K_GIVEN; k++)
        for (int s = SCALE_SQRT; s <= SCALE_NONE; s++)
            for (int m = 0; m < 4; m++) {
                attn_case_t ac = {.k = k, .scale = s, .mask = m & 1, .guard = m & 2, .axis = -1,
                                  .mask_last = AS};
                bool k_t = false;
                int live = 0;
                cr_expect_eq(attn_fused_count(&ac, &k_t, &live), 1, "k %d scale %d mask %d", k,
                             s, m);
                /* Only the Attention node is left (K given: nothing to drop). */
                cr_expect_eq(live, 1, "k %d scale %d mask %d: %d live nodes", k, s, m, live);
                cr_expect_eq(k_t, k == K_GIVEN, "k %d: trans_b %d", k, k_t);
                attn_expect_same(&ac, false);
            }
}

Test(fuse_attention, unknown_declared_dims_fuse_with_the_op_checking_at_plan_time)
{
    /* The full-size dynamo form: Q, K, V and the mask declared, K^T, the
     * scores and the K chain's values not (rank 4, dims unknown). */
    declare_unknown = true;
    attn_case_t ac = {.k = K_DYNAMO, .scale = SCALE_SQRT, .mask = true, .guard = true,
                      .axis = -1, .mask_last = AS};
    mb_t b;
    attn_build(&b, &ac);
    bool *done;
    eng_graph_t *g = attn_load(&b, true, &done);
    int attn = -1, live = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        live += !done[i];
        if (!done[i] && strcmp(g->nodes[i].op_type, "Attention") == 0)
            attn = (int)i;
    }
    cr_assert_geq(attn, 0, "the chain fused");
    cr_expect(g->nodes[attn].attn_check, "left to the plan's check");
    cr_expect(g->nodes[attn].trans_b, "K^T read as it is: its chain is not proven a transpose");
    cr_expect_eq(live, 4, "the Attention node and the K chain's three");
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    attn_expect_same(&ac, false);
    attn_expect_same(&ac, true);

    /* A declared mask whose keys dim is unknown, run with one key: the Add
     * broadcast it over the keys, the op would mask keys past it; refused. */
    ac.mask_last = -1;
    ac.mask_run = 1;
    attn_build(&b, &ac);
    g = attn_load(&b, true, &done);
    cr_expect_eq(attention_count(g, done, NULL), 1);
    eng_shape_t qs = {.rank = 4, .dims = {AB, AH, AS, AD}}, ms = {.rank = 4, .dims = {AB, 1, 1, 1}};
    eng_tensor_t *t[4] = {NULL};
    eng_tensor_t ins[4];
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, k == 3 ? &ms : &qs, &t[k]), 0);
        memset(t[k]->data, 0, eng_tensor_bytes(t[k]));
        ins[k] = *t[k];
    }
    model_fixture_t f;
    eng_plan_t *p = NULL;
    cr_expect_eq(model_fixture_plan(&f, g, done, ins, 4, &p), FS_EINVAL, "refused at plan time");
    cr_expect(strstr(fs_errmsg(), "fused from MatMul-Softmax-MatMul"), "%s", fs_errmsg());
    eng_plan_destroy(p);
    for (int k = 0; k < 4; k++)
        eng_tensor_free(t[k]);
    model_fixture_close(&f);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    declare_unknown = false;
}

Test(fuse_attention, fully_masked_rows_are_zero_as_the_guarded_chain_gives)
{
    attn_case_t ac = {.k = K_DYNAMO, .scale = SCALE_SQRT, .mask = true, .guard = true,
                      .axis = -1, .mask_last = AS};
    attn_expect_same(&ac, true);
    float y[AB * AH * AS * AD];
    attn_run(&ac, true, true, y);
    for (int i = AH * AS * AD; i < AB * AH * AS * AD; i++)
        cr_expect_eq(y[i], 0.0f);
}

Test(fuse_attention, softmax_on_the_last_axis_as_3_fuses_other_axes_do_not)
{
    attn_case_t ac = {.k = K_TRANSPOSE, .scale = SCALE_SQRT, .mask = true, .guard = true,
                      .axis = 3, .mask_last = AS};
    cr_expect_eq(attn_fused_count(&ac, NULL, NULL), 1);
    ac.axis = 2;
    cr_expect_eq(attn_fused_count(&ac, NULL, NULL), 0);
    attn_expect_same(&ac, false);
}

Test(fuse_attention, skipped_when_the_scores_have_another_reader)
{
    attn_case_t ac = {.k = K_DYNAMO, .scale = SCALE_SQRT, .mask = true, .guard = true,
                      .axis = -1, .mask_last = AS, .scores_output = true};
    cr_expect_eq(attn_fused_count(&ac, NULL, NULL), 0);
}

Test(fuse_attention, skipped_when_the_mask_would_broadcast_over_the_keys)
{
    attn_case_t ac = {.k = K_TRANSPOSE, .scale = SCALE_NONE, .mask = true, .axis = -1,
                      .mask_last = 1};
    cr_expect_eq(attn_fused_count(&ac, NULL, NULL), 0);
}

/* The zoo's dynamo exports (tests/zoo; run from the repository root): each
 * layer's attention becomes one node. */
static int zoo_fused(const char *name, int *softmax_left)
{
    bool *done;
    eng_graph_t *g = model_fixture_zoo_graph(name, &done);
    cr_assert_eq(eng_fuse_attention(g, done), 0, "fuse: %s", fs_errmsg());
    int n = attention_count(g, done, NULL);
    *softmax_left = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        *softmax_left += !done[i] && strcmp(g->nodes[i].op_type, "Softmax") == 0;
    free(done);
    eng_graph_destroy(g);
    return n;
}

Test(fuse_attention, zoo_dynamo_exports_fuse_every_layer)
{
    static const char *const models[] = {"bert_dynamo20", "bert_dynamo18", "distilbert_dynamo20",
                                         "gpt2_dynamo20", "vit_dynamo20", "roberta_dynamo20",
                                         "t5_encoder_dynamo20", "llama_dynamo20"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        int left = -1;
        cr_expect_eq(zoo_fused(models[i], &left), 2, "%s", models[i]);
        cr_expect_eq(left, 0, "%s: %d Softmax left", models[i], left);
    }
}

/* Lowered to fp16 or bf16 (engine/lowp.c: the mask's -3.4e38 becomes the
 * edge Cast's -inf or saturates), the fused graph computes what the
 * lowered chain computes, fully masked rows included (0 on both sides):
 * within two roundings of the low dtype (the chain rounds the scores and
 * P, the op only Y). */
Test(fuse_attention, lowered_to_half_the_fused_graph_matches_the_lowered_chain)
{
    static const eng_dtype_t lows[2] = {ENG_DT_FLOAT16, ENG_DT_BFLOAT16};
    attn_case_t ac = {.k = K_DYNAMO, .scale = SCALE_SQRT, .mask = true, .guard = true,
                      .axis = -1, .mask_last = AS};
    for (int k = 0; k < 2; k++) {
        float fused[AB * AH * AS * AD], chain[AB * AH * AS * AD];
        attn_run_low(&ac, true, true, lows[k], fused);
        attn_run_low(&ac, false, true, lows[k], chain);
        const float tol = lows[k] == ENG_DT_FLOAT16 ? 4e-3f : 3e-2f;
        for (int i = 0; i < AB * AH * AS * AD; i++) {
            cr_expect(fabsf(fused[i] - chain[i]) <= tol, "%s Y[%d]: fused %.9g, chain %.9g",
                      eng_dtype_name(lows[k]), i, (double)fused[i], (double)chain[i]);
            if (i >= AH * AS * AD)
                cr_expect_eq(fused[i], 0.0f, "%s Y[%d] of a fully masked row",
                             eng_dtype_name(lows[k]), i);
        }
    }
}
