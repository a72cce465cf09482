#include "kernels/compute/cpu_train_step.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/cpu_ops.hpp"

namespace sweetspot {

CpuTrainStep::CpuTrainStep(const ModelConfig& model, const WeightLayout& layout, std::vector<std::vector<float>> weights,
                           const TrainSettings& settings)
    : model_(model), layout_(layout), settings_(settings), weights_(std::move(weights)) {
    require_layout_for(model, layout, "CpuTrainStep");
    if (weights_.size() != layout_.units.size())
        throw std::invalid_argument("CpuTrainStep: one weight vector per unit is needed.");
    for (std::size_t u = 0; u < weights_.size(); ++u) {
        if (weights_[u].size() != static_cast<std::size_t>(layout_.units[u].numel))
            throw std::invalid_argument("CpuTrainStep: unit " + std::to_string(u) + " has the wrong size.");
        m_.emplace_back(weights_[u].size(), 0.0f);
        v_.emplace_back(weights_[u].size(), 0.0f);
    }
}

CpuTrainStep::Result CpuTrainStep::step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                        int batch, int seq, const Dropout& dropout) {
    std::vector<const float*> pointers;
    for (const auto& unit : weights_) pointers.push_back(unit.data());
    const CpuGradients grads = cpu_gradients(model_, layout_, pointers, tokens, targets, batch, seq, dropout);
    double squares = 0.0;
    for (const auto& unit : grads.units) squares += cpu::squared_norm(unit.data(), static_cast<std::int64_t>(unit.size()));
    const double norm = std::sqrt(squares);
    const auto scale = static_cast<float>(std::min(1.0, settings_.max_grad_norm / (norm + 1e-6)));
    ++steps_;
    for (std::size_t u = 0; u < layout_.units.size(); ++u) {
        for (const TensorSpec& t : layout_.units[u].tensors) {
            const auto off = static_cast<std::size_t>(t.offset);
            cpu::adamw(weights_[u].data() + off, grads.units[u].data() + off, m_[u].data() + off, v_[u].data() + off,
                       t.numel,
                       {settings_.lr, settings_.beta1, settings_.beta2, settings_.eps,
                        decays_weights(t) ? settings_.weight_decay : 0.0f, steps_, scale});
        }
    }
    return {grads.loss, norm};
}

}  // namespace sweetspot
