/* child_stderr.h -- a forked child whose stderr the test reads, for tests
 * of what a process writes as it starts or dies (test_crash.c: the crash
 * handler's stack; test_server_load.c: the server's log). */
#ifndef FS_TESTS_COMMON_CHILD_STDERR_H
#define FS_TESTS_COMMON_CHILD_STDERR_H

#include <criterion/criterion.h>
#include <sys/types.h>
#include <unistd.h>

/* Forks; in the child (returns 0) stderr is the write end of a new pipe,
 * in the parent (returns the child's pid) *read_fd is its read end. */
static inline pid_t fork_with_stderr_pipe(int *read_fd)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    close(fds[1]);
    *read_fd = fds[0];
    return pid;
}

#endif
