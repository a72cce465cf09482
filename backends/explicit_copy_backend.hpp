#pragma once
// `explicit-copy` (FlexGen / ZeRO-Inference style): the units of the residency plan live in device
// memory only; the others live in pinned host memory, each unit pinned on its own, and are streamed
// in every forward into a ring of device slots (SlotRing) by cudaMemcpyAsync on the copy streams,
// ordered by the SlotStreams events:
//   copy of streamed unit k into slot k % S  waits for  released[slot]  (recorded on the compute
//   stream when the unit that used the slot before was released), then records fetched[slot];
//   acquire makes the compute stream wait for fetched[slot].
// With a look-ahead depth n >= 1 there are S = n + 1 slots and the copies of the next n streamed
// units are in flight while one is computed; with `jit` or `off` there is one slot and a unit is
// copied when it is acquired.
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/residency_plan.hpp"
#include "backends/slot_ring.hpp"
#include "backends/slot_streams.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

class ExplicitCopyBackend final : public Backend, private SlotRing::Device {
public:
    explicit ExplicitCopyBackend(const BackendConfig& config);

    // Throws std::invalid_argument when the budget cannot hold the streaming slots.
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    // Waits for the previous forward's work and empties the slots: streamed units are on the host only.
    void reset_residency() override;
    // Streamed units must be acquired and released in forward order, once per forward.
    const void* acquire(int unit) override;
    void release(int unit) override;
    PlacementStats placement() const override;

private:
    std::byte* slot_pointer(int slot) const;
    // SlotRing::Device: the copies into the slots and their events.
    void fetch(const SlotRing::Entry& entry) override;
    void await_fetch(const SlotRing::Entry& entry) override { slot_streams_.await_fetched(entry.slot); }
    void mark_released(const SlotRing::Entry& entry) override { slot_streams_.mark_released(entry.slot); }

    BackendConfig config_;
    SlotStreams slot_streams_;
    SlotRing ring_;

    std::vector<std::int64_t> unit_bytes_;
    ResidencyPlan plan_;
    ResidencyPlan::HostLayout host_;      // where the streamed units are in host_weights_
    PinnedHostMemory host_weights_;
    DeviceMemory device_weights_;            // resident units, then the slots
    ResidencyPlan::DeviceLayout device_;  // where the resident units and the slots are in device_weights_
};

}  // namespace sweetspot
