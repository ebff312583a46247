/* codec_fast.c -- the common KServe v2 infer request read straight off its
 * text, without a cJSON tree; codec.c's cJSON path reads everything else.
 *
 * Why. The cJSON path makes a node (a malloc and a memset) for every value,
 * finds keys by walking lists, copies the text for codec_lift.c, and frees
 * it all again: about 40k instructions and 16 allocations for the demo
 * MLP's request of 64 numbers, a third of the server's own work on it.
 * Read here in one pass, the request costs its few allocations (the
 * request, its inputs, each name and tensor) and about 20 instructions a
 * number.
 *
 * What it reads. A root object whose members are among "id", "model"
 * (a string or null), "version" (an integer, or a string of 1 to 18
 * digits, or null), "parameters" ({"binary_data_output": true|false}),
 * "inputs" (a non-empty array) and "outputs" (an array); an input is an
 * object of "name", "shape", "datatype" and either "data" or
 * "parameters": {"binary_data_size": N}; an output is an object of "name"
 * and "parameters": {"binary_data": true|false}. Each object holds each
 * key at most once, in any order. "data" is a flat array of JSON numbers
 * of at most 63 characters each (cJSON's limit); shape dims, "version" and
 * "binary_data_size" are integers written as digits alone, at most 15 of
 * them. Strings hold no backslash and no byte below 0x20; tokens are
 * separated by nothing but " \t\n\r".
 *
 * Anything else returns false before anything is kept -- an unknown or
 * repeated key, an escape, a nested "data" or one holding "NaN", a number
 * written "1.0" where an integer is due, other whitespace, a value that
 * fails a check, no memory -- and srv_infer_request_parse hands the body
 * to the cJSON path, which reads it from its start and words any error.
 *
 * The guarantee: a body this reader accepts, the cJSON path accepts too,
 * with the same request. The grammar above is a subset of JSON and of
 * cJSON's reading of it (cJSON copies unescaped string bytes as written,
 * and skips any byte up to 0x20 as space); a repeated key, of which cJSON
 * would take the first, is refused; each number is the double strtod reads
 * (fs_json_number_read rounds correctly; what it refuses, overflow and
 * underflow, goes to cJSON); and every value passes through the cJSON
 * path's own checks (srv_datatype_parse, srv_codec_number_put,
 * srv_codec_binary_take, srv_codec_outputs_check_unique), binary inputs
 * taking the binary section in input order as there. The fuzz target
 * "codec" compares the two readers on every input this one accepts. */
#include <stdlib.h>
#include <string.h>

#include "common/numtext.h"
#include "server/codec_impl.h"

/* The most characters of one number cJSON reads (its parse_number's
 * buffer); a longer number makes its parse fail. */
#define CJSON_NUMBER_MAX 63

/* The most digits of an integer read here: below 2^53, so exact in the
 * double the cJSON path would read it as. */
#define INT_DIGITS_MAX 15

/* A label for the shared checks' messages, which are never shown from
 * here: on any failure the cJSON path reads the body again and words it. */
#define LABEL "input"

typedef struct cursor {
    const char *p, *end;
} cursor_t;

/* A string's inside as written. */
typedef struct span {
    const char *s;
    size_t n;
} span_t;

