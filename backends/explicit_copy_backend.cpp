#include "backends/explicit_copy_backend.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "backends/backend_registry.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {
namespace {

std::string all_slots_held(int slots) {
    return "while all " + std::to_string(slots) + " slots hold units not yet released";
}

}  // namespace

ExplicitCopyBackend::ExplicitCopyBackend(const BackendConfig& config)
    : config_(config), slot_streams_(config.streams, config.compute_stream),
      ring_("explicit-copy backend", all_slots_held) {}

void ExplicitCopyBackend::place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) {
    check_schedule(config_.backend, schedule);
    if (schedule.updates() && config_.optimizer != StateHome::host) {
        throw std::logic_error("explicit-copy backend: training keeps the optimizer's state on the host (optimizer = "
                               "\"host\"); it was configured for " + std::string(enum_name(config_.optimizer)) + " memory");
    }
    unit_bytes_ = unit_bytes(layout, config_.dtype);
    plan_ = plan_residency(unit_bytes_, config_.budget_bytes, streaming_slots(config_.prefetch_depth), config_.resident);

    // Resident units live in device memory only; the streamed ones in page-locked memory, which the
    // copies stream from.
    device_ = plan_.device_layout(unit_bytes_, kUnitAlignmentBytes);
    device_weights_ = allocate_device(device_.total_bytes);
    host_ = plan_.host_layout(unit_bytes_, kPinnedUnitAlignmentBytes);
    std::vector<int> streamed;  // the unit in each piece of the page-locked memory
    for (std::size_t u = 0; u < unit_bytes_.size(); ++u)
        if (!plan_.resident[u]) streamed.push_back(static_cast<int>(u));
    const auto on_device = [&](std::size_t u) { return device_weights_.get() + device_.unit_offsets[u]; };
    host_weights_ = PinnedHostMemory{};
    if (fill.fills_device()) {
        // Kernels write every unit where it stays: the resident ones in device memory, the streamed
        // ones over the link into page-locked memory, each while the next is being pinned.
        for (std::size_t u = 0; u < unit_bytes_.size(); ++u)
            if (plan_.resident[u]) fill.fill_device(static_cast<int>(u), config_.dtype, on_device(u), config_.compute_stream);
        if (!streamed.empty())
            host_weights_ = PinnedHostMemory(host_.total_bytes, host_.starts, [&](std::size_t piece, std::byte* device) {
                fill.fill_device(streamed[piece], config_.dtype, device, config_.compute_stream);
            });
        CUDA_CHECK(cudaStreamSynchronize(config_.compute_stream));
    } else {
        if (!streamed.empty()) host_weights_ = PinnedHostMemory(host_.total_bytes, host_.starts, {});
        // Made on the host's cores: the streamed units in place, the resident ones staged and copied.
        std::vector<float> scratch;
        std::vector<std::byte> staged;
        for (std::size_t u = 0; u < unit_bytes_.size(); ++u) {
            const int unit = static_cast<int>(u);
            if (!plan_.resident[u]) {
                fill_unit_as(layout, config_.dtype, fill, unit, host_weights_.get() + host_.unit_offsets[u], scratch);
                continue;
            }
            staged.resize(static_cast<std::size_t>(unit_bytes_[u]));
            fill_unit_as(layout, config_.dtype, fill, unit, staged.data(), scratch);
            CUDA_CHECK(cudaMemcpy(on_device(u), staged.data(), staged.size(), cudaMemcpyHostToDevice));
        }
    }
    slot_streams_.make_slots(plan_.slots);
    ring_.place(plan_.resident, schedule.reads(), plan_.slots, config_.prefetch_depth);
    gradients_.clear();
    host_optimizer_.clear();
    if (schedule.updates()) {
        gradients_.place(plan_, unit_bytes_);
        host_optimizer_.place(layout, fill, plan_.resident_unit_bytes(unit_bytes_), config_.compute_stream);
    }
    held_.assign(unit_bytes_.size(), false);
    // place() is outside the timed region: leave nothing in flight.
    CUDA_CHECK(cudaDeviceSynchronize());
    reset_residency();
}

