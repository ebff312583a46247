/* case.c -- runs one conformance case in this process: load, run every data
 * set, compare, destroy, and check the cache gave every byte back.
 *
 * Light models (ONNX's backend/test/data/light) come with an expected
 * output but no input files. ONNX's own test of them
 * (onnx/test/reference_evaluator_c_test.py, test_light_model) feeds
 * np.arange(N).reshape(shape) / N cast to float32, N the element count of
 * the declared input shape; so does this runner, element k being
 * (float)((double)k / N). Their weights are ConstantOfShape nodes, so a
 * model without inputs simply runs.
 *
 * Which comparison rule a case gets is decided from its path
 * (conf_case_rule); a model case's directory may carry its own atol_rel in
 * tolerance.txt. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/graph.h"
#include "tests/conformance/conformance.h"

/* How one case's outputs are judged: the run's tolerance with the case's
 * own atol_rel applied, and its rule. */
typedef struct case_judge {
    conf_tolerance_t tol;
    conf_rule_t rule;
} case_judge_t;

conf_rule_t conf_case_rule(const char *model_path)
{
    char resolved[PATH_MAX];
    const char *p = realpath(model_path, resolved) ? resolved : model_path;
    for (const char *s = p; (s = strstr(s, "node")) != NULL; s += 4) {
        bool starts = s == p || s[-1] == '/';
        if (starts && s[4] == '/')
            return CONF_RULE_NODE;
    }
    return CONF_RULE_MODEL;
}

/* Sets the result unless a FAIL is already recorded (the first failure is
 * the one worth reading). */
