/* strings.c -- text <-> number for string tensors (see strings.h). */
#include "engine/strings.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/numtext.h"

/* Longest text taken as a number: past any float's or integer's digits
 * with room for padding; longer is refused, not truncated. */
#define NUM_TEXT_MAX 127

static bool float_target(eng_dtype_t to)
{
    return to == ENG_DT_FLOAT || to == ENG_DT_DOUBLE || to == ENG_DT_FLOAT16 ||
           to == ENG_DT_BFLOAT16 || eng_dtype_is_float8(to);
}

static bool unsigned_target(eng_dtype_t to)
{
    return to == ENG_DT_UINT8 || to == ENG_DT_UINT16 || to == ENG_DT_UINT32 ||
           to == ENG_DT_UINT64;
}

/* Whether only white space is left at p. */
static bool rest_blank(const char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    return *p == '\0';
}

static int parse_err(const eng_string_t *s, const char *what)
{
    int n = s->len > 40 ? 40 : (int)s->len;
    return fs_err(FS_EINVAL, "string \"%.*s\"%s is not %s", n, eng_string_data(s),
                  s->len > 40 ? "..." : "", what);
}

int eng_string_parse(const eng_string_t *s, eng_dtype_t to, eng_string_num_t *out)
{
    char buf[NUM_TEXT_MAX + 1];
    if (s->len > NUM_TEXT_MAX)
        return parse_err(s, "a number (too long)");
    memcpy(buf, eng_string_data(s), (size_t)s->len);
    buf[s->len] = '\0';
    if (memchr(buf, '\0', (size_t)s->len))
        return parse_err(s, "a number (it holds a NUL byte)");
    char *end;
    if (!float_target(to)) {
        const char *p = buf;
        while (isspace((unsigned char)*p))
            p++;
        errno = 0;
        if (unsigned_target(to) && *p != '-') {
            unsigned long long u = strtoull(p, &end, 10);
            if (end != p && errno == 0 && rest_blank(end)) {
                *out = (eng_string_num_t){.kind = ENG_NUM_U64, .u = u};
                return 0;
            }
        } else {
            long long i = strtoll(p, &end, 10);
            if (end != p && errno == 0 && rest_blank(end)) {
                *out = (eng_string_num_t){.kind = ENG_NUM_I64, .i = i};
                return 0;
            }
        }
        /* Out of range or not an integer: read as a double, which the
         * Cast saturates into the target. */
    }
    errno = 0;
    double f = strtod(buf, &end);
    if (end == buf || !rest_blank(end))
        return parse_err(s, "a number");
    *out = (eng_string_num_t){.kind = ENG_NUM_F64, .f = f};
    return 0;
}

void eng_string_from_f64(double v, bool as_float, eng_string_t *out)
{
    char buf[40];
    int n;
    if (isnan(v)) {
        n = snprintf(buf, sizeof buf, "NaN");
    } else if (isinf(v)) {
        n = snprintf(buf, sizeof buf, v < 0 ? "-INF" : "INF");
    } else {
        /* The shortest text that reads back as the same value of the
         * source's width (common/numtext.h: Ryu through libstdc++). */
        n = (int)(as_float ? fs_float_format(buf, (float)v) : fs_double_format(buf, v));
    }
    eng_string_set(out, buf, (uint64_t)n);
}

void eng_string_from_i64(int64_t v, eng_string_t *out)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%lld", (long long)v);
    eng_string_set(out, buf, (uint64_t)n);
}

void eng_string_from_u64(uint64_t v, eng_string_t *out)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    eng_string_set(out, buf, (uint64_t)n);
}
