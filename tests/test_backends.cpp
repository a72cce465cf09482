// Backends: the residency plan, the slot ring's bookkeeping and backend availability (pure, every
// machine), and on a GPU every GPU backend's acquire/release protocol: what the compute stream
// sees through the pointer that acquire returns must be exactly the unit's weights, in every
// iteration, whatever the budget, look-ahead, stream count and eviction mode.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "backends/slot_ring.hpp"
#include "backends/unit_storage.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"

#ifdef SWEETSPOT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_synthetic_weights.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/compute/pinned_memory.hpp"
#include "gpu_test_support.hpp"
#endif

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr std::int64_t MB = 1000 * 1000;
constexpr ResidentPolicy kPolicies[] = {ResidentPolicy::first, ResidentPolicy::last, ResidentPolicy::interleaved};

const char* policy_name(ResidentPolicy p) {
    switch (p) {
        case ResidentPolicy::first: return "first";
        case ResidentPolicy::last: return "last";
        case ResidentPolicy::interleaved: return "interleaved";
    }
    return "?";
}

std::int64_t total_of(const std::vector<std::int64_t>& units) {
    return std::accumulate(units.begin(), units.end(), std::int64_t{0});
}

// GPT-2 XL in fp16 as the backends see it: embedding and head bigger than the blocks.
std::vector<std::int64_t> gpt2_like_units() {
    std::vector<std::int64_t> units{321 * MB};
    for (int i = 0; i < 48; ++i) units.push_back(123 * MB);
    units.push_back(321 * MB);
    return units;
}

std::vector<std::int64_t> equal_units(int n, std::int64_t bytes) { return std::vector<std::int64_t>(static_cast<std::size_t>(n), bytes); }

// Sizes between 50 and 400 MB from a fixed linear congruential sequence.
std::vector<std::int64_t> random_ish_units(int n) {
    std::vector<std::int64_t> units;
    std::uint64_t x = 12345;
    for (int i = 0; i < n; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        units.push_back((50 + static_cast<std::int64_t>((x >> 33) % 351)) * MB);
    }
    return units;
}

std::vector<int> resident_indices(const ResidencyPlan& p) {
    std::vector<int> r;
    for (std::size_t u = 0; u < p.resident.size(); ++u)
        if (p.resident[u]) r.push_back(static_cast<int>(u));
    return r;
}

bool has_resident_neighbours(const ResidencyPlan& p) {
    for (std::size_t u = 1; u < p.resident.size(); ++u)
        if (p.resident[u] && p.resident[u - 1]) return true;
    return false;
}

// What every plan must satisfy: consistent sums, slots as large as the largest streamed unit,
// and never more device bytes than the budget.
void check_plan(const ResidencyPlan& p, const std::vector<std::int64_t>& units, std::int64_t budget, int slots) {
    REQUIRE(p.resident.size() == units.size());
    std::int64_t resident = 0, streamed = 0, largest_streamed = 0;
    for (std::size_t u = 0; u < units.size(); ++u) {
        if (p.resident[u]) {
            resident += units[u];
        } else {
            streamed += units[u];
            largest_streamed = std::max(largest_streamed, units[u]);
        }
    }
    CHECK(p.resident_bytes == resident);
    CHECK(p.streamed_bytes == streamed);
    CHECK(p.resident_units() + p.streamed_units() == static_cast<int>(units.size()));
    if (streamed == 0) {
        CHECK(p.slots == 0);
        CHECK(budget >= total_of(units));
    } else {
        CHECK(p.slots == slots);
        CHECK(p.slot_bytes == largest_streamed);
        CHECK(p.resident_bytes + p.slots * p.slot_bytes <= budget);
    }
}

}  // namespace

TEST_CASE("a budget that holds every unit keeps them all resident", "[backends]") {
    const auto units = gpt2_like_units();
    const auto total = total_of(units);
    for (const auto policy : kPolicies) {
        INFO("policy " << policy_name(policy));
        for (const auto budget : {total, total + 1, 10 * total}) {
            const auto p = plan_residency(units, budget, 3, policy);
            check_plan(p, units, budget, 3);
            CHECK(p.resident_units() == static_cast<int>(units.size()));
            CHECK(p.slots == 0);
            CHECK(p.slot_bytes == 0);
            CHECK(p.streamed_bytes == 0);
        }
    }
}

TEST_CASE("one byte below the total streams, and resident units appear exactly at their thresholds", "[backends]") {
    // Ten units of 100 bytes and two slots: r resident units need 200 + 100·r bytes.
    const auto units = equal_units(10, 100);
    for (const auto policy : kPolicies) {
        INFO("policy " << policy_name(policy));
        auto p = plan_residency(units, 999, 2, policy);
        check_plan(p, units, 999, 2);
        CHECK(p.resident_units() == 7);
        CHECK(p.slot_bytes == 100);
        CHECK(p.streamed_bytes == 300);

        p = plan_residency(units, 900, 2, policy);
        CHECK(p.resident_units() == 7);
        p = plan_residency(units, 899, 2, policy);
        CHECK(p.resident_units() == 6);
        p = plan_residency(units, 200, 2, policy);
        CHECK(p.resident_units() == 0);
        CHECK(p.streamed_bytes == 1000);
        CHECK_THROWS_AS(plan_residency(units, 199, 2, policy), std::invalid_argument);
    }
}

TEST_CASE("first and last keep the ends of the forward resident", "[backends]") {
    const auto units = equal_units(10, 100);
    const auto first = plan_residency(units, 600, 1, ResidentPolicy::first);
    CHECK(resident_indices(first) == std::vector<int>{0, 1, 2, 3, 4});
    const auto last = plan_residency(units, 600, 1, ResidentPolicy::last);
    CHECK(resident_indices(last) == std::vector<int>{5, 6, 7, 8, 9});
}

TEST_CASE("interleaved spreads the resident units over the forward", "[backends]") {
    SECTION("half of the units fit: no two resident neighbours") {
        for (const int n : {10, 11, 50}) {
            INFO(n << " units");
            const auto units = equal_units(n, 100);
            const std::int64_t budget = 2 * 100 + (n / 2) * 100;
            const auto p = plan_residency(units, budget, 2, ResidentPolicy::interleaved);
            check_plan(p, units, budget, 2);
            CHECK(p.resident_units() == n / 2);
            CHECK_FALSE(has_resident_neighbours(p));
        }
    }
    SECTION("a quarter fit: evenly spaced") {
        const auto units = equal_units(12, 100);
        const auto p = plan_residency(units, 100 + 300, 1, ResidentPolicy::interleaved);
        CHECK(resident_indices(p) == std::vector<int>{0, 4, 8});
    }
    SECTION("most fit: the streamed units are spread and the last unit is one of them") {
        const auto units = equal_units(10, 100);
        const auto p = plan_residency(units, 2 * 100 + 6 * 100, 2, ResidentPolicy::interleaved);
        check_plan(p, units, 2 * 100 + 6 * 100, 2);
        CHECK(resident_indices(p) == std::vector<int>{0, 1, 3, 5, 6, 8});
        const auto q = plan_residency(equal_units(48, 100), 3 * 100 + 44 * 100, 3, ResidentPolicy::interleaved);
        CHECK_FALSE(q.resident.back());
        CHECK(q.streamed_units() == 4);
        CHECK_FALSE(q.resident[11]);
        CHECK_FALSE(q.resident[23]);
        CHECK_FALSE(q.resident[35]);
    }
}

