/* http.c -- libmicrohttpd glue: a pool of polling threads, request bodies
 * read under a size bound, and requests parked on suspended connections,
 * so a request waiting for its batch holds no thread; and the responses.
 *
 * The life of a request: MHD calls on_access first with no body (a context
 * is made), then with each piece of the body (copied, up to
 * server.max_body), then once with none left: the request counts as in
 * flight and srv_route runs. A body past server.max_body, or one that
 * cannot be held, is read to its end and dropped, and answered (413, 507)
 * in that last call: libmicrohttpd cannot queue an answer while a body
 * arrives, and an answer queued before it (then the connection closes)
 * may be lost to the reset that closing a socket with unread bytes
 * sends. Only a client that declared a length past the bound and waits
 * for "100 Continue" is answered 413 at once, before any byte. Two
 * different Content-Lengths are refused (400) at once too: the body's end
 * is in doubt, and the connection closes.
 *
 * A request handed to another thread (an inference to its batcher, a load
 * to its own thread) that cannot be answered at once suspends the
 * connection; the completion resumes it, MHD calls on_access
 * again, and srv_req_wake answers (infer.c has the whole machine).
 *
 * Completions are resumed in batches, one wake-up per HTTP thread for all
 * that finished since its last. MHD runs a pool of polling threads
 * (MHD_USE_INTERNAL_POLLING_THREAD with THREAD_POOL_SIZE, epoll), and a
 * connection stays on the thread that accepted it. Each thread claims a
 * srv_http_thread_t at its first callback (thread-local), and every
 * request records its thread's. MHD_resume_connection wakes the owning
 * thread through its inter-thread channel, one write and one wake-up a
 * call; so a completing thread instead pushes the request on its thread's
 * list (a lock-free stack: pushes by compare-and-swap, taken whole by one
 * exchange, so no ABA). Only a push onto an empty list resumes its own
 * connection, which wakes the thread (wakes_self: that request's
 * completer resumes it, no one else); later pushes only join the list.
 * The thread takes the list at every callback it runs -- on entry to and
 * on exit from on_access, on entry to on_completed -- and resumes every
 * request on it but the wakes_self ones, from inside its own loop, where
 * MHD picks them up on its next turn without sleeping. Every push is
 * taken: the list is not empty until taken, and its first request's
 * resume brings a callback on the thread (on_access to answer it, or
 * on_completed when its client went away), which takes the list if no
 * callback did before. A request on a list is RESUMED with its connection
 * still suspended, so MHD does not touch it, and it is freed only by its
 * own thread after its resume (on_completed); graceful stop waits for it
 * like any request in flight. A thread past the count claimed (none is
 * expected) resumes its completions one by one.
 *
 * A body sent with Content-Encoding gzip or deflate is inflated whole
 * before routing (body_decode), under server.max_body like any body, so
 * every route sees the plain bytes. Responses of SRV_COMPRESS_MIN_BYTES
 * or more are compressed when the request's Accept-Encoding asks
 * (encoding.c), with Content-Encoding and Vary set.
 *
 * The responses -- plain, JSON, errors -- are written here too. on_completed
 * frees the context (also when the client went away) and, for a request in
 * flight, lowers the count; graceful stop waits for it to reach zero before
 * stopping MHD, which must never see a suspended connection at stop. A
 * body still arriving is not in flight: a client that sends half a body
 * and leaves is reaped by the connection timeout, not awaited. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/sync.h"
#include "server/app_impl.h"
#include "server/encoding.h"

const unsigned srv_counted_codes[SRV_N_CODES] = {200, 400, 401, 404, 405, 409,
                                                 413, 500, 501, 503, 504, 507};

static void count_status(srv_app_t *app, unsigned status)
{
    size_t i = 0;
    while (i < SRV_N_CODES && srv_counted_codes[i] != status)
        i++;
    atomic_fetch_add_explicit(&app->http_responses[i], 1, memory_order_relaxed);
}

unsigned srv_status_of(int code)
{
    switch (code) {
    case FS_EINVAL:
    case FS_EPARSE:
    case FS_ERANGE:
    case FS_ENOTSUP:
        return 400;
    case FS_ENOENT:
        return 404;
    case FS_EFULL:
    case FS_ESTATE:
    case FS_ETIMEDOUT:
    case FS_EBUSY:
        return 503;
    case FS_ENOMEM:
        return 507;
    default:
        return 500;
    }
}

void srv_respond(srv_req_t *r, unsigned status, const char *content_type, char *body,
                 size_t len, bool take)
{
    srv_respond_header(r, status, content_type, body, len, take, NULL, NULL);
}

/* Queues `resp` (headers added) on the request's connection and counts
 * its status; the request's reference to it is dropped. `enc`: the
 * coding its body is in; `vary`: the body's coding depends on the
 * request's Accept-Encoding (it was long enough to be compressed). */