static void result_set(conf_result_t *r, conf_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void result_set(conf_result_t *r, conf_status_t status, const char *fmt, ...)
{
    if (r->status == CONF_FAIL)
        return;
    r->status = (int)status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
}

/* Reads a whole file. 0 and *out (caller frees), or FS_EIO / FS_ENOMEM with
 * a message naming the file; nothing allocated on error. */
static int file_read(const char *path, void **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fs_err(FS_EIO, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                return fs_err(FS_ENOMEM, "reading %s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return fs_err(FS_EIO, "cannot read %s", path);
    }
    *out = buf;
    *len = n;
    return 0;
}

/* Parses one TensorProto file. 0 and *out (caller frees with
 * eng_tensor_free) and *name (caller frees; may be NULL), or the loader's
 * error with its message; nothing allocated on error. */
static int proto_load(const char *path, eng_tensor_t **out, char **name)
{
    void *data = NULL;
    size_t len = 0;
    int rc = file_read(path, &data, &len);
    if (rc < 0)
        return rc;
    rc = eng_tensor_load_proto(data, len, out, name);
    free(data);
    return rc;
}

static bool file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* How many of PREFIX_0.pb, PREFIX_1.pb, ... exist in dir, counting until
 * the first gap. */
static size_t pb_count(const char *dir, const char *prefix)
{
    char path[4096];
    size_t n = 0;
    for (;; n++) {
        snprintf(path, sizeof path, "%s/%s_%zu.pb", dir, prefix, n);
        if (!file_exists(path))
            return n;
    }
}

/* The data set number K of a directory entry named test_data_set_K, or -1. */
static long data_set_number(const char *name)
{
    static const char prefix[] = "test_data_set_";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *digits = name + sizeof prefix - 1;
    char *end;
    long k = strtol(digits, &end, 10);
    return (*digits && !*end && k >= 0) ? k : -1;
}

static int long_cmp(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The data set numbers under dir, ascending. 0 and *out (caller frees) and
 * *n, or FS_EIO / FS_ENOMEM with a message; nothing allocated on error. */
static int data_sets_list(const char *dir, long **out, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return fs_err(FS_EIO, "cannot open directory %s", dir);
    long *ks = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long k = data_set_number(e->d_name);
        if (k < 0)
            continue;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            long *nk = realloc(ks, ncap * sizeof *nk);
            if (!nk) {
                free(ks);
                closedir(d);
                return fs_err(FS_ENOMEM, "listing %s: out of memory", dir);
            }
            ks = nk;
            cap = ncap;
        }
        ks[count++] = k;
    }
    closedir(d);
    if (count)
        qsort(ks, count, sizeof *ks, long_cmp);
    *out = ks;
    *n = count;
    return 0;
}

/* Records a failed engine or file call: SKIP for FS_ENOTSUP (outside the
 * supported set), FAIL otherwise. */
static void result_error(conf_result_t *r, int rc, const char *where)
{
    if (rc == FS_ENOTSUP)
        result_set(r, CONF_SKIP, "%s", fs_errmsg());
    else
        result_set(r, CONF_FAIL, "%s: %s: %s", where, fs_errname(rc), fs_errmsg());
}

/* Records the plan's bytes against its lower bound for these inputs, when
 * the plan is static; the ratio is reported, not judged, so a model with
 * more inputs than this holds, or without a static plan, is left out. */
static void plan_record(eng_model_t *m, const eng_tensor_t *inputs, size_t n, conf_result_t *r)
{
    eng_shape_t shapes[64];
    if (n > sizeof shapes / sizeof shapes[0])
        return;
    for (size_t i = 0; i < n; i++)
        shapes[i] = inputs[i].shape;
    eng_plan_info_t info;
    if (eng_model_plan_info(m, shapes, n, &info) < 0 || info.dynamic ||
        info.lower_bound_bytes == 0)
        return;
    double ratio = (double)info.activation_bytes / (double)info.lower_bound_bytes;
    if (ratio > r->plan_ratio) {
        r->plan_ratio = ratio;
        r->plan_bytes = info.activation_bytes;
    }
}

/* Runs the model on `inputs` and compares with `expected` (n_expected
 * tensors). `where` prefixes messages. The result is recorded in r. */
static void run_compare(eng_model_t *m, const eng_tensor_t *inputs, size_t n_inputs,
                        eng_tensor_t *const *expected, size_t n_expected,
                        const case_judge_t *judge, const char *where, conf_result_t *r)
{
    size_t n_out = eng_model_n_outputs(m);
    if (n_expected != n_out) {
        result_set(r, CONF_FAIL, "%s: %zu expected outputs, the model has %zu", where,
                   n_expected, n_out);
        return;
    }
    eng_tensor_t **outs = calloc(n_out ? n_out : 1, sizeof *outs);
    if (!outs) {
        result_set(r, CONF_FAIL, "%s: out of memory", where);
        return;
    }
    int rc = eng_model_run(m, inputs, n_inputs, outs);
    if (rc < 0) {
        char what[300];
        snprintf(what, sizeof what, "%s: run", where);
        result_error(r, rc, what);
        free(outs);
        return;
    }
    for (size_t j = 0; j < n_out; j++) {
        eng_io_info_t info;
        const char *name = eng_model_output(m, j, &info) == 0 ? info.name : "?";
        char msg[CONF_TEXT_MAX - 320];
        if (!outs[j]) {
            result_set(r, CONF_FAIL, "%s: output %zu '%s' was not returned", where, j, name);
            break;
        }
        /* Every output is compared, past a mismatch too, so the worst
         * error reported covers them all; the first mismatch is the one
         * the result keeps. */
        if (!conf_tensor_compare(expected[j], outs[j], &judge->tol, judge->rule, j, name,
                                 &r->error, msg, sizeof msg))
            result_set(r, CONF_FAIL, "%s: %s", where, msg);
    }
    for (size_t j = 0; j < n_out; j++)
        eng_tensor_free(outs[j]);
    free(outs);
    plan_record(m, inputs, n_inputs, r);
}

/* Loads PREFIX_0.pb .. PREFIX_{n-1}.pb from dir into ts[] (and names[]
 * when given). 0, or the first error, recorded in r; the caller frees
 * whatever was loaded either way. */
static int pbs_load(const char *dir, const char *prefix, size_t n, eng_tensor_t **ts,
                    char **names, conf_result_t *r)
{
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%zu.pb", dir, prefix, i);
        int rc = proto_load(path, &ts[i], names ? &names[i] : NULL);
        if (rc < 0) {
            char what[300];
            snprintf(what, sizeof what, "%s_%zu.pb", prefix, i);
            result_error(r, rc, what);
            return rc;
        }
    }
    return 0;
}

/* Model input index for each data file: by name when every file names a
 * distinct model input, else by position. */
static void inputs_map(eng_model_t *m, char *const *names, size_t n, size_t *slot)
{
    bool by_name = true;
    for (size_t i = 0; i < n && by_name; i++) {
        by_name = false;
        for (size_t k = 0; k < n && names[i] && names[i][0]; k++) {
            eng_io_info_t info;
            if (eng_model_input(m, k, &info) == 0 && strcmp(info.name, names[i]) == 0) {
                slot[i] = k;
                by_name = true;
                break;
            }
        }
        for (size_t j = 0; j < i && by_name; j++)
            by_name = slot[j] != slot[i];
    }
    if (!by_name)
        for (size_t i = 0; i < n; i++)
            slot[i] = i;
}

