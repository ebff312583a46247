/* test_log.c -- tests for common/log.c: level filtering, text and JSON records. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <pthread.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

/* Records go to an in-memory stream for the length of each test. */
static struct {
    FILE *sink;
    char *buf;
    size_t len;
} cap;

static void log_capture_start(void)
{
    cap.sink = open_memstream(&cap.buf, &cap.len);
    cr_assert_not_null(cap.sink);
    fs_log_set_sink(cap.sink);
    fs_log_set_format(FS_LOG_TEXT);
    fs_log_set_level(FS_LOG_INFO);
}

/* Restores the defaults before closing the stream the logger points at. */
static void log_capture_stop(void)
{
    fs_log_set_sink(NULL);
    fs_log_set_format(FS_LOG_TEXT);
    fs_log_set_level(FS_LOG_INFO);
    fclose(cap.sink);
    free(cap.buf);
    cap.sink = NULL;
    cap.buf = NULL;
}

/* Everything logged so far, NUL-terminated. */
static const char *log_captured(void)
{
    fflush(cap.sink);
    return cap.buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static int matches(const char *pattern, const char *text)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0, "bad pattern %s", pattern);
    int ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* A JSON object whose values are all strings, decoded. */
#define JSON_MAX_FIELDS 8
typedef struct json_flat {
    size_t n;
    char key[JSON_MAX_FIELDS][64];
    char val[JSON_MAX_FIELDS][4096];
} json_flat_t;

/* Reads a JSON string at *p into out (decoding escapes; \u00XX only below
 * 0x80, which is all the logger emits) and advances *p. Returns 0 if the
 * string is well formed. */
static int json_read_string(const char **p, char *out, size_t cap_len)
{
    const char *s = *p;
    size_t n = 0;
    if (*s++ != '"')
        return -1;
    for (;;) {
        unsigned char c = (unsigned char)*s++;
        if (c == '\0' || c < 0x20 || n + 1 >= cap_len)
            return -1;
        if (c == '"')
            break;
        if (c == '\\') {
            char e = *s++;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned v;
                if (sscanf(s, "%4x", &v) != 1 || v >= 0x80)
                    return -1;
                for (int i = 0; i < 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", s[i]) || s[i] == '\0')
                        return -1;
                s += 4;
                c = (unsigned char)v;
                break;
            }
            default:
                return -1;
            }
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    *p = s;
    return 0;
}

/* Parses one line `{"k":"v",...}\n` exactly. Returns 0 if it is one. */
static int json_parse_flat(const char *line, json_flat_t *obj)
{
    const char *p = line;
    obj->n = 0;
    if (*p++ != '{')
        return -1;
    for (;;) {
        if (obj->n == JSON_MAX_FIELDS)
            return -1;
        if (json_read_string(&p, obj->key[obj->n], sizeof obj->key[0]) != 0 || *p++ != ':' ||
            json_read_string(&p, obj->val[obj->n], sizeof obj->val[0]) != 0)
            return -1;
        obj->n++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}')
            return -1;
        break;
    }
    return strcmp(p, "\n") == 0 ? 0 : -1;
}

TestSuite(common_log, .init = log_capture_start, .fini = log_capture_stop);

Test(common_log, drops_records_above_the_level)
{
    fs_log_set_level(FS_LOG_WARN);
    FS_LOG_D("test", "debug %d", 1);
    FS_LOG_I("test", "info %d", 2);
    FS_LOG_W("test", "warn %d", 3);
    FS_LOG_E("test", "error %d", 4);
    const char *out = log_captured();
    cr_expect_eq(count_lines(out), 2, "%s", out);
    cr_expect_null(strstr(out, "debug 1"));
    cr_expect_null(strstr(out, "info 2"));
    cr_expect_not_null(strstr(out, "warn 3"));
    cr_expect_not_null(strstr(out, "error 4"));
}

Test(common_log, trace_level_lets_everything_through)
{
    fs_log_set_level(FS_LOG_TRACE);
    FS_LOG(FS_LOG_TRACE, "test", "trace");
    FS_LOG_D("test", "debug");
    FS_LOG_E("test", "error");
    cr_expect_eq(count_lines(log_captured()), 3, "%s", log_captured());
}

Test(common_log, disabled_level_does_not_evaluate_arguments)
{
    int calls = 0;
    FS_LOG_D("test", "%d", ++calls);
    cr_expect_eq(calls, 0);
    cr_expect_str_eq(log_captured(), "");
}

Test(common_log, text_record_has_timestamp_level_module_and_message)
{
    FS_LOG_W("alloc", "segment %d released", 42);
    FS_LOG_I("server", "listening");
    const char *out = log_captured();
    const char *ts = "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z";
    char pattern[512];
    snprintf(pattern, sizeof pattern, "^%s WARN  alloc: segment 42 released\n%s INFO  server: listening\n$",
             ts, ts);
    cr_expect(matches(pattern, out), "unexpected text records:\n%s", out);
}

