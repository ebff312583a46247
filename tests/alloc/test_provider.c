/* test_provider.c -- tests of alloc/provider*.c: the host and fault
 * providers everywhere, the CUDA providers where a GPU is usable (they skip
 * with the probe's reason elsewhere), and the default provider's choice. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/provider.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static alloc_provider_t *host_new(void)
{
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_host_create(&p), 0, "host provider: %s", fs_errmsg());
    return p;
}

/* fault(inner); `cfg` may be NULL. */
static alloc_provider_t *fault_new(alloc_provider_t *inner, const alloc_fault_config_t *cfg)
{
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_fault_create(inner, cfg, &p), 0, "fault provider: %s",
                 fs_errmsg());
    return p;
}

static alloc_fault_counts_t fault_counts(alloc_provider_t *p)
{
    alloc_fault_counts_t c;
    cr_assert_eq(alloc_fault_counts(p, &c), 0, "%s", fs_errmsg());
    return c;
}

/* Asserts the fault provider holds nothing, then destroys it and `inner`. */
static void fault_finish(alloc_provider_t *fault, alloc_provider_t *inner)
{
    alloc_fault_counts_t c = fault_counts(fault);
    cr_expect_eq(c.live_bytes, 0, "live bytes at end: %llu", (unsigned long long)c.live_bytes);
    cr_expect_eq(c.live_allocs, 0, "live allocs at end: %llu", (unsigned long long)c.live_allocs);
    alloc_provider_destroy(fault);
    alloc_provider_destroy(inner);
}

static void expect_msg_contains(const char *needle)
{
    cr_expect(strstr(fs_errmsg(), needle) != NULL, "message '%s' should contain '%s'", fs_errmsg(),
              needle);
}

/* Polls `fence` until it passes, for at most 10 s of real time. Returns
 * the last query result. */
static int fence_wait(alloc_provider_t *p, void *fence)
{
    uint64_t deadline = fs_clock_real_ns() + 10ull * 1000000000ull;
    int rc;
    while ((rc = alloc_provider_fence_query(p, fence)) == 0 && fs_clock_real_ns() < deadline)
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    return rc;
}

/* --- host ------------------------------------------------------------------ */

Test(alloc_provider_host, names_itself_host_with_no_fences)
{
    alloc_provider_t *p = host_new();
    cr_expect_str_eq(alloc_provider_name(p), "host");
    cr_expect_not(alloc_provider_is_device(p));
    cr_expect_not(alloc_provider_has_fences(p));
    void *fence = (void *)1;
    cr_expect_eq(alloc_provider_fence_record(p, 0, &fence), 0);
    cr_expect_null(fence, "a provider without fences records NULL");
    cr_expect_eq(alloc_provider_fence_query(p, NULL), 1, "a NULL fence reads as passed");
    alloc_provider_fence_destroy(p, NULL);
    alloc_provider_destroy(p);
}

Test(alloc_provider_host, allocates_page_aligned_writable_memory)
{
    alloc_provider_t *p = host_new();
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const size_t sizes[] = {1, 512, 4 * KIB, 3 * 4 * KIB + 17, 8 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *ptr = NULL;
        cr_assert_eq(alloc_provider_alloc(p, sizes[i], (void **)&ptr), 0, "%zu bytes: %s",
                     sizes[i], fs_errmsg());
        cr_assert_not_null(ptr);
        cr_expect_eq((uintptr_t)ptr % page, 0, "%zu bytes at %p: not page-aligned", sizes[i],
                     (void *)ptr);
        memset(ptr, 0xA5, sizes[i]);
        cr_expect_eq(ptr[0], 0xA5);
        cr_expect_eq(ptr[sizes[i] - 1], 0xA5);
        alloc_provider_free(p, ptr, sizes[i]);
    }
    alloc_provider_destroy(p);
}

Test(alloc_provider_host, rejects_zero_bytes)
{
    alloc_provider_t *p = host_new();
    void *sentinel = (void *)&sentinel;
    void *ptr = sentinel;
    cr_expect_eq(alloc_provider_alloc(p, 0, &ptr), FS_EINVAL);
    cr_expect_eq(ptr, sentinel, "*out must be untouched on error");
    expect_msg_contains("0 bytes");
    alloc_provider_destroy(p);
}

