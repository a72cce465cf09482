#pragma once
// A training step on the host in fp32: forward, fused classifier and loss, backward
// (cpu_gradients), global gradient-norm clipping and AdamW (cpu::adamw), over weights this object
// owns, each step starting from the state the previous one left.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct TrainSettings {
    float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    float weight_decay = 0.0f;  // on the matrices only (weight_layout.hpp's decays_weights)
    float max_grad_norm = 1.0f;
};

class CpuTrainStep {
public:
    // `weights`: one fp32 vector per unit of `layout` (WeightLayout offsets).
    CpuTrainStep(const ModelConfig& model, const WeightLayout& layout, std::vector<std::vector<float>> weights,
                 const TrainSettings& settings);

    struct Result {
        double loss;       // of the weights before the update
        double grad_norm;  // before clipping
    };
    // tokens and targets: [batch, seq] ids < vocab.
    Result step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch, int seq,
                const Dropout& dropout = {});

    const std::vector<std::vector<float>>& weights() const { return weights_; }
    int steps() const { return steps_; }

private:
    ModelConfig model_;
    WeightLayout layout_;
    TrainSettings settings_;
    std::vector<std::vector<float>> weights_, m_, v_;
    int steps_ = 0;
};

}  // namespace sweetspot
