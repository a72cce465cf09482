#include "harness/cli/traced_timing.hpp"

#include <vector>

#include "base/number_text.hpp"
#include "harness/measure/cell_outcome.hpp"

namespace sweetspot {

std::optional<TracedTiming> traced_timing(Database& db, std::int64_t cell_id) {
    std::vector<double> timed, traced;
    auto st = db.prepare("SELECT phase, latency_ms FROM iterations WHERE cell_id = ? AND phase IN ('timed', 'traced')");
    st.bind(1, cell_id);
    while (st.step()) (st.text(0) == "timed" ? timed : traced).push_back(st.real(1));
    if (timed.empty() || traced.empty()) return std::nullopt;
    return TracedTiming{LatencyStats::of(timed).median, LatencyStats::of(traced).median, static_cast<int>(traced.size())};
}

std::string traced_timing_text(const TracedTiming& t) {
    return "the traced iterations took " + fixed(t.traced_median_ms, 1) + " ms (median of " +
           std::to_string(t.traced_iterations) + ") against " + fixed(t.timed_median_ms, 1) + " ms timed: " +
           fixed(t.ratio(), 2) + " x";
}

}  // namespace sweetspot
