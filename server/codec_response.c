/* codec_response.c -- the KServe v2 infer response, written by hand into a
 * growable buffer (no cJSON tree: every element of every output passes
 * through here): flat "data" in JSON, or Triton's binary extension with the
 * raw bytes after the JSON, in output order.
 *
 * Integers take a small formatter. Floats take %.9g (FP32, FP16, BF16) or
 * %.17g (FP64), enough digits to round-trip, except integral values below
 * 1e9, which print the same through the integer formatter (zeros, class
 * ids and counts are common outputs). Numbers are written in the C
 * locale's format (the server never calls setlocale). Strings (the id,
 * names) are escaped as JSON requires; bytes >= 0x80 pass through as they
 * came. */
#include "server/codec.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/half.h"

/* Bytes an element can take in the response: "-2.2250738585072014e-308"
 * (24), "-9223372036854775808" (20), "\"-Infinity\"" (11), plus a comma. */
#define ELEMENT_MAX 32

/* ---- the buffer ----------------------------------------------------------- */

/* Room for `extra` more bytes, growing the capacity by doubling. */
static int buf_reserve(srv_buf_t *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return fs_err(FS_ENOMEM, "buffer: %zu more bytes after %zu is too large", extra, b->len);
    }
    size_t need = b->len + extra, cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return fs_err(FS_ENOMEM, "buffer: cannot grow to %zu bytes", cap);
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int srv_buf_append(srv_buf_t *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    int rc = buf_reserve(b, len);
    if (rc)
        return rc;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int srv_buf_printf(srv_buf_t *b, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    size_t room = b->data ? b->cap - b->len : 0;
    int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
    int rc = 0;
    if (n < 0) {
        rc = fs_err(FS_EINVAL, "buffer: the format \"%.32s\" cannot be written", fmt);
    } else if ((size_t)n >= room) {
        rc = buf_reserve(b, (size_t)n + 1);
        if (rc == 0)
            vsnprintf(b->data + b->len, b->cap - b->len, fmt, again);
    }
    if (rc == 0)
        b->len += (size_t)n;
    va_end(again);
    va_end(ap);
    return rc;
}

void srv_buf_free(srv_buf_t *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

/* Callers have reserved the room: these write into b->data directly. */
static void buf_put(srv_buf_t *b, const char *s, size_t n)
{
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

#define BUF_PUT_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

static int buf_literal(srv_buf_t *b, const char *s)
{
    return srv_buf_append(b, s, strlen(s));
}

/* s as a JSON string, quotes included. */
static int buf_json_string(srv_buf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s);
    if (n > (SIZE_MAX - 2) / 6)
        return fs_err(FS_ENOMEM, "buffer: a string of %zu bytes is too large to escape", n);
    int rc = buf_reserve(b, 6 * n + 2);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    *p++ = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': *p++ = '\\'; *p++ = '"'; break;
        case '\\': *p++ = '\\'; *p++ = '\\'; break;
        case '\n': *p++ = '\\'; *p++ = 'n'; break;
        case '\r': *p++ = '\\'; *p++ = 'r'; break;
        case '\t': *p++ = '\\'; *p++ = 't'; break;
        case '\b': *p++ = '\\'; *p++ = 'b'; break;
        case '\f': *p++ = '\\'; *p++ = 'f'; break;
        default:
            if (*c < 0x20) {
                memcpy(p, "\\u00", 4);
                p[4] = hex[*c >> 4];
                p[5] = hex[*c & 15];
                p += 6;
            } else {
                *p++ = (char)*c;
            }
        }
    }
    *p++ = '"';
    b->len = (size_t)(p - b->data);
    return 0;
}

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

/* d with `digits` significant digits (%.*g), NaN and infinities as JSON
 * strings; integral values below 1e9 through fmt_i64 (the same text). */
