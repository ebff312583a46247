/* unary_kernels.c -- CPU kernels of the unary ops. */
#include "engine/op.h"

const eng_cpu_kernel_t *const eng_cpu_unary[] = {NULL};
