#include "kernels/model/unit_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sweetspot {
namespace {

void require_units(int units) {
    if (units < 1) throw std::invalid_argument("a unit schedule needs at least one unit, got " + std::to_string(units));
}

}  // namespace

UnitSchedule UnitSchedule::inference(int units) {
    require_units(units);
    std::vector<ScheduledAccess> a;
    for (int u = 0; u < units; ++u) a.push_back({u, UnitAccess::read});
    return {units, std::move(a)};
}

UnitSchedule UnitSchedule::training(int units) {
    require_units(units);
    std::vector<ScheduledAccess> a;
    for (int u = 0; u < units; ++u) a.push_back({u, UnitAccess::read});
    for (int u = units - 1; u >= 0; --u) a.push_back({u, UnitAccess::read});
    for (int u = 0; u < units; ++u) a.push_back({u, UnitAccess::update});
    return {units, std::move(a)};
}

std::vector<int> UnitSchedule::reads() const {
    std::vector<int> units;
    for (const ScheduledAccess& a : accesses_)
        if (a.access == UnitAccess::read) units.push_back(a.unit);
    return units;
}

bool UnitSchedule::updates() const {
    return std::any_of(accesses_.begin(), accesses_.end(), [](const ScheduledAccess& a) { return a.access == UnitAccess::update; });
}

}  // namespace sweetspot
