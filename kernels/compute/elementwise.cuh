#pragma once
// The launch shape the element-wise and row-wise kernels (embedding.cu, layernorm.cu, bias.cu,
// gelu.cu, residual.cu, dropout.cu, softmax.cu, count_nonfinite.cu, and optimizer.cu's AdamW and
// gradient norm) share, and their block-wide reduction. Apart from device_common.cuh because its
// names (kBlock) are other kernels' own.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/compute/device_common.cuh"

namespace sweetspot::gpu {

// Threads per block of the element-wise kernels and the softmax.
constexpr int kBlock = 256;
// Element-wise grids are capped (each thread then strides over the rest): plenty of blocks to
// fill an H100, and no grid-size limit to think about for B·T·vocab sized buffers.
constexpr std::int64_t kMaxElementwiseBlocks = 65536;

// Reduces v over the whole block and returns the result to every thread. blockDim.x must be a
// multiple of 32 (at most 1024). `shared` holds one float per warp; the trailing barrier lets
// the caller reduce again with the same array straight away.
template <bool IsMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    const int n_warps = static_cast<int>(blockDim.x) / kWarp;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const float identity = IsMax ? -INFINITY : 0.0f;
    float r = lane < n_warps ? shared[lane] : identity;
    r = IsMax ? warp_max(r) : warp_sum(r);  // every warp reduces the partials: all threads get it
    __syncthreads();
    return r;
}

inline int elementwise_blocks(std::int64_t n) {
    return static_cast<int>(std::min((n + kBlock - 1) / kBlock, kMaxElementwiseBlocks));
}

}  // namespace sweetspot::gpu
