/* test_compare.c -- tests for tests/conformance/compare.c (the node-test and
 * model-case comparison rules, the worst error) and for how case.c picks a
 * case's rule and reads its tolerance.txt, the latter through whole cases
 * written to a temporary directory and run in-process. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"
#include "tests/engine/onnx_build.h"

static const conf_tolerance_t tol_default = {
    .rtol = CONF_DEFAULT_RTOL,
    .atol = CONF_DEFAULT_ATOL,
    .atol_rel = CONF_DEFAULT_ATOL_REL,
    .atol_rel_half = CONF_DEFAULT_ATOL_REL_HALF,
};

/* A 1-D tensor of `n` values of dtype dt from raw bytes (caller frees). */
static eng_tensor_t *tensor_1d(eng_dtype_t dt, const void *data, int64_t n)
{
    eng_shape_t shape = {.rank = 1, .dims = {n}};
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_alloc_host(dt, &shape, &t), 0);
    memcpy(t->data, data, (size_t)n * eng_dtype_size(dt));
    return t;
}

/* Compares two float vectors under rule; returns the result, *worst
 * updated and the message in msg. */
static bool compare_floats(const float *expected, const float *actual, int64_t n,
                           conf_rule_t rule, conf_error_t *worst, char *msg, size_t msg_len)
{
    eng_tensor_t *e = tensor_1d(ENG_DT_FLOAT, expected, n);
    eng_tensor_t *a = tensor_1d(ENG_DT_FLOAT, actual, n);
    bool ok = conf_tensor_compare(e, a, &tol_default, rule, 0, "y", worst, msg, msg_len);
    eng_tensor_free(e);
    eng_tensor_free(a);
    return ok;
}

Test(conformance_compare, node_rule_holds_small_elements_to_their_own_magnitude)
{
    /* 1e-4 off an element of 1e-3: 10% of it, but 1e-7 of the output's scale. */
    const float e[2] = {1000.0f, 0.001f}, a[2] = {1000.5f, 0.0011f};
    char msg[512];
    cr_assert_not(compare_floats(e, a, 2, CONF_RULE_NODE, NULL, msg, sizeof msg));
    cr_assert(strstr(msg, "output 0 'y'[1]"), "%s", msg);
    cr_assert(strstr(msg, "rtol 0.001"), "%s", msg);
    cr_assert(compare_floats(e, a, 2, CONF_RULE_MODEL, NULL, msg, sizeof msg), "%s", msg);
}

Test(conformance_compare, model_rule_fails_beyond_atol_rel_of_the_largest_magnitude)
{
    /* max|e| = 4: the bound is 4e-3 + 1e-7; 0.01 is off by 2.5e-3 of it. */
    const float e[3] = {2.0f, -4.0f, 0.5f}, a[3] = {2.0f, -3.99f, 0.5f};
    char msg[512];
    conf_error_t worst = {0};
    cr_assert_not(compare_floats(e, a, 3, CONF_RULE_MODEL, &worst, msg, sizeof msg));
    cr_assert(strstr(msg, "output 0 'y'[1]: expected -4, got -3.99"), "%s", msg);
    cr_assert(strstr(msg, "1 of 3 elements differ"), "%s", msg);
    cr_assert(strstr(msg, "atol_rel 0.001 x max|expected|"), "%s", msg);
    cr_assert_eq(worst.n_outputs, 1);
    cr_assert_float_eq(worst.max_abs, 0.01, 1e-6);
    cr_assert_float_eq(worst.max_expected, 4.0, 1e-12);
    cr_assert_float_eq(worst.rel, 0.0025, 1e-6);
    cr_assert_float_eq(worst.tol_rel, CONF_DEFAULT_ATOL_REL, 1e-12);
    cr_assert_str_eq(worst.output, "y");
}

