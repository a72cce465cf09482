#pragma once
// LLaMA's parameters, declared once (as gpt2_tensors.hpp declares GPT-2's): for each unit kind, the
// index its blocks' code reads a tensor by, the tensor's name in Hugging Face's LlamaForCausalLM
// checkpoints without the "model." prefix, its shape as nn.Linear holds it [out, in], and its
// synthetic initialisation. No biases; the head is its own tensor unless a checkpoint ties it.
#include <vector>

#include "kernels/model/model_config.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::llama {

namespace embed_tensor { enum : int { tokens, count }; }
namespace block_tensor {
enum : int { attn_norm, q_w, k_w, v_w, o_w, mlp_norm, gate_w, up_w, down_w, count };
}
namespace head_tensor { enum : int { norm, lm_head, count }; }

// The tensors of a unit of `kind` (`block` its index for UnitKind::block), in the order of the
// kind's enum above.
std::vector<TensorDecl> unit_tensors(const ModelConfig& model, UnitKind kind, int block);

}  // namespace sweetspot::llama
