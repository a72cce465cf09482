#include "kernels/compute/count_nonfinite.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// *count += how many of x's n values are NaN or infinite. The cell's output check over every
// logit: a [B·T, V] buffer can be tens of GB, which this reads once at memory bandwidth instead
// of copying it to the host. One atomic per warp that found any.
template <class T>
__global__ void count_nonfinite_kernel(const T* x, std::int64_t n, unsigned long long* count) {
    unsigned int found = 0;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        found += isfinite(to_f32(x[idx])) ? 0u : 1u;
    }
    found = __reduce_add_sync(0xFFFFFFFFu, found);  // every lane leaves the loop before this
    if (threadIdx.x % kWarp == 0 && found > 0) atomicAdd(count, static_cast<unsigned long long>(found));
}

}  // namespace

template <class T>
void launch_count_nonfinite(const T* x, std::int64_t n, unsigned long long* count, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, stream));
    if (n == 0) return;
    count_nonfinite_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, n, count);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_count_nonfinite<T>(const T*, std::int64_t, unsigned long long*, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