Test(conformance_compare, half_outputs_get_the_half_tolerance)
{
    /* float16 1.0, 2.0 against 1.0, 2.015625: 0.0078 of max|e| = 2, inside
     * 1e-2 but outside float32's 1e-3. */
    const uint16_t e16[2] = {0x3c00, 0x4000}, a16[2] = {0x3c00, 0x4008};
    const float e32[2] = {1.0f, 2.0f}, a32[2] = {1.0f, 2.015625f};
    char msg[512];
    eng_tensor_t *e = tensor_1d(ENG_DT_FLOAT16, e16, 2);
    eng_tensor_t *a = tensor_1d(ENG_DT_FLOAT16, a16, 2);
    conf_error_t worst = {0};
    cr_assert(conf_tensor_compare(e, a, &tol_default, CONF_RULE_MODEL, 0, "h", &worst, msg,
                                  sizeof msg), "%s", msg);
    cr_assert_float_eq(worst.rel, 0.0078125, 1e-9);
    cr_assert_float_eq(worst.tol_rel, CONF_DEFAULT_ATOL_REL_HALF, 1e-12);
    eng_tensor_free(e);
    eng_tensor_free(a);
    cr_assert_not(compare_floats(e32, a32, 2, CONF_RULE_MODEL, NULL, msg, sizeof msg));
}

Test(conformance_compare, worst_error_keeps_the_output_with_the_largest_relative_error)
{
    const float e1[2] = {100.0f, 1.0f}, a1[2] = {100.05f, 1.0f}; /* 5e-4 of 100 */
    const float e2[2] = {1.0f, 0.0f}, a2[2] = {1.0f, 0.0002f};   /* 2e-4 of 1 */
    const float e3[2] = {2.0f, 0.0f}, a3[2] = {2.0016f, 0.0f};   /* 8e-4 of 2 */
    conf_error_t worst = {0};
    char msg[512];
    eng_tensor_t *ts[6] = {
        tensor_1d(ENG_DT_FLOAT, e1, 2), tensor_1d(ENG_DT_FLOAT, a1, 2),
        tensor_1d(ENG_DT_FLOAT, e2, 2), tensor_1d(ENG_DT_FLOAT, a2, 2),
        tensor_1d(ENG_DT_FLOAT, e3, 2), tensor_1d(ENG_DT_FLOAT, a3, 2),
    };
    const char *names[3] = {"logits", "hidden", "pooled"};
    for (int k = 0; k < 3; k++)
        cr_assert(conf_tensor_compare(ts[2 * k], ts[2 * k + 1], &tol_default, CONF_RULE_MODEL,
                                      (size_t)k, names[k], &worst, msg, sizeof msg), "%s", msg);
    cr_assert_eq(worst.n_outputs, 3);
    cr_assert_str_eq(worst.output, "pooled");
    cr_assert_float_eq(worst.rel, 8e-4, 1e-6);
    cr_assert_float_eq(worst.max_expected, 2.0, 1e-12);
    for (int k = 0; k < 6; k++)
        eng_tensor_free(ts[k]);
}

Test(conformance_compare, nan_matches_nan_and_a_one_sided_special_fails_both_rules)
{
    const float nan = NAN, inf = INFINITY;
    const float e[3] = {nan, inf, 1.0f}, same[3] = {nan, inf, 1.0f};
    const float e_inf[1] = {inf}, a_big[1] = {3.0e38f};
    const float e_num[2] = {1.0f, 2.0f}, a_nan[2] = {nan, 2.0f};
    char msg[512];
    for (int rule = CONF_RULE_NODE; rule <= CONF_RULE_MODEL; rule++) {
        conf_error_t worst = {0};
        cr_assert(compare_floats(e, same, 3, (conf_rule_t)rule, &worst, msg, sizeof msg), "%s",
                  msg);
        cr_assert_float_eq(worst.max_abs, 0.0, 1e-12);
        cr_assert_float_eq(worst.max_expected, 1.0, 1e-12); /* finite elements only */
        cr_assert_not(compare_floats(e_inf, a_big, 1, (conf_rule_t)rule, NULL, msg, sizeof msg));
        worst = (conf_error_t){0};
        cr_assert_not(compare_floats(e_num, a_nan, 2, (conf_rule_t)rule, &worst, msg,
                                     sizeof msg));
        cr_assert(isinf(worst.max_abs) && isinf(worst.rel));
    }
}

