/* test_cuda_consistency.c -- every op, and whole models, give the same
 * results on the device under test as on the CPU engine.
 *
 * Each op case builds a one-node model in memory (onnx_build.h), loads the
 * same bytes twice -- once on the CPU (the reference), once on the device
 * under test -- feeds both the same inputs from a fixed-seed generator, and
 * compares every output: dtype and shape exactly, integers and bools
 * exactly, floats within |dev - cpu| <= atol + rtol * |cpu| (NaN equals NaN,
 * an infinity only itself). After each case every cache is back at zero
 * allocated bytes. The demo models (models/, built by make) and ONNX's light
 * models run the same way at several batch sizes.
 *
 * The device under test is $FLATSERVE_CONSISTENCY_DEVICE: "cuda" (the
 * default), "cuda:N", or "cpu". With "cpu" the suite compares the CPU with
 * itself and demands bit-for-bit equality, which proves the harness (model
 * building, generators, comparisons, the coverage table) on a machine with
 * no GPU. Without a usable GPU every test skips, saying why.
 * $FLATSERVE_CONSISTENCY_CASE=SUBSTR runs only the op cases whose
 * description contains SUBSTR, printing each as it starts and the first
 * values it computed on the CPU (for chasing one kernel on the GPU
 * machine; a crash then names its case).
 *
 * A case is a row of a table: op type, opset, attributes, input specs.
 *   attributes  "axis=1 mode='reflect' alpha=0.5 pads=[1,1,0,0]
 *               scales=[1.0,2.0] names=['Relu','Tanh'] to=f16
 *               value=f32[1]{2.5}": a quoted string, a list (of ints,
 *               floats or quoted strings), a float (has '.', 'e'), an int,
 *               a dtype name (an int: its ONNX code) or a tensor
 *               (dtype[dims]{values}).
 *   input       "f32[2,3]" a runtime input of random values; a leading '='
 *               makes it an initializer; ":dist" picks the values (below);
 *               "{1,2}" gives them instead; "-" is an absent optional input.
 *               A runtime input of a dtype the engine takes no graph input
 *               of (f16, f64, int8, uint64, ...) comes through a Cast.
 *               A runtime input with given values that decides an output
 *               shape (Reshape's shape, ...) makes the plan dynamic: the case
 *               says .dyn and the suite checks the plan agrees.
 *   dist        u (default: floats in [-2,2), ints in [-9,9], unsigned in
 *               [0,9]), pos (floats [0.1,4), ints [1,9]), unit (-0.95,0.95),
 *               nz (no zero: floats +-[0.5,2), ints +-[1,9]), distinct
 *               (no two equal: ArgMax, TopK, MaxPool indices), frac (floats
 *               at least 0.05 away from integers and halves: Round, Floor,
 *               Ceil), int (integer-valued floats in [-3,3]: ties for the
 *               comparisons), special (NaN, infinities, signed zeros,
 *               subnormals, huge values among random ones), r(lo,hi).
 * Tolerances default to rtol 1e-4, atol 1e-5; a case that needs more says
 * why beside it. The tables, one row per case, are most of this file. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/backend.h"
#include "engine/float8.h"
#include "engine/cuda/cuda.h"
#include "engine/engine.h"
#include "engine/op.h"
#include "onnx_build.h"

#define OC_MAX_IN 10 /* QLinearConv has 9 inputs */
#define OC_MAX_OUT 8
#define OC_MAX_VALS 64
#define OC_RTOL 1e-4
#define OC_ATOL 1e-5
#define OC_IR_VERSION 10
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the device under test, and the caches both sides use -------------- */

typedef struct dut {
    bool cuda;
    int index;
    char name[24]; /* "cpu", "cuda:N" */
} dut_t;

/* Reads $FLATSERVE_CONSISTENCY_DEVICE; skips the test when it names a GPU
 * that is not there (or this build has no CUDA). */
static void dut_select(dut_t *d)
{
    const char *env = getenv("FLATSERVE_CONSISTENCY_DEVICE");
    if (!env || !env[0])
        env = "cuda";
    memset(d, 0, sizeof *d);
    if (strcmp(env, "cpu") == 0) {
        snprintf(d->name, sizeof d->name, "cpu");
        return;
    }
    char *end = NULL;
    if (strcmp(env, "cuda") == 0)
        d->index = 0;
    else if (strncmp(env, "cuda:", 5) == 0 && isdigit((unsigned char)env[5]))
        d->index = (int)strtol(env + 5, &end, 10);
    cr_assert(strcmp(env, "cuda") == 0 || (end && !*end && d->index < 1024),
              "FLATSERVE_CONSISTENCY_DEVICE='%s': expected cpu, cuda or cuda:N", env);
    d->cuda = true;
    snprintf(d->name, sizeof d->name, "cuda:%d", d->index);
    int n = 0;
    if (alloc_cuda_probe(&n) != 0)
        cr_skip_test("no usable GPU for %s: %s. FLATSERVE_CONSISTENCY_DEVICE=cpu checks the "
                     "harness CPU against CPU", d->name, fs_errmsg());
    if (d->index >= n)
        cr_skip_test("%s is not there (%d CUDA device%s)", d->name, n, n == 1 ? "" : "s");
}

/* The reference's cache and the device under test's: device memory, host
 * memory for the loader and small constants, pinned staging. In CPU mode
 * the last three are host caches too (a CPU model ignores the other two),
 * so every check reads the same. */
typedef struct rig {
    dut_t dut;
    alloc_provider_t *host, *dev, *pinned;
    alloc_cache_t *ref_cache, *dev_cache, *host_cache, *staging;
    int n_threads; /* CPU kernel threads, both sides alike */
} rig_t;

static alloc_cache_t *rig_cache(alloc_provider_t *p, const char *name)
{
    alloc_cache_t *c = NULL;
    alloc_cache_config_t cfg = {.name = name};
    cr_assert_eq(alloc_cache_create(p, &cfg, &c), 0, "cache %s: %s", name, fs_errmsg());
    return c;
}

static void rig_open(rig_t *r, int n_threads)
{
    memset(r, 0, sizeof *r);
    dut_select(&r->dut);
    r->n_threads = n_threads;
    cr_assert_eq(alloc_provider_host_create(&r->host), 0, "%s", fs_errmsg());
    if (r->dut.cuda) {
        cr_assert_eq(alloc_provider_cuda_create(r->dut.index, &r->dev), 0, "%s: %s", r->dut.name,
                     fs_errmsg());
        cr_assert_eq(alloc_provider_pinned_create(&r->pinned), 0, "pinned: %s", fs_errmsg());
    }
    r->ref_cache = rig_cache(r->host, "reference");
    r->dev_cache = rig_cache(r->dev ? r->dev : r->host, r->dut.name);
    r->host_cache = rig_cache(r->host, "host");
    r->staging = rig_cache(r->pinned ? r->pinned : r->host, "staging");
}

static eng_model_config_t rig_config(const rig_t *r, bool on_device)
{
    if (!on_device)
        return (eng_model_config_t){.name = "cpu", .cache = r->ref_cache,
                                    .n_threads = r->n_threads};
    eng_device_t dev = {r->dut.cuda ? ENG_DEVICE_CUDA : ENG_DEVICE_CPU, r->dut.index};
    return (eng_model_config_t){.name = "dut", .cache = r->dev_cache, .device = dev,
                                .n_threads = r->n_threads, .host_cache = r->host_cache,
                                .staging = r->staging};
}

/* Expects every cache at zero allocated bytes; `what` names the case. */
static void rig_expect_idle(rig_t *r, const char *what)
{
    alloc_cache_t *caches[4] = {r->ref_cache, r->dev_cache, r->host_cache, r->staging};
    for (int i = 0; i < 4; i++) {
        alloc_cache_stats_t st;
        alloc_cache_stats(caches[i], &st);
        cr_expect_eq(st.allocated.current, 0, "%s: cache '%s' holds %lld bytes after destroy",
                     what, alloc_cache_name(caches[i]), (long long)st.allocated.current);
    }
}

/* Empties every cache, checks nothing stays reserved, and frees the rig. */
static void rig_close(rig_t *r)
{
    alloc_cache_t *caches[4] = {r->ref_cache, r->dev_cache, r->host_cache, r->staging};
    for (int i = 0; i < 4; i++) {
        alloc_cache_empty(caches[i], ALLOC_RELEASE_EMPTY);
        alloc_cache_stats_t st;
        alloc_cache_stats(caches[i], &st);
        cr_expect_eq(st.reserved.current, 0, "cache '%s' keeps %lld bytes reserved after empty",
                     alloc_cache_name(caches[i]), (long long)st.reserved.current);
        alloc_cache_destroy(caches[i]);
    }
    alloc_provider_destroy(r->pinned);
    alloc_provider_destroy(r->dev);
    alloc_provider_destroy(r->host);
}

/* ---- values: a fixed-seed generator and the dtypes --------------------- */

typedef struct rng {
    uint64_t s;
} rng_t;

/* splitmix64: tiny, fast, and the same stream on every machine. */
static uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static int64_t rng_int(rng_t *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_unit(r) * ((double)hi - (double)lo + 1.0));
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static const struct {
    const char *name;
    eng_dtype_t dt;
} dtype_names[] = {
    {"f32", ENG_DT_FLOAT}, {"f64", ENG_DT_DOUBLE}, {"f16", ENG_DT_FLOAT16},
    {"bf16", ENG_DT_BFLOAT16}, {"i8", ENG_DT_INT8}, {"i16", ENG_DT_INT16},
    {"i32", ENG_DT_INT32}, {"i64", ENG_DT_INT64}, {"u8", ENG_DT_UINT8},
    {"u16", ENG_DT_UINT16}, {"u32", ENG_DT_UINT32}, {"u64", ENG_DT_UINT64},
    {"bool", ENG_DT_BOOL}, {"f8e4m3fn", ENG_DT_FLOAT8E4M3FN},
    {"f8e4m3fnuz", ENG_DT_FLOAT8E4M3FNUZ}, {"f8e5m2", ENG_DT_FLOAT8E5M2},
    {"f8e5m2fnuz", ENG_DT_FLOAT8E5M2FNUZ},
};

static eng_dtype_t dtype_parse(const char *name)
{
    for (size_t i = 0; i < N_OF(dtype_names); i++)
        if (strcmp(name, dtype_names[i].name) == 0)
            return dtype_names[i].dt;
    return ENG_DT_UNDEFINED;
}

static bool dtype_is_float(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT || dt == ENG_DT_DOUBLE || dt == ENG_DT_FLOAT16 ||
           dt == ENG_DT_BFLOAT16 || eng_dtype_is_float8(dt);
}

static bool dtype_is_unsigned(eng_dtype_t dt)
{
    return dt == ENG_DT_UINT8 || dt == ENG_DT_UINT16 || dt == ENG_DT_UINT32 ||
           dt == ENG_DT_UINT64 || dt == ENG_DT_BOOL;
}

/* IEEE half from a double, rounding to nearest even (so generated f16
 * inputs are exact halves). */
static uint16_t f16_from_double(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    v = fabs(v);
    if (isnan(v))
        return 0x7e00;
    if (v >= 65520.0)
        return sign | 0x7c00;
    if (v < 0x1.0p-14)
        return sign | (uint16_t)lrint(v * 0x1.0p24); /* subnormal, may round up to 2^-14 */
    int e;
    long m = lrint(frexp(v, &e) * 2048.0); /* v = m / 1024 * 2^(e-1) */
    if (m == 2048) {
        m = 1024;
        e++;
    }
    if (e - 1 + 15 >= 31)
        return sign | 0x7c00;
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(m - 1024);
}

static double f16_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0    ? ldexp(m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp(m | 0x400, e - 25);
    return h & 0x8000 ? -v : v;
}

static uint16_t bf16_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if (isnan(f))
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static double bf16_to_double(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Stores element k of t: `f` for a float dtype, `i` for the others. */
static void elem_store(eng_tensor_t *t, int64_t k, double f, int64_t i)
{
    void *d = t->data;
    switch (t->dtype) {
    case ENG_DT_FLOAT: ((float *)d)[k] = (float)f; break;
    case ENG_DT_DOUBLE: ((double *)d)[k] = f; break;
    case ENG_DT_FLOAT16: ((uint16_t *)d)[k] = f16_from_double(f); break;
    case ENG_DT_BFLOAT16: ((uint16_t *)d)[k] = bf16_from_float((float)f); break;
    case ENG_DT_INT8: ((int8_t *)d)[k] = (int8_t)i; break;
    case ENG_DT_INT16: ((int16_t *)d)[k] = (int16_t)i; break;
    case ENG_DT_INT32: ((int32_t *)d)[k] = (int32_t)i; break;
    case ENG_DT_INT64: ((int64_t *)d)[k] = i; break;
    case ENG_DT_UINT8: ((uint8_t *)d)[k] = (uint8_t)i; break;
    case ENG_DT_UINT16: ((uint16_t *)d)[k] = (uint16_t)i; break;
    case ENG_DT_UINT32: ((uint32_t *)d)[k] = (uint32_t)i; break;
    case ENG_DT_UINT64: ((uint64_t *)d)[k] = (uint64_t)i; break;
    case ENG_DT_BOOL: ((uint8_t *)d)[k] = i != 0; break;
    case ENG_DT_FLOAT8E4M3FN:
    case ENG_DT_FLOAT8E4M3FNUZ:
    case ENG_DT_FLOAT8E5M2:
    case ENG_DT_FLOAT8E5M2FNUZ:
        ((uint8_t *)d)[k] =
            eng_float_to_f8((float)f, (eng_f8_kind_t)(t->dtype - ENG_DT_FLOAT8E4M3FN), true);
        break;
    default: cr_assert_fail("no generator for dtype %s", eng_dtype_name(t->dtype));
    }
}

static double elem_float(const eng_tensor_t *t, int64_t k)
{
    const void *d = t->data;
    switch (t->dtype) {
    case ENG_DT_FLOAT: return ((const float *)d)[k];
    case ENG_DT_DOUBLE: return ((const double *)d)[k];
    case ENG_DT_FLOAT16: return f16_to_double(((const uint16_t *)d)[k]);
    case ENG_DT_BFLOAT16: return bf16_to_double(((const uint16_t *)d)[k]);
    case ENG_DT_FLOAT8E4M3FN:
    case ENG_DT_FLOAT8E4M3FNUZ:
    case ENG_DT_FLOAT8E5M2:
    case ENG_DT_FLOAT8E5M2FNUZ:
        return eng_f8_to_float(((const uint8_t *)d)[k],
                               (eng_f8_kind_t)(t->dtype - ENG_DT_FLOAT8E4M3FN));
    default: return NAN;
    }
}

/* An integer or bool element, widened (little-endian hosts). */
static uint64_t elem_bits(const eng_tensor_t *t, int64_t k)
{
    size_t es = eng_dtype_size(t->dtype);
    uint64_t u = 0;
    memcpy(&u, (const char *)t->data + (size_t)k * es, es);
    if (dtype_is_unsigned(t->dtype) || es == 8)
        return u;
    int shift = 64 - 8 * (int)es; /* sign-extend */
    return (uint64_t)((int64_t)(u << shift) >> shift);
}

static void elem_format(const eng_tensor_t *t, int64_t k, char *buf, size_t len)
{
    if (dtype_is_float(t->dtype))
        snprintf(buf, len, "%.9g", elem_float(t, k));
    else if (dtype_is_unsigned(t->dtype))
        snprintf(buf, len, "%llu", (unsigned long long)elem_bits(t, k));
    else
        snprintf(buf, len, "%lld", (long long)(int64_t)elem_bits(t, k));
}

/* ---- input specs ------------------------------------------------------- */

typedef enum dist {
    DIST_DEFAULT, DIST_POS, DIST_UNIT, DIST_NZ, DIST_DISTINCT, DIST_FRAC, DIST_INT,
    DIST_SPECIAL, DIST_RANGE,
} dist_t;

typedef struct spec {
    bool absent, init;
    eng_dtype_t dt;
    eng_shape_t shape;
    dist_t dist;
    double lo, hi;           /* DIST_RANGE */
    int n_vals;              /* -1: generated */
    double fv[OC_MAX_VALS];  /* given values, float dtypes */
    int64_t iv[OC_MAX_VALS]; /* given values, the others */
} spec_t;

static const struct {
    const char *name;
    dist_t dist;
} dist_names[] = {
    {"u", DIST_DEFAULT}, {"pos", DIST_POS}, {"unit", DIST_UNIT}, {"nz", DIST_NZ},
    {"distinct", DIST_DISTINCT}, {"frac", DIST_FRAC}, {"int", DIST_INT},
    {"special", DIST_SPECIAL},
};

/* Parses "=f32[2,3]:pos{...}" (the grammar at the top). A malformed spec is
 * a bug in a table: the test stops there. */
static void spec_parse(const char *text, spec_t *s)
{
    memset(s, 0, sizeof *s);
    s->n_vals = -1;
    if (strcmp(text, "-") == 0) {
        s->absent = true;
        return;
    }
    const char *p = text;
    if (*p == '=') {
        s->init = true;
        p++;
    }
    char word[32];
    size_t len = strcspn(p, "[");
    cr_assert(len < sizeof word && p[len] == '[', "spec '%s': expected dtype[dims]", text);
    memcpy(word, p, len);
    word[len] = '\0';
    s->dt = dtype_parse(word);
    cr_assert(s->dt != ENG_DT_UNDEFINED, "spec '%s': unknown dtype '%s'", text, word);
    for (p += len + 1; *p != ']';) {
        char *end;
        long long v = strtoll(p, &end, 10);
        cr_assert(end != p && v >= 0 && s->shape.rank < ENG_MAX_RANK, "spec '%s': bad dims",
                  text);
        s->shape.dims[s->shape.rank++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    p++;
    if (*p == ':') {
        p++;
        len = strcspn(p, "{");
        cr_assert(len < sizeof word, "spec '%s': bad distribution", text);
        memcpy(word, p, len);
        word[len] = '\0';
        p += len;
        bool known = sscanf(word, "r(%lf,%lf)", &s->lo, &s->hi) == 2;
        if (known)
            s->dist = DIST_RANGE;
        for (size_t i = 0; !known && i < N_OF(dist_names); i++)
            if (strcmp(word, dist_names[i].name) == 0) {
                s->dist = dist_names[i].dist;
                known = true;
            }
        cr_assert(known, "spec '%s': unknown distribution '%s'", text, word);
    }
    if (*p == '{') {
        s->n_vals = 0;
        for (p++; *p != '}';) {
            char *end;
            cr_assert_lt(s->n_vals, OC_MAX_VALS, "spec '%s': too many values", text);
            if (dtype_is_float(s->dt))
                s->fv[s->n_vals] = strtod(p, &end);
            else
                s->iv[s->n_vals] = (int64_t)strtoll(p, &end, 10);
            cr_assert(end != p, "spec '%s': bad value at '%s'", text, p);
            s->n_vals++;
            p = *end == ',' ? end + 1 : end;
        }
        p++;
        cr_assert_eq(s->n_vals, eng_shape_numel(&s->shape), "spec '%s': %d values for %lld "
                     "elements", text, s->n_vals, (long long)eng_shape_numel(&s->shape));
    }
    cr_assert(*p == '\0', "spec '%s': unexpected '%s'", text, p);
}

/* Values of one float element, as the distribution says. */
static double gen_float(const spec_t *s, rng_t *r, int64_t k, const int64_t *perm, int64_t n)
{
    static const double special[12] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40,
                                       -1e-40, 3e38, -3e38, 1.0, -1.0, 0.5};
    double u = rng_unit(r);
    switch (s->dist) {
    case DIST_POS: return 0.1 + 3.9 * u;
    case DIST_UNIT: return -0.95 + 1.9 * u;
    case DIST_NZ: return (u < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * rng_unit(r));
    case DIST_DISTINCT: return (double)(perm[k] - n / 2) / 8.0; /* exact in float */
    case DIST_FRAC: {
        double f = 0.05 + 0.4 * rng_unit(r);
        return floor(-6.0 + 12.0 * u) + (rng_unit(r) < 0.5 ? f : 1.0 - f);
    }
    case DIST_INT: return floor(u * 7.0) - 3.0;
    case DIST_SPECIAL: return k % 16 < 12 ? special[k % 16] : -2.0 + 4.0 * u;
    case DIST_RANGE: return s->lo + (s->hi - s->lo) * u;
    case DIST_DEFAULT: break;
    }
    return -2.0 + 4.0 * u;
}

static int64_t gen_int(const spec_t *s, rng_t *r, int64_t k, const int64_t *perm, int64_t n)
{
    bool sign = !dtype_is_unsigned(s->dt);
    switch (s->dist) {
    case DIST_DEFAULT:
        return s->dt == ENG_DT_BOOL ? rng_int(r, 0, 1) : rng_int(r, sign ? -9 : 0, 9);
    case DIST_POS: return rng_int(r, 1, 9);
    case DIST_NZ: return (sign && rng_unit(r) < 0.5 ? -1 : 1) * rng_int(r, 1, 9);
    case DIST_DISTINCT: return perm[k] - (sign ? n / 2 : 0);
    case DIST_RANGE: return rng_int(r, (int64_t)s->lo, (int64_t)s->hi);
    default: cr_assert_fail("distribution %d is for float dtypes only", (int)s->dist);
    }
    return 0;
}

/* A host tensor (caller frees with eng_tensor_free) holding the spec's
 * values: the given ones, or generated from `seed`. */
static eng_tensor_t *spec_tensor(const spec_t *s, uint64_t seed)
{
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(s->dt, &s->shape, &t), 0, "%s", fs_errmsg());
    int64_t n = eng_shape_numel(&s->shape);
    rng_t r = {seed};
    int64_t *perm = NULL;
    if (s->dist == DIST_DISTINCT && s->n_vals < 0) {
        cr_assert(perm = malloc((size_t)(n ? n : 1) * sizeof *perm));
        for (int64_t k = 0; k < n; k++)
            perm[k] = k;
        for (int64_t k = n - 1; k > 0; k--) { /* Fisher-Yates */
            int64_t j = rng_int(&r, 0, k), tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
    }
    bool fl = dtype_is_float(s->dt);
    for (int64_t k = 0; k < n; k++) {
        if (s->n_vals >= 0)
            elem_store(t, k, s->fv[k], s->iv[k]);
        else if (fl)
            elem_store(t, k, gen_float(s, &r, k, perm, n), 0);
        else
            elem_store(t, k, 0.0, gen_int(s, &r, k, perm, n));
    }
    free(perm);
    return t;
}

/* A TensorProto (freed by mb_free) holding the spec's values. */
static Onnx__TensorProto *spec_proto(mb_t *b, const char *name, const spec_t *s, uint64_t seed)
{
    eng_tensor_t *t = spec_tensor(s, seed);
    Onnx__TensorProto *tp = mb_tensor(b, name, (int)s->dt, s->shape.rank, s->shape.dims);
    mb_raw(b, tp, t->data, eng_tensor_bytes(t));
    eng_tensor_free(t);
    return tp;
}

/* ---- attributes -------------------------------------------------------- */

/* Adds "key=value ..." to node n (the grammar at the top). */
static void attrs_add(mb_t *b, Onnx__NodeProto *n, const char *attrs, uint64_t seed)
{
    char buf[512];
    cr_assert_lt(strlen(attrs), sizeof buf, "attributes '%s' are too long", attrs);
    strcpy(buf, attrs);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *val = strchr(tok, '=');
        cr_assert(val && val != tok, "attribute '%s': expected key=value", tok);
        *val++ = '\0';
        size_t len = strlen(val);
        if (val[0] == '\'') {
            cr_assert(len >= 2 && val[len - 1] == '\'', "attribute %s: unterminated string", tok);
            val[len - 1] = '\0';
            mb_attr_s(b, n, tok, val + 1);
        } else if (val[0] == '[' && val[1] == '\'') {
            const char *sv[OC_MAX_VALS];
            size_t count = 0;
            for (char *p = val + 1; *p == '\'';) {
                char *end = strchr(p + 1, '\'');
                cr_assert(end && count < OC_MAX_VALS, "attribute %s: bad list '%s'", tok, val);
                *end = '\0';
                sv[count++] = p + 1;
                p = end[1] == ',' ? end + 2 : end + 1;
            }
            mb_attr_strs(b, n, tok, sv, count);
        } else if (val[0] == '[') {
            bool fl = strpbrk(val, ".eE") != NULL;
            int64_t iv[OC_MAX_VALS];
            float fv[OC_MAX_VALS];
            size_t count = 0;
            for (char *p = val + 1; *p && *p != ']';) {
                char *end;
                cr_assert_lt(count, OC_MAX_VALS);
                if (fl)
                    fv[count] = strtof(p, &end);
                else
                    iv[count] = (int64_t)strtoll(p, &end, 10);
                cr_assert(end != p, "attribute %s: bad list '%s'", tok, val);
                count++;
                p = *end == ',' ? end + 1 : end;
            }
            if (fl)
                mb_attr_floats(b, n, tok, fv, count);
            else
                mb_attr_ints(b, n, tok, iv, count);
        } else if (isalpha((unsigned char)val[0]) && strchr(val, '[')) {
            spec_t s;
            spec_parse(val, &s);
            mb_attr_t(b, n, tok, spec_proto(b, NULL, &s, seed));
        } else if (isalpha((unsigned char)val[0])) {
            eng_dtype_t dt = dtype_parse(val);
            cr_assert(dt != ENG_DT_UNDEFINED, "attribute %s: unknown dtype '%s'", tok, val);
            mb_attr_i(b, n, tok, (int64_t)dt);
        } else if (strpbrk(val, ".eE")) {
            mb_attr_f(b, n, tok, strtof(val, NULL));
        } else {
            mb_attr_i(b, n, tok, (int64_t)strtoll(val, NULL, 10));
        }
    }
}

/* ---- comparing outputs ------------------------------------------------- */

typedef struct tol {
    double rtol, atol;
    bool exact;     /* CPU against CPU: bit for bit */
    bool unordered; /* rows along the last axis compare as sets (TopK sorted=0) */
} tol_t;

static bool close_enough(double got, double want, const tol_t *tol)
{
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want);
    if (got == want)
        return true;
    if (isinf(got) || isinf(want))
        return false;
    return fabs(got - want) <= tol->atol + tol->rtol * fabs(want);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts each row along the last axis of a float32 or int64 tensor in place
 * (floats through a double copy of the row). */
static void rows_sort(eng_tensor_t *t)
{
    int64_t n = eng_shape_numel(&t->shape);
    int64_t row = t->shape.rank ? t->shape.dims[t->shape.rank - 1] : 1;
    if (n == 0 || row <= 1)
        return;
    cr_assert(t->dtype == ENG_DT_FLOAT || t->dtype == ENG_DT_INT64,
              "rows_sort compares TopK outputs, float32 or int64; got %s",
              eng_dtype_name(t->dtype));
    double *tmp = malloc((size_t)row * sizeof *tmp);
    cr_assert(tmp);
    for (int64_t r0 = 0; r0 < n; r0 += row) {
        if (t->dtype == ENG_DT_INT64) {
            qsort((int64_t *)t->data + r0, (size_t)row, sizeof(int64_t), cmp_i64);
            continue;
        }
        float *f = (float *)t->data + r0;
        for (int64_t k = 0; k < row; k++)
            tmp[k] = f[k];
        qsort(tmp, (size_t)row, sizeof *tmp, cmp_double);
        for (int64_t k = 0; k < row; k++)
            f[k] = (float)tmp[k];
    }
    free(tmp);
}

/* Expects `got` (device) to match `want` (CPU); `what` names the case and
 * the output. Both are borrowed, and sorted in place for an unordered
 * comparison. */
static void expect_tensor_match(const char *what, eng_tensor_t *want, eng_tensor_t *got,
                                const tol_t *tol)
{
    char a[96], b[96];
    if (!want || !got) {
        cr_expect(false, "%s: output missing on the %s", what, want ? "device" : "CPU");
        return;
    }
    if (got->dtype != want->dtype || !eng_shape_equal(&got->shape, &want->shape)) {
        cr_expect(false, "%s: the device gives %s%s, the CPU %s%s", what,
                  eng_dtype_name(got->dtype), eng_shape_format(&got->shape, a, sizeof a),
                  eng_dtype_name(want->dtype), eng_shape_format(&want->shape, b, sizeof b));
        return;
    }
    if (tol->unordered) {
        rows_sort(want);
        rows_sort(got);
    }
    int64_t n = eng_shape_numel(&want->shape), bad = 0, first = -1;
    size_t es = eng_dtype_size(want->dtype);
    bool fl = dtype_is_float(want->dtype);
    for (int64_t k = 0; k < n; k++) {
        const char *pw = (const char *)want->data + (size_t)k * es;
        const char *pg = (const char *)got->data + (size_t)k * es;
        bool ok = tol->exact || !fl ? memcmp(pw, pg, es) == 0
                                    : close_enough(elem_float(got, k), elem_float(want, k), tol);
        if (!ok && bad++ == 0)
            first = k;
    }
    if (bad) {
        elem_format(want, first, a, sizeof a);
        elem_format(got, first, b, sizeof b);
        cr_expect(false, "%s: %lld of %lld elements differ; first at %lld: CPU %s, device %s "
                  "(%s)", what, (long long)bad, (long long)n, (long long)first, a, b,
                  tol->exact ? "bit for bit"
                  : fl       ? "atol + rtol*|cpu|"
                             : "exact");
    }
}

/* The comparison and the generators themselves: what CPU against CPU
 * cannot show, since there every value matches bit for bit. */
Test(cuda_consistency, the_harness_compares_and_generates_as_documented)
{
    dut_t d;
    dut_select(&d);
    tol_t tol = {.rtol = OC_RTOL, .atol = OC_ATOL};
    cr_expect(close_enough(NAN, NAN, &tol));
    cr_expect(!close_enough(NAN, 1.0, &tol) && !close_enough(1.0, NAN, &tol));
    cr_expect(close_enough(INFINITY, INFINITY, &tol));
    cr_expect(!close_enough(-INFINITY, INFINITY, &tol) && !close_enough(3e38, INFINITY, &tol));
    cr_expect(close_enough(1000.09, 1000.0, &tol), "within rtol of the CPU value");
    cr_expect(!close_enough(1000.2, 1000.0, &tol));
    cr_expect(close_enough(9e-6, 0.0, &tol) && !close_enough(2e-5, 0.0, &tol), "atol near 0");
    /* Half precision round trips, and rounds to nearest even. */
    for (double v = -70000.0; v <= 70000.0; v += 0.37 * fabs(v) + 1e-3)
        cr_expect_eq(f16_from_double(f16_to_double(f16_from_double(v))), f16_from_double(v));
    cr_expect_eq(f16_from_double(1.0 + 0x1.0p-11), 0x3c00, "a tie rounds to even");
    cr_expect_eq(f16_from_double(65519.0), 0x7bff);
    cr_expect_eq(f16_from_double(65520.0), 0x7c00);
    cr_expect_eq(bf16_from_float(1.0f + 0x1.0p-8f), 0x3f80, "a tie rounds to even");
    cr_expect_eq(bf16_to_double(0x3fc0), 1.5);
    /* The distributions keep their promises. */
    static const char *const specs[] = {"f32[4096]:distinct", "f32[4096]:frac",
                                        "i32[4096]:nz", "f32[4096]:unit", "u8[4096]"};
    for (size_t i = 0; i < N_OF(specs); i++) {
        spec_t s;
        spec_parse(specs[i], &s);
        eng_tensor_t *t = spec_tensor(&s, 7);
        int bad = 0;
        double sorted[4096];
        for (int64_t k = 0; k < 4096 && s.dist == DIST_DISTINCT; k++)
            sorted[k] = elem_float(t, k);
        if (s.dist == DIST_DISTINCT)
            qsort(sorted, 4096, sizeof sorted[0], cmp_double);
        for (int64_t k = 0; k < 4096; k++) {
            double v = t->dtype == ENG_DT_FLOAT ? elem_float(t, k) : (double)elem_bits(t, k);
            double f = v - floor(v);
            switch (s.dist) {
            case DIST_DISTINCT: bad += k > 0 && sorted[k] == sorted[k - 1]; break;
            case DIST_FRAC: bad += f < 0.049 || f > 0.951 || fabs(f - 0.5) < 0.049; break;
            case DIST_NZ: bad += (int32_t)elem_bits(t, k) == 0; break;
            case DIST_UNIT: bad += !(fabs(v) < 1.0); break;
            default: bad += v > 9; break;
            }
        }
        cr_expect_eq(bad, 0, "%s: %d values break the distribution", specs[i], bad);
        eng_tensor_free(t);
    }
    spec_t s;
    spec_parse("=i64[2,2]{1,-2,3,9223372036854775807}", &s);
    cr_expect(s.init && s.shape.rank == 2 && s.iv[3] == INT64_MAX && s.iv[1] == -2);
    spec_parse("-", &s);
    cr_expect(s.absent);
}

/* ---- op cases ---------------------------------------------------------- */

typedef struct op_case {
    const char *op;
    int opset;
    const char *attrs;
    const char *in[OC_MAX_IN]; /* specs; NULL ends the list */
    int n_out;                 /* outputs compared; 0 means 1 */
    bool dyn;                  /* its plan must be dynamic */
    bool unordered;            /* see tol_t */
    double rtol, atol;         /* 0: OC_RTOL, OC_ATOL */
} op_case_t;

/* "Add/13 [broadcast=1] (f32[2,3], f32[3])": the case as messages name it;
 * its hash seeds the generator, so a case keeps its inputs when rows are
 * added around it. */
static void case_describe(const op_case_t *c, char *buf, size_t len)
{
    int w = snprintf(buf, len, "%s/%d [%s] (", c->op, c->opset, c->attrs);
    for (int i = 0; i < OC_MAX_IN && c->in[i] && w > 0 && (size_t)w < len; i++)
        w += snprintf(buf + w, len - (size_t)w, "%s%s", i ? ", " : "", c->in[i]);
    if (w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, ")");
}

/* The one-node model of a case, packed, and its runtime inputs. */
typedef struct case_model {
    mb_t mb;
    uint8_t *bytes;
    size_t len;
    size_t n_inputs;
    eng_tensor_t *owned[OC_MAX_IN];
    eng_tensor_t inputs[OC_MAX_IN];
    eng_shape_t shapes[OC_MAX_IN];
} case_model_t;

/* Graph inputs come only in the dtypes the engine computes (float, int32,
 * int64, bool, uint8); a runtime input of another dtype (f16, f64, int8,
 * uint64, ...) is fed as float or int64 and cast by a node in front of the
 * op, so the op still sees exactly the generated values. feed_tensor
 * converts t (taken) to the feeding dtype; feed_node adds the input and
 * the Cast. */
static eng_tensor_t *feed_tensor(eng_tensor_t *t)
{
    bool fl = dtype_is_float(t->dtype);
    eng_tensor_t *f = NULL;
    cr_assert_eq(eng_tensor_alloc_host(fl ? ENG_DT_FLOAT : ENG_DT_INT64, &t->shape, &f), 0);
    for (int64_t k = 0; k < eng_shape_numel(&t->shape); k++)
        elem_store(f, k, fl ? elem_float(t, k) : 0.0, fl ? 0 : (int64_t)elem_bits(t, k));
    eng_tensor_free(t);
    return f;
}

static void feed_node(mb_t *b, const char *name, const eng_tensor_t *feed, eng_dtype_t dt)
{
    char fed[32];
    snprintf(fed, sizeof fed, "%s_fed", name);
    mb_input(b, fed, (int)feed->dtype, feed->shape.rank, feed->shape.dims, NULL);
    mb_attr_i(b, mb_node(b, "Cast", fed, fed, name), "to", (int64_t)dt);
}

static void case_build(const op_case_t *c, uint64_t seed, case_model_t *cm)
{
    memset(cm, 0, sizeof *cm);
    mb_init(&cm->mb, OC_IR_VERSION, c->opset);
    char ins[128] = "", outs[64] = "", name[16];
    for (int i = 0; i < OC_MAX_IN && c->in[i]; i++) {
        spec_t s;
        spec_parse(c->in[i], &s);
        snprintf(name, sizeof name, "x%d", i);
        size_t w = strlen(ins);
        snprintf(ins + w, sizeof ins - w, "%s%s", i ? "," : "", s.absent ? "" : name);
        if (s.absent)
            continue;
        uint64_t in_seed = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
        if (s.init) {
            mb_initializer(&cm->mb, spec_proto(&cm->mb, name, &s, in_seed));
            continue;
        }
        eng_tensor_t *t = spec_tensor(&s, in_seed);
        if (eng_dtype_supported(s.dt)) {
            mb_input(&cm->mb, name, (int)s.dt, s.shape.rank, s.shape.dims, NULL);
        } else {
            t = feed_tensor(t);
            feed_node(&cm->mb, name, t, s.dt);
        }
        cm->owned[cm->n_inputs] = t;
        cm->inputs[cm->n_inputs] = *t;
        cm->shapes[cm->n_inputs++] = t->shape;
    }
    int n_out = c->n_out ? c->n_out : 1;
    cr_assert_leq(n_out, OC_MAX_OUT, "%s: too many outputs for this harness", c->op);
    for (int j = 0; j < n_out; j++) {
        size_t w = strlen(outs);
        snprintf(outs + w, sizeof outs - w, "%sy%d", j ? "," : "", j);
    }
    Onnx__NodeProto *node = mb_node(&cm->mb, c->op, "node", ins, outs);
    attrs_add(&cm->mb, node, c->attrs, seed);
    for (int j = 0; j < n_out; j++) {
        snprintf(name, sizeof name, "y%d", j);
        mb_output(&cm->mb, name, 0, -1, NULL);
    }
    cm->bytes = mb_pack(&cm->mb, &cm->len);
}

static void case_model_free(case_model_t *cm)
{
    for (size_t i = 0; i < cm->n_inputs; i++)
        eng_tensor_free(cm->owned[i]);
    mb_free(&cm->mb);
}

static void outputs_free(eng_tensor_t **outs, int n)
{
    for (int j = 0; j < n; j++) {
        eng_tensor_free(outs[j]);
        outs[j] = NULL;
    }
}

/* "  -> float[3,4] {0.25, -1, ...}": what a chased case computed. */
static void outputs_print(eng_tensor_t *const *outs, int n)
{
    for (int j = 0; j < n; j++) {
        char shape[96], v[40];
        if (!outs[j])
            continue;
        fprintf(stderr, "  -> %s%s {", eng_dtype_name(outs[j]->dtype),
                eng_shape_format(&outs[j]->shape, shape, sizeof shape));
        int64_t numel = eng_shape_numel(&outs[j]->shape);
        for (int64_t k = 0; k < numel && k < 8; k++) {
            elem_format(outs[j], k, v, sizeof v);
            fprintf(stderr, "%s%s", k ? ", " : "", v);
        }
        fprintf(stderr, "%s}\n", numel > 8 ? ", ..." : "");
    }
}

/* Runs one case on both sides and compares. Failures are expectations, so
 * the family's other cases still run. */
static void case_run(rig_t *r, const op_case_t *c)
{
    char desc[400], what[440];
    case_describe(c, desc, sizeof desc);
    const char *only = getenv("FLATSERVE_CONSISTENCY_CASE");
    if (only && *only && !strstr(desc, only))
        return;
    if (only && *only)
        fprintf(stderr, "cuda_consistency: %s\n", desc);
    case_model_t cm;
    case_build(c, fnv1a(desc), &cm);
    int n_out = c->n_out ? c->n_out : 1;
    eng_tensor_t *want[OC_MAX_OUT] = {NULL}, *got[OC_MAX_OUT] = {NULL};
    eng_model_t *ref = NULL, *dev = NULL;
    eng_model_config_t rcfg = rig_config(r, false), dcfg = rig_config(r, true);
    int rc = eng_model_load_bytes(cm.bytes, cm.len, NULL, &rcfg, &ref);
    cr_expect_eq(rc, 0, "%s: loading on the CPU: %s", desc, fs_errmsg());
    if (rc == 0) {
        rc = eng_model_load_bytes(cm.bytes, cm.len, NULL, &dcfg, &dev);
        cr_expect_eq(rc, 0, "%s: loading on %s: %s", desc, r->dut.name, fs_errmsg());
    }
    if (rc == 0) {
        eng_plan_info_t info = {0};
        rc = eng_model_plan_info(dev, cm.shapes, cm.n_inputs, &info);
        cr_expect_eq(rc, 0, "%s: planning on %s: %s", desc, r->dut.name, fs_errmsg());
        cr_expect(rc != 0 || info.dynamic == c->dyn, "%s: the plan is %s, the case expects %s",
                  desc, info.dynamic ? "dynamic" : "static", c->dyn ? "dynamic" : "static");
    }
    if (rc == 0) {
        rc = eng_model_run(ref, cm.inputs, cm.n_inputs, want);
        cr_expect_eq(rc, 0, "%s: running on the CPU: %s", desc, fs_errmsg());
    }
    if (rc == 0) {
        rc = eng_model_run(dev, cm.inputs, cm.n_inputs, got);
        cr_expect_eq(rc, 0, "%s: running on %s: %s", desc, r->dut.name, fs_errmsg());
    }
    if (rc == 0 && only && *only)
        outputs_print(want, n_out);
    tol_t tol = {.rtol = c->rtol > 0 ? c->rtol : OC_RTOL, .atol = c->atol > 0 ? c->atol : OC_ATOL,
                 .exact = !r->dut.cuda, .unordered = c->unordered};
    for (int j = 0; rc == 0 && j < n_out; j++) {
        snprintf(what, sizeof what, "%s output %d", desc, j);
        expect_tensor_match(what, want[j], got[j], &tol);
    }
    outputs_free(want, n_out);
    outputs_free(got, n_out);
    eng_model_destroy(dev);
    eng_model_destroy(ref);
    case_model_free(&cm);
    rig_expect_idle(r, desc);
}

static void cases_run(const op_case_t *cases, size_t n)
{
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < n; i++)
        case_run(&r, &cases[i]);
    rig_close(&r);
}

