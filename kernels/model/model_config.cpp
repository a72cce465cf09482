#include "kernels/model/model_config.hpp"

#include <cstdio>
#include <utility>

#include "base/number_text.hpp"
#include "kernels/model/model_fields.hpp"

namespace sweetspot {
namespace {

// A number as a message shows it: "1e-30", not std::to_string's "0.000000".
std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// The number before the first `separator` of `text`, taken off it with the separator; nothing where
// there is no separator or no number before it.
std::optional<double> take_number(std::string_view& text, char separator) {
    const auto end = text.find(separator);
    if (end == std::string_view::npos) return std::nullopt;
    const auto v = parse_finite_number(text.substr(0, end));
    text.remove_prefix(end + 1);
    return v;
}

// Llama 3.2's rotary scaling (its config.json's rope_scaling).
constexpr RopeScaling kLlama32Scaling{
    .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192, .enabled = true};

}  // namespace

std::string RopeScaling::text() const {
    if (!enabled) return "off";
    return format_number(factor) + "," + format_number(low_freq_factor) + "," + format_number(high_freq_factor) + "," +
           std::to_string(original_max_positions);
}

std::optional<RopeScaling> RopeScaling::parse(std::string_view text) {
    if (text == "off") return RopeScaling{};
    RopeScaling r;
    r.enabled = true;
    for (double* field : {&r.factor, &r.low_freq_factor, &r.high_freq_factor}) {
        const auto v = take_number(text, ',');
        if (!v || *v <= 0) return std::nullopt;
        *field = *v;
    }
    const auto positions = parse_integer(text);
    if (!positions || *positions < 1 || *positions > ModelLimits::positions) return std::nullopt;
    r.original_max_positions = static_cast<int>(*positions);
    return r;
}

std::string ModelConfig::validate() const {
    const std::string model = "Model '" + name + "'";
    for (const ModelField& f : kModelFields) {
        const auto* count = std::get_if<IntegerField>(&f.kind);
        if (count == nullptr) continue;
        const int value = this->*count->field;
        const std::string field = std::string(f.axis.substr(f.axis.find('.') + 1)) + " = " + std::to_string(value);
        if (value < count->min) {
            return model + " has " + field + "; it must be " +
                   (count->min == 1 ? std::string("positive") : "at least " + std::to_string(count->min)) + ".";
        }
        if (value > count->max) return model + " has " + field + "; at most " + std::to_string(count->max) + " is supported.";
    }
    if (n_embd % n_head != 0) {
        return model + " has n_embd = " + std::to_string(n_embd) +
               ", which is not divisible by n_head = " + std::to_string(n_head) + ".";
    }
    if (n_head % kv_heads() != 0) {
        return model + " has n_kv_head = " + std::to_string(n_kv_head) + "; it must divide n_head = " +
               std::to_string(n_head) + " (0: as many as n_head).";
    }
    if (family == ModelFamily::llama) {
        if (head_dim() % 2 != 0)
            return model + " has head dimension " + std::to_string(head_dim()) + "; rotary embeddings need it even.";
        if (!(rope_theta > 0.0)) return model + " has rope_theta = " + number_text(rope_theta) + "; it must be positive.";
        const RopeScaling& s = rope_scaling;
        if (s.enabled && !(s.factor > 0.0 && s.original_max_positions > 0 && s.high_freq_factor > s.low_freq_factor))
            return model + " has a rope scaling with factor " + number_text(s.factor) + ", original_max_positions " +
                   std::to_string(s.original_max_positions) + ", low_freq_factor " + number_text(s.low_freq_factor) +
                   " and high_freq_factor " + number_text(s.high_freq_factor) +
                   "; the factor and the positions must be positive and high_freq_factor above low_freq_factor.";
    }
    // GPT-2's block has multi-head attention, an MLP 4 × n_embd wide and learned positions. LLaMA's
    // fields set on it would change its cells' keys but not what they compute, or (the kv heads,
    // the width) give the activations' layout, which reads them, another shape than its forward's.
    if (family == ModelFamily::gpt2) {
        const ModelConfig unset;
        const std::pair<std::string_view, bool> llama_fields[] = {{"n_kv_head", n_kv_head != unset.n_kv_head},
                                                                  {"ffn_hidden", ffn_hidden != unset.ffn_hidden},
                                                                  {"rope_theta", rope_theta != unset.rope_theta},
                                                                  {"rope_scaling", rope_scaling != unset.rope_scaling}};
        for (const auto& [field, set] : llama_fields)
            if (set)
                return model + " is of the gpt2 family and sets " + std::string(field) +
                       ", a field of LLaMA's: GPT-2's block has multi-head attention, an MLP 4 × n_embd wide and "
                       "learned positions.";
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
        // name, n_layer, n_embd, n_head, vocab_size, max_positions, rms_norm_eps, family, n_kv_head,
        // ffn_hidden, rope_theta, rope_scaling: Llama 3.2 1B (its head untied), Llama 2 7B, Llama 3
        // 8B and Llama 2 13B as their config.json files give them.
        {"llama_1b", 16, 2048, 32, 128256, 131072, 1e-5f, ModelFamily::llama, 8, 8192, 500000.0, kLlama32Scaling},
        {"llama2_7b", 32, 4096, 32, 32000, 4096, 1e-5f, ModelFamily::llama, 32, 11008, 10000.0, {}},
        {"llama3_8b", 32, 4096, 32, 128256, 8192, 1e-5f, ModelFamily::llama, 8, 14336, 500000.0, {}},
        {"llama2_13b", 40, 5120, 40, 32000, 4096, 1e-5f, ModelFamily::llama, 40, 13824, 10000.0, {}},
        // Tiny LLaMA-shaped test models: grouped-query attention 4 / 2 with head dimension 16; and
        // multi-query attention (one kv head) with head dimension 48, an MLP width no power of two,
        // and Llama 3's frequency scaling.
        {"tiny_llama", 2, 64, 4, 512, 128, 1e-5f, ModelFamily::llama, 2, 176, 10000.0, {}},
        {"tiny_llama_odd", 3, 144, 3, 300, 64, 1e-6f, ModelFamily::llama, 1, 200, 500000.0,
         {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 32, .enabled = true}},
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
