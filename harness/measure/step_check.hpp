#pragma once
// The check of a training cell and the losses it records: a checked step from the initial weights
// against the float64 reference on the same weights, tokens, targets and dropout masks. Four
// things are compared, and the worst decides: the loss, the global gradient norm, the gradients
// (reference_gradients), and the update the optimizer made (the float64 clipping and AdamW
// applied to the step's own gradients, so that AdamW's first step, which divides a gradient by
// its own magnitude, does not turn the gradients' rounding into sign flips of the update),
// judged against the update's size beyond the weights' own rounding.
//
// Where the float64 loops can afford the cell's own shape, the checked step is the cell's first
// step and every parameter is compared (a ragged batch's reference computes each sequence alone,
// its loss over the real tokens). Otherwise (the large models) it is a prefix step, exact in kind,
// only smaller: an extra step of the cell's own kernels, dtype and weights at batch 1 on the first
// positions of sample 0's tokens and targets, made before the cell's own steps through
// CheckStepSource (check_step_source.hpp), which leaves the backend's weights and optimizer state
// as they were; its gradients and update are compared on a sample of every tensor (and the
// embedding's rows the prefix touches), the norm over all of them.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/measure/logits_check.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// The shape of a cell's checked step: the cell's own BatchShape (full) where the float64 loops
// afford it within `max_macs` (forward and backward, about three forwards, each sequence alone),
// else the longest prefix of sequence 0's positions they afford, a rectangular batch of one
// sequence, at most kMostPrefixPositions (as the inference prefix check's) and at least
// min(sequence 0's length, kLeastPrefixPositions) so that the attention mixes positions (at one
// position its backward has nothing to check); nullopt when even that would exceed
// kMaxPrefixCheckMacs (the cell is stored as not checked).
inline constexpr int kLeastPrefixPositions = 4, kMostPrefixPositions = 16;
// About a minute of the float64 loops: GPT-2 1.5B's prefix of 4 positions takes a third of it.
inline constexpr double kMaxPrefixCheckMacs = 5e10;
struct TrainingCheckShape {
    BatchShape shape;  // the cell's, or BatchShape::rectangular(1, n): sequence 0's first n positions
    bool full = true;
};
std::optional<TrainingCheckShape> training_check_shape(const CellParams& cell, double max_macs = kMaxFloat64Macs);

// Which elements of each unit a check compares: runs of evenly spaced elements, each inside one
// tensor (whose weight decay it keeps).
struct SampleRun {
    std::int64_t offset = 0, count = 0, stride = 1;  // elements offset + k·stride, k < count
    bool decays = false;                             // decays_weights of its tensor
};
struct GradientSample {
    std::vector<std::vector<SampleRun>> units;
    std::int64_t values(int unit) const;  // the sampled values of one unit
    std::int64_t values() const;          // of all units
    // The sampled values of a unit held at `unit` (fp32, host memory), in the runs' order.
    std::vector<float> take(int unit, const float* values) const;
};
// Every element of every tensor (the full check).
GradientSample every_element(const WeightLayout& layout);
// At most kSampledPerTensor evenly spaced elements of each tensor, and the embedding's rows the
// prefix touches: its tokens' rows of the token table and, where the family has one, its
// positions' rows of the position table (the prefix check).
inline constexpr std::int64_t kSampledPerTensor = 256;
GradientSample prefix_sample(const ModelConfig& model, const WeightLayout& layout, std::span<const std::int32_t> tokens);

// What a checked step did, in fp32: the weights the forward read (rounded to the dtype), every
// unit's, for the reference; and, on the sample, the gradients and what the optimizer updated:
// the fp32 master weights before and after, for a dtype narrower than fp32; the weights
// themselves, whose master they are, in fp32.
struct CheckedStep {
    TrainingCheckShape check;
    std::vector<std::int32_t> tokens, targets;  // one per row of check.shape
    double loss = 0, grad_norm = 0;             // grad_norm: of the unscaled gradient, before clipping
    std::vector<std::vector<float>> weights;
    GradientSample sample;
    std::vector<std::vector<float>> gradients, updated_before, updated_after;  // per unit, sampled
};

