/* fuzz_codec.c -- fuzz target "codec": server/codec.c's request decoder on
 * a JSON body or a binary-extension body, then binding, running and the
 * response encoder, as server/infer.c chains them.
 *
 * Input: a first byte 'B' makes the next 4 bytes the JSON header's length
 * (little-endian; what Inference-Header-Content-Length carries, passed
 * unchecked: the decoder refuses a length past the body itself) and the
 * rest the body; 'Z' and 'D' make the rest a gzip or deflate (zlib)
 * compressed JSON body, inflated first under a 1 MiB bound as http.c
 * inflates one (server/encoding.c: refusals are FS_EPARSE / FS_ERANGE /
 * FS_ENOMEM with a message, and what inflates deflates and inflates back
 * to itself); 'R' makes the rest a raw binary request (header length 0:
 * codec_raw.c), its next byte picking the model ('m' mlp, which takes
 * whole rows of 64 floats; 'p' pair and anything else echo, which must
 * refuse it); any other first byte makes the rest a JSON body.
 *
 * A request that parses is bound to the model its "model" names, built in
 * memory (fuzz_model.h) over a fresh CPU cache:
 *  - "mlp": the demo mlp's face, input FP32 [batch,64] -> MatMul -> Softmax
 *    -> probabilities FP32 [batch,10];
 *  - "pair": a FP32 [n,3] -> sum = a + a, b INT64 [2] -> ids = b;
 *  - anything else: "echo", one input x of any dtype and shape -> y =
 *    Identity(x). Its output is its input, so it is encoded from the bound
 *    input without running: every datatype, the engine's or not, reaches
 *    the encoder.
 * mlp and pair run, and the outputs are encoded as the request asked.
 *
 * Checks: where server/codec_fast.c's reader accepts the body, the cJSON
 * path accepts it too and reads the same request (fuzz_codec_readers_agree:
 * the fast reader may never take what cJSON refuses, nor read it
 * differently); refusals are FS_EPARSE / FS_EINVAL (FS_ENOMEM) with a
 * message; a parsed request's tensors hold their bytes (read whole, so a
 * short buffer shows under ASan) and have valid shapes, or lie in a shared
 * memory region with no data and the tensor's byte size (such a request is
 * not run: the target registers no region); the response's
 * JSON part is JSON with one "outputs" entry per output sent; the cache is
 * back to zero once the model is gone. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "server/codec.h"
#include "server/codec_impl.h"
#include "server/encoding.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_model.h"

#define CODEC_CACHE_LIMIT_BYTES ((size_t)64 << 20)
/* What a compressed body may inflate to (http.c's bound is server.max_body). */
#define CODEC_INFLATE_MAX ((size_t)1 << 20)

/* The models a request can name. */
static void model_mlp(fuzz_mb_t *b)
{
    static float w[64 * 10];
    for (int i = 0; i < 64 * 10; i++)
        w[i] = (float)(i % 7 - 3) * 0.05f;
    fuzz_mb_init(b, 8, 13);
    fuzz_mb_input(b, "input", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 64},
                  (const char *const[]){"batch", NULL});
    fuzz_mb_init_f(b, "w", 2, (int64_t[]){64, 10}, w);
    fuzz_mb_node(b, "MatMul", "input,w", "logits");
    fuzz_mb_attr_i(b, fuzz_mb_node(b, "Softmax", "logits", "probabilities"), "axis", -1);
    fuzz_mb_output(b, "probabilities", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 10},
                   (const char *const[]){"batch", NULL});
}

static void model_pair(fuzz_mb_t *b)
{
    fuzz_mb_init(b, 8, 13);
    fuzz_mb_input(b, "a", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 3}, (const char *const[]){"n", NULL});
    fuzz_mb_input(b, "b", FUZZ_DT_INT64, 1, (int64_t[]){2}, NULL);
    fuzz_mb_node(b, "Add", "a,a", "sum");
    fuzz_mb_node(b, "Identity", "b", "ids");
    fuzz_mb_output(b, "sum", FUZZ_DT_FLOAT, 2, (int64_t[]){-1, 3},
                   (const char *const[]){"n", NULL});
    fuzz_mb_output(b, "ids", FUZZ_DT_INT64, 1, (int64_t[]){2}, NULL);
}

