#include "kernels/compute/reference_forward.hpp"

#include "kernels/compute/reference_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

// Deliberately naive: one sequence at a time, every product a plain loop in double
// (reference_ops), nothing shared with CpuForward, so an error in one is not repeated in the other.
namespace sweetspot {

namespace {

using namespace reference;

// Logits [seq, vocab] of one sequence.
Rows forward_one_sequence(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
                          std::span<const std::int32_t> tokens, const Dims& d) {
    Rows x = embed(tokens, units[0], layout.units[0], d);
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_forward(x, d, l, units[u], layout.units[u], nullptr);
    }

    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const float* head = units[hu];
    const UnitLayout& hl = layout.units[hu];
    const Rows xf =
        layer_norm(x, d.c, tensor_of(head, hl, gpt2::head_tensor::lnf_w), tensor_of(head, hl, gpt2::head_tensor::lnf_b), d.eps);
    return dense(xf, d.c, d.vocab, tensor_of(head, hl, gpt2::head_tensor::lm_head), nullptr);
}

}  // namespace

std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      int batch, int seq, const Dropout& dropout) {
    check_arguments("reference_forward", model, layout, units, tokens, batch, seq);
    Dims d = dims_of(model, dropout.for_shape(seq, model.max_positions));
    const auto seq_len = static_cast<std::size_t>(seq);
    std::vector<double> logits;
    logits.reserve(tokens.size() * static_cast<std::size_t>(model.vocab_size));
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        d.sequence = b;
        const Rows out = forward_one_sequence(model, layout, units, tokens.subspan(b * seq_len, seq_len), d);
        logits.insert(logits.end(), out.begin(), out.end());
    }
    return logits;
}

double reference_forward_macs(const ModelConfig& model, int batch, int seq) {
    const double c = model.n_embd;
    const double tokens = static_cast<double>(batch) * seq;
    // Linear layers: qkv 3c², proj c², fc 4c², fc_proj 4c² per token and layer.
    const double linear = tokens * model.n_layer * 12.0 * c * c;
    // Attention: position t scores and mixes t + 1 positions over all heads, twice (QKᵀ, ·V).
    const double attention = static_cast<double>(batch) * model.n_layer * seq * (seq + 1.0) * c;
    const double lm_head = tokens * model.vocab_size * c;
    return linear + attention + lm_head;
}

}  // namespace sweetspot
