/* test_hostile.c -- the server against hostile input: one catalogue of bad
 * requests, bad connections and bad model files, replayed against a live
 * server while good inference requests run beside it in other threads.
 *
 * For every entry: the status (exact where the contract fixes it, else its
 * class), an error body that names the problem, and the server ready
 * after it. For each replay: every good request answered 200 with the
 * right output (some ran, none failed), and, once every model is
 * unloaded, every cache back to zero allocated bytes and a clean stop. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/engine/onnx_build.h"
#include "tests/server/server_fixture.h"

/* ---- the fixture ---------------------------------------------------------------------- */

#define LIMIT_BYTES (48u << 20) /* memory.limit_bytes: the encoder's seq 2048 cannot fit; a GPU
                                  * fits the good traffic (cuBLAS takes 8 MiB) */
#define MAX_BODY (1u << 20)       /* server.max_body */
#define TIMEOUT_S 1               /* server.connection_timeout */

static void write_model(srv_fixture_t *f, const char *model, mb_t *b, size_t keep,
                        const void *extra, size_t n_extra);

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* "shaped": shapes that come from a request's data. "fill" (INT64 [2])
 * -> ConstantOfShape -> "filled"; "x" (FLOAT [n]) reshaped to "to"
 * (INT64 [2]) -> "reshaped". */
static void write_shaped_model(srv_fixture_t *f)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "fill", I64, 1, (int64_t[]){2}, NULL);
    const char *sym[] = {"n", NULL};
    mb_input(&b, "x", F, 1, (int64_t[]){-1}, sym);
    mb_input(&b, "to", I64, 1, (int64_t[]){2}, NULL);
    mb_node(&b, "ConstantOfShape", "fill", "fill", "filled");
    mb_node(&b, "Reshape", "reshape", "x,to", "reshaped");
    mb_output(&b, "filled", F, -1, NULL);
    mb_output(&b, "reshaped", F, -1, NULL);
    write_model(f, "shaped", &b, 0, NULL, 0);
}

/* mlp (the good traffic and most entries), encoder (the out-of-memory
 * entry) and shaped (shapes from data), with a short connection timeout
 * and low limits. */
static void hostile_start(srv_fixture_t *f)
{
    fixture_init(f);
    fixture_add_model(f, "mlp", "mlp", 1);
    fixture_add_model(f, "encoder", "encoder", 1);
    write_shaped_model(f);
    f->cfg.memory.limit_bytes = LIMIT_BYTES;
    f->cfg.server.max_body_bytes = MAX_BODY;
    f->cfg.server.connection_timeout_ns = TIMEOUT_S * 1000000000ull;
    f->cfg.log.level = FS_LOG_ERROR; /* every entry would warn */
    fixture_start(f);
}

/* ---- good traffic --------------------------------------------------------------------- */

#define N_GOOD 4          /* distinct good requests */
#define N_GOOD_THREADS 2

typedef struct good_traffic {
    unsigned port;
    char *bodies[N_GOOD];
    char *answers[N_GOOD];        /* each body's answer alone */
    pthread_t threads[N_GOOD_THREADS];
    bool exact;                   /* answers must match bit for bit (the CPU's GEMM is
                                   * batch-invariant; cuBLAS is not) */
    atomic_bool stop;
    atomic_int n_ok, n_bad;
    pthread_mutex_t lock;
    char first_bad[512];          /* the first wrong answer */
} good_traffic_t;

static char *mlp_good_body(int rows, int seed)
{
    srv_buf_t b = {0};
    srv_buf_printf(&b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,64],\"datatype\":\"FP32\","
                       "\"data\":[", rows);
    for (int i = 0; i < rows * 64; i++)
        srv_buf_printf(&b, "%s%g", i ? "," : "", (double)((i * 3 + seed * 17) % 83) / 83.0 - 0.5);
    srv_buf_append(&b, "]}]}", 5);
    return b.data;
}

/* Whether an answer is the reference one: the same text on the CPU, the
 * same outputs within 1e-5 on a GPU (a batch of another size may meet
 * another GEMM algorithm). */
static bool good_matches(const good_traffic_t *t, const char *got, const char *want)
{
    if (t->exact || strcmp(got, want) == 0)
        return strcmp(got, want) == 0;
    cJSON *a = cJSON_Parse(got), *b = cJSON_Parse(want);
    cJSON *oa = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "outputs"), 0);
    cJSON *ob = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "outputs"), 0);
    cJSON *da = cJSON_GetObjectItem(oa, "data"), *db = cJSON_GetObjectItem(ob, "data");
    bool ok = cJSON_IsArray(da) && cJSON_IsArray(db) &&
              cJSON_GetArraySize(da) == cJSON_GetArraySize(db);
    for (int i = 0; ok && i < cJSON_GetArraySize(da); i++)
        ok = fabs(cJSON_GetArrayItem(da, i)->valuedouble -
                  cJSON_GetArrayItem(db, i)->valuedouble) <= 1e-5;
    cJSON_Delete(a);
    cJSON_Delete(b);
    return ok;
}

static void *good_client(void *arg)
{
    good_traffic_t *t = arg;
    for (int k = 0; !atomic_load(&t->stop); k++) {
        int which = k % N_GOOD;
        http_resp_t r = http_post(t->port, "/v2/models/mlp/infer", t->bodies[which]);
        if (r.status == 200 && good_matches(t, r.body, t->answers[which])) {
            atomic_fetch_add(&t->n_ok, 1);
        } else if (atomic_fetch_add(&t->n_bad, 1) == 0) {
            pthread_mutex_lock(&t->lock);
            snprintf(t->first_bad, sizeof t->first_bad, "status %ld (curl %d): %.400s", r.status,
                     (int)r.curl, r.body);
            pthread_mutex_unlock(&t->lock);
        }
        free(r.body);
    }
    return NULL;
}

static void good_start(good_traffic_t *t, const srv_fixture_t *f)
{
    memset(t, 0, sizeof *t);
    t->port = f->port;
    t->exact = strcmp(srv_app_device(f->app), "cpu") == 0;
    pthread_mutex_init(&t->lock, NULL);
    for (int i = 0; i < N_GOOD; i++) {
        t->bodies[i] = mlp_good_body(1 + i % 3, i);
        http_resp_t r = http_post(f->port, "/v2/models/mlp/infer", t->bodies[i]);
        cr_assert_eq(r.status, 200, "reference answer %d: %s", i, r.body);
        t->answers[i] = r.body;
    }
    for (int i = 0; i < N_GOOD_THREADS; i++)
        cr_assert_eq(pthread_create(&t->threads[i], NULL, good_client, t), 0);
}

/* Stops the good traffic and checks that it lost nothing. */
static void good_stop(good_traffic_t *t)
{
    atomic_store(&t->stop, true);
    for (int i = 0; i < N_GOOD_THREADS; i++)
        pthread_join(t->threads[i], NULL);
    cr_expect_eq(atomic_load(&t->n_bad), 0, "%d good requests failed beside the catalogue, "
                 "first: %s", atomic_load(&t->n_bad), t->first_bad);
    cr_expect_gt(atomic_load(&t->n_ok), 0, "no good request ran beside the catalogue");
    for (int i = 0; i < N_GOOD; i++) {
        free(t->bodies[i]);
        free(t->answers[i]);
    }
    pthread_mutex_destroy(&t->lock);
}

/* ---- the catalogue's entries ------------------------------------------------------------ */

typedef enum hostile_kind {
    H_REQUEST,          /* one HTTP request through libcurl */
    H_RAW,              /* bytes on a connection of its own; `raw` says what then */
    H_MODEL,            /* files written to REPO/<model>, then loaded through the API */
} hostile_kind_t;

typedef enum hostile_raw {
    RAW_ANSWER,         /* read the answer (the request says Connection: close) */
    RAW_HANG_UP,        /* close at once, answer unread */
    RAW_STALL,          /* send nothing more: the server must close it at its timeout */
} hostile_raw_t;

/* What a maker builds: the body (or the raw bytes) and an extra header. */
typedef struct hostile_msg {
    srv_buf_t body;
    char header[96];              /* "" when none */
} hostile_msg_t;

