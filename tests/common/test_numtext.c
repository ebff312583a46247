/* test_numtext.c -- tests for common/numtext.cc: shortest text that reads
 * back exactly, and exact reading. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/numtext.h"

/* f's text, NUL-terminated, in buf (FS_NUMTEXT_MAX + 1 bytes). */
static const char *float_text(float f, char *buf)
{
    size_t n = fs_float_format(buf, f);
    cr_assert_leq(n, FS_NUMTEXT_MAX);
    buf[n] = '\0';
    return buf;
}

static const char *double_text(double d, char *buf)
{
    size_t n = fs_double_format(buf, d);
    cr_assert_leq(n, FS_NUMTEXT_MAX);
    buf[n] = '\0';
    return buf;
}

Test(common_numtext, float_text_is_the_shortest_that_reads_back)
{
    char buf[FS_NUMTEXT_MAX + 1];
    static const struct {
        float f;
        const char *want;
    } cases[] = {
        {0.1f, "0.1"},           {-2.5f, "-2.5"},          {1e38f, "1e+38"},
        {FLT_MAX, "3.4028235e+38"}, {FLT_MIN, "1.1754944e-38"}, {1.4e-45f, "1e-45"},
        {1.1754942e-38f, "1.1754942e-38"}, /* the largest subnormal */
        {-0.0f, "-0"},           {0.0f, "0"},              {16777216.0f, "16777216"},
        {0.33333334f, "0.33333334"}, {1.5e-10f, "1.5e-10"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_str_eq(float_text(cases[i].f, buf), cases[i].want, "case %zu", i);
}

Test(common_numtext, double_text_is_the_shortest_that_reads_back)
{
    char buf[FS_NUMTEXT_MAX + 1];
    cr_expect_str_eq(double_text(0.1, buf), "0.1");
    cr_expect_str_eq(double_text(1e300, buf), "1e+300");
    cr_expect_str_eq(double_text(DBL_MAX, buf), "1.7976931348623157e+308");
    cr_expect_str_eq(double_text(DBL_MIN, buf), "2.2250738585072014e-308");
    cr_expect_str_eq(double_text(5e-324, buf), "5e-324");
    cr_expect_str_eq(double_text(-0.0, buf), "-0");
    cr_expect_str_eq(double_text(-2.2250738585072014e-308, buf), "-2.2250738585072014e-308");
    cr_expect_eq(strlen(double_text(-2.2250738585072014e-308, buf)), 24,
                 "the longest text FS_NUMTEXT_MAX must hold");
}

Test(common_numtext, nan_and_infinity_have_no_text)
{
    char buf[FS_NUMTEXT_MAX + 1] = "unchanged";
    cr_expect_eq(fs_float_format(buf, NAN), 0);
    cr_expect_eq(fs_float_format(buf, -INFINITY), 0);
    cr_expect_eq(fs_double_format(buf, INFINITY), 0);
    cr_expect_eq(fs_double_format(buf, -NAN), 0);
    cr_expect_str_eq(buf, "unchanged");
}

/* Every 4099th float bit pattern (about a million, every exponent and sign,
 * subnormals included), and the edges: its text read back as a double (as
 * the request codec reads it) narrows to the very same float, and strtof
 * agrees. */
Test(common_numtext, float_text_round_trips_across_the_range)
{
    char buf[FS_NUMTEXT_MAX + 1];
    static const uint32_t edges[] = {0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu,
                                     0x80000001u, 0xff7fffffu, 0x80000000u, 0x3f800001u};
    size_t n_edges = sizeof edges / sizeof edges[0];
    for (uint64_t k = 0; k < (1ull << 32) / 4099 + n_edges; k++) {
        uint32_t bits = k < n_edges ? edges[k] : (uint32_t)((k - n_edges) * 4099u);
        float f;
        memcpy(&f, &bits, sizeof f);
        if (!isfinite(f))
            continue;
        const char *text = float_text(f, buf);
        double d = 0;
        cr_assert_eq(fs_double_parse(text, text + strlen(text), &d), 0, "%s", text);
        float back = (float)d, back_f = strtof(text, NULL);
        cr_assert_eq(memcmp(&back, &f, sizeof f), 0, "0x%08x: %s came back as %a", bits, text,
                     (double)back);
        cr_assert_eq(memcmp(&back_f, &f, sizeof f), 0, "0x%08x: %s (strtof)", bits, text);
    }
}

Test(common_numtext, double_text_round_trips_across_the_range)
{
    char buf[FS_NUMTEXT_MAX + 1];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < 200000; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64: every exponent */
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d))
            continue;
        const char *text = double_text(d, buf);
        double back = 0;
        cr_assert_eq(fs_double_parse(text, text + strlen(text), &back), 0, "%s", text);
        cr_assert_eq(memcmp(&back, &d, sizeof d), 0, "%a: %s came back as %a", d, text, back);
        cr_assert_eq(strtod(text, NULL), d, "%s (strtod)", text);
    }
}

