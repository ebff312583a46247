/* test_server_proto.c -- strict readiness and the protocol's corners over
 * HTTP: start-up that fails on a missing repository or a model that does
 * not load (and server.exit_on_error), readiness against the models that
 * should be loaded, Triton's raw binary requests, gzip and deflate bodies
 * and responses, load and unload parameters, class_count, GET /v2/, HEAD,
 * and the Authorization scheme in any case. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "server/app_impl.h"
#include "server/encoding.h"
#include "tests/fuzz/fuzz_model.h"
#include "tests/server/server_fixture.h"
#include "tests/server/zlib_test.h"

static long status_of(http_resp_t r)
{
    free(r.body);
    return r.status;
}

/* REPO/<name>/<version>/model.onnx holding `text` (not a model). */
static void add_broken_model(srv_fixture_t *f, const char *name, int version)
{
    char rel[64];
    fixture_mkdir(f, name);
    snprintf(rel, sizeof rel, "%s/%d", name, version);
    fixture_mkdir(f, rel);
    snprintf(rel, sizeof rel, "%d/model.onnx", version);
    fixture_write(f, name, rel, "not a model", 11);
}

/* REPO/pair/1/model.onnx: two inputs, a FP32 [n,3] and b INT64 [2]. */
static void add_pair_model(srv_fixture_t *f)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 3}, (const char *const[]){"n", NULL});
    fuzz_mb_input(&b, "b", FUZZ_DT_INT64, 1, (int64_t[]){2}, NULL);
    fuzz_mb_node(&b, "Add", "a,a", "sum");
    fuzz_mb_node(&b, "Identity", "b", "ids");
    fuzz_mb_output(&b, "sum", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 3},
                   (const char *const[]){"n", NULL});
    fuzz_mb_output(&b, "ids", FUZZ_DT_INT64, 1, (int64_t[]){2}, NULL);
    uint8_t *bytes = NULL;
    size_t len = 0;
    cr_assert_eq(fuzz_mb_pack(&b, &bytes, &len), 0);
    fuzz_mb_free(&b);
    fixture_mkdir(f, "pair");
    fixture_mkdir(f, "pair/1");
    fixture_write(f, "pair", "1/model.onnx", (const char *)bytes, len);
    free(bytes);
}

/* ---- start-up and readiness -------------------------------------------------------- */

Test(srv_ready, a_missing_repository_fails_start_up_naming_it, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    snprintf(f.cfg.repository, sizeof f.cfg.repository, "%s/not-there", f.repo);
    srv_app_t *app = NULL;
    int rc = srv_app_start(&f.cfg, &app);
    cr_expect_eq(rc, FS_ENOENT, "%s", fs_errmsg());
    cr_expect_null(app);
    cr_expect(strstr(fs_errmsg(), "not-there") && strstr(fs_errmsg(), "No such file"), "%s",
              fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "--exit-on-error=false"), "the way out is named: %s",
              fs_errmsg());
    /* Serving what loaded -- nothing -- it is ready once started. */
    f.cfg.server.exit_on_error = false;
    fixture_start(&f);
    http_resp_t r = http_get(f.port, "/v2/health/ready");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    fixture_stop(&f);
}

