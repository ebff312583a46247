/* blas.c -- restarting with OPENBLAS_CORETYPE when OpenBLAS fell back to
 * generic kernels on a CPU that has better ones (see blas.h). */
#include "bench/blas.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"

const char *bench_blas_core_name(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

/* OpenBLAS's x86 fallbacks that use neither AVX2 nor AVX-512. */
static int core_is_generic(const char *name)
{
    static const char *const generic[] = {"prescott", "core2", "penryn", "dunnington",
                                          "nehalem", "katmai", "coppermine", "northwood",
                                          "banias", "atom", "unknown"};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (strcasecmp(name, generic[i]) == 0)
            return 1;
    return 0;
}

void bench_blas_ensure_fast_kernels(char **argv)
{
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE") || !core_is_generic(bench_blas_core_name()))
        return;
    __builtin_cpu_init();
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want)
        return;
    FS_LOG_I("bench", "OpenBLAS chose its generic '%s' kernels for this CPU (a model its table "
             "lacks); restarting with OPENBLAS_CORETYPE=%s", bench_blas_core_name(), want);
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    FS_LOG_W("bench", "could not restart with OPENBLAS_CORETYPE=%s (%s): GEMM runs on the slow "
             "generic kernels; set the variable before starting", want, strerror(errno));
#else
    (void)argv;
#endif
}
