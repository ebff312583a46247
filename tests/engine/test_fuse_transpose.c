/* test_fuse_transpose.c -- tests of engine/fuse.c's transposed GEMM
 * operands (test_fuse.c has its other fusions): a tied embedding, W read by
 * a Gather and, through Transpose(W), by the LM head's MatMul (or Gemm),
 * is held once -- which graphs are rewritten, that the model's owner holds
 * W's bytes once, and that the outputs are bitwise those of the same graph
 * fed W' (the fold's result) as an input, and near a double reference;
 * at fp16 (engine/lowp.c, after these passes) W is held once, at half size. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/half.h"
#include "engine/plan.h"
#include "model_fixture.h"
#include "onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define D ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define TV 300 /* vocab */
#define TH 64  /* hidden */
#define TS 5   /* tokens per row of h */
#define W_BYTES ((int64_t)TV * TH * (int64_t)sizeof(float))

/* One tied-embedding model: ids [TS] -> Gather(W) -> E (an output), and
 * h -> head(h, Transpose(W)) -> Y [rows, TV], W [TV, TH]. */
typedef struct tied_case {
    int h_rank;             /* 2: h [TS, TH]; 3: h [2, TS, TH] */
    bool gemm;              /* the head is a Gemm (h_rank 2) */
    bool second_on_t;       /* a second MatMul reads the Transpose (output Y2) */
    bool second_on_w;       /* a MatMul reads W untransposed: x [TS, TV] x W (output Y3) */
    bool live_reader;       /* an Add also reads the Transpose: T + z (output R) */
    bool t_input;           /* the reference: no Transpose, T = W' fed as an input */
    bool exporter_folded;   /* no Transpose: W' is an initializer of its own */
    bool twin_differs;      /* ... with one element changed */
    bool dbl;               /* W double and no Gather: h and Y through Casts */
} tied_case_t;

static double w_at(int64_t v, int64_t k)
{
    return 0.5 * sin(0.37 * (double)(v * TH + k) + 0.1);
}

static float h_at(int64_t i)
{
    return (float)((i * 37) % 101) / 101.0f - 0.5f;
}

static int64_t tied_rows(const tied_case_t *tc)
{
    return tc->h_rank == 3 ? 2 * TS : TS;
}

static void tied_build(mb_t *b, const tied_case_t *tc)
{
    mb_init(b, 8, 13);
    const int64_t hd3[3] = {2, TS, TH}, hd2[2] = {TS, TH}, ids_dims[1] = {TS};
    const int64_t *hd = tc->h_rank == 3 ? hd3 : hd2;
    if (!tc->dbl)
        mb_input(b, "ids", I64, 1, ids_dims, NULL);
    mb_input(b, "h", F, tc->h_rank, hd, NULL);
    if (tc->second_on_w)
        mb_input(b, "x", F, 2, (int64_t[]){TS, TV}, NULL);
    if (tc->t_input)
        mb_input(b, "T", F, 2, (int64_t[]){TH, TV}, NULL);
    if (tc->live_reader)
        mb_input(b, "z", F, 2, (int64_t[]){TH, TV}, NULL);
    float *w = mb_alloc(b, (size_t)(TV * TH) * sizeof *w);
    double *wd = mb_alloc(b, (size_t)(TV * TH) * sizeof *wd);
    for (int64_t v = 0; v < TV; v++)
        for (int64_t k = 0; k < TH; k++) {
            wd[v * TH + k] = w_at(v, k);
            w[v * TH + k] = (float)w_at(v, k);
        }
    Onnx__TensorProto *t = mb_tensor(b, "W", tc->dbl ? D : F, 2, (int64_t[]){TV, TH});
    mb_raw(b, t, tc->dbl ? (void *)wd : (void *)w, (size_t)(TV * TH) * (tc->dbl ? 8 : 4));
    mb_initializer(b, t);
    if (tc->exporter_folded) {
        float *wt = mb_alloc(b, (size_t)(TV * TH) * sizeof *wt);
        for (int64_t v = 0; v < TV; v++)
            for (int64_t k = 0; k < TH; k++)
                wt[k * TV + v] = w[v * TH + k];
        if (tc->twin_differs)
            wt[TV * TH / 2] = nextafterf(wt[TV * TH / 2], 1.0f);
        t = mb_tensor(b, "T", F, 2, (int64_t[]){TH, TV});
        mb_floats(b, t, wt, (size_t)(TV * TH));
        mb_initializer(b, t);
    } else if (!tc->t_input) {
        mb_attr_ints(b, mb_node(b, "Transpose", "tr", "W", "T"), "perm", (int64_t[]){1, 0}, 2);
    }
    const int64_t yd3[3] = {2, TS, TV}, yd2[2] = {TS, TV};
    const int64_t *yd = tc->h_rank == 3 ? yd3 : yd2;
    if (tc->dbl) {
        mb_attr_i(b, mb_node(b, "Cast", "to_d", "h", "hd"), "to", D);
        mb_node(b, "MatMul", "head", "hd,T", "Yd");
        mb_attr_i(b, mb_node(b, "Cast", "to_f", "Yd", "Y"), "to", F);
    } else {
        mb_node(b, tc->gemm ? "Gemm" : "MatMul", "head", "h,T", "Y");
    }
    mb_output(b, "Y", F, tc->h_rank, yd);
    if (!tc->dbl) {
        mb_node(b, "Gather", "embed", "W,ids", "E");
        mb_output(b, "E", F, 2, (int64_t[]){TS, TH});
    }
    if (tc->second_on_t) {
        mb_node(b, "MatMul", "head2", "h,T", "Y2");
        mb_output(b, "Y2", F, tc->h_rank, yd);
    }
    if (tc->second_on_w) {
        mb_node(b, "MatMul", "mm_w", "x,W", "Y3");
        mb_output(b, "Y3", F, 2, (int64_t[]){TS, TH});
    }
    if (tc->live_reader) {
        mb_node(b, "Add", "add", "T,z", "R");
        mb_output(b, "R", F, 2, (int64_t[]){TH, TV});
    }
}

