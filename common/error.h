/* error.h -- flatserve's one table of error codes, and the per-thread message
 * that says what exactly went wrong.
 *
 * Every function that can fail returns 0 or a negative FS_E* code (libuv's
 * convention). The code says what kind of failure it was; the message, set
 * with fs_err() on the failing thread, names the thing that was wrong (the
 * key path, the tensor, the requested and the available bytes). The message
 * is thread-local, so a caller reads it with fs_errmsg() on the same thread
 * right after the failing call.
 *
 * Threading: every function here is safe from any thread. */
#ifndef FS_COMMON_ERROR_H
#define FS_COMMON_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text). Values are stable: they may be logged or exported. */
#define FS_ERRNO_MAP(X)                                                        \
    X(FS_OK, 0, "success")                                                     \
    X(FS_EINVAL, -1, "invalid argument")                                       \
    X(FS_ENOMEM, -2, "out of memory")                                          \
    X(FS_ERANGE, -3, "value out of range")                                     \
    X(FS_ENOTSUP, -4, "not supported")                                         \
    X(FS_ENOENT, -5, "not found")                                              \
    X(FS_EEXIST, -6, "already exists")                                         \
    X(FS_EBUSY, -7, "resource busy")                                           \
    X(FS_EIO, -8, "input/output error")                                        \
    X(FS_ENODEV, -9, "no usable device")                                       \
    X(FS_EDEVICE, -10, "device error")                                         \
    X(FS_EPARSE, -11, "parse error")                                           \
    X(FS_ESTATE, -12, "operation not valid in this state")                     \
    X(FS_ETIMEDOUT, -13, "timed out")                                          \
    X(FS_EFULL, -14, "queue full")                                             \
    X(FS_EDYNAMIC, -15, "shape depends on data only known at run time")

enum fs_errno {
#define FS_ERRNO_ENUM_(name, value, text) name = value,
    FS_ERRNO_MAP(FS_ERRNO_ENUM_)
#undef FS_ERRNO_ENUM_
};

/* The fixed text of an error code ("out of memory"); "unknown error" for a
 * value not in the table. Never NULL; cannot fail. */
const char *fs_strerror(int code);

/* The code's name ("FS_ENOMEM"), for logs and JSON. Never NULL. */
const char *fs_errname(int code);

/* Sets this thread's error message from a printf format and returns `code`,
 * so a failing function can end with `return fs_err(FS_EINVAL, "...", ...)`.
 * The message is truncated to FS_ERRMSG_MAX - 1 bytes. Cannot fail. */
#define FS_ERRMSG_MAX 512
int fs_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's last message set by fs_err(), or fs_strerror() of the last
 * code when none was set since fs_err_clear(). Valid until the next fs_err()
 * on this thread. Never NULL. */
const char *fs_errmsg(void);

/* Forgets this thread's message. */
void fs_err_clear(void);

#ifdef __cplusplus
}
#endif
#endif