static void respond_with(srv_req_t *r, unsigned status, struct MHD_Response *resp,
                         const char *content_type, const char *header, const char *value,
                         srv_encoding_t enc, bool vary)
{
    if (content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (enc != SRV_ENC_IDENTITY)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, srv_encoding_name(enc));
    if (vary)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    if (status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (header)
        MHD_add_response_header(resp, header, value);
    if (atomic_load(&r->app->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (MHD_queue_response(r->conn, status, resp) != MHD_YES)
        FS_LOG_W("http", "%s %s: the response could not be queued", r->method, r->url);
    MHD_destroy_response(resp);
    count_status(r->app, status);
}

/* The n buffers of iov (len bytes in all) compressed as the request's
 * Accept-Encoding asks, into *z: the coding, or identity (nothing in *z)
 * when the answer is not one that is compressed (r->compressible), the
 * body is shorter than SRV_COMPRESS_MIN_BYTES, the client asks for no
 * coding, or compressing fails or saves nothing (the body then goes out
 * as it is). */
static srv_encoding_t response_compress(srv_req_t *r, const struct iovec *iov, size_t n,
                                        size_t len, srv_buf_t *z)
{
    if (!r->compressible || len < SRV_COMPRESS_MIN_BYTES)
        return SRV_ENC_IDENTITY;
    srv_encoding_t enc = srv_encoding_accepted(
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));
    if (enc == SRV_ENC_IDENTITY)
        return enc;
    if (srv_deflate(enc, iov, n, z) == 0 && z->len < len)
        return enc;
    srv_buf_free(z);
    return SRV_ENC_IDENTITY;
}

void srv_respond_header(srv_req_t *r, unsigned status, const char *content_type, char *body,
                        size_t len, bool take, const char *header, const char *value)
{
    srv_buf_t z = {0};
    srv_encoding_t enc = response_compress(r, &(struct iovec){body, len}, 1, len, &z);
    if (enc != SRV_ENC_IDENTITY) {
        if (take)
            free(body);
        body = z.data;
        len = z.len;
        take = true;
    }
    struct MHD_Response *resp =
        take ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        if (take)
            free(body);
        FS_LOG_E("http", "%s %s: cannot make a response (out of memory)", r->method, r->url);
        return;
    }
    respond_with(r, status, resp, content_type, header, value, enc,
                 enc != SRV_ENC_IDENTITY || (r->compressible && len >= SRV_COMPRESS_MIN_BYTES));
}

void srv_respond_parts(srv_req_t *r, const char *content_type, const struct MHD_IoVec *iov,
                       unsigned n, void (*release)(void *cls), void *cls, const char *header,
                       const char *value)
{
    /* Compressed, the parts become one buffer of their own, and the
     * tensors they lay in are released at once. */
    size_t len = 0;
    for (unsigned i = 0; i < n; i++)
        len += iov[i].iov_len;
    if (len >= SRV_COMPRESS_MIN_BYTES) {
        struct iovec *v = malloc(n * sizeof *v);
        srv_buf_t z = {0};
        for (unsigned i = 0; v && i < n; i++)
            v[i] = (struct iovec){(void *)iov[i].iov_base, iov[i].iov_len};
        srv_encoding_t enc = v ? response_compress(r, v, n, len, &z) : SRV_ENC_IDENTITY;
        free(v);
        if (enc != SRV_ENC_IDENTITY) {
            release(cls);
            struct MHD_Response *resp =
                MHD_create_response_from_buffer(z.len, z.data, MHD_RESPMEM_MUST_FREE);
            if (!resp) {
                srv_buf_free(&z);
                FS_LOG_E("http", "%s %s: cannot make a response (out of memory)", r->method,
                         r->url);
                return;
            }
            respond_with(r, 200, resp, content_type, header, value, enc, true);
            return;
        }
    }
    struct MHD_Response *resp = MHD_create_response_from_iovec(iov, n, release, cls);
    if (!resp) {
        release(cls);
        FS_LOG_E("http", "%s %s: cannot make a response (out of memory)", r->method, r->url);
        return;
    }
    respond_with(r, 200, resp, content_type, header, value, SRV_ENC_IDENTITY,
                 r->compressible && len >= SRV_COMPRESS_MIN_BYTES);
}

/* {"error": msg}; a body that cannot be built for want of memory becomes
 * a fixed one, so the client still learns the status. */
__attribute__((format(printf, 5, 0))) static void
respond_error_va(srv_req_t *r, unsigned status, const char *header, const char *value,
                 const char *fmt, va_list ap)
{
    char msg[FS_ERRMSG_MAX + 256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (status >= 500)
        FS_LOG_W("http", "%s %s: %u %s", r->method, r->url, status, msg);
    else
        FS_LOG_D("http", "%s %s: %u %s", r->method, r->url, status, msg);
    srv_buf_t b = {0};
    srv_buf_puts(&b, "{\"error\":");
    srv_buf_json_string(&b, msg);
    srv_buf_puts(&b, "}");
    if (b.failed) {
        srv_buf_free(&b);
        static const char oom[] = "{\"error\":\"out of memory\"}";
        srv_respond_header(r, status, "application/json", (char *)oom, sizeof oom - 1, false,
                           header, value);
        return;
    }
    srv_respond_header(r, status, "application/json", b.data, b.len, true, header, value);
}

void srv_respond_error(srv_req_t *r, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    respond_error_va(r, status, NULL, NULL, fmt, ap);
    va_end(ap);
}

void srv_respond_error_header(srv_req_t *r, unsigned status, const char *header,
                              const char *value, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    respond_error_va(r, status, header, value, fmt, ap);
    va_end(ap);
}

void srv_respond_json(srv_req_t *r, unsigned status, cJSON *doc)
{
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        srv_respond_error(r, 507, "out of host memory writing the response");
        return;
    }
    srv_respond(r, status, "application/json", text, strlen(text), true);
}

void srv_json_add_version(cJSON *obj, const char *key, int64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, v);
    cJSON_AddStringToObject(obj, key, text);
}