/* Loads the case's graph and runs the model's load-time passes on it;
 * returns how many GEMM nodes read W transposed, and whether the pass
 * before folding dropped the Transpose (*dropped); checks the consumer
 * counts stay those of every node's inputs (a done node's included). */
static int tied_rewrites(const tied_case_t *tc, bool *dropped)
{
    mb_t b;
    tied_build(&b, tc);
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert(done);
    cr_assert_eq(eng_fuse_transpose_into_gemm(g, done), 0, "%s", fs_errmsg());
    *dropped = false;
    for (size_t i = 0; i < g->n_nodes; i++)
        *dropped = *dropped || (done[i] && strcmp(g->nodes[i].op_type, "Transpose") == 0);
    cr_assert_eq(eng_fold_constants(g, NULL, done), 0, "fold: %s", fs_errmsg());
    cr_assert_eq(eng_fuse_transposed_twins(g, done), 0, "%s", fs_errmsg());
    int w = graph_value(g, "W"), n = 0;
    int *consumers = calloc(g->n_values, sizeof *consumers);
    cr_assert(consumers);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node_t *node = &g->nodes[i];
        for (int k = 0; k < node->n_inputs; k++)
            consumers[node->inputs[k]]++;
        if (done[i] || node->n_inputs < 2 || node->inputs[1] != w)
            continue;
        bool mm = strcmp(node->op_type, "MatMul") == 0;
        if (mm ? node->trans_b : eng_attr_i(node, "transB", 0) == 1)
            n++;
        else
            cr_expect_str_eq(node->name, "mm_w", "only mm_w reads W untransposed");
    }
    for (size_t v = 0; v < g->n_values; v++)
        cr_expect_eq(g->values[v].n_consumers, consumers[v], "consumers of '%s'",
                     g->values[v].name);
    free(consumers);
    free(done);
    eng_graph_destroy(g);
    mb_free(&b);
    return n;
}

/* Runs the case as a model on the CPU: Y into y (tied_rows x TV floats),
 * the bytes its owner holds after the load into *owner_bytes, and the most
 * it held during the load into *owner_peak (may be NULL). Checks E, Y2, Y3
 * and R against W, Y and the inputs. */
