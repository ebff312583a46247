/* test_strings.c -- string tensors in the engine (engine/tensor.h,
 * engine/strings.c): Cast both ways with its text rules, Equal, packing,
 * the gate that keeps strings from numeric ops, and a model moving short
 * and long strings through Transpose, Gather, Concat and Identity, its
 * outputs owning their bytes, the cache back to zero. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/strings.h"
#include "tests/engine/model_fixture.h"
#include "tests/engine/onnx_build.h"
#include "tests/engine/op_call.h"

static eng_string_t str(const char *s)
{
    eng_string_t r = {0};
    eng_string_set(&r, s, strlen(s));
    return r;
}

static void expect_str(const eng_string_t *s, const char *want)
{
    cr_expect_eq(s->len, strlen(want), "length %llu, want \"%s\"", (unsigned long long)s->len,
                 want);
    cr_expect(s->len == strlen(want) && memcmp(eng_string_data(s), want, s->len) == 0,
              "got \"%.*s\", want \"%s\"", (int)s->len, eng_string_data(s), want);
}

/* Cast of n elements of `in` (dtype from) to `to` through infer and the
 * CPU kernel; the result in c (call_free it). */
static int cast(call_t *c, eng_dtype_t from, const void *in, int64_t n, eng_dtype_t to)
{
    static eng_tensor_t x;
    x = tensor(from, in, 1, &n);
    const eng_tensor_t *ins[] = {&x};
    const eng_attr_t a[] = {attr_i("to", to)};
    int rc = call_infer_at(c, "Cast", 13, a, 1, ins, 1, 1);
    return rc ? rc : call_run(c);
}

Test(engine_strings, numbers_to_text)
{
    call_t c;
    const float f[] = {0.1f, -2.5f, 1e38f, NAN, INFINITY, -INFINITY, 100.0f, 1.17549435e-38f};
    cr_assert_eq(cast(&c, ENG_DT_FLOAT, f, 8, ENG_DT_STRING), 0, "%s", fs_errmsg());
    const char *want[] = {"0.1", "-2.5", "1e+38", "NaN", "INF", "-INF", "100", "1.1754944e-38"};
    const eng_string_t *s = c.outs[0].data;
    for (int i = 0; i < 8; i++)
        expect_str(&s[i], want[i]);
    call_free(&c);

    const double d[] = {0.1, -1.2345678901234567e-308};
    cr_assert_eq(cast(&c, ENG_DT_DOUBLE, d, 2, ENG_DT_STRING), 0, "%s", fs_errmsg());
    s = c.outs[0].data;
    expect_str(&s[0], "0.1");
    expect_str(&s[1], "-1.2345678901234567e-308"); /* 24 bytes: the longest, inline */
    call_free(&c);

    const int64_t i64[] = {INT64_MIN, 0, 42};
    cr_assert_eq(cast(&c, ENG_DT_INT64, i64, 3, ENG_DT_STRING), 0, "%s", fs_errmsg());
    s = c.outs[0].data;
    expect_str(&s[0], "-9223372036854775808");
    expect_str(&s[1], "0");
    expect_str(&s[2], "42");
    call_free(&c);

    const uint64_t u64[] = {UINT64_MAX};
    cr_assert_eq(cast(&c, ENG_DT_UINT64, u64, 1, ENG_DT_STRING), 0, "%s", fs_errmsg());
    expect_str(c.outs[0].data, "18446744073709551615");
    call_free(&c);

    const uint8_t b[] = {1, 0};
    cr_assert_eq(cast(&c, ENG_DT_BOOL, b, 2, ENG_DT_STRING), 0, "%s", fs_errmsg());
    expect_str(&((const eng_string_t *)c.outs[0].data)[0], "1");
    expect_str(&((const eng_string_t *)c.outs[0].data)[1], "0");
    call_free(&c);
}

