/* compare.c -- output comparison: exact for integers and bools; floats
 * under one of two rules (conformance.h):
 *  - node tests: the ONNX backend test's rule, numpy.testing.assert_allclose,
 *    |actual - expected| <= atol + rtol * |expected| per element;
 *  - model cases: |actual - expected| <= atol + atol_rel * max|expected|,
 *    one bound for the whole output. A model's outputs mix large values
 *    with values near zero that are differences of large ones (a logit, a
 *    normalised activation); an element-wise relative bound holds those to
 *    a precision the arithmetic never had, while a bound relative to the
 *    output's scale says "off by at most this fraction of what the output
 *    spans", which is what a float32 or float16 graph can promise.
 * Both: NaN equals NaN, an infinity only itself. The worst error (largest
 * |actual - expected| over max|expected|) is measured either way. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/float8.h"
#include "tests/conformance/conformance.h"

static bool dtype_is_float(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT || dt == ENG_DT_DOUBLE || dt == ENG_DT_FLOAT16 ||
           dt == ENG_DT_BFLOAT16 || eng_dtype_is_float8(dt);
}

static double half_to_double(uint16_t h)
{
    int exp = (h >> 10) & 0x1f;
    int mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp(mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp(mant | 0x400, exp - 25);
    return (h & 0x8000) ? -v : v;
}

static double float_at(const eng_tensor_t *t, int64_t i)
{
    switch (t->dtype) {
    case ENG_DT_FLOAT:
        return ((const float *)t->data)[i];
    case ENG_DT_DOUBLE:
        return ((const double *)t->data)[i];
    case ENG_DT_FLOAT16:
        return half_to_double(((const uint16_t *)t->data)[i]);
    case ENG_DT_FLOAT8E4M3FN:
    case ENG_DT_FLOAT8E4M3FNUZ:
    case ENG_DT_FLOAT8E5M2:
    case ENG_DT_FLOAT8E5M2FNUZ: /* every code is a value (or NaN): compared by value */
        return eng_f8_to_float(((const uint8_t *)t->data)[i],
                               (eng_f8_kind_t)(t->dtype - ENG_DT_FLOAT8E4M3FN));
    default: { /* bfloat16: the high half of a float32 */
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    }
}

/* Formats element i of an integer or bool tensor. */
static void format_int_at(const eng_tensor_t *t, int64_t i, char *buf, size_t len)
{
    const void *d = t->data;
    switch (t->dtype) {
    case ENG_DT_BOOL:
        snprintf(buf, len, "%s", ((const uint8_t *)d)[i] ? "true" : "false");
        break;
    case ENG_DT_UINT8:
        snprintf(buf, len, "%u", (unsigned)((const uint8_t *)d)[i]);
        break;
    case ENG_DT_INT8:
        snprintf(buf, len, "%d", (int)((const int8_t *)d)[i]);
        break;
    case ENG_DT_UINT16:
        snprintf(buf, len, "%u", (unsigned)((const uint16_t *)d)[i]);
        break;
    case ENG_DT_INT16:
        snprintf(buf, len, "%d", (int)((const int16_t *)d)[i]);
        break;
    case ENG_DT_INT32:
        snprintf(buf, len, "%" PRId32, ((const int32_t *)d)[i]);
        break;
    case ENG_DT_UINT32:
        snprintf(buf, len, "%" PRIu32, ((const uint32_t *)d)[i]);
        break;
    case ENG_DT_INT64:
        snprintf(buf, len, "%" PRId64, ((const int64_t *)d)[i]);
        break;
    case ENG_DT_UINT64:
        snprintf(buf, len, "%" PRIu64, ((const uint64_t *)d)[i]);
        break;
    default:
        snprintf(buf, len, "?");
        break;
    }
}

/* |a - e| for two elements, 0 when they match as specials (NaN and NaN,
 * an infinity and itself), INFINITY when only one side is special. */
static double float_diff(double a, double e)
{
    if (isnan(a) || isnan(e))
        return isnan(a) && isnan(e) ? 0 : INFINITY;
    if (isinf(a) || isinf(e))
        return a == e ? 0 : INFINITY;
    return fabs(a - e);
}

static bool dtype_is_half(eng_dtype_t dt)
{
    return dt == ENG_DT_FLOAT16 || dt == ENG_DT_BFLOAT16;
}

/* max |e| over the finite elements of t (0 for none). */
static double max_abs_finite(const eng_tensor_t *t, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(float_at(t, i));
        if (isfinite(v) && v > m)
            m = v;
    }
    return m;
}

