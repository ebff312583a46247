/* test_triton_repo.c -- a Triton model repository served end to end
 * (config.pbtxt, version directories, default_model_filename,
 * version_policy), max_batch_size refusing a larger request, a config.pbtxt
 * that does not match its ONNX model failing the load with the tensor
 * named, and the model control modes (none, explicit, poll) through a real
 * server on a temporary repository. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include "common/clock.h"
#include "server/app.h"
#include "tests/fuzz/fuzz_model.h"
#include "tests/server/server_fixture.h"

static srv_fixture_t fx;

static void fx_init(void)
{
    fixture_init(&fx);
}

static void fx_fini(void)
{
    fixture_stop(&fx);
}

/* REPO/<name>/<version>/<file> as a link to the demo MLP. */
static void add_mlp_as(const char *name, int version, const char *file)
{
    if (strcmp(file, "model.onnx") == 0) {
        fixture_add_model(&fx, name, "mlp", version);
        return;
    }
    char cwd[PATH_MAX], rel[64], target[PATH_MAX + 64], link[PATH_MAX + 256];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    fixture_mkdir(&fx, name);
    snprintf(rel, sizeof rel, "%s/%d", name, version);
    fixture_mkdir(&fx, rel);
    snprintf(target, sizeof target, "%s/models/mlp/1/model.onnx", cwd);
    if (access(target, R_OK) != 0)
        cr_skip_test("the demo model %s is missing (run make)", target);
    snprintf(link, sizeof link, "%s/%s/%d/%s", fx.repo, name, version, file);
    cr_assert_eq(symlink(target, link), 0, "symlink %s", link);
}

static void write_text(const char *name, const char *rel, const char *text)
{
    fixture_write(&fx, name, rel, text, strlen(text));
}

/* An MLP request of `rows` rows. */
static char *mlp_rows(int rows)
{
    srv_buf_t b = {0};
    fixture_body_halves(&b, "input", rows == 1 ? "1,64" : rows == 2 ? "2,64" : "16,64",
                        (size_t)rows * 64);
    return b.data;
}

/* The index entry of `name` as "STATE reason". */
static void index_state(const char *name, char *out, size_t len)
{
    http_resp_t r = http_post(fx.port, "/v2/repository/index", "");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    snprintf(out, len, "absent");
    cJSON *e;
    cJSON_ArrayForEach(e, doc)
    {
        if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, name) == 0)
            snprintf(out, len, "%s %s", cJSON_GetObjectItem(e, "state")->valuestring,
                     cJSON_GetObjectItem(e, "reason")->valuestring);
    }
    cJSON_Delete(doc);
    free(r.body);
}

static const char *const triton_mlp =
    "name: \"tmlp\"\n"
    "platform: \"onnxruntime_onnx\"\n"
    "max_batch_size: 8\n"
    "default_model_filename: \"net.onnx\"\n"
    "version_policy: { specific: { versions: [ 3 ] } }\n"
    "input [ { name: \"input\" data_type: TYPE_FP32 dims: [ 64 ] } ]\n"
    "output [ { name: \"probabilities\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "dynamic_batching { max_queue_delay_microseconds: 100\n"
    "  default_queue_policy { max_queue_size: 9 } }\n"
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    "parameters { key: \"threads\" value: { string_value: \"1\" } }\n";

TestSuite(triton_repo, .init = fx_init, .fini = fx_fini, .timeout = 120);

Test(triton_repo, serves_a_triton_layout_unchanged)
{
    add_mlp_as("tmlp", 3, "net.onnx");
    add_mlp_as("tmlp", 5, "net.onnx");
    write_text("tmlp", "config.pbtxt", triton_mlp);
    fixture_start(&fx);
    char state[1024];
    index_state("tmlp", state, sizeof state);
    cr_expect_str_eq(state, "READY ");

    char *body = mlp_rows(2);
    http_resp_t r = http_post(fx.port, "/v2/models/tmlp/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"model_version\":\"3\""), "version_policy specific [3]: %s", r.body);
    free(r.body);
    free(body);

    r = http_get(fx.port, "/v2/models/tmlp/config");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cr_expect_eq(cJSON_GetObjectItem(doc, "max_batch_size")->valueint, 8, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(doc, "default_model_filename")->valuestring, "net.onnx");
    cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "input"), 0);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(in, "dims")), 1, "no batch dim: %s", r.body);
    cJSON *db = cJSON_GetObjectItem(doc, "dynamic_batching");
    cr_expect_eq(cJSON_GetObjectItem(db, "max_queue_delay_microseconds")->valueint, 100);
    cr_expect_eq(cJSON_GetObjectItem(db, "max_queue_size")->valueint, 9);
    cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "instance_group"), 0);
    cr_expect_eq(cJSON_GetObjectItem(g, "count")->valueint, 2);
    cr_expect_str_eq(cJSON_GetObjectItem(g, "kind")->valuestring, "KIND_CPU");
    cJSON *vp = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "version_policy"), "specific");
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(vp, "versions"), 0)->valueint, 3);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "parameters"), "threads")->valueint, 1);
    cJSON_Delete(doc);
    free(r.body);
}

