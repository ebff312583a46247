/* misc_kernels.c -- CPU kernels of the misc ops. */
#include "engine/op.h"

const eng_cpu_kernel_t *const eng_cpu_misc[] = {NULL};
