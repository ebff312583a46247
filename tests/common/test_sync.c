/* test_sync.c -- tests for common/sync.c: fs_cond_timedwait_ns's timeout,
 * its wake-up, the mutex it hands back and the clock it measures on. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/sync.h"

#define MS UINT64_C(1000000)
/* Upper bounds are loose: the suite runs on a busy 2-core machine too. */
#define SLACK_NS (2000 * MS)

/* Every test leaves the real clock installed. */
static void clock_restore(void)
{
    fs_clock_set_source(NULL, NULL);
}

TestSuite(common_sync, .fini = clock_restore);

/* A cond with the default attributes (CLOCK_REALTIME) or one created on
 * CLOCK_MONOTONIC, and an error-checking mutex so that unlocking one that
 * is not held fails instead of passing silently. */
typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
    uint64_t delay_ns; /* how long the signaller sleeps before signalling */
} waiter_t;

static void waiter_init(waiter_t *w, bool monotonic_cond)
{
    *w = (waiter_t){0};
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    cr_assert_eq(pthread_mutex_init(&w->lock, &ma), 0);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    if (monotonic_cond)
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cr_assert_eq(pthread_cond_init(&w->cond, &ca), 0);
    pthread_condattr_destroy(&ca);
}

static void waiter_fini(waiter_t *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec nap = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&nap, &nap) != 0)
        ;
}

static void *signal_after_delay(void *arg)
{
    waiter_t *w = arg;
    sleep_ns(w->delay_ns);
    pthread_mutex_lock(&w->lock);
    w->ready = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Waits `timeout_ns` with no one signalling; checks the result, the time
 * taken and that the mutex came back held. */
static void expect_times_out(bool monotonic_cond, uint64_t timeout_ns)
{
    waiter_t w;
    waiter_init(&w, monotonic_cond);
    pthread_mutex_lock(&w.lock);
    uint64_t t0 = fs_clock_real_ns();
    int rc;
    /* A spurious wake-up returns 0 early: wait again for the time left,
     * as a caller with a predicate does. */
    do {
        uint64_t spent = fs_clock_real_ns() - t0;
        rc = fs_cond_timedwait_ns(&w.cond, &w.lock, spent < timeout_ns ? timeout_ns - spent : 0);
    } while (rc == 0);
    uint64_t took = fs_clock_real_ns() - t0;
    cr_expect_eq(rc, FS_ETIMEDOUT, "%d (%s)", rc, fs_strerror(rc));
    cr_expect_geq(took, timeout_ns, "returned after %llu ns of a %llu ns timeout",
                  (unsigned long long)took, (unsigned long long)timeout_ns);
    cr_expect_lt(took, timeout_ns + SLACK_NS, "took %llu ns", (unsigned long long)took);
    cr_expect_eq(pthread_mutex_unlock(&w.lock), 0, "mutex not held after the timeout");
    waiter_fini(&w);
}

Test(common_sync, times_out_after_the_timeout_on_a_default_cond)
{
    expect_times_out(false, 30 * MS);
}

Test(common_sync, times_out_after_the_timeout_on_a_monotonic_cond)
{
    expect_times_out(true, 30 * MS);
}

Test(common_sync, timeout_of_whole_seconds_and_a_carry_is_exact)
{
    /* 1.999 s: the nanoseconds carry into the seconds for any start time. */
    expect_times_out(false, 1999 * MS);
}

Test(common_sync, zero_timeout_gives_up_at_once_with_the_mutex_held)
{
    waiter_t w;
    waiter_init(&w, false);
    pthread_mutex_lock(&w.lock);
    uint64_t t0 = fs_clock_real_ns();
    int rc = fs_cond_timedwait_ns(&w.cond, &w.lock, 0);
    uint64_t took = fs_clock_real_ns() - t0;
    cr_expect(rc == FS_ETIMEDOUT || rc == 0, "%d (%s)", rc, fs_strerror(rc));
    cr_expect_lt(took, SLACK_NS);
    cr_expect_eq(pthread_mutex_unlock(&w.lock), 0, "mutex not held after the wait");
    waiter_fini(&w);
}

/* A signal wakes the waiter long before its timeout; UINT64_MAX must not
 * overflow into a deadline in the past (which would return at once with
 * FS_ETIMEDOUT) nor fail. */
static void expect_signal_wakes(bool monotonic_cond, uint64_t timeout_ns)
{
    waiter_t w;
    waiter_init(&w, monotonic_cond);
    w.delay_ns = 20 * MS;
    pthread_t t;
    pthread_mutex_lock(&w.lock);
    cr_assert_eq(pthread_create(&t, NULL, signal_after_delay, &w), 0);
    uint64_t t0 = fs_clock_real_ns();
    int rc = 0;
    while (!w.ready && rc == 0)
        rc = fs_cond_timedwait_ns(&w.cond, &w.lock, timeout_ns);
    uint64_t took = fs_clock_real_ns() - t0;
    cr_expect_eq(rc, 0, "%d (%s)", rc, fs_strerror(rc));
    cr_expect(w.ready);
    cr_expect_lt(took, SLACK_NS, "took %llu ns", (unsigned long long)took);
    cr_expect_eq(pthread_mutex_unlock(&w.lock), 0, "mutex not held after the wake-up");
    cr_assert_eq(pthread_join(t, NULL), 0);
    waiter_fini(&w);
}

Test(common_sync, signal_wakes_before_the_timeout)
{
    expect_signal_wakes(false, 60000 * MS);
}

Test(common_sync, signal_wakes_a_wait_of_uint64_max)
{
    expect_signal_wakes(true, UINT64_MAX);
}

Test(common_sync, manual_clock_does_not_change_the_wait)
{
    /* A frozen test clock: a wait measured on it would never end. */
    fs_clock_manual_install(0);
    expect_times_out(false, 20 * MS);
    cr_expect_eq(fs_clock_now_ns(), 0);
}
