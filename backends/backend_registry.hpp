#pragma once
// What each backend is and can do, declared once, and the one place that makes a backend. The
// harness asks this registry (which names exist, which need a GPU, which dtypes they compute in,
// whether a configuration can be honoured, whether one can run here) and never spells a
// backend's name itself.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"

namespace sweetspot {

// What a backend allocates for a model's weights, decided from the configuration and the units'
// sizes alone, as the backend's place() will allocate them: the memory estimator's weight terms.
struct WeightFootprint {
    // Device memory the weights take: cudaMalloc'd by device and explicit-copy (resident units
    // and streaming slots); for uvm and uvm-prefetch, what the backend lets the GPU hold of the
    // managed allocation (the budget, or the plan's resident units and slots), as they report it.
    std::int64_t device_bytes = 0;
    std::int64_t pinned_host_bytes = 0;  // the page-locked copy of the units explicit-copy streams
    std::int64_t managed_bytes = 0;      // the managed allocation, wherever the driver keeps its pages
    // Host memory the weights hold at the cell's peak: explicit-copy's page-locked copy, the
    // managed pages the driver keeps on the host once the weights are placed (every unit for
    // uvm, the streamed units for uvm-prefetch), the host backend's fp32 units.
    std::int64_t host_bytes = 0;
};

// Where a training step's state lives on a backend: the gradients (one buffer per unit, as the
// weights, in the cell's dtype), and the optimizer's (fp32 master weights where the dtype is
// narrower, AdamW's two moments in fp32) wherever the backend can keep it (StateHome).
struct TrainingState {
    StateHome gradients = StateHome::device;
    // Where it can keep the optimizer's state: the `optimizer` axis's values it honours.
    std::vector<StateHome> optimizer_homes = {StateHome::device};
    // The bytes of that state as place() allocates it for the config's optimizer placement, from
    // the units' sizes in the config's dtype and in fp32: the memory estimator's training terms.
    std::function<WeightFootprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes,
                                  std::span<const std::int64_t> fp32_unit_bytes)>
        footprint;

    bool keeps_optimizer_on(StateHome home) const;
};

struct BackendTraits {
    BackendId id;
    // Places weights for the GPU forward (with its fused variants and managed activations); the
    // others feed the CPU forward, which has neither.
    bool needs_gpu = true;
    // Runs with a budget below the weights, streaming or evicting units (its streams, prefetch
    // and budget then shape the measurement).
    bool runs_under_budget = false;
    // Keeps the weights in managed memory, whose pages the driver moves: the device memory such a
    // cell uses is not all its own allocations.
    bool managed_weights = false;
    // Streams from a page-locked copy of the weights in host memory, which the GPU's page tables
    // map: device memory that grows with the weights without being an allocation of the cell.
    bool pinned_weights = false;
    std::vector<DType> dtypes;
    // Why this backend cannot honour `config` for units of these sizes (in the config's dtype),
    // decided on the CPU without touching a GPU; empty when it can.
    std::function<std::string(const BackendConfig& config, std::span<const std::int64_t> unit_bytes)> cannot_honour;
    // The weights' footprint for a configuration cannot_honour accepts.
    std::function<WeightFootprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes)> footprint;
    // The placement axes (harness/matrix/axes.cpp) whose values change what the backend does; the
    // others have no effect on its cells, which the matrix gives their defaults so that no workload
    // is measured twice under two names.
    std::vector<std::string_view> placement_axes;
    // Where it keeps a training step's state; none for a backend that does not train, and why.
    std::optional<TrainingState> training;
    std::string_view no_training_reason = {};

    bool computes_in(DType dtype) const;
    bool uses(std::string_view axis) const;
};

// Every backend, in the order of BackendId.
const std::vector<BackendTraits>& backend_registry();
const BackendTraits& backend_traits(BackendId backend);

// Empty when `backend` can run in this build and on this machine; otherwise why not.
std::string backend_unavailable_reason(BackendId backend);
// Throws std::logic_error when `backend` cannot follow `schedule` (an update on a backend that does
// not train): what each backend's place() checks first.
void check_schedule(BackendId backend, const UnitSchedule& schedule);
// Throws std::runtime_error when the backend is unavailable here.
std::unique_ptr<Backend> make_backend(const BackendConfig& config);

}  // namespace sweetspot
