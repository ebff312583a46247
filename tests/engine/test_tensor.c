/* test_tensor.c -- tests for engine/tensor.c: dtypes, shape arithmetic,
 * broadcasting, host tensors. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "engine/tensor.h"

/* An eng_shape_t of the listed dims. */
#define SHAPE(...)                                                                                 \
    ((eng_shape_t){.rank = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),              \
                   .dims = {__VA_ARGS__}})
static const eng_shape_t scalar = {.rank = 0};

Test(engine_tensor, dtype_sizes_follow_onnx_numbering)
{
    cr_expect_eq(eng_dtype_size(ENG_DT_FLOAT), 4);
    cr_expect_eq(eng_dtype_size(ENG_DT_UINT8), 1);
    cr_expect_eq(eng_dtype_size(ENG_DT_INT8), 1);
    cr_expect_eq(eng_dtype_size(ENG_DT_UINT16), 2);
    cr_expect_eq(eng_dtype_size(ENG_DT_INT16), 2);
    cr_expect_eq(eng_dtype_size(ENG_DT_INT32), 4);
    cr_expect_eq(eng_dtype_size(ENG_DT_INT64), 8);
    cr_expect_eq(eng_dtype_size(ENG_DT_BOOL), 1);
    cr_expect_eq(eng_dtype_size(ENG_DT_FLOAT16), 2);
    cr_expect_eq(eng_dtype_size(ENG_DT_DOUBLE), 8);
    cr_expect_eq(eng_dtype_size(ENG_DT_UINT32), 4);
    cr_expect_eq(eng_dtype_size(ENG_DT_UINT64), 8);
    cr_expect_eq(eng_dtype_size(ENG_DT_COMPLEX64), 8);
    cr_expect_eq(eng_dtype_size(ENG_DT_COMPLEX128), 16);
    cr_expect_eq(eng_dtype_size(ENG_DT_BFLOAT16), 2);
    cr_expect_eq(eng_dtype_size(ENG_DT_STRING), sizeof(eng_string_t));
    cr_expect_eq(sizeof(eng_string_t), 32);
    cr_expect_eq(eng_dtype_size(ENG_DT_UNDEFINED), 0);
    cr_expect_eq(eng_dtype_size(ENG_DT_FLOAT8E5M2), 1);
    cr_expect_eq(eng_dtype_size((eng_dtype_t)21), 0);
    cr_expect_eq(eng_dtype_size((eng_dtype_t)-1), 0);
}

Test(engine_tensor, dtype_names_never_null)
{
    cr_expect_str_eq(eng_dtype_name(ENG_DT_FLOAT), "float");
    cr_expect_str_eq(eng_dtype_name(ENG_DT_INT64), "int64");
    cr_expect_str_eq(eng_dtype_name(ENG_DT_BOOL), "bool");
    cr_expect_str_eq(eng_dtype_name(ENG_DT_BFLOAT16), "bfloat16");
    cr_expect_str_eq(eng_dtype_name((eng_dtype_t)99), "unknown");
    cr_expect_str_eq(eng_dtype_name((eng_dtype_t)-3), "unknown");
}