/* POST /v2/models/<name>/versions/<v>/infer: the status, and on 200
 * whether version v answered. */
static long infer_version(const char *name, int v)
{
    char path[128], want[64];
    snprintf(path, sizeof path, "/v2/models/%s/versions/%d/infer", name, v);
    snprintf(want, sizeof want, "\"model_version\":\"%d\"", v);
    char *body = mlp_rows(1);
    http_resp_t r = http_post(fx.port, path, body);
    long status = r.status;
    if (status == 200)
        cr_expect(strstr(r.body, want), "%s: %s", path, r.body);
    free(r.body);
    free(body);
    return status;
}

Test(triton_repo, version_policy_serves_several_versions_at_once)
{
    for (int v = 1; v <= 3; v++)
        add_mlp_as("m", v, "model.onnx");
    write_text("m", "config.pbtxt", "version_policy: { latest: { num_versions: 2 } }\n");
    fixture_start(&fx);
    cr_expect_eq(infer_version("m", 3), 200);
    cr_expect_eq(infer_version("m", 2), 200);
    cr_expect_eq(infer_version("m", 1), 404, "version 1 is not among the latest 2");
    http_resp_t r = http_get(fx.port, "/v2/models/m");
    cr_expect(strstr(r.body, "\"versions\":[\"3\",\"2\"]"), "%s", r.body);
    free(r.body);
    r = http_get(fx.port, "/v2/models/m/versions/1/ready");
    cr_expect(strstr(r.body, "versions 3, 2 are"), "%s", r.body);
    free(r.body);
    /* The index lists each serving version, as Triton's does. */
    r = http_post(fx.port, "/v2/repository/index", "");
    cr_expect(strstr(r.body, "{\"name\":\"m\",\"version\":\"3\",\"state\":\"READY\"") &&
                  strstr(r.body, "{\"name\":\"m\",\"version\":\"2\",\"state\":\"READY\""),
              "%s", r.body);
    free(r.body);

    /* A new version: the newest two are 4 and 3, swapped in together. */
    add_mlp_as("m", 4, "model.onnx");
    r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(infer_version("m", 4), 200);
    cr_expect_eq(infer_version("m", 3), 200);
    cr_expect_eq(infer_version("m", 2), 404);

    write_text("m", "config.pbtxt", "version_policy: { specific: { versions: [ 1, 3 ] } }\n");
    r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(infer_version("m", 1), 200);
    cr_expect_eq(infer_version("m", 3), 200);
    cr_expect_eq(infer_version("m", 4), 404);

    write_text("m", "config.pbtxt", "version_policy: { all: { } }\n");
    r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    for (int v = 1; v <= 4; v++)
        cr_expect_eq(infer_version("m", v), 200, "version %d", v);

    /* One missing version fails the whole load; the four keep serving. */
    write_text("m", "config.pbtxt", "version_policy: { specific: { versions: [ 2, 9 ] } }\n");
    r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, 404, "%s", r.body);
    cr_expect(strstr(r.body, "version 9 is asked for"), "%s", r.body);
    free(r.body);
    cr_expect_eq(infer_version("m", 1), 200);
    cr_expect_eq(infer_version("m", 4), 200);

    /* Unload frees every version (fixture_stop checks every byte came back). */
    r = http_post(fx.port, "/v2/repository/models/m/unload", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_expect_eq(infer_version("m", 4), 503);
}

