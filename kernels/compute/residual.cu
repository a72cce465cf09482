#include "kernels/compute/residual.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// x += y: the residual stream absorbs a sub-layer's output in place.
template <class T>
__global__ void residual_add_kernel(T* x, const T* y, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        x[idx] = from_f32<T>(to_f32(x[idx]) + to_f32(y[idx]));
    }
}

}  // namespace

template <class T>
void launch_residual_add(T* x, const T* y, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    residual_add_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_residual_add<T>(T*, const T*, std::int64_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