Test(engine_strings, text_to_numbers)
{
    call_t c;
    eng_string_t in[] = {str("3.14"), str(" 1e-5 "), str("+INF"), str("-inf"), str("NaN"),
                         str("1E8")};
    cr_assert_eq(cast(&c, ENG_DT_STRING, in, 6, ENG_DT_FLOAT), 0, "%s", fs_errmsg());
    const float *f = c.outs[0].data;
    cr_expect_eq(f[0], 3.14f);
    cr_expect_eq(f[1], 1e-5f);
    cr_expect(isinf(f[2]) && f[2] > 0);
    cr_expect(isinf(f[3]) && f[3] < 0);
    cr_expect(isnan(f[4]));
    cr_expect_eq(f[5], 1e8f);
    call_free(&c);

    eng_string_t ints[] = {str("-17"), str("100.5"), str("4294967296"), str("9223372036854775807")};
    cr_assert_eq(cast(&c, ENG_DT_STRING, ints, 4, ENG_DT_INT32), 0, "%s", fs_errmsg());
    const int32_t *i = c.outs[0].data;
    cr_expect_eq(i[0], -17);
    cr_expect_eq(i[1], 100, "ONNX: 100.5 to an integer may give 100");
    call_free(&c);
    cr_assert_eq(cast(&c, ENG_DT_STRING, ints, 4, ENG_DT_INT64), 0, "%s", fs_errmsg());
    cr_expect_eq(((const int64_t *)c.outs[0].data)[3], INT64_MAX, "exact past 2^53");
    call_free(&c);

    eng_string_t u[] = {str("18446744073709551615")};
    cr_assert_eq(cast(&c, ENG_DT_STRING, u, 1, ENG_DT_UINT64), 0, "%s", fs_errmsg());
    cr_expect_eq(((const uint64_t *)c.outs[0].data)[0], UINT64_MAX);
    call_free(&c);

    /* Not a number: an error naming the element and quoting it, not 0. */
    eng_string_t bad[] = {str("7"), str("seven")};
    cr_expect_eq(cast(&c, ENG_DT_STRING, bad, 2, ENG_DT_FLOAT), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "element 1") && strstr(fs_errmsg(), "\"seven\""), "%s",
              fs_errmsg());
    call_free(&c);
    eng_string_t nul[] = {{.len = 3, .u.bytes = {'1', 0, '2'}}};
    cr_expect_eq(cast(&c, ENG_DT_STRING, nul, 1, ENG_DT_INT32), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "NUL"), "%s", fs_errmsg());
    call_free(&c);
}

Test(engine_strings, equal_compares_bytes_and_broadcasts)
{
    const char *longer = "a string well past the twenty-four inline bytes";
    eng_string_t a[] = {str("x"), str(longer), str(""), str("y")};
    eng_string_t b[] = {str(longer)};
    int64_t n4 = 4, n1 = 1;
    eng_tensor_t ta = tensor(ENG_DT_STRING, a, 1, &n4), tb = tensor(ENG_DT_STRING, b, 1, &n1);
    const eng_tensor_t *ins[] = {&ta, &tb};
    call_t c;
    cr_assert_eq(call_infer_at(&c, "Equal", 19, NULL, 0, ins, 2, 1), 0, "%s", fs_errmsg());
    cr_assert_eq(c.outs[0].dtype, ENG_DT_BOOL);
    cr_assert_eq(call_run(&c), 0, "%s", fs_errmsg());
    const uint8_t *y = c.outs[0].data;
    cr_expect(!y[0] && y[1] && !y[2] && !y[3]);
    call_free(&c);
}

Test(engine_strings, pack_copies_long_strings_into_the_tensor)
{
    char *longer = strdup("bytes that live outside any record, 40+ long");
    eng_string_t src[] = {str("short"), str(longer), {0}};
    eng_shape_t s = {1, {3}};
    eng_tensor_t *t = NULL;
    cr_assert_eq(eng_tensor_pack_strings(&s, src, &t), 0, "%s", fs_errmsg());
    memset(longer, 'z', strlen(longer)); /* the source's bytes change: the copy does not */
    const eng_string_t *r = t->data;
    expect_str(&r[0], "short");
    expect_str(&r[1], "bytes that live outside any record, 40+ long");
    expect_str(&r[2], "");
    cr_expect((const char *)r[1].u.ptr > (const char *)t->data &&
              (const char *)r[1].u.ptr < (const char *)t->data + 3 * sizeof *r + 64);
    eng_tensor_free(t);
    free(longer);
}

/* X [2,3] string -> Transpose -> Gather(row 1 of the 3) -> Concat with
 * Identity(X's row) ...: Y = Concat(Gather(Transpose(X), [2]), Gather(
 * Transpose(X), [0])) along 0, shape [2,2]; N = Cast(X[int]) of a second
 * input to string, Z = Abs on a string (refused at plan). */
