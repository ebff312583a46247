/* io.c -- a model's inputs and outputs as its callers meet them: finding one
 * by name, and the one check of a tensor against an input's declaration
 * that the codec, the batcher and the planner all make, so a bad input
 * reads the same wherever it is caught. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/graph.h"

void eng_value_io_info(const eng_value_t *v, eng_io_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->rank = v->rank;
    for (int d = 0; d < v->rank && d < ENG_MAX_RANK; d++) {
        out->dims[d] = v->dims[d].value;
        out->dim_params[d] = v->dims[d].param;
    }
}

/* The index of the input (or output) of `m` called `name`, or -1. */
static long io_find(const eng_model_t *m, bool outputs, const char *name)
{
    size_t n = outputs ? eng_model_n_outputs(m) : eng_model_n_inputs(m);
    for (size_t k = 0; k < n; k++) {
        eng_io_info_t info;
        int rc = outputs ? eng_model_output(m, k, &info) : eng_model_input(m, k, &info);
        if (rc == 0 && strcmp(info.name, name) == 0)
            return (long)k;
    }
    return -1;
}

long eng_io_input_find(const eng_model_t *m, const char *name)
{
    return io_find(m, false, name);
}

long eng_io_output_find(const eng_model_t *m, const char *name)
{
    return io_find(m, true, name);
}

/* Why `t` does not fit `io`, into why[len]; false when it fits. */
static bool io_misfit(const eng_io_info_t *io, const eng_tensor_t *t, eng_dtype_namer_t name,
                      char *why, size_t len)
{
    if (io->dtype != ENG_DT_UNDEFINED && t->dtype != io->dtype) {
        snprintf(why, len, "wrong dtype");
        return true;
    }
    if (eng_dtype_size(t->dtype) == 0) {
        snprintf(why, len, "dtype %s is not supported", name(t->dtype));
        return true;
    }
    if (t->shape.rank < 0 || t->shape.rank > ENG_MAX_RANK) {
        snprintf(why, len, "rank %d; ranks 0 to %d", t->shape.rank, ENG_MAX_RANK);
        return true;
    }
    if (io->rank >= 0 && t->shape.rank != io->rank) {
        snprintf(why, len, "rank %d, not %d", t->shape.rank, io->rank);
        return true;
    }
    for (int d = 0; d < t->shape.rank; d++) {
        if (t->shape.dims[d] < 0) {
            snprintf(why, len, "dim %d is negative", d);
            return true;
        }
        if (io->rank >= 0 && io->dims[d] >= 0 && t->shape.dims[d] != io->dims[d]) {
            snprintf(why, len, "dim %d must be %lld", d, (long long)io->dims[d]);
            return true;
        }
    }
    if (!eng_shape_bounded(&t->shape)) {
        snprintf(why, len, "non-zero dims multiply past %lld elements", (long long)ENG_NUMEL_MAX);
        return true;
    }
    return false;
}

int eng_io_check(const eng_io_info_t *io, const char *model, const eng_tensor_t *t,
                 eng_dtype_namer_t dtype_name)
{
    eng_dtype_namer_t name = dtype_name ? dtype_name : eng_dtype_name;
    char why[64], want[256], got[192];
    if (!io_misfit(io, t, name, why, sizeof why))
        return 0;
    return fs_err(FS_EINVAL, "input '%s'%s%s%s: expected %s %s, got %s %s (%s)", io->name,
                  model ? " of model '" : "", model ? model : "", model ? "'" : "",
                  io->dtype != ENG_DT_UNDEFINED ? name(io->dtype) : "any dtype",
                  eng_io_info_format(io, want, sizeof want), name(t->dtype),
                  eng_shape_format(&t->shape, got, sizeof got), why);
}
