/* request.h -- inference requests built from a model's metadata: the random
 * source, the model's inputs as GET /v2/models/{m} describes them, and
 * request bodies (JSON, or Triton's binary tensor extension), good or
 * deliberately bad.
 *
 * Threading: lg_model_t and a bound lg_datapool_t are immutable after
 * creation; an lg_rng_t belongs to one thread. */
#ifndef FS_LOADTEST_REQUEST_H
#define FS_LOADTEST_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "loadtest/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* xoshiro256**, seeded through splitmix64: fast, and the same sequence for
 * the same --seed on every machine. */
typedef struct lg_rng {
    uint64_t s[4];
} lg_rng_t;

void lg_rng_seed(lg_rng_t *r, uint64_t seed);
uint64_t lg_rng_next(lg_rng_t *r);
double lg_rng_uniform(lg_rng_t *r); /* [0, 1) */

#define LG_INPUTS_MAX 16
#define LG_RANK_MAX 8
#define LG_AXIS_FIXED (-1) /* the model fixes this axis */
#define LG_AXIS_BATCH (-2) /* axis 0, dynamic: the batch */

typedef struct lg_input {
    char name[LG_NAME_MAX];
    int dtype;                    /* index into the datatype table */
    uint32_t rank;
    int64_t shape[LG_RANK_MAX];   /* -1: dynamic */
    int axis_src[LG_RANK_MAX];    /* LG_AXIS_FIXED, LG_AXIS_BATCH, or the --dim slot */
} lg_input_t;

typedef struct lg_model {
    char name[LG_NAME_MAX];
    double weight;
    uint32_t n_inputs;
    lg_input_t inputs[LG_INPUTS_MAX];
} lg_model_t;

/* Parses the metadata JSON of model `name`. Returns 0, or FS_EPARSE /
 * FS_ENOTSUP naming the model and what was wrong (an unknown datatype, a
 * rank above LG_RANK_MAX, no inputs). */
int lg_model_parse(const char *json, const char *name, lg_model_t *out);

/* Resolves every dynamic axis of the models' inputs against o->batch and
 * o->dims: axis 0 is the batch, any other needs a --dim. Returns 0, or
 * FS_EINVAL naming the model, input and axis left uncovered, a --dim that
 * names no input of the mix, a fixed axis or the batch axis. */
int lg_model_bind(lg_model_t *models, uint32_t n_models, const lg_opts_t *o);

/* What makes a request bad; the server must answer 4xx. */
typedef enum lg_bad {
    LG_BAD_NONE = 0,
    LG_BAD_SHAPE = 1,   /* a fixed axis off by one, or an extra axis */
    LG_BAD_DTYPE = 2,   /* another datatype, with data of that type */
    LG_BAD_JSON = 3,    /* a valid body cut in half */
} lg_bad_t;

typedef struct lg_body {
    char *data;         /* owned; free with lg_body_free */
    size_t len;
    size_t header_len;  /* binary: the JSON header's bytes; 0 for a JSON body */
    uint32_t batch;
} lg_body_t;

/* Pre-generated input values for every datatype, as raw bytes and as JSON
 * text, so a request is copies, not random draws and formatting. */
typedef struct lg_datapool lg_datapool_t;

/* Returns 0 and *out (caller frees with lg_datapool_destroy), or FS_ENOMEM. */
int lg_datapool_create(uint64_t seed, lg_datapool_t **out);
void lg_datapool_destroy(lg_datapool_t *p);

/* Builds one request body for model m: batch and dims drawn from o with
 * rng, binary or JSON, good or `bad`. Returns 0, or FS_ENOMEM / FS_ERANGE
 * (a body above 2 GiB) leaving *out empty. */
int lg_body_build(const lg_datapool_t *pool, const lg_model_t *m, const lg_opts_t *o,
                  lg_rng_t *rng, uint64_t *trace, int binary, lg_bad_t bad, lg_body_t *out);

/* The next value of a splitmix64 stream (the --trace-seed trace). */
uint64_t lg_splitmix64(uint64_t *state);

/* Frees the body; a zeroed body is fine. */
void lg_body_free(lg_body_t *b);

#ifdef __cplusplus
}
#endif
#endif
