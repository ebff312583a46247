/* codec.c -- the KServe v2 infer request: parsed with cJSON, with Triton's
 * binary tensor extension, and bound to a model's inputs. The common
 * request is first read by codec_fast.c without a tree; what it does not
 * recognise comes here, where every error is worded. The numbers of flat
 * "data" arrays are read off the text before cJSON reads the rest
 * (codec_lift.c: the same values and errors, at a tenth of the cost). The
 * response encoder is in codec_response.c, srv_buf in buf.c.
 *
 * Limits a client can meet:
 * - cJSON keeps a JSON number only as a double. An integer of magnitude up
 *   to 2^53 - 1 is read exactly; beyond it a different integer in the text
 *   may round to the value read, so INT64/UINT64 "data" (and shapes,
 *   "version", "binary_data_size") refuse larger magnitudes, saying that
 *   such tensors must be sent as binary data. A value like 3.0000000000000001
 *   reads as the integer 3, as in any double-based JSON reader.
 * - Nested "data" is flattened depth first; only its leaf count is checked
 *   against the shape, so [[1, 2], [3]] is taken for shape [3].
 * - Float inputs also take the strings "NaN", "Infinity" and "-Infinity",
 *   the forms the encoder writes, so a response's data can be sent back.
 * - Binary BOOL bytes must be 0 or 1.
 * - BYTES (strings): JSON "data" holds strings only; binary data, raw
 *   requests and shared memory hold Triton's serialized elements (a 4-byte
 *   little-endian length, then the bytes), checked to the last byte
 *   (codec_bytes.c).
 * - Extra keys are ignored, as the protocol allows; a known key of the
 *   wrong type is an error. An output's "class_count" (Triton's
 *   classification, whose results are BYTES) and the request's
 *   "sequence_id", "sequence_start" and "sequence_end" (Triton's sequence
 *   batching) are read here and checked by the sequence batcher
 *   (engine/sequence.c); a model without it refuses them. A tensor's "shared_memory_region"
 *   (Triton's system shared memory) is parsed here and resolved by
 *   infer.c against the registered regions (shm.c). */
#include "server/codec.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/numtext.h"
#include "engine/half.h"
#include "server/codec_bytes.h"
#include "server/codec_impl.h"
#include "server/codec_lift.h"

/* 2^53 - 1: the largest integer below which a double holds every integer. */
#define JSON_INT_MAX 9007199254740991.0

/* ---- datatypes ------------------------------------------------------------ */

static const struct {
    const char *name;
    eng_dtype_t dtype;
} datatypes[] = {
    {"BOOL", ENG_DT_BOOL},     {"UINT8", ENG_DT_UINT8},   {"UINT16", ENG_DT_UINT16},
    {"UINT32", ENG_DT_UINT32}, {"UINT64", ENG_DT_UINT64}, {"INT8", ENG_DT_INT8},
    {"INT16", ENG_DT_INT16},   {"INT32", ENG_DT_INT32},   {"INT64", ENG_DT_INT64},
    {"FP16", ENG_DT_FLOAT16},  {"BF16", ENG_DT_BFLOAT16}, {"FP32", ENG_DT_FLOAT},
    {"FP64", ENG_DT_DOUBLE},   {"BYTES", ENG_DT_STRING},
};

#define N_DATATYPES (sizeof datatypes / sizeof datatypes[0])

const char *srv_datatype_name(eng_dtype_t dt)
{
    for (size_t i = 0; i < N_DATATYPES; i++)
        if (datatypes[i].dtype == dt)
            return datatypes[i].name;
    return NULL;
}

int srv_datatype_parse(const char *name, eng_dtype_t *out)
{
    if (!name)
        return fs_err(FS_EINVAL, "no datatype given");
    for (size_t i = 0; i < N_DATATYPES; i++) {
        if (strcmp(datatypes[i].name, name) == 0) {
            *out = datatypes[i].dtype;
            return 0;
        }
    }
    return fs_err(FS_EINVAL,
                  "unknown datatype \"%.64s\" (expected BOOL, UINT8, UINT16, UINT32, UINT64, "
                  "INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64 or BYTES)",
                  name);
}

/* The protocol's name, or the engine's for a dtype the protocol lacks. */
static const char *dtype_label(eng_dtype_t dt)
{
    const char *name = srv_datatype_name(dt);
    return name ? name : eng_dtype_name(dt);
}

/* A number for a message: the shortest text that reads back as it ("inf"
 * for one that overflowed a double). */
static const char *number_describe(double d, char *buf, size_t len)
{
    char text[FS_NUMTEXT_MAX];
    size_t n = fs_double_format(text, d);
    if (n)
        snprintf(buf, len, "%.*s", (int)n, text);
    else
        snprintf(buf, len, "%g", d);
    return buf;
}

/* A JSON value for a message: a number as read, a short string quoted, or
 * what kind of value it is. */
static const char *json_describe(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsNumber(v)) {
        number_describe(v->valuedouble, buf, len);
    } else if (cJSON_IsString(v)) {
        snprintf(buf, len, "\"%.32s\"", v->valuestring);
    } else {
        snprintf(buf, len, "%s",
                 cJSON_IsTrue(v)    ? "true"
                 : cJSON_IsFalse(v) ? "false"
                 : cJSON_IsNull(v)  ? "null"
                 : cJSON_IsArray(v) ? "an array"
                                    : "an object");
    }
    return buf;
}

/* A JSON number that is an integer in [0, 2^53 - 1], or -1. */
static double json_count(const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    return d >= 0 && d <= JSON_INT_MAX && d == floor(d) ? d : -1;
}

/* ---- request: tensor data ------------------------------------------------- */

/* Where the leaves of one input's "data" go. */
typedef struct data_walk {
    const char *label;    /* "input 'x'" for messages */
    eng_dtype_t dtype;
    void *dst;            /* numel elements of dtype */
    size_t i;             /* the next leaf's index */
} data_walk_t;

/* How deep an input's "data" may nest its arrays. A tensor has at most
 * ENG_MAX_RANK dims, so regular data nests no deeper than that; past it
 * the nesting is only deep, not regular. Triton refuses JSON nested past
 * 100 (its http_test.py test_json_recursion_depth_limit), and so does this
 * codec for "data" (elsewhere cJSON's own limit, 1000, bounds it). */
