#include "backends/uvm_prefetch_backend.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {
namespace {

std::string replaced_unit_not_released(int) { return "before the unit it replaces was released"; }

}  // namespace

UvmPrefetchBackend::UvmPrefetchBackend(const BackendConfig& config)
    : config_(config), slot_streams_(config.streams, config.compute_stream),
      ring_("uvm-prefetch backend", replaced_unit_not_released) {}

void UvmPrefetchBackend::place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) {
    check_schedule(config_.backend, schedule);
    if (schedule.updates() && config_.optimizer != StateHome::host) {
        throw std::logic_error("uvm-prefetch backend: training keeps the optimizer's state on the host (optimizer = "
                               "\"host\"); it was configured for " + std::string(enum_name(config_.optimizer)) + " memory");
    }
    // Plan before allocating: an impossible budget is reported without touching the GPU.
    const auto bytes = unit_bytes(layout, config_.dtype);
    // A budget that holds every unit keeps them all resident (prefetched once here), as a smart
    // system would; otherwise the plan decides which units stream through the slots.
    const auto plan =
        plan_residency(bytes, config_.budget_bytes, streaming_slots(config_.prefetch_depth), config_.resident);
    stats_ = PlacementStats{};
    stats_.resident_bytes = plan.resident_bytes;
    stats_.streamed_bytes = plan.streamed_bytes;
    stats_.device_weight_bytes = plan.device_bytes();
    stats_.resident_units = plan.resident_units();
    stats_.streamed_units = plan.streamed_units();
    stats_.slots = plan.slots;

    // Until the new weights exist, acquire and release know no unit.
    ring_.clear();
    weights_.reset();
    weights_.emplace(layout, config_.dtype, fill, config_.allow_oversubscription, plan.resident);
    if (config_.evict == UvmEvict::read_mostly)
        for (int u = 0; u < weights_->units(); ++u)
            if (!schedule.updates() || !plan.resident[static_cast<std::size_t>(u)]) weights_->set_read_mostly(u);

    for (std::size_t u = 0; u < bytes.size(); ++u)
        if (plan.resident[u]) weights_->prefetch_to_device(static_cast<int>(u), evict_stream_.get());
    slot_streams_.make_slots(plan.slots);
    evicted_.clear();
    for (int s = 0; s < plan.slots; ++s) evicted_.emplace_back();
    ring_.place(plan.resident, schedule.reads(), plan.slots, config_.prefetch_depth);
    unit_bytes_ = bytes;
    resident_ = plan.resident;
    gradients_.clear();
    host_optimizer_.clear();
    if (schedule.updates()) {
        gradients_.place(plan, bytes);
        host_optimizer_.place(layout, fill, plan.resident_unit_bytes(bytes), config_.compute_stream);
    }
    held_.assign(bytes.size(), false);
    link_ = {};
    CUDA_CHECK(cudaDeviceSynchronize());
}

void UvmPrefetchBackend::reset_residency() {
    if (!weights_) return;
    slot_streams_.synchronize();
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    if (training()) gradients_.start_step();
    for (int u = 0; u < weights_->units(); ++u)
        if (!ring_.resident(u)) weights_->evict(u, config_.evict, evict_stream_.get());
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    ring_.start_step();
    link_ = {};
    std::fill(held_.begin(), held_.end(), false);
}

// Evicts a released streamed unit before its room in the budget is used again.
void UvmPrefetchBackend::vacate(const SlotRing::Entry& entry) {
    const NvtxRange range("evict " + WeightLayout::unit_name(entry.unit, static_cast<int>(unit_bytes_.size())));
    weights_->evict_after(entry.unit, slot_streams_.released(entry.slot), config_.evict, evict_stream_.get());
    if (config_.evict == UvmEvict::migrate) evicted_[static_cast<std::size_t>(entry.slot)].record(evict_stream_.get());
}

// Streamed unit `seq` takes the room unit seq - S left. A migration back to the host is
// stream-ordered, so the work that needs the room waits for it on the GPU instead of the host
// waiting.
void UvmPrefetchBackend::wait_for_eviction(const SlotRing::Entry& entry, cudaStream_t stream) const {
    if (config_.evict == UvmEvict::migrate && entry.seq >= ring_.slots())
        evicted_[static_cast<std::size_t>(entry.slot)].wait_on(stream);
}

void UvmPrefetchBackend::fetch(const SlotRing::Entry& entry) {
    // Named for its unit: the ring fetches ahead, inside another unit's ranges.
    const NvtxRange range("fetch " + WeightLayout::unit_name(entry.unit, static_cast<int>(unit_bytes_.size())));
    // The prefetch moves the managed pages an overlapped update writes.
    if (update_progress_ != nullptr) update_progress_->wait_for(entry.unit);
    if (config_.prefetch_depth == 0) {
        // Without prefetch the unit's kernels fault it in: they must start after the migration
        // that made room for it.
        wait_for_eviction(entry, slot_streams_.compute());
        return;
    }
    const cudaStream_t stream = slot_streams_.fetch_stream(entry.seq);
    wait_for_eviction(entry, stream);
    weights_->prefetch_to_device(entry.unit, stream);
    slot_streams_.mark_fetched(entry.slot, stream);
    link_.to_device += weights_->unit_bytes(entry.unit);
}

void UvmPrefetchBackend::await_fetch(const SlotRing::Entry& entry) {
    // jit reproduces cuda-uvm-gpt2, which did not wait for its prefetches: a kernel touching pages
    // still in flight faults on them and the driver orders the two.
    if (look_ahead()) slot_streams_.await_fetched(entry.slot);
}

std::size_t UvmPrefetchBackend::checked(int unit) const {
    if (!weights_ || unit < 0 || unit >= weights_->units())
        throw std::out_of_range("uvm-prefetch backend: no unit " + std::to_string(unit));
    return static_cast<std::size_t>(unit);
}

const void* UvmPrefetchBackend::acquire(int unit) {
    ring_.acquire(unit, *this);
    held_[checked(unit)] = true;
    return weights_->unit_pointer(unit);
}

void UvmPrefetchBackend::release(int unit) {
    ring_.release(unit, *this);
    held_[checked(unit)] = false;
    if (training()) link_.to_host += gradients_.released(unit, config_.compute_stream);
}

void* UvmPrefetchBackend::gradient(int unit) {
    const std::size_t u = checked(unit);
    if (!training()) throw std::logic_error("uvm-prefetch backend: no gradients: it was not placed for training");
    return gradients_.gradient(unit, held_[u], config_.compute_stream);
}

UnitUpdate UvmPrefetchBackend::acquire_update(int unit) {
    const std::size_t u = checked(unit);
    if (!training()) throw std::logic_error("uvm-prefetch backend: no optimizer state: it was not placed for training");
    if (resident_[u]) return host_optimizer_.staged(unit, weights_->unit_pointer(unit), gradients_.resident_gradient(unit));
    return host_optimizer_.streamed(unit, weights_->unit_pointer(unit), gradients_.host_gradient(unit),
                                    gradients_.copied(unit));
}

PlacementStats UvmPrefetchBackend::placement() const {
    PlacementStats s = stats_;
    if (training()) {
        // The registry's uvm-prefetch TrainingState footprint, as placed.
        s.training_state_bytes = gradients_.device_bytes();
        s.pinned_host_bytes += gradients_.host_bytes() + host_optimizer_.staging_bytes();
    }
    return s;
}

}  // namespace sweetspot
