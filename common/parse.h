/* parse.h -- sizes and durations as people write them in config files.
 *
 * Sizes: a non-negative number (integer or decimal) with an optional unit:
 *   B; KiB MiB GiB TiB (powers of 1024); KB MB GB TB (powers of 1000);
 *   K M G T as shorthands for the binary units. Units are matched exactly
 *   as listed (case-sensitive), so "512MiB", "1.5GiB", "64KB", "4096" and
 *   "4096B" parse and "5mb" does not. Whitespace between number and unit is
 *   allowed.
 * Durations: a number with a required unit: ns us ms s m h ("500us", "5s",
 *   "1.5m"). Results are in nanoseconds.
 *
 * Both reject empty strings, negative values, trailing garbage and results
 * that overflow 64 bits; decimals are rounded to the nearest byte/ns.
 * Threading: pure functions. */
#ifndef FS_COMMON_PARSE_H
#define FS_COMMON_PARSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 0 and sets *out_bytes, or FS_EPARSE / FS_ERANGE with a message
 * (fs_errmsg) quoting the text and saying what was expected; *out_bytes is
 * untouched on error. */
int fs_parse_size(const char *text, uint64_t *out_bytes);

/* Returns 0 and sets *out_ns, or FS_EPARSE / FS_ERANGE as above. */
int fs_parse_duration(const char *text, uint64_t *out_ns);

/* Writes a human size ("512 B", "1.50 MiB", "20.00 GiB") into buf (always
 * NUL-terminated) and returns buf. Cannot fail. */
char *fs_format_size(uint64_t bytes, char *buf, size_t buf_len);

/* Writes a duration ("250 ns", "1.50 ms", "5.00 s") likewise. */
char *fs_format_duration(uint64_t ns, char *buf, size_t buf_len);

#ifdef __cplusplus
}
#endif
#endif
