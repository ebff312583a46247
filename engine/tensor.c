/* tensor.c -- dtype sizes and names, shape arithmetic (numel, broadcasting,
 * strides) and host tensors that own their data. */
#include "engine/tensor.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "common/error.h"

/* Indexed by eng_dtype_t; ONNX's numbering has no holes up to bfloat16. */
static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [ENG_DT_UNDEFINED] = {"undefined", 0}, [ENG_DT_FLOAT] = {"float", 4},
    [ENG_DT_UINT8] = {"uint8", 1},         [ENG_DT_INT8] = {"int8", 1},
    [ENG_DT_UINT16] = {"uint16", 2},       [ENG_DT_INT16] = {"int16", 2},
    [ENG_DT_INT32] = {"int32", 4},         [ENG_DT_INT64] = {"int64", 8},
    [ENG_DT_STRING] = {"string", sizeof(eng_string_t)},       [ENG_DT_BOOL] = {"bool", 1},
    [ENG_DT_FLOAT16] = {"float16", 2},     [ENG_DT_DOUBLE] = {"double", 8},
    [ENG_DT_UINT32] = {"uint32", 4},       [ENG_DT_UINT64] = {"uint64", 8},
    [ENG_DT_COMPLEX64] = {"complex64", 8}, [ENG_DT_COMPLEX128] = {"complex128", 16},
    [ENG_DT_BFLOAT16] = {"bfloat16", 2},
    [ENG_DT_FLOAT8E4M3FN] = {"float8e4m3fn", 1},
    [ENG_DT_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 1},
    [ENG_DT_FLOAT8E5M2] = {"float8e5m2", 1},
    [ENG_DT_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 1},
};

#define DTYPE_COUNT (sizeof dtype_table / sizeof dtype_table[0])

size_t eng_dtype_size(eng_dtype_t dt)
{
    return (unsigned)dt < DTYPE_COUNT ? dtype_table[dt].size : 0;
}

/* ONNX element types newer than the engine's table (TensorProto.DataType
 * 21..26), named so that "not supported" messages say which. */
static const char *const newer_dtype_names[] = {
    "uint4", "int4", "float4e2m1", "float8e8m0", "uint2", "int2",
};

const char *eng_dtype_name(eng_dtype_t dt)
{
    if ((unsigned)dt < DTYPE_COUNT)
        return dtype_table[dt].name;
    unsigned newer = (unsigned)dt - 21u;
    if (newer < sizeof newer_dtype_names / sizeof newer_dtype_names[0])
        return newer_dtype_names[newer];
    return "unknown";
}

bool eng_dtype_supported(eng_dtype_t dt)
{
    switch (dt) {
    case ENG_DT_FLOAT:
    case ENG_DT_INT32:
    case ENG_DT_INT64:
    case ENG_DT_BOOL:
    case ENG_DT_UINT8:
    case ENG_DT_DOUBLE:
    case ENG_DT_INT8:
    case ENG_DT_INT16:
    case ENG_DT_UINT16:
    case ENG_DT_UINT32:
    case ENG_DT_UINT64:
    case ENG_DT_FLOAT16:
    case ENG_DT_BFLOAT16:
    case ENG_DT_FLOAT8E4M3FN:
    case ENG_DT_FLOAT8E4M3FNUZ:
    case ENG_DT_FLOAT8E5M2:
    case ENG_DT_FLOAT8E5M2FNUZ:
    case ENG_DT_STRING:
        return true;
    default:
        return false;
    }
}

bool eng_string_equal(const eng_string_t *a, const eng_string_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(eng_string_data(a), eng_string_data(b),
                                                      (size_t)a->len) == 0);
}

/* A dim below zero breaks the type's invariant; it counts as 0 here so that
 * no caller sizes a buffer from a negative product. */
int64_t eng_shape_numel(const eng_shape_t *s)
{
    int64_t n = 1;
    bool saturated = false;
    for (int i = 0; i < s->rank && i < ENG_MAX_RANK; i++) {
        int64_t d = s->dims[i];
        if (d <= 0)
            return 0;
        if (n > INT64_MAX / d)
            saturated = true;
        else
            n *= d;
    }
    return saturated ? INT64_MAX : n;
}

