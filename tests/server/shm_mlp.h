/* shm_mlp.h -- what the shared memory server suites (system and CUDA)
 * share: the demo mlp's input they send and the answer of the JSON path
 * they compare a region's output with. Header-only; include after
 * server_fixture.h. */
#ifndef FS_TESTS_SERVER_SHM_MLP_H
#define FS_TESTS_SERVER_SHM_MLP_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>

#include "tests/server/server_fixture.h"

#define MLP_IN 64
#define MLP_OUT 10
#define ROWS 2

/* An answer's status, its body freed. */
static inline long status_of(http_resp_t r)
{
    free(r.body);
    return r.status;
}

/* The mlp's input: ROWS x 64 floats, i * 0.01 - 0.3. */
static inline void input_values(float *x)
{
    for (int i = 0; i < ROWS * MLP_IN; i++)
        x[i] = (float)i * 0.01f - 0.3f;
}

/* POST /v2/models/mlp/infer with `body`; the parsed answer (status 200). */
static inline cJSON *infer_ok(srv_fixture_t *f, const char *body)
{
    http_resp_t r = http_post(f->port, "/v2/models/mlp/infer", body);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cJSON *doc = cJSON_Parse(r.body);
    free(r.body);
    cr_assert_not_null(doc);
    return doc;
}

/* POST /v2/models/mlp/infer with `body` (status 200); the probabilities
 * of its JSON answer into out (ROWS * MLP_OUT). */
static inline void infer_ok_probabilities(srv_fixture_t *f, const char *body, float *out)
{
    cJSON *doc = infer_ok(f, body);
    cJSON *data = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0),
                                      "data");
    cr_assert_eq(cJSON_GetArraySize(data), ROWS * MLP_OUT);
    for (int i = 0; i < ROWS * MLP_OUT; i++)
        out[i] = (float)cJSON_GetArrayItem(data, i)->valuedouble;
    cJSON_Delete(doc);
}

/* The probabilities the JSON path answers for input_values. */
static inline void json_path_result(srv_fixture_t *f, float *want)
{
    float x[ROWS * MLP_IN];
    input_values(x);
    srv_buf_t b = {0};
    srv_buf_printf(&b, "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],\"datatype\":\"FP32\","
                       "\"data\":[", ROWS, MLP_IN);
    for (int i = 0; i < ROWS * MLP_IN; i++)
        srv_buf_printf(&b, "%s%.9g", i ? "," : "", x[i]);
    srv_buf_puts(&b, "]}]}");
    srv_buf_append(&b, "", 1);
    infer_ok_probabilities(f, b.data, want);
    srv_buf_free(&b);
}

#endif
