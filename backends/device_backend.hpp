#pragma once
// `device`: every unit in cudaMalloc memory for the whole cell — the in-memory speed reference.
// Nothing moves during a step, so acquire only hands out pointers. Placed for training, it also
// holds the gradients (in the weights' dtype and layout), and the optimizer's state where the
// config's `optimizer` says: in device memory, fp32 master weights (for fp16 and bf16) and AdamW's
// fp32 moments; in host memory, fp32 master weights in every dtype, the moments, and the
// page-locked staging the units' gradients and new weights cross the link through
// (host_update_staging_bytes).
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_optimizer_state.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

class DeviceBackend final : public Backend {
public:
    explicit DeviceBackend(const BackendConfig& config);

    // Throws std::invalid_argument when the budget is below the weights.
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    void reset_residency() override {}
    const void* acquire(int unit) override;
    void release(int) override {}
    void* gradient(int unit) override;
    UnitUpdate acquire_update(int unit) override;
    PlacementStats placement() const override;

private:
    std::size_t checked(int unit) const;
    void place_training_state(const WeightLayout& layout, const UnitFiller& fill);

    BackendConfig config_;
    std::vector<std::int64_t> unit_bytes_;
    PackedUnits packed_;       // the weights and the gradients, in the cell's dtype
    PackedUnits packed_fp32_;  // the master weights and the moments
    DeviceMemory weights_;
    DeviceMemory gradients_, master_, m_, v_;  // training only; master_ only below fp32
    HostOptimizerState host_optimizer_;  // optimizer = "host": every unit staged
};

}  // namespace sweetspot
