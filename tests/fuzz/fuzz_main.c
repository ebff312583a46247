/* fuzz_main.c -- the libFuzzer entry point of one fuzz target, compiled once
 * per target with -DFUZZ_ONE=fuzz_<name>_one (the Makefile's `fuzz`
 * rules): a target that reports a broken contract aborts with its message,
 * which libFuzzer records as a crash with the input that caused it. */
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/log.h"
#include "tests/fuzz/fuzz.h"

#ifndef FUZZ_ONE
#error "compile with -DFUZZ_ONE=fuzz_<name>_one"
#endif

#define FUZZ_STR_(x) #x
#define FUZZ_STR(x) FUZZ_STR_(x)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The product's logs of refused inputs would bury libFuzzer's own lines:
 * errors only (a leak the engine reports on destroy is one). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fs_log_set_level(FS_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (FUZZ_ONE(data, size) != 0) {
        fprintf(stderr, "%s: %s\n", FUZZ_STR(FUZZ_ONE), fs_errmsg());
        abort();
    }
    return 0;
}
