#include "harness/measure/memory_estimate.hpp"

#include <algorithm>
#include <stdexcept>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "harness/measure/cell_exec.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/number_text.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

MemoryEstimate estimate_memory(const CellParams& cell) {
    const BackendTraits& backend = backend_traits(cell.backend);
    const BackendConfig config = backend_config(cell);
    const auto units = unit_bytes(WeightLayout::for_model(cell.model), cell.dtype);
    if (const std::string why = backend.cannot_honour(config, units); !why.empty()) throw std::invalid_argument(why);

    MemoryEstimate e;
    const WeightFootprint weights = backend.footprint(config, units);
    e.weights = weights.device_bytes;
    e.pinned_host = weights.pinned_host_bytes;
    e.managed = weights.managed_bytes;
    if (!backend.needs_gpu) return e;

    const ActivationLayout layout = activation_layout(cell.model, cell.dtype, cell.batch, cell.seq,
                                                      !cell.variant.has(Fusion::flash_attention));
    e.scores = layout.scores_bytes;
    e.activations = layout.total_bytes - layout.scores_bytes;
    e.workspace = kGemmWorkspaceBytes;
    e.managed_activations = cell.activations == Activations::managed;
    if (e.managed_activations) e.managed += layout.total_bytes;
    return e;
}

std::vector<FixedCost> measured_fixed_costs(Database& db) {
    std::string own_memory;  // the GPU backends whose device memory is all their own allocations
    for (const BackendTraits& b : backend_registry())
        if (b.needs_gpu && !b.managed_weights) own_memory += (own_memory.empty() ? "'" : ", '") + std::string(enum_name(b.id)) + "'";
    // The cell's measured peak where NVML read one (schema 6 on), else the used memory after its
    // first iteration.
    const std::string used =
        has_column(db, "cells", "gpu_peak_bytes") ? "coalesce(c.gpu_peak_bytes, c.device_used_bytes)" : "c.device_used_bytes";
    auto st = db.prepare(
        "SELECT coalesce(r.gpu_name, ''), coalesce(r.gpu_driver, ''),"
        " max(" + used + " - c.device_weight_bytes - c.activation_bytes),"
        " min(" + used + " - c.device_weight_bytes - c.activation_bytes), count(*)"
        " FROM cells c JOIN runs r USING (run_id)"
        " WHERE c.status = 'ok' AND c.backend IN (" + own_memory + ") AND " + used + " IS NOT NULL"
        " AND c.device_weight_bytes IS NOT NULL AND c.activation_bytes IS NOT NULL"
        " GROUP BY 1, 2 ORDER BY 1, 2");
    std::vector<FixedCost> costs;
    while (st.step())
        costs.push_back({st.text(0), st.text(1), st.int64(2), st.int64(3), static_cast<int>(st.int64(4))});
    return costs;
}

namespace {

// The largest n in [1, most] for which `fits` holds, when it holds for 1 and never again once it
// fails (memory grows with batch and seq); empty when it fails at 1.
template <class Fits>
std::optional<int> largest(int most, Fits fits) {
    if (most < 1 || !fits(1)) return std::nullopt;
    int lo = 1, hi = most;  // fits(lo) holds
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (fits(mid)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

}  // namespace

Fit fit(const CellParams& cell, std::int64_t capacity, std::int64_t fixed) {
    const auto peak_fits = [&](const CellParams& c) {
        return cell_impossible_reason(c).empty() && estimate_memory(c).device_total() + fixed <= capacity;
    };
    Fit f;
    f.batch = largest(AxisLimits::tokens / cell.seq, [&](int b) {
        CellParams c = cell;
        c.batch = b;
        return peak_fits(c);
    });
    f.seq = largest(std::min(cell.model.max_positions, AxisLimits::tokens / cell.batch), [&](int s) {
        CellParams c = cell;
        c.seq = s;
        return peak_fits(c);
    });
    const BackendTraits& backend = backend_traits(cell.backend);
    if (backend.runs_under_budget) {
        // The backend's own rule (cannot_honour) decides, so no backend is named here: the smallest
        // budget in bytes it accepts, found by bisection (a larger budget is never refused).
        const auto units = unit_bytes(WeightLayout::for_model(cell.model), cell.dtype);
        BackendConfig config = backend_config(cell);
        const auto runs_at = [&](std::int64_t budget) {
            config.budget_bytes = budget;
            return backend.cannot_honour(config, units).empty();
        };
        std::int64_t lo = 0, hi = cell.weight_bytes();  // runs_at(hi): every unit fits
        if (runs_at(hi)) {
            while (hi - lo > 1) {
                const std::int64_t mid = lo + (hi - lo) / 2;
                (runs_at(mid) ? hi : lo) = mid;
            }
            f.smallest_budget = hi;
        }
    }
    return f;
}

std::string predicted_oom(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed) {
    const MemoryEstimate e = estimate_memory(cell);
    const std::int64_t peak = e.device_total() + fixed.largest;
    if (peak <= capacity) return {};
    const auto b = [](std::int64_t n) { return human_bytes(static_cast<double>(n)); };
    return "predicted OOM: its peak is predicted at " + b(peak) + " (weights " + b(e.weights) + ", activations " +
           b(e.activations) + ", scores " + b(e.scores) + ", workspace " + b(e.workspace) +
           ", the CUDA context and libraries " + b(fixed.largest) + " as measured on " + fixed.gpu + "), above the " +
           b(capacity) + " the GPU has; --force runs it anyway";
}

}  // namespace sweetspot
