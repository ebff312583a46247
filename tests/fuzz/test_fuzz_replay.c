/* test_fuzz_replay.c -- replays every committed input of tests/fuzz/ (each
 * target's seed corpus and its regressions) through the target's function,
 * in the ordinary test build and so under both sanitizer builds in CI:
 * every input must keep its target's contract (fuzz.h), which includes
 * leaving the caches it used at zero bytes. The libFuzzer binaries (make
 * fuzz-run) call the same functions. tests/fuzz/pending/ is not replayed:
 * it holds inputs that still crash, waiting for the loader's schema checks
 * (tests/fuzz/README.md). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/fuzz/fuzz.h"

#define FUZZ_DIR "tests/fuzz"
#define REPLAY_MAX_FILES 4096

static const fuzz_target_t *target_find(const char *name)
{
    for (size_t i = 0; i < fuzz_n_targets; i++)
        if (strcmp(fuzz_targets[i].name, name) == 0)
            return &fuzz_targets[i];
    cr_assert_fail("no fuzz target called %s", name);
    return NULL;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file's bytes (caller frees) and *len; asserts on failure. */
static uint8_t *file_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    cr_assert_geq(size, 0);
    rewind(f);
    uint8_t *data = malloc(size ? (size_t)size : 1);
    cr_assert_not_null(data);
    cr_assert_eq(fread(data, 1, (size_t)size, f), (size_t)size, "reading %s", path);
    fclose(f);
    *len = (size_t)size;
    return data;
}

/* Runs every file of tests/fuzz/<kind>/<target>/ (in name order) through
 * the target; returns how many there were. A missing folder holds none. */
static size_t replay_dir(const fuzz_target_t *t, const char *kind)
{
    char dir[256];
    snprintf(dir, sizeof dir, FUZZ_DIR "/%s/%s", kind, t->name);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char **names = calloc(REPLAY_MAX_FILES, sizeof *names);
    cr_assert_not_null(names);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        cr_assert_lt(n, REPLAY_MAX_FILES, "more than %d files in %s", REPLAY_MAX_FILES, dir);
        names[n] = strdup(e->d_name);
        cr_assert_not_null(names[n++]);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        uint8_t *data = file_read(path, &len);
        int rc = t->one(data, len);
        cr_expect_eq(rc, 0, "%s: %s", path, fs_errmsg());
        free(data);
        free(names[i]);
    }
    free(names);
    return n;
}

/* Every seed and regression of one target; the corpus must not be empty. */
static void replay(const char *name)
{
    const fuzz_target_t *t = target_find(name);
    size_t seeds = replay_dir(t, "corpus");
    cr_expect_gt(seeds, 0, "no seed corpus in " FUZZ_DIR "/corpus/%s", name);
    replay_dir(t, "regressions");
}

Test(fuzz_replay, codec_inputs_keep_the_decoders_contract)
{
    replay("codec");
}

Test(fuzz_replay, onnx_inputs_keep_the_loaders_contract)
{
    replay("onnx");
}

Test(fuzz_replay, run_inputs_load_and_run_or_are_refused)
{
    replay("run");
}

Test(fuzz_replay, config_inputs_keep_the_config_contract)
{
    replay("config");
}

Test(fuzz_replay, model_config_inputs_keep_the_model_config_contract)
{
    replay("model_config");
}

Test(fuzz_replay, pbtxt_inputs_keep_the_pbtxt_contract)
{
    replay("pbtxt");
}

Test(fuzz_replay, every_target_has_a_replay_test)
{
    static const char *const covered[] = {"codec", "onnx", "run", "config", "model_config",
                                          "pbtxt"};
    cr_assert_eq(fuzz_n_targets, sizeof covered / sizeof covered[0]);
    for (size_t i = 0; i < fuzz_n_targets; i++)
        cr_expect_str_eq(fuzz_targets[i].name, covered[i]);
}
