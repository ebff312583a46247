/* test_onnx_tensor.c -- tests for engine/onnx_tensor.c through the loader:
 * tensor data in every encoding, size checks, external data confined to the
 * model's directory, the weight allocator's callbacks, and
 * eng_tensor_load_proto. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/graph.h"
#include "tests/engine/onnx_build.h"

#define DT(x) ONNX__TENSOR_PROTO__DATA_TYPE__##x

static int expect_fails(mb_t *b, const char *dir, int want, const char *const *needles, size_t n)
{
    eng_graph_t *g = NULL;
    int rc = mb_load(b, dir, NULL, &g);
    cr_expect_eq(rc, want, "rc %s, want %s: %s", fs_errname(rc), fs_errname(want), fs_errmsg());
    for (size_t i = 0; i < n; i++)
        cr_expect(strstr(fs_errmsg(), needles[i]), "message lacks \"%s\": %s", needles[i],
                  fs_errmsg());
    eng_graph_destroy(g);
    return rc;
}

#define EXPECT_FAILS(b, dir, want, ...)                                                            \
    expect_fails(b, dir, want, (const char *const[]){__VA_ARGS__},                                 \
                 sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* The constant called `name` in g, asserted to exist with `bytes` of data. */
static const eng_tensor_t *constant(const eng_graph_t *g, const char *name, size_t bytes)
{
    int v = graph_value(g, name);
    cr_assert_geq(v, 0, "no value '%s'", name);
    cr_assert_eq(g->values[v].kind, ENG_VALUE_CONST, "'%s' is not a constant", name);
    const eng_tensor_t *t = &g->values[v].constant;
    cr_expect_eq(eng_tensor_bytes(t), bytes, "'%s': %zu bytes", name, eng_tensor_bytes(t));
    return t;
}

/* ---- encodings ------------------------------------------------------------------ */

