/* onnx_tensor.c -- ONNX TensorProto to engine tensor: dtype and dims, data in
 * every encoding (raw_data, the typed fields, external files confined to the
 * model's directory), and eng_tensor_load_proto for .pb tensor files. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/onnx_impl.h"

/* raw_data and external files are little-endian, and copied as they are. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flatserve's ONNX loader assumes a little-endian host"
#endif

/* Which repeated field carries a dtype's values when raw_data is not used
 * (onnx.proto's TensorProto comments). */
typedef enum typed_field {
    FIELD_FLOAT,  /* float, complex64 (two per element) */
    FIELD_INT32,  /* int32 and every narrower integer, bool, float16, bfloat16 */
    FIELD_INT64,
    FIELD_DOUBLE, /* double, complex128 (two per element) */
    FIELD_UINT64, /* uint32, uint64 */
} typed_field_t;

static typed_field_t field_of(eng_dtype_t dt, size_t *per_element)
{
    *per_element = 1;
    switch (dt) {
    case ENG_DT_COMPLEX64:
        *per_element = 2;
        return FIELD_FLOAT;
    case ENG_DT_FLOAT:
        return FIELD_FLOAT;
    case ENG_DT_INT64:
        return FIELD_INT64;
    case ENG_DT_COMPLEX128:
        *per_element = 2;
        return FIELD_DOUBLE;
    case ENG_DT_DOUBLE:
        return FIELD_DOUBLE;
    case ENG_DT_UINT32:
    case ENG_DT_UINT64:
        return FIELD_UINT64;
    default:
        return FIELD_INT32;
    }
}

static size_t field_count(const Onnx__TensorProto *tp, typed_field_t f, const char **name)
{
    switch (f) {
    case FIELD_FLOAT:
        *name = "float_data";
        return tp->n_float_data;
    case FIELD_INT64:
        *name = "int64_data";
        return tp->n_int64_data;
    case FIELD_DOUBLE:
        *name = "double_data";
        return tp->n_double_data;
    case FIELD_UINT64:
        *name = "uint64_data";
        return tp->n_uint64_data;
    case FIELD_INT32:
        break;
    }
    *name = "int32_data";
    return tp->n_int32_data;
}

static bool is_external(const Onnx__TensorProto *tp)
{
    return tp->has_data_location &&
           tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/* raw_data is the encoding unless it is empty and a typed field is not. */
static bool uses_raw(const Onnx__TensorProto *tp, size_t typed_count)
{
    return tp->has_raw_data && (tp->raw_data.len > 0 || typed_count == 0);
}

/* An external_data reference: onnx.proto's keys location, offset, length
 * (checksum and unknown keys are ignored). */
typedef struct ext_ref {
    const char *location;
    uint64_t offset;
} ext_ref_t;

/* A decimal number of an external_data key; false when not one. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* The location must name a file under the model's directory: relative, and
 * no ".." component. Symlinks that leave the directory are caught when the
 * file is opened (ext_read). */
static int check_location(const char *loc, const char *label)
{
    if (loc[0] == '/')
        return fs_err(FS_EINVAL, "%s: external data location '%s' is an absolute path; it must be "
                      "relative to the model's directory", label, loc);
    for (const char *p = loc; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return fs_err(FS_EINVAL, "%s: external data location '%s' contains '..'; it must stay "
                          "inside the model's directory", label, loc);
        p += n;
        p += *p == '/';
    }
    return 0;
}

/* Reads and checks tp's external_data keys; 0 and *out, or an error as
 * onnx_tensor_info documents. */
static int ext_parse(const Onnx__TensorProto *tp, const char *label, size_t bytes, ext_ref_t *out)
{
    ext_ref_t e = {0};
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        if (!kv->key)
            continue;
        uint64_t length;
        if (strcmp(kv->key, "location") == 0) {
            e.location = kv->value;
        } else if (strcmp(kv->key, "offset") == 0) {
            if (!parse_u64(kv->value, &e.offset))
                return fs_err(FS_EPARSE, "%s: external_data offset '%s' is not a byte count", label,
                              kv->value ? kv->value : "");
        } else if (strcmp(kv->key, "length") == 0) {
            if (!parse_u64(kv->value, &length))
                return fs_err(FS_EPARSE, "%s: external_data length '%s' is not a byte count", label,
                              kv->value ? kv->value : "");
            if (length != bytes)
                return fs_err(FS_EPARSE, "%s: external_data length %llu does not match its dims "
                              "and dtype (%zu bytes)", label, (unsigned long long)length, bytes);
        }
    }
    if (!e.location || !e.location[0])
        return fs_err(FS_EPARSE, "%s: data_location is EXTERNAL but external_data has no location",
                      label);
    int rc = check_location(e.location, label);
    if (rc != 0)
        return rc;
    *out = e;
    return 0;
}

