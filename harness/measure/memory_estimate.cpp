#include "harness/measure/memory_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "base/number_text.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/step_check.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/compute/train_arena.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

MemoryEstimate estimate_memory(const CellParams& cell) { return estimate_memory(cell, cell.batch_shape()); }

MemoryEstimate estimate_memory(const CellParams& cell, const BatchShape& shape) {
    const BackendTraits& backend = backend_traits(cell.backend);
    const BackendConfig config = backend_config(cell);
    const WeightLayout layout_of_weights = WeightLayout::for_model(cell.model);
    const auto units = unit_bytes(layout_of_weights, cell.dtype);
    if (const std::string why = backend.cannot_honour(config, units); !why.empty()) throw std::invalid_argument(why);

    MemoryEstimate e;
    const WeightFootprint weights = backend.footprint(config, units);
    e.weights = weights.device_bytes;
    e.pinned_host = weights.pinned_host_bytes;
    e.managed = weights.managed_bytes;
    e.host_weights = weights.host_bytes;
    // The driver keeps on the device the managed pages it migrated there, in a forward or a
    // training step alike.
    if (backend.managed_weights) e.retained_managed = std::max<std::int64_t>(0, cell.weight_bytes() - e.weights);
    const auto logits_bytes = [&](std::int64_t rows) { return rows * cell.model.vocab_size * std::int64_t{sizeof(float)}; };
    if (cell.mode == Mode::train) {
        const WeightFootprint state =
            backend.training->footprint(config, units, unit_bytes(layout_of_weights, DType::fp32));
        e.training_state = state.device_bytes;
        e.pinned_staging = state.pinned_host_bytes;
        e.host_training_state = state.host_bytes - state.pinned_host_bytes;
    }
    const std::optional<TrainingCheckShape> check = cell.mode == Mode::train ? training_check_shape(cell) : std::nullopt;
    const bool prefix_check = check && !check->full;
    if (!backend.needs_gpu && cell.mode == Mode::train) {
        // The step's buffers, the check's copies, and a prefix check's step and scratch beside them.
        // Over the rows of the cell's shape, as the forward's below.
        e.host_buffers = CpuBackprop::buffer_bytes_for(cell.model, cell.batch_shape()) + checked_step_host_bytes(cell) +
                         check_reference_host_bytes(cell);
        if (prefix_check)
            e.host_buffers += CpuBackprop::buffer_bytes_for(cell.model, check->shape) + check_step_scratch_bytes(cell);
        return e;
    }
    if (!backend.needs_gpu) {
        // Over the rows of the cell's shape: a packed batch's real tokens, a padded one's padding too.
        e.host_buffers = CpuForward::activation_bytes_for(cell.model, shape) + logits_bytes(shape.rows());
        return e;
    }
    if (cell.mode == Mode::train) {
        // The step's one allocation (train_arena.hpp), the logits and the backward's scratch in it.
        e.activations = TrainArena(cell.model, cell.dtype, shape, cell.variant, cell.recompute).total;
        e.workspace = gemm_device_bytes(cell.dtype, cell.fp32_gemm());
        if (prefix_check)
            e.check_step = TrainArena(cell.model, cell.dtype, check->shape, cell.variant, cell.recompute).total +
                           gemm_device_bytes(cell.dtype, cell.fp32_gemm()) + check_step_scratch_bytes(cell);
        e.host_buffers = checked_step_host_bytes(cell);
        e.host_reference = check_reference_host_bytes(cell);
        return e;
    }
    const BatchShape reference = host_reference_shape(cell);
    e.host_buffers = 2 * logits_bytes(reference.rows());
    const auto fp32_units = unit_bytes(layout_of_weights, DType::fp32);
    e.host_reference = *std::max_element(fp32_units.begin(), fp32_units.end()) +
                       CpuForward::activation_bytes_for(cell.model, reference);

    const ActivationLayout layout = activation_layout(cell.model, cell.dtype, shape,
                                                      !cell.variant.has(Fusion::flash_attention));
    e.scores = layout.scores_bytes;
    e.activations = layout.total_bytes - layout.scores_bytes;
    e.workspace = gemm_device_bytes(cell.dtype, cell.fp32_gemm());
    e.managed_activations = cell.activations == Activations::managed;
    if (e.managed_activations) e.managed += layout.total_bytes;
    return e;
}

