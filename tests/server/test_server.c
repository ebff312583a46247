/* test_server.c -- the server end to end: a real app on a loopback port,
 * talked to with libcurl. Every endpoint, every error status, JSON and
 * binary inference agreeing, admin tokens, /metrics through promtool,
 * clients that hang up mid-body or while queued.
 * (Concurrency, reloads and signals: test_server_load.c.) */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server/server_fixture.h"

/* An MLP request: `rows` rows of 64 floats from `seed`. */
static char *mlp_body(int rows, int seed, const char *extra)
{
    size_t cap = (size_t)rows * 64 * 16 + 512;
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{%s\"inputs\":[{\"name\":\"input\",\"shape\":[%d,64],"
                                "\"datatype\":\"FP32\",\"data\":[", extra ? extra : "", rows);
    for (int i = 0; i < rows * 64; i++)
        n += (size_t)snprintf(b + n, cap - n, "%s%g", i ? "," : "",
                              (double)((i * 7 + seed * 13) % 97) / 97.0 - 0.5);
    snprintf(b + n, cap - n, "]}]}");
    return b;
}

static srv_fixture_t fx;

static void start_demo(void)
{
    fixture_init(&fx);
    fixture_add_model(&fx, "mlp", "mlp", 1);
    fixture_add_model(&fx, "cnn", "cnn", 1);
    fixture_add_model(&fx, "transformer", "transformer", 1);
    fixture_start(&fx);
}

static void stop_demo(void)
{
    fixture_stop(&fx);
}

TestSuite(srv_http, .init = start_demo, .fini = stop_demo, .timeout = 120);

Test(srv_http, health_and_server_metadata)
{
    http_resp_t r = http_get(fx.port, "/v2/health/live");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2/health/ready");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "true") != NULL, "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2");
    cr_expect_eq(r.status, 200);
    cJSON *doc = cJSON_Parse(r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "name")->valuestring, "flatserve");
    cJSON *ext = cJSON_GetObjectItem(doc, "extensions");
    cr_expect(cJSON_IsArray(ext) && cJSON_GetArraySize(ext) >= 3, "%s", r.body);
    cJSON_Delete(doc);
    free(r.body);
}

Test(srv_http, model_metadata_ready_config_and_stats)
{
    http_resp_t r = http_get(fx.port, "/v2/models/mlp");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "inputs"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(in, "name")->valuestring, "input");
    cr_expect_str_eq(cJSON_GetObjectItem(in, "datatype")->valuestring, "FP32");
    cJSON *shape = cJSON_GetObjectItem(in, "shape");
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, -1);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 64);
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "versions"), 0)->valuestring, "1");
    /* Triton's platform name for an ONNX model, as its clients expect. */
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "platform")->valuestring, "onnxruntime_onnx");
    cJSON_Delete(doc);
    free(r.body);

    r = http_get(fx.port, "/v2/models/mlp/versions/1");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2/models/mlp/versions/7");
    http_expect_error(&r, 404, "version");
    r = http_get(fx.port, "/v2/models/mlp/ready");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);

    r = http_get(fx.port, "/v2/models/mlp/config");
    cr_assert_eq(r.status, 200, "%s", r.body);
    doc = cJSON_Parse(r.body);
    cr_expect_eq(cJSON_GetObjectItem(doc, "max_batch_size")->valueint, 64, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "platform")->valuestring, "onnxruntime_onnx");
    cr_expect_not_null(cJSON_GetObjectItem(doc, "dynamic_batching"), "%s", r.body);
    cJSON *dims = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "input"), 0), "dims");
    cr_expect_eq(cJSON_GetArraySize(dims), 1, "the batch dim is not in dims: %s", r.body);
    /* instances auto: on the CPU one per HTTP thread, on a GPU (the
     * server's default device where there is one) 1. */
    cJSON *group = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "instance_group"), 0);
    const cJSON *dev = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "parameters"), "device");
    bool gpu = cJSON_IsString(dev) && strncmp(dev->valuestring, "cuda", 4) == 0;
    cr_expect_eq(cJSON_GetObjectItem(group, "count")->valueint,
                 gpu ? 1 : (int)fx.cfg.server.threads, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(group, "kind")->valuestring, gpu ? "KIND_GPU" : "KIND_CPU");
    cJSON_Delete(doc);
    free(r.body);

    char *body = mlp_body(3, 1, NULL);
    r = http_post(fx.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    free(body);
    r = http_get(fx.port, "/v2/models/mlp/stats");
    cr_assert_eq(r.status, 200, "%s", r.body);
    doc = cJSON_Parse(r.body);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "model_stats"), 0);
    cr_expect_eq(cJSON_GetObjectItem(st, "inference_count")->valueint, 3, "%s", r.body);
    cr_expect_eq(cJSON_GetObjectItem(st, "execution_count")->valueint, 1, "%s", r.body);
    cJSON *ok = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "inference_stats"), "success");
    cr_expect_eq(cJSON_GetObjectItem(ok, "count")->valueint, 1, "%s", r.body);
    cJSON_Delete(doc);
    free(r.body);
    r = http_get(fx.port, "/v2/models/stats");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"transformer\"") != NULL, "%s", r.body);
    free(r.body);
}