Test(engine_load_tensor, typed_fields_and_raw_data_decode_every_dtype)
{
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__TensorProto *t;
#define INIT(name, dt, rank, ...)                                                                  \
    mb_initializer(&b, t = mb_tensor(&b, name, DT(dt), rank, (int64_t[]){__VA_ARGS__}))
    INIT("f", FLOAT, 1, 2);
    mb_floats(&b, t, (float[]){1.5f, -2.0f}, 2);
    INIT("f_raw", FLOAT, 1, 1);
    mb_raw(&b, t, (float[]){3.25f}, 4);
    INIT("i32", INT32, 1, 2);
    mb_int32s(&b, t, (int32_t[]){-7, 1 << 30}, 2);
    INIT("i32_raw", INT32, 1, 1);
    mb_raw(&b, t, (int32_t[]){-9}, 4);
    INIT("i64", INT64, 1, 1);
    mb_int64s(&b, t, (int64_t[]){-(1LL << 40)}, 1);
    INIT("bool", BOOL, 1, 3);
    mb_int32s(&b, t, (int32_t[]){0, 1, 5}, 3);
    INIT("u8", UINT8, 1, 2);
    mb_int32s(&b, t, (int32_t[]){255, 7}, 2);
    INIT("i8", INT8, 1, 2);
    mb_int32s(&b, t, (int32_t[]){-128, 127}, 2);
    INIT("i16", INT16, 1, 1);
    mb_int32s(&b, t, (int32_t[]){-2}, 1);
    INIT("u16", UINT16, 1, 1);
    mb_int32s(&b, t, (int32_t[]){65535}, 1);
    INIT("f16", FLOAT16, 1, 1);
    mb_int32s(&b, t, (int32_t[]){0x3c00}, 1);
    INIT("bf16", BFLOAT16, 1, 1);
    mb_int32s(&b, t, (int32_t[]){0x3f80}, 1);
    INIT("f64", DOUBLE, 1, 1);
    t->n_double_data = 1;
    t->double_data = mb_dup(&b, (double[]){0.1}, sizeof(double));
    INIT("u64", UINT64, 1, 1);
    t->n_uint64_data = 1;
    t->uint64_data = mb_dup(&b, (uint64_t[]){UINT64_MAX}, sizeof(uint64_t));
    INIT("u32", UINT32, 1, 1);
    t->n_uint64_data = 1;
    t->uint64_data = mb_dup(&b, (uint64_t[]){4000000000u}, sizeof(uint64_t));
    INIT("c64", COMPLEX64, 1, 1);
    mb_floats(&b, t, (float[]){1.0f, -1.0f}, 2);
    INIT("scalar", FLOAT, 0, 0);
    mb_floats(&b, t, (float[]){9.0f}, 1);
    INIT("empty", FLOAT, 2, 0, 3);
    INIT("raw_but_empty", FLOAT, 1, 1);
    mb_raw(&b, t, NULL, 0);
    mb_floats(&b, t, (float[]){4.0f}, 1);
#undef INIT
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, NULL, &g), 0, "%s", fs_errmsg());
    cr_expect_eq(((float *)constant(g, "f", 8)->data)[1], -2.0f);
    cr_expect_eq(*(float *)constant(g, "f_raw", 4)->data, 3.25f);
    cr_expect_eq(((int32_t *)constant(g, "i32", 8)->data)[1], 1 << 30);
    cr_expect_eq(*(int32_t *)constant(g, "i32_raw", 4)->data, -9);
    cr_expect_eq(*(int64_t *)constant(g, "i64", 8)->data, -(1LL << 40));
    const uint8_t *bl = constant(g, "bool", 3)->data;
    cr_expect(bl[0] == 0 && bl[1] == 1 && bl[2] == 1, "bools normalised to 0/1");
    const uint8_t *u8 = constant(g, "u8", 2)->data;
    cr_expect(u8[0] == 255 && u8[1] == 7);
    const int8_t *i8 = constant(g, "i8", 2)->data;
    cr_expect(i8[0] == -128 && i8[1] == 127);
    cr_expect_eq(*(int16_t *)constant(g, "i16", 2)->data, -2);
    cr_expect_eq(*(uint16_t *)constant(g, "u16", 2)->data, 65535);
    cr_expect_eq(*(uint16_t *)constant(g, "f16", 2)->data, 0x3c00);
    cr_expect_eq(*(uint16_t *)constant(g, "bf16", 2)->data, 0x3f80);
    cr_expect_eq(*(double *)constant(g, "f64", 8)->data, 0.1);
    cr_expect_eq(*(uint64_t *)constant(g, "u64", 8)->data, UINT64_MAX);
    cr_expect_eq(*(uint32_t *)constant(g, "u32", 4)->data, 4000000000u);
    cr_expect_eq(((float *)constant(g, "c64", 8)->data)[1], -1.0f);
    const eng_tensor_t *sc = constant(g, "scalar", 4);
    cr_expect_eq(sc->shape.rank, 0);
    cr_expect_eq(*(float *)sc->data, 9.0f);
    const eng_tensor_t *em = constant(g, "empty", 0);
    cr_expect_eq(em->shape.dims[0], 0);
    cr_expect(em->data != NULL);
    cr_expect_eq(*(float *)constant(g, "raw_but_empty", 4)->data, 4.0f);
    cr_expect_eq(g->weight_bytes, 8 + 4 + 8 + 4 + 8 + 3 + 2 + 2 + 2 + 2 + 2 + 2 + 8 + 8 + 4 + 8 +
                                      4 + 0 + 4);
    eng_graph_destroy(g);
    mb_free(&b);
}

