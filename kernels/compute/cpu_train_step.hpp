#pragma once
// A training step on the host in fp32, in the three phases every training step has: the forward
// with the fused classifier and loss, the backward (CpuBackprop), and the optimizer (global
// gradient-norm clipping, then AdamW: cpu::adamw, one fused pass per tensor). The weights, their
// gradients and AdamW's moments live in the LayerSource (a backend placed for a training
// UnitSchedule), so each step starts from the state the previous one left.
#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct TrainSettings {
    float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    float weight_decay = 0.0f;  // on the matrices only (weight_layout.hpp's decays_weights)
    float max_grad_norm = 1.0f;  // 0: no clipping

    // clip_grad_norm_'s factor on every gradient when their global norm is `norm`: max_grad_norm /
    // (norm + 1e-6) where that is below 1, else 1; 1 without clipping.
    double clip_scale(double norm) const {
        return max_grad_norm > 0 ? std::min(1.0, static_cast<double>(max_grad_norm) / (norm + 1e-6)) : 1.0;
    }
};

class CpuTrainStep {
public:
    // Over a batch of `shape` (CpuBackprop's: the loss over its real tokens).
    CpuTrainStep(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape, const Dropout& dropout,
                 const TrainSettings& settings);

    // The phases, in order; each reads what the one before left.
    double forward(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);
    // Returns the global gradient norm, before clipping.
    double backward(LayerSource& weights);
    void update(LayerSource& weights);

    struct Result {
        double loss;       // of the weights before the update
        double grad_norm;  // before clipping
    };
    // The three phases.
    Result step(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);

    int steps() const { return steps_; }  // updates made
    std::int64_t buffer_bytes() const { return backprop_.buffer_bytes(); }

private:
    WeightLayout layout_;
    TrainSettings settings_;
    CpuBackprop backprop_;
    double grad_norm_ = 0;
    int steps_ = 0;
};

}  // namespace sweetspot
