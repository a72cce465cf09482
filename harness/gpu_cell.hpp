#pragma once
// Measuring a cell on the GPU: the backend places the weights, the GPU forward runs on one
// compute stream, iterations are timed with CUDA events, and the logits are checked against
// the host forward.
#include "harness/cell.hpp"
#include "harness/store.hpp"

namespace sweetspot {

CellOutcome measure_gpu_cell(const CellParams& cell, bool allow_oversubscription);

}  // namespace sweetspot
