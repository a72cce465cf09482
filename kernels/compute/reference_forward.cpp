#include "kernels/compute/reference_forward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/reference_ops.hpp"

// One sequence at a time, each the family's own reference (family_compute.hpp).
namespace sweetspot {

std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      int batch, int seq, const Dropout& dropout) {
    reference::check_arguments("reference_forward", model, layout, units, tokens, batch, seq);
    return reference_forward(model, layout, units, tokens, BatchShape::rectangular(batch, seq), dropout);
}

std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      const BatchShape& shape, const Dropout& dropout) {
    if (static_cast<std::int64_t>(tokens.size()) != shape.rows()) {
        throw std::invalid_argument("reference_forward: expected one token per row of the batch (" +
                                    std::to_string(shape.rows()) + "), got " + std::to_string(tokens.size()) + ".");
    }
    const auto sequence_tokens = [&](int b) {
        return tokens.subspan(static_cast<std::size_t>(shape.first_row(b)), static_cast<std::size_t>(shape.length(b)));
    };
    for (int b = 0; b < shape.batch(); ++b)
        reference::check_arguments("reference_forward", model, layout, units, sequence_tokens(b), 1, shape.length(b));
    check_dropout("reference_forward", model, shape, dropout);
    const FamilyCompute& compute = compute_of(model.family);
    const Dropout shaped = dropout.for_shape(shape.stride(), model.max_positions);
    const auto vocab = static_cast<std::size_t>(model.vocab_size);
    std::vector<double> logits(static_cast<std::size_t>(shape.rows()) * vocab, 0.0);
    for (int b = 0; b < shape.batch(); ++b) {
        const std::vector<double> out =
            compute.reference_sequence(model, layout, units, sequence_tokens(b), shaped, static_cast<std::size_t>(b));
        std::copy(out.begin(), out.end(), logits.begin() + static_cast<std::ptrdiff_t>(shape.first_row(b)) *
                                                               static_cast<std::ptrdiff_t>(vocab));
    }
    return logits;
}

double reference_forward_macs(const ModelConfig& model, int batch, int seq) {
    return compute_of(model.family).reference_macs(model, batch, seq);
}

double reference_forward_macs(const ModelConfig& model, const BatchShape& shape) {
    double macs = 0;
    for (const int length : shape.lengths()) macs += reference_forward_macs(model, 1, length);
    return macs;
}

}  // namespace sweetspot
