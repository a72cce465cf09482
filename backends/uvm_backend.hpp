#pragma once
// `uvm`: weights in managed memory, on the host once placed (ManagedWeights), faulted in on
// demand by the kernels; no prefetch. acquire hands out the managed pointer.
//
// With a budget below the weights the backend emulates oversubscription safely by doing what the
// driver would: it tracks which units are (believed to be) on the device in LRU order and, before
// handing out a unit that would exceed the budget, evicts the least recently used ones after
// their last kernels finished — by migrating them back to the host (UvmEvict::migrate), or by
// dropping the GPU's read-only duplicate (UvmEvict::read_mostly, where every unit is advised
// ReadMostly with the host as preferred location).
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/managed_weights.hpp"

namespace sweetspot {

class UvmBackend final : public Backend {
public:
    explicit UvmBackend(const BackendConfig& config);

    // Throws ManagedMemoryRefused (before allocating) when the weights exceed the free device
    // memory, std::invalid_argument when one unit is larger than the budget.
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    // Every iteration starts with all weights on the host.
    void reset_residency() override;
    const void* acquire(int unit) override;
    void release(int unit) override;
    PlacementStats placement() const override;

private:
    cudaStream_t compute_stream() const { return config_.compute_stream; }
    bool budget_limited() const { return config_.budget_bytes < total_bytes_; }
    void check_unit(int unit) const;
    void make_room_for(int unit);

    BackendConfig config_;
    CudaStream evict_stream_;
    std::optional<ManagedWeights> weights_;
    std::int64_t total_bytes_ = 0;
    std::vector<CudaEvent> released_;  // per unit: recorded on the compute stream at release
    CudaEvent evicted_;                // after the last migration back to the host

    // Budget bookkeeping: units believed on the device, least recently used first.
    std::vector<int> lru_;
    std::vector<bool> on_device_, in_use_;
    std::int64_t device_bytes_ = 0;
};

}  // namespace sweetspot