typedef struct hostile hostile_t;
struct hostile {
    const char *what;             /* names the entry in failures */
    hostile_kind_t kind;
    const char *method, *path;    /* H_REQUEST */
    const char *body;             /* H_REQUEST, H_RAW: literal bytes, unless `make` */
    size_t body_len;              /* 0: strlen(body) */
    const char *headers[3];       /* H_REQUEST: extra "Name: value" lines */
    hostile_raw_t raw;            /* H_RAW */
    int repeat;                   /* H_RAW: connections, 0 meaning 1 */
    const char *model;            /* H_MODEL: the name it is written and loaded under */
    /* Builds the body or raw bytes into msg (H_REQUEST, H_RAW), or the
     * model's files in f's repository (H_MODEL). */
    void (*make)(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *msg);
    long status;                  /* exact; 4 or 5: any of that class; 0: no answer */
    int max_ms;                   /* H_REQUEST: the answer within this; 0: no bound */
    const char *needle;           /* in the error; NULL: none to check */
};

/* ---- bodies ------------------------------------------------------------------------------- */

#define Z8 "0,0,0,0,0,0,0,0"
#define Z32 Z8 "," Z8 "," Z8 "," Z8
#define Z64 Z32 "," Z32
#define IN64 "\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[" Z64 "]"
#define GOOD "{\"inputs\":[{" IN64 "}]}"
/* A body whose one input is {IN}. */
#define WITH_INPUT(IN) "{\"inputs\":[{" IN "}]}"
/* A good input plus the request's other members. */
#define WITH_MEMBERS(M) "{" M ",\"inputs\":[{" IN64 "}]}"

/* "inputs" opening 5000 arrays and closing none. */
static void make_deep_nesting(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"inputs\":");
    for (int i = 0; i < 5000; i++)
        srv_buf_append(&m->body, "[", 1);
}

/* An ignored member nested one level past cJSON's limit. */
static void make_deep_ignored(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"x\":");
    for (int i = 0; i < CJSON_NESTING_LIMIT + 1; i++)
        srv_buf_append(&m->body, "[", 1);
    for (int i = 0; i < CJSON_NESTING_LIMIT + 1; i++)
        srv_buf_append(&m->body, "]", 1);
    srv_buf_puts(&m->body, ",\"inputs\":[{" IN64 "}]}");
}

/* 65 rows: one more than max_batch_size. */
static void make_too_many_rows(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"inputs\":[{\"name\":\"input\",\"shape\":[65,64],"
                           "\"datatype\":\"FP32\",\"data\":[0");
    for (int i = 1; i < 65 * 64; i++)
        srv_buf_append(&m->body, ",0", 2);
    srv_buf_puts(&m->body, "]}]}");
}

/* Triton's binary extension: a JSON header whose input of `shape` declares
 * `declared` bytes, then `sent` zero bytes; the header's true length in
 * msg->header. */
static void make_binary(hostile_msg_t *m, const char *declared, size_t sent, const char *shape)
{
    srv_buf_printf(&m->body, "{\"inputs\":[{\"name\":\"input\",\"shape\":%s,\"datatype\":\"FP32\","
                             "\"parameters\":{\"binary_data_size\":%s}}]}", shape, declared);
    snprintf(m->header, sizeof m->header, "Inference-Header-Content-Length: %zu", m->body.len);
    for (size_t i = 0; i < sent; i++)
        srv_buf_append(&m->body, "", 1);
}

static void make_bin_size_short(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "128", 128, "[1,64]");
}

static void make_bin_data_short(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "256", 100, "[1,64]");
}

static void make_bin_left_over(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "256", 300, "[1,64]");
}

static void make_bin_size_huge(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "1e400", 256, "[1,64]");
}

/* A shape of 2^46 floats, its 2^48 bytes declared, 256 sent. */
static void make_bin_size_2p48(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "281474976710656", 256, "[1099511627776,64]");
}

/* The binary section with no Inference-Header-Content-Length: the whole
 * body is read as JSON. */
static void make_bin_no_header(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "256", 0, "[1,64]");
    m->header[0] = '\0';
}

/* A good binary request, with the length given in msg->header. */
static void make_bin_good(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_binary(m, "256", 256, "[1,64]");
}

/* 10000 inputs of one value each, none of them the model's. */
static void make_many_inputs(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"inputs\":[");
    for (int i = 0; i < 10000; i++)
        srv_buf_printf(&m->body, "%s{\"name\":\"in%d\",\"shape\":[1],\"datatype\":\"FP32\","
                                 "\"data\":[0]}", i ? "," : "", i);
    srv_buf_puts(&m->body, "]}");
}

/* 60000 outputs of distinct names, then one asked again: 1 MiB of JSON. */
static void make_many_outputs(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"inputs\":[{" IN64 "}],\"outputs\":[");
    for (int i = 0; i < 60000; i++)
        srv_buf_printf(&m->body, "{\"name\":\"%x\"},", i);
    srv_buf_puts(&m->body, "{\"name\":\"ea5f\"}]}");
}

/* Raw bytes (NUL-terminated): a request with a header of 100 KB. */
static void make_huge_header(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           "X-Big: ");
    for (int i = 0; i < 100000; i++)
        srv_buf_append(&m->body, "a", 1);
    srv_buf_append(&m->body, "\r\n\r\n", 5);
}

/* Raw bytes (NUL-terminated): a good inference request. */
static void make_good_raw(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_printf(&m->body, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: %zu\r\n\r\n%s", strlen(GOOD), GOOD);
    srv_buf_append(&m->body, "", 1);
}

/* shaped's "fill" as binary INT64 [2^62, 4], past what JSON holds. */
static void make_fill_2p62(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "{\"inputs\":[{\"name\":\"fill\",\"shape\":[2],"
                           "\"datatype\":\"INT64\",\"parameters\":{\"binary_data_size\":16}},"
                           "{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\","
                           "\"data\":[1,2,3,4]},{\"name\":\"to\",\"shape\":[2],"
                           "\"datatype\":\"INT64\",\"data\":[2,2]}]}");
    snprintf(m->header, sizeof m->header, "Inference-Header-Content-Length: %zu", m->body.len);
    const int64_t fill[2] = {INT64_C(1) << 62, 4};
    srv_buf_append(&m->body, fill, sizeof fill);
}

/* One byte over server.max_body. */
static void make_over_max_body(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, GOOD);
    while (m->body.len <= MAX_BODY)
        srv_buf_append(&m->body, "        ", 8);
}

/* One sequence the encoder's attention cannot fit in memory.limit_bytes:
 * its scores alone are 4 heads x seq^2 floats (64 MiB at seq 2048). */
static void make_encoder_seq(hostile_msg_t *m, int seq)
{
    srv_buf_printf(&m->body, "{\"inputs\":[{\"name\":\"embeddings\",\"shape\":[1,%d,64],"
                             "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":%d}}]}",
                   seq, seq * 64 * 4);
    snprintf(m->header, sizeof m->header, "Inference-Header-Content-Length: %zu", m->body.len);
    float v = 0.25f;
    for (int i = 0; i < seq * 64; i++)
        srv_buf_append(&m->body, &v, sizeof v);
}

static void make_encoder_huge(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_encoder_seq(m, 2048);
}

static void make_encoder_small(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_encoder_seq(m, 8);
}

/* `prefix`, `n` copies of `c`, `suffix`: a path (NUL-terminated). */
static void make_path(hostile_msg_t *m, const char *prefix, char c, int n, const char *suffix)
{
    srv_buf_puts(&m->body, prefix);
    for (int i = 0; i < n; i++)
        srv_buf_append(&m->body, &c, 1);
    srv_buf_append(&m->body, suffix, strlen(suffix) + 1);
}

static void make_long_name(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_path(m, "/v2/models/", 'x', 200, "/ready");
}

static void make_long_name_to_load(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_path(m, "/v2/repository/models/", 'x', 3000, "/load");
}

static void make_long_version(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    make_path(m, "/v2/models/mlp/versions/", '9', 2000, "/ready");
}

/* A path of 4000 bytes (NUL-terminated: the maker of a path). */
static void make_long_path(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    srv_buf_puts(&m->body, "/v2/models/mlp/");
    while (m->body.len < 4000)
        srv_buf_puts(&m->body, "a/");
    srv_buf_append(&m->body, "ready", 6);
}

/* ---- model files ---------------------------------------------------------------------- */

/* REPO/<model>/1/model.onnx with the packed bytes of b (cut to `keep`
 * bytes when keep > 0, with `extra` bytes appended); frees b. */