Test(alloc_provider_host, fails_an_impossible_size_with_enomem_naming_it)
{
    alloc_provider_t *p = host_new();
    size_t huge = SIZE_MAX / 2; /* beyond any virtual address space */
    void *ptr = NULL;
    cr_expect_eq(alloc_provider_alloc(p, huge, &ptr), FS_ENOMEM);
    cr_expect_null(ptr);
    char size_text[32];
    snprintf(size_text, sizeof size_text, "%zu", huge);
    expect_msg_contains(size_text);
    alloc_provider_destroy(p);
}

Test(alloc_provider_host, reports_machine_memory)
{
    alloc_provider_t *p = host_new();
    size_t free_bytes = 0, total_bytes = 0;
    cr_assert_eq(alloc_provider_mem_info(p, &free_bytes, &total_bytes), 0, "%s", fs_errmsg());
    cr_expect_gt(total_bytes, 0);
    cr_expect_leq(free_bytes, total_bytes);
    size_t total_only = 0;
    cr_expect_eq(alloc_provider_mem_info(p, NULL, &total_only), 0, "either out-param may be NULL");
    cr_expect_eq(total_only, total_bytes);
    alloc_provider_destroy(p);
}

Test(alloc_provider_host, destroy_of_null_is_a_no_op)
{
    alloc_provider_destroy(NULL);
}

/* --- fault ----------------------------------------------------------------- */

Test(alloc_provider_fault, wraps_the_inner_name_and_kind)
{
    alloc_provider_t *host = host_new();
    alloc_provider_t *f = fault_new(host, NULL);
    cr_expect_str_eq(alloc_provider_name(f), "fault(host)");
    cr_expect_not(alloc_provider_is_device(f));
    cr_expect(alloc_provider_has_fences(f), "manual fences can be switched on at any time");
    fault_finish(f, host);
}

Test(alloc_provider_fault, rejects_zero_bytes_without_counting_a_call)
{
    alloc_provider_t *host = host_new();
    alloc_provider_t *f = fault_new(host, NULL);
    void *ptr = NULL;
    cr_expect_eq(alloc_provider_alloc(f, 0, &ptr), FS_EINVAL);
    cr_expect_eq(fault_counts(f).n_alloc_calls, 0);
    fault_finish(f, host);
}

Test(alloc_provider_fault, limits_live_bytes_to_its_capacity)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.capacity_bytes = MIB};
    alloc_provider_t *f = fault_new(host, &cfg);

    void *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(alloc_provider_alloc(f, 512 * KIB, &a), 0, "%s", fs_errmsg());
    cr_expect_eq(alloc_provider_alloc(f, 600 * KIB, &b), FS_ENOMEM);
    cr_expect_null(b);
    expect_msg_contains("1048576");
    cr_expect_eq(alloc_provider_alloc(f, 2 * MIB, &b), FS_ENOMEM, "larger than the capacity");

    size_t free_bytes, total_bytes;
    cr_assert_eq(alloc_provider_mem_info(f, &free_bytes, &total_bytes), 0, "%s", fs_errmsg());
    cr_expect_eq(total_bytes, MIB);
    cr_expect_eq(free_bytes, MIB - 512 * KIB);

    cr_assert_eq(alloc_provider_alloc(f, 512 * KIB, &c), 0, "exactly full: %s", fs_errmsg());
    alloc_provider_free(f, a, 512 * KIB);
    cr_assert_eq(alloc_provider_alloc(f, 400 * KIB, &b), 0, "room again after a free: %s",
                 fs_errmsg());

    alloc_fault_counts_t n = fault_counts(f);
    cr_expect_eq(n.n_alloc_calls, 5);
    cr_expect_eq(n.n_alloc_failed, 2);
    cr_expect_eq(n.live_bytes, 912 * KIB);
    cr_expect_eq(n.live_allocs, 2);
    alloc_provider_free(f, b, 400 * KIB);
    alloc_provider_free(f, c, 512 * KIB);
    fault_finish(f, host);
}

Test(alloc_provider_fault, fails_the_nth_call_only)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.fail_from_call = 3};
    alloc_provider_t *f = fault_new(host, &cfg);
    void *ptr[5] = {0};
    for (int i = 0; i < 5; i++) {
        int rc = alloc_provider_alloc(f, 4 * KIB, &ptr[i]);
        if (i + 1 == 3) {
            cr_expect_eq(rc, FS_ENOMEM, "call 3 must fail");
            expect_msg_contains("injected failure at alloc call 3");
        } else {
            cr_expect_eq(rc, 0, "call %d: %s", i + 1, fs_errmsg());
        }
    }
    cr_expect_eq(fault_counts(f).n_alloc_failed, 1);
    for (int i = 0; i < 5; i++)
        alloc_provider_free(f, ptr[i], 4 * KIB); /* the failed call's NULL is a no-op */
    cr_expect_eq(fault_counts(f).n_free_calls, 4);
    fault_finish(f, host);
}

