#pragma once
// LLaMA's checkpoints as transformers' LlamaForCausalLM.save_pretrained writes them: what
// config.json says and which of its settings our forward computes, the prefix of the body's
// tensor names, the buffers that are no parameters, and the tensor a tied lm_head reads. The
// tensors themselves are llama_tensors.hpp's.
#include <string>
#include <array>
#include <string_view>

#include "kernels/model/config_reader.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot::llama {

// Reads a LLaMA config.json's fields. Absent fields take LlamaConfig's defaults, as transformers does.
// Settings under which transformers computes another function than our forward (an activation
// other than SiLU, attention or MLP biases, attention dropout, a head dimension other than
// hidden_size / num_attention_heads, a rope type other than the default and "llama3"
// ) are refused with the reader's CheckpointError.
CheckpointConfig parse_config(const ConfigReader& r, const std::string& model_name);

// config.json's model_type of LLaMA checkpoints.
inline constexpr std::array<std::string_view, 1> kModelTypes = {"llama"};

// LlamaForCausalLM names the body's tensors with this prefix; files saved from LlamaModel do not.
inline constexpr std::string_view kCheckpointPrefix = "model.";
// The tensor a head tied to the embedding computes the logits with.
inline constexpr std::string_view kTiedHeadSource = "embed_tokens.weight";

// Non-parameter buffers older transformers versions saved with each block (the rotary
// frequencies); our forward computes them from config.json.
bool is_checkpoint_buffer(std::string_view name);

}  // namespace sweetspot::llama