static void tied_run_peak(const tied_case_t *tc, float *y, int64_t *owner_bytes,
                          int64_t *owner_peak)
{
    mb_t b;
    tied_build(&b, tc);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, eng_model_owner(f.model), &os), 0);
    *owner_bytes = os.allocated.current;
    if (owner_peak)
        *owner_peak = os.allocated.peak;
    const int64_t rows = tied_rows(tc);
    int64_t ids[TS] = {0, TV - 1, 7, 7, 123};
    float *h = malloc((size_t)(rows * TH) * sizeof *h), *x = malloc(TS * TV * sizeof *x);
    float *wt = malloc(TH * TV * sizeof *wt), *z = malloc(TH * TV * sizeof *z);
    cr_assert(h && x && wt && z);
    for (int64_t i = 0; i < rows * TH; i++)
        h[i] = h_at(i);
    for (int64_t i = 0; i < TS * TV; i++)
        x[i] = h_at(3 * i + 1);
    for (int64_t v = 0; v < TV; v++)
        for (int64_t k = 0; k < TH; k++) {
            wt[k * TV + v] = (float)w_at(v, k);
            z[k * TV + v] = h_at(v + k);
        }
    eng_tensor_t in[5];
    size_t n_in = 0;
    if (!tc->dbl)
        in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_INT64, .shape = {1, {TS}}, .data = ids};
    in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_FLOAT,
                                .shape = tc->h_rank == 3 ? (eng_shape_t){3, {2, TS, TH}}
                                                         : (eng_shape_t){2, {TS, TH}},
                                .data = h};
    if (tc->second_on_w)
        in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {2, {TS, TV}}, .data = x};
    if (tc->t_input)
        in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {2, {TH, TV}}, .data = wt};
    if (tc->live_reader)
        in[n_in++] = (eng_tensor_t){.dtype = ENG_DT_FLOAT, .shape = {2, {TH, TV}}, .data = z};
    eng_tensor_t *out[5] = {NULL};
    cr_assert_eq(eng_model_run(f.model, in, n_in, out), 0, "run: %s", fs_errmsg());
    cr_assert_eq(eng_shape_numel(&out[0]->shape), rows * TV);
    memcpy(y, out[0]->data, (size_t)(rows * TV) * sizeof *y);
    int o = 1;
    if (!tc->dbl) {
        const float *e = out[o++]->data;
        for (int64_t i = 0; i < TS * TH; i++)
            cr_expect_eq(e[i], (float)w_at(ids[i / TH], i % TH), "E[%lld]", (long long)i);
    }
    if (tc->second_on_t)
        cr_expect(memcmp(out[o++]->data, y, (size_t)(rows * TV) * sizeof *y) == 0,
                  "Y2 is Y's bits");
    if (tc->second_on_w) {
        const float *y3 = out[o++]->data;
        for (int64_t i = 0; i < TS; i++)
            for (int64_t k = 0; k < TH; k++) {
                double want = 0;
                for (int64_t v = 0; v < TV; v++)
                    want += (double)x[i * TV + v] * (double)(float)w_at(v, k);
                cr_expect(fabs(y3[i * TH + k] - want) <= 1e-5 * fabs(want) + 1e-5,
                          "Y3[%lld, %lld]: %.9g, want %.9g", (long long)i, (long long)k,
                          (double)y3[i * TH + k], want);
            }
    }
    if (tc->live_reader) {
        const float *r = out[o++]->data;
        for (int64_t i = 0; i < TH * TV; i++)
            cr_expect_eq(r[i], wt[i] + z[i], "R[%lld]", (long long)i);
    }
    for (int k = 0; k < 5; k++)
        eng_tensor_free(out[k]);
    free(h);
    free(x);
    free(wt);
    free(z);
    model_fixture_close(&f);
    mb_free(&b);
}

static void tied_run(const tied_case_t *tc, float *y, int64_t *owner_bytes)
{
    tied_run_peak(tc, y, owner_bytes, NULL);
}

/* Y of the case against sum_k h[i][k] W[v][k] in double, within 1e-5
 * relative plus 1e-5 (a double product: Y's float rounding only). */
