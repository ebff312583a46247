/* test_shm.c -- the system shared memory region table (server/shm.c):
 * register against the object's size, status in Triton's shape, acquire
 * bounds, a region held past its unregister, and the bounds on names,
 * keys, region count and mapped bytes; every mapping gone at the end. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <string.h>

#include "common/error.h"
#include "server/shm.h"
#include "tests/server/shm_test.h"

Test(srv_shm, register_status_acquire_and_unregister)
{
    char key[64];
    void *obj;
    shm_test_make("a", 3 * 4096, key, &obj);
    srv_shm_t *t = NULL;
    cr_assert_eq(srv_shm_create(0, &t), 0);
    /* An offset inside a page: the bytes seen are the object's own. */
    cr_assert_eq(srv_shm_register(t, "in", key, 100, 5000), 0, "%s", fs_errmsg());
    cr_assert_eq(srv_shm_register(t, "out", key + 1, 8192, 4096), 0, "%s", fs_errmsg());
    cr_expect_eq(shm_test_mappings(key), 3); /* the test's own and two */
    memcpy((char *)obj + 100 + 7, "hello", 5);
    srv_shm_region_t *g = NULL;
    void *addr = NULL;
    cr_assert_eq(srv_shm_acquire(t, "in", 7, 5, "input 'x'", &g, &addr), 0, "%s", fs_errmsg());
    cr_expect_eq(memcmp(addr, "hello", 5), 0);
    memcpy(addr, "HELLO", 5);
    cr_expect_eq(memcmp((char *)obj + 107, "HELLO", 5), 0, "writes reach the object");

    cJSON *st = NULL;
    cr_assert_eq(srv_shm_status(t, SRV_SHM_SYSTEM, NULL, &st), 0);
    char *text = cJSON_PrintUnformatted(st);
    char want[512];
    snprintf(want, sizeof want,
             "[{\"name\":\"in\",\"key\":\"%s\",\"offset\":100,\"byte_size\":5000},"
             "{\"name\":\"out\",\"key\":\"%s\",\"offset\":8192,\"byte_size\":4096}]",
             key, key + 1);
    cr_expect_str_eq(text, want);
    free(text);
    cJSON_Delete(st);
    cr_assert_eq(srv_shm_status(t, SRV_SHM_SYSTEM, "out", &st), 0);
    cr_expect_eq(cJSON_GetArraySize(st), 1);
    cJSON_Delete(st);
    cr_expect_eq(srv_shm_status(t, SRV_SHM_SYSTEM, "nope", &st), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "system shared memory region 'nope' is not registered");

    /* Bounds of an acquire. */
    srv_shm_region_t *g2 = NULL;
    cr_expect_eq(srv_shm_acquire(t, "in", 4999, 2, "output 'y'", &g2, &addr), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "output 'y': shared_memory_offset 4999 + shared_memory_byte_size "
                                  "2 is past the end of system shared memory region 'in' (5000 "
                                  "bytes)");
    cr_expect_eq(srv_shm_acquire(t, "in", 5001, 0, "x", &g2, &addr), FS_EINVAL);
    cr_expect_eq(srv_shm_acquire(t, "zz", 0, 1, "input 'x'", &g2, &addr), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "input 'x': shared memory region 'zz' is not registered (as "
                                  "system or CUDA shared memory)");
    cr_expect_null(g2);

    /* Unregistered while held: gone from the table, still mapped. */
    size_t n;
    uint64_t bytes;
    srv_shm_unregister(t, SRV_SHM_SYSTEM, "in");
    srv_shm_unregister(t, SRV_SHM_SYSTEM, "in"); /* again: no error */
    cr_expect_eq(srv_shm_status(t, SRV_SHM_SYSTEM, "in", &st), FS_EINVAL);
    srv_shm_usage(t, &n, &bytes);
    cr_expect_eq(n, 2);
    cr_expect_eq(bytes, 9096);
    cr_expect_eq(shm_test_mappings(key), 3);
    cr_expect_eq(memcmp(addr, "HELLO", 5), 0);
    /* The name is free again at once. */
    cr_expect_eq(srv_shm_register(t, "in", key, 0, 4096), 0, "%s", fs_errmsg());
    srv_shm_release(g);
    cr_expect_eq(shm_test_mappings(key), 3, "the held one went with its last reference");
    srv_shm_unregister(t, SRV_SHM_SYSTEM, NULL);
    srv_shm_usage(t, &n, &bytes);
    cr_expect_eq(n, 0);
    cr_expect_eq(bytes, 0);
    cr_expect_eq(shm_test_mappings(key), 1, "only the test's own mapping is left");
    srv_shm_destroy(t);
    shm_test_drop(key, obj, 3 * 4096);
}

