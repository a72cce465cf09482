#include "backends/explicit_copy_backend.hpp"

#include <string>

#include "backends/backend_registry.hpp"

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
    // place() is outside the timed region: leave nothing in flight.
    CUDA_CHECK(cudaDeviceSynchronize());
}

void ExplicitCopyBackend::reset_residency() {
    // Copies of an aborted forward may still be running into the slots; the next forward starts
    // with empty slots and must not overlap the previous one (this is outside the timed region).
    slot_streams_.synchronize();
    ring_.start_step();
}

std::byte* ExplicitCopyBackend::slot_pointer(int slot) const {
    return device_weights_.get() + device_.slots_offset + slot * device_.slot_stride;
}

// The slot was last used by streamed unit seq - S, which the ring saw released: the copy waits on
// the event recorded at that release, so the unit's kernels are done before the slot is overwritten.
void ExplicitCopyBackend::fetch(const SlotRing::Entry& entry) {
    const auto unit = static_cast<std::size_t>(entry.unit);
    const cudaStream_t stream = slot_streams_.fetch_stream(entry.seq);
    slot_streams_.wait_released(entry.slot, stream);
    CUDA_CHECK(cudaMemcpyAsync(slot_pointer(entry.slot), host_weights_.get() + host_.unit_offsets[unit],
                               static_cast<std::size_t>(unit_bytes_[unit]), cudaMemcpyHostToDevice, stream));
    slot_streams_.mark_fetched(entry.slot, stream);
}

const void* ExplicitCopyBackend::acquire(int unit) {
    if (const auto slot = ring_.acquire(unit, *this)) return slot_pointer(*slot);
    return device_weights_.get() + device_.unit_offsets[static_cast<std::size_t>(unit)];
}

void ExplicitCopyBackend::release(int unit) { ring_.release(unit, *this); }

PlacementStats ExplicitCopyBackend::placement() const {
    PlacementStats s;
    s.resident_bytes = plan_.resident_bytes;
    s.streamed_bytes = plan_.streamed_bytes;
    s.device_weight_bytes = device_.total_bytes;
    s.pinned_host_bytes = host_.total_bytes;
    s.resident_units = plan_.resident_units();
    s.streamed_units = plan_.streamed_units();
    s.slots = plan_.slots;
    return s;
}

}  // namespace sweetspot
