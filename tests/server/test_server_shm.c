/* test_server_shm.c -- Triton's system shared memory extension over HTTP:
 * regions registered, listed and unregistered; an inference whose input
 * and output lie in regions answers what the JSON path answers; the
 * errors name what is wrong; the admin token guards register and
 * unregister; CUDA shared memory keeps its own list (more in
 * test_server_cudashm.c); server.shared_memory false refuses it all naming the key; and no
 * mapping outlives unregister or stop. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/server/server_fixture.h"
#include "tests/server/shm_mlp.h"
#include "tests/server/shm_test.h"

#define OBJ_BYTES (3 * 4096)

static void shm_register(srv_fixture_t *f, const char *name, const char *key, uint64_t offset,
                         uint64_t size, long want)
{
    char path[128], body[256];
    snprintf(path, sizeof path, "/v2/systemsharedmemory/region/%s/register", name);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"offset\":%llu,\"byte_size\":%llu}", key,
             (unsigned long long)offset, (unsigned long long)size);
    http_resp_t r = http_post(f->port, path, body);
    cr_expect_eq(r.status, want, "register %s: %ld %s", name, r.status, r.body);
    free(r.body);
}

/* mlp's inference_stats counts: success and fail. */
static void mlp_counts(srv_fixture_t *f, double *success, double *fail)
{
    http_resp_t r = http_get(f->port, "/v2/models/mlp/stats");
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "model_stats"), 0);
    cJSON *is = cJSON_GetObjectItem(st, "inference_stats");
    cr_assert_not_null(is, "%s", r.body);
    *success = cJSON_GetObjectItem(cJSON_GetObjectItem(is, "success"), "count")->valuedouble;
    *fail = cJSON_GetObjectItem(cJSON_GetObjectItem(is, "fail"), "count")->valuedouble;
    cJSON_Delete(doc);
    free(r.body);
}

static const char *in_shm_body(char *buf, size_t len, const char *region, unsigned offset,
                               unsigned size, const char *outputs)
{
    snprintf(buf, len,
             "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],\"datatype\":\"FP32\","
             "\"parameters\":{\"shared_memory_region\":\"%s\",\"shared_memory_offset\":%u,"
             "\"shared_memory_byte_size\":%u}}]%s%s}",
             ROWS, MLP_IN, region, offset, size, outputs ? "," : "", outputs ? outputs : "");
    return buf;
}

