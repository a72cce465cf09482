#pragma once
// Measuring one cell, inside the cell's own child process: build the model, let the backend
// place the weights, warm up, time the iterations, check the output against the reference.
#include <string>

#include "harness/cell.hpp"

namespace sweetspot {

// Why `cell` cannot run in this build (unknown backend, feature not implemented, ...), or
// empty. The runner skips such cells without starting a process.
std::string cell_unavailable_reason(const CellParams& cell);

// Runs the cell and writes its outcome (status ok, invalid, skipped or failed with the reason)
// into the database at `scratch_db`. Returns the process exit code: 0 when an outcome was
// written, 1 when the measurement failed.
int execute_cell(const CellParams& cell, const std::string& scratch_db);

}  // namespace sweetspot