static void model_echo(fuzz_mb_t *b)
{
    fuzz_mb_init(b, 8, 13);
    fuzz_mb_input(b, "x", 0, -1, NULL, NULL);
    fuzz_mb_node(b, "Identity", "x", "y");
    fuzz_mb_output(b, "y", 0, -1, NULL, NULL);
}

/* Reads every byte of every input (ASan sees a buffer shorter than its
 * shape) and checks the shapes. */
static int request_check(const srv_infer_request_t *r)
{
    unsigned sum = 0;
    for (size_t i = 0; i < r->n_inputs; i++) {
        const eng_tensor_t *t = &r->inputs[i].tensor;
        if (!r->inputs[i].name)
            return fs_err(FS_ESTATE, "parsed input %zu has no name", i);
        if (t->shape.rank < 0 || t->shape.rank > ENG_MAX_RANK)
            return fs_err(FS_ESTATE, "input '%s': rank %d", r->inputs[i].name, t->shape.rank);
        for (int d = 0; d < t->shape.rank; d++)
            if (t->shape.dims[d] < 0)
                return fs_err(FS_ESTATE, "input '%s': dim %d is %lld", r->inputs[i].name, d,
                              (long long)t->shape.dims[d]);
        size_t bytes = eng_tensor_bytes(t);
        const srv_infer_shm_t *sm = &r->inputs[i].shm;
        if (sm->region) {
            /* In a shared memory region: no data until infer.c resolves it. */
            if (t->data || !sm->region[0] || sm->byte_size != bytes)
                return fs_err(FS_ESTATE, "input '%s' in shared memory: data %p, region \"%s\", "
                              "byte_size %llu for %zu bytes", r->inputs[i].name, t->data,
                              sm->region, (unsigned long long)sm->byte_size, bytes);
            continue;
        }
        if (bytes && !t->data)
            return fs_err(FS_ESTATE, "input '%s': %zu bytes and no data", r->inputs[i].name,
                          bytes);
        for (size_t k = 0; k < bytes; k++)
            sum += ((const uint8_t *)t->data)[k];
    }
    for (size_t j = 0; j < r->n_outputs; j++) {
        if (!r->outputs[j].name)
            return fs_err(FS_ESTATE, "requested output %zu has no name", j);
        if (r->outputs[j].shm.region && (r->outputs[j].binary || !r->outputs[j].shm.region[0]))
            return fs_err(FS_ESTATE, "requested output '%s' in shared memory region \"%s\" is "
                          "binary %d", r->outputs[j].name, r->outputs[j].shm.region,
                          r->outputs[j].binary);
    }
    /* Keeps the reads. */
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}

/* The response's JSON part is JSON and has an "outputs" entry per output
 * the request asked for (all of the model's when it named none). */
static int response_check(const srv_buf_t *out, size_t json_len, size_t n_expected)
{
    if (json_len > out->len)
        return fs_err(FS_ESTATE, "response JSON length %zu is past its %zu bytes", json_len,
                      out->len);
    cJSON *root = cJSON_ParseWithLength(out->data, json_len);
    if (!root)
        return fs_err(FS_ESTATE, "the response is not JSON: %.200s", out->data);
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    int n = cJSON_IsArray(outs) ? cJSON_GetArraySize(outs) : -1;
    cJSON_Delete(root);
    if (n < 0 || (size_t)n != n_expected)
        return fs_err(FS_ESTATE, "the response has %d outputs, %zu expected: %.200s", n,
                      n_expected, out->data);
    return 0;
}

/* Binds r to the model, runs it (echo: encodes its input) and encodes. */
static int request_answer(const srv_infer_request_t *r, eng_model_t *m, const char *name,
                          bool echo)
{
    static const int bind_codes[] = {FS_EINVAL};
    static const int run_codes[] = {FS_EINVAL, FS_ENOMEM, FS_ENOTSUP};
    static const int encode_codes[] = {FS_EINVAL, FS_ENOMEM};
    size_t n_in = eng_model_n_inputs(m), n_out = eng_model_n_outputs(m);
    eng_tensor_t views[2];
    eng_tensor_t *outs[2] = {NULL, NULL};
    srv_buf_t out = {0};
    size_t json_len = 0;
    fs_err_clear();
    int rc = srv_infer_bind(r, m, views);
    if (rc != 0)
        return fuzz_refusal_check("srv_infer_bind", rc, bind_codes, 1);
    if (echo) {
        outs[0] = &views[0];
    } else {
        fs_err_clear();
        rc = eng_model_run(m, views, n_in, outs);
        if (rc != 0)
            return fuzz_refusal_check("eng_model_run", rc, run_codes, 3);
    }
    fs_err_clear();
    rc = srv_infer_response_encode(m, name, 1, r, outs, n_out, &out, &json_len);
    if (rc != 0)
        rc = fuzz_refusal_check("srv_infer_response_encode", rc, encode_codes, 2);
    else
        rc = response_check(&out, json_len, r->n_outputs ? r->n_outputs : n_out);
    srv_buf_free(&out);
    for (size_t j = 0; !echo && j < n_out; j++)
        eng_tensor_free(outs[j]);
    return rc;
}