Test(srv_http, infer_json_nested_and_flat_and_post_infer)
{
    char *body = mlp_body(2, 3, "\"id\":\"req-7\",");
    http_resp_t a = http_post(fx.port, "/v2/models/mlp/infer", body);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cJSON *doc = cJSON_Parse(a.body);
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "id")->valuestring, "req-7");
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "model_name")->valuestring, "mlp");
    cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(out, "name")->valuestring, "probabilities");
    cJSON *data = cJSON_GetObjectItem(out, "data");
    cr_assert_eq(cJSON_GetArraySize(data), 20);
    double sum = 0;
    for (int i = 0; i < 10; i++)
        sum += cJSON_GetArrayItem(data, i)->valuedouble;
    cr_expect(fabs(sum - 1.0) < 1e-5, "a softmax row sums to %g", sum);

    /* The same through POST /infer, with the model in the body. */
    char *b2 = mlp_body(2, 3, "\"model\":\"mlp\",\"version\":\"1\",\"id\":\"req-7\",");
    http_resp_t b = http_post(fx.port, "/infer", b2);
    cr_expect_eq(b.status, 200, "%s", b.body);
    cr_expect_str_eq(a.body, b.body, "POST /infer answered differently");
    cJSON_Delete(doc);
    free(a.body);
    free(b.body);
    free(body);
    free(b2);

    {
        const char *nested =
            "{\"inputs\":[{\"name\":\"embeddings\",\"shape\":[1,64,64],\"datatype\":\"FP32\","
            "\"data\":[[";
        srv_buf_t nb = {0};
        srv_buf_append(&nb, nested, strlen(nested));
        for (int i = 0; i < 64; i++) {
            srv_buf_printf(&nb, "%s[", i ? "," : "");
            for (int j = 0; j < 64; j++)
                srv_buf_printf(&nb, "%s%d", j ? "," : "", (i + j) % 5);
            srv_buf_append(&nb, "]", 1);
        }
        srv_buf_append(&nb, "]]}]}", 5);
        srv_buf_append(&nb, "", 1);
        http_resp_t t = http_post(fx.port, "/v2/models/transformer/infer", nb.data);
        cr_expect_eq(t.status, 200, "nested data: %s", t.body);
        free(t.body);
        srv_buf_free(&nb);
    }
}

