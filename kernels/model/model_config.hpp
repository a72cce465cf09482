#pragma once
// Decoder-transformer shapes: the built-in models (GPT-2 small to GPT-3 13B, and tiny test models)
// and user-declared ones.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/named_enum.hpp"

namespace sweetspot {

// The family a model belongs to: which tensors it has, how its checkpoints name them and which
// block computes it (model_family.hpp). Matrix files name it in a [[models]] entry's `family`.
enum class ModelFamily { gpt2, llama };
template <>
struct EnumNames<ModelFamily> {
    static constexpr std::array<EnumName<ModelFamily>, 2> list = {{{ModelFamily::gpt2, "gpt2"}, {ModelFamily::llama, "llama"}}};
};

// Llama 3's frequency scaling of rotary position embeddings (transformers' rope_type "llama3"):
// long wavelengths are slowed by `factor`, short ones kept, those between blended
// (rope_frequencies.hpp computes it). Off unless `enabled`.
struct RopeScaling {
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int original_max_positions = 8192;
    bool enabled = false;
    bool operator==(const RopeScaling&) const = default;

    // "off", or "factor,low_freq_factor,high_freq_factor,original_max_positions" ("32,1,4,8192"):
    // a line of a cell's text.
    std::string text() const;
    // text()'s inverse; nothing for text that is neither "off" nor four positive numbers, the last
    // an integer of at most ModelLimits::positions.
    static std::optional<RopeScaling> parse(std::string_view text);
};

// The largest shapes accepted from any source (matrix files, checkpoints' config.json, cell
// text). Far beyond any real model (GPT-3 175B: 96 layers, hidden 12288, 96 heads, 2048
// positions), yet small enough that every derived size stays far from 64-bit overflow: all
// weights of the largest shape take about 2^54 bytes in fp32.
struct ModelLimits {
    static constexpr int layers = 1 << 14;     // 16384
    static constexpr int hidden = 1 << 17;     // 131072, also the most heads (heads divide hidden)
    static constexpr int vocab = 1 << 24;      // 16777216
    static constexpr int positions = 1 << 17;  // 131072
    // Smaller epsilons vanish beside any variance a float activation has; larger ones are no
    // longer a normalisation.
    static constexpr double min_ln_eps = 1e-12;
    static constexpr double max_ln_eps = 1.0;
};

// Its fields but the name are described in kModelFields (model_fields.hpp): their cell-text lines,
// [[models]] keys, bounds and columns.
struct ModelConfig {
    std::string name;
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int vocab_size = 50257;
    int max_positions = 1024;
    float ln_eps = 1e-5f;  // the LayerNorms' epsilon, or the RMSNorms' (LLaMA)
    ModelFamily family = ModelFamily::gpt2;
    // Grouped-query attention's key and value heads (0: n_head, multi-head attention); they
    // divide n_head.
    int n_kv_head = 0;
    int ffn_hidden = 0;  // the MLP's width (0: 4 · n_embd, GPT-2's)
    // Rotary position embeddings' base and scaling (families with rotary positions).
    double rope_theta = 10000.0;
    RopeScaling rope_scaling = {};

    int head_dim() const { return n_embd / n_head; }
    int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
    int ffn_width() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
    // Empty when the shape is usable; otherwise what is wrong, as a sentence.
    std::string validate() const;
};

// gpt2_small, gpt2_1.5b, gpt3_6.7b, gpt3_13b, gpt3_13b_seed (hidden 5200, as cuda-uvm-gpt2 ran it),
// the tiny test models tiny and tiny_odd (a head dimension that is not a power of two); llama_1b,
// llama2_7b, llama3_8b, llama2_13b and the tiny tiny_llama and tiny_llama_odd.
const std::vector<ModelConfig>& builtin_models();
std::optional<ModelConfig> find_builtin_model(std::string_view name);

}  // namespace sweetspot
