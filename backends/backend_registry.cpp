#include "backends/backend_registry.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "backends/host_backend.hpp"
#include "backends/residency_plan.hpp"
#include "backends/unit_storage.hpp"

#ifdef SWEETSPOT_HAVE_CUDA
#include "kernels/compute/cuda_check.hpp"

#include "backends/device_backend.hpp"
#include "backends/explicit_copy_backend.hpp"
#include "backends/uvm_backend.hpp"
#include "backends/uvm_prefetch_backend.hpp"
#endif

namespace sweetspot {
namespace {

// A function, not a global: the registry may be built during another file's static
// initialisation (the matrix reader's list of names), before a global here would exist.
std::vector<DType> all_dtypes() { return {DType::fp32, DType::fp16, DType::bf16}; }

std::int64_t total_of(std::span<const std::int64_t> unit_bytes) {
    return std::accumulate(unit_bytes.begin(), unit_bytes.end(), std::int64_t{0});
}

std::string nothing_to_refuse(const BackendConfig&, std::span<const std::int64_t>) { return {}; }

std::string device_cannot_honour(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    const std::int64_t weights = total_of(unit_bytes);
    if (config.budget_bytes >= weights) return {};
    return "the device backend keeps all weights resident, and the budget (" + std::to_string(config.budget_bytes) +
           " bytes) is smaller than the weights (" + std::to_string(weights) + " bytes)";
}

// Decided by the same planner the backend places with, so an impossible cell is reported before
// any process or GPU is involved.
std::string streaming_cannot_honour(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    try {
        plan_residency(unit_bytes, config.budget_bytes, streaming_slots(config.prefetch_depth), config.resident);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return {};
}

std::string on_demand_cannot_honour(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    const auto largest = *std::max_element(unit_bytes.begin(), unit_bytes.end());
    if (config.budget_bytes >= largest) return {};
    return "a budget of " + std::to_string(config.budget_bytes) + " bytes cannot hold the largest layer (" +
           std::to_string(largest) + " bytes), which uvm must fault in whole";
}

// The host backend computes in fp32 only (its dtypes), so the units' bytes are its weights.
WeightFootprint host_footprint(const BackendConfig&, std::span<const std::int64_t> unit_bytes) {
    return {0, 0, 0, total_of(unit_bytes)};
}

WeightFootprint device_footprint(const BackendConfig&, std::span<const std::int64_t> unit_bytes) {
    return {pack_units(unit_bytes, kUnitAlignmentBytes).total_bytes, 0, 0, 0};
}

WeightFootprint explicit_copy_footprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    const ResidencyPlan plan =
        plan_residency(unit_bytes, config.budget_bytes, streaming_slots(config.prefetch_depth), config.resident);
    const std::int64_t pinned = plan.host_layout(unit_bytes, kPinnedUnitAlignmentBytes).total_bytes;
    return {plan.device_layout(unit_bytes, kUnitAlignmentBytes).total_bytes, pinned, 0, pinned};
}

WeightFootprint uvm_footprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    // Placing migrates every unit to the host; the forward faults them in.
    return {std::min(config.budget_bytes, total_of(unit_bytes)), 0,
            pack_units(unit_bytes, kManagedUnitAlignmentBytes).total_bytes, total_of(unit_bytes)};
}

WeightFootprint uvm_prefetch_footprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes) {
    const ResidencyPlan plan =
        plan_residency(unit_bytes, config.budget_bytes, streaming_slots(config.prefetch_depth), config.resident);
    return {plan.device_bytes(), 0, pack_units(unit_bytes, kManagedUnitAlignmentBytes).total_bytes, plan.streamed_bytes};
}

