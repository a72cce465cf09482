#pragma once
// GPT-2's parameters, declared once: for each unit kind, the index its blocks' code reads a tensor
// by, the tensor's name in GPT-2 checkpoints (Hugging Face's GPT2LMHeadModel, without its
// "transformer." prefix), its shape as the layout holds it, whether checkpoints store it
// transposed, and its synthetic initialisation. The weight layout, the checkpoint loader and the
// synthetic weights read this table through GPT-2's FamilyDecl (gpt2_family.hpp); the enums' order
// is the units' tensor order.
#include <vector>

#include "kernels/model/model_config.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::gpt2 {

namespace embed_tensor { enum : int { wte, wpe, count }; }
namespace block_tensor {
enum : int { ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b, count };
}
namespace head_tensor { enum : int { lnf_w, lnf_b, lm_head, count }; }

// The tensors of a unit of `kind` (`block` its index for UnitKind::block), in the order of the
// kind's enum above.
std::vector<TensorDecl> unit_tensors(const ModelConfig& model, UnitKind kind, int block);

}  // namespace sweetspot::gpt2