static void write_model(srv_fixture_t *f, const char *model, mb_t *b, size_t keep,
                        const void *extra, size_t n_extra)
{
    size_t len;
    uint8_t *bytes = mb_pack(b, &len);
    if (keep > 0 && keep < len)
        len = keep;
    srv_buf_t out = {0};
    srv_buf_append(&out, bytes, len);
    if (n_extra)
        srv_buf_append(&out, extra, n_extra);
    fixture_mkdir(f, model);
    char rel[64];
    snprintf(rel, sizeof rel, "%s/1", model);
    fixture_mkdir(f, rel);
    fixture_write(f, model, "1/model.onnx", out.data, out.len);
    srv_buf_free(&out);
    mb_free(b);
}

/* X [n, 4] -> Relu -> Y: a valid model, the base of the bad ones. */
static void relu_model(mb_t *b)
{
    mb_init(b, 8, 13);
    const char *sym[] = {"n", NULL};
    mb_input(b, "X", F, 2, (int64_t[]){-1, 4}, sym);
    mb_node(b, "Relu", "relu", "X", "Y");
    mb_output(b, "Y", F, 2, (int64_t[]){-1, 4});
}

/* A directory outside the repository holding a valid version 1: beside
 * the repository, removed with it by hostile_outside_remove. */
static void outside_dir(srv_fixture_t *f, char *out, size_t len)
{
    snprintf(out, len, "%s-outside", f->repo);
    char v1[PATH_MAX + 32];
    snprintf(v1, sizeof v1, "%s/1", out);
    if (mkdir(out, 0755) != 0)
        cr_assert_eq(errno, EEXIST, "mkdir %s", out);
    if (mkdir(v1, 0755) != 0)
        cr_assert_eq(errno, EEXIST, "mkdir %s", v1);
    mb_t b;
    relu_model(&b);
    size_t n;
    uint8_t *bytes = mb_pack(&b, &n);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.onnx", v1);
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot write %s", path);
    cr_assert_eq(fwrite(bytes, 1, n, fp), n);
    fclose(fp);
    mb_free(&b);
}

static void make_random_bytes(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char bytes[4096];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bytes[i] = (char)(x >> 24);
    }
    fixture_mkdir(f, h->model);
    char rel[64];
    snprintf(rel, sizeof rel, "%s/1", h->model);
    fixture_mkdir(f, rel);
    fixture_write(f, h->model, "1/model.onnx", bytes, sizeof bytes);
}

static void make_truncated(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    size_t len;
    mb_pack(&b, &len);
    write_model(f, h->model, &b, len / 2, NULL, 0);
}

/* ModelProto's field 7 (graph, a message) sent again as a varint. */
static void make_wrong_wire_type(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    static const uint8_t varint_graph[] = {(7 << 3) | 0, 0x05};
    write_model(f, h->model, &b, 0, varint_graph, sizeof varint_graph);
}

