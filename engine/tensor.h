/* tensor.h -- dtypes, shapes and tensor views: the engine's common currency.
 *
 * Dtype values are ONNX's TensorProto.DataType numbers, so a model's type
 * fields map directly. An eng_tensor_t is a view: it never owns its data
 * unless a function says so. Shapes are concrete (every dim >= 0); symbolic
 * dims live in the IR (graph.h) and become concrete per input signature.
 *
 * Strings (ENG_DT_STRING): an element is a fixed 32-byte record,
 * eng_string_t, so every kernel that moves elements as bytes (Identity,
 * Reshape, Transpose, Gather, Concat, Slice, Expand, Split, the batcher's
 * concatenation) moves strings unchanged. A string of up to
 * ENG_STRING_INLINE bytes lives inside its record; a longer one points to
 * bytes that outlive every tensor holding the record: a request's decoded
 * body (a run's inputs), the model's weight memory (initializers), or the
 * tail of a packed host tensor (eng_tensor_pack_strings: the outputs a run
 * hands back, each owning its bytes). Inline storage is why a kernel that
 * makes strings of bounded length (Cast to string: at most 24 characters)
 * needs no memory beyond its output records, and why a copy of a record is
 * always a valid string while its source's memory lives. A zeroed record
 * is the empty string. Ops that would make unbounded new strings are
 * refused by name (eng_op_infer). Strings are host-only: a model with a
 * string value on a GPU is refused at load.
 *
 * Threading: pure functions and plain data. */
#ifndef FS_ENGINE_TENSOR_H
#define FS_ENGINE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct alloc_cache;

typedef enum eng_dtype {
    ENG_DT_UNDEFINED = 0,
    ENG_DT_FLOAT = 1,
    ENG_DT_UINT8 = 2,
    ENG_DT_INT8 = 3,
    ENG_DT_UINT16 = 4,
    ENG_DT_INT16 = 5,
    ENG_DT_INT32 = 6,
    ENG_DT_INT64 = 7,
    ENG_DT_STRING = 8,
    ENG_DT_BOOL = 9,
    ENG_DT_FLOAT16 = 10,
    ENG_DT_DOUBLE = 11,
    ENG_DT_UINT32 = 12,
    ENG_DT_UINT64 = 13,
    ENG_DT_COMPLEX64 = 14,
    ENG_DT_COMPLEX128 = 15,
    ENG_DT_BFLOAT16 = 16,
    /* ONNX's 8-bit floats (engine/float8.h): storage and Cast only. */
    ENG_DT_FLOAT8E4M3FN = 17,
    ENG_DT_FLOAT8E4M3FNUZ = 18,
    ENG_DT_FLOAT8E5M2 = 19,
    ENG_DT_FLOAT8E5M2FNUZ = 20,
} eng_dtype_t;

#define ENG_MAX_RANK 8

/* Bytes a string keeps inside its record. */
#define ENG_STRING_INLINE 24

/* One string element (see the header comment). len <= ENG_STRING_INLINE:
 * the bytes are u.bytes; longer: u.ptr (borrowed). Not NUL-terminated. */
typedef struct eng_string {
    uint64_t len;
    union {
        const char *ptr;
        char bytes[ENG_STRING_INLINE];
    } u;
} eng_string_t;

/* The bytes of s (len s->len). Cannot fail. */
static inline const char *eng_string_data(const eng_string_t *s)
{
    return s->len <= ENG_STRING_INLINE ? s->u.bytes : s->u.ptr;
}
/* Sets *s to the len bytes at p: copied inline when they fit, else
 * pointed to (p must outlive every copy of *s). Cannot fail. */
static inline void eng_string_set(eng_string_t *s, const char *p, uint64_t len)
{
    s->len = len;
    if (len <= ENG_STRING_INLINE) {
        for (uint64_t i = 0; i < len; i++)
            s->u.bytes[i] = p[i];
    } else {
        s->u.ptr = p;
    }
}
/* Whether a and b hold the same bytes. Cannot fail. */
bool eng_string_equal(const eng_string_t *a, const eng_string_t *b);

typedef struct eng_shape {
    int rank;                      /* 0 for a scalar */
    int64_t dims[ENG_MAX_RANK];
} eng_shape_t;

typedef struct eng_tensor {
    eng_dtype_t dtype;
    eng_shape_t shape;
    void *data;                    /* NULL where only the type is known */
} eng_tensor_t;

/* Whether dt is one of the four 8-bit float formats (engine/float8.h). */
static inline bool eng_dtype_is_float8(eng_dtype_t dt)
{
    return dt >= ENG_DT_FLOAT8E4M3FN && dt <= ENG_DT_FLOAT8E5M2FNUZ;
}

/* Bytes of one element (a string's record: sizeof(eng_string_t)); 0 for
 * undefined and unknown dtypes. */