Test(conformance_compare, all_zero_output_is_held_to_the_absolute_floor)
{
    const float e[2] = {0.0f, 0.0f}, tiny[2] = {5e-8f, 0.0f}, off[2] = {0.0f, 1e-6f};
    char msg[512];
    conf_error_t worst = {0};
    cr_assert(compare_floats(e, tiny, 2, CONF_RULE_MODEL, &worst, msg, sizeof msg), "%s", msg);
    cr_assert(isinf(worst.rel), "a nonzero error over max|expected| 0 is infinitely relative");
    cr_assert_not(compare_floats(e, off, 2, CONF_RULE_MODEL, NULL, msg, sizeof msg));
    worst = (conf_error_t){0};
    cr_assert(compare_floats(e, e, 2, CONF_RULE_MODEL, &worst, msg, sizeof msg), "%s", msg);
    cr_assert_float_eq(worst.rel, 0.0, 1e-12);
}

Test(conformance_compare, integers_stay_exact_and_record_no_error)
{
    const int64_t e[2] = {7, -3}, a[2] = {7, -2};
    eng_tensor_t *te = tensor_1d(ENG_DT_INT64, e, 2), *ta = tensor_1d(ENG_DT_INT64, a, 2);
    conf_error_t worst = {0};
    char msg[512];
    cr_assert_not(conf_tensor_compare(te, ta, &tol_default, CONF_RULE_MODEL, 1, "idx", &worst,
                                      msg, sizeof msg));
    cr_assert(strstr(msg, "output 1 'idx'[1]: expected -3, got -2"), "%s", msg);
    cr_assert(strstr(msg, "exact"), "%s", msg);
    cr_assert_eq(worst.n_outputs, 0);
    eng_tensor_free(te);
    eng_tensor_free(ta);
}

