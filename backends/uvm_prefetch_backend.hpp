#pragma once
// `uvm-prefetch`: weights in managed memory (ManagedWeights: on the host once placed, but for the
// units the budget keeps resident) brought to the GPU by cudaMemPrefetchAsync on the prefetch
// streams (round-robin; streams = 0 uses the compute stream).
//   prefetch -1 (jit, cuda-uvm-gpt2's behaviour): acquire prefetches the unit itself and returns at once.
//   prefetch n >= 1: the next n streamed units of the forward are prefetched ahead of the one
//     being computed; acquire makes the compute stream wait for the unit's prefetch.
//   prefetch 0 (off): no prefetch of streamed units — plain on-demand faulting as in `uvm` — but
//     the resident set of a budget-limited cell is still prefetched once in place() and kept.
// With a budget below the weights, a residency plan with S = n + 1 slots' worth of room (1 for
// jit and off) keeps its resident units on the device for the whole cell; each streamed unit is
// evicted after use (migrated back, or its read-only duplicate dropped) before the prefetch that
// would otherwise exceed the budget: streamed unit k is brought in only after unit k - S left (a
// SlotRing of S slots). With a budget that holds everything every unit is resident: prefetched
// once in place() and never evicted.
// Each prefetch and migration back is one cudaMemPrefetchAsync per unit: the batched call
// (cudaMemPrefetchBatchAsync) and a unit split across the prefetch streams were measured against
// it on an H100 and lost, because both hold the calling thread for the whole transfer
// (docs/benchmarks-history.md, issue 14); the run's probe still measures them.
//
// Training (UnitSchedule::training, optimizer = "host" only: the registry's TrainingState), as
// explicit-copy trains: the ring follows the schedule's reads, so the backward prefetches the
// streamed units again in reverse; the gradients are StreamedGradients (a resident unit's in device
// memory, a streamed unit's made in a device gradient slot and copied out to page-locked memory
// when the backward releases it); the optimizer's state is on the host (HostOptimizerState). A
// resident unit is updated through the staging (its gradient down, its new weights up into its
// managed pages on the device); a streamed unit (UnitUpdate::streamed) in place, the host's cores
// writing its new weights into its managed pages, which are on the host once the unit was evicted
// and which the next forward prefetches. Under read-mostly eviction the resident units are not
// made read-mostly: the update writes them, which would collapse their copies onto the host.
// link_bytes_since_reset counts what the backend asks to move: the units it prefetches and the
// gradients it copies out; the driver's migrations back (eviction) are the UM counters' to report.
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_optimizer_state.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/managed_weights.hpp"
#include "backends/slot_ring.hpp"
#include "backends/slot_streams.hpp"
#include "backends/streamed_gradients.hpp"
#include "base/item_progress.hpp"

namespace sweetspot {

class UvmPrefetchBackend final : public Backend, private SlotRing::Device {
public:
    explicit UvmPrefetchBackend(const BackendConfig& config);

    // Throws std::invalid_argument when the budget cannot hold the slots, ManagedMemoryRefused
    // (before allocating) when the weights exceed the free device memory.
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    // Streamed units back to the host, resident units stay on the device.
    void reset_residency() override;
    // Streamed units must be acquired and released in forward order, once per forward.
    const void* acquire(int unit) override;
    void release(int unit) override;
    // An acquired unit's gradient (a gradient slot for a streamed unit); outside a step, once its
    // work is done, where the unit's gradient is kept: the page-locked copy for a streamed unit.
    void* gradient(int unit) override;
    UnitUpdate acquire_update(int unit) override;
    PlacementStats placement() const override;
    LinkBytes link_bytes_since_reset() const override { return link_; }
    // The next forward's look-ahead waits for an overlapped update of the unit it fetches.
    void follow_update(const ItemProgress* progress) override { update_progress_ = progress; }
    const void* stored_weights(int unit) override { return weights_->unit_pointer(unit); }

private:
    bool look_ahead() const { return config_.prefetch_depth >= 1; }
    bool training() const { return host_optimizer_.placed(); }
    std::size_t checked(int unit) const;
    // SlotRing::Device: the prefetches and evictions of the streamed units, and their events.
    void fetch(const SlotRing::Entry& entry) override;
    void await_fetch(const SlotRing::Entry& entry) override;
    void mark_released(const SlotRing::Entry& entry) override { slot_streams_.mark_released(entry.slot); }
    void vacate(const SlotRing::Entry& entry) override;
    bool vacate_waits_on_host() const override { return config_.evict == UvmEvict::read_mostly; }
    void wait_for_eviction(const SlotRing::Entry& entry, cudaStream_t stream) const;

    BackendConfig config_;
    SlotStreams slot_streams_;
    CudaStream evict_stream_;
    SlotRing ring_;
    std::optional<ManagedWeights> weights_;
    PlacementStats stats_;
    std::vector<CudaEvent> evicted_;  // per slot: after its last unit's migration back to the host
    std::vector<std::int64_t> unit_bytes_;
    std::vector<bool> resident_;  // per unit, the plan's
    LinkBytes link_;              // since reset_residency

    // Training only: the gradients and the optimizer's state.
    StreamedGradients gradients_;
    HostOptimizerState host_optimizer_;
    const ItemProgress* update_progress_ = nullptr;
    std::vector<bool> held_;  // per unit: acquired and not yet released
};

}  // namespace sweetspot
