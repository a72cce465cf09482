#pragma once
// Loads and stores of the three storage types, for device code: kernels compute in fp32 and
// convert only where a value is read from or written to memory (round to nearest even).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace sweetspot::gpu {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v) {
    if constexpr (std::is_same_v<T, float>) {
        return v;
    } else if constexpr (std::is_same_v<T, __half>) {
        return __float2half_rn(v);
    } else {
        static_assert(std::is_same_v<T, __nv_bfloat16>);
        return __float2bfloat16_rn(v);
    }
}

}  // namespace sweetspot::gpu
