/* test_plan.c -- tests of engine/plan_build.c, plan_memory.c, exec.c and
 * fold.c on small models built in memory: the dynamic path, shape folding at
 * plan time, in-place reuse, and folding at load. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/engine.h"
#include "model_fixture.h"
#include "onnx_build.h"

static void open_model(model_fixture_t *f, mb_t *b)
{
    model_fixture_cache(f);
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    eng_model_config_t cfg = {.name = "t", .cache = f->cache};
    cr_assert_eq(eng_model_load_bytes(buf, len, NULL, &cfg, &f->model), 0, "%s", fs_errmsg());
}

static eng_tensor_t *tensor_f32(const eng_shape_t *s, float start)
{
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, s, &t), 0);
    for (int64_t i = 0; i < eng_shape_numel(s); i++)
        ((float *)t->data)[i] = start + (float)i;
    return t;
}

/* y = Relu(Reshape(x, shape)) where `shape` is a graph input: the output
 * shape depends on a value known only when running. */
Test(engine_plan, runs_a_data_dependent_reshape_tensor_by_tensor)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){6}, NULL);
    mb_input(&b, "shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){2}, NULL);
    mb_node(&b, "Reshape", "reshape", "x,shape", "r");
    mb_node(&b, "Relu", "relu", "r", "y");
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, -1, NULL);
    model_fixture_t f;
    open_model(&f, &b);

    eng_plan_info_t info;
    eng_shape_t shapes[2] = {{1, {6}}, {1, {2}}};
    cr_assert_eq(eng_model_plan_info(f.model, shapes, 2, &info), 0, "%s", fs_errmsg());
    cr_expect(info.dynamic, "a Reshape to a run-time shape makes the plan dynamic");

    eng_tensor_t ins[2];
    eng_tensor_t *x = tensor_f32(&shapes[0], -2.0f);
    eng_tensor_t *shape = NULL;
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_INT64, &shapes[1], &shape), 0);
    ((int64_t *)shape->data)[0] = 3;
    ((int64_t *)shape->data)[1] = 2;
    ins[0] = *x;
    ins[1] = *shape;
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, ins, 2, out), 0, "%s", fs_errmsg());
    cr_expect_eq(out[0]->shape.rank, 2);
    cr_expect_eq(out[0]->shape.dims[0], 3);
    cr_expect_eq(out[0]->shape.dims[1], 2);
    const float want[6] = {0, 0, 0, 1, 2, 3};
    cr_expect_eq(memcmp(out[0]->data, want, sizeof want), 0);
    eng_tensor_free(out[0]);

    /* The same signature with another value: the dynamic plan re-infers. */
    ((int64_t *)shape->data)[0] = 2;
    ((int64_t *)shape->data)[1] = 3;
    ins[1] = *shape;
    cr_assert_eq(eng_model_run(f.model, ins, 2, out), 0, "%s", fs_errmsg());
    cr_expect_eq(out[0]->shape.dims[0], 2);
    cr_expect_eq(out[0]->shape.dims[1], 3);
    eng_tensor_free(out[0]);

    alloc_cache_stats_t st;
    alloc_cache_stats(f.cache, &st);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, eng_model_owner(f.model), &os), 0);
    cr_expect_eq(st.allocated.current, os.allocated.current,
                 "between runs only the model's own bytes are held: no activation leaks");
    eng_tensor_free(x);
    eng_tensor_free(shape);
    model_fixture_close(&f);
    mb_free(&b);
}

/* y = Reshape(x, Concat(Shape(x)[0], [-1])): the shape subgraph folds at
 * plan time, so the plan stays static. */