/* One test_data_set_K of a node-test case. */
static void data_set_run(eng_model_t *m, const char *case_dir, long k,
                         const case_judge_t *judge, conf_result_t *r)
{
    char dir[4096], where[64];
    snprintf(dir, sizeof dir, "%s/test_data_set_%ld", case_dir, k);
    snprintf(where, sizeof where, "test_data_set_%ld", k);
    size_t n_in = pb_count(dir, "input"), n_exp = pb_count(dir, "output");
    size_t n_model = eng_model_n_inputs(m);
    if (n_in != n_model) {
        result_set(r, CONF_FAIL, "%s: %zu input files, the model has %zu inputs", where, n_in,
                   n_model);
        return;
    }
    size_t n_all = n_in + n_exp + 1;
    eng_tensor_t **loaded = calloc(n_all, sizeof *loaded);
    char **names = calloc(n_all, sizeof *names);
    size_t *slot = calloc(n_all, sizeof *slot);
    eng_tensor_t *inputs = calloc(n_all, sizeof *inputs);
    if (!loaded || !names || !slot || !inputs) {
        result_set(r, CONF_FAIL, "%s: out of memory", where);
        goto done;
    }
    if (pbs_load(dir, "input", n_in, loaded, names, r) < 0 ||
        pbs_load(dir, "output", n_exp, loaded + n_in, NULL, r) < 0)
        goto done;
    inputs_map(m, names, n_in, slot);
    for (size_t i = 0; i < n_in; i++)
        inputs[slot[i]] = *loaded[i];
    run_compare(m, inputs, n_in, loaded + n_in, n_exp, judge, where, r);
done:
    for (size_t i = 0; loaded && names && i < n_all; i++) {
        eng_tensor_free(loaded[i]);
        free(names[i]);
    }
    free(loaded);
    free(names);
    free(slot);
    free(inputs);
}

/* Fills element k of t with k / numel, converted as numpy's astype would. */
static void light_fill(eng_tensor_t *t)
{
    int64_t n = eng_shape_numel(&t->shape);
    for (int64_t k = 0; k < n; k++) {
        double v = (double)k / (double)n;
        switch (t->dtype) {
        case ENG_DT_FLOAT:
            ((float *)t->data)[k] = (float)v;
            break;
        case ENG_DT_DOUBLE:
            ((double *)t->data)[k] = v;
            break;
        case ENG_DT_BOOL:
            ((uint8_t *)t->data)[k] = v != 0.0;
            break;
        default: /* integers: v < 1 truncates to the zero the buffer holds */
            break;
        }
    }
}

