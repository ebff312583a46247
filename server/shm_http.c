/* shm_http.c -- Triton's system shared memory extension over HTTP: the
 * register, unregister and status routes over the app's region table
 * (shm.c), and an inference's tensors in regions: inputs read where they
 * lie (copied only when not 64-byte aligned), outputs copied into their
 * region once the request completes. Every region a request names is
 * held from its parse to its release, so an unregister meanwhile unmaps
 * nothing under it. CUDA shared memory is answered as a Triton built
 * without GPUs answers it (none registered; register refused). With
 * server.shared_memory false (app->shm NULL) each route and each tensor
 * that names a region answers 400 naming the key. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/app_impl.h"
#include "server/codec_bytes.h"
#include "server/shm.h"

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

void srv_shm_status_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    cJSON *doc = NULL;
    int rc = srv_shm_status(t, a->region, &doc);
    if (rc) {
        srv_respond_fs_error(r, rc);
        return;
    }
    srv_respond_json(r, 200, doc);
}

/* A register body's number `key`: 0 and *out (absent: `dflt`, when it is
 * not required), or -1 having answered 400. */
static int body_uint(srv_req_t *r, const cJSON *body, const char *key, bool required,
                     uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (!v && !required)
        return 0;
    /* 2^53: past it a double no longer holds every integer. */
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740991.0 ||
        v->valuedouble != floor(v->valuedouble)) {
        srv_respond_error(r, 400, "system shared memory register of '%s': \"%s\" %s", r->url,
                          key, v ? "must be a non-negative integer" : "is missing");
        return -1;
    }
    *out = (uint64_t)v->valuedouble;
    return 0;
}

void srv_shm_register_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    cJSON *body = cJSON_ParseWithLength(srv_req_body(r), srv_req_body_len(r));
    if (!cJSON_IsObject(body)) {
        cJSON_Delete(body);
        srv_respond_error(r, 400, "system shared memory register of region '%.127s': the body "
                          "must be a JSON object {\"key\", \"offset\", \"byte_size\"}", a->region);
        return;
    }
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(body, "key");
    uint64_t offset = 0, byte_size = 0;
    if (!cJSON_IsString(key))
        srv_respond_error(r, 400, "system shared memory register of region '%.127s': \"key\" "
                          "(the shared memory object's name) %s", a->region,
                          key ? "must be a string" : "is missing");
    else if (body_uint(r, body, "offset", false, &offset) == 0 &&
             body_uint(r, body, "byte_size", true, &byte_size) == 0) {
        int rc = srv_shm_register(t, a->region, key->valuestring, offset, byte_size);
        if (rc)
            srv_respond_fs_error(r, rc);
        else
            srv_respond(r, 200, "application/json", "", 0, false);
    }
    cJSON_Delete(body);
}

void srv_shm_unregister_handle(srv_req_t *r, const srv_route_args_t *a)
{
    srv_shm_t *t = table_of(r);
    if (!t)
        return;
    srv_shm_unregister(t, a->region);
    srv_respond(r, 200, "application/json", "", 0, false);
}

/* CUDA shared memory, as Triton built without GPU support answers it (the
 * extension's switch is server.shared_memory too). Its unregister, which
 * Triton's shared memory clients call first to start clean, succeeds:
 * there is nothing to unregister. */
void srv_shm_cuda_status_handle(srv_req_t *r, const srv_route_args_t *a)
{
    if (!table_of(r))
        return;
    if (a->region) {
        srv_respond_error(r, 400, "CUDA shared memory region '%.127s' is not registered: "
                          "flatserve does not support CUDA shared memory", a->region);
        return;
    }
    srv_respond(r, 200, "application/json", "[]", 2, false);
}

void srv_shm_cuda_register_handle(srv_req_t *r, const srv_route_args_t *a)
{
    if (!table_of(r))
        return;
    srv_respond_error(r, 400, "cannot register CUDA shared memory region '%.127s': Triton's CUDA "
                      "shared memory extension is not supported by flatserve; register system "
                      "shared memory (/v2/systemsharedmemory) or send the tensors in the "
                      "request body", a->region);
}

void srv_shm_cuda_unregister_handle(srv_req_t *r, const srv_route_args_t *a)
{
    (void)a;
    if (table_of(r))
        srv_respond(r, 200, "application/json", "", 0, false);
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
        /* BYTES: the region holds serialized elements, decoded into a
         * block of the input's own (codec_bytes.h). */
        if (in->tensor.dtype == ENG_DT_STRING) {
            if ((rc = srv_bytes_decode(what, src, bytes, &in->tensor)))
                return rc;
            continue;
        }
        if (in->tensor.dtype == ENG_DT_BOOL)
            for (size_t k = 0; k < bytes; k++)
                if (src[k] > 1)
                    return fs_err(FS_EINVAL, "%s: BOOL byte %u at index %zu is neither 0 nor 1",
                                  what, src[k], k);
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

int srv_shm_infer_outputs(srv_req_t *r)
{
    const srv_infer_request_t *q = r->infer.request;
    const srv_shm_hold_t *held = r->infer.shm;
    if (!held)
        return 0;
    const eng_model_t *m = eng_served_model(r->infer.served);
    eng_request_t *e = &r->infer.ereq;
    /* Every size checked before any byte is written: a request that fails
     * leaves every region as it was. */
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
            if (pass == 1 && bytes && str)
                srv_bytes_write(t, held[q->n_inputs + p].addr);
            else if (pass == 1 && bytes)
                memcpy(held[q->n_inputs + p].addr, t->data, bytes);
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
