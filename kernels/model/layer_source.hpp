#pragma once
// The seam between the compute and the backend that placed the weights: the compute asks for unit
// i, computes with it, and hands it back, in the order of the step's UnitSchedule. It never knows
// where the bytes live.
#include <cstdint>
#include <stdexcept>

struct CUevent_st;  // cudaEvent_t, without making this header depend on CUDA

namespace sweetspot {

class ItemProgress;  // base/item_progress.hpp

// Bytes a step moved across the host link, each way.
struct LinkBytes {
    std::int64_t to_host = 0, to_device = 0;
    bool operator==(const LinkBytes&) const = default;
};

// How many units' page-locked buffers a source that keeps the optimizer's state on the host hands
// out at a time (UnitUpdate::host_gradient): one unit's copies run while the other's update does.
inline constexpr int kHostUpdateSlots = 2;

// What the optimizer touches for one unit, laid out as the unit's weights (WeightLayout offsets).
struct UnitUpdate {
    void* weights = nullptr;         // the weights the compute reads, in the cell's dtype
    const void* gradient = nullptr;  // their gradient, in the same dtype
    // fp32 master weights, for a dtype narrower than fp32 (the update is made on them, the weights
    // rounded from them); nullptr in fp32, where the weights are their own master.
    float* master = nullptr;
    float* m = nullptr;  // AdamW's moments, fp32
    float* v = nullptr;
    // Where the backend keeps the optimizer's state in host memory (the `optimizer` axis's `host`):
    // master (in every dtype, the update starting from the host's copy), m and v are host
    // pointers, and the update runs on the host's cores through two page-locked buffers of the
    // unit's size in the dtype: the gradient copied into host_gradient, the new weights written
    // into host_weights and copied back. Such a backend hands out two units' buffers at a time
    // (unit u's are slot u % kHostUpdateSlots), so that the step may acquire unit u + 1, and start its
    // gradient's copy, before it releases unit u. Null where the state is beside the weights.
    void* host_gradient = nullptr;
    void* host_weights = nullptr;
    // Set where the backend streams the unit from host memory (explicit-copy's streamed units):
    // host_weights are the page-locked weights the next forward streams from (weights points there
    // too: the new weights land in place, nothing is copied up), and host_gradient the unit's own
    // page-locked gradient (gradient points there too), which the backend copied there itself once
    // the backward released the unit: gradient_copied is that copy's event, which the update waits
    // for instead of copying the gradient down. Such buffers are the unit's own, not a slot's.
    bool streamed = false;
    CUevent_st* gradient_copied = nullptr;
    bool on_host() const { return host_gradient != nullptr; }
};

class LayerSource {
public:
    virtual ~LayerSource() = default;
    // Pointer to unit `unit`'s weights, usable by the compute until release(unit).
    virtual const void* acquire(int unit) = 0;
    // The compute is done with the unit; the backend may evict it, reuse its slot, or prefetch.
    virtual void release(int unit) = 0;

    // Training, on a backend placed for a schedule that updates (UnitSchedule::updates): the
    // gradient buffer of an acquired unit, in the weights' dtype and layout, which the backward
    // overwrites.
    virtual void* gradient(int) { throw std::logic_error("this weight source holds no gradients"); }
    // The unit's weights, gradient and optimizer state for the update, until release_update(unit).
    virtual UnitUpdate acquire_update(int) { throw std::logic_error("this weight source holds no optimizer state"); }
    virtual void release_update(int) {}
    // An update runs beside the next forward (GpuTrainStep's overlapped host update), reporting to
    // `progress` (null: none): a source that reads a unit's host-held weights ahead of its acquire
    // (a streaming backend's look-ahead) waits for that unit's update first. The caller waits
    // before each acquire itself.
    virtual void follow_update(const ItemProgress*) {}
};

}  // namespace sweetspot
