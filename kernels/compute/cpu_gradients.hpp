#pragma once
// The fp32 host compute of a training step's numbers: the loss of a batch (mean cross-entropy of
// the targets, the classifier fused with it: cpu::cross_entropy) and every parameter's gradient,
// from a forward that keeps each block's activations (cpu_block.hpp) and the backward ops of
// cpu_ops.hpp. The float64 reference_gradients is its yardstick.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct CpuGradients {
    double loss = 0;                         // mean over the batch × seq targets
    std::vector<std::vector<float>> units;   // dloss/dweight per unit, laid out as the weights
};

// units[i] points at unit i's fp32 weights; tokens and targets are [batch, seq] ids < vocab
// (checked). With `dropout` active the masks are those of every other path (dropout.hpp).
CpuGradients cpu_gradients(const ModelConfig& model, const WeightLayout& layout, std::span<const float* const> units,
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                           int seq, const Dropout& dropout = {});

}  // namespace sweetspot