Test(conformance_compare, rule_is_node_only_with_a_directory_named_node_on_the_path)
{
    const struct {
        const char *path;
        conf_rule_t want;
    } cases[] = {
        {"../shared/onnx-tests/node/test_abs/model.onnx", CONF_RULE_NODE},
        {"node/test_abs/model.onnx", CONF_RULE_NODE},
        {"/data/node/test_abs/model.onnx", CONF_RULE_NODE},
        {"../shared/onnx-tests/light/light_resnet50.onnx", CONF_RULE_MODEL},
        {"../shared/onnx-tests/pytorch-converted/test_Conv2d/model.onnx", CONF_RULE_MODEL},
        {"tests/zoo/bert_dynamo18/model.onnx", CONF_RULE_MODEL},
        {"tests/zoo/node_like/model.onnx", CONF_RULE_MODEL},
        {"x/nodes/test_a/model.onnx", CONF_RULE_MODEL},
        {"x/mynode/test_a/model.onnx", CONF_RULE_MODEL},
        {"x/test_node/model.onnx", CONF_RULE_MODEL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(conf_case_rule(cases[i].path), cases[i].want, "%s", cases[i].path);
}

/* --- whole cases on disk -------------------------------------------------- */

static void file_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* Writes a float32 TensorProto of `n` values to path. */
static void pb_write(const char *path, const char *name, const float *v, int64_t n)
{
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__TensorProto *t = mb_tensor(&b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &n);
    mb_floats(&b, t, v, (size_t)n);
    size_t len = onnx__tensor_proto__get_packed_size(t);
    uint8_t *buf = mb_alloc(&b, len);
    cr_assert_eq(onnx__tensor_proto__pack(t, buf), len);
    file_write(path, buf, len);
    mb_free(&b);
}

/* Writes CASE_DIR (made under root/sub/) holding an Identity model x -> y
 * and one data set whose expected output is `expected`, the input `input`;
 * returns the case directory (caller frees). */
static char *case_write(const char *root, const char *sub, const float *input,
                        const float *expected, int64_t n)
{
    char *dir = NULL, path[4096];
    cr_assert(asprintf(&dir, "%s/%s/identity", root, sub) > 0);
    snprintf(path, sizeof path, "%s/%s", root, sub);
    cr_assert(mkdir(path, 0700) == 0);
    cr_assert(mkdir(dir, 0700) == 0);
    mb_t b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &n, NULL);
    mb_output(&b, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &n);
    mb_node(&b, "Identity", "id", "x", "y");
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    file_write(path, buf, len);
    mb_free(&b);
    snprintf(path, sizeof path, "%s/test_data_set_0", dir);
    cr_assert(mkdir(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", dir);
    pb_write(path, "x", input, n);
    snprintf(path, sizeof path, "%s/test_data_set_0/output_0.pb", dir);
    pb_write(path, "y", expected, n);
    return dir;
}

/* Runs the case in dir as the runner would (rule from its path). */
static void case_run(const char *dir, conf_result_t *r)
{
    char model[4096];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    conf_case_t c = {.name = "identity", .model_path = model, .data_dir = (char *)dir,
                     .rule = conf_case_rule(model)};
    conf_case_run(&c, "cpu", ENG_PREC_FP32, &tol_default, r);
}

static void tree_remove(const char *root)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

Test(conformance_case, same_data_fails_as_a_node_test_and_passes_as_a_model_case)
{
    char root[] = "/tmp/flatserve-test-conf-XXXXXX";
    cr_assert(mkdtemp(root));
    const float in[2] = {1000.0f, 0.001f}, want[2] = {1000.5f, 0.0011f};
    char *node = case_write(root, "node", in, want, 2);
    char *model = case_write(root, "zoo", in, want, 2);
    conf_result_t r;
    case_run(node, &r);
    cr_assert_eq(r.status, CONF_FAIL, "%s", r.detail);
    cr_assert(strstr(r.detail, "rtol"), "%s", r.detail);
    case_run(model, &r);
    cr_assert_eq(r.status, CONF_PASS, "%s", r.detail);
    cr_assert_eq(r.error.n_outputs, 1);
    cr_assert_float_eq(r.error.max_abs, 0.5, 1e-6);
    cr_assert_float_eq(r.error.max_expected, 1000.5, 1e-3);
    free(node);
    free(model);
    tree_remove(root);
}

Test(conformance_case, tolerance_file_sets_the_model_case_atol_rel)
{
    char root[] = "/tmp/flatserve-test-conf-XXXXXX";
    cr_assert(mkdtemp(root));
    const float in[2] = {1000.0f, 0.001f}, want[2] = {1000.5f, 0.0011f};
    char *dir = case_write(root, "zoo", in, want, 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CONF_TOLERANCE_FILE);
    const char tight[] = "# half a thousandth of a percent\n1e-5\n";
    file_write(path, tight, sizeof tight - 1);
    conf_result_t r;
    case_run(dir, &r);
    cr_assert_eq(r.status, CONF_FAIL, "%s", r.detail);
    cr_assert(strstr(r.detail, "atol_rel 1e-05"), "%s", r.detail);
    const char loose[] = "0.01 # a hundredth\n";
    file_write(path, loose, sizeof loose - 1);
    case_run(dir, &r);
    cr_assert_eq(r.status, CONF_PASS, "%s", r.detail);
    cr_assert_float_eq(r.error.tol_rel, 0.01, 1e-12);
    const char bad[] = "0.01 0.02\n";
    file_write(path, bad, sizeof bad - 1);
    case_run(dir, &r);
    cr_assert_eq(r.status, CONF_FAIL, "%s", r.detail);
    cr_assert(strstr(r.detail, "tolerance.txt") && strstr(r.detail, "one non-negative number"),
              "%s", r.detail);
    free(dir);
    tree_remove(root);
}

/* --precision reaches the model: the CPU computes fp32 only, so fp16 is a
 * skip that names it (on a GPU the same case runs with fp16 weights). */
Test(conformance_case, a_precision_the_device_lacks_is_a_skip_naming_it)
{
    char root[] = "/tmp/flatserve-test-conf-XXXXXX";
    cr_assert(mkdtemp(root));
    const float in[2] = {1.0f, 2.0f};
    char *model = case_write(root, "zoo", in, in, 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", model);
    conf_case_t c = {.name = "identity", .model_path = path, .data_dir = model,
                     .rule = conf_case_rule(path)};
    conf_result_t r;
    conf_case_run(&c, "cpu", ENG_PREC_FP16, &tol_default, &r);
    cr_expect_eq(r.status, CONF_SKIP, "%s", r.detail);
    cr_expect(strstr(r.detail, "precision 'fp16' is not supported on cpu"), "%s", r.detail);
    conf_case_run(&c, "cpu", ENG_PREC_FP32, &tol_default, &r);
    cr_expect_eq(r.status, CONF_PASS, "%s", r.detail);
    free(model);
    tree_remove(root);
}
