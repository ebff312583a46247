/* strings.h -- text <-> number for string tensors (engine/tensor.h's
 * eng_string_t): what Cast does between strings and numbers.
 *
 * Numbers to text: integers in decimal; float, float16, bfloat16 and the
 * float8s as the shortest text that reads back as the same float ("0.1",
 * "1e+38": common/numtext.h, as numpy's str() of a float32 gives the
 * digits), double likewise as the shortest for a double; NaN, infinity and minus infinity
 * as "NaN", "INF" and "-INF" (the literals ONNX's Cast reserves). Every
 * result fits a string's record inline (at most 24 bytes), so a Cast to
 * string needs no memory beyond its output.
 * Text to numbers: a float target reads strtod's syntax (plain, scientific,
 * and "INF", "+INF", "-INF", "NaN" in any case); an integer target reads a
 * decimal integer, or failing that a float, which the Cast then converts
 * as it converts a double (ONNX: "100.5" to an integer may give 100).
 * Surrounding white space is allowed; anything else is an error naming the
 * element, not a silent 0 (ONNX leaves non-numeric strings undefined).
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_STRINGS_H
#define FS_ENGINE_STRINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a string parsed to: kind says which member is set. */
typedef struct eng_string_num {
    enum { ENG_NUM_F64, ENG_NUM_I64, ENG_NUM_U64 } kind;
    double f;
    int64_t i;
    uint64_t u;
} eng_string_num_t;

/* Parses s for a target of dtype `to` (float-like targets read a double;
 * integers and bool an integer, else a double). 0 and *out, or FS_EINVAL
 * with a message quoting the string (at most 40 bytes of it). */
int eng_string_parse(const eng_string_t *s, eng_dtype_t to, eng_string_num_t *out);

/* *out = the text of v (see above); as_float: the shortest for a float
 * (a float, float16, bfloat16 or float8 source), else for a double.
 * Cannot fail. */
void eng_string_from_f64(double v, bool as_float, eng_string_t *out);
void eng_string_from_i64(int64_t v, eng_string_t *out);
void eng_string_from_u64(uint64_t v, eng_string_t *out);

#ifdef __cplusplus
}
#endif
#endif
