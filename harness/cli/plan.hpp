#pragma once
// `sweetspot plan`: for each workload of a matrix, the setting that gives the most tokens/s within
// a memory limit. The estimator says which cells fit (memory_estimate.hpp, nothing run); a results
// database says how fast the fitting cells were (their measured tokens/s); the plan names the
// fitting cells nobody measured, so that a missing measurement never passes for a slow one.
//
// A workload is what a cell computes less the choices the plan makes among: the cells of one
// workload agree on every workload axis (axes.hpp's roles) but `variant` (every variant computes
// the same function) and `batch` (tokens/s is per token). The choices are those two and the
// placement axes: backend, budget, streams, prefetch and the rest.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/cli/table.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

struct PlanLimits {
    std::int64_t device_bytes = 0;              // what a cell's predicted need must not exceed
    std::optional<std::int64_t> host_bytes;     // and its predicted host peak, where given
};

// What a results database measured of a cell, by the cell's key.
struct MeasuredCell {
    double tokens_per_s = 0;
    std::optional<std::int64_t> gpu_peak_bytes;
};
// The `ok` cells of a results database that have a tokens/s, by key.
std::map<std::string, MeasuredCell> measured_cells(Database& results);

// One cell as the plan judged it (`cell`: its index in the matrix's cells, as `list` numbers it).
struct PlanCell {
    std::size_t cell = 0;
    std::string cannot_run;                       // why the cell cannot run anywhere; empty if it can
    std::int64_t need = 0;                        // predicted device need (0 for the host backend)
    std::optional<std::int64_t> host_need;        // predicted host peak, where known
    bool fits = false;
    std::optional<MeasuredCell> measured;
};

struct WorkloadPlan {
    std::vector<PlanCell> cells;                  // in matrix order
    std::optional<std::size_t> best;              // index into `cells`: the fastest measured that fits
    std::optional<std::size_t> beyond;            // the fastest measured that does not fit, if faster
    std::vector<std::size_t> unmeasured;          // indices into `cells` that fit and have no measurement
    std::optional<std::size_t> smallest;          // the runnable cell of least need, when none fits
};

// The cells grouped by workload, in order of each workload's first cell. `fixed` is needed where a
// cell uses a GPU (std::invalid_argument otherwise).
std::vector<WorkloadPlan> plan_workloads(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                                         const std::map<std::string, MeasuredCell>& measured,
                                         const PlanLimits& limits);

// The table `sweetspot plan` prints: one row per workload.
void print_plan(const std::vector<CellParams>& cells, const std::vector<WorkloadPlan>& plans,
                const PlanLimits& limits, TableFormat format, std::ostream& out);

}  // namespace sweetspot
