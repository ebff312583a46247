/* codec_lift.c -- the numbers of a KServe request's "data" arrays, read
 * straight from the JSON text before cJSON reads the rest.
 *
 * Why. cJSON makes a node (a malloc and a memset) for every number and
 * reads it with strtod after copying it and asking localeconv for the
 * decimal point: some 150 ns a number, most of a JSON request's decoding.
 * Read off the text with fs_json_number_read (common/numtext.h), a number
 * costs about a tenth of that, and no node.
 *
 * The algorithm. One pass follows the text's structure only as far as it
 * must: the root object, its first "inputs" member, that array's objects,
 * and each one's first "data" member; every other value is stepped over
 * unread (strings to their closing quote, arrays and objects to their
 * matching bracket). A "data" array that is flat and holds JSON numbers
 * alone, each at most 63 characters and one that fs_json_number_read reads
 * (it refuses overflow, and underflow to zero), is lifted: its numbers go into
 * a list. Once the pass has reached the root's closing brace, a copy of the
 * text is made with the inside of every lifted array overwritten by
 * spaces; cJSON reads the copy, where that "data" is an empty array at the
 * same byte offsets, and the codec takes the list in its place.
 *
 * Anything else is left to cJSON, as before: an array holding a string
 * ("NaN"), a bool, a nested array, or a number outside JSON's grammar
 * ("01", "1.", which cJSON's strtod would take) or longer than the 63
 * characters cJSON reads of one; the "data" of an input object with a key
 * that holds an escape (it might decode to "data"); the whole request when
 * a root key holds an escape (it might decode to "inputs"), when the pass
 * meets text it does not expect (cJSON then reports where), or when memory
 * runs short.
 *
 * The guarantee: the codec reads the same values and reports the same
 * errors as it would from the original text. Only flat arrays of valid
 * numbers are blanked, so the copy is valid JSON exactly when the text is,
 * with the same structure and offsets (and the codec reports a parse
 * failure from the original text all the same); cJSON takes the first of
 * two members of one name, as the pass does; each number is the double
 * strtod reads (both round correctly), to which the codec then applies the
 * checks it applies to a cJSON number. */
#include "server/codec_lift.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/numtext.h"

/* The most characters of one number cJSON reads (its parse_number's
 * buffer): a longer one makes its parse fail, so such an array is left to
 * it. */
#define CJSON_NUMBER_MAX 63

typedef struct pass {
    const char *p, *end;
    const char *text;
    srv_lift_t *out;
    size_t *blank;                /* [2k], [2k+1]: the span to blank of out->inputs[k] */
} pass_t;

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void ws_skip(pass_t *s)
{
    while (s->p < s->end && is_ws(*s->p))
        s->p++;
}

static bool at(const pass_t *s, char c)
{
    return s->p < s->end && *s->p == c;
}

/* At a '"': steps past the string. *raw, *raw_len: its inside as written;
 * *escaped: whether it holds a backslash. false when the text ends first. */
static bool string_step(pass_t *s, const char **raw, size_t *raw_len, bool *escaped)
{
    const char *start = ++s->p;
    *escaped = false;
    while (s->p < s->end && *s->p != '"') {
        if (*s->p == '\\') {
            if (s->end - s->p < 2)
                return false;
            *escaped = true;
            s->p++;
        }
        s->p++;
    }
    if (s->p >= s->end)
        return false;
    *raw = start;
    *raw_len = (size_t)(s->p - start);
    s->p++;
    return true;
}

/* Steps over one value of any kind without checking it (cJSON does): a
 * string, an array or object to its matching bracket, or a scalar up to
 * the next ',', ']', '}' or space. false when the text ends first. */
static bool value_step(pass_t *s)
{
    size_t depth = 0;
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '"') {
            const char *raw;
            size_t n;
            bool esc;
            if (!string_step(s, &raw, &n, &esc))
                return false;
            if (depth == 0)
                return true;
        } else if (c == '[' || c == '{') {
            depth++;
            s->p++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return true; /* closes the container around the value */
            s->p++;
            if (--depth == 0)
                return true;
        } else if (depth == 0 && (c == ',' || is_ws(c))) {
            return true;
        } else {
            s->p++;
        }
    }
    return false;
}

/* At a '[': reads a flat, non-empty array of numbers into *got (values
 * malloc'ed, the caller's to free on either result) and steps past it.
 * false when it is anything else, or memory runs short. */
static bool numbers_read(pass_t *s, srv_lifted_t *got)
{
    size_t cap = 0;
    s->p++;
    for (;;) {
        ws_skip(s);
        const char *t = s->p;
        double d;
        s->p = fs_json_number_read(t, s->end, &d);
        if (!s->p || s->p - t > CJSON_NUMBER_MAX)
            return false;
        if (got->n == cap) {
            cap = cap ? 2 * cap : 64;
            double *grown = cap <= SIZE_MAX / sizeof *grown
                                ? realloc(got->values, cap * sizeof *grown) : NULL;
            if (!grown)
                return false;
            got->values = grown;
        }
        got->values[got->n++] = d;
        ws_skip(s);
        if (at(s, ']')) {
            s->p++;
            return true;
        }
        if (!at(s, ','))
            return false;
        s->p++;
    }
}

/* Keeps *got as input k's data, whose array's brackets are at open and
 * close. false when memory runs short (got is then freed). */
