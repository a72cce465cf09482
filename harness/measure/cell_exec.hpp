#pragma once
// Running one cell inside its own child process: whether it can run here, the backend's view of
// it, the measurement (measurement.hpp) with its outcome written for the parent, and the faults
// injected to test the harness.
#include <string>

#include "backends/backend.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/measurement.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

// Why `cell` cannot run in any build of sweetspot (feature not implemented, parameters the
// backend cannot honour), or empty: what the memory estimator needs, which works without CUDA.
std::string cell_impossible_reason(const CellParams& cell);
// cell_impossible_reason, then whether this build has the cell's backend (no CUDA), or empty.
// Decided without touching a GPU, so the runner skips such cells without starting a process.
std::string cell_unsupported_reason(const CellParams& cell);
// cell_unsupported_reason, then whether this machine has what the cell's backend needs (a GPU):
// what `list` shows as "runnable here" and what decides whether `run` measures the cell.
std::string cell_unavailable_reason(const CellParams& cell);

// The backend's view of a cell (no stream yet; the GPU cell adds it).
BackendConfig backend_config(const CellParams& cell);

// True for the backends that need a GPU.
bool uses_gpu(const CellParams& cell);

// Runs the cell and writes its outcome (status ok, invalid, skipped or failed with the reason)
// into the database at `scratch_db`. Returns the process exit code: 0 when an outcome was
// written, 1 when the measurement failed.
int execute_cell(const CellParams& cell, const std::string& scratch_db, const MeasureOptions& options);

// Measures a runnable cell (cell_unsupported_reason is empty) in this process, on the host or the
// GPU as its backend says, and returns its outcome; throws when the measurement fails.
CellOutcome measure_cell(const CellParams& cell, const MeasureOptions& options);

}  // namespace sweetspot
