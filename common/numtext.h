/* numtext.h -- floating-point numbers to and from decimal text, exactly:
 * the shortest text that reads back as the same value (Ryu, through C++17's
 * std::to_chars), and correctly rounded reading (std::from_chars, which
 * libstdc++ 12 implements with the Eisel-Lemire fast path of fast_float).
 *
 * Both are libstdc++'s, behind this C interface (numtext.cc): glibc's
 * printf("%.9g") and strtod give the same values but cost about 10x more a
 * number, most of a JSON tensor's encoding and decoding. Reading takes
 * Clinger's exact fast path first (at most 19 digits, |exponent| <= 22:
 * one correctly rounded multiplication), from_chars for the rest.
 *
 * Threading: pure functions, safe from any thread; no locale is read (the
 * decimal point is always '.'). */
#ifndef FS_COMMON_NUMTEXT_H
#define FS_COMMON_NUMTEXT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Room that fs_float_format and fs_double_format may write:
 * "-2.2250738585072014e-308" is 24 bytes; no NUL is written. */
#define FS_NUMTEXT_MAX 32

/* The shortest decimal text of finite `f` that reads back as exactly f
 * ("0.1", "1e+38", "-0", "1e-45"), plain or with an exponent, whichever is
 * shorter; a JSON number. Writes at most FS_NUMTEXT_MAX bytes at p and
 * returns how many (no NUL). NaN and infinities are the caller's to write
 * (JSON has no text for them): they give 0 and write nothing. */
size_t fs_float_format(char *p, float f);

/* The same for a double. */
size_t fs_double_format(char *p, double d);

/* Reads the whole of [s, end) as a decimal number, rounded correctly to the
 * nearest double (as strtod does): 0 and *out, or -1 when the text is not
 * entirely one number (nothing, trailing bytes, "0x1p3", a leading '+'),
 * or when its value overflows to infinity or underflows to zero although
 * nonzero (strtod's ERANGE); *out is then left as it was. Accepts "inf" and
 * "nan" as std::from_chars does: callers that read JSON check the grammar
 * first. */
int fs_double_parse(const char *s, const char *end, double *out);

/* Reads the JSON number (RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?)
 * that starts at s and ends before `end`, taking as many bytes as the
 * grammar allows, and rounds it as fs_double_parse does: the byte after it
 * and *out, or NULL when no JSON number starts at s or its value overflows
 * or underflows as fs_double_parse refuses (*out is then unchanged). What
 * follows the number is the caller's to check ("1.5x" reads as 1.5 and
 * leaves "x"). One pass: a number that Clinger's fast path covers is
 * converted as it is scanned, any other is handed to fs_double_parse. */
const char *fs_json_number_read(const char *s, const char *end, double *out);

#ifdef __cplusplus
}
#endif
#endif
