/* shm_test.h -- POSIX shared-memory objects for the shared memory suites:
 * one made (and unlinked) by the test, and whether this process still maps
 * it (/proc/self/maps). Header-only. */
#ifndef FS_TESTS_SERVER_SHM_TEST_H
#define FS_TESTS_SERVER_SHM_TEST_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A zeroed object "/fs-shm-test-<pid>-<tag>" of `size` bytes, mapped
 * read-write into *map; the key into key (64 bytes). Unmap and unlink with
 * shm_test_drop. */
static inline void shm_test_make(const char *tag, size_t size, char key[64], void **map)
{
    snprintf(key, 64, "/fs-shm-test-%d-%s", (int)getpid(), tag);
    shm_unlink(key);
    int fd = shm_open(key, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0, "shm_open %s", key);
    cr_assert_eq(ftruncate(fd, (off_t)size), 0);
    *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(*map, MAP_FAILED);
    close(fd);
}

static inline void shm_test_drop(const char *key, void *map, size_t size)
{
    munmap(map, size);
    shm_unlink(key);
}

/* How many mappings of object `key` this process holds. */
static inline int shm_test_mappings(const char *key)
{
    char want[96], line[512];
    snprintf(want, sizeof want, "/dev/shm%s", key); /* key starts with '/' */
    FILE *fp = fopen("/proc/self/maps", "r");
    cr_assert_not_null(fp);
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        char *p = strstr(line, want);
        /* The whole name: not a longer key that starts with it. */
        if (p && (p[strlen(want)] == '\n' || p[strlen(want)] == ' ' || !p[strlen(want)]))
            n++;
    }
    fclose(fp);
    return n;
}

#endif