static void make_unknown_input(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    mb_node(&b, "Add", "add", "X,ghost", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_cycle(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    mb_node(&b, "Add", "loop_a", "X,B", "A");
    mb_node(&b, "Relu", "loop_b", "A", "B");
    mb_output(&b, "B", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_unsupported_op(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    mb_node(&b, "FooBarOp", "foo", "X", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

/* An initializer whose external data starts past the end of its 16-byte
 * file. */
static void make_external_past_end(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    Onnx__TensorProto *w = mb_tensor(&b, "W", F, 2, (int64_t[]){1, 4});
    mb_external(&b, w, "weights.bin", "64", "16");
    mb_initializer(&b, w);
    mb_node(&b, "Add", "add", "X,W", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
    static const float data[4] = {1, 2, 3, 4};
    fixture_write(f, h->model, "1/weights.bin", (const char *)data, sizeof data);
}

static void make_node_without_output(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    mb_node(&b, "Relu", "mute", "X", "");
    mb_node(&b, "Relu", "relu", "X", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_empty_output_name(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 4, (int64_t[]){1, 1, 4, 4}, NULL);
    Onnx__NodeProto *pool = mb_node(&b, "MaxPool", "pool", "X", ",I");
    mb_attr_ints(&b, pool, "kernel_shape", (int64_t[]){2, 2}, 2);
    mb_output(&b, "I", 0, -1, NULL);
    write_model(f, h->model, &b, 0, NULL, 0);
}

/* Gemm whose required B is named "". */
static void make_empty_required_input(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "A", F, 2, (int64_t[]){2, 2}, NULL);
    mb_node(&b, "Gemm", "gemm", "A,", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){2, 2});
    write_model(f, h->model, &b, 0, NULL, 0);
}

/* Softmax with `axis` as a string, then with an attribute ONNX does not define. */
static void make_attribute_wrong_type(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){2, 2}, NULL);
    mb_attr_s(&b, mb_node(&b, "Softmax", "soft", "X", "Y"), "axis", "-1");
    mb_output(&b, "Y", F, 2, (int64_t[]){2, 2});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_attribute_unknown(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){2, 2}, NULL);
    mb_attr_i(&b, mb_node(&b, "Relu", "relu", "X", "Y"), "alpha", 3);
    mb_output(&b, "Y", F, 2, (int64_t[]){2, 2});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_undefined_output(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    mb_output(&b, "nowhere", F, 2, (int64_t[]){-1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_unknown_config_key(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    write_model(f, h->model, &b, 0, NULL, 0);
    const char *mc = "{\"max_batch_sise\": 8}";
    fixture_write(f, h->model, "config.json", mc, strlen(mc));
}

/* An initializer of `dims` whose raw data holds `bytes` bytes. */
static void initializer_model(srv_fixture_t *f, const hostile_t *h, int rank, const int64_t *dims,
                              size_t bytes)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    Onnx__TensorProto *w = mb_tensor(&b, "W", F, rank, dims);
    void *zero = calloc(1, bytes ? bytes : 1);
    mb_raw(&b, w, zero, bytes);
    free(zero);
    mb_initializer(&b, w);
    mb_node(&b, "Add", "add", "X,W", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_raw_data_short(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    initializer_model(f, h, 2, (int64_t[]){1, 4}, 8);
}

static void make_initializer_huge(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    initializer_model(f, h, 2, (int64_t[]){1ll << 40, 4}, 16);
}

/* ConstantOfShape of a constant shape [2^20, 2^20]: folded at load, 4 TiB. */
static void make_fold_huge(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    Onnx__TensorProto *shape = mb_tensor(&b, "S", I64, 1, (int64_t[]){2});
    mb_int64s(&b, shape, (int64_t[]){1ll << 20, 1ll << 20}, 2);
    mb_initializer(&b, shape);
    mb_node(&b, "ConstantOfShape", "big", "S", "B");
    mb_node(&b, "Add", "add", "X,B", "Y");
    mb_output(&b, "Y", F, -1, NULL);
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void external_model(srv_fixture_t *f, const hostile_t *h, const char *location)
{
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "X", F, 2, (int64_t[]){1, 4}, NULL);
    Onnx__TensorProto *w = mb_tensor(&b, "W", F, 2, (int64_t[]){1, 4});
    mb_external(&b, w, location, NULL, NULL);
    mb_initializer(&b, w);
    mb_node(&b, "Add", "add", "X,W", "Y");
    mb_output(&b, "Y", F, 2, (int64_t[]){1, 4});
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_external_dotdot(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    external_model(f, h, "../../../../../../etc/hostname");
}

static void make_external_absolute(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    external_model(f, h, "/etc/hostname");
}

/* weights.bin, a link to a file outside the repository. */
static void make_external_link_out(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    external_model(f, h, "weights.bin");
    char out[PATH_MAX], target[PATH_MAX + 32], link[PATH_MAX + 64];
    outside_dir(f, out, sizeof out);
    snprintf(target, sizeof target, "%s/1/model.onnx", out);
    snprintf(link, sizeof link, "%s/%s/1/weights.bin", f->repo, h->model);
    cr_assert_eq(symlink(target, link), 0, "symlink %s", link);
}

static void make_ir_version_999(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    b.model.ir_version = 999;
    write_model(f, h->model, &b, 0, NULL, 0);
}

static void make_bad_config_json(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    mb_t b;
    relu_model(&b);
    write_model(f, h->model, &b, 0, NULL, 0);
    fixture_write(f, h->model, "config.json", "{\"max_batch_size\": ", 19);
}

static void make_model_a_file(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", f->repo, h->model);
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    fclose(fp);
}

static void make_model_onnx_a_dir(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char rel[96];
    fixture_mkdir(f, h->model);
    snprintf(rel, sizeof rel, "%s/1", h->model);
    fixture_mkdir(f, rel);
    snprintf(rel, sizeof rel, "%s/1/model.onnx", h->model);
    fixture_mkdir(f, rel);
}

static void make_model_onnx_dev_zero(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char rel[96], link[PATH_MAX + 96];
    fixture_mkdir(f, h->model);
    snprintf(rel, sizeof rel, "%s/1", h->model);
    fixture_mkdir(f, rel);
    snprintf(link, sizeof link, "%s/%s/1/model.onnx", f->repo, h->model);
    cr_assert_eq(symlink("/dev/zero", link), 0, "symlink %s", link);
}

static void make_model_dir_link(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char out[PATH_MAX], link[PATH_MAX + 64];
    outside_dir(f, out, sizeof out);
    snprintf(link, sizeof link, "%s/%s", f->repo, h->model);
    cr_assert_eq(symlink(out, link), 0, "symlink %s", link);
}

static void make_version_dir_link(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char out[PATH_MAX], target[PATH_MAX + 32], link[PATH_MAX + 64];
    outside_dir(f, out, sizeof out);
    fixture_mkdir(f, h->model);
    snprintf(target, sizeof target, "%s/1", out);
    snprintf(link, sizeof link, "%s/%s/1", f->repo, h->model);
    cr_assert_eq(symlink(target, link), 0, "symlink %s", link);
}

static void hostile_outside_remove(srv_fixture_t *f)
{
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s-outside", f->repo);
    rm_tree(out);
}

/* ---- the catalogue -------------------------------------------------------------------------- */

#define INFER "POST", "/v2/models/mlp/infer"
#define IHCL "Inference-Header-Content-Length: "
#define E8 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9" /* 8 x U+00E9 */
#define NUL_BODY "{\"id\":\"a\0b\",\"inputs\":[]}"

static const hostile_t catalogue[] = {
    /* Malformed JSON. */
    {"truncated JSON", H_REQUEST, INFER, "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,",
     .status = 400, .needle = "not valid JSON"},
    {"trailing garbage", H_REQUEST, INFER, GOOD "}}garbage", .status = 400,
     .needle = "unexpected text after the object"},
    {"an empty body", H_REQUEST, INFER, "", .status = 400, .needle = "empty"},
    {"an array, not an object", H_REQUEST, INFER, "[" GOOD "]", .status = 400,
     .needle = "must be a JSON object"},
    {"5000 levels of nesting", H_REQUEST, INFER, .make = make_deep_nesting, .status = 400,
     .needle = "not valid JSON"},
    {"an ignored member nested past cJSON's limit", H_REQUEST, INFER,
     .make = make_deep_ignored, .status = 400, .needle = "not valid JSON"},
    {"a raw NaN token", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],"
     "\"datatype\":\"FP32\",\"data\":[NaN]"), .status = 400, .needle = "not valid JSON"},
    {"a raw Infinity token", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],"
     "\"datatype\":\"FP32\",\"data\":[-Infinity]"), .status = 400, .needle = "not valid JSON"},
    {"a raw NUL byte", H_REQUEST, INFER, NUL_BODY, .body_len = sizeof NUL_BODY - 1,
     .status = 400, .needle = "NUL byte at byte 8"},
    {"an escaped NUL in the id", H_REQUEST, INFER, WITH_MEMBERS("\"id\":\"a\\u0000b\""),
     .status = 400, .needle = "\\u0000 in \"id\""},
    {"a lone surrogate in the id", H_REQUEST, INFER, WITH_MEMBERS("\"id\":\"\\ud800\""),
     .status = 400, .needle = "not valid JSON"},
    {"\\u and no hex digits in the id", H_REQUEST, INFER, WITH_MEMBERS("\"id\":\"a\\uZZZZb\""),
     .status = 400, .needle = "the escape at byte 8 is \\u without four hex digits"},
    {"\\u and two hex digits in a model name", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":\"mlp\\u00x1\""), .status = 400,
     .needle = "the escape at byte 13 is \\u without four hex digits"},

    /* Every member of the wrong type. */
    {"id a number", H_REQUEST, INFER, WITH_MEMBERS("\"id\":5"), .status = 400,
     .needle = "\"id\" must be a string"},
    {"version a word", H_REQUEST, INFER, WITH_MEMBERS("\"version\":\"one\""), .status = 400,
     .needle = "\"version\" must be"},
    {"version negative", H_REQUEST, INFER, WITH_MEMBERS("\"version\":-1"), .status = 400,
     .needle = "\"version\" must be"},
    {"version a fraction", H_REQUEST, INFER, WITH_MEMBERS("\"version\":1.5"), .status = 400,
     .needle = "\"version\" must be"},
    {"version true", H_REQUEST, INFER, WITH_MEMBERS("\"version\":true"), .status = 400,
     .needle = "\"version\" must be"},
    {"version 1e400", H_REQUEST, INFER, WITH_MEMBERS("\"version\":1e400"), .status = 400,
     .needle = "\"version\" must be"},
    {"parameters a number", H_REQUEST, INFER, WITH_MEMBERS("\"parameters\":5"), .status = 400,
     .needle = "\"parameters\" must be an object"},
    {"binary_data_output a string", H_REQUEST, INFER,
     WITH_MEMBERS("\"parameters\":{\"binary_data_output\":\"yes\"}"), .status = 400,
     .needle = "binary_data_output"},
    {"inputs an object", H_REQUEST, INFER, "{\"inputs\":{}}", .status = 400,
     .needle = "\"inputs\" must be a non-empty array"},
    {"inputs empty", H_REQUEST, INFER, "{\"inputs\":[]}", .status = 400,
     .needle = "\"inputs\" must be a non-empty array"},
    {"no inputs", H_REQUEST, INFER, "{\"id\":\"x\"}", .status = 400, .needle = "no \"inputs\""},
    {"an input a number", H_REQUEST, INFER, "{\"inputs\":[5]}", .status = 400,
     .needle = "input 0 must be an object"},
    {"name a number", H_REQUEST, INFER, WITH_INPUT("\"name\":5"), .status = 400,
     .needle = "\"name\" must be a non-empty string"},
    {"name empty", H_REQUEST, INFER, WITH_INPUT("\"name\":\"\""), .status = 400,
     .needle = "\"name\" must be a non-empty string"},
    {"shape a string", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":\"1,64\""),
     .status = 400, .needle = "\"shape\" must be an array"},
    {"no shape", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"datatype\":\"FP32\""),
     .status = 400, .needle = "\"shape\" must be an array"},
    {"a dim a string", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[\"1\",64]"),
     .status = 400, .needle = "shape dim 0 is \"1\""},
    {"a dim negative", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[1,-64]"),
     .status = 400, .needle = "shape dim 1 is -64"},
    {"a dim a fraction", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[1.5,64]"),
     .status = 400, .needle = "shape dim 0 is 1.5"},
    {"a dim 1e400", H_REQUEST, INFER, WITH_INPUT("\"name\":\"input\",\"shape\":[1e400,64]"),
     .status = 400, .needle = "shape dim 0 is"},
    {"nine dims", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1,1,1,1,1,1,1,1]"), .status = 400,
     .needle = "at most"},
    {"datatype a number", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":32"), .status = 400,
     .needle = "\"datatype\" must be a string"},
    {"datatype unknown", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FLOAT\""), .status = 400,
     .needle = "unknown datatype \"FLOAT\""},
    {"datatype BYTES", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],\"datatype\":\"BYTES\",\"data\":[\"a\"]"),
     .status = 400, .needle = "got BYTES [1,1]"},
    {"BYTES data a number", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"BYTES\",\"data\":[\"a\",7]"),
     .status = 400, .needle = "BYTES element 1 is a number, not a string"},
    {"data a string", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":\"abc\""),
     .status = 400, .needle = "\"data\" must be an array"},
    {"no data", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\""), .status = 400,
     .needle = "needs \"data\""},
    {"a value true", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[0,true]"),
     .status = 400, .needle = "value true at index 1"},
    {"a value a numeric string", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[\"1\",0]"),
     .status = 400, .needle = "value \"1\" at index 0"},
    {"a value null", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[0,null]"),
     .status = 400, .needle = "value null at index 1"},
    {"a value \"nan\"", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[\"nan\"]"),
     .status = 400, .needle = "value \"nan\" at index 0"},
    {"a value 1e400", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1e400]"),
     .status = 400, .needle = "out of range for FP32"},
    {"a value past FP32", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1e39]"),
     .status = 400, .needle = "value 1e+39 at index 0 is out of range for FP32"},
    {"input parameters a number", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\",\"parameters\":5"),
     .status = 400, .needle = "\"parameters\" must be an object"},
    {"binary_data_size a string", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                "\"parameters\":{\"binary_data_size\":\"256\"}"),
     .status = 400, .needle = "\"binary_data_size\" is \"256\""},
    {"both data and binary_data_size", H_REQUEST, INFER,
     WITH_INPUT(IN64 ",\"parameters\":{\"binary_data_size\":256}"), .status = 400,
     .needle = "give one"},
    {"outputs an object", H_REQUEST, INFER, "{\"inputs\":[{" IN64 "}],\"outputs\":{}}",
     .status = 400, .needle = "\"outputs\" must be an array"},
    {"an output a number", H_REQUEST, INFER, "{\"inputs\":[{" IN64 "}],\"outputs\":[5]}",
     .status = 400, .needle = "output 0: \"name\" must be a non-empty string"},
    {"an output's binary_data a string", H_REQUEST, INFER,
     "{\"inputs\":[{" IN64 "}],\"outputs\":[{\"name\":\"probabilities\","
     "\"parameters\":{\"binary_data\":\"yes\"}}]}",
     .status = 400, .needle = "\"binary_data\" is true or false"},

    /* Wrong shape, dtype, element count; ragged data. */
    {"a wrong fixed dim", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,63],\"datatype\":\"FP32\",\"data\":[" Z32 ","
                Z8 "," Z8 "," Z8 ",0,0,0,0,0,0,0]"),
     .status = 400, .needle = "input 'input'"},
    {"a wrong rank", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,1,64],\"datatype\":\"FP32\",\"data\":[" Z64 "]"),
     .status = 400, .needle = "input 'input'"},
    {"a wrong dtype", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP64\",\"data\":[" Z64 "]"),
     .status = 400, .needle = "FP32"},
    {"one value short", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[" Z32 ","
                Z8 "," Z8 "," Z8 ",0,0,0,0,0,0,0]"),
     .status = 400, .needle = "has 64 elements but \"data\" has 63"},
    {"ragged rows", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[2,64],\"datatype\":\"FP32\","
                "\"data\":[[" Z32 "],[" Z32 "],[" Z64 "]]"),
     .status = 400, .needle = "nested unevenly"},
    {"values at two depths", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                "\"data\":[[" Z32 "," Z8 "," Z8 "," Z8 ",0,0,0,0,0,0,0],0]"),
     .status = 400, .needle = "nested unevenly"},
    {"a shape of 2^106 elements", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[9007199254740991,9007199254740991],"
                "\"datatype\":\"FP32\",\"data\":[0]"),
     .status = 400, .needle = "is too large"},
    {"a huge shape with little data", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[100000000,64],\"datatype\":\"FP32\","
                "\"data\":[" Z64 "]"),
     .status = 400, .needle = "has 6400000000 elements but \"data\" has 64"},
    {"more rows than max_batch_size", H_REQUEST, INFER, .make = make_too_many_rows,
     .status = 400, .needle = "max_batch_size"},
    {"no rows", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"input\",\"shape\":[0,64],\"datatype\":\"FP32\",\"data\":[]"),
     .status = 400, .needle = "input 'input' of model 'mlp' has no rows (shape [0,64])"},

    /* Unknown and duplicate names. */
    {"an unknown input", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"nope\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[" Z64 "]"),
     .status = 400, .needle = "input 'nope' is not an input of the model"},
    {"10000 unknown inputs", H_REQUEST, INFER, .make = make_many_inputs, .status = 400,
     .needle = "input 'in0' is not an input of the model"},
    {"an input name not UTF-8", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"\xff\xfe\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[" Z64 "]"),
     .status = 400, .needle = "input '\xef\xbf\xbd\xef\xbf\xbd' is not an input of the model"},
    {"an input name cut inside a UTF-8 character", H_REQUEST, INFER,
     WITH_INPUT("\"name\":\"x" E8 E8 E8 E8 E8 "\",\"shape\":[1,64],\"datatype\":\"FP32\","
                "\"data\":\"x\""),
     .status = 400, .needle = E8 E8 E8 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                                  "\xef\xbf\xbd': \"data\" must be an array"},
    {"an input given twice", H_REQUEST, INFER, "{\"inputs\":[{" IN64 "},{" IN64 "}]}",
     .status = 400, .needle = "input 'input' is given twice"},
    {"an unknown output", H_REQUEST, INFER,
     "{\"inputs\":[{" IN64 "}],\"outputs\":[{\"name\":\"nope\"}]}", .status = 400,
     .needle = "requested output 'nope' is not an output"},
    {"60000 outputs, one asked twice", H_REQUEST, INFER, .make = make_many_outputs,
     .status = 400, .needle = "output 'ea5f' is requested twice", .max_ms = 5000},
    {"an output asked twice", H_REQUEST, INFER,
     "{\"inputs\":[{" IN64 "}],\"outputs\":[{\"name\":\"probabilities\"},"
     "{\"name\":\"probabilities\"}]}",
     .status = 400, .needle = "'probabilities' is requested twice"},
    {"POST /infer without a model", H_REQUEST, "POST", "/infer", GOOD, .status = 400,
     .needle = "needs \"model\""},
    {"POST /infer with a model a number", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":5"), .status = 400, .needle = "\"model\" must be a string"},
    {"POST /infer with a model out of the repository", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":\"../mlp\""), .status = 400, .needle = "'../mlp'"},
    {"POST /infer with an unknown model", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":\"nosuch\""), .status = 404, .needle = "nosuch"},
    {"POST /infer with an unknown version", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":\"mlp\",\"version\":\"7\""), .status = 404, .needle = "version"},
    {"POST /infer with a version of 18 digits", H_REQUEST, "POST", "/infer",
     WITH_MEMBERS("\"model\":\"mlp\",\"version\":\"999999999999999999\""), .status = 404,
     .needle = "no version 999999999999999999"},

    /* Triton's binary extension, lied about. */
    {"header length past the body", H_REQUEST, INFER, GOOD, .headers = {IHCL "999999"},
     .status = 400, .needle = "Inference-Header-Content-Length '999999' must be a number"},
    {"header length negative", H_REQUEST, INFER, GOOD, .headers = {IHCL "-5"}, .status = 400,
     .needle = "Inference-Header-Content-Length '-5' must be a number"},
    {"header length zero: a raw binary request of the JSON's bytes", H_REQUEST, INFER, GOOD,
     .headers = {IHCL "0"}, .status = 400, .needle = "the raw binary request has"},
    {"header length given twice", H_REQUEST, INFER, GOOD, .headers = {IHCL "10", IHCL "20"},
     .status = 400, .needle = "given twice"},
    {"header length cutting the JSON", H_REQUEST, INFER, GOOD, .headers = {IHCL "10"},
     .status = 400, .needle = "not valid JSON"},
    {"binary_data_size short of the shape", H_REQUEST, INFER, .make = make_bin_size_short,
     .status = 400, .needle = "binary_data_size is 128 but shape [1,64] of FP32 takes 256 bytes"},
    {"binary data short of binary_data_size", H_REQUEST, INFER, .make = make_bin_data_short,
     .status = 400, .needle = "only 100 bytes of binary data are left"},
    {"binary data left over", H_REQUEST, INFER, .make = make_bin_left_over, .status = 400,
     .needle = "44 bytes left over"},
    {"binary_data_size 1e400", H_REQUEST, INFER, .make = make_bin_size_huge, .status = 400,
     .needle = "\"binary_data_size\" is"},
    {"binary_data_size of 2^48 bytes, 256 sent", H_REQUEST, INFER,
     .make = make_bin_size_2p48, .status = 400,
     .needle = "only 256 bytes of binary data are left"},
    {"binary_data_size without a header length", H_REQUEST, INFER, .make = make_bin_no_header,
     .status = 400, .needle = "no Inference-Header-Content-Length"},
    {"a good binary request", H_REQUEST, INFER, .make = make_bin_good, .status = 200},

    /* URL tricks. */
    {"%00 in the model name", H_REQUEST, "GET", "/v2/models/mlp%00x/ready", .status = 400,
     .needle = "mlp%00x"},
    {"%00 in a model to load", H_REQUEST, "POST", "/v2/repository/models/mlp%00/load",
     .status = 400, .needle = "mlp%00"},
    {"%00 in the version", H_REQUEST, "GET", "/v2/models/mlp/versions/1%00/ready",
     .status = 400, .needle = "1%00"},
    {"'..' as the model", H_REQUEST, "GET", "/v2/models/../ready", .status = 400,
     .needle = "'..' starts with '.'"},
    {"'..' as a model to load", H_REQUEST, "POST", "/v2/repository/models/../load",
     .status = 400, .needle = "'..' starts with '.'"},
    {"'../..' escaped as a model to load", H_REQUEST, "POST",
     "/v2/repository/models/..%2F..%2Ftmp/load", .status = 404,
     .needle = "no route POST /v2/repository/models/../../tmp/load"},
    {"a space in the model", H_REQUEST, "GET", "/v2/models/ml%20p/ready", .status = 400,
     .needle = "'ml p'"},
    {"a 200-byte model name", H_REQUEST, "GET", .make = make_long_name, .status = 400,
     .needle = "is 200 bytes; at most 127"},
    {"a 3000-byte model name to load", H_REQUEST, "POST", .make = make_long_name_to_load,
     .status = 400, .needle = "is 3000 bytes; at most 127"},
    {"a version of 2000 digits", H_REQUEST, "GET", .make = make_long_version, .status = 400,
     .needle = "is not a non-negative number"},
    {"a path of 2000 segments", H_REQUEST, "GET", .make = make_long_path, .status = 404,
     .needle = "no route GET /v2/models/mlp/a/a/"},
    {"version +1", H_REQUEST, "GET", "/v2/models/mlp/versions/+1", .status = 400,
     .needle = "'+1'"},
    {"version of 20 digits", H_REQUEST, "GET", "/v2/models/mlp/versions/99999999999999999999",
     .status = 400, .needle = "'99999999999999999999'"},
    {"an unknown version", H_REQUEST, "POST", "/v2/models/mlp/versions/2/infer", GOOD,
     .status = 404, .needle = "version"},
    {"an unknown model", H_REQUEST, "POST", "/v2/models/mlpx/infer", GOOD, .status = 404,
     .needle = "'mlpx'"},
    {"an unknown route", H_REQUEST, "GET", "/v2/nothing/here", .status = 404,
     .needle = "no route GET /v2/nothing/here"},
    {"an empty segment", H_REQUEST, "GET", "/v2//health/ready", .status = 404,
     .needle = "no route"},
    {"GET on infer", H_REQUEST, "GET", "/v2/models/mlp/infer", .status = 405,
     .needle = "use POST"},
    {"DELETE on a model", H_REQUEST, "DELETE", "/v2/models/mlp", .status = 405,
     .needle = "DELETE is not allowed here; use GET"},
    {"PUT on the index", H_REQUEST, "PUT", "/v2/repository/index", "{}", .status = 405,
     .needle = "use POST"},
    {"an invented method", H_REQUEST, "BREW", "/v2/health/live", .status = 405,
     .needle = "BREW is not allowed"},
    {"an index body not an object", H_REQUEST, "POST", "/v2/repository/index", "[1]",
     .status = 400, .needle = "must be a JSON object"},
    {"an index body with ready a string", H_REQUEST, "POST", "/v2/repository/index",
     "{\"ready\":\"yes\"}", .status = 400, .needle = "\"ready\" must be true or false"},
    {"unloading an unknown model", H_REQUEST, "POST", "/v2/repository/models/ghost/unload",
     .status = 404, .needle = "ghost"},

    /* Shapes from a request's data. */