#define DATA_DEPTH_MAX 100

/* What one walk over an input's "data" learns: how many values it holds,
 * how deep its arrays nest (depth, the outer one 1), and whether it nests
 * regularly -- every array at one depth the same length (lens[depth], -1
 * until seen), every value at one depth (leaf_depth, -1 until seen).
 * cJSON's nesting limit bounds the depth. */
typedef struct data_form {
    size_t leaves;
    bool regular;
    int leaf_depth;
    int depth;
    int lens[CJSON_NESTING_LIMIT + 2];
} data_form_t;

static void json_data_form(const cJSON *v, int depth, data_form_t *f)
{
    if (cJSON_IsArray(v) && depth + 1 > f->depth)
        f->depth = depth + 1;
    if (!cJSON_IsArray(v)) {
        f->leaves++;
        if (f->leaf_depth < 0)
            f->leaf_depth = depth;
        f->regular = f->regular && f->leaf_depth == depth;
        return;
    }
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, v)
    {
        json_data_form(c, depth + 1, f);
        n++;
    }
    if (f->lens[depth] < 0)
        f->lens[depth] = n;
    f->regular = f->regular && f->lens[depth] == n;
}

/* "input 'x': value 300 at index 5 " + before + "INT8" + after; `val`
 * describes the value. */
static int leaf_err(const data_walk_t *w, const char *val, size_t i, const char *before,
                    const char *after)
{
    return fs_err(FS_EINVAL, "%s: value %s at index %zu %s%s%s", w->label, val, i, before,
                  srv_datatype_name(w->dtype), after);
}

static int leaf_err_json(const data_walk_t *w, const cJSON *v, size_t i, const char *before,
                         const char *after)
{
    char val[64];
    return leaf_err(w, json_describe(v, val, sizeof val), i, before, after);
}

static int leaf_err_number(const data_walk_t *w, double d, size_t i, const char *before,
                           const char *after)
{
    char val[64];
    return leaf_err(w, number_describe(d, val, sizeof val), i, before, after);
}

/* An integral number in [lo, hi]. 64-bit types pass lo/hi at +-(2^53 - 1)
 * and get the message saying why. */
static int leaf_integer(const data_walk_t *w, double d, size_t i, double lo, double hi)
{
    if (isfinite(d) && d != floor(d))
        return leaf_err_number(w, d, i, "is not an integer, as ", " needs");
    if (!(d >= lo && d <= hi)) {
        bool wide = w->dtype == ENG_DT_INT64 || w->dtype == ENG_DT_UINT64;
        /* Inclusive: INT64_MAX and UINT64_MAX read as 2^63 and 2^64. */
        bool fits = w->dtype == ENG_DT_INT64 ? fabs(d) <= 0x1p63 : d >= 0 && d <= 0x1p64;
        if (wide && fits)
            return leaf_err_number(w, d, i,
                                   "is beyond 2^53 - 1, the largest integer read exactly from "
                                   "JSON: send ",
                                   " tensors holding such values as binary data");
        return leaf_err_number(w, d, i, "is out of range for ", "");
    }
    return 0;
}

/* Stores d (a number, or the NaN or infinity a string named) at index i of
 * a floating-point dtype; a finite value that would round to infinity is
 * out of range. */
static int leaf_real_put(const data_walk_t *w, double d, size_t i)
{
    bool finite = isfinite(d);
    if (w->dtype == ENG_DT_DOUBLE) {
        ((double *)w->dst)[i] = d;
        return 0;
    }
    if (finite && fabs(d) >= SRV_FLOAT_OVERFLOW)
        return leaf_err_number(w, d, i, "is out of range for ", "");
    float f = (float)d;
    if (w->dtype == ENG_DT_FLOAT) {
        ((float *)w->dst)[i] = f;
        return 0;
    }
    bool half = w->dtype == ENG_DT_FLOAT16;
    uint16_t h = half ? eng_float_to_half(f) : eng_float_to_bf16(f);
    if (finite && (h & 0x7fffu) == (half ? 0x7c00u : 0x7f80u))
        return leaf_err_number(w, d, i, "is out of range for ", "");
    ((uint16_t *)w->dst)[i] = h;
    return 0;
}

/* The case of leaf_number for an integer dtype: the range JSON can hold it
 * in, and its C type. */
#define LEAF_INTEGER(DT, T, LO, HI)                                            \
    case DT:                                                                   \
        rc = leaf_integer(w, d, i, LO, HI);                                    \
        ((T *)w->dst)[i] = rc ? 0 : (T)d;                                      \
        return rc;

/* A JSON number (from the cJSON tree, or lifted: codec_lift.h) stored at
 * index i. A JSON number is always finite: one that reads as infinite
 * (1e400) overflowed even a double and is out of range (infinity is asked
 * for by name). */
static int leaf_number(const data_walk_t *w, double d, size_t i)
{
    int rc = 0;
    switch (w->dtype) {
    case ENG_DT_BOOL:
        return leaf_err_number(w, d, i, "is not true or false, as ", " needs");
    LEAF_INTEGER(ENG_DT_UINT8, uint8_t, 0, UINT8_MAX)
    LEAF_INTEGER(ENG_DT_UINT16, uint16_t, 0, UINT16_MAX)
    LEAF_INTEGER(ENG_DT_UINT32, uint32_t, 0, UINT32_MAX)
    LEAF_INTEGER(ENG_DT_UINT64, uint64_t, 0, JSON_INT_MAX)
    LEAF_INTEGER(ENG_DT_INT8, int8_t, INT8_MIN, INT8_MAX)
    LEAF_INTEGER(ENG_DT_INT16, int16_t, INT16_MIN, INT16_MAX)
    LEAF_INTEGER(ENG_DT_INT32, int32_t, INT32_MIN, INT32_MAX)
    LEAF_INTEGER(ENG_DT_INT64, int64_t, -JSON_INT_MAX, JSON_INT_MAX)
    case ENG_DT_FLOAT:
    case ENG_DT_DOUBLE:
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16:
        if (!isfinite(d))
            return leaf_err_number(w, d, i, "is out of range for ", "");
        return leaf_real_put(w, d, i);
    default:
        return fs_err(FS_EINVAL, "%s: datatype %s cannot be read from JSON", w->label,
                      dtype_label(w->dtype));
    }
}

