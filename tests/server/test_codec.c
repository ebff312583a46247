/* test_codec.c -- tests of server/codec.c and codec_response.c: datatype
 * names, request parsing (JSON data, nested and flat, range checks,
 * Triton's binary extension), binding to a model, the response encoder,
 * and one full round through the engine on the demo MLP. (The buffer and
 * the escaper: test_buf.c.) */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/half.h"
#include "server/codec.h"
#include "tests/engine/onnx_build.h"
#include "tests/engine/registry_fixture.h"

#define MLP_PATH "models/mlp/1/model.onnx"

/* ---- helpers -------------------------------------------------------------- */

static srv_infer_request_t *parse_ok(const char *json)
{
    srv_infer_request_t *r = NULL;
    int rc = srv_infer_request_parse(json, strlen(json), 0, &r);
    cr_assert_eq(rc, 0, "parsing %s: %s", json, fs_errmsg());
    cr_assert_not_null(r);
    return r;
}

/* The parse fails with `code` and a message holding `needle`. */
static void parse_fails(const char *json, int code, const char *needle)
{
    srv_infer_request_t *r = NULL;
    int rc = srv_infer_request_parse(json, strlen(json), 0, &r);
    cr_expect_eq(rc, code, "%s: got %d (%s)", json, rc, fs_errmsg());
    cr_expect_null(r);
    cr_expect(strstr(fs_errmsg(), needle), "%s: message \"%s\" lacks \"%s\"", json, fs_errmsg(),
              needle);
}

/* {"inputs": [one input "x"]} in a static buffer. */
static const char *one_input(const char *datatype, const char *shape, const char *data)
{
    static char json[4096];
    snprintf(json, sizeof json,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":%s,\"datatype\":\"%s\",\"data\":%s}]}", shape,
             datatype, data);
    return json;
}

/* A body of a JSON header and binary parts; *header_len the header's bytes.
 * Caller frees with srv_buf_free. */
static srv_buf_t body_build(const char *json, const void *const *parts, const size_t *sizes,
                            size_t n, size_t *header_len)
{
    srv_buf_t b = {0};
    cr_assert_eq(srv_buf_append(&b, json, strlen(json)), 0);
    *header_len = b.len;
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(srv_buf_append(&b, parts[i], sizes[i]), 0);
    return b;
}

/* A model over a fresh CPU cache: the demo MLP, or "pair": inputs a FP32
 * [n,3] and b INT64 [2], outputs sum = a + a and ids = b. */
typedef struct codec_fixture {
    eng_memory_t mem;
    eng_model_t *model;
} codec_fixture_t;

static void fixture_open_mlp(codec_fixture_t *f)
{
    cr_assert_eq(eng_memory_open(NULL, NULL, &f->mem), 0, "%s", fs_errmsg());
    eng_model_config_t cfg = {.cache = f->mem.cache};
    cr_assert_eq(eng_model_load(MLP_PATH, &cfg, &f->model), 0, "%s", fs_errmsg());
}

static void fixture_open_pair(codec_fixture_t *f)
{
    cr_assert_eq(eng_memory_open(NULL, NULL, &f->mem), 0, "%s", fs_errmsg());
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "a", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){-1, 3},
             (const char *const[]){"n", NULL});
    mb_input(&b, "b", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){2}, NULL);
    mb_node(&b, "Add", "add", "a,a", "sum");
    mb_node(&b, "Identity", "id", "b", "ids");
    mb_output(&b, "sum", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){-1, 3});
    mb_output(&b, "ids", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){2});
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    eng_model_config_t cfg = {.name = "pair", .cache = f->mem.cache};
    int rc = eng_model_load_bytes(bytes, len, NULL, &cfg, &f->model);
    mb_free(&b);
    cr_assert_eq(rc, 0, "loading the pair model: %s", fs_errmsg());
}

/* Destroys the model and checks every byte went back to the cache. */
static void fixture_close(codec_fixture_t *f)
{
    eng_model_destroy(f->model);
    alloc_cache_stats_t st;
    alloc_cache_stats(f->mem.cache, &st);
    cr_expect_eq(st.allocated.current, 0, "allocated after destroy: %lld",
                 (long long)st.allocated.current);
    eng_memory_close(&f->mem);
}

static eng_tensor_t *tensor_new(eng_dtype_t dt, eng_shape_t shape, const void *data)
{
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(dt, &shape, &t), 0, "%s", fs_errmsg());
    memcpy(t->data, data, eng_tensor_bytes(t));
    return t;
}

/* A valid request for the pair model, with `extra` keys spliced in. */
static srv_infer_request_t *pair_request(const char *extra)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{%s\"inputs\":[{\"name\":\"a\",\"shape\":[1,3],\"datatype\":\"FP32\","
             "\"data\":[1,2,3]},{\"name\":\"b\",\"shape\":[2],\"datatype\":\"INT64\","
             "\"data\":[4,5]}]}",
             extra);
    return parse_ok(json);
}

/* Encodes outputs `sum` and `ids` of the pair model for r. */
static void pair_encode(codec_fixture_t *f, const srv_infer_request_t *r, eng_tensor_t *sum,
                        eng_tensor_t *ids, srv_buf_t *out, size_t *json_len)
{
    eng_tensor_t *outs[2] = {sum, ids};
    int rc = srv_infer_response_encode(f->model, "pair", 2, r, outs, 2, out, json_len);
    cr_assert_eq(rc, 0, "encode: %s", fs_errmsg());
}

static cJSON *response_parse(const srv_buf_t *out, size_t json_len)
{
    cJSON *root = cJSON_ParseWithLength(out->data, json_len);
    cr_assert_not_null(root, "response is not JSON: %.*s", (int)json_len, out->data);
    return root;
}

/* ---- datatypes ------------------------------------------------------------ */

Test(srv_codec, datatype_names_go_both_ways)
{
    static const struct {
        const char *name;
        eng_dtype_t dt;
    } all[] = {
        {"BOOL", ENG_DT_BOOL},     {"UINT8", ENG_DT_UINT8},   {"UINT16", ENG_DT_UINT16},
        {"UINT32", ENG_DT_UINT32}, {"UINT64", ENG_DT_UINT64}, {"INT8", ENG_DT_INT8},
        {"INT16", ENG_DT_INT16},   {"INT32", ENG_DT_INT32},   {"INT64", ENG_DT_INT64},
        {"FP16", ENG_DT_FLOAT16},  {"BF16", ENG_DT_BFLOAT16}, {"FP32", ENG_DT_FLOAT},
        {"FP64", ENG_DT_DOUBLE},   {"BYTES", ENG_DT_STRING},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        eng_dtype_t dt = ENG_DT_UNDEFINED;
        cr_expect_str_eq(srv_datatype_name(all[i].dt), all[i].name);
        cr_expect_eq(srv_datatype_parse(all[i].name, &dt), 0, "%s", all[i].name);
        cr_expect_eq(dt, all[i].dt, "%s", all[i].name);
    }
    cr_expect_null(srv_datatype_name(ENG_DT_COMPLEX64));
    cr_expect_null(srv_datatype_name(ENG_DT_UNDEFINED));
}

Test(srv_codec, unknown_datatypes_are_refused)
{
    eng_dtype_t dt = ENG_DT_UNDEFINED;
    cr_expect_eq(srv_datatype_parse("fp32", &dt), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "unknown datatype \"fp32\""), "%s", fs_errmsg());
    cr_expect_eq(dt, ENG_DT_UNDEFINED);
    parse_fails(one_input("bytes", "[1]", "[\"a\"]"), FS_EINVAL,
                "input 'x': unknown datatype \"bytes\"");
}

/* ---- request: JSON data --------------------------------------------------- */