Test(engine_tensor, supported_dtypes_are_the_numeric_set)
{
    const eng_dtype_t yes[] = {ENG_DT_FLOAT,  ENG_DT_INT32,  ENG_DT_INT64,   ENG_DT_BOOL,
                               ENG_DT_UINT8,  ENG_DT_INT8,   ENG_DT_UINT16,  ENG_DT_INT16,
                               ENG_DT_DOUBLE, ENG_DT_UINT32, ENG_DT_UINT64,  ENG_DT_FLOAT16,
                               ENG_DT_BFLOAT16, ENG_DT_STRING};
    const eng_dtype_t no[] = {ENG_DT_UNDEFINED, ENG_DT_COMPLEX64,
                              ENG_DT_COMPLEX128, (eng_dtype_t)21, (eng_dtype_t)42};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_expect(eng_dtype_supported(yes[i]), "%s", eng_dtype_name(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_expect(!eng_dtype_supported(no[i]), "%s", eng_dtype_name(no[i]));
}

Test(engine_tensor, numel_of_scalar_zero_dim_and_saturation)
{
    eng_shape_t s = SHAPE(2, 3, 4);
    cr_expect_eq(eng_shape_numel(&s), 24);
    cr_expect_eq(eng_shape_numel(&scalar), 1);
    s = SHAPE(5, 0, 7);
    cr_expect_eq(eng_shape_numel(&s), 0);
    s = SHAPE(INT64_MAX / 2, 3);
    cr_expect_eq(eng_shape_numel(&s), INT64_MAX);
    s = SHAPE(1 << 30, 1 << 30, 1 << 30, 0);
    cr_expect_eq(eng_shape_numel(&s), 0, "a zero dim wins over saturation");
}

Test(engine_tensor, bounded_shapes_count_every_non_zero_dim)
{
    eng_shape_t s = SHAPE(ENG_NUMEL_MAX);
    cr_expect(eng_shape_bounded(&s));
    cr_expect(eng_shape_bounded(&scalar));
    s = SHAPE(ENG_NUMEL_MAX + 1);
    cr_expect_not(eng_shape_bounded(&s));
    s = SHAPE((int64_t)1 << 24, (int64_t)1 << 24);
    cr_expect(eng_shape_bounded(&s));
    s = SHAPE((int64_t)1 << 24, ((int64_t)1 << 24) + 1);
    cr_expect_not(eng_shape_bounded(&s));
    s = SHAPE(0, (int64_t)1 << 40, (int64_t)1 << 40);
    cr_expect_not(eng_shape_bounded(&s), "an empty shape whose other dims overflow is not bounded");
    s = SHAPE(0, ENG_NUMEL_MAX, 7, 0);
    cr_expect_not(eng_shape_bounded(&s));
    s = SHAPE(3, -1);
    cr_expect_not(eng_shape_bounded(&s));
    s = SHAPE(1099511627776, 1099511627776, 3);
    cr_expect_not(eng_shape_bounded(&s), "the product is checked before it overflows");
}

Test(engine_tensor, dim_arithmetic_saturates_instead_of_overflowing)
{
    cr_expect_eq(eng_dim_mul(1 << 20, 1 << 20), (int64_t)1 << 40);
    cr_expect_eq(eng_dim_mul((int64_t)1 << 40, (int64_t)1 << 33), INT64_MAX);
    cr_expect_eq(eng_dim_mul((int64_t)1 << 40, -((int64_t)1 << 33)), INT64_MIN);
    cr_expect_eq(eng_dim_add(INT64_MAX - 1, 5), INT64_MAX);
    cr_expect_eq(eng_dim_add(INT64_MIN + 1, -5), INT64_MIN);
    cr_expect_eq(eng_dim_add(7, -9), -2);
}

Test(engine_tensor, shapes_compare_by_rank_and_dims)
{
    eng_shape_t a = SHAPE(2, 3), b = SHAPE(2, 3), c = SHAPE(3, 2), d = SHAPE(2, 3, 1);
    a.dims[5] = 99; /* beyond the rank: ignored */
    cr_expect(eng_shape_equal(&a, &b));
    cr_expect(!eng_shape_equal(&a, &c));
    cr_expect(!eng_shape_equal(&a, &d));
    cr_expect(eng_shape_equal(&scalar, &scalar));
}

Test(engine_tensor, format_writes_brackets_and_truncates_safely)
{
    char buf[64];
    eng_shape_t s = SHAPE(1, 3, 224, 224);
    cr_expect_str_eq(eng_shape_format(&s, buf, sizeof buf), "[1,3,224,224]");
    cr_expect_str_eq(eng_shape_format(&scalar, buf, sizeof buf), "[]");
    char small[6];
    cr_expect_str_eq(eng_shape_format(&s, small, sizeof small), "[1,3,");
    char one[1] = {'x'};
    cr_expect_eq(eng_shape_format(&s, one, 1), one);
    cr_expect_eq(one[0], '\0');
    cr_expect_eq(eng_shape_format(&s, NULL, 0), NULL);
}

/* ONNX's Broadcasting.md examples. */
Test(engine_tensor, broadcast_follows_onnx_multidirectional_rules)
{
    struct {
        eng_shape_t a, b, want;
    } cases[] = {
        {SHAPE(2, 3, 4, 5), scalar, SHAPE(2, 3, 4, 5)},
        {SHAPE(2, 3, 4, 5), SHAPE(5), SHAPE(2, 3, 4, 5)},
        {SHAPE(4, 5), SHAPE(2, 3, 4, 5), SHAPE(2, 3, 4, 5)},
        {SHAPE(1, 4, 5), SHAPE(2, 3, 1, 1), SHAPE(2, 3, 4, 5)},
        {SHAPE(3, 4, 5), SHAPE(2, 1, 1, 1), SHAPE(2, 3, 4, 5)},
        {SHAPE(3, 1), SHAPE(1, 4), SHAPE(3, 4)},
        {SHAPE(0, 3), SHAPE(1, 3), SHAPE(0, 3)},
        {SHAPE(1), SHAPE(0), SHAPE(0)},
        {scalar, scalar, scalar},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_shape_t out = {0};
        char sa[64], sb[64];
        cr_expect_eq(eng_shape_broadcast(&cases[i].a, &cases[i].b, &out), 0, "case %zu: %s", i,
                     fs_errmsg());
        cr_expect(eng_shape_equal(&out, &cases[i].want), "case %zu: got %s, want %s", i,
                  eng_shape_format(&out, sa, sizeof sa),
                  eng_shape_format(&cases[i].want, sb, sizeof sb));
        /* Symmetric. */
        cr_expect_eq(eng_shape_broadcast(&cases[i].b, &cases[i].a, &out), 0);
        cr_expect(eng_shape_equal(&out, &cases[i].want), "case %zu reversed", i);
    }
}

Test(engine_tensor, broadcast_failure_names_both_shapes_and_leaves_out_alone)
{
    eng_shape_t a = SHAPE(2, 3), b = SHAPE(4), out = SHAPE(7, 7);
    cr_assert_eq(eng_shape_broadcast(&a, &b, &out), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[2,3]") && strstr(fs_errmsg(), "[4]"), "%s", fs_errmsg());
    cr_expect_eq(out.rank, 2);
    cr_expect_eq(out.dims[0], 7);
    a = SHAPE(2, 1);
    b = SHAPE(8, 4, 3);
    cr_expect_eq(eng_shape_broadcast(&a, &b, &out), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[2,1]") && strstr(fs_errmsg(), "[8,4,3]"), "%s", fs_errmsg());
    a = SHAPE(0);
    b = SHAPE(2);
    cr_expect_eq(eng_shape_broadcast(&a, &b, &out), FS_EINVAL, "0 only broadcasts with 1");
    a.rank = ENG_MAX_RANK + 1;
    cr_expect_eq(eng_shape_broadcast(&a, &b, &out), FS_EINVAL);
}

Test(engine_tensor, strides_are_row_major)
{
    int64_t st[ENG_MAX_RANK] = {0};
    eng_shape_t s = SHAPE(2, 3, 4);
    eng_shape_strides(&s, st);
    cr_expect_eq(st[0], 12);
    cr_expect_eq(st[1], 4);
    cr_expect_eq(st[2], 1);
    s = SHAPE(5, 0, 2);
    eng_shape_strides(&s, st);
    cr_expect_eq(st[2], 1);
    cr_expect_eq(st[1], 2);
    st[0] = -1;
    eng_shape_strides(&scalar, st);
    cr_expect_eq(st[0], -1, "a scalar has no strides to write");
}

Test(engine_tensor, bytes_of_known_and_unknown_dtypes)
{
    eng_tensor_t t = {.dtype = ENG_DT_FLOAT, .shape = SHAPE(2, 3)};
    cr_expect_eq(eng_tensor_bytes(&t), 24);
    t.dtype = ENG_DT_INT64;
    t.shape = scalar;
    cr_expect_eq(eng_tensor_bytes(&t), 8);
    t.dtype = ENG_DT_STRING;
    cr_expect_eq(eng_tensor_bytes(&t), sizeof(eng_string_t), "a string's record");
    t.dtype = ENG_DT_UNDEFINED;
    cr_expect_eq(eng_tensor_bytes(&t), 0);
    t.dtype = ENG_DT_DOUBLE;
    t.shape = SHAPE(INT64_MAX / 2, 4);
    cr_expect_eq(eng_tensor_bytes(&t), SIZE_MAX, "saturates instead of wrapping");
}

Test(engine_tensor, alloc_host_gives_zeroed_owned_data)
{
    eng_tensor_t *t = NULL;
    eng_shape_t s = SHAPE(3, 5);
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_INT32, &s, &t), 0, "%s", fs_errmsg());
    cr_assert(t && t->data);
    cr_expect_eq(t->dtype, ENG_DT_INT32);
    cr_expect(eng_shape_equal(&t->shape, &s));
    for (int i = 0; i < 15; i++)
        cr_expect_eq(((int32_t *)t->data)[i], 0);
    eng_tensor_free(t);

    s = SHAPE(4, 0);
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &s, &t), 0);
    cr_expect(t->data != NULL, "an empty tensor still has data");
    eng_tensor_free(t);
    cr_assert_eq(eng_tensor_alloc_host(ENG_DT_BOOL, &scalar, &t), 0);
    cr_expect_eq(t->shape.rank, 0);
    eng_tensor_free(t);
    eng_tensor_free(NULL);
}

