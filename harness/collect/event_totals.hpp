#pragma once
// A cell's event records reduced to the totals stored on its `cells` row: Unified Memory traffic
// and faults, and how busy the GPU was (kernels, copies, and how much they overlapped). Pure
// functions, so the interval arithmetic is tested without a GPU.
#include <cstdint>
#include <vector>

#include "harness/collect/events.hpp"

namespace sweetspot {

// A half-open time interval [start_ns, end_ns).
struct Interval {
    std::int64_t start_ns = 0, end_ns = 0;
    friend bool operator==(const Interval&, const Interval&) = default;
};

// The union of `intervals` as disjoint intervals sorted by start. Empty and reversed intervals
// (end <= start) cover nothing and are dropped; touching intervals merge.
std::vector<Interval> merge_intervals(std::vector<Interval> intervals);
// Nanoseconds covered by disjoint intervals (the output of merge_intervals).
std::int64_t covered_ns(const std::vector<Interval>& disjoint);
// Nanoseconds covered by both of two sets of disjoint, sorted intervals.
std::int64_t overlap_ns(const std::vector<Interval>& a, const std::vector<Interval>& b);

struct EventTotals {
    std::int64_t um_htod_bytes = 0, um_dtoh_bytes = 0;  // UM migrations (copy kinds 11 and 12)
    std::int64_t gpu_page_faults = 0;                   // faults, summed over the fault groups
    std::int64_t cpu_page_faults = 0;                   // one record is one fault
    std::int64_t thrashing = 0, throttling = 0, remote_maps = 0;  // counter records
    double kernel_busy_ms = 0;           // time at least one kernel ran
    double copy_ms = 0;                  // time at least one copy (UM or explicit) ran
    double copy_compute_overlap_ms = 0;  // time both did
    std::int64_t dropped_records = 0;
    double collector_overhead_ms = 0;    // time covered by CUPTI's overhead records
    friend bool operator==(const EventTotals&, const EventTotals&) = default;
};

EventTotals totals_of(const CellEvents& events);

}  // namespace sweetspot
