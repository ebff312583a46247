/* codec.h -- the KServe v2 / Open Inference Protocol infer bodies, in JSON
 * and with Triton's binary tensor extension, both ways.
 *
 * A request body is a JSON object, or (binary extension) a JSON header of
 * `header_len` bytes -- the Inference-Header-Content-Length header --
 * followed by the raw bytes of every input whose
 * "parameters": {"binary_data_size": N} is set, in input order:
 *
 *   {"id": "7", "model": "mlp", "version": "1",
 *    "inputs": [{"name": "input", "shape": [2, 64], "datatype": "FP32",
 *                "data": [[...], [...]]}],               (nested or flat)
 *    "outputs": [{"name": "probabilities",
 *                 "parameters": {"binary_data": true}}],  (optional)
 *    "parameters": {"binary_data_output": true}}          (optional)
 *
 * ("model" and "version" are read only for flatserve's POST /infer.)
 * Datatypes: BOOL, UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64,
 * INT64, FP16, BF16, FP32, FP64; BYTES is refused as not supported. JSON
 * numbers are range-checked for the datatype (an integer type takes only
 * integral values in its range; BOOL takes true/false); FP16/BF16 values
 * are rounded to nearest even.
 *
 * The response is {"id", "model_name", "model_version", "outputs":
 * [{"name", "datatype", "shape", "data"}]}, flat data; outputs asked for in
 * binary carry "parameters": {"binary_data_size": N} instead of "data" and
 * their bytes follow the JSON in output order.
 *
 * Threading: pure functions over their arguments. */
#ifndef FS_SERVER_CODEC_H
#define FS_SERVER_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/tensor.h"
#include "server/buf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "FP32", "INT64", ...; NULL for a dtype the protocol has no name for. */
const char *srv_datatype_name(eng_dtype_t dt);
/* 0 and *out ("BYTES" is ENG_DT_STRING), or FS_EINVAL for a name the
 * protocol does not have (the message lists those it has). */
int srv_datatype_parse(const char *name, eng_dtype_t *out);

/* A binary input whose bytes start at this alignment in the body is not
 * copied: its tensor views the body (http.c's body_reserve places the
 * binary section so). */
#define SRV_BINARY_VIEW_ALIGN 64

/* A tensor's place in a system shared memory region (Triton's extension:
 * "parameters" shared_memory_region, _offset, _byte_size). */
typedef struct srv_infer_shm {
    char *region;                 /* owned; NULL: the tensor is not in shared memory */
    uint64_t offset;
    uint64_t byte_size;           /* an input's equals its tensor's bytes (checked at parse) */
} srv_infer_shm_t;

typedef struct srv_infer_input {
    char *name;
    eng_tensor_t tensor;          /* data: malloc'ed and owned, or (borrowed) in the body or a
                                   * region; NULL for one in shared memory until infer.c
                                   * resolves it */
    bool borrowed;                /* data is not the input's to free (the body or a region
                                   * must outlive it) */
    srv_infer_shm_t shm;
} srv_infer_input_t;

typedef struct srv_infer_output {
    char *name;
    bool binary;                  /* requested as binary data (never with shm) */
    srv_infer_shm_t shm;          /* written there; the response carries no data for it */
} srv_infer_output_t;

typedef struct srv_infer_request {
    char *id;                     /* NULL when absent */
    char *model;                  /* "model" (POST /infer); NULL when absent */
    int64_t version;              /* "version" as a number or numeric string; -1 when absent */
    size_t n_inputs;
    srv_infer_input_t *inputs;
    size_t n_outputs;             /* 0: every model output, in model order */
    srv_infer_output_t *outputs;
    bool binary_output;           /* "parameters": {"binary_data_output": true} */
    uint64_t timeout_us;          /* "parameters": {"timeout": N} (Triton's, microseconds to
                                   * start running); 0: none */
    /* Triton's sequence batching: "parameters" sequence_id (a non-negative
     * integer, into seq_id, or a string, into seq_label, owned),
     * sequence_start, sequence_end (true or false). 0 and NULL: none. */
    uint64_t seq_id;
    char *seq_label;
    bool seq_start, seq_end;
} srv_infer_request_t;