Test(engine_load_tensor, data_that_does_not_match_the_dims_is_a_parse_error)
{
    struct {
        const char *needle;
        int want;
    } cases[] = {
        {"initializer 'bad': raw_data holds 3 bytes, but float [1] needs 4", FS_EPARSE},
        {"initializer 'bad': float_data holds 2 values, but float [3] needs 3", FS_EPARSE},
        {"initializer 'bad': int64_data holds 0 values, but int64 [2] needs 2", FS_EPARSE},
        {"initializer 'bad' has both raw_data and float_data", FS_EPARSE},
        {"initializer 'bad' has a negative dimension (-2)", FS_EPARSE},
        {"initializer 'bad' has no data_type", FS_EPARSE},
        {"initializer 'bad': shape [1099511627776,1099511627776] is too large", FS_EPARSE},
        {"initializer 'bad' has rank 9", FS_ENOTSUP},
        {"initializer 'bad' is a string tensor", FS_ENOTSUP},
        {"initializer 'bad' has data_type 21, which is not supported", FS_ENOTSUP},
        {"initializer 'bad' is segmented", FS_ENOTSUP},
        {"initializer #0 has no name", FS_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mb_t b;
        mb_init(&b, 8, 13);
        Onnx__TensorProto *t = mb_tensor(&b, "bad", DT(FLOAT), 1, (int64_t[]){1});
        switch (i) {
        case 0:
            mb_raw(&b, t, "abc", 3);
            break;
        case 1:
            t->dims[0] = 3;
            mb_floats(&b, t, (float[]){1, 2}, 2);
            break;
        case 2:
            t->data_type = DT(INT64);
            t->dims[0] = 2;
            break;
        case 3:
            mb_raw(&b, t, "abcd", 4);
            mb_floats(&b, t, (float[]){1}, 1);
            break;
        case 4:
            t->dims[0] = -2;
            break;
        case 5:
            t->has_data_type = 0;
            break;
        case 6:
            t = mb_tensor(&b, "bad", DT(FLOAT), 2, (int64_t[]){1LL << 40, 1LL << 40});
            break;
        case 7:
            t = mb_tensor(&b, "bad", DT(FLOAT), 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
            mb_floats(&b, t, (float[]){1}, 1);
            break;
        case 8:
            t->data_type = DT(STRING);
            break;
        case 9:
            t->data_type = 21; /* uint4 */
            break;
        case 10: {
            Onnx__TensorProto__Segment *seg = mb_alloc(&b, sizeof *seg);
            onnx__tensor_proto__segment__init(seg);
            t->segment = seg;
            mb_floats(&b, t, (float[]){1}, 1);
            break;
        }
        case 11:
            t->name = NULL;
            mb_floats(&b, t, (float[]){1}, 1);
            break;
        }
        mb_initializer(&b, t);
        EXPECT_FAILS(&b, NULL, cases[i].want, cases[i].needle);
        mb_free(&b);
    }
}

/* ---- external data ---------------------------------------------------------------- */

typedef struct ext_dirs {
    char model[64];     /* the model's directory */
    char outside[64];   /* a directory beside it, holding a file it must not reach */
} ext_dirs_t;

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* model/weights.bin: 8 junk bytes, then floats 0..5; model/sub/w2.bin: two
 * int64; model/link.bin -> outside/secret.bin. */
static void ext_setup(ext_dirs_t *d)
{
    snprintf(d->model, sizeof d->model, "/tmp/fs_ext_model_XXXXXX");
    snprintf(d->outside, sizeof d->outside, "/tmp/fs_ext_outside_XXXXXX");
    cr_assert(mkdtemp(d->model) && mkdtemp(d->outside));
    uint8_t buf[8 + 24] = "junkjunk";
    const float f[6] = {0, 1, 2, 3, 4, 5};
    memcpy(buf + 8, f, sizeof f);
    write_file(d->model, "weights.bin", buf, sizeof buf);
    char sub[96], link[96], secret[96];
    snprintf(sub, sizeof sub, "%s/sub", d->model);
    cr_assert_eq(mkdir(sub, 0700), 0);
    write_file(sub, "w2.bin", (int64_t[]){11, -12}, 16);
    write_file(d->outside, "secret.bin", f, sizeof f);
    snprintf(secret, sizeof secret, "%s/secret.bin", d->outside);
    snprintf(link, sizeof link, "%s/link.bin", d->model);
    cr_assert_eq(symlink(secret, link), 0);
}

static void ext_teardown(const ext_dirs_t *d)
{
    char p[128];
    const char *files[] = {"weights.bin", "sub/w2.bin", "link.bin"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", d->model, files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/sub", d->model);
    rmdir(p);
    rmdir(d->model);
    snprintf(p, sizeof p, "%s/secret.bin", d->outside);
    unlink(p);
    rmdir(d->outside);
}

/* A model with one float [2,3] initializer "E" at `location`. */
static void ext_model(mb_t *b, const char *location, const char *offset, const char *length)
{
    mb_init(b, 8, 13);
    Onnx__TensorProto *t = mb_tensor(b, "E", DT(FLOAT), 2, (int64_t[]){2, 3});
    mb_external(b, t, location, offset, length);
    mb_initializer(b, t);
}

Test(engine_load_tensor, external_data_is_read_from_the_model_directory)
{
    ext_dirs_t d;
    ext_setup(&d);
    mb_t b;
    ext_model(&b, "weights.bin", "8", "24");
    Onnx__TensorProto *t2 = mb_tensor(&b, "E2", DT(INT64), 1, (int64_t[]){2});
    mb_external(&b, t2, "./sub/w2.bin", NULL, NULL);
    mb_initializer(&b, t2);
    Onnx__TensorProto *t3 = mb_tensor(&b, NULL, DT(INT64), 1, (int64_t[]){1});
    mb_external(&b, t3, "sub/w2.bin", "8", "8");
    mb_attr_t(&b, mb_node(&b, "Constant", "c", "", "C"), "value", t3);
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, d.model, NULL, &g), 0, "%s", fs_errmsg());
    const float *e = constant(g, "E", 24)->data;
    for (int i = 0; i < 6; i++)
        cr_expect_eq(e[i], (float)i);
    cr_expect_eq(((int64_t *)constant(g, "E2", 16)->data)[1], -12);
    cr_expect_eq(*(int64_t *)constant(g, "C", 8)->data, -12);
    cr_expect_eq(g->weight_bytes, 48);
    eng_graph_destroy(g);
    mb_free(&b);
    ext_teardown(&d);
}

