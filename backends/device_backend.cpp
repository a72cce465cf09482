#include "backends/device_backend.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "backends/residency_plan.hpp"

namespace sweetspot {

DeviceBackend::DeviceBackend(const BackendConfig& config) : config_(config) {}

void DeviceBackend::place(const WeightLayout& layout, const UnitFiller& fill) {
    unit_bytes_ = unit_bytes(layout, config_.dtype);
    const std::int64_t total = std::accumulate(unit_bytes_.begin(), unit_bytes_.end(), std::int64_t{0});
    if (config_.budget_bytes < total) {
        throw std::invalid_argument("the device backend keeps all weights resident: the budget of " +
                                    std::to_string(config_.budget_bytes) + " bytes is below the " +
                                    std::to_string(total) +
                                    " bytes of weights (explicit-copy, uvm and uvm-prefetch stream what does not fit)");
    }
    packed_ = pack_units(unit_bytes_, kUnitAlignmentBytes);
    weights_ = allocate_device(packed_.total_bytes);
    std::byte* base = weights_.get();
    if (fill.fills_device()) {
        for (std::size_t u = 0; u < packed_.offsets.size(); ++u)
            fill.fill_device(static_cast<int>(u), config_.dtype, base + packed_.offsets[u], config_.compute_stream);
    } else {
        fill_units(layout, config_.dtype, fill, [&](int unit, const void* data, std::size_t bytes) {
            CUDA_CHECK(cudaMemcpy(base + packed_.offsets[static_cast<std::size_t>(unit)], data, bytes,
                                  cudaMemcpyHostToDevice));
        });
    }
    // A pageable cudaMemcpy may return before its DMA has landed, the fill kernels run on the
    // compute stream, and the compute stream does not synchronize with the legacy stream;
    // place() is outside the timed region, so wait for all of it here.
    CUDA_CHECK(cudaDeviceSynchronize());
}

const void* DeviceBackend::acquire(int unit) {
    if (unit < 0 || unit >= static_cast<int>(packed_.offsets.size()))
        throw std::out_of_range("device backend: no unit " + std::to_string(unit));
    return weights_.get() + packed_.offsets[static_cast<std::size_t>(unit)];
}

PlacementStats DeviceBackend::placement() const {
    PlacementStats s;
    s.resident_bytes = std::accumulate(unit_bytes_.begin(), unit_bytes_.end(), std::int64_t{0});
    s.device_weight_bytes = packed_.total_bytes;
    s.resident_units = static_cast<int>(unit_bytes_.size());
    return s;
}

}  // namespace sweetspot