Test(srv_ready, a_repository_that_is_a_file_fails_start_up, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_write(&f, ".", "file", "x", 1);
    snprintf(f.cfg.repository, sizeof f.cfg.repository, "%s/file", f.repo);
    srv_app_t *app = NULL;
    cr_expect_eq(srv_app_start(&f.cfg, &app), FS_EIO, "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "is not a directory"), "%s", fs_errmsg());
    fixture_stop(&f);
}

Test(srv_ready, a_start_up_model_that_does_not_load_fails_start_up, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    add_broken_model(&f, "bad", 1);
    srv_app_t *app = NULL;
    int rc = srv_app_start(&f.cfg, &app);
    cr_expect_neq(rc, 0);
    cr_expect_null(app);
    cr_expect(strstr(fs_errmsg(), "1 of 2 start-up models did not load") &&
              strstr(fs_errmsg(), "model 'bad'"), "%s", fs_errmsg());
    /* With exit_on_error false the rest serves, and it is ready. */
    f.cfg.server.exit_on_error = false;
    fixture_start(&f);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/models/mlp/ready")), 200);
    cr_expect_neq(status_of(http_get(f.port, "/v2/models/bad/ready")), 200);
    fixture_stop(&f);
}

Test(srv_ready, only_the_listed_models_need_to_load, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    add_broken_model(&f, "bad", 1);
    f.cfg.models_all = false;
    f.cfg.n_models = 1;
    snprintf(f.cfg.models[0], sizeof f.cfg.models[0], "mlp");
    fixture_start(&f);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    fixture_stop(&f);
}

Test(srv_ready, ready_waits_for_every_model_that_should_be_loaded, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_add_model(&f, "cnn", "cnn", 1);
    f.cfg.models_all = false;
    f.cfg.n_models = 1;
    snprintf(f.cfg.models[0], sizeof f.cfg.models[0], "mlp");
    fixture_start(&f);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    /* cnn now should be loaded, and is not. */
    srv_control_want(f.app, "cnn", true);
    http_resp_t r = http_get(f.port, "/v2/health/ready");
    cr_expect_str_eq(r.retry_after, "1");
    http_expect_error(&r, 503, "1 of the 2 models that should be loaded is not ready; model 'cnn' is "
                          "UNAVAILABLE");
    /* Loaded through the API, it is. */
    cr_expect_eq(status_of(http_post(f.port, "/v2/repository/models/cnn/load", "")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    /* A model gone from the repository is not ready either. */
    srv_control_want(f.app, "gone", true);
    r = http_get(f.port, "/v2/health/ready");
    http_expect_error(&r, 503, "model 'gone' is not in the repository");
    srv_control_want(f.app, "gone", false);
    /* An unload says the model is no longer wanted: still ready. */
    cr_expect_eq(status_of(http_post(f.port, "/v2/repository/models/mlp/unload", "")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    /* A load that fails adds nothing (a mistyped name keeps the pod in). */
    cr_expect_neq(status_of(http_post(f.port, "/v2/repository/models/mpl/load", "")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    fixture_stop(&f);
}

Test(srv_ready, a_failed_reload_that_keeps_the_old_version_keeps_ready, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    add_broken_model(&f, "mlp", 2);
    http_resp_t r = http_post(f.port, "/v2/repository/models/mlp/load", "");
    cr_expect_neq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(status_of(http_get(f.port, "/v2/models/mlp/ready")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready")), 200);
    fixture_stop(&f);
}

/* ---- raw binary requests ------------------------------------------------------------ */

#define IHCL "Inference-Header-Content-Length: "

/* The JSON header of a binary response and where its binary part starts. */
static cJSON *binary_header(const http_resp_t *r, const char **bin)
{
    size_t n = (size_t)strtoul(r->header_len, NULL, 10);
    cr_assert(n > 0 && n <= r->len, "Inference-Header-Content-Length '%s' of %zu bytes",
              r->header_len, r->len);
    *bin = r->body + n;
    cJSON *doc = cJSON_ParseWithLength(r->body, n);
    cr_assert_not_null(doc, "%.*s", (int)n, r->body);
    return doc;
}

Test(srv_proto, a_raw_binary_request_is_the_single_inputs_bytes, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    float row[64];
    for (int i = 0; i < 64; i++)
        row[i] = (float)(i % 7) * 0.25f - 0.75f;
    const char *raw[] = {IHCL "0", "Content-Type: application/octet-stream", NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", row, sizeof row, raw);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(r.content_type, "application/octet-stream");
    const char *bin;
    cJSON *doc = binary_header(&r, &bin);
    const cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0);
    cJSON *shape = cJSON_GetObjectItem(out, "shape");
    cr_expect_eq(cJSON_GetArraySize(shape), 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, 1, "a batch of one");
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 10);
    cJSON *size = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "parameters"), "binary_data_size");
    cr_assert(cJSON_IsNumber(size), "every output comes in binary");
    cr_expect_eq(r.len - (size_t)(bin - r.body), 40u);
    /* The same answer as a JSON request with the same numbers. */
    srv_buf_t b = {0};
    srv_buf_puts(&b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                     "\"data\":[");
    for (int i = 0; i < 64; i++)
        srv_buf_printf(&b, "%s%.9g", i ? "," : "", (double)row[i]);
    srv_buf_puts(&b, "]}]}");
    http_resp_t j = http_do(f.port, "POST", "/v2/models/mlp/infer", b.data, b.len, NULL);
    cr_assert_eq(j.status, 200, "%s", j.body);
    cJSON *jdoc = cJSON_Parse(j.body);
    const cJSON *data = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(jdoc,
                                                                                   "outputs"), 0),
                                            "data");
    cr_assert_eq(cJSON_GetArraySize(data), 10);
    for (int i = 0; i < 10; i++) {
        float got;
        memcpy(&got, bin + 4 * i, 4);
        cr_expect_eq(got, (float)cJSON_GetArrayItem(data, i)->valuedouble, "output %d", i);
    }
    cJSON_Delete(jdoc);
    cJSON_Delete(doc);
    free(j.body);
    free(r.body);
    srv_buf_free(&b);
    fixture_stop(&f);
}

Test(srv_proto, a_raw_binary_request_deduces_one_variable_dim, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "encoder", "encoder", 1);
    fixture_start(&f);
    float x[3 * 64];
    for (int i = 0; i < 3 * 64; i++)
        x[i] = (float)(i % 11) * 0.1f;
    const char *raw[] = {IHCL "0", NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/encoder/infer", x, sizeof x, raw);
    cr_assert_eq(r.status, 200, "%s", r.body);
    const char *bin;
    cJSON *doc = binary_header(&r, &bin);
    cJSON *shape = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0),
                                       "shape");
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, 1);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 3, "seq deduced from 768 bytes");
    cr_expect_eq(r.len - (size_t)(bin - r.body), sizeof x);
    cJSON_Delete(doc);
    free(r.body);
    /* Not a whole number of 256-byte steps. */
    r = http_do(f.port, "POST", "/v2/models/encoder/infer", x, 300, raw);
    http_expect_error(&r, 400, "the raw binary request has 300 bytes, not a whole number of the "
                          "256-byte steps");
    fixture_stop(&f);
}

