#include "backends/streamed_gradients.hpp"

#include <utility>

#include "backends/unit_storage.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

void StreamedGradients::place(const ResidencyPlan& plan, std::span<const std::int64_t> unit_bytes) {
    unit_bytes_.assign(unit_bytes.begin(), unit_bytes.end());
    resident_ = plan.resident;
    slots_ = plan.slots;
    device_ = plan.device_layout(unit_bytes, kUnitAlignmentBytes);
    host_ = plan.host_layout(unit_bytes, kPinnedUnitAlignmentBytes);
    device_gradients_ = allocate_device(device_.total_bytes);
    host_gradients_ = host_.total_bytes > 0 ? PinnedHostMemory(host_.total_bytes, host_.starts, {}) : PinnedHostMemory{};
    copied_.clear();
    for (std::size_t u = 0; u < unit_bytes_.size(); ++u) copied_.emplace_back();
    written_.clear();
    for (int s = 0; s < slots_; ++s) written_.emplace_back();
    start_step();
}

void StreamedGradients::clear() {
    device_gradients_ = DeviceMemory{};
    host_gradients_ = PinnedHostMemory{};
    copied_.clear();
    written_.clear();
}

void StreamedGradients::start_step() {
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    handed_ = 0;
    slot_of_.assign(unit_bytes_.size(), -1);
    slot_unit_.assign(static_cast<std::size_t>(slots_), -1);
}

std::byte* StreamedGradients::slot_pointer(int slot) const {
    return device_gradients_.get() + device_.slots_offset + slot * device_.slot_stride;
}

void* StreamedGradients::resident_gradient(int unit) const {
    return device_gradients_.get() + device_.unit_offsets[static_cast<std::size_t>(unit)];
}

void* StreamedGradients::host_gradient(int unit) const {
    return host_gradients_.get() + host_.unit_offsets[static_cast<std::size_t>(unit)];
}

void* StreamedGradients::gradient(int unit, bool held, cudaStream_t compute) {
    const auto u = static_cast<std::size_t>(unit);
    if (resident_[u]) return resident_gradient(unit);
    if (!held) {
        copied_[u].synchronize();
        return host_gradient(unit);
    }
    if (slot_of_[u] < 0) {
        // The slot's gradient before this one must be out before the backward writes this one.
        const int slot = handed_++ % slots_;
        const int before = slot_unit_[static_cast<std::size_t>(slot)];
        if (before >= 0) copied_[static_cast<std::size_t>(before)].wait_on(compute);
        slot_unit_[static_cast<std::size_t>(slot)] = unit;
        slot_of_[u] = slot;
    }
    return slot_pointer(slot_of_[u]);
}

// After the compute stream's work on the gradient slot (enqueued before the release), on the
// gradient stream, so that the copies out overlap the copies in and the compute.
std::int64_t StreamedGradients::released(int unit, cudaStream_t compute) {
    const auto u = static_cast<std::size_t>(unit);
    if (!placed() || slot_of_[u] < 0) return 0;
    const NvtxRange range("gradient out " + WeightLayout::unit_name(unit, static_cast<int>(unit_bytes_.size())));
    const int slot = std::exchange(slot_of_[u], -1);
    const CudaEvent& written = written_[static_cast<std::size_t>(slot)];
    written.record(compute);
    written.wait_on(stream_.get());
    CUDA_CHECK(cudaMemcpyAsync(host_gradient(unit), slot_pointer(slot), static_cast<std::size_t>(unit_bytes_[u]),
                               cudaMemcpyDeviceToHost, stream_.get()));
    copied_[u].record(stream_.get());
    return unit_bytes_[u];
}

}  // namespace sweetspot
