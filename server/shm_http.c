/* shm_http.c -- Triton's system and CUDA shared memory extensions over
 * HTTP: the register, unregister and status routes over the app's region
 * table (shm.c), and an inference's tensors in regions. System regions:
 * inputs read where they lie (copied only when not 64-byte aligned),
 * outputs copied into their region once the request completes. CUDA
 * regions: inputs copied from the device into host memory the engine
 * takes (a CUDA model copies them up again: simple, one more copy each
 * way than handing it the device pointer), outputs copied to the device
 * once the request completes (shm_cuda.h). Every region a request names
 * is held from its parse to its release, so an unregister meanwhile
 * unmaps nothing under it. A build without CUDA answers CUDA shared
 * memory as a Triton built without GPUs answers it: none registered, a
 * register refused saying so. With server.shared_memory false (app->shm
 * NULL) each route and each tensor that names a region answers 400
 * naming the key. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/app_impl.h"
#include "server/codec_bytes.h"
#include "server/shm.h"
#include "server/shm_cuda.h"

#define SHM_OFF_MSG "Triton's system shared memory extension is turned off (server.shared_memory " \
                    "is false)"

/* A held region and where the tensor's bytes lie in it. */
typedef struct srv_shm_hold {
    srv_shm_region_t *region;     /* NULL: the tensor is not in shared memory */
    void *addr;
} srv_shm_hold_t;

/* The table, or NULL having answered 400. */
static srv_shm_t *table_of(srv_req_t *r)
{
    if (!r->app->shm)
        srv_respond_error(r, 400, "%s %s: " SHM_OFF_MSG, r->method, r->url);
    return r->app->shm;
}

/* A register's answer: 200 and no body, or rc's error. */
static void respond_done(srv_req_t *r, int rc)
{
    if (rc)
        srv_respond_fs_error(r, rc);
    else
        srv_respond(r, 200, "application/json", "", 0, false);
}

/* The status of the regions of `kind` (all, or the route's one). */
static void status_answer(srv_req_t *r, const srv_route_args_t *a, srv_shm_kind_t kind)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    cJSON *doc = NULL;
    int rc = srv_shm_status(t, kind, a->region, &doc);
    if (rc) {
        srv_respond_fs_error(r, rc);
        return;
    }
    srv_respond_json(r, 200, doc);
}

/* Unregisters the regions of `kind` (all, or the route's one): 200 even
 * when there was none, as Triton answers. */
static void unregister_answer(srv_req_t *r, const srv_route_args_t *a, srv_shm_kind_t kind)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    srv_shm_unregister(t, kind, a->region);
    srv_respond(r, 200, "application/json", "", 0, false);
}

void srv_shm_status_handle(srv_req_t *r, const srv_route_args_t *a)
{
    status_answer(r, a, SRV_SHM_SYSTEM);
}

/* A register body's number `key`: 0 and *out (absent: unchanged, when it
 * is not required), or -1 having answered 400 naming the `kind` of shared
 * memory. */
static int body_uint(srv_req_t *r, const char *kind, const cJSON *body, const char *key,
                     bool required, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (!v && !required)
        return 0;
    /* 2^53: past it a double no longer holds every integer. */
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740991.0 ||
        v->valuedouble != floor(v->valuedouble)) {
        srv_respond_error(r, 400, "%s shared memory register of '%s': \"%s\" %s", kind, r->url,
                          key, v ? "must be a non-negative integer" : "is missing");
        return -1;
    }
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* A register's body, parsed: the JSON object (the caller deletes it), or
 * NULL having answered 400 saying it must be an object of `fields`. */
static cJSON *register_body(srv_req_t *r, const char *kind, const char *region,
                            const char *fields)
{
    cJSON *body = cJSON_ParseWithLength(srv_req_body(r), srv_req_body_len(r));
    if (cJSON_IsObject(body))
        return body;
    cJSON_Delete(body);
    srv_respond_error(r, 400, "%s shared memory register of region '%.127s': the body must be a "
                      "JSON object %s", kind, region, fields);
    return NULL;
}