Test(srv_proto, raw_binary_requests_that_cannot_be_are_refused, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    add_pair_model(&f);
    fixture_start(&f);
    char bytes[256] = {0};
    const char *raw[] = {IHCL "0", NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", bytes, 255, raw);
    http_expect_error(&r, 400, "the raw binary request has 255 bytes but input 'input' (FP32 "
                          "[batch,64]) takes 256");
    r = http_do(f.port, "POST", "/v2/models/pair/infer", bytes, 12, raw);
    http_expect_error(&r, 400, "model 'pair' has 2 inputs: a raw binary request");
    r = http_do(f.port, "POST", "/infer", bytes, 256, raw);
    http_expect_error(&r, 400, "takes no raw binary request");
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", bytes, 0, raw);
    http_expect_error(&r, 400, "the raw binary request has 0 bytes");
    fixture_stop(&f);
}

/* ---- compressed bodies and responses ------------------------------------------------- */

/* A response body inflated with zlib directly (gzip or zlib format by
 * its header). Caller frees; *out_len set. */
static char *inflate_with(const char *data, size_t len, size_t *out_len)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    cr_assert_eq(inflateInit2(&zs, 15 + 32), Z_OK);
    size_t cap = len * 64 + 4096;
    char *out = malloc(cap + 1);
    cr_assert_not_null(out);
    zs.next_in = (unsigned char *)data;
    zs.avail_in = (uInt)len;
    zs.next_out = (unsigned char *)out;
    zs.avail_out = (uInt)cap;
    cr_assert_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    *out_len = cap - zs.avail_out;
    out[*out_len] = '\0';
    inflateEnd(&zs);
    return out;
}

