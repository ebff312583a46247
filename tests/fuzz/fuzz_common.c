/* fuzz_common.c -- the table of fuzz targets and the checks they share
 * (fuzz.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/fuzz/fuzz.h"

const fuzz_target_t fuzz_targets[] = {
    {"codec", fuzz_codec_one},
    {"onnx", fuzz_onnx_one},
    {"run", fuzz_run_one},
    {"config", fuzz_config_one},
    {"model_config", fuzz_model_config_one},
    {"pbtxt", fuzz_pbtxt_one},
};
const size_t fuzz_n_targets = sizeof fuzz_targets / sizeof fuzz_targets[0];

/* FUZZ_VERBOSE=1 in the environment prints every refusal: how to see
 * whether a seed reaches the code it was written for, or stops early. */
static bool verbose(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("FUZZ_VERBOSE");
        on = v && v[0] && strcmp(v, "0") != 0;
    }
    return on;
}

int fuzz_refusal_check(const char *what, int rc, const int *codes, size_t n)
{
    bool known = false;
    for (size_t i = 0; i < n; i++)
        known |= rc == codes[i];
    /* fs_errmsg() falls back to the code's text when fs_err() set nothing
     * since the clear: then the user would see no specifics. */
    const char *msg = fs_errmsg();
    bool said = msg[0] && strcmp(msg, fs_strerror(0)) != 0 && strcmp(msg, fs_strerror(rc)) != 0;
    if (verbose())
        fprintf(stderr, "fuzz: %s refused the input with %s: %s\n", what, fs_errname(rc), msg);
    if (known && said)
        return 0;
    char copy[FS_ERRMSG_MAX];
    snprintf(copy, sizeof copy, "%s", msg);
    return fs_err(FS_ESTATE, "%s refused the input with %s (%d)%s, message \"%s\"", what,
                  fs_errname(rc), rc, known ? "" : ", not a documented code for it", copy);
}

int fuzz_cache_check_zero(alloc_cache_t *cache, const char *when)
{
    char msg[FS_ERRMSG_MAX];
    if (alloc_cache_check(cache) != 0) {
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        return fs_err(FS_ESTATE, "%s: the cache's invariants are broken: %s", when, msg);
    }
    alloc_cache_stats_t st;
    alloc_cache_stats(cache, &st);
    if (st.allocated.current != 0 || st.blocks.current != 0)
        return fs_err(FS_ESTATE, "%s: %lld bytes in %lld blocks are still allocated", when,
                      (long long)st.allocated.current, (long long)st.blocks.current);
    return 0;
}

uint64_t fuzz_hash(const uint8_t *data, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}
