/* kernels.c -- the CPU's kernel table, indexed by op id, generated from
 * engine/ops/list.h. */
#include "engine/kernels.h"

#define ENG_CPU_KERNEL_ENTRY_(op, cpu, cuda) ENG_KERNEL_REF_##cpu(eng_cpu_##op),
const eng_kernel_t *const eng_cpu_kernels[ENG_OP_COUNT] = {ENG_OPS(ENG_CPU_KERNEL_ENTRY_)};
#undef ENG_CPU_KERNEL_ENTRY_
