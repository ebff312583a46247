/* encoding.c -- gzip and deflate both ways over zlib, and the two headers
 * that choose them.
 *
 * Inflating is bounded: output is written into a buffer that is never let
 * grow past the caller's bound plus one byte, and one byte past the bound
 * ends the inflate with FS_ERANGE. So a body of a few KiB that inflates to
 * gigabytes (a "zip bomb") costs the bound and no more, and the server
 * answers 413 instead of running out of memory. A stream must end exactly
 * at the body's end: a cut-short stream and bytes after its end are both
 * refused, so nothing of a body is silently dropped.
 *
 * Responses are compressed at zlib's level 1: inference answers are mostly
 * numbers, which the higher levels shrink little more at several times
 * the cost. */
#include "server/encoding.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "common/error.h"

#define RESPONSE_LEVEL 1
/* Output grows at least by this much at a time while inflating. */
#define INFLATE_STEP ((size_t)64 << 10)

const char *srv_encoding_name(srv_encoding_t e)
{
    return e == SRV_ENC_GZIP ? "gzip" : e == SRV_ENC_DEFLATE ? "deflate" : "identity";
}

/* s[0..n) without blanks either side equals `word`, in any case. */
static bool token_is(const char *s, size_t n, const char *word)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

int srv_encoding_parse(const char *value, srv_encoding_t *out)
{
    *out = SRV_ENC_IDENTITY;
    size_t n = value ? strlen(value) : 0;
    if (n == 0 || token_is(value, n, "") || token_is(value, n, "identity"))
        return 0;
    if (token_is(value, n, "gzip") || token_is(value, n, "x-gzip")) {
        *out = SRV_ENC_GZIP;
        return 0;
    }
    if (token_is(value, n, "deflate")) {
        *out = SRV_ENC_DEFLATE;
        return 0;
    }
    return fs_err(FS_ENOTSUP, "Content-Encoding '%.64s' is not supported: send gzip, deflate or "
                  "identity", value);
}

srv_encoding_t srv_encoding_accepted(const char *value)
{
    /* The q of gzip, deflate and "*": -1 when not listed. */
    double q_gzip = -1, q_deflate = -1, q_any = -1;
    for (const char *p = value; p && *p;) {
        size_t item = strcspn(p, ",");
        size_t name = strcspn(p, ",;");
        double q = 1;
        const char *semi = p + name;
        if (name < item) {
            /* Parameters: only q matters ("gzip;q=0.5", "gzip; q=0"). */
            const char *qs = semi + 1;
            while (*qs == ' ' || *qs == '\t')
                qs++;
            if ((qs[0] == 'q' || qs[0] == 'Q') && qs[1] == '=')
                q = strtod(qs + 2, NULL);
        }
        if (token_is(p, name, "gzip") || token_is(p, name, "x-gzip"))
            q_gzip = q;
        else if (token_is(p, name, "deflate"))
            q_deflate = q;
        else if (token_is(p, name, "*"))
            q_any = q;
        p += item;
        if (*p == ',')
            p++;
    }
    if (q_gzip < 0)
        q_gzip = q_any;
    if (q_deflate < 0)
        q_deflate = q_any;
    return q_gzip > 0 ? SRV_ENC_GZIP : q_deflate > 0 ? SRV_ENC_DEFLATE : SRV_ENC_IDENTITY;
}

static int window_bits(srv_encoding_t enc)
{
    return enc == SRV_ENC_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
}