static char *mlp_json(int rows)
{
    srv_buf_t b = {0};
    char shape[16];
    snprintf(shape, sizeof shape, "%d,64", rows);
    fixture_body_halves(&b, "input", shape, (size_t)rows * 64);
    srv_buf_append(&b, "", 1);
    return b.data;
}

Test(srv_proto, gzip_and_deflate_bodies_answer_as_the_plain_one, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    char *json = mlp_json(2);
    http_resp_t plain = http_post(f.port, "/v2/models/mlp/infer", json);
    cr_assert_eq(plain.status, 200, "%s", plain.body);
    for (int gz = 0; gz < 2; gz++) {
        size_t zlen;
        unsigned char *z = http_zlib_compress(gz, 6, json, strlen(json), &zlen);
        const char *hdr[] = {gz ? "Content-Encoding: gzip" : "Content-Encoding: deflate", NULL};
        http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen, hdr);
        cr_expect_eq(r.status, 200, "%s", r.body);
        cr_expect_str_eq(r.body, plain.body, "%s body", gz ? "gzip" : "deflate");
        free(r.body);
        free(z);
    }
    free(plain.body);
    free(json);
    fixture_stop(&f);
}

Test(srv_proto, a_compressed_binary_body_counts_its_header_uncompressed, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    /* As tritonclient sends it: the whole body gzipped, the header length
     * that of the JSON before compression. */
    const char *head = "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":256}}]}";
    size_t hl = strlen(head);
    char body[1024];
    memcpy(body, head, hl);
    for (int i = 0; i < 64; i++) {
        float v = 0.5f;
        memcpy(body + hl + 4 * i, &v, 4);
    }
    size_t zlen;
    unsigned char *z = http_zlib_compress(true, 6, body, hl + 256, &zlen);
    char ihcl[64];
    snprintf(ihcl, sizeof ihcl, IHCL "%zu", hl);
    const char *hdr[] = {"Content-Encoding: gzip", ihcl, NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen, hdr);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    /* And a raw binary request gzipped. */
    float row[64] = {0};
    unsigned char *zr = http_zlib_compress(true, 6, row, sizeof row, &zlen);
    const char *raw[] = {"Content-Encoding: gzip", IHCL "0", NULL};
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", zr, zlen, raw);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    free(zr);
    free(z);
    fixture_stop(&f);
}

