/* codec_bytes.h -- BYTES tensors (the engine's strings, engine/tensor.h) on
 * the wire: Triton's serialized layout for binary data, raw requests and
 * shared memory (each element a 4-byte little-endian length, then that
 * many bytes; binary_data_size is the whole serialized size), and JSON
 * "data" as a (nested) list of strings.
 *
 * A decoded tensor's data is one malloc'ed block, the records followed by
 * every long string's bytes (eng_tensor_pack_strings' layout), so it owns
 * all it points to and free(t->data) releases it, as for any decoded
 * input. JSON strings are written through srv_buf_json_string_n: bytes
 * that are not UTF-8 come out as U+FFFD there; binary output carries them
 * exactly.
 *
 * Threading: pure functions over their arguments. */
#ifndef FS_SERVER_CODEC_BYTES_H
#define FS_SERVER_CODEC_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/tensor.h"
#include "server/buf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* t->data (t->shape set, dtype string) from the serialized elements in
 * [src, src + len), which must hold exactly numel(t->shape) of them. 0, or
 * FS_EINVAL naming `label` and what is wrong (a length running past the
 * buffer, fewer elements than the shape, bytes left over) / FS_ENOMEM;
 * t->data is untouched on error. */
int srv_bytes_decode(const char *label, const uint8_t *src, size_t len, eng_tensor_t *t);

/* The byte codec.c puts in a JSON text's copy for each \u0000 escape, so
 * that cJSON keeps the strings whole (0xFF: never in UTF-8 text). */
#define SRV_BYTES_NUL_STANDIN 0xFF

/* t->data from a JSON "data" array of numel strings, nested or flat (the
 * caller checked the nesting). nul_mapped: the text was parsed with
 * SRV_BYTES_NUL_STANDIN for \u0000, which becomes NUL again. 0, or
 * FS_EINVAL naming the first leaf that is not a string (its index) or a
 * count other than numel / FS_ENOMEM; t->data is untouched on error. */
int srv_bytes_json_decode(const char *label, const cJSON *data, size_t numel, bool nul_mapped,
                          eng_tensor_t *t);

/* The serialized size of string tensor t; SIZE_MAX when it has none (an
 * element of 4 GiB or more, or past memory). Cannot fail. */
size_t srv_bytes_size(const eng_tensor_t *t);

/* Serializes t into dst, which holds srv_bytes_size(t) bytes (not
 * SIZE_MAX). Cannot fail. */
void srv_bytes_write(const eng_tensor_t *t, uint8_t *dst);

/* Appends t's elements as JSON strings, comma-separated (no brackets).
 * 0, or FS_ENOMEM (b failed). */
int srv_bytes_json_write(srv_buf_t *b, const eng_tensor_t *t);

/* A string output serialized into a new malloc'ed block (*out, *len):
 * what a binary response part or a shared memory region carries. 0, or
 * FS_EINVAL (no serialized form) / FS_ENOMEM naming `name`. */
int srv_bytes_serialize(const char *name, const eng_tensor_t *t, uint8_t **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
