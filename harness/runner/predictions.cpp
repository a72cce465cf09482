#include "harness/runner/predictions.hpp"

#include "harness/measure/cell_exec.hpp"

namespace sweetspot {

std::optional<FixedCost> fixed_cost_here(const GpuFacts& gpu, Database& db) {
    for (const FixedCost& fixed : measured_fixed_costs(db))
        if (fixed.gpu == gpu.name.value_or("") && fixed.driver == gpu.driver.value_or("")) return fixed;
    return std::nullopt;
}

void add_predictions(const CellParams& cell, const std::optional<FixedCost>& fixed, bool reference_runs,
                     std::optional<bool> reference_ran, CellOutcome& out) {
    if (!uses_gpu(cell) || !cell_impossible_reason(cell).empty()) return;
    const MemoryEstimate e = estimate_memory(cell);
    out.set<"predicted_alloc_bytes">(e.device_total());
    out.set<"predicted_weight_bytes">(e.weights);
    out.set<"predicted_training_state_bytes">(e.training_state);
    out.set<"predicted_activation_bytes">(e.activations);
    out.set<"predicted_scores_bytes">(e.scores);
    out.set<"predicted_workspace_bytes">(e.workspace);
    out.set<"predicted_check_step_bytes">(e.check_step);
    out.set<"predicted_host_alloc_bytes">(e.host_total(reference_ran.value_or(reference_runs)));
    if (!fixed) return;
    out.set<"predicted_peak_bytes">(predicted_peak(cell, e, *fixed));
    out.set<"predicted_host_peak_bytes">(predicted_host_peak(cell, e, *fixed, reference_runs));
}

}  // namespace sweetspot
