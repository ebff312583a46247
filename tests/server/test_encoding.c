/* test_encoding.c -- server/encoding.c: the Content-Encoding and
 * Accept-Encoding headers, and bounded inflating against zlib's own
 * streams, cut ones, corrupt ones and bombs. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/error.h"
#include "server/encoding.h"
#include "tests/server/zlib_test.h"

Test(srv_encoding, content_encoding_names_parse_in_any_case)
{
    static const struct {
        const char *value;
        srv_encoding_t want;
    } ok[] = {{NULL, SRV_ENC_IDENTITY},   {"", SRV_ENC_IDENTITY},     {"identity", SRV_ENC_IDENTITY},
              {"gzip", SRV_ENC_GZIP},     {"GZip", SRV_ENC_GZIP},     {" x-gzip ", SRV_ENC_GZIP},
              {"deflate", SRV_ENC_DEFLATE}, {"DEFLATE\t", SRV_ENC_DEFLATE}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        srv_encoding_t e = SRV_ENC_GZIP;
        cr_expect_eq(srv_encoding_parse(ok[i].value, &e), 0, "%s", ok[i].value);
        cr_expect_eq(e, ok[i].want, "%s", ok[i].value);
    }
    static const char *const bad[] = {"br", "gzip, deflate", "gzip;q=1", "zstd", "compress"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_encoding_t e;
        cr_expect_eq(srv_encoding_parse(bad[i], &e), FS_ENOTSUP, "%s", bad[i]);
        cr_expect(strstr(fs_errmsg(), bad[i]), "%s", fs_errmsg());
    }
}

Test(srv_encoding, accept_encoding_picks_gzip_then_deflate_by_q)
{
    static const struct {
        const char *value;
        srv_encoding_t want;
    } cases[] = {
        {NULL, SRV_ENC_IDENTITY},
        {"", SRV_ENC_IDENTITY},
        {"identity", SRV_ENC_IDENTITY},
        {"gzip", SRV_ENC_GZIP},
        {"deflate", SRV_ENC_DEFLATE},
        {"deflate, gzip", SRV_ENC_GZIP},
        {"gzip;q=0, deflate", SRV_ENC_DEFLATE},
        {"gzip; q=0.0, deflate;q=0.1", SRV_ENC_DEFLATE},
        {"GZIP;Q=0.5", SRV_ENC_GZIP},
        {"*", SRV_ENC_GZIP},
        {"*;q=0", SRV_ENC_IDENTITY},
        {"*, gzip;q=0", SRV_ENC_DEFLATE},
        {"br, zstd", SRV_ENC_IDENTITY},
        {"x-gzip", SRV_ENC_GZIP},
        {" , ,gzip", SRV_ENC_GZIP},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(srv_encoding_accepted(cases[i].value), cases[i].want, "'%s'",
                     cases[i].value ? cases[i].value : "(none)");
}

Test(srv_encoding, zlibs_streams_inflate_exactly_up_to_the_bound)
{
    char text[5000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + (i * 7) % 26);
    for (int gz = 0; gz < 2; gz++) {
        srv_encoding_t enc = gz ? SRV_ENC_GZIP : SRV_ENC_DEFLATE;
        size_t zlen;
        unsigned char *z = http_zlib_compress(gz, 9, text, sizeof text, &zlen);
        srv_buf_t out = {0};
        cr_assert_eq(srv_inflate(enc, z, zlen, sizeof text, &out), 0, "%s", fs_errmsg());
        cr_expect(out.len == sizeof text && memcmp(out.data, text, sizeof text) == 0);
        srv_buf_free(&out);
        cr_expect_eq(srv_inflate(enc, z, zlen, sizeof text - 1, &out), FS_ERANGE);
        cr_expect(strstr(fs_errmsg(), "inflates past 4999 bytes"), "%s", fs_errmsg());
        srv_buf_free(&out);
        free(z);
    }
    srv_buf_t out = {0};
    cr_expect_eq(srv_inflate(SRV_ENC_IDENTITY, text, 10, 10, &out), 0);
    cr_expect_eq(out.len, 10u);
    srv_buf_free(&out);
    cr_expect_eq(srv_inflate(SRV_ENC_IDENTITY, text, 11, 10, &out), FS_ERANGE);
    srv_buf_free(&out);
}

Test(srv_encoding, what_srv_deflate_writes_zlib_reads_back)
{
    char a[3000], b[20];
    memset(a, 'x', sizeof a);
    memcpy(b, "and the rest of it..", sizeof b);
    struct iovec iov[3] = {{a, sizeof a}, {NULL, 0}, {b, sizeof b}};
    for (int gz = 0; gz < 2; gz++) {
        srv_buf_t z = {0};
        cr_assert_eq(srv_deflate(gz ? SRV_ENC_GZIP : SRV_ENC_DEFLATE, iov, 3, &z), 0);
        cr_expect_lt(z.len, sizeof a);
        char back[4000];
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        cr_assert_eq(inflateInit2(&zs, gz ? 31 : 15), Z_OK, "the header is the one asked for");
        zs.next_in = (unsigned char *)z.data;
        zs.avail_in = (uInt)z.len;
        zs.next_out = (unsigned char *)back;
        zs.avail_out = sizeof back;
        cr_expect_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
        cr_expect_eq(sizeof back - zs.avail_out, sizeof a + sizeof b);
        cr_expect(memcmp(back, a, sizeof a) == 0 && memcmp(back + sizeof a, b, sizeof b) == 0);
        inflateEnd(&zs);
        srv_buf_free(&z);
    }
    srv_buf_t z = {0};
    cr_assert_eq(srv_deflate(SRV_ENC_GZIP, NULL, 0, &z), 0, "an empty body is a valid stream");
    srv_buf_t back = {0};
    cr_expect_eq(srv_inflate(SRV_ENC_GZIP, z.data, z.len, 10, &back), 0, "%s", fs_errmsg());
    cr_expect_eq(back.len, 0u);
    srv_buf_free(&back);
    srv_buf_free(&z);
}

Test(srv_encoding, a_bomb_costs_the_bound_and_no_more)
{
    size_t big = (size_t)256 << 20, zlen;
    char *zeros = calloc(1, big);
    cr_assert_not_null(zeros);
    unsigned char *z = http_zlib_compress(true, 9, zeros, big, &zlen);
    free(zeros);
    cr_expect_lt(zlen, (size_t)1 << 20, "256 MiB in %zu bytes", zlen);
    size_t max = (size_t)1 << 20;
    srv_buf_t out = {0};
    cr_expect_eq(srv_inflate(SRV_ENC_GZIP, z, zlen, max, &out), FS_ERANGE);
    cr_expect_leq(out.len, max + 1);
    cr_expect_leq(out.cap, 2 * (max + 1), "the buffer grew to %zu bytes", out.cap);
    srv_buf_free(&out);
    free(z);
}

Test(srv_encoding, broken_streams_are_refused_saying_how)
{
    const char *text = "{\"inputs\": []}";
    size_t zlen;
    unsigned char *z = http_zlib_compress(true, 9, text, strlen(text), &zlen);
    srv_buf_t out = {0};
    static const struct {
        size_t keep;
        const char *needle;
    } cuts[] = {{0, "ends before its stream does"}, {5, "ends before its stream does"}};
    for (size_t i = 0; i < 2; i++) {
        cr_expect_eq(srv_inflate(SRV_ENC_GZIP, z, cuts[i].keep ? cuts[i].keep : zlen - 4, 100,
                                 &out), FS_EPARSE);
        cr_expect(strstr(fs_errmsg(), cuts[i].needle), "%s", fs_errmsg());
        srv_buf_free(&out);
    }
    cr_expect_eq(srv_inflate(SRV_ENC_GZIP, z, 0, 100, &out), FS_EPARSE, "an empty body");
    srv_buf_free(&out);
    z[zlen - 8] ^= 0xff; /* the CRC */
    cr_expect_eq(srv_inflate(SRV_ENC_GZIP, z, zlen, 100, &out), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "incorrect data check"), "%s", fs_errmsg());
    srv_buf_free(&out);
    free(z);
    z = http_zlib_compress(false, 9, text, strlen(text), &zlen);
    unsigned char bad = z[0];
    z[0] = 0x79; /* not method 8 with a 32 KiB window, and the check fails */
    cr_expect_eq(srv_inflate(SRV_ENC_DEFLATE, z, zlen, 100, &out), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "is not valid zlib (RFC 1950) data at byte"), "%s",
              fs_errmsg());
    srv_buf_free(&out);
    z[0] = bad;
    cr_expect_eq(srv_inflate(SRV_ENC_DEFLATE, z, zlen, 100, &out), 0, "%s", fs_errmsg());
    cr_expect_eq(out.len, strlen(text));
    srv_buf_free(&out);
    free(z);
}
