/* http_client.h -- what the server tests need of libcurl: one request with
 * a body and headers, answered with the status, the headers asked for and
 * the body. Header-only (static functions) for the server test suites. */
#ifndef FS_TESTS_SERVER_HTTP_CLIENT_H
#define FS_TESTS_SERVER_HTTP_CLIENT_H

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct http_resp {
    long status;
    char *body;                   /* NUL-terminated (also binary: len says) */
    size_t len;
    char retry_after[16];
    char allow[64];
    char header_len[32];          /* Inference-Header-Content-Length */
    char content_type[96];
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
    return len;
}

/* One request to http://127.0.0.1:port<path>. `body` NULL: no body (GET
 * unless method says otherwise). `headers`: NULL-terminated "Name: value"
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
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
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

#endif