#define SHAPED_INFER "POST", "/v2/models/shaped/infer"
#define SHAPED(FILL, X, TO)                                                                    \
    "{\"inputs\":[{\"name\":\"fill\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":" FILL "},"    \
    "{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\",\"data\":" X "},"                       \
    "{\"name\":\"to\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":" TO "}]}"
    {"shapes from data, one of them empty", H_REQUEST, SHAPED_INFER,
     SHAPED("[0,3]", "[1,2,3,4]", "[0,-1]"), .status = 200},
    {"a shape from data of 10^10 floats", H_REQUEST, SHAPED_INFER,
     SHAPED("[100000,100000]", "[1,2,3,4]", "[2,2]"), .status = 507,
     .needle = "out of memory on '"},
    {"a shape from data of 2^106 floats", H_REQUEST, SHAPED_INFER,
     SHAPED("[9007199254740991,9007199254740991]", "[1,2,3,4]", "[2,2]"), .status = 507,
     .needle = "more than the 281474976710656 elements a tensor may hold"},
    {"a shape from binary data of 2^64 floats", H_REQUEST, SHAPED_INFER,
     .make = make_fill_2p62, .status = 507,
     .needle = "more than the 281474976710656 elements a tensor may hold"},
    {"a negative dim from data", H_REQUEST, SHAPED_INFER,
     SHAPED("[-1,3]", "[1,2,3,4]", "[2,2]"), .status = 400,
     .needle = "node 'fill' (ConstantOfShape): output dim 0 is -1"},
    {"a reshape to another count", H_REQUEST, SHAPED_INFER,
     SHAPED("[2,3]", "[1,2,3,4]", "[3,2]"), .status = 400,
     .needle = "cannot reshape [4] (4 elements) to [3,2] (6 elements)"},
    {"a reshape with two -1", H_REQUEST, SHAPED_INFER, SHAPED("[2,3]", "[1,2,3,4]", "[-1,-1]"),
     .status = 400, .needle = "shape [-1,-1] has more than one -1"},
    {"a reshape with -2", H_REQUEST, SHAPED_INFER, SHAPED("[2,3]", "[1,2,3,4]", "[-2,-2]"),
     .status = 400, .needle = "dims must be >= -1"},
    {"a reshape copying a dim the input lacks", H_REQUEST, SHAPED_INFER,
     SHAPED("[2,3]", "[1,2,3,4]", "[-1,0]"), .status = 400, .needle = "copies dim 1"},

    /* Bodies over server.max_body. */
    {"a chunked body", H_REQUEST, INFER, GOOD, .headers = {"Transfer-Encoding: chunked"},
     .status = 200},
    {"a declared body over max_body", H_REQUEST, INFER, .make = make_over_max_body,
     .status = 413, .needle = "the request body (Content-Length 1048583) is larger than "
                              "server.max_body (1048576 bytes)"},
    {"a declared body over max_body, waiting for 100 Continue", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Expect: 100-continue\r\nContent-Length: 1048577\r\n\r\n",
     .raw = RAW_ANSWER, .status = 413,
     .needle = "the request body (Content-Length 1048577) is larger than server.max_body"},
    {"a chunked body over max_body", H_REQUEST, INFER, .make = make_over_max_body,
     .headers = {"Transfer-Encoding: chunked"}, .status = 413,
     .needle = "the request body is larger than server.max_body (1048576 bytes)"},

    /* A request too large for memory.limit_bytes, and one after it. */
    {"an encoder sequence past the memory limit", H_REQUEST, "POST",
     "/v2/models/encoder/infer", .make = make_encoder_huge, .status = 507,
     .needle = "out of memory"},
    {"a small encoder sequence after it", H_REQUEST, "POST", "/v2/models/encoder/infer",
     .make = make_encoder_small, .status = 200},

    /* Connections. */
    {"half a body, then gone", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
             "{\"inputs\": [", .raw = RAW_HANG_UP},
    {"headers, then a stall", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
     .raw = RAW_STALL},
    {"half a body, then a stall", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
             "{\"inputs\": [", .raw = RAW_STALL},
    {"half the headers, then a stall", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Le", .raw = RAW_STALL},
    {"200 connections dropped mid-header", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Le", .raw = RAW_HANG_UP,
     .repeat = 200},
    {"Content-Length given twice, differing", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Length: 4\r\nContent-Length: 5\r\n\r\n{\"in}",
     .raw = RAW_ANSWER, .status = 400, .needle = "Content-Length is given twice, as '4' and '5'"},
    {"a malformed chunk size", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Transfer-Encoding: chunked\r\n\r\nzz\r\n{\"in}\r\n0\r\n\r\n",
     .raw = RAW_ANSWER, .status = 400, .needle = "chunked encoding was syntactically incorrect"},
    {"HTTP/2's preface", H_RAW, .body = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", .raw = RAW_ANSWER,
     .status = 505, .needle = "HTTP version is not supported"},
    {"a 100 KB header", H_RAW, .make = make_huge_header, .raw = RAW_ANSWER, .status = 431,
     .needle = "header was too big"},
    {"a control character in the path", H_RAW,
     .body = "GET /v2/models/ml\x01p/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
     .raw = RAW_ANSWER, .status = 400,
     .needle = "model name 'ml\x01p' has a character other than"},
    {"a whole request, gone before its answer", H_RAW, .make = make_good_raw,
     .raw = RAW_HANG_UP, .repeat = 20},
    {"200 connections dropped before a byte", H_RAW, .body = "", .raw = RAW_HANG_UP,
     .repeat = 200},
    {"a request line of garbage", H_RAW, .body = "GARBAGE\r\n\r\n", .raw = RAW_ANSWER,
     .status = 0},
    {"Content-Length not a number", H_RAW,
     .body = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Length: abc\r\n\r\n" GOOD, .raw = RAW_ANSWER, .status = 400,
     .needle = "Content-Length"},

    /* Model files. */
    {"random bytes as the model", H_MODEL, .model = "bad_random", .make = make_random_bytes,
     .status = 400, .needle = "not a valid ONNX"},
    {"a truncated model", H_MODEL, .model = "bad_truncated", .make = make_truncated,
     .status = 400, .needle = "not a valid ONNX"},
    {"a field of the wrong wire type", H_MODEL, .model = "bad_wire_type",
     .make = make_wrong_wire_type, .status = 400, .needle = "not a valid ONNX"},
    {"a node reading an unknown name", H_MODEL, .model = "bad_unknown_input",
     .make = make_unknown_input, .status = 400, .needle = "reads 'ghost'"},
    {"a cycle", H_MODEL, .model = "bad_cycle", .make = make_cycle, .status = 400,
     .needle = "cycle"},
    {"an unsupported op", H_MODEL, .model = "bad_op", .make = make_unsupported_op,
     .status = 400, .needle = "FooBarOp"},
    {"an IR version from the future", H_MODEL, .model = "bad_ir", .make = make_ir_version_999,
     .status = 400, .needle = "IR version 999 is not supported"},
    {"raw data short of its dims", H_MODEL, .model = "bad_raw_short",
     .make = make_raw_data_short, .status = 400,
     .needle = "raw_data holds 8 bytes, but float [1,4] needs 16"},
    {"an initializer of 2^42 floats holding 4", H_MODEL, .model = "bad_init_huge",
     .make = make_initializer_huge, .status = 400, .needle = "needs 17592186044416"},
    {"a constant of 4 TiB folded at load", H_MODEL, .model = "bad_fold_huge",
     .make = make_fold_huge, .status = 507,
     .needle = "constant folding needs a 4.00 TiB constant"},
    {"external data at '..'", H_MODEL, .model = "bad_external_dotdot",
     .make = make_external_dotdot, .status = 400, .needle = "contains '..'"},
    {"external data at an absolute path", H_MODEL, .model = "bad_external_absolute",
     .make = make_external_absolute, .status = 400, .needle = "is an absolute path"},
    {"external data linking out of the model", H_MODEL, .model = "bad_external_link",
     .make = make_external_link_out, .status = 400, .needle = "outside the model"},
    {"external data past the end of its file", H_MODEL, .model = "bad_external",
     .make = make_external_past_end, .status = 4, .needle = "offset 64"},
    {"a graph output nothing makes", H_MODEL, .model = "bad_graph_output",
     .make = make_undefined_output, .status = 400, .needle = "nowhere"},
    {"a node with no output", H_MODEL, .model = "bad_no_output",
     .make = make_node_without_output, .status = 4, .needle = "has 0 outputs, but Relu-13 takes exactly 1"},
    {"output 0 named \"\"", H_MODEL, .model = "bad_empty_output",
     .make = make_empty_output_name, .status = 4, .needle = "output 0 (Y) is required but has an empty name"},
    {"a required input named \"\"", H_MODEL, .model = "bad_empty_input",
     .make = make_empty_required_input, .status = 400,
     .needle = "input 1 (B) is required but has an empty name"},
    {"an attribute of the wrong type", H_MODEL, .model = "bad_attr_type",
     .make = make_attribute_wrong_type, .status = 400, .needle = "'axis'"},
    {"an attribute the op does not define", H_MODEL, .model = "bad_attr_unknown",
     .make = make_attribute_unknown, .status = 400, .needle = "'alpha' is not defined by Relu"},
    {"a config.json cut short", H_MODEL, .model = "bad_config_json",
     .make = make_bad_config_json, .status = 400, .needle = "config.json: not valid JSON"},
    {"an unknown config key", H_MODEL, .model = "bad_config", .make = make_unknown_config_key,
     .status = 400, .needle = "max_batch_sise"},
    {"a model directory linking out of the repository", H_MODEL, .model = "bad_model_link",
     .make = make_model_dir_link, .status = 400, .needle = "outside the repository"},
    {"a version directory linking out of the repository", H_MODEL,
     .model = "bad_version_link", .make = make_version_dir_link, .status = 400,
     .needle = "outside the repository"},
    {"a model that is a file", H_MODEL, .model = "bad_file", .make = make_model_a_file,
     .status = 404, .needle = "no directory"},
    {"a model.onnx that is a directory", H_MODEL, .model = "bad_onnx_dir",
     .make = make_model_onnx_a_dir, .status = 404,
     .needle = "no version directory with a model.onnx"},
    {"a model.onnx linking to /dev/zero", H_MODEL, .model = "bad_dev_zero",
     .make = make_model_onnx_dev_zero, .status = 404,
     .needle = "no version directory with a model.onnx"},
};
#define N_CATALOGUE (sizeof catalogue / sizeof catalogue[0])

/* ---- the replay ------------------------------------------------------------------------- */

/* Whether `status` is what the entry wants: exact, or of its class. */
static bool status_ok(const hostile_t *h, long status)
{
    return h->status > 0 && h->status < 10 ? status / 100 == h->status : status == h->status;
}

/* The offset of the first byte of `s` that is not valid UTF-8, or len. */
static size_t utf8_invalid_at(const char *s, size_t len)
{
    const unsigned char *c = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = c[i] < 0x80 ? 1 : c[i] >= 0xc2 && c[i] <= 0xdf ? 2
                 : c[i] >= 0xe0 && c[i] <= 0xef ? 3 : c[i] >= 0xf0 && c[i] <= 0xf4 ? 4 : 0;
        if (k == 0 || i + k > len)
            return i;
        for (size_t j = 1; j < k; j++)
            if ((c[i + j] & 0xc0) != 0x80)
                return i;
        /* Overlong 3- and 4-byte forms, surrogates, past U+10FFFF. */
        if ((c[i] == 0xe0 && c[i + 1] < 0xa0) || (c[i] == 0xed && c[i + 1] > 0x9f) ||
            (c[i] == 0xf0 && c[i + 1] < 0x90) || (c[i] == 0xf4 && c[i + 1] > 0x8f))
            return i;
        i += k;
    }
    return len;
}

/* The status and, for an error, {"error": "..."} holding the needle; or,
 * for an answer libmicrohttpd wrote itself (a malformed HTTP request,
 * `json` false), the needle in its text. Status 0: no answer, the
 * connection closed. */
static void expect_answer(const hostile_t *h, const http_resp_t *r, bool json)
{
    cr_expect(status_ok(h, r->status), "%s: status %ld (want %ld%s), curl %d: %.300s", h->what,
              r->status, h->status, h->status > 0 && h->status < 10 ? "xx" : "", (int)r->curl,
              r->body);
    if (h->status == 0)
        cr_expect_eq(r->curl, CURLE_OK, "%s: the connection was not closed", h->what);
    if (h->status == 200 || h->status == 0)
        return;
    if (!json) {
        if (h->needle)
            cr_expect(strstr(r->body, h->needle) != NULL, "%s: '%s' not in the answer: %.300s",
                      h->what, h->needle, r->body);
        return;
    }
    size_t bad = utf8_invalid_at(r->body, r->len);
    cr_expect_eq(bad, r->len, "%s: the answer is not UTF-8 at byte %zu: %.300s", h->what, bad,
                 r->body);
    cJSON *doc = cJSON_Parse(r->body);
    cJSON *err = cJSON_GetObjectItemCaseSensitive(doc, "error");
    cr_expect(cJSON_IsString(err), "%s: no {\"error\": ...} in %.300s", h->what, r->body);
    if (h->needle && cJSON_IsString(err))
        cr_expect(strstr(err->valuestring, h->needle) != NULL, "%s: '%s' not in the error: %s",
                  h->what, h->needle, err->valuestring);
    cJSON_Delete(doc);
}

static void replay_request(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    const char *path = h->path;
    const void *body = h->body;
    size_t len = h->body ? (h->body_len ? h->body_len : strlen(h->body)) : 0;
    if (h->make && !h->path) {
        path = m->body.data; /* the maker made the path */
        body = NULL;
    } else if (h->make) {
        body = m->body.data;
        len = m->body.len;
    }
    const char *headers[5] = {0};
    size_t n = 0;
    for (size_t i = 0; i < 3 && h->headers[i]; i++)
        headers[n++] = h->headers[i];
    if (m->header[0])
        headers[n++] = m->header;
    if (!body && strcmp(h->method, "GET") != 0)
        body = ""; /* a POST, PUT, ... with an empty body */
    uint64_t t0 = http_raw_now_ms();
    http_resp_t r = http_do(f->port, h->method, path, body, len, headers);
    uint64_t took_ms = http_raw_now_ms() - t0;
    expect_answer(h, &r, true);
    if (h->max_ms)
        cr_expect_leq(took_ms, (uint64_t)h->max_ms, "%s: answered in %llu ms", h->what,
                      (unsigned long long)took_ms);
    free(r.body);
}

static void replay_raw(srv_fixture_t *f, const hostile_t *h, const hostile_msg_t *m)
{
    for (int k = 0; k < (h->repeat ? h->repeat : 1); k++) {
        int fd = http_raw_open(f->port);
        cr_assert_geq(fd, 0, "%s: cannot connect", h->what);
        const char *bytes = h->make ? m->body.data : h->body;
        cr_assert(http_raw_send(fd, bytes, strlen(bytes)), "%s: cannot send", h->what);
        if (h->raw == RAW_HANG_UP) {
            close(fd);
            continue;
        }
        uint64_t t0 = http_raw_now_ms();
        http_resp_t r = http_raw_read(fd, (TIMEOUT_S + 5) * 1000);
        close(fd);
        if (h->raw == RAW_STALL) {
            cr_expect_eq(r.curl, CURLE_OK, "%s: the server did not close the connection in %d s",
                         h->what, TIMEOUT_S + 5);
            cr_expect_eq(r.status, 0, "%s: answered %ld: %s", h->what, r.status, r.body);
            cr_expect_geq(http_raw_now_ms() - t0, TIMEOUT_S * 1000 - 100,
                          "%s: closed before the connection timeout", h->what);
        } else {
            /* The server's answers are JSON; libmicrohttpd's own, HTML. */
            expect_answer(h, &r, r.body[0] == '{');
        }
        free(r.body);
    }
}

/* The model's entry in the index: whether it is listed, and its state. */
static bool index_state(unsigned port, const char *model, char *state, size_t len)
{
    http_resp_t r = http_post(port, "/v2/repository/index", "");
    cJSON *doc = cJSON_Parse(r.body);
    bool found = false;
    cJSON *e;
    cJSON_ArrayForEach(e, doc)
    {
        cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "state");
        if (cJSON_IsString(name) && strcmp(name->valuestring, model) == 0 && cJSON_IsString(st)) {
            snprintf(state, len, "%s", st->valuestring);
            found = true;
        }
    }
    cJSON_Delete(doc);
    free(r.body);
    return found;
}

