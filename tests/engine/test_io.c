/* test_io.c -- tests of engine/io.c: eng_io_check against declared inputs
 * (fixed, symbolic and undeclared dims and dtypes), its one message format,
 * and finding a model's inputs and outputs by name. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "model_fixture.h"

/* Declared input "x": float [batch,64]. */
static eng_io_info_t decl_batch_64(void)
{
    return (eng_io_info_t){.name = "x",
                           .dtype = ENG_DT_FLOAT,
                           .rank = 2,
                           .dims = {-1, 64},
                           .dim_params = {"batch", NULL}};
}

static eng_tensor_t tensor_of(eng_dtype_t dt, eng_shape_t shape)
{
    return (eng_tensor_t){.dtype = dt, .shape = shape};
}

Test(eng_io, a_tensor_that_fits_passes)
{
    eng_io_info_t io = decl_batch_64();
    eng_tensor_t t = tensor_of(ENG_DT_FLOAT, (eng_shape_t){2, {3, 64}});
    cr_expect_eq(eng_io_check(&io, "m", &t, NULL), 0, "%s", fs_errmsg());
}

Test(eng_io, a_symbolic_dim_takes_any_size)
{
    eng_io_info_t io = decl_batch_64();
    int64_t rows[] = {0, 1, 7, 4096};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        eng_tensor_t t = tensor_of(ENG_DT_FLOAT, (eng_shape_t){2, {rows[i], 64}});
        cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), 0, "%lld rows: %s", (long long)rows[i],
                     fs_errmsg());
    }
}

Test(eng_io, a_wrong_dtype_is_refused_naming_both)
{
    eng_io_info_t io = decl_batch_64();
    eng_tensor_t t = tensor_of(ENG_DT_INT32, (eng_shape_t){2, {3, 64}});
    cr_expect_eq(eng_io_check(&io, "m", &t, NULL), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'x' of model 'm': expected float [batch,64], got int32 [3,64] "
                     "(wrong dtype)");
}

Test(eng_io, a_wrong_rank_is_refused_naming_both_shapes)
{
    eng_io_info_t io = decl_batch_64();
    eng_tensor_t t = tensor_of(ENG_DT_FLOAT, (eng_shape_t){3, {3, 64, 1}});
    cr_expect_eq(eng_io_check(&io, "m", &t, NULL), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'x' of model 'm': expected float [batch,64], got float [3,64,1] "
                     "(rank 3, not 2)");
}

Test(eng_io, a_wrong_fixed_dim_is_refused_naming_the_dim)
{
    eng_io_info_t io = decl_batch_64();
    eng_tensor_t t = tensor_of(ENG_DT_FLOAT, (eng_shape_t){2, {3, 63}});
    cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'x': expected float [batch,64], got float [3,63] (dim 1 must be 64)");
}

Test(eng_io, an_undeclared_shape_takes_any_shape_but_a_bad_one)
{
    eng_io_info_t io = {.name = "any", .dtype = ENG_DT_INT64, .rank = -1};
    eng_shape_t shapes[] = {{0, {0}}, {1, {5}}, {4, {1, 2, 3, 4}}, {2, {0, 9}}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        eng_tensor_t t = tensor_of(ENG_DT_INT64, shapes[i]);
        cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), 0, "shape %zu: %s", i, fs_errmsg());
    }
    eng_tensor_t neg = tensor_of(ENG_DT_INT64, (eng_shape_t){2, {2, -1}});
    cr_expect_eq(eng_io_check(&io, NULL, &neg, NULL), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'any': expected int64 (any shape), got int64 [2,-1] (dim 1 is "
                     "negative)");
    eng_tensor_t deep = tensor_of(ENG_DT_INT64, (eng_shape_t){ENG_MAX_RANK + 1, {1}});
    cr_expect_eq(eng_io_check(&io, NULL, &deep, NULL), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "(rank 9; ranks 0 to 8)"), "%s", fs_errmsg());
}

Test(eng_io, an_undeclared_dtype_takes_any_supported_one)
{
    eng_io_info_t io = {.name = "u", .dtype = ENG_DT_UNDEFINED, .rank = 1, .dims = {2}};
    eng_tensor_t t = tensor_of(ENG_DT_UINT8, (eng_shape_t){1, {2}});
    cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), 0, "%s", fs_errmsg());
    t.dtype = ENG_DT_STRING;
    cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), 0, "%s", fs_errmsg());
    t.dtype = (eng_dtype_t)21;
    cr_expect_eq(eng_io_check(&io, NULL, &t, NULL), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'u': expected any dtype [2], got uint4 [2] (dtype uint4 is not "
                     "supported)");
}

static const char *shouting_name(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT ? "FP32" : dt == ENG_DT_INT64 ? "INT64" : "OTHER";
}

Test(eng_io, the_caller_may_name_the_dtypes)
{
    eng_io_info_t io = decl_batch_64();
    eng_tensor_t t = tensor_of(ENG_DT_INT64, (eng_shape_t){2, {1, 64}});
    cr_expect_eq(eng_io_check(&io, NULL, &t, shouting_name), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'x': expected FP32 [batch,64], got INT64 [1,64] (wrong dtype)");
}

Test(eng_io, a_graph_value_reads_as_its_declaration)
{
    eng_value_t v = {.name = "img",
                     .kind = ENG_VALUE_INPUT,
                     .dtype = ENG_DT_FLOAT,
                     .rank = 3,
                     .dims = {{-1, "n"}, {3, NULL}, {-1, NULL}}};
    eng_io_info_t io;
    eng_value_io_info(&v, &io);
    char buf[64];
    cr_expect_str_eq(io.name, "img");
    cr_expect_eq(io.dtype, ENG_DT_FLOAT);
    cr_expect_str_eq(eng_io_info_format(&io, buf, sizeof buf), "[n,3,?]");
    v.rank = -1;
    eng_value_io_info(&v, &io);
    cr_expect_str_eq(eng_io_info_format(&io, buf, sizeof buf), "(any shape)");
}

Test(eng_io, inputs_and_outputs_are_found_by_name)
{
    model_fixture_t f;
    model_fixture_cache(&f);
    eng_model_config_t cfg = {.cache = f.cache};
    cr_assert_eq(eng_model_load("models/mlp/1/model.onnx", &cfg, &f.model), 0, "%s",
                 fs_errmsg());
    cr_expect_eq(eng_io_input_find(f.model, "input"), 0);
    cr_expect_eq(eng_io_output_find(f.model, "probabilities"), 0);
    cr_expect_eq(eng_io_input_find(f.model, "probabilities"), -1);
    cr_expect_eq(eng_io_output_find(f.model, "input"), -1);
    cr_expect_eq(eng_io_input_find(f.model, ""), -1);
    model_fixture_close(&f);
}
