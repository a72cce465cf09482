#pragma once
// The weight source of a training cell's prefix step (step_check.hpp): the backend's weights,
// read as they are, with gradients and an update of its own, so that the extra step leaves the
// backend's weights, gradients and optimizer state as the cell's own first step must find them.
// Each unit's gradient goes to one scratch unit the next unit reuses, and only its sampled
// elements are kept (as the step wrote them, in the dtype); the update runs on scratch copies of
// the unit's weights, master weights and moments, its gradient zero but for the sampled elements,
// so the sampled elements' update is exactly the step's and the rest is discarded. The scratch is
// one unit of each: check_step_scratch_bytes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/measure/step_check.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// How bytes move in the memory the backend keeps the weights in (the GPU's, through the CUDA
// runtime on the step's stream; the host's), and to and from the host.
class UnitMemory {
public:
    virtual ~UnitMemory() = default;
    virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // both in this memory
    virtual void zero(void* dst, std::size_t bytes) = 0;
    // `count` elements of `element` bytes, `stride` elements apart from `src` in this memory, to
    // contiguous host memory at `host`; scatter the reverse. Both return once the bytes moved,
    // after the work enqueued before them.
    virtual void gather(void* host, const void* src, std::size_t element, std::int64_t count, std::int64_t stride) = 0;
    virtual void scatter(void* dst, const void* host, std::size_t element, std::int64_t count, std::int64_t stride) = 0;
};

// Plain host memory (the host backend).
class HostUnitMemory final : public UnitMemory {
public:
    std::shared_ptr<void> allocate(std::size_t bytes) override;
    void copy(void* dst, const void* src, std::size_t bytes) override;
    void zero(void* dst, std::size_t bytes) override;
    void gather(void* host, const void* src, std::size_t element, std::int64_t count, std::int64_t stride) override;
    void scatter(void* dst, const void* host, std::size_t element, std::int64_t count, std::int64_t stride) override;
};

class CheckStepSource final : public LayerSource {
public:
    CheckStepSource(LayerSource& backend, const WeightLayout& layout, DType dtype, const GradientSample& sample,
                    UnitMemory& memory);

    const void* acquire(int unit) override { return backend_.acquire(unit); }
    void release(int unit) override;
    void* gradient(int unit) override;
    UnitUpdate acquire_update(int unit) override;
    void release_update(int unit) override;

    // Per unit, on the sample, in fp32: the gradients as the step wrote them (fp16's carry its
    // loss scale), and the updated weights (the master where there is one) before and after.
    std::vector<std::vector<float>> gradients() const;
    const std::vector<std::vector<float>>& updated_before() const { return before_; }
    const std::vector<std::vector<float>>& updated_after() const { return after_; }

private:
    // The sampled elements of `dtype` values at `unit` (this memory), as fp32.
    std::vector<float> gather(const void* unit, DType dtype, int u);

    LayerSource& backend_;
    const WeightLayout& layout_;
    DType dtype_;
    const GradientSample& sample_;
    UnitMemory& memory_;
    std::shared_ptr<void> gradient_, weights_, master_, m_, v_;
    int gradient_unit_ = -1;                      // the unit whose gradient the scratch holds
    std::vector<std::vector<std::byte>> raw_gradients_;  // sampled, in the dtype
    std::vector<std::vector<float>> before_, after_;
};

// A host cell's prefix step: CpuTrainStep at `step`'s shape on its ids, through a CheckStepSource
// over `backend` (the host backend, fp32); fills the step's sample, loss, norm, gradients and update.
void run_host_prefix_step(const CellParams& cell, const WeightLayout& layout, const TrainSettings& settings,
                          LayerSource& backend, CheckedStep& step);

}  // namespace sweetspot
