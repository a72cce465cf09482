#include "kernels/model_config.hpp"

#include <cmath>

namespace sweetspot {

std::int64_t ModelConfig::n_params() const {
    const std::int64_t c = n_embd;
    const std::int64_t v = vocab_size;
    const std::int64_t p = max_positions;
    const std::int64_t per_block = 2 * c                // ln_1
                                   + 3 * c * c + 3 * c  // attn.c_attn
                                   + c * c + c          // attn.c_proj
                                   + 2 * c              // ln_2
                                   + 4 * c * c + 4 * c  // mlp.c_fc
                                   + 4 * c * c + c;     // mlp.c_proj
    return v * c + p * c + n_layer * per_block + 2 * c + v * c;
}

std::string ModelConfig::validate() const {
    const std::string model = "Model '" + name + "'";
    const auto must_be_positive = [&](const char* field, int value) {
        return model + " has " + field + " = " + std::to_string(value) + "; it must be positive.";
    };
    if (n_layer <= 0) return must_be_positive("n_layer", n_layer);
    if (n_embd <= 0) return must_be_positive("n_embd", n_embd);
    if (n_head <= 0) return must_be_positive("n_head", n_head);
    if (vocab_size <= 0) return must_be_positive("vocab_size", vocab_size);
    if (max_positions <= 0) return must_be_positive("max_positions", max_positions);
    if (n_embd % n_head != 0) {
        return model + " has n_embd = " + std::to_string(n_embd) +
               ", which is not divisible by n_head = " + std::to_string(n_head) + ".";
    }
    if (!(std::isfinite(ln_eps) && ln_eps > 0.0f)) {
        return model + " has ln_eps = " + std::to_string(ln_eps) + "; it must be a positive finite number.";
    }
    return {};
}

const std::vector<ModelConfig>& builtin_models() {
    // name, n_layer, n_embd, n_head, vocab_size, max_positions, ln_eps
    static const std::vector<ModelConfig> models = {
        {"gpt2_small", 12, 768, 12, 50257, 1024, 1e-5f},
        {"gpt2_1.5b", 48, 1600, 25, 50257, 1024, 1e-5f},
        {"gpt3_6.7b", 32, 4096, 32, 50257, 2048, 1e-5f},
        {"gpt3_13b", 40, 5120, 40, 50257, 2048, 1e-5f},
        // The hidden size cuda-uvm-gpt2 actually ran as "13B" (head dimension 130).
        {"gpt3_13b_seed", 40, 5200, 40, 50257, 2048, 1e-5f},
        {"tiny", 2, 64, 4, 512, 128, 1e-5f},
        // Head dimension 26: catches kernels that assume a power of two.
        {"tiny_odd", 3, 78, 3, 300, 64, 1e-5f},
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
