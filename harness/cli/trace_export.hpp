#pragma once
// `sweetspot trace DB --cell ID`: one traced iteration of a cell as a Chrome / Perfetto trace
// (JSON, loads in ui.perfetto.dev and chrome://tracing). Tracks: one per GPU stream (kernels and
// copies), Unified Memory migrations host→device and device→host, GPU page-fault groups (in lanes
// where groups overlap), and on the CPU side the NVTX ranges (nested as they were opened) and CPU
// page faults. Each event's category names its kind: kernel, memcpy, um.migration, um.gpu_fault,
// um.cpu_fault, nvtx. Enum fields (copy kind, migration cause, fault access type) are given by
// their labels in the ENUM_* tables. An arrow (flow) leads to each GPU page-fault group from the
// kernel that was running when the group began. The CUDA runtime and driver API calls are on a
// track per calling thread (category cuda_api; a driver call nested in the runtime call that made
// it), and an arrow leads from each launching call to the kernels and copies of its correlationId.
// A cell recorded before schema version 15 holds no API calls: its trace has neither, and says so
// in its metadata. Timestamps are microseconds from the start of the iteration. The trace's
// metadata holds the cell's parameters and how its traced iterations compare with its timed ones.
#include <cstdint>
#include <optional>
#include <ostream>

#include "harness/cli/traced_timing.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

struct TraceSummary {
    std::int64_t kernels = 0, copies = 0, migrations = 0, gpu_fault_groups = 0, cpu_faults = 0, ranges = 0;
    std::int64_t api_calls = 0;
    std::int64_t fault_flows = 0;   // arrows from a kernel to the page-fault groups it raised
    std::int64_t launch_flows = 0;  // arrows from an API call to the kernels and copies it launched
    bool launches_recorded = false;  // whether the cell's events hold its API calls (schema 15 on)
    int streams = 0;
    std::optional<TracedTiming> timing;  // the traced iterations against the timed ones
};

// Writes traced iteration `iteration` (0-based) of cell `cell_id`. Throws std::runtime_error when
// the cell or that iteration has no recorded events.
TraceSummary write_trace(Store& store, std::int64_t cell_id, int iteration, std::ostream& out);

}  // namespace sweetspot