Test(srv_codec, flat_data_is_read_for_every_datatype)
{
    const struct {
        const char *dt, *data;
        eng_dtype_t dtype;
        const void *want;
    } cases[] = {
        {"BOOL", "[true,false,true,false]", ENG_DT_BOOL, (const uint8_t[]){1, 0, 1, 0}},
        {"UINT8", "[0,1,254,255]", ENG_DT_UINT8, (const uint8_t[]){0, 1, 254, 255}},
        {"UINT16", "[0,1,65534,65535]", ENG_DT_UINT16, (const uint16_t[]){0, 1, 65534, 65535}},
        {"UINT32", "[0,1,4294967294,4294967295]", ENG_DT_UINT32,
         (const uint32_t[]){0, 1, 4294967294u, 4294967295u}},
        {"UINT64", "[0,1,9007199254740990,9007199254740991]", ENG_DT_UINT64,
         (const uint64_t[]){0, 1, 9007199254740990u, 9007199254740991u}},
        {"INT8", "[-128,-1,0,127]", ENG_DT_INT8, (const int8_t[]){-128, -1, 0, 127}},
        {"INT16", "[-32768,-1,0,32767]", ENG_DT_INT16, (const int16_t[]){-32768, -1, 0, 32767}},
        {"INT32", "[-2147483648,-1,0,2147483647]", ENG_DT_INT32,
         (const int32_t[]){INT32_MIN, -1, 0, INT32_MAX}},
        {"INT64", "[-9007199254740991,-1,0,9007199254740991]", ENG_DT_INT64,
         (const int64_t[]){-9007199254740991, -1, 0, 9007199254740991}},
        {"FP32", "[1.5,-2,0.1,3.4028234663852886e38]", ENG_DT_FLOAT,
         (const float[]){1.5f, -2.0f, 0.1f, 3.4028234663852886e38f}},
        {"FP64", "[1.5,-2,0.1,1e300]", ENG_DT_DOUBLE, (const double[]){1.5, -2.0, 0.1, 1e300}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_infer_request_t *r = parse_ok(one_input(cases[i].dt, "[2,2]", cases[i].data));
        cr_assert_eq(r->n_inputs, 1);
        const eng_tensor_t *t = &r->inputs[0].tensor;
        cr_expect_str_eq(r->inputs[0].name, "x");
        cr_expect_eq(t->dtype, cases[i].dtype, "%s", cases[i].dt);
        cr_expect_eq(t->shape.rank, 2);
        cr_expect_eq(t->shape.dims[0], 2);
        cr_expect_eq(t->shape.dims[1], 2);
        cr_expect_eq(memcmp(t->data, cases[i].want, 4 * eng_dtype_size(t->dtype)), 0,
                     "%s: values differ", cases[i].dt);
        srv_infer_request_free(r);
    }
}

Test(srv_codec, half_and_bfloat16_round_to_nearest_even)
{
    const float in[4] = {1.5f, -2.0f, 0.1f, 65504.0f};
    srv_infer_request_t *r = parse_ok(one_input("FP16", "[4]", "[1.5,-2,0.1,65504]"));
    const uint16_t *h = r->inputs[0].tensor.data;
    for (int i = 0; i < 4; i++)
        cr_expect_eq(h[i], eng_float_to_half(in[i]), "FP16 %d: %#x", i, h[i]);
    cr_expect_eq(h[0], 0x3e00);
    cr_expect_eq(h[3], 0x7bff);
    srv_infer_request_free(r);

    r = parse_ok(one_input("BF16", "[4]", "[1.5,-2,0.1,3e38]"));
    const uint16_t *bf = r->inputs[0].tensor.data;
    const float bin[4] = {1.5f, -2.0f, 0.1f, 3e38f};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(bf[i], eng_float_to_bf16(bin[i]), "BF16 %d: %#x", i, bf[i]);
    cr_expect_eq(bf[0], 0x3fc0);
    srv_infer_request_free(r);
}

Test(srv_codec, nested_data_is_flattened_depth_first)
{
    const int32_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const char *forms[] = {"[[[1,2],[3,4]],[[5,6],[7,8]]]", "[1,2,3,4,5,6,7,8]",
                           "[[1,2,3,4],[5,6,7,8]]"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        srv_infer_request_t *r = parse_ok(one_input("INT32", "[2,2,2]", forms[i]));
        cr_expect_eq(memcmp(r->inputs[0].tensor.data, want, sizeof want), 0, "%s", forms[i]);
        srv_infer_request_free(r);
    }
    srv_infer_request_t *r = parse_ok(one_input("BOOL", "[2,1]", "[[true],[false]]"));
    cr_expect_eq(((uint8_t *)r->inputs[0].tensor.data)[0], 1);
    cr_expect_eq(((uint8_t *)r->inputs[0].tensor.data)[1], 0);
    srv_infer_request_free(r);
}

Test(srv_codec, scalars_and_empty_tensors_are_read)
{
    srv_infer_request_t *r = parse_ok(one_input("FP64", "[]", "[2.5]"));
    cr_expect_eq(r->inputs[0].tensor.shape.rank, 0);
    cr_expect_eq(*(double *)r->inputs[0].tensor.data, 2.5);
    srv_infer_request_free(r);
    r = parse_ok(one_input("FP32", "[0,3]", "[]"));
    cr_expect_eq(r->inputs[0].tensor.shape.dims[0], 0);
    cr_expect_not_null(r->inputs[0].tensor.data);
    srv_infer_request_free(r);
}

Test(srv_codec, values_out_of_range_are_refused_naming_input_value_and_index)
{
    static const struct {
        const char *dt, *shape, *data, *msg;
    } cases[] = {
        {"INT8", "[6]", "[0,0,0,0,0,300]",
         "input 'x': value 300 at index 5 is out of range for INT8"},
        {"UINT8", "[1]", "[-1]", "input 'x': value -1 at index 0 is out of range for UINT8"},
        {"INT32", "[2]", "[1,1.5]",
         "input 'x': value 1.5 at index 1 is not an integer, as INT32 needs"},
        {"BOOL", "[2]", "[true,2]",
         "input 'x': value 2 at index 1 is not true or false, as BOOL needs"},
        {"BOOL", "[1]", "[1]", "input 'x': value 1 at index 0 is not true or false, as BOOL needs"},
        {"INT16", "[1]", "[32768]", "input 'x': value 32768 at index 0 is out of range for INT16"},
        {"INT16", "[1]", "[-32769]", "input 'x': value -32769 at index 0 is out of range for INT16"},
        {"UINT16", "[1]", "[65536]", "input 'x': value 65536 at index 0 is out of range for UINT16"},
        {"UINT32", "[1]", "[4294967296]",
         "input 'x': value 4294967296 at index 0 is out of range for UINT32"},
        {"INT32", "[1]", "[2147483648]",
         "input 'x': value 2147483648 at index 0 is out of range for INT32"},
        {"INT64", "[1]", "[1e19]", "input 'x': value 1e+19 at index 0 is out of range for INT64"},
        {"UINT64", "[1]", "[-1]", "input 'x': value -1 at index 0 is out of range for UINT64"},
        {"INT64", "[1]", "[1e999]", "input 'x': value inf at index 0 is out of range for INT64"},
        {"FP32", "[1]", "[1e39]", "input 'x': value 1e+39 at index 0 is out of range for FP32"},
        {"FP32", "[2]", "[1,1e400]", "input 'x': value inf at index 1 is out of range for FP32"},
        {"FP64", "[1]", "[-1e400]", "input 'x': value -inf at index 0 is out of range for FP64"},
        {"FP16", "[1]", "[1e400]", "input 'x': value inf at index 0 is out of range for FP16"},
        {"FP16", "[2]", "[65519,65520]",
         "input 'x': value 65520 at index 1 is out of range for FP16"},
        {"BF16", "[1]", "[1e39]", "input 'x': value 1e+39 at index 0 is out of range for BF16"},
        {"INT32", "[1]", "[\"7\"]",
         "input 'x': value \"7\" at index 0 is not a number, as INT32 needs"},
        {"INT8", "[1]", "[true]", "input 'x': value true at index 0 is not a number, as INT8 needs"},
        {"FP32", "[1]", "[null]",
         "input 'x': value null at index 0 is not a number, \"NaN\", \"Infinity\" or "
         "\"-Infinity\", as FP32 needs"},
        {"FP64", "[1]", "[{}]",
         "input 'x': value an object at index 0 is not a number, \"NaN\", \"Infinity\" or "
         "\"-Infinity\", as FP64 needs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_infer_request_t *r = NULL;
        const char *json = one_input(cases[i].dt, cases[i].shape, cases[i].data);
        cr_expect_eq(srv_infer_request_parse(json, strlen(json), 0, &r), FS_EINVAL, "%s", json);
        cr_expect_null(r);
        cr_expect_str_eq(fs_errmsg(), cases[i].msg, "%s", json);
    }
}

Test(srv_codec, json_int64_beyond_2_pow_53_is_refused_pointing_to_binary)
{
    parse_fails(one_input("INT64", "[1]", "[9007199254740993]"), FS_EINVAL,
                "is beyond 2^53 - 1, the largest integer read exactly from JSON: send INT64 "
                "tensors holding such values as binary data");
    parse_fails(one_input("UINT64", "[1]", "[18446744073709551615]"), FS_EINVAL,
                "send UINT64 tensors holding such values as binary data");
    parse_fails(one_input("INT64", "[1]", "[-9007199254740992]"), FS_EINVAL, "beyond 2^53 - 1");
    parse_fails(one_input("INT64", "[1]", "[9223372036854775807]"), FS_EINVAL, "beyond 2^53 - 1");
    parse_fails(one_input("INT64", "[1]", "[1e20]"), FS_EINVAL, "out of range for INT64");
}

Test(srv_codec, nan_and_infinity_strings_are_read_for_floats)
{
    srv_infer_request_t *r = parse_ok(one_input("FP32", "[4]", "[\"NaN\",\"Infinity\",\"-Infinity\",1]"));
    const float *x = r->inputs[0].tensor.data;
    cr_expect(isnan(x[0]));
    cr_expect(isinf(x[1]) && x[1] > 0);
    cr_expect(isinf(x[2]) && x[2] < 0);
    cr_expect_eq(x[3], 1.0f);
    srv_infer_request_free(r);
    r = parse_ok(one_input("FP16", "[2]", "[\"NaN\",\"-Infinity\"]"));
    const uint16_t *h = r->inputs[0].tensor.data;
    cr_expect(isnan(eng_half_to_float(h[0])));
    cr_expect_eq(h[1], 0xfc00);
    srv_infer_request_free(r);
    parse_fails(one_input("FP32", "[1]", "[\"nan\"]"), FS_EINVAL, "value \"nan\" at index 0");
}

Test(srv_codec, element_count_mismatch_names_both_counts)
{
    char data[2048] = "[";
    for (int i = 0; i < 127; i++)
        strcat(data, i ? ",0.5" : "0.5");
    strcat(data, "]");
    char json[4096];
    snprintf(json, sizeof json,
             "{\"inputs\":[{\"name\":\"input\",\"shape\":[2,64],\"datatype\":\"FP32\","
             "\"data\":%s}]}",
             data);
    srv_infer_request_t *r = NULL;
    cr_expect_eq(srv_infer_request_parse(json, strlen(json), 0, &r), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "input 'input': shape [2,64] has 128 elements but \"data\" has 127");
    parse_fails(one_input("INT8", "[2,2]", "[[1,2],[3,4,5]]"), FS_EINVAL,
                "input 'x': shape [2,2] has 4 elements but \"data\" has 5");
    parse_fails(one_input("INT8", "[3]", "[]"), FS_EINVAL, "has 3 elements but \"data\" has 0");
}

Test(srv_codec, malformed_requests_are_refused_saying_what_is_wrong)
{
    static const struct {
        const char *json;
        int code;
        const char *needle;
    } cases[] = {
        {"{", FS_EPARSE, "not valid JSON"},
        {"{\"inputs\": [1,}", FS_EPARSE, "not valid JSON: stopped at byte"},
        {"{} x", FS_EPARSE, "unexpected text after the object at byte 3"},
        {"[1]", FS_EINVAL, "must be a JSON object"},
        {"{}", FS_EINVAL, "the request has no \"inputs\""},
        {"{\"inputs\":[]}", FS_EINVAL, "\"inputs\" must be a non-empty array"},
        {"{\"inputs\":{}}", FS_EINVAL, "\"inputs\" must be a non-empty array"},
        {"{\"inputs\":[5]}", FS_EINVAL, "input 0 must be an object"},
        {"{\"inputs\":[{\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", FS_EINVAL,
         "input 0: \"name\" must be a non-empty string"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
         "{\"name\":7}]}",
         FS_EINVAL, "input 1: \"name\" must be a non-empty string"},
        {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"data\":[1]}]}", FS_EINVAL,
         "input 'x': \"shape\" must be an array of non-negative integers"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[2,-1],\"datatype\":\"FP32\",\"data\":[1]}]}",
         FS_EINVAL, "input 'x': shape dim 1 is -1, not a non-negative integer"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1.5],\"datatype\":\"FP32\",\"data\":[1]}]}",
         FS_EINVAL, "input 'x': shape dim 0 is 1.5, not a non-negative integer"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,1,1,1,1,1,1,1,1],\"datatype\":\"FP32\","
         "\"data\":[1]}]}",
         FS_EINVAL, "input 'x': shape has 9 dims; at most 8 are supported"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"data\":[1]}]}", FS_EINVAL,
         "input 'x': \"datatype\" must be a string"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"F32\",\"data\":[1]}]}",
         FS_EINVAL, "input 'x': unknown datatype \"F32\""},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\"}]}", FS_EINVAL,
         "input 'x': needs \"data\" or \"parameters\": {\"binary_data_size\": N}"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
         "\"parameters\":{\"binary_data_size\":4}}]}",
         FS_EINVAL, "input 'x': has both \"data\" and"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":1}]}",
         FS_EINVAL, "input 'x': \"data\" must be an array"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
         "\"parameters\":3}]}",
         FS_EINVAL, "input 'x': \"parameters\" must be an object"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[100000000000,100000000000],"
         "\"datatype\":\"FP32\",\"data\":[1]}]}",
         FS_EINVAL, "input 'x': shape [100000000000,100000000000] is too large"},
        {"{\"id\":5,\"inputs\":[]}", FS_EINVAL, "\"id\" must be a string, got 5"},
        {"{\"model\":[],\"inputs\":[]}", FS_EINVAL, "\"model\" must be a string, got an array"},
        {"{\"version\":\"v1\",\"inputs\":[]}", FS_EINVAL,
         "\"version\" must be a non-negative integer or a string of digits, got \"v1\""},
        {"{\"version\":-1,\"inputs\":[]}", FS_EINVAL, "got -1"},
        {"{\"version\":\"\",\"inputs\":[]}", FS_EINVAL, "got \"\""},
        {"{\"parameters\":[],\"inputs\":[]}", FS_EINVAL, "\"parameters\" must be an object"},
        {"{\"parameters\":{\"binary_data_output\":1},\"inputs\":[]}", FS_EINVAL,
         "\"binary_data_output\" must be true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        parse_fails(cases[i].json, cases[i].code, cases[i].needle);

    srv_infer_request_t *r = NULL;
    cr_expect_eq(srv_infer_request_parse("", 0, 0, &r), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "empty"), "%s", fs_errmsg());
}

