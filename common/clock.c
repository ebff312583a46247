/* clock.c -- the replaceable monotonic clock. */
#include "common/clock.h"

#include <stdatomic.h>
#include <time.h>

/* The installed source; fn NULL means CLOCK_MONOTONIC. Written only by tests
 * while no other thread reads (see clock.h), so plain fields suffice. */
static struct {
    fs_clock_fn fn;
    void *user;
} clock_source;

/* The manual clock's time; atomic so a test may advance it while a worker
 * thread of the code under test reads it. */
static _Atomic uint64_t manual_now_ns;

uint64_t fs_clock_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fs_clock_now_ns(void)
{
    if (clock_source.fn)
        return clock_source.fn(clock_source.user);
    return fs_clock_real_ns();
}

void fs_clock_set_source(fs_clock_fn fn, void *user)
{
    clock_source.fn = fn;
    clock_source.user = user;
}

static uint64_t manual_read(void *user)
{
    (void)user;
    return atomic_load(&manual_now_ns);
}

void fs_clock_manual_install(uint64_t start_ns)
{
    atomic_store(&manual_now_ns, start_ns);
    fs_clock_set_source(manual_read, NULL);
}

void fs_clock_manual_set(uint64_t now_ns)
{
    atomic_store(&manual_now_ns, now_ns);
}

void fs_clock_manual_advance(uint64_t delta_ns)
{
    atomic_fetch_add(&manual_now_ns, delta_ns);
}
