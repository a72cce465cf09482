#include "kernels/model/gpt2/gpt2_tensors.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace sweetspot::gpt2 {

namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initialiser

}  // namespace

std::vector<TensorDecl> unit_tensors(const ModelConfig& m, UnitKind kind, int block) {
    const std::int64_t c = m.n_embd;
    const NormalInit weight{kInitStd}, ln_weight{kInitStd, 1.0f};
    switch (kind) {
        case UnitKind::embedding:
            return declare_tensors("gpt2::unit_tensors", embed_tensor::count, [&](auto at) {
                at(embed_tensor::wte, "wte.weight", {m.vocab_size, c}, weight);
                at(embed_tensor::wpe, "wpe.weight", {m.max_positions, c}, weight);
            });
        case UnitKind::block: {
            const std::string p = "h." + std::to_string(block) + ".";
            // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2·n_layer)
            // so the stream's variance does not grow with depth. sqrt is correctly rounded (IEEE).
            const NormalInit residual{kInitStd / std::sqrt(2.0 * m.n_layer)};
            return declare_tensors("gpt2::unit_tensors", block_tensor::count, [&](auto at) {
                at(block_tensor::ln1_w, p + "ln_1.weight", {c}, ln_weight);
                at(block_tensor::ln1_b, p + "ln_1.bias", {c}, weight);
                at(block_tensor::qkv_w, p + "attn.c_attn.weight", {3 * c, c}, weight, true);
                at(block_tensor::qkv_b, p + "attn.c_attn.bias", {3 * c}, weight);
                at(block_tensor::proj_w, p + "attn.c_proj.weight", {c, c}, residual, true);
                at(block_tensor::proj_b, p + "attn.c_proj.bias", {c}, weight);
                at(block_tensor::ln2_w, p + "ln_2.weight", {c}, ln_weight);
                at(block_tensor::ln2_b, p + "ln_2.bias", {c}, weight);
                at(block_tensor::fc_w, p + "mlp.c_fc.weight", {4 * c, c}, weight, true);
                at(block_tensor::fc_b, p + "mlp.c_fc.bias", {4 * c}, weight);
                at(block_tensor::fc_proj_w, p + "mlp.c_proj.weight", {c, 4 * c}, residual, true);
                at(block_tensor::fc_proj_b, p + "mlp.c_proj.bias", {c}, weight);
            });
        }
        case UnitKind::head:
            return declare_tensors("gpt2::unit_tensors", head_tensor::count, [&](auto at) {
                at(head_tensor::lnf_w, "ln_f.weight", {c}, ln_weight);
                at(head_tensor::lnf_b, "ln_f.bias", {c}, weight);
                at(head_tensor::lm_head, "lm_head.weight", {m.vocab_size, c}, weight);
            });
    }
    throw std::logic_error("gpt2::unit_tensors: unknown unit kind");
}

}  // namespace sweetspot::gpt2
