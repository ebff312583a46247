/* ops_hd.h -- ENG_OPS_HD, the mark of an inline function in an
 * engine/ops/<family>_impl.h that the CPU and the CUDA kernels both call:
 * nvcc compiles it for the host and the device, a C compiler as plain C.
 * One definition, so that each device evaluates the same expression. */
#ifndef FS_ENGINE_OPS_OPS_HD_H
#define FS_ENGINE_OPS_OPS_HD_H

#ifdef __CUDACC__
#define ENG_OPS_HD __host__ __device__
#else
#define ENG_OPS_HD
#endif

#endif
