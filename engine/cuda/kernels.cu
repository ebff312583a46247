/* kernels.cu -- the CUDA kernel table, indexed by op id, generated from
 * engine/ops/list.h. */
#include "engine/kernels.h"

#define ENG_CUDA_KERNEL_ENTRY_(op, cpu, cuda) ENG_KERNEL_REF_##cuda(eng_cuda_##op),
extern "C" const eng_kernel_t *const eng_cuda_kernels[ENG_OP_COUNT] = {
    ENG_OPS(ENG_CUDA_KERNEL_ENTRY_)};
#undef ENG_CUDA_KERNEL_ENTRY_