void srv_shm_register_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    cJSON *body = register_body(r, "system", a->region, "{\"key\", \"offset\", \"byte_size\"}");
    if (!body)
        return;
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(body, "key");
    uint64_t offset = 0, byte_size = 0;
    if (!cJSON_IsString(key))
        srv_respond_error(r, 400, "system shared memory register of region '%.127s': \"key\" "
                          "(the shared memory object's name) %s", a->region,
                          key ? "must be a string" : "is missing");
    else if (body_uint(r, "system", body, "offset", false, &offset) == 0 &&
             body_uint(r, "system", body, "byte_size", true, &byte_size) == 0) {
        respond_done(r, srv_shm_register(t, a->region, key->valuestring, offset, byte_size));
    }
    cJSON_Delete(body);
}

void srv_shm_unregister_handle(srv_req_t *r, const srv_route_args_t *a)
{
    unregister_answer(r, a, SRV_SHM_SYSTEM);
}

/* CUDA shared memory (the extension's switch is server.shared_memory too).
 * A build without CUDA has none registered, so its status is [] and its
 * unregister, which Triton's shared memory clients call first to start
 * clean, succeeds with nothing to do; its register parses the body as the
 * CUDA build does, then is refused saying the server has no GPU support. */
void srv_shm_cuda_status_handle(srv_req_t *r, const srv_route_args_t *a)
{
    status_answer(r, a, SRV_SHM_CUDA);
}

/* The value of base64 digit c (RFC 4648's standard alphabet), or -1. */
static int b64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes padded standard base64 `s` (n characters; what Python's
 * base64.b64encode writes, as tritonclient sends a raw_handle) into out,
 * which holds `cap` bytes. 0 and *len; -1 when s is not such base64; -2
 * when it decodes to more than cap bytes (*len then says how many). A
 * 64-byte handle does not warrant a library: none the server links has a
 * public base64 decoder. */
static int b64_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *len)
{
    if (n % 4)
        return -1;
    size_t pad = n && s[n - 1] == '=' ? (n > 1 && s[n - 2] == '=' ? 2 : 1) : 0;
    *len = n / 4 * 3 - pad;
    if (*len > cap)
        return -2;
    for (size_t i = 0, o = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = i + j >= n - pad ? 0 : b64_digit((unsigned char)s[i + j]);
            if (d < 0)
                return -1;
            v = v << 6 | (uint32_t)d;
        }
        for (size_t j = 0; j < 3 && o < *len; j++)
            out[o++] = (uint8_t)(v >> (16 - 8 * j));
    }
    return 0;
}

/* The raw_handle of a CUDA register body, {"b64": <base64 of a
 * cudaIpcMemHandle_t>}, into handle: 0, or -1 having answered 400. */
static int body_handle(srv_req_t *r, const char *region, const cJSON *body, uint8_t *handle)
{
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(body, "raw_handle");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(raw, "b64");
    size_t len = 0;
    int rc;
    if (!cJSON_IsObject(raw) || !cJSON_IsString(b64))
        srv_respond_error(r, 400, "CUDA shared memory register of region '%.127s': "
                          "\"raw_handle\" %s", region,
                          !raw ? "is missing" : "must be an object {\"b64\": <the base64 of the "
                          "cudaIpcMemHandle_t>}");
    else if ((rc = b64_decode(b64->valuestring, strlen(b64->valuestring), handle,
                              SRV_SHM_CUDA_HANDLE_BYTES, &len)) == -1)
        srv_respond_error(r, 400, "CUDA shared memory register of region '%.127s': "
                          "\"raw_handle\".\"b64\" is not padded standard base64", region);
    else if (rc == -2 || len != SRV_SHM_CUDA_HANDLE_BYTES)
        srv_respond_error(r, 400, "CUDA shared memory register of region '%.127s': "
                          "\"raw_handle\".\"b64\" decodes to %zu bytes, but a cudaIpcMemHandle_t "
                          "has %d", region, len, SRV_SHM_CUDA_HANDLE_BYTES);
    else
        return 0;
    return -1;
}