static void tied_expect_reference(const tied_case_t *tc, const float *y)
{
    for (int64_t i = 0; i < tied_rows(tc); i++)
        for (int64_t v = 0; v < TV; v++) {
            double want = 0;
            for (int64_t k = 0; k < TH; k++) {
                double w = tc->dbl ? w_at(v, k) : (double)(float)w_at(v, k);
                want += (double)h_at(i * TH + k) * w;
            }
            double got = y[i * TV + v], tol = tc->dbl ? 1e-7 * fabs(want) + 1e-9 : 1e-5 * fabs(want) + 1e-5;
            cr_expect(fabs(got - want) <= tol,
                      "Y[%lld, %lld]: %.9g, want %.9g", (long long)i, (long long)v, got, want);
        }
}

/* The case rewritten (`rewrites` GEMMs read W transposed, the Transpose
 * dropped before folding), against the same graph fed W' as an input (what
 * the fold computed): Y bitwise equal (both GEMMs' fmaf order is op(B)'s,
 * whatever its layout; a double W has no float input to compare with),
 * near the reference, and the owner holding W once, during the load too
 * (no fold made W' beside it). */
static void tied_expect_held_once(const tied_case_t *tc, int rewrites)
{
    bool dropped;
    cr_expect_eq(tied_rewrites(tc, &dropped), rewrites);
    cr_expect(dropped);
    const size_t n = (size_t)(tied_rows(tc) * TV);
    float *y = malloc(n * sizeof *y), *y_ref = malloc(n * sizeof *y);
    cr_assert(y && y_ref);
    int64_t bytes, ref_bytes, peak;
    tied_run_peak(tc, y, &bytes, &peak);
    if (!tc->dbl) {
        tied_case_t ref = *tc;
        ref.t_input = true;
        tied_run(&ref, y_ref, &ref_bytes);
        cr_expect(memcmp(y, y_ref, n * sizeof *y) == 0, "Y differs from the folded graph's");
    }
    tied_expect_reference(tc, y);
    const int64_t w_bytes = W_BYTES * (tc->dbl ? 2 : 1);
    cr_expect(bytes >= w_bytes && bytes < 2 * w_bytes, "owner holds %lld bytes, W is %lld",
              (long long)bytes, (long long)w_bytes);
    cr_expect_lt(peak, 2 * w_bytes, "owner held %lld bytes at its peak, W is %lld",
                 (long long)peak, (long long)w_bytes);
    free(y);
    free(y_ref);
}

Test(fuse_transpose, tied_lm_head_on_rank_2_h_reads_the_embedding_once)
{
    tied_case_t tc = {.h_rank = 2};
    tied_expect_held_once(&tc, 1);
}

Test(fuse_transpose, tied_lm_head_on_rank_3_h_reads_the_embedding_once)
{
    tied_case_t tc = {.h_rank = 3};
    tied_expect_held_once(&tc, 1);
}

Test(fuse_transpose, two_matmuls_on_the_transpose_both_read_w)
{
    tied_case_t tc = {.h_rank = 3, .second_on_t = true};
    tied_expect_held_once(&tc, 2);
}

Test(fuse_transpose, a_matmul_reading_w_untransposed_is_left_alone)
{
    tied_case_t tc = {.h_rank = 2, .second_on_w = true};
    tied_expect_held_once(&tc, 1);
}

Test(fuse_transpose, gemm_head_flips_its_trans_b)
{
    tied_case_t tc = {.h_rank = 2, .gemm = true};
    tied_expect_held_once(&tc, 1);
}

Test(fuse_transpose, double_matmul_reads_its_only_weight_transposed)
{
    tied_case_t tc = {.h_rank = 3, .dbl = true};
    tied_expect_held_once(&tc, 1);
}

Test(fuse_transpose, exporter_folded_twin_is_dropped_for_w)
{
    tied_case_t tc = {.h_rank = 3, .exporter_folded = true};
    bool dropped;
    cr_expect_eq(tied_rewrites(&tc, &dropped), 1);
    const size_t n = (size_t)(tied_rows(&tc) * TV);
    float *y = malloc(n * sizeof *y);
    cr_assert(y);
    int64_t bytes;
    tied_run(&tc, y, &bytes);
    tied_expect_reference(&tc, y);
    cr_expect(bytes >= W_BYTES && bytes < 2 * W_BYTES, "owner holds %lld bytes, W is %lld",
              (long long)bytes, (long long)W_BYTES);
    free(y);
}