Test(triton_repo, max_batch_size_refuses_a_larger_request)
{
    add_mlp_as("tmlp", 3, "net.onnx");
    write_text("tmlp", "config.pbtxt", triton_mlp);
    fixture_start(&fx);
    char *body = mlp_rows(16);
    http_resp_t r = http_post(fx.port, "/v2/models/tmlp/infer", body);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect(strstr(r.body, "16 rows, more than its max_batch_size 8"), "%s", r.body);
    free(r.body);
    free(body);
}

Test(triton_repo, max_batch_size_holds_without_dynamic_batching)
{
    add_mlp_as("m", 1, "model.onnx");
    write_text("m", "config.pbtxt", "max_batch_size: 1\n");
    fixture_start(&fx);
    char *body = mlp_rows(2);
    http_resp_t r = http_post(fx.port, "/v2/models/m/infer", body);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect(strstr(r.body, "max_batch_size 1"), "%s", r.body);
    free(r.body);
    free(body);
    body = mlp_rows(1);
    r = http_post(fx.port, "/v2/models/m/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    free(body);
}

/* Triton's rule: max_batch_size > 0 makes the first dim a batch dim, so a
 * raw binary request is a batch of one whose other variable dim is
 * deduced, without dynamic_batching too (Triton's http_test.py
 * test_raw_binary). */
Test(triton_repo, a_raw_binary_request_takes_max_batch_size_as_a_batch_dim)
{
    fixture_add_model(&fx, "enc", "encoder", 1);
    write_text("enc", "config.pbtxt", "max_batch_size: 4\n");
    fixture_start(&fx);
    float x[3 * 64];
    for (int i = 0; i < 3 * 64; i++)
        x[i] = (float)(i % 5) * 0.5f;
    const char *raw[] = {"Inference-Header-Content-Length: 0", NULL};
    http_resp_t r = http_do(fx.port, "POST", "/v2/models/enc/infer", x, sizeof x, raw);
    cr_assert_eq(r.status, 200, "%s", r.body);
    size_t hl = (size_t)strtoul(r.header_len, NULL, 10);
    cr_assert(hl > 0 && hl <= r.len, "header length '%s'", r.header_len);
    cJSON *doc = cJSON_ParseWithLength(r.body, hl);
    cJSON *shape = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0),
                                       "shape");
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, 1, "a batch of one: %.*s", (int)hl,
                 r.body);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 3, "seq deduced from 768 bytes");
    cJSON_Delete(doc);
    free(r.body);
}

/* REPO/<name>/1/model.onnx: y = Identity(x), FP32 [?, 4] with the first
 * dim unnamed, as Triton's QA identity models leave their batch dim. */
static void add_unnamed_identity(const char *name)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 4}, NULL);
    fuzz_mb_node(&b, "Identity", "x", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 4}, NULL);
    uint8_t *bytes = NULL;
    size_t len = 0;
    cr_assert_eq(fuzz_mb_pack(&b, &bytes, &len), 0);
    fuzz_mb_free(&b);
    char rel[64];
    fixture_mkdir(&fx, name);
    snprintf(rel, sizeof rel, "%s/1", name);
    fixture_mkdir(&fx, rel);
    fixture_write(&fx, name, "1/model.onnx", (const char *)bytes, len);
    free(bytes);
}

static const char ident_row[] =
    "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,4],\"datatype\":\"FP32\",\"data\":[1,2,3,4]}]}";