void srv_shm_cuda_register_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    cJSON *body = register_body(r, "CUDA", a->region,
                                "{\"raw_handle\": {\"b64\"}, \"device_id\", \"byte_size\"}");
    if (!body)
        return;
    uint8_t handle[SRV_SHM_CUDA_HANDLE_BYTES];
    uint64_t device_id = 0, byte_size = 0;
    if (body_handle(r, a->region, body, handle) == 0 &&
        body_uint(r, "CUDA", body, "device_id", true, &device_id) == 0 &&
        body_uint(r, "CUDA", body, "byte_size", true, &byte_size) == 0) {
        /* A device_id past INT_MAX is no device: one past the count says so. */
        int dev = device_id > (uint64_t)INT_MAX ? INT_MAX : (int)device_id;
        respond_done(r, srv_shm_register_cuda(t, a->region, handle, dev, byte_size));
    }
    cJSON_Delete(body);
}

void srv_shm_cuda_unregister_handle(srv_req_t *r, const srv_route_args_t *a)
{
    unregister_answer(r, a, SRV_SHM_CUDA);
}

/* Holds the region of one tensor into *h. */
static int hold(srv_req_t *r, const srv_infer_shm_t *sm, const char *what, srv_shm_hold_t *h)
{
    if (!r->app->shm)
        return fs_err(FS_EINVAL, "%s: \"shared_memory_region\": " SHM_OFF_MSG, what);
    return srv_shm_acquire(r->app->shm, sm->region, sm->offset, sm->byte_size, what, &h->region,
                           &h->addr);
}

int srv_shm_infer_inputs(srv_req_t *r)
{
    srv_infer_request_t *q = r->infer.request;
    bool any = false;
    for (size_t i = 0; i < q->n_inputs; i++)
        any |= q->inputs[i].shm.region != NULL;
    for (size_t p = 0; p < q->n_outputs; p++)
        any |= q->outputs[p].shm.region != NULL;
    if (!any)
        return 0;
    srv_shm_hold_t *held = calloc(q->n_inputs + q->n_outputs, sizeof *held);
    if (!held)
        return fs_err(FS_ENOMEM, "out of host memory holding shared memory regions");
    r->infer.shm = held;
    char what[96];
    int rc;
    for (size_t i = 0; i < q->n_inputs; i++) {
        srv_infer_input_t *in = &q->inputs[i];
        if (!in->shm.region)
            continue;
        snprintf(what, sizeof what, "input '%.64s'", in->name);
        if ((rc = hold(r, &in->shm, what, &held[i])))
            return rc;
        size_t bytes = (size_t)in->shm.byte_size;
        const uint8_t *src = held[i].addr;
        /* CUDA: the bytes come to host memory first, the input's own. */
        uint8_t *copy = NULL;
        int device = srv_shm_region_device(held[i].region);
        if (device >= 0) {
            if (!(copy = malloc(bytes ? bytes : 1)))
                return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", what, bytes);
            if ((rc = srv_shm_cuda_copy(what, in->shm.region, device, copy, src, bytes,
                                        false))) {
                free(copy);
                return rc;
            }
            src = copy;
        }
        /* BYTES: the region holds serialized elements, decoded into a
         * block of the input's own (codec_bytes.h). */
        if (in->tensor.dtype == ENG_DT_STRING) {
            rc = srv_bytes_decode(what, src, bytes, &in->tensor);
            free(copy);
            if (rc)
                return rc;
            continue;
        }
        if (in->tensor.dtype == ENG_DT_BOOL)
            for (size_t k = 0; k < bytes; k++)
                if (src[k] > 1) {
                    rc = fs_err(FS_EINVAL, "%s: BOOL byte %u at index %zu is neither 0 nor 1",
                                what, src[k], k);
                    free(copy);
                    return rc;
                }
        if (copy) {
            in->tensor.data = copy;
            continue;
        }
        /* As binary data: bytes that start aligned are read where they
         * lie (the region is held until the request ends), others copied. */
        if (bytes && (uintptr_t)src % SRV_BINARY_VIEW_ALIGN == 0) {
            in->tensor.data = (void *)src;
            in->borrowed = true;
            continue;
        }
        if (!(in->tensor.data = malloc(bytes ? bytes : 1)))
            return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", what, bytes);
        memcpy(in->tensor.data, src, bytes);
    }
    for (size_t p = 0; p < q->n_outputs; p++) {
        srv_infer_output_t *o = &q->outputs[p];
        if (!o->shm.region)
            continue;
        snprintf(what, sizeof what, "output '%.64s'", o->name);
        if ((rc = hold(r, &o->shm, what, &held[q->n_inputs + p])))
            return rc;
    }
    return 0;
}

