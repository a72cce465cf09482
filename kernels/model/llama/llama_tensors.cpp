#include "kernels/model/llama/llama_tensors.hpp"

#include <stdexcept>
#include <string>

namespace sweetspot::llama {

namespace {

constexpr double kInitStd = 0.02;  // LlamaConfig's initializer_range

}  // namespace

std::vector<TensorDecl> unit_tensors(const ModelConfig& m, UnitKind kind, int block) {
    const std::int64_t c = m.n_embd, f = m.ffn_width();
    const std::int64_t q = static_cast<std::int64_t>(m.n_head) * m.head_dim();
    const std::int64_t kv = static_cast<std::int64_t>(m.kv_heads()) * m.head_dim();
    // RMSNorm weights start at one, as LlamaRMSNorm's do.
    const NormalInit weight{kInitStd}, norm_weight{0.0, 1.0f};
    constexpr const char* who = "llama::unit_tensors";
    switch (kind) {
        case UnitKind::embedding:
            return declare_tensors(who, embed_tensor::count, [&](auto at) {
                at(embed_tensor::tokens, "embed_tokens.weight", {m.vocab_size, c}, weight);
            });
        case UnitKind::block: {
            const std::string p = "layers." + std::to_string(block) + ".";
            return declare_tensors(who, block_tensor::count, [&](auto at) {
                at(block_tensor::attn_norm, p + "input_layernorm.weight", {c}, norm_weight);
                at(block_tensor::q_w, p + "self_attn.q_proj.weight", {q, c}, weight);
                at(block_tensor::k_w, p + "self_attn.k_proj.weight", {kv, c}, weight);
                at(block_tensor::v_w, p + "self_attn.v_proj.weight", {kv, c}, weight);
                at(block_tensor::o_w, p + "self_attn.o_proj.weight", {c, q}, weight);
                at(block_tensor::mlp_norm, p + "post_attention_layernorm.weight", {c}, norm_weight);
                at(block_tensor::gate_w, p + "mlp.gate_proj.weight", {f, c}, weight);
                at(block_tensor::up_w, p + "mlp.up_proj.weight", {f, c}, weight);
                at(block_tensor::down_w, p + "mlp.down_proj.weight", {c, f}, weight);
            });
        }
        case UnitKind::head:
            return declare_tensors(who, head_tensor::count, [&](auto at) {
                at(head_tensor::norm, "norm.weight", {c}, norm_weight);
                at(head_tensor::lm_head, "lm_head.weight", {m.vocab_size, c}, weight);
            });
    }
    throw std::logic_error("llama::unit_tensors: unknown unit kind");
}

}  // namespace sweetspot::llama
