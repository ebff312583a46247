/* test_load_files.c -- tests for engine/onnx_load.c on whole files:
 * truncated, random and corrupted bytes never crash or leak, and the ONNX
 * conformance data's models and tensors load when the data is present. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/graph.h"
#include "engine/op.h"
#include "tests/engine/onnx_build.h"

#define F ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

static const char *const batch[] = {"N", NULL};

/* ---- corrupt and truncated files ------------------------------------------------------ */

/* A model that uses most of the format: initializers in two encodings, a
 * Constant, attributes, value_info, symbolic dims. */
static uint8_t *rich_model(mb_t *b, size_t *len)
{
    mb_init(b, 9, 17);
    Onnx__TensorProto *w = mb_tensor(b, "W", F, 2, (int64_t[]){2, 3});
    mb_floats(b, w, (float[]){0, 1, 2, 3, 4, 5}, 6);
    mb_initializer(b, w);
    Onnx__TensorProto *r = mb_tensor(b, "R", I64, 1, (int64_t[]){2});
    mb_raw(b, r, (int64_t[]){7, 8}, 16);
    mb_initializer(b, r);
    mb_input(b, "X", F, 2, (int64_t[]){-1, 2}, batch);
    mb_attr_floats(b, mb_node(b, "Constant", "k", "", "K"), "value_floats", (float[]){1, 2}, 2);
    Onnx__NodeProto *n = mb_node(b, "MatMul", "mm", "X,W", "M");
    mb_attr_i(b, n, "unused", 1);
    mb_attr_s(b, n, "note", "x");
    mb_node(b, "Add", "add", "M,K", "Y");
    b->infos[b->graph.n_value_info++] = mb_vi(b, "M", F, 2, (int64_t[]){-1, 3}, batch);
    mb_output(b, "Y", F, 2, (int64_t[]){-1, 3});
    mb_output(b, "R", 0, -1, NULL);
    return mb_pack(b, len);
}

Test(engine_load_files, every_truncated_prefix_fails_cleanly)
{
    mb_t b;
    size_t len;
    uint8_t *full = rich_model(&b, &len);
    for (size_t cut = 0; cut < len; cut++) {
        eng_graph_t *g = NULL;
        fs_err_clear();
        int rc = eng_graph_load(full, cut, NULL, NULL, &g);
        cr_expect_lt(rc, 0, "prefix of %zu of %zu bytes loaded", cut, len);
        cr_expect_null(g);
        cr_expect_gt(strlen(fs_errmsg()), 10, "prefix %zu: no message", cut);
        eng_graph_destroy(g);
    }
    mb_free(&b);
}

/* xorshift: the same bytes on every run. */
static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(engine_load_files, random_bytes_never_crash)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint8_t buf[512];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = next_random(&seed) % sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)next_random(&seed);
        eng_graph_t *g = NULL;
        int rc = eng_graph_load(buf, len, NULL, NULL, &g);
        cr_expect_leq(rc, 0);
        if (rc == 0)
            graph_check_invariants(g);
        eng_graph_destroy(g);
    }
    eng_graph_t *g = (eng_graph_t *)0x1;
    cr_expect_eq(eng_graph_load(NULL, 10, NULL, NULL, &g), FS_EINVAL);
    cr_expect_eq(g, (eng_graph_t *)0x1);
    cr_expect_eq(eng_graph_load("", 0, NULL, NULL, &g), FS_EPARSE, "empty: %s", fs_errmsg());
    cr_expect_eq(eng_graph_load("\xff\xff\xff", 3, NULL, NULL, &g), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "corrupt or truncated"), "%s", fs_errmsg());
}

Test(engine_load_files, corrupted_bytes_of_a_valid_model_never_crash)
{
    mb_t b;
    size_t len;
    uint8_t *full = rich_model(&b, &len);
    uint8_t *buf = malloc(len);
    cr_assert(buf);
    uint64_t seed = 12345;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, full, len);
        int flips = 1 + (int)(next_random(&seed) % 4);
        for (int f = 0; f < flips; f++)
            buf[next_random(&seed) % len] ^= (uint8_t)(1u << (next_random(&seed) % 8));
        eng_graph_t *g = NULL;
        int rc = eng_graph_load(buf, len, NULL, NULL, &g);
        cr_expect_leq(rc, 0);
        if (rc == 0)
            graph_check_invariants(g);
        eng_graph_destroy(g);
    }
    free(buf);
    mb_free(&b);
}