Test(srv_codec, bad_requested_outputs_are_refused)
{
    const char *in = "\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]";
    char json[512];
    snprintf(json, sizeof json, "{%s,\"outputs\":{}}", in);
    parse_fails(json, FS_EINVAL, "\"outputs\" must be an array");
    snprintf(json, sizeof json, "{%s,\"outputs\":[{\"name\":\"y\"},{}]}", in);
    parse_fails(json, FS_EINVAL, "output 1: \"name\" must be a non-empty string");
    snprintf(json, sizeof json, "{%s,\"outputs\":[{\"name\":\"y\"},{\"name\":\"y\"}]}", in);
    parse_fails(json, FS_EINVAL, "output 'y' is requested twice");
    snprintf(json, sizeof json,
             "{%s,\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":\"yes\"}}]}", in);
    parse_fails(json, FS_EINVAL, "output 'y': \"parameters\" must be an object whose");
}

/* What Triton's simple_http_shm_client sends: the region's parameters
 * are parsed (infer.c resolves them) and checked; what
 * simple_http_sequence_sync_infer_client sends is read for the sequence
 * batcher (an id as a number or a string, the flags as booleans). */
Test(srv_codec, shared_memory_and_sequence_parameters_are_parsed)
{
    srv_infer_request_t *r =
        parse_ok("{\"inputs\":[{\"name\":\"x\",\"shape\":[1,16],\"datatype\":\"INT32\","
                 "\"parameters\":{\"shared_memory_region\":\"input_data\","
                 "\"shared_memory_offset\":128,\"shared_memory_byte_size\":64}}],"
                 "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\","
                 "\"shared_memory_byte_size\":32}},{\"name\":\"z\"}],"
                 "\"parameters\":{\"binary_data_output\":true}}");
    cr_assert_eq(r->n_inputs, 1);
    cr_expect_null(r->inputs[0].tensor.data);
    cr_expect_str_eq(r->inputs[0].shm.region, "input_data");
    cr_expect_eq(r->inputs[0].shm.offset, 128);
    cr_expect_eq(r->inputs[0].shm.byte_size, 64);
    cr_assert_eq(r->n_outputs, 2);
    cr_expect_str_eq(r->outputs[0].shm.region, "out");
    cr_expect_eq(r->outputs[0].shm.offset, 0);
    cr_expect_eq(r->outputs[0].shm.byte_size, 32);
    cr_expect_not(r->outputs[0].binary, "an output in shared memory is never binary");
    cr_expect_null(r->outputs[1].shm.region);
    cr_expect(r->outputs[1].binary);
    srv_infer_request_free(r);

    const char *x = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,16],\"datatype\":\"INT32\",";
    char json[512];
    static const struct {
        const char *rest, *want;
    } bad[] = {
        {"\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":60}}]}",
         "input 'x': shared_memory_byte_size is 60 but shape [1,16] of INT32 takes 64 bytes"},
        {"\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"parameters\":{\"shared_memory_region\":"
         "\"r\",\"shared_memory_byte_size\":64}}]}",
         "input 'x': has \"shared_memory_region\" and \"data\"; give one"},
        {"\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64,"
         "\"binary_data_size\":64}}]}",
         "input 'x': has \"shared_memory_region\" and \"binary_data_size\"; give one"},
        {"\"parameters\":{\"shared_memory_region\":\"r\"}}]}",
         "input 'x': \"shared_memory_region\" needs \"shared_memory_byte_size\""},
        {"\"parameters\":{\"shared_memory_region\":7,\"shared_memory_byte_size\":64}}]}",
         "input 'x': \"shared_memory_region\" must be a non-empty string"},
        {"\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_offset\":-1,"
         "\"shared_memory_byte_size\":64}}]}",
         "input 'x': \"shared_memory_offset\" is -1, not a non-negative integer"},
        {"\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"parameters\":{\"shared_memory_offset\":8}}]}",
         "input 'x': \"shared_memory_offset\" is given without \"shared_memory_region\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, "%s%s", x, bad[i].rest);
        parse_fails(json, FS_EINVAL, bad[i].want);
    }
    const char *in = "\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]";
    snprintf(json, sizeof json,
             "{%s,\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\","
             "\"shared_memory_byte_size\":64,\"binary_data\":true}}]}",
             in);
    parse_fails(json, FS_EINVAL, "output 'y': has \"shared_memory_region\" and \"binary_data\": "
                                 "true; give one");
    snprintf(json, sizeof json,
             "{%s,\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_byte_size\":64}}]}",
             in);
    parse_fails(json, FS_EINVAL, "output 'y': \"shared_memory_byte_size\" is given without");
    snprintf(json, sizeof json, "{\"parameters\":{\"sequence_id\":1000,\"sequence_start\":true,"
             "\"sequence_end\":false},%s}", in);
    r = parse_ok(json);
    cr_expect_eq(r->seq_id, 1000);
    cr_expect_null(r->seq_label);
    cr_expect(r->seq_start && !r->seq_end);
    srv_infer_request_free(r);
    snprintf(json, sizeof json, "{\"parameters\":{\"sequence_id\":\"a-b\",\"sequence_end\":true},"
             "%s}", in);
    r = parse_ok(json);
    cr_expect_str_eq(r->seq_label, "a-b");
    cr_expect(r->seq_end && !r->seq_start);
    srv_infer_request_free(r);
    snprintf(json, sizeof json, "{\"parameters\":{\"sequence_end\":1},%s}", in);
    parse_fails(json, FS_EINVAL, "\"sequence_end\" must be true or false");
    snprintf(json, sizeof json, "{\"parameters\":{\"sequence_id\":1.5},%s}", in);
    parse_fails(json, FS_EINVAL, "\"sequence_id\" must be a string or an integer");
    /* Triton's other request parameters: timeout is read, priority 0 is
     * accepted and any other level refused, an unknown key is refused. */
    snprintf(json, sizeof json, "{\"parameters\":{\"timeout\":2500,\"priority\":0},%s}", in);
    r = parse_ok(json);
    cr_expect_eq(r->timeout_us, 2500);
    srv_infer_request_free(r);
    snprintf(json, sizeof json, "{\"parameters\":{\"priority\":2},%s}", in);
    parse_fails(json, FS_EINVAL, "\"priority\" levels are not supported");
    snprintf(json, sizeof json, "{\"parameters\":{\"timeout\":-1},%s}", in);
    parse_fails(json, FS_EINVAL, "\"timeout\" must be a whole number of microseconds");
    snprintf(json, sizeof json, "{\"parameters\":{\"timeout\":1.5},%s}", in);
    parse_fails(json, FS_EINVAL, "\"timeout\" must be a whole number of microseconds");
    snprintf(json, sizeof json, "{\"parameters\":{\"headers\":{}},%s}", in);
    parse_fails(json, FS_EINVAL, "\"headers\" is not a request parameter flatserve reads");
    /* A shape dim past 2^53 - 1 is said to be so, not called negative. */
    parse_fails("{\"inputs\":[{\"name\":\"x\",\"shape\":[16,1152921504606846978],"
                "\"datatype\":\"FP32\",\"data\":[1]}]}",
                FS_EINVAL, "shape dim 1 is 1152921504606846976, past 2^53 - 1");
}

