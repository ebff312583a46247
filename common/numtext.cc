// numtext.cc -- numtext.h's conversions, over libstdc++'s <charconv>.
#include "common/numtext.h"

#include <charconv>
#include <cmath>
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

extern "C" int fs_double_parse(const char *s, const char *end, double *out)
{
    double v = 0;
    std::from_chars_result r = std::from_chars(s, end, v);
    if (r.ec != std::errc() || r.ptr != end)
        return -1;
    *out = v;
    return 0;
}
