#include "kernels/compute/gpu_synthetic_weights.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/model/synthetic_value.hpp"

namespace sweetspot::gpu {

namespace {

constexpr int kBlock = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // then grid-stride: no grid limit for a 13B embedding

// dst[i] = value i of the tensor's stream, rounded to T as convert_from_f32 rounds (to nearest
// even). One thread per element: two 64-bit hashes each, no memory read at all.
template <class T>
__global__ void synthetic_tensor_kernel(T* dst, std::int64_t numel, std::uint64_t key, synthetic::TensorInit init) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < numel;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        dst[i] = from_f32<T>(synthetic::value(key, static_cast<std::uint64_t>(i), init));
    }
}

// Zeroes dst[begin, end): the padding between and after the tensors, as on the host.
template <class T>
void zero(T* dst, std::int64_t begin, std::int64_t end, cudaStream_t stream) {
    if (end > begin)
        CUDA_CHECK(cudaMemsetAsync(dst + begin, 0, static_cast<std::size_t>(end - begin) * sizeof(T), stream));
}

// Only the tensors and the gaps between them are written, each once: `dst` may be page-locked
// host memory that the writes reach over the link.
template <class T>
void fill_unit(const ModelConfig& model, const UnitLayout& u, int unit, std::uint64_t seed, T* dst,
               cudaStream_t stream) {
    std::int64_t filled_to = 0;
    for (std::size_t t = 0; t < u.tensors.size(); ++t) {
        const TensorSpec& spec = u.tensors[t];
        zero(dst, filled_to, spec.offset, stream);
        filled_to = spec.offset + spec.numel;
        if (spec.numel == 0) continue;
        const int tensor = static_cast<int>(t);
        const auto blocks = static_cast<int>(std::min((spec.numel + kBlock - 1) / kBlock, kMaxBlocks));
        synthetic_tensor_kernel<T><<<blocks, kBlock, 0, stream>>>(dst + spec.offset, spec.numel,
                                                                 synthetic::tensor_key(seed, unit, tensor),
                                                                 synthetic::tensor_init(model, u.kind, tensor));
        CUDA_CHECK_LAUNCH();
    }
    zero(dst, filled_to, u.numel, stream);
}

}  // namespace

void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed, DType dtype,
                         void* dst, CUstream_st* stream) {
    const UnitLayout& u = synthetic::checked_unit(layout, unit, "gpu::fill_synthetic_unit");
    switch (dtype) {
        case DType::fp32: fill_unit(model, u, unit, seed, static_cast<float*>(dst), stream); break;
        case DType::fp16: fill_unit(model, u, unit, seed, static_cast<__half*>(dst), stream); break;
        case DType::bf16: fill_unit(model, u, unit, seed, static_cast<__nv_bfloat16*>(dst), stream); break;
    }
}

}  // namespace sweetspot::gpu
