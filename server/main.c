/* main.c -- the flatserve executable.
 *
 * Today it brings up what exists: it picks the device (CUDA when the build
 * has it and a GPU answers, else the CPU, saying why once in the log),
 * builds the caching allocator, loads every model of the repository
 * (REPO/<model>/<version>/model.onnx, the newest version of each) with the
 * engine on that device (cuda:0 with host and pinned staging caches, or the
 * CPU) and reports it, then says that serving is not built yet and exits
 * 1. The HTTP server and batcher replace that report as they land. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cache.h"
#include "alloc/provider.h"
#include "common/error.h"
#include "common/log.h"
#include "common/parse.h"
#include "engine/cpu/gemm.h"
#include "engine/engine.h"

#define DEFAULT_REPOSITORY "models"

static void usage(FILE *out)
{
    fprintf(out, "usage: flatserve [--model-repository DIR] [--help]\n"
                 "Brings up the device, its caching allocator and the models of DIR\n"
                 "(default: %s), then reports what is not built yet.\n"
                 "Set FLATSERVE_LOG_LEVEL=debug for more detail.\n",
            DEFAULT_REPOSITORY);
}

/* The highest numeric version directory of REPO/model, or -1. */
static long newest_version(const char *model_dir)
{
    DIR *d = opendir(model_dir);
    if (!d)
        return -1;
    long best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        char *end = NULL;
        long v = strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && v > best)
            best = v;
    }
    closedir(d);
    return best;
}

/* Loads one model with the engine and logs its interface and weights;
 * returns 0 or the load error (logged). */
static int report_model(const char *device, const eng_memory_t *mem, const char *repo,
                        const char *name)
{
    alloc_cache_t *cache = mem->cache;
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    long version = newest_version(dir);
    if (version < 0) {
        FS_LOG_W("main", "model '%s': no numeric version directory in %s", name, dir);
        return FS_ENOENT;
    }
    snprintf(path, sizeof path, "%s/%ld/model.onnx", dir, version);
    eng_model_t *m = NULL;
    eng_model_config_t cfg = {.name = name, .cache = cache, .device = device,
                              .host_cache = mem->host_cache, .staging = mem->staging};
    int rc = eng_model_load(path, &cfg, &m);
    if (rc != 0) {
        FS_LOG_E("main", "model '%s' version %ld: %s", name, version, fs_errmsg());
        return rc;
    }
    alloc_owner_stats_t os;
    char weights[32] = "?";
    if (alloc_cache_owner_stats(cache, eng_model_owner(m), &os) == 0)
        fs_format_size((uint64_t)os.requested.current, weights, sizeof weights);
    eng_io_info_t in, out;
    eng_model_input(m, 0, &in);
    eng_model_output(m, 0, &out);
    FS_LOG_I("main", "model '%s' version %ld loaded on %s: %zu input(s) ('%s', %s), %zu "
             "output(s) ('%s'), weights %s", name, version, eng_model_device(m),
             eng_model_n_inputs(m), in.name, eng_dtype_name(in.dtype), eng_model_n_outputs(m),
             out.name, weights);
    eng_model_destroy(m);
    return 0;
}

/* Reports every model directory of the repository; returns how many loaded. */
static int report_repository(const char *device, const eng_memory_t *mem, const char *repo)
{
    DIR *d = opendir(repo);
    if (!d) {
        FS_LOG_E("main", "model repository '%s' cannot be opened (run `make` to write the "
                 "demo models)", repo);
        return 0;
    }
    int loaded = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        loaded += report_model(device, mem, repo, e->d_name) == 0;
    }
    closedir(d);
    return loaded;
}

int main(int argc, char **argv)
{
    const char *repo = DEFAULT_REPOSITORY;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--model-repository") == 0 && i + 1 < argc) {
            repo = argv[++i];
            continue;
        }
        fprintf(stderr, "flatserve: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }

    /* The GPU when one answers, else the CPU, saying why once. */
    int n_gpus = 0;
    const char *device = "cuda:0";
    int probe = alloc_cuda_probe(&n_gpus);
    if (probe != 0 || n_gpus < 1) {
        FS_LOG_W("main", "%s: using the CPU", probe != 0 ? fs_errmsg() : "no CUDA device");
        device = "cpu";
    }
    eng_memory_t mem;
    alloc_cache_config_t cfg = {.name = device};
    if (eng_memory_open(device, &cfg, &mem) != 0) {
        FS_LOG_E("main", "%s", fs_errmsg());
        return 1;
    }
    size_t free_bytes = 0, total = 0;
    char free_s[32] = "unknown", total_s[32] = "unknown";
    if (alloc_provider_mem_info(mem.providers[0], &free_bytes, &total) == 0) {
        fs_format_size(free_bytes, free_s, sizeof free_s);
        fs_format_size(total, total_s, sizeof total_s);
    }
    FS_LOG_I("main", "device %s: %s free of %s; caching allocator ready; CPU GEMM kernels %s",
             alloc_cache_name(mem.cache), free_s, total_s, eng_gemm_isa_name());

    /* Models load on that device, with its host and staging caches. */
    int loaded = report_repository(device, &mem, repo);
    eng_memory_close(&mem);
    FS_LOG_E("main", "serving is not built yet: %d model(s) of '%s' load, but the HTTP server "
             "and batcher are still to come, so there is nothing to serve", loaded, repo);
    return 1;
}