bool eng_shape_bounded(const eng_shape_t *s)
{
    if (s->rank < 0 || s->rank > ENG_MAX_RANK)
        return false;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dims[i];
        if (d < 0 || d > ENG_NUMEL_MAX)
            return false;
        if (d == 0)
            continue;
        if (d > ENG_NUMEL_MAX / n)
            return false;
        n *= d;
    }
    return true;
}

bool eng_shape_equal(const eng_shape_t *a, const eng_shape_t *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank && i < ENG_MAX_RANK; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

char *eng_shape_format(const eng_shape_t *s, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && i < ENG_MAX_RANK && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? "," : "",
                                (long long)s->dims[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

int eng_shape_broadcast(const eng_shape_t *a, const eng_shape_t *b, eng_shape_t *out)
{
    char sa[96], sb[96];
    if (a->rank < 0 || a->rank > ENG_MAX_RANK || b->rank < 0 || b->rank > ENG_MAX_RANK)
        return fs_err(FS_EINVAL, "cannot broadcast shapes of rank %d and %d (ranks 0 to %d)",
                      a->rank, b->rank, ENG_MAX_RANK);
    eng_shape_t r = {.rank = a->rank > b->rank ? a->rank : b->rank};
    /* Dims align from the right; a missing leading dim acts as 1. */
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        int64_t da = ia >= 0 ? a->dims[ia] : 1;
        int64_t db = ib >= 0 ? b->dims[ib] : 1;
        if (da < 0 || db < 0 || (da != db && da != 1 && db != 1))
            return fs_err(FS_EINVAL, "shapes %s and %s do not broadcast (dimension %lld vs %lld)",
                          eng_shape_format(a, sa, sizeof sa), eng_shape_format(b, sb, sizeof sb),
                          (long long)da, (long long)db);
        r.dims[i] = da == 1 ? db : da;
    }
    *out = r;
    return 0;
}

void eng_shape_strides(const eng_shape_t *s, int64_t strides[ENG_MAX_RANK])
{
    int64_t st = 1;
    for (int i = (s->rank < ENG_MAX_RANK ? s->rank : ENG_MAX_RANK) - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dims[i] > 0 ? s->dims[i] : 1;
    }
}

/* Saturates at SIZE_MAX, so that a caller allocating that many bytes fails
 * cleanly instead of allocating a wrapped-around small buffer. */
size_t eng_tensor_bytes(const eng_tensor_t *t)
{
    size_t es = eng_dtype_size(t->dtype);
    if (es == 0)
        return 0;
    int64_t n = eng_shape_numel(&t->shape);
    if ((uint64_t)n > SIZE_MAX / es)
        return SIZE_MAX;
    return (size_t)n * es;
}

/* A host tensor as eng_tensor_alloc_* hands it out: the view the caller
 * sees, and where its data goes back (NULL: free()). eng_tensor_free finds
 * the header from the view, so it takes only tensors from here. */
typedef struct host_tensor {
    eng_tensor_t t;
    alloc_cache_t *home;
} host_tensor_t;

/* The header of a dt tensor of `shape`, with no data yet; its byte count
 * in *bytes (SIZE_MAX: too large for memory). */
static int host_header(eng_dtype_t dt, const eng_shape_t *shape, host_tensor_t **out,
                       size_t *bytes)
{
    char s[96];
    if (eng_dtype_size(dt) == 0)
        return fs_err(FS_EINVAL, "cannot allocate a tensor of dtype %s (no fixed element size)",
                      eng_dtype_name(dt));
    if (shape->rank < 0 || shape->rank > ENG_MAX_RANK)
        return fs_err(FS_EINVAL, "cannot allocate a tensor of rank %d (ranks 0 to %d)",
                      shape->rank, ENG_MAX_RANK);
    for (int i = 0; i < shape->rank; i++)
        if (shape->dims[i] < 0)
            return fs_err(FS_EINVAL, "cannot allocate a tensor of shape %s (negative dimension)",
                          eng_shape_format(shape, s, sizeof s));
    host_tensor_t *h = calloc(1, sizeof *h);
    if (!h)
        return fs_err(FS_ENOMEM, "out of memory for a tensor header");
    h->t.dtype = dt;
    h->t.shape = *shape;
    *bytes = eng_tensor_bytes(&h->t);
    *out = h;
    return 0;
}

static int host_data_failed(host_tensor_t *h)
{
    char s[96];
    int rc = fs_err(FS_ENOMEM, "out of memory for a %s tensor of shape %s",
                    eng_dtype_name(h->t.dtype), eng_shape_format(&h->t.shape, s, sizeof s));
    free(h);
    return rc;
}

int eng_tensor_alloc_host(eng_dtype_t dt, const eng_shape_t *shape, eng_tensor_t **out)
{
    host_tensor_t *h;
    size_t bytes;
    int rc = host_header(dt, shape, &h, &bytes);
    if (rc != 0)
        return rc;
    /* At least one byte, so that even an empty tensor has non-NULL data. */
    h->t.data = bytes == SIZE_MAX ? NULL : calloc(1, bytes ? bytes : 1);
    if (!h->t.data)
        return host_data_failed(h);
    *out = &h->t;
    return 0;
}

int eng_tensor_alloc_cached(alloc_cache_t *cache, uint32_t owner, eng_dtype_t dt,
                            const eng_shape_t *shape, eng_tensor_t **out)
{
    host_tensor_t *h;
    size_t bytes;
    int rc = host_header(dt, shape, &h, &bytes);
    if (rc != 0)
        return rc;
    if (bytes == SIZE_MAX)
        return host_data_failed(h);
    if ((rc = alloc_cache_alloc(cache, bytes ? bytes : 1, 0, owner, &h->t.data)) != 0) {
        free(h);
        return rc;
    }
    h->home = cache;
    *out = &h->t;
    return 0;
}

int eng_tensor_alloc_from(alloc_cache_t *cache, uint32_t owner, eng_dtype_t dt,
                          const eng_shape_t *shape, eng_tensor_t **out)
{
    eng_tensor_t probe = {.dtype = dt, .shape = *shape};
    if (cache && eng_tensor_bytes(&probe) && eng_tensor_alloc_cached(cache, owner, dt, shape,
                                                                     out) == 0)
        return 0;
    return eng_tensor_alloc_host(dt, shape, out);
}

int eng_tensor_pack_strings(const eng_shape_t *shape, const eng_string_t *src,
                            eng_tensor_t **out)
{
    host_tensor_t *h;
    size_t bytes, tail = 0;
    int rc = host_header(ENG_DT_STRING, shape, &h, &bytes);
    if (rc != 0)
        return rc;
    size_t n = bytes == SIZE_MAX ? 0 : bytes / sizeof(eng_string_t);
    for (size_t i = 0; i < n; i++)
        if (src[i].len > ENG_STRING_INLINE) {
            if (src[i].len > SIZE_MAX - tail - bytes)
                return host_data_failed(h);
            tail += (size_t)src[i].len;
        }
    h->t.data = bytes == SIZE_MAX ? NULL : malloc(bytes + tail ? bytes + tail : 1);
    if (!h->t.data)
        return host_data_failed(h);
    eng_string_t *dst = h->t.data;
    char *at = (char *)h->t.data + bytes;
    for (size_t i = 0; i < n; i++) {
        dst[i] = src[i];
        if (src[i].len > ENG_STRING_INLINE) {
            memcpy(at, src[i].u.ptr, (size_t)src[i].len);
            dst[i].u.ptr = at;
            at += src[i].len;
        }
    }
    *out = &h->t;
    return 0;
}

void eng_tensor_free(eng_tensor_t *t)
{
    if (!t)
        return;
    host_tensor_t *h = (host_tensor_t *)((char *)t - offsetof(host_tensor_t, t));
    if (h->home)
        alloc_cache_free(h->home, t->data);
    else
        free(t->data);
    free(h);
}