#undef LEAF_INTEGER

int srv_codec_number_put_any(const char *label, eng_dtype_t dt, void *dst, size_t i, double d)
{
    data_walk_t w = {.label = label, .dtype = dt, .dst = dst};
    return leaf_number(&w, d, i);
}

/* A leaf that is not a number: true or false for BOOL; "NaN", "Infinity"
 * or "-Infinity" for a floating-point dtype; anything else is refused. */
static int leaf_other(const data_walk_t *w, const cJSON *v, size_t i)
{
    switch (w->dtype) {
    case ENG_DT_BOOL:
        if (!cJSON_IsBool(v))
            return leaf_err_json(w, v, i, "is not true or false, as ", " needs");
        ((uint8_t *)w->dst)[i] = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case ENG_DT_FLOAT:
    case ENG_DT_DOUBLE:
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16: {
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        if (strcmp(s, "NaN") == 0)
            return leaf_real_put(w, NAN, i);
        if (strcmp(s, "Infinity") == 0 || strcmp(s, "-Infinity") == 0)
            return leaf_real_put(w, s[0] == '-' ? -INFINITY : INFINITY, i);
        return leaf_err_json(w, v, i,
                             "is not a number, \"NaN\", \"Infinity\" or \"-Infinity\", as ",
                             " needs");
    }
    case ENG_DT_UINT8:
    case ENG_DT_UINT16:
    case ENG_DT_UINT32:
    case ENG_DT_UINT64:
    case ENG_DT_INT8:
    case ENG_DT_INT16:
    case ENG_DT_INT32:
    case ENG_DT_INT64:
        return leaf_err_json(w, v, i, "is not a number, as ", " needs");
    default:
        return fs_err(FS_EINVAL, "%s: datatype %s cannot be read from JSON", w->label,
                      dtype_label(w->dtype));
    }
}

static int leaf_store(data_walk_t *w, const cJSON *v)
{
    size_t i = w->i++;
    return cJSON_IsNumber(v) ? leaf_number(w, v->valuedouble, i) : leaf_other(w, v, i);
}

