#include "backends/residency_plan.hpp"

#include "base/number_text.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

// How a plan is found. A slot must hold the largest streamed unit, so the slot size and the
// resident set depend on each other. Instead of iterating to a fixed point (which can oscillate
// when units differ in size), every unit size t is tried as the slot size: units larger than t
// cannot pass through a slot and must stay resident, the slots take S·t, and the policy picks
// further resident units among the others until the rest of the budget is used. Each candidate
// satisfies resident + S·slot_bytes <= budget because the real slot size (the largest unit left
// streamed) is at most t. The candidate that streams the fewest bytes wins: those bytes bound
// the forward at the link rate (docs/benchmarks-history.md, "Bound"). So with GPT-2's large embedding
// and head, a generous budget keeps both resident whatever the policy, and the policy decides
// among the blocks.
namespace sweetspot {
namespace {

std::int64_t sum_of(std::span<const std::int64_t> v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

// Bytes of the units larger than `slot`: they must be resident when slots are `slot` bytes.
std::int64_t bytes_larger_than(std::span<const std::int64_t> units, std::int64_t slot) {
    std::int64_t sum = 0;
    for (const auto b : units)
        if (b > slot) sum += b;
    return sum;
}

// Greedy in the given order: take each unit that still fits. Used by `first` and `last`.
std::vector<int> choose_in_order(const std::vector<int>& order, std::span<const std::int64_t> units, std::int64_t room) {
    std::vector<int> chosen;
    for (const int u : order) {
        const auto b = units[static_cast<std::size_t>(u)];
        if (b <= room) {
            chosen.push_back(u);
            room -= b;
        }
    }
    return chosen;
}

// The most resident units that fit in `room`, with the k streamed ones spread evenly over the
// forward order and the last candidate among them: streamed unit j (1..k) is candidate
// ceil(j·m/k) - 1. Each streamed copy then hides behind the compute of the resident units just
// before it, and after the last copy completes only that one unit is left to compute. (Spreading
// the resident units from the first candidate instead left up to m/k units of compute after the
// last copy, which is exposed time whenever copies and compute are balanced: docs/benchmarks-history.md,
// "Where the time goes: timeline evidence".) Since m/k >= 1 the indices are distinct.
std::vector<int> choose_interleaved(const std::vector<int>& candidates, std::span<const std::int64_t> units,
                                    std::int64_t room) {
    const auto m = static_cast<std::int64_t>(candidates.size());
    for (std::int64_t k = 0; k < m; ++k) {
        std::vector<bool> streamed(static_cast<std::size_t>(m), false);
        for (std::int64_t j = 1; j <= k; ++j) streamed[static_cast<std::size_t>((j * m + k - 1) / k - 1)] = true;
        std::vector<int> chosen;
        std::int64_t bytes = 0;
        for (std::int64_t i = 0; i < m; ++i) {
            if (streamed[static_cast<std::size_t>(i)]) continue;
            const int u = candidates[static_cast<std::size_t>(i)];
            chosen.push_back(u);
            bytes += units[static_cast<std::size_t>(u)];
        }
        if (bytes <= room) return chosen;
    }
    return {};
}

std::vector<int> choose_by_policy(const std::vector<int>& candidates, std::span<const std::int64_t> units,
                                  std::int64_t room, ResidentPolicy policy) {
    switch (policy) {
        case ResidentPolicy::first: return choose_in_order(candidates, units, room);
        case ResidentPolicy::last: return choose_in_order({candidates.rbegin(), candidates.rend()}, units, room);
        case ResidentPolicy::interleaved: return choose_interleaved(candidates, units, room);
    }
    return {};
}

ResidencyPlan plan_from_flags(std::span<const std::int64_t> units, std::vector<bool> resident, int slots) {
    ResidencyPlan plan;
    plan.resident = std::move(resident);
    plan.slots = slots;
    for (std::size_t u = 0; u < units.size(); ++u) {
        if (plan.resident[u]) {
            plan.resident_bytes += units[u];
        } else {
            plan.streamed_bytes += units[u];
            plan.slot_bytes = std::max(plan.slot_bytes, units[u]);
        }
    }
    return plan;
}

// The best plan whose slots are at most `slot` bytes, if any fits.
std::optional<ResidencyPlan> plan_for_slot_size(std::span<const std::int64_t> units, std::int64_t budget, int slots,
                                                std::int64_t slot, ResidentPolicy policy) {
    const std::int64_t room = budget - slots * slot - bytes_larger_than(units, slot);
    if (room < 0) return std::nullopt;
    std::vector<bool> resident(units.size(), false);
    std::vector<int> candidates;
    for (std::size_t u = 0; u < units.size(); ++u) {
        if (units[u] > slot)
            resident[u] = true;
        else
            candidates.push_back(static_cast<int>(u));
    }
    for (const int u : choose_by_policy(candidates, units, room, policy)) resident[static_cast<std::size_t>(u)] = true;
    return plan_from_flags(units, std::move(resident), slots);
}

bool better(const ResidencyPlan& a, const ResidencyPlan& b) {
    if (a.streamed_bytes != b.streamed_bytes) return a.streamed_bytes < b.streamed_bytes;
    return a.device_bytes() < b.device_bytes();
}

}  // namespace

int ResidencyPlan::resident_units() const { return static_cast<int>(std::count(resident.begin(), resident.end(), true)); }

int ResidencyPlan::streamed_units() const { return static_cast<int>(resident.size()) - resident_units(); }

std::vector<std::int64_t> ResidencyPlan::resident_unit_bytes(std::span<const std::int64_t> unit_bytes) const {
    std::vector<std::int64_t> bytes;
    for (std::size_t u = 0; u < unit_bytes.size(); ++u)
        if (resident[u]) bytes.push_back(unit_bytes[u]);
    return bytes;
}

std::vector<std::int64_t> unit_bytes(const WeightLayout& layout, DType dtype) {
    std::vector<std::int64_t> bytes;
    bytes.reserve(layout.units.size());
    for (const auto& u : layout.units) bytes.push_back(u.numel * static_cast<std::int64_t>(dtype_size(dtype)));
    return bytes;
}

int streaming_slots(int prefetch_depth) { return prefetch_depth >= 1 ? prefetch_depth + 1 : 1; }

std::int64_t minimum_streaming_budget(std::span<const std::int64_t> unit_bytes, int slots) {
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for (const auto slot : unit_bytes) best = std::min(best, slots * slot + bytes_larger_than(unit_bytes, slot));
    return best;
}

ResidencyPlan plan_residency(std::span<const std::int64_t> unit_bytes, std::int64_t budget_bytes, int slots,
                             ResidentPolicy policy) {
    const std::int64_t total = sum_of(unit_bytes);
    if (budget_bytes >= total) return plan_from_flags(unit_bytes, std::vector<bool>(unit_bytes.size(), true), 0);
    if (slots < 1) throw std::invalid_argument("a residency plan needs at least one streaming slot, got " + std::to_string(slots));

    std::optional<ResidencyPlan> best;
    for (const auto slot : unit_bytes) {
        auto plan = plan_for_slot_size(unit_bytes, budget_bytes, slots, slot, policy);
        if (plan && (!best || better(*plan, *best))) best = std::move(plan);
    }
    if (!best) {
        throw std::invalid_argument("a weight budget of " + bytes_text(budget_bytes) + " cannot hold " +
                                    std::to_string(slots) + " streaming slot(s): streaming needs at least " +
                                    bytes_text(minimum_streaming_budget(unit_bytes, slots)) +
                                    " (the slots hold the largest streamed unit; larger units must stay resident), "
                                    "and all weights resident need " + bytes_text(total));
    }
    return *best;
}

ResidencyPlan::DeviceLayout ResidencyPlan::device_layout(std::span<const std::int64_t> unit_bytes,
                                                         std::int64_t alignment) const {
    const auto up = [alignment](std::int64_t n) { return (n + alignment - 1) / alignment * alignment; };
    DeviceLayout l;
    l.unit_offsets.assign(unit_bytes.size(), -1);
    std::int64_t offset = 0;
    for (std::size_t u = 0; u < unit_bytes.size(); ++u) {
        if (!resident[u]) continue;
        l.unit_offsets[u] = offset;
        offset += up(unit_bytes[u]);
    }
    l.slots_offset = offset;
    l.slot_stride = up(slot_bytes);
    l.total_bytes = l.slots_offset + slots * l.slot_stride;
    return l;
}

ResidencyPlan::HostLayout ResidencyPlan::host_layout(std::span<const std::int64_t> unit_bytes, std::int64_t alignment) const {
    HostLayout l;
    l.unit_offsets.assign(unit_bytes.size(), -1);
    for (std::size_t u = 0; u < unit_bytes.size(); ++u) {
        if (resident[u]) continue;
        l.unit_offsets[u] = l.total_bytes;
        l.starts.push_back(l.total_bytes);
        l.total_bytes += (unit_bytes[u] + alignment - 1) / alignment * alignment;
    }
    return l;
}

}  // namespace sweetspot