static void *ident_post(void *arg)
{
    http_resp_t *r = arg;
    *r = http_post(fx.port, "/v2/models/ident/infer", ident_row);
    return NULL;
}

/* max_batch_size > 0 declares the first dims the batch dim, named or not
 * (Triton's http_test.py test_descriptive_status_code: its model's are
 * unnamed): the model batches, so a request waits out the queue delay in
 * the queue, and max_queue_size 1 refuses a second with 503. */
Test(triton_repo, max_batch_size_batches_a_model_whose_batch_dims_are_unnamed)
{
    add_unnamed_identity("ident");
    write_text("ident", "config.pbtxt",
               "max_batch_size: 8\n"
               "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
               "  preferred_batch_size: [ 8 ] default_queue_policy { max_queue_size: 1 } }\n");
    fixture_start(&fx);
    http_resp_t cfg = http_get(fx.port, "/v2/models/ident/config");
    cr_expect(strstr(cfg.body, "\"dynamic_batching\""), "%s", cfg.body);
    free(cfg.body);
    http_resp_t first = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, ident_post, &first), 0);
    usleep(300 * 1000); /* the first waits up to 1 s for more rows */
    http_resp_t second = http_post(fx.port, "/v2/models/ident/infer", ident_row);
    http_expect_error(&second, 503, "the queue is full");
    pthread_join(t, NULL);
    cr_expect_eq(first.status, 200, "%s", first.body);
    cr_expect(strstr(first.body, "[1,2,3,4]"), "%s", first.body);
    free(first.body);
}

/* A pbtxt that disagrees with the model: the load fails, naming the
 * tensor, and the reason is in the index. */
static void expect_load_status(const char *pbtxt, long status, const char *want)
{
    write_text("m", "config.pbtxt", pbtxt);
    http_resp_t r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, status, "%s: %ld %s", pbtxt, r.status, r.body);
    cr_expect(strstr(r.body, want), "%s: lacks [%s]: %s", pbtxt, want, r.body);
    free(r.body);
    char state[1024];
    index_state("m", state, sizeof state);
    cr_expect(strstr(state, want), "index: %s", state);
}

static void expect_load_error(const char *pbtxt, const char *want)
{
    expect_load_status(pbtxt, 400, want);
}

