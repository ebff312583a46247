/* clock.h -- the monotonic clock every timed decision reads, replaceable by
 * tests so that time-driven behaviour (release policies, batching delays) is
 * exact and instant to test.
 *
 * Threading: fs_clock_now_ns is safe from any thread. Replacing the source is
 * meant for tests, done while no other thread reads the clock. */
#ifndef FS_COMMON_CLOCK_H
#define FS_COMMON_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t (*fs_clock_fn)(void *user);

/* Nanoseconds from CLOCK_MONOTONIC, or from the installed source. */
uint64_t fs_clock_now_ns(void);

/* Nanoseconds from CLOCK_MONOTONIC, never replaced (for benchmarks and
 * timeouts that must be real). */
uint64_t fs_clock_real_ns(void);

/* Installs `fn(user)` as the source; NULL restores the monotonic clock.
 * `user` is borrowed and must outlive the installation. */
void fs_clock_set_source(fs_clock_fn fn, void *user);

/* A manual clock for tests: install with fs_clock_manual_install, then move
 * it with fs_clock_manual_set / _advance. Starts at `start_ns`. */
void fs_clock_manual_install(uint64_t start_ns);
void fs_clock_manual_set(uint64_t now_ns);
void fs_clock_manual_advance(uint64_t delta_ns);

#ifdef __cplusplus
}
#endif
#endif