Test(common_log, json_record_is_one_valid_object_with_escapes)
{
    fs_log_set_format(FS_LOG_JSON);
    const char *msg = "say \"hi\"\nback\\slash\ttab\x01";
    FS_LOG_W("alloc", "%s", msg);
    const char *out = log_captured();
    cr_expect_eq(count_lines(out), 1, "newline not escaped: %s", out);
    json_flat_t obj;
    cr_assert_eq(json_parse_flat(out, &obj), 0, "not a flat JSON object: %s", out);
    cr_assert_eq(obj.n, 4, "%s", out);
    cr_expect_str_eq(obj.key[0], "ts");
    cr_expect(matches("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z$", obj.val[0]), "ts %s",
              obj.val[0]);
    cr_expect_str_eq(obj.key[1], "level");
    cr_expect_str_eq(obj.val[1], "warn");
    cr_expect_str_eq(obj.key[2], "module");
    cr_expect_str_eq(obj.val[2], "alloc");
    cr_expect_str_eq(obj.key[3], "msg");
    cr_expect_str_eq(obj.val[3], msg);
}

Test(common_log, long_text_message_is_truncated_with_ellipsis)
{
    static char big[5000];
    memset(big, 'z', sizeof big - 1);
    FS_LOG_I("test", "%s", big);
    const char *out = log_captured();
    cr_expect_eq(count_lines(out), 1);
    size_t len = strlen(out);
    cr_expect_lt(len, sizeof big, "not truncated");
    cr_expect(len > 4 && strcmp(out + len - 4, "...\n") == 0, "no ellipsis at the end");
}

Test(common_log, long_json_message_stays_valid_json)
{
    fs_log_set_format(FS_LOG_JSON);
    static char big[5000];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = i % 2 ? '"' : '\n'; /* every byte needs escaping */
    FS_LOG_E("test", "%s", big);
    const char *out = log_captured();
    json_flat_t obj;
    cr_expect_eq(count_lines(out), 1);
    cr_expect_eq(json_parse_flat(out, &obj), 0, "truncated record is not valid JSON: %.200s...",
                 out);
}

/* Each thread writes this many records of one recognisable shape. */
#define LOG_THREAD_RECORDS 200

static void *log_from_thread(void *arg)
{
    for (int i = 0; i < LOG_THREAD_RECORDS; i++)
        FS_LOG_I("thread", "t%ld record %d of a line long enough to interleave if it could",
                 (long)(intptr_t)arg, i);
    return NULL;
}

Test(common_log, concurrent_records_never_interleave)
{
    pthread_t t[4];
    for (intptr_t i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, log_from_thread, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_join(t[i], NULL), 0);
    const char *out = log_captured();
    cr_assert_eq(count_lines(out), 4 * LOG_THREAD_RECORDS);
    regex_t re;
    cr_assert_eq(regcomp(&re,
                         "^[0-9T:.Z-]+ INFO  thread: t[0-3] record [0-9]+ of a line long enough "
                         "to interleave if it could$",
                         REG_EXTENDED | REG_NOSUB),
                 0);
    char *copy = strdup(out);
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        cr_expect_eq(regexec(&re, line, 0, NULL, 0), 0, "mangled line: %s", line);
    free(copy);
    regfree(&re);
}

/* The suite's init runs first, then this test's redirect of stderr. */
Test(common_log, null_sink_writes_to_stderr, .init = cr_redirect_stderr)
{
    fs_log_set_sink(NULL);
    FS_LOG_E("test", "to stderr");
    fflush(stderr);
    cr_expect_str_eq(log_captured(), "");
    FILE *err = cr_get_redirected_stderr();
    char line[256] = "";
    cr_assert_not_null(fgets(line, sizeof line, err));
    cr_expect_not_null(strstr(line, "ERROR test: to stderr"), "%s", line);
}

Test(common_log, level_parse_accepts_names_in_any_case)
{
    static const struct {
        const char *text;
        fs_log_level_t want;
    } cases[] = {
        {"error", FS_LOG_ERROR}, {"WARN", FS_LOG_WARN},   {"Info", FS_LOG_INFO},
        {"debug", FS_LOG_DEBUG}, {"tRaCe", FS_LOG_TRACE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fs_log_level_t got = FS_LOG_ERROR;
        cr_expect_eq(fs_log_level_parse(cases[i].text, &got), 0, "%s", cases[i].text);
        cr_expect_eq(got, cases[i].want, "%s", cases[i].text);
    }
}

Test(common_log, level_parse_rejects_unknown_name_and_leaves_output)
{
    fs_log_level_t got = FS_LOG_DEBUG;
    cr_expect_eq(fs_log_level_parse("verbose", &got), FS_EINVAL);
    cr_expect_eq(got, FS_LOG_DEBUG);
    cr_expect_not_null(strstr(fs_errmsg(), "verbose"), "%s", fs_errmsg());
    cr_expect_eq(fs_log_level_parse(NULL, &got), FS_EINVAL);
    cr_expect_eq(fs_log_level_parse("", &got), FS_EINVAL);
    cr_expect_eq(got, FS_LOG_DEBUG);
}

Test(common_log, level_name_covers_each_level_and_out_of_range)
{
    cr_expect_str_eq(fs_log_level_name(FS_LOG_ERROR), "error");
    cr_expect_str_eq(fs_log_level_name(FS_LOG_WARN), "warn");
    cr_expect_str_eq(fs_log_level_name(FS_LOG_INFO), "info");
    cr_expect_str_eq(fs_log_level_name(FS_LOG_DEBUG), "debug");
    cr_expect_str_eq(fs_log_level_name(FS_LOG_TRACE), "trace");
    cr_expect_str_eq(fs_log_level_name((fs_log_level_t)7), "unknown");
    cr_expect_str_eq(fs_log_level_name((fs_log_level_t)-1), "unknown");
}
