#pragma once
// `host`: every unit in ordinary host memory, computed on the CPU. Nothing moves, so acquire
// and release only hand out pointers; it is the reference the GPU backends are checked against.
#include <memory>
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
    // Not std::vector<float>: its zero-fill would touch every page once before the fill does.
    std::vector<std::unique_ptr<float[]>> units_;
};

}  // namespace sweetspot
