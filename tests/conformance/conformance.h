/* conformance.h -- the ONNX conformance runner's pieces: one case, how it is
 * run, and how outputs are compared.
 *
 * A case is a model and its reference data in one of two layouts:
 *  - node-test: CASE/model.onnx with CASE/test_data_set_K/{input,output}_N.pb;
 *  - light model: DIR/NAME.onnx with DIR/NAME_output_0.pb and no inputs on
 *    disk; the inputs are generated the way ONNX's own light-model test
 *    makes them (see case.c).
 * runner.c finds cases and runs each in a forked child (case.c), which
 * sends one conf_result_t back through a pipe.
 *
 * Threading: one thread per process. */
#ifndef FS_TESTS_CONFORMANCE_H
#define FS_TESTS_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum conf_status {
    CONF_PASS = 0,
    CONF_FAIL = 1,
    CONF_SKIP = 2,
} conf_status_t;

#define CONF_TEXT_MAX 1024

/* What a child reports; fixed size, so one write() of it is atomic on a
 * pipe (it is below PIPE_BUF). */
typedef struct conf_result {
    int status;                  /* conf_status_t */
    char detail[CONF_TEXT_MAX];  /* FAIL: the first mismatch or the error; SKIP: the reason */
    double plan_ratio;           /* activation bytes / lower bound of the last plan; 0: none */
    unsigned long long plan_bytes; /* activation bytes of that plan */
} conf_result_t;

typedef struct conf_case {
    char *name;          /* relative to the directory given on the command line */
    char *model_path;    /* the .onnx file */
    char *data_dir;      /* node-test: the directory holding test_data_set_K/; light: NULL */
    char *light_output;  /* light: the expected output_0.pb; node-test: NULL */
} conf_case_t;

typedef struct conf_tolerance {
    double rtol;
    double atol;
} conf_tolerance_t;

/* The ONNX backend test defaults (onnx/backend/test/loader). */
#define CONF_DEFAULT_RTOL 1e-3
#define CONF_DEFAULT_ATOL 1e-7

/* Runs one case in this process: loads the model over a fresh host cache,
 * runs every data set, compares, destroys the model and checks the cache is
 * back to zero allocated bytes. Cannot fail: every outcome, errors
 * included, is written to *out. Nothing stays allocated afterwards. */
void conf_case_run(const conf_case_t *c, const char *device, const conf_tolerance_t *tol,
                   conf_result_t *out);

/* Compares `actual` with `expected` (output `index`, named `name` for the
 * message): dtype and shape exactly, integers and bools exactly, floats
 * within |a - e| <= atol + rtol * |e| with NaN equal to NaN and infinities
 * equal only to themselves. Returns true when they match; otherwise false
 * and a message naming the output, the element and both values in
 * msg. Cannot fail. */
bool conf_tensor_compare(const eng_tensor_t *expected, const eng_tensor_t *actual,
                         const conf_tolerance_t *tol, size_t index, const char *name, char *msg,
                         size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
