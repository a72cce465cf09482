#pragma once
// `explicit-copy` (FlexGen / ZeRO-Inference style): every unit in pinned host memory; the units
// of the residency plan are copied to the device once, the others are streamed in every forward
// into a ring of device slots by cudaMemcpyAsync on the copy streams, ordered by events:
//   copy of streamed unit k into slot k % S  waits for  slot_free[slot]  (recorded on the compute
//   stream when the unit that used the slot before was released), then records copy_done[slot];
//   acquire makes the compute stream wait for copy_done[slot].
// With a look-ahead depth n >= 1 there are S = n + 1 slots and the copies of the next n streamed
// units are in flight while one is computed; with `jit` or `off` there is one slot and a unit is
// copied when it is acquired.
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/residency_plan.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

class ExplicitCopyBackend final : public Backend {
public:
    explicit ExplicitCopyBackend(const BackendConfig& config);

    std::string_view name() const override { return "explicit-copy"; }
    // Throws std::invalid_argument when the budget cannot hold the streaming slots.
    void place(const WeightLayout& layout, const UnitFiller& fill) override;
    // Waits for the previous forward's work and empties the slots: streamed units are on the host only.
    void reset_residency() override;
    // Streamed units must be acquired and released in forward order, once per forward.
    const void* acquire(int unit) override;
    void release(int unit) override;
    PlacementStats placement() const override;

private:
    cudaStream_t compute_stream() const { return config_.compute_stream; }
    cudaStream_t copy_stream(int seq) const;
    int slots() const { return plan_.slots; }
    std::byte* slot_pointer(int slot) const;
    void check_unit(int unit) const;
    void issue_ready_copies();
    void issue_next_copy();

    BackendConfig config_;
    std::vector<CudaStream> copy_streams_;

    std::vector<std::int64_t> unit_bytes_;
    ResidencyPlan plan_;
    PackedUnits host_packed_;
    PinnedHostMemory host_weights_;
    DeviceMemory device_weights_;            // resident units, then the slots
    std::vector<std::int64_t> device_offset_;  // of each resident unit in device_weights_
    std::int64_t slots_offset_ = 0, slot_stride_ = 0, device_bytes_ = 0;

    std::vector<int> streamed_;     // streamed units in forward order; index = sequence number
    std::vector<int> seq_of_unit_;  // sequence number of each streamed unit, -1 if resident
    std::vector<CudaEvent> slot_free_, copy_done_;  // one of each per slot

    // Streamed units of the current forward whose copy was issued / that were acquired / released.
    int issued_ = 0, acquired_ = 0, released_ = 0;
};

}  // namespace sweetspot
