/* value_hd.h -- one element of a tensor of any numeric dtype read as a
 * double and written from one, for kernels that compute in double whatever
 * their tensors hold (the spatial and signal ops, LpPool): the CPU and the
 * CUDA kernels call these same inline functions (ENG_OPS_HD), so both
 * convert alike.
 *
 * Writing rounds to nearest (float16 and bfloat16 as engine/half.h does);
 * an integer dtype takes the value truncated toward zero, as C's cast does,
 * and the callers only write integer values that fit.
 *
 * Threading: pure functions. */
#ifndef FS_ENGINE_OPS_VALUE_HD_H
#define FS_ENGINE_OPS_VALUE_HD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/half.h"
#include "engine/ops/ops_hd.h"
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element i of p (dtype dt) as a double; 0 for a dtype without numbers.
 * Cannot fail. */
ENG_OPS_HD static inline double eng_hd_load(const void *p, eng_dtype_t dt, int64_t i)
{
    switch (dt) {
    case ENG_DT_FLOAT: return ((const float *)p)[i];
    case ENG_DT_DOUBLE: return ((const double *)p)[i];
    case ENG_DT_FLOAT16: return eng_half_to_float(((const uint16_t *)p)[i]);
    case ENG_DT_BFLOAT16: return eng_bf16_to_float(((const uint16_t *)p)[i]);
    case ENG_DT_INT8: return ((const int8_t *)p)[i];
    case ENG_DT_INT16: return ((const int16_t *)p)[i];
    case ENG_DT_INT32: return ((const int32_t *)p)[i];
    case ENG_DT_INT64: return (double)((const int64_t *)p)[i];
    case ENG_DT_UINT8: return ((const uint8_t *)p)[i];
    case ENG_DT_UINT16: return ((const uint16_t *)p)[i];
    case ENG_DT_UINT32: return ((const uint32_t *)p)[i];
    case ENG_DT_UINT64: return (double)((const uint64_t *)p)[i];
    case ENG_DT_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0.0;
    }
}

/* Element i of an int32 or int64 tensor as int64 (an index input). Cannot
 * fail. */
ENG_OPS_HD static inline int64_t eng_hd_load_index(const void *p, eng_dtype_t dt, int64_t i)
{
    return dt == ENG_DT_INT32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Writes v as element i of p (dtype dt); a NaN becomes 0 in an integer
 * dtype, and a value out of such a dtype's range is never passed for one
 * (see the file comment). Cannot fail. */
ENG_OPS_HD static inline void eng_hd_store(void *p, eng_dtype_t dt, int64_t i, double v)
{
    bool real = dt == ENG_DT_FLOAT || dt == ENG_DT_DOUBLE || dt == ENG_DT_FLOAT16 ||
                dt == ENG_DT_BFLOAT16;
    if (!real && v != v)
        v = 0.0;
    switch (dt) {
    case ENG_DT_FLOAT: ((float *)p)[i] = (float)v; break;
    case ENG_DT_DOUBLE: ((double *)p)[i] = v; break;
    case ENG_DT_FLOAT16: ((uint16_t *)p)[i] = eng_float_to_half((float)v); break;
    case ENG_DT_BFLOAT16: ((uint16_t *)p)[i] = eng_float_to_bf16((float)v); break;
    case ENG_DT_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ENG_DT_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case ENG_DT_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ENG_DT_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case ENG_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ENG_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case ENG_DT_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ENG_DT_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case ENG_DT_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    default: break;
    }
}

#ifdef __cplusplus
}
#endif
#endif
