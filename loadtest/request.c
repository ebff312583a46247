/* request.c -- model metadata, dynamic axes bound to --batch and --dim, and
 * request bodies.
 *
 * Input data comes from a pool of LG_POOL_N values per datatype drawn once
 * from --seed, kept both as raw little-endian bytes and as JSON text with a
 * comma after every value; a request copies a run of them from a random
 * offset (wrapping round), so a 2-million-element body is a few hundred
 * memcpy calls and the generator's CPU stays with the server under test. */
#include "loadtest/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define LG_POOL_N 4096
#define LG_TOKEN_MAX 24 /* the longest JSON text of one pooled value, comma included */

/* --- random source ----------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lg_rng_seed(lg_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t lg_rng_next(lg_rng_t *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double lg_rng_uniform(lg_rng_t *r)
{
    return (double)(lg_rng_next(r) >> 11) * 0x1.0p-53;
}

/* --- datatypes --------------------------------------------------------------- */

/* kind: 'f' FP32, 'd' FP64, 'h' FP16, 'b' BF16, 'i' signed, 'u' unsigned, '?' BOOL. */
typedef struct lg_dtype {
    const char *name;
    uint32_t size;
    char kind;
} lg_dtype_t;

static const lg_dtype_t lg_dtypes[] = {
    {"BOOL", 1, '?'},  {"UINT8", 1, 'u'}, {"UINT16", 2, 'u'}, {"UINT32", 4, 'u'},
    {"UINT64", 8, 'u'}, {"INT8", 1, 'i'},  {"INT16", 2, 'i'},  {"INT32", 4, 'i'},
    {"INT64", 8, 'i'},  {"FP16", 2, 'h'},  {"BF16", 2, 'b'},   {"FP32", 4, 'f'},
    {"FP64", 8, 'd'},
};
#define N_DTYPES (sizeof lg_dtypes / sizeof lg_dtypes[0])
#define DTYPE_INT64 8
#define DTYPE_FP32 11

static int dtype_find(const char *name)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (!strcmp(lg_dtypes[i].name, name))
            return (int)i;
    return -1;
}

/* Round to nearest even; the pooled values are in [-1, 1), and those too
 * small for a normal half become zero (it is test data, not arithmetic). */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (exp <= 0)
        return sign;
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* --- the pool ------------------------------------------------------------------ */

struct lg_datapool {
    unsigned char *raw[N_DTYPES];  /* LG_POOL_N values, little-endian */
    char *text[N_DTYPES];          /* "v,v,v," */
    uint32_t *off[N_DTYPES];       /* LG_POOL_N + 1 offsets of the values into text */
};

static void pool_value(const lg_dtype_t *t, double u, unsigned char *raw, char *tok)
{
    int64_t k = (int64_t)(u * 16); /* integers 0..15: small enough to index anything */
    float f = (float)(u * 2 - 1);
    switch (t->kind) {
    case '?':
        raw[0] = (unsigned char)(k & 1);
        sprintf(tok, "%s,", (k & 1) ? "true" : "false");
        return;
    case 'i':
    case 'u':
        for (uint32_t b = 0; b < t->size; b++)
            raw[b] = (unsigned char)(b == 0 ? k : 0);
        sprintf(tok, "%lld,", (long long)k);
        return;
    case 'h': {
        uint16_t h = f32_to_f16(f);
        memcpy(raw, &h, 2);
        break;
    }
    case 'b': {
        uint16_t h = f32_to_bf16(f);
        memcpy(raw, &h, 2);
        break;
    }
    case 'd': {
        double d = f;
        memcpy(raw, &d, 8);
        break;
    }
    default:
        memcpy(raw, &f, 4);
        break;
    }
    sprintf(tok, "%.6g,", (double)f);
}

void lg_datapool_destroy(lg_datapool_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < N_DTYPES; i++) {
        free(p->raw[i]);
        free(p->text[i]);
        free(p->off[i]);
    }
    free(p);
}

