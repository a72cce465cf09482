#pragma once
// The fp32 host compute of a training step's forward and backward: the loss of a batch (mean
// cross-entropy of the targets of its real tokens, the classifier fused with it: cpu::cross_entropy)
// and every parameter's gradient, from the family's forward that keeps each block's activations and
// its backward (family_compute.hpp's CpuFamilyBackprop: GPT-2's gpt2/gpt2_cpu_block.hpp, LLaMA's
// llama/llama_cpu_block.hpp). Weights come from a LayerSource in the order of a training
// UnitSchedule: units in model order for the forward, in reverse for the backward, each unit's
// gradient written to its gradient buffer while it is held. The float64 reference_gradients is its
// yardstick.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/family_compute.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// Over a batch of any BatchShape, as CpuForward: each sequence attends within its own rows from
// position 0. The loss is the mean over the real tokens: a padding row's target is ignored and its
// logits' gradient is zero, so its token and target change neither the loss nor any gradient.
class CpuBackprop {
public:
    // Allocates what a step keeps and its scratch for `shape`. With `dropout` active the masks are
    // those of every other path (dropout.hpp); a family without dropout, or a shape that is not
    // rectangular, refuses it (std::invalid_argument: check_dropout).
    CpuBackprop(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape,
                const Dropout& dropout = {});
    ~CpuBackprop();
    CpuBackprop(CpuBackprop&&) noexcept;
    CpuBackprop& operator=(CpuBackprop&&) noexcept;

    // The forward over `tokens`, keeping what the backward reads; returns the mean cross-entropy
    // of the real rows' `targets`. tokens and targets: one id < vocab per row of the shape
    // (checked; a padding row's any valid id).
    double forward(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);
    // The backward of the last forward: writes every unit's gradient (weights.gradient) and
    // returns the sum of their squares (in double), the square of the global gradient norm.
    double backward(LayerSource& weights);

    // Bytes of the buffers this object holds (what a step allocates besides the weights' state).
    std::int64_t buffer_bytes() const;
    static std::int64_t buffer_bytes_for(const ModelConfig& model, const BatchShape& shape);

private:
    ModelConfig model_;
    WeightLayout layout_;
    BatchShape shape_;
    std::vector<std::int32_t> tokens_;
    std::vector<float> logits_;  // the logits, then their gradient
    std::unique_ptr<CpuFamilyBackprop> family_;
};

// The loss and every parameter's gradient, laid out as the weights, from unit pointers: the
// step's numbers without a backend (the checks, the tests).
struct CpuGradients {
    double loss = 0;                        // mean over the real tokens' targets
    std::vector<std::vector<float>> units;  // dloss/dweight per unit
};
CpuGradients cpu_gradients(const ModelConfig& model, const WeightLayout& layout, std::span<const float* const> units,
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           const BatchShape& shape, const Dropout& dropout = {});

}  // namespace sweetspot