Test(srv_codec, id_model_version_and_output_choices_are_read)
{
    srv_infer_request_t *r = pair_request("\"id\":\"r-1\",\"model\":\"pair\",\"version\":\"3\","
                                          "\"extra\":{\"ignored\":true},");
    cr_expect_str_eq(r->id, "r-1");
    cr_expect_str_eq(r->model, "pair");
    cr_expect_eq(r->version, 3);
    cr_expect_eq(r->n_outputs, 0);
    cr_expect_not(r->binary_output);
    srv_infer_request_free(r);

    r = pair_request("\"version\":7,");
    cr_expect_null(r->id);
    cr_expect_null(r->model);
    cr_expect_eq(r->version, 7);
    srv_infer_request_free(r);

    r = pair_request("");
    cr_expect_eq(r->version, -1);
    srv_infer_request_free(r);

    r = pair_request("\"parameters\":{\"binary_data_output\":true},\"outputs\":["
                     "{\"name\":\"ids\"},{\"name\":\"sum\",\"parameters\":{\"binary_data\":false}}],");
    cr_expect(r->binary_output);
    cr_assert_eq(r->n_outputs, 2);
    cr_expect_str_eq(r->outputs[0].name, "ids");
    cr_expect(r->outputs[0].binary, "binary_data_output is the default");
    cr_expect_str_eq(r->outputs[1].name, "sum");
    cr_expect_not(r->outputs[1].binary, "an output's own binary_data wins");
    srv_infer_request_free(r);

    r = pair_request("\"outputs\":[{\"name\":\"ids\",\"parameters\":{\"binary_data\":true}}],");
    cr_expect_not(r->binary_output);
    cr_expect(r->outputs[0].binary);
    srv_infer_request_free(r);
    srv_infer_request_free(NULL);
}

/* ---- request: binary data ------------------------------------------------- */

Test(srv_codec, binary_inputs_are_taken_from_the_body_in_input_order)
{
    const char *json =
        "{\"inputs\":["
        "{\"name\":\"a\",\"shape\":[2,2],\"datatype\":\"FP32\","
        "\"parameters\":{\"binary_data_size\":16}},"
        "{\"name\":\"b\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":[-5,6]},"
        "{\"name\":\"c\",\"shape\":[3],\"datatype\":\"INT8\","
        "\"parameters\":{\"binary_data_size\":3,\"other\":1}},"
        "{\"name\":\"d\",\"shape\":[2],\"datatype\":\"BOOL\","
        "\"parameters\":{\"binary_data_size\":2}}]}";
    const float a[4] = {1.25f, -0.5f, 3e-39f, 7.0f};
    const int8_t c[3] = {-128, 0, 127};
    const uint8_t d[2] = {1, 0};
    size_t header_len;
    srv_buf_t body =
        body_build(json, (const void *const[]){a, c, d}, (const size_t[]){16, 3, 2}, 3, &header_len);
    srv_infer_request_t *r = NULL;
    int rc = srv_infer_request_parse(body.data, body.len, header_len, &r);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_assert_eq(r->n_inputs, 4);
    cr_expect_str_eq(r->inputs[0].name, "a");
    cr_expect_eq(memcmp(r->inputs[0].tensor.data, a, sizeof a), 0);
    cr_expect_eq(((int64_t *)r->inputs[1].tensor.data)[0], -5);
    cr_expect_eq(((int64_t *)r->inputs[1].tensor.data)[1], 6);
    cr_expect_eq(memcmp(r->inputs[2].tensor.data, c, sizeof c), 0);
    cr_expect_eq(memcmp(r->inputs[3].tensor.data, d, sizeof d), 0);
    srv_infer_request_free(r);
    srv_buf_free(&body);
}

