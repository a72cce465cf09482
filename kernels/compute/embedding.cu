#include "kernels/compute/embedding.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// x[row, i] = wte[tokens[row], i] + wpe[row % seq, i], one thread per element (grid-stride).
// Rows are (batch, position) pairs, so consecutive threads read consecutive elements of one
// embedding row: coalesced gathers without a per-row launch.
template <class T>
__global__ void embedding_kernel(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, std::int64_t bt,
                                 int seq, int c) {
    const std::int64_t n = bt * c;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = idx / c;
        const std::int64_t i = idx % c;
        const std::int64_t tok = tokens[row];
        const std::int64_t pos = row % seq;
        x[idx] = from_f32<T>(to_f32(wte[tok * c + i]) + to_f32(wpe[pos * c + i]));
    }
}

}  // namespace

template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, int batch, int seq, int c,
                      cudaStream_t stream) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq;
    if (bt * c == 0) return;
    embedding_kernel<T><<<elementwise_blocks(bt * c), kBlock, 0, stream>>>(x, tokens, wte, wpe, bt, seq, c);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_embedding<T>(T*, const std::int32_t*, const T*, const T*, int, int, int, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
