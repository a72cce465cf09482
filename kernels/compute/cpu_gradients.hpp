#pragma once
// The fp32 host compute of a training step's forward and backward: the loss of a batch (mean
// cross-entropy of the targets, the classifier fused with it: cpu::cross_entropy) and every
// parameter's gradient, from a forward that keeps each block's activations (cpu_block.hpp) and the
// backward ops of cpu_ops.hpp. Weights come from a LayerSource in the order of a training
// UnitSchedule: units in model order for the forward, in reverse for the backward, each unit's
// gradient written to its gradient buffer while it is held. The float64 reference_gradients is its
// yardstick.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/compute/cpu_block.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

class CpuBackprop {
public:
    // Allocates what a step keeps and its scratch for batch × seq tokens. With `dropout` active
    // the masks are those of every other path (dropout.hpp).
    CpuBackprop(const ModelConfig& model, const WeightLayout& layout, int batch, int seq, const Dropout& dropout = {});

    // The forward over `tokens`, keeping what the backward reads; returns the mean cross-entropy
    // of `targets`. tokens and targets: [batch, seq] ids < vocab (checked).
    double forward(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);
    // The backward of the last forward: writes every unit's gradient (weights.gradient) and
    // returns the sum of their squares (in double), the square of the global gradient norm.
    double backward(LayerSource& weights);

    // Bytes of the buffers this object holds (what a step allocates besides the weights' state).
    std::int64_t buffer_bytes() const;
    static std::int64_t buffer_bytes_for(const ModelConfig& model, int batch, int seq);

private:
    // One block's kept activations: its input and what its backward reads.
    struct KeptBlock {
        std::vector<float> x_in, ln1, qkv, att, x_mid, ln2, fc_pre, fc;
        KeptBlock(std::size_t bt, std::size_t c);
        cpu::BlockActivations activations(float* y, float* scores);
    };
    cpu::BlockShape block_shape(int layer) const;

    ModelConfig model_;
    WeightLayout layout_;
    int batch_, seq_;
    Dropout dropout_;  // for_shape(seq, positions)
    std::vector<std::int32_t> tokens_;
    std::vector<KeptBlock> kept_;
    std::vector<float> x_, y_, scores_, xf_, logits_, dxf_, dx_;
    cpu::BlockGradScratch scratch_;
};

// The loss and every parameter's gradient, laid out as the weights, from unit pointers: the
// step's numbers without a backend (the checks, the tests).
struct CpuGradients {
    double loss = 0;                        // mean over the batch × seq targets
    std::vector<std::vector<float>> units;  // dloss/dweight per unit
};
CpuGradients cpu_gradients(const ModelConfig& model, const WeightLayout& layout, std::span<const float* const> units,
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                           int seq, const Dropout& dropout = {});

}  // namespace sweetspot
