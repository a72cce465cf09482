#pragma once
// The table `sweetspot estimate` prints: for each cell, the memory it is predicted to need and
// its terms (memory_estimate.hpp), or why it cannot run at all.
#include <optional>
#include <ostream>
#include <vector>

#include "harness/cli/table.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/memory_estimate.hpp"

namespace sweetspot {

// `fixed`: the CUDA context and libraries' memory measured on the GPU the cells are meant for
// (measured_fixed_costs), added to each GPU cell's peak; without it the table has no peak.
// Other formats than text print the table alone, sizes in bytes (print_fits too).
void print_memory_estimates(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                            TableFormat format, std::ostream& out);

// `estimate --fit`: for each cell taken as a template, the largest batch and seq whose predicted
// peak fits `capacity` bytes, and the smallest budget its backend still runs at.
void print_fits(const std::vector<CellParams>& cells, std::int64_t capacity, const FixedCost& fixed, TableFormat format,
                std::ostream& out);

}  // namespace sweetspot
