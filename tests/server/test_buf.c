/* test_buf.c -- tests of server/buf.c: the growable buffer and the JSON
 * string escaper every hand-written JSON of the server goes through. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/buf.h"

/* s escaped, as a NUL-terminated string the caller frees. */
static char *escaped_n(const char *s, size_t n)
{
    srv_buf_t b = {0};
    cr_assert_eq(srv_buf_json_string_n(&b, s, n), 0);
    cr_assert_not(b.failed);
    cr_assert_eq(srv_buf_append(&b, "", 1), 0);
    return b.data;
}

static char *escaped(const char *s)
{
    return escaped_n(s, strlen(s));
}

/* ---- the buffer ----------------------------------------------------------- */

Test(srv_buf, grows_geometrically_and_keeps_its_bytes)
{
    srv_buf_t b = {0};
    cr_expect_eq(srv_buf_append(&b, NULL, 0), 0);
    size_t grows = 0, cap = 0;
    for (int i = 0; i < 100000; i++) {
        char c = (char)('a' + i % 26);
        cr_assert_eq(srv_buf_append(&b, &c, 1), 0);
        if (b.cap != cap) {
            grows++;
            cap = b.cap;
        }
    }
    cr_expect_eq(b.len, 100000);
    cr_expect_leq(grows, 12, "%zu reallocations for 100000 bytes", grows);
    cr_expect_eq(b.data[99999], (char)('a' + 99999 % 26));
    char big[3000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    srv_buf_t p = {0};
    cr_expect_eq(srv_buf_printf(&p, "<%s|%d>", big, 42), 0);
    cr_expect_eq(p.len, 2999 + 5);
    cr_expect_eq(memcmp(p.data + 3000, "|42>", 4), 0);
    cr_expect_eq(srv_buf_printf(&p, "%s", "!"), 0);
    cr_expect_eq(p.data[p.len - 1], '!');
    srv_buf_free(&b);
    srv_buf_free(&p);
    cr_expect_null(p.data);
    cr_expect_eq(p.len + p.cap, 0);
    srv_buf_free(NULL);
}

Test(srv_buf, puts_appends_without_the_nul)
{
    srv_buf_t b = {0};
    cr_expect_eq(srv_buf_puts(&b, "ab"), 0);
    cr_expect_eq(srv_buf_puts(&b, ""), 0);
    cr_expect_eq(srv_buf_puts(&b, "c"), 0);
    cr_expect_eq(b.len, 3);
    cr_expect_eq(memcmp(b.data, "abc", 3), 0);
    srv_buf_free(&b);
}

Test(srv_buf, a_growth_past_the_address_space_is_reported_and_remembered)
{
    srv_buf_t b = {0};
    cr_assert_eq(srv_buf_puts(&b, "keep"), 0);
    cr_expect_eq(srv_buf_reserve(&b, SIZE_MAX - 1), FS_ENOMEM);
    cr_expect(b.failed);
    cr_expect_eq(b.len, 4, "the buffer keeps what it had");
    cr_expect_eq(memcmp(b.data, "keep", 4), 0);
    srv_buf_free(&b);
    cr_expect_not(b.failed, "free clears the failure");
}

/* ---- the escaper ---------------------------------------------------------- */

Test(srv_buf, json_string_escapes_quote_and_backslash)
{
    char *s = escaped("a\"b\\c");
    cr_expect_str_eq(s, "\"a\\\"b\\\\c\"");
    free(s);
    s = escaped("");
    cr_expect_str_eq(s, "\"\"");
    free(s);
}

Test(srv_buf, json_string_writes_newline_and_the_other_short_escapes)
{
    char *s = escaped("1\n2\r3\t4\b5\f6");
    cr_expect_str_eq(s, "\"1\\n2\\r3\\t4\\b5\\f6\"");
    free(s);
}

Test(srv_buf, json_string_writes_other_control_characters_as_u00xx)
{
    char *s = escaped("\x01\x1f\x0b\x7f/");
    cr_expect_str_eq(s, "\"\\u0001\\u001f\\u000b\x7f/\"", "DEL and '/' need no escape: %s", s);
    free(s);
}

Test(srv_buf, json_string_passes_utf8_through)
{
    const char *in = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
    char *s = escaped(in);
    char want[64];
    snprintf(want, sizeof want, "\"%s\"", in);
    cr_expect_str_eq(s, want);
    free(s);
}

Test(srv_buf, json_string_n_escapes_embedded_nuls)
{
    char *s = escaped_n("a\0b", 3);
    cr_expect_str_eq(s, "\"a\\u0000b\"");
    free(s);
}

Test(srv_buf, json_string_of_every_ascii_byte_reads_back_the_same)
{
    char in[128];
    for (int i = 1; i < 128; i++)
        in[i - 1] = (char)i;
    in[127] = '\0';
    char *s = escaped(in);
    cJSON *doc = cJSON_Parse(s);
    cr_assert(cJSON_IsString(doc), "%s does not parse as a JSON string", s);
    cr_expect_str_eq(doc->valuestring, in);
    cJSON_Delete(doc);
    free(s);
}

Test(srv_buf, json_string_writes_a_byte_that_starts_no_utf8_sequence_as_ufffd)
{
    for (int i = 0x80; i < 0x100; i++) {
        char in[2] = {(char)i, '\0'};
        char *s = escaped(in);
        cr_expect_str_eq(s, "\"\\ufffd\"", "byte 0x%02x alone: %s", i, s);
        free(s);
    }
    /* Overlong, a surrogate, past U+10FFFF, cut short at the end: each
     * bad byte once; the valid sequences around them pass. */
    char *s = escaped("a\xc0\x80" "b\xed\xa0\x80\xf4\x90\x80\x80\xc3\xa9\xe2\x82");
    cr_expect_str_eq(s, "\"a\\ufffd\\ufffdb\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd"
                        "\xc3\xa9\\ufffd\\ufffd\"", "%s", s);
    free(s);
}

Test(srv_buf, json_string_appends_after_what_the_buffer_holds)
{
    srv_buf_t b = {0};
    cr_assert_eq(srv_buf_puts(&b, "{\"k\":"), 0);
    cr_assert_eq(srv_buf_json_string(&b, "v\n"), 0);
    cr_assert_eq(srv_buf_puts(&b, "}"), 0);
    cr_expect_eq(b.len, strlen("{\"k\":\"v\\n\"}"));
    cr_expect_eq(memcmp(b.data, "{\"k\":\"v\\n\"}", b.len), 0);
    srv_buf_free(&b);
}

Test(srv_buf, json_string_out_of_memory_is_reported_and_appends_nothing)
{
    srv_buf_t b = {0};
    cr_assert_eq(srv_buf_puts(&b, "x"), 0);
    /* A length whose worst case cannot be held: refused before a byte of
     * the string is read. */
    cr_expect_eq(srv_buf_json_string_n(&b, "", SIZE_MAX / 4), FS_ENOMEM);
    cr_expect(b.failed);
    cr_expect_eq(b.len, 1);
    cr_expect_eq(srv_buf_json_string_n(&b, "", (SIZE_MAX - 2) / 6 - 1), FS_ENOMEM,
                 "a reservation past the address space");
    cr_expect_eq(b.len, 1);
    srv_buf_free(&b);
}
