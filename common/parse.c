/* parse.c -- sizes and durations from config text, and back to text.
 *
 * Parsing is exact integer arithmetic, never strtod: strtod would accept
 * "nan", "inf", hex floats, exponents and leading whitespace, and would round
 * large values. A value is `I.F unit`: the integer part I is accumulated with
 * an overflow check, and the fraction 0.F times the unit's multiplier is
 * computed digit by digit (schoolbook multiplication of a decimal fraction by
 * an integer, right to left with a carry), so any number of fraction digits
 * rounds correctly to the nearest byte or nanosecond, halves rounding up. */
#include "common/parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* A unit suffix and the number of bytes or nanoseconds it stands for. */
typedef struct parse_unit {
    const char *name;
    uint64_t mult;
} parse_unit_t;

/* What a quantity is called in messages, its units, and how it reads. */
typedef struct parse_kind {
    const char *noun;            /* "size", "duration" */
    const parse_unit_t *units;   /* the accepted suffixes */
    size_t n_units;
    const char *unit_list;       /* the suffixes, for messages */
    const char *example;         /* a valid value, for messages */
    const char *max_text;        /* UINT64_MAX in the kind's base unit */
    int unit_required;           /* 0: a bare number is in the base unit */
} parse_kind_t;

#define KIB 1024ull
#define NS_PER_S 1000000000ull

