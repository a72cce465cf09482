// LLaMA's config.json (kernels/model/llama/llama_checkpoint), read through checkpoint_config as
// every checkpoint's is: the fields transformers' LlamaConfig reads, its defaults, and the settings
// our forward does not compute, refused.
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "kernels/model/llama/llama_checkpoint.hpp"

using namespace sweetspot;

namespace {

// Llama 3.2 1B's config.json as transformers saves it (abridged to the fields it reads).
const std::string kLlama32 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0", "use_cache": true, "vocab_size": 128256
})";

std::string replaced(const std::string& from, const std::string& to) {
    std::string c = kLlama32;
    const auto at = c.find(from);
    REQUIRE(at != std::string::npos);
    c.replace(at, from.size(), to);
    return c;
}

// The CheckpointError's message for `json`, or "parsed".
std::string parse_error(const std::string& json) {
    try {
        checkpoint_config(json, "ckpt", "m");
        return "parsed";
    } catch (const CheckpointError& e) {
        return e.what();
    }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a LLaMA config.json gives the model's shape, its grouped heads and its rotary settings", "[checkpoint]") {
    const CheckpointConfig c = checkpoint_config(kLlama32, "ckpt", "llama32");
    const ModelConfig& m = c.model;
    CHECK(m.name == "llama32");
    CHECK(m.family == ModelFamily::llama);
    CHECK((m.n_layer == 16 && m.n_embd == 2048 && m.n_head == 32 && m.n_kv_head == 8 && m.ffn_hidden == 8192));
    CHECK((m.vocab_size == 128256 && m.max_positions == 131072 && m.ln_eps == 1e-5f));
    CHECK(m.rope_theta == 500000.0);
    CHECK(m.rope_scaling == RopeScaling{.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                                        .original_max_positions = 8192, .enabled = true});
    CHECK(c.tie_word_embeddings);

    // Absent fields take LlamaConfig's defaults: LLaMA 7B, multi-head, untied, no scaling.
    const ModelConfig d = checkpoint_config(R"({"model_type": "llama"})", "ckpt", "d").model;
    CHECK((d.n_layer == 32 && d.n_embd == 4096 && d.n_head == 32 && d.kv_heads() == 32 && d.ffn_width() == 11008));
    CHECK((d.vocab_size == 32000 && d.max_positions == 2048 && d.ln_eps == 1e-6f && d.rope_theta == 10000.0));
    CHECK_FALSE(d.rope_scaling.enabled);
    CHECK_FALSE(checkpoint_config(R"({"model_type": "llama"})", "ckpt", "d").tie_word_embeddings);
    // The default rope type is no scaling.
    CHECK_FALSE(checkpoint_config(replaced("\"llama3\"", "\"default\""), "ckpt", "m").model.rope_scaling.enabled);
    CHECK_FALSE(checkpoint_config(replaced("\"rope_scaling\": {", "\"rope_scaling\": null, \"x\": {"), "ckpt", "m")
                    .model.rope_scaling.enabled);
}

TEST_CASE("transformers 5's rope_parameters give theta and the scaling, and must agree with the old keys",
          "[checkpoint]") {
    const std::string v5 = R"({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
        "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 4096}})";
    const ModelConfig m = checkpoint_config(v5, "ckpt", "m").model;
    CHECK(m.rope_theta == 500000.0);
    CHECK(m.rope_scaling == RopeScaling{.factor = 8, .low_freq_factor = 2, .high_freq_factor = 4,
                                        .original_max_positions = 4096, .enabled = true});
    const ModelConfig plain =
        checkpoint_config(R"({"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})",
                          "ckpt", "m")
            .model;
    CHECK(plain.rope_theta == 1e6);
    CHECK_FALSE(plain.rope_scaling.enabled);
    // Both forms, agreeing: read as one.
    CHECK(checkpoint_config(R"({"model_type": "llama", "rope_theta": 1e6, "rope_scaling": null,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})", "ckpt", "m").model.rope_theta == 1e6);
    CHECK(contains(parse_error(R"({"model_type": "llama", "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})"),
                   "ckpt: rope_theta and rope_parameters' rope_theta differ (10000.0 and 1000000.0)"));
    CHECK(contains(parse_error(replaced("\"rope_theta\": 500000.0",
                                        "\"rope_theta\": 500000.0, \"rope_parameters\": {\"rope_theta\": 500000.0}")),
                   "rope_scaling and rope_parameters describe different frequency scalings"));
    CHECK(contains(parse_error(R"({"model_type": "llama", "rope_parameters": {"rope_type": "yarn"}})"),
                   "ckpt: rope_parameters: rope type \"yarn\" is not supported"));
    CHECK(contains(parse_error(R"({"model_type": "llama", "rope_parameters": 3})"),
                   "\"rope_parameters\" must be an object or null, got 3"));
}

TEST_CASE("LLaMA config.json settings our forward does not compute are refused, naming the field", "[checkpoint]") {
    CHECK(contains(parse_error(replaced("\"model_type\": \"llama\"", "\"model_type\": \"mistral\"")),
                   "ckpt: model_type \"mistral\" names no family that can be loaded; expected one of: gpt2, llama"));
    CHECK(contains(parse_error(replaced("\"silu\"", "\"gelu\"")), "hidden_act \"gelu\" is not supported"));
    CHECK(contains(parse_error(replaced("\"attention_bias\": false", "\"attention_bias\": true")),
                   "attention_bias = true is not supported"));
    CHECK(contains(parse_error(replaced("\"mlp_bias\": false", "\"mlp_bias\": true")), "mlp_bias = true is not supported"));
    CHECK(contains(parse_error(replaced("\"attention_dropout\": 0.0", "\"attention_dropout\": 0.1")),
                   "attention_dropout must be 0, got 0.1"));
    CHECK(contains(parse_error(replaced("\"head_dim\": 64", "\"head_dim\": 128")),
                   "head_dim = 128 is not supported (it must be hidden_size / num_attention_heads = 64)"));
    CHECK(contains(parse_error(replaced("\"rope_type\": \"llama3\"", "\"rope_type\": \"dynamic\"")),
                   "ckpt: rope_scaling: rope type \"dynamic\" is not supported"));
    CHECK(contains(parse_error(replaced("\"factor\": 32.0", "\"factor\": -1")),
                   "\"factor\" must be a positive number"));
    CHECK(contains(parse_error(replaced("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5")),
                   "it must divide n_head = 32"));
    CHECK(contains(parse_error(replaced("\"pretraining_tp\": 1", "\"pretraining_tp\": 2")), "pretraining_tp = 2"));
    CHECK(contains(parse_error(replaced("\"rope_theta\": 500000.0", "\"rope_theta\": 0")), "\"rope_theta\" must be a positive number"));
}

TEST_CASE("LLaMA's rotary frequency buffers are no parameters", "[checkpoint]") {
    CHECK(llama::is_checkpoint_buffer("model.layers.3.self_attn.rotary_emb.inv_freq"));
    CHECK(llama::is_checkpoint_buffer("layers.12.self_attn.rotary_emb.inv_freq"));
    CHECK_FALSE(llama::is_checkpoint_buffer("model.layers.3.self_attn.q_proj.weight"));
    CHECK_FALSE(llama::is_checkpoint_buffer("model.layers..self_attn.rotary_emb.inv_freq"));
}
