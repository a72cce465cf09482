#include "kernels/compute/reference_forward.hpp"

#include <stdexcept>

#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/reference_ops.hpp"

// One sequence at a time, each the family's own reference (family_compute.hpp).
namespace sweetspot {

std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      int batch, int seq, const Dropout& dropout) {
    reference::check_arguments("reference_forward", model, layout, units, tokens, batch, seq);
    const FamilyCompute& compute = compute_of(model.family);
    if (dropout.active() && !compute.dropout)
        throw std::invalid_argument("reference_forward: model '" + model.name + "' has no dropout.");
    const Dropout shaped = dropout.for_shape(seq, model.max_positions);
    const auto seq_len = static_cast<std::size_t>(seq);
    std::vector<double> logits;
    logits.reserve(tokens.size() * static_cast<std::size_t>(model.vocab_size));
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        const std::vector<double> out =
            compute.reference_sequence(model, layout, units, tokens.subspan(b * seq_len, seq_len), shaped, b);
        logits.insert(logits.end(), out.begin(), out.end());
    }
    return logits;
}

double reference_forward_macs(const ModelConfig& model, int batch, int seq) {
    return compute_of(model.family).reference_macs(model, batch, seq);
}

}  // namespace sweetspot