static void ws_skip(cursor_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

/* Skips space, then takes `ch` if it is next. */
static bool take(cursor_t *c, char ch)
{
    ws_skip(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* Takes the literal `word` (true, false, null) if it is next. */
static bool take_word(cursor_t *c, const char *word, size_t n)
{
    ws_skip(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* A string with no backslash and no byte below 0x20. */
static bool string_read(cursor_t *c, span_t *out)
{
    if (!take(c, '"'))
        return false;
    const char *s = c->p;
    while (c->p < c->end && *c->p != '"') {
        unsigned char b = (unsigned char)*c->p;
        if (b < 0x20 || b == '\\')
            return false;
        c->p++;
    }
    if (c->p == c->end)
        return false;
    *out = (span_t){s, (size_t)(c->p - s)};
    c->p++;
    return true;
}

/* A key and its colon; *bit is the key's bit in `keys` (0 when the key is
 * not one of them, which the caller refuses), and a key seen before is
 * refused here: cJSON would take its first value. */
static bool key_read(cursor_t *c, const char *const *keys, unsigned *seen, unsigned *bit)
{
    span_t k;
    if (!string_read(c, &k) || !take(c, ':'))
        return false;
    *bit = 0;
    for (unsigned i = 0; keys[i]; i++) {
        if (strlen(keys[i]) == k.n && memcmp(keys[i], k.s, k.n) == 0) {
            *bit = 1u << i;
            break;
        }
    }
    if (*bit == 0 || (*seen & *bit))
        return false;
    *seen |= *bit;
    return true;
}

/* After a member: true and *more when a ',' follows, true and !*more at
 * the '}' or ']' that closes the container. */
static bool member_next(cursor_t *c, char close, bool *more)
{
    if (take(c, ',')) {
        *more = true;
        return true;
    }
    *more = false;
    return take(c, close);
}

/* A non-negative integer written as 1 to INT_DIGITS_MAX digits, without a
 * leading zero (cJSON would read "01" as 1; "1.0" and "1e2" stop at the
 * '.' or 'e', which no caller takes next). */
static bool integer_read(cursor_t *c, int64_t *out)
{
    ws_skip(c);
    const char *s = c->p;
    int64_t v = 0;
    while (c->p < c->end && (unsigned)(*c->p - '0') < 10 && c->p - s < INT_DIGITS_MAX + 1)
        v = v * 10 + (*c->p++ - '0');
    size_t n = (size_t)(c->p - s);
    if (n == 0 || n > INT_DIGITS_MAX || (n > 1 && s[0] == '0'))
        return false;
    *out = v;
    return true;
}

static bool bool_read(cursor_t *c, bool *out)
{
    if (take_word(c, "true", 4))
        *out = true;
    else if (take_word(c, "false", 5))
        *out = false;
    else
        return false;
    return true;
}

/* A string (malloc'ed copy into *out) or null (*out stays NULL). */
static bool string_or_null_read(cursor_t *c, char **out)
{
    if (take_word(c, "null", 4))
        return true;
    span_t s;
    return string_read(c, &s) && (*out = strndup(s.s, s.n)) != NULL;
}

/* "version": an integer, a string of 1 to 18 digits, or null (stays -1). */
static bool version_read(cursor_t *c, int64_t *out)
{
    ws_skip(c);
    if (take_word(c, "null", 4))
        return true;
    if (c->p < c->end && *c->p != '"')
        return integer_read(c, out);
    span_t s;
    if (!string_read(c, &s) || s.n == 0 || s.n > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if ((unsigned)(s.s[i] - '0') >= 10)
            return false;
        v = v * 10 + (s.s[i] - '0');
    }
    *out = v;
    return true;
}

/* {"key": true|false} or {} into *out, left alone when absent. */
static bool flag_object_read(cursor_t *c, const char *key, bool *out)
{
    const char *const keys[] = {key, NULL};
    unsigned seen = 0, bit;
    bool more = true;
    if (!take(c, '{'))
        return false;
    if (take(c, '}'))
        return true;
    while (more) {
        if (!key_read(c, keys, &seen, &bit) || !bool_read(c, out) || !member_next(c, '}', &more))
            return false;
    }
    return true;
}

/* ---- inputs --------------------------------------------------------------- */

/* A flat array of JSON numbers. With dst NULL it is only read, and
 * *count says how many it holds; else each is stored into dst (room for
 * cap of dtype dt) through the cJSON path's checks, and more than cap
 * fails. */
static bool data_read(cursor_t *c, eng_dtype_t dt, void *dst, size_t cap, size_t *count)
{
    size_t n = 0;
    bool more = true;
    if (!take(c, '['))
        return false;
    if (take(c, ']'))
        more = false;
    while (more) {
        ws_skip(c);
        const char *s = c->p;
        double d;
        c->p = fs_json_number_read(s, c->end, &d);
        if (!c->p || c->p - s > CJSON_NUMBER_MAX)
            return false;
        if (dst && (n >= cap || srv_codec_number_put(LABEL, dt, dst, n, d) != 0))
            return false;
        n++;
        if (c->p < c->end && *c->p == ',') /* the common case, first */
            c->p++;
        else if (!member_next(c, ']', &more))
            return false;
    }
    *count = n;
    return true;
}

static bool shape_read(cursor_t *c, eng_shape_t *shape)
{
    bool more = true;
    shape->rank = 0;
    if (!take(c, '['))
        return false;
    if (take(c, ']'))
        return true;
    while (more) {
        if (shape->rank == ENG_MAX_RANK || !integer_read(c, &shape->dims[shape->rank]))
            return false;
        shape->rank++;
        if (!member_next(c, ']', &more))
            return false;
    }
    return true;
}

static bool datatype_read(cursor_t *c, eng_dtype_t *out)
{
    span_t s;
    char name[8];
    if (!string_read(c, &s) || s.n >= sizeof name)
        return false;
    memcpy(name, s.s, s.n);
    name[s.n] = '\0';
    /* BYTES is the cJSON path's (codec_bytes.c): its elements are not
     * fixed-size numbers. */
    return srv_datatype_parse(name, out) == 0 && *out != ENG_DT_STRING;
}

enum { IN_NAME = 1, IN_SHAPE = 2, IN_DATATYPE = 4, IN_DATA = 8, IN_PARAMS = 16 };

/* What an input object said, and its tensor as far as it is known. */
typedef struct input_text {
    unsigned seen;                /* IN_* of the keys read so far */
    span_t name;
    eng_tensor_t t;               /* shape and dtype as read; data once "data" is */
    cursor_t data;                /* at the '[' of "data" read before its shape or dtype */
    bool data_pending;            /* data to read from `data` once both are known */
    int64_t binary_size;          /* -1: none */
} input_text_t;

/* The tensor's element count, refused where the cJSON path refuses it as
 * too large. */
static bool input_numel(const eng_tensor_t *t, size_t *numel)
{
    int64_t n = eng_shape_numel(&t->shape);
    if (n == INT64_MAX || (uint64_t)n > SIZE_MAX / eng_dtype_size(t->dtype))
        return false;
    *numel = (size_t)n;
    return true;
}

/* it->t's data (malloc'ed) from the "data" array at c: as many numbers as
 * the shape holds, through the cJSON path's checks. A shape of more
 * elements than the rest of the text could hold ("[1,1,..]": two bytes a
 * number) is refused before anything is allocated: the cJSON path counts
 * the numbers first, and a small body claiming a huge shape must not cost
 * its memory here either. */
static bool input_data(cursor_t *c, input_text_t *it)
{
    size_t numel, n = 0;
    if (!input_numel(&it->t, &numel) || numel > (size_t)(c->end - c->p) / 2)
        return false;
    size_t bytes = numel * eng_dtype_size(it->t.dtype);
    it->t.data = malloc(bytes ? bytes : 1);
    return it->t.data && data_read(c, it->t.dtype, it->t.data, numel, &n) && n == numel;
}

/* The value of input key `bit`. */
static bool input_member(cursor_t *c, unsigned bit, input_text_t *it)
{
    static const char *const param_keys[] = {"binary_data_size", NULL};
    size_t n;
    switch (bit) {
    case IN_NAME:
        return string_read(c, &it->name) && it->name.n > 0;
    case IN_SHAPE:
        return shape_read(c, &it->t.shape);
    case IN_DATATYPE:
        return datatype_read(c, &it->t.dtype);
    case IN_DATA:
        /* Straight into the tensor when its shape and dtype came first, as
         * clients write them; else read over now and again later. */
        if ((it->seen & (IN_SHAPE | IN_DATATYPE)) == (IN_SHAPE | IN_DATATYPE))
            return input_data(c, it);
        ws_skip(c);
        it->data = *c;
        it->data_pending = true;
        return data_read(c, ENG_DT_UNDEFINED, NULL, 0, &n);
    default: { /* IN_PARAMS */
        unsigned seen = 0, key;
        bool more = true;
        if (!take(c, '{'))
            return false;
        if (take(c, '}'))
            return true;
        while (more) {
            if (!key_read(c, param_keys, &seen, &key) || !integer_read(c, &it->binary_size) ||
                !member_next(c, '}', &more))
                return false;
        }
        return true;
    }
    }
}

/* One element of "inputs" into *in (name and data owned by it, or the
 * data borrowed from the binary section). */
static bool input_read(cursor_t *c, srv_binary_section_t *bin, srv_infer_input_t *in)
{
    static const char *const keys[] = {"name", "shape", "datatype", "data", "parameters", NULL};
    input_text_t it = {.binary_size = -1};
    unsigned bit;
    bool more = true, borrowed = false;
    if (!take(c, '{'))
        return false;
    while (more) {
        if (!key_read(c, keys, &it.seen, &bit) || !input_member(c, bit, &it) ||
            !member_next(c, '}', &more))
            goto fail;
    }
    /* Exactly one of "data" and "binary_data_size", as the cJSON path
     * requires. */
    if ((it.seen & (IN_NAME | IN_SHAPE | IN_DATATYPE)) != (IN_NAME | IN_SHAPE | IN_DATATYPE) ||
        ((it.seen & IN_DATA) != 0) == (it.binary_size >= 0))
        goto fail;
    if (it.data_pending) {
        if (!input_data(&it.data, &it))
            goto fail;
    } else if (it.binary_size >= 0) {
        size_t numel;
        if (!input_numel(&it.t, &numel) ||
            srv_codec_binary_take(LABEL, (double)it.binary_size,
                                  numel * eng_dtype_size(it.t.dtype), bin, &it.t, &borrowed) != 0)
            goto fail;
    }
    /* Whole: the array grows by realloc, so no field may be left unset. */
    *in = (srv_infer_input_t){.name = strndup(it.name.s, it.name.n), .tensor = it.t,
                              .borrowed = borrowed};
    if (!in->name)
        goto fail;
    return true;
fail:
    if (!borrowed)
        free(it.t.data);
    return false;
}

static bool inputs_read(cursor_t *c, srv_binary_section_t *bin, srv_infer_request_t *r)
{
    size_t cap = 0;
    bool more = true;
    if (!take(c, '['))
        return false;
    while (more) {
        if (r->n_inputs == cap) {
            cap = cap ? 2 * cap : 2;
            srv_infer_input_t *grown = realloc(r->inputs, cap * sizeof *grown);
            if (!grown)
                return false;
            r->inputs = grown;
        }
        if (!input_read(c, bin, &r->inputs[r->n_inputs]))
            return false;
        r->n_inputs++;
        if (!member_next(c, ']', &more))
            return false;
    }
    return bin->used == bin->len;
}

/* ---- outputs -------------------------------------------------------------- */

/* "outputs" at c. With r NULL it is only read, and *count says how many it
 * holds; else r->outputs gets them (room for *count), each binary as its
 * "binary_data" says or else as r->binary_output. */
static bool outputs_read(cursor_t *c, srv_infer_request_t *r, size_t *count)
{
    static const char *const keys[] = {"name", "parameters", NULL};
    size_t n = 0;
    bool more = true;
    if (!take(c, '['))
        return false;
    if (take(c, ']'))
        more = false;
    while (more) {
        unsigned seen = 0, bit;
        bool omore = true, binary = r && r->binary_output;
        span_t name = {0};
        if (!take(c, '{'))
            return false;
        while (omore) {
            if (!key_read(c, keys, &seen, &bit) ||
                !(bit == 1 ? string_read(c, &name) && name.n > 0
                           : flag_object_read(c, "binary_data", &binary)) ||
                !member_next(c, '}', &omore))
                return false;
        }
        if (!(seen & 1))
            return false;
        if (r) {
            r->outputs[n] = (srv_infer_output_t){.name = strndup(name.s, name.n),
                                                 .binary = binary};
            if (!r->outputs[n].name)
                return false;
            r->n_outputs++;
        }
        n++;
        if (!member_next(c, ']', &more))
            return false;
    }
    *count = n;
    return true;
}

/* ---- the whole body ------------------------------------------------------- */

enum { ROOT_ID = 1, ROOT_MODEL = 2, ROOT_VERSION = 4, ROOT_PARAMS = 8, ROOT_INPUTS = 16,
       ROOT_OUTPUTS = 32 };

/* The root object; outputs are read after it, once "parameters" (which
 * may follow them) has said how they are sent by default. */
static bool root_read(cursor_t *c, srv_binary_section_t *bin, srv_infer_request_t *r)
{
    static const char *const keys[] = {"id",     "model",   "version", "parameters",
                                       "inputs", "outputs", NULL};
    unsigned seen = 0, bit;
    bool more = true;
    cursor_t outputs = {0};
    size_t n_outputs = 0;
    if (!take(c, '{'))
        return false;
    while (more) {
        if (!key_read(c, keys, &seen, &bit))
            return false;
        bool ok;
        switch (bit) {
        case ROOT_ID:
            ok = string_or_null_read(c, &r->id);
            break;
        case ROOT_MODEL:
            ok = string_or_null_read(c, &r->model);
            break;
        case ROOT_VERSION:
            ok = version_read(c, &r->version);
            break;
        case ROOT_PARAMS:
            ok = flag_object_read(c, "binary_data_output", &r->binary_output);
            break;
        case ROOT_INPUTS:
            ok = inputs_read(c, bin, r);
            break;
        default: /* ROOT_OUTPUTS */
            ws_skip(c);
            outputs = *c;
            ok = outputs_read(c, NULL, &n_outputs);
            break;
        }
        if (!ok || !member_next(c, '}', &more))
            return false;
    }
    ws_skip(c);
    if (c->p != c->end || !(seen & ROOT_INPUTS))
        return false;
    if (n_outputs == 0)
        return true;
    r->outputs = calloc(n_outputs, sizeof *r->outputs);
    return r->outputs && outputs_read(&outputs, r, &n_outputs) &&
           srv_codec_outputs_check_unique(r) == 0;
}

bool srv_infer_request_parse_fast(const void *body, size_t len, size_t json_len,
                                  srv_infer_request_t **out)
{
    srv_binary_section_t bin = {(const uint8_t *)body + json_len, len - json_len, 0};
    cursor_t c = {body, (const char *)body + json_len};
    srv_infer_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return false;
    r->version = -1;
    if (!root_read(&c, &bin, r)) {
        srv_infer_request_free(r);
        return false;
    }
    *out = r;
    return true;
}