Test(alloc_provider_fault, fails_a_run_of_calls)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.fail_from_call = 2, .fail_count = 3};
    alloc_provider_t *f = fault_new(host, &cfg);
    void *ptr[6] = {0};
    for (int i = 0; i < 6; i++) {
        int call = i + 1;
        int rc = alloc_provider_alloc(f, 4 * KIB, &ptr[i]);
        cr_expect_eq(rc, call >= 2 && call <= 4 ? FS_ENOMEM : 0, "call %d: rc %d", call, rc);
    }
    cr_expect_eq(fault_counts(f).n_alloc_failed, 3);
    for (int i = 0; i < 6; i++)
        alloc_provider_free(f, ptr[i], 4 * KIB);
    fault_finish(f, host);
}

Test(alloc_provider_fault, keeps_call_numbers_across_configure)
{
    alloc_provider_t *host = host_new();
    alloc_provider_t *f = fault_new(host, NULL);
    void *a = NULL, *b = NULL;
    cr_assert_eq(alloc_provider_alloc(f, 4 * KIB, &a), 0);
    alloc_provider_free(f, a, 4 * KIB);
    alloc_fault_config_t cfg = {.fail_from_call = fault_counts(f).n_alloc_calls + 1};
    cr_assert_eq(alloc_fault_configure(f, &cfg), 0, "%s", fs_errmsg());
    cr_expect_eq(alloc_provider_alloc(f, 4 * KIB, &b), FS_ENOMEM);
    expect_msg_contains("injected failure at alloc call 2");
    cr_expect_eq(alloc_provider_alloc(f, 4 * KIB, &b), 0, "%s", fs_errmsg());
    alloc_provider_free(f, b, 4 * KIB);
    fault_finish(f, host);
}

Test(alloc_provider_fault, counts_every_call_kind)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.fail_from_call = 2};
    alloc_provider_t *f = fault_new(host, &cfg);
    void *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(alloc_provider_alloc(f, 4 * KIB, &a), 0);
    cr_assert_eq(alloc_provider_alloc(f, 8 * KIB, &b), FS_ENOMEM);
    cr_assert_eq(alloc_provider_alloc(f, 8 * KIB, &c), 0);
    size_t fr, tot;
    cr_assert_eq(alloc_provider_mem_info(f, &fr, &tot), 0, "%s", fs_errmsg());
    void *fence = NULL;
    cr_assert_eq(alloc_provider_fence_record(f, 0, &fence), 0);
    cr_expect_eq(alloc_provider_fence_query(f, fence), 1);
    alloc_provider_fence_destroy(f, fence);

    alloc_fault_counts_t n = fault_counts(f);
    cr_expect_eq(n.n_alloc_calls, 3);
    cr_expect_eq(n.n_alloc_failed, 1);
    cr_expect_eq(n.n_free_calls, 0);
    cr_expect_eq(n.n_mem_info_calls, 1);
    cr_expect_eq(n.n_fence_records, 1);
    cr_expect_eq(n.live_bytes, 12 * KIB);
    cr_expect_eq(n.live_allocs, 2);

    alloc_provider_free(f, a, 4 * KIB);
    alloc_provider_free(f, c, 8 * KIB);
    cr_expect_eq(fault_counts(f).n_free_calls, 2);
    fault_finish(f, host);
}

Test(alloc_provider_fault, reports_inner_memory_without_capacity)
{
    alloc_provider_t *host = host_new();
    alloc_provider_t *f = fault_new(host, NULL);
    size_t hf, ht, ff, ft;
    cr_assert_eq(alloc_provider_mem_info(host, &hf, &ht), 0, "%s", fs_errmsg());
    cr_assert_eq(alloc_provider_mem_info(f, &ff, &ft), 0, "%s", fs_errmsg());
    cr_expect_eq(ft, ht);
    fault_finish(f, host);
}

