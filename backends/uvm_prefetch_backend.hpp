#pragma once
// `uvm-prefetch`: weights in managed memory (first touched on the host) brought to the GPU by
// cudaMemPrefetchAsync on the prefetch streams (round-robin; streams = 0 uses the compute stream).
//   prefetch -1 (jit, the seed's behaviour): acquire prefetches the unit itself and returns at once.
//   prefetch n >= 1: the next n streamed units of the forward are prefetched ahead of the one
//     being computed; acquire makes the compute stream wait for the unit's prefetch.
//   prefetch 0 (off): no prefetch of streamed units — plain on-demand faulting as in `uvm` — but
//     the resident set of a budget-limited cell is still prefetched once in place() and kept.
// With a budget below the weights, a residency plan with S = n + 1 slots' worth of room (1 for
// jit and off) keeps its resident units on the device for the whole cell; each streamed unit is
// evicted after use (migrated back, or its read-only duplicate dropped) before the prefetch that
// would otherwise exceed the budget: streamed unit k is brought in only after unit k - S left.
// With a budget that holds everything nothing is evicted during a forward, and reset_residency()
// sends every unit back to the host so that each forward streams all weights.
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/managed_weights.hpp"

namespace sweetspot {

class UvmPrefetchBackend final : public Backend {
public:
    explicit UvmPrefetchBackend(const BackendConfig& config);

    std::string_view name() const override { return "uvm-prefetch"; }
    // Throws std::invalid_argument when the budget cannot hold the slots, ManagedMemoryRefused
    // (before allocating) when the weights exceed the free device memory.
    void place(const WeightLayout& layout, const UnitFiller& fill) override;
    // Streamed units back to the host, resident units stay on the device.
    void reset_residency() override;
    // Streamed units must be acquired and released in forward order, once per forward.
    const void* acquire(int unit) override;
    void release(int unit) override;
    PlacementStats placement() const override { return stats_; }

private:
    cudaStream_t compute_stream() const { return config_.compute_stream; }
    cudaStream_t prefetch_stream(int seq) const;
    bool look_ahead() const { return config_.prefetch_depth >= 1; }
    bool budget_limited() const { return slots_ > 0; }
    void check_unit(int unit) const;
    bool make_room_for(int seq, bool host_wait_allowed);
    void evict_next();
    void issue_next_prefetch();
    void issue_prefetches_through(int last_seq, bool host_wait_allowed);
    void wait_for_room_on_compute(int seq) const;

    BackendConfig config_;
    std::vector<CudaStream> prefetch_streams_;
    CudaStream evict_stream_;
    std::optional<ManagedWeights> weights_;
    std::vector<bool> resident_;
    int slots_ = 0;  // streaming slots of the plan; 0 when the budget holds every unit
    PlacementStats stats_;

    std::vector<int> streamed_;     // streamed units in forward order; index = sequence number
    std::vector<int> seq_of_unit_;  // sequence number of each streamed unit, -1 if resident
    std::vector<CudaEvent> prefetched_, released_, evicted_;  // per unit

    // Streamed units of the current forward prefetched / acquired / released / evicted.
    int issued_ = 0, acquired_ = 0, released_count_ = 0, evicted_count_ = 0;
};

}  // namespace sweetspot
