#pragma once
// The table `sweetspot list` prints: one row per cell, a column for every axis that tells two
// cells apart (axes.hpp says which), its predicted device memory, whether the cell can run here,
// and the shape of each model.
#include <optional>
#include <ostream>
#include <vector>

#include "harness/cli/table.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/memory_estimate.hpp"

namespace sweetspot {

// With `fixed` (estimate --calibration's measured CUDA context and libraries), each GPU cell's
// predicted peak; without, the device memory it is predicted to allocate (memory_estimate.hpp).
// Other formats than text print the table alone, sizes in bytes.
void print_cell_list(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed, TableFormat format,
                     std::ostream& out);

// The axes `list` shows for these cells (axes.hpp's in_list rule), in the registry's order, and
// the column alignment of one.
std::vector<const Axis*> listed_axes(const std::vector<CellParams>& cells);
TextTable::Align column_align(const Axis& axis);

}  // namespace sweetspot
