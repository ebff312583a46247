/* main.c -- the flatserve executable.
 *
 * Today it brings up what exists: it picks the device (CUDA when the build
 * has it and a GPU answers, else the CPU, saying why once in the log) and
 * builds the device's caching allocator, then reports that serving is not
 * built yet and exits 1. The HTTP server, model repository and batching
 * replace that report as they land. */
#include <stdio.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"
#include "engine/cpu/blas.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: flatserve [--help]\n"
                 "Brings up the device and its caching allocator, then reports what is not\n"
                 "built yet. Set FLATSERVE_LOG_LEVEL=debug for more detail.\n");
}

int main(int argc, char **argv)
{
    eng_blas_ensure_fast_kernels(argv);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "flatserve: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }

    alloc_provider_t *provider = NULL;
    if (alloc_provider_default_create(&provider) != 0) {
        FS_LOG_E("main", "no memory provider: %s", fs_errmsg());
        return 1;
    }
    alloc_cache_t *cache = NULL;
    alloc_cache_config_t cfg = {.name = alloc_provider_name(provider)};
    if (alloc_cache_create(provider, &cfg, &cache) != 0) {
        FS_LOG_E("main", "cannot create the cache: %s", fs_errmsg());
        alloc_provider_destroy(provider);
        return 1;
    }
    size_t free_bytes = 0, total = 0;
    char free_s[32] = "unknown", total_s[32] = "unknown";
    if (alloc_provider_mem_info(provider, &free_bytes, &total) == 0) {
        fs_format_size(free_bytes, free_s, sizeof free_s);
        fs_format_size(total, total_s, sizeof total_s);
    }
    FS_LOG_I("main", "device %s: %s free of %s; caching allocator ready", alloc_cache_name(cache),
             free_s, total_s);
    alloc_cache_destroy(cache);
    alloc_provider_destroy(provider);
    FS_LOG_E("main", "serving is not built yet: the HTTP server, model repository and batcher "
             "are still to come, so there is nothing to serve");
    return 1;
}
