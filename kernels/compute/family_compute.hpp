#pragma once
// What each model family computes, declared once on the compute side as model_family.hpp declares
// its tensors: its fp32 host forward and training step, its float64 reference of both, what its
// GPU forward and training step take, and what it cannot run yet. Each family's entry lives in its own directory (gpt2/, llama/);
// family_compute.cpp maps ModelFamily to it. CpuForward, CpuBackprop, reference_forward and
// reference_gradients name no family.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/train_scratch.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/variant.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// One family's fp32 host forward over a fixed BatchShape, unit by unit (CpuForward hands it each
// unit's weights in the schedule's order), its activations in buffers it owns and reuses: the
// per-row ops over every row of the shape, attention within each sequence, positions from 0 in
// each.
class CpuFamilyForward {
public:
    virtual ~CpuFamilyForward() = default;
    // tokens: one per row of the shape.
    virtual void embed(const float* unit, const UnitLayout& layout, std::span<const std::int32_t> tokens) = 0;
    virtual void block(int layer, const float* unit, const UnitLayout& layout) = 0;
    // logits [rows, vocab], written in place.
    virtual void head(const float* unit, const UnitLayout& layout, std::span<float> logits) = 0;
    virtual std::int64_t activation_bytes() const = 0;
};

// One family's share of the host training step (cpu_gradients.hpp's CpuBackprop, which holds the
// logits, takes the loss and hands over the units): the forward over a fixed BatchShape keeping
// what its backward reads (per-row ops over every row, attention within each sequence, positions
// from 0 in each, as CpuFamilyForward), and that backward, unit by unit in reverse, each unit's
// gradient added to `grad` (zeroed by the caller, laid out as the unit's weights). A padding row
// whose logits' gradient is zero passes zeros back, so it adds nothing to any gradient.
class CpuFamilyBackprop {
public:
    virtual ~CpuFamilyBackprop() = default;
    // tokens: one per row of the shape.
    virtual void embed(const float* unit, const UnitLayout& layout, std::span<const std::int32_t> tokens) = 0;
    virtual void block(int layer, const float* unit, const UnitLayout& layout) = 0;
    // logits [rows, vocab], written in place.
    virtual void head(const float* unit, const UnitLayout& layout, std::span<float> logits) = 0;
    // dlogits: dloss/dlogits [rows, vocab].
    virtual void head_backward(const float* unit, const UnitLayout& layout, std::span<const float> dlogits,
                               float* grad) = 0;
    virtual void block_backward(int layer, const float* unit, const UnitLayout& layout, float* grad) = 0;
    // tokens: the last forward's.
    virtual void embed_backward(const UnitLayout& layout, std::span<const std::int32_t> tokens, float* grad) = 0;
    // Bytes of the buffers it holds.
    virtual std::int64_t buffer_bytes() const = 0;
};

// Where a float64 reference's backward adds each unit's gradient: `buffer(u)` while it computes it
// (the backward visits each unit once, head to embedding), `finished(u)` once it is done with it.
struct ReferenceGradientSink {
    std::function<std::vector<double>&(std::size_t unit)> buffer;
    std::function<void(std::size_t unit)> finished;
};

// The float64 logits [seq, vocab] of sequence `sequence` of the batch (dropout masks are indexed
// over the whole batch); units[i] is unit i's fp32 weights.
using ReferenceSequence = std::vector<double>(const ModelConfig& model, const WeightLayout& layout,
                                              std::span<const float* const> units,
                                              std::span<const std::int32_t> tokens, const Dropout& dropout,
                                              std::size_t sequence);

// The float64 loss of sequence `sequence` of the batch, summed over its targets, and its
// gradients, scaled by `per_target` (1 / the batch's real tokens, so the batch's loss is their
// mean), added to the sink's buffers.
using ReferenceSequenceGradients = double(const ModelConfig& model, const WeightLayout& layout,
                                          std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                          std::span<const std::int32_t> targets, const Dropout& dropout,
                                          std::size_t sequence, double per_target, const ReferenceGradientSink& sink);

struct FamilyCompute {
    // The host forward of `shape`; `dropout` already for_shape(stride, max_positions), active only
    // with a rectangular shape (check_dropout refuses it otherwise).
    std::unique_ptr<CpuFamilyForward> (*cpu_forward)(const ModelConfig& model, const BatchShape& shape,
                                                    const Dropout& dropout);
    // Its activation_bytes() without making one (the memory estimator's host term).
    std::int64_t (*cpu_activation_bytes)(const ModelConfig& model, const BatchShape& shape);
    ReferenceSequence* reference_sequence;
    // reference_sequence's multiply-adds over batch × seq (flops are twice this).
    double (*reference_macs)(const ModelConfig& model, int batch, int seq);
    // The host training step's forward and backward of `shape`; `dropout` as cpu_forward's.
    std::unique_ptr<CpuFamilyBackprop> (*cpu_backprop)(const ModelConfig& model, const BatchShape& shape,
                                                      const Dropout& dropout);
    // Its buffer_bytes() without making one (the memory estimator's host term).
    std::int64_t (*cpu_backprop_bytes)(const ModelConfig& model, const BatchShape& shape);
    // An independent computation from cpu_backprop's.
    ReferenceSequenceGradients* reference_sequence_gradients;
    // Why the family's cells cannot run on a GPU, or train there, yet; empty where they can.
    std::string_view no_gpu_forward;
    std::string_view no_gpu_training;
    // The fusions the family's GPU forward takes, and those it cannot run without (its only
    // attention taking its heads, say); a GPU cell's variant holds all of `gpu_required` and is
    // within `gpu_fusions`.
    Variant gpu_fusions;
    Variant gpu_required;
    // The fusions its GPU training step takes (within kTrainingFusions, which the step has kernels
    // for in some family, and within gpu_fusions): a GPU training cell's variant is within them.
    Variant gpu_training_fusions;
    // The fp32 scratch its GPU training step's norm and bias backwards need over `rows` rows
    // (train_arena.hpp).
    gpu::FamilyTrainScratch (*gpu_train_scratch)(const ModelConfig& model, int rows);
    // Whether its blocks apply the dropout settings (a family without dropout refuses them).
    bool dropout;
};

const FamilyCompute& compute_of(ModelFamily family);

// Throws std::invalid_argument, its text beginning with `who`, where `dropout` is active and the
// model's family has no dropout, or the shape is not rectangular: the masks are numbered by
// (sequence, position) in rows of one length, which a ragged batch's rows do not follow.
void check_dropout(std::string_view who, const ModelConfig& model, const BatchShape& shape, const Dropout& dropout);

}  // namespace sweetspot