bool srv_registry_index(srv_req_t *r, eng_model_entry_t **entries, size_t *n)
{
    *entries = NULL;
    *n = 0;
    int rc = eng_registry_index(r->app->registry, entries, n);
    if (rc != 0)
        srv_respond_fs_error(r, rc);
    return rc == 0;
}

void srv_respond_fs_error(srv_req_t *r, int code)
{
    srv_respond_error(r, srv_status_of(code), "%s", fs_errmsg());
}

/* ---- MHD callbacks --------------------------------------------------------------- */

/* ---- completions, resumed in batches (the header has the scheme) ------------------------ */

static _Thread_local const srv_app_t *this_app;     /* the app this_thread was claimed in */
static _Thread_local srv_http_thread_t *this_thread;

/* The calling MHD thread's record, claimed at its first callback; NULL when
 * more threads call than the pool has (its requests resume one by one). */
static srv_http_thread_t *thread_self(srv_app_t *app)
{
    if (this_app != app) {
        unsigned i = atomic_fetch_add_explicit(&app->http_threads_claimed, 1,
                                               memory_order_relaxed);
        assert(i < app->n_http_threads && "more MHD threads than the pool's size");
        this_thread = i < app->n_http_threads ? &app->http_threads[i] : NULL;
        this_app = app;
    }
    return this_thread;
}