Test(engine_load_tensor, external_locations_leaving_the_directory_are_rejected)
{
    ext_dirs_t d;
    ext_setup(&d);
    char abs[128];
    snprintf(abs, sizeof abs, "%s/weights.bin", d.model);
    const struct {
        const char *location, *offset, *length;
        int want;
        const char *needle;
    } cases[] = {
        {"../x", NULL, NULL, FS_EINVAL, "initializer 'E': external data location '../x' contains"},
        {"sub/../weights.bin", "8", NULL, FS_EINVAL, "'sub/../weights.bin' contains '..'"},
        {"..", NULL, NULL, FS_EINVAL, "contains '..'"},
        {abs, "8", NULL, FS_EINVAL, "is an absolute path"},
        {"/etc/passwd", NULL, NULL, FS_EINVAL, "initializer 'E': external data location "
                                               "'/etc/passwd' is an absolute path"},
        {"link.bin", NULL, NULL, FS_EINVAL, "'link.bin' resolves to"},
        {"missing.bin", NULL, NULL, FS_EIO, "initializer 'E': external data file 'missing.bin'"},
        {"sub", NULL, NULL, FS_EIO, "not a regular file"},
        {"weights.bin", "16", NULL, FS_EPARSE,
         "holds 32 bytes, but offset 16 + length 24 runs past"},
        {"weights.bin", "99999999999999999999", NULL, FS_EPARSE, "offset '99999999999999999999'"},
        {"weights.bin", "8x", NULL, FS_EPARSE, "offset '8x' is not a byte count"},
        {"weights.bin", "8", "20", FS_EPARSE, "length 20 does not match"},
        {"weights.bin", "8", "-24", FS_EPARSE, "length '-24'"},
        {NULL, "8", "24", FS_EPARSE, "has no location"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mb_t b;
        ext_model(&b, cases[i].location, cases[i].offset, cases[i].length);
        EXPECT_FAILS(&b, d.model, cases[i].want, cases[i].needle);
        mb_free(&b);
    }
    mb_t b;
    ext_model(&b, "weights.bin", "8", "24");
    EXPECT_FAILS(&b, NULL, FS_EINVAL, "external file 'weights.bin'", "no model directory");
    mb_free(&b);
    ext_teardown(&d);
}

/* ---- the weight allocator ------------------------------------------------------------ */

/* Counts the callbacks; fails the allocation numbered fail_at (1-based). */
typedef struct counting {
    int allocs, frees, calls, fail_at;
    size_t live_bytes;
} counting_t;

#define HDR 16

static void *count_alloc(void *user, size_t bytes)
{
    counting_t *c = user;
    if (++c->calls == c->fail_at)
        return NULL;
    char *p = malloc(HDR + bytes);
    cr_assert(p);
    memcpy(p, &bytes, sizeof bytes);
    c->allocs++;
    c->live_bytes += bytes;
    return p + HDR;
}

static void count_free(void *user, void *ptr)
{
    counting_t *c = user;
    char *p = (char *)ptr - HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    c->frees++;
    c->live_bytes -= bytes;
    free(p);
}

/* Three initializers and two Constant nodes: five weights, 76 bytes. */
static void five_weights(mb_t *b)
{
    mb_init(b, 8, 13);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        Onnx__TensorProto *t = mb_tensor(b, name, DT(FLOAT), 1, (int64_t[]){4});
        mb_floats(b, t, (float[]){1, 2, 3, 4}, 4);
        mb_initializer(b, t);
    }
    mb_attr_ints(b, mb_node(b, "Constant", "c1", "", "C1"), "value_ints", (int64_t[]){1, 2, 3}, 3);
    mb_attr_f(b, mb_node(b, "Constant", "c2", "", "C2"), "value_float", 1.0f);
}