/* A row: OC(op, opset, attributes, input specs...), then any of .n_out,
 * .dyn, .unordered, .rtol, .atol. */
#define OC(op_, opset_, attrs_, ...)                                                            \
    .op = op_, .opset = opset_, .attrs = attrs_, .in = {__VA_ARGS__}

/* ---- the tables: one per op family (engine/op.h) ----------------------- */

static const op_case_t unary_cases[] = {
    /* The shapes every element-wise kernel meets: rank 0 to 5, sizes off
     * any block size, one element, 100003 elements, empty. */
    {OC("Relu", 13, "", "f32[]")},
    {OC("Relu", 13, "", "f32[1]")},
    {OC("Relu", 13, "", "f32[3]")},
    {OC("Relu", 13, "", "f32[257]")},
    {OC("Relu", 13, "", "f32[100003]")},
    {OC("Relu", 13, "", "f32[2,3,4,5,6]")},
    {OC("Relu", 13, "", "f32[0,3]")},
    {OC("Relu", 14, "", "i32[4,5]")},
    {OC("Relu", 14, "", "i64[7]")},
    {OC("Abs", 13, "", "f32[3,257]:special")},
    {OC("Abs", 13, "", "i32[257]")},
    {OC("Abs", 13, "", "u8[5]")},
    {OC("Abs", 13, "", "f64[4,4]")},
    {OC("Abs", 13, "", "i8[5,3]")},
    {OC("Acos", 13, "", "f32[257]:unit")},
    {OC("Asin", 13, "", "f32[3,5]:unit")},
    {OC("Atan", 13, "", "f32[257]:r(-10,10)")},
    {OC("Ceil", 13, "", "f32[257]:frac")},
    {OC("Ceil", 13, "", "f32[]:frac")},
    {OC("Cos", 13, "", "f32[257]:r(-6,6)")},
    {OC("Elu", 13, "", "f32[257]")},
    {OC("Elu", 13, "alpha=0.5", "f32[2,3,4]")},
    {OC("Erf", 13, "", "f32[257]:r(-3,3)")},
    {OC("Exp", 13, "", "f32[257]:r(-10,10)")},
    {OC("Exp", 13, "", "f32[100003]")},
    {OC("Exp", 13, "", "f32[16]:special")},
    {OC("Floor", 13, "", "f32[257]:frac")},
    {OC("Floor", 13, "", "f32[0]")},
    {OC("Gelu", 20, "", "f32[257]:r(-4,4)")},
    {OC("Gelu", 20, "approximate='tanh'", "f32[3,257]:r(-4,4)")},
    {OC("HardSigmoid", 13, "", "f32[257]:r(-4,4)")},
    {OC("HardSigmoid", 13, "alpha=0.5 beta=0.6", "f32[3,4,5]")},
    {OC("HardSwish", 14, "", "f32[257]:r(-4,4)")},
    {OC("LeakyRelu", 13, "", "f32[257]")},
    {OC("LeakyRelu", 13, "alpha=0.1", "f32[2,3,4]")},
    {OC("Log", 13, "", "f32[257]:pos")},
    {OC("Log", 13, "", "f32[100003]:r(0.001,1000)")},
    {OC("Neg", 13, "", "f32[257]:special")},
    {OC("Neg", 13, "", "i64[3,4]")},
    {OC("Neg", 13, "", "i8[7]")},
    {OC("Neg", 13, "", "f64[7]:special")},
    {OC("Not", 13, "", "bool[257]")},
    {OC("Not", 13, "", "bool[2,3,4]")},
    {OC("Reciprocal", 13, "", "f32[257]:nz")},
    {OC("Round", 13, "", "f32[257]:frac")},
    /* Exact halves given, not computed: ONNX rounds them to even, and a
     * kernel using roundf (half away from zero) differs on every one. */
    {OC("Round", 13, "", "f32[8]{0.5,1.5,2.5,-0.5,-1.5,-2.5,3.5,-0}")},
    {OC("Selu", 13, "", "f32[257]")},
    {OC("Selu", 13, "alpha=2.0 gamma=3.0", "f32[3,4]")},
    {OC("Sigmoid", 13, "", "f32[257]:r(-20,20)")},
    {OC("Sigmoid", 13, "", "f32[2,3,4,5,6]")},
    {OC("Sign", 13, "", "f32[257]:int")},
    {OC("Sign", 13, "", "i32[257]")},
    {OC("Sin", 13, "", "f32[257]:r(-6,6)")},
    {OC("Softplus", 13, "", "f32[257]:r(-20,20)")},
    {OC("Softsign", 13, "", "f32[257]")},
    {OC("Sqrt", 13, "", "f32[257]:pos")},
    /* IEEE: sqrt(-0) = -0, sqrt(inf) = inf, NaN for NaN and negatives. */
    {OC("Sqrt", 13, "", "f32[8]{0,-0,1,4,inf,nan,-1,2}")},
    {OC("IsNaN", 13, "", "f32[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsNaN", 13, "", "f32[257]")},
    {OC("IsInf", 10, "", "f32[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsInf", 10, "detect_negative=0", "f32[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsInf", 10, "detect_positive=0", "f32[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsInf", 10, "", "f32[257]")},
    {OC("Tan", 13, "", "f32[257]:r(-1.2,1.2)")},
    {OC("Tanh", 13, "", "f32[257]:r(-10,10)")},
    {OC("Tanh", 13, "", "f32[1]")},
    {OC("ThresholdedRelu", 13, "", "f32[257]")},
    {OC("ThresholdedRelu", 13, "alpha=0.5", "f32[3,4]")},
    /* Cast: every pair a model meets (sources the engine takes no graph
     * input of come through a feeding Cast, see feed_tensor). Floats to
     * integers truncate, values kept in the target's range: out of range
     * is undefined. */
    {OC("Cast", 13, "to=i32", "f32[257]:r(-100,100)")},
    {OC("Cast", 13, "to=i64", "f32[3,5]:r(-1000,1000)")},
    {OC("Cast", 13, "to=u8", "f32[257]:r(0,255)")},
    {OC("Cast", 13, "to=i8", "f32[257]:r(-100,100)")},
    {OC("Cast", 13, "to=bool", "f32[257]:int")},
    {OC("Cast", 13, "to=f64", "f32[257]:special")},
    /* Beyond fp16's largest finite value (65504) the result is infinite. */
    {OC("Cast", 13, "to=f16", "f32[257]:r(-70000,70000)")},
    {OC("Cast", 13, "to=f16", "f32[257]:r(-0.001,0.001)")},
    {OC("Cast", 13, "to=bf16", "f32[257]")},
    {OC("Cast", 13, "to=f32", "f64[257]")},
    {OC("Cast", 13, "to=f32", "f16[257]")},
    {OC("Cast", 13, "to=f32", "bf16[257]")},
    /* The 8-bit floats (engine/float8.h, one definition for both devices):
     * out of range, infinities and NaN with and without saturate. */
    {OC("Cast", 19, "to=17", "f32[257]:special")},
    {OC("Cast", 19, "to=18 saturate=0", "f32[257]:r(-300,300)")},
    {OC("Cast", 19, "to=19", "f16[257]:special")},
    {OC("Cast", 19, "to=20 saturate=0", "f32[257]:special")},
    {OC("Cast", 19, "to=f32", "f8e4m3fn[257]:r(-500,500)")},
    {OC("Cast", 19, "to=f16", "f8e5m2[257]")},
    {OC("Cast", 19, "to=i32", "f8e4m3fnuz[257]:r(-300,300)")},
    {OC("Cast", 19, "to=f8e5m2fnuz", "f8e4m3fn[257]")},
    /* float16/bfloat16 through float-only kernels (engine/ops.c widens
     * them): the device's float result may round to the other neighbour,
     * so one unit in the half type's last place. */
    {OC("Softmax", 13, "axis=1", "f16[3,67]"), .rtol = 1e-3},
    {OC("MatMul", 13, "", "f16[4,19]", "=f16[19,5]"), .rtol = 2e-3, .atol = 1e-3},
    /* float16/bfloat16 through the element-wise ops' float kernels, rounded
     * once per element (no widening): ops whose float result is exact on
     * both devices (selection, sign, IEEE sqrt) compare at the default
     * tolerance, which is bit for bit at half precision; the others may
     * round to the other neighbour (the device's expf, tanhf, ... and its
     * FMA contraction), so one unit in the half type's last place: rtol
     * 1e-3 for f16, 8e-3 for bf16. 100003 elements take the 8-wide vector
     * path and its tail. */
    {OC("Relu", 14, "", "f16[257]:special")},
    {OC("Relu", 14, "", "bf16[100003]")},
    {OC("Relu", 14, "", "f16[2,3,4,5,6]")},
    {OC("Abs", 13, "", "f16[257]:special")},
    {OC("Neg", 13, "", "bf16[257]:special")},
    {OC("Sign", 13, "", "f16[257]:int")},
    {OC("Floor", 13, "", "f16[257]:frac")},
    {OC("Ceil", 13, "", "bf16[257]:frac")},
    {OC("Round", 13, "", "f16[8]{0.5,1.5,2.5,-0.5,-1.5,-2.5,3.5,-0}")},
    {OC("Sqrt", 13, "", "f16[8]{0,-0,1,4,inf,nan,-1,2}")},
    {OC("Sqrt", 13, "", "bf16[257]:pos"), .rtol = 8e-3},
    {OC("Reciprocal", 13, "", "f16[257]:nz")},
    {OC("IsNaN", 13, "", "f16[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsInf", 10, "", "bf16[8]{0,-0,1,-inf,inf,nan,-1,2}")},
    {OC("IsInf", 10, "detect_positive=0", "f16[257]:special")},
    {OC("Exp", 13, "", "f16[257]"), .rtol = 1e-3},
    {OC("Exp", 13, "", "bf16[100003]"), .rtol = 8e-3},
    {OC("Log", 13, "", "f16[257]:pos"), .rtol = 1e-3},
    {OC("Tanh", 13, "", "f16[257]:r(-5,5)"), .rtol = 1e-3},
    {OC("Tanh", 13, "", "bf16[257]:special"), .rtol = 8e-3},
    {OC("Sigmoid", 13, "", "f16[100003]:r(-10,10)"), .rtol = 1e-3},
    {OC("Sigmoid", 13, "", "bf16[257]:r(-20,20)"), .rtol = 8e-3},
    {OC("Erf", 13, "", "f16[257]:r(-3,3)"), .rtol = 1e-3},
    {OC("Gelu", 20, "", "f16[3,257]:r(-4,4)"), .rtol = 1e-3, .atol = 1e-4},
    {OC("Gelu", 20, "approximate='tanh'", "bf16[3,257]:r(-4,4)"), .rtol = 8e-3, .atol = 1e-3},
    {OC("Softplus", 13, "", "f16[257]:r(-10,10)"), .rtol = 1e-3},
    {OC("HardSigmoid", 13, "", "bf16[257]:r(-4,4)"), .rtol = 8e-3},
    {OC("HardSwish", 14, "", "f16[257]:r(-4,4)"), .rtol = 1e-3, .atol = 1e-4},
    {OC("LeakyRelu", 16, "alpha=0.1", "f16[257]"), .rtol = 1e-3},
    {OC("Elu", 13, "", "bf16[257]"), .rtol = 8e-3},
    {OC("Selu", 13, "", "f16[257]"), .rtol = 1e-3},
    {OC("Mish", 18, "", "f16[257]:r(-10,10)"), .rtol = 1e-3, .atol = 1e-4},
    {OC("Sin", 13, "", "bf16[257]:r(-6,6)"), .rtol = 8e-3, .atol = 1e-3},
    {OC("Cos", 13, "", "f16[257]:r(-6,6)"), .rtol = 1e-3, .atol = 1e-4},
    {OC("Shrink", 9, "lambd=1.0 bias=0.5", "f16[257]")},
    {OC("Clip", 6, "min=-0.5 max=0.5", "f16[257]")},
    {OC("Clip", 13, "", "bf16[257]", "=bf16[]{-0.5}", "=bf16[]{0.75}")},
    {OC("Clip", 13, "", "f16[257]", "f16[]{-0.5}", "f16[]{0.75}")},
    {OC("Clip", 13, "", "f16[3,4]", "-", "=f16[]{0.25}")},
    {OC("Dropout", 13, "", "f16[257]"), .n_out = 2},
    {OC("Dropout", 7, "ratio=0.3", "bf16[3,4]"), .n_out = 2},
    {OC("Cast", 13, "to=f16", "f64[257]")},
    {OC("Cast", 13, "to=f32", "u64[33]:r(0,1e18)")},
    {OC("Cast", 13, "to=i64", "u32[33]:r(0,4e9)")},
    {OC("Cast", 13, "to=f32", "i64[257]")},
    {OC("Cast", 13, "to=f32", "i32[257]:r(-20000000,20000000)")},
    {OC("Cast", 13, "to=f32", "u8[257]")},
    {OC("Cast", 13, "to=f32", "bool[257]")},
    {OC("Cast", 13, "to=i64", "i32[257]")},
    {OC("Cast", 13, "to=i32", "i64[257]:r(-100000,100000)")},
    {OC("Cast", 13, "to=bool", "i64[257]:r(-2,2)")},
    {OC("Cast", 13, "to=i64", "bool[3,4]")},
    {OC("Cast", 13, "to=u16", "i32[5]:r(0,60000)")},
    {OC("Cast", 13, "to=f32", "f32[]")},
    {OC("Cast", 13, "to=i32", "f32[0,4]")},
    {OC("CastLike", 15, "", "f32[257]:r(-100,100)", "=i64[1]")},
    {OC("CastLike", 15, "", "i32[3,4]", "f32[]")},
    /* Clip: attributes before opset 11, optional scalar inputs after. */
    {OC("Clip", 6, "min=-0.5 max=0.5", "f32[257]")},
    {OC("Clip", 13, "", "f32[257]", "=f32[]{-0.5}", "=f32[]{0.5}")},
    {OC("Clip", 13, "", "f32[3,4]", "-", "=f32[]{0.25}")},
    {OC("Clip", 13, "", "f32[3,4]", "=f32[]{-0.25}")},
    {OC("Clip", 13, "", "f32[3,4]")},
    {OC("Clip", 13, "", "i32[257]", "=i32[]{-3}", "=i32[]{4}")},
    /* min and max as runtime inputs: they decide no shape, so the plan
     * stays static and a device kernel reads them from device memory. */
    {OC("Clip", 13, "", "f32[257]", "f32[]{-0.5}", "f32[]{0.75}")},
    {OC("Identity", 13, "", "f32[2,3,4]")},
    {OC("Identity", 13, "", "i64[]")},
    {OC("Identity", 13, "", "bool[0]")},
    {OC("Dropout", 13, "", "f32[257]"), .n_out = 2},
    {OC("BitwiseNot", 18, "", "i64[10]")},
    {OC("BitwiseNot", 18, "", "u8[257]")},
    /* The float-and-double ops: the new ones, and double rows. */
    {OC("Sinh", 13, "", "f32[257]:r(-10,10)")},
    {OC("Cosh", 13, "", "f64[257]:r(-10,10)")},
    {OC("Asinh", 13, "", "f32[257]:r(-100,100)")},
    {OC("Acosh", 13, "", "f32[257]:r(1,100)")},
    {OC("Atanh", 13, "", "f64[257]:unit")},
    {OC("Mish", 18, "", "f32[1000]:r(-30,30)")},
    {OC("Mish", 22, "", "f64[16]:special")},
    {OC("Celu", 12, "alpha=2.0", "f32[257]")},
    {OC("Swish", 24, "alpha=0.5", "f32[257]:r(-100,100)")},
    {OC("Swish", 24, "", "f64[257]")},
    {OC("Exp", 13, "", "f64[257]:r(-10,10)")},
    {OC("Log", 13, "", "f64[257]:pos")},
    {OC("Softplus", 13, "", "f64[16]:special")},
    {OC("HardSigmoid", 13, "", "f64[257]")},
    {OC("Shrink", 9, "", "f32[257]")},
    {OC("Shrink", 9, "lambd=1.0 bias=1.5", "i32[257]")},
    {OC("Shrink", 9, "lambd=2.0 bias=0.5", "f64[257]:r(-5,5)")},
    {OC("Shrink", 9, "bias=3.0", "u8[257]")},
    {OC("Dropout", 13, "", "f32[3,4]", "=f32[]{0.5}")},
    {OC("Dropout", 7, "ratio=0.3", "f32[3,4]")},
    {OC("Dropout", 6, "is_test=1", "f32[3,4]")},
};

static const op_case_t binary_cases[] = {
    /* Numpy broadcasting: equal shapes, suffixes, both sides stretched,
     * scalars, rank 5, empty, 100003 elements. */
    {OC("Add", 13, "", "f32[3,4]", "f32[3,4]")},
    {OC("Add", 13, "", "f32[2,3,4]", "f32[4]")},
    {OC("Add", 13, "", "f32[2,1,4]", "f32[3,1]")},
    {OC("Add", 13, "", "f32[]", "f32[2,3]")},
    {OC("Add", 13, "", "f32[]", "f32[]")},
    {OC("Add", 13, "", "f32[1]", "f32[257]")},
    {OC("Add", 13, "", "f32[2,1,3,1,2]", "f32[1,4,1,5,1]")},
    {OC("Add", 13, "", "f32[0,3]", "f32[3]")},
    {OC("Add", 13, "", "f32[100003]", "f32[100003]")},
    {OC("Add", 13, "", "f32[3,257]", "=f32[257]")},
    {OC("Add", 13, "", "i32[3,4]", "i32[4]")},
    {OC("Add", 13, "", "i64[257]", "i64[]")},
    {OC("Add", 14, "", "u8[3,4]", "u8[3,4]")},
    {OC("Add", 13, "", "f64[3,4]", "f64[1,4]")},
    {OC("Add", 14, "", "i8[5]", "i8[5]")},
    {OC("Add", 14, "", "i16[5]", "i16[1]")},
    {OC("Add", 14, "", "u16[5]", "u16[5]")},
    {OC("Add", 14, "", "u32[5]", "u32[5]")},
    {OC("Add", 14, "", "u64[5]", "u64[5]")},
    /* Opset 6's legacy broadcast: B matches a run of A's dims from axis
     * (from the end when axis is absent). */
    {OC("Add", 6, "broadcast=1 axis=1", "f32[2,3,4,5]", "f32[3,4]")},
    {OC("Mul", 6, "broadcast=1", "f32[2,3,4]", "f32[4]")},
    {OC("Sub", 6, "broadcast=1 axis=0", "f32[3,4]", "f32[3]")},
    {OC("Sub", 13, "", "f32[2,3,4]", "f32[3,1]")},
    {OC("Sub", 13, "", "i64[2,3]", "i64[3]")},
    {OC("Mul", 13, "", "f32[2,3,4,5]", "f32[3,1,1]")},
    {OC("Mul", 13, "", "i32[257]", "i32[]")},
    {OC("Div", 13, "", "f32[257]", "f32[257]:nz")},
    {OC("Div", 13, "", "f32[2,3,4]", "f32[]:nz")},
    /* Integer division truncates toward zero; divisors are never zero. */
    {OC("Div", 13, "", "i32[257]:r(-100,100)", "i32[257]:nz")},
    {OC("Div", 13, "", "i64[3,4]:r(-100,100)", "i64[4]:nz")},
    {OC("Div", 14, "", "u8[257]:r(0,250)", "u8[257]:nz")},
    {OC("Pow", 13, "", "f32[257]:pos", "f32[257]")},
    {OC("Pow", 13, "", "f32[2,3]:pos", "f32[]{0.5}")},
    {OC("Pow", 13, "", "f32[2,3]", "=f32[]{2}")},
    {OC("Pow", 13, "", "f32[257]:pos", "i64[257]:r(-3,3)")},
    {OC("Pow", 13, "", "i32[257]:r(-5,5)", "i32[257]:r(0,5)")},
    {OC("Pow", 13, "", "i64[4,5]:r(-5,5)", "i64[5]:r(0,5)")},
    /* Mod: fmod=0 takes the divisor's sign, fmod=1 the dividend's. */
    {OC("Mod", 13, "", "i32[257]:r(-50,50)", "i32[257]:nz")},
    {OC("Mod", 13, "", "i32[3,4]:r(-50,50)", "=i32[]{7}")},
    {OC("Mod", 13, "fmod=1", "i64[257]:r(-50,50)", "i64[257]:nz")},
    {OC("Mod", 13, "fmod=1", "f32[257]:r(-10,10)", "f32[257]:nz")},
    {OC("Mod", 13, "", "u8[257]:r(0,200)", "u8[257]:nz")},
    {OC("And", 13, "", "bool[257]", "bool[257]")},
    {OC("And", 13, "", "bool[3,4,5]", "bool[5]")},
    {OC("Or", 13, "", "bool[3,1,5]", "bool[4,1]")},
    {OC("Xor", 13, "", "bool[257]", "bool[]")},
    {OC("Equal", 13, "", "i64[257]:r(-3,3)", "i64[257]:r(-3,3)")},
    {OC("Equal", 13, "", "f32[3,4]:int", "f32[4]:int")},
    {OC("Equal", 13, "", "bool[257]", "bool[257]")},
    {OC("Greater", 13, "", "f32[257]:int", "f32[257]:int")},
    {OC("Greater", 13, "", "i32[2,3,4]:r(-3,3)", "i32[4]:r(-3,3)")},
    {OC("GreaterOrEqual", 16, "", "f32[3,4]:int", "f32[]:int")},
    {OC("GreaterOrEqual", 16, "", "i64[257]:r(-3,3)", "i64[257]:r(-3,3)")},
    {OC("Less", 13, "", "f32[2,1,4]:int", "f32[3,1]:int")},
    {OC("Less", 13, "", "i64[0,2]", "i64[2]")},
    {OC("LessOrEqual", 16, "", "f32[257]:int", "f32[257]:int")},
    {OC("PRelu", 16, "", "f32[2,3,4,5]", "=f32[3,1,1]")},
    {OC("PRelu", 16, "", "f32[2,3,4,5]", "f32[5]")},
    {OC("PRelu", 16, "", "f32[257]", "=f32[1]{0.25}")},
    {OC("PRelu", 16, "", "i32[3,4]", "i32[4]")},
    {OC("Where", 16, "", "bool[2,1,4]", "f32[3,1]", "f32[]")},
    {OC("Where", 16, "", "bool[257]", "i64[257]", "i64[257]")},
    {OC("Where", 16, "", "bool[100003]", "f32[100003]", "f32[100003]")},
    {OC("Where", 16, "", "bool[0,3]", "f32[3]", "f32[3]")},
    {OC("Where", 16, "", "bool[3,4]", "u8[4]", "u8[3,1]")},
    {OC("Max", 13, "", "f32[257]")},
    {OC("Max", 13, "", "f32[3,4]", "f32[4]")},
    {OC("Max", 13, "", "f32[2,1,4]", "f32[3,1]", "f32[]")},
    {OC("Max", 13, "", "i32[257]", "i32[257]")},
    {OC("Min", 13, "", "f32[257]", "f32[257]")},
    {OC("Min", 13, "", "f32[2,1,4]", "f32[3,1]", "f32[]")},
    {OC("Min", 13, "", "i64[3,4]", "i64[1]")},
    {OC("Mean", 13, "", "f32[257]")},
    {OC("Mean", 13, "", "f32[3,4]", "f32[4]", "f32[3,1]")},
    {OC("Sum", 13, "", "f32[3,4]", "f32[4]", "f32[3,1]", "f32[]")},
    {OC("Sum", 13, "", "f32[100003]", "f32[100003]")},
    /* Bitwise ops on integers, broadcast; shifts past the width give 0. */
    {OC("BitwiseAnd", 18, "", "i32[3,4]", "i32[4]")},
    {OC("BitwiseOr", 18, "", "u8[2,257]", "u8[257]")},
    {OC("BitwiseXor", 18, "", "i16[5,6]", "i16[5,1]")},
    {OC("BitwiseXor", 18, "", "u64[7]", "u64[]")},
    {OC("BitShift", 11, "direction='LEFT'", "u32[64]", "u32[64]:r(0,40)")},
    {OC("BitShift", 11, "direction='RIGHT'", "u16[4,8]", "u16[8]:r(0,20)")},
    {OC("BitShift", 11, "direction='LEFT'", "u64[9]", "u64[]{3}")},
    /* float16/bfloat16 through the float kernels, rounded once per element
     * (tolerances as for the unary half rows): same shapes (the 8-wide
     * vector path), a bias along the last dim, a per-channel operand, a
     * scalar on either side, true broadcasting. */
    {OC("Add", 14, "", "f16[3,4]", "f16[3,4]")},
    {OC("Add", 14, "", "f16[100003]", "f16[100003]")},
    {OC("Add", 14, "", "bf16[4,256]", "=bf16[256]")},
    {OC("Add", 14, "", "f16[3,257]", "=f16[257]")},
    {OC("Add", 14, "", "f16[]", "f16[2,3]")},
    {OC("Add", 14, "", "bf16[2,1,4]", "bf16[3,1]")},
    {OC("Sub", 14, "", "bf16[257]:special", "bf16[257]")},
    {OC("Mul", 14, "", "f16[2,3,4,8]", "f16[3,1,1]")},
    {OC("Mul", 14, "", "bf16[100003]", "bf16[]")},
    {OC("Div", 14, "", "f16[257]", "f16[257]:nz")},
    {OC("Div", 14, "", "bf16[2,3,4]", "bf16[]:nz")},
    {OC("Pow", 15, "", "f16[257]:pos", "f16[257]"), .rtol = 1e-3},
    {OC("Pow", 15, "", "bf16[2,3]", "=bf16[]{2}")},
    {OC("Mod", 13, "fmod=1", "f16[257]:r(-10,10)", "f16[257]:nz")},
    {OC("Equal", 13, "", "f16[3,4]:int", "f16[4]:int")},
    {OC("Greater", 13, "", "bf16[257]:int", "bf16[257]:int")},
    {OC("LessOrEqual", 16, "", "f16[3,4]:int", "f16[]:int")},
    {OC("Less", 13, "", "f16[257]:special", "f16[]{0}")},
    {OC("PRelu", 16, "", "f16[2,3,4,5]", "=f16[3,1,1]"), .rtol = 1e-3},
    {OC("PRelu", 16, "", "bf16[257]", "=bf16[1]{0.25}"), .rtol = 8e-3},
    {OC("Where", 16, "", "bool[3,4]", "f16[4]", "f16[3,1]")},
    {OC("Max", 13, "", "f16[2,1,4]", "f16[3,1]", "f16[]")},
    {OC("Min", 13, "", "bf16[257]:special", "bf16[257]")},
    {OC("Mean", 13, "", "f16[3,4]", "f16[4]")},
    {OC("Sum", 13, "", "bf16[100003]", "bf16[100003]")},
    /* Three half inputs are summed through float (widened) on both. */
    {OC("Sum", 13, "", "f16[3,4]", "f16[4]", "f16[3,1]")},
};

