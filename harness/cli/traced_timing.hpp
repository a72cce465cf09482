#pragma once
// How a cell's traced iterations compare with its timed ones. They are different iterations: the
// collector runs in the traced ones, and what it records can slow them down (Unified Memory fault
// tracing most of all), so a timeline or trace of a traced iteration shows that iteration, not the
// latency the cell reports. Whatever shows one says which, by how much.
#include <cstdint>
#include <optional>
#include <string>

#include "harness/store/sqlite.hpp"

namespace sweetspot {

struct TracedTiming {
    double timed_median_ms = 0, traced_median_ms = 0;
    int traced_iterations = 0;
    double ratio() const { return traced_median_ms / timed_median_ms; }
};

// Nothing for a cell without timed or traced iterations.
std::optional<TracedTiming> traced_timing(Database& db, std::int64_t cell_id);

// "the traced iterations took 713.0 ms (median of 2) against 406.0 ms timed: 1.76 x"
std::string traced_timing_text(const TracedTiming& t);

}  // namespace sweetspot
