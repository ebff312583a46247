/* error.c -- the error-code table and the per-thread error message. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* This thread's last message; msg_set says whether fs_err() wrote it since
 * the last clear, otherwise fs_errmsg() falls back to the code's text. */
static _Thread_local struct {
    char msg[FS_ERRMSG_MAX];
    int code;
    int msg_set;
} tl_err;

const char *fs_strerror(int code)
{
    switch (code) {
#define FS_ERRNO_TEXT_(name, value, text)                                      \
    case value:                                                                \
        return text;
        FS_ERRNO_MAP(FS_ERRNO_TEXT_)
#undef FS_ERRNO_TEXT_
    }
    return "unknown error";
}

const char *fs_errname(int code)
{
    switch (code) {
#define FS_ERRNO_NAME_(name, value, text)                                      \
    case value:                                                                \
        return #name;
        FS_ERRNO_MAP(FS_ERRNO_NAME_)
#undef FS_ERRNO_NAME_
    }
    return "FS_EUNKNOWN";
}

int fs_err(int code, const char *fmt, ...)
{
    /* Formatted aside first: callers wrap the previous message with
     * fs_err(rc, "loading %s: %s", name, fs_errmsg()), and vsnprintf must not
     * read the buffer it writes. */
    char msg[FS_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(tl_err.msg, msg, strlen(msg) + 1);
    tl_err.code = code;
    tl_err.msg_set = 1;
    return code;
}

const char *fs_errmsg(void)
{
    return tl_err.msg_set ? tl_err.msg : fs_strerror(tl_err.code);
}

void fs_err_clear(void)
{
    tl_err.msg_set = 0;
    tl_err.code = 0;
    tl_err.msg[0] = '\0';
}