Test(fuse_transpose, a_twin_that_differs_in_one_element_is_kept)
{
    tied_case_t tc = {.h_rank = 2, .exporter_folded = true, .twin_differs = true};
    bool dropped;
    cr_expect_eq(tied_rewrites(&tc, &dropped), 0);
    float y[TS * TV];
    int64_t bytes;
    tied_run(&tc, y, &bytes);
    cr_expect_geq(bytes, 2 * W_BYTES);
}

/* The Add needs W' itself, so the Transpose folds; the head then reads W,
 * W's transposed twin, and the values stay the fold's. */
Test(fuse_transpose, a_transpose_with_another_reader_folds_and_the_head_reads_w)
{
    tied_case_t tc = {.h_rank = 2, .live_reader = true}, ref = tc;
    bool dropped;
    cr_expect_eq(tied_rewrites(&tc, &dropped), 1);
    cr_expect(!dropped);
    ref.t_input = true;
    ref.live_reader = false;
    float y[TS * TV], y_ref[TS * TV];
    int64_t bytes, ref_bytes;
    tied_run(&tc, y, &bytes);
    tied_run(&ref, y_ref, &ref_bytes);
    cr_expect(memcmp(y, y_ref, sizeof y) == 0);
    cr_expect_geq(bytes, 2 * W_BYTES);
}

/* A rank-3 weight: h [2, 5, 4] x T [2, 4, 3], T = Transpose(W) holding
 * t(b, k, n) either way. swap: W [2, 3, 4] and perm [0, 2, 1], each batch
 * matrix transposed; else W [2, 4, 3] and perm [0, 1, 2], which is no swap
 * and folds as before. Y (30 floats) into y; *dropped as tied_rewrites. */
static double t_at(int64_t b, int64_t k, int64_t n)
{
    return 0.25 * cos(0.7 * (double)(b * 12 + k * 3 + n));
}

static void batched_run(bool swap, bool *dropped, float *y)
{
    mb_t b;
    mb_init(&b, 8, 13);
    const int64_t hd[3] = {2, 5, 4}, yd[3] = {2, 5, 3};
    mb_input(&b, "h", F, 3, hd, NULL);
    float w[24];
    for (int64_t bi = 0; bi < 2; bi++)
        for (int64_t k = 0; k < 4; k++)
            for (int64_t n = 0; n < 3; n++)
                w[swap ? (bi * 3 + n) * 4 + k : (bi * 4 + k) * 3 + n] = (float)t_at(bi, k, n);
    Onnx__TensorProto *t = mb_tensor(&b, "W", F, 3, swap ? (int64_t[]){2, 3, 4}
                                                          : (int64_t[]){2, 4, 3});
    mb_floats(&b, t, w, 24);
    mb_initializer(&b, t);
    Onnx__NodeProto *tr = mb_node(&b, "Transpose", "tr", "W", "T");
    mb_attr_ints(&b, tr, "perm", swap ? (int64_t[]){0, 2, 1} : (int64_t[]){0, 1, 2}, 3);
    mb_node(&b, "MatMul", "mm", "h,T", "Y");
    mb_output(&b, "Y", F, 3, yd);
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool done[3] = {false};
    cr_assert_eq(eng_fuse_transpose_into_gemm(g, done), 0);
    *dropped = done[0];
    cr_expect_eq(g->nodes[1].trans_b, swap);
    eng_graph_destroy(g);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    float h[40];
    for (int i = 0; i < 40; i++)
        h[i] = h_at(i);
    eng_tensor_t in = {.dtype = ENG_DT_FLOAT, .shape = {3, {2, 5, 4}}, .data = h};
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, &in, 1, out), 0, "run: %s", fs_errmsg());
    memcpy(y, out[0]->data, 30 * sizeof *y);
    eng_tensor_free(out[0]);
    model_fixture_close(&f);
    mb_free(&b);
}

