/* blas.h -- making sure OpenBLAS runs the kernels this CPU deserves.
 *
 * OpenBLAS (DYNAMIC_ARCH builds, as Debian ships) picks its kernels from the
 * CPU model at load. On a CPU model newer than its table -- common in VMs
 * and on new server parts -- it falls back to generic SSE kernels
 * ("Prescott"), which run GEMM about 3x slower (measured: ResNet-50 299 ms
 * against 104 ms with the SkylakeX kernels, on an AVX-512 Xeon VM). The
 * choice is made before main() and only the OPENBLAS_CORETYPE variable
 * changes it, so a program that finds the fallback restarts itself once
 * with the variable set.
 *
 * The engine does not call OpenBLAS (engine/cpu/gemm.h says why) and the
 * server does not link it: only bench/gemm_bench does, as its baseline, and
 * this keeps that baseline honest.
 *
 * Threading: call first thing in main, before any thread starts. */
#ifndef FS_BENCH_BLAS_H
#define FS_BENCH_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* When OpenBLAS chose a generic core although this CPU has AVX2+FMA or
 * AVX-512, and OPENBLAS_CORETYPE is unset, sets it (SkylakeX or Haswell),
 * logs why at INFO and re-executes the program with `argv`; it does not
 * return then. Returns when nothing needs doing, or when the re-exec failed
 * (logged at WARN: the program goes on with the slow kernels). */
void bench_blas_ensure_fast_kernels(char **argv);

/* OpenBLAS's core name ("SkylakeX", "Prescott", ...). Never NULL. */
const char *bench_blas_core_name(void);

#ifdef __cplusplus
}
#endif
#endif