Test(srv_codec, a_header_length_covering_the_whole_body_is_plain_json)
{
    const char *json = one_input("INT32", "[2]", "[1,2]");
    srv_infer_request_t *r = NULL;
    cr_assert_eq(srv_infer_request_parse(json, strlen(json), strlen(json), &r), 0, "%s",
                 fs_errmsg());
    cr_expect_eq(((int32_t *)r->inputs[0].tensor.data)[1], 2);
    srv_infer_request_free(r);
}

Test(srv_codec, binary_sizes_that_do_not_add_up_are_refused)
{
    const char *json = "{\"inputs\":[{\"name\":\"a\",\"shape\":[2,2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":16}}]}";
    const uint8_t bytes[32] = {0};
    size_t header_len;
    srv_infer_request_t *r = NULL;

    srv_buf_t body = body_build(json, (const void *const[]){bytes}, (const size_t[]){10}, 1,
                                &header_len);
    cr_expect_eq(srv_infer_request_parse(body.data, body.len, header_len, &r), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "input 'a': binary_data_size is 16 but only 10 bytes of binary "
                                  "data are left (6 missing)");
    srv_buf_free(&body);

    body = body_build(json, (const void *const[]){bytes}, (const size_t[]){20}, 1, &header_len);
    cr_expect_eq(srv_infer_request_parse(body.data, body.len, header_len, &r), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "the binary data has 4 bytes left over: the inputs' "
                                  "binary_data_size add up to 16 of its 20 bytes");
    cr_expect_eq(srv_infer_request_parse(body.data, body.len, body.len + 1, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "header length"), "%s", fs_errmsg());
    srv_buf_free(&body);

    cr_expect_eq(srv_infer_request_parse(json, strlen(json), 0, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'a': binary_data_size is 16 but the request has no "
                                  "binary data"),
              "%s", fs_errmsg());

    const char *wrong = "{\"inputs\":[{\"name\":\"a\",\"shape\":[2,2],\"datatype\":\"FP32\","
                        "\"parameters\":{\"binary_data_size\":12}}]}";
    body = body_build(wrong, (const void *const[]){bytes}, (const size_t[]){12}, 1, &header_len);
    cr_expect_eq(srv_infer_request_parse(body.data, body.len, header_len, &r), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'a': binary_data_size is 12 but shape [2,2] of FP32 takes 16 bytes");
    srv_buf_free(&body);

    const char *negative = "{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"INT8\","
                           "\"parameters\":{\"binary_data_size\":-1}}]}";
    parse_fails(negative, FS_EINVAL, "input 'a': \"binary_data_size\" is -1, not a non-negative");

    const char *flags = "{\"inputs\":[{\"name\":\"m\",\"shape\":[3],\"datatype\":\"BOOL\","
                        "\"parameters\":{\"binary_data_size\":3}}]}";
    const uint8_t bad_bool[3] = {0, 1, 2};
    body = body_build(flags, (const void *const[]){bad_bool}, (const size_t[]){3}, 1, &header_len);
    cr_expect_eq(srv_infer_request_parse(body.data, body.len, header_len, &r), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "input 'm': BOOL byte 2 at index 2 is neither 0 nor 1");
    cr_expect_null(r);
    srv_buf_free(&body);
}

/* ---- the response --------------------------------------------------------- */

Test(srv_codec, response_json_round_trips_float32_exactly)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("\"id\":\"r1\",");
    const float v[6] = {0.1f, -0.0f, 3.4028235e38f, 1.4e-45f, 1.17549435e-38f, 16777217.0f};
    const float w[6] = {123456.789f, -2.5f, 1e-7f, 0.33333334f, 8388607.5f, 1e9f};
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {2, 6}}, (float[12]){0});
    memcpy(sum->data, v, sizeof v);
    memcpy((float *)sum->data + 6, w, sizeof w);
    const int64_t idv[3] = {INT64_MIN, INT64_MAX, -1};
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {3}}, idv);
    srv_buf_t out = {0};
    size_t json_len = 0;
    pair_encode(&f, r, sum, ids, &out, &json_len);
    cr_expect_eq(json_len, out.len, "nothing binary");

    cJSON *root = response_parse(&out, json_len);
    cr_expect_str_eq(cJSON_GetObjectItem(root, "id")->valuestring, "r1");
    cr_expect_str_eq(cJSON_GetObjectItem(root, "model_name")->valuestring, "pair");
    cr_expect_str_eq(cJSON_GetObjectItem(root, "model_version")->valuestring, "2");
    cJSON *outs = cJSON_GetObjectItem(root, "outputs");
    cr_assert_eq(cJSON_GetArraySize(outs), 2);
    cJSON *o0 = cJSON_GetArrayItem(outs, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(o0, "name")->valuestring, "sum");
    cr_expect_str_eq(cJSON_GetObjectItem(o0, "datatype")->valuestring, "FP32");
    cJSON *shape = cJSON_GetObjectItem(o0, "shape");
    cr_expect_eq(cJSON_GetArraySize(shape), 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valuedouble, 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valuedouble, 6);
    cJSON *data = cJSON_GetObjectItem(o0, "data");
    cr_assert_eq(cJSON_GetArraySize(data), 12);
    for (int i = 0; i < 12; i++) {
        float back = (float)cJSON_GetArrayItem(data, i)->valuedouble;
        float want = ((float *)sum->data)[i];
        cr_expect_eq(memcmp(&back, &want, sizeof back), 0, "element %d: %.9g came back as %.9g", i,
                     want, back);
    }
    cJSON *o1 = cJSON_GetArrayItem(outs, 1);
    cr_expect_str_eq(cJSON_GetObjectItem(o1, "datatype")->valuestring, "INT64");
    cr_expect_null(cJSON_GetObjectItem(o1, "parameters"));
    cr_expect(strstr(out.data, "\"data\":[-9223372036854775808,9223372036854775807,-1]"),
              "%.*s", (int)out.len, out.data);
    cJSON_Delete(root);

    /* The buffer is reused: a second encode starts it over. */
    pair_encode(&f, r, sum, ids, &out, &json_len);
    cr_expect_eq(out.data[0], '{');
    cr_expect_eq(json_len, out.len);

    srv_buf_free(&out);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

/* The "data" text the encoder writes for one tensor of `dt`. */
static void data_text_expect(codec_fixture_t *f, eng_dtype_t dt, int64_t n, const void *values,
                             const char *want)
{
    srv_infer_request_t *r = pair_request("\"outputs\":[{\"name\":\"sum\"}],");
    eng_tensor_t *t = tensor_new(dt, (eng_shape_t){1, {n}}, values);
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, (int64_t[2]){0});
    srv_buf_t out = {0};
    size_t json_len = 0;
    pair_encode(f, r, t, ids, &out, &json_len);
    char needle[512];
    snprintf(needle, sizeof needle, "\"datatype\":\"%s\",\"shape\":[%lld],\"data\":%s}",
             srv_datatype_name(dt), (long long)n, want);
    cr_expect(strstr(out.data, needle), "%s: want %s in %.*s", srv_datatype_name(dt), needle,
              (int)out.len, out.data);
    cJSON_Delete(response_parse(&out, json_len));
    srv_buf_free(&out);
    eng_tensor_free(t);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
}

Test(srv_codec, response_writes_every_datatype_exactly)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    data_text_expect(&f, ENG_DT_BOOL, 3, (uint8_t[]){1, 0, 1}, "[true,false,true]");
    data_text_expect(&f, ENG_DT_UINT8, 3, (uint8_t[]){0, 7, 255}, "[0,7,255]");
    data_text_expect(&f, ENG_DT_UINT16, 2, (uint16_t[]){0, 65535}, "[0,65535]");
    data_text_expect(&f, ENG_DT_UINT32, 2, (uint32_t[]){10, 4294967295u}, "[10,4294967295]");
    data_text_expect(&f, ENG_DT_UINT64, 2, (uint64_t[]){0, UINT64_MAX},
                     "[0,18446744073709551615]");
    data_text_expect(&f, ENG_DT_INT8, 3, (int8_t[]){-128, 0, 127}, "[-128,0,127]");
    data_text_expect(&f, ENG_DT_INT16, 2, (int16_t[]){-32768, 32767}, "[-32768,32767]");
    data_text_expect(&f, ENG_DT_INT32, 3, (int32_t[]){INT32_MIN, -10, 1000000},
                     "[-2147483648,-10,1000000]");
    data_text_expect(&f, ENG_DT_FLOAT, 5, (float[]){0.1f, -2.0f, 1e9f, 1.5e-10f, 100.0f},
                     "[0.1,-2,1e+09,1.5e-10,100]");
    data_text_expect(&f, ENG_DT_DOUBLE, 3, (double[]){0.1, -3.0, 1e300},
                     "[0.1,-3,1e+300]");
    data_text_expect(&f, ENG_DT_FLOAT16, 3,
                     (uint16_t[]){eng_float_to_half(0.5f), eng_float_to_half(-2.0f), 0x7bff},
                     "[0.5,-2,65504]");
    data_text_expect(&f, ENG_DT_BFLOAT16, 2,
                     (uint16_t[]){eng_float_to_bf16(1.5f), eng_float_to_bf16(0.1f)},
                     "[1.5,0.100097656]");
    data_text_expect(&f, ENG_DT_INT32, 0, (int32_t[]){0}, "[]");
    fixture_close(&f);
}

