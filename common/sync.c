/* sync.c -- the relative-timeout condition wait (see sync.h). */
#include "common/sync.h"

#include <assert.h>
#include <errno.h>
#include <time.h>

#include "common/error.h"

#define NS_PER_S UINT64_C(1000000000)

/* A deadline this far out is "forever": 100 years of seconds fits any
 * 64-bit time_t with room to add the current time. */
#define FOREVER_S (UINT64_C(100) * 365 * 24 * 3600)

int fs_cond_timedwait_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t timeout_ns)
{
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    uint64_t add_s = timeout_ns / NS_PER_S;
    uint64_t nsec = (uint64_t)at.tv_nsec + timeout_ns % NS_PER_S;
    if (add_s > FOREVER_S)
        add_s = FOREVER_S;
    at.tv_sec += (time_t)(add_s + nsec / NS_PER_S);
    at.tv_nsec = (long)(nsec % NS_PER_S);
    int rc;
    do
        rc = pthread_cond_clockwait(cond, mutex, CLOCK_MONOTONIC, &at);
    while (rc == EINTR);
    if (rc == ETIMEDOUT)
        return FS_ETIMEDOUT;
    assert(rc == 0 && "pthread_cond_clockwait failed: mutex not held or cond invalid");
    return 0;
}
