#include "kernels/model/llama/llama_family.hpp"

#include "kernels/model/llama/llama_checkpoint.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {

const FamilyDecl& family() {
    static constexpr FamilyDecl decl = {
        .title = "LLaMA",
        .description = "rotary positions, pre-RMSNorm blocks with grouped-query attention and a SwiGLU MLP, no biases",
        .unit_tensors = unit_tensors,
        .model_types = kModelTypes,
        .parse_config = parse_config,
        .checkpoint_prefix = kCheckpointPrefix,
        .is_checkpoint_buffer = is_checkpoint_buffer,
        .mlp_inputs = 2,
        .rotary = true,
        .token_table = embed_tensor::tokens,
        .position_table = -1,
        .tied_head_tensor = head_tensor::lm_head,
        .tied_head_source = kTiedHeadSource,
    };
    return decl;
}

}  // namespace sweetspot::llama
