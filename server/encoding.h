/* encoding.h -- HTTP content codings (zlib): request bodies sent with
 * Content-Encoding gzip or deflate are inflated under a bound, and
 * responses are compressed for clients whose Accept-Encoding asks.
 *
 * "deflate" is the zlib format (RFC 1950), as HTTP defines it and as
 * Triton's client sends it (zlib.compress); "gzip" is one gzip member
 * (RFC 1952). http.c applies both to every request and response; the
 * fuzz target "inflate" drives srv_inflate.
 *
 * Threading: pure functions over their arguments. */
#ifndef FS_SERVER_ENCODING_H
#define FS_SERVER_ENCODING_H

#include <stddef.h>
#include <sys/uio.h>

#include "server/buf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum srv_encoding {
    SRV_ENC_IDENTITY = 0,
    SRV_ENC_GZIP,
    SRV_ENC_DEFLATE,
} srv_encoding_t;

/* Responses shorter than this go out as they are: compressing them saves
 * less than its own cost. */
#define SRV_COMPRESS_MIN_BYTES 1024

/* "gzip", "deflate", or "identity". */
const char *srv_encoding_name(srv_encoding_t e);

/* A request's Content-Encoding (NULL: absent): 0 and *out for "identity"
 * (or empty), "gzip" (also "x-gzip") and "deflate", in any case; else
 * FS_ENOTSUP naming the value (a list of codings too). */
int srv_encoding_parse(const char *value, srv_encoding_t *out);

/* The coding to answer with for an Accept-Encoding (NULL: absent): gzip
 * when it is acceptable (listed, or "*", with q above 0), else deflate,
 * else identity. Cannot fail. */
srv_encoding_t srv_encoding_accepted(const char *value);

/* Inflates the `len` bytes at `in` (gzip or deflate as `enc` says),
 * appending to *out, which never grows past `max` bytes of output. 0; or
 * FS_ERANGE when the data inflates past `max` (inflating stops there, so
 * a small body that inflates without end costs `max` bytes at most);
 * FS_EPARSE naming what is wrong (a bad header, corrupt data, a check
 * value that does not match, a stream cut short, bytes after its end);
 * FS_ENOMEM. On error *out holds part of the data (caller frees). */
int srv_inflate(srv_encoding_t enc, const void *in, size_t len, size_t max, srv_buf_t *out);

/* Compresses the n buffers of iov, in order, as one stream of `enc`
 * (gzip or deflate), appending to *out. 0, or FS_ENOMEM; on error *out
 * holds part of the data (caller frees). */
int srv_deflate(srv_encoding_t enc, const struct iovec *iov, size_t n, srv_buf_t *out);

#ifdef __cplusplus
}
#endif
#endif
