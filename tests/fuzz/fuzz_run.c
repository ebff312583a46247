/* fuzz_run.c -- fuzz target "run": the bytes loaded as a model on the CPU
 * (eng_model_load_bytes: the loader, constant folding, fusion) over a
 * cache limited to 64 MiB and, when it loads and is small, one inference:
 * shape inference, the memory plan, the kernels, the executor.
 *
 * Inputs come from the model's declared inputs: a fixed dim as declared, a
 * symbolic dim 1..3 (one value per symbol name), an unknown dim 2, an
 * undeclared shape [2], an undeclared dtype float. Their data is
 * deterministic, chosen by a hash of the bytes: mostly small values
 * (floats in [-1.25, 1.25], integers -1..3), and for one model in four the
 * edge values (NaN, infinities, 1e30, denormals, the integer extremes),
 * which reach the kernels' conversions and index checks.
 *
 * Bounded time per input: models over RUN_MAX_BYTES are skipped, and so
 * are those whose weights after folding pass RUN_MAX_WEIGHT_BYTES, whose
 * inputs pass RUN_MAX_INPUT_ELEMS elements, or whose plan needs more than
 * RUN_MAX_ACTIVATION_BYTES of activations; with every tensor that small,
 * even a convolution or a matrix product does at most a few hundred
 * million multiply-adds. A Loop runs at most RUN_LOOP_ITERATIONS_MAX
 * iterations (the model's max_loop_iterations): more fail with FS_ERANGE.
 *
 * Checks: refusals (load, plan, run) are documented codes with a message;
 * a run returns one host tensor per output holding its bytes (read whole:
 * a short buffer shows under ASan); the activations' owner is back to zero
 * bytes after the run, and the cache after the model is destroyed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz.h"

#define RUN_CACHE_LIMIT_BYTES ((size_t)64 << 20)
#define RUN_MAX_BYTES ((size_t)64 << 10)
#define RUN_MAX_WEIGHT_BYTES ((int64_t)256 << 10)
#define RUN_MAX_INPUT_ELEMS ((int64_t)16 << 10)
#define RUN_MAX_ACTIVATION_BYTES ((size_t)256 << 10)
#define RUN_MAX_INPUTS 16
#define RUN_LOOP_ITERATIONS_MAX 256

/* The value of symbolic dim `param`: 1..3, the same for one name. */
static int64_t dim_value(const char *param, uint64_t seed)
{
    if (!param)
        return 2;
    uint64_t h = fuzz_hash((const uint8_t *)param, strlen(param)) ^ seed;
    return 1 + (int64_t)(h % 3);
}

/* The shape fed to input `io`; false when it would be too large. */
static bool input_shape(const eng_io_info_t *io, uint64_t seed, eng_shape_t *out)
{
    memset(out, 0, sizeof *out);
    if (io->rank < 0) {
        out->rank = 1;
        out->dims[0] = 2;
        return true;
    }
    out->rank = io->rank;
    int64_t numel = 1;
    for (int d = 0; d < io->rank; d++) {
        out->dims[d] = io->dims[d] >= 0 ? io->dims[d] : dim_value(io->dim_params[d], seed);
        if (out->dims[d] > RUN_MAX_INPUT_ELEMS)
            return false;
        numel *= out->dims[d];
        if (numel > RUN_MAX_INPUT_ELEMS)
            return false;
    }
    return true;
}

/* Element i of an input, as a double and as an integer, in mode `edge`
 * (the edge values) or not. */
static double value_real(size_t i, bool edge)
{
    static const double edges[] = {0.0, -0.0, 1.0, -1.0, NAN, INFINITY, -INFINITY, 1e30, -1e30,
                                   1e-40, 3.4e38, 0.5};
    if (edge)
        return edges[i % (sizeof edges / sizeof edges[0])];
    return (double)((int)((i * 7 + 3) % 11) - 5) * 0.25;
}