Test(engine_tensor, alloc_host_rejects_what_it_cannot_size)
{
    eng_tensor_t *t = (eng_tensor_t *)0x1;
    eng_shape_t s = SHAPE(2);
    cr_expect_eq(eng_tensor_alloc_host(ENG_DT_UNDEFINED, &s, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "undefined"), "%s", fs_errmsg());
    s = SHAPE(2, -1);
    cr_expect_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &s, &t), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "[2,-1]"), "%s", fs_errmsg());
    s.rank = ENG_MAX_RANK + 1;
    cr_expect_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &s, &t), FS_EINVAL);
    s = SHAPE(INT64_MAX / 2, 4);
    cr_expect_eq(eng_tensor_alloc_host(ENG_DT_FLOAT, &s, &t), FS_ENOMEM);
    cr_expect_eq(t, (eng_tensor_t *)0x1, "*out untouched on error");
}

static int64_t cache_allocated(alloc_cache_t *c)
{
    alloc_cache_stats_t st;
    alloc_cache_stats(c, &st);
    return st.allocated.current;
}

/* eng_tensor_alloc_from takes its data from the cache when it has room and
 * gives it back on eng_tensor_free; from malloc (zeroed) without a cache,
 * for an empty tensor, or when the cache is at its limit. */
Test(engine_tensor, alloc_from_a_cache_falls_back_to_the_heap)
{
    alloc_provider_t *host;
    alloc_cache_t *roomy, *full;
    alloc_cache_config_t one = {.name = "full", .max_reserved_bytes = 1};
    cr_assert_eq(alloc_provider_host_create(&host), 0);
    cr_assert_eq(alloc_cache_create(host, NULL, &roomy), 0);
    cr_assert_eq(alloc_cache_create(host, &one, &full), 0);
    eng_shape_t s = SHAPE(3, 5);
    eng_tensor_t *a, *b, *c, *e;
    cr_assert_eq(eng_tensor_alloc_from(roomy, 0, ENG_DT_FLOAT, &s, &a), 0, "%s", fs_errmsg());
    cr_expect(alloc_cache_holds(roomy, a->data));
    cr_expect_geq(cache_allocated(roomy), 60);
    cr_assert_eq(eng_tensor_alloc_from(full, 0, ENG_DT_FLOAT, &s, &b), 0, "%s", fs_errmsg());
    cr_expect_eq(cache_allocated(full), 0, "a full cache lent the data");
    cr_assert_eq(eng_tensor_alloc_from(NULL, 0, ENG_DT_INT64, &s, &c), 0, "%s", fs_errmsg());
    eng_shape_t empty = SHAPE(0, 5);
    int64_t before = cache_allocated(roomy);
    cr_assert_eq(eng_tensor_alloc_from(roomy, 0, ENG_DT_FLOAT, &empty, &e), 0, "%s", fs_errmsg());
    cr_expect_eq(cache_allocated(roomy), before, "an empty tensor took a block");
    for (int i = 0; i < 15; i++)
        cr_expect_eq(((const float *)b->data)[i], 0.0f, "heap data is zeroed");
    eng_tensor_free(a);
    eng_tensor_free(b);
    eng_tensor_free(c);
    eng_tensor_free(e);
    cr_expect_eq(cache_allocated(roomy), 0, "freeing gave nothing back");
    alloc_cache_destroy(full);
    alloc_cache_destroy(roomy);
    alloc_provider_destroy(host);
}
