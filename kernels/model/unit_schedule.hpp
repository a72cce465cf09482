#pragma once
// What one step does with the weights, unit by unit, in the order it does it: the whole of what a
// backend knows about the compute. Inference reads the units in model order; a training step
// reads them in model order (forward), again in reverse (backward, each unit's gradient made while
// it is held), then updates each (the optimizer writes the weights, reading the gradient). A
// backend streams, prefetches and evicts in the schedule's order and never assumes one of its own.
#include <span>
#include <utility>
#include <vector>

namespace sweetspot {

enum class UnitAccess {
    read,    // acquire / release: the weights are read
    update,  // acquire_update / release_update: the optimizer writes the weights from their gradient
};

struct ScheduledAccess {
    int unit = 0;
    UnitAccess access = UnitAccess::read;
    bool operator==(const ScheduledAccess&) const = default;
};

class UnitSchedule {
public:
    // Units 0 .. units - 1, read once each.
    static UnitSchedule inference(int units);
    // Units 0 .. units - 1 read, then units - 1 .. 0 read, then 0 .. units - 1 updated.
    static UnitSchedule training(int units);

    std::span<const ScheduledAccess> accesses() const { return accesses_; }
    // The units read, in order, as many times as they are read.
    std::vector<int> reads() const;
    // Whether any access writes the weights: the backend must hold gradients and optimizer state.
    bool updates() const;
    int units() const { return units_; }

private:
    UnitSchedule(int units, std::vector<ScheduledAccess> accesses) : units_(units), accesses_(std::move(accesses)) {}
    int units_ = 0;
    std::vector<ScheduledAccess> accesses_;
};

}  // namespace sweetspot
