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

template <class T>
void fill_unit(const ModelConfig& model, const UnitLayout& u, int unit, std::uint64_t seed, T* dst,
               cudaStream_t stream) {
    // Padding between and after the tensors is zero, as on the host; writing the tensors over
    // the zeros costs one pass of memset at memory bandwidth.
    CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(u.numel) * sizeof(T), stream));
    for (std::size_t t = 0; t < u.tensors.size(); ++t) {
        const TensorSpec& spec = u.tensors[t];
        if (spec.numel == 0) continue;
        const int tensor = static_cast<int>(t);
        const auto blocks = static_cast<int>(std::min((spec.numel + kBlock - 1) / kBlock, kMaxBlocks));
        synthetic_tensor_kernel<T><<<blocks, kBlock, 0, stream>>>(dst + spec.offset, spec.numel,
                                                                 synthetic::tensor_key(seed, unit, tensor),
                                                                 synthetic::tensor_init(model, u.kind, tensor));
        CUDA_CHECK_LAUNCH();
    }
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
