#include "kernels/model/gpt2/gpt2_family.hpp"

#include "kernels/model/gpt2/gpt2_checkpoint.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {

const FamilyDecl& family() {
    static constexpr FamilyDecl decl = {
        .title = "GPT-2",
        .description = "learned positions, pre-LayerNorm blocks with a GELU MLP, the head tied to the token embedding",
        .unit_tensors = unit_tensors,
        .model_types = kModelTypes,
        .parse_config = parse_config,
        .checkpoint_prefix = kCheckpointPrefix,
        .is_checkpoint_buffer = is_checkpoint_buffer,
        .mlp_inputs = 1,
        .rotary = false,
        .token_table = embed_tensor::wte,
        .position_table = embed_tensor::wpe,
        .tied_head_tensor = head_tensor::lm_head,
        .tied_head_source = kTiedHeadSource,
    };
    return decl;
}

}  // namespace sweetspot::gpt2