Test(fuse_transpose, a_rank_3_weight_is_read_transposed_matrix_by_matrix)
{
    float y[30], y_ref[30];
    bool dropped, ref_dropped;
    batched_run(true, &dropped, y);
    batched_run(false, &ref_dropped, y_ref);
    cr_expect(dropped);
    cr_expect(!ref_dropped);
    cr_expect(memcmp(y, y_ref, sizeof y) == 0);
    for (int64_t bi = 0; bi < 2; bi++)
        for (int64_t i = 0; i < 5; i++)
            for (int64_t n = 0; n < 3; n++) {
                double want = 0;
                for (int64_t k = 0; k < 4; k++)
                    want += (double)h_at((bi * 5 + i) * 4 + k) * (double)(float)t_at(bi, k, n);
                cr_expect(fabs(y[(bi * 5 + i) * 3 + n] - want) <= 1e-6,
                          "Y[%lld, %lld, %lld]", (long long)bi, (long long)i, (long long)n);
            }
}

/* fp16 precision lowers the graph after these passes (engine/lowp.c): the
 * tied W becomes one float16 constant that the Gather reads and the head
 * reads transposed (widened to float on the CPU). Planned and run on the
 * CPU: E is W rounded to float16, Y the float16 rounding of the product of
 * the rounded operands. */
Test(fuse_transpose, at_fp16_the_tied_weight_is_lowered_once_and_read_transposed)
{
    tied_case_t tc = {.h_rank = 3};
    mb_t b;
    tied_build(&b, &tc);
    eng_graph_t *g = NULL;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "load: %s", fs_errmsg());
    bool *done = calloc(g->n_nodes + 1, sizeof *done);
    cr_assert(done);
    cr_assert_eq(eng_fuse_transpose_into_gemm(g, done), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_fold_constants(g, NULL, done), 0, "fold: %s", fs_errmsg());
    cr_assert_eq(eng_fuse_transposed_twins(g, done), 0, "%s", fs_errmsg());
    cr_assert_eq(eng_lower_precision(g, ENG_DT_FLOAT16, NULL, &done), 0, "%s", fs_errmsg());
    int w = graph_value(g, "W");
    cr_expect_eq(g->values[w].constant.dtype, ENG_DT_FLOAT16);
    cr_expect_eq(g->weight_bytes, (size_t)(TV * TH * 2), "W once, at half size");
    int heads = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        heads += !done[i] && strcmp(g->nodes[i].op_type, "MatMul") == 0 &&
                 g->nodes[i].inputs[1] == w && g->nodes[i].trans_b;
    cr_expect_eq(heads, 1);

    int64_t ids[TS] = {0, TV - 1, 7, 7, 123};
    float h[2 * TS * TH];
    for (int64_t i = 0; i < 2 * TS * TH; i++)
        h[i] = h_at(i);
    eng_tensor_t ins[2] = {{.dtype = ENG_DT_INT64, .shape = {1, {TS}}, .data = ids},
                           {.dtype = ENG_DT_FLOAT, .shape = {3, {2, TS, TH}}, .data = h}};
    model_fixture_t f;
    eng_tensor_t *out[2] = {NULL};
    model_fixture_plan_run(&f, g, done, ins, 2, out);
    cr_assert_eq(out[0]->dtype, ENG_DT_FLOAT);
    const float *y = out[0]->data, *e = out[1]->data;
    for (int64_t i = 0; i < 2 * TS; i++)
        for (int64_t v = 0; v < TV; v++) {
            double want = 0;
            for (int64_t k = 0; k < TH; k++)
                want += (double)eng_half_to_float(eng_float_to_half(h[i * TH + k])) *
                        (double)eng_half_to_float(eng_float_to_half((float)w_at(v, k)));
            cr_expect(fabs(y[i * TV + v] - want) <= 0x1p-10 * fabs(want) + 1e-5,
                      "Y[%lld, %lld]: %.9g, want %.9g", (long long)i, (long long)v,
                      (double)y[i * TV + v], want);
        }
    for (int64_t i = 0; i < TS * TH; i++)
        cr_expect_eq(e[i], eng_half_to_float(eng_float_to_half((float)w_at(ids[i / TH], i % TH))),
                     "E[%lld]", (long long)i);
    for (int j = 0; j < 2; j++)
        eng_tensor_free(out[j]);
    eng_graph_destroy(g);
    free(done);
    model_fixture_close(&f);
    mb_free(&b);
}
