#include "kernels/compute/gelu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// GPT-2's tanh-approximated GELU on the MLP's [B·T, 4C] activations; out may be in (in place, no
// extra buffer).
template <class T>
__global__ void gelu_tanh_kernel(T* out, const T* in, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = to_f32(in[idx]);
        out[idx] = from_f32<T>(0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v))));
    }
}

// dx *= gelu'(x): d/dv of 0.5·v·(1 + tanh(a)), a = √(2/π)·(v + 0.044715·v³), is
// 0.5·(1 + tanh a) + 0.5·v·(1 − tanh² a)·√(2/π)·(1 + 3·0.044715·v²).
template <class T>
__global__ void gelu_tanh_backward_kernel(T* dx, const T* x, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = to_f32(x[idx]);
        const float th = tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v));
        const float grad =
            0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * v * v);
        dx[idx] = from_f32<T>(to_f32(dx[idx]) * grad);
    }
}

}  // namespace

template <class T>
void launch_gelu_tanh(T* out, const T* in, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_tanh_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(out, in, n);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream) {
    launch_gelu_tanh<T>(x, x, n, stream);
}

template <class T>
void launch_gelu_tanh_backward(T* dx, const T* x, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_tanh_backward_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(dx, x, n);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T)                                       \
    template void launch_gelu_tanh<T>(T*, std::int64_t, cudaStream_t);                   \
    template void launch_gelu_tanh<T>(T*, const T*, std::int64_t, cudaStream_t);         \
    template void launch_gelu_tanh_backward<T>(T*, const T*, std::int64_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
