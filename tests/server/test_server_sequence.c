/* test_server_sequence.c -- Triton's sequence batching through a real
 * server (engine/sequence.c behind server/infer.c): an accumulator model
 * whose state the server keeps, its START/END controls filled from the
 * request's sequence parameters, sequences interleaved, the idle timeout,
 * Triton's refusals, the cap on live sequences, and an unload with live
 * sequences (fixture_stop checks every byte came back). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/app.h"
#include "tests/engine/onnx_build.h"
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

TestSuite(server_sequence, .init = fx_init, .fini = fx_fini, .timeout = 60);

/* REPO/acc: SUM = STATE_IN + INPUT becomes the state (STATE_OUT), and
 * OUTPUT = SUM + START + END, whose true values (100, 1000) show each
 * control as the server filled it. `strategy` goes inside
 * sequence_batching. */
static void write_acc(const char *strategy)
{
    static const int64_t dims[] = {-1, 1};
    static const char *const params[] = {"batch", NULL};
    mb_t b;
    mb_init(&b, 8, 13);
    const int i32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    mb_input(&b, "INPUT", i32, 2, dims, params);
    mb_input(&b, "START", i32, 2, dims, params);
    mb_input(&b, "END", i32, 2, dims, params);
    mb_input(&b, "STATE_IN", i32, 2, dims, params);
    mb_node(&b, "Add", "sum", "STATE_IN,INPUT", "SUM");
    mb_node(&b, "Add", "flags", "START,END", "FLAGS");
    mb_node(&b, "Add", "out", "SUM,FLAGS", "OUTPUT");
    mb_node(&b, "Identity", "keep", "SUM", "STATE_OUT");
    mb_output(&b, "OUTPUT", i32, 2, dims);
    mb_output(&b, "STATE_OUT", i32, 2, dims);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    fixture_mkdir(&fx, "acc");
    fixture_mkdir(&fx, "acc/1");
    fixture_write(&fx, "acc", "1/model.onnx", (const char *)bytes, len);
    mb_free(&b);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "name: \"acc\"\nmax_batch_size: 8\n"
             "input [ { name: \"INPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n"
             "output [ { name: \"OUTPUT\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n"
             "sequence_batching {\n  max_sequence_idle_microseconds: 300000\n%s"
             "  control_input [\n"
             "    { name: \"START\" control [ { kind: CONTROL_SEQUENCE_START "
             "int32_false_true: [ 0, 100 ] } ] },\n"
             "    { name: \"END\" control [ { kind: CONTROL_SEQUENCE_END "
             "int32_false_true: [ 0, 1000 ] } ] }\n  ]\n"
             "  state [ { input_name: \"STATE_IN\" output_name: \"STATE_OUT\" "
             "data_type: TYPE_INT32 dims: [ 1 ] } ]\n}\n",
             strategy);
    fixture_write(&fx, "acc", "config.pbtxt", cfg, strlen(cfg));
}

/* One request of sequence `id` ("7" or "\"abc\"") with INPUT [[value]]. */
static http_resp_t seq_send(const char *id, int value, bool start, bool end)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
             "\"data\":[%d]}],\"parameters\":{\"sequence_id\":%s,\"sequence_start\":%s,"
             "\"sequence_end\":%s}}",
             value, id, start ? "true" : "false", end ? "true" : "false");
    return http_post(fx.port, "/v2/models/acc/infer", body);
}