static const op_case_t reduce_cases[] = {
    /* ReduceSum takes axes as an input from opset 13, the others from 18. */
    {OC("ReduceSum", 13, "", "f32[3,4,5]", "=i64[1]{1}")},
    {OC("ReduceSum", 13, "keepdims=0", "f32[3,4,5]", "=i64[2]{0,-1}")},
    {OC("ReduceSum", 13, "", "f32[3,4,5]")},
    {OC("ReduceSum", 13, "keepdims=0", "f32[3,4,5]")},
    {OC("ReduceSum", 13, "noop_with_empty_axes=1", "f32[3,4,5]", "=i64[0]{}")},
    {OC("ReduceSum", 13, "", "f32[2,0,4]", "=i64[1]{1}")},
    {OC("ReduceSum", 13, "keepdims=0", "f32[2,0,4]", "=i64[1]{0}")},
    {OC("ReduceSum", 13, "", "f32[257,3]", "=i64[1]{0}")},
    {OC("ReduceSum", 13, "", "f32[]")},
    /* 100003 terms summed in another order (a tree on the GPU, blocks of
     * the CPU's loop here): both are within ~n*eps of the exact sum, which
     * for values of mean 2 is up to ~1e-3 relative in the worst case. */
    {OC("ReduceSum", 13, "keepdims=0", "f32[100003]:pos"), .rtol = 1e-3},
    {OC("ReduceSum", 13, "", "i32[3,4,5]", "=i64[1]{2}")},
    {OC("ReduceSum", 13, "", "i64[257]")},
    {OC("ReduceSum", 11, "axes=[1] keepdims=0", "f32[3,4,5]")},
    /* Runtime axes decide the output shape: the dynamic path. */
    {OC("ReduceSum", 13, "", "f32[3,4,5]", "i64[1]{1}"), .dyn = true},
    {OC("ReduceMean", 13, "axes=[1]", "f32[3,4,5]")},
    {OC("ReduceMean", 13, "keepdims=0", "f32[2,3,257]")},
    {OC("ReduceMean", 18, "", "f32[2,3,4,5]", "=i64[2]{2,3}")},
    {OC("ReduceMean", 18, "keepdims=0", "f32[2,3,4,5]", "=i64[2]{-1,0}")},
    {OC("ReduceMax", 13, "axes=[-1]", "f32[3,257]")},
    {OC("ReduceMax", 13, "", "i32[5,7]")},
    {OC("ReduceMax", 18, "keepdims=0", "f32[2,3,4]", "=i64[1]{0}")},
    {OC("ReduceMax", 20, "", "bool[3,4]", "=i64[1]{1}")},
    {OC("ReduceMin", 13, "axes=[0,2]", "f32[3,4,5]")},
    {OC("ReduceMin", 13, "keepdims=0", "i64[3,257]")},
    {OC("ReduceMin", 18, "", "f32[4,6]", "=i64[1]{-1}")},
    {OC("ReduceMin", 20, "keepdims=0", "bool[3,4]", "=i64[1]{0}")},
    {OC("ReduceProd", 13, "axes=[1]", "f32[3,20,5]:r(0.8,1.25)")},
    {OC("ReduceProd", 18, "", "i64[3,4]:r(-3,3)", "=i64[1]{1}")},
    {OC("ReduceL2", 13, "axes=[1]", "f32[3,4,5]")},
    {OC("ReduceL2", 18, "keepdims=0", "f32[3,257]", "=i64[1]{-1}")},
    {OC("ReduceSumSquare", 13, "axes=[0]", "f32[3,4,5]")},
    {OC("ReduceSumSquare", 18, "keepdims=0", "f32[4,257]", "=i64[1]{1}")},
    /* ArgMax/ArgMin on distinct values: no tie to break. */
    {OC("ArgMax", 13, "", "f32[3,4,5]:distinct")},
    {OC("ArgMax", 13, "axis=1 keepdims=0", "f32[3,4,5]:distinct")},
    {OC("ArgMax", 13, "axis=-1", "f32[3,257]:distinct")},
    {OC("ArgMax", 13, "keepdims=0", "f32[100003]:distinct")},
    {OC("ArgMax", 13, "axis=1 select_last_index=1", "i64[3,5,4]:distinct")},
    /* Ties on purpose, in integers: ONNX defines the winner (the first
     * index, or the last with select_last_index), so both must agree. */
    {OC("ArgMax", 13, "axis=1 select_last_index=1", "i32[3,6,5]:r(0,2)")},
    {OC("ArgMax", 13, "axis=1", "i32[3,6,5]:r(0,2)")},
    {OC("ArgMin", 13, "", "f32[3,4,5]:distinct")},
    {OC("ArgMin", 13, "axis=2 keepdims=0", "i32[3,4,5]:distinct")},
    {OC("ArgMin", 13, "axis=-1 select_last_index=1", "f32[2,257]:distinct")},
    {OC("ArgMin", 13, "axis=0 select_last_index=1", "i64[7,3]:r(0,2)")},
    /* Softmax: opset 13 normalises one axis; before 13 the input is
     * flattened to 2-D at axis. */
    /* ReduceL1, the logs, and double inputs. */
    {OC("ReduceL1", 13, "axes=[1]", "f32[3,4,5]")},
    {OC("ReduceL1", 18, "", "i32[3,257]", "=i64[1]{-1}")},
    {OC("ReduceL1", 18, "keepdims=0", "f64[5,3000]", "=i64[1]{1}")},
    {OC("ReduceLogSum", 13, "axes=[0,2]", "f32[3,4,5]:pos")},
    {OC("ReduceLogSum", 18, "", "f64[3,4,5]:pos", "=i64[1]{1}")},
    {OC("ReduceLogSumExp", 13, "axes=[1]", "f32[3,4,5]:r(-100,100)")},
    {OC("ReduceLogSumExp", 18, "", "f32[3,5000]:r(-1000,1000)", "=i64[1]{1}")},
    {OC("ReduceLogSumExp", 18, "keepdims=0", "f64[7,3,300]", "=i64[2]{0,2}")},
    {OC("ReduceLogSumExp", 18, "", "f32[2,9]:special", "=i64[1]{1}")},
    {OC("ReduceMean", 18, "", "f64[3,4,5]", "=i64[1]{1}")},
    {OC("ReduceMax", 18, "", "f64[4,5]", "=i64[1]{0}")},
    {OC("ArgMax", 13, "axis=1", "f64[3,4,5]:distinct")},
    {OC("Hardmax", 13, "", "f32[3,4,5]")},
    {OC("Hardmax", 13, "axis=0", "f64[3,4,5]")},
    {OC("Hardmax", 11, "axis=1", "f32[3,4,5]")},
    {OC("Hardmax", 13, "", "f32[4,9]:int")},
    {OC("CumSum", 14, "", "f64[3,257]", "=i64[]{1}")},
    {OC("CumProd", 26, "", "f32[300]:unit", "=i64[]{0}")},
    {OC("CumProd", 26, "exclusive=1 reverse=1", "f64[3,4,5]:pos", "=i64[1]{1}")},
    {OC("CumProd", 26, "reverse=1", "i64[5,7]", "=i32[]{1}")},
    {OC("CumProd", 26, "", "i32[2,5000]:nz", "=i64[]{1}")},
    {OC("Softmax", 13, "", "f32[3,4,5]")},
    {OC("Softmax", 13, "axis=0", "f32[3,4,5]")},
    {OC("Softmax", 13, "axis=1", "f32[3,4,5]")},
    {OC("Softmax", 13, "", "f32[1,257]")},
    {OC("Softmax", 13, "", "f32[2,100003]")},
    {OC("Softmax", 13, "", "f32[3,7]:r(-1000,1000)")},
    {OC("Softmax", 13, "", "f32[0,3]")},
    {OC("Softmax", 11, "", "f32[2,3,4]")},
    {OC("Softmax", 11, "axis=2", "f32[2,3,4]")},
    {OC("LogSoftmax", 13, "", "f32[3,4,5]")},
    {OC("LogSoftmax", 13, "axis=1", "f32[3,4,5]")},
    {OC("LogSoftmax", 13, "", "f32[2,257]:r(-50,50)")},
    {OC("LogSoftmax", 11, "axis=1", "f32[2,3,4]")},
    {OC("Softmax", 13, "axis=1", "f64[3,4,5]:r(-50,50)")},
    {OC("LogSoftmax", 13, "", "f64[2,257]:r(-50,50)")},
    {OC("CumSum", 14, "", "f32[257]", "=i64[]{0}")},
    {OC("CumSum", 14, "exclusive=1", "f32[257]", "=i64[]{0}")},
    {OC("CumSum", 14, "reverse=1", "f32[3,4,5]", "=i32[]{1}")},
    {OC("CumSum", 14, "exclusive=1 reverse=1", "f32[3,4,5]", "=i64[1]{-1}")},
    {OC("CumSum", 14, "", "i32[3,257]", "=i64[]{1}")},
    {OC("CumSum", 11, "", "i64[4,5]", "=i64[]{0}")},
    /* 100003 prefix sums of positive values: the GPU scans in another
     * order; the last sums (~2e5) carry up to ~n*eps relative error. */
    {OC("CumSum", 14, "", "f32[100003]:pos", "=i64[]{0}"), .rtol = 1e-3},
    /* A runtime axis decides no shape: static plan, axis on the device. */
    {OC("CumSum", 14, "", "f32[3,4,5]", "i64[]{2}")},
};

static const op_case_t shape_cases[] = {
    {OC("Reshape", 13, "", "f32[2,3,4]", "=i64[2]{4,-1}")},
    {OC("Reshape", 13, "", "f32[2,3,4]", "=i64[3]{0,4,3}")},
    {OC("Reshape", 14, "allowzero=1", "f32[0,3]", "=i64[2]{3,0}")},
    {OC("Reshape", 13, "", "i64[257]", "=i64[3]{1,257,1}")},
    {OC("Reshape", 13, "", "f32[1]", "=i64[0]{}")},
    {OC("Reshape", 13, "", "f32[2,3,4]", "i64[2]{-1,6}"), .dyn = true},
    {OC("Flatten", 13, "", "f32[2,3,4]")},
    {OC("Flatten", 13, "axis=0", "f32[2,3,4]")},
    {OC("Flatten", 13, "axis=-1", "f32[2,3,4,5]")},
    {OC("Flatten", 13, "axis=2", "bool[2,3,4,5]")},
    {OC("Squeeze", 13, "", "f32[1,3,1,4]")},
    {OC("Squeeze", 13, "", "f32[1,3,1,4]", "=i64[1]{-2}")},
    {OC("Squeeze", 11, "axes=[0]", "i64[1,257]")},
    {OC("Squeeze", 13, "", "f32[1,3,1,4]", "i64[1]{0}"), .dyn = true},
    {OC("Unsqueeze", 13, "", "f32[3,4]", "=i64[2]{0,-1}")},
    {OC("Unsqueeze", 13, "", "f32[]", "=i64[1]{0}")},
    {OC("Unsqueeze", 11, "axes=[1]", "i32[3,4]")},
    {OC("Unsqueeze", 13, "", "f32[3,4]", "i64[1]{1}"), .dyn = true},
    {OC("Transpose", 13, "", "f32[2,3,4]")},
    {OC("Transpose", 13, "perm=[0,2,3,1]", "f32[2,3,4,5]")},
    {OC("Transpose", 13, "perm=[4,2,0,3,1]", "f32[2,3,1,4,5]")},
    {OC("Transpose", 13, "", "f32[257,3]")},
    {OC("Transpose", 13, "perm=[1,0,2]", "f32[257,33,3]")},
    {OC("Transpose", 13, "", "i64[3,5]")},
    {OC("Transpose", 13, "", "bool[4,257]")},
    {OC("Transpose", 13, "", "u8[3,5,7]")},
    {OC("Transpose", 13, "perm=[1,0]", "f32[0,3]")},
    {OC("Transpose", 13, "", "f32[]")},
    {OC("Concat", 13, "axis=0", "f32[2,3]", "f32[4,3]")},
    {OC("Concat", 13, "axis=-1", "f32[2,3,1]", "f32[2,3,4]", "=f32[2,3,2]")},
    {OC("Concat", 13, "axis=0", "f32[0,3]", "f32[2,3]")},
    {OC("Concat", 13, "axis=1", "i64[2,257]", "i64[2,3]")},
    {OC("Concat", 11, "axis=0", "bool[3]", "bool[1]")},
    {OC("Split", 13, "axis=1", "f32[2,5,3]", "=i64[2]{2,3}"), .n_out = 2},
    {OC("Split", 13, "", "f32[6,4]"), .n_out = 3},
    {OC("Split", 13, "", "f32[4]", "=i64[3]{0,2,2}"), .n_out = 3},
    {OC("Split", 18, "num_outputs=3", "f32[7]"), .n_out = 3},
    {OC("Split", 18, "axis=1 num_outputs=2", "i64[2,5]"), .n_out = 2},
    {OC("Split", 11, "axis=0 split=[1,3]", "f32[4,3]"), .n_out = 2},
    {OC("Split", 13, "", "f32[5,2]", "i64[2]{3,2}"), .n_out = 2, .dyn = true},
    {OC("Slice", 13, "",
        "f32[5,6,7]", "=i64[2]{1,0}", "=i64[2]{4,-1}", "=i64[2]{0,2}", "=i64[2]{2,3}")},
    {OC("Slice", 13, "",
        "f32[10]", "=i64[1]{-1}", "=i64[1]{-9223372036854775807}", "=i64[1]{0}", "=i64[1]{-1}")},
    {OC("Slice", 13, "", "f32[6,8]", "=i64[1]{7}", "=i64[1]{0}", "=i64[1]{1}", "=i64[1]{-3}")},
    {OC("Slice", 13, "", "f32[20,10,5]", "=i64[2]{0,0}", "=i64[2]{3,10}")},
    {OC("Slice", 13, "", "f32[20,10,5]", "=i64[1]{1}", "=i64[1]{1000}", "=i64[1]{1}")},
    {OC("Slice", 13, "", "f32[20,10,5]", "=i64[1]{1000}", "=i64[1]{1001}", "=i64[1]{1}")},
    {OC("Slice", 13, "", "i64[20,10,5]", "=i64[2]{0,1}", "=i64[2]{3,10}", "=i64[2]{-1,-2}")},
    {OC("Slice", 9, "starts=[0,1] ends=[2,3]", "f32[3,4]")},
    {OC("Slice", 9, "starts=[1] ends=[1000] axes=[1]", "f32[3,257]")},
    {OC("Slice", 13, "", "f32[10,4]", "i64[1]{2}", "=i64[1]{7}"), .dyn = true},
    {OC("Gather", 13, "", "f32[5,4,3]", "i64[2,3]:r(-5,4)")},
    /* GatherND: whole rows (k = 1), elements (k = rank), batch dims. */
    {OC("GatherND", 13, "", "f32[5,4,3]", "i64[2,3,1]:r(-5,4)")},
    {OC("GatherND", 13, "", "f32[3,4]", "i64[6,2]:r(-3,2)")},
    {OC("GatherND", 13, "", "f32[2,2]", "i64[2,2]{0,0,1,1}")},
    {OC("GatherND", 13, "batch_dims=1", "f32[2,5,7]", "i64[2,3,1]:r(-5,4)")},
    {OC("GatherND", 13, "batch_dims=2", "i64[2,3,4,5]", "i64[2,3,2]:r(-4,3)")},
    {OC("Gather", 13, "axis=1", "f32[3,4,5]", "i64[3]:r(-4,3)")},
    {OC("Gather", 13, "axis=-1", "f32[3,4,5]", "i32[2,2]:r(-5,4)")},
    {OC("Gather", 13, "", "f32[5,4]", "i64[]:r(-5,4)")},
    {OC("Gather", 13, "", "i64[6,2]", "=i64[3]{0,-1,2}")},
    {OC("Gather", 13, "", "f32[1000,8]", "i64[1003]:r(-1000,999)")},
    {OC("Gather", 13, "", "f32[5,4]", "i64[0]")},
    {OC("GatherElements", 13, "", "f32[3,4]", "i64[3,4]:r(-3,2)")},
    {OC("GatherElements", 13, "axis=1", "f32[3,4]", "i64[3,2]:r(-4,3)")},
    {OC("GatherElements", 13, "axis=-1", "i64[2,3,5]", "i32[2,3,3]:r(-5,4)")},
    {OC("Expand", 13, "", "f32[3,1]", "=i64[3]{2,3,4}")},
    {OC("Expand", 13, "", "f32[2,1,4]", "=i64[2]{3,1}")},
    {OC("Expand", 13, "", "f32[]", "=i64[1]{257}")},
    {OC("Expand", 13, "", "bool[1,3]", "=i64[2]{4,1}")},
    {OC("Expand", 13, "", "f32[3,1]", "i64[2]{3,5}"), .dyn = true},
    {OC("Tile", 13, "", "f32[2,3]", "=i64[2]{2,3}")},
    {OC("Tile", 13, "", "i64[3,1,2]", "=i64[3]{1,4,2}")},
    {OC("Tile", 13, "", "f32[2,3]", "=i64[2]{0,2}")},
    {OC("Tile", 13, "", "f32[2,3]", "i64[2]{3,1}"), .dyn = true},
    {OC("Pad", 13, "", "f32[3,4]", "=i64[4]{1,2,0,1}")},
    {OC("Pad", 13, "", "f32[3,4]", "=i64[4]{1,2,0,1}", "=f32[]{1.5}")},
    {OC("Pad", 13, "mode='reflect'", "f32[2,3,4,5]", "=i64[8]{0,0,1,2,0,0,2,1}")},
    {OC("Pad", 13, "mode='edge'", "f32[2,3,4]", "=i64[6]{0,1,2,1,0,3}")},
    {OC("Pad", 19, "mode='wrap'", "f32[3,4]", "=i64[4]{1,2,3,1}")},
    {OC("Pad", 18, "", "f32[2,3,4]", "=i64[4]{1,1,2,2}", "-", "=i64[2]{0,-1}")},
    {OC("Pad", 13, "", "f32[4,5]", "=i64[4]{-1,1,0,-2}")},
    {OC("Pad", 13, "", "i64[3,4]", "=i64[4]{1,1,1,1}", "=i64[]{7}")},
    {OC("Pad", 13, "", "f32[0,3]", "=i64[4]{1,0,1,0}")},
    {OC("Pad", 10, "pads=[1,0,1,0] value=2.0", "f32[3,4]")},
    {OC("Pad", 10, "mode='reflect' pads=[0,1,0,1]", "f32[3,4]")},
    /* A runtime constant_value decides no shape: static, value on the
     * device. Runtime pads decide the shape: dynamic. */
    {OC("Pad", 13, "", "f32[3,4]", "=i64[4]{1,2,0,1}", "f32[]{1.5}")},
    {OC("Pad", 13, "", "f32[3,4]", "i64[4]{1,2,0,1}"), .dyn = true},
    {OC("Shape", 13, "", "f32[2,3,4]")},
    {OC("Shape", 15, "start=1 end=-1", "f32[2,3,4,5]")},
    {OC("Shape", 15, "start=-2", "i64[2,3,4]")},
    {OC("Size", 13, "", "f32[2,3,4]")},
    {OC("Size", 13, "", "f32[0,3]")},
    {OC("ConstantOfShape", 9, "value=f32[1]{2.5}", "=i64[2]{3,4}")},
    {OC("ConstantOfShape", 9, "value=i64[1]{7}", "i64[3]{2,3,4}"), .dyn = true},
    {OC("ConstantOfShape", 9, "", "i64[1]{257}"), .dyn = true},
    {OC("ConstantOfShape", 20, "value=i32[1]{-3}", "i64[2]{0,5}"), .dyn = true},
    {OC("Range", 11, "", "f32[]{1}", "f32[]{10}", "f32[]{0.7}"), .dyn = true},
    {OC("Range", 11, "", "i64[]{10}", "i64[]{-5}", "i64[]{-3}"), .dyn = true},
    {OC("Range", 11, "", "i32[]{0}", "i32[]{257}", "i32[]{1}"), .dyn = true},
    {OC("Range", 11, "", "=f32[]{0}", "=f32[]{2}", "=f32[]{0.25}")},
    {OC("DepthToSpace", 13, "blocksize=2", "f32[1,8,2,3]")},
    {OC("DepthToSpace", 13, "blocksize=2 mode='CRD'", "f32[2,8,3,2]")},
    {OC("DepthToSpace", 11, "blocksize=3", "f32[1,9,2,2]")},
    {OC("SpaceToDepth", 13, "blocksize=2", "f32[1,2,4,6]")},
    {OC("SpaceToDepth", 13, "blocksize=3", "f32[2,1,3,9]")},
    {OC("Constant", 13, "value=f32[2,3]{1,2,3,4,5,6}", NULL)},
    {OC("Constant", 13, "value=i64[]{-7}", NULL)},
    {OC("Constant", 13, "value_float=2.5", NULL)},
    {OC("Constant", 13, "value_floats=[1.0,-2.5,3.0]", NULL)},
    {OC("Constant", 13, "value_int=3", NULL)},
    {OC("Constant", 13, "value_ints=[1,-2,3]", NULL)},
    {OC("BitCast", 26, "to=i32", "f32[3,4]")},
    {OC("BitCast", 26, "to=u8", "bool[9]")},
};

static const op_case_t nn_cases[] = {
    {OC("Conv", 11, "", "f32[1,3,7,7]", "=f32[4,3,3,3]")},
    {OC("Conv", 11, "", "f32[2,3,7,7]", "=f32[4,3,3,3]", "=f32[4]")},
    {OC("Conv", 11, "pads=[1,1,1,1]", "f32[1,3,7,7]", "=f32[4,3,3,3]", "=f32[4]")},
    {OC("Conv", 11, "strides=[2,2] pads=[1,1,1,1]", "f32[1,3,8,9]", "=f32[2,3,3,3]")},
    {OC("Conv", 11, "strides=[2,2] pads=[1,0,1,0]", "f32[1,1,7,5]", "=f32[1,1,3,3]")},
    {OC("Conv", 11, "dilations=[2,2]", "f32[1,2,9,9]", "=f32[3,2,3,3]")},
    {OC("Conv", 11, "group=2", "f32[1,4,6,6]", "=f32[6,2,3,3]")},
    /* Depthwise: one group per channel. */
    {OC("Conv", 11, "group=4 pads=[1,1,1,1]", "f32[2,4,6,6]", "=f32[4,1,3,3]", "=f32[4]")},
    {OC("Conv", 11, "auto_pad='SAME_UPPER' strides=[2,2]", "f32[1,3,7,7]", "=f32[2,3,3,3]")},
    {OC("Conv", 11, "auto_pad='SAME_LOWER'", "f32[1,3,6,6]", "=f32[2,3,2,2]")},
    {OC("Conv", 11, "auto_pad='VALID' strides=[2,1]", "f32[1,3,7,7]", "=f32[2,3,3,3]")},
    {OC("Conv", 11, "", "f32[1,2,257]", "=f32[3,2,5]", "=f32[3]")},
    {OC("Conv", 11, "pads=[1,1,1,1,1,1]", "f32[1,2,5,6,7]", "=f32[3,2,3,3,3]")},
    {OC("Conv", 11, "", "f32[2,8,5,5]", "=f32[16,8,1,1]")},
    {OC("Conv", 11, "kernel_shape=[3,3]", "f32[1,3,7,7]", "f32[4,3,3,3]", "f32[4]")},
    {OC("Conv", 11, "", "f32[0,3,7,7]", "=f32[4,3,3,3]")},
    /* 144-term sums (16 channels x 3x3) in another order: absolute error
     * up to ~144*eps*|x||w| where outputs cross zero. */
    {OC("Conv", 11, "pads=[1,1,1,1]", "f32[2,16,32,32]", "=f32[32,16,3,3]", "=f32[32]"),
     .atol = 1e-4},
    {OC("ConvTranspose", 11, "", "f32[1,1,3,3]", "=f32[1,2,3,3]")},
    {OC("ConvTranspose", 11, "strides=[3,2] output_padding=[1,1]",
        "f32[1,1,3,3]", "=f32[1,2,3,3]")},
    {OC("ConvTranspose", 11, "strides=[2,2] pads=[1,1,1,1]",
        "f32[1,2,4,4]", "=f32[2,3,3,3]", "=f32[3]")},
    {OC("ConvTranspose", 11, "strides=[3,2] output_shape=[10,8]",
        "f32[1,1,3,3]", "=f32[1,2,3,3]")},
    {OC("ConvTranspose", 11, "group=2", "f32[1,4,3,3]", "=f32[4,2,3,3]")},
    {OC("ConvTranspose", 11, "dilations=[2,2]", "f32[1,1,3,3]", "=f32[1,1,2,2]")},
    {OC("ConvTranspose", 11, "", "f32[1,1,5]", "=f32[1,2,3]")},
    {OC("ConvTranspose", 11, "", "f32[1,1,3,4,5]", "=f32[1,2,3,3,3]")},
    {OC("ConvTranspose", 11, "auto_pad='SAME_UPPER' strides=[2,2]",
        "f32[1,1,3,3]", "=f32[1,2,3,3]")},
    {OC("ConvTranspose", 11, "", "f32[2,3,5,5]", "f32[3,2,3,3]", "f32[2]")},
    {OC("AveragePool", 11, "kernel_shape=[2,2]", "f32[1,3,32,32]")},
    {OC("AveragePool", 11, "kernel_shape=[3,3] pads=[1,1,1,1]", "f32[1,3,7,7]")},
    {OC("AveragePool", 11, "kernel_shape=[3,3] pads=[1,1,1,1] count_include_pad=1",
        "f32[1,3,7,7]")},
    {OC("AveragePool", 11, "kernel_shape=[3,3] strides=[2,2] ceil_mode=1", "f32[1,1,4,4]")},
    {OC("AveragePool", 19, "kernel_shape=[3,3] strides=[2,2] pads=[1,1,1,1] ceil_mode=1 "
                           "count_include_pad=1",
        "f32[1,1,5,5]")},
    {OC("AveragePool", 19, "kernel_shape=[2,2] dilations=[2,2]", "f32[1,1,4,4]")},
    {OC("AveragePool", 11, "kernel_shape=[3,3] strides=[2,2] auto_pad='SAME_UPPER'",
        "f32[1,3,7,7]")},
    {OC("AveragePool", 11, "kernel_shape=[2,2] auto_pad='SAME_LOWER'", "f32[1,3,5,5]")},
    {OC("AveragePool", 11, "kernel_shape=[3]", "f32[1,3,257]")},
    {OC("AveragePool", 11, "kernel_shape=[2,2,2]", "f32[1,3,4,5,6]")},
    {OC("MaxPool", 12, "kernel_shape=[2,2]", "f32[1,3,32,32]")},
    {OC("MaxPool", 12, "kernel_shape=[3,3] pads=[1,1,1,1] strides=[2,2]", "f32[1,3,7,7]")},
    {OC("MaxPool", 12, "kernel_shape=[3,3] strides=[2,2] ceil_mode=1", "f32[1,1,4,4]")},
    {OC("MaxPool", 12, "kernel_shape=[2,2] dilations=[2,2]", "f32[1,1,4,4]")},
    {OC("MaxPool", 12, "kernel_shape=[3,3] auto_pad='SAME_UPPER'", "f32[1,3,5,5]")},
    {OC("MaxPool", 12, "kernel_shape=[2,2] auto_pad='SAME_LOWER' strides=[2,2]", "f32[1,2,5,5]")},
    /* Indices: distinct values, so the argmax inside a window is unique. */
    {OC("MaxPool", 12, "kernel_shape=[2,2] strides=[2,2]", "f32[2,2,5,5]:distinct"), .n_out = 2},
    {OC("MaxPool", 12, "kernel_shape=[3,3] pads=[1,1,1,1] storage_order=1",
        "f32[1,2,4,5]:distinct"), .n_out = 2},
    {OC("MaxPool", 12, "kernel_shape=[2,2]", "u8[1,2,5,5]")},
    {OC("MaxPool", 12, "kernel_shape=[3]", "f32[1,3,257]")},
    {OC("MaxPool", 12, "kernel_shape=[2,2,2]", "f32[1,3,4,5,6]")},
    {OC("GlobalAveragePool", 13, "", "f32[2,3,5,5]")},
    {OC("GlobalAveragePool", 13, "", "f32[1,4,257]")},
    {OC("GlobalAveragePool", 13, "", "f32[1,2,3,4,5]")},
    {OC("GlobalMaxPool", 13, "", "f32[2,3,5,5]")},
    {OC("GlobalMaxPool", 13, "", "f32[1,4,257]")},
    {OC("GlobalMaxPool", 13, "", "f32[1,2,3,4,5]")},
    {OC("BatchNormalization", 15, "",
        "f32[2,3,4,5]", "=f32[3]", "=f32[3]", "=f32[3]", "=f32[3]:pos")},
    {OC("BatchNormalization", 15, "epsilon=0.01",
        "f32[4,3]", "=f32[3]", "=f32[3]", "=f32[3]", "=f32[3]:pos")},
    {OC("BatchNormalization", 9, "",
        "f32[2,3,257]", "=f32[3]", "=f32[3]", "=f32[3]", "=f32[3]:pos")},
    {OC("BatchNormalization", 15, "", "f32[2,3,4,5]", "f32[3]", "f32[3]", "f32[3]", "f32[3]:pos")},
    {OC("InstanceNormalization", 13, "", "f32[2,3,4,5]", "=f32[3]", "=f32[3]")},
    {OC("InstanceNormalization", 13, "epsilon=0.01", "f32[1,2,257]", "=f32[2]", "=f32[2]")},
    {OC("InstanceNormalization", 13, "", "f32[1,2,3,4,5]", "f32[2]", "f32[2]")},
    {OC("LayerNormalization", 17, "", "f32[2,3,4]", "=f32[4]", "=f32[4]")},
    {OC("LayerNormalization", 17, "axis=1", "f32[2,3,4,5]", "=f32[3,4,5]")},
    {OC("LayerNormalization", 17, "axis=0 epsilon=0.01", "f32[4,5]", "=f32[4,5]", "=f32[5]")},
    {OC("LayerNormalization", 17, "axis=-2", "f32[2,3,5]", "=f32[1,5]", "=f32[3,5]")},
    {OC("LayerNormalization", 17, "", "f32[3,257]", "=f32[257]", "=f32[257]"), .n_out = 3},
    {OC("RMSNormalization", 23, "", "f32[2,3,4]", "=f32[4]")},
    {OC("RMSNormalization", 23, "axis=1 epsilon=0.1", "f32[2,3,4,5]", "=f32[4,1]")},
    {OC("RMSNormalization", 23, "axis=0", "f32[4,5]", "=f32[4,5]")},
    {OC("RMSNormalization", 23, "", "f32[3,1031]", "f32[1031]")},
    {OC("LRN", 13, "size=3", "f32[2,5,4,4]")},
    {OC("LRN", 13, "size=5 alpha=0.0002 beta=0.5 bias=2.0", "f32[1,8,3,3]")},
    {OC("LRN", 13, "size=2", "f32[1,4,5]")},
    /* LpPool: p, pads, strides, dilations, ceil_mode, 1-D to 3-D, half and
     * double X; GlobalLpPool. */
    {OC("LpPool", 18, "kernel_shape=[3,3] pads=[1,1,1,1] strides=[2,2]", "f32[1,3,9,9]")},
    {OC("LpPool", 18, "kernel_shape=[2] p=3", "f32[2,3,17]:pos")},
    {OC("LpPool", 18, "kernel_shape=[2,2] dilations=[2,2] ceil_mode=1 strides=[2,2]",
        "f32[1,2,8,8]")},
    {OC("LpPool", 18, "kernel_shape=[2,2,2] auto_pad='SAME_UPPER'", "f32[1,2,4,5,6]")},
    {OC("LpPool", 11, "kernel_shape=[3,3] p=1", "f64[1,2,6,6]")},
    {OC("LpPool", 11, "kernel_shape=[2,2]", "f16[1,2,6,6]"), .rtol = 2e-3},
    {OC("GlobalLpPool", 13, "", "f32[2,3,5,5]")},
    {OC("GlobalLpPool", 13, "p=3", "f32[1,4,7]:pos")},
    /* LpNormalization, MeanVarianceNormalization, GroupNormalization. */
    {OC("LpNormalization", 22, "", "f32[3,4,5]")},
    {OC("LpNormalization", 22, "axis=0 p=1", "f64[3,4,5]")},
    {OC("LpNormalization", 22, "axis=1", "f32[2,3000,3]")},
    {OC("MeanVarianceNormalization", 13, "", "f32[2,3,4,5]")},
    {OC("MeanVarianceNormalization", 13, "axes=[1,3]", "f64[2,3,4,5]")},
    {OC("MeanVarianceNormalization", 13, "axes=[-1]", "f32[3,5000]")},
    {OC("GroupNormalization", 18, "num_groups=2", "f32[2,4,3,3]", "=f32[2]", "=f32[2]")},
    {OC("GroupNormalization", 21, "num_groups=3 epsilon=0.01", "f32[2,6,5]", "=f32[6]",
        "=f32[6]")},
    {OC("GroupNormalization", 21, "num_groups=1", "f64[1,4,3000]", "=f64[4]", "=f64[4]")},
    /* The losses: every reduction, weights, ignore_index, N-d, log_prob. */
    {OC("NegativeLogLikelihoodLoss", 13, "reduction='none'", "f32[3,5]", "i64[3]:r(0,4)")},
    {OC("NegativeLogLikelihoodLoss", 13, "", "f32[3,5,2,4]", "i64[3,2,4]:r(0,4)", "=f32[5]:pos")},
    {OC("NegativeLogLikelihoodLoss", 13, "reduction='sum' ignore_index=2", "f32[4,5,7]",
        "i32[4,7]:r(0,4)")},
    {OC("NegativeLogLikelihoodLoss", 13, "ignore_index=-1", "f64[2,5,300]",
        "i64[2,300]:r(-1,4)", "=f64[5]:pos")},
    {OC("SoftmaxCrossEntropyLoss", 13, "reduction='none'", "f32[3,5]", "i64[3]:r(0,4)"),
     .n_out = 2},
    {OC("SoftmaxCrossEntropyLoss", 13, "", "f32[3,5,2,4]", "i64[3,2,4]:r(0,4)", "=f32[5]:pos"),
     .n_out = 2},
    {OC("SoftmaxCrossEntropyLoss", 13, "reduction='sum' ignore_index=2", "f32[4,5,7]",
        "i64[4,7]:r(0,4)")},
    {OC("SoftmaxCrossEntropyLoss", 13, "ignore_index=0", "f64[2,7,300]:r(-1000,1000)",
        "i64[2,300]:r(0,6)", "=f64[7]:pos"), .n_out = 2},
};

