#include "kernels/model/gpt2/gpt2_checkpoint.hpp"

#include "kernels/model/config_reader.hpp"

namespace sweetspot::gpt2 {

CheckpointConfig parse_config(const ConfigReader& r, const std::string& model_name) {
    CheckpointConfig out;
    ModelConfig& m = out.model;
    m.name = model_name;
    // GPT2Config's defaults (GPT-2 small).
    m.n_layer = r.integer("n_layer", 12, ModelLimits::layers);
    m.n_embd = r.integer("n_embd", 768, ModelLimits::hidden);
    m.n_head = r.integer("n_head", 12, ModelLimits::hidden);
    m.vocab_size = r.integer("vocab_size", 50257, ModelLimits::vocab);
    m.max_positions = r.integer("n_positions", 1024, ModelLimits::positions);
    m.ln_eps = r.positive_number("layer_norm_epsilon", 1e-5f);
    out.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
    if (const auto why = m.validate(); !why.empty()) r.fail(why);

    // Our forward is GPT-2's: tanh-approximated GELU, attention scaled by 1/sqrt(head_dim), an
    // MLP of width 4·n_embd, no cross-attention.
    if (const auto act = r.string("activation_function", "gelu_new"); act != "gelu_new" && act != "gelu_pytorch_tanh")
        r.fail("activation_function \"" + act + "\" is not supported (only the tanh GELU: gelu_new, gelu_pytorch_tanh)");
    if (!r.boolean("scale_attn_weights", true)) r.fail("scale_attn_weights = false is not supported");
    if (r.boolean("scale_attn_by_inverse_layer_idx", false)) r.fail("scale_attn_by_inverse_layer_idx = true is not supported");
    if (r.boolean("add_cross_attention", false)) r.fail("add_cross_attention = true is not supported");
    if (const int inner = r.integer("n_inner", 4 * m.n_embd, 4 * ModelLimits::hidden); inner != 4 * m.n_embd)
        r.fail("n_inner = " + std::to_string(inner) + " is not supported (the MLP must be 4 × n_embd = " +
               std::to_string(4 * m.n_embd) + " wide)");
    return out;
}

bool is_checkpoint_buffer(std::string_view name) {
    const std::string_view rest = after_block_index(name, kCheckpointPrefix, "h.");
    return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

}  // namespace sweetspot::gpt2
