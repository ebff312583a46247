/* cuda_error.h -- the one way the C files that call the CUDA runtime
 * (alloc/provider_cuda.c, server/shm_cuda.c) turn a cudaError_t into
 * flatserve's error: the message names what failed and the runtime's
 * error, and the runtime's sticky last error is cleared so that a later,
 * unrelated cudaGetLastError does not report it. Header-only; CUDA builds
 * only (FS_HAVE_CUDA). Threading: as fs_err (a per-thread message). */
#ifndef FS_COMMON_CUDA_ERROR_H
#define FS_COMMON_CUDA_ERROR_H

#if FS_HAVE_CUDA

#include <stdarg.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "common/error.h"

/* Sets this thread's message to "<formatted prefix> (<error name>: <error
 * text>)", clears the runtime's last error, and returns `code`. */
static inline int fs_cuda_fail(int code, cudaError_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int fs_cuda_fail(int code, cudaError_t err, const char *fmt, ...)
{
    char prefix[FS_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    (void)cudaGetLastError();
    return fs_err(code, "%s (%s: %s)", prefix, cudaGetErrorName(err), cudaGetErrorString(err));
}

#endif /* FS_HAVE_CUDA */

#endif