Test(srv_codec, nan_and_infinity_are_written_as_strings)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    data_text_expect(&f, ENG_DT_FLOAT, 5, (float[]){NAN, INFINITY, -INFINITY, -0.0f, 0.0f},
                     "[\"NaN\",\"Infinity\",\"-Infinity\",-0,0]");
    data_text_expect(&f, ENG_DT_DOUBLE, 3, (double[]){-NAN, -INFINITY, INFINITY},
                     "[\"NaN\",\"-Infinity\",\"Infinity\"]");
    data_text_expect(&f, ENG_DT_FLOAT16, 2, (uint16_t[]){0x7e00, 0xfc00}, "[\"NaN\",\"-Infinity\"]");
    fixture_close(&f);
}

Test(srv_codec, requested_outputs_come_in_request_order_and_binary_ones_after_the_json)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request(
        "\"outputs\":[{\"name\":\"ids\",\"parameters\":{\"binary_data\":true}},{\"name\":\"sum\"}],");
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {1, 3}}, (float[]){2, 4, 6});
    const int64_t idv[3] = {8, -10, 1LL << 60};
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {3}}, idv);
    srv_buf_t out = {0};
    size_t json_len = 0;
    pair_encode(&f, r, sum, ids, &out, &json_len);
    cr_assert_eq(out.len, json_len + sizeof idv);
    cr_expect_eq(memcmp(out.data + json_len, idv, sizeof idv), 0);

    cJSON *root = response_parse(&out, json_len);
    cJSON *outs = cJSON_GetObjectItem(root, "outputs");
    cr_assert_eq(cJSON_GetArraySize(outs), 2);
    cJSON *o0 = cJSON_GetArrayItem(outs, 0), *o1 = cJSON_GetArrayItem(outs, 1);
    cr_expect_str_eq(cJSON_GetObjectItem(o0, "name")->valuestring, "ids");
    cr_expect_null(cJSON_GetObjectItem(o0, "data"));
    cJSON *params = cJSON_GetObjectItem(o0, "parameters");
    cr_assert_not_null(params);
    cr_expect_eq(cJSON_GetObjectItem(params, "binary_data_size")->valuedouble, 24);
    cr_expect_str_eq(cJSON_GetObjectItem(o1, "name")->valuestring, "sum");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o1, "data")), 3);
    cJSON_Delete(root);
    srv_infer_request_free(r);

    /* Only what was asked for. */
    r = pair_request("\"outputs\":[{\"name\":\"sum\"}],");
    pair_encode(&f, r, sum, ids, &out, &json_len);
    cr_expect_eq(json_len, out.len);
    root = response_parse(&out, json_len);
    outs = cJSON_GetObjectItem(root, "outputs");
    cr_expect_eq(cJSON_GetArraySize(outs), 1);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 0), "name")->valuestring, "sum");
    cr_expect_null(cJSON_GetObjectItem(root, "id"), "no id asked, none given");
    cJSON_Delete(root);

    srv_buf_free(&out);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, the_two_part_response_is_the_json_and_the_binary_outputs_in_order)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("\"parameters\":{\"binary_data_output\":true},");
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {1, 3}}, (float[]){2, 4, 6});
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, (int64_t[]){8, -10});
    eng_tensor_t *outs[2] = {sum, ids};
    srv_buf_t whole = {0}, json = {0};
    size_t json_len = 0;
    cr_assert_eq(srv_infer_response_encode(f.model, "pair", 1, r, outs, 2, &whole, &json_len), 0,
                 "%s", fs_errmsg());
    cr_assert_eq(srv_infer_response_encode_json(f.model, "pair", 1, r, outs, 2, &json), 0, "%s",
                 fs_errmsg());
    cr_expect_eq(json.len, json_len, "the JSON alone, no binary bytes after it");
    cr_expect_eq(memcmp(json.data, whole.data, json_len), 0);
    size_t idx[3] = {99, 99, 99};
    cr_assert_eq(srv_infer_response_binary(f.model, r, 2, idx), 2);
    cr_expect_eq(srv_infer_response_binary(f.model, r, 2, NULL), 2, "counted, idx NULL");
    cr_expect_eq(idx[0], 0, "model order: sum");
    cr_expect_eq(idx[1], 1, "then ids");
    /* The parts laid end to end are the one-buffer response. */
    size_t at = json_len;
    for (size_t i = 0; i < 2; i++) {
        size_t n = eng_tensor_bytes(outs[idx[i]]);
        cr_expect_eq(memcmp(whole.data + at, outs[idx[i]]->data, n), 0, "part %zu", i);
        at += n;
    }
    cr_expect_eq(at, whole.len);
    srv_buf_free(&whole);
    srv_buf_free(&json);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);

    /* A JSON output adds no part. */
    r = pair_request("\"outputs\":[{\"name\":\"sum\"},{\"name\":\"ids\","
                     "\"parameters\":{\"binary_data\":true}}],");
    cr_expect_eq(srv_infer_response_binary(f.model, r, 2, idx), 1);
    cr_expect_eq(idx[0], 1);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, aligned_binary_input_views_the_body_and_an_unaligned_one_is_copied)
{
    const char *json = "{\"inputs\":[{\"name\":\"a\",\"shape\":[16],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":64}},"
                       "{\"name\":\"b\",\"shape\":[3],\"datatype\":\"INT8\","
                       "\"parameters\":{\"binary_data_size\":3}},"
                       "{\"name\":\"c\",\"shape\":[2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":8}}]}";
    size_t hl = strlen(json);
    float a[16], c[2] = {1.5f, -2.0f};
    for (int i = 0; i < 16; i++)
        a[i] = (float)i * 0.25f;
    const int8_t b[3] = {1, -2, 3};
    /* The body placed so that its binary section starts 64-aligned, as
     * http.c's body_reserve places it. */
    /* aligned_alloc wants a multiple of the alignment (ASan enforces it). */
    char *raw = aligned_alloc(64, (64 + hl + 64 + 3 + 8 + 64 + 63) / 64 * 64);
    cr_assert_not_null(raw);
    char *body = raw + (64 - hl % 64) % 64;
    memcpy(body, json, hl);
    memcpy(body + hl, a, 64);
    memcpy(body + hl + 64, b, 3);
    memcpy(body + hl + 67, c, 8);
    srv_infer_request_t *r = NULL;
    cr_assert_eq(srv_infer_request_parse(body, hl + 75, hl, &r), 0, "%s", fs_errmsg());
    cr_expect(r->inputs[0].borrowed);
    cr_expect_eq(r->inputs[0].tensor.data, body + hl, "a views the body");
    cr_expect_eq(memcmp(r->inputs[0].tensor.data, a, 64), 0);
    cr_expect(r->inputs[1].borrowed, "b starts 64 bytes on: aligned too");
    cr_expect_eq(memcmp(r->inputs[1].tensor.data, b, 3), 0);
    cr_expect(!r->inputs[2].borrowed, "c starts unaligned: copied");
    cr_expect_neq(r->inputs[2].tensor.data, body + hl + 67);
    cr_expect_eq(memcmp(r->inputs[2].tensor.data, c, 8), 0);
    srv_infer_request_free(r);
    free(raw);
}

