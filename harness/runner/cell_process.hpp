#pragma once
// One cell measured in its own child process: the process started with the cell's text, timed
// out or stopped as the sweep says, what it reported read back from its scratch database, what
// the runner alone knows added (how the process ended, its wall time and output), and the whole
// stored in the results database.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "harness/matrix/cell.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/runner/runner.hpp"
#include "harness/runner/scratch_dir.hpp"

namespace sweetspot {

// What a cell's process wrote for its cell, read by column name.
struct ReportedCell {
    CellStatus status = CellStatus::failed;
    std::string reason;
    std::optional<double> median_ms;
    std::optional<bool> reference_computed;
    bool measured_peak_rss = false;
    double phases_s = 0;  // the wall time its phases cover
};

// Where a cell's process runs: its scratch files (one set per worker), its GPU, its run's label,
// the reference logits the database keeps for its workload (handed to it in the scratch database),
// and who hears the phase or iteration it says it is in (status_channel.hpp) while it runs.
struct CellProcessSpec {
    std::string scratch_db, log;
    std::optional<std::string> gpu;
    std::string run_label;
    std::optional<ReferenceLogits> kept;
    std::function<void(const std::string&)> on_status;
};

struct CellProcessResult {
    std::optional<ReportedCell> reported;  // none when the process wrote nothing (it crashed first)
    // The runner's part of the outcome: the final status and reason, the process's facts, the
    // phases after the cell's own; the whole outcome where nothing was reported.
    CellOutcome outcome;
};

// Runs the cell's process to its end, its timeout, or the sweep's stop.
CellProcessResult run_cell_process(const CellParams& cell, const CellProcessSpec& spec, const RunOptions& options);

// Stores the cell: the row its process wrote, moved by column name with the runner's values over
// it, or the runner's outcome alone. Returns the cell_id.
std::int64_t store_cell_result(Store& store, std::int64_t run_id, int cell_index, const CellParams& cell,
                               const CellProcessSpec& spec, const CellProcessResult& result);

}  // namespace sweetspot