bool srv_http_thread_push(srv_http_thread_t *t, srv_req_t *r)
{
    srv_req_t *head = atomic_load_explicit(&t->done, memory_order_relaxed);
    do {
        r->done_next = head;
        r->wakes_self = head == NULL;
    } while (!atomic_compare_exchange_weak_explicit(&t->done, &head, r, memory_order_release,
                                                    memory_order_relaxed));
    return head == NULL;
}

srv_req_t *srv_http_thread_take(srv_http_thread_t *t)
{
    if (!atomic_load_explicit(&t->done, memory_order_relaxed))
        return NULL;
    return atomic_exchange_explicit(&t->done, NULL, memory_order_acquire);
}

void srv_http_resume(srv_req_t *r)
{
    struct MHD_Connection *conn = r->conn;
    /* Pushed onto an empty list: no one else resumes r, so it stays until
     * this call; otherwise its thread may resume and free it at once. */
    if (!r->thread || srv_http_thread_push(r->thread, r))
        MHD_resume_connection(conn);
}

/* Resumes every completion pushed on the calling thread's list (but those
 * whose completers resume them). Cannot fail. */
static void thread_resume_done(srv_http_thread_t *t)
{
    if (!t)
        return;
    uint64_t n = 0, wakeups = 0;
    for (srv_req_t *r = srv_http_thread_take(t), *next; r; r = next, n++) {
        next = r->done_next; /* r may be answered once resumed, by this thread only */
        if (r->wakes_self)
            wakeups++;
        else
            MHD_resume_connection(r->conn);
    }
    if (n) {
        atomic_store_explicit(&t->n_resumed, atomic_load_explicit(&t->n_resumed,
                              memory_order_relaxed) + n, memory_order_relaxed);
        atomic_store_explicit(&t->n_wakeups, atomic_load_explicit(&t->n_wakeups,
                              memory_order_relaxed) + wakeups, memory_order_relaxed);
    }
}

static void flight_add(srv_app_t *app, int delta)
{
    pthread_mutex_lock(&app->flight_lock);
    app->in_flight = (uint64_t)((int64_t)app->in_flight + delta);
    if (app->in_flight == 0)
        pthread_cond_broadcast(&app->flight_cond);
    pthread_mutex_unlock(&app->flight_lock);
}

/* The values of one header, gathered by MHD_get_connection_values. */
typedef struct header_values {
    const char *name;
    const char *first, *other;
} header_values_t;

static enum MHD_Result header_value(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    header_values_t *h = cls;
    if (!key || !value || strcasecmp(key, h->name) != 0)
        return MHD_YES;
    if (!h->first)
        h->first = value;
    else if (strcmp(h->first, value) != 0 && !h->other)
        h->other = value;
    return MHD_YES;
}

void srv_header_values(struct MHD_Connection *conn, const char *name, const char **first,
                       const char **other)
{
    header_values_t h = {name, NULL, NULL};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, header_value, &h);
    *first = h.first;
    *other = h.other;
}

/* 413, naming the declared length if there is one. */
static void respond_too_large(srv_req_t *r, const char *content_length)
{
    unsigned long long max = (unsigned long long)r->app->cfg.server.max_body_bytes;
    if (content_length)
        srv_respond_error(r, 413, "the request body (Content-Length %.32s) is larger than "
                          "server.max_body (%llu bytes)", content_length, max);
    else
        srv_respond_error(r, 413, "the request body is larger than server.max_body (%llu bytes)",
                          max);
}

