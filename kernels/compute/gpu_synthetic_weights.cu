#include "kernels/compute/gpu_synthetic_weights.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/model/synthetic_value.hpp"

namespace sweetspot::gpu {

namespace {

constexpr int kBlock = 256;
// Then grid-stride: no grid limit for a 13B embedding. 2M threads are several waves of any GPU.
constexpr std::int64_t kMaxBlocks = 8192;

// The bits of one value, widened to 32: two 16-bit values share a 32-bit word of a vector store.
__device__ __forceinline__ std::uint32_t bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ std::uint32_t bits_of(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ std::uint32_t bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// dst[i] = value i of the tensor's stream, rounded to T as convert_from_f32 rounds (to nearest
// even): two 64-bit hashes per value, no memory read at all. Each thread makes 16 bytes of values
// and writes them with one vector store where dst allows it: in page-locked host memory the writes
// cross the link, and a warp's 512-byte stores move there at the link's rate where 2-byte ones
// (64 bytes a warp) do not. The tail, or a dst not on 16 bytes, is written value by value.
template <class T>
__global__ void synthetic_tensor_kernel(T* dst, std::int64_t numel, std::uint64_t key, synthetic::TensorInit init) {
    constexpr int kPerStore = 16 / sizeof(T);
    const bool vector = reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
    for (std::int64_t v = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; v * kPerStore < numel;
         v += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t first = v * kPerStore;
        const int count = static_cast<int>(numel - first < kPerStore ? numel - first : kPerStore);
        T values[kPerStore];
        for (int j = 0; j < count; ++j)
            values[j] = from_f32<T>(synthetic::value(key, static_cast<std::uint64_t>(first + j), init));
        if (vector && count == kPerStore) {
            std::uint32_t words[4];
            if constexpr (sizeof(T) == 4) {
                for (int w = 0; w < 4; ++w) words[w] = bits_of(values[w]);
            } else {
                for (int w = 0; w < 4; ++w) words[w] = bits_of(values[2 * w]) | (bits_of(values[2 * w + 1]) << 16);
            }
            *reinterpret_cast<uint4*>(dst + first) = make_uint4(words[0], words[1], words[2], words[3]);
        } else {
            for (int j = 0; j < count; ++j) dst[first + j] = values[j];
        }
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
        constexpr std::int64_t per_block = kBlock * (16 / sizeof(T));
        const auto blocks = static_cast<int>(std::min((spec.numel + per_block - 1) / per_block, kMaxBlocks));
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
