/* test_trace.c -- Triton's trace extension (server/trace.c, trace_http.c):
 * settings round trips, refusals, and the trace files. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/app.h"
#include "tests/server/server_fixture.h"

/* A one-row request of mlp's input (64 values). */
static const char *one_row(void)
{
    static char body[1024];
    size_t n = (size_t)snprintf(body, sizeof body, "{\"inputs\":[{\"name\":\"input\",\"shape\":"
                                "[1,64],\"datatype\":\"FP32\",\"data\":[");
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s0.5", i ? "," : "");
    snprintf(body + n, sizeof body - n, "]}]}");
    return body;
}

static void infer_n(srv_fixture_t *f, int n)
{
    for (int i = 0; i < n; i++) {
        http_resp_t r = http_post(f->port, "/v2/models/mlp/infer", one_row());
        cr_expect_eq(r.status, 200, "%s", r.body);
        free(r.body);
    }
}

/* The setting `key` of the answer to GET/POST `path`, as text ("" if
 * absent); trace_level's first item. */
static void setting(cJSON *doc, const char *key, char *out, size_t len)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (cJSON_IsArray(v))
        v = cJSON_GetArrayItem(v, 0);
    snprintf(out, len, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

static cJSON *call(srv_fixture_t *f, const char *path, const char *post, long want)
{
    http_resp_t r = post ? http_post(f->port, path, post) : http_get(f->port, path);
    cr_assert_eq(r.status, want, "%s %s: %ld %s", post ? "POST" : "GET", path, r.status, r.body);
    cJSON *doc = cJSON_Parse(r.body);
    free(r.body);
    cr_assert_not_null(doc);
    return doc;
}

static void expect_setting(srv_fixture_t *f, const char *path, const char *key, const char *want)
{
    char got[256];
    cJSON *doc = call(f, path, NULL, 200);
    setting(doc, key, got, sizeof got);
    cr_expect_str_eq(got, want, "%s %s", path, key);
    cJSON_Delete(doc);
}

Test(srv_trace, settings_round_trip_global_and_per_model, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    expect_setting(&f, "/v2/trace/setting", "trace_level", "OFF");
    expect_setting(&f, "/v2/trace/setting", "trace_rate", "1000");
    expect_setting(&f, "/v2/trace/setting", "trace_count", "-1");
    expect_setting(&f, "/v2/trace/setting", "log_frequency", "0");
    cJSON_Delete(call(&f, "/v2/trace/setting", "{}", 200)); /* tritonclient's no-argument call */
    cJSON_Delete(call(&f, "/v2/trace/setting", "{\"trace_rate\":\"7\"}", 200));
    /* A model inherits until it sets a key, and again after null. */
    expect_setting(&f, "/v2/models/mlp/trace/setting", "trace_rate", "7");
    cJSON_Delete(call(&f, "/v2/models/mlp/trace/setting", "{\"trace_rate\":\"3\"}", 200));
    expect_setting(&f, "/v2/models/mlp/trace/setting", "trace_rate", "3");
    expect_setting(&f, "/v2/models/mlp/versions/1/trace/setting", "trace_rate", "3");
    expect_setting(&f, "/v2/trace/setting", "trace_rate", "7");
    cJSON_Delete(call(&f, "/v2/trace/setting", "{\"trace_count\":\"5\"}", 200));
    expect_setting(&f, "/v2/models/mlp/trace/setting", "trace_count", "5");
    cJSON_Delete(call(&f, "/v2/models/mlp/trace/setting", "{\"trace_rate\":null}", 200));
    expect_setting(&f, "/v2/models/mlp/trace/setting", "trace_rate", "7");
    /* Refusals name the field; nothing changes. */
    static const struct {
        const char *path, *body, *needle;
    } bad[] = {
        {"/v2/trace/setting", "{\"trace_level\":[\"TENSORS\"]}", "TENSORS"},
        {"/v2/trace/setting", "{\"trace_rate\":\"0\"}", "trace_rate"},
        {"/v2/trace/setting", "{\"trace_rate\":\"x\"}", "trace_rate"},
        {"/v2/trace/setting", "{\"trace_count\":\"-2\"}", "trace_count"},
        {"/v2/trace/setting", "{\"trace_colour\":\"1\"}", "trace_colour"},
        {"/v2/trace/setting", "{\"trace_rate\":null}", "trace_rate"},
        {"/v2/trace/setting", "{\"trace_level\":[\"TIMESTAMPS\"]}", "trace_file"},
        {"/v2/models/mlp/trace/setting", "{\"log_frequency\":\"-1\"}", "log_frequency"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_resp_t r = http_post(f.port, bad[i].path, bad[i].body);
        http_expect_error(&r, 400, bad[i].needle);
    }
    expect_setting(&f, "/v2/trace/setting", "trace_rate", "7");
    expect_setting(&f, "/v2/trace/setting", "trace_level", "OFF");
    http_resp_t r = http_get(f.port, "/v2/models/nope/trace/setting");
    http_expect_error(&r, 404, "nope");
    fixture_stop(&f);
}

/* The file's JSON array: n traces of mlp, ids distinct, timestamps in
 * Triton's order REQUEST_START <= QUEUE_START <= COMPUTE_START <=
 * COMPUTE_INPUT_END <= COMPUTE_OUTPUT_START <= COMPUTE_END <= REQUEST_END. */
static void expect_trace_file(const char *path, int n)
{
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "no trace file %s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = '\0';
    cJSON *doc = cJSON_Parse(text);
    cr_assert(cJSON_IsArray(doc), "not a JSON array: %s", text);
    static const char *order[] = {"REQUEST_START", "QUEUE_START", "COMPUTE_START",
                                  "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
                                  "REQUEST_END"};
    const size_t n_order = sizeof order / sizeof order[0];
    int n_traces = 0;
    double last_id = 0, last_ns = 0;
    size_t next = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, doc) {
        double id = cJSON_GetObjectItem(e, "id")->valuedouble;
        cJSON *name = cJSON_GetObjectItem(e, "model_name");
        if (name) {
            cr_expect_str_eq(name->valuestring, "mlp");
            cr_expect_eq(cJSON_GetObjectItem(e, "model_version")->valuedouble, 1);
            cr_expect_gt(id, last_id, "ids grow");
            cr_expect(n_traces == 0 || next == n_order, "every stamp of the trace before");
            last_id = id;
            last_ns = 0;
            next = 0;
            n_traces++;
            continue;
        }
        cr_expect_eq(id, last_id);
        cJSON *ts = cJSON_GetArrayItem(cJSON_GetObjectItem(e, "timestamps"), 0);
        cr_assert_lt(next, n_order);
        cr_expect_str_eq(cJSON_GetObjectItem(ts, "name")->valuestring, order[next]);
        double ns = cJSON_GetObjectItem(ts, "ns")->valuedouble;
        cr_expect_geq(ns, last_ns, "%s after the one before", order[next]);
        cr_expect_gt(ns, 0);
        last_ns = ns;
        next++;
    }
    cr_expect_eq(next, n_order);
    cr_expect_eq(n_traces, n, "%s: %d traces, want %d", path, n_traces, n);
    cJSON_Delete(doc);
}

Test(srv_trace, rate_count_and_log_frequency_shape_the_files, .timeout = 120)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    char file[300];
    snprintf(file, sizeof file, "%s/trace.json", f.repo);
    /* As the flags would: 1 of every 2, at most 3, 2 a file. */
    f.cfg.trace.timestamps = true;
    f.cfg.trace.rate = 2;
    f.cfg.trace.count = 3;
    f.cfg.trace.log_frequency = 2;
    snprintf(f.cfg.trace.file, sizeof f.cfg.trace.file, "%s", file);
    fixture_start(&f);
    infer_n(&f, 10); /* requests 2, 4, 6 traced; then the count is spent */
    expect_setting(&f, "/v2/trace/setting", "trace_count", "0");
    /* A new file (and log_frequency 0) closes file.1 with its one trace. */
    char body[512], path[320];
    snprintf(body, sizeof body, "{\"trace_file\":\"%s/all.json\",\"log_frequency\":\"0\","
             "\"trace_count\":\"-1\",\"trace_rate\":\"1\"}", f.repo);
    cJSON_Delete(call(&f, "/v2/trace/setting", body, 200));
    infer_n(&f, 4);
    /* The model's own OFF stops its traces. */
    cJSON_Delete(call(&f, "/v2/models/mlp/trace/setting", "{\"trace_level\":[\"OFF\"]}", 200));
    infer_n(&f, 3);
    srv_app_t *app = f.app;
    f.app = NULL;
    cr_expect_eq(srv_app_stop(app), 0, "%s", fs_errmsg()); /* closes all.json */
    snprintf(path, sizeof path, "%s.0", file);
    expect_trace_file(path, 2);
    snprintf(path, sizeof path, "%s.1", file);
    expect_trace_file(path, 1);
    snprintf(path, sizeof path, "%s.2", file);
    cr_expect_neq(access(path, F_OK), 0, "no third file");
    snprintf(path, sizeof path, "%s/all.json", f.repo);
    expect_trace_file(path, 4);
    fixture_stop(&f);
}

Test(srv_trace, timestamps_without_a_file_fails_start_up, .timeout = 30)
{
    srv_fixture_t f;
    fixture_init(&f);
    f.cfg.trace.timestamps = true;
    srv_app_t *app = NULL;
    cr_expect_eq(srv_app_start(&f.cfg, &app), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "trace.file") != NULL, "%s", fs_errmsg());
    cr_expect_null(app);
    fixture_stop(&f);
}
