/* codec_response.c -- the KServe v2 infer response, written by hand into a
 * growable buffer (no cJSON tree: every element of every output passes
 * through here): flat "data" in JSON, or Triton's binary extension with the
 * raw bytes after the JSON, in output order; an output written to a
 * shared memory region (infer.c) carries its region's parameters instead.
 *
 * Integers take a small formatter. Floats take the shortest text that
 * reads back as the same value (common/numtext.h): as a float for FP32,
 * FP16 and BF16 (a half's float reads back as that float, which converts
 * back to the same half exactly), as a double for FP64; integral values
 * below 1e9 print through the integer formatter ("100", not "1e+02": zeros,
 * class ids and counts are common outputs). Strings (the id, names) go
 * through srv_buf_json_string (buf.c), the server's one JSON escaper; so do
 * BYTES outputs' elements, whose binary form is Triton's serialized layout
 * (codec_bytes.c). */
#include "server/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/numtext.h"
#include "engine/half.h"
#include "server/codec_bytes.h"

/* Bytes an element can take in the response: a number's shortest text
 * (FS_NUMTEXT_MAX), "-9223372036854775808" (20), "\"-Infinity\"" (11),
 * plus a comma. */
#define ELEMENT_MAX (FS_NUMTEXT_MAX + 1)

/* Callers have reserved the room (srv_buf_reserve): these write into
 * b->data directly. */
