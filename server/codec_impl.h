/* codec_impl.h -- the request codec's two readers and what they share:
 * codec.c's cJSON path, which reads every request and words every error,
 * and codec_fast.c's strict reader of the common request, tried first,
 * which hands anything it does not recognise to the cJSON path. Only the
 * codec's files, its tests and its fuzzer include it.
 *
 * Threading: pure functions over their arguments. */
#ifndef FS_SERVER_CODEC_IMPL_H
#define FS_SERVER_CODEC_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The binary section of a body (Triton's binary tensor extension) and how
 * much of it the inputs read so far took. */
typedef struct srv_binary_section {
    const uint8_t *data;
    size_t len, used;
} srv_binary_section_t;

/* FLT_MAX plus half an ulp: a double at or beyond it rounds to infinity. */
#define SRV_FLOAT_OVERFLOW 0x1.ffffffp127

/* Stores JSON number d at index i of dst, a tensor of dtype dt, with the
 * codec's checks for the dtype (range, integrality; BOOL takes no number).
 * 0, or FS_EINVAL with a message naming `label` ("input 'x'"), the value
 * and the index; dst[i] is then unspecified. */
int srv_codec_number_put_any(const char *label, eng_dtype_t dt, void *dst, size_t i, double d);

/* The same, with FP32's common case inline: a finite value inside FP32's
 * range is stored as it rounds; the rest (NaN, infinity, out of range,
 * other dtypes) takes srv_codec_number_put_any. */
static inline int srv_codec_number_put(const char *label, eng_dtype_t dt, void *dst, size_t i,
                                       double d)
{
    if (dt == ENG_DT_FLOAT && fabs(d) < SRV_FLOAT_OVERFLOW) {
        ((float *)dst)[i] = (float)d;
        return 0;
    }
    return srv_codec_number_put_any(label, dt, dst, i, d);
}

/* t's data from the next `bytes` of the binary section, whose
 * "binary_data_size" said `size` (a non-negative integer): a view of them
 * (*borrowed set) where they start SRV_BINARY_VIEW_ALIGN-aligned, else an
 * aligned copy (t->data malloc'ed). 0, or FS_EINVAL (size is not bytes,
 * too few bytes left, a BOOL byte neither 0 nor 1) / FS_ENOMEM, naming
 * `label`; nothing is taken or allocated on error. */
int srv_codec_binary_take(const char *label, double size, size_t bytes, srv_binary_section_t *bin,
                          eng_tensor_t *t, bool *borrowed);

/* 0 when no output of r is requested twice, else FS_EINVAL naming one
 * (FS_ENOMEM when the check cannot allocate). */
int srv_codec_outputs_check_unique(const srv_infer_request_t *r);

/* The cJSON path alone: srv_infer_request_parse's contract, reading
 * every body codec_fast.c would also read, and every other. */
int srv_infer_request_parse_tree(const void *body, size_t len, size_t header_len,
                                 srv_infer_request_t **out);

/* codec_fast.c's reader alone, over a body whose first json_len bytes
 * (1 to len) are JSON. true and *out (caller frees with
 * srv_infer_request_free) when it recognised the whole text and the
 * request is valid: *out then holds what srv_infer_request_parse_tree
 * returns for the same body. false, with nothing allocated and this
 * thread's error message unspecified, for anything else: a request it does
 * not read (an unknown or repeated key, an escape in a string, a nested or
 * non-numeric "data", ...), one the cJSON path would refuse, or no memory;
 * the caller then asks the cJSON path, which gives the answer and words
 * any error. */
bool srv_infer_request_parse_fast(const void *body, size_t len, size_t json_len,
                                  srv_infer_request_t **out);

#ifdef __cplusplus
}
#endif
#endif