Test(srv_http, json_and_binary_inference_agree)
{
    /* JSON in, JSON out. */
    char *body = mlp_body(4, 9, NULL);
    http_resp_t j = http_post(fx.port, "/v2/models/mlp/infer", body);
    cr_assert_eq(j.status, 200, "%s", j.body);
    cJSON *doc = cJSON_Parse(j.body);
    cJSON *data = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0),
                                      "data");
    cr_assert_eq(cJSON_GetArraySize(data), 40);

    /* The same floats in binary, asking for binary out. */
    float in[4 * 64];
    cJSON *req = cJSON_Parse(body);
    cJSON *vals = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(req, "inputs"), 0), "data");
    for (int i = 0; i < 4 * 64; i++)
        in[i] = (float)cJSON_GetArrayItem(vals, i)->valuedouble;
    cJSON_Delete(req);
    char header[512];
    int hl = snprintf(header, sizeof header,
                      "{\"inputs\":[{\"name\":\"input\",\"shape\":[4,64],\"datatype\":\"FP32\","
                      "\"parameters\":{\"binary_data_size\":%zu}}],\"outputs\":[{\"name\":"
                      "\"probabilities\",\"parameters\":{\"binary_data\":true}}]}", sizeof in);
    size_t total = (size_t)hl + sizeof in;
    char *bin = malloc(total);
    memcpy(bin, header, (size_t)hl);
    memcpy(bin + hl, in, sizeof in);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %d", hl);
    const char *headers[] = {hdr, "Content-Type: application/octet-stream", NULL};
    http_resp_t b = http_do(fx.port, "POST", "/v2/models/mlp/infer", bin, total, headers);
    cr_assert_eq(b.status, 200, "%s", b.body);
    size_t jl = (size_t)strtoull(b.header_len, NULL, 10);
    cr_assert_gt(jl, 0, "no Inference-Header-Content-Length in the answer");
    cr_assert_eq(b.len, jl + 40 * sizeof(float), "answer of %zu bytes, header %zu", b.len, jl);
    cr_expect(strstr(b.body, "binary_data_size") != NULL);
    /* The header length must be digits alone, and said once. */
    char other[64];
    snprintf(other, sizeof other, "Inference-Header-Content-Length: %d", hl + 4);
    const char *twice[] = {hdr, other, NULL};
    http_resp_t t = http_do(fx.port, "POST", "/v2/models/mlp/infer", bin, total, twice);
    http_expect_error(&t, 400, "given twice");
    snprintf(other, sizeof other, "Inference-Header-Content-Length: +%d", hl);
    const char *signed_len[] = {other, NULL};
    t = http_do(fx.port, "POST", "/v2/models/mlp/infer", bin, total, signed_len);
    http_expect_error(&t, 400, "must be a number");
    const float *outf = (const float *)(b.body + jl);
    for (int i = 0; i < 40; i++) {
        float want = (float)cJSON_GetArrayItem(data, i)->valuedouble;
        cr_expect_eq(outf[i], want, "output %d: binary %.9g, JSON %.9g", i, outf[i], want);
    }
    cJSON_Delete(doc);
    free(j.body);
    free(b.body);
    free(bin);
    free(body);
}

