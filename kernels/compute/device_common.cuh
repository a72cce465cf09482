#pragma once
// Device helpers every kernel file uses: loads and stores of the three storage types (kernels
// compute in fp32 and convert only where a value is read from or written to memory, rounding to
// nearest even), reductions over a warp and over the four lanes of a quad (a row of an mma.sync
// fragment, or of the CUDA-core attention kernel), and asynchronous copies into shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace sweetspot::gpu {

constexpr int kWarp = 32;

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

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

// Over lanes 4q .. 4q + 3, whose lane numbers differ in the lowest two bits only.
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
    return v + __shfl_xor_sync(0xFFFFFFFFu, v, 2);
}

// 16 bytes from global to shared memory without passing through registers (cp.async), or zeros
// when `valid` is false; completes at cp_async_wait.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src), "r"(bytes));
}
// 4 bytes the same way (through L1: .cg takes 16-byte copies only), for rows of fp32 statistics
// whose start is not 16-byte aligned.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
    const int bytes = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace sweetspot::gpu
