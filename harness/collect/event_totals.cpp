#include "harness/collect/event_totals.hpp"

#include <algorithm>

namespace sweetspot {
namespace {

constexpr std::int32_t kCopyKindUmHtoD = 11;
constexpr std::int32_t kCopyKindUmDtoH = 12;

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

template <class Record>
std::vector<Interval> union_of(const std::vector<Record>& records) {
    std::vector<Interval> intervals;
    intervals.reserve(records.size());
    for (const auto& r : records) intervals.push_back({r.start_ns, r.end_ns});
    return merge_intervals(std::move(intervals));
}

}  // namespace

std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
    std::erase_if(intervals, [](const Interval& i) { return i.end_ns <= i.start_ns; });
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
    std::vector<Interval> merged;
    for (const auto& i : intervals) {
        if (!merged.empty() && i.start_ns <= merged.back().end_ns)
            merged.back().end_ns = std::max(merged.back().end_ns, i.end_ns);
        else
            merged.push_back(i);
    }
    return merged;
}

std::int64_t covered_ns(const std::vector<Interval>& disjoint) {
    std::int64_t total = 0;
    for (const auto& i : disjoint) total += i.end_ns - i.start_ns;
    return total;
}

std::int64_t overlap_ns(const std::vector<Interval>& a, const std::vector<Interval>& b) {
    // Both sorted and disjoint: walk them together, always advancing the one that ends first.
    std::int64_t total = 0;
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const auto lo = std::max(a[i].start_ns, b[j].start_ns);
        const auto hi = std::min(a[i].end_ns, b[j].end_ns);
        if (hi > lo) total += hi - lo;
        if (a[i].end_ns < b[j].end_ns) ++i;
        else ++j;
    }
    return total;
}

EventTotals totals_of(const CellEvents& e) {
    EventTotals t;
    for (const auto& m : e.memcpys) {
        if (m.copy_kind == kCopyKindUmHtoD) t.um_htod_bytes += m.bytes;
        if (m.copy_kind == kCopyKindUmDtoH) t.um_dtoh_bytes += m.bytes;
    }
    for (const auto& f : e.gpu_page_faults) t.gpu_page_faults += f.faults;
    t.cpu_page_faults = static_cast<std::int64_t>(e.cpu_page_faults.size());
    for (const auto& u : e.um_other) {
        switch (u.kind) {
            case UmOtherRecord::Kind::thrashing: ++t.thrashing; break;
            case UmOtherRecord::Kind::throttling: ++t.throttling; break;
            case UmOtherRecord::Kind::remote_map: ++t.remote_maps; break;
        }
    }
    const auto kernels = union_of(e.kernels);
    const auto copies = union_of(e.memcpys);
    t.kernel_busy_ms = ms(covered_ns(kernels));
    t.copy_ms = ms(covered_ns(copies));
    t.copy_compute_overlap_ms = ms(overlap_ns(kernels, copies));
    t.dropped_records = e.dropped_records;
    t.collector_overhead_ms = ms(covered_ns(union_of(e.overheads)));
    return t;
}

}  // namespace sweetspot