// The token ids or targets of a cell's checked step, from the cell's (one per row of its shape):
// all of them, or the prefix's, rows 0 .. n − 1 (sequence 0 starts at row 0 in either packing).
std::vector<std::int32_t> checked_ids(const TrainingCheckShape& check, std::span<const std::int32_t> ids);

// Every step's loss and gradient norm, as a training cell records them: what its verdict counts
// (a NaN or infinite one fails the cell) and what it stores (the first and the last).
class StepLosses {
public:
    // `scaling_skipped`: fp16's loss scaling overflowed this step's scaled gradient on purpose and
    // made no update, so only its norm may be infinite.
    void add(double loss, double grad_norm, bool scaling_skipped = false) {
        losses_.push_back(loss);
        norms_.push_back(grad_norm);
        scaling_skipped_.push_back(scaling_skipped);
    }
    double last_loss() const { return losses_.back(); }
    double last_grad_norm() const { return norms_.back(); }
    OutputCount count_nonfinite() const;
    // loss_first, grad_norm_first, loss_last, grad_norm_last.
    void add_results(CellOutcome& out) const;

private:
    std::vector<double> losses_, norms_;
    std::vector<bool> scaling_skipped_;
};

// The key under which a results database keeps the float64 reference of a GPU training cell's
// prefix check (kept_reference_key's answer for `train`), or nullopt where none is kept: a full
// check (cheap to recompute), checkpoint weights (the file may change under its path), host cells
// (as for inference, the runner hands kept references to GPU cells only). The key
// hashes what the reference depends on: the model's name and every field of kModelFields
// (model_fields_text: its shape, kv heads, MLP width, norms' epsilon, rotary base and scaling,
// family), the synthetic weights' seed and dtype,
// the dropout masks, the prefix's tokens and targets and the sample. Not the cell's batch, variant
// or tf32: every such cell of a workload shares it, and its first cell computes it.
std::optional<std::string> kept_training_key(const CellParams& cell, std::span<const std::int32_t> tokens);

// The host bytes a cell's check holds whether or not it computes its reference: the copies of a
// full check's first step (CheckedStep; a prefix check's sample is a few hundred values a tensor).
std::int64_t checked_step_host_bytes(const CellParams& cell);
// The host bytes of a prefix check's reference, where it is computed rather than read from the
// database: every weight in fp32 and the float64 gradient of one unit; 0 for a full check.
std::int64_t check_reference_host_bytes(const CellParams& cell);
// Device or host bytes of a prefix step's scratch beside the backend's (CheckStepSource): one
// unit's gradient and weights in the dtype, its master weights (narrower dtypes) and moments in
// fp32, for the largest unit; 0 for a full check.
std::int64_t check_step_scratch_bytes(const CellParams& cell);

// The optimizer's settings of the cell's training steps: AdamW's defaults, and its clipping.
TrainSettings train_settings(const CellParams& cell);

// Compares `step` with the float64 reference. `tolerance` is the relative error allowed for the
// path's dtype; `settings` are the optimizer's the step ran with. A prefix check whose reference
// is kept (kept_training_key) returns it in `kept` (as one row of values: the loss, the gradient
// norm, then the sampled gradients, rounded to fp32 as the database keeps them, and compared so
// by every cell) or, given the kept reference an earlier cell left, compares with it instead of
// computing it: then `step.weights` may be empty.
LogitsCheck check_training_step(const CellParams& cell, const WeightLayout& layout, const TrainSettings& settings,
                                const CheckedStep& step, double tolerance,
                                const std::optional<ReferenceLogits>& kept = std::nullopt);

}  // namespace sweetspot
