#include "kernels/compute/rmsnorm.cuh"

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

// One warp per row, as LayerNorm's forward: a row of a few thousand needs no shared memory and no
// block barrier, only shuffles. RMSNorm subtracts no mean, so Σ x² is one pass without
// cancellation; the second pass re-reads the row (L1 hits) to write it. kWidth elements a lane at
// a time: 16-byte packs where every row is aligned (the launcher checks), single elements
// otherwise.
template <class T, int kWidth>
__global__ void rmsnorm_kernel(T* out, const T* in, const T* w, int rows, int c, float eps) {
    using E = Elements<T, kWidth>;
    const int warps_per_block = static_cast<int>(blockDim.x) / kWarp;
    const int row = static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x) / kWarp;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    const int groups = c / kWidth;
    const E* x = reinterpret_cast<const E*>(in + static_cast<std::int64_t>(row) * c);
    const E* wg = reinterpret_cast<const E*>(w);
    E* y = reinterpret_cast<E*>(out + static_cast<std::int64_t>(row) * c);

    float sq = 0.0f;
    for (int g = lane; g < groups; g += kWarp) {
        const E v = x[g];
#pragma unroll
        for (int j = 0; j < kWidth; ++j) sq += to_f32(v.v[j]) * to_f32(v.v[j]);
    }
    const float rrms = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(c) + eps);

    for (int g = lane; g < groups; g += kWarp) {
        const E v = x[g], wk = wg[g];
        E o;
#pragma unroll
        for (int j = 0; j < kWidth; ++j) o.v[j] = from_f32<T>(to_f32(v.v[j]) * rrms * to_f32(wk.v[j]));
        y[g] = o;
    }
}

// The backward, one block per row at a time (rows blockIdx.x, + gridDim.x, ...): thread t owns
// column groups t, t + blockDim.x, ... of every row, so its share of the block's dw accumulates
// in shared memory without atomics and in row order, and the block writes one partial row
// [gridDim.x, c] at the end. Per row, one pass gives Σ x² and Σ g·x (g = dy·w) together, both
// block-reduced; with rrms = 1 / sqrt(Σ x² / c + eps) and x̂ = x·rrms, mean(g·x̂) = rrms·Σ g·x / c,
// and a second pass (L1/L2 hits) adds dx += rrms·(g − x̂·mean(g·x̂)) and dy·x̂ into the sums.
// The sums are laid out [kWidth][groups] so that a warp's 32 threads touch 32 consecutive
// floats (no bank conflicts). Shared memory: c floats.
template <class T, int kWidth>
__global__ void rmsnorm_backward_kernel(T* dx, float* partials, const T* dout, const T* in, const T* w, int rows, int c,
                                        float eps) {
    using E = Elements<T, kWidth>;
    extern __shared__ float accumulated[];
    __shared__ float reduce[kWarp];
    const int t = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
    const int groups = c / kWidth;
    // Thread t only ever touches its own groups' sums: no barrier between zeroing and adding.
    for (int g = t; g < groups; g += step) {
#pragma unroll
        for (int j = 0; j < kWidth; ++j) accumulated[j * groups + g] = 0.0f;
    }
    const E* wg = reinterpret_cast<const E*>(w);
    for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
        const std::int64_t first = static_cast<std::int64_t>(row) * c;
        const E* x = reinterpret_cast<const E*>(in + first);
        const E* dy = reinterpret_cast<const E*>(dout + first);
        E* dxr = reinterpret_cast<E*>(dx + first);

        float sq = 0.0f, gx = 0.0f;
        for (int g = t; g < groups; g += step) {
            const E xv = x[g], dyv = dy[g], wk = wg[g];
#pragma unroll
            for (int j = 0; j < kWidth; ++j) {
                const float xf = to_f32(xv.v[j]);
                sq += xf * xf;
                gx += to_f32(dyv.v[j]) * to_f32(wk.v[j]) * xf;
            }
        }
        const float rrms = 1.0f / sqrtf(block_reduce<false>(sq, reduce) / static_cast<float>(c) + eps);
        const float mean_gx = rrms * block_reduce<false>(gx, reduce) / static_cast<float>(c);

        for (int g = t; g < groups; g += step) {
            const E xv = x[g], dyv = dy[g], wk = wg[g];
            E d = dxr[g];
#pragma unroll
            for (int j = 0; j < kWidth; ++j) {
                const float xhat = to_f32(xv.v[j]) * rrms, dyf = to_f32(dyv.v[j]);
                accumulated[j * groups + g] += dyf * xhat;
                d.v[j] = from_f32<T>(to_f32(d.v[j]) + rrms * (dyf * to_f32(wk.v[j]) - xhat * mean_gx));
            }
            dxr[g] = d;
        }
    }
    float* partial = partials + static_cast<std::int64_t>(blockIdx.x) * c;
    for (int g = t; g < groups; g += step) {
#pragma unroll
        for (int j = 0; j < kWidth; ++j) partial[g * kWidth + j] = accumulated[j * groups + g];
    }
}

template <class T, int kWidth>
void launch_backward(T* dx, float* partials, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                     int blocks, cudaStream_t stream) {
    const std::size_t shared = static_cast<std::size_t>(c) * sizeof(float);
    const auto kernel = rmsnorm_backward_kernel<T, kWidth>;
    // Above 48 KiB (c > 12288) a kernel must opt in to more dynamic shared memory.
    if (shared > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    }
    kernel<<<blocks, kBlock, shared, stream>>>(dx, partials, dout, in, w, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_rmsnorm(T* out, const T* in, const T* w, int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    if (c % Pack<T>::kSize == 0 && all_on_16_bytes({out, in, w})) {
        rmsnorm_kernel<T, Pack<T>::kSize><<<blocks, kBlock, 0, stream>>>(out, in, w, rows, c, eps);
    } else {
        rmsnorm_kernel<T, 1><<<blocks, kBlock, 0, stream>>>(out, in, w, rows, c, eps);
    }
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_rmsnorm_backward(T* dx, T* dw, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                             float* scratch, cudaStream_t stream) {
    if (rows == 0) return;
    // One partial row a block: at most rmsnorm_backward_scratch_floats(rows, c) floats.
    const int blocks = std::min(rows, kRmsNormBackwardBlocks);
    if (c % Pack<T>::kSize == 0 && all_on_16_bytes({dx, dout, in, w})) {
        launch_backward<T, Pack<T>::kSize>(dx, scratch, dout, in, w, rows, c, eps, blocks, stream);
    } else {
        launch_backward<T, 1>(dx, scratch, dout, in, w, rows, c, eps, blocks, stream);
    }
    launch_column_sum_once<float, T>(dw, scratch, blocks, c, c, stream);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                              \
    template void launch_rmsnorm<T>(T*, const T*, const T*, int, int, float, cudaStream_t);                   \
    template void launch_rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, int, int, float, float*, \
                                             cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
