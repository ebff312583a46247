/* sync.h -- waiting on a condition variable for at most a relative time.
 *
 * pthread_cond_timedwait takes an absolute time on the clock the condition
 * variable was created with (CLOCK_REALTIME unless a condattr said
 * otherwise), so every caller used to read a clock, add its timeout and
 * carry the nanoseconds by hand -- and a cond created without the attribute
 * silently waited on the wall clock, which NTP or an operator may step.
 * fs_cond_timedwait_ns measures its timeout on CLOCK_MONOTONIC through
 * pthread_cond_clockwait (glibc 2.30), so the cond's own clock attribute does
 * not matter: any pthread_cond_t works, however it was initialised.
 *
 * The timeout is real time: a source installed with fs_clock_set_source
 * (common/clock.h) does not shorten or lengthen it. A caller that waits for a
 * deadline on fs_clock_now_ns passes the time left, and re-reads its clock
 * and its predicate after every return.
 *
 * Threading: as pthread_cond_timedwait; the caller holds `mutex`. */
#ifndef FS_COMMON_SYNC_H
#define FS_COMMON_SYNC_H

#include <pthread.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Waits on `cond` until it is signalled or `timeout_ns` nanoseconds of
 * CLOCK_MONOTONIC have passed, whichever is first. `mutex` (borrowed) must
 * be locked by the caller; it is unlocked during the wait and locked again
 * when the call returns, whatever it returns. Any timeout is valid: 0 gives
 * up at once (after releasing and re-taking the mutex), UINT64_MAX waits in
 * effect forever.
 *
 * Returns 0 when woken -- by a signal, a broadcast or spuriously, so the
 * caller re-checks its predicate -- and FS_ETIMEDOUT when the time ran out.
 * An interrupted wait (EINTR, which some systems return) is resumed towards
 * the same deadline, not reported. A timeout is an expected outcome, so the
 * thread's error message (fs_errmsg) is left alone. Any other error of the
 * underlying wait (a mutex not held, a destroyed cond) is a broken invariant
 * and asserts. */
int fs_cond_timedwait_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif
