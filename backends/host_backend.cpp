#include "backends/host_backend.hpp"

#include <stdexcept>
#include <string>

namespace sweetspot {

void HostBackend::place(const WeightLayout& layout, const UnitFiller& fill) {
    units_.clear();
    units_.reserve(layout.units.size());
    for (std::size_t i = 0; i < layout.units.size(); ++i) {
        auto& u = units_.emplace_back(static_cast<std::size_t>(layout.units[i].numel));
        fill(static_cast<int>(i), u);
    }
}

const void* HostBackend::acquire(int unit) {
    if (unit < 0 || unit >= static_cast<int>(units_.size()))
        throw std::out_of_range("host backend: no unit " + std::to_string(unit));
    return units_[static_cast<std::size_t>(unit)].data();
}

}  // namespace sweetspot