void ExplicitCopyBackend::reset_residency() {
    // Copies of an aborted step may still be running into the slots or out of the gradient slots;
    // the next step starts with empty slots and must not overlap the previous one (this is outside
    // the timed region).
    slot_streams_.synchronize();
    if (training()) gradients_.start_step();
    ring_.start_step();
    link_ = {};
    std::fill(held_.begin(), held_.end(), false);
}

std::size_t ExplicitCopyBackend::checked(int unit) const {
    if (unit < 0 || unit >= static_cast<int>(unit_bytes_.size()))
        throw std::out_of_range("explicit-copy backend: no unit " + std::to_string(unit));
    return static_cast<std::size_t>(unit);
}

std::byte* ExplicitCopyBackend::slot_pointer(int slot) const {
    return device_weights_.get() + device_.slots_offset + slot * device_.slot_stride;
}

// The slot was last used by streamed unit seq - S, which the ring saw released: the copy waits on
// the event recorded at that release, so the unit's kernels are done before the slot is overwritten.
void ExplicitCopyBackend::fetch(const SlotRing::Entry& entry) {
    // Named for its unit: the ring fetches ahead, inside another unit's ranges.
    const NvtxRange range("fetch " + WeightLayout::unit_name(entry.unit, static_cast<int>(unit_bytes_.size())));
    // The copy reads the page-locked weights an overlapped update writes.
    if (update_progress_ != nullptr) update_progress_->wait_for(entry.unit);
    const auto unit = static_cast<std::size_t>(entry.unit);
    const cudaStream_t stream = slot_streams_.fetch_stream(entry.seq);
    slot_streams_.wait_released(entry.slot, stream);
    CUDA_CHECK(cudaMemcpyAsync(slot_pointer(entry.slot), host_weights_of(unit), static_cast<std::size_t>(unit_bytes_[unit]),
                               cudaMemcpyHostToDevice, stream));
    slot_streams_.mark_fetched(entry.slot, stream);
    link_.to_device += unit_bytes_[unit];
}

const void* ExplicitCopyBackend::acquire(int unit) {
    const auto slot = ring_.acquire(unit, *this);
    held_[checked(unit)] = true;
    if (slot) return slot_pointer(*slot);
    return device_weights_.get() + device_.unit_offsets[static_cast<std::size_t>(unit)];
}

void ExplicitCopyBackend::release(int unit) {
    ring_.release(unit, *this);
    const std::size_t u = checked(unit);
    held_[u] = false;
    if (training()) link_.to_host += gradients_.released(unit, config_.compute_stream);
}

void* ExplicitCopyBackend::gradient(int unit) {
    const std::size_t u = checked(unit);
    if (!training()) throw std::logic_error("explicit-copy backend: no gradients: it was not placed for training");
    return gradients_.gradient(unit, held_[u], config_.compute_stream);
}

UnitUpdate ExplicitCopyBackend::acquire_update(int unit) {
    const std::size_t u = checked(unit);
    if (!training()) throw std::logic_error("explicit-copy backend: no optimizer state: it was not placed for training");
    if (plan_.resident[u])
        return host_optimizer_.staged(unit, device_weights_.get() + device_.unit_offsets[u],
                                      gradients_.resident_gradient(unit));
    return host_optimizer_.streamed(unit, host_weights_of(u), gradients_.host_gradient(unit), gradients_.copied(unit));
}

const void* ExplicitCopyBackend::stored_weights(int unit) {
    const std::size_t u = checked(unit);
    if (plan_.resident[u]) return device_weights_.get() + device_.unit_offsets[u];
    return host_weights_of(u);
}

PlacementStats ExplicitCopyBackend::placement() const {
    PlacementStats s;
    s.resident_bytes = plan_.resident_bytes;
    s.streamed_bytes = plan_.streamed_bytes;
    s.device_weight_bytes = device_.total_bytes;
    s.pinned_host_bytes = host_.total_bytes;
    if (training()) {
        // The registry's explicit-copy TrainingState footprint, as placed.
        s.training_state_bytes = device_.total_bytes;
        s.pinned_host_bytes += host_.total_bytes + host_optimizer_.staging_bytes();
    }
    s.resident_units = plan_.resident_units();
    s.streamed_units = plan_.streamed_units();
    s.slots = plan_.slots;
    return s;
}

}  // namespace sweetspot
