/* codec_lift.h -- the numbers of a KServe request's "data" arrays, read
 * straight from the JSON text before cJSON reads the rest (codec_lift.c
 * has the algorithm and its guarantee). Internal to the request codec.
 *
 * Threading: pure functions over their arguments. */
#ifndef FS_SERVER_CODEC_LIFT_H
#define FS_SERVER_CODEC_LIFT_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The "data" of one element of "inputs". */
typedef struct srv_lifted {
    bool lifted;                  /* false: read "data" from the cJSON tree as usual */
    size_t n;                     /* how many numbers */
    double *values;               /* malloc'ed; each number as strtod reads it */
} srv_lifted_t;

typedef struct srv_lift {
    /* The text with every lifted array's inside blanked to spaces, so that
     * cJSON sees "data": [ ] at the same byte offsets; NULL when nothing
     * was lifted (read the original text). */
    char *text;
    srv_lifted_t *inputs;         /* by position in "inputs"; n_inputs of them (capacity) */
    size_t n_inputs;
} srv_lift_t;

/* Lifts the flat all-number "data" arrays of the request's inputs out of
 * `text` (len bytes, borrowed, not NUL-terminated) into *out, which the
 * caller frees with srv_lift_free. Cannot fail: when memory runs short, or
 * nothing can be lifted, *out is left empty (out->text NULL) and the text
 * is read as it is. */
void srv_lift_data(const char *text, size_t len, srv_lift_t *out);

/* The lifted numbers of input `idx`, or NULL when it was not lifted. */
const srv_lifted_t *srv_lift_input(const srv_lift_t *l, size_t idx);

/* Frees what srv_lift_data made and empties *l. NULL or an empty lift is a
 * no-op. */
void srv_lift_free(srv_lift_t *l);

#ifdef __cplusplus
}
#endif
#endif