/* The recurrent ops: every step feeds the next, so the GEMMs' different
 * summation orders (cuBLAS against the CPU's) and the devices' expf ulps
 * compound over the sequence; their rows allow rtol 1e-3, atol 1e-4.
 * Weights are :unit so that the gates do not all saturate. */
#define RNN_TOL .rtol = 1e-3, .atol = 1e-4
static const op_case_t rnn_cases[] = {
    {OC("RNN", 22, "", "f32[4,2,3]", "=f32[1,5,3]:unit", "=f32[1,5,5]:unit"), .n_out = 2, RNN_TOL},
    {OC("RNN", 22, "direction='bidirectional' activations=['Relu','Tanh'] clip=2.5",
        "f32[5,3,4]", "=f32[2,6,4]:unit", "=f32[2,6,6]:unit", "=f32[2,12]:unit", "-",
        "f32[2,3,6]"), .n_out = 2, RNN_TOL},
    {OC("RNN", 14, "layout=1 direction='reverse'", "f32[3,4,2]", "=f32[1,7,2]:unit",
        "=f32[1,7,7]:unit", "=f32[1,14]:unit", "i32[3]{4,1,0}"), .n_out = 2, RNN_TOL},
    {OC("RNN", 22, "direction='bidirectional' activations=['ScaledTanh','ThresholdedRelu'] "
        "activation_alpha=[1.5,0.2] activation_beta=[0.7]", "f32[3,2,3]", "=f32[2,4,3]:unit",
        "=f32[2,4,4]:unit"), .n_out = 2, RNN_TOL},
    {OC("RNN", 7, "direction='bidirectional' activations=['Softplus','Affine'] "
        "activation_alpha=[0.5] activation_beta=[0.1]", "f32[3,2,3]", "=f32[2,4,3]:unit",
        "=f32[2,4,4]:unit"), .n_out = 2, RNN_TOL},
    {OC("RNN", 22, "activations=['Sigmoid']", "f32[2,2,3]", "=f32[1,4,3]:unit",
        "=f32[1,4,4]:unit")},
    {OC("GRU", 22, "", "f32[5,3,4]", "=f32[1,15,4]:unit", "=f32[1,15,5]:unit",
        "=f32[1,30]:unit"), .n_out = 2, RNN_TOL},
    {OC("GRU", 22, "linear_before_reset=1 direction='bidirectional'", "f32[5,3,4]",
        "=f32[2,15,4]:unit", "=f32[2,15,5]:unit", "=f32[2,30]:unit", "i32[3]{5,2,0}",
        "f32[2,3,5]"), .n_out = 2, RNN_TOL},
    {OC("GRU", 14, "layout=1 direction='bidirectional' clip=1.5", "f32[3,4,4]",
        "=f32[2,9,4]:unit", "=f32[2,9,3]:unit", "-", "i32[3]{1,4,3}", "f32[3,2,3]"),
        .n_out = 2, RNN_TOL},
    {OC("GRU", 7, "direction='reverse' activations=['HardSigmoid','Softsign']",
        "f32[4,2,3]", "=f32[1,12,3]:unit", "=f32[1,12,4]:unit"), .n_out = 2, RNN_TOL},
    {OC("LSTM", 22, "", "f32[4,2,3]", "=f32[1,20,3]:unit", "=f32[1,20,5]:unit"), .n_out = 3,
     RNN_TOL},
    {OC("LSTM", 22, "direction='bidirectional'", "f32[5,3,4]", "=f32[2,24,4]:unit",
        "=f32[2,24,6]:unit", "=f32[2,48]:unit", "i32[3]{5,3,1}", "f32[2,3,6]", "f32[2,3,6]",
        "=f32[2,18]:unit"), .n_out = 3, RNN_TOL},
    {OC("LSTM", 14, "layout=1 input_forget=1 clip=3.0 activations=['HardSigmoid','Softsign',"
        "'Elu'] activation_alpha=[0.25,1.5] activation_beta=[0.4]", "f32[2,4,3]",
        "=f32[1,16,3]:unit", "=f32[1,16,4]:unit", "=f32[1,32]:unit", "-", "f32[2,1,4]",
        "f32[2,1,4]", "=f32[1,12]:unit"), .n_out = 3, RNN_TOL},
    {OC("LSTM", 22, "direction='reverse' activations=['Sigmoid','LeakyRelu','Tanh'] "
        "activation_alpha=[0.05]", "f32[6,1,2]", "=f32[1,8,2]:unit", "=f32[1,8,2]:unit"),
        .n_out = 3, RNN_TOL},
};
#undef RNN_TOL

static const op_case_t linalg_cases[] = {
    /* Det: both devices run eng_det_lu in double. */
    {OC("Det", 11, "", "f32[4,3,5,5]"), .rtol = 1e-4, .atol = 1e-4},
    {OC("Det", 11, "", "f64[7,7]")},
    {OC("Det", 11, "", "f32[2,1,1]")},
    {OC("MatMul", 13, "", "f32[3,4]", "f32[4,5]")},
    {OC("MatMul", 13, "", "f32[4]", "f32[4]")},
    {OC("MatMul", 13, "", "f32[4]", "f32[2,4,3]")},
    {OC("MatMul", 13, "", "f32[2,3,4,5]", "f32[5]")},
    {OC("MatMul", 13, "", "f32[2,1,3,4]", "f32[5,4,6]")},
    /* 257-term dot products of values in [-2,2): an output near zero
     * carries up to ~K*eps absolute error from the order of the sum. */
    {OC("MatMul", 13, "", "f32[1,257]", "=f32[257,3]"), .atol = 1e-4},
    {OC("MatMul", 13, "", "f32[3,257]", "=f32[257,130]"), .atol = 1e-4},
    {OC("MatMul", 13, "", "f32[64,64]", "f32[64,64]")},
    /* 1024-term dot products: outputs of size ~40 carry ~1e-5 absolute
     * error from the order of the sum alone. */
    {OC("MatMul", 13, "", "f32[8,1024]", "=f32[1024,16]"), .atol = 1e-3},
    {OC("MatMul", 13, "", "f32[2,0]", "f32[0,3]")},
    /* cuBLASLt (engine/cuda/gemm.cu) at odd sizes, n = 197, k = 77: one
     * product, a strided batch, a batch broadcast over B, and a Gemm whose
     * [N] C is its bias epilogue. */
    {OC("MatMul", 13, "", "f32[13,77]", "=f32[77,197]"), .atol = 1e-4},
    {OC("MatMul", 13, "", "f32[3,13,77]", "f32[3,77,197]"), .atol = 1e-4},
    {OC("MatMul", 13, "", "f32[2,3,13,77]", "f32[3,77,197]"), .atol = 1e-4},
    {OC("Gemm", 13, "transB=1 alpha=0.5", "f32[13,77]", "=f32[197,77]", "=f32[197]"),
     .atol = 1e-4},
    {OC("MatMul", 13, "", "f32[0,4]", "f32[4,3]")},
    {OC("Gemm", 13, "", "f32[3,5]", "f32[5,4]", "f32[3,4]")},
    {OC("Gemm", 13, "transA=1", "f32[5,3]", "f32[5,4]", "f32[4]")},
    {OC("Gemm", 13, "transB=1", "f32[3,5]", "=f32[4,5]", "=f32[4]")},
    {OC("Gemm", 13, "transA=1 transB=1 alpha=0.25 beta=0.35", "f32[4,3]", "f32[5,4]", "f32[1,5]")},
    {OC("Gemm", 13, "alpha=0.5", "f32[3,5]", "f32[5,4]")},
    {OC("Gemm", 13, "beta=2.0", "f32[3,5]", "f32[5,4]", "f32[]")},
    {OC("Gemm", 13, "", "f32[3,5]", "f32[5,4]", "f32[3,1]")},
    {OC("Gemm", 13, "", "f32[3,5]", "f32[5,4]", "f32[1]")},
    {OC("Gemm", 9, "", "f32[3,5]", "f32[5,4]", "f32[3,4]")},
    /* K = 257, as for MatMul above. */
    {OC("Gemm", 13, "transB=1", "f32[64,257]", "=f32[100,257]", "=f32[100]"), .atol = 1e-4},
    {OC("Einsum", 12, "equation='ij,jk->ik'", "f32[3,4]", "f32[4,5]")},
    {OC("Einsum", 12, "equation='bij,bjk->bik'", "f32[2,3,4]", "f32[2,4,5]")},
    {OC("Einsum", 12, "equation='ii->i'", "f32[4,4]")},
    {OC("Einsum", 12, "equation='...ii->...i'", "f32[3,5,5]")},
    {OC("Einsum", 12, "equation='i,i'", "f32[5]", "f32[5]")},
    {OC("Einsum", 12, "equation='ij->ji'", "f32[3,4]")},
    {OC("Einsum", 12, "equation='ij->'", "f32[3,4]")},
    {OC("Einsum", 12, "equation='ij->j'", "f32[3,257]")},
    {OC("Einsum", 12, "equation='i,j->ij'", "f32[3]", "f32[4]")},
    {OC("Einsum", 12, "equation='ij,jk,kl->il'", "f32[2,3]", "f32[3,4]", "f32[4,5]")},
    {OC("Einsum", 12, "equation='...ij,...jk->...ik'", "f32[2,1,3,4]", "f32[5,4,2]")},
    {OC("Einsum", 12, "equation='ij,jk'", "f32[3,4]", "f32[4,5]")},
    /* float64: cuBLAS's dgemm and the direct kernels in double against the
     * CPU's double loops. */
    {OC("MatMul", 13, "", "f64[3,4]", "f64[4,5]")},
    {OC("MatMul", 13, "", "f64[4]", "f64[2,4,3]")},
    {OC("MatMul", 13, "", "f64[2,1,3,4]", "f64[5,4,6]")},
    {OC("MatMul", 13, "", "f64[2,3,257]", "=f64[257,130]")},
    {OC("MatMul", 13, "", "f64[2,0]", "f64[0,3]")},
    {OC("Einsum", 12, "equation='bij,bjk->bik'", "f64[2,3,4]", "f64[2,4,5]")},
    {OC("Einsum", 12, "equation='kbj,bji->bik'", "f64[5,2,4]", "f64[2,4,3]")},
    {OC("Einsum", 12, "equation='ij,jk->ki'", "f64[3,4]", "f64[4,5]")},
    {OC("Einsum", 12, "equation='...ij,...jk->...ik'", "f64[2,1,3,4]", "f64[5,4,2]")},
    {OC("Einsum", 12, "equation='...ii->...i'", "f64[3,5,5]")},
    {OC("Einsum", 12, "equation='ij->'", "f64[3,4]")},
    {OC("Einsum", 12, "equation='i,i'", "f64[300]", "f64[300]")},
};