/* seq_send(), expecting 200 and OUTPUT [[want]] alone. */
static void expect_out(const char *id, int value, bool start, bool end, int want)
{
    http_resp_t r = seq_send(id, value, start, end);
    cr_assert_eq(r.status, 200, "%s %d: %s", id, value, r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *outs = cJSON_GetObjectItem(doc, "outputs");
    cr_expect_eq(cJSON_GetArraySize(outs), 1, "the state output is not answered: %s", r.body);
    cJSON *o = cJSON_GetArrayItem(outs, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(o, "name")->valuestring, "OUTPUT");
    cJSON *data = cJSON_GetObjectItem(o, "data");
    cr_expect_eq(cJSON_GetArrayItem(data, 0)->valueint, want, "%s %d: %s", id, value, r.body);
    cJSON_Delete(doc);
    free(r.body);
}

Test(server_sequence, accumulates_from_start_to_end)
{
    write_acc("");
    fixture_start(&fx);
    expect_out("7", 5, true, false, 5 + 100);
    expect_out("7", 2, false, false, 7);
    expect_out("7", 3, false, true, 10 + 1000);
    /* Ended: the id must START again, and then counts from zero. */
    http_resp_t r = seq_send("7", 1, false, false);
    http_expect_error(&r, 400, "inference request for sequence 7 to model 'acc' must specify "
                               "the START flag on the first request of the sequence");
    expect_out("7", 4, true, true, 4 + 100 + 1000);
}

Test(server_sequence, keeps_interleaved_sequences_apart)
{
    write_acc("  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 1000 }\n");
    fixture_start(&fx);
    expect_out("1", 1, true, false, 101);
    expect_out("\"abc\"", 10, true, false, 110);
    expect_out("1", 2, false, false, 3);
    expect_out("\"abc\"", 20, false, false, 30);
    /* A START for a live id begins it again, as in Triton. */
    expect_out("1", 5, true, false, 105);
    expect_out("\"abc\"", 1, false, true, 1031);
    expect_out("1", 1, false, true, 1006);
}

Test(server_sequence, refuses_requests_triton_refuses)
{
    write_acc("");
    fixture_start(&fx);
    http_resp_t r = seq_send("9", 1, false, false);
    http_expect_error(&r, 400, "must specify the START flag");
    r = seq_send("0", 1, true, false);
    http_expect_error(&r, 400, "inference request to model 'acc' must specify a non-zero or "
                               "non-empty correlation ID");
    r = http_post(fx.port, "/v2/models/acc/infer",
                  "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
                  "\"data\":[1]}]}");
    http_expect_error(&r, 400, "non-zero or non-empty correlation ID");
    r = http_post(fx.port, "/v2/models/acc/infer",
                  "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[2,1],\"datatype\":\"INT32\","
                  "\"data\":[1,2]}],\"parameters\":{\"sequence_id\":4,\"sequence_start\":true}}");
    http_expect_error(&r, 400, "must specify batch-size 1 due to requirements of sequence "
                               "batcher");
    r = http_post(fx.port, "/v2/models/acc/infer",
                  "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
                  "\"data\":[1]},{\"name\":\"STATE_IN\",\"shape\":[1,1],\"datatype\":\"INT32\","
                  "\"data\":[1]}],\"parameters\":{\"sequence_id\":4,\"sequence_start\":true}}");
    http_expect_error(&r, 400, "input 'STATE_IN' is filled by the server");
    r = http_post(fx.port, "/v2/models/acc/infer",
                  "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
                  "\"data\":[1]}],\"outputs\":[{\"name\":\"STATE_OUT\"}],"
                  "\"parameters\":{\"sequence_id\":4,\"sequence_start\":true}}");
    http_expect_error(&r, 400, "output 'STATE_OUT' is a sequence state");
    r = http_post(fx.port, "/v2/models/acc/infer",
                  "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
                  "\"data\":[1]}],\"parameters\":{\"sequence_id\":-4}}");
    http_expect_error(&r, 400, "\"sequence_id\" must be a string or an integer");
    /* None of these began sequence 4. */
    r = seq_send("4", 1, false, false);
    http_expect_error(&r, 400, "must specify the START flag");
}

Test(server_sequence, ends_a_sequence_left_idle)
{
    write_acc("");
    fixture_start(&fx);
    expect_out("3", 1, true, false, 101);
    usleep(150000);
    expect_out("3", 1, false, false, 2); /* within 300 ms of the last */
    usleep(700000);
    http_resp_t r = seq_send("3", 1, false, false);
    http_expect_error(&r, 400, "must specify the START flag");
}

Test(server_sequence, caps_live_sequences)
{
    write_acc("  oldest { max_candidate_sequences: 2 }\n");
    fixture_start(&fx);
    expect_out("1", 1, true, false, 101);
    expect_out("2", 1, true, false, 101);
    http_resp_t r = seq_send("3", 1, true, false);
    http_expect_error(&r, 503, "2 sequences are live");
    expect_out("1", 1, false, true, 1002); /* an END frees its place */
    expect_out("3", 1, true, false, 101);
}

Test(server_sequence, state_is_counted_and_freed_at_unload)
{
    write_acc("");
    fixture_start(&fx);
    expect_out("1", 1, true, false, 101);
    expect_out("2", 1, true, false, 101);
    http_resp_t r = http_get(fx.port, "/v1/memory");
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.body, "\"owner\":\"acc:1/sequence_state\""), "the state's owner: %.2000s",
              r.body);
    free(r.body);
    /* Unload with both live: their state goes, the byte check passes. */
    r = http_post(fx.port, "/v2/repository/models/acc/unload", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = seq_send("1", 1, false, false);
    cr_expect_eq(r.status, 503, "%s", r.body);
    free(r.body);
    r = http_post(fx.port, "/v2/repository/models/acc/load", "");
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    r = seq_send("1", 1, false, false);
    http_expect_error(&r, 400, "must specify the START flag");
}

