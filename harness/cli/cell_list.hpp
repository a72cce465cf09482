#pragma once
// The table `sweetspot list` prints: one row per cell, a column for every axis that tells two
// cells apart (axes.hpp says which), whether the cell can run here, and the shape of each model.
#include <ostream>
#include <vector>

#include "harness/matrix/cell.hpp"

namespace sweetspot {

void print_cell_list(const std::vector<CellParams>& cells, std::ostream& out);

}  // namespace sweetspot