/* Builds model `name` ("mlp", "pair" or "echo") over a fresh cache into
 * *mem and *m (close with model_close). 0, or FS_ESTATE: the target's own
 * models must load. */
static int model_open(const char *name, eng_memory_t *mem, eng_model_t **m)
{
    fuzz_mb_t b;
    if (name[0] == 'm')
        model_mlp(&b);
    else if (name[0] == 'p')
        model_pair(&b);
    else
        model_echo(&b);
    uint8_t *bytes = NULL;
    size_t len = 0;
    int rc = fuzz_mb_pack(&b, &bytes, &len);
    fuzz_mb_free(&b);
    if (rc != 0)
        return rc;
    alloc_cache_config_t cc = {.name = "fuzz", .max_reserved_bytes = CODEC_CACHE_LIMIT_BYTES};
    memset(mem, 0, sizeof *mem);
    *m = NULL;
    rc = eng_memory_open(NULL, &cc, mem);
    eng_model_config_t mc = {.name = name, .cache = mem->cache};
    if (rc == 0)
        rc = eng_model_load_bytes(bytes, len, NULL, &mc, m);
    free(bytes);
    if (rc != 0) {
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        eng_memory_close(mem);
        return fs_err(FS_ESTATE, "the codec target's model '%s' did not load: %s", name, msg);
    }
    return 0;
}

/* Destroys the model and checks its cache went back to zero. */
static int model_close(eng_memory_t *mem, eng_model_t *m)
{
    eng_model_destroy(m);
    int zero = fuzz_cache_check_zero(mem->cache, "after the model was destroyed");
    eng_memory_close(mem);
    return zero;
}

/* Builds the model r names over a fresh cache and answers r with it. */
static int request_serve(const srv_infer_request_t *r)
{
    const char *name = r->model && strcmp(r->model, "mlp") == 0    ? "mlp"
                       : r->model && strcmp(r->model, "pair") == 0 ? "pair"
                                                                   : "echo";
    /* An input in a shared memory region has its bytes only once infer.c
     * resolves it against the registered regions, which this target has
     * none of (test_server_shm.c runs such requests). Outputs in regions
     * are served: the encoder writes their parameters. */
    for (size_t i = 0; i < r->n_inputs; i++)
        if (r->inputs[i].shm.region)
            return 0;
    eng_memory_t mem;
    eng_model_t *m;
    int rc = model_open(name, &mem, &m);
    if (rc != 0)
        return rc;
    rc = request_answer(r, m, name, name[0] == 'e');
    int zero = model_close(&mem, m);
    return rc ? rc : zero;
}

/* A raw binary request (Inference-Header-Content-Length: 0) of `len`
 * bytes to the model `pick` chooses ('m' mlp, 'p' pair, else echo): mlp
 * takes it when the bytes are whole rows of 64 floats, pair (two inputs)
 * and echo (no declared shape) refuse it. */