// The driver's overhead followed the element size on every model measured, GPT-2 1.5B to 13B
// (docs/benchmarks-history.md has the figures), so another dtype's measurement is scaled by it.
std::optional<std::int64_t> FixedCost::managed_overhead_for(DType dtype) const {
    if (const auto it = managed_overhead.find(dtype); it != managed_overhead.end()) return it->second;
    std::optional<std::int64_t> scaled;
    for (const auto& [measured, bytes] : managed_overhead) {
        const auto b = bytes * static_cast<std::int64_t>(dtype_size(dtype)) / static_cast<std::int64_t>(dtype_size(measured));
        scaled = std::max(scaled.value_or(b), b);
    }
    return scaled;
}

std::optional<std::int64_t> FixedCost::host_process_for(const HostProcessKey& key) const {
    if (const auto it = host_process.find(key); it != host_process.end()) return it->second;
    std::optional<std::int64_t> same_case, same_backend, any;
    const auto raise = [](std::optional<std::int64_t>& to, std::int64_t bytes) { to = std::max(to.value_or(bytes), bytes); };
    for (const auto& [measured, bytes] : host_process) {
        if (measured.backend == key.backend && measured.reference == key.reference) raise(same_case, bytes);
        if (measured.backend == key.backend) raise(same_backend, bytes);
        raise(any, bytes);
    }
    return same_case ? same_case : same_backend ? same_backend : any;
}

std::string FixedCost::kernel_set(Mode mode, DType dtype, const Variant& variant) {
    return std::string(enum_name(mode)) + " " + std::string(enum_name(dtype)) + " " + variant.text();
}

namespace {

// One ok GPU cell's measured peak and what it allocated, for the calibration; and on the host,
// its process's peak resident memory less the host memory the estimator accounted for when it ran.
struct MeasuredCell {
    const BackendTraits* backend;
    DType dtype;
    // activations: what the cell held on the device beside its weights, its activations and, for a
    // training cell, its training state (a UVM backend's gradients in device memory).
    std::int64_t peak, allocated, activations, weight_bytes;
    std::int64_t pinned;  // page-locked bytes (every weight byte for explicit-copy before schema 9)
    std::optional<std::int64_t> host_beyond;
    bool computed_reference = false;
    std::string kernels{};  // FixedCost::kernel_set
    std::int64_t beyond() const { return peak - allocated; }
};

// The calibration of one GPU and driver from its cells (none when no cell measures the CUDA
// context and libraries).
std::optional<FixedCost> calibrate(std::string gpu, std::string driver, const std::vector<MeasuredCell>& cells) {
    const auto own = [](const MeasuredCell& c) { return !c.backend->managed_weights && !c.backend->pinned_weights; };
    const bool any_own = std::any_of(cells.begin(), cells.end(), own);
    FixedCost f;
    f.gpu = std::move(gpu);
    f.driver = std::move(driver);
    for (const MeasuredCell& c : cells) {
        if (c.backend->managed_weights || (any_own && !own(c))) continue;
        f.largest = f.cells == 0 ? c.beyond() : std::max(f.largest, c.beyond());
        f.smallest = f.cells == 0 ? c.beyond() : std::min(f.smallest, c.beyond());
        ++f.cells;
    }
    if (f.cells == 0) return std::nullopt;
    double covariance = 0, variance = 0;
    for (const MeasuredCell& c : cells) {
        if (c.backend->pinned_weights && any_own) {
            const auto w = static_cast<double>(c.pinned);
            covariance += static_cast<double>(c.beyond() - f.largest) * w;
            variance += w * w;
        }
        if (c.backend->managed_weights) {
            const std::int64_t overhead = c.peak - f.largest - c.activations - c.weight_bytes;
            const auto [it, added] = f.managed_overhead.emplace(c.dtype, overhead);
            if (!added) it->second = std::max(it->second, overhead);
        }
        if (c.host_beyond) {
            const auto [it, added] =
                f.host_process.emplace(FixedCost::HostProcessKey{c.backend->id, c.computed_reference, c.kernels}, *c.host_beyond);
            if (!added) it->second = std::max(it->second, *c.host_beyond);
        }
    }
    if (variance > 0) f.per_pinned_byte = std::max(0.0, covariance / variance);
    return f;
}

}  // namespace

