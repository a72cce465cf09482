#include "kernels/compute/gelu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/gelu_from_output.hpp"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

__device__ __forceinline__ float gelu_tanh_value(float v) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    return 0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
}

// GPT-2's tanh-approximated GELU on the MLP's [B·T, 4C] activations; out may be in (in place, no
// extra buffer).
template <class T>
__global__ void gelu_tanh_kernel(T* out, const T* in, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        out[idx] = from_f32<T>(gelu_tanh_value(to_f32(in[idx])));
    }
}

// Each warp takes 32 consecutive elements at a time: one element a lane, the warp's 32 branch
// bits gathered by a ballot, and its first four lanes storing one byte of them each (the chunk
// starts at a multiple of 32, so at a byte boundary; a lane whose byte lies past n stores none).
// The warps' chunks are warp-uniform, so every lane reaches every ballot.
template <class T>
__global__ void gelu_tanh_with_branch_kernel(T* x, std::uint8_t* left_bits, std::int64_t n) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const std::int64_t warps_per_block = blockDim.x / kWarp;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * warps_per_block * kWarp;
    for (std::int64_t first = (blockIdx.x * warps_per_block + threadIdx.x / kWarp) * kWarp; first < n; first += stride) {
        const std::int64_t idx = first + lane;
        bool left = false;
        if (idx < n) {
            const float v = to_f32(x[idx]);
            left = gelu_output::left_of_minimum(v);
            x[idx] = from_f32<T>(gelu_tanh_value(v));
        }
        const unsigned bits = __ballot_sync(0xFFFFFFFFu, left);
        if (lane < 4 && first + 8 * lane < n) left_bits[first / 8 + lane] = static_cast<std::uint8_t>(bits >> (8 * lane));
    }
}

// A 16-bit T's value from its bits and back.
template <class T>
__device__ __forceinline__ T from_bits(std::uint16_t b) {
    if constexpr (std::is_same_v<T, __half>) return __ushort_as_half(b);
    else return __ushort_as_bfloat16(b);
}
template <class T>
__device__ __forceinline__ std::uint16_t bits_of(T v) {
    if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(v);
    else return __bfloat16_as_ushort(v);
}

// One thread a (bits, branch) entry; NaN patterns get NaN, as the inversion gives them.
template <class T>
__global__ void gelu_derivative_table_kernel(float* table) {
    const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= gelu_output::kDerivativeTableSize) return;
    const bool left = idx >= 65536;
    table[idx] = gelu_output::derivative_from_output(to_f32(from_bits<T>(static_cast<std::uint16_t>(idx & 0xFFFF))), left);
}

// fp32 inverts each y; a 16-bit T reads its y's entry of the table, which the elements' few
// distinct values keep in L1 and L2.
template <class T>
__global__ void gelu_tanh_backward_from_output_kernel(T* dx, const T* y, const std::uint8_t* left_bits,
                                                      const float* table, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const bool left = gelu_output::branch_bit(left_bits, idx);
        float grad;
        if constexpr (std::is_same_v<T, float>) grad = gelu_output::derivative_from_output(y[idx], left);
        else grad = __ldg(table + gelu_output::derivative_table_index(bits_of(y[idx]), left));
        dx[idx] = from_f32<T>(to_f32(dx[idx]) * grad);
    }
}

// The in-place GELU's kernels for a 16-bit T, eight elements a thread: one 16-byte pack of values
// and the one byte of bits they own, where the kernels above move two bytes a thread (and the
// forward a ballot a warp) and reach about half the memory's rate. `packs` whole packs from x's
// start; the launchers hand the last n % 8 elements to the kernels above.
template <class T>
__global__ void gelu_tanh_with_branch_packed_kernel(T* x, std::uint8_t* left_bits, std::int64_t packs) {
    static_assert(Pack<T>::kSize == 8, "one pack, one byte of bits");
    auto* body = reinterpret_cast<Pack<T>*>(x);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Pack<T> pack = body[p];
        unsigned bits = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float v = to_f32(pack.v[j]);
            bits |= static_cast<unsigned>(gelu_output::left_of_minimum(v)) << j;
            pack.v[j] = from_f32<T>(gelu_tanh_value(v));
        }
        body[p] = pack;
        left_bits[p] = static_cast<std::uint8_t>(bits);
    }
}

