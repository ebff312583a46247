/* test_server_dtypes.c -- every numeric datatype end to end over HTTP: a
 * model whose inputs and outputs are FP16, BF16, FP64, INT8, INT16, UINT16,
 * UINT32 and UINT64 answers the KServe v2 protocol in JSON and in Triton's
 * binary tensor extension, with the values its ops compute (FP16 through a
 * float-only op, the rest through their own kernels). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/half.h"
#include "tests/engine/onnx_build.h"
#include "tests/server/server_fixture.h"

/* One row per datatype: input Xk of `onnx` type, shape [3], through `op`
 * (Add: Xk + Xk; others unary) to output Yk. */
typedef struct dt_row {
    const char *kserve;
    int onnx;
    const char *op;
    const char *data;      /* the JSON input values */
    const char *want;      /* the JSON output values, as the server writes them */
} dt_row_t;

static const dt_row_t rows[] = {
    {"FP16", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, "Exp", "[0,1,-1]",
     "[1,2.71875,0.36791992]"},
    {"BF16", ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, "Sqrt", "[4,2,0.25]",
     "[2,1.4140625,0.5]"},
    {"FP64", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, "Add", "[0.1,1e300,-2.5]",
     "[0.2,2e+300,-5]"},
    {"INT8", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, "Neg", "[127,-128,-5]", "[-127,-128,5]"},
    {"INT16", ONNX__TENSOR_PROTO__DATA_TYPE__INT16, "Add", "[16000,-7,32767]",
     "[32000,-14,-2]"},
    {"UINT16", ONNX__TENSOR_PROTO__DATA_TYPE__UINT16, "Add", "[65535,1,300]", "[65534,2,600]"},
    {"UINT32", ONNX__TENSOR_PROTO__DATA_TYPE__UINT32, "Add", "[4000000000,1,7]",
     "[3705032704,2,14]"},
    {"UINT64", ONNX__TENSOR_PROTO__DATA_TYPE__UINT64, "Add", "[9007199254740991,0,3]",
     "[18014398509481982,0,6]"},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* REPO/dtypes/1/model.onnx with one input and output per row. */
static void write_model(srv_fixture_t *f)
{
    mb_t b;
    mb_init(&b, 8, 17);
    for (size_t k = 0; k < N_ROWS; k++) {
        char x[8], y[8], io[24];
        snprintf(x, sizeof x, "X%zu", k);
        snprintf(y, sizeof y, "Y%zu", k);
        mb_input(&b, x, rows[k].onnx, 1, (int64_t[]){3}, NULL);
        if (strcmp(rows[k].op, "Add") == 0)
            snprintf(io, sizeof io, "%s,%s", x, x);
        else
            snprintf(io, sizeof io, "%s", x);
        mb_node(&b, rows[k].op, y, io, y);
        mb_output(&b, y, rows[k].onnx, 1, (int64_t[]){3});
    }
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    fixture_mkdir(f, "dtypes");
    fixture_mkdir(f, "dtypes/1");
    fixture_write(f, "dtypes", "1/model.onnx", (const char *)bytes, len);
    mb_free(&b);
}

static void start(srv_fixture_t *f)
{
    fixture_init(f);
    fixture_add_model(f, "mlp", "mlp", 1); /* beside a float model */
    write_model(f);
    f->cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    fixture_start(f);
}

/* The request's JSON with every row's input (values in JSON). */
static void json_request(srv_buf_t *body, bool binary_out)
{
    srv_buf_printf(body, "{\"inputs\":[");
    for (size_t k = 0; k < N_ROWS; k++)
        srv_buf_printf(body, "%s{\"name\":\"X%zu\",\"shape\":[3],\"datatype\":\"%s\",\"data\":%s}",
                       k ? "," : "", k, rows[k].kserve, rows[k].data);
    srv_buf_printf(body, "]%s}", binary_out ? ",\"parameters\":{\"binary_data_output\":true}" : "");
}

Test(srv_dtypes, json_in_json_out_for_every_numeric_datatype, .timeout = 60)
{
    srv_fixture_t f;
    start(&f);
    srv_buf_t body = {0};
    json_request(&body, false);
    srv_buf_append(&body, "", 1);
    http_resp_t r = http_post(f.port, "/v2/models/dtypes/infer", body.data);
    cr_assert_eq(r.status, 200, "%ld: %s", r.status, r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cr_assert_not_null(doc, "%s", r.body);
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(doc, "outputs");
    cr_assert_eq(cJSON_GetArraySize(outs), (int)N_ROWS);
    for (size_t k = 0; k < N_ROWS; k++) {
        char y[8];
        snprintf(y, sizeof y, "Y%zu", k);
        const cJSON *o = NULL, *it;
        cJSON_ArrayForEach(it, outs)
            if (strcmp(cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring, y) == 0)
                o = it;
        cr_assert_not_null(o, "no output %s", y);
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(o, "datatype")->valuestring,
                         rows[k].kserve);
        char *data = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, "data"));
        cr_expect_str_eq(data, rows[k].want, "%s: %s, want %s", rows[k].kserve, data,
                         rows[k].want);
        cJSON_free(data);
    }
    cJSON_Delete(doc);
    free(r.body);
    free(body.data);
    fixture_stop(&f);
}