Test(engine_load_tensor, weights_come_from_the_callbacks_and_go_back)
{
    mb_t b;
    five_weights(&b);
    counting_t c = {0};
    eng_weight_alloc_t wa = {.alloc = count_alloc, .free = count_free, .user = &c};
    eng_graph_t *g;
    cr_assert_eq(mb_load(&b, NULL, &wa, &g), 0, "%s", fs_errmsg());
    cr_expect_eq(c.allocs, 5);
    cr_expect_eq(c.frees, 0);
    cr_expect_eq(c.live_bytes, 3 * 16 + 24 + 4);
    cr_expect_eq(g->weight_bytes, c.live_bytes);
    eng_graph_destroy(g);
    cr_expect_eq(c.frees, 5);
    cr_expect_eq(c.live_bytes, 0);
    mb_free(&b);
}

Test(engine_load_tensor, failed_weight_allocation_frees_the_others)
{
    for (int fail_at = 1; fail_at <= 5; fail_at++) {
        mb_t b;
        five_weights(&b);
        counting_t c = {.fail_at = fail_at};
        eng_weight_alloc_t wa = {.alloc = count_alloc, .free = count_free, .user = &c};
        eng_graph_t *g;
        cr_expect_eq(mb_load(&b, NULL, &wa, &g), FS_ENOMEM, "fail_at %d", fail_at);
        cr_expect(strstr(fs_errmsg(), "out of memory for"), "%s", fs_errmsg());
        cr_expect_eq(c.allocs, fail_at - 1);
        cr_expect_eq(c.frees, c.allocs);
        cr_expect_eq(c.live_bytes, 0);
        mb_free(&b);
    }
}

Test(engine_load_tensor, an_unsupported_model_allocates_no_weights)
{
    mb_t b;
    five_weights(&b);
    mb_node(&b, "FooBar", "f", "w0", "Y");
    counting_t c = {0};
    eng_weight_alloc_t wa = {.alloc = count_alloc, .free = count_free, .user = &c};
    eng_graph_t *g;
    cr_expect_eq(mb_load(&b, NULL, &wa, &g), FS_ENOTSUP);
    cr_expect_eq(c.calls, 0, "data is read only once the graph is known to be supported");
    mb_free(&b);
}

