#pragma once
// GPT-2 forward on the CPU in fp32 with OpenBLAS, built from the operations of cpu_ops.hpp: the
// host backend's compute and the numerical reference for every GPU backend.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

class CpuForward {
public:
    // With `dropout` active, GPT-2's dropouts apply their masks (dropout.hpp).
    CpuForward(const ModelConfig& model, const WeightLayout& layout, int batch, int seq, const Dropout& dropout = {});

    // tokens: [batch, seq] ids < vocab; logits: [batch, seq, vocab]. Units are acquired in
    // order embedding, blocks, head and released right after use.
    void run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits);

    std::int64_t activation_bytes() const;
    // What activation_bytes() is for a forward of this shape, without making one.
    static std::int64_t activation_bytes_for(const ModelConfig& model, int batch, int seq);

private:
    // One per kind of unit; each reads its weights from `unit` and updates the buffers.
    void embed(const float* unit, std::span<const std::int32_t> tokens);
    void block(int layer, const float* unit, const UnitLayout& unit_layout);
    void head(const float* unit, std::span<float> logits);

    ModelConfig model_;
    WeightLayout layout_;
    int batch_, seq_;
    Dropout dropout_;
    // Activation buffers, reused every call.
    std::vector<float> x_, ln_, qkv_, att_, y_, fc_, scores_;
};

}  // namespace sweetspot