TEST_CASE("GPT-2-like units: units larger than the slots stay resident, the policy picks among the blocks", "[backends]") {
    const auto units = gpt2_like_units();  // 321, 48 × 123, 321 MB
    // Room for the slots of 123 MB, the embedding and the head, and 10 blocks.
    const std::int64_t budget = 2 * 123 * MB + 642 * MB + 10 * 123 * MB;
    for (const auto policy : kPolicies) {
        INFO("policy " << policy_name(policy));
        const auto p = plan_residency(units, budget, 2, policy);
        check_plan(p, units, budget, 2);
        CHECK(p.slot_bytes == 123 * MB);
        CHECK(p.resident.front());
        CHECK(p.resident.back());
        CHECK(p.resident_units() == 12);
    }
    const auto first = plan_residency(units, budget, 2, ResidentPolicy::first);
    CHECK(first.resident[1]);
    CHECK_FALSE(first.resident[48]);
    const auto last = plan_residency(units, budget, 2, ResidentPolicy::last);
    CHECK_FALSE(last.resident[1]);
    CHECK(last.resident[48]);
}

TEST_CASE("of two plans that stream the same bytes, the one using fewer device bytes wins", "[backends]") {
    // Units 2, 3, 1, 2 bytes and a budget of 6 with one slot. Keeping the 3 resident streams
    // 2 + 1 + 2 = 5 bytes through a 2-byte slot: 3 + 2 = 5 device bytes. Keeping the 2 and the 1
    // streams 3 + 2 = 5 bytes too, but through a 3-byte slot: 2 + 1 + 3 = 6 device bytes.
    const std::vector<std::int64_t> units = {2, 3, 1, 2};
    const auto p = plan_residency(units, 6, 1, ResidentPolicy::interleaved);
    CHECK(p.resident == std::vector<bool>{false, true, false, false});
    CHECK(p.streamed_bytes == 5);
    CHECK(p.slot_bytes == 2);
    CHECK(p.device_bytes() == 5);

    // Units 4, 3, 2, 2, budget 8, policy last: the 4 resident streams 3 + 2 + 2 = 7 bytes through
    // a 3-byte slot (7 device bytes); the 3 resident would stream 4 + 2 + 2 = 8, and the two 2s
    // resident stream 4 + 3 = 7 through a 4-byte slot (8 device bytes).
    const auto last = plan_residency(std::vector<std::int64_t>{4, 3, 2, 2}, 8, 1, ResidentPolicy::last);
    CHECK(last.resident == std::vector<bool>{true, false, false, false});
    CHECK(last.streamed_bytes == 7);
    CHECK(last.device_bytes() == 7);
}

TEST_CASE("every plan stays within its budget over a sweep of budgets", "[backends]") {
    for (const auto& units : {gpt2_like_units(), random_ish_units(20), equal_units(7, 33)}) {
        const auto total = total_of(units);
        for (const int slots : {1, 2, 3, 5}) {
            const auto minimum = minimum_streaming_budget(units, slots);
            for (const auto policy : kPolicies) {
                INFO(units.size() << " units, " << slots << " slots, policy " << policy_name(policy));
                std::int64_t previous_streamed = total + 1;
                for (int step = 0; step <= 200; ++step) {
                    const std::int64_t budget = total * step / 180;  // past the total too
                    INFO("budget " << budget);
                    if (budget < total && budget < minimum) {
                        CHECK_THROWS_AS(plan_residency(units, budget, slots, policy), std::invalid_argument);
                        continue;
                    }
                    const auto p = plan_residency(units, budget, slots, policy);
                    check_plan(p, units, budget, slots);
                    if (units.size() != 20) {  // with equal blocks more budget never streams more
                        CHECK(p.streamed_bytes <= previous_streamed);
                        previous_streamed = p.streamed_bytes;
                    }
                }
            }
        }
    }
}

TEST_CASE("a budget too small for the slots is refused with the numbers", "[backends]") {
    const auto units = gpt2_like_units();
    // Three slots of the largest unit (321 MB) are cheapest: nothing needs to be resident.
    CHECK(minimum_streaming_budget(units, 3) == 3 * 321 * MB);
    CHECK(minimum_streaming_budget(units, 1) == 321 * MB);
    CHECK_NOTHROW(plan_residency(units, 3 * 321 * MB, 3, ResidentPolicy::interleaved));
    CHECK_THROWS_WITH(plan_residency(units, 3 * 321 * MB - 1, 3, ResidentPolicy::interleaved),
                      ContainsSubstring(std::to_string(3 * 321 * MB - 1)) && ContainsSubstring("3 streaming slot") &&
                          ContainsSubstring(std::to_string(3 * 321 * MB)));
    CHECK_THROWS_AS(plan_residency(units, 0, 1, ResidentPolicy::first), std::invalid_argument);
    CHECK_THROWS_AS(plan_residency(units, 100 * MB, 0, ResidentPolicy::first), std::invalid_argument);
}

TEST_CASE("a plan's device layout: resident units packed first, then the slots, each aligned", "[backends]") {
    ResidencyPlan plan;
    plan.resident = {true, false, true, false};
    plan.slots = 2;
    plan.slot_bytes = 300;  // the largest streamed unit
    const std::vector<std::int64_t> units = {100, 300, 1000, 200};
    const auto layout = plan.device_layout(units, 256);
    CHECK(layout.unit_offsets == std::vector<std::int64_t>{0, -1, 256, -1});  // 100 → 256
    CHECK(layout.slots_offset == 1280);                                       // 256 + 1000 → 1024
    CHECK(layout.slot_stride == 512);                                         // 300 → 512
    CHECK(layout.total_bytes == 2304);                                        // 1280 + 2 · 512
}

TEST_CASE("slot counts follow the prefetch depth", "[backends]") {
    CHECK(streaming_slots(-1) == 1);
    CHECK(streaming_slots(0) == 1);
    CHECK(streaming_slots(1) == 2);
    CHECK(streaming_slots(4) == 5);
}

namespace {

// The ring's protocol as the device sees it: every step it is asked for, as "step uU #SEQ @SLOT"
// (unit U, its sequence number among the streamed units, its slot).
class LoggingDevice final : public SlotRing::Device {
public:
    explicit LoggingDevice(bool vacate_waits_on_host = false) : vacate_waits_on_host_(vacate_waits_on_host) {}

