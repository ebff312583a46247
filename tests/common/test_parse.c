/* test_parse.c -- tests for common/parse.c: sizes and durations in and out. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"

#define KIB 1024ull
#define MIB (KIB * KIB)
#define GIB (MIB * KIB)
#define TIB (GIB * KIB)
#define US 1000ull
#define MS (US * 1000)
#define SEC (MS * 1000)

/* The value a failing parse must leave in place. */
#define UNTOUCHED 0xdeadbeefcafef00dull

typedef struct good_case {
    const char *text;
    uint64_t want;
} good_case_t;

typedef struct bad_case {
    const char *text;
    int want_rc;
} bad_case_t;

typedef int (*parse_fn)(const char *, uint64_t *);

static void expect_good(parse_fn parse, const good_case_t *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t got = UNTOUCHED;
        int rc = parse(cases[i].text, &got);
        cr_expect_eq(rc, 0, "\"%s\": rc %d (%s)", cases[i].text, rc, fs_errmsg());
        cr_expect_eq(got, cases[i].want, "\"%s\": got %llu, want %llu", cases[i].text,
                     (unsigned long long)got, (unsigned long long)cases[i].want);
    }
}

static void expect_bad(parse_fn parse, const bad_case_t *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t got = UNTOUCHED;
        fs_err_clear();
        int rc = parse(cases[i].text, &got);
        cr_expect_eq(rc, cases[i].want_rc, "\"%s\": rc %d (%s), want %s", cases[i].text, rc,
                     fs_errname(rc), fs_errname(cases[i].want_rc));
        cr_expect_eq(got, UNTOUCHED, "\"%s\": output written on error", cases[i].text);
        cr_expect(strstr(fs_errmsg(), cases[i].text) != NULL,
                  "\"%s\": message does not quote the text: %s", cases[i].text, fs_errmsg());
    }
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