/* Parses a request body. header_len 0: the whole body is JSON; else the
 * first header_len bytes are and the rest is binary tensor data, which must
 * be consumed exactly. 0 and *out (caller frees with
 * srv_infer_request_free), or FS_EPARSE (not JSON: where it stopped) /
 * FS_EINVAL (a missing or wrong field, a shape whose element count does not
 * match the data, a value out of range for its datatype, binary sizes that
 * do not add up: the message names the input and what was wrong); nothing
 * is allocated on error. A binary input may view `body` (its `borrowed`):
 * the body must outlive the request. */
int srv_infer_request_parse(const void *body, size_t len, size_t header_len,
                            srv_infer_request_t **out);
void srv_infer_request_free(srv_infer_request_t *r);

/* Triton's raw binary request (Inference-Header-Content-Length: 0; the
 * rule is in codec_raw.c): `body` is all the bytes of m's single input,
 * whose shape is deduced from `len` (`batched`: m batches, so its batch
 * dim is 1). 0 and *out, asking for every output in binary (caller frees
 * with srv_infer_request_free; its input may view `body`, which must
 * outlive it), or FS_EINVAL naming why not -- the model has several
 * inputs, a datatype the protocol cannot name, no declared shape, more
 * than one variable dim, or a byte count that does not fit -- or
 * FS_ENOMEM; nothing is allocated on error. */
int srv_infer_request_raw(const eng_model_t *m, const char *model_name, bool batched,
                          const void *body, size_t len, srv_infer_request_t **out);

/* Puts the request's inputs in the model's input order: views[i] (an array
 * of eng_model_n_inputs(m)) views the input named like model input i. 0,
 * or FS_EINVAL naming a model input that is missing, an input the model
 * does not have, a duplicate, or an input that does not fit the model's
 * declaration (eng_io_check's message, with protocol datatype names:
 * "input 'x': expected FP32 [batch,64], got INT64 [1,64] (wrong dtype)");
 * also every requested output must be one of the model's. */
int srv_infer_bind(const srv_infer_request_t *r, const eng_model_t *m, eng_tensor_t *views);
/* The same where `filled` (NULL: none; else one per model input) marks the
 * inputs the server fills (a sequence model's controls and state): a
 * request must not give them (FS_EINVAL naming the input), and their views
 * are left with dtype ENG_DT_UNDEFINED for the filler. */
int srv_infer_bind_filled(const srv_infer_request_t *r, const eng_model_t *m, const bool *filled,
                          eng_tensor_t *views);

/* Encodes the response for `outputs` (the model's n outputs, in model
 * order) as `r` asked: all outputs or the requested ones, each in JSON or
 * binary. Floats are written with enough digits to round-trip (%.9g for
 * FP32/FP16/BF16, %.17g for FP64); NaN and infinities, which JSON cannot
 * hold, are written as the strings "NaN", "Infinity", "-Infinity". 0 and
 * *out filled (*json_len: bytes of JSON at its start; equal to out->len
 * when nothing is binary), or FS_ENOMEM / FS_EINVAL (an output dtype the
 * protocol cannot name). */
int srv_infer_response_encode(const eng_model_t *m, const char *model_name, int64_t version,
                              const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                              size_t n, srv_buf_t *out, size_t *json_len);
/* The same response in two parts, so that the binary bytes go out from
 * the output tensors themselves: the JSON alone into *out (no binary bytes
 * appended; 0 or as above), and the model output indices whose bytes
 * follow it, in order, into idx (room for max(n, r->n_outputs); NULL only
 * counts them); returns how many. Call srv_infer_response_binary after a
 * successful encode. */
int srv_infer_response_encode_json(const eng_model_t *m, const char *model_name, int64_t version,
                                   const srv_infer_request_t *r, eng_tensor_t *const *outputs,
                                   size_t n, srv_buf_t *out);
size_t srv_infer_response_binary(const eng_model_t *m, const srv_infer_request_t *r, size_t n,
                                 size_t *idx);

#ifdef __cplusplus
}
#endif
#endif