/* FP16 in and out as raw bytes: Triton's binary tensor extension. */
Test(srv_dtypes, binary_float16_in_and_out, .timeout = 60)
{
    srv_fixture_t f;
    start(&f);
    srv_buf_t body = {0};
    srv_buf_printf(&body, "{\"inputs\":[");
    const float x0[3] = {0.0f, 1.0f, -1.0f};
    for (size_t k = 0; k < N_ROWS; k++) {
        if (k == 0)
            srv_buf_printf(&body, "{\"name\":\"X0\",\"shape\":[3],\"datatype\":\"FP16\","
                                  "\"parameters\":{\"binary_data_size\":6}}");
        else
            srv_buf_printf(&body, ",{\"name\":\"X%zu\",\"shape\":[3],\"datatype\":\"%s\","
                                  "\"data\":%s}", k, rows[k].kserve, rows[k].data);
    }
    srv_buf_printf(&body, "],\"outputs\":[{\"name\":\"Y0\",\"parameters\":"
                          "{\"binary_data\":true}}]}");
    size_t json_len = body.len;
    uint16_t raw[3];
    for (int i = 0; i < 3; i++)
        raw[i] = eng_float_to_half(x0[i]);
    srv_buf_append(&body, raw, sizeof raw);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", json_len);
    const char *headers[] = {hdr, "Content-Type: application/octet-stream", NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/dtypes/infer", body.data, body.len,
                            headers);
    cr_assert_eq(r.status, 200, "%ld: %s", r.status, r.body);
    size_t hl = (size_t)strtoull(r.header_len, NULL, 10);
    cr_assert(hl > 0 && hl + 6 == r.len, "header %zu, body %zu", hl, r.len);
    cr_expect(strstr(r.body, "\"datatype\":\"FP16\""), "%.*s", (int)hl, r.body);
    uint16_t y[3];
    memcpy(y, r.body + hl, sizeof y);
    for (int i = 0; i < 3; i++) {
        float want = eng_half_to_float(eng_float_to_half(expf(x0[i])));
        cr_expect_eq(eng_half_to_float(y[i]), want, "Y0[%d] = %g, want %g", i,
                     (double)eng_half_to_float(y[i]), (double)want);
    }
    free(r.body);
    free(body.data);
    fixture_stop(&f);
}

/* The model's metadata names every datatype as the protocol spells it. */
Test(srv_dtypes, metadata_names_every_datatype, .timeout = 60)
{
    srv_fixture_t f;
    start(&f);
    http_resp_t r = http_get(f.port, "/v2/models/dtypes");
    cr_assert_eq(r.status, 200, "%ld: %s", r.status, r.body);
    for (size_t k = 0; k < N_ROWS; k++) {
        char needle[64];
        snprintf(needle, sizeof needle, "\"datatype\":\"%s\"", rows[k].kserve);
        cr_expect(strstr(r.body, needle), "metadata lacks %s: %s", needle, r.body);
    }
    free(r.body);
    fixture_stop(&f);
}
