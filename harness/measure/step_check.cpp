#include "harness/measure/step_check.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/compute/reference_forward.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/compute/reference_optimizer.hpp"

namespace sweetspot {
namespace {

UnitValues as_double(const std::vector<std::vector<float>>& units) {
    UnitValues out;
    for (const auto& u : units) out.emplace_back(u.begin(), u.end());
    return out;
}

}  // namespace

std::optional<LogitsCheck> check_training_step(const CellParams& cell, const WeightLayout& layout,
                                               std::span<const std::int32_t> tokens,
                                               std::span<const std::int32_t> targets, const TrainSettings& settings,
                                               const FirstStep& first, double tolerance) {
    // The backward costs about twice the forward.
    if (3.0 * reference_forward_macs(cell.model, cell.batch, cell.seq) > kMaxFloat64Macs) return std::nullopt;
    std::vector<const float*> units;
    for (const auto& u : first.weights_before) units.push_back(u.data());
    const ReferenceGradients ref =
        reference_gradients(cell.model, layout, units, tokens, targets, cell.batch, cell.seq, cell.dropout_masks());

    ErrorMeasure loss, gradients, update;
    loss.add(first.loss, ref.loss);
    for (std::size_t u = 0; u < ref.units.size(); ++u)
        for (std::size_t i = 0; i < ref.units[u].size(); ++i) gradients.add(first.gradients[u][i], ref.units[u][i]);

    // The reference optimizer on the cell's own gradients: only the update's own arithmetic is compared.
    const bool master = !first.master_before.empty();
    const auto& updated_before = master ? first.master_before : first.weights_before;
    const auto& updated_after = master ? first.master_after : first.weights_after;
    UnitValues grads = as_double(first.gradients), params = as_double(updated_before);
    reference_clip_gradients(grads, settings.max_grad_norm);
    AdamWState state;
    reference_adamw_step(layout, params, grads, state,
                         {.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                          .weight_decay = settings.weight_decay});
    // The update is judged against its own size, not the weights'; but an fp32 weight cannot come
    // nearer the reference's than one unit in its last place, so only what lies beyond that counts.
    for (std::size_t u = 0; u < params.size(); ++u) {
        for (std::size_t i = 0; i < params[u].size(); ++i) {
            const double want = params[u][i], want_update = want - updated_before[u][i];
            const double diff = std::abs(static_cast<double>(updated_after[u][i]) - want);
            const double beyond_rounding = std::isnan(diff) ? diff : std::max(0.0, diff - std::ldexp(std::abs(want), -23));
            update.add(want_update + beyond_rounding, want_update);
        }
    }

    LogitsCheck check;
    check.compared = "the first step's loss, gradients and update";
    check.reference = "float64 loss, gradients and AdamW step";
    check.tolerance = tolerance;
    // The worst of the three; a NaN anywhere makes it NaN, which fails.
    for (const ErrorMeasure* e : {&loss, &gradients, &update}) {
        if (std::isnan(check.rel_err)) break;
        if (std::isnan(e->rel_err()) || e->rel_err() > check.rel_err) {
            check.rel_err = e->rel_err();
            check.max_abs_err = e->max_abs_err();
        }
    }
    return check;
}

}  // namespace sweetspot
