#pragma once
// LLaMA's share of the GPU training step, the family's entry for make_gpu_train
// (gpu_family_train.cu).
#include <memory>

#include "kernels/compute/gpu_train_context.hpp"

namespace sweetspot::llama {

std::unique_ptr<GpuTrainContext> make_gpu_train(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                const BatchShape& shape, cudaStream_t stream,
                                                const GpuTrainOptions& options);

}  // namespace sweetspot::llama
