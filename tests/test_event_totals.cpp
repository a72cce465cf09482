// A cell's event totals: interval unions and intersections on hand-made records, and the
// Unified Memory counts.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include "harness/collect/event_totals.hpp"

using namespace sweetspot;
using Catch::Approx;

namespace {

KernelRecord kernel(std::int64_t start, std::int64_t end) { return {.start_ns = start, .end_ns = end, .name = "k"}; }

MemcpyRecord copy(std::int64_t start, std::int64_t end, std::int32_t kind, std::int64_t bytes) {
    MemcpyRecord m;
    m.start_ns = start;
    m.end_ns = end;
    m.copy_kind = kind;
    m.bytes = bytes;
    return m;
}

}  // namespace

TEST_CASE("merging intervals joins overlapping, nested and touching ones", "[events]") {
    CHECK(merge_intervals({}).empty());
    CHECK(merge_intervals({{0, 10}, {5, 20}}) == std::vector<Interval>{{0, 20}});        // overlapping
    CHECK(merge_intervals({{0, 100}, {10, 20}, {30, 40}}) == std::vector<Interval>{{0, 100}});  // nested
    CHECK(merge_intervals({{50, 60}, {0, 10}}) == std::vector<Interval>{{0, 10}, {50, 60}});    // disjoint, unsorted
    CHECK(merge_intervals({{0, 10}, {10, 20}}) == std::vector<Interval>{{0, 20}});       // touching
    CHECK(merge_intervals({{5, 5}, {9, 3}, {0, 1}}) == std::vector<Interval>{{0, 1}});   // empty and reversed dropped
}

TEST_CASE("covered and overlapping time of interval sets", "[events]") {
    CHECK(covered_ns({}) == 0);
    CHECK(covered_ns({{0, 10}, {20, 25}}) == 15);
    CHECK(overlap_ns({{0, 10}, {20, 30}}, {{5, 25}}) == 10);
    CHECK(overlap_ns({{0, 100}}, {{10, 20}, {30, 40}, {90, 120}}) == 30);
    CHECK(overlap_ns({{0, 10}}, {{10, 20}}) == 0);
    CHECK(overlap_ns({}, {{0, 10}}) == 0);
}

TEST_CASE("kernel busy time is the union of the kernels' intervals", "[events]") {
    CellEvents e;
    SECTION("overlapping") {
        e.kernels = {kernel(0, 2'000'000), kernel(1'000'000, 3'000'000)};
        CHECK(totals_of(e).kernel_busy_ms == Approx(3.0));
    }
    SECTION("nested") {
        e.kernels = {kernel(0, 4'000'000), kernel(1'000'000, 2'000'000)};
        CHECK(totals_of(e).kernel_busy_ms == Approx(4.0));
    }
    SECTION("disjoint") {
        e.kernels = {kernel(0, 1'000'000), kernel(5'000'000, 6'500'000)};
        CHECK(totals_of(e).kernel_busy_ms == Approx(2.5));
    }
}

TEST_CASE("copy time and its overlap with compute", "[events]") {
    CellEvents e;
    // Kernels cover [0, 4) ms and [6, 8) ms; copies cover [3, 7) ms: 1 ms + 1 ms overlap.
    e.kernels = {kernel(0, 4'000'000), kernel(6'000'000, 8'000'000)};
    e.memcpys = {copy(3'000'000, 5'000'000, 11, 4096), copy(4'500'000, 7'000'000, 1, 100)};
    const auto t = totals_of(e);
    CHECK(t.kernel_busy_ms == Approx(6.0));
    CHECK(t.copy_ms == Approx(4.0));
    CHECK(t.copy_compute_overlap_ms == Approx(2.0));
}

TEST_CASE("Unified Memory totals count and sum the right records", "[events]") {
    CellEvents e;
    e.memcpys = {copy(0, 10, 11, 4096), copy(10, 20, 11, 8192), copy(20, 30, 12, 2048),
                 copy(30, 40, 1, 1 << 20)};  // an explicit copy: not UM traffic
    GpuPageFaultRecord g1, g2;
    g1.faults = 7;
    g2.faults = 5;
    e.gpu_page_faults = {g1, g2};
    e.cpu_page_faults.resize(3);
    e.cpu_page_faults[0].fault_pc = 0x401000;  // a PC, not a count: must not be summed
    UmOtherRecord thrash, throttle, remote;
    throttle.kind = UmOtherRecord::Kind::throttling;
    remote.kind = UmOtherRecord::Kind::remote_map;
    e.um_other = {thrash, thrash, throttle, remote};
    OverheadRecord o1, o2;
    o1.start_ns = 0;
    o1.end_ns = 1'000'000;
    o2.start_ns = 500'000;
    o2.end_ns = 2'000'000;
    e.overheads = {o1, o2};
    e.dropped_records = 3;

    const auto t = totals_of(e);
    CHECK(t.um_htod_bytes == 12288);
    CHECK(t.um_dtoh_bytes == 2048);
    CHECK(t.gpu_page_faults == 12);
    CHECK(t.cpu_page_faults == 3);
    CHECK(t.thrashing == 2);
    CHECK(t.throttling == 1);
    CHECK(t.remote_maps == 1);
    CHECK(t.dropped_records == 3);
    CHECK(t.collector_overhead_ms == Approx(2.0));
    CHECK(t.kernel_busy_ms == 0);
}

TEST_CASE("no events, no totals", "[events]") {
    CHECK(totals_of(CellEvents{}) == EventTotals{});
}
