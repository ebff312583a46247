/* test_crash.c -- tests for common/crash.c: a fatal signal writes its stack
 * and the process still dies of that signal.
 *
 * This file also installs the handler in every test process when
 * FLATSERVE_TEST_BACKTRACE is set (any value), so a test that crashes only
 * on some machine prints where: Criterion reports a crash without a stack.
 * Its frames name the binary "boxfort-worker" (Criterion's worker):
 * `addr2line -f -e build/<variant>/bin/flatserve-tests +OFFSET` reads one.
 * It is off by default so that a sanitizer's own report is not displaced. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crash.h"
#include "tests/common/child_stderr.h"

__attribute__((constructor)) static void crash_trace_from_env(void)
{
    if (getenv("FLATSERVE_TEST_BACKTRACE"))
        fs_crash_handlers_install("flatserve-tests");
}

/* Runs a child that installs the handler as `who` and raises sig; returns
 * what it wrote to stderr (malloc'd) and its wait status in *status. */
static char *crashed_child(const char *who, int sig, int *status)
{
    int rfd;
    pid_t pid = fork_with_stderr_pipe(&rfd);
    if (pid == 0) {
        fs_crash_handlers_install(who);
        raise(sig);
        _exit(0); /* not reached: the handler re-raises with the default action */
    }
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap + 1);
    cr_assert_not_null(out);
    ssize_t n;
    while ((n = read(rfd, out + len, cap - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(rfd);
    cr_assert_eq(waitpid(pid, status, 0), pid);
    return out;
}

Test(crash, a_fatal_signal_writes_the_stack_and_still_kills_the_process)
{
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int status = 0;
        char *out = crashed_child("crash-test", sigs[i], &status);
        char head[64];
        snprintf(head, sizeof head, "crash-test: fatal signal %d; stack:\n", sigs[i]);
        cr_expect(strncmp(out, head, strlen(head)) == 0, "wrote '%.200s', wanted it to start "
                  "with '%s'", out, head);
        /* Frames follow, as backtrace_symbols_fd writes them: "obj(+off)[addr]"
         * (a Criterion worker's argv[0] is "boxfort-worker"). */
        const char *frames = strstr(out, "\n");
        cr_expect(frames && strstr(frames, "(+0x") && strstr(frames, ")[0x"),
                  "no frames after the head in '%.400s'", out);
        cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == sigs[i],
                  "the child should die of signal %d; status %#x", sigs[i], status);
        free(out);
    }
}