Test(alloc_provider_fault, manual_fences_pass_only_when_told)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.manual_fences = true};
    alloc_provider_t *f = fault_new(host, &cfg);

    void *first = NULL, *second = NULL;
    cr_assert_eq(alloc_provider_fence_record(f, 7, &first), 0, "%s", fs_errmsg());
    cr_assert_not_null(first);
    cr_expect_eq(alloc_provider_fence_query(f, first), 0, "pending before a pass");
    cr_expect_eq(alloc_provider_fence_query(f, first), 0, "still pending");
    cr_assert_eq(alloc_fault_fences_pass(f), 0);
    cr_expect_eq(alloc_provider_fence_query(f, first), 1, "passed after a pass");

    cr_assert_eq(alloc_provider_fence_record(f, 7, &second), 0, "%s", fs_errmsg());
    cr_expect_eq(alloc_provider_fence_query(f, second), 0, "recorded after the pass: pending");
    cr_expect_eq(alloc_provider_fence_query(f, first), 1, "a passed fence stays passed");
    cr_assert_eq(alloc_fault_fences_pass(f), 0);
    cr_expect_eq(alloc_provider_fence_query(f, second), 1);

    alloc_fault_counts_t n = fault_counts(f);
    cr_expect_eq(n.n_fence_records, 2);
    cr_expect_eq(n.n_fence_queries, 6);
    alloc_provider_fence_destroy(f, first);
    alloc_provider_fence_destroy(f, second);
    fault_finish(f, host);
}

Test(alloc_provider_fault, fences_recorded_before_manual_mode_still_work)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.manual_fences = true};
    alloc_provider_t *f = fault_new(host, &cfg);
    void *manual = NULL, *inner = (void *)1;
    cr_assert_eq(alloc_provider_fence_record(f, 0, &manual), 0);
    cfg.manual_fences = false;
    cr_assert_eq(alloc_fault_configure(f, &cfg), 0);
    cr_assert_eq(alloc_provider_fence_record(f, 0, &inner), 0);
    cr_expect_null(inner, "host has no fences, so neither does fault(host) without manual");
    cr_expect_eq(alloc_provider_fence_query(f, manual), 0, "the manual fence is still pending");
    cr_assert_eq(alloc_fault_fences_pass(f), 0);
    cr_expect_eq(alloc_provider_fence_query(f, manual), 1);
    alloc_provider_fence_destroy(f, manual);
    fault_finish(f, host);
}

Test(alloc_provider_fault, rejects_a_provider_that_is_not_fault)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {0};
    alloc_fault_counts_t n;
    cr_expect_eq(alloc_fault_configure(host, &cfg), FS_EINVAL);
    expect_msg_contains("not a fault provider");
    cr_expect_eq(alloc_fault_counts(host, &n), FS_EINVAL);
    expect_msg_contains("host");
    cr_expect_eq(alloc_fault_fences_pass(host), FS_EINVAL);
    alloc_provider_t *none = NULL;
    cr_expect_eq(alloc_provider_fault_create(NULL, &cfg, &none), FS_EINVAL);
    cr_expect_null(none);
    alloc_provider_destroy(host);
}

/* Threads that allocate and free one page at a time under a capacity of a
 * few pages, counting how often the capacity was seen exceeded. */
typedef struct churn {
    alloc_provider_t *fault;
    size_t capacity_bytes;
    atomic_int n_over_capacity;
    atomic_int n_errors; /* failures other than FS_ENOMEM */
} churn_t;

static void *churn_run(void *arg)
{
    churn_t *ch = arg;
    for (int i = 0; i < 500; i++) {
        void *ptr = NULL;
        int rc = alloc_provider_alloc(ch->fault, 4 * KIB, &ptr);
        if (rc == FS_ENOMEM)
            continue;
        if (rc != 0) {
            atomic_fetch_add(&ch->n_errors, 1);
            continue;
        }
        alloc_fault_counts_t n;
        if (alloc_fault_counts(ch->fault, &n) != 0 || n.live_bytes > ch->capacity_bytes)
            atomic_fetch_add(&ch->n_over_capacity, 1);
        *(volatile char *)ptr = 1;
        alloc_provider_free(ch->fault, ptr, 4 * KIB);
    }
    return NULL;
}

Test(alloc_provider_fault, counts_stay_exact_across_threads)
{
    alloc_provider_t *host = host_new();
    alloc_fault_config_t cfg = {.capacity_bytes = 3 * 4 * KIB};
    alloc_provider_t *f = fault_new(host, &cfg);
    churn_t ch = {.fault = f, .capacity_bytes = cfg.capacity_bytes};
    atomic_init(&ch.n_over_capacity, 0);
    atomic_init(&ch.n_errors, 0);
    pthread_t threads[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, churn_run, &ch), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(threads[i], NULL);
    cr_expect_eq(atomic_load(&ch.n_over_capacity), 0);
    cr_expect_eq(atomic_load(&ch.n_errors), 0);
    alloc_fault_counts_t n = fault_counts(f);
    cr_expect_eq(n.n_alloc_calls, 8 * 500);
    cr_expect_eq(n.n_alloc_failed + n.n_free_calls, n.n_alloc_calls,
                 "every alloc either failed or was freed");
    fault_finish(f, host);
}

