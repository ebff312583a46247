/* buf.c -- the growable byte buffer and the JSON string escaper.
 *
 * The buffer doubles its capacity (from 256 bytes) so n appends cost
 * O(log n) reallocations. Every failure to grow is returned and also
 * remembered in `failed`, so a writer that chains many appends (the
 * metrics) may check once at the end; nothing is ever silently dropped.
 *
 * The escaper writes what RFC 8259 requires: the quote, the backslash and
 * the control characters below 0x20 (the five with a short form in it, the
 * rest as \u00XX) escaped, and UTF-8 text. Valid UTF-8 passes through; a
 * byte that starts no valid sequence is written \ufffd, the replacement
 * character. The strings it writes are often a client's own bytes echoed
 * back (an id, an unknown input's name in an error), which cJSON never
 * checked, or a message that cut such a name at a byte count ("%.64s"), so
 * without this an answer could be JSON a strict reader refuses. */
#include "server/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int srv_buf_reserve(srv_buf_t *b, size_t extra)
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
    int rc = srv_buf_reserve(b, len);
    if (rc)
        return rc;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int srv_buf_puts(srv_buf_t *b, const char *s)
{
    return srv_buf_append(b, s, strlen(s));
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
        rc = srv_buf_reserve(b, (size_t)n + 1);
        if (rc == 0)
            vsnprintf(b->data + b->len, b->cap - b->len, fmt, again);
    }
    if (rc == 0)
        b->len += (size_t)n;
    va_end(again);
    va_end(ap);
    return rc;
}

/* The length of the valid UTF-8 sequence at c (1 to 4; 1 for ASCII), or 0
 * when c starts none (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF). */
static size_t utf8_sequence(const unsigned char *c, const unsigned char *end)
{
    size_t n = (size_t)(end - c);
    if (c[0] < 0x80)
        return 1;
    if (c[0] >= 0xc2 && c[0] <= 0xdf)
        return n >= 2 && (c[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c[0] >= 0xe0 && c[0] <= 0xef) {
        unsigned char lo = c[0] == 0xe0 ? 0xa0 : 0x80, hi = c[0] == 0xed ? 0x9f : 0xbf;
        return n >= 3 && c[1] >= lo && c[1] <= hi && (c[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c[0] >= 0xf0 && c[0] <= 0xf4) {
        unsigned char lo = c[0] == 0xf0 ? 0x90 : 0x80, hi = c[0] == 0xf4 ? 0x8f : 0xbf;
        return n >= 4 && c[1] >= lo && c[1] <= hi && (c[2] & 0xc0) == 0x80 &&
                       (c[3] & 0xc0) == 0x80
                   ? 4
                   : 0;
    }
    return 0;
}

int srv_buf_json_string(srv_buf_t *b, const char *s)
{
    return srv_buf_json_string_n(b, s, strlen(s));
}

int srv_buf_json_string_n(srv_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (n > (SIZE_MAX - 2) / 6) {
        b->failed = true;
        return fs_err(FS_ENOMEM, "buffer: a string of %zu bytes is too large to escape", n);
    }
    /* The worst case (every byte \u00XX) at once: one check, then plain
     * stores. */
    int rc = srv_buf_reserve(b, 6 * n + 2);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    *p++ = '"';
    for (const unsigned char *c = (const unsigned char *)s, *end = c + n; c < end; c++) {
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
            } else if (*c < 0x80) {
                *p++ = (char)*c;
            } else {
                /* A sequence of k bytes writes k, an invalid byte 6: the
                 * reservation's 6 per byte holds either way. */
                size_t k = utf8_sequence(c, end);
                if (k == 0) {
                    memcpy(p, "\\ufffd", 6);
                    p += 6;
                } else {
                    memcpy(p, c, k);
                    p += k;
                    c += k - 1;
                }
            }
        }
    }
    *p++ = '"';
    b->len = (size_t)(p - b->data);
    return 0;
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