Test(srv_shm, register_refuses_what_is_wrong_naming_it)
{
    char key[64];
    void *obj;
    shm_test_make("b", 4096, key, &obj);
    srv_shm_t *t = NULL;
    cr_assert_eq(srv_shm_create(10000, &t), 0);
    static const struct {
        const char *name, *key;
        uint64_t offset, size;
        const char *want;
    } bad[] = {
        {"", NULL, 0, 16, "region name '' must be 1 to 127 bytes"},
        {"a b", NULL, 0, 16, "region name 'a b' must be"},
        {"r", "/no/slash", 0, 16, "key '/no/slash' must be an optional '/'"},
        {"r", "..", 0, 16, "(not '.' or '..')"},
        {"r", "/fs-shm-test-absent", 0, 16, "cannot open key '/fs-shm-test-absent'"},
        {"r", NULL, 4000, 100, "offset 4000 + byte_size 100 is past the end of key"},
        {"r", NULL, 5000, 1, "is past the end of key"},
        {"r", NULL, 0, 0, "byte_size must be at least 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(srv_shm_register(t, bad[i].name, bad[i].key ? bad[i].key : key,
                                      bad[i].offset, bad[i].size), FS_EINVAL, "case %zu", i);
        cr_expect(strstr(fs_errmsg(), bad[i].want), "case %zu: %s", i, fs_errmsg());
    }
    char longname[200];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_expect_eq(srv_shm_register(t, longname, key, 0, 16), FS_EINVAL);
    cr_expect_eq(srv_shm_register(t, "r", key, 0, 4096), 0, "%s", fs_errmsg());
    cr_expect_eq(srv_shm_register(t, "r", key, 0, 16), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "region 'r' is already registered"), "%s", fs_errmsg());
    /* The bytes bound: 4096 + 4096 fit 10000, a third does not. */
    cr_expect_eq(srv_shm_register(t, "s", key, 0, 4096), 0, "%s", fs_errmsg());
    cr_expect_eq(srv_shm_register(t, "u", key, 0, 4096), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "4096 bytes more would pass the 10000 bytes flatserve maps at "
                                  "once (8192 mapped now)"), "%s", fs_errmsg());
    cr_expect_eq(shm_test_mappings(key), 3);
    srv_shm_destroy(t); /* unmaps what is registered */
    cr_expect_eq(shm_test_mappings(key), 1);
    shm_test_drop(key, obj, 4096);
}