/* A header's value (NULL: absent) when it is a plain decimal number, else
 * 0. */
static unsigned long long decimal_of(const char *v)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = v && *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
    return n && !errno && !*end ? n : 0;
}

/* Room for the whole body at its first bytes, when its Content-Length is
 * known (already checked against server.max_body): one allocation rather
 * than a doubling chain, and when the body carries Triton's binary
 * section (Inference-Header-Content-Length), body_skip bytes in front so
 * that the section starts 64-byte aligned. The codec then lends an
 * input's bytes to the engine where they lie, with no copy
 * (srv_infer_request_parse). A length that does not parse reserves
 * nothing: the body grows as it comes. 0, or FS_ENOMEM. */
static int body_reserve(srv_req_t *r)
{
    unsigned long long len = decimal_of(
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH));
    if (!len || len > r->app->cfg.server.max_body_bytes)
        return 0;
    /* A compressed body is inflated into a buffer of its own (body_decode):
     * nothing of it is lent from here. A raw binary request (header length
     * "0") is one input's bytes from its first. */
    const char *ihcl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                   "Inference-Header-Content-Length");
    bool plain = !MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                              MHD_HTTP_HEADER_CONTENT_ENCODING);
    unsigned long long at = plain ? decimal_of(ihcl) : 0;
    bool raw = plain && ihcl && strcmp(ihcl, "0") == 0;
    if (at >= len)
        at = 0;
    enum { ALIGN = 64 };
    int rc = srv_buf_reserve(&r->body, (size_t)len + (at || raw ? ALIGN : 0));
    if (rc || (!at && !raw))
        return rc;
    size_t skip = (ALIGN - ((uintptr_t)r->body.data + at) % ALIGN) % ALIGN;
    memset(r->body.data, 0, skip);
    r->body.len = r->body_skip = skip;
    return 0;
}

/* A body sent with Content-Encoding gzip or deflate, inflated in place of
 * the one that came, under the same bound as a plain body (server.max_body):
 * 0, or -1 having answered 415 (a coding not served, with Accept-Encoding
 * saying which are), 413 (it inflates past the bound), 400 (not valid
 * data of its coding) or 507. The inflated body starts at no particular
 * alignment: the codec copies binary inputs it cannot lend. */
static int body_decode(srv_req_t *r)
{
    srv_encoding_t enc;
    const char *ce, *other;
    srv_header_values(r->conn, MHD_HTTP_HEADER_CONTENT_ENCODING, &ce, &other);
    if (other) {
        srv_respond_error(r, 400, "Content-Encoding is given twice, as '%.32s' and '%.32s'", ce,
                          other);
        return -1;
    }
    if (srv_encoding_parse(ce, &enc) != 0) {
        srv_respond_error_header(r, 415, MHD_HTTP_HEADER_ACCEPT_ENCODING, "gzip, deflate", "%s",
                                 fs_errmsg());
        return -1;
    }
    if (enc == SRV_ENC_IDENTITY)
        return 0;
    size_t max = (size_t)r->app->cfg.server.max_body_bytes;
    srv_buf_t plain = {0};
    int rc = srv_inflate(enc, srv_req_body(r), srv_req_body_len(r), max, &plain);
    if (rc != 0) {
        srv_buf_free(&plain);
        if (rc == FS_ERANGE)
            srv_respond_error(r, 413, "the %s request body (%zu bytes) inflates past "
                              "server.max_body (%zu bytes)", srv_encoding_name(enc),
                              srv_req_body_len(r), max);
        else
            srv_respond_error(r, rc == FS_ENOMEM ? 507 : 400, "%s", fs_errmsg());
        return -1;
    }
    srv_buf_free(&r->body);
    r->body = plain;
    r->body_skip = 0;
    return 0;
}

