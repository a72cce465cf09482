#pragma once
// A model's forward on the CPU in fp32 with OpenBLAS, its family's (family_compute.hpp), built
// from the operations of cpu_ops.hpp: the host backend's compute and the numerical reference for
// every GPU backend.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/family_compute.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// Over a batch of any BatchShape: rectangular, ragged and padded (each padding row computed as a
// row of its own, attending to nothing, its logits finite but meaningless) or ragged and packed.
// Each sequence attends within its own rows and starts at position 0, so its logits are those of
// the sequence run alone.
class CpuForward {
public:
    // With `dropout` active, the family's dropouts apply their masks (dropout.hpp); a family
    // without dropout refuses it (std::invalid_argument), and so does a shape that is not
    // rectangular: the masks are numbered by (sequence, position) in rows of the stride, which a
    // ragged batch's rows do not follow.
    CpuForward(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape,
               const Dropout& dropout = {});
    ~CpuForward();
    CpuForward(CpuForward&&) noexcept;
    CpuForward& operator=(CpuForward&&) noexcept;

    // tokens: one id < vocab per row of the shape (a padding row's any valid id); logits: [rows,
    // vocab]. Units are acquired in order embedding, blocks, head and released right after use.
    void run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits);

    std::int64_t activation_bytes() const;
    // What activation_bytes() is for a forward of this shape, without making one.
    static std::int64_t activation_bytes_for(const ModelConfig& model, const BatchShape& shape);

private:
    ModelConfig model_;
    WeightLayout layout_;
    BatchShape shape_;
    std::unique_ptr<CpuFamilyForward> family_;
};

}  // namespace sweetspot
