#include "kernels/compute/gelu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// GPT-2's tanh-approximated GELU, in place on the MLP's [B·T, 4C] activations: no extra buffer.
template <class T>
__global__ void gelu_tanh_kernel(T* x, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = to_f32(x[idx]);
        x[idx] = from_f32<T>(0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v))));
    }
}

}  // namespace

template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_tanh_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, n);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_gelu_tanh<T>(T*, std::int64_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
