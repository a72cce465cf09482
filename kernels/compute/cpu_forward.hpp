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
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

class CpuForward {
public:
    // With `dropout` active, the family's dropouts apply their masks (dropout.hpp); a family
    // without dropout refuses it (std::invalid_argument).
    CpuForward(const ModelConfig& model, const WeightLayout& layout, int batch, int seq, const Dropout& dropout = {});
    ~CpuForward();
    CpuForward(CpuForward&&) noexcept;
    CpuForward& operator=(CpuForward&&) noexcept;

    // tokens: [batch, seq] ids < vocab; logits: [batch, seq, vocab]. Units are acquired in
    // order embedding, blocks, head and released right after use.
    void run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits);

    std::int64_t activation_bytes() const;
    // What activation_bytes() is for a forward of this shape, without making one.
    static std::int64_t activation_bytes_for(const ModelConfig& model, int batch, int seq);

private:
    ModelConfig model_;
    WeightLayout layout_;
    int batch_, seq_;
    std::unique_ptr<CpuFamilyForward> family_;
};

}  // namespace sweetspot
