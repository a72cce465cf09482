#include "backends/uvm_backend.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"

namespace sweetspot {

UvmBackend::UvmBackend(const BackendConfig& config) : config_(config) {}

void UvmBackend::place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) {
    check_schedule(config_.backend, schedule);
    const auto bytes = unit_bytes(layout, config_.dtype);
    total_bytes_ = std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
    const std::int64_t largest = *std::max_element(bytes.begin(), bytes.end());
    if (budget_limited() && largest > config_.budget_bytes) {
        throw std::invalid_argument("the uvm backend needs a budget of at least one unit: the largest unit has " +
                                    std::to_string(largest) + " bytes, the budget is " +
                                    std::to_string(config_.budget_bytes) + " bytes");
    }
    weights_.reset();
    weights_.emplace(layout, config_.dtype, fill, config_.allow_oversubscription);
    if (config_.evict == UvmEvict::read_mostly)
        for (int u = 0; u < weights_->units(); ++u) weights_->set_read_mostly(u);

    released_.clear();
    for (int u = 0; u < weights_->units(); ++u) released_.emplace_back();
    lru_.clear();
    on_device_.assign(bytes.size(), false);
    in_use_.assign(bytes.size(), false);
    device_bytes_ = 0;
    CUDA_CHECK(cudaDeviceSynchronize());
}

void UvmBackend::reset_residency() {
    if (!weights_) return;
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    // Kernels faulted units in whatever the budget; all go back so every iteration faults the
    // same bytes in. Units already on the host make these calls cheap.
    for (int u = 0; u < weights_->units(); ++u) weights_->evict(u, config_.evict, evict_stream_.get());
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    lru_.clear();
    std::fill(on_device_.begin(), on_device_.end(), false);
    std::fill(in_use_.begin(), in_use_.end(), false);
    device_bytes_ = 0;
}

void UvmBackend::check_unit(int unit) const {
    if (!weights_ || unit < 0 || unit >= weights_->units())
        throw std::out_of_range("uvm backend: no unit " + std::to_string(unit));
}

const void* UvmBackend::acquire(int unit) {
    check_unit(unit);
    if (budget_limited()) make_room_for(unit);
    in_use_[static_cast<std::size_t>(unit)] = true;
    return weights_->unit_pointer(unit);
}

void UvmBackend::release(int unit) {
    check_unit(unit);
    // The unit's kernels are enqueued, not finished: an eviction waits on this event.
    released_[static_cast<std::size_t>(unit)].record(compute_stream());
    in_use_[static_cast<std::size_t>(unit)] = false;
}

// The driver's policy under oversubscription: least recently used out until the next unit fits.
void UvmBackend::make_room_for(int unit) {
    const auto u = static_cast<std::size_t>(unit);
    if (on_device_[u]) {
        lru_.erase(std::find(lru_.begin(), lru_.end(), unit));
        lru_.push_back(unit);
        return;
    }
    bool migrated = false;
    while (device_bytes_ + weights_->unit_bytes(unit) > config_.budget_bytes && !lru_.empty()) {
        const int victim = lru_.front();
        if (in_use_[static_cast<std::size_t>(victim)]) {
            throw std::logic_error("uvm backend: the budget of " + std::to_string(config_.budget_bytes) +
                                   " bytes cannot hold the units acquired and not yet released");
        }
        // A drop waits on the host for the victim's kernels; the victim is the least recently
        // used unit, so the host waits only if it runs that many units ahead of the GPU.
        weights_->evict_after(victim, released_[static_cast<std::size_t>(victim)], config_.evict, evict_stream_.get());
        migrated = migrated || config_.evict == UvmEvict::migrate;
        lru_.erase(lru_.begin());
        on_device_[static_cast<std::size_t>(victim)] = false;
        device_bytes_ -= weights_->unit_bytes(victim);
    }
    if (migrated) {
        // The driver must evict before it can fault a unit into a full GPU: the unit's kernels
        // (and so its faults) start after the migrations back to the host.
        evicted_.record(evict_stream_.get());
        evicted_.wait_on(compute_stream());
    }
    lru_.push_back(unit);
    on_device_[u] = true;
    device_bytes_ += weights_->unit_bytes(unit);
}

PlacementStats UvmBackend::placement() const {
    PlacementStats s;
    s.streamed_bytes = total_bytes_;
    s.device_weight_bytes = std::min(config_.budget_bytes, total_bytes_);
    s.streamed_units = weights_ ? weights_->units() : 0;
    return s;
}

}  // namespace sweetspot
