#pragma once
// The storage types of the GPU kernels (float, __half, __nv_bfloat16), the DType each is, and the
// one switch from a DType to its type. Plain C++ can include this header.
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

namespace sweetspot {

// Calls f(T{}) with the storage type of `dtype` (float, __half, __nv_bfloat16): a forward's or a
// training step's code in the cell's dtype.
template <class F>
void with_dtype(DType dtype, F&& f) {
    switch (dtype) {
        case DType::fp32: f(float{}); break;
        case DType::fp16: f(__half{}); break;
        case DType::bf16: f(__nv_bfloat16{}); break;
    }
}

}  // namespace sweetspot