// The device backend's gradients (in the dtype, packed as the weights) and the optimizer's state
// where the config places it. On the device: AdamW's two moments in fp32 and, below fp32, the
// master weights. On the host: the master weights in every dtype (in fp32 too, the host's copy of
// the weights the update starts from), the moments, and the page-locked staging the units cross
// the link through (host_update_staging_bytes).
WeightFootprint device_training_footprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes,
                                          std::span<const std::int64_t> fp32_unit_bytes) {
    const std::int64_t gradients = pack_units(unit_bytes, kUnitAlignmentBytes).total_bytes;
    const std::int64_t fp32 = pack_units(fp32_unit_bytes, kUnitAlignmentBytes).total_bytes;
    if (config.optimizer == StateHome::host) {
        const std::int64_t staging = host_update_staging_bytes(unit_bytes);
        return {gradients, staging, 0, 3 * fp32 + staging};
    }
    const std::int64_t master = config.dtype == DType::fp32 ? 0 : fp32;
    return {gradients + 2 * fp32 + master, 0, 0, 0};
}

// The streaming backends' gradients (StreamedGradients) follow their residency plan: a resident
// unit's in device memory, a streamed unit's made in a ring of device gradient slots (as many as
// the weight slots, of the largest streamed unit) and copied out to its page-locked host buffer.
// explicit-copy's weights are laid out the same way, so each side holds as many gradient bytes as
// weight bytes. The optimizer is on the host (its only home): fp32 master weights and moments of
// every unit, and the page-locked staging that the resident units' gradients and new weights cross
// the link through (none when every unit streams: a streamed unit is updated in place, in
// explicit-copy's page-locked weights or uvm-prefetch's managed ones).
WeightFootprint streamed_training_footprint(const BackendConfig& config, std::span<const std::int64_t> unit_bytes,
                                            std::span<const std::int64_t> fp32_unit_bytes) {
    const ResidencyPlan plan =
        plan_residency(unit_bytes, config.budget_bytes, streaming_slots(config.prefetch_depth), config.resident);
    const std::int64_t gradients = plan.device_layout(unit_bytes, kUnitAlignmentBytes).total_bytes;
    const std::int64_t pinned_gradients = plan.host_layout(unit_bytes, kPinnedUnitAlignmentBytes).total_bytes;
    const std::int64_t staging = host_update_staging_bytes(plan.resident_unit_bytes(unit_bytes));
    const std::int64_t fp32 = pack_units(fp32_unit_bytes, kUnitAlignmentBytes).total_bytes;
    return {gradients, pinned_gradients + staging, 0, pinned_gradients + staging + 3 * fp32};
}

// The host backend's gradients and moments, a unit's fp32 size each (its weights are the master).
WeightFootprint host_training_footprint(const BackendConfig&, std::span<const std::int64_t>,
                                        std::span<const std::int64_t> fp32_unit_bytes) {
    return {0, 0, 0, 3 * total_of(fp32_unit_bytes)};
}

void check_config(const BackendConfig& config) {
    const std::string name(enum_name(config.backend));
    if (config.streams < 0)
        throw std::invalid_argument("backend '" + name + "': streams must be >= 0, got " + std::to_string(config.streams));
    if (config.prefetch_depth < -1) {
        throw std::invalid_argument("backend '" + name + "': prefetch depth must be -1 (jit), 0 (off) or a look-ahead >= 1, got " +
                                    std::to_string(config.prefetch_depth));
    }
}

}  // namespace

bool TrainingState::keeps_optimizer_on(StateHome home) const {
    return std::find(optimizer_homes.begin(), optimizer_homes.end(), home) != optimizer_homes.end();
}

bool BackendTraits::computes_in(DType dtype) const { return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end(); }

bool BackendTraits::uses(std::string_view axis) const {
    return std::find(placement_axes.begin(), placement_axes.end(), axis) != placement_axes.end();
}

