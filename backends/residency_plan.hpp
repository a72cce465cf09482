#pragma once
// Which units a budget-limited backend keeps on the device for the whole cell, and how big its
// streaming slots are. Pure C++ (no CUDA), so the rules are tested on every machine.
#include <cstdint>
#include <span>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct ResidencyPlan {
    std::vector<bool> resident;       // per unit, in forward order
    int slots = 0;                    // streaming slots (0 when everything is resident)
    std::int64_t slot_bytes = 0;      // size of one slot: the largest streamed unit
    std::int64_t resident_bytes = 0;  // sum of the resident units
    std::int64_t streamed_bytes = 0;  // sum of the streamed units: crosses the link in every forward

    int resident_units() const;
    int streamed_units() const;
    // The resident units' bytes, in forward order (the streamed ones left out).
    std::vector<std::int64_t> resident_unit_bytes(std::span<const std::int64_t> unit_bytes) const;
    // Device bytes the plan needs for weights; never more than the budget it was made for.
    std::int64_t device_bytes() const { return resident_bytes + slots * slot_bytes; }
    // One device allocation holding the plan, every resident unit and slot starting on
    // `alignment` bytes: the resident units packed first, then the slots.
    struct DeviceLayout {
        std::vector<std::int64_t> unit_offsets;  // per unit; -1 for a streamed one
        std::int64_t slots_offset = 0, slot_stride = 0;
        std::int64_t total_bytes = 0;            // the allocation's size
    };
    DeviceLayout device_layout(std::span<const std::int64_t> unit_bytes, std::int64_t alignment) const;
    // One host allocation holding the streamed units (what explicit-copy copies from), each
    // starting on `alignment` bytes; the resident units need none, they live on the device.
    struct HostLayout {
        std::vector<std::int64_t> unit_offsets;  // per unit; -1 for a resident one
        std::vector<std::int64_t> starts;        // the streamed units' offsets, in forward order
        std::int64_t total_bytes = 0;
    };
    HostLayout host_layout(std::span<const std::int64_t> unit_bytes, std::int64_t alignment) const;
};

// Bytes of every unit of `layout` stored in `dtype`, in forward order.
std::vector<std::int64_t> unit_bytes(const WeightLayout& layout, DType dtype);

// Streaming slots for a prefetch depth (0 off, -1 just in time, n look-ahead): n units in flight
// plus the one being computed; a single slot when nothing is fetched ahead.
int streaming_slots(int prefetch_depth);

// The smallest budget below the total for which plan_residency succeeds with `slots` slots.
std::int64_t minimum_streaming_budget(std::span<const std::int64_t> unit_bytes, int slots);

// Everything resident (0 slots) when the budget holds all units. Otherwise `slots` slots of the
// largest streamed unit plus as many resident units as fit beside them, chosen by `policy`.
// Throws std::invalid_argument when not even the slots fit.
ResidencyPlan plan_residency(std::span<const std::int64_t> unit_bytes, std::int64_t budget_bytes, int slots,
                             ResidentPolicy policy);

}  // namespace sweetspot