/* Depth first; cJSON's nesting limit bounds the recursion. */
static int json_leaves_store(data_walk_t *w, const cJSON *v)
{
    if (!cJSON_IsArray(v))
        return leaf_store(w, v);
    const cJSON *c;
    cJSON_ArrayForEach(c, v)
    {
        int rc = json_leaves_store(w, c);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- request: one input --------------------------------------------------- */

static int shape_parse(const cJSON *js, const char *label, eng_shape_t *shape)
{
    if (!cJSON_IsArray(js))
        return fs_err(FS_EINVAL, "%s: \"shape\" must be an array of non-negative integers",
                      label);
    int rank = cJSON_GetArraySize(js);
    if (rank > ENG_MAX_RANK)
        return fs_err(FS_EINVAL, "%s: shape has %d dims; at most %d are supported", label, rank,
                      ENG_MAX_RANK);
    shape->rank = rank;
    const cJSON *d;
    int k = 0;
    cJSON_ArrayForEach(d, js)
    {
        double v = json_count(d);
        if (v < 0) {
            char val[64];
            bool huge = cJSON_IsNumber(d) && d->valuedouble > JSON_INT_MAX;
            return fs_err(FS_EINVAL, "%s: shape dim %d is %s, %s", label, k,
                          json_describe(d, val, sizeof val),
                          huge ? "past 2^53 - 1, the largest dim a JSON shape carries exactly"
                               : "not a non-negative integer");
        }
        shape->dims[k++] = (int64_t)v;
    }
    return 0;
}

/* A BYTES input's data from the next binary_data_size bytes of the
 * section, in Triton's serialized layout (codec_bytes.h), decoded into a
 * block the tensor owns. 0, or FS_EINVAL / FS_ENOMEM naming `label`. */
static int input_binary_bytes(const char *label, const cJSON *size, srv_binary_section_t *bin,
                              eng_tensor_t *t)
{
    double n = json_count(size);
    char val[64];
    if (n < 0)
        return fs_err(FS_EINVAL, "%s: \"binary_data_size\" is %s, not a non-negative integer",
                      label, json_describe(size, val, sizeof val));
    if (n > (double)(bin->len - bin->used))
        return fs_err(FS_EINVAL, "%s: binary_data_size is %.0f but only %zu bytes of binary data "
                      "are left", label, n, bin->len - bin->used);
    int rc = srv_bytes_decode(label, bin->data + bin->used, (size_t)n, t);
    if (rc == 0)
        bin->used += (size_t)n;
    return rc;
}

/* in->tensor's data from the next `bytes` of the binary section: a view of
 * them (*borrowed set) where they start SRV_BINARY_VIEW_ALIGN-aligned. */
static int input_binary(const char *label, const cJSON *size, size_t bytes,
                        srv_binary_section_t *bin, eng_tensor_t *t, bool *borrowed)
{
    double n = json_count(size);
    char val[64];
    if (n < 0)
        return fs_err(FS_EINVAL, "%s: \"binary_data_size\" is %s, not a non-negative integer",
                      label, json_describe(size, val, sizeof val));
    return srv_codec_binary_take(label, n, bytes, bin, t, borrowed);
}

int srv_codec_binary_take(const char *label, double n, size_t bytes, srv_binary_section_t *bin,
                          eng_tensor_t *t, bool *borrowed)
{
    char shape[96];
    if (n != (double)bytes)
        return fs_err(FS_EINVAL, "%s: binary_data_size is %.0f but shape %s of %s takes %zu bytes",
                      label, n, eng_shape_format(&t->shape, shape, sizeof shape),
                      srv_datatype_name(t->dtype), bytes);
    if (bin->len == 0 && bytes > 0)
        return fs_err(FS_EINVAL,
                      "%s: binary_data_size is %zu but the request has no binary data "
                      "(no Inference-Header-Content-Length)",
                      label, bytes);
    if (bin->len - bin->used < bytes)
        return fs_err(FS_EINVAL,
                      "%s: binary_data_size is %zu but only %zu bytes of binary data are left "
                      "(%zu missing)",
                      label, bytes, bin->len - bin->used, bytes - (bin->len - bin->used));
    const uint8_t *src = bin->data + bin->used;
    if (t->dtype == ENG_DT_BOOL) {
        for (size_t i = 0; i < bytes; i++)
            if (src[i] > 1)
                return fs_err(FS_EINVAL, "%s: BOOL byte %u at index %zu is neither 0 nor 1", label,
                              src[i], i);
    }
    bin->used += bytes;
    /* Bytes that start aligned are lent as they lie (the body outlives the
     * request); others are copied to an aligned block of their own. */
    if (bytes && (uintptr_t)src % SRV_BINARY_VIEW_ALIGN == 0) {
        t->data = (void *)src;
        *borrowed = true;
        return 0;
    }
    t->data = malloc(bytes ? bytes : 1);
    if (!t->data)
        return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", label, bytes);
    if (bytes)
        memcpy(t->data, src, bytes);
    return 0;
}

/* The input's "data": the cJSON array, or when `lifted` its numbers read
 * off the text (the array in the tree is then empty). */
static int input_json(const char *label, const cJSON *data, const srv_lifted_t *lifted,
                      size_t numel, bool nul_mapped, eng_tensor_t *t)
{
    if (!cJSON_IsArray(data))
        return fs_err(FS_EINVAL, "%s: \"data\" must be an array", label);
    data_form_t form = {.regular = true, .leaf_depth = -1};
    for (size_t d = 0; d < sizeof form.lens / sizeof form.lens[0]; d++)
        form.lens[d] = -1;
    /* The lift blanks the array it reads; one with members is not it. */
    if (lifted && data->child)
        lifted = NULL;
    /* A lifted array held only numbers: no string for a BYTES input. */
    if (lifted && t->dtype == ENG_DT_STRING && lifted->n > 0)
        return fs_err(FS_EINVAL, "%s: BYTES element 0 is a number, not a string", label);
    if (t->dtype == ENG_DT_STRING)
        lifted = NULL;
    if (lifted)
        form.leaves = lifted->n;
    else
        json_data_form(data, 0, &form);
    if (form.depth > DATA_DEPTH_MAX)
        return fs_err(FS_EINVAL, "%s: \"data\" nests %d arrays deep: JSON nesting depth exceeds "
                      "maximum allowed limit (%d); send it flat", label, form.depth,
                      DATA_DEPTH_MAX);
    if (form.leaves != numel) {
        char shape[96];
        return fs_err(FS_EINVAL, "%s: shape %s has %zu elements but \"data\" has %zu", label,
                      eng_shape_format(&t->shape, shape, sizeof shape), numel, form.leaves);
    }
    if (!form.regular)
        return fs_err(FS_EINVAL, "%s: \"data\" is nested unevenly (arrays at one depth differ "
                      "in length, or values sit at different depths): send it flat, or nested "
                      "as one regular array", label);
    if (t->dtype == ENG_DT_STRING)
        return srv_bytes_json_decode(label, data, numel, nul_mapped, t);
    size_t bytes = numel * eng_dtype_size(t->dtype);
    t->data = malloc(bytes ? bytes : 1);
    if (!t->data)
        return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", label, bytes);
    data_walk_t w = {.label = label, .dtype = t->dtype, .dst = t->data};
    int rc = 0;
    if (lifted) {
        for (size_t i = 0; i < lifted->n && rc == 0; i++)
            rc = srv_codec_number_put(label, t->dtype, t->data, i, lifted->values[i]);
    } else {
        rc = json_leaves_store(&w, data);
    }
    if (rc) {
        free(t->data);
        t->data = NULL;
    }
    return rc;
}

/* Triton's shared memory extension: a tensor's "parameters" may name a
 * region the client registered ("shared_memory_region"), the offset in it
 * ("shared_memory_offset", default 0) and the bytes ("shared_memory_byte_size",
 * required). Only parsed here; infer.c resolves the region. 0 with *sm
 * filled (region NULL: the tensor names none), or FS_EINVAL naming the
 * parameter that is wrong (an offset or a size without a region
 * included), or FS_ENOMEM. */
static int shm_params(const cJSON *params, const char *label, srv_infer_shm_t *sm)
{
    *sm = (srv_infer_shm_t){0};
    if (!cJSON_IsObject(params))
        return 0;
    const cJSON *region = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_region");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_offset");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_byte_size");
    if (!region) {
        if (off || size)
            return fs_err(FS_EINVAL, "%s: \"%s\" is given without \"shared_memory_region\"",
                          label, off ? "shared_memory_offset" : "shared_memory_byte_size");
        return 0;
    }
    if (!cJSON_IsString(region) || !region->valuestring[0])
        return fs_err(FS_EINVAL, "%s: \"shared_memory_region\" must be a non-empty string",
                      label);
    double o = off ? json_count(off) : 0, n = size ? json_count(size) : -1;
    char val[64];
    if (o < 0)
        return fs_err(FS_EINVAL, "%s: \"shared_memory_offset\" is %s, not a non-negative "
                      "integer", label, json_describe(off, val, sizeof val));
    if (!size)
        return fs_err(FS_EINVAL, "%s: \"shared_memory_region\" needs \"shared_memory_byte_size\"",
                      label);
    if (n < 0)
        return fs_err(FS_EINVAL, "%s: \"shared_memory_byte_size\" is %s, not a non-negative "
                      "integer", label, json_describe(size, val, sizeof val));
    sm->region = strdup(region->valuestring);
    if (!sm->region)
        return fs_err(FS_ENOMEM, "%s: cannot copy the region's name", label);
    sm->offset = (uint64_t)o;
    sm->byte_size = (uint64_t)n;
    return 0;
}

/* An input in a shared memory region (in->shm parsed): its tensor
 * without data, which infer.c reads from the region. 0, or FS_EINVAL
 * (also "data" or "binary_data_size", or a byte size other than the
 * tensor's; a BYTES tensor's size is its serialized size, checked as the
 * region is decoded) / FS_ENOMEM, with in->shm freed. */
static int input_shm(const char *label, const cJSON *data, const cJSON *size, size_t bytes,
                     const char *name, eng_tensor_t t, srv_infer_input_t *in)
{
    int rc = 0;
    char shape[96];
    if (data || size)
        rc = fs_err(FS_EINVAL, "%s: has \"shared_memory_region\" and \"%s\"; give one",
                    label, data ? "data" : "binary_data_size");
    else if (t.dtype != ENG_DT_STRING && in->shm.byte_size != bytes)
        rc = fs_err(FS_EINVAL, "%s: shared_memory_byte_size is %llu but shape %s of %s takes "
                    "%zu bytes", label, (unsigned long long)in->shm.byte_size,
                    eng_shape_format(&t.shape, shape, sizeof shape),
                    srv_datatype_name(t.dtype), bytes);
    else if (!(in->name = strdup(name)))
        rc = fs_err(FS_ENOMEM, "%s: cannot copy the name", label);
    if (rc) {
        free(in->shm.region);
        in->shm.region = NULL;
        return rc;
    }
    t.data = NULL;
    in->tensor = t;
    return 0;
}

/* Input `idx` of "inputs" into *in (name and data owned by it); `lifted`:
 * its "data" numbers when the lift read them (NULL otherwise). */
static int input_parse(const cJSON *js, size_t idx, const srv_lifted_t *lifted,
                       srv_binary_section_t *bin, bool nul_mapped, srv_infer_input_t *in)
{
    char label[96];
    snprintf(label, sizeof label, "input %zu", idx);
    if (!cJSON_IsObject(js))
        return fs_err(FS_EINVAL, "%s must be an object", label);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return fs_err(FS_EINVAL, "%s: \"name\" must be a non-empty string", label);
    snprintf(label, sizeof label, "input '%.64s'", name->valuestring);

    eng_tensor_t t = {0};
    int rc = shape_parse(cJSON_GetObjectItemCaseSensitive(js, "shape"), label, &t.shape);
    if (rc)
        return rc;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(js, "datatype");
    if (!cJSON_IsString(dt))
        return fs_err(FS_EINVAL, "%s: \"datatype\" must be a string such as \"FP32\"", label);
    if ((rc = srv_datatype_parse(dt->valuestring, &t.dtype))) {
        char msg[FS_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        return fs_err(rc, "%s: %s", label, msg);
    }
    int64_t numel = eng_shape_numel(&t.shape);
    size_t esize = eng_dtype_size(t.dtype);
    if (numel == INT64_MAX || (uint64_t)numel > SIZE_MAX / esize) {
        char shape[96];
        return fs_err(FS_EINVAL, "%s: shape %s is too large", label,
                      eng_shape_format(&t.shape, shape, sizeof shape));
    }

    const cJSON *data = cJSON_GetObjectItemCaseSensitive(js, "data");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(js, "parameters");
    if (params && !cJSON_IsObject(params))
        return fs_err(FS_EINVAL, "%s: \"parameters\" must be an object", label);
    const cJSON *size = params ? cJSON_GetObjectItemCaseSensitive(params, "binary_data_size") : NULL;
    if ((rc = shm_params(params, label, &in->shm)))
        return rc;
    if (in->shm.region)
        return input_shm(label, data, size, (size_t)numel * esize, name->valuestring, t, in);
    if (data && size)
        return fs_err(FS_EINVAL,
                      "%s: has both \"data\" and \"parameters\": {\"binary_data_size\"}; "
                      "give one",
                      label);
    if (!data && !size)
        return fs_err(FS_EINVAL,
                      "%s: needs \"data\" or \"parameters\": {\"binary_data_size\": N}", label);
    rc = data ? input_json(label, data, lifted, (size_t)numel, nul_mapped, &t)
         : t.dtype == ENG_DT_STRING ? input_binary_bytes(label, size, bin, &t)
                                       : input_binary(label, size, (size_t)numel * esize, bin, &t,
                                                      &in->borrowed);
    if (rc)
        return rc;
    in->name = strdup(name->valuestring);
    if (!in->name) {
        if (!in->borrowed)
            free(t.data);
        return fs_err(FS_ENOMEM, "%s: cannot copy the name", label);
    }
    in->tensor = t;
    return 0;
}

/* ---- request: the whole body ---------------------------------------------- */

/* An optional string member into *out (NULL when absent or null). */
static int member_string(const cJSON *root, const char *key, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v)) {
        char val[64];
        return fs_err(FS_EINVAL, "\"%s\" must be a string, got %s", key,
                      json_describe(v, val, sizeof val));
    }
    *out = strdup(v->valuestring);
    return *out ? 0 : fs_err(FS_ENOMEM, "cannot copy \"%s\"", key);
}