int onnx_tensor_info(const Onnx__TensorProto *tp, const char *label, onnx_tensor_info_t *out)
{
    char s[96];
    if (!tp->has_data_type || tp->data_type == ENG_DT_UNDEFINED)
        return fs_err(FS_EPARSE, "%s has no data_type", label);
    eng_dtype_t dt = (eng_dtype_t)tp->data_type;
    if (dt == ENG_DT_STRING)
        return fs_err(FS_ENOTSUP, "%s is a string tensor; string tensors are not supported", label);
    size_t es = eng_dtype_size(dt);
    if (es == 0)
        return fs_err(FS_ENOTSUP, "%s has data_type %d, which is not supported", label,
                      (int)tp->data_type);
    if (tp->segment)
        return fs_err(FS_ENOTSUP, "%s is segmented; segmented tensors are not supported", label);
    if (tp->n_dims > ENG_MAX_RANK)
        return fs_err(FS_ENOTSUP, "%s has rank %zu; at most %d is supported", label, tp->n_dims,
                      ENG_MAX_RANK);
    onnx_tensor_info_t info = {.dtype = dt, .shape.rank = (int)tp->n_dims};
    uint64_t numel = 1;
    bool zero = false, too_big = false;
    for (size_t i = 0; i < tp->n_dims; i++) {
        int64_t d = tp->dims[i];
        if (d < 0)
            return fs_err(FS_EPARSE, "%s has a negative dimension (%lld)", label, (long long)d);
        info.shape.dims[i] = d;
        if (d == 0)
            zero = true;
        else if (too_big || numel > SIZE_MAX / es / (uint64_t)d)
            too_big = true;
        else
            numel *= (uint64_t)d;
    }
    eng_shape_format(&info.shape, s, sizeof s);
    if (zero)
        numel = 0;
    else if (too_big)
        return fs_err(FS_EPARSE, "%s: shape %s is too large", label, s);
    /* Empty or not, dims past the bound would overflow the ops' shape
     * arithmetic (a Flatten of [0, 2^40, 2^40] multiplies the last two). */
    if (!eng_shape_bounded(&info.shape))
        return fs_err(FS_EPARSE, "%s: shape %s is too large (its non-zero dims multiply past "
                      "%lld elements)", label, s, (long long)ENG_NUMEL_MAX);
    info.bytes = (size_t)numel * es;

    size_t per, count;
    const char *fname;
    typed_field_t field = field_of(dt, &per);
    count = field_count(tp, field, &fname);
    if (is_external(tp)) {
        ext_ref_t e;
        int rc = ext_parse(tp, label, info.bytes, &e);
        if (rc != 0)
            return rc;
    } else if (uses_raw(tp, count)) {
        if (count > 0)
            return fs_err(FS_EPARSE, "%s has both raw_data and %s", label, fname);
        if (tp->raw_data.len != info.bytes)
            return fs_err(FS_EPARSE, "%s: raw_data holds %zu bytes, but %s %s needs %zu", label,
                          tp->raw_data.len, eng_dtype_name(dt), s, info.bytes);
    } else if (count != numel * per) {
        return fs_err(FS_EPARSE, "%s: %s holds %zu values, but %s %s needs %llu", label, fname,
                      count, eng_dtype_name(dt), s, (unsigned long long)(numel * per));
    }
    *out = info;
    return 0;
}

/* pread until n bytes are in or the file ends. */
static int read_full(int fd, void *dst, size_t n, uint64_t offset)
{
    char *p = dst;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? errno : EIO;
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return 0;
}

/* Reads an external tensor's bytes from dir/location, after checking that
 * the resolved path stays inside the resolved dir. */