/* --- cuda, cuda_async, pinned, default --------------------------------------- */

/* The number of usable devices; skips the test, saying why, when there is
 * none or the build has no CUDA. */
static int cuda_require(void)
{
    int n = 0;
    if (alloc_cuda_probe(&n) < 0)
        cr_skip("%s", fs_errmsg());
    return n;
}

Test(alloc_provider_cuda, constructors_fail_like_the_probe_without_a_gpu)
{
    int n = 0;
    int probe = alloc_cuda_probe(&n);
    if (probe == 0) {
        cr_expect_gt(n, 0);
        return;
    }
    cr_expect(probe == (FS_HAVE_CUDA ? FS_ENODEV : FS_ENOTSUP), "probe: %d (%s)", probe,
              fs_errmsg());
    if (!FS_HAVE_CUDA)
        expect_msg_contains("make CUDA=1");
    alloc_provider_t *p = NULL;
    cr_expect_eq(alloc_provider_cuda_create(0, &p), probe);
    cr_expect_eq(alloc_provider_cuda_async_create(0, &p), probe);
    cr_expect_eq(alloc_provider_pinned_create(&p), probe);
    cr_expect_null(p);
}

Test(alloc_provider_cuda, default_create_always_succeeds)
{
    bool gpu = alloc_cuda_probe(NULL) == 0;
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_default_create(&p), 0, "%s", fs_errmsg());
    cr_expect_str_eq(alloc_provider_name(p), gpu ? "cuda:0" : "host");
    cr_expect_eq(alloc_provider_is_device(p), gpu);
    void *ptr = NULL;
    cr_assert_eq(alloc_provider_alloc(p, 64 * KIB, &ptr), 0, "%s", fs_errmsg());
    alloc_provider_free(p, ptr, 64 * KIB);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, default_create_logs_the_fallback_once)
{
    bool gpu = alloc_cuda_probe(NULL) == 0;
    FILE *sink = tmpfile();
    cr_assert_not_null(sink);
    fs_log_set_sink(sink);
    fs_log_set_level(FS_LOG_INFO);
    for (int i = 0; i < 3; i++) {
        alloc_provider_t *p = NULL;
        cr_assert_eq(alloc_provider_default_create(&p), 0, "%s", fs_errmsg());
        alloc_provider_destroy(p);
    }
    fs_log_set_sink(NULL);
    rewind(sink);
    char line[1024];
    int n_lines = 0;
    while (fgets(line, sizeof line, sink))
        n_lines += strstr(line, "using the CPU") != NULL;
    fclose(sink);
    cr_expect_eq(n_lines, gpu ? 0 : 1, "fallback logged %d times", n_lines);
}

Test(alloc_provider_cuda, cuda_allocates_frees_and_reports_memory)
{
    cuda_require();
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_cuda_create(0, &p), 0, "%s", fs_errmsg());
    cr_expect_str_eq(alloc_provider_name(p), "cuda:0");
    cr_expect(alloc_provider_is_device(p));
    cr_expect(alloc_provider_has_fences(p));
    size_t free_bytes = 0, total_bytes = 0;
    cr_assert_eq(alloc_provider_mem_info(p, &free_bytes, &total_bytes), 0, "%s", fs_errmsg());
    cr_expect_gt(total_bytes, 0);
    cr_expect_leq(free_bytes, total_bytes);
    void *ptr = NULL;
    cr_assert_eq(alloc_provider_alloc(p, MIB, &ptr), 0, "%s", fs_errmsg());
    cr_expect_not_null(ptr);
    alloc_provider_free(p, ptr, MIB);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, cuda_rejects_a_device_out_of_range)
{
    int n = cuda_require();
    alloc_provider_t *p = NULL;
    cr_expect_eq(alloc_provider_cuda_create(n, &p), FS_EINVAL);
    cr_expect_eq(alloc_provider_cuda_create(-1, &p), FS_EINVAL);
    cr_expect_eq(alloc_provider_cuda_async_create(n, &p), FS_EINVAL);
    cr_expect_null(p);
}