    // The steps since the last call.
    std::vector<std::string> steps() { return std::exchange(log_, {}); }

    void fetch(const SlotRing::Entry& e) override { note("fetch", e); }
    void await_fetch(const SlotRing::Entry& e) override { note("await", e); }
    void mark_released(const SlotRing::Entry& e) override { note("release", e); }
    void vacate(const SlotRing::Entry& e) override { note("vacate", e); }
    bool vacate_waits_on_host() const override { return vacate_waits_on_host_; }

private:
    void note(const char* step, const SlotRing::Entry& e) {
        log_.push_back(std::string(step) + " u" + std::to_string(e.unit) + " #" + std::to_string(e.seq) + " @" +
                       std::to_string(e.slot));
    }

    bool vacate_waits_on_host_;
    std::vector<std::string> log_;
};

std::string slots_busy(int slots) { return "while all " + std::to_string(slots) + " slots are busy"; }

using Steps = std::vector<std::string>;
const std::optional<int> kResident = std::nullopt;

// Places the ring for an inference schedule: every unit read once, in model order.
void place_for_inference(SlotRing& ring, const std::vector<bool>& resident, int slots, int prefetch_depth) {
    ring.place(resident, UnitSchedule::inference(static_cast<int>(resident.size())).reads(), slots, prefetch_depth);
}

}  // namespace

TEST_CASE("slot ring: streamed units are numbered in the order they are read and take the slots in turn", "[backends]") {
    // Units 0 and 3 resident; 1, 2, 4, 5, 6 streamed as #0..#4 through 2 slots, look-ahead 1.
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, {true, false, false, true, false, false, false}, 2, 1);
    CHECK(ring.slots() == 2);
    CHECK(ring.streamed_reads() == 5);
    CHECK(ring.resident(0));
    CHECK_FALSE(ring.resident(1));
    CHECK(ring.resident(3));
    CHECK(ring.unit_at(0) == 1);
    CHECK(ring.unit_at(2) == 4);
    CHECK(ring.unit_at(4) == 6);

    LoggingDevice device;
    // The first acquire starts the look-ahead although unit 0 is resident: #0 and #1 fill both slots.
    CHECK(ring.acquire(0, device) == kResident);
    CHECK(device.steps() == Steps{"fetch u1 #0 @0", "fetch u2 #1 @1"});
    ring.release(0, device);
    CHECK(device.steps().empty());

    CHECK(ring.acquire(1, device) == 0);
    CHECK(device.steps() == Steps{"await u1 #0 @0"});
    // Releasing #0 frees slot 0 for #2, one ahead of #1.
    ring.release(1, device);
    CHECK(device.steps() == Steps{"release u1 #0 @0", "vacate u1 #0 @0", "fetch u4 #2 @0"});

    CHECK(ring.acquire(2, device) == 1);
    ring.release(2, device);
    CHECK(device.steps() == Steps{"await u2 #1 @1", "release u2 #1 @1", "vacate u2 #1 @1", "fetch u5 #3 @1"});

    CHECK(ring.acquire(3, device) == kResident);
    ring.release(3, device);
    CHECK(device.steps().empty());

    CHECK(ring.acquire(4, device) == 0);
    ring.release(4, device);
    CHECK(device.steps() == Steps{"await u4 #2 @0", "release u4 #2 @0", "vacate u4 #2 @0", "fetch u6 #4 @0"});
    // Nothing is left to fetch: the look-ahead does not wrap into the next step.
    CHECK(ring.acquire(5, device) == 1);
    ring.release(5, device);
    CHECK(ring.acquire(6, device) == 0);
    ring.release(6, device);
    CHECK(device.steps() == Steps{"await u5 #3 @1", "release u5 #3 @1", "await u6 #4 @0", "release u6 #4 @0"});
}

TEST_CASE("slot ring: a look-ahead of n keeps n fetches ahead of the unit being computed", "[backends]") {
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, std::vector<bool>(6, false), 3, 2);
    LoggingDevice device;
    CHECK(ring.acquire(0, device) == 0);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u1 #1 @1", "fetch u2 #2 @2", "await u0 #0 @0"});
    ring.release(0, device);
    CHECK(device.steps() == Steps{"release u0 #0 @0", "vacate u0 #0 @0", "fetch u3 #3 @0"});
    CHECK(ring.acquire(1, device) == 1);
    CHECK(ring.acquire(2, device) == 2);
    CHECK(device.steps() == Steps{"await u1 #1 @1", "await u2 #2 @2"});
    ring.release(1, device);
    CHECK(device.steps() == Steps{"release u1 #1 @1", "vacate u1 #1 @1", "fetch u4 #4 @1"});
}

TEST_CASE("slot ring: the look-ahead counts from the oldest unit not released, whatever slots are spare",
          "[backends]") {
    // The backends give a look-ahead of n exactly n + 1 slots; with more, the depth still bounds it.
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, std::vector<bool>(5, false), 3, 1);
    LoggingDevice device;
    CHECK(ring.acquire(0, device) == 0);
    CHECK(ring.acquire(1, device) == 1);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u1 #1 @1", "await u0 #0 @0", "await u1 #1 @1"});
    ring.release(0, device);
    CHECK(device.steps() == Steps{"release u0 #0 @0", "fetch u2 #2 @2"});
}

TEST_CASE("slot ring: jit and off fetch a unit when it is acquired, through one slot", "[backends]") {
    for (const int depth : {-1, 0}) {
        INFO("prefetch depth " << depth);
        SlotRing ring("test ring", slots_busy);
        place_for_inference(ring, std::vector<bool>(3, false), 1, depth);
        LoggingDevice device;
        CHECK(ring.acquire(0, device) == 0);
        CHECK(device.steps() == Steps{"fetch u0 #0 @0", "await u0 #0 @0"});
        // No look-ahead: a release fetches nothing.
        ring.release(0, device);
        CHECK(device.steps() == Steps{"release u0 #0 @0"});
        CHECK(ring.acquire(1, device) == 0);
        CHECK(device.steps() == Steps{"vacate u0 #0 @0", "fetch u1 #1 @0", "await u1 #1 @0"});
    }
}