Test(srv_http, bad_requests_get_the_status_and_a_message_naming_the_problem)
{
    http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", "{\"inputs\": [");
    http_expect_error(&r, 400, NULL);
    r = http_post(fx.port, "/v2/models/mlp/infer",
                  "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,63],\"datatype\":\"FP32\","
                  "\"data\":[0]}]}");
    http_expect_error(&r, 400, "input");
    char *body = mlp_body(1, 0, NULL);
    char *wrong = strstr(body, "FP32");
    memcpy(wrong, "FP64", 4);
    r = http_post(fx.port, "/v2/models/mlp/infer", body);
    http_expect_error(&r, 400, "FP32");
    free(body);
    r = http_post(fx.port, "/v2/models/nosuch/infer", "{}");
    http_expect_error(&r, 404, "nosuch");
    r = http_get(fx.port, "/v2/nothing/here");
    http_expect_error(&r, 404, NULL);
    r = http_get(fx.port, "/v2/models/mlp/infer");
    cr_expect_eq(r.status, 405, "%s", r.body);
    cr_expect_str_eq(r.allow, "POST");
    free(r.body);
    r = http_post(fx.port, "/v2/repository/models/.hidden/load", "");
    http_expect_error(&r, 400, ".hidden");
    r = http_post(fx.port, "/infer", "{\"inputs\":[]}");
    http_expect_error(&r, 400, NULL);
    r = http_get(fx.port, "/v2/models/mlp/versions/x1");
    http_expect_error(&r, 400, "x1");
    /* An escaped NUL in the path is not decoded into a shorter name. */
    r = http_get(fx.port, "/v2/models/mlp%00x/ready");
    http_expect_error(&r, 400, "mlp%00x");
    r = http_get(fx.port, "/v2/models/mlp/versions/1%00");
    http_expect_error(&r, 400, "1%00");
    r = http_get(fx.port, "/v2/models/%6d%6C%70/ready");
    cr_expect_eq(r.status, 200, "%%XX other than %%00 still decodes: %s", r.body);
    free(r.body);
    /* A version is digits alone: no sign, no blank, nothing after. */
    r = http_get(fx.port, "/v2/models/mlp/versions/+1");
    http_expect_error(&r, 400, "+1");
    r = http_get(fx.port, "/v2/models/mlp/versions/-0");
    http_expect_error(&r, 400, "-0");
    r = http_get(fx.port, "/v2/models/mlp/versions/99999999999999999999");
    http_expect_error(&r, 400, "99999999999999999999");
    /* The server is still fine. */
    r = http_get(fx.port, "/v2/health/ready");
    cr_expect_eq(r.status, 200);
    free(r.body);
}

Test(srv_http, repository_index_load_unload)
{
    http_resp_t r = http_post(fx.port, "/v2/repository/index", "");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cr_expect_eq(cJSON_GetArraySize(doc), 3, "%s", r.body);
    cJSON *first = cJSON_GetArrayItem(doc, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(first, "name")->valuestring, "cnn");
    cr_expect_str_eq(cJSON_GetObjectItem(first, "state")->valuestring, "READY");
    cJSON_Delete(doc);
    free(r.body);

    r = http_post(fx.port, "/v2/repository/models/cnn/unload", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2/models/cnn/ready");
    http_expect_error(&r, 503, "cnn");
    r = http_post(fx.port, "/v2/repository/index", "{\"ready\": true}");
    doc = cJSON_Parse(r.body);
    cr_expect_eq(cJSON_GetArraySize(doc), 2, "%s", r.body);
    cJSON_Delete(doc);
    free(r.body);
    r = http_post(fx.port, "/v2/repository/models/cnn/unload", "");
    http_expect_error(&r, 404, "cnn");
    r = http_post(fx.port, "/v2/repository/models/cnn/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2/models/cnn/ready");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v2/repository/models/ghost/load", "");
    http_expect_error(&r, 404, "ghost");
}

Test(srv_http, a_failed_reload_keeps_the_old_version_serving)
{
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/mlp/2", fx.repo);
    cr_assert_eq(mkdir(dir, 0755), 0);
    fixture_write(&fx, "mlp", "2/model.onnx", "not a protobuf at all", 21);
    http_resp_t r = http_post(fx.port, "/v2/repository/models/mlp/load", "");
    cr_expect(r.status == 400, "a corrupt model: %ld %s", r.status, r.body);
    free(r.body);
    char *body = mlp_body(1, 2, NULL);
    r = http_post(fx.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"model_version\":\"1\"") != NULL, "%s", r.body);
    free(r.body);
    free(body);
    r = http_post(fx.port, "/v2/repository/index", "");
    cr_expect(strstr(r.body, "READY") != NULL, "%s", r.body);
    free(r.body);
}

Test(srv_http, memory_endpoints)
{
    http_resp_t r = http_get(fx.port, "/v1/memory");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "caches"), 0);
    cr_expect_gt(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "allocated_bytes"), "current")->valuedouble, 0);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(c0, "segment_list")), "%s", r.body);
    cJSON *models = cJSON_GetObjectItem(doc, "models");
    cr_expect_eq(cJSON_GetArraySize(models), 3);
    cJSON_Delete(doc);
    free(r.body);
    r = http_post(fx.port, "/v1/memory/empty_cache", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "released_bytes") != NULL, "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v1/memory/reset_peak", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v1/memory", "");
    cr_expect_eq(r.status, 405);
    free(r.body);
}