/* A light-model case: generated inputs, one expected output. */
static void light_run(eng_model_t *m, const conf_case_t *c, const case_judge_t *judge,
                      conf_result_t *r)
{
    size_t n_in = eng_model_n_inputs(m);
    eng_tensor_t **gen = calloc(n_in + 1, sizeof *gen);
    eng_tensor_t *inputs = calloc(n_in + 1, sizeof *inputs);
    eng_tensor_t *expected = NULL;
    if (!gen || !inputs) {
        result_set(r, CONF_FAIL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        eng_io_info_t info;
        int rc = eng_model_input(m, i, &info);
        if (rc < 0) {
            result_error(r, rc, "input info");
            goto done;
        }
        if (info.rank < 0) {
            result_set(r, CONF_FAIL, "input '%s' has no declared shape to generate data for",
                       info.name);
            goto done;
        }
        eng_shape_t shape = {.rank = info.rank};
        for (int d = 0; d < info.rank; d++) /* a symbolic dim becomes 1 */
            shape.dims[d] = info.dims[d] < 0 ? 1 : info.dims[d];
        rc = eng_tensor_alloc_host(info.dtype, &shape, &gen[i]);
        if (rc < 0) {
            result_error(r, rc, "generating input");
            goto done;
        }
        light_fill(gen[i]);
        inputs[i] = *gen[i];
    }
    int rc = proto_load(c->light_output, &expected, NULL);
    if (rc < 0) {
        result_error(r, rc, "expected output");
        goto done;
    }
    run_compare(m, inputs, n_in, &expected, 1, judge, "light", r);
done:
    for (size_t i = 0; gen && i < n_in; i++)
        eng_tensor_free(gen[i]);
    free(gen);
    free(inputs);
    eng_tensor_free(expected);
}

/* The engine threads a case runs with: $FLATSERVE_THREADS when set (an
 * integer in 1..1024), else 1. 0, or -1 with the case failed (the message
 * quotes the bad value). */
static int model_threads(conf_result_t *r, int *out)
{
    const char *env = getenv("FLATSERVE_THREADS");
    *out = 1;
    if (!env)
        return 0;
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (end == env || *end || v < 1 || v > 1024) {
        result_set(r, CONF_FAIL, "FLATSERVE_THREADS='%s' is not an integer in 1..1024", env);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Applies the case directory's tolerance.txt, when there is one, to
 * j->tol.atol_rel and atol_rel_half: one non-negative number, '#' starting
 * a comment. 0, or -1 with the case failed naming the file. */
static int case_tolerance_read(const conf_case_t *c, case_judge_t *j, conf_result_t *r)
{
    if (!c->data_dir)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", c->data_dir, CONF_TOLERANCE_FILE);
    if (!file_exists(path))
        return 0;
    void *data = NULL;
    size_t len = 0;
    if (file_read(path, &data, &len) < 0) {
        result_set(r, CONF_FAIL, "%s: %s", CONF_TOLERANCE_FILE, fs_errmsg());
        return -1;
    }
    char *text = realloc(data, len + 1);
    if (!text) {
        free(data);
        result_set(r, CONF_FAIL, "%s: out of memory", CONF_TOLERANCE_FILE);
        return -1;
    }
    text[len] = '\0';
    for (char *p = text; (p = strchr(p, '#')) != NULL;)
        while (*p && *p != '\n')
            *p++ = ' ';
    char *end = NULL;
    double v = strtod(text, &end);
    bool ok = end != text && isfinite(v) && v >= 0;
    while (ok && *end)
        ok = isspace((unsigned char)*end++);
    free(text);
    if (!ok) {
        result_set(r, CONF_FAIL, "%s: %s does not hold one non-negative number",
                   CONF_TOLERANCE_FILE, path);
        return -1;
    }
    j->tol.atol_rel = v;
    j->tol.atol_rel_half = v;
    return 0;
}

/* Loads and runs the model in `mem`, recording the outcome. */
static void model_run(const conf_case_t *c, const eng_memory_t *mem, const eng_device_t *device,
                      eng_precision_t precision, const conf_tolerance_t *tol, conf_result_t *r)
{
    int n_threads;
    if (model_threads(r, &n_threads) != 0)
        return;
    case_judge_t judge = {.tol = *tol, .rule = (conf_rule_t)c->rule};
    if (case_tolerance_read(c, &judge, r) != 0)
        return;
    eng_model_config_t cfg = {.name = c->name, .cache = mem->cache, .n_threads = n_threads,
                              .device = *device, .precision = precision,
                              .host_cache = mem->host_cache, .staging = mem->staging};
    eng_model_t *m = NULL;
    int rc = eng_model_load(c->model_path, &cfg, &m);
    if (rc < 0) {
        result_error(r, rc, "load");
        return;
    }
    if (c->data_dir) {
        long *sets = NULL;
        size_t n_sets = 0;
        rc = data_sets_list(c->data_dir, &sets, &n_sets);
        if (rc < 0)
            result_error(r, rc, "test data");
        else if (n_sets == 0)
            result_set(r, CONF_FAIL, "no test_data_set_K directory in %s", c->data_dir);
        for (size_t i = 0; i < n_sets && r->status == CONF_PASS; i++)
            data_set_run(m, c->data_dir, sets[i], &judge, r);
        free(sets);
    } else {
        light_run(m, c, &judge, r);
    }
    eng_model_destroy(m);
}

void conf_case_run(const conf_case_t *c, const char *device, eng_precision_t precision,
                   const conf_tolerance_t *tol, conf_result_t *out)
{
    static const char *const kinds[3] = {"device", "host", "staging"};
    memset(out, 0, sizeof *out);
    out->status = CONF_PASS;
    eng_memory_t mem;
    eng_device_t dev;
    int rc = eng_device_parse(device, &dev);
    if (rc == 0)
        rc = eng_memory_open(&dev, NULL, &mem);
    if (rc != 0) {
        result_set(out, CONF_FAIL, "%s: %s", fs_errname(rc), fs_errmsg());
        return;
    }
    model_run(c, &mem, &dev, precision, tol, out);
    alloc_cache_t *caches[3] = {mem.cache, mem.host_cache, mem.staging};
    for (int i = 0; i < 3; i++) {
        if (!caches[i])
            continue;
        alloc_cache_stats_t st;
        alloc_cache_stats(caches[i], &st);
        if (st.allocated.current == 0)
            continue;
        char leak[160];
        snprintf(leak, sizeof leak, "after destroy, %lld bytes in %lld blocks still allocated "
                 "in the %s cache", (long long)st.allocated.current,
                 (long long)st.blocks.current, kinds[i]);
        if (out->status == CONF_FAIL) {
            size_t len = strlen(out->detail);
            snprintf(out->detail + len, sizeof out->detail - len, "; also %s", leak);
        } else {
            result_set(out, CONF_FAIL, "memory: %s", leak);
        }
    }
    eng_memory_close(&mem);
}