Test(srv_shm_http, input_and_output_in_regions_answer_as_the_json_path, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    char key[64];
    void *obj;
    shm_test_make("http", OBJ_BYTES, key, &obj);
    cr_expect(has_extension(&f, "system_shared_memory"));
    float want[ROWS * MLP_OUT];
    json_path_result(&f, want);

    const unsigned in_bytes = ROWS * MLP_IN * 4, out_bytes = ROWS * MLP_OUT * 4;
    /* "in" from byte 0 (its input at 128: read where it lies), "in2" from
     * byte 4100 (its input unaligned: copied), "out" the last page. */
    shm_register(&f, "in", key, 0, 4096, 200);
    shm_register(&f, "in2", key, 4100, 4000, 200);
    shm_register(&f, "out", key, 8192, 4096, 200);
    cr_expect_eq(shm_test_mappings(key), 4);
    float x[ROWS * MLP_IN];
    input_values(x);
    memcpy((char *)obj + 128, x, in_bytes);
    memcpy((char *)obj + 4100 + 2, x, in_bytes);

    http_resp_t st = http_get(f.port, "/v2/systemsharedmemory/status");
    cr_expect_eq(st.status, 200);
    char expect[512];
    snprintf(expect, sizeof expect,
             "[{\"name\":\"in\",\"key\":\"%s\",\"offset\":0,\"byte_size\":4096},"
             "{\"name\":\"in2\",\"key\":\"%s\",\"offset\":4100,\"byte_size\":4000},"
             "{\"name\":\"out\",\"key\":\"%s\",\"offset\":8192,\"byte_size\":4096}]",
             key, key, key);
    cr_expect_str_eq(st.body, expect);
    free(st.body);
    st = http_get(f.port, "/v2/systemsharedmemory/region/in2/status");
    snprintf(expect, sizeof expect,
             "[{\"name\":\"in2\",\"key\":\"%s\",\"offset\":4100,\"byte_size\":4000}]", key);
    cr_expect_str_eq(st.body, expect);
    free(st.body);

    char body[1024];
    char outs[256];
    snprintf(outs, sizeof outs,
             "\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{\"shared_memory_region\":"
             "\"out\",\"shared_memory_offset\":16,\"shared_memory_byte_size\":%u}}]",
             out_bytes + 8);
    for (int round = 0; round < 2; round++) {
        memset((char *)obj + 8192, 0xee, 4096);
        cJSON *doc = infer_ok(&f, in_shm_body(body, sizeof body, round ? "in2" : "in",
                                              round ? 2 : 128, in_bytes, outs));
        cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0);
        cr_expect_null(cJSON_GetObjectItem(o, "data"), "no data for an output in shared memory");
        cr_expect_str_eq(cJSON_GetObjectItem(o, "datatype")->valuestring, "FP32");
        cJSON *p = cJSON_GetObjectItem(o, "parameters");
        cr_expect_str_eq(cJSON_GetObjectItem(p, "shared_memory_region")->valuestring, "out");
        cr_expect_eq(cJSON_GetObjectItem(p, "shared_memory_offset")->valuedouble, 16);
        cr_expect_eq(cJSON_GetObjectItem(p, "shared_memory_byte_size")->valuedouble, out_bytes);
        cr_expect_null(cJSON_GetObjectItem(p, "binary_data_size"));
        cJSON_Delete(doc);
        cr_expect_eq(memcmp((char *)obj + 8192 + 16, want, out_bytes), 0,
                     "round %d: the region holds the JSON path's result", round);
        cr_expect_eq(((unsigned char *)obj)[8192 + 16 + out_bytes], 0xee, "nothing past it");
    }
    /* An input in a region, the output in JSON. */
    float got[ROWS * MLP_OUT];
    infer_ok_probabilities(&f, in_shm_body(body, sizeof body, "in", 128, in_bytes, NULL), got);
    for (int i = 0; i < ROWS * MLP_OUT; i++)
        cr_expect_eq(got[i], want[i]);

    /* Unregister one, then all: every mapping goes. */
    cr_expect_eq(status_of(http_post(f.port, "/v2/systemsharedmemory/region/in/unregister", "")),
                 200);
    st = http_get(f.port, "/v2/systemsharedmemory/region/in/status");
    http_expect_error(&st, 400, "system shared memory region 'in' is not registered");
    cr_expect_eq(shm_test_mappings(key), 3);
    cr_expect_eq(status_of(http_post(f.port, "/v2/systemsharedmemory/unregister", "")), 200);
    st = http_get(f.port, "/v2/systemsharedmemory/status");
    cr_expect_str_eq(st.body, "[]");
    free(st.body);
    cr_expect_eq(shm_test_mappings(key), 1);
    /* Registered at stop: unmapped by it. */
    shm_register(&f, "late", key, 0, 4096, 200);
    cr_expect_eq(shm_test_mappings(key), 2);
    fixture_stop(&f);
    cr_expect_eq(shm_test_mappings(key), 1);
    shm_test_drop(key, obj, OBJ_BYTES);
}