Test(triton_repo, a_config_that_does_not_match_the_model_fails_its_load)
{
    add_mlp_as("m", 1, "model.onnx");
    fx.cfg.models_all = false;
    fixture_start(&fx);
    expect_load_error("input [ { name: \"pixels\" data_type: TYPE_FP32 dims: [ 64 ] } ]",
                      "input 'pixels' is not an input of the model");
    expect_load_error("input [ { name: \"input\" data_type: TYPE_INT64 dims: [ -1, 64 ] } ]",
                      "input 'input': data_type is TYPE_INT64, but the model's is float");
    expect_load_error("input [ { name: \"input\" data_type: TYPE_FP32 dims: [ -1, 32 ] } ]",
                      "input 'input': dims[1] is 32, but the model's is 64");
    expect_load_error("max_batch_size: 4\n"
                      "input [ { name: \"input\" data_type: TYPE_FP32 dims: [ -1, 64 ] } ]",
                      "2 dims and the batch dim");
    expect_load_error("output [ { name: \"probabilities\" data_type: TYPE_FP32 dims: [ 3, 10 ] } ]",
                      "dims[0] is 3 where the model's dim is symbolic");
    expect_load_error("name: \"other\"", "name is 'other'");
    expect_load_error("optimization { }", "has no field named");
    expect_load_status("default_model_filename: \"absent.onnx\"", 404,
                       "no version directory with a absent.onnx");
    expect_load_status("version_policy: { specific: { versions: [ 4 ] } }", 404,
                       "version 4 is asked for, but");
    /* And a matching one loads. */
    write_text("m", "config.pbtxt", "input [ { name: \"input\" data_type: TYPE_FP32 dims: [ -1, 64 ] } ]");
    http_resp_t r = http_post(fx.port, "/v2/repository/models/m/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
}

Test(triton_repo, an_inputs_fixed_dim_narrows_a_symbolic_one)
{
    add_mlp_as("m", 1, "model.onnx");
    write_text("m", "config.pbtxt",
               "input [ { name: \"input\" data_type: TYPE_FP32 dims: [ 2, 64 ] } ]\n");
    fixture_start(&fx);
    char *body = mlp_rows(1);
    http_resp_t r = http_post(fx.port, "/v2/models/m/infer", body);
    cr_expect_eq(r.status, 400, "one row where config.pbtxt says 2: %s", r.body);
    cr_expect(strstr(r.body, "input 'input'"), "%s", r.body);
    free(r.body);
    free(body);
    body = mlp_rows(2);
    r = http_post(fx.port, "/v2/models/m/infer", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    free(body);
    r = http_get(fx.port, "/v2/models/m");
    cr_expect(strstr(r.body, "\"shape\":[2,64]"), "metadata shows the narrowed shape: %s", r.body);
    free(r.body);
}

Test(triton_repo, config_json_and_config_pbtxt_together_are_an_error)
{
    add_mlp_as("m", 1, "model.onnx");
    write_text("m", "config.pbtxt", "max_batch_size: 4\n");
    write_text("m", "config.json", "{\"max_batch_size\": 4}");
    fx.cfg.server.exit_on_error = false; /* else start-up itself fails on it */
    fixture_start(&fx);
    char state[1024];
    index_state("m", state, sizeof state);
    cr_expect(strstr(state, "UNAVAILABLE") && strstr(state, "has both") &&
                  strstr(state, "config.pbtxt") && strstr(state, "config.json"),
              "%s", state);
}

/* ---- model control ---------------------------------------------------------------- */

Test(triton_repo, mode_none_loads_everything_and_refuses_the_api)
{
    add_mlp_as("a", 1, "model.onnx");
    add_mlp_as("b", 1, "model.onnx");
    fx.cfg.model_control_mode = CFG_CONTROL_NONE;
    fixture_start(&fx);
    char why[256];
    cr_expect(srv_app_models_ready(fx.app, why, sizeof why), "%s", why);
    http_resp_t r = http_post(fx.port, "/v2/repository/models/a/unload", "");
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect(strstr(r.body, "model control mode is none"), "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v2/repository/models/a/load", "");
    cr_expect_eq(r.status, 400, "%s", r.body);
    free(r.body);
    char(*wanted)[ENG_MODEL_NAME_MAX] = NULL;
    size_t n = 0;
    cr_assert_eq(srv_app_models_wanted(fx.app, &wanted, &n), 0);
    cr_expect_eq(n, 2);
    cr_expect_str_eq(wanted[0], "a");
    cr_expect_str_eq(wanted[1], "b");
    free(wanted);
}

Test(triton_repo, a_model_list_outside_explicit_mode_fails_start)
{
    add_mlp_as("a", 1, "model.onnx");
    fx.cfg.model_control_mode = CFG_CONTROL_POLL;
    fx.cfg.models_all = false;
    fx.cfg.n_models = 1;
    snprintf(fx.cfg.models[0], sizeof fx.cfg.models[0], "a");
    int rc = srv_app_start(&fx.cfg, &fx.app);
    cr_expect_eq(rc, FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "applies in explicit mode"), "%s", fs_errmsg());
    fx.app = NULL;
}

Test(triton_repo, mode_explicit_wants_the_startup_list_and_what_the_api_loads)
{
    add_mlp_as("a", 1, "model.onnx");
    add_mlp_as("b", 1, "model.onnx");
    fx.cfg.models_all = false;
    fx.cfg.n_models = 2;
    snprintf(fx.cfg.models[0], sizeof fx.cfg.models[0], "a");
    snprintf(fx.cfg.models[1], sizeof fx.cfg.models[1], "ghost");
    fx.cfg.server.exit_on_error = false; /* else start-up itself fails on ghost */
    fixture_start(&fx);
    char why[512];
    cr_expect(!srv_app_models_ready(fx.app, why, sizeof why));
    cr_expect(strstr(why, "model 'ghost'"), "a startup model that failed is still wanted: %s", why);

    http_resp_t r = http_post(fx.port, "/v2/repository/models/b/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    char(*wanted)[ENG_MODEL_NAME_MAX] = NULL;
    size_t n = 0;
    cr_assert_eq(srv_app_models_wanted(fx.app, &wanted, &n), 0);
    cr_expect_eq(n, 3);
    free(wanted);

    /* Unloading the failed one makes the server's set ready again. */
    r = http_post(fx.port, "/v2/repository/models/ghost/unload", "");
    free(r.body);
    cr_expect(srv_app_models_ready(fx.app, why, sizeof why), "%s", why);
    r = http_post(fx.port, "/v2/repository/models/b/unload", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    cr_assert_eq(srv_app_models_wanted(fx.app, &wanted, &n), 0);
    cr_expect_eq(n, 1);
    cr_expect_str_eq(wanted[0], "a");
    free(wanted);
}

/* Waits up to 10 s for `name`'s index entry to contain `want`. */
static bool wait_state(const char *name, const char *want, char *state, size_t len)
{
    for (int i = 0; i < 200; i++) {
        index_state(name, state, len);
        if (strstr(state, want))
            return true;
        usleep(50000);
    }
    return false;
}

/* Waits up to 10 s for an inference on `name` to answer with version `v`. */
static bool wait_version(const char *name, int v)
{
    char path[128], want[64];
    snprintf(path, sizeof path, "/v2/models/%s/infer", name);
    snprintf(want, sizeof want, "\"model_version\":\"%d\"", v);
    char *body = mlp_rows(1);
    bool ok = false;
    for (int i = 0; !ok && i < 200; i++) {
        http_resp_t r = http_post(fx.port, path, body);
        ok = r.status == 200 && strstr(r.body, want);
        free(r.body);
        if (!ok)
            usleep(50000);
    }
    free(body);
    return ok;
}

Test(triton_repo, mode_poll_loads_new_and_changed_models_and_unloads_removed_ones)
{
    add_mlp_as("a", 1, "model.onnx");
    fx.cfg.model_control_mode = CFG_CONTROL_POLL;
    fx.cfg.repository_poll_secs = 1;
    fixture_start(&fx);
    char state[1024];
    index_state("a", state, sizeof state);
    cr_expect_str_eq(state, "READY ");
    http_resp_t r = http_post(fx.port, "/v2/repository/models/a/load", "");
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect(strstr(r.body, "model control mode is poll"), "%s", r.body);
    free(r.body);

    /* A new version is swapped in. */
    add_mlp_as("a", 2, "model.onnx");
    cr_expect(wait_version("a", 2), "version 2 was not picked up");
    /* A changed config is applied (a rebuild of the same version). */
    write_text("a", "config.pbtxt", "max_batch_size: 1\n");
    char *body = mlp_rows(2);
    bool refused = false;
    for (int i = 0; !refused && i < 200; i++) {
        r = http_post(fx.port, "/v2/models/a/infer", body);
        refused = r.status == 400 && strstr(r.body, "max_batch_size 1");
        free(r.body);
        if (!refused)
            usleep(50000);
    }
    free(body);
    cr_expect(refused, "the changed config.pbtxt was not applied");
    /* A new model is loaded and wanted. */
    add_mlp_as("b", 1, "model.onnx");
    cr_expect(wait_state("b", "READY", state, sizeof state), "b: %s", state);
    /* A removed model is unloaded and no longer wanted. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/b", fx.repo);
    rm_tree(dir);
    bool gone = false;
    for (int i = 0; !gone && i < 200; i++) {
        index_state("b", state, sizeof state);
        gone = strcmp(state, "absent") == 0 || strstr(state, "UNAVAILABLE");
        if (!gone)
            usleep(50000);
    }
    cr_expect(gone, "b: %s", state);
    char why[256];
    cr_expect(srv_app_models_ready(fx.app, why, sizeof why), "%s", why);
}
