/* codec_raw.c -- Triton's raw binary request: Inference-Header-Content-Length
 * 0 says the body holds no JSON at all, only the bytes of the model's one
 * input, whose shape is deduced from their count.
 *
 * The rule (Triton's binary data extension, "Raw Binary Request"): the
 * model has exactly one input, of a datatype the protocol names, with at
 * most one dim of variable size once a batching model's batch dim is taken
 * as 1 (the request is a batch of one); that dim is the byte count over
 * the bytes of one step of it, which must divide exactly; with no variable
 * dim the count must be the shape's bytes. A BYTES input takes the whole
 * body as its one element (no length prefix), so its shape must be [1]
 * past the batch dim, as in Triton. Every output is answered, in binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/codec.h"
#include "server/codec_impl.h"

/* The input's shape for `len` bytes of it: 0 and *shape, or FS_EINVAL
 * saying why none fits. */
static int raw_shape(const eng_io_info_t *io, bool batched, size_t len, eng_shape_t *shape)
{
    char decl[128];
    eng_io_info_format(io, decl, sizeof decl);
    const char *dt = srv_datatype_name(io->dtype);
    if (io->rank < 0)
        return fs_err(FS_EINVAL, "input '%s' declares no shape, so a raw binary request "
                      "(Inference-Header-Content-Length: 0) cannot deduce one; send a JSON "
                      "header", io->name);
    size_t step = eng_dtype_size(io->dtype);
    int var = -1;
    shape->rank = io->rank;
    for (int d = 0; d < io->rank; d++) {
        int64_t dim = io->dims[d];
        if (dim < 0 && d == 0 && batched)
            dim = 1; /* a batch of one */
        shape->dims[d] = dim;
        if (dim >= 0) {
            step = dim && step > SIZE_MAX / (size_t)dim ? SIZE_MAX : step * (size_t)dim;
            continue;
        }
        if (var >= 0)
            return fs_err(FS_EINVAL, "input '%s' has shape %s with more than one variable dim: a "
                          "raw binary request (Inference-Header-Content-Length: 0) can deduce "
                          "only one; send a JSON header", io->name, decl);
        var = d;
    }
    if (var < 0 && len != step)
        return fs_err(FS_EINVAL, "the raw binary request has %zu bytes but input '%s' (%s %s) "
                      "takes %zu", len, io->name, dt, decl, step);
    if (var >= 0 && (step == 0 || len % step != 0))
        return fs_err(FS_EINVAL, "the raw binary request has %zu bytes, not a whole number of "
                      "the %zu-byte steps of the variable dim of input '%s' (%s %s)", len, step,
                      io->name, dt, decl);
    if (var >= 0)
        shape->dims[var] = (int64_t)(len / step);
    return 0;
}

/* A BYTES input's shape for a raw request: the body is its one element,
 * so every dim (past a batching model's batch dim, taken as 1) must be 1,
 * as Triton requires. 0 and *shape, or FS_EINVAL in Triton's words. */
static int raw_bytes_shape(const eng_io_info_t *io, bool batched, eng_shape_t *shape)
{
    char decl[128];
    eng_io_info_format(io, decl, sizeof decl);
    bool one = io->rank >= 0;
    shape->rank = io->rank < 0 ? 0 : io->rank;
    for (int d = 0; one && d < io->rank; d++) {
        shape->dims[d] = 1;
        one = io->dims[d] == 1 || (d == 0 && batched && io->dims[d] < 0);
    }
    if (!one)
        return fs_err(FS_EINVAL, "For BYTE datatype raw input '%s', the model must have input "
                      "shape [1] (it has %s): a raw binary request (Inference-Header-Content-"
                      "Length: 0) carries one element; send a JSON header", io->name, decl);
    return 0;
}

/* The one element of a raw BYTES request: the whole body, copied into a
 * block the tensor owns (eng_tensor_pack_strings' layout). 0 or
 * FS_ENOMEM. */
static int raw_bytes_take(const char *label, const void *body, size_t len, eng_tensor_t *t)
{
    size_t tail = len > ENG_STRING_INLINE ? len : 0;
    if (tail > SIZE_MAX - sizeof(eng_string_t))
        return fs_err(FS_ENOMEM, "%s: %zu bytes are too many", label, len);
    eng_string_t *r = calloc(1, sizeof *r + tail);
    if (!r)
        return fs_err(FS_ENOMEM, "%s: cannot allocate %zu bytes", label, sizeof *r + tail);
    if (tail)
        memcpy(r + 1, body, len);
    eng_string_set(r, tail ? (const char *)(r + 1) : body, len);
    t->data = r;
    return 0;
}

int srv_infer_request_raw(const eng_model_t *m, const char *model_name, bool batched,
                          const void *body, size_t len, srv_infer_request_t **out)
{
    *out = NULL;
    size_t n_in = eng_model_n_inputs(m);
    if (n_in != 1)
        return fs_err(FS_EINVAL, "model '%s' has %zu inputs: a raw binary request "
                      "(Inference-Header-Content-Length: 0) is for a model with one; send a "
                      "JSON header", model_name, n_in);
    eng_io_info_t io;
    int rc = eng_model_input(m, 0, &io);
    if (rc != 0)
        return rc;
    if (!srv_datatype_name(io.dtype))
        return fs_err(FS_EINVAL, "input '%s' is of type %s, which a raw binary request cannot "
                      "carry", io.name, eng_dtype_name(io.dtype));
    eng_tensor_t t = {.dtype = io.dtype};
    if (io.dtype == ENG_DT_STRING)
        rc = raw_bytes_shape(&io, batched, &t.shape);
    else
        rc = raw_shape(&io, batched, len, &t.shape);
    if (rc != 0)
        return rc;
    srv_infer_request_t *r = calloc(1, sizeof *r);
    if (!r || !(r->inputs = calloc(1, sizeof *r->inputs)) ||
        !(r->inputs[0].name = strdup(io.name))) {
        srv_infer_request_free(r);
        return fs_err(FS_ENOMEM, "out of host memory for a raw binary request");
    }
    r->n_inputs = 1;
    r->version = -1;
    r->binary_output = true;
    char label[ENG_MAX_RANK + 160];
    snprintf(label, sizeof label, "input '%.128s'", io.name);
    srv_binary_section_t bin = {.data = body, .len = len};
    if (io.dtype == ENG_DT_STRING)
        rc = raw_bytes_take(label, body, len, &t);
    else
        rc = srv_codec_binary_take(label, (double)len, len, &bin, &t, &r->inputs[0].borrowed);
    if (rc != 0) {
        srv_infer_request_free(r);
        return rc;
    }
    r->inputs[0].tensor = t;
    *out = r;
    return 0;
}
