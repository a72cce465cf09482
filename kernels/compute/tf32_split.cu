#include "kernels/compute/tf32_split.cuh"

#include <algorithm>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

__device__ __forceinline__ float round_to_tf32(float x) {
    std::uint32_t bits;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
    return __uint_as_float(bits);
}

// One row of the batch per blockIdx.y step: the source rows are strided, the outputs compact, so a
// row is the unit both sides agree on. kVec floats per access (4 where cols, ld and the pointers
// allow 16-byte accesses).
template <int kVec>
__global__ void __launch_bounds__(kBlock) tf32_split_kernel(float* big, float* small, const float* x,
                                                            std::int64_t all_rows, std::int64_t rows,
                                                            std::int64_t cols, std::int64_t ld, std::int64_t stride) {
    using E = Elements<float, kVec>;
    const std::int64_t packs = cols / kVec;
    for (std::int64_t r = blockIdx.y; r < all_rows; r += gridDim.y) {
        const auto* src = reinterpret_cast<const E*>(x + (r / rows) * stride + (r % rows) * ld);
        auto* hi = reinterpret_cast<E*>(big + r * cols);
        auto* lo = reinterpret_cast<E*>(small + r * cols);
        for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(kBlock) + threadIdx.x; p < packs;
             p += static_cast<std::int64_t>(gridDim.x) * kBlock) {
            const E v = src[p];
            E b, s;
#pragma unroll
            for (int i = 0; i < kVec; ++i) {
                b.v[i] = round_to_tf32(v.v[i]);
                s.v[i] = round_to_tf32(v.v[i] - b.v[i]);
            }
            hi[p] = b;
            lo[p] = s;
        }
    }
}

}  // namespace

void launch_tf32_split(float* big, float* small, const float* x, std::int64_t batches, std::int64_t rows,
                       std::int64_t cols, std::int64_t ld, std::int64_t stride, cudaStream_t stream) {
    const std::int64_t all_rows = batches * rows;
    if (all_rows == 0 || cols == 0) return;
    const bool vector = cols % 4 == 0 && ld % 4 == 0 && stride % 4 == 0 && all_on_16_bytes({big, small, x});
    const std::int64_t packs = vector ? cols / 4 : cols;
    const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((packs + kBlock - 1) / kBlock, 64)),
                    static_cast<unsigned>(std::min<std::int64_t>(all_rows, 65535)));
    if (vector) {
        tf32_split_kernel<4><<<grid, kBlock, 0, stream>>>(big, small, x, all_rows, rows, cols, ld, stride);
    } else {
        tf32_split_kernel<1><<<grid, kBlock, 0, stream>>>(big, small, x, all_rows, rows, cols, ld, stride);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace sweetspot::gpu