Test(common_parse, size_accepts_binary_and_decimal_units)
{
    static const good_case_t cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"4096B", 4096},
        {"1KiB", KIB},
        {"512MiB", 512 * MIB},
        {"3GiB", 3 * GIB},
        {"2TiB", 2 * TIB},
        {"64KB", 64000},
        {"1MB", 1000000},
        {"3GB", 3000000000ull},
        {"1TB", 1000000000000ull},
        {"8K", 8 * KIB},
        {"8M", 8 * MIB},
        {"8G", 8 * GIB},
        {"8T", 8 * TIB},
        {"00012", 12},
    };
    expect_good(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_allows_whitespace_between_number_and_unit)
{
    static const good_case_t cases[] = {
        {"5 MiB", 5 * MIB},
        {"5\tMiB", 5 * MIB},
        {"5  \t GiB", 5 * GIB},
        {"1.50 MiB", 1572864},
    };
    expect_good(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_rounds_decimals_to_nearest_byte)
{
    static const good_case_t cases[] = {
        {"1.5GiB", 1610612736ull},
        {"0.5KiB", 512},
        {"0.1KB", 100},
        {"1.23456789MB", 1234568},
        {"0.5B", 1},
        {"0.4999B", 0},
        {"2.5", 3},
        {"0.001KiB", 1},   /* 1.024 bytes */
        {"0.0004KiB", 0},  /* 0.4096 bytes */
        {"1.0000000000GiB", GIB},
        /* Far more fraction digits than any float holds: still exact. */
        {"1.99999999999999999999999999999B", 2},
        {"0.49999999999999999999999999999B", 0},
        {"0.50000000000000000000000000001B", 1},
        {"15.999999TiB", 17592184944904ull},
    };
    expect_good(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_accepts_up_to_uint64_max)
{
    static const good_case_t cases[] = {
        {"18446744073709551615", UINT64_MAX},
        {"18446744073709551615B", UINT64_MAX},
        {"18446744073709551614.5", UINT64_MAX},
        {"16777215TiB", 16777215ull * TIB},
        {"16777215.99999999999TiB", UINT64_MAX - 10}, /* .99999999999 * 2^40 = 2^40 - 10.99 */
        {"0000000000000000000000000000001", 1},
    };
    expect_good(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_rejects_overflow_with_erange)
{
    static const bad_case_t cases[] = {
        {"18446744073709551616", FS_ERANGE},
        {"18446744073709551615.5", FS_ERANGE},
        {"99999999999999999999999999", FS_ERANGE},
        {"16777216TiB", FS_ERANGE},
        {"16777216T", FS_ERANGE},
        {"18446744073709552KB", FS_ERANGE},
        {"20000000 TiB", FS_ERANGE},
    };
    expect_bad(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_rejects_malformed_text)
{
    static const bad_case_t cases[] = {
        {"", FS_EPARSE},
        {"5mb", FS_EPARSE},
        {"5kib", FS_EPARSE},
        {"5KIB", FS_EPARSE},
        {"5Mi", FS_EPARSE},
        {"5 M B", FS_EPARSE},
        {"5ms", FS_EPARSE},
        {"-5", FS_EPARSE},
        {"-0", FS_EPARSE},
        {"+5", FS_EPARSE},
        {" 5", FS_EPARSE},
        {"5 ", FS_EPARSE},
        {"5MiB ", FS_EPARSE},
        {"5MiB x", FS_EPARSE},
        {"5.", FS_EPARSE},
        {".5", FS_EPARSE},
        {"5..5", FS_EPARSE},
        {"1.5.5MiB", FS_EPARSE},
        {"1,5GiB", FS_EPARSE},
        {"nan", FS_EPARSE},
        {"NaN", FS_EPARSE},
        {"inf", FS_EPARSE},
        {"infinity", FS_EPARSE},
        {"0x10", FS_EPARSE},
        {"0x1p4", FS_EPARSE},
        {"1e3", FS_EPARSE},
        {"MiB", FS_EPARSE},
    };
    expect_bad(fs_parse_size, cases, N_OF(cases));
}

Test(common_parse, size_error_names_the_unit_and_lists_expected_units)
{
    uint64_t got;
    cr_assert_eq(fs_parse_size("5mb", &got), FS_EPARSE);
    cr_expect_str_eq(fs_errmsg(), "size \"5mb\": unknown unit \"mb\" (expected B, KiB, MiB, GiB, "
                                  "TiB, KB, MB, GB, TB, K, M, G, T)");
}

Test(common_parse, size_error_says_negative_and_too_large)
{
    uint64_t got;
    cr_assert_eq(fs_parse_size("-1GiB", &got), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "negative") != NULL, "%s", fs_errmsg());
    cr_assert_eq(fs_parse_size("16777216TiB", &got), FS_ERANGE);
    cr_expect(strstr(fs_errmsg(), "18446744073709551615") != NULL, "%s", fs_errmsg());
}

Test(common_parse, size_error_shortens_very_long_text)
{
    char text[300];
    memset(text, '7', sizeof text - 4);
    memcpy(text + sizeof text - 4, "XiB", 4);
    uint64_t got;
    cr_assert_eq(fs_parse_size(text, &got), FS_EPARSE);
    cr_expect(strlen(fs_errmsg()) < 250, "message not shortened: %s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "...") != NULL, "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "expected B, KiB") != NULL, "%s", fs_errmsg());
}

Test(common_parse, null_text_is_a_parse_error)
{
    uint64_t got = UNTOUCHED;
    cr_expect_eq(fs_parse_size(NULL, &got), FS_EPARSE);
    cr_expect_eq(fs_parse_duration(NULL, &got), FS_EPARSE);
    cr_expect_eq(got, UNTOUCHED);
}

Test(common_parse, duration_accepts_every_unit)
{
    static const good_case_t cases[] = {
        {"0ns", 0},
        {"250ns", 250},
        {"500us", 500 * US},
        {"5ms", 5 * MS},
        {"5s", 5 * SEC},
        {"2m", 120 * SEC},
        {"2h", 7200 * SEC},
        {"10 s", 10 * SEC},
        {"0s", 0},
    };
    expect_good(fs_parse_duration, cases, N_OF(cases));
}

Test(common_parse, duration_rounds_decimals_to_nearest_ns)
{
    static const good_case_t cases[] = {
        {"1.5m", 90 * SEC},
        {"0.5us", 500},
        {"1.5ns", 2},
        {"1.4ns", 1},
        {"0.25s", 250 * MS},
        {"0.0000000015s", 2},
        {"1.000000000001h", 3600 * SEC + 4}, /* 3.6 ns */
    };
    expect_good(fs_parse_duration, cases, N_OF(cases));
}

Test(common_parse, duration_accepts_up_to_uint64_max_ns)
{
    static const good_case_t cases[] = {
        {"18446744073709551615ns", UINT64_MAX},
        {"5124095h", 5124095ull * 3600 * SEC},
    };
    expect_good(fs_parse_duration, cases, N_OF(cases));
}

Test(common_parse, duration_rejects_missing_unit_overflow_and_garbage)
{
    static const bad_case_t cases[] = {
        {"", FS_EPARSE},
        {"500", FS_EPARSE},
        {"5S", FS_EPARSE},
        {"5sec", FS_EPARSE},
        {"5 ", FS_EPARSE},
        {"5s ", FS_EPARSE},
        {"1d", FS_EPARSE},
        {"5µs", FS_EPARSE},
        {"5MiB", FS_EPARSE},
        {"-1s", FS_EPARSE},
        {"nan", FS_EPARSE},
        {"inf s", FS_EPARSE},
        {"0x10s", FS_EPARSE},
        {"1e3ms", FS_EPARSE},
        {".5s", FS_EPARSE},
        {"5.s", FS_EPARSE},
        {"18446744073709551616ns", FS_ERANGE},
        {"5124096h", FS_ERANGE},
        {"18446744073709551615s", FS_ERANGE},
    };
    expect_bad(fs_parse_duration, cases, N_OF(cases));
}

Test(common_parse, duration_error_says_unit_is_required)
{
    uint64_t got;
    cr_assert_eq(fs_parse_duration("500", &got), FS_EPARSE);
    cr_expect_str_eq(fs_errmsg(), "duration \"500\": missing unit (expected ns, us, ms, s, m, h)");
}

Test(common_parse, format_size_picks_binary_unit_with_two_decimals)
{
    static const struct {
        uint64_t bytes;
        const char *want;
    } cases[] = {
        {0, "0 B"},
        {512, "512 B"},
        {1023, "1023 B"},
        {1024, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {1572864, "1.50 MiB"},
        {20 * GIB, "20.00 GiB"},
        {3 * TIB, "3.00 TiB"},
        {1048575, "1.00 MiB"}, /* 1023.999 KiB rounds into the next unit */
        {1048524, "1023.95 KiB"},
        {UINT64_MAX, "16777216.00 TiB"},
    };
    char buf[32];
    for (size_t i = 0; i < N_OF(cases); i++) {
        char *got = fs_format_size(cases[i].bytes, buf, sizeof buf);
        cr_expect_eq(got, buf);
        cr_expect_str_eq(buf, cases[i].want, "%llu bytes", (unsigned long long)cases[i].bytes);
    }
}

Test(common_parse, format_duration_picks_unit_with_two_decimals)
{
    static const struct {
        uint64_t ns;
        const char *want;
    } cases[] = {
        {0, "0 ns"},
        {250, "250 ns"},
        {999, "999 ns"},
        {1000, "1.00 us"},
        {1500 * US, "1.50 ms"},
        {5 * SEC, "5.00 s"},
        {999999, "1.00 ms"},
        {59999 * MS, "1.00 m"},
        {90 * SEC, "1.50 m"},
        {7200 * SEC, "2.00 h"},
    };
    char buf[32];
    for (size_t i = 0; i < N_OF(cases); i++) {
        char *got = fs_format_duration(cases[i].ns, buf, sizeof buf);
        cr_expect_eq(got, buf);
        cr_expect_str_eq(buf, cases[i].want, "%llu ns", (unsigned long long)cases[i].ns);
    }
}

Test(common_parse, format_truncates_to_buffer_and_terminates)
{
    char buf[8];
    memset(buf, 'x', sizeof buf);
    fs_format_size(1572864, buf, 4);
    cr_expect_str_eq(buf, "1.5");
    cr_expect_eq(buf[4], 'x', "wrote past buf_len");
    fs_format_duration(1500 * US, buf, 1);
    cr_expect_str_eq(buf, "");
}

Test(common_parse, formatted_text_parses_back_to_nearly_the_same_value)
{
    static const uint64_t sizes[] = {0, 1, 1000, 1536, 1572864, 20 * GIB + 12345, 3 * TIB};
    static const uint64_t durations[] = {0, 999, 1500 * US, 5 * SEC, 90 * SEC, 7200 * SEC};
    char buf[32];
    for (size_t i = 0; i < N_OF(sizes); i++) {
        uint64_t back;
        fs_format_size(sizes[i], buf, sizeof buf);
        cr_assert_eq(fs_parse_size(buf, &back), 0, "\"%s\": %s", buf, fs_errmsg());
        double err = (double)back - (double)sizes[i];
        cr_expect(err <= 0.005 * (double)sizes[i] && -err <= 0.005 * (double)sizes[i],
                  "%llu -> \"%s\" -> %llu", (unsigned long long)sizes[i], buf,
                  (unsigned long long)back);
    }
    for (size_t i = 0; i < N_OF(durations); i++) {
        uint64_t back;
        fs_format_duration(durations[i], buf, sizeof buf);
        cr_assert_eq(fs_parse_duration(buf, &back), 0, "\"%s\": %s", buf, fs_errmsg());
        double err = (double)back - (double)durations[i];
        cr_expect(err <= 0.005 * (double)durations[i] && -err <= 0.005 * (double)durations[i],
                  "%llu -> \"%s\" -> %llu", (unsigned long long)durations[i], buf,
                  (unsigned long long)back);
    }
}
