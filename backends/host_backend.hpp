#pragma once
// `host`: every unit in ordinary host memory, computed on the CPU. Nothing moves, so acquire
// and release only hand out pointers; it is the reference the GPU backends are checked against.
// Placed for training, it also holds each unit's gradient and AdamW's moments in host memory
// (fp32 weights are their own master).
#include <memory>
#include <vector>

#include "backends/backend.hpp"

namespace sweetspot {

class HostBackend final : public Backend {
public:
    void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) override;
    void reset_residency() override {}
    const void* acquire(int unit) override;
    void release(int) override {}
    void* gradient(int unit) override;
    UnitUpdate acquire_update(int unit) override;
    PlacementStats placement() const override { return {}; }

private:
    using Units = std::vector<std::unique_ptr<float[]>>;
    std::size_t in_range(int unit) const;
    // in_range, and the training state `units` (`what`) held.
    std::size_t checked(int unit, const Units& units, const char* what) const;

    // Not std::vector<float>: its zero-fill would touch every page once before the fill does.
    Units units_;
    Units gradients_, m_, v_;  // empty unless placed for training
};

}  // namespace sweetspot
