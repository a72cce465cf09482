#include "kernels/compute/dropout.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// Each element times its dropout factor at `site` (0 or 1 / (1 − p)): the baseline's dropout, a
// pass of its own after the op it follows. x is [rows, width]: activations (kProbabilities false,
// row = b·seq + t) or attention probabilities (true, row = (b·H + h)·seq + t, width = seq).
template <class T, bool kProbabilities>
__global__ void dropout_kernel(T* x, std::int64_t rows, int width, Dropout d, std::uint32_t site) {
    const std::int64_t n = rows * width;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const auto row = static_cast<std::uint64_t>(idx / width), col = static_cast<std::uint64_t>(idx % width);
        const float f = kProbabilities ? d.probability_factor(site, row, col)
                                       : d.row_factor(site, row, static_cast<std::uint64_t>(width), col);
        x[idx] = from_f32<T>(to_f32(x[idx]) * f);
    }
}

}  // namespace

template <class T>
void launch_dropout(T* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site, cudaStream_t stream) {
    if (rows * width == 0 || !d.active()) return;
    dropout_kernel<T, false><<<elementwise_blocks(rows * width), kBlock, 0, stream>>>(x, rows, width, d, site);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_dropout_probabilities(T* p, std::int64_t rows, const Dropout& d, std::uint32_t site, cudaStream_t stream) {
    if (rows == 0 || !d.active()) return;
    dropout_kernel<T, true><<<elementwise_blocks(rows * d.seq), kBlock, 0, stream>>>(p, rows, d.seq, d, site);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_dropout<T>(T*, std::int64_t, int, const Dropout&, std::uint32_t, cudaStream_t); \
    template void launch_dropout_probabilities<T>(T*, std::int64_t, const Dropout&, std::uint32_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