template <class T>
__global__ void gelu_tanh_backward_from_output_packed_kernel(T* dx, const T* y, const std::uint8_t* left_bits,
                                                             const float* table, std::int64_t packs) {
    auto* d = reinterpret_cast<Pack<T>*>(dx);
    const auto* out = reinterpret_cast<const Pack<T>*>(y);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Pack<T> grad = d[p];
        const Pack<T> kept = out[p];
        const unsigned bits = left_bits[p];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float slope = __ldg(table + gelu_output::derivative_table_index(bits_of(kept.v[j]), ((bits >> j) & 1u) != 0));
            grad.v[j] = from_f32<T>(to_f32(grad.v[j]) * slope);
        }
        d[p] = grad;
    }
}

// How many whole 16-byte packs of a 16-bit T's n elements the packed kernels take: none in fp32,
// nor where a buffer is not 16-byte aligned (16-byte loads need 16-byte addresses). The
// per-element kernels take the rest, from element 8 · packs (a byte boundary of the bits).
template <class T>
std::int64_t packs_of(std::int64_t n, std::initializer_list<const void*> buffers) {
    if constexpr (std::is_same_v<T, float>) {
        return 0;
    } else {
        for (const void* b : buffers)
            if (reinterpret_cast<std::uintptr_t>(b) % 16 != 0) return 0;
        return n / 8;
    }
}

// d/dv of 0.5·v·(1 + tanh(a)), a = √(2/π)·(v + 0.044715·v³), is
// 0.5·(1 + tanh a) + 0.5·v·(1 − tanh² a)·√(2/π)·(1 + 3·0.044715·v²).
__device__ __forceinline__ float gelu_tanh_derivative(float v) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    const float th = tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * v * v);
}

// dx *= gelu'(x).
template <class T>
__global__ void gelu_tanh_backward_kernel(T* dx, const T* x, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        dx[idx] = from_f32<T>(to_f32(dx[idx]) * gelu_tanh_derivative(to_f32(x[idx])));
    }
}

// The GELU and its backward from the input for a 16-bit T, a 16-byte pack of eight elements a
// thread, as the in-place GELU's packed kernels above (the kernels above move two bytes a thread):
// the training step's GELU recomputation and backward, and the forward's GELU.
template <class T>
__global__ void gelu_tanh_packed_kernel(T* out, const T* in, std::int64_t packs) {
    auto* y = reinterpret_cast<Pack<T>*>(out);
    const auto* x = reinterpret_cast<const Pack<T>*>(in);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Pack<T> pack = x[p];
#pragma unroll
        for (int j = 0; j < Pack<T>::kSize; ++j) pack.v[j] = from_f32<T>(gelu_tanh_value(to_f32(pack.v[j])));
        y[p] = pack;
    }
}

template <class T>
__global__ void gelu_tanh_backward_packed_kernel(T* dx, const T* x, std::int64_t packs) {
    auto* d = reinterpret_cast<Pack<T>*>(dx);
    const auto* in = reinterpret_cast<const Pack<T>*>(x);
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Pack<T> grad = d[p];
        const Pack<T> v = in[p];
#pragma unroll
        for (int j = 0; j < Pack<T>::kSize; ++j)
            grad.v[j] = from_f32<T>(to_f32(grad.v[j]) * gelu_tanh_derivative(to_f32(v.v[j])));
        d[p] = grad;
    }
}

}  // namespace