static void replay_model(srv_fixture_t *f, const hostile_t *h, hostile_msg_t *m)
{
    char path[256];
    snprintf(path, sizeof path, "/v2/repository/models/%s/load", h->model);
    http_resp_t r = http_post(f->port, path, "");
    expect_answer(h, &r, true);
    free(r.body);
    snprintf(path, sizeof path, "/v2/models/%s/ready", h->model);
    r = http_get(f->port, path);
    cr_expect_neq(r.status, 200, "%s: model '%s' is ready after a failed load", h->what,
                  h->model);
    free(r.body);
    char state[32] = "";
    if (index_state(f->port, h->model, state, sizeof state))
        cr_expect_str_neq(state, "READY", "%s: the index has '%s' READY", h->what, h->model);
}

static void replay_one(srv_fixture_t *f, const hostile_t *h)
{
    hostile_msg_t m = {0};
    if (h->make)
        h->make(f, h, &m);
    switch (h->kind) {
    case H_REQUEST:
        replay_request(f, h, &m);
        break;
    case H_RAW:
        replay_raw(f, h, &m);
        break;
    case H_MODEL:
        replay_model(f, h, &m);
        break;
    }
    srv_buf_free(&m.body);
    http_resp_t r = http_get(f->port, "/v2/health/ready");
    cr_expect_eq(r.status, 200, "%s: not ready after it (curl %d): %s", h->what, (int)r.curl,
                 r.body);
    free(r.body);
}