/* The index as coordinates "[i,j,k]" in `shape`. */
static void format_index(const eng_shape_t *shape, int64_t flat, char *buf, size_t len)
{
    int64_t strides[ENG_MAX_RANK];
    eng_shape_strides(shape, strides);
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < shape->rank && n < len; d++) {
        int64_t coord = strides[d] ? flat / strides[d] : 0;
        flat -= coord * strides[d];
        n += (size_t)snprintf(buf + n, len - n, "%s%" PRId64, d ? "," : "", coord);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Merges one output's error into *worst when it is the worse one. */
static void error_merge(conf_error_t *worst, double max_abs, double max_expected, double tol_rel,
                        const char *name)
{
    double rel = max_expected > 0 ? max_abs / max_expected : max_abs > 0 ? INFINITY : 0;
    worst->n_outputs++;
    if (worst->n_outputs > 1 && !(rel > worst->rel))
        return;
    worst->max_abs = max_abs;
    worst->max_expected = max_expected;
    worst->rel = rel;
    worst->tol_rel = tol_rel;
    snprintf(worst->output, sizeof worst->output, "%s", name);
}

bool conf_tensor_compare(const eng_tensor_t *expected, const eng_tensor_t *actual,
                         const conf_tolerance_t *tol, conf_rule_t rule, size_t index,
                         const char *name, conf_error_t *worst, char *msg, size_t msg_len)
{
    char es[64], as[64];
    if (expected->dtype != actual->dtype) {
        snprintf(msg, msg_len, "output %zu '%s': dtype %s, expected %s", index, name,
                 eng_dtype_name(actual->dtype), eng_dtype_name(expected->dtype));
        return false;
    }
    if (!eng_shape_equal(&expected->shape, &actual->shape)) {
        snprintf(msg, msg_len, "output %zu '%s': shape %s, expected %s", index, name,
                 eng_shape_format(&actual->shape, as, sizeof as),
                 eng_shape_format(&expected->shape, es, sizeof es));
        return false;
    }
    size_t esize = eng_dtype_size(expected->dtype);
    if (esize == 0) {
        snprintf(msg, msg_len, "output %zu '%s': dtype %s cannot be compared", index, name,
                 eng_dtype_name(expected->dtype));
        return false;
    }
    int64_t n = eng_shape_numel(&expected->shape);
    if (n > 0 && (!expected->data || !actual->data)) {
        snprintf(msg, msg_len, "output %zu '%s': no data", index, name);
        return false;
    }
    bool is_float = dtype_is_float(expected->dtype);
    double scale = is_float ? max_abs_finite(expected, n) : 0;
    double rel = dtype_is_half(expected->dtype) ? tol->atol_rel_half : tol->atol_rel;
    double model_bound = tol->atol + rel * scale;
    double max_diff = 0;
    int64_t first = -1, n_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        if (is_float) {
            double e = float_at(expected, i);
            double d = float_diff(float_at(actual, i), e);
            double bound = rule == CONF_RULE_MODEL ? model_bound : tol->atol + tol->rtol * fabs(e);
            /* d == 0 first: NaN matching NaN has a NaN bound; a special on
             * one side only (d infinite) fails even an infinite bound. */
            ok = d == 0 || (isfinite(d) && d <= bound);
            if (d > max_diff)
                max_diff = d;
        } else if (expected->dtype == ENG_DT_BOOL) {
            ok = !((const uint8_t *)expected->data)[i] == !((const uint8_t *)actual->data)[i];
        } else {
            ok = memcmp((const char *)expected->data + (size_t)i * esize,
                        (const char *)actual->data + (size_t)i * esize, esize) == 0;
        }
        if (!ok && n_bad++ == 0)
            first = i;
    }
    if (is_float && worst)
        error_merge(worst, max_diff, scale, rule == CONF_RULE_MODEL ? rel : tol->rtol, name);
    if (n_bad == 0)
        return true;
    if (is_float) {
        snprintf(es, sizeof es, "%.9g", float_at(expected, first));
        snprintf(as, sizeof as, "%.9g", float_at(actual, first));
    } else {
        format_int_at(expected, first, es, sizeof es);
        format_int_at(actual, first, as, sizeof as);
    }
    char at[96], tol_text[160];
    format_index(&expected->shape, first, at, sizeof at);
    if (!is_float)
        snprintf(tol_text, sizeof tol_text, "exact");
    else if (rule == CONF_RULE_MODEL)
        snprintf(tol_text, sizeof tol_text,
                 "worst |error| %.3g = %.3g of max|expected| %.6g; tolerance %.3g = atol %g + "
                 "atol_rel %g x max|expected|",
                 max_diff, scale > 0 ? max_diff / scale : INFINITY, scale, model_bound, tol->atol,
                 rel);
    else
        snprintf(tol_text, sizeof tol_text, "rtol %g, atol %g", tol->rtol, tol->atol);
    snprintf(msg, msg_len,
             "output %zu '%s'%s: expected %s, got %s (%" PRId64 " of %" PRId64
             " elements differ; %s)",
             index, name, at, es, as, n_bad, n, tol_text);
    return false;
}