TEST_CASE("slot ring: acquiring past the slots without releasing is refused, and the slot is reused after a release",
          "[backends]") {
    SECTION("one slot") {
        SlotRing ring("test ring", slots_busy);
        place_for_inference(ring, std::vector<bool>(3, false), 1, -1);
        LoggingDevice device;
        ring.acquire(0, device);
        device.steps();
        CHECK_THROWS_WITH(ring.acquire(1, device), "test ring: unit 1 acquired while all 1 slots are busy");
        CHECK(device.steps().empty());
    }
    SECTION("two slots with look-ahead") {
        SlotRing ring("test ring", slots_busy);
        place_for_inference(ring, std::vector<bool>(4, false), 2, 1);
        LoggingDevice device;
        CHECK(ring.acquire(0, device) == 0);
        CHECK(ring.acquire(1, device) == 1);
        CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u1 #1 @1", "await u0 #0 @0", "await u1 #1 @1"});
        CHECK_THROWS_AS(ring.acquire(2, device), std::logic_error);
        CHECK_THROWS_WITH(ring.acquire(2, device), "test ring: unit 2 acquired while all 2 slots are busy");
        CHECK(device.steps().empty());
        ring.release(0, device);
        CHECK(device.steps() == Steps{"release u0 #0 @0", "vacate u0 #0 @0", "fetch u2 #2 @0"});
        CHECK(ring.acquire(2, device) == 0);
        CHECK(device.steps() == Steps{"await u2 #2 @0"});
    }
}

TEST_CASE("slot ring: acquire and release out of the schedule's order, twice, or of no unit are refused", "[backends]") {
    SlotRing ring("test ring", slots_busy);
    LoggingDevice device;
    CHECK_THROWS_WITH(ring.acquire(0, device), "test ring: no unit 0");  // before place()
    place_for_inference(ring, {false, true, false, false}, 2, 1);
    CHECK_THROWS_AS(ring.acquire(-1, device), std::out_of_range);
    CHECK_THROWS_WITH(ring.acquire(4, device), "test ring: no unit 4");
    CHECK_THROWS_WITH(ring.release(4, device), "test ring: no unit 4");

    const std::string acquired_out_of_order =
        " acquired out of the schedule's order; streamed units are acquired as the step's schedule reads them, and "
        "reset_residency() starts every step";
    const std::string released_out_of_order = " released out of the schedule's order or without being acquired";
    CHECK_THROWS_WITH(ring.acquire(2, device), "test ring: unit 2" + acquired_out_of_order);
    CHECK_THROWS_WITH(ring.release(0, device), "test ring: unit 0" + released_out_of_order);
    CHECK_NOTHROW(ring.release(1, device));  // resident: nothing to hand back
    CHECK(ring.acquire(0, device) == 0);
    CHECK_THROWS_WITH(ring.acquire(0, device), "test ring: unit 0" + acquired_out_of_order);
    CHECK_THROWS_WITH(ring.release(2, device), "test ring: unit 2" + released_out_of_order);
    ring.release(0, device);
    CHECK_THROWS_WITH(ring.release(0, device), "test ring: unit 0" + released_out_of_order);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u2 #1 @1", "await u0 #0 @0", "release u0 #0 @0",
                                  "vacate u0 #0 @0", "fetch u3 #2 @0"});

    ring.clear();
    CHECK_THROWS_WITH(ring.acquire(0, device), "test ring: no unit 0");
}

TEST_CASE("slot ring: every step starts again at the first streamed read", "[backends]") {
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, std::vector<bool>(3, false), 2, 1);
    LoggingDevice device;
    ring.acquire(0, device);
    ring.release(0, device);
    ring.acquire(1, device);
    device.steps();
    // An aborted step: unit 1 was never released.
    ring.start_step();
    CHECK(ring.acquire(0, device) == 0);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u1 #1 @1", "await u0 #0 @0"});
    // A new placement starts a step too.
    place_for_inference(ring, std::vector<bool>(3, false), 1, 0);
    CHECK(ring.acquire(0, device) == 0);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "await u0 #0 @0"});
}

TEST_CASE("slot ring: a vacate that waits on the host is left to a later release or acquire, not to the look-ahead "
          "right after its release",
          "[backends]") {
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, std::vector<bool>(4, false), 2, 1);
    LoggingDevice device(true);
    CHECK(ring.acquire(0, device) == 0);
    CHECK(device.steps() == Steps{"fetch u0 #0 @0", "fetch u1 #1 @1", "await u0 #0 @0"});
    // Unit 0's kernels were just enqueued: the look-ahead does not wait for them.
    ring.release(0, device);
    CHECK(device.steps() == Steps{"release u0 #0 @0"});
    CHECK(ring.acquire(1, device) == 1);
    CHECK(device.steps() == Steps{"await u1 #1 @1"});
    // The next release vacates unit 0, released one unit earlier, but not unit 1.
    ring.release(1, device);
    CHECK(device.steps() == Steps{"release u1 #1 @1", "vacate u0 #0 @0", "fetch u2 #2 @0"});
    CHECK(ring.acquire(2, device) == 0);
    CHECK(device.steps() == Steps{"await u2 #2 @0"});
    // An acquire that needs the slot waits for unit 1's kernels rather than be refused.
    CHECK(ring.acquire(3, device) == 1);
    CHECK(device.steps() == Steps{"vacate u1 #1 @1", "fetch u3 #3 @1", "await u3 #3 @1"});
}

TEST_CASE("slot ring: a training schedule streams each unit again for the backward, in reverse", "[backends]") {
    // Units 0..3, unit 1 resident: the forward reads 0 1 2 3, the backward 3 2 1 0. The streamed
    // reads are u0 u2 u3 u3 u2 u0 (#0..#5), through 2 slots with a look-ahead of 1.
    SlotRing ring("test ring", slots_busy);
    const UnitSchedule schedule = UnitSchedule::training(4);
    CHECK(schedule.reads() == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
    ring.place({false, true, false, false}, schedule.reads(), 2, 1);
    CHECK(ring.streamed_reads() == 6);
    LoggingDevice device;
    for (const int u : {0, 1, 2, 3}) {
        ring.acquire(u, device);
        ring.release(u, device);
    }
    device.steps();
    // The backward's first read, unit 3 again, streams again: #3, which the forward's look-ahead
    // already fetched into slot 1.
    CHECK(ring.acquire(3, device) == 1);
    CHECK(device.steps() == Steps{"await u3 #3 @1"});
    ring.release(3, device);
    CHECK(device.steps() == Steps{"release u3 #3 @1", "vacate u3 #3 @1", "fetch u0 #5 @1"});
    // Reading unit 0 before unit 2, out of the schedule's order, is refused.
    CHECK_THROWS_AS(ring.acquire(0, device), std::logic_error);
    CHECK(ring.acquire(2, device) == 0);
    ring.release(2, device);
    CHECK(ring.acquire(1, device) == kResident);
    CHECK(ring.acquire(0, device) == 1);
}

TEST_CASE("slot ring: every unit resident needs no slot", "[backends]") {
    SlotRing ring("test ring", slots_busy);
    place_for_inference(ring, std::vector<bool>(3, true), 0, 2);
    CHECK(ring.streamed_reads() == 0);
    LoggingDevice device;
    for (int u = 0; u < 3; ++u) {
        CHECK(ring.acquire(u, device) == kResident);
        ring.release(u, device);
    }
    CHECK(device.steps().empty());
    CHECK_THROWS_AS(place_for_inference(ring, {true, false}, 0, 2), std::logic_error);
}

TEST_CASE("fill_units_in_place: each unit's fp32 weights converted into place", "[backends]") {
    const auto model = *find_builtin_model("tiny_odd");
    const auto layout = WeightLayout::for_model(model);
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        INFO(enum_name(dtype));
        const auto packed = pack_units(unit_bytes(layout, dtype), kUnitAlignmentBytes);
        const auto place_with = [&](const UnitFiller& fill) {
            std::vector<std::byte> memory(static_cast<std::size_t>(packed.total_bytes));
            fill_units_in_place(layout, dtype, fill, [&](int unit) { return memory.data() + packed.offsets[static_cast<std::size_t>(unit)]; });
            return memory;
        };
        const UnitFiller plain = [&](int unit, std::span<float> dst) { fill_synthetic_unit(model, layout, unit, 7, dst); };
        const auto through_fp32 = place_with(plain);
        // What was placed is each unit's fp32 values converted, and what the synthetic weights'
        // own pass in that dtype writes.
        std::vector<std::byte> own(static_cast<std::size_t>(packed.total_bytes));
        for (int u = 0; u < static_cast<int>(layout.units.size()); ++u)
            fill_synthetic_unit_as(model, layout, u, 7, dtype, own.data() + packed.offsets[static_cast<std::size_t>(u)]);
        CHECK(own == through_fp32);
        for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
            std::vector<float> values(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel));
            fill_synthetic_unit(model, layout, u, 7, values);
            std::vector<std::byte> want(values.size() * dtype_size(dtype));
            convert_from_f32(values, dtype, want.data());
            CHECK(std::equal(want.begin(), want.end(), through_fp32.begin() + packed.offsets[static_cast<std::size_t>(u)]));
        }
    }
}

