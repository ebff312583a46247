/* flash_impl.h -- the fast CUDA Attention kernels (engine/cuda/
 * attention_flash.cu) as engine/cuda/attention.cu calls them. Only .cu
 * files include this header. Threading: as every kernel run, one stream. */
#ifndef FS_ENGINE_CUDA_FLASH_IMPL_H
#define FS_ENGINE_CUDA_FLASH_IMPL_H

#include <stdbool.h>

#include "engine/op.h"
#include "engine/ops/attention_impl.h"

/* Whether the fast kernels compute node c's Y (attention_flash.cu says
 * which cases: 4-D or 3-D, no past, no qk_matmul_output, no softcap, head
 * sizes up to 128, float, float16 or bfloat16). Cannot fail. */
bool eng_cuda_attention_fast_ok(const eng_op_ctx_t *c, const eng_attention_t *a);

/* Queues Y of the node in c (eng_cuda_attention_fast_ok held) on its
 * stream. 0, or FS_EDEVICE naming the node when a CUDA call fails
 * (nothing queued then). */
int eng_cuda_attention_fast(eng_op_ctx_t *c, const eng_attention_t *a);

/* The scratch bytes eng_cuda_attention_fast uses for node a: K^T unpacked
 * when its keys keep flash_f2_kernel off (attention_flash.cu), else 0.
 * Shapes only (no data read). Cannot fail. */
size_t eng_cuda_attention_fast_scratch(const eng_op_ctx_t *c, const eng_attention_t *a);

#endif