Test(srv_codec, binary_data_output_sends_every_output_binary_in_model_order)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("\"parameters\":{\"binary_data_output\":true},");
    const float sv[3] = {2, 4, 6};
    const int64_t idv[2] = {4, 5};
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {1, 3}}, sv);
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, idv);
    srv_buf_t out = {0};
    size_t json_len = 0;
    pair_encode(&f, r, sum, ids, &out, &json_len);
    cr_assert_eq(out.len, json_len + sizeof sv + sizeof idv);
    cr_expect_eq(memcmp(out.data + json_len, sv, sizeof sv), 0);
    cr_expect_eq(memcmp(out.data + json_len + sizeof sv, idv, sizeof idv), 0);
    cr_expect_eq(memcmp(out.data, "{\"model_name\":\"pair\",\"model_version\":\"2\",\"outputs\":["
                                  "{\"name\":\"sum\",\"datatype\":\"FP32\",\"shape\":[1,3],"
                                  "\"parameters\":{\"binary_data_size\":12}},"
                                  "{\"name\":\"ids\",\"datatype\":\"INT64\",\"shape\":[2],"
                                  "\"parameters\":{\"binary_data_size\":16}}]}",
                        json_len),
                 0, "%.*s", (int)json_len, out.data);
    srv_buf_free(&out);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, id_is_escaped_as_json_requires)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("\"id\":\"a\\\"b\\\\c\\u0001d\\n\\u001fe/\\u00e9\",");
    cr_expect_str_eq(r->id, "a\"b\\c\001d\n\037e/\xc3\xa9");
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {1, 3}}, (float[]){1, 2, 3});
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, (int64_t[]){1, 2});
    srv_buf_t out = {0};
    size_t json_len = 0;
    pair_encode(&f, r, sum, ids, &out, &json_len);
    const char *want = "{\"id\":\"a\\\"b\\\\c\\u0001d\\n\\u001fe/\xc3\xa9\",";
    cr_expect_eq(strncmp(out.data, want, strlen(want)), 0, "%.*s", (int)json_len, out.data);
    cJSON *root = response_parse(&out, json_len);
    cr_expect_str_eq(cJSON_GetObjectItem(root, "id")->valuestring, r->id);
    cJSON_Delete(root);
    srv_buf_free(&out);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, model_name_defaults_to_the_models_and_an_unknown_version_is_left_out)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("\"outputs\":[{\"name\":\"ids\"}],");
    eng_tensor_t *sum = tensor_new(ENG_DT_FLOAT, (eng_shape_t){2, {1, 3}}, (float[]){1, 2, 3});
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, (int64_t[]){1, 2});
    eng_tensor_t *outs[2] = {sum, ids};
    srv_buf_t out = {0};
    size_t json_len = 0;
    cr_assert_eq(srv_infer_response_encode(f.model, NULL, -1, r, outs, 2, &out, &json_len), 0,
                 "%s", fs_errmsg());
    const char *want = "{\"model_name\":\"pair\",\"outputs\":[{\"name\":\"ids\","
                       "\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,2]}]}";
    cr_expect_eq(json_len, strlen(want));
    cr_expect_eq(memcmp(out.data, want, json_len), 0, "%.*s", (int)json_len, out.data);
    srv_buf_free(&out);
    eng_tensor_free(sum);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, outputs_the_protocol_cannot_name_are_refused)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = pair_request("");
    float c[2] = {1, 2};
    eng_tensor_t sum = {.dtype = ENG_DT_COMPLEX64, .shape = {1, {1}}, .data = c};
    eng_tensor_t *ids = tensor_new(ENG_DT_INT64, (eng_shape_t){1, {2}}, (int64_t[]){1, 2});
    eng_tensor_t *outs[2] = {&sum, ids};
    srv_buf_t out = {0};
    size_t json_len = 0;
    cr_expect_eq(srv_infer_response_encode(f.model, "pair", 1, r, outs, 2, &out, &json_len),
                 FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "output 'sum' is complex64, which the protocol has no datatype for");
    cr_expect_eq(out.len, 0);
    cr_expect_eq(srv_infer_response_encode(f.model, "pair", 1, r, outs, 1, &out, &json_len),
                 FS_EINVAL);
    srv_buf_free(&out);
    eng_tensor_free(ids);
    srv_infer_request_free(r);
    fixture_close(&f);
}

/* ---- binding -------------------------------------------------------------- */

/* Parses `inputs_json` (the "inputs" array's body and any keys after it)
 * and binds to f's model; returns bind's result. */
static int bind_try(codec_fixture_t *f, const char *inputs_json, eng_tensor_t *views)
{
    char json[1024];
    snprintf(json, sizeof json, "{\"inputs\":[%s}", inputs_json);
    srv_infer_request_t *r = parse_ok(json);
    int rc = srv_infer_bind(r, f->model, views);
    srv_infer_request_free(r);
    return rc;
}

#define A_OK "{\"name\":\"a\",\"shape\":[2,3],\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6]}"
#define B_OK "{\"name\":\"b\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":[7,8]}"

Test(srv_codec, bind_puts_inputs_in_model_order)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    srv_infer_request_t *r = parse_ok("{\"inputs\":[" B_OK "," A_OK "]}");
    eng_tensor_t views[2];
    cr_assert_eq(srv_infer_bind(r, f.model, views), 0, "%s", fs_errmsg());
    cr_expect_eq(views[0].data, r->inputs[1].tensor.data);
    cr_expect_eq(views[0].dtype, ENG_DT_FLOAT);
    cr_expect_eq(views[0].shape.dims[0], 2);
    cr_expect_eq(views[1].data, r->inputs[0].tensor.data);
    cr_expect_eq(views[1].dtype, ENG_DT_INT64);
    srv_infer_request_free(r);
    fixture_close(&f);
}

Test(srv_codec, bind_refuses_what_does_not_fit_the_model)
{
    codec_fixture_t f;
    fixture_open_pair(&f);
    static const struct {
        const char *inputs, *msg;
    } cases[] = {
        {A_OK "]", "the request lacks input 'b', which the model takes"},
        {A_OK "," B_OK ",{\"name\":\"c\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]",
         "input 'c' is not an input of the model (it takes 'a', 'b')"},
        {A_OK "," A_OK "," B_OK "]", "input 'a' is given twice"},
        {A_OK ",{\"name\":\"b\",\"shape\":[2],\"datatype\":\"INT32\",\"data\":[7,8]}]",
         "input 'b': expected INT64 [2], got INT32 [2] (wrong dtype)"},
        {"{\"name\":\"a\",\"shape\":[6],\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6]}," B_OK "]",
         "input 'a': expected FP32 [n,3], got FP32 [6] (rank 1, not 2)"},
        {"{\"name\":\"a\",\"shape\":[2,4],\"datatype\":\"FP32\",\"data\":[[1,2,3,4],[5,6,7,8]]},"
         B_OK "]",
         "input 'a': expected FP32 [n,3], got FP32 [2,4] (dim 1 must be 3)"},
        {A_OK "," B_OK "],\"outputs\":[{\"name\":\"sum\"},{\"name\":\"nope\"}]",
         "requested output 'nope' is not an output of the model (it has 'sum', 'ids')"},
    };
    eng_tensor_t views[2];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(bind_try(&f, cases[i].inputs, views), FS_EINVAL, "%s", cases[i].inputs);
        cr_expect_str_eq(fs_errmsg(), cases[i].msg, "%s", cases[i].inputs);
    }
    fixture_close(&f);
}

Test(srv_codec, bind_checks_the_mlp_input)
{
    codec_fixture_t f;
    fixture_open_mlp(&f);
    eng_tensor_t view;
    cr_expect_eq(bind_try(&f, "{\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"INT64\","
                              "\"data\":[1,2]}]",
                          &view),
                 FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'input': expected FP32 [batch,64], got INT64 [1,2] (wrong dtype)");
    cr_expect_eq(bind_try(&f, "{\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"FP32\","
                              "\"data\":[1,2]}]",
                          &view),
                 FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "input 'input': expected FP32 [batch,64], got FP32 [1,2] (dim 1 must be 64)");
    cr_expect_eq(bind_try(&f, "{\"name\":\"image\",\"shape\":[1],\"datatype\":\"FP32\","
                              "\"data\":[1]}]",
                          &view),
                 FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "input 'image' is not an input of the model (it takes 'input')");
    fixture_close(&f);
}

/* The three places an input is checked -- the codec binding a request, the
 * batcher taking one, the planner of a direct run -- word one bad input
 * alike: only the dtype names (the protocol's in the codec) and the model
 * the batcher names differ. */
Test(srv_codec, bind_batcher_and_planner_word_a_bad_input_alike)
{
    const char *want_codec =
        "input 'input': expected FP32 [batch,64], got FP32 [1,2] (dim 1 must be 64)";
    const char *want_planner =
        "input 'input': expected float [batch,64], got float [1,2] (dim 1 must be 64)";
    const char *want_batcher = "input 'input' of model 'mlp': expected float [batch,64], got "
                               "float [1,2] (dim 1 must be 64)";

    codec_fixture_t f;
    fixture_open_mlp(&f);
    eng_tensor_t view;
    cr_expect_eq(bind_try(&f, "{\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"FP32\","
                              "\"data\":[1,2]}]",
                          &view),
                 FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), want_codec, "the codec");

    float data[2] = {1, 2};
    eng_tensor_t in = {.dtype = ENG_DT_FLOAT, .shape = {2, {1, 2}}, .data = data};
    eng_tensor_t *outs[1] = {NULL};
    cr_expect_eq(eng_model_run(f.model, &in, 1, outs), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), want_planner, "the planner");
    fixture_close(&f);

    reg_fixture_t rf;
    reg_fixture_open(&rf);
    repo_copy(&rf, "mlp", "mlp", 1);
    cr_assert_eq(eng_registry_load(rf.reg, "mlp"), 0, "%s", fs_errmsg());
    eng_served_t *s = NULL;
    cr_assert_eq(eng_registry_acquire(rf.reg, "mlp", -1, &s), 0, "%s", fs_errmsg());
    treq_t t;
    treq_init(&t, 1, &(eng_shape_t){2, {1, 2}}, 1);
    cr_expect_eq(eng_served_submit(s, &t.req), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), want_batcher, "the batcher");
    treq_fini(&t);
    eng_served_release(s);
    reg_fixture_close(&rf);
}