static int version_parse(const cJSON *v, int64_t *out)
{
    if (!v || cJSON_IsNull(v))
        return 0;
    double n = json_count(v);
    if (n >= 0) {
        *out = (int64_t)n;
        return 0;
    }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t len = strlen(s);
        if (len > 0 && len <= 18 && strspn(s, "0123456789") == len) {
            *out = strtoll(s, NULL, 10);
            return 0;
        }
    }
    char val[64];
    return fs_err(FS_EINVAL, "\"version\" must be a non-negative integer or a string of digits, "
                             "got %s",
                  json_describe(v, val, sizeof val));
}

/* "sequence_id": an integer 0..2^53-1 (past it a double no longer holds
 * every integer) or a string (Triton's two kinds of correlation id). */
static int sequence_id_parse(const cJSON *p, srv_infer_request_t *r)
{
    free(r->seq_label);
    r->seq_label = NULL;
    r->seq_id = 0;
    if (cJSON_IsString(p)) {
        if (!(r->seq_label = strdup(p->valuestring)))
            return fs_err(FS_ENOMEM, "out of host memory");
        return 0;
    }
    if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble > JSON_INT_MAX ||
        p->valuedouble != (double)(uint64_t)p->valuedouble)
        return fs_err(FS_EINVAL, "\"parameters\": \"sequence_id\" must be a string or an "
                      "integer from 0 to 2^53-1 (JSON numbers past it are not exact)");
    r->seq_id = (uint64_t)p->valuedouble;
    return 0;
}