Test(engine_plan, folds_a_shape_subgraph_at_plan_time)
{
    mb_t b;
    mb_init(&b, 8, 13);
    const char *batch[] = {"batch", NULL, NULL};
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){-1, 2, 3}, batch);
    Onnx__TensorProto *idx = mb_tensor(&b, "zero", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                                       (int64_t[]){1});
    int64_t zero = 0, minus_one = -1;
    mb_raw(&b, idx, &zero, sizeof zero);
    mb_initializer(&b, idx);
    Onnx__TensorProto *rest = mb_tensor(&b, "rest", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                                        (int64_t[]){1});
    mb_raw(&b, rest, &minus_one, sizeof minus_one);
    mb_initializer(&b, rest);
    mb_node(&b, "Shape", "shape", "x", "s");
    mb_attr_i(&b, mb_node(&b, "Gather", "gather", "s,zero", "n"), "axis", 0);
    mb_attr_i(&b, mb_node(&b, "Concat", "concat", "n,rest", "target"), "axis", 0);
    mb_node(&b, "Reshape", "reshape", "x,target", "flat");
    mb_node(&b, "Relu", "relu", "flat", "y");
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, -1, NULL);
    model_fixture_t f;
    open_model(&f, &b);

    eng_shape_t shape = {3, {4, 2, 3}};
    eng_plan_info_t info;
    cr_assert_eq(eng_model_plan_info(f.model, &shape, 1, &info), 0, "%s", fs_errmsg());
    cr_expect(!info.dynamic);
    cr_expect_eq(info.n_folded, 3, "Shape, Gather and Concat fold: %zu", info.n_folded);
    cr_expect_eq(info.n_steps, 2, "Reshape and Relu run: %zu", info.n_steps);
    /* Reshape copies the caller's input into a buffer of 24 floats (96
     * bytes, 256 with the planner's alignment) and Relu works in place over
     * it: one buffer, where without in-place reuse there would be two. */
    cr_expect_eq(info.activation_bytes, 256, "%zu", info.activation_bytes);

    eng_tensor_t *x = tensor_f32(&shape, -10.0f);
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, x, 1, out), 0, "%s", fs_errmsg());
    cr_expect_eq(out[0]->shape.rank, 2);
    cr_expect_eq(out[0]->shape.dims[0], 4);
    cr_expect_eq(out[0]->shape.dims[1], 6);
    cr_expect_eq(((float *)out[0]->data)[23], 13.0f);
    cr_expect_eq(((float *)out[0]->data)[0], 0.0f);
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}

/* y = x + Transpose(w) with w an initializer: the Transpose folds at load
 * into a weight counted to the model, and w, which nothing reads any more,
 * is released. */
Test(engine_plan, folds_constant_subgraphs_at_load_into_the_models_weights)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){3, 2}, NULL);
    Onnx__TensorProto *w = mb_tensor(&b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2,
                                     (int64_t[]){2, 3});
    mb_floats(&b, w, (const float[]){1, 2, 3, 4, 5, 6}, 6);
    mb_initializer(&b, w);
    mb_node(&b, "Transpose", "t", "w", "wt");
    mb_node(&b, "Add", "add", "x,wt", "y");
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, -1, NULL);
    model_fixture_t f;
    open_model(&f, &b);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(f.cache, eng_model_owner(f.model), &os), 0);
    cr_expect_eq(os.requested.current, (int64_t)(6 * sizeof(float)),
                 "only the folded transpose (w itself, read by nothing left to run, is "
                 "released): %lld", (long long)os.requested.current);

    eng_shape_t shape = {2, {3, 2}};
    eng_plan_info_t info;
    cr_assert_eq(eng_model_plan_info(f.model, &shape, 1, &info), 0, "%s", fs_errmsg());
    cr_expect_eq(info.n_steps, 1, "only the Add runs: %zu", info.n_steps);
    eng_tensor_t *x = tensor_f32(&shape, 0.0f);
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, x, 1, out), 0, "%s", fs_errmsg());
    const float want[6] = {0 + 1, 1 + 4, 2 + 2, 3 + 5, 4 + 3, 5 + 6};
    cr_expect_eq(memcmp(out[0]->data, want, sizeof want), 0);
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    model_fixture_close(&f);
    mb_free(&b);
}

/* Opset 6: Add with broadcast=1 and axis=1 aligns B [3] with A's dim 1,
 * where numpy broadcasting alone would align it with the last dim. */
Test(engine_plan, maps_opset_6_axis_broadcasting_onto_numpy_rules)
{
    mb_t b;
    mb_init(&b, 3, 6);
    mb_input(&b, "a", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){2, 3, 4}, NULL);
    mb_input(&b, "b", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){3}, NULL);
    Onnx__NodeProto *add = mb_node(&b, "Add", "add", "a,b", "y");
    mb_attr_i(&b, add, "broadcast", 1);
    mb_attr_i(&b, add, "axis", 1);
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, -1, NULL);
    model_fixture_t f;
    open_model(&f, &b);
    eng_shape_t sa = {3, {2, 3, 4}}, sb = {1, {3}};
    eng_tensor_t *a = tensor_f32(&sa, 0.0f), *bt = tensor_f32(&sb, 100.0f);
    eng_tensor_t ins[2] = {*a, *bt};
    eng_tensor_t *out[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, ins, 2, out), 0, "%s", fs_errmsg());
    const float *y = out[0]->data;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                int at = (i * 3 + j) * 4 + k;
                cr_expect_eq(y[at], (float)at + 100.0f + (float)j, "y[%d,%d,%d] = %g", i, j, k,
                             y[at]);
            }
    eng_tensor_free(out[0]);
    eng_tensor_free(a);
    eng_tensor_free(bt);
    model_fixture_close(&f);
    mb_free(&b);
}
