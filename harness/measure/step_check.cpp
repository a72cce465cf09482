#include "harness/measure/step_check.hpp"

#include <algorithm>
#include <cmath>

#include "backends/residency_plan.hpp"
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

OutputCount StepLosses::count_nonfinite() const {
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < losses_.size(); ++i)
        bad += !std::isfinite(losses_[i]) + (!std::isfinite(norms_[i]) && !scaling_skipped_[i]);
    return {bad, static_cast<std::int64_t>(2 * losses_.size()), "losses and gradient norms of its steps"};
}

void StepLosses::add_results(CellOutcome& out) const {
    if (losses_.empty()) return;
    out.set<"loss_first">(losses_.front());
    out.set<"grad_norm_first">(norms_.front());
    out.set<"loss_last">(losses_.back());
    out.set<"grad_norm_last">(norms_.back());
}

bool training_check_runs(const CellParams& cell) {
    // The backward costs about twice the forward.
    return 3.0 * reference_forward_macs(cell.model, cell.batch, cell.seq) <= kMaxFloat64Macs;
}

std::int64_t first_step_copy_bytes(const CellParams& cell) {
    if (!training_check_runs(cell)) return 0;
    std::int64_t fp32 = 0;
    for (const auto bytes : unit_bytes(WeightLayout::for_model(cell.model), DType::fp32)) fp32 += bytes;
    // Weights before and after, gradients; the master weights before and after below fp32.
    return (cell.dtype == DType::fp32 ? 3 : 5) * fp32;
}

std::optional<LogitsCheck> check_training_step(const CellParams& cell, const WeightLayout& layout,
                                               std::span<const std::int32_t> tokens,
                                               std::span<const std::int32_t> targets, const TrainSettings& settings,
                                               const FirstStep& first, double tolerance) {
    if (!training_check_runs(cell)) return std::nullopt;
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
