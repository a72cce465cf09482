#pragma once
// LLaMA's forward on the GPU, the family's entry for make_gpu_forward (gpu_family_forward.cu).
#include <memory>

#include "kernels/compute/gpu_forward_context.hpp"

namespace sweetspot::llama {

std::unique_ptr<GpuForwardContext> make_gpu_forward(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                    const BatchShape& shape, cudaStream_t stream,
                                                    const GpuForwardOptions& options);

}  // namespace sweetspot::llama
