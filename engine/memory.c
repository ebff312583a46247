/* memory.c -- device and precision names, and the caches a model on a device runs in
 * (engine/engine.h): one place for what the server, the conformance runner
 * and the benchmarks each set up. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"

static const char *const precision_names[] = {"fp32", "tf32", "fp16", "bf16"};

const char *eng_precision_name(eng_precision_t p)
{
    return (unsigned)p < sizeof precision_names / sizeof precision_names[0] ? precision_names[p]
                                                                            : "unknown";
}

int eng_precision_parse(const char *s, eng_precision_t *out)
{
    for (unsigned i = 0; i < sizeof precision_names / sizeof precision_names[0]; i++)
        if (s && strcmp(s, precision_names[i]) == 0) {
            *out = (eng_precision_t)i;
            return 0;
        }
    return fs_err(FS_EINVAL, "unknown precision '%s' (expected fp32, tf32, fp16 or bf16)",
                  s ? s : "(null)");
}

int eng_device_parse(const char *s, eng_device_t *out)
{
    if (!s || strcmp(s, "cpu") == 0) {
        *out = (eng_device_t){ENG_DEVICE_CPU, 0};
        return 0;
    }
    if (strncmp(s, "cuda", 4) == 0 && (s[4] == '\0' || s[4] == ':')) {
        if (s[4] == '\0') {
            *out = (eng_device_t){ENG_DEVICE_CUDA, 0};
            return 0;
        }
        const char *d = s + 5;
        int v = 0;
        for (; *d >= '0' && *d <= '9' && v < 1024; d++)
            v = v * 10 + (*d - '0');
        if (d != s + 5 && *d == '\0' && v < 1024) {
            *out = (eng_device_t){ENG_DEVICE_CUDA, v};
            return 0;
        }
    }
    return fs_err(FS_EINVAL, "unknown device '%s' (expected cpu, cuda or cuda:N)", s);
}

const char *eng_device_name(const eng_device_t *d, char *buf, size_t len)
{
    if (d->kind == ENG_DEVICE_CPU)
        snprintf(buf, len, "cpu");
    else
        snprintf(buf, len, "cuda:%d", d->index);
    return buf;
}

bool eng_device_equal(const eng_device_t *a, const eng_device_t *b)
{
    return a->kind == b->kind && (a->kind == ENG_DEVICE_CPU || a->index == b->index);
}

int eng_memory_open(const eng_device_t *device, const alloc_cache_config_t *cfg,
                    eng_memory_t *out)
{
    return eng_memory_open_with(device, cfg, NULL, NULL, out);
}

int eng_memory_open_with(const eng_device_t *device, const alloc_cache_config_t *cfg,
                         const alloc_cache_config_t *staging_cfg, alloc_cache_t *host_cache,
                         eng_memory_t *out)
{
    memset(out, 0, sizeof *out);
    eng_device_t cpu = {ENG_DEVICE_CPU, 0};
    const eng_device_t *d = device ? device : &cpu;
    bool gpu = d->kind == ENG_DEVICE_CUDA;
    int rc = gpu ? alloc_provider_cuda_create(d->index, &out->providers[0])
                 : alloc_provider_host_create(&out->providers[0]);
    if (rc == 0 && gpu && !host_cache)
        rc = alloc_provider_host_create(&out->providers[1]);
    if (rc == 0 && gpu)
        rc = alloc_provider_pinned_create(&out->providers[2]);
    if (gpu && host_cache) {
        out->host_cache = host_cache;
        out->host_borrowed = true;
    }
    alloc_cache_config_t host = {.name = "host", .fraction = ENG_MEMORY_HOST_FRACTION};
    const alloc_cache_config_t *cfgs[3] = {cfg, &host, staging_cfg};
    alloc_cache_t **caches[3] = {&out->cache, &out->host_cache, &out->staging};
    for (int i = 0; i < 3 && rc == 0; i++)
        if (out->providers[i])
            rc = alloc_cache_create(out->providers[i], cfgs[i], caches[i]);
    if (rc != 0) {
        char msg[FS_ERRMSG_MAX], name[ENG_DEVICE_NAME_MAX];
        snprintf(msg, sizeof msg, "%s", fs_errmsg());
        eng_memory_close(out);
        return fs_err(rc, "%s memory: %s", eng_device_name(d, name, sizeof name), msg);
    }
    return 0;
}

void eng_memory_close(eng_memory_t *m)
{
    alloc_cache_destroy(m->staging);
    if (!m->host_borrowed)
        alloc_cache_destroy(m->host_cache);
    alloc_cache_destroy(m->cache);
    for (int i = 0; i < 3; i++)
        alloc_provider_destroy(m->providers[i]);
    memset(m, 0, sizeof *m);
}
