/* test_server_gpus.c -- a server on several GPUs ("device": "cuda:all" or
 * a list, or a model's config.pbtxt instance_group over two GPUs): one
 * instance of a model per device, each in its own device's cache, requests
 * spread over them with the same answers, every byte back on every device
 * at unload. Skips without two GPUs (the CPU suites cannot make a second
 * device); the GPU host runs it. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/provider.h"
#include "tests/server/server_fixture.h"

static int gpus_found(void)
{
    int n = 0;
    return alloc_cuda_probe(&n) == 0 ? n : 0;
}

/* The allocated bytes (current and peak) of device `dev`'s device cache in
 * /v1/memory. */
static void device_allocated(unsigned port, const char *dev, double *current, double *peak)
{
    http_resp_t r = http_get(port, "/v1/memory?segments=0");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    free(r.body);
    cr_assert_not_null(doc);
    cJSON *c;
    bool found = false;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "caches"))
    {
        cJSON *d = cJSON_GetObjectItem(c, "device"), *kind = cJSON_GetObjectItem(c, "kind");
        if (!cJSON_IsString(d) || strcmp(d->valuestring, dev) != 0 ||
            strcmp(kind->valuestring, "device") != 0)
            continue;
        cJSON *a = cJSON_GetObjectItem(c, "allocated_bytes");
        *current = cJSON_GetObjectItem(a, "current")->valuedouble;
        *peak = cJSON_GetObjectItem(a, "peak")->valuedouble;
        found = true;
    }
    cJSON_Delete(doc);
    cr_assert(found, "no device cache for %s in /v1/memory", dev);
}

/* An MLP request of `rows` rows, every element 0.25. */
static void mlp_body(srv_buf_t *b, int rows)
{
    char shape[32];
    snprintf(shape, sizeof shape, "%d,64", rows);
    srv_buf_printf(b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[%s],\"datatype\":\"FP32\","
                      "\"data\":[", shape);
    for (int i = 0; i < rows * 64; i++)
        srv_buf_append(b, i ? ",0.25" : "0.25", i ? 5 : 4);
    srv_buf_append(b, "]}]}", 5);
}

/* Runs the checks of one model served on GPUs 0 and 1 (its config says
 * "device" `label`): both device caches hold its weights, alike; requests
 * run on both (each cache's peak passes its weights) and answer alike; the
 * index and the config name both GPUs; unload leaves both at zero. */
static void expect_two_gpus(srv_fixture_t *f, const char *label)
{
    http_resp_t r = http_get(f->port, "/v2/models/mlp/config");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    free(r.body);
    cJSON *params = cJSON_GetObjectItem(doc, "parameters");
    cr_expect_str_eq(cJSON_GetObjectItem(params, "device")->valuestring, label);
    cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "instance_group"), 0);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "gpus")), 2);
    cJSON_Delete(doc);

    double w0 = 0, w1 = 0, p0 = 0, p1 = 0;
    device_allocated(f->port, "cuda:0", &w0, &p0);
    device_allocated(f->port, "cuda:1", &w1, &p1);
    cr_expect_gt(w0, 0, "no weights on cuda:0");
    cr_expect_eq(w0, w1, "the instances' bytes differ: cuda:0 %.0f, cuda:1 %.0f", w0, w1);

    srv_buf_t b = {0};
    mlp_body(&b, 32);
    char *first = NULL;
    for (int i = 0; i < 16; i++) {
        r = http_post(f->port, "/v2/models/mlp/infer", b.data);
        cr_assert_eq(r.status, 200, "request %d: %s", i, r.body);
        cJSON *o = cJSON_Parse(r.body);
        char *data = cJSON_PrintUnformatted(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "outputs"), 0), "data"));
        if (!first)
            first = data;
        else {
            cr_expect_str_eq(data, first, "request %d answered differently", i);
            free(data);
        }
        cJSON_Delete(o);
        free(r.body);
    }
    free(first);
    srv_buf_free(&b);
    double c0 = 0, c1 = 0;
    device_allocated(f->port, "cuda:0", &c0, &p0);
    device_allocated(f->port, "cuda:1", &c1, &p1);
    cr_expect_gt(p0, w0, "nothing ran on cuda:0 (peak %.0f, weights %.0f)", p0, w0);
    cr_expect_gt(p1, w1, "nothing ran on cuda:1 (peak %.0f, weights %.0f)", p1, w1);

    r = http_get(f->port, "/v2/models/stats");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = http_post(f->port, "/v2/repository/models/mlp/unload", "{}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    device_allocated(f->port, "cuda:0", &c0, &p0);
    device_allocated(f->port, "cuda:1", &c1, &p1);
    cr_expect_eq(c0, 0, "cuda:0 keeps %.0f bytes after the unload", c0);
    cr_expect_eq(c1, 0, "cuda:1 keeps %.0f bytes after the unload", c1);
}

Test(srv_gpus, cuda_all_serves_an_instance_on_each_gpu, .timeout = 120)
{
    int n = gpus_found();
    if (n < 2)
        cr_skip_test("needs two GPUs (found %d)", n);
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    f.cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CUDA, 0}, .n_more = 1,
                                  .more = {{ENG_DEVICE_CUDA, 1}}};
    fixture_start(&f);
    expect_two_gpus(&f, "cuda:0,1");
    fixture_stop(&f);
}

Test(srv_gpus, an_instance_group_over_two_gpus_serves_on_both, .timeout = 120)
{
    int n = gpus_found();
    if (n < 2)
        cr_skip_test("needs two GPUs (found %d)", n);
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    const char *pbtxt =
        "max_batch_size: 64\ninstance_group [ { count: 1 kind: KIND_GPU gpus: [ 1, 0 ] } ]\n";
    fixture_write(&f, "mlp", "config.pbtxt", pbtxt, strlen(pbtxt));
    f.cfg.device = (cfg_device_t){.set = true, .all_gpus = true};
    fixture_start(&f);
    expect_two_gpus(&f, "cuda:1,0");
    fixture_stop(&f);
}
