/* zlib_test.h -- compressed request bodies for the tests, made by zlib
 * itself rather than by the server's encoding.c. Header-only. */
#ifndef FS_TESTS_SERVER_ZLIB_TEST_H
#define FS_TESTS_SERVER_ZLIB_TEST_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* `len` bytes compressed by zlib itself (not the server's code) at `level`:
 * gzip when `gzip`, else the zlib format (HTTP's "deflate"). Caller frees;
 * *out_len set. */
static inline unsigned char *http_zlib_compress(bool gzip, int level, const void *data, size_t len,
                                                size_t *out_len)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    cr_assert_eq(deflateInit2(&zs, level, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&zs, (uLong)len) + 64;
    unsigned char *out = malloc(cap);
    cr_assert_not_null(out);
    zs.next_in = (unsigned char *)data;
    zs.avail_in = (uInt)len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
    *out_len = cap - zs.avail_out;
    deflateEnd(&zs);
    return out;
}

#endif
