#include "kernels/compute/fault_in_kernel.hpp"

#include <algorithm>

#include "kernels/compute/cuda_check.hpp"

namespace sweetspot::gpu {
namespace {

constexpr int kBlock = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // a grid-stride loop covers the rest

// One float per thread per step of a grid-stride loop: neighbouring threads touch neighbouring
// words, so a warp's first touch of a page faults once for the warp.
__global__ void read_every_element_kernel(const float* data, std::int64_t n, float* sink) {
    float sum = 0.0f;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        sum += data[i];
    if (sum == -1.0f) *sink = sum;
}

}  // namespace

void launch_read_every_element(const float* data, std::int64_t n, float* sink, cudaStream_t stream) {
    if (n == 0) return;
    const auto blocks = static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxBlocks));
    read_every_element_kernel<<<blocks, kBlock, 0, stream>>>(data, n, sink);
    CUDA_CHECK_LAUNCH();
}

}  // namespace sweetspot::gpu