static int ext_read(const ext_ref_t *e, const char *label, const char *dir, void *dst,
                    size_t bytes)
{
    if (!dir)
        return fs_err(FS_EINVAL, "%s: data is in external file '%s', but no model directory was "
                      "given to find it in", label, e->location);
    int rc = 0, fd = -1;
    char *path = NULL, *real = NULL;
    char *real_dir = realpath(dir, NULL);
    if (!real_dir) {
        rc = fs_err(FS_EIO, "%s: model directory '%s': %s", label, dir, strerror(errno));
        goto done;
    }
    size_t dlen = strlen(dir), llen = strlen(e->location);
    if (!(path = malloc(dlen + llen + 2))) {
        rc = fs_err(FS_ENOMEM, "%s: out of memory for an external data path", label);
        goto done;
    }
    memcpy(path, dir, dlen);
    path[dlen] = '/';
    memcpy(path + dlen + 1, e->location, llen + 1);
    if (!(real = realpath(path, NULL))) {
        rc = fs_err(FS_EIO, "%s: external data file '%s' in '%s': %s", label, e->location, dir,
                    strerror(errno));
        goto done;
    }
    size_t rdl = strlen(real_dir);
    bool inside = strncmp(real, real_dir, rdl) == 0 &&
                  (real[rdl] == '/' || (rdl == 1 && real_dir[0] == '/'));
    if (!inside) {
        rc = fs_err(FS_EINVAL, "%s: external data location '%s' resolves to '%s', outside the "
                    "model's directory '%s'", label, e->location, real, real_dir);
        goto done;
    }
    struct stat st;
    if ((fd = open(real, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) != 0) {
        rc = fs_err(FS_EIO, "%s: external data file '%s': %s", label, e->location, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = fs_err(FS_EIO, "%s: external data location '%s' is not a regular file", label,
                    e->location);
        goto done;
    }
    uint64_t size = (uint64_t)st.st_size;
    /* The model's fault (a truncated file, a wrong offset): FS_EPARSE, a
     * 400-class answer, not an I/O error of the server's. */
    if (e->offset > size || bytes > size - e->offset) {
        rc = fs_err(FS_EPARSE, "%s: external data file '%s' holds %llu bytes, but offset %llu + "
                    "length %zu runs past its end", label, e->location, (unsigned long long)size,
                    (unsigned long long)e->offset, bytes);
        goto done;
    }
    int err = read_full(fd, dst, bytes, e->offset);
    if (err != 0)
        rc = fs_err(FS_EIO, "%s: reading external data file '%s': %s", label, e->location,
                    strerror(err));
done:
    if (fd >= 0)
        close(fd);
    free(real);
    free(path);
    free(real_dir);
    return rc;
}

/* Narrows int32_data to the dtype's width (onnx.proto stores each of these
 * dtypes' bit pattern in the low bits of an int32). */
static void copy_int32_field(const Onnx__TensorProto *tp, eng_dtype_t dt, void *dst, size_t n)
{
    const int32_t *src = tp->int32_data;
    switch (eng_dtype_size(dt)) {
    case 1:
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)dst)[i] = dt == ENG_DT_BOOL ? src[i] != 0 : (uint8_t)src[i];
        break;
    case 2:
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = (uint16_t)src[i];
        break;
    default:
        memcpy(dst, src, n * sizeof *src);
        break;
    }
}

int onnx_tensor_read(const Onnx__TensorProto *tp, const onnx_tensor_info_t *info,
                     const char *label, const char *dir, void *dst)
{
    if (is_external(tp)) {
        ext_ref_t e;
        int rc = ext_parse(tp, label, info->bytes, &e);
        return rc != 0 ? rc : ext_read(&e, label, dir, dst, info->bytes);
    }
    if (info->bytes == 0)
        return 0;
    size_t per, count;
    const char *fname;
    typed_field_t field = field_of(info->dtype, &per);
    count = field_count(tp, field, &fname);
    if (uses_raw(tp, count)) {
        memcpy(dst, tp->raw_data.data, info->bytes);
        return 0;
    }
    switch (field) {
    case FIELD_FLOAT:
        memcpy(dst, tp->float_data, info->bytes);
        break;
    case FIELD_INT64:
        memcpy(dst, tp->int64_data, info->bytes);
        break;
    case FIELD_DOUBLE:
        memcpy(dst, tp->double_data, info->bytes);
        break;
    case FIELD_UINT64:
        if (info->dtype == ENG_DT_UINT32)
            for (size_t i = 0; i < count; i++)
                ((uint32_t *)dst)[i] = (uint32_t)tp->uint64_data[i];
        else
            memcpy(dst, tp->uint64_data, info->bytes);
        break;
    case FIELD_INT32:
        copy_int32_field(tp, info->dtype, dst, count);
        break;
    }
    return 0;
}

int eng_tensor_load_proto(const void *data, size_t len, eng_tensor_t **out, char **name)
{
    if (!out || (!data && len > 0))
        return fs_err(FS_EINVAL, "eng_tensor_load_proto: no data or no output");
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, data);
    if (!tp)
        return fs_err(FS_EPARSE, "not a valid ONNX TensorProto (%zu bytes): corrupt or truncated",
                      len);
    char label[160];
    if (tp->name && tp->name[0])
        snprintf(label, sizeof label, "tensor '%.128s'", tp->name);
    else
        snprintf(label, sizeof label, "tensor");
    eng_tensor_t *t = NULL;
    char *copy = NULL;
    onnx_tensor_info_t info;
    int rc = onnx_tensor_info(tp, label, &info);
    if (rc == 0)
        rc = eng_tensor_alloc_host(info.dtype, &info.shape, &t);
    if (rc == 0)
        rc = onnx_tensor_read(tp, &info, label, NULL, t->data);
    if (rc == 0 && name && tp->name && tp->name[0] && !(copy = strdup(tp->name)))
        rc = fs_err(FS_ENOMEM, "%s: out of memory for its name", label);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    if (rc != 0) {
        eng_tensor_free(t);
        return rc;
    }
    *out = t;
    if (name)
        *name = copy;
    return 0;
}
