#pragma once
// The table `sweetspot list` prints: one row per cell, a column for every axis that tells two
// cells apart (axes.hpp says which), its predicted device memory, whether the cell can run here,
// and the shape of each model.
#include <optional>
#include <ostream>
#include <vector>

#include "harness/cli/cell_columns.hpp"
#include "harness/cli/table.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/memory_estimate.hpp"

namespace sweetspot {

// With `fixed` (estimate --calibration's measured CUDA context and libraries), each GPU cell's
// predicted peak; without, the device memory it is predicted to allocate (memory_estimate.hpp).
// Other formats than text print the table alone; csv and json with the keys results/README.md
// documents.
void print_cell_list(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed, TableFormat format,
                     std::ostream& out);

// Adds the axis columns of a table of these cells (list, estimate): for people those `list` shows
// (axes.hpp's in_list rule), for other tools every axis with a `cells` column, under the column's
// name. Returns their axes, in the registry's order, for the rows' axis_field.
std::vector<const Axis*> add_axis_columns(DataTable& table, const std::vector<CellParams>& cells);

}  // namespace sweetspot