const std::vector<BackendTraits>& backend_registry() {
    // Every GPU backend runs the GPU forward, whose activations and kernel launches are settings; a
    // budget bounds where the weights may be (device refuses one below them). Streams and a prefetch
    // depth shape the streaming backends, the resident policy those that plan residency, and the
    // eviction those whose weights are managed. What a training step recomputes, and where its
    // optimizer runs, are settings where a GPU backend trains.
    // Training keeps its state beside the weights on the backends that hold them all in one place;
    // explicit-copy and uvm-prefetch stream each unit in again for the backward, its gradient out,
    // and update on the host, where their streamed weights are; uvm, which leaves every movement to
    // faults, does not train.
    constexpr std::string_view faulting_not_yet =
        "training on weights brought in by faults alone (each unit faulted in again for the backward, its gradient "
        "sent out) is not implemented; uvm-prefetch trains";
    static const std::vector<BackendTraits> registry = {
        // id, needs_gpu, runs_under_budget, managed_weights, pinned_weights, dtypes, cannot_honour, footprint,
        // placement axes, training state (or why none)
        {BackendId::device, true, false, false, false, all_dtypes(), device_cannot_honour, device_footprint,
         {"budget", "activations", "launch", "recompute", "optimizer"},
         TrainingState{StateHome::device, {StateHome::device, StateHome::host}, device_training_footprint}},
        {BackendId::explicit_copy, true, true, false, true, all_dtypes(), streaming_cannot_honour, explicit_copy_footprint,
         {"streams", "prefetch", "budget", "resident", "activations", "launch", "recompute", "optimizer"},
         TrainingState{StateHome::host, {StateHome::host}, streamed_training_footprint}},
        {BackendId::uvm, true, true, true, false, all_dtypes(), on_demand_cannot_honour, uvm_footprint,
         {"budget", "evict", "activations", "launch"}, std::nullopt, faulting_not_yet},
        {BackendId::uvm_prefetch, true, true, true, false, all_dtypes(), streaming_cannot_honour, uvm_prefetch_footprint,
         {"streams", "prefetch", "budget", "resident", "evict", "activations", "launch", "recompute", "optimizer"},
         TrainingState{StateHome::host, {StateHome::host}, streamed_training_footprint}},
        {BackendId::host, false, false, false, false, {DType::fp32}, nothing_to_refuse, host_footprint, {},
         TrainingState{StateHome::host, {StateHome::host}, host_training_footprint}},
    };
    return registry;
}

const BackendTraits& backend_traits(BackendId backend) {
    const auto& registry = backend_registry();
    const auto found = std::find_if(registry.begin(), registry.end(), [&](const auto& b) { return b.id == backend; });
    if (found == registry.end())
        throw std::logic_error("backend '" + std::string(enum_name(backend)) + "' has no entry in the registry");
    return *found;
}

void check_schedule(BackendId backend, const UnitSchedule& schedule) {
    const BackendTraits& traits = backend_traits(backend);
    if (schedule.updates() && !traits.training)
        throw std::logic_error("backend '" + std::string(enum_name(backend)) + "' cannot update weights: " +
                               std::string(traits.no_training_reason));
}

std::string backend_unavailable_reason(BackendId backend) {
    if (!backend_traits(backend).needs_gpu) return {};
#ifdef SWEETSPOT_HAVE_CUDA
    const std::string why = gpu_unavailable_reason();
#else
    const std::string why = "built without CUDA";
#endif
    return why.empty() ? why : "backend '" + std::string(enum_name(backend)) + "' needs a GPU: " + why;
}

std::unique_ptr<Backend> make_backend(const BackendConfig& config) {
    if (auto why = backend_unavailable_reason(config.backend); !why.empty()) throw std::runtime_error(why);
    check_config(config);
    switch (config.backend) {
        case BackendId::host: return std::make_unique<HostBackend>();
#ifdef SWEETSPOT_HAVE_CUDA
        case BackendId::device: return std::make_unique<DeviceBackend>(config);
        case BackendId::explicit_copy: return std::make_unique<ExplicitCopyBackend>(config);
        case BackendId::uvm: return std::make_unique<UvmBackend>(config);
        case BackendId::uvm_prefetch: return std::make_unique<UvmPrefetchBackend>(config);
#else
        default: break;
#endif
    }
    throw std::logic_error("make_backend: backend '" + std::string(enum_name(config.backend)) +
                           "' is available but not constructed");
}

}  // namespace sweetspot