TEST_CASE("backend availability says why a backend cannot run here", "[backends]") {
    CHECK(backend_unavailable_reason(BackendId::host).empty());
#ifdef SWEETSPOT_HAVE_CUDA
    int count = 0;
    const bool gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();
#endif
    for (const BackendId backend : {BackendId::device, BackendId::explicit_copy, BackendId::uvm, BackendId::uvm_prefetch}) {
        const std::string name(enum_name(backend));
        INFO(name);
        const auto why = backend_unavailable_reason(backend);
#ifdef SWEETSPOT_HAVE_CUDA
        if (gpu) {
            CHECK(why.empty());
            continue;
        }
        // On a machine without a driver (CI), said as such; with one and no GPU, no GPU found.
        CHECK_THAT(why, ContainsSubstring(name + "' needs a GPU: "));
        CHECK((why.find("no NVIDIA driver on this machine") != std::string::npos ||
               why.find("no GPU found") != std::string::npos || why.find("older than this CUDA runtime") != std::string::npos));
#else
        CHECK_THAT(why, ContainsSubstring("built without CUDA"));
#endif
        CHECK_THAT(why, ContainsSubstring(name));
        BackendConfig config;
        config.backend = backend;
        CHECK_THROWS_AS(make_backend(config), std::runtime_error);
    }
    BackendConfig bad;
    bad.streams = -1;
    CHECK_THROWS_AS(make_backend(bad), std::invalid_argument);
}

#ifdef SWEETSPOT_HAVE_CUDA
using sweetspot::test::require_gpu;

namespace {

// Non-zero everywhere, different in every unit.
float pattern(int unit, std::size_t i) { return static_cast<float>(unit + 1) + static_cast<float>(i % 251) / 256.0f; }

void fill_pattern(int unit, std::span<float> dst) {
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = pattern(unit, i);
}

std::vector<std::byte> expected_unit(const WeightLayout& layout, int unit, DType dtype) {
    std::vector<float> values(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(unit)].numel));
    fill_pattern(unit, values);
    std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
    convert_from_f32(values, dtype, bytes.data());
    return bytes;
}

std::vector<ModelConfig> test_models() {
    // tiny_deep has enough blocks for a budget to keep some units resident and stream others.
    return {*find_builtin_model("tiny"), *find_builtin_model("tiny_odd"), ModelConfig{"tiny_deep", 8, 64, 4, 512, 128, 1e-5f}};
}

// `percent` of the weights, raised to the smallest budget the configuration can run with: the
// tiny models' units are similar in size, so 40 % often cannot hold S slots.
std::int64_t test_budget(const BackendConfig& config, const std::vector<std::int64_t>& units, int percent) {
    const auto total = total_of(units);
    if (percent >= 100) return total;
    const std::int64_t wanted = total * percent / 100;
    const std::int64_t minimum = config.backend == BackendId::uvm ? *std::max_element(units.begin(), units.end())
                                                      : minimum_streaming_budget(units, streaming_slots(config.prefetch_depth));
    return std::max(wanted, minimum);
}

// Unit `unit`'s weights as the backend must hand them out, in the cell's dtype.
using ExpectedUnit = std::function<std::vector<std::byte>(int unit)>;

// Empty when what the compute stream read through every acquired pointer is the unit's weights.
std::string compare_units(const WeightLayout& layout, const ExpectedUnit& expected, const PackedUnits& packed,
                          const std::byte* seen, int iteration) {
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
        const auto want = expected(u);
        const std::byte* got = seen + packed.offsets[static_cast<std::size_t>(u)];
        for (std::size_t i = 0; i < want.size(); ++i) {
            if (got[i] != want[i]) {
                return "iteration " + std::to_string(iteration) + ", unit " + std::to_string(u) + ": byte " +
                       std::to_string(i) + " of " + std::to_string(want.size()) + " is " +
                       std::to_string(static_cast<int>(got[i])) + ", expected " + std::to_string(static_cast<int>(want[i]));
            }
        }
    }
    return {};
}

