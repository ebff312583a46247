/* log.h -- levelled logging to one sink, as text or JSON lines.
 *
 * FS_LOG checks the level before any formatting, so a disabled level costs a
 * load and a compare. Each record is written with one fwrite under a lock, so
 * lines from several threads never interleave. Never log inside per-element
 * loops.
 *
 * Text:  2026-11-21T05:14:16.123Z WARN  alloc: message
 * JSON:  {"ts":"2026-11-21T05:14:16.123Z","level":"warn","module":"alloc","msg":"message"}
 *
 * Threading: all functions are safe from any thread. */
#ifndef FS_COMMON_LOG_H
#define FS_COMMON_LOG_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fs_log_level {
    FS_LOG_ERROR = 0,
    FS_LOG_WARN = 1,
    FS_LOG_INFO = 2,
    FS_LOG_DEBUG = 3,
    FS_LOG_TRACE = 4,
} fs_log_level_t;

typedef enum fs_log_format {
    FS_LOG_TEXT = 0,
    FS_LOG_JSON = 1,
} fs_log_format_t;

/* The current level; records above it are dropped. Default FS_LOG_INFO, or
 * the value of $FLATSERVE_LOG_LEVEL, read once at program start
 * ($FLATSERVE_LOG_FORMAT=json likewise selects JSON lines). */
extern int fs_log_level_current;

#define FS_LOG(level, module, ...)                                             \
    do {                                                                       \
        if ((int)(level) <= fs_log_level_current)                              \
            fs_log_write((level), (module), __VA_ARGS__);                      \
    } while (0)

#define FS_LOG_E(module, ...) FS_LOG(FS_LOG_ERROR, module, __VA_ARGS__)
#define FS_LOG_W(module, ...) FS_LOG(FS_LOG_WARN, module, __VA_ARGS__)
#define FS_LOG_I(module, ...) FS_LOG(FS_LOG_INFO, module, __VA_ARGS__)
#define FS_LOG_D(module, ...) FS_LOG(FS_LOG_DEBUG, module, __VA_ARGS__)

/* Formats and writes one record unconditionally; use FS_LOG instead. */
void fs_log_write(fs_log_level_t level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void fs_log_set_level(fs_log_level_t level);
void fs_log_set_format(fs_log_format_t format);

/* Sends records to `sink` (borrowed; must outlive its use). NULL restores
 * stderr. */
void fs_log_set_sink(FILE *sink);

/* Parses "error", "warn", "info", "debug", "trace" (any case). Returns 0 or
 * FS_EINVAL, leaving *out untouched. */
int fs_log_level_parse(const char *text, fs_log_level_t *out);

/* "error", "warn", ... Never NULL. */
const char *fs_log_level_name(fs_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif
