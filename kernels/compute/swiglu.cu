#include "kernels/compute/swiglu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// One kernel for the gate's activation and the product with up: transformers runs silu and the
// multiply as two element-wise passes, which write silu(gate) out and read it back. kWidth
// elements a thread at a time: 16-byte packs over the buffers' whole packs, single elements for
// the rest (the launcher splits them).
template <class T, int kWidth>
__global__ void swiglu_kernel(T* out, const T* gate, const T* up, std::int64_t groups) {
    using E = Elements<T, kWidth>;
    auto* o = reinterpret_cast<E*>(out);
    const auto* g = reinterpret_cast<const E*>(gate);
    const auto* u = reinterpret_cast<const E*>(up);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < groups;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const E gv = g[p], uv = u[p];
        E ov;
#pragma unroll
        for (int j = 0; j < kWidth; ++j) {
            const float z = to_f32(gv.v[j]);
            ov.v[j] = from_f32<T>(z * sigmoid(z) * to_f32(uv.v[j]));
        }
        o[p] = ov;
    }
}

// Both gradients from one read of dout, gate and up, and one sigmoid an element: silu(z) for dup
// and silu'(z) = σ(z)·(1 + z·(1 − σ(z))) for dgate. The forward's output is not needed.
template <class T, int kWidth>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                       std::int64_t groups) {
    using E = Elements<T, kWidth>;
    auto* dg = reinterpret_cast<E*>(dgate);
    auto* du = reinterpret_cast<E*>(dup);
    const auto* d = reinterpret_cast<const E*>(dout);
    const auto* g = reinterpret_cast<const E*>(gate);
    const auto* u = reinterpret_cast<const E*>(up);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < groups;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const E dv = d[p], gv = g[p], uv = u[p];
        E dgv, duv;
#pragma unroll
        for (int j = 0; j < kWidth; ++j) {
            const float z = to_f32(gv.v[j]), s = sigmoid(z), grad = to_f32(dv.v[j]);
            dgv.v[j] = from_f32<T>(grad * to_f32(uv.v[j]) * (s * (1.0f + z * (1.0f - s))));
            duv.v[j] = from_f32<T>(grad * (z * s));
        }
        dg[p] = dgv;
        du[p] = duv;
    }
}

// Whole 16-byte packs of n elements where every buffer starts on 16 bytes, else none.
std::int64_t packs_of(std::int64_t n, int pack, std::initializer_list<const void*> buffers) {
    return all_on_16_bytes(buffers) ? n / pack : 0;
}

}  // namespace

template <class T>
void launch_swiglu(T* out, const T* gate, const T* up, std::int64_t n, cudaStream_t stream) {
    constexpr int k = Pack<T>::kSize;
    const std::int64_t packs = packs_of(n, k, {out, gate, up}), first = k * packs;
    if (packs > 0) {
        swiglu_kernel<T, k><<<elementwise_blocks(packs), kBlock, 0, stream>>>(out, gate, up, packs);
        CUDA_CHECK_LAUNCH();
    }
    if (first == n) return;
    swiglu_kernel<T, 1><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(out + first, gate + first, up + first,
                                                                              n - first);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::int64_t n,
                            cudaStream_t stream) {
    constexpr int k = Pack<T>::kSize;
    const std::int64_t packs = packs_of(n, k, {dgate, dup, dout, gate, up}), first = k * packs;
    if (packs > 0) {
        swiglu_backward_kernel<T, k>
            <<<elementwise_blocks(packs), kBlock, 0, stream>>>(dgate, dup, dout, gate, up, packs);
        CUDA_CHECK_LAUNCH();
    }
    if (first == n) return;
    swiglu_backward_kernel<T, 1><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(
        dgate + first, dup + first, dout + first, gate + first, up + first, n - first);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T)                                                                 \
    template void launch_swiglu<T>(T*, const T*, const T*, std::int64_t, cudaStream_t);          \
    template void launch_swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, \
                                            cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
