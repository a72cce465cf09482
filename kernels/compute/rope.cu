#include "kernels/compute/rope.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

// One block per row. Every q and k head of a row turns by the same head_dim/2 angles
// positions[r] · inv_freq[i], so the block computes their cos and sin once, into shared memory
// (head_dim floats), and all the row's heads read them there: head_dim/2 sincosf a row instead of
// one a pair, and no [positions, head_dim] cos/sin tables in memory as transformers builds them.
// Thread t then takes pair groups t, t + blockDim.x, ... of the row's (n_head + n_kv_head) ·
// head_dim/2 pairs, kWidth consecutive pairs a group: x[i .. i + kWidth) and x[i + half ..) as one
// 16-byte access each where head_dim/2 is a multiple of the pack and qkv is aligned (the launcher
// checks), single elements otherwise. sin_sign −1 turns by −angle (the backward).
template <class T, int kWidth>
__global__ void rope_kernel(T* qkv, const std::int32_t* positions, const float* inv_freq, int rotated_heads,
                            int row_width, int head_dim, float sin_sign) {
    using E = Elements<T, kWidth>;
    extern __shared__ float turns[];  // cos [half], then sin [half]
    const int half = head_dim / 2, t = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
    const int row = static_cast<int>(blockIdx.x);
    const auto pos = static_cast<float>(positions[row]);
    for (int i = t; i < half; i += step) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        turns[i] = c;
        turns[half + i] = sin_sign * s;
    }
    __syncthreads();
    T* x = qkv + static_cast<std::int64_t>(row) * row_width;
    const int groups = half / kWidth;  // per head
    for (int item = t; item < rotated_heads * groups; item += step) {
        const int head = item / groups, i = item % groups * kWidth;
        E* lo = reinterpret_cast<E*>(x + static_cast<std::int64_t>(head) * head_dim + i);
        E* hi = reinterpret_cast<E*>(x + static_cast<std::int64_t>(head) * head_dim + half + i);
        E a = *lo, b = *hi;
#pragma unroll
        for (int j = 0; j < kWidth; ++j) {
            const float xa = to_f32(a.v[j]), xb = to_f32(b.v[j]), c = turns[i + j], s = turns[half + i + j];
            a.v[j] = from_f32<T>(xa * c - xb * s);
            b.v[j] = from_f32<T>(xb * c + xa * s);
        }
        *lo = a;
        *hi = b;
    }
}

template <class T>
void launch_turn(T* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head, int n_kv_head,
                 int head_dim, float sin_sign, cudaStream_t stream) {
    if (rows == 0) return;
    constexpr int k = Pack<T>::kSize;
    const int half = head_dim / 2, rotated = n_head + n_kv_head, row_width = (n_head + 2 * n_kv_head) * head_dim;
    const bool packed = half % k == 0 && all_on_16_bytes({qkv});
    const int groups = rotated * (packed ? half / k : half);
    // Enough warps for one group a thread (a few hundred at LLaMA's sizes), at most kBlock.
    const int threads = std::min(kBlock, (groups + kWarp - 1) / kWarp * kWarp);
    const std::size_t shared = static_cast<std::size_t>(head_dim) * sizeof(float);
    if (packed) {
        rope_kernel<T, k><<<rows, threads, shared, stream>>>(qkv, positions, inv_freq, rotated, row_width, head_dim,
                                                             sin_sign);
    } else {
        rope_kernel<T, 1><<<rows, threads, shared, stream>>>(qkv, positions, inv_freq, rotated, row_width, head_dim,
                                                             sin_sign);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_rope(T* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head, int n_kv_head,
                 int head_dim, cudaStream_t stream) {
    launch_turn(qkv, positions, inv_freq, rows, n_head, n_kv_head, head_dim, 1.0f, stream);
}

template <class T>
void launch_rope_backward(T* dqkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head,
                          int n_kv_head, int head_dim, cudaStream_t stream) {
    launch_turn(dqkv, positions, inv_freq, rows, n_head, n_kv_head, head_dim, -1.0f, stream);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                          \
    template void launch_rope<T>(T*, const std::int32_t*, const float*, int, int, int, int, cudaStream_t); \
    template void launch_rope_backward<T>(T*, const std::int32_t*, const float*, int, int, int, int, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
