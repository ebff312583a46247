/* test_server_stats.c -- Triton's shapes of the numbers: failed inference
 * requests counted by reason on /metrics and in the statistics extension,
 * and GET .../stats with exactly the fields of Triton's $model_stat
 * (batch_stats per batch size, response_stats, memory_usage with the
 * model's exact bytes). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/server/server_fixture.h"

/* An MLP request: `rows` rows of 64 floats. */
static char *mlp_body(int rows)
{
    srv_buf_t b = {0};
    char shape[32];
    snprintf(shape, sizeof shape, "%d,64", rows);
    fixture_body_halves(&b, "input", shape, (size_t)rows * 64);
    return b.data;
}

/* The value of the /metrics sample whose line starts with `key` (labels
 * and all, up to the value); -1 when absent. */
static long long metric(unsigned port, const char *key)
{
    http_resp_t r = http_get(port, "/metrics");
    cr_assert_eq(r.status, 200);
    long long v = -1;
    size_t kl = strlen(key);
    for (const char *line = r.body; line && *line;) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            v = strtoll(line + kl + 1, NULL, 10);
            break;
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    free(r.body);
    return v;
}

static long long failures(unsigned port, const char *model, const char *reason)
{
    char key[256];
    snprintf(key, sizeof key,
             "nv_inference_request_failure{model=\"%s\",reason=\"%s\",version=\"1\"}", model,
             reason);
    return metric(port, key);
}

/* The first $model_stat of GET path (caller deletes *doc). */
static cJSON *model_stat(unsigned port, const char *path, cJSON **doc)
{
    http_resp_t r = http_get(port, path);
    cr_assert_eq(r.status, 200, "%s: %s", path, r.body);
    *doc = cJSON_Parse(r.body);
    free(r.body);
    cr_assert_not_null(*doc);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(*doc, "model_stats"), 0);
    cr_assert_not_null(st, "%s: no model_stats", path);
    return st;
}

static double num(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    cr_assert(cJSON_IsNumber(x), "no number at %s%s%s", a, b ? "." : "", b ? b : "");
    return x->valuedouble;
}

/* Whether o's keys are exactly `keys` (n of them), in any order. */
static void expect_keys(const cJSON *o, const char *const *keys, size_t n, const char *what)
{
    size_t seen = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, o)
    {
        bool known = false;
        for (size_t i = 0; i < n; i++)
            known = known || strcmp(k->string, keys[i]) == 0;
        cr_expect(known, "%s has '%s', which Triton's schema has not", what, k->string);
        seen++;
    }
    cr_expect_eq(seen, n, "%s has %zu fields, Triton's schema %zu", what, seen, n);
}

static srv_fixture_t fx;

static void start_mlp(void)
{
    fixture_init(&fx);
    fixture_add_model(&fx, "mlp", "mlp", 1);
    const char *mc = "{\"max_batch_size\": 8}";
    fixture_write(&fx, "mlp", "config.json", mc, strlen(mc));
    fixture_start(&fx);
}

static void stop_mlp(void)
{
    fixture_stop(&fx);
}

TestSuite(srv_stats, .init = start_mlp, .fini = stop_mlp, .timeout = 120);

Test(srv_stats, requests_refused_with_400_count_as_rejected_failures)
{
    cr_expect_eq(failures(fx.port, "mlp", "REJECTED"), 0);
    const char *bad[] = {
        "{\"inputs\": [",                                                  /* no JSON */
        "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,63],\"datatype\":\"FP32\",\"data\":[0]}]}",
        "{\"inputs\":[{\"name\":\"nope\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[0]}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", bad[i]);
        cr_expect_eq(r.status, 400, "%s: %s", bad[i], r.body);
        free(r.body);
    }
    char *body = mlp_body(9); /* past max_batch_size 8 */
    http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 400, "%s", r.body);
    free(r.body);
    const char *hdr[] = {"Inference-Header-Content-Length: x", NULL};
    r = http_do(fx.port, "POST", "/v2/models/mlp/infer", body, strlen(body), hdr);
    cr_expect_eq(r.status, 400, "%s", r.body);
    free(r.body);
    /* POST /infer names the model in the body: counted once it is known
     * (here, 9 rows again). */
    char *named = malloc(strlen(body) + 32);
    sprintf(named, "{\"model\":\"mlp\",%s", body + 1);
    r = http_post(fx.port, "/infer", named);
    cr_expect_eq(r.status, 400, "%s", r.body);
    free(r.body);
    free(named);
    free(body);
    /* One that names no model belongs to none. */
    r = http_post(fx.port, "/v2/models/nosuch/infer", "{}");
    cr_expect_eq(r.status, 404);
    free(r.body);

    cr_expect_eq(failures(fx.port, "mlp", "REJECTED"), 6);
    cr_expect_eq(failures(fx.port, "mlp", "BACKEND"), 0);
    cr_expect_eq(failures(fx.port, "mlp", "CANCELED"), 0);
    cr_expect_eq(failures(fx.port, "mlp", "OTHER"), 0);
    cr_expect_eq(metric(fx.port, "nv_inference_request_success{model=\"mlp\",version=\"1\"}"), 0);
    cJSON *doc;
    cJSON *st = model_stat(fx.port, "/v2/models/mlp/stats", &doc);
    cJSON *is = cJSON_GetObjectItem(st, "inference_stats");
    cr_expect_eq(num(is, "fail", "count"), 6);
    cr_expect_gt(num(is, "fail", "ns"), 0, "failed requests' time is summed too");
    cr_expect_eq(num(is, "success", "count"), 0);
    cJSON_Delete(doc);
}

