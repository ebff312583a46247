/* shape_impl.h -- what the CUDA kernels of the shape family (shape.cu,
 * shape_make.cu) share: dispatch on element size. These ops move bytes
 * without looking at them, so a kernel is instantiated per element size,
 * not per dtype.
 *
 * Only .cu files include this header; everything in it has internal
 * linkage, as in the files that include it. Threading: pure functions. */
#ifndef FS_ENGINE_CUDA_SHAPE_IMPL_H
#define FS_ENGINE_CUDA_SHAPE_IMPL_H

#include <stdint.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/ops/shape_impl.h"

namespace {

template <typename T> struct unit_tag {
    using type = T;
};

/* Calls f(unit_tag<T>{}) with T an opaque type of `bytes` bytes; FS_ENOTSUP
 * for a size no dtype has. */
template <typename F> static int with_unit(const eng_op_ctx_t *c, size_t bytes, F &&f)
{
    switch (bytes) {
    case 1:
        return f(unit_tag<uint8_t>{});
    case 2:
        return f(unit_tag<uint16_t>{});
    case 4:
        return f(unit_tag<uint32_t>{});
    case 8:
        return f(unit_tag<uint64_t>{});
    case 16:
        return f(unit_tag<uint4>{});
    }
    return eng_op_err(c, FS_ENOTSUP, "elements of %zu bytes are not supported", bytes);
}

} // namespace

#endif