static const op_case_t misc_cases[] = {
    {OC("TopK", 11, "", "f32[3,257]:distinct", "=i64[1]{5}"), .n_out = 2},
    {OC("TopK", 11, "largest=0", "f32[3,257]:distinct", "=i64[1]{5}"), .n_out = 2},
    {OC("TopK", 11, "axis=0", "f32[7,4]:distinct", "=i64[1]{3}"), .n_out = 2},
    {OC("TopK", 11, "axis=1 largest=0", "f32[2,9,3]:distinct", "=i64[1]{4}"), .n_out = 2},
    {OC("TopK", 11, "", "i64[3,10]:distinct", "=i64[1]{4}"), .n_out = 2},
    {OC("TopK", 11, "", "f32[3,257]:distinct", "=i64[1]{0}"), .n_out = 2},
    {OC("TopK", 11, "", "f32[3,17]:distinct", "=i64[1]{17}"), .n_out = 2},
    {OC("TopK", 11, "", "f32[100003]:distinct", "=i64[1]{100}"), .n_out = 2},
    /* sorted=0 leaves the order to the implementation: rows compare as
     * sets. */
    {OC("TopK", 11, "sorted=0", "f32[3,257]:distinct", "=i64[1]{7}"), .n_out = 2,
     .unordered = true},
    {OC("TopK", 9, "k=3", "f32[3,10]:distinct"), .n_out = 2},
    /* Every numeric dtype by its own keys: uint64 beyond 2^53 and near 2^64
     * (-1 is 2^64 - 1), small integers with ties (broken by index), floats
     * with NaN and signed zeros; the 16-byte items of 8-byte dtypes through
     * the rounds (u64) and the full sort (f64, 2k above a chunk). */
    {OC("TopK", 11, "",
        "u64[2,6]{-1,-2,9007199254740993,9007199254740992,0,5,"
        "9007199254740992,-9223372036854775807,9007199254740993,-3,1,-1}",
        "=i64[1]{4}"), .n_out = 2},
    {OC("TopK", 11, "largest=0",
        "u64[2,6]{-1,-2,9007199254740993,9007199254740992,0,5,"
        "9007199254740992,-9223372036854775807,9007199254740993,-3,1,-1}",
        "=i64[1]{4}"), .n_out = 2},
    {OC("TopK", 11, "", "i64[8]{9007199254740993,9007199254740992,-9007199254740993,"
        "-9007199254740992,1,-1,9223372036854775807,-9223372036854775807}", "=i64[1]{8}"),
     .n_out = 2},
    {OC("TopK", 11, "", "u64[2,3000]:distinct", "=i64[1]{5}"), .n_out = 2},
    {OC("TopK", 11, "", "i8[3,40]", "=i64[1]{7}"), .n_out = 2},
    {OC("TopK", 11, "largest=0", "i16[2,300]", "=i64[1]{9}"), .n_out = 2},
    {OC("TopK", 11, "axis=0", "u8[50,4]", "=i64[1]{50}"), .n_out = 2},
    {OC("TopK", 11, "", "u32[2,5000]:distinct", "=i64[1]{10}"), .n_out = 2},
    {OC("TopK", 11, "largest=0", "u16[3,70]", "=i64[1]{12}"), .n_out = 2},
    {OC("TopK", 11, "", "f64[2,40]:special", "=i64[1]{20}"), .n_out = 2},
    {OC("TopK", 11, "largest=0", "f64[2,40]:special", "=i64[1]{20}"), .n_out = 2},
    {OC("TopK", 11, "largest=0", "f64[2,3000]:distinct", "=i64[1]{1500}"), .n_out = 2},
    {OC("TopK", 11, "", "f16[3,64]:special", "=i64[1]{10}"), .n_out = 2},
    {OC("TopK", 11, "axis=0 largest=0", "bf16[16,3]:special", "=i64[1]{5}"), .n_out = 2},
    {OC("TopK", 11, "", "f32[3,257]:distinct", "i64[1]{5}"), .n_out = 2, .dyn = true},
    {OC("CausalConvWithState", 27, "", "f32[2,3,7]", "f32[3,1,4]"), .n_out = 2},
    {OC("CausalConvWithState", 27, "activation='silu'", "f32[2,3,5]", "=f32[3,1,3]", "f32[3]",
        "f32[2,3,2]"), .n_out = 2},
    {OC("CausalConvWithState", 27, "", "f32[1,2,1]", "f32[2,1,1]"), .n_out = 2},
    {OC("LinearAttention", 27, "q_num_heads=4 kv_num_heads=2 update_rule='linear'",
        "f32[2,5,24]", "f32[2,5,12]", "f32[2,5,10]"), .n_out = 2, .rtol = 1e-3},
    {OC("LinearAttention", 27, "q_num_heads=2 kv_num_heads=2", "f32[1,6,8]:unit",
        "f32[1,6,8]:unit", "f32[1,6,6]", "f32[1,2,4,3]", "f32[1,6,8]:unit", "f32[1,6,2]:unit"),
     .n_out = 2, .rtol = 1e-3, .atol = 1e-4},
    {OC("LinearAttention", 27, "q_num_heads=2 kv_num_heads=1 update_rule='gated' scale=0.5",
        "f32[1,3,8]", "f32[1,3,4]", "f32[1,3,2]", "-", "f32[1,3,1]:unit"), .n_out = 2,
     .rtol = 1e-3},
    {OC("Trilu", 14, "", "f32[4,5]")},
    {OC("Trilu", 14, "upper=0", "f32[3,4,5]")},
    {OC("Trilu", 14, "", "f32[4,5]", "=i64[]{2}")},
    {OC("Trilu", 14, "upper=0", "f32[2,3,4,5]", "=i64[]{-1}")},
    {OC("Trilu", 14, "", "i64[3,3]", "=i64[]{10}")},
    {OC("Trilu", 14, "upper=0", "bool[5,4]")},
    {OC("Trilu", 14, "", "f32[0,5]")},
    /* A runtime k decides no shape: static, k read on the device. */
    {OC("Trilu", 14, "", "f32[5,5]", "i64[]{1}")},
    /* Resize: every mode, coordinate transform and nearest rounding the
     * node tests use; scales and sizes as initializers. */
    {OC("Resize", 13, "", "f32[1,2,4,4]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "", "f32[1,2,5,5]", "-", "=f32[4]{1,1,0.6,0.6}")},
    {OC("Resize", 13, "mode='linear'", "f32[1,2,4,4]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "mode='linear'", "f32[2,3,32,32]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "mode='linear' coordinate_transformation_mode='align_corners'",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,0.6,0.6}")},
    {OC("Resize", 13, "mode='linear' coordinate_transformation_mode='asymmetric'",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,2,3}")},
    {OC("Resize", 13, "mode='linear' coordinate_transformation_mode='pytorch_half_pixel'",
        "f32[1,1,4,4]", "-", "-", "=i64[4]{1,1,3,1}")},
    {OC("Resize", 13, "mode='cubic'", "f32[1,1,4,4]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "mode='cubic' cubic_coeff_a=-0.5 exclude_outside=1",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,0.8,0.8}")},
    {OC("Resize", 13, "mode='cubic' coordinate_transformation_mode='align_corners'",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "mode='cubic' coordinate_transformation_mode='asymmetric'",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 13, "coordinate_transformation_mode='asymmetric' "
                      "nearest_mode='round_prefer_ceil'",
        "f32[1,1,2,2]", "-", "-", "=i64[4]{1,1,7,8}")},
    {OC("Resize", 13, "coordinate_transformation_mode='align_corners' nearest_mode='floor'",
        "f32[1,1,4,4]", "-", "-", "=i64[4]{1,1,8,8}")},
    {OC("Resize", 13, "coordinate_transformation_mode='half_pixel' nearest_mode='ceil'",
        "f32[1,1,4,4]", "-", "-", "=i64[4]{1,1,8,8}")},
    {OC("Resize", 13, "coordinate_transformation_mode='tf_half_pixel_for_nn'",
        "f32[1,1,4,4]", "-", "-", "=i64[4]{1,1,3,6}")},
    {OC("Resize", 13, "mode='linear' coordinate_transformation_mode='tf_crop_and_resize' "
                      "extrapolation_value=10.0",
        "f32[1,1,4,4]", "=f32[8]{0,0,0.4,0.6,1,1,1.2,1.7}", "-", "=i64[4]{1,1,3,3}")},
    {OC("Resize", 18, "axes=[2,3]", "f32[1,1,2,2]", "-", "=f32[2]{2,3}")},
    {OC("Resize", 18, "axes=[3,2]", "f32[1,1,2,2]", "-", "-", "=i64[2]{3,2}")},
    {OC("Resize", 18, "keep_aspect_ratio_policy='not_larger' axes=[2,3]",
        "f32[1,1,2,2]", "-", "-", "=i64[2]{7,8}")},
    {OC("Resize", 18, "keep_aspect_ratio_policy='not_smaller' axes=[2,3]",
        "f32[1,1,2,2]", "-", "-", "=i64[2]{7,8}")},
    {OC("Resize", 18, "mode='linear' antialias=1", "f32[1,1,8,8]", "-", "=f32[4]{1,1,0.6,0.6}")},
    {OC("Resize", 18, "mode='cubic' antialias=1", "f32[1,1,8,8]", "-", "-", "=i64[4]{1,1,3,5}")},
    {OC("Resize", 19, "mode='linear' coordinate_transformation_mode='half_pixel_symmetric'",
        "f32[1,1,4,4]", "-", "=f32[4]{1,1,2,3}")},
    {OC("Resize", 10, "mode='linear'", "f32[1,1,2,4]", "=f32[4]{1,1,2,2}")},
    {OC("Resize", 10, "", "f32[1,1,2,4]", "=f32[4]{1,1,2,3}")},
    {OC("Resize", 13, "mode='linear'", "f32[1,1,4,4]", "-", "-", "i64[4]{1,1,8,6}"), .dyn = true},
    /* Upsample: Resize-10 under every version's signature. */
    {OC("Upsample", 9, "", "f32[1,2,3,4]", "=f32[4]{1,1,2,2}")},
    {OC("Upsample", 9, "mode='linear'", "f32[1,2,3,4]", "=f32[4]{1,1,2,3}")},
    {OC("Upsample", 7, "scales=[1.0,1.0,3.0,2.0]", "f32[2,1,3,3]")},
    {OC("Upsample", 9, "", "f32[1,1,2,2]", "f32[4]{1,1,2,2}"), .dyn = true},
};

/* Scatters: without a reduction, distinct indices (duplicates race on a
 * GPU; ONNX leaves them undefined); with one, duplicates fold. Compress,
 * NonZero and Unique with runtime values decide their shapes: dynamic,
 * and past 64 elements (the small-input mirror) the whole input is
 * copied back for inference. */
static const op_case_t index_cases[] = {
    {OC("ScatterND", 13, "", "f32[4,5]", "=i64[2,1]{3,-4}", "f32[2,5]")},
    {OC("ScatterND", 13, "", "f32[4,5]", "=i64[3,2]{0,0,1,4,-1,-1}", "f32[3]")},
    {OC("ScatterND", 13, "", "i64[4,5]", "=i64[2,1]{2,1}", "i64[2,5]")},
    {OC("ScatterND", 16, "reduction='add'", "f32[4,5]", "i64[9,1]:r(-4,3)", "f32[9,5]")},
    {OC("ScatterND", 16, "reduction='mul'", "f32[4,5]", "i64[9,2]:r(0,3)", "f32[9]")},
    {OC("ScatterND", 18, "reduction='max'", "f32[3,4,5]", "i64[7,2]:r(0,2)", "f32[7,5]")},
    {OC("ScatterND", 18, "reduction='min'", "i32[4,5]", "i64[9,1]:r(-4,3)", "i32[9,5]")},
    {OC("ScatterND", 16, "reduction='add'", "i8[4,5]", "i64[9,2]:r(0,3)", "i8[9]")},
    {OC("ScatterND", 16, "reduction='mul'", "u16[4,5]", "i64[9,2]:r(0,3)", "u16[9]")},
    {OC("ScatterND", 18, "reduction='max'", "f64[4,5]", "i64[9,1]:r(0,3)", "f64[9,5]")},
    {OC("ScatterElements", 13, "axis=1", "f32[3,5]", "=i64[3,2]{0,4,-1,1,2,3}", "f32[3,2]")},
    {OC("ScatterElements", 13, "", "f16[4,3]", "=i32[1,3]{3,0,2}", "f16[1,3]")},
    {OC("ScatterElements", 16, "axis=1 reduction='add'", "f32[3,5]", "i64[3,6]:r(-5,4)",
        "f32[3,6]")},
    {OC("ScatterElements", 16, "axis=0 reduction='mul'", "i64[4,3]", "i32[6,3]:r(0,3)",
        "i64[6,3]")},
    {OC("ScatterElements", 18, "axis=-1 reduction='max'", "u8[2,3,4]", "i64[2,3,5]:r(0,3)",
        "u8[2,3,5]")},
    {OC("ScatterElements", 18, "axis=1 reduction='min'", "f32[2,3,4]", "i64[2,5,4]:r(-3,2)",
        "f32[2,5,4]")},
    {OC("Scatter", 9, "axis=1", "f32[2,4]", "=i64[2,2]{3,0,1,2}", "f32[2,2]")},
    {OC("TensorScatter", 24, "", "f32[2,8,4]", "f32[2,3,4]", "=i64[2]{1,5}")},
    {OC("TensorScatter", 24, "mode='circular'", "f32[2,8,4]", "f32[2,3,4]", "=i64[2]{6,7}")},
    {OC("TensorScatter", 24, "axis=2", "f16[2,3,6,2]", "f16[2,3,1,2]")},
    {OC("TensorScatter", 24, "", "f32[2,8,4]", "f32[2,3,4]", "i64[2]{0,4}")},
    {OC("OneHot", 11, "", "i64[3,4]:r(-6,5)", "=i64[]{5}", "=f32[2]{-1,3}")},
    {OC("OneHot", 11, "axis=0", "i32[3,4]:r(-4,4)", "=f32[]{4}", "=i64[2]{0,1}")},
    {OC("OneHot", 11, "axis=1", "f32[2,3]:r(-3,3)", "=i64[1]{3}", "=u8[2]{0,1}")},
    {OC("OneHot", 11, "", "i64[5]:r(0,6)", "i64[1]{7}", "f32[2]{0,1}"), .dyn = true},
    {OC("EyeLike", 9, "", "f32[4,5]")},
    {OC("EyeLike", 9, "k=2 dtype=i64", "f32[3,6]")},
    {OC("EyeLike", 9, "k=-1 dtype=bool", "i32[5,3]")},
    {OC("ReverseSequence", 10, "", "f32[4,3,5]", "=i64[3]{4,1,2}")},
    {OC("ReverseSequence", 10, "batch_axis=0 time_axis=1", "i64[3,4,2]", "=i64[3]{0,4,3}")},
    {OC("ReverseSequence", 10, "batch_axis=0 time_axis=1", "f32[3,4]", "i64[3]:r(0,4)")},
    {OC("CenterCropPad", 18, "", "f32[5,6]", "=i64[2]{3,9}")},
    {OC("CenterCropPad", 18, "axes=[-1]", "u8[2,3,7]", "=i64[1]{2}")},
    {OC("CenterCropPad", 18, "", "f32[3,4]", "i64[2]{4,2}"), .dyn = true},
    {OC("Compress", 11, "axis=1", "f32[4,5]", "=bool[5]{1,0,1,1,0}")},
    {OC("Compress", 11, "", "i64[3,4]", "=bool[6]{0,1,1,0,0,1}")},
    {OC("Compress", 11, "axis=0", "f32[4,5]", "bool[3]{1,0,1}"), .dyn = true},
    {OC("Compress", 11, "axis=-1", "f32[3,100]", "bool[100]"), .dyn = true},
    {OC("NonZero", 13, "", "f32[4,5]:int"), .dyn = true},
    {OC("NonZero", 13, "", "i32[20,30]:r(-1,1)"), .dyn = true},
    {OC("NonZero", 13, "", "bool[3,2,4]"), .dyn = true},
    {OC("Unique", 11, "", "f32[50]:int"), .n_out = 4, .dyn = true},
    {OC("Unique", 11, "sorted=0", "i64[200]:r(0,30)"), .n_out = 4, .dyn = true},
    {OC("Unique", 11, "axis=0", "i64[6,3]:r(0,1)"), .n_out = 4, .dyn = true},
    {OC("Unique", 11, "axis=-1 sorted=0", "f32[2,9]:int"), .n_out = 4, .dyn = true},
};

static const op_case_t attention_cases[] = {
    /* Attention: 4-D and 3-D, MHA, GQA and MQA, V's head size apart. */
    {OC("Attention", 23, "", "f32[2,3,4,8]", "f32[2,3,6,8]", "f32[2,3,6,5]")},
    {OC("Attention", 23, "is_causal=1", "f32[1,2,5,16]", "f32[1,2,5,16]", "f32[1,2,5,16]")},
    {OC("Attention", 23, "q_num_heads=6 kv_num_heads=2", "f32[2,4,48]", "f32[2,7,16]",
        "f32[2,7,12]")},
    {OC("Attention", 23, "is_causal=1 scale=0.3", "f32[1,4,3,8]", "f32[1,1,9,8]",
        "f32[1,1,9,8]")},
    /* More keys than one tile (64), a head larger than a warp's stride. */
    {OC("Attention", 23, "", "f32[1,2,3,160]", "f32[1,2,200,160]", "f32[1,2,200,40]")},
    /* Masks: bool broadcast over batch and heads, float shorter than the
     * keys (the rest masked), all false for some rows (zeros). */
    {OC("Attention", 23, "", "f32[2,2,3,8]", "f32[2,2,5,8]", "f32[2,2,5,8]",
        "bool[3,5]{1,0,1,1,0,1,1,1,1,1,0,0,0,0,0}")},
    {OC("Attention", 23, "softcap=2.0", "f32[2,3,4,8]", "f32[2,3,6,8]", "f32[2,3,6,8]",
        "f32[3,4,5]")},
    {OC("Attention", 23, "is_causal=1", "f32[2,2,3,8]", "f32[2,2,3,8]", "f32[2,2,3,8]",
        "bool[2,1,3,3]:r(0,1)")},
    /* Past and present, each qk_matmul_output mode. */
    {OC("Attention", 23, "qk_matmul_output_mode=0 softcap=1.5", "f32[2,2,3,8]", "f32[2,2,3,8]",
        "f32[2,2,3,6]", "f32[2,1,3,7]", "f32[2,2,4,8]", "f32[2,2,4,6]"), .n_out = 4},
    {OC("Attention", 23, "qk_matmul_output_mode=1 softcap=1.5 is_causal=1", "f32[2,4,3,8]",
        "f32[2,2,3,8]", "f32[2,2,3,6]", "-", "f32[2,2,4,8]", "f32[2,2,4,6]"), .n_out = 4},
    {OC("Attention", 23, "qk_matmul_output_mode=2 q_num_heads=4 kv_num_heads=2", "f32[2,3,32]",
        "f32[2,3,16]", "f32[2,3,12]", "f32[3,7]", "f32[2,2,4,8]", "f32[2,2,4,6]"), .n_out = 4},
    {OC("Attention", 24, "qk_matmul_output_mode=3 is_causal=1", "f32[1,2,4,8]", "f32[1,2,70,8]",
        "f32[1,2,70,8]", "bool[4,140]:r(0,1)", "f32[1,2,70,8]", "f32[1,2,70,8]"), .n_out = 4},
    /* nonpad_kv_seqlen (opset 24): padding, the per-batch causal offset
     * (negative: leading rows see nothing). */
    {OC("Attention", 24, "", "f32[2,2,3,8]", "f32[2,2,6,8]", "f32[2,2,6,8]", "-", "-", "-",
        "i64[2]{4,6}")},
    {OC("Attention", 24, "is_causal=1", "f32[3,2,3,8]", "f32[3,2,6,8]", "f32[3,2,6,8]", "-",
        "-", "-", "i64[3]{1,3,6}")},
    /* Sliding windows (opset 25). */
    {OC("Attention", 25, "left_window_size=2 right_window_size=1", "f32[1,2,6,8]",
        "f32[1,2,6,8]", "f32[1,2,6,8]")},
    {OC("Attention", 25, "left_window_size=1 is_causal=1", "f32[1,2,3,8]", "f32[1,2,3,8]",
        "f32[1,2,3,8]", "-", "f32[1,2,4,8]", "f32[1,2,4,8]"), .n_out = 3},
    /* The other float dtypes (fp16: one rounding of the output). */
    {OC("Attention", 23, "is_causal=1", "f64[1,2,4,8]", "f64[1,2,4,8]", "f64[1,2,4,8]")},
    /* fp16 and bf16 run the tensor-core flash kernel (attention_flash.cu),
     * which rounds P to the dtype for P x V: |y| error up to one rounding
     * of the largest |v| (2^-11 x 2 for fp16, 2^-8 x 2 for bf16) beside
     * the output's own rounding. */
    {OC("Attention", 23, "", "f16[1,2,4,8]", "f16[1,2,5,8]", "f16[1,2,5,8]", "f16[4,5]"),
     .rtol = 2e-3, .atol = 2e-3},
    /* The flash kernels at the exporters' sizes: head sizes 64, 80 and
     * 128, 128 and 197 (odd) keys, BERT's [B,1,1,S] and GPT-2's
     * [B,1,S,S] additive masks, bool masks, is_causal, grouped heads. */
    {OC("Attention", 23, "", "f32[2,3,128,64]", "f32[2,3,128,64]", "f32[2,3,128,64]",
        "f32[2,1,1,128]")},
    {OC("Attention", 23, "is_causal=1", "f32[1,2,197,80]", "f32[1,2,197,80]",
        "f32[1,2,197,80]")},
    {OC("Attention", 23, "", "f32[1,2,197,128]", "f32[1,2,197,128]", "f32[1,2,197,128]",
        "f32[1,1,197,197]")},
    {OC("Attention", 23, "is_causal=1", "f32[1,4,197,64]", "f32[1,2,197,64]",
        "f32[1,2,197,64]", "bool[1,1,197,197]:r(0,1)")},
    {OC("Attention", 23, "", "f16[2,3,128,64]", "f16[2,3,128,64]", "f16[2,3,128,64]",
        "f16[2,1,1,128]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "is_causal=1", "f16[1,2,197,80]", "f16[1,2,197,80]",
        "f16[1,2,197,80]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "", "f16[2,2,128,128]", "f16[2,2,128,128]", "f16[2,2,128,128]",
        "f16[2,1,128,128]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "", "f16[1,4,197,64]", "f16[1,2,197,64]", "f16[1,2,197,64]",
        "bool[1,1,197,197]:r(0,1)"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "is_causal=1", "bf16[2,2,197,64]", "bf16[2,2,197,64]",
        "bf16[2,2,197,64]"), .rtol = 1e-2, .atol = 1e-2},
    {OC("Attention", 23, "", "bf16[1,2,128,128]", "bf16[1,2,128,128]", "bf16[1,2,128,128]",
        "bf16[1,1,1,128]"), .rtol = 1e-2, .atol = 1e-2},
    {OC("Attention", 23, "scale=0.125", "bf16[1,2,197,80]", "bf16[1,2,197,80]",
        "bf16[1,2,197,80]", "bf16[1,2,197,197]"), .rtol = 1e-2, .atol = 1e-2},
    /* The register kernel (flash_f2_kernel) at each built head size (32,
     * 64, 96 via 80 or 96, 128), V's head apart, 64-query blocks (288
     * of them: over 2 a multiprocessor) and 16-query ones; causal with fewer
     * queries than keys, windows and nonpad_kv_seqlen (eng_attention_open
     * per key), a bool mask with rows all false (zeros), a mask shorter
     * than the keys, a per-query mask with odd rows (unpaired reads), 3-D
     * grouped heads; and a head of 12, which the WMMA kernel keeps. */
    {OC("Attention", 23, "", "f16[16,9,128,64]", "f16[16,9,128,64]", "f16[16,9,128,64]",
        "f16[16,1,1,128]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "is_causal=1", "bf16[8,12,150,64]", "bf16[8,12,150,64]",
        "bf16[8,12,150,64]"), .rtol = 1e-2, .atol = 1e-2},
    {OC("Attention", 23, "", "f16[1,3,70,32]", "f16[1,3,90,32]", "f16[1,3,90,96]"),
     .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "is_causal=1", "f16[2,2,40,128]", "f16[2,2,100,128]",
        "f16[2,2,100,64]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "", "f16[2,2,3,8]", "f16[2,2,5,8]", "f16[2,2,5,8]",
        "bool[3,5]{1,0,1,1,0,1,1,1,1,1,0,0,0,0,0}"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "", "f16[1,2,33,96]", "f16[1,2,70,96]", "f16[1,2,70,96]",
        "f16[33,41]"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 23, "q_num_heads=6 kv_num_heads=2", "f16[2,67,384]", "f16[2,67,128]",
        "f16[2,67,128]", "bool[2,6,67,67]:r(0,1)"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 24, "is_causal=1", "f16[3,2,30,64]", "f16[3,2,80,64]", "f16[3,2,80,64]",
        "-", "-", "-", "i64[3]{10,45,80}"), .rtol = 2e-3, .atol = 2e-3},
    {OC("Attention", 25, "left_window_size=20 right_window_size=5", "bf16[1,2,100,64]",
        "bf16[1,2,100,64]", "bf16[1,2,100,64]", "bf16[1,1,100,100]"), .rtol = 1e-2,
     .atol = 1e-2},
    {OC("Attention", 23, "", "f16[1,2,70,12]", "f16[1,2,70,12]", "f16[1,2,70,12]",
        "f16[1,1,1,70]"), .rtol = 2e-3, .atol = 2e-3},
    /* RotaryEmbedding: halves and interleaved, partial, 3-D, no ids. */
    {OC("RotaryEmbedding", 23, "", "f32[2,4,3,8]", "=f32[50,4]", "=f32[50,4]",
        "i64[2,3]:r(0,49)")},
    {OC("RotaryEmbedding", 23, "interleaved=1 rotary_embedding_dim=4", "f32[2,4,3,8]",
        "=f32[50,2]", "=f32[50,2]", "i64[2,3]:r(0,49)")},
    {OC("RotaryEmbedding", 23, "num_heads=4", "f32[2,3,32]", "f32[2,3,4]", "f32[2,3,4]")},
    {OC("RotaryEmbedding", 23, "rotary_embedding_dim=6 interleaved=1", "f32[1,2,5,10]",
        "f32[1,5,3]", "f32[1,5,3]")},
    {OC("RotaryEmbedding", 23, "", "f16[1,2,3,8]", "f16[1,3,4]", "f16[1,3,4]"), .rtol = 2e-3},
    /* SwiGLU. */
    {OC("SwiGLU", 28, "", "f32[3,257]", "f32[3,257]")},
    {OC("SwiGLU", 28, "alpha=1.702", "f64[2,5]", "f64[2,5]")},
};

/* The quantization ops: integer outputs compare exactly (both devices run
 * quant_impl.h's arithmetic), ranges chosen so that some values saturate. */
static const op_case_t quant_cases[] = {
    {OC("QuantizeLinear", 13, "", "f32[3,257]:r(-300,300)", "=f32[]{2.0}", "=u8[]{128}")},
    {OC("QuantizeLinear", 13, "axis=0", "f32[3,5,7]:r(-50,50)", "=f32[3]{0.5,1.5,0.25}",
        "=i8[3]{-3,0,7}")},
    {OC("QuantizeLinear", 21, "axis=1 block_size=3", "f32[2,7,3]:r(-20,20)", "=f32[2,3,3]:pos",
        "=i16[2,3,3]")},
    {OC("QuantizeLinear", 19, "", "f16[4,33]:r(-10,10)", "f16[]{0.125}", "u16[]{1000}")},
    {OC("QuantizeLinear", 21, "output_dtype=i16", "f32[100]:r(-40000,40000)", "=f32[]{1.5}")},
    {OC("QuantizeLinear", 23, "precision=f16", "f32[64]:r(-30,30)", "=f32[]{0.3}", "=i8[]{1}")},
    {OC("QuantizeLinear", 21, "", "i32[50]:r(-1000,1000)", "=f32[]{7.0}", "=i8[]{0}")},
    {OC("QuantizeLinear", 19, "", "bf16[40]:r(-10,10)", "=bf16[]{0.0625}", "=u8[]{10}")},
    /* float8: saturate on and off (NaNs, infinities and huge values among
     * the special ones), per axis, blocked with non-zero zero points. */
    {OC("QuantizeLinear", 19, "", "f32[3,257]:r(-600,600)", "=f32[]{1.0}", "=f8e4m3fn[]{0}")},
    {OC("QuantizeLinear", 19, "saturate=0", "f32[257]:special", "=f32[]{0.5}",
        "=f8e4m3fn[]{0}")},
    {OC("QuantizeLinear", 21, "axis=1 output_dtype=f8e5m2 saturate=0", "f32[2,3,5]:r(-1e5,1e5)",
        "=f32[3]:pos")},
    {OC("QuantizeLinear", 21, "axis=1 block_size=2", "f32[2,5,3]:r(-50,50)", "=f32[2,3,3]:pos",
        "=f8e4m3fnuz[2,3,3]")},
    {OC("QuantizeLinear", 23, "precision=f16", "f32[64]:r(-300,300)", "=f32[]{0.3}",
        "=f8e5m2fnuz[]{0}")},
    {OC("QuantizeLinear", 19, "", "f16[4,33]:r(-100,100)", "f16[]{0.125}", "f8e5m2[]{0}")},
    {OC("DequantizeLinear", 13, "", "u8[3,257]:r(0,255)", "=f32[]{0.05}", "=u8[]{128}")},
    {OC("DequantizeLinear", 13, "axis=1", "i8[2,3,5]:r(-128,127)", "=f32[3]:pos", "=i8[3]")},
    {OC("DequantizeLinear", 21, "axis=0 block_size=2", "i16[5,4]:r(-30000,30000)",
        "=f32[3,4]:pos", "=i16[3,4]")},
    {OC("DequantizeLinear", 10, "", "i32[40]:r(-100000,100000)", "=f32[]{0.001}")},
    {OC("DequantizeLinear", 23, "output_dtype=f16", "u16[64]:r(0,65535)", "=f32[]{0.01}",
        "=u16[]{30000}")},
    {OC("DequantizeLinear", 19, "", "u8[64]:r(0,255)", "=bf16[]{0.5}")},
    {OC("DequantizeLinear", 13, "", "i8[9]:r(-128,127)", "f32[]{0.25}", "i8[]{3}")},
    {OC("DequantizeLinear", 19, "", "f8e4m3fn[3,257]:r(-500,500)", "=f32[]{0.05}",
        "=f8e4m3fn[]{0}")},
    {OC("DequantizeLinear", 21, "axis=1", "f8e5m2[2,3,5]:special", "=f32[3]:pos", "=f8e5m2[3]")},
    {OC("DequantizeLinear", 23, "axis=0 block_size=2 output_dtype=f16", "f8e4m3fnuz[5,4]",
        "=f32[3,4]:pos", "=f8e4m3fnuz[3,4]")},
    {OC("DequantizeLinear", 19, "", "f8e5m2fnuz[64]", "=bf16[]{0.5}")},
    {OC("DynamicQuantizeLinear", 11, "", "f32[3,257]:r(-3,5)"), .n_out = 3},
    {OC("DynamicQuantizeLinear", 11, "", "f32[100003]"), .n_out = 3},
    {OC("DynamicQuantizeLinear", 11, "", "f32[17]:pos"), .n_out = 3},
    {OC("MatMulInteger", 10, "", "u8[3,257]:r(0,255)", "=u8[257,5]:r(0,255)", "u8[]{12}",
        "=u8[]{200}")},
    {OC("MatMulInteger", 10, "", "i8[2,4,16]:r(-128,127)", "i8[16,3]:r(-128,127)", "=i8[4]",
        "=i8[3]")},
    {OC("MatMulInteger", 10, "", "u8[16]", "u8[2,16,3]")},
    {OC("MatMulInteger", 10, "", "i8[2,1,3,8]:r(-128,127)", "u8[4,8,2]:r(0,255)",
        "=i8[2,1,3,1]", "=u8[4,1,2]")},
    {OC("QLinearMatMul", 10, "", "u8[3,64]:r(0,255)", "=f32[]{0.02}", "=u8[]{120}",
        "=i8[64,5]:r(-128,127)", "=f32[]{0.01}", "=i8[]{0}", "=f32[]{0.1}", "=u8[]{128}")},
    {OC("QLinearMatMul", 10, "", "i8[4,32]:r(-128,127)", "=f32[4]:r(0.01,0.05)", "=i8[4]",
        "u8[32,6]:r(0,255)", "=f32[6]:r(0.001,0.01)", "=u8[6]", "=f32[]{0.05}", "=i8[]{-1}")},
    {OC("QLinearMatMul", 21, "", "i8[2,3,8]:r(-128,127)", "=f16[]{0.05}", "=i8[]{-5}",
        "i8[2,8,4]:r(-128,127)", "=f16[]{0.02}", "=i8[]{3}", "=f16[]{0.5}", "=i8[]{-1}")},
    {OC("ConvInteger", 10, "pads=[1,1,1,1]", "u8[2,3,7,7]:r(0,255)", "=u8[4,3,3,3]:r(0,255)",
        "=u8[]{100}", "=u8[]{128}")},
    {OC("ConvInteger", 10, "group=2 strides=[2,2] dilations=[2,1]", "i8[1,4,9,8]:r(-128,127)",
        "=i8[6,2,2,3]:r(-128,127)", "-", "=i8[6]")},
    {OC("ConvInteger", 10, "auto_pad='SAME_UPPER'", "u8[1,2,10]", "=u8[3,2,4]")},
    {OC("QLinearConv", 10, "pads=[1,1,1,1]", "u8[1,3,8,8]:r(0,255)", "=f32[]{0.02}",
        "=u8[]{128}", "=i8[5,3,3,3]:r(-128,127)", "=f32[5]:r(0.001,0.01)", "=i8[5]",
        "=f32[]{0.05}", "=u8[]{100}", "=i32[5]:r(-1000,1000)")},
    {OC("QLinearConv", 10, "group=3", "i8[2,3,5,5]:r(-128,127)", "=f32[]{0.1}", "=i8[]{0}",
        "=i8[6,1,3,3]:r(-128,127)", "=f32[]{0.01}", "=i8[]{0}", "=f32[]{0.2}", "=i8[]{-2}")},
};

/* The spatial ops: every GridSample mode and padding (both opsets' names,
 * 1-D to 3-D), grids reaching past the image; ROIs inside and across the
 * image's edges. NonMaxSuppression's output length depends on its values,
 * so its plans are dynamic. */
static const op_case_t spatial_cases[] = {
    {OC("GridSample", 16, "", "f32[1,2,5,6]", "f32[1,4,3,2]:r(-1.3,1.3)")},
    {OC("GridSample", 16, "mode='nearest' padding_mode='border'", "f32[2,2,5,6]",
        "f32[2,4,3,2]:r(-1.3,1.3)")},
    {OC("GridSample", 16, "mode='bicubic' padding_mode='reflection' align_corners=1",
        "f32[1,3,5,6]", "f32[1,4,3,2]:r(-1.6,1.6)")},
    {OC("GridSample", 16, "mode='bicubic'", "f64[1,2,4,4]", "f64[1,3,3,2]:r(-1.3,1.3)")},
    {OC("GridSample", 20, "mode='linear' padding_mode='reflection'", "f32[1,2,3,4,5]",
        "f32[1,2,3,4,3]:r(-1.6,1.6)")},
    {OC("GridSample", 20, "mode='nearest' align_corners=1", "f32[1,2,3,4,5]",
        "f32[1,2,3,4,3]:r(-1.3,1.3)")},
    {OC("GridSample", 20, "mode='cubic' padding_mode='border'", "f32[2,2,9]",
        "f32[2,5,1]:r(-1.3,1.3)")},
    {OC("AffineGrid", 20, "", "f32[2,2,3]", "=i64[4]{2,3,5,6}")},
    {OC("AffineGrid", 20, "align_corners=1", "f32[1,3,4]", "=i64[5]{1,2,3,4,5}")},
    {OC("RoiAlign", 16, "output_height=3 output_width=2",
        "f32[2,3,8,8]", "=f32[3,4]{0.5,1,6.5,7,-2,-1,3,9.5,2.2,2.7,2.9,3.1}", "=i64[3]{0,1,0}")},
    {OC("RoiAlign", 16, "mode='max' coordinate_transformation_mode='output_half_pixel' "
        "sampling_ratio=2 spatial_scale=0.5",
        "f32[2,3,8,8]", "=f32[2,4]{1,2,13,14,-3,0,20,9}", "=i64[2]{1,0}")},
    {OC("RoiAlign", 10, "output_height=2 output_width=2", "f32[1,2,6,6]",
        "f32[2,4]:r(0,5)", "=i64[2]{0,0}")},
    {OC("MaxRoiPool", 13, "pooled_shape=[2,3] spatial_scale=0.5", "f32[2,3,8,8]",
        "=f32[3,5]{0,1,1,10,12,1,0,2,6,7,1,-4,-4,30,30}")},
    {OC("Col2Im", 18, "", "f32[1,6,9]", "=i64[2]{4,5}", "=i64[2]{2,3}")},
    {OC("Col2Im", 18, "strides=[2,2] pads=[1,1,1,1] dilations=[1,1]", "f32[2,8,9]",
        "=i64[2]{5,5}", "=i64[2]{2,2}")},
    {OC("Col2Im", 18, "", "f32[1,8,24]", "=i64[3]{3,4,5}", "=i64[3]{2,2,2}")},
    {OC("MaxUnpool", 11, "kernel_shape=[2,2] strides=[2,2]", "f32[1,2,2,2]",
        "=i64[1,2,2,2]{0,3,10,15,16,21,27,30}")},
    {OC("MaxUnpool", 11, "kernel_shape=[2,2] strides=[2,2]", "f32[1,2,2,2]",
        "=i64[1,2,2,2]{5,7,13,15,17,19,29,31}", "=i64[4]{1,2,5,6}")},
    {OC("DeformConv", 19, "", "f32[1,2,5,5]", "=f32[3,2,3,3]", "f32[1,18,3,3]:r(-1.5,1.5)")},
    {OC("DeformConv", 19, "pads=[1,1,1,1] group=2 offset_group=2", "f32[1,4,5,5]",
        "=f32[2,2,3,3]", "f32[1,36,5,5]:r(-1.5,1.5)", "=f32[2]", "f32[1,18,5,5]:unit")},
    {OC("DeformConv", 19, "strides=[2] dilations=[2]", "f32[2,2,9]", "=f32[2,2,2]",
        "f32[2,2,4]:r(-1.5,1.5)", "-", "f32[2,2,4]:unit")},
    {OC("NonMaxSuppression", 11, "", "f32[2,20,4]", "f32[2,3,20]:distinct", "=i64[1]{4}",
        "=f32[1]{0.3}", "=f32[1]{0.1}"), .dyn = true},
    {OC("NonMaxSuppression", 11, "center_point_box=1", "f32[1,30,4]:pos", "f32[1,2,30]",
        "=i64[1]{30}", "=f32[1]{0.2}"), .dyn = true},
};

/* The signal ops: each transform and its lengths, the windows and the mel
 * matrix from runtime scalars (dynamic plans, the kernels run). */
static const op_case_t signal_cases[] = {
    {OC("DFT", 20, "", "f32[2,8,1]")},
    {OC("DFT", 17, "axis=1", "f32[1,10,6,2]")},
    {OC("DFT", 17, "axis=2 onesided=1", "f32[2,3,16,1]")},
    {OC("DFT", 20, "inverse=1", "f32[3,5,4,2]", "-", "=i64[]{1}")},
    {OC("DFT", 20, "inverse=1 onesided=1", "f32[1,9,2]", "=i64[]{16}", "-")},
    {OC("DFT", 20, "", "f64[2,7,1]", "=i64[]{12}", "=i64[]{-2}")},
    {OC("STFT", 17, "", "f32[2,64,1]", "=i64[]{8}", "=f32[16]:pos")},
    {OC("STFT", 17, "onesided=0", "f32[1,64,2]", "=i64[]{8}", "-", "=i64[]{16}")},
    {OC("HannWindow", 17, "", "i64[]{10}"), .dyn = true},
    {OC("HammingWindow", 17, "periodic=0", "i64[]{11}"), .dyn = true},
    {OC("BlackmanWindow", 17, "output_datatype=11", "i64[]{9}"), .dyn = true},
    {OC("MelWeightMatrix", 17, "", "i64[]{8}", "i64[]{16}", "i64[]{8192}", "f32[]{0}",
        "f32[]{4096}"), .dyn = true},
};

/* float16/bfloat16 through the nn ops that take half as it is (MatMul,
 * Gemm, the normalisations, Softmax, Conv, the pools, the reductions): the
 * CPU computes them through float and rounds once, the GPU on half with
 * float accumulation and rounds once, so an output may round to the other
 * neighbour: two units in the last place (float16 2^-10, bfloat16 2^-7
 * relative), and an absolute allowance where sums cancel near zero. */
#define HALF_TOL .rtol = 2e-3, .atol = 2e-3
#define BF16_TOL .rtol = 1.6e-2, .atol = 1.6e-2
static const op_case_t half_nn_cases[] = {
    {OC("MatMul", 13, "", "f16[3,4]", "f16[4,5]"), HALF_TOL},
    {OC("MatMul", 13, "", "bf16[3,4]", "bf16[4,5]"), BF16_TOL},
    {OC("MatMul", 13, "", "f16[4]", "f16[2,4,3]"), HALF_TOL},
    {OC("MatMul", 13, "", "f16[2,3,4,5]", "f16[5]"), HALF_TOL},
    /* attention's products: Q x K^T and P x V per head, batched */
    {OC("MatMul", 13, "", "f16[2,4,7,16]", "f16[2,4,16,7]"), HALF_TOL},
    {OC("MatMul", 13, "", "bf16[2,4,7,7]", "bf16[2,4,7,16]"), BF16_TOL},
    {OC("MatMul", 13, "", "f16[2,1,3,4]", "f16[5,4,6]"), HALF_TOL},
    {OC("MatMul", 13, "", "f16[2,5,64]", "=f16[64,48]"), HALF_TOL},
    {OC("MatMul", 13, "", "bf16[2,5,64]", "=bf16[64,48]"), BF16_TOL},
    {OC("MatMul", 13, "", "f16[2,0]", "f16[0,3]")},
    /* cuBLASLt at odd sizes (n = 197, k = 77), one product and batched */
    {OC("MatMul", 13, "", "f16[13,77]", "=f16[77,197]"), HALF_TOL},
    {OC("MatMul", 13, "", "bf16[13,77]", "=bf16[77,197]"), BF16_TOL},
    {OC("MatMul", 13, "", "f16[3,13,77]", "f16[3,77,197]"), HALF_TOL},
    {OC("MatMul", 13, "", "bf16[3,13,77]", "bf16[3,77,197]"), BF16_TOL},
    {OC("Gemm", 13, "transB=1", "bf16[13,77]", "=bf16[197,77]", "=bf16[197]"), BF16_TOL},
    {OC("Gemm", 13, "", "f16[3,5]", "f16[5,4]", "f16[3,4]"), HALF_TOL},
    {OC("Gemm", 13, "transB=1", "f16[6,64]", "=f16[48,64]", "=f16[48]"), HALF_TOL},
    {OC("Gemm", 13, "transB=1", "bf16[6,64]", "=bf16[48,64]", "=bf16[48]"), BF16_TOL},
    {OC("Gemm", 13, "transA=1 transB=1 alpha=0.25 beta=0.5", "f16[4,3]", "f16[5,4]", "f16[1,5]"),
     HALF_TOL},
    {OC("Gemm", 13, "alpha=0.5", "bf16[3,5]", "bf16[5,4]"), BF16_TOL},
    {OC("LayerNormalization", 17, "", "f16[2,3,64]", "=f16[64]", "=f16[64]"), .n_out = 3,
     HALF_TOL},
    {OC("LayerNormalization", 17, "", "bf16[2,3,64]", "=bf16[64]", "=bf16[64]"), BF16_TOL},
    {OC("LayerNormalization", 17, "axis=-2", "f16[2,3,5]", "=f16[1,5]", "=f16[3,5]"), HALF_TOL},
    {OC("LayerNormalization", 17, "", "f16[3,1031]", "=f16[1031]"), HALF_TOL},
    {OC("RMSNormalization", 23, "", "f16[2,3,64]", "=f16[64]"), HALF_TOL},
    {OC("RMSNormalization", 23, "axis=1 epsilon=0.1", "bf16[2,3,4,5]", "=bf16[4,1]"), BF16_TOL},
    {OC("BatchNormalization", 15, "",
        "f16[2,3,4,5]", "=f16[3]", "=f16[3]", "=f16[3]", "=f16[3]:pos"), HALF_TOL},
    {OC("BatchNormalization", 15, "",
        "bf16[2,3,4,5]", "=bf16[3]", "=bf16[3]", "=bf16[3]", "=bf16[3]:pos"), BF16_TOL},
    {OC("InstanceNormalization", 13, "", "f16[2,3,4,5]", "=f16[3]", "=f16[3]"), HALF_TOL},
    {OC("InstanceNormalization", 13, "", "bf16[1,2,257]", "=bf16[2]", "=bf16[2]"), BF16_TOL},
    {OC("Softmax", 13, "", "f16[4,7,50]"), HALF_TOL},
    {OC("Softmax", 13, "", "bf16[4,7,50]"), BF16_TOL},
    {OC("Softmax", 13, "", "f16[3,1500]"), HALF_TOL},
    {OC("Softmax", 13, "axis=1", "f16[2,5,3]"), HALF_TOL},
    {OC("Softmax", 11, "axis=1", "f16[2,5,3]"), HALF_TOL},
    {OC("LogSoftmax", 13, "", "f16[4,300]"), HALF_TOL},
    {OC("LogSoftmax", 13, "axis=0", "bf16[6,5]"), BF16_TOL},
    {OC("Conv", 11, "", "f16[2,3,7,7]", "=f16[4,3,3,3]", "=f16[4]"), HALF_TOL},
    {OC("Conv", 11, "", "bf16[2,3,7,7]", "=bf16[4,3,3,3]", "=bf16[4]"), BF16_TOL},
    {OC("Conv", 11, "strides=[2,2] pads=[1,1,1,1]", "f16[1,3,8,9]", "=f16[2,3,3,3]"), HALF_TOL},
    {OC("Conv", 11, "group=2", "f16[1,4,6,6]", "=f16[6,2,3,3]"), HALF_TOL},
    {OC("Conv", 11, "group=4 pads=[1,1,1,1]", "f16[2,4,6,6]", "=f16[4,1,3,3]", "=f16[4]"),
     HALF_TOL},
    {OC("Conv", 11, "", "f16[2,8,5,5]", "=f16[16,8,1,1]", "=f16[16]"), HALF_TOL},
    {OC("Conv", 11, "", "bf16[2,8,5,5]", "=bf16[16,8,1,1]"), BF16_TOL},
    {OC("Conv", 11, "", "f16[1,2,257]", "=f16[3,2,5]", "=f16[3]"), HALF_TOL},
    {OC("ConvTranspose", 11, "strides=[2,2] pads=[1,1,1,1]", "f16[1,2,3,3]", "=f16[2,3,3,3]",
        "=f16[3]"), HALF_TOL},
    {OC("ConvTranspose", 11, "group=2", "bf16[1,4,3,3]", "=bf16[4,2,3,3]"), BF16_TOL},
    {OC("MaxPool", 12, "kernel_shape=[3,3] pads=[1,1,1,1] strides=[2,2]", "f16[1,3,7,7]")},
    {OC("MaxPool", 12, "kernel_shape=[2,2] strides=[2,2]", "bf16[2,2,5,5]:distinct"),
     .n_out = 2},
    {OC("AveragePool", 11, "kernel_shape=[3,3] pads=[1,1,1,1]", "f16[1,3,7,7]"), HALF_TOL},
    {OC("AveragePool", 11, "kernel_shape=[3,3] pads=[1,1,1,1] count_include_pad=1",
        "bf16[1,3,7,7]"), BF16_TOL},
    {OC("GlobalAveragePool", 13, "", "f16[2,3,5,5]"), HALF_TOL},
    {OC("GlobalAveragePool", 13, "", "bf16[1,4,257]"), BF16_TOL},
    {OC("GlobalMaxPool", 13, "", "f16[2,3,5,5]")},
    {OC("ReduceMean", 18, "", "f16[3,4,64]", "=i64[1]{-1}"), HALF_TOL},
    {OC("ReduceMean", 18, "", "bf16[3,4,64]", "=i64[1]{-1}"), BF16_TOL},
    {OC("ReduceSum", 13, "keepdims=0", "f16[3,4,5]", "=i64[2]{0,-1}"), HALF_TOL},
    {OC("ReduceSum", 13, "", "f16[5000,3]", "=i64[1]{0}"), HALF_TOL},
    {OC("ReduceMax", 18, "", "f16[3,4,5]", "=i64[1]{1}")},
    {OC("ReduceMin", 18, "keepdims=0", "bf16[3,4,5]")},
    {OC("ReduceSumSquare", 18, "", "f16[3,70]", "=i64[1]{1}"), HALF_TOL},
    {OC("ReduceL2", 18, "", "bf16[3,70]", "=i64[1]{1}"), BF16_TOL},
    {OC("ReduceLogSumExp", 18, "", "f16[3,70]", "=i64[1]{1}"), HALF_TOL},
    /* The data-movement ops between them move half elements as they are. */
    {OC("Transpose", 13, "perm=[0,2,1,3]", "f16[2,3,4,5]")},
    {OC("Concat", 13, "axis=1", "bf16[2,3]", "bf16[2,5]")},
    {OC("Gather", 13, "axis=0", "f16[10,4]", "=i64[3]{7,0,9}")},
    {OC("Slice", 13, "", "f16[6,5]", "=i64[1]{1}", "=i64[1]{4}")},
    {OC("Expand", 13, "", "bf16[3,1]", "=i64[2]{3,4}")},
    {OC("Pad", 13, "", "f16[3,4]", "=i64[4]{1,2,0,1}", "=f16[]{1.5}")},
    {OC("Pad", 10, "pads=[1,2,0,1] value=1.5", "f16[3,4]")},
};

static const struct {
    const char *family;
    const op_case_t *cases;
    size_t n;
} case_tables[] = {
    {"half_nn", half_nn_cases, N_OF(half_nn_cases)},
    {"unary", unary_cases, N_OF(unary_cases)},
    {"binary", binary_cases, N_OF(binary_cases)},
    {"reduce", reduce_cases, N_OF(reduce_cases)},
    {"shape", shape_cases, N_OF(shape_cases)},
    {"nn", nn_cases, N_OF(nn_cases)},
    {"rnn", rnn_cases, N_OF(rnn_cases)},
    {"linalg", linalg_cases, N_OF(linalg_cases)},
    {"misc", misc_cases, N_OF(misc_cases)},
    {"attention", attention_cases, N_OF(attention_cases)},
    {"quant", quant_cases, N_OF(quant_cases)},
    {"spatial", spatial_cases, N_OF(spatial_cases)},
    {"signal", signal_cases, N_OF(signal_cases)},
    {"index", index_cases, N_OF(index_cases)},
};

/* ---- op tests ---------------------------------------------------------- */

Test(cuda_consistency, unary_ops_match_the_cpu)
{
    cases_run(unary_cases, N_OF(unary_cases));
}

Test(cuda_consistency, binary_ops_match_the_cpu)
{
    cases_run(binary_cases, N_OF(binary_cases));
}

Test(cuda_consistency, reduce_ops_match_the_cpu)
{
    cases_run(reduce_cases, N_OF(reduce_cases));
}

Test(cuda_consistency, shape_ops_match_the_cpu)
{
    cases_run(shape_cases, N_OF(shape_cases));
}

Test(cuda_consistency, nn_ops_match_the_cpu)
{
    cases_run(nn_cases, N_OF(nn_cases));
}

Test(cuda_consistency, rnn_ops_match_the_cpu)
{
    cases_run(rnn_cases, N_OF(rnn_cases));
}

Test(cuda_consistency, linalg_ops_match_the_cpu)
{
    cases_run(linalg_cases, N_OF(linalg_cases));
}

Test(cuda_consistency, misc_ops_match_the_cpu)
{
    cases_run(misc_cases, N_OF(misc_cases));
}

Test(cuda_consistency, attention_ops_match_the_cpu)
{
    cases_run(attention_cases, N_OF(attention_cases));
}

Test(cuda_consistency, quant_ops_match_the_cpu)
{
    cases_run(quant_cases, N_OF(quant_cases));
}

Test(cuda_consistency, spatial_ops_match_the_cpu)
{
    cases_run(spatial_cases, N_OF(spatial_cases));
}

Test(cuda_consistency, signal_ops_match_the_cpu)
{
    cases_run(signal_cases, N_OF(signal_cases));
}

Test(cuda_consistency, index_ops_match_the_cpu)
{
    cases_run(index_cases, N_OF(index_cases));
}

Test(cuda_consistency, half_nn_ops_match_the_cpu)
{
    cases_run(half_nn_cases, N_OF(half_nn_cases));
}

static bool op_has_case(const char *op)
{
    for (size_t t = 0; t < N_OF(case_tables); t++)
        for (size_t i = 0; i < case_tables[t].n; i++)
            if (strcmp(case_tables[t].cases[i].op, op) == 0)
                return true;
    return false;
}

/* Every op with a CPU kernel has at least one case (so a new op cannot be
 * forgotten here), and every case names an op the CPU runs (so a typo
 * cannot hide one). In a CUDA build, ops without a CUDA kernel are listed:
 * their cases fail above. */
Test(cuda_consistency, every_cpu_kernel_has_a_case)
{
    dut_t d;
    dut_select(&d);
    char missing[1024] = "";
    size_t w = 0, n_missing = 0, n_ops = 0;
    for (int id = 0; id < ENG_OP_COUNT; id++) {
        /* An internal op is made by the loader only: its rows are model
         * rows (fused_elementwise_chains_match_the_cpu). */
        if (!eng_cpu_kernels[id] || eng_op_is_internal((eng_op_id_t)id))
            continue;
        n_ops++;
        if (!op_has_case(eng_op_type((eng_op_id_t)id)) && w < sizeof missing) {
            w += (size_t)snprintf(missing + w, sizeof missing - w, " %s",
                                  eng_op_type((eng_op_id_t)id));
            n_missing++;
        }
    }
    cr_expect_gt(n_ops, 0);
    cr_expect_eq(n_missing, 0, "%zu op(s) with a CPU kernel have no consistency case:%s",
                 n_missing, missing);
    char no_cuda[1024] = "";
    w = 0;
    for (size_t t = 0; t < N_OF(case_tables); t++)
        for (size_t i = 0; i < case_tables[t].n; i++) {
            const char *op = case_tables[t].cases[i].op;
            cr_expect(eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), op),
                      "a %s case names '%s', which has no CPU kernel",
                      case_tables[t].family, op);
            bool first = true;
            for (size_t j = 0; j < i; j++)
                first = first && strcmp(case_tables[t].cases[j].op, op) != 0;
            if (eng_backend_get(ENG_DEVICE_CUDA) && first &&
                !eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CUDA), op) &&
                w < sizeof no_cuda)
                w += (size_t)snprintf(no_cuda + w, sizeof no_cuda - w, " %s", op);
        }
    if (no_cuda[0])
        cr_log_warn("ops with no CUDA kernel yet:%s", no_cuda);
}