// Three forwards as the model runs them: reset, then acquire → use on the compute stream →
// release for every unit. The "use" is a copy of the unit's bytes to the host on the compute
// stream: it sees what a kernel enqueued there would see. By default the units hold fill_pattern.
void run_forwards(Backend& backend, const WeightLayout& layout, DType dtype, cudaStream_t stream,
                  const ExpectedUnit& expected = {}) {
    const ExpectedUnit want = expected ? expected : [&](int unit) { return expected_unit(layout, unit, dtype); };
    const auto units = unit_bytes(layout, dtype);
    const auto packed = pack_units(units, 256);
    const auto seen = allocate_pinned(packed.total_bytes);
    for (int iteration = 0; iteration < 3; ++iteration) {
        backend.reset_residency();
        std::memset(seen.get(), 0, static_cast<std::size_t>(packed.total_bytes));
        for (int u = 0; u < static_cast<int>(units.size()); ++u) {
            const void* weights = backend.acquire(u);
            REQUIRE(weights != nullptr);
            CUDA_CHECK(cudaMemcpyAsync(seen.get() + packed.offsets[static_cast<std::size_t>(u)], weights,
                                       static_cast<std::size_t>(units[static_cast<std::size_t>(u)]), cudaMemcpyDefault, stream));
            backend.release(u);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        CHECK(compare_units(layout, want, packed, seen.get(), iteration) == "");
    }
}

void check_placement(const Backend& backend, const BackendConfig& config, const std::vector<std::int64_t>& units) {
    const std::int64_t total = total_of(units);
    const auto s = backend.placement();
    // What the memory estimator predicts for the weights is what the backend placed.
    CHECK(s.device_weight_bytes == backend_traits(config.backend).footprint(config, units).device_bytes);
    CHECK(s.resident_bytes + s.streamed_bytes == total);
    CHECK(s.device_weight_bytes <= config.budget_bytes);
    if (config.backend == BackendId::uvm) {
        CHECK(s.streamed_bytes == total);
        CHECK(s.device_weight_bytes == std::min(config.budget_bytes, total));
    }
    if (config.backend == BackendId::device || (config.backend == BackendId::explicit_copy && config.budget_bytes >= total)) CHECK(s.streamed_bytes == 0);
}

// Every test model in fp32 and fp16 through `base` at `percent` of the weights as budget.
void check_backend(const BackendConfig& base, int percent) {
    for (const auto& model : test_models()) {
        for (const DType dtype : {DType::fp32, DType::fp16}) {
            const auto layout = WeightLayout::for_model(model);
            const auto units = unit_bytes(layout, dtype);
            CudaStream stream;
            BackendConfig config = base;
            config.dtype = dtype;
            config.compute_stream = stream.get();
            config.budget_bytes = test_budget(config, units, percent);
            INFO(enum_name(config.backend) << ": model " << model.name << ", " << enum_name(dtype) << ", budget " << percent << "% -> "
                             << config.budget_bytes << " of " << total_of(units) << " bytes, prefetch "
                             << config.prefetch_depth << ", streams " << config.streams << ", evict "
                             << (config.evict == UvmEvict::migrate ? "migrate" : "read_mostly") << ", policy "
                             << policy_name(config.resident));
            auto backend = make_backend(config);
            backend->place(layout, fill_pattern, UnitSchedule::inference(layout.unit_count()));
            check_placement(*backend, config, units);
            run_forwards(*backend, layout, dtype, stream.get());
        }
    }
}

BackendConfig gpu_config(const char* name, int prefetch_depth, int streams) {
    BackendConfig c;
    c.backend = parse_enum<BackendId>(name).value();
    c.prefetch_depth = prefetch_depth;
    c.streams = streams;
    return c;
}

}  // namespace

TEST_CASE("page-locked memory in pieces: pieces must start on huge pages, after each other", "[backends]") {
    constexpr std::int64_t MiB = std::int64_t{1} << 20;
    const auto refused = [](std::int64_t bytes, std::vector<std::int64_t> offsets) {
        CHECK_THROWS_AS(PinnedHostMemory(bytes, offsets, {}), std::invalid_argument);
    };
    refused(6 * MiB, {});                 // no piece
    refused(6 * MiB, {2 * MiB});          // the first not at 0
    refused(6 * MiB, {0, 3 * MiB});       // not on a huge page
    refused(6 * MiB, {0, 4 * MiB, 2 * MiB});  // not increasing
    refused(6 * MiB, {0, 6 * MiB});       // past the end
    refused(0, {0});
}

TEST_CASE("page-locked memory in pieces: each is ready in order, at its place on the device", "[gpu][backends]") {
    require_gpu();
    constexpr std::int64_t MiB = std::int64_t{1} << 20;
    const std::vector<std::int64_t> offsets = {0, 2 * MiB, 8 * MiB};
    const std::int64_t bytes = 9 * MiB + 123;
    const CudaStream stream;
    std::vector<std::size_t> order;
    std::vector<std::byte*> devices;
    // Each piece is filled by the GPU as soon as it is ready, with its own byte value.
    PinnedHostMemory memory(bytes, offsets, [&](std::size_t piece, std::byte* device) {
        order.push_back(piece);
        devices.push_back(device);
        const std::int64_t end = piece + 1 < offsets.size() ? offsets[piece + 1] : bytes;
        CUDA_CHECK(cudaMemsetAsync(device, static_cast<int>(piece + 1), static_cast<std::size_t>(end - offsets[piece]),
                                   stream.get()));
    });
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    CHECK(order == std::vector<std::size_t>{0, 1, 2});
    for (std::size_t i = 0; i < offsets.size(); ++i) CHECK(devices[i] == memory.device_pointer() + offsets[i]);
    const auto* host = reinterpret_cast<const unsigned char*>(memory.get());
    for (std::size_t i = 0; i < offsets.size(); ++i) {
        const std::int64_t end = i + 1 < offsets.size() ? offsets[i + 1] : bytes;
        INFO("piece " << i);
        CHECK(std::all_of(host + offsets[i], host + end, [&](unsigned char b) { return b == i + 1; }));
    }
    // A piece is page-locked: copied to the device and back asynchronously.
    const DeviceMemory d = allocate_device(6 * MiB);
    CUDA_CHECK(cudaMemcpyAsync(d.get(), memory.get() + offsets[1], 6 * MiB, cudaMemcpyHostToDevice, stream.get()));
    CUDA_CHECK(cudaMemsetAsync(memory.device_pointer() + offsets[1], 0, 6 * MiB, stream.get()));
    CUDA_CHECK(cudaMemcpyAsync(memory.get() + offsets[1], d.get(), 6 * MiB, cudaMemcpyDeviceToHost, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    CHECK(std::all_of(host + offsets[1], host + offsets[2], [](unsigned char b) { return b == 2; }));
}

TEST_CASE("device: every unit resident, read back intact", "[gpu][backends]") {
    require_gpu();
    check_backend(gpu_config("device", 0, 0), 100);
}

namespace {

// Each GPU backend at a budget where it keeps some units resident and streams the others, with
// each UVM eviction mode.
std::vector<BackendConfig> placing_configs() {
    std::vector<BackendConfig> configs{gpu_config("device", 0, 0), gpu_config("explicit-copy", 1, 1),
                                       gpu_config("uvm", 0, 0)};
    for (const auto evict : {UvmEvict::migrate, UvmEvict::read_mostly}) {
        configs.push_back(gpu_config("uvm-prefetch", 1, 1));
        configs.back().evict = evict;
    }
    return configs;
}

// `base` for `dtype` on `stream`, at the budget of placing_configs.
BackendConfig placing_config(const BackendConfig& base, DType dtype, const std::vector<std::int64_t>& units,
                             cudaStream_t stream) {
    auto config = base;
    config.dtype = dtype;
    config.compute_stream = stream;
    config.budget_bytes = test_budget(config, units, config.backend == BackendId::device ? 100 : 60);
    return config;
}

std::string config_name(const BackendConfig& config) {
    return std::string(enum_name(config.backend)) + ", evict " +
           (config.evict == UvmEvict::migrate ? "migrate" : "read_mostly") + ", " + std::string(enum_name(config.dtype));
}

}  // namespace

TEST_CASE("every GPU backend: weights a filler can make by kernels are made there, at each unit's place",
          "[gpu][backends]") {
    require_gpu();
    const auto layout = WeightLayout::for_model(test_models()[2]);
    for (const auto& base : placing_configs()) {
        for (const DType dtype : {DType::fp32, DType::bf16}) {
            const auto units = unit_bytes(layout, dtype);
            CudaStream stream;
            const auto config = placing_config(base, dtype, units, stream.get());
            INFO(config_name(config));
            // The host fill must not run; the device fill copies the pattern's bytes in, on the
            // stream given (the compute stream, where the backend has no stream of its own).
            int device_fills = 0;
            const UnitFiller fill =
                UnitFiller([](int, std::span<float>) { FAIL("the host fill ran although kernels can fill"); })
                    .with_device_fill([&](int unit, DType as, void* dst, CUstream_st* on) {
                        CHECK(as == dtype);
                        CHECK(on != nullptr);
                        if (!backend_traits(config.backend).managed_weights) CHECK(on == stream.get());
                        const auto bytes = expected_unit(layout, unit, as);
                        CUDA_CHECK(cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyDefault, on));
                        CUDA_CHECK(cudaStreamSynchronize(on));
                        ++device_fills;
                    });
            auto backend = make_backend(config);
            backend->place(layout, fill, UnitSchedule::inference(layout.unit_count()));
            CHECK(device_fills == static_cast<int>(layout.units.size()));
            check_placement(*backend, config, units);
            run_forwards(*backend, layout, dtype, stream.get());
        }
    }
}

TEST_CASE("every GPU backend: the synthetic weights the GPU makes are the host's, bit for bit, wherever they are placed",
          "[gpu][backends]") {
    require_gpu();
    const auto model = test_models()[2];
    const auto layout = WeightLayout::for_model(model);
    constexpr std::uint64_t kSeed = 11;
    for (const auto& base : placing_configs()) {
        for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
            const auto units = unit_bytes(layout, dtype);
            CudaStream stream;
            const auto config = placing_config(base, dtype, units, stream.get());
            INFO(config_name(config));
            const UnitFiller fill =
                UnitFiller([](int, std::span<float>) { FAIL("the host fill ran although kernels can fill"); })
                    .with_device_fill([&](int unit, DType as, void* dst, CUstream_st* on) {
                        gpu::fill_synthetic_unit(model, layout, unit, kSeed, as, dst, on);
                    });
            auto backend = make_backend(config);
            backend->place(layout, fill, UnitSchedule::inference(layout.unit_count()));
            run_forwards(*backend, layout, dtype, stream.get(), [&](int unit) {
                std::vector<std::byte> bytes(static_cast<std::size_t>(units[static_cast<std::size_t>(unit)]));
                fill_synthetic_unit_as(model, layout, unit, kSeed, dtype, bytes.data());
                return bytes;
            });
        }
    }
}

