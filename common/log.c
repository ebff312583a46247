/* log.c -- levelled text or JSON-lines logging to one sink.
 *
 * A record is formatted into a stack buffer and written with one fwrite
 * under a mutex, so concurrent records never interleave. Messages longer
 * than the buffer are truncated with "..." rather than split. */
#include "common/log.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/error.h"

#define LOG_RECORD_MAX 2048

int fs_log_level_current = FS_LOG_INFO;

/* Module state: the sink and the format. */
static struct {
    pthread_mutex_t lock; /* serialises writes to the sink */
    FILE *sink;           /* NULL: stderr */
    fs_log_format_t format;
} log_state = {PTHREAD_MUTEX_INITIALIZER, NULL, FS_LOG_TEXT};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *fs_log_level_name(fs_log_level_t level)
{
    if ((unsigned)level < sizeof level_names / sizeof level_names[0])
        return level_names[level];
    return "unknown";
}

int fs_log_level_parse(const char *text, fs_log_level_t *out)
{
    for (size_t i = 0; text && i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *out = (fs_log_level_t)i;
            return 0;
        }
    }
    return fs_err(FS_EINVAL, "log level '%s': expected one of error, warn, info, debug, trace",
                  text ? text : "(null)");
}

/* Runs before main: FS_LOG compares against fs_log_level_current before
 * fs_log_write is ever called, so reading the variable at the first record
 * would drop the records it enables (debug, trace) until a record at the
 * default level came through. */
__attribute__((constructor)) static void log_read_env(void)
{
    const char *env = getenv("FLATSERVE_LOG_LEVEL");
    fs_log_level_t level;
    if (env && fs_log_level_parse(env, &level) == 0)
        fs_log_level_current = (int)level;
    const char *format = getenv("FLATSERVE_LOG_FORMAT");
    if (format && strcmp(format, "json") == 0)
        log_state.format = FS_LOG_JSON;
}

void fs_log_set_level(fs_log_level_t level)
{
    fs_log_level_current = (int)level;
}

void fs_log_set_format(fs_log_format_t format)
{
    pthread_mutex_lock(&log_state.lock);
    log_state.format = format;
    pthread_mutex_unlock(&log_state.lock);
}

void fs_log_set_sink(FILE *sink)
{
    pthread_mutex_lock(&log_state.lock);
    log_state.sink = sink;
    pthread_mutex_unlock(&log_state.lock);
}

/* Appends `src` to buf[*len..cap) with JSON string escaping. */
static void json_escape_into(char *buf, size_t *len, size_t cap, const char *src)
{
    for (const unsigned char *s = (const unsigned char *)src; *s && *len + 7 < cap; s++) {
        if (*s == '"' || *s == '\\') {
            buf[(*len)++] = '\\';
            buf[(*len)++] = (char)*s;
        } else if (*s < 0x20) {
            *len += (size_t)snprintf(buf + *len, cap - *len, "\\u%04x", *s);
        } else {
            buf[(*len)++] = (char)*s;
        }
    }
}

void fs_log_write(fs_log_level_t level, const char *module, const char *fmt, ...)
{
    if ((int)level > fs_log_level_current)
        return;

    char msg[LOG_RECORD_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof msg)
        memcpy(msg + sizeof msg - 4, "...", 4);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[96];
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

    char rec[LOG_RECORD_MAX + 256];
    size_t len = 0;
    pthread_mutex_lock(&log_state.lock);
    if (log_state.format == FS_LOG_JSON) {
        len = (size_t)snprintf(rec, sizeof rec, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"",
                               stamp, fs_log_level_name(level));
        json_escape_into(rec, &len, len + 64, module ? module : ""); /* module names are short */
        memcpy(rec + len, "\",\"msg\":\"", 9);
        len += 9;
        json_escape_into(rec, &len, sizeof rec - 3, msg);
        memcpy(rec + len, "\"}\n", 3);
        len += 3;
    } else {
        char upper[8] = {0};
        const char *name = fs_log_level_name(level);
        for (size_t i = 0; name[i] && i < sizeof upper - 1; i++)
            upper[i] = (char)toupper((unsigned char)name[i]);
        int w = snprintf(rec, sizeof rec, "%s %-5s %s: %s\n", stamp, upper, module ? module : "-",
                         msg);
        len = w < (int)sizeof rec ? (size_t)w : sizeof rec - 1;
    }
    FILE *out = log_state.sink ? log_state.sink : stderr;
    fwrite(rec, 1, len, out);
    fflush(out);
    pthread_mutex_unlock(&log_state.lock);
}
