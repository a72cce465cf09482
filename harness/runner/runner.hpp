#pragma once
// Sweeping a matrix: each cell in its own child process with a timeout, every outcome
// committed as one transaction, cells already `ok` in the database skipped (resume).
#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "harness/matrix/matrix.hpp"
#include "harness/runner/progress.hpp"

namespace sweetspot {

struct RunOptions {
    std::string db_path;
    bool rerun = false;                      // measure cells that are already ok again
    std::optional<double> timeout_override_s;
    bool allow_oversubscription = false;     // lifts the managed-memory guard (your own GPU only)
    bool collect = true;                     // CUPTI in traced iterations; false: `--collector none`
    bool force = false;                      // run cells predicted not to fit the GPU
    // The GPUs to spread cells over, one cell each at a time (CUDA_VISIBLE_DEVICES of each cell's
    // process); unset: every GPU the probe sees, or one worker that leaves CUDA_VISIBLE_DEVICES
    // alone where there are fewer than two.
    std::optional<std::vector<std::string>> gpus;
    bool share_link = false;                 // cells that stream over the host link may run side by side
    ProgressStyle progress;                  // how the running cells' phase and iteration are shown
    std::string command_line;
};

struct RunTotals {
    int ok = 0, failed = 0, timeout = 0, skipped = 0, invalid = 0;
    int resumed = 0;   // already ok in the database, not run again
    std::map<std::string, int> skipped_because;  // the skipped cells by their reason
    std::optional<std::int64_t> run_id;  // the run this sweep stored
    bool interrupted = false;            // SIGINT or SIGTERM
    // Why the sweep stopped before its cells were done: the database could not be written (a full
    // disk, a file made read-only, a lock held too long, a damaged page). The cells stored before
    // stay, and the same command resumes once the cause is gone.
    std::string error;
    // Every cell of the sweep skipped, none measured now or before: nothing was measured at all.
    bool nothing_measured() const;
    // 2 after an error, 130 when interrupted, 1 when a cell failed, timed out or was invalid, or
    // when nothing was measured at all, else 0.
    int exit_code() const;
};

// SIGINT and SIGTERM stop the sweep after killing the running cell; completed cells stay. Errors
// opening the database (not ours, damaged, locked by another sweep) or recording the run throw;
// once the run is recorded, an error writing a cell stops the sweep and is in the totals.
RunTotals run_matrix(const Matrix& matrix, const RunOptions& options, std::ostream& progress);

}  // namespace sweetspot