/* ---- whole models ------------------------------------------------------ */

/* Loads `path` on both sides, runs each batch size with the same random
 * inputs (a symbolic dim takes the batch; values in [-1,1) for floats),
 * compares every output, and checks every cache is idle after. */
static void model_compare(rig_t *r, const char *path, const int64_t *batches, size_t n_batches,
                          const tol_t *tol)
{
    eng_model_t *ref = NULL, *dev = NULL;
    eng_model_config_t rcfg = rig_config(r, false), dcfg = rig_config(r, true);
    int rc = eng_model_load(path, &rcfg, &ref);
    cr_expect_eq(rc, 0, "%s: loading on the CPU: %s", path, fs_errmsg());
    if (rc == 0) {
        rc = eng_model_load(path, &dcfg, &dev);
        cr_expect_eq(rc, 0, "%s: loading on %s: %s", path, r->dut.name, fs_errmsg());
    }
    size_t n_in = rc == 0 ? eng_model_n_inputs(ref) : 0;
    size_t n_out = rc == 0 ? eng_model_n_outputs(ref) : 0;
    cr_expect_leq(n_in, OC_MAX_IN, "%s: too many inputs for this harness", path);
    cr_expect_leq(n_out, OC_MAX_OUT, "%s: too many outputs for this harness", path);
    for (size_t bi = 0; rc == 0 && n_in <= OC_MAX_IN && n_out <= OC_MAX_OUT && bi < n_batches;
         bi++) {
        eng_tensor_t *owned[OC_MAX_IN] = {NULL}, views[OC_MAX_IN];
        eng_tensor_t *want[OC_MAX_OUT] = {NULL}, *got[OC_MAX_OUT] = {NULL};
        char what[300];
        for (size_t i = 0; i < n_in; i++) {
            eng_io_info_t info;
            cr_assert_eq(eng_model_input(ref, i, &info), 0);
            cr_assert_geq(info.rank, 0, "%s: input '%s' has no declared rank", path, info.name);
            spec_t s = {.dt = info.dtype, .dist = DIST_RANGE, .lo = -1.0, .hi = 1.0,
                        .n_vals = -1, .shape.rank = info.rank};
            if (!dtype_is_float(info.dtype))
                s.dist = DIST_DEFAULT;
            for (int d = 0; d < info.rank; d++)
                s.shape.dims[d] = info.dims[d] < 0 ? batches[bi] : info.dims[d];
            snprintf(what, sizeof what, "%s/%lld/%zu", path, (long long)batches[bi], i);
            owned[i] = spec_tensor(&s, fnv1a(what));
            views[i] = *owned[i];
        }
        rc = eng_model_run(ref, views, n_in, want);
        cr_expect_eq(rc, 0, "%s at batch %lld: running on the CPU: %s", path,
                     (long long)batches[bi], fs_errmsg());
        if (rc == 0) {
            rc = eng_model_run(dev, views, n_in, got);
            cr_expect_eq(rc, 0, "%s at batch %lld: running on %s: %s", path,
                         (long long)batches[bi], r->dut.name, fs_errmsg());
        }
        for (size_t j = 0; rc == 0 && j < n_out; j++) {
            snprintf(what, sizeof what, "%s at batch %lld, output %zu", path,
                     (long long)batches[bi], j);
            expect_tensor_match(what, want[j], got[j], tol);
        }
        outputs_free(want, (int)n_out);
        outputs_free(got, (int)n_out);
        for (size_t i = 0; i < n_in; i++)
            eng_tensor_free(owned[i]);
    }
    eng_model_destroy(dev);
    eng_model_destroy(ref);
    rig_expect_idle(r, path);
}

static int cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* The demo models at batch 1, 8 and 64. fp32 with TF32 off on both sides:
 * only the order of each sum differs. */
Test(cuda_consistency, demo_models_match_the_cpu)
{
    static const struct {
        const char *path;
        double rtol, atol;
    } models[] = {
        /* Three GEMMs with K <= 128 and a softmax: nothing amplifies the
         * reordering, the op defaults hold. */
        {"models/mlp/1/model.onnx", OC_RTOL, OC_ATOL},
        /* Convolutions of K <= 72, pools and a 16-wide Gemm head. */
        {"models/cnn/1/model.onnx", OC_RTOL, OC_ATOL},
        /* Two LayerNorms divide by standard deviations summed in another
         * order, attention exponentiates K=64 dot products and the MLP
         * sums K=256: each stage grows the ~1e-6 rounding differences, so
         * 1e-3 relative, 1e-4 absolute near zero. */
        {"models/transformer/1/model.onnx", 1e-3, 1e-4},
    };
    static const int64_t batches[] = {1, 8, 64};
    rig_t r;
    rig_open(&r, cpu_threads());
    for (size_t i = 0; i < N_OF(models); i++) {
        tol_t tol = {.rtol = models[i].rtol, .atol = models[i].atol, .exact = !r.dut.cuda};
        model_compare(&r, models[i].path, batches, N_OF(batches), &tol);
    }
    rig_close(&r);
}

/* ONNX's light models (backend/test/data/light): the classic CNNs with
 * every weight a ConstantOfShape, fixed input shapes. */
Test(cuda_consistency, light_models_match_the_cpu)
{
    /* Tolerances per model, and why. Every one is a deep chain of
     * convolutions whose K-term sums (K up to 4608) the GPU orders
     * differently; the chain compounds ~1e-6 per layer, the softmax at the
     * end compresses it again. */
    static const struct {
        const char *name;
        double rtol, atol;
        /* Seconds per CPU run or more (hundreds of MB of weights folded
         * at load, VGG's 20 GFLOP): the GPU run covers them, CPU against
         * CPU leaves them out to stay fast. */
        bool heavy;
    } light[] = {
        {"light_bvlc_alexnet", 1e-3, 1e-5, true}, /* 8 layers, FC K = 9216 */
        {"light_zfnet512", 1e-3, 1e-5, true},     /* 8 layers, FC K = 9216 */
        {"light_vgg19", 1e-3, 1e-5, true},        /* 19 layers, FC K = 25088 */
        {"light_squeezenet", 1e-3, 1e-5, false},  /* 26 convs, Concat fire modules */
        {"light_inception_v1", 2e-3, 1e-5, false}, /* 57 convs in parallel branches, LRN */
        {"light_inception_v2", 2e-3, 1e-5, false}, /* 69 convs with BatchNormalization */
        {"light_resnet50", 2e-3, 1e-5, false},    /* 53 convs, residual adds */
        {"light_shufflenet", 2e-3, 1e-5, false},  /* grouped convs and channel shuffles */
        {"light_densenet121", 5e-3, 1e-5, false}, /* 120 convs, each reading every earlier map */
    };
    rig_t r;
    rig_open(&r, cpu_threads());
    const char *root = getenv("FLATSERVE_ONNX_TESTS");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/light", root && root[0] ? root : "../shared/onnx-tests");
    DIR *dp = opendir(dir);
    if (!dp) {
        rig_close(&r);
        cr_skip_test("no light models at %s (set FLATSERVE_ONNX_TESTS)", dir);
    }
    char *names[64];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dp)) && n < N_OF(names);) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".onnx") == 0)
            cr_assert(names[n++] = strdup(e->d_name));
    }
    closedir(dp);
    qsort(names, n, sizeof *names, (int (*)(const void *, const void *))strcmp) ;
    static const int64_t batch[] = {1};
    for (size_t i = 0; i < n; i++) {
        /* A model not in the table gets the loosest tolerance listed. */
        tol_t tol = {.rtol = 5e-3, .atol = 1e-5, .exact = !r.dut.cuda};
        bool heavy = false;
        for (size_t k = 0; k < N_OF(light); k++)
            if (strncmp(names[i], light[k].name, strlen(light[k].name)) == 0 &&
                strcmp(names[i] + strlen(light[k].name), ".onnx") == 0) {
                tol.rtol = light[k].rtol;
                tol.atol = light[k].atol;
                heavy = light[k].heavy;
            }
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (heavy && !r.dut.cuda)
            cr_log_info("%s: left out of CPU against CPU (seconds per run)", names[i]);
        else
            model_compare(&r, path, batch, 1, &tol);
        free(names[i]);
    }
    cr_expect_gt(n, 0, "no .onnx files in %s", dir);
    rig_close(&r);
}

/* ---- memory ------------------------------------------------------------ */

/* The cache's rounding (alloc/cache.c): 512-byte units, 512 at least. */
static size_t cache_rounded(size_t bytes)
{
    if (bytes < ALLOC_MIN_BLOCK_BYTES)
        return ALLOC_MIN_BLOCK_BYTES;
    return (bytes + ALLOC_MIN_BLOCK_BYTES - 1) / ALLOC_MIN_BLOCK_BYTES * ALLOC_MIN_BLOCK_BYTES;
}

/* x[4,513] -> MatMul W1[513,600] -> Relu -> MatMul W2[600,99] -> Add b[99]
 * -> Reshape to [12,33]: one weight in the large pool (> 1 MiB), the rest
 * small, none a multiple of 512 bytes, nothing to fold. */
Test(cuda_consistency, weights_are_counted_to_the_model_and_all_come_back)
{
    rig_t r;
    rig_open(&r, 1);
    static const char *const inits[] = {"=f32[513,600]", "=f32[600,99]", "=f32[99]",
                                        "=i64[2]{-1,33}"};
    static const char *const names[] = {"w1", "w2", "b", "shape"};
    mb_t b;
    mb_init(&b, OC_IR_VERSION, 13);
    size_t want_alloc = 0, want_req = 0;
    for (size_t i = 0; i < N_OF(inits); i++) {
        spec_t s;
        spec_parse(inits[i], &s);
        Onnx__TensorProto *tp = spec_proto(&b, names[i], &s, i + 1);
        mb_initializer(&b, tp);
        want_req += tp->raw_data.len;
        want_alloc += cache_rounded(tp->raw_data.len);
    }
    /* cuBLAS's workspace (on CUDA) is working memory, counted to the
     * model's activations owner, not to its weights. */
    mb_input(&b, "x", ENG_DT_FLOAT, 2, (int64_t[]){4, 513}, NULL);
    mb_node(&b, "MatMul", "mm1", "x,w1", "h");
    mb_node(&b, "Relu", "relu", "h", "hr");
    mb_node(&b, "MatMul", "mm2", "hr,w2", "z");
    mb_node(&b, "Add", "add", "z,b", "zb");
    mb_node(&b, "Reshape", "reshape", "zb,shape", "y");
    mb_output(&b, "y", ENG_DT_FLOAT, -1, NULL);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);

    alloc_cache_stats_t before, st;
    alloc_cache_stats(r.dev_cache, &before);
    eng_model_t *m = NULL;
    eng_model_config_t cfg = rig_config(&r, true);
    cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &m), 0, "%s", fs_errmsg());
    cr_expect_str_eq(eng_model_device(m), r.dut.name);
    alloc_owner_t owner = eng_model_owner(m);
    alloc_owner_stats_t os;
    cr_assert_eq(alloc_cache_owner_stats(r.dev_cache, owner, &os), 0, "%s", fs_errmsg());
    cr_expect_eq(os.allocated.current, (int64_t)want_alloc,
                 "owner '%s' holds %lld bytes, the weights rounded as the cache rounds are %zu",
                 os.name, (long long)os.allocated.current, want_alloc);
    cr_expect_eq(os.requested.current, (int64_t)want_req, "owner '%s' asked for %lld bytes, the "
                 "weights are %zu", os.name, (long long)os.requested.current, want_req);

    eng_tensor_t *x = NULL, *out[1] = {NULL};
    spec_t xs = {.dt = ENG_DT_FLOAT, .shape = {2, {4, 513}}, .n_vals = -1};
    x = spec_tensor(&xs, 99);
    cr_expect_eq(eng_model_run(m, x, 1, out), 0, "%s", fs_errmsg());
    cr_expect(out[0] && out[0]->shape.rank == 2 && out[0]->shape.dims[0] == 12);
    eng_tensor_free(out[0]);
    eng_tensor_free(x);
    eng_model_destroy(m);
    fs_err_clear();
    cr_expect_eq(alloc_cache_owner_stats(r.dev_cache, owner, &os), FS_EINVAL,
                 "the model's owner outlives the model");
    rig_expect_idle(&r, "the weights model");
    alloc_cache_empty(r.dev_cache, ALLOC_RELEASE_EMPTY);
    alloc_cache_stats(r.dev_cache, &st);
    cr_expect_eq(st.reserved.current, before.reserved.current,
                 "reserved %lld bytes after empty, %lld before the load",
                 (long long)st.reserved.current, (long long)before.reserved.current);
    mb_free(&b);
    rig_close(&r);
}

/* ---- errors ------------------------------------------------------------ */

/* A Relu model's bytes (freed by mb_free). */
static uint8_t *relu_model(mb_t *b, size_t *len)
{
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "x", ENG_DT_FLOAT, 1, (int64_t[]){4}, NULL);
    mb_node(b, "Relu", "relu", "x", "y");
    mb_output(b, "y", ENG_DT_FLOAT, -1, NULL);
    return mb_pack(b, len);
}

/* Loads the Relu model with `cfg` and expects `code`, a message holding
 * `needle`, no model, and every cache idle. */
static void expect_load_fails(rig_t *r, const eng_model_config_t *cfg, int code,
                              const char *needle)
{
    mb_t b;
    size_t len;
    uint8_t *bytes = relu_model(&b, &len);
    eng_model_t *m = NULL;
    char dev[ENG_DEVICE_NAME_MAX];
    eng_device_name(&cfg->device, dev, sizeof dev);
    fs_err_clear();
    int rc = eng_model_load_bytes(bytes, len, NULL, cfg, &m);
    cr_expect_eq(rc, code, "device '%s': %s, expected %s (%s)", dev, fs_errname(rc),
                 fs_errname(code), fs_errmsg());
    cr_expect(strstr(fs_errmsg(), needle), "device '%s': the message '%s' does not say '%s'",
              dev, fs_errmsg(), needle);
    cr_expect_null(m);
    eng_model_destroy(m);
    mb_free(&b);
    rig_expect_idle(r, dev);
}

Test(cuda_consistency, an_unknown_device_is_einval)
{
    eng_device_t d = {ENG_DEVICE_CUDA, 7};
    cr_expect_eq(eng_device_parse("tpu", &d), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "tpu"), "%s", fs_errmsg());
    cr_expect_eq(d.kind, ENG_DEVICE_CUDA, "a failed parse leaves the device as it was");
    cr_expect_eq(eng_device_parse("cuda:1024", &d), FS_EINVAL);
    cr_expect_eq(eng_device_parse("cuda:3", &d), 0);
    cr_expect(d.kind == ENG_DEVICE_CUDA && d.index == 3);
    char name[ENG_DEVICE_NAME_MAX];
    cr_expect_str_eq(eng_device_name(&d, name, sizeof name), "cuda:3");
    cr_expect_eq(eng_device_parse(NULL, &d), 0);
    cr_expect_str_eq(eng_device_name(&d, name, sizeof name), "cpu");
}

/* The tests below need a GPU under test: a CUDA cache to misuse. */
static void rig_open_cuda(rig_t *r)
{
    rig_open(r, 1);
    if (!r->dut.cuda) {
        rig_close(r);
        cr_skip_test("needs a CUDA device under test (FLATSERVE_CONSISTENCY_DEVICE is cpu)");
    }
}

Test(cuda_consistency, a_missing_cuda_device_is_enodev)
{
    rig_t r;
    rig_open_cuda(&r);
    eng_model_config_t cfg = rig_config(&r, true);
    cfg.device = (eng_device_t){ENG_DEVICE_CUDA, 99};
    expect_load_fails(&r, &cfg, FS_ENODEV, "99");
    rig_close(&r);
}

Test(cuda_consistency, a_cpu_model_over_a_cuda_cache_is_einval)
{
    rig_t r;
    rig_open_cuda(&r);
    eng_model_config_t cfg = rig_config(&r, true);
    cfg.device = (eng_device_t){ENG_DEVICE_CPU, 0};
    expect_load_fails(&r, &cfg, FS_EINVAL, r.dut.name);
    rig_close(&r);
}

Test(cuda_consistency, a_cuda_model_over_a_host_cache_is_einval)
{
    rig_t r;
    rig_open_cuda(&r);
    eng_model_config_t cfg = rig_config(&r, true);
    cfg.cache = r.ref_cache;
    expect_load_fails(&r, &cfg, FS_EINVAL, "host");
    rig_close(&r);
}

/* ---- control flow -------------------------------------------------------- */

/* Control-flow models (If, Loop, Scan) built in memory: the subgraphs run
 * on the device with their constants uploaded at load, the conditions
 * read back from device values, the scan slices and stacks kept on the
 * device. */

/* A float initializer of the current graph with values i * step - 1. */
static void flow_weight(mb_t *b, const char *name, int rank, const int64_t *dims, float step)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    float *v = mb_alloc(b, (size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)i * step - 1.0f;
    Onnx__TensorProto *t = mb_tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims);
    mb_floats(b, t, v, (size_t)n);
    mb_initializer(b, t);
}

/* A float scalar initializer of the current graph. */
static void flow_scalar(mb_t *b, const char *name, float v)
{
    Onnx__TensorProto *t = mb_tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL);
    mb_floats(b, t, &v, 1);
    mb_initializer(b, t);
}

#define FLOW_F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define FLOW_B ONNX__TENSOR_PROTO__DATA_TYPE__BOOL
#define FLOW_I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* y = If(c) then Relu(x) + k else (If(sum(x) > 0) then Tanh(x) else -x):
 * the inner condition is computed on the device. */
static void flow_build_if(mb_t *b)
{
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "c", FLOW_B, 0, NULL, NULL);
    mb_input(b, "x", FLOW_F, 2, (int64_t[]){4, 37}, NULL);
    Onnx__NodeProto *n = mb_node(b, "If", "if", "c", "y");
    mb_begin_g(b, n, "then_branch");
    flow_weight(b, "k", 1, (int64_t[]){37}, 0.05f);
    mb_node(b, "Relu", "relu", "x", "r");
    mb_node(b, "Add", "add", "r,k", "t");
    mb_output(b, "t", FLOW_F, 2, (int64_t[]){4, 37});
    mb_end_g(b);
    mb_begin_g(b, n, "else_branch");
    flow_scalar(b, "zero", 0.0f);
    mb_attr_i(b, mb_node(b, "ReduceSum", "sum", "x", "s"), "keepdims", 0);
    mb_node(b, "Greater", "gt", "s,zero", "g");
    Onnx__NodeProto *inner = mb_node(b, "If", "inner", "g", "e");
    mb_begin_g(b, inner, "then_branch");
    mb_node(b, "Tanh", "tanh", "x", "th");
    mb_output(b, "th", FLOW_F, 2, (int64_t[]){4, 37});
    mb_end_g(b);
    mb_begin_g(b, inner, "else_branch");
    mb_node(b, "Neg", "neg", "x", "ng");
    mb_output(b, "ng", FLOW_F, 2, (int64_t[]){4, 37});
    mb_end_g(b);
    mb_output(b, "e", FLOW_F, 2, (int64_t[]){4, 37});
    mb_end_g(b);
    mb_output(b, "y", FLOW_F, 2, (int64_t[]){4, 37});
}

/* Loop(M, c0, s0): s = 0.9 s + |x|; w = s W (W a body weight too large
 * for the host to keep); scan outputs w and sum(s) * i; the condition is
 * i < 2.5, computed on the device, so 4 of the 5 iterations run. */
static void flow_build_loop(mb_t *b)
{
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "M", FLOW_I64, 0, NULL, NULL);
    mb_input(b, "c0", FLOW_B, 0, NULL, NULL);
    mb_input(b, "s0", FLOW_F, 2, (int64_t[]){8, 16}, NULL);
    mb_input(b, "x", FLOW_F, 2, (int64_t[]){8, 16}, NULL);
    Onnx__NodeProto *n = mb_node(b, "Loop", "loop", "M,c0,s0", "s,ws,sums");
    mb_begin_g(b, n, "body");
    mb_input(b, "i", FLOW_I64, 0, NULL, NULL);
    mb_input(b, "c_in", FLOW_B, 0, NULL, NULL);
    mb_input(b, "s_in", FLOW_F, 2, (int64_t[]){8, 16}, NULL);
    flow_weight(b, "W", 2, (int64_t[]){16, 24}, 0.004f);
    flow_scalar(b, "decay", 0.9f);
    flow_scalar(b, "lim", 2.5f);
    mb_node(b, "Abs", "abs", "x", "ax");
    mb_node(b, "Mul", "mul", "s_in,decay", "sd");
    mb_node(b, "Add", "add", "sd,ax", "s_out");
    mb_node(b, "MatMul", "mm", "s_out,W", "w");
    Onnx__NodeProto *cast = mb_node(b, "Cast", "cast", "i", "fi");
    mb_attr_i(b, cast, "to", FLOW_F);
    mb_node(b, "Less", "less", "fi,lim", "c_out");
    mb_attr_i(b, mb_node(b, "ReduceSum", "sum", "s_out", "ss"), "keepdims", 0);
    mb_node(b, "Mul", "scale", "ss,fi", "sum_i");
    mb_output(b, "c_out", FLOW_B, 0, NULL);
    mb_output(b, "s_out", FLOW_F, 2, (int64_t[]){8, 16});
    mb_output(b, "w", FLOW_F, 2, (int64_t[]){8, 24});
    mb_output(b, "sum_i", FLOW_F, 0, NULL);
    mb_end_g(b);
    mb_output(b, "s", FLOW_F, 2, (int64_t[]){8, 16});
    mb_output(b, "ws", FLOW_F, 3, (int64_t[]){-1, 8, 24});
    mb_output(b, "sums", FLOW_F, 1, (int64_t[]){-1});
}

/* Scan over x [3,7,5] along axis 1 in reverse: h = tanh(h W + x_t),
 * y_t = h * x_t stacked along axis 1. */
static void flow_build_scan(mb_t *b)
{
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "h0", FLOW_F, 2, (int64_t[]){3, 5}, NULL);
    mb_input(b, "x", FLOW_F, 3, (int64_t[]){3, 7, 5}, NULL);
    Onnx__NodeProto *n = mb_node(b, "Scan", "scan", "h0,x", "h,ys");
    mb_attr_i(b, n, "num_scan_inputs", 1);
    mb_attr_ints(b, n, "scan_input_axes", (int64_t[]){1}, 1);
    mb_attr_ints(b, n, "scan_input_directions", (int64_t[]){1}, 1);
    mb_attr_ints(b, n, "scan_output_axes", (int64_t[]){1}, 1);
    mb_begin_g(b, n, "body");
    mb_input(b, "h_in", FLOW_F, 2, (int64_t[]){3, 5}, NULL);
    mb_input(b, "xt", FLOW_F, 2, (int64_t[]){3, 5}, NULL);
    flow_weight(b, "W", 2, (int64_t[]){5, 5}, 0.08f);
    mb_node(b, "MatMul", "mm", "h_in,W", "hw");
    mb_node(b, "Add", "add", "hw,xt", "pre");
    mb_node(b, "Tanh", "tanh", "pre", "h_out");
    mb_node(b, "Mul", "mul", "h_out,xt", "y");
    mb_output(b, "h_out", FLOW_F, 2, (int64_t[]){3, 5});
    mb_output(b, "y", FLOW_F, 2, (int64_t[]){3, 5});
    mb_end_g(b);
    mb_output(b, "h", FLOW_F, 2, (int64_t[]){3, 5});
    mb_output(b, "ys", FLOW_F, 3, (int64_t[]){3, 7, 5});
}

typedef struct flow_case {
    const char *desc;
    void (*build)(mb_t *b);
    const char *in[OC_MAX_IN];
    int n_in, n_out;
    int64_t iterations;        /* > 0: the length output 1 must have (a Loop's scan) */
} flow_case_t;

/* Loads c's model on both sides, runs it on the same inputs, compares. */
static void flow_compare(rig_t *r, const flow_case_t *c)
{
    mb_t b;
    c->build(&b);
    size_t len;
    uint8_t *bytes = mb_pack(&b, &len);
    eng_model_t *ref = NULL, *dev = NULL;
    eng_model_config_t rcfg = rig_config(r, false), dcfg = rig_config(r, true);
    int rc = eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref);
    cr_expect_eq(rc, 0, "%s: loading on the CPU: %s", c->desc, fs_errmsg());
    if (rc == 0) {
        rc = eng_model_load_bytes(bytes, len, NULL, &dcfg, &dev);
        cr_expect_eq(rc, 0, "%s: loading on %s: %s", c->desc, r->dut.name, fs_errmsg());
    }
    eng_tensor_t *owned[OC_MAX_IN] = {NULL}, views[OC_MAX_IN];
    for (int i = 0; i < c->n_in; i++) {
        spec_t s;
        spec_parse(c->in[i], &s);
        char what[160];
        snprintf(what, sizeof what, "%s/%d", c->desc, i);
        owned[i] = spec_tensor(&s, fnv1a(what));
        views[i] = *owned[i];
    }
    eng_tensor_t *want[OC_MAX_OUT] = {NULL}, *got[OC_MAX_OUT] = {NULL};
    if (rc == 0) {
        rc = eng_model_run(ref, views, (size_t)c->n_in, want);
        cr_expect_eq(rc, 0, "%s: running on the CPU: %s", c->desc, fs_errmsg());
    }
    if (rc == 0) {
        rc = eng_model_run(dev, views, (size_t)c->n_in, got);
        cr_expect_eq(rc, 0, "%s: running on %s: %s", c->desc, r->dut.name, fs_errmsg());
    }
    if (rc == 0 && c->iterations > 0)
        cr_expect_eq(want[1]->shape.dims[0], c->iterations, "%s: %lld iterations, want %lld",
                     c->desc, (long long)want[1]->shape.dims[0], (long long)c->iterations);
    tol_t tol = {.rtol = OC_RTOL, .atol = OC_ATOL, .exact = !r->dut.cuda};
    for (int j = 0; rc == 0 && j < c->n_out; j++) {
        char what[160];
        snprintf(what, sizeof what, "%s output %d", c->desc, j);
        expect_tensor_match(what, want[j], got[j], &tol);
    }
    outputs_free(want, c->n_out);
    outputs_free(got, c->n_out);
    for (int i = 0; i < c->n_in; i++)
        eng_tensor_free(owned[i]);
    eng_model_destroy(dev);
    eng_model_destroy(ref);
    mb_free(&b);
    rig_expect_idle(r, c->desc);
}

Test(cuda_consistency, control_flow_models_match_the_cpu)
{
    static const flow_case_t cases[] = {
        {"If then", flow_build_if, {"bool[]{1}", "f32[4,37]"}, 2, 1, 0},
        {"If else, inner If on a device sum", flow_build_if, {"bool[]{0}", "f32[4,37]"}, 2, 1, 0},
        {"If else, inner else", flow_build_if, {"bool[]{0}", "f32[4,37]:r(-2,-1)"}, 2, 1, 0},
        {"Loop stopped by its condition", flow_build_loop,
         {"i64[]{5}", "bool[]{1}", "f32[8,16]", "f32[8,16]"}, 4, 3, 4},
        {"Loop stopped by its trip count", flow_build_loop,
         {"i64[]{2}", "bool[]{1}", "f32[8,16]", "f32[8,16]"}, 4, 3, 2},
        {"Scan reverse along axis 1", flow_build_scan, {"f32[3,5]", "f32[3,7,5]"}, 2, 2, 0},
    };
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++)
        flow_compare(&r, &cases[i]);
    rig_close(&r);
}

/* ---- precision --------------------------------------------------------- */

/* ||got - want|| / ||want|| over two float tensors of one shape (the
 * absolute norm when want is all zeros); NAN when got holds a NaN or an
 * infinity, or the two differ in dtype or shape. */