/* allocated_bytes.current of every cache in /v1/memory, summed; -1 when
 * it cannot be read. */
static double allocated_bytes(unsigned port)
{
    http_resp_t r = http_get(port, "/v1/memory?segments=0");
    cJSON *doc = cJSON_Parse(r.body);
    double sum = -1;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(doc, "caches"))
    {
        cJSON *cur = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "allocated_bytes"), "current");
        sum = (sum < 0 ? 0 : sum) + (cJSON_IsNumber(cur) ? cur->valuedouble : 1e18);
    }
    cJSON_Delete(doc);
    free(r.body);
    return sum;
}

/* Replays every entry of `kind` with good traffic beside it; then unloads
 * what serves, checks the caches are back to zero, and stops. */
static void replay(hostile_kind_t kind)
{
    srv_fixture_t f;
    hostile_start(&f);
    good_traffic_t good;
    good_start(&good, &f);
    int n = 0;
    for (size_t i = 0; i < N_CATALOGUE; i++) {
        if (catalogue[i].kind != kind)
            continue;
        replay_one(&f, &catalogue[i]);
        n++;
    }
    cr_expect_gt(n, 0);
    good_stop(&good);

    /* Nothing stuck in flight: only the scrape itself is, once MHD has
     * completed the last answers (it does so just after sending them). */
    char gauge[64] = "";
    for (int i = 0; i < 100 && strcmp(gauge, "flatserve_http_requests_in_flight 1") != 0; i++) {
        if (i)
            usleep(20000);
        http_resp_t r = http_get(f.port, "/metrics");
        const char *at = strstr(r.body, "\nflatserve_http_requests_in_flight ");
        snprintf(gauge, sizeof gauge, "%.*s", at ? (int)strcspn(at + 1, "\n") : 6,
                 at ? at + 1 : "(none)");
        free(r.body);
    }
    cr_expect_str_eq(gauge, "flatserve_http_requests_in_flight 1",
                     "requests still in flight after the catalogue");
    const char *loaded[] = {"mlp", "encoder", "shaped"};
    for (size_t i = 0; i < 3; i++) {
        char path[96];
        snprintf(path, sizeof path, "/v2/repository/models/%s/unload", loaded[i]);
        http_resp_t r = http_post(f.port, path, "");
        cr_expect_eq(r.status, 200, "unload %s: %s", loaded[i], r.body);
        free(r.body);
    }
    cr_expect_eq(allocated_bytes(f.port), 0, "bytes still allocated with every model unloaded");
    hostile_outside_remove(&f);
    fixture_stop(&f);
}

TestSuite(hostile, .timeout = 120);

Test(hostile, bad_requests_are_refused_naming_the_problem_and_lose_no_good_request)
{
    replay(H_REQUEST);
}

Test(hostile, bad_connections_are_reaped_and_lose_no_good_request)
{
    replay(H_RAW);
}

Test(hostile, bad_model_files_fail_to_load_naming_the_problem_and_lose_no_good_request)
{
    replay(H_MODEL);
}