Test(srv_stats, stats_have_triton_fields_and_batch_sizes_with_their_times)
{
    int sizes[] = {1, 3, 3, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *body = mlp_body(sizes[i]);
        http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", body);
        cr_expect_eq(r.status, 200, "%s", r.body);
        free(r.body);
        free(body);
    }
    const char *paths[] = {"/v2/models/stats", "/v2/models/mlp/stats",
                           "/v2/models/mlp/versions/1/stats"};
    for (size_t p = 0; p < 3; p++) {
        cJSON *doc;
        cJSON *st = model_stat(fx.port, paths[p], &doc);
        static const char *const top[] = {"name", "version", "last_inference", "inference_count",
                                          "execution_count", "inference_stats", "response_stats",
                                          "batch_stats", "memory_usage"};
        expect_keys(st, top, 9, "$model_stat");
        cr_expect_str_eq(cJSON_GetObjectItem(st, "name")->valuestring, "mlp");
        cr_expect_str_eq(cJSON_GetObjectItem(st, "version")->valuestring, "1");
        cr_expect_eq(num(st, "inference_count", NULL), 15);
        cr_expect_eq(num(st, "execution_count", NULL), 4);
        cr_expect_gt(num(st, "last_inference", NULL), 1.7e12, "milliseconds since the epoch");

        cJSON *is = cJSON_GetObjectItem(st, "inference_stats");
        static const char *const inf[] = {"success", "fail", "queue", "compute_input",
                                          "compute_infer", "compute_output", "cache_hit",
                                          "cache_miss"};
        expect_keys(is, inf, 8, "$inference_stats");
        for (size_t k = 0; k < 6; k++)
            if (k != 1)
                cr_expect_eq(num(is, inf[k], "count"), 4, "%s counts each request", inf[k]);
        cr_expect_gt(num(is, "success", "ns"), 0);
        cr_expect_gt(num(is, "compute_infer", "ns"), 0);
        cr_expect_eq(num(is, "cache_hit", "count"), 0, "no response cache");
        cr_expect_eq(num(is, "cache_miss", "count"), 0, "no response cache");

        cJSON *rs = cJSON_GetObjectItem(st, "response_stats");
        cr_expect(cJSON_IsObject(rs) && cJSON_GetArraySize(rs) == 0, "response_stats is {}");

        /* batch_stats: one per size run, in order, each with its count in
         * its durations. */
        cJSON *bs = cJSON_GetObjectItem(st, "batch_stats");
        cr_assert_eq(cJSON_GetArraySize(bs), 3, "sizes 1, 3, 8");
        double want_size[] = {1, 3, 8}, want_count[] = {1, 2, 1};
        for (int i = 0; i < 3; i++) {
            cJSON *b = cJSON_GetArrayItem(bs, i);
            static const char *const bk[] = {"batch_size", "compute_input", "compute_infer",
                                             "compute_output"};
            expect_keys(b, bk, 4, "$batch_stats");
            cr_expect_eq(num(b, "batch_size", NULL), want_size[i]);
            cr_expect_eq(num(b, "compute_infer", "count"), want_count[i]);
            cr_expect_eq(num(b, "compute_input", "count"), want_count[i]);
            cr_expect_eq(num(b, "compute_output", "count"), want_count[i]);
            cr_expect_gt(num(b, "compute_infer", "ns"), 0);
        }

        /* memory_usage: the model's bytes on its device, the same bytes
         * /metrics gives its weights and activations. */
        cJSON *mu = cJSON_GetObjectItem(st, "memory_usage");
        cr_assert_eq(cJSON_GetArraySize(mu), 1);
        cJSON *m = cJSON_GetArrayItem(mu, 0);
        static const char *const mk[] = {"type", "id", "byte_size"};
        expect_keys(m, mk, 3, "$memory_usage");
        /* The device the model config names: cuda:N is GPU N, cpu CPU 0. */
        http_resp_t cr = http_get(fx.port, "/v2/models/mlp/config");
        cJSON *conf = cJSON_Parse(cr.body);
        free(cr.body);
        const cJSON *dev = cJSON_GetObjectItem(cJSON_GetObjectItem(conf, "parameters"), "device");
        cr_assert(cJSON_IsString(dev), "no parameters.device in the model config");
        int id = 0;
        bool gpu = sscanf(dev->valuestring, "cuda:%d", &id) == 1;
        cr_expect_str_eq(cJSON_GetObjectItem(m, "type")->valuestring, gpu ? "GPU" : "CPU");
        cr_expect_eq(num(m, "id", NULL), gpu ? id : 0);
        cJSON_Delete(conf);
        long long w = metric(fx.port, "flatserve_model_memory_bytes{model=\"mlp\",version=\"1\","
                                      "kind=\"weights\"}");
        long long a = metric(fx.port, "flatserve_model_memory_bytes{model=\"mlp\",version=\"1\","
                                      "kind=\"activations\"}");
        cr_expect_gt(w, 0);
        cr_expect_eq((long long)num(m, "byte_size", NULL), w + a);
        long long wp = metric(fx.port, "flatserve_model_memory_peak_bytes{model=\"mlp\","
                                       "version=\"1\",kind=\"weights\"}");
        long long ap = metric(fx.port, "flatserve_model_memory_peak_bytes{model=\"mlp\","
                                       "version=\"1\",kind=\"activations\"}");
        cr_expect_geq(wp, w);
        cr_expect_geq(ap, a);
        cr_expect_gt(ap, 0, "8 rows ran: the activations' peak is not zero");
        cJSON_Delete(doc);
    }
}