Test(srv_proto, hostile_compressed_bodies_are_refused, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    f.cfg.server.max_body_bytes = 1 << 20;
    fixture_start(&f);
    const char *gzip[] = {"Content-Encoding: gzip", NULL};
    const char *deflate[] = {"Content-Encoding: deflate", NULL};
    /* A bomb: 64 MiB of blanks in about 64 KiB. */
    size_t big = (size_t)64 << 20, zlen;
    char *blanks = malloc(big);
    cr_assert_not_null(blanks);
    memset(blanks, ' ', big);
    unsigned char *z = http_zlib_compress(true, 6, blanks, big, &zlen);
    free(blanks);
    cr_assert_lt(zlen, (size_t)1 << 20, "the bomb itself is under the bound");
    http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen, gzip);
    http_expect_error(&r, 413, "inflates past server.max_body (1048576 bytes)");
    free(z);
    char *json = mlp_json(1);
    z = http_zlib_compress(true, 6, json, strlen(json), &zlen);
    /* Cut short. */
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen - 10, gzip);
    http_expect_error(&r, 400, "ends before its stream does");
    /* Bytes after the end. */
    unsigned char *more = malloc(zlen + 4);
    memcpy(more, z, zlen);
    memcpy(more + zlen, "junk", 4);
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", more, zlen + 4, gzip);
    http_expect_error(&r, 400, "4 bytes after the end of its stream");
    free(more);
    /* gzip data labelled deflate: not a zlib header. */
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen, deflate);
    http_expect_error(&r, 400, "is not valid zlib (RFC 1950) data");
    /* A deflate body whose header check fails. */
    free(z);
    z = http_zlib_compress(false, 6, json, strlen(json), &zlen);
    z[1] ^= 0x01;
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", z, zlen, deflate);
    http_expect_error(&r, 400, "incorrect header check");
    /* Plain JSON labelled gzip. */
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", json, strlen(json), gzip);
    http_expect_error(&r, 400, "is not valid gzip data");
    /* A coding not served. */
    const char *br[] = {"Content-Encoding: br", NULL};
    r = http_do(f.port, "POST", "/v2/models/mlp/infer", json, strlen(json), br);
    cr_expect_str_eq(r.accept_encoding, "gzip, deflate");
    http_expect_error(&r, 415, "Content-Encoding 'br' is not supported");
    /* And the server still answers. */
    r = http_post(f.port, "/v2/models/mlp/infer", json);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    free(z);
    free(json);
    fixture_stop(&f);
}

Test(srv_proto, responses_are_compressed_when_asked_and_long_enough, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_add_model(&f, "encoder", "encoder", 1);
    fixture_start(&f);
    char *json = mlp_json(16);
    http_resp_t plain = http_post(f.port, "/v2/models/mlp/infer", json);
    cr_assert_eq(plain.status, 200);
    cr_assert_geq(plain.len, (size_t)SRV_COMPRESS_MIN_BYTES);
    cr_expect_str_eq(plain.content_encoding, "");
    cr_expect_str_eq(plain.vary, "Accept-Encoding");
    static const struct {
        const char *accept, *want;
    } asks[] = {{"Accept-Encoding: gzip", "gzip"},
                {"Accept-Encoding: deflate", "deflate"},
                {"Accept-Encoding: gzip;q=0, deflate", "deflate"},
                {"Accept-Encoding: br, *", "gzip"},
                {"Accept-Encoding: identity", ""}};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        const char *hdr[] = {asks[i].accept, NULL};
        http_resp_t r = http_do(f.port, "POST", "/v2/models/mlp/infer", json, strlen(json), hdr);
        cr_expect_eq(r.status, 200);
        cr_expect_str_eq(r.content_encoding, asks[i].want, "%s", asks[i].accept);
        cr_expect_str_eq(r.vary, "Accept-Encoding");
        if (asks[i].want[0]) {
            size_t n;
            char *text = inflate_with(r.body, r.len, &n);
            cr_expect(n == plain.len && memcmp(text, plain.body, n) == 0, "%s", asks[i].accept);
            cr_expect_lt(r.len, plain.len);
            free(text);
        }
        free(r.body);
    }
    /* A short answer goes out as it is. */
    const char *gz[] = {"Accept-Encoding: gzip", NULL};
    http_resp_t r = http_do(f.port, "GET", "/v2/health/live", NULL, 0, gz);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.content_encoding, "");
    free(r.body);
    /* /metrics, as Prometheus asks for it. */
    r = http_do(f.port, "GET", "/metrics", NULL, 0, gz);
    cr_expect_str_eq(r.content_encoding, "gzip");
    size_t n;
    char *text = inflate_with(r.body, r.len, &n);
    cr_expect(strstr(text, "# TYPE"), "%.200s", text);
    free(text);
    free(r.body);
    /* Other answers go out as they are, however long, as Triton's do:
     * tritonclient.http.aio asks for gzip on every request (aiohttp's
     * default) and reads them without inflating. */
    r = http_do(f.port, "GET", "/v2/models/stats", NULL, 0, gz);
    cr_expect_eq(r.status, 200);
    cr_expect_geq(r.len, (size_t)SRV_COMPRESS_MIN_BYTES, "long enough to have been compressed");
    cr_expect_str_eq(r.content_encoding, "");
    cr_expect_str_eq(r.vary, "");
    cJSON *stats = cJSON_ParseWithLength(r.body, r.len);
    cr_expect_not_null(stats, "%.100s", r.body);
    cJSON_Delete(stats);
    free(r.body);
    /* A binary answer: its header length stays that of the JSON before
     * compression, as Triton's client reads it. */
    float x[16 * 64];
    for (int i = 0; i < 16 * 64; i++)
        x[i] = (float)(i % 13) * 0.125f;
    const char *raw[] = {IHCL "0", "Accept-Encoding: gzip", NULL};
    r = http_do(f.port, "POST", "/v2/models/encoder/infer", x, sizeof x, raw);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(r.content_encoding, "gzip");
    text = inflate_with(r.body, r.len, &n);
    size_t hl = (size_t)strtoul(r.header_len, NULL, 10);
    cr_assert(hl > 0 && hl < n);
    cJSON *doc = cJSON_ParseWithLength(text, hl);
    cr_expect_not_null(doc, "%.*s", (int)hl, text);
    cr_expect_eq(n - hl, sizeof x, "the hidden output [1,16,64] follows");
    cJSON_Delete(doc);
    free(text);
    free(r.body);
    free(plain.body);
    free(json);
    fixture_stop(&f);
}