/* "id", "model", "version" and "parameters". */
static int request_parse_header(const cJSON *root, srv_infer_request_t *r)
{
    int rc = member_string(root, "id", &r->id);
    if (rc || (rc = member_string(root, "model", &r->model)) ||
        (rc = version_parse(cJSON_GetObjectItemCaseSensitive(root, "version"), &r->version)))
        return rc;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    if (!params)
        return 0;
    if (!cJSON_IsObject(params))
        return fs_err(FS_EINVAL, "\"parameters\" must be an object");
    const cJSON *bin = cJSON_GetObjectItemCaseSensitive(params, "binary_data_output");
    if (bin && !cJSON_IsBool(bin))
        return fs_err(FS_EINVAL, "\"parameters\": \"binary_data_output\" must be true or false");
    r->binary_output = cJSON_IsTrue(bin);
    /* Every other key is read or refused, never ignored: Triton's request
     * timeout bounds the wait to start; its priority levels are not kept
     * (every request is level 0, which is accepted); its sequence batcher's
     * keys go to the model's sequence batcher, which refuses them when the
     * model has none. */
    const cJSON *p;
    cJSON_ArrayForEach(p, params)
    {
        const char *k = p->string;
        if (strcmp(k, "binary_data_output") == 0)
            continue;
        if (strcmp(k, "timeout") == 0) {
            if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble > 1e15 ||
                p->valuedouble != (double)(uint64_t)p->valuedouble)
                return fs_err(FS_EINVAL, "\"parameters\": \"timeout\" must be a whole number of "
                              "microseconds, 0..1e15");
            r->timeout_us = (uint64_t)p->valuedouble;
        } else if (strcmp(k, "priority") == 0) {
            if (!cJSON_IsNumber(p) || p->valuedouble != 0)
                return fs_err(FS_EINVAL, "\"parameters\": \"priority\" levels are not supported "
                              "by flatserve (every request is level 0; 0 is accepted)");
        } else if (strcmp(k, "sequence_id") == 0) {
            if ((rc = sequence_id_parse(p, r)) != 0)
                return rc;
        } else if (strcmp(k, "sequence_start") == 0 || strcmp(k, "sequence_end") == 0) {
            if (!cJSON_IsBool(p))
                return fs_err(FS_EINVAL, "\"parameters\": \"%s\" must be true or false", k);
            *(k[9] == 's' ? &r->seq_start : &r->seq_end) = cJSON_IsTrue(p);
        } else {
            return fs_err(FS_EINVAL, "\"parameters\": \"%.64s\" is not a request parameter "
                          "flatserve reads (binary_data_output, timeout, priority 0, "
                          "sequence_id, sequence_start, sequence_end)", k);
        }
    }
    return 0;
}

static int request_parse_inputs(const cJSON *root, const srv_lift_t *lift, srv_binary_section_t *bin,
                                bool nul_mapped,
                                srv_infer_request_t *r)
{
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!inputs)
        return fs_err(FS_EINVAL, "the request has no \"inputs\"");
    int n = cJSON_IsArray(inputs) ? cJSON_GetArraySize(inputs) : 0;
    if (n == 0)
        return fs_err(FS_EINVAL, "\"inputs\" must be a non-empty array");
    r->inputs = calloc((size_t)n, sizeof *r->inputs);
    if (!r->inputs)
        return fs_err(FS_ENOMEM, "cannot allocate %d inputs", n);
    const cJSON *in;
    cJSON_ArrayForEach(in, inputs)
    {
        int rc = input_parse(in, r->n_inputs, srv_lift_input(lift, r->n_inputs), bin, nul_mapped,
                             &r->inputs[r->n_inputs]);
        if (rc)
            return rc;
        r->n_inputs++;
    }
    if (bin->used != bin->len)
        return fs_err(FS_EINVAL,
                      "the binary data has %zu bytes left over: the inputs' binary_data_size "
                      "add up to %zu of its %zu bytes",
                      bin->len - bin->used, bin->used, bin->len);
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 0 when no output is requested twice, else FS_EINVAL naming one (or
 * FS_ENOMEM). The names are sorted, so n outputs cost n log n: compared
 * pair by pair, a 1 MiB body of 60000 names held its HTTP thread 12 s. */
int srv_codec_outputs_check_unique(const srv_infer_request_t *r)
{
    if (r->n_outputs < 2)
        return 0;
    char **names = malloc(r->n_outputs * sizeof *names);
    if (!names)
        return fs_err(FS_ENOMEM, "cannot allocate %zu output names", r->n_outputs);
    for (size_t k = 0; k < r->n_outputs; k++)
        names[k] = r->outputs[k].name;
    qsort(names, r->n_outputs, sizeof *names, name_cmp);
    int rc = 0;
    for (size_t k = 1; k < r->n_outputs && rc == 0; k++)
        if (strcmp(names[k - 1], names[k]) == 0)
            rc = fs_err(FS_EINVAL, "output '%.64s' is requested twice", names[k]);
    free(names);
    return rc;
}

