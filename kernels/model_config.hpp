#pragma once
// Decoder-transformer shapes: the built-in models of the product brief and user-declared ones.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

struct ModelConfig {
    std::string name;
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int vocab_size = 50257;
    int max_positions = 1024;
    float ln_eps = 1e-5f;

    int head_dim() const { return n_embd / n_head; }
    // Parameters of the untied GPT-2 layout (embeddings, blocks, final LN, lm_head).
    std::int64_t n_params() const;
    // Empty when the shape is usable; otherwise what is wrong, as a sentence.
    std::string validate() const;
};

// gpt2_small, gpt2_1.5b, gpt3_6.7b, gpt3_13b, gpt3_13b_seed (hidden 5200, as cuda-uvm-gpt2 ran it),
// and the tiny test models tiny and tiny_odd (a head dimension that is not a power of two).
const std::vector<ModelConfig>& builtin_models();
std::optional<ModelConfig> find_builtin_model(std::string_view name);

}  // namespace sweetspot
