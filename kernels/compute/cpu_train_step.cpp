#include "kernels/compute/cpu_train_step.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/compute/cpu_ops.hpp"

namespace sweetspot {

CpuTrainStep::CpuTrainStep(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape,
                           const Dropout& dropout, const TrainSettings& settings)
    : layout_(layout), settings_(settings), backprop_(model, layout, shape, dropout) {}

double CpuTrainStep::forward(LayerSource& weights, std::span<const std::int32_t> tokens,
                             std::span<const std::int32_t> targets) {
    return backprop_.forward(weights, tokens, targets);
}

double CpuTrainStep::backward(LayerSource& weights) {
    grad_norm_ = std::sqrt(backprop_.backward(weights));
    return grad_norm_;
}

void CpuTrainStep::update(LayerSource& weights) {
    // clip_grad_norm_'s scale, applied to the gradient inside the AdamW pass.
    const auto scale = static_cast<float>(settings_.clip_scale(grad_norm_));
    ++steps_;
    for (int u = 0; u < layout_.unit_count(); ++u) {
        const UnitUpdate unit = weights.acquire_update(u);
        auto* w = static_cast<float*>(unit.weights);
        const auto* g = static_cast<const float*>(unit.gradient);
        for (const TensorSpec& t : layout_.units[static_cast<std::size_t>(u)].tensors) {
            cpu::adamw(w + t.offset, g + t.offset, unit.m + t.offset, unit.v + t.offset, t.numel,
                       {settings_.lr, settings_.beta1, settings_.beta2, settings_.eps,
                        decays_weights(t) ? settings_.weight_decay : 0.0f, steps_, scale});
        }
        weights.release_update(u);
    }
}

CpuTrainStep::Result CpuTrainStep::step(LayerSource& weights, std::span<const std::int32_t> tokens,
                                        std::span<const std::int32_t> targets) {
    const double loss = forward(weights, tokens, targets);
    const double norm = backward(weights);
    update(weights);
    return {loss, norm};
}

}  // namespace sweetspot
