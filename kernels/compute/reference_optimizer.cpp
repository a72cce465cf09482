#include "kernels/compute/reference_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sweetspot {

double reference_clip_scale(double norm, double max_norm) {
    return max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

double reference_clip_gradients(UnitValues& grads, double max_norm) {
    double squares = 0.0;
    for (const auto& unit : grads)
        for (const double g : unit) squares += g * g;
    const double norm = std::sqrt(squares);
    const double scale = reference_clip_scale(norm, max_norm);
    if (scale < 1.0)
        for (auto& unit : grads)
            for (double& g : unit) g *= scale;
    return norm;
}

void reference_adamw_step(const WeightLayout& layout, UnitValues& params, const UnitValues& grads, AdamWState& state,
                          const AdamWSettings& s) {
    if (params.size() != layout.units.size() || grads.size() != layout.units.size())
        throw std::invalid_argument("reference_adamw_step: parameters and gradients need one vector per unit.");
    if (state.m.empty()) {
        for (const auto& unit : params) {
            state.m.emplace_back(unit.size(), 0.0);
            state.v.emplace_back(unit.size(), 0.0);
        }
    }
    ++state.step;
    const double correct1 = 1.0 - std::pow(s.beta1, state.step), correct2 = 1.0 - std::pow(s.beta2, state.step);
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        for (const TensorSpec& tensor : layout.units[u].tensors) {
            const double decay = decays_weights(tensor) ? s.weight_decay : 0.0;
            for (std::int64_t e = 0; e < tensor.numel; ++e) {
                const auto i = static_cast<std::size_t>(tensor.offset + e);
                const double g = grads[u][i];
                double& m = state.m[u][i];
                double& v = state.v[u][i];
                m = s.beta1 * m + (1.0 - s.beta1) * g;
                v = s.beta2 * v + (1.0 - s.beta2) * g * g;
                // Decoupled decay first, on the weight before this step's update (torch.optim.AdamW).
                double& p = params[u][i];
                p -= s.lr * decay * p;
                p -= s.lr * (m / correct1) / (std::sqrt(v / correct2) + s.eps);
            }
        }
    }
}

}  // namespace sweetspot