static double rel_l2_error(const eng_tensor_t *want, const eng_tensor_t *got)
{
    if (!want || !got || want->dtype != ENG_DT_FLOAT || got->dtype != ENG_DT_FLOAT ||
        !eng_shape_equal(&want->shape, &got->shape))
        return NAN;
    const float *w = want->data, *g = got->data;
    double num = 0, den = 0;
    for (int64_t i = 0, n = eng_shape_numel(&want->shape); i < n; i++) {
        if (!isfinite(g[i]))
            return NAN;
        double d = (double)g[i] - (double)w[i];
        num += d * d;
        den += (double)w[i] * (double)w[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Loads `path` on the device under test at `precision` (its owner named
 * after it), and the bytes its owner holds right after the load: weights,
 * folded constants and cuBLAS's workspace. NULL when the load failed (an
 * expectation says why). */
static eng_model_t *precision_load(rig_t *r, const char *path, const char *precision,
                                   int64_t *owner_bytes)
{
    char name[32];
    snprintf(name, sizeof name, "precision-%s", precision);
    eng_model_config_t cfg = rig_config(r, true);
    cfg.name = name;
    cr_assert_eq(eng_precision_parse(precision, &cfg.precision), 0, "%s", fs_errmsg());
    eng_model_t *m = NULL;
    int rc = eng_model_load(path, &cfg, &m);
    cr_expect_eq(rc, 0, "%s: loading on %s at %s: %s", path, r->dut.name, precision,
                 fs_errmsg());
    *owner_bytes = 0;
    alloc_owner_stats_t os;
    if (rc == 0 && alloc_cache_owner_stats(r->dev_cache, eng_model_owner(m), &os) == 0)
        *owner_bytes = os.allocated.current;
    return rc == 0 ? m : NULL;
}

/* One model at one low precision, against its fp32 outputs `want` on the
 * same inputs: prints the largest relative L2 error over the float outputs
 * and the owners' bytes, and checks the bound, finiteness (unless
 * `may_overflow` and the output is not finite: then it only says so) and
 * that the owner holds less than fp32's. */
static void precision_check(rig_t *r, const char *path, int64_t batch, const char *precision,
                            double bound, bool may_overflow, const eng_tensor_t *views,
                            size_t n_in, eng_tensor_t *const *want, size_t n_out,
                            int64_t ref_bytes)
{
    int64_t bytes = 0;
    eng_model_t *m = precision_load(r, path, precision, &bytes);
    eng_tensor_t *got[OC_MAX_OUT] = {NULL};
    int rc = m ? eng_model_run(m, views, n_in, got) : -1;
    if (m)
        cr_expect_eq(rc, 0, "%s: running at %s: %s", path, precision, fs_errmsg());
    double worst = 0;
    size_t at = 0;
    for (size_t j = 0; rc == 0 && j < n_out && !isnan(worst); j++) {
        if (want[j]->dtype != ENG_DT_FLOAT)
            continue;
        double e = rel_l2_error(want[j], got[j]);
        if (isnan(e) || e > worst) {
            worst = e;
            at = j;
        }
    }
    if (rc == 0) {
        fprintf(stderr, "precision: %s batch %lld %s: relative L2 error vs fp32 %.3e (output %zu);"
                " owner %.2f MB, fp32 %.2f MB\n", path, (long long)batch, precision, worst, at,
                (double)bytes / 1048576.0, (double)ref_bytes / 1048576.0);
        if (isnan(worst) && may_overflow)
            cr_log_info("%s at %s: output %zu is not finite: the activations outgrow the "
                        "format's range (expected for this model)", path, precision, at);
        else
            cr_expect(!isnan(worst), "%s at %s: output %zu is not finite or not shaped as "
                      "fp32's", path, precision, at);
        cr_expect(isnan(worst) || worst < bound, "%s at %s: relative L2 error %.3e vs fp32 "
                  "(output %zu), bound %.0e", path, precision, worst, at, bound);
        cr_expect_lt(bytes, ref_bytes, "%s at %s: the owner holds %lld bytes, not below fp32's "
                     "%lld (are the GEMM weights stored at half size?)", path, precision,
                     (long long)bytes, (long long)ref_bytes);
    }
    outputs_free(got, (int)n_out);
    eng_model_destroy(m);
}

/* Runs `path` at fp32 on the device, then checks fp16 and bf16 against it
 * on the same random inputs (values in [-1, 1) for floats). */
static void precision_compare(rig_t *r, const char *path, int64_t batch, bool fp16_may_overflow)
{
    static const struct {
        const char *name;
        double bound;
    } lowp[] = {{"fp16", 5e-3}, {"bf16", 3e-2}};
    int64_t ref_bytes = 0;
    eng_model_t *ref = precision_load(r, path, "fp32", &ref_bytes);
    size_t n_in = ref ? eng_model_n_inputs(ref) : 0, n_out = ref ? eng_model_n_outputs(ref) : 0;
    if (!ref || n_in > OC_MAX_IN || n_out > OC_MAX_OUT) {
        cr_expect(!ref, "%s: %zu inputs, %zu outputs: too many for this harness", path, n_in,
                  n_out);
        eng_model_destroy(ref);
        return;
    }
    eng_tensor_t *owned[OC_MAX_IN] = {NULL}, views[OC_MAX_IN];
    eng_tensor_t *want[OC_MAX_OUT] = {NULL};
    for (size_t i = 0; i < n_in; i++) {
        eng_io_info_t info;
        cr_assert_eq(eng_model_input(ref, i, &info), 0);
        cr_assert_geq(info.rank, 0, "%s: input '%s' has no declared rank", path, info.name);
        spec_t s = {.dt = info.dtype, .dist = DIST_RANGE, .lo = -1.0, .hi = 1.0, .n_vals = -1,
                    .shape.rank = info.rank};
        if (!dtype_is_float(info.dtype))
            s.dist = DIST_DEFAULT;
        for (int d = 0; d < info.rank; d++)
            s.shape.dims[d] = info.dims[d] < 0 ? batch : info.dims[d];
        char what[1300];
        snprintf(what, sizeof what, "%.1200s/precision/%zu", path, i);
        owned[i] = spec_tensor(&s, fnv1a(what));
        views[i] = *owned[i];
    }
    int rc = eng_model_run(ref, views, n_in, want);
    cr_expect_eq(rc, 0, "%s: running at fp32: %s", path, fs_errmsg());
    for (size_t p = 0; rc == 0 && p < N_OF(lowp); p++)
        precision_check(r, path, batch, lowp[p].name, lowp[p].bound,
                        fp16_may_overflow && strcmp(lowp[p].name, "fp16") == 0, views, n_in,
                        want, n_out, ref_bytes);
    outputs_free(want, (int)n_out);
    for (size_t i = 0; i < n_in; i++)
        eng_tensor_free(owned[i]);
    eng_model_destroy(ref);
    rig_expect_idle(r, path);
}

/* fp16 and bf16 against fp32 on the device: the demo models at batch 8
 * and, when present, light_resnet50 and light_squeezenet at batch 1. One
 * line per (model, precision) on stderr with the error and the owners'
 * bytes.
 *
 * Bounds: fp16 rounds both operands of every GEMM with a weight to 11
 * significant bits (relative 2^-12 each) and bf16 to 8 (2^-9), every sum
 * in fp32; the layers' rounding errors are independent, so a few to ~50
 * layers stay well under 5e-3 (fp16) and 3e-2 (bf16) relative L2. (The
 * same rounding emulated on the CPU gave, at batch 8: mlp 3e-5 / 2e-4,
 * cnn 4e-5 / 2e-4, transformer 1.3e-4 / 1.1e-3.) The outputs must be
 * finite and the half-size weights must show in the owner's bytes.
 *
 * ONNX's light models hold every weight as one repeated constant, so their
 * activations grow layer after layer: on the CPU up to 2.8e17 reach
 * resnet50's GEMMs and 1.2e9 squeezenet's, far past fp16's 65504. In fp16
 * they overflow to infinity and the output is NaN, as under PyTorch's fp16
 * autocast; that is reported, not failed (a finite fp16 output must still
 * meet the bound). bf16 has fp32's range. Their fp32 output is the uniform
 * 1/1000 softmax, so their errors say little. */
Test(cuda_consistency, precision_error_is_bounded)
{
    static const char *const demo[] = {"models/mlp/1/model.onnx", "models/cnn/1/model.onnx",
                                       "models/transformer/1/model.onnx"};
    static const char *const light[] = {"light_resnet50", "light_squeezenet"};
    rig_t r;
    rig_open_cuda(&r);
    for (size_t i = 0; i < N_OF(demo); i++)
        precision_compare(&r, demo[i], 8, false);
    const char *root = getenv("FLATSERVE_ONNX_TESTS");
    for (size_t i = 0; i < N_OF(light); i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/light/%s.onnx",
                 root && root[0] ? root : "../shared/onnx-tests", light[i]);
        if (access(path, R_OK) == 0)
            precision_compare(&r, path, 1, true);
        else
            cr_log_info("%s: not there, left out", path);
    }
    rig_close(&r);
}

/* ---- fused attention (K read transposed) ----------------------------- */

/* The chain BERT's dynamo export leaves once its K chain is K^T itself:
 * Q [b, 12, n, 64], Kt [b, 12, 64, n] (a graph input, so the fused node
 * reads it through trans_b: attention_impl.h's k_dstride), V [b, 12, n,
 * 64] and an additive mask M [b, 1, 1, n]; S = MatMul(Q, Kt) / 8, X = M +
 * S, P = Softmax(X), Y = MatMul(P, V). Every intermediate is declared, as
 * the fusion needs. n is BERT's 128 or ViT-B/16's 197 (K^T rows no
 * multiple of 8: attention_flash.cu unpacks K first). Caller frees b with
 * mb_free. */
static uint8_t *fused_attn_model(mb_t *b, int64_t n, size_t *len)
{
    static const char *const sym[4] = {"b", NULL, NULL, NULL};
    const int64_t qd[4] = {-1, 12, n, 64}, ktd[4] = {-1, 12, 64, n}, md[4] = {-1, 1, 1, n},
                  sd[4] = {-1, 12, n, n};
    mb_init(b, OC_IR_VERSION, 17);
    mb_input(b, "Q", ENG_DT_FLOAT, 4, qd, sym);
    mb_input(b, "Kt", ENG_DT_FLOAT, 4, ktd, sym);
    mb_input(b, "V", ENG_DT_FLOAT, 4, qd, sym);
    mb_input(b, "M", ENG_DT_FLOAT, 4, md, sym);
    spec_t d;
    spec_parse("=f32[]{8.0}", &d);
    mb_initializer(b, spec_proto(b, "d", &d, 1));
    mb_node(b, "MatMul", "qk", "Q,Kt", "S0");
    mb_node(b, "Div", "div", "S0,d", "S");
    mb_node(b, "Add", "add", "M,S", "X");
    mb_attr_i(b, mb_node(b, "Softmax", "softmax", "X", "P"), "axis", -1);
    mb_node(b, "MatMul", "pv", "P,V", "Y");
    static const char *const inter[] = {"S0", "S", "X", "P"};
    for (size_t i = 0; i < N_OF(inter); i++)
        b->infos[b->graph.n_value_info++] = mb_vi(b, inter[i], ENG_DT_FLOAT, 4, sd, sym);
    mb_output(b, "Y", ENG_DT_FLOAT, 4, qd);
    return mb_pack(b, len);
}

/* The fused Attention node with K read transposed at fp16 and bf16
 * (attention_flash.cu's register kernel, its K^T tiles loaded along the
 * keys; at 197 keys K unpacked into scratch first) against the fp32 chain
 * on the CPU, at batch 1 (24 query tiles of 64: the kernel takes
 * 16-query blocks) and 12 (288: 64-query ones), with
 * precision_error_is_bounded's bounds; the fused plan must have fewer
 * steps than the chain's on the device, or the fusion did not happen. */
static void fused_attn_compare(rig_t *r, int64_t n)
{
    static const struct {
        const char *name;
        double bound;
    } lowp[] = {{"fp16", 5e-3}, {"bf16", 3e-2}};
    static const int64_t batches[] = {1, 12};
    mb_t b;
    size_t len;
    uint8_t *bytes = fused_attn_model(&b, n, &len);
    eng_model_config_t rcfg = rig_config(r, false);
    eng_model_t *ref = NULL;
    cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref), 0, "CPU: %s",
                 fs_errmsg());
    for (size_t bi = 0; bi < N_OF(batches); bi++) {
        const int64_t bn = batches[bi];
        eng_shape_t shapes[4] = {{4, {bn, 12, n, 64}}, {4, {bn, 12, 64, n}},
                                 {4, {bn, 12, n, 64}}, {4, {bn, 1, 1, n}}};
        eng_tensor_t *owned[4], views[4], *want[1] = {NULL};
        for (int i = 0; i < 4; i++) {
            spec_t s = {.dt = ENG_DT_FLOAT, .dist = DIST_RANGE, .lo = -1.0, .hi = 1.0,
                        .n_vals = -1, .shape = shapes[i]};
            char what[64];
            snprintf(what, sizeof what, "fused-attention/%lld/%lld/%d", (long long)n,
                     (long long)bn, i);
            owned[i] = spec_tensor(&s, fnv1a(what));
            views[i] = *owned[i];
        }
        cr_expect_eq(eng_model_run(ref, views, 4, want), 0, "CPU, batch %lld: %s",
                     (long long)bn, fs_errmsg());
        for (size_t p = 0; want[0] && p < N_OF(lowp); p++) {
            eng_model_t *m[2] = {NULL, NULL}; /* chain, fused */
            eng_plan_info_t info[2] = {{0}, {0}};
            for (int f = 0; f < 2; f++) {
                eng_model_config_t cfg = rig_config(r, true);
                cr_assert_eq(eng_precision_parse(lowp[p].name, &cfg.precision), 0);
                cfg.attention = f ? ENG_ATTN_FUSION_FUSED : ENG_ATTN_FUSION_CHAIN;
                cr_expect_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &m[f]), 0,
                             "%s, %s: %s", lowp[p].name, f ? "fused" : "chain", fs_errmsg());
                if (m[f])
                    cr_expect_eq(eng_model_plan_info(m[f], shapes, 4, &info[f]), 0, "%s",
                                 fs_errmsg());
            }
            cr_expect_lt(info[1].n_steps, info[0].n_steps,
                         "%s: the fused plan has %zu steps, the chain's %zu: not fused?",
                         lowp[p].name, info[1].n_steps, info[0].n_steps);
            eng_tensor_t *got[1] = {NULL};
            int rc = m[1] ? eng_model_run(m[1], views, 4, got) : -1;
            cr_expect_eq(rc, 0, "%s, batch %lld: %s", lowp[p].name, (long long)bn, fs_errmsg());
            if (rc == 0) {
                double e = rel_l2_error(want[0], got[0]);
                fprintf(stderr, "fused attention, K^T, %lld keys, batch %lld %s: relative L2 "
                        "error vs fp32 %.3e\n", (long long)n, (long long)bn, lowp[p].name, e);
                cr_expect(!isnan(e) && e < lowp[p].bound, "%s, %lld keys, batch %lld: relative "
                          "L2 error %.3e, bound %.0e", lowp[p].name, (long long)n, (long long)bn,
                          e, lowp[p].bound);
            }
            outputs_free(got, 1);
            eng_model_destroy(m[0]);
            eng_model_destroy(m[1]);
        }
        outputs_free(want, 1);
        for (int i = 0; i < 4; i++)
            eng_tensor_free(owned[i]);
    }
    eng_model_destroy(ref);
    mb_free(&b);
}

Test(cuda_consistency, fused_attention_with_k_transposed_matches_the_cpu)
{
    rig_t r;
    rig_open_cuda(&r);
    fused_attn_compare(&r, 128);
    fused_attn_compare(&r, 197);
    rig_expect_idle(&r, "fused attention");
    rig_close(&r);
}

/* ---- tied embeddings ------------------------------------------------------ */

/* A tied LM head built in memory: W [300, 64] read by Gather(W, ids) -> E
 * (unless `exclusive`) and through Transpose(W) by the head, MatMul(h
 * [2, 5, 64]) or Gemm(h [5, 64]) -> Y. The loader drops the Transpose and
 * the head reads W itself with the GEMM's transpose flag (engine/fuse.c). */
typedef struct tied_cfg {
    const char *desc;
    bool exclusive;   /* no Gather: the head is W's only reader */
    bool gemm;
} tied_cfg_t;

#define TIED_W_BYTES ((size_t)300 * 64 * sizeof(float))

static uint8_t *tied_model(mb_t *b, const tied_cfg_t *t, size_t *len)
{
    mb_init(b, OC_IR_VERSION, 13);
    if (!t->exclusive)
        mb_input(b, "ids", ENG_DT_INT64, 1, (int64_t[]){5}, NULL);
    mb_input(b, "h", ENG_DT_FLOAT, t->gemm ? 2 : 3,
             t->gemm ? (int64_t[]){5, 64} : (int64_t[]){2, 5, 64}, NULL);
    spec_t s;
    spec_parse("=f32[300,64]", &s);
    mb_initializer(b, spec_proto(b, "W", &s, 7));
    mb_attr_ints(b, mb_node(b, "Transpose", "tr", "W", "T"), "perm", (int64_t[]){1, 0}, 2);
    mb_node(b, t->gemm ? "Gemm" : "MatMul", "head", "h,T", "Y");
    mb_output(b, "Y", ENG_DT_FLOAT, -1, NULL);
    if (!t->exclusive) {
        mb_node(b, "Gather", "embed", "W,ids", "E");
        mb_output(b, "E", ENG_DT_FLOAT, -1, NULL);
    }
    return mb_pack(b, len);
}

/* h [2, 5, 48] x Transpose(W [2, 33, 48], perm [0, 2, 1]): a batch of
 * weight matrices, each read transposed (the strided-batched GEMM). */
static void tied_build_batched(mb_t *b)
{
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "h", ENG_DT_FLOAT, 3, (int64_t[]){2, 5, 48}, NULL);
    flow_weight(b, "W", 3, (int64_t[]){2, 33, 48}, 0.0007f);
    mb_attr_ints(b, mb_node(b, "Transpose", "tr", "W", "T"), "perm", (int64_t[]){0, 2, 1}, 3);
    mb_node(b, "MatMul", "mm", "h,T", "Y");
    mb_output(b, "Y", ENG_DT_FLOAT, 3, (int64_t[]){2, 5, 33});
}

/* Loads the bytes on the device under test at `precision`; the device
 * owner's bytes after the load into *owner_bytes. NULL when the load
 * failed (an expectation says why). */
static eng_model_t *tied_load(rig_t *r, const uint8_t *bytes, size_t len, const char *desc,
                              const char *precision, int64_t *owner_bytes)
{
    eng_model_config_t cfg = rig_config(r, true);
    cr_assert_eq(eng_precision_parse(precision, &cfg.precision), 0, "%s", fs_errmsg());
    eng_model_t *m = NULL;
    int rc = eng_model_load_bytes(bytes, len, NULL, &cfg, &m);
    cr_expect_eq(rc, 0, "%s: loading on %s at %s: %s", desc, r->dut.name, precision,
                 fs_errmsg());
    alloc_owner_stats_t os;
    *owner_bytes = -1;
    if (rc == 0 && alloc_cache_owner_stats(r->dev_cache, eng_model_owner(m), &os) == 0)
        *owner_bytes = os.allocated.current;
    return rc == 0 ? m : NULL;
}

/* At fp32 the outputs match the CPU's and the device owner holds W once
 * (W's bytes exactly: nothing else is constant). At fp16 and bf16 (CUDA
 * only; engine/lowp.c lowers the graph) W is held once at half size, tied
 * or not, and the head reads it transposed; Y within
 * precision_error_is_bounded's bounds of fp32. */
Test(cuda_consistency, tied_embedding_is_held_once_and_read_transposed)
{
    static const tied_cfg_t cases[] = {
        {"tied MatMul head", false, false},
        {"MatMul head, W its own", true, false},
        {"tied Gemm head", false, true},
        {"Gemm head, W its own", true, true},
    };
    static const struct {
        const char *name;
        double bound;
    } lowp[] = {{"fp16", 5e-3}, {"bf16", 3e-2}};
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++) {
        const tied_cfg_t *t = &cases[i];
        mb_t b;
        size_t len;
        uint8_t *bytes = tied_model(&b, t, &len);
        const char *in[2] = {"i64[5]", t->gemm ? "f32[5,64]" : "f32[2,5,64]"};
        size_t n_in = 0;
        eng_tensor_t *owned[2] = {NULL}, views[2];
        for (size_t k = t->exclusive ? 1 : 0; k < 2; k++, n_in++) {
            spec_t s;
            spec_parse(in[k], &s);
            char what[160];
            snprintf(what, sizeof what, "%s/%zu", t->desc, k);
            owned[n_in] = spec_tensor(&s, fnv1a(what));
            views[n_in] = *owned[n_in];
        }
        size_t n_out = t->exclusive ? 1 : 2;
        eng_model_t *ref = NULL;
        eng_model_config_t rcfg = rig_config(&r, false);
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref), 0, "%s: %s", t->desc,
                     fs_errmsg());
        eng_tensor_t *want[2] = {NULL}, *got[2] = {NULL};
        cr_assert_eq(eng_model_run(ref, views, n_in, want), 0, "%s: %s", t->desc, fs_errmsg());
        int64_t owner;
        eng_model_t *dev = tied_load(&r, bytes, len, t->desc, "fp32", &owner);
        cr_expect_eq(owner, (int64_t)cache_rounded(TIED_W_BYTES), "%s at fp32: the owner holds "
                     "%lld bytes, W is %zu", t->desc, (long long)owner, TIED_W_BYTES);
        if (dev) {
            cr_expect_eq(eng_model_run(dev, views, n_in, got), 0, "%s: %s", t->desc, fs_errmsg());
            tol_t tol = {.rtol = OC_RTOL, .atol = OC_ATOL, .exact = !r.dut.cuda};
            for (size_t j = 0; j < n_out && got[0]; j++)
                expect_tensor_match(t->desc, want[j], got[j], &tol);
            outputs_free(got, (int)n_out);
            eng_model_destroy(dev);
        }
        for (size_t p = 0; p < N_OF(lowp) && r.dut.cuda; p++) {
            dev = tied_load(&r, bytes, len, t->desc, lowp[p].name, &owner);
            size_t w_bytes = TIED_W_BYTES / 2;
            cr_expect_eq(owner, (int64_t)cache_rounded(w_bytes), "%s at %s: the owner holds "
                         "%lld bytes, want %zu", t->desc, lowp[p].name, (long long)owner,
                         w_bytes);
            if (!dev)
                continue;
            int rc = eng_model_run(dev, views, n_in, got);
            cr_expect_eq(rc, 0, "%s at %s: %s", t->desc, lowp[p].name, fs_errmsg());
            double e = rc == 0 ? rel_l2_error(want[0], got[0]) : NAN;
            fprintf(stderr, "tied: %s at %s: relative L2 error vs fp32 %.3e; owner %lld bytes\n",
                    t->desc, lowp[p].name, e, (long long)owner);
            cr_expect(e < lowp[p].bound, "%s at %s: relative L2 error %.3e, bound %.0e", t->desc,
                      lowp[p].name, e, lowp[p].bound);
            outputs_free(got, (int)n_out);
            eng_model_destroy(dev);
        }
        outputs_free(want, (int)n_out);
        for (size_t k = 0; k < n_in; k++)
            eng_tensor_free(owned[k]);
        eng_model_destroy(ref);
        mb_free(&b);
        rig_expect_idle(&r, t->desc);
    }
    const flow_case_t batched = {"MatMul on a batch of transposed weights", tied_build_batched,
                                 {"f32[2,5,48]"}, 1, 1, 0};
    flow_compare(&r, &batched);
    rig_close(&r);
}

/* ---- fused GEMM epilogues --------------------------------------------------- */

/* One precision's check of a model against the CPU's output want[0]: loads
 * `bytes` on the device under test at precision `prec` (tf32/fp16/bf16 or
 * fp32), runs it twice on in[0..n_in) (the second run a captured CUDA
 * graph's replay); at fp32 the output matches want within `atol` (exactly
 * on the CPU harness), at the others its relative L2 error, printed after
 * `tag`, stays under `bound`. */
static void prec_expect(rig_t *r, const uint8_t *bytes, size_t len, const char *prec,
                        double bound, double atol, const eng_tensor_t *in, size_t n_in,
                        eng_tensor_t *const *want, const char *tag, const char *desc)
{
    eng_model_config_t dcfg = rig_config(r, true);
    cr_assert_eq(eng_precision_parse(prec, &dcfg.precision), 0);
    eng_model_t *dev = NULL;
    int rc = eng_model_load_bytes(bytes, len, NULL, &dcfg, &dev);
    cr_expect_eq(rc, 0, "%s at %s: %s", desc, prec, fs_errmsg());
    eng_tensor_t *got[1] = {NULL};
    for (int run = 0; run < 2 && rc == 0; run++) {
        rc = eng_model_run(dev, in, n_in, got);
        cr_expect_eq(rc, 0, "%s at %s: %s", desc, prec, fs_errmsg());
        if (rc == 0 && strcmp(prec, "fp32") == 0) {
            tol_t tol = {.rtol = OC_RTOL, .atol = atol, .exact = !r->dut.cuda};
            expect_tensor_match(desc, want[0], got[0], &tol);
        } else if (rc == 0) {
            double err = rel_l2_error(want[0], got[0]);
            fprintf(stderr, "%s: %s at %s: relative L2 error vs the CPU %.3e\n", tag, desc, prec,
                    err);
            cr_expect(err < bound, "%s at %s: relative L2 error %.3e, bound %.0e", desc, prec, err,
                      bound);
        }
        outputs_free(got, 1);
    }
    eng_model_destroy(dev);
}

/* X [2, 7, 77] -> MatMul with W [77, 197] (or Transpose of W [197, 77], read
 * transposed; or a Gemm on X [14, 77]) -> Add of a [197] bias -> an
 * activation -> Y: the loader fuses the chain into one GEMM node
 * (engine/fuse_epilogue.c), which the GPU runs as one cuBLASLt call with a
 * bias/Relu/GELU epilogue (engine/cuda/gemm.cu). */
typedef struct ep_model {
    const char *desc;
    const char *act;          /* NULL, "Relu", "Gelu", "GeluTanh" */
    bool bias, gemm, trans_w;
    /* The biased product's skip connection: Add(q, r) with r = MatMul(Relu(x),
     * w) computed first and declared [2, 7, 197], fused as input 3. */
    bool residual;
} ep_model_t;

#define EP_K 77
#define EP_N 197

static uint8_t *ep_model(mb_t *b, const ep_model_t *e, size_t *len)
{
    mb_init(b, OC_IR_VERSION, 20);
    const int64_t xd[3] = {2, 7, EP_K}, yd[3] = {2, 7, EP_N}, xg[2] = {14, EP_K}, yg[2] = {14, EP_N};
    mb_input(b, "x", FLOW_F, e->gemm ? 2 : 3, e->gemm ? xg : xd, NULL);
    float *w = mb_alloc(b, EP_K * EP_N * sizeof *w), bias[EP_N];
    for (int i = 0; i < EP_K * EP_N; i++)
        w[i] = (float)(0.15 * sin(0.37 * i + 0.1));
    for (int i = 0; i < EP_N; i++)
        bias[i] = 0.02f * (float)(i % 29) - 0.3f;
    const int64_t wd[2] = {e->trans_w ? EP_N : EP_K, e->trans_w ? EP_K : EP_N}, bd[1] = {EP_N};
    Onnx__TensorProto *t = mb_tensor(b, "w", FLOW_F, 2, wd);
    mb_floats(b, t, w, EP_K * EP_N);
    mb_initializer(b, t);
    t = mb_tensor(b, "bias", FLOW_F, 1, bd);
    mb_floats(b, t, bias, EP_N);
    mb_initializer(b, t);
    if (e->residual) { /* before the product in the graph's order, as the fusion needs */
        mb_node(b, "Relu", "r0", "x", "xr");
        mb_node(b, "MatMul", "r1", "xr,w", "r");
        b->infos[b->graph.n_value_info++] = mb_vi(b, "r", FLOW_F, 3, yd, NULL);
    }
    if (e->gemm) {
        Onnx__NodeProto *g = mb_node(b, "Gemm", "gemm", "x,w", "p");
        if (e->trans_w)
            mb_attr_i(b, g, "transB", 1);
    } else if (e->trans_w) {
        mb_node(b, "Transpose", "t", "w", "wt");
        mb_node(b, "MatMul", "mm", "x,wt", "p");
    } else {
        mb_node(b, "MatMul", "mm", "x,w", "p");
    }
    const char *last = "p";
    if (e->bias) {
        mb_node(b, "Add", "add", "bias,p", "q");
        last = "q";
    }
    if (e->residual) {
        mb_node(b, "Add", "res", "q,r", "y");
    } else if (e->act) {
        bool gelu = strncmp(e->act, "Gelu", 4) == 0;
        Onnx__NodeProto *a = mb_node(b, gelu ? "Gelu" : e->act, "act", last, "y");
        if (strcmp(e->act, "GeluTanh") == 0)
            mb_attr_s(b, a, "approximate", "tanh");
    } else {
        mb_node(b, "Identity", "out", last, "y");
    }
    mb_output(b, "y", FLOW_F, e->gemm ? 2 : 3, e->gemm ? yg : yd);
    return mb_pack(b, len);
}

Test(cuda_consistency, fused_gemm_epilogues_match_the_cpu)
{
    static const ep_model_t cases[] = {
        {"MatMul + bias", NULL, true, false, false, false},
        {"MatMul + bias + Relu", "Relu", true, false, false, false},
        {"MatMul + bias + Gelu", "Gelu", true, false, false, false},
        {"MatMul + bias + Gelu tanh", "GeluTanh", true, false, false, false},
        {"MatMul + Relu", "Relu", false, false, false, false},
        {"MatMul (W read transposed) + bias + Gelu", "Gelu", true, false, true, false},
        {"MatMul (W read transposed) + bias + Gelu tanh", "GeluTanh", true, false, true, false},
        {"Gemm + bias + Relu", "Relu", true, true, false, false},
        {"Gemm transB + bias + Gelu", "Gelu", true, true, true, false},
        {"Gemm + Gelu tanh", "GeluTanh", false, true, false, false},
        {"MatMul + bias + residual", NULL, true, false, false, true},
    };
    /* The GPU's products of 77 terms in another order, through fp16/bf16
     * weights and activations at those precisions. */
    static const struct {
        const char *name;
        double bound;
    } prec[] = {{"fp32", 0}, {"tf32", 2e-3}, {"fp16", 3e-3}, {"bf16", 2e-2}};
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++) {
        const ep_model_t *e = &cases[i];
        mb_t b;
        size_t len;
        uint8_t *bytes = ep_model(&b, e, &len);
        spec_t s;
        spec_parse(e->gemm ? "f32[14,77]" : "f32[2,7,77]", &s);
        eng_tensor_t *x = spec_tensor(&s, fnv1a(e->desc));
        eng_model_t *ref = NULL;
        eng_model_config_t rcfg = rig_config(&r, false);
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref), 0, "%s: %s", e->desc,
                     fs_errmsg());
        eng_tensor_t *want[1] = {NULL};
        cr_assert_eq(eng_model_run(ref, x, 1, want), 0, "%s: %s", e->desc, fs_errmsg());
        for (size_t p = 0; p < N_OF(prec) && (p == 0 || r.dut.cuda); p++)
            prec_expect(&r, bytes, len, prec[p].name, prec[p].bound, 1e-4, x, 1, want, "epilogue",
                        e->desc);
        outputs_free(want, 1);
        eng_tensor_free(x);
        eng_model_destroy(ref);
        mb_free(&b);
        rig_expect_idle(&r, e->desc);
    }
    rig_close(&r);
}

/* ---- fused element-wise chains ---------------------------------------------- */

/* Chains the loader fuses into one FusedElementwise node each
 * (engine/fuse_chain.c), with inputs x [2, 3, 4, 64] (or [3, 5, 7]: an
 * innermost dim that is no multiple of 4, the one-element path), a bias
 * b [64] (or [7]), a mask m [2, 1, 1, 64] and a bool condition c. */
typedef struct ew_chain {
    const char *desc;
    int kind;                 /* 0 bias-scale-sigmoid-mask, 1 Where/Clip/Max/Min, 2 quick GELU with casts */
    bool odd;                 /* x [3, 5, 7], b [7] */
} ew_chain_t;

static void ew_scalar(mb_t *b, const char *name, float v)
{
    Onnx__TensorProto *t = mb_tensor(b, name, FLOW_F, 0, NULL);
    mb_floats(b, t, &v, 1);
    mb_initializer(b, t);
}

