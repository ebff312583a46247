/* codec_bytes.c -- BYTES tensors on the wire (see codec_bytes.h). */
#include "server/codec_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* One element's length prefix (Triton: little-endian uint32). */
#define LEN_BYTES 4

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* numel records plus `tail` bytes in one block into *out. 0, or
 * FS_EINVAL (too many) / FS_ENOMEM naming `label`. */
static int records_alloc(const char *label, size_t numel, size_t tail, eng_string_t **out)
{
    if (numel > (SIZE_MAX - tail) / sizeof(eng_string_t))
        return fs_err(FS_EINVAL, "%s: %zu BYTES elements are too many", label, numel);
    size_t bytes = numel * sizeof(eng_string_t) + tail;
    if (!(*out = malloc(bytes ? bytes : 1)))
        return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes for BYTES data", label, bytes);
    return 0;
}

int srv_bytes_decode(const char *label, const uint8_t *src, size_t len, eng_tensor_t *t)
{
    size_t numel = (size_t)eng_shape_numel(&t->shape);
    /* First pass: check the layout and count the long strings' bytes. */
    size_t at = 0, tail = 0;
    for (size_t i = 0; i < numel; i++) {
        if (len - at < LEN_BYTES)
            return fs_err(FS_EINVAL, "%s: BYTES data ends after %zu of %zu elements (%zu bytes; "
                          "each element is a 4-byte length and its bytes)", label, i, numel,
                          len);
        uint32_t n = get_le32(src + at);
        at += LEN_BYTES;
        if (len - at < n)
            return fs_err(FS_EINVAL, "%s: BYTES element %zu has length %u, past the end of the "
                          "data (%zu bytes left)", label, i, n, len - at);
        at += n;
        if (n > ENG_STRING_INLINE)
            tail += n;
    }
    if (at != len)
        return fs_err(FS_EINVAL, "%s: BYTES data has %zu bytes after its %zu elements (shape "
                      "and data disagree)", label, len - at, numel);
    eng_string_t *r;
    int rc = records_alloc(label, numel, tail, &r);
    if (rc)
        return rc;
    char *tp = (char *)(r + numel);
    at = 0;
    for (size_t i = 0; i < numel; i++) {
        uint32_t n = get_le32(src + at);
        at += LEN_BYTES;
        memset(&r[i], 0, sizeof r[i]);
        if (n > ENG_STRING_INLINE) {
            memcpy(tp, src + at, n);
            eng_string_set(&r[i], tp, n);
            tp += n;
        } else {
            eng_string_set(&r[i], (const char *)src + at, n);
        }
        at += n;
    }
    t->data = r;
    return 0;
}

/* Depth first over the (checked) array: the leaves' total long bytes, or
 * the first non-string leaf. */
typedef struct json_walk {
    const char *label;
    size_t i, tail;
    eng_string_t *r;      /* NULL on the counting pass */
    char *tp;
    bool nul_mapped;      /* SRV_BYTES_NUL_STANDIN stands for NUL */
} json_walk_t;

/* n bytes of src to dst, the NUL stand-in back to NUL when mapped. */
static void string_copy(char *dst, const char *src, size_t n, bool nul_mapped)
{
    memcpy(dst, src, n);
    for (size_t i = 0; nul_mapped && i < n; i++)
        if ((unsigned char)dst[i] == SRV_BYTES_NUL_STANDIN)
            dst[i] = '\0';
}

static int json_walk(json_walk_t *w, const cJSON *v)
{
    if (cJSON_IsArray(v)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, v)
        {
            int rc = json_walk(w, c);
            if (rc)
                return rc;
        }
        return 0;
    }
    size_t i = w->i++;
    if (!cJSON_IsString(v))
        return fs_err(FS_EINVAL, "%s: BYTES element %zu is %s, not a string", w->label, i,
                      cJSON_IsNumber(v)  ? "a number"
                      : cJSON_IsBool(v)  ? "a boolean"
                      : cJSON_IsNull(v)  ? "null"
                                         : "an object");
    size_t n = strlen(v->valuestring);
    if (!w->r) {
        if (n > ENG_STRING_INLINE)
            w->tail += n;
        return 0;
    }
    memset(&w->r[i], 0, sizeof w->r[i]);
    w->r[i].len = n;
    if (n > ENG_STRING_INLINE) {
        string_copy(w->tp, v->valuestring, n, w->nul_mapped);
        w->r[i].u.ptr = w->tp;
        w->tp += n;
    } else {
        string_copy(w->r[i].u.bytes, v->valuestring, n, w->nul_mapped);
    }
    return 0;
}

int srv_bytes_json_decode(const char *label, const cJSON *data, size_t numel, bool nul_mapped,
                          eng_tensor_t *t)
{
    json_walk_t w = {.label = label};
    int rc = json_walk(&w, data);
    if (rc)
        return rc;
    if (w.i != numel)
        return fs_err(FS_EINVAL, "%s: \"data\" has %zu elements, the shape %zu", label, w.i,
                      numel);
    eng_string_t *r;
    if ((rc = records_alloc(label, numel, w.tail, &r)))
        return rc;
    w = (json_walk_t){.label = label, .r = r, .tp = (char *)(r + numel), .nul_mapped = nul_mapped};
    json_walk(&w, data); /* cannot fail: the first pass saw every leaf */
    t->data = r;
    return 0;
}

size_t srv_bytes_size(const eng_tensor_t *t)
{
    size_t numel = (size_t)eng_shape_numel(&t->shape), total = 0;
    const eng_string_t *s = t->data;
    for (size_t i = 0; i < numel; i++) {
        /* A length past the 4-byte prefix has no serialized form. */
        if (s[i].len > UINT32_MAX || s[i].len > SIZE_MAX - LEN_BYTES - total)
            return SIZE_MAX;
        total += LEN_BYTES + (size_t)s[i].len;
    }
    return total;
}

void srv_bytes_write(const eng_tensor_t *t, uint8_t *dst)
{
    size_t numel = (size_t)eng_shape_numel(&t->shape);
    const eng_string_t *s = t->data;
    for (size_t i = 0; i < numel; i++) {
        uint32_t n = (uint32_t)s[i].len;
        dst[0] = (uint8_t)n;
        dst[1] = (uint8_t)(n >> 8);
        dst[2] = (uint8_t)(n >> 16);
        dst[3] = (uint8_t)(n >> 24);
        memcpy(dst + LEN_BYTES, eng_string_data(&s[i]), n);
        dst += LEN_BYTES + n;
    }
}

int srv_bytes_json_write(srv_buf_t *b, const eng_tensor_t *t)
{
    size_t numel = (size_t)eng_shape_numel(&t->shape);
    const eng_string_t *s = t->data;
    for (size_t i = 0; i < numel; i++) {
        int rc = i ? srv_buf_puts(b, ",") : 0;
        if (rc || (rc = srv_buf_json_string_n(b, eng_string_data(&s[i]), (size_t)s[i].len)))
            return rc;
    }
    return 0;
}

int srv_bytes_serialize(const char *name, const eng_tensor_t *t, uint8_t **out, size_t *len)
{
    size_t n = srv_bytes_size(t);
    if (n == SIZE_MAX)
        return fs_err(FS_EINVAL, "output '%s': a BYTES element is longer than the 4-byte length "
                      "of the binary format holds", name);
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        return fs_err(FS_ENOMEM, "output '%s': cannot allocate %zu bytes for its BYTES data",
                      name, n);
    srv_bytes_write(t, p);
    *out = p;
    *len = n;
    return 0;
}