Test(srv_shm_http, errors_name_the_region_the_tensor_and_the_bound, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    char key[64];
    void *obj;
    shm_test_make("err", OBJ_BYTES, key, &obj);
    const unsigned in_bytes = ROWS * MLP_IN * 4;
    shm_register(&f, "in", key, 0, 1024, 200);
    shm_register(&f, "out", key, 4096, 4096, 200);
    char body[1024];
    http_resp_t st;
    http_resp_t r = http_post(f.port, "/v2/models/mlp/infer",
                              in_shm_body(body, sizeof body, "ghost", 0, in_bytes, NULL));
    http_expect_error(&r, 400, "input 'input': shared memory region 'ghost' is not registered "
                               "(as system or CUDA shared memory)");
    r = http_post(f.port, "/v2/models/mlp/infer",
                  in_shm_body(body, sizeof body, "in", 600, in_bytes, NULL));
    http_expect_error(&r, 400, "input 'input': shared_memory_offset 600 + shared_memory_byte_size "
                               "512 is past the end of system shared memory region 'in' (1024 "
                               "bytes)");
    r = http_post(f.port, "/v2/models/mlp/infer",
                  in_shm_body(body, sizeof body, "in", 0, in_bytes - 4, NULL));
    http_expect_error(&r, 400, "shared_memory_byte_size is 508 but shape [2,64] of FP32 takes "
                               "512 bytes");
    /* An output larger than its range: refused, the region untouched, and
     * counted a failure (the model ran, the answer could not be given). */
    double success0, fail0, success1, fail1;
    mlp_counts(&f, &success0, &fail0);
    memset((char *)obj + 4096, 0x5a, 4096);
    r = http_post(f.port, "/v2/models/mlp/infer",
                  in_shm_body(body, sizeof body, "in", 0, in_bytes,
                              "\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{"
                              "\"shared_memory_region\":\"out\",\"shared_memory_byte_size\":40}}]"));
    http_expect_error(&r, 400, "output 'probabilities': shared_memory_byte_size is 40 but the "
                               "output has 80 bytes");
    cr_expect_eq(((unsigned char *)obj)[4096], 0x5a);
    r = http_post(f.port, "/v2/models/mlp/infer",
                  in_shm_body(body, sizeof body, "in", 0, in_bytes,
                              "\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{"
                              "\"shared_memory_region\":\"out\",\"shared_memory_offset\":4090,"
                              "\"shared_memory_byte_size\":80}}]"));
    http_expect_error(&r, 400, "output 'probabilities': shared_memory_offset 4090");
    mlp_counts(&f, &success1, &fail1);
    cr_expect_eq(success1, success0, "an answer that failed was counted a success");
    cr_expect_eq(fail1, fail0 + 2);

    /* Register's own errors. */
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register", "{\"byte_size\":64}");
    http_expect_error(&r, 400, "\"key\" (the shared memory object's name) is missing");
    char b[256];
    snprintf(b, sizeof b, "{\"key\":\"%s\"}", key);
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register", b);
    http_expect_error(&r, 400, "\"byte_size\" is missing");
    snprintf(b, sizeof b, "{\"key\":\"%s\",\"byte_size\":-4}", key);
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register", b);
    http_expect_error(&r, 400, "\"byte_size\" must be a non-negative integer");
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register", "not json");
    http_expect_error(&r, 400, "the body must be a JSON object");
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register",
                  "{\"key\":\"/fs-shm-test-absent\",\"byte_size\":64}");
    http_expect_error(&r, 400, "cannot open key '/fs-shm-test-absent'");
    snprintf(b, sizeof b, "{\"key\":\"%s\",\"offset\":12000,\"byte_size\":1000}", key);
    r = http_post(f.port, "/v2/systemsharedmemory/region/x/register", b);
    http_expect_error(&r, 400, "is past the end of key");
    snprintf(b, sizeof b, "{\"key\":\"%s\",\"byte_size\":64}", key);
    r = http_post(f.port, "/v2/systemsharedmemory/region/in/register", b);
    http_expect_error(&r, 400, "region 'in' is already registered");
    r = http_post(f.port, "/v2/systemsharedmemory/region/a:b/register", b);
    http_expect_error(&r, 400, "region name 'a:b' must be");
    /* Over the region limit (two are registered). */
    char path[96];
    for (int i = 0; i < 254; i++) {
        snprintf(path, sizeof path, "r%d", i);
        shm_register(&f, path, key, 0, 64, 200);
    }
    r = http_post(f.port, "/v2/systemsharedmemory/region/more/register", b);
    http_expect_error(&r, 400, "256 regions are mapped");
    cr_expect_eq(status_of(http_get(f.port, "/v2/systemsharedmemory/status/x")), 404);
    cr_expect_eq(status_of(http_get(f.port, "/v2/systemsharedmemory/region/in/register")), 405);
    /* CUDA shared memory keeps its own list: the system regions are not in
     * it, and its unregister leaves them registered. */
    r = http_get(f.port, "/v2/cudasharedmemory/status");
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, "[]");
    free(r.body);
    r = http_get(f.port, "/v2/cudasharedmemory/region/in/status");
    http_expect_error(&r, 400, "the region named 'in' is registered as system shared memory, not "
                               "CUDA shared memory");
    cr_expect_eq(status_of(http_post(f.port, "/v2/cudasharedmemory/unregister", "")), 200);
    cr_expect_eq(status_of(http_post(f.port, "/v2/cudasharedmemory/region/in/unregister", "")),
                 200);
    st = http_get(f.port, "/v2/systemsharedmemory/region/in/status");
    cr_expect_eq(st.status, 200, "the system region 'in' is untouched: %s", st.body);
    free(st.body);
    fixture_stop(&f);
    cr_expect_eq(shm_test_mappings(key), 1, "stop unmapped all 256");
    shm_test_drop(key, obj, OBJ_BYTES);
}

Test(srv_shm_http, the_admin_token_guards_register_and_unregister, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    snprintf(f.cfg.server.admin_token, sizeof f.cfg.server.admin_token, "s3cret");
    fixture_start(&f);
    char key[64];
    void *obj;
    shm_test_make("tok", 4096, key, &obj);
    char b[256];
    snprintf(b, sizeof b, "{\"key\":\"%s\",\"byte_size\":64}", key);
    http_resp_t r = http_post(f.port, "/v2/systemsharedmemory/region/r/register", b);
    http_expect_error(&r, 401, "server.admin_token");
    const char *auth[] = {"Authorization: Bearer s3cret", NULL};
    r = http_do(f.port, "POST", "/v2/systemsharedmemory/region/r/register", b, strlen(b), auth);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(status_of(http_get(f.port, "/v2/systemsharedmemory/status")), 200);
    r = http_post(f.port, "/v2/systemsharedmemory/unregister", "");
    http_expect_error(&r, 401, "server.admin_token");
    r = http_post(f.port, "/v2/systemsharedmemory/region/r/unregister", "");
    http_expect_error(&r, 401, "server.admin_token");
    cr_expect_eq(shm_test_mappings(key), 2);
    r = http_do(f.port, "POST", "/v2/systemsharedmemory/unregister", "", 0, auth);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(shm_test_mappings(key), 1);
    fixture_stop(&f);
    shm_test_drop(key, obj, 4096);
}

