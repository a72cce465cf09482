#pragma once
// `device`: every unit in cudaMalloc memory for the whole cell — the in-memory speed reference.
// Nothing moves during a forward, so acquire only hands out pointers.
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

class DeviceBackend final : public Backend {
public:
    explicit DeviceBackend(const BackendConfig& config);

    // Throws std::invalid_argument when the budget is below the weights.
    void place(const WeightLayout& layout, const UnitFiller& fill) override;
    void reset_residency() override {}
    const void* acquire(int unit) override;
    void release(int) override {}
    PlacementStats placement() const override;

private:
    BackendConfig config_;
    std::vector<std::int64_t> unit_bytes_;
    PackedUnits packed_;
    DeviceMemory weights_;
};

}  // namespace sweetspot
