#include "backends/host_backend.hpp"

#include <stdexcept>
#include <string>

#include "backends/backend_registry.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

void HostBackend::place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) {
    check_schedule(BackendId::host, schedule);
    units_.clear();
    gradients_.clear();
    m_.clear();
    v_.clear();
    for (const UnitLayout& u : layout.units)
        units_.push_back(std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(u.numel)));
    fill_units_in_place(layout, DType::fp32, fill, [&](int unit) { return units_[static_cast<std::size_t>(unit)].get(); });
    if (!schedule.updates()) return;
    for (const UnitLayout& u : layout.units) {
        const auto n = static_cast<std::size_t>(u.numel);
        // The backward writes every gradient before it is read; the moments start at zero.
        gradients_.push_back(std::make_unique_for_overwrite<float[]>(n));
        m_.push_back(std::make_unique<float[]>(n));
        v_.push_back(std::make_unique<float[]>(n));
    }
}

std::size_t HostBackend::in_range(int unit) const {
    if (unit < 0 || unit >= static_cast<int>(units_.size()))
        throw std::out_of_range("host backend: no unit " + std::to_string(unit));
    return static_cast<std::size_t>(unit);
}

std::size_t HostBackend::checked(int unit, const Units& units, const char* what) const {
    const std::size_t u = in_range(unit);
    if (units.empty()) throw std::logic_error(std::string("host backend: no ") + what + ": it was not placed for training");
    return u;
}

const void* HostBackend::acquire(int unit) { return units_[in_range(unit)].get(); }

void* HostBackend::gradient(int unit) { return gradients_[checked(unit, gradients_, "gradients")].get(); }

UnitUpdate HostBackend::acquire_update(int unit) {
    const std::size_t u = checked(unit, gradients_, "optimizer state");
    return {units_[u].get(), gradients_[u].get(), nullptr, m_[u].get(), v_[u].get()};
}

}  // namespace sweetspot