static int raw_serve(uint8_t pick, const uint8_t *body, size_t len)
{
    static const int raw_codes[] = {FS_EINVAL, FS_ENOMEM};
    const char *name = pick == 'm' ? "mlp" : pick == 'p' ? "pair" : "echo";
    eng_memory_t mem;
    eng_model_t *m;
    int rc = model_open(name, &mem, &m);
    if (rc != 0)
        return rc;
    srv_infer_request_t *r = NULL;
    fs_err_clear();
    rc = srv_infer_request_raw(m, name, true, body, len, &r);
    if (rc != 0)
        rc = r ? fs_err(FS_ESTATE, "srv_infer_request_raw failed and returned a request")
               : fuzz_refusal_check("srv_infer_request_raw", rc, raw_codes, 2);
    else if (name[0] != 'm')
        rc = fs_err(FS_ESTATE, "srv_infer_request_raw took %zu bytes for model '%s', which "
                    "has no single input of a declared shape", len, name);
    else if (r->n_inputs != 1 || eng_tensor_bytes(&r->inputs[0].tensor) != len ||
             !r->binary_output)
        rc = fs_err(FS_ESTATE, "a raw request of %zu bytes became %zu inputs of %zu bytes",
                    len, r->n_inputs, r->n_inputs ? eng_tensor_bytes(&r->inputs[0].tensor) : 0);
    if (rc == 0 && r)
        rc = request_check(r);
    if (rc == 0 && r)
        rc = request_answer(r, m, name, false);
    srv_infer_request_free(r);
    int zero = model_close(&mem, m);
    return rc ? rc : zero;
}

/* A compressed body (server/encoding.c), inflated under CODEC_INFLATE_MAX
 * as http.c inflates one under server.max_body: a refusal is FS_EPARSE,
 * FS_ERANGE or FS_ENOMEM with a message; what inflates stays within the
 * bound, and compressed again with srv_deflate it inflates back to the
 * same bytes. 0 and *out (caller frees) with *took (false: refused as
 * documented), or FS_ESTATE. */
static int inflate_check(srv_encoding_t enc, const uint8_t *in, size_t len, srv_buf_t *out,
                         bool *took)
{
    static const int inflate_codes[] = {FS_EPARSE, FS_ERANGE, FS_ENOMEM};
    fs_err_clear();
    int rc = srv_inflate(enc, in, len, CODEC_INFLATE_MAX, out);
    *took = rc == 0;
    if (rc != 0) {
        srv_buf_free(out);
        return fuzz_refusal_check("srv_inflate", rc, inflate_codes, 3);
    }
    if (out->len > CODEC_INFLATE_MAX)
        return fs_err(FS_ESTATE, "srv_inflate wrote %zu bytes past its bound of %zu", out->len,
                      (size_t)CODEC_INFLATE_MAX);
    srv_buf_t z = {0}, back = {0};
    rc = srv_deflate(enc, &(struct iovec){out->data, out->len}, 1, &z);
    if (rc == 0 && (rc = srv_inflate(enc, z.data, z.len, CODEC_INFLATE_MAX, &back)) != 0)
        rc = fs_err(FS_ESTATE, "srv_deflate's own %s stream does not inflate: %s",
                    srv_encoding_name(enc), fs_errmsg());
    else if (rc == 0 && (back.len != out->len || (out->len && memcmp(back.data, out->data,
                                                                     out->len) != 0)))
        rc = fs_err(FS_ESTATE, "%zu bytes compressed with %s inflate back to %zu other bytes",
                    out->len, srv_encoding_name(enc), back.len);
    srv_buf_free(&z);
    srv_buf_free(&back);
    return rc;
}

/* Both strings NULL, or both equal. */
static bool str_same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* 0 when the two requests are the same, else FS_ESTATE naming the first
 * difference. */
