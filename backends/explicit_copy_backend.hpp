#pragma once
// `explicit-copy` (FlexGen / ZeRO-Inference style): the units of the residency plan live in device
// memory only; the others live in pinned host memory, each unit pinned on its own, and are streamed
// in the order the step's schedule reads them into a ring of device slots (SlotRing) by
// cudaMemcpyAsync on the copy streams, ordered by the SlotStreams events:
//   copy of streamed unit k into slot k % S  waits for  released[slot]  (recorded on the compute
//   stream when the unit that used the slot before was released), then records fetched[slot];
//   acquire makes the compute stream wait for fetched[slot].
// With a look-ahead depth n >= 1 there are S = n + 1 slots and the copies of the next n streamed
// units are in flight while one is computed; with `jit` or `off` there is one slot and a unit is
// copied when it is acquired.
//
// Training (UnitSchedule::training, optimizer = "host" only: the registry's TrainingState). The
// forward streams the units in, the backward streams them in again in reverse (the ring follows
// the schedule's reads, a unit read twice streamed twice). The budget bounds the weights as for
// inference; the gradients mirror the weights beside it, so a training cell's device memory for
// both is twice what the plan holds (StreamedGradients: a resident unit's gradient its own device
// buffer, a streamed unit's made in a device gradient slot and copied out to its page-locked host
// gradient when the backward releases it).
// The optimizer's state is on the host (HostOptimizerState: fp32 master weights, moments).
// A resident unit is updated as the device backend updates it: its gradient down through the
// staging, AdamW on the host, its new weights up. A streamed unit (UnitUpdate::streamed) is
// updated in place: its gradient is already in host memory (the step waits for gradient_copied
// instead of copying), and its new weights are written into the page-locked weights the next
// forward streams from. The link then carries, per step, the streamed weights twice and their
// gradients out (link_bytes_since_reset), and the resident units' gradients and weights (the
// step's update_link_bytes).
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_optimizer_state.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/residency_plan.hpp"
#include "backends/slot_ring.hpp"
#include "backends/slot_streams.hpp"
#include "backends/streamed_gradients.hpp"
#include "backends/unit_storage.hpp"
#include "base/item_progress.hpp"

namespace sweetspot {

class ExplicitCopyBackend final : public Backend, private SlotRing::Device {
public:
    explicit ExplicitCopyBackend(const BackendConfig& config);

    // Throws std::invalid_argument when the budget cannot hold the streaming slots.
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    // Waits for the previous step's work and empties the slots: streamed units are on the host only.
    void reset_residency() override;
    // Streamed units must be acquired and released in the schedule's order, once per read.
    const void* acquire(int unit) override;
    void release(int unit) override;
    // An acquired unit's gradient (a gradient slot for a streamed unit). Outside a step, once its
    // work is done, where the unit's gradient is kept: the page-locked copy for a streamed unit.
    void* gradient(int unit) override;
    UnitUpdate acquire_update(int unit) override;
    PlacementStats placement() const override;
    LinkBytes link_bytes_since_reset() const override { return link_; }
    // The next forward's look-ahead waits for an overlapped update of the unit it fetches.
    void follow_update(const ItemProgress* progress) override { update_progress_ = progress; }
    const void* stored_weights(int unit) override;

private:
    std::size_t checked(int unit) const;
    bool training() const { return host_optimizer_.placed(); }
    std::byte* slot_pointer(int slot) const;
    std::byte* host_weights_of(std::size_t unit) const { return host_weights_.get() + host_.unit_offsets[unit]; }
    // SlotRing::Device: the copies into the slots and their events.
    void fetch(const SlotRing::Entry& entry) override;
    void await_fetch(const SlotRing::Entry& entry) override { slot_streams_.await_fetched(entry.slot); }
    void mark_released(const SlotRing::Entry& entry) override { slot_streams_.mark_released(entry.slot); }

    BackendConfig config_;
    SlotStreams slot_streams_;
    SlotRing ring_;

    std::vector<std::int64_t> unit_bytes_;
    ResidencyPlan plan_;
    ResidencyPlan::HostLayout host_;      // where the streamed units are in host_weights_ and host_gradients_
    PinnedHostMemory host_weights_;
    DeviceMemory device_weights_;            // resident units, then the slots
    ResidencyPlan::DeviceLayout device_;  // where the resident units and the slots are in device_weights_
    LinkBytes link_;                      // since reset_residency

    // Training only: the gradients, laid out as the weights, and the optimizer.
    StreamedGradients gradients_;
    HostOptimizerState host_optimizer_;
    const ItemProgress* update_progress_ = nullptr;
    std::vector<bool> held_;  // per unit: acquired and not yet released
};

}  // namespace sweetspot