std::vector<FixedCost> measured_fixed_costs(Database& db) {
    // The cell's measured peak where NVML read one (schema 6 on), else the used memory after its
    // first iteration.
    const std::string used =
        has_column(db, "cells", "gpu_peak_bytes") ? "coalesce(c.gpu_peak_bytes, c.device_used_bytes)" : "c.device_used_bytes";
    // Before schema 9 no cell stored the host memory the estimator accounts for, so none measures the
    // host's other memory.
    const std::string host_terms =
        has_column(db, "cells", "predicted_host_alloc_bytes") ? "c.predicted_host_alloc_bytes" : "NULL";
    const std::string pinned = has_column(db, "cells", "pinned_host_bytes") ? "c.pinned_host_bytes" : "NULL";
    const std::string reference =
        has_column(db, "cells", "check_reference_computed") ? "coalesce(c.check_reference_computed, 0)" : "0";
    // Every cell was an inference before cells had a mode.
    const std::string mode = has_column(db, "cells", "mode") ? "c.mode" : "'infer'";
    // A training cell's backend also held its gradients and optimizer state (schema 16 on).
    const std::string training_state =
        has_column(db, "cells", "training_state_bytes") ? " + coalesce(c.training_state_bytes, 0)" : "";
    // A training cell checked on a prefix step (schema 18 on) allocated that step's buffers first,
    // freed before its own: its peak held the larger of the two. No cell measures the prefix
    // step's allocation apart, so it is the estimator's, whose plan is the one the step allocates.
    const std::string activations = has_column(db, "cells", "predicted_check_step_bytes")
                                        ? "max(c.activation_bytes, coalesce(c.predicted_check_step_bytes, 0))"
                                        : "c.activation_bytes";
    auto st = db.prepare("SELECT coalesce(r.gpu_name, ''), coalesce(r.gpu_driver, ''), c.backend, c.dtype, " + used +
                         ", c.device_weight_bytes + " + activations + training_state +
                         ", c.activation_bytes" + training_state + ", c.weight_bytes, "
                         "c.peak_host_rss_bytes, " + host_terms + ", " + pinned + ", " + reference + ", " + mode + ", c.variant" +
                         " FROM cells c JOIN runs r USING (run_id)"
                         " WHERE c.status = 'ok' AND " + used + " IS NOT NULL"
                         " AND c.device_weight_bytes IS NOT NULL AND c.activation_bytes IS NOT NULL"
                         " ORDER BY 1, 2");
    std::vector<FixedCost> costs;
    std::string gpu, driver;
    std::vector<MeasuredCell> cells;
    const auto flush = [&] {
        if (auto f = calibrate(gpu, driver, cells)) costs.push_back(std::move(*f));
        cells.clear();
    };
    while (st.step()) {
        const auto backend = parse_enum<BackendId>(st.text(2));
        const auto dtype = parse_enum<DType>(st.text(3));
        if (!backend || !dtype || !backend_traits(*backend).needs_gpu) continue;
        if (st.text(0) != gpu || st.text(1) != driver) {
            flush();
            gpu = st.text(0);
            driver = st.text(1);
        }
        const BackendTraits& traits = backend_traits(*backend);
        const std::int64_t weight_bytes = st.int64(7);
        const std::int64_t pinned_bytes = !st.is_null(10) ? st.int64(10) : traits.pinned_weights ? weight_bytes : 0;
        MeasuredCell cell{&traits, *dtype, st.int64(4), st.int64(5), st.int64(6), weight_bytes, pinned_bytes, std::nullopt};
        if (!st.is_null(8) && !st.is_null(9)) cell.host_beyond = st.int64(8) - st.int64(9);
        cell.computed_reference = st.int64(11) != 0;
        const auto mode_of = parse_enum<Mode>(st.text(12));
        const auto variant = Variant::parse(st.text(13));
        if (mode_of && variant) cell.kernels = FixedCost::kernel_set(*mode_of, *dtype, *variant);
        cells.push_back(cell);
    }
    flush();
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

Fit fit(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed) {
    const auto peak_fits = [&](const CellParams& c) {
        return cell_impossible_reason(c).empty() && predicted_need(estimate_memory(c), fixed) <= capacity;
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

std::int64_t predicted_need(const MemoryEstimate& e, const FixedCost& fixed) {
    return e.device_total() + fixed.largest + std::llround(fixed.per_pinned_byte * static_cast<double>(e.pinned_total()));
}

std::optional<std::int64_t> predicted_peak(const CellParams& cell, const MemoryEstimate& e, const FixedCost& fixed) {
    if (!backend_traits(cell.backend).managed_weights) return predicted_need(e, fixed);
    const std::optional<std::int64_t> overhead = fixed.managed_overhead_for(cell.dtype);
    if (!overhead) return std::nullopt;
    return predicted_need(e, fixed) + e.retained_managed + *overhead;
}

std::optional<std::int64_t> predicted_host_peak(const CellParams& cell, const MemoryEstimate& e, const FixedCost& fixed,
                                                bool reference_runs) {
    const std::optional<std::int64_t> process =
        fixed.host_process_for({cell.backend, reference_runs, FixedCost::kernel_set(cell.mode, cell.dtype, cell.variant)});
    if (!process) return std::nullopt;
    return e.host_total(reference_runs) + *process;
}

std::string predicted_oom(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed) {
    const MemoryEstimate e = estimate_memory(cell);
    const std::int64_t need = predicted_need(e, fixed);
    if (need <= capacity) return {};
    const auto b = [](std::int64_t n) { return human_bytes(static_cast<double>(n)); };
    const std::int64_t mapping = need - e.device_total() - fixed.largest;
    const std::string state = e.training_state > 0 ? ", training state " + b(e.training_state) : "";
    return "predicted OOM: it needs " + b(need) + " (weights " + b(e.weights) + state + ", activations " + b(e.activations) +
           ", scores " + b(e.scores) + ", workspace " + b(e.workspace) + ", the CUDA context and libraries " +
           b(fixed.largest) + (mapping > 0 ? ", page tables for its pinned memory " + b(mapping) : "") +
           " as measured on " + fixed.gpu + "), above the " + b(capacity) + " the GPU has; --force runs it anyway";
}

std::string predicted_host_oom(const CellParams& cell, std::int64_t available) {
    const MemoryEstimate e = estimate_memory(cell);
    const std::int64_t need = e.pinned_total() + e.managed + e.host_training_state;
    if (need <= available) return {};
    const auto b = [](std::int64_t n) { return human_bytes(static_cast<double>(n)); };
    const std::string state = e.host_training_state > 0 ? ", training state " + b(e.host_training_state) : "";
    return "predicted host OOM: it needs " + b(need) + " of host memory (page-locked " + b(e.pinned_total()) + ", managed " +
           b(e.managed) + state + "), above the " + b(available) + " the host has available; --force runs it anyway";
}

}  // namespace sweetspot