/* ---- load and unload parameters ----------------------------------------------------- */

Test(srv_proto, load_parameters_are_refused_by_name, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    const char *load = "/v2/repository/models/mlp/load";
    http_resp_t r = http_post(f.port, load, "{\"parameters\": {\"config\": {}}}");
    http_expect_error(&r, 400, "load parameter \"config\" must be a string holding a ModelConfig");
    r = http_post(f.port, load, "{\"parameters\": {\"config\": \"{}\", \"config\": \"{}\"}}");
    http_expect_error(&r, 400, "load parameter \"config\" is given twice");
    r = http_post(f.port, load, "{\"parameters\": {\"file:1/model.onnx\": \"AAAA\"}}");
    http_expect_error(&r, 400, "load parameter \"file:1/model.onnx\" (model files sent with the "
                          "request) is not supported");
    r = http_post(f.port, load, "{\"parameters\": {\"colour\": 1}}");
    http_expect_error(&r, 400, "unknown load parameter \"colour\"");
    r = http_post(f.port, load, "{\"params\": {}}");
    http_expect_error(&r, 400, "unknown key \"params\"");
    r = http_post(f.port, load, "[1]");
    http_expect_error(&r, 400, "must be a JSON object");
    r = http_post(f.port, load, "{\"parameters\": 3}");
    http_expect_error(&r, 400, "\"parameters\" of the load request must be an object");
    cr_expect_eq(status_of(http_post(f.port, load, "{\"parameters\": {}}")), 200);
    cr_expect_eq(status_of(http_post(f.port, load, "{}")), 200);
    const char *unload = "/v2/repository/models/mlp/unload";
    r = http_post(f.port, unload, "{\"parameters\": {\"unload_dependents\": 1}}");
    http_expect_error(&r, 400, "\"unload_dependents\" must be true or false");
    r = http_post(f.port, unload, "{\"parameters\": {\"config\": \"{}\"}}");
    http_expect_error(&r, 400, "unknown unload parameter \"config\"");
    cr_expect_eq(status_of(http_post(f.port, unload,
                                     "{\"parameters\": {\"unload_dependents\": true}}")), 200);
    fixture_stop(&f);
}