Test(engine_load_tensor, failed_external_read_frees_what_was_allocated)
{
    ext_dirs_t d;
    ext_setup(&d);
    mb_t b;
    ext_model(&b, "weights.bin", "8", "24");
    Onnx__TensorProto *t = mb_tensor(&b, "gone", DT(FLOAT), 1, (int64_t[]){1});
    mb_external(&b, t, "gone.bin", NULL, NULL);
    mb_initializer(&b, t);
    counting_t c = {0};
    eng_weight_alloc_t wa = {.alloc = count_alloc, .free = count_free, .user = &c};
    eng_graph_t *g;
    cr_expect_eq(mb_load(&b, d.model, &wa, &g), FS_EIO, "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "initializer 'gone'"), "%s", fs_errmsg());
    cr_expect_eq(c.allocs, 2);
    cr_expect_eq(c.frees, 2);
    cr_expect_eq(c.live_bytes, 0);
    mb_free(&b);
    ext_teardown(&d);
}

/* ---- eng_tensor_load_proto -------------------------------------------------------------- */

static uint8_t *pack_tensor(mb_t *b, const Onnx__TensorProto *t, size_t *len)
{
    *len = onnx__tensor_proto__get_packed_size(t);
    uint8_t *buf = mb_alloc(b, *len);
    cr_assert_eq(onnx__tensor_proto__pack(t, buf), *len);
    return buf;
}

Test(engine_load_tensor, tensor_file_loads_with_name_shape_and_data)
{
    mb_t b;
    mb_init(&b, 8, 13);
    Onnx__TensorProto *t = mb_tensor(&b, "x", DT(FLOAT), 2, (int64_t[]){2, 3});
    mb_raw(&b, t, (float[]){0, 1, 2, 3, 4, 5}, 24);
    size_t len;
    uint8_t *buf = pack_tensor(&b, t, &len);
    eng_tensor_t *out = NULL;
    char *name = NULL;
    cr_assert_eq(eng_tensor_load_proto(buf, len, &out, &name), 0, "%s", fs_errmsg());
    cr_expect_str_eq(name, "x");
    cr_expect_eq(out->dtype, ENG_DT_FLOAT);
    cr_expect_eq(out->shape.rank, 2);
    cr_expect_eq(out->shape.dims[1], 3);
    cr_expect_eq(((float *)out->data)[5], 5.0f);
    free(name);
    eng_tensor_free(out);

    /* A 0-d scalar, unnamed. */
    t = mb_tensor(&b, NULL, DT(INT64), 0, NULL);
    mb_int64s(&b, t, (int64_t[]){-5}, 1);
    buf = pack_tensor(&b, t, &len);
    name = (char *)0x1;
    cr_assert_eq(eng_tensor_load_proto(buf, len, &out, &name), 0, "%s", fs_errmsg());
    cr_expect_null(name);
    cr_expect_eq(out->shape.rank, 0);
    cr_expect_eq(*(int64_t *)out->data, -5);
    eng_tensor_free(out);

    /* A zero dim, and no name wanted. */
    t = mb_tensor(&b, "z", DT(FLOAT), 2, (int64_t[]){0, 4});
    buf = pack_tensor(&b, t, &len);
    cr_assert_eq(eng_tensor_load_proto(buf, len, &out, NULL), 0, "%s", fs_errmsg());
    cr_expect_eq(eng_shape_numel(&out->shape), 0);
    cr_expect_eq(out->shape.dims[1], 4);
    cr_expect(out->data != NULL);
    eng_tensor_free(out);

    /* A dtype the engine does not compute still loads (the caller decides). */
    t = mb_tensor(&b, "d", DT(DOUBLE), 1, (int64_t[]){1});
    t->n_double_data = 1;
    t->double_data = mb_dup(&b, (double[]){2.5}, sizeof(double));
    buf = pack_tensor(&b, t, &len);
    cr_assert_eq(eng_tensor_load_proto(buf, len, &out, NULL), 0, "%s", fs_errmsg());
    cr_expect_eq(out->dtype, ENG_DT_DOUBLE);
    cr_expect_eq(*(double *)out->data, 2.5);
    eng_tensor_free(out);
    mb_free(&b);
}

Test(engine_load_tensor, bad_tensor_files_fail_cleanly)
{
    mb_t b;
    mb_init(&b, 8, 13);
    eng_tensor_t *out = (eng_tensor_t *)0x1;
    char *name = (char *)0x1;
    cr_expect_eq(eng_tensor_load_proto("\xff\xff\xff\xff", 4, &out, &name), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "TensorProto"), "%s", fs_errmsg());
    cr_expect_eq(eng_tensor_load_proto("", 0, &out, &name), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "no data_type"), "%s", fs_errmsg());
    cr_expect_eq(eng_tensor_load_proto(NULL, 3, &out, &name), FS_EINVAL);
    cr_expect_eq(out, (eng_tensor_t *)0x1, "untouched on error");
    cr_expect_eq(name, (char *)0x1, "untouched on error");

    Onnx__TensorProto *t = mb_tensor(&b, "s", DT(STRING), 1, (int64_t[]){1});
    size_t len;
    uint8_t *buf = pack_tensor(&b, t, &len);
    cr_expect_eq(eng_tensor_load_proto(buf, len, &out, NULL), FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "tensor 's' is a string tensor"), "%s", fs_errmsg());

    t = mb_tensor(&b, "e", DT(FLOAT), 1, (int64_t[]){1});
    mb_external(&b, t, "data.bin", NULL, NULL);
    buf = pack_tensor(&b, t, &len);
    cr_expect_eq(eng_tensor_load_proto(buf, len, &out, NULL), FS_EINVAL);

    /* Every strict prefix of a tensor with data fails. */
    t = mb_tensor(&b, "x", DT(FLOAT), 2, (int64_t[]){2, 2});
    mb_raw(&b, t, (float[]){1, 2, 3, 4}, 16);
    buf = pack_tensor(&b, t, &len);
    for (size_t cut = 0; cut < len; cut++) {
        eng_tensor_t *p = NULL;
        cr_expect_lt(eng_tensor_load_proto(buf, cut, &p, NULL), 0, "prefix %zu of %zu", cut, len);
        cr_expect_null(p);
    }
    mb_free(&b);
}