static void buf_put(srv_buf_t *b, const char *s, size_t n)
{
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

#define BUF_PUT_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

/* ---- number formatting ---------------------------------------------------- */

static size_t fmt_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

static size_t fmt_i64(char *p, int64_t v)
{
    if (v >= 0)
        return fmt_u64(p, (uint64_t)v);
    *p = '-';
    return 1 + fmt_u64(p + 1, 0 - (uint64_t)v);
}

/* d (a float's value when !wide) in its shortest text, NaN and infinities
 * as JSON strings; integral values below 1e9 through fmt_i64. */
static size_t fmt_real(char *p, double d, bool wide)
{
    if (isnan(d)) {
        memcpy(p, "\"NaN\"", 5);
        return 5;
    }
    if (isinf(d)) {
        if (d > 0) {
            memcpy(p, "\"Infinity\"", 10);
            return 10;
        }
        memcpy(p, "\"-Infinity\"", 11);
        return 11;
    }
    if (fabs(d) < 1e9 && d == (double)(int64_t)d && !(d == 0 && signbit(d)))
        return fmt_i64(p, (int64_t)d);
    return wide ? fs_double_format(p, d) : fs_float_format(p, (float)d);
}

/* Element i of data (of dtype dt, one the protocol names) as JSON. */
static size_t fmt_element(char *p, eng_dtype_t dt, const void *data, size_t i)
{
    switch (dt) {
    case ENG_DT_BOOL:
        if (((const uint8_t *)data)[i]) {
            memcpy(p, "true", 4);
            return 4;
        }
        memcpy(p, "false", 5);
        return 5;
    case ENG_DT_UINT8: return fmt_u64(p, ((const uint8_t *)data)[i]);
    case ENG_DT_UINT16: return fmt_u64(p, ((const uint16_t *)data)[i]);
    case ENG_DT_UINT32: return fmt_u64(p, ((const uint32_t *)data)[i]);
    case ENG_DT_UINT64: return fmt_u64(p, ((const uint64_t *)data)[i]);
    case ENG_DT_INT8: return fmt_i64(p, ((const int8_t *)data)[i]);
    case ENG_DT_INT16: return fmt_i64(p, ((const int16_t *)data)[i]);
    case ENG_DT_INT32: return fmt_i64(p, ((const int32_t *)data)[i]);
    case ENG_DT_INT64: return fmt_i64(p, ((const int64_t *)data)[i]);
    case ENG_DT_FLOAT16: return fmt_real(p, eng_half_to_float(((const uint16_t *)data)[i]), false);
    case ENG_DT_BFLOAT16: return fmt_real(p, eng_bf16_to_float(((const uint16_t *)data)[i]), false);
    case ENG_DT_FLOAT: return fmt_real(p, ((const float *)data)[i], false);
    case ENG_DT_DOUBLE: return fmt_real(p, ((const double *)data)[i], true);
    default: return 0; /* callers pass only dtypes with a protocol name */
    }
}

/* ---- the response --------------------------------------------------------- */

/* {"name":..,"datatype":..,"shape":[..], then "data", the binary size, or
 * (sm: the output went to a shared memory region) the region's parameters
 * with the bytes written as shared_memory_byte_size, and no data. */
static int output_write(srv_buf_t *b, const char *name, const eng_tensor_t *t, bool binary,
                        const srv_infer_shm_t *sm)
{
    const char *dt = srv_datatype_name(t->dtype);
    if (!dt)
        return fs_err(FS_EINVAL, "output '%s' is %s, which the protocol has no datatype for", name,
                      eng_dtype_name(t->dtype));
    size_t numel = (size_t)eng_shape_numel(&t->shape);
    if (numel > 0 && !t->data)
        return fs_err(FS_EINVAL, "output '%s' has no data", name);
    int rc;
    /* Appends rather than srv_buf_printf, here and for the version: a
     * printf costs as much as the rest of a small answer. */
    if ((rc = srv_buf_puts(b, "{\"name\":")) || (rc = srv_buf_json_string(b, name)) ||
        (rc = srv_buf_puts(b, ",\"datatype\":\"")) || (rc = srv_buf_puts(b, dt)) ||
        (rc = srv_buf_puts(b, "\",\"shape\":[")) ||
        (rc = srv_buf_reserve(b, (size_t)ENG_MAX_RANK * ELEMENT_MAX + 64)))
        return rc;
    for (int d = 0; d < t->shape.rank; d++) {
        if (d)
            BUF_PUT_LIT(b, ",");
        b->len += fmt_i64(b->data + b->len, t->shape.dims[d]);
    }
    /* BYTES: its serialized size (codec_bytes.h), as Triton counts it. */
    bool str = t->dtype == ENG_DT_STRING;
    size_t bytes = str ? srv_bytes_size(t) : eng_tensor_bytes(t);
    if (str && bytes == SIZE_MAX && (binary || (sm && sm->region)))
        return fs_err(FS_EINVAL, "output '%s': a BYTES element is longer than the 4-byte length "
                      "of the binary format holds", name);
    if (sm && sm->region)
        return (rc = srv_buf_puts(b, "],\"parameters\":{\"shared_memory_region\":")) ||
                       (rc = srv_buf_json_string(b, sm->region))
                   ? rc
                   : srv_buf_printf(b, ",\"shared_memory_offset\":%llu,"
                                    "\"shared_memory_byte_size\":%zu}}",
                                    (unsigned long long)sm->offset, bytes);
    if (binary)
        return srv_buf_printf(b, "],\"parameters\":{\"binary_data_size\":%zu}}", bytes);
    BUF_PUT_LIT(b, "],\"data\":[");
    if (str)
        return (rc = srv_bytes_json_write(b, t)) ? rc : srv_buf_puts(b, "]}");
    for (size_t i = 0; i < numel; i++) {
        if ((rc = srv_buf_reserve(b, ELEMENT_MAX)))
            return rc;
        if (i)
            BUF_PUT_LIT(b, ",");
        b->len += fmt_element(b->data + b->len, t->dtype, t->data, i);
    }
    return srv_buf_puts(b, "]}");
}

/* Output p of the response: its model index and whether it goes binary. */
static int response_pick(const eng_model_t *m, const srv_infer_request_t *r, size_t p, size_t *k,
                         bool *binary)
{
    if (r->n_outputs == 0) {
        *k = p;
        *binary = r->binary_output;
        return 0;
    }
    long idx = eng_io_output_find(m, r->outputs[p].name);
    if (idx < 0)
        return fs_err(FS_EINVAL, "requested output '%s' is not an output of the model",
                      r->outputs[p].name);
    *k = (size_t)idx;
    *binary = r->outputs[p].binary;
    return 0;
}

/* The JSON part; the binary part is appended by the caller. */
static int response_json(const eng_model_t *m, const char *model_name, int64_t version,
                         const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                         srv_buf_t *out)
{
    int rc;
    if ((rc = srv_buf_puts(out, "{")))
        return rc;
    if (r->id && ((rc = srv_buf_puts(out, "\"id\":")) || (rc = srv_buf_json_string(out, r->id)) ||
                  (rc = srv_buf_puts(out, ","))))
        return rc;
    if ((rc = srv_buf_puts(out, "\"model_name\":")) || (rc = srv_buf_json_string(out, model_name)))
        return rc;
    if (version >= 0) {
        if ((rc = srv_buf_puts(out, ",\"model_version\":\"")) ||
            (rc = srv_buf_reserve(out, ELEMENT_MAX + 1)))
            return rc;
        out->len += fmt_i64(out->data + out->len, version);
        BUF_PUT_LIT(out, "\"");
    }
    if ((rc = srv_buf_puts(out, ",\"outputs\":[")))
        return rc;
    size_t count = r->n_outputs ? r->n_outputs : eng_model_n_outputs(m);
    for (size_t p = 0; p < count; p++) {
        size_t k = 0;
        bool binary = false;
        eng_io_info_t info;
        if ((rc = response_pick(m, r, p, &k, &binary)) || (rc = eng_model_output(m, k, &info)))
            return rc;
        if (!outputs[k])
            return fs_err(FS_EINVAL, "output '%s' was not computed", info.name);
        if ((p && (rc = srv_buf_puts(out, ","))) ||
            (rc = output_write(out, info.name, outputs[k], binary,
                               r->n_outputs ? &r->outputs[p].shm : NULL)))
            return rc;
    }
    return srv_buf_puts(out, "]}");
}

/* `out` is written from its start: its length is reset and its capacity
 * kept, so one buffer serves request after request; on error it is left
 * empty. model_name NULL: the model's own name; version < 0: no
 * "model_version". */
static int response_encode(const eng_model_t *m, const char *model_name, int64_t version,
                           const srv_infer_request_t *r, eng_tensor_t *const *outputs, size_t n,
                           bool binary_too, srv_buf_t *out, size_t *json_len)
{
    out->len = 0;
    if (n != eng_model_n_outputs(m))
        return fs_err(FS_EINVAL, "%zu outputs given for a model with %zu", n,
                      eng_model_n_outputs(m));
    int rc = response_json(m, model_name ? model_name : eng_model_name(m), version, r, outputs,
                           out);
    if (rc)
        goto fail;
    *json_len = out->len;
    size_t count = binary_too ? (r->n_outputs ? r->n_outputs : n) : 0;
    for (size_t p = 0; p < count; p++) {
        size_t k = 0;
        bool binary = false;
        if ((rc = response_pick(m, r, p, &k, &binary)))
            goto fail;
        if (!binary)
            continue;
        const eng_tensor_t *t = outputs[k];
        if (t->dtype == ENG_DT_STRING) {
            /* output_write checked that it has a serialized size. */
            size_t bytes = srv_bytes_size(t);
            if ((rc = srv_buf_reserve(out, bytes)))
                goto fail;
            srv_bytes_write(t, (uint8_t *)out->data + out->len);
            out->len += bytes;
        } else if ((rc = srv_buf_append(out, t->data, eng_tensor_bytes(t)))) {
            goto fail;
        }
    }
    return 0;
fail:
    out->len = 0;
    return rc;
}

int srv_infer_response_encode(const eng_model_t *m, const char *model_name, int64_t version,
                              const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                              size_t n, srv_buf_t *out, size_t *json_len)
{
    return response_encode(m, model_name, version, r, outputs, n, true, out, json_len);
}

int srv_infer_response_encode_json(const eng_model_t *m, const char *model_name, int64_t version,
                                   const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                                   size_t n, srv_buf_t *out)
{
    size_t json_len = 0;
    return response_encode(m, model_name, version, r, outputs, n, false, out, &json_len);
}

size_t srv_infer_response_binary(const eng_model_t *m, const srv_infer_request_t *r, size_t n,
                                 size_t *idx)
{
    size_t count = r->n_outputs ? r->n_outputs : n, found = 0;
    for (size_t p = 0; p < count; p++) {
        size_t k = 0;
        bool binary = false;
        if (response_pick(m, r, p, &k, &binary) == 0 && binary) {
            if (idx)
                idx[found] = k;
            found++;
        }
    }
    return found;
}