static uint8_t *ew_chain_model(mb_t *b, const ew_chain_t *e, size_t *len)
{
    mb_init(b, OC_IR_VERSION, 17);
    const int64_t xd[4] = {2, 3, 4, 64}, xo[3] = {3, 5, 7}, bd[1] = {64}, bo[1] = {7},
                  md[4] = {2, 1, 1, 64}, cd[4] = {2, 1, 4, 64}, co[3] = {3, 1, 7};
    mb_input(b, "x", FLOW_F, e->odd ? 3 : 4, e->odd ? xo : xd, NULL);
    ew_scalar(b, "k", 0.125f);
    if (e->kind == 0) {
        mb_input(b, "b", FLOW_F, 1, e->odd ? bo : bd, NULL);
        mb_node(b, "Add", "bias", "x,b", "a");
        mb_node(b, "Mul", "scale", "a,k", "s");
        mb_node(b, "Sigmoid", "sig", "s", "g");
        if (e->odd) {
            mb_node(b, "Sub", "sub", "g,x", "y");
        } else {
            mb_input(b, "m", FLOW_F, 4, md, NULL);
            mb_node(b, "Add", "mask", "g,m", "y");
        }
    } else if (e->kind == 1) {
        mb_input(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, e->odd ? 3 : 4, e->odd ? co : cd,
                 NULL);
        ew_scalar(b, "big", -1e4f);
        ew_scalar(b, "lo", -1.5f);
        ew_scalar(b, "hi", 4.0f);
        mb_node(b, "Mul", "mul", "x,k", "a");
        mb_node(b, "Where", "where", "c,a,big", "w");
        mb_node(b, "Clip", "clip", "w,lo,hi", "p");
        mb_node(b, "Max", "max", "p,x", "q");
        mb_node(b, "Min", "min", "q,hi", "y");
    } else {
        ew_scalar(b, "s", 1.702f);
        Onnx__NodeProto *n = mb_node(b, "Cast", "c16", "x", "h");
        mb_attr_i(b, n, "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
        n = mb_node(b, "Cast", "c32", "h", "f");
        mb_attr_i(b, n, "to", FLOW_F);
        mb_node(b, "Mul", "m1", "f,s", "a");
        mb_node(b, "Sigmoid", "sig", "a", "g");
        mb_node(b, "Mul", "m2", "f,g", "y");
    }
    mb_output(b, "y", FLOW_F, -1, NULL);
    return mb_pack(b, len);
}

Test(cuda_consistency, fused_elementwise_chains_match_the_cpu)
{
    static const ew_chain_t cases[] = {
        {"bias + scale + Sigmoid + [N,1,1,S] mask", 0, false},
        {"bias + scale + Sigmoid - x, odd dims", 0, true},
        {"Mul, Where, Clip, Max, Min", 1, false},
        {"Mul, Where, Clip, Max, Min, odd dims", 1, true},
        {"quick GELU through a float16 cast", 2, false},
        {"quick GELU through a float16 cast, odd dims", 2, true},
    };
    /* The reference: the CPU, unfused. fp16/bf16 round every activation. */
    static const struct {
        const char *name;
        double bound;
    } prec[] = {{"fp32", 0}, {"fp16", 3e-3}, {"bf16", 2e-2}};
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++) {
        const ew_chain_t *e = &cases[i];
        mb_t b;
        size_t len;
        uint8_t *bytes = ew_chain_model(&b, e, &len);
        const char *specs[2][2] = {
            {"f32[2,3,4,64]", e->kind == 0 ? "f32[64]" : "bool[2,1,4,64]"},
            {"f32[3,5,7]", e->kind == 0 ? "f32[7]" : "bool[3,1,7]"}};
        eng_tensor_t *x[3] = {NULL, NULL, NULL};
        size_t n_in = e->kind == 2 ? 1 : e->kind == 0 && !e->odd ? 3 : 2;
        spec_t s;
        for (size_t k = 0; k < n_in; k++) {
            spec_parse(k < 2 ? specs[e->odd][k] : "f32[2,1,1,64]", &s);
            x[k] = spec_tensor(&s, fnv1a(e->desc) + k);
        }
        eng_tensor_t in[3];
        for (size_t k = 0; k < n_in; k++)
            in[k] = *x[k];
        eng_model_t *ref = NULL;
        eng_model_config_t rcfg = rig_config(&r, false);
        rcfg.no_elementwise_fusion = true;
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref), 0, "%s: %s", e->desc,
                     fs_errmsg());
        eng_tensor_t *want[1] = {NULL};
        cr_assert_eq(eng_model_run(ref, in, n_in, want), 0, "%s: %s", e->desc, fs_errmsg());
        /* On the CPU the fused chain is its unfused chain's bits. */
        for (size_t p = 0; p < N_OF(prec) && (p == 0 || r.dut.cuda); p++)
            prec_expect(&r, bytes, len, prec[p].name, prec[p].bound, 1e-5, in, n_in, want,
                        "ew chain", e->desc);
        outputs_free(want, 1);
        for (size_t k = 0; k < n_in; k++)
            eng_tensor_free(x[k]);
        eng_model_destroy(ref);
        mb_free(&b);
        rig_expect_idle(&r, e->desc);
    }
    rig_close(&r);
}

/* X [1, 33000, 8] -> MatMul with W [8, 1031] (or Transpose of W [1031, 8],
 * read transposed) -> Add of a [1031] bias: Y's rows of 1031 elements are
 * not 16-byte aligned, so the GPU stages the product through the scratch in
 * chunks of rows with N padded (engine/cuda/linalg.cu): three chunks at
 * fp32, two at fp16/bf16, the last one short. */
#define ST_ROWS 33000
#define ST_K 8
#define ST_N 1031

static uint8_t *staged_model(mb_t *b, bool trans_w, size_t *len)
{
    mb_init(b, OC_IR_VERSION, 20);
    const int64_t xd[3] = {1, ST_ROWS, ST_K}, yd[3] = {1, ST_ROWS, ST_N}, bd[1] = {ST_N};
    const int64_t wd[2] = {trans_w ? ST_N : ST_K, trans_w ? ST_K : ST_N};
    mb_input(b, "x", FLOW_F, 3, xd, NULL);
    float *w = mb_alloc(b, ST_K * ST_N * sizeof *w), *bias = mb_alloc(b, ST_N * sizeof *bias);
    for (int i = 0; i < ST_K * ST_N; i++)
        w[i] = (float)(0.3 * sin(0.53 * i + 0.2));
    for (int i = 0; i < ST_N; i++)
        bias[i] = 0.01f * (float)(i % 37) - 0.2f;
    Onnx__TensorProto *t = mb_tensor(b, "w", FLOW_F, 2, wd);
    mb_floats(b, t, w, ST_K * ST_N);
    mb_initializer(b, t);
    t = mb_tensor(b, "bias", FLOW_F, 1, bd);
    mb_floats(b, t, bias, ST_N);
    mb_initializer(b, t);
    if (trans_w) {
        mb_node(b, "Transpose", "t", "w", "wt");
        mb_node(b, "MatMul", "mm", "x,wt", "p");
    } else {
        mb_node(b, "MatMul", "mm", "x,w", "p");
    }
    mb_node(b, "Add", "add", "p,bias", "y");
    mb_output(b, "y", FLOW_F, 3, yd);
    return mb_pack(b, len);
}

Test(cuda_consistency, matmul_with_unaligned_rows_matches_the_cpu)
{
    static const struct {
        const char *name;
        double bound;
    } prec[] = {{"fp32", 0}, {"fp16", 3e-3}, {"bf16", 2e-2}};
    rig_t r;
    rig_open(&r, 1);
    if (!r.dut.cuda) {
        rig_close(&r);
        cr_skip_test("the staging is the GPU's");
    }
    for (int tw = 0; tw < 2; tw++) {
        const char *desc = tw ? "staged MatMul, W transposed" : "staged MatMul";
        mb_t b;
        size_t len;
        uint8_t *bytes = staged_model(&b, tw, &len);
        spec_t sp;
        spec_parse("f32[1,33000,8]", &sp);
        eng_tensor_t *x = spec_tensor(&sp, fnv1a(desc));
        eng_model_t *ref = NULL;
        eng_model_config_t rcfg = rig_config(&r, false);
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref), 0, "%s: %s", desc,
                     fs_errmsg());
        eng_tensor_t *want[1] = {NULL};
        cr_assert_eq(eng_model_run(ref, x, 1, want), 0, "%s: %s", desc, fs_errmsg());
        for (size_t p = 0; p < N_OF(prec); p++)
            prec_expect(&r, bytes, len, prec[p].name, prec[p].bound, 1e-4, x, 1, want, "staged",
                        desc);
        outputs_free(want, 1);
        eng_tensor_free(x);
        eng_model_destroy(ref);
        mb_free(&b);
        rig_expect_idle(&r, desc);
    }
    rig_close(&r);
}

/* Two models on one device share one workspace block (engine/workspace.h):
 * loading the second adds its weights only, and the block goes with the
 * last of them. */
Test(cuda_consistency, models_on_a_device_share_one_workspace)
{
    rig_t r;
    rig_open(&r, 1);
    if (!r.dut.cuda) {
        rig_close(&r);
        cr_skip_test("the workspace is a GPU's");
    }
    const ep_model_t e = {"MatMul + bias + Relu", "Relu", true, false, false, false};
    mb_t b;
    size_t len;
    uint8_t *bytes = ep_model(&b, &e, &len);
    eng_model_t *m[2] = {NULL};
    size_t held = 0;
    for (int i = 0; i < 2; i++) {
        eng_model_config_t cfg = rig_config(&r, true);
        cfg.name = i ? "second" : "first";
        cr_assert_eq(eng_model_load_bytes(bytes, len, NULL, &cfg, &m[i]), 0, "%s", fs_errmsg());
        if (i == 0)
            held = eng_device_workspace_bytes(r.dev_cache);
        cr_expect(held >= ENG_CUDA_WORKSPACE_BYTES &&
                      eng_device_workspace_bytes(r.dev_cache) == held,
                  "after %d model(s): %zu workspace bytes", i + 1,
                  eng_device_workspace_bytes(r.dev_cache));
    }
    spec_t s;
    spec_parse("f32[2,7,77]", &s);
    eng_tensor_t *x = spec_tensor(&s, 7), *y[1] = {NULL};
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(eng_model_run(m[i], x, 1, y), 0, "%s", fs_errmsg());
        outputs_free(y, 1);
    }
    cr_expect_eq(eng_device_workspace_bytes(r.dev_cache), held,
                 "runs one after another lease the one block");
    eng_model_destroy(m[0]);
    cr_expect_eq(eng_device_workspace_bytes(r.dev_cache), held);
    eng_model_destroy(m[1]);
    cr_expect_eq(eng_device_workspace_bytes(r.dev_cache), 0);
    eng_tensor_free(x);
    mb_free(&b);
    rig_expect_idle(&r, "two models");
    rig_close(&r);
}

/* ---- channels-last convolution blocks ------------------------------------ */

/* A Conv block built in memory, run on the CPU (NCHW) and on the device
 * (on CUDA, channels-last: engine/layout.c): X f32 [n, c, hw, hw], cast to
 * `dt` unless f32; with `residual`, R = a 1x1 Conv of X at the same stride
 * first; Y = relu?(Conv_k(X) + B? + R?), cast back to f32. On CUDA the
 * Relu and the Add fold into the k x k Conv (its GEMM's epilogue), and R's
 * 1x1 Conv at stride 1 is a plain GEMM on X. */
typedef struct nhwc_case {
    const char *dt;          /* "f32", "f16", "bf16" */
    int64_t n, c, hw, m, k, stride, group;
    bool bias, residual, relu;
    double rtol, atol;
    /* then a pool: 1 MaxPool 3x3 stride 2 pads 1 ceil_mode, 2 AveragePool
     * the same with count_include_pad, 3 GlobalMaxPool, 4 GlobalAveragePool */
    int pool;
} nhwc_case_t;

static uint8_t *nhwc_block(mb_t *b, const nhwc_case_t *nc, size_t *len)
{
    char spec[64];
    spec_t s;
    bool f32 = strcmp(nc->dt, "f32") == 0;
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "X", ENG_DT_FLOAT, 4, (int64_t[]){nc->n, nc->c, nc->hw, nc->hw}, NULL);
    const char *x = "X";
    if (!f32) {
        mb_attr_i(b, mb_node(b, "Cast", "in", "X", "Xd"), "to", (int64_t)dtype_parse(nc->dt));
        x = "Xd";
    }
    snprintf(spec, sizeof spec, "=%s[%lld,%lld,%lld,%lld]:r(-0.3,0.3)", nc->dt,
             (long long)nc->m, (long long)(nc->c / nc->group), (long long)nc->k,
             (long long)nc->k);
    spec_parse(spec, &s);
    mb_initializer(b, spec_proto(b, "W", &s, 11));
    char ins[64];
    snprintf(ins, sizeof ins, "%s,W%s", x, nc->bias ? ",B" : "");
    if (nc->bias) {
        snprintf(spec, sizeof spec, "=%s[%lld]:unit", nc->dt, (long long)nc->m);
        spec_parse(spec, &s);
        mb_initializer(b, spec_proto(b, "B", &s, 12));
    }
    if (nc->residual) {
        snprintf(spec, sizeof spec, "=%s[%lld,%lld,1,1]:r(-0.3,0.3)", nc->dt, (long long)nc->m,
                 (long long)nc->c);
        spec_parse(spec, &s);
        mb_initializer(b, spec_proto(b, "Wr", &s, 13));
        char rin[32];
        snprintf(rin, sizeof rin, "%s,Wr", x);
        mb_attr_ints(b, mb_node(b, "Conv", "conv_r", rin, "R"), "strides",
                     (int64_t[]){nc->stride, nc->stride}, 2);
    }
    Onnx__NodeProto *conv = mb_node(b, "Conv", "conv", ins, "C");
    int64_t p = nc->k / 2;
    mb_attr_ints(b, conv, "pads", (int64_t[]){p, p, p, p}, 4);
    mb_attr_ints(b, conv, "strides", (int64_t[]){nc->stride, nc->stride}, 2);
    if (nc->group != 1)
        mb_attr_i(b, conv, "group", nc->group);
    const char *y = "C";
    if (nc->residual) {
        mb_node(b, "Add", "add", "C,R", "S");
        y = "S";
    }
    if (nc->relu) {
        mb_node(b, "Relu", "relu", y, "T");
        y = "T";
    }
    static const char *const pools[] = {NULL, "MaxPool", "AveragePool", "GlobalMaxPool",
                                        "GlobalAveragePool"};
    if (nc->pool) {
        Onnx__NodeProto *pn = mb_node(b, pools[nc->pool], "pool", y, "P");
        if (nc->pool <= 2) {
            mb_attr_ints(b, pn, "kernel_shape", (int64_t[]){3, 3}, 2);
            mb_attr_ints(b, pn, "strides", (int64_t[]){2, 2}, 2);
            mb_attr_ints(b, pn, "pads", (int64_t[]){1, 1, 1, 1}, 4);
            mb_attr_i(b, pn, "ceil_mode", 1);
        }
        if (nc->pool == 2)
            mb_attr_i(b, pn, "count_include_pad", 1);
        y = "P";
    }
    if (!f32) {
        mb_attr_i(b, mb_node(b, "Cast", "out", y, "Y"), "to", (int64_t)ENG_DT_FLOAT);
        y = "Y";
    }
    mb_output(b, y, ENG_DT_FLOAT, -1, NULL);
    return mb_pack(b, len);
}

/* Tolerances: f32 sums K <= 147 products in another order (TF32 off);
 * f16 and bf16 round the GEMM's fp32 result once and, on CUDA, round
 * again after the bias, residual and ReLU (the CPU rounds once, after all
 * of it): two units in the last place, 2^-10 (f16) and 2^-7 (bf16)
 * relative, and as much absolute where the terms cancel. */
#define NHWC_F32 .rtol = OC_RTOL, .atol = OC_ATOL
#define NHWC_F16 .rtol = 4e-3, .atol = 4e-3
#define NHWC_BF16 .rtol = 3e-2, .atol = 3e-2

Test(cuda_consistency, channels_last_conv_blocks_match_the_cpu)
{
    static const nhwc_case_t cases[] = {
        /* 1x1 stride 1 (a plain GEMM on X), 3x3 with a residual, the 7x7
         * stride-2 stem, in each dtype. */
        {"f32", 2, 16, 8, 32, 1, 1, 1, true, false, true, NHWC_F32},
        {"f32", 2, 16, 9, 16, 3, 1, 1, true, true, true, NHWC_F32},
        {"f32", 2, 3, 15, 16, 7, 2, 1, true, false, true, NHWC_F32},
        {"f32", 3, 8, 9, 8, 3, 2, 1, false, true, false, NHWC_F32},
        {"f16", 2, 16, 8, 32, 1, 1, 1, true, false, true, NHWC_F16},
        {"f16", 2, 16, 9, 16, 3, 1, 1, true, true, true, NHWC_F16},
        {"f16", 2, 3, 15, 16, 7, 2, 1, true, false, true, NHWC_F16},
        {"f16", 2, 16, 9, 16, 3, 1, 2, true, true, true, NHWC_F16},  /* grouped */
        {"f16", 2, 6, 7, 10, 3, 2, 1, false, true, true, NHWC_F16},  /* 12-byte rows */
        {"f16", 2, 16, 8, 16, 1, 1, 1, false, false, false, NHWC_F16}, /* no epilogue */
        /* depthwise: a direct kernel with the epilogue inside */
        {"f32", 2, 16, 9, 16, 3, 2, 16, true, true, true, NHWC_F32},
        {"f16", 2, 24, 9, 24, 3, 1, 24, true, true, true, NHWC_F16},
        {"bf16", 2, 8, 7, 8, 5, 1, 8, false, false, true, NHWC_BF16},
        /* the pools that follow a Conv run channels-last too */
        {"f32", 2, 8, 8, 16, 3, 1, 1, true, false, true, NHWC_F32, .pool = 1},
        {"f16", 2, 8, 8, 16, 3, 1, 1, true, false, true, NHWC_F16, .pool = 2},
        {"f32", 2, 8, 7, 16, 3, 1, 1, true, true, false, NHWC_F32, .pool = 3},
        {"bf16", 2, 8, 7, 16, 1, 1, 1, true, false, true, NHWC_BF16, .pool = 4},
        {"bf16", 2, 16, 8, 32, 1, 1, 1, true, false, true, NHWC_BF16},
        {"bf16", 2, 16, 9, 16, 3, 1, 1, true, true, true, NHWC_BF16},
        {"bf16", 2, 3, 15, 16, 7, 2, 1, true, false, true, NHWC_BF16},
    };
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++) {
        const nhwc_case_t *nc = &cases[i];
        char desc[160];
        snprintf(desc, sizeof desc, "%s conv %lldx%lld stride %lld group %lld [%lld,%lld,%lld,%lld]"
                 "->%lld%s%s%s pool %d", nc->dt, (long long)nc->k, (long long)nc->k,
                 (long long)nc->stride, (long long)nc->group, (long long)nc->n,
                 (long long)nc->c, (long long)nc->hw, (long long)nc->hw, (long long)nc->m,
                 nc->bias ? " +bias" : "", nc->residual ? " +residual" : "",
                 nc->relu ? " +relu" : "", nc->pool);
        mb_t b;
        size_t len;
        uint8_t *bytes = nhwc_block(&b, nc, &len);
        spec_t xs = {.dt = ENG_DT_FLOAT, .dist = DIST_UNIT, .n_vals = -1,
                     .shape = {4, {nc->n, nc->c, nc->hw, nc->hw}}};
        eng_tensor_t *x = spec_tensor(&xs, fnv1a(desc));
        eng_tensor_t *want[1] = {NULL}, *got[1] = {NULL};
        eng_model_t *ref = NULL, *dev = NULL;
        eng_model_config_t rcfg = rig_config(&r, false), dcfg = rig_config(&r, true);
        int rc = eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref);
        cr_expect_eq(rc, 0, "%s: loading on the CPU: %s", desc, fs_errmsg());
        if (rc == 0 && (rc = eng_model_load_bytes(bytes, len, NULL, &dcfg, &dev)) != 0)
            cr_expect(false, "%s: loading on %s: %s", desc, r.dut.name, fs_errmsg());
        if (rc == 0 && (rc = eng_model_run(ref, x, 1, want)) != 0)
            cr_expect(false, "%s: running on the CPU: %s", desc, fs_errmsg());
        if (rc == 0 && (rc = eng_model_run(dev, x, 1, got)) != 0)
            cr_expect(false, "%s: running on %s: %s", desc, r.dut.name, fs_errmsg());
        tol_t tol = {.rtol = nc->rtol, .atol = nc->atol, .exact = !r.dut.cuda};
        if (rc == 0)
            expect_tensor_match(desc, want[0], got[0], &tol);
        outputs_free(want, 1);
        outputs_free(got, 1);
        eng_model_destroy(dev);
        eng_model_destroy(ref);
        eng_tensor_free(x);
        mb_free(&b);
        rig_expect_idle(&r, desc);
    }
    rig_close(&r);
}

/* ---- the implicit-GEMM Conv (engine/cuda/conv_igemm.cu) ------------------- */

/* One channels-last Conv block: X f32 [n, c, h, w] cast to `dt`; with
 * `residual`, R = a Conv of X of the same geometry (another W, no bias),
 * which both algorithms compute too; Y = relu?(Conv(X) + B? + R?) in `dt`
 * (no f32 copy of Y, so that the column matrix decides the plans' sizes).
 * `implicit`: whether the implicit GEMM applies (C and M multiples of 8),
 * else the case checks the im2col fallback. */
typedef struct igemm_case {
    const char *dt; /* "f16", "bf16" */
    int64_t n, c, h, w, m, kh, kw, sh, sw, ph, pw, dil;
    bool bias, residual, relu;
    bool implicit;
} igemm_case_t;

static uint8_t *igemm_block(mb_t *b, const igemm_case_t *ic, size_t *len)
{
    char spec[80];
    spec_t s;
    mb_init(b, OC_IR_VERSION, 13);
    mb_input(b, "X", ENG_DT_FLOAT, 4, (int64_t[]){ic->n, ic->c, ic->h, ic->w}, NULL);
    mb_attr_i(b, mb_node(b, "Cast", "in", "X", "Xd"), "to", (int64_t)dtype_parse(ic->dt));
    const char *ws[2] = {"W", "Wr"};
    for (int i = 0; i < (ic->residual ? 2 : 1); i++) {
        snprintf(spec, sizeof spec, "=%s[%lld,%lld,%lld,%lld]:r(-0.3,0.3)", ic->dt,
                 (long long)ic->m, (long long)ic->c, (long long)ic->kh, (long long)ic->kw);
        spec_parse(spec, &s);
        mb_initializer(b, spec_proto(b, ws[i], &s, 21 + (uint64_t)i));
    }
    if (ic->bias) {
        snprintf(spec, sizeof spec, "=%s[%lld]:unit", ic->dt, (long long)ic->m);
        spec_parse(spec, &s);
        mb_initializer(b, spec_proto(b, "B", &s, 23));
    }
    /* The residual's Conv first: R is made before the Conv that adds it. */
    const char *names[2] = {"conv_r", "conv"}, *ins[2] = {"Xd,Wr", ic->bias ? "Xd,W,B" : "Xd,W"};
    const char *outs[2] = {"R", "C"};
    for (int i = ic->residual ? 0 : 1; i < 2; i++) {
        Onnx__NodeProto *conv = mb_node(b, "Conv", names[i], ins[i], outs[i]);
        mb_attr_ints(b, conv, "pads", (int64_t[]){ic->ph, ic->pw, ic->ph, ic->pw}, 4);
        mb_attr_ints(b, conv, "strides", (int64_t[]){ic->sh, ic->sw}, 2);
        mb_attr_ints(b, conv, "dilations", (int64_t[]){ic->dil, ic->dil}, 2);
    }
    const char *y = "C";
    if (ic->residual) {
        mb_node(b, "Add", "add", "C,R", "S");
        y = "S";
    }
    if (ic->relu) {
        mb_node(b, "Relu", "relu", y, "T");
        y = "T";
    }
    mb_output(b, y, dtype_parse(ic->dt), -1, NULL);
    return mb_pack(b, len);
}

/* Tolerances of the implicit GEMM: the CPU and the kernel both sum the
 * products in float and round once, after the bias, the residual and the
 * ReLU, so they differ by the summation order (~1e-6) and at most one
 * unit in the last place of Y (the relative part: 2^-10 for f16, 2^-7 for
 * bf16, doubled) and of R, which may cancel against the product (the
 * absolute part: one unit at |R| < 8). A missing or misplaced tap moves
 * values by ~0.05 to 1. */
#define IGEMM_F16_RTOL 2e-3
#define IGEMM_F16_ATOL 4e-3
#define IGEMM_BF16_RTOL 1.6e-2
#define IGEMM_BF16_ATOL 3.2e-2

/* Runs b on the device with the given algorithm; 0, *y and *live_bytes
 * (the plan's most bytes live at once), or the failure already reported. */
static int igemm_run_dev(rig_t *r, const uint8_t *bytes, size_t len, eng_conv_algo_t algo,
                         const eng_tensor_t *x, const char *desc, eng_tensor_t **y,
                         size_t *live_bytes)
{
    eng_model_config_t cfg = rig_config(r, true);
    cfg.conv_layout = ENG_CONV_LAYOUT_NHWC;
    cfg.conv = algo;
    const char *an = algo == ENG_CONV_ALGO_IM2COL ? "im2col" : "implicit";
    eng_model_t *dev = NULL;
    eng_plan_info_t info = {0};
    int rc = eng_model_load_bytes(bytes, len, NULL, &cfg, &dev);
    if (rc != 0)
        cr_expect(false, "%s: loading on %s (%s): %s", desc, r->dut.name, an, fs_errmsg());
    if (rc == 0 && (rc = eng_model_plan_info(dev, &x->shape, 1, &info)) != 0)
        cr_expect(false, "%s: planning on %s (%s): %s", desc, r->dut.name, an, fs_errmsg());
    if (rc == 0 && (rc = eng_model_run(dev, x, 1, y)) != 0)
        cr_expect(false, "%s: running on %s (%s): %s", desc, r->dut.name, an, fs_errmsg());
    *live_bytes = info.lower_bound_bytes;
    eng_model_destroy(dev);
    return rc;
}

Test(cuda_consistency, implicit_gemm_conv_matches_the_cpu_and_im2col)
{
    static const igemm_case_t cases[] = {
        /* 3x3 stride 1 pad 1 with every epilogue, and with none */
        {"f16", 2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, true, true, true, true},
        {"f16", 2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, false, false, false, true},
        {"bf16", 2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, true, true, true, true},
        /* 3x3 stride 2 */
        {"f16", 2, 32, 10, 10, 48, 3, 3, 2, 2, 1, 1, 1, true, false, true, true},
        {"bf16", 2, 32, 10, 10, 48, 3, 3, 2, 2, 1, 1, 1, true, true, false, true},
        /* the 7x7 stride-2 stem with C = 8 (K = 392: a K tail) */
        {"f16", 2, 8, 15, 15, 16, 7, 7, 2, 2, 3, 3, 1, true, false, true, true},
        {"bf16", 2, 8, 15, 15, 16, 7, 7, 2, 2, 3, 3, 1, true, false, true, true},
        /* dilation 2 */
        {"f16", 2, 16, 11, 11, 16, 3, 3, 1, 1, 2, 2, 2, false, true, true, true},
        {"bf16", 2, 16, 11, 11, 16, 3, 3, 1, 1, 2, 2, 2, true, true, false, true},
        /* P = 147 and M = 24 no tile multiples, K = 360 */
        {"f16", 3, 40, 7, 7, 24, 3, 3, 1, 1, 1, 1, 1, true, true, true, true},
        {"f16", 3, 40, 7, 7, 24, 3, 3, 1, 1, 1, 1, 1, false, true, false, true},
        {"bf16", 3, 40, 7, 7, 24, 3, 3, 1, 1, 1, 1, 1, true, false, true, true},
        /* a non-square kernel and stride, no padding along the height */
        {"f16", 2, 24, 6, 10, 32, 3, 5, 1, 2, 0, 2, 1, true, true, true, true},
        /* enough tiles (72 x 2) for 128-wide blocks on an H100/H200's 132
         * multiprocessors, M = 136 past one of them */
        {"f16", 4, 16, 48, 48, 136, 3, 3, 1, 1, 1, 1, 1, true, true, true, true},
        {"bf16", 4, 32, 48, 48, 136, 3, 3, 1, 1, 1, 1, 1, true, false, true, true},
        /* fallbacks to im2col: the real stem's C = 3, C = 12, M = 12 */
        {"f16", 2, 3, 15, 15, 16, 7, 7, 2, 2, 3, 3, 1, true, false, true, false},
        {"bf16", 2, 3, 15, 15, 16, 7, 7, 2, 2, 3, 3, 1, true, true, true, false},
        {"f16", 2, 12, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, true, true, true, false},
        {"f16", 2, 16, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, true, true, true, false},
    };
    rig_t r;
    rig_open(&r, 1);
    for (size_t i = 0; i < N_OF(cases); i++) {
        const igemm_case_t *ic = &cases[i];
        char desc[192];
        snprintf(desc, sizeof desc, "%s conv %lldx%lld stride %lld,%lld pad %lld,%lld dilation "
                 "%lld [%lld,%lld,%lld,%lld]->%lld%s%s%s (%s)", ic->dt, (long long)ic->kh,
                 (long long)ic->kw, (long long)ic->sh, (long long)ic->sw, (long long)ic->ph,
                 (long long)ic->pw, (long long)ic->dil, (long long)ic->n, (long long)ic->c,
                 (long long)ic->h, (long long)ic->w, (long long)ic->m, ic->bias ? " +bias" : "",
                 ic->residual ? " +residual" : "", ic->relu ? " +relu" : "",
                 ic->implicit ? "implicit" : "falls back to im2col");
        mb_t b;
        size_t len;
        uint8_t *bytes = igemm_block(&b, ic, &len);
        spec_t xs = {.dt = ENG_DT_FLOAT, .dist = DIST_UNIT, .n_vals = -1,
                     .shape = {4, {ic->n, ic->c, ic->h, ic->w}}};
        eng_tensor_t *x = spec_tensor(&xs, fnv1a(desc));
        eng_tensor_t *want[1] = {NULL}, *imp[1] = {NULL}, *col[1] = {NULL};
        eng_model_t *ref = NULL;
        /* The reference: the CPU's channels-last Conv (engine/cpu/conv_nhwc.c). */
        eng_model_config_t rcfg = rig_config(&r, false);
        rcfg.conv_layout = ENG_CONV_LAYOUT_NHWC;
        int rc = eng_model_load_bytes(bytes, len, NULL, &rcfg, &ref);
        cr_expect_eq(rc, 0, "%s: loading on the CPU: %s", desc, fs_errmsg());
        if (rc == 0 && (rc = eng_model_run(ref, x, 1, want)) != 0)
            cr_expect(false, "%s: running on the CPU: %s", desc, fs_errmsg());
        size_t imp_bytes = 0, col_bytes = 0;
        if (rc == 0)
            rc = igemm_run_dev(&r, bytes, len, ENG_CONV_ALGO_IMPLICIT, x, desc, imp, &imp_bytes);
        if (rc == 0)
            rc = igemm_run_dev(&r, bytes, len, ENG_CONV_ALGO_IM2COL, x, desc, col, &col_bytes);
        bool f16 = strcmp(ic->dt, "f16") == 0;
        double t_col = f16 ? 4e-3 : 3e-2; /* NHWC_F16, NHWC_BF16 above */
        tol_t ti = {.rtol = f16 ? IGEMM_F16_RTOL : IGEMM_BF16_RTOL,
                    .atol = f16 ? IGEMM_F16_ATOL : IGEMM_BF16_ATOL, .exact = !r.dut.cuda};
        if (!ic->implicit)
            ti.rtol = ti.atol = t_col;
        tol_t tc = {.rtol = t_col, .atol = t_col, .exact = !r.dut.cuda};
        char what[220];
        if (rc == 0) {
            snprintf(what, sizeof what, "%s, implicit", desc);
            expect_tensor_match(what, want[0], imp[0], &ti);
            snprintf(what, sizeof what, "%s, im2col", desc);
            expect_tensor_match(what, want[0], col[0], &tc);
        }
        /* The implicit GEMM holds no column matrix: its plan has fewer
         * bytes live at the Conv, and in every case here that step's
         * column matrix (at least 9% past the rest) raises im2col's peak
         * above the implicit plan's; a fallback plans what im2col plans.
         * The CPU has one algorithm. */
        if (rc == 0 && r.dut.cuda && ic->implicit)
            cr_expect_lt(imp_bytes, col_bytes, "%s: the implicit plan's peak of %zu live "
                         "bytes, im2col's %zu", desc, imp_bytes, col_bytes);
        if (rc == 0 && (!r.dut.cuda || !ic->implicit))
            cr_expect_eq(imp_bytes, col_bytes, "%s: live bytes", desc);
        outputs_free(want, 1);
        outputs_free(imp, 1);
        outputs_free(col, 1);
        eng_model_destroy(ref);
        eng_tensor_free(x);
        mb_free(&b);
        rig_expect_idle(&r, desc);
    }
    rig_close(&r);
}