int lg_datapool_create(uint64_t seed, lg_datapool_t **out)
{
    lg_datapool_t *p = calloc(1, sizeof *p);
    if (!p)
        return fs_err(FS_ENOMEM, "out of memory for the input data pool");
    lg_rng_t rng;
    lg_rng_seed(&rng, seed ^ 0x5eedda7aull);
    for (size_t t = 0; t < N_DTYPES; t++) {
        p->raw[t] = malloc((size_t)LG_POOL_N * lg_dtypes[t].size);
        p->text[t] = malloc((size_t)LG_POOL_N * LG_TOKEN_MAX);
        p->off[t] = malloc((LG_POOL_N + 1) * sizeof(uint32_t));
        if (!p->raw[t] || !p->text[t] || !p->off[t]) {
            lg_datapool_destroy(p);
            return fs_err(FS_ENOMEM, "out of memory for the input data pool");
        }
        uint32_t len = 0;
        for (uint32_t i = 0; i < LG_POOL_N; i++) {
            char tok[64];
            pool_value(&lg_dtypes[t], lg_rng_uniform(&rng),
                       p->raw[t] + (size_t)i * lg_dtypes[t].size, tok);
            size_t tl = strlen(tok);
            p->off[t][i] = len;
            memcpy(p->text[t] + len, tok, tl);
            len += (uint32_t)tl;
        }
        p->off[t][LG_POOL_N] = len;
    }
    *out = p;
    return 0;
}

/* --- model metadata ------------------------------------------------------------ */

int lg_model_parse(const char *json, const char *name, lg_model_t *out)
{
    int rc = 0;
    lg_model_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", name);
    m.weight = 1.0;
    cJSON *root = cJSON_Parse(json);
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) == 0) {
        rc = fs_err(FS_EPARSE, "model '%s': the metadata has no \"inputs\": %.120s", name, json);
        goto done;
    }
    const cJSON *in;
    cJSON_ArrayForEach(in, inputs)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(in, "name");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
        if (!cJSON_IsString(nm) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
            strlen(nm->valuestring) >= LG_NAME_MAX) {
            rc = fs_err(FS_EPARSE, "model '%s': an input without name, datatype or shape", name);
            goto done;
        }
        if (m.n_inputs == LG_INPUTS_MAX) {
            rc = fs_err(FS_ENOTSUP, "model '%s': more than %d inputs", name, LG_INPUTS_MAX);
            goto done;
        }
        lg_input_t *x = &m.inputs[m.n_inputs++];
        snprintf(x->name, sizeof x->name, "%s", nm->valuestring);
        if ((x->dtype = dtype_find(dt->valuestring)) < 0) {
            rc = fs_err(FS_ENOTSUP, "model '%s' input '%s': datatype %s is not one loadgen sends",
                        name, x->name, dt->valuestring);
            goto done;
        }
        if (cJSON_GetArraySize(shape) > LG_RANK_MAX) {
            rc = fs_err(FS_ENOTSUP, "model '%s' input '%s': rank %d is above %d", name, x->name,
                        cJSON_GetArraySize(shape), LG_RANK_MAX);
            goto done;
        }
        const cJSON *d;
        cJSON_ArrayForEach(d, shape)
        {
            if (!cJSON_IsNumber(d) || d->valuedouble < -1 || d->valuedouble > (double)(1ll << 40)) {
                rc = fs_err(FS_EPARSE, "model '%s' input '%s': a shape entry is not -1 or a size",
                            name, x->name);
                goto done;
            }
            x->shape[x->rank++] = (int64_t)d->valuedouble;
        }
    }
    *out = m;
done:
    cJSON_Delete(root);
    return rc;
}

/* The first --dim that draws the same axis from the same pick: inputs whose
 * dims share it get one value per request (input_ids and attention_mask
 * must agree on the sequence length). */
static int dim_slot(const lg_opts_t *o, uint32_t i)
{
    for (uint32_t j = 0; j < i; j++)
        if (o->dims[j].axis == o->dims[i].axis &&
            !memcmp(&o->dims[j].pick, &o->dims[i].pick, sizeof o->dims[i].pick))
            return (int)j;
    return (int)i;
}

/* Checks one --dim against the mix: it must name a dynamic axis other than
 * axis 0 of some model's input. */
static int dim_check(const lg_model_t *models, uint32_t n_models, const lg_dim_t *d)
{
    int found = 0;
    for (uint32_t mi = 0; mi < n_models; mi++) {
        for (uint32_t k = 0; k < models[mi].n_inputs; k++) {
            const lg_input_t *x = &models[mi].inputs[k];
            if (strcmp(x->name, d->input) != 0)
                continue;
            found = 1;
            if (d->axis >= x->rank)
                return fs_err(FS_EINVAL, "--dim %s:%u: input '%s' of model '%s' has rank %u",
                              d->input, d->axis, d->input, models[mi].name, x->rank);
            if (d->axis == 0 && x->shape[0] < 0)
                return fs_err(FS_EINVAL, "--dim %s:0: axis 0 is the batch axis; use --batch",
                              d->input);
            if (x->shape[d->axis] >= 0)
                return fs_err(FS_EINVAL, "--dim %s:%u: axis %u of input '%s' in model '%s' is "
                                         "fixed at %lld",
                              d->input, d->axis, d->axis, d->input, models[mi].name,
                              (long long)x->shape[d->axis]);
        }
    }
    if (!found)
        return fs_err(FS_EINVAL, "--dim %s:%u: no model of the mix has an input '%s'", d->input,
                      d->axis, d->input);
    return 0;
}

