/* test_codec_bytes.c -- BYTES on the wire (server/codec_bytes.c): Triton's
 * serialized layout and its malformed forms, JSON strings (nested, NUL
 * through \u0000, a non-string element), and a string model answering over
 * HTTP in JSON and in binary, two requests batched together each getting
 * its own strings back. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "server/codec_bytes.h"
#include "server/codec_impl.h"
#include "tests/engine/onnx_build.h"
#include "tests/server/server_fixture.h"

/* Serializes n strings (Triton's layout) into buf; returns the bytes. */
static size_t ser(uint8_t *buf, const char *const *s, const size_t *lens, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t l = (uint32_t)lens[i];
        memcpy(buf + at, &l, 4);
        memcpy(buf + at + 4, s[i], l);
        at += 4 + l;
    }
    return at;
}

Test(srv_bytes, serialized_round_trip_and_malformed_forms)
{
    const char *s[] = {"he\0llo", "", "a string longer than twenty-four bytes"};
    const size_t lens[] = {6, 0, strlen(s[2])};
    uint8_t buf[256];
    size_t n = ser(buf, s, lens, 3);
    eng_tensor_t t = {.dtype = ENG_DT_STRING, .shape = {1, {3}}};
    cr_assert_eq(srv_bytes_decode("input 'x'", buf, n, &t), 0, "%s", fs_errmsg());
    const eng_string_t *r = t.data;
    cr_expect(r[0].len == 6 && memcmp(eng_string_data(&r[0]), "he\0llo", 6) == 0);
    cr_expect_eq(r[1].len, 0);
    cr_expect(r[2].len == lens[2] && memcmp(eng_string_data(&r[2]), s[2], lens[2]) == 0);
    cr_expect_eq(srv_bytes_size(&t), n);
    uint8_t back[256];
    srv_bytes_write(&t, back);
    cr_expect(memcmp(back, buf, n) == 0, "serializes back to the same bytes");
    free(t.data);

    t.data = NULL;
    cr_expect_eq(srv_bytes_decode("input 'x'", buf, n - 1, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "element 2 has length 38, past the end"), "%s", fs_errmsg());
    cr_expect_eq(srv_bytes_decode("input 'x'", buf, 12, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "ends after 1 of 3 elements"), "%s", fs_errmsg());
    t.shape.dims[0] = 2;
    cr_expect_eq(srv_bytes_decode("input 'x'", buf, n, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "bytes after its 2 elements"), "%s", fs_errmsg());
    uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 'a', 'b', 'c', 'd'};
    t.shape.dims[0] = 1;
    cr_expect_eq(srv_bytes_decode("input 'x'", huge, 8, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "length 4294967295"), "%s", fs_errmsg());
    cr_expect_null(t.data, "nothing allocated on error");
}

Test(srv_bytes, json_strings_nested_with_nul_and_refusals)
{
    const char *json = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2],\"datatype\":\"BYTES\","
                       "\"data\":[[\"a\\u0000b\",\"\"],[\"\\u00e9\",\"a string longer than "
                       "twenty-four bytes\"]]}]}";
    srv_infer_request_t *r = NULL;
    cr_assert_eq(srv_infer_request_parse(json, strlen(json), 0, &r), 0, "%s", fs_errmsg());
    const eng_string_t *s = r->inputs[0].tensor.data;
    cr_expect(s[0].len == 3 && memcmp(eng_string_data(&s[0]), "a\0b", 3) == 0);
    cr_expect(s[2].len == 2 && memcmp(eng_string_data(&s[2]), "\xc3\xa9", 2) == 0);
    cr_expect_eq(s[3].len, 38);
    srv_infer_request_free(r);

    const char *num = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"BYTES\","
                      "\"data\":[\"a\",1]}]}";
    cr_expect_eq(srv_infer_request_parse(num, strlen(num), 0, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "BYTES element 1 is a number, not a string"), "%s",
              fs_errmsg());
    const char *count = "{\"inputs\":[{\"name\":\"x\",\"shape\":[3],\"datatype\":\"BYTES\","
                        "\"data\":[\"a\",\"b\"]}]}";
    cr_expect_eq(srv_infer_request_parse(count, strlen(count), 0, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "has 3 elements but \"data\" has 2"), "%s", fs_errmsg());
    /* \u0000 is BYTES data's alone: in a name it is still refused. */
    const char *name = "{\"inputs\":[{\"name\":\"x\\u0000\",\"shape\":[1],\"datatype\":\"BYTES\","
                       "\"data\":[\"a\\u0000\"]}]}";
    cr_expect_eq(srv_infer_request_parse(name, strlen(name), 0, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "no name, id or parameter may hold a NUL"), "%s", fs_errmsg());
    /* Binary data sized by its serialized bytes, checked to the last one. */
    char body[512];
    int hl = snprintf(body, sizeof body, "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":"
                      "\"BYTES\",\"parameters\":{\"binary_data_size\":9}}]}");
    memcpy(body + hl, "\1\0\0\0a\0\0\0\0", 9);
    cr_assert_eq(srv_infer_request_parse(body, (size_t)hl + 9, (size_t)hl, &r), 0, "%s",
                 fs_errmsg());
    cr_expect_eq(((const eng_string_t *)r->inputs[0].tensor.data)[0].len, 1);
    srv_infer_request_free(r);
    memcpy(body + hl, "\11\0\0\0a\0\0\0\0", 9);
    cr_expect_eq(srv_infer_request_parse(body, (size_t)hl + 9, (size_t)hl, &r), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "input 'x': BYTES element 0 has length 9, past the end"), "%s", fs_errmsg());
}