int srv_inflate(srv_encoding_t enc, const void *in, size_t len, size_t max, srv_buf_t *out)
{
    const char *name = srv_encoding_name(enc);
    if (enc == SRV_ENC_IDENTITY) {
        if (len > max)
            return fs_err(FS_ERANGE, "the body is larger than %zu bytes", max);
        return srv_buf_append(out, in, len);
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int zrc = inflateInit2(&zs, window_bits(enc));
    if (zrc != Z_OK)
        return fs_err(FS_ENOMEM, "cannot start inflating a %s body (zlib: %s)", name,
                      zs.msg ? zs.msg : zError(zrc));
    const unsigned char *p = in;
    size_t left = len, produced = 0;
    int rc = 0;
    for (;;) {
        if (zs.avail_in == 0 && left > 0) {
            size_t chunk = left < UINT_MAX ? left : UINT_MAX;
            zs.next_in = (unsigned char *)p;
            zs.avail_in = (uInt)chunk;
            p += chunk;
            left -= chunk;
        }
        /* One byte past the bound tells that it is passed. */
        size_t allowed = max - produced < SIZE_MAX ? max - produced + 1 : SIZE_MAX;
        if (out->cap == out->len) {
            size_t step = len * 2 > INFLATE_STEP ? len * 2 : INFLATE_STEP;
            if ((rc = srv_buf_reserve(out, step < allowed ? step : allowed)) != 0)
                break;
        }
        size_t room = out->cap - out->len;
        if (room > allowed)
            room = allowed;
        if (room > UINT_MAX)
            room = UINT_MAX;
        zs.next_out = (unsigned char *)out->data + out->len;
        zs.avail_out = (uInt)room;
        uInt in_before = zs.avail_in;
        zrc = inflate(&zs, Z_NO_FLUSH);
        size_t got = room - zs.avail_out;
        out->len += got;
        produced += got;
        if (produced > max) {
            rc = fs_err(FS_ERANGE, "the %s body inflates past %zu bytes", name, max);
            break;
        }
        if (zrc == Z_STREAM_END) {
            if (zs.avail_in > 0 || left > 0)
                rc = fs_err(FS_EPARSE, "the %s body has %zu bytes after the end of its stream",
                            name, (size_t)zs.avail_in + left);
            break;
        }
        if (zrc == Z_OK || (zrc == Z_BUF_ERROR && (got > 0 || zs.avail_in != in_before)))
            continue;
        if (zrc == Z_BUF_ERROR && zs.avail_in == 0 && left == 0)
            rc = fs_err(FS_EPARSE, "the %s body ends before its stream does (cut short after "
                        "%zu bytes)", name, len);
        else if (zrc == Z_MEM_ERROR)
            rc = fs_err(FS_ENOMEM, "out of host memory inflating a %s body", name);
        else if (zrc == Z_NEED_DICT)
            rc = fs_err(FS_EPARSE, "the %s body needs a preset dictionary", name);
        else
            rc = fs_err(FS_EPARSE, "the %s body is not valid %s data at byte %zu: %s", name,
                        enc == SRV_ENC_DEFLATE ? "zlib (RFC 1950)" : "gzip",
                        len - left - zs.avail_in, zs.msg ? zs.msg : zError(zrc));
        break;
    }
    inflateEnd(&zs);
    return rc;
}

/* Runs deflate with `flush` until it has taken all its input (and, with
 * Z_FINISH, ended the stream), growing *out as it needs. */
static int deflate_run(z_stream *zs, int flush, srv_buf_t *out)
{
    for (;;) {
        if (out->cap == out->len && srv_buf_reserve(out, INFLATE_STEP) != 0)
            return fs_err(FS_ENOMEM, "out of host memory compressing a response");
        size_t room = out->cap - out->len;
        if (room > UINT_MAX)
            room = UINT_MAX;
        zs->next_out = (unsigned char *)out->data + out->len;
        zs->avail_out = (uInt)room;
        int zrc = deflate(zs, flush);
        out->len += room - zs->avail_out;
        if (zrc == Z_STREAM_ERROR)
            return fs_err(FS_ENOMEM, "cannot compress a response (zlib stream error)");
        if (flush == Z_FINISH ? zrc == Z_STREAM_END : zs->avail_in == 0 && zs->avail_out > 0)
            return 0;
    }
}

int srv_deflate(srv_encoding_t enc, const struct iovec *iov, size_t n, srv_buf_t *out)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, RESPONSE_LEVEL, Z_DEFLATED, window_bits(enc), 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return fs_err(FS_ENOMEM, "cannot start compressing a response");
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += iov[i].iov_len;
    int rc = srv_buf_reserve(out, (size_t)deflateBound(&zs, (uLong)total));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const unsigned char *p = iov[i].iov_base;
        for (size_t left = iov[i].iov_len; rc == 0 && left > 0;) {
            size_t chunk = left < UINT_MAX ? left : UINT_MAX;
            zs.next_in = (unsigned char *)p;
            zs.avail_in = (uInt)chunk;
            rc = deflate_run(&zs, Z_NO_FLUSH, out);
            p += chunk;
            left -= chunk;
        }
    }
    if (rc == 0)
        rc = deflate_run(&zs, Z_FINISH, out);
    deflateEnd(&zs);
    return rc;
}
