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
 * Two comparison rules (compare.c): a node test (a case with a directory
 * named `node` on its path, as ONNX's backend/test/data/node) keeps ONNX's
 * element-wise assert_allclose rule; every other case -- light models,
 * pytorch-converted, the model zoo -- is a model case, compared against the
 * output's scale, |actual - expected| <= atol + atol_rel * max|expected|,
 * with its worst error reported.
 *
 * Threading: one thread per process. */
#ifndef FS_TESTS_CONFORMANCE_H
#define FS_TESTS_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"
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

/* How a case's float outputs are judged. */
typedef enum conf_rule {
    CONF_RULE_NODE = 0,   /* per element: |a - e| <= atol + rtol * |e| (ONNX's backend test) */
    CONF_RULE_MODEL = 1,  /* per output: |a - e| <= atol + atol_rel * max|e| */
} conf_rule_t;

#define CONF_OUTPUT_NAME_MAX 64

/* The worst error over the float outputs compared so far: the output whose
 * largest |actual - expected| is the largest fraction of its max|expected|.
 * n_outputs == 0: no float output was compared (nothing to report). */
typedef struct conf_error {
    double max_abs;       /* max |actual - expected| of that output; INFINITY for a NaN or
                           * infinity on one side only */
    double max_expected;  /* max |expected| over its finite elements */
    double rel;           /* max_abs / max_expected (0 / 0 is 0; x / 0 is INFINITY) */
    double tol_rel;       /* the relative tolerance it was held to: rtol (node) or atol_rel */
    unsigned n_outputs;   /* float outputs compared, over every data set */
    char output[CONF_OUTPUT_NAME_MAX]; /* its name, cut to fit */
} conf_error_t;

/* What a child reports; fixed size, so one write() of it is atomic on a
 * pipe (it is below PIPE_BUF). */
typedef struct conf_result {
    int status;                  /* conf_status_t */
    char detail[CONF_TEXT_MAX];  /* FAIL: the first mismatch or the error; SKIP: the reason */
    double plan_ratio;           /* activation bytes / lower bound of the last plan; 0: none */
    unsigned long long plan_bytes; /* activation bytes of that plan */
    conf_error_t error;          /* the worst error of the outputs compared */
} conf_result_t;

typedef struct conf_case {
    char *name;          /* relative to the directory given on the command line */
    char *model_path;    /* the .onnx file */
    char *data_dir;      /* node-test: the directory holding test_data_set_K/; light: NULL */
    char *light_output;  /* light: the expected output_0.pb; node-test: NULL */
    int rule;            /* conf_rule_t, from conf_case_rule(model_path) */
} conf_case_t;

typedef struct conf_tolerance {
    double rtol;           /* node rule */
    double atol;           /* both rules: the absolute floor */
    double atol_rel;       /* model rule, float32 and float64 outputs */
    double atol_rel_half;  /* model rule, float16 and bfloat16 outputs */
} conf_tolerance_t;

/* The ONNX backend test defaults (onnx/backend/test/loader). */
#define CONF_DEFAULT_RTOL 1e-3
#define CONF_DEFAULT_ATOL 1e-7
/* The model rule's defaults: a thousandth of the output's largest magnitude
 * for float32 (a few ulps of float32 accumulated over a deep graph), a
 * hundredth for half types (float16 keeps 11 significant bits, so one
 * rounding is already 5e-4 of the value). */
#define CONF_DEFAULT_ATOL_REL 1e-3
#define CONF_DEFAULT_ATOL_REL_HALF 1e-2
/* A model case's directory may hold this file: one number, the atol_rel
 * for every float output of that case (quantized models, whose reference
 * is one runtime's integer arithmetic, need steps of the output scale). */
#define CONF_TOLERANCE_FILE "tolerance.txt"

/* The rule for the case whose model is at model_path: CONF_RULE_NODE when a
 * directory named `node` is on the path (resolved with realpath when it
 * exists, so `.` inside node/ counts), CONF_RULE_MODEL otherwise. Cannot
 * fail. */
conf_rule_t conf_case_rule(const char *model_path);

/* Runs one case in this process: loads the model on `device` at
 * `precision` (ENG_PREC_FP32: as the model says) over a fresh cache,
 * runs every data set, compares, destroys the model and checks the cache is
 * back to zero allocated bytes. Cannot fail: every outcome, errors
 * included, is written to *out (a precision the device lacks is a SKIP
 * naming it). Nothing stays allocated afterwards. */
void conf_case_run(const conf_case_t *c, const char *device, eng_precision_t precision,
                   const conf_tolerance_t *tol, conf_result_t *out);

/* Compares `actual` with `expected` (output `index`, named `name` for the
 * message): dtype and shape exactly, integers and bools exactly, floats
 * under `rule` -- CONF_RULE_NODE: |a - e| <= atol + rtol * |e|;
 * CONF_RULE_MODEL: |a - e| <= atol + atol_rel * max|e| (atol_rel_half for
 * float16 and bfloat16) -- with NaN equal to NaN and infinities equal only
 * to themselves. A float output's error is merged into *worst (may be
 * NULL; zero it before the first output). Returns true when they match;
 * otherwise false and a message naming the output, the element, both
 * values and the tolerance in msg. Cannot fail. */
bool conf_tensor_compare(const eng_tensor_t *expected, const eng_tensor_t *actual,
                         const conf_tolerance_t *tol, conf_rule_t rule, size_t index,
                         const char *name, conf_error_t *worst, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