/* B and the binary units come first: fs_format_size writes only those. */
#define SIZE_UNITS_BINARY 5
static const parse_unit_t size_units[] = {
    {"B", 1},
    {"KiB", KIB},
    {"MiB", KIB * KIB},
    {"GiB", KIB * KIB * KIB},
    {"TiB", KIB * KIB * KIB * KIB},
    {"KB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
    {"K", KIB},
    {"M", KIB * KIB},
    {"G", KIB * KIB * KIB},
    {"T", KIB * KIB * KIB * KIB},
};

static const parse_unit_t duration_units[] = {
    {"ns", 1},
    {"us", 1000ull},
    {"ms", 1000ull * 1000},
    {"s", NS_PER_S},
    {"m", 60 * NS_PER_S},
    {"h", 3600 * NS_PER_S},
};

static const parse_kind_t size_kind = {
    .noun = "size",
    .units = size_units,
    .n_units = sizeof size_units / sizeof size_units[0],
    .unit_list = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G, T",
    .example = "512MiB",
    .max_text = "18446744073709551615 bytes",
    .unit_required = 0,
};

static const parse_kind_t duration_kind = {
    .noun = "duration",
    .units = duration_units,
    .n_units = sizeof duration_units / sizeof duration_units[0],
    .unit_list = "ns, us, ms, s, m, h",
    .example = "500ms",
    .max_text = "18446744073709551615 ns, about 584 years",
    .unit_required = 1,
};

/* Longest prefix of the text quoted in a message; longer text ends in "...". */
#define PARSE_QUOTE_MAX 64

/* Sets the error message `<noun> "<text>": <detail>` and returns `code`. */
static int parse_fail(const parse_kind_t *kind, const char *text, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int parse_fail(const parse_kind_t *kind, const char *text, int code, const char *fmt, ...)
{
    char detail[FS_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    size_t len = strlen(text);
    return fs_err(code, "%s \"%.*s%s\": %s", kind->noun, PARSE_QUOTE_MAX, text,
                  len > PARSE_QUOTE_MAX ? "..." : "", detail);
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* round(0.F * mult), halves up, where F is the `n` digits at `frac`. Exact
 * for any n: with a = 2 * mult, floor(0.F * a) is the carry out of the
 * digit-by-digit product, and round(x) = floor((floor(2x) + 1) / 2). The
 * carry stays below a and each step below 10a, so nothing overflows for
 * mult < 2^59. */
static uint64_t parse_fraction_times(const char *frac, size_t n, uint64_t mult)
{
    uint64_t a = 2 * mult;
    uint64_t carry = 0;
    for (size_t i = n; i-- > 0;)
        carry = ((uint64_t)(frac[i] - '0') * a + carry) / 10;
    return (carry + 1) / 2;
}

/* Parses `text` as a quantity of `kind`. On error, returns FS_EPARSE or
 * FS_ERANGE with a message and leaves *out untouched. */
static int parse_quantity(const parse_kind_t *kind, const char *text, uint64_t *out)
{
    if (!text)
        return fs_err(FS_EPARSE, "%s: no text (expected a number and a unit, such as %s)",
                      kind->noun, kind->example);

    const char *p = text;
    if (*p == '-')
        return parse_fail(kind, text, FS_EPARSE, "must not be negative");
    if (!is_digit(*p))
        return parse_fail(kind, text, FS_EPARSE,
                          "expected a non-negative decimal number%s, such as %s",
                          kind->unit_required ? " and a unit" : " with an optional unit",
                          kind->example);

    uint64_t whole = 0;
    int overflow = 0;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            whole = whole * 10 + d;
    }

    const char *frac = p;
    size_t n_frac = 0;
    if (*p == '.') {
        frac = ++p;
        while (is_digit(*p))
            p++;
        n_frac = (size_t)(p - frac);
        if (n_frac == 0)
            return parse_fail(kind, text, FS_EPARSE, "expected digits after the decimal point");
    }

    const char *space = p;
    while (*p == ' ' || *p == '\t')
        p++;
    const parse_unit_t *unit = NULL;
    if (*p == '\0') {
        if (p != space)
            return parse_fail(kind, text, FS_EPARSE, "expected a unit after the whitespace (%s)",
                              kind->unit_list);
        if (kind->unit_required)
            return parse_fail(kind, text, FS_EPARSE, "missing unit (expected %s)",
                              kind->unit_list);
        unit = &kind->units[0];
    } else {
        for (size_t i = 0; i < kind->n_units && !unit; i++)
            if (strcmp(p, kind->units[i].name) == 0)
                unit = &kind->units[i];
        if (!unit)
            return parse_fail(kind, text, FS_EPARSE, "unknown unit \"%.*s%s\" (expected %s)",
                              PARSE_QUOTE_MAX, p, strlen(p) > PARSE_QUOTE_MAX ? "..." : "",
                              kind->unit_list);
    }

    uint64_t part = parse_fraction_times(frac, n_frac, unit->mult);
    if (overflow || whole > UINT64_MAX / unit->mult ||
        whole * unit->mult > UINT64_MAX - part)
        return parse_fail(kind, text, FS_ERANGE, "too large (the largest is %s)",
                          kind->max_text);
    *out = whole * unit->mult + part;
    return 0;
}

int fs_parse_size(const char *text, uint64_t *out_bytes)
{
    return parse_quantity(&size_kind, text, out_bytes);
}

int fs_parse_duration(const char *text, uint64_t *out_ns)
{
    return parse_quantity(&duration_kind, text, out_ns);
}

/* Writes `value` in the largest of `units` (ascending, units[0].mult == 1)
 * that it reaches, with two decimals, rounded half up; values below
 * units[1] are written as a whole number of units[0]. When rounding carries
 * into the next unit ("1024.00 KiB") the next unit is used instead. */
static char *format_quantity(const parse_unit_t *units, size_t n_units, uint64_t value, char *buf,
                             size_t buf_len)
{
    size_t u = 0;
    while (u + 1 < n_units && value >= units[u + 1].mult)
        u++;
    if (u == 0) {
        snprintf(buf, buf_len, "%llu %s", (unsigned long long)value, units[0].name);
        return buf;
    }
    uint64_t whole, cents;
    for (;;) {
        uint64_t mult = units[u].mult;
        whole = value / mult;
        /* value % mult < mult <= 2^42 for every unit here, so * 100 fits. */
        cents = ((value % mult) * 100 + mult / 2) / mult;
        if (cents == 100) {
            whole++;
            cents = 0;
        }
        if (u + 1 < n_units && whole * mult >= units[u + 1].mult)
            u++;
        else
            break;
    }
    snprintf(buf, buf_len, "%llu.%02llu %s", (unsigned long long)whole, (unsigned long long)cents,
             units[u].name);
    return buf;
}

char *fs_format_size(uint64_t bytes, char *buf, size_t buf_len)
{
    /* The binary units only, so the text parses back with fs_parse_size. */
    return format_quantity(size_units, SIZE_UNITS_BINARY, bytes, buf, buf_len);
}

char *fs_format_duration(uint64_t ns, char *buf, size_t buf_len)
{
    return format_quantity(duration_units, sizeof duration_units / sizeof duration_units[0], ns,
                           buf, buf_len);
}
