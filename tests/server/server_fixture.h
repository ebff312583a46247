/* server_fixture.h -- a real flatserve app on a loopback ephemeral port over
 * a temporary repository holding the demo models (links to models/, which
 * make writes), for the integration suites. Header-only. */
#ifndef FS_TESTS_SERVER_FIXTURE_H
#define FS_TESTS_SERVER_FIXTURE_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "server/app.h"
#include "server/buf.h"
#include "server/codec.h"
#include "tests/server/http_client.h"

typedef struct srv_fixture {
    char repo[256];
    cfg_t cfg;
    srv_app_t *app;
    unsigned port;
} srv_fixture_t;

/* REPO/<name>/<version>/model.onnx as a link to the demo model `demo`. */
static void fixture_add_model(srv_fixture_t *f, const char *name, const char *demo, int version)
{
    char cwd[PATH_MAX], dir[PATH_MAX + 64], target[PATH_MAX + 64], link[PATH_MAX + 96];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(dir, sizeof dir, "%s/%s", f->repo, name);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/%s/%d", f->repo, name, version);
    cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s", dir);
    snprintf(target, sizeof target, "%s/models/%s/1/model.onnx", cwd, demo);
    if (access(target, R_OK) != 0)
        cr_skip_test("the demo model %s is missing (run make)", target);
    snprintf(link, sizeof link, "%s/model.onnx", dir);
    cr_assert_eq(symlink(target, link), 0, "symlink %s", link);
}

/* Makes the directory REPO/<rel> (its parent must exist; one that exists
 * already is fine). */
static inline void fixture_mkdir(srv_fixture_t *f, const char *rel)
{
    char dir[PATH_MAX + 256];
    snprintf(dir, sizeof dir, "%s/%s", f->repo, rel);
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return;
    cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s", dir);
}

/* Writes REPO/<name>/<rel> with `text`. */
static inline void fixture_write(srv_fixture_t *f, const char *name, const char *rel, const char *text,
                          size_t len)
{
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s/%s", f->repo, name, rel);
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot write %s", path);
    cr_assert_eq(fwrite(text, 1, len, fp), len);
    fclose(fp);
}

/* A fixture with the given demo models under their own names, config not
 * yet started: the caller may change f->cfg, then fixture_start. */
static void fixture_init(srv_fixture_t *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->repo, sizeof f->repo, "/tmp/flatserve-repo-XXXXXX");
    cr_assert_not_null(mkdtemp(f->repo));
    cfg_defaults(&f->cfg);
    snprintf(f->cfg.server.host, sizeof f->cfg.server.host, "127.0.0.1");
    f->cfg.server.port = 0;
    f->cfg.server.threads = 4;
    snprintf(f->cfg.repository, sizeof f->cfg.repository, "%s", f->repo);
    f->cfg.log.level = FS_LOG_WARN;
    f->cfg.server.shutdown_timeout_ns = 20000000000ull;
}

static void fixture_start(srv_fixture_t *f)
{
    int rc = srv_app_start(&f->cfg, &f->app);
    cr_assert_eq(rc, 0, "srv_app_start: %s", fs_errmsg());
    f->port = srv_app_port(f->app);
    cr_assert_gt(f->port, 0);
}

/* A JSON request whose FP32 input `name` has the shape `shape` ("1,8,64")
 * of n elements, every one 0.5. */
static inline void fixture_body_halves(srv_buf_t *b, const char *name, const char *shape, size_t n)
{
    srv_buf_printf(b, "{\"inputs\":[{\"name\":\"%s\",\"shape\":[%s],\"datatype\":\"FP32\","
                      "\"data\":[", name, shape);
    for (size_t i = 0; i < n; i++)
        srv_buf_append(b, i ? ",0.5" : "0.5", i ? 4 : 3);
    srv_buf_append(b, "]}]}", 5);
}

static void rm_tree(const char *path)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

static void fixture_stop(srv_fixture_t *f)
{
    if (f->app)
        cr_expect_eq(srv_app_stop(f->app), 0, "srv_app_stop: %s", fs_errmsg());
    f->app = NULL;
    rm_tree(f->repo);
}

/* Checks the status and that the body is {"error": "..."} with `needle`
 * (NULL: any text) in the text; frees the body. */
static inline void http_expect_error(http_resp_t *r, long status, const char *needle)
{
    cr_expect_eq(r->status, status, "status %ld (want %ld): %s", r->status, status, r->body);
    cJSON *doc = cJSON_Parse(r->body);
    cJSON *err = cJSON_GetObjectItemCaseSensitive(doc, "error");
    cr_expect(cJSON_IsString(err), "no {\"error\": ...} in %s", r->body);
    if (needle && cJSON_IsString(err))
        cr_expect(strstr(err->valuestring, needle) != NULL, "'%s' not in the error: %s", needle,
                  err->valuestring);
    cJSON_Delete(doc);
    free(r->body);
}

/* Whether GET /v2 lists `name` among the server's extensions. */
static inline bool has_extension(srv_fixture_t *f, const char *name)
{
    http_resp_t r = http_get(f->port, "/v2");
    cJSON *doc = cJSON_Parse(r.body);
    free(r.body);
    bool found = false;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "extensions"))
        found |= cJSON_IsString(e) && strcmp(e->valuestring, name) == 0;
    cJSON_Delete(doc);
    return found;
}

/* A POST to /v2/models/mlp/infer made on a thread of its own (a request
 * parked in a queue while the test goes on): start it with
 * pthread_create(&t, NULL, http_bg_post, &q), read q.resp after the join. */
typedef struct http_bg_req {
    unsigned port;
    char *body;
    http_resp_t resp;
} http_bg_req_t;

static inline void *http_bg_post(void *arg)
{
    http_bg_req_t *q = arg;
    q->resp = http_post(q->port, "/v2/models/mlp/infer", q->body);
    return NULL;
}

#endif