TEST_CASE("device: a budget below the weights is refused", "[gpu][backends]") {
    require_gpu();
    const auto layout = WeightLayout::for_model(*find_builtin_model("tiny"));
    auto config = gpu_config("device", 0, 0);
    config.budget_bytes = total_of(unit_bytes(layout, DType::fp32)) - 1;
    auto backend = make_backend(config);
    CHECK_THROWS_WITH(backend->place(layout, fill_pattern, UnitSchedule::inference(layout.unit_count())),
                      ContainsSubstring("keeps all weights resident"));
}

TEST_CASE("device: placed for training, it holds gradients, fp32 master weights and zeroed moments", "[gpu][backends]") {
    require_gpu();
    const auto layout = WeightLayout::for_model(*find_builtin_model("tiny_odd"));
    for (const DType dtype : {DType::fp32, DType::bf16}) {
        INFO(enum_name(dtype));
        CudaStream stream;
        auto config = gpu_config("device", 0, 0);
        config.dtype = dtype;
        config.compute_stream = stream.get();
        config.budget_bytes = total_of(unit_bytes(layout, dtype));
        auto backend = make_backend(config);
        backend->place(layout, fill_pattern, UnitSchedule::training(layout.unit_count()));
        for (int u = 0; u < layout.unit_count(); ++u) {
            const auto numel = static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel);
            const UnitUpdate update = backend->acquire_update(u);
            CHECK(update.weights == backend->acquire(u));
            CHECK(update.gradient == backend->gradient(u));
            CHECK(update.gradient != update.weights);
            // The master weights are the fill's fp32 values, which round to the weights' bf16 bits.
            CHECK((update.master == nullptr) == (dtype == DType::fp32));
            const auto fp32_of = [&](const float* p) {
                std::vector<float> host(numel);
                CUDA_CHECK(cudaMemcpy(host.data(), p, numel * sizeof(float), cudaMemcpyDeviceToHost));
                return host;
            };
            if (update.master != nullptr) {
                std::vector<float> want(numel);
                fill_pattern(u, want);
                CHECK(fp32_of(update.master) == want);
            }
            for (const float* moment : {update.m, update.v}) {
                const auto values = fp32_of(moment);
                CHECK(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
            }
            backend->release_update(u);
        }
        run_forwards(*backend, layout, dtype, stream.get());
    }
}

TEST_CASE("explicit-copy: slots reused in order at every look-ahead and stream count", "[gpu][backends]") {
    require_gpu();
    for (const int depth : {-1, 0, 1, 2})
        for (const int streams : {0, 1, 2}) check_backend(gpu_config("explicit-copy", depth, streams), 40);
    for (const int depth : {-1, 1}) check_backend(gpu_config("explicit-copy", depth, 1), 100);
    for (const auto policy : kPolicies) {
        auto config = gpu_config("explicit-copy", 2, 2);
        config.resident = policy;
        check_backend(config, 60);
    }
}

