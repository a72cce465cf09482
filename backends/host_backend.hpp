#pragma once
// `host`: every unit in ordinary host memory, computed on the CPU. Nothing moves, so acquire
// and release only hand out pointers; it is the reference the GPU backends are checked against.
#include <vector>

#include "backends/backend.hpp"

namespace sweetspot {

class HostBackend final : public Backend {
public:
    void place(const WeightLayout& layout, const UnitFiller& fill) override;
    void reset_residency() override {}
    const void* acquire(int unit) override;
    void release(int) override {}
    PlacementStats placement() const override { return {}; }

private:
    std::vector<std::vector<float>> units_;
};

}  // namespace sweetspot