static enum MHD_Result on_request(srv_app_t *app, srv_http_thread_t *self,
                                  struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    srv_req_t *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO; /* MHD closes the connection */
        r->app = app;
        r->conn = conn;
        r->thread = self;
        r->url = url;
        r->method = method;
        r->start_ns = fs_clock_now_ns();
        atomic_init(&r->state, SRV_REQ_IDLE);
        *con_cls = r;
        /* Two lengths leave the body's end in doubt (libmicrohttpd would
         * take the first): refused, and the connection closes. */
        const char *cl, *other;
        srv_header_values(conn, MHD_HTTP_HEADER_CONTENT_LENGTH, &cl, &other);
        if (other) {
            r->dispatched = true;
            srv_respond_error(r, 400, "Content-Length is given twice, as '%.32s' and '%.32s'", cl,
                              other);
            return MHD_YES;
        }
        if (cl) {
            char *end = NULL;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno == 0 && end != cl && n > app->cfg.server.max_body_bytes)
                r->too_large = true;
        }
        const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_EXPECT);
        if (r->too_large && expect && strcasecmp(expect, "100-continue") == 0) {
            r->dispatched = true; /* no byte of the body will come */
            respond_too_large(r, cl);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->dispatched || r->too_large || r->unheld_bytes)
            return MHD_YES; /* a refused body is read and dropped */
        if (srv_req_body_len(r) + n > app->cfg.server.max_body_bytes) {
            r->too_large = true;
            srv_buf_free(&r->body);
        } else if ((!r->body.cap && body_reserve(r) != 0) ||
                   srv_buf_append(&r->body, upload_data, n) != 0) {
            r->unheld_bytes = srv_req_body_len(r) + n;
            srv_buf_free(&r->body);
        }
        return MHD_YES;
    }
    if (srv_req_wake(r))
        return MHD_YES; /* resumed by its completion, and answered */
    if (!r->dispatched && (r->too_large || r->unheld_bytes)) {
        r->dispatched = true;
        if (r->too_large)
            respond_too_large(r, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                             MHD_HTTP_HEADER_CONTENT_LENGTH));
        else
            srv_respond_error(r, 507, "out of host memory reading a %zu-byte body",
                              r->unheld_bytes);
        return MHD_YES;
    }
    if (!r->dispatched) {
        /* In flight from here: a body still arriving is no work the
         * graceful stop must wait for (a client that sent half a body and
         * went away is reaped by the connection timeout, not awaited). */
        r->dispatched = r->in_flight = true;
        flight_add(app, 1);
        if (body_decode(r) == 0)
            srv_route(r);
    }
    return MHD_YES;
}

/* MHD's access handler: a request's calls (on_request), with the thread's
 * completions resumed before and after. */
static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    (void)version;
    srv_app_t *app = cls;
    srv_http_thread_t *self = thread_self(app);
    thread_resume_done(self);
    enum MHD_Result rc = on_request(app, self, conn, url, method, upload_data, upload_data_size,
                                    con_cls);
    thread_resume_done(self); /* what the request's own batch completed */
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_app_t *app = cls;
    thread_resume_done(thread_self(app));
    srv_req_t *r = *con_cls;
    if (!r)
        return;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        FS_LOG_D("http", "%s %s: ended before its answer was sent (code %d)", r->method, r->url,
                 (int)toe);
    bool counted = r->in_flight;
    srv_infer_release(r);
    srv_buf_free(&r->body);
    free(r->admin);
    free(r);
    *con_cls = NULL;
    if (counted)
        flight_add(app, -1);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                              va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    FS_LOG_W("http", "libmicrohttpd: %s", msg);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes %XX in a URL or an argument in place, as libmicrohttpd's own
 * unescaping does, except %00: it stays as written, since a NUL would cut
 * the C string short ("mlp%00x" would read as "mlp"); what holds it is then
 * refused by whoever checks it (a model name, a version). Returns the new
 * length. */
