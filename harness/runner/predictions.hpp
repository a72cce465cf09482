#pragma once
// What the memory estimator says of a GPU cell before it runs, stored with it whether it ran or
// not, from the fixed costs (CUDA context, libraries) the database's cells measured on this GPU.
#include <optional>

#include "harness/matrix/cell.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/measure/memory_estimate.hpp"

namespace sweetspot {

// The fixed cost measured on this run's GPU and driver by the cells already in the database;
// none before there are such cells, and then no peak is predicted.
std::optional<FixedCost> fixed_cost_here(const GpuFacts& gpu, Database& db);

// Sets the cell's predicted allocations, and its device and host peaks where `fixed` is known.
// `reference_runs`: the runner expects the cell's check to compute its host reference (the database
// keeps none for it). The host memory the estimator accounts for is stored as the cell ran, with
// its reference forward where `reference_ran` (what the cell reported) says it did: the later
// calibrations subtract it from what the cell measured.
void add_predictions(const CellParams& cell, const std::optional<FixedCost>& fixed, bool reference_runs,
                     std::optional<bool> reference_ran, CellOutcome& out);

}  // namespace sweetspot
