#pragma once
// The check of a training cell and the losses it records: its first step, from the initial weights, against the float64
// reference on the same weights, tokens, targets and dropout masks. Three things are compared, and
// the worst decides: the loss, every parameter's gradient (reference_gradients), and the update
// the optimizer made (the float64 clipping and AdamW applied to the cell's own gradients, so that
// AdamW's first step, which divides a gradient by its own magnitude, does not turn the gradients'
// rounding into sign flips of the update), judged against the update's size beyond the weights'
// own rounding.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/measure/logits_check.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// What a cell's first step did, in fp32, laid out per unit as the weights: the weights the
// forward read (rounded to the dtype), their gradients, and what the optimizer updated: the fp32
// master weights before and after, for a dtype narrower than fp32; the weights themselves, whose
// master they are, in fp32 (master_before and master_after empty).
struct FirstStep {
    double loss = 0;
    std::vector<std::vector<float>> weights_before, gradients, weights_after;
    std::vector<std::vector<float>> master_before, master_after;
};

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
    OutputCount count_nonfinite() const;
    // loss_first, grad_norm_first, loss_last, grad_norm_last.
    void add_results(CellOutcome& out) const;

private:
    std::vector<double> losses_, norms_;
    std::vector<bool> scaling_skipped_;
};

// Whether a cell's first step is checked: false when the model is too large for the float64
// reference's loops to finish in reasonable time (the cell is then stored as not checked, and its
// first step's state is not copied to the host).
bool training_check_runs(const CellParams& cell);
// The host bytes the copies of a checked first step take (FirstStep), 0 where none is checked.
std::int64_t first_step_copy_bytes(const CellParams& cell);

// Compares `first` with the float64 reference; nullopt when the model is too large for the
// reference's loops to finish in reasonable time (the cell is stored as not checked). `tolerance`
// is the relative error allowed for the path's dtype.
std::optional<LogitsCheck> check_training_step(const CellParams& cell, const WeightLayout& layout,
                                               std::span<const std::int32_t> tokens,
                                               std::span<const std::int32_t> targets, const TrainSettings& settings,
                                               const FirstStep& first, double tolerance);

}  // namespace sweetspot
