/* crash.c -- the stack of a fatal signal, written to stderr (crash.h).
 *
 * Only async-signal-safe calls in the handler: write, and
 * backtrace_symbols_fd, which writes without malloc. backtrace itself is
 * primed at install, since its first call may load libgcc. The head is
 * formatted at install, so the handler only copies the signal number in. */
#include "common/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char crash_who[64] = "flatserve";

static void write_all(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_crash(int sig)
{
    char head[128];
    size_t n = strlen(crash_who);
    memcpy(head, crash_who, n);
    static const char mid[] = ": fatal signal ";
    memcpy(head + n, mid, sizeof mid - 1);
    n += sizeof mid - 1;
    char digits[8];
    size_t d = 0;
    for (unsigned v = (unsigned)sig; d == 0 || v; v /= 10)
        digits[d++] = (char)('0' + v % 10);
    while (d)
        head[n++] = digits[--d];
    static const char tail[] = "; stack:\n";
    memcpy(head + n, tail, sizeof tail - 1);
    n += sizeof tail - 1;
    write_all(head, n);
    void *frames[64];
    int nf = backtrace(frames, 64);
    backtrace_symbols_fd(frames, nf, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

void fs_crash_handlers_install(const char *who)
{
    snprintf(crash_who, sizeof crash_who, "%s", who ? who : "flatserve");
    void *prime[1];
    backtrace(prime, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
}
