/* kernels.h -- the name of every device kernel engine/ops/list.h marks Y:
 * eng_cpu_<OpType> (engine/cpu/) and eng_cuda_<OpType> (engine/cuda/).
 *
 * The kernel files and the device tables include it, so that a kernel's
 * definition meets its declaration (in C++, a namespace-scope const needs
 * the extern declaration to get external linkage). The CUDA names are
 * declared in every build; only a CUDA build defines them.
 *
 * Threading: declarations only. */
#ifndef FS_ENGINE_KERNELS_H
#define FS_ENGINE_KERNELS_H

#include "engine/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ENG_IF_<mark>(x): x where list.h's mark is Y, nothing where it is N. */
#define ENG_IF_Y(...) __VA_ARGS__
#define ENG_IF_N(...)
/* ENG_KERNEL_REF_<mark>(k): &k for Y, NULL for N (a device table's entry). */
#define ENG_KERNEL_REF_Y(k) &k
#define ENG_KERNEL_REF_N(k) NULL

/* Defines eng_cpu_<op> as a kernel whose run is fn(ctx, ...): one line per
 * op where a family's ops share one run function and differ in its
 * arguments (a row function, an output dtype). */
#define ENG_CPU_KERNEL_CALLING(op, fn, ...)                                            \
    static int op##_run(eng_op_ctx_t *c) { return fn(c, __VA_ARGS__); }                  \
    const eng_kernel_t eng_cpu_##op = {.run = op##_run};

#define ENG_CPU_KERNEL_DECL_(op, cpu, cuda) ENG_IF_##cpu(extern const eng_kernel_t eng_cpu_##op;)
ENG_OPS(ENG_CPU_KERNEL_DECL_)
#undef ENG_CPU_KERNEL_DECL_

#define ENG_CUDA_KERNEL_DECL_(op, cpu, cuda) ENG_IF_##cuda(extern const eng_kernel_t eng_cuda_##op;)
ENG_OPS(ENG_CUDA_KERNEL_DECL_)
#undef ENG_CUDA_KERNEL_DECL_

#ifdef __cplusplus
}
#endif
#endif