Test(srv_shm_http, shared_memory_false_refuses_the_routes_and_parameters, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    f.cfg.server.shared_memory = false;
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    cr_expect_not(has_extension(&f, "system_shared_memory"));
    const char *want = "Triton's system shared memory extension is turned off "
                       "(server.shared_memory is false)";
    http_resp_t r = http_get(f.port, "/v2/systemsharedmemory/status");
    http_expect_error(&r, 400, want);
    r = http_get(f.port, "/v2/systemsharedmemory/region/r/status");
    http_expect_error(&r, 400, want);
    r = http_post(f.port, "/v2/systemsharedmemory/region/r/register",
                  "{\"key\":\"/k\",\"byte_size\":64}");
    http_expect_error(&r, 400, want);
    r = http_post(f.port, "/v2/systemsharedmemory/unregister", "");
    http_expect_error(&r, 400, want);
    r = http_get(f.port, "/v2/cudasharedmemory/status");
    http_expect_error(&r, 400, want);
    r = http_post(f.port, "/v2/cudasharedmemory/unregister", "");
    http_expect_error(&r, 400, want);
    char body[1024];
    r = http_post(f.port, "/v2/models/mlp/infer",
                  in_shm_body(body, sizeof body, "r", 0, ROWS * MLP_IN * 4, NULL));
    http_expect_error(&r, 400, "input 'input': \"shared_memory_region\": Triton's system shared "
                               "memory extension is turned off (server.shared_memory is false)");
    fixture_stop(&f);
}

/* A request waiting in its batcher's queue holds its regions: unregistered
 * meanwhile, they leave the table at once but stay mapped until it ends,
 * and its output still lands in the object. */
Test(srv_shm_http, a_request_in_flight_keeps_its_regions_mapped_past_unregister, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    f.cfg.batching.max_batch_size = 8;
    f.cfg.batching.max_queue_delay_ns = 2500000000ull; /* one request waits 2.5 s for more */
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    char key[64];
    void *obj;
    shm_test_make("held", OBJ_BYTES, key, &obj);
    shm_register(&f, "in", key, 0, 4096, 200);
    shm_register(&f, "out", key, 8192, 4096, 200);
    float x[ROWS * MLP_IN];
    input_values(x);
    memcpy(obj, x, sizeof x);
    memset((char *)obj + 8192, 0, 4096);
    char body[1024];
    char outs[256];
    snprintf(outs, sizeof outs,
             "\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{\"shared_memory_region\":"
             "\"out\",\"shared_memory_byte_size\":%d}}]", ROWS * MLP_OUT * 4);
    http_bg_req_t q = {.port = f.port,
                       .body = (char *)in_shm_body(body, sizeof body, "in", 0,
                                                   ROWS * MLP_IN * 4, outs)};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, http_bg_post, &q), 0);
    usleep(800 * 1000); /* parsed and queued (sanitizers included); its batch starts at 2.5 s */
    cr_expect_eq(status_of(http_post(f.port, "/v2/systemsharedmemory/unregister", "")), 200);
    http_resp_t st = http_get(f.port, "/v2/systemsharedmemory/status");
    cr_expect_str_eq(st.body, "[]");
    free(st.body);
    cr_expect_eq(shm_test_mappings(key), 3, "both regions stay mapped while the request waits");
    pthread_join(t, NULL);
    cr_expect_eq(q.resp.status, 200, "%s", q.resp.body);
    free(q.resp.body);
    float want[ROWS * MLP_OUT];
    json_path_result(&f, want);
    cr_expect_eq(memcmp((char *)obj + 8192, want, sizeof want), 0,
                 "the output reached the region unregistered while it ran");
    /* The request is freed once its answer is sent: allow for that. */
    for (int i = 0; i < 200 && shm_test_mappings(key) != 1; i++)
        usleep(10 * 1000);
    cr_expect_eq(shm_test_mappings(key), 1, "unmapped once the request ended");
    fixture_stop(&f);
    shm_test_drop(key, obj, OBJ_BYTES);
}
