#pragma once
// The seam between a forward pass and the backend that placed the weights: the forward asks
// for unit i, computes with it, and hands it back. It never knows where the bytes live.
namespace sweetspot {

class LayerSource {
public:
    virtual ~LayerSource() = default;
    // Pointer to unit `unit`'s weights, usable by the forward's compute until release(unit).
    virtual const void* acquire(int unit) = 0;
    // The forward is done with the unit; the backend may evict it, reuse its slot, or prefetch.
    virtual void release(int unit) = 0;
};

}  // namespace sweetspot