static int requests_same(const srv_infer_request_t *f, const srv_infer_request_t *t)
{
    if (!str_same(f->id, t->id) || !str_same(f->model, t->model) || f->version != t->version ||
        f->binary_output != t->binary_output)
        return fs_err(FS_ESTATE, "the readers differ on id, model, version or "
                      "binary_data_output: fast \"%.40s\" \"%.40s\" %lld %d, cJSON \"%.40s\" "
                      "\"%.40s\" %lld %d", f->id ? f->id : "(none)", f->model ? f->model : "(none)",
                      (long long)f->version, f->binary_output, t->id ? t->id : "(none)",
                      t->model ? t->model : "(none)", (long long)t->version, t->binary_output);
    if (f->n_inputs != t->n_inputs || f->n_outputs != t->n_outputs)
        return fs_err(FS_ESTATE, "the readers differ on the count of inputs (%zu, %zu) or "
                      "outputs (%zu, %zu)", f->n_inputs, t->n_inputs, f->n_outputs, t->n_outputs);
    for (size_t i = 0; i < f->n_inputs; i++) {
        const srv_infer_input_t *a = &f->inputs[i], *b = &t->inputs[i];
        size_t bytes = eng_tensor_bytes(&a->tensor);
        bool same = strcmp(a->name, b->name) == 0 && a->borrowed == b->borrowed &&
                    a->tensor.dtype == b->tensor.dtype &&
                    eng_shape_equal(&a->tensor.shape, &b->tensor.shape) &&
                    bytes == eng_tensor_bytes(&b->tensor) &&
                    str_same(a->shm.region, b->shm.region) &&
                    a->shm.offset == b->shm.offset && a->shm.byte_size == b->shm.byte_size &&
                    (a->borrowed ? a->tensor.data == b->tensor.data
                                 : !bytes || memcmp(a->tensor.data, b->tensor.data, bytes) == 0);
        if (!same)
            return fs_err(FS_ESTATE, "the readers differ on input %zu ('%.40s' / '%.40s': name, "
                          "dtype, shape, bytes or borrowing)", i, a->name, b->name);
    }
    for (size_t j = 0; j < f->n_outputs; j++)
        if (strcmp(f->outputs[j].name, t->outputs[j].name) != 0 ||
            f->outputs[j].binary != t->outputs[j].binary ||
            !str_same(f->outputs[j].shm.region, t->outputs[j].shm.region))
            return fs_err(FS_ESTATE, "the readers differ on output %zu ('%.40s' binary %d, "
                          "'%.40s' binary %d)", j, f->outputs[j].name, f->outputs[j].binary,
                          t->outputs[j].name, t->outputs[j].binary);
    return 0;
}

int fuzz_codec_readers_agree(const void *body, size_t len, size_t header_len, bool *accepted)
{
    size_t json_len = header_len ? header_len : len;
    srv_infer_request_t *f = NULL, *t = NULL;
    bool took = header_len <= len && json_len > 0 &&
                srv_infer_request_parse_fast(body, len, json_len, &f);
    if (accepted)
        *accepted = took;
    if (!took)
        return 0;
    fs_err_clear();
    int rc = srv_infer_request_parse_tree(body, len, header_len, &t);
    if (rc != 0) {
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        rc = fs_err(FS_ESTATE, "the fast reader accepted a body the cJSON path refuses (%s): %s",
                    fs_errname(rc), msg);
    } else {
        rc = requests_same(f, t);
    }
    srv_infer_request_free(f);
    srv_infer_request_free(t);
    return rc;
}

static int codec_body(const void *body, size_t len, size_t header_len);

int fuzz_codec_one(const uint8_t *data, size_t size)
{
    size_t header_len = 0;
    const uint8_t *body = data;
    size_t len = size;
    srv_buf_t plain = {0};
    if (size >= 2 && data[0] == 'R')
        return raw_serve(data[1], data + 2, size - 2);
    if (size >= 1 && (data[0] == 'Z' || data[0] == 'D')) {
        bool took = false;
        int rc = inflate_check(data[0] == 'Z' ? SRV_ENC_GZIP : SRV_ENC_DEFLATE, data + 1,
                               size - 1, &plain, &took);
        if (rc != 0 || !took) {
            srv_buf_free(&plain);
            return rc;
        }
        rc = codec_body(plain.data, plain.len, 0);
        srv_buf_free(&plain);
        return rc;
    }
    if (size >= 1 && data[0] == 'B') {
        if (size < 5)
            return 0;
        header_len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 |
                     (size_t)data[4] << 24;
        body = data + 5;
        len = size - 5;
    } else if (size >= 1) {
        body = data + 1;
        len = size - 1;
    }
    return codec_body(body, len, header_len);
}

/* A request body as srv_infer_handle takes it, with its header length. */
static int codec_body(const void *body, size_t len, size_t header_len)
{
    static const int parse_codes[] = {FS_EPARSE, FS_EINVAL, FS_ENOMEM};
    int rc = fuzz_codec_readers_agree(body, len, header_len, NULL);
    if (rc != 0)
        return rc;
    srv_infer_request_t *r = NULL;
    fs_err_clear();
    rc = srv_infer_request_parse(body, len, header_len, &r);
    if (rc != 0) {
        if (r)
            return fs_err(FS_ESTATE, "srv_infer_request_parse failed and returned a request");
        return fuzz_refusal_check("srv_infer_request_parse", rc, parse_codes, 3);
    }
    rc = request_check(r);
    if (rc == 0)
        rc = request_serve(r);
    srv_infer_request_free(r);
    return rc;
}