TEST_CASE("explicit-copy placed for training: each streamed gradient slot reaches the unit's page-locked gradient, "
          "the slots reused in turn, the streamed units counted across the link", "[gpu][backends]") {
    require_gpu();
    // tiny_deep's ten units at 40 % of its weights: some resident, the others streamed, through two
    // slots (a look-ahead of 1) or one (jit).
    const auto layout = WeightLayout::for_model(test_models()[2]);
    const int n = layout.unit_count();
    for (const int depth : {1, -1}) {
        INFO("prefetch " << depth);
        CudaStream stream;
        auto config = gpu_config("explicit-copy", depth, 1);
        config.optimizer = StateHome::host;
        config.compute_stream = stream.get();
        const auto units = unit_bytes(layout, DType::fp32);
        config.budget_bytes = test_budget(config, units, 40);
        auto backend = make_backend(config);
        backend->place(layout, fill_pattern, UnitSchedule::training(n));
        const PlacementStats placed = backend->placement();
        REQUIRE(placed.streamed_units > 0);
        REQUIRE(placed.resident_units > 0);
        const ResidencyPlan plan = plan_residency(units, config.budget_bytes, streaming_slots(depth), config.resident);
        for (int step = 0; step < 2; ++step) {
            INFO("step " << step);
            // A byte per unit and step, written into the gradient the backward is handed.
            const auto mark = [&](int u) { return static_cast<unsigned char>(u * 7 + step * 3 + 1); };
            backend->reset_residency();
            for (int u = 0; u < n; ++u) {
                backend->acquire(u);
                backend->release(u);
            }
            for (int u = n - 1; u >= 0; --u) {
                backend->acquire(u);
                void* g = backend->gradient(u);
                CHECK(backend->gradient(u) == g);  // the same slot until the unit is released
                CUDA_CHECK(cudaMemsetAsync(g, mark(u), static_cast<std::size_t>(units[static_cast<std::size_t>(u)]), stream.get()));
                backend->release(u);
            }
            for (int u = 0; u < n; ++u) {
                INFO("unit " << u);
                const auto bytes = static_cast<std::size_t>(units[static_cast<std::size_t>(u)]);
                const UnitUpdate update = backend->acquire_update(u);
                REQUIRE(update.on_host());
                CHECK(update.streamed == !plan.resident[static_cast<std::size_t>(u)]);
                std::vector<unsigned char> seen(bytes);
                if (update.streamed) {
                    // Its own page-locked gradient and weights, the gradient there once its copy is.
                    CHECK(update.gradient == update.host_gradient);
                    CHECK(update.weights == update.host_weights);
                    CHECK(update.weights == backend->stored_weights(u));
                    REQUIRE(update.gradient_copied != nullptr);
                    CUDA_CHECK(cudaEventSynchronize(update.gradient_copied));
                    std::memcpy(seen.data(), update.host_gradient, bytes);
                } else {
                    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
                    CUDA_CHECK(cudaMemcpy(seen.data(), update.gradient, bytes, cudaMemcpyDeviceToHost));
                }
                CHECK(std::all_of(seen.begin(), seen.end(), [&](unsigned char b) { return b == mark(u); }));
                backend->release_update(u);
            }
            // Every streamed unit in twice and its gradient out once; the resident ones move in the
            // step's update, not here.
            CHECK(backend->link_bytes_since_reset() == LinkBytes{plan.streamed_bytes, 2 * plan.streamed_bytes});
        }
        // The weights the next forward reads, unchanged here.
        run_forwards(*backend, layout, DType::fp32, stream.get());
    }
}

TEST_CASE("explicit-copy: a budget too small for the slots is refused", "[gpu][backends]") {
    require_gpu();
    const auto layout = WeightLayout::for_model(*find_builtin_model("tiny"));
    auto config = gpu_config("explicit-copy", 2, 1);
    config.budget_bytes = 1000;
    auto backend = make_backend(config);
    CHECK_THROWS_WITH(backend->place(layout, fill_pattern, UnitSchedule::inference(layout.unit_count())),
                      ContainsSubstring("3 streaming slot"));
}

TEST_CASE("streaming backends: acquiring past the slots without releasing is refused, and the next forward works",
          "[gpu][backends]") {
    require_gpu();
    const auto layout = WeightLayout::for_model(test_models()[2]);
    const auto units = unit_bytes(layout, DType::fp32);
    for (const auto* name : {"explicit-copy", "uvm-prefetch"}) {
        INFO(name);
        CudaStream stream;
        auto config = gpu_config(name, 1, 1);
        config.compute_stream = stream.get();
        config.budget_bytes = minimum_streaming_budget(units, 2);  // everything streamed through 2 slots
        auto backend = make_backend(config);
        backend->place(layout, fill_pattern, UnitSchedule::inference(layout.unit_count()));
        REQUIRE(backend->placement().streamed_units == static_cast<int>(units.size()));
        backend->acquire(0);
        backend->acquire(1);
        CHECK_THROWS_AS(backend->acquire(2), std::logic_error);
        run_forwards(*backend, layout, DType::fp32, stream.get());
    }
}

TEST_CASE("uvm: on demand, with and without LRU eviction, both eviction modes", "[gpu][backends]") {
    require_gpu();
    for (const auto evict : {UvmEvict::migrate, UvmEvict::read_mostly}) {
        for (const int percent : {100, 40}) {
            auto config = gpu_config("uvm", 0, 0);
            config.evict = evict;
            check_backend(config, percent);
        }
    }
}

TEST_CASE("uvm-prefetch: every look-ahead, stream count and eviction mode", "[gpu][backends]") {
    require_gpu();
    for (const auto evict : {UvmEvict::migrate, UvmEvict::read_mostly}) {
        for (const int depth : {-1, 0, 1, 2}) {
            for (const int streams : {0, 1, 2}) {
                auto config = gpu_config("uvm-prefetch", depth, streams);
                config.evict = evict;
                check_backend(config, 40);
            }
            auto config = gpu_config("uvm-prefetch", depth, 1);
            config.evict = evict;
            check_backend(config, 100);
        }
    }
    for (const auto policy : kPolicies) {
        auto config = gpu_config("uvm-prefetch", 1, 2);
        config.resident = policy;
        check_backend(config, 60);
    }
}

TEST_CASE("the UVM backends refuse weights larger than the free device memory before allocating", "[gpu][backends]") {
    require_gpu();
    // A vocabulary of 2^24 at hidden size 4096: embedding and lm_head alone are 512 GiB in fp32.
    // Only the layout is built; nothing of that size is ever allocated.
    const ModelConfig huge{"huge_vocab", 1, 4096, 32, 1 << 24, 1024, 1e-5f};
    const auto layout = WeightLayout::for_model(huge);
    const auto total = total_of(unit_bytes(layout, DType::fp32));
    std::size_t free_bytes = 0, device_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &device_bytes));
    REQUIRE(total > static_cast<std::int64_t>(device_bytes));

    for (const char* name : {"uvm", "uvm-prefetch"}) {
        INFO(name);
        CudaStream stream;
        auto config = gpu_config(name, 1, 1);
        config.budget_bytes = total;
        config.compute_stream = stream.get();
        auto backend = make_backend(config);
        std::atomic<bool> filled{false};
        std::size_t free_before = 0, free_after = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_before, &device_bytes));
        CHECK_THROWS_AS(backend->place(layout, [&](int, std::span<float>) { filled = true; },
                                       UnitSchedule::inference(layout.unit_count())),
                        ManagedMemoryRefused);
        CUDA_CHECK(cudaMemGetInfo(&free_after, &device_bytes));
        CHECK_FALSE(filled);
        CHECK(free_after == free_before);
    }
}
#endif
