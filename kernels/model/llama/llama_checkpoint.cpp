#include "kernels/model/llama/llama_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include "base/strict_json.hpp"
#include "kernels/model/config_reader.hpp"

namespace sweetspot::llama {

namespace {

// Llama 3's frequency scaling, or none, from an object holding the rope type and its fields:
// rope_scaling (transformers 4) or rope_parameters (transformers 5).
RopeScaling scaling_from(const ConfigReader& s) {
    // transformers accepts either key for the type.
    const std::string type = s.string("rope_type", s.string("type", "default"));
    if (type == "default") return {};
    if (type != "llama3")
        s.fail("rope type \"" + type + "\" is not supported (only the default and \"llama3\")");
    RopeScaling out;
    out.enabled = true;
    out.factor = s.positive_real("factor", 8.0);
    out.low_freq_factor = s.positive_real("low_freq_factor", 1.0);
    out.high_freq_factor = s.positive_real("high_freq_factor", 4.0);
    out.original_max_positions = s.integer("original_max_position_embeddings", 8192, ModelLimits::positions);
    return out;
}

struct Rope {
    double theta = 10000.0;
    RopeScaling scaling;
};

// transformers 4 writes rope_theta and rope_scaling (null or an object) at the top level;
// transformers 5 writes rope_parameters, the type, theta and scaling fields in one object, and may
// keep the old keys beside it. Where both forms are present they must agree: a checkpoint whose
// two thetas differ has no one forward.
Rope rope_of(const ConfigReader& r) {
    Rope top;
    top.theta = r.positive_real("rope_theta", 10000.0);
    const nlohmann::json* scaling = r.find("rope_scaling");
    if (scaling != nullptr) {
        if (!scaling->is_object()) r.fail("\"rope_scaling\" must be an object or null, got " + json_excerpt(*scaling));
        top.scaling = scaling_from(ConfigReader(*scaling, r.label() + ": rope_scaling"));
    }
    const nlohmann::json* params = r.find("rope_parameters");
    if (params == nullptr) return top;
    if (!params->is_object()) r.fail("\"rope_parameters\" must be an object or null, got " + json_excerpt(*params));
    const std::string label = r.label() + ": rope_parameters";
    const ConfigReader p(*params, label);
    Rope out;
    out.theta = p.positive_real("rope_theta", top.theta);
    out.scaling = scaling_from(p);
    if (r.find("rope_theta") != nullptr && top.theta != out.theta)
        r.fail("rope_theta and rope_parameters' rope_theta differ (" + json_excerpt(*r.find("rope_theta")) + " and " +
               json_excerpt(*p.find("rope_theta")) + ")");
    if (scaling != nullptr && !(top.scaling == out.scaling))
        r.fail("rope_scaling and rope_parameters describe different frequency scalings");
    return out;
}

}  // namespace

CheckpointConfig parse_config(const ConfigReader& r, const std::string& model_name) {
    CheckpointConfig out;
    ModelConfig& m = out.model;
    m.name = model_name;
    m.family = ModelFamily::llama;
    // LlamaConfig's defaults (LLaMA 7B).
    m.n_layer = r.integer("num_hidden_layers", 32, ModelLimits::layers);
    m.n_embd = r.integer("hidden_size", 4096, ModelLimits::hidden);
    m.n_head = r.integer("num_attention_heads", 32, ModelLimits::hidden);
    m.n_kv_head = r.integer("num_key_value_heads", m.n_head, ModelLimits::hidden);
    m.ffn_hidden = r.integer("intermediate_size", 11008, 4 * ModelLimits::hidden);
    m.vocab_size = r.integer("vocab_size", 32000, ModelLimits::vocab);
    m.max_positions = r.integer("max_position_embeddings", 2048, ModelLimits::positions);
    m.ln_eps = r.positive_number("rms_norm_eps", 1e-6f);
    const Rope rope = rope_of(r);
    m.rope_theta = rope.theta;
    m.rope_scaling = rope.scaling;
    out.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
    if (const auto why = m.validate(); !why.empty()) r.fail(why);

    // Our forward is LlamaForCausalLM's: SiLU-gated MLP, no biases, attention scaled by
    // 1/sqrt(head_dim) with head_dim = hidden_size / num_attention_heads, no dropout.
    if (const auto act = r.string("hidden_act", "silu"); act != "silu")
        r.fail("hidden_act \"" + act + "\" is not supported (only silu)");
    if (r.boolean("attention_bias", false)) r.fail("attention_bias = true is not supported");
    if (r.boolean("mlp_bias", false)) r.fail("mlp_bias = true is not supported");
    if (const nlohmann::json* d = r.find("attention_dropout"); d != nullptr && !(d->is_number() && d->get<double>() == 0.0))
        r.fail("attention_dropout must be 0, got " + json_excerpt(*d));
    if (const int hd = r.integer("head_dim", m.head_dim(), ModelLimits::hidden); hd != m.head_dim())
        r.fail("head_dim = " + std::to_string(hd) + " is not supported (it must be hidden_size / num_attention_heads = " +
               std::to_string(m.head_dim()) + ")");
    if (const int tp = r.integer("pretraining_tp", 1, 1 << 10); tp != 1)
        r.fail("pretraining_tp = " + std::to_string(tp) + " is not supported (only 1)");
    return out;
}

bool is_checkpoint_buffer(std::string_view name) {
    return after_block_index(name, kCheckpointPrefix, "layers.") == ".self_attn.rotary_emb.inv_freq";
}

}  // namespace sweetspot::llama