static size_t fmt_real(char *p, double d, int digits)
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
    return (size_t)snprintf(p, ELEMENT_MAX, "%.*g", digits, d);
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
    case ENG_DT_FLOAT16: return fmt_real(p, eng_half_to_float(((const uint16_t *)data)[i]), 9);
    case ENG_DT_BFLOAT16: return fmt_real(p, eng_bf16_to_float(((const uint16_t *)data)[i]), 9);
    case ENG_DT_FLOAT: return fmt_real(p, ((const float *)data)[i], 9);
    case ENG_DT_DOUBLE: return fmt_real(p, ((const double *)data)[i], 17);
    default: return 0; /* callers pass only dtypes with a protocol name */
    }
}

/* ---- the response --------------------------------------------------------- */

/* {"name":..,"datatype":..,"shape":[..], then "data" or the binary size}. */
static int output_write(srv_buf_t *b, const char *name, const eng_tensor_t *t, bool binary)
{
    const char *dt = srv_datatype_name(t->dtype);
    if (!dt)
        return fs_err(FS_EINVAL, "output '%s' is %s, which the protocol has no datatype for", name,
                      eng_dtype_name(t->dtype));
    size_t numel = (size_t)eng_shape_numel(&t->shape);
    if (numel > 0 && !t->data)
        return fs_err(FS_EINVAL, "output '%s' has no data", name);
    int rc;
    if ((rc = buf_literal(b, "{\"name\":")) || (rc = buf_json_string(b, name)) ||
        (rc = srv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", dt)) ||
        (rc = buf_reserve(b, (size_t)ENG_MAX_RANK * ELEMENT_MAX + 64)))
        return rc;
    for (int d = 0; d < t->shape.rank; d++) {
        if (d)
            BUF_PUT_LIT(b, ",");
        b->len += fmt_i64(b->data + b->len, t->shape.dims[d]);
    }
    if (binary)
        return srv_buf_printf(b, "],\"parameters\":{\"binary_data_size\":%zu}}",
                              eng_tensor_bytes(t));
    BUF_PUT_LIT(b, "],\"data\":[");
    for (size_t i = 0; i < numel; i++) {
        if ((rc = buf_reserve(b, ELEMENT_MAX)))
            return rc;
        if (i)
            BUF_PUT_LIT(b, ",");
        b->len += fmt_element(b->data + b->len, t->dtype, t->data, i);
    }
    return buf_literal(b, "]}");
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
    if ((rc = buf_literal(out, "{")))
        return rc;
    if (r->id && ((rc = buf_literal(out, "\"id\":")) || (rc = buf_json_string(out, r->id)) ||
                  (rc = buf_literal(out, ","))))
        return rc;
    if ((rc = buf_literal(out, "\"model_name\":")) || (rc = buf_json_string(out, model_name)))
        return rc;
    if (version >= 0 && (rc = srv_buf_printf(out, ",\"model_version\":\"%" PRId64 "\"", version)))
        return rc;
    if ((rc = buf_literal(out, ",\"outputs\":[")))
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
        if ((p && (rc = buf_literal(out, ","))) ||
            (rc = output_write(out, info.name, outputs[k], binary)))
            return rc;
    }
    return buf_literal(out, "]}");
}

/* `out` is written from its start: its length is reset and its capacity
 * kept, so one buffer serves request after request; on error it is left
 * empty. model_name NULL: the model's own name; version < 0: no
 * "model_version". */
int srv_infer_response_encode(const eng_model_t *m, const char *model_name, int64_t version,
                              const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                              size_t n, srv_buf_t *out, size_t *json_len)
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
    size_t count = r->n_outputs ? r->n_outputs : n;
    for (size_t p = 0; p < count; p++) {
        size_t k = 0;
        bool binary = false;
        if ((rc = response_pick(m, r, p, &k, &binary)))
            goto fail;
        if (binary && (rc = srv_buf_append(out, outputs[k]->data, eng_tensor_bytes(outputs[k]))))
            goto fail;
    }
    return 0;
fail:
    out->len = 0;
    return rc;
}
