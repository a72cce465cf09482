#include "backends/host_optimizer_state.hpp"

#include <algorithm>
#include <vector>

#include "backends/residency_plan.hpp"
#include "base/parallel_for.hpp"

namespace sweetspot {
namespace {

// `n` floats of host memory, zeroed by every core: the first touch spreads the work (a 13B
// model's moments are 52 GB each).
std::unique_ptr<float[]> host_floats(std::int64_t n) {
    std::unique_ptr<float[]> p(new float[static_cast<std::size_t>(n)]);
    parallel_for(n, [&](std::int64_t begin, std::int64_t end) { std::fill(p.get() + begin, p.get() + end, 0.0f); });
    return p;
}

}  // namespace

void HostOptimizerState::place(const WeightLayout& layout, const UnitFiller& fill,
                               std::span<const std::int64_t> staged_unit_bytes, cudaStream_t stream) {
    clear();
    const std::vector<std::int64_t> fp32_bytes = unit_bytes(layout, DType::fp32);
    packed_fp32_ = pack_units(fp32_bytes, kUnitAlignmentBytes);
    const std::int64_t floats = packed_fp32_.total_bytes / std::int64_t{sizeof(float)};
    master_ = host_floats(floats);
    m_ = host_floats(floats);
    v_ = host_floats(floats);
    if (fill.fills_device()) {
        const DeviceMemory scratch = allocate_device(*std::max_element(fp32_bytes.begin(), fp32_bytes.end()));
        for (int u = 0; u < layout.unit_count(); ++u) {
            fill.fill_device(u, DType::fp32, scratch.get(), stream);
            CUDA_CHECK(cudaMemcpyAsync(at(master_, u), scratch.get(), static_cast<std::size_t>(fp32_bytes[static_cast<std::size_t>(u)]),
                                       cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
        }
    } else {
        fill_units_in_place(layout, DType::fp32, fill, [&](int u) -> void* { return at(master_, u); });
    }
    staging_buffer_ = host_update_buffer_bytes(staged_unit_bytes);
    staging_bytes_ = host_update_staging_bytes(staged_unit_bytes);
    if (staging_bytes_ > 0) staging_ = allocate_pinned(staging_bytes_);
}

void HostOptimizerState::clear() {
    for (auto* state : {&master_, &m_, &v_}) state->reset();
    staging_ = PinnedHostMemory{};
    staging_buffer_ = staging_bytes_ = 0;
}

float* HostOptimizerState::at(const std::unique_ptr<float[]>& memory, int unit) const {
    return memory.get() + packed_fp32_.offsets[static_cast<std::size_t>(unit)] / std::int64_t{sizeof(float)};
}

UnitUpdate HostOptimizerState::staged(int unit, void* weights, const void* gradient) const {
    std::byte* const slot = staging_.get() + static_cast<std::int64_t>(unit % kHostUpdateSlots) * 2 * staging_buffer_;
    UnitUpdate update{weights, gradient, at(master_, unit), at(m_, unit), at(v_, unit)};
    update.host_gradient = slot;
    update.host_weights = slot + staging_buffer_;
    return update;
}

UnitUpdate HostOptimizerState::streamed(int unit, void* weights, void* gradient, CUevent_st* gradient_copied) const {
    UnitUpdate update{weights, gradient, at(master_, unit), at(m_, unit), at(v_, unit)};
    update.host_gradient = gradient;
    update.host_weights = weights;
    update.streamed = true;
    update.gradient_copied = gradient_copied;
    return update;
}

}  // namespace sweetspot