/* ---- the conformance data ----------------------------------------------------------------- */

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size + 1)) && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)size;
    return buf;
}

#define ONNX_TESTS "../shared/onnx-tests"

Test(engine_load_files, light_models_load_or_list_what_is_missing)
{
    DIR *d = opendir(ONNX_TESTS "/light");
    if (!d)
        cr_skip_test("no ONNX test data at " ONNX_TESTS "/light");
    int models = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t nl = strlen(de->d_name);
        if (nl < 5 || strcmp(de->d_name + nl - 5, ".onnx") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, ONNX_TESTS "/light/%s", de->d_name);
        size_t len;
        uint8_t *data = read_file(path, &len);
        cr_assert(data, "cannot read %s", path);
        eng_graph_t *g = NULL;
        fs_err_clear();
        int rc = eng_graph_load(data, len, ONNX_TESTS "/light", NULL, &g);
        cr_expect(rc == 0 || rc == FS_ENOTSUP, "%s: %s: %s", de->d_name, fs_errname(rc),
                  fs_errmsg());
        if (rc == FS_ENOTSUP)
            cr_expect(strstr(fs_errmsg(), "unsupported node"), "%s: %s", de->d_name, fs_errmsg());
        if (rc == 0) {
            graph_check_invariants(g);
            cr_expect_gt(g->n_nodes, 0);
            cr_expect_eq(g->n_inputs, 1, "%s", de->d_name);
            cr_expect_eq(g->n_outputs, 1, "%s", de->d_name);
        }
        eng_graph_destroy(g);
        free(data);

        /* Its expected output: a float tensor. */
        snprintf(path, sizeof path, ONNX_TESTS "/light/%.*s_output_0.pb", (int)(nl - 5),
                 de->d_name);
        data = read_file(path, &len);
        if (data) {
            eng_tensor_t *t = NULL;
            cr_expect_eq(eng_tensor_load_proto(data, len, &t, NULL), 0, "%s: %s", path,
                         fs_errmsg());
            if (t) {
                cr_expect_eq(t->dtype, ENG_DT_FLOAT, "%s", path);
                cr_expect_geq(t->shape.rank, 1, "%s", path);
            }
            eng_tensor_free(t);
            free(data);
        }
        models++;
    }
    closedir(d);
    cr_expect_gt(models, 0, "no .onnx files in " ONNX_TESTS "/light");
}

Test(engine_load_files, node_test_abs_parses_with_its_data)
{
    const char *dir = ONNX_TESTS "/node/test_abs";
    size_t len;
    uint8_t *data = read_file(ONNX_TESTS "/node/test_abs/model.onnx", &len);
    if (!data)
        cr_skip_test("no ONNX node tests at " ONNX_TESTS "/node");
    eng_graph_t *g = NULL;
    int rc = eng_graph_load(data, len, dir, NULL, &g);
    if (eng_op_find("Abs")) {
        cr_expect_eq(rc, 0, "%s", fs_errmsg());
    } else {
        cr_expect_eq(rc, FS_ENOTSUP);
        cr_expect(strstr(fs_errmsg(), "(Abs, opset"), "%s", fs_errmsg());
    }
    eng_graph_destroy(g);
    free(data);
    for (int k = 0;; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/test_data_set_%d/input_0.pb", dir, k);
        if (!(data = read_file(path, &len)))
            break;
        eng_tensor_t *t = NULL;
        char *name = NULL;
        cr_assert_eq(eng_tensor_load_proto(data, len, &t, &name), 0, "%s: %s", path, fs_errmsg());
        cr_expect_eq(t->dtype, ENG_DT_FLOAT);
        cr_expect_eq(t->shape.rank, 3, "%s", path);
        cr_expect_eq(t->shape.dims[0], 3);
        cr_expect_eq(t->shape.dims[1], 4);
        cr_expect_eq(t->shape.dims[2], 5);
        cr_expect_str_eq(name, "x");
        free(name);
        eng_tensor_free(t);
        free(data);
    }
}