static int request_parse_outputs(const cJSON *root, srv_infer_request_t *r)
{
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    if (!outputs)
        return 0;
    if (!cJSON_IsArray(outputs))
        return fs_err(FS_EINVAL, "\"outputs\" must be an array");
    int n = cJSON_GetArraySize(outputs);
    if (n == 0)
        return 0;
    r->outputs = calloc((size_t)n, sizeof *r->outputs);
    if (!r->outputs)
        return fs_err(FS_ENOMEM, "cannot allocate %d outputs", n);
    const cJSON *o;
    cJSON_ArrayForEach(o, outputs)
    {
        size_t k = r->n_outputs;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return fs_err(FS_EINVAL, "output %zu: \"name\" must be a non-empty string", k);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        const cJSON *bin = params ? cJSON_GetObjectItemCaseSensitive(params, "binary_data") : NULL;
        if ((params && !cJSON_IsObject(params)) || (bin && !cJSON_IsBool(bin)))
            return fs_err(FS_EINVAL,
                          "output '%.64s': \"parameters\" must be an object whose "
                          "\"binary_data\" is true or false",
                          name->valuestring);
        char label[96];
        snprintf(label, sizeof label, "output '%.64s'", name->valuestring);
        int rc = shm_params(params, label, &r->outputs[k].shm);
        if (rc)
            return rc;
        if (r->outputs[k].shm.region && cJSON_IsTrue(bin)) {
            free(r->outputs[k].shm.region);
            r->outputs[k].shm.region = NULL;
            return fs_err(FS_EINVAL, "%s: has \"shared_memory_region\" and \"binary_data\": "
                          "true; give one", label);
        }
        /* Triton's classification extension answers top-k "value:index"
         * strings, a BYTES output, which this codec does not carry. */
        if (params && cJSON_GetObjectItemCaseSensitive(params, "class_count"))
            return fs_err(FS_EINVAL,
                          "output '%.64s': \"class_count\" (classification) is not supported: "
                          "its results are BYTES strings, which flatserve does not serve; ask "
                          "for the output itself and take its top k",
                          name->valuestring);
        r->outputs[k].binary = !r->outputs[k].shm.region && (bin ? cJSON_IsTrue(bin)
                                                                  : r->binary_output);
        r->outputs[k].name = strdup(name->valuestring);
        if (!r->outputs[k].name) {
            free(r->outputs[k].shm.region);
            r->outputs[k].shm.region = NULL;
            return fs_err(FS_ENOMEM, "output '%.64s': cannot copy the name", name->valuestring);
        }
        r->n_outputs++;
    }
    return srv_codec_outputs_check_unique(r);
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The offset of the first \u escape (a 'u' after an odd run of
 * backslashes; its backslash's offset) that cJSON would decode into a
 * NUL, or len when there is none: \u0000, and also a \u without four hex
 * digits after it, which cJSON reads as 0 ("\uZZZZ" read as ""). *bad_hex
 * tells which. */
static size_t nul_escape_at(const char *text, size_t len, bool *bad_hex)
{
    const char *end = text + len;
    for (const char *p = memchr(text, '\\', len); p; p = memchr(p, '\\', (size_t)(end - p))) {
        const char *run = p;
        while (p < end && *p == '\\')
            p++;
        if ((p - run) % 2 == 0 || p == end || *p != 'u')
            continue;
        unsigned v = 0;
        int k = 1;
        for (; k <= 4 && p + k < end && hex_value(p[k]) >= 0; k++)
            v = v * 16 + (unsigned)hex_value(p[k]);
        *bad_hex = k <= 4;
        if (*bad_hex || v == 0)
            return (size_t)(p - 1 - text);
    }
    return len;
}

/* BYTES data may hold NUL (Triton's clients send "\u0000"), which cJSON
 * cannot return: its strings end at the first NUL. So a text holding such
 * escapes is parsed from a copy where each becomes the byte
 * SRV_BYTES_NUL_STANDIN (0xFF, which no UTF-8 text holds: a text holding
 * it raw is refused), which the BYTES decoder turns back into NUL
 * (codec_bytes.h), and every other string of the tree is checked to hold
 * none (json_standin_check). 0 with *out NULL (no such escape: parse the
 * text as it is) or a malloc'ed copy of *out_len bytes, or FS_EINVAL /
 * FS_ENOMEM. */
static int nul_escapes_map(const char *text, size_t len, char **out, size_t *out_len)
{
    *out = NULL;
    bool bad_hex = false;
    size_t esc = nul_escape_at(text, len, &bad_hex);
    if (esc == len || bad_hex)
        return 0; /* json_parse words a bad escape */
    if (memchr(text, SRV_BYTES_NUL_STANDIN, len))
        return fs_err(FS_EPARSE, "the request is not valid JSON: it holds the byte 0xFF, which "
                      "UTF-8 text never does");
    char *m = malloc(len);
    if (!m)
        return fs_err(FS_ENOMEM, "cannot copy a %zu-byte request", len);
    size_t from = 0, to = 0;
    while (esc < len && !bad_hex) {
        memcpy(m + to, text + from, esc - from);
        to += esc - from;
        m[to++] = (char)SRV_BYTES_NUL_STANDIN;
        from = esc + 6;
        esc = from + nul_escape_at(text + from, len - from, &bad_hex);
    }
    memcpy(m + to, text + from, len - from);
    *out = m;
    *out_len = to + len - from;
    return 0;
}

/* Whether `data` is the "data" of an element of "inputs" whose datatype is
 * BYTES: where a NUL stand-in belongs. */
static bool json_is_bytes_data(const cJSON *v, const cJSON *parent, const cJSON *grand)
{
    if (!v->string || strcmp(v->string, "data") != 0 || !parent || !grand || !grand->string ||
        strcmp(grand->string, "inputs") != 0)
        return false;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(parent, "datatype");
    return cJSON_IsString(dt) && strcmp(dt->valuestring, "BYTES") == 0;
}

/* FS_EINVAL when a key or string outside BYTES data holds the NUL stand-in
 * (a \u0000 in a name, an id, a parameter); cJSON's nesting limit bounds
 * the recursion. */
static int json_standin_check(const cJSON *v, const cJSON *parent, const cJSON *grand)
{
    if ((v->string && strchr(v->string, SRV_BYTES_NUL_STANDIN)) ||
        (cJSON_IsString(v) && strchr(v->valuestring, SRV_BYTES_NUL_STANDIN)))
        return fs_err(FS_EINVAL, "the request holds \\u0000 in \"%.32s\": no name, id or "
                      "parameter may hold a NUL (only BYTES data may)",
                      v->string ? v->string : "");
    if (json_is_bytes_data(v, parent, grand))
        return 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, v)
    {
        int rc = json_standin_check(c, v, parent);
        if (rc)
            return rc;
    }
    return 0;
}

/* The JSON text, or FS_EPARSE saying where it stopped. */
static int json_parse(const char *text, size_t len, cJSON **out)
{
    /* JSON has no raw NUL (in a string it must be escaped); cJSON would read
     * a string up to it and drop the rest, and it decodes \u0000 (or a \u
     * without its four hex digits) into one. */
    const char *nul = memchr(text, '\0', len);
    if (nul)
        return fs_err(FS_EPARSE, "the request is not valid JSON: a NUL byte at byte %zu of %zu",
                      (size_t)(nul - text), len);
    bool bad_hex = false;
    size_t esc = nul_escape_at(text, len, &bad_hex);
    if (esc < len && bad_hex)
        return fs_err(FS_EPARSE, "the request is not valid JSON: the escape at byte %zu is "
                      "\\u without four hex digits", esc);
    if (esc < len)
        return fs_err(FS_EINVAL, "the request holds \\u0000 at byte %zu: no name, id or "
                      "parameter may hold a NUL", esc);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    if (root) {
        while (at < len && text[at] && strchr(" \t\r\n", text[at]))
            at++;
        if (at == len) {
            *out = root;
            return 0;
        }
        cJSON_Delete(root);
    }
    char near[24];
    size_t n = 0;
    for (size_t i = at; i < len && n < 16; i++)
        near[n++] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
    near[n] = '\0';
    return fs_err(FS_EPARSE, "the request is not valid JSON: %s at byte %zu of %zu near '%s'",
                  root ? "unexpected text after the object" : "stopped", at, len, near);
}

int srv_infer_request_parse(const void *body, size_t len, size_t header_len,
                            srv_infer_request_t **out)
{
    size_t json_len = header_len ? header_len : len;
    if (header_len <= len && json_len > 0 &&
        srv_infer_request_parse_fast(body, len, json_len, out))
        return 0;
    return srv_infer_request_parse_tree(body, len, header_len, out);
}

int srv_infer_request_parse_tree(const void *body, size_t len, size_t header_len,
                                 srv_infer_request_t **out)
{
    if (header_len > len)
        return fs_err(FS_EINVAL, "the JSON header length %zu is more than the %zu-byte body",
                      header_len, len);
    size_t json_len = header_len ? header_len : len;
    if (json_len == 0)
        return fs_err(FS_EPARSE, "the request body is empty");
    srv_binary_section_t bin = {(const uint8_t *)body + json_len, len - json_len, 0};
    cJSON *root = NULL;
    srv_infer_request_t *r = NULL;
    /* The tensors' numbers first, straight off the text (codec_lift.c);
     * cJSON reads the rest. A text that is not JSON is reported as
     * written, from the original. */
    srv_lift_t lift;
    srv_lift_data(body, json_len, &lift);
    char *mapped = NULL;
    size_t mapped_len = 0;
    const char *text = lift.text ? lift.text : body;
    int rc = nul_escapes_map(text, json_len, &mapped, &mapped_len);
    if (rc == 0)
        rc = json_parse(mapped ? mapped : text, mapped ? mapped_len : json_len, &root);
    if (rc && lift.text) {
        srv_lift_free(&lift);
        free(mapped);
        rc = nul_escapes_map(body, json_len, &mapped, &mapped_len);
        if (rc == 0)
            rc = json_parse(mapped ? mapped : body, mapped ? mapped_len : json_len, &root);
    }
    bool nul_mapped = mapped != NULL;
    free(mapped);
    if (rc == 0 && nul_mapped)
        rc = json_standin_check(root, NULL, NULL);
    if (rc) {
        srv_lift_free(&lift);
        cJSON_Delete(root);
        return rc;
    }
    if (!cJSON_IsObject(root)) {
        rc = fs_err(FS_EINVAL, "the request must be a JSON object");
        goto fail;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        rc = fs_err(FS_ENOMEM, "cannot allocate a request");
        goto fail;
    }
    r->version = -1;
    if ((rc = request_parse_header(root, r)) || (rc = request_parse_inputs(root, &lift, &bin, nul_mapped, r)) ||
        (rc = request_parse_outputs(root, r)))
        goto fail;
    srv_lift_free(&lift);
    cJSON_Delete(root);
    *out = r;
    return 0;
fail:
    srv_lift_free(&lift);
    srv_infer_request_free(r);
    cJSON_Delete(root);
    return rc;
}

void srv_infer_request_free(srv_infer_request_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].name);
        free(r->inputs[i].shm.region);
        if (!r->inputs[i].borrowed)
            free(r->inputs[i].tensor.data);
    }
    for (size_t i = 0; i < r->n_outputs; i++) {
        free(r->outputs[i].name);
        free(r->outputs[i].shm.region);
    }
    free(r->inputs);
    free(r->outputs);
    free(r->id);
    free(r->model);
    free(r->seq_label);
    free(r);
}

