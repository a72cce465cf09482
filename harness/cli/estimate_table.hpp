#pragma once
// The table `sweetspot estimate` prints: for each cell, the memory it is predicted to need and
// its terms (memory_estimate.hpp), or why it cannot run at all.
#include <ostream>
#include <vector>

#include "harness/matrix/cell.hpp"

namespace sweetspot {

void print_memory_estimates(const std::vector<CellParams>& cells, std::ostream& out);

}  // namespace sweetspot
