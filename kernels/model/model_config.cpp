#include "kernels/model/model_config.hpp"

#include <cstdio>

namespace sweetspot {
namespace {

// A number as a message shows it: "1e-30", not std::to_string's "0.000000".
std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

std::string ModelConfig::validate() const {
    const std::string model = "Model '" + name + "'";
    const auto out_of_range = [&](std::string_view column, int value, int max) -> std::string {
        const std::string field(column);
        if (value <= 0) return model + " has " + field + " = " + std::to_string(value) + "; it must be positive.";
        if (value > max) {
            return model + " has " + field + " = " + std::to_string(value) + "; at most " + std::to_string(max) +
                   " is supported.";
        }
        return {};
    };
    for (const ShapeField& f : kShapeFields) {
        if (auto why = out_of_range(f.column, this->*f.field, f.max); !why.empty()) return why;
    }
    if (n_embd % n_head != 0) {
        return model + " has n_embd = " + std::to_string(n_embd) +
               ", which is not divisible by n_head = " + std::to_string(n_head) + ".";
    }
    constexpr auto min_eps = static_cast<float>(ModelLimits::min_ln_eps);
    constexpr auto max_eps = static_cast<float>(ModelLimits::max_ln_eps);
    if (!(ln_eps >= min_eps && ln_eps <= max_eps)) {
        return model + " has ln_eps = " + number_text(ln_eps) + "; it must be a number between " +
               number_text(ModelLimits::min_ln_eps) + " and " + number_text(ModelLimits::max_ln_eps) + ".";
    }
    return {};
}

const std::vector<ModelConfig>& builtin_models() {
    // name, n_layer, n_embd, n_head, vocab_size, max_positions, ln_eps, family
    static const std::vector<ModelConfig> models = {
        {"gpt2_small", 12, 768, 12, 50257, 1024, 1e-5f, ModelFamily::gpt2},
        {"gpt2_1.5b", 48, 1600, 25, 50257, 1024, 1e-5f, ModelFamily::gpt2},
        {"gpt3_6.7b", 32, 4096, 32, 50257, 2048, 1e-5f, ModelFamily::gpt2},
        {"gpt3_13b", 40, 5120, 40, 50257, 2048, 1e-5f, ModelFamily::gpt2},
        // The hidden size cuda-uvm-gpt2 actually ran as "13B" (head dimension 130).
        {"gpt3_13b_seed", 40, 5200, 40, 50257, 2048, 1e-5f, ModelFamily::gpt2},
        {"tiny", 2, 64, 4, 512, 128, 1e-5f, ModelFamily::gpt2},
        // Head dimension 26: catches kernels that assume a power of two.
        {"tiny_odd", 3, 78, 3, 300, 64, 1e-5f, ModelFamily::gpt2},
    };
    return models;
}

std::optional<ModelConfig> find_builtin_model(std::string_view name) {
    for (const auto& m : builtin_models()) {
        if (m.name == name) return m;
    }
    return std::nullopt;
}

}  // namespace sweetspot
