#pragma once
// The gradients of a backend that streams some units through device slots and trains with the
// optimizer's state on the host (explicit-copy, uvm-prefetch), laid out as its residency plan lays
// out weights:
//   - a resident unit's gradient is its own device buffer (the plan's device layout, which puts the
//     gradient slots after the resident units);
//   - a streamed unit's gradient is made in one of the plan's S device gradient slots (the k-th
//     streamed unit the backward asks a gradient of takes gradient slot k % S). When the backward
//     releases the unit, a copy on the gradient stream (after the compute stream's work on it)
//     moves it to the unit's own page-locked host gradient (the plan's host layout) and records
//     copied(unit); the compute stream waits for that event before the slot's next gradient is
//     written.
// The update then reads a streamed unit's gradient in host memory once copied(unit) has passed.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backends/residency_plan.hpp"
#include "kernels/compute/cuda_resources.hpp"

namespace sweetspot {

class StreamedGradients {
public:
    // Allocates the device gradients and slots and the streamed units' page-locked gradients;
    // none is written before the first backward.
    void place(const ResidencyPlan& plan, std::span<const std::int64_t> unit_bytes);
    void clear();
    bool placed() const { return !copied_.empty(); }
    // Waits for the last step's copies out; no slot holds a gradient.
    void start_step();

    // Unit `unit`'s gradient: a resident unit's buffer; for a streamed unit the compute holds
    // (`held`), its gradient slot, taken at the first call of the step; outside that, once its copy
    // out has finished, its page-locked copy.
    void* gradient(int unit, bool held, cudaStream_t compute);
    // The compute released `unit`: a gradient in a slot is copied out. Returns the bytes copied.
    std::int64_t released(int unit, cudaStream_t compute);

    void* resident_gradient(int unit) const;
    void* host_gradient(int unit) const;
    CUevent_st* copied(int unit) const { return copied_[static_cast<std::size_t>(unit)].get(); }
    std::int64_t device_bytes() const { return device_.total_bytes; }
    std::int64_t host_bytes() const { return host_.total_bytes; }

private:
    std::byte* slot_pointer(int slot) const;

    std::vector<std::int64_t> unit_bytes_;
    std::vector<bool> resident_;
    int slots_ = 0;
    ResidencyPlan::DeviceLayout device_;
    ResidencyPlan::HostLayout host_;
    DeviceMemory device_gradients_;
    PinnedHostMemory host_gradients_;
    CudaStream stream_;
    std::vector<CudaEvent> copied_;   // per unit (streamed ones only used)
    std::vector<CudaEvent> written_;  // per gradient slot: the backward's work on it, on the compute stream
    std::vector<int> slot_of_;        // per unit: the gradient slot it holds in this backward, or -1
    std::vector<int> slot_unit_;      // per gradient slot: the unit that used it last this step, or -1
    int handed_ = 0;                  // streamed gradients handed out this step
};

}  // namespace sweetspot
