// numtext.cc -- numtext.h's conversions, over libstdc++'s <charconv>.
#include "common/numtext.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

static_assert(FS_NUMTEXT_MAX >= 24, "the longest shortest double text is 24 bytes");

extern "C" size_t fs_float_format(char *p, float f)
{
    if (!std::isfinite(f))
        return 0;
    std::to_chars_result r = std::to_chars(p, p + FS_NUMTEXT_MAX, f);
    return r.ec == std::errc() ? static_cast<size_t>(r.ptr - p) : 0;
}

extern "C" size_t fs_double_format(char *p, double d)
{
    if (!std::isfinite(d))
        return 0;
    std::to_chars_result r = std::to_chars(p, p + FS_NUMTEXT_MAX, d);
    return r.ec == std::errc() ? static_cast<size_t>(r.ptr - p) : 0;
}

// Clinger's fast path (1990). A text of at most 19 significant digits is
// an integer m times 10^e; when m < 2^53 and |e| <= 22 both m and 10^e are
// doubles exactly, so the one IEEE multiplication or division that joins
// them rounds correctly to nearest, as strtod would. That covers the
// numbers tensors are sent as ("0.5123", "-12.75", "3e-5") in a few dozen
// instructions instead of from_chars' couple of hundred. Any other text --
// more digits, a larger exponent, "1.", "inf", a sign from_chars refuses --
// returns false, and from_chars decides, so what is accepted and the value
// read are from_chars' either way.
static const double pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool parse_fast(const char *s, const char *end, double *out)
{
    const char *p = s;
    bool neg = p < end && *p == '-';
    p += neg;
    uint64_t m = 0;
    int n_digits = 0, exp10 = 0;
    bool any = false;
    for (; p < end && static_cast<unsigned>(*p - '0') < 10; p++, any = true) {
        if (m == 0 && *p == '0')
            continue; // a leading zero is no significant digit
        if (++n_digits > 19)
            return false;
        m = m * 10 + static_cast<unsigned>(*p - '0');
    }
    if (p < end && *p == '.') {
        const char *frac = ++p;
        for (; p < end && static_cast<unsigned>(*p - '0') < 10; p++) {
            exp10--;
            if (m == 0 && *p == '0')
                continue;
            if (++n_digits > 19)
                return false;
            m = m * 10 + static_cast<unsigned>(*p - '0');
        }
        if (p == frac)
            return false; // "1.": from_chars' call
        any = true;
    }
    if (!any)
        return false;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = p < end && *p == '-';
        p += p < end && (*p == '-' || *p == '+');
        const char *digits = p;
        int e = 0;
        for (; p < end && static_cast<unsigned>(*p - '0') < 10; p++)
            if (e < 10000)
                e = e * 10 + (*p - '0');
        if (p == digits)
            return false;
        exp10 += eneg ? -e : e;
    }
    if (p != end || m > (uint64_t{1} << 53) || exp10 < -22 || exp10 > 22)
        return false;
    double v = static_cast<double>(m);
    v = exp10 < 0 ? v / pow10[-exp10] : v * pow10[exp10];
    *out = neg ? -v : v;
    return true;
}

extern "C" int fs_double_parse(const char *s, const char *end, double *out)
{
    if (parse_fast(s, end, out))
        return 0;
    double v = 0;
    std::from_chars_result r = std::from_chars(s, end, v);
    if (r.ec != std::errc() || r.ptr != end)
        return -1;
    *out = v;
    return 0;
}

static bool is_digit(const char *p, const char *end)
{
    return p < end && static_cast<unsigned>(*p - '0') < 10;
}

// The grammar and Clinger's fast path in one scan: m gathers every digit
// of the integer and fraction parts, exact while there are at most 19 of
// them (leading zeros included, which add nothing to m), and the fraction's
// length scales it. A number with more digits, or outside the fast path's
// reach, is read again, whole, by fs_double_parse.
extern "C" const char *fs_json_number_read(const char *s, const char *end, double *out)
{
    const char *p = s;
    bool neg = p < end && *p == '-';
    p += neg;
    if (!is_digit(p, end))
        return nullptr;
    const char *digits = p;
    uint64_t m = 0;
    if (*p == '0')
        p++;
    else
        for (; is_digit(p, end); p++)
            m = m * 10 + static_cast<unsigned>(*p - '0');
    long n_digits = p - digits, exp10 = 0;
    if (p < end && *p == '.') {
        const char *frac = ++p;
        for (; is_digit(p, end); p++)
            m = m * 10 + static_cast<unsigned>(*p - '0');
        if (p == frac)
            return nullptr;
        exp10 = frac - p;
        n_digits += p - frac;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = p < end && *p == '-';
        p += p < end && (*p == '-' || *p == '+');
        if (!is_digit(p, end))
            return nullptr;
        long e = 0;
        for (; is_digit(p, end); p++)
            if (e < 10000)
                e = e * 10 + (*p - '0');
        exp10 += eneg ? -e : e;
    }
    if (n_digits <= 19 && m <= (uint64_t{1} << 53) && exp10 >= -22 && exp10 <= 22) {
        double v = static_cast<double>(m);
        v = exp10 < 0 ? v / pow10[-exp10] : v * pow10[exp10];
        *out = neg ? -v : v;
        return p;
    }
    return fs_double_parse(s, p, out) == 0 ? p : nullptr;
}
