/* device.c -- the CPU as a device (engine/backend.h): its kernels, on host
 * memory, with no instance state, no stream and no graphs. */
#include "engine/backend.h"

const eng_backend_i eng_backend_cpu = {
    .name = "cpu",
    .kernels = eng_cpu_kernels,
    .host_memory = true,
    .precisions = 1u << ENG_PREC_FP32,
};
