#pragma once
// The float64 reference of a training step's numbers: the loss of a batch (mean cross-entropy of
// the next tokens over the vocabulary) and its gradient for every parameter, by plain loops in
// double (reference_ops, each op's backward beside its forward), each sequence the family's own
// (family_compute.hpp's reference_sequence_gradients). The yardstick the host and GPU training
// steps are checked against.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct ReferenceGradients {
    double loss = 0;  // mean over the real tokens' targets
    // dloss/dweight, one vector per unit, laid out as the unit's weights (WeightLayout offsets;
    // the padding between tensors stays 0).
    std::vector<std::vector<double>> units;
};

// units[i] points at unit i's fp32 weights; tokens and targets are [batch, seq]. With `dropout`
// active, the forward applies the family's dropouts with the masks every path draws (dropout.hpp)
// and the backward passes gradients through the same masks. Throws std::invalid_argument for
// inputs that do not fit together, a target outside the vocabulary and dropout for a family
// without it included.
ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, int batch, int seq,
                                       const Dropout& dropout = {});

// The same over a batch laid out as `shape` (tokens and targets: one per row): each sequence
// computed alone from its own rows, at positions 0 .. length − 1, its loss scaled by 1 / the
// batch's real tokens; padding rows' tokens and targets are not read. Dropout with a rectangular
// shape only (check_dropout).
ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, const BatchShape& shape,
                                       const Dropout& dropout = {});

// The same for one sequence (tokens and targets [seq]), without holding every gradient: each
// unit's is handed to `unit_done` as soon as it is final (head, blocks last to first, embedding),
// in a buffer the next unit reuses. A large model's check keeps a sample of each and the squares,
// not 8 bytes per parameter. Returns the loss.
double reference_gradients_by_unit(const ModelConfig& model, const WeightLayout& layout,
                                   std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                   std::span<const std::int32_t> targets, const Dropout& dropout,
                                   const std::function<void(int unit, std::span<const double> gradient)>& unit_done);

}  // namespace sweetspot
