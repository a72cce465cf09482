#pragma once
// The optimizer's state in host memory (the `optimizer` axis's `host`, ZeRO-Offload's placement),
// as the backends that train with it hold it: fp32 master weights (in every dtype: the update
// starts from the host's copy), AdamW's two moments, laid out as pack_units of the fp32 units, and
// the page-locked staging that the units whose weights stay in device memory cross the link
// through (host_update_staging_bytes: unit u's buffers are slot u % kHostUpdateSlots's).
#include <cstdint>
#include <memory>
#include <span>

#include "backends/backend.hpp"
#include "backends/unit_storage.hpp"
#include "kernels/compute/cuda_resources.hpp"

namespace sweetspot {

class HostOptimizerState {
public:
    // Allocates and fills the state for `layout`: zeroed moments, and master weights filled in
    // fp32 from the filler the weights were made from, so that rounding them to the dtype gives the
    // weights' bits (by the filler's kernels into one unit of device scratch on `stream`, copied
    // down unit by unit, where it has them). The staging is sized for `staged_unit_bytes` (the
    // device-held units' bytes in the dtype; none when empty).
    void place(const WeightLayout& layout, const UnitFiller& fill, std::span<const std::int64_t> staged_unit_bytes,
               cudaStream_t stream);
    void clear();
    bool placed() const { return master_ != nullptr; }

    // The update of unit `unit` whose weights and gradient are in device memory: through the
    // staging slot of the unit.
    UnitUpdate staged(int unit, void* weights, const void* gradient) const;
    // The update of a streamed unit (UnitUpdate::streamed), whose page-locked weights and gradient
    // are its own, the gradient copied there by the backend (`gradient_copied`).
    UnitUpdate streamed(int unit, void* weights, void* gradient, CUevent_st* gradient_copied) const;
    std::int64_t staging_bytes() const { return staging_bytes_; }

private:
    float* at(const std::unique_ptr<float[]>& memory, int unit) const;

    PackedUnits packed_fp32_;
    std::unique_ptr<float[]> master_, m_, v_;
    PinnedHostMemory staging_;
    std::int64_t staging_buffer_ = 0, staging_bytes_ = 0;
};

}  // namespace sweetspot
