#include "kernels/compute/reference_gradients.hpp"

#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/reference_ops.hpp"

namespace sweetspot {

namespace {

// What every entry checks besides reference::check_arguments: one target per token, each inside
// the vocabulary.
void check_targets(const char* what, const ModelConfig& model, std::span<const std::int32_t> tokens,
                   std::span<const std::int32_t> targets) {
    if (targets.size() != tokens.size())
        throw std::invalid_argument(std::string(what) + ": expected one target per token (" +
                                    std::to_string(tokens.size()) + "), got " + std::to_string(targets.size()) + ".");
    for (const std::int32_t target : targets) {
        if (target < 0 || target >= model.vocab_size)
            throw std::invalid_argument(std::string(what) + ": target " + std::to_string(target) +
                                        " is outside the vocabulary.");
    }
}

}  // namespace

ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, int batch, int seq,
                                       const Dropout& dropout) {
    reference::check_arguments("reference_gradients", model, layout, units, tokens, batch, seq);
    return reference_gradients(model, layout, units, tokens, targets, BatchShape::rectangular(batch, seq), dropout);
}

ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, const BatchShape& shape,
                                       const Dropout& dropout) {
    const auto rows = static_cast<std::size_t>(shape.rows());
    if (tokens.size() != rows || targets.size() != rows) {
        throw std::invalid_argument("reference_gradients: expected one token and one target per row of the batch (" +
                                    std::to_string(rows) + "), got " + std::to_string(tokens.size()) + " and " +
                                    std::to_string(targets.size()) + ".");
    }
    const auto sequence_rows = [&](std::span<const std::int32_t> ids, int b) {
        return ids.subspan(static_cast<std::size_t>(shape.first_row(b)), static_cast<std::size_t>(shape.length(b)));
    };
    for (int b = 0; b < shape.batch(); ++b) {
        reference::check_arguments("reference_gradients", model, layout, units, sequence_rows(tokens, b), 1,
                                   shape.length(b));
        check_targets("reference_gradients", model, sequence_rows(tokens, b), sequence_rows(targets, b));
    }
    check_dropout("reference_gradients", model, shape, dropout);
    const Dropout shaped = dropout.for_shape(shape.stride(), model.max_positions);
    const FamilyCompute& compute = compute_of(model.family);
    ReferenceGradients out;
    for (const UnitLayout& unit : layout.units) out.units.emplace_back(static_cast<std::size_t>(unit.numel), 0.0);
    const ReferenceGradientSink sink{[&](std::size_t u) -> std::vector<double>& { return out.units[u]; },
                                     [](std::size_t) {}};
    const double per_target = 1.0 / static_cast<double>(shape.real_tokens());
    for (int b = 0; b < shape.batch(); ++b) {
        out.loss += compute.reference_sequence_gradients(model, layout, units, sequence_rows(tokens, b),
                                                         sequence_rows(targets, b), shaped, static_cast<std::size_t>(b),
                                                         per_target, sink);
    }
    out.loss *= per_target;
    return out;
}

double reference_gradients_by_unit(const ModelConfig& model, const WeightLayout& layout,
                                   std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                   std::span<const std::int32_t> targets, const Dropout& dropout,
                                   const std::function<void(int, std::span<const double>)>& unit_done) {
    const int seq = static_cast<int>(tokens.size());
    reference::check_arguments("reference_gradients_by_unit", model, layout, units, tokens, 1, seq);
    check_targets("reference_gradients_by_unit", model, tokens, targets);
    const BatchShape shape = BatchShape::rectangular(1, seq);
    check_dropout("reference_gradients_by_unit", model, shape, dropout);
    const Dropout shaped = dropout.for_shape(seq, model.max_positions);
    std::vector<double> buffer;
    const ReferenceGradientSink sink{[&](std::size_t u) -> std::vector<double>& {
                                         buffer.assign(static_cast<std::size_t>(layout.units[u].numel), 0.0);
                                         return buffer;
                                     },
                                     [&](std::size_t u) { unit_done(static_cast<int>(u), buffer); }};
    const double per_target = 1.0 / static_cast<double>(tokens.size());
    return compute_of(model.family).reference_sequence_gradients(model, layout, units, tokens, targets, shaped, 0,
                                                                 per_target, sink) *
           per_target;
}

}  // namespace sweetspot
