/* crash.h -- a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT) writes the
 * stack to stderr before the process dies of the same signal, so a crash
 * report names where it happened.
 *
 * The server installs it at start (server/main.c); the test binary installs
 * it when FLATSERVE_TEST_BACKTRACE is set (tests/common/test_crash.c), off
 * by default so that a sanitizer's own report is not displaced. Frames of a
 * binary linked without -rdynamic print as binary(+offset), which
 * `addr2line -f -e BINARY OFFSET` names. */
#ifndef FS_COMMON_CRASH_H
#define FS_COMMON_CRASH_H

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the handler for the four signals, each once (SA_RESETHAND): the
 * handler writes "<who>: fatal signal N; stack:" and the frames, then
 * raises the signal again with its default action. */
void fs_crash_handlers_install(const char *who);

#ifdef __cplusplus
}
#endif

#endif
