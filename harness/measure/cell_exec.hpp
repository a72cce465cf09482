#pragma once
// Measuring one cell, inside the cell's own child process: build the model, let the backend
// place the weights, warm up, time the iterations, check the output against the reference.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

// Why `cell` cannot run with this build of sweetspot (feature not implemented, parameters the
// backend cannot honour, no CUDA), or empty. Decided without touching a GPU, so the runner
// skips such cells without starting a process.
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
struct ExecuteOptions {
    bool allow_oversubscription = false;  // lifts the managed-memory guard
    bool collect = true;                  // CUPTI in traced iterations (`--collector cupti`)
    // For `sweetspot logits`: token ids (batch × seq) to run instead of the cell's random ones,
    // and where the logits of the last iteration go.
    std::span<const std::int32_t> tokens = {};
    std::vector<float>* logits = nullptr;
    // Text of the NVTX range the cell's ranges nest in: the run lives in the parent process, so
    // each cell process opens it (Nsight Systems shows it around the cell).
    std::string run_label = "run";
};
int execute_cell(const CellParams& cell, const std::string& scratch_db, const ExecuteOptions& options);

// Measures a runnable cell (cell_unsupported_reason is empty) in this process, on the host or the
// GPU as its backend says, and returns its outcome; throws when the measurement fails.
CellOutcome measure_cell(const CellParams& cell, const ExecuteOptions& options);

}  // namespace sweetspot
