/* http_client.h -- what the server tests need of libcurl: one request with
 * a body and headers, answered with the status, the headers asked for and
 * the body; and, for what libcurl will not send (a body cut short, a
 * stall), a raw loopback connection. Header-only (static functions) for
 * the server test suites. */
#ifndef FS_TESTS_SERVER_HTTP_CLIENT_H
#define FS_TESTS_SERVER_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct http_resp {
    long status;
    char *body;                   /* NUL-terminated (also binary: len says) */
    size_t len;
    char retry_after[16];
    char allow[64];
    char header_len[32];          /* Inference-Header-Content-Length */
    char content_type[96];
    char content_encoding[32];
    char vary[64];
    char accept_encoding[64];
    CURLcode curl;                /* CURLE_OK, or why no answer came */
} http_resp_t;

static size_t http_on_body(char *data, size_t size, size_t n, void *user)
{
    http_resp_t *r = user;
    size_t bytes = size * n;
    char *grown = realloc(r->body, r->len + bytes + 1);
    if (!grown)
        return 0;
    r->body = grown;
    memcpy(r->body + r->len, data, bytes);
    r->len += bytes;
    r->body[r->len] = '\0';
    return bytes;
}

static void http_header_value(const char *line, size_t len, const char *name, char *out,
                              size_t cap)
{
    size_t nl = strlen(name);
    if (len <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    while (*v == ' ')
        v++;
    size_t vl = len - (size_t)(v - line);
    while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
        vl--;
    if (vl >= cap)
        vl = cap - 1;
    memcpy(out, v, vl);
    out[vl] = '\0';
}

static size_t http_on_header(char *line, size_t size, size_t n, void *user)
{
    http_resp_t *r = user;
    size_t len = size * n;
    http_header_value(line, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    http_header_value(line, len, "Allow", r->allow, sizeof r->allow);
    http_header_value(line, len, "Inference-Header-Content-Length", r->header_len,
                      sizeof r->header_len);
    http_header_value(line, len, "Content-Type", r->content_type, sizeof r->content_type);
    http_header_value(line, len, "Content-Encoding", r->content_encoding,
                      sizeof r->content_encoding);
    http_header_value(line, len, "Vary", r->vary, sizeof r->vary);
    http_header_value(line, len, "Accept-Encoding", r->accept_encoding, sizeof r->accept_encoding);
    return len;
}

/* One request to http://127.0.0.1:port<path>. `body` NULL: no body (GET
 * unless method says otherwise; HEAD reads no body). `headers`: NULL-terminated "Name: value"
 * strings, or NULL. The caller frees resp->body. */
static http_resp_t http_do(unsigned port, const char *method, const char *path, const void *body,
                           size_t len, const char *const *headers)
{
    http_resp_t r = {0};
    CURL *c = curl_easy_init();
    if (!c) {
        r.curl = CURLE_FAILED_INIT;
        return r;
    }
    size_t url_len = strlen(path) + 32;
    char *url = malloc(url_len);
    if (!url) {
        curl_easy_cleanup(c);
        r.curl = CURLE_OUT_OF_MEMORY;
        r.body = calloc(1, 1);
        return r;
    }
    snprintf(url, url_len, "http://127.0.0.1:%u%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L); /* "/../" is sent as written */
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L); /* no body follows the headers */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, http_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    r.curl = curl_easy_perform(c);
    if (r.curl == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    free(url);
    if (!r.body)
        r.body = calloc(1, 1);
    return r;
}

static http_resp_t http_get(unsigned port, const char *path)
{
    return http_do(port, "GET", path, NULL, 0, NULL);
}

static http_resp_t http_post(unsigned port, const char *path, const char *json)
{
    return http_do(port, "POST", path, json ? json : "", json ? strlen(json) : 0, NULL);
}

/* ---- raw connections ------------------------------------------------------------- */
/* (static inline: only some suites use them, and unused inline functions
 * draw no warning.) */

/* A loopback connection to port; -1 when it cannot connect. The caller
 * closes it. */
static inline int http_raw_open(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Writes all `len` bytes; false when the connection broke (no SIGPIPE). */
static inline bool http_raw_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static inline uint64_t http_raw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Reads what the server sends until it closes the connection or
 * `timeout_ms` pass: the status of its status line (0: none came), the
 * body after the blank line, and in r.curl CURLE_OK when the server closed
 * the connection, CURLE_OPERATION_TIMEDOUT when it was still open at the
 * deadline, CURLE_RECV_ERROR when reading failed (a reset). The caller
 * frees r.body and closes fd. */
static inline http_resp_t http_raw_read(int fd, int timeout_ms)
{
    http_resp_t r = {.curl = CURLE_OPERATION_TIMEDOUT};
    char *text = NULL;
    size_t len = 0;
    uint64_t deadline = http_raw_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = http_raw_now_ms();
        if (now >= deadline)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        char chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) {
            r.curl = n == 0 ? CURLE_OK : CURLE_RECV_ERROR;
            break;
        }
        char *grown = realloc(text, len + (size_t)n + 1);
        if (!grown)
            break;
        text = grown;
        memcpy(text + len, chunk, (size_t)n);
        len += (size_t)n;
        text[len] = '\0';
    }
    if (text && strncmp(text, "HTTP/1.", 7) == 0 && len > 12)
        r.status = strtol(text + 9, NULL, 10);
    const char *body = text ? strstr(text, "\r\n\r\n") : NULL;
    if (body) {
        r.len = len - (size_t)(body + 4 - text);
        r.body = malloc(r.len + 1);
        if (r.body) {
            memcpy(r.body, body + 4, r.len);
            r.body[r.len] = '\0';
        }
    }
    free(text);
    if (!r.body) {
        r.body = calloc(1, 1);
        r.len = 0;
    }
    return r;
}

#endif