Test(srv_http, metrics_pass_promtool)
{
    char *body = mlp_body(2, 5, NULL);
    http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", body);
    free(r.body);
    free(body);
    r = http_get(fx.port, "/metrics");
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.content_type, "version=0.0.4") != NULL, "%s", r.content_type);
    const char *want[] = {"nv_inference_request_success{model=\"mlp\",version=\"1\"} 1",
                          "nv_inference_count{model=\"mlp\",version=\"1\"} 2",
                          "flatserve_memory_allocated_bytes{", "flatserve_memory_peak_reserved_bytes{",
                          "flatserve_model_memory_bytes{model=\"mlp\",version=\"1\",kind=\"weights\"}",
                          "flatserve_memory_released_bytes_total{", "flatserve_batch_size_bucket{",
                          "flatserve_request_duration_seconds_bucket{", "process_resident_memory_bytes ",
                          "nv_inference_pending_request_count{"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(r.body, want[i]) != NULL, "missing %s", want[i]);
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        free(r.body);
        cr_skip_test("promtool not installed (Debian package prometheus): format not checked");
    }
    char path[] = "/tmp/flatserve-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, r.body, r.len), (ssize_t)r.len);
    close(fd);
    free(r.body);
    /* promtool exits 1 when the text does not parse, 3 when it parses but
     * has lint problems. Triton's own names (nv_*, which dashboards and
     * perf_analyzer read) break its naming lints; they are kept on purpose,
     * and every other name must pass. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512];
    int problems = 0;
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "nv_", 3) == 0)
            continue;
        problems++;
        cr_expect(false, "promtool: %s", line);
    }
    int rc = pclose(p);
    unlink(path);
    cr_expect(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3),
              "promtool could not parse the metrics (exit %d)", WEXITSTATUS(rc));
    cr_expect_eq(problems, 0);
}

/* ---- servers with other settings ---------------------------------------------------- */

Test(srv_config, admin_token_is_enforced_on_admin_routes_only, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    snprintf(f.cfg.server.admin_token, sizeof f.cfg.server.admin_token, "s3cret");
    fixture_start(&f);
    http_resp_t r = http_get(f.port, "/v1/memory");
    http_expect_error(&r, 401, "Bearer");
    const char *wrong[] = {"Authorization: Bearer s3cre", NULL};
    r = http_do(f.port, "GET", "/v1/memory", NULL, 0, wrong);
    http_expect_error(&r, 401, NULL);
    const char *right[] = {"Authorization: Bearer s3cret", NULL};
    r = http_do(f.port, "GET", "/v1/memory", NULL, 0, right);
    cr_expect_eq(r.status, 200);
    free(r.body);
    r = http_do(f.port, "POST", "/v2/repository/models/mlp/unload", "", 0, NULL);
    http_expect_error(&r, 401, NULL);
    char *body = mlp_body(1, 1, NULL);
    r = http_post(f.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 200, "inference needs no token: %s", r.body);
    free(r.body);
    free(body);
    fixture_stop(&f);
}

Test(srv_config, a_body_over_max_body_is_413, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    f.cfg.server.max_body_bytes = 1024;
    fixture_start(&f);
    char *body = mlp_body(4, 1, NULL);
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", body);
    http_expect_error(&r, 413, "max_body");
    free(body);
    body = mlp_body(1, 1, NULL);
    body[0] = '{';
    r = http_get(f.port, "/v2/health/live");
    cr_expect_eq(r.status, 200);
    free(r.body);
    free(body);
    fixture_stop(&f);
}

/* A transformer request of `rows` rows of 0.5. */
static void transformer_body(srv_buf_t *b, int rows)
{
    char shape[32];
    snprintf(shape, sizeof shape, "%d,64,64", rows);
    fixture_body_halves(b, "embeddings", shape, (size_t)rows * 64 * 64);
}