/* ---- binding to a model --------------------------------------------------- */

/* "'a', 'b'" of the model's inputs or outputs, for messages. */
static const char *io_names(const eng_model_t *m, bool inputs, char *buf, size_t len)
{
    size_t n = inputs ? eng_model_n_inputs(m) : eng_model_n_outputs(m), at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++) {
        eng_io_info_t info;
        if ((inputs ? eng_model_input(m, i, &info) : eng_model_output(m, i, &info)) == 0)
            at += (size_t)snprintf(buf + at, len - at, "%s'%s'", i ? ", " : "", info.name);
    }
    return buf;
}

int srv_infer_bind(const srv_infer_request_t *r, const eng_model_t *m, eng_tensor_t *views)
{
    return srv_infer_bind_filled(r, m, NULL, views);
}

int srv_infer_bind_filled(const srv_infer_request_t *r, const eng_model_t *m, const bool *filled,
                          eng_tensor_t *views)
{
    size_t n = eng_model_n_inputs(m);
    char names[256];
    eng_io_info_t info;
    /* ENG_DT_UNDEFINED marks a model input no request input has taken yet:
     * every parsed input has a real dtype. */
    for (size_t k = 0; k < n; k++)
        views[k] = (eng_tensor_t){.dtype = ENG_DT_UNDEFINED};
    for (size_t j = 0; j < r->n_inputs; j++) {
        const srv_infer_input_t *in = &r->inputs[j];
        long k = eng_io_input_find(m, in->name);
        if (k < 0 || eng_model_input(m, (size_t)k, &info) != 0)
            return fs_err(FS_EINVAL, "input '%s' is not an input of the model (it takes %s)",
                          in->name, io_names(m, true, names, sizeof names));
        if (filled && filled[k])
            return fs_err(FS_EINVAL, "input '%s' is filled by the server (a sequence_batching "
                          "control or state input); the request must not give it", in->name);
        if (views[k].dtype != ENG_DT_UNDEFINED)
            return fs_err(FS_EINVAL, "input '%s' is given twice", in->name);
        int rc = eng_io_check(&info, NULL, &in->tensor, dtype_label);
        if (rc)
            return rc;
        views[k] = in->tensor;
    }
    for (size_t k = 0; k < n; k++)
        if (views[k].dtype == ENG_DT_UNDEFINED && !(filled && filled[k]) &&
            eng_model_input(m, k, &info) == 0)
            return fs_err(FS_EINVAL, "the request lacks input '%s', which the model takes",
                          info.name);
    for (size_t j = 0; j < r->n_outputs; j++)
        if (eng_io_output_find(m, r->outputs[j].name) < 0)
            return fs_err(FS_EINVAL,
                          "requested output '%s' is not an output of the model (it has %s)",
                          r->outputs[j].name, io_names(m, false, names, sizeof names));
    return 0;
}