/* The max_batch_size GET .../config reports. */
static int config_max_batch(const srv_fixture_t *f, const char *model)
{
    char path[96];
    snprintf(path, sizeof path, "/v2/models/%s/config", model);
    http_resp_t r = http_get(f->port, path);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    int n = cJSON_GetObjectItem(doc, "max_batch_size")->valueint;
    cJSON_Delete(doc);
    free(r.body);
    return n;
}

/* What Triton's simple_http_model_control.py does: a load's "config" (a
 * ModelConfig in JSON) is the model's configuration from that load on; a
 * bad one fails the load with the configuration before kept; a load
 * without one goes back to the repository's. */
Test(srv_proto, a_loads_config_is_the_models_configuration_until_a_load_without_one,
     .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    int before = config_max_batch(&f, "mlp");
    cr_assert_neq(before, 3);
    const char *load = "/v2/repository/models/mlp/load";
    cr_expect_eq(status_of(http_post(f.port, load, "{\"parameters\": {\"config\": "
                                                   "\"{\\\"max_batch_size\\\":\\\"3\\\"}\"}}")),
                 200);
    cr_expect_eq(config_max_batch(&f, "mlp"), 3);
    char *rows = NULL;
    srv_buf_t b = {0};
    fixture_body_halves(&b, "input", "4,64", 4 * 64);
    rows = b.data;
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", rows);
    http_expect_error(&r, 400, "more than its max_batch_size 3");
    /* Not JSON (the example's first try), a field outside flatserve's
     * subset, another model's name: the load fails saying so, and the
     * configuration before stays. */
    r = http_post(f.port, load, "{\"parameters\": {\"config\": "
                                "\"\\\"parameters\\\": {\\\"config\\\": {{}}}\"}}");
    http_expect_error(&r, 400, "failed to load 'mlp': load parameter \"config\": not a ModelConfig "
                          "in JSON");
    r = http_post(f.port, load, "{\"parameters\": {\"config\": "
                                "\"{\\\"model_warmup\\\": []}\"}}");
    http_expect_error(&r, 400, "model_warmup");
    r = http_post(f.port, load, "{\"parameters\": {\"config\": \"{\\\"name\\\": \\\"cnn\\\"}\"}}");
    http_expect_error(&r, 400, "failed to load 'mlp'");
    cr_expect_eq(config_max_batch(&f, "mlp"), 3, "the override before is kept");
    r = http_post(f.port, "/v2/models/mlp/infer", rows);
    http_expect_error(&r, 400, "more than its max_batch_size 3");
    /* A load without one: the repository's configuration again. */
    cr_expect_eq(status_of(http_post(f.port, load, "")), 200);
    cr_expect_eq(config_max_batch(&f, "mlp"), before);
    r = http_post(f.port, "/v2/models/mlp/infer", rows);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_post(f.port, "/v2/repository/models/nosuch/load", "");
    cr_expect_geq(r.status, 400);
    cr_expect(strstr(r.body, "failed to load 'nosuch'"), "%s", r.body);
    free(r.body);
    srv_buf_free(&b);
    fixture_stop(&f);
}

/* ---- classification ------------------------------------------------------------------ */

Test(srv_proto, class_count_is_refused_naming_it, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    srv_buf_t b = {0};
    fixture_body_halves(&b, "input", "1,64", 64);
    b.len -= 2; /* the root's closing '}' and the NUL fixture_body_halves ends with */
    srv_buf_puts(&b, ",\"outputs\":[{\"name\":\"probabilities\",\"parameters\":"
                     "{\"class_count\":3}}]}");
    srv_buf_append(&b, "", 1);
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", b.data);
    http_expect_error(&r, 400, "output 'probabilities': \"class_count\" (classification) is not "
                          "supported");
    srv_buf_free(&b);
    fixture_stop(&f);
}

/* ---- extensions flatserve does not claim --------------------------------------------- */