Test(common_numtext, parse_rounds_as_strtod_does)
{
    static const char *texts[] = {"0.1", "-0", "1e-46", "4.9e-324", "2.4703282292062328e-324",
                                  "9007199254740993", "0.30000000000000004", "123456789012345678901234567890",
                                  "1.7976931348623157e308", "2.2250738585072011e-308", "7e-10"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        double d = -1;
        const char *t = texts[i];
        cr_expect_eq(fs_double_parse(t, t + strlen(t), &d), 0, "%s", t);
        double want = strtod(t, NULL);
        cr_expect_eq(memcmp(&d, &want, sizeof d), 0, "%s: %a, strtod %a", t, d, want);
    }
}

/* Texts on both sides of the fast path's bounds (19 digits, 2^53,
 * exponents of +-22, leading and trailing zeros, "1.", ".5") read as
 * strtod reads them, bit for bit, and are accepted where it takes the
 * whole text. */
Test(common_numtext, parse_matches_strtod_on_and_off_the_fast_path)
{
    static const char *edges[] = {"9007199254740992", "9007199254740993", "-9007199254740991",
                                  "1234567890123456789", "12345678901234567890", "1e22", "1e23",
                                  "1e-22", "1e-23", "4.5e22", "0.0000000000000000000001234",
                                  "0.5000000000000000000000000", "000012.5", ".5", "1.", "-.5e1",
                                  "1E+5", "1e+0", "-0.0", "0e999", "5e-324", "0.1e-21",
                                  "123.456e-20", "8.5e21", "0.000001"};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        const char *t = edges[i];
        double d = 0;
        char *e = NULL;
        double want = strtod(t, &e);
        cr_expect_eq(fs_double_parse(t, t + strlen(t), &d), 0, "%s", t);
        cr_expect_eq(memcmp(&d, &want, sizeof d), 0, "%s: %a, strtod %a", t, d, want);
    }
    uint64_t x = 88172645463325252ull; /* xorshift64: the same texts every run */
    char t[64];
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int digits = 1 + (int)(x % 21), point = (int)((x >> 8) % (unsigned)(digits + 1));
        int exp = (int)((x >> 16) % 61) - 30;
        size_t n = 0;
        if (x >> 63)
            t[n++] = '-';
        uint64_t y = x * 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < digits; k++, y = y * 6364136223846793005ull + 1) {
            if (k == point && k > 0)
                t[n++] = '.';
            t[n++] = (char)('0' + (y >> 60) % 10);
        }
        if ((x >> 40) & 1)
            n += (size_t)snprintf(t + n, sizeof t - n, "e%d", exp);
        t[n] = '\0';
        double d = 0;
        cr_assert_eq(fs_double_parse(t, t + n, &d), 0, "%s", t);
        double want = strtod(t, NULL);
        cr_assert_eq(memcmp(&d, &want, sizeof d), 0, "%s: %a, strtod %a", t, d, want);
    }
}

Test(common_numtext, parse_refuses_what_is_not_one_whole_number)
{
    static const char *bad[] = {"", "+1", "1x", "0x10", " 1", "1 ", "-", "e5", "1e", "1e+",
                                "--1", "1.5.", "1e5e", "1.e", ".", "-.", "1e400", "-1e400",
                                "1e-400", "2e-324"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double d = 42;
        const char *t = bad[i];
        cr_expect_eq(fs_double_parse(t, t + strlen(t), &d), -1, "'%s'", t);
        cr_expect_eq(d, 42, "'%s' left *out as it was", t);
    }
    double d = 0;
    const char *t = "2.5e1,";
    cr_expect_eq(fs_double_parse(t, t + 5, &d), 0, "only [s, end) is read");
    cr_expect_eq(d, 25);
}