static size_t on_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls, (void)conn;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0 &&
            (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* MHD's accept policy: once the app drains, a new connection is closed as
 * soon as it is accepted. This, not MHD_quiesce_daemon, is how a stop
 * stops accepting: with epoll and a thread pool, quiesce removes the
 * listening socket from each thread's epoll set while those threads may
 * remove it too, and the loser's epoll_ctl fails with ENOENT, on which MHD
 * aborts the process ("Failed to remove listen FD from epoll set"; seen
 * in the CUDA build's server suites, 3 runs of 16). The listening socket
 * itself stays open until MHD stops, as MHD requires of a threaded daemon. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    const srv_app_t *app = cls;
    return atomic_load(&app->draining) ? MHD_NO : MHD_YES;
}

int srv_http_start(srv_app_t *app)
{
    const cfg_t *cfg = &app->cfg;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, cfg->server.host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(cfg->server.port);
    } else if (inet_pton(AF_INET6, cfg->server.host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(cfg->server.port);
        flags |= MHD_USE_IPv6;
    } else {
        return fs_err(FS_EINVAL, "server.host \"%s\" is not an IPv4 or IPv6 address",
                      cfg->server.host);
    }
    uint64_t timeout_s = cfg->server.connection_timeout_ns / 1000000000ull;
    app->n_http_threads = cfg->server.threads ? (unsigned)cfg->server.threads : 1;
    app->http_threads = aligned_alloc(_Alignof(srv_http_thread_t),
                                      app->n_http_threads * sizeof *app->http_threads);
    if (!app->http_threads)
        return fs_err(FS_ENOMEM, "out of host memory for %u HTTP threads", app->n_http_threads);
    for (unsigned i = 0; i < app->n_http_threads; i++) {
        atomic_init(&app->http_threads[i].done, NULL);
        app->http_threads[i].app = app;
        atomic_init(&app->http_threads[i].n_resumed, 0);
        atomic_init(&app->http_threads[i].n_wakeups, 0);
    }
    atomic_init(&app->http_threads_claimed, 0);
    app->daemon = MHD_start_daemon(
        flags, cfg->server.port, on_accept, app, on_access, app,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, app,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->server.threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(timeout_s ? timeout_s : 1),
        MHD_OPTION_CONNECTION_LIMIT, 16384u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
        MHD_OPTION_UNESCAPE_CALLBACK, on_unescape, NULL,
        MHD_OPTION_END);
    if (!app->daemon) {
        free(app->http_threads);
        app->http_threads = NULL;
        return fs_err(FS_EIO, "cannot listen on %s:%u (in use, or not an address of this "
                      "machine?)", cfg->server.host, (unsigned)cfg->server.port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(app->daemon, MHD_DAEMON_INFO_BIND_PORT);
    app->port = info ? info->port : cfg->server.port;
    return 0;
}


int srv_http_wait_idle(srv_app_t *app, uint64_t deadline_ns)
{
    int rc = 0;
    pthread_mutex_lock(&app->flight_lock);
    while (app->in_flight > 0 && rc == 0) {
        uint64_t now = fs_clock_now_ns();
        if (now >= deadline_ns) {
            rc = fs_err(FS_ETIMEDOUT, "%llu request(s) still in flight at the shutdown deadline",
                        (unsigned long long)app->in_flight);
            break;
        }
        uint64_t wait_ns = deadline_ns - now;
        if (wait_ns > 50000000ull)
            wait_ns = 50000000ull; /* re-read the clock: tests may replace it */
        fs_cond_timedwait_ns(&app->flight_cond, &app->flight_lock, wait_ns);
    }
    pthread_mutex_unlock(&app->flight_lock);
    return rc;
}

void srv_http_stop(srv_app_t *app)
{
    if (app->daemon)
        MHD_stop_daemon(app->daemon);
    app->daemon = NULL;
    /* Every list is empty: a request on one is in flight, and stop comes
     * only once none is. */
    for (unsigned i = 0; i < app->n_http_threads; i++)
        assert(!atomic_load(&app->http_threads[i].done));
    free(app->http_threads);
    app->http_threads = NULL;
    app->n_http_threads = 0;
}