size_t eng_dtype_size(eng_dtype_t dt);
/* "float", "int64", ...; "unknown" for values outside the table. Never
 * NULL. */
const char *eng_dtype_name(eng_dtype_t dt);
/* Whether the engine takes this dtype at all as a graph input, output or
 * value: bool, the signed and unsigned integers of 8 to 64 bits, float16,
 * bfloat16, float, double, the float8s and string. Each op narrows this further (its infer
 * hook names what it computes). */
bool eng_dtype_supported(eng_dtype_t dt);

/* Elements in the shape (1 for a scalar). Saturates at INT64_MAX. */
int64_t eng_shape_numel(const eng_shape_t *s);

/* The most elements one dim, or the product of a shape's non-zero dims,
 * may count: 2^48, past any memory by far, and low enough that the dims
 * arithmetic of shape inference (sums of a few dims, a dim times a small
 * factor, sub-products of one shape's dims) cannot overflow int64. A shape
 * past it comes only from a broken or hostile model or request: it is
 * refused where it enters (a request's input, a model's constant) or where
 * an op would make it (eng_op_infer). */
#define ENG_NUMEL_MAX ((int64_t)1 << 48)
/* Whether s has rank 0..ENG_MAX_RANK, every dim in 0..ENG_NUMEL_MAX and
 * the product of its non-zero dims at most ENG_NUMEL_MAX. (A zero dim does
 * not excuse the others: an op may multiply a subset of them.) */
bool eng_shape_bounded(const eng_shape_t *s);

/* a * b and a + b for an infer's dims and counts when a factor comes from a
 * model's attributes or data (Tile's repeats, Pad's pads): the result, or
 * INT64_MAX / INT64_MIN where it would overflow, which no bounded shape
 * holds, so the shape check refuses it. Cannot fail. */
static inline int64_t eng_dim_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}
static inline int64_t eng_dim_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return a < 0 ? INT64_MIN : INT64_MAX;
    return r;
}
bool eng_shape_equal(const eng_shape_t *a, const eng_shape_t *b);
/* "[1,3,224,224]" into buf (always terminated); returns buf. */
char *eng_shape_format(const eng_shape_t *s, char *buf, size_t len);
/* Numpy (ONNX multidirectional) broadcasting of a and b into *out. 0, or
 * FS_EINVAL with a message naming both shapes. */
int eng_shape_broadcast(const eng_shape_t *a, const eng_shape_t *b, eng_shape_t *out);
/* Row-major strides in elements. */
void eng_shape_strides(const eng_shape_t *s, int64_t strides[ENG_MAX_RANK]);

/* numel * dtype size, or 0 when unknown. */
size_t eng_tensor_bytes(const eng_tensor_t *t);

/* A host tensor that owns its data (malloc); caller frees with
 * eng_tensor_free. 0, or FS_ENOMEM / FS_EINVAL (unsized dtype). Data is
 * zeroed. */
int eng_tensor_alloc_host(eng_dtype_t dt, const eng_shape_t *shape, eng_tensor_t **out);
/* A host tensor whose data comes from `cache` under `owner` (a device's
 * pinned cache: a device-to-host copy lands there at full speed, and the
 * block is reused once freed); eng_tensor_free gives the data back to that
 * cache. Data is not zeroed. 0, or the cache's error (FS_ENOMEM at its
 * limit: the caller may fall back to eng_tensor_alloc_host), FS_EINVAL as
 * above. */
int eng_tensor_alloc_cached(struct alloc_cache *cache, uint32_t owner, eng_dtype_t dt,
                            const eng_shape_t *shape, eng_tensor_t **out);
/* eng_tensor_alloc_cached when `cache` is not NULL, the tensor has bytes
 * and the cache has room for them; else eng_tensor_alloc_host (zeroed).
 * Errors as eng_tensor_alloc_host. */
int eng_tensor_alloc_from(struct alloc_cache *cache, uint32_t owner, eng_dtype_t dt,
                          const eng_shape_t *shape, eng_tensor_t **out);
/* A host string tensor of `shape` holding copies of the n =
 * numel(shape) strings at src, each long one's bytes packed after the
 * records in the same block, so the tensor owns everything it points to
 * (it outlives src's memory). Caller frees with eng_tensor_free. 0, or
 * FS_ENOMEM / FS_EINVAL as eng_tensor_alloc_host. */
int eng_tensor_pack_strings(const eng_shape_t *shape, const eng_string_t *src,
                            eng_tensor_t **out);
/* Frees a tensor from eng_tensor_alloc_host or eng_tensor_alloc_cached
 * (struct and data); no other tensor may be passed. NULL: no-op. */
void eng_tensor_free(eng_tensor_t *t);

#ifdef __cplusplus
}
#endif
#endif