static bool lifted_keep(pass_t *s, size_t k, srv_lifted_t *got, const char *open,
                        const char *close)
{
    srv_lift_t *l = s->out;
    if (k >= l->n_inputs) {
        size_t n = k + 1 > 2 * l->n_inputs ? k + 1 : 2 * l->n_inputs;
        srv_lifted_t *grown = realloc(l->inputs, n * sizeof *grown);
        size_t *blank = grown ? realloc(s->blank, 2 * n * sizeof *blank) : NULL;
        if (grown)
            l->inputs = grown;
        if (!grown || !blank) {
            free(got->values);
            return false;
        }
        s->blank = blank;
        memset(l->inputs + l->n_inputs, 0, (n - l->n_inputs) * sizeof *grown);
        l->n_inputs = n;
    }
    got->lifted = true;
    l->inputs[k] = *got;
    s->blank[2 * k] = (size_t)(open + 1 - s->text);
    s->blank[2 * k + 1] = (size_t)(close - s->text);
    return true;
}

/* At a '{' of "inputs": element k. Steps past it, lifting its first
 * "data" when it can. false when the text is not as expected or memory
 * runs short. */
static bool input_pass(pass_t *s, size_t k)
{
    srv_lifted_t got = {0};
    const char *open = NULL, *close = NULL;
    bool seen_data = false, any_escape = false;
    s->p++;
    ws_skip(s);
    if (at(s, '}')) {
        s->p++;
        return true;
    }
    for (;;) {
        const char *key;
        size_t n;
        bool esc;
        ws_skip(s);
        if (!at(s, '"') || !string_step(s, &key, &n, &esc))
            goto fail;
        any_escape = any_escape || esc;
        ws_skip(s);
        if (!at(s, ':'))
            goto fail;
        s->p++;
        ws_skip(s);
        if (!seen_data && n == 4 && memcmp(key, "data", 4) == 0) {
            seen_data = true;
            const char *start = s->p;
            if (at(s, '[') && numbers_read(s, &got)) {
                open = start;
                close = s->p - 1;
            } else {
                free(got.values);
                got = (srv_lifted_t){0};
                s->p = start;
                if (!value_step(s))
                    goto fail;
            }
        } else if (!value_step(s)) {
            goto fail;
        }
        ws_skip(s);
        if (at(s, '}')) {
            s->p++;
            break;
        }
        if (!at(s, ','))
            goto fail;
        s->p++;
    }
    if (open && !any_escape)
        return lifted_keep(s, k, &got, open, close);
    free(got.values);
    return true;
fail:
    free(got.values);
    return false;
}

/* At the '[' of "inputs". */
static bool inputs_pass(pass_t *s)
{
    s->p++;
    ws_skip(s);
    if (at(s, ']')) {
        s->p++;
        return true;
    }
    for (size_t k = 0;; k++) {
        ws_skip(s);
        if (!(at(s, '{') ? input_pass(s, k) : value_step(s)))
            return false;
        ws_skip(s);
        if (at(s, ']')) {
            s->p++;
            return true;
        }
        if (!at(s, ','))
            return false;
        s->p++;
    }
}

/* The root object, to its closing brace. */
static bool root_pass(pass_t *s)
{
    bool seen_inputs = false;
    ws_skip(s);
    if (!at(s, '{'))
        return false;
    s->p++;
    ws_skip(s);
    if (at(s, '}'))
        return true;
    for (;;) {
        const char *key;
        size_t n;
        bool esc;
        ws_skip(s);
        if (!at(s, '"') || !string_step(s, &key, &n, &esc) || esc)
            return false;
        ws_skip(s);
        if (!at(s, ':'))
            return false;
        s->p++;
        ws_skip(s);
        bool ok;
        if (!seen_inputs && n == 6 && memcmp(key, "inputs", 6) == 0) {
            seen_inputs = true;
            ok = at(s, '[') ? inputs_pass(s) : value_step(s);
        } else {
            ok = value_step(s);
        }
        if (!ok)
            return false;
        ws_skip(s);
        if (at(s, '}'))
            return true;
        if (!at(s, ','))
            return false;
        s->p++;
    }
}

void srv_lift_data(const char *text, size_t len, srv_lift_t *out)
{
    *out = (srv_lift_t){0};
    pass_t s = {.p = text, .end = text + len, .text = text, .out = out};
    bool any = false;
    if (root_pass(&s)) {
        for (size_t k = 0; k < out->n_inputs && !any; k++)
            any = out->inputs[k].lifted;
    }
    if (any && (out->text = malloc(len))) {
        memcpy(out->text, text, len);
        for (size_t k = 0; k < out->n_inputs; k++)
            if (out->inputs[k].lifted)
                memset(out->text + s.blank[2 * k], ' ', s.blank[2 * k + 1] - s.blank[2 * k]);
    }
    free(s.blank);
    if (!out->text)
        srv_lift_free(out);
}

const srv_lifted_t *srv_lift_input(const srv_lift_t *l, size_t idx)
{
    return l->text && idx < l->n_inputs && l->inputs[idx].lifted ? &l->inputs[idx] : NULL;
}

void srv_lift_free(srv_lift_t *l)
{
    if (!l)
        return;
    for (size_t k = 0; k < l->n_inputs; k++)
        free(l->inputs[k].values);
    free(l->inputs);
    free(l->text);
    *l = (srv_lift_t){0};
}