/* REPO/strs/1/model.onnx: Y = Identity(X), X [batch, 2] of strings;
 * config max_batch_size 8 with a queue delay, so requests batch. */
static void start(srv_fixture_t *f)
{
    fixture_init(f);
    fixture_add_model(f, "mlp", "mlp", 1); /* beside a float model */
    mb_t b;
    mb_init(&b, 8, 17);
    const char *batch[] = {"batch", NULL};
    mb_input(&b, "X", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, (int64_t[]){-1, 2}, batch);
    mb_node(&b, "Identity", "id", "X", "Y");
    mb_output(&b, "Y", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, (int64_t[]){-1, 2});
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    fixture_mkdir(f, "strs");
    fixture_mkdir(f, "strs/1");
    fixture_write(f, "strs", "1/model.onnx", (const char *)bytes, len);
    mb_free(&b);
    const char *pbtxt = "max_batch_size: 8\ninput [ { name: \"X\" data_type: TYPE_STRING dims: "
                        "[ 2 ] } ]\noutput [ { name: \"Y\" data_type: TYPE_STRING dims: [ 2 ] } "
                        "]\ndynamic_batching { max_queue_delay_microseconds: 200000 }\n";
    fixture_write(f, "strs", "config.pbtxt", pbtxt, strlen(pbtxt));
    f->cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CPU, 0}};
    fixture_start(f);
}

typedef struct post_arg {
    unsigned port;
    const char *body;
    http_resp_t r;
} post_arg_t;

static void *post_bg(void *p)
{
    post_arg_t *a = p;
    a->r = http_post(a->port, "/v2/models/strs/infer", a->body);
    return NULL;
}

Test(srv_bytes, a_string_model_answers_json_and_binary_and_batches_right, .timeout = 60)
{
    srv_fixture_t f;
    start(&f);
    http_resp_t meta = http_get(f.port, "/v2/models/strs");
    cr_expect(strstr(meta.body, "\"datatype\":\"BYTES\""), "%s", meta.body);
    free(meta.body);
    /* Two requests at once: the queue delay batches them; each must get
     * its own rows back. */
    post_arg_t a[2] = {
        {f.port, "{\"inputs\":[{\"name\":\"X\",\"shape\":[1,2],\"datatype\":\"BYTES\",\"data\":"
                 "[[\"first\",\"a string longer than twenty-four bytes, one\"]]}]}", {0}},
        {f.port, "{\"inputs\":[{\"name\":\"X\",\"shape\":[2,2],\"datatype\":\"BYTES\",\"data\":"
                 "[[\"x\",\"y\"],[\"q\\\"uote\",\"\"]]}]}", {0}}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, post_bg, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(a[0].r.status, 200, "%s", a[0].r.body);
    cr_expect(strstr(a[0].r.body, "\"datatype\":\"BYTES\",\"shape\":[1,2],\"data\":[\"first\","
                                  "\"a string longer than twenty-four bytes, one\"]"),
              "%s", a[0].r.body);
    cr_expect_eq(a[1].r.status, 200, "%s", a[1].r.body);
    cr_expect(strstr(a[1].r.body, "\"shape\":[2,2],\"data\":[\"x\",\"y\",\"q\\\"uote\",\"\"]"),
              "%s", a[1].r.body);
    free(a[0].r.body);
    free(a[1].r.body);

    /* Binary in and out: 4-byte lengths, binary_data_size the whole. */
    char body[512];
    int hl = snprintf(body, sizeof body, "{\"inputs\":[{\"name\":\"X\",\"shape\":[1,2],"
                      "\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":13}}],"
                      "\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"binary_data\":true}}]}");
    memcpy(body + hl, "\3\0\0\0he\0\2\0\0\0yo", 13);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %d", hl);
    const char *headers[] = {hdr, "Content-Type: application/octet-stream", NULL};
    http_resp_t r = http_do(f.port, "POST", "/v2/models/strs/infer", body, (size_t)hl + 13,
                            headers);
    cr_assert_eq(r.status, 200, "%s", r.body);
    size_t jl = (size_t)atol(r.header_len);
    cr_expect(strstr(r.body, "\"binary_data_size\":13"), "%.*s", (int)jl, r.body);
    cr_expect_eq(r.len, jl + 13);
    cr_expect(r.len == jl + 13 && memcmp(r.body + jl, "\3\0\0\0he\0\2\0\0\0yo", 13) == 0);
    free(r.body);

    /* Malformed binary: a 400 naming what is wrong. */
    memcpy(body + hl, "\21\0\0\0he\0\2\0\0\0yo", 13);
    r = http_do(f.port, "POST", "/v2/models/strs/infer", body, (size_t)hl + 13, headers);
    http_expect_error(&r, 400, "BYTES element 0 has length 17, past the end");
    fixture_stop(&f);
}
