#include "kernels/compute/reference_gradients.hpp"

#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/reference_ops.hpp"

namespace sweetspot {

namespace {

// What both entries check besides reference::check_arguments: the targets, and dropout only for a
// family that has it. Returns the dropout for the batch's shape.
Dropout check_step(const char* what, const ModelConfig& model, std::span<const std::int32_t> tokens,
                   std::span<const std::int32_t> targets, int seq, const Dropout& dropout) {
    if (targets.size() != tokens.size())
        throw std::invalid_argument(std::string(what) + ": expected batch × seq targets, got " +
                                    std::to_string(targets.size()) + ".");
    for (const std::int32_t target : targets) {
        if (target < 0 || target >= model.vocab_size)
            throw std::invalid_argument(std::string(what) + ": target " + std::to_string(target) +
                                        " is outside the vocabulary.");
    }
    if (dropout.active() && !compute_of(model.family).dropout)
        throw std::invalid_argument(std::string(what) + ": model '" + model.name + "' has no dropout.");
    return dropout.for_shape(seq, model.max_positions);
}

}  // namespace

ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, int batch, int seq,
                                       const Dropout& dropout) {
    reference::check_arguments("reference_gradients", model, layout, units, tokens, batch, seq);
    const Dropout shaped = check_step("reference_gradients", model, tokens, targets, seq, dropout);
    const FamilyCompute& compute = compute_of(model.family);
    ReferenceGradients out;
    for (const UnitLayout& unit : layout.units) out.units.emplace_back(static_cast<std::size_t>(unit.numel), 0.0);
    const ReferenceGradientSink sink{[&](std::size_t u) -> std::vector<double>& { return out.units[u]; },
                                     [](std::size_t) {}};
    const auto seq_len = static_cast<std::size_t>(seq);
    const double per_target = 1.0 / static_cast<double>(tokens.size());
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        out.loss += compute.reference_sequence_gradients(model, layout, units, tokens.subspan(b * seq_len, seq_len),
                                                         targets.subspan(b * seq_len, seq_len), shaped, b, per_target,
                                                         sink);
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
    const Dropout shaped = check_step("reference_gradients_by_unit", model, tokens, targets, seq, dropout);
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