/* Copies output o's tensor t (bytes bytes; str: serialized BYTES) into
 * the CUDA region at device address dst. 0, FS_ENOMEM, or FS_EDEVICE
 * naming the output and the region. */
static int output_to_device(const srv_infer_output_t *o, const eng_tensor_t *t, bool str,
                            size_t bytes, int device, void *dst)
{
    char what[96];
    snprintf(what, sizeof what, "output '%.64s'", o->name);
    if (!str)
        return srv_shm_cuda_copy(what, o->shm.region, device, dst, t->data, bytes, true);
    uint8_t *ser = malloc(bytes);
    if (!ser)
        return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", what, bytes);
    srv_bytes_write(t, ser);
    int rc = srv_shm_cuda_copy(what, o->shm.region, device, dst, ser, bytes, true);
    free(ser);
    return rc;
}

int srv_shm_infer_outputs(srv_req_t *r)
{
    const srv_infer_request_t *q = r->infer.request;
    const srv_shm_hold_t *held = r->infer.shm;
    if (!held)
        return 0;
    const eng_model_t *m = eng_served_model(r->infer.served);
    eng_request_t *e = &r->infer.ereq;
    /* Every size checked before any byte is written: a request that fails
     * a check leaves every region as it was (a CUDA copy that fails
     * midway may leave the outputs before it written). */
    for (int pass = 0; pass < 2; pass++)
        for (size_t p = 0; p < q->n_outputs; p++) {
            const srv_infer_output_t *o = &q->outputs[p];
            if (!o->shm.region)
                continue;
            long k = eng_io_output_find(m, o->name);
            if (k < 0 || (size_t)k >= e->n_outputs || !e->outputs[k])
                return fs_err(FS_EINVAL, "output '%.64s' was not computed", o->name);
            const eng_tensor_t *t = e->outputs[k];
            bool str = t->dtype == ENG_DT_STRING;
            size_t bytes = str ? srv_bytes_size(t) : eng_tensor_bytes(t);
            if (pass == 0 && bytes > o->shm.byte_size)
                return fs_err(FS_EINVAL, "output '%.64s': shared_memory_byte_size is %llu but the "
                              "output has %zu bytes%s", o->name,
                              (unsigned long long)o->shm.byte_size, bytes,
                              str ? " serialized" : "");
            if (pass == 1 && bytes) {
                const srv_shm_hold_t *h = &held[q->n_inputs + p];
                int device = srv_shm_region_device(h->region), rc;
                if (device >= 0 &&
                    (rc = output_to_device(o, t, str, bytes, device, h->addr)) != 0)
                    return rc;
                if (device < 0 && str)
                    srv_bytes_write(t, h->addr);
                else if (device < 0)
                    memcpy(h->addr, t->data, bytes);
            }
        }
    return 0;
}

void srv_shm_infer_release(srv_req_t *r)
{
    srv_shm_hold_t *held = r->infer.shm;
    if (!held)
        return;
    /* The request may be gone already: its counts are its own. */
    const srv_infer_request_t *q = r->infer.request;
    size_t n = q ? q->n_inputs + q->n_outputs : 0;
    for (size_t i = 0; i < n; i++)
        srv_shm_release(held[i].region);
    free(held);
    r->infer.shm = NULL;
}
