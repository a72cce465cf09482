#pragma once
// What each model family computes, declared once on the compute side as model_family.hpp declares
// its tensors: its fp32 host forward, its float64 reference, and what it cannot run yet. Each
// family's entry lives in its own directory (gpt2/, llama/); family_compute.cpp maps ModelFamily
// to it. CpuForward and reference_forward name no family.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/variant.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// One family's fp32 host forward over a fixed batch × seq, unit by unit (CpuForward hands it each
// unit's weights in the schedule's order), its activations in buffers it owns and reuses.
class CpuFamilyForward {
public:
    virtual ~CpuFamilyForward() = default;
    virtual void embed(const float* unit, const UnitLayout& layout, std::span<const std::int32_t> tokens) = 0;
    virtual void block(int layer, const float* unit, const UnitLayout& layout) = 0;
    // logits [batch·seq, vocab], written in place.
    virtual void head(const float* unit, const UnitLayout& layout, std::span<float> logits) = 0;
    virtual std::int64_t activation_bytes() const = 0;
};

struct FamilyCompute {
    // The host forward of batch × seq; `dropout` already for_shape(seq, max_positions).
    std::unique_ptr<CpuFamilyForward> (*cpu_forward)(const ModelConfig& model, int batch, int seq,
                                                    const Dropout& dropout);
    // Its activation_bytes() without making one (the memory estimator's host term).
    std::int64_t (*cpu_activation_bytes)(const ModelConfig& model, int batch, int seq);
    // The float64 logits [seq, vocab] of sequence `sequence` of the batch (dropout masks are
    // indexed over the whole batch); units[i] is unit i's fp32 weights.
    std::vector<double> (*reference_sequence)(const ModelConfig& model, const WeightLayout& layout,
                                              std::span<const float* const> units,
                                              std::span<const std::int32_t> tokens, const Dropout& dropout,
                                              std::size_t sequence);
    // reference_sequence's multiply-adds over batch × seq (flops are twice this).
    double (*reference_macs)(const ModelConfig& model, int batch, int seq);
    // Why the family's cells cannot run on a GPU, or train, yet; empty where they can.
    std::string_view no_gpu_forward;
    std::string_view no_training;
    // The fusions the family's GPU forward takes, and those it cannot run without (its only
    // attention taking its heads, say); a GPU cell's variant holds all of `gpu_required` and is
    // within `gpu_fusions`.
    Variant gpu_fusions;
    Variant gpu_required;
    // Whether its blocks apply the dropout settings (a family without dropout refuses them).
    bool dropout;
};

const FamilyCompute& compute_of(ModelFamily family);

}  // namespace sweetspot
