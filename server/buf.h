/* buf.h -- the server's growable byte buffer, and the one JSON string
 * escaper every JSON the server writes by hand goes through (error bodies,
 * the infer response).
 *
 * Threading: a buffer belongs to one thread at a time. */
#ifndef FS_SERVER_BUF_H
#define FS_SERVER_BUF_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A growable byte buffer. {0} is an empty one; the bytes are not
 * NUL-terminated. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
    bool failed;                  /* an append ran out of memory since the last free */
} srv_buf_t;

/* Room for `extra` more bytes past len (the capacity doubles as it grows).
 * 0, or FS_ENOMEM with `failed` set (the buffer keeps what it had). */
int srv_buf_reserve(srv_buf_t *b, size_t extra);
/* Appends; 0 or FS_ENOMEM (the buffer keeps what it had, `failed` set). */
int srv_buf_append(srv_buf_t *b, const void *data, size_t len);
/* Appends a NUL-terminated string, without its NUL. As srv_buf_append. */
int srv_buf_puts(srv_buf_t *b, const char *s);
/* Appends printf's text. 0, FS_ENOMEM as srv_buf_append, or FS_EINVAL for
 * a format vsnprintf refuses (nothing appended). */
int srv_buf_printf(srv_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s as a JSON string, quotes included: '"' and '\\' escaped,
 * \b \f \n \r \t in their short forms, every other byte below 0x20 as
 * \u00XX; other ASCII and valid UTF-8 pass through as they are, and a byte
 * that starts no valid UTF-8 sequence is written \ufffd. 0, or FS_ENOMEM
 * with `failed` set and nothing appended. */
int srv_buf_json_string(srv_buf_t *b, const char *s);
/* The same for the n bytes at s, which may hold NULs (written \u0000). */
int srv_buf_json_string_n(srv_buf_t *b, const char *s, size_t n);

/* Frees the bytes and empties the buffer (`failed` cleared); NULL is a
 * no-op. */
void srv_buf_free(srv_buf_t *b);

#ifdef __cplusplus
}
#endif
#endif