/* ---- a full round --------------------------------------------------------- */

Test(srv_codec, mlp_round_trip_parse_bind_run_encode)
{
    codec_fixture_t f;
    fixture_open_mlp(&f);
    srv_buf_t body = {0};
    cr_assert_eq(srv_buf_printf(&body, "{\"id\":\"round\",\"inputs\":[{\"name\":\"input\","
                                       "\"shape\":[2,64],\"datatype\":\"FP32\",\"data\":["),
                 0);
    for (int b = 0; b < 2; b++) {
        cr_assert_eq(srv_buf_printf(&body, "%s[", b ? "," : ""), 0);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(srv_buf_printf(&body, "%s%.3f", i ? "," : "",
                                        (double)((b * 64 + i) * 37 % 101) / 101.0 - 0.5),
                         0);
        cr_assert_eq(srv_buf_printf(&body, "]"), 0);
    }
    cr_assert_eq(srv_buf_printf(&body, "]}]}"), 0);

    srv_infer_request_t *r = NULL;
    cr_assert_eq(srv_infer_request_parse(body.data, body.len, 0, &r), 0, "%s", fs_errmsg());
    eng_tensor_t view;
    cr_assert_eq(srv_infer_bind(r, f.model, &view), 0, "%s", fs_errmsg());
    eng_tensor_t *outs[1] = {NULL};
    cr_assert_eq(eng_model_run(f.model, &view, 1, outs), 0, "%s", fs_errmsg());
    srv_buf_t out = {0};
    size_t json_len = 0;
    cr_assert_eq(srv_infer_response_encode(f.model, "mlp", 1, r, outs, 1, &out, &json_len), 0,
                 "%s", fs_errmsg());

    cJSON *root = response_parse(&out, json_len);
    cr_expect_str_eq(cJSON_GetObjectItem(root, "id")->valuestring, "round");
    cr_expect_str_eq(cJSON_GetObjectItem(root, "model_name")->valuestring, "mlp");
    cr_expect_str_eq(cJSON_GetObjectItem(root, "model_version")->valuestring, "1");
    cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "outputs"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(o, "name")->valuestring, "probabilities");
    cr_expect_str_eq(cJSON_GetObjectItem(o, "datatype")->valuestring, "FP32");
    cJSON *shape = cJSON_GetObjectItem(o, "shape");
    cr_assert_eq(cJSON_GetArraySize(shape), 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valuedouble, 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valuedouble, 10);
    cJSON *data = cJSON_GetObjectItem(o, "data");
    cr_assert_eq(cJSON_GetArraySize(data), 20);
    double row[2] = {0, 0};
    for (int i = 0; i < 20; i++) {
        float back = (float)cJSON_GetArrayItem(data, i)->valuedouble;
        cr_expect_eq(back, ((float *)outs[0]->data)[i], "element %d", i);
        row[i / 10] += back;
    }
    cr_expect(fabs(row[0] - 1) < 1e-4 && fabs(row[1] - 1) < 1e-4, "rows sum to %f, %f", row[0],
              row[1]);
    cJSON_Delete(root);

    srv_buf_free(&out);
    eng_tensor_free(outs[0]);
    srv_infer_request_free(r);
    srv_buf_free(&body);
    fixture_close(&f);
}

Test(srv_codec, a_raw_nul_byte_anywhere_in_the_json_is_refused)
{
    /* Inside a string (the id would be read as "a"), and after the object. */
    static const char with_nul_in_id[] = "{\"id\":\"a\0b\",\"inputs\":[{\"name\":\"x\",\"datatype\":"
                                         "\"FP32\",\"shape\":[1],\"data\":[1]}]}";
    static const char with_nul_after[] = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\","
                                         "\"shape\":[1],\"data\":[1]}]}\0{}";
    const char *bodies[] = {with_nul_in_id, with_nul_after};
    size_t lens[] = {sizeof with_nul_in_id - 1, sizeof with_nul_after - 1};
    size_t at[] = {8, sizeof with_nul_after - 4};
    for (size_t i = 0; i < 2; i++) {
        srv_infer_request_t *r = NULL;
        cr_expect_eq(srv_infer_request_parse(bodies[i], lens[i], 0, &r), FS_EPARSE);
        cr_expect_null(r);
        char want[64];
        snprintf(want, sizeof want, "a NUL byte at byte %zu of %zu", at[i], lens[i]);
        cr_expect(strstr(fs_errmsg(), want), "%s", fs_errmsg());
    }
}

Test(srv_codec, ragged_data_is_refused_even_when_its_leaf_count_fits)
{
    /* Eight values for [2,2,2] each time, but not one regular array. */
    const char *ragged[] = {"[[1,[2]],3,[[4,5],6,[7,8]]]", "[[1,2,3],[4,5,6,7,8]]",
                            "[[1,2],3,4,5,6,7,8]", "[[[1,2],[3,4]],[[5,6,7,8]]]"};
    for (size_t i = 0; i < sizeof ragged / sizeof ragged[0]; i++)
        parse_fails(one_input("INT32", "[2,2,2]", ragged[i]), FS_EINVAL,
                    "input 'x': \"data\" is nested unevenly");
    /* Empty arrays nest regularly too. */
    srv_infer_request_t *r = parse_ok(one_input("FP32", "[2,0]", "[[],[]]"));
    srv_infer_request_free(r);
}

/* "data" one value inside `depth` arrays: "[[...[7]...]]". */
static const char *nested_data(int depth)
{
    static char text[512];
    int n = 0;
    for (int i = 0; i < depth; i++)
        text[n++] = '[';
    text[n++] = '7';
    for (int i = 0; i < depth; i++)
        text[n++] = ']';
    text[n] = '\0';
    return text;
}

Test(srv_codec, data_nested_past_100_arrays_is_refused_as_triton_refuses_it)
{
    /* Triton's http_test.py sends one value 50 deep (taken) and 120 deep
     * (refused) for shape [1, 1]; the limit is 100. */
    char data[512];
    snprintf(data, sizeof data, "%s", nested_data(100));
    srv_infer_request_t *r = parse_ok(one_input("INT64", "[1,1]", data));
    cr_expect_eq(((const int64_t *)r->inputs[0].tensor.data)[0], 7);
    srv_infer_request_free(r);
    snprintf(data, sizeof data, "%s", nested_data(101));
    parse_fails(one_input("INT64", "[1,1]", data), FS_EINVAL,
                "input 'x': \"data\" nests 101 arrays deep: JSON nesting depth exceeds maximum "
                "allowed limit (100)");
    snprintf(data, sizeof data, "%s", nested_data(120));
    parse_fails(one_input("FP32", "[1,1]", data), FS_EINVAL, "nests 120 arrays deep");
}

Test(srv_codec, an_escaped_nul_is_refused_and_an_escaped_backslash_before_u0000_is_not)
{
    parse_fails("{\"id\":\"a\\u0000b\",\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\","
                "\"shape\":[1],\"data\":[1]}]}",
                FS_EINVAL, "holds \\u0000 in \"id\"");
    parse_fails("{\"inputs\":[{\"name\":\"x\\\\\\u0000\",\"datatype\":\"FP32\",\"shape\":[1],"
                "\"data\":[1]}]}",
                FS_EINVAL, "holds \\u0000");
    /* "\\u0000" is a backslash, then the text u0000. */
    srv_infer_request_t *r = parse_ok("{\"id\":\"a\\\\u0000b\",\"inputs\":[{\"name\":\"x\","
                                      "\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}");
    cr_expect_str_eq(r->id, "a\\u0000b");
    srv_infer_request_free(r);
}