Test(alloc_provider_cuda, cuda_fence_on_stream_0_passes)
{
    cuda_require();
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_cuda_create(0, &p), 0, "%s", fs_errmsg());
    void *fence = NULL;
    cr_assert_eq(alloc_provider_fence_record(p, 0, &fence), 0, "%s", fs_errmsg());
    cr_assert_not_null(fence);
    cr_expect_eq(fence_wait(p, fence), 1, "fence on an idle stream 0 never passed: %s",
                 fs_errmsg());
    alloc_provider_fence_destroy(p, fence);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, cuda_oom_is_enomem_and_the_provider_still_works)
{
    cuda_require();
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_cuda_create(0, &p), 0, "%s", fs_errmsg());
    void *ptr = NULL;
    cr_expect_eq(alloc_provider_alloc(p, (size_t)1 << 50, &ptr), FS_ENOMEM); /* 1 PiB */
    cr_expect_null(ptr);
    expect_msg_contains("cudaErrorMemoryAllocation");
    cr_assert_eq(alloc_provider_alloc(p, MIB, &ptr), 0, "after an OOM: %s", fs_errmsg());
    alloc_provider_free(p, ptr, MIB);
    void *fence = NULL;
    cr_assert_eq(alloc_provider_fence_record(p, 0, &fence), 0, "%s", fs_errmsg());
    cr_expect_eq(fence_wait(p, fence), 1, "%s", fs_errmsg());
    alloc_provider_fence_destroy(p, fence);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, cuda_async_allocates_and_frees)
{
    cuda_require();
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_cuda_async_create(0, &p), 0, "%s", fs_errmsg());
    cr_expect_str_eq(alloc_provider_name(p), "cuda_async:0");
    cr_expect(alloc_provider_is_device(p));
    void *a = NULL, *b = NULL;
    cr_assert_eq(alloc_provider_alloc(p, MIB, &a), 0, "%s", fs_errmsg());
    cr_assert_eq(alloc_provider_alloc(p, 3 * MIB, &b), 0, "%s", fs_errmsg());
    alloc_provider_free(p, a, MIB);
    alloc_provider_free(p, b, 3 * MIB);
    void *fence = NULL;
    cr_assert_eq(alloc_provider_fence_record(p, 0, &fence), 0, "%s", fs_errmsg());
    cr_expect_eq(fence_wait(p, fence), 1, "the frees on stream 0 never completed: %s",
                 fs_errmsg());
    alloc_provider_fence_destroy(p, fence);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, pinned_allocates_writable_host_memory)
{
    cuda_require();
    alloc_provider_t *p = NULL;
    cr_assert_eq(alloc_provider_pinned_create(&p), 0, "%s", fs_errmsg());
    cr_expect_str_eq(alloc_provider_name(p), "pinned");
    cr_expect_not(alloc_provider_is_device(p));
    unsigned char *ptr = NULL;
    cr_assert_eq(alloc_provider_alloc(p, MIB, (void **)&ptr), 0, "%s", fs_errmsg());
    memset(ptr, 0x5A, MIB);
    cr_expect_eq(ptr[MIB - 1], 0x5A);
    alloc_provider_free(p, ptr, MIB);
    size_t free_bytes, total_bytes;
    cr_assert_eq(alloc_provider_mem_info(p, &free_bytes, &total_bytes), 0, "%s", fs_errmsg());
    cr_expect_leq(free_bytes, total_bytes);
    alloc_provider_destroy(p);
}

Test(alloc_provider_cuda, fault_over_cuda_delegates_fences)
{
    cuda_require();
    alloc_provider_t *cuda = NULL;
    cr_assert_eq(alloc_provider_cuda_create(0, &cuda), 0, "%s", fs_errmsg());
    alloc_provider_t *f = fault_new(cuda, NULL);
    cr_expect_str_eq(alloc_provider_name(f), "fault(cuda:0)");
    cr_expect(alloc_provider_is_device(f));
    void *ptr = NULL;
    cr_assert_eq(alloc_provider_alloc(f, MIB, &ptr), 0, "%s", fs_errmsg());
    void *fence = NULL;
    cr_assert_eq(alloc_provider_fence_record(f, 0, &fence), 0, "%s", fs_errmsg());
    cr_assert_not_null(fence, "cuda has fences, so fault(cuda) hands them out");
    cr_expect_eq(fence_wait(f, fence), 1, "%s", fs_errmsg());
    alloc_provider_fence_destroy(f, fence);
    alloc_provider_free(f, ptr, MIB);
    fault_finish(f, cuda);
}