static int64_t value_int(size_t i, bool edge)
{
    static const int64_t edges[] = {0, 1, -1, INT64_MAX, INT64_MIN, 2, INT32_MAX, INT32_MIN, 3};
    if (edge)
        return edges[i % (sizeof edges / sizeof edges[0])];
    return (int64_t)(i % 5) - 1;
}

/* Element i of a string input: numbers in ONNX's text forms, text that
 * is no number, and (edge) the forms at the parser's limits. */
static const char *value_text(size_t i, bool edge)
{
    static const char *const plain[] = {"0", "1", "-1.5", "2.25", "abc", "", " 3 ", "-0"};
    static const char *const edges[] = {"NaN", "INF", "-inf", "1e400", "-1e-400", "0x10",
                                        "18446744073709551616", "-9223372036854775809",
                                        "123456789012345678901234"};
    if (edge)
        return edges[i % (sizeof edges / sizeof edges[0])];
    return plain[i % (sizeof plain / sizeof plain[0])];
}

/* Fills t (allocated host tensor) with its values. */
static void input_fill(eng_tensor_t *t, bool edge)
{
    size_t n = (size_t)eng_shape_numel(&t->shape);
    if (t->dtype == ENG_DT_STRING) {
        /* Records as the codec makes them: every text fits inline. */
        eng_string_t *s = t->data;
        for (size_t i = 0; i < n; i++) {
            const char *text = value_text(i, edge);
            s[i] = (eng_string_t){.len = strlen(text)};
            memcpy(s[i].u.bytes, text, s[i].len);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double r = value_real(i, edge);
        int64_t v = value_int(i, edge);
        switch (t->dtype) {
        case ENG_DT_FLOAT: ((float *)t->data)[i] = (float)r; break;
        case ENG_DT_DOUBLE: ((double *)t->data)[i] = r; break;
        case ENG_DT_INT64: ((int64_t *)t->data)[i] = v; break;
        case ENG_DT_INT32: ((int32_t *)t->data)[i] = (int32_t)v; break;
        case ENG_DT_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(v & 1); break;
        default: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
        }
    }
    /* Wider dtypes the engine refuses get a deterministic pattern too. */
    if (t->dtype != ENG_DT_FLOAT && t->dtype != ENG_DT_DOUBLE && t->dtype != ENG_DT_INT64 &&
        t->dtype != ENG_DT_INT32 && t->dtype != ENG_DT_BOOL && t->dtype != ENG_DT_UINT8)
        for (size_t k = 0; k < eng_tensor_bytes(t); k++)
            ((uint8_t *)t->data)[k] = (uint8_t)(k * 37 + 1);
}

/* Reads every output byte; each output must be there. */
static int outputs_check(eng_tensor_t **outs, size_t n)
{
    unsigned sum = 0;
    for (size_t j = 0; j < n; j++) {
        if (!outs[j])
            return fs_err(FS_ESTATE, "eng_model_run succeeded without output %zu", j);
        size_t bytes = eng_tensor_bytes(outs[j]);
        if (bytes && !outs[j]->data)
            return fs_err(FS_ESTATE, "output %zu has %zu bytes and no data", j, bytes);
        for (size_t k = 0; k < bytes; k++)
            sum += ((const uint8_t *)outs[j]->data)[k];
    }
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}

/* Plans and runs the loaded model once, unless it is too large. */
static int model_run(eng_model_t *m, uint64_t seed)
{
    static const int run_codes[] = {FS_EINVAL, FS_ENOMEM, FS_ENOTSUP, FS_ERANGE};
    size_t n_in = eng_model_n_inputs(m), n_out = eng_model_n_outputs(m);
    if (n_in > RUN_MAX_INPUTS)
        return 0;
    alloc_owner_stats_t os;
    if (alloc_cache_owner_stats(eng_model_cache(m), eng_model_owner(m), &os) != 0)
        return fs_err(FS_ESTATE, "the model's owner has no stats: %s", fs_errmsg());
    if (os.allocated.current > RUN_MAX_WEIGHT_BYTES)
        return 0;
    eng_shape_t shapes[RUN_MAX_INPUTS];
    eng_tensor_t *ins[RUN_MAX_INPUTS] = {NULL};
    eng_tensor_t views[RUN_MAX_INPUTS];
    for (size_t i = 0; i < n_in; i++) {
        eng_io_info_t io;
        if (eng_model_input(m, i, &io) != 0)
            return fs_err(FS_ESTATE, "model input %zu has no info: %s", i, fs_errmsg());
        if (!input_shape(&io, seed, &shapes[i]))
            return 0;
    }
    eng_plan_info_t pi;
    fs_err_clear();
    int rc = eng_model_plan_info(m, shapes, n_in, &pi);
    if (rc != 0)
        return fuzz_refusal_check("eng_model_plan_info", rc, run_codes, 4);
    if (pi.activation_bytes > RUN_MAX_ACTIVATION_BYTES)
        return 0;
    bool edge = seed % 4 == 3;
    for (size_t i = 0; i < n_in && rc == 0; i++) {
        eng_io_info_t io;
        eng_model_input(m, i, &io);
        eng_dtype_t dt = io.dtype != ENG_DT_UNDEFINED ? io.dtype : ENG_DT_FLOAT;
        rc = eng_tensor_alloc_host(dt, &shapes[i], &ins[i]);
        if (rc == 0) {
            input_fill(ins[i], edge);
            views[i] = *ins[i];
        }
    }
    eng_tensor_t **outs = calloc(n_out + 1, sizeof *outs);
    if (rc == 0 && !outs)
        rc = fs_err(FS_ENOMEM, "out of memory for %zu outputs", n_out);
    if (rc == 0) {
        fs_err_clear();
        rc = eng_model_run(m, views, n_in, outs);
        if (rc != 0)
            rc = fuzz_refusal_check("eng_model_run", rc, run_codes, 4);
        else
            rc = outputs_check(outs, n_out);
        for (size_t j = 0; outs && j < n_out; j++)
            eng_tensor_free(outs[j]);
    }
    free(outs);
    for (size_t i = 0; i < n_in; i++)
        eng_tensor_free(ins[i]);
    if (rc == 0 && alloc_cache_owner_stats(eng_model_cache(m), eng_model_activation_owner(m),
                                           &os) == 0 && os.allocated.current != 0)
        rc = fs_err(FS_ESTATE, "%lld activation bytes stay allocated after the run",
                    (long long)os.allocated.current);
    return rc;
}

int fuzz_run_one(const uint8_t *data, size_t size)
{
    static const int load_codes[] = {FS_EPARSE, FS_ENOTSUP, FS_EINVAL, FS_EIO, FS_ENOMEM};
    if (size > RUN_MAX_BYTES)
        return 0;
    alloc_cache_config_t cc = {.name = "fuzz", .max_reserved_bytes = RUN_CACHE_LIMIT_BYTES};
    eng_memory_t mem = {0};
    int rc = eng_memory_open(NULL, &cc, &mem);
    if (rc != 0)
        return rc;
    eng_model_config_t mc = {.name = "fuzz", .cache = mem.cache, .max_plans = 2, .n_threads = 1,
                             .max_loop_iterations = RUN_LOOP_ITERATIONS_MAX};
    eng_model_t *m = NULL;
    fs_err_clear();
    rc = eng_model_load_bytes(data, size, NULL, &mc, &m);
    if (rc != 0)
        rc = m ? fs_err(FS_ESTATE, "eng_model_load_bytes failed and returned a model")
               : fuzz_refusal_check("eng_model_load_bytes", rc, load_codes, 5);
    else
        rc = model_run(m, fuzz_hash(data, size));
    eng_model_destroy(m);
    int zero = fuzz_cache_check_zero(mem.cache, "after eng_model_destroy");
    eng_memory_close(&mem);
    return rc ? rc : zero;
}
