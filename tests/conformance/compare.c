/* compare.c -- output comparison with the ONNX backend test's rule
 * (numpy.testing.assert_allclose: |actual - expected| <= atol + rtol *
 * |expected|, NaN equal to NaN), exact for integers and bools. */
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

/* Whether a and e agree under the tolerance; infinities must be equal and
 * NaN matches only NaN, as in numpy's assert_allclose. */
static bool float_close(double a, double e, const conf_tolerance_t *tol)
{
    if (isnan(a) || isnan(e))
        return isnan(a) && isnan(e);
    if (isinf(a) || isinf(e))
        return a == e;
    return fabs(a - e) <= tol->atol + tol->rtol * fabs(e);
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

bool conf_tensor_compare(const eng_tensor_t *expected, const eng_tensor_t *actual,
                         const conf_tolerance_t *tol, size_t index, const char *name, char *msg,
                         size_t msg_len)
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
    int64_t first = -1, n_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        if (is_float)
            ok = float_close(float_at(actual, i), float_at(expected, i), tol);
        else if (expected->dtype == ENG_DT_BOOL)
            ok = !((const uint8_t *)expected->data)[i] == !((const uint8_t *)actual->data)[i];
        else
            ok = memcmp((const char *)expected->data + (size_t)i * esize,
                        (const char *)actual->data + (size_t)i * esize, esize) == 0;
        if (!ok && n_bad++ == 0)
            first = i;
    }
    if (n_bad == 0)
        return true;
    if (is_float) {
        snprintf(es, sizeof es, "%.9g", float_at(expected, first));
        snprintf(as, sizeof as, "%.9g", float_at(actual, first));
    } else {
        format_int_at(expected, first, es, sizeof es);
        format_int_at(actual, first, as, sizeof as);
    }
    char at[96];
    format_index(&expected->shape, first, at, sizeof at);
    snprintf(msg, msg_len,
             "output %zu '%s'%s: expected %s, got %s (%" PRId64 " of %" PRId64
             " elements differ; rtol %g, atol %g)",
             index, name, at, es, as, n_bad, n, tol->rtol, tol->atol);
    return false;
}
