#pragma once
// The storage types of the GPU kernels (float, __half, __nv_bfloat16) and the DType each is.
// Plain C++ can include this header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/model/dtype.hpp"

namespace sweetspot::gpu {

// The DType that storage type T is, for what speaks DType (Gemm, the conversions in dtype.hpp).
template <class T>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>) {
        return DType::fp32;
    } else if constexpr (std::is_same_v<T, __half>) {
        return DType::fp16;
    } else {
        static_assert(std::is_same_v<T, __nv_bfloat16>, "T is float, __half or __nv_bfloat16");
        return DType::bf16;
    }
}

}  // namespace sweetspot::gpu
