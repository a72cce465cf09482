#pragma once
// Sums in double whose order depends only on the number of terms, never on timing or the
// device: a block's sum over its threads in a fixed tree, and one block summing an array (the
// last pass of a two-pass reduction). No atomics, so a run repeats bit for bit, as the loss and
// the gradient norm of a training step must.
#include <cstdint>

#include "kernels/compute/device_common.cuh"

namespace sweetspot::gpu {

// Threads of the block that sums an array; fixed, so the order of its sum is too.
constexpr int kOrderedSumThreads = 1024;

__device__ __forceinline__ double warp_sum_double(double v) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

// v summed over the whole block, returned to every thread. blockDim.x must be a multiple of 32;
// `shared` holds one double per warp, and the trailing barrier lets the caller reuse it at once.
__device__ __forceinline__ double block_sum_double(double v, double* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    v = warp_sum_double(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double r = lane < static_cast<int>(blockDim.x) / kWarp ? shared[lane] : 0.0;
    r = warp_sum_double(r);
    __syncthreads();
    return r;
}

// *out = scale · Σ x[0 .. n), in double. One block of kOrderedSumThreads.
template <class In, class Out>
__global__ void ordered_sum_kernel(const In* x, std::int64_t n, double scale, Out* out) {
    __shared__ double shared[kOrderedSumThreads / kWarp];
    double sum = 0.0;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(x[i]);
    sum = block_sum_double(sum, shared);
    if (threadIdx.x == 0) *out = static_cast<Out>(scale * sum);
}

}  // namespace sweetspot::gpu