/* The logging API: 400 naming the extension, whatever the method, instead
 * of a bare 404 (shared memory is served: test_server_shm.c; trace:
 * test_trace.c). */
Test(srv_proto, unclaimed_triton_extensions_are_refused_naming_them, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    static const struct {
        const char *method, *path, *want;
    } calls[] = {
        {"GET", "/v2/logging", "Triton's logging extension"},
        {"POST", "/v2/logging", "logging"},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        const char *body = strcmp(calls[i].method, "POST") == 0 ? "{}" : NULL;
        http_resp_t r = http_do(f.port, calls[i].method, calls[i].path, body,
                                body ? strlen(body) : 0, NULL);
        http_expect_error(&r, 400, calls[i].want);
    }
    /* Another unknown path is still 404; a known one keeps its 405. */
    cr_expect_eq(status_of(http_get(f.port, "/v2/sharedmemory/status")), 404);
    cr_expect_eq(status_of(http_get(f.port, "/v2/models/mlp/infer")), 405);
    fixture_stop(&f);
}

/* ---- paths, methods and the auth scheme --------------------------------------------- */

Test(srv_proto, v2_with_a_slash_is_the_server_metadata, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_start(&f);
    http_resp_t a = http_get(f.port, "/v2"), b = http_get(f.port, "/v2/");
    cr_expect_eq(b.status, 200, "%s", b.body);
    cr_expect_str_eq(a.body, b.body);
    free(a.body);
    free(b.body);
    cr_expect_eq(status_of(http_get(f.port, "/v2//")), 404);
    cr_expect_eq(status_of(http_get(f.port, "/v2/health/ready/")), 404);
    fixture_stop(&f);
}

Test(srv_proto, head_is_allowed_wherever_get_is, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    static const char *const paths[] = {"/v2/health/ready", "/v2/health/live", "/v2",
                                        "/v2/models/mlp/ready", "/metrics"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        http_resp_t r = http_do(f.port, "HEAD", paths[i], NULL, 0, NULL);
        cr_expect_eq(r.curl, CURLE_OK, "%s: %s", paths[i], curl_easy_strerror(r.curl));
        cr_expect_eq(r.status, 200, "HEAD %s", paths[i]);
        cr_expect_eq(r.len, 0u, "HEAD %s has no body", paths[i]);
        free(r.body);
    }
    http_resp_t r = http_do(f.port, "HEAD", "/v2/models/nope/ready", NULL, 0, NULL);
    cr_expect_eq(r.status, 404);
    free(r.body);
    r = http_post(f.port, "/v2/health/live", "");
    cr_expect_str_eq(r.allow, "GET, HEAD");
    http_expect_error(&r, 405, "use GET, HEAD");
    r = http_do(f.port, "HEAD", "/v2/models/mlp/infer", NULL, 0, NULL);
    cr_expect_eq(r.status, 405);
    cr_expect_str_eq(r.allow, "POST");
    free(r.body);
    fixture_stop(&f);
}

Test(srv_proto, the_bearer_scheme_is_matched_in_any_case, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    snprintf(f.cfg.server.admin_token, sizeof f.cfg.server.admin_token, "s3cret");
    fixture_start(&f);
    static const struct {
        const char *auth;
        long status;
    } cases[] = {{"Authorization: Bearer s3cret", 200}, {"Authorization: bearer s3cret", 200},
                 {"Authorization: BEARER s3cret", 200}, {"Authorization: bearer S3CRET", 401},
                 {"Authorization: Basic s3cret", 401},  {"Authorization: bearers3cret", 401}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *hdr[] = {cases[i].auth, NULL};
        http_resp_t r = http_do(f.port, "GET", "/v1/memory", NULL, 0, hdr);
        cr_expect_eq(r.status, cases[i].status, "%s: %ld", cases[i].auth, r.status);
        free(r.body);
    }
    fixture_stop(&f);
}
