#pragma once
// GPT-2's checkpoints as transformers' GPT2LMHeadModel.save_pretrained writes them: what config.json
// says and which of its settings our forward computes, the prefix its tensor names may carry, the
// buffers that are no parameters, and the tensor a tied lm_head reads. The tensors themselves are
// gpt2_tensors.hpp's.
#include <array>
#include <string>
#include <string_view>

#include "kernels/model/model_family.hpp"

namespace sweetspot::gpt2 {

// config.json's model_type in GPT-2's checkpoints.
inline constexpr std::array<std::string_view, 1> kModelTypes = {"gpt2"};

// Reads a GPT-2 config.json's fields. Fields that are absent take GPT2Config's defaults, as
// transformers does; tie_word_embeddings says whether a checkpoint without lm_head.weight reads
// wte. Settings under which transformers computes another function than our forward (another
// activation, unscaled or layer-scaled attention, cross-attention, an MLP width other than
// 4·n_embd) are refused with the reader's CheckpointError.
CheckpointConfig parse_config(const ConfigReader& r, const std::string& model_name);

// GPT2LMHeadModel names the body's tensors with this prefix; files saved from GPT2Model do not.
inline constexpr std::string_view kCheckpointPrefix = "transformer.";
// The tensor a head tied to the embedding computes the logits with.
inline constexpr std::string_view kTiedHeadSource = "wte.weight";

// Non-parameter buffers older transformers versions saved with each block (the causal mask and
// the value masked positions are filled with); our forward builds the mask itself.
bool is_checkpoint_buffer(std::string_view name);

}  // namespace sweetspot::gpt2