int lg_model_bind(lg_model_t *models, uint32_t n_models, const lg_opts_t *o)
{
    int rc;
    for (uint32_t i = 0; i < o->n_dims; i++)
        if ((rc = dim_check(models, n_models, &o->dims[i])) != 0)
            return rc;
    for (uint32_t mi = 0; mi < n_models; mi++) {
        lg_model_t *m = &models[mi];
        for (uint32_t k = 0; k < m->n_inputs; k++) {
            lg_input_t *x = &m->inputs[k];
            for (uint32_t a = 0; a < x->rank; a++) {
                if (x->shape[a] >= 0) {
                    x->axis_src[a] = LG_AXIS_FIXED;
                    continue;
                }
                if (a == 0) {
                    x->axis_src[a] = LG_AXIS_BATCH;
                    continue;
                }
                x->axis_src[a] = -3;
                for (uint32_t i = 0; i < o->n_dims; i++)
                    if (o->dims[i].axis == a && !strcmp(o->dims[i].input, x->name))
                        x->axis_src[a] = dim_slot(o, i);
                if (x->axis_src[a] == -3)
                    return fs_err(FS_EINVAL,
                                  "model '%s' input '%s': axis %u is dynamic (-1) and no --dim "
                                  "covers it; add --dim %s:%u:LO..HI",
                                  m->name, x->name, a, x->name, a);
            }
        }
    }
    return 0;
}

/* --- bodies --------------------------------------------------------------------- */

/* A growing buffer that remembers a failed allocation instead of failing
 * every append. */
typedef struct sb {
    char *p;
    size_t len, cap;
    int oom;
} sb_t;

