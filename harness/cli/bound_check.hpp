#pragma once
// Which cells of a results database ran faster than a bound they are divided by. A bound is a
// floor on time, so each is a fault of the bound or of the measurement to look into. The bounds
// are defined once, in analysis/bound.py (the report's); `summary` asks analysis/beaten_bounds.py.
#include <cstdint>
#include <string>
#include <vector>

namespace sweetspot {

struct BeatenBound {
    std::int64_t cell_id = 0;
    std::string bounds;          // "bound", "driver bound" or both
    std::string x_bound;         // latency ÷ bound, or "-"
    std::string x_driver_bound;  // latency ÷ driver bound, or "-"
};

struct BoundCheck {
    std::vector<BeatenBound> beaten;
    std::string not_checked;  // why the check could not run (no python3, no analysis/), or empty
};

BoundCheck check_bounds(const std::string& db_path);

}  // namespace sweetspot