Test(srv_stats, a_version_never_served_is_404_and_an_unloaded_model_has_no_memory)
{
    http_resp_t r = http_get(fx.port, "/v2/models/mlp/versions/7/stats");
    cr_expect_eq(r.status, 404, "%s", r.body);
    free(r.body);
    char *body = mlp_body(1);
    r = http_post(fx.port, "/v2/models/mlp/infer", body);
    free(r.body);
    free(body);
    r = http_post(fx.port, "/v2/repository/models/mlp/unload", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cJSON *doc;
    cJSON *st = model_stat(fx.port, "/v2/models/mlp/versions/1/stats", &doc);
    cr_expect_eq(num(st, "execution_count", NULL), 1, "the counts outlive the unload");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "memory_usage")), 0);
    cJSON_Delete(doc);
}

/* ---- failures the batcher counts ------------------------------------------------ */

Test(srv_stats_config, a_full_queue_and_a_passed_deadline_are_rejected, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    /* One request waits out a 2 s batching delay; its 300 ms deadline
     * passes first; a second one meanwhile finds the queue full. */
    const char *mc = "{\"max_queue\": 1, \"max_batch_size\": 64, \"max_queue_delay\": \"2s\"}";
    fixture_write(&f, "mlp", "config.json", mc, strlen(mc));
    f.cfg.server.request_timeout_ns = 300000000ull;
    fixture_start(&f);
    http_bg_req_t q = {.port = f.port, .body = mlp_body(1)};
    pthread_t t;
    pthread_create(&t, NULL, http_bg_post, &q);
    usleep(100000);
    char *body = mlp_body(1);
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer", body);
    cr_expect_eq(r.status, 503, "the full queue: %s", r.body);
    free(r.body);
    pthread_join(t, NULL);
    cr_expect_eq(q.resp.status, 503, "the deadline: %s", q.resp.body);
    cr_expect(q.resp.body && strstr(q.resp.body, "queue"), "%s", q.resp.body);
    free(q.resp.body);
    free(q.body);
    free(body);
    cr_expect_eq(failures(f.port, "mlp", "REJECTED"), 2);
    cr_expect_eq(failures(f.port, "mlp", "BACKEND"), 0);
    fixture_stop(&f);
}

Test(srv_stats_config, a_run_that_fails_is_a_backend_failure, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "transformer", "transformer", 1);
    const char *mc = "{\"max_batch_size\": 256}";
    fixture_write(&f, "transformer", "config.json", mc, strlen(mc));
    /* Batch 256 needs 40 MiB of activations; the cache may hold 32. */
    f.cfg.memory.limit_bytes = 32u << 20;
    fixture_start(&f);
    srv_buf_t b = {0};
    fixture_body_halves(&b, "embeddings", "256,64,64", (size_t)256 * 64 * 64);
    http_resp_t r = http_post(f.port, "/v2/models/transformer/infer", b.data);
    cr_expect_eq(r.status, 507, "%s", r.body);
    free(r.body);
    srv_buf_free(&b);
    cr_expect_eq(failures(f.port, "transformer", "BACKEND"), 1);
    cr_expect_eq(failures(f.port, "transformer", "REJECTED"), 0);
    cJSON *doc;
    cJSON *st = model_stat(f.port, "/v2/models/transformer/stats", &doc);
    cr_expect_eq(num(cJSON_GetObjectItem(st, "inference_stats"), "fail", "count"), 1);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "batch_stats")), 0,
                 "a failed run is no execution");
    cJSON_Delete(doc);
    fixture_stop(&f);
}
