#include "backends/device_backend.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"

namespace sweetspot {

DeviceBackend::DeviceBackend(const BackendConfig& config) : config_(config) {}

void DeviceBackend::place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) {
    check_schedule(config_.backend, schedule);
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
    for (DeviceMemory* state : {&gradients_, &master_, &m_, &v_}) *state = DeviceMemory{};
    host_optimizer_.clear();
    if (schedule.updates()) place_training_state(layout, fill);
    // A pageable cudaMemcpy may return before its DMA has landed, the fill kernels run on the
    // compute stream, and the compute stream does not synchronize with the legacy stream;
    // place() is outside the timed region, so wait for all of it here.
    CUDA_CHECK(cudaDeviceSynchronize());
}

// The master weights are filled in fp32 from the same filler: rounding them to the dtype gives the
// weights' bits (UnitFiller), so master and weights start as one value.
void DeviceBackend::place_training_state(const WeightLayout& layout, const UnitFiller& fill) {
    gradients_ = allocate_device(packed_.total_bytes);
    packed_fp32_ = pack_units(unit_bytes(layout, DType::fp32), kUnitAlignmentBytes);
    if (config_.optimizer == StateHome::host) {
        host_optimizer_.place(layout, fill, unit_bytes_, config_.compute_stream);
        return;
    }
    m_ = allocate_device(packed_fp32_.total_bytes);
    v_ = allocate_device(packed_fp32_.total_bytes);
    CUDA_CHECK(cudaMemsetAsync(m_.get(), 0, static_cast<std::size_t>(packed_fp32_.total_bytes), config_.compute_stream));
    CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, static_cast<std::size_t>(packed_fp32_.total_bytes), config_.compute_stream));
    if (config_.dtype == DType::fp32) return;
    master_ = allocate_device(packed_fp32_.total_bytes);
    std::byte* base = master_.get();
    if (fill.fills_device()) {
        for (std::size_t u = 0; u < packed_fp32_.offsets.size(); ++u)
            fill.fill_device(static_cast<int>(u), DType::fp32, base + packed_fp32_.offsets[u], config_.compute_stream);
        return;
    }
    fill_units(layout, DType::fp32, fill, [&](int unit, const void* data, std::size_t bytes) {
        CUDA_CHECK(cudaMemcpy(base + packed_fp32_.offsets[static_cast<std::size_t>(unit)], data, bytes,
                              cudaMemcpyHostToDevice));
    });
}

std::size_t DeviceBackend::checked(int unit) const {
    if (unit < 0 || unit >= static_cast<int>(packed_.offsets.size()))
        throw std::out_of_range("device backend: no unit " + std::to_string(unit));
    return static_cast<std::size_t>(unit);
}

const void* DeviceBackend::acquire(int unit) { return weights_.get() + packed_.offsets[checked(unit)]; }

void* DeviceBackend::gradient(int unit) {
    const std::size_t u = checked(unit);
    if (gradients_.get() == nullptr) throw std::logic_error("device backend: no gradients: it was not placed for training");
    return gradients_.get() + packed_.offsets[u];
}

UnitUpdate DeviceBackend::acquire_update(int unit) {
    const std::size_t u = checked(unit);
    if (gradients_.get() == nullptr) throw std::logic_error("device backend: no optimizer state: it was not placed for training");
    if (config_.optimizer == StateHome::host)
        return host_optimizer_.staged(unit, weights_.get() + packed_.offsets[u], gradients_.get() + packed_.offsets[u]);
    const auto fp32_at = [&](const DeviceMemory& memory) {
        return reinterpret_cast<float*>(memory.get() + packed_fp32_.offsets[u]);
    };
    return {weights_.get() + packed_.offsets[u], gradients_.get() + packed_.offsets[u],
            master_.get() != nullptr ? fp32_at(master_) : nullptr, fp32_at(m_), fp32_at(v_)};
}

PlacementStats DeviceBackend::placement() const {
    PlacementStats s;
    s.resident_bytes = std::accumulate(unit_bytes_.begin(), unit_bytes_.end(), std::int64_t{0});
    s.device_weight_bytes = packed_.total_bytes;
    if (gradients_.get() != nullptr) {
        const int fp32_arrays = config_.optimizer == StateHome::host ? 0 : master_.get() != nullptr ? 3 : 2;
        s.training_state_bytes = packed_.total_bytes + fp32_arrays * packed_fp32_.total_bytes;
        if (config_.optimizer == StateHome::host) s.pinned_host_bytes = host_optimizer_.staging_bytes();
    }
    s.resident_units = static_cast<int>(unit_bytes_.size());
    return s;
}

}  // namespace sweetspot