template <class T>
void launch_gelu_tanh(T* out, const T* in, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const std::int64_t packs = packs_of<T>(n, {out, in}), first = 8 * packs;
    if constexpr (!std::is_same_v<T, float>) {
        if (packs > 0) gelu_tanh_packed_kernel<T><<<elementwise_blocks(packs), kBlock, 0, stream>>>(out, in, packs);
        CUDA_CHECK_LAUNCH();
    }
    if (first == n) return;
    gelu_tanh_kernel<T><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(out + first, in + first, n - first);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream) {
    launch_gelu_tanh<T>(x, x, n, stream);
}

template <class T>
void launch_gelu_tanh_backward(T* dx, const T* x, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const std::int64_t packs = packs_of<T>(n, {dx, x}), first = 8 * packs;
    if constexpr (!std::is_same_v<T, float>) {
        if (packs > 0) gelu_tanh_backward_packed_kernel<T><<<elementwise_blocks(packs), kBlock, 0, stream>>>(dx, x, packs);
        CUDA_CHECK_LAUNCH();
    }
    if (first == n) return;
    gelu_tanh_backward_kernel<T><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(dx + first, x + first, n - first);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_tanh_with_branch(T* x, std::uint8_t* left_bits, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const std::int64_t packs = packs_of<T>(n, {x}), first = 8 * packs;
    if constexpr (!std::is_same_v<T, float>) {
        if (packs > 0) gelu_tanh_with_branch_packed_kernel<T><<<elementwise_blocks(packs), kBlock, 0, stream>>>(x, left_bits, packs);
        CUDA_CHECK_LAUNCH();
    }
    // The rest starts at a byte of bits: its bits are the kernel's from bit 0.
    if (first == n) return;
    gelu_tanh_with_branch_kernel<T><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(x + first, left_bits + packs,
                                                                                          n - first);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_derivative_table(float* table, cudaStream_t stream) {
    static_assert(!std::is_same_v<T, float>, "fp32 has no table: its backward inverts each y");
    constexpr auto blocks = static_cast<unsigned>((gelu_output::kDerivativeTableSize + kBlock - 1) / kBlock);
    gelu_derivative_table_kernel<T><<<blocks, kBlock, 0, stream>>>(table);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_tanh_backward_from_output(T* dx, const T* y, const std::uint8_t* left_bits, const float* table,
                                           std::int64_t n, cudaStream_t stream) {
    if ((table == nullptr) != std::is_same_v<T, float>)
        throw std::invalid_argument("launch_gelu_tanh_backward_from_output: a 16-bit dtype needs its derivative table, fp32 none");
    if (n == 0) return;
    const std::int64_t packs = packs_of<T>(n, {dx, y}), first = 8 * packs;
    if constexpr (!std::is_same_v<T, float>) {
        if (packs > 0)
            gelu_tanh_backward_from_output_packed_kernel<T>
                <<<elementwise_blocks(packs), kBlock, 0, stream>>>(dx, y, left_bits, table, packs);
        CUDA_CHECK_LAUNCH();
    }
    if (first == n) return;
    gelu_tanh_backward_from_output_kernel<T><<<elementwise_blocks(n - first), kBlock, 0, stream>>>(
        dx + first, y + first, left_bits + packs, table, n - first);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T)                                                                  \
    template void launch_gelu_tanh<T>(T*, std::int64_t, cudaStream_t);                           \
    template void launch_gelu_tanh<T>(T*, const T*, std::int64_t, cudaStream_t);                  \
    template void launch_gelu_tanh_backward<T>(T*, const T*, std::int64_t, cudaStream_t);         \
    template void launch_gelu_tanh_with_branch<T>(T*, std::uint8_t*, std::int64_t, cudaStream_t); \
    template void launch_gelu_tanh_backward_from_output<T>(T*, const T*, const std::uint8_t*, const float*,  \
                                                           std::int64_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

template void launch_gelu_derivative_table<__half>(float*, cudaStream_t);
template void launch_gelu_derivative_table<__nv_bfloat16>(float*, cudaStream_t);

}  // namespace sweetspot::gpu
