/* test_clock.c -- tests for common/clock.c: the real and the manual clock. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"

/* Every test leaves the real clock installed. */
static void clock_restore(void)
{
    fs_clock_set_source(NULL, NULL);
}

TestSuite(common_clock, .fini = clock_restore);

Test(common_clock, real_clock_never_goes_backwards)
{
    uint64_t prev = fs_clock_real_ns();
    for (int i = 0; i < 100000; i++) {
        uint64_t now = fs_clock_real_ns();
        cr_assert_geq(now, prev, "clock went back at read %d", i);
        prev = now;
    }
}

Test(common_clock, real_clock_advances_across_a_sleep)
{
    uint64_t before = fs_clock_real_ns();
    struct timespec nap = {0, 2000000};
    while (nanosleep(&nap, &nap) != 0)
        ;
    cr_expect_geq(fs_clock_real_ns() - before, 2000000u);
}

Test(common_clock, now_reads_the_real_clock_by_default)
{
    uint64_t before = fs_clock_real_ns();
    uint64_t now = fs_clock_now_ns();
    uint64_t after = fs_clock_real_ns();
    cr_expect(before <= now && now <= after, "%llu not within [%llu, %llu]",
              (unsigned long long)now, (unsigned long long)before, (unsigned long long)after);
}

Test(common_clock, manual_clock_starts_sets_and_advances_exactly)
{
    fs_clock_manual_install(1000);
    cr_expect_eq(fs_clock_now_ns(), 1000);
    cr_expect_eq(fs_clock_now_ns(), 1000, "manual clock moved by itself");
    fs_clock_manual_advance(250);
    cr_expect_eq(fs_clock_now_ns(), 1250);
    fs_clock_manual_set(5000000000ull);
    cr_expect_eq(fs_clock_now_ns(), 5000000000ull);
    fs_clock_manual_advance(0);
    cr_expect_eq(fs_clock_now_ns(), 5000000000ull);
}

Test(common_clock, manual_install_again_restarts_from_new_start)
{
    fs_clock_manual_install(10);
    fs_clock_manual_advance(5);
    fs_clock_manual_install(0);
    cr_expect_eq(fs_clock_now_ns(), 0);
}

Test(common_clock, manual_clock_leaves_real_clock_alone)
{
    uint64_t before = fs_clock_real_ns();
    fs_clock_manual_install(7);
    uint64_t real = fs_clock_real_ns();
    cr_expect_geq(real, before);
    cr_expect_eq(fs_clock_now_ns(), 7);
}

Test(common_clock, set_source_null_restores_real_clock)
{
    fs_clock_manual_install(3);
    fs_clock_set_source(NULL, NULL);
    uint64_t before = fs_clock_real_ns();
    uint64_t now = fs_clock_now_ns();
    uint64_t after = fs_clock_real_ns();
    cr_expect(before <= now && now <= after, "%llu not within [%llu, %llu]",
              (unsigned long long)now, (unsigned long long)before, (unsigned long long)after);
}

static uint64_t read_user_value(void *user)
{
    return *(const uint64_t *)user;
}

Test(common_clock, custom_source_is_called_with_its_user_pointer)
{
    uint64_t value = 123456789;
    fs_clock_set_source(read_user_value, &value);
    cr_expect_eq(fs_clock_now_ns(), 123456789);
    value = 42;
    cr_expect_eq(fs_clock_now_ns(), 42);
}

/* Advances the manual clock this many times by 1 ns from each thread. */
#define CLOCK_THREAD_STEPS 100000

static void *advance_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < CLOCK_THREAD_STEPS; i++)
        fs_clock_manual_advance(1);
    return NULL;
}

Test(common_clock, manual_advance_from_threads_loses_no_step)
{
    fs_clock_manual_install(0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, advance_many, NULL), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_join(t[i], NULL), 0);
    cr_expect_eq(fs_clock_now_ns(), 4ull * CLOCK_THREAD_STEPS);
}
