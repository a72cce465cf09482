#include "backends/host_backend.hpp"

#include <stdexcept>
#include <string>

#include "backends/unit_storage.hpp"

namespace sweetspot {

void HostBackend::place(const WeightLayout& layout, const UnitFiller& fill) {
    units_.clear();
    for (const UnitLayout& u : layout.units)
        units_.push_back(std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(u.numel)));
    fill_units_in_place(layout, DType::fp32, fill, [&](int unit) { return units_[static_cast<std::size_t>(unit)].get(); });
}

const void* HostBackend::acquire(int unit) {
    if (unit < 0 || unit >= static_cast<int>(units_.size()))
        throw std::out_of_range("host backend: no unit " + std::to_string(unit));
    return units_[static_cast<std::size_t>(unit)].get();
}

}  // namespace sweetspot
