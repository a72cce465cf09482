// AdamW and the gradient norm. Both are memory-bound streams over every parameter: AdamW reads
// and writes each element once (llm.c's adamw_kernel), the norm reads each gradient once.
#include "kernels/compute/optimizer.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/ordered_sum.cuh"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

// cpu::AdamW with its bias corrections worked out on the host, in the same fp32 as cpu::adamw.
struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    float correct1, correct2;
};

// Line for line cpu::adamw's arithmetic, so the two differ only where the compiler fuses a
// multiply and an add.
template <class T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v, std::int64_t n,
                             AdamWStep a) {
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float g = to_f32(grads[i]) * a.grad_scale;
        const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        float p = master != nullptr ? master[i] : to_f32(params[i]);
        p -= a.lr * a.weight_decay * p;
        p -= a.lr * (mi / a.correct1) / (sqrtf(vi / a.correct2) + a.eps);
        m[i] = mi;
        v[i] = vi;
        if (master != nullptr) master[i] = p;
        params[i] = from_f32<T>(p);
    }
}

// Squares and sums in double: a float squared is exact in double, so the only rounding is the
// sums', as in cpu::squared_norm.
template <class T>
__global__ void __launch_bounds__(kBlock) squared_norm_kernel(const T* x, std::int64_t n, double* partials) {
    __shared__ double shared[kBlock / kWarp];
    double sum = 0.0;
    for_each_packed(x, n, static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                    static_cast<std::int64_t>(gridDim.x) * blockDim.x, [&](std::int64_t, const T& value) {
                        const double d = to_f32(value);
                        sum += d * d;
                    });
    sum = block_sum_double(sum, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
    // A small buffer takes fewer blocks than it has partials: the rest are zeros.
    if (blockIdx.x == 0) {
        for (int b = static_cast<int>(gridDim.x + threadIdx.x); b < kNormPartials; b += kBlock) partials[b] = 0.0;
    }
}

}  // namespace

template <class T>
void launch_adamw(T* params, float* master, const T* grads, float* m, float* v, std::int64_t n, const cpu::AdamW& a,
                  cudaStream_t stream) {
    if (n == 0) return;
    const AdamWStep step{a.lr,         a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale, a.bias_correction1(),
                         a.bias_correction2()};
    adamw_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(params, master, grads, m, v, n, step);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_squared_norm_partials(const T* x, std::int64_t n, double* partials, cudaStream_t stream) {
    // The number of blocks depends on n alone (never on the device), so the order of the sums does.
    const std::int64_t per_block = std::int64_t{kBlock} * Pack<T>::kSize;
    const auto blocks = static_cast<int>(std::clamp<std::int64_t>((n + per_block - 1) / per_block, 1, kNormPartials));
    squared_norm_kernel<T><<<blocks, kBlock, 0, stream>>>(x, n, partials);
    CUDA_CHECK_LAUNCH();
}

void launch_sum_partials(const double* partials, std::int64_t count, double* squared_norm, cudaStream_t stream) {
    ordered_sum_kernel<double, double><<<1, kOrderedSumThreads, 0, stream>>>(partials, count, 1.0, squared_norm);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE_OPTIMIZER(T)                                                                         \
    template void launch_adamw<T>(T*, float*, const T*, float*, float*, std::int64_t, const cpu::AdamW&,           \
                                  cudaStream_t);                                                                    \
    template void launch_squared_norm_partials<T>(const T*, std::int64_t, double*, cudaStream_t);

SWEETSPOT_INSTANTIATE_OPTIMIZER(float)
SWEETSPOT_INSTANTIATE_OPTIMIZER(__half)
SWEETSPOT_INSTANTIATE_OPTIMIZER(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE_OPTIMIZER

}  // namespace sweetspot::gpu