Test(srv_config, device_oom_fails_the_request_not_the_server, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "transformer", "transformer", 1);
    const char *mc = "{\"max_batch_size\": 256}";
    fixture_write(&f, "transformer", "config.json", mc, strlen(mc));
    /* Batch 256 needs 40 MiB of activations; the cache may hold 32 (on a
     * GPU the weights and cuBLAS's 8 MiB workspace take 22 of them). */
    f.cfg.memory.limit_bytes = 32u << 20;
    fixture_start(&f);
    srv_buf_t b = {0};
    transformer_body(&b, 256);
    http_resp_t r = http_post(f.port, "/v2/models/transformer/infer", b.data);
    http_expect_error(&r, 507, "out of memory");
    srv_buf_free(&b);
    transformer_body(&b, 1);
    r = http_post(f.port, "/v2/models/transformer/infer", b.data);
    cr_expect_eq(r.status, 200, "batch 1 after the OOM: %s", r.body);
    free(r.body);
    srv_buf_free(&b);
    fixture_stop(&f);
}

Test(srv_config, a_full_queue_is_503_with_retry_after, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    const char *mc = "{\"max_queue\": 1, \"max_batch_size\": 64, \"max_queue_delay\": \"1s\"}";
    fixture_write(&f, "mlp", "config.json", mc, strlen(mc));
    fixture_start(&f);
    http_bg_req_t q = {.port = f.port, .body = mlp_body(1, 1, NULL)};
    pthread_t t;
    pthread_create(&t, NULL, http_bg_post, &q);
    usleep(300000);
    char *body = mlp_body(1, 2, NULL);
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", body);
    cr_expect_str_eq(r.retry_after, "1");
    http_expect_error(&r, 503, "queue");
    pthread_join(t, NULL);
    cr_expect_eq(q.resp.status, 200, "the queued request: %s", q.resp.body);
    free(q.resp.body);
    free(q.body);
    free(body);
    fixture_stop(&f);
}

Test(srv_config, a_bad_model_config_fails_that_model_only, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_add_model(&f, "cnn", "cnn", 1);
    const char *mc = "{\"max_batch_sise\": 8}";
    fixture_write(&f, "cnn", "config.json", mc, strlen(mc));
    f.cfg.server.exit_on_error = false; /* serve what loads */
    fixture_start(&f);
    http_resp_t r = http_post(f.port, "/v2/repository/index", "");
    cr_expect(strstr(r.body, "max_batch_sise") != NULL, "the index names the bad key: %s", r.body);
    free(r.body);
    r = http_get(f.port, "/v2/models/mlp/ready");
    cr_expect_eq(r.status, 200);
    free(r.body);
    fixture_stop(&f);
}

/* ---- clients that go away -------------------------------------------------------- */

/* Sends `text` on a fresh loopback connection and closes it at once. */
static void send_and_hang_up(unsigned port, const char *text)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(srv_config, clients_that_hang_up_mid_body_or_mid_batch_lose_nothing_else, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    /* Requests wait 300 ms for company: a client can leave while queued. */
    const char *mc = "{\"max_batch_size\": 64, \"max_queue_delay\": \"300ms\"}";
    fixture_write(&f, "mlp", "config.json", mc, strlen(mc));
    fixture_start(&f);
    /* Half a body, then gone. */
    send_and_hang_up(f.port, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 5000\r\n\r\n{\"inputs\": [");
    /* A whole request, gone while it waits in the queue. */
    char *body = mlp_body(1, 3, NULL);
    char req[16384];
    snprintf(req, sizeof req, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    for (int i = 0; i < 4; i++)
        send_and_hang_up(f.port, req);
    /* Everyone else is served, the batch the leavers were in included. */
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    usleep(400000);
    r = http_get(f.port, "/metrics");
    cr_expect(strstr(r.body, "flatserve_http_requests_in_flight 1\n") != NULL,
              "only this scrape is in flight once the leavers' batch ran");
    free(r.body);
    free(body);
    fixture_stop(&f); /* waits for in-flight requests: none may be stuck */
}