static void sb_reserve(sb_t *b, size_t extra)
{
    if (b->oom || b->len + extra <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_put(sb_t *b, const void *data, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void sb_puts(sb_t *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_printf(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json_string(sb_t *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}

/* One input of one request as it will be sent. */
typedef struct lg_tensor {
    const char *name;
    int dtype;
    uint32_t rank;
    int64_t shape[LG_RANK_MAX + 1];
    uint64_t count;
} lg_tensor_t;

static void sb_pool_text(sb_t *b, const lg_datapool_t *p, int t, uint64_t n, uint32_t start)
{
    const char *text = p->text[t];
    const uint32_t *off = p->off[t];
    if (n == 0)
        return;
    while (n > 0) {
        uint32_t take = n < (uint64_t)(LG_POOL_N - start) ? (uint32_t)n : LG_POOL_N - start;
        sb_put(b, text + off[start], off[start + take] - off[start]);
        n -= take;
        start = 0;
    }
    if (!b->oom)
        b->len--; /* the last comma */
}

static void sb_pool_raw(sb_t *b, const lg_datapool_t *p, int t, uint64_t n, uint32_t start)
{
    uint32_t size = lg_dtypes[t].size;
    while (n > 0) {
        uint32_t take = n < (uint64_t)(LG_POOL_N - start) ? (uint32_t)n : LG_POOL_N - start;
        sb_put(b, p->raw[t] + (size_t)start * size, (size_t)take * size);
        n -= take;
        start = 0;
    }
}

static void sb_shape(sb_t *b, const lg_tensor_t *x)
{
    sb_put(b, "[", 1);
    for (uint32_t a = 0; a < x->rank; a++)
        sb_printf(b, "%s%lld", a ? "," : "", (long long)x->shape[a]);
    sb_put(b, "]", 1);
}

/* Draws the request's shapes (and spoils input 0 for LG_BAD_SHAPE and
 * LG_BAD_DTYPE). Returns the batch drawn. */
static uint32_t tensors_draw(const lg_model_t *m, const lg_opts_t *o, lg_rng_t *rng,
                             uint64_t *trace, lg_bad_t bad, lg_tensor_t *ts)
{
    uint32_t batch = lg_pick_draw(&o->batch, trace ? splitmix64(trace) : lg_rng_next(rng));
    uint32_t dimv[LG_DIMS_MAX];
    for (uint32_t i = 0; i < o->n_dims; i++)
        dimv[i] = lg_pick_draw(&o->dims[i].pick, trace ? splitmix64(trace) : lg_rng_next(rng));
    for (uint32_t k = 0; k < m->n_inputs; k++) {
        const lg_input_t *in = &m->inputs[k];
        lg_tensor_t *x = &ts[k];
        x->name = in->name;
        x->dtype = in->dtype;
        x->rank = in->rank;
        for (uint32_t a = 0; a < in->rank; a++) {
            int src = in->axis_src[a];
            x->shape[a] = src == LG_AXIS_FIXED ? in->shape[a]
                          : src == LG_AXIS_BATCH ? (int64_t)batch
                                                 : (int64_t)dimv[src];
        }
    }
    if (bad == LG_BAD_SHAPE) {
        /* A fixed axis off by one is refused by every model; a model with
         * no fixed axis gets one axis too many. */
        lg_tensor_t *x = &ts[0];
        int64_t a = -1;
        for (uint32_t i = 0; i < x->rank; i++)
            if (m->inputs[0].axis_src[i] == LG_AXIS_FIXED)
                a = i;
        if (a >= 0)
            x->shape[a] += 1;
        else
            x->shape[x->rank++] = 1;
    } else if (bad == LG_BAD_DTYPE) {
        char kind = lg_dtypes[ts[0].dtype].kind;
        ts[0].dtype = (kind == 'f' || kind == 'd' || kind == 'h' || kind == 'b') ? DTYPE_INT64
                                                                                   : DTYPE_FP32;
    }
    for (uint32_t k = 0; k < m->n_inputs; k++) {
        ts[k].count = 1;
        for (uint32_t a = 0; a < ts[k].rank; a++)
            ts[k].count *= (uint64_t)ts[k].shape[a];
    }
    return batch;
}

uint64_t lg_splitmix64(uint64_t *state)
{
    return splitmix64(state);
}

int lg_body_build(const lg_datapool_t *pool, const lg_model_t *m, const lg_opts_t *o,
                  lg_rng_t *rng, uint64_t *trace, int binary, lg_bad_t bad, lg_body_t *out)
{
    lg_tensor_t ts[LG_INPUTS_MAX];
    memset(ts, 0, sizeof ts);
    memset(out, 0, sizeof *out);
    uint32_t batch = tensors_draw(m, o, rng, trace, bad, ts);
    if (bad == LG_BAD_JSON)
        binary = 0;
    double bytes = 256;
    for (uint32_t k = 0; k < m->n_inputs; k++)
        bytes += 256 + (double)ts[k].count *
                           (binary ? lg_dtypes[ts[k].dtype].size : (double)LG_TOKEN_MAX);
    if (bytes > 2147483648.0)
        return fs_err(FS_ERANGE, "model '%s': a request of %.0f bytes (batch %u) is above 2 GiB",
                      m->name, bytes, batch);
    sb_t b = {0};
    sb_reserve(&b, (size_t)bytes);
    sb_puts(&b, "{\"inputs\":[");
    for (uint32_t k = 0; k < m->n_inputs; k++) {
        const lg_tensor_t *x = &ts[k];
        sb_printf(&b, "%s{\"name\":", k ? "," : "");
        sb_json_string(&b, x->name);
        sb_printf(&b, ",\"datatype\":\"%s\",\"shape\":", lg_dtypes[x->dtype].name);
        sb_shape(&b, x);
        if (binary) {
            sb_printf(&b, ",\"parameters\":{\"binary_data_size\":%llu}}",
                      (unsigned long long)(x->count * lg_dtypes[x->dtype].size));
        } else {
            sb_puts(&b, ",\"data\":[");
            sb_pool_text(&b, pool, x->dtype, x->count, (uint32_t)(lg_rng_next(rng) % LG_POOL_N));
            sb_put(&b, "]}", 2);
        }
    }
    sb_put(&b, "]", 1);
    if (binary)
        sb_puts(&b, ",\"parameters\":{\"binary_data_output\":true}");
    sb_put(&b, "}", 1);
    size_t header_len = b.len;
    if (binary)
        for (uint32_t k = 0; k < m->n_inputs; k++)
            sb_pool_raw(&b, pool, ts[k].dtype, ts[k].count,
                        (uint32_t)(lg_rng_next(rng) % LG_POOL_N));
    if (b.oom) {
        free(b.p);
        return fs_err(FS_ENOMEM, "model '%s': out of memory for a request of %.0f bytes", m->name,
                      bytes);
    }
    if (bad == LG_BAD_JSON)
        b.len /= 2; /* the object is never closed: no prefix of it is valid JSON */
    out->data = b.p;
    out->len = b.len;
    out->header_len = binary ? header_len : 0;
    out->batch = batch;
    return 0;
}

void lg_body_free(lg_body_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