Test(server_sequence, a_model_without_sequences_refuses_the_parameters)
{
    fixture_add_model(&fx, "mlp", "mlp", 1);
    fixture_start(&fx);
    srv_buf_t b = {0};
    fixture_body_halves(&b, "input", "1,64", 64);
    /* Insert the parameters before the final brace. */
    b.data[b.len - 2] = '\0';
    char *body = malloc(b.len + 64);
    snprintf(body, b.len + 64, "%s,\"parameters\":{\"sequence_id\":5}}", b.data);
    http_resp_t r = http_post(fx.port, "/v2/models/mlp/infer", body);
    http_expect_error(&r, 400, "model 'mlp' has no sequence_batching");
    free(body);
    srv_buf_free(&b);
}

/* The model's metadata and config, as a Triton client reads them: the
 * controls and the state are not inputs or outputs of the client's, and
 * the config says sequence_batching back as it was written. */
Test(server_sequence, metadata_hides_the_controls_and_config_says_sequence_batching)
{
    write_acc("  oldest { max_candidate_sequences: 4 }\n");
    fixture_start(&fx);
    http_resp_t r = http_get(fx.port, "/v2/models/acc");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cJSON *ins = cJSON_GetObjectItem(doc, "inputs"), *outs = cJSON_GetObjectItem(doc, "outputs");
    cr_expect_eq(cJSON_GetArraySize(ins), 1, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ins, 0), "name")->valuestring,
                     "INPUT");
    cr_expect_eq(cJSON_GetArraySize(outs), 1, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 0), "name")->valuestring,
                     "OUTPUT");
    cJSON_Delete(doc);
    free(r.body);

    r = http_get(fx.port, "/v2/models/acc/config");
    cr_assert_eq(r.status, 200, "%s", r.body);
    doc = cJSON_Parse(r.body);
    cr_expect_null(cJSON_GetObjectItem(doc, "dynamic_batching"), "%s", r.body);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "input")), 1, "%s", r.body);
    cJSON *sb = cJSON_GetObjectItem(doc, "sequence_batching");
    cr_assert_not_null(sb, "%s", r.body);
    cr_expect_eq(cJSON_GetObjectItem(sb, "max_sequence_idle_microseconds")->valuedouble, 300000);
    cJSON *ci = cJSON_GetObjectItem(sb, "control_input");
    cr_assert_eq(cJSON_GetArraySize(ci), 2, "%s", r.body);
    cJSON *start = cJSON_GetArrayItem(ci, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(start, "name")->valuestring, "START");
    cJSON *ctl = cJSON_GetArrayItem(cJSON_GetObjectItem(start, "control"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(ctl, "kind")->valuestring, "CONTROL_SEQUENCE_START");
    cJSON *ft = cJSON_GetObjectItem(ctl, "int32_false_true");
    cr_expect_eq(cJSON_GetArrayItem(ft, 1)->valuedouble, 100, "%s", r.body);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(sb, "state"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(st, "input_name")->valuestring, "STATE_IN");
    cr_expect_str_eq(cJSON_GetObjectItem(st, "output_name")->valuestring, "STATE_OUT");
    cr_expect_str_eq(cJSON_GetObjectItem(st, "data_type")->valuestring, "TYPE_INT32");
    cJSON *old = cJSON_GetObjectItem(sb, "oldest");
    cr_assert_not_null(old, "%s", r.body);
    cr_expect_eq(cJSON_GetObjectItem(old, "max_candidate_sequences")->valuedouble, 4);
    cJSON_Delete(doc);
    free(r.body);
}