static uint8_t *strings_model(mb_t *b, size_t *len, bool with_abs)
{
    mb_init(b, 8, 19);
    mb_input(b, "X", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, (int64_t[]){2, 3}, NULL);
    mb_input(b, "K", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){2}, NULL);
    Onnx__TensorProto *i2 = mb_tensor(b, "i2", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                                      (int64_t[]){1});
    mb_int64s(b, i2, (int64_t[]){2}, 1);
    mb_initializer(b, i2);
    Onnx__TensorProto *i0 = mb_tensor(b, "i0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                                      (int64_t[]){1});
    mb_int64s(b, i0, (int64_t[]){0}, 1);
    mb_initializer(b, i0);
    mb_node(b, "Transpose", "t", "X", "XT");
    mb_node(b, "Gather", "g2", "XT,i2", "G2");
    mb_node(b, "Gather", "g0", "XT,i0", "G0");
    mb_node(b, "Identity", "id", "G0", "G0b");
    Onnx__NodeProto *cat = mb_node(b, "Concat", "cat", "G2,G0b", "Y");
    mb_attr_i(b, cat, "axis", 0);
    Onnx__NodeProto *cs = mb_node(b, "Cast", "cs", "K", "N");
    mb_attr_i(b, cs, "to", ONNX__TENSOR_PROTO__DATA_TYPE__STRING);
    mb_output(b, "Y", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, (int64_t[]){2, 2});
    mb_output(b, "N", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 1, (int64_t[]){2});
    if (with_abs) {
        mb_node(b, "Abs", "abs", "X", "Z");
        mb_output(b, "Z", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, (int64_t[]){2, 3});
    }
    return mb_pack(b, len);
}

Test(engine_strings, a_model_moves_strings_and_its_outputs_own_them)
{
    mb_t b;
    size_t len;
    uint8_t *bytes = strings_model(&b, &len, false);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    mb_free(&b);

    const char *text[] = {"a", "b", "a long string, one that a record cannot hold inline",
                          "d", "e", "f, and another string too long to sit in its record"};
    char *owned[6];
    eng_string_t x[6];
    for (int i = 0; i < 6; i++) {
        owned[i] = strdup(text[i]);
        x[i] = str(owned[i]);
    }
    int32_t k[] = {-5, 2147483647};
    eng_tensor_t ins[2] = {{.dtype = ENG_DT_STRING, .shape = {2, {2, 3}}, .data = x},
                           {.dtype = ENG_DT_INT32, .shape = {1, {2}}, .data = k}};
    eng_tensor_t *outs[2] = {0};
    cr_assert_eq(eng_model_run(f.model, ins, 2, outs), 0, "%s", fs_errmsg());
    for (int i = 0; i < 6; i++) { /* the request's memory goes before the outputs are read */
        memset(owned[i], '#', strlen(owned[i]));
        free(owned[i]);
    }
    /* XT = [[a,d],[b,e],[long c, long f]]: Y = [XT[2], XT[0]]. */
    cr_assert_eq(outs[0]->dtype, ENG_DT_STRING);
    const eng_string_t *y = outs[0]->data;
    expect_str(&y[0], text[2]);
    expect_str(&y[1], text[5]);
    expect_str(&y[2], "a");
    expect_str(&y[3], "d");
    expect_str(&((const eng_string_t *)outs[1]->data)[0], "-5");
    expect_str(&((const eng_string_t *)outs[1]->data)[1], "2147483647");
    eng_tensor_free(outs[0]);
    eng_tensor_free(outs[1]);
    model_fixture_close(&f);
}

Test(engine_strings, a_numeric_op_is_refused_a_string_by_name)
{
    mb_t b;
    size_t len;
    uint8_t *bytes = strings_model(&b, &len, true);
    model_fixture_t f;
    model_fixture_load_bytes(&f, bytes, len);
    mb_free(&b);
    eng_shape_t shapes[2] = {{2, {2, 3}}, {1, {2}}};
    eng_plan_info_t info;
    cr_expect_eq(eng_model_plan_info(f.model, shapes, 2, &info), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "abs") && strstr(fs_errmsg(), "Abs does not take strings"),
              "%s", fs_errmsg());
    model_fixture_close(&f);
}