Test(srv_shm, at_most_the_region_limit_is_mapped)
{
    char key[64];
    void *obj;
    shm_test_make("c", 4096, key, &obj);
    srv_shm_t *t = NULL;
    cr_assert_eq(srv_shm_create(0, &t), 0);
    char name[32];
    for (int i = 0; i < SRV_SHM_REGIONS_MAX; i++) {
        snprintf(name, sizeof name, "r%d", i);
        cr_assert_eq(srv_shm_register(t, name, key, 0, 64), 0, "%d: %s", i, fs_errmsg());
    }
    cr_expect_eq(srv_shm_register(t, "one_more", key, 0, 64), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "256 regions are mapped, the most flatserve keeps"), "%s",
              fs_errmsg());
    /* A region unregistered but held still counts. */
    srv_shm_region_t *g = NULL;
    void *addr;
    cr_assert_eq(srv_shm_acquire(t, "r0", 0, 64, "x", &g, &addr), 0);
    srv_shm_unregister(t, SRV_SHM_SYSTEM, "r0");
    cr_expect_eq(srv_shm_register(t, "one_more", key, 0, 64), FS_EINVAL);
    srv_shm_release(g);
    cr_expect_eq(srv_shm_register(t, "one_more", key, 0, 64), 0, "%s", fs_errmsg());
    cr_expect_eq(shm_test_mappings(key), 1 + SRV_SHM_REGIONS_MAX);
    srv_shm_destroy(t);
    cr_expect_eq(shm_test_mappings(key), 1);
    shm_test_drop(key, obj, 4096);
}

/* The kinds share one name space and keep their own unregister and status;
 * a CUDA register is refused naming why without a device (a build without
 * CUDA: no GPU support; a CUDA build: the device it does not have). */
Test(srv_shm, cuda_regions_share_the_name_space_and_keep_their_own_lists)
{
    char key[64];
    void *obj;
    shm_test_make("k", 4096, key, &obj);
    srv_shm_t *t = NULL;
    cr_assert_eq(srv_shm_create(0, &t), 0);
    cr_assert_eq(srv_shm_register(t, "r", key, 0, 64), 0, "%s", fs_errmsg());
    uint8_t handle[SRV_SHM_CUDA_HANDLE_BYTES] = {0};
    cr_expect_eq(srv_shm_register_cuda(t, "r", handle, 0, 64), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "cannot register CUDA shared memory region 'r': the name is "
                                  "registered as system shared memory (one name space holds both "
                                  "kinds); unregister it first");
    cr_expect_eq(srv_shm_register_cuda(t, "g", handle, 0, 0), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "CUDA shared memory region 'g': byte_size must be at least 1");
    cr_expect_eq(srv_shm_register_cuda(t, "a/b", handle, 0, 8), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "CUDA shared memory region name 'a/b' must be"), "%s",
              fs_errmsg());
    int rc = srv_shm_register_cuda(t, "g", handle, 9999, 64);
#if FS_HAVE_CUDA
    cr_expect_eq(rc, FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "device_id 9999 is not a CUDA device of this server"), "%s",
              fs_errmsg());
#else
    cr_expect_eq(rc, FS_ENOTSUP);
    cr_expect(strstr(fs_errmsg(), "cannot register CUDA shared memory region 'g': this server "
                                  "was built without GPU support"), "%s", fs_errmsg());
#endif
    cJSON *st = NULL;
    cr_assert_eq(srv_shm_status(t, SRV_SHM_CUDA, NULL, &st), 0);
    cr_expect_eq(cJSON_GetArraySize(st), 0, "the system region is not listed as CUDA");
    cJSON_Delete(st);
    cr_expect_eq(srv_shm_status(t, SRV_SHM_CUDA, "r", &st), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "the region named 'r' is registered as system shared memory, "
                                  "not CUDA shared memory");
    cr_expect_eq(srv_shm_status(t, SRV_SHM_CUDA, "g", &st), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "CUDA shared memory region 'g' is not registered");
    srv_shm_unregister(t, SRV_SHM_CUDA, "r");
    srv_shm_unregister(t, SRV_SHM_CUDA, NULL);
    cr_assert_eq(srv_shm_status(t, SRV_SHM_SYSTEM, "r", &st), 0, "%s", fs_errmsg());
    cJSON_Delete(st);
    size_t n = 0;
    uint64_t bytes = 0;
    srv_shm_usage(t, &n, &bytes);
    cr_expect_eq(n, 1);
    cr_expect_eq(bytes, 64);
    srv_shm_destroy(t);
    cr_expect_eq(shm_test_mappings(key), 1);
    shm_test_drop(key, obj, 4096);
}
