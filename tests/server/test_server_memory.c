/* test_server_memory.c -- the server's memory is bounded by default: the
 * limit its cache gets when the configuration sets none, admission (507
 * before anything runs) for a request whose plan cannot fit under the
 * limit, a model whose constant folding would pass it, and the default
 * release policies. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/provider.h"
#include "engine/engine.h"
#include "server/buf.h"
#include "tests/engine/onnx_build.h"
#include "tests/server/server_fixture.h"

/* Checks the status and that the {"error": ...} text holds `needle`; frees
 * the body. */
static void expect_error(http_resp_t *r, long status, const char *needle)
{
    cr_expect_eq(r->status, status, "status %ld (want %ld): %s", r->status, status, r->body);
    cr_expect(r->body && strstr(r->body, needle) != NULL, "'%s' not in the error: %s", needle,
              r->body);
    free(r->body);
}

/* The /v1/memory entry of the CPU's device cache (a parsed document the
 * caller deletes, and the entry in it). */
static cJSON *cpu_cache(unsigned port, cJSON **doc)
{
    http_resp_t r = http_get(port, "/v1/memory");
    cr_assert_eq(r.status, 200, "%s", r.body);
    *doc = cJSON_Parse(r.body);
    free(r.body);
    cr_assert_not_null(*doc);
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(*doc, "caches"))
    {
        cJSON *dev = cJSON_GetObjectItem(c, "device"), *kind = cJSON_GetObjectItem(c, "kind");
        if (cJSON_IsString(dev) && strcmp(dev->valuestring, "cpu") == 0 &&
            strcmp(kind->valuestring, "device") == 0)
            return c;
    }
    cr_assert_fail("no cpu device cache in /v1/memory");
    return NULL;
}

Test(srv_memory, the_default_limit_is_a_fraction_of_what_the_process_may_use, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    f.cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    fixture_start(&f);

    alloc_provider_t *host = NULL;
    cr_assert_eq(alloc_provider_host_create(&host), 0, "%s", fs_errmsg());
    size_t free_bytes = 0, total = 0;
    cr_assert_eq(alloc_provider_mem_info(host, &free_bytes, &total), 0, "%s", fs_errmsg());
    alloc_provider_destroy(host);

    cJSON *doc = NULL, *c = cpu_cache(f.port, &doc);
    cJSON *limit = cJSON_GetObjectItem(c, "limit_bytes");
    cr_assert(cJSON_IsNumber(limit), "the default config leaves the cache without a limit");
    cr_expect_eq((uint64_t)limit->valuedouble, (uint64_t)((double)total * ENG_MEMORY_HOST_FRACTION),
                 "limit %.0f, want %g of %zu", limit->valuedouble, ENG_MEMORY_HOST_FRACTION, total);
    cJSON *pols = cJSON_GetObjectItem(c, "policies");
    cr_assert_eq(cJSON_GetArraySize(pols), 2);
    cr_expect_str_eq(cJSON_GetArrayItem(pols, 0)->valuestring, "arena");
    cr_expect_str_eq(cJSON_GetArrayItem(pols, 1)->valuestring, "idle_trim");
    cJSON_Delete(doc);
    fixture_stop(&f);
}

/* An encoder request of [1, seq, 64] with every element 0.5. */
static void encoder_body(srv_buf_t *b, int seq)
{
    char shape[32];
    snprintf(shape, sizeof shape, "1,%d,64", seq);
    fixture_body_halves(b, "embeddings", shape, (size_t)seq * 64);
}

Test(srv_memory, a_request_whose_plan_cannot_fit_is_refused_before_it_runs, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "encoder", "encoder", 1);
    f.cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    f.cfg.memory.limit_bytes = 64u << 20;
    fixture_start(&f);
    cJSON *doc = NULL;
    double reserved_before =
        cJSON_GetObjectItem(cJSON_GetObjectItem(cpu_cache(f.port, &doc), "reserved_bytes"),
                            "peak")->valuedouble;
    cJSON_Delete(doc);

    /* seq 4096: each [1, 4, 4096, 4096] attention score tensor alone is
     * 256 MiB, four times the limit. */
    srv_buf_t b = {0};
    encoder_body(&b, 4096);
    http_resp_t r = http_post(f.port, "/v2/models/encoder/infer", b.data);
    expect_error(&r, 507, "more than the memory limit");
    srv_buf_free(&b);

    /* Nothing was allocated for it: the cache's peak did not move. */
    cJSON *c = cpu_cache(f.port, &doc);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "reserved_bytes"), "peak")->valuedouble,
                 reserved_before, "the refused request reserved memory: %s", cJSON_Print(c));
    cJSON_Delete(doc);

    encoder_body(&b, 8);
    r = http_post(f.port, "/v2/models/encoder/infer", b.data);
    cr_expect_eq(r.status, 200, "seq 8 after the refusal: %s", r.body);
    free(r.body);
    srv_buf_free(&b);
    fixture_stop(&f);
}

/* REPO/huge/1/model.onnx: y = x + sum(ConstantOfShape([2^40])), a constant
 * that folding would expand to 4 TiB. */
static void write_huge_fold_model(srv_fixture_t *f)
{
    mb_t b;
    mb_init(&b, 8, 17);
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){1}, NULL);
    Onnx__TensorProto *shape =
        mb_tensor(&b, "shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){1});
    mb_int64s(&b, shape, (int64_t[]){(int64_t)1 << 40}, 1);
    mb_initializer(&b, shape);
    mb_node(&b, "ConstantOfShape", "expand", "shape", "big");
    Onnx__NodeProto *sum = mb_node(&b, "ReduceSum", "sum", "big", "total");
    mb_attr_i(&b, sum, "keepdims", 1);
    mb_node(&b, "Add", "add", "x,total", "y");
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){1});
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/huge", f->repo);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(dir, sizeof dir, "%s/huge/1", f->repo);
    cr_assert_eq(mkdir(dir, 0755), 0);
    fixture_write(f, "huge", "1/model.onnx", (const char *)bytes, len);
    mb_free(&b);
}

Test(srv_memory, a_model_whose_folding_passes_the_default_limit_fails_its_load, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    f.cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    f.cfg.models_all = false;
    snprintf(f.cfg.models[0], sizeof f.cfg.models[0], "mlp");
    f.cfg.n_models = 1;
    fixture_start(&f);
    write_huge_fold_model(&f);
    http_resp_t r = http_post(f.port, "/v2/repository/models/huge/load", "");
    expect_error(&r, 507, "constant folding needs a 4.00 TiB constant");
    r = http_get(f.port, "/v2/models/huge/ready");
    cr_expect_neq(r.status, 200, "the model became ready");
    free(r.body);
    r = http_get(f.port, "/v2/models/mlp/ready");
    cr_expect_eq(r.status, 200, "mlp after the refused load: %s", r.body);
    free(r.body);
    fixture_stop(&f);
}
